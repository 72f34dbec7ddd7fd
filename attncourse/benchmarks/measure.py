"""Measuring attention: wall time, peak memory and FLOP counts (chapter 7).

* Time: the median of several repeats after a warm-up call; implementations that are to be
  compared are timed *interleaved* (A, B, C, A, B, C, ...) so that a change in the machine's
  load during the run affects them alike.
* Peak memory on CUDA: the caching allocator's own statistics
  (:func:`torch.cuda.max_memory_allocated` after :func:`torch.cuda.reset_peak_memory_stats`).
* Peak memory on the CPU: PyTorch keeps no statistics there, so :func:`cpu_peak_memory`
  runs the call in a *fresh Python process* and reads the growth of the process's peak
  resident set size (``VmHWM`` in ``/proc/self/status``, Linux) over its size just before
  the call. It counts every page the call touched, whoever allocated it, at page granularity.
* FLOPs: from the formulas :func:`attention_flops` and :func:`multihead_flops`.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .._checks import (
    _is_int,
    _is_real,
    check_positive_ints,
    require_bool,
    require_floating_dtype,
    require_non_negative_int,
    require_positive_int,
    require_positive_number,
)
from .common import _require_device, _require_sequence

__all__ = [
    "Timing",
    "autograd_pass",
    "time_call",
    "time_interleaved",
    "cuda_peak_memory",
    "cpu_peak_memory",
    "attention_flops",
    "multihead_flops",
    "matmul_throughput",
    "fit_slope",
]


@dataclass(frozen=True)
class Timing:
    """Wall times of repeated calls, in seconds (at least one, none negative); ``median`` is the
    figure to report."""

    times: List[float]

    def __post_init__(self) -> None:
        for i, t in enumerate(_require_sequence("times", self.times)):
            if not _is_real(t):
                raise TypeError(
                    f"times[{i}] must be a number of seconds, got {type(t).__name__} {t!r}"
                )
            if not (math.isfinite(t) and t >= 0):
                raise ValueError(f"times[{i}] must be a finite, non-negative time, got {t!r}")

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def spread(self) -> float:
        """The spread of the repeats, ``(max - min) / median``, as a fraction of the median.

        A median of 0 (repeats below the clock's resolution) gives 0.0 when every repeat is 0
        and ``inf`` otherwise.
        """
        width, median = max(self.times) - min(self.times), self.median
        if median == 0:
            return 0.0 if width == 0 else float("inf")
        return width / median


def _require_callable(name: str, fn: object) -> None:
    """``fn`` can be called with no arguments."""
    if not callable(fn):
        raise TypeError(f"{name} must be a zero-argument callable, got {type(fn).__name__} {fn!r}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature: trust them
        return
    try:
        signature.bind()
    except TypeError:
        raise TypeError(
            f"{name} must be callable with no arguments, got {fn!r} with parameters {signature}"
            " (wrap it: lambda: f(x))"
        ) from None


def _sync(device: Optional[torch.device]) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def autograd_pass(
    forward: Callable[[], torch.Tensor],
    backward: bool,
    leaves: Sequence[torch.Tensor] = (),
    dout: Optional[torch.Tensor] = None,
) -> Callable[[], torch.Tensor]:
    """``forward`` as a zero-argument call to time: alone under ``torch.no_grad()``, or, with
    ``backward``, followed by its backward pass, of ``dout`` (the gradient of the output) or, when
    ``dout`` is None, of ``out.float().sum()``; the gradients of ``leaves`` (the inputs) are
    cleared after each call. The call returns the output."""
    _require_callable("forward", forward)
    require_bool("backward", backward)
    if not backward:

        def forward_only() -> torch.Tensor:
            with torch.no_grad():
                return forward()

        return forward_only

    def forward_and_backward() -> torch.Tensor:
        out = forward()
        if dout is None:
            out.float().sum().backward()
        else:
            out.backward(dout)
        for leaf in leaves:
            leaf.grad = None
        return out

    return forward_and_backward


def time_call(
    fn: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device: Optional[torch.device] = None,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    On CUDA pass ``device`` so that each timing waits for the GPU to finish (kernels are
    launched asynchronously: without a synchronisation the clock would stop too early).
    """
    _require_callable("fn", fn)
    return time_interleaved({"fn": fn}, repeats=repeats, warmup=warmup, device=device)["fn"]


def time_interleaved(
    fns: Dict[str, Callable[[], object]],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device: Optional[torch.device] = None,
) -> Dict[str, Timing]:
    """Time several functions round-robin: each repeat calls every function once, in turn.

    Returns ``{name: Timing}``. Interleaving makes ratios between the functions robust to
    load that changes during the measurement (other processes, CPU frequency).
    """
    if not isinstance(fns, dict):
        raise TypeError(
            f"fns must be a dict {{name: zero-argument callable}}, got {type(fns).__name__} {fns!r}"
        )
    if not fns:
        raise ValueError("fns must not be empty: there is nothing to time")
    for name, fn in fns.items():
        _require_callable(f"fns[{name!r}]", fn)
    require_positive_int("repeats", repeats)
    require_non_negative_int("warmup", warmup)
    device = None if device is None else _require_device("device", device)
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: Timing(t) for name, t in times.items()}


