"""Plot helpers shared by every chapter: attention heat maps with token labels."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ._checks import fmt_shape

__all__ = ["heatmap", "plot_attention", "plot_heads", "plot_tile_maps", "plot_span_time", "plot_roofline"]

ArrayLike = Union[torch.Tensor, np.ndarray, Sequence[Sequence[float]]]


def _as_matrix(values: ArrayLike, name: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    matrix = np.asarray(values, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (L, S), got shape {fmt_shape(matrix.shape)}")
    return matrix


def _check_labels(labels: Optional[Sequence[str]], size: int, name: str, axis: str) -> None:
    if labels is not None and len(labels) != size:
        raise ValueError(f"{name} has {len(labels)} labels but the matrix has {size} {axis}")


def heatmap(
    matrix: ArrayLike,
    query_labels: Optional[Sequence[str]] = None,
    key_labels: Optional[Sequence[str]] = None,
    *,
    ax: Optional[Axes] = None,
    title: Optional[str] = None,
    cmap: str = "viridis",
    vmin: Optional[float] = None,
    vmax: Optional[float] = None,
    annotate: Optional[bool] = None,
    colorbar: bool = True,
) -> Axes:
    """Draw one ``(L, S)`` matrix: queries down the rows, keys along the columns.

    Args:
        matrix: ``(L, S)`` tensor or array (scores, weights, a mask, ...). Entries that are
            ``-inf`` (masked scores) or NaN are drawn grey and written as such.
        query_labels: ``L`` row labels (tokens of the queries).
        key_labels: ``S`` column labels (tokens of the keys).
        ax: axes to draw on; a new figure is made when omitted.
        title: the axes title.
        cmap, vmin, vmax: colour map and its range (the data's range by default).
        annotate: write each value in its cell; by default only when the matrix has at
            most 100 cells.
        colorbar: add a colour bar beside the axes.

    Returns:
        The axes drawn on.
    """
    values = _as_matrix(matrix, "matrix")
    rows, cols = values.shape
    shown = np.ma.masked_invalid(values)  # -inf (a masked score) is drawn grey and written as -inf
    _check_labels(query_labels, rows, "query_labels", "rows")
    _check_labels(key_labels, cols, "key_labels", "columns")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * cols, 0.8 + 0.5 * rows), layout="constrained")
    colours = plt.get_cmap(cmap).with_extremes(bad="#d9d9d9")
    image = ax.imshow(shown, cmap=colours, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(cols), key_labels if key_labels is not None else range(cols), rotation=45 if key_labels else 0, ha="right" if key_labels else "center")
    ax.set_yticks(range(rows), query_labels if query_labels is not None else range(rows))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = values.size <= 100
    if annotate:
        low, high = image.get_clim()
        middle = (low + high) / 2
        for (i, j), v in np.ndenumerate(values):
            text = f"{v:.2f}" if np.isfinite(v) else ("-inf" if v < 0 else str(v))
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="black" if not np.isfinite(v) or v > middle else "white")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8)
    return ax


def plot_attention(
    weights: ArrayLike, query_labels: Optional[Sequence[str]] = None, key_labels: Optional[Sequence[str]] = None, **kwargs
) -> Axes:
    """Heat map of attention weights ``(L, S)`` on the fixed colour range ``[0, 1]``; see :func:`heatmap`."""
    kwargs.setdefault("vmin", 0.0)
    kwargs.setdefault("vmax", 1.0)
    return heatmap(weights, query_labels, key_labels, **kwargs)


def plot_heads(
    matrices: Union[ArrayLike, Sequence[ArrayLike]],
    query_labels: Optional[Sequence[str]] = None,
    key_labels: Optional[Sequence[str]] = None,
    *,
    titles: Optional[Sequence[str]] = None,
    ncols: Optional[int] = None,
    shared_scale: bool = True,
    suptitle: Optional[str] = None,
    **kwargs,
) -> Figure:
    """Several ``(L, S)`` matrices side by side, e.g. every head of one layer.

    Args:
        matrices: a ``(H, L, S)`` tensor/array or a list of ``(L, S)`` matrices.
        query_labels, key_labels: tick labels shared by every panel.
        titles: one title per panel (``"head 0"``, ``"head 1"``, ... by default).
        ncols: panels per row (all in one row by default).
        shared_scale: use the colour range ``[0, 1]`` for every panel (attention weights);
            otherwise each panel gets its own range and colour bar.
        suptitle: a title over the whole figure.
        **kwargs: passed to :func:`heatmap` (``cmap``, ``annotate``, ...).

    Returns:
        The figure.
    """
    if isinstance(matrices, (torch.Tensor, np.ndarray)):
        if matrices.ndim != 3:
            raise ValueError(f"matrices must be (H, L, S) or a list of (L, S), got shape {fmt_shape(matrices.shape)}")
        panels = [matrices[h] for h in range(matrices.shape[0])]
    else:
        panels = list(matrices)
    panels = [_as_matrix(m, f"matrices[{k}]") for k, m in enumerate(panels)]
    if not panels:
        raise ValueError("matrices is empty")
    if titles is None:
        titles = [f"head {h}" for h in range(len(panels))]
    if len(titles) != len(panels):
        raise ValueError(f"got {len(titles)} titles for {len(panels)} matrices")
    ncols = ncols or len(panels)
    nrows = -(-len(panels) // ncols)
    rows, cols = panels[0].shape
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(ncols * (1.2 + 0.45 * cols), nrows * (1.0 + 0.42 * rows)), layout="constrained", squeeze=False
    )
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.set_visible(False)
            continue
        if shared_scale:
            kwargs_k = {"vmin": 0.0, "vmax": 1.0, **kwargs, "colorbar": k == len(panels) - 1}
        else:
            kwargs_k = {**kwargs}
        heatmap(panels[k], query_labels, key_labels, ax=ax, title=titles[k], **kwargs_k)
        if k % ncols:
            ax.set_ylabel("")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def plot_tile_maps(maps: ArrayLike, titles: Optional[Sequence[str]] = None, *, suptitle: Optional[str] = None) -> Figure:
    """Which tiles a blocked kernel computes: one panel per head, a dark square per computed tile.

    Args:
        maps: ``(H, query blocks, key blocks)`` boolean (``True`` = computed), e.g.
            :func:`attncourse.kernels.tiles.span_tile_maps`.
        titles: one per panel; by default ``"head h: n tiles"``.
        suptitle: a title over the whole figure.
    """
    maps = np.asarray(maps.detach().cpu() if isinstance(maps, torch.Tensor) else maps)
    if maps.ndim != 3:
        raise ValueError(f"maps must be (H, query blocks, key blocks), got shape {fmt_shape(maps.shape)}")
    heads = maps.shape[0]
    if titles is None:
        titles = [f"head {h}: {int(maps[h].sum())} tiles" for h in range(heads)]
    if len(titles) != heads:
        raise ValueError(f"got {len(titles)} titles for {heads} maps")
    fig, axes = plt.subplots(1, heads, figsize=(2.6 * heads, 2.9), layout="constrained", squeeze=False)
    for h, ax in enumerate(axes[0]):
        ax.imshow(maps[h].astype(float), cmap="Greys", vmin=0, vmax=1.25, interpolation="nearest")
        ax.set_xticks(np.arange(-0.5, maps.shape[2], 1), minor=True)
        ax.set_yticks(np.arange(-0.5, maps.shape[1], 1), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.5)
        ax.tick_params(which="minor", length=0)
        ax.set(title=titles[h], xlabel="key block")
    axes[0][0].set_ylabel("query block")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def plot_span_time(result: dict) -> Figure:
    """Wall time and computed scores of the adaptive-span layer against its span (log-log).

    ``result``: what :func:`attncourse.kernel_benchmark.run_span_time` returns (or the
    committed ``span_time_cpu.json``): rows of ``span``, ``cells``, ``seconds`` and ``times``.
    """
    rows = sorted(result["rows"], key=lambda r: r["span"])
    spans = [r["span"] for r in rows]
    fig, (ax_time, ax_cells) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    for r in rows:
        ax_time.plot([r["span"]] * len(r["times"]), r["times"], ".", color="tab:grey", alpha=0.6)
    ax_time.loglog(spans, [r["seconds"] for r in rows], "-o", color="tab:blue", base=2, label="median")
    ax_time.set(xlabel="span z (all heads)", ylabel="time (s)", title=f"forward wall time, L = {result['length']}")
    ax_time.legend()
    ax_cells.loglog(spans, [r["cells"] for r in rows], "-o", color="tab:orange", base=2)
    ax_cells.set(xlabel="span z (all heads)", ylabel="scores computed", title="scores computed")
    for ax in (ax_time, ax_cells):
        ax.grid(True, which="both", alpha=0.3)
    return fig


def plot_roofline(machines: dict, points: dict, *, intensity_range: Sequence[float] = (1.0, 4096.0)) -> Figure:
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
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for name, (peak, bandwidth) in machines.items():
        line, = ax.loglog(x, np.minimum(peak, x * bandwidth) / 1e12, label=f"{name} (ridge at {peak / bandwidth:.0f} FLOP/B)")
        ax.axvline(peak / bandwidth, color=line.get_color(), linestyle=":", linewidth=1)
    for k, (label, intensity) in enumerate(points.items()):
        ax.axvline(intensity, color=f"C{k + len(machines)}", linestyle="--", label=f"{label}: {intensity:.0f} FLOP/B")
    ax.set(xlabel="arithmetic intensity (FLOPs per byte of memory traffic)", ylabel="attainable TFLOP/s",
           title="roofline: min(peak, intensity x bandwidth)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig
