"""The network model the replay engine talks to (:class:`tracesim.engine.comm.CommModel`).

:class:`NetworkModel` turns each collective into phases of flows with a registered
algorithm (:mod:`tracesim.network.collectives`), and runs the flows on a shared
:class:`~tracesim.network.flows.FlowNetwork`, so collectives of different groups that are in
flight at the same time share links by max-min fairness. Global rank ``r`` is GPU ``r``.
Simulated time is integer nanoseconds.

Per flow: bytes on the wire = weight x msg_bytes / efficiency, where the efficiency is the
algorithm's ``efficiency_inter`` if the flow's route crosses a NIC, else its
``efficiency_intra``. Per phase: latency = steps x (algorithm step latency + the largest
path latency among the phase's flows), paid before the phase's flows start.

Algorithm choice (like NCCL's tuner): a preference list per collective, from the ``algo``
argument, else the cluster spec's ``collectives.select``, else ``auto``. ``auto`` picks the
applicable algorithm with the smallest predicted uncongested time for that group and size
(each compiled collective's isolated time is affine in the size: L + k x bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import simpy

from tracesim.errors import InputError
from tracesim.network.background import BackgroundTraffic
from tracesim.network.collectives import ALGORITHMS, Algorithm, find
from tracesim.network.compiler import shared
from tracesim.network.ctas import capped
from tracesim.network.fastpath import FastRun, Plan, Reservations, make_plan
from tracesim.network.flows import FlowNetwork
from tracesim.network.protocols import generation
from tracesim.network.running import (
    MAX_ROUNDS,
    CommRecord,
    CompiledCollective,
    CompiledPhase,
    Runner,
    chunk_bytes,
    merge_compiled,
    repeated,
)
from tracesim.network.variants import protocols_for
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.collectives import parse_protocols

#: collectives the model understands (``barrier`` runs as a zero-byte all-reduce)
COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
    "send_recv", "barrier",
)


class NetworkModel:
    """Flow-level network model of a cluster (implements the engine's ``CommModel``).

    Args:
        cluster: the target cluster.
        algo: per-collective algorithm choice (``{"all_reduce": "ring"}``; a value may be
            ``"auto"`` or a comma-separated preference list); overrides the spec's
            ``collectives.select``.
        phases: how a phase of k identical steps runs. ``"aggregate"``: one round (k step
            latencies, then flows carrying all k steps' bytes). ``"steps"``: k rounds of one
            latency and 1/k of the bytes, each ending when its slowest flow ends (a ring
            coupled step by step). ``"auto"`` (default, as DESIGN.md says): before each
            round, aggregate the remaining steps if none of the phase's links carries other
            traffic, else run ``ceil(k / max_rounds)`` of them and look again.
        max_rounds: in ``auto`` mode, the most rounds a phase of k steps takes while other
            traffic shares its links (default :data:`~tracesim.network.running.MAX_ROUNDS`;
            phases of up to that many steps still run step by step).
        keep_records: keep a :class:`CommRecord` per finished operation in ``records``
            (tests, tools); a replay that never reads them passes False (a full 1,024-GPU
            replay finishes about two million operations).
        fast_path: time operations alone on their links without flows
            (:mod:`tracesim.network.fastpath`; the same times, fewer events).
        protocol: the NCCL protocols ring and tree may use (``"LL128"``, ``"LL,Simple"``,
            ``"auto"``; as NCCL_PROTO); default: the spec's ``collectives.protocol``, else all.
        relay_hops: keep the NVLink hop of a PXN-relayed ring / tree edge or transfer in its flow
            (default: left out, its latency kept; :class:`~tracesim.network.compiler.Compiler`).
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        algo: Mapping[str, str] | None = None,
        *,
        phases: str = "auto",
        max_rounds: int = MAX_ROUNDS,
        keep_records: bool = True,
        fast_path: bool = True,
        protocol: str | Sequence[str] | None = None,
        relay_hops: bool = False,
    ):
        self.cluster = cluster
        self._shared = shared(cluster, relay_hops)
        self.topology = self._shared.topo
        self.router = self._shared.router
        self.algo = dict(algo or {})
        for coll, names in self.algo.items():
            _validate_choice(coll, names)
        if protocol is None:
            self.protocols = cluster.collectives.protocol
        else:
            try:
                self.protocols = parse_protocols(protocol if isinstance(protocol, str) else tuple(protocol))
            except ValueError as e:
                raise InputError(str(e), "--protocol") from None
        if phases not in ("auto", "aggregate", "steps"):
            raise ValueError(f"phases must be auto, aggregate or steps, not {phases!r}")
        self.phases = phases
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {max_rounds}")
        self.max_rounds = max_rounds
        self.env: simpy.Environment | None = None
        #: the cluster's background collectives, once attached (tracesim.network.background)
        self.background: BackgroundTraffic | None = None
        self.flows = FlowNetwork(self.topology.capacity)
        self.records: list[CommRecord] = []
        self.keep_records = keep_records
        self.fast_path = fast_path
        # per-call caches: the chosen compiled collective of (collective, ranks, bytes,
        # algorithm) and the compiled transfer of (src, dst); the flow network also keys its
        # cache of isolated rates on these (persistent) route arrays
        self._chosen: dict[tuple, CompiledCollective] = {}
        self._p2p: dict[tuple[int, int], CompiledCollective] = {}
        self._images: dict[tuple[int, str, int, str, int], tuple[object, CompiledCollective | None]] = {}
        # operations of communicators with a CTA cap (collectives.max_ctas): the capped
        # variant of (compiled collective, group kind), kept with its base
        self._capped: dict[tuple[int, str], tuple[CompiledCollective, CompiledCollective]] = {}
        self._gen = generation(cluster.device)
        # the fast path's plan of (compiled collective, bytes) and its id in the reservations
        self._plans: dict[tuple[int, float], tuple[CompiledCollective, Plan | None, int]] = {}

    # ------------------------------------------------------------------ CommModel

    def attach(self, env: simpy.Environment) -> None:
        """Bind to the engine's environment (integer ns)."""
        self.env = env
        self.flows.attach(env)
        self.flows.reservations = Reservations(len(self.topology.capacity))
        self._plans.clear()  # plan ids belong to the reservations
        jobs = [b for b in self.cluster.background if not b.is_load]
        self.background = BackgroundTraffic(self, env, jobs) if jobs else None

    def bind_activity(self, active: Callable[[], bool]) -> None:
        """The engine's ``active()``: whether the replayed job has anything in flight (the
        cluster's background collectives stop when it has not)."""
        if self.background is not None:
            self.background.bind(active)

    def collective(
        self, collective: str, ranks: tuple[int, ...], msg_bytes: int, group_kind: str = "",
        algorithm: str = "", chunks: int = 1,
    ) -> simpy.Event:
        """Start ``collective`` over global ``ranks`` now; the event fires when it is done.
        ``algorithm``: the one the task asks for (e.g. ``userbuffers``), else chosen.
        ``chunks`` > 1: ``chunks`` operations of ``msg_bytes / chunks`` back to back, each
        chosen, timed and paying its latency as one such operation alone (:func:`repeated`)."""
        env = self._env()
        if type(ranks) is not tuple:
            ranks = tuple(int(r) for r in ranks)
        if collective == "barrier":
            collective, msg_bytes = "all_reduce", 0
        part = chunk_bytes(msg_bytes, chunks)
        key: tuple = ((collective, ranks, msg_bytes, algorithm, chunks) if chunks > 1
                      else (collective, ranks, msg_bytes, algorithm))  # numpy integers hash as ints
        cc = self._chosen.get(key)
        if cc is None:
            ranks = tuple(int(r) for r in ranks)
            if collective not in COLLECTIVES:
                raise ValueError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
            self._check_ranks(ranks)
            if len(ranks) <= 1:
                return env.timeout(0)
            cc = self._chosen[key] = repeated(
                self.compiled(collective, ranks, int(part), algorithm), chunks)
        cc = self._cap(cc, group_kind, collective, ranks, chunks)
        return self._run(cc, collective, group_kind, len(ranks), part)

    def p2p(self, src: int, dst: int, nbytes: int, group_kind: str = "") -> simpy.Event:
        """Start a send of ``nbytes`` from rank ``src`` to rank ``dst``; fires on arrival.
        ``group_kind``: the communicator's (its CTA cap applies, ``collectives.max_ctas``)."""
        env = self._env()
        cc = self._compiled_p2p(src, dst)
        if cc is None:
            return env.timeout(0)
        cc = self._cap(cc, group_kind, "send_recv", (src, dst))
        return self._run(cc, "send_recv", "p2p", 2, nbytes)

    def _cap(self, cc: CompiledCollective, kind: str, collective: str,
             ranks: Sequence[int], chunks: int = 1) -> CompiledCollective:
        """``cc`` (``chunks`` operations back to back) as the CTA cap of communicator ``kind``
        lets it run (:mod:`tracesim.network.ctas`; itself where there is no cap); the same
        object for the same ``cc`` and kind."""
        ctas = self.cluster.collectives.ctas(kind) if kind else None
        if ctas is None:
            return cc
        hit = self._capped.get((id(cc), kind))
        if hit is None or hit[0] is not cc:
            nodes = len(self._shared.group(tuple(int(r) for r in ranks)).nodes)
            hit = self._capped[(id(cc), kind)] = (cc, capped(
                cc, ctas, self._gen, nodes, collective, len(ranks), self.topology.capacity, chunks))
        return hit[1]

    def _compiled_p2p(self, src: int, dst: int) -> CompiledCollective | None:
        """The compiled transfer src -> dst (cached), None when src == dst."""
        cc = self._p2p.get((src, dst))
        if cc is None:
            self._check_ranks((src, dst))
            if src == dst:
                return None
            algo = ALGORITHMS["p2p"]
            p = self._shared.params(algo)
            route = self.router.route(src, dst)
            inter = self.router.crosses_nic(route)
            eff = p.efficiency_inter if inter else p.efficiency_intra
            assert eff and p.step_latency_us is not None
            lat = p.step_latency_us * 1000.0 + self.router.latency_ns(route)
            if inter and self._shared.drops_relay_hops(algo):
                route = self.router.without_relay_hops(route)
            cp = CompiledPhase(
                np.array([0, len(route)], dtype=np.int64), route,
                np.array([1.0 / eff]), 1, lat,
            )
            cc = self._p2p[(src, dst)] = CompiledCollective("p2p", (cp,), lat, 0.0)
        return cc

    # ------------------------------------------------------------------ symmetric copies

    def collective_images(
        self, collective: str, groups: Sequence[tuple[int, ...]], msg_bytes: int, group_kind: str = "",
        algorithm: str = "", chunks: int = 1,
    ) -> simpy.Event:
        """Run ``collective`` on every group of ``groups`` at once (symmetric copies of one
        operation, e.g. the TP all-reduces of all data-parallel replicas of a stage): each
        phase starts the flows of all copies together, so they load the links they share.
        The algorithm is the one chosen for ``groups[0]``; the event fires when every copy
        has finished. Pass the same ``groups`` object again to reuse the merged phases.
        ``chunks``: as for :meth:`collective`."""
        env = self._env()
        if collective == "barrier":
            collective, msg_bytes = "all_reduce", 0
        part = chunk_bytes(msg_bytes, chunks)
        key = (id(groups), collective, int(msg_bytes), algorithm, chunks)
        hit = self._images.get(key)
        if hit is not None and hit[0] is groups:
            cc = hit[1]
        else:
            one = int(part)
            first = self.compiled(collective, tuple(groups[0]), one, algorithm)
            algo = ALGORITHMS[first.algorithm]
            parts = [first]
            for g in groups[1:]:
                if algo.check(self._shared.group(tuple(g)), collective) is not None:
                    parts = []
                    break
                parts.append(self._shared.variant(algo, first.protocol, collective, tuple(g), one))
            merged = merge_compiled(parts) if parts else None
            cc = None if merged is None else repeated(merged, chunks)
            self._images[key] = (groups, cc)
        if cc is None:  # copies that do not compile alike: run them side by side
            return simpy.AllOf(env, [self.collective(collective, tuple(g), msg_bytes, group_kind,
                                                     algorithm, chunks) for g in groups])
        cc = self._cap(cc, group_kind, collective, groups[0], chunks)
        return self._run(cc, collective, group_kind, len(groups[0]), part)

    def p2p_images(self, pairs: Sequence[tuple[int, int]], nbytes: int,
                   group_kind: str = "") -> simpy.Event:
        """Point-to-point transfers of ``nbytes`` between every (src, dst) of ``pairs`` at
        once (symmetric copies); fires when the last has arrived. Pass the same ``pairs``
        object again to reuse the merged routes."""
        env = self._env()
        key = (id(pairs), "", 0, "", 1)
        hit = self._images.get(key)
        if hit is not None and hit[0] is pairs:
            cc = hit[1]
        else:
            parts = [c for c in (self._compiled_p2p(int(a), int(b)) for a, b in pairs) if c is not None]
            cc = merge_compiled(parts) if parts else None
            self._images[key] = (pairs, cc)
        if cc is None:
            return env.timeout(0)
        cc = self._cap(cc, group_kind, "send_recv", pairs[0])
        return self._run(cc, "send_recv", "p2p", 2, nbytes)

    def links_of(self, collective: str, ranks: Sequence[int], msg_bytes: int,
                 algorithm: str | None = None) -> np.ndarray:
        """The distinct link ids a collective's flows cross (with ``algorithm``, else the
        algorithm this model would choose)."""
        ranks = tuple(int(r) for r in ranks)
        if collective == "barrier":
            collective, msg_bytes = "all_reduce", 0
        if len(ranks) <= 1:
            return np.zeros(0, dtype=np.int64)
        if algorithm is None:
            algorithm = self.compiled(collective, ranks, msg_bytes).algorithm
        return self._shared.links(ALGORITHMS[algorithm], collective, ranks)

    def links_of_p2p(self, src: int, dst: int) -> np.ndarray:
        """The link ids a transfer src -> dst crosses."""
        cc = self._compiled_p2p(int(src), int(dst))
        return np.zeros(0, dtype=np.int64) if cc is None else np.asarray(cc.phases[0].e_link, dtype=np.int64)

    # ------------------------------------------------------------------ selection

    def select(self, collective: str, ranks: Sequence[int], msg_bytes: int) -> str:
        """The algorithm ``collective`` of ``msg_bytes`` on ``ranks`` would use."""
        return self.compiled(collective, tuple(int(r) for r in ranks), msg_bytes).algorithm

    def estimate_ns(self, collective: str, ranks: Sequence[int], msg_bytes: int,
                    algorithm: str = "", group_kind: str = "") -> float:
        """Predicted uncongested time (ns) of a collective, without simulating it
        (``group_kind``: its communicator's CTA cap applies)."""
        ranks = tuple(int(r) for r in ranks)
        cc = self.compiled(collective, ranks, msg_bytes, algorithm)
        return self._cap(cc, group_kind, collective, ranks).estimate_ns(msg_bytes)

    def compiled(self, collective: str, ranks: tuple[int, ...], msg_bytes: int,
                 algorithm: str = "") -> CompiledCollective:
        """Choose the algorithm and return the compiled collective (cached per group):
        ``algorithm`` when given and it applies to the group, else by the preferences."""
        if collective == "barrier":
            collective, msg_bytes = "all_reduce", 0
        if collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
        prefs = self._preferences(collective)
        if algorithm:
            if find(algorithm) is None:
                raise ValueError(f"unknown algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
            prefs = (algorithm, *prefs)
        sh = self._shared
        grp = sh.group(ranks)
        reasons = []
        for name in prefs:
            if name == "auto":
                algos = [a for a in ALGORITHMS.values()
                         if collective in a.auto and a.check(grp, collective) is None]
            else:
                algo = ALGORITHMS[name]
                why = algo.check(grp, collective)
                if why is not None:
                    reasons.append(why)
                    continue
                algos = [algo]
            bases = {a.name: sh.compile(a, collective, ranks) for a in algos}
            terms = {k: (cc.fixed_ns, cc.ns_per_byte) for k, cc in bases.items()}
            best: tuple[Algorithm, str] | None = None
            best_ns = 0.0
            for a in algos:  # registry order, then protocol order, breaks ties
                cc = bases[a.name]
                # NCCL's own rating of the algorithm's bandwidth (e.g. trees), as a factor
                adj = (a.selection_ns(grp, 0.0, cc.ns_per_byte, 1.0, terms) / cc.ns_per_byte
                       if cc.ns_per_byte > 0 else 1.0)
                for proto in protocols_for(a.name, self.protocols):
                    fixed, per_byte = sh.predicted(a, proto, collective, ranks, msg_bytes)
                    t = fixed + per_byte * adj * msg_bytes
                    if best is None or t < best_ns:
                        best, best_ns = (a, proto), t
            if best is not None:
                return sh.variant(best[0], best[1], collective, ranks, msg_bytes)
            if name == "auto":
                reasons.append(f"no algorithm implements {collective}")
            else:
                reasons.append(f"{name} cannot run protocol {','.join(self.protocols)}")
        raise InputError(
            f"no applicable algorithm for {collective} on {len(ranks)} ranks over "
            f"{len(grp.nodes)} node(s) from {', '.join(prefs)}: {'; '.join(reasons)}",
            "--algo",
        )

    def _preferences(self, collective: str) -> tuple[str, ...]:
        if collective in self.algo:
            return _split(self.algo[collective])
        return self.cluster.collectives.selection(collective)

    # ------------------------------------------------------------------ running

    def _env(self) -> simpy.Environment:
        if self.env is None:
            raise RuntimeError("NetworkModel.attach(env) must be called first")
        return self.env

    def _check_ranks(self, ranks: Sequence[int]) -> None:
        n = self.cluster.gpus
        for r in ranks:
            if not 0 <= r < n:
                raise ValueError(f"rank {r} outside the cluster's {n} GPUs")

    def _run(self, cc: CompiledCollective, collective: str, kind: str, n: int, msg_bytes: float) -> simpy.Event:
        """Run ``cc``'s phases one after another; the event fires when the last has ended.
        An operation alone on its links takes the fast path (:mod:`tracesim.network.fastpath`)."""
        fl = self.flows
        if self.fast_path and self.phases != "steps":
            key = (id(cc), msg_bytes)
            hit = self._plans.get(key)
            res = fl.reservations
            if hit is None or hit[0] is not cc:
                if len(self._plans) >= 1 << 16:
                    self._plans.clear()
                plan = make_plan(fl, cc, msg_bytes)
                hit = self._plans[key] = (cc, plan, -1 if plan is None else res.register(plan.links))
            plan = hit[1]
            if plan is not None and res.free(hit[2]) and fl.idle(plan.links):
                return FastRun(self, plan, hit[2], collective, kind, n, msg_bytes, res).done
        return Runner(self, cc, collective, kind, n, msg_bytes).done


def _split(value: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(value)


def _validate_choice(collective: str, value: str | Sequence[str]) -> None:
    if collective not in COLLECTIVES:
        raise InputError(f"unknown collective {collective!r}", "--algo")
    for name in _split(value):
        if name != "auto" and find(name) is None:
            base = name.partition(":")[0]
            if ":" in name and base in ALGORITHMS:  # a known algorithm, its arguments wrong
                form = getattr(ALGORITHMS[base], "args_help", "")
                raise InputError(f"bad arguments in {name!r}" + (f": {form}" if form else ""),
                                 "--algo")
            raise InputError(
                f"unknown algorithm {name!r} (known: auto, {', '.join(ALGORITHMS)})", "--algo"
            )


def replay_network(cluster: ClusterSpec, network: str | None) -> NetworkModel:
    """The flow network of a replay's ``--network`` choice (``tracesim.options.NETWORKS``):
    ``flow`` (and ``estimate``, which times collectives on it uncongested) the default model;
    ``flow-relays`` with every PXN relay's NVLink hop in its flow; ``flow-steps`` with every
    step of a ring phase on its own (``phases="steps"``: the reference the rounds of the
    default approximate, docs/network.md "Collective algorithms"; slower)."""
    return NetworkModel(cluster, keep_records=False, relay_hops=network == "flow-relays",
                        phases="steps" if network == "flow-steps" else "auto")


def collective_time_ns(
    cluster: ClusterSpec,
    collective: str,
    n_ranks_or_ranks: int | Sequence[int],
    msg_bytes: int,
    algo: str | Mapping[str, str] | None = None,
    protocol: str | None = None,
) -> int:
    """Time (ns) of one collective running alone on ``cluster``, simulated in a fresh env.

    ``n_ranks_or_ranks``: a rank count (ranks 0..n-1) or the ranks themselves. ``algo``: an
    algorithm name (or preference list) for this collective, or a per-collective mapping.
    ``protocol``: the NCCL protocols allowed (as NCCL_PROTO; default: the spec's, else all).
    """
    if isinstance(n_ranks_or_ranks, int):
        ranks = tuple(range(n_ranks_or_ranks))
    else:
        ranks = tuple(int(r) for r in n_ranks_or_ranks)
    if isinstance(algo, str):
        algo = {collective: algo}
    env = simpy.Environment()
    model = NetworkModel(cluster, algo, protocol=protocol)
    model.attach(env)
    ev = model.collective(collective, ranks, msg_bytes)
    env.run(until=ev)
    return int(env.now)
