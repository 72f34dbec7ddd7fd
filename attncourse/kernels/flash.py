"""FlashAttention-2 and adaptive-span attention as Triton kernels (chapter 10).

The forward kernel is chapter 7's online softmax over tiles (:mod:`attncourse.efficient`)
written for a GPU, in the loop order of FlashAttention-2 (Dao 2023): one program per block
of ``BLOCK_M`` queries of one (batch, head), looping over blocks of ``BLOCK_N`` keys while
the running maximum ``m``, the running sum ``l`` and the weighted values ``acc`` stay on
chip in float32. It writes the output and the log-sum-exp ``lse = m + log(l)`` of every row.

The backward pass recomputes the scores tile by tile from ``Q``, ``K`` and the saved
``lse`` instead of storing the ``(L, S)`` weights: ``P = exp(S - lse)``. A first kernel
computes ``D_i = sum_d dO_id O_id`` (which equals ``sum_j P_ij dP_ij``); one program per key
block then accumulates ``dK`` and ``dV`` over the query blocks, and one program per query
block accumulates ``dQ`` over the key blocks, so no two programs write the same memory
(no atomics)::

    dV = P^T dO        dP = dO V^T        dS = P * (dP - D)        dQ = scale dS K        dK = scale dS^T Q

Adaptive span (chapter 8, Sukhbaatar et al. 2019): the probabilities are multiplied by the
soft mask ``m_z(x)`` of the key's distance ``x = i - j`` and renormalised, which is the same
as weighting ``exp(score)`` by ``m_z(x)`` before normalising: ``a = m exp(s) / sum m exp(s)``.
So the same kernels serve, with ``lse = log sum_j m_j exp(s_j)`` and ``P = m exp(S - lse)``,
and each head's program starts its key loop at the first block that holds a key within its
own window ``W_h = ceil(z_h + R)``: the work of a head falls with its span. The gradient of
the loss with respect to the span, ``dL/dz = sum over ramp keys of exp(s - lse) (dP - D) / R``,
is accumulated by the ``dK``/``dV`` kernel per (batch, head, key block) and summed by PyTorch.

Fully masked rows (no key may be attended: a length of 0, or a causal query before the first
key when ``L > S``) give zeros, like :func:`attncourse.attention.scaled_dot_product_attention`,
with ``lse = -inf`` and zero gradients.

Triton is imported by this module: import it only where triton is installed
(``pip install attncourse[gpu]``). Without a GPU, set ``TRITON_INTERPRET=1`` in the
environment before triton is first imported and pass CPU tensors: Triton's interpreter runs
the same kernels with numpy (slowly, and without bfloat16).
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from typing import Dict, Iterator, Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._checks import (
    fmt_shape,
    require_floating,
    require_positive_int,
    require_positive_number,
    require_rank,
)
from .config import KERNELS, LaunchConfig, launch_config
from .tiles import span_windows

__all__ = [
    "interpreting",
    "flash_attention",
    "flash_attention_forward",
    "adaptive_span_flash_attention",
    "softmax_rows",
    "kernel_launches",
    "launch_override",
]


def interpreting() -> bool:
    """Whether Triton runs its kernels through the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# -- a first kernel: the softmax of each row -------------------------------------------------


@triton.jit
def _softmax_rows_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one program per row
    cols = tl.arange(0, BLOCK)  # BLOCK >= n_cols, a power of two
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))  # the padding columns give exp(-inf) = 0
    tl.store(
        Y + row * stride_y + cols,
        (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty),
        mask=cols < n_cols,
    )


def softmax_rows(x: Tensor) -> Tensor:
    """Softmax over the last dimension of a 2-D tensor ``(R, C)``, one Triton program per row."""
    require_floating("x", x)
    require_rank("x", x, 2, "(R, C)")
    if x.dtype not in _DTYPES:
        raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    _require_device("x", x)
    if x.size(1) == 0:
        raise ValueError(
            f"x has empty rows (shape {fmt_shape(x.shape)}): a softmax needs at least one column"
        )
    if x.size(1) > 65_536:
        raise ValueError(
            f"x has {x.size(1)} columns: this one-program-per-row kernel holds a row in one block "
            "of at most 65,536"
        )
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.size(0) == 0:
        return y
    with _device_guard(x.device):
        _softmax_rows_kernel[(x.size(0),)](
            x, y, x.size(1), x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(x.size(1))
        )
    return y


# -- helpers shared by the kernels -----------------------------------------------------------

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x log2(e)), one GPU instruction
LN2 = tl.constexpr(0.6931471805599453)  # ln(2) = 1 / log2(e)


@triton.jit
def _head_offset(b, h, stride_b, stride_h):
    """Where (batch ``b``, head ``h``) starts, in elements, computed in 64 bits: ``B * H * L * d``
    passes 2^31 for large inputs, and 32-bit offsets would wrap around to wrong addresses."""
    return b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h


@triton.jit
def _program_ids(H, BLOCKS_FIRST: tl.constexpr):
    """``(b, h, bh, block)`` of this program: its batch entry, head, ``b * H + h`` and block.

    ``BLOCKS_FIRST`` (FlashAttention-2's order): grid ``(blocks, B, H)``, so that programs
    launched one after another are blocks of the same head, which read the same K and V (or
    Q and dO) while those are still in the L2 cache. Otherwise grid ``(B * H, blocks)``."""
    if BLOCKS_FIRST:
        block = tl.program_id(0)
        b = tl.program_id(1)
        h = tl.program_id(2)
    else:
        bh = tl.program_id(0)
        b = bh // H
        h = bh % H
        block = tl.program_id(1)
    return b, h, b * H + h, block


@triton.jit
def _tile_ptrs(base, start, offs, offs_d, stride_row, stride_d):
    """Pointers ``(len(offs), BLOCK_D)`` to rows ``start + offs`` of one head (64-bit row offset)."""
    return (
        base
        + tl.cast(start, tl.int64) * stride_row
        + offs[:, None] * stride_row
        + offs_d[None, :] * stride_d
    )


@triton.jit
def _load_tile(
    ptrs,
    rows,
    num_rows,
    offs_d,
    HEAD_DIM: tl.constexpr,
    MASKED: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """A tile of rows; out-of-range rows (only in ``MASKED`` tiles) and padded columns read 0."""
    if MASKED:
        return tl.load(
            ptrs, mask=(rows[:, None] < num_rows) & (offs_d[None, :] < HEAD_DIM), other=0.0
        )
    elif HEAD_DIM == BLOCK_D:
        return tl.load(ptrs)  # a full tile: no bounds to check at all
    else:
        return tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)


