"""Benchmark of attention implementations (chapter 7): ``python -m attncourse.benchmarks``.

Measures, in one run and side by side, the naive attention of the package
(:func:`attncourse.attention.scaled_dot_product_attention`, which builds the ``(L, S)``
scores), :func:`attncourse.efficient.tiled_attention` and torch's
:func:`torch.nn.functional.scaled_dot_product_attention`, causal and not, over sequence
lengths up to 16384 (and the package's ``MultiHeadAttention``
against :class:`torch.nn.MultiheadAttention`), on the CPU and on CUDA when present. It prints
a table of times (median of repeats, timed interleaved), peak extra memory and ratios to
torch, and writes the same to ``ch07_benchmark_<device>.json`` in the working directory
(or ``--output``).

``--cache`` times one decoding step of a small :class:`attncourse.transformer.CausalLM` instead (chapter
6): with a KV cache holding the context (one new query per layer) and without (the whole
context recomputed), side by side at each context length, and writes
``ch06_cache_benchmark_<device>.json`` with their ratio.

On CUDA it also times chapter 10's Triton kernels (``gpu_benchmark_<gpu>.json``,
see :mod:`attncourse.benchmarks.kernels`; ``--no-kernels`` leaves them out), and ``--span-time``
times chapter 8's adaptive-span layer against its span on the CPU (``span_time_cpu.json``).
"""

from __future__ import annotations

import copy
import os
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_positive_ints, check_seed, require_bool, require_positive_int
from ..attention import scaled_dot_product_attention
from ..efficient import tiled_attention
from ..masks import causal_mask
from ..multihead import MultiHeadAttention
from ..transformer import CausalLM
from .common import (
    _ratio,
    _read_json,
    _require_choice,
    _require_device,
    _require_fraction,
    _require_positive_ints,
    _results_folder,
    _row,
    _rows,
    _seeded,
    machine,
    meminfo_gib,
)
from .measure import (
    attention_flops,
    cpu_peak_memory,
    cuda_peak_memory,
    matmul_throughput,
    multihead_flops,
    time_interleaved,
)

__all__ = [
    "build",
    "build_layer",
    "build_decode",
    "run_cache",
    "cache_table",
    "run",
    "table",
    "load",
    "load_cache",
    "plot",
    "constants",
    "load_constants",
]

IMPLEMENTATIONS = ("naive", "tiled", "torch")


def build(
    impl: str,
    length: int,
    causal: bool,
    batch: int = 1,
    num_heads: int = 8,
    head_dim: int = 64,
    device: str = "cpu",
    seed: int = 0,
) -> Dict[str, object]:
    """Inputs ``(batch, num_heads, length, head_dim)`` float32 and a zero-argument ``fn`` running ``impl`` on them."""
    _require_choice("impl", impl, IMPLEMENTATIONS)
    length, batch, num_heads, head_dim = check_positive_ints(
        length=length, batch=batch, num_heads=num_heads, head_dim=head_dim
    )
    require_bool("causal", causal)
    _require_device("device", device, plain=True)
    g = torch.Generator().manual_seed(check_seed("seed", seed))
    q, k, v = (
        torch.randn(batch, num_heads, length, head_dim, generator=g).to(device) for _ in range(3)
    )
    if impl == "naive":
        mask = causal_mask(length, device=torch.device(device)) if causal else None
        fn = lambda: scaled_dot_product_attention(q, k, v, mask)[0]
    elif impl == "tiled":
        fn = lambda: tiled_attention(q, k, v, causal=causal)
    else:  # "torch": L == S, so torch's top-left causal alignment equals causal_mask's
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    small = (
        (lambda: build(impl, 64, causal, batch, num_heads, head_dim, device, seed)["fn"]())
        if length > 64
        else None
    )
    return {"fn": lambda: _no_grad(fn), "warmup": small, "inputs": (q, k, v)}


