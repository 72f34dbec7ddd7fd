"""The built book (``make book``; ``make test`` builds it first when stale), read as HTML.

No chapter writes to stderr: the page would show the reader a warning or a library's log line
(torch's profiler logged its start and stop there) in a box of its own.

Markdown that a cell displays (``display(Markdown(...))``: chapter 10's compile tables and GPU
reports, chapter 11's) must reach the reader as a table, not as lines of pipes: myst-nb parses
it as CommonMark unless told otherwise, and CommonMark has no tables.
"""

import json
import re

import pytest
from helpers import CHAPTERS, ROOT, executed_cells

SITE = ROOT / "_build" / "html"
pytestmark = pytest.mark.slow

# A paragraph that opens with a table row: "<p>| a | b |" (a Markdown table left as text).
RAW_TABLE = re.compile(r"<p>\|[^<\n]*\|")


def _pages() -> list:
    if not (SITE / "index.html").exists():
        pytest.skip("the book is not built (make book)")
    return sorted(SITE.glob("book/*.html")) + sorted(SITE.glob("zh/book/*.html"))


def test_no_page_shows_a_markdown_table_as_text():
    raw = {p.relative_to(SITE).as_posix(): RAW_TABLE.findall(p.read_text(encoding="utf-8"))[:1]
           for p in _pages()}  # fmt: skip
    assert not {page: found for page, found in raw.items() if found}


def test_chapter_10_shows_its_compile_tables_and_gpu_report_as_tables():
    pages = {p.relative_to(SITE).as_posix(): p for p in _pages()}
    for name in ("book/10_gpu_attention.html", "zh/book/10_gpu_attention.html"):
        html = pages[name].read_text(encoding="utf-8")
        tables = html.count("<table")
        reports = len(list((ROOT / "reports" / "gpu").glob("*.json")))
        # two compile tables, and per committed report its summary's tables
        assert tables >= 2 + 3 * reports, (name, tables)


def test_the_check_finds_a_raw_table():
    assert RAW_TABLE.search("<p>| d | causal | pass |\n|---|</p>")
    assert not RAW_TABLE.search("<table><tr><td>| not a paragraph |</td></tr></table>")


def test_the_pages_named_where_no_report_is_found_exist():
    """A runtime without the repository (Colab) is sent to the book's page for the GPU reports:
    each ``page = "book/....html#anchor"`` of a chapter's code names a page and anchor the
    built book has."""
    _pages()
    named = re.compile(r'page = "(book/[\w.-]+\.html)#([\w-]+)"')
    found = []
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])  # a string, or a list of lines
            found += named.findall(source) if cell["cell_type"] == "code" else []
    assert len(found) >= 2, found  # chapters 10 and 11
    for page, anchor in found:
        for edition in (SITE, SITE / "zh"):  # the note names both editions' pages
            html = (edition / page).read_text(encoding="utf-8")
            assert f'id="{anchor}"' in html, (edition, page, anchor)


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_no_chapter_prints_to_stderr(notebook):
    cells = executed_cells(notebook)
    printed = [
        (cell.get("id"), "".join(output.get("text", ""))[:200])
        for cell in cells
        for output in cell.get("outputs", [])
        if output.get("name") == "stderr"
    ]
    assert printed == []
