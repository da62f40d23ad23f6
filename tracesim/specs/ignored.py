"""Options given that the layout makes meaningless: each is named in a warning, so that a
replay never drops what a user asked for without saying so.

The replay still runs (a sweep over ``pp`` with ``--schedule interleaved`` in its base is
meant to reach ``pp`` 1); options that contradict each other where no reading is sensible
are input errors elsewhere (:func:`tracesim.specs.parallel.check_parallel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: MoE-only options: the name and the words of its warning
_MOE_ONLY = ("moe_dispatcher", "moe_imbalance", "moe_capacity_factor", "moe_routing",
             "moe_router_fusion", "moe_router_padding", "moe_shared_expert_overlap")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def ignored_options(given: Mapping[str, Any], par: Any, model: Any) -> list[str]:
    """Warnings for the options in ``given`` (the user's, before any stack default) that
    layout ``par`` of ``model`` leaves without effect."""
    out: list[str] = []

    def say(names: tuple[str, ...], why: str) -> None:
        named = [n for n in names if n in given]
        if named:
            out.append(f"{', '.join(_flag(n) for n in named)} ignored: {why}")

    if par.pp == 1:
        if given.get("vpp", 1) > 1 or given.get("schedule") == "interleaved":
            say(("vpp", "schedule"), "one pipeline stage, nothing to interleave")
        if given.get("pp_rounds", 1) > 1:
            say(("pp_rounds",), "one pipeline stage")
        say(("overlap_p2p", "p2p_blocking"), "one pipeline stage, no pipeline transfers")
    if par.cp == 1:
        say(("cp_overlap",), "no context parallelism (cp 1)")
    if par.recompute != "selective":
        say(("recompute_modules",), f"they apply with --recompute selective (here "
            f"{par.recompute})")
    if par.recompute != "full":
        say(("recompute_layers",), f"it applies with --recompute full (here {par.recompute})")
    if par.dtype != "fp8":
        say(("fp8_param_gather", "fp8_recipe"), f"the run is {par.dtype}, not --dtype fp8")
    if given.get("overlap_param_gather") and par.zero == 0 and not par.fsdp:
        say(("overlap_param_gather",), "no parameter all-gather without the distributed "
            "optimizer (--zero 1+) or FSDP")
    if not model.is_moe:
        say(_MOE_ONLY, f"{model.name} has no MoE layers")
    graphs = {g.strip() for g in str(given.get("cuda_graphs") or "").split(",")}
    if "mamba" in graphs and not model.is_hybrid:
        out.append(f"--cuda-graphs mamba ignored: {model.name} has no Mamba layers")
    return out
