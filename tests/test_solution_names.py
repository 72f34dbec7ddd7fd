"""A revealed solution defines the function its exercise's ``check`` cell grades.

Each chapter's check cell passes the learner's function by name (``check("id", my_repeat_kv)``);
a solution shown as code must define that name, so that a learner who pastes it has answered
the exercise (exercise 10.1's solution defined ``key_blocks`` where the cell checks
``causal_key_blocks``). The statement above the answer cell names it too (exercise 6.2 said
``repeat_kv``, the package's own function, which the chapter had imported)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attncourse.exercises import registry, solution

ROOT = Path(__file__).resolve().parent.parent
CHECK = re.compile(r'check\(\s*"([^"]+)",\s*([A-Za-z_]\w*)\s*\)')


def checked_functions() -> list[tuple[str, str, str, str]]:
    """``(chapter, exercise id, name passed to check, statement text)`` for every check cell
    that passes a function the learner defines in the answer cell above it."""
    found = []
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for i, cell in enumerate(cells):
            text = "".join(cell["source"])
            match = CHECK.search(text) if cell["cell_type"] == "code" else None
            if not match or i < 2:
                continue
            stub = "".join(cells[i - 1]["source"])
            if not re.search(rf"^def {re.escape(match.group(2))}\(", stub, re.M):
                continue  # a value, or a function built elsewhere
            statement = "".join(cells[i - 2]["source"])
            found.append((path.stem, match.group(1), match.group(2), statement))
    return found


CASES = checked_functions()


def test_the_scan_finds_the_coding_exercises():
    assert len(CASES) >= 20 and {"my_repeat_kv", "causal_key_blocks"} <= {c[2] for c in CASES}


@pytest.mark.parametrize("chapter, exercise_id, name, statement", CASES, ids=[c[1] for c in CASES])
def test_the_solution_defines_the_checked_function(chapter, exercise_id, name, statement):
    if not registry()[exercise_id].solution_is_code:
        pytest.skip("the solution is prose")
    shown = solution(exercise_id).text
    assert re.search(rf"^def {re.escape(name)}\(", shown, re.M), (chapter, name, shown[:200])
    # the statement asks for the function by the name the cell checks, if it names one
    asked = set(re.findall(r"Write `([A-Za-z_]\w*)\(", statement))
    assert asked <= {name}, (chapter, exercise_id, asked, name)
