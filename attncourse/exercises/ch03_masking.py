"""Chapter 3 exercises: padding masks, causal masks and their combination."""

from __future__ import annotations

import torch

from ..masks import causal_mask, combine_masks, padding_mask
from ._core import Mistake, call, check_number, diagnose, exercise, expect_tensor, matches
from ._i18n import _


def _boolean(out, shape, what) -> torch.Tensor:
    expect_tensor(out, shape, what)
    if out.dtype != torch.bool:
        raise Mistake(
            _(
                "{what} should be boolean (True = may attend), got dtype {out_dtype}. A comparison "
                "such as positions < lengths already gives booleans."
            ).format(what=what, out_dtype=out.dtype)
        )
    return out


def _wrong_mask(out, mistakes, default) -> Mistake:
    """The feedback on a wrong boolean mask ``out``: the known mistake it equals exactly
    (:func:`diagnose` with ``atol=0``), else ``default``."""
    return Mistake(diagnose(out, mistakes, atol=0, default=default))


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
    hint=(
        """
            Position j of sequence b is a real token when j is less than that sequence's
            length. One comparison, broadcast between the positions and the lengths, gives
            the whole mask.
        """,
        """
            Compare the positions 0, 1, ..., max_len - 1 with each sequence's length: position j is a real
            token of sequence b when j < lengths[b]. Broadcasting a row of positions (1, S) against a
            column of lengths (B, 1) gives the whole (B, S) mask in one comparison.
        """,
    ),
    solution=_padding_solution,
    name="make_padding_mask",
    forbids=(padding_mask,),
)
def _check_padding(fn) -> str:
    cases = [
        (torch.tensor([3, 1]), 3),
        (torch.tensor([4, 0, 2, 6]), 6),
        (torch.tensor([2, 5, 1]), 7),
    ]
    for lengths, max_len in cases:
        out = call(fn, lengths, max_len)
        expected = padding_mask(lengths, max_len)
        what = _("For lengths {lengths} and max_len={max_len}, the mask").format(
            lengths=lengths.tolist(), max_len=max_len
        )
        if (
            isinstance(out, torch.Tensor)
            and out.shape == expected.shape
            and out.dtype != torch.bool
        ):
            if torch.equal(out.bool(), expected):
                raise Mistake(
                    _(
                        "{what} has the right 1s and 0s but dtype {out_dtype}: return booleans (True = may "
                        "attend)."
                    ).format(what=what, out_dtype=out.dtype)
                )
        longest = int(lengths.max())
        if (
            isinstance(out, torch.Tensor)
            and longest != max_len
            and tuple(out.shape) == (lengths.numel(), longest)
        ):
            raise Mistake(
                _(
                    "{what} has shape {out_shape}: max_len is ignored. The batch is padded to max_len = "
                    "{max_len}, beyond its longest sequence ({longest}): use torch.arange(max_len)."
                ).format(what=what, out_shape=tuple(out.shape), max_len=max_len, longest=longest)
            )
        _boolean(out, expected.shape, what)
        if not torch.equal(out, expected):
            positions = torch.arange(max_len)[None, :]
            raise _wrong_mask(
                out,
                {
                    _(
                        "The polarity is inverted: True must mark the real tokens (may attend), False the "
                        "padding."
                    ): (~expected),
                    _("Off by one: position j is real when j < length, not j <= length."): (
                        positions <= lengths[:, None]
                    ),
                    _(
                        "Off by one: position j is real when j < length; you dropped the last real token."
                    ): (positions < lengths[:, None] - 1),
                    (
                        _(
                            "Your padding is at the front: this batch is padded at the end, so the first "
                            "lengths[b] positions are real."
                        )
                    ): (positions >= max_len - lengths[:, None]),
                },
                default=(
                    _("{what} is wrong: expected {expected}, got {out}.").format(
                        what=what, expected=expected.int().tolist(), out=out.int().tolist()
                    )
                ),
            )
    return _("Right: True at the first lengths[b] positions of each row.")


# -- 2. causal mask with a cache ------------------------------------------------------------------


def _causal_solution(query_len, key_len):
    i = torch.arange(query_len)[:, None]  # query positions, counted from the end of the keys
    j = torch.arange(key_len)[None, :]
    return j <= i + (key_len - query_len)  # the last query sees every key


