"""The chapter 9 checkers accept the reference answers and reject realistic mistakes with the right diagnosis."""

import pytest
import torch
from exercise_helpers import (
    COUNT_STYLES,
    assert_fails,
    assert_passes,
    notebook_listing,
    run_listing,
    stub,
)

from attncourse.exercises import check
from attncourse.exercises._core import NOT_ATTEMPTED, _get
from attncourse.masks import causal_mask

COUNT = "all-attention/parameter-count"
HEAD = "all-attention/persistent-head"
FFN = "all-attention/ffn-as-attention"


# -- the parameter count --------------------------------------------------------------------------

D, H, N = 512, 8, 2048


def test_count_accepts_the_formula():
    assert check(COUNT, 4 * D * D + 2 * N * D).passed
    assert check(COUNT, torch.tensor(4 * D * D + 2 * N * D)).passed


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (4 * D * D + 2 * N * (D // H), "one head only"),
        (4 * D * D + N * D, "keys without the values"),
        (2 * N * D, "without the four projections"),
        (3 * D * D + 2 * N * D, "left out a projection"),
        (4 * D * D + 2 * N * D * H, "multiplied by h once too often"),
        (4 * D * D + 2 * N * D + 4 * D, "biases"),
        (4 * D * D + 2 * N * D + 2 * D, "LayerNorm"),
        (4 * D * D + 4 * N * D, "feed-forward layer as well"),
        (4 * D * D, "projections only"),
        (12345, "is not it"),
    ],
)
def test_count_rejects_mistakes(answer, phrase):
    assert_fails(COUNT, answer, phrase)


def test_count_not_attempted_and_not_a_number():
    assert check(COUNT, ...).status == NOT_ATTEMPTED
    assert_fails(COUNT, "3145728", "should be a number")


# -- one head with persistent vectors -----------------------------------------------------------------

reference_head = _get(HEAD).checker.__globals__["_persistent_head_solution"]


def _extended(mask, n, fill=True):
    return torch.cat([mask, torch.full((*mask.shape[:-1], n), fill)], dim=-1)


def _attend(query, key, value, memory_key, memory_value, keep):
    keys, values = torch.cat([key, memory_key], -2), torch.cat([value, memory_value], -2)
    scores = query @ keys.transpose(-2, -1) / query.size(-1) ** 0.5
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
    return weights @ values, weights


def masked_memory(query, key, value, memory_key, memory_value, mask):
    """The causal mask applied to every column: torch.tril over (L, L + N) hides the memory."""
    keep = torch.ones(mask.size(-2), mask.size(-1) + memory_key.size(-2), dtype=torch.bool).tril()
    keep[:, : mask.size(-1)] = mask
    return _attend(query, key, value, memory_key, memory_value, keep)


def causal_over_all(query, key, value, memory_key, memory_value, mask):
    """causal_mask(L, L + N) over the concatenation (bottom-right aligned)."""
    keep = causal_mask(query.size(-2), key.size(-2) + memory_key.size(-2))
    return _attend(query, key, value, memory_key, memory_value, keep)


def two_softmaxes(query, key, value, memory_key, memory_value, mask):
    d_k = query.size(-1)
    ctx = torch.softmax(
        (query @ key.transpose(-2, -1) / d_k**0.5).masked_fill(~mask, float("-inf")), -1
    )
    mem = torch.softmax(query @ memory_key.transpose(-2, -1) / d_k**0.5, -1)
    return ctx @ value + mem @ memory_value, torch.cat([ctx, mem], -1)


def two_softmaxes_averaged(*args):
    out, w = two_softmaxes(*args)
    return out / 2, w / 2


def memory_unscaled(query, key, value, memory_key, memory_value, mask):
    d_k = query.size(-1)
    s_ctx = (query @ key.transpose(-2, -1) / d_k**0.5).masked_fill(~mask, float("-inf"))
    s_mem = query @ memory_key.transpose(-2, -1)
    w = torch.softmax(torch.cat([s_ctx, s_mem], -1), -1)
    return w @ torch.cat([value, memory_value], -2), w


def inverted_mask(query, key, value, memory_key, memory_value, mask):
    return reference_head(query, key, value, memory_key, memory_value, ~mask)


def _own_causal_mask(query, key, value, memory_key, memory_value, mask):
    """Ignores the mask it is given and builds a causal one."""
    keep = _extended(causal_mask(key.size(-2)), memory_key.size(-2))
    return _attend(query, key, value, memory_key, memory_value, keep)


def _inverted_extended_mask(query, key, value, memory_key, memory_value, mask):
    """Extends the mask with True for the memory, then fills where it is True."""
    return _attend(
        query, key, value, memory_key, memory_value, ~_extended(mask, memory_key.size(-2))
    )


