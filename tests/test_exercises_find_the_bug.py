"""Every find-the-bug exercise (chapters 7 to 10) accepts its line however a learner writes the
number, and explains each other answer. That each listing is wrong on that line only is tested
in its chapter's module (``test_*_listing_is_wrong_on_line_*_only``)."""

import pytest
from exercise_helpers import assert_fails, line_answers

from attncourse.exercises import check

#: Each find-the-bug exercise: its wrong line, and other answers with words of their feedback.
FIND_THE_BUG = {
    "complexity/find-the-bug": (
        13,
        [
            (12, "old sum is rescaled"),
            (11, "at most 1"),
            (10, "NEW maximum"),
            (4, "-inf"),
            (15, "once"),
            (99, "not a line that computes"),
            (2, "line 2 the docstring"),
            # the wrong line's code pasted instead of its number
            ("acc = acc + p @ v[..., j:j + block, :]", "not the line's code"),
        ],
    ),
    "adaptive-span/find-the-bug": (
        6,
        [
            (7, "soft mask"),
            (8, "causal softmax"),
            (9, "probabilities"),
            (10, "renormalised"),
            (42, "not a line that computes"),
            (2, "line 2 the docstring"),
        ],
    ),
    "all-attention/find-the-bug": (
        7,
        [
            (6, "1/sqrt(d_k)"),
            (9, "ONE softmax"),
            (4, "appended"),
            (8, "-inf"),
            (0, "not a line that computes"),
            (1, "line 1 is the signature"),
        ],
    ),
    "gpu/find-the-bug": (
        6,
        [
            (7, "masked lanes load -inf"),
            (10, "every column j < S"),
            (3, "comment"),
            (8, "maximum"),
            (11, "lines 1 to 10"),
            (0, "lines 1 to 10"),
            (6.5, "whole number"),
            ("6", "as a number"),
            ("3", "without quotes"),
            (True, "boolean"),
            ([6], "number"),
            (float("nan"), "whole number"),
        ],
    ),
}


@pytest.mark.parametrize(
    "exercise_id, answer",
    [(eid, answer) for eid, (line, _) in FIND_THE_BUG.items() for answer in line_answers(line)],
)
def test_find_the_bug_accepts_the_line(exercise_id, answer):
    assert check(exercise_id, answer).passed


@pytest.mark.parametrize(
    "exercise_id, answer, words",
    [(eid, answer, words) for eid, (_, others) in FIND_THE_BUG.items() for answer, words in others],
)
def test_find_the_bug_explains_other_answers(exercise_id, answer, words):
    assert_fails(exercise_id, answer, words)


@pytest.mark.parametrize("exercise_id", FIND_THE_BUG)
def test_find_the_bug_stub_is_not_attempted(exercise_id):
    assert check(exercise_id, ...).status.startswith("not attempted")
