"""Adaptive attention span (chapter 8): Sukhbaatar et al., "Adaptive Attention Span in
Transformers" (ACL 2019).

Each head ``h`` learns how far back it looks. A query at position ``t`` weighs the key at
distance ``x`` (the key at position ``t - x``; ``x = 0`` is the query's own position) by a
soft mask with a linear ramp of width ``R``::

    m_z(x) = min(max((R + z - x) / R, 0), 1)

which is 1 up to distance ``z``, falls linearly to 0 at distance ``z + R``, and is 0 beyond.
The mask multiplies the attention *probabilities*, which are renormalised::

    a_tx = m_z(x) p_tx / sum_x' m_z(x') p_tx',      p_t = softmax(s_t)

so ``z`` gets gradient only from keys on the ramp. The span is stored as a fraction
``z' = z / S`` of the maximum span ``S``, clamped into ``[0, 1]`` after every optimiser
step, and the loss adds ``lambda * mean(z)`` per layer. Keys farther back than the
largest current span plus the ramp have weight exactly 0 for every head, so they are never
computed: the work per query is ``ceil(max_h z_h + R)`` dot products instead of ``L``.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
from torch import Tensor, nn

from ._checks import (
    broadcast_batch,
    default_scale,
    fmt_shape,
    require_bool,
    require_floating,
    require_input_like,
    require_module,
    require_non_negative_int,
    require_positive_int,
    require_positive_number,
    require_rank,
    require_same_dtype_and_device,
    require_span_per_head,
    require_tensor,
)
from .attention import safe_softmax
from .kernels import tiles
from .masks import causal_mask
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .transformer import CausalLM, FeedForward

__all__ = [
    "soft_span_mask",
    "span_window",
    "computed_cells",
    "block_plan",
    "adaptive_span_attention",
    "AdaptiveSpan",
    "AdaptiveSpanAttention",
    "AdaptiveSpanBlock",
    "adaptive_span_lm",
    "span_penalty",
    "clamp_spans",
    "attention_cells",
]


def soft_span_mask(distance: Tensor, span: Union[Tensor, float], ramp: float) -> Tensor:
    """The soft mask ``m_z(x) = min(max((R + z - x) / R, 0), 1)``, elementwise with broadcasting.

    Args:
        distance: ``x``, how many positions back the key is (``0`` = the query's own
            position); any shape, integer or floating.
        span: ``z``, a number or a tensor that broadcasts against ``distance`` (one span per
            head: shape ``(h, 1, 1)`` against distances ``(L, S)``).
        ramp: ``R > 0``, the width of the linear ramp from 1 down to 0.

    Returns:
        The mask in ``[0, 1]``, of the broadcast shape, in the floating dtype of ``span``
        (or of ``distance``, or torch's default). Negative distances (future keys) give 1:
        the causal mask is a separate matter.
    """
    require_tensor("distance", distance)
    require_positive_number("ramp", ramp)
    if not isinstance(span, Tensor):
        if isinstance(span, bool) or not isinstance(span, (int, float)):
            raise TypeError(f"span must be a number or a tensor, got {type(span).__name__}")
        dtype = distance.dtype if distance.is_floating_point() else torch.get_default_dtype()
        span = torch.tensor(float(span), dtype=dtype, device=distance.device)
    elif not span.is_floating_point():
        raise TypeError(f"span must be a floating-point tensor, got dtype {span.dtype}")
    if span.device != distance.device:
        raise ValueError(
            f"span and distance must be on the same device, got {span.device} and {distance.device}"
        )
    if not bool(torch.isfinite(span.detach()).all()):
        raise ValueError(f"span must be finite, got {span!r}")
    broadcast_batch(distance=distance.shape, span=span.shape)
    return ((ramp + span - distance.to(span.dtype)) / ramp).clamp(0.0, 1.0)


def span_window(span: Union[Tensor, float], ramp: float) -> int:
    """How many keys back (distances ``0 .. W-1``) a layer must compute: ``W = ceil(max(z) + R)``.

    ``m_z(x) > 0`` exactly when ``x < z + R``, so the largest distance with a non-zero weight
    is ``ceil(z + R) - 1``. The longest head decides for the whole layer.

    Args:
        span: the spans ``z`` of the heads (a number or a non-empty tensor), each ``>= 0``.
        ramp: ``R > 0``.
    """
    require_positive_number("ramp", ramp)
    if isinstance(span, Tensor):
        if span.numel() == 0:
            raise ValueError("span is empty: give one span per head")
        longest = float(span.detach().max())
    elif isinstance(span, (int, float)) and not isinstance(span, bool):
        longest = float(span)
    else:
        raise TypeError(f"span must be a number or a tensor, got {type(span).__name__}")
    if (
        not math.isfinite(longest)
        or (isinstance(span, Tensor) and float(span.detach().min()) < 0)
        or longest < 0
    ):
        raise ValueError(f"every span must be finite and >= 0, got {span!r}")
    return math.ceil(longest + ramp)


def computed_cells(length: int, window: int, *, block_m: int = 16) -> int:
    """Attention cells (query-key scores) one head computes for one sequence of ``length``.

    Queries go in blocks of ``block_m`` positions; a block is compared with its own keys and
    the ``window - 1`` keys before it: ``ceil(L / block_m) * block_m * (block_m + window - 1)``
    scores. When that is not fewer than the ``L * L`` of the plain causal computation (a
    window close to ``L``), the plain computation is used. See :func:`adaptive_span_attention`.
    """
    require_positive_int("length", length)
    require_positive_int("window", window)
    require_positive_int("block_m", block_m)
    num_blocks, block, keys = _plan(length, min(window, length), block_m)
    return num_blocks * block * keys


def block_plan(length: int, window: int, block_m: int = 16) -> Tuple[int, int, int]:
    """How :func:`adaptive_span_attention` splits one sequence: ``(blocks, queries per block, keys per block)``.

    ``block_m`` is the queries per tile, as in :mod:`attncourse.kernels.tiles`
    (FlashAttention-2's ``B_r``); the keys per block, ``block_m + window - 1``, are one tile's
    ``block_n``, derived from the window.

    Queries go in blocks of ``block_m``; each block meets its own keys and the ``window - 1``
    before them. When that is not fewer scores than ``L * L`` (a window close to ``L``), the
    plan is one block of ``L`` queries and ``L`` keys: the plain computation.
    """
    require_positive_int("length", length)
    require_positive_int("window", window)
    require_positive_int("block_m", block_m)
    return _plan(length, min(window, length), block_m)


def _plan(length: int, window: int, block: int) -> Tuple[int, int, int]:
    """:func:`block_plan` without the checks (``window <= length``)."""
    block = min(block, length)
    num_blocks = tiles.num_blocks(length, block)
    if window >= length or num_blocks * block * (block + window - 1) >= length * length:
        return 1, length, length
    return num_blocks, block, block + window - 1


def adaptive_span_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    span: Tensor,
    ramp: float,
    *,
    window: Optional[int] = None,
    block_m: int = 16,
    position_bias: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Causal multi-head self-attention with one soft span per head, computing only the keys within reach.

    The softmax probabilities are multiplied by ``m_z(x)`` and renormalised. Query ``t``
    needs only the keys at distances ``0 .. W-1`` (``W`` = :func:`span_window`): the queries
    are processed in blocks of ``block_m`` positions, and each block is compared with its own
    keys and the ``W - 1`` keys before it, so the number of scores is about ``L * (W + block_m)``
    instead of ``L * L`` (:func:`computed_cells`). Keys whose mask is 0 are left out of the
    softmax: they would get weight 0 after the renormalisation anyway, and leaving them out
    keeps the renormalisation from dividing underflowed numbers.

    Args:
        query, key: ``(B, h, L, d_k)``, one sequence's queries and keys, per head.
        value: ``(B, h, L, d_v)``.
        span: ``(h,)`` the span ``z`` of each head, in positions, each ``>= 0``.
        ramp: ``R > 0``.
        window: ``W``, keys kept per query; defaults to :func:`span_window` (capped at ``L``).
            ``L`` computes the full causal window and gives the same result to float
            tolerance; a window too small for the spans would cut keys with non-zero weight
            and is refused.
        block_m: queries per block (the tiles' ``block_m``; the keys per block,
            ``block_m + W - 1``, follow from the window: :func:`block_plan`).
        position_bias: optional ``(h, D)`` learned relative-position term added to the scores:
            ``position_bias[h, x]`` for the key at distance ``x``; ``D`` must cover
            :func:`span_window` (farther keys have weight 0 whatever their score).

    Returns:
        ``(output, weights)``: output ``(B, h, L, d_v)``; weights ``(B, h, L, W)`` by distance:
        ``weights[b, h, t, x]`` is the weight of the key at position ``t - x`` (0 where
        ``x > t``). Each row sums to 1. ``L = 0`` gives empty results ``(B, h, 0, d_v)``
        and ``(B, h, 0, 0)``; ``d_k = 0`` has no defined ``1 / sqrt(d_k)`` and is refused.
    """
    for name, x in (("query", query), ("key", key), ("value", value), ("span", span)):
        require_floating(name, x)
    require_rank("query", query, 4, "(B, h, L, d_k)")
    require_rank("key", key, 4, "(B, h, L, d_k)")
    require_rank("value", value, 4, "(B, h, L, d_v)")
    require_rank("span", span, 1, "(h,)")
    require_same_dtype_and_device(query=query, key=key, value=value)
    if key.shape != query.shape or value.shape[:3] != query.shape[:3]:
        raise ValueError(
            "self-attention needs query and key of one shape (B, h, L, d_k) and value (B, h, L,"
            f" d_v): query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}, value"
            f" {fmt_shape(value.shape)}"
        )
    require_span_per_head(span, query)
    require_positive_int("block_m", block_m)
    batch, heads, length, _ = query.shape
    if query.size(-1) == 0:  # this function takes no scale: say so, not "pass scale="
        raise ValueError(
            f"query has d_k = 0 features (shape {fmt_shape(query.shape)}): the scale 1/sqrt(d_k)"
            " is undefined"
        )
    scale = default_scale(query, None)
    if length == 0:  # no query: nothing to attend (the span and ramp are still checked)
        span_window(span, ramp)
        return value.new_zeros(batch, heads, 0, value.size(-1)), value.new_zeros(batch, heads, 0, 0)
    needed = min(span_window(span, ramp), length)
    if window is None:
        window = needed
    else:
        require_positive_int("window", window)
        if window < needed:
            raise ValueError(
                f"window={window} would drop keys with non-zero weight: the spans {span.tolist()}"
                f" and ramp {ramp} need {needed}"
            )
        window = min(window, length)
    if position_bias is not None:
        require_floating("position_bias", position_bias)
        require_rank("position_bias", position_bias, 2, "(h, D)")
        if position_bias.size(0) != heads or position_bias.size(1) < needed:
            raise ValueError(
                f"position_bias must have shape ({heads}, D) with D >= {needed} (the distances the"
                f" spans reach), got {fmt_shape(position_bias.shape)}"
            )
    num_blocks, block, num_keys = _plan(length, window, block_m)

    # Blocks of queries (B, h, n, b, d) and, for each, its keys: the W - 1 before the block and
    # the block's own (B, h, n, b + W - 1, d), cut from the sequence padded with W - 1 empty
    # positions in front (and to a whole number of blocks at the end).
    padded = num_blocks * block
    before = num_keys - block
    device = query.device
    queries = nn.functional.pad(query, (0, 0, 0, padded - length)).unflatten(2, (num_blocks, block))
    pad = (0, 0, before, padded - length)
    keys = nn.functional.pad(key, pad).unfold(2, num_keys, block).transpose(-2, -1)
    values = nn.functional.pad(value, pad).unfold(2, num_keys, block).transpose(-2, -1)
    # (B, h, n, b, b + W - 1), scaled before the product
    scores = (queries * scale) @ keys.transpose(-2, -1)

    # Distance from query t (row r of block n) to key column c: t - (n b - before + c).
    rows = torch.arange(block, device=device)[:, None]
    cols = torch.arange(num_keys, device=device)
    distance = rows + before - cols  # (b, K), the same in every block
    # (n, 1, K)
    key_position = torch.arange(num_blocks, device=device)[:, None, None] * block - before + cols
    exists = (distance >= 0) & (key_position >= 0)  # (n, b, K): causal, and not padding
    if position_bias is not None:
        reach = position_bias.size(1) - 1
        # (h, 1, b, K)
        scores = scores + position_bias.to(scores.dtype)[:, None, distance.clamp(0, reach)]
    # (h, n, b, K)
    mask = soft_span_mask(distance, span.to(query.dtype)[:, None, None, None], ramp) * exists
    scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = safe_softmax(scores) * mask  # the soft mask multiplies the probabilities ...
    weights = weights / weights.sum(-1, keepdim=True)  # ... which are renormalised
    output = (weights @ values).flatten(2, 3)[:, :, :length]  # (B, h, L, d_v)

    # The weights by distance x = 0 .. W-1: column c = r + before - x of each block.
    x = torch.arange(window, device=device)
    column = rows + before - x  # (b, W)
    valid = (column >= 0) & (column < num_keys)
    by_distance = weights.gather(
        -1, column.clamp(0, num_keys - 1).expand(batch, heads, num_blocks, block, window)
    )
    by_distance = (by_distance * valid).flatten(2, 3)[:, :, :length]
    return output, by_distance


class AdaptiveSpan(nn.Module):
    """One learnable span per head, stored as a fraction ``z' = z / S`` of the maximum span.

    Args:
        num_heads: ``h``.
        max_span: ``S``, the longest span a head may learn (in positions).
        ramp: ``R``, the width of the soft mask's ramp.
        init_span: the initial span of every head, in positions (``0 <= init_span <= S``);
            defaults to ``S``. Start long: a span whose ramp never reaches the distance that
            matters gets no gradient to grow.
        learnable: ``False`` freezes the spans (a fixed-span baseline).

    ``spans`` gives the spans ``z = S z'`` in positions; :meth:`clamp_` puts ``z'`` back into
    ``[0, 1]`` (call it after every optimiser step); :meth:`penalty` is ``lambda * mean(z)``.
    """

    def __init__(
        self,
        num_heads: int,
        max_span: int,
        ramp: float,
        *,
        init_span: Optional[float] = None,
        learnable: bool = True,
    ) -> None:
        super().__init__()
        require_positive_int("num_heads", num_heads)
        require_positive_int("max_span", max_span)
        require_positive_number("ramp", ramp)
        init_span = float(max_span) if init_span is None else init_span
        if (
            isinstance(init_span, bool)
            or not isinstance(init_span, (int, float))
            or not 0 <= init_span <= max_span
        ):
            raise ValueError(
                f"init_span must be a number in [0, max_span={max_span}], got {init_span!r}"
            )
        self.num_heads, self.max_span, self.ramp = num_heads, max_span, float(ramp)
        require_bool("learnable", learnable)
        self.span_fraction = nn.Parameter(
            torch.full((num_heads,), init_span / max_span), requires_grad=learnable
        )

    @property
    def spans(self) -> Tensor:
        """``(h,)`` the current spans ``z = S z'`` in positions (differentiable)."""
        return self.span_fraction * self.max_span

    @torch.no_grad()
    def clamp_(self) -> None:
        """Clamp ``z'`` into ``[0, 1]`` in place (after each optimiser step)."""
        self.span_fraction.clamp_(0.0, 1.0)

    def penalty(self, weight: float) -> Tensor:
        """The span penalty of this layer, ``weight * mean_h(z_h)`` (``lambda`` of the paper), a scalar."""
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ValueError(f"weight must be a finite number >= 0, got {weight!r}")
        return weight * self.spans.mean()

    def window(self, length: Optional[int] = None) -> int:
        """Keys per query the layer computes now, ``ceil(max(z) + R)``, capped at ``length``."""
        window = span_window(self.spans.detach().clamp(0, self.max_span), self.ramp)
        return window if length is None else min(window, length)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, max_span={self.max_span}, ramp={self.ramp:g}"


class AdaptiveSpanAttention(nn.Module):
    """Causal multi-head self-attention with a learned span per head.

    The projections ``W^Q, W^K, W^V, W^O`` are those of chapter 2's
    ``MultiHeadAttention`` (chapter 2); only the attention between them changes
    (:func:`adaptive_span_attention`).

    Args:
        embed_dim, num_heads: as for ``MultiHeadAttention`` (chapter 2).
        max_span, ramp, init_span, learnable: as for :class:`AdaptiveSpan`.
        trim: compute only the keys within the longest span plus the ramp (the point of the
            method); ``False`` computes the full causal window, for comparison.
        block_m: queries per block of the trimmed computation (:func:`adaptive_span_attention`).
        position_bias: learn a score per head and distance (``(h, max_span + ceil(ramp))``,
            zeros at first) added to the attention scores, so that a head can find "the token
            ``x`` back" directly. A simplified variant of the paper's relative positions: a
            scalar bias per head and distance (as in T5), where the paper's model dots the
            query with a learned vector per distance (``q_t . p_x``); and the query's own
            position (``x = 0``) is a key here, while the paper's layer attends to the ``S``
            steps before it.
        bias: whether the four projections have biases.

    ``forward(x (B, L, embed_dim), mask=None)`` returns ``(output (B, L, embed_dim),
    weights (B, h, L, W))`` with the weights by distance (see :func:`adaptive_span_attention`).
    After each call ``cells`` holds the number of attention cells (query-key scores) computed,
    ``B * h * computed_cells(L, W, block_m=block_m)``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        max_span: int,
        ramp: float,
        *,
        init_span: Optional[float] = None,
        learnable: bool = True,
        trim: bool = True,
        block_m: int = 16,
        position_bias: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.projections = MultiHeadAttention(embed_dim, num_heads, bias=bias)
        self.span = AdaptiveSpan(
            num_heads, max_span, ramp, init_span=init_span, learnable=learnable
        )
        require_positive_int("block_m", block_m)
        if not isinstance(trim, bool) or not isinstance(position_bias, bool):
            raise TypeError(
                f"trim and position_bias must be bools, got {trim!r} and {position_bias!r}"
            )
        self.trim, self.block_m = trim, block_m
        # relative positions, as in the paper's model: a learned score per head and distance
        self.position_bias = (
            nn.Parameter(torch.zeros(num_heads, max_span + math.ceil(ramp)))
            if position_bias
            else None
        )
        self.cells = 0

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``x``: ``(B, L, embed_dim)``. ``mask``: ``None`` or the ``(L, L)`` causal mask (the layer
        is causal by construction; any other mask is refused rather than ignored)."""
        require_floating("x", x)
        require_rank("x", x, 3, "(B, L, embed_dim)")
        p = self.projections
        if x.size(-1) != p.embed_dim:
            raise ValueError(
                f"x has {x.size(-1)} features but embed_dim is {p.embed_dim} (x"
                f" {fmt_shape(x.shape)})"
            )
        require_input_like("x", x, p.q_proj.weight)
        length = x.size(1)
        if mask is not None:
            require_tensor("mask", mask)
            if (
                mask.shape != (length, length)
                or mask.dtype != torch.bool
                or not torch.equal(mask, causal_mask(length, device=mask.device))
            ):
                raise ValueError(
                    "adaptive-span attention is causal by construction: mask must be None or the"
                    f" boolean causal mask of shape ({length}, {length}), got dtype {mask.dtype}"
                    f" and shape {fmt_shape(mask.shape)}"
                )
        q = split_heads(p.q_proj(x), p.num_heads)  # (B, h, L, head_dim)
        k = split_heads(p.k_proj(x), p.num_heads)
        v = split_heads(p.v_proj(x), p.num_heads)
        if length == 0:  # an empty sequence: empty output and weights, no cell computed
            self.cells = 0
            return x.new_zeros(x.shape), x.new_zeros(x.size(0), p.num_heads, 0, 0)
        fractions = self.span.span_fraction.detach()
        if not ((fractions >= 0) & (fractions <= 1)).all():
            raise ValueError(
                "span.span_fraction must lie in [0, 1] (spans within [0,"
                f" max_span={self.span.max_span}]), got"
                f" {[round(f, 4) for f in fractions.tolist()]}: clamp it after each optimiser step"
                " (clamp_spans(model), or layer.span.clamp_())"
            )
        window = self.span.window(length) if self.trim else length
        heads, weights = adaptive_span_attention(
            q,
            k,
            v,
            self.span.spans,
            self.span.ramp,
            window=window,
            block_m=self.block_m,
            position_bias=self.position_bias,
        )
        self.cells = x.size(0) * p.num_heads * computed_cells(length, window, block_m=self.block_m)
        return p.out_proj(merge_heads(heads)), weights


class AdaptiveSpanBlock(nn.Module):
    """Chapter 5's post-LayerNorm layer with adaptive-span self-attention, for ``CausalLM`` (chapter 5)::

        h   = LayerNorm(x + AdaptiveSpanAttention(x))
        out = LayerNorm(h + FFN(h))          (no FFN when d_ff = 0)

    Called as ``block(x, mask)`` with ``x`` ``(B, L, d_model)``; ``self_weights`` keeps the last
    weights ``(B, h, L, W)`` (by distance), detached.
    """

    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, max_span: int, ramp: float, **span_options
    ) -> None:
        super().__init__()
        require_non_negative_int("d_ff", d_ff)
        self.self_attn = AdaptiveSpanAttention(d_model, num_heads, max_span, ramp, **span_options)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff) if d_ff > 0 else None
        self.norm3 = nn.LayerNorm(d_model) if d_ff > 0 else None
        self.self_weights: Optional[Tensor] = None

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """``x``: ``(B, L, d_model)``; ``mask``: ``None`` or the ``(L, L)`` causal mask. Returns ``(B, L, d_model)``."""
        attended, weights = self.self_attn(x, mask)
        self.self_weights = weights.detach()
        h = self.norm1(x + attended)
        if self.ffn is not None:
            h = self.norm3(h + self.ffn(h))
        return h


