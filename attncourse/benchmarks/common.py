"""What every benchmark shares: the machine it ran on, where results go and where the committed ones are.

Nothing here imports another benchmark module, so :mod:`attncourse.benchmarks.attention` and
:mod:`attncourse.benchmarks.kernels` both sit above it and neither imports the other. The
private ``_require_*`` helpers check the benchmarks' arguments (the conventions of
``attncourse._checks``: a ``TypeError`` for a wrong type, a ``ValueError`` for a wrong value,
each naming the argument).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .._checks import _is_real, require_positive_int, require_str

__all__ = [
    "RESULTS",
    "MAX_LOAD_PER_CORE",
    "machine",
    "command_line",
    "meminfo_gib",
    "require_quiet",
    "write_result",
    "read_result",
]

#: The results the book quotes, committed and shipped with the package (package data), so a
#: chapter finds them in a Colab runtime that installed only the package, as in a clone. The
#: benchmark command never writes here: it writes to the working directory or ``--output``.
RESULTS = Path(__file__).resolve().parent.parent / "results"


def machine(device: str) -> Dict[str, object]:
    """What the numbers were measured on; ``device`` is ``"cpu"`` or a CUDA device (``"cuda"``,
    ``"cuda:0"``, a ``torch.device``), which adds the ``"gpu"`` entry."""
    parsed = _require_device("device", device)
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
    if parsed.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(parsed)
    return info


def command_line(module: str, argv: Optional[Sequence[str]] = None) -> str:
    """The command that reruns a measurement, recorded beside its numbers: ``python -m module``
    and its arguments (``argv``; default: this process's own), quoted as a shell needs them."""
    require_str("module", module)
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return shlex.join(["python", "-m", module, *args])


#: The 1-minute load average per core above which a timing is not committed (``require_quiet``):
#: on a busy machine the repeats of one step ranged from 2 to 27 ms (chapter 6, load 12 on 2 cores).
MAX_LOAD_PER_CORE = 0.5


def require_quiet(
    info: Dict[str, object], max_load_per_core: float = MAX_LOAD_PER_CORE, *, force: bool = False
) -> None:
    """Refuse timings taken on a busy machine: a ``ValueError`` naming the load and the threshold
    when a 1-minute load average of ``info`` (what :func:`machine` returns, with
    ``load_average_at_start`` and, after the run, ``load_average_at_end``) exceeds
    ``max_load_per_core`` times ``info["cpu_cores"]``. ``force`` accepts any load (the load is in
    the file all the same). A machine without a load average (Windows) passes."""
    if not isinstance(info, dict):
        raise TypeError(f"info must be a dict (what machine() returns), got {type(info).__name__}")
    if not _is_real(max_load_per_core) or isinstance(max_load_per_core, bool):
        raise TypeError(
            f"max_load_per_core must be a number, got {type(max_load_per_core).__name__}"
            f" {max_load_per_core!r}"
        )
    if not (math.isfinite(max_load_per_core) and max_load_per_core > 0):
        raise ValueError(
            f"max_load_per_core must be positive and finite, got {max_load_per_core!r}"
        )
    if force:
        return
    cores = info.get("cpu_cores") or os.cpu_count() or 1
    limit = max_load_per_core * cores  # type: ignore[operator]
    for when in ("load_average_at_start", "load_average_at_end"):
        load = info.get(when)
        if load and load[0] > limit:  # type: ignore[index]
            raise ValueError(
                f"the machine is busy: 1-minute load average {load[0]} at the {when.split('_')[-1]}"  # type: ignore[index]
                f" > {limit:g} ({max_load_per_core:g} per core x {cores} cores); timings"
                " taken under load are noise, not facts about the code: measure on a quiet"
                " machine, raise the threshold, or force it (the load is recorded either way)"
            )


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
    """A size field of /proc/meminfo in GiB (``MemTotal``, ``MemAvailable``); ``None`` where
    there is none. A field that is a count, not a size in kB (``HugePages_Total``), is a
    ``ValueError``."""
    if not isinstance(field, str):
        raise TypeError(
            f"field must be the name of a /proc/meminfo field (a str such as 'MemTotal'), got"
            f" {type(field).__name__} {field!r}"
        )
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    value, *unit = line.split()[1:]
                    if unit != ["kB"]:
                        raise ValueError(
                            f"field {field!r} of /proc/meminfo is not a size in kB:"
                            f" {line.strip()!r}"
                        )
                    return round(int(value) / 2**20, 1)
    except OSError:
        pass
    return None


def write_result(result: Dict[str, object], folder, name: str):
    """Write ``result`` as JSON to ``folder / name`` (a ``str`` or ``pathlib.Path`` folder,
    created if missing); return the path.

    ``name`` is a plain file name (no folder part). A value JSON cannot hold (NaN, an infinity,
    a tensor) is refused, naming where it is in ``result``, and nothing is written.
    """
    if not isinstance(result, dict):
        raise TypeError(f"result must be a dict, got {type(result).__name__}")
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(
            f"folder must be a str or pathlib.Path folder, got {type(folder).__name__} {folder!r}"
        )
    path = Path(folder) / _plain_name("name", name)
    _require_folder(Path(folder))
    if path.is_dir():
        raise ValueError(f"name {name!r} is a folder in {folder}: {path}; pass a file name")
    text = _to_json(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def read_result(name: str, folder=None) -> Dict[str, object]:
    """The JSON result ``name`` (a plain file name) from ``folder`` (a ``str`` or
    ``pathlib.Path``; ``None``: the committed :data:`RESULTS`). A missing file is a
    ``ValueError``."""
    return _read_json(_results_folder(folder), _plain_name("name", name))


# -- argument checks shared by the benchmarks ------------------------------------------------


def _require_choice(name: str, value: object, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be one of {tuple(choices)}, got {type(value).__name__} {value!r}"
        )
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def _require_fraction(name: str, value: object) -> float:
    """A number in ``(0, 1]`` (a fraction of the memory available)."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number in (0, 1], got {type(value).__name__} {value!r}")
    if not 0 < value <= 1:  # type: ignore[operator]
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _require_sequence(name: str, values: object, *, empty_ok: bool = False) -> list:
    """A list, tuple, range or 1-D numpy array (not a str, a dict or an iterator), as a list."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        values = list(values)
    if not isinstance(values, (list, tuple, range)):
        raise TypeError(f"{name} must be a list or tuple, got {type(values).__name__} {values!r}")
    if not values and not empty_ok:
        raise ValueError(f"{name} must not be empty")
    return list(values)


def _require_positive_ints(
    name: str, values: object, *, empty_ok: bool = False, distinct: bool = False
) -> List[int]:
    """A sequence of positive integers, as Python ints (``distinct``: each at most once)."""
    values = _require_sequence(name, values, empty_ok=empty_ok)
    for i, v in enumerate(values):
        require_positive_int(f"{name}[{i}]", v)
    values = [int(v) for v in values]
    return _distinct(name, values) if distinct else values


def _require_positive_numbers(name: str, values: object, *, distinct: bool = False) -> list:
    """A non-empty sequence of positive finite numbers (``distinct``: each at most once)."""
    values = _require_sequence(name, values)
    for i, v in enumerate(values):
        if not _is_real(v):
            raise TypeError(f"{name}[{i}] must be a positive number, got {type(v).__name__} {v!r}")
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name}[{i}] must be a positive finite number, got {v!r}")
    return _distinct(name, values) if distinct else values


def _distinct(name: str, values: list) -> list:
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{name} must not repeat a value, got {repeated} more than once")
    return values


def _require_device(name: str, device: object, *, plain: bool = False) -> torch.device:
    """``"cpu"`` or a CUDA device that is there (``plain``: exactly ``"cpu"`` or ``"cuda"``)."""
    wanted = "the str 'cpu' or 'cuda'" if plain else "'cpu' or 'cuda' (a str or torch.device)"
    if not isinstance(device, (torch.device, str) if not plain else str):
        raise TypeError(f"{name} must be {wanted}, got {type(device).__name__} {device!r}")
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        parsed = None
    if (
        parsed is None
        or parsed.type not in ("cpu", "cuda")
        or (plain and device not in ("cpu", "cuda"))
    ):
        raise ValueError(f"{name} must be {wanted}, got {device!r}")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}={device!r} needs CUDA, which is not available here: use 'cpu'")
    return parsed


