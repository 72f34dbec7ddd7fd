"""Attention masks and the conventions they come in (chapter 3).

This package, like :func:`torch.nn.functional.scaled_dot_product_attention`, uses boolean
masks where ``True`` means *this query may attend to this key*. ``nn.MultiheadAttention``'s
``key_padding_mask`` and boolean ``attn_mask`` use the opposite convention (``True`` means
*ignore*). Floating masks are added to the scores (``0`` keeps, ``-inf`` removes).

=================================================  ==================  =========================
API                                                boolean ``True``    float mask
=================================================  ==================  =========================
``attncourse`` (every function)                    may attend          added to the scores
``F.scaled_dot_product_attention`` ``attn_mask``   may attend          added to the scores
``nn.MultiheadAttention`` ``attn_mask``            ignore              added to the scores
``nn.MultiheadAttention`` ``key_padding_mask``     ignore              added to the scores
``nn.Transformer*`` ``src/tgt_key_padding_mask``   ignore              added to the scores
=================================================  ==================  =========================

Causal masks: :func:`causal_mask` aligns the last query with the last key (bottom right);
``is_causal=True`` in ``F.scaled_dot_product_attention`` aligns the first query with the
first key (top left). They agree when the query and key lengths are equal.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from ._checks import (
    _is_int,
    fmt_shape,
    require_non_negative_int,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "padding_mask",
    "causal_mask",
    "combine_masks",
    "to_additive",
    "from_ignore_mask",
    "to_ignore_mask",
    "to_boolean",
    "from_multihead_masks",
]


def padding_mask(
    lengths: Union[Tensor, Sequence[int]],
    max_len: Optional[int] = None,
    *,
    device: Optional[torch.device] = None,
) -> Tensor:
    """Boolean mask of the real (non-padding) positions of a padded batch.

    Args:
        lengths: ``(B,)`` integer lengths, each in ``[0, max_len]``.
        max_len: padded length ``S``; defaults to ``max(lengths)``.
        device: where to build the mask; defaults to that of ``lengths`` (or the CPU).

    Returns:
        ``(B, S)`` boolean, ``True`` at positions ``j < lengths[b]``. To mask the *keys* of
        scores ``(B, L, S)`` use ``mask[:, None, :]``; for ``(B, h, L, S)`` use
        ``mask[:, None, None, :]``.

    Raises:
        TypeError: ``lengths`` is not a sequence of integers (a float such as ``1.5`` is
            refused, never truncated), or ``max_len`` is not an integer.
        ValueError: ``lengths`` not one-dimensional, a negative length, or one above ``max_len``.
    """
    if not isinstance(lengths, Tensor):
        if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
            raise TypeError(
                f"lengths must be a sequence or tensor of integers, got {type(lengths).__name__}"
            )
        values = list(lengths)
        bad = [
            v
            for v in values
            if not (
                _is_int(v)
                or (
                    isinstance(v, Tensor)
                    and v.dim() == 0
                    and not v.is_floating_point()
                    and v.dtype != torch.bool
                )
            )
        ]
        if bad:
            raise TypeError(
                f"lengths must hold integers, got {bad[0]!r} (of type {type(bad[0]).__name__}) in"
                f" {values!r}"
            )
        lengths = torch.as_tensor([int(v) for v in values], dtype=torch.long)
    if lengths.dtype == torch.bool or lengths.is_floating_point() or lengths.is_complex():
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if lengths.dim() != 1:
        raise ValueError(
            f"lengths must be one-dimensional (B,), got shape {fmt_shape(lengths.shape)}"
        )
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be non-negative, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    else:
        require_non_negative_int("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"lengths must not exceed max_len={max_len}, got {lengths.tolist()}")
    if device is not None:
        lengths = lengths.to(device)
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] < lengths[:, None]


def causal_mask(
    query_len: int, key_len: Optional[int] = None, *, device: Optional[torch.device] = None
) -> Tensor:
    """Boolean mask that lets each query attend to its own position and earlier ones.

    The last query is aligned with the last key: query ``i`` may attend to key ``j`` when
    ``j <= i + (key_len - query_len)``. With ``key_len > query_len`` (a decoder whose new
    queries read a cache of earlier keys) every query sees the whole cache plus the new
    keys up to its own position. This is the *bottom-right* alignment of FlashAttention;
    ``is_causal=True`` in :func:`torch.nn.functional.scaled_dot_product_attention` aligns
    the *top-left* corner instead (``j <= i``), which differs whenever the lengths differ.
    With ``key_len < query_len`` the first ``query_len - key_len`` queries see no key.

    Args:
        query_len: ``L``, the number of queries.
        key_len: ``S``, the number of keys; defaults to ``L``.
        device: where to build the mask.

    Returns:
        ``(L, S)`` boolean, ``True`` = may attend (``L`` or ``S`` may be 0: an empty mask).
    """
    require_non_negative_int("query_len", query_len)
    key_len = query_len if key_len is None else key_len
    require_non_negative_int("key_len", key_len)
    i = torch.arange(query_len, device=device)[:, None]
    j = torch.arange(key_len, device=device)[None, :]
    return j <= i + (key_len - query_len)


def combine_masks(*masks: Optional[Tensor]) -> Optional[Tensor]:
    """Combine masks so that a position is kept only if every mask keeps it.

    Boolean masks are combined with logical AND; if any mask is floating, boolean ones are
    first turned into additive masks and all are summed, in the dtype of the first floating
    mask. ``None`` entries are skipped
    (``combine_masks()`` and ``combine_masks(None)`` return ``None``). The masks broadcast
    against each other like torch tensors.

    Example: ``combine_masks(causal_mask(L), padding_mask(lengths)[:, None, :])`` is a
    ``(B, L, L)`` decoder self-attention mask.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for k, m in enumerate(present):
        require_tensor(f"masks[{k}]", m)
        if m.dtype != torch.bool and not m.is_floating_point():
            raise TypeError(f"masks[{k}] must be boolean or floating, got dtype {m.dtype}")
    try:
        torch.broadcast_shapes(*[m.shape for m in present])
    except RuntimeError:
        seen = ", ".join(fmt_shape(m.shape) for m in present)
        raise ValueError(f"the masks do not broadcast against each other: {seen}") from None
    floats = [m for m in present if m.is_floating_point()]
    if not floats:
        result = present[0]
        for m in present[1:]:
            result = result & m
        return result
    dtype = floats[0].dtype
    result = to_additive(present[0], dtype)
    for m in present[1:]:
        result = result + to_additive(m, dtype)
    return result


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Turn a boolean mask (``True`` = may attend) into an additive one: ``0`` kept, ``-inf`` removed.

    A floating mask is returned cast to ``dtype``, which must be a floating dtype (``-inf``
    has no integer or boolean representation).
    """
    require_tensor("mask", mask)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (e.g. torch.float32), got {dtype!r}")
    if mask.is_floating_point():
        return mask.to(dtype)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean or floating, got dtype {mask.dtype}")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def from_ignore_mask(mask: Tensor) -> Tensor:
    """Convert a mask in ``nn.MultiheadAttention``'s convention to this package's.

    Boolean masks there mean ``True`` = *ignore*; here ``True`` = *may attend*, so they are
    negated. Floating masks mean the same in both and are returned unchanged.
    """
    require_tensor("mask", mask)
    if mask.dtype == torch.bool:
        return ~mask
    if mask.is_floating_point():
        return mask
    raise TypeError(f"mask must be boolean or floating, got dtype {mask.dtype}")


def to_ignore_mask(mask: Tensor) -> Tensor:
    """Convert a mask in this package's convention to ``nn.MultiheadAttention``'s (the inverse
    of :func:`from_ignore_mask`)."""
    return from_ignore_mask(mask)


def to_boolean(mask: Tensor) -> Tensor:
    """Turn an additive mask of ``0`` and ``-inf`` into a boolean one (``True`` = may attend).

    A boolean mask is returned unchanged. A floating mask holding any other value (a finite
    bias, or a large negative number such as ``-1e9``) has no boolean equivalent and raises
    a ``ValueError``.
    """
    require_tensor("mask", mask)
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        raise TypeError(f"mask must be boolean or floating, got dtype {mask.dtype}")
    removed = torch.isneginf(mask)
    if bool((mask[~removed] != 0).any()):
        others = mask[~removed & (mask != 0)].unique()[:5].tolist()
        raise ValueError(
            "only a float mask of 0 (keep) and -inf (remove) converts to boolean; this one also"
            f" holds {others}"
        )
    return ~removed


def from_multihead_masks(
    attn_mask: Optional[Tensor] = None, key_padding_mask: Optional[Tensor] = None, *, num_heads: int
) -> Optional[Tensor]:
    """Convert the masks of ``nn.MultiheadAttention`` into one mask for
    :class:`attncourse.multihead.MultiHeadAttention`.

    Args:
        attn_mask: torch's ``attn_mask``: ``(L, S)`` or ``(B * num_heads, L, S)`` (row
            ``b * num_heads + h`` belongs to batch ``b``, head ``h``); boolean ``True`` = ignore,
            or float added to the scores.
        key_padding_mask: torch's ``(B, S)``; boolean ``True`` = ignore (a padding key), or float.
        num_heads: the number of heads, needed to unfold a 3-D ``attn_mask``.

    Returns:
        ``None`` when both are ``None``; otherwise a mask in this package's convention
        (boolean ``True`` = may attend, or additive float when either input is float) of
        shape ``(L, S)``, ``(B, 1, 1, S)``, ``(B, num_heads, L, S)`` or ``(B, 1, L, S)``,
        which broadcasts to the scores ``(B, num_heads, L, S)``.
    """
    require_positive_int("num_heads", num_heads)
    masks = []
    if attn_mask is not None:
        require_tensor("attn_mask", attn_mask)
        if attn_mask.dim() == 3:
            if attn_mask.size(0) % num_heads:
                raise ValueError(
                    "a 3-D attn_mask has shape (B * num_heads, L, S); its first size"
                    f" {attn_mask.size(0)} is not a multiple of num_heads={num_heads} (attn_mask"
                    f" {fmt_shape(attn_mask.shape)})"
                )
            attn_mask = attn_mask.view(-1, num_heads, *attn_mask.shape[1:])
        elif attn_mask.dim() != 2:
            raise ValueError(
                "attn_mask must have shape (L, S) or (B * num_heads, L, S), got"
                f" {fmt_shape(attn_mask.shape)}"
            )
        masks.append(from_ignore_mask(attn_mask))
    if key_padding_mask is not None:
        require_tensor("key_padding_mask", key_padding_mask)
        if key_padding_mask.dim() != 2:
            raise ValueError(
                f"key_padding_mask must have shape (B, S), got {fmt_shape(key_padding_mask.shape)}"
            )
        masks.append(from_ignore_mask(key_padding_mask)[:, None, None, :])
    return combine_masks(*masks)
