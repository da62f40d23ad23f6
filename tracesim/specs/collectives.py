"""The ``collectives`` section of a cluster spec: algorithm choice, per-algorithm calibration
and NCCL's protocols and channels (docs/network.md); parsed by
:func:`tracesim.specs.cluster.cluster_from_dict`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracesim.errors import InputError
from tracesim.strict import check_keys, get_number

#: NCCL's protocols in its own order (NCCL_PROTO_LL, NCCL_PROTO_LL128, NCCL_PROTO_SIMPLE)
PROTOCOLS = ("LL", "LL128", "Simple")

#: collectives a cluster spec may name in ``collectives.select``
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "send_recv",
)

#: Megatron-Core's communicator names (``parallel_state.get_nccl_options``, the keys of the
#: file ``--nccl-communicator-config-path`` reads) -> the group kind tracesim runs on it;
#: None: a communicator tracesim runs no operation on (accepted, so that a Megatron file can
#: be pasted whole). ``dp`` is the data-parallel group without context parallelism: it
#: carries the gradients only where ``dp_cp`` is not given (the two are the same group with
#: cp 1)
MEGATRON_COMMUNICATORS: dict[str, str | None] = {
    "tp": "tp", "cp": "cp", "pp": "pp", "dp_cp": "dpcp", "dp": "dpcp", "embd": "emb",
    "ep": "ep", "ep_tp": "etp", "ep_dp": "edp",
    "mp": None, "pos_embd": None, "tp_dp_cp": None, "tp_dp": None, "tp_cp": None,
    "tp_exp": None, "tp_ep_mp": None, "tp_ep_pp": None, "hcp": None, "intra_dp_cp": None,
    "intra_ep_dp": None, "inter_ep_dp": None, "intra_dist_opt_instance": None,
}
#: the Megatron-Core name of each group kind's communicator
MEGATRON_NAME = {"tp": "tp", "cp": "cp", "pp": "pp", "dpcp": "dp_cp", "emb": "embd", "ep": "ep",
                 "etp": "ep_tp", "edp": "ep_dp"}
#: keys of one communicator's block in Megatron's file (only ``max_ctas`` changes a replay)
COMMUNICATOR_KEYS = ("max_ctas", "min_ctas", "cga_cluster_size", "net_name",
                     "is_high_priority_stream")


@dataclass(frozen=True)
class AlgorithmParams:
    """Calibration of one collective algorithm; ``None`` means the algorithm's default.

    ``efficiency_intra`` / ``efficiency_inter``: achieved fraction of line rate for flows
    inside a node / flows crossing a NIC (0 < e <= 1). ``step_latency_us``: software latency
    each algorithm step pays on top of the path latency.
    """

    efficiency_intra: float | None = None
    efficiency_inter: float | None = None
    step_latency_us: float | None = None


@dataclass(frozen=True)
class CollectivesSpec:
    """Algorithm choice and calibration overrides (``collectives`` in the YAML).

    ``select`` maps a collective to a preference list of algorithm names (``("auto",)`` =
    cheapest predicted, like NCCL's tuner); ``algorithms`` maps an algorithm name to its
    :class:`AlgorithmParams`. Both are tuples of pairs so the spec stays hashable.
    """

    select: tuple[tuple[str, tuple[str, ...]], ...] = ()
    algorithms: tuple[tuple[str, AlgorithmParams], ...] = ()
    #: protocols NCCL may use (``collectives.protocol``, as NCCL_PROTO): () = all (auto)
    protocol: tuple[str, ...] = ()
    #: NCCL channels of a collective (``collectives.channels``); None = the default
    channels: int | None = None
    #: NCCL's CTA (channel) cap per group kind (``collectives.max_ctas``, Megatron-Core's
    #: per-communicator ``max_ctas``): (kind, CTAs) pairs
    max_ctas: tuple[tuple[str, int], ...] = ()

    def ctas(self, kind: str) -> int | None:
        """The CTA cap of the communicator of group kind ``kind`` (None: NCCL's default)."""
        for k, n in self.max_ctas:
            if k == kind:
                return n
        return None

    def selection(self, collective: str) -> tuple[str, ...]:
        """The preference list for ``collective`` (``("auto",)`` when not given)."""
        for name, algos in self.select:
            if name == collective:
                return algos
        return ("auto",)

    def params(self, algorithm: str) -> AlgorithmParams:
        """The overrides for ``algorithm`` (all ``None`` when not given)."""
        for name, p in self.algorithms:
            if name == algorithm:
                return p
        return AlgorithmParams()


def collectives_from_dict(data: Any, file: Any) -> CollectivesSpec:
    """The ``collectives`` block, checked for its structure; whether the algorithms it names
    exist and implement the collectives they are chosen for is the network layer's check
    (:func:`tracesim.network.collectives.check_collectives`)."""
    w = "collectives"
    check_keys(data, (), ("select", "algorithms", "protocol", "channels", "max_ctas"), file=file,
               where=w)
    select: list[tuple[str, tuple[str, ...]]] = []
    sel = data.get("select", {}) or {}
    check_keys(sel, (), COLLECTIVES, file=file, where=f"{w}.select")
    for coll, value in sel.items():
        place = f"{w}.select.{coll}"
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise InputError(f"expected an algorithm name or a list of them, got {value!r}", file, place)
        select.append((coll, tuple(names)))
    params: list[tuple[str, AlgorithmParams]] = []
    alg = data.get("algorithms", {}) or {}
    if not isinstance(alg, Mapping):
        raise InputError(f"expected a mapping, got {type(alg).__name__}", file, f"{w}.algorithms")
    for name, entry in alg.items():
        place = f"{w}.algorithms.{name}"
        check_keys(entry, (), ("efficiency", "step_latency_us"), file=file, where=place)
        e_intra = e_inter = None
        if "efficiency" in entry:
            eff = entry["efficiency"]
            if isinstance(eff, Mapping):
                check_keys(eff, (), ("intra", "inter"), file=file, where=f"{place}.efficiency")
                if "intra" in eff:
                    e_intra = _efficiency(eff, "intra", file, f"{place}.efficiency")
                if "inter" in eff:
                    e_inter = _efficiency(eff, "inter", file, f"{place}.efficiency")
            else:
                e_intra = e_inter = _efficiency(entry, "efficiency", file, place)
        lat = None
        if "step_latency_us" in entry:
            lat = get_number(entry, "step_latency_us", file=file, where=place, allow_zero=True)
        params.append((str(name), AlgorithmParams(e_intra, e_inter, lat)))
    protocol: tuple[str, ...] = ()
    if data.get("protocol") is not None:
        try:
            protocol = parse_protocols(data["protocol"])
        except (ValueError, AttributeError) as e:
            raise InputError(str(e), file, f"{w}.protocol") from None
    channels = None
    if data.get("channels") is not None:
        channels = int(get_number(data, "channels", file=file, where=w))
        if channels != data["channels"] or channels < 1:
            raise InputError(f"channels must be a whole number >= 1, got {data['channels']!r}",
                             file, f"{w}.channels")
    return CollectivesSpec(select=tuple(select), algorithms=tuple(params), protocol=protocol,
                           channels=channels, max_ctas=parse_max_ctas(data.get("max_ctas"), file,
                                                                      f"{w}.max_ctas"))


def parse_max_ctas(data: Any, file: Any, where: str) -> tuple[tuple[str, int], ...]:
    """Per-communicator CTA caps: a mapping of Megatron-Core communicator names (as its
    ``--nccl-communicator-config-path`` file: each a number, or a block whose ``max_ctas``
    is read) -> (group kind, CTAs) pairs; ``dp`` applies to the gradients only where
    ``dp_cp`` is not given. Blocks without ``max_ctas`` and communicators tracesim runs
    nothing on are left out."""
    if data is None:
        return ()
    if not isinstance(data, Mapping):
        raise InputError(f"expected a mapping of communicator names, got {type(data).__name__}",
                         file, where)
    check_keys(data, (), tuple(MEGATRON_COMMUNICATORS), file=file, where=where)
    out: dict[str, int] = {}
    for name in sorted(data, key=lambda n: n == "dp"):  # dp_cp before dp
        value, place = data[name], f"{where}.{name}" if where else str(name)
        if isinstance(value, Mapping):
            check_keys(value, (), COMMUNICATOR_KEYS, file=file, where=place)
            if "max_ctas" not in value:
                continue
            value, place = value["max_ctas"], f"{place}.max_ctas"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"a CTA count is a whole number >= 1, got {value!r}", file, place)
        kind = MEGATRON_COMMUNICATORS[str(name)]
        if kind is not None and kind not in out:
            out[kind] = int(value)
    return tuple(sorted(out.items()))


def parse_protocols(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``"LL128"``, ``"LL,Simple"``, ``"auto"`` (any case) -> protocol names (``()`` = auto);
    ValueError naming the bad one."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for raw in items:
        name = raw.strip()
        if not name:
            continue
        if name.lower() == "auto":
            return ()
        match = [q for q in PROTOCOLS if q.lower() == name.lower()]
        if not match:
            raise ValueError(f"unknown protocol {name!r} (known: auto, {', '.join(PROTOCOLS)})")
        if match[0] not in out:
            out.append(match[0])
    return tuple(out)


def _efficiency(data: Mapping[str, Any], key: str, file: Any, where: str) -> float:
    value = get_number(data, key, file=file, where=where)
    if value > 1:
        raise InputError(f"an efficiency is a fraction in (0, 1], got {value!r}", file, f"{where}.{key}")
    return float(value)




def cta_pairs(text: str, file: Any, where: str) -> tuple[tuple[str, int], ...]:
    """``NAME=COUNT`` pairs separated by commas or spaces (``dp_cp=8,cp=1``), as
    :func:`parse_max_ctas` reads them; InputError naming ``file`` and ``where``."""
    caps: dict[str, object] = {}
    for item in text.replace(",", " ").split():
        name, _, count = item.partition("=")
        try:
            caps[name] = int(count)
        except ValueError:
            raise InputError(f"expected NAME=COUNT items, got {item!r}", file, where or None) from None
    return parse_max_ctas(caps, file, where)


def nccl_ctas(value: str) -> tuple[tuple[str, int], ...]:
    """``--nccl-max-ctas``: ``NAME=COUNT`` pairs (:func:`cta_pairs`), or the path of a
    Megatron-Core communicator config file, as :func:`parse_max_ctas` reads them; InputError
    naming the flag (or the file and key)."""
    from tracesim.fileio import read_yaml

    text = value.strip()
    if "=" not in text:  # a file: Megatron's per-communicator blocks
        return parse_max_ctas(read_yaml(text), text, "")
    return cta_pairs(text, "--nccl-max-ctas", "")
