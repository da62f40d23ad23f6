"""Streaming read of large Kineto traces: events one at a time, never the whole JSON tree.

``json.load`` of a 500 MB trace holds the file's text and then a Python object for every
value in it (several GB). :func:`stream_trace` instead reads the (plain or gzipped) file in
chunks, walks the top-level object by hand and decodes one ``traceEvents`` element at a time
with the C-accelerated :class:`json.JSONDecoder`, so memory holds one chunk of text plus
what the caller keeps. :func:`load_trace_streaming` builds the same ``dict`` that
:func:`tracesim.trace.kineto.load_trace_json` returns, keeping only the events a ``keep``
predicate selects (the others become a shared empty placeholder, so list indices, which
are the op table's ``event_id``, do not move).

Errors are the Kineto reader's: :class:`~tracesim.errors.InputError` naming the file and,
for bad JSON, the line (``invalid JSON (...); the file may be truncated``), a truncated or
corrupt gzip stream, a file that is not UTF-8 text, and JSON that is not a Chrome trace.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

from tracesim.errors import InputError

#: characters decoded per read; a value is retried with twice the text when it runs past
#: the end of the buffer, so a single large value costs O(its size), not O(size^2)
CHUNK_CHARS = 1 << 20
#: placeholder for events the caller did not keep (read-only, shared)
SKIPPED: Any = MappingProxyType({})

_WS = " \t\n\r"
_NOT_TRACE = "not a Chrome/Kineto trace: no 'traceEvents' list"
_ET_NOT_TRACE = ("a PyTorch execution trace (its 'nodes' have no times), not a Kineto trace: "
                 "give the torch.profiler trace recorded with it, or the folder holding both "
                 "(docs/import.md)")


def not_trace_message(top: dict[str, Any]) -> str:
    """Why a JSON object with these top-level keys is no Kineto trace: a PyTorch execution
    trace (``nodes``, ExecutionTraceObserver) is named as one, anything else has no
    ``traceEvents`` list."""
    return _ET_NOT_TRACE if isinstance(top.get("nodes"), list) else _NOT_TRACE


class _Text:
    """Text of a plain or gzipped UTF-8 file, read in chunks, with a line count."""

    def __init__(self, path: Path, chunk_chars: int):
        self.path = path
        self.chunk = max(16, int(chunk_chars))
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.lines_dropped = 0  # newlines in text already discarded before buf[0]
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        self.fh: IO[bytes] = (gzip.open(path, "rb") if gz  # type: ignore[assignment]
                              else open(path, "rb"))  # noqa: SIM115
        self.dec = codecs.getincrementaldecoder("utf-8-sig")()

    def close(self) -> None:
        self.fh.close()

    def more(self, want: int = 0) -> bool:
        """Append at least ``want`` (default: one chunk) characters; False at end of file."""
        if self.eof:
            return False
        if self.pos > 0:  # drop consumed text
            self.lines_dropped += self.buf.count("\n", 0, self.pos)
            self.buf = self.buf[self.pos :]
            self.pos = 0
        target = len(self.buf) + max(want, self.chunk)
        parts = [self.buf]
        have = len(self.buf)
        while have < target:
            try:
                raw = self.fh.read(max(want, self.chunk))
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                raise InputError(f"truncated or corrupt gzip data ({exc})", self.path) from None
            try:
                text = self.dec.decode(raw, final=not raw)
            except UnicodeDecodeError:
                raise InputError("not a JSON text file", self.path) from None
            parts.append(text)
            have += len(text)
            if not raw:
                self.eof = True
                break
        self.buf = "".join(parts)
        return True

    def peek(self) -> str:
        """The next non-blank character ("" at end of file), positioned on it."""
        while True:
            buf, n, i = self.buf, len(self.buf), self.pos
            while i < n and buf[i] in _WS:
                i += 1
            self.pos = i
            if i < n:
                return buf[i]
            if not self.more():
                return ""

    def line(self, pos: int) -> int:
        return self.lines_dropped + self.buf.count("\n", 0, pos) + 1

    def fail(self, msg: str, pos: int | None = None) -> InputError:
        where = f"line {self.line(self.pos if pos is None else pos)}"
        return InputError(f"invalid JSON ({msg}); the file may be truncated", self.path, where)


class _Decoder:
    """Decodes one JSON value at a time from :class:`_Text`, refilling as needed."""

    def __init__(self, text: _Text):
        self.text = text
        self.scan = json.JSONDecoder().raw_decode

    def value(self) -> Any:
        t = self.text
        if t.peek() == "":
            raise t.fail("Expecting value")
        while True:
            try:
                val, end = self.scan(t.buf, t.pos)
            except json.JSONDecodeError as exc:
                # ran off the end of the buffer (or could have): read more and retry
                near_end = exc.pos >= len(t.buf) - 8 or exc.msg.startswith(
                    ("Unterminated string", "Invalid \\uXXXX", "Invalid \\escape"))
                if near_end and t.more(len(t.buf) - t.pos):
                    continue
                raise t.fail(exc.msg, exc.pos) from None
            except RecursionError:
                raise InputError("JSON nested too deeply", t.path, f"line {t.line(t.pos)}") from None
            if end >= len(t.buf) and t.more():  # a number may continue in the next chunk
                continue
            t.pos = end
            return val

    def expect(self, chars: str, msg: str) -> str:
        c = self.text.peek()
        if c == "" or c not in chars:
            raise self.text.fail(msg)
        self.text.pos += 1
        return c


def stream_trace(path: str | Path, meta: dict[str, Any] | None = None, *,
                 chunk_chars: int = CHUNK_CHARS) -> Iterator[Any]:
    """Yield the elements of a Chrome trace's ``traceEvents`` one at a time.

    Args:
        path: ``.json`` or ``.json.gz`` (detected by content) Chrome / Kineto trace; a
            top-level JSON array is taken as the event list.
        meta: if given, receives the other top-level keys (``distributedInfo``,
            ``deviceProperties``, ...) as they are read; keys after ``traceEvents`` arrive
            only once the iterator is exhausted.
        chunk_chars: characters decoded per read (tests use tiny values).

    Raises InputError (from the iteration) for a missing, truncated, corrupt or non-trace
    file; the whole file is checked by the time the iterator ends.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path)
    if path.is_dir():
        raise InputError("is a directory, expected a trace file (.json or .json.gz)", path)
    meta = {} if meta is None else meta
    text = _Text(path, chunk_chars)
    try:
        dec = _Decoder(text)
        c = text.peek()
        found = False
        if c == "[":
            yield from _array(dec)
            found = True
        elif c == "{":
            text.pos += 1
            if text.peek() != "}":
                while True:
                    if text.peek() != '"':
                        raise text.fail("Expecting property name enclosed in double quotes")
                    key = dec.value()
                    dec.expect(":", "Expecting ':' delimiter")
                    if key == "traceEvents" and text.peek() == "[":
                        meta.pop("traceEvents", None)
                        yield from _array(dec)
                        found = True
                    else:
                        meta[key] = dec.value()
                        if key == "traceEvents":
                            found = False
                    if dec.expect(",}", "Expecting ',' delimiter") == "}":
                        break
            else:
                text.pos += 1
        else:
            dec.value()  # a scalar: valid JSON, but no trace (or invalid JSON: its error)
        if text.peek() != "":
            raise text.fail("Extra data")
        if not found:
            raise InputError(not_trace_message(meta), path, "traceEvents")
    finally:
        text.close()


