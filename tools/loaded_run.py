"""Execute every chapter while busy processes hold the cores; time each (``make book-loaded``).

A reader's machine is rarely idle, and Colab's CPU runtime shares 2 vCPUs. This runs each notebook
of ``book/`` on its own (a fresh kernel, a temporary working folder), one after the other, while
``--busy`` processes spin on the cores, and fails when one of them raises or takes longer than
``--budget`` seconds. The busy processes are started before the first notebook and always
stopped, also when a notebook fails or the run is interrupted.

    python tools/loaded_run.py --budget 150 --busy 2        # what `make book-loaded` runs
    python tools/loaded_run.py --busy 0 book/09_*.ipynb      # quiet times, one chapter

It prints a table (seconds per notebook, the load average before and after each) and writes it
to ``_build/loaded_run.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "_build" / "loaded_run.json"
# One busy process: a Python loop that never sleeps, holding one core.
SPIN = "while True:\n    pass\n"


def load_average() -> float:
    """The 1-minute load average (NaN where the system has none, e.g. Windows)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def start_busy(count: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]


def stop_busy(processes: list[subprocess.Popen]) -> None:
    """Stop each busy process: terminate, then kill what is still alive after a few seconds."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_notebook(path: Path, cell_timeout: int) -> tuple[float, str | None]:
    """Execute one notebook in a fresh ``python3`` kernel; returns (seconds, error or None)."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    error = None
    with tempfile.TemporaryDirectory(prefix="attncourse-loaded-") as folder:
        client = NotebookClient(
            notebook,
            timeout=cell_timeout,
            kernel_name="python3",
            resources={"metadata": {"path": folder}},
        )
        try:
            client.execute()
        # a failing cell or a timeout: report it, go on with the next notebook
        except Exception as exc:
            last = str(exc).strip().splitlines()[-1:] or [""]
            error = f"{type(exc).__name__}: {last[0]}"
    return time.perf_counter() - start, error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every book/NN_*.ipynb")
    parser.add_argument(
        "--budget", type=float, default=150.0, help="seconds a notebook may take (default 150)"
    )
    parser.add_argument(
        "--busy", type=int, default=2, help="busy processes during the run (default 2)"
    )
    parser.add_argument(
        "--cell-timeout", type=int, default=600, help="seconds before a cell is stopped"
    )
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    if args.busy < 0 or args.budget <= 0:
        parser.error("--busy must be >= 0 and --budget > 0")
    notebooks = args.notebooks or sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

    # SIGTERM (a cancelled CI job, `kill`) ends the run through the finally below, like Ctrl-C.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = []
    busy = start_busy(args.busy)
    try:
        print(
            f"{len(notebooks)} notebooks, {args.busy} busy processes, {os.cpu_count()} CPUs, "
            f"budget {args.budget:.0f} s each",
            flush=True,
        )
        for path in notebooks:
            load_before = load_average()
            seconds, error = run_notebook(path, args.cell_timeout)
            row = {
                "notebook": path.name,
                "seconds": round(seconds, 1),
                "error": error,
                "load_before": round(load_before, 2),
                "load_after": round(load_average(), 2),
            }
            rows.append(row)
            verdict = (
                "FAILED: " + error if error else ("over budget" if seconds > args.budget else "ok")
            )
            print(
                f"{path.name:32s} {seconds:7.1f} s  "
                f"load {row['load_before']:5.2f} -> {row['load_after']:5.2f}"
                f"  {verdict}",
                flush=True,
            )
    finally:
        stop_busy(busy)
        signal.signal(signal.SIGTERM, previous)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(
        json.dumps(
            {"busy": args.busy, "budget": args.budget, "cpus": os.cpu_count(), "rows": rows},
            indent=1,
        )
        + "\n"
    )
    bad = [r for r in rows if r["error"] or r["seconds"] > args.budget]
    print(
        f"slowest {max(r['seconds'] for r in rows):.1f} s; "
        + (
            f"{len(bad)} failed or over budget: {', '.join(r['notebook'] for r in bad)}"
            if bad
            else "all within budget"
        )
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
