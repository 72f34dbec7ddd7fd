"""Chapter 10's benchmarks: the Triton kernels on a GPU, and adaptive span's wall time on the CPU.

Run through ``python -m attncourse.benchmarks``:

* ``--device cuda`` adds :func:`run_gpu`: the Triton FlashAttention kernel
  (:func:`attncourse.kernels.flash.flash_attention`) beside torch's SDPA restricted to its
  flash backend (the memory-efficient one before compute capability 8.0, a T4:
  :func:`attncourse.kernels.sdpa.sdpa_backend`), the package's tiled PyTorch attention and the naive one, forward and
  forward+backward, causal and not, float16 and bfloat16, ``B=4, H=16, d=64``, and the
  adaptive-span kernel with every span at 256 against every span at the maximum. It writes
  ``results/gpu_benchmark_<gpu>.json`` with the GPU's name and the ratios against the targets.
* ``--span-time`` runs :func:`run_span_time`: the adaptive-span layer of chapter 8 on the CPU,
  wall time against the span at ``L = 4096``, all spans timed interleaved in one run, written
  to ``results/span_time_cpu.json``.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

import torch

from .._checks import (
    check_positive_ints,
    check_seed,
    require_bool,
    require_floating_dtype,
    require_positive_int,
    require_positive_number,
)
from ..adaptive_span import AdaptiveSpanAttention, computed_cells
from ..attention import scaled_dot_product_attention
from ..efficient import tiled_attention
from ..kernels.sdpa import sdpa_backend_for, torch_attention
from ..masks import causal_mask
from .common import (
    _distinct,
    _ratio,
    _require_choice,
    _require_device,
    _require_fraction,
    _require_positive_ints,
    _require_positive_numbers,
    _require_sequence,
    _rows,
    _seeded,
    machine,
    read_result,
)
from .measure import attention_flops, autograd_pass, time_interleaved

__all__ = [
    "time_triton_against_torch",
    "GPU_IMPLEMENTATIONS",
    "TARGETS",
    "build_gpu",
    "run_gpu",
    "gpu_file_name",
    "targets",
    "run_span_time",
    "span_table",
    "load_span_time",
]

GPU_IMPLEMENTATIONS = ("triton", "torch-flash", "tiled", "naive")
# The course's targets on an H100 or H200 at L=4096, float16, as time ratios: the forward at
# least 0.9 times the throughput of torch's flash backend (a time at most 1 / 0.9 of its),
# forward+backward at least 0.7 times, and adaptive span with every span at 256 at least 4.5
# times faster than at the full span, 80 % of the tile ratio 2,080 / 369. make gpu-check
# (tools/gpu_check.py) evaluates the same targets, per head size and causal or not.
TARGETS = {
    "forward x torch-flash": round(1 / 0.9, 3),
    "forward+backward x torch-flash": round(1 / 0.7, 3),
    "span 4096 / span 256": 4.5,
}


def build_gpu(
    impl: str,
    length: int,
    causal: bool,
    dtype: torch.dtype,
    backward: bool,
    *,
    batch: int = 4,
    num_heads: int = 16,
    head_dim: int = 64,
    device: str = "cuda",
    span: Optional[float] = None,
    ramp: float = 32.0,
    seed: int = 0,
):
    """A zero-argument function running ``impl`` on ``(batch, num_heads, length, head_dim)`` inputs.

    ``backward`` adds the backward pass of ``out.sum()`` (forward+backward). ``impl`` is one of
    ``GPU_IMPLEMENTATIONS``, or ``"span"``: the adaptive-span kernel with every head's span
    at ``span`` (causal by construction). ``dtype`` is a floating ``torch.dtype``; ``device``
    ``"cpu"`` runs the Triton kernels through Triton's interpreter, which must be switched on
    before triton is first imported (``TRITON_INTERPRET=1`` in the environment); without it a
    CPU tensor is refused with a ``ValueError`` that says so.
    """
    _require_choice("impl", impl, GPU_IMPLEMENTATIONS + ("span",))
    length, batch, num_heads, head_dim = check_positive_ints(
        length=length, batch=batch, num_heads=num_heads, head_dim=head_dim
    )
    require_bool("causal", causal)
    require_bool("backward", backward)
    require_floating_dtype("dtype", dtype)
    _require_device("device", device)
    if impl == "span":
        if span is None:
            raise ValueError("impl='span' needs span")
        require_positive_number("span", span)
        require_positive_number("ramp", ramp)
    from ..kernels.flash import adaptive_span_flash_attention, flash_attention

    g = torch.Generator().manual_seed(check_seed("seed", seed))
    q, k, v = (
        torch.randn(batch, num_heads, length, head_dim, generator=g)
        .to(device=device, dtype=dtype)
        .requires_grad_(backward)
        for _ in range(3)
    )
    if impl == "triton":
        forward = lambda: flash_attention(q, k, v, causal=causal)
    elif impl == "torch-flash":
        # torch's SDPA on the fastest backend the GPU has (kernels.sdpa.sdpa_backend: flash from
        # compute capability 8.0, the memory-efficient one on a T4; torch's own choice on the
        # CPU). L == S: top-left is_causal equals causal_mask.
        forward = lambda: torch_attention(q, k, v, is_causal=causal)
    elif impl == "tiled":
        forward = lambda: tiled_attention(q, k, v, causal=causal)
    elif impl == "naive":
        mask = causal_mask(length, device=torch.device(device)) if causal else None
        forward = lambda: scaled_dot_product_attention(q, k, v, mask)[0]
    else:  # "span"
        spans = torch.full((num_heads,), float(span), device=device)  # type: ignore[arg-type]
        forward = lambda: adaptive_span_flash_attention(q, k, v, spans, ramp)
    return autograd_pass(forward, backward, (q, k, v))


def _naive_bytes(
    batch: int, num_heads: int, length: int, dtype: torch.dtype, backward: bool
) -> int:
    """About the naive version's peak: scores and weights in the input dtype (and float32
    softmax), twice with the backward."""
    return batch * num_heads * length * length * (dtype.itemsize * 2 + 4) * (2 if backward else 1)


def run_gpu(
    lengths: Sequence[int] = (512, 1024, 2048, 4096, 8192, 16384, 32768),
    *,
    device: str = "cuda",
    dtypes: Sequence[str] = ("float16", "bfloat16"),
    batch: int = 4,
    num_heads: int = 16,
    head_dim: int = 64,
    span_length: int = 4096,
    spans: Sequence[float] = (256.0, 4096.0),
    max_tiled_length: int = 8192,
    memory_fraction: float = 0.5,
    repeats: int = 5,
) -> Dict[str, object]:
    """Time every implementation side by side (interleaved) at each setting; return rows, machine and targets.

    Every argument is checked before anything is measured. ``dtypes``: names of floating torch
    dtypes (or the dtypes). ``TARGETS`` are float16 ratios: a run without float16 leaves them
    unmeasured and says so under ``"targets_note"``.
    """
    lengths = _require_positive_ints("lengths", lengths)
    dtypes = _dtype_names(dtypes)
    batch, num_heads, head_dim, span_length, max_tiled_length = check_positive_ints(
        batch=batch,
        num_heads=num_heads,
        head_dim=head_dim,
        span_length=span_length,
        max_tiled_length=max_tiled_length,
    )
    spans = _require_positive_numbers("spans", spans, distinct=True)
    memory_fraction = _require_fraction("memory_fraction", memory_fraction)
    require_positive_int("repeats", repeats)
    _require_device("device", device)
    rows: List[Dict[str, object]] = []
    free = torch.cuda.mem_get_info()[0] if torch.device(device).type == "cuda" else None
    shape = dict(batch=batch, num_heads=num_heads, head_dim=head_dim, device=device)
    on_cuda = torch.device(device).type == "cuda"
    skipped_dtypes = {}
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        if on_cuda and dtype == torch.bfloat16 and torch.cuda.get_device_capability() < (8, 0):
            skipped_dtypes[dtype_name] = "no bfloat16 tensor cores before compute capability 8.0"
            continue
        for length in lengths:
            for causal in (False, True):
                for backward in (False, True):
                    built, skipped = {}, {}
                    for impl in GPU_IMPLEMENTATIONS:
                        if (
                            impl == "naive"
                            and free is not None
                            and _naive_bytes(batch, num_heads, length, dtype, backward)
                            > memory_fraction * free
                        ):
                            skipped[impl] = (
                                f"the (L, L) scores would need more than {memory_fraction:.0%} of"
                                " the free GPU memory"
                            )
                        elif impl in ("tiled", "naive") and length > max_tiled_length:
                            skipped[impl] = (
                                f"L > {max_tiled_length} (a Python loop over blocks; too slow to"
                                " time)"
                            )
                        else:
                            built[impl] = build_gpu(impl, length, causal, dtype, backward, **shape)
                    timings = time_interleaved(
                        built, repeats=repeats, warmup=2, device=torch.device(device)
                    )
                    flops = attention_flops(
                        batch, num_heads, length, length, head_dim, causal=causal
                    ) * (3.5 if backward else 1)
                    for impl in GPU_IMPLEMENTATIONS:
                        row = {
                            "kind": "attention",
                            "impl": impl,
                            "dtype": dtype_name,
                            "length": length,
                            "causal": causal,
                            "pass": "forward+backward" if backward else "forward",
                            "flops": int(flops),
                        }
                        row.update(
                            {"skipped": skipped[impl]}
                            if impl in skipped
                            else {"seconds": timings[impl].median, "times": timings[impl].times}
                        )
                        rows.append(row)
        for backward in (False, True):
            built = {
                f"span {s:g}": build_gpu(
                    "span", span_length, True, dtype, backward, span=s, **shape
                )
                for s in spans
            }
            timings = time_interleaved(
                built, repeats=repeats, warmup=2, device=torch.device(device)
            )
            for s in spans:
                rows.append(
                    {
                        "kind": "span",
                        "impl": "span",
                        "span": s,
                        "dtype": dtype_name,
                        "length": span_length,
                        "causal": True,
                        "pass": "forward+backward" if backward else "forward",
                        "seconds": timings[f"span {s:g}"].median,
                        "times": timings[f"span {s:g}"].times,
                    }
                )
    result: Dict[str, object] = {
        "machine": machine("cuda" if torch.device(device).type == "cuda" else "cpu"),
        "device": device,
        "triton_interpreter": device == "cpu",
        "compute_capability": list(torch.cuda.get_device_capability()) if on_cuda else None,
        "torch_sdpa_backend": {
            name: sdpa_backend_for(device, getattr(torch, name), head_dim) for name in dtypes
        },
        "skipped_dtypes": skipped_dtypes,
        "shape": {"batch": batch, "num_heads": num_heads, "head_dim": head_dim},
        "rows": rows,
    }
    length = 4096 if 4096 in lengths else max(lengths)
    if "float16" in dtypes:
        result["targets"] = targets(rows, length=length, span_length=span_length, spans=spans)
    else:
        result["targets"] = {
            n: {"measured": None, "target": t, "met": None} for n, t in TARGETS.items()
        }
        result["targets_note"] = f"the targets are float16 ratios; this run measured {list(dtypes)}"
    return result


def _dtype_names(dtypes: object) -> List[str]:
    """``dtypes`` as the names of floating torch dtypes (``"float16"``), each at most once."""
    if isinstance(dtypes, str):
        raise TypeError(
            f"dtypes must be a list of dtype names, got the str {dtypes!r}: pass [{dtypes!r}]"
        )
    names = []
    for i, d in enumerate(_require_sequence("dtypes", dtypes)):
        dtype = getattr(torch, d, None) if isinstance(d, str) else d
        if not isinstance(d, (str, torch.dtype)):
            raise TypeError(
                f"dtypes[{i}] must be a dtype name such as 'float16', got {type(d).__name__} {d!r}"
            )
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(
                f"dtypes[{i}] must name a floating torch dtype such as 'float16', got {d!r}"
            )
        names.append(str(dtype).removeprefix("torch."))
    return _distinct("dtypes", names)


def targets(
    rows: List[Dict[str, object]],
    *,
    length: int = 4096,
    dtype: str = "float16",
    span_length: int = 4096,
    spans: Sequence[float] = (256.0, 4096.0),
) -> Dict[str, Dict[str, Optional[float]]]:
    """The measured ratios behind ``TARGETS`` (non-causal, ``dtype``), each with its target and whether it is met.

    ``rows`` are :func:`run_gpu`'s: each a dict with ``"seconds"`` and the keys that place it,
    ``"kind"`` (``"attention"`` or ``"span"``), ``"impl"`` (``"triton"``, ``"torch-flash"``,
    ...), ``"pass"`` (``"forward"`` or ``"forward+backward"``), ``"dtype"`` (a name such as
    ``"float16"``), ``"length"``, ``"causal"``, and for span rows ``"span"``. A ratio is
    ``None`` where a time is not in ``rows`` or the time to divide by is 0; ``rows`` without any
    row of ``dtype`` is a ``ValueError``.
    """
    rows = _rows("rows", rows, ())
    spans = _require_positive_numbers("spans", spans)
    check_positive_ints(length=length, span_length=span_length)
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a dtype name such as 'float16', got {type(dtype).__name__}")
    if not any(r.get("dtype") == dtype for r in rows):
        seen = sorted({str(r.get("dtype")) for r in rows})
        raise ValueError(f"rows hold no row of dtype {dtype!r} (their dtypes: {seen})")

    def seconds(**want):
        for r in rows:
            if all(r.get(k) == v for k, v in want.items()) and "seconds" in r:
                return r["seconds"]
        return None

    out: Dict[str, Dict[str, Optional[float]]] = {}
    for name, which in (
        ("forward x torch-flash", "forward"),
        ("forward+backward x torch-flash", "forward+backward"),
    ):
        setting = {"kind": "attention", "pass": which, "length": length, "causal": False}
        ours = seconds(impl="triton", dtype=dtype, **setting)
        ref = seconds(impl="torch-flash", dtype=dtype, **setting)
        ratio = ours / ref if ours is not None and ref else None
        out[name] = {
            "measured": ratio,
            "target": TARGETS[name],
            "met": None if ratio is None else ratio <= TARGETS[name],
        }
    short = seconds(
        kind="span", span=min(spans), dtype=dtype, length=span_length, **{"pass": "forward"}
    )
    long = seconds(
        kind="span", span=max(spans), dtype=dtype, length=span_length, **{"pass": "forward"}
    )
    ratio = long / short if long is not None and short else None
    name = "span 4096 / span 256"
    out[name] = {
        "measured": ratio,
        "target": TARGETS[name],
        "met": None if ratio is None else ratio >= TARGETS[name],
    }
    return out


def gpu_file_name(gpu: str) -> str:
    """``gpu_benchmark_<gpu>.json`` with the GPU's name made safe for a file name (``NVIDIA
    H100 80GB HBM3`` -> ``nvidia_h100_80gb_hbm3``)."""
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be the GPU's name (a str), got {type(gpu).__name__} {gpu!r}")
    slug = re.sub(r"[^a-z0-9]+", "_", gpu.lower()).strip("_") or "unknown"
    return f"gpu_benchmark_{slug}.json"


def gpu_table(rows: List[Dict[str, object]]) -> str:
    """The GPU rows as text, each time relative to torch's flash SDPA at the same setting."""
    ref = {
        (r["dtype"], r["length"], r["causal"], r["pass"]): r.get("seconds")
        for r in rows
        if r["impl"] == "torch-flash"
    }
    lines = [
        f"{'impl':<12} {'dtype':<9} {'L':>6} {'causal':>6} {'pass':<17} {'time ms':>10}"
        f" {'x flash':>8} {'TFLOP/s':>8}"
    ]
    for r in rows:
        head = (
            f"{r['impl'] if r['kind'] == 'attention' else 'span ' + format(r['span'], 'g'):<12}"
            f" {r['dtype']:<9} {r['length']:>6} {str(r['causal']):>6} {r['pass']:<17}"
        )
        if "seconds" not in r:
            lines.append(f"{head} skipped: {r['skipped']}")
            continue
        base = (
            ref.get((r["dtype"], r["length"], r["causal"], r["pass"]))
            if r["kind"] == "attention"
            else None
        )
        ratio = f"{r['seconds'] / base:8.2f}" if base else f"{'':>8}"
        tflops = f"{r['flops'] / r['seconds'] / 1e12:8.1f}" if "flops" in r else f"{'':>8}"
        lines.append(f"{head} {1e3 * r['seconds']:>10.3f} {ratio} {tflops}")
    return "\n".join(lines)


