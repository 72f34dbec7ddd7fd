"""Scaled dot-product attention (chapter 1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + Mask) V

The whole algorithm is the five lines at the end of :func:`scaled_dot_product_attention`;
everything above them checks the input.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ._checks import check_attention_inputs, default_scale, require_floating, require_rank

__all__ = ["scaled_dot_product_attention", "safe_softmax"]


def safe_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last dimension that gives zeros, not NaN, for a row that is all ``-inf``.

    Half-precision scores are normalised in float32 and cast back.

    Args:
        scores: ``(..., S)`` floating tensor; ``-inf`` marks a masked entry.

    Returns:
        ``(..., S)`` weights: each row sums to 1, or is all zeros when every entry was ``-inf``.

    Raises:
        TypeError: ``scores`` is not a floating tensor.
        ValueError: ``scores`` has no dimension to normalise over (a 0-dimensional tensor).
    """
    require_floating("scores", scores)
    require_rank("scores", scores, 1, "(..., S)", at_least=True)
    return _safe_softmax(scores)


def _safe_softmax(scores: Tensor) -> Tensor:
    """:func:`safe_softmax` without the checks."""
    if scores.size(-1) == 0:  # no keys: (..., L, 0) weights, nothing to weigh
        return scores.clone()
    compute_dtype = (
        torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    )
    # a row is all -inf exactly when its maximum is: (..., L, 1), not a pass over every score
    empty = torch.isneginf(scores.detach().amax(dim=-1, keepdim=True))
    # softmax of an all -inf row is 0/0: give it zeros in, so no NaN reaches the gradient
    weights = torch.softmax(torch.where(empty, 0.0, scores), dim=-1, dtype=compute_dtype)
    return torch.where(empty, 0.0, weights).to(scores.dtype)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Optional[Tensor] = None,
    *,
    scale: Optional[float] = None,
) -> Tuple[Tensor, Tensor]:
    """Attend from every query to every key and return the weighted sum of the values.

    Args:
        query: ``(..., L, d_k)``, one row per query position.
        key: ``(..., S, d_k)``, one row per key position.
        value: ``(..., S, d_v)``, one row per key position.
        mask: optional, broadcastable to ``(..., L, S)`` (at least two dimensions; it may be
            expanded, never the scores). Boolean: ``True`` means this query may attend to this
            key, the convention of :func:`torch.nn.functional.scaled_dot_product_attention`.
            Floating: added to the scaled scores (``0`` keeps, ``-inf`` removes).
        scale: multiplies ``Q K^T``; defaults to ``1 / sqrt(d_k)`` (which needs ``d_k > 0``).

    Returns:
        ``(output, weights)``: output ``(..., L, d_v)`` and weights ``(..., L, S)``, where the
        leading dimensions are those of the inputs broadcast together as :func:`torch.matmul`
        does. Each row of ``weights`` sums to 1, except a query row with every key masked
        (all ``False``, or all ``-inf``): its weights and its output are zeros, never NaN.
        A float mask of large negative numbers (e.g. ``-1e9``) is not ``-inf``: added to a
        whole row it is a constant shift, which softmax ignores, so that row keeps nonzero
        weights (in float32, where 1e9 swamps the scores, they come out nearly uniform).

    Device and dtype follow the inputs (CPU or CUDA; float16, bfloat16, float32, float64).
    float16 and bfloat16 inputs are computed in float32 (scores, softmax and the weighted
    sum) and rounded once, as torch's SDPA does on the CPU: the scores of half-precision
    inputs may exceed float16's range (65504) even when the inputs do not. The query is
    scaled before the product, so ``Q K^T`` never exists unscaled.

    Empty dimensions give empty or well-defined results: ``L = 0`` gives ``(..., 0, d_v)``
    and ``(..., 0, S)``; ``S = 0`` leaves every query with no key, so zeros ``(..., L, d_v)``;
    ``d_k = 0`` needs an explicit ``scale`` (all scores are then 0: uniform weights).

    Raises:
        TypeError: an argument is not a floating tensor, the dtypes differ, the mask is
            neither boolean nor floating, or the scale is not a number.
        ValueError: a rank below 2, ``d_k`` or ``S`` that disagree, batch dimensions that do
            not broadcast, a mask that does not broadcast to ``(..., L, S)``, devices that
            differ, a scale that is not positive and finite, or ``d_k = 0`` without a scale.
    """
    check_attention_inputs(query, key, value, mask)
    return _attention(query, key, value, mask, default_scale(query, scale))


def _attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor], scale: float
) -> Tuple[Tensor, Tensor]:
    """:func:`scaled_dot_product_attention` without the checks, for callers that checked their inputs.

    Args as there, with ``scale`` given (not ``None``).
    """
    out_dtype = query.dtype
    if out_dtype in (torch.float16, torch.bfloat16):  # compute in float32, round once at the end
        query, key, value = query.float(), key.float(), value.float()

    scores = (query * scale) @ key.transpose(-2, -1)  # (..., L, S)
    if mask is not None and mask.dtype == torch.bool:
        scores = torch.where(mask, scores, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(scores.dtype)
    weights = _safe_softmax(scores)  # rows sum to 1 over the keys
    return (weights @ value).to(out_dtype), weights.to(out_dtype)
