"""All-attention: persistent memory vectors in place of the feed-forward sublayer (chapter 9).

Sukhbaatar, Grave, Lample, Jégou, Joulin, "Augmenting Self-attention with Persistent
Memory" (2019). Each head ``i`` gets ``N`` learned key vectors ``M_i^K`` and ``N`` value
vectors ``M_i^V`` that do not depend on the input. They are appended to the context's keys
and values, and one softmax runs over both::

    head_i = softmax([q K_i^T, q (M_i^K)^T] / sqrt(d_k)) [V_i; M_i^V]

The causal mask (and an adaptive span) restricts the context positions only: every query
always sees all ``N`` persistent vectors. The layer then replaces a Transformer layer's
attention *and* feed-forward sublayers::

    out = LayerNorm(h + AllAttention(h))

Why it can: an FFN without biases and with a softmax instead of the ReLU,
``W2 softmax(W1 x)``, is attention of the query ``x`` over the keys ``rows of W1`` and the
values ``columns of W2`` (:func:`ffn_as_attention`). Parameters per layer (no biases on
the projections): ``4 d^2 + 2 N d`` against ``4 d^2 + 2 d d_ff`` (+ FFN biases) for a
standard layer, so ``N = d_ff`` matches one layer's size (:func:`all_attention_layer_parameters`,
:func:`transformer_layer_parameters`).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from ._checks import (
    check_mask,
    fmt_shape,
    require_bool,
    require_floating,
    require_input_like,
    require_non_negative_int,
    require_positive_int,
    require_rank,
    require_same_dtype_and_device,
    require_size,
    require_tensor,
)
from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = [
    "AllAttention",
    "AllAttentionBlock",
    "extend_mask",
    "ffn_as_attention",
    "transformer_layer_parameters",
    "all_attention_layer_parameters",
    "count_parameters",
]


class AllAttention(nn.Module):
    """Multi-head self-attention over the context plus ``N`` persistent key/value vectors per head.

    Args:
        embed_dim: ``d``, the width of the input and of the output.
        num_heads: ``h``; must divide ``embed_dim`` (``head_dim = d_k = d // h``).
        num_persistent: ``N``, persistent vectors per head (``0``: the ordinary layer).
        bias: biases on the four projections (the paper has none).

    The persistent vectors follow the parametrisation of the authors' code: they are stored as
    ``persistent_key`` ~ N(0, 1/d_k) and ``persistent_value`` ~ N(0, 1/N), each of shape
    ``(h, N, d_k)``, and enter the attention multiplied by ``sqrt(d_k)`` and ``sqrt(N)``
    (:meth:`memory`), so that they start at unit scale while the optimiser moves them
    ``sqrt(d_k)`` and ``sqrt(N)`` times faster than a plain parameter.

    The projections are those of a ``attncourse.multihead.MultiHeadAttention``
    (``self.projections``): with ``N = 0`` this layer computes exactly what that layer
    computes with the same weights and mask.
    """

    def __init__(
        self, embed_dim: int, num_heads: int, num_persistent: int, *, bias: bool = False
    ) -> None:
        super().__init__()
        require_non_negative_int("num_persistent", num_persistent)
        self.projections = MultiHeadAttention(embed_dim, num_heads, bias=bias)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = self.projections.head_dim
        self.num_persistent = num_persistent
        shape = (num_heads, num_persistent, self.head_dim)
        self.persistent_key = nn.Parameter(torch.randn(shape) / math.sqrt(self.head_dim))
        self.persistent_value = nn.Parameter(torch.randn(shape) / math.sqrt(max(num_persistent, 1)))

    def memory(self) -> Tuple[Tensor, Tensor]:
        """The persistent keys and values as attention sees them: two ``(h, N, d_k)`` tensors."""
        return (
            self.persistent_key * math.sqrt(self.head_dim),
            self.persistent_value * math.sqrt(max(self.num_persistent, 1)),
        )

    def forward(
        self, x: Tensor, mask: Optional[Tensor] = None, *, span_mask: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """Self-attention of ``x`` over itself and the persistent vectors.

        Args:
            x: ``(B, L, d)``.
            mask: optional mask over the *context* keys, boolean (``True`` = may attend) or
                additive float, of shape ``(L, L)``, ``(B, L, L)`` or ``(B, h, L, L)`` (sizes
                of 1 broadcast). It is extended with ``N`` always-visible columns, so it never
                reaches a persistent vector.
            span_mask: optional soft mask in ``[0, 1]`` over the context keys, broadcastable to
                ``(B, h, L, L)``, e.g. an adaptive span's ``m_z(t - r)`` (chapter 8). It
                multiplies the context weights, and the weights over context *and* memory are
                renormalised together, as in the paper; persistent weights are never scaled.

        Returns:
            ``(output, weights)``: ``(B, L, d)`` and ``(B, h, L, L + N)``, the context keys
            first, then the ``N`` persistent ones. Each row of ``weights`` sums to 1.
        """
        require_floating("x", x)
        require_rank("x", x, 3, "(B, L, embed_dim)")
        require_size("x", x, -1, self.embed_dim, "embed_dim")
        require_input_like("x", x, self.projections.q_proj.weight)
        batch, length, _ = x.shape
        scores_shape = (batch, self.num_heads, length, length)
        if mask is not None:
            require_tensor("mask", mask)
            if mask.dim() not in (2, 3, 4):
                raise ValueError(
                    "mask must have shape (L, L), (B, L, L) or (B, num_heads, L, L) over the"
                    f" context, got {fmt_shape(mask.shape)}"
                )
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)  # the same mask for every head
            check_mask(mask, scores_shape, layout="(B, num_heads, L, L) over the context keys")
            if mask.device != x.device:
                raise ValueError(f"mask must be on the device of x ({x.device}), got {mask.device}")
        if span_mask is not None:
            require_floating("span_mask", span_mask)
            if span_mask.device != x.device:
                raise ValueError(
                    f"span_mask must be on the device of x ({x.device}), got {span_mask.device}"
                )
            check_mask(
                span_mask,
                scores_shape,
                name="span_mask",
                layout="(B, num_heads, L, L) over the context keys",
            )

        p = self.projections
        query = split_heads(p.q_proj(x), self.num_heads)  # (B, h, L, d_k)
        key = split_heads(p.k_proj(x), self.num_heads)  # (B, h, L, d_k)
        value = split_heads(p.v_proj(x), self.num_heads)  # (B, h, L, d_k)
        memory_key, memory_value = self.memory()  # (h, N, d_k) each
        n = self.num_persistent
        # (B, h, L + N, d_k)
        key = torch.cat([key, memory_key.to(key.dtype).expand(batch, -1, -1, -1)], dim=2)
        value = torch.cat([value, memory_value.to(value.dtype).expand(batch, -1, -1, -1)], dim=2)
        if mask is not None and n:
            mask = _extend_mask(mask, n)  # (..., L, L + N): the persistent columns always visible
        heads, weights = scaled_dot_product_attention(query, key, value, mask)
        if span_mask is not None:
            heads, weights = _apply_span_mask(weights, value, span_mask.to(weights.dtype), length)
        return p.out_proj(merge_heads(heads)), weights


def extend_mask(mask: Tensor, num_persistent: int) -> Tensor:
    """An ``(..., L, S)`` mask widened to ``(..., L, S + N)`` for ``N`` persistent keys, always visible.

    The columns appended are ``True`` for a boolean mask and ``0`` for an additive one: the
    mask :class:`AllAttention` applies to the context's keys followed by its memory's.
    """
    require_tensor("mask", mask)
    if mask.dim() < 2:
        raise ValueError(
            f"mask must have at least 2 dimensions (..., L, S), got shape {fmt_shape(mask.shape)}"
        )
    require_non_negative_int("num_persistent", num_persistent)
    return _extend_mask(mask, num_persistent)


def _extend_mask(mask: Tensor, n: int) -> Tensor:
    """Append ``n`` columns that keep every persistent key: ``True`` (boolean) or ``0`` (additive)."""
    extra = torch.ones if mask.dtype == torch.bool else torch.zeros
    return torch.cat(
        [mask, extra(*mask.shape[:-1], n, dtype=mask.dtype, device=mask.device)], dim=-1
    )


def _apply_span_mask(
    weights: Tensor, value: Tensor, span_mask: Tensor, length: int
) -> Tuple[Tensor, Tensor]:
    """Scale the context weights by ``span_mask`` and renormalise context and memory jointly."""
    weights = torch.cat([weights[..., :length] * span_mask, weights[..., length:]], dim=-1)
    total = weights.sum(dim=-1, keepdim=True)
    # a row left with nothing stays 0
    weights = weights / total.clamp_min(torch.finfo(weights.dtype).tiny)
    return weights @ value, weights


class AllAttentionBlock(nn.Module):
    """An all-attention layer: ``out = LayerNorm(h + AllAttention(h))``, no feed-forward sublayer.

    Called as ``block(x, mask)`` like ``attncourse.transformer.TransformerBlock``, so it
    stacks in ``attncourse.transformer.CausalLM``. After each call ``self_weights``
    holds the detached weights ``(B, h, L, L + N)`` of the last forward pass.

    Args:
        d_model: width of the hidden states.
        num_heads: heads of the attention.
        num_persistent: ``N`` persistent vectors per head (``N = d_ff`` matches a standard layer).
        bias: biases on the attention's projections (the paper has none).
    """

    def __init__(
        self, d_model: int, num_heads: int, num_persistent: int, *, bias: bool = False
    ) -> None:
        super().__init__()
        self.attn = AllAttention(d_model, num_heads, num_persistent, bias=bias)
        self.norm = nn.LayerNorm(d_model)
        self.self_weights: Optional[Tensor] = None

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """``x``: ``(B, L, d_model)``; ``mask``: the context mask (the causal one in a language
        model). Returns ``(B, L, d_model)``."""
        attended, weights = self.attn(x, mask)
        self.self_weights = weights.detach()
        return self.norm(x + attended)


def ffn_as_attention(query: Tensor, w1: Tensor, w2: Tensor) -> Tuple[Tensor, Tensor]:
    """The feed-forward layer ``W2 softmax(W1 x)`` computed as attention over fixed vectors.

    With the biases dropped and the ReLU replaced by a softmax, an FFN is attention of the
    query ``x`` over ``d_ff`` keys (the rows of ``W1``) and values (the columns of ``W2``),
    with no ``1 / sqrt(d)`` scale.

    Args:
        query: ``(..., d_model)`` the FFN's inputs.
        w1: ``(d_ff, d_model)``, the weight of the first ``nn.Linear(d_model, d_ff)``.
        w2: ``(d_model, d_ff)``, the weight of the second ``nn.Linear(d_ff, d_model)``.

    Returns:
        ``(output, weights)``: ``(..., d_model)`` equal to ``softmax(x W1^T) W2^T``, and the
        weights ``(..., d_ff)`` over the ``d_ff`` persistent vectors.
    """
    for name, t in (("query", query), ("w1", w1), ("w2", w2)):
        require_floating(name, t)
    require_rank("query", query, 1, "(..., d_model)", at_least=True)
    require_rank("w1", w1, 2, "(d_ff, d_model)")
    require_rank("w2", w2, 2, "(d_model, d_ff)")
    require_same_dtype_and_device(query=query, w1=w1, w2=w2)
    if w1.size(1) != query.size(-1) or w2.size(0) != query.size(-1) or w2.size(1) != w1.size(0):
        raise ValueError(
            "w1 must be (d_ff, d_model) and w2 (d_model, d_ff) for query (..., d_model): "
            f"query {fmt_shape(query.shape)}, w1 {fmt_shape(w1.shape)}, w2 {fmt_shape(w2.shape)}"
        )
    output, weights = scaled_dot_product_attention(query.unsqueeze(-2), w1, w2.T, scale=1.0)
    return output.squeeze(-2), weights.squeeze(-2)


def transformer_layer_parameters(
    d_model: int,
    d_ff: int,
    *,
    attention_bias: bool = False,
    ffn_bias: bool = True,
    layer_norm: bool = False,
) -> int:
    """Parameters of one standard (encoder or decoder-only) Transformer layer.

    ``4 d^2`` (W^Q, W^K, W^V, W^O) ``+ 2 d d_ff`` (W1, W2) ``+ d_ff + d`` (the FFN's biases),
    plus ``4 d`` with ``attention_bias`` and ``4 d`` for the two LayerNorms with
    ``layer_norm``. The defaults are the paper's count (no attention biases, norms left
    out); ``attention_bias=True, layer_norm=True`` is this package's
    ``attncourse.transformer.TransformerBlock`` (and BERT's or GPT-2's layer).
    """
    require_positive_int("d_model", d_model)
    require_non_negative_int("d_ff", d_ff)
    for name, flag in (
        ("attention_bias", attention_bias),
        ("ffn_bias", ffn_bias),
        ("layer_norm", layer_norm),
    ):
        require_bool(name, flag)
    d = d_model
    count = 4 * d * d + 2 * d * d_ff
    if ffn_bias and d_ff:
        count += d_ff + d
    if attention_bias:
        count += 4 * d
    if layer_norm:
        count += (4 if d_ff else 2) * d  # a block without FFN (d_ff = 0) has one LayerNorm
    return count


def all_attention_layer_parameters(
    d_model: int, num_persistent: int, *, attention_bias: bool = False, layer_norm: bool = False
) -> int:
    """Parameters of one all-attention layer: ``4 d^2 + 2 N d``.

    ``4 d^2`` for the projections and ``N d_k`` keys plus ``N d_k`` values in each of the
    ``h`` heads (``2 N d`` in all), plus ``4 d`` with ``attention_bias`` and ``2 d`` for its
    one LayerNorm with ``layer_norm`` (:class:`AllAttentionBlock` has both flags'
    parameters when built with ``bias=True``, and the norm always).
    """
    require_positive_int("d_model", d_model)
    require_non_negative_int("num_persistent", num_persistent)
    for name, flag in (("attention_bias", attention_bias), ("layer_norm", layer_norm)):
        require_bool(name, flag)
    d = d_model
    count = 4 * d * d + 2 * num_persistent * d
    if attention_bias:
        count += 4 * d
    if layer_norm:
        count += 2 * d
    return count


def count_parameters(module: nn.Module) -> int:
    """The number of trainable scalars in ``module``."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
