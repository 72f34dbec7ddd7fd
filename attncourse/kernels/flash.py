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

import os
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._checks import fmt_shape, require_floating, require_positive_int, require_positive_number, require_rank
from .tiles import span_windows

__all__ = [
    "interpreting",
    "flash_attention",
    "flash_attention_forward",
    "adaptive_span_flash_attention",
    "softmax_rows",
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
    tl.store(Y + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty), mask=cols < n_cols)


def softmax_rows(x: Tensor) -> Tensor:
    """Softmax over the last dimension of a 2-D tensor ``(R, C)``, one Triton program per row."""
    require_floating("x", x)
    require_rank("x", x, 2, "(R, C)")
    _require_device("x", x)
    x = x.contiguous()
    y = torch.empty_like(x)
    _softmax_rows_kernel[(x.size(0),)](x, y, x.size(1), x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(x.size(1)))
    return y


# -- the forward kernel ----------------------------------------------------------------------


@triton.jit
def _tile_weights(
    q, k, offs_m, offs_n, scale, L, S, kv_len, span, ramp,
    CAUSAL: tl.constexpr, HAS_SPAN: tl.constexpr, PRECISION: tl.constexpr,
):
    """Scores ``(BLOCK_M, BLOCK_N)`` in float32 (``-inf`` where masked) and the soft span mask."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    keep = (offs_n[None, :] < kv_len) & (offs_m[:, None] < L)
    if CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None] + (S - L))  # bottom-right alignment
    soft = tl.full(s.shape, 1.0, tl.float32)
    if HAS_SPAN:
        distance = (offs_m[:, None] - offs_n[None, :]).to(tl.float32)
        soft = tl.minimum(tl.maximum((ramp + span - distance) / ramp, 0.0), 1.0)
        keep = keep & (soft > 0)  # keys with mask 0 leave the softmax, as in the reference
    return tl.where(keep, s, float("-inf")), soft


@triton.jit
def _load_rows(ptr, rows, num_rows, offs_d, head_dim, stride_row, stride_d):
    """The block ``ptr[rows, :head_dim]`` (rows past ``num_rows`` and columns past ``head_dim`` read as 0)."""
    mask = (rows[:, None] < num_rows) & (offs_d[None, :] < head_dim)
    return tl.load(ptr + rows[:, None] * stride_row + offs_d[None, :] * stride_d, mask=mask, other=0.0)


@triton.jit
def _query_program(H, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Who this program is, for a grid of (query blocks, B * H): its first query, its (batch, head) and its index blocks."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    return start_m, bh, bh // H, bh % H, start_m + tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_D)


@triton.jit
def _key_range(start_m, b, h, L, S, LENGTHS, SPANS, WINDOWS,
               CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``(kv_len, lo, hi, span)``: the real keys, the keys ``[lo, hi)`` a query block visits
    (the ranges of ``tiles.key_block_range``), and the head's span."""
    kv_len = S
    if HAS_LENGTHS:
        kv_len = tl.minimum(tl.load(LENGTHS + b), S)
    lo = 0
    hi = kv_len
    span = 0.0
    if CAUSAL:
        hi = tl.minimum(hi, start_m + BLOCK_M + S - L)  # the block's last query sees keys j <= i + S - L
    if HAS_SPAN:
        span = tl.load(SPANS + h)
        lo = tl.maximum(start_m - tl.load(WINDOWS + h) + 1, 0) // BLOCK_N * BLOCK_N  # its first query's first key
    return kv_len, lo, hi, span


