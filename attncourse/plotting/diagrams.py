"""Schematics of the mechanisms, with every shape taken from running the package's own code.

Scaled dot-product attention, the head split, masks, the encoder-decoder, Transformer blocks
(chapters 1-5), the KV cache (6), tile schedules (7, 10), adaptive span's computed cells (8) and
all-attention's persistent memory (9).
"""

from __future__ import annotations

from typing import Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._checks import fmt_shape
from ..adaptive_span import block_plan, computed_cells, soft_span_mask, span_window
from ..all_attention import extend_mask
from ..attention import scaled_dot_product_attention
from ..efficient import tile_schedule
from ..kv_cache import KVCache
from ..masks import causal_mask, combine_masks, padding_mask
from ..multihead import MultiHeadAttention, merge_heads, split_heads
from .weights import ArrayLike

__all__ = [
    "draw_attention_schematic",
    "draw_head_split",
    "draw_mask_schematic",
    "draw_encoder_decoder",
    "block_stages",
    "plot_transformer_blocks",
    "draw_kv_cache",
    "plot_tile_schedule",
    "plot_span_cells",
    "plot_persistent_memory",
    "plot_tile_maps",
]

_HEAD_COLOURS = (
    "#4c72b0",
    "#dd8452",
    "#55a868",
    "#c44e52",
    "#8172b3",
    "#937860",
    "#da8bc3",
    "#8c8c8c",
)


def _new_axes(ax: Optional[Axes], size: tuple) -> Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=size, layout="constrained")
    ax.set_axis_off()
    ax.set_aspect("equal")
    return ax


def _grid(
    ax: Axes,
    x: float,
    y: float,
    rows: int,
    cols: int,
    *,
    cell: float = 0.3,
    colours=None,
    label: str = "",
    shape: Optional[tuple] = None,
    hatch=None,
) -> tuple:
    """Draw a ``rows x cols`` matrix of cells with its top-left corner at ``(x, y)``; returns
    its (left, right, top, bottom).

    ``colours`` is one colour, or a function ``(i, j) -> colour``; ``shape`` is written under the matrix.
    """
    from matplotlib.patches import Rectangle

    for i in range(rows):
        for j in range(cols):
            colour = colours(i, j) if callable(colours) else (colours or "#dddddd")
            ax.add_patch(
                Rectangle(
                    (x + j * cell, y - (i + 1) * cell),
                    cell,
                    cell,
                    facecolor=colour,
                    edgecolor="white",
                    linewidth=1,
                )
            )
    right, bottom = x + cols * cell, y - rows * cell
    if label:
        ax.text((x + right) / 2, y + 0.12, label, ha="center", va="bottom", fontsize=9)
    if shape is not None:
        ax.text(
            (x + right) / 2,
            bottom - 0.12,
            fmt_shape(shape),
            ha="center",
            va="top",
            fontsize=8,
            color="#444444",
        )
    return x, right, y, bottom


def _arrow(
    ax: Axes, start: tuple, end: tuple, text: str = "", *, colour: str = "#333333", rad: float = 0.0
) -> None:
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops=dict(arrowstyle="->", color=colour, lw=1.2, connectionstyle=f"arc3,rad={rad}"),
    )
    if text:
        ax.text(
            (start[0] + end[0]) / 2,
            (start[1] + end[1]) / 2 + 0.1,
            text,
            ha="center",
            va="bottom",
            fontsize=8,
            color=colour,
        )


