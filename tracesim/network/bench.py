"""Simulated nccl-tests (``tracesim netbench``): time, algbw and busbw of one collective.

Message sizes follow nccl-tests (per-rank buffer bytes; all_gather: the gathered output);
busbw = algbw x 2(n-1)/n for all_reduce and (n-1)/n for all_gather, reduce_scatter and
all_to_all, as nccl-tests defines it.
"""

from __future__ import annotations

from typing import Any

from tracesim.errors import InputError
from tracesim.network.ctas import bus_factor
from tracesim.network.model import NetworkModel, collective_time_ns
from tracesim.specs.cluster import ClusterSpec
from tracesim.strict import size_bytes

NETBENCH_COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv",
)


def parse_size(text: str) -> int:
    """``"8"``, ``"64K"``, ``"1M"``, ``"8G"`` (binary units, optional B / iB) -> bytes."""
    return size_bytes(text, "--sizes")


def parse_sizes(text: str) -> list[int]:
    """A comma list of sizes and ``MIN:MAX[:FACTOR]`` ranges (factor 2 by default)."""
    out: list[int] = []
    for tok in (t for t in text.split(",") if t.strip()):
        if ":" in tok:
            parts = tok.split(":")
            if len(parts) not in (2, 3):
                raise InputError(f"bad range {tok!r} (MIN:MAX or MIN:MAX:FACTOR)", "--sizes")
            lo, hi = parse_size(parts[0]), parse_size(parts[1])
            factor = 2.0
            if len(parts) == 3:
                try:
                    factor = float(parts[2])
                except ValueError:
                    raise InputError(f"bad factor in {tok!r}", "--sizes") from None
            if lo <= 0 or hi < lo or factor <= 1:
                raise InputError(f"bad range {tok!r} (need 0 < MIN <= MAX, FACTOR > 1)", "--sizes")
            s = float(lo)
            while s <= hi * (1 + 1e-12):
                out.append(int(round(s)))
                s *= factor
        else:
            out.append(parse_size(tok))
    if not out:
        raise InputError("no sizes given", "--sizes")
    return out


def bench_ranks(cluster: ClusterSpec, n: int | None, nodes: int | None) -> tuple[int, ...]:
    """Ranks of the benchmark: GPUs 0..n-1, or n/nodes GPUs on each of the first ``nodes``."""
    total = cluster.gpus
    n = total if n is None else n
    if n < 1 or n > total:
        raise InputError(f"{n} ranks: the cluster {cluster.name} has {total} GPUs", "--ranks")
    if n < 2:  # nothing crosses a link: every size would read 0 us
        raise InputError(f"a collective needs 2 or more ranks, not {n}"
                         + (f" (cluster {cluster.name} has one GPU)" if total == 1 else ""),
                         "--ranks")
    if nodes is None:
        return tuple(range(n))
    g = cluster.gpus_per_node
    if nodes < 1 or nodes > cluster.nodes:
        raise InputError(f"{nodes} nodes: the cluster has {cluster.nodes}", "--nodes")
    if n % nodes or n // nodes > g:
        raise InputError(
            f"{n} ranks do not spread evenly over {nodes} nodes of {g} GPUs", "--nodes"
        )
    per = n // nodes
    return tuple(node * g + i for node in range(nodes) for i in range(per))


def run_netbench(
    cluster: ClusterSpec,
    collective: str,
    ranks: tuple[int, ...],
    sizes: list[int],
    algo: str | None = None,
    protocol: str | None = None,
) -> list[dict[str, Any]]:
    """The rows of the table (``netbench --json`` ``rows``); ``protocol``: the NCCL
    protocols allowed (as NCCL_PROTO), default the spec's. An unknown ``collective`` is
    InputError naming ``--collective``."""
    if collective not in NETBENCH_COLLECTIVES:
        raise InputError(f"unknown collective {collective!r} (known: "
                         f"{', '.join(NETBENCH_COLLECTIVES)})", "--collective")
    choice = {collective: algo} if algo else None
    model = NetworkModel(cluster, choice, protocol=protocol)
    n = len(ranks)
    rows = []
    for size in sizes:
        name, proto = "none", "none"
        if n > 1:
            if collective == "send_recv":
                name, proto = "p2p", "Simple"
            else:
                cc = model.compiled(collective, ranks, size)
                name, proto = cc.algorithm, cc.protocol
        t_ns = collective_time_ns(cluster, collective, ranks, size, algo, protocol)
        algbw = size / t_ns if t_ns > 0 else 0.0
        rows.append(
            {
                "collective": collective,
                "ranks": n,
                "algo": name,
                "protocol": proto,
                "size_bytes": size,
                "time_s": t_ns * 1e-9,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * bus_factor(collective, n),
            }
        )
    return rows
