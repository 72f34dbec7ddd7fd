"""The chapter 1 checkers accept the reference and reject realistic wrong answers with the right diagnosis."""

import math

import numpy as np
import pytest
import torch
from exercise_helpers import assert_fails as _failed
from exercise_helpers import assert_passes
from exercise_helpers import stub as _stub

from attncourse import scaled_dot_product_attention
from attncourse.exercises import check
from attncourse.exercises.ch01_dot_product import (
    _attention_solution,
    _fixed_masked_attention_solution,
    _scores_solution,
)

# -- dot-product/scores ---------------------------------------------------------------------


def scores_unscaled(query, key):
    return query @ key.transpose(-2, -1)


def scores_over_d_k(query, key):
    return query @ key.transpose(-2, -1) / query.size(-1)


def scores_times_sqrt(query, key):
    return query @ key.transpose(-2, -1) * query.size(-1) ** 0.5


def scores_key_first(query, key):
    return key @ query.transpose(-2, -1) / query.size(-1) ** 0.5


def scores_with_dot_T(query, key):
    # fine for 2-D, wrong (or an error) with batch dimensions
    return query @ key.T / query.size(-1) ** 0.5


def scores_scaled_by_length(query, key):
    return query @ key.transpose(-2, -1) / key.size(-2) ** 0.5


@pytest.mark.parametrize(
    "answer",
    [_scores_solution, lambda q, k: torch.einsum("...ld,...sd->...ls", q, k) / q.shape[-1] ** 0.5],
)
def test_scores_accepts_correct_answers(answer):
    assert_passes("dot-product/scores", answer)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (scores_unscaled, "not scaled"),
        (scores_over_d_k, "divided by d_k"),
        (scores_times_sqrt, "multiplied by sqrt(d_k)"),
        (scores_key_first, "key @ query^T"),
        (scores_scaled_by_length, "sqrt(S) or sqrt(L)"),
        (scores_with_dot_T, "batch dimensions"),
    ],
)
@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_scores_rejects_wrong_answers(wrong, diagnosis):
    _failed("dot-product/scores", wrong, diagnosis)


# -- dot-product/attention ------------------------------------------------------------------


def _by_hand(query, key, value, mask, *, scale, fill=float("-inf"), dim=-1):
    """Attention as a learner writes it out: the scores times ``scale``, those a boolean mask
    hides set to ``fill`` (a float mask added), the softmax over ``dim``; the wrong answers
    below that call it change one of these."""
    scores = query @ key.transpose(-2, -1) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, fill)
    elif mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, dim=dim)
    return weights @ value, weights


def softmax_over_queries(query, key, value, mask=None, *, scale=None):
    return _by_hand(query, key, value, mask, scale=query.size(-1) ** -0.5, dim=-2)


def no_scale(query, key, value, mask=None, *, scale=None):
    return _attention_solution(query, key, value, mask, scale=1.0)


def scale_by_d_k(query, key, value, mask=None, *, scale=None):
    return _attention_solution(query, key, value, mask, scale=scale or 1 / query.size(-1))


def scale_by_d_v(query, key, value, mask=None, *, scale=None):
    return _attention_solution(query, key, value, mask, scale=scale or value.size(-1) ** -0.5)


def inverted_mask(query, key, value, mask=None, *, scale=None):
    if mask is not None and mask.dtype == torch.bool:
        mask = ~mask
    return _attention_solution(query, key, value, mask, scale=scale)


def mask_after_softmax(query, key, value, mask=None, *, scale=None):
    weights = torch.softmax(
        query @ key.transpose(-2, -1) * (scale or query.size(-1) ** -0.5), dim=-1
    )
    if mask is not None and mask.dtype == torch.bool:
        weights = weights * mask
    elif mask is not None:
        weights = weights * torch.isfinite(mask)
    return weights @ value, weights


def minus_1e9_fill(query, key, value, mask=None, *, scale=None):
    return _by_hand(query, key, value, mask, scale=scale or query.size(-1) ** -0.5, fill=-1e9)


def nan_on_empty_rows(query, key, value, mask=None, *, scale=None):
    return _by_hand(query, key, value, mask, scale=scale or query.size(-1) ** -0.5)


def key_query_swapped(query, key, value, mask=None, *, scale=None):
    weights = torch.softmax(key @ query.transpose(-2, -1) / query.size(-1) ** 0.5, dim=-1)
    return weights.transpose(-2, -1) @ value, weights


def ignores_scale_argument(query, key, value, mask=None, *, scale=None):
    return _attention_solution(query, key, value, mask)


def ignores_mask(query, key, value, mask=None, *, scale=None):
    return _attention_solution(query, key, value, None, scale=scale)


def float_mask_as_boolean(query, key, value, mask=None, *, scale=None):
    if mask is not None and mask.is_floating_point():
        mask = None  # "a float mask? must be a mistake"
    return _attention_solution(query, key, value, mask, scale=scale)


