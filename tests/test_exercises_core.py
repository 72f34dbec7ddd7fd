"""The exercise machinery: check/hint/solution, results, the registry and concealed answers."""

import collections
import functools
import json
import re
from pathlib import Path

import pytest
import torch
from exercise_helpers import REGISTRY, stub
from helpers import ROOT

import attncourse
from attncourse.exercises import check, hint, list_exercises, set_language, solution
from attncourse.exercises._core import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    Reveal,
    conceal,
    reveal,
)


def test_every_exercise_has_a_title_hint_and_solution():
    listed = list_exercises()
    assert len(listed) >= 3 and len({e["id"] for e in listed}) == len(listed)
    for entry in listed:
        assert entry["title"]
        assert isinstance(hint(entry["id"]), Reveal) and hint(entry["id"]).text.strip()
        assert isinstance(solution(entry["id"]), Reveal) and solution(entry["id"]).text.strip()


def test_unknown_exercise_names_the_nearest_known_ones():
    with pytest.raises(KeyError, match="dot-product/attention"):
        check("dot-product/attentoin", 1)


@pytest.mark.parametrize("exercise_id", sorted(REGISTRY))
def test_untouched_stubs_are_not_attempted(exercise_id):
    for untouched in (stub, ..., None):
        result = check(exercise_id, untouched)
        if untouched is stub and not REGISTRY[exercise_id].solution_is_code:
            assert result.status in (FAILED, NOT_ATTEMPTED)  # a value exercise given a function
            continue
        assert result.status == NOT_ATTEMPTED and not result.passed, result


def test_results_display_as_text_and_html():
    passed = check("dot-product/score-variance", 64)
    failed = check("dot-product/score-variance", 8)
    assert passed.passed and bool(passed) and passed.status == PASSED
    assert not failed.passed and failed.status == FAILED
    assert "dot-product/score-variance" in str(failed) and "hint(" in str(failed)
    assert "<div" in passed._repr_html_() and "passed" in passed._repr_html_()


def test_hints_and_solutions_are_collapsed_in_html():
    for reveal_obj in (hint("dot-product/attention"), solution("dot-product/attention")):
        html = reveal_obj._repr_html_()
        assert html.startswith("<details") and "</details>" in html
    assert "<pre>" in solution("dot-product/attention")._repr_html_()  # code keeps its layout


def test_conceal_round_trip_and_unreadable():
    text = "the answer is 64"
    assert reveal(conceal(text)) == text
    assert "64" not in conceal(text) and "answer" not in conceal(text)


def test_value_answers_are_not_readable_in_the_package_or_the_notebooks():
    """The worked solution of every value exercise appears nowhere in plain text."""
    sources = [p.read_text() for p in Path(attncourse.__file__).parent.rglob("*.py")]
    sources += [json.dumps(json.loads(p.read_text())) for p in (ROOT / "book").glob("*.ipynb")]
    for ex in REGISTRY.values():
        if ex.solution_is_code:
            continue
        worked = ex.solution()
        for sentence in (s.strip() for s in worked.split(".") if len(s.strip()) > 25):
            assert not any(sentence in source for source in sources), (ex.exercise_id, sentence)


# -- an unknown exercise id: the nearest ids, in the learner's language ---------------------------


@pytest.mark.parametrize(
    "typed, nearest",
    [
        ("inference/repeat_kv", "inference/repeat-kv"),
        ("repeat-kv", "inference/repeat-kv"),
        ("dot-product/atention", "dot-product/attention"),
        ("Masking/Causal-Mask", "masking/causal-mask"),
    ],
)
def test_an_unknown_id_names_the_nearest_ones(typed, nearest):
    for call in (lambda: check(typed, 1), lambda: hint(typed), lambda: solution(typed)):
        with pytest.raises(KeyError) as raised:
            call()
        message = str(raised.value)
        assert f"Did you mean {nearest!r}" in message or f"{nearest!r} or" in message, message
        assert "list_exercises()" in message
        assert len(message) < 300  # the nearest few, not all the ids
        assert message.count("/") <= 8


