"""The perturbation step of a replay: slow ranks (``--straggler``, ``--jitter``, ``--seed``)
and an impaired fabric (``--degrade-link``, ``--background``, or the same keys of the cluster
spec).

The graph is replayed once as it is on the healthy fabric (the reference), then with its
ranks slowed (:mod:`tracesim.transform.perturb`) on the cluster as given; the result's
``perturbation`` detail gives the impact on the iteration, the slowest ranks, the ranks the
others waited for at collectives, the communication operations that slowed most, the
degraded links and what the background traffic did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from tracesim.engine.replay import ReplayResult, replay
from tracesim.errors import InputError
from tracesim.graph.taskgraph import COMM_KINDS, TaskGraph
from tracesim.network.faults import ranks_behind
from tracesim.options import ReplayOptions
from tracesim.specs.cluster import ClusterSpec
from tracesim.specs.collectives import nccl_ctas
from tracesim.specs.fabric import parse_background, parse_link_faults


def scaled_cluster(cluster: ClusterSpec, nodes: int | None) -> ClusterSpec:
    """``cluster`` with ``nodes`` nodes (``--nodes``; None: as it is)."""
    if nodes is None or nodes == cluster.nodes:
        return cluster
    if nodes > 1 and cluster.inter_node is None:
        raise InputError(f"cluster {cluster.name} is one node with no inter-node fabric "
                         "(inter_node): give a spec that has one, e.g. h100x128", "--nodes")
    return cluster.replace(nodes=nodes)


def fabric_cluster(cluster: ClusterSpec, opts: ReplayOptions) -> ClusterSpec:
    """``cluster`` with the options' node count, NCCL CTA caps, degraded links and background
    traffic."""
    cluster = scaled_cluster(cluster, opts.nodes)
    if opts.nccl_max_ctas:
        cluster = cluster.replace(collectives=dataclasses.replace(
            cluster.collectives, max_ctas=nccl_ctas(opts.nccl_max_ctas)))
    faults = tuple(f for x in opts.degrade_link or () for f in parse_link_faults(x))
    bg = tuple(parse_background(x, cluster.gpus_per_node, cluster.gpus)
               for x in opts.background or ())
    out = cluster.with_fabric(faults, bg) if faults or bg else cluster
    if opts.network == "estimate" and any(not b.is_load for b in out.background):
        raise InputError("a background collective shares links with the job's flows: it needs "
                         "the flow network (--network flow)", "--background")
    return out


class Perturbed:
    """A perturbed replay's reference: the same graph unperturbed on the healthy fabric,
    the rank factors used and the fabric's impairments."""

    def __init__(self, p: Any, baseline: ReplayResult, baseline_s: float,
                 factors: dict[int, float], cluster: ClusterSpec | None):
        self.p, self.baseline, self.baseline_s = p, baseline, baseline_s
        self.factors, self.cluster = factors, cluster

    def report(self, graph: TaskGraph, result: ReplayResult,
               iteration_s: float | None = None, net: Any = None) -> dict[str, Any]:
        """The ``perturbation`` detail: options, the unperturbed iteration, the impact, the
        slowest ranks, the ranks the others waited for at collectives, the operations that
        slowed most; ``net``: the replay's network model (its background report)."""
        from tracesim.transform.perturb import gating

        it = result.makespan_ns * 1e-9 if iteration_s is None else iteration_s
        base = self.baseline_s
        slow = sorted(self.factors.items(), key=lambda x: -x[1])[:5]
        out = {**self.p.to_dict(), "unperturbed_iteration_time_s": base,
               "impact_s": it - base, "impact": it / base - 1 if base else 0.0,
               "slowest_ranks": [[r, round(f, 4)] for r, f in slow],
               "waited_for": [[r, round(w, 6)] for r, w in gating(graph, result.start_ns)[:5]]}
        c = self.cluster
        if c is not None and (c.degraded_links or c.background):
            topo = getattr(net, "topology", None)
            out["degraded_links"] = [
                {"link": f.link, "factor": f.factor,
                 "ranks": ranks_behind(topo, f.link) if topo is not None else []}
                for f in c.degraded_links]
            bg = getattr(net, "background", None)
            jobs = {j["spec"]: j for j in (bg.report() if bg is not None else [])}
            out["background"] = [jobs.get(b.spec, {"spec": b.spec}) for b in c.background]
            out["slowed_operations"] = slowed_operations(graph, self.baseline, result)
        return out