def _rows(name: str, rows: object, keys: Sequence[str], numbers: Sequence[str] = ()) -> list:
    """A list of row dicts, each holding ``keys`` and the non-negative numbers ``numbers``."""
    if isinstance(rows, dict) and "rows" in rows:
        raise TypeError(
            f"{name} must be a list of row dicts, got the whole result: pass its ['rows']"
        )
    rows = _require_sequence(name, rows, empty_ok=True)
    for i, row in enumerate(rows):
        _row(f"{name}[{i}]", row, keys, numbers)
    return rows


def _row(name: str, row: object, keys: Sequence[str], numbers: Sequence[str] = ()) -> None:
    """``row`` is a dict holding ``keys`` and the non-negative numbers ``numbers``."""
    if not isinstance(row, dict):
        raise TypeError(f"{name} must be a dict (a row), got {type(row).__name__} {row!r}")
    missing = [k for k in (*keys, *numbers) if k not in row]
    if missing:
        raise ValueError(f"{name} has no {missing[0]!r} (its keys: {sorted(row)})")
    for k in numbers:
        if not _is_real(row[k]):
            raise TypeError(
                f"{name}[{k!r}] must be a number, got {type(row[k]).__name__} {row[k]!r}"
            )
        if not row[k] >= 0:
            raise ValueError(f"{name}[{k!r}] must be non-negative, got {row[k]!r}")


