"""The ``@triton.jit`` kernels of chapter 10: the softmax of each row, FlashAttention-2's
forward pass and its three backward kernels, with the helpers they share.

The forward kernel is chapter 7's online softmax over tiles (:mod:`attncourse.efficient`)
written for a GPU, in the loop order of FlashAttention-2 (Dao 2023): one program per block
of ``BLOCK_M`` queries (the paper's ``B_r``) of one (batch, head), looping over blocks of
``BLOCK_N`` keys (``B_c``) while the running maximum ``m``, the running sum ``l`` and the
weighted values ``acc`` stay on chip in float32. It writes the output and the log-sum-exp
``lse = m + log(l)`` of every row.

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

Signatures and calls are grouped as in Triton's tutorials (pointers; strides; sizes and
scalars; constexprs), in ``# fmt: off`` blocks that the formatter leaves alone. The host side
(grids, launch settings, autograd) is ``attncourse.kernels.flash_launch``; the functions to
call are in :mod:`attncourse.kernels.flash`. Triton is imported here: import this module only
where triton is installed (``pip install attncourse[gpu]``).
"""

from __future__ import annotations

import triton
import triton.language as tl

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


# fmt: off
@triton.jit
def _load_tile(ptrs, rows, num_rows, offs_d,  #
               HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, BLOCK_D: tl.constexpr):
    """A tile of rows; out-of-range rows (only in ``MASKED`` tiles) and padded columns read 0."""
    if MASKED:
        return tl.load(
            ptrs, mask=(rows[:, None] < num_rows) & (offs_d[None, :] < HEAD_DIM), other=0.0
        )
    elif HEAD_DIM == BLOCK_D:
        return tl.load(ptrs)  # a full tile: no bounds to check at all
    else:
        return tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
# fmt: on


# fmt: off
@triton.jit
def _mask_tile(s, rows, cols, kv_len, L, S, span_end, inv_ramp,  #
               CAUSAL: tl.constexpr, HAS_SPAN: tl.constexpr):
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
# fmt: on


