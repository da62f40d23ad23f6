"""Shipped model specs (``<name>.yaml``) and stored template bundles (``bundles/<family>-tiny``).

Data, installed as ``tracesim.workloads`` and read through :mod:`tracesim.catalog`.
"""