def _triangle_slips(query_len: int, key_len: int) -> dict:
    """The usual slips of the causal triangle of ``(query_len, key_len)``, aligned bottom right:
    message -> the ``(query_len, key_len)`` boolean mask they give."""
    ones = torch.ones(query_len, key_len, dtype=torch.bool)
    shift = key_len - query_len
    return {
        _(
            "Off by one: a query may attend to its own position too (keep the diagonal: j <= i, "
            "not j < i)."
        ): ones.tril(shift - 1),
        _(
            "Off by one: each query sees one key of the future (j <= i + 1). Keep only j <= i."
        ): ones.tril(shift + 1),
        _(
            "Upper instead of lower triangle: a query may see the keys BEFORE it, so rows are "
            "queries and the True entries sit at j <= i."
        ): ones.triu(shift),
    }


@exercise(
    "masking/causal-mask",
    title="A causal mask, also when the queries read a cache",
    hint=(
        """
            Start with the square case: which keys may query i see? Then think about a
            cache: the queries are the last positions of the keys, so where does query i
            sit?
        """,
        """
            Start with the square case (query_len == key_len): query i may see key j when j <= i, the
            lower triangle, diagonal included. With a cache, the queries are the LAST query_len positions
            of the key_len keys: query i sits at position i + (key_len - query_len).
        """,
    ),
    solution=_causal_solution,
    name="make_causal_mask",
    forbids=(causal_mask,),
)
def _check_causal(fn) -> str:
    for query_len, key_len in [(4, 4), (1, 1), (6, 6), (2, 5), (3, 7), (1, 4)]:
        out = call(fn, query_len, key_len)
        expected = causal_mask(query_len, key_len)
        what = _("For query_len={query_len}, key_len={key_len}, the mask").format(
            query_len=query_len, key_len=key_len
        )
        if (
            isinstance(out, torch.Tensor)
            and out.shape == (key_len, query_len)
            and query_len != key_len
        ):
            raise Mistake(
                _(
                    "{what} has shape (key_len, query_len): the queries are the rows, (query_len, "
                    "key_len)."
                ).format(what=what)
            )
        if (
            isinstance(out, torch.Tensor)
            and out.shape == expected.shape
            and out.dtype != torch.bool
            and torch.equal(out.bool(), expected)
        ):
            raise Mistake(
                _(
                    "{what} has the right 1s and 0s but dtype {out_dtype}: return booleans (True = may "
                    "attend)."
                ).format(what=what, out_dtype=out.dtype)
            )
        _boolean(out, expected.shape, what)
        if not torch.equal(out, expected):
            ones = torch.ones(query_len, key_len, dtype=torch.bool)
            shift = key_len - query_len
            mistakes = {
                _(
                    "The polarity is inverted: True must mark the keys a query MAY attend to (the past "
                    "and itself)."
                ): (~expected),
                **_triangle_slips(query_len, key_len),
            }
            if shift:
                mistakes[
                    _(
                        "Your mask aligns the first query with the first key (top-left, like"
                        " is_causal=True in torch's SDPA). With a cache the queries are the last"
                        " query_len positions: align the last query with the last key."
                    )
                ] = torch.tril(ones)
            raise _wrong_mask(
                out,
                mistakes,
                default=(
                    _("{what} is wrong: expected {expected}, got {out}.").format(
                        what=what, expected=expected.int().tolist(), out=out.int().tolist()
                    )
                ),
            )
    return _("Right: the lower triangle, aligned so that the last query sees every key.")


# -- 3. padding and causal masks together ----------------------------------------------------


def _attention_mask_solution(lengths, max_len, causal):
    positions = torch.arange(max_len)
    keep = positions[None, :] < lengths[:, None]  # (B, S): True at the real keys
    # (B, L, S): padding masks the KEYS, for every query
    mask = keep[:, None, :].expand(-1, max_len, -1)
    if causal:
        mask = mask & (positions[None, :] <= positions[:, None])  # AND the (L, S) lower triangle
    return mask


