"""The Chinese catalogues of ``check``, ``hint`` and ``solution`` (attncourse/exercises/locale).

    python tools/zh_messages.py update    # catalogues merged with the messages of the source, .mo compiled
    python tools/zh_messages.py status    # translated / untranslated / fuzzy counts
    python tools/zh_messages.py lint      # placeholders, terminology, English left in the Chinese
    python tools/zh_messages.py export    # the untranslated messages as text (concealed ones revealed)
    python tools/zh_messages.py import F  # translations from that text form, then update

What a learner reads comes from three places, all collected here:

* every message marked ``_("...")`` or ``N_("...")`` in ``attncourse/exercises/*.py`` (found in
  the source's syntax tree, so a message is collected whether or not a test reaches it);
* each exercise's title and hints, every level (``@exercise(title=..., hint=(...))``), as the
  registry holds them;
* text concealed in the package (the wrong values' messages of numeric exercises, worked
  answers): kept in a second catalogue whose entries are concealed on both sides, so that
  installing the Chinese catalogue does not publish what the English source conceals.

``update`` keeps a translation whose English changed as fuzzy (not used, and ``status`` and the
tests count it), drops messages no longer in the source, and compiles the ``.mo`` files that
Python's ``gettext`` reads. The catalogues are ordinary gettext files: Poedit, Lokalize or a
text editor open them; the concealed one is edited through ``export`` and ``import``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import string
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attncourse.exercises import _core, _i18n, registry  # noqa: E402

SOURCE = ROOT / "attncourse" / "exercises"
LOCALE = SOURCE / "locale" / "zh_CN" / "LC_MESSAGES"
PLAIN = LOCALE / f"{_i18n.DOMAIN}.po"
CONCEALED = LOCALE / f"{_i18n.CONCEALED_DOMAIN}.po"
_BASE64 = re.compile(r"^[A-Za-z0-9+/]{16,}={0,2}$")


def _string_constants(tree: ast.AST) -> List[str]:
    """Module-level string constants (implicitly concatenated literals joined)."""
    found = []
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                found.append(node.value.value)
    return found


def marked(path: Path) -> List[Tuple[str, int]]:
    """``(message, line)`` for every ``_("...")`` and ``N_("...")`` call in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("_", "N_", "gettext")
            and node.args
        ):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append((arg.value, node.lineno))
    return out


#: The helpers whose arguments a learner reads: ``name -> (positions, keywords)`` of those
#: arguments. Each must arrive marked (``_("...")``, or a value built from marked text).
SHOWN_ARGUMENTS = {
    "Mistake": ((0,), ()),
    "NotAttempted": ((0,), ()),
    "Result": ((2,), ("message",)),
    "number": ((1,), ("what",)),
    "integer": ((1,), ("what",)),
    "as_shape": ((1,), ("what",)),
    "expect_tensor": ((2,), ("what",)),
    "expect_tuple": ((2,), ("message",)),
    "choice": ((2,), ("what",)),
    "check_number": ((), ("what", "right", "otherwise")),
    "check_line_number": ((), ("right", "otherwise")),
    "diagnose": ((), ("default",)),
    "several": ((0,), ()),
}
_PROSE = re.compile(r"[A-Za-z]{2,}")
_SENTENCE = re.compile(r"[A-Za-z]{2,}[ ,]+[a-z]{2,}[ ,]+[a-z]{2,}")


