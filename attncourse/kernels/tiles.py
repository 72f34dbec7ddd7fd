"""Tile arithmetic: which tiles of the ``(L, S)`` score matrix a blocked computation visits,
in plain Python (no triton), for chapters 7, 8 and 10.

One vocabulary (FlashAttention-2's and Triton's tutorial's): a tile holds ``block_m`` queries
(the paper's ``B_r``, the kernels' ``BLOCK_M``) by ``block_n`` keys (``B_c``, ``BLOCK_N``).
Chapter 7's :func:`attncourse.efficient.tiled_attention` takes them by the same names,
``block_m`` and ``block_n``, and chapter 8's
:func:`attncourse.adaptive_span.adaptive_span_attention` its query blocks as ``block_m`` (the
keys per block follow from the window); the three compute their blocks here
(:func:`num_blocks`, :func:`causal_key_stop`).

The Triton kernels of :mod:`attncourse.kernels.flash` cut the score matrix into tiles of
``block_m`` by ``block_n``. One program owns one block of queries (the forward pass and
``dQ``) or one block of keys (``dK``, ``dV``) and loops over the blocks on the other side that
can hold a weight other than zero. :func:`key_block_range` and :func:`query_block_range`
compute the same ranges as the kernels, without triton, so that the chapter can draw them and
the tests can count them.

Conventions (those of the package): a causal mask aligns the last query with the last key
(:func:`attncourse.masks.causal_mask`): query ``i`` may attend to key ``j`` when
``j <= i + (S - L)``. An adaptive span of ``z`` with ramp ``R`` gives a weight other than
zero to the keys at distance ``0 <= i - j < W`` with ``W = ceil(z + R)``
(:func:`attncourse.adaptive_span.span_window`).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .._checks import (
    check_positive_ints,
    require_bool,
    require_floating,
    require_non_negative_int,
    require_positive_int,
    require_positive_number,
    require_rank,
)

__all__ = [
    "num_blocks",
    "causal_key_stop",
    "key_block_range",
    "query_block_range",
    "tile_map",
    "span_tile_maps",
    "span_windows",
]


def num_blocks(length: int, block: int) -> int:
    """``ceil(length / block)``: the blocks of ``block`` rows that cover ``length`` (the last
    one may stick out past ``length``); Triton's ``cdiv``."""
    require_non_negative_int("length", length)
    require_positive_int("block", block)
    return -(-length // block)


def causal_key_stop(query_stop: int, key_len: int, query_len: int) -> int:
    """One past the last key that the queries before ``query_stop`` may attend under the causal
    mask: ``min(S, query_stop + S - L)``; ``<= 0`` when they may attend none."""
    return min(key_len, query_stop + key_len - query_len)


def key_block_range(
    query_start: int,
    block_m: int,
    block_n: int,
    key_len: int,
    query_len: int,
    *,
    causal: bool = False,
    window: Optional[int] = None,
) -> Tuple[int, int]:
    """The keys ``[lo, hi)`` the program of queries ``query_start .. query_start + block_m - 1`` visits.

    ``lo`` is a multiple of ``block_n``: the loop goes over whole key blocks starting at ``lo``
    (the last one may stick out past ``hi`` and is masked). ``hi <= lo`` means no key at all.

    Args:
        query_start: the first query of the block (a multiple of ``block_m``).
        block_m, block_n: queries and keys per tile.
        key_len, query_len: ``S`` and ``L``.
        causal: bottom-right causal mask.
        window: ``W`` of an adaptive span (implies causal); keys at distance ``>= W`` are skipped.
            The distance of query ``i`` to key ``j`` is ``i + (S - L) - j``, as for the causal mask
            (the span kernels run with ``L = S``).
    """
    check_positive_ints(block_m=block_m, block_n=block_n, key_len=key_len, query_len=query_len)
    require_non_negative_int("query_start", query_start)
    require_bool("causal", causal)
    hi = key_len
    lo = 0
    if causal or window is not None:
        hi = causal_key_stop(query_start + block_m, key_len, query_len)
    if window is not None:
        require_positive_int("window", window)
        # the first query's first key, rounded down to a key block
        lo = max(0, query_start + key_len - query_len - window + 1) // block_n * block_n
    return lo, max(hi, 0)


def query_block_range(
    key_start: int,
    block_m: int,
    block_n: int,
    key_len: int,
    query_len: int,
    *,
    causal: bool = False,
    window: Optional[int] = None,
) -> Tuple[int, int]:
    """The queries ``[lo, hi)`` the ``dK``/``dV`` program of keys ``key_start .. key_start + block_n - 1`` visits.

    The mirror image of :func:`key_block_range`: ``lo`` is a multiple of ``block_m``.
    """
    check_positive_ints(block_m=block_m, block_n=block_n, key_len=key_len, query_len=query_len)
    require_non_negative_int("key_start", key_start)
    require_bool("causal", causal)
    lo, hi = 0, query_len
    if causal or window is not None:
        # the first query that sees key_start, rounded down to a query block
        lo = max(0, key_start - (key_len - query_len)) // block_m * block_m
    if window is not None:
        require_positive_int("window", window)
        # the last key's farthest query, + 1
        hi = max(0, min(query_len, key_start + block_n + window - 1 - (key_len - query_len)))
    return lo, hi


def tile_map(
    query_len: int,
    key_len: int,
    block_m: int,
    block_n: int,
    *,
    causal: bool = False,
    window: Optional[int] = None,
) -> Tensor:
    """``(ceil(L / block_m), ceil(S / block_n))`` boolean: ``True`` where the forward kernel computes the tile."""
    check_positive_ints(query_len=query_len, key_len=key_len, block_m=block_m, block_n=block_n)
    rows, cols = num_blocks(query_len, block_m), num_blocks(key_len, block_n)
    visited = torch.zeros(rows, cols, dtype=torch.bool)
    for r in range(rows):
        lo, hi = key_block_range(
            r * block_m, block_m, block_n, key_len, query_len, causal=causal, window=window
        )
        if hi > lo:
            visited[r, lo // block_n : num_blocks(hi, block_n)] = True
    return visited


def span_windows(span: Tensor, ramp: float, length: int) -> Tensor:
    """``(H,)`` int32: each head's window ``W_h = ceil(z_h + R)``, capped at ``length`` (at least 1).

    ``span``: ``(H,)`` floating, each ``>= 0`` and finite. Its values are not read here: in the
    kernels' launch path that would wait for the GPU, and their callers check them
    (:func:`~attncourse.kernels.flash.adaptive_span_flash_attention`, :func:`span_tile_maps`)."""
    require_floating("span", span)
    require_rank("span", span, 1, "(H,)")
    if span.numel() == 0:
        raise ValueError("span must hold one span per head, got an empty tensor")
    require_positive_number("ramp", ramp)
    require_positive_int("length", length)
    windows = torch.ceil(span.detach().double().clamp_min(0) + ramp).clamp(1, length)
    return windows.to(torch.int32)


def span_tile_maps(span: Tensor, ramp: float, length: int, block_m: int, block_n: int) -> Tensor:
    """``(H, ceil(L / block_m), ceil(L / block_n))`` boolean: the tiles the adaptive-span kernel computes per head."""
    windows = span_windows(span, ramp, length)  # which checks the arguments' types
    if not bool((span.detach() >= 0).all() & span.detach().isfinite().all()):
        raise ValueError(f"every span must be finite and >= 0, got {span.tolist()}")
    return torch.stack(
        [tile_map(length, length, block_m, block_n, window=w) for w in windows.tolist()]
    )
