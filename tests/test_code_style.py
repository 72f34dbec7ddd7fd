"""No comment dangles after a closing bracket, in the package, the tools, the tests or the chapters.

When a commented line is too long, the formatter breaks it and leaves the comment after the
closing bracket (``)  # (B, L, d_k)``), where it seems to describe the bracket, or wraps a lone
value in brackets to keep its comment beside it (``x = (`` / ``1.0  # why`` / ``)``). A comment
goes on its own line above what it describes. Pragmas (``# fmt: skip``, ``# noqa``, ``# type:``)
stay where their tools read them.
"""

from __future__ import annotations

import io
import json
import re
import tokenize

import pytest
from project_tools import ROOT

PRAGMA = re.compile(r"#\s*(fmt:|noqa|type:|pragma)")
CLOSING_ONLY = re.compile(r"[)\]}]+[:,]?")
LONE_VALUE = re.compile(r"[\w.\"'-]+")


def dangling_comments(source: str) -> list[str]:
    """The lines of ``source`` whose code is only closing brackets, or a lone value that the
    line before opens a bracket for and the line after closes, followed by a comment."""
    lines = source.splitlines()
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT or PRAGMA.match(token.string):
            continue
        row, column = token.start
        code = lines[row - 1][:column].strip()
        wrapped = (
            1 < row < len(lines)
            and LONE_VALUE.fullmatch(code)
            and lines[row - 2].rstrip().endswith("(")
            and lines[row].strip() == ")"
        )
        if CLOSING_ONLY.fullmatch(code) or wrapped:
            found.append(f"{row}: {lines[row - 1].strip()}")
    return found


def _sources():
    for folder in ("attncourse", "tools", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                yield f"{path.relative_to(ROOT).as_posix()} cell {i}", "".join(cell["source"])


def test_no_comment_dangles_after_a_closing_bracket():
    found = [
        f"{where}:{line}" for where, source in _sources() for line in dangling_comments(source)
    ]
    assert not found, "comments after closing brackets (put them above):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("x = f(\n    a\n)  # (B, L, d)\n", ["3: )  # (B, L, d)"]),
        ("if (\n    a\n):  # why\n    pass\n", ["3: ):  # why"]),
        ("# (B, L, d)\nx = f(a)\n", []),
        ("x = f(a)  # (B, L, d)\n", []),
        ("x = {\n    1: 2,\n}  # fmt: skip\n", []),
        ("x = (\n    1.0  # why\n)\n", ["2: 1.0  # why"]),
        ("f(\n    a,  # the first\n    b,\n)\n", []),
    ],
)
def test_the_check_finds_what_the_formatter_leaves(source, expected):
    assert dangling_comments(source) == expected
