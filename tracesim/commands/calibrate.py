"""``tracesim calibrate``: measure the device at hand and write a device profile YAML.

The profile is accepted wherever a device is (``get_device(PATH)``, a cluster spec's
``device:``). torch is imported only when the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracesim.api import calibrate


@click.command("calibrate")
@click.option("--device", "device", default="cpu", show_default=True,
              help="cpu or cuda[:N]: the device to measure.")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="profile YAML to write.")
@click.option("--quick", is_flag=True, help="a few sizes per op (seconds) instead of the full grid.")
@click.option("--threads", type=int, default=None,
              help="torch intra-op threads for a CPU run (default: torch's default).")
@click.option("--name", default=None, help="profile name (default host-cpu / <gpu>-measured).")
@click.option("--alias", "aliases", multiple=True, help="extra device names selecting this profile.")
@click.option("--json", "as_json", is_flag=True, help="print the profile as one JSON object.")
def command(device: str, out: Path, quick: bool, threads: int | None, name: str | None,
            aliases: tuple[str, ...], as_json: bool) -> None:
    """Measure GEMM efficiency over a grid of sizes, memory bandwidth, pointwise / norm /
    softmax / reduction / embedding / optimizer / attention ops and the launch overhead on
    DEVICE, and write a device profile to OUTPUT."""
    log = None if as_json else (lambda m: click.echo(f"calibrate: {m}", err=True))
    prof = calibrate(device, quick=quick, threads=threads, name=name, aliases=aliases, out=out,
                     log=log)
    if as_json:
        click.echo(json.dumps(prof))
        return
    peaks = ", ".join(f"{k} {v:g}" for k, v in prof["peak_tflops"].items())
    click.echo(f"{prof['name']}: peak TFLOP/s {peaks}; memory {prof['hbm_GBps']:g} GB/s; "
               f"launch overhead {prof['launch_overhead_us']:g} us -> {out}")
