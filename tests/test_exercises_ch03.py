"""Chapter 3 checkers accept the reference and name the usual mistakes."""
import pytest
import torch

from attncourse.exercises import check
from exercise_helpers import assert_fails as _failed, stub as _stub
from attncourse.exercises.ch03_masking import _attention_mask_solution, _causal_solution, _padding_solution


@pytest.mark.parametrize("exercise_id", ["masking/padding-mask", "masking/causal-mask", "masking/attention-mask"])
def test_stub_is_not_attempted(exercise_id):
    assert check(exercise_id, _stub).status == "not attempted yet"


# -- padding --------------------------------------------------------------------------------------


def test_padding_accepts():
    from attncourse.masks import padding_mask

    assert check("masking/padding-mask", _padding_solution).passed
    assert check("masking/padding-mask", padding_mask).passed
    loop = lambda lengths, S: torch.tensor([[j < n for j in range(S)] for n in lengths.tolist()], dtype=torch.bool)
    assert check("masking/padding-mask", loop).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda n, S: torch.arange(S)[None, :] >= n[:, None], "polarity is inverted"),
        (lambda n, S: torch.arange(S)[None, :] <= n[:, None], "not j <= length"),
        (lambda n, S: torch.arange(S)[None, :] < n[:, None] - 1, "dropped the last real token"),
        (lambda n, S: torch.arange(S)[None, :] >= S - n[:, None], "padding is at the front"),
        (lambda n, S: (torch.arange(S)[None, :] < n[:, None]).long(), "right 1s and 0s but dtype torch.int64"),
        (lambda n, S: torch.arange(S)[:, None] < n[None, :], "should have shape"),
        (lambda n, S: torch.ones(len(n), S, dtype=torch.bool), "is wrong: expected"),
    ],
)
def test_padding_rejects(wrong, words):
    _failed("masking/padding-mask", wrong, words)


# -- causal ---------------------------------------------------------------------------------------


def test_causal_accepts():
    from attncourse.masks import causal_mask

    assert check("masking/causal-mask", _causal_solution).passed
    assert check("masking/causal-mask", causal_mask).passed
    assert check("masking/causal-mask", lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L)).passed


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
    pad3 = {"key": pad[:, None, :], "query": pad[:, :, None], "both": pad[:, None, :] & pad[:, :, None]}[side]
    if not with_padding:
        pad3 = torch.ones(len(lengths), 1, 1, dtype=torch.bool)
    c = tri if (causal and with_causal) else full
    mask = (c | pad3) if (causal and combine == "or") else (c & pad3)
    return mask.expand(len(lengths), S, S)


def test_attention_mask_accepts():
    from attncourse.masks import causal_mask, combine_masks, padding_mask

    assert check("masking/attention-mask", _attention_mask_solution).passed
    assert check("masking/attention-mask", _mask).passed
    package = lambda n, S, causal: combine_masks(causal_mask(S) if causal else None, padding_mask(n, S)[:, None, :]).expand(len(n), S, S)
    assert check("masking/attention-mask", package).passed


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


def test_attention_mask_rejects_more():
    _failed("masking/attention-mask", lambda n, S, causal: ~_mask(n, S, causal), "polarity is inverted")
    # causal even when causal=False
    _failed("masking/attention-mask", lambda n, S, causal: _mask(n, S, True), "no causal part")
    _failed("masking/attention-mask", lambda n, S, causal: torch.arange(S)[None, :] < n[:, None], "must be (B, L, S)")
    _failed("masking/attention-mask", lambda n, S, causal: _mask(n, S, causal).float(), "should be boolean")