def _array(dec: _Decoder) -> Iterator[Any]:
    text = dec.text
    text.pos += 1  # the "["
    if text.peek() == "]":
        text.pos += 1
        return
    while True:
        yield dec.value()
        if dec.expect(",]", "Expecting ',' delimiter") == "]":
            return


def load_trace_streaming(path: str | Path, keep: Callable[[Any], bool] | None = None, *,
                         chunk_chars: int = CHUNK_CHARS) -> dict[str, Any]:
    """Read a Kineto trace with :func:`stream_trace` into ``{top-level keys..., traceEvents}``.

    Args:
        path: the trace file.
        keep: which events to hold in memory; the others are replaced by :data:`SKIPPED`
            (an empty read-only mapping) so every event keeps its index. ``None`` keeps all.
        chunk_chars: characters decoded per read.

    Kept events get their keys and ``name`` / ``cat`` strings shared between events (the
    same text is one object), which is most of the memory a large trace's events take.
    """
    meta: dict[str, Any] = {}
    events: list[Any] = []
    pool: dict[str, str] = {}
    share = pool.setdefault
    for ev in stream_trace(path, meta, chunk_chars=chunk_chars):
        if keep is not None and not keep(ev):
            events.append(SKIPPED)
            continue
        if isinstance(ev, dict):
            ev = {share(k, k): v for k, v in ev.items()}
            for k in ("name", "cat"):
                v = ev.get(k)
                if isinstance(v, str):
                    ev[k] = share(v, v)
            args = ev.get("args")
            if isinstance(args, dict):
                ev["args"] = {share(k, k): v for k, v in args.items()}
        events.append(ev)
    meta["traceEvents"] = events
    return meta
