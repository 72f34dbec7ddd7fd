"""Chapter 8 checkers accept the reference and reject realistic wrong answers with the right diagnosis."""
import math

import pytest
import torch

from attncourse.exercises import check, solution
from attncourse.exercises._core import NOT_ATTEMPTED, _get


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("exercise_id", ["adaptive-span/soft-mask", "adaptive-span/window", "adaptive-span/weights"])
def test_reference_passes_and_stub_is_not_attempted(exercise_id):
    namespace = {"torch": torch, "math": math}
    exec(solution(exercise_id).text, namespace)
    fn = next(v for k, v in namespace.items() if k.startswith("_") and k.endswith("_solution"))
    assert check(exercise_id, fn).passed, check(exercise_id, fn)
    assert check(exercise_id, _stub).status == NOT_ATTEMPTED
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
}


@pytest.mark.parametrize("diagnosis, fn", MASK_MISTAKES.items(), ids=list(MASK_MISTAKES))
def test_soft_mask_mistakes(diagnosis, fn):
    result = check("adaptive-span/soft-mask", fn)
    assert not result.passed
    assert diagnosis in result.message


def test_soft_mask_without_broadcasting_is_caught():
    def loop(x, z, r):
        if z.dim() == 0:
            return ((r + z - x) / r).clamp(0, 1)
        return ((r + z.flatten()[0] - x) / r).clamp(0, 1).expand(z.size(0), *x.shape)

    result = check("adaptive-span/soft-mask", loop)
    assert not result.passed and "one span per head" in result.message


# -- window ----------------------------------------------------------------------------------------

WINDOW_MISTAKES = {
    "forgot the ramp": lambda z, r: math.ceil(z.max().item()),
    "rounded down": lambda z, r: math.floor(z.max().item() + r),
    "One too many": lambda z, r: math.ceil(z.max().item() + r) + 1,
    "mean span": lambda z, r: math.ceil(z.mean().item() + r),
    "shortest span": lambda z, r: math.ceil(z.min().item() + r),
    "ramp counts once": lambda z, r: math.ceil(z.max().item() + 2 * r),
    "whole number": lambda z, r: z.max().item() + r + 0.5,
}


@pytest.mark.parametrize("diagnosis, fn", WINDOW_MISTAKES.items(), ids=list(WINDOW_MISTAKES))
def test_window_mistakes(diagnosis, fn):
    result = check("adaptive-span/window", fn)
    assert not result.passed
    assert diagnosis in result.message


def test_window_accepts_a_tensor_answer():
    assert check("adaptive-span/window", lambda z, r: torch.ceil(z.max() + r)).passed


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


WEIGHT_MISTAKES = {
    "not renormalised": _no_renorm,
    "wrong sign (j - i)": _flipped,
    "mask on the scores": _on_scores,
    "added the mask": _added,
    "future is not masked": _not_causal,
    "softmax twice": _softmax_twice,
}


@pytest.mark.parametrize("diagnosis, fn", WEIGHT_MISTAKES.items(), ids=list(WEIGHT_MISTAKES))
def test_weights_mistakes(diagnosis, fn):
    result = check("adaptive-span/weights", fn)
    assert not result.passed
    assert diagnosis in result.message


def test_weights_wrong_shape_and_crash():
    assert "shape" in check("adaptive-span/weights", lambda s, z, r: s[:5]).message
    result = check("adaptive-span/weights", lambda s, z, r: undefined_name)  # noqa: F821
    assert not result.passed and "NameError" in result.message
