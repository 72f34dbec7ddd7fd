"""Predictions before answers: a "predict" exercise asks before the chapter shows the answer.

A predict exercise is one whose statement (title or text, between ``{exercise-start}`` and
``{exercise-end}``) says "predict". ``PREDICT_ANSWERS`` below holds each one's answer (checked
against its checker, so the table cannot drift from it) and any value that gives it away
(a fraction the answer follows from). The test fails when the answer, written any usual way,
appears in a Markdown cell above the exercise or in the source of a code cell above it; when
the book has been built (``_build/executed``, tools/execute_book.py), also in the executed outputs above it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, Iterator, List, Tuple, Union

import pytest
from helpers import CHAPTERS, EXECUTED, MEASURES, executed_cells

from attncourse.exercises import check
from attncourse.exercises._core import _get

#: exercise id -> (the answer, values or formulas (strings, matched as written) that give it away)
PREDICT_ANSWERS: Dict[str, Tuple[float, Tuple[Union[float, str], ...]]] = {
    "multi-head/dropout-row-sum": (0.3162, ()),
    "masking/count-allowed": (50, ()),
    "cross-attention/parameter-count": (7872, ()),
    "cross-attention/diagonal-baseline": (0.2806282722513089, ()),
    "language-model/initial-loss": (4.143134726391533, ("ln V", "log(V)", "ln 63", "log(63)")),
    "inference/cache-bytes": (2 * 80 * 8 * 128 * 4096 * 2, (1.25,)),  # 1.25 GiB
    "complexity/causal-cells": (8_912_896, (8_912_896 / 4096**2,)),  # 53 % of L^2
    "adaptive-span/cells": (145_408, ()),
    "all-attention/memory-cost": (1_048_576, ()),
    # a program that predicts (full, partial); the reveal prints its 45 blocks kept, 82 % sparse
    "flex/predict-blocks": (45, (45 / 256, 1 - 45 / 256)),
}


def _source(cell) -> str:
    return "".join(cell["source"])


def predict_exercises(cells) -> Iterator[Tuple[str, int]]:
    """``(exercise id, index of its exercise-start cell)`` for each predict exercise."""
    for start, cell in enumerate(cells):
        if cell["cell_type"] != "markdown" or "{exercise-start}" not in _source(cell):
            continue
        end = next(k for k in range(start, len(cells)) if "{exercise-end}" in _source(cells[k]))
        block = cells[start:end]
        text = "\n".join(_source(c) for c in block if c["cell_type"] == "markdown")
        if re.search(r"\bpredict", text, re.IGNORECASE):
            ids = [m for c in block for m in re.findall(r'check\("([^"]+)"', _source(c))]
            assert len(ids) == 1, f"exercise at cell {start} has check() ids {ids}"
            yield ids[0], start


def spellings(value: float) -> List[str]:
    """The ways a text or a printout may write ``value``."""
    out = set()
    if float(value).is_integer() and abs(value) >= 10:
        n = int(value)
        out |= {
            str(n),
            f"{n:,}",
            f"{n:_}",
            f"{n:,}".replace(",", " "),
            f"{n:,}".replace(",", "\\,"),
            f"{n:,}".replace(",", "{,}"),
            f"{n:.3e}",
            f"{n:.2e}",
        }
    else:
        v = float(value)
        for digits in range(3, 7):
            out.add(f"{v:.{digits}g}")
        for decimals in range(2, 5):
            text = f"{v:.{decimals}f}"
            if len(text.replace("0.", "").lstrip("0").replace(".", "")) >= 2:
                out.add(text)
        if 0 < v < 1:
            for decimals in (0, 1, 2):
                out |= {
                    f"{100 * v:.{decimals}f}%",
                    f"{100 * v:.{decimals}f} %",
                    f"{100 * v:.{decimals}f}\\%",
                }
    return sorted(out)


def _found(text: str, value: Union[float, str]) -> List[str]:
    if isinstance(value, str):
        return [value] if value in text else []
    hits = []
    for spelling in spellings(value):
        if re.search(r"(?<![\d.,])" + re.escape(spelling) + r"(?![\d])", text):
            hits.append(spelling)
    return hits


def _cases() -> List[Tuple[Path, str, int]]:
    cases = []
    for path in CHAPTERS:
        cells = json.loads(path.read_text())["cells"]
        cases += [(path, exercise_id, start) for exercise_id, start in predict_exercises(cells)]
    return cases


CASES = _cases()


def test_every_predict_exercise_has_its_answer_here():
    found = {exercise_id for _, exercise_id, _ in CASES}
    assert found == set(PREDICT_ANSWERS), (
        "predict exercises without an entry in PREDICT_ANSWERS:"
        f" {sorted(found - set(PREDICT_ANSWERS))}; entries for no predict exercise:"
        f" {sorted(set(PREDICT_ANSWERS) - found)}"
    )
    for exercise_id, (answer, _) in PREDICT_ANSWERS.items():
        exercise = _get(exercise_id)
        if exercise.answer_is_function:  # a program that predicts: its reference passes
            assert check(exercise_id, exercise.reference).passed, exercise_id
            continue
        assert check(exercise_id, answer).passed, (
            f"{exercise_id}: the checker does not accept {answer}"
        )


def test_spellings():
    assert {"4.143", "4.1431", "4.14"} <= set(spellings(4.143134726391533))
    assert {"8912896", "8,912,896", "8 912 896"} <= set(spellings(8_912_896))
    assert "53 %" in spellings(0.53125) and "53.1%" in spellings(0.53125)
    assert _found("ln V = 4.1431 nats", 4.143134726391533) and not _found(
        "ln V = 14.1431", 4.143134726391533
    )
    assert not _found("about 4.1432", 4.143134726391533)


@pytest.mark.parametrize("path, exercise_id, start", CASES, ids=[c[1] for c in CASES])
def test_answer_not_shown_above(path, exercise_id, start):
    cells = json.loads(path.read_text())["cells"]
    answer, giveaways = PREDICT_ANSWERS[exercise_id]
    shown = []
    for index, cell in enumerate(cells[:start]):
        for value in (answer, *giveaways):
            hits = _found(_source(cell), value)
            if hits:
                shown.append(f"cell {index} ({cell['cell_type']}): {hits}")
    assert not shown, (
        f"{path.name}: the answer of {exercise_id} appears above the exercise: {shown}"
    )


# Outputs above a predict exercise that print its number as a different quantity, each checked by
# hand: chapter 9's parameter-count solution prints the projections' 4 x 512^2 = 1,048,576
# parameters, which equals the memory-cost exercise's multiply-adds by coincidence; it tells a
# reader nothing about the persistent memory's cost (and a solution is shown only when opened).
# (Cells that measure, helpers.MEASURES, are passed over for every exercise: chapter 7's profile
# once printed "everything else 53 %", the causal-cells answer.)
# Each entry: the exercise and the first line of the cell whose outputs are exempt.
COINCIDENCES = {
    ("all-attention/memory-cost", 'solution("all-attention/parameter-count")'),
}


@pytest.mark.parametrize("path, exercise_id, start", CASES, ids=[c[1] for c in CASES])
def test_answer_not_in_executed_outputs_above(path, exercise_id, start):
    cells = executed_cells(path)
    starts = [s for i, s in predict_exercises(cells) if i == exercise_id]
    assert starts, f"{exercise_id} is missing from {EXECUTED / path.name}: rebuild the book"
    answer, giveaways = PREDICT_ANSWERS[exercise_id]
    shown = []
    for index, cell in enumerate(cells[: starts[0]]):
        if (exercise_id, _source(cell).strip().split("\n")[0]) in COINCIDENCES:
            continue
        if MEASURES.search(_source(cell)):  # measured this run: a match is chance
            continue
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", "")) + "".join(
                "".join(v) for k, v in output.get("data", {}).items() if k.startswith("text/")
            )
            for value in (answer, *giveaways):
                if _found(text, value):
                    shown.append(f"cell {index}: {_found(text, value)}")
    assert not shown, (
        f"{path.name}: the answer of {exercise_id} is printed above the exercise: {shown}"
    )
