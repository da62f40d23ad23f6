"""Trace folders recorded elsewhere: each rank's Kineto trace and execution trace, found by
name and content, the ranks' clocks aligned, and the lot imported as a bundle.

What a folder may hold (docs/import.md):

* ``torch.profiler.tensorboard_trace_handler`` output, ``{worker}.{ts}.pt.trace.json[.gz]``:
  several cycles of one worker are several files; the latest (highest ``ts``) is taken unless
  ``cycle`` says otherwise (0 = the first, -1 = the latest);
* torchtitan's ``profile_trace/iteration_N/rankR_trace.json[.gz]``: given the parent, the
  files of the highest ``iteration_N`` are taken (:attr:`TraceFolder.iteration` says which);
* any other per-rank files: ``rank{R}``, ``rank_{R}``, ``rank-{R}``, ``worker{R}``,
  ``profile_{R}.json``, ``kineto_trace_{R}.json``, ``device_{R}.json``, ``*_{R}.json`` ...;
* PyTorch execution traces (top-level ``nodes``, ``schema``, ``pid``) in the same folder or
  below it (``et/``), paired with the Kineto trace whose CPU pid equals the ET's ``pid``, else
  by the rank in both names; an ET that pairs with nothing is a warning.

Every ``.json`` / ``.json.gz`` file below the folder (hidden files, bundles and more than
:data:`MAX_DEPTH` levels down excepted) must be a Kineto trace or an execution trace. A rank
is the trace's ``distributedInfo.rank``, else the one in its file name (or its folder's:
``rank3/trace.json``), else 0 when it is the folder's only trace (whose trailing number,
``model__1016002.json``, is no rank: a pid or a job id); two traces of one rank are an error. Clocks: see :func:`clock_shifts`.
"""

from __future__ import annotations

import ast
import gzip
import re
import shutil
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from tracesim.errors import InputError
from tracesim.fileio import atomic_open, atomic_path, output_dir, write_yaml
from tracesim.trace.kineto import (
    load_json_file,
    load_trace_json,
    op_table_from_events,
)
from tracesim.trace.tbcycles import TB_RE, has_ops, natural, select_cycles
from tracesim.trace.traceinfo import trace_device

#: two ranks' first common step windows this close (or overlapping) share a clock
CLOCK_TOLERANCE_NS = 1_000_000
#: how deep below the folder files are looked for
MAX_DEPTH = 4
_SNIFF_BYTES = 1 << 16
_ITER_RE = re.compile(r"^iteration_(\d+)$")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_RES = (re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)", re.I), re.compile(r"(?:^|[^a-z])worker[_-]?(\d+)", re.I))
_DIR_RANK_RE = re.compile(r"^(?:rank|worker)[_-]?(\d+)$", re.I)
_TAIL_RE = re.compile(r"(?:^|[_.-])(\d+)$")
_STRIP = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json")
_HOST_CATS = ("cpu_op", "user_annotation", "operator")
_TORCH_KEYS = ("torch_version", "pytorch_version", "torchVersion", "pytorchVersion")


@dataclass(frozen=True)
class RankTrace:
    """One rank's files and what its Kineto trace says about the job."""

    rank: int
    trace: Path
    #: where the rank came from: ``distributedInfo``, ``file name`` or ``only trace``
    rank_from: str
    world_size: int | None = None
    backend: str = ""
    pid: int | None = None
    device: str = ""
    torch_version: str = ""
    #: ``ProfilerStep#N`` -> (begin, end) in the trace's own clock, ns
    steps: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    process_groups: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    et: Path | None = None


