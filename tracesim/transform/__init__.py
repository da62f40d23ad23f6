"""Transforms of a recorded task graph for another device, host, network or layout."""
