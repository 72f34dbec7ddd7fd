"""The machinery behind ``check``, ``hint`` and ``solution``.

A chapter module registers each exercise with :func:`exercise`, decorating its checker.
A checker receives the learner's answer and either returns (optionally a short success
note) or raises :class:`Mistake` with feedback naming the likely error. A learner function
that raises ``NotImplementedError`` (the untouched stub) counts as not attempted.
"""

from __future__ import annotations

import contextlib
import copy
import decimal
import difflib
import dis
import functools
import html
import inspect
import json
import math
import numbers
import re
import signal
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _i18n
from ._concealed import conceal, reveal  # noqa: F401 - conceal: for the chapters and tools
from ._i18n import N_, _, gettext_concealed

# The status of a Result: English in every language (code compares it); shown translated.
NOT_ATTEMPTED = N_("not attempted yet")
PASSED = N_("passed")
FAILED = N_("failed")


class Mistake(Exception):
    """Raised by a checker: the answer is wrong, and the message says what is likely wrong."""


class NotAttempted(Exception):
    """Raised when the learner's answer is still the stub; an optional message says what is
    missing in the stub's own terms (default: the function still raises NotImplementedError)."""


#: The not-attempted message of an untouched function stub.
STUB_FUNCTION = N_(
    "Your function still raises NotImplementedError: write its body, then run this cell again."
)
#: The not-attempted message of an untouched value stub (``answer = ...``).
STUB_VALUE = N_(
    "Your answer is still the placeholder ... (or None): replace it with your answer, "
    "then run this cell again."
)


def stub_field(name: str) -> str:
    """The not-attempted message of a dict answer whose field ``name`` is still ``...``."""
    return _(
        "{name} is still the placeholder ...: replace it with your {name}, then run this "
        "cell again."
    ).format(name=name)


def answer_field(name: str) -> str:
    """The field ``name`` of a dict answer, as the ``what`` of :func:`number` and the like:
    the key is code and stays as it is, the word around it is translated."""
    return _("field {name!r}").format(name=name)


