"""Click flags made from :class:`tracesim.options.ReplayOptions`: one flag per field, its help
and type from the field's metadata, so the CLI and the API cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import click

from tracesim.errors import InputError
from tracesim.options import Option, ReplayOptions, option_fields


def _click_option(name: str, opt: Option, default: Any) -> Callable:
    flag = f"--{name.replace('_', '-')}"
    kw: dict[str, Any] = {"help": opt.help.replace("`", "'")}
    if opt.metavar:
        kw["metavar"] = opt.metavar
    if opt.kind == "bool":
        return click.option(f"{flag}/--no-{name.replace('_', '-')}", name, default=None, **kw)
    if opt.kind == "flag":
        return click.option(flag, name, is_flag=True, default=default, **kw)
    if opt.kind == "int":
        kw["type"] = click.IntRange(min=None if opt.minimum is None else int(opt.minimum),
                                    max=None if opt.maximum is None else int(opt.maximum))
    elif opt.kind == "float":
        low, high = opt.minimum, opt.maximum
        kw["type"] = click.FloatRange(min=0.0 if low is None else low, min_open=low is None,
                                      max=float("inf") if high is None else high,
                                      max_open=high is None)
    elif opt.kind == "choice":
        kw["type"] = click.Choice(opt.choices)
    elif opt.kind in ("links", "background"):  # repeatable
        return click.option(flag, name, multiple=True, **kw)
    return click.option(flag, name, default=None, **kw)


def replay_flags(exclude: Iterable[str] = (), only: Iterable[str] | None = None) -> Callable:
    """A decorator adding one flag per replay option (``exclude`` / ``only`` by name)."""
    skip = set(exclude)
    keep = set(only) if only is not None else None

    def deco(fn: Callable) -> Callable:
        for name, opt, default in reversed(option_fields()):
            if name in skip or (keep is not None and name not in keep):
                continue
            fn = _click_option(name, opt, default)(fn)
        return fn

    return deco


def options_from(params: Mapping[str, Any]) -> ReplayOptions:
    """The :class:`ReplayOptions` of a command's parsed flags (flags not given are None)."""
    names = {name for name, _, _ in option_fields()}
    for k, v in params.items():  # ``--cluster ""``: a variable that expanded to nothing
        if k in names and isinstance(v, str) and not v.strip():
            raise InputError("an empty value", f"--{k.replace('_', '-')}")
    return ReplayOptions(**{k: v for k, v in params.items()
                            if k in names and v is not None and v != ()})