def _ratio(a: float, b: float) -> float:
    """``a / b``, NaN where ``b`` is 0 (a time below the clock's resolution)."""
    return a / b if b else float("nan")


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """``torch.manual_seed(seed)`` inside, the caller's global random state restored after."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


# -- result files ----------------------------------------------------------------------------


def _plain_name(name: str, value: object) -> str:
    """A file name without a folder part (the folder is an argument of its own)."""
    require_str(name, value)
    separators = [s for s in ("/", os.sep, os.altsep) if s]
    if value in ("", ".", "..") or any(s in value for s in separators):  # type: ignore[operator]
        raise ValueError(
            f"{name} must be a plain file name (no folder part), got {value!r}; pass the folder"
            " as folder="
        )
    return value  # type: ignore[return-value]


def _results_folder(folder: object) -> Path:
    """``folder`` as a Path; ``None``: the committed :data:`RESULTS`."""
    if folder is None:
        return RESULTS
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(
            f"folder must be a str or pathlib.Path folder (None: the committed results), got"
            f" {type(folder).__name__} {folder!r}"
        )
    return Path(folder)


def _require_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} is a file, not a folder")


def _read_json(folder: Path, name: str, missing: str = "") -> Dict[str, object]:
    """The JSON file ``folder / name``; a ``ValueError`` naming the path when it is not there."""
    _require_folder(folder)
    path = folder / name
    if path.is_dir():
        raise ValueError(f"name {name!r} is a folder in {folder}: {path}")
    if not path.is_file():
        raise ValueError(f"{missing}{path.absolute()} is missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None


def _to_json(result: Dict[str, object]) -> str:
    try:
        return json.dumps(result, indent=1, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        where, value = _unwritable(result, "result", set()) or ("result", result)
        if isinstance(value, float):
            raise ValueError(
                f"result cannot be written as JSON: {where} is {value!r} (JSON has no NaN or"
                " infinity; store None or leave the entry out)"
            ) from None
        raise TypeError(
            f"result cannot be written as JSON: {where} is a {type(value).__name__} ({e})"
        ) from None


def _unwritable(value: object, where: str, open_: set) -> Optional[Tuple[str, object]]:
    """``(where, value)`` of the first thing in ``value`` that JSON cannot hold, or ``None``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, value)
    if value is None or isinstance(value, (str, int)):
        return None
    if not isinstance(value, (dict, list, tuple)) or id(value) in open_:
        return where, value
    open_.add(id(value))
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for k, v in items:
        if not isinstance(k, (str, int, float)) and k is not None:
            return f"{where} key {k!r}", k
        found = _unwritable(v, f"{where}[{k!r}]", open_)
        if found:
            return found
    open_.discard(id(value))
    return None
