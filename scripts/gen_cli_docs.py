"""Write the generated parts of the docs from the code.

* docs/cli.md, the command-line reference, from the click group (tracesim.cli);
* the options table of docs/api.md (between ``<!-- options:begin -->`` and
  ``<!-- options:end -->``), from the fields of tracesim.options.ReplayOptions.

    .venv/bin/python scripts/gen_cli_docs.py            # rewrite both
    .venv/bin/python scripts/gen_cli_docs.py --check    # exit 1 if either is stale

tests/test_docs.py runs the check, so the references cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from tracesim.options import Option

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "cli.md"
API_DOC = ROOT / "docs" / "api.md"
BEGIN, END = "<!-- options:begin -->", "<!-- options:end -->"


def _type_name(p: click.Parameter) -> str:
    t = p.type
    if isinstance(t, click.Choice):
        return " \\| ".join(f"`{c}`" for c in t.choices)
    if isinstance(t, click.IntRange):
        if t.min is not None and t.max is not None:
            return f"integer {t.min}..{t.max}"
        if t.min is not None:
            return f"integer >= {t.min}"
        return f"integer <= {t.max}" if t.max is not None else "integer"
    if isinstance(p, click.Option) and p.is_flag:
        return "flag"
    return {"integer": "integer", "float": "number", "text": "text", "path": "path",
            "boolean": "boolean"}.get(t.name, t.name)


def _default(p: click.Parameter) -> str:
    if not isinstance(p, click.Option) or p.is_flag or p.default in (None, (), ""):
        return ""
    if callable(p.default) or "Sentinel" in repr(p.default):
        return ""
    return f"`{p.default}`"


def _command_md(cmd: click.Command, path: list[str], level: int) -> list[str]:
    ctx = click.Context(cmd, info_name=" ".join(path))
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    lines = [f"{'#' * level} `{' '.join(path)}`", ""]
    help_text = (cmd.help or "").strip()
    if help_text:
        lines += [_clean(help_text), ""]
    lines += ["```text", f"{' '.join(path)} {usage}".rstrip(), "```", ""]
    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    opts = [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]
    if args:
        lines.append("Arguments: " + ", ".join(
            f"`{a.human_readable_name}`" + (" (one or more)" if a.nargs == -1 else "")
            + ("" if a.required else " (optional)") for a in args))
        lines.append("")
    if opts:
        lines += ["| option | value | default | meaning |", "|---|---|---|---|"]
        for o in opts:
            names = ", ".join(f"`{n}`" for n in (*o.opts, *o.secondary_opts))
            meaning = _clean(o.help or "").replace("|", "\\|")
            lines.append(f"| {names} | {_type_name(o)} | {_default(o)} | {meaning} |")
        lines.append("")
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            lines += _command_md(cmd.commands[name], [*path, name], level + 1)
    return lines


def _clean(text: str) -> str:
    """Click help text (paragraphs, ``\\b`` blocks) as Markdown."""
    paras = [" ".join(p.replace("\b", "").split()) for p in text.split("\n\n")]
    return "\n\n".join(p for p in paras if p)


def render() -> str:
    """The Markdown reference of every command, in COMMAND_MODULES order."""
    from tracesim.cli import COMMAND_MODULES, cli

    lines = [
        "# Command-line reference",
        "",
        "Generated from the click definitions by `scripts/gen_cli_docs.py`; do not edit by hand",
        "(`tests/test_docs.py` fails when this file is stale). Every command exits 0 on",
        "success, 2 on bad input (one line naming the file and field) and 1 on an internal",
        "error (rerun with `tracesim --debug ...` for the traceback).",
        "",
        "```text",
        "tracesim [--version] [--debug] COMMAND [ARGS]...",
        "```",
        "",
        "Commands: " + ", ".join(f"[`{n}`](#tracesim-{n})" for n in COMMAND_MODULES) + ".",
        "",
    ]
    for name in COMMAND_MODULES:
        lines += _command_md(cli.commands[_command_name(name)], ["tracesim", _command_name(name)], 2)
    return "\n".join(lines).rstrip() + "\n"


def _command_name(module: str) -> str:
    import importlib

    return importlib.import_module(f"tracesim.commands.{module}").command.name


def _option_type(type_text: str, opt: Option) -> str:
    """The Python type of an option, its allowed values and, where it differs, the CLI's
    spelling."""
    py = type_text.replace(" | None", "").replace("|", "\\|")
    if opt.kind == "int":
        lo, hi = opt.minimum, opt.maximum
        rng = f"{lo}..{hi}" if lo is not None and hi is not None else (
            f">= {lo}" if lo is not None else f"<= {hi}" if hi is not None else "")
        return f"`{py}` {rng}".rstrip()
    if opt.kind == "float":
        return f"`{py}` > 0"
    if opt.kind == "stragglers":
        return f"`{py}` of (rank, factor); CLI `{opt.metavar}`"
    if opt.kind in ("links", "background"):
        return f"`{py}` (specs as on the CLI); CLI `{opt.metavar}`, repeatable"
    if opt.kind == "choice":
        return f"`{py}`: " + " \\| ".join(f"`{c}`" for c in opt.choices)
    if opt.kind == "ints":
        return f"`{py}`; CLI `{opt.metavar}` (`NxK`: N repeated K times)"
    if opt.kind == "plan":
        return f"`{py}` or a mapping; CLI `{opt.metavar}`"
    if opt.kind == "spec":
        return f"`{py}`: a name, a path or a spec object"
    if opt.kind == "flag":
        return f"`{py}` (a flag on the CLI)"
    if opt.metavar:
        return f"`{py}`: `{opt.metavar.replace('|', chr(92) + '|')}`"
    return f"`{py}`"


def render_options() -> str:
    """The options table of docs/api.md: one row per :class:`ReplayOptions` field."""
    import dataclasses

    from tracesim.options import ReplayOptions, option_fields

    types = {f.name: str(f.type) for f in dataclasses.fields(ReplayOptions)}
    lines = ["| option | CLI flag | type / values | meaning |", "|---|---|---|---|"]
    for name, opt, _default in option_fields():
        flag = f"--{name.replace('_', '-')}"
        flags = f"`{flag}`, `--no-{flag[2:]}`" if opt.kind == "bool" else f"`{flag}`"
        meaning = opt.help.replace("|", "\\|")
        lines.append(f"| `{name}` | {flags} | {_option_type(types[name], opt)} | {meaning} |")
    return "\n".join(lines) + "\n"


def _with_options(doc: str, table: str) -> str:
    """``doc`` with the text between the options markers replaced by ``table``."""
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{API_DOC} lacks the {BEGIN} / {END} markers")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main(argv: list[str]) -> int:
    text = render()
    api_text = API_DOC.read_text() if API_DOC.exists() else ""
    api_new = _with_options(api_text, render_options())
    if "--check" in argv:
        stale = [p for p, new in ((OUT, text), (API_DOC, api_new))
                 if not p.exists() or p.read_text() != new]
        for p in stale:
            print(f"{p} is stale: run .venv/bin/python scripts/gen_cli_docs.py", file=sys.stderr)
        return 1 if stale else 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    if api_new != api_text:
        API_DOC.write_text(api_new)
        print(f"wrote {API_DOC} (options table)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
