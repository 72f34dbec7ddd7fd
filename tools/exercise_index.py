"""Write the table of ``book/exercises.md`` from the chapters and the package's registry.

One row per exercise, in book order: the exercise's number (``{numref}`` of its label), the
title the package registers for it (what ``list_exercises()`` prints and ``check`` names), the
identifier its first ``check(...)`` cell uses (the number names and links the chapter). Run it after adding, moving or
renaming an exercise (``python tools/exercise_index.py``); tests/test_reading_aids.py fails
while the page and this table differ. The Chinese edition's table is written from the same rows
with the titles of the grader's Chinese catalogue (``table("zh")``, called by tools/zh_edition.py),
so a new exercise needs no translation of this page.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
PAGE = BOOK / "exercises.md"
HEADERS = {
    "en": "| exercise | title | identifier |\n|---|---|---|\n",
    "zh": "| 练习 | 标题 | 标识符 |\n|---|---|---|\n",
}
TABLE = re.compile(r"^\| exercise \|.*\n\|[-| ]+\|\n(?:\|.*\|\n)*", re.MULTILINE)


def _chapter_text(notebook: Path) -> str:
    return "\n".join("".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"])


def rows(language: str = "en") -> list[tuple[str, str, str, str]]:
    """``(label, title, identifier, chapter)`` of every exercise, in book order, each title in
    ``language`` as ``check()`` shows it (``"zh"``: from the grader's Chinese catalogue)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from attncourse.exercises import get_language, list_exercises, set_language

    spoken = get_language()
    set_language(language)
    try:
        titles = {item["id"]: item["title"] for item in list_exercises()}
    finally:
        set_language(spoken)
    found = []
    for notebook in sorted(BOOK.glob("[0-9][0-9]_*.ipynb")):
        text = _chapter_text(notebook)
        for match in re.finditer(r":label: (ex-[a-z0-9-]+)", text):
            check = re.search(r'check\("([a-z0-9/-]+)"', text[match.end() :])
            if check is None or check.group(1) not in titles:
                raise ValueError(
                    f"{notebook.name}: exercise {match.group(1)} has no registered check(...)"
                    " after it"
                )
            found.append((match.group(1), titles[check.group(1)], check.group(1), notebook.stem))
    return found


def table(language: str = "en") -> str:
    """The Markdown table of the exercise index, in ``language`` (``"zh"``: the Chinese edition's
    table, which tools/zh_edition.py writes from this rather than from a translated catalogue)."""
    lines = []
    for label, title, ident, _chapter in rows(language):
        cell = title.replace("|", "\\|")  # a bar would end the table's cell
        # "Exercise 6.3" names the chapter
        lines.append(f"| {{numref}}`{label}` | {cell} | `{ident}` |")
    return HEADERS[language] + "\n".join(lines) + "\n"


def page() -> str:
    """``book/exercises.md`` with its table replaced by :func:`table`."""
    text = PAGE.read_text()
    if len(TABLE.findall(text)) != 1:
        raise ValueError(f"{PAGE} must hold exactly one exercise table")
    return TABLE.sub(lambda _: table(), text)


if __name__ == "__main__":
    PAGE.write_text(page())
    print(f"{PAGE.relative_to(ROOT)}: {len(rows())} exercises")
