"""The pipeline of every replay (DESIGN.md): source -> graph -> engine -> report.

:func:`predict` runs it; :func:`~tracesim.pipeline.build.build` is the graph step of a
retarget, :func:`replay_graph` and :func:`self_replay` the paths of a graph that is already
there (an imported workload, a recorded run).
"""

from tracesim.engine.symmetry import SYMMETRY_MIN_GPUS
from tracesim.pipeline.build import Built, build
from tracesim.pipeline.run import predict, replay_graph, self_replay

__all__ = ["SYMMETRY_MIN_GPUS", "Built", "build", "predict", "replay_graph", "self_replay"]
