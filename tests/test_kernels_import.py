"""triton is optional (``attncourse[gpu]``): everything but ``attncourse.kernels.flash`` imports without it."""

import subprocess
import sys
import textwrap


def test_package_imports_without_triton():
    script = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # as if triton were not installed: importing it raises ImportError
        import attncourse, attncourse.exercises, attncourse.plotting
        import attncourse.benchmarks.attention, attncourse.benchmarks.kernels
        import attncourse.kernels
        from attncourse.kernels import tiles, tile_map
        assert int(tile_map(64, 64, 16, 16, causal=True).sum()) == 10
        from attncourse.exercises import check
        from attncourse.exercises.ch10_gpu import _key_blocks_solution
        assert check("gpu/causal-key-blocks", _key_blocks_solution).passed
        try:
            attncourse.kernels.flash_attention
        except ImportError:
            print("flash needs triton")
        else:
            raise SystemExit("attncourse.kernels.flash imported without triton")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "flash needs triton"