# -- adaptive span on the CPU ----------------------------------------------------------------


def run_span_time(
    length: int = 4096,
    spans: Sequence[int] = (64, 256, 1024, 4096),
    *,
    embed_dim: int = 128,
    num_heads: int = 4,
    ramp: float = 32.0,
    repeats: int = 5,
    seed: int = 0,
) -> Dict[str, object]:
    """Wall time of chapter 8's adaptive-span layer (forward, CPU) at each span, all timed interleaved in one run.

    Every head of the layer gets the same span ``z``; the layer computes the keys within
    ``z + R`` of each query (:func:`attncourse.adaptive_span.computed_cells`). ``spans`` are
    distinct positive integers; the layers and input are drawn from ``seed`` (the global random
    state is left as it was).
    """
    length, embed_dim, num_heads = check_positive_ints(
        length=length, embed_dim=embed_dim, num_heads=num_heads
    )
    spans = _require_positive_ints("spans", spans, distinct=True)
    require_positive_number("ramp", ramp)
    require_positive_int("repeats", repeats)
    layers = {}
    with _seeded(check_seed("seed", seed)):
        x = torch.randn(1, length, embed_dim)
        for span in spans:
            layers[span] = AdaptiveSpanAttention(
                embed_dim,
                num_heads,
                max_span=max(spans),
                ramp=ramp,
                init_span=float(span),
                learnable=False,
                position_bias=False,
            ).eval()

    def call(layer):
        def fn():
            with torch.no_grad():
                return layer(x)[0]

        return fn

    timings = time_interleaved({str(s): call(layers[s]) for s in spans}, repeats=repeats, warmup=1)
    rows = []
    for span in spans:
        window = layers[span].span.window(length)
        rows.append(
            {
                "span": span,
                "window": window,
                "cells": num_heads * computed_cells(length, window),
                "seconds": timings[str(span)].median,
                "times": timings[str(span)].times,
            }
        )
    return {
        "machine": machine("cpu"),
        "length": length,
        "embed_dim": embed_dim,
        "num_heads": num_heads,
        "ramp": ramp,
        "rows": rows,
    }


