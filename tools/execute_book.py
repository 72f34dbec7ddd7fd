"""Execute the book's notebooks once, under nbval, into jupyter-book's execution cache.

``make book`` runs this first. Every chapter of ``_toc.yml`` runs under nbval (``pytest
--nbval-lax``, the notebook tests of the course): each in a fresh kernel with ``book/`` as its
working directory, two or more at a time (pytest-xdist, one notebook per worker). A cell that
raises, or an ``assert`` of what the chapter teaches that fails, fails this step with nbval's
report, as ``raise_on_error`` fails the build. While nbval runs the cells, this module (loaded
into pytest as a plugin, ``-p execute_book``) records what each cell shows the way Jupyter's
own executor does: streams, displays, results and errors, displays updated in place (the
training progress bars) and cleared, execution counts. The executed notebooks go to
``_build/executed/book/`` (the Chinese edition is made from them) and into the emptied
``_build/.jupyter_cache``; the build that follows (``execute_notebooks: cache``) finds every
chapter there and executes nothing itself. So each chapter's cells run once for the book and its
nbval test together. The cache is keyed by the notebook's cells only, not by the package they
import, so ``make book`` empties it before each build: a cached output never outlives the code
that made it.

Each kernel runs one torch thread (``OMP_NUM_THREADS=1``) when several run side by side: two
kernels of two threads each on two cores slow each other down several times over.

    python tools/execute_book.py [--workers N] [--cache DIR] [--executed DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent

# The chapters that take longest go first, so that no worker is left running a long one alone
# at the end (CI build, two at a time: 5 and 9 take about 35 s, 11 (its compile) 15-40 s, the
# others 4-20 s).
LONGEST_FIRST = (
    "05_language_model",
    "09_all_attention",
    "11_flex_attention",
    "08_adaptive_span",
    "06_inference",
    "07_complexity",
)


# -- the plugin: what each cell shows, recorded while nbval runs it ---------------------------


class Recorder:
    """The executed copy of one notebook, filled from its kernel's IOPub messages."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.notebook = nbformat.read(path, as_version=4)
        self.current: int | None = None  # the index of the cell nbval is running
        self.requests: dict[str, int] = {}  # execute request's msg_id -> cell index
        self.displays: dict[str, list[tuple[int, int]]] = {}  # display_id -> (cell, output)
        self.clear_before_next: set[int] = set()
        self.failed = False
        self.start = time.perf_counter()
        for cell in self.notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None

    def take(self, msg: dict) -> None:
        """One IOPub message, handled as Jupyter's executor (nbclient) handles it."""
        kind, content = msg["msg_type"], msg["content"]
        request = msg["parent_header"].get("msg_id")
        if kind == "execute_input":
            self.requests[request] = self.current
            self.notebook.cells[self.current].execution_count = content["execution_count"]
            return
        index = self.requests.get(request)
        if index is None:
            return
        outputs = self.notebook.cells[index].outputs
        display_id = (content.get("transient") or {}).get("display_id")
        if display_id and kind in ("display_data", "execute_result", "update_display_data"):
            for cell, position in self.displays.get(display_id, []):
                shown = self.notebook.cells[cell].outputs[position]
                shown["data"], shown["metadata"] = content["data"], content["metadata"]
        if kind == "clear_output":
            if content.get("wait"):
                self.clear_before_next.add(index)
            else:
                self._clear(index)
        elif kind in ("stream", "display_data", "execute_result", "error"):
            if index in self.clear_before_next:
                self.clear_before_next.discard(index)
                self._clear(index)
            if display_id:
                self.displays.setdefault(display_id, []).append((index, len(outputs)))
            outputs.append(nbformat.v4.output_from_msg(msg))

    def _clear(self, index: int) -> None:
        del self.notebook.cells[index].outputs[:]
        for places in self.displays.values():
            places[:] = [(cell, position) for cell, position in places if cell != index]

    def write(self, executed: Path, root: Path) -> None:
        """Write the executed notebook under ``executed`` (at its path relative to ``root``) and
        the seconds it took beside it; refuse a notebook with a code cell that never ran."""
        unrun = [
            i
            for i, cell in enumerate(self.notebook.cells)
            if cell.cell_type == "code" and cell.execution_count is None
        ]
        if unrun:
            raise RuntimeError(f"{self.path}: cells {unrun} were not executed")
        from ipykernel.ipkernel import IPythonKernel  # the kernel nbval ran: this interpreter's

        self.notebook.metadata["language_info"] = dict(IPythonKernel.language_info)
        inside = self.path.is_relative_to(root)
        copy = executed / (self.path.relative_to(root) if inside else self.path.name)
        copy.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(self.notebook, copy)
        copy.with_suffix(".seconds").write_text(f"{time.perf_counter() - self.start:.1f}\n")


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--executed-into",
        type=Path,
        default=None,
        help="write each notebook nbval executes, with its outputs, under this folder",
    )


