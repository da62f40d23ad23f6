"""The network layer: topology, routing, flow-level max-min sharing, collective algorithms.

Entry points: :class:`tracesim.network.model.NetworkModel` (the engine's communication
model) and :func:`tracesim.network.model.collective_time_ns`; see docs/network.md.
"""