def draw_attention_schematic(
    L: int = 3, S: int = 5, d_k: int = 4, d_v: int = 2, *, ax: Optional[Axes] = None
) -> Axes:
    """Scaled dot-product attention as matrices: ``Q, K, V -> scores -> softmax -> weights @ V``.

    The shapes written under each matrix come from running
    :func:`attncourse.attention.scaled_dot_product_attention` on inputs of these sizes.

    Args:
        L, S: number of queries and of keys/values.
        d_k, d_v: width of queries and keys, width of values.
        ax: axes to draw on; a new figure is made when omitted.

    Returns:
        The axes drawn on.
    """
    for name, value in (("L", L), ("S", S), ("d_k", d_k), ("d_v", d_v)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 12:
            raise ValueError(
                f"{name} must be an int from 1 to 12 (a drawing, not a computation), got {value!r}"
            )
    q, k, v = torch.zeros(L, d_k), torch.zeros(S, d_k), torch.zeros(S, d_v)
    output, weights = scaled_dot_product_attention(q, k, v)
    scores = q @ k.transpose(-2, -1)
    ax = _new_axes(ax, (9, 3.4))
    c = 0.3
    blue, green, orange, grey = "#9ecae1", "#a1d99b", "#fdae6b", "#d9d9d9"

    def matrix(t: torch.Tensor, x: float, y: float, colours, label: str) -> tuple:
        """``t`` as a grid of cells with its top left corner at ``(x, y)``, its shape under it."""
        return _grid(ax, x, y, *t.shape, cell=c, colours=colours, label=label, shape=t.shape)

    qx = matrix(q, 0, 0, blue, "Q")
    kx = matrix(k, 0, -L * c - 0.8, blue, "K")
    vx = matrix(v, 0, -(L + S) * c - 1.6, green, "V")
    x1 = max(qx[1], kx[1]) + 1.1
    sx = matrix(scores, x1, 0, grey, "scores\n$QK^\\top/\\sqrt{d_k}$ + mask")
    x2 = sx[1] + 1.4
    checkerboard = lambda i, j: orange if (i + j) % 2 else "#fdd0a2"
    wx = matrix(weights, x2, 0, checkerboard, "weights\nsoftmax of each row")
    x3 = wx[1] + 1.4
    ox = matrix(output, x3, 0, green, "output\nweights @ V")
    _arrow(ax, (qx[1] + 0.05, -L * c / 2), (sx[0] - 0.05, -L * c / 2))
    _arrow(ax, (kx[1] + 0.05, (kx[2] + kx[3]) / 2), (sx[0] - 0.05, sx[3] + 0.05), "$K^\\top$")
    _arrow(ax, (sx[1] + 0.05, -L * c / 2), (wx[0] - 0.05, -L * c / 2), "softmax")
    _arrow(ax, (wx[1] + 0.05, -L * c / 2), (ox[0] - 0.05, -L * c / 2), "@ V")
    _arrow(ax, (vx[1] + 0.05, (vx[2] + vx[3]) / 2), (ox[0] + 0.1, ox[3] - 0.35), "values")
    ax.text(
        x2 + S * c / 2, wx[3] - 0.6, "each row sums to 1", ha="center", fontsize=8, style="italic"
    )
    ax.set_xlim(-0.3, ox[1] + 0.4)
    ax.set_ylim(vx[3] - 0.5, 0.9)
    return ax


def draw_head_split(layer, length: int = 3, *, ax: Optional[Axes] = None) -> Axes:
    """The multi-head layer ``layer`` (a :class:`attncourse.multihead.MultiHeadAttention`) as a drawing:
    ``X W^Q`` cut into ``h`` column blocks, one attention per head, the heads concatenated, ``W^O``.

    Every size is read from the layer or from running it on zeros of shape ``(1, length, embed_dim)``:
    the split comes from :func:`attncourse.multihead.split_heads`, the concatenation from
    :func:`attncourse.multihead.merge_heads`. Head ``i`` has one colour throughout, so the row block
    of ``W^O`` that mixes it in has its colour too.

    Returns:
        The axes drawn on.
    """
    if not isinstance(layer, MultiHeadAttention):
        raise TypeError(
            f"layer must be an attncourse MultiHeadAttention, got {type(layer).__name__}"
        )
    h, E = layer.num_heads, layer.embed_dim
    if h > len(_HEAD_COLOURS) or E > 24 or not 1 <= length <= 8:
        raise ValueError(
            f"too large to draw: num_heads={h} (at most {len(_HEAD_COLOURS)}), embed_dim={E} (at"
            f" most 24), length={length} (1 to 8)"
        )
    param = next(layer.parameters())
    x = torch.zeros(1, length, E, dtype=param.dtype, device=param.device)
    projected = layer.q_proj(x)  # (1, L, E)
    heads = split_heads(projected, h)  # (1, h, L, d_k)
    output, weights = layer(x, x, x)
    concat = merge_heads(heads)  # (1, L, h * d_k)
    w_o = layer.out_proj.weight.T  # (h * d_v, E): rows i*d_v ... meet head i
    d = heads.size(-1)
    head_of = lambda j: _HEAD_COLOURS[j // d]  # noqa: E731
    ax = _new_axes(ax, (12, 4.2))
    c = 0.22
    L = length
    xg = _grid(ax, 0, 0, L, E, cell=c, colours="#d9d9d9", label="X", shape=tuple(x.shape[1:]))
    pg = _grid(
        ax,
        xg[1] + 1.0,
        0,
        L,
        E,
        cell=c,
        colours=lambda i, j: head_of(j),
        label="$XW^Q$ (one projection)",
        shape=tuple(projected.shape[1:]),
    )
    _arrow(ax, (xg[1] + 0.05, -L * c / 2), (pg[0] - 0.05, -L * c / 2), "$W^Q$")
    x0 = pg[1] + 1.5  # room for the arrow and, after it, the label "head 0"
    tops, labels = [], []
    for i in range(h):
        top = -i * (L * c + 0.55)
        g = _grid(
            ax,
            x0,
            top,
            L,
            d,
            cell=c,
            colours=_HEAD_COLOURS[i],
            shape=tuple(heads.shape[2:]) if i == h - 1 else None,
        )
        label = ax.text(
            x0 - 0.1,
            top - L * c / 2,
            f"head {i}",
            ha="right",
            va="center",
            fontsize=8,
            color=_HEAD_COLOURS[i],
        )
        labels.append(label)
        tops.append(g)
    ax.text(x0 + d * c / 2, 0.12, "split_heads", ha="center", va="bottom", fontsize=9)
    # the arrow ends where the label "head 0" begins, however wide the drawing makes it
    ax.annotate(
        "",
        xy=(0, 0.5),
        xycoords=labels[0],
        xytext=(pg[1] + 0.05, -L * c / 2),
        textcoords="data",
        arrowprops=dict(arrowstyle="->", color="#333333", lw=1.2, shrinkB=3),
    )
    x1 = x0 + d * c + 1.1
    for i, g in enumerate(tops):
        a = _grid(ax, x1, g[2], L, d, cell=c, colours=_HEAD_COLOURS[i])
        _arrow(
            ax,
            (g[1] + 0.05, (g[2] + g[3]) / 2),
            (a[0] - 0.05, (g[2] + g[3]) / 2),
            "attention" if i == 0 else "",
        )
    ax.text(x1 + d * c / 2, 0.12, "$\\mathrm{head}_i$", ha="center", va="bottom", fontsize=9)
    x2 = x1 + d * c + 1.2
    cg = _grid(
        ax,
        x2,
        0,
        L,
        concat.size(-1),
        cell=c,
        colours=lambda i, j: head_of(j),
        label="Concat",
        shape=tuple(concat.shape[1:]),
    )
    _arrow(ax, (x1 + d * c + 0.05, -L * c / 2), (cg[0] - 0.05, -L * c / 2))
    og = _grid(
        ax,
        x2,
        cg[3] - 0.75,
        w_o.size(0),
        w_o.size(1),
        cell=c * 0.6,
        colours=lambda i, j: head_of(i),
        shape=tuple(w_o.shape),
    )
    ax.text(og[0] - 0.1, (og[2] + og[3]) / 2, "$W^O$", ha="right", va="center", fontsize=9)
    x3 = max(cg[1], og[1]) + 1.2
    outg = _grid(
        ax,
        x3,
        0,
        L,
        output.size(-1),
        cell=c,
        colours="#bcbddc",
        label="output: heads mixed",
        shape=tuple(output.shape[1:]),
    )
    _arrow(ax, (cg[1] + 0.05, -L * c / 2), (outg[0] - 0.05, -L * c / 2), "@ $W^O$")
    ax.text(
        x0,
        tops[-1][3] - 0.45,
        f"h = {h} heads of d_k = {d} = {E} / {h}; weights {fmt_shape(weights.shape)}",
        ha="left",
        va="top",
        fontsize=8,
        color="#444444",
    )
    ax.set_xlim(-0.3, outg[1] + 0.3)
    ax.set_ylim(min(tops[-1][3], og[3]) - 0.9, 0.7)
    # drawn 12 in wide, the figure is shown about 7 in wide: its labels at 1.25 times the size of
    # the other diagrams' stay readable there
    for text in ax.texts:
        text.set_fontsize(text.get_fontsize() * 1.25)
    return ax


def draw_mask_schematic(
    lengths: Sequence[int],
    max_len: int,
    tokens: Optional[Sequence[Sequence[str]]] = None,
    *,
    ax: Optional[Axes] = None,
) -> Axes:
    """How a decoder's mask is built for a padded batch: for each sequence, the key padding row
    broadcast over the queries, AND the causal triangle, = the mask (dark: may attend).

    The grids are :func:`attncourse.masks.padding_mask`, :func:`attncourse.masks.causal_mask` and
    :func:`attncourse.masks.combine_masks` evaluated on ``lengths``.

    Args:
        lengths: real length of each sequence (``B`` of them, each at most ``max_len``).
        max_len: padded length ``L = S``.
        tokens: optional ``B`` lists of ``max_len`` token labels.

    Returns:
        The axes drawn on.
    """
    if not 1 <= max_len <= 10 or not 1 <= len(lengths) <= 4:
        raise ValueError(
            f"too large to draw: max_len={max_len} (1 to 10), {len(lengths)} sequences (1 to 4)"
        )
    if tokens is not None and (
        len(tokens) != len(lengths) or any(len(t) != max_len for t in tokens)
    ):
        raise ValueError(f"tokens must be {len(lengths)} lists of {max_len} labels")
    keep = padding_mask(torch.as_tensor(list(lengths)), max_len)  # (B, S)
    causal = causal_mask(max_len)  # (L, S)
    combined = combine_masks(causal, keep[:, None, :])  # (B, L, S)
    n = max_len
    c = 0.28
    ax = _new_axes(ax, (9, 2.3 * len(lengths) + 0.4))
    dark, light, pad = "#2b5d8a", "#e8e8e8", "#f4a582"
    for b in range(len(lengths)):
        top = -b * (n * c + 0.9)
        grids = [
            _grid(
                ax,
                0,
                top,
                n,
                n,
                cell=c,
                colours=lambda i, j, b=b: dark if keep[b, j] else pad,
                label=f"sequence {b + 1}: keys kept" if b == 0 else f"sequence {b + 1}",
            ),
            _grid(
                ax,
                n * c + 0.9,
                top,
                n,
                n,
                cell=c,
                colours=lambda i, j: dark if causal[i, j] else light,
                label="causal" if b == 0 else "",
            ),
            _grid(
                ax,
                2 * (n * c + 0.9),
                top,
                n,
                n,
                cell=c,
                colours=lambda i, j, b=b: dark if combined[b, i, j] else light,
                label="mask: may attend" if b == 0 else "",
            ),
        ]
        middle = top - n * c / 2
        ax.text(n * c + 0.45, middle, "AND", ha="center", va="center", fontsize=9)
        ax.text(2 * n * c + 1.35, middle, "=", ha="center", va="center", fontsize=12)
        ax.text(
            grids[2][1] + 0.15,
            middle,
            f"length {int(lengths[b])}: {int(combined[b].sum())} pairs",
            ha="left",
            va="center",
            fontsize=8,
        )
        if tokens is not None:
            for j, word in enumerate(tokens[b]):
                ax.text(
                    j * c + c / 2,
                    top - n * c - 0.05,
                    word,
                    ha="right",
                    va="top",
                    fontsize=7,
                    rotation=60,
                )
    ax.text(
        0,
        -len(lengths) * (n * c + 0.9) + 0.35,
        "rows: queries, columns: keys; orange: padded keys, hidden from every query",
        ha="left",
        va="top",
        fontsize=8,
        color="#444444",
    )
    ax.set_xlim(-0.3, 3 * n * c + 2.0 + 1.6)
    ax.set_ylim(-len(lengths) * (n * c + 0.9) + 0.05, 0.6)
    return ax


def draw_encoder_decoder(model, *, ax: Optional[Axes] = None) -> Axes:
    """An encoder-decoder (chapter 4's :class:`attncourse.course.toy_translation.AttentionTranslator`, or a
    :class:`attncourse.transformer.Seq2SeqTransformer`) as boxes: the encoder's
    blocks, the decoder's blocks with their sublayers, and a cross-attention arrow (keys and values)
    from the encoder's output to every decoder block that has cross-attention.

    The number of blocks and the sublayers of each are read from ``model``.

    Returns:
        The axes drawn on.
    """
    from matplotlib.patches import FancyBboxPatch

    blocks = list(getattr(model, "encoder", None) or []) + list(
        getattr(model, "decoder", None) or []
    )
    if not blocks or not all(hasattr(b, "cross_attn") and hasattr(b, "ffn") for b in blocks):
        raise TypeError(
            "model must be an encoder-decoder with .encoder and .decoder blocks "
            f"(an AttentionTranslator or a Seq2SeqTransformer), got {type(model).__name__}"
        )
    ax = _new_axes(ax, (8, 1.6 + 1.9 * max(len(model.encoder), len(model.decoder))))

    def box(x, y, w, h, text, colour):
        ax.add_patch(
            FancyBboxPatch(
                (x, y), w, h, boxstyle="round,pad=0.03", facecolor=colour, edgecolor="#555555"
            )
        )
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8)

    def sublayers(block):
        names = [
            ("self-attention" if block.cross_attn is not None else "self-attention", "#c6dbef")
        ]
        if block.cross_attn is not None:
            names = [("masked self-attention", "#c6dbef"), ("cross-attention", "#fdd0a2")]
        if block.ffn is not None:
            names.append(("feed-forward", "#d9d9d9"))
        return names

    height, gap, width = 0.42, 0.35, 2.4
    enc_x, dec_x = 0.0, 4.2
    ax.text(enc_x + width / 2, -0.55, "source tokens", ha="center", fontsize=9)
    ax.text(dec_x + width / 2, -0.55, "target tokens so far", ha="center", fontsize=9)
    y = 0.0
    for n, block in enumerate(model.encoder):
        y0 = y
        for name, colour in sublayers(block):
            box(enc_x, y, width, height, name, colour)
            y += height + 0.08
        ax.text(
            enc_x - 0.1, (y0 + y) / 2, f"encoder\nblock {n}", ha="right", va="center", fontsize=8
        )
        _arrow(
            ax,
            (enc_x + width / 2, y0 - (0.4 if n == 0 else gap) + 0.02),
            (enc_x + width / 2, y0 - 0.02),
        )
        y += gap
    memory_y = y - gap + 0.05
    box(enc_x, y, width, height, "memory (B, S, d_model)", "#e5f5e0")
    _arrow(ax, (enc_x + width / 2, y - gap + 0.02), (enc_x + width / 2, y - 0.02))
    memory_point = (enc_x + width + 0.03, y + height / 2)
    y = 0.0
    for n, block in enumerate(model.decoder):
        y0 = y
        for name, colour in sublayers(block):
            box(dec_x, y, width, height, name, colour)
            if name == "cross-attention":
                ax.annotate(
                    "",
                    xy=(dec_x - 0.03, y + height / 2),
                    xytext=memory_point,
                    arrowprops=dict(
                        arrowstyle="->", color="#d94801", lw=1.4, connectionstyle="arc3,rad=-0.15"
                    ),
                )
                ax.text(
                    dec_x - 0.35,
                    y + height / 2 + 0.05,
                    "K, V",
                    ha="right",
                    va="bottom",
                    fontsize=8,
                    color="#d94801",
                )
                ax.text(
                    dec_x + width + 0.05,
                    y + height / 2,
                    "Q: from below",
                    ha="left",
                    va="center",
                    fontsize=7,
                    color="#555555",
                )
            y += height + 0.08
        ax.text(
            dec_x + width + 0.05,
            y0 - 0.02,
            f"decoder block {n}",
            ha="left",
            va="bottom",
            fontsize=8,
        )
        _arrow(
            ax,
            (dec_x + width / 2, y0 - (0.4 if n == 0 else gap) + 0.02),
            (dec_x + width / 2, y0 - 0.02),
        )
        y += gap
    box(dec_x, y, width, height, "linear: logits (B, L, vocab)", "#e5f5e0")
    _arrow(ax, (dec_x + width / 2, y - gap + 0.02), (dec_x + width / 2, y - 0.02))
    top = max(y, memory_y) + height + 0.3
    ax.set_xlim(-1.1, dec_x + width + 1.9)
    ax.set_ylim(-0.8, top)
    return ax


def block_stages(block) -> list:
    """The stages of a :class:`attncourse.transformer.TransformerBlock` from input to output.

    Read off the block itself (its ``norm_first`` flag and the sublayers it has), so the
    schematic of :func:`plot_transformer_blocks` is the code's order. Each stage is a label:
    ``"input"`` first and ``"output"`` last, and between them ``"LayerNorm"``, a sublayer name,
    ``"dropout"`` or ``"+"`` (the residual addition; its skip connection starts where the
    sublayer's group starts: at the ``"LayerNorm"`` before the sublayer in a pre-LN block, at
    the sublayer in a post-LN one).
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
    colours = {
        "LayerNorm": "#f2d7a6",
        "dropout": "#e0e0e0",
        "+": "white",
        "input": "white",
        "output": "white",
    }
    stage_lists = [block_stages(b) for b in blocks]
    height = max(len(s) for s in stage_lists)
    fig, axes = plt.subplots(
        1, len(blocks), figsize=(3.4 * len(blocks), 0.55 * height + 0.6), squeeze=False
    )
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
                ax.add_patch(
                    plt.Rectangle(
                        (1.2 - width / 2, y - 0.3), width, 0.6, facecolor=face, edgecolor="black"
                    )
                )
                ax.text(1.2, y, label, ha="center", va="center", fontsize=14 if is_plus else 9)
            if y > 0:
                ax.annotate(
                    "", xy=(1.2, y - 0.3), xytext=(1.2, y - 0.7), arrowprops=dict(arrowstyle="->")
                )
            if is_plus:  # the skip connection: from just above the stage `back` below, round the side, into "+"
                start = y - back + 0.5
                ax.plot([1.2, 2.45, 2.45], [start, start, y], color="tab:red", lw=1.2)
                ax.annotate(
                    "",
                    xy=(1.2 + width / 2, y),
                    xytext=(2.45, y),
                    arrowprops=dict(arrowstyle="->", color="tab:red"),
                )
        ax.plot([], [], color="tab:red", label="residual")
    axes[0][0].legend(loc="lower left", fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _is_pre(stages: Sequence[str]) -> bool:
    return len(stages) > 1 and stages[1] == "LayerNorm"


def draw_kv_cache(
    num_tokens: int, *, prompt_len: int = 1, window: Optional[int] = None, ax: Optional[Axes] = None
) -> Axes:
    """The KV cache during decoding, one row per step: which position each cache slot holds.

    The picture is drawn from a real :class:`attncourse.kv_cache.KVCache` fed with
    ``prompt_len`` positions at once and then one position per step, so it shows what the code
    does: without a window the cache grows by one slot per step; with ``window=W`` it is a
    rolling buffer of ``W`` slots where position ``p`` overwrites slot ``p % W``. Each cell
    shows the position held (orange: written in that step, blue: kept from earlier steps);
    the newest query attends to every filled slot of its row.
    """
    from matplotlib.patches import Rectangle

    cache = KVCache(window)
    rows = []  # per step: (positions held after the update, slots written this step)
    steps = [prompt_len] + [1] * (num_tokens - prompt_len)
    for size in steps:
        before = None if cache.positions is None else cache.positions.clone()
        zeros = torch.zeros(1, 1, size, 1)
        cache.update(zeros, zeros)
        held = cache.positions.tolist()
        written = [
            s
            for s, p in enumerate(held)
            if before is None or s >= len(before) or int(before[s]) != p
        ]
        rows.append((held, written))
    slots = max(len(held) for held, _ in rows)
    if ax is None:
        _, ax = plt.subplots(
            figsize=(1.0 + 0.5 * slots, 0.8 + 0.45 * len(rows)), layout="constrained"
        )
    for r, (held, written) in enumerate(rows):
        for slot, position in enumerate(held):
            if position < 0:
                colour, label = "white", ""
            else:
                colour, label = ("#f4a259" if slot in written else "#9ecae1"), str(position)
            ax.add_patch(
                Rectangle((slot, r), 1, 1, facecolor=colour, edgecolor="#555555", linewidth=0.8)
            )
            ax.text(slot + 0.5, r + 0.5, label, ha="center", va="center", fontsize=8)
    ax.set_xlim(0, slots)
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([s + 0.5 for s in range(slots)], [str(s) for s in range(slots)])
    ax.set_yticks(
        [r + 0.5 for r in range(len(rows))], ["prompt"] + [f"step {r}" for r in range(1, len(rows))]
    )
    ax.set_xlabel("cache slot")
    ax.set_title("rolling buffer, window W = %d" % window if window else "full KV cache")
    ax.set_aspect("equal")
    return ax


def plot_tile_schedule(
    seq_q: int,
    seq_k: int,
    *,
    causal: bool = True,
    block_m: int = 256,
    block_n: int = 1024,
    ax: Optional[Axes] = None,
) -> Axes:
    """The score tiles :func:`attncourse.efficient.tiled_attention` computes, drawn on the ``(L, S)`` grid.

    Each tile of :func:`attncourse.efficient.tile_schedule` is a rectangle, numbered in the
    order it is computed: blue when every score in it is visible, orange when it crosses the
    causal diagonal (computed in full, then masked). What is left white is never computed.
    """
    from matplotlib.patches import Rectangle

    tiles = tile_schedule(seq_q, seq_k, causal=causal, block_m=block_m, block_n=block_n)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5.5 * seq_q / seq_k + 0.8), layout="constrained")
    for order, (q0, q1, k0, k1, crosses) in enumerate(tiles):
        colour = "tab:orange" if crosses else "tab:blue"
        ax.add_patch(
            Rectangle(
                (k0, q0),
                k1 - k0,
                q1 - q0,
                facecolor=colour,
                alpha=0.35,
                edgecolor="black",
                linewidth=0.8,
            )
        )
        if len(tiles) <= 80:
            ax.text((k0 + k1) / 2, (q0 + q1) / 2, str(order), ha="center", va="center", fontsize=7)
    if causal:
        offset = seq_k - seq_q
        ax.plot(
            [max(0, offset), seq_k],
            [max(0, -offset), seq_q],
            color="black",
            linestyle="--",
            linewidth=1,
            label="causal diagonal",
        )
    ax.set_xlim(0, seq_k)
    ax.set_ylim(seq_q, 0)
    ax.set_aspect("equal")
    ax.set_xlabel(f"key position (blocks of {block_n})")
    ax.set_ylabel(f"query position (blocks of {block_m})")
    computed = sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1, _ in tiles)
    ax.set_title(f"{len(tiles)} tiles, {computed / (seq_q * seq_k):.1%} of the L x S scores")
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor="tab:blue", alpha=0.35, edgecolor="black", label="all visible"),
        Patch(
            facecolor="tab:orange",
            alpha=0.35,
            edgecolor="black",
            label="crosses the diagonal: masked",
        ),
    ]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    return ax


def plot_span_cells(
    spans: Sequence[float], ramp: float, length: int, *, block_m: int = 16
) -> Figure:
    """Adaptive span: each head's soft mask over the distance, and the scores the trimmed layer computes.

    Left: ``m_z(x)`` of every head against the distance ``x`` (flat at 1 up to ``z``, a ramp of
    width ``R``), with the layer's window ``W = ceil(max z + R)`` marked. Right, one panel per
    head: the ``(query, key)`` grid of one sequence of ``length``; grey cells are the scores
    the trimmed layer computes (the same ``W`` for every head, in query blocks of ``block_m``),
    coloured by the head's mask; white is never computed.
    """
    from matplotlib.colors import ListedColormap

    spans_t = torch.as_tensor(list(spans), dtype=torch.float64)
    if spans_t.dim() != 1 or spans_t.numel() == 0:
        raise ValueError(
            f"spans must be a non-empty 1-D sequence, got shape {fmt_shape(spans_t.shape)}"
        )
    window = span_window(spans_t, ramp)
    num_blocks, per_block, keys = block_plan(length, min(window, length), block_m)
    heads = spans_t.numel()
    # the masks above, the heads' grids below: one row of heads + 1 panels was too wide to read
    # at the book's column width
    fig = plt.figure(figsize=(max(6.5, 2.1 * heads), 5.8), layout="constrained")
    grid = fig.add_gridspec(2, heads, height_ratios=[1, 1.15])
    axes = [fig.add_subplot(grid[0, :])] + [fig.add_subplot(grid[1, h]) for h in range(heads)]
    x = torch.linspace(0, float(window) + 4, 400, dtype=torch.float64)
    for h in range(heads):
        axes[0].plot(
            x, soft_span_mask(x, spans_t[h], ramp), label=f"head {h}: z = {spans_t[h].item():g}"
        )
    axes[0].axvline(window, color="black", linestyle="--", linewidth=1)
    axes[0].text(window, 1.04, f" W = {window}", fontsize=8, va="bottom")
    axes[0].set(
        xlabel="distance x (positions back)",
        ylabel="$m_z(x)$",
        ylim=(-0.05, 1.15),
        title=f"soft masks, R = {ramp:g}",
    )
    axes[0].legend(fontsize=8)
    rows = torch.arange(length)[:, None]
    cols = torch.arange(length)[None, :]
    block_start = (rows // per_block) * per_block
    if num_blocks > 1:  # each block of queries against its own keys and the W - 1 before them
        computed = (cols >= block_start - (keys - per_block)) & (cols < block_start + per_block)
    else:  # the plain computation: every score
        computed = torch.ones(length, length, dtype=torch.bool)
    distance = (rows - cols).double()
    cmap = ListedColormap(
        ["white", "0.85"] + [plt.get_cmap("viridis")(v) for v in np.linspace(0.15, 1, 64)]
    )
    for h in range(heads):
        mask = soft_span_mask(distance, spans_t[h], ramp) * (distance >= 0)
        image = np.where(computed.numpy(), 1 + mask.numpy() * 64, 0)
        axes[h + 1].imshow(image, cmap=cmap, vmin=0, vmax=65, interpolation="nearest")
        axes[h + 1].set(
            title=f"head {h}: z = {spans_t[h].item():g}",
            xlabel="key",
            ylabel="query" if h == 0 else None,
        )
    fig.suptitle(
        f"grey and coloured: the {computed_cells(length, window, block_m=block_m):,} scores per head"
        f" the trimmed layer computes (of {length * length:,});\ncolour: the head's mask; white:"
        " never computed",
        fontsize=9,
    )
    return fig


def plot_persistent_memory(length: int, num_persistent: int, *, ax: Optional[Axes] = None) -> Axes:
    """All-attention's keys: the context's ``L`` keys with the ``N`` persistent ones appended, and who sees what.

    A grid of ``L`` query rows by ``L + N`` key columns: the context columns follow the causal
    mask (blue: visible, white: the future), the persistent columns (green) are visible to every
    query, the first included; one softmax runs over each whole row. The same mask
    :class:`attncourse.all_attention.AllAttention` builds
    (:func:`attncourse.all_attention.extend_mask` of a causal mask).
    """
    from matplotlib.colors import ListedColormap

    visible = extend_mask(causal_mask(length), num_persistent).numpy()  # (L, L + N)
    kind = np.zeros_like(visible, dtype=float)
    kind[:, :length] = visible[:, :length] * 1.0
    kind[:, length:] = visible[:, length:] * 2.0
    if ax is None:
        _, ax = plt.subplots(
            figsize=(0.55 * (length + num_persistent) + 1.5, 0.55 * length + 1.4),
            layout="constrained",
        )
    ax.imshow(kind, cmap=ListedColormap(["white", "#9ecae1", "#a1d99b"]), vmin=0, vmax=2)
    ax.set_xticks(
        range(length + num_persistent),
        [f"$k_{{{j + 1}}}$" for j in range(length)]
        + [f"$M^K_{{{n + 1}}}$" for n in range(num_persistent)],
    )
    ax.set_yticks(range(length), [f"$q_{{{t + 1}}}$" for t in range(length)])
    ax.set_xticks(np.arange(-0.5, length + num_persistent), minor=True)
    ax.set_yticks(np.arange(-0.5, length), minor=True)
    ax.grid(which="minor", color="black", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    ax.axvline(length - 0.5, color="black", linewidth=2.5)
    ax.set_xlabel("keys (and values): the context's, then the persistent memory's")
    ax.set_title("one softmax per row over context and memory", fontsize=10, pad=22)
    ax.text(length / 2 - 0.5, -0.65, "context: causal", ha="center", va="bottom", fontsize=9)
    ax.text(
        length + num_persistent / 2 - 0.5,
        -0.65,
        f"memory: N = {num_persistent}, always visible",
        ha="center",
        va="bottom",
        fontsize=9,
    )
    return ax


def plot_tile_maps(
    maps: ArrayLike, titles: Optional[Sequence[str]] = None, *, suptitle: Optional[str] = None
) -> Figure:
    """Which tiles a blocked kernel computes: one panel per head, a dark square per computed tile.

    Args:
        maps: ``(h, query blocks, key blocks)`` boolean (``True`` = computed), e.g.
            :func:`attncourse.kernels.tiles.span_tile_maps`.
        titles: one per panel; by default ``"head h: n tiles"``.
        suptitle: a title over the whole figure.
    """
    maps = np.asarray(maps.detach().cpu() if isinstance(maps, torch.Tensor) else maps)
    if maps.ndim != 3:
        raise ValueError(
            f"maps must be (h, query blocks, key blocks), got shape {fmt_shape(maps.shape)}"
        )
    heads = maps.shape[0]
    if titles is None:
        titles = [f"head {h}: {int(maps[h].sum())} tiles" for h in range(heads)]
    if len(titles) != heads:
        raise ValueError(f"got {len(titles)} titles for {heads} maps")
    fig, axes = plt.subplots(
        1, heads, figsize=(2.6 * heads, 2.9), layout="constrained", squeeze=False
    )
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
