"""Plot helpers shared by every chapter: attention heat maps with token labels."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ._checks import fmt_shape

__all__ = ["heatmap", "plot_attention", "plot_heads", "block_stages", "plot_transformer_blocks", "draw_kv_cache", "plot_decode_times"]

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


def block_stages(block) -> list:
    """The stages of a :class:`attncourse.transformer.TransformerBlock` from input to output.

    Read off the block itself (its ``norm_first`` flag and the sublayers it has), so the
    schematic of :func:`plot_transformer_blocks` is the code's order. Each stage is a label:
    ``"LayerNorm"``, a sublayer name, ``"dropout"`` or ``"+"`` (the residual addition, whose
    skip connection starts at the ``"residual from"`` stage before it).
    """
    sublayers = [("masked self-attention", True)]
    if getattr(block, "cross_attn", None) is not None:
        sublayers.append(("cross-attention", True))
    if getattr(block, "ffn", None) is not None:
        sublayers.append(("feed-forward", True))
    stages = ["input"]
    for name, _ in sublayers:
        if block.norm_first:
            stages += ["LayerNorm", name, "dropout", "+"]
        else:
            stages += [name, "dropout", "+", "LayerNorm"]
    return stages + ["output"]


def plot_transformer_blocks(blocks: Sequence, titles: Sequence[str]) -> Figure:
    """Draw each block's stages bottom to top, with its residual connections as arrows on the side.

    Args:
        blocks: :class:`attncourse.transformer.TransformerBlock` instances (e.g. a post-LN and a pre-LN one).
        titles: one title per block.
    """
    if len(blocks) != len(titles) or not blocks:
        raise ValueError(f"give one title per block: {len(blocks)} blocks, {len(titles)} titles")
    colours = {"LayerNorm": "#f2d7a6", "dropout": "#e0e0e0", "+": "white", "input": "white", "output": "white"}
    stage_lists = [block_stages(b) for b in blocks]
    height = max(len(s) for s in stage_lists)
    fig, axes = plt.subplots(1, len(blocks), figsize=(3.4 * len(blocks), 0.55 * height + 0.6), squeeze=False)
    for ax, stages, title in zip(axes[0], stage_lists, titles):
        ax.set_xlim(0, 3)
        ax.set_ylim(-0.7, len(stages) - 0.3)
        ax.axis("off")
        ax.set_title(title)
        back = 4 if _is_pre(stages) else 3  # "+" adds the value of the stage this far below it
        for y, label in enumerate(stages):
            is_plus = label == "+"
            width = 0.35 if is_plus else 1.9
            if label in ("input", "output"):
                ax.text(1.2, y, label, ha="center", va="center", fontsize=10, style="italic")
            else:
                face = colours.get(label, "#b9d3ee")
                ax.add_patch(plt.Rectangle((1.2 - width / 2, y - 0.3), width, 0.6, facecolor=face, edgecolor="black"))
                ax.text(1.2, y, label, ha="center", va="center", fontsize=14 if is_plus else 9)
            if y > 0:
                ax.annotate("", xy=(1.2, y - 0.3), xytext=(1.2, y - 0.7), arrowprops=dict(arrowstyle="->"))
            if is_plus:  # the skip connection: from just above the stage `back` below, round the side, into "+"
                start = y - back + 0.5
                ax.plot([1.2, 2.45, 2.45], [start, start, y], color="tab:red", lw=1.2)
                ax.annotate("", xy=(1.2 + width / 2, y), xytext=(2.45, y), arrowprops=dict(arrowstyle="->", color="tab:red"))
        ax.plot([], [], color="tab:red", label="residual")
    axes[0][0].legend(loc="lower left", fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _is_pre(stages: Sequence[str]) -> bool:
    return len(stages) > 1 and stages[1] == "LayerNorm"

def draw_kv_cache(num_tokens: int, *, prompt_len: int = 1, window: Optional[int] = None, ax: Optional[Axes] = None) -> Axes:
    """The KV cache during decoding, one row per step: which position each cache slot holds.

    The picture is drawn from a real :class:`attncourse.inference.KVCache` fed with
    ``prompt_len`` positions at once and then one position per step, so it shows what the code
    does: without a window the cache grows by one slot per step; with ``window=W`` it is a
    rolling buffer of ``W`` slots where position ``p`` overwrites slot ``p % W``. Each cell
    shows the position held (orange: written in that step, blue: kept from earlier steps);
    the newest query attends to every filled slot of its row.
    """
    from matplotlib.patches import Rectangle

    from .inference import KVCache

    cache = KVCache(window)
    rows = []  # per step: (positions held after the update, slots written this step)
    steps = [prompt_len] + [1] * (num_tokens - prompt_len)
    for size in steps:
        before = None if cache.positions is None else cache.positions.clone()
        zeros = torch.zeros(1, 1, size, 1)
        cache.update(zeros, zeros)
        held = cache.positions.tolist()
        written = [s for s, p in enumerate(held) if before is None or s >= len(before) or int(before[s]) != p]
        rows.append((held, written))
    slots = max(len(held) for held, _ in rows)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.5 * slots, 0.8 + 0.45 * len(rows)), layout="constrained")
    for r, (held, written) in enumerate(rows):
        for slot, position in enumerate(held):
            if position < 0:
                colour, label = "white", ""
            else:
                colour, label = ("#f4a259" if slot in written else "#9ecae1"), str(position)
            ax.add_patch(Rectangle((slot, r), 1, 1, facecolor=colour, edgecolor="#555555", linewidth=0.8))
            ax.text(slot + 0.5, r + 0.5, label, ha="center", va="center", fontsize=8)
    ax.set_xlim(0, slots)
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([s + 0.5 for s in range(slots)], [str(s) for s in range(slots)])
    ax.set_yticks([r + 0.5 for r in range(len(rows))], ["prompt"] + [f"step {r}" for r in range(1, len(rows))])
    ax.set_xlabel("cache slot")
    ax.set_title("rolling buffer, window W = %d" % window if window else "full KV cache")
    ax.set_aspect("equal")
    return ax


def plot_decode_times(rows: Sequence[dict], *, ax: Optional[Axes] = None) -> Axes:
    """Time per generated token against the context length, with and without a KV cache.

    ``rows`` are those of :func:`attncourse.benchmark.run_cache` (``context``, ``cached_s``,
    ``uncached_s``), drawn on log-log axes in milliseconds.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    contexts = [r["context"] for r in rows]
    ax.loglog(contexts, [1e3 * r["uncached_s"] for r in rows], "-o", color="tab:red", label="no cache (recompute the context)", base=2)
    ax.loglog(contexts, [1e3 * r["cached_s"] for r in rows], "-s", color="tab:blue", label="KV cache (one new position)", base=2)
    ax.set(xlabel="context length (tokens)", ylabel="time per token (ms)", title="one decoding step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
