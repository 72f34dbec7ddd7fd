"""tools/loaded_run.py (make book-loaded): times each notebook under load, fails past the
budget or on an error, and always stops its busy processes."""

from __future__ import annotations

import importlib.util
import json
import sys

import nbformat
from project_tools import ROOT

spec = importlib.util.spec_from_file_location("loaded_run", ROOT / "tools" / "loaded_run.py")
loaded_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loaded_run)


def notebook(path, source):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_a_failing_notebook_fails_the_run_and_the_busy_processes_stop(tmp_path, monkeypatch):
    started = []
    real_start = loaded_run.start_busy
    monkeypatch.setattr(
        loaded_run, "start_busy", lambda n: started.extend(real_start(n)) or started
    )
    good = notebook(tmp_path / "01_good.ipynb", "x = 1 + 1\nassert x == 2")
    bad = notebook(tmp_path / "02_bad.ipynb", "assert 1 == 2, 'wrong'")
    report = tmp_path / "report.json"
    code = loaded_run.main(
        [str(good), str(bad), "--busy", "2", "--budget", "150", "--report", str(report)]
    )
    assert code == 1
    assert len(started) == 2 and all(p.poll() is not None for p in started), (
        "busy processes left running"
    )
    rows = json.loads(report.read_text())["rows"]
    assert [r["notebook"] for r in rows] == ["01_good.ipynb", "02_bad.ipynb"]
    assert rows[0]["error"] is None and "wrong" in rows[1]["error"]


def test_a_notebook_over_budget_fails_the_run(tmp_path):
    slow = notebook(tmp_path / "01_slow.ipynb", "import time\ntime.sleep(1.5)")
    report = tmp_path / "report.json"
    assert (
        loaded_run.main([str(slow), "--busy", "0", "--budget", "1", "--report", str(report)]) == 1
    )
    assert json.loads(report.read_text())["rows"][0]["seconds"] > 1
    assert (
        loaded_run.main([str(slow), "--busy", "0", "--budget", "100", "--report", str(report)]) == 0
    )


def test_busy_processes_stop_even_when_stuck(monkeypatch):
    processes = loaded_run.start_busy(1)
    loaded_run.stop_busy(processes)
    assert processes[0].poll() is not None
    assert sys.executable in processes[0].args