def test_an_unknown_id_far_from_all_says_so_and_where_to_look():
    with pytest.raises(KeyError) as raised:
        check("no/such-exercise", 1)
    message = str(raised.value)
    assert "no exercise id is close" in message and "list_exercises()" in message
    assert "dot-product/" in message and "dot-product/attention" not in message
    with pytest.raises(KeyError):
        check(42, 1)  # not a string: no crash, the same KeyError


def test_an_unknown_id_in_chinese():
    set_language("zh")
    try:
        with pytest.raises(KeyError) as raised:
            hint("inference/repeat_kv")
        message = str(raised.value)
        assert "你是不是想找" in message and "'inference/repeat-kv'" in message
    finally:
        set_language("en")


def test_a_caller_chooses_the_language_of_one_answer():
    """``language=`` speaks Chinese for one call and leaves the session's language as it was,
    also when the call raises; the session's own choice still holds without it."""
    from attncourse.exercises import get_language

    def wrong(query, key):
        return query @ key.transpose(-2, -1)  # not scaled

    english = check("dot-product/scores", wrong)
    chinese = check("dot-product/scores", wrong, language="zh")
    assert not chinese.passed and chinese.message != english.message
    assert re.search(r"[\u4e00-\u9fff]", chinese.message) and get_language() == "en"
    assert check("dot-product/scores", wrong).message == english.message
    assert re.search(r"[\u4e00-\u9fff]", hint("dot-product/scores", language="zh").text)
    assert re.search(r"[\u4e00-\u9fff]", solution("dot-product/scores", language="zh").label)
    with pytest.raises(KeyError):
        hint("dot-product/no-such", language="zh")
    assert get_language() == "en"
    set_language("zh")
    try:
        assert check("dot-product/scores", wrong, language="en").message == english.message
        assert get_language() == "zh"
    finally:
        set_language("en")
    with pytest.raises(ValueError, match="language"):
        check("dot-product/scores", wrong, language="fr")


# -- the boxes of check, hint and solution: readable in light and dark mode ------------------------