def cuda_peak_memory(fn: Callable[[], object], device: Optional[torch.device] = None) -> int:
    """Bytes allocated by ``fn()`` on a CUDA device at its peak, above what was allocated before.

    The result of ``fn`` is kept alive until the peak is read, so it is counted. ``device``:
    a CUDA device (default ``"cuda"``); on the CPU use :func:`cpu_peak_memory`.
    """
    _require_callable("fn", fn)
    device = _require_device("device", "cuda" if device is None else device)
    if device.type != "cuda":
        raise ValueError(
            f"device must be a CUDA device (this reads CUDA's allocator), got {str(device)!r}; on"
            " the CPU use cpu_peak_memory"
        )
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del result
    return peak


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


def _memory_now_and_peak() -> Tuple[int, int]:
    """(resident bytes now, peak resident bytes so far) of this process.

    Linux: ``VmRSS`` and ``VmHWM``. Windows: the working set and its peak
    (``GetProcessMemoryInfo``). macOS: ``ru_maxrss`` (bytes there) for both, as macOS reports no
    current size cheaply; measured right after a warm-up, the peak so far is close to it.
    """
    if sys.platform.startswith("linux"):
        return _status_kib("VmRSS") * 1024, _status_kib("VmHWM") * 1024
    if sys.platform == "win32":
        import ctypes
        from ctypes import wintypes

        class Counters(ctypes.Structure):
            size = ctypes.c_size_t
            _fields_ = [
                ("cb", wintypes.DWORD),
                ("PageFaultCount", wintypes.DWORD),
                ("PeakWorkingSetSize", size),
                ("WorkingSetSize", size),
                ("QuotaPeakPagedPoolUsage", size),
                ("QuotaPagedPoolUsage", size),
                ("QuotaPeakNonPagedPoolUsage", size),
                ("QuotaNonPagedPoolUsage", size),
                ("PagefileUsage", size),
                ("PeakPagefileUsage", size),
            ]

        counters = Counters()
        counters.cb = ctypes.sizeof(Counters)
        kernel32, psapi = ctypes.windll.kernel32, ctypes.windll.psapi
        kernel32.GetCurrentProcess.restype = wintypes.HANDLE  # a 64-bit pseudo-handle
        psapi.GetProcessMemoryInfo.argtypes = [wintypes.HANDLE, ctypes.c_void_p, wintypes.DWORD]
        process = kernel32.GetCurrentProcess()
        if not psapi.GetProcessMemoryInfo(process, ctypes.byref(counters), counters.cb):
            raise RuntimeError("GetProcessMemoryInfo failed")
        return counters.WorkingSetSize, counters.PeakWorkingSetSize
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS
    return peak, peak


