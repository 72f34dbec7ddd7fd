"""What every benchmark shares: the machine it ran on, where results go and where the committed ones are.

Nothing here imports another benchmark module, so :mod:`attncourse.benchmarks.attention` and
:mod:`attncourse.benchmarks.kernels` both sit above it and neither imports the other.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Dict, Optional

import torch

__all__ = ["RESULTS", "machine", "meminfo_gib", "write_result", "read_result"]

#: The results the book quotes, committed and shipped with the package (package data), so a
#: chapter finds them in a Colab runtime that installed only the package, as in a clone. The
#: benchmark command never writes here: it writes to the working directory or ``--output``.
RESULTS = Path(__file__).resolve().parent.parent / "results"


def machine(device: str) -> Dict[str, object]:
    """What the numbers were measured on."""
    info: Dict[str, object] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "memory_gib": meminfo_gib("MemTotal"),
    }
    if hasattr(os, "getloadavg"):
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def meminfo_gib(field: str) -> Optional[float]:
    """A field of /proc/meminfo in GiB (``MemTotal``, ``MemAvailable``); ``None`` where there is none."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def write_result(result: Dict[str, object], folder, name: str):
    """Write ``result`` as JSON to ``folder / name`` (a ``str`` or ``pathlib.Path`` folder,
    created if missing); return the path."""
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def read_result(name: str, folder=None) -> Dict[str, object]:
    """The JSON result ``name`` from ``folder`` (a ``str`` or ``pathlib.Path``), by default
    from the committed :data:`RESULTS`."""
    return json.loads((Path(folder or RESULTS) / name).read_text())