def float_mask_cast_to_bool(query, key, value, mask=None, *, scale=None):
    scores = query @ key.transpose(-2, -1) * (scale or query.size(-1) ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))  # 0.0 -> False, -inf -> True
    weights = torch.softmax(scores, -1)
    return weights @ value, weights


def returns_output_only(query, key, value, mask=None, *, scale=None):
    return _attention_solution(query, key, value, mask, scale=scale)[0]


def wrong_weighted_sum(query, key, value, mask=None, *, scale=None):
    _, weights = _attention_solution(query, key, value, mask, scale=scale)
    return weights @ value.flip(-2), weights


def upcasts_to_float64(query, key, value, mask=None, *, scale=None):
    return _attention_solution(query.double(), key.double(), value.double(), mask, scale=scale)


def empty_rows_of_bool_masks_only(query, key, value, mask=None, *, scale=None):
    # zero weights for a row with no key, but only where the mask is boolean: a float mask
    # that is -inf over a whole row still gives softmax(-inf, ..., -inf) = NaN
    scores = query @ key.transpose(-2, -1) * (scale or query.size(-1) ** -0.5)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, -1)
    if mask is not None and mask.dtype == torch.bool:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ value, weights


def boolean_index_fill(query, key, value, mask=None, *, scale=None):
    # scores[~mask] = -inf: right for a mask of the scores' shape, an IndexError for one that
    # broadcasts
    scores = query @ key.transpose(-2, -1) * (scale or query.size(-1) ** -0.5)
    if mask is not None and mask.dtype == torch.bool:
        scores[~mask] = float("-inf")
    elif mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ value, weights


@pytest.mark.parametrize("answer", [_attention_solution])
def test_attention_accepts_correct_answers(answer):
    assert_passes("dot-product/attention", answer)


def test_attention_refuses_the_package_function_the_text_forbids():
    _failed("dot-product/attention", scaled_dot_product_attention, "scaled_dot_product_attention")


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (softmax_over_queries, "wrong dimension"),
        (no_scale, "not scaled"),
        (scale_by_d_k, "1 / d_k"),
        (scale_by_d_v, "sqrt(d_v)"),
        (inverted_mask, "polarity is inverted"),
        (mask_after_softmax, "after the softmax"),
        (minus_1e9_fill, "-1e9 instead of -inf"),
        (nan_on_empty_rows, "NaN"),
        (key_query_swapped, "key @ query^T"),
        (ignores_scale_argument, "scale argument is ignored"),
        (ignores_mask, "mask is ignored"),
        (float_mask_as_boolean, "float mask is added"),
        (float_mask_cast_to_bool, "read the float mask as a boolean one"),
        (returns_output_only, "Return a pair"),
        (wrong_weighted_sum, "weights are right but the output is not"),
        (upcasts_to_float64, "keep the input's dtype"),
        (empty_rows_of_bool_masks_only, "-inf over a whole row"),
        (boolean_index_fill, "masked_fill(~mask"),
        # dim=1 is the keys of a 2-D matrix only: the batched case names it
        (
            lambda q, k, v, mask=None, *, scale=None: _by_hand(
                q, k, v, mask, scale=q.size(-1) ** -0.5, dim=1
            ),
            "dim=1",
        ),
        (
            lambda q, k, v, mask=None, *, scale=None: _by_hand(
                q, k, v, mask, scale=q.size(-1) ** -0.5, fill=0.0
            ),
            "filled with 0, not -inf",
        ),
    ],
)
def test_attention_rejects_wrong_answers(wrong, diagnosis):
    _failed("dot-product/attention", wrong, diagnosis)


def test_attention_reports_a_crash_without_raising():
    def crashes(query, key, value, mask=None, *, scale=None):
        return query @ key  # shapes do not fit

    _failed("dot-product/attention", crashes, "RuntimeError")


# -- dot-product/score-variance -------------------------------------------------------------


def test_variance_accepts_the_value_and_an_estimate():
    assert check("dot-product/score-variance", 64).passed
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(200_000, 64, generator=g), torch.randn(200_000, 64, generator=g)
    estimate = (q * k).sum(-1).var()
    assert check("dot-product/score-variance", estimate).passed


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (8, "standard deviation"),
        (1, "after dividing by sqrt(d_k)"),
        (4096, "d_k squared"),
        (0, "mean"),
        (32, "not it"),
    ],
)
def test_variance_rejects_wrong_values(wrong, diagnosis):
    _failed("dot-product/score-variance", wrong, diagnosis)


def test_variance_rejects_non_numbers():
    _failed("dot-product/score-variance", "64", "number")


# -- find the bug: the mask after the softmax ------------------------------------------------------


def _fixed_einsum(query, key, value, mask):
    scores = torch.einsum("...ld,...sd->...ls", query.double(), key.double()) / math.sqrt(
        query.shape[-1]
    )
    scores[~mask.expand_as(scores)] = float("-inf")  # in place
    return (torch.softmax(scores, -1) @ value.double()).to(query.dtype)


def _fixed_renormalised(query, key, value, mask):
    weights = torch.softmax(query @ key.transpose(-2, -1) / query.size(-1) ** 0.5, -1) * mask
    # renormalising after the mask is also right
    return weights / weights.sum(-1, keepdim=True) @ value


