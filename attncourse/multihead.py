"""Multi-head attention (chapter 2), and its grouped-query copy (chapter 6).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),   d_k = d_v = d_model / h.

One ``nn.Linear`` per projection holds all heads' matrices side by side; splitting its
output into ``h`` slices of ``head_dim`` columns gives each head its own projection.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from ._checks import (
    check_mask,
    check_probability,
    fmt_shape,
    require_bool,
    require_floating,
    require_heads_divide,
    require_positive_int,
    require_rank,
    require_size,
    require_tensor,
)
from .attention import _attention
from .kv_cache import KVCache, _repeat_kv
from .masks import combine_masks
from .positions import _alibi, _rope

__all__ = ["MultiHeadAttention", "split_heads", "merge_heads", "mean_pool_kv_heads"]


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, L, num_heads * head_dim)`` -> ``(B, num_heads, L, head_dim)``."""
    require_tensor("x", x)
    require_positive_int("num_heads", num_heads)
    require_rank("x", x, 3, "(B, L, num_heads * head_dim)")
    batch, length, width = x.shape
    if width % num_heads:
        raise ValueError(
            f"the last dimension of x ({width}) is not divisible by num_heads={num_heads}"
        )
    return _split_heads(x, num_heads)


def _split_heads(x: Tensor, num_heads: int) -> Tensor:
    """:func:`split_heads` without the checks."""
    batch, length, width = x.shape
    return x.view(batch, length, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, num_heads, L, head_dim)`` -> ``(B, L, num_heads * head_dim)``: the concatenation of the heads."""
    require_tensor("x", x)
    require_rank("x", x, 4, "(B, num_heads, L, head_dim)")
    return _merge_heads(x)


def _merge_heads(x: Tensor) -> Tensor:
    """:func:`merge_heads` without the checks."""
    batch, num_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * head_dim)


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention, batch first.

    Args:
        embed_dim: ``d_model``, the width of the queries and of the output.
        num_heads: ``h``; must divide ``embed_dim``. Each head has ``head_dim = embed_dim // h``.
        kdim: width of the key input (defaults to ``embed_dim``).
        vdim: width of the value input (defaults to ``embed_dim``).
        bias: whether the four projections have biases.
        dropout: attention dropout, as in ``nn.MultiheadAttention``: in training mode each
            attention weight is zeroed with probability ``dropout`` and the kept ones are
            scaled by ``1 / (1 - dropout)`` before they weight the values, so the output is
            unchanged in expectation; in ``eval()`` mode (and with the default ``0.0``) nothing
            is dropped. The weights returned are the dropped-out ones, as torch's are.
        num_kv_heads: key/value heads (defaults to ``num_heads``, multi-head attention); it
            must divide ``num_heads``. Each K/V head serves ``num_heads // num_kv_heads``
            consecutive query heads: grouped-query attention, multi-query with ``1``
            (chapter 6). The key and value projections are ``num_kv_heads * head_dim`` wide.
        positional: ``None`` (default): the layer knows nothing of positions. ``"rope"``
            rotates each head's queries and keys by their absolute positions
            (:func:`attncourse.positions.apply_rope`), ``"alibi"`` adds ALiBi's bias
            ``-slope_h * (m - n)`` to the scores (chapter 5): both make a score depend on the
            offset ``m - n`` only. Positions are those of self-attention: keys ``0 .. S - 1``
            and the queries the last ``L`` of them, or, with a ``cache``, the positions the cache
            gives them (a cache stores the keys already rotated).

    Shapes in :meth:`forward`: query ``(B, L, embed_dim)``, key ``(B, S, kdim)``, value
    ``(B, S, vdim)``; output ``(B, L, embed_dim)`` and per-head weights ``(B, h, L, S)``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kdim: Optional[int] = None,
        vdim: Optional[int] = None,
        bias: bool = True,
        dropout: float = 0.0,
        num_kv_heads: Optional[int] = None,
        positional: Optional[str] = None,
    ) -> None:
        super().__init__()
        require_heads_divide(
            "embed_dim", embed_dim, num_heads, " (each head gets embed_dim // num_heads columns)"
        )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        require_positive_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads} "
                "(each key/value head serves num_heads // num_kv_heads query heads)"
            )
        self.num_kv_heads = num_kv_heads
        self.positional = _check_positional(positional, embed_dim // num_heads)
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        require_positive_int("kdim", kdim)
        require_positive_int("vdim", vdim)
        self.dropout = check_probability("dropout", dropout)
        require_bool("bias", bias)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim, self.vdim = kdim, vdim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # W^Q = [W_1^Q ... W_h^Q]
        kv_width = num_kv_heads * self.head_dim  # embed_dim for multi-head attention
        self.k_proj = nn.Linear(kdim, kv_width, bias=bias)  # W^K
        self.v_proj = nn.Linear(vdim, kv_width, bias=bias)  # W^V
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # W^O

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Optional[Tensor] = None,
        *,
        cache: Optional[KVCache] = None,
    ) -> Tuple[Tensor, Tensor]:
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: ``(B, L, embed_dim)``.
            key: ``(B, S, kdim)``.
            value: ``(B, S, vdim)``.
            mask: optional, boolean (``True`` = may attend) or additive float, of shape
                ``(L, S)``, ``(B, L, S)`` (the same for every head) or ``(B, h, L, S)``; any of
                these sizes may be 1 to broadcast. A key padding mask ``(B, S)`` from
                :func:`attncourse.masks.padding_mask` goes in as ``mask[:, None, :]``.
                Masks in ``nn.MultiheadAttention``'s convention are converted by
                :func:`attncourse.masks.from_multihead_masks`.
            cache: optional :class:`attncourse.kv_cache.KVCache` of this layer (self-attention
                at inference, chapter 6). ``key``/``value`` are then the ``L`` new positions;
                they are appended to the cache and the queries attend over the cached and the
                new positions (``S = len(cache) + L``) under the cache's causal (windowed)
                mask, combined with ``mask`` when one is given (shape ``(..., L, S)``).

        Returns:
            ``(output, weights)``: ``(B, L, embed_dim)`` and ``(B, h, L, S)``. A query whose
            keys are all masked gets zero weights (``nn.MultiheadAttention`` gives NaN there).

        Raises:
            TypeError: a non-floating input, dtypes that differ from the parameters', a mask
                that is neither boolean nor floating.
            ValueError: a wrong rank or feature size, batch sizes or key/value lengths that
                differ, a mask that does not broadcast, inputs on another device.
        """
        mask, source = self._check_inputs(query, key, value, mask, cache)
        length = query.size(1)
        q = _split_heads(self.q_proj(query), self.num_heads)  # (B, h, L, head_dim)
        k = _split_heads(self.k_proj(key), self.num_kv_heads)  # (B, h_kv, S, head_dim)
        v = _split_heads(self.v_proj(value), self.num_kv_heads)  # (B, h_kv, S, head_dim)
        if self.positional is not None:
            query_positions, key_positions = self._positions(source, length, cache, query.device)
        if self.positional == "rope":  # the cache stores the keys rotated
            q = _rope(q, query_positions)
            k = _rope(k, query_positions if cache is not None else key_positions)
        if cache is not None:
            # K and V of the new positions join the cache: (B, h_kv, S, head_dim), cached rows first
            k, v, cache_mask = cache._append(k, v)
            mask = cache_mask if mask is None else combine_masks(cache_mask, mask)
        if self.positional == "alibi":
            bias = _alibi(self.num_heads, query_positions, key_positions, q.dtype)  # (h, L, S)
            mask = bias if mask is None else combine_masks(mask, bias)
        # (B, h, S, head_dim): K/V head g serves query heads g * group ... (g + 1) * group - 1
        group = self.num_heads // self.num_kv_heads
        k, v = _repeat_kv(k, group), _repeat_kv(v, group)
        heads, weights = _attention(q, k, v, mask, self.head_dim**-0.5)
        if self.training and self.dropout > 0.0:  # attention dropout on the weights, training only
            weights = nn.functional.dropout(weights, self.dropout)
            heads = weights @ v
        return self.out_proj(_merge_heads(heads)), weights

    def _check_inputs(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Optional[Tensor],
        cache: Optional[KVCache],
    ) -> Tuple[Optional[Tensor], int]:
        """:meth:`forward`'s checks, once, at the boundary: its steps after them are unchecked.

        Returns the mask with a head axis where it had none (``(B, L, S)`` -> ``(B, 1, L, S)``)
        and ``S``, the length attended over (the cached and the new positions with a cache).
        """
        self._check_query_key_value(query, key, value)
        _check_cache(cache)
        batch, length, source = query.size(0), query.size(1), key.size(1)
        # with a cache, key and value are the new positions; the queries also see the cached ones
        if cache is not None:
            source = cache.attended_length(source)
        if mask is not None:
            mask = self._check_mask(mask, batch, length, source)
        return mask, source

    def _check_query_key_value(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        """Dtypes, ranks and feature sizes of the three inputs, then what they must share: batch
        size, key/value length, the parameters' dtype and device."""
        require_floating("query", query)
        require_floating("key", key)
        require_floating("value", value)
        require_rank("query", query, 3, "(B, L, embed_dim)")
        require_rank("key", key, 3, "(B, S, kdim)")
        require_rank("value", value, 3, "(B, S, vdim)")
        require_size("query", query, -1, self.embed_dim, "embed_dim")
        require_size("key", key, -1, self.kdim, "kdim")
        require_size("value", value, -1, self.vdim, "vdim")
        if not query.size(0) == key.size(0) == value.size(0):
            raise ValueError(
                "query, key and value must have the same batch size: query"
                f" {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}, value"
                f" {fmt_shape(value.shape)}"
            )
        if key.size(1) != value.size(1):
            raise ValueError(
                f"key and value must have the same length S: key {fmt_shape(key.shape)}, value"
                f" {fmt_shape(value.shape)}"
            )
        param = self.q_proj.weight
        if not query.dtype == key.dtype == value.dtype == param.dtype:
            raise TypeError(
                "query, key and value must have the dtype of the layer's parameters"
                f" ({param.dtype}), got {query.dtype}, {key.dtype} and {value.dtype}; convert the"
                " inputs or the layer (e.g. layer.to(dtype))"
            )
        if not query.device == key.device == value.device == param.device:
            raise ValueError(
                "query, key and value must be on the device of the layer's parameters"
                f" ({param.device}), got {query.device}, {key.device} and {value.device}"
            )

    def _check_mask(self, mask: Tensor, batch: int, length: int, source: int) -> Tensor:
        """``mask`` broadcasts to ``(B, h, L, S)``; returned with a head axis where it had none."""
        require_tensor("mask", mask)
        if (
            mask.dim() == 2
            and mask.shape == (batch, source)
            and (batch, source) != (length, source)
        ):
            raise ValueError(
                f"mask of shape {fmt_shape(mask.shape)} looks like a key padding mask (B, S);"
                " the layer takes (L, S), (B, L, S) or (B, num_heads, L, S): pass mask[:,"
                " None, :] to mask the keys of every query"
            )
        # (B, L, S): the same mask for every head
        if mask.dim() == 3:
            check_mask(mask, (batch, length, source), layout="(B, L, S)")
            mask = mask.unsqueeze(1)
        elif mask.dim() in (2, 4):
            check_mask(
                mask,
                (batch, self.num_heads, length, source),
                layout="(L, S) or (B, num_heads, L, S)",
            )
        else:
            raise ValueError(
                "mask must have shape (L, S), (B, L, S) or (B, num_heads, L, S) ="
                f" {fmt_shape((batch, self.num_heads, length, source))}, got"
                f" {fmt_shape(mask.shape)}"
            )
        return mask

    def _positions(
        self, source: int, length: int, cache: Optional[KVCache], device: torch.device
    ) -> Tuple[Tensor, Tensor]:
        """Absolute positions ``(L,)`` of the new queries and ``(S,)`` of the keys they attend
        over, cached rows first: the last ``L`` of ``0 .. S - 1``, or those the cache gives."""
        first = source - length if cache is None else cache.seen
        query_positions = torch.arange(first, first + length, device=device)
        if cache is None:
            return query_positions, torch.arange(source, device=device)
        return query_positions, cache._key_positions(query_positions)

    @classmethod
    def _shaped_like(
        cls, module: nn.Module, bias: bool, weight: Tensor, **options: object
    ) -> "MultiHeadAttention":
        """A new layer with ``module``'s ``embed_dim``, ``num_heads``, ``kdim``, ``vdim`` and
        ``dropout`` (torch's ``MultiheadAttention`` names them as this class does), ``bias`` and
        ``options``, on the device and in the dtype of ``weight``: the copy that receives
        ``module``'s weights."""
        layer = cls(
            module.embed_dim,
            module.num_heads,
            kdim=module.kdim,
            vdim=module.vdim,
            bias=bias,
            dropout=module.dropout,
            **options,
        )
        return layer.to(device=weight.device, dtype=weight.dtype)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Build a layer with the weights of a ``torch.nn.MultiheadAttention``.

        Works for ``batch_first`` or not (this layer is always batch first: transpose the
        inputs of a sequence-first module), with or without bias, and with ``kdim``/``vdim``.
        Torch's masks use ``True`` = ignore and a 3-D ``attn_mask`` of shape
        ``(B * num_heads, L, S)``: convert ``attn_mask`` and ``key_padding_mask`` together with
        :func:`attncourse.masks.from_multihead_masks` before passing them here.
        The layer gets ``module``'s dropout probability: it equals ``module`` in ``eval()``
        mode, and in training mode it draws the same dropout mask from the same random
        state (when torch is asked for the weights, ``need_weights=True``). Not supported
        (``ValueError``): ``add_bias_kv`` and ``add_zero_attn``.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}"
            )
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("from_torch does not support add_bias_kv or add_zero_attn")
        bias = module.in_proj_bias is not None
        layer = cls._shaped_like(module, bias, module.out_proj.weight)
        e = module.embed_dim
        with torch.no_grad():
            if module._qkv_same_embed_dim:
                w_q, w_k, w_v = module.in_proj_weight.split(e)
            else:
                w_q, w_k, w_v = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
            layer.q_proj.weight.copy_(w_q)
            layer.k_proj.weight.copy_(w_k)
            layer.v_proj.weight.copy_(w_v)
            layer.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                b_q, b_k, b_v = module.in_proj_bias.split(e)
                layer.q_proj.bias.copy_(b_q)
                layer.k_proj.bias.copy_(b_k)
                layer.v_proj.bias.copy_(b_v)
                layer.out_proj.bias.copy_(module.out_proj.bias)
        return layer


