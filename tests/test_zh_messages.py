"""check(), hint() and solution() in Chinese: the catalogues, the language switch, the book's
second rendering, and what stays concealed.

Every check() of the checker tests also runs in Chinese (tests/conftest.py,
``_checks_in_chinese_too``): same path, same mistakes named, every message translated. This
module tests the rest: that the catalogues hold every message of the source, translated, with
the English's placeholders and the glossary's terms; that the compiled catalogues the package
ships are the translators' files; that a learner chooses the language once; that the book's
single execution carries the Chinese rendering the Chinese pages show; and that nothing the
English source conceals is readable in the Chinese catalogues.
"""

from __future__ import annotations

import ast
import gettext
import importlib
import json
import re

import pytest
import torch
from project_tools import tool

from attncourse.exercises import (
    _core,
    _i18n,
    check,
    get_language,
    hint,
    list_exercises,
    set_language,
    solution,
)

messages = tool("zh_messages")
zh = tool("zh_edition")
EXERCISES = [e["id"] for e in list_exercises()]


@pytest.fixture
def chinese():
    before = get_language()
    set_language("zh")
    yield
    set_language(before)


def test_every_message_of_the_source_is_translated():
    counts = messages.status()
    assert counts["messages"] > 600
    assert counts["translated"] == counts["messages"], counts


def test_translations_keep_placeholders_code_and_terms():
    assert messages.problems() == []


def test_the_shipped_catalogues_are_the_translators_files():
    for po in (messages.PLAIN, messages.CONCEALED):
        with po.open("rb") as handle:
            source = messages.read_po(handle)
        expected = {m.id: m.string for m in source if m.id and m.string and not m.fuzzy}
        with po.with_suffix(".mo").open("rb") as handle:
            compiled = gettext.GNUTranslations(handle)._catalog
        compiled = {k: v for k, v in compiled.items() if k}
        assert compiled == expected, f"{po.name}: run python tools/zh_messages.py update"


def test_the_placeholder_check_sees_a_lost_or_renamed_field():
    assert messages.fields("{what} has shape {shape!r}") == ["shape!r:", "what!:"]
    assert messages.fields("{what} 的形状是 {shape}") != messages.fields(
        "{what} has shape {shape!r}"
    )
    assert messages.english_runs("{what} 应当是 boolean tensor with the right shape") != []
    assert messages.english_runs("用 torch.arange(max_len) 与 lengths[:, None] 比较") == []


def test_the_language_is_chosen_once_and_english_is_the_default():
    assert _i18n.LANGUAGES["en"] is None
    before = get_language()
    try:
        set_language("zh")
        assert get_language() == "zh"
        chinese = check("masking/padding-mask", lambda lengths, max_len: lengths)
        set_language("en")
        english = check("masking/padding-mask", lambda lengths, max_len: lengths)
    finally:
        set_language(before)
    assert chinese.status == english.status == "failed"  # the status stays English (code reads it)
    assert zh._CJK.search(chinese.message) and not zh._CJK.search(english.message)
    assert "未通过" in str(chinese) and "failed" in str(english)


@pytest.mark.parametrize("code", ["zh", "zh_CN", "zh-Hans", "ZH", " en "])
def test_language_codes_a_reader_may_write(code):
    with _i18n.language(code):
        assert get_language() in ("zh", "en")


@pytest.mark.parametrize(
    "code, error", [("fr", ValueError), ("", ValueError), (None, TypeError), (1, TypeError)]
)
def test_a_language_without_a_catalogue_is_refused_by_name(code, error):
    with pytest.raises(error, match="language"):
        set_language(code)
    assert get_language() == "en"


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_hints_titles_and_worked_solutions_in_chinese(exercise_id, chinese):
    english_hint = _core._get(exercise_id).hint
    shown = hint(exercise_id)
    assert zh._CJK.search(shown.text) and shown.text != english_hint
    assert "提示" in shown.label
    title = next(e["title"] for e in list_exercises() if e["id"] == exercise_id)
    assert zh._CJK.search(title)
    shown = solution(exercise_id)
    if shown.code:  # a reference implementation: code, the same in both languages
        assert shown.text == _core._get(exercise_id).solution()
    else:
        assert zh._CJK.search(shown.text), shown.text


def test_the_books_single_execution_carries_the_chinese_rendering(monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_EXTRA_LANGUAGES", "zh")
    result = check("masking/padding-mask", lambda lengths, max_len: lengths)
    data, metadata = result._repr_mimebundle_()
    assert "failed" in data["text/plain"]
    other = metadata["attncourse"]["zh"]
    assert "未通过" in other["text/plain"] and zh._CJK.search(other["text/html"])
    assert result.translations["zh"].status == result.status
    # the Chinese page shows that rendering in place of the English one
    cell = {"outputs": [{"output_type": "execute_result", "data": data, "metadata": metadata}]}
    zh._swap_outputs(cell)
    assert cell["outputs"][0]["data"] == other
    for reveal in (hint("masking/padding-mask"), solution("multi-head/parameter-count")):
        data, metadata = reveal._repr_mimebundle_()
        assert zh._CJK.search(metadata["attncourse"]["zh"]["text/html"])
    monkeypatch.delenv("ATTNCOURSE_EXTRA_LANGUAGES")
    assert not isinstance(check("masking/padding-mask", None)._repr_mimebundle_(), tuple)


def test_a_second_rendering_leaves_the_learners_objects_as_they_were(monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_EXTRA_LANGUAGES", "zh")
    layer = torch.nn.Linear(4, 4).train()
    before = [p.detach().clone() for p in layer.parameters()]
    check("multi-head/parameter-count", layer)
    assert layer.training and all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))