@exercise(
    "masking/attention-mask",
    title="The self-attention mask of a padded batch, causal or not",
    hint=(
        """
            The padding mask is about the keys, so it holds for every query: give it a
            query dimension. For a decoder it must be combined with the causal mask so
            that a key is kept only if both keep it.
        """,
        """
            Start from the (B, S) padding mask, keep. It is about the keys, so it must hold for every
            query: keep[:, None, :] has shape (B, 1, S); expand it to (B, L, S). For a decoder (causal=True)
            combine it with the (L, L) lower triangle by a logical AND: a key is kept only if both keep it.
        """,
    ),
    solution=_attention_mask_solution,
    name="make_attention_mask",
    forbids=(padding_mask, causal_mask, combine_masks),
)
def _check_attention_mask(fn) -> str:
    for causal in (False, True):
        # the last case pads beyond the longest sequence: max_len is not lengths.max()
        for lengths, max_len in [
            (torch.tensor([5, 3]), 5),
            (torch.tensor([2, 6, 4]), 6),
            (torch.tensor([3, 1]), 5),
        ]:
            out = call(fn, lengths, max_len, causal)
            B = lengths.numel()
            pad = padding_mask(lengths, max_len)
            tri = causal_mask(max_len)
            expected = combine_masks(tri if causal else None, pad[:, None, :]).expand(
                B, max_len, max_len
            )
            what = _("For lengths {lengths}, max_len={max_len}, causal={causal}, the mask").format(
                lengths=lengths.tolist(), max_len=max_len, causal=causal
            )
            longest = int(lengths.max())
            if (
                isinstance(out, torch.Tensor)
                and longest != max_len
                and out.shape == (B, longest, longest)
            ):
                raise Mistake(
                    _(
                        "{what} has shape {out_shape}: max_len is ignored. The batch is padded to max_len = "
                        "{max_len}, beyond its longest sequence ({longest}): use torch.arange(max_len)."
                    ).format(
                        what=what, out_shape=tuple(out.shape), max_len=max_len, longest=longest
                    )
                )
            if isinstance(out, torch.Tensor) and out.shape in ((max_len, max_len), (B, max_len)):
                raise Mistake(
                    _("{what} has shape {out_shape}: it must be (B, L, S) = {value}.").format(
                        what=what, out_shape=tuple(out.shape), value=(B, max_len, max_len)
                    )
                )
            _boolean(out, (B, max_len, max_len), what)
            if torch.equal(out, expected):
                continue
            causal_part = tri if causal else torch.ones(max_len, max_len, dtype=torch.bool)
            mistakes = {
                (
                    _(
                        "The padding is applied to the queries (rows) instead of the keys (columns): the "
                        "real tokens still attend to the pads. Use pad[:, None, :], not pad[:, :, None]."
                    )
                ): (causal_part & pad[:, :, None]),
                (
                    _(
                        "You masked the pads as both queries and keys: a padded query's row is then empty "
                        "(all False), which gives NaN with -inf. Mask the keys only; the outputs at padded "
                        "queries are simply ignored later."
                    )
                ): (expected & pad[:, :, None]),
                _(
                    "The polarity is inverted: True must mark what a query MAY attend to."
                ): ~expected,
                (
                    _(
                        "The padding is missing: the pads of the shorter sequences are still visible as keys."
                    )
                ): causal_part.expand(B, -1, -1),
            }
            if causal:
                mistakes[
                    _(
                        "The causal part is missing: with causal=True, AND the lower triangle (j <= i)."
                    )
                ] = pad[:, None, :].expand(B, max_len, -1)
                mistakes[
                    _(
                        "You combined the masks with OR; a key is kept only if BOTH masks keep it:"
                        " use &."
                    )
                ] = tri | pad[:, None, :]
                # the causal triangle's own slips, as the causal-mask exercise names them
                for message, triangle in _triangle_slips(max_len, max_len).items():
                    mistakes[message] = triangle & pad[:, None, :]
            else:
                mistakes[
                    _("With causal=False there is no causal part: only the padding is masked.")
                ] = tri & pad[:, None, :]
            raise _wrong_mask(
                out,
                mistakes,
                default=(
                    _(
                        "{what} is wrong; a key j is kept when j < lengths[b] (and j <= i if causal)."
                    ).format(what=what)
                ),
            )
    return _(
        "Right: the padding mask on the keys for every query, AND the causal triangle for a "
        "decoder; shape (B, L, S)."
    )


# -- 4. predict: how many pairs may attend -----------------------------------------------------

