"""The Chinese edition (中文版) stays in step with the English one.

* every unit of every page has a current translation: none missing, none fuzzy (its English
  changed since it was translated), no obsolete entry left in a catalogue;
* a translation keeps the English's math, inline code, labels, references, links and
  directives, has no untranslated English paragraph, and uses the terminology table's one
  rendering of each glossary term (no variant outside the glossary);
* the Chinese notebooks' code is the English code byte for byte, and their outputs are the
  English run's;
* the Chinese Colab edition (notebooks/zh) is in step with the pages and the catalogues.

The checks themselves are tested on hand-made pages and translations, so that they can fail.
"""

from __future__ import annotations

import gettext
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from project_tools import ROOT, tool

zh = tool("zh_edition")
colab = tool("colab_edition")

PAGES = zh.pages()
NOTEBOOKS = [p for p in PAGES if p.suffix == ".ipynb"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_unit_of_the_page_has_a_current_translation(page):
    status = zh.status(page)
    assert not status.missing, f"{page.name}: untranslated units {status.missing}"
    assert not status.fuzzy, (
        f"{page.name}: the English of {status.fuzzy} changed since it was translated"
        " (python tools/zh_edition.py update, then translate the fuzzy entries)"
    )
    assert status.obsolete == 0, f"{page.name}: obsolete entries left in its catalogue"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_translations_keep_the_english_code_math_and_terms(page):
    assert zh.lint(page) == []


def test_every_page_but_the_api_has_a_catalogue():
    catalogues = {p.stem for p in zh.LOCALE.glob("*.po")}
    assert catalogues == {p.stem for p in PAGES}
    assert {p.stem for p in PAGES} | set(zh.UNTRANSLATED_PAGES) == {
        p.stem for p in (ROOT / "book").iterdir() if p.suffix in (".md", ".ipynb")
    }


def test_the_exercise_table_is_written_in_chinese_not_translated():
    """book/exercises.md's table is not a unit of its catalogue: the Chinese page gets the table
    tools/exercise_index.py writes with each title as check() gives it in Chinese, so a new
    exercise needs its title translated once, in the grader's catalogue (issue 32)."""
    page = ROOT / "book" / "exercises.md"
    index = tool("exercise_index")
    assert not any("| exercise |" in unit.text for unit in zh.units(page))
    chinese = zh.chinese_markdown(page)
    table = index.table("zh")
    assert table in chinese and index.table("en") not in chinese
    english_rows = index.rows("en")
    for (label, title, ident, _), (_, zh_title, _, _) in zip(english_rows, index.rows("zh")):
        assert (
            f"| {{numref}}`{label}` | {zh_title.replace('|', chr(92) + '|')} | `{ident}` |" in table
        )
        assert zh_title != title, ident  # every title has its Chinese


def test_the_terminology_table_covers_every_glossary_term():
    colab.configure("en", ROOT, ROOT / "notebooks", "")
    english_terms = set(colab.glossary())
    table = {term.lower() for term, _, _ in zh.terminology()}
    assert english_terms <= table, f"not in terminology.tsv: {sorted(english_terms - table)}"
    renderings = [chinese for _, chinese, _ in zh.terminology()]
    duplicated = {c for c in renderings if renderings.count(c) > 1}
    assert not duplicated, f"one Chinese rendering for two terms: {duplicated}"


def test_the_chinese_glossary_lists_each_terms_rendering_as_a_term():
    text = zh.chinese_markdown(ROOT / "book" / "glossary.md")
    body = re.search(r"^:{3,}\{glossary\}\n(?P<body>.*?)^:{3,}\s*$", text, re.S | re.M)
    entries = re.split(r"\n\s*\n(?=\S)", body.group("body"))
    terms_of = {}
    for entry in entries:
        lines = [x.strip() for x in entry.splitlines() if x and not x[0].isspace()]
        lines = [x for x in lines if not x.startswith(":")]
        for line in lines:
            terms_of[line.lower()] = {x.lower() for x in lines}
    for english, chinese, _ in zh.terminology():
        assert english.lower() in terms_of, f"{english!r} is not a term of the Chinese glossary"
        assert chinese.lower() in terms_of[english.lower()], (
            f"the Chinese glossary's entry for {english!r} does not list {chinese!r} as a term"
        )


@pytest.mark.parametrize("page", NOTEBOOKS, ids=lambda p: p.stem)
def test_chinese_notebooks_run_the_english_code(page):
    english = json.loads(page.read_text(encoding="utf-8"))
    chinese = zh.chinese_notebook(page)
    assert [c["cell_type"] for c in chinese["cells"]] == [c["cell_type"] for c in english["cells"]]
    assert [c.get("id") for c in chinese["cells"]] == [c.get("id") for c in english["cells"]]
    code_en = [zh._source(c) for c in english["cells"] if c["cell_type"] == "code"]
    code_zh = [zh._source(c) for c in chinese["cells"] if c["cell_type"] == "code"]
    # the set-up cell (the first) also chooses Chinese for check(); every other cell is the same
    assert code_en[0].startswith(zh.SETUP_MARKER)
    assert code_zh[0] == zh.chinese_setup(code_en[0])
    code_lines = [line for line in code_zh[0].splitlines() if not line.startswith("#")]
    english_code = [line for line in code_en[0].splitlines() if not line.startswith("#")]
    assert "\n".join(code_lines) == "\n".join(english_code) + zh.SETUP_LANGUAGE.rstrip("\n")
    assert zh.SETUP_COMMENT_ZH.splitlines()[0] in code_zh[0]  # its comment in Chinese too
    assert code_zh[1:] == code_en[1:]
    assert chinese["metadata"] == english["metadata"]
    translated = [
        c for c in chinese["cells"] if c["cell_type"] == "markdown" and zh.has_words(zh._source(c))
    ]
    assert all(zh._CJK.search(zh._source(c)) for c in translated)


def _tiny_book(tmp_path, monkeypatch, markdown: str):
    """A book of one notebook under tmp_path, the tool pointed at it."""
    book = tmp_path / "book"
    book.mkdir()
    cells = [
        {"cell_type": "code", "id": "setup", "metadata": {}, "source": "import os", "outputs": []},
        {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": markdown},
        {
            "cell_type": "code",
            "id": "c1",
            "metadata": {"mystnb": {"figure": {"caption": "The weights of one head."}}},
            "source": "print(1)",
            "outputs": [],
            "execution_count": None,
        },
    ]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    page = book / "01_tiny.ipynb"
    page.write_text(json.dumps(notebook))
    monkeypatch.setattr(zh, "BOOK", book)
    monkeypatch.setattr(zh, "LOCALE", tmp_path / "locale")
    return page, notebook


def test_a_changed_english_cell_makes_its_translation_stale(tmp_path, monkeypatch):
    page, notebook = _tiny_book(tmp_path, monkeypatch, "The mask hides the future keys.")
    zh.update(page)
    catalog = zh.load(page)
    for message in catalog:
        if message.id == "The mask hides the future keys.":
            message.string = "掩码隐藏未来的键。"
        elif message.id == "The weights of one head.":
            message.string = "一个注意力头的权重。"
    zh.save(page, catalog)
    assert zh.status(page).missing == [] and zh.status(page).fuzzy == []
    assert zh.chinese_notebook(page)["cells"][1]["source"] == "掩码隐藏未来的键。"

    notebook["cells"][1]["source"] = "The mask hides the future keys and the pads."
    page.write_text(json.dumps(notebook))
    with pytest.raises(zh.Untranslated):
        zh.chinese_notebook(page)
    zh.update(page)
    status = zh.status(page)
    assert status.fuzzy == ["cell m1"], status  # kept, marked fuzzy, with the old English
    text = zh.catalogue_path(page).read_text(encoding="utf-8")
    assert '#| msgid "The mask hides the future keys."' in text  # what the translator sees


def test_the_old_english_of_a_long_unit_survives_updates_without_leftover_comments(
    tmp_path, monkeypatch
):
    old = "The mask hides the future keys.\n\nIt is causal."
    page, notebook = _tiny_book(tmp_path, monkeypatch, old)
    zh.update(page)
    catalog = zh.load(page)
    for message in catalog:
        if message.id:
            message.string = "译文。"
    zh.save(page, catalog)
    notebook["cells"][1]["source"] = (
        "The mask hides the future keys.\n\nIt is causal, bottom-right."
    )
    page.write_text(json.dumps(notebook))
    for _ in range(3):  # each update reads the catalogue back and writes it again
        zh.update(page)
        assert zh.status(page).fuzzy == ["cell m1"]
        (changed,) = [m for m in zh.load(page) if m.fuzzy]
        assert changed.previous_id == [old] and changed.user_comments == []
        text = zh.catalogue_path(page).read_text(encoding="utf-8")
        # Babel's reader took its own one-line previous msgid for a comment, written back as
        # "# | msgid ..." and, wrapped, fragments of the old English (issue 32's fourth pass)
        assert not [line for line in text.splitlines()[4:] if line.startswith("# ")], text


def test_a_new_english_cell_is_missing_until_translated(tmp_path, monkeypatch):
    page, notebook = _tiny_book(tmp_path, monkeypatch, "One cell.")
    notebook["cells"].append(
        {"cell_type": "markdown", "id": "m2", "metadata": {}, "source": "A second cell of prose."}
    )
    page.write_text(json.dumps(notebook))
    zh.update(page)
    assert zh.status(page).missing == ["cell m1", "cell c1", "cell m2"]


def test_outputs_come_from_the_english_run_with_chinese_renderings_swapped_in(
    tmp_path, monkeypatch
):
    page, notebook = _tiny_book(tmp_path, monkeypatch, "Words here.")
    executed = json.loads(json.dumps(notebook))
    executed["cells"][2]["outputs"] = [
        {
            "output_type": "execute_result",
            "execution_count": 1,
            "data": {"text/plain": "passed", "text/html": "<b>passed</b>"},
            "metadata": {"attncourse": {"zh": {"text/plain": "通过", "text/html": "<b>通过</b>"}}},
        },
        {"output_type": "stream", "name": "stdout", "text": "1\n"},
    ]
    path = tmp_path / "run" / "book" / page.name
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(executed))
    chinese = zh.chinese_notebook(page, path, strict=False)
    outputs = chinese["cells"][2]["outputs"]
    assert outputs[0]["data"] == {"text/plain": "通过", "text/html": "<b>通过</b>"}
    assert outputs[1] == {"output_type": "stream", "name": "stdout", "text": "1\n"}

    executed["cells"][2]["source"] = "print(2)"  # not a run of this page
    path.write_text(json.dumps(executed))
    with pytest.raises(ValueError, match="executed code differs"):
        zh.chinese_notebook(page, path, strict=False)


COLAB = "https://colab.research.google.com/github/attncourse/attncourse/blob/main/notebooks"


@pytest.mark.parametrize(
    "english, chinese, problem",
    [
        ("The scores $QK^\\top$ are scaled.", "分数被缩放。", "math differs"),
        ("Call `causal_mask(5)` first.", "先调用 `causal_mask(4)`。", "inline code differs"),
        ("See {numref}`fig-a`.", "见 {numref}`fig-b`。", "references"),
        ("A {term}`key` matches.", "一个{term}`键 <value>`匹配。", "{term} targets differ"),
        ("A {term}`key` matches.", "一个{term}`key`匹配。", "should read '键'"),
        (
            "The padding mask hides the pads.",
            "这个 mask 把 pads 隐藏起来。",
            "'padding mask' is rendered",
        ),
        ("The dot product of q and k.", "q 与 k 的点乘。", "'点乘' is a variant"),
        (
            "The mask keeps the lower triangle of the scores.",
            "掩码 keeps the lower triangle of the scores.",
            "untranslated English",
        ),
        ("Only math: $a$ and words.", "$a$", "no Chinese"),
        (  # a formula's words may be Chinese, but not other English words
            "It takes $\\text{cache bytes} = 2 \\cdot \\text{layers}$ bytes.",
            "它占 $\\text{cache size} = 2 \\cdot \\text{层数}$ 字节。",
            "neither its word nor Chinese",
        ),
        (
            "It takes $2 \\cdot \\text{layers}$ bytes.",
            "它占 $3 \\cdot \\text{层数}$ 字节。",
            "math differs",
        ),
        ("[the site](https://a.example/x)", "[网站](https://a.example/y)", "link targets"),
        (  # the Chinese page opens the Chinese Colab edition, not the English one
            f"[open in Colab]({COLAB}/01_x.ipynb)",
            f"[在 Colab 中打开]({COLAB}/01_x.ipynb)",
            "a Colab link opens the English edition",
        ),
        (
            f"[open in Colab]({COLAB}/01_x.ipynb)",
            f"[在 Colab 中打开]({COLAB}/zh/02_x.ipynb)",
            "link targets",
        ),
        (  # a fenced code block must come through as it is
            "Run this:\n\n```python\nx = 1\n```",
            "运行它：\n\n```python\nx = 2\n```",
            "a code block differs",
        ),
        ("(sec-a)=\n## The masks", "## 掩码", "label differs"),
        (
            "A note.\n\n:::{note}\nMasks matter.\n:::",
            "一条说明。\n\n掩码很重要。",
            "directives differ",
        ),
        (
            "See {doc}`chapter 3 <03_masking>`.",
            "见{doc}`第 3 章 <04_cross_attention>`。",
            "{doc} targets differ",
        ),
        (  # ** glued to a Chinese character and opening on a role: printed as asterisks
            "Their answer is the **{term}`all-attention` layer**: no FFN.",
            "他们的答案是**{term}`纯注意力 <all-attention>`层**：去掉 FFN。",
            "bold/italic that renders in the English does not",
        ),
    ],
)
def test_the_checks_catch_a_bad_translation(english, chinese, problem):
    assert any(problem in p for p in zh.problems(english, chinese)), zh.problems(english, chinese)


def test_the_checks_accept_a_good_translation():
    english = (
        "The {term}`padding mask` of {numref}`fig-a` hides the pads: `keep[:, None, :]` is "
        "$(B, 1, S)$ ({doc}`chapter 3 <03_masking>`, [torch](https://pytorch.org), "
        f"[Colab]({COLAB}/03_masking.ipynb))."
    )
    chinese = (
        "{numref}`fig-a` 中的{term}`填充掩码 <padding mask>`隐藏填充位置：`keep[:, None, :]` 的形状是"
        " $(B, 1, S)$（{doc}`第 3 章 <03_masking>`，[torch](https://pytorch.org)，"
        f"[Colab]({COLAB}/zh/03_masking.ipynb)）。"
    )
    assert zh.problems(english, chinese) == []


def test_the_words_of_a_formula_may_be_chinese():
    english = "The cache takes $2 \\cdot \\text{layers} \\cdot d_\\text{model}$ bytes."
    chinese = "缓存占 $2 \\cdot \\text{层数} \\cdot d_\\text{model}$ 字节。"
    assert zh.problems(english, chinese) == []


def test_the_chinese_colab_edition_is_in_step_and_its_sources_leave_no_trace(tmp_path):
    """``python tools/colab_edition.py --lang zh --check`` passes (else: ``make colab``), and the
    temporary sources it generates are removed when it ends (until 2026-11-28 every run left
    1.3 MB in the temporary folder)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "colab_edition.py"), "--lang", "zh", "--check"],
        capture_output=True,
        text=True,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    assert run.returncode == 0, run.stdout + run.stderr  # run: make colab
    assert list(tmp_path.iterdir()) == []


CHINESE_COLAB = sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))


@pytest.mark.parametrize("path", CHINESE_COLAB, ids=lambda p: p.stem)
def test_chinese_colab_notebooks_read_as_commonmark_and_run_the_books_code(path):
    from test_colab_edition import first_screen_problems, markdown_problems, myst_fragments

    nb = json.loads(path.read_text(encoding="utf-8"))
    english = json.loads((ROOT / "book" / path.name).read_text(encoding="utf-8"))
    assert markdown_problems(nb) == [] and myst_fragments(nb) == 0
    code = [c["source"] for c in nb["cells"] if c["cell_type"] == "code"]
    code_en = [zh._source(c) for c in english["cells"] if c["cell_type"] == "code"]
    form = f"#@title {colab.WORDS['zh']['setup title']}\n"
    assert code[0] == form + zh.chinese_setup(code_en[0]) and code[1:] == code_en[1:]
    switch = "更改运行时类型（Change runtime type）> T4 GPU" if colab.needs_gpu(english) else ""
    assert first_screen_problems(nb, title=form, gpu_words=switch) == []
    text = "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "markdown")
    starts = sum(zh._source(c).count("{exercise-start}") for c in english["cells"])
    assert len(re.findall(r"^### 练习 \d+\.\d+", text, re.M)) == starts
    figures = sum(1 for c in english["cells"] if c["metadata"].get("mystnb", {}).get("figure"))
    assert len(re.findall(r"^\*\*图 \d+\.\d+\*\* \S", text, re.M)) == figures
    assert f"/zh/book/{path.stem}.html" in text  # the banner links the Chinese page
    assert zh._CJK.search(text)


def test_the_chinese_sources_build_configuration(tmp_path):
    zh.write_sources(tmp_path / "src")
    import yaml

    config = yaml.safe_load((tmp_path / "src" / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["config"]["language"] == "zh_CN"
    assert config["execute"]["execute_notebooks"] == "off"
    assert config["html"]["baseurl"].endswith("/zh/")
    toc = (tmp_path / "src" / "_toc.yml").read_text(encoding="utf-8")
    assert "章节" in toc and "Chapters" not in toc
    assert "API 参考" in toc  # the English API page's title in the navigation
    # the search index splits Chinese into words with jieba, the course's terms kept whole
    sphinx = config["sphinx"]["config"]
    assert sphinx["html_search_language"] == "zh"
    words = Path(sphinx["html_search_options"]["dict"])
    assert words.is_file() and "因果掩码" in words.read_text(encoding="utf-8").split()
    # Sphinx's and the themes' strings in Simplified Chinese, from book/locale/zh_CN/theme
    messages = tmp_path / "src" / sphinx["locale_dirs"][0] / "zh_CN" / "LC_MESSAGES"
    assert {p.name for p in messages.glob("*.mo")} == {"sphinx.mo", "booktheme.mo"}
    with (messages / "booktheme.mo").open("rb") as handle:
        assert gettext.GNUTranslations(handle).gettext("Print to PDF") == "打印为 PDF"
    assert (tmp_path / "src" / "tools" / "book_templates" / "toggle-primary-sidebar.html").is_file()
    # the references page lists the source texts with their notes, in Chinese; the papers'
    # notes (figures and identifiers) and every other field stay as in the English bib
    bib = (tmp_path / "src" / "book" / "references.bib").read_text(encoding="utf-8")
    english = (zh.BOOK / "references.bib").read_text(encoding="utf-8")
    notes = zh.bib_notes()
    assert len(notes) == 5 and all(n.text not in bib for n in notes)
    assert "网络文章" in bib and "arXiv:2307.08691" in bib
    assert len(bib.splitlines()) == len(english.splitlines())
    assert (tmp_path / "src" / "book" / "api.md").read_text() == (
        ROOT / "book" / "api.md"
    ).read_text()


def test_the_chinese_glossary_names_every_avoided_rendering():
    """terminology.tsv's third column lists the words this edition does not use outside the
    glossary (跨度, 全注意力, 词元, ...): the Chinese glossary names each, so that a reader who
    knows the word from the sources or from other books finds this edition's."""
    text = zh.chinese_markdown(ROOT / "book" / "glossary.md")
    missing = [(e, v) for e, _, avoid in zh.terminology() for v in avoid if v not in text]
    assert not missing, f"avoided words the Chinese glossary does not name: {missing}"


def test_the_chinese_search_indexer_gives_sphinxs_words_and_stems():
    """The Chinese edition's search indexer (tools/book_fixes.py: Sphinx's, with its Latin words
    in a set instead of a list) splits and stems a mixed sentence as Sphinx's own does."""
    from sphinx.search import zh as sphinx_zh

    ours = tool("book_fixes").chinese_search()({})
    theirs = sphinx_zh.SearchChinese({})
    text = "多头注意力把 its queries 和 keys 分给 GPU 上的 FlashAttention，RoPE 与 KV cache 也一样"
    words = theirs.split(text)
    assert ours.split(text) == words and "FlashAttention" in words
    assert [ours.stem(w) for w in words] == [theirs.stem(w) for w in words]
    # a Latin word whose stem is shorter than 3 letters is kept whole, as in Sphinx
    assert ours.stem("its") == theirs.stem("its") == "its"
