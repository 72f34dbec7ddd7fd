"""A synthetic sequence task for chapter 8: some predictions need a near token, others a far one.

Token ``t`` (from position ``far`` on) copies the token ``near`` positions back when the
previous token is in the lower half of the vocabulary, and the token ``far`` positions back
otherwise; with probability ``noise`` it is replaced by a uniformly random token. The first
``far`` tokens are random. A model predicting token ``t`` needs one head looking ``near``
back, one looking ``far`` back, and the previous token to choose between them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_positive_ints, check_probability, check_seed, require_positive_int
from .text import _require_float_size

__all__ = ["near_far_copy_task", "near_far_entropy"]


def near_far_copy_task(
    num_sequences: int,
    length: int,
    *,
    vocab_size: int = 16,
    near: int = 4,
    far: int = 40,
    noise: float = 0.1,
    seed: int = 0,
) -> Tensor:
    """``(num_sequences, length)`` int64 tokens of the near/far copy task (see the module docstring).

    The loss should count only targets at positions ``>= far``
    (``next_token_loss(logits, tokens, start=far)``).
    """
    num_sequences, length, vocab_size, near, far = check_positive_ints(
        num_sequences=num_sequences, length=length, vocab_size=vocab_size, near=near, far=far
    )
    if not near < far < length:
        raise ValueError(f"need near < far < length, got near={near}, far={far}, length={length}")
    _require_two_halves(vocab_size)
    noise = check_probability("noise", noise)
    g = torch.Generator().manual_seed(check_seed("seed", seed))
    tokens = torch.randint(vocab_size, (num_sequences, length), generator=g)
    replace = torch.rand(num_sequences, length, generator=g) < noise
    random_tokens = torch.randint(vocab_size, (num_sequences, length), generator=g)
    for t in range(far, length):
        copied = torch.where(
            tokens[:, t - 1] < vocab_size // 2, tokens[:, t - near], tokens[:, t - far]
        )
        tokens[:, t] = torch.where(replace[:, t], random_tokens[:, t], copied)
    return tokens


def near_far_entropy(vocab_size: int = 16, noise: float = 0.1) -> float:
    """The lowest achievable loss (nats per target): the entropy of the noise around the copied token.

    ``vocab_size`` and ``noise`` as for :func:`near_far_copy_task` (``vocab_size >= 2``, ``noise``
    in ``[0, 1)``).
    """
    require_positive_int("vocab_size", vocab_size)
    _require_two_halves(vocab_size)
    _require_float_size("vocab_size", vocab_size)
    vocab_size, noise = int(vocab_size), check_probability("noise", noise)
    right = 1 - noise + noise / vocab_size
    other = noise / vocab_size
    spread = (vocab_size - 1) * other * math.log(other) if other > 0 else 0.0
    return -(right * math.log(right) + spread) if noise > 0 else 0.0


def _require_two_halves(vocab_size: int) -> None:
    if vocab_size < 2:
        raise ValueError(
            f"vocab_size must be at least 2 (a lower and an upper half), got {vocab_size}"
        )