_ALLOWED = "VEQ="
_ALLOWED_MISTAKES = (
    "GlZCXUFVVVBFVkEdB04XBxBSEAQUBxUCQwIUARhFABgbAAZDVUBCRREVHRwQTxMdAUUEFRcGQwATUgcNBFRHThAKBAcWCwIRB1RDGx0XUxUAEB"
    "ALB08eFwoWQRkBHRdPFxdTFwQZGxgGC1UGHApPVlhOQVhHUElFQ0NGTgocVQYbAEEEFQoHBhsVUwgABx9OAgMaHBZFSUJUHxYKBxsWFkEAHQMG"
    "HFVEU05BQFRFQ11VABYEDVQfCxocXEhTEQkRVAgWGwAAFkUKEQ0dQwIAAQdFAxFUHAYCGgQWAUEAGwFNTVlSUVZZVk5OQTYaB1MXBBkbGAYLVQ"
    "YbAEEQHQ8EABsTH0UAB1QZBgMZSFMEQRcVGxAOGVIeBBIfVAIGGwZSFgQCHFQfFgoHC1MWBBFUBxccVR0EC0EEGx0KGxwdHUVJHlRSXk8cW11H"
    "TVRWXVdNT1JRPA4BVBwGAhoEFgFBABwLQx8UFhcABVQFGwYdHBcAQkEGGxkQTwEdHEtBNVQFBhZVAhIBBR0aCUMCFAEYRQkdEAsQTx4XChZaVA"
    "AGBk8HHQQWQRsSThMOERYWAUEFAQsRBhABUw4EEQROFwcQGwFFExEVAkMfFAEHRQoRDR1DRwEaFgwTVBsbFx8ABgBFAAYRTgoIGx0BAAVUGA8X"
    "CgdeUwcYVAAGBk8ZHQAWSFpWQkNNQEpRX0FWQVZDBgZSBw0EVBobDg0QAFMKB1QyDw8cEFIWCxUGHQsQVVURHBAPAFQaCwpVAhIMEwdUGgsOAV"
    "IeBBhUFRoXChsWU001BgELSkFXXlNHUERMTFlPV0NDXUEdB04GGRAACkUEGgAcGk8aFFMRCRFURlBDVURfRVddVAMCHB5IUwYOARoaQwAbHgpF"
    "FRwRThMOHAAARRUcFRpDAhQLUwQVABEAB0FXXlNHU0RETFlPVyYbBBVUFwEWAQEBUwAAFxxOEw4cAFMKDxcRThMKB1IbAAAQVEZXTx0XEgESXU"
    "5OFwcQUh4EEh9UAQVPARoaFkERDAsRDBwBFkUJFQdODQBVGhYEBVQQBw4KGwEaCg9aVhM="
)
_ALLOWED_SOLUTION = (
    "MAERHBpPHFIcA0EVVB0GHgAXHQYEVAMHFwdVHFMXBBUYThcAHhcdFkEZFRdDHBAXUwgIGlwHQ0RVQ19FD11UBQYWBkh5b0FUVE4NT0hSRV9BVE"
    "VOSE9HUlhFUlRfTldPXlJGRUpUQk5eT0dDeUVBVFQAQ1JVRklFQUVURUNdVVlTVkFfVFpDRFVGU05BQFRTQ15NeFNFQVQaTl5PR0hTRVBUX05R"
    "T15SQUVKVEZOSE9HUlhFU1RJTlJef3hGVUEdGk4CAxlcUzIIABxOFwcQUgMEAh8VCQZVf3hTRUFUGQ8QBFVPUwYOGRYHDQoqHxIWCgdcDQIaBh"
    "MfOgwVBwVLWVxeUxUAEBAHDQgqHxIWClwAAREMHVwHAA8HGxxLNENeU1FNVEYzSkNVRFo+W1hUIAwBEF5TXzxdfk5DT1UbHRFJGRUdCEEGBx5N"
    "SF1UTkNMVUdD"
)


@exercise(
    "masking/count-allowed",
    title="Predict how many query-key pairs a decoder mask keeps",
    hint=(
        """
            Count sequence by sequence and query by query: a key is allowed when it is not
            in the future and is a real token. Do not forget the padded queries.
        """,
        """
            Count per sequence, query by query. Query i of a sequence with n real tokens may see the
            keys j <= i (causal) that are also real (j < n): min(i + 1, n) keys. Add over the 6 queries
            of each sequence (the padded queries too: their rows are not removed by a padding
            mask), then over the 3 sequences.
        """,
    ),
    solution=_ALLOWED_SOLUTION,
)
def _check_allowed(answer) -> str:
    return check_number(
        answer,
        _ALLOWED,
        _ALLOWED_MISTAKES,
        what=_("count"),
        right=_("Right: the causal triangle of 21, cut by each sequence's padded keys."),
        otherwise=(
            _(
                "{value:g} is not it. Count query by query as in the hint, or build the mask with "
                "the package and sum it."
            )
        ),
    )


