"""Generating text with a trained causal language model (chapter 5).

:func:`generate` appends one token at a time: run the model on the context (the last
``max_len`` tokens), turn the logits of the last position into a distribution with
:func:`next_token_distribution` (temperature, top-k) and draw from it.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import torch
from torch import Tensor, nn

from ._checks import (
    fmt_shape,
    require_bool,
    require_floating,
    require_non_negative_int,
    require_positive_int,
    require_tensor,
)

__all__ = ["next_token_distribution", "sample_next", "generate"]


def _check_sampling(temperature: float, top_k: Optional[int]) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(
            f"temperature must be a real number >= 0, got {type(temperature).__name__}"
            f" {temperature!r}"
        )
    if not (math.isfinite(temperature) and temperature >= 0.0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None:
        require_positive_int("top_k", top_k)


def _check_logits(logits: Tensor) -> None:
    """``logits`` ``(..., V)``: floating, ``V >= 1``, no NaN or +inf, a finite value in every row."""
    require_floating("logits", logits)
    if logits.dim() < 1 or logits.size(-1) == 0:
        raise ValueError(
            "logits must be (..., V) with a vocabulary of V >= 1 tokens, got"
            f" {fmt_shape(logits.shape)}"
        )
    if torch.isnan(logits).any() or torch.isposinf(logits).any():
        raise ValueError(f"logits must not contain NaN or +inf (shape {fmt_shape(logits.shape)})")
    empty = torch.isneginf(logits).all(-1)  # rows where no token is possible
    if empty.any():
        row = [int(i) for i in empty.nonzero()[0]]
        raise ValueError(
            f"logits row {tuple(row)} is -inf everywhere: no token has any probability, so there is"
            f" no distribution to sample from (logits shape {fmt_shape(logits.shape)})"
        )


def next_token_distribution(
    logits: Tensor, *, temperature: float = 1.0, top_k: Optional[int] = None
) -> Tensor:
    """Probabilities ``(..., V)`` from logits ``(..., V)``: ``softmax(logits / temperature)`` over the top ``k``.

    With ``top_k`` every logit below the ``k``-th largest is removed first (ties with the
    ``k``-th are kept). ``temperature = 0`` is greedy decoding: all the mass on the largest
    logit (the first one, for a tie). A tiny positive temperature gives the limit of
    ``T -> 0``: the mass shared by the largest logits (no overflow: the largest logit is
    subtracted before dividing by ``T``). The softmax is computed in float64 for float64
    logits and in float32 otherwise (half and bfloat16 logits included), and returned in the
    logits' dtype. Logits with NaN or +inf, an empty vocabulary, or a row where every logit is
    -inf raise a ``ValueError``: there is no distribution to return.
    """
    _check_logits(logits)
    _check_sampling(temperature, top_k)
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if temperature == 0.0:
        return nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).to(logits.dtype)
    work = logits if logits.dtype == torch.float64 else logits.float()
    if float(temperature) < torch.finfo(work.dtype).tiny:  # T would round to 0 in float32
        work = work.double()
    shifted = work - work.amax(-1, keepdim=True)  # <= 0, and 0 at the largest: no inf - inf
    return torch.softmax(shifted / float(temperature), dim=-1).to(logits.dtype)


def sample_next(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    """Draw one token id per row of ``logits`` ``(B, V)``; returns ``(B, 1)`` int64."""
    require_tensor("logits", logits)
    if logits.dim() != 2:
        raise ValueError(f"logits must be (B, V), got {fmt_shape(logits.shape)}")
    probs = next_token_distribution(logits, temperature=temperature, top_k=top_k)
    if temperature == 0.0:
        return probs.argmax(-1, keepdim=True)
    work = probs if probs.dtype == torch.float64 else probs.float()
    return torch.multinomial(work, 1, generator=generator)


@torch.no_grad()
def generate(
    model: nn.Module,
    tokens: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    use_cache: bool = False,
) -> Tensor:
    """Continue ``tokens`` ``(B, T)`` by ``max_new_tokens`` sampled tokens; returns ``(B, T + max_new_tokens)``.

    Each step runs ``model`` (tokens ``(B, L)`` -> logits ``(B, L, V)``) on the last
    ``model.max_len`` tokens and samples from the last position's logits, so the whole
    context is recomputed every step. The model runs in ``eval()`` mode (no dropout) and is
    put back in the mode it had. ``temperature=0`` (or ``top_k=1``) is greedy decoding; pass
    a seeded ``generator`` for reproducible samples.

    ``use_cache=True`` (chapter 6) runs the prompt once through the model with an empty KV
    cache per layer (``model.new_cache()``), then feeds only the newest token
    (``model(token, cache)``): each step computes one new position instead of the whole
    context, and the logits, hence the tokens, are those of the uncached loop. The cache
    keeps every position, so ``T + max_new_tokens - 1`` must not exceed ``model.max_len``
    (there is no cropping to slide learned positions along).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module (tokens -> logits), got {type(model).__name__}"
        )
    require_tensor("tokens", tokens)
    if (
        tokens.dim() != 2
        or tokens.is_floating_point()
        or tokens.dtype == torch.bool
        or tokens.size(1) == 0
    ):
        raise ValueError(
            f"tokens must be a non-empty integer tensor (B, T), got {tokens.dtype}"
            f" {fmt_shape(tokens.shape)}"
        )
    require_non_negative_int("max_new_tokens", max_new_tokens)
    _check_sampling(temperature, top_k)
    require_bool("use_cache", use_cache)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    max_len = getattr(model, "max_len", None)
    if use_cache and max_len is not None and tokens.size(1) + max_new_tokens - 1 > max_len:
        raise ValueError(
            f"with use_cache=True the prompt ({tokens.size(1)} tokens) plus max_new_tokens - 1 ="
            f" {max_new_tokens - 1} must fit the model's max_len={max_len}: the cache keeps every"
            " position"
        )
    if use_cache and not callable(getattr(model, "new_cache", None)):
        raise TypeError(
            "use_cache=True needs a model with a KV cache (a new_cache() method, as CausalLM has);"
            f" {type(model).__name__} has none: generate with use_cache=False"
        )
    cache = model.new_cache() if use_cache else None
    step_input = tokens  # with the cache: the prompt first, then the newest token only
    was_training = model.training
    model.eval()
    try:
        for step in range(max_new_tokens):
            if cache is not None:
                # (B, V): only the new positions are computed
                logits = model(step_input, cache)[:, -1]
            else:
                context = tokens if max_len is None else tokens[:, -max_len:]
                logits = model(context)[:, -1]  # (B, V)
            # once: the vocabulary is the model's, the same at every step
            if step == 0 and logits.size(-1) - 1 > torch.iinfo(tokens.dtype).max:
                raise TypeError(
                    f"tokens of dtype {tokens.dtype} cannot hold the ids of the model's"
                    f" {logits.size(-1)} tokens (up to {logits.size(-1) - 1}): pass int64 tokens"
                )
            next_token = sample_next(
                logits, temperature=temperature, top_k=top_k, generator=generator
            )
            step_input = next_token.to(tokens.device, tokens.dtype)
            tokens = torch.cat([tokens, step_input], dim=1)
    finally:
        model.train(was_training)
    return tokens
