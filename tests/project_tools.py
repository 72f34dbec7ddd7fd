"""The repository's own tools, importable from the tests (``tools/`` is not a package).

The one way tests import ``tools/<name>.py``: ``tool(name)`` (the same module on every call).
A package under ``tools/`` (``tools/kernel_compile/``) is imported by its name with
``tool_package(name)``, which puts ``tools/`` on ``sys.path`` (last): its process pools spawn
workers that import it again by that name, and they inherit the path.
"""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def tool(name: str):
    """``tools/<name>.py`` as a module, loaded once and registered under ``name``."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tool_package(name: str):
    """``tools/<name>/`` (a package, or ``package.module``) imported by that name, ``tools/`` on ``sys.path``."""
    if str(TOOLS) not in sys.path:
        sys.path.append(str(TOOLS))
    return importlib.import_module(name)


# Short names for the tools several test modules use, loaded on first use (PEP 562): a module
# that needs none of them (tests/helpers.py, the kernel tests on a GPU machine that has no
# nbformat) imports this one without their dependencies.
_SHORT_NAMES = {
    "normalize": "normalize_notebooks",
    "colab": "colab_edition",
    "exercise_index": "exercise_index",
}


def __getattr__(name: str):
    if name in _SHORT_NAMES:
        return tool(_SHORT_NAMES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
