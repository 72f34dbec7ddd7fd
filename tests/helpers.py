"""What several test modules share (the checkers' tests have theirs in ``exercise_helpers.py``;
``project_tools.py`` imports ``tools/``): the executed chapters of the book build, and the
GPU benchmark at interpreter sizes."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "_build" / "executed" / "book"

#: ``attncourse.benchmarks.kernels.run_gpu``'s keywords for a run through Triton's interpreter:
#: one length of 16, float32, one head of 16, two spans, one repeat.
TINY_GPU_RUN = dict(
    lengths=(16,),
    device="cpu",
    dtypes=("float32",),
    batch=1,
    num_heads=1,
    head_dim=16,
    span_length=16,
    spans=(4.0, 8.0),
    repeats=1,
)


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
