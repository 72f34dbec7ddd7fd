"""``python tools/kernel_compile [--subset] [--check [FILE]] ...``: the compile harness's command line.

Run from the repository root (or with ``tools/`` on ``PYTHONPATH``: ``python -m kernel_compile``).
TRITON_INTERPRET is dropped before triton is imported: the kernels are compiled, not interpreted.
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported: compile, do not interpret
    tools = str(Path(__file__).resolve().parent.parent)
    if tools not in sys.path:
        sys.path.insert(0, tools)  # run as a folder, this package is importable by its name
    from kernel_compile import main

    raise SystemExit(main())
