"""The chapter 4 checkers accept the reference and name the usual mistakes."""

import pytest
import torch
from exercise_helpers import assert_fails as _failed

from attncourse.exercises import check, hint, solution
from attncourse.exercises.ch04_cross_attention import _cross_attention_solution
from attncourse.multihead import MultiHeadAttention

ID = "cross-attention/single-head"


def _make(value="w_v", scale="d_k", mask="keys", dim=-1, transpose=False, output="value"):
    """A cross-attention with one deliberate mistake."""

    def fn(target, source, w_q, w_k, w_v, source_mask):
        query, key = target @ w_q, source @ w_k
        val = {"w_v": source @ w_v, "w_k": source @ w_k}[value]
        d = {"d_k": query.size(-1), "source": source.size(-1), "none": 1}[scale]
        scores = (
            key @ query.transpose(-2, -1) if transpose else query @ key.transpose(-2, -1)
        ) / d**0.5
        if mask == "keys":
            scores = scores.masked_fill(~source_mask[:, None, :], float("-inf"))
        elif mask == "inverted":
            scores = scores.masked_fill(source_mask[:, None, :], float("-inf"))
        elif mask == "queries":
            scores = scores.masked_fill(~source_mask[:, :, None], float("-inf"))
        elif mask == "minus-1e9":
            scores = scores.masked_fill(~source_mask[:, None, :], -1e9)
        weights = torch.softmax(scores, dim=dim)
        out = weights @ (source if output == "source" else val)
        return out, weights

    return fn


def test_reference_and_equivalent_answers_pass():
    assert check(ID, _cross_attention_solution).passed
    # -1e9 is as good as -inf when a row keeps a key
    assert check(ID, _make(mask="minus-1e9")).passed

    def with_the_package_attention(target, source, w_q, w_k, w_v, source_mask):
        from attncourse import scaled_dot_product_attention

        return scaled_dot_product_attention(
            target @ w_q, source @ w_k, source @ w_v, source_mask[:, None, :]
        )

    assert check(ID, with_the_package_attention).passed


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (_make(value="w_k"), "K = V = X_2 W^K"),
        (_make(scale="source"), "sqrt of the source's width"),
        (_make(scale="none"), "not scaled"),
        (_make(mask="none"), "padding mask is ignored"),
        (_make(mask="inverted"), "polarity is inverted"),
        (_make(mask="queries"), "masked the queries (rows) instead of the keys"),
        (_make(dim=-2), "softmax runs over the target positions"),
        (_make(transpose=True, mask="none"), "(B, S, L)"),
        (_make(transpose=True), "key @ query^T"),
        (_make(output="source"), "your output is weights @ source"),
    ],
)
def test_wrong_answers_get_their_diagnosis(wrong, diagnosis):
    result = check(ID, wrong)
    assert not result.passed and result.status == "failed"
    assert diagnosis in result.message, result.message


def test_right_weights_with_a_wrong_output():
    def doubled(*args):
        output, weights = _cross_attention_solution(*args)
        return 2 * output, weights

    _failed(ID, doubled, "the weights are right but the output is not")


def test_a_stub_is_not_attempted_and_a_crash_is_reported():
    def stub(target, source, w_q, w_k, w_v, source_mask):
        raise NotImplementedError

    assert check(ID, stub).status == "not attempted yet"

    def crashes(target, source, w_q, w_k, w_v, source_mask):
        return target @ w_k  # the wrong projection for the target's width

    result = check(ID, crashes)
    assert result.status == "failed" and "raised RuntimeError" in result.message
    assert check(ID, lambda *args: 3).status == "failed"


def test_hint_and_solution_are_available():
    assert "source_mask[:, None, :]" in hint(ID, 2).text  # the second level; the first nudges
    assert "source_mask[:, None, :]" not in hint(ID).text
    assert "def cross_attention(" in solution(ID).text


# -- shapes --------------------------------------------------------------------------------

SHAPES = "cross-attention/shapes"


