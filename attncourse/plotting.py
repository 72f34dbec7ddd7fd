"""Plot helpers shared by every chapter: attention heat maps with token labels, and schematics drawn from the package's own code."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ._checks import fmt_shape

__all__ = ["heatmap", "plot_attention", "plot_heads", "plot_tile_schedule", "plot_span_cells", "plot_persistent_memory"]

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


def plot_tile_schedule(
    seq_q: int, seq_k: int, *, causal: bool = True, block_size: int = 1024, query_block_size: int = 256, ax: Optional[Axes] = None
) -> Axes:
    """The score tiles :func:`attncourse.efficient.tiled_attention` computes, drawn on the ``(L, S)`` grid.

    Each tile of :func:`attncourse.efficient.tile_schedule` is a rectangle, numbered in the
    order it is computed: blue when every score in it is visible, orange when it crosses the
    causal diagonal (computed in full, then masked). What is left white is never computed.
    """
    from matplotlib.patches import Rectangle

    from .efficient import tile_schedule

    tiles = tile_schedule(seq_q, seq_k, causal=causal, block_size=block_size, query_block_size=query_block_size)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5.5 * seq_q / seq_k + 0.8), layout="constrained")
    for order, (q0, q1, k0, k1, crosses) in enumerate(tiles):
        colour = "tab:orange" if crosses else "tab:blue"
        ax.add_patch(Rectangle((k0, q0), k1 - k0, q1 - q0, facecolor=colour, alpha=0.35, edgecolor="black", linewidth=0.8))
        if len(tiles) <= 80:
            ax.text((k0 + k1) / 2, (q0 + q1) / 2, str(order), ha="center", va="center", fontsize=7)
    if causal:
        offset = seq_k - seq_q
        ax.plot([max(0, offset), seq_k], [max(0, -offset), seq_q], color="black", linestyle="--", linewidth=1, label="causal diagonal")
    ax.set_xlim(0, seq_k)
    ax.set_ylim(seq_q, 0)
    ax.set_aspect("equal")
    ax.set_xlabel(f"key position (blocks of {block_size})")
    ax.set_ylabel(f"query position (blocks of {query_block_size})")
    computed = sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1, _ in tiles)
    ax.set_title(f"{len(tiles)} tiles, {computed / (seq_q * seq_k):.1%} of the L x S scores")
    from matplotlib.patches import Patch

    handles = [Patch(facecolor="tab:blue", alpha=0.35, edgecolor="black", label="all visible"),
               Patch(facecolor="tab:orange", alpha=0.35, edgecolor="black", label="crosses the diagonal: masked")]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    return ax


def plot_span_cells(spans: Sequence[float], ramp: float, length: int, *, block: int = 16) -> Figure:
    """Adaptive span: each head's soft mask over the distance, and the scores the trimmed layer computes.

    Left: ``m_z(x)`` of every head against the distance ``x`` (flat at 1 up to ``z``, a ramp of
    width ``R``), with the layer's window ``W = ceil(max z + R)`` marked. Right, one panel per
    head: the ``(query, key)`` grid of one sequence of ``length``; grey cells are the scores
    the trimmed layer computes (the same ``W`` for every head, in query blocks of ``block``),
    coloured by the head's mask; white is never computed.
    """
    from matplotlib.colors import ListedColormap

    from .adaptive_span import _plan, computed_cells, soft_span_mask, span_window

    spans_t = torch.as_tensor(list(spans), dtype=torch.float64)
    if spans_t.dim() != 1 or spans_t.numel() == 0:
        raise ValueError(f"spans must be a non-empty 1-D sequence, got shape {fmt_shape(spans_t.shape)}")
    window = span_window(spans_t, ramp)
    num_blocks, per_block, keys = _plan(length, min(window, length), block)
    heads = spans_t.numel()
    fig, axes = plt.subplots(1, heads + 1, figsize=(3.2 * (heads + 1), 3.3), layout="constrained",
                             gridspec_kw={"width_ratios": [1.4] + [1] * heads})
    x = torch.linspace(0, float(window) + 4, 400, dtype=torch.float64)
    for h in range(heads):
        axes[0].plot(x, soft_span_mask(x, spans_t[h], ramp), label=f"head {h}: z = {spans_t[h].item():g}")
    axes[0].axvline(window, color="black", linestyle="--", linewidth=1)
    axes[0].text(window, 1.04, f" W = {window}", fontsize=8, va="bottom")
    axes[0].set(xlabel="distance x (positions back)", ylabel="$m_z(x)$", ylim=(-0.05, 1.15), title=f"soft masks, R = {ramp:g}")
    axes[0].legend(fontsize=7)
    rows = torch.arange(length)[:, None]
    cols = torch.arange(length)[None, :]
    block_start = (rows // per_block) * per_block
    if num_blocks > 1:  # each block of queries against its own keys and the W - 1 before them
        computed = (cols >= block_start - (keys - per_block)) & (cols < block_start + per_block)
    else:  # the plain computation: every score
        computed = torch.ones(length, length, dtype=torch.bool)
    distance = (rows - cols).double()
    cmap = ListedColormap(["white", "0.85"] + [plt.get_cmap("viridis")(v) for v in np.linspace(0.15, 1, 64)])
    for h in range(heads):
        mask = soft_span_mask(distance, spans_t[h], ramp) * (distance >= 0)
        image = np.where(computed.numpy(), 1 + mask.numpy() * 64, 0)
        axes[h + 1].imshow(image, cmap=cmap, vmin=0, vmax=65, interpolation="nearest")
        axes[h + 1].set(title=f"head {h}: z = {spans_t[h].item():g}", xlabel="key", ylabel="query" if h == 0 else None)
    fig.suptitle(f"grey and coloured: the {computed_cells(length, window, block=block):,} scores per head the trimmed layer computes "
                 f"(of {length * length:,}); colour: the head's mask; white: never computed", fontsize=9)
    return fig


def plot_persistent_memory(length: int, num_persistent: int, *, ax: Optional[Axes] = None) -> Axes:
    """All-attention's keys: the context's ``L`` keys with the ``N`` persistent ones appended, and who sees what.

    A grid of ``L`` query rows by ``L + N`` key columns: the context columns follow the causal
    mask (blue: visible, white: the future), the persistent columns (green) are visible to every
    query, the first included; one softmax runs over each whole row. The same mask
    :class:`attncourse.all_attention.AllAttention` builds (its ``_extend_mask`` of a causal mask).
    """
    from matplotlib.colors import ListedColormap

    from .all_attention import _extend_mask
    from .masks import causal_mask

    visible = _extend_mask(causal_mask(length), num_persistent).numpy()  # (L, L + N)
    kind = np.zeros_like(visible, dtype=float)
    kind[:, :length] = visible[:, :length] * 1.0
    kind[:, length:] = visible[:, length:] * 2.0
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * (length + num_persistent) + 1.5, 0.55 * length + 1.4), layout="constrained")
    ax.imshow(kind, cmap=ListedColormap(["white", "#9ecae1", "#a1d99b"]), vmin=0, vmax=2)
    ax.set_xticks(range(length + num_persistent),
                  [f"$k_{{{j + 1}}}$" for j in range(length)] + [f"$M^K_{{{n + 1}}}$" for n in range(num_persistent)])
    ax.set_yticks(range(length), [f"$q_{{{t + 1}}}$" for t in range(length)])
    ax.set_xticks(np.arange(-0.5, length + num_persistent), minor=True)
    ax.set_yticks(np.arange(-0.5, length), minor=True)
    ax.grid(which="minor", color="black", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    ax.axvline(length - 0.5, color="black", linewidth=2.5)
    ax.set_xlabel("keys (and values): the context's, then the persistent memory's")
    ax.set_title("one softmax per row over context and memory", fontsize=10, pad=22)
    ax.text(length / 2 - 0.5, -0.65, "context: causal", ha="center", va="bottom", fontsize=9)
    ax.text(length + num_persistent / 2 - 0.5, -0.65, f"memory: N = {num_persistent}, always visible", ha="center", va="bottom", fontsize=9)
    return ax
