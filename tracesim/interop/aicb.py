"""SimAI / AICB workload files (``.txt``): reading, validating and writing.

The format (written from SimAI's workload parser, ``astra-sim-alibabacloud/astra-sim/
workload/Workload.cc`` and ``Layer.cc``, and AICB's example workloads, see docs/interop.md)::

    HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1 vpp: 1 ga: 1 \\
        all_gpus: 16 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0
    130
    embedding_layer  -1  1200  ALLREDUCE  16777216  1  NONE  0  1  NONE  0  100
    ...

Line 1: the parallelism policy, then ``key: value`` pairs: ``model_parallel_NPU_group`` (TP
size), ``ep``, ``pp``, ``vpp``, ``ga``, ``all_gpus``, ``checkpoints: N l1..lN``,
``checkpoint_initiates: M l1..lM`` (optional) and ``pp_comm`` (bytes; SimAI accepts it with or
without the colon). Line 2: the number of rows. Then one row per line, 12 whitespace-separated
columns: name, reserved (-1), forward compute time, forward comm type, forward comm size,
input-gradient compute time, comm type, comm size, weight-gradient compute time, comm type,
comm size, and the process (update) time that follows each of the row's collectives. Times
are nanoseconds, sizes bytes. Comm types: ``NONE``, ``ALLREDUCE``, ``ALLGATHER``,
``REDUCESCATTER``, ``ALLTOALL``, optionally suffixed ``_EP`` (expert-parallel group) or
``_DP_EP`` (expert-data-parallel group); without a suffix the forward and input-gradient
columns use the TP group and the weight-gradient column the DP group.

Every problem is an :class:`~tracesim.errors.InputError` naming the file and the line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracesim.errors import InputError
from tracesim.fileio import atomic_open, output_dir, read_text

POLICIES = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER")
#: AICB base comm type -> tracesim collective
COMM_BASE = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather",
             "REDUCESCATTER": "reduce_scatter", "ALLTOALL": "all_to_all"}
BASE_OF = {v: k for k, v in COMM_BASE.items()}
SUFFIXES = {"": None, "_EP": "ep", "_DP_EP": "dp_ep"}
_HEADER_INT = ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
_HEADER_LIST = ("checkpoints", "checkpoint_initiates")
REQUIRED_HEADER = ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus",
                   "checkpoints", "pp_comm")
COLUMNS = ("name", "reserved", "forward compute time", "forward comm type",
           "forward comm size", "input-grad compute time", "input-grad comm type",
           "input-grad comm size", "weight-grad compute time", "weight-grad comm type",
           "weight-grad comm size", "process time")


@dataclass(frozen=True)
class AicbComm:
    """One comm column pair: the AICB type token (``NONE``, ``ALLGATHER_EP``, ...) and bytes."""

    token: str
    size_bytes: int

    @property
    def collective(self) -> str:
        """tracesim collective name, "" for NONE."""
        return "" if self.token == "NONE" else COMM_BASE[split_token(self.token)[0]]

    def group(self, slot: str) -> str:
        """Group kind the comm runs on: tp | dp | ep | dp_ep ("" for NONE)."""
        if self.token == "NONE":
            return ""
        kind = SUFFIXES[split_token(self.token)[1]]
        return kind or ("dp" if slot == "wg" else "tp")


@dataclass(frozen=True)
class AicbRow:
    """One workload row; times in ns."""

    name: str
    reserved: int
    fwd_ns: int
    fwd: AicbComm
    ig_ns: int
    ig: AicbComm
    wg_ns: int
    wg: AicbComm
    update_ns: int

    def fields(self) -> list[Any]:
        return [self.name, self.reserved, self.fwd_ns, self.fwd.token, self.fwd.size_bytes,
                self.ig_ns, self.ig.token, self.ig.size_bytes, self.wg_ns, self.wg.token,
                self.wg.size_bytes, self.update_ns]


@dataclass(frozen=True)
class AicbWorkload:
    """A parsed AICB workload: the header (parallel layout) and the rows."""

    policy: str
    tp: int
    ep: int
    pp: int
    vpp: int
    ga: int
    all_gpus: int
    pp_comm_bytes: int
    rows: tuple[AicbRow, ...]
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dp(self) -> int:
        """Data-parallel degree: all_gpus / (tp x pp)."""
        return self.all_gpus // (self.tp * self.pp)

    def replace(self, **changes: Any) -> AicbWorkload:
        return replace(self, **changes)


def split_token(token: str) -> tuple[str, str]:
    """``ALLGATHER_DP_EP`` -> (``ALLGATHER``, ``_DP_EP``); raises KeyError when unknown."""
    for suffix in ("_DP_EP", "_EP"):
        if token.endswith(suffix) and token[: -len(suffix)] in COMM_BASE:
            return token[: -len(suffix)], suffix
    if token in COMM_BASE:
        return token, ""
    raise KeyError(token)


def make_token(collective: str, group: str, slot: str) -> str:
    """The AICB token for a tracesim collective on group kind ``group`` in column ``slot``."""
    if not collective:
        return "NONE"
    base = BASE_OF[collective]
    default = "dp" if slot == "wg" else "tp"
    suffix = {"ep": "_EP", "dp_ep": "_DP_EP"}.get(group, "")
    if not suffix and group not in ("", default):
        raise ValueError(f"group {group!r} cannot be written in the {slot} column")
    return base + suffix


# ------------------------------------------------------------------------------ reading


#: the largest integer a field may hold: 2^48 ns is 78 hours of one op, 2^48 bytes 256 TiB of
#: one message; sums over a whole workload stay far inside int64
MAX_FIELD = 1 << 48


def _int(tok: str, file: Any, where: str, what: str, minimum: int | None = 0) -> int:
    try:
        v = int(tok)
    except ValueError:
        raise InputError(f"{what}: expected an integer, got {tok!r}", file, where) from None
    if minimum is not None and v < minimum:
        raise InputError(f"{what}: must be >= {minimum}, got {v}", file, where)
    if abs(v) > MAX_FIELD:
        raise InputError(f"{what}: must be at most 2^48 = {MAX_FIELD:,}, got {v}", file, where)
    return v


def _header(line: str, file: Any) -> dict[str, Any]:
    where = "line 1"
    tokens = line.split()
    if not tokens:
        raise InputError("empty header line", file, where)
    policy = tokens[0]
    if policy not in POLICIES:
        raise InputError(f"parallelism policy {policy!r} is not supported (supported: "
                         f"{', '.join(POLICIES)})", file, where)
    out: dict[str, Any] = {"policy": policy}
    i = 1
    while i < len(tokens):
        key = tokens[i].rstrip(":")
        if key not in _HEADER_INT and key not in _HEADER_LIST:
            raise InputError(f"unknown header field {tokens[i]!r} (known: "
                             f"{', '.join(_HEADER_INT + _HEADER_LIST)})", file, where)
        if key in out:
            raise InputError(f"header field {key!r} given twice", file, where)
        if i + 1 >= len(tokens):
            raise InputError(f"header field {key!r} has no value", file, where)
        if key in _HEADER_LIST:
            count = _int(tokens[i + 1], file, where, key)
            ids = tokens[i + 2 : i + 2 + count]
            if len(ids) < count:
                raise InputError(f"{key}: {count} layer indices announced, {len(ids)} given",
                                 file, where)
            out[key] = tuple(_int(x, file, where, f"{key} layer index") for x in ids)
            i += 2 + count
        else:
            minimum = 0 if key == "pp_comm" else 1
            out[key] = _int(tokens[i + 1], file, where, key, minimum)
            i += 2
    missing = [k for k in REQUIRED_HEADER if k not in out]
    if missing:
        raise InputError(f"header misses field(s) {', '.join(missing)}", file, where)
    tp, pp, n = out["model_parallel_NPU_group"], out["pp"], out["all_gpus"]
    if n % (tp * pp):
        raise InputError(f"all_gpus {n} is not a multiple of model_parallel_NPU_group {tp} x "
                         f"pp {pp}", file, where)
    if (n // (tp * pp)) % out["ep"]:
        raise InputError(f"ep {out['ep']} does not divide the data-parallel degree "
                         f"{n // (tp * pp)}", file, where)
    return out


def _comm(tok: str, size: str, file: Any, where: str, col: int) -> AicbComm:
    if tok != "NONE":
        try:
            split_token(tok)
        except KeyError:
            raise InputError(f"column {col + 1} ({COLUMNS[col]}): unknown comm type {tok!r} "
                             "(NONE, ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, optionally "
                             "with _EP or _DP_EP)", file, where) from None
    return AicbComm(tok, _int(size, file, where, f"column {col + 2} ({COLUMNS[col + 1]})"))


def parse_aicb(text: str, file: str | Path | None = None) -> AicbWorkload:
    """Parse the text of an AICB workload file (``file`` names it in errors)."""
    lines = text.splitlines()
    numbered = [(i + 1, ln) for i, ln in enumerate(lines) if ln.strip()]
    if not numbered or numbered[0][0] != 1:
        raise InputError("the first line must be the header (policy and parallel layout)",
                         file, "line 1")
    head = _header(numbered[0][1], file)
    if len(numbered) < 2:
        raise InputError("missing the row-count line", file, "line 2")
    ln2, count_line = numbered[1]
    count = _int(count_line.strip(), file, f"line {ln2}", "row count")
    if count == 0:
        raise InputError("the workload has no rows (row count 0)", file, f"line {ln2}")
    body = numbered[2:]
    if len(body) != count:
        where = f"line {body[count][0]}" if len(body) > count else f"line {len(lines) + 1}"
        raise InputError(f"the count line (line {ln2}) announces {count} rows, the file has "
                         f"{len(body)}", file, where)
    rows = []
    for ln, text_line in body:
        where = f"line {ln}"
        cols = text_line.split()
        if len(cols) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} columns ({', '.join(COLUMNS)}), got "
                             f"{len(cols)}", file, where)
        t = [_int(cols[k], file, where, f"column {k + 1} ({COLUMNS[k]})") for k in (2, 5, 8, 11)]
        rows.append(AicbRow(
            name=cols[0],
            reserved=_int(cols[1], file, where, "column 2 (reserved)", None),
            fwd_ns=t[0], fwd=_comm(cols[3], cols[4], file, where, 3),
            ig_ns=t[1], ig=_comm(cols[6], cols[7], file, where, 6),
            wg_ns=t[2], wg=_comm(cols[9], cols[10], file, where, 9),
            update_ns=t[3],
        ))
    for key in ("checkpoints", "checkpoint_initiates"):
        for layer in head.get(key, ()):
            if layer >= count:
                raise InputError(f"{key} names row {layer}, the file has {count} rows", file,
                                 "line 1")
    return AicbWorkload(
        policy=head["policy"], tp=head["model_parallel_NPU_group"], ep=head["ep"],
        pp=head["pp"], vpp=head["vpp"], ga=head["ga"], all_gpus=head["all_gpus"],
        pp_comm_bytes=head["pp_comm"], rows=tuple(rows),
        checkpoints=tuple(head.get("checkpoints", ())),
        checkpoint_initiates=tuple(head.get("checkpoint_initiates", ())),
    )


def read_aicb(path: str | Path) -> AicbWorkload:
    """Read an AICB workload file."""
    p = Path(path)
    return parse_aicb(read_text(p), p)


# ------------------------------------------------------------------------------ writing


def format_aicb(w: AicbWorkload) -> str:
    """The file text of ``w`` (tab-separated rows, header fields in SimAI's order)."""
    def ids(xs: tuple[int, ...]) -> str:
        return " ".join([str(len(xs))] + [str(x) for x in xs])

    head = (f"{w.policy} model_parallel_NPU_group: {w.tp} ep: {w.ep} pp: {w.pp} vpp: {w.vpp} "
            f"ga: {w.ga} all_gpus: {w.all_gpus} checkpoints: {ids(w.checkpoints)} "
            f"checkpoint_initiates: {ids(w.checkpoint_initiates)} pp_comm: {w.pp_comm_bytes}")
    lines = [head, str(len(w.rows))]
    lines += ["\t".join(str(x) for x in r.fields()) for r in w.rows]
    return "\n".join(lines) + "\n"


def write_aicb(w: AicbWorkload, path: str | Path) -> Path:
    """Write ``w`` to ``path`` atomically, ``.txt`` appended when the name lacks it (the suffix
    the readers, SimAI's and ``tracesim replay``, recognise the format by)."""
    p = Path(path)
    if p.suffix != ".txt":
        p = p.with_name(p.name + ".txt")
    output_dir(p.parent)
    with atomic_open(p, "w") as fh:
        fh.write(format_aicb(w))
    return p