# fmt: off
@triton.jit
def _key_range(start_m, b, h, L, S, LENGTHS, SPANS, WINDOWS,  #
               CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr,  #
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
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
        # the block's last query sees keys j <= i + S - L, and its first query sees them all
        hi = tl.minimum(hi, start_m + BLOCK_M + S - L)
        full_end = tl.minimum(full_end, start_m + 1 + S - L)
    full_lo = lo
    if HAS_SPAN:
        span = tl.load(SPANS + h)
        # its first query's first key, rounded down to a block
        lo = tl.maximum(start_m - tl.load(WINDOWS + h) + 1, 0) // BLOCK_N * BLOCK_N
        # a whole tile: every distance i - j below z (weight 1), so j > last query - ceil(z)
        first_whole = start_m + BLOCK_M - tl.ceil(span).to(tl.int32)
        full_lo = lo + tl.maximum(first_whole - lo + BLOCK_N - 1, 0) // BLOCK_N * BLOCK_N
    full_hi = lo + tl.maximum(full_end - lo, 0) // BLOCK_N * BLOCK_N
    hi = tl.maximum(hi, lo)
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    return kv_len, lo, full_lo, full_hi, hi, span
# fmt: on


# -- the forward kernel ----------------------------------------------------------------------


# fmt: off
@triton.jit
def _forward_tiles(acc, m_i, l_i, q, K_head, V_head,  #
                   start, end, offs_m, offs_n, offs_d, kv_len, L, S,  #
                   skn, skd, svn, svd,  #
                   qk_scale, span_end, inv_ramp,  #
                   MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_SPAN: tl.constexpr,  #
                   PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,  #
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The online softmax over the key tiles ``[start, end)``. Scores are kept in base 2:
    ``s2 = q.k * scale * log2(e)``, so that ``exp(score - m) = exp2(s2 - m2)``, one instruction."""
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + offs_n
        k = _load_tile(_tile_ptrs(K_head, start_n, offs_n, offs_d, skn, skd), cols, kv_len, offs_d,
                       HEAD_DIM, MASKED, BLOCK_D)
        v = _load_tile(_tile_ptrs(V_head, start_n, offs_n, offs_d, svn, svd), cols, kv_len, offs_d,
                       HEAD_DIM, MASKED, BLOCK_D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N) raw scores q.k
        if MASKED:  # a boundary tile: masks, and rows that may have no key yet
            s, soft = _mask_tile(s * qk_scale, offs_m, cols, kv_len, L, S, span_end, inv_ramp,
                                 CAUSAL, HAS_SPAN)
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            # a row with no key yet: avoid -inf - -inf
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
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
# fmt: on


# fmt: off
@triton.jit
def _forward_kernel(Q, K, V, O, LSE, LENGTHS, SPANS, WINDOWS,  #
                    sqb, sqh, sqm, sqd,  #
                    skb, skh, skn, skd,  #
                    svb, svh, svn, svd,  #
                    sob, soh, som, sod,  #
                    H, L, S, qk_scale, ramp, inv_ramp,  #
                    CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr,  #
                    PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,  #
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,  #
                    BLOCKS_FIRST: tl.constexpr):
    """One program per (batch, head, block of queries); the grid's order: :func:`_program_ids`."""
    b, h, bh, pid_m = _program_ids(H, BLOCKS_FIRST)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    Q_head = Q + _head_offset(b, h, sqb, sqh)
    K_head = K + _head_offset(b, h, skb, skh)
    V_head = V + _head_offset(b, h, svb, svh)

    q = _load_tile(_tile_ptrs(Q_head, start_m, tl.arange(0, BLOCK_M), offs_d, sqm, sqd),
                   offs_m, L, offs_d, HEAD_DIM, True, BLOCK_D)
    kv_len, lo, full_lo, full_hi, hi, span = _key_range(start_m, b, h, L, S,
                                                        LENGTHS, SPANS, WINDOWS,  #
                                                        CAUSAL, HAS_LENGTHS, HAS_SPAN,  #
                                                        BLOCK_M, BLOCK_N)
    span_end = span + ramp  # the soft mask (R + z - x) / R reaches 0 at distance x = z + R

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running maximum (base-2 scores)
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum of (masked) exp2(s2 - m_i)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)  # running sum of exp2(s2 - m_i) * value

    # tiles on the span's ramp, then whole tiles (no mask), then tiles on the diagonal or the padding
    acc, m_i, l_i = _forward_tiles(acc, m_i, l_i, q, K_head, V_head,  #
                                   lo, full_lo, offs_m, offs_n, offs_d, kv_len, L, S,  #
                                   skn, skd, svn, svd,  #
                                   qk_scale, span_end, inv_ramp,  #
                                   True, CAUSAL, HAS_SPAN,  #
                                   PRECISION, HEAD_DIM, BLOCK_N, BLOCK_D)
    acc, m_i, l_i = _forward_tiles(acc, m_i, l_i, q, K_head, V_head,  #
                                   full_lo, full_hi, offs_m, offs_n, offs_d, kv_len, L, S,  #
                                   skn, skd, svn, svd,  #
                                   qk_scale, span_end, inv_ramp,  #
                                   False, CAUSAL, HAS_SPAN,  #
                                   PRECISION, HEAD_DIM, BLOCK_N, BLOCK_D)
    acc, m_i, l_i = _forward_tiles(acc, m_i, l_i, q, K_head, V_head,  #
                                   full_hi, hi, offs_m, offs_n, offs_d, kv_len, L, S,  #
                                   skn, skd, svn, svd,  #
                                   qk_scale, span_end, inv_ramp,  #
                                   True, CAUSAL, HAS_SPAN,  #
                                   PRECISION, HEAD_DIM, BLOCK_N, BLOCK_D)

    empty = l_i == 0.0  # no key at all: output 0, lse -inf
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_ptrs = _tile_ptrs(O + _head_offset(b, h, sob, soh), start_m, tl.arange(0, BLOCK_M), offs_d,
                        som, sod)
    tl.store(o_ptrs, out.to(O.dtype.element_ty),
             mask=(offs_m[:, None] < L) & (offs_d[None, :] < HEAD_DIM))
    tl.store(LSE + bh.to(tl.int64) * L + offs_m, lse, mask=offs_m < L)  # LSE: (B, H, L), contiguous
# fmt: on


# -- the backward kernels --------------------------------------------------------------------


# fmt: off
@triton.jit
def _backward_preprocess_kernel(O, DO, DELTA,  #
                                sob, soh, som, sod,  #
                                sdob, sdoh, sdom, sdod,  #
                                H, L,  #
                                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,  #
                                BLOCK_D: tl.constexpr, BLOCKS_FIRST: tl.constexpr):
    """``D_i = sum_d dO_id O_id`` for the rows of one block; grid as the forward's."""
    b, h, bh, pid_m = _program_ids(H, BLOCKS_FIRST)
    start_m = pid_m * BLOCK_M
    offs = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows = start_m + offs
    o = _load_tile(_tile_ptrs(O + _head_offset(b, h, sob, soh), start_m, offs, offs_d, som, sod),
                   rows, L, offs_d, HEAD_DIM, True, BLOCK_D)
    do = _load_tile(_tile_ptrs(DO + _head_offset(b, h, sdob, sdoh), start_m, offs, offs_d,
                               sdom, sdod),
                    rows, L, offs_d, HEAD_DIM, True, BLOCK_D)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(DELTA + bh.to(tl.int64) * L + rows, delta, mask=rows < L)
# fmt: on


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


# fmt: off
@triton.jit
def _recompute_weights(s, lse2, rows, cols, kv_len, L, S,  #
                       qk_scale, span_end, inv_ramp,  #
                       MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_SPAN: tl.constexpr):
    """The attention weights ``P`` of one tile, recomputed from its raw scores ``s = Q K^T`` and
    the rows' saved ``lse`` (base 2): the body the two backward loops share. Also returns ``e``,
    the weight before the soft mask (``exp(s) / sum_j m_j exp(s_j)``), and the soft mask, which
    the span's gradient needs; on a whole tile (``MASKED`` false) both are ``P`` itself."""
    if MASKED:
        s, soft = _mask_tile(s * qk_scale, rows, cols, kv_len, L, S, span_end, inv_ramp,
                             CAUSAL, HAS_SPAN)
        e = tl.math.exp2(s - lse2[:, None])
        p = e * soft
    else:
        p = tl.math.exp2(s * qk_scale - lse2[:, None])
        e = p
        soft = p
    return p, e, soft
# fmt: on


# fmt: off
@triton.jit
def _dkdv_tiles(dk, dv, dspan, k, v, Q_head, DO_head, LSE, DELTA, bh,  #
                start, end, offs_m, offs_n, offs_d, kv_len, L, S,  #
                sqm, sqd, sdom, sdod,  #
                qk_scale, span, span_end, inv_ramp,  #
                MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_SPAN: tl.constexpr,  #
                PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,  #
                BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """``dK``, ``dV`` (and the span gradient) of one key block over the query tiles ``[start, end)``."""
    for start_m in range(start, end, BLOCK_M):
        rows = start_m + offs_m
        q = _load_tile(_tile_ptrs(Q_head, start_m, offs_m, offs_d, sqm, sqd), rows, L, offs_d,
                       HEAD_DIM, MASKED, BLOCK_D)
        do = _load_tile(_tile_ptrs(DO_head, start_m, offs_m, offs_d, sdom, sdod), rows, L, offs_d,
                        HEAD_DIM, MASKED, BLOCK_D)
        lse2, delta = _load_row_stats(LSE, DELTA, bh, rows, L, MASKED)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        p, e, soft = _recompute_weights(s, lse2, rows, offs_n, kv_len, L, S,  #
                                        qk_scale, span_end, inv_ramp,  #
                                        MASKED, CAUSAL, HAS_SPAN)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv, input_precision=PRECISION)  # dV += P^T dO
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # dP = dO V^T
        ds = p * (dp - delta[:, None])  # dS = P * (dP - D)
        # dK += dS^T Q (scaled at the end)
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk, input_precision=PRECISION)
        if MASKED and HAS_SPAN:
            distance = (rows[:, None] - offs_n[None, :]).to(tl.float32)
            # where m_z(x) = (R + z - x) / R, slope 1 / R in z
            on_ramp = (soft > 0) & (distance >= span)
            dspan += tl.sum(tl.where(on_ramp, e * (dp - delta[:, None]), 0.0), axis=0)
    return dk, dv, dspan
