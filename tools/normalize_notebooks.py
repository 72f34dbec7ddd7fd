"""Keep every notebook of the book in its committed form.

* no outputs, no execution counts, no execution metadata: stripped by nbstripout (a
  maintained tool), which keeps the cells' ids;
* kernelspec ``python3`` (what Colab and nbval expect);
* every cell has an id (nbformat 4.5; a missing one is a ``MissingIDFieldWarning`` today and
  an error in later nbformat releases): a cell without one gets ``cell-<index>``;
* exactly one set-up cell, the first, which installs ``attncourse`` from the repository only
  when it is missing, with the repository URL and branch derived from ``[project.urls]`` in
  pyproject.toml (or from the URL in the environment variable ``ATTNCOURSE_INSTALL_URL``, when
  set). Any other set-up cell (an older one, or a placeholder whose first line starts with
  ``# set-up cell``) is removed; the first one's id is kept.

The set-up cell writer is this file's own work; the stripping is nbstripout's.

Usage: ``python tools/normalize_notebooks.py`` rewrites the notebooks in place;
``python tools/normalize_notebooks.py --check`` lists those that are not normalised and
exits with 1 (the test suite runs this check).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
from nbstripout import strip_output

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
SETUP_MARKER = "# Set-up for Colab or any fresh runtime"
# A cell whose first line starts with this is a placeholder for the set-up cell.
PLACEHOLDER_MARKER = "# set-up cell"
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
    # In ruff format's layout within the chapters' 80 columns (comments too), so that
    # `ruff format book` and `ruff check book` leave it.
    return (
        f"{SETUP_MARKER}: install the course package only if it\n"
        "# is missing. To install it from elsewhere (a fork, a local checkout), set\n"
        f"# {INSTALL_URL_VARIABLE} to a pip URL.\n"
        "import importlib.util\n"
        "import os\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if importlib.util.find_spec("attncourse") is None:\n'
        "    url = os.environ.get(\n"
        f'        "{INSTALL_URL_VARIABLE}",\n'
        f'        "git+{url}@{branch}",\n'
        "    )\n"
        "    subprocess.run(\n"
        "        [\n"
        "            sys.executable,\n"
        '            "-m",\n'
        '            "pip",\n'
        '            "install",\n'
        '            "--quiet",\n'
        '            f"attncourse @ {url}",\n'
        "        ],\n"
        "        check=True,\n"
        "    )\n"
        "    importlib.invalidate_caches()"
    )


def notebooks() -> list[Path]:
    return sorted((ROOT / "book").glob("*.ipynb"))


def _is_setup(cell: dict) -> bool:
    source = "".join(cell["source"])
    return cell["cell_type"] == "code" and (
        source.startswith(SETUP_MARKER) or source.lower().startswith(PLACEHOLDER_MARKER)
    )


def _with_id(cell: dict, cell_id: str) -> dict:
    """``cell`` with ``"id"`` among its keys in nbformat's (sorted) order: one line added to the JSON."""
    out = {}
    for key, value in cell.items():
        if key > "id" and "id" not in out:
            out["id"] = cell_id
        out[key] = value
    out.setdefault("id", cell_id)
    return out


def normalized(nb: dict) -> dict:
    nb = strip_output(
        nbformat.from_dict(json.loads(json.dumps(nb))),
        keep_output=False,
        keep_count=False,
        keep_id=True,
    )
    nb["metadata"]["kernelspec"] = dict(KERNELSPEC)
    nb["metadata"]["language_info"] = {"name": "python"}
    old_setups = [cell for cell in nb["cells"] if _is_setup(cell)]
    cells = [cell for cell in nb["cells"] if not _is_setup(cell)]
    setup = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {"tags": ["remove-cell"]},
        "outputs": [],
        "source": setup_source(),
        "id": old_setups[0].get("id", "setup") if old_setups else "setup",
    }
    cells.insert(0, setup)
    used = {cell["id"] for cell in cells if cell.get("id")}
    for index, cell in enumerate(cells):
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
        if not cell.get("id"):
            candidate, n = f"cell-{index:02d}", 0
            while candidate in used:
                n += 1
                candidate = f"cell-{index:02d}-{n}"
            used.add(candidate)
            cells[index] = _with_id(cell, candidate)
    nb["cells"] = cells
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, nb.get("nbformat_minor", 5))
    return json.loads(json.dumps(nb))


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
            print(
                f"not normalised: {path.relative_to(ROOT)} (run python"
                " tools/normalize_notebooks.py)"
            )
        return 1 if bad else 0
    for path in notebooks():
        path.write_text(dump(normalized(json.loads(path.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