def _unmarked(node: ast.AST, pattern: re.Pattern) -> Optional[str]:
    """The English of ``node`` when it is text that reaches the learner without passing through
    a marker: a literal, an f-string, a literal's ``.format``, a sum or a choice of such."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if pattern.search(node.value) else None
    if isinstance(node, ast.JoinedStr):
        text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        return ast.unparse(node) if pattern.search(text) else None
    if isinstance(node, ast.BinOp):
        return _unmarked(node.left, pattern) or _unmarked(node.right, pattern)
    if isinstance(node, ast.IfExp):
        return _unmarked(node.body, pattern) or _unmarked(node.orelse, pattern)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("format", "join")
    ):
        return _unmarked(node.func.value, pattern)
    if isinstance(node, (ast.List, ast.Tuple)):
        return next((t for t in (_unmarked(e, pattern) for e in node.elts) if t), None)
    return None


def unmarked(path: Path) -> List[Tuple[int, str]]:
    """``(line, text)`` for each piece of English a learner reads that is not marked for
    translation: an argument of a helper that shows it (:data:`SHOWN_ARGUMENTS`: a ``what``, a
    mistake's message, a note), and a sentence used as a key of a dict of known mistakes
    (``{"You masked the queries ...": wrong_output}``, the messages :func:`diagnose` returns).
    A Chinese learner would read these in English: gettext never sees them."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in SHOWN_ARGUMENTS:
                continue
            positions, keywords = SHOWN_ARGUMENTS[name]
            shown = [node.args[i] for i in positions if i < len(node.args)]
            shown += [k.value for k in node.keywords if k.arg in keywords]
            for arg in shown:
                text = _unmarked(arg, _PROSE)
                if text:
                    out.append((node.lineno, f"{name}(): {text}"))
        keys = []
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Assign):
            keys = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
        for key in keys:
            text = _unmarked(key, _SENTENCE)
            if text:
                out.append((key.lineno, f"a mistake's message: {text}"))
    return sorted(out)


def unmarked_messages() -> List[str]:
    """Every unmarked message of the checkers (:func:`unmarked`), as 'file:line: text'."""
    return [
        f"attncourse/exercises/{path.name}:{line}: not marked for translation: {text[:80]!r}"
        for path in sorted(SOURCE.glob("*.py"))
        for line, text in unmarked(path)
    ]


def concealed_texts(path: Path) -> List[str]:
    """The concealed messages of ``path``: the values of each concealed JSON object of known
    mistakes (``{"wrong value": "message"}``, or one such object per part of the answer:
    ``{"part": {"wrong value": "message"}}``)."""
    out = []
    for constant in _string_constants(ast.parse(path.read_text(encoding="utf-8"))):
        if not _BASE64.match(constant):
            continue
        try:
            text = _core.reveal(constant)
            data = json.loads(text)
        except Exception:  # noqa: BLE001 - not a concealed JSON object (an answer, a solution)
            continue
        if isinstance(data, dict):
            for value in data.values():
                parts = value.values() if isinstance(value, dict) else [value]
                out += [m for m in parts if isinstance(m, str)]
    return out


def messages() -> Tuple[Dict[str, List[tuple]], Dict[str, List[tuple]]]:
    """The plain and the concealed messages, each ``{message: [(file, line), ...]}``."""
    plain: Dict[str, List[tuple]] = {}
    concealed: Dict[str, List[tuple]] = {}
    for path in sorted(SOURCE.glob("*.py")):
        name = f"attncourse/exercises/{path.name}"
        for text, line in marked(path):
            plain.setdefault(text, []).append((name, line))
        for text in concealed_texts(path):
            concealed.setdefault(text, []).append((name, 0))
    for exercise in registry().values():
        where = (f"exercise {exercise.exercise_id}", 0)
        plain.setdefault(exercise.title, []).append(where)
        for level in exercise.hints:  # every level of hints (hint(id), hint(id, 2), ...)
            plain.setdefault(level, []).append(where)
        if not exercise.solution_is_code:
            concealed.setdefault(exercise.solution(), []).append(where)
    return plain, concealed


def _python_format(text: str, locations: List[tuple]) -> bool:
    """Whether ``text`` is a ``str.format`` template: braces in a ``_("...")`` call of the
    source (hints, titles and concealed messages are shown as they are, braces and all)."""
    return "{" in text and any(line > 0 for _file, line in locations)


def _template(found: Dict[str, List[tuple]]) -> Catalog:
    catalog = Catalog(project="attncourse", fuzzy=False)
    for text, locations in found.items():
        flags = ["python-brace-format"] if _python_format(text, locations) else []
        catalog.add(text, locations=locations, flags=flags)
    return catalog


