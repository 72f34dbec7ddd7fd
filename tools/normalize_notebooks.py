"""Keep every notebook of the book in its committed form.

* kernelspec ``python3`` (what Colab and nbval expect);
* no outputs and no execution counts (the book build and nbval execute them afresh);
* a first cell that installs ``attncourse`` from the repository only when it is missing,
  with the repository URL and branch derived from ``[project.urls]`` in pyproject.toml
  (or from the URL in the environment variable ``ATTNCOURSE_INSTALL_URL``, when set).

Usage: ``python tools/normalize_notebooks.py`` rewrites the notebooks in place;
``python tools/normalize_notebooks.py --check`` lists those that are not normalised and
exits with 1 (the test suite runs this check).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
SETUP_MARKER = "# Set-up for Colab or any fresh runtime"
# The one override of the set-up cell: a pip requirement URL to install attncourse from.
INSTALL_URL_VARIABLE = "ATTNCOURSE_INSTALL_URL"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def repository() -> tuple[str, str]:
    """``(url, branch)`` from pyproject.toml, the one place they are written."""
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    url = urls["Repository"]
    branch = urls["Branch"].removeprefix(url + "/tree/")
    return url, branch


def setup_source() -> str:
    """The first cell of every notebook.

    It installs the package with pip only when it cannot be imported, from the repository's
    branch, or from the pip requirement URL in the environment variable ``INSTALL_URL_VARIABLE``
    when that is set (``file:///path/to/checkout``, ``git+https://github.com/you/fork@branch``).
    ``importlib.invalidate_caches()`` lets the next cell import the package just installed.
    """
    url, branch = repository()
    return (
        f"{SETUP_MARKER}: install the course package only if it is missing.\n"
        f"# To install it from elsewhere (a fork, a local checkout), set {INSTALL_URL_VARIABLE} to a pip URL.\n"
        "import importlib.util, os, subprocess, sys\n"
        'if importlib.util.find_spec("attncourse") is None:\n'
        f'    url = os.environ.get("{INSTALL_URL_VARIABLE}", "git+{url}@{branch}")\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"attncourse @ {url}"], check=True)\n'
        "    importlib.invalidate_caches()"
    )


def notebooks() -> list[Path]:
    return sorted((ROOT / "book").glob("*.ipynb"))


def normalized(nb: dict) -> dict:
    nb = json.loads(json.dumps(nb))
    nb["metadata"]["kernelspec"] = dict(KERNELSPEC)
    nb["metadata"]["language_info"] = {"name": "python"}
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    setup = {"cell_type": "code", "execution_count": None, "metadata": {"tags": ["remove-cell"]}, "outputs": [],
             "source": setup_source()}
    first = nb["cells"][0] if nb["cells"] else None
    if first is not None and first["cell_type"] == "code" and "".join(first["source"]).startswith(SETUP_MARKER):
        setup["id"] = first.get("id", "setup")
        nb["cells"][0] = setup
    else:
        setup["id"] = "setup"
        nb["cells"].insert(0, setup)
    for cell in nb["cells"]:
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
    return nb


def dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def stale() -> list[Path]:
    """Notebooks whose committed text differs from their normalised form."""
    out = []
    for path in notebooks():
        text = path.read_text()
        if dump(normalized(json.loads(text))) != text:
            out.append(path)
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        for path in bad:
            print(f"not normalised: {path.relative_to(ROOT)} (run python tools/normalize_notebooks.py)")
        return 1 if bad else 0
    for path in notebooks():
        path.write_text(dump(normalized(json.loads(path.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
