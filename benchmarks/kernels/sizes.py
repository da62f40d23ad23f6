"""The FLOP sizes at which the generated profiles sample their efficiency curves."""

#: every half decade, 1e5 .. 1e14 FLOP
FLOP_SIZES = [float(f"{10.0 ** (e / 2):.4g}") for e in range(10, 29)]
