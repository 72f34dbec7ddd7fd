"""Chapter 3 exercises: padding masks, causal masks and their combination."""
from __future__ import annotations

import torch

from ..masks import causal_mask, combine_masks, padding_mask
from ._core import Mistake, call, diagnose, exercise, expect_tensor


def _boolean(out, shape, what) -> torch.Tensor:
    expect_tensor(out, shape, what)
    if out.dtype != torch.bool:
        raise Mistake(
            f"{what} should be boolean (True = may attend), got dtype {out.dtype}. "
            "A comparison such as positions < lengths already gives booleans."
        )
    return out


def _as_mask(out) -> torch.Tensor:
    """The learner's output as a boolean tensor for diagnosis (0/1 masks compared by value)."""
    return out.bool() if isinstance(out, torch.Tensor) else out


# -- 1. padding mask ---------------------------------------------------------------------------


def _padding_solution(lengths, max_len):
    positions = torch.arange(max_len)  # (S,)
    return positions[None, :] < lengths[:, None]  # (B, S): True at the real tokens


@exercise(
    "masking/padding-mask",
    title="A padding mask from the lengths",
    hint="""
        Compare the positions 0, 1, ..., max_len - 1 with each sequence's length: position j is a real
        token of sequence b when j < lengths[b]. Broadcasting a row of positions (1, S) against a
        column of lengths (B, 1) gives the whole (B, S) mask in one comparison.
    """,
    solution=_padding_solution,
)
def _check_padding(fn) -> str:
    cases = [(torch.tensor([3, 1]), 3), (torch.tensor([4, 0, 2, 6]), 6), (torch.tensor([2, 5, 1]), 7)]
    for lengths, max_len in cases:
        out = call(fn, lengths, max_len)
        expected = padding_mask(lengths, max_len)
        what = f"For lengths {lengths.tolist()} and max_len={max_len}, the mask"
        if isinstance(out, torch.Tensor) and out.shape == expected.shape and out.dtype != torch.bool:
            if torch.equal(out.bool(), expected):
                raise Mistake(f"{what} has the right 1s and 0s but dtype {out.dtype}: return booleans (True = may attend).")
        longest = int(lengths.max())
        if isinstance(out, torch.Tensor) and longest != max_len and tuple(out.shape) == (lengths.numel(), longest):
            raise Mistake(f"{what} has shape {tuple(out.shape)}: max_len is ignored. The batch is padded to max_len = "
                          f"{max_len}, beyond its longest sequence ({longest}): use torch.arange(max_len).")
        _boolean(out, expected.shape, what)
        if not torch.equal(out, expected):
            positions = torch.arange(max_len)[None, :]
            raise Mistake(
                diagnose(
                    out,
                    {
                        "The polarity is inverted: True must mark the real tokens (may attend), False the padding.": ~expected,
                        "Off by one: position j is real when j < length, not j <= length.": positions <= lengths[:, None],
                        "Off by one: position j is real when j < length; you dropped the last real token.":
                            positions < lengths[:, None] - 1,
                        "Your padding is at the front: this batch is padded at the end, so the first lengths[b] positions are real.":
                            positions >= max_len - lengths[:, None],
                    },
                    atol=0,
                    default=f"{what} is wrong: expected {expected.int().tolist()}, got {out.int().tolist()}.",
                )
            )
    return "Right: True at the first lengths[b] positions of each row."


# -- 2. causal mask with a cache ------------------------------------------------------------------


def _causal_solution(query_len, key_len):
    i = torch.arange(query_len)[:, None]  # query positions, counted from the end of the keys
    j = torch.arange(key_len)[None, :]
    return j <= i + (key_len - query_len)  # the last query sees every key


@exercise(
    "masking/causal-mask",
    title="A causal mask, also when the queries read a cache",
    hint="""
        Start with the square case (query_len == key_len): query i may see key j when j <= i, the
        lower triangle, diagonal included. With a cache, the queries are the LAST query_len positions
        of the key_len keys: query i sits at position i + (key_len - query_len).
    """,
    solution=_causal_solution,
)
def _check_causal(fn) -> str:
    for query_len, key_len in [(4, 4), (1, 1), (6, 6), (2, 5), (3, 7), (1, 4)]:
        out = call(fn, query_len, key_len)
        expected = causal_mask(query_len, key_len)
        what = f"For query_len={query_len}, key_len={key_len}, the mask"
        if isinstance(out, torch.Tensor) and out.shape == (key_len, query_len) and query_len != key_len:
            raise Mistake(f"{what} has shape (key_len, query_len): the queries are the rows, (query_len, key_len).")
        if isinstance(out, torch.Tensor) and out.shape == expected.shape and out.dtype != torch.bool and torch.equal(out.bool(), expected):
            raise Mistake(f"{what} has the right 1s and 0s but dtype {out.dtype}: return booleans (True = may attend).")
        _boolean(out, expected.shape, what)
        if not torch.equal(out, expected):
            ones = torch.ones(query_len, key_len, dtype=torch.bool)
            shift = key_len - query_len
            mistakes = {
                "The polarity is inverted: True must mark the keys a query MAY attend to (the past and itself).": ~expected,
                "Off by one: a query may attend to its own position too (keep the diagonal: j <= i, not j < i).":
                    torch.tril(ones, diagonal=shift - 1),
                "Off by one: each query sees one key of the future (j <= i + 1). Keep only j <= i.": torch.tril(ones, diagonal=shift + 1),
                "Upper instead of lower triangle: a query may see the keys BEFORE it, so rows are queries and the "
                "True entries sit at j <= i.": torch.triu(ones, diagonal=shift),
            }
            if shift:
                mistakes[
                    "Your mask aligns the first query with the first key (top-left, like is_causal=True in torch's SDPA). "
                    "With a cache the queries are the last query_len positions: align the last query with the last key."
                ] = torch.tril(ones)
            raise Mistake(
                diagnose(out, mistakes, atol=0, default=f"{what} is wrong: expected {expected.int().tolist()}, got {out.int().tolist()}.")
            )
    return "Right: the lower triangle, aligned so that the last query sees every key."


