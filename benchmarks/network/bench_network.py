"""Benchmark the network layer: topology build, max-min recompute, flow simulation, collectives.

Usage: .venv/bin/python benchmarks/network/bench_network.py [--quick]

Prints one line per measurement (wall-clock seconds on one core). The numbers in
docs/network.md come from this script.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tracesim.catalog import load_cluster  # noqa: E402
from tracesim.network.flows import FlowNetwork  # noqa: E402
from tracesim.network.maxmin import max_min_sorted  # noqa: E402
from tracesim.network.model import NetworkModel  # noqa: E402
from tracesim.network.routing import Router  # noqa: E402
from tracesim.network.topology import Topology  # noqa: E402


def timed(label, fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    print(f"{label:<62s} {time.perf_counter() - t0:8.3f} s", flush=True)
    return out


def random_flows(router, n_gpus, n_flows, rng):
    src = rng.integers(0, n_gpus, n_flows)
    dst = (src + rng.integers(1, n_gpus, n_flows)) % n_gpus
    routes = [router.route(int(s), int(d)) for s, d in zip(src, dst, strict=True)]
    lens = np.array([len(r) for r in routes])
    ptr = np.zeros(n_flows + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    return ptr, np.concatenate(routes), rng.uniform(1e6, 1e8, n_flows)


def simulate(cap, ptr, links, nbytes, batches):
    env = simpy.Environment()
    net = FlowNetwork(cap)
    net.attach(env)
    n = len(nbytes)
    step = -(-n // batches)
    evs = []
    for b in range(batches):
        lo, hi = b * step, min(n, (b + 1) * step)
        sub = ptr[lo : hi + 1] - ptr[lo]
        evs.append(net.start(sub, links[ptr[lo] : ptr[hi]], nbytes[lo:hi]))
    env.run(until=simpy.AllOf(env, evs))
    return net.recomputes, env.now


def collectives(cluster, groups, coll, nbytes):
    env = simpy.Environment()
    model = NetworkModel(cluster)
    model.attach(env)
    evs = [model.collective(coll, g, nbytes) for g in groups]
    env.run(until=simpy.AllOf(env, evs))
    return env.now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a few seconds)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    big = load_cluster("h100x1024").replace(nodes=256 if args.quick else 2048)
    topo = timed(f"topology build, {big.gpus} GPUs", Topology, big)
    print(f"  links: {topo.n_links}")
    router = Router(topo)
    for n in (1000, 10000) if args.quick else (1000, 10000, 50000):
        ptr, links, nbytes = timed(f"route {n} random GPU pairs", random_flows, router, big.gpus, n, rng)
        e_flow = np.repeat(np.arange(n), np.diff(ptr))
        timed(f"max-min rates, {n} concurrent flows", max_min_sorted, e_flow, links, topo.capacity)
        if n <= 10000:
            rc, t_end = timed(f"simulate {n} flows to completion (10 start batches)",
                              simulate, topo.capacity, ptr, links, nbytes, 10)
            print(f"  recomputes: {rc}, simulated time {t_end / 1e6:.2f} ms")
    g = big.gpus_per_node
    tp = [tuple(range(k * g, (k + 1) * g)) for k in range(big.nodes)]
    timed(f"{len(tp)} concurrent 8-GPU TP all-reduces (64 MiB)", collectives, big, tp, "all_reduce", 64 << 20)
    dp_size = 128 if not args.quick else 32
    dp = [tuple(range(j, j + dp_size * g, g)) for j in range(g)]
    timed(f"{len(dp)} concurrent {dp_size}-rank DP all-reduces (1 GiB, ring)", collectives,
          big, dp, "all_reduce", 1 << 30)
    ep = [tuple(range(k * 64, (k + 1) * 64)) for k in range(8)]
    timed(f"{len(ep)} concurrent 64-rank all-to-alls (256 MiB)", collectives, big, ep, "all_to_all", 256 << 20)


if __name__ == "__main__":
    main()
