"""The chapter 7 checkers accept the reference and reject realistic wrong answers with the right diagnosis."""

import pytest
import torch
from exercise_helpers import COUNT_STYLES, assert_fails, notebook_listing, run_listing

from attncourse import efficient
from attncourse.benchmarks.measure import multihead_flops
from attncourse.exercises import check, hint, solution
from attncourse.exercises.ch07_complexity import _online_update_solution

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
    assert_fails("complexity/online-softmax", wrong, diagnosis)


def _through_the_package(m, l, acc, s, v):  # the package's update for m and l, acc by hand
    new_m, new_l, c = efficient.online_softmax_update(m, l, s)
    return new_m, new_l, acc * c[:, None] + torch.exp(s - new_m[:, None]) @ v


def test_online_softmax_refuses_the_package_update():
    assert_fails(
        "complexity/online-softmax",
        _through_the_package,
        "calls attncourse.efficient.online_softmax_update",
    )


def test_online_softmax_catches_overflow():
    # exp(scores) without a shift: right on small scores (the one-step check shifts by the
    # max, so it fails there already, as a plain difference) and inf/NaN on large ones
    result = check("complexity/online-softmax", _no_max_at_all)
    assert result.status == "failed"


def test_online_softmax_stub_and_wrong_return():
    assert check("complexity/online-softmax", _stub).status == "not attempted yet"
    assert_fails("complexity/online-softmax", lambda m, l, acc, s, v: acc, "three tensors")


# -- FLOPs ------------------------------------------------------------------------------------

L, E, H = 1024, 768, 12  # L != 2E and L != 4E: every likely mistake gives its own number
TOTAL = multihead_flops(1, L, L, E, H)


def test_flops_accepts_the_formula_and_counted_value():
    assert check("complexity/multihead-flops", TOTAL).passed
    from torch.utils.flop_counter import FlopCounterMode

    from attncourse.multihead import MultiHeadAttention

    layer = MultiHeadAttention(E, H, bias=False)
    x = torch.randn(1, L, E)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, x, x)
    # counted independently
    assert check("complexity/multihead-flops", counter.get_total_flops()).passed


def test_flops_explain_what_the_counter_misses_on_torch_s_cpu_layer():
    """The hint's FlopCounterMode on nn.MultiheadAttention(need_weights=False): on a CPU the
    fused attention kernel goes uncounted, and the feedback says so."""
    from torch.utils.flop_counter import FlopCounterMode

    layer = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True)
    x = torch.randn(1, L, E)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, x, x, need_weights=False)
    counted = counter.get_total_flops()
    if counted == TOTAL:  # a torch whose counter sees the fused kernel: nothing to explain
        assert check("complexity/multihead-flops", counted).passed
    else:  # torch 2.13 on a CPU: the projections only
        assert counted == 8 * L * E * E
        assert_fails("complexity/multihead-flops", counted, "is not counted")