def build_layer(
    impl: str,
    length: int,
    causal: bool,
    batch: int = 1,
    embed_dim: int = 512,
    num_heads: int = 8,
    device: str = "cpu",
    seed: int = 0,
) -> Dict[str, object]:
    """A self-attention layer (``"ours"`` or ``"torch"``, with the same weights) and its input
    ``(batch, length, embed_dim)``, drawn from ``seed`` (the global random state is left as
    it was)."""
    _require_choice("impl", impl, ("ours", "torch"))
    length, batch, embed_dim, num_heads = check_positive_ints(
        length=length, batch=batch, embed_dim=embed_dim, num_heads=num_heads
    )
    if embed_dim % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide embed_dim={embed_dim}")
    require_bool("causal", causal)
    _require_device("device", device, plain=True)
    with _seeded(check_seed("seed", seed)):
        reference = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        reference = reference.to(device).eval()
        x = torch.randn(batch, length, embed_dim, device=device)
        layer = MultiHeadAttention.from_torch(reference).eval() if impl == "ours" else None
    if impl == "torch":
        ignore = ~causal_mask(length, device=torch.device(device)) if causal else None
        fn = lambda: reference(x, x, x, attn_mask=ignore, need_weights=False, is_causal=causal)[0]
    else:  # "ours"
        mask = causal_mask(length, device=torch.device(device)) if causal else None
        fn = lambda: layer(x, x, x, mask)[0]
    small = (
        (lambda: build_layer(impl, 64, causal, batch, embed_dim, num_heads, device, seed)["fn"]())
        if length > 64
        else None
    )
    return {"fn": lambda: _no_grad(fn), "warmup": small, "inputs": (x,)}


DECODE_MODEL = {"vocab_size": 64, "d_model": 128, "num_heads": 4, "d_ff": 512, "num_layers": 4}


def build_decode(
    impl: str,
    context: int,
    *,
    batch: int = 1,
    device: str = "cpu",
    seed: int = 0,
    **model_sizes: int,
) -> Dict[str, object]:
    """One decoding step at ``context`` tokens of context, as a zero-argument ``fn``.

    ``"cached"``: the KV caches of the context are filled once; ``fn`` feeds the next token
    to a shallow copy of them (an update rebinds the cache's tensors, never writes into them,
    so every call starts from the same ``context`` rows). ``"uncached"``: ``fn`` runs the
    model over all ``context + 1`` tokens. Both return the next-token logits ``(batch, V)``.
    Model sizes (keywords of ``DECODE_MODEL``) default to ``DECODE_MODEL``'s; the model's weights
    are drawn from ``seed`` and the global random state is left as it was.
    """
    _require_choice("impl", impl, ("cached", "uncached"))
    context, batch = check_positive_ints(context=context, batch=batch)
    _require_device("device", device, plain=True)
    seed = check_seed("seed", seed)
    unknown = sorted(set(model_sizes) - set(DECODE_MODEL))
    if unknown:
        raise ValueError(f"unknown model size {unknown[0]!r} (allowed: {', '.join(DECODE_MODEL)})")
    sizes = {**DECODE_MODEL, **dict(zip(model_sizes, check_positive_ints(**model_sizes)))}
    with _seeded(seed):
        model = CausalLM.standard(
            sizes["vocab_size"],
            d_model=sizes["d_model"],
            num_heads=sizes["num_heads"],
            d_ff=sizes["d_ff"],
            num_layers=sizes["num_layers"],
            max_len=context + 1,
        )
    model = model.to(device).eval()
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, sizes["vocab_size"], (batch, context + 1), generator=g).to(device)
    if impl == "cached":
        with torch.no_grad():
            filled = model.new_cache()
            model(tokens[:, :context], filled)
        fn = lambda: model(tokens[:, context:], [copy.copy(c) for c in filled])[:, -1]
    else:  # "uncached"
        fn = lambda: model(tokens)[:, -1]
    return {"fn": lambda: _no_grad(fn), "model": model, "tokens": tokens}