def cpu_peak_memory(target: str, kwargs: Dict[str, object], *, timeout: float = 1800.0) -> int:
    """Peak extra resident memory, in bytes, of one call of ``target(**kwargs)["fn"]()`` on the CPU.

    ``target`` names a function ``"module:function"`` that builds its inputs and returns a
    dict with the zero-argument callable to measure under ``"fn"`` and optionally a
    ``"warmup"`` callable (the same computation on tiny inputs). A fresh Python process
    imports it, builds the inputs, runs the warm-up (thread pools, lazy buffers), records
    ``VmRSS``, calls ``fn()`` once and reads the peak ``VmHWM``; the difference is the
    result. On Linux from ``/proc/self/status``; on macOS and Windows from the system's peak
    counters (see ``_memory_now_and_peak``). The process runs torch on as many threads as the
    caller (``torch.get_num_threads()``): with several, the threads' scratch memory and when
    they free it vary with the machine's load (tiled attention at L = 2048 peaked at 28-29 MiB
    in every run on one thread; on two, under load, at up to 52 MiB).

    Limits: a page counts once it has been touched, so allocated but untouched memory does
    not count; memory that the C allocator kept from the set-up and reuses is missed (the
    large buffers of attention are mapped afresh and are counted); the result includes the
    output tensor and any one-time buffer the call creates (a few MiB).

    ``target`` and ``kwargs`` (JSON-serialisable) and ``timeout`` (seconds) are checked before
    the process starts; a module or function that the process cannot import is a
    ``RuntimeError`` with the process's traceback.
    """
    _require_target(target)
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError(
            f"kwargs must be a dict with str keys, got {type(kwargs).__name__} {kwargs!r}"
        )
    try:
        encoded = json.dumps(kwargs)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"kwargs must be JSON-serialisable (sent to a fresh process): {e}"
        ) from None
    require_positive_number("timeout", timeout)
    code = (
        "import json, sys\n"
        "import torch\n"
        "from attncourse.benchmarks.measure import _child_peak\n"
        "torch.set_num_threads(int(sys.argv[3]))\n"
        "print(json.dumps(_child_peak(sys.argv[1], json.loads(sys.argv[2]))))\n"
    )
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", code, target, encoded, str(torch.get_num_threads())],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the measuring process failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return int(json.loads(done.stdout.strip().splitlines()[-1]))


def _require_target(target: object) -> None:
    """``"module:function"``: a dotted module name and a function name."""
    if not isinstance(target, str):
        raise TypeError(
            f"target must be a str 'module:function', got {type(target).__name__} {target!r}"
        )
    module, _, name = target.partition(":")
    if not (name.isidentifier() and all(p.isidentifier() for p in module.split("."))):
        raise ValueError(
            "target must name a function as 'module:function' (e.g."
            f" 'attncourse.benchmarks.attention:build'), got {target!r}"
        )


def _child_peak(target: str, kwargs: Dict[str, object]) -> int:
    import importlib

    module, name = target.split(":")
    built = getattr(importlib.import_module(module), name)(**kwargs)
    if not isinstance(built, dict) or not callable(built.get("fn")):
        raise TypeError(
            f"{target} must return a dict with the callable to measure under 'fn', got"
            f" {type(built).__name__} {str(built)[:200]}"
        )
    fn = built["fn"]
    warmup = built.get("warmup")
    if warmup is not None:  # one-time initialisation (thread pools, kernels' lazy buffers)
        warmup()
    before, _ = _memory_now_and_peak()
    result = fn()
    _, peak = _memory_now_and_peak()
    del result
    return max(peak - before, 0)


def attention_flops(
    batch: int,
    num_heads: int,
    query_len: int,
    key_len: int,
    head_dim: int,
    value_dim: Optional[int] = None,
    *,
    causal: bool = False,
) -> int:
    """Floating-point operations of the two matrix products of attention (a multiply-add is 2).

    ``Q K^T`` costs ``2 L S d_k`` and ``P V`` costs ``2 L S d_v`` per head and batch entry;
    the softmax (about 5 operations per score) is not counted. With ``causal`` only the
    allowed (query, key) pairs count (``causal_mask``'s alignment): about half when ``L = S``.
    Sizes may be numpy integers; the count is an exact Python ``int``.
    """
    value_dim = head_dim if value_dim is None else value_dim
    batch, num_heads, L, S, head_dim, value_dim = check_positive_ints(
        batch=batch,
        num_heads=num_heads,
        query_len=query_len,
        key_len=key_len,
        head_dim=head_dim,
        value_dim=value_dim,
    )
    require_bool("causal", causal)
    # causal: query i sees the keys j <= i + S - L, so min(S, max(0, i + S - L + 1)) of them:
    # the counts c = S - L + 1, ..., S, each clipped at 0, summed as sum(1..S) - sum(1..m-1)
    m = max(1, S - L + 1)
    pairs = S * (S + 1) // 2 - (m - 1) * m // 2 if causal else L * S
    return 2 * batch * num_heads * pairs * (head_dim + value_dim)