def _luminance(colour: str) -> float:
    """WCAG 2.x relative luminance of a #rrggbb colour."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_contrast_ratio_is_wcags():
    assert round(contrast("#000000", "#ffffff"), 1) == 21.0
    assert round(contrast("#777777", "#ffffff"), 2) == 4.48  # the classic just-fails grey


def _rules(css: str) -> dict:
    """``{scope: {selector: {property: value}}}`` of the emitted style sheet: scope "" for the
    light rules, the media query or the theme selector for the dark ones."""
    found: dict = {}
    media = re.search(r"@media \(prefers-color-scheme: dark\)\{(.*?\})\}", css)
    assert media, "no prefers-color-scheme: dark rules"
    plain = css.replace(media.group(0), "")
    blocks = [("@media", media.group(1)), ("", plain)]
    for where, text in blocks:
        for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", text):
            selector = selector.strip()
            scope = where
            for prefix in (":root:not([data-theme=light]) ", "html[data-theme=dark] ",
                           "body[data-jp-theme-light=false] "):  # fmt: skip
                if selector.startswith(prefix):
                    scope = f"{where} {prefix.strip()}".strip()
                    selector = selector[len(prefix) :]
            props = dict(
                (k.strip(), v.strip()) for k, v in (p.split(":", 1) for p in body.split(";") if p)
            )
            found.setdefault(scope, {}).setdefault(selector, {}).update(props)
    return found


@pytest.mark.parametrize(
    "shown",
    [
        lambda: check("dot-product/score-variance", 64),
        lambda: check("dot-product/score-variance", 8),
        lambda: check("dot-product/score-variance", ...),
        lambda: hint("dot-product/attention"),
        lambda: solution("dot-product/attention"),
    ],
    ids=["passed", "failed", "not-attempted", "hint", "solution"],
)
def test_boxes_meet_wcag_aa_in_light_and_dark_mode(shown):
    """Every colour the HTML sets, text on its background, is 4.5:1 or more in the light scheme
    and in each way a page can be dark: the system (prefers-color-scheme), the book's theme
    (data-theme=dark) and JupyterLab's (data-jp-theme-light=false). No colour is set inline,
    where the dark rules could not override it."""
    page = shown()._repr_html_()
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    body = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    assert not re.search(r"style=\"[^\"]*color", body), "an inline colour: dark mode cannot undo it"
    box_class = re.search(r'class="(attncourse-box[^"]*)"', body).group(1).split()
    rules = _rules(css)
    scopes = {"": "light", "@media :root:not([data-theme=light])": "system dark",
              "html[data-theme=dark]": "book dark", "body[data-jp-theme-light=false]": "lab dark"}  # fmt: skip
    assert set(scopes) <= set(rules), set(rules)
    for scope, name in scopes.items():
        box = rules[scope][".attncourse-box"]
        text, background = box["color"], box["background"]
        assert contrast(text, background) >= 4.5, (name, text, background)
        for kind in ("passed", "failed", "pending"):
            status = rules[scope][f".attncourse-{kind} .attncourse-status"]["color"]
            assert contrast(status, background) >= 4.5, (name, kind, status, background)
        # a <pre> (a solution's code) takes the box's colours, not the page's light ones
        pre = rules[scope][".attncourse-box pre"]
        assert (pre["color"], pre["background"]) == ("inherit", "transparent")
    assert "attncourse-box" in box_class


# -- numbers as a learner walking the Colab notebooks wrote them ----------------------------------


@pytest.mark.parametrize(
    "answer, words",
    [
        # a number with its unit: the number alone may be in another unit
        ("1.25 GiB", "in the unit the exercise asks for"),
        ("1342177280 bytes", "in the unit the exercise asks for"),
        # thousands separators: without the quotes Python reads a tuple
        ("1,342,177,280", "give the number itself, 1342177280,"),
        ("line 7", "give the number itself, 7,"),
    ],
)
def test_a_number_written_as_text_is_told_how_to_write_it(answer, words):
    message = check("inference/cache-bytes", answer).message
    assert words in message, message


def test_a_refused_number_is_never_printed_as_the_right_one():
    """A format such as {value:,.0f} rounded 1342177280.5 to the right answer, 1,342,177,280,
    and called it wrong."""
    message = check("inference/cache-bytes", 1342177280.5).message
    assert "1,342,177,280.5" in message, message
    assert "1,342,177,279 bytes" in check("inference/cache-bytes", 1342177279.0).message


def test_python_min_and_max_on_tensors_are_named():
    def soft_mask(distance, span, ramp):
        return min(max((ramp + span - distance) / ramp, 0), 1)

    message = check("adaptive-span/soft-mask", soft_mask).message
    assert "RuntimeError" in message and "torch.clamp" in message, message


def test_a_list_indexed_by_a_tensor_is_named():
    """alibi_slopes() gives a list; slopes[h] in a score_mod fails inside torch in English."""
    from attncourse.positions import alibi_slopes

    def alibi(num_heads, query_len, key_len):
        slopes = alibi_slopes(num_heads)
        return lambda score, b, h, q, k: score - slopes[h] * (q + key_len - query_len - k)

    message = check("flex/alibi-score-mod", alibi).message
    assert "torch.tensor(values)" in message, message


def test_a_solutions_code_copied_from_the_page_runs_as_pasted():
    """A text solution's code block was shown indented by four spaces (its source's): pasted
    into a cell it raised IndentationError. Its <pre> now holds the code without the indent."""
    import html as html_module

    page = solution("multi-head/dropout-row-sum")._repr_html_()
    blocks = [html_module.unescape(b) for b in re.findall(r"<pre>(.*?)</pre>", page, re.S)]
    assert blocks and not blocks[0].startswith(" "), blocks
    compile(blocks[0], "<pasted>", "exec")
    assert "\n\n" not in page.split("</pre>")[-1].split("</details>")[0]


def test_a_wrong_dtype_does_not_hide_the_mistake_in_the_values():
    """The dtype rule is checked after the values: a hard mask returned in float32 is named as
    a hard mask first, with the dtype as a second remark; right values in the wrong dtype get
    the dtype remark alone; the same values in the right dtype are not told about dtypes."""
    hard = check("adaptive-span/soft-mask", lambda d, s, r: (d <= s).float())
    assert hard.status == FAILED
    first, also = hard.message.split("\nAlso: ")[:2]
    assert "hard mask" in first and "float64" not in first
    assert also.startswith("Your function was given torch.float64 tensors and returned a")

    right_values = check(
        "adaptive-span/soft-mask", lambda d, s, r: ((r + s - d) / r).clamp(0, 1).float()
    )
    assert right_values.status == FAILED
    assert right_values.message.startswith("Your function was given torch.float64 tensors")
    assert "Also:" not in right_values.message

    assert (
        "Also:" not in check("adaptive-span/soft-mask", lambda d, s, r: (d <= s).double()).message
    )
    assert check("adaptive-span/soft-mask", lambda d, s, r: ((r + s - d) / r).clamp(0, 1)).passed


def _float32_repeat_kv(x, n_rep):
    """Right values, built in a float32 buffer (torch.zeros without a dtype)."""
    batch, heads, length, width = x.shape
    out = torch.zeros(batch, heads * n_rep, length, width)
    for i in range(heads * n_rep):
        out[:, i] = x[:, i // n_rep]
    return out


def _bfloat16_shifted_loss(logits, tokens):
    """Right, in bfloat16: its rounding lands on a known wrong shift's loss within 1e-4."""
    logits = logits.bfloat16()
    flat = logits[:, :-1].reshape(-1, logits.size(-1))
    return torch.nn.functional.cross_entropy(flat, tokens[:, 1:].reshape(-1))