def run_cache(
    contexts: List[int], device: str = "cpu", *, repeats: int = 15, batch: int = 1
) -> Dict[str, object]:
    """Time a decoding step with and without the KV cache at each context length, interleaved.

    Returns ``{"machine", "device", "model", "rows"}``; each row holds the context, both
    medians in seconds (``cached_s``, ``uncached_s``), every repeat (``cached_times``,
    ``uncached_times``), their spread, ``(max - min) / median`` (``cached_spread``,
    ``uncached_spread``), and ``speedup`` = uncached / cached. ``machine`` holds the load
    average at the start and at the end (:func:`attncourse.benchmarks.common.require_quiet`
    refuses to commit a busy machine's timings).
    """
    contexts = _require_positive_ints("contexts", contexts)
    _require_device("device", device, plain=True)
    (batch,) = check_positive_ints(batch=batch)
    require_positive_int("repeats", repeats)
    result: Dict[str, object] = {
        "machine": machine(device),
        "device": device,
        "model": dict(DECODE_MODEL, batch=batch),
    }
    rows = []
    for context in contexts:
        built = {
            impl: build_decode(impl, context, batch=batch, device=device)["fn"]
            for impl in ("cached", "uncached")
        }
        timings = time_interleaved(built, repeats=repeats, warmup=1, device=torch.device(device))
        cached, uncached = timings["cached"].median, timings["uncached"].median
        rows.append(
            {
                "context": context,
                "cached_s": cached,
                "uncached_s": uncached,
                "speedup": uncached / cached,
                "cached_times": timings["cached"].times,
                "uncached_times": timings["uncached"].times,
                "cached_spread": timings["cached"].spread,
                "uncached_spread": timings["uncached"].spread,
            }
        )
    result["rows"] = rows
    if hasattr(os, "getloadavg"):
        result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]  # type: ignore[index]
    return result


def cache_table(rows: List[Dict[str, object]]) -> str:
    """The rows of :func:`run_cache` as a text table: ms per token with and without the cache
    (medians of the repeats), their ratio, and where the rows hold their repeats, each median's
    range (fastest to slowest repeat, ms)."""
    numbers = ("cached_s", "uncached_s", "speedup")
    rows = _rows("rows", rows, ("context",), numbers)
    ranged = all("cached_times" in r and "uncached_times" in r for r in rows)
    head = f"{'context':>8} {'cached ms':>10} {'uncached ms':>12} {'speed-up':>9}"
    lines = [head + (f" {'cached range':>15} {'uncached range':>17}" if ranged else "")]
    for r in rows:
        line = (
            f"{r['context']:>8} {1e3 * r['cached_s']:>10.2f} {1e3 * r['uncached_s']:>12.2f}"
            f" {r['speedup']:>9.1f}"
        )
        if ranged:
            c, u = r["cached_times"], r["uncached_times"]
            line += (
                f" {f'{1e3 * min(c):.2f}-{1e3 * max(c):.2f}':>15}"
                f" {f'{1e3 * min(u):.1f}-{1e3 * max(u):.1f}':>17}"
            )
        lines.append(line)
    return "\n".join(lines)


def _no_grad(fn):
    with torch.no_grad():
        return fn()


def _peak(builder: str, kwargs: Dict[str, object], device: str) -> int:
    if device == "cuda":
        built = globals()[builder](**kwargs)
        return cuda_peak_memory(built["fn"])
    return cpu_peak_memory(f"attncourse.benchmarks.attention:{builder}", kwargs)


