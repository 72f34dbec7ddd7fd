"""Nothing used before it is taught.

Every public name of the package records the chapter that introduces it
(``tests/introduced.py``'s ``INTRODUCED``). A chapter's code cells may use (import, or reach by
attribute access) only names introduced in that chapter or an earlier one, and a public
function or class may rely only on names of its own chapter or earlier ones (following the
package's private helpers), except for the optional features listed in
``tests/introduced.py``'s ``LATER_FEATURES``.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import json
import pkgutil
import textwrap
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest
from helpers import CHAPTERS
from introduced import INTRODUCED, LATER_FEATURES

import attncourse


def _modules() -> List[str]:
    names = ["attncourse"]
    for info in pkgutil.walk_packages(attncourse.__path__, "attncourse."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


def canonical(module_name: str, attr: str) -> Optional[str]:
    """The registry key of ``module_name.attr``: where a function or class is defined, else
    the module's own name; ``None`` when it is a module or not a package name."""
    module = importlib.import_module(module_name)
    if not hasattr(module, attr):
        return None
    value = getattr(module, attr)
    if inspect.ismodule(value):
        return None
    defined_in = (
        getattr(value, "__module__", None)
        if (inspect.isfunction(value) or inspect.isclass(value))
        else None
    )
    if defined_in and defined_in.startswith("attncourse"):
        return f"{defined_in}.{value.__qualname__}"
    if defined_in:  # a torch or typing name a module happens to hold
        return None
    return f"{module_name}.{attr}"


def public_names() -> Set[str]:
    """Every public name: each module's ``__all__`` (or, lacking one, what it defines)."""
    found = set()
    for module_name in _modules():
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None)
        if names is None:
            # a name bound to None is a placeholder (chapter 10's `tl`, set when triton is first
            # imported), not a public name: whether it is there would depend on import order
            names = [
                n
                for n, v in vars(module).items()
                if not n.startswith("_")
                and not inspect.ismodule(v)
                and v is not None
                and getattr(v, "__module__", module_name) == module_name
            ]
        for name in names:
            key = canonical(module_name, name)
            if key is not None:
                found.add(key)
    return found


def _is_module(dotted: str) -> bool:
    try:
        importlib.import_module(dotted)
        return True
    except ImportError:
        return False


def _resolve(dotted: str) -> Optional[str]:
    """``attncourse.a.b.c`` -> the registry key of the first non-module attribute on the path."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if _is_module(prefix):
            return canonical(prefix, parts[i]) if i < len(parts) else None
    return None


def _code(source: str) -> str:
    """Cell source without IPython magics and shell escapes."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def package_uses(tree: ast.AST) -> Iterator[Tuple[str, int]]:
    """The package names a piece of code uses: ``(registry key, line)``.

    Covers ``from attncourse.x import y [as z]``, ``import attncourse.x [as m]`` followed by
    ``m.y``, ``attncourse.x.y`` chains, and names bound by those imports.
    """
    aliases: Dict[str, str] = {}  # local name -> dotted package path it stands for
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "attncourse"
        ):
            for alias in node.names:
                if alias.name == "*":
                    raise AssertionError(
                        f"line {node.lineno}: `from {node.module} import *` hides what is used"
                    )
                dotted = f"{node.module}.{alias.name}"
                aliases[alias.asname or alias.name] = dotted
                key = _resolve(dotted)
                if key is not None:
                    yield key, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "attncourse":
                    aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else "attncourse"
                    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in aliases:
                key = _resolve(".".join([aliases[inner.id], *reversed(chain)]))
                if key is not None:
                    yield key, node.lineno


def chapter_uses(path: Path) -> Iterator[Tuple[str, int, int]]:
    """``(registry key, code cell index, line in the cell)`` for every package name a chapter's
    code uses. The code cells are parsed as one program, as the kernel runs them: an import in
    one cell binds the names later cells use."""
    cells = json.loads(path.read_text())["cells"]
    lines: List[str] = []
    where: List[Tuple[int, int]] = []  # program line -> (cell, line in cell)
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        source = _code("".join(cell["source"]))
        ast.parse(source)  # each cell must parse on its own
        for number, line in enumerate(source.splitlines() + [""], start=1):
            lines.append(line)
            where.append((index, number))
    for key, line in package_uses(ast.parse("\n".join(lines))):
        cell, number = where[line - 1]
        yield key, cell, number