def memory_first(query, key, value, memory_key, memory_value, mask):
    keys, values = torch.cat([memory_key, key], -2), torch.cat([memory_value, value], -2)
    keep = torch.cat(
        [torch.ones(*mask.shape[:-1], memory_key.size(-2), dtype=torch.bool), mask], -1
    )
    scores = (query @ keys.transpose(-2, -1) / query.size(-1) ** 0.5).masked_fill(
        ~keep, float("-inf")
    )
    w = torch.softmax(scores, -1)
    return w @ values, w


def softmax_over_dim_one(query, key, value, memory_key, memory_value, mask):
    """softmax(dim=1): the keys for one (L, L + N) matrix, the heads with batch dimensions."""
    keep = _extended(mask, memory_key.size(-2))
    keys, values = torch.cat([key, memory_key], -2), torch.cat([value, memory_value], -2)
    scores = (query @ keys.transpose(-2, -1) / query.size(-1) ** 0.5).masked_fill(
        ~keep, float("-inf")
    )
    w = torch.softmax(scores, dim=1)
    return w @ values, w


def wrong_output(*args):
    out, w = reference_head(*args)
    return w[..., : args[1].size(-2)] @ args[2], w  # forgot the memory's values


def returns_only_output(*args):
    return reference_head(*args)[0]


def test_head_accepts_reference():
    assert_passes(HEAD, reference_head)


@pytest.mark.parametrize(
    "wrong, phrase",
    [
        (masked_memory, "the causal mask reached them"),
        (causal_over_all, "causal_mask(L, L + N)"),
        (two_softmaxes, "one softmax over the context and another over the memory"),
        (two_softmaxes_averaged, "averaged a softmax"),
        (memory_unscaled, "persistent keys are not divided by sqrt(d_k)"),
        (inverted_mask, "polarity is inverted"),
        (memory_first, "persistent keys came first"),
        (_own_causal_mask, "causal mask of your own"),
        (_inverted_extended_mask, "persistent columns were masked with it"),
        (wrong_output, "weights are right but not the output"),
        (softmax_over_dim_one, "Count from the end: softmax(..., dim=-1)"),
        (returns_only_output, "Return a pair"),
    ],
)
def test_head_rejects_mistakes(wrong, phrase):
    assert_fails(HEAD, wrong, phrase)


def test_head_stub_is_not_attempted():
    assert check(HEAD, stub).status == NOT_ATTEMPTED


def test_head_learner_error_is_reported():
    def broken(query, *args):
        return query.nonexistent

    assert_fails(HEAD, broken, "raised AttributeError")


# -- FFN weights as keys and values ---------------------------------------------------------------------


def test_ffn_accepts_reference():
    assert check(FFN, lambda w1, w2: (w1, w2.T)).passed
    assert check(FFN, lambda w1, w2: (w1.clone(), w2.T.contiguous())).passed
    # float64 weights answered in float32 lose precision: the dtype rule of the harness rejects it
    assert (
        "keep the input's dtype"
        in check(FFN, lambda w1, w2: (w1.clone().float(), w2.T.contiguous())).message
    )


@pytest.mark.parametrize(
    "wrong, phrase",
    [
        (lambda w1, w2: (w1.T, w2.T), "keys have shape (d_model, d_ff)"),
        (lambda w1, w2: (w1, w2), "values have shape (d_model, d_ff)"),
        (lambda w1, w2: (w2.T, w1), "keys and values are swapped"),
        (lambda w1, w2: (w1 / w1.size(1) ** 0.5, w2.T), "divided by sqrt(d_model)"),
        (lambda w1, w2: (w1, w2.T * 2), "keys are right, your values are not"),
        (lambda w1, w2: w1, "Return a pair"),
    ],
)
def test_ffn_rejects_mistakes(wrong, phrase):
    assert_fails(FFN, wrong, phrase)


def test_ffn_stub_is_not_attempted():
    assert check(FFN, stub).status == NOT_ATTEMPTED


# -- predict: the multiply-adds of the persistent memory ----------------------------------------------

MACS = "all-attention/memory-cost"


def _counted_memory_macs(d=512, h=8, n=1024):
    """Independent count: FLOPs of an AllAttention layer with N persistent vectors minus N = 0, per token, halved."""
    from torch.utils.flop_counter import FlopCounterMode

    from attncourse.all_attention import AllAttention

    x = torch.randn(1, 4, d)
    counts = []
    for persistent in (n, 0):
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            AllAttention(d, h, persistent)(x)
        counts.append(counter.get_total_flops())
    return (counts[0] - counts[1]) // 4 // 2


@pytest.mark.parametrize("style", COUNT_STYLES)
def test_memory_cost_accepts(style):
    assert check(MACS, style(_counted_memory_macs())).passed


