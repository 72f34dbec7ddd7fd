"""A synthetic language that needs a fixed lookup table (chapter 9's experiment).

Each token is read off a fixed random table indexed by the two tokens before it::

    x_t = TABLE[x_{t-1}, x_{t-2}]   with probability 1 - noise,
    x_t ~ uniform over the vocabulary otherwise.

Attention can fetch ``x_{t-1}`` and ``x_{t-2}`` from the context, but the table itself is
knowledge about the task that no context holds: a model must store its ``V^2`` entries in
its weights, in a feed-forward layer or in persistent memory vectors.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from ._checks import fmt_shape, require_positive_int, require_tensor

__all__ = ["make_table", "lookup_sequences", "lookup_entropy"]


def make_table(vocab_size: int, *, generator: Optional[torch.Generator] = None) -> Tensor:
    """A random table ``(V, V)`` of token ids: ``TABLE[a, b]`` follows the pair ``(b, a)``."""
    require_positive_int("vocab_size", vocab_size)
    return torch.randint(vocab_size, (vocab_size, vocab_size), generator=generator)


def _check_noise(noise: float) -> None:
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be a probability in [0, 1], got {noise!r}")


def lookup_sequences(
    table: Tensor, num_sequences: int, length: int, *, noise: float = 0.2, generator: Optional[torch.Generator] = None
) -> Tensor:
    """Sample ``(num_sequences, length)`` token sequences of the lookup language.

    Args:
        table: ``(V, V)`` integer table from :func:`make_table`.
        num_sequences: ``B``.
        length: ``L >= 3``; the first two tokens of each sequence are uniform.
        noise: probability that a token is uniform instead of read from the table.
        generator: for reproducible samples.
    """
    require_tensor("table", table)
    if table.dim() != 2 or table.size(0) != table.size(1) or table.is_floating_point() or table.dtype == torch.bool:
        raise ValueError(f"table must be a square integer tensor (V, V), got {table.dtype} {fmt_shape(table.shape)}")
    require_positive_int("num_sequences", num_sequences)
    require_positive_int("length", length)
    if length < 3:
        raise ValueError(f"length must be at least 3 (two free tokens, then the table), got {length}")
    _check_noise(noise)
    vocab = table.size(0)
    tokens = torch.randint(vocab, (num_sequences, length), generator=generator)  # the noise, and x_0, x_1
    use_table = torch.rand(num_sequences, length, generator=generator) >= noise
    for t in range(2, length):
        looked_up = table[tokens[:, t - 1], tokens[:, t - 2]]
        tokens[:, t] = torch.where(use_table[:, t], looked_up, tokens[:, t])
    return tokens


def lookup_entropy(vocab_size: int, noise: float) -> float:
    """The lowest achievable next-token loss (nats) for a token read from the table.

    A model that knows the table perfectly puts ``1 - noise + noise / V`` on the table's
    entry and ``noise / V`` on each other token; its expected cross-entropy is the entropy
    of that distribution.
    """
    require_positive_int("vocab_size", vocab_size)
    _check_noise(noise)
    hit, miss = 1 - noise + noise / vocab_size, noise / vocab_size
    entropy = -hit * math.log(hit) if hit > 0 else 0.0
    if miss > 0:
        entropy -= (vocab_size - 1) * miss * math.log(miss)
    return entropy