def _fixed_numpy(query, key, value, mask):
    q, k, v, m = (t.numpy() for t in (query, key, value, mask))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(m, s, -1e9)  # a large negative number is fine when every row keeps a key
    w = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy(w / w.sum(-1, keepdims=True) @ v)


@pytest.mark.parametrize(
    "answer", [_fixed_masked_attention_solution, _fixed_einsum, _fixed_renormalised, _fixed_numpy]
)
def test_fix_mask_accepts_right_answers(answer):
    assert check("dot-product/fix-mask-after-softmax", answer).passed


def _buggy(query, key, value, mask):
    scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0) @ value


@pytest.mark.parametrize(
    "wrong,words",
    [
        (_buggy, "still the given code"),
        (
            lambda q, k, v, m: torch.softmax((q @ k.mT / q.size(-1) ** 0.5) * m, -1) @ v,
            "filled with 0, not -inf",
        ),
        (
            lambda q, k, v, m: (
                torch.softmax(
                    (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(m, float("-inf")), -1
                )
                @ v
            ),
            "polarity",
        ),
        (
            lambda q, k, v, m: (
                torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~m, float("-inf")), -1) @ v
            ),
            "scale went missing",
        ),
        (
            lambda q, k, v, m: (
                torch.softmax(
                    (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~m, float("-inf")), -2
                ).nan_to_num(0.0)
                @ v
            ),
            "over the queries",
        ),
        (
            lambda q, k, v, m: (q @ k.transpose(-2, -1)).masked_fill(~m, 0.0) @ v,
            "differs from softmax",
        ),
        (lambda q, k, v, m: _buggy(q, k, v, m)[..., :-1], "should have shape"),
        (
            lambda q, k, v, m: (
                torch.softmax(
                    (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~m, float("-inf")), 1
                ).nan_to_num(0.0)
                @ v
            ),
            "dim=1",
        ),
    ],
)
def test_fix_mask_rejects(wrong, words):
    _failed("dot-product/fix-mask-after-softmax", wrong, words)


def test_fix_mask_stub_is_not_attempted():
    assert check("dot-product/fix-mask-after-softmax", _stub).status == "not attempted yet"


# -- experiment: the gradient ratio at d_k = 512 -------------------------------------------------


def _measure_gradient_ratio(n: int, seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(n, 1, 512, generator=g), torch.randn(n, 16, 512, generator=g)
    raw = (q @ k.transpose(-2, -1)).squeeze(1)
    upstream = torch.randn(n, 16, generator=g)
    sizes = []
    for s in (raw, raw / 512**0.5):
        s = s.clone().requires_grad_(True)
        (torch.softmax(s, -1) * upstream).sum().backward()
        sizes.append(s.grad.norm(dim=-1).mean().item())
    return sizes[0] / sizes[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradient_ratio_accepts_independent_measurements(seed):
    # an independent measurement, as the learner makes it
    ratio = _measure_gradient_ratio(5000, seed)
    assert check("dot-product/saturation-gradient", ratio).passed
    assert check("dot-product/saturation-gradient", torch.tensor(ratio)).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        (4.93, "divided the other way"),
        (0.058, "unscaled gradient size alone"),
        (0.29, "scaled gradient size alone"),
        (1.0, "both runs saw the same scores"),
        (0.5, "is outside the range"),
        ("0.2", "should be a number"),
    ],
)
def test_gradient_ratio_rejects(wrong, words):
    _failed("dot-product/saturation-gradient", wrong, words)


def test_the_fix_is_written_not_delegated():
    """The find-and-fix exercise refuses the package's attention and torch's, which the
    notebook imports (a one-line call of either passed)."""
    import torch.nn.functional as F

    from attncourse.attention import scaled_dot_product_attention

    for delegated in (
        lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m)[0],
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
    ):
        _failed("dot-product/fix-mask-after-softmax", delegated, "asks you to write yourself")


def _aten_attention(q, k, v, m):
    return torch.ops.aten.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _aten_math_attention(q, k, v, m):
    return torch.ops.aten._scaled_dot_product_attention_math.default(q, k, v, attn_mask=m)[0]


@pytest.mark.parametrize(
    "delegated, words",
    [
        (_aten_attention, "torch.ops.aten.scaled_dot_product_attention"),
        (_aten_math_attention, "torch.ops.aten._scaled_dot_product_attention_math"),
    ],
)
def test_the_fix_refuses_torchs_attention_operators(delegated, words):
    """torch.ops.aten.scaled_dot_product_attention is F.scaled_dot_product_attention by another
    name (an otter grading of it passed), and its fused backends are the same function."""
    _failed("dot-product/fix-mask-after-softmax", delegated, words)


def test_fix_mask_refuses_the_package_tiled_attention():
    import attncourse

    _failed(
        "dot-product/fix-mask-after-softmax",
        lambda q, k, v, m: attncourse.tiled_attention(q, k, v, m),
        "tiled_attention",
    )