# fmt: on


# fmt: off
@triton.jit
def _backward_dkdv_kernel(Q, K, V, DO, DK, DV, LSE, DELTA, DSPAN, LENGTHS, SPANS, WINDOWS,  #
                          sqb, sqh, sqm, sqd,  #
                          skb, skh, skn, skd,  #
                          svb, svh, svn, svd,  #
                          sdob, sdoh, sdom, sdod,  #
                          H, L, S, scale, qk_scale, ramp, inv_ramp, num_key_blocks,  #
                          CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr,  #
                          HAS_SPAN: tl.constexpr, PRECISION: tl.constexpr,  #
                          HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  #
                          BLOCK_D: tl.constexpr, BLOCKS_FIRST: tl.constexpr):
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
    k = _load_tile(_tile_ptrs(K + _head_offset(b, h, skb, skh), start_n, tl.arange(0, BLOCK_N),
                              offs_d, skn, skd),
                   offs_n, kv_len, offs_d, HEAD_DIM, True, BLOCK_D)
    v = _load_tile(_tile_ptrs(V + _head_offset(b, h, svb, svh), start_n, tl.arange(0, BLOCK_N),
                              offs_d, svn, svd),
                   offs_n, kv_len, offs_d, HEAD_DIM, True, BLOCK_D)

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
        # the first query that sees all the block's keys
        full_start = start_n + BLOCK_N - 1 - (S - L)
        full_lo = lo + tl.maximum(full_start - lo + BLOCK_M - 1, 0) // BLOCK_M * BLOCK_M
    if HAS_SPAN:
        span = tl.load(SPANS + h)
        hi = tl.minimum(L, start_n + BLOCK_N + tl.load(WINDOWS + h) - 1)
        full_end = tl.minimum(full_end, start_n + tl.ceil(span).to(tl.int32))  # distances below z
    full_hi = full_lo + tl.maximum(full_end - full_lo, 0) // BLOCK_M * BLOCK_M
    hi = tl.where(start_n >= kv_len, lo, hi)  # padding keys: nothing to do, their gradients are 0
    full_hi = tl.where(start_n + BLOCK_N > kv_len, full_lo, full_hi)  # keys past the padding: masked
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    span_end = span + ramp

    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dspan = tl.zeros((BLOCK_N,), tl.float32)
    Q_head = Q + _head_offset(b, h, sqb, sqh)
    DO_head = DO + _head_offset(b, h, sdob, sdoh)

    dk, dv, dspan = _dkdv_tiles(dk, dv, dspan, k, v, Q_head, DO_head, LSE, DELTA, bh,  #
                                lo, full_lo, offs_m, offs_n, offs_d, kv_len, L, S,  #
                                sqm, sqd, sdom, sdod,  #
                                qk_scale, span, span_end, inv_ramp,  #
                                True, CAUSAL, HAS_SPAN,  #
                                PRECISION, HEAD_DIM, BLOCK_M, BLOCK_D)
    dk, dv, dspan = _dkdv_tiles(dk, dv, dspan, k, v, Q_head, DO_head, LSE, DELTA, bh,  #
                                full_lo, full_hi, offs_m, offs_n, offs_d, kv_len, L, S,  #
                                sqm, sqd, sdom, sdod,  #
                                qk_scale, span, span_end, inv_ramp,  #
                                False, CAUSAL, HAS_SPAN,  #
                                PRECISION, HEAD_DIM, BLOCK_M, BLOCK_D)
    dk, dv, dspan = _dkdv_tiles(dk, dv, dspan, k, v, Q_head, DO_head, LSE, DELTA, bh,  #
                                full_hi, hi, offs_m, offs_n, offs_d, kv_len, L, S,  #
                                sqm, sqd, sdom, sdod,  #
                                qk_scale, span, span_end, inv_ramp,  #
                                True, CAUSAL, HAS_SPAN,  #
                                PRECISION, HEAD_DIM, BLOCK_M, BLOCK_D)

    ok = (offs_n[:, None] < S) & (offs_d[None, :] < HEAD_DIM)
    out = ((bh.to(tl.int64) * S + start_n) * HEAD_DIM
           + tl.arange(0, BLOCK_N)[:, None] * HEAD_DIM
           + offs_d[None, :])
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=ok)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=ok)
    if HAS_SPAN:
        tl.store(DSPAN + bh.to(tl.int64) * num_key_blocks + pid_n, tl.sum(dspan, axis=0) * inv_ramp)