@dataclass(frozen=True)
class TraceFolder:
    """A folder's ranks, as :func:`read_folder` found them."""

    path: Path
    ranks: tuple[RankTrace, ...]
    #: rank -> ns added to its times; empty when the recorded times are kept
    clock_shift_ns: Mapping[int, int]
    clock: str
    iteration: str | None = None
    skipped: tuple[Path, ...] = ()
    warnings: tuple[str, ...] = ()
    #: rank -> op table (times shifted), when read with ``tables=True``
    tables: Mapping[int, pd.DataFrame] = field(default_factory=dict)

    @property
    def world_size(self) -> int | None:
        sizes = [r.world_size for r in self.ranks if r.world_size]
        return max(sizes) if sizes else None

    @property
    def device(self) -> str:
        return next((r.device for r in self.ranks if r.device), "")

    def meta(self) -> dict[str, Any]:
        """The version-2 bundle ``meta.yaml`` of these ranks (also a folder source's meta)."""
        ranks = [r.rank for r in self.ranks]
        world = self.world_size
        whole = ranks == list(range(world if world else len(ranks)))
        meta: dict[str, Any] = {
            "format": "tracesim-bundle", "version": 2, "device": self.device or "unknown",
            "torch_version": next((r.torch_version for r in self.ranks if r.torch_version), "unknown"),
            "ranks": len(ranks) if whole else ranks,
        }
        if world:
            meta["world_size"] = world
        backend = next((r.backend for r in self.ranks if r.backend), "")
        if backend:
            meta["backend"] = backend
        meta["source"] = "import"

        def rel(p: Path) -> str:  # every file found is below the folder
            return p.relative_to(self.path).as_posix()

        files = [{"rank": r.rank, "trace": rel(r.trace), "rank_from": r.rank_from,
                  **({"et": rel(r.et)} if r.et is not None else {})} for r in self.ranks]
        meta["imported_from"] = {"folder": str(self.path.resolve()),
                                 **({"iteration": self.iteration} if self.iteration else {}),
                                 "files": files,
                                 **({"skipped": [rel(p) for p in self.skipped]} if self.skipped else {})}
        meta["clock"] = self.clock
        if self.clock_shift_ns:
            meta["clock_shift_ns"] = {int(k): int(v) for k, v in sorted(self.clock_shift_ns.items())}
        groups: dict[str, dict[str, Any]] = {}
        for r in self.ranks:
            for name, desc, members in r.process_groups:
                groups.setdefault(name, {"name": name, "desc": desc, "ranks": list(members)})
        if groups:
            meta["process_groups"] = [groups[k] for k in sorted(groups, key=natural)]
        if self.warnings:
            meta["warnings"] = list(self.warnings)
        return meta


def has_trace_files(folder: str | Path) -> bool:
    """Whether ``folder`` has any ``.json`` / ``.json.gz`` file below it (cheap; nothing read)."""
    return next(_files(Path(folder)), None) is not None


