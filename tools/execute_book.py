"""Execute the book's chapters once, on every core, into jupyter-book's execution cache.

``make book`` runs this first. jupyter-cache's ``local-parallel`` executor (nbclient, the executor
jupyter-book itself uses, in a pool of one process per core) runs every chapter of ``_toc.yml``
in a fresh kernel with ``book/`` as its working directory, into the emptied
``_build/.jupyter_cache``; the build that follows (``execute_notebooks: cache``) finds every
chapter there and executes nothing itself. So each chapter's cells run once for the book.

A cell that raises, or an ``assert`` of what the chapter teaches that fails, fails this step:
the notebook's traceback is printed and the exit status is 1, as ``raise_on_error`` fails the
build. (jupyter-cache records the failure but does not stop: its own ``jcache project execute``
exits 0 with a failed notebook, which is why ``make book`` runs this script rather than it.) The
executed notebooks, Markdown cells and outputs, are also written to ``_build/executed/book/``:
the Chinese edition is made from them, and tests read the chapters' numbers there. The cache is
keyed by the notebook's cells only, not by the package they import, so ``make book`` empties it
before each build: a cached output never outlives the code that made it.

Each kernel runs one torch thread (``OMP_NUM_THREADS=1``) when several run side by side: two
kernels of two threads each on two cores slow each other down several times over.

Until issue 32 the chapters ran under nbval (``pytest --nbval-lax``) with a recorder of our own;
lax mode compares no output and no chapter has an ``NBVAL_*`` marker, so nbval only failed on an
error, which the executor does too (docs/decisions/0006-book-execution-by-jupyter-cache.md).
``pytest book/`` still runs the chapters under nbval (pyproject.toml's ``addopts``).

    python tools/execute_book.py [--cache DIR] [--executed DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import nbformat
import yaml
from jupyter_cache.executors.basic import ExecutionWorkerLocalMProc, JupyterExecutorLocalMproc

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent

# The chapters that take longest go first, so that no worker is left running a long one alone
# at the end (CI build, two at a time: 5 and 9 take about 35 s, 11 (its compile) 15-40 s, the
# others 4-20 s). The executor's pool takes the chapters in the order they were added.
LONGEST_FIRST = (
    "05_language_model",
    "09_all_attention",
    "11_flex_attention",
    "08_adaptive_span",
    "06_inference",
    "07_complexity",
)


def chapter_paths() -> list[Path]:
    sys.path.insert(0, str(TOOLS))
    from colab_edition import chapters  # the notebooks of _toc.yml, in the book's order

    return [ROOT / f"{doc}.ipynb" for doc, _ in chapters()]


def longest_first(paths: list[Path]) -> list[Path]:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(paths, key=lambda path: rank.get(path.stem, len(rank)))  # stable otherwise


def restore_signal_handlers() -> None:
    """SIGTERM and SIGINT back to Python's defaults, after nbclient ran a notebook in this process
    (:class:`KillableWorker` says why)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


class KillableWorker(ExecutionWorkerLocalMProc):
    """jupyter-cache's ``local-parallel`` worker, which stays killable after a failed kernel.

    nbclient installs SIGINT and SIGTERM handlers on its event loop before it starts a kernel
    and removes them only once the kernel has started (``NotebookClient.async_setup_kernel``,
    nbclient 0.11). A kernel that dies on start leaves them in the pool worker, where they do
    nothing: when the pool then ends with that worker still waiting for a task, it sends
    SIGTERM, the worker ignores it, and ``Pool.__exit__`` waits for it forever (3 of 8 runs of
    the retry test on a loaded machine: ``py-spy`` showed the pool joining a worker blocked on
    its task queue, SIGTERM caught). This worker restores the default handlers after every
    notebook.
    """

    @staticmethod
    def execute(project_nb, data):
        try:
            return ExecutionWorkerLocalMProc.execute(project_nb, data)
        finally:
            restore_signal_handlers()


class ParallelExecutor(JupyterExecutorLocalMproc):
    """The ``local-parallel`` executor (a pool of one process per core) with that worker."""

    _EXECUTION_WORKER = KillableWorker


def execute(paths: list[Path], cache_dir: Path, executed: Path, root: Path, timeout: int) -> int:
    """Execute ``paths`` into the cache at ``cache_dir`` and write each executed notebook under
    ``executed`` (at its path relative to ``root``); 1 (and nothing written) when any failed."""
    from jupyter_cache import get_cache
    from jupyter_cache.executors import load_executor

    if (os.cpu_count() or 1) > 1:
        os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # inherited by every kernel
    # The notebooks ask for the kernel "python3": this environment's own, not a user-level
    # kernelspec of that name pointing at another Python (Jupyter searches JUPYTER_PATH first).
    here = str(Path(sys.prefix) / "share" / "jupyter")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        filter(None, [here, os.environ.get("JUPYTER_PATH")])
    )
    shutil.rmtree(executed, ignore_errors=True)
    cache = get_cache(str(cache_dir))
    for path in longest_first(paths):
        cache.add_nb_to_project(str(path))
    result = ParallelExecutor(cache).run_and_cache(timeout=timeout, allow_errors=False, force=True)
    succeeded, excepted, errored = map(set, (result.succeeded, result.excepted, result.errored))
    if errored:
        # "errored" is the executor failing, not a cell: a kernel that did not start (two
        # kernels starting at once can draw the same free port, "Address already in use",
        # then "Kernel didn't respond"). Those notebooks ran no cell: run them again, one at a
        # time. A cell that raises is "excepted" and is never retried.
        print(
            f"retrying, one at a time, {len(errored)} notebook(s) whose execution did"
            f" not start: {', '.join(sorted(Path(uri).name for uri in errored))}",
            file=sys.stderr,
            flush=True,
        )
        try:  # in this process: a kernel that dies again leaves nbclient's handlers here
            retry = load_executor("local-serial", cache=cache).run_and_cache(
                filter_uris=sorted(errored), timeout=timeout, allow_errors=False, force=True
            )
        finally:
            restore_signal_handlers()
        succeeded |= set(retry.succeeded)
        excepted |= set(retry.excepted)
        errored = set(retry.errored)
    failed = excepted | errored
    for record in cache.list_project_records():
        if record.uri in failed:
            print(
                f"\n{record.uri} failed:\n{record.traceback or '(no traceback)'}", file=sys.stderr
            )
    if failed or len(succeeded) != len(paths):
        print(f"{len(failed)} notebook(s) failed: the book is not built", file=sys.stderr)
        return 1
    for path in paths:
        pk, notebook = cache.merge_match_into_notebook(nbformat.read(path, as_version=4))
        seconds = cache.get_cache_record(pk).data.get("execution_seconds", 0.0)
        inside = path.is_relative_to(root)
        copy = executed / (path.relative_to(root) if inside else path.name)
        copy.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, copy)
        print(f"{copy.relative_to(executed)}: executed in {seconds:.1f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    parser.add_argument("--executed", type=Path, default=ROOT / "_build" / "executed")
    args = parser.parse_args(argv)
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["execute"]
    paths = chapter_paths()
    start = time.perf_counter()
    status = execute(paths, args.cache, args.executed, ROOT, int(config.get("timeout", 300)))
    print(
        f"{len(paths)} notebooks on {os.cpu_count() or 1} core(s)"
        f" in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