# -- 5. find the bug: a padding mask that lines the batch up with the heads --------------------


def _padded_scores_solution(scores, keep):
    return scores.masked_fill(keep[:, None, None, :] == 0, float("-inf"))  # (B, S) -> (B, 1, 1, S)


@exercise(
    "masking/fix-padding-broadcast",
    title="Find the bug: a padding mask that does not line up",
    hint=(
        """
            Write the shapes of the scores and of the mask one under the other, aligned
            from the right. Which dimension of the scores does the mask's batch dimension
            meet?
        """,
        """
            Write down the shapes aligned from the right: scores (B, h, L, S) against
            keep.unsqueeze(1), which is (B, 1, S). Which dimension of the scores does the mask's B
            meet? The mask must vary along the batch and the keys only: give it shape (B, 1, 1, S).
        """,
    ),
    solution=_padded_scores_solution,
    name="masked_scores",
)
def _check_padded_scores(fn) -> str:
    """Property: for several batch and head counts (B == h among them), the softmax of the result
    puts no weight on padded keys and equals the reference; -1e9 is accepted, as it is right here.
    """
    generator = torch.Generator().manual_seed(50)
    for B, h, L, S in ((2, 2, 3, 3), (3, 4, 2, 5), (2, 2, 4, 3), (1, 3, 3, 4)):
        scores = torch.randn(B, h, L, S, generator=generator, dtype=torch.float64)
        lengths = torch.randint(1, S + 1, (B,), generator=generator)
        lengths[0] = S
        lengths[-1] = 1 if B > 1 else lengths[-1]
        keep = (torch.arange(S)[None, :] < lengths[:, None]).long()  # (B, S), 1 = a real token
        case = _("B={B}, h={h}, L={L}, S={S}").format(B=B, h=h, L=L, S=S)
        out = call(fn, scores.clone(), keep.clone())
        expect_tensor(out, scores.shape, _("{case}: the masked scores").format(case=case))
        expected = torch.softmax(_padded_scores_solution(scores, keep), -1)
        got = torch.softmax(out.to(torch.float64), -1)
        if matches(got, expected):
            # a fill of -15 is within the tolerance here but leaks e^-15; -inf or -1e9 leave 0,
            # -100 leaves e^-100: nothing
            leak = float(got.masked_select(keep[:, None, None, :] == 0).abs().sum())
            if leak <= 1e-30:
                continue
            raise Mistake(
                _(
                    "{case}: the padded keys keep a small weight ({leak:.1e} in all): fill them with "
                    "-inf, whose exponential is exactly 0. A finite fill such as -15 still draws "
                    "weight wherever the real scores are not far above it."
                ).format(case=case, leak=leak)
            )
        if B == h and L == S:
            wrong = {
                (
                    _(
                        "This is still the given code: keep.unsqueeze(1) is (B, 1, S), which broadcasts as "
                        "(1, B, 1, S) and lines the batch up with the heads. The mask must vary along "
                        "the batch and the keys only."
                    )
                ): torch.softmax(scores.masked_fill(keep.unsqueeze(1) == 0, float("-inf")), -1),
                (
                    _(
                        "You masked queries instead of keys (shape (B, 1, S, 1)): padding lives in the keys, "
                        "the last dimension."
                    )
                ): (
                    torch.softmax(
                        scores.masked_fill(keep[:, None, :, None] == 0, float("-inf")), -1
                    ).nan_to_num(0.0)
                ),
            }
        else:
            wrong = {}
        wrong[_("The mask polarity is inverted: keep is 1 at real tokens; fill where it is 0.")] = (
            torch.softmax(
                scores.masked_fill(keep[:, None, None, :] == 1, float("-inf")), -1
            ).nan_to_num(0.0)
        )
        wrong[
            _(
                "The padded scores are filled with 0, which leaves each padded key a weight of "
                "exp(0) / sum: fill them with -inf, whose exponential is 0."
            )
        ] = torch.softmax(scores.masked_fill(keep[:, None, None, :] == 0, 0.0), -1)
        raise Mistake(
            diagnose(
                got.nan_to_num(0.0),
                wrong,
                default=(
                    _(
                        "{case}: the softmax of your scores still puts weight on padded keys, or changes the "
                        "real ones. Fill only the padded keys, in every head and every query row."
                    ).format(case=case)
                ),
            )
        )
    return _("Right: a (B, S) padding mask becomes (B, 1, 1, S) against (B, h, L, S) scores.")