def span_table(result: Dict[str, object]) -> str:
    """The span timings as text, each relative to the longest span's (NaN where that is 0)."""
    if not isinstance(result, dict) or "rows" not in result:
        raise TypeError(
            f"result must be a dict with 'rows' (what run_span_time returns), got"
            f" {type(result).__name__}"
        )
    rows = _rows("result['rows']", result["rows"], ("span", "window", "cells"), ("seconds",))
    if not rows:
        raise ValueError("result['rows'] is empty: there are no span timings")
    longest = max(rows, key=lambda r: r["span"])["seconds"]
    lines = [f"{'span':>6} {'window':>7} {'cells':>12} {'time ms':>10} {'x longest':>10}"]
    for r in rows:  # type: ignore[union-attr]
        lines.append(
            f"{r['span']:>6} {r['window']:>7} {r['cells']:>12} {1e3 * r['seconds']:>10.1f}"
            f" {_ratio(r['seconds'], longest):>10.3f}"
        )
    return "\n".join(lines)


def load_span_time(folder: Optional[str] = None) -> Dict[str, object]:
    """The committed CPU timings of :func:`run_span_time` (package data), or those in ``folder``."""
    return read_result("span_time_cpu.json", folder)


def time_triton_against_torch(
    device,
    *,
    batch: int = 4,
    heads: int = 16,
    length: int = 4096,
    head_dim: int = 64,
    dtype: torch.dtype = torch.float16,
    causal: bool = False,
    repeats: int = 10,
    warmup: int = 3,
    seed: int = 0,
) -> Dict[str, Any]:
    """Chapter 10's GPU cell: the Triton forward kernel against PyTorch's SDPA, timed interleaved.

    Returns ``{"device", "backend", "triton_ms", "torch_ms", "ratio", "line"}`` (medians, and
    a printable line). The SDPA backend is :func:`attncourse.kernels.sdpa.sdpa_backend_for`'s (``"efficient"`` on a
    T4, ``"flash"`` on an A100 or H100). On a CPU the kernel runs through Triton's interpreter
    (``TRITON_INTERPRET=1`` set before triton is first imported; otherwise a ``ValueError``
    says so), and the times say nothing about a GPU; the line says so.
    """
    device = _require_device("device", device)
    batch, heads, length, head_dim = check_positive_ints(
        batch=batch, heads=heads, length=length, head_dim=head_dim
    )
    require_floating_dtype("dtype", dtype)
    require_bool("causal", causal)
    require_positive_int("repeats", repeats)
    g = torch.Generator().manual_seed(check_seed("seed", seed))
    from ..kernels.flash import flash_attention  # needs triton: imported only when called

    q, k, v = (
        torch.randn(batch, heads, length, head_dim, generator=g).to(device=device, dtype=dtype)
        for _ in range(3)
    )
    backend = sdpa_backend_for(device, dtype, head_dim)
    timings = time_interleaved(
        {
            "triton": lambda: flash_attention(q, k, v, causal=causal),
            "torch": lambda: torch_attention(q, k, v, is_causal=causal, backend=backend),
        },
        repeats=repeats,
        warmup=warmup,
        device=device,
    )
    triton_ms, torch_ms = 1e3 * timings["triton"].median, 1e3 * timings["torch"].median
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else "CPU (interpreter: not a GPU timing)"
    )
    line = (
        f"{name}, B={batch} H={heads} L={length} d_k={head_dim} {str(dtype).removeprefix('torch.')} "
        f"{'causal ' if causal else ''}forward: Triton {triton_ms:.2f} ms, "
        f"torch SDPA ({backend} backend) "
        f"{torch_ms:.2f} ms, ratio {triton_ms / torch_ms:.2f}"
    )
    return {
        "device": name,
        "backend": backend,
        "triton_ms": triton_ms,
        "torch_ms": torch_ms,
        "ratio": triton_ms / torch_ms,
        "line": line,
    }