def test_nothing_concealed_is_readable_in_the_catalogues():
    plain, concealed = messages.messages()
    assert concealed, "the concealed messages were not found"
    files = [
        p.read_bytes()
        for p in messages.LOCALE.iterdir()
        if p.suffix in (".po", ".mo") and p.is_file()
    ]
    _plain, hidden = messages.catalogues()
    for english in concealed:
        chinese = hidden.get(english).string
        for text in (english, chinese):
            # long enough to be a giveaway, and not also a plain message of the source
            if len(text) > 12 and text not in plain:
                assert not any(text.encode() in f for f in files), text[:60]


def test_concealed_answers_in_chinese(chinese):
    worked = [e for e in EXERCISES if not _core._get(e).solution_is_code]
    assert worked
    for exercise_id in worked:
        english = _core._get(exercise_id).solution()
        assert solution(exercise_id).text != english
    # a known wrong value of a numeric exercise is named in Chinese
    wrong = json.loads(_core.reveal(_core_mistakes("multi-head/parameter-count")))
    value = float(next(iter(wrong)))
    result = check("multi-head/parameter-count", value)
    assert result.status == "failed" and zh._CJK.search(result.message)


def _core_mistakes(exercise_id: str) -> str:
    """The concealed known mistakes of the parameter-count exercise."""
    from attncourse.exercises import ch02_multihead

    assert exercise_id == "multi-head/parameter-count"
    return ch02_multihead._COUNT_MISTAKES


# -- what a learner reads is marked for translation, and set off from the Chinese around it ----


def test_every_message_a_learner_reads_is_marked_for_translation():
    """An English ``what`` handed to ``number`` or ``check_number``, or a known mistake's message
    used as a dict key, never passes through gettext: the bilingual run of the checker tests
    cannot see it, and a Chinese learner reads 'accuracy应为一个数'."""
    assert messages.unmarked_messages() == []


def test_the_unmarked_text_check_sees_each_form(tmp_path):
    source = tmp_path / "ch99_example.py"
    source.write_text(
        "def _check(answer):\n"
        "    value = number(answer, 'accuracy')\n"  # a what, unmarked
        "    check_number(answer, A, M, what='ratio', right=_('Right.'), otherwise=_('No.'))\n"
        "    wrong = {'You masked the queries instead of the keys.': 1}\n"  # a mistake's message
        "    wrong['The causal part is missing: AND the lower triangle.'] = 2\n"
        "    raise Mistake(f'{value} is not the answer')\n"  # an f-string
        "    number(answer, _('accuracy'))\n"  # marked: fine
        "    number(answer, answer_field('gap'))\n"  # built from marked text: fine
        "    re.search('Cannot access global variable (\\\\w+)', text)\n"  # not shown: fine
        "    raise Mistake(_('Fine.') if answer else 'The heads were summed, not joined.')\n"
        "    several(['A mask was applied twice here.', _('Marked.')])\n"  # a list of messages
    )
    found = [text for _line, text in messages.unmarked(source)]
    assert found == [
        "number(): accuracy",
        "check_number(): ratio",
        "a mistake's message: You masked the queries instead of the keys.",
        "a mistake's message: The causal part is missing: AND the lower triangle.",
        "Mistake(): f'{value} is not the answer'",
        "Mistake(): The heads were summed, not joined.",
        "several(): A mask was applied twice here.",
    ]


_GLUED = re.compile(r"[A-Za-z0-9_)\]}'`%][\u4e00-\u9fff]|[\u4e00-\u9fff][A-Za-z0-9_(\[{'`]")


def test_latin_values_filled_into_chinese_are_set_off_by_a_space():
    assert _i18n.spaced("positions的形状应为 (2, 3)") == "positions 的形状应为 (2, 3)"
    assert _i18n.spaced("你的核函数写到了Y 的第 3 行") == "你的核函数写到了 Y 的第 3 行"
    assert _i18n.spaced("x (2, 6, 8) 上的 apply_rope的形状") == "x (2, 6, 8) 上的 apply_rope 的形状"
    assert _i18n.spaced("The mask of (2, 3) is wrong.") == "The mask of (2, 3) is wrong."


