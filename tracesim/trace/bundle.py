"""Bundles: what ``tracesim collect`` writes (no torch needed to read one).

A bundle is a directory::

    meta.yaml                     format: tracesim-bundle, version: 1 or 2 (see docs/collect.md)
    rank{r}/trace.json.gz         Kineto Chrome trace of the profiled steps (or trace.json)
    rank{r}/et.json.gz            PyTorch execution trace of the same steps (optional)

Version 1 is a recording of a built-in model (``tracesim collect --workload``): its meta.yaml
names the model spec, batch, sequence length and layout. Version 2 is any recording (the
user's own job run under ``tracesim collect -- CMD``, or trace files imported with ``tracesim
import``): only ``device``, ``torch_version`` and ``ranks`` are required; what is known of the
job (``world_size``, ``backend``, ``process_groups``, ``command``, step times, a model spec)
is checked when present. ``ranks`` is the number of recorded ranks (``rank0 .. rank{n-1}``) or
the list of the ranks recorded (a job of which only some ranks were traced).

:func:`load_bundle` validates ``meta.yaml`` (format, version, the required keys and their
types) and that every rank's trace exists; problems are
:class:`~tracesim.errors.InputError` naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.fileio import read_yaml
from tracesim.specs.model import ModelSpec, model_from_dict
from tracesim.strict import check_keys, get_number, get_str

BUNDLE_FORMAT = "tracesim-bundle"
#: bundle versions this reader understands
SUPPORTED_VERSIONS = (1, 2)
META_NAME = "meta.yaml"

#: keys every version-2 meta.yaml must have (more are allowed)
REQUIRED_V2_KEYS = ("format", "version", "device", "torch_version", "ranks")
#: keys every version-1 meta.yaml must have (more are allowed: newer collectors may add some)
REQUIRED_META_KEYS = (
    "format",
    "version",
    "device",
    "torch_version",
    "threads",
    "model",
    "batch",
    "seq_len",
    "parallel",
    "ranks",
    "warmup_steps",
    "profiled_steps",
    "measured_step_time_s",
)
_PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "ep")
_TRACE_NAMES = ("trace.json.gz", "trace.json")
_ET_NAMES = ("et.json.gz", "et.json")


@dataclass(frozen=True)
class Bundle:
    """A validated bundle directory.

    Attributes:
        path: the bundle directory.
        meta: the parsed ``meta.yaml`` mapping (treat as read-only).
        ranks: the ranks recorded, ``[0, .., ranks - 1]``.
    """

    path: Path
    meta: dict[str, Any]
    ranks: list[int]

    def trace_path(self, rank: int) -> Path:
        """Kineto trace of ``rank`` (``rank{r}/trace.json.gz``, or a plain ``trace.json``)."""
        found = _first_existing(self.path / f"rank{rank}", _TRACE_NAMES)
        if found is None:
            raise InputError(
                f"no trace for rank {rank} (expected rank{rank}/{_TRACE_NAMES[0]})", self.path
            )
        return found

    def et_path(self, rank: int) -> Path | None:
        """Execution trace of ``rank``, or None when the bundle has none for it."""
        return _first_existing(self.path / f"rank{rank}", _ET_NAMES)

    @property
    def meta_path(self) -> Path:
        return self.path / META_NAME

    @property
    def model(self) -> ModelSpec | None:
        """The recorded model spec (a built-in model's), or None."""
        if not isinstance(self.meta.get("model"), Mapping):
            return None
        return model_from_dict(self.meta["model"], self.meta_path)

    @property
    def device(self) -> str:
        """The recorded device name (``cpu`` or a CUDA device name)."""
        return str(self.meta["device"])

    @property
    def measured_step_time_s(self) -> dict[str, float] | None:
        """Wall clock of the unprofiled steps: ``median, min, max`` (seconds) and ``n``; None
        when the recording has none (an import)."""
        value = self.meta.get("measured_step_time_s")
        return dict(value) if isinstance(value, Mapping) else None

    @property
    def profiler_overhead(self) -> dict[str, Any] | None:
        """The profiler-overhead calibration (``per_event_ns`` ...), if the bundle has one."""
        value = self.meta.get("profiler_overhead")
        return dict(value) if value is not None else None

    def rank_meta(self, rank: int) -> dict[str, Any] | None:
        """The ``per_rank`` entry of ``rank`` (its own step times and event counts), if any."""
        entry = rank_entry(self.meta, rank)
        return dict(entry) if entry is not None else None


def rank_entry(meta: Mapping[str, Any] | None, rank: int) -> Mapping[str, Any] | None:
    """The ``per_rank`` entry of ``rank`` in a bundle's ``meta.yaml`` mapping, if any."""
    for entry in (meta or {}).get("per_rank") or ():
        if isinstance(entry, Mapping) and entry.get("rank") == rank:
            return entry
    return None


def _first_existing(folder: Path, names: tuple[str, ...]) -> Path | None:
    for name in names:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` looks like a bundle: a directory holding a ``meta.yaml``."""
    path = Path(path)
    return path.is_dir() and (path / META_NAME).is_file()


def load_bundle(path: str | Path) -> Bundle:
    """Read and validate the bundle at ``path``; InputError names the file and key."""
    path = Path(path)
    meta_path = path / META_NAME
    if not path.exists():
        raise InputError("bundle not found", path)
    if not path.is_dir():
        raise InputError("not a bundle directory", path)
    if not meta_path.is_file():
        raise InputError(f"not a bundle: no {META_NAME}", path)
    meta = read_yaml(meta_path)
    validate_meta(meta, meta_path)
    ranks = bundle_ranks(meta)
    bundle = Bundle(path=path, meta=dict(meta), ranks=ranks)
    for rank in ranks:
        bundle.trace_path(rank)
    return bundle


def bundle_ranks(meta: Mapping[str, Any]) -> list[int]:
    """The ranks a validated meta.yaml says are recorded."""
    value = meta["ranks"]
    return sorted(int(r) for r in value) if isinstance(value, list) else list(range(int(value)))


def validate_meta(meta: Any, file: str | Path) -> None:
    """Check a parsed ``meta.yaml``; raise InputError naming ``file`` and the key."""
    if not isinstance(meta, Mapping):
        raise InputError(f"expected a mapping, got {type(meta).__name__}", file)
    fmt = meta.get("format")
    if fmt != BUNDLE_FORMAT:
        raise InputError(f"expected {BUNDLE_FORMAT!r}, got {fmt!r}", file, "format")
    version = get_number(meta, "version", file=file, kind=int)
    if version not in SUPPORTED_VERSIONS:
        raise InputError(
            f"bundle version {version} is not supported (supported: "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))}); upgrade tracesim",
            file,
            "version",
        )
    for key in (REQUIRED_META_KEYS if version == 1 else REQUIRED_V2_KEYS):
        if key not in meta:
            raise InputError("missing required key", file, key)
    get_str(meta, "device", file=file)
    get_str(meta, "torch_version", file=file)
    if version == 1 or not isinstance(meta["ranks"], list):
        get_number(meta, "ranks", file=file, kind=int)
    else:
        ranks = meta["ranks"]
        if not ranks or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                                for r in ranks) or len(set(ranks)) != len(ranks):
            raise InputError(f"expected a count or a list of distinct ranks >= 0, got {ranks!r}",
                             file, "ranks")
    for key in ("threads", "batch", "seq_len", "profiled_steps", "world_size"):
        if (version == 1 and key != "world_size") or key in meta:
            get_number(meta, key, file=file, kind=int)
    if version == 1 or "warmup_steps" in meta:
        get_number(meta, "warmup_steps", file=file, kind=int, allow_zero=True)
    model = None
    if version == 1 or meta.get("model") is not None:
        try:
            model = model_from_dict(meta["model"], file)
        except InputError as exc:
            where = f"model.{exc.where}" if exc.where else "model"
            raise InputError(exc.message, file, where) from None
    if model is not None and "seq_len" in meta and model.seq_len < int(meta["seq_len"]):
        raise InputError(
            f"seq_len {meta['seq_len']} exceeds the model's seq_len {model.seq_len}",
            file,
            "seq_len",
        )
    if version == 1 or meta.get("parallel") is not None:
        n = len(bundle_ranks(meta)) if version == 1 else int(meta.get("world_size") or len(bundle_ranks(meta)))
        _check_parallel(meta["parallel"], n, file)
    if version == 1 or meta.get("measured_step_time_s") is not None:
        _check_step_time(meta["measured_step_time_s"], file)
    overhead = meta.get("profiler_overhead")
    if overhead is not None:
        if not isinstance(overhead, Mapping):
            raise InputError("expected a mapping", file, "profiler_overhead")
        get_number(overhead, "per_event_ns", file=file, where="profiler_overhead",
                   allow_zero=True)


def _check_parallel(parallel: Any, ranks: int, file: str | Path) -> None:
    check_keys(parallel, ("tp", "pp", "dp"), ("cp", "ep"), file=file, where="parallel")
    degree = {k: get_number(parallel, k, file=file, where="parallel", kind=int, default=1)
              for k in _PARALLEL_KEYS}
    world = degree["tp"] * degree["pp"] * degree["dp"] * degree["cp"]
    if world != ranks:
        raise InputError(
            f"tp x pp x dp x cp = {world} does not match ranks = {ranks}", file, "parallel"
        )


def _check_step_time(value: Any, file: str | Path) -> None:
    where = "measured_step_time_s"
    check_keys(value, ("median", "min", "max", "n"), file=file, where=where)
    median, lo, hi = (get_number(value, k, file=file, where=where) for k in ("median", "min", "max"))
    get_number(value, "n", file=file, where=where, kind=int)
    if not lo <= median <= hi:
        raise InputError(f"expected min <= median <= max, got {lo}, {median}, {hi}", file, where)