def _read(path: Path) -> Catalog:
    if not path.exists():
        return Catalog(locale="zh_CN", project="attncourse", fuzzy=False)
    with path.open("rb") as handle:
        return read_po(handle, locale="zh_CN")


def _write(path: Path, catalog: Catalog) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog.fuzzy = False
    with path.open("wb") as handle:
        write_po(handle, catalog, width=100, omit_header=False, ignore_obsolete=True)
    with path.with_suffix(".mo").open("wb") as handle:
        write_mo(handle, catalog, use_fuzzy=False)


def _concealed_view(catalog: Catalog, reveal: bool) -> Catalog:
    """The concealed catalogue with its entries revealed (or concealed)."""
    code = _core.reveal if reveal else _core.conceal
    out = Catalog(
        locale="zh_CN",
        project="attncourse",
        fuzzy=False,
        creation_date=catalog.creation_date,
        revision_date=catalog.revision_date,
    )
    for m in catalog:
        if not m.id:
            continue
        out.add(
            code(m.id),
            code(m.string) if m.string else "",
            locations=m.locations,
            flags=m.flags,
            previous_id=m.previous_id,
        )
    return out


def update() -> Tuple[Catalog, Catalog]:
    plain, concealed = messages()
    catalog = _read(PLAIN)
    created = catalog.creation_date  # kept: a merge that changes nothing changes no file
    catalog.update(_template(plain), no_fuzzy_matching=False)
    catalog.creation_date = created
    _write(PLAIN, catalog)
    hidden = _concealed_view(_read(CONCEALED), reveal=True)
    created = hidden.creation_date
    hidden.update(_template(concealed), no_fuzzy_matching=False)
    hidden.creation_date = created
    # locations of concealed text say where it lives, never what it says
    _write(CONCEALED, _concealed_view(hidden, reveal=False))
    return catalog, hidden


def catalogues() -> Tuple[Catalog, Catalog]:
    """The plain catalogue, and the concealed one revealed, as they are on disk."""
    return _read(PLAIN), _concealed_view(_read(CONCEALED), reveal=True)


def status() -> Dict[str, int]:
    plain, concealed = messages()
    counts = {"messages": 0, "translated": 0, "untranslated": 0, "fuzzy": 0, "missing": 0}
    for found, catalog in zip((plain, concealed), catalogues()):
        for text in found:
            counts["messages"] += 1
            entry = catalog.get(text)
            if entry is None:
                counts["missing"] += 1
            elif entry.fuzzy:
                counts["fuzzy"] += 1
            elif entry.string:
                counts["translated"] += 1
            else:
                counts["untranslated"] += 1
    return counts


def fields(text: str) -> List[str]:
    """The ``{placeholders}`` of a template, with conversion and format spec, sorted."""
    out = []
    try:
        for _literal, name, spec, conversion in string.Formatter().parse(text):
            if name is not None:
                out.append(f"{name}!{conversion or ''}:{spec or ''}")
    except ValueError as error:
        return [f"<unparsable: {error}>"]
    return sorted(out)


_CJK = re.compile(r"[\u4e00-\u9fff]")
_CODEISH = re.compile(
    r"`[^`]*`|\{[^{}]*\}|\b[\w.]+\([^()]*\)|[\w.]*[_=\[\]()^/*@<>]+[\w.\[\]()^/*@<>=-]*|"
    r"\b[A-Z][\w]*\b"
)


def english_runs(text: str, words: int = 4) -> List[str]:
    """Runs of ``words`` or more English words left in a Chinese message (code, names,
    placeholders and formulas aside)."""
    prose = _CODEISH.sub(" ", text)
    runs = re.findall(r"(?:\b[a-z]{2,}\b[ ,;:'-]+){%d,}[a-z]{2,}\b" % (words - 1), prose)
    return runs