def adaptive_span_lm(
    vocab_size: int,
    *,
    max_span: int,
    ramp: float,
    d_model: int = 64,
    num_heads: int = 4,
    d_ff: int = 256,
    num_layers: int = 1,
    max_len: int = 128,
    **span_options,
) -> nn.Module:
    """The ``CausalLM`` of chapter 5 over :class:`AdaptiveSpanBlock` layers.

    ``span_options`` (``init_span``, ``learnable``, ``trim``) go to every layer.
    """
    blocks = [
        AdaptiveSpanBlock(d_model, num_heads, d_ff, max_span, ramp, **span_options)
        for _ in range(num_layers)
    ]
    return CausalLM(vocab_size, d_model, max_len, blocks)


def _span_modules(model: nn.Module) -> list:
    require_module("model", model)
    return [m for m in model.modules() if isinstance(m, AdaptiveSpan)]


def span_penalty(model: nn.Module, weight: float) -> Tensor:
    """The sum over the model's layers of ``weight * mean(z)``: add it to the training loss."""
    modules = _span_modules(model)
    if not modules:
        raise ValueError("the model has no AdaptiveSpan module")
    return sum(m.penalty(weight) for m in modules)


def clamp_spans(model: nn.Module, step: Optional[int] = None) -> None:
    """Clamp every span fraction of ``model`` into ``[0, 1]``.

    Its signature fits ``attncourse.training.train``'s ``after_step``:
    ``train(..., after_step=clamp_spans)``.
    """
    for module in _span_modules(model):
        module.clamp_()


def attention_cells(model: nn.Module) -> int:
    """Attention cells (query-key scores) computed by the model's adaptive-span layers in the last forward pass."""
    require_module("model", model)
    return sum(m.cells for m in model.modules() if isinstance(m, AdaptiveSpanAttention))
