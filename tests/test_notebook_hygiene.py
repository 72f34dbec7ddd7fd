"""Every notebook (book/ and the Colab edition) is valid nbformat 4.5 with an id on every cell and
exactly one set-up cell, the first (in the Colab editions the first code cell, under the
chapter's title and first paragraph); the normaliser guarantees both for any notebook."""

import json
import re
import warnings

import nbformat
import pytest
from project_tools import ROOT, normalize

NOTEBOOKS = (
    sorted((ROOT / "book").glob("*.ipynb"))
    + sorted((ROOT / "notebooks").glob("*.ipynb"))
    + sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
)


def _set_up_cells(nb: dict) -> list:
    """The set-up cells of ``nb`` (in the Colab editions a form: a ``#@title`` line first)."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        source = "".join(cell["source"])
        if source.startswith("#@title ") and cell.get("metadata", {}).get("cellView") == "form":
            source = source.partition("\n")[2]
        if cell["cell_type"] == "code" and (
            source.startswith(normalize.SETUP_MARKER)
            or source.lower().startswith(normalize.PLACEHOLDER_MARKER)
        ):
            found.append(i)
    return found


def _first_code_cell(nb: dict) -> int:
    return next(i for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code")


def _validate_strictly(nb: dict) -> None:
    """nbformat's validation with its warnings (MissingIDFieldWarning among them) as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nbformat.validate(nbformat.from_dict(json.loads(json.dumps(nb))))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_committed_notebook_has_ids_and_one_set_up_cell(path):
    nb = json.loads(path.read_text())
    _validate_strictly(nb)
    ids = [cell.get("id") for cell in nb["cells"]]
    assert all(ids) and len(set(ids)) == len(ids)
    if path.parent.name == "book":
        assert _set_up_cells(nb) == [0]
    else:  # the Colab editions open with the chapter's title and first paragraph
        assert _set_up_cells(nb) == [_first_code_cell(nb)] == [1]


def _cell(kind: str, source: str, **extra) -> dict:
    cell = {"cell_type": kind, "metadata": {}, "source": source, **extra}
    if kind == "code":
        cell.update(
            execution_count=3, outputs=[{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
        )
    return cell


def test_normaliser_adds_ids_drops_stray_set_up_cells_and_strips_outputs():
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "other", "display_name": "x"}},
        "cells": [
            _cell("code", "# set-up cell, rewritten by tools/normalize_notebooks.py", id="mine"),
            _cell("markdown", "# Title"),
            _cell("code", "x = 1"),
            _cell("code", normalize.setup_source()),  # a stray second set-up cell
            _cell("code", "y = 2", id="cell-04"),  # an id the generated ones must not repeat
            _cell("code", "# set-up cell"),
        ],
    }
    out = normalize.normalized(nb)
    _validate_strictly(out)
    assert [c["source"] for c in out["cells"]] == [
        normalize.setup_source(),
        "# Title",
        "x = 1",
        "y = 2",
    ]
    assert out["cells"][0]["id"] == "mine"  # the first set-up cell's id is kept
    ids = [c["id"] for c in out["cells"]]
    assert all(ids) and len(set(ids)) == len(ids)
    code = [c for c in out["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert out["metadata"]["kernelspec"]["name"] == "python3"
    assert normalize.normalized(out) == out  # idempotent


def test_normaliser_output_keeps_ids_of_cells_that_have_them():
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [_cell("markdown", "text", id="keep-me"), _cell("code", "z = 3", id="and-me")],
    }
    out = normalize.normalized(nb)
    assert [c["id"] for c in out["cells"]] == ["setup", "keep-me", "and-me"]


#: The exercise functions a chapter's cells call, running or commented out for the reader to run.
EXERCISE_CALLS = re.compile(r"\b(check|hint|solution)\(")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_exercise_function_a_cell_calls_is_imported(path):
    """A commented ``# hint("...")`` under each check cell is for the reader to run: the chapter
    must import ``hint`` (ruff's unused-import fix had dropped it from every chapter)."""
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    called = set(EXERCISE_CALLS.findall(code))
    imported = set()
    for line in re.findall(r"from attncourse\.exercises import ([^\n#]+)", code):
        imported |= {name.strip() for name in line.split(",")}
    assert called <= imported, f"called {sorted(called)}, imported {sorted(imported)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_check_cell_shows_its_verdict_with_its_hint_uncommented(path):
    """``check(...)`` is the last line of its cell, so a reader who uncomments the hint line
    still sees the verdict (a hint below the check was the last expression and hid it); the hint
    line above it displays itself."""
    cells = json.loads(path.read_text())["cells"]
    checks = [
        "".join(c["source"]).strip().splitlines()
        for c in cells
        if c["cell_type"] == "code" and re.search(r"^check\(", "".join(c["source"]), re.M)
    ]
    assert checks, path
    for lines in checks:
        assert lines[-1].startswith("check("), lines
        assert all(re.fullmatch(r'# display\(hint\("[^"]+"\)\)', line) for line in lines[:-1]), (
            lines
        )


def test_normaliser_edges_a_mutation_audit_found():
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            _cell("code", "# Set-Up Cell (any case)"),  # a placeholder: dropped
            _cell("markdown", "a", id="cell-02"),
            _cell("code", ["x = ", "1"]),  # a list source, and no id: index 2 after the set-up
            _cell("markdown", "b", id="cell-02-1"),  # the first two candidates are taken
        ],
    }
    out = normalize.normalized(nb)
    assert [c["source"] for c in out["cells"]][1:] == ["a", "x = 1", "b"]
    ids = [c["id"] for c in out["cells"]]
    assert len(set(ids)) == len(ids) and ids[2] == "cell-02-2"
    # "id" goes before the first key that sorts after it (nbformat's order), the others kept
    keys = list(out["cells"][2])
    at = keys.index("id")
    assert all(k < "id" for k in keys[:at]) and keys[at + 1] > "id", keys
