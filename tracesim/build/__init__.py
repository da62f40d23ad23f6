"""Stage programs, pipeline schedules and per-rank instantiation into a task graph."""
