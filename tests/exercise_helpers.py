"""Helpers for the tests of the exercise checkers (``tests/test_exercises_chNN.py``)."""
from attncourse.exercises import check


def stub(*args, **kwargs):
    """The untouched exercise stub."""
    raise NotImplementedError


def assert_fails(exercise_id: str, answer, words: str) -> None:
    """``check`` rejects ``answer`` and its message contains ``words`` (the diagnosis)."""
    result = check(exercise_id, answer)
    assert result.status == "failed", result
    assert words in result.message, result.message
