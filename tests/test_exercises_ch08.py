"""Chapter 8 checkers accept the reference and reject realistic wrong answers with the right diagnosis."""

import math

import pytest
import torch
from exercise_helpers import (
    COUNT_STYLES,
    assert_fails,
    notebook_listing,
    run_listing,
    stub,
)

from attncourse.exercises import check, solution
from attncourse.exercises._core import NOT_ATTEMPTED, _get


@pytest.mark.parametrize(
    "exercise_id", ["adaptive-span/soft-mask", "adaptive-span/window", "adaptive-span/weights"]
)
def test_reference_passes_and_stub_is_not_attempted(exercise_id):
    namespace = {"torch": torch, "math": math}
    exec(solution(exercise_id).text, namespace)
    fn = next(
        v
        for k, v in namespace.items()
        if callable(v) and k not in ("torch", "math") and not k.startswith("__")
    )
    assert check(exercise_id, fn).passed, check(exercise_id, fn)
    assert check(exercise_id, stub).status == NOT_ATTEMPTED
    assert _get(exercise_id).hint


# -- soft mask -------------------------------------------------------------------------------------

MASK_MISTAKES = {
    "wrong side": lambda x, z, r: ((z - x) / r).clamp(0, 1),
    "wrong sign": lambda x, z, r: ((r + z + x) / r).clamp(0, 1),
    "divided by z": lambda x, z, r: ((r + z - x) / z).clamp(0, 1),
    "sources' formula": lambda x, z, r: (1 - x / z).clamp(0, 1),
    "above 1": lambda x, z, r: ((r + z - x) / r).clamp(min=0),
    "below 0": lambda x, z, r: ((r + z - x) / r).clamp(max=1),
    "hard mask": lambda x, z, r: (x <= z).double(),
    "one position too wide": lambda x, z, r: ((r + z - x) / (r + 1)).clamp(0, 1),
}


def _under_no_grad(x, z, r):
    with torch.no_grad():
        return ((r + z - x) / r).clamp(0, 1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, z, r: ((r + z.detach() - x) / r).clamp(0, 1),
        lambda x, z, r: ((r + z.data - x) / r).clamp(0, 1),
        lambda x, z, r: torch.from_numpy(((r + z.numpy() - x.numpy()) / r).clip(0, 1)),
        _under_no_grad,
    ],
    ids=["detach", "data", "numpy", "no_grad"],
)
def test_soft_mask_with_the_right_values_but_no_gradient_is_refused(fn):
    assert_fails("adaptive-span/soft-mask", fn, "passes no gradient to z")


def test_soft_mask_gradient_is_checked_within_the_time_limit_and_leaves_grad_mode_on(monkeypatch):
    """The gradient check runs the learner's function again, with a span that needs a gradient:
    through call() too, under the time limit (1 s here) and with torch's grad mode restored."""
    import time

    from attncourse.exercises import _core

    monkeypatch.setattr(_core, "TIME_LIMIT_S", 1.0)

    def slow_with_a_gradient(x, z, r):
        if z.requires_grad:
            time.sleep(10)
        return ((r + z - x) / r).clamp(0, 1)

    def switches_grad_off(x, z, r):
        torch.set_grad_enabled(False)
        return ((r + z - x) / r).clamp(0, 1)

    started = time.monotonic()
    result = check("adaptive-span/soft-mask", slow_with_a_gradient)  # stopped at 1 s, not 10
    assert not result.passed and "more than 1 s" in result.message, result.message
    assert time.monotonic() - started < 6  # both languages (tests/conftest.py)
    assert_fails("adaptive-span/soft-mask", switches_grad_off, "passes no gradient to z")
    assert torch.is_grad_enabled()


def test_soft_mask_with_a_gradient_passes_in_every_style():
    styles = [
        lambda x, z, r: torch.clamp((r + z - x) / r, 0, 1),
        lambda x, z, r: torch.minimum(
            torch.maximum((r + z - x) / r, torch.zeros(())), torch.ones(())
        ),
        lambda x, z, r: torch.where(x <= z, torch.ones(()), ((r + z - x) / r).clamp(min=0)),
        lambda x, z, r: 1 - ((x - z) / r).clamp(0, 1),
    ]
    for style in styles:
        assert check("adaptive-span/soft-mask", style).passed, check(
            "adaptive-span/soft-mask", style
        )


@pytest.mark.parametrize("diagnosis, fn", MASK_MISTAKES.items(), ids=list(MASK_MISTAKES))
def test_soft_mask_mistakes(diagnosis, fn):
    assert_fails("adaptive-span/soft-mask", fn, diagnosis)


