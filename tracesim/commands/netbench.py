"""``tracesim netbench``: an nccl-tests style table of one collective on a simulated cluster.

Each row runs the collective alone on a fresh simulated network and reports size, time,
algorithm bandwidth (size / time) and bus bandwidth as nccl-tests defines it (algbw times
2(n-1)/n for all-reduce, (n-1)/n for all-gather / reduce-scatter / all-to-all, 1 for
broadcast / reduce / sendrecv), so the numbers can be held against a real nccl-tests run.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from tracesim.catalog import load_cluster
from tracesim.errors import InputError
from tracesim.network.model import NetworkModel, collective_time_ns
from tracesim.specs.cluster import ClusterSpec

NETBENCH_COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv",
)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio for ``collective`` on ``n`` ranks."""
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def parse_size(text: str) -> int:
    """``"8"``, ``"64K"``, ``"1M"``, ``"8G"`` (binary units, optional B / iB) -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise InputError(f"bad size {text!r} (examples: 8, 64K, 1M, 8G)", "--sizes")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not value.is_integer():
        raise InputError(f"size {text!r} is not a whole number of bytes", "--sizes")
    return int(value)


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
) -> list[dict[str, Any]]:
    """The rows of the table (``netbench --json`` ``rows``)."""
    choice = {collective: algo} if algo else None
    model = NetworkModel(cluster, choice)
    n = len(ranks)
    rows = []
    for size in sizes:
        name = model.select(collective, ranks, size) if n > 1 else "none"
        t_ns = collective_time_ns(cluster, collective, ranks, size, algo)
        algbw = size / t_ns if t_ns > 0 else 0.0
        rows.append(
            {
                "collective": collective,
                "ranks": n,
                "algo": name,
                "size_bytes": size,
                "time_s": t_ns * 1e-9,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * bus_factor(collective, n),
            }
        )
    return rows


@click.command("netbench")
@click.option("--cluster", "cluster_name", required=True,
              help="Cluster spec: a name from topologies/ or a YAML path "
              "(ASTRA-sim analytical network configs are accepted too).")
@click.option("--collective", type=click.Choice(NETBENCH_COLLECTIVES), default="all_reduce",
              show_default=True)
@click.option("--ranks", "n_ranks", type=int, default=None,
              help="Number of ranks (default: every GPU of the cluster).")
@click.option("--nodes", type=int, default=None,
              help="Spread the ranks evenly over this many nodes (like nccl-tests across "
              "nodes); default: GPUs 0..ranks-1.")
@click.option("--sizes", default="8:8G:4", show_default=True,
              help="Message sizes in bytes (nccl-tests convention): a comma list and/or "
              "MIN:MAX[:FACTOR] ranges, binary units K M G.")
@click.option("--algo", default=None,
              help="Algorithm (ring, tree, nvls, direct, hierarchical, p2p, auto) or a "
              "comma-separated preference list; default: the cluster spec's choice.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def command(
    cluster_name: str,
    collective: str,
    n_ranks: int | None,
    nodes: int | None,
    sizes: str,
    algo: str | None,
    as_json: bool,
) -> None:
    """Simulated nccl-tests: size, time, algbw and busbw of a collective on a cluster."""
    cluster = load_cluster(cluster_name)
    ranks = bench_ranks(cluster, n_ranks, nodes)
    size_list = parse_sizes(sizes)
    rows = run_netbench(cluster, collective, ranks, size_list, algo)
    n_nodes = len({r // cluster.gpus_per_node for r in ranks})
    if as_json:
        click.echo(json.dumps({"cluster": cluster.name, "nodes": n_nodes, "rows": rows}))
        return
    click.echo(
        f"# tracesim netbench: {collective} on {len(ranks)} ranks of {cluster.name} "
        f"({n_nodes} node(s), {cluster.device if isinstance(cluster.device, str) else 'inline device'})"
    )
    click.echo(f"# {'size(B)':>12} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}  algo")
    for r in rows:
        click.echo(
            f"  {r['size_bytes']:>12} {r['time_s'] * 1e6:>12.2f} {r['algbw_GBps']:>12.2f} "
            f"{r['busbw_GBps']:>12.2f}  {r['algo']}"
        )