def read_folder(folder: str | Path, *, cycle: int = -1, tables: bool = False) -> TraceFolder:
    """Find every rank's traces in ``folder`` (module docstring) and align their clocks.

    ``cycle``: which of a worker's ``tensorboard_trace_handler`` files to take (-1: the
    latest). ``tables``: also keep each rank's op table, its times shifted as
    :func:`clock_shifts` says (execution traces are only found: :attr:`RankTrace.et`).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("not a directory", folder)
    files = _walk(folder)
    if not files:
        raise InputError("no trace files (.json, .json.gz) in the folder", folder)
    files, iteration = _pick_iteration(folder, files)
    kinds = {p: _sniff(p) for p in files}
    traces = [p for p in files if kinds[p][0] == "kineto"]
    ets = [(p, kinds[p][1]) for p in files if kinds[p][0] == "et"]
    if not traces:
        raise InputError("no Kineto traces in the folder (only execution traces)", folder)
    warnings_cut: list[str] = []
    traces, skipped, earlier = select_cycles(traces, cycle)
    ranks: list[RankTrace] = []
    table_of: dict[int, pd.DataFrame] = {}
    for path in traces:
        data = load_trace_json(path)
        for prev in earlier.get(path, ()):  # a last cycle cut short: the one before it
            if has_ops(data):
                break
            warnings_cut.append(f"{path.name} recorded no operators (a profiler cycle cut "
                                f"short); took the cycle before it, {prev.name}")
            skipped[skipped.index(prev)] = path
            path, data = prev, load_trace_json(prev)
        info = _facts(data, path, only=len(traces) == 1)
        clash = next((r for r in ranks if r.rank == info.rank), None)
        if clash is not None:
            raise InputError(f"claims rank {info.rank} ({info.rank_from}), as does {clash.trace} "
                             f"({clash.rank_from}); keep one trace per rank in the folder", path)
        if info.world_size and info.rank >= info.world_size:
            raise InputError(f"rank {info.rank} is outside world_size {info.world_size}", path,
                             "distributedInfo")
        ranks.append(info)
        if tables:
            table_of[info.rank] = op_table_from_events(data, path, rank=info.rank)
        del data
    sizes = {r.world_size for r in ranks if r.world_size}
    if len(sizes) > 1:
        odd = next(r for r in ranks if r.world_size == max(sizes))
        raise InputError(f"world_size {max(sizes)} differs from the other traces' {min(sizes)}: "
                         "the folder mixes traces of different jobs", odd.trace, "distributedInfo")
    ranks.sort(key=lambda r: r.rank)
    paired, warnings = _pair_ets(ranks, ets)
    warnings = [*warnings_cut, *warnings]
    ranks = [replace(r, et=paired.get(r.rank)) for r in ranks]
    shifts, clock = clock_shifts({r.rank: r.steps for r in ranks})
    for rank, shift in shifts.items():
        if rank in table_of and shift:
            table_of[rank] = table_of[rank].assign(ts_ns=table_of[rank]["ts_ns"] + shift)
    return TraceFolder(folder, tuple(ranks), shifts, clock, iteration, tuple(skipped),
                       tuple(warnings), table_of)


def clock_shifts(steps: Mapping[int, Mapping[str, tuple[int, int]]],
                 tolerance_ns: int = CLOCK_TOLERANCE_NS) -> tuple[dict[int, int], str]:
    """The rule for ranks recorded on clocks that may differ: (rank -> ns to add, what was done).

    The first ``ProfilerStep#N`` that every rank recorded is the reference. When its windows
    on all ranks overlap, or miss each other by at most ``tolerance_ns`` (one host, or
    synchronised clocks), the recorded times are kept and no shift is returned. Otherwise every
    rank is shifted so that this step begins when it begins on the lowest rank (whose shift
    is 0). One rank, or no step common to all, keeps the recorded times.
    """
    if len(steps) < 2:
        return {}, "recorded times (one rank)"
    common = set.intersection(*(set(s) for s in steps.values()))
    common = {n for n in common if _STEP_RE.match(n)}
    if not common:
        return {}, "recorded times (no ProfilerStep#N common to all ranks)"
    first = min(common, key=lambda n: int(n.split("#")[1]))
    win = {r: s[first] for r, s in steps.items()}
    if max(b for b, _ in win.values()) <= min(e for _, e in win.values()) + tolerance_ns:
        return {}, f"recorded times ({first} overlaps on every rank)"
    ref = min(win)
    shifts = {r: win[ref][0] - b for r, (b, _) in sorted(win.items())}
    return shifts, f"shifted so that {first} begins together (rank {ref}'s clock)"


def import_folder(source: Path, out: Path, *, cycle: int = -1) -> Path:
    """Turn the trace folder ``source`` into a version-2 bundle at ``out`` (docs/import.md).

    Each rank's trace becomes ``rank{R}/trace.json.gz`` and its execution trace
    ``rank{R}/et.json.gz`` (gzipped if they were not); ``meta.yaml`` is :meth:`TraceFolder.meta`.
    The bundle is written to a temporary directory beside ``out`` and renamed into place;
    ``out`` may be an existing bundle or empty directory (replaced), nothing else. Returns ``out``.
    """
    from tracesim.trace.bundle import is_bundle, load_bundle

    source, out = Path(source), Path(out)
    if out.exists() and not (is_bundle(out) or (out.is_dir() and not any(out.iterdir()))):
        raise InputError("exists and is not a bundle; refusing to overwrite it", out)
    found = read_folder(source, cycle=cycle)
    for r in found.ranks:
        _check_et(r)
    output_dir(out.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    old = None
    try:
        for r in found.ranks:
            (tmp / f"rank{r.rank}").mkdir()
            _copy_gzipped(r.trace, tmp / f"rank{r.rank}" / "trace.json.gz")
            if r.et is not None:
                _copy_gzipped(r.et, tmp / f"rank{r.rank}" / "et.json.gz")
        write_yaml(tmp / "meta.yaml", found.meta())
        load_bundle(tmp)
        if out.exists():
            old = out.with_name(f"{tmp.name}.old")
            out.rename(old)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not out.exists():
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def _check_et(r: RankTrace) -> None:
    if r.et is None:
        return
    data = load_json_file(r.et, "an execution trace (.json or .json.gz)")
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InputError("not a PyTorch execution trace: no 'nodes' list", r.et, "nodes")


def _copy_gzipped(src: Path, dst: Path) -> None:
    """``src`` as the gzipped ``dst``: gzip data copied byte for byte, anything else gzipped."""
    with open(src, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if gz:
        with atomic_path(dst) as tmp:
            shutil.copyfile(src, tmp)
        return
    with open(src, "rb") as fin, atomic_open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


def _walk(folder: Path) -> list[Path]:
    """``.json`` / ``.json.gz`` files below ``folder`` (:func:`_files`), in natural order."""
    return sorted(_files(folder), key=lambda p: natural(str(p.relative_to(folder))))


def _files(folder: Path, depth: int = 0) -> Iterator[Path]:
    """``.json`` / ``.json.gz`` files below ``folder``: not hidden, not inside a bundle or a
    workload, at most :data:`MAX_DEPTH` levels down."""
    if depth > MAX_DEPTH or not folder.is_dir():
        return
    if depth and ((folder / "meta.yaml").is_file() or (folder / "graph.yaml").is_file()):
        return
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise InputError(f"cannot list ({exc.strerror or exc})", folder) from None
    for p in entries:
        if p.name.startswith("."):
            continue
        if p.is_dir():
            yield from _files(p, depth + 1)
        elif p.is_file() and p.name.lower().endswith((".json", ".json.gz")):
            yield p


def _pick_iteration(folder: Path, files: list[Path]) -> tuple[list[Path], str | None]:
    """torchtitan: keep only the files of the highest ``iteration_N`` folder (if several)."""
    def iteration(p: Path) -> int | None:
        for part in p.relative_to(folder).parts[:-1]:
            m = _ITER_RE.match(part)
            if m:
                return int(m.group(1))
        return None

    its = {iteration(p) for p in files} - {None}
    if not its:
        return files, None
    top = max(i for i in its if i is not None)
    kept = [p for p in files if iteration(p) in (top, None)]
    return kept, f"iteration_{top}"


def _sniff(path: Path) -> tuple[str, int | None]:
    """("kineto" | "et", the ET's top-level pid) from the file's first bytes."""
    try:
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
            head = fh.read(_SNIFF_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read ({exc})", path) from None
    whole = len(head) <= _SNIFF_BYTES
    text = head[:_SNIFF_BYTES].decode("utf-8", "replace").lstrip()
    if text.startswith("[") or any(f'"{k}"' in text for k in ("traceEvents", "deviceProperties", "schemaVersion")):
        return "kineto", None
    nodes = text.find('"nodes"')
    if nodes >= 0:
        m = re.search(r'"pid"\s*:\s*(\d+)', text[:nodes])
        return "et", int(m.group(1)) if m else None
    if not whole:  # a marker may come later in a large file: read it all
        data = load_json_file(path)
        if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
            return "kineto", None
        if isinstance(data, dict) and isinstance(data.get("nodes"), list):
            pid = data.get("pid")
            return "et", pid if isinstance(pid, int) else None
    raise InputError("not a Kineto trace ('traceEvents') or a PyTorch execution trace ('nodes'); "
                     "move it out of the trace folder", path)


def name_rank(path: Path, tail: bool = True) -> int | None:
    """The rank in a trace's file name (``rank3``, ``rank_3``, ``worker3``, ``*_3.json`` ...),
    or its folder's name is one (``rank3/trace.json``); None if neither has one. ``tail``: a
    trailing number counts (not for ``tensorboard_trace_handler`` worker names, whose default
    ``host_pid`` ends in a pid)."""
    m = TB_RE.match(path.name)
    stem = m["worker"] if m else path.name
    tail = tail and m is None
    for suffix in _STRIP:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    for rx in _RANK_RES:
        found = rx.search(stem)
        if found:
            return int(found.group(1))
    if tail:
        found = _TAIL_RE.search(stem)
        if found:
            return int(found.group(1))
    found = _DIR_RANK_RE.match(path.parent.name)
    return int(found.group(1)) if found else None


def _literal(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    return value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _facts(data: Mapping[str, Any], path: Path, only: bool) -> RankTrace:
    """What a loaded Kineto trace says: rank (module docstring), world, pid, device, steps."""
    info = _literal(data.get("distributedInfo"))
    info = info if isinstance(info, Mapping) else {}
    rank, world = _int(info.get("rank")), _int(info.get("world_size"))
    how = "distributedInfo"
    if rank is None:  # a folder's only trace: a trailing number is no rank (a pid, a job id)
        rank, how = name_rank(path, tail=not only), "file name"
    if rank is None:
        if not only:
            raise InputError("no rank: the trace has no distributedInfo.rank and its name none "
                             "(rank{R}, worker{R}, *_{R}.json ...); rename it", path)
        rank, how = 0, "only trace"
    pid = None
    steps: dict[str, tuple[int, int]] = {}
    pgs: dict[str, tuple[str, str, tuple[int, ...]]] = {}
    for ev in data["traceEvents"]:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or str(ev.get("cat", "")).lower() not in _HOST_CATS:
            continue
        if pid is None:
            pid = _int(ev.get("pid"))
        name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur", 0)
        if not isinstance(name, str) or not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            continue
        if _STEP_RE.match(name) and name not in steps:
            begin = int(round(float(ts) * 1000.0))
            steps[name] = (begin, begin + int(round(float(dur) * 1000.0)))
        elif name == "record_param_comms" and isinstance(ev.get("args"), dict):
            _group(ev["args"], pgs)
    if pid is None:  # nothing a replay could run: say so now, not after writing a bundle
        raise InputError("the trace has no host (CPU) events (cpu_op, user_annotation): "
                         "nothing to replay", path, "traceEvents")
    for pg in _literal(info.get("pg_config")) or ():
        if isinstance(pg, Mapping):
            _group({"Process Group Name": pg.get("pg_name"), "Process Group Description":
                    pg.get("pg_desc"), "Process Group Ranks": pg.get("ranks")}, pgs)
    torch_version = next((str(data[k]) for k in _TORCH_KEYS if data.get(k)), "")
    return RankTrace(rank, path, how, world, str(info.get("backend") or ""), pid, trace_device(data),
                     torch_version, steps, tuple(pgs[k] for k in sorted(pgs, key=natural)))


def _group(args: Mapping[str, Any], out: dict[str, tuple[str, str, tuple[int, ...]]]) -> None:
    name = args.get("Process Group Name", args.get("Process Group ID"))
    members = _literal(args.get("Process Group Ranks"))
    if name is None or not isinstance(members, (list, tuple)) or not members:
        return
    if not all(_int(m) is not None for m in members):  # truncated ("...") or odd: unusable
        return
    out.setdefault(str(name), (str(name), str(args.get("Process Group Description") or ""),
                               tuple(int(m) for m in members)))


def _pair_ets(ranks: list[RankTrace], ets: list[tuple[Path, int | None]]) -> tuple[dict[int, Path], list[str]]:
    """rank -> its execution trace (by pid, else by the rank in the name); warnings."""
    by_pid = {r.pid: r.rank for r in ranks if r.pid is not None}
    if len(by_pid) < sum(r.pid is not None for r in ranks):  # pids collide (several hosts)
        by_pid = {}
    known = {r.rank for r in ranks}
    paired: dict[int, Path] = {}
    warnings: list[str] = []
    for path, pid in ets:
        rank = by_pid.get(pid) if pid is not None else None
        if rank is None:
            named = name_rank(path)
            rank = named if named in known else None
        if rank is None:
            warnings.append(f"{path}: execution trace (pid {pid}) matches no Kineto trace; ignored")
            continue
        if rank in paired:
            raise InputError(f"a second execution trace for rank {rank} (the first: {paired[rank]})", path)
        paired[rank] = path
    return paired, warnings