# fmt: on


# fmt: off
@triton.jit
def _dq_tiles(dq, q, do, lse2, delta, K_head, V_head,  #
              start, end, offs_m, offs_n, offs_d, kv_len, L, S,  #
              skn, skd, svn, svd,  #
              qk_scale, span_end, inv_ramp,  #
              MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_SPAN: tl.constexpr,  #
              PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,  #
              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """``dQ`` of one query block over the key tiles ``[start, end)``."""
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + offs_n
        k = _load_tile(_tile_ptrs(K_head, start_n, offs_n, offs_d, skn, skd), cols, kv_len, offs_d,
                       HEAD_DIM, MASKED, BLOCK_D)
        v = _load_tile(_tile_ptrs(V_head, start_n, offs_n, offs_d, svn, svd), cols, kv_len, offs_d,
                       HEAD_DIM, MASKED, BLOCK_D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        p, _, _ = _recompute_weights(s, lse2, offs_m, cols, kv_len, L, S,  #
                                     qk_scale, span_end, inv_ramp,  #
                                     MASKED, CAUSAL, HAS_SPAN)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)  # dQ += dS K (scaled later)
    return dq
# fmt: on


# fmt: off
@triton.jit
def _backward_dq_kernel(Q, K, V, DO, DQ, LSE, DELTA, LENGTHS, SPANS, WINDOWS,  #
                        sqb, sqh, sqm, sqd,  #
                        skb, skh, skn, skd,  #
                        svb, svh, svn, svd,  #
                        sdob, sdoh, sdom, sdod,  #
                        H, L, S, scale, qk_scale, ramp, inv_ramp,  #
                        CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr,  #
                        PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,  #
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,  #
                        BLOCKS_FIRST: tl.constexpr):
    """One program per (batch, head, query block): ``dQ`` over the key blocks (the forward's loops).
    ``DQ`` is contiguous ``(B, H, L, d)``."""
    b, h, bh, pid_m = _program_ids(H, BLOCKS_FIRST)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_tile(_tile_ptrs(Q + _head_offset(b, h, sqb, sqh), start_m, tl.arange(0, BLOCK_M),
                              offs_d, sqm, sqd),
                   offs_m, L, offs_d, HEAD_DIM, True, BLOCK_D)
    do = _load_tile(_tile_ptrs(DO + _head_offset(b, h, sdob, sdoh), start_m, tl.arange(0, BLOCK_M),
                               offs_d, sdom, sdod),
                    offs_m, L, offs_d, HEAD_DIM, True, BLOCK_D)
    lse2, delta = _load_row_stats(LSE, DELTA, bh, offs_m, L, True)
    kv_len, lo, full_lo, full_hi, hi, span = _key_range(start_m, b, h, L, S,
                                                        LENGTHS, SPANS, WINDOWS,  #
                                                        CAUSAL, HAS_LENGTHS, HAS_SPAN,  #
                                                        BLOCK_M, BLOCK_N)
    K_head = K + _head_offset(b, h, skb, skh)
    V_head = V + _head_offset(b, h, svb, svh)
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)

    dq = _dq_tiles(dq, q, do, lse2, delta, K_head, V_head,  #
                   lo, full_lo, offs_m, offs_n, offs_d, kv_len, L, S,  #
                   skn, skd, svn, svd,  #
                   qk_scale, span + ramp, inv_ramp,  #
                   True, CAUSAL, HAS_SPAN,  #
                   PRECISION, HEAD_DIM, BLOCK_N, BLOCK_D)
    dq = _dq_tiles(dq, q, do, lse2, delta, K_head, V_head,  #
                   full_lo, full_hi, offs_m, offs_n, offs_d, kv_len, L, S,  #
                   skn, skd, svn, svd,  #
                   qk_scale, span + ramp, inv_ramp,  #
                   False, CAUSAL, HAS_SPAN,  #
                   PRECISION, HEAD_DIM, BLOCK_N, BLOCK_D)
    dq = _dq_tiles(dq, q, do, lse2, delta, K_head, V_head,  #
                   full_hi, hi, offs_m, offs_n, offs_d, kv_len, L, S,  #
                   skn, skd, svn, svd,  #
                   qk_scale, span + ramp, inv_ramp,  #
                   True, CAUSAL, HAS_SPAN,  #
                   PRECISION, HEAD_DIM, BLOCK_N, BLOCK_D)
    out = ((bh.to(tl.int64) * L + start_m) * HEAD_DIM
           + tl.arange(0, BLOCK_M)[:, None] * HEAD_DIM
           + offs_d[None, :])
    tl.store(DQ + out, (dq * scale).to(DQ.dtype.element_ty),
             mask=(offs_m[:, None] < L) & (offs_d[None, :] < HEAD_DIM))
# fmt: on