def several(messages: Sequence[str]) -> str:
    """One message for the known mistakes an answer matches: the message itself when one
    does, every one of them when several give the same value (the value alone cannot tell
    which the learner made)."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    items = "\n".join(f"- {m}" for m in unique)
    return _(
        "Your answer is what {len_unique} different known mistakes all give; check which one you "
        "made:\n{items}"
    ).format(len_unique=len(unique), items=items)


#: The colours of the boxes of check, hint and solution: text on background, and the status
#: colours on the same background, in a light and a dark scheme; every pair meets WCAG AA
#: (4.5:1, tests/test_exercises_core.py computes it). The dark scheme applies where the reader's
#: system is dark (``prefers-color-scheme``) unless the page says it is light, and under a dark
#: page theme (the book's ``data-theme``, JupyterLab's ``data-jp-theme-light``). An output
#: sanitised of its style sheet shows the boxes in the page's own colours.
COLOURS = {
    "light": {
        "text": "#1f2328", "background": "#f6f8fa", "border": "#d0d7de",
        "passed": "#1a7f37", "failed": "#b3261e", "pending": "#57606a",
    },
    "dark": {
        "text": "#e6edf3", "background": "#161b22", "border": "#30363d",
        "passed": "#3fb950", "failed": "#ff7b72", "pending": "#9da7b3",
    },
}  # fmt: skip


def _scheme_css(scheme: Dict[str, str], scope: str = "") -> str:
    box = f"{scope}.attncourse-box"
    css = (
        f"{box}{{color:{scheme['text']};background:{scheme['background']};"
        f"border-color:{scheme['border']}}}"
        f"{box} pre{{color:inherit;background:transparent}}"
    )
    for kind in ("passed", "failed", "pending"):
        css += (
            f"{scope}.attncourse-{kind}{{border-left-color:{scheme[kind]}}}"
            f"{scope}.attncourse-{kind} .attncourse-status{{color:{scheme[kind]}}}"
        )
    return css


def _style() -> str:
    dark = COLOURS["dark"]
    return (
        "<style>"
        ".attncourse-box{border:1px solid;border-left:4px solid;border-radius:4px;"
        "padding:0.4em 0.8em;margin:0.3em 0}"
        ".attncourse-box pre{margin:0.4em 0 0;padding:0;border:0}"
        + _scheme_css(COLOURS["light"])
        + "@media (prefers-color-scheme: dark){"
        + _scheme_css(dark, ":root:not([data-theme=light]) ")
        + "}"
        + _scheme_css(dark, "html[data-theme=dark] ")
        + _scheme_css(dark, "body[data-jp-theme-light=false] ")
        + "</style>"
    )


#: The style sheet each box of check, hint and solution carries (scoped by its classes).
STYLE = _style()


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`check`: ``passed`` is a bool, ``message`` the feedback."""

    exercise_id: str
    status: str
    message: str
    #: The same result in other languages (``{"zh": Result}``), when asked for with the
    #: environment variable ATTNCOURSE_EXTRA_LANGUAGES (the book build: one execution, two
    #: editions); they travel in the output's metadata (see ``_repr_mimebundle_``).
    translations: Dict[str, "Result"] = field(default_factory=dict, compare=False, repr=False)
    #: The language it was graded in: its status is shown in that language, like its message.
    language: str = field(default_factory=_i18n.get_language, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = {PASSED: "✔", FAILED: "✘"}.get(self.status, "…")
        return f"{mark} {self.exercise_id}: {self._status()}\n{self.message}".rstrip()

    def _status(self) -> str:
        return _i18n.in_language(self.language, lambda: _(self.status))

    __repr__ = __str__

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return _bundle(self)

    def _repr_html_(self) -> str:
        kind = {PASSED: "passed", FAILED: "failed"}.get(self.status, "pending")
        mark = {PASSED: "✔", FAILED: "✘"}.get(self.status, "…")
        body = html.escape(self.message).replace("\n", "<br>")
        return (
            f'{STYLE}<div class="attncourse-box attncourse-{kind}">'
            f'<b class="attncourse-status">{mark} {html.escape(self.exercise_id)}:'
            f" {html.escape(self._status())}</b><br>{body}</div>"
        )


@dataclass(frozen=True)
class Reveal:
    """A hint or a solution: collapsed in Jupyter and in the book until the reader opens it."""

    label: str
    text: str
    code: bool = False
    translations: Dict[str, "Reveal"] = field(default_factory=dict, compare=False, repr=False)
    language: str = field(default_factory=_i18n.get_language, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.label}\n\n{self.text}"

    __repr__ = __str__

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return _bundle(self)

    def _repr_html_(self) -> str:
        inner = f"<pre>{html.escape(self.text)}</pre>" if self.code else _prose_html(self.text)
        return (
            f'<details class="attncourse-box attncourse-reveal"><summary>'
            f"<b>{html.escape(self.label)}</b>"
            f" {html.escape(_i18n.in_language(self.language, lambda: _('(click to show)')))}"
            f"</summary>{inner}</details>{STYLE}"
        )


def _prose_html(text: str) -> str:
    """A hint's or a solution's text (reflowed where it is made, :func:`reflow`) as HTML: its
    lines joined by ``<br>``, and each block of code (lines indented by four spaces or more) a
    ``<pre>`` without that indentation, so that code copied from it runs as it is pasted."""
    parts: List[str] = []
    code: List[str] = []
    prose: List[str] = []

    def flush_prose() -> None:
        if prose:
            parts.append("<br>".join(html.escape(line) for line in prose))
            prose.clear()

    def flush_code() -> None:
        if code:
            block = textwrap.dedent("\n".join(code)).strip("\n")
            parts.append(f"<pre>{html.escape(block)}</pre>")
            code.clear()

    for line in text.split("\n"):
        if line.startswith("    ") and line.strip():
            flush_prose()
            code.append(line)
        elif code and not line.strip():
            code.append(line)  # a blank line inside a block of code
        else:
            flush_code()
            prose.append(line)
    flush_code()
    flush_prose()
    return "".join(parts)


def _bundle(shown: Any) -> Any:
    """Jupyter's rendering of a :class:`Result` or :class:`Reveal`: plain text and HTML, and
    in the output's metadata the renderings in the other languages asked for
    (``{"attncourse": {"zh": {"text/plain": ..., "text/html": ...}}}``), which the Chinese
    edition's pages show instead (tools/zh_edition.py)."""
    data = {"text/plain": str(shown), "text/html": shown._repr_html_()}
    if not shown.translations:
        return data
    other = {
        code: {"text/plain": str(t), "text/html": t._repr_html_()}
        for code, t in shown.translations.items()
    }
    return data, {"attncourse": other}


def _in_other_languages(make: Callable[[], Any]) -> Dict[str, Any]:
    """``make()`` again in each language of ATTNCOURSE_EXTRA_LANGUAGES (none by default)."""
    return {code: _i18n.in_language(code, make) for code in _i18n.extra_languages()}


@dataclass(frozen=True)
class Exercise:
    """One registered exercise, as :func:`registry` maps its id to it: the checker, the levels
    of hints, the solution (shown by :func:`solution`) and the flags the course's tests and
    tools read."""

    exercise_id: str
    title: str
    checker: Callable[[Any], Optional[str]]
    hints: Tuple[str, ...]  # the levels of hints, each saying more than the one before
    solution: Callable[[], str]
    solution_is_code: bool
    reference: Optional[Callable[..., Any]] = None  # the solution function of a coding exercise
    keep_dtype: bool = True  # floating outputs must have the dtype of the floating inputs
    # what @exercise(answer_is_function=...) said, if anything
    function_answer: Optional[bool] = None
    # what @exercise(forbids=...) named: the helpers the text asks the learner not to call
    forbidden: Mapping[str, Callable[..., Any]] = field(default_factory=dict)

    @property
    def answer_is_function(self) -> bool:
        """Whether the answer is a function like ``reference`` (a solution with parameters);
        a solution without parameters is code that computes a value answer. An exercise whose
        solution has parameters but whose answer is a value (the solution computes it from the
        notebook's objects) says so with ``@exercise(..., answer_is_function=False)``."""
        if self.reference is None:
            return False
        if self.function_answer is not None:
            return self.function_answer
        try:
            return bool(inspect.signature(self.reference).parameters)
        except (TypeError, ValueError):
            return True

    @property
    def hint(self) -> str:
        """The first hint (``hints[0]``)."""
        return self.hints[0]


_REGISTRY: Dict[str, Exercise] = {}


def exercise(
    exercise_id: str,
    *,
    title: str,
    hint: Union[str, Sequence[str]],
    solution: Any,
    solution_is_code: Optional[bool] = None,
    keep_dtype: bool = True,
    answer_is_function: Optional[bool] = None,
    name: Optional[str] = None,
    forbids: Sequence[Callable[..., Any]] = (),
) -> Callable[[Callable[[Any], Optional[str]]], Callable[[Any], Optional[str]]]:
    """Register the decorated checker under ``exercise_id``.

    ``solution`` is a function (its source is shown: a reference implementation, which the
    checker must accept and which the checker mutation tests mutate) or a string produced by
    :func:`conceal` (shown decoded: a worked answer that must not appear in plain text in the
    source). ``hint``: one string, or the levels of hints from a nudge that does not give the
    answer away to the most explicit (``hint(id)`` shows the first, ``hint(id, 2)`` the
    second, ...). ``keep_dtype`` (default True): every floating tensor the learner's function
    returns must have the dtype of its floating tensor inputs (torch's type promotion of
    them), so float64 inputs answered in float32 fail with a message saying so; pass False
    for an exercise whose output dtype legitimately differs. ``answer_is_function``: by
    default a solution function with parameters means the learner answers with such a
    function (a coding exercise: the generic right-answer styles and the checker mutation
    tests call it); pass False when the solution function only computes the value the learner
    passes (e.g. a measurement on the notebook's model). ``name``: the name the learner's stub
    has in the notebook; the solution shown renames the (private) solution function to it
    (default: its name without the leading underscore and the ``_solution`` suffix).
    ``forbids``: the functions the exercise's text asks the learner to write instead of
    calling; :func:`check` refuses an answer that calls one (:func:`forbid`) before the checker
    sees it, naming it by where it lives (``attncourse.kernels.tiles.tile_map``).
    """
    forbidden = _named_by_home(forbids)

    def register(checker: Callable[[Any], Optional[str]]) -> Callable[[Any], Optional[str]]:
        if exercise_id in _REGISTRY:
            raise ValueError(f"exercise {exercise_id!r} is registered twice")
        if callable(solution):
            text: Callable[[], str] = lambda: _public_source(solution, name)
            is_code = True if solution_is_code is None else solution_is_code
        else:
            text = lambda: reveal(solution)
            is_code = False if solution_is_code is None else solution_is_code
        reference = solution if callable(solution) and is_code else None
        levels = (hint,) if isinstance(hint, str) else tuple(hint)
        if not levels or not all(isinstance(h, str) and h.strip() for h in levels):
            raise ValueError(f"exercise {exercise_id!r} needs at least one hint")
        _REGISTRY[exercise_id] = Exercise(
            exercise_id,
            title,
            checker,
            tuple(textwrap.dedent(h).strip() for h in levels),
            text,
            is_code,
            reference,
            keep_dtype,
            answer_is_function,
            forbidden,
        )
        return checker

    return register


#: Where a learner imports what torch defines in a private module.
_PUBLIC_HOME = {"torch._C._nn": "torch.nn.functional"}


def _named_by_home(functions: Sequence[Callable[..., Any]]) -> Dict[str, Callable[..., Any]]:
    """``{"module.name": function}``: each function named where a learner imports it from
    (one that this torch lacks, ``None``, is left out). Two functions of one name (a wrapper
    copies its function's) would hide one of them: a ``ValueError``."""
    named: Dict[str, Callable[..., Any]] = {}
    for f in functions:
        if f is None:
            continue
        name = _qualified(f)
        if name in named and named[name] is not f:
            raise ValueError(f"forbids names two functions {name}")
        named[name] = f
    return named


def _public_source(function: Callable[..., Any], name: Optional[str]) -> str:
    """The source of a solution function under the learner-facing ``name``."""
    source = textwrap.dedent(inspect.getsource(function))
    private = function.__name__
    public = name or private.lstrip("_").removesuffix("_solution")
    return re.sub(rf"(?<![\w.]){re.escape(private)}\b", public, source)


class UnknownExercise(KeyError):
    """An exercise id that is not registered (a typo in the notebook); the message names the
    nearest ids."""

    def __str__(self) -> str:  # KeyError's own str() shows the repr of the message
        return str(self.args[0]) if self.args else ""


def nearest_exercises(exercise_id: Any, n: int = 3) -> List[str]:
    """The registered ids nearest to ``exercise_id`` (difflib), best first: a typo, another
    spelling, or the exercise's name without its chapter (``"repeat-kv"``)."""
    if not isinstance(exercise_id, str) or not exercise_id.strip():
        return []
    typed = exercise_id.strip().lower().replace("_", "-").replace(" ", "-")
    scores: Dict[str, float] = {}
    for known in _REGISTRY:  # the whole id, or its name alone when the chapter is left out
        for against, cutoff in ((known, 0.6), (known.split("/", 1)[-1], 0.75)):
            ratio = difflib.SequenceMatcher(None, typed, against).ratio()
            if ratio >= cutoff:
                scores[known] = max(scores.get(known, 0.0), ratio)
    ranked = sorted(scores, key=lambda k: -scores[k])
    # the clear winner alone; the others only when they come close to it
    return [k for k in ranked if scores[k] >= scores[ranked[0]] - 0.1][:n] if ranked else []


def _get(exercise_id: str) -> Exercise:
    """The registered exercise; an unknown id (a typo in the notebook) raises
    :class:`UnknownExercise`, a ``KeyError`` whose message names the nearest ids."""
    if isinstance(exercise_id, str) and exercise_id in _REGISTRY:
        return _REGISTRY[exercise_id]
    near = nearest_exercises(exercise_id)
    if near:
        message = _(
            "There is no exercise {exercise_id!r}. Did you mean {nearest}? "
            "list_exercises() lists every exercise."
        ).format(exercise_id=exercise_id, nearest=_(" or ").join(repr(k) for k in near))
    else:
        message = _(
            "There is no exercise {exercise_id!r}, and no exercise id is close to it. "
            "list_exercises() lists every exercise; their ids start with {prefixes}."
        ).format(
            exercise_id=exercise_id,
            prefixes=", ".join(dict.fromkeys(k.split("/")[0] + "/" for k in _REGISTRY)),
        )
    raise UnknownExercise(message)


def check(exercise_id: str, answer: Any, *, language: Optional[str] = None) -> Result:
    """Check ``answer`` for the exercise ``exercise_id`` and return a :class:`Result`.

    What ``check`` guarantees, whatever the answer is (any Python object):

    * it never raises: a wrong answer, an answer of the wrong type, a function that raises,
      loops forever or returns something odd all come back as a failed :class:`Result` with a
      message. An untouched stub (a function raising ``NotImplementedError``, or ``...`` /
      ``None`` for a value) is reported as not attempted. Only an unknown ``exercise_id``
      (a mistake in the notebook, not in the answer) raises ``KeyError``, a ``language``
      that is not available ``ValueError``, and a ``KeyboardInterrupt`` (the reader pressing
      stop) is let through;
    * the learner's code runs at most ``TIME_LIMIT_S`` seconds in all per check (see
      ``call``): a function that hangs is stopped and reported, the kernel stays usable;
    * every call of the learner's function gets fresh copies of its inputs, so changing them
      in place (``q *= scale``, ``mask.logical_not_()``) is allowed and cannot affect the
      reference the answer is compared with;
    * with ATTNCOURSE_EXTRA_LANGUAGES set (the book build), the checker runs once more in
      each language named, and the result carries those renderings (``translations``);
    * the learner's objects are left as they were found: modules'
      training flags, parameters' values and ``requires_grad``, tensors' values, and torch's
      global random state.

    ``language`` (``"en"``, ``"zh"``) chooses the language of this one result; by default, the
    language :func:`set_language` chose for the session (the Chinese notebooks' set-up cell).
    """
    with _speaking(language):
        result = _check(exercise_id, answer)
        others = _in_other_languages(lambda: _check(exercise_id, answer))
    return replace(result, translations=others) if others else result


def _speaking(language: Optional[str]):
    """Speak ``language`` inside the block where a caller chose one; else the session's."""
    return contextlib.nullcontext() if language is None else _i18n.language(language)


def _check(exercise_id: str, answer: Any) -> Result:
    """:func:`check` in the language spoken now; in Chinese, Latin values filled into a message
    are set off from the Chinese around them by a space (:func:`_i18n.spaced`)."""
    result = _check_in_language(exercise_id, answer)
    if _i18n.get_language() == "en":
        return result
    return replace(result, message=_i18n.spaced(result.message))


def _check_in_language(exercise_id: str, answer: Any) -> Result:
    ex = _get(exercise_id)
    global _CONTEXT
    context, outer = _Context(ex), _CONTEXT
    _CONTEXT = context
    try:
        try:
            if answer is None or answer is Ellipsis:
                return Result(exercise_id, NOT_ATTEMPTED, _(STUB_VALUE))
            if isinstance(answer, dict):
                for key, field in answer.items():
                    if field is Ellipsis:
                        return Result(exercise_id, NOT_ATTEMPTED, stub_field(str(key)))
            with _Preserved(answer):
                forbid(answer, ex.forbidden)
                note = ex.checker(answer)
        except NotAttempted as stub:
            if context.timed_out:
                return Result(exercise_id, FAILED, _timeout_message())
            return Result(exercise_id, NOT_ATTEMPTED, _text(stub) or _(STUB_FUNCTION))
        except Mistake as mistake:
            text = _timeout_message() if context.timed_out else _text(mistake)
            if context.dtype_mistake and not context.timed_out:
                # a known mistake recognised in the values comes first, the dtype after it;
                # any other complaint may come from the lower precision: the dtype alone
                if any(message in text for message in context.named):
                    text += "\n" + _("Also: {message}").format(message=context.dtype_mistake)
                else:
                    text = context.dtype_mistake
            return Result(
                exercise_id,
                FAILED,
                text + _("\nStuck? Run hint({exercise_id!r}).").format(exercise_id=exercise_id),
            )
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001 - the checker met an answer it did not foresee
            if context.timed_out:
                return Result(exercise_id, FAILED, _timeout_message())
            return Result(
                exercise_id,
                FAILED,
                _(
                    "{UNGRADABLE} ({type_name}: {value}). Check that your answer has the form the "
                    "exercise asks for."
                ).format(
                    UNGRADABLE=_(UNGRADABLE), type_name=type(error).__name__, value=_text(error)
                ),
            )
        if context.timed_out:  # a checker that swallowed the time-out must not pass the answer
            return Result(exercise_id, FAILED, _timeout_message())
        if context.dtype_mistake:  # right values, in the wrong dtype
            return Result(
                exercise_id,
                FAILED,
                context.dtype_mistake
                + _("\nStuck? Run hint({exercise_id!r}).").format(exercise_id=exercise_id),
            )
        return Result(
            exercise_id, PASSED, note if isinstance(note, str) and note else _("Well done.")
        )
    finally:
        _CONTEXT = outer


class _Preserved:
    """Snapshot the state of the learner's objects in ``answer`` (itself, or the values of a
    dict, list or tuple) and put it back on exit: every ``nn.Module``'s training flags and
    parameters and buffers (values and ``requires_grad``), every tensor's value and
    ``requires_grad``, and torch's CPU random state. A checker may then evaluate a learner's
    model (``model.eval()``) without the learner's model leaving the check changed."""

    def __init__(self, answer: Any) -> None:
        objects = (
            list(answer.values())
            if isinstance(answer, dict)
            else (list(answer) if isinstance(answer, (list, tuple)) else [answer])
        )
        self.modules = [m for m in objects if isinstance(m, torch.nn.Module)]
        self.tensors = [t for t in objects if isinstance(t, Tensor)]

    def __enter__(self) -> "_Preserved":
        self.rng = torch.get_rng_state()
        self.flags = [[(m, m.training) for m in module.modules()] for module in self.modules]
        self.states: List[List[Any]] = []
        for module in self.modules:
            tensors = list(module.parameters()) + list(module.buffers())
            self.states.append([(t, t.detach().clone(), t.requires_grad) for t in tensors])
        self.values = [
            (t, t.detach().clone(), t.requires_grad) for t in self.tensors if not t.is_meta
        ]
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.set_rng_state(self.rng)
        for flags in self.flags:
            for module, training in flags:
                module.training = training
        with torch.no_grad():
            for tensor, value, requires_grad in [
                s for states in self.states for s in states
            ] + self.values:
                try:
                    if not torch.equal(tensor, value):
                        tensor.copy_(value)
                    if tensor.is_leaf and tensor.requires_grad != requires_grad:
                        tensor.requires_grad_(requires_grad)
                except Exception:  # noqa: BLE001 - a tensor whose storage changed shape: leave it
                    pass


def hint(exercise_id: str, level: int = 1, *, language: Optional[str] = None) -> Reveal:
    """A hint for the exercise, collapsed until opened. ``level`` 1 (the default) is a nudge
    that does not give the answer away; ``hint(id, 2)`` says more, and so on; the last level
    says that ``solution(id)`` comes next, and a level past the last says so. ``language``:
    as in :func:`check`."""
    with _speaking(language):
        shown = _hint(exercise_id, level)
        others = _in_other_languages(lambda: _hint(exercise_id, level))
    return replace(shown, translations=others) if others else shown


def _hint(exercise_id: str, level: int = 1) -> Reveal:
    ex = _get(exercise_id)
    count = len(ex.hints)
    if isinstance(level, bool) or not isinstance(level, int) or level < 1:
        raise ValueError(
            _(
                "The hint level is a whole number from 1 to {count} (hint({exercise_id!r}, 2) "
                "shows the second hint); got {level!r}."
            ).format(count=count, exercise_id=exercise_id, level=level)
        )
    if level > count:
        return Reveal(
            _("Hint {level} for {exercise_id}").format(level=level, exercise_id=exercise_id),
            _(
                "There is no hint {level}: {exercise_id} has {count} levels of hints, and "
                "hint({exercise_id!r}, {count}) is the last. What comes next is the answer: "
                "solution({exercise_id!r})."
            ).format(level=level, exercise_id=exercise_id, count=count),
        )
    if level < count:
        after = _("Still stuck? hint({exercise_id!r}, {level}) says more.").format(
            exercise_id=exercise_id, level=level + 1
        )
    else:
        after = _("That was the last hint; solution({exercise_id!r}) shows the answer.").format(
            exercise_id=exercise_id
        )
    if count == 1:
        label = _("Hint for {exercise_id}").format(exercise_id=exercise_id)
    else:
        label = _("Hint {level} of {count} for {exercise_id}").format(
            level=level, count=count, exercise_id=exercise_id
        )
    return Reveal(label, f"{reflow(_(ex.hints[level - 1]))}\n\n{after}")


#: A line that starts an item of its own: a numbered step, a bullet, or code (indented).
_OWN_LINE = re.compile(r"(?:\d+[.)]|[-*•])\s|\s{2,}\S")
#: Where two lines join without a space: at full-width punctuation, or between two Chinese
#: characters (a Chinese word meets a Latin one with a space, as the catalogues write them).
_PUNCTUATION_END = re.compile(r"[\u3000-\u303f\uff00-\uffef]$")
_PUNCTUATION_START = re.compile(r"[\u3000-\u303f\uff00-\uffef]")
_IDEOGRAPH_END = re.compile(r"[\u4e00-\u9fff]$")
_IDEOGRAPH_START = re.compile(r"[\u4e00-\u9fff]")


def reflow(text: str) -> str:
    """``text`` with each paragraph's lines joined, as its source wrapped them to fit a line of
    code: the lines a box shows are the reader's, not the source's. Blank lines, numbered
    steps, bullets and indented code keep their own lines; Chinese joins Chinese without a
    space, and meets Latin text with one."""
    out: List[str] = []
    for line in text.splitlines():
        previous = out[-1] if out else ""
        if (
            previous.strip()
            and line.strip()
            and not _OWN_LINE.match(line)
            and not previous.startswith("  ")
        ):
            left, right = previous.rstrip(), line.strip()
            tight = (
                _PUNCTUATION_END.search(left)
                or _PUNCTUATION_START.match(right)
                or (_IDEOGRAPH_END.search(left) and _IDEOGRAPH_START.match(right))
            )
            out[-1] = left + ("" if tight else " ") + right
        else:
            out.append(line)
    return "\n".join(out)


def solution(exercise_id: str, *, language: Optional[str] = None) -> Reveal:
    """The solution of the exercise, collapsed until opened. Try the exercise first.
    ``language``: as in :func:`check`."""
    with _speaking(language):
        shown = _solution(exercise_id)
        others = _in_other_languages(lambda: _solution(exercise_id))
    return replace(shown, translations=others) if others else shown


def _solution(exercise_id: str) -> Reveal:
    ex = _get(exercise_id)
    text = ex.solution() if ex.solution_is_code else reflow(gettext_concealed(ex.solution()))
    return Reveal(
        _("Solution of {exercise_id}").format(exercise_id=exercise_id),
        text,
        code=ex.solution_is_code,
    )


def registry() -> Mapping[str, Exercise]:
    """Every registered exercise by id, in chapter order: a read-only view (it follows later
    registrations; it cannot be written to). Each :class:`Exercise` holds the checker, the
    hints, the reference solution and the flags the course's tests and tools read."""
    return MappingProxyType(_REGISTRY)


def list_exercises() -> List[Dict[str, str]]:
    """Every registered exercise, as ``{"id": ..., "title": ...}`` in chapter order."""
    return [{"id": e.exercise_id, "title": _(e.title)} for e in _REGISTRY.values()]


# -- running the learner's code: copies, a time limit, no crash ---------------------------------

#: Seconds of learner code one :func:`check` may run in all (every call of the learner's
#: function counts; the checker's own work does not).
TIME_LIMIT_S = 10.0

#: The start of the message of a :class:`Result` for an answer the checker could not grade.
UNGRADABLE = N_("Your answer could not be graded")


def _timeout_message() -> str:
    return _(
        "Your function ran for more than {TIME_LIMIT_S:g} s (the time limit of one check) "
        "and was stopped. Look for a loop that never ends, a sleep or an input(): the "
        "reference takes milliseconds."
    ).format(TIME_LIMIT_S=TIME_LIMIT_S)


class _TimeUp(BaseException):
    """Raised inside the learner's code when the time limit of the check is spent.

    A ``BaseException``, so that a learner's ``except Exception`` does not swallow it."""


class _Context:
    """The state of one :func:`check`: the exercise and the learner time spent so far."""

    def __init__(self, ex: Optional[Exercise]) -> None:
        self.exercise = ex
        self.spent = 0.0
        self.timed_out = False
        #: the first result of the wrong dtype the learner's function returned (its message)
        self.dtype_mistake: Optional[str] = None
        #: the messages of the known mistakes the answer's values were recognised as (named())
        self.named: List[str] = []


_CONTEXT: Optional[_Context] = None


def _text(error: BaseException) -> str:
    """``str(error)``, even for an exception whose ``__str__`` fails."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001
        return type(error).__name__


def _copy(value: Any, memo: Dict[int, Any]) -> Any:
    """A deep copy of ``value`` for the learner: tensors cloned (expanded and non-contiguous
    ones too: the clone owns its memory), arrays copied, containers rebuilt; objects that
    cannot be copied are passed as they are. ``memo`` keeps one object passed twice one object."""
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, Tensor):
        copied = value.detach().clone()
        if value.requires_grad:
            copied.requires_grad_(True)
    elif isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        copied = type(value)(_copy(v, memo) for v in value)
    elif isinstance(value, dict) and type(value) is dict:
        copied = {k: _copy(v, memo) for k, v in value.items()}
    elif isinstance(value, (int, float, complex, str, bytes, bool, type(None))):
        copied = value
    else:
        try:
            copied = copy.deepcopy(value, {})
        except Exception:  # noqa: BLE001 - not copyable: the learner gets the object itself
            copied = value
    memo[key] = copied
    return copied


def _floating_tensors(values: Any, out: List[Tensor], depth: int = 0) -> List[Tensor]:
    """The floating tensors in ``values`` (tensors, and tuples/lists/dicts of them)."""
    if isinstance(values, Tensor):
        if values.is_floating_point():
            out.append(values)
    elif depth < 3 and isinstance(values, (list, tuple)):
        for v in values:
            _floating_tensors(v, out, depth + 1)
    elif depth < 3 and isinstance(values, dict):
        for v in values.values():
            _floating_tensors(v, out, depth + 1)
    return out


def _expected_dtype(args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[torch.dtype]:
    """The dtype the floating inputs promote to, as torch's operators promote them (a 0-d
    tensor does not raise the dtype of a larger one); ``None`` without a floating input."""
    given = _floating_tensors(list(args) + list(kwargs.values()), [])
    if not given:
        return None
    promoted = torch.empty((0,) * min(given[0].dim(), 1), dtype=given[0].dtype)
    for t in given[1:]:
        promoted = promoted + torch.empty((0,) * min(t.dim(), 1), dtype=t.dtype)
    return promoted.dtype


def _dtype_mistake(expected: Optional[torch.dtype], result: Any) -> Optional[str]:
    """The dtype rule: floating outputs keep ``expected``, the dtype of the floating inputs
    (:func:`_expected_dtype`). The message when ``result`` breaks it, else ``None``."""
    for dtype in (t.dtype for t in _floating_tensors(result, [])):
        if expected is not None and dtype != expected:
            return _(
                "Your function was given {expected} tensors and returned a {dtype} tensor: keep the "
                "input's dtype (a .float(), .double(), .to(...) or torch.tensor(..., dtype=...) "
                "changed it; create new tensors with dtype=x.dtype, or compute in another dtype and "
                "convert back at the end)."
            ).format(expected=expected, dtype=dtype)
    return None


def _in_dtype(result: Any, dtype: torch.dtype) -> Any:
    """``result`` (a tensor, or a tuple, named tuple or list of values) with its floating
    tensors converted to ``dtype``; ``None`` for any other kind of result, or for one with a
    tensor of less than single precision (float16, bfloat16): its rounding alone would make the
    values look wrong."""
    if isinstance(result, Tensor):
        if not result.is_floating_point():
            return result
        return result.to(dtype) if torch.finfo(result.dtype).bits >= 32 else None
    if isinstance(result, (tuple, list)) and (
        type(result) in (tuple, list) or hasattr(result, "_make")
    ):
        items = [_in_dtype(item, dtype) if isinstance(item, Tensor) else item for item in result]
        if any(item is None for item in items):
            return None
        return result._make(items) if hasattr(result, "_make") else type(result)(items)
    return None


def _run_with_time_limit(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: Dict[str, Any], seconds: float
) -> Any:
    """``fn(*args, **kwargs)``, interrupted with :class:`_TimeUp` after ``seconds``.

    On the main thread of a POSIX process (a Jupyter or Colab kernel, a script, pytest) a
    ``SIGALRM`` timer interrupts the learner's Python code, so a hang ends and the kernel
    stays usable (a single long torch operation finishes first). Elsewhere (another thread,
    Windows) the function runs in a daemon thread that is abandoned, still running, after
    ``seconds``: the check reports the hang and returns.
    """
    if seconds <= 0:
        raise _TimeUp()
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        armed = [True]

        def on_alarm(signum: int, frame: Any) -> None:
            if armed[0]:
                raise _TimeUp()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        started = time.monotonic()
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn(*args, **kwargs)
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            # someone else's timer (pytest-timeout, ...) was pending: put it back
            if outer_delay > 0:
                left = outer_delay - (time.monotonic() - started)
                signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), outer_interval)
    box: Dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = error

    worker = threading.Thread(target=target, name="attncourse-learner-code", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise _TimeUp()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _describe_args(args: Sequence[Any], kwargs: Dict[str, Any]) -> str:
    def one(v: Any) -> str:
        if isinstance(v, Tensor):
            return f"tensor{tuple(v.shape)}"
        return type(v).__name__

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


#: Torch's errors that a Python habit causes, and the advice added to them:
#: ``(a fragment of the error's text, the advice)``.
_TORCH_ERROR_ADVICE = (
    (
        "only integer tensors of a single element can be converted to an index",
        N_(
            "A Python list cannot be indexed by a tensor (such as h or q_idx): make it a tensor "
            "first, torch.tensor(values), then index it."
        ),
    ),
    (
        "Boolean value of Tensor with more than one",
        N_(
            "Python's min, max, if and and/or take one number at a time: on tensors use "
            "torch.clamp, torch.minimum, torch.maximum, torch.where or & and |."
        ),
    ),
    (
        "view size is not compatible with input tensor's size and stride",
        N_(
            "view() needs the tensor's memory in order: after a slice, a transpose or a permute, "
            "use .reshape(...) (or .contiguous().view(...))."
        ),
    ),
    (
        "Sizes of tensors must match except in dimension",
        N_(
            "torch.cat joins tensors along one dimension and needs the same sizes in all the "
            "others. The checks also pass batch dimensions in front: join along a dimension "
            "counted from the end (dim=-2 for positions) and transpose with .transpose(-2, -1), "
            "not .T."
        ),
    ),
    (
        "must match the size of tensor b",
        N_(
            "Two tensors' sizes do not line up. The checks also pass batch dimensions in front, "
            "(..., L, d): swap the last two dimensions with .transpose(-2, -1) or .mT (.T reverses "
            "them all), count dimensions from the end (dim=-1), and keep the reduced dimension "
            "(keepdim=True) of a sum or a maximum that you then subtract or divide by."
        ),
    ),
    (
        "does not match the shape of the indexed tensor",
        N_(
            "Indexing with a boolean mask (scores[~mask] = ...) needs a mask of the scores' full "
            "shape, but masks broadcast ((B, 1, S) for padding, (L, S) for a causal mask): use "
            "scores.masked_fill(~mask, float('-inf')), which broadcasts."
        ),
    ),
)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the learner's ``fn`` safely and return what it returns.

    * ``fn`` gets deep copies of ``args`` and ``kwargs`` (see :func:`_copy`): whatever it does
      to them in place, the checker's tensors stay as they were, so references and known
      mistakes computed from them (before or after this call) are right.
    * Inside :func:`check` the learner's time is limited (``TIME_LIMIT_S`` in all).
    * An untouched stub (``NotImplementedError``) becomes :class:`NotAttempted`; any other
      error, a wrong signature, a result of the wrong dtype (the exercise's ``keep_dtype``
      rule) or a time-out becomes a :class:`Mistake`.
    * torch's default dtype and grad mode are restored afterwards if the learner changed them.
    """
    if inspect.isclass(fn):
        raise Mistake(
            _(
                "Expected a function, got the class {fn_name}: pass a function written with def "
                "(or a lambda)."
            ).format(fn_name=fn.__name__)
        )
    if not callable(fn):
        raise Mistake(
            _("Expected a function, got {type_name}.").format(type_name=type(fn).__name__)
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            raise Mistake(
                _(
                    "Your function cannot be called as fn({value}): {error}. Keep the parameters of the "
                    "stub."
                ).format(value=_describe_args(args, kwargs), error=error)
            ) from None
    memo: Dict[int, Any] = {}
    copied_args = [_copy(a, memo) for a in args]
    copied_kwargs = {k: _copy(v, memo) for k, v in kwargs.items()}
    context = _CONTEXT
    default_dtype, grad_enabled = torch.get_default_dtype(), torch.is_grad_enabled()
    start = time.perf_counter()
    try:
        if context is None:
            result = fn(*copied_args, **copied_kwargs)
        else:
            result = _run_with_time_limit(
                fn, copied_args, copied_kwargs, TIME_LIMIT_S - context.spent
            )
    except _TimeUp:
        if context is not None:
            context.timed_out = True
        raise Mistake(_timeout_message()) from None
    except NotImplementedError:
        raise NotAttempted() from None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - the learner's code failed (even sys.exit()): report it
        text = _text(error)
        message = _("Your function raised {type_name}: {value}").format(
            type_name=type(error).__name__, value=text
        )
        advice = [_(a) for fragment, a in _TORCH_ERROR_ADVICE if fragment in text]
        raise Mistake("\n".join([message, *advice])) from None
    finally:
        if context is not None:
            context.spent += time.perf_counter() - start
        torch.set_default_dtype(default_dtype)
        torch.set_grad_enabled(grad_enabled)
    result = _plain(result)
    if context is not None and context.exercise is not None and not context.exercise.keep_dtype:
        return result
    expected = _expected_dtype(args, kwargs)
    mistake = _dtype_mistake(expected, result)
    if mistake is None:
        return result
    converted = _in_dtype(result, expected)
    if context is None or converted is None:
        raise Mistake(mistake)
    # the checker goes on with the values in the right dtype, so that a known mistake in the
    # values (named()), usually the one that matters more, is named first; check() adds this
    context.dtype_mistake = context.dtype_mistake or mistake
    return converted


def _plain(result: Any) -> Any:
    """``result`` with each tensor of a subclass (alone, or in a tuple or list) as a plain tensor
    of the same data and autograd history: a subclass's ``__torch_function__`` would otherwise
    answer the checker's own comparisons (a ``torch.equal`` that always says yes)."""
    if isinstance(result, (tuple, list)):
        items = [_plain(item) for item in result]
        if all(a is b for a, b in zip(items, result)):
            return result
        return type(result)(*items) if hasattr(result, "_fields") else type(result)(items)
    if isinstance(result, Tensor) and type(result) is not Tensor:
        with torch._C.DisableTorchFunctionSubclass():
            return Tensor.as_subclass(result, Tensor)
    return result


#: The instructions that read a global name, and those that read an attribute (or import one).
_GLOBAL_READS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
_ATTRIBUTE_READS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR", "IMPORT_FROM"})


def _names_read(code: Any) -> Tuple[set, set, set]:
    """The global names, attribute names and imported modules that ``code`` (and the code
    nested in it: lambdas, comprehensions, inner functions) reads. A string constant that is
    an identifier counts as an attribute name too: ``getattr(F, "softmax")`` and
    ``vars(module)["softmax"]`` read it."""
    global_names, attributes, modules = set(), set(), set()
    stack = [code]
    while stack:
        c = stack.pop()
        stack.extend(k for k in c.co_consts if inspect.iscode(k))
        attributes.update(k for k in c.co_consts if isinstance(k, str) and k.isidentifier())
        for instruction in dis.get_instructions(c):
            if instruction.opname in _GLOBAL_READS:
                global_names.add(instruction.argval)
            elif instruction.opname in _ATTRIBUTE_READS:
                attributes.add(instruction.argval)
            elif instruction.opname == "IMPORT_NAME":
                parts = str(instruction.argval).split(".")
                modules.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return global_names, attributes, modules


def _library(obj: Any) -> bool:
    """Whether ``obj`` comes from torch or this package (whose code is not the learner's)."""
    module = str(getattr(obj, "__module__", None) or "")
    return module.split(".")[0] in ("torch", "attncourse")


def _stands_for(obj: Any) -> List[Any]:
    """What calling ``obj`` may call besides ``obj`` itself: a ``functools.partial``'s function
    and bound arguments, what a decorator wrapped (``__wrapped__``), a function's default
    arguments, the ``__call__`` of a callable object and the ``forward`` of a module."""
    found: List[Any] = []
    if isinstance(obj, functools.partial):
        found += [obj.func, *obj.args, *obj.keywords.values()]
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        found.append(wrapped)
    function = getattr(obj, "__func__", obj)
    if inspect.isfunction(function):
        found += list(function.__defaults__ or ()) + list((function.__kwdefaults__ or {}).values())
    elif not inspect.isclass(obj) and not inspect.isroutine(obj) and callable(obj):
        found += [_attribute(obj, "__call__"), _attribute(obj, "forward")]
    return [v for v in found if v is not None]


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name``, or ``None`` where reading it fails in any way (``torch.classes`` raises
    RuntimeError for a name it does not know)."""
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - an attribute that cannot be read reaches nothing
        return None


def _reached_from(fn: Any) -> List[Any]:
    """The objects one function's code reaches by name: the globals it reads, its closure, the
    modules it imports, and their attributes that it reads, to any depth
    (``attncourse.flex.block_counts``, ``F.softmax``)."""
    owner = getattr(fn, "__self__", None)
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if not inspect.iscode(code):  # not a function (types.FunctionType's __code__ is a descriptor)
        return []
    global_names, attributes, imported = _names_read(code)
    scope = getattr(fn, "__globals__", {})
    found = [scope[n] for n in global_names if n in scope]
    if owner is not None and not inspect.ismodule(owner):
        found.append(owner if inspect.isclass(owner) else type(owner))  # self.helper(...)
    # a dict, list or tuple of functions: {"merge": merge_heads}["merge"](...)
    found += [
        item
        for v in list(found)
        if isinstance(v, (dict, list, tuple)) and len(v) <= 100
        for item in (v.values() if isinstance(v, dict) else v)
    ]
    found += [sys.modules[m] for m in imported if m in sys.modules]
    # default arguments: a module passed as one (``lib=attncourse.attention``) holds names too
    found += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    # modules, and the learner's classes (``Ops.merge`` of a staticmethod), hold named attributes
    holders = [v for v in found if _holds_names(v)]
    visited = {id(v) for v in holders}
    while holders:
        reached = [_attribute(h, n) for h in holders for n in attributes]
        reached = [v for v in reached if v is not None]
        found += reached
        holders = [v for v in reached if _holds_names(v) and id(v) not in visited]
        visited.update(id(v) for v in holders)
    return found


def _holds_names(obj: Any) -> bool:
    return inspect.ismodule(obj) or (inspect.isclass(obj) and not _library(obj))


def _referenced(fn: Any, levels: int = 8) -> List[Any]:
    """Everything the learner's ``fn`` can reach: what its code reaches by name
    (:func:`_reached_from`) and what the callables among those stand for (:func:`_stands_for`),
    followed through the learner's own functions, breadth first, ``levels`` calls deep.
    A global is looked up only where the code reads a global of that name:
    ``F.scaled_dot_product_attention`` does not reach a global ``scaled_dot_product_attention``.
    Names built at run time (``getattr(m, "na" + "me")``) are not followed."""
    found: List[Any] = []
    seen: set = set()
    level = [fn]
    for _depth in range(levels + 1):
        following = []
        for obj in level:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            try:
                reached = _stands_for(obj) + ([] if _library(obj) else _reached_from(obj))
            except Exception:  # noqa: BLE001 - an object that cannot be read reaches nothing
                reached = []
            found += reached
            # the learner's callables, and wrappers that look like torch's or the package's
            # (torch.compile(f), torch.no_grad()(f) copy f's __module__) but hold f
            following += [
                v
                for v in reached
                if callable(v) and (not _library(v) or _attribute(v, "__wrapped__") is not None)
            ]
        level = following
    return found


def captured(fn: Any) -> List[Any]:
    """The objects the code of ``fn`` itself reads by name: the globals it reads, its closure,
    the attributes it reads of modules (:func:`_reached_from`), without following the functions
    among them; ``[]`` when its code cannot be read."""
    try:
        return _reached_from(fn)
    except Exception:  # noqa: BLE001 - an object whose code cannot be read
        return []


def forbid(fn: Any, forbidden: Dict[str, Any]) -> None:
    """Raise a :class:`Mistake` when the learner's ``fn`` calls one of the ``forbidden``
    helpers (``{"module.name": the function}``, what ``@exercise(forbids=...)`` lists): an
    exercise text that says "do not call X" and a checker that accepts X would contradict each
    other."""
    if not forbidden:
        return
    try:
        reached = [fn] + _referenced(fn)
    except Exception:  # noqa: BLE001 - an object whose code cannot be read: graded on its outputs alone
        reached = [fn]
    for name, helper in forbidden.items():
        if any(obj is helper for obj in reached):
            raise Mistake(
                _(
                    "Your function calls {name}, which this exercise asks you to write yourself. (A "
                    "comparison with it inside your function counts as a call: compare outside the "
                    "function.)"
                ).format(name=name)
            )
        for private in _private_parts(helper):
            if any(obj is private for obj in reached):
                raise Mistake(
                    _(
                        "Your function calls {private}, which is {name} without its checks: this "
                        "exercise asks you to write it yourself."
                    ).format(private=_qualified(private), name=name)
                )


#: The operators torch's F.scaled_dot_product_attention dispatches to, by device and backend:
#: calling one is calling it (those this torch lacks are left out).
_TORCH_BACKENDS = {
    "aten.scaled_dot_product_attention": (
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_attention_math_for_mps",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_fused_attention_overrideable",
    ),
}


def _qualified(obj: Any) -> str:
    """Where a learner would find ``obj``: ``module.qualname``, ``torch.ops.aten.name``."""
    if isinstance(obj, torch._ops.OpOverloadPacket):
        return f"torch.ops.{obj}"
    return f"{_PUBLIC_HOME.get(obj.__module__, obj.__module__)}.{obj.__qualname__}"


def _private_parts(helper: Any) -> List[Any]:
    """The package's private functions that are a forbidden helper without its checks, in the
    helper's module or called by it; their docstrings say so (``repeat_kv`` checks its input
    and calls ``_repeat_kv``, ":func:`repeat_kv` without the checks"): calling one of them is
    calling the helper. For a torch operator, its fused backends (:data:`_TORCH_BACKENDS`)."""
    if isinstance(helper, torch._ops.OpOverloadPacket):
        backends = (getattr(torch.ops.aten, n, None) for n in _TORCH_BACKENDS.get(str(helper), ()))
        return [op for op in backends if op is not None]
    body = f":func:`{getattr(helper, '__name__', '')}` without the checks"
    module = sys.modules.get(getattr(helper, "__module__", None) or "")
    candidates = captured(helper) + (list(vars(module).values()) if module else [])
    found: List[Any] = []
    for obj in candidates:
        if (
            inspect.isfunction(obj)
            and obj.__name__.startswith("_")
            and obj.__module__.startswith("attncourse.")
            and (obj.__doc__ or "").strip().startswith(body)
            and not any(obj is seen for seen in found)
        ):
            found.append(obj)
    return found


# -- numbers and shapes as learners write them -----------------------------------------------


def _scalar(answer: Any, what: str) -> Any:
    """A Python ``int``, ``float`` or ``complex`` from a number given any usual way (Python,
    numpy or torch scalars, one-element arrays and tensors), else a :class:`Mistake`."""
    kind = type(answer).__name__
    if isinstance(answer, Tensor):
        if answer.numel() != 1:
            raise Mistake(
                _(
                    "The {what} should be a single number, got a tensor of shape {answer_shape}."
                ).format(what=what, answer_shape=tuple(answer.shape))
            )
        if answer.dtype == torch.bool:
            raise Mistake(
                _("The {what} should be a number, got a boolean tensor.").format(what=what)
            )
        try:
            answer = answer.detach().cpu().reshape(()).item()
        except Exception:  # noqa: BLE001 - a meta or otherwise unreadable tensor
            raise Mistake(
                _("The {what} should be a number; its tensor could not be read.").format(what=what)
            ) from None
    elif type(answer).__module__ == "numpy" and hasattr(answer, "item"):
        size = getattr(answer, "size", 1)
        if size != 1:
            raise Mistake(
                _("The {what} should be a single number, got an array of shape {value}.").format(
                    what=what, value=getattr(answer, "shape", "?")
                )
            )
        if getattr(getattr(answer, "dtype", None), "kind", "") == "b":
            raise Mistake(_("The {what} should be a number, got a boolean.").format(what=what))
        try:
            answer = (
                answer.item()
                if size == 1 and getattr(answer, "ndim", 0) == 0
                else answer.reshape(()).item()
            )
        except Exception:  # noqa: BLE001
            raise Mistake(
                _("The {what} should be a number, got {kind}.").format(what=what, kind=kind)
            ) from None
    if isinstance(answer, bool):
        raise Mistake(
            _("The {what} should be a number, got a boolean ({answer}).").format(
                what=what, answer=answer
            )
        )
    if isinstance(answer, str):
        # a number as people write it: 1,342,177,280, 1.25, 3e-5
        inside = re.search(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:e-?\d+)?", answer)
        if inside and re.fullmatch(r"\s*-?[\d.,]+(?:e-?\d+)?\s*[^\W\d_]+\s*", answer):
            # a number and its unit, "1.25 GiB": the number alone may be in another unit
            raise Mistake(
                _(
                    "The {what} should be a number, got the string {answer!r}: give it as a number "
                    "in the unit the exercise asks for, without quotes or a unit."
                ).format(what=what, answer=answer[:40])
            )
        # a formula, "ln 63" or "math.log(63)": Python computes it once the quotes are gone
        if re.search(r"[A-Za-z_][\w.]*\s*\(|\b(?:ln|log|exp|sqrt|pi)\b|\*\*|[*/^]", answer):
            raise Mistake(
                _(
                    "The {what} should be a number, got the string {answer!r}, which looks like a "
                    "formula: write it as Python without quotes (math.log(63) for ln 63, "
                    "math.sqrt(64), 2 ** 10), or give its value."
                ).format(what=what, answer=answer[:40])
            )
        if not inside:  # words only, "four", "四点一四"
            raise Mistake(
                _(
                    "The {what} should be a number, got the string {answer!r}: write the number "
                    "with digits and without quotes, as Python reads it (4.14, 1342177280)."
                ).format(what=what, answer=answer[:40])
            )
        # words around it, "line 7", or thousands separators, which Python would read as a tuple
        if inside and (inside.group() != answer.strip() or "," in inside.group()):
            raise Mistake(
                _(
                    "The {what} should be a number, got the string {answer!r}: give the number "
                    "itself, {number}, without quotes or words."
                ).format(what=what, answer=answer[:40], number=inside.group().replace(",", ""))
            )
        raise Mistake(
            _(
                "The {what} should be a number, got the string {answer!r}: remove the quotes."
            ).format(what=what, answer=answer[:40])
        )
    if type(answer) in (int, float, complex):
        return answer
    for number_types, convert in (
        (numbers.Integral, int),
        ((numbers.Real, decimal.Decimal), float),
    ):
        if isinstance(answer, number_types):
            try:
                return convert(answer)
            except Exception:  # noqa: BLE001
                raise Mistake(
                    _("The {what} should be a number, got {kind}.").format(what=what, kind=kind)
                ) from None
    if isinstance(answer, numbers.Complex):
        return complex(answer)
    raise Mistake(_("The {what} should be a number, got {kind}.").format(what=what, kind=kind))


def number(answer: Any, what: str = N_("answer")) -> float:
    """The learner's answer as a finite float, or a :class:`Mistake` saying why it is not one.

    Accepts Python, numpy and torch scalars and one-element arrays or tensors; rejects
    booleans, strings, complex numbers, NaN, infinities and integers too large for a float,
    each with a message that says so.
    """
    what = _(what) if what == "answer" else what  # a caller's own what comes translated
    value = _scalar(answer, what)
    if isinstance(value, complex):
        if value.imag != 0:
            raise Mistake(
                _("The {what} should be a real number, got the complex number {value}.").format(
                    what=what, value=value
                )
            )
        raise Mistake(
            _(
                "The {what} should be a real number, got a complex number ({value}): drop the "
                "complex type."
            ).format(what=what, value=value)
        )
    try:
        result = float(value)
    except OverflowError:
        raise Mistake(
            _(
                "The {what} is an integer with {len_value} digits: far too large to be right."
            ).format(what=what, len_value=len(str(abs(value))))
        ) from None
    if math.isnan(result):
        raise Mistake(
            _(
                "The {what} is NaN (not a number): something divided 0 by 0 or took inf - inf."
            ).format(what=what)
        )
    if math.isinf(result):
        raise Mistake(
            _("The {what} is infinite ({result}): something overflowed or divided by zero.").format(
                what=what, result=result
            )
        )
    return result


def integer(answer: Any, what: str = N_("answer")) -> int:
    """The learner's answer as an ``int``: Python, numpy or torch integers, and whole floats
    (``12.0``), are accepted; anything else is a :class:`Mistake` saying why."""
    what = _(what) if what == "answer" else what
    value = _scalar(answer, what)
    if isinstance(value, int):
        return value
    if isinstance(value, complex):
        raise Mistake(
            _("The {what} should be a whole number, got the complex number {value}.").format(
                what=what, value=value
            )
        )
    if not math.isfinite(value):
        raise Mistake(
            _("The {what} should be a whole number, got {value}.").format(what=what, value=value)
        )
    if not float(value).is_integer():
        raise Mistake(
            # repr, not :g, which prints 15.0000001 as 15
            _("The {what} should be a whole number, got {value!r}.").format(what=what, value=value)
        )
    return int(value)


def as_shape(answer: Any, what: str = N_("The shape")) -> tuple:
    """A shape given as a ``torch.Size``, a tuple or list of integers (Python, numpy or torch),
    or a 1-D integer array or tensor, as a tuple of Python ints; else a :class:`Mistake`."""
    what = _(what) if what == "The shape" else what  # a caller's own what comes translated
    message = _("{what} should be a shape, a tuple of integers such as (2, 3)").format(what=what)
    if isinstance(answer, torch.Size):
        return tuple(int(n) for n in answer)
    if isinstance(answer, Tensor) or type(answer).__module__ == "numpy":
        if getattr(answer, "ndim", None) != 1:
            raise Mistake(
                _("{message}; got {type_name} of shape {value}.").format(
                    message=message,
                    type_name=type(answer).__name__,
                    value=tuple(getattr(answer, "shape", ())),
                )
            )
        answer = list(answer)
    if not isinstance(answer, (tuple, list)):
        raise Mistake(
            _("{message}; got {type_name}.").format(
                message=message, type_name=type(answer).__name__
            )
        )
    sizes = []
    for n in answer:
        try:
            size = integer(n, what)
        except Mistake:
            raise Mistake(
                _("{message}; got {value}.").format(message=message, value=_short_repr(answer))
            ) from None
        if isinstance(n, float) or (
            type(n).__module__ == "numpy" and getattr(getattr(n, "dtype", None), "kind", "") == "f"
        ):
            raise Mistake(
                _("{message}; got {value}: the sizes must be integers, not floats.").format(
                    message=message, value=_short_repr(answer)
                )
            )
        if size < 0:
            raise Mistake(
                _("{message}; got {value}: sizes are never negative.").format(
                    message=message, value=_short_repr(answer)
                )
            )
        sizes.append(size)
    return tuple(sizes)


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def random_tensor(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Standard normal draws of ``shape``, the same for the same ``seed``: a checker's input."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def expect_tensor(
    value: Any, shape: Sequence[int], what: str, *, dtype: Optional[torch.dtype] = None
) -> Tensor:
    """Check that ``value`` is a (real, dense) tensor of ``shape`` (and ``dtype`` if given),
    else raise a :class:`Mistake`."""
    if not isinstance(value, Tensor):
        raise Mistake(
            _("{what} should be a torch.Tensor, got {type_name}.").format(
                what=what, type_name=type(value).__name__
            )
        )
    if tuple(value.shape) != tuple(shape):
        raise Mistake(
            _("{what} should have shape {shape}, got {value_shape}.").format(
                what=what, shape=tuple(shape), value_shape=tuple(value.shape)
            )
        )
    if value.is_complex():
        raise Mistake(
            _("{what} is complex ({value_dtype}): attention works with real numbers.").format(
                what=what, value_dtype=value.dtype
            )
        )
    if value.layout != torch.strided or value.is_meta:
        raise Mistake(
            _(
                "{what} should be an ordinary dense tensor, got layout {value_layout} on "
                "{value_device}."
            ).format(what=what, value_layout=value.layout, value_device=value.device)
        )
    if dtype is not None and value.dtype != dtype:
        raise Mistake(
            _("{what} should have dtype {dtype}, got {value_dtype}.").format(
                what=what, dtype=dtype, value_dtype=value.dtype
            )
        )
    return value


def expect_tuple(value: Any, length: int, message: str, *, of: type = object) -> tuple:
    """Check that ``value``, what a learner's function returned, is a tuple or a list of
    ``length`` items (each an instance of ``of``), and return it as a tuple; else raise a
    :class:`Mistake`: ``message`` (translated by the caller) with ``{type_name}`` the type of
    ``value``. A list is as good an answer as a tuple: the statements ask for a pair or a
    triple, and ``return [out, weights]`` is one."""
    if (
        not isinstance(value, (tuple, list))
        or len(value) != length
        or not all(isinstance(item, of) for item in value)
    ):
        kind = type(value).__name__
        if isinstance(value, (tuple, list)) and len(value) != length:
            kind = f"{kind} of length {len(value)}"
        raise Mistake(message.format(type_name=kind))
    return tuple(value)


#: torch's own allclose, held here: an answer that rebinds ``torch.allclose`` (to a function
#: that always says yes) changes what its own code sees, not what the checkers compare with.
_ALLCLOSE = torch.allclose


def matches(
    actual: Tensor,
    expected: Tensor,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    equal_nan: bool = False,
) -> bool:
    """Same shape and values within tolerance. NaN matches nothing, unless ``equal_nan``
    (used to recognise a known mistake that itself produces NaN). A complex, sparse or
    unreadable ``actual`` matches nothing (its imaginary part is never silently dropped)."""
    if (
        not isinstance(actual, Tensor)
        or not isinstance(expected, Tensor)
        or actual.shape != expected.shape
    ):
        return False
    if actual.is_complex() and not expected.is_complex():
        return False
    try:
        actual = actual.detach().to(torch.float64).cpu()
        expected = expected.detach().to(torch.float64).cpu()
        if not equal_nan and not bool(torch.isfinite(actual).all()):
            return False
        return bool(_ALLCLOSE(actual, expected, atol=atol, rtol=rtol, equal_nan=equal_nan))
    except Exception:  # noqa: BLE001 - a tensor that cannot be compared (sparse, meta, ...) matches nothing
        return False


#: The message of the known mistake "softmax over the wrong dimension" (see :func:`softmax_over`).
SOFTMAX_DIM = N_(
    "The softmax runs over the wrong dimension (dim=-2, the queries): each row, one "
    "query, must sum to 1 over the keys: softmax(..., dim=-1)."
)


#: The known mistake "softmax over dim=1", right for a 2-D matrix only (see :func:`softmax_over`).
SOFTMAX_DIM_ONE = N_(
    "The softmax runs over dim=1, which is the keys only for a 2-D matrix: with batch "
    "dimensions in front, dim=1 is another dimension. Count from the end: softmax(..., dim=-1)."
)


@contextlib.contextmanager
def softmax_over(dim: int):
    """Inside the block every softmax over the last dimension runs over ``dim`` instead:
    a reference computed inside it gives the known mistake "softmax over the wrong
    dimension", whatever way the reference calls softmax (``torch.softmax``,
    ``F.softmax``, ``Tensor.softmax``, or through the package)."""
    functional = torch.nn.functional
    saved = torch.softmax, functional.softmax, Tensor.softmax

    def moved(original: Callable[..., Tensor]) -> Callable[..., Tensor]:
        def softmax(input: Tensor, dim_: Any = None, *args: Any, **kwargs: Any) -> Tensor:
            given = kwargs.pop("dim", dim_)
            if given is not None and given in (-1, input.dim() - 1) and input.dim() >= 2:
                given = dim
            return original(input, given, *args, **kwargs)

        return softmax

    torch.softmax, functional.softmax, Tensor.softmax = (
        moved(saved[0]),
        moved(saved[1]),
        moved(saved[2]),
    )
    try:
        yield
    finally:
        torch.softmax, functional.softmax, Tensor.softmax = saved


def diagnose(
    actual: Tensor, mistakes: Dict[str, Tensor], *, default: str, atol: float = 1e-5
) -> str:
    """The message of the known mistake whose output ``actual`` reproduces, else ``default``.

    When several known mistakes give the same output (on this input they coincide), the
    message names all of them (:func:`several`): the output alone cannot tell which was made.
    A mistake whose value is ``None`` (not defined for this input) is skipped."""
    found = [
        named(message)
        for message, wrong in mistakes.items()
        if wrong is not None and matches(actual, wrong, atol=atol, equal_nan=True)
    ]
    return several(found) if found else default


def named(message: str) -> str:
    """``message``, recorded as naming a known mistake that the answer's values reproduce.

    :func:`diagnose` records its matches; a checker that matches known mistakes its own way
    calls this on the message it raises. When the answer's result also had the wrong dtype,
    :func:`check` shows a recorded message first and the dtype after it; any other complaint
    about the values gives way to the dtype, whose rounding may be its cause."""
    if _CONTEXT is not None:
        _CONTEXT.named.append(message)
    return message


def choice(answer: Any, choices: Sequence[str], what: str = N_("answer")) -> str:
    """The learner's multiple-choice answer as one of ``choices`` (case, spaces, one pair of
    brackets or quotes and a closing bracket or full stop after the letter ignored: ``"B"``,
    ``" (b) "``, ``"b)"``, ``"b."``), else a :class:`Mistake` that says what is expected. The
    answer is compared with each choice whole, never as a substring."""
    what = _(what) if what == "answer" else what
    options = ", ".join(f'"{c}"' for c in choices)
    expected = _("Answer with one of {options}, as a string such as {value}").format(
        options=options, value=options.split(", ")[0]
    )
    if not isinstance(answer, str):
        raise Mistake(
            _("{expected}; got {type_name} {value}.").format(
                expected=expected, type_name=type(answer).__name__, value=_short_repr(answer, 40)
            )
        )
    lowered = [c.lower() for c in choices]
    letter = answer.strip().lower()
    if len(letter) >= 2 and letter[0] + letter[-1] in ("()", "[]", '""', "''"):
        letter = letter[1:-1].strip()
    elif len(letter) >= 2 and letter[-1] in ").]" and letter[:-1].strip() in lowered:
        letter = letter[:-1].strip()  # "b)" or "b.", as a list labels its items
    if letter in lowered:
        return letter
    if not letter:
        raise Mistake(_("{expected}; your {what} is empty.").format(expected=expected, what=what))
    if len(letter) > 1 and all(c in lowered for c in letter.replace(",", "").replace(" ", "")):
        raise Mistake(
            _("{expected}; you gave several ({answer!r}): exactly one is the answer.").format(
                expected=expected, answer=answer
            )
        )
    raise Mistake(
        _("{expected}; got {value}.").format(expected=expected, value=_short_repr(answer, 40))
    )


def check_number(
    answer: Any,
    concealed_answer: str,
    concealed_mistakes: str,
    *,
    what: str,
    right: str,
    otherwise: str,
    rel_tol: float = 0.0,
    mistake_rel_tol: Optional[float] = None,
) -> str:
    """Check a numeric answer against a concealed value, naming the mistake behind a known wrong one.

    Args:
        answer: the learner's answer (a number or a one-element tensor).
        concealed_answer: :func:`conceal` of the right value.
        concealed_mistakes: :func:`conceal` of a JSON object ``{"wrong value": "what went wrong"}``.
        what: what the number is, for the message when the answer is not a number.
        right: the note returned for a right answer.
        otherwise: the message for any other number; ``{value}`` is replaced by the answer.
        rel_tol: relative tolerance for the right value (0: exact).
        mistake_rel_tol: relative tolerance for the known wrong values (default ``rel_tol``),
            at least that much of 1 near zero.
    """
    value = number(answer, what)
    expected = float(reveal(concealed_answer))
    if abs(value - expected) <= rel_tol * abs(expected):
        return right
    tolerance = rel_tol if mistake_rel_tol is None else mistake_rel_tol
    mistakes = json.loads(reveal(concealed_mistakes))
    found = [
        message
        for wrong, message in mistakes.items()
        if abs(value - float(wrong)) <= tolerance * max(1.0, abs(float(wrong)))
    ]
    exact, whole = rel_tol < 1e-6, float(expected).is_integer()
    count = whole and abs(expected) >= 1e4  # a count, which a learner may round or scale
    digits = _rounded(value, expected) if exact or count else 0
    # the answer rounded (1.342e9 for 1,342,177,280; 8.1e9 for 8,053,063,680), even where that
    # is also near a known mistake, unless it is that mistake itself
    if digits and not any(abs(value - float(w)) <= 1e-9 * abs(float(w)) for w in mistakes):
        raise Mistake(
            (
                _(
                    "{value:,.10g} is the {what} rounded to {digits} significant digits: the "
                    "answer is a whole number, so compute it exactly (a product of integers, "
                    "without e-notation)."
                )
                if whole
                else _(
                    "{value:,.10g} is the {what} rounded to {digits} significant digits: "
                    "compute it exactly, without rounding."
                )
            ).format(value=_Refused(value), what=what, digits=digits)
        )
    if found:
        raise Mistake(several([gettext_concealed(message) for message in found]))
    if count:
        for scale, unit in ((1e3, _("thousands")), (1e6, _("millions")), (1e9, _("billions"))):
            scaled = float(f"{value * scale:.12g}")  # 8.053 * 1e9 is 8053000000.000001
            near = abs(scaled - expected) <= max(0.5, rel_tol * abs(expected))
            if near or _rounded(scaled, expected):
                raise Mistake(
                    _(
                        "{value:g} looks like the {what} in {unit}: give the whole number itself."
                    ).format(value=value, what=what, unit=unit)
                )
    raise Mistake(otherwise.format(value=_Refused(value)))


def _rounded(value: float, expected: float) -> int:
    """The number of significant digits ``value`` has if it is ``expected`` rounded to them
    (2 to 6, where ``expected`` needs more: 1.342e9 for 1,342,177,280 gives 4), else 0."""
    if not math.isfinite(value) or value == expected:
        return 0
    for digits in range(2, 7):
        if float(f"{expected:.{digits}g}") == value:
            return digits
    return 0


class _Refused:
    """A refused number in a message: formatted as the message asks (``{value:,.0f}``,
    ``{value:g}``) where that prints the number the learner gave, else as given: a format that
    rounds printed 3.1 as "3 is not it", and 1342177280.5 as the right answer, 1,342,177,280."""

    def __init__(self, value: Union[int, float]) -> None:
        self.value = value

    def __format__(self, spec: str) -> str:
        shown = format(self.value, spec)
        try:
            same = float(shown.replace(",", "")) == float(self.value)
        except ValueError:  # inf, nan
            return shown
        whole = float(self.value).is_integer() and abs(self.value) < 1e16
        if whole and (not same or "e" in shown):  # a count: 1,050,000, not 1.05e+06 or 1,048,832.0
            return f"{int(self.value):,}"
        return shown if same else f"{self.value:,}"


def check_line_number(
    answer: Any, concealed_line: str, concealed_mistakes: str, *, right: str, otherwise: str
) -> str:
    """Check a find-the-bug answer, the number of the wrong line of a listing: a whole number
    (else a :class:`Mistake`), graded by :func:`check_number` against the concealed line, each
    known wrong line explained by its concealed message, ``right`` and ``otherwise`` as there."""
    if isinstance(answer, str) and re.search(r"[=(\[]", answer):
        # the wrong line's code pasted as the answer
        raise Mistake(
            _(
                "Give the number of the wrong line in the listing, a whole number (bug_line = 7 "
                "for line 7), not the line's code: got the string {answer!r}."
            ).format(answer=answer[:40])
        )
    return check_number(
        integer(answer, _("line number")),
        concealed_line,
        concealed_mistakes,
        what=_("line number"),
        right=right,
        otherwise=otherwise,
    )
