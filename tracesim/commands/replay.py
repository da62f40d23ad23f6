"""``tracesim replay``: replay a recorded run (self-replay) or retarget it.

With no model, layout or template flag, the recorded device and layout are replayed
(self-replay) and the report gives the predicted step time; a workload directory or Chakra
ET files are replayed on ``--cluster``'s network. With any of them, the source (or the stored default template for
the model family) is retargeted to that model, cluster and parallel layout. The flags are
:class:`tracesim.options.ReplayOptions`; the work is :func:`tracesim.api.replay`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tracesim.api import replay, write_result
from tracesim.commands.options import options_from, replay_flags
from tracesim.errors import InputError
from tracesim.report.resultdir import check_result_dir, json_default
from tracesim.report.terminal import Progress, print_report


@click.command("replay")
@click.argument("source", required=False, type=click.Path())
@replay_flags()
@click.option("-o", "--output", "out", type=click.Path(path_type=Path),
              help="Result directory to write (a result directory there is replaced; any other "
              "non-empty directory is refused).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(source: str | None, out: Path | None, as_json: bool, **flags: Any) -> None:
    """Replay SOURCE (bundle, trace, workload, Chakra ET or AICB .txt) or retarget it to another model/cluster/layout.

    Times are seconds, throughput tokens/s, TFLOP/s per GPU. Exit code 2 on bad input.
    """
    if source is not None and not source.strip():  # a variable that expanded to nothing
        raise InputError("an empty path (give a trace, bundle, workload or Chakra / AICB file)",
                         "SOURCE")
    if out is not None:  # a bad -o fails now, not after the replay
        check_result_dir(out)
    progress = Progress()
    try:
        pred = replay(None if source is None else Path(source), options_from(flags), detail=out is not None, progress=progress)
        res = (write_result(pred, out, progress=progress) if out is not None
               else pred.to_dict(critical_path=True))
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(res, indent=2, default=json_default))
    else:
        print_report(res)