@triton.jit
def _forward_kernel(
    Q, K, V, O, LSE, LENGTHS, SPANS, WINDOWS,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
    H, L, S, head_dim, scale, ramp,
    CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    start_m, bh, b, h, offs_m, offs_n, offs_d = _query_program(H, BLOCK_M, BLOCK_N, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim

    q = _load_rows(Q + b * sqb + h * sqh, offs_m, L, offs_d, head_dim, sqm, sqd)
    kv_len, lo, hi, span = _key_range(start_m, b, h, L, S, LENGTHS, SPANS, WINDOWS,
                                      CAUSAL, HAS_LENGTHS, HAS_SPAN, BLOCK_M, BLOCK_N)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running maximum
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum of (masked) exp(score - m_i)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)  # running sum of exp(score - m_i) * value
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = _load_rows(K + b * skb + h * skh, cols, kv_len, offs_d, head_dim, skn, skd)
        v = _load_rows(V + b * svb + h * svh, cols, kv_len, offs_d, head_dim, svn, svd)
        s, soft = _tile_weights(q, k, offs_m, cols, scale, L, S, kv_len, span, ramp, CAUSAL, HAS_SPAN, PRECISION)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: avoid -inf - -inf
        correction = tl.exp(m_i - shift)  # rescales what was summed against the old maximum
        p = tl.exp(s - shift[:, None]) * soft  # exp(-inf) = 0 for masked keys
        l_i = l_i * correction + tl.sum(p, axis=1)
        acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    empty = l_i == 0.0  # no key at all: output 0, lse -inf
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), m_i + tl.log(tl.where(empty, 1.0, l_i)))
    tl.store(O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
             out.to(O.dtype.element_ty), mask=(offs_m[:, None] < L) & d_ok)
    tl.store(LSE + bh * L + offs_m, lse, mask=offs_m < L)


# -- the backward kernels --------------------------------------------------------------------


