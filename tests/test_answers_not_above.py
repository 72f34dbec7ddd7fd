"""No exercise's answer is shown above the exercise: not in the prose, the code or the outputs.

``test_predict_before_reveal.py`` guards the exercises that say "predict"; this test guards every
exercise, in the chapter (``book/NN_*.ipynb``) and in its two Colab editions (``notebooks/``,
``notebooks/zh/``). For each exercise, everything above the cell that starts it (the
``{exercise-start}`` cell; in a Colab edition the "Exercise N.M" heading) is scanned for the
answer's *key*, taken from the package, not typed here:

* a number answer (``check_number``): every number written above (``3,145,728``, ``3145728``,
  ``3.1e6``, ``3.1M``, ``53 %``, ``1.25 GiB``, ``314 万``) that the checker itself accepts
  (``check(id, x).passed``, so its own tolerance), or that is the stored answer rounded to the
  digits written (``3.1e6`` for 3,145,728; two significant digits at least);
* a line-number or letter answer (find the bug): "line 13", "line (d)", and the fixed line that
  the worked solution shows;
* a shapes answer: each shape, as a tuple or a list;
* a coding answer: the reference solution's key code, comments, spacing and line breaks
  ignored: what a straight-line solution returns, its local names replaced by what they hold,
  written with the solution's own names (``w1, w2.T``); and the solution whole, its names
  free, which the code above gives away when it holds every statement of it
  (``k.repeat_interleave(4, dim=1)`` for the one line ``x.repeat_interleave(n_rep, dim=1)``);
* ``GIVEAWAYS``: what no table in the package holds, written by hand: a formula that is the
  answer ("its variance is d_k", "ln V"), a value the answer follows from, and the printout of
  a measured answer (mean-pooling to one K/V head).

The executed notebooks (``_build/executed/book``, written by ``tools/execute_book.py`` when the
book is built) add the outputs above each exercise; without them that part is skipped, saying
so. A hit is allowed only by a line of ``ALLOWED``, with its reason.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
import torch
from exercise_helpers import NUMBER_PROBES, REGISTRY
from helpers import CHAPTERS, EXECUTED, EXERCISE_START, MEASURES, ROOT, executed_cells

from attncourse.exercises import _core, check
from attncourse.exercises._concealed import reveal

EDITIONS = {
    "book": ROOT / "book",
    "colab": ROOT / "notebooks",
    "colab-zh": ROOT / "notebooks" / "zh",
}

# -- what gives an answer away, beyond the package's own answers ------------------------------------

#: exercise id -> patterns (regular expressions) that give its answer away, each for the prose and
#: code ("source"), the executed outputs ("output") or both ("any").
GIVEAWAYS: Dict[str, Sequence[Tuple[str, str]]] = {
    # the answer is the variance d_k itself, stated in words or as a formula
    "dot-product/score-variance": (
        ("any", r"variance (?:is|of|equals|=) \$?d(?:_k|_\{k\})?\b"),
        ("any", r"with variance \$?d(?:_k)?\b"),
        ("any", r"[Vv]ar\(q\s*(?:·|\\cdot|\.|\*)\s*k\)\s*=\s*\$?d"),
        ("any", r"方差(?:是|为|等于)\s*\$d_k\$"),
    ),
    # the loss of a uniform guess over V characters (test_predict_before_reveal's giveaways)
    "language-model/initial-loss": (
        ("any", r"\bln V\b"),
        ("any", r"\blog\(V\)"),
        ("any", r"\bln 63\b"),
        ("any", r"\blog\(63\)"),
    ),
    # the causal tiles' share of L^2, from which the count follows (53 %)
    "complexity/causal-cells": (("any", "NUMBER 0.53125"),),
    # the formula of the answer, d and N left to fill in
    "all-attention/parameter-count": (
        ("any", r"4\s*d\^2\s*\+\s*2\s*N\s*(?:\\,)?\s*d\b"),
        ("any", r"4\s*d\^2\s*\+\s*2\s*d\s*(?:\\,)?\s*N\b"),
    ),
    # the fix itself: the padding mask given a dimension for the heads and one for the queries
    "masking/fix-padding-broadcast": (
        ("source", r"masked_fill\(\s*keep\[:,\s*None,\s*None,\s*:\]"),
    ),
    # the bug named: is_causal's top-left alignment lets a lone new query see key 0 only
    "inference/cached-step": (
        ("any", r"is_causal=True`? aligns the first query"),
        ("any", r"is_causal=True` 则把第一个查询与第一个键对齐"),
    ),
    # the measured answer: mean-pooling every layer to one K/V head, and its loss printed
    "inference/mqa-gap": (
        ("source", r"mean_pool_kv_heads\([^()]*,\s*(?:num_kv_heads\s*=\s*)?1\s*\)"),
        ("output", r"(?m)^\s*1 K/V heads?\b.*nats"),
    ),
}

#: Hits checked by hand and allowed, one line each: (exercise id, a part of the source of the
#: cell the hit is in or under, the hit or None for any) -> why it gives nothing away. The
#: parameter-count solution prints the projections' 4 x 512^2 = 1,048,576 weights, the memory
#: cost's multiply-adds by coincidence (and a solution shows only when opened); chapter 7's
#: profiler prints measured shares of the time, one of which was once 53 % of it.
ALLOWED: Dict[Tuple[str, str, Optional[str]], str] = {
    ("dot-product/score-variance", "dims = [4, 16, 64", "64"): "a size d_k of the experiment, not a variance",
    ("all-attention/memory-cost", '("all-attention/parameter-count")', "1,048,576"): "4 x 512^2 weights",
    ("complexity/causal-cells", "from torch.profiler import", None): "measured time shares, new every run",
}  # fmt: skip


# -- the exercises of a notebook -----------------------------------------------------------------


def _source(cell) -> str:
    return "".join(cell["source"])


def exercises(cells) -> Iterator[Tuple[str, int]]:
    """``(exercise id, index of the cell that starts it)`` for every exercise of a notebook."""
    seen = set()
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        for exercise_id in re.findall(r'^check\("([^"]+)"', _source(cell), re.MULTILINE):
            if exercise_id in seen:
                continue
            seen.add(exercise_id)
            starts = [
                k
                for k in range(index)
                if cells[k]["cell_type"] == "markdown" and EXERCISE_START.search(_source(cells[k]))
            ]
            assert starts, f"check({exercise_id!r}) at cell {index} follows no exercise start"
            yield exercise_id, starts[-1]


# -- numbers as a text writes them -----------------------------------------------------------------

_SEPARATED = (
    r"[1-9]\d{0,2}(?:(?:,|\\,|\{,\}|_|\u202f|\u2009)\d{3}(?!\d))+|[1-9]\d{0,2}(?: \d{3}(?!\d)){2,}"
)
NUMBER = re.compile(
    r"(?<![\w.\\])(?P<int>" + _SEPARATED + r"|\d+)(?P<frac>\.\d+)?"
    r"(?:[eE](?P<exp>[+-]?\d+)|\s*(?:\\times|×|x)\s*10\^\{?(?P<exp10>-?\d+)\}?)?"
    r"(?P<unit>\s*(?:\\%|%|GiB|MiB|KiB|GB|MB|million|billion|thousand|万|亿|"
    r"[kMG](?![a-zA-Z])|G(?=FLOP)|M(?=FLOP)))?"
)
_UNITS = {
    "%": 0.01, "\\%": 0.01, "GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "GB": 1e9, "MB": 1e6,
    "million": 1e6, "billion": 1e9, "thousand": 1e3, "万": 1e4, "亿": 1e8,
    "k": 1e3, "M": 1e6, "G": 1e9,
}  # fmt: skip


@dataclass(frozen=True)
class Written:
    text: str  # as written
    value: float
    digits: int  # significant digits written


def numbers(text: str) -> Iterator[Written]:
    """Every number in ``text``, with its value and the significant digits it is written with."""
    for match in NUMBER.finditer(text):
        whole = re.sub(r"\D", "", match.group("int"))
        frac = (match.group("frac") or "")[1:]
        digits = len((whole + frac).lstrip("0")) or 1
        value = float(f"{whole}.{frac or 0}")
        exponent = match.group("exp") or match.group("exp10")
        if exponent is not None:
            value *= 10.0 ** int(exponent)
        unit = (match.group("unit") or "").strip()
        value *= _UNITS.get(unit, 1)
        yield Written(match.group(0).strip(), value, digits)


def round_significant(value: float, digits: int) -> float:
    if value == 0:
        return 0.0
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def test_numbers():
    found = {
        w.text: w.value for w in numbers("3,145,728 or 3145728, 3.1e6, 3.1M, 53 % and 1.25 GiB")
    }
    assert found == {
        "3,145,728": 3145728, "3145728": 3145728, "3.1e6": 3.1e6, "3.1M": 3.1e6,
        "53 %": 0.53, "1.25 GiB": 1.25 * 2**30,
    }  # fmt: skip
    assert [w.value for w in numbers(r"$65{,}536$, 8\,912\,896 and 314 万")] == [
        65536, 8912896, 3140000,
    ]  # fmt: skip
    assert [w.digits for w in numbers("0.0577, 1,048,576, 3.10e6")] == [3, 7, 3]
    assert not list(numbers("x1 w2 d_k2"))  # names are not numbers
    assert [w.value for w in numbers("(512,2048)")] == [512, 2048]
    assert round_significant(3145728, 2) == 3.1e6


# -- the key of each exercise's answer -------------------------------------------------------------


class _Seen(Exception):
    pass


def _draws(fraction: float) -> Optional[torch.Tensor]:
    """20,000 draws of tokens 0, 1, 2, ``fraction`` of them token 0 (temperature-experiment)."""
    if not 0 < fraction < 1:
        return None
    zeros = round(20_000 * fraction)
    rest = 20_000 - zeros
    draws = torch.tensor([0] * zeros + [1] * (rest - rest // 3) + [2] * (rest // 3))
    return draws[torch.randperm(20_000, generator=torch.Generator().manual_seed(0))]


#: How a number written in the text becomes an answer for ``check`` (default: the number itself).
AS_ANSWER = {"language-model/temperature-experiment": _draws}


def _number_answer(exercise) -> Tuple[Optional[float], Optional[str]]:
    """``(the stored answer, what the checker calls it)`` of an exercise graded by
    ``check_number``, read by calling its checker with ``check_number`` replaced by a spy (in
    the checker's module and in ``_core``, where helpers such as ``check_line_number`` call it)."""
    scope = exercise.checker.__globals__
    if "check_number" not in scope:
        return None, None
    seen = {}

    def spy(answer, concealed_answer, concealed_mistakes, *, what, **_kwargs):
        seen.update(value=float(reveal(concealed_answer)), what=what)
        raise _Seen

    original, in_core = scope["check_number"], _core.check_number
    scope["check_number"] = _core.check_number = spy
    make = AS_ANSWER.get(exercise.exercise_id)
    probes = [make(0.5)] if make else NUMBER_PROBES
    try:
        for probe in probes:
            try:
                exercise.checker(probe)
            except _Seen:
                break
            except Exception:  # noqa: BLE001 - a checker that grades no number, or not this one
                pass
    finally:
        scope["check_number"], _core.check_number = original, in_core
    return seen.get("value"), seen.get("what")


def _concealed_values(exercise) -> Iterator[object]:
    """The decoded concealed answers the checker reads (not its mistakes, not its solution)."""
    scope = exercise.checker.__globals__
    for name in exercise.checker.__code__.co_names:
        value = scope.get(name)
        if not isinstance(value, str) or name.endswith(("_MISTAKES", "_SOLUTION")):
            continue
        if not re.fullmatch(r"_[A-Z0-9_]+", name):
            continue
        try:
            text = reveal(value)
        except Exception:  # noqa: BLE001 - not a concealed text
            continue
        try:
            yield json.loads(text)
        except ValueError:
            yield text


_WILD = r"(?:[A-Za-z_]\w*(?:\.\w+)*|-?\d+(?:\.\d+)?)"


def _tokens(code: str) -> List[str]:
    return re.findall(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|\S", code)


def normalized_code(source: str) -> str:
    """Python code without comments, with one spelling of spacing and line breaks."""
    # IPython magics are not Python
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.unparse(ast.parse("\n".join(lines)))
    except SyntaxError:
        return source


@dataclass(frozen=True)
class CodeKey:
    shown: str  # the code, as the report shows it
    pattern: str  # the regular expression that finds it in normalised code


def _code_key(code: str, free: frozenset = frozenset()) -> CodeKey:
    pattern = r"\s*".join(_WILD if t in free else re.escape(t) for t in _tokens(code))
    return CodeKey(code, r"(?<![\w.])" + pattern + r"(?!\w)")


class _Inline(ast.NodeTransformer):
    def __init__(self, values: Dict[str, ast.expr]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.values.get(node.id, node)


def _returned(function: ast.FunctionDef) -> Optional[str]:
    """What a straight-line solution returns, its local names replaced by what they hold."""
    values: Dict[str, ast.expr] = {}
    for statement in function.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            values[statement.targets[0].id] = _Inline(values).visit(statement.value)
        elif isinstance(statement, ast.Return) and statement.value is not None:
            node = _Inline(values).visit(statement.value)
            if isinstance(node, ast.Name):
                return None
            text = ast.unparse(node)
            return text[1:-1] if isinstance(node, ast.Tuple) else text
        else:
            return None  # a branch, a loop, an unpacking: not one expression
    return None


def code_keys(function) -> Tuple[List[CodeKey], List[CodeKey]]:
    """``(returned, whole)`` of a reference solution. ``returned``: what a straight-line
    solution returns, written with the solution's own names (``w1, w2.T``). ``whole``: each
    statement's expression, the solution's names free, when it has two names of its own or
    more (``k.repeat_interleave(4, dim=1)`` for ``x.repeat_interleave(n_rep, dim=1)``); the
    code above holds the solution when it holds all of them."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return [], []
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        return [], []
    names = {
        a.arg
        for f in ast.walk(func)
        if isinstance(f, (ast.FunctionDef, ast.Lambda))
        for a in f.args.args + f.args.kwonlyargs
    }
    names |= {
        n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    returned = _returned(func)
    whole = []
    for node in ast.walk(func):
        if isinstance(node, (ast.Return, ast.Assign, ast.AugAssign)) and node.value is not None:
            text = ast.unparse(node.value)
            whole.append(_code_key(text, frozenset(names)))
    return ([_code_key(returned)] if returned else []), whole


def fixed_lines(worked: str) -> List[CodeKey]:
    """The code lines of a worked answer (indented by four spaces): the fixed line of a
    find-the-bug exercise answered with a line number or a letter."""
    keys = []
    for line in worked.splitlines():
        if line.startswith("    ") and line.strip():
            keys.append(_code_key(normalized_code(line.strip())))
    return keys


@dataclass
class Key:
    """What gives one exercise's answer away."""

    exercise_id: str
    value: Optional[float] = None  # the stored number answer
    accepts_numbers: bool = False  # check(id, a number written above) can pass
    phrases: Tuple[str, ...] = ()  # regular expressions, in prose, code and outputs
    source_only: Tuple[str, ...] = ()
    output_only: Tuple[str, ...] = ()
    statements: Tuple[CodeKey, ...] = ()  # any one found in the code above gives it away
    whole: Tuple[CodeKey, ...] = ()  # all found in the code above give it away
    giveaway_values: Tuple[float, ...] = ()

    def empty(self) -> bool:
        return not (
            self.value is not None
            or self.accepts_numbers
            or self.phrases
            or self.statements
            or self.whole
        )


def key(exercise_id: str) -> Key:
    exercise = _core._get(exercise_id)
    found = Key(exercise_id)
    value, what = _number_answer(exercise)
    if value is not None and what in ("line number",):
        line = int(value)
        found.phrases += (rf"\b[Ll]ine {line}\b", rf"第 ?{line} ?行")
        found.statements += tuple(fixed_lines(exercise.solution()))
    elif value is not None:
        found.value, found.accepts_numbers = value, True
    concealed = list(_concealed_values(exercise))
    for answer in concealed:
        if isinstance(answer, dict):  # shapes
            for shape in answer.values():
                if isinstance(shape, list) and all(isinstance(n, int) for n in shape):
                    inner = r",\s*".join(str(n) for n in shape)
                    found.phrases += (rf"[(\[]\s*{inner}\s*[)\]]",)
        elif isinstance(answer, str) and re.fullmatch(r"[a-e]", answer):  # a letter
            found.phrases += (rf"\b[Ll]ine \({answer}\)", rf"第 ?\({answer}\) ?行")
            found.statements += tuple(fixed_lines(exercise.solution()))
    if exercise.reference is not None:
        own, whole = code_keys(exercise.reference)
        found.statements += tuple(own)
        found.whole += tuple(whole)
    if value is None and not concealed and exercise.reference is None:
        found.accepts_numbers = True  # a measured number the checker computes itself
    for where, pattern in GIVEAWAYS.get(exercise_id, ()):
        if pattern.startswith("NUMBER "):
            found.giveaway_values += (float(pattern.split()[1]),)
        elif where == "source":
            found.source_only += (pattern,)
        elif where == "output":
            found.output_only += (pattern,)
        else:
            found.phrases += (pattern,)
    return found


_ACCEPTED: Dict[Tuple[str, float], bool] = {}


def _accepted(exercise_id: str, number: float) -> bool:
    if (exercise_id, number) not in _ACCEPTED:
        answer = AS_ANSWER.get(exercise_id, lambda x: x)(number)
        _ACCEPTED[exercise_id, number] = answer is not None and check(exercise_id, answer).passed
    return _ACCEPTED[exercise_id, number]


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def hits(answer: Key, text: str, *, code: bool, output: bool) -> List[str]:
    """What in ``text`` gives ``answer`` away."""
    found = []
    for number in numbers(text):
        if answer.value is not None and number.digits >= 2:
            if _same(number.value, round_significant(answer.value, number.digits)):
                found.append(number.text)
                continue
        for value in answer.giveaway_values:
            if number.digits >= 2 and _same(number.value, round_significant(value, number.digits)):
                found.append(number.text)
        if answer.accepts_numbers and (
            number.digits >= 2 or (answer.value is not None and _same(number.value, answer.value))
        ):
            if _accepted(answer.exercise_id, number.value):
                found.append(number.text)
    patterns = answer.phrases + (answer.output_only if output else answer.source_only)
    for pattern in patterns:
        found += [m.group(0) for m in re.finditer(pattern, text)]
    normal = normalized_code(text) if code else text
    found += [k.shown for k in answer.statements if re.search(k.pattern, normal)]
    return list(dict.fromkeys(found))


# -- the scan ---------------------------------------------------------------------------------------

KEYS = {e.exercise_id: key(e.exercise_id) for e in REGISTRY.values()}


def test_every_exercise_has_a_key():
    """Every registered exercise gives the scan something to look for."""
    assert not [i for i, k in KEYS.items() if k.empty()]


def _allowed(exercise_id: str, cell_source: str, hit: str) -> bool:
    return any(
        ident == exercise_id and where in cell_source and shown in (hit, None)
        for ident, where, shown in ALLOWED
    )


def _above(exercise_id: str, cells, start: int, *, outputs: bool) -> List[str]:
    answer = KEYS[exercise_id]
    shown = []
    code_above = []
    for index, cell in enumerate(cells[:start]):
        source = _source(cell)
        if outputs:
            measured = MEASURES.search(source) is not None
            texts = [] if measured else [_output_text(o) for o in cell.get("outputs", [])]
            found = [h for text in texts for h in hits(answer, text, code=False, output=True)]
        else:
            is_code = cell["cell_type"] == "code"
            found = hits(answer, source, code=is_code, output=False)
            if is_code:
                code_above.append((index, normalized_code(source)))
        for hit in found:
            if not _allowed(exercise_id, source, hit):
                first = source.strip().split("\n")[0][:70]
                shown.append(f"cell {index} ({cell['cell_type']}, {first!r}): {hit!r}")
    if not outputs and answer.whole:
        where = {
            k.shown: [index for index, code in code_above if re.search(k.pattern, code)]
            for k in answer.whole
        }
        if all(where.values()):
            shown.append(
                "the code above holds the whole solution: "
                + "; ".join(f"{code!r} (cell {cells[0]})" for code, cells in where.items())
            )
    return shown


def _output_text(output) -> str:
    if "text" in output:
        return "".join(output["text"])
    data = output.get("data", {})
    for kind in ("text/plain", "text/markdown", "text/html"):
        if kind in data:
            return "".join(data[kind])
    return ""


def _cases():
    cases = []
    for path in CHAPTERS:
        for edition, folder in EDITIONS.items():
            notebook = folder / path.name
            if notebook.exists():
                cells = json.loads(notebook.read_text())["cells"]
                cases += [(edition, notebook, i, s) for i, s in exercises(cells)]
    return cases


CASES = _cases()


def test_every_edition_has_the_same_exercises():
    """The Colab editions' exercises are found as the book's are (tests/test_reading_aids.py
    checks the book's against the package), and each is registered."""
    found = {edition: set() for edition in EDITIONS}
    for edition, _, exercise_id, _ in CASES:
        found[edition].add(exercise_id)
    assert found["book"] and found["book"] <= set(KEYS)
    for edition in EDITIONS:
        assert found[edition] == found["book"], edition


@pytest.mark.parametrize(
    "edition, notebook, exercise_id, start", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES]
)
def test_answer_not_above(edition, notebook, exercise_id, start):
    cells = json.loads(notebook.read_text())["cells"]
    shown = _above(exercise_id, cells, start, outputs=False)
    assert not shown, (
        f"{notebook.relative_to(ROOT)}: the answer of {exercise_id} is given away above it:\n"
        + "\n".join(shown)
    )


BOOK_CASES = [c for c in CASES if c[0] == "book"]


@pytest.mark.parametrize(
    "notebook, exercise_id", [c[1:3] for c in BOOK_CASES], ids=[c[2] for c in BOOK_CASES]
)
def test_answer_not_in_executed_outputs_above(notebook, exercise_id):
    cells = executed_cells(notebook)
    current = json.loads(notebook.read_text())["cells"]
    if [_source(c) for c in cells] != [_source(c) for c in current]:
        pytest.skip(
            f"{(EXECUTED / notebook.name).relative_to(ROOT)} is older than"
            f" {notebook.relative_to(ROOT)}: rebuild the book to check its outputs"
        )
    start = dict(exercises(cells))[exercise_id]
    shown = _above(exercise_id, cells, start, outputs=True)
    assert not shown, (
        f"{notebook.name}: the answer of {exercise_id} is printed above it:\n" + "\n".join(shown)
    )


def _cell(kind: str, source: str, output: str = "") -> dict:
    cell = {"cell_type": kind, "source": source}
    if output:
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": output}]
    return cell


@pytest.mark.parametrize(
    "exercise_id, cell, outputs",
    [  # the leaks of issue 31, as the chapters had them, and one of each kind of key
        (
            "all-attention/parameter-count",
            _cell("code", "print(f'{all_attention_layer_parameters(512, 2048):,}')", "3,145,728"),
            True,
        ),
        ("all-attention/parameter-count", _cell("markdown", "about 3.1M parameters"), False),
        (
            "all-attention/parameter-count",
            _cell("markdown", "an all-attention layer $4d^2 + 2Nd$"),
            False,
        ),
        ("inference/mqa-gap", _cell("code", "...", "1 K/V heads: +0.515 nats after pooling"), True),
        (
            "inference/repeat-kv",
            _cell("code", "assert torch.equal(repeat_kv(k, 4), k.repeat_interleave(4, dim=1))"),
            False,
        ),
        ("dot-product/score-variance", _cell("markdown", "its variance is $d_k$ and"), False),
        ("dot-product/score-variance", _cell("markdown", "它的方差是 $d_k$，"), False),
        (
            "all-attention/ffn-as-attention",
            _cell("code", "sdpa(x[:, None], w1, w2.T, scale=1.0)"),
            False,
        ),
        ("cross-attention/shapes", _cell("code", "assert output.shape == (2, 5, 48)"), False),
        ("complexity/find-the-bug", _cell("markdown", "the bug is on line 13"), False),
        ("cross-attention/which-bug", _cell("markdown", "Line (d) is wrong"), False),
        ("inference/cache-bytes", _cell("markdown", "1.25 GiB per sequence"), False),
        ("complexity/causal-cells", _cell("markdown", "53 % of the scores"), False),
        ("language-model/initial-loss", _cell("markdown", "the loss starts at ln V"), False),
        ("multi-head/dropout-row-sum", _cell("code", "...", "std 0.3171"), True),
    ],
)
def test_the_scan_finds_a_known_leak(exercise_id, cell, outputs):
    cells = [cell, _cell("markdown", "```{exercise-start} ...")]
    assert _above(exercise_id, cells, 1, outputs=outputs)


@pytest.mark.parametrize(
    "exercise_id, text",
    [
        ("all-attention/parameter-count", "3.2e6 or 3,145,729 or 4d^2 + 2d"),
        ("inference/repeat-kv", "k.repeat(1, 4, 1, 1) and repeat_kv(k, 4)[:, i]"),
        ("dot-product/score-variance", "its typical size grows like $\\sqrt{d_k}$"),
        ("multi-head/dropout-row-sum", "std 0.25 and p = 0.5"),
    ],
)
def test_the_scan_leaves_other_text_alone(exercise_id, text):
    cells = [_cell("code", text, text), _cell("markdown", "```{exercise-start} ...")]
    assert not _above(exercise_id, cells, 1, outputs=False)
    assert not _above(exercise_id, cells, 1, outputs=True)
