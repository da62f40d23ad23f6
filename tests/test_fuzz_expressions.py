"""Fuzzing the two expression languages: sweep-space constraints (:mod:`tracesim.sweep.expr`)
and layer-template expressions (:mod:`tracesim.template.layer`). Random arithmetic,
comparisons, calls and conditionals over the settings give a value or an InputError (a
template expression may be refused at load), never another exception, never a hang.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.test_fuzz_mutators import (
    expect_clean,
    fuzz_report,  # noqa: F401  (module fixture: case counts for docs/reliability.md)
    fuzz_settings,
)

ROOT = Path(__file__).resolve().parents[1]

_ATOMS = st.sampled_from(["tp", "pp", "dp", "gpus", "layers", "0", "1", "-1", "2", "64", "65",
                          "0.5", "1e308", "2**64", "'x'", "true", "(1,)", "()"])
_BIN = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "==", "<", "!=", " and ", " or "])


EXPRESSIONS = st.recursive(_ATOMS, lambda sub: st.one_of(
    st.builds(lambda a, op, b: f"({a}{op}{b})", sub, _BIN, sub),
    st.builds(lambda f, a, b: f"{f}({a}, {b})", st.sampled_from(["max", "min", "abs", "ceil"]),
              sub, sub),
    st.builds(lambda a: f"not {a}", sub),
    st.builds(lambda a, b, c: f"({a} if {b} else {c})", sub, sub, sub),
), max_leaves=12)


@fuzz_settings(300)
@given(EXPRESSIONS)
def test_sweep_constraint_expressions(text):
    """Any arithmetic over settings: a boolean, or InputError; never a hang on huge powers."""
    from tracesim.sweep.expr import parse_expr

    scope = {"tp": 2, "pp": 4, "dp": 8, "gpus": 64, "layers": 32}
    expect_clean("sweep constraint expression",
                 lambda: parse_expr(text + " == 1", "s.yaml", "constraints[0]").test(scope))


@fuzz_settings(300)
@given(EXPRESSIONS)
def test_layer_template_expressions(text):
    """The same for template.yaml expressions (evaluated by the builder)."""
    from tracesim.template.layer import compile_expr, evaluate

    def run():
        try:
            compile_expr(text)
        except ValueError:
            return  # refused at load: template_from_dict turns this into an InputError
        evaluate(text, {"tp": 2.0, "pp": 4.0, "dp": 8.0, "gpus": 64.0, "layers": 32.0})

    expect_clean("template expression", run)


_POW_SCRIPT = """
from tracesim.errors import InputError
from tracesim.sweep.expr import parse_expr
from tracesim.template.layer import compile_expr, evaluate
text = "(((((((2**64)**64)**64)**64)**64)**64)**64)"
try:
    parse_expr(text + " > 0", "s.yaml", "constraints[0]").test({})
    print("sweep: ok")
except InputError as exc:
    print("sweep: InputError", exc)
try:
    parse_expr("'x' * 10**12 == 'y'", "s.yaml", "constraints[1]").test({})
    print("sweep: ok")
except InputError as exc:
    print("sweep: InputError", exc)
try:
    compile_expr(text)
    evaluate(text, {})
    print("template: ok")
except (ValueError, InputError) as exc:
    print("template:", type(exc).__name__, exc)
"""


def test_nested_powers_are_refused_not_computed():
    """``((2**64)**64)**64...`` has a 2**(6 * 64**6)-bit result: computing it hangs. Both
    expression languages refuse it (sweep constraints: InputError; templates: at load);
    ``'x' * 10**12`` (MemoryError) is refused too."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _POW_SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sweep, sweep_str, template = proc.stdout.splitlines()
    assert sweep.startswith("sweep: InputError") and "s.yaml" in sweep, sweep
    assert sweep_str.startswith("sweep: InputError") and "multiplied" in sweep_str, sweep_str
    assert template.startswith("template: ValueError"), template
