"""Shipped cluster specs (``<name>.yaml``).

Data, installed as ``tracesim.topologies`` and read through :mod:`tracesim.catalog`.
"""