@triton.jit
def _mask_tile(
    s, rows, cols, kv_len, L, S, span_end, inv_ramp, CAUSAL: tl.constexpr, HAS_SPAN: tl.constexpr
):
    """For a tile on a boundary: the scores ``s`` with ``-inf`` where a key may not be attended
    (padding, the causal mask, beyond the span), and the soft span mask ``m_z(i - j)`` (1 without span).
    """
    keep = cols[None, :] < kv_len
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None] + (S - L))  # bottom-right alignment
    soft = tl.full(s.shape, 1.0, tl.float32)
    if HAS_SPAN:
        distance = (rows[:, None] - cols[None, :]).to(tl.float32)
        soft = tl.minimum(tl.maximum((span_end - distance) * inv_ramp, 0.0), 1.0)  # (R + z - x) / R
        keep = keep & (soft > 0)  # keys with mask 0 leave the softmax, as in the reference
    return tl.where(keep, s, float("-inf")), soft


@triton.jit
def _key_range(
    start_m,
    b,
    h,
    L,
    S,
    LENGTHS,
    SPANS,
    WINDOWS,
    CAUSAL: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    HAS_SPAN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """The keys a block of queries visits (the ranges of ``tiles.key_block_range``), split in
    three: ``[lo, full_lo)`` and ``[full_hi, hi)`` hold the tiles on a boundary (the span's
    ramp; the causal diagonal, the padding), which need masks; ``[full_lo, full_hi)`` holds
    whole tiles where every key is attended with weight 1, which need none. Also returns
    ``kv_len`` (the real keys) and the head's span ``z``."""
    kv_len = S
    if HAS_LENGTHS:
        kv_len = tl.minimum(tl.load(LENGTHS + b), S)
    lo = 0
    hi = kv_len
    span = 0.0
    full_end = kv_len  # a whole tile ends at or before this key
    if CAUSAL:
        hi = tl.minimum(
            hi, start_m + BLOCK_M + S - L
        )  # the block's last query sees keys j <= i + S - L
        full_end = tl.minimum(full_end, start_m + 1 + S - L)  # ...and its first query sees them all
    full_lo = lo
    if HAS_SPAN:
        span = tl.load(SPANS + h)
        lo = (
            tl.maximum(start_m - tl.load(WINDOWS + h) + 1, 0) // BLOCK_N * BLOCK_N
        )  # its first query's first key
        # a whole tile: every distance i - j below z (weight 1), so j > last query - ceil(z)
        first_whole = start_m + BLOCK_M - tl.ceil(span).to(tl.int32)
        full_lo = lo + tl.maximum(first_whole - lo + BLOCK_N - 1, 0) // BLOCK_N * BLOCK_N
    full_hi = lo + tl.maximum(full_end - lo, 0) // BLOCK_N * BLOCK_N
    hi = tl.maximum(hi, lo)
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    return kv_len, lo, full_lo, full_hi, hi, span


# -- the forward kernel ----------------------------------------------------------------------


@triton.jit
def _forward_tiles(
    acc,
    m_i,
    l_i,
    q,
    K_head,
    V_head,
    start,
    end,
    offs_m,
    offs_n,
    offs_d,
    kv_len,
    L,
    S,
    skn,
    skd,
    svn,
    svd,
    qk_scale,
    span_end,
    inv_ramp,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_SPAN: tl.constexpr,
    PRECISION: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """The online softmax over the key tiles ``[start, end)``. Scores are kept in base 2:
    ``s2 = q.k * scale * log2(e)``, so that ``exp(score - m) = exp2(s2 - m2)``, one instruction."""
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + offs_n
        k = _load_tile(
            _tile_ptrs(K_head, start_n, offs_n, offs_d, skn, skd),
            cols,
            kv_len,
            offs_d,
            HEAD_DIM,
            MASKED,
            BLOCK_D,
        )
        v = _load_tile(
            _tile_ptrs(V_head, start_n, offs_n, offs_d, svn, svd),
            cols,
            kv_len,
            offs_d,
            HEAD_DIM,
            MASKED,
            BLOCK_D,
        )
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N) raw scores q.k
        if MASKED:  # a boundary tile: masks, and rows that may have no key yet
            s, soft = _mask_tile(
                s * qk_scale, offs_m, cols, kv_len, L, S, span_end, inv_ramp, CAUSAL, HAS_SPAN
            )
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            shift = tl.where(
                m_new == float("-inf"), 0.0, m_new
            )  # a row with no key yet: avoid -inf - -inf
            p = tl.math.exp2(s - shift[:, None]) * soft  # exp2(-inf) = 0 for masked keys
        else:  # a whole tile: scale folded into the subtraction (one fused multiply-add per score)
            m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
            shift = m_new
            p = tl.math.exp2(s * qk_scale - shift[:, None])
        correction = tl.math.exp2(m_i - shift)  # rescales what was summed against the old maximum
        l_i = l_i * correction + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * correction[:, None], input_precision=PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _forward_kernel(
    Q,
    K,
    V,
    O,
    LSE,
    LENGTHS,
    SPANS,
    WINDOWS,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sob,
    soh,
    som,
    sod,
    H,
    L,
    S,
    qk_scale,
    ramp,
    inv_ramp,
    CAUSAL: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    HAS_SPAN: tl.constexpr,
    PRECISION: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCKS_FIRST: tl.constexpr,
):
    """One program per (batch, head, block of queries); the grid's order: :func:`_program_ids`."""
    b, h, bh, pid_m = _program_ids(H, BLOCKS_FIRST)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    Q_head = Q + _head_offset(b, h, sqb, sqh)
    K_head = K + _head_offset(b, h, skb, skh)
    V_head = V + _head_offset(b, h, svb, svh)

    q = _load_tile(
        _tile_ptrs(Q_head, start_m, tl.arange(0, BLOCK_M), offs_d, sqm, sqd),
        offs_m,
        L,
        offs_d,
        HEAD_DIM,
        True,
        BLOCK_D,
    )
    kv_len, lo, full_lo, full_hi, hi, span = _key_range(
        start_m,
        b,
        h,
        L,
        S,
        LENGTHS,
        SPANS,
        WINDOWS,
        CAUSAL,
        HAS_LENGTHS,
        HAS_SPAN,
        BLOCK_M,
        BLOCK_N,
    )
    span_end = span + ramp  # the soft mask (R + z - x) / R reaches 0 at distance x = z + R

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running maximum (base-2 scores)
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum of (masked) exp2(s2 - m_i)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)  # running sum of exp2(s2 - m_i) * value

    # tiles on the span's ramp, then whole tiles (no mask), then tiles on the diagonal or the padding
    acc, m_i, l_i = _forward_tiles(
        acc,
        m_i,
        l_i,
        q,
        K_head,
        V_head,
        lo,
        full_lo,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        skn,
        skd,
        svn,
        svd,
        qk_scale,
        span_end,
        inv_ramp,
        True,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )
    acc, m_i, l_i = _forward_tiles(
        acc,
        m_i,
        l_i,
        q,
        K_head,
        V_head,
        full_lo,
        full_hi,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        skn,
        skd,
        svn,
        svd,
        qk_scale,
        span_end,
        inv_ramp,
        False,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )
    acc, m_i, l_i = _forward_tiles(
        acc,
        m_i,
        l_i,
        q,
        K_head,
        V_head,
        full_hi,
        hi,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        skn,
        skd,
        svn,
        svd,
        qk_scale,
        span_end,
        inv_ramp,
        True,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )

    empty = l_i == 0.0  # no key at all: output 0, lse -inf
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_ptrs = _tile_ptrs(
        O + _head_offset(b, h, sob, soh), start_m, tl.arange(0, BLOCK_M), offs_d, som, sod
    )
    tl.store(
        o_ptrs,
        out.to(O.dtype.element_ty),
        mask=(offs_m[:, None] < L) & (offs_d[None, :] < HEAD_DIM),
    )
    tl.store(
        LSE + bh.to(tl.int64) * L + offs_m, lse, mask=offs_m < L
    )  # LSE is (B, H, L), contiguous


