"""The package's import graph, read from its source: no loops, the library apart from the course's
scaffolding, no function-level imports (except the one that keeps triton optional), and the
scaffolding using the library's public names only."""

import ast
from pathlib import Path

from project_tools import ROOT

PACKAGE = ROOT / "attncourse"
# Course scaffolding: the library (every other module) never imports these.
SCAFFOLDING = (
    "attncourse.course",
    "attncourse.benchmarks",
    "attncourse.plotting",
    "attncourse.exercises",
)
# Imported inside a function on purpose: triton is optional (pip install attncourse[gpu]).
LAZY_ALLOWED = {"attncourse.kernels.flash"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _target(module: str, is_package: bool, node: ast.ImportFrom, name: str) -> str:
    """The module an ``from ... import name`` statement loads (the name itself when it is a module)."""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return f"{source}.{name}" if f"{source}.{name}" in MODULES else source


def _imports(module: str):
    """``(imported module, imported name, at top level?)`` for every import of the package's own modules."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                target = _target(module, path.name == "__init__.py", node, alias.name)
                if target.startswith("attncourse"):
                    yield target, alias.name, id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("attncourse"):
                    yield alias.name, alias.name, id(node) in top


GRAPH = {m: sorted({t for t, _, _ in _imports(m) if t != m}) for m in MODULES}


def _cycle():
    """One import loop as a list of modules, or ``None``."""
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for t in GRAPH.get(m, []):
            if t not in MODULES:
                continue
            if state.get(t) == "open":
                return stack[stack.index(t) :] + [t]
            if t not in state:
                found = visit(t, stack + [t])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in MODULES:
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_every_import_resolves_to_a_module_of_the_package():
    unknown = {(m, t) for m, ts in GRAPH.items() for t in ts if t not in MODULES}
    assert not unknown


def test_no_import_loop():
    assert _cycle() is None, " -> ".join(_cycle())


def test_the_library_never_imports_the_scaffolding():
    library = [m for m in MODULES if not m.startswith(SCAFFOLDING)]
    assert "attncourse.multihead" in library and "attncourse.kv_cache" in library
    wrong = {(m, t) for m in library for t in GRAPH[m] if t.startswith(SCAFFOLDING)}
    assert not wrong


def test_the_cache_sits_below_the_layer_that_uses_it():
    assert "attncourse.kv_cache" in GRAPH["attncourse.multihead"]
    assert not any(t.startswith("attncourse.multihead") for t in GRAPH["attncourse.kv_cache"])


def test_no_function_level_imports_of_the_package():
    lazy = {
        (m, t) for m in MODULES for t, _, top in _imports(m) if not top and t not in LAZY_ALLOWED
    }
    assert not lazy


def test_scaffolding_uses_public_names_only():
    private = {
        (m, t, name)
        for m in MODULES
        if m.startswith(SCAFFOLDING)
        for t, name, _ in _imports(m)
        if name.startswith("_")
        and not t.startswith(m.rsplit(".", 1)[0])
        and t != "attncourse._checks"
    }
    assert not private


def test_the_benchmarks_import_each_other_only_through_their_shared_helpers():
    assert "attncourse.benchmarks.kernels" not in GRAPH["attncourse.benchmarks.attention"]
    assert "attncourse.benchmarks.attention" not in GRAPH["attncourse.benchmarks.kernels"]
    for module in ("attention", "kernels"):
        assert "attncourse.benchmarks.common" in GRAPH[f"attncourse.benchmarks.{module}"]
    assert not [
        t for t in GRAPH["attncourse.benchmarks.common"] if t.startswith("attncourse.benchmarks")
    ]