def _check_cache(cache: object) -> None:
    """``cache`` is ``None`` or one :class:`KVCache` (a list of them is the usual slip)."""
    if cache is not None and not isinstance(cache, KVCache):
        hint = (
            " (CausalLM.new_cache() returns one KVCache per block: give each layer its own,"
            " cache[i])"
            if isinstance(cache, (list, tuple))
            else ""
        )
        raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}{hint}")


def _check_positional(positional: object, head_dim: int) -> Optional[str]:
    """``positional`` of :class:`MultiHeadAttention`: ``None``, ``"rope"`` or ``"alibi"``."""
    if positional is not None and not isinstance(positional, str):
        raise TypeError(
            "positional must be None, 'rope' or 'alibi', got"
            f" {type(positional).__name__} {positional!r}"
        )
    if positional not in (None, "rope", "alibi"):
        raise ValueError(
            "positional must be None, 'rope' or 'alibi' (relative positions inside attention),"
            f" got {positional!r}"
        )
    if positional == "rope" and head_dim % 2:
        raise ValueError(
            f"positional='rope' rotates pairs of features, so head_dim must be even, got"
            f" head_dim={head_dim}"
        )
    return positional


def mean_pool_kv_heads(layer: MultiHeadAttention, num_kv_heads: int) -> MultiHeadAttention:
    """A grouped-query copy of a multi-head ``MultiHeadAttention`` layer, its K/V heads mean-pooled.

    The ``num_heads`` key (and value) projections are split into ``num_kv_heads`` groups of
    consecutive heads; each group's weight rows (and biases) are averaged into one K/V head,
    as Ainslie et al. (2023) convert a multi-head checkpoint before uptraining. The query
    and output projections are copied unchanged. ``num_kv_heads = 1`` gives multi-query
    attention; ``num_kv_heads = num_heads`` an exact copy.
    """
    if not isinstance(layer, MultiHeadAttention):
        raise TypeError(
            f"layer must be an attncourse MultiHeadAttention, got {type(layer).__name__}"
        )
    if layer.num_kv_heads != layer.num_heads:
        raise ValueError(
            "layer must be multi-head (num_kv_heads == num_heads), got"
            f" num_kv_heads={layer.num_kv_heads}, num_heads={layer.num_heads}"
        )
    bias = layer.q_proj.bias is not None
    pooled = MultiHeadAttention._shaped_like(
        layer, bias, layer.q_proj.weight, num_kv_heads=num_kv_heads, positional=layer.positional
    )
    group, head_dim = layer.num_heads // num_kv_heads, layer.head_dim
    with torch.no_grad():
        pooled.q_proj.load_state_dict(layer.q_proj.state_dict())
        pooled.out_proj.load_state_dict(layer.out_proj.state_dict())
        for source, target in ((layer.k_proj, pooled.k_proj), (layer.v_proj, pooled.v_proj)):
            weight = source.weight.view(num_kv_heads, group, head_dim, -1).mean(dim=1)
            target.weight.copy_(weight.reshape(num_kv_heads * head_dim, -1))
            if bias:
                target.bias.copy_(
                    source.bias.view(num_kv_heads, group, head_dim).mean(dim=1).reshape(-1)
                )
    return pooled.train(layer.training)  # the copy is in the mode of the original
