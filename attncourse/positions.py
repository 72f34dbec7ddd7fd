"""Telling attention where tokens are (chapter 5).

Attention alone is permutation-equivariant: permute the tokens and its outputs are permuted
the same way. A model learns order only from positions put into it:

* absolute, added to the token embeddings: :func:`sinusoidal_encoding` (fixed,
  Vaswani et al., 2017) or a learned table (``CausalLM(..., positional="learned")``);
* rotary (RoPE, Su et al., 2021): :func:`apply_rope` rotates each query and key by an angle
  proportional to its position, so their dot product depends on ``m - n`` only;
* a bias on the scores (ALiBi, Press et al., 2022): :func:`alibi_slopes` and :func:`alibi_bias`
  subtract ``slope_h * (m - n)`` from the score of query ``m`` and key ``n`` in head ``h``.

The last two act inside attention: ``MultiHeadAttention(..., positional="rope")`` (or
``"alibi"``) applies them at the absolute positions of its queries and keys, a KV cache keeping
the keys rotated, and ``CausalLM(..., positional="rope")`` builds its blocks so.
"""

from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import Tensor

from ._checks import (
    fmt_shape,
    require_floating,
    require_floating_dtype,
    require_positive_int,
    require_positive_number,
    require_real_positions,
)

__all__ = ["sinusoidal_encoding", "rope_angles", "apply_rope", "alibi_slopes", "alibi_bias"]


def _require_even(name: str, value: int) -> None:
    if value % 2:
        raise ValueError(f"{name} must be even (sines and cosines come in pairs), got {value}")


def sinusoidal_encoding(
    length: int,
    d_model: int,
    *,
    base: float = 10000.0,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The fixed position encodings of "Attention Is All You Need", ``(length, d_model)``.

    Row ``pos`` holds::

        PE[pos, 2i]     = sin(pos / base^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / base^(2i / d_model))

    ``d_model`` must be even (a ``ValueError`` otherwise): the rows pair a sine with a cosine.
    """
    require_positive_int("length", length)
    require_positive_int("d_model", d_model)
    _require_even("d_model", d_model)
    require_positive_number("base", base)
    require_floating_dtype("dtype", dtype)
    pos = torch.arange(length, device=device, dtype=torch.float64)[:, None]  # (L, 1)
    # (d/2,)
    inv_freq = base ** (-torch.arange(0, d_model, 2, device=device, dtype=torch.float64) / d_model)
    pe = torch.empty(length, d_model, device=device, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return pe.to(dtype)


def rope_angles(positions: Tensor, head_dim: int, *, base: float = 10000.0) -> Tensor:
    """Rotation angles ``m * theta_i`` of RoPE, with ``theta_i = base^(-2i / head_dim)``.

    ``positions`` ``(L,)`` (integer or real) -> ``(L, head_dim / 2)`` in float64, on the
    positions' device: at long positions float32 angles would be off by about 1e-3 rad.
    Convert their cos and sin to the dtype of the vectors they rotate (as :func:`apply_rope`
    does).
    """
    require_real_positions("positions", positions)
    if positions.dim() != 1:
        raise ValueError(f"positions must be 1-D (L,), got {fmt_shape(positions.shape)}")
    require_positive_int("head_dim", head_dim)
    _require_even("head_dim", head_dim)
    require_positive_number("base", base)
    theta = base ** (
        -torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float64) / head_dim
    )
    return positions.to(torch.float64)[:, None] * theta  # (L, head_dim / 2)


def apply_rope(x: Tensor, positions: Tensor, *, base: float = 10000.0) -> Tensor:
    """Rotate each pair ``(x[..., 2i], x[..., 2i+1])`` of ``x`` ``(..., L, head_dim)`` by ``positions[l] * theta_i``.

    The pairs are interleaved as in the RoFormer paper (Su et al., 2021); some
    libraries pair ``i`` with ``i + head_dim / 2`` instead, a fixed permutation of the features.
    Apply it to queries and keys (not values): then ``apply_rope(q, m) . apply_rope(k, n)``
    depends on the positions only through ``m - n``.
    """
    require_floating("x", x)
    if x.dim() < 2:
        raise ValueError(f"x must be (..., L, head_dim), got {fmt_shape(x.shape)}")
    angles = rope_angles(positions, x.size(-1), base=base)
    if angles.size(0) != x.size(-2):
        raise ValueError(
            f"positions {fmt_shape(positions.shape)} must have one entry per row of x"
            f" {fmt_shape(x.shape)}"
        )
    return _rotate(x, angles)


def _rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """:func:`apply_rope` without the checks (``MultiHeadAttention(..., positional="rope")``)."""
    theta = base ** (
        -torch.arange(0, x.size(-1), 2, device=positions.device, dtype=torch.float64) / x.size(-1)
    )
    return _rotate(x, positions.to(torch.float64)[:, None] * theta)


def _alibi(num_heads: int, query_positions: Tensor, key_positions: Tensor, dtype) -> Tensor:
    """ALiBi's bias ``(num_heads, L, S)`` from absolute positions, ``-slope_h * (m - n)``, unchecked."""
    slopes = torch.tensor(alibi_slopes(num_heads), device=query_positions.device, dtype=dtype)
    distance = (query_positions[:, None] - key_positions[None, :]).to(dtype)
    return -slopes[:, None, None] * distance


def _rotate(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate the pairs of ``x`` ``(..., L, head_dim)`` by ``angles`` ``(L, head_dim / 2)``."""
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (L, head_dim / 2)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def alibi_slopes(num_heads: int) -> List[float]:
    """ALiBi's head slopes: for ``n`` a power of two, the geometric sequence ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``.

    For other ``n`` the authors take the slopes of the power of two just below ``n`` and fill
    up with every other slope of twice that power (their released code), as here.
    """
    require_positive_int("num_heads", num_heads)

    def power_of_two(n: int) -> List[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_two(num_heads)
    lower = 2 ** int(math.log2(num_heads))
    return power_of_two(lower) + power_of_two(2 * lower)[0::2][: num_heads - lower]


def alibi_bias(
    num_heads: int,
    length: int,
    source: Optional[int] = None,
    *,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Additive score bias ``(num_heads, L, S)``: ``-slope_h * (m - n)`` for query ``m`` and key ``n``.

    Queries are the last ``L`` of ``S`` positions (``m = n`` on the diagonal that
    :func:`attncourse.masks.causal_mask` keeps last). Keys after the query get a positive
    value: combine the bias with a causal mask, for which ALiBi was designed.
    """
    require_positive_int("num_heads", num_heads)
    require_positive_int("length", length)
    require_floating_dtype("dtype", dtype)
    source = length if source is None else source
    require_positive_int("source", source)
    if source < length:
        raise ValueError(
            f"source (S={source}) must be at least length (L={length}): queries are the last L"
            " positions"
        )
    slopes = torch.tensor(alibi_slopes(num_heads), device=device, dtype=torch.float64)  # (h,)
    query_pos = torch.arange(source - length, source, device=device, dtype=torch.float64)
    key_pos = torch.arange(source, device=device, dtype=torch.float64)
    distance = query_pos[:, None] - key_pos[None, :]  # (L, S)
    return (-slopes[:, None, None] * distance).to(dtype)
