"""Hints come in levels: ``hint(id)`` nudges without giving the answer away, ``hint(id, 2)`` says
more, ``solution(id)`` is the answer.

The first hint of every exercise is scanned for the answer's key as
``tests/test_answers_not_above.py`` derives it from the package (not typed here): the reference
solution's key line (what a straight-line solution returns, and the solution whole, its names
free), the fixed line of a find-the-bug exercise, a number the checker accepts or the stored
number rounded to the digits written, the shapes of a shapes answer, and the hand-written
giveaways (``GIVEAWAYS``). The scan reads the hint as prose and its code as code. It also measures how much of each key
line of a reference solution (each statement's expression, its own names free) the hint writes
in runs of four tokens or more: 60 % or more gives the line away.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import re
import textwrap

import pytest
import test_answers_not_above as scan
from exercise_helpers import REGISTRY

from attncourse.exercises import hint, set_language, solution
from attncourse.exercises._core import reflow

EXERCISES = list(REGISTRY)


def _code_spans(text: str) -> list:
    """The code a hint writes: its `backquoted` spans, and each line, whole and cut at its
    colons and semicolons (where prose introduces code: "Set: x = ...")."""
    spans = re.findall(r"`([^`]+)`", text)
    for line in text.splitlines():
        spans.append(line)
        spans += re.split(r"[:;]\s|\s\(|\)\s|, then |, and ", line)
    return [s.strip(" .,") for s in spans if s.strip(" .,")]


def first_hint_gives_away(exercise_id: str, text: str) -> list:
    """What in ``text`` (a first hint) gives the answer of ``exercise_id`` away."""
    key = scan.KEYS[exercise_id]
    found = scan.hits(key, text, code=False, output=False)
    found += scan.hits(key, text, code=False, output=True)
    codes = [scan.normalized_code(c) for c in _code_spans(text)]
    for code in codes:
        found += scan.hits(key, code, code=False, output=False)
    if key.whole and all(any(re.search(k.pattern, c) for c in codes + [text]) for k in key.whole):
        found.append("the whole solution: " + "; ".join(k.shown for k in key.whole))
    found += writes_a_key_line(exercise_id, text)
    return list(dict.fromkeys(found))


def _first(exercise_id: str) -> str:
    """The first hint as registered (the only one, before hints had levels)."""
    ex = REGISTRY[exercise_id]
    return getattr(ex, "hints", (ex.hint,))[0]


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_every_exercise_has_hints_in_levels(exercise_id):
    """At least two levels, the second saying more than the first."""
    levels = REGISTRY[exercise_id].hints
    assert len(levels) >= 2, f"{exercise_id}: one level of hints"
    assert len(set(levels)) == len(levels)


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_the_first_hint_does_not_give_the_answer_away(exercise_id):
    text = _first(exercise_id)
    assert not first_hint_gives_away(exercise_id, text), (
        f"hint({exercise_id!r}) gives the answer away: {first_hint_gives_away(exercise_id, text)}"
    )


@pytest.mark.parametrize(
    "exercise_id, text",
    [  # the first (and only) hints before issue 30, which the scan must catch
        ("inference/repeat-kv", "repeat each head in place (x.repeat_interleave(n_rep, dim=1))"),
        ("dot-product/score-variance", "its variance is d_k"),
        ("inference/cache-bytes", "about 1.25 GiB per sequence"),
        ("complexity/find-the-bug", "the bug is on line 13"),
        ("dot-product/scores", "key.transpose(-2, -1), then divide by sqrt(d_k) = query.size(-1)"),
        ("complexity/online-softmax", "new_acc = acc * correction[:, None] + weights @ value"),
        (
            "flex/document-window-mask",
            "the key is in the query's document[q_idx] == document[kv_idx]",
        ),
    ],
)
def test_the_scan_catches_a_hint_that_gives_the_answer(exercise_id, text):
    assert first_hint_gives_away(exercise_id, text)


def test_hint_levels_and_the_end_of_them():
    exercise_id = "inference/repeat-kv"
    levels = REGISTRY[exercise_id].hints
    first, default = hint(exercise_id, 1), hint(exercise_id)
    assert first.text == default.text and first.label == default.label  # backward compatible
    # each level's text as a paragraph: the source's line breaks are not the reader's
    assert " ".join(levels[0].split()) in first.text and f"hint({exercise_id!r}, 2)" in first.text
    last = hint(exercise_id, len(levels))
    assert " ".join(levels[-1].split()) in " ".join(last.text.split())
    assert f"solution({exercise_id!r})" in last.text
    beyond = hint(exercise_id, len(levels) + 1)
    assert f"no hint {len(levels) + 1}" in beyond.text
    assert f"{len(levels)} levels" in beyond.text and f"solution({exercise_id!r})" in beyond.text
    assert "x.repeat_interleave" not in beyond.text + first.text
    assert "repeat_interleave" in solution(exercise_id).text
    for wrong in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="hint level"):
            hint(exercise_id, wrong)


def test_hint_levels_speak_chinese():
    set_language("zh")
    try:
        shown = hint("inference/repeat-kv", 1)
        assert "提示" in shown.label and "hint('inference/repeat-kv', 2)" in shown.text
        beyond = hint("inference/repeat-kv", 9)
        assert "solution('inference/repeat-kv')" in beyond.text
        assert re.search(r"[\u4e00-\u9fff]", beyond.text)
    finally:
        set_language("en")


# -- the key lines of a reference solution, and how much of one a hint writes ------------------------

_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|\*\*|//|[^\s\w]")


def key_lines(exercise_id: str) -> list:
    """The key lines of a coding exercise's reference solution: what a straight-line solution
    returns (``scan.code_keys``), and each statement's expression as the source writes it
    (comments and spacing normalised), of eight tokens or more, as tokens with the solution's
    own names (arguments and locals) free (``None``)."""
    reference = REGISTRY[exercise_id].reference
    if reference is None:
        return []
    returned, _whole = scan.code_keys(reference)
    codes = [k.shown for k in returned]
    tree = ast.parse(textwrap.dedent(inspect.getsource(reference)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Return, ast.Assign, ast.AugAssign)) and node.value:
            codes.append(ast.unparse(node.value))
    lines = []
    for code in dict.fromkeys(codes):
        tokens = [None if t in names else t for t in _TOKEN.findall(code)]
        if len(tokens) >= 8:
            lines.append((code, tokens))
    return lines


def covered(line: list, text: str, run: int = 4) -> float:
    """The share of the tokens of ``line`` that ``text`` writes in runs of ``run`` tokens or
    more (a free name matches any name)."""
    hint = _TOKEN.findall(text)

    def same(a, b):
        return b == a if a is not None else bool(re.fullmatch(r"[A-Za-z_]\w*", b))

    best = [0] * len(line)  # the longest run of line starting at each token found in the hint
    for i in range(len(line)):
        for j in range(len(hint)):
            n = 0
            while i + n < len(line) and j + n < len(hint) and same(line[i + n], hint[j + n]):
                n += 1
            best[i] = max(best[i], n)
    cover = [False] * len(line)
    for i, n in enumerate(best):
        if n >= run and sum(t is not None for t in line[i : i + n]) >= 2:
            cover[i : i + n] = [True] * n
    return sum(cover) / len(line)


def test_the_scan_leaves_a_nudge_alone():
    assert not first_hint_gives_away(
        "dot-product/scores",
        "Each score is one query's dot product with one key; which "
        "dimensions of key must swap so that the matrix product pairs them all?",
    )


def writes_a_key_line(exercise_id: str, text: str, share: float = 0.6) -> list:
    """The key lines of which ``text`` writes ``share`` or more of the tokens."""
    return [code for code, tokens in key_lines(exercise_id) if covered(tokens, text) >= share]


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_every_level_of_hints_speaks_chinese(exercise_id):
    """tools/zh_messages.py collects every level: each is translated, none left in English."""
    levels = REGISTRY[exercise_id].hints
    set_language("zh")
    try:
        for level, english in enumerate(levels, start=1):
            shown = hint(exercise_id, level)
            assert re.search(r"[\u4e00-\u9fff]", shown.text) and english not in shown.text, level
    finally:
        set_language("en")


def _binds(tree: ast.AST) -> set:
    """Every name ``tree`` binds: assignments, loop and comprehension targets, arguments,
    functions, classes and imports."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