def _true_shapes():
    """The shapes, measured by running the layer the exercise describes."""
    layer = MultiHeadAttention(48, 4, kdim=32, vdim=32)
    target, memory = torch.randn(2, 5, 48), torch.randn(2, 9, 32)
    source_mask = torch.ones(2, 9, dtype=torch.bool)
    key_padding = source_mask[:, None, None, :]
    output, weights = layer(target, memory, memory, key_padding)  # the 4-D mask is accepted as is
    assert torch.broadcast_shapes(key_padding.shape, weights.shape) == weights.shape
    return {
        "weights": tuple(weights.shape),
        "output": tuple(output.shape),
        "key_padding_mask": tuple(key_padding.shape),
    }


def test_shapes_accepts_the_measured_shapes_in_any_sequence_type():
    shapes = _true_shapes()
    assert check(SHAPES, shapes).passed
    assert check(SHAPES, {k: torch.Size(v) for k, v in shapes.items()}).passed
    assert check(SHAPES, {k: list(v) for k, v in shapes.items()}).passed


@pytest.mark.parametrize(
    "name, wrong, diagnosis",
    [
        ("weights", (2, 4, 9, 5), "rows are queries and columns are keys"),
        ("weights", (2, 5, 9), "every head"),
        ("weights", (2, 4, 5, 5), "L and S may differ"),
        ("output", (2, 5, 32), "not the source's width"),
        ("output", (2, 9, 32), "'n x d_2' is wrong"),
        ("output", (2, 9, 48), "one output row per query"),
        ("key_padding_mask", (2, 9), "Add dimensions for the heads and the queries"),
        ("key_padding_mask", (2, 1, 9), "unsqueeze(1)"),
        ("key_padding_mask", (2, 1, 5, 1), "this masks queries"),
        ("key_padding_mask", (1, 1, 1, 9), "without a batch dimension"),
        ("key_padding_mask", (2, 1, 9, 1), "S on the query axis"),
        ("key_padding_mask", (2, 4, 5, 9), "repeats one padding pattern"),
        ("output", (3, 5, 48), "count the sizes again"),
    ],
)
def test_shapes_names_each_mistake(name, wrong, diagnosis):
    answer = {**_true_shapes(), name: wrong}
    result = check(SHAPES, answer)
    assert not result.passed and diagnosis in result.message, result.message
    assert result.message.startswith(f"{name} {wrong}")


def test_shapes_bad_forms():
    assert check(SHAPES, ...).status == "not attempted yet"
    assert "exactly the keys" in check(SHAPES, {"weights": (2, 4, 5, 9)}).message
    shapes = _true_shapes()
    assert "a tuple of integers" in check(SHAPES, {**shapes, "output": "2, 5, 48"}).message
    assert "(2, 1, 1, 9)" in solution(SHAPES).text


# -- predict: the parameters of a cross-attention layer ---------------------------------------------


def test_cross_count_accepts_the_count_of_torch():
    # an independent implementation
    reference = torch.nn.MultiheadAttention(48, 4, kdim=32, vdim=32)
    count = sum(p.numel() for p in reference.parameters())
    assert check("cross-attention/parameter-count", count).passed
    assert check("cross-attention/parameter-count", torch.tensor(count)).passed
    assert check("cross-attention/parameter-count", ...).status == "not attempted yet"


@pytest.mark.parametrize(
    "wrong,words",
    [
        (9408, "without kdim and vdim"),
        (7680, "left out the biases"),
        (9216, "4 x 48 x 48"),
        (6816, "projected keys and values to width 32"),
        (1968, "one head's share"),
        (31488, "multiplied by the 4 heads"),
        (7873, "is not it"),
        ([7872], "should be a number"),
    ],
)
def test_cross_count_rejects(wrong, words):
    _failed("cross-attention/parameter-count", wrong, words)


# -- find the bug: which line --------------------------------------------------------------------------


