"""The book's one execution (tools/execute_book.py): jupyter-cache's parallel executor runs each
chapter once into the cache the build reads. What the build needs of it: every notebook executed
once, in the cache with what its cells show (streams, results, displays updated in place from the
same or a later cell, output cleared, a value hidden by a trailing ";", execution counts), and
the executed notebook, Markdown included, beside it; and a failing cell must fail the run, print
its traceback and leave no executed notebook behind.
"""

import json
import os
import subprocess
import sys

import nbformat
from project_tools import ROOT, tool

CELLS = [
    'import sys\nprint("to stdout")\nprint("to stderr", file=sys.stderr)',
    "from IPython.display import clear_output, display\n"
    'bar = display("step 0", display_id=True)\n'
    "for step in range(1, 4):\n"
    '    bar.update(f"step {step}")',
    'display("soon cleared")\nclear_output(wait=True)\nprint("shown after the clear")',
    'print("cleared at once")\nclear_output()\n6 * 7',
    "1 + 1",
    "3 * 7;",  # hidden: the ";" of this cell, not of the one before, decides
    'bar.update("updated from a later cell")\nx = 5\nx',
]


def notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter")]
    nb.cells += [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, path)
    return path


def execute(tmp_path, *paths, timeout=60, env=None):
    """tools/execute_book.py's execution of ``paths`` (in a process of its own, as make runs
    it: the executor forks its pool) into ``tmp_path/cache`` and ``tmp_path/executed``."""
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        " import execute_book; t = Path(sys.argv[2]);"
        " sys.exit(execute_book.execute([Path(p) for p in sys.argv[3:]], t / 'cache',"
        " t / 'executed', t, 60))"
    )
    return subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "tools"), str(tmp_path), *map(str, paths)],
        capture_output=True, text=True, timeout=timeout * len(paths), check=False, env=env,
    )  # fmt: skip


def shown(cell):
    """A cell's outputs, consecutive stream pieces joined (the kernel flushes when it likes)."""
    outputs = []
    for out in cell.outputs:
        if out.output_type == "stream" and outputs and outputs[-1][:2] == ("stream", out.name):
            outputs[-1] = ("stream", out.name, outputs[-1][2] + out.text)
        elif out.output_type == "stream":
            outputs.append(("stream", out.name, out.text))
        else:
            outputs.append((out.output_type, dict(out.get("data", {})), out.get("execution_count")))
    return outputs


def test_each_notebook_runs_once_into_the_cache_the_build_reads(tmp_path):
    from jupyter_cache import get_cache

    first = notebook(tmp_path / "cells.ipynb", CELLS)
    second = notebook(tmp_path / "other.ipynb", ['print("other")'])
    done = execute(tmp_path, first, second)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cache = get_cache(str(tmp_path / "cache"))
    assert len(cache.list_cache_records()) == 2  # one execution each, both cached
    for path in (first, second):
        pk, merged = cache.merge_match_into_notebook(nbformat.read(path, as_version=4))
        assert cache.get_cache_record(pk).data["execution_seconds"] > 0
        executed = nbformat.read(tmp_path / "executed" / path.name, as_version=4)
        assert executed.cells == merged.cells  # what the build shows is what was written
    recorded = nbformat.read(tmp_path / "executed" / "cells.ipynb", as_version=4)
    assert recorded.cells[0].source == "# A chapter"
    code = recorded.cells[1:]
    assert [c.source for c in code] == CELLS
    assert shown(code[0]) == [
        ("stream", "stdout", "to stdout\n"),
        ("stream", "stderr", "to stderr\n"),
    ]
    # the bar shows its last update, the clear leaves only what followed it, the ";" hides 21
    assert shown(code[1]) == [("display_data", {"text/plain": "'updated from a later cell'"}, None)]
    assert shown(code[2]) == [("stream", "stdout", "shown after the clear\n")]
    assert shown(code[3]) == [("execute_result", {"text/plain": "42"}, 4)]
    assert shown(code[5]) == []
    assert [c.execution_count for c in code] == list(range(1, len(CELLS) + 1))
    assert recorded.metadata.language_info.name == "python"


def test_a_failing_cell_fails_the_run_and_records_nothing(tmp_path):
    fails = notebook(tmp_path / "fails.ipynb", ['print("fine")', "assert 1 + 1 == 3", "2"])
    passes = notebook(tmp_path / "passes.ipynb", ['print("fine")'])
    (tmp_path / "executed").mkdir()
    (tmp_path / "executed" / "stale.ipynb").write_text("{}")  # an earlier build's, now stale
    done = execute(tmp_path, fails, passes)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "AssertionError" in done.stderr and "fails.ipynb failed" in done.stderr
    assert "the book is not built" in done.stderr
    assert not (tmp_path / "executed").exists()