@pytest.mark.parametrize("path", scan.CHAPTERS, ids=lambda path: path.stem)
def test_a_code_solution_reads_only_what_its_chapter_has(path):
    """A learner pastes ``solution(id)``'s code into the chapter and runs it: every name it reads
    is a builtin, its own, or bound by a cell of the chapter (chapter 6's find-the-bug solution
    once called the course's scaled_dot_product_attention, which chapter 6 never imports)."""
    cells = json.loads(path.read_text())["cells"]
    chapter = set()
    for cell in cells:
        if cell["cell_type"] == "code":
            try:
                chapter |= _binds(ast.parse(scan._source(cell)))
            except SyntaxError:  # a cell of IPython magic
                continue
    missing = {}
    for exercise_id, _start in scan.exercises(cells):
        exercise = REGISTRY[exercise_id]
        if not exercise.solution_is_code:
            continue
        tree = ast.parse(exercise.solution())
        reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        unknown = reads - _binds(tree) - chapter - set(dir(builtins))
        if unknown:
            missing[exercise_id] = sorted(unknown)
    assert not missing, missing


def test_a_hint_reads_as_paragraphs_and_steps_not_as_its_sources_lines():
    """Chapter 10's hints showed "which\nshould it\nsee?": the source's wrapping. Paragraphs
    flow; numbered steps, bullets, indented code and blank lines keep their lines."""
    text = hint("gpu/find-the-bug", 2).text
    assert "and which should it see?" in text, text
    steps = hint("multi-head/forward", 2).text.splitlines()
    assert [line[:2] for line in steps[:4]] == ["1.", "2.", "3.", "4."], steps
    assert (
        reflow("第一行\n第二行\n\n- a\n- b\n    code\n    more")
        == "第一行第二行\n\n- a\n- b\n    code\n    more"
    )


def test_chinese_meets_latin_with_a_space_where_a_hint_rejoins_its_lines():
    """A Chinese hint wrapped after 应用 and before torch.nn... read "应用torch.nn..." once its
    lines were joined; the catalogues set Latin words off from Chinese by a space, and
    full-width punctuation takes none."""
    assert reflow("应用\ntorch.nn.functional.dropout") == "应用 torch.nn.functional.dropout"
    assert reflow("x 的形状\n是 (2, 3)") == "x 的形状是 (2, 3)"
    assert reflow("求和（sum(-1)），\n再求标准差") == "求和（sum(-1)），再求标准差"
    assert reflow("the keys\nand values") == "the keys and values"
    assert "应用 torch" in hint("multi-head/dropout-row-sum", 2, language="zh").text
