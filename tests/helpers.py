"""What several test modules share (the checkers' tests have theirs in ``exercise_helpers.py``;
``project_tools.py`` imports ``tools/``): the chapters and their executed copies in the book
build, where an exercise starts, which of their cells' outputs are measurements, and the GPU
benchmark at interpreter sizes."""

import json
import re
from pathlib import Path

import pytest
from project_tools import ROOT

#: The chapters, in order: ``book/NN_name.ipynb``.
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

EXECUTED = ROOT / "_build" / "executed" / "book"

#: Where an exercise starts: the book's ``{exercise-start}`` directive, or the Colab editions'
#: "Exercise N.M" heading (练习 in Chinese).
EXERCISE_START = re.compile(r"\{exercise-start\}|^#{1,4} (?:Exercise|练习) \d+\.\d+", re.MULTILINE)

#: A cell that times or profiles prints shares and rates that change from run to run: a number
#: of its outputs that equals an answer is chance, not a leak (chapter 7's profile once printed
#: 56.8 %, within causal-flops' tolerance of 56.25 %; chapter 6's decode timing printed 1.25 ms,
#: cache-bytes' 1.25). The tests that look for answers in outputs pass over such cells' outputs
#: (their source is still checked): the profiler, the package's timers (``time_call``,
#: ``time_interleaved``, ``time_training_steps``, ``time_triton_against_torch``,
#: ``time_flex_against_sdpa``), ``perf_counter`` and the decode benchmark run live.
MEASURES = re.compile(r"\bprofile\(|\btime_\w+\(|\bperf_counter\(|\brun_cache\(")

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
