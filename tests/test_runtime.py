"""attncourse.course.runtime: the threads of the training and timing chapters; chapter 10's
kernels."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from project_tools import ROOT

from attncourse.course import runtime


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (torch sets inter-op threads once per process)."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_set_threads_sets_intra_and_inter_op_threads_in_a_fresh_process():
    out = run_python("""
        import torch
        from attncourse.course.runtime import set_threads
        assert set_threads(1) == 1
        print(torch.get_num_threads(), torch.get_num_interop_threads())
    """)
    assert out == "1 1"


def test_set_threads_can_be_called_again_after_parallel_work_started():
    # torch refuses a second set_num_interop_threads (RuntimeError): set_threads must not
    out = run_python("""
        import torch
        from attncourse.course.runtime import set_threads
        set_threads(1)
        torch.randn(256, 256) @ torch.randn(256, 256)
        set_threads(2)
        try:
            torch.set_num_interop_threads(2)
        except RuntimeError:
            refused = True
        else:
            refused = False
        print(torch.get_num_threads(), torch.get_num_interop_threads(), refused)
    """)
    assert out == "2 1 True"


def test_set_threads_in_this_process_and_default_threads():
    before = torch.get_num_threads()
    try:
        assert runtime.set_threads(2) == 2 and torch.get_num_threads() == 2
        assert runtime.set_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    # torch's own choice for the process, not the count set since (a fresh process: the test
    # workers set their own)
    code = (
        "import torch; chosen = torch.get_num_threads()\n"
        "from attncourse.course import runtime\n"
        "runtime.set_threads(1); print(chosen, runtime.default_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    chosen, default = out.stdout.split()
    assert default == chosen


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None])
def test_set_threads_rejects_what_is_not_a_positive_integer(bad):
    with pytest.raises((TypeError, ValueError), match="n must be"):
        runtime.set_threads(bad)


def test_import_kernels_without_triton_skips_exactly_the_marked_cells():
    out = run_python("""
        import sys
        sys.modules["triton"] = None  # as if triton were not installed
        from IPython.testing.globalipapp import start_ipython
        shell = start_ipython()
        from attncourse.course.runtime import NEEDS_TRITON, import_kernels
        assert import_kernels() is None
        assert import_kernels(verbose=False) is None  # a second call registers nothing more
        hooks = [t for t in shell.input_transformers_post
                 if getattr(t, "attncourse_kernels", False)]
        assert len(hooks) == 1
        shell.run_cell("x = 1")
        shell.run_cell(NEEDS_TRITON + "\\nx = flash.flash_attention(1)")  # NameError if it ran
        shell.run_cell("y = 'flash.' + 'triton'")  # mentions them, unmarked: runs
        print("x =", shell.user_ns["x"], "y =", shell.user_ns["y"])
    """)
    assert "triton cannot be imported here" in out and "Colab" in out
    assert out.count("skipped: this cell runs Triton kernels") == 2  # the set-up, one cell
    assert out.endswith("x = 1 y = flash.triton")


def test_import_kernels_with_triton_returns_the_kernels_module():
    pytest.importorskip("triton")
    out = run_python("""
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        from attncourse.course.runtime import import_kernels
        flash = import_kernels()
        print(flash.__name__, hasattr(flash, "flash_attention"))
    """)
    assert out == "attncourse.kernels.flash True"


def test_every_chapter_10_cell_that_runs_kernels_carries_the_marker():
    """Without triton only the marked cells are skipped: an unmarked kernel cell would fail the
    chapter on macOS and Windows (make book there). The imports cell sets the kernels up."""
    notebook = json.loads((ROOT / "book" / "10_gpu_attention.ipynb").read_text(encoding="utf-8"))
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    source = ["".join(c["source"]) for c in code]
    imports = next(i for i, s in enumerate(source) if "import_kernels()" in s)
    uses = [s for s in source[imports + 1 :] if re.search(r"\bflash\.|\btriton\b", s)]
    unmarked = [s.split("\n", 1)[0] for s in uses if not s.startswith(runtime.NEEDS_TRITON)]
    assert len(uses) >= 10 and not unmarked