def _unscaled_attention_as_named_tuple(query, key, value, mask=None, *, scale=None):
    weights = torch.softmax(query @ key.transpose(-2, -1), dim=-1)  # not scaled
    return collections.namedtuple("Out", "output weights")(
        (weights @ value).float(), weights.float()
    )


@pytest.mark.parametrize(
    "exercise_id, answer",
    [
        ("inference/repeat-kv", _float32_repeat_kv),
        ("language-model/shifted-loss", _bfloat16_shifted_loss),
        ("dot-product/scores", lambda q, k: (q.half() @ k.half().mT) / q.size(-1) ** 0.5),
    ],
)
def test_right_values_in_a_lower_precision_are_told_only_the_dtype(exercise_id, answer):
    """Rounding to float32 or below must not read as a mistake in the values: the verdict is
    the dtype message alone (before naming known mistakes first, these were told their
    values were wrong, the bfloat16 loss even that it was shifted the wrong way)."""
    result = check(exercise_id, answer)
    assert result.status == FAILED
    assert result.message.startswith("Your function was given torch.float64 tensors"), result
    assert "Also:" not in result.message


def test_a_named_tuple_in_the_wrong_dtype_gets_its_known_mistake_named():
    result = check("dot-product/attention", _unscaled_attention_as_named_tuple)
    first, also = result.message.split("\nAlso: ")[:2]
    assert "not scaled" in first and also.startswith("Your function was given torch.float64")


def _statement(line: str) -> bool:
    """Whether ``line`` alone is a Python statement that does something (a call, a with or a
    for): code, not prose."""
    import ast

    try:
        tree = ast.parse(line.strip() + ("\n    pass" if line.rstrip().endswith(":") else ""))
    except SyntaxError:
        return False
    return any(isinstance(node, (ast.Call, ast.With, ast.For)) for node in ast.walk(tree))


