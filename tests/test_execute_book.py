"""The book's one execution: nbval runs each chapter, and tools/execute_book.py records what the
cells show. The recording must be what Jupyter's own executor (nbclient, through jupyter-cache,
which myst-nb would otherwise run) gives for the same notebook: streams, results, displays updated
in place from the same or a later cell, output cleared, a value hidden by a trailing ";",
execution counts. And a failing cell must fail the run and leave no executed notebook behind.
"""

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
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, path)
    return path


def under_nbval(path, executed, *, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "execute_book", "-p", "no:xdist", "-q",
            "--rootdir", str(path.parent), "-c", str(ROOT / "pyproject.toml"),
            f"--executed-into={executed}", str(path),
        ],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
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


def test_the_recording_is_what_jupyters_executor_gives(tmp_path):
    from jupyter_cache.executors.utils import single_nb_execution

    path = notebook(tmp_path / "cells.ipynb", CELLS)
    reference = nbformat.read(path, as_version=4)
    result = single_nb_execution(reference, cwd=str(tmp_path), timeout=60, allow_errors=False)
    assert result.err is None, result.exc_string

    done = under_nbval(path, tmp_path / "executed")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "unhandled iopub msg" not in done.stdout
    recorded = nbformat.read(tmp_path / "executed" / "cells.ipynb", as_version=4)
    assert [c.source for c in recorded.cells] == CELLS
    for ours, theirs in zip(recorded.cells, reference.cells):
        assert ours.execution_count == theirs.execution_count, ours.source
        assert shown(ours) == shown(theirs), ours.source
    # and what that is, spelled out: the bar shows its last update, the ";" hides 21
    assert shown(recorded.cells[1]) == [
        ("display_data", {"text/plain": "'updated from a later cell'"}, None)
    ]
    assert shown(recorded.cells[2]) == [("stream", "stdout", "shown after the clear\n")]
    assert shown(recorded.cells[5]) == []
    assert [c.execution_count for c in recorded.cells] == list(range(1, len(CELLS) + 1))
    assert recorded.metadata.language_info.name == "python"
    assert float((tmp_path / "executed" / "cells.seconds").read_text()) > 0


def test_a_failing_cell_fails_the_run_and_records_nothing(tmp_path):
    path = notebook(tmp_path / "fails.ipynb", ['print("fine")', "assert 1 + 1 == 3", "2"])
    done = under_nbval(path, tmp_path / "executed")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "AssertionError" in done.stdout
    assert not (tmp_path / "executed" / "fails.ipynb").exists()


def test_the_longest_first_are_chapters():
    execute_book = tool("execute_book")
    stems = [path.stem for path in execute_book.chapter_paths()]
    assert set(execute_book.LONGEST_FIRST) <= set(stems)