def _recorder(item) -> Recorder | None:
    """The recorder of ``item``'s notebook, or None where nothing is recorded."""
    from nbval.plugin import IPyNbCell

    if not isinstance(item, IPyNbCell) or item.config.getoption("executed_into") is None:
        return None
    notebook = item.parent
    if not hasattr(notebook, "recorder"):
        notebook.recorder = recorder = Recorder(Path(str(notebook.fspath)))
        read = notebook.get_kernel_message  # nbval reads every IOPub message through this

        def get_kernel_message(timeout=None, stream="iopub"):
            while True:
                msg = read(timeout=timeout, stream=stream)
                if stream != "iopub":
                    return msg
                recorder.take(msg)
                # nbval does not know these two (it would print "unhandled iopub msg")
                if msg["msg_type"] not in ("update_display_data", "clear_output"):
                    return msg

        notebook.get_kernel_message = get_kernel_message
    return notebook.recorder


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable within a notebook


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    _recorder(item)  # before the notebook's kernel starts: its seconds count the start


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item) -> None:
    recorder = _recorder(item)
    if recorder is None:
        return
    recorder.current = next(i for i, c in enumerate(item.parent.nb.cells) if c is item.cell)
    kernel = item.parent.kernel
    if not hasattr(kernel, "in_history"):
        # nbval sends each cell with store_history=False. IPython then numbers no cell and
        # decides whether a trailing ";" hides the cell's value by reading the *previous*
        # cell from its history: a figure returned by `plot(...);` is shown twice. Send the
        # cells as Jupyter and Colab send them.
        def execute_cell_input(cell_input, allow_stdin=None):
            return kernel.kc.execute(
                cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False
            )

        kernel.execute_cell_input, kernel.in_history = execute_cell_input, True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    recorder = _recorder(item)
    if recorder is not None and outcome.get_result().failed:
        recorder.failed = True


def pytest_runtest_teardown(item, nextitem) -> None:
    recorder = _recorder(item)
    if recorder is None or (nextitem is not None and nextitem.parent is item.parent):
        return
    if not recorder.failed:  # the last cell of the notebook: it passed, so it goes to the book
        recorder.write(item.config.getoption("executed_into"), item.config.rootpath)


# -- the command: nbval over the chapters, then the cache ----------------------------------


def chapter_paths() -> list[Path]:
    sys.path.insert(0, str(TOOLS))
    from colab_edition import chapters  # the notebooks of _toc.yml, in the book's order

    return [ROOT / f"{doc}.ipynb" for doc, _ in chapters()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    parser.add_argument("--executed", type=Path, default=ROOT / "_build" / "executed")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["execute"]
    paths = chapter_paths()
    workers = min(args.workers, len(paths))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TOOLS), os.environ.get("PYTHONPATH", "")])
    )
    if workers > 1:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # inherited by every kernel
    shutil.rmtree(args.executed, ignore_errors=True)
    start = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-p", "execute_book", "-q"]
    command += [f"--executed-into={args.executed.resolve()}"]
    command += [f"--nbval-cell-timeout={int(config.get('timeout', 300))}"]
    command += ["-n", str(workers), "--dist", "loadscope"] if workers > 1 else ["-p", "no:xdist"]
    done = subprocess.run([*command, *map(str, paths)], cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        print("nbval failed: the book is not built (see above)", file=sys.stderr)
        return 1

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(args.cache))
    for path in paths:
        copy = args.executed / path.relative_to(ROOT)
        seconds = float(copy.with_suffix(".seconds").read_text())
        record = cache.add_nb_to_project(str(path))
        cache.cache_notebook_bundle(
            CacheBundleIn(
                nbformat.read(copy, as_version=4),
                record.uri,
                data={"execution_seconds": seconds},
            ),
            check_validity=False,
            overwrite=True,
        )
        print(f"{path.relative_to(ROOT)}: executed in {seconds:.1f} s", flush=True)
    print(
        f"{len(paths)} notebooks under nbval on {workers} worker(s)"
        f" in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