def chapter_number(path: Path) -> int:
    return int(path.name[:2])


def test_every_public_name_has_a_chapter():
    names = public_names()
    missing = sorted(names - set(INTRODUCED))
    stale = sorted(set(INTRODUCED) - names)
    assert not missing, (
        "public names without the chapter that introduces them; add each to "
        f"tests/introduced.py: {missing}"
    )
    assert not stale, f"tests/introduced.py lists names the package no longer has: {stale}"
    assert all(isinstance(c, int) and 1 <= c <= len(CHAPTERS) for c in INTRODUCED.values())


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_uses_nothing_introduced_later(path):
    chapter = chapter_number(path)
    later = sorted(
        {
            f"{key} (chapter {INTRODUCED[key]}; code cell {cell}, line {line})"
            for key, cell, line in chapter_uses(path)
            if INTRODUCED.get(key, 0) > chapter
        }
    )
    assert not later, f"chapter {chapter} uses names a later chapter introduces: {later}"


def _dependencies(obj, seen: Set[int]) -> Set[str]:
    """Registry keys of the package's public names that ``obj``'s code refers to, following
    the package's private functions and classes (``_Embedding``, ``_check_...``)."""
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return set()
    module = importlib.import_module(obj.__module__)
    tree = ast.parse(source)
    found: Set[str] = set()
    own = f"{obj.__module__}.{obj.__qualname__}"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and not hasattr(builtins, node.id)
            and node.id in vars(module)
        ):
            value = vars(module)[node.id]
            if inspect.ismodule(value):
                continue
            defined_in = getattr(value, "__module__", "") or ""
            if not defined_in.startswith("attncourse") or not (
                inspect.isfunction(value) or inspect.isclass(value)
            ):
                continue
            key = f"{defined_in}.{value.__qualname__}"
            if key in INTRODUCED:
                if key != own:
                    found.add(key)
            elif value.__name__.startswith("_") and not defined_in.split(".")[-1].startswith("_"):
                # a private helper of a public module: look inside
                found |= _dependencies(value, seen)
    for key, _ in package_uses(tree):  # imports inside the function (lazy imports)
        if key != own:
            found.add(key)
    package = obj.__module__.rsplit(".", 1)[0]
    # lazy relative imports: `from .transformer import Seq2SeqTransformer`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            for alias in node.names:
                key = _resolve(
                    f"{base}.{node.module}.{alias.name}" if node.module else f"{base}.{alias.name}"
                )
                if key in INTRODUCED and key != own:
                    found.add(key)
    return found


def package_violations() -> List[str]:
    out = []
    for key, chapter in sorted(INTRODUCED.items()):
        module_name, _, qualname = key.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module_name), qualname)
        except (ImportError, AttributeError):
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        for dep in sorted(_dependencies(obj, set())):
            if INTRODUCED[dep] > chapter and (key, dep) not in LATER_FEATURES:
                out.append(f"{key} (chapter {chapter}) relies on {dep} (chapter {INTRODUCED[dep]})")
    return out


def test_package_names_rely_on_nothing_introduced_later():
    violations = package_violations()
    assert not violations, (
        "a name relies on one a later chapter introduces (move it, or list an optional "
        f"later feature in LATER_FEATURES with the reason): {violations}"
    )


def test_later_features_are_real():
    """Every allowed forward reference names two registered names, in that order of chapters."""
    for (name, later), reason in LATER_FEATURES.items():
        assert name in INTRODUCED and later in INTRODUCED, (name, later)
        assert INTRODUCED[later] > INTRODUCED[name] and reason, (name, later)


def test_the_parser_sees_every_import_style():
    code = textwrap.dedent("""
        import attncourse
        import attncourse.kv_cache as inf
        from attncourse.adaptive_span import soft_span_mask as ssm
        from attncourse import masks
        attncourse.tiled_attention
        inf.repeat_kv
        masks.causal_mask
        attncourse.efficient.tile_schedule
    """)
    keys = {key for key, _ in package_uses(ast.parse(code))}
    assert keys == {
        "attncourse.efficient.tiled_attention",
        "attncourse.kv_cache.repeat_kv",
        "attncourse.adaptive_span.soft_span_mask",
        "attncourse.masks.causal_mask",
        "attncourse.efficient.tile_schedule",
    }
