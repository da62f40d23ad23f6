"""The house rules of the package's layout (docs/architecture.md), checked on the code.

* no import circles among the package's modules (imports under ``if TYPE_CHECKING:`` do not
  count: they never run);
* every import follows the pipeline's layers (a module imports only its own folder or the
  folders below it, :data:`LAYERS`);
* no module over 500 lines;
* the package imports nothing from ``benchmarks/`` and only ``tracesim.collectors`` imports torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tracesim"

#: the package's folders and top-level modules, from the ground up: each may import those on
#: its own line or below (docs/architecture.md draws the same picture)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "fileio", "strict"),
    ("ops",),
    ("hardware",),
    ("specs", "graph"),
    ("network", "trace"),
    ("engine", "template"),
    ("build", "transform"),
    ("report",),
    ("interop",),
    ("catalog", "options", "option_values"),
    ("pipeline",),
    ("sweep",),
    ("collectors",),
    ("api",),
    ("cli", "commands"),
)
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


#: folders at the top of the repository installed inside the package (pyproject.toml)
MAPPED = {"collectors": "tracesim.collectors"}


def _modules() -> dict[str, Path]:
    out = {}
    for root, name in ((PKG, "tracesim"), *((ROOT / d, m) for d, m in MAPPED.items())):
        for p in root.rglob("*.py"):
            parts = [*name.split("."), *p.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path) -> set[str]:
    """Modules named by the imports of ``path`` that run (not under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


MODULES = _modules()
GRAPH = {m: {d for d in _imports(m, p) if d in MODULES and d != m} for m, p in MODULES.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circles() -> None:
    seen: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        seen[v] = len(seen)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in seen:
                visit(w)
            elif w in on:
                cycles.append(stack[stack.index(w):] + [w])
        stack.pop()
        on.discard(v)

    for m in sorted(GRAPH):
        if m not in seen:
            visit(m)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_imports_follow_the_layers() -> None:
    assert set(RANK) >= {_part(m) for m in MODULES}, sorted({_part(m) for m in MODULES} - set(RANK))
    bad = [f"{m} -> {d}" for m, deps in sorted(GRAPH.items()) for d in sorted(deps)
           if RANK[_part(d)] > RANK[_part(m)]]
    assert not bad, "imports that point up the layers:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_is_short(module: str) -> None:
    n = len(MODULES[module].read_text().splitlines())
    assert n <= 500, f"{MODULES[module].relative_to(ROOT)} has {n} lines"


def test_the_collectors_are_in_the_picture() -> None:
    assert {"tracesim.collectors.run", "tracesim.collectors.launch"} <= set(MODULES)


def test_the_package_imports_no_study_and_only_the_collectors_import_torch() -> None:
    bad = []
    for m, p in MODULES.items():
        for d in _imports(m, p):
            top = d.split(".")[0]
            if top == "benchmarks" or (top == "torch" and _part(m) != "collectors"):
                bad.append(f"{m} imports {d}")
    assert not bad, "\n".join(bad)
