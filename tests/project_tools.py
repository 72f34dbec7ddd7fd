"""The repository's own tools, importable from the tests (``tools/`` is not a package)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_spec = importlib.util.spec_from_file_location("normalize_notebooks", ROOT / "tools" / "normalize_notebooks.py")
normalize = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(normalize)
