"""The KV cache of attention at inference (chapter 6), grouped-query heads, a sliding window.

A decoder generates one token at a time. Without a cache, every step runs the model over the
whole sequence again; with a cache, each layer keeps the keys and values of the positions it
has seen and a step computes only the new position's query, key and value::

    # the cached positions and the new ones
    keys, values, mask = cache.update(k_new, v_new)
    output = Attention(q_new, keys, values, mask)

* :class:`KVCache`: one layer's cache. With ``window=None`` it keeps every position; with
  ``window=W`` it is a rolling buffer of ``W`` slots (position ``p`` lives in slot ``p % W``),
  the sliding-window cache of Mistral 7B, and each query sees itself and the ``W - 1``
  positions before it.
* :func:`sliding_window_mask`: that window as a mask, chapter 3's bottom-right
  :func:`attncourse.masks.causal_mask` with a lower edge.
* :func:`repeat_kv`: grouped-query attention shares one key/value head among
  ``n_rep = num_heads // num_kv_heads`` query heads; repeating each K/V head that many times gives the
  ``(B, num_heads, S, head_dim)`` tensors that ordinary multi-head attention takes.
* :func:`kv_cache_bytes`: ``2 * num_layers * num_kv_heads * head_dim * length * batch *
  bytes_per_element`` (the book's 2 · layers · kv heads · d_k · S · B · bytes, with S the
  positions cached).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._checks import (
    check_positive_ints,
    fmt_shape,
    require_floating,
    require_non_negative_int,
    require_positive_int,
    require_rank,
    require_same_dtype_and_device,
    require_tensor,
)
from .masks import causal_mask

__all__ = [
    "KVCache",
    "sliding_window_mask",
    "window_mask_from_positions",
    "repeat_kv",
    "kv_cache_bytes",
]


def sliding_window_mask(
    query_len: int,
    key_len: Optional[int] = None,
    *,
    window: int,
    device: Optional[torch.device] = None,
) -> Tensor:
    """Causal mask with a window: query ``i`` may attend to key ``j`` when ``0 <= (i + S - L) - j < window``.

    The last query is aligned with the last key, as in :func:`attncourse.masks.causal_mask`
    (which this equals for ``window >= S``): each query sees its own position and the
    ``window - 1`` positions before it.

    Returns:
        ``(L, S)`` boolean, ``True`` = may attend.
    """
    require_positive_int("window", window)
    causal = causal_mask(query_len, key_len, device=device)
    key_len = causal.size(1)
    i = torch.arange(query_len, device=device)[:, None]
    j = torch.arange(key_len, device=device)[None, :]
    return causal & (i + (key_len - query_len) - j < window)


def window_mask_from_positions(
    query_positions: Tensor, key_positions: Tensor, window: Optional[int] = None
) -> Tensor:
    """Which key each query may attend to, from their absolute positions.

    Key ``j`` is visible to query ``i`` when ``0 <= query_positions[i] - key_positions[j]``
    (and ``< window`` when a window is given). A negative key position marks an empty
    cache slot, never visible.

    Args:
        query_positions: ``(L,)`` integer positions of the queries.
        key_positions: ``(S,)`` integer positions of the keys, in any order.
        window: optional positive int.

    Returns:
        ``(L, S)`` boolean, ``True`` = may attend.
    """
    for name, positions in (("query_positions", query_positions), ("key_positions", key_positions)):
        require_tensor(name, positions)
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(
                f"{name} must be an integer tensor of positions, got dtype {positions.dtype}"
            )
    require_rank("query_positions", query_positions, 1, "(L,)")
    require_rank("key_positions", key_positions, 1, "(S,)")
    if query_positions.device != key_positions.device:
        raise ValueError(
            f"query_positions and key_positions must be on one device, got {query_positions.device}"
            f" and {key_positions.device}"
        )
    if window is not None:
        require_positive_int("window", window)
    return _window_mask(query_positions, key_positions, window)


def _window_mask(query_positions: Tensor, key_positions: Tensor, window: Optional[int]) -> Tensor:
    """:func:`window_mask_from_positions` without the checks."""
    # int64: in an unsigned dtype 0 - 1 wraps to 255 and would make a future key visible
    query_positions, key_positions = query_positions.long(), key_positions.long()
    distance = query_positions[:, None] - key_positions[None, :]
    visible = (distance >= 0) & (key_positions[None, :] >= 0)
    if window is not None:
        visible = visible & (distance < window)
    return visible


class KVCache:
    """One attention layer's cache of keys and values, for incremental decoding.

    Args:
        window: ``None`` keeps every position (the cache grows by one row per step);
            ``W`` keeps the last ``W`` positions in a rolling buffer of ``W`` slots.

    Attributes:
        keys, values: ``(B, kv_heads, S, head_dim)`` stored rows (``None`` before the first
            update). In a rolling buffer, slot ``p % W`` holds position ``p``: the rows are
            not in time order, and :attr:`positions` says which position each row holds.
        positions: ``(S,)`` the absolute position of each stored row (``-1``: an empty slot;
            ``None`` before the first update). A rolling buffer stores all ``W`` slots from the
            first update on, so ``keys`` has ``S = W`` rows while ``len(cache)`` counts the
            filled ones.
        seen: how many positions went through the cache: the position of the next token.
    """

    def __init__(self, window: Optional[int] = None) -> None:
        if window is not None:
            require_positive_int("window", window)
        self.window = window
        self.keys: Optional[Tensor] = None
        self.values: Optional[Tensor] = None
        self.positions: Optional[Tensor] = None
        self.seen = 0

    def __len__(self) -> int:
        """The number of stored rows (at most ``window``)."""
        return 0 if self.positions is None else int((self.positions >= 0).sum())

    def attended_length(self, new: int) -> int:
        """``S = len(self) + new``: how many key rows :meth:`update` returns for ``new`` new positions."""
        require_non_negative_int("new", new)
        return len(self) + new

    def _stored(self) -> Tuple[Tensor, Tensor, Tensor]:
        """The stored rows without empty slots (a rolling buffer still filling holds slots ``0 .. len - 1``)."""
        n = len(self)
        if n == self.keys.size(2):
            return self.keys, self.values, self.positions
        return self.keys[:, :, :n], self.values[:, :, :n], self.positions[:n]

    def _key_positions(self, new_positions: Tensor) -> Tensor:
        """``(S,)`` the positions of the rows :meth:`update` returns: the stored ones, then ``new_positions``."""
        if self.positions is None:
            return new_positions
        return torch.cat([self._stored()[2].to(new_positions.device), new_positions])

    def update(self, key: Tensor, value: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Add the keys and values of ``L`` new positions; return what the new queries attend over.

        Args:
            key: ``(B, kv_heads, L, head_dim)`` keys of positions ``seen .. seen + L - 1``.
            value: ``(B, kv_heads, L, head_dim_v)``.

        Returns:
            ``(keys, values, mask)``: the stored rows followed by the new ones,
            ``(B, kv_heads, S, ...)`` with ``S = len(cache) + L`` (:meth:`attended_length`), and
            the ``(L, S)`` boolean mask that lets each new query see the positions up to its
            own (within the window). The cache then keeps all of them, or, with a window, the
            last ``W`` positions. The cache owns its storage: it never keeps a reference to
            ``key`` or ``value``, so changing them afterwards changes nothing in it.
        """
        require_floating("key", key)
        require_floating("value", value)
        require_rank("key", key, 4, "(B, kv_heads, L, head_dim)")
        require_rank("value", value, 4, "(B, kv_heads, L, head_dim_v)")
        if key.shape[:3] != value.shape[:3]:
            raise ValueError(
                f"key and value must agree in (B, kv_heads, L): key {fmt_shape(key.shape)}, value"
                f" {fmt_shape(value.shape)}"
            )
        require_same_dtype_and_device(key=key, value=value)
        return self._append(key, value)

    def _append(self, key: Tensor, value: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """:meth:`update` for checked ``key``/``value`` (``MultiHeadAttention`` checked its inputs).

        It checks only what no caller can know: that the rows fit those already stored (a
        cache is one layer's; the same cache given to another layer fails here).
        """
        if self.keys is not None and (
            key.shape[:2] != self.keys.shape[:2]
            or key.shape[3] != self.keys.shape[3]
            or value.shape[3] != self.values.shape[3]
        ):
            raise ValueError(
                f"key {fmt_shape(key.shape)} and value {fmt_shape(value.shape)} do not fit the"
                f" cache's rows, keys {fmt_shape(self.keys.shape)} and values"
                f" {fmt_shape(self.values.shape)} (B, kv_heads and the head sizes must stay the same)"
            )
        for name, new, stored in (("key", key, self.keys), ("value", value, self.values)):
            if stored is not None and new.dtype != stored.dtype:
                raise TypeError(
                    f"{name} must have the cache's dtype {stored.dtype}, got {new.dtype}"
                )
            if stored is not None and new.device != stored.device:
                raise ValueError(
                    f"{name} must be on the cache's device {stored.device}, got {new.device}"
                )
        length = key.size(2)
        new_positions = torch.arange(self.seen, self.seen + length, device=key.device)
        if self.keys is None:
            # owned, not the caller's
            keys, values, positions = key.clone(), value.clone(), new_positions
        else:
            stored_keys, stored_values, stored_positions = self._stored()
            keys = torch.cat([stored_keys, key], dim=2)
            values = torch.cat([stored_values, value], dim=2)
            positions = torch.cat([stored_positions, new_positions])
        mask = _window_mask(new_positions, positions, self.window)
        self.seen += length
        if self.window is None:
            self.keys, self.values, self.positions = keys, values, positions
        else:
            self._store_in_buffer(key, value, new_positions)
        return keys, values, mask

    def _store_in_buffer(self, key: Tensor, value: Tensor, new_positions: Tensor) -> None:
        """Write the last ``min(L, W)`` new positions into slots ``position % W`` (the rolling buffer)."""
        window = self.window
        if self.keys is None:
            batch, heads, _, head_dim = key.shape
            self.keys = key.new_zeros(batch, heads, window, head_dim)
            self.values = value.new_zeros(batch, heads, window, value.size(3))
            self.positions = torch.full((window,), -1, dtype=torch.long, device=key.device)
        keep = slice(max(0, key.size(2) - window), key.size(2))
        slots = new_positions[keep] % window
        self.keys[:, :, slots] = key[:, :, keep]
        self.values[:, :, slots] = value[:, :, keep]
        self.positions[slots] = new_positions[keep]

    def nbytes(self) -> int:
        """Bytes held by the stored keys and values."""
        if self.keys is None:
            return 0
        return (
            self.keys.numel() * self.keys.element_size()
            + self.values.numel() * self.values.element_size()
        )


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """``(B, kv_heads, S, head_dim)`` -> ``(B, kv_heads * n_rep, S, head_dim)``.

    ``n_rep`` is the size of a group, ``h / g`` query heads per K/V head, not the number of
    groups ``g`` (the ``G`` of the GQA paper's "GQA-G", which is ``kv_heads`` here). K/V head
    ``j`` serves query heads ``j * n_rep .. (j + 1) * n_rep - 1``: each K/V head is repeated
    ``n_rep`` times in place (``repeat_interleave`` along the head dimension, which is what
    ``F.scaled_dot_product_attention(..., enable_gqa=True)`` does).
    """
    require_tensor("x", x)
    require_rank("x", x, 4, "(B, kv_heads, S, head_dim)")
    require_positive_int("n_rep", n_rep)
    return _repeat_kv(x, n_rep)


def _repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """:func:`repeat_kv` without the checks."""
    if n_rep == 1:
        return x
    batch, heads, length, head_dim = x.shape
    return (
        x[:, :, None]
        .expand(batch, heads, n_rep, length, head_dim)
        .reshape(batch, heads * n_rep, length, head_dim)
    )


def kv_cache_bytes(
    *,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    length: int,
    batch: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes of a KV cache: ``2 (K and V) * num_layers * num_kv_heads * head_dim * length * batch
    * bytes_per_element``, with ``length`` the positions cached (the book's S)."""
    # of Python ints: numpy int32 sizes would overflow the product silently
    return 2 * math.prod(
        check_positive_ints(
            num_layers=num_layers,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            length=length,
            batch=batch,
            bytes_per_element=bytes_per_element,
        )
    )