def slowed_operations(graph: TaskGraph, before: ReplayResult, after: ReplayResult,
                      top: int = 5) -> list[dict[str, Any]]:
    """The communication operations whose time (last member's arrival to the end) grew
    most between two replays of the same graph, summed per (collective, group kind, ranks):
    how many operations, their total time (s) before and after."""
    t = graph.tasks
    sel = np.flatnonzero(np.isin(t["kind"].to_numpy(), COMM_KINDS)
                         & (t["match_key"].astype(str).to_numpy() != ""))
    if not len(sel):
        return []
    df = pd.DataFrame({"key": t["match_key"].to_numpy()[sel], "rank": t["rank"].to_numpy()[sel],
                       "kind": t["group_kind"].astype(str).to_numpy()[sel],
                       "coll": t["collective"].astype(str).to_numpy()[sel]})
    for name, r in (("b", before), ("a", after)):
        df[f"{name}0"] = np.asarray(r.start_ns)[sel]
        df[f"{name}1"] = np.asarray(r.end_ns)[sel]
    g = df.groupby("key", sort=False).agg(
        kind=("kind", "first"), coll=("coll", "first"), ranks=("rank", list),
        b0=("b0", "max"), b1=("b1", "max"), a0=("a0", "max"), a1=("a1", "max"))
    g["before"] = (g["b1"] - g["b0"]) * 1e-9
    g["after"] = (g["a1"] - g["a0"]) * 1e-9
    g["span"] = [_span(sorted(int(x) for x in r)) for r in g["ranks"]]
    agg = g.groupby(["coll", "kind", "span"], sort=False).agg(
        ops=("before", "size"), before=("before", "sum"), after=("after", "sum"))
    agg = agg.assign(grew=agg["after"] - agg["before"]).sort_values("grew", ascending=False,
                                                                   kind="stable")
    return [{"collective": str(coll), "group_kind": str(kind), "ranks": str(span),
             "operations": int(row.ops), "unperturbed_s": float(row.before),
             "perturbed_s": float(row.after)}
            for (coll, kind, span), row in zip(agg.index, agg.head(top).itertuples(), strict=False)
            if row.grew > 0]


def _span(ranks: list[int]) -> str:
    """``[0, 8, 16]`` -> ``'0,8,16'``; long lists as ``'0..120 (16 ranks)'``."""
    if len(ranks) <= 4:
        return ",".join(map(str, ranks))
    return f"{ranks[0]}..{ranks[-1]} ({len(ranks)} ranks)"


def perturbation_step(graph: TaskGraph, opts: ReplayOptions, cluster: ClusterSpec | None,
                      make_comm: Callable[[ClusterSpec | None], Any],
                      iteration_s: Callable[[ReplayResult], float] | None = None,
                      observers: Any = (),
                      ) -> tuple[TaskGraph, Perturbed | None]:
    """Stragglers and jitter (``opts.straggler`` / ``jitter`` / ``seed``) and an impaired
    ``cluster`` (degraded links, background traffic): the graph with its ranks slowed, after
    a replay of it unperturbed on the healthy cluster as the reference (None: nothing asked).
    ``make_comm(cluster)``: the communication model on a cluster; ``iteration_s`` reads the
    iteration time off a replay (default: its makespan); ``observers``: the reference
    replay's (progress)."""
    from tracesim.transform.perturb import Perturbation, perturb

    p = Perturbation(opts.straggler or (), opts.jitter or 0.0, opts.seed or 0)
    impaired = cluster is not None and cluster.healthy is not cluster
    if not p.active and not impaired:
        return graph, None
    if graph.meta.get("representatives"):
        raise InputError("stragglers, jitter and an impaired fabric need every rank simulated",
                         "--full")
    have = sorted({int(r) for r in graph.ranks})
    missing = sorted({r for r, _ in p.stragglers} - set(have))
    if missing:  # a slowdown nobody would take: say so rather than report +0.0%
        shown = (f"{have[0]}..{have[-1]}" if have and have == list(range(have[0], have[-1] + 1))
                 else ", ".join(map(str, have[:8])) + (", ..." if len(have) > 8 else ""))
        raise InputError(f"rank {missing[0]} is not among the replayed ranks ({shown})",
                         "--straggler")
    healthy = cluster.healthy if cluster is not None else None
    base = replay(graph, make_comm(healthy), observers=observers)
    slowed, factors = perturb(graph, p) if p.active else (graph, {})
    it = iteration_s(base) if iteration_s is not None else base.makespan_ns * 1e-9
    return slowed, Perturbed(p, base, it, factors, cluster)
