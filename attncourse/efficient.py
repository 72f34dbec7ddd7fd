"""Memory-efficient exact attention: the FlashAttention algorithm in plain PyTorch (chapter 7).

The naive computation builds the whole ``(L, S)`` score matrix, so its memory grows like
``L * S``. :func:`tiled_attention` walks over the keys in blocks and keeps, for every query,
three running quantities instead (Milakov & Gimelshein 2018; Dao et al. 2022):

* ``m``: the largest score seen so far (the softmax is invariant to this shift; it only
  keeps ``exp`` from overflowing),
* ``l``: the sum of ``exp(score - m)`` over the keys seen so far,
* ``acc``: the sum of ``exp(score - m) * value`` over the keys seen so far.

When a new block raises the maximum from ``m`` to ``m_new``, the old sums are rescaled by
``exp(m - m_new)``; after the last block ``acc / l`` is exactly ``softmax(scores) @ value``.
Only one ``(query block, key block)`` tile of scores exists at any time.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ._checks import (
    broadcast_batch,
    check_attention_inputs,
    default_scale,
    fmt_shape,
    require_bool,
    require_floating,
    require_positive_int,
    require_same_dtype_and_device,
)
from .kernels.tiles import causal_key_stop

__all__ = ["tiled_attention", "online_softmax_update", "tile_schedule"]


def online_softmax_update(
    running_max: Tensor, running_sum: Tensor, scores: Tensor
) -> Tuple[Tensor, Tensor, Tensor]:
    """One step of the online softmax: fold a new block of scores into the running statistics.

    Args:
        running_max: ``(...,)`` the maximum score seen so far (``-inf`` before the first block).
        running_sum: ``(...,)`` the sum of ``exp(score - running_max)`` seen so far.
        scores: ``(..., B)`` the new block of scores.

    Returns:
        ``(new_max, new_sum, correction)``: the updated maximum and sum, and the factor
        ``exp(running_max - new_max)`` by which anything accumulated against the old
        maximum (the sum, the weighted values) must be multiplied. A row that has seen only
        ``-inf`` keeps ``new_max = -inf``, ``new_sum = 0`` and gets ``correction = 0``.
    """
    for name, x in (("running_max", running_max), ("running_sum", running_sum), ("scores", scores)):
        require_floating(name, x)
    if scores.dim() == 0:
        raise ValueError("scores must have at least 1 dimension (..., B), got a 0-d tensor")
    if scores.size(-1) == 0:
        raise ValueError(
            f"scores must hold at least one score per row, got shape {fmt_shape(scores.shape)}"
        )
    require_same_dtype_and_device(running_max=running_max, running_sum=running_sum, scores=scores)
    broadcast_batch(
        running_max=running_max.shape, running_sum=running_sum.shape, scores=scores.shape[:-1]
    )
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)  # -inf - -inf would be NaN
    correction = torch.exp(running_max - shift)
    new_sum = running_sum * correction + torch.exp(scores - shift[..., None]).sum(dim=-1)
    return new_max, new_sum, correction


def _attend_query_block(
    query: Tensor,
    key_t: Tensor,
    value: Tensor,
    mask: Optional[Tensor],
    q_start: int,
    causal_offset: Optional[int],
    block_n: int,
) -> Tensor:
    """Exact attention of one block of ``block_m`` (already scaled) queries ``(..., block_m, d_k)``
    over all keys, ``block_n`` keys at a time (the tiles of :mod:`attncourse.kernels.tiles`).

    ``key_t`` is the transposed keys ``(..., d, S)``, contiguous so that every tile's product
    reads its keys in the order the matrix multiply wants them.

    ``mask`` is ``None`` or ``(..., block_m, S)`` (the rows of this query block); ``causal_offset``
    is ``S - L`` for causal attention (query ``i`` sees key ``j <= i + S - L``), else ``None``.
    """
    block_m, seq_k = query.size(-2), key_t.size(-1)
    batch = query.shape[:-2]
    inplace = not torch.is_grad_enabled() or not (
        query.requires_grad or key_t.requires_grad or value.requires_grad
    )
    # the statistics have the batch shape of the scores (query and key); the accumulated
    # output that of the scores and the values together (value may bring batch dimensions)
    stats_shape = torch.broadcast_shapes(batch, key_t.shape[:-2]) + (block_m,)
    running_max = torch.full(stats_shape, float("-inf"), dtype=query.dtype, device=query.device)
    running_sum = torch.zeros(stats_shape, dtype=query.dtype, device=query.device)
    acc_batch = torch.broadcast_shapes(stats_shape[:-1], value.shape[:-2])
    acc = torch.zeros(acc_batch + (block_m, value.size(-1)), dtype=query.dtype, device=query.device)

    key_end = seq_k
    if causal_offset is not None:  # keys after the last query's horizon are never seen: skip them
        key_end = causal_key_stop(q_start + block_m, seq_k, seq_k - causal_offset)
    for k_start in range(0, max(key_end, 0), block_n):
        k_stop = min(k_start + block_n, key_end)
        scores = query @ key_t[..., :, k_start:k_stop]  # (..., block_m, block_n): the only tile
        if mask is not None:
            tile = mask[..., k_start:k_stop]
            if tile.dtype == torch.bool:
                scores = (
                    scores.masked_fill_(~tile, float("-inf"))
                    if inplace
                    else scores.masked_fill(~tile, float("-inf"))
                )
            else:
                scores = scores.add_(tile) if inplace else scores + tile
        # the tile crosses the diagonal
        if causal_offset is not None and k_stop - 1 > q_start + causal_offset:
            rows = torch.arange(q_start, q_start + block_m, device=query.device)[:, None]
            cols = torch.arange(k_start, k_stop, device=query.device)[None, :]
            future = cols > rows + causal_offset
            scores = (
                scores.masked_fill_(future, float("-inf"))
                if inplace
                else scores.masked_fill(future, float("-inf"))
            )

        # the shift needs no gradient
        new_max = torch.maximum(running_max, scores.detach().amax(dim=-1))
        # a row with no key yet: avoid -inf - -inf
        shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)
        correction = torch.exp(running_max - shift)  # rescales what was summed against the old max
        if inplace:
            # unnormalised weights, in the tile's memory
            weights = scores.sub_(shift[..., None]).exp_()
            running_sum.mul_(correction).add_(weights.sum(dim=-1))
            acc.mul_(correction[..., None]).add_(weights @ value[..., k_start:k_stop, :])
        else:
            weights = torch.exp(scores - shift[..., None])
            running_sum = running_sum * correction + weights.sum(dim=-1)
            acc = acc * correction[..., None] + weights @ value[..., k_start:k_stop, :]
        running_max = new_max
    empty = running_sum == 0  # a query with every key masked: zeros, as in the reference
    return acc / running_sum.masked_fill(empty, 1.0)[..., None]


def tiled_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Optional[Tensor] = None,
    *,
    causal: bool = False,
    scale: Optional[float] = None,
    block_m: int = 256,
    block_n: int = 1024,
) -> Tensor:
    """Exact scaled dot-product attention computed block by block, without the ``(L, S)`` scores.

    Equal (up to rounding) to ``scaled_dot_product_attention(query, key, value, mask)[0]``,
    but the largest intermediate is one tile of ``block_m x block_n`` scores per batch entry,
    so the extra memory does not grow with ``L * S``.

    Args:
        query: ``(..., L, d_k)``.
        key: ``(..., S, d_k)``.
        value: ``(..., S, d_v)``.
        mask: optional, broadcastable to ``(..., L, S)``; boolean (``True`` = may attend) or
            floating (added to the scores), as in :func:`attncourse.attention.scaled_dot_product_attention`.
        causal: also apply ``attncourse.masks.causal_mask`` (the last query aligned with
            the last key: query ``i`` sees key ``j <= i + S - L``). Key blocks that lie
            entirely in a query block's future are skipped, not computed and masked.
        scale: multiplies ``Q K^T``; defaults to ``1 / sqrt(d_k)`` (which needs ``d_k > 0``).
        block_m: queries per tile (FlashAttention-2's ``B_r``; see
            :mod:`attncourse.kernels.tiles`).
        block_n: keys per tile (``B_c``). Neither needs to divide ``L`` or ``S``.

    Returns:
        ``(..., L, d_v)``, the batch dimensions broadcast as in :func:`torch.matmul`. A query
        that may attend to no key gets a zero output, never NaN. float16 and bfloat16 inputs
        are computed in float32 and the output rounded once. ``L = 0`` gives an empty
        ``(..., 0, d_v)`` output; ``S = 0`` gives zeros.

    Autograd works through it; when gradients are needed each query block is wrapped in
    :func:`torch.utils.checkpoint.checkpoint`, so that the backward pass recomputes its
    tiles instead of storing them (memory ``block_m x S`` per batch entry).
    """
    check_attention_inputs(query, key, value, mask)
    seq_q, seq_k = query.size(-2), key.size(-2)
    require_bool("causal", causal)
    require_positive_int("block_m", block_m)
    require_positive_int("block_n", block_n)
    scale = default_scale(query, scale)
    if seq_q == 0:  # no query: an empty output of the broadcast batch shape
        batch = broadcast_batch(query=query.shape[:-2], key=key.shape[:-2], value=value.shape[:-2])
        return value.new_zeros((*batch, 0, value.size(-1)))

    out_dtype = query.dtype
    if out_dtype in (torch.float16, torch.bfloat16):  # accumulate in float32
        query, key, value = query.float(), key.float(), value.float()
        if mask is not None and mask.is_floating_point():
            mask = mask.float()
    elif mask is not None and mask.is_floating_point():
        mask = mask.to(query.dtype)
    if mask is not None:  # a view with explicit (L, S): no memory is allocated
        mask = mask.expand(*mask.shape[:-2], seq_q, seq_k)
    query = query * scale  # (..., L, d_k): scaling the queries once costs L*d, not L*S
    key_t = key.transpose(-2, -1).contiguous()  # (..., d_k, S)
    causal_offset = seq_k - seq_q if causal else None
    use_checkpoint = torch.is_grad_enabled() and (
        query.requires_grad or key.requires_grad or value.requires_grad
    )

    blocks = []
    for q_start in range(0, seq_q, block_m):
        q_stop = min(q_start + block_m, seq_q)
        rows = mask[..., q_start:q_stop, :] if mask is not None else None
        args = (
            query[..., q_start:q_stop, :],
            key_t,
            value,
            rows,
            q_start,
            causal_offset,
            block_n,
        )
        if use_checkpoint:
            blocks.append(checkpoint(_attend_query_block, *args, use_reentrant=False))
        else:
            blocks.append(_attend_query_block(*args))
    return torch.cat(blocks, dim=-2).to(out_dtype)


def tile_schedule(
    seq_q: int,
    seq_k: int,
    *,
    causal: bool = False,
    block_m: int = 256,
    block_n: int = 1024,
) -> List[Tuple[int, int, int, int, bool]]:
    """The tiles of scores that :func:`tiled_attention` computes, in the order it computes them.

    Returns a list of ``(q_start, q_stop, k_start, k_stop, crosses_diagonal)``: query rows
    ``q_start:q_stop`` against key columns ``k_start:k_stop``; ``crosses_diagonal`` is ``True``
    for a causal tile that holds future keys, computed in full and then masked. The same
    bounds as the loops of :func:`tiled_attention` (query blocks of ``block_m``, key blocks of
    ``block_n``, and with ``causal`` no key after a block's last query).
    """
    require_positive_int("seq_q", seq_q)
    require_positive_int("seq_k", seq_k)
    require_bool("causal", causal)
    require_positive_int("block_m", block_m)
    require_positive_int("block_n", block_n)
    offset = seq_k - seq_q
    tiles = []
    for q_start in range(0, seq_q, block_m):
        q_stop = min(q_start + block_m, seq_q)
        key_end = causal_key_stop(q_stop, seq_k, seq_q) if causal else seq_k
        for k_start in range(0, max(key_end, 0), block_n):
            k_stop = min(k_start + block_n, key_end)
            tiles.append(
                (q_start, q_stop, k_start, k_stop, causal and k_stop - 1 > q_start + offset)
            )
    return tiles
