"""tracesim: trace-driven replay simulator for distributed training.

Stages (each a pure function of its inputs, each runnable alone from the CLI):
collect -> bundle -> extract -> workload / task graph -> build -> replay -> result.
"""

__version__ = "0.1.0"
