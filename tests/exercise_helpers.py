"""Helpers for the tests of the exercise checkers (``tests/test_exercises_chNN.py``)."""

import torch

from attncourse.exercises import check, registry

#: Every registered exercise by id (a read-only view).
REGISTRY = registry()


def stub(*args, **kwargs):
    """The untouched exercise stub."""
    raise NotImplementedError


def assert_passes(exercise_id: str, answer) -> None:
    """``check`` accepts ``answer`` (its message is shown when it does not)."""
    result = check(exercise_id, answer)
    assert result.passed, result.message


def assert_fails(exercise_id: str, answer, words: str) -> None:
    """``check`` rejects ``answer`` and its message contains ``words`` (the diagnosis)."""
    result = check(exercise_id, answer)
    assert result.status == "failed", result
    assert words in result.message, result.message


#: The ways a learner gives a count, each to be accepted: an int, a float, a tensor of the count's
#: type, and a float64 tensor of no dimension or of one element.
COUNT_STYLES = [
    int,
    float,
    torch.tensor,
    lambda v: torch.tensor(float(v), dtype=torch.float64),
    lambda v: torch.tensor([float(v)], dtype=torch.float64),
]


def line_answers(line: int) -> list:
    """The ways a learner gives a find-the-bug exercise its line: an int, a float, a numpy
    integer, a 0-d tensor and a one-element tensor, all to be accepted."""
    import numpy as np

    return [line, float(line), np.int64(line), torch.tensor(line), torch.tensor([float(line)])]


def notebook_listing(notebook: str, label: str) -> list:
    """The lines of the numbered ``code-block`` inside the exercise ``label`` of ``book/<notebook>``."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[1] / "book" / notebook).read_text())[
        "cells"
    ]
    text = next(
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "markdown" and f":label: {label}" in "".join(c["source"])
    )
    block = text.split("```{code-block} python\n:linenos:\n", 1)[1].split("\n```", 1)[0]
    return block.split("\n")


def run_listing(lines: list, name: str, replace: dict = None):
    """Execute the listing (line ``n`` replaced by ``replace[n]``, keeping its indentation) and return ``name``."""
    import torch

    lines = list(lines)
    for number, new in (replace or {}).items():
        old = lines[number - 1]
        lines[number - 1] = old[: len(old) - len(old.lstrip())] + new
    namespace = {"torch": torch}
    exec("\n".join(lines), namespace)
    return namespace[name]


#: The answers a spy on ``check_number`` gives a number checker, in turn, until one reaches it:
#: 1 first; a count such as a number of bytes refuses 1 as the wrong unit before it grades.
NUMBER_PROBES = (1, 123456789)


def number_exercises() -> dict:
    """``{id: (right value, rel_tol, [(mistake value, message)], mistake rel_tol, otherwise)}``
    of every exercise graded by ``check_number``, found by spying on the checkers (so value
    exercises added later are covered without a change here). The spy stands in the checker's
    module and in ``_core``, where helpers such as ``check_line_number`` call it."""
    import json
    import sys

    from attncourse.exercises import _core, registry
    from attncourse.exercises._core import reveal

    original = _core.check_number
    found = {}
    for eid, ex in sorted(registry().items()):
        module = sys.modules[ex.checker.__module__]
        if ex.answer_is_function or getattr(module, "check_number", None) is not _core.check_number:
            continue
        seen = []

        def spy(answer, concealed_answer, concealed_mistakes, seen=seen, **kwargs):
            rel = kwargs.get("rel_tol", 0.0)
            mrel = kwargs.get("mistake_rel_tol")
            mistakes = [(float(k), v) for k, v in json.loads(reveal(concealed_mistakes)).items()]
            right = float(reveal(concealed_answer))
            seen.append(
                (right, rel, mistakes, rel if mrel is None else mrel, kwargs.get("otherwise", ""))
            )
            return original(answer, concealed_answer, concealed_mistakes, **kwargs)

        module.check_number = _core.check_number = spy
        try:
            for probe in NUMBER_PROBES:
                if not seen:
                    check(eid, probe)
        finally:
            module.check_number = _core.check_number = original
        if seen:
            found[eid] = seen[0]
    return found
