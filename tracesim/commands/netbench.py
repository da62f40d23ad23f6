"""``tracesim netbench``: simulated nccl-tests on a cluster's network model
(:func:`tracesim.api.netbench`)."""

from __future__ import annotations

import json

import click

from tracesim.api import netbench
from tracesim.network.bench import NETBENCH_COLLECTIVES


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
              "nodes; a spec of fewer nodes with an inter-node fabric is scaled to them, as "
              "replay --nodes does); default: GPUs 0..ranks-1.")
@click.option("--sizes", default="8:8G:4", show_default=True,
              help="Message sizes in bytes (nccl-tests convention): a comma list and/or "
              "MIN:MAX[:FACTOR] ranges, binary units K M G.")
@click.option("--algo", default=None,
              help="Algorithm (ring, tree, nvls, direct, hierarchical, p2p, auto; for all_to_all "
              "also dedup:EXPERTS:TOP_K, the MoE dispatch of DeepEP / HybridEP) or a "
              "comma-separated preference list; default: the cluster spec's choice.")
@click.option("--protocol", default=None,
              help="NCCL protocols ring and tree may use: LL, LL128, Simple, a comma list, "
              "or auto (like NCCL_PROTO); default: the cluster spec's collectives.protocol, "
              "else all.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def command(
    cluster_name: str,
    collective: str,
    n_ranks: int | None,
    nodes: int | None,
    sizes: str,
    algo: str | None,
    protocol: str | None,
    as_json: bool,
) -> None:
    """Simulated nccl-tests: size, time, algbw and busbw of a collective on a cluster."""
    res = netbench(cluster_name, collective, n_ranks, nodes, sizes, algo, protocol)
    if as_json:
        click.echo(json.dumps(res.to_dict()))
        return
    n = res.rows[0]["ranks"] if res.rows else 0
    click.echo(f"# tracesim netbench: {collective} on {n} ranks of {res.cluster} "
               f"({res.nodes} node(s), {res.device})")
    click.echo(f"# {'size(B)':>12} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}  algo/protocol")
    for r in res.rows:
        click.echo(
            f"  {r['size_bytes']:>12} {r['time_s'] * 1e6:>12.2f} {r['algbw_GBps']:>12.2f} "
            f"{r['busbw_GBps']:>12.2f}  {r['algo']}/{r['protocol']}"
        )