def _buggy_cross_attention(target, source, w_q, w_k, w_v, source_mask):
    q, k = target @ w_q, source @ w_k
    v = source @ w_v
    scores = q @ k.transpose(-2, -1) / k.size(-1) ** 0.5
    scores = scores.masked_fill(~source_mask[:, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=1)
    return weights @ v, weights


def test_the_given_code_has_the_bug_the_checker_names():
    """The notebook's claim: NaN on a padded batch, and the fix of line (d) alone removes it."""
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(*s, generator=g) for s in ((2, 4, 6), (2, 5, 3), (6, 4), (3, 4), (3, 2))]
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    out, _ = _buggy_cross_attention(*args, mask)
    assert out.isnan().any()
    fixed = _cross_attention_solution(*args, mask)[0]
    q, k, v = args[0] @ args[2], args[1] @ args[3], args[1] @ args[4]
    scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~mask[:, None, :], float("-inf"))
    torch.testing.assert_close(fixed, torch.softmax(scores, dim=-1) @ v)  # line (d) with dim=-1
    for answer in ("d", "D", " (d) ", "(D)", "d)", "d."):
        assert check("cross-attention/which-bug", answer).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        ("a", "Line (a) is right"),
        ("b", "Line (b) is right"),
        ("c", "Line (c) is right"),
        ("e", "Line (e) is right"),
        ("f", "Answer with one of"),
        (4, "Answer with one of"),
        ("dim=1", "Answer with one of"),
    ],
)
def test_which_bug_rejects(wrong, words):
    _failed("cross-attention/which-bug", wrong, words)


# -- experiment: the same-position head ------------------------------------------------------------------


def test_diagonal_baseline_accepts_an_independent_measurement():
    from attncourse.course.toy_translation import make_data, split_numbers

    data = make_data(split_numbers(0.2, seed=0)[1])
    hits = total = 0
    for row in data.alignment.tolist():  # plain Python: target position i against source position i
        for i, j in enumerate(row):
            if j >= 0:
                total += 1
                hits += i == j
    assert 0.2 < hits / total < 0.35
    assert check("cross-attention/diagonal-baseline", hits / total).passed
    assert check("cross-attention/diagonal-baseline", torch.tensor(hits / total)).passed
    assert check("cross-attention/diagonal-baseline", round(hits / total, 3)).passed
    assert check("cross-attention/diagonal-baseline", ...).status == "not attempted yet"


@pytest.mark.parametrize(
    "wrong,words",
    [
        (28.06, "as a percentage"),
        (0.2179, "end-of-sentence"),
        (0.2576, "always picks the first word"),
        (0.98, "is not what this head scores"),
        (1608, "count of digits"),  # the hits, not their share
        ("0.28", "should be a number"),
    ],
)
def test_diagonal_baseline_rejects(wrong, words):
    _failed("cross-attention/diagonal-baseline", wrong, words)


def test_single_head_names_the_pair_in_the_wrong_order_and_a_fill_of_zero():
    from attncourse.exercises.ch04_cross_attention import _cross_attention_solution

    def swapped(*args):
        output, weights = _cross_attention_solution(*args)
        return weights, output

    def zero_filled(target, source, w_q, w_k, w_v, source_mask):
        query, key, value = target @ w_q, source @ w_k, source @ w_v
        scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5
        weights = torch.softmax(scores.masked_fill(~source_mask[:, None, :], 0.0), -1)
        return weights @ value, weights

    _failed("cross-attention/single-head", swapped, "return (output, weights), in that order")
    _failed("cross-attention/single-head", zero_filled, "filled with 0")


@pytest.mark.parametrize("width, words", [("value", "sqrt(d_v)"), ("target", "target's width")])
def test_single_head_names_a_scale_by_another_width(width, words):
    def scaled(target, source, w_q, w_k, w_v, source_mask):
        query, key, value = target @ w_q, source @ w_k, source @ w_v
        d = (value if width == "value" else target).size(-1)
        scores = query @ key.transpose(-2, -1) / d**0.5
        weights = torch.softmax(scores.masked_fill(~source_mask[:, None, :], float("-inf")), -1)
        return weights @ value, weights

    _failed("cross-attention/single-head", scaled, words)
