"""What several test modules share (the checkers' tests have theirs in ``exercise_helpers.py``;
``project_tools.py`` imports ``tools/``): the executed chapters of the book build."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "_build" / "executed" / "book"


def executed_cells(notebook: Path) -> list:
    """The cells of ``notebook`` as the book build executed it (``_build/executed/book``, written
    by ``tools/execute_book.py``). Skips the calling test when the book has not been built; a
    notebook there without outputs fails it."""
    executed = EXECUTED / notebook.name
    if not executed.exists():
        pytest.skip(
            f"no executed notebook {executed.relative_to(ROOT)}: outputs are checked after the"
            " book is built (make book, or tools/execute_book.py)"
        )
    cells = json.loads(executed.read_text())["cells"]
    assert any(cell.get("outputs") for cell in cells), f"{executed} has no outputs: not executed"
    return cells