def run(
    lengths: List[int],
    device: str = "cpu",
    *,
    layer_lengths: Optional[List[int]] = None,
    memory_fraction: float = 0.6,
) -> Dict[str, object]:
    """Measure every implementation at every length, causal and not; return the results as a dict.

    ``lengths`` (attention) and ``layer_lengths`` (the layers) are checked before anything is
    measured; ``memory_fraction`` in (0, 1] of the available memory bounds the naive version's
    predicted peak.
    """
    lengths = _require_positive_ints("lengths", lengths, empty_ok=True)
    layer_lengths = _require_positive_ints(
        "layer_lengths", [] if layer_lengths is None else layer_lengths, empty_ok=True
    )
    if not lengths and not layer_lengths:
        raise ValueError("lengths and layer_lengths are both empty: there is nothing to measure")
    _require_device("device", device, plain=True)
    memory_fraction = _require_fraction("memory_fraction", memory_fraction)
    result: Dict[str, object] = {
        "machine": machine(device),
        "device": device,
        "shape": {"batch": 1, "num_heads": 8, "head_dim": 64, "dtype": "float32"},
    }
    result["matmul_flops_per_s"] = matmul_throughput(2048, device=torch.device(device))
    rows: List[Dict[str, object]] = []
    naive_bytes_per_score: Dict[bool, float] = {}
    for length in lengths:
        repeats = 5 if length <= 4096 else 2 if length <= 8192 else 1
        for causal in (False, True):
            kwargs = {"length": length, "causal": causal, "device": device}
            peaks: Dict[str, Optional[int]] = {}
            skipped: Dict[str, str] = {}
            for impl in IMPLEMENTATIONS:
                available = (
                    meminfo_gib("MemAvailable")
                    if device == "cpu"
                    else torch.cuda.mem_get_info()[0] / 2**30
                )
                predicted = naive_bytes_per_score.get(causal, 0.0) * 8 * length * length / 2**30
                if (
                    impl == "naive"
                    and available is not None
                    and predicted > memory_fraction * available
                ):
                    skipped[impl] = (
                        f"predicted peak {predicted:.1f} GiB > {memory_fraction:.0%} of the"
                        f" {available:.1f} GiB available"
                    )
                    peaks[impl] = None
                    continue
                peaks[impl] = _peak("build", {"impl": impl, **kwargs}, device)
                if impl == "naive":
                    naive_bytes_per_score[causal] = peaks[impl] / (8 * length * length)
            built = {
                impl: build(impl, **kwargs)["fn"] for impl in IMPLEMENTATIONS if impl not in skipped
            }
            timings = time_interleaved(
                built, repeats=repeats, warmup=1, device=torch.device(device)
            )
            flops = attention_flops(1, 8, length, length, 64, causal=causal)
            for impl in IMPLEMENTATIONS:
                row: Dict[str, object] = {
                    "kind": "attention",
                    "impl": impl,
                    "length": length,
                    "causal": causal,
                    "flops": flops,
                }
                if impl in skipped:
                    row.update(
                        skipped=skipped[impl],
                        predicted_peak_bytes=int(
                            naive_bytes_per_score[causal] * 8 * length * length
                        ),
                    )
                else:
                    row.update(
                        seconds=timings[impl].median,
                        times=timings[impl].times,
                        peak_bytes=peaks[impl],
                    )
                rows.append(row)
            _print_rows(rows[-3:])
    for length in layer_lengths:
        for causal in (False, True):
            kwargs = {"length": length, "causal": causal, "device": device}
            built = {impl: build_layer(impl, **kwargs)["fn"] for impl in ("ours", "torch")}
            timings = time_interleaved(built, repeats=5, warmup=1, device=torch.device(device))
            flops = multihead_flops(1, length, length, 512, 8, causal=causal)
            for impl in ("ours", "torch"):
                peak = _peak("build_layer", {"impl": impl, **kwargs}, device)
                rows.append(
                    {
                        "kind": "layer",
                        "impl": impl,
                        "length": length,
                        "causal": causal,
                        "flops": flops,
                        "seconds": timings[impl].median,
                        "times": timings[impl].times,
                        "peak_bytes": peak,
                    }
                )
            _print_rows(rows[-2:])
    result["rows"] = rows
    if hasattr(os, "getloadavg"):
        result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]  # type: ignore[index]
    return result


def table(rows: List[Dict[str, object]]) -> str:
    """The rows as a text table, with each time and memory relative to torch's at the same setting
    (NaN where a time or memory to divide by is 0)."""
    rows = _rows("rows", rows, ("kind", "impl", "length", "causal"))
    for i, r in enumerate(rows):
        _row(f"rows[{i}]", r, (), ("seconds", "flops", "peak_bytes") if "seconds" in r else ())
    reference = {
        (r["kind"], r["length"], r["causal"]): r
        for r in rows
        if r["impl"] == "torch" and "seconds" in r
    }
    # within the 80 columns of a chapter's output
    lines = [
        f"{'what':<9} {'impl':<5} {'L':>5} {'causal':>6} {'time ms':>9} {'x torch':>7}"
        f" {'GFLOP/s':>7} {'peak MiB':>8} {'x torch':>7}"
    ]
    for r in rows:
        ref = reference.get((r["kind"], r["length"], r["causal"]))
        if "seconds" not in r:
            lines.append(
                f"{r['kind']:<9} {r['impl']:<5} {r['length']:>5} {str(r['causal']):>6}   skipped:"
                f" {r['skipped']}"
            )
            continue
        ratio = _ratio(r["seconds"], ref["seconds"]) if ref else float("nan")
        gflops = _ratio(r["flops"], r["seconds"]) / 1e9
        mem_ratio = _ratio(r["peak_bytes"], ref["peak_bytes"]) if ref else float("nan")
        lines.append(
            f"{r['kind']:<9} {r['impl']:<5} {r['length']:>5} {str(r['causal']):>6}"
            f" {1e3 * r['seconds']:>9.1f} {ratio:>7.2f} {gflops:>7.1f}"
            f" {r['peak_bytes'] / 2**20:>8.1f} {mem_ratio:>7.2f}"
        )
    return "\n".join(lines)