def problems() -> List[str]:
    """What is wrong with the translations: placeholders that differ from the English, a
    message that is not Chinese, English prose left in, a glossary term rendered otherwise."""
    sys.path.insert(0, str(ROOT / "tools"))
    import zh_edition

    out = unmarked_messages()
    plain, concealed = messages()
    for found, catalog in zip((plain, concealed), catalogues()):
        for text, locations in found.items():
            entry = catalog.get(text)
            if entry is None or not entry.string or entry.fuzzy:
                continue
            where = f"{text[:60]!r}"
            if _python_format(text, locations) and fields(text) != fields(entry.string):
                out.append(f"{where}: placeholders {fields(text)} != {fields(entry.string)}")
            ends = [(t.startswith("\n"), t.endswith("\n")) for t in (text, entry.string)]
            if ends[0] != ends[1]:
                out.append(
                    f"{where}: the English starts or ends with a line break, the translation not"
                )
            if not _CJK.search(entry.string) and re.search(r"[a-z]{3,} [a-z]{3,}", text):
                out.append(f"{where}: the translation has no Chinese")
            for run in english_runs(entry.string):
                out.append(f"{where}: English left in the translation: {run!r}")
            for problem in zh_edition.terminology_problems(text, entry.string, "messages"):
                out.append(f"{where}: {problem}")
    return out


_HEAD = re.compile(r"^<<<< (\d+) (plain|concealed)$")


def export(all_messages: bool = False) -> str:
    """The messages still to translate (all of them with ``all_messages``), in the text form
    ``import`` reads: ``<<<< n plain``, the English, ``====``, the Chinese, ``>>>>``."""
    update()
    parts = []
    for kind, catalog in zip(("plain", "concealed"), catalogues()):
        for i, m in enumerate(c for c in catalog if c.id):
            if all_messages or not m.string or m.fuzzy:
                parts.append(f"<<<< {i} {kind}\n{m.id}\n====\n{m.string or ''}\n>>>>")
    return "\n".join(parts) + "\n"


def import_text(text: str) -> int:
    """Write the translations of ``export``'s text form; returns how many were written."""
    plain, hidden = catalogues()
    by_kind = {"plain": plain, "concealed": hidden}
    lists = {k: [m for m in c if m.id] for k, c in by_kind.items()}
    count = 0
    blocks = re.split(r"^>>>>\s*$", text, flags=re.M)
    for block in blocks:
        block = block.strip("\n")
        if not block.strip():
            continue
        head, _, rest = block.partition("\n")
        match = _HEAD.match(head.strip())
        if not match:
            raise ValueError(f"not a message block: {head[:80]!r}")
        english, sep, chinese = rest.partition("\n====\n")
        if not sep:
            english, sep, chinese = rest.partition("\n====")
        index = int(match.group(1))
        entries = lists[match.group(2)]
        entry = entries[index] if index < len(entries) else None
        if entry is None or entry.id != english:  # the catalogue moved on: find it by its English
            entry = next((m for m in entries if m.id == english), None)
        if entry is None:
            raise ValueError(f"block {head}: no message of the catalogue reads {english[:60]!r}")
        chinese = chinese.strip("\n")
        if chinese:  # the English's leading and trailing line breaks, which the format hides
            lead = len(english) - len(english.lstrip("\n"))
            trail = len(english) - len(english.rstrip("\n"))
            chinese = "\n" * lead + chinese + "\n" * trail
            entry.string = chinese
            entry.flags.discard("fuzzy")
            count += 1
    _write(PLAIN, plain)
    _write(CONCEALED, _concealed_view(hidden, reveal=False))
    update()
    return count


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("update")
    sub.add_parser("status")
    sub.add_parser("lint")
    p = sub.add_parser("export")
    p.add_argument("--all", action="store_true", help="every message, translated or not")
    p = sub.add_parser("import")
    p.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "update":
        update()
        print(json.dumps(status()))
    elif args.command == "status":
        print(json.dumps(status()))
    elif args.command == "lint":
        found = problems()
        print("\n".join(found) or "no problems")
        return 1 if found else 0
    elif args.command == "export":
        sys.stdout.write(export(args.all))
    elif args.command == "import":
        print(f"{import_text(args.file.read_text(encoding='utf-8'))} translations written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
