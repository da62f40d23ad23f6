"""The two OmegaConf resolvers NeMo's configuration files use for values set from the
environment: ``${oc.env:NAME,default}`` (the variable's text, else the default's) and
``${oc.decode:TEXT}`` (TEXT read as a YAML scalar: ``8`` the number, ``False`` the boolean).

NeMo's userbuffers files (and the MLPerf Training submissions' ``conf/tp_overlap/*.yaml``) write
settings such as ``num_sm: ${oc.decode:${oc.env:QKV_DGRAD_SM,8}}`` so that a launch script can
change them; :func:`resolve` gives such a value as the run would have seen it, from the
environment tracesim runs in (``os.environ``), else the default the file gives. Innermost
interpolations first, as OmegaConf does; a value that is one interpolation takes its
result's type (``oc.decode``'s scalar, ``oc.env``'s text), one with text around it stays text.
Any other interpolation (a ``${model.x}`` reference, another resolver) or an ``oc.env``
without a default whose variable is unset is an :class:`~tracesim.errors.InputError` naming
the file and the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tracesim.errors import InputError

#: the innermost interpolation: no ``${`` or ``}`` inside it
_INNER = re.compile(r"\$\{([^${}]*)\}")
#: interpolations resolved in one value at most (an environment variable whose text names
#: itself would otherwise never end)
_MAX_STEPS = 64


def resolve(value: Any, file: Path | None, key: str,
            env: Mapping[str, str] | None = None) -> Any:
    """``value`` with its ``oc.env`` / ``oc.decode`` interpolations resolved (module
    docstring); other values unchanged."""
    if not isinstance(value, str) or "${" not in value:
        return value
    env = os.environ if env is None else env
    text: Any = value
    for _ in range(_MAX_STEPS):
        m = _INNER.search(text) if isinstance(text, str) else None
        if m is None:
            return text
        out = _one(m.group(1), file, key, env)
        if m.start() == 0 and m.end() == len(text):
            text = out
        else:
            text = text[:m.start()] + ("" if out is None else str(out)) + text[m.end():]
    raise InputError(f"{value!r}: more than {_MAX_STEPS} interpolations (a variable that names "
                     "itself?)", file, key)


def _one(body: str, file: Path | None, key: str, env: Mapping[str, str]) -> Any:
    name, _, arg = body.partition(":")
    if name == "oc.env":
        var, comma, default = arg.partition(",")
        var = var.strip()
        if var in env:
            return env[var]
        if not comma:
            raise InputError(f"${{oc.env:{var}}}: the variable {var} is not set and the file "
                             "gives no default", file, key)
        default = default.strip()
        return None if default == "null" else default.strip("'\"")
    if name == "oc.decode":
        try:
            return yaml.safe_load(arg) if arg.strip() else None
        except yaml.YAMLError:
            raise InputError(f"${{oc.decode:{arg}}}: not a YAML scalar", file, key) from None
    raise InputError(f"cannot resolve ${{{body}}} (tracesim resolves oc.env and oc.decode: "
                     "write the value itself)", file, key)


__all__ = ["resolve"]
