"""FlashAttention-2 and adaptive-span attention as Triton kernels (chapter 10): the functions to call.

:func:`flash_attention` computes exact attention ``softmax(Q K^T * scale + mask) V`` tile by
tile in the loop order of FlashAttention-2 (Dao 2023), without ever storing the ``(L, S)``
weights, forward and backward; :func:`adaptive_span_flash_attention` does the same with
chapter 8's soft span per head and skips the key blocks beyond each head's reach;
:func:`softmax_rows` is the chapter's first kernel. The kernels themselves are in
``attncourse.kernels.flash_kernels`` (their names are importable from here too, for the
chapter to show them); how they are launched (grids, launch settings, autograd) is in
``attncourse.kernels.flash_launch``.

Triton is imported by this module: import it only where triton is installed
(``pip install attncourse[gpu]``). Without a GPU, set ``TRITON_INTERPRET=1`` in the
environment before triton is first imported and pass CPU tensors: Triton's interpreter runs
the same kernels with numpy (slowly, and without bfloat16).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
from torch import Tensor

from .._checks import (
    fmt_shape,
    require_floating,
    require_positive_number,
    require_rank,
    require_span_per_head,
)

# The kernels, shown by chapter 10 (``inspect.getsource(flash._forward_kernel.fn)``).
from .flash_kernels import (  # noqa: F401
    _backward_dkdv_kernel,
    _backward_dq_kernel,
    _backward_preprocess_kernel,
    _forward_kernel,
    _forward_tiles,
    _key_range,
    _load_tile,
    _mask_tile,
    _program_ids,
    _softmax_rows_kernel,
)
from .flash_launch import (
    _DTYPES,
    _check_blocks,
    _check_inputs,
    _device_guard,
    _FlashAttention,
    _Options,
    _reads_values,
    _require_device,
    _require_flag,
    interpreting,
    kernel_launches,
    launch_override,
    launch_target,
)

__all__ = [
    "interpreting",
    "flash_attention",
    "flash_attention_forward",
    "adaptive_span_flash_attention",
    "softmax_rows",
    "kernel_launches",
    "launch_override",
    "launch_target",
]


def softmax_rows(x: Tensor) -> Tensor:
    """Softmax over the last dimension of a 2-D tensor ``(rows, n_cols)``, one Triton program per row."""
    require_floating("x", x)
    require_rank("x", x, 2, "(rows, n_cols)")
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

    ``lse`` is ``(B, h, L)`` float32, ``log sum_j exp(score_ij)`` over the keys query ``i`` may
    attend to (``-inf`` for a row with none). It carries no gradient.
    """
    scale = _check_inputs(query, key, value, lengths, scale)
    causal = _require_flag("causal", causal)
    _check_blocks(block_m, block_n)
    # clamped into [0, S]: checked above on the CPU, free of a GPU wait here
    if lengths is not None:
        lengths = lengths.clamp(0, key.size(2)).to(torch.int32).contiguous()
    options = _Options(
        causal=causal, lengths=lengths, scale=scale, block_m=block_m, block_n=block_n
    )
    return _FlashAttention.apply(query, key, value, None, options)


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
        query: ``(B, h, L, d_k)``, float16, bfloat16 (GPUs of compute capability 8.0 or later) or float32,
            ``16 <= d_k <= 128``.
        key, value: ``(B, h, S, d_k)``, the same dtype and device; ``S`` may differ from ``L``.
        causal: query ``i`` attends to key ``j`` only when ``j <= i + (S - L)`` (the last query
            aligned with the last key, as :func:`attncourse.masks.causal_mask`).
        lengths: optional ``(B,)`` integers in ``[0, S]``: sequence ``b`` has ``lengths[b]`` real
            keys, the rest is padding (the key-padding mask ``padding_mask(lengths, S)``).
        scale: defaults to ``1 / sqrt(d)``.
        block_m, block_n: queries and keys per tile (powers of two >= 16); defaults suit a T4
            and larger GPUs (16 under the interpreter).

    Returns:
        ``(B, h, L, d_k)`` in the input dtype, accumulated in float32. A query row with no key to
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
        query, key, value: ``(B, h, L, d_k)``, one sequence (``L == S``), ``16 <= d_k <= 128``.
        span: ``(H,)`` floating, the span ``z`` of each head in positions, each ``>= 0``.
        ramp: ``R > 0``.
        block_m, block_n: as for :func:`flash_attention`.

    Returns:
        ``(B, h, L, d_k)`` in the input dtype.
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
    require_span_per_head(span, query)
    _check_blocks(block_m, block_n)
    if _reads_values(span):
        if not bool(torch.isfinite(span.detach()).all()) or float(span.detach().min()) < 0:
            raise ValueError(f"every span must be finite and >= 0, got {span.tolist()}")
    else:  # on a GPU: checked asynchronously (an error at the next synchronisation), no wait here
        torch._assert_async(
            (torch.isfinite(span.detach()) & (span.detach() >= 0)).all(),
            "every span must be finite and >= 0",
        )
    options = _Options(
        causal=True, ramp=float(ramp), scale=query.size(3) ** -0.5, block_m=block_m, block_n=block_n
    )
    return _FlashAttention.apply(query, key, value, span, options)[0]