@pytest.mark.parametrize(
    "answer,diagnosis",
    [
        (TOTAL // 2, "multiply-add as one"),
        (4 * L * L * E, "two attention products alone"),
        (8 * L * E * E, "four projections alone"),
        (6 * L * E * E + 4 * L * L * E, "output projection"),
        (8 * L * E * E + 2 * L * L * E, "only one of the two attention products"),
        (8 * L * E * E + 4 * L * L * E * H, "full width d:"),
        (8 * L * E * E + 4 * L * L * E // H, "one head only"),
        (1e6, "is not it"),
        # the solution's own "about 8.1 GFLOP", as a number: within 0.05 % of counting the
        # softmax, but the answer rounded to 2 digits
        (8.1e9, "rounded to 2 significant digits"),
        # GFLOP: in billions, to within the tolerance or rounded
        (8.053, "in billions"),
        (8.05, "in billions"),
        # the biases' additions, 4 L d: 0.04 % more, within the old 0.1 % tolerance
        (8 * L * E * E + 4 * L * L * E + 4 * L * E, "counted the biases"),
        (8.053e9, "rounded to 4 significant digits"),
    ],
)
def test_flops_diagnoses(answer, diagnosis):
    assert_fails("complexity/multihead-flops", answer, diagnosis)


def test_flops_mistakes_are_told_apart():
    """With these sizes no two likely mistakes give the same number (at L = 2E or 4E some coincide)."""
    wrong = [
        TOTAL // 2,
        4 * L * L * E,
        8 * L * E * E,
        6 * L * E * E + 4 * L * L * E,
        8 * L * E * E + 2 * L * L * E,
        8 * L * E * E + 4 * L * L * E * H,
        8 * L * E * E + 4 * L * L * E // H,
    ]
    messages = [check("complexity/multihead-flops", w).message for w in wrong]
    assert len(set(wrong)) == len(wrong) and len(set(messages)) == len(messages)


def test_flops_stub_and_non_number():
    assert check("complexity/multihead-flops", ...).status == "not attempted yet"
    assert check("complexity/multihead-flops", "a lot").status == "failed"


def test_hints_and_solutions_render():
    for exercise_id in ("complexity/online-softmax", "complexity/multihead-flops"):
        assert str(hint(exercise_id)) and str(solution(exercise_id))
    assert f"{TOTAL:,}" in str(solution("complexity/multihead-flops"))


# -- predict: the scores of a causal tiled attention ---------------------------------------------

CELLS = "complexity/causal-cells"


def _tiled_causal_scores(length=4096, query_block=256, key_block=1024):
    """Independent count: the scores of each (query block, key tile) pair that tiled_attention visits."""
    total = 0
    for q_start in range(0, length, query_block):
        key_end = q_start + query_block  # causal, L = S: nothing after the block's last query
        for k_start in range(0, key_end, key_block):
            total += query_block * (min(k_start + key_block, key_end) - k_start)
    return total


@pytest.mark.parametrize("style", COUNT_STYLES)
def test_causal_cells_accepts_the_count(style):
    assert check(CELLS, style(_tiled_causal_scores())).passed


def test_causal_cells_count_is_what_tiled_attention_multiplies():
    """The FLOPs counted in tiled_attention's products are 4 d per computed score (Q K^T and P V, 2 each)."""
    from torch.utils.flop_counter import FlopCounterMode

    from attncourse.efficient import tiled_attention

    q, k, v = (torch.randn(1, 1, 4096, 8) for _ in range(3))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        tiled_attention(q, k, v, causal=True)
    assert counter.get_total_flops() == 4 * 8 * _tiled_causal_scores()


@pytest.mark.parametrize(
    "answer,diagnosis",
    [
        (4096 * 4096, "every score"),
        (4096 * 4097 // 2, "exact causal triangle"),
        (4096 * 4096 // 2, "half of L^2"),
        (40 * 256 * 1024, "cut short"),
        (8 * _tiled_causal_scores(), "all 8 heads"),
        (1234, "is not it"),
    ],
)
def test_causal_cells_diagnoses(answer, diagnosis):
    assert_fails(CELLS, answer, diagnosis)


# -- find the bug: a blocked softmax ---------------------------------------------------------------

BUG = "complexity/find-the-bug"


def test_blocked_softmax_listing_is_wrong_on_line_13_only():
    lines = notebook_listing("07_complexity.ipynb", "ex-complexity-find-the-bug")
    q, k, v = torch.randn(2, 5, 8), 3 * torch.randn(2, 300, 8), torch.randn(2, 300, 4)
    reference = torch.softmax(q @ k.transpose(-2, -1) * 8**-0.5, -1) @ v
    buggy = run_listing(lines, "blocked_attention")
    assert not torch.allclose(buggy(q, k, v), reference, atol=1e-4)
    # one block: the bug is invisible
    torch.testing.assert_close(buggy(q, k, v, block=300), reference)
    fixed = run_listing(
        lines,
        "blocked_attention",
        {13: "acc = c[..., None] * acc + p @ v[..., j:j + block, :]"},
    )
    torch.testing.assert_close(fixed(q, k, v), reference, atol=1e-5, rtol=1e-4)
    assert "acc = acc + p @ v" in lines[13 - 1]


# -- experiment: the FLOPs that causal tiling saves ------------------------------------------------

RATIO = "complexity/causal-flops"


def _measured_ratio(length=2048):
    from torch.utils.flop_counter import FlopCounterMode

    from attncourse.efficient import tiled_attention

    q, k, v = (torch.randn(1, 8, length, 64) for _ in range(3))
    counts = []
    for causal in (True, False):
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            tiled_attention(q, k, v, causal=causal)
        counts.append(counter.get_total_flops())
    return counts[0] / counts[1]


def test_causal_flops_accepts_the_measurement_within_tolerance():
    measured = _measured_ratio()
    for answer in (
        measured,
        torch.tensor(measured),
        measured + 0.009,
        measured - 0.009,
        torch.tensor(measured, dtype=torch.float32),
    ):
        assert check(RATIO, answer).passed, answer
    assert not check(RATIO, measured + 0.02).passed  # outside the stated tolerance


@pytest.mark.parametrize(
    "answer,diagnosis",
    [
        (0.5, "ideal half"),
        (0.5002, "ideal half"),
        (1.0, "naive"),
        (16 / 9, "divided the non-causal"),
        (56.25, "percentage"),
        (0.4375, "saves"),
        (0.7, "not within 0.01"),
    ],
)
def test_causal_flops_diagnoses(answer, diagnosis):
    assert_fails(RATIO, answer, diagnosis)


def test_new_exercises_stub_and_solutions():
    for exercise_id in (CELLS, BUG, RATIO):
        assert check(exercise_id, ...).status == "not attempted yet"
        assert str(hint(exercise_id)) and str(solution(exercise_id))


def test_online_softmax_without_the_max_subtracted_overflows_and_is_told():
    """exp(scores) without the running max overflows float64 past about 709: the stress case's
    scores reach past it (before, at about 57, the unstable update passed)."""

    def unstable(running_max, running_sum, acc, scores, value):
        new_max = torch.maximum(running_max, scores.amax(-1))
        e = torch.exp(scores)
        new_sum = (running_sum * torch.exp(running_max) + e.sum(-1)) / torch.exp(new_max)
        new_acc = (acc * torch.exp(running_max)[:, None] + e @ value) / torch.exp(new_max)[:, None]
        return new_max, new_sum, new_acc

    assert not check("complexity/online-softmax", unstable).passed


def test_causal_cells_computed_through_floats_is_the_count():
    assert check("complexity/causal-cells", 16 * 17 / 2 * 256 * 256 * 1.0000000001).passed
    assert "8,912,896.5 is not it" in check("complexity/causal-cells", 8912896.5).message


def test_causal_cells_names_the_tile_count_the_chapter_prints():
    """A learner walking the chapter answered 40, the causal tiles printed above the exercise,
    and was told only "40 is not it"."""
    message = check("complexity/causal-cells", 40).message
    assert "number of tiles" in message, message
