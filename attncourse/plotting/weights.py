"""Attention weights as heat maps, with token labels (every chapter)."""

from __future__ import annotations

from typing import Optional, Sequence, Union

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._checks import fmt_shape

__all__ = ["ArrayLike", "heatmap", "plot_attention", "plot_heads"]

ArrayLike = Union[torch.Tensor, np.ndarray, Sequence[Sequence[float]]]


def _as_matrix(values: ArrayLike, name: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    matrix = np.asarray(values, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (L, S), got shape {fmt_shape(matrix.shape)}")
    if matrix.size == 0:
        raise ValueError(
            f"{name} must have at least one row and one column, got shape {fmt_shape(matrix.shape)}"
        )
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
        # at least 2 in tall: a single row still gets a colour bar that can be read
        height = max(2.0, 0.8 + 0.5 * rows)
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * cols, height), layout="constrained")
    colours = plt.get_cmap(cmap).with_extremes(bad="#d9d9d9")
    image = ax.imshow(shown, cmap=colours, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(
        range(cols),
        key_labels if key_labels is not None else range(cols),
        rotation=45 if key_labels else 0,
        ha="right" if key_labels else "center",
    )
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
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=8,
                color="black" if not np.isfinite(v) or v > middle else "white",
            )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8)
    return ax


def plot_attention(
    weights: ArrayLike,
    query_labels: Optional[Sequence[str]] = None,
    key_labels: Optional[Sequence[str]] = None,
    **kwargs,
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
        matrices: an ``(h, L, S)`` tensor/array or a list of ``(L, S)`` matrices.
        query_labels, key_labels: tick labels shared by every panel.
        titles: one title per panel (``"head 0"``, ``"head 1"``, ... by default).
        ncols: panels per row (by default as many as fit in a figure 12 in wide, so that the
            book, which shows it about 7 in wide, keeps its labels readable).
        shared_scale: use the colour range ``[0, 1]`` for every panel (attention weights);
            otherwise each panel gets its own range and colour bar.
        suptitle: a title over the whole figure.
        **kwargs: passed to :func:`heatmap` (``cmap``, ``annotate``, ...).

    Returns:
        The figure.
    """
    if isinstance(matrices, (torch.Tensor, np.ndarray)):
        if matrices.ndim != 3:
            raise ValueError(
                "matrices must be (h, L, S) or a list of (L, S), got shape"
                f" {fmt_shape(matrices.shape)}"
            )
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
    rows, cols = panels[0].shape
    panel_width = 1.2 + 0.45 * cols
    if ncols is None:
        ncols = max(1, int(12.0 // panel_width))
    elif isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)):
        raise TypeError(f"ncols must be a positive int or None, got {type(ncols).__name__}")
    elif ncols < 1:
        raise ValueError(f"ncols must be a positive int or None, got {ncols}")
    ncols = min(int(ncols), len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(ncols * panel_width, nrows * (1.0 + 0.42 * rows)),
        layout="constrained",
        squeeze=False,
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
