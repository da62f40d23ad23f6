"""Design-space sweeps: many replays of one question, run on Dask.

- :mod:`tracesim.sweep.space`: ``SPACE.yaml`` (axes, explicit points, constraints, filters,
  prices) and its expansion into keyed points;
- :mod:`tracesim.sweep.expr`: the safe constraint expressions (``tp * pp * dp == gpus``);
- :mod:`tracesim.sweep.task`: one point = one :func:`tracesim.pipeline.predict` call = one flat row;
- :mod:`tracesim.sweep.runner`: the Dask driver (LocalCluster or a scheduler address),
  resume, progress, atomic streaming into ``results.parquet``;
- :mod:`tracesim.sweep.store`: the results table;
- :mod:`tracesim.sweep.outputs`: ranked table, Pareto front and its PNG.

Importing this package does not import Dask; :func:`run_sweep` does.
"""

from tracesim.sweep.outputs import pareto_front, plot_pareto, ranked
from tracesim.sweep.runner import Progress, SweepSummary, run_sweep
from tracesim.sweep.space import SweepPoint, SweepSpace, expand_space, load_space, space_from_dict
from tracesim.sweep.store import read_results
from tracesim.sweep.task import run_point

__all__ = [
    "Progress", "SweepPoint", "SweepSpace", "SweepSummary", "expand_space", "load_space",
    "pareto_front", "plot_pareto", "ranked", "read_results", "run_point", "run_sweep",
    "space_from_dict",
]
