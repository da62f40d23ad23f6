"""The compiler's isolated per-byte times: solved once per canonical form of a phase.

Symmetric copies of a collective (the data-parallel rings of every tensor-parallel rank)
pose the same max-min problem up to the names of their links; the compiler solves it once
(:func:`tracesim.network.compiler._canonical`). Every copy must get the per-byte time its
own solve gives, to the bit, and problems that differ in how their flows share links must
not share a form.
"""

from __future__ import annotations

import numpy as np

from tracesim.catalog import load_cluster
from tracesim.network.collectives import ALGORITHMS
from tracesim.network.compiler import Compiler, _canonical, _isolated_ns_per_byte
from tracesim.network.running import CompiledPhase


def _phase(routes: list[list[int]]) -> CompiledPhase:
    lens = [len(r) for r in routes]
    ptr = np.zeros(len(routes) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    link = np.concatenate([np.asarray(r, dtype=np.int64) for r in routes])
    return CompiledPhase(ptr, link, np.ones(len(routes)), 1, 0.0)


def test_canonical_form_names_links_by_order_not_id():
    cap = np.full(32, 50.0)
    a = _phase([[0, 1], [2, 3]])
    shifted = _phase([[10, 11], [12, 13]])  # the same problem on other links
    shared = _phase([[0, 1], [1, 2]])  # the two flows meet on a link
    assert _canonical(a, cap) == _canonical(shifted, cap)
    assert _canonical(a, cap) != _canonical(shared, cap)
    slower = cap.copy()
    slower[12] = 25.0
    assert _canonical(a, cap) != _canonical(shifted, slower)  # capacities are part of it
    assert _isolated_ns_per_byte(shared, cap) == 2 * _isolated_ns_per_byte(a, cap)


def test_symmetric_copies_take_their_own_solve_to_the_bit():
    cluster = load_cluster("h100x128")
    comp = Compiler(cluster)
    algo = ALGORITHMS["ring"]
    # the data-parallel rings of the 8 local GPUs (one rank per node) and of a group with
    # two GPUs per node: translations of each other on the rail-optimised fabric
    groups = [tuple(range(i, 128, 8)) for i in range(8)]
    groups += [tuple(sorted(range(i, 128, 16)) + sorted(range(i + 4, 128, 16))) for i in range(4)]
    for coll in ("all_gather", "reduce_scatter", "all_reduce"):
        for g in groups:
            cc = comp.compile(algo, coll, g)
            own = sum(_isolated_ns_per_byte(ph, comp.topo.capacity) for ph in cc.phases)
            assert cc.ns_per_byte == own
    assert len(comp._per_byte) < 3 * len(groups)  # copies shared a solve