@pytest.mark.parametrize("language", ["en", "zh"])
def test_every_text_solutions_code_stands_on_its_own_indented_lines(language):
    """The page shows a text solution's indented lines as code and joins its other lines into
    prose: code written without the indent came out as one line that raised SyntaxError when
    pasted (language-model/temperature-experiment, in both languages). Every code block that
    is shown must also compile once its indent is removed (tables of numbers aside)."""
    import html as html_module

    from attncourse.exercises._core import _REGISTRY

    for exercise_id, entry in _REGISTRY.items():
        if entry.solution_is_code:
            continue
        shown = solution(exercise_id, language=language)
        prose = [line for line in shown.text.splitlines() if not line.startswith(" ")]
        assert not [line for line in prose if _statement(line)], (exercise_id, prose)
        page = shown._repr_html_()
        for block in re.findall(r"<pre>(.*?)</pre>", page, re.S):
            code = html_module.unescape(block)
            if any(_statement(line) for line in code.splitlines()):
                compile(code, f"<{exercise_id}>", "exec")


@pytest.mark.parametrize(
    "answer, advice",
    [
        ("ln 63", "looks like a formula"),  # was told to give "the number itself, 63": V
        ("math.log(63)", "looks like a formula"),
        ("四点一四", "with digits"),  # was told to remove the quotes: a NameError
        ("four", "with digits"),
        ("4.14", "remove the quotes"),
        ("约4.14", "the number itself, 4.14"),
    ],
)
def test_a_number_written_as_text_gets_advice_that_works(answer, advice):
    assert advice in check("language-model/initial-loss", answer).message


def test_the_learners_text_is_echoed_as_written_in_chinese():
    """The Chinese messages set Latin words off by spaces; the learner's own string, quoted,
    must come back unchanged ('约4.14' was echoed as ' 约 4.14')."""
    message = check("language-model/initial-loss", "约4.14", language="zh").message
    assert "'约4.14'" in message, message


@pytest.mark.parametrize(
    "answer, shown", [(1_060_000, "1,060,000"), (4 * 512**2 + 256, "1,048,832")]
)
def test_a_refused_count_is_shown_as_a_whole_number(answer, shown):
    """{value:g} printed 1060000 as 1.06e+06 and 1048832 as 1,048,832.0 (1,050,000, the
    answer rounded, is told so: test_a_rounded_count_is_told_to_be_computed_exactly)."""
    message = check("multi-head/parameter-count", answer).message
    assert message.startswith(f"{shown} is not it"), message


def test_a_rounded_count_is_told_to_be_computed_exactly():
    """1,050,000 for 1,050,624 parameters is the count rounded: the method is right."""
    message = check("multi-head/parameter-count", 1_050_000).message
    assert "rounded to 3 significant digits" in message, message
    assert "is not it" not in message


def _as_list(reference):
    """The reference, returning a list where it returns a tuple: ``return [out, weights]``."""

    @functools.wraps(reference)
    def answer(*args, **kwargs):
        result = reference(*args, **kwargs)
        return list(result) if type(result) is tuple else result

    return answer


#: Every coding exercise but the kernels (Triton's interpreter) and FlexAttention (a compile):
#: none of those returns a tuple, and they take seconds each.
TUPLE_ANSWERS = [
    exercise_id
    for exercise_id, entry in REGISTRY.items()
    if entry.answer_is_function and "gpu/" not in exercise_id and "flex/" not in exercise_id
]


@pytest.mark.parametrize("exercise_id", TUPLE_ANSWERS)
def test_a_pair_returned_as_a_list_is_as_right_as_a_tuple(exercise_id):
    """The statements ask for "a pair (output, weights)": a list of the right two is right too
    (the checkers of chapters 6 and 9 refused ``[keys, values]`` with "got list")."""
    result = check(exercise_id, _as_list(REGISTRY[exercise_id].reference))
    assert result.passed, result