def test_a_chinese_check_message_has_no_latin_glued_to_chinese(chinese):
    # rope's checker names the call "apply_rope for x (2, 6, 8)", a Latin value in a template
    # whose Chinese puts it right before 的形状
    result = check("language-model/rope", lambda x, positions: torch.zeros(3, dtype=x.dtype))
    assert not result.passed
    assert "apply_rope 的形状" in result.message, result.message
    assert not _GLUED.search(result.message), result.message
    # a number of the wrong kind: its what is translated, and the quoted value set off
    result = check("cross-attention/diagonal-baseline", "0.5")
    assert "准确率" in result.message and "accuracy" not in result.message, result.message
    assert not _GLUED.search(result.message), result.message


# -- one term list for the book and the checkers ------------------------------------------------


def test_one_term_list_serves_the_book_and_the_checkers():
    """terminology.tsv's words that are no glossary terms (a GPU kernel, the additive mask, the
    unit of a loss, the source texts) are checked in the checkers' catalogue as in the book's:
    the preferred rendering, no variant, no English left untranslated, “” for quotes."""
    words = {english: chinese for english, chinese, _ in zh.words()}
    assert words["kernel"] == "核函数" and words["additive mask"] == "加性掩码"
    assert words["nats"] == "奈特" and words["source texts"] == "源文本"
    cases = [
        ("Pass your kernel.", "请传入你的 kernel。", "'kernel' left in English"),
        ("With an additive mask", "使用可加掩码时", "'可加掩码' is a variant"),
        ("the source texts' formula", "原始资料中的公式", "'source texts' is rendered"),
        ("the loss in nats", "以 nats 为单位的损失", "'nats' left in English"),
        ("True means 'may attend'", "True 表示「可以关注」", "quotes with “ and ”"),
    ]
    for english, chinese, problem in cases:
        found = zh.terminology_problems(english, chinese, "messages")
        assert any(problem in p for p in found), (chinese, found)
    assert zh.terminology_problems("Pass your kernel.", "请传入你的核函数（kernel）。") == []
    assert messages.problems() == []


def test_exercise_titles_read_the_same_in_the_index_and_in_list_exercises(chinese):
    """The exercise index page (book/exercises.md, in Chinese) and list_exercises() name each
    exercise the same way."""
    page = zh.chinese_markdown(zh.BOOK / "exercises.md")
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 5 and cells[3].startswith("`") and "/" in cells[3]:
            rows[cells[3].strip("`")] = cells[2]
    listed = {e["id"]: e["title"] for e in list_exercises()}
    differ = {i: (rows[i], listed[i]) for i in rows if i in listed and rows[i] != listed[i]}
    assert rows and not differ, differ


def test_known_mistakes_kept_concealed_are_named_in_chinese(chinese):
    """Chapter 4's value answers name a known mistake from a concealed table (per part of the
    shapes answer, per line letter of the find-the-bug answer). Those diagnoses once reached a
    Chinese learner in English: the table's text was shown without its concealed catalogue."""
    ch04 = importlib.import_module("attncourse.exercises.ch04_cross_attention")
    shapes = json.loads(_core.reveal(ch04._SHAPES))
    named = 0
    for part, known in json.loads(_core.reveal(ch04._SHAPES_MISTAKES)).items():
        for shape in known:
            answer = {**shapes, part: ast.literal_eval(shape)}
            first_line = check("cross-attention/shapes", answer).message.splitlines()[0]
            assert not messages.english_runs(first_line), first_line
            named += 1
    for letter in json.loads(_core.reveal(ch04._WHICH_BUG_MISTAKES)):
        first_line = check("cross-attention/which-bug", letter).message.splitlines()[0]
        assert not messages.english_runs(first_line), first_line
        named += 1
    assert named == 21  # 17 shapes of the table and 4 lines


def test_concealed_messages_of_each_part_are_found(tmp_path):
    source = tmp_path / "ch99_example.py"
    flat = _core.conceal(json.dumps({"3": "Off by one."}))
    nested = _core.conceal(json.dumps({"part": {"1": "The part is wrong."}}))
    source.write_text(f"_A = {flat!r}\n_B = {nested!r}\n")
    assert sorted(messages.concealed_texts(source)) == ["Off by one.", "The part is wrong."]


def test_a_four_word_english_run_is_english_left_in():
    assert messages.english_runs("这里 the mask is wrong 了") == ["the mask is wrong"]
    assert messages.english_runs("这里 the mask 错了") == []


def test_the_translation_checks_see_line_breaks_and_missing_chinese(monkeypatch):
    from babel.messages.catalog import Catalog

    plain = Catalog(locale="zh_CN")
    plain.add("Right: the rows sum to one.\n", "正确：各行之和为 1。")  # the break is lost
    plain.add("The mask is inverted here.", "The mask is inverted here.")  # not translated
    found = {m.id: [("ch99_example.py", 1)] for m in plain if m.id}
    monkeypatch.setattr(messages, "unmarked_messages", lambda: [])
    monkeypatch.setattr(messages, "messages", lambda: (found, {}))
    monkeypatch.setattr(messages, "catalogues", lambda: (plain, Catalog(locale="zh_CN")))
    problems = messages.problems()
    assert any("line break" in p for p in problems), problems
    assert any("has no Chinese" in p for p in problems), problems