def load_cache(
    device: str = "cpu", folder: Optional[str] = None, tag: str = ""
) -> Dict[str, object]:
    """The decoding-step timings written by ``python -m attncourse.benchmarks --cache`` (chapter 6).

    ``{"machine", "device", "model", "rows"}`` as :func:`run_cache` returns them: by default the
    committed results chapter 6 quotes (``ch06_cache_benchmark_<device><tag>.json``, installed
    with the package); ``folder`` reads those of your own run.
    """
    return _load("ch06_cache_benchmark", device, folder, tag, "committed cache benchmark")


def _load(prefix: str, device: object, folder: object, tag: object, what: str):
    """``<prefix>_<device><tag>.json`` from ``folder``; a ``ValueError`` naming it when missing."""
    if not isinstance(device, str) or not isinstance(tag, str):
        raise TypeError(
            f"device and tag must be strings, got {type(device).__name__} {device!r} and"
            f" {type(tag).__name__} {tag!r}"
        )
    if any(s in device + tag for s in ("/", os.sep, os.altsep) if s):
        raise ValueError(f"device and tag must not hold a path, got {device!r} and {tag!r}")
    return _read_json(
        _results_folder(folder),
        f"{prefix}_{device}{tag}.json",
        f"no {what} for device={device!r}, tag={tag!r}: ",
    )


def load(device: str = "cpu", folder: Optional[str] = None, tag: str = "") -> Dict[str, object]:
    """The results written by the benchmark command for ``device`` (and ``--tag``).

    By default the committed results that chapter 7 quotes, installed with the package
    (:data:`attncourse.benchmarks.common.RESULTS`); ``folder`` reads those of your own run. A
    missing file is a ``ValueError``.
    """
    return _load("ch07_benchmark", device, folder, tag, "benchmark")


def plot(result: Dict[str, object]):
    """Time and peak memory against L on log-log axes, one line per implementation (causal dashed).

    ``result``: what :func:`run` or :func:`load` returns (a dict whose ``"rows"`` hold timed
    attention rows). Returns the matplotlib ``Figure`` (two axes: time, peak memory).
    """
    import matplotlib.pyplot as plt

    rows = _plotted_rows(result)
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for impl, colour in zip(IMPLEMENTATIONS, ("tab:red", "tab:blue", "tab:green")):
        for causal, style in ((False, "-o"), (True, "--x")):
            mine = sorted(
                (r for r in rows if r["impl"] == impl and r["causal"] == causal),
                key=lambda r: r["length"],
            )
            if not mine:
                continue
            label = f"{impl}{' causal' if causal else ''}"
            lengths = [r["length"] for r in mine]
            ax_time.loglog(
                lengths, [r["seconds"] for r in mine], style, color=colour, label=label, base=2
            )
            ax_mem.loglog(
                lengths,
                [r["peak_bytes"] / 2**20 for r in mine],
                style,
                color=colour,
                label=label,
                base=2,
            )
    ax_time.set(xlabel="sequence length L", ylabel="time (s)", title="forward time")
    ax_mem.set(xlabel="sequence length L", ylabel="peak extra memory (MiB)", title="peak memory")
    for ax in (ax_time, ax_mem):
        ax.grid(True, which="both", alpha=0.3)
    ax_time.legend(fontsize=8)
    return fig


