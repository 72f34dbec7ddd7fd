"""The package's import graph, read from its source: no loops, the library apart from the course's
scaffolding, no function-level imports (except the one that keeps triton optional), and the
scaffolding using the library's public names only. And the line between the package and the
repository's tools: ``attncourse/`` holds what learners use (no compile harness, no process
pool, no private Triton API), and ``tools/`` reaches the package through its public names."""

import ast
from pathlib import Path

from project_tools import ROOT

PACKAGE = ROOT / "attncourse"
TOOLS = ROOT / "tools"
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


# -- the package and the tools ------------------------------------------------------------------

# Tooling that lives in tools/, never in the package: a process pool (the compile harness's) and
# Triton's private API (its driver, knobs, compiler and backends: what capturing
# and compiling a launch without a GPU needs). A learner's code needs none of them; chapter 10's
# exercise compiles a learner's kernel in a child Python whose script is text, not an import.
TOOLING_IMPORTS = (
    "concurrent.futures",
    "multiprocessing",
    "triton.knobs",
    "triton.runtime.driver",
    "triton.compiler",
    "triton.backends",
)
# Modules that moved out of the package (issue 32): the compile harness's SASS counter went to
# tools/kernel_compile/, the map of public names to chapters to tests/introduced.py.
MOVED_OUT = ("attncourse.kernels.sass", "attncourse._introduced")
# Private modules a tool may import, with the reason. zh_messages.py is the translators' tool of
# the checkers' own messages: it reads the gettext domains and conceals/reveals the concealed
# answers, the exercises' internals.
TOOLS_PRIVATE_ALLOWED = {
    ("zh_messages.py", "attncourse.exercises._core"),
    ("zh_messages.py", "attncourse.exercises._i18n"),
}


def _external_imports(tree: ast.AST):
    """``(module, line)`` of every absolute import outside the package, with ``from`` names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module, node.lineno
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def test_the_package_holds_no_tooling():
    found = sorted(
        (m, name, line)
        for m, path in MODULES.items()
        for name, line in _external_imports(ast.parse(path.read_text()))
        if any(name == t or name.startswith(t + ".") for t in TOOLING_IMPORTS)
        or (name.startswith("triton.") and _is_private(name))
    )
    moved = [m for m in MOVED_OUT if m in MODULES]
    assert not found and not moved, (
        f"tooling in the package (it belongs in tools/): {found}, {moved}"
    )


def _tool_private_uses(source: str):
    """Private names of the package a tool imports or reaches by attribute or by string (a
    ``getattr``/``setattr`` or an ``(object, "name")`` pair to patch): ``(name, line)``."""
    tree = ast.parse(source)
    bound = set()  # names the tool binds to something of the package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("attncourse"):
                    bound.add((alias.asname or alias.name).split(".")[0])
                    if _is_private(alias.name):
                        yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if (node.module or "").startswith("attncourse"):
                for alias in node.names:
                    bound.add(alias.asname or alias.name)
                    if _is_private(f"{node.module}.{alias.name}"):
                        yield f"{node.module}.{alias.name}", node.lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                yield f"{ast.unparse(node.value)}.{node.attr}", node.lineno
    for node in ast.walk(tree):
        pairs = []
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            if isinstance(node.func, ast.Name) and node.func.id in _BY_STRING:
                pairs.append(node.args[:2])
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
            pairs.append(node.elts)
        for obj, name in pairs:
            if (
                isinstance(obj, ast.Name)
                and obj.id in bound
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and _is_private(name.value)
            ):
                yield f"{obj.id}.{name.value}", node.lineno


_BY_STRING = {"getattr", "setattr", "hasattr", "delattr"}


def test_tools_use_public_names_of_the_package_only():
    tools = sorted(TOOLS.rglob("*.py"))
    found = sorted(
        (str(path.relative_to(TOOLS)), name, line)
        for path in tools
        for name, line in _tool_private_uses(path.read_text())
        if not any(
            (str(path.relative_to(TOOLS)), module) in TOOLS_PRIVATE_ALLOWED
            and (name == module or name.startswith(module + "."))
            for module in {m for _, m in TOOLS_PRIVATE_ALLOWED}
        )
    )
    assert not found, f"private names of the package used in tools/: {found}"
    assert TOOLS / "kernel_compile" / "__init__.py" in tools  # the rule reads the packages too


def test_the_rule_sees_private_names_reached_by_string():
    """The compile harness once patched the launcher's ``_config`` by name; the rule sees it."""
    old = (
        "from attncourse.kernels import flash\n"
        "patches = {(flash, '_config'): None, (flash, 'launch_target'): None}\n"
        "getattr(flash, '_forward_kernel', None)\n"
    )
    assert sorted(name for name, _ in _tool_private_uses(old)) == [
        "flash._config",
        "flash._forward_kernel",
    ]