def _number_note(answer, right_value, mistakes, **tolerances):
    """What :func:`check_number` says: its note for a right answer, else the Mistake's words."""
    from attncourse.exercises._core import Mistake, check_number

    try:
        return check_number(
            answer,
            conceal(repr(right_value)),
            conceal(json.dumps(mistakes)),
            what="count",
            right="right",
            otherwise="other {value}",
            **tolerances,
        )
    except Mistake as mistake:
        return str(mistake)


def test_check_number_edges_a_mutation_audit_found():
    # a mistake at zero is named within mistake_rel_tol of 1 (a relative tolerance of 0 is none)
    assert _number_note(0.05, 7, {"0": "forgot it"}, mistake_rel_tol=0.1) == "forgot it"
    # mistake_rel_tol, not rel_tol, decides the known wrong values
    assert _number_note(103, 7, {"100": "off"}, rel_tol=0.0, mistake_rel_tol=0.05) == "off"
    assert _number_note(103, 7, {"100": "off"}, rel_tol=0.0).startswith("other 103")
    # an exact answer rounded to six significant digits is named as such
    assert "rounded to 6 significant digits" in _number_note(1234570, 1234567, {})


def test_choice_shape_and_tensor_edges_a_mutation_audit_found():
    from attncourse.exercises._core import Mistake, as_shape, choice, expect_tensor

    with pytest.raises(Mistake, match="you gave several"):
        choice("ab", ["a", "b", "c"])  # two letters run together
    with pytest.raises(Mistake, match="sizes are never negative"):
        as_shape((-1, 3))
    with pytest.raises(Mistake, match="ordinary dense tensor"):
        expect_tensor(torch.empty(2, 3, device="meta"), (2, 3), "x")


class _Agreeable(torch.Tensor):
    """A tensor subclass whose comparisons always say yes, as a learner could write."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.allclose, torch.Tensor.equal, torch.isclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize(
    "exercise_id, answer",
    [
        (
            "masking/padding-mask",
            lambda lengths, max_len: torch.zeros(len(lengths), max_len, dtype=torch.bool),
        ),
        (
            "masking/causal-mask",
            lambda query_len, key_len: torch.ones(query_len, key_len, dtype=torch.bool),
        ),
        ("inference/repeat-kv", lambda x, n_rep: x.repeat(1, n_rep, 1, 1)),
    ],
)
def test_a_tensor_subclass_is_graded_on_its_data_not_its_comparisons(exercise_id, answer):
    def agreeable(*args):
        return answer(*args).as_subclass(_Agreeable)

    assert not check(exercise_id, answer).passed
    assert not check(exercise_id, agreeable).passed


def test_a_tuple_of_the_wrong_length_is_told_its_length():
    def triple(target, source, w_q, w_k, w_v, source_mask):
        return (torch.zeros(1, dtype=target.dtype),) * 3

    message = check("cross-attention/single-head", triple).message
    assert "Return a pair (output, weights); got tuple of length 3." in message, message


def test_an_answer_that_rebinds_torch_allclose_is_still_compared(monkeypatch):
    """The checkers compare with torch's own allclose, held by the package: an answer that
    rebinds torch.allclose to a yes-sayer fools its own code only."""

    def rebinds_allclose(query, key, value, mask=None, *, scale=None):
        monkeypatch.setattr(torch, "allclose", lambda *args, **kwargs: True)
        zeros = torch.zeros(*query.shape[:-1], key.size(-2), dtype=query.dtype)
        return zeros[..., : value.size(-1)].clone(), zeros

    assert not check("dot-product/attention", rebinds_allclose).passed


def test_a_scale_written_as_a_number_is_named_as_the_scale():
    message = check("dot-product/scores", lambda q, k: q @ k.transpose(-2, -1) / 3).message
    assert "times 0.3333, not 1/sqrt(16)" in message, message