def _plotted_rows(result: object) -> List[Dict[str, object]]:
    """The timed attention rows of ``result``, checked before a figure is made."""
    if not isinstance(result, dict):
        raise TypeError(
            f"result must be a result dict with 'rows' (what run or load returns), got"
            f" {type(result).__name__}"
        )
    if "rows" not in result:
        raise ValueError(f"result has no 'rows' (its keys: {sorted(result)})")
    rows = _rows("result['rows']", result["rows"], ("kind",))
    timed = []
    for i, r in enumerate(rows):
        if r["kind"] == "attention" and "seconds" in r:
            _row(f"result['rows'][{i}]", r, ("impl", "causal"), ("length", "seconds", "peak_bytes"))
            timed.append(r)
    if not timed:
        raise ValueError("result has no timed attention rows to plot")
    return timed


def constants(
    sizes: Sequence[int] = (32, 128, 512, 1024), *, repeats: int = 5, score_length: int = 512
) -> Dict[str, object]:
    """What the O() formulas hide, measured side by side on the CPU (chapter 7's "Big O against practice").

    * ``matmul_flops_per_s``: ``{n: FLOP/s}`` of square ``n x n`` products, each timed as a batch
      of products doing the same total work (interleaved, so load hits every size alike);
    * ``softmax_flops_per_s`` and ``qk_flops_per_s``: the softmax of ``(8, L, L)`` scores
      (counted as 5 FLOPs per element) and the ``Q K^T`` product that makes them (``d = 64``);
    * ``copy_bytes_per_s``: read + write bandwidth of cloning a 64 MiB tensor;
    * ``thread_flops_per_s``: ``{threads: FLOP/s}`` of a 768 x 768 product with 1 thread and
      with torch's default number of threads, the two interleaved.

    The keys ``n`` and ``threads`` are strings (``"768"``), as in the JSON file
    :func:`load_constants` reads, so that a fresh run and a committed one read alike.
    """
    sizes = _require_positive_ints("sizes", sizes, distinct=True)
    require_positive_int("repeats", repeats)
    (score_length,) = check_positive_ints(score_length=score_length)
    g = torch.Generator().manual_seed(0)
    largest = max(sizes)
    fns, work = {}, {}
    for n in sizes:
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        reps = max(1, (largest // n) ** 3 // 64)  # about the same FLOPs per call for every size
        fns[str(n)] = lambda a=a, b=b, reps=reps: [a @ b for _ in range(reps)]
        work[str(n)] = 2 * n**3 * reps
    matmul = {
        name: work[name] / t.median for name, t in time_interleaved(fns, repeats=repeats).items()
    }
    s = torch.randn(8, score_length, score_length, generator=g)
    q, k = (
        torch.randn(8, score_length, 64, generator=g),
        torch.randn(8, score_length, 64, generator=g),
    )
    t = time_interleaved(
        {"softmax": lambda: torch.softmax(s, dim=-1), "qk": lambda: q @ k.transpose(-2, -1)},
        repeats=repeats,
    )
    big = torch.randn(16 * 2**20, generator=g)
    copy_time = time_interleaved({"copy": big.clone}, repeats=repeats)["copy"].median
    threads = torch.get_num_threads()
    a, b = torch.randn(768, 768, generator=g), torch.randn(768, 768, generator=g)

    def product(n: int) -> torch.Tensor:  # sets its thread count, so that the counts interleave
        torch.set_num_threads(n)
        return a @ b

    try:
        by_threads = time_interleaved(
            {str(n): lambda n=n: product(n) for n in sorted({1, threads})}, repeats=repeats
        )
    finally:
        torch.set_num_threads(threads)
    per_thread = {n: 2 * 768**3 / t.median for n, t in by_threads.items()}
    info = machine("cpu")
    if hasattr(os, "getloadavg"):
        info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "machine": info,
        "matmul_flops_per_s": matmul,
        "softmax_flops_per_s": 5 * s.numel() / t["softmax"].median,
        "qk_flops_per_s": 2 * s.numel() * 64 / t["qk"].median,
        "copy_bytes_per_s": 2 * big.numel() * 4 / copy_time,
        "thread_flops_per_s": per_thread,
    }


def load_constants(folder: Optional[str] = None, tag: str = "") -> Dict[str, object]:
    """The results written by ``python -m attncourse.benchmarks --constants`` (CPU); by default the committed ones."""
    return _load("constants", "cpu", folder, tag, "constants")


def _print_rows(rows: List[Dict[str, object]]) -> None:
    print(table(rows).split("\n", 1)[1], flush=True)
