"""The book's reference pages stay in step with the chapters and the package.

The glossary, the exercise index, the errata and the references are hand-written pages; these
tests fail when a chapter or the package changes and a page is not updated with it. (Sphinx,
run with ``-W -n`` by ``make book``, separately fails on any term, label or citation that does
not resolve.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from project_tools import exercise_index

from attncourse.exercises import list_exercises

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))  # 01 .. 10
CJK = re.compile(r"[\u4e00-\u9fff]")
# (label, identifier, chapter) of every row of the exercise index
_CHAPTER_OF = {label: chapter for label, _, _, chapter in exercise_index.rows()}
EXERCISE_ROWS = [
    (label, ident, _CHAPTER_OF.get(label, "?"))
    for label, ident in re.findall(
        r"^\| \{numref\}`(ex-[a-z0-9-]+)` \| .+ \| `([a-z0-9/-]+)` \|$",
        (BOOK / "exercises.md").read_text(),
        flags=re.MULTILINE,
    )
]


def markdown_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown"]


def notebook_text(notebook: Path) -> str:
    return "\n".join("".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"])


def glossary_entries() -> dict[str, str]:
    """``{term: definition}`` for every term line of the glossary directive (synonyms share one)."""
    text = (BOOK / "glossary.md").read_text()
    body = text[text.index(":::{glossary}") :]
    body = body[body.index("\n", body.index(":sorted:")) + 1 : body.rindex(":::")]
    entries, terms = {}, []
    for block in re.split(r"\n\s*\n", body.strip()):
        lines = block.splitlines()
        terms = [line for line in lines if line and not line.startswith(" ")]
        definition = " ".join(line.strip() for line in lines if line.startswith(" "))
        for term in terms:
            entries[term] = definition
    return entries


def test_exercise_index_lists_every_exercise_of_the_package_in_book_order():
    rows = EXERCISE_ROWS
    assert sorted(ident for _, ident, _ in rows) == sorted(item["id"] for item in list_exercises())
    book_order = []
    for notebook in CHAPTERS:
        text = notebook_text(notebook)
        book_order += [
            (label, notebook.stem) for label in re.findall(r":label: (ex-[a-z0-9-]+)", text)
        ]
    assert [(label, chapter) for label, _, chapter in rows] == book_order


def test_exercise_index_gives_each_exercise_its_registered_title():
    """The page's table is the one tools/exercise_index.py writes: number, title, identifier, chapter."""
    titles = {item["id"]: item["title"] for item in list_exercises()}
    table_rows = re.findall(
        r"^\| \{numref\}`ex-[a-z0-9-]+` \| (.+) \| `([a-z0-9/-]+)` \|",
        (BOOK / "exercises.md").read_text(),
        flags=re.MULTILINE,
    )
    assert len(table_rows) == len(titles)
    assert all(title == titles[ident].replace("|", "\\|") for title, ident in table_rows)
    assert (BOOK / "exercises.md").read_text() == exercise_index.page(), (
        "run: python tools/exercise_index.py"
    )


@pytest.mark.parametrize("label, ident, chapter", EXERCISE_ROWS)
def test_each_indexed_exercise_is_checked_under_its_identifier(label, ident, chapter):
    text = notebook_text(BOOK / f"{chapter}.ipynb")
    after_label = text[text.index(f":label: {label}") :]
    first_check = re.search(r'check\("([a-z0-9/-]+)"', after_label)
    assert first_check and first_check.group(1) == ident


def test_glossary_gives_the_chinese_of_every_term_or_says_why_not():
    entries = glossary_entries()
    assert len(entries) >= 40
    without_chinese = {term for term, definition in entries.items() if not CJK.search(definition)}
    # the sources keep these in English or never name them (the entries say so)
    assert without_chinese <= {"token", "ramp", "FLOPs"}, without_chinese


@pytest.mark.parametrize(
    "term, chinese",
    [
        ("query", "查询"),
        ("key", "键"),
        ("value", "值"),
        ("mask", "掩码"),
        ("multi-head attention", "多头注意力"),
        ("self-attention", "自注意力"),
        ("cross-attention", "交叉注意力"),
        ("padding mask", "句长补全掩码"),
        ("future mask", "未来信息掩码"),
        ("scaled dot-product attention", "缩放的点乘注意力"),
        ("adaptive attention span", "自適應注意力範圍"),
        ("all-attention", "純注意力架構"),
        ("position-wise feed-forward network", "位置前饋網路"),
    ],
)
def test_glossary_uses_the_words_of_the_sources(term, chinese):
    assert chinese in glossary_entries()[term]


def test_every_chapter_links_to_the_glossary_and_cites_its_sources():
    for notebook in CHAPTERS:
        text = "\n".join(markdown_cells(notebook))
        assert len(re.findall(r"\{term\}`", text)) >= 3, (
            f"{notebook.name} links fewer than 3 glossary terms"
        )
        assert "{cite" in text, f"{notebook.name} cites nothing"


def test_every_reference_is_cited_somewhere():
    keys = re.findall(r"^@\w+\{([^,]+),", (BOOK / "references.bib").read_text(), flags=re.MULTILINE)
    cited = set()
    for page in list(BOOK.glob("*.md")) + CHAPTERS:
        text = notebook_text(page) if page.suffix == ".ipynb" else page.read_text()
        for group in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", text):
            cited.update(key.strip() for key in group.split(","))
    assert cited <= set(keys), cited - set(keys)
    assert set(keys) <= cited, f"never cited: {sorted(set(keys) - cited)}"


def test_errata_page_links_every_errata_section_of_the_chapters():
    errata = (BOOK / "errata.md").read_text()
    for notebook in CHAPTERS:
        for cell in markdown_cells(notebook):
            heading = re.search(r"^#+ Errata.*$", cell, flags=re.MULTILINE)
            if heading:
                label = re.search(r"^\(([a-z0-9-]+)\)=\s*\n#+ Errata", cell, flags=re.MULTILINE)
                assert label, f"{notebook.name}: '{heading.group(0)}' has no label"
                assert f"{{ref}}`{label.group(1)}`" in errata, (
                    f"errata page does not link {label.group(1)}"
                )


def test_notation_page_defines_the_symbols_of_the_course():
    notation = (BOOK / "notation.md").read_text()
    for symbol in [
        "$L$",
        "$S$",
        "$d_\\text{model}$",
        "$d_k$",
        "$d_v$",
        "$h$",
        "$R$",
        "$z$",
        "$N$",
        "$B$",
    ]:
        assert f"| {symbol} |" in notation, symbol