def test_a_kernel_that_does_not_start_is_retried_once_and_still_fails_the_run(tmp_path):
    """A notebook whose execution never started ("errored": in CI, two kernels drew the same
    port) is run again, one at a time; if it fails again the run fails. A kernel that does not
    exist stands in for the race here: it fails both times."""
    nowhere = notebook(tmp_path / "nowhere.ipynb", ['print("never")'])
    nb = nbformat.read(nowhere, as_version=4)
    nb.metadata["kernelspec"]["name"] = "no-such-kernel"
    nbformat.write(nb, nowhere)
    passes = notebook(tmp_path / "passes.ipynb", ['print("fine")'])
    done = execute(tmp_path, nowhere, passes)
    assert done.returncode == 1, done.stdout[-3000:]
    assert (
        "retrying, one at a time, 1 notebook(s)" in done.stderr and "nowhere.ipynb" in done.stderr
    )
    assert "nowhere.ipynb failed" in done.stderr and "the book is not built" in done.stderr
    assert not (tmp_path / "executed").exists()


def flaky_kernel_notebook(tmp_path):
    """A notebook whose kernel fails to start the first time and starts the next: a kernel that
    exits at once stands in for one that lost its port in the port race."""
    marker = tmp_path / "started-once"
    launcher = tmp_path / "flaky_kernel.py"
    launcher.write_text(
        "import os, sys\n"
        f"marker = {str(marker)!r}\n"
        "if not os.path.exists(marker):\n"
        "    open(marker, 'w').close()\n"
        "    sys.exit(1)  # the first start fails, as a kernel that lost its port\n"
        "from ipykernel import kernelapp\n"
        "kernelapp.launch_new_instance()\n"
    )
    spec = tmp_path / "jupyter" / "kernels" / "flaky"
    spec.mkdir(parents=True)
    argv = [sys.executable, str(launcher), "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "flaky", "language": "python"})
    )
    flaky = notebook(tmp_path / "flaky.ipynb", ['print("ran")'])
    nb = nbformat.read(flaky, as_version=4)
    nb.metadata["kernelspec"]["name"] = "flaky"
    nbformat.write(nb, flaky)
    return flaky, dict(os.environ, JUPYTER_PATH=str(tmp_path / "jupyter"))


def test_a_kernel_that_starts_on_the_retry_counts_as_run(tmp_path):
    """The port race's usual end: the kernel fails to start once and starts on the retry; the
    run succeeds and writes the notebook."""
    flaky, env = flaky_kernel_notebook(tmp_path)
    done = execute(tmp_path, flaky, env=env)  # about 5 s
    assert "retrying, one at a time, 1 notebook(s)" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "executed" / "flaky.ipynb").is_file()


def test_a_worker_whose_kernel_died_can_still_be_terminated(tmp_path):
    """nbclient leaves its do-nothing SIGTERM handler behind when a kernel dies on start, and the
    pool, which ends its idle workers with SIGTERM, then waits for that worker forever (the
    retry test hung 3 times in 8 on a loaded machine). The book's worker restores the default;
    jupyter-cache's own does not (when this fails, nbclient has fixed it)."""
    flaky, env = flaky_kernel_notebook(tmp_path)
    script = """
import signal, sys, types
sys.path.insert(0, sys.argv[1])
import nbformat, execute_book
worker = getattr(execute_book, sys.argv[3])
nb = types.SimpleNamespace(nb=nbformat.read(sys.argv[2], as_version=4), uri=sys.argv[2])
try:
    worker.execute(nb, types.SimpleNamespace(timeout=30, allow_errors=False))
except RuntimeError as error:
    print(error)
print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
"""
    for worker, killable in (("KillableWorker", True), ("ExecutionWorkerLocalMProc", False)):
        (tmp_path / "started-once").unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, "-c", script, str(ROOT / "tools"), str(flaky), worker],
            capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip
        assert "Kernel died before replying" in done.stdout, done.stderr[-3000:]
        assert done.stdout.split()[-1] == str(killable), (worker, done.stdout[-500:])


def test_the_longest_first_are_chapters_and_go_first():
    execute_book = tool("execute_book")
    paths = execute_book.chapter_paths()
    stems = [path.stem for path in paths]
    assert set(execute_book.LONGEST_FIRST) <= set(stems)
    ordered = [path.stem for path in execute_book.longest_first(paths)]
    assert ordered[: len(execute_book.LONGEST_FIRST)] == list(execute_book.LONGEST_FIRST)
    assert sorted(ordered) == sorted(stems)
