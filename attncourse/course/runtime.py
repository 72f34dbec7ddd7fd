"""How the notebooks set up the process they run in: torch's threads, and chapter 10's kernels.

Every chapter that trains a model or times something calls :func:`set_threads` in its imports
cell, so all of them run the same way. The models of the book are small: one thread is about as
fast as two for them, it gives the same numbers on every machine, and on a busy machine (a shared
2-core runtime such as Colab's CPU runtime, a CI box) torch's default of one thread per core
oversubscribes the cores and slows small training loops ten times or more.

:func:`import_kernels` imports chapter 10's Triton kernels where triton exists (Linux) and
otherwise lets the chapter run on without them (macOS, Windows): each cell that runs a kernel
opens with the comment :data:`NEEDS_TRITON`, and only those cells print a note instead of running.
"""

from __future__ import annotations

from typing import Optional

import torch

from .._checks import require_positive_int

__all__ = ["set_threads", "default_threads", "import_kernels", "NEEDS_TRITON"]

#: Every chapter-10 cell that runs a kernel opens with this comment. Where triton is missing,
#: :func:`import_kernels` makes exactly the cells that open with it print a note instead.
NEEDS_TRITON = "# needs triton (without it this cell prints a note: see the imports cell)"

# torch's own choice for this process (one thread per physical core), before any set_threads.
_DEFAULT_THREADS = torch.get_num_threads()


def set_threads(n: int = 1) -> int:
    """Run torch's CPU operations on ``n`` threads; returns ``n``.

    Sets the intra-op threads (``torch.set_num_threads``, which may be called at any time) and,
    where torch still allows it, the inter-op threads too. torch accepts
    ``torch.set_num_interop_threads`` only once per process and only before any parallel work
    has started; afterwards it raises ``RuntimeError``, so this function tries it only while
    the inter-op count differs from ``n`` and otherwise leaves it as it is. Calling
    ``set_threads`` again (a notebook run twice, a second chapter in the same kernel) is safe.

    Raises ``TypeError``/``ValueError`` when ``n`` is not a positive integer.
    """
    require_positive_int("n", n)
    torch.set_num_threads(n)
    if torch.get_num_interop_threads() != n:
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:
            pass  # set once already, or parallel work has started: torch keeps its inter-op pool
    return n


def default_threads() -> int:
    """The number of intra-op threads torch chose for this process before :func:`set_threads`."""
    return _DEFAULT_THREADS


def import_kernels(verbose: bool = True) -> Optional[object]:
    """Chapter 10's kernels (:mod:`attncourse.kernels.flash`), or ``None`` where triton is missing.

    Triton publishes wheels for Linux only, so on macOS and Windows the kernels cannot be
    imported. Then, inside IPython (a notebook), every cell run afterwards whose first line is
    :data:`NEEDS_TRITON` prints a note instead of running, so the chapter still executes from
    top to bottom; every other cell runs as usual. Set ``TRITON_INTERPRET=1`` before calling it
    to run the kernels on CPU tensors.
    """
    try:
        from ..kernels import flash
    except ImportError as error:
        note = (
            f"skipped: this cell runs Triton kernels, and triton cannot be imported here ({error});"
            " Colab (whose torch ships triton) or Linux runs it"
        )
        if verbose:
            print(f"{note}.\nCells that open with {NEEDS_TRITON!r} print this note instead.")
        _skip_cells_that_need_triton(note)
        return None
    return flash


def _skip_cells_that_need_triton(note: str) -> None:
    """Register an IPython input transformer that replaces each cell opening with
    :data:`NEEDS_TRITON` by ``print(note)``; outside IPython, nothing."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def skip_marked_cells(lines: list[str]) -> list[str]:
        marked = bool(lines) and lines[0].strip() == NEEDS_TRITON
        return [f"print({note!r})\n"] if marked else lines

    skip_marked_cells.attncourse_kernels = True
    transformers = shell.input_transformers_post
    transformers[:] = [t for t in transformers if not getattr(t, "attncourse_kernels", False)]
    transformers.append(skip_marked_cells)
