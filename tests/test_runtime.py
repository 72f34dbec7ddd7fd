"""attncourse.runtime: the threads of the training and timing chapters; chapter 10's kernels."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from project_tools import ROOT

from attncourse import runtime


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
        from attncourse.runtime import set_threads
        assert set_threads(1) == 1
        print(torch.get_num_threads(), torch.get_num_interop_threads())
    """)
    assert out == "1 1"


def test_set_threads_can_be_called_again_after_parallel_work_started():
    # torch refuses a second set_num_interop_threads (RuntimeError): set_threads must not
    out = run_python("""
        import torch
        from attncourse.runtime import set_threads
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
        assert runtime.set_threads(1) == 1 and torch.get_num_threads() == 1
        assert runtime.default_threads() >= 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None])
def test_set_threads_rejects_what_is_not_a_positive_integer(bad):
    with pytest.raises((TypeError, ValueError), match="n must be"):
        runtime.set_threads(bad)


def test_import_kernels_without_triton_returns_none_and_skips_kernel_cells():
    out = run_python("""
        import sys
        sys.modules["triton"] = None  # as if triton were not installed
        from IPython.testing.globalipapp import start_ipython
        shell = start_ipython()
        from attncourse.runtime import import_kernels
        assert import_kernels() is None
        assert import_kernels(verbose=False) is None  # a second call registers nothing more
        hooks = [t for t in shell.input_transformers_post
                 if getattr(t, "attncourse_kernels", False)]
        assert len(hooks) == 1
        shell.run_cell("x = 1")
        shell.run_cell("x = flash.flash_attention(1)")  # would raise NameError if it ran
        shell.run_cell("import triton")
        print("x =", shell.user_ns["x"])
    """)
    assert "triton cannot be imported here" in out and out.endswith("x = 1")
    assert out.count("skipped: this cell runs Triton kernels") >= 3


def test_import_kernels_with_triton_returns_the_kernels_module():
    pytest.importorskip("triton")
    out = run_python("""
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        from attncourse.runtime import import_kernels
        flash = import_kernels()
        print(flash.__name__, hasattr(flash, "flash_attention"))
    """)
    assert out == "attncourse.kernels.flash True"
