"""The Chinese edition (中文版): translations kept as gettext catalogues, pages generated from them.

Every page of the book has a catalogue ``book/locale/zh_CN/LC_MESSAGES/<page>.po`` (the API page
stays English: it is generated from the docstrings). Its entries are the page's translatable
units, each the English text as ``msgid`` and its translation as ``msgstr``:

* a notebook's Markdown cell, whole (context ``markdown``);
* a figure's caption and its image's alt text from a code cell's metadata (contexts
  ``caption`` and ``alt``); the code cells themselves are never translated;
* a Markdown page's blocks, the text between blank lines (a fenced code block is one block, and
  is not translated).

Units without words (an ``exercise-end`` marker, a bare label) are copied as they are. A block a
tool writes is written again in Chinese by that tool, not translated: the table of
``book/exercises.md`` (tools/exercise_index.py, with the titles of the grader's catalogue).

Commands::

    python tools/zh_edition.py update      # catalogues follow the English (new units added empty,
                                           # changed ones kept as fuzzy with the old English)
    python tools/zh_edition.py status      # per page: units, translated, missing, fuzzy, obsolete
    python tools/zh_edition.py sources OUT [--executed DIR]
                                           # the Chinese book's sources under OUT

``update`` is gettext's ``msgmerge`` done with babel (a translator's tools, such as Poedit or
Weblate, read and write the same files). tests/test_zh_edition.py fails when a catalogue falls
behind its page.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, unescape, write_po

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
LOCALE = BOOK / "locale" / "zh_CN" / "LC_MESSAGES"
TOOLS = ROOT / "tools"
LANGUAGE = "zh_CN"
#: Pages that stay English in the Chinese edition (generated from docstrings).
UNTRANSLATED_PAGES = ("api",)

_FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})")
_CODE_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(python|py|bash|console|text|sh)?\s*$")


@dataclass(frozen=True)
class Unit:
    """One translatable piece of a page: its English text, its context and where it is."""

    text: str
    context: str  # "markdown", "caption", "alt", "block"
    where: str  # "cell <id>" or "line <n>"


def pages() -> List[Path]:
    """The book's pages with a Chinese edition, in the table of contents' order of folders."""
    found = sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md"))
    return [p for p in found if p.stem not in UNTRANSLATED_PAGES]


def has_words(text: str) -> bool:
    """Whether ``text`` has prose to translate (outside code, math, labels and MyST syntax)."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]*\$", " ", text)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"^\([\w-]+\)=\s*$", " ", text, flags=re.M)  # labels
    text = re.sub(r"^\s*:[\w-]+:.*$", " ", text, flags=re.M)  # directive options
    text = re.sub(r"\{[\w:-]+\}", " ", text)  # role and directive names
    return re.search(r"[A-Za-z]{2,}", text) is not None


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def notebook_units(path: Path) -> Iterator[Unit]:
    """The translatable units of a chapter notebook, in order."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        where = f"cell {cell.get('id', '?')}"
        if cell["cell_type"] == "markdown":
            text = _source(cell)
            if has_words(text):
                yield Unit(text, "markdown", where)
        elif cell["cell_type"] == "code":
            meta = cell.get("metadata", {})
            caption = meta.get("mystnb", {}).get("figure", {}).get("caption")
            if caption and has_words(caption):
                yield Unit(caption, "caption", where)
            alt = meta.get("mystnb", {}).get("image", {}).get("alt")
            if alt and has_words(alt):
                yield Unit(alt, "alt", where)


def markdown_blocks(text: str) -> List[str]:
    """A Markdown page split at blank lines, a fenced code block kept whole."""
    blocks, current, fence = [], [], None
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None:
            match = _CODE_FENCE.match(stripped)
            if match:
                fence = match.group(1)
        elif stripped == fence:
            fence = None
            current.append(line)
            continue
        if fence is None and stripped == "" and current:
            blocks.append("\n".join(current))
            current = []
        elif fence is not None or stripped != "":
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _is_code_block(block: str) -> bool:
    return _CODE_FENCE.match(block.split("\n", 1)[0].strip()) is not None


def generated_block(page: Path, block: str) -> Optional[str]:
    """The Chinese of a block that a tool writes (``book/exercises.md``'s table of exercises, from
    the grader's Chinese titles), or ``None`` for a block translated in the catalogue."""
    if page.name != "exercises.md":
        return None
    if str(TOOLS) not in sys.path:
        sys.path.append(str(TOOLS))
    import exercise_index

    if not exercise_index.TABLE.fullmatch(block + "\n"):
        return None
    return exercise_index.table("zh").rstrip("\n")


def markdown_units(path: Path) -> Iterator[Unit]:
    """The translatable units of a Markdown page, in order."""
    text = path.read_text(encoding="utf-8")
    line = 1
    for block in markdown_blocks(text):
        where = f"line {text.count(chr(10), 0, text.find(block)) + 1}" if block else f"line {line}"
        if not _is_code_block(block) and has_words(block) and not generated_block(path, block):
            yield Unit(block, "block", where)


#: A ``note`` field of references.bib, on one line (``note = {...},``).
_BIB_NOTE = re.compile(r"^\s*note\s*=\s*\{(.*)\},?\s*$", re.M)


def bib_notes() -> List[Unit]:
    """The notes of the source texts' entries (``keywords = {source}``) in references.bib: the
    references page shows them as prose, so they are translated with the page (context
    ``bibnote``). The papers' notes are figures and identifiers, and stay as they are."""
    text = (BOOK / "references.bib").read_text(encoding="utf-8")
    found = []
    for entry in re.split(r"\n(?=@)", text):
        if re.search(r"keywords\s*=\s*\{[^}]*\bsource\b", entry):
            note = _BIB_NOTE.search(entry)
            if note:
                line = text.count("\n", 0, text.find(note.group(0))) + 1
                found.append(Unit(note.group(1), "bibnote", f"references.bib line {line}"))
    return found


def units(path: Path) -> List[Unit]:
    if path.suffix == ".ipynb":
        return list(notebook_units(path))
    return list(markdown_units(path)) + (bib_notes() if path.name == "references.md" else [])


def chinese_bib(strict: bool = True) -> str:
    """references.bib with the source texts' notes in Chinese (:func:`bib_notes`)."""
    text = (BOOK / "references.bib").read_text(encoding="utf-8")
    table = translations(BOOK / "references.md")
    for unit in bib_notes():
        chinese = _translate(table, unit.context, unit.text, unit.where, strict)
        text = text.replace("{" + unit.text + "}", "{" + chinese + "}")
    return text


def catalogue_path(page: Path) -> Path:
    return LOCALE / f"{page.stem}.po"


def template(page: Path) -> Catalog:
    """The page's units as an empty catalogue (what ``xgettext`` would write)."""
    catalog = Catalog(locale=LANGUAGE, project="attncourse", fuzzy=False)
    for unit in units(page):
        catalog.add(
            unit.text,
            context=unit.context,
            locations=[(f"book/{page.name}", 0)],
            auto_comments=[unit.where],
        )
    return catalog


def load(page: Path) -> Optional[Catalog]:
    path = catalogue_path(page)
    if not path.exists():
        return None
    with path.open("rb") as handle:
        catalog = read_po(handle, locale=LANGUAGE)
    for message in catalog:
        _recover_previous(message)
    return catalog


_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _recover_previous(message) -> None:
    """The old English of a fuzzy unit, as Babel wrote it, read back.

    Babel (2.18) writes a previous msgid of several lines on one ``#| msgid "" "..." "..."``
    line, which its own reader then takes for a translator's comment ``| msgid ...``: written
    again, it became comment lines that piled up in the catalogues (``# | ...`` and, wrapped,
    fragments of the old English). The tools write no translator comment, so any comment is
    such a leftover: a ``| msgid`` one is the previous msgid again, the rest is dropped.
    """
    for comment in message.user_comments:
        if comment.startswith("| msgid "):
            message.previous_id = ["".join(unescape(f'"{s}"') for s in _QUOTED.findall(comment))]
    message.user_comments = []


def save(page: Path, catalog: Catalog) -> None:
    path = catalogue_path(page)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        write_po(handle, catalog, width=0, omit_header=False, include_previous=True)


def update(page: Path) -> Catalog:
    """The page's catalogue merged with its current English (gettext's msgmerge)."""
    fresh = template(page)
    catalog = load(page)
    if catalog is None:
        catalog = Catalog(locale=LANGUAGE, project="attncourse", fuzzy=False)
    created = catalog.creation_date  # kept: a merge that changes nothing leaves the file as it was
    # Babel's merge keeps a still-fuzzy unit's flag but not its old English: kept here
    previous = {(m.id, m.context): m.previous_id for m in catalog if m.fuzzy and m.previous_id}
    catalog.update(fresh, no_fuzzy_matching=False, update_header_comment=False)
    for message in catalog:
        if message.fuzzy and not message.previous_id:
            message.previous_id = previous.get((message.id, message.context), [])
    catalog.creation_date = created
    catalog.fuzzy = False
    save(page, catalog)
    return catalog


@dataclass
class Status:
    page: str
    units: int
    translated: int
    missing: List[str]
    fuzzy: List[str]
    obsolete: int


def status(page: Path) -> Status:
    """How far the page's catalogue is behind its English."""
    catalog = load(page) or Catalog(locale=LANGUAGE)
    todo = units(page)
    missing, fuzzy, translated = [], [], 0
    for unit in todo:
        message = catalog.get(unit.text, context=unit.context)
        if message is None or not message.string:
            missing.append(unit.where)
        elif message.fuzzy:
            fuzzy.append(unit.where)
        else:
            translated += 1
    return Status(page.name, len(todo), translated, missing, fuzzy, len(catalog.obsolete))


def translations(page: Path) -> Dict[tuple, str]:
    """(context, English) -> Chinese for the page's translated, current units."""
    catalog = load(page)
    if catalog is None:
        return {}
    return {
        (m.context, m.id): m.string
        for m in catalog
        if m.id and m.string and not m.fuzzy and isinstance(m.id, str)
    }


# -- the Chinese book's sources ---------------------------------------------------------------

#: The site's own words outside the pages: the book's title and the table of contents' captions.
SITE_WORDS = {
    "Attention, explained and tested": "注意力机制：讲解与检验",
    "Chapters": "章节",
    "Reference": "参考资料",
    "API reference": "API 参考",  # the title of the (English) API page in the navigation
}
#: The catalogues of the site's frame (Sphinx's and the themes' strings), compiled into the
#: Chinese sources' ``locale`` folder (tools/book_fixes.py says how they are read).
THEME_CATALOGUES = BOOK / "locale" / "zh_CN" / "theme"
#: The Chinese sources' word list for the search index: jieba (Sphinx's Chinese word splitter)
#: keeps each term of the terminology whole (因果掩码, not 因果 + 掩码) besides its parts.
SEARCH_WORDS = "search_words.txt"


def search_words() -> List[str]:
    """The Chinese terms of ``terminology.tsv`` that are Chinese characters only, one a line."""
    terms = []
    for line in TERMINOLOGY.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        term = line.split("\t")[1].strip()
        if re.fullmatch(r"[\u4e00-\u9fff]{2,}", term) and term not in terms:
            terms.append(term)
    return terms


def write_theme_catalogues(out: Path) -> None:
    """``out/locale/zh_CN/LC_MESSAGES/<domain>.mo`` from ``THEME_CATALOGUES/<domain>.po``."""
    from babel.messages.mofile import write_mo

    target = out / "locale" / LANGUAGE / "LC_MESSAGES"
    target.mkdir(parents=True, exist_ok=True)
    for po in sorted(THEME_CATALOGUES.glob("*.po")):
        with po.open("rb") as handle:
            catalog = read_po(handle, locale=LANGUAGE)
        with (target / f"{po.stem}.mo").open("wb") as handle:
            write_mo(handle, catalog)


class Untranslated(Exception):
    """A unit of a page has no current translation."""


def _translate(table: Dict[tuple, str], context: str, text: str, where: str, strict: bool) -> str:
    found = table.get((context, text))
    if found is None:
        if strict:
            raise Untranslated(f"{where}: no current translation ({context}): {text[:60]!r}")
        return text
    return found


def _swap_outputs(cell: dict) -> None:
    """Outputs the English run rendered in Chinese as well (``check``, ``hint``,
    ``solution`` under ATTNCOURSE_EXTRA_LANGUAGES): the Chinese rendering replaces the English."""
    for output in cell.get("outputs", []):
        zh = output.get("metadata", {}).get("attncourse", {}).get("zh")
        if zh:
            output["data"] = {**output.get("data", {}), **zh}


#: The first line of the set-up cell (tools/normalize_notebooks.py writes it).
SETUP_MARKER = "# Set-up for Colab or any fresh runtime"
#: What the Chinese notebooks' set-up cell adds to the English one, the only code that differs
#: between the editions: check(), hint() and solution() answer in Chinese.
SETUP_LANGUAGE = (
    "\n\nfrom attncourse.exercises import set_language\n\n"
    'set_language("zh")  # check()、hint() 和 solution() 用中文作答'
)


#: The set-up cell's opening comment in Chinese, after the English one (whose first line marks
#: the cell for the tools).
SETUP_COMMENT_ZH = (
    "# 在 Colab 或任何全新的运行环境中设置：只在缺少课程包时安装它。要从别处安装\n"
    "# （一个 fork、一个本地副本），把 ATTNCOURSE_INSTALL_URL 设为一个 pip URL。\n"
)


def chinese_setup(source: str) -> str:
    """The Chinese edition's set-up cell: the English one with its opening comment also in
    Chinese, then the language chosen."""
    lines = source.rstrip("\n").splitlines(keepends=True)
    comment = 0
    while comment < len(lines) and lines[comment].startswith("#"):
        comment += 1
    return "".join(lines[:comment] + [SETUP_COMMENT_ZH] + lines[comment:]) + SETUP_LANGUAGE


def chinese_notebook(page: Path, executed: Optional[Path] = None, strict: bool = True) -> dict:
    """The Chinese notebook of ``page``: the English cells (with the outputs of the executed
    copy when given), Markdown, captions and alt texts translated, every code cell byte for
    byte but the set-up cell, which also chooses Chinese for ``check`` (:func:`chinese_setup`)."""
    source = json.loads(page.read_text(encoding="utf-8"))
    notebook = json.loads(executed.read_text(encoding="utf-8")) if executed else source
    table = translations(page)
    if [c.get("id") for c in notebook["cells"]] != [c.get("id") for c in source["cells"]]:
        raise ValueError(f"{executed} is not an execution of {page}: its cells differ")
    for cell, original in zip(notebook["cells"], source["cells"]):
        where = f"{page.name} cell {cell.get('id', '?')}"
        if cell["cell_type"] == "markdown":
            text = _source(original)
            if has_words(text):
                cell["source"] = _translate(table, "markdown", text, where, strict)
            continue
        if cell["cell_type"] != "code":
            continue
        if _source(cell) != _source(original):
            raise ValueError(f"{where}: the executed code differs from the page's")
        meta = cell.get("metadata", {})
        figure = meta.get("mystnb", {}).get("figure", {})
        if figure.get("caption") and has_words(figure["caption"]):
            figure["caption"] = _translate(table, "caption", figure["caption"], where, strict)
        image = meta.get("mystnb", {}).get("image", {})
        if image.get("alt") and has_words(image["alt"]):
            image["alt"] = _translate(table, "alt", image["alt"], where, strict)
        if _source(cell).startswith(SETUP_MARKER):
            cell["source"] = chinese_setup(_source(cell))
        _swap_outputs(cell)
    return notebook


def chinese_markdown(page: Path, strict: bool = True) -> str:
    """The Chinese text of a Markdown page: each block translated, code blocks as they are."""
    table = translations(page)
    out = []
    for block in markdown_blocks(page.read_text(encoding="utf-8")):
        if _is_code_block(block) or not has_words(block):
            out.append(block)
        elif generated := generated_block(page, block):
            out.append(generated)
        else:
            out.append(_translate(table, "block", block, page.name, strict))
    return "\n\n".join(out) + "\n"


def write_sources(out: Path, executed: Optional[Path] = None, strict: bool = True) -> None:
    """The Chinese book's sources under ``out``: configuration, table of contents, pages.

    With ``executed`` (``_build/executed``, from tools/execute_book.py), the notebooks carry the
    English run's outputs and the Chinese build executes nothing; without it, no outputs (what
    the Colab edition is generated from).
    """
    import shutil

    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = SITE_WORDS[config["title"]]
    config["execute"]["execute_notebooks"] = "off"
    config["html"]["baseurl"] = config["html"]["baseurl"].rstrip("/") + "/zh/"
    sphinx = config["sphinx"]["config"]
    sphinx["language"] = "zh_CN"
    sphinx["locale_dirs"] = ["locale"]  # write_theme_catalogues
    # Chinese words split by jieba (requirements.in), with the course's terms kept whole
    sphinx["html_search_language"] = "zh"
    sphinx["html_search_options"] = {"dict": str((out / SEARCH_WORDS).resolve())}
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc.get("parts", []):
        part["caption"] = SITE_WORDS[part["caption"]]
        for chapter in part.get("chapters", []):
            if chapter.get("file", "").rsplit("/", 1)[-1] in UNTRANSLATED_PAGES:
                chapter["title"] = SITE_WORDS["API reference"]
    if out.exists():
        shutil.rmtree(out)
    (out / "book").mkdir(parents=True)
    (out / "tools").mkdir()
    header = "# Generated by tools/zh_edition.py from the English book: edit that, not this.\n"
    (out / "_config.yml").write_text(
        header + yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8"
    )
    (out / "_toc.yml").write_text(
        header + yaml.safe_dump(toc, allow_unicode=True, sort_keys=False), encoding="utf-8"
    )
    shutil.copy(ROOT / "tools" / "book_fixes.py", out / "tools" / "book_fixes.py")
    shutil.copytree(ROOT / "tools" / "book_templates", out / "tools" / "book_templates")
    # the Chinese Colab edition, which the pages' "Download .ipynb" gives (tools/book_fixes.py)
    shutil.copytree(ROOT / "notebooks" / "zh", out / "notebooks" / "zh")
    write_theme_catalogues(out)
    (out / SEARCH_WORDS).write_text("\n".join(search_words()) + "\n", encoding="utf-8")
    shutil.copy(ROOT / "pyproject.toml", out / "pyproject.toml")
    (out / "book" / "references.bib").write_text(chinese_bib(strict), encoding="utf-8")
    for name in UNTRANSLATED_PAGES:
        shutil.copy(BOOK / f"{name}.md", out / "book" / f"{name}.md")
    for page in pages():
        target = out / "book" / page.name
        if page.suffix == ".ipynb":
            run = executed / "book" / page.name if executed else None
            notebook = chinese_notebook(page, run, strict)
            target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", "utf-8")
        else:
            target.write_text(chinese_markdown(page, strict), encoding="utf-8")


# -- a plain-text form for translating a page in any editor -----------------------------------

_HEAD = re.compile(r"^<<<< (\d+) (\w+) \| (.*)$")


def export(page: Path) -> str:
    """The page's units with their current translations, in the text form ``import`` reads."""
    catalog = load(page) or Catalog(locale=LANGUAGE)
    out = []
    for i, unit in enumerate(units(page)):
        message = catalog.get(unit.text, context=unit.context)
        zh = message.string if message is not None and message.string else ""
        out.append(f"<<<< {i} {unit.context} | {unit.where}\n{unit.text}\n==== zh\n{zh}\n>>>>\n")
    return "\n".join(out)


def import_text(page: Path, text: str) -> int:
    """Translations from ``export``'s form into the page's catalogue; returns how many were set."""
    todo = units(page)
    catalog = update(page)
    lines = text.split("\n")
    count, i = 0, 0
    while i < len(lines):
        match = _HEAD.match(lines[i])
        if not match:
            i += 1
            continue
        index, context = int(match.group(1)), match.group(2)
        j = lines.index("==== zh", i + 1)
        k = lines.index(">>>>", j + 1)
        english = "\n".join(lines[i + 1 : j])
        zh = "\n".join(lines[j + 1 : k]).strip("\n")
        unit = todo[index]
        if unit.context != context or unit.text.strip() != english.strip():
            raise SystemExit(f"unit {index} of {page.name} is not the English of the page any more")
        if zh:
            message = catalog.get(unit.text, context=unit.context)
            message.string = zh
            message.flags.discard("fuzzy")
            message.previous_id = []
            count += 1
        i = k + 1
    save(page, catalog)
    return count


# -- checks of a translation ---------------------------------------------------------------

TERMINOLOGY = ROOT / "book" / "locale" / "zh_CN" / "terminology.tsv"
_CJK = re.compile(r"[\u4e00-\u9fff]")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
#: A word of a formula (``\text{cache bytes}``): the translation may write it in Chinese.
_MATH_WORDS = re.compile(r"\\text\{([^{}]*)\}")
_CODE = re.compile(r"`(?:[^`\n]|\n(?!\n))+`")  # a code span may break across lines
_FENCED = re.compile(r"^(`{3,}|~{3,})(?P<info>[^\n]*)\n.*?^\1\s*$", re.S | re.M)
_ROLE = re.compile(r"\{(?P<role>[\w:-]+)\}`(?P<body>[^`]*)`")
_LINK = re.compile(r"\]\((?P<url>[^)\s]+)\)")
_LABEL = re.compile(r"^\([\w-]+\)=\s*$", re.M)
_DIRECTIVE = re.compile(r"^\s*(?:`{3,}|:{3,})\s*\{(?P<name>[\w:-]+)\}", re.M)


def _rows() -> List[tuple]:
    """(english, chinese, [variants to avoid], kind) per row of the terminology table; kind is
    ``""`` for a glossary term, ``"word"`` for a word of the edition that is not one."""
    rows = []
    for line in TERMINOLOGY.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        english, chinese, *rest = line.split("\t")
        avoid = [w for w in (rest[0] if rest else "").split(",") if w]
        kind = rest[1].strip() if len(rest) > 1 else ""
        rows.append((english, chinese, avoid, kind))
    return rows


def terminology() -> List[tuple]:
    """(english, chinese, [variants to avoid]) per glossary term."""
    return [(english, chinese, avoid) for english, chinese, avoid, kind in _rows() if not kind]


def words() -> List[tuple]:
    """(english, chinese, [variants to avoid]) per word of the edition that is no glossary term
    (a GPU kernel's 核函数, the additive mask's 加性掩码): one rendering in the book and in the
    checkers' messages alike, checked like the terms, and the English word itself left in the
    Chinese at most once, glossed in brackets (核函数（kernel）)."""
    return [(english, chinese, avoid) for english, chinese, avoid, kind in _rows() if kind]


#: Where a link opens a chapter in Colab: the English notebooks and the Chinese ones.
_COLAB_EN = "/blob/main/notebooks/"
_COLAB_ZH = "/blob/main/notebooks/zh/"


def _role_target(role: str, body: str) -> str:
    match = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", body, re.S)
    return match.group("target") if match else body


def _role_text(body: str) -> str:
    match = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", body, re.S)
    return match.group("text") if match else body


def prose(text: str) -> str:
    """``text`` without math, code, URLs, labels and MyST syntax: the words a reader reads."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"(?:^|\n)\n(?: {4}.*(?:\n|$))+", "\n\n", text)  # indented code blocks
    text = _MATH.sub(" ", text)
    text = _ROLE.sub(
        lambda m: " " if m.group("role") != "term" else _role_text(m.group("body")), text
    )
    text = _CODE.sub(" ", text)
    text = _LINK.sub("]", text)
    text = re.sub(r"https?://\S+", " ", text)
    text = _LABEL.sub(" ", text)
    text = re.sub(r"^\s*:[\w-]+:.*$", " ", text, flags=re.M)
    text = _DIRECTIVE.sub(" ", text)
    return text


def english_runs(text: str, words: int = 5) -> List[str]:
    """Runs of ``words`` or more English words in a row in ``text``'s prose, outside quotation
    marks and italics (an English example sentence or a paper's title is part of the Chinese text)."""
    pattern = r"[A-Za-z][A-Za-z'-]*(?:[ ,]+[A-Za-z][A-Za-z'-]*){%d,}" % (words - 1)
    return re.findall(pattern, unquoted(prose(text)))


def unquoted(text: str) -> str:
    """``text`` without what is quoted or in italics (English examples and titles)."""
    return re.sub(r'“[^”]*”|"(?:[^"\n]|\n(?!\n))*"|「[^」]*」|\*[^*\n\u4e00-\u9fff]+\*', " ", text)


def _multiset(pattern: re.Pattern, text: str) -> List[str]:
    return sorted(m.group(0) for m in pattern.finditer(text))


def problems(english: str, chinese: str, page: str = "") -> List[str]:
    """What is wrong with ``chinese`` as the translation of ``english`` (empty when nothing)."""
    found = []
    if not _CJK.search(prose(chinese)):
        found.append("no Chinese in the translation's prose")
    for run in english_runs(chinese):
        found.append(f"untranslated English: {run!r}")
    code_blocks = lambda text: sorted(  # noqa: E731 - fenced code, not directives
        m.group(0) for m in _FENCED.finditer(text) if not m.group("info").startswith("{")
    )
    if code_blocks(english) != code_blocks(chinese):
        found.append("a code block differs from the English")
    bare_en = _ROLE.sub(" ", _FENCED.sub(" ", english))
    bare_zh = _ROLE.sub(" ", _FENCED.sub(" ", chinese))
    for name, pattern in (("math", _MATH), ("inline code", _CODE), ("label", _LABEL)):
        a, b = _multiset(pattern, bare_en), _multiset(pattern, bare_zh)
        if name == "math":  # the same formulas, but for the words of their \text{...}
            a, b = (sorted(_MATH_WORDS.sub(r"\\text{}", m) for m in x) for x in (a, b))
        if a != b:
            lost = sorted(set(a) - set(b))[:3]
            added = sorted(set(b) - set(a))[:3]
            found.append(f"{name} differs from the English: missing {lost}, added {added}")
    words_en = {w for m in _MATH.findall(bare_en) for w in _MATH_WORDS.findall(m)}
    for word in (w for m in _MATH.findall(bare_zh) for w in _MATH_WORDS.findall(m)):
        if word not in words_en and not _CJK.search(word):
            found.append(
                f"math differs from the English: \\text{{{word}}} is neither its word nor Chinese"
            )
    roles_en = sorted(
        (m.group("role"), m.group("body") if m.group("role") != "term" else "")
        for m in _ROLE.finditer(english)
        if m.group("role") not in ("term", "doc", "ref")
    )
    roles_zh = sorted(
        (m.group("role"), m.group("body") if m.group("role") != "term" else "")
        for m in _ROLE.finditer(chinese)
        if m.group("role") not in ("term", "doc", "ref")
    )
    if roles_en != roles_zh:
        found.append(
            f"references (numref, cite, eq, ...) differ: {sorted(set(roles_en) ^ set(roles_zh))}"
        )
    targets = lambda text, role: sorted(  # noqa: E731
        _role_target(role, m.group("body")) for m in _ROLE.finditer(text) if m.group("role") == role
    )
    for role in ("term", "doc", "ref"):
        if targets(english, role) != targets(chinese, role):
            found.append(
                f"{{{role}}} targets differ: {targets(english, role)} vs {targets(chinese, role)}"
            )
    urls = lambda text: sorted(m.group("url") for m in _LINK.finditer(text))  # noqa: E731
    # a link that opens a chapter in Colab opens the Chinese Colab edition (notebooks/zh/)
    if urls(english) != sorted(u.replace(_COLAB_ZH, _COLAB_EN) for u in urls(chinese)):
        found.append("link targets differ from the English")
    if any(_COLAB_EN in u and _COLAB_ZH not in u for u in urls(chinese)):
        found.append(f"a Colab link opens the English edition: {_COLAB_ZH} in Chinese")
    if _multiset(_DIRECTIVE, english) != _multiset(_DIRECTIVE, chinese):
        found.append("directives differ from the English")
    if _emphasis(english) != _emphasis(chinese):
        found.append(
            f"bold/italic that renders in the English does not in the translation: "
            f"{_emphasis(english)} vs {_emphasis(chinese)} (CommonMark needs a space or punctuation "
            "before ** that opens on a role or punctuation, e.g. '是 **{term}`...`**')"
        )
    found += terminology_problems(english, chinese, page)
    return found


def _emphasis(text: str) -> Tuple[int, int]:
    """``(bold, italic)`` spans as CommonMark renders ``text`` (math and code left out): a
    ``**`` glued to Chinese characters on one side and punctuation on the other stays literal."""
    from markdown_it import MarkdownIt

    text = _FENCED.sub(" ", text)
    text = _MATH.sub("M", text)
    text = _CODE.sub("C", text)
    tokens = MarkdownIt("commonmark").parseInline(text)
    kinds = [t.type for tok in tokens for t in (tok.children or [])]
    return kinds.count("strong_open"), kinds.count("em_open")


def _mentions(text: str, term: str) -> bool:
    return (
        re.search(r"(?<![\w-])" + re.escape(term) + r"(?:s|es)?(?![\w-])", text, re.I) is not None
    )


def _bare(term: str) -> re.Pattern:
    """``term`` as a word of prose: not part of a name, a path, a call or an index."""
    return re.compile(r"(?<![\w.`/-])" + re.escape(term) + r"(?:s|es)?(?![\w`/(\[-])", re.I)


def terminology_problems(english: str, chinese: str, page: str = "") -> List[str]:
    found = []
    english_prose = unquoted(prose(english))
    chinese_prose = unquoted(prose(chinese))
    for term, canonical, avoid in words():
        if (
            " " in term
            and _mentions(english_prose, term)
            and canonical.lower() not in chinese.lower()
        ):
            found.append(f"{term!r} is rendered {canonical!r} in this edition")
        glossed = re.sub(r"（" + re.escape(term) + r"(?:s|es)?）", " ", chinese_prose, flags=re.I)
        if page != "glossary.md" and _bare(term).search(glossed):
            found.append(
                f"{term!r} left in English: this edition writes {canonical!r} (the English "
                "at most once, in brackets after it)"
            )
        if page != "glossary.md":
            for variant in avoid:
                if variant in prose(chinese):
                    found.append(f"{variant!r} is a variant: this edition writes {canonical!r}")
    for mark in ("「", "」"):
        if mark in chinese:
            found.append(f"{mark!r}: this edition quotes with “ and ”")
    for term, canonical, avoid in terminology():
        multiword = " " in term or "-" in term
        if (
            multiword
            and _mentions(english_prose, term)
            and canonical.lower() not in chinese.lower()
        ):
            found.append(f"{term!r} is rendered {canonical!r} in this edition")
        if page != "glossary.md":
            for variant in avoid:
                if variant in prose(chinese):
                    found.append(f"{variant!r} is a variant: this edition writes {canonical!r}")
    for m in _ROLE.finditer(chinese):
        if m.group("role") != "term":
            continue
        target, text = _role_target("term", m.group("body")), _role_text(m.group("body"))
        renderings = [c.lower() for _, c, _ in terminology()]
        for term, canonical, _ in terminology():
            if term.lower() != target.lower() or canonical.lower() in text.lower():
                continue
            if not any(r in text.lower() for r in renderings):  # an alias's rendering will do
                found.append(f"{{term}} {m.group(0)!r} should read {canonical!r}")
    return found


def lint(page: Path) -> List[str]:
    """Every problem of the page's translated units, as 'where: problem' lines."""
    catalog = load(page) or Catalog(locale=LANGUAGE)
    out = []
    for unit in units(page):
        message = catalog.get(unit.text, context=unit.context)
        if message is None or not message.string:
            continue
        for problem in problems(unit.text, message.string, page.name):
            out.append(f"{page.name} {unit.where} ({unit.context}): {problem}")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("update", "status", "lint"):
        p = sub.add_parser(name)
        p.add_argument("pages", nargs="*", help="page names (stems); every page when none")
    p = sub.add_parser("export", help="a page's units as text to translate")
    p.add_argument("page")
    p = sub.add_parser("sources", help="the Chinese book's sources")
    p.add_argument("out", type=Path)
    p.add_argument(
        "--executed",
        type=Path,
        help="the executed notebooks: _build/executed (tools/execute_book.py)",
    )
    p.add_argument("--allow-missing", action="store_true", help="English where untranslated")
    p = sub.add_parser("import", help="translations from export's text form")
    p.add_argument("page")
    p.add_argument("file")
    args = parser.parse_args(argv)
    if args.command == "sources":
        try:
            write_sources(args.out, args.executed, strict=not args.allow_missing)
        except Untranslated as error:
            print(f"{error}\n(python tools/zh_edition.py status lists what is missing)")
            return 1
        return 0
    if args.command in ("export", "import"):
        page = next(p for p in pages() if p.stem == args.page)
        if args.command == "export":
            sys.stdout.write(export(page))
        else:
            n = import_text(page, Path(args.file).read_text(encoding="utf-8"))
            print(f"{n} translations imported into {catalogue_path(page).relative_to(ROOT)}")
        return 0
    chosen = [p for p in pages() if not args.pages or p.stem in args.pages]
    if args.command == "lint":
        found = [line for page in chosen for line in lint(page)]
        print("\n".join(found) or "no problems")
        return 1 if found else 0
    if args.command == "update":
        for page in chosen:
            catalog = update(page)
            print(f"{catalogue_path(page).relative_to(ROOT)}: {len(catalog)} units")
        return 0
    behind = 0
    for page in chosen:
        s = status(page)
        behind += len(s.missing) + len(s.fuzzy) + s.obsolete
        print(
            f"{s.page:34} {s.translated:3}/{s.units:3} translated, {len(s.missing)} missing,"
            f" {len(s.fuzzy)} fuzzy, {s.obsolete} obsolete"
        )
    return 1 if behind else 0


if __name__ == "__main__":
    sys.exit(main())