def test_soft_mask_without_broadcasting_is_caught():
    def loop(x, z, r):
        if z.dim() == 0:
            return ((r + z - x) / r).clamp(0, 1)
        return ((r + z.flatten()[0] - x) / r).clamp(0, 1).expand(z.size(0), *x.shape)

    assert_fails("adaptive-span/soft-mask", loop, "one span per head")


# -- window ----------------------------------------------------------------------------------------

WINDOW_MISTAKES = {
    "forgot the ramp": lambda z, r: math.ceil(z.max().item()),
    "rounded down": lambda z, r: math.floor(z.max().item() + r),
    "One too many": lambda z, r: math.ceil(z.max().item() + r) + 1,
    "mean span": lambda z, r: math.ceil(z.mean().item() + r),
    "shortest span": lambda z, r: math.ceil(z.min().item() + r),
    "ramp counts once": lambda z, r: math.ceil(z.max().item() + 2 * r),
    "whole number": lambda z, r: z.max().item() + r + 0.5,
    # round() rounds a half to even: wrong where z + R is an odd whole number
    "(spans [13.0, 2.0], R = 8)": lambda z, r: round(z.max().item() + r + 0.5),
    "largest distance with a weight": lambda z, r: math.ceil(z.max().item() + r) - 1,
}


def test_window_names_both_slips_that_give_floor():
    """ceil(z + R) - 1 equals floor(z + R) where z + R is not whole: both are named."""
    message = check("adaptive-span/window", lambda z, r: math.ceil(z.max().item() + r) - 1).message
    assert "largest distance with a weight" in message and "rounded down" in message, message


@pytest.mark.parametrize("diagnosis, fn", WINDOW_MISTAKES.items(), ids=list(WINDOW_MISTAKES))
def test_window_mistakes(diagnosis, fn):
    assert_fails("adaptive-span/window", fn, diagnosis)


def test_window_accepts_a_tensor_answer():
    assert check("adaptive-span/window", lambda z, r: torch.ceil(z.max() + r)).passed
    # a count in float64 from float32 spans: the count is what is graded, not its dtype
    assert check("adaptive-span/window", lambda z, r: torch.ceil(z.double().max() + r)).passed


# -- weights ---------------------------------------------------------------------------------------


def _parts(scores, z, r, sign=1):
    i = torch.arange(scores.size(-1))
    distance = (i[:, None] - i[None, :]).double()
    mask = ((r + z - sign * distance) / r).clamp(0, 1)
    probs = torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1)
    return distance, mask, probs


def _no_renorm(s, z, r):
    _, m, p = _parts(s, z, r)
    return p * m


def _flipped(s, z, r):
    _, m, p = _parts(s, z, r, sign=-1)
    w = p * m
    return w / w.sum(-1, keepdim=True)


def _on_scores(s, z, r):
    d, m, _ = _parts(s, z, r)
    return torch.softmax((s * m).masked_fill(d < 0, float("-inf")), -1)


def _added(s, z, r):
    d, m, _ = _parts(s, z, r)
    return torch.softmax((s + m).masked_fill(d < 0, float("-inf")), -1)


def _not_causal(s, z, r):
    _, m, _ = _parts(s, z, r)
    w = torch.softmax(s, -1) * m
    return w / w.sum(-1, keepdim=True)


def _softmax_twice(s, z, r):
    d, m, p = _parts(s, z, r)
    return torch.softmax((p * m).masked_fill(d < 0, float("-inf")), -1)


def _inline_mask(mask_of):
    """Weights renormalised under ``mask_of(distance, z, r)``, written inline in place of m_z."""

    def weights(s, z, r):
        d, _, p = _parts(s, z, r)
        w = p * mask_of(d, z, r)
        return w / w.sum(-1, keepdim=True)

    return weights


WEIGHT_MISTAKES = {
    "not renormalised": _no_renorm,
    # the soft mask's own mistakes, written inline, named as the soft-mask exercise names them
    "ramp is on the wrong side of z": _inline_mask(lambda d, z, r: ((z - d) / r).clamp(0, 1)),
    "divided by R + 1": _inline_mask(lambda d, z, r: ((r + z - d) / (r + 1)).clamp(0, 1)),
    "hard mask": _inline_mask(lambda d, z, r: (d <= z).double()),
    "wrong sign (j - i gives every past key mask 1)": _flipped,
    "mask on the scores": _on_scores,
    "added the mask": _added,
    "future is not masked": _not_causal,
    "softmax twice": _softmax_twice,
}


@pytest.mark.parametrize("diagnosis, fn", WEIGHT_MISTAKES.items(), ids=list(WEIGHT_MISTAKES))
def test_weights_mistakes(diagnosis, fn):
    assert_fails("adaptive-span/weights", fn, diagnosis)


