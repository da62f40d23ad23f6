"""Safety: no code execution from input files, and outputs stay in the directory chosen.

Static checks over the package source (tracesim/ and collectors/): YAML only through
``safe_load`` / ``SafeLoader``; no pickle (or its relatives) on any input; ``eval`` only in
the two places that evaluate AST-whitelisted arithmetic, whose whitelists are tested here
against code-execution attempts. Dynamic checks: inputs that name things ``../../x`` (model
and cluster names in specs, sweep settings) make the writers that derive file names from
input (sweep spec files, result directories, Chakra / AICB exporters) write only inside the
output directory the user chose.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tracesim.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("tracesim/**/*.py"), *ROOT.glob("collectors/**/*.py")])

#: (file, function) -> why an eval there is safe; each is tested below
EVAL_ALLOWED = {
    ("tracesim/template/layer.py", "evaluate"):
        "code from compile_expr: arithmetic AST whitelist, no builtins",
    ("tracesim/template/scopes.py", "dim_expressions"):
        "a fixed list of candidate expressions in the source, no input",
}
_PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "shelve", "marshal",
                   "joblib"}
_UNSAFE_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load",
                "full_load_all"}
_UNSAFE_LOADERS = {"Loader", "FullLoader", "UnsafeLoader", "UnsafeConstructor", "Constructor"}


def _functions(tree: ast.AST):
    """(enclosing function name, node) for every node."""
    out = []

    def walk(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            out.append((name, child))
            walk(child, name)

    walk(tree, "<module>")
    return out


def _findings(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    bad = []
    for fn, node in _functions(ast.parse(path.read_text())):
        where = f"{rel}:{getattr(node, 'lineno', '?')} in {fn}()"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                if m.split(".")[0] in _PICKLE_MODULES:
                    bad.append(f"{where}: imports {m}")
        if isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else ""
            if base == "yaml" and (node.attr in _UNSAFE_YAML or node.attr in _UNSAFE_LOADERS):
                bad.append(f"{where}: yaml.{node.attr}")
            if node.attr in ("read_pickle", "to_pickle"):
                bad.append(f"{where}: {node.attr}")
            if base == "torch" and node.attr == "load":
                bad.append(f"{where}: torch.load (unpickles)")
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("eval", "exec", "__import__"):
                if (rel, fn) not in EVAL_ALLOWED:
                    bad.append(f"{where}: {f.id}()")
            for kw in node.keywords:
                if kw.arg == "allow_pickle" and not (isinstance(kw.value, ast.Constant)
                                                     and kw.value.value is False):
                    bad.append(f"{where}: allow_pickle")
    return bad


def test_no_unsafe_yaml_pickle_or_eval_in_the_package():
    bad = [b for p in SOURCES for b in _findings(p)]
    assert not bad, "\n".join(bad)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    p = tmp_path / "tracesim_fake.py"
    p.write_text("import pickle\nimport yaml\n"
                 "def a(t):\n    return yaml.load(t, Loader=yaml.Loader)\n"
                 "def b(t):\n    return eval(t)\n"
                 "def c(p):\n    import numpy as np\n    return np.load(p, allow_pickle=True)\n")
    import tests.test_reliability_safety as me

    old = me.ROOT
    me.ROOT = tmp_path
    try:
        found = _findings(p)
    finally:
        me.ROOT = old
    assert len(found) == 5, found  # pickle, yaml.load, yaml.Loader, eval, allow_pickle


def test_every_allowed_eval_is_still_there():
    """The allow-list does not outlive the code it excuses."""
    for rel, fn in EVAL_ALLOWED:
        tree = ast.parse((ROOT / rel).read_text())
        funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert fn in funcs, (rel, fn)
        assert any(isinstance(c, ast.Call) and getattr(c.func, "id", "") == "eval"
                   for c in ast.walk(funcs[fn])), (rel, fn)


_ATTACKS = ["__import__('os').system('true')", "().__class__.__bases__[0].__subclasses__()",
            "h.__class__", "open('/etc/passwd')", "[x for x in (1,)]", "lambda: 1",
            "exec('1')", "getattr(h, 'real')", "h if 1 else 2", "'a' + 'b'", "h[0]",
            "(lambda: 1)()", "max.__self__", "b'x'", "{}", "h; 1"]


@pytest.mark.parametrize("text", _ATTACKS)
def test_template_expressions_refuse_code(text):
    from tracesim.template.layer import compile_expr

    with pytest.raises(ValueError):
        compile_expr(text)


@pytest.mark.parametrize("text", _ATTACKS)
def test_sweep_constraints_refuse_code(text):
    from tracesim.sweep.expr import parse_expr

    with pytest.raises(InputError):
        parse_expr(text, "s.yaml", "constraints[0]").test({"h": 1})


def test_yaml_tags_that_build_python_objects_are_refused(tmp_path):
    from tracesim.fileio import read_yaml

    for text in ("!!python/object/apply:os.system ['true']", "x: !!python/name:os.system",
                 "!!python/object/new:tuple [[1]]"):
        p = tmp_path / "evil.yaml"
        p.write_text(text)
        with pytest.raises(InputError, match="evil.yaml"):
            read_yaml(p)


# ----------------------------------------------------------------------------- output paths

HOSTILE = "../../../escaped"


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _only_inside(root: Path, before: set[Path], out: Path) -> None:
    new = _files(root) - before
    outside = sorted(str(p) for p in new if out not in p.parents)
    assert not outside, f"written outside {out}: {outside}"
    assert not (root.parent / "escaped").exists() and not any(root.parent.glob("escaped*"))


def _hostile_specs(d: Path) -> tuple[Path, Path]:
    model = yaml.safe_load((ROOT / "workloads" / "gpt-tiny.yaml").read_text())
    cluster = yaml.safe_load((ROOT / "topologies" / "h100x8.yaml").read_text())
    model["name"], cluster["name"] = HOSTILE + "-model", HOSTILE + "-cluster"
    (d / "m.yaml").write_text(yaml.safe_dump(model))
    (d / "c.yaml").write_text(yaml.safe_dump(cluster))
    return d / "m.yaml", d / "c.yaml"


def test_sweep_spec_files_stay_in_the_sweep_directory(tmp_path):
    from tracesim.sweep.space import expand_space, load_space, write_spec_files

    root = tmp_path / "work"
    root.mkdir()
    m, c = _hostile_specs(root)
    space = root / "space.yaml"
    space.write_text(yaml.safe_dump({"name": HOSTILE, "base": {"model": str(m), "cluster": str(c)},
                                     "axes": {"dp": [1, 2]}}))
    before = _files(root)
    out = root / "sweep"
    exp = expand_space(load_space(space), out)
    write_spec_files(exp.points)
    assert exp.points
    _only_inside(root, before, out.resolve())


@pytest.mark.slow
def test_cli_writers_stay_in_the_output_directory(tmp_path):
    """replay -o, convert --to chakra / aicb and extract with input-derived names."""
    root = tmp_path / "work"
    root.mkdir()
    m, c = _hostile_specs(root)
    cases = [
        (["replay", "--model", str(m), "--cluster", str(c), "--dp", "2", "-o", "{out}"], "out1"),
        (["convert", "--model", str(m), "--cluster", str(c), "--dp", "2", "--to", "chakra",
          "-o", "{out}/wl"], "out2"),
        (["convert", "--model", str(m), "--cluster", str(c), "--dp", "2", "--to", "aicb",
          "-o", "{out}/wl.txt"], "out3"),
    ]
    for args, name in cases:
        out = root / name
        before = _files(root)
        p = subprocess.run([sys.executable, "-m", "tracesim.cli",
                            *(a.format(out=out) for a in args)], cwd=root, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, (args, p.stderr)
        assert _files(out), f"{args}: wrote nothing"
        _only_inside(root, before, out)