@pytest.mark.parametrize(
    "answer,words",
    [
        (8 * 2 * 1024 * 512, "full width d"),
        (1024 * 512, "scores alone"),
        (2 * 1024 * 64, "one head"),
        (2 * 8 * 1024, "width of the vectors"),
        (4 * 1024 * 512, "FLOPs"),
        (2 * 1024 * 512 + 4 * 512**2, "four projections"),  # 4 d^2 = 2 N d here
        (5, "is not it"),
    ],
)
def test_memory_cost_diagnoses(answer, words):
    assert_fails(MACS, answer, words)


# -- find the bug: the memory never read --------------------------------------------------------------

BUG = "all-attention/find-the-bug"


def test_persistent_listing_is_wrong_on_line_7_only():
    from attncourse.exercises.ch09_all_attention import _persistent_head_solution

    lines = notebook_listing("09_all_attention.ipynb", "ex-all-attention-find-the-bug")
    q, k, v = (torch.randn(6, 8, dtype=torch.float64) for _ in range(3))
    mk, mv = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    expected, _ = _persistent_head_solution(q, k, v, mk, mv, causal_mask(6))
    buggy = run_listing(lines, "persistent_head")(q, k, v, mk, mv)
    assert not torch.allclose(buggy, expected)
    fixed = run_listing(
        lines,
        "persistent_head",
        {
            7: (
                "visible = torch.cat([torch.ones(L, L, dtype=torch.bool).tril(), torch.ones(L, N,"
                " dtype=torch.bool)], dim=-1)"
            )
        },
    )(q, k, v, mk, mv)
    torch.testing.assert_close(fixed, expected)
    assert ".tril()" in lines[7 - 1]


def test_new_exercises_stub_and_solutions():
    from attncourse.exercises import hint, solution

    for exercise_id in (MACS, BUG):
        assert check(exercise_id, ...).status == "not attempted yet"
        assert str(hint(exercise_id)) and str(solution(exercise_id))


# -- found by attacking the checkers ------------------------------------------------------------------


def _head_with_a_mask_cut_to_l(q, k, v, mk, mv, mask):
    """Pads the mask for the memory with a slice of a mask of L columns: right only while N <= L."""
    n = mk.size(-2)
    keep = torch.cat([mask, torch.ones_like(mask)[..., :n]], -1)
    keys, values = torch.cat([k, mk], -2), torch.cat([v, mv], -2)
    scores = (q @ keys.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~keep, float("-inf"))
    w = torch.softmax(scores, -1)
    return w @ values, w


def test_head_with_more_persistent_vectors_than_positions():
    assert not check("all-attention/persistent-head", _head_with_a_mask_cut_to_l).passed


def test_head_with_memory_keys_rescaled_as_all_attention_stores_them():
    def rescaled(q, k, v, mk, mv, mask):
        return _get("all-attention/persistent-head").reference(
            q, k, v, mk * mk.size(-1) ** 0.5, mv, mask
        )

    assert_fails("all-attention/persistent-head", rescaled, "multiplied memory_key by sqrt(d_k)")


def test_a_count_for_the_other_exercises_n_names_n():
    message = check("all-attention/memory-cost", 2 * 2048 * 512).message
    assert "FLOPs" in message and "N = 2048, the previous exercise's" in message, message
    message = check("all-attention/parameter-count", 4 * 512**2 + 2 * 1024 * 512).message
    assert "counted half" in message and "N = 1024, the next exercise's" in message, message


def test_ffn_with_w2_for_keys_and_values_is_not_called_swapped():
    message = check("all-attention/ffn-as-attention", lambda w1, w2: (w2.T, w2.T)).message
    assert "so the keys are its rows" in message and "swapped" not in message, message
    assert "swapped" in check("all-attention/ffn-as-attention", lambda w1, w2: (w2.T, w1)).message


def test_a_number_written_with_words_is_given_back_without_them():
    message = check("all-attention/find-the-bug", "line 7").message
    assert "give the number itself, 7, without quotes or words" in message, message
    assert "remove the quotes" in check("all-attention/find-the-bug", "7").message


def test_persistent_head_says_which_case_raised():
    def transposed_with_t(query, key, value, memory_key, memory_value, mask):  # .T: 2-D only
        keys = torch.cat([key, memory_key], -2)
        memory = torch.ones(mask.size(0), memory_key.size(-2), dtype=torch.bool)
        keep = torch.cat([mask, memory], -1)  # the memory is never masked
        scores = query @ keys.T / query.size(-1) ** 0.5
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
        return weights @ torch.cat([value, memory_value], -2), weights

    assert_fails(HEAD, transposed_with_t, "A batch (2, 3) of heads, L = 6, N = 4, d_k = 8")
    assert_fails(HEAD, transposed_with_t, ".transpose(-2, -1)")