# -- the backward kernels --------------------------------------------------------------------


@triton.jit
def _backward_preprocess_kernel(
    O,
    DO,
    DELTA,
    sob,
    soh,
    som,
    sod,
    sdob,
    sdoh,
    sdom,
    sdod,
    H,
    L,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCKS_FIRST: tl.constexpr,
):
    """``D_i = sum_d dO_id O_id`` for the rows of one block; grid as the forward's."""
    b, h, bh, pid_m = _program_ids(H, BLOCKS_FIRST)
    start_m = pid_m * BLOCK_M
    offs = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows = start_m + offs
    o = _load_tile(
        _tile_ptrs(O + _head_offset(b, h, sob, soh), start_m, offs, offs_d, som, sod),
        rows,
        L,
        offs_d,
        HEAD_DIM,
        True,
        BLOCK_D,
    )
    do = _load_tile(
        _tile_ptrs(DO + _head_offset(b, h, sdob, sdoh), start_m, offs, offs_d, sdom, sdod),
        rows,
        L,
        offs_d,
        HEAD_DIM,
        True,
        BLOCK_D,
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(DELTA + bh.to(tl.int64) * L + rows, delta, mask=rows < L)


@triton.jit
def _load_row_stats(LSE, DELTA, bh, rows, L, MASKED: tl.constexpr):
    """The saved ``lse`` in base 2 (``+inf`` for padding and fully masked rows, so that
    ``exp2(s2 - lse2) = 0``) and ``D``, for rows ``rows``."""
    offset = bh.to(tl.int64) * L
    if MASKED:
        lse = tl.load(LSE + offset + rows, mask=rows < L, other=float("inf"))
        lse = tl.where(lse == float("-inf"), float("inf"), lse)
        delta = tl.load(DELTA + offset + rows, mask=rows < L, other=0.0)
    else:  # rows inside L whose lse is finite (a whole tile has a key in every row)
        lse = tl.load(LSE + offset + rows)
        delta = tl.load(DELTA + offset + rows)
    return lse * LOG2E, delta


@triton.jit
def _dkdv_tiles(
    dk,
    dv,
    dspan,
    k,
    v,
    Q_head,
    DO_head,
    LSE,
    DELTA,
    bh,
    start,
    end,
    offs_m,
    offs_n,
    offs_d,
    kv_len,
    L,
    S,
    sqm,
    sqd,
    sdom,
    sdod,
    qk_scale,
    span,
    span_end,
    inv_ramp,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_SPAN: tl.constexpr,
    PRECISION: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """``dK``, ``dV`` (and the span gradient) of one key block over the query tiles ``[start, end)``."""
    for start_m in range(start, end, BLOCK_M):
        rows = start_m + offs_m
        q = _load_tile(
            _tile_ptrs(Q_head, start_m, offs_m, offs_d, sqm, sqd),
            rows,
            L,
            offs_d,
            HEAD_DIM,
            MASKED,
            BLOCK_D,
        )
        do = _load_tile(
            _tile_ptrs(DO_head, start_m, offs_m, offs_d, sdom, sdod),
            rows,
            L,
            offs_d,
            HEAD_DIM,
            MASKED,
            BLOCK_D,
        )
        lse2, delta = _load_row_stats(LSE, DELTA, bh, rows, L, MASKED)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        if MASKED:
            s, soft = _mask_tile(
                s * qk_scale, rows, offs_n, kv_len, L, S, span_end, inv_ramp, CAUSAL, HAS_SPAN
            )
            e = tl.math.exp2(
                s - lse2[:, None]
            )  # exp(s) / sum_j m_j exp(s_j): the weight before the soft mask
            p = e * soft  # the attention weights, recomputed
        else:
            p = tl.math.exp2(s * qk_scale - lse2[:, None])
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv, input_precision=PRECISION)  # dV += P^T dO
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # dP = dO V^T
        ds = p * (dp - delta[:, None])  # dS = P * (dP - D)
        dk = tl.dot(
            tl.trans(ds.to(q.dtype)), q, dk, input_precision=PRECISION
        )  # dK += dS^T Q (scaled at the end)
        if MASKED and HAS_SPAN:
            distance = (rows[:, None] - offs_n[None, :]).to(tl.float32)
            on_ramp = (soft > 0) & (
                distance >= span
            )  # where m_z(x) = (R + z - x) / R, slope 1 / R in z
            dspan += tl.sum(tl.where(on_ramp, e * (dp - delta[:, None]), 0.0), axis=0)
    return dk, dv, dspan


@triton.jit
def _backward_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    LSE,
    DELTA,
    DSPAN,
    LENGTHS,
    SPANS,
    WINDOWS,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sdob,
    sdoh,
    sdom,
    sdod,
    H,
    L,
    S,
    scale,
    qk_scale,
    ramp,
    inv_ramp,
    num_key_blocks,
    CAUSAL: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    HAS_SPAN: tl.constexpr,
    PRECISION: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCKS_FIRST: tl.constexpr,
):
    """One program per (batch, head, key block): ``dK``, ``dV`` (and the span gradient's share)
    over the query blocks. ``DK`` and ``DV`` are contiguous ``(B, H, S, d)``."""
    b, h, bh, pid_n = _program_ids(H, BLOCKS_FIRST)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)

    kv_len = S
    if HAS_LENGTHS:
        kv_len = tl.minimum(tl.load(LENGTHS + b), S)
    k = _load_tile(
        _tile_ptrs(
            K + _head_offset(b, h, skb, skh), start_n, tl.arange(0, BLOCK_N), offs_d, skn, skd
        ),
        offs_n,
        kv_len,
        offs_d,
        HEAD_DIM,
        True,
        BLOCK_D,
    )
    v = _load_tile(
        _tile_ptrs(
            V + _head_offset(b, h, svb, svh), start_n, tl.arange(0, BLOCK_N), offs_d, svn, svd
        ),
        offs_n,
        kv_len,
        offs_d,
        HEAD_DIM,
        True,
        BLOCK_D,
    )

    # The query blocks that see this key block (the ranges of tiles.query_block_range), split
    # like the forward's: [lo, full_lo) on the causal diagonal, [full_lo, full_hi) whole tiles,
    # [full_hi, hi) on the span's ramp or past the last query.
    lo = 0
    hi = L
    span = 0.0
    full_lo = 0
    full_end = L  # whole query tiles end at or before this query
    if CAUSAL:
        lo = tl.maximum(start_n - (S - L), 0) // BLOCK_M * BLOCK_M
        full_start = (
            start_n + BLOCK_N - 1 - (S - L)
        )  # the first query that sees all the block's keys
        full_lo = lo + tl.maximum(full_start - lo + BLOCK_M - 1, 0) // BLOCK_M * BLOCK_M
    if HAS_SPAN:
        span = tl.load(SPANS + h)
        hi = tl.minimum(L, start_n + BLOCK_N + tl.load(WINDOWS + h) - 1)
        full_end = tl.minimum(full_end, start_n + tl.ceil(span).to(tl.int32))  # distances below z
    full_hi = full_lo + tl.maximum(full_end - full_lo, 0) // BLOCK_M * BLOCK_M
    hi = tl.where(
        start_n >= kv_len, lo, hi
    )  # padding keys: nothing to do, their gradients are zero
    full_hi = tl.where(
        start_n + BLOCK_N > kv_len, full_lo, full_hi
    )  # keys past the padding: all masked
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    span_end = span + ramp

    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dspan = tl.zeros((BLOCK_N,), tl.float32)
    Q_head = Q + _head_offset(b, h, sqb, sqh)
    DO_head = DO + _head_offset(b, h, sdob, sdoh)

    dk, dv, dspan = _dkdv_tiles(
        dk,
        dv,
        dspan,
        k,
        v,
        Q_head,
        DO_head,
        LSE,
        DELTA,
        bh,
        lo,
        full_lo,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        sqm,
        sqd,
        sdom,
        sdod,
        qk_scale,
        span,
        span_end,
        inv_ramp,
        True,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_M,
        BLOCK_D,
    )
    dk, dv, dspan = _dkdv_tiles(
        dk,
        dv,
        dspan,
        k,
        v,
        Q_head,
        DO_head,
        LSE,
        DELTA,
        bh,
        full_lo,
        full_hi,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        sqm,
        sqd,
        sdom,
        sdod,
        qk_scale,
        span,
        span_end,
        inv_ramp,
        False,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_M,
        BLOCK_D,
    )
    dk, dv, dspan = _dkdv_tiles(
        dk,
        dv,
        dspan,
        k,
        v,
        Q_head,
        DO_head,
        LSE,
        DELTA,
        bh,
        full_hi,
        hi,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        sqm,
        sqd,
        sdom,
        sdod,
        qk_scale,
        span,
        span_end,
        inv_ramp,
        True,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_M,
        BLOCK_D,
    )

    ok = (offs_n[:, None] < S) & (offs_d[None, :] < HEAD_DIM)
    out = (
        (bh.to(tl.int64) * S + start_n) * HEAD_DIM
        + tl.arange(0, BLOCK_N)[:, None] * HEAD_DIM
        + offs_d[None, :]
    )
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=ok)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=ok)
    if HAS_SPAN:
        tl.store(DSPAN + bh.to(tl.int64) * num_key_blocks + pid_n, tl.sum(dspan, axis=0) * inv_ramp)


