"""Interoperability with other tools' formats.

* :mod:`~tracesim.interop.chakra` / :mod:`~tracesim.interop.chakra_import`: Chakra execution
  traces (ASTRA-sim's workload input), schema in :mod:`~tracesim.interop.chakra_schema`;
* :mod:`~tracesim.interop.aicb`, :mod:`~tracesim.interop.aicb_graph`,
  :mod:`~tracesim.interop.aicb_export`: SimAI / AICB workload files;
* :mod:`~tracesim.interop.astrasim_network`, :mod:`~tracesim.interop.astrasim_system`:
  ASTRA-sim network and system configurations;
* :mod:`~tracesim.interop.formats`: the format registry and helpers behind
  ``tracesim convert`` (:func:`tracesim.api.convert`).

See docs/interop.md. Nothing is imported here, so loading one submodule stays cheap.
"""
