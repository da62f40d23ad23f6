"""Op and kernel classes, FLOP and byte rules from shapes, dtypes."""