@triton.jit
def _dq_tiles(
    dq,
    q,
    do,
    lse2,
    delta,
    K_head,
    V_head,
    start,
    end,
    offs_m,
    offs_n,
    offs_d,
    kv_len,
    L,
    S,
    skn,
    skd,
    svn,
    svd,
    qk_scale,
    span_end,
    inv_ramp,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_SPAN: tl.constexpr,
    PRECISION: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """``dQ`` of one query block over the key tiles ``[start, end)``."""
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + offs_n
        k = _load_tile(
            _tile_ptrs(K_head, start_n, offs_n, offs_d, skn, skd),
            cols,
            kv_len,
            offs_d,
            HEAD_DIM,
            MASKED,
            BLOCK_D,
        )
        v = _load_tile(
            _tile_ptrs(V_head, start_n, offs_n, offs_d, svn, svd),
            cols,
            kv_len,
            offs_d,
            HEAD_DIM,
            MASKED,
            BLOCK_D,
        )
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if MASKED:
            s, soft = _mask_tile(
                s * qk_scale, offs_m, cols, kv_len, L, S, span_end, inv_ramp, CAUSAL, HAS_SPAN
            )
            p = tl.math.exp2(s - lse2[:, None]) * soft
        else:
            p = tl.math.exp2(s * qk_scale - lse2[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(
            ds.to(k.dtype), k, dq, input_precision=PRECISION
        )  # dQ += dS K (scaled at the end)
    return dq


@triton.jit
def _backward_dq_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    LSE,
    DELTA,
    LENGTHS,
    SPANS,
    WINDOWS,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sdob,
    sdoh,
    sdom,
    sdod,
    H,
    L,
    S,
    scale,
    qk_scale,
    ramp,
    inv_ramp,
    CAUSAL: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    HAS_SPAN: tl.constexpr,
    PRECISION: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCKS_FIRST: tl.constexpr,
):
    """One program per (batch, head, query block): ``dQ`` over the key blocks (the forward's loops).
    ``DQ`` is contiguous ``(B, H, L, d)``."""
    b, h, bh, pid_m = _program_ids(H, BLOCKS_FIRST)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_tile(
        _tile_ptrs(
            Q + _head_offset(b, h, sqb, sqh), start_m, tl.arange(0, BLOCK_M), offs_d, sqm, sqd
        ),
        offs_m,
        L,
        offs_d,
        HEAD_DIM,
        True,
        BLOCK_D,
    )
    do = _load_tile(
        _tile_ptrs(
            DO + _head_offset(b, h, sdob, sdoh), start_m, tl.arange(0, BLOCK_M), offs_d, sdom, sdod
        ),
        offs_m,
        L,
        offs_d,
        HEAD_DIM,
        True,
        BLOCK_D,
    )
    lse2, delta = _load_row_stats(LSE, DELTA, bh, offs_m, L, True)
    kv_len, lo, full_lo, full_hi, hi, span = _key_range(
        start_m,
        b,
        h,
        L,
        S,
        LENGTHS,
        SPANS,
        WINDOWS,
        CAUSAL,
        HAS_LENGTHS,
        HAS_SPAN,
        BLOCK_M,
        BLOCK_N,
    )
    K_head = K + _head_offset(b, h, skb, skh)
    V_head = V + _head_offset(b, h, svb, svh)
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)

    dq = _dq_tiles(
        dq,
        q,
        do,
        lse2,
        delta,
        K_head,
        V_head,
        lo,
        full_lo,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        skn,
        skd,
        svn,
        svd,
        qk_scale,
        span + ramp,
        inv_ramp,
        True,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )
    dq = _dq_tiles(
        dq,
        q,
        do,
        lse2,
        delta,
        K_head,
        V_head,
        full_lo,
        full_hi,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        skn,
        skd,
        svn,
        svd,
        qk_scale,
        span + ramp,
        inv_ramp,
        False,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )
    dq = _dq_tiles(
        dq,
        q,
        do,
        lse2,
        delta,
        K_head,
        V_head,
        full_hi,
        hi,
        offs_m,
        offs_n,
        offs_d,
        kv_len,
        L,
        S,
        skn,
        skd,
        svn,
        svd,
        qk_scale,
        span + ramp,
        inv_ramp,
        True,
        CAUSAL,
        HAS_SPAN,
        PRECISION,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )
    out = (
        (bh.to(tl.int64) * L + start_m) * HEAD_DIM
        + tl.arange(0, BLOCK_M)[:, None] * HEAD_DIM
        + offs_d[None, :]
    )
    tl.store(
        DQ + out,
        (dq * scale).to(DQ.dtype.element_ty),
        mask=(offs_m[:, None] < L) & (offs_d[None, :] < HEAD_DIM),
    )


# -- launching them --------------------------------------------------------------------------

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_GRID_AXIS_1 = 65_535  # CUDA's limit on grid axes 1 and 2 (axis 0 goes to 2^31 - 1)
_MAX_GRID_AXIS_0 = 2**31 - 1


def _require_device(name: str, x: Tensor) -> None:
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"{name} is on {x.device}: the Triton kernels run on a CUDA GPU, or on the CPU through"
            " Triton's interpreter (set TRITON_INTERPRET=1 before triton is imported)"
        )
    if x.device.type == "cpu" and x.dtype == torch.bfloat16:
        raise TypeError(
            f"{name} is bfloat16 on the CPU: Triton's interpreter has no bfloat16 (it would return"
            " wrong values); use float32 or float16 on the CPU, bfloat16 on a GPU of compute"
            " capability 8.0 or later"
        )


