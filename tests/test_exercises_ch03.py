"""Chapter 3 checkers accept the reference and name the usual mistakes."""

import numpy as np
import pytest
import torch
from exercise_helpers import assert_fails as _failed
from exercise_helpers import stub as _stub

from attncourse.exercises import check
from attncourse.exercises.ch03_masking import (
    _attention_mask_solution,
    _causal_solution,
    _padding_solution,
)


@pytest.mark.parametrize(
    "exercise_id", ["masking/padding-mask", "masking/causal-mask", "masking/attention-mask"]
)
def test_stub_is_not_attempted(exercise_id):
    assert check(exercise_id, _stub).status == "not attempted yet"


# -- padding --------------------------------------------------------------------------------------


def test_padding_accepts():
    assert check("masking/padding-mask", _padding_solution).passed
    loop = lambda lengths, S: torch.tensor(
        [[j < n for j in range(S)] for n in lengths.tolist()], dtype=torch.bool
    )
    assert check("masking/padding-mask", loop).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda n, S: torch.arange(S)[None, :] >= n[:, None], "polarity is inverted"),
        (lambda n, S: torch.arange(S)[None, :] <= n[:, None], "not j <= length"),
        (lambda n, S: torch.arange(S)[None, :] < n[:, None] - 1, "dropped the last real token"),
        (lambda n, S: torch.arange(S)[None, :] >= S - n[:, None], "padding is at the front"),
        (
            lambda n, S: (torch.arange(S)[None, :] < n[:, None]).long(),
            "right 1s and 0s but dtype torch.int64",
        ),
        (lambda n, S: torch.arange(S)[:, None] < n[None, :], "should have shape"),
        (lambda n, S: torch.ones(len(n), S, dtype=torch.bool), "is wrong: expected"),
    ],
)
def test_padding_rejects(wrong, words):
    _failed("masking/padding-mask", wrong, words)


# -- causal ---------------------------------------------------------------------------------------


def test_causal_accepts():
    assert check("masking/causal-mask", _causal_solution).passed
    assert check(
        "masking/causal-mask", lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L)
    ).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(), "top-left"),
        (lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L - 1), "keep the diagonal"),
        (lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L + 1), "one key of the future"),
        (lambda L, S: torch.ones(L, S, dtype=torch.bool).triu(S - L), "Upper instead of lower"),
        (lambda L, S: ~torch.ones(L, S, dtype=torch.bool).tril(S - L), "polarity is inverted"),
        (lambda L, S: torch.ones(L, S).tril(S - L), "right 1s and 0s"),
        (lambda L, S: torch.ones(S, L, dtype=torch.bool).tril(), "(key_len, query_len)"),
        (lambda L, S: torch.zeros(L, S, dtype=torch.bool), "is wrong: expected"),
    ],
)
def test_causal_rejects(wrong, words):
    _failed("masking/causal-mask", wrong, words)


# -- padding and causal together ----------------------------------------------------------------------


def _mask(lengths, S, causal, *, side="key", combine="and", with_causal=True, with_padding=True):
    pos = torch.arange(S)
    pad = pos[None, :] < lengths[:, None]
    tri = pos[None, :] <= pos[:, None]
    full = torch.ones(S, S, dtype=torch.bool)
    pad3 = {
        "key": pad[:, None, :],
        "query": pad[:, :, None],
        "both": pad[:, None, :] & pad[:, :, None],
    }[side]
    if not with_padding:
        pad3 = torch.ones(len(lengths), 1, 1, dtype=torch.bool)
    c = tri if (causal and with_causal) else full
    mask = (c | pad3) if (causal and combine == "or") else (c & pad3)
    return mask.expand(len(lengths), S, S)


def test_attention_mask_accepts():
    assert check("masking/attention-mask", _attention_mask_solution).passed
    assert check("masking/attention-mask", _mask).passed

    # the learner's own answers to the two exercises before, as the text invites
    def make_padding_mask(lengths, max_len):
        return torch.arange(max_len)[None, :] < lengths[:, None]

    def make_causal_mask(query_len, key_len):
        return torch.ones(query_len, key_len, dtype=torch.bool).tril(key_len - query_len)

    def make_attention_mask(lengths, max_len, causal):
        keep = make_padding_mask(lengths, max_len)[:, None, :]
        if causal:
            keep = keep & make_causal_mask(max_len, max_len)
        return keep.expand(len(lengths), max_len, max_len)

    assert check("masking/attention-mask", make_attention_mask).passed


@pytest.mark.parametrize(
    "options,words",
    [
        ({"side": "query"}, "queries (rows) instead of the keys"),
        ({"side": "both"}, "both queries and keys"),
        ({"with_padding": False}, "padding is missing"),
        ({"with_causal": False}, "causal part is missing"),
        ({"combine": "or"}, "combined the masks with OR"),
    ],
)
def test_attention_mask_rejects(options, words):
    _failed("masking/attention-mask", lambda n, S, causal: _mask(n, S, causal, **options), words)


