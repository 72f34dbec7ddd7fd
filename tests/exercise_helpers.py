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