# -- 3. padding and causal masks together ----------------------------------------------------


def _attention_mask_solution(lengths, max_len, causal):
    positions = torch.arange(max_len)
    keys = positions[None, :] < lengths[:, None]  # (B, S): the real keys
    mask = keys[:, None, :].expand(-1, max_len, -1)  # (B, L, S): padding masks the KEYS, for every query
    if causal:
        mask = mask & (positions[None, :] <= positions[:, None])  # AND the (L, S) lower triangle
    return mask


@exercise(
    "masking/attention-mask",
    title="The self-attention mask of a padded batch, causal or not",
    hint="""
        Start from the (B, S) padding mask. It is about the keys, so it must hold for every query:
        keys[:, None, :] has shape (B, 1, S); expand it to (B, L, S). For a decoder (causal=True)
        combine it with the (L, L) lower triangle by a logical AND: a key is kept only if both keep it.
    """,
    solution=_attention_mask_solution,
)
def _check_attention_mask(fn) -> str:
    for causal in (False, True):
        # the last case pads beyond the longest sequence: max_len is not lengths.max()
        for lengths, max_len in [(torch.tensor([5, 3]), 5), (torch.tensor([2, 6, 4]), 6), (torch.tensor([3, 1]), 5)]:
            out = call(fn, lengths, max_len, causal)
            B = lengths.numel()
            pad = padding_mask(lengths, max_len)
            tri = causal_mask(max_len)
            expected = combine_masks(tri if causal else None, pad[:, None, :]).expand(B, max_len, max_len)
            what = f"For lengths {lengths.tolist()}, max_len={max_len}, causal={causal}, the mask"
            longest = int(lengths.max())
            if isinstance(out, torch.Tensor) and longest != max_len and out.shape == (B, longest, longest):
                raise Mistake(f"{what} has shape {tuple(out.shape)}: max_len is ignored. The batch is padded to max_len = "
                              f"{max_len}, beyond its longest sequence ({longest}): use torch.arange(max_len).")
            if isinstance(out, torch.Tensor) and out.shape in ((max_len, max_len), (B, max_len)):
                raise Mistake(f"{what} has shape {tuple(out.shape)}: it must be (B, L, S) = {(B, max_len, max_len)}.")
            _boolean(out, (B, max_len, max_len), what)
            if torch.equal(out, expected):
                continue
            causal_part = tri if causal else torch.ones(max_len, max_len, dtype=torch.bool)
            mistakes = {
                "The padding is applied to the queries (rows) instead of the keys (columns): the real tokens still "
                "attend to the pads. Use pad[:, None, :], not pad[:, :, None].": causal_part & pad[:, :, None],
                "You masked the pads as both queries and keys: a padded query's row is then empty (all False), which "
                "gives NaN with -inf. Mask the keys only; the outputs at padded queries are simply ignored later.":
                    expected & pad[:, :, None],
                "The polarity is inverted: True must mark what a query MAY attend to.": ~expected,
                "The padding is missing: the pads of the shorter sequences are still visible as keys.":
                    causal_part.expand(B, -1, -1),
            }
            if causal:
                mistakes["The causal part is missing: with causal=True, AND the lower triangle (j <= i)."] = pad[:, None, :].expand(B, max_len, -1)
                mistakes["You combined the masks with OR; a key is kept only if BOTH masks keep it: use &."] = tri | pad[:, None, :]
            else:
                mistakes["With causal=False there is no causal part: only the padding is masked."] = tri & pad[:, None, :]
            raise Mistake(diagnose(out, mistakes, atol=0, default=f"{what} is wrong; a key j is kept when j < lengths[b] (and j <= i if causal)."))
    return "Right: key padding for every query, AND the causal triangle for a decoder; shape (B, L, S)."
