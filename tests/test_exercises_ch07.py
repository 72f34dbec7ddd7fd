"""The chapter 7 checkers accept the reference and reject realistic wrong answers with the right diagnosis."""
import pytest
import torch

from attncourse.exercises import check, hint, solution
from attncourse.exercises.ch07_complexity import _online_update_solution
from attncourse.measure import multihead_flops


# -- online softmax ---------------------------------------------------------------------------

def _no_sum_rescale(m, l, acc, s, v):
    new_m = torch.maximum(m, s.amax(-1))
    c = torch.exp(m - new_m)
    w = torch.exp(s - new_m[:, None])
    return new_m, l + w.sum(-1), acc * c[:, None] + w @ v


def _no_acc_rescale(m, l, acc, s, v):
    new_m = torch.maximum(m, s.amax(-1))
    c = torch.exp(m - new_m)
    w = torch.exp(s - new_m[:, None])
    return new_m, l * c + w.sum(-1), acc + w @ v


def _old_max_in_exp(m, l, acc, s, v):
    new_m = torch.maximum(m, s.amax(-1))
    c = torch.exp(m - new_m)
    w = torch.exp(s - m[:, None])  # the running max not updated before exponentiating
    return new_m, l * c + w.sum(-1), acc * c[:, None] + w @ v


def _inverted_correction(m, l, acc, s, v):
    new_m = torch.maximum(m, s.amax(-1))
    c = torch.exp(new_m - m)
    w = torch.exp(s - new_m[:, None])
    return new_m, l * c + w.sum(-1), acc * c[:, None] + w @ v


def _block_max_only(m, l, acc, s, v):
    new_m = s.amax(-1)
    c = torch.exp(m - new_m)
    w = torch.exp(s - new_m[:, None])
    return new_m, l * c + w.sum(-1), acc * c[:, None] + w @ v


def _no_max_at_all(m, l, acc, s, v):
    w = torch.exp(s)  # right in exact arithmetic, overflows for large scores
    return torch.maximum(m, s.amax(-1)), l + w.sum(-1), acc + w @ v


def _stub(m, l, acc, s, v):
    raise NotImplementedError


def test_online_softmax_accepts_reference():
    assert check("complexity/online-softmax", _online_update_solution).passed


@pytest.mark.parametrize(
    "wrong,diagnosis",
    [
        (_no_sum_rescale, "running sum is not rescaled"),
        (_no_acc_rescale, "accumulated values are not rescaled"),
        (_old_max_in_exp, "OLD maximum"),
        (_inverted_correction, "inverted"),
        (_block_max_only, "max of the new block only"),
    ],
)
def test_online_softmax_diagnoses(wrong, diagnosis):
    result = check("complexity/online-softmax", wrong)
    assert result.status == "failed"
    assert diagnosis in result.message


def test_online_softmax_catches_overflow():
    # exp(scores) without a shift: right on small scores (the one-step check shifts by the
    # max, so it fails there already, as a plain difference) and inf/NaN on large ones
    result = check("complexity/online-softmax", _no_max_at_all)
    assert result.status == "failed"


def test_online_softmax_stub_and_wrong_return():
    assert check("complexity/online-softmax", _stub).status == "not attempted yet"
    result = check("complexity/online-softmax", lambda m, l, acc, s, v: acc)
    assert result.status == "failed" and "three tensors" in result.message


# -- FLOPs ------------------------------------------------------------------------------------

L, E, H = 2048, 512, 8
TOTAL = multihead_flops(1, L, L, E, H)


def test_flops_accepts_the_formula_and_counted_value():
    assert check("complexity/multihead-flops", TOTAL).passed
    from torch.utils.flop_counter import FlopCounterMode

    from attncourse.multihead import MultiHeadAttention

    layer = MultiHeadAttention(E, H, bias=False)
    x = torch.randn(1, L, E)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, x, x)
    assert check("complexity/multihead-flops", counter.get_total_flops()).passed  # counted independently


@pytest.mark.parametrize(
    "answer,diagnosis",
    [
        (TOTAL // 2, "multiply-add as one"),
        (4 * L * L * E, "attention products"),
        (8 * L * E * E, "four projections alone"),
        (6 * L * E * E + 4 * L * L * E, "output projection"),
        (8 * L * E * E + 2 * L * L * E, "only one of the two attention products"),
        (8 * L * E * E + 4 * L * L * E * H, "full width E"),
        (8 * L * E * E + 4 * L * L * E // H, "one head only"),
        (1e6, "is not it"),
    ],
)
def test_flops_diagnoses(answer, diagnosis):
    result = check("complexity/multihead-flops", answer)
    assert result.status == "failed" and diagnosis in result.message


def test_flops_stub_and_non_number():
    assert check("complexity/multihead-flops", ...).status == "not attempted yet"
    assert check("complexity/multihead-flops", "a lot").status == "failed"


def test_hints_and_solutions_render():
    for exercise_id in ("complexity/online-softmax", "complexity/multihead-flops"):
        assert str(hint(exercise_id)) and str(solution(exercise_id))
    assert f"{TOTAL:,}" in str(solution("complexity/multihead-flops"))
