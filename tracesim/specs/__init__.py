"""What runs, where and how: model, parallel layout, placement and cluster specs."""
