"""Which tiles the chapter 10 kernels compute: the block ranges of their loops, in plain Python.

The Triton kernels of :mod:`attncourse.kernels.flash` cut the ``(L, S)`` score matrix into
tiles of ``block_m`` queries by ``block_n`` keys. One program owns one block of queries
(the forward pass and ``dQ``) or one block of keys (``dK``, ``dV``) and loops over the
blocks on the other side that can hold a weight other than zero. These functions compute
the same ranges as the kernels, without triton, so that the chapter can draw them and the
tests can count them.

Conventions (those of the package): a causal mask aligns the last query with the last key
(:func:`attncourse.masks.causal_mask`): query ``i`` may attend to key ``j`` when
``j <= i + (S - L)``. An adaptive span of ``z`` with ramp ``R`` gives a weight other than
zero to the keys at distance ``0 <= i - j < W`` with ``W = ceil(z + R)``
(:func:`attncourse.adaptive_span.span_window`).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .._checks import require_non_negative_int, require_positive_int

__all__ = ["key_block_range", "query_block_range", "tile_map", "span_tile_maps", "span_windows"]


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
    """
    for name, value in (
        ("block_m", block_m),
        ("block_n", block_n),
        ("key_len", key_len),
        ("query_len", query_len),
    ):
        require_positive_int(name, value)
    require_non_negative_int("query_start", query_start)
    hi = key_len
    lo = 0
    if causal or window is not None:
        hi = min(key_len, query_start + block_m + key_len - query_len)  # last query's last key + 1
    if window is not None:
        require_positive_int("window", window)
        lo = (
            max(0, query_start - window + 1) // block_n * block_n
        )  # first query's first key, rounded down
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
    for name, value in (
        ("block_m", block_m),
        ("block_n", block_n),
        ("key_len", key_len),
        ("query_len", query_len),
    ):
        require_positive_int(name, value)
    require_non_negative_int("key_start", key_start)
    lo, hi = 0, query_len
    if causal or window is not None:
        lo = (
            max(0, key_start - (key_len - query_len)) // block_m * block_m
        )  # first query that sees key_start
    if window is not None:
        require_positive_int("window", window)
        hi = min(query_len, key_start + block_n + window - 1)  # last key's farthest query + 1
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
    rows, cols = math.ceil(query_len / block_m), math.ceil(key_len / block_n)
    visited = torch.zeros(rows, cols, dtype=torch.bool)
    for r in range(rows):
        lo, hi = key_block_range(
            r * block_m, block_m, block_n, key_len, query_len, causal=causal, window=window
        )
        if hi > lo:
            visited[r, lo // block_n : math.ceil(hi / block_n)] = True
    return visited


def span_windows(span: Tensor, ramp: float, length: int) -> Tensor:
    """``(H,)`` int32: each head's window ``W_h = ceil(z_h + R)``, capped at ``length`` (at least 1)."""
    windows = torch.ceil(span.detach().double().clamp_min(0) + ramp).clamp(1, length)
    return windows.to(torch.int32)


def span_tile_maps(span: Tensor, ramp: float, length: int, block_m: int, block_n: int) -> Tensor:
    """``(H, ceil(L / block_m), ceil(L / block_n))`` boolean: the tiles the adaptive-span kernel computes per head."""
    windows = span_windows(span, ramp, length).tolist()
    return torch.stack([tile_map(length, length, block_m, block_n, window=w) for w in windows])
