"""Sweep spaces: which replays a sweep runs (``SPACE.yaml``).

A space is a YAML mapping (all keys optional except that it must produce points)::

    name: llama3-8b-layouts
    source: null                  # a bundle / workload directory for the template (optional)
    base:                         # settings every point shares
      model: llama3-8b
      cluster: h100x128
      global_batch: 512
    axes:                         # the space is the product of the axes ...
      tp: [1, 2, 4, 8]
      pp: [1, 2, 4]
      nic_Gbps: [200, 400]
      layout:                     # ... a grouped axis sets several keys together
        - {schedule: 1f1b}
        - {schedule: interleaved, vpp: 2}
    points:                       # ... followed by explicit points (merged over `base`)
      - {tp: 8, pp: 16, schedule: gpipe}
    constraints:                  # safe expressions; a point failing one is not in the space
      - tp * pp * dp == gpus
      - pp <= layers // 4
    filters:
      fits_memory: true           # replayed points over the device memory: status "skipped"
      max_memory_gib: 70          # optional tighter budget per GPU
    prices:                       # USD per GPU-hour by device name: enables cost columns
      h100: 2.49
      h200: 3.49

Settings (axis or key names): ``source`` (the template's bundle or workload), every replay
option (:class:`tracesim.options.ReplayOptions`: ``model, cluster, tp, pp, dp, ...``;
``template: default`` is the stored default) and the cluster variants ``gpu`` (a device
profile name replacing the cluster's device), ``nic_Gbps`` (per NIC, per direction) and
``nodes``.

Constraints see every setting of the point, the replay defaults (``tp = pp = cp = ep = vpp
= micro_batch = 1``, ``zero = 0``, ``dp = gpus // (tp * pp * cp)``, ``global_batch =
micro_batch * dp``) and derived names: ``gpus``, ``nodes``, ``gpus_per_node``, ``device``,
``nic_Gbps`` of the (variant) cluster, ``world = tp * pp * dp * cp``, ``num_micro``, and
the model's ``layers, hidden, heads, kv_heads, ffn_hidden, vocab, experts``.

Relative ``model`` / ``cluster`` / ``source`` paths are taken relative to the space file
when such a file exists there; names without a suffix are shipped specs (``workloads/``,
``topologies/``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracesim import __version__
from tracesim.errors import InputError
from tracesim.fileio import read_yaml
from tracesim.options import check_value, option_names
from tracesim.strict import check_keys
from tracesim.sweep.expr import Expr, parse_expr
from tracesim.sweep.resolve import SpecResolver, digest, slug

PATH_KEYS = ("model", "cluster", "source")
#: every setting a point may have, in the order of the input columns of results.parquet:
#: where the template comes from, the cluster variants, and every replay option
#: (:class:`tracesim.options.ReplayOptions`)
SETTING_KEYS = ("model", "cluster", "gpu", "nodes", "nic_Gbps", "source",
                *(k for k in option_names() if k not in ("model", "cluster", "nodes")))
#: settings that change the cluster instead of being replay options
CLUSTER_VARIANT_KEYS = ("gpu", "nodes", "nic_Gbps")
_TOP_KEYS = ("name", "source", "base", "axes", "points", "constraints", "filters", "prices")


@dataclass(frozen=True)
class Axis:
    """One axis of the product: ``name`` and its values, each a mapping of settings
    (``{tp: 2}`` for a plain axis ``tp``, several keys for a grouped axis)."""

    name: str
    values: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class SweepSpace:
    """A parsed, validated ``SPACE.yaml`` (see the module docstring).

    ``max_memory_gib`` is a per-GPU budget in GiB (``None``: none); ``prices`` maps a device
    name to USD per GPU-hour.
    """

    file: str
    name: str
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    points: tuple[dict[str, Any], ...]
    constraints: tuple[Expr, ...]
    fits_memory: bool = False
    max_memory_gib: float | None = None
    prices: dict[str, float] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return Path(self.file).resolve().parent


@dataclass(frozen=True)
class SweepPoint:
    """One replay of a sweep: what a Dask task receives.

    Attributes:
        index: position in the expanded space.
        settings: the point's settings as the space gives them (input columns).
        source: template source passed to :func:`tracesim.pipeline.predict` (or None).
        opts: the replay options (:class:`tracesim.options.ReplayOptions` fields) without
            model / cluster.
        model_spec: the resolved model spec mapping (None: the source's model).
        model_file: where the driver wrote ``model_spec`` (``SWEEP_DIR/models/...``).
        cluster_spec: the resolved (variant) cluster spec mapping.
        cluster_file: where the driver wrote it (``SWEEP_DIR/clusters/<name>-<hash>.yaml``).
        fits_memory, max_memory_gib: the space's filters.
        key: hex digest of the inputs and the tracesim version (resume key): settings,
            model and cluster spec contents, the content of the template source (the
            ``source`` bundle / trace, else the family's stored default bundle), filters.
    """

    index: int
    settings: dict[str, Any]
    source: str | None
    opts: dict[str, Any]
    model_spec: dict[str, Any] | None
    model_file: str | None
    cluster_spec: dict[str, Any]
    cluster_file: str
    fits_memory: bool
    max_memory_gib: float | None
    key: str

    @property
    def cluster_name(self) -> str:
        return str(self.cluster_spec["name"])


@dataclass(frozen=True)
class Expansion:
    """The points of a space, and how many product / explicit points were dropped."""

    points: tuple[SweepPoint, ...]
    excluded: int  # failing a constraint
    duplicates: int  # same key as an earlier point


# ----------------------------------------------------------------------------- parsing


def _check_setting(key: str, value: Any, file: str, where: str) -> Any:
    if key not in SETTING_KEYS:
        raise InputError(f"unknown setting {key!r} (known: {', '.join(SETTING_KEYS)})", file, where)
    if value is None:
        return None
    if key == "nic_Gbps":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise InputError(f"expected a bandwidth > 0 in Gb/s, got {value!r}", file, where)
    elif key == "nodes":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"expected a positive integer, got {value!r}", file, where)
    elif key in ("gpu", "source"):
        if not isinstance(value, str) or not value:
            raise InputError(f"expected a name or path, got {value!r}", file, where)
    elif key == "template" and value == "default":
        return value  # the stored default template (no template option)
    else:
        value = check_value(key, value, file, where)
        if key in ("model", "cluster", "template") and not value:
            raise InputError(f"expected a name or path, got {value!r}", file, where)
    return value


def _settings(data: Any, file: str, where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise InputError(f"expected a mapping of settings, got {data!r}", file, where)
    return {str(k): _check_setting(str(k), v, file, f"{where}.{k}") for k, v in data.items()}


def _axis(name: str, values: Any, file: str) -> Axis:
    where = f"axes.{name}"
    if not isinstance(values, list) or not values:
        raise InputError(f"expected a non-empty list of values, got {values!r}", file, where)
    if name in SETTING_KEYS:
        return Axis(name, tuple({name: _check_setting(name, v, file, f"{where}[{i}]")}
                                for i, v in enumerate(values)))
    if not all(isinstance(v, Mapping) for v in values):
        raise InputError(f"{name!r} is not a setting ({', '.join(SETTING_KEYS)}); a grouped axis "
                         "lists mappings of settings", file, where)
    return Axis(name, tuple(_settings(v, file, f"{where}[{i}]") for i, v in enumerate(values)))


def space_from_dict(data: Any, file: str | Path) -> SweepSpace:
    """Validate a space mapping strictly (unknown keys and settings are InputErrors)."""
    f = str(file)
    check_keys(data, (), _TOP_KEYS, file=f)
    base = _settings(data.get("base") or {}, f, "base")
    if data.get("source") is not None:
        base["source"] = _check_setting("source", data["source"], f, "source")
    axes_data = data.get("axes") or {}
    if not isinstance(axes_data, Mapping):
        raise InputError(f"expected a mapping of axis name to values, got {axes_data!r}", f, "axes")
    axes = tuple(_axis(str(k), v, f) for k, v in axes_data.items())
    pts = data.get("points") or []
    if not isinstance(pts, list):
        raise InputError(f"expected a list of points, got {pts!r}", f, "points")
    points = tuple(_settings(p, f, f"points[{i}]") for i, p in enumerate(pts))
    if not axes and not points and not base:
        raise InputError("the space is empty: give base, axes and/or points", f)
    cons = data.get("constraints") or []
    if isinstance(cons, str):
        cons = [cons]
    if not isinstance(cons, list):
        raise InputError(f"expected a list of expressions, got {cons!r}", f, "constraints")
    constraints = tuple(parse_expr(c, f, f"constraints[{i}]") for i, c in enumerate(cons))
    filt = data.get("filters") or {}
    check_keys(filt, (), ("fits_memory", "max_memory_gib"), file=f, where="filters")
    fits = filt.get("fits_memory", False)
    if not isinstance(fits, bool):
        raise InputError(f"expected true or false, got {fits!r}", f, "filters.fits_memory")
    max_mem = filt.get("max_memory_gib")
    if max_mem is not None and (isinstance(max_mem, bool) or not isinstance(max_mem, (int, float))
                                or not max_mem > 0):
        raise InputError(f"expected GiB > 0, got {max_mem!r}", f, "filters.max_memory_gib")
    prices_data = data.get("prices") or {}
    if not isinstance(prices_data, Mapping):
        raise InputError(f"expected a mapping of device name to USD per GPU-hour, got {prices_data!r}",
                         f, "prices")
    prices: dict[str, float] = {}
    for dev, usd in prices_data.items():
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not usd > 0:
            raise InputError(f"expected USD per GPU-hour > 0, got {usd!r}", f, f"prices.{dev}")
        prices[str(dev)] = float(usd)
    name = data.get("name", Path(f).stem)
    if not isinstance(name, str):
        raise InputError(f"expected a string, got {name!r}", f, "name")
    _check_specs(base, axes, points, f)
    return SweepSpace(file=f, name=name, base=base, axes=axes, points=points,
                      constraints=constraints, fits_memory=fits,
                      max_memory_gib=float(max_mem) if max_mem is not None else None,
                      prices=prices)


#: settings naming a spec, checked when the space is read (``gpu``, ``device``: profiles)
_SPEC_SETTINGS = ("model", "cluster", "gpu", "device", "source_device")


def _check_specs(base: Mapping[str, Any], axes: tuple[Axis, ...],
                 points: tuple[dict[str, Any], ...], file: str) -> None:
    """Every model, cluster and device a space names exists and reads, before any point
    runs: an unknown name or a missing file is an InputError naming the space file and the
    key (a bad spec file names its own file and key)."""
    places: list[tuple[str, str, Any]] = [(f"base.{k}", k, v) for k, v in base.items()]
    for a in axes:
        for i, values in enumerate(a.values):
            places += [(f"axes.{a.name}[{i}]" if a.name in SETTING_KEYS else
                        f"axes.{a.name}[{i}].{k}", k, v) for k, v in values.items()]
    for i, p in enumerate(points):
        places += [(f"points[{i}].{k}", k, v) for k, v in p.items()]
    res = SpecResolver(Path(file).resolve().parent, file)
    seen: set[tuple[str, str]] = set()
    for where, key, value in places:
        if key in _SPEC_SETTINGS and isinstance(value, str) and (key, value) not in seen:
            seen.add((key, value))
            _check_spec(res, key, value, file, where)


def _check_spec(res: SpecResolver, key: str, value: str, file: str, where: str) -> None:
    from tracesim.catalog import load_cluster
    from tracesim.hardware.device import get_device

    path = res.path(value)
    try:
        if key == "model":
            res.model(value)
        elif key == "cluster":
            load_cluster(path)
        else:
            get_device(path, file=file, where=where)
    except InputError as exc:
        if exc.file and (exc.file.startswith("--") or Path(exc.file) == Path(path)):
            # an unknown name, or the file the setting names is missing: say where it is set
            raise InputError(exc.message if exc.file.startswith("--")
                             else f"{value}: {exc.message}", file, where) from None
        raise


def load_space(path: str | Path) -> SweepSpace:
    """Read and validate ``SPACE.yaml`` (safe YAML; InputError names file and key)."""
    return space_from_dict(read_yaml(path), path)


# ----------------------------------------------------------------------------- expansion


def raw_settings(space: SweepSpace) -> list[dict[str, Any]]:
    """The settings of every point before constraints: product of the axes, then the
    explicit points, each merged over ``base`` (later keys win)."""
    out: list[dict[str, Any]] = []
    if space.axes:
        for combo in itertools.product(*(a.values for a in space.axes)):
            s = dict(space.base)
            for part in combo:
                s.update(part)
            out.append(s)
    elif not space.points:
        out.append(dict(space.base))
    for p in space.points:
        out.append({**space.base, **p})
    return out


def _scope(settings: Mapping[str, Any], cluster: Any, model: Any) -> dict[str, Any]:
    s: dict[str, Any] = {k: v for k, v in settings.items() if v is not None}

    def get(k: str, default: Any) -> Any:
        v = settings.get(k)
        return default if v is None else v

    tp, pp, cp = get("tp", 1), get("pp", 1), get("cp", 1)
    dp = get("dp", cluster.gpus // (tp * pp * cp))
    mb = get("micro_batch", 1)
    s.update(tp=tp, pp=pp, cp=cp, dp=dp, ep=get("ep", 1), vpp=get("vpp", 1), zero=get("zero", 0),
             micro_batch=mb, global_batch=get("global_batch", mb * dp), sp=get("sp", False),
             fsdp=get("fsdp", False), schedule=get("schedule", "1f1b"),
             recompute=get("recompute", "none"))
    s["num_micro"] = s["global_batch"] // (mb * dp) if mb * dp else 0
    s["world"] = tp * pp * dp * cp
    s.update(gpus=cluster.gpus, nodes=cluster.nodes, gpus_per_node=cluster.gpus_per_node,
             nic_Gbps=cluster.inter_node.nic_Gbps if cluster.inter_node else 0.0,
             device=cluster.device if isinstance(cluster.device, str)
             else str(cluster.device.get("name", "inline")))
    s.setdefault("gpu", s["device"])
    if model is not None:
        s.update(layers=model.layers, hidden=model.hidden, heads=model.heads,
                 kv_heads=model.kv_heads, ffn_hidden=model.ffn_hidden, vocab=model.vocab,
                 experts=model.experts or 0)
        s.setdefault("seq_len", model.seq_len)
        s.setdefault("dtype", model.dtype)
    return s


def expand_space(space: SweepSpace, sweep_dir: str | Path) -> Expansion:
    """Resolve every point of ``space`` (models, cluster variants), apply the constraints,
    drop duplicates and compute each point's key. Files are named under ``sweep_dir``
    (``clusters/``, ``models/``) but not written here (:func:`write_spec_files`)."""
    sweep_dir = Path(sweep_dir).resolve()
    res = SpecResolver(space.directory, space.file)
    points: list[SweepPoint] = []
    seen: set[str] = set()
    excluded = duplicates = 0
    for settings in raw_settings(space):
        if settings.get("cluster") is None:
            raise InputError("every point needs a cluster (set it in base, an axis or the point)",
                             space.file, "cluster")
        cluster = res.cluster(settings["cluster"], settings.get("gpu"), settings.get("nodes"),
                              settings.get("nic_Gbps"))
        model = res.model(settings["model"]) if settings.get("model") else None
        scope = _scope(settings, cluster, model)
        if not all(c.test(scope) for c in space.constraints):
            excluded += 1
            continue
        point = make_point(len(points), settings, cluster, model, space, sweep_dir, res)
        if point.key in seen:
            duplicates += 1
            continue
        seen.add(point.key)
        points.append(point)
    return Expansion(points=tuple(points), excluded=excluded, duplicates=duplicates)


def make_point(index: int, settings: Mapping[str, Any], cluster: Any, model: Any,
               space: SweepSpace, sweep_dir: Path, res: SpecResolver) -> SweepPoint:
    """Build one :class:`SweepPoint` and its key (hash of inputs + tracesim version)."""
    opts = {k: v for k, v in settings.items()
            if v is not None and k not in PATH_KEYS and k not in CLUSTER_VARIANT_KEYS}
    if opts.get("template") == "default":
        del opts["template"]
    for k in ("device", "source_device"):  # profile YAMLs beside the space file
        if isinstance(opts.get(k), str):
            opts[k] = res.path(opts[k])
    source = res.source(settings["source"]) if settings.get("source") else None
    cluster_spec = cluster.to_dict()
    c_hash = digest(cluster_spec)
    cluster_file = sweep_dir / "clusters" / f"{slug(cluster.name)}-{c_hash[:12]}.yaml"
    model_spec = model_file = None
    if model is not None:
        model_spec = model.to_dict()
        m_hash = digest(model_spec)
        model_file = str(sweep_dir / "models" / f"{slug(model.name)}-{m_hash[:12]}.yaml")
    filters = {"fits_memory": space.fits_memory, "max_memory_gib": space.max_memory_gib}
    key = digest({"tracesim": __version__, "source": source, "opts": opts,
                  "template": res.template_digest(source, model, settings),
                  "model": model_spec, "cluster": cluster_spec, "filters": filters})
    return SweepPoint(index=index, settings=dict(settings), source=source, opts=opts,
                      model_spec=model_spec, model_file=model_file, cluster_spec=cluster_spec,
                      cluster_file=str(cluster_file), fits_memory=space.fits_memory,
                      max_memory_gib=space.max_memory_gib, key=key)


def write_spec_files(points: tuple[SweepPoint, ...] | list[SweepPoint]) -> None:
    """Write each distinct model / cluster spec the points name (atomically, once)."""
    from tracesim.fileio import write_yaml

    done: set[str] = set()
    for p in points:
        for path, spec in ((p.cluster_file, p.cluster_spec), (p.model_file, p.model_spec)):
            if path and spec is not None and path not in done:
                done.add(path)
                if not Path(path).exists():
                    write_yaml(path, spec)
