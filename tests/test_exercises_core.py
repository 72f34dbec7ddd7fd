"""The exercise machinery: check/hint/solution, results, the registry and concealed answers."""

import json
from pathlib import Path

import pytest

import attncourse
from attncourse.exercises import check, hint, list_exercises, solution
from attncourse.exercises._core import (
    _REGISTRY,
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    Reveal,
    conceal,
    reveal,
)

ROOT = Path(__file__).resolve().parent.parent


def test_every_exercise_has_a_title_hint_and_solution():
    listed = list_exercises()
    assert len(listed) >= 3 and len({e["id"] for e in listed}) == len(listed)
    for entry in listed:
        assert entry["title"]
        assert isinstance(hint(entry["id"]), Reveal) and hint(entry["id"]).text.strip()
        assert isinstance(solution(entry["id"]), Reveal) and solution(entry["id"]).text.strip()


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="dot-product/attention"):
        check("no/such-exercise", 1)


@pytest.mark.parametrize("exercise_id", sorted(_REGISTRY))
def test_untouched_stubs_are_not_attempted(exercise_id):
    def stub(*args, **kwargs):
        raise NotImplementedError

    for untouched in (stub, ..., None):
        result = check(exercise_id, untouched)
        if untouched is stub and not _REGISTRY[exercise_id].solution_is_code:
            assert result.status in (FAILED, NOT_ATTEMPTED)  # a value exercise given a function
            continue
        assert result.status == NOT_ATTEMPTED and not result.passed, result


def test_results_display_as_text_and_html():
    passed = check("dot-product/score-variance", 64)
    failed = check("dot-product/score-variance", 8)
    assert passed.passed and bool(passed) and passed.status == PASSED
    assert not failed.passed and failed.status == FAILED
    assert "dot-product/score-variance" in str(failed) and "hint(" in str(failed)
    assert "<div" in passed._repr_html_() and "passed" in passed._repr_html_()


def test_hints_and_solutions_are_collapsed_in_html():
    for reveal_obj in (hint("dot-product/attention"), solution("dot-product/attention")):
        html = reveal_obj._repr_html_()
        assert html.startswith("<details>") and "</details>" in html
    assert "<pre>" in solution("dot-product/attention")._repr_html_()  # code keeps its layout


def test_conceal_round_trip_and_unreadable():
    text = "the answer is 64"
    assert reveal(conceal(text)) == text
    assert "64" not in conceal(text) and "answer" not in conceal(text)


def test_value_answers_are_not_readable_in_the_package_or_the_notebooks():
    """The worked solution of every value exercise appears nowhere in plain text."""
    sources = [p.read_text() for p in Path(attncourse.__file__).parent.rglob("*.py")]
    sources += [json.dumps(json.loads(p.read_text())) for p in (ROOT / "book").glob("*.ipynb")]
    for ex in _REGISTRY.values():
        if ex.solution_is_code:
            continue
        worked = ex.solution()
        for sentence in (s.strip() for s in worked.split(".") if len(s.strip()) > 25):
            assert not any(sentence in source for source in sources), (ex.exercise_id, sentence)
