"""The ``tracesim`` command line: a thin click group.

Each command lives in ``tracesim/commands/<name>.py`` and is listed in ``COMMAND_MODULES``;
commands parse flags, call the library and print. Bad input (:class:`InputError`) exits 2
with one line; a replay that cannot finish (:class:`ReplayError`) exits 2; any other
exception is a bug and exits 1 with a hint to rerun with ``--debug``.
"""

from __future__ import annotations

import _thread
import importlib
import signal
import sys
import time

import click

from tracesim import __version__
from tracesim.errors import InputError, ReplayError

#: modules under tracesim.commands that each define ``command`` (a click command)
COMMAND_MODULES = (
    "calibrate",
    "collect",
    "extract",
    "replay",
    "validate",
    "netbench",
    "sweep",
    "convert",
    "compare",
    "list",
    "import_",
)


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except (InputError, ReplayError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"tracesim: error: {exc}", err=True)
            sys.exit(2)
        except click.UsageError as exc:  # a flag's bad value: one line, as bad input is
            if exc.ctx is None or (ctx.obj and ctx.obj.get("debug")):
                raise
            click.echo(f"tracesim: error: {' '.join(exc.format_message().split())} "
                       f"(see {exc.ctx.command_path} --help)", err=True)
            sys.exit(2)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except BrokenPipeError:  # output piped into head / less that closed early
            sys.stderr.close()
            sys.exit(0)
        except KeyboardInterrupt:
            click.echo("tracesim: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # a bug: short message, traceback only with --debug
            cause = _interrupt_in_chain(exc) or _signalled
            if cause is not None:  # Ctrl-C / SIGTERM that Python or a library wrapped
                click.echo("tracesim: interrupted", err=True)
                sys.exit(cause)
            if ctx.obj and ctx.obj.get("debug"):
                raise
            msg = " ".join(str(exc).split())[:300]
            click.echo(
                f"tracesim: internal error: {type(exc).__name__}: {msg} "
                "(this is a bug; rerun with --debug for the traceback)",
                err=True,
            )
            sys.exit(1)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="tracesim")
@click.option("--debug", is_flag=True, help="Show full tracebacks for internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """tracesim: trace-driven replay simulator for distributed training.

    Record a training step (collect), turn it into a task graph (extract), and replay it on
    a simulated cluster (replay). Times are reported in seconds; exit code 2 means bad input.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


try:
    for _name in COMMAND_MODULES:
        _mod = importlib.import_module(f"tracesim.commands.{_name}")
        cli.add_command(_mod.command)
except KeyboardInterrupt:  # Ctrl-C while starting up: no traceback
    sys.exit(130)


def _interrupt_in_chain(exc: BaseException) -> int | None:
    """Exit status if ``exc`` was caused by Ctrl-C (130) or SIGTERM (143), else None."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 32:
        if isinstance(e, KeyboardInterrupt):
            return 130
        if isinstance(e, SystemExit) and e.code in (130, 143):
            return int(e.code)
        e = e.__cause__ or e.__context__
        seen += 1
    return None


# Exit status of the last Ctrl-C / SIGTERM this process received. Some extensions swallow the
# interrupt and raise their own error instead (matplotlib's Agg converters turn it into
# "ValueError: Invalid bounding box"); an error after a signal is still an interruption.
_signalled: int | None = None


def _interrupt(signum: int, frame: object) -> None:
    """Ctrl-C: remembered, then raised as ``KeyboardInterrupt`` as Python's default does."""
    global _signalled
    _signalled = 130
    raise KeyboardInterrupt


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C (temporary files removed), exit status 128 + 15."""
    global _signalled
    _signalled = 128 + signum
    raise SystemExit(128 + signum)


def _unraisable(info: sys.UnraisableHookArgs) -> None:
    """A signal that landed inside a finaliser or weakref callback is delivered again.

    Python cannot raise from those callbacks: it prints "Exception ignored" with a traceback
    and carries on. The interrupt is re-posted to the main thread instead, so it unwinds the
    command like any other Ctrl-C or SIGTERM. While the interpreter is finalizing (the
    command has returned and its files are complete) it is dropped: a thread started then
    runs without an interpreter to run in and aborts the process.
    """
    exc = info.exc_value
    if isinstance(exc, KeyboardInterrupt):
        signum = signal.SIGINT
    elif isinstance(exc, SystemExit) and exc.code == 128 + signal.SIGTERM:
        signum = signal.SIGTERM
    else:
        sys.__unraisablehook__(info)
        return
    if sys.is_finalizing():
        return
    # posted from another thread a moment later, so it is not handled inside this hook
    _thread.start_new_thread(_repost, (signum,))


def _repost(signum: signal.Signals) -> None:
    time.sleep(0.005)
    _thread.interrupt_main(signum)


def main() -> None:
    """Console-script entry point."""
    signal.signal(signal.SIGTERM, _terminate)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when SIGINT is ignored
        signal.signal(signal.SIGINT, _interrupt)
    sys.unraisablehook = _unraisable
    cli(obj={})


if __name__ == "__main__":
    main()