def _reads_values(x: Tensor) -> bool:
    """Whether checking ``x``'s values is free: on a GPU it would wait for the GPU (a host
    synchronisation on every call), so there the kernels clamp instead (see the docstrings)."""
    return x.device.type != "cuda"


def _device_guard(device: torch.device):
    """Launch on ``device``'s GPU even when another one is current (Triton launches on the current one)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _grid(batch: int, heads: int, blocks: int, blocks_first: bool) -> Tuple[int, ...]:
    """The launch grid: ``(blocks, B, H)`` with ``blocks_first`` (FlashAttention-2's order, the
    blocks along the sequence on axis 0, up to 2^31 - 1; B and H up to 65,535 each on axes 1
    and 2), else ``(B * H, blocks)`` (``B * H`` up to 2^31 - 1, the blocks up to 65,535)."""
    if batch * heads > _MAX_GRID_AXIS_0:  # b * H + h indexes the saved statistics in 32 bits
        raise ValueError(f"B * H = {batch * heads} exceeds {_MAX_GRID_AXIS_0}")
    if blocks_first:
        for name, size in (("B", batch), ("H", heads)):
            if size > _MAX_GRID_AXIS_1:
                raise ValueError(
                    f"{name} = {size} exceeds the {_MAX_GRID_AXIS_1} programs of a grid axis"
                    " after the first: use fewer (split the batch into several calls)"
                )
        if blocks > _MAX_GRID_AXIS_0:
            raise ValueError(f"{blocks} blocks exceed the {_MAX_GRID_AXIS_0} programs of axis 0")
        return (blocks, batch, heads)
    if blocks > _MAX_GRID_AXIS_1:
        raise ValueError(
            f"{blocks} blocks along the sequence exceed the {_MAX_GRID_AXIS_1} programs of grid"
            " axis 1: use larger blocks (block_m, block_n) or a shorter sequence"
        )
    return (batch * heads, blocks)


def _require_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}"
        )
    return value


def _check_inputs(
    query: Tensor, key: Tensor, value: Tensor, lengths: Optional[Tensor], scale: Optional[float]
) -> float:
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_floating(name, x)
        require_rank(name, x, 4, "(B, H, L or S, d)")
        if x.dtype not in _DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {x.dtype}")
        _require_device(name, x)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(
            f"query, key and value must share one dtype, got {query.dtype}, {key.dtype},"
            f" {value.dtype}"
        )
    if key.device != query.device or value.device != query.device:
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, {key.device},"
            f" {value.device}"
        )
    if key.shape[:2] != query.shape[:2] or value.shape != key.shape or key.size(3) != query.size(3):
        raise ValueError(
            "expected query (B, H, L, d), key and value (B, H, S, d) with the same B, H and d:"
            f" query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}, value"
            f" {fmt_shape(value.shape)}"
        )
    if not 16 <= query.size(3) <= 128:
        raise ValueError(f"the head size d must be in 16..128, got query {fmt_shape(query.shape)}")
    if min(query.size(0), query.size(1), query.size(2), key.size(2)) == 0:
        raise ValueError(
            "query and key need at least one batch, head and position, got query"
            f" {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}"
        )
    if lengths is not None:
        if not isinstance(lengths, Tensor):
            raise TypeError(
                f"lengths must be a tensor of integers (B,), got {type(lengths).__name__}"
            )
        if lengths.dtype == torch.bool or lengths.is_floating_point() or lengths.is_complex():
            raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
        if lengths.shape != query.shape[:1]:
            raise ValueError(
                f"lengths must have shape (B,) = ({query.size(0)},), got {fmt_shape(lengths.shape)}"
            )
        if lengths.device != query.device:
            raise ValueError(
                f"lengths must be on the device of query ({query.device}), got {lengths.device}"
            )
        if _reads_values(lengths) and (int(lengths.min()) < 0 or int(lengths.max()) > key.size(2)):
            raise ValueError(f"lengths must lie in [0, S={key.size(2)}], got {lengths.tolist()}")
    if scale is None:
        return query.size(3) ** -0.5
    require_positive_number("scale", scale)
    return float(scale)


# Replacements for fields of the launch configurations, set by launch_override: (kernel or
# None for every kernel, {field: value}), the innermost last.
_OVERRIDES: list = []


@contextlib.contextmanager
def launch_override(kernel: Optional[str] = None, **fields: object) -> Iterator[None]:
    """Within it, the launcher uses ``fields`` in place of those that
    :func:`~attncourse.kernels.config.launch_config` picks.

    For measuring the alternatives on a GPU (``make gpu-check``): e.g.
    ``with launch_override("forward", block_m=128, num_stages=3):`` or
    ``with launch_override(blocks_first=False):`` (every kernel). ``kernel``: one of
    :data:`~attncourse.kernels.config.KERNELS` (``"backward_dq"`` also sets the backward's
    first kernel, which computes ``D``), or ``None`` for all. ``fields``: any of ``block_m``,
    ``block_n``, ``num_warps``, ``num_stages``, ``blocks_first``. Sizes that do not fit the GPU
    fail at launch (Triton's ``OutOfResources``). Block sizes passed to a call still win.
    """
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"kernel must be None or one of {', '.join(KERNELS)}, got {kernel!r}")
    names = {f.name: f.type for f in dataclass_fields(LaunchConfig)}
    for name, value in fields.items():
        if name not in names:
            raise TypeError(
                f"launch_override got an unknown field {name!r}: use {', '.join(names)}"
            )
        if name == "blocks_first":
            _require_flag(name, value)
        else:
            require_positive_int(name, value)
    if {"block_m", "block_n"} & fields.keys():
        _check_blocks(fields.get("block_m"), fields.get("block_n"))
    _OVERRIDES.append((kernel, dict(fields)))
    try:
        yield
    finally:
        _OVERRIDES.remove((kernel, fields))


def _config(q: Tensor, kernel: str, block_m: Optional[int], block_n: Optional[int]) -> LaunchConfig:
    """The launch settings of ``kernel`` for ``q``'s GPU (:func:`~attncourse.kernels.config.launch_config`),
    or 16 x 16 tiles under the interpreter, then :func:`launch_override`'s fields;
    ``block_m``/``block_n`` given by the caller win."""
    if q.device.type == "cuda":
        capability = torch.cuda.get_device_capability(q.device)
        config = launch_config(
            capability, q.dtype, q.size(3), kernel, device_name=torch.cuda.get_device_name(q.device)
        )
    else:  # the interpreter: warps and stages mean nothing there; small tiles keep it quick
        config = LaunchConfig(16, 16, 1, 1)
    for which, fields in _OVERRIDES:
        if which is None or which == kernel:
            config = replace(config, **fields)
    return replace(config, block_m=block_m or config.block_m, block_n=block_n or config.block_n)


def _check_blocks(block_m: Optional[int], block_n: Optional[int]) -> None:
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is not None:
            require_positive_int(name, value)
            if value < 16 or value & (value - 1):
                raise ValueError(
                    f"{name} must be a power of two >= 16 (tl.dot needs 16), got {value}"
                )


def _precision(dtype: torch.dtype) -> str:
    """float32 inputs multiply in full precision ("ieee"), not TF32, so that they match the references."""
    return "ieee" if dtype == torch.float32 else "tf32"


def _constexprs(q: Tensor, causal: bool, lengths, spans, config: LaunchConfig) -> dict:
    head_dim = q.size(3)
    return dict(
        CAUSAL=causal or spans is not None,
        HAS_LENGTHS=lengths is not None,
        HAS_SPAN=spans is not None,
        PRECISION=_precision(q.dtype),
        HEAD_DIM=head_dim,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCKS_FIRST=config.blocks_first,
    )


def _forward_launch(q, k, v, out, lse, causal, lengths, spans, windows, ramp, scale, config):
    """``(kernel, grid, args, constexprs)`` of the forward pass: what the launcher runs and what
    :func:`kernel_launches` returns."""
    batch, heads, length, _ = q.shape
    dummy = lse  # stands for the pointers a configuration does not read
    args = (
        q,
        k,
        v,
        out,
        lse,
        lengths if lengths is not None else dummy,
        spans if spans is not None else dummy,
        windows if windows is not None else dummy,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        heads,
        length,
        k.size(2),
        scale * _LOG2E_HOST,
        ramp,
        1.0 / ramp,
    )
    grid = _grid(batch, heads, triton.cdiv(length, config.block_m), config.blocks_first)
    return _forward_kernel, grid, args, _constexprs(q, causal, lengths, spans, config)


def _backward_launches(
    do,
    q,
    k,
    v,
    out,
    lse,
    delta,
    dq,
    dk,
    dv,
    dspan,
    causal,
    lengths,
    spans,
    windows,
    ramp,
    scale,
    configs,
):
    """The three backward launches ``[(kernel, grid, args, constexprs), ...]``."""
    batch, heads, length, _ = q.shape
    keys = k.size(2)
    extra = (
        lengths if lengths is not None else lse,
        spans if spans is not None else lse,
        windows if windows is not None else lse,
    )
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    pre, kv, qc = configs
    pre_consts = _constexprs(q, causal, lengths, spans, pre)
    preprocess = (
        _backward_preprocess_kernel,
        _grid(batch, heads, triton.cdiv(length, pre.block_m), pre.blocks_first),
        (out, do, delta, *out.stride(), *do.stride(), heads, length),
        {key: pre_consts[key] for key in ("HEAD_DIM", "BLOCK_M", "BLOCK_D", "BLOCKS_FIRST")},
    )
    num_key_blocks = triton.cdiv(keys, kv.block_n)
    dkdv = (
        _backward_dkdv_kernel,
        _grid(batch, heads, num_key_blocks, kv.blocks_first),
        (
            q,
            k,
            v,
            do,
            dk,
            dv,
            lse,
            delta,
            dspan,
            *extra,
            *strides,
            heads,
            length,
            keys,
            scale,
            scale * _LOG2E_HOST,
            ramp,
            1.0 / ramp,
            num_key_blocks,
        ),
        _constexprs(q, causal, lengths, spans, kv),
    )
    dqs = (
        _backward_dq_kernel,
        _grid(batch, heads, triton.cdiv(length, qc.block_m), qc.blocks_first),
        (
            q,
            k,
            v,
            do,
            dq,
            lse,
            delta,
            *extra,
            *strides,
            heads,
            length,
            keys,
            scale,
            scale * _LOG2E_HOST,
            ramp,
            1.0 / ramp,
        ),
        _constexprs(q, causal, lengths, spans, qc),
    )
    return [preprocess, dkdv, dqs]


_LOG2E_HOST = math.log2(math.e)


def _run(launch, config: LaunchConfig) -> None:
    kernel, grid, args, constexprs = launch
    kernel[grid](*args, **constexprs, num_warps=config.num_warps, num_stages=config.num_stages)


def _forward(q, k, v, causal, lengths, spans, windows, ramp, scale, block_m, block_n):
    batch, heads, length, _ = q.shape
    config = _config(q, "forward_span" if spans is not None else "forward", block_m, block_n)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, length, device=q.device, dtype=torch.float32)
    with _device_guard(q.device):
        _run(
            _forward_launch(
                q, k, v, out, lse, causal, lengths, spans, windows, ramp, scale, config
            ),
            config,
        )
    return out, lse


def _backward(
    do, q, k, v, out, lse, causal, lengths, spans, windows, ramp, scale, block_m, block_n
):
    batch, heads, length, head_dim = q.shape
    keys = k.size(2)
    dkdv = "backward_dkdv_span" if spans is not None else "backward_dkdv"
    configs = (
        _config(q, "backward_dq", block_m, block_n),
        _config(q, dkdv, block_m, block_n),
        _config(q, "backward_dq", block_m, block_n),
    )
    delta = torch.empty_like(lse)
    dq = torch.empty(batch, heads, length, head_dim, device=q.device, dtype=q.dtype)
    dk = torch.empty(batch, heads, keys, head_dim, device=q.device, dtype=q.dtype)
    dv = torch.empty_like(dk)
    dspan = torch.zeros(
        batch, heads, triton.cdiv(keys, configs[1].block_n), device=q.device, dtype=torch.float32
    )
    launches = _backward_launches(
        do,
        q,
        k,
        v,
        out,
        lse,
        delta,
        dq,
        dk,
        dv,
        dspan,
        causal,
        lengths,
        spans,
        windows,
        ramp,
        scale,
        configs,
    )
    with _device_guard(q.device):
        for launch, config in zip(launches, configs):
            _run(launch, config)
    return dq, dk, dv, dspan.sum(dim=(0, 2))


def kernel_launches(
    capability: Tuple[int, int],
    dtype: torch.dtype,
    head_dim: int,
    *,
    causal: bool = False,
    lengths: bool = False,
    span: bool = False,
    batch: int = 2,
    heads: int = 4,
    length: int = 1024,
) -> Dict[str, tuple]:
    """What the launcher would launch on a GPU of ``capability``, built without a GPU (no data).

    Returns ``{kernel name: ((jit function, grid, args, constexprs), LaunchConfig)}`` for
    ``forward``, ``backward_preprocess``, ``backward_dkdv`` and ``backward_dq``, built by the very
    functions the launcher calls, on tensors of the ``meta`` device (which hold no data), with the
    configuration :func:`~attncourse.kernels.config.launch_config` picks for ``capability``. The
    repository's compile harness (``tools/kernel_compile``) specialises these as Triton does at
    launch and compiles them for that GPU.
    """
    configs = {
        "forward": launch_config(
            capability, dtype, head_dim, "forward_span" if span else "forward"
        ),
        "backward_dq": launch_config(capability, dtype, head_dim, "backward_dq"),
    }
    configs["backward_dkdv"] = launch_config(
        capability, dtype, head_dim, "backward_dkdv_span" if span else "backward_dkdv"
    )
    meta = dict(device="meta", dtype=dtype)
    q = torch.empty(batch, heads, length, head_dim, **meta)
    k, v, out, do, dq, dk, dv = (torch.empty_like(q) for _ in range(7))
    lse = torch.empty(batch, heads, length, device="meta", dtype=torch.float32)
    lens = torch.empty(batch, device="meta", dtype=torch.int32) if lengths else None
    spans = torch.empty(heads, device="meta", dtype=torch.float32) if span else None
    windows = torch.empty(heads, device="meta", dtype=torch.int32) if span else None
    ramp, scale = 32.0, head_dim**-0.5
    launches = {
        "forward": (
            _forward_launch(
                q, k, v, out, lse, causal, lens, spans, windows, ramp, scale, configs["forward"]
            ),
            configs["forward"],
        )
    }
    backward_configs = (configs["backward_dq"], configs["backward_dkdv"], configs["backward_dq"])
    dspan = lse
    for name, launch, config in zip(
        ("backward_preprocess", "backward_dkdv", "backward_dq"),
        _backward_launches(
            do,
            q,
            k,
            v,
            out,
            lse,
            lse,
            dq,
            dk,
            dv,
            dspan,
            causal,
            lens,
            spans,
            windows,
            ramp,
            scale,
            backward_configs,
        ),
        backward_configs,
    ):
        launches[name] = (launch, config)
    return launches


class _FlashAttention(torch.autograd.Function):
    """Joins the forward kernel and the backward kernels; saves ``Q, K, V, O`` and ``lse``, never the weights."""

    @staticmethod
    def forward(ctx, q, k, v, span, causal, lengths, ramp, scale, block_m, block_n):
        windows = span_windows(span, ramp, q.size(2)) if span is not None else None
        spans = span.detach().float().contiguous() if span is not None else None
        out, lse = _forward(q, k, v, causal, lengths, spans, windows, ramp, scale, block_m, block_n)
        ctx.save_for_backward(q, k, v, out, lse, lengths, spans, windows)
        ctx.options = (causal, ramp, scale, block_m, block_n)
        ctx.span_dtype = span.dtype if span is not None else None
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, lengths, spans, windows = ctx.saved_tensors
        causal, ramp, scale, block_m, block_n = ctx.options
        dq, dk, dv, dspan = _backward(
            grad_out,
            q,
            k,
            v,
            out,
            lse,
            causal,
            lengths,
            spans,
            windows,
            ramp,
            scale,
            block_m,
            block_n,
        )
        dspan = dspan.to(ctx.span_dtype) if ctx.span_dtype is not None else None
        return dq, dk, dv, dspan, None, None, None, None, None, None


def flash_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    causal: bool = False,
    lengths: Optional[Tensor] = None,
    scale: Optional[float] = None,
    block_m: Optional[int] = None,
    block_n: Optional[int] = None,
) -> Tuple[Tensor, Tensor]:
    """Like :func:`flash_attention`, and also returns the log-sum-exp: ``(output, lse)``.

    ``lse`` is ``(B, H, L)`` float32, ``log sum_j exp(score_ij)`` over the keys query ``i`` may
    attend to (``-inf`` for a row with none). It carries no gradient.
    """
    scale = _check_inputs(query, key, value, lengths, scale)
    causal = _require_flag("causal", causal)
    _check_blocks(block_m, block_n)
    if (
        lengths is not None
    ):  # clamped into [0, S]: checked above on the CPU, free of a GPU wait here
        lengths = lengths.clamp(0, key.size(2)).to(torch.int32).contiguous()
    return _FlashAttention.apply(
        query, key, value, None, causal, lengths, 1.0, scale, block_m, block_n
    )


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    causal: bool = False,
    lengths: Optional[Tensor] = None,
    scale: Optional[float] = None,
    block_m: Optional[int] = None,
    block_n: Optional[int] = None,
) -> Tensor:
    """Exact attention ``softmax(Q K^T * scale + mask) V`` by the FlashAttention-2 Triton kernels, differentiable.

    Args:
        query: ``(B, H, L, d)``, float16, bfloat16 (GPUs of compute capability 8.0 or later) or float32,
            ``16 <= d <= 128``.
        key, value: ``(B, H, S, d)``, the same dtype and device; ``S`` may differ from ``L``.
        causal: query ``i`` attends to key ``j`` only when ``j <= i + (S - L)`` (the last query
            aligned with the last key, as :func:`attncourse.masks.causal_mask`).
        lengths: optional ``(B,)`` integers in ``[0, S]``: sequence ``b`` has ``lengths[b]`` real
            keys, the rest is padding (the key-padding mask ``padding_mask(lengths, S)``).
        scale: defaults to ``1 / sqrt(d)``.
        block_m, block_n: queries and keys per tile (powers of two >= 16); defaults suit a T4
            and larger GPUs (16 under the interpreter).

    Returns:
        ``(B, H, L, d)`` in the input dtype, accumulated in float32. A query row with no key to
        attend to gets zeros (and zero gradients), like the package's
        :func:`~attncourse.attention.scaled_dot_product_attention`.

    Raises:
        TypeError: a non-tensor, an unsupported dtype, dtypes that differ, non-integer lengths.
        ValueError: wrong ranks or shapes, ``d`` outside 16..128, lengths out of range, a CPU
            tensor without the interpreter, a bad block size or scale.
    """
    return flash_attention_forward(
        query,
        key,
        value,
        causal=causal,
        lengths=lengths,
        scale=scale,
        block_m=block_m,
        block_n=block_n,
    )[0]


def adaptive_span_flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    span: Tensor,
    ramp: float,
    *,
    block_m: Optional[int] = None,
    block_n: Optional[int] = None,
) -> Tensor:
    """Causal self-attention with one soft span per head, skipping the key blocks beyond each head's reach.

    The output of :func:`attncourse.adaptive_span.adaptive_span_attention` (without its
    weights and without a position bias): the softmax probabilities times the soft mask
    ``m_z(x)``, renormalised. Head ``h``'s programs visit only the key blocks that hold a key
    at distance ``< ceil(z_h + R)``, so its work is about ``L * (z_h + R + block)`` scores
    instead of ``L * L / 2`` (:func:`attncourse.kernels.tiles.span_tile_maps`).

    Differentiable in ``query``, ``key``, ``value`` and ``span``: the backward kernels compute
    ``dQ``, ``dK``, ``dV`` and, per (batch, head, key block), the span gradient's share
    ``sum exp(s - lse) (dP - D) / R`` over the ramp's keys, which PyTorch sums per head.

    Args:
        query, key, value: ``(B, H, L, d)``, one sequence (``L == S``), ``16 <= d <= 128``.
        span: ``(H,)`` floating, the span ``z`` of each head in positions, each ``>= 0``.
        ramp: ``R > 0``.
        block_m, block_n: as for :func:`flash_attention`.

    Returns:
        ``(B, H, L, d)`` in the input dtype.
    """
    _check_inputs(query, key, value, None, None)
    require_positive_number("ramp", ramp)
    if query.shape != key.shape:
        raise ValueError(
            f"self-attention needs query and key of one shape, got query {fmt_shape(query.shape)},"
            f" key {fmt_shape(key.shape)}"
        )
    require_floating("span", span)
    require_rank("span", span, 1, "(H,)")
    if span.size(0) != query.size(1):
        raise ValueError(
            f"span has {span.size(0)} entries but query has {query.size(1)} heads (query"
            f" {fmt_shape(query.shape)})"
        )
    if span.device != query.device:
        raise ValueError(f"span must be on the device of query ({query.device}), got {span.device}")
    _check_blocks(block_m, block_n)
    if _reads_values(span):
        if not bool(torch.isfinite(span.detach()).all()) or float(span.detach().min()) < 0:
            raise ValueError(f"every span must be finite and >= 0, got {span.tolist()}")
    else:  # on a GPU: checked asynchronously (an error at the next synchronisation), no wait here
        torch._assert_async(
            (torch.isfinite(span.detach()) & (span.detach() >= 0)).all(),
            "every span must be finite and >= 0",
        )
    return _FlashAttention.apply(
        query, key, value, span, True, None, float(ramp), query.size(3) ** -0.5, block_m, block_n
    )[0]
