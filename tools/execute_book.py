"""Execute the book's notebooks on every core, into jupyter-book's execution cache.

``make book`` runs this first, on an empty cache: each chapter of ``_toc.yml`` executes once,
afresh, in its own kernel (``book/`` as the working directory, as jupyter-book runs it), two or
more at a time, and its outputs go into ``_build/.jupyter_cache``. The build that follows
(``execute_notebooks: cache``) then finds every chapter there and executes nothing itself. The
executed notebooks are also written to ``_build/executed/book/`` (the Chinese edition is made
from them; in cache mode myst-nb's own ``_build/jupyter_execute`` holds the unexecuted ones). The
cache is keyed by the notebook's cells only, not by the package they import, so ``make book``
empties it before each build: a cached output never outlives the code that made it.

A failing cell fails this step with its traceback, as ``raise_on_error`` fails the build.
Each kernel runs one torch thread (``OMP_NUM_THREADS=1``) when several run side by side: two
kernels of two threads each on two cores slow each other down several times over.

    python tools/execute_book.py [--workers N] [--cache DIR] [--executed DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat
import yaml
from colab_edition import ROOT, chapters  # the notebooks of _toc.yml, in the book's order


def execute(path: str, timeout: int) -> tuple[str, dict, float, str | None]:
    """Run one notebook in a fresh kernel: ``(path, executed notebook, seconds, traceback)``."""
    from jupyter_cache.executors.utils import single_nb_execution

    notebook = nbformat.read(path, as_version=4)
    result = single_nb_execution(
        notebook, cwd=str(Path(path).parent), timeout=timeout, allow_errors=False
    )
    return path, notebook, result.time, result.exc_string if result.err else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    parser.add_argument("--executed", type=Path, default=ROOT / "_build" / "executed")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["execute"]
    timeout = int(config.get("timeout", 300))
    paths = [ROOT / f"{doc}.ipynb" for doc, _ in chapters()]
    workers = min(args.workers, len(paths))
    if workers > 1:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = "1"  # inherited by every kernel started below

    cache = get_cache(str(args.cache))
    failures: list[str] = []
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        jobs = [pool.submit(execute, str(p), timeout) for p in paths]
        for job in as_completed(jobs):
            path, notebook, seconds, error = job.result()
            name = Path(path).relative_to(ROOT)
            if error is not None:
                failures.append(f"{name} failed:\n{error}")
                print(f"{name}: FAILED after {seconds:.1f} s", flush=True)
                continue
            record = cache.add_nb_to_project(path)
            cache.cache_notebook_bundle(
                CacheBundleIn(notebook, record.uri, data={"execution_seconds": seconds}),
                check_validity=False,
                overwrite=True,
            )
            copy = args.executed / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, copy)
            print(f"{name}: executed in {seconds:.1f} s", flush=True)
    print(
        f"{len(paths)} notebooks on {workers} worker(s) in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