def _ten_positions_only(scores, span, ramp):  # torch.arange(10), as the chapter's demo cell
    position = torch.arange(10)
    distance = (position[:, None] - position[None, :]).double()
    mask = ((ramp + span - distance) / ramp).clamp(0, 1)
    probs = torch.softmax(scores.masked_fill(distance < 0, float("-inf")), dim=-1)
    weights = probs * mask
    return weights / weights.sum(-1, keepdim=True)


def test_soft_mask_and_window_refuse_the_package_functions():
    from attncourse import adaptive_span

    assert_fails(
        "adaptive-span/soft-mask",
        lambda d, z, r: adaptive_span.soft_span_mask(d, z, r),
        "calls attncourse.adaptive_span.soft_span_mask",
    )
    assert_fails(
        "adaptive-span/window",
        lambda spans, r: adaptive_span.span_window(spans.max(), r),
        "calls attncourse.adaptive_span.span_window",
    )


def test_weights_for_one_length_only_are_refused():
    assert not check("adaptive-span/weights", _ten_positions_only).passed


def test_weights_wrong_shape_and_crash():
    assert "shape" in check("adaptive-span/weights", lambda s, z, r: s[:5]).message
    result = check("adaptive-span/weights", lambda s, z, r: undefined_name)  # noqa: F821
    assert not result.passed and "NameError" in result.message


# -- predict: the scores a trimmed layer computes ----------------------------------------------------

CELLS = "adaptive-span/cells"


def _layer_cells():
    """Counted by the layer itself: one forward pass of a (1, 512, d) input with spans (40, 10, 3, 0)."""
    from attncourse.adaptive_span import AdaptiveSpanAttention

    layer = AdaptiveSpanAttention(embed_dim=32, num_heads=4, max_span=64, ramp=16)
    with torch.no_grad():
        layer.span.span_fraction.copy_(torch.tensor([40.0, 10.0, 3.0, 0.0]) / 64)
        layer(torch.randn(1, 512, 32))
    return layer.cells


def test_cells_by_hand_equals_the_layer_counter():
    window = math.ceil(40 + 16)
    by_hand = 4 * math.ceil(512 / 16) * 16 * (16 + window - 1)
    assert by_hand == _layer_cells()


@pytest.mark.parametrize("style", COUNT_STYLES)
def test_cells_accepts(style):
    assert check(CELLS, style(_layer_cells())).passed


@pytest.mark.parametrize(
    "answer,diagnosis",
    [
        (512 * sum(15 + math.ceil(z + 16) for z in (40, 10, 3, 0)), "its own window"),
        (4 * 32 * 16 * (15 + 40), "forgot the ramp"),
        (512 * 56 * 4, "its own 16 keys"),
        (32 * 16 * 71, "one head"),
        (4 * 512 * 512, "full L x L"),
        (4 * 512 * 513 // 2, "causal triangle"),
        (4 * 32 * 16 * (15 + 57), "W = 57"),
        # the first blocks' keys clipped at position 0: 16, 32, 48, 64 keys, then 71
        (4 * 16 * sum(min(16 * (n + 1), 71) for n in range(32)), "before position 0"),
        (77, "is not it"),
    ],
)
def test_cells_diagnoses(answer, diagnosis):
    assert_fails(CELLS, answer, diagnosis)


# -- find the bug: the distance ------------------------------------------------------------------------

BUG = "adaptive-span/find-the-bug"


def test_span_listing_is_wrong_on_line_6_only():
    from attncourse.adaptive_span import soft_span_mask

    lines = notebook_listing("08_adaptive_span.ipynb", "ex-adaptive-span-find-the-bug")
    scores = torch.randn(12, 12, dtype=torch.float64)
    dist = (torch.arange(12)[:, None] - torch.arange(12)[None, :]).double()
    mask = soft_span_mask(dist, 3.0, 2.0) * (dist >= 0)
    expected = torch.softmax(
        scores
        + torch.where(
            mask > 0, mask.clamp_min(1e-300).log(), torch.tensor(float("-inf"), dtype=torch.float64)
        ),
        -1,
    )
    buggy = run_listing(lines, "span_weights")(scores, 3.0, 2.0)
    assert not torch.allclose(buggy, expected)
    # plain causal softmax
    assert torch.allclose(buggy, torch.softmax(scores.masked_fill(dist < 0, float("-inf")), -1))
    fixed = run_listing(lines, "span_weights", {6: "distance = i - j"})(scores, 3.0, 2.0)
    torch.testing.assert_close(fixed, expected)
    assert "j - i" in lines[6 - 1]


def test_new_exercises_stub_and_hints():
    from attncourse.exercises import hint

    for exercise_id in (CELLS, BUG):
        assert check(exercise_id, ...).status == "not attempted yet"
        assert str(hint(exercise_id)) and str(solution(exercise_id))
