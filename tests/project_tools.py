"""The repository's own tools, importable from the tests (``tools/`` is not a package)."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


normalize = _load("normalize_notebooks")
colab = _load("colab_edition")
exercise_index = _load("exercise_index")