@triton.jit
def _backward_preprocess_kernel(O, DO, DELTA, som, sod, sdom, sdod, L, head_dim,
                                BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """``D_i = sum_d dO_id O_id`` for the rows of one block (O and dO flattened to ``(B*H, L, d)``)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    ok = (offs_m[:, None] < L) & (offs_d[None, :] < head_dim)
    o = tl.load(O + bh * L * som + offs_m[:, None] * som + offs_d[None, :] * sod, mask=ok, other=0.0).to(tl.float32)
    do = tl.load(DO + bh * L * sdom + offs_m[:, None] * sdom + offs_d[None, :] * sdod, mask=ok, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * L + offs_m, tl.sum(o * do, axis=1), mask=offs_m < L)


@triton.jit
def _load_row_stats(LSE, DELTA, bh, L, offs_m):
    """The saved ``lse`` (``+inf`` for padding and fully masked rows, so that ``exp(s - lse) = 0``) and ``D``."""
    lse = tl.load(LSE + bh * L + offs_m, mask=offs_m < L, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    delta = tl.load(DELTA + bh * L + offs_m, mask=offs_m < L, other=0.0)
    return lse, delta


@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, DO, DK, DV, LSE, DELTA, DSPAN, LENGTHS, SPANS, WINDOWS,
    sqm, sqd, skn, skd, svn, svd, sdom, sdod,
    H, L, S, head_dim, scale, ramp, num_key_blocks,
    CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program per key block: ``dK``, ``dV`` (and the span gradient's share) over the query blocks."""
    pid_n = tl.program_id(0)
    start_n = pid_n * BLOCK_N
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim

    kv_len = S
    if HAS_LENGTHS:
        kv_len = tl.minimum(tl.load(LENGTHS + b), S)
    k = _load_rows(K + bh * S * skn, offs_n, kv_len, offs_d, head_dim, skn, skd)
    v = _load_rows(V + bh * S * svn, offs_n, kv_len, offs_d, head_dim, svn, svd)

    # The query blocks that see this key block (the same ranges as tiles.query_block_range).
    lo = 0
    hi = L
    span = 0.0
    if CAUSAL:
        lo = tl.maximum(start_n - (S - L), 0) // BLOCK_M * BLOCK_M
    if HAS_SPAN:
        span = tl.load(SPANS + h)
        hi = tl.minimum(L, start_n + BLOCK_N + tl.load(WINDOWS + h) - 1)
    hi = tl.where(start_n >= kv_len, lo, hi)  # padding keys: nothing to do, their gradients are zero

    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dspan = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m
        q = _load_rows(Q + bh * L * sqm, rows, L, offs_d, head_dim, sqm, sqd)
        do = _load_rows(DO + bh * L * sdom, rows, L, offs_d, head_dim, sdom, sdod)
        lse, delta = _load_row_stats(LSE, DELTA, bh, L, rows)
        s, soft = _tile_weights(q, k, rows, offs_n, scale, L, S, kv_len, span, ramp, CAUSAL, HAS_SPAN, PRECISION)
        e = tl.exp(s - lse[:, None])  # exp(s) / sum_j m_j exp(s_j): the weight before the soft mask
        p = e * soft  # the attention weights, recomputed
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
        if HAS_SPAN:
            distance = (rows[:, None] - offs_n[None, :]).to(tl.float32)
            on_ramp = (soft > 0) & (distance >= span)  # where m_z(x) = (R + z - x) / R, slope 1 / R in z
            dspan += tl.where(on_ramp, e * (dp - delta[:, None]), 0.0)

    tl.store(DK + bh * S * head_dim + offs_n[:, None] * head_dim + offs_d[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=(offs_n[:, None] < S) & d_ok)
    tl.store(DV + bh * S * head_dim + offs_n[:, None] * head_dim + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=(offs_n[:, None] < S) & d_ok)
    if HAS_SPAN:
        tl.store(DSPAN + bh * num_key_blocks + pid_n, tl.sum(tl.sum(dspan, axis=1), axis=0) / ramp)


@triton.jit
def _backward_dq_kernel(
    Q, K, V, DO, DQ, LSE, DELTA, LENGTHS, SPANS, WINDOWS,
    sqm, sqd, skn, skd, svn, svd, sdom, sdod,
    H, L, S, head_dim, scale, ramp,
    CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program per query block: ``dQ`` over the key blocks (the forward pass's loop)."""
    start_m, bh, b, h, offs_m, offs_n, offs_d = _query_program(H, BLOCK_M, BLOCK_N, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    q = _load_rows(Q + bh * L * sqm, offs_m, L, offs_d, head_dim, sqm, sqd)
    do = _load_rows(DO + bh * L * sdom, offs_m, L, offs_d, head_dim, sdom, sdod)
    lse, delta = _load_row_stats(LSE, DELTA, bh, L, offs_m)
    kv_len, lo, hi, span = _key_range(start_m, b, h, L, S, LENGTHS, SPANS, WINDOWS,
                                      CAUSAL, HAS_LENGTHS, HAS_SPAN, BLOCK_M, BLOCK_N)

    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = _load_rows(K + bh * S * skn, cols, kv_len, offs_d, head_dim, skn, skd)
        v = _load_rows(V + bh * S * svn, cols, kv_len, offs_d, head_dim, svn, svd)
        s, soft = _tile_weights(q, k, offs_m, cols, scale, L, S, kv_len, span, ramp, CAUSAL, HAS_SPAN, PRECISION)
        p = tl.exp(s - lse[:, None]) * soft
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + bh * L * head_dim + offs_m[:, None] * head_dim + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=(offs_m[:, None] < L) & d_ok)


# -- launching them --------------------------------------------------------------------------

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _require_device(name: str, x: Tensor) -> None:
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"{name} is on {x.device}: the Triton kernels run on a CUDA GPU, or on the CPU through Triton's "
            f"interpreter (set TRITON_INTERPRET=1 before triton is imported)"
        )


def _check_inputs(query: Tensor, key: Tensor, value: Tensor, lengths: Optional[Tensor], scale: Optional[float]) -> float:
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_floating(name, x)
        require_rank(name, x, 4, "(B, H, L or S, d)")
        if x.dtype not in _DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {x.dtype}")
        _require_device(name, x)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(f"query, key and value must share one dtype, got {query.dtype}, {key.dtype}, {value.dtype}")
    if key.device != query.device or value.device != query.device:
        raise ValueError(f"query, key and value must be on one device, got {query.device}, {key.device}, {value.device}")
    if key.shape[:2] != query.shape[:2] or value.shape != key.shape or key.size(3) != query.size(3):
        raise ValueError(
            f"expected query (B, H, L, d), key and value (B, H, S, d) with the same B, H and d: "
            f"query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}, value {fmt_shape(value.shape)}"
        )
    if not 16 <= query.size(3) <= 128:
        raise ValueError(f"the head size d must be in 16..128, got query {fmt_shape(query.shape)}")
    if min(query.size(2), key.size(2)) == 0:
        raise ValueError(f"query and key need at least one position, got query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}")
    if lengths is not None:
        if not isinstance(lengths, Tensor):
            raise TypeError(f"lengths must be a tensor of integers (B,), got {type(lengths).__name__}")
        if lengths.dtype in (torch.bool,) or lengths.is_floating_point() or lengths.is_complex():
            raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
        if lengths.shape != query.shape[:1]:
            raise ValueError(f"lengths must have shape (B,) = ({query.size(0)},), got {fmt_shape(lengths.shape)}")
        if lengths.device != query.device:
            raise ValueError(f"lengths must be on the device of query ({query.device}), got {lengths.device}")
        if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > key.size(2)):
            raise ValueError(f"lengths must lie in [0, S={key.size(2)}], got {lengths.tolist()}")
    if scale is None:
        return query.size(3) ** -0.5
    require_positive_number("scale", scale)
    return float(scale)


def _blocks(head_dim: int, block_m: Optional[int], block_n: Optional[int]) -> Tuple[int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_D)``: tile sizes (powers of two >= 16) and the head size padded to one."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    if block_m is None:
        block_m = 16 if interpreting() else 64
    if block_n is None:
        block_n = 16 if interpreting() else (64 if block_d <= 64 else 32)  # a T4's shared memory fits these
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        require_positive_int(name, value)
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot needs 16), got {value}")
    return block_m, block_n, block_d


def _precision(dtype: torch.dtype) -> str:
    """float32 inputs multiply in full precision ("ieee"), not TF32, so that they match the references."""
    return "ieee" if dtype == torch.float32 else "tf32"


def _forward(q, k, v, causal, lengths, spans, windows, ramp, scale, block_m, block_n):
    batch, heads, length, head_dim = q.shape
    keys = k.size(2)
    block_m, block_n, block_d = _blocks(head_dim, block_m, block_n)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, length, device=q.device, dtype=torch.float32)
    dummy = lse  # stands for the pointers a configuration does not read
    grid = (triton.cdiv(length, block_m), batch * heads)
    _forward_kernel[grid](
        q, k, v, out, lse,
        lengths if lengths is not None else dummy, spans if spans is not None else dummy,
        windows if windows is not None else dummy,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, length, keys, head_dim, scale, ramp,
        CAUSAL=causal or spans is not None, HAS_LENGTHS=lengths is not None, HAS_SPAN=spans is not None,
        PRECISION=_precision(q.dtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
    )
    return out, lse


def _backward(do, q, k, v, out, lse, causal, lengths, spans, windows, ramp, scale, block_m, block_n):
    batch, heads, length, head_dim = q.shape
    keys = k.size(2)
    block_m, block_n, block_d = _blocks(head_dim, block_m, block_n)
    q, k, v, out, do = (t.contiguous() for t in (q, k, v, out, do))
    delta = torch.empty_like(lse)
    _backward_preprocess_kernel[(triton.cdiv(length, block_m), batch * heads)](
        out, do, delta, out.stride(2), out.stride(3), do.stride(2), do.stride(3), length, head_dim,
        BLOCK_M=block_m, BLOCK_D=block_d,
    )
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    num_key_blocks = triton.cdiv(keys, block_n)
    dspan = torch.zeros(batch, heads, num_key_blocks, device=q.device, dtype=torch.float32)
    flags = dict(CAUSAL=causal or spans is not None, HAS_LENGTHS=lengths is not None, HAS_SPAN=spans is not None,
                 PRECISION=_precision(q.dtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d)
    extra = (lengths if lengths is not None else lse, spans if spans is not None else lse,
             windows if windows is not None else lse)
    strides = (q.stride(2), q.stride(3), k.stride(2), k.stride(3), v.stride(2), v.stride(3), do.stride(2), do.stride(3))
    _backward_dkdv_kernel[(num_key_blocks, batch * heads)](
        q, k, v, do, dk, dv, lse, delta, dspan, *extra, *strides,
        heads, length, keys, head_dim, scale, ramp, num_key_blocks, **flags,
    )
    _backward_dq_kernel[(triton.cdiv(length, block_m), batch * heads)](
        q, k, v, do, dq, lse, delta, *extra, *strides,
        heads, length, keys, head_dim, scale, ramp, **flags,
    )
    return dq, dk, dv, dspan.sum(dim=(0, 2))


class _FlashAttention(torch.autograd.Function):
    """Joins the forward kernel and the backward kernels; saves ``Q, K, V, O`` and ``lse``, never the weights."""

    @staticmethod
    def forward(ctx, q, k, v, span, causal, lengths, ramp, scale, block_m, block_n):
        windows = span_windows(span, ramp, q.size(2)).to(q.device) if span is not None else None
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
        dq, dk, dv, dspan = _backward(grad_out, q, k, v, out, lse, causal, lengths, spans, windows, ramp, scale, block_m, block_n)
        dspan = dspan.to(ctx.span_dtype) if ctx.span_dtype is not None else None
        return dq, dk, dv, dspan, None, None, None, None, None, None


def flash_attention_forward(
    query: Tensor, key: Tensor, value: Tensor, *, causal: bool = False, lengths: Optional[Tensor] = None,
    scale: Optional[float] = None, block_m: Optional[int] = None, block_n: Optional[int] = None,
) -> Tuple[Tensor, Tensor]:
    """Like :func:`flash_attention`, and also returns the log-sum-exp: ``(output, lse)``.

    ``lse`` is ``(B, H, L)`` float32, ``log sum_j exp(score_ij)`` over the keys query ``i`` may
    attend to (``-inf`` for a row with none). It carries no gradient.
    """
    scale = _check_inputs(query, key, value, lengths, scale)
    lengths = lengths.to(torch.int32).contiguous() if lengths is not None else None
    return _FlashAttention.apply(query, key, value, None, bool(causal), lengths, 1.0, scale, block_m, block_n)


def flash_attention(
    query: Tensor, key: Tensor, value: Tensor, *, causal: bool = False, lengths: Optional[Tensor] = None,
    scale: Optional[float] = None, block_m: Optional[int] = None, block_n: Optional[int] = None,
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
    return flash_attention_forward(query, key, value, causal=causal, lengths=lengths, scale=scale,
                                   block_m=block_m, block_n=block_n)[0]


def adaptive_span_flash_attention(
    query: Tensor, key: Tensor, value: Tensor, span: Tensor, ramp: float, *,
    block_m: Optional[int] = None, block_n: Optional[int] = None,
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
        raise ValueError(f"self-attention needs query and key of one shape, got query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}")
    require_floating("span", span)
    require_rank("span", span, 1, "(H,)")
    if span.size(0) != query.size(1):
        raise ValueError(f"span has {span.size(0)} entries but query has {query.size(1)} heads (query {fmt_shape(query.shape)})")
    if span.device != query.device:
        raise ValueError(f"span must be on the device of query ({query.device}), got {span.device}")
    if not bool(torch.isfinite(span.detach()).all()) or float(span.detach().min()) < 0:
        raise ValueError(f"every span must be finite and >= 0, got {span.tolist()}")
    return _FlashAttention.apply(query, key, value, span, True, None, float(ramp), query.size(3) ** -0.5, block_m, block_n)[0]
