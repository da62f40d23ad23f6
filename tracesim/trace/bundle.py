"""Bundles: what ``tracesim collect`` writes (no torch needed to read one).

A bundle is a directory::

    meta.yaml                     format: tracesim-bundle, version: 1, ... (see docs/collect.md)
    rank{r}/trace.json.gz         Kineto Chrome trace of the profiled steps (or trace.json)
    rank{r}/et.json.gz            PyTorch execution trace of the same steps (optional)

:func:`load_bundle` validates ``meta.yaml`` (format, version, the required keys and their
types, the model spec) and that every rank's trace exists; problems are
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
SUPPORTED_VERSIONS = (1,)
META_NAME = "meta.yaml"

#: keys every meta.yaml must have (more are allowed: newer collectors may add some)
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
    def model(self) -> ModelSpec:
        """The recorded model spec."""
        return model_from_dict(self.meta["model"], self.meta_path)

    @property
    def device(self) -> str:
        """The recorded device name (``cpu`` or a CUDA device name)."""
        return str(self.meta["device"])

    @property
    def measured_step_time_s(self) -> dict[str, float]:
        """Wall clock of the unprofiled steps: ``median, min, max`` (seconds) and ``n``."""
        return dict(self.meta["measured_step_time_s"])

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
    ranks = list(range(int(meta["ranks"])))
    bundle = Bundle(path=path, meta=dict(meta), ranks=ranks)
    for rank in ranks:
        bundle.trace_path(rank)
    return bundle


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
    for key in REQUIRED_META_KEYS:
        if key not in meta:
            raise InputError("missing required key", file, key)
    get_str(meta, "device", file=file)
    get_str(meta, "torch_version", file=file)
    for key in ("threads", "batch", "seq_len", "ranks", "profiled_steps"):
        get_number(meta, key, file=file, kind=int)
    get_number(meta, "warmup_steps", file=file, kind=int, allow_zero=True)
    try:
        model = model_from_dict(meta["model"], file)
    except InputError as exc:
        where = f"model.{exc.where}" if exc.where else "model"
        raise InputError(exc.message, file, where) from None
    if model.seq_len < int(meta["seq_len"]):
        raise InputError(
            f"seq_len {meta['seq_len']} exceeds the model's seq_len {model.seq_len}",
            file,
            "seq_len",
        )
    _check_parallel(meta["parallel"], int(meta["ranks"]), file)
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