@pytest.mark.parametrize(
    "triangle, words",
    [
        (lambda S: torch.ones(S, S, dtype=torch.bool).tril(-1), "own position too"),
        (lambda S: torch.ones(S, S, dtype=torch.bool).tril(1), "one key of the future"),
        (lambda S: torch.ones(S, S, dtype=torch.bool).triu(), "Upper instead of lower"),
    ],
)
def test_attention_mask_names_the_causal_triangles_slips(triangle, words):
    def wrong(lengths, S, causal):
        pad = torch.arange(S)[None, :] < lengths[:, None]
        tri = triangle(S) if causal else torch.ones(S, S, dtype=torch.bool)
        return (tri & pad[:, None, :]).expand(len(lengths), S, S)

    _failed("masking/attention-mask", wrong, words)


def test_attention_mask_rejects_more():
    _failed(
        "masking/attention-mask", lambda n, S, causal: ~_mask(n, S, causal), "polarity is inverted"
    )
    # causal even when causal=False
    _failed("masking/attention-mask", lambda n, S, causal: _mask(n, S, True), "no causal part")
    _failed(
        "masking/attention-mask",
        lambda n, S, causal: torch.arange(S)[None, :] < n[:, None],
        "must be (B, L, S)",
    )
    _failed(
        "masking/attention-mask",
        lambda n, S, causal: _mask(n, S, causal).float(),
        "should be boolean",
    )


# -- predict: the number of True entries of a decoder mask ------------------------------------------


def test_count_allowed_accepts_the_count_made_independently():
    lengths, n = [6, 4, 2], 6
    # plain Python
    count = sum(
        1 for length in lengths for i in range(n) for j in range(n) if j <= i and j < length
    )
    assert check("masking/count-allowed", count).passed
    assert check("masking/count-allowed", torch.tensor(count)).passed
    assert check("masking/count-allowed", float(count)).passed
    assert check("masking/count-allowed", ...).status == "not attempted yet"


@pytest.mark.parametrize(
    "wrong,words",
    [
        (63, "causal mask alone"),
        (72, "padding mask alone"),
        (38, "removed the diagonal"),
        (34, "padded queries"),
        (58, "False entries"),
        (108, "every entry"),
        (200, "once per head"),
        (49, "is not it"),
        ("50", "should be a number"),
    ],
)
def test_count_allowed_rejects(wrong, words):
    _failed("masking/count-allowed", wrong, words)


# -- find the bug: the padding mask that lines the batch up with the heads ---------------------------

from attncourse.exercises.ch03_masking import _padded_scores_solution  # noqa: E402


def _padded_where(scores, keep):
    return torch.where(
        keep.bool()[:, None, None, :], scores, torch.tensor(float("-inf"), dtype=scores.dtype)
    )


def _padded_large_negative(scores, keep):
    out = scores.clone()
    # in place, -1e9: right when a row keeps a key
    out.masked_fill_(~keep.bool().view(keep.size(0), 1, 1, -1), -1e9)
    return out


def _padded_additive(scores, keep):
    additive = torch.zeros(keep.shape, dtype=scores.dtype).masked_fill(keep == 0, float("-inf"))
    return scores + additive.unsqueeze(1).unsqueeze(2)


def _padded_numpy(scores, keep):
    s, k = scores.numpy(), keep.numpy()
    return torch.from_numpy(np.where(k[:, None, None, :] == 1, s, -np.inf))


@pytest.mark.parametrize(
    "answer",
    [
        _padded_scores_solution,
        _padded_where,
        _padded_large_negative,
        _padded_additive,
        _padded_numpy,
    ],
)
def test_fix_padding_accepts_right_answers(answer):
    assert check("masking/fix-padding-broadcast", answer).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda s, k: s.masked_fill(k.unsqueeze(1) == 0, float("-inf")), "still the given code"),
        (
            lambda s, k: s.masked_fill(k[:, None, :, None] == 0, float("-inf")),
            "masked queries instead of keys",
        ),
        (lambda s, k: s.masked_fill(k[:, None, None, :] == 1, float("-inf")), "polarity"),
        (lambda s, k: s, "still puts weight on padded keys"),
        # a finite fill is within the tolerance on these scores, but leaks weight
        (lambda s, k: s.masked_fill(k[:, None, None, :] == 0, -15.0), "keep a small weight"),
        (
            lambda s, k: s.masked_fill(k[:, None, None, :] == 0, float("-inf"))[0],
            "should have shape",
        ),
    ],
)
def test_fix_padding_rejects(wrong, words):
    _failed("masking/fix-padding-broadcast", wrong, words)


def test_fix_padding_stub_is_not_attempted():
    assert check("masking/fix-padding-broadcast", _stub).status == "not attempted yet"


def test_padding_broadcast_filled_with_zero_is_named():
    def zero_filled(scores, keep):
        return scores.masked_fill(keep[:, None, None, :] == 0, 0.0)

    _failed("masking/fix-padding-broadcast", zero_filled, "filled with 0")