def multihead_flops(
    batch: int,
    query_len: int,
    key_len: int,
    embed_dim: int,
    num_heads: int,
    *,
    causal: bool = False,
) -> int:
    """FLOPs of a multi-head attention layer's forward pass (``kdim = vdim = embed_dim``).

    Four projections (``W^Q`` on ``L`` rows, ``W^K`` and ``W^V`` on ``S`` rows, ``W^O`` on ``L``
    rows) cost ``2 E^2`` each per row; the ``h`` heads of width ``E / h`` together cost
    :func:`attention_flops` with ``head_dim = E / h``. Biases and the softmax are not counted.
    """
    batch, query_len, key_len, embed_dim, num_heads = check_positive_ints(
        batch=batch,
        query_len=query_len,
        key_len=key_len,
        embed_dim=embed_dim,
        num_heads=num_heads,
    )
    require_bool("causal", causal)
    if embed_dim % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide embed_dim={embed_dim}")
    projections = 2 * batch * embed_dim * embed_dim * (2 * query_len + 2 * key_len)
    return projections + attention_flops(
        batch, num_heads, query_len, key_len, embed_dim // num_heads, causal=causal
    )


def matmul_throughput(
    size: int = 1024,
    *,
    repeats: int = 5,
    dtype: torch.dtype = torch.float32,
    device: Optional[torch.device] = None,
) -> float:
    """Measured FLOP/s of one ``size x size`` by ``size x size`` matrix product: the machine's ceiling.

    ``dtype`` is a real floating dtype (a complex product does 4 times the work counted here).
    """
    (size,) = check_positive_ints(size=size)
    require_positive_int("repeats", repeats)
    require_floating_dtype("dtype", dtype)
    device = None if device is None else _require_device("device", device)
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    timing = time_call(lambda: a @ b, repeats=repeats, warmup=1, device=device)
    return 2 * size**3 / timing.median


def fit_slope(lengths: Sequence[float], values: Sequence[float]) -> float:
    """Slope of ``log(values)`` against ``log(lengths)`` by least squares: ``values ~ c * length**slope``.

    ``lengths`` and ``values``: lists or tuples (or 1-D numpy arrays or tensors) of positive
    finite numbers.
    """
    lengths, values = _positive_numbers("lengths", lengths), _positive_numbers("values", values)
    if len(lengths) != len(values) or len(lengths) < 2:
        raise ValueError(
            f"need at least two (length, value) pairs of equal count, got {len(lengths)} and"
            f" {len(values)}"
        )
    x = [math.log(v) for v in lengths]
    y = [math.log(v) for v in values]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    spread = sum((a - mx) ** 2 for a in x)
    if spread == 0:
        raise ValueError(
            f"lengths must not all be equal (no slope can be fitted), got {list(lengths)!r}"
        )
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / spread


def _positive_numbers(name: str, seq: object) -> list:
    """``seq`` as a list of positive finite numbers (the axis of a log-log fit)."""
    if isinstance(seq, torch.Tensor) and seq.dim() == 1:
        seq = seq.tolist()
    seq = _require_sequence(name, seq, empty_ok=True)
    for v in seq:
        if not _is_real(v):
            raise TypeError(
                f"{name} must hold numbers (a log-log fit), got {type(v).__name__} {v!r} in {seq!r}"
            )
        if not (v > 0 and (_is_int(v) or math.isfinite(v))):  # a huge int is finite: no float
            raise ValueError(
                f"{name} must be positive finite numbers (a log-log fit), got {v!r} in {seq!r}"
            )
    return seq
