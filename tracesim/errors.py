"""The one error type for bad input.

Every problem caused by what the user gave us (a file, a key, a flag) is raised as
:class:`InputError`; the CLI turns it into exit code 2 and a single line
``tracesim: error: FILE: WHERE: WHAT``. Anything else is a bug (exit 1).
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad user input: a file, the place in it, and what was expected.

    Args:
        message: what is wrong / what was expected.
        file: the file (or flag, for command-line input) the problem is in.
        where: the place inside it (key path, line, event index), if known.
    """

    def __init__(self, message: str, file: str | Path | None = None, where: str | None = None):
        self.message = " ".join(str(message).split())
        self.file = str(file) if file is not None else None
        self.where = where
        super().__init__(self.line())

    def line(self) -> str:
        parts = [p for p in (self.file, self.where) if p]
        parts.append(self.message)
        return ": ".join(parts)


class ReplayError(Exception):
    """The replay could not finish (deadlock, unmatched collective, cycle).

    Raised by the engine with the blocked tasks named; the CLI reports it with exit 2
    because it is caused by the input graph.
    """
