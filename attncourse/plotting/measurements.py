"""Measured figures: decoding times (chapter 6), adaptive span's time (chapter 8), the roofline (chapter 10)."""

from __future__ import annotations

from typing import Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["plot_decode_times", "plot_span_time", "plot_roofline"]


def plot_decode_times(rows: Sequence[dict], *, ax: Optional[Axes] = None) -> Axes:
    """Time per generated token against the context length, with and without a KV cache.

    ``rows`` are those of :func:`attncourse.benchmarks.attention.run_cache` (``context``, ``cached_s``,
    ``uncached_s``), drawn on log-log axes in milliseconds.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    contexts = [r["context"] for r in rows]
    for key, style, colour, label in (
        ("uncached_s", "-o", "tab:red", "no cache (recompute the context)"),
        ("cached_s", "-s", "tab:blue", "KV cache (one new position)"),
    ):
        milliseconds = [1e3 * r[key] for r in rows]
        ax.loglog(contexts, milliseconds, style, color=colour, label=label, base=2)
    ax.set(
        xlabel="context length (tokens)", ylabel="time per token (ms)", title="one decoding step"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_span_time(result: dict) -> Figure:
    """Wall time and computed scores of the adaptive-span layer against its span (log-log).

    ``result``: what :func:`attncourse.benchmarks.kernels.run_span_time` returns (or the
    committed ``span_time_cpu.json``): rows of ``span``, ``cells``, ``seconds`` and ``times``.
    """
    rows = sorted(result["rows"], key=lambda r: r["span"])
    spans = [r["span"] for r in rows]
    fig, (ax_time, ax_cells) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    for r in rows:
        ax_time.plot([r["span"]] * len(r["times"]), r["times"], ".", color="tab:grey", alpha=0.6)
    ax_time.loglog(
        spans, [r["seconds"] for r in rows], "-o", color="tab:blue", base=2, label="median"
    )
    ax_time.set(
        xlabel="span z (all heads)",
        ylabel="time (s)",
        title=f"forward wall time, L = {result['length']}",
    )
    ax_time.legend()
    ax_cells.loglog(spans, [r["cells"] for r in rows], "-o", color="tab:orange", base=2)
    ax_cells.set(xlabel="span z (all heads)", ylabel="scores computed", title="scores computed")
    for ax in (ax_time, ax_cells):
        ax.grid(True, which="both", alpha=0.3)
    return fig


def plot_roofline(
    machines: dict, points: dict, *, intensity_range: Sequence[float] = (1.0, 4096.0)
) -> Figure:
    """The roofline of each machine and where some computations sit on it (log-log).

    Args:
        machines: ``{name: (peak FLOP/s, memory bytes/s)}``; the attainable rate at arithmetic
            intensity ``I`` (FLOPs per byte moved to or from memory) is ``min(peak, I * bandwidth)``.
        points: ``{label: intensity}``, drawn as vertical lines.
        intensity_range: the x range, FLOP/byte.
    """
    lo, hi = intensity_range
    if not 0 < lo < hi:
        raise ValueError(f"intensity_range must be 0 < low < high, got {intensity_range!r}")
    x = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(7, 4.8), layout="constrained")
    for name, (peak, bandwidth) in machines.items():
        (line,) = ax.loglog(
            x,
            np.minimum(peak, x * bandwidth) / 1e12,
            label=f"{name} (ridge at {peak / bandwidth:.0f} FLOP/B)",
        )
        ax.axvline(peak / bandwidth, color=line.get_color(), linestyle=":", linewidth=1)
    for k, (label, intensity) in enumerate(points.items()):
        ax.axvline(
            intensity,
            color=f"C{k + len(machines)}",
            linestyle="--",
            label=f"{label}: {intensity:.0f} FLOP/B",
        )
    ax.set(
        xlabel="arithmetic intensity (FLOPs per byte of memory traffic)",
        ylabel="attainable TFLOP/s",
        title="roofline: min(peak, intensity x bandwidth)",
    )
    ax.grid(True, which="both", alpha=0.3)
    # below the axes: inside, the legend would hide a ceiling or a kernel's line
    fig.legend(fontsize=8, loc="outside lower center", ncols=2)
    return fig
