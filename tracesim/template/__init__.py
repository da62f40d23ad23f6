"""Layer templates: analytic or taken from a trace; resolved for a model and layout; durations."""
