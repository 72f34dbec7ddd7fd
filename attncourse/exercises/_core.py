"""The machinery behind ``check``, ``hint`` and ``solution``.

A chapter module registers each exercise with :func:`exercise`, decorating its checker.
A checker receives the learner's answer and either returns (optionally a short success
note) or raises :class:`Mistake` with feedback naming the likely error. A learner function
that raises ``NotImplementedError`` (the untouched stub) counts as not attempted.
"""
from __future__ import annotations

import base64
import html
import json
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

NOT_ATTEMPTED = "not attempted yet"
PASSED = "passed"
FAILED = "failed"


class Mistake(Exception):
    """Raised by a checker: the answer is wrong, and the message says what is likely wrong."""


class NotAttempted(Exception):
    """Raised when the learner's answer is still the stub."""


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`check`: ``passed`` is a bool, ``message`` the feedback."""

    exercise_id: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = {PASSED: "✔", FAILED: "✘"}.get(self.status, "…")
        return f"{mark} {self.exercise_id}: {self.status}\n{self.message}".rstrip()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {PASSED: "#1b7f3b", FAILED: "#b3261e"}.get(self.status, "#6b6b6b")
        mark = {PASSED: "✔", FAILED: "✘"}.get(self.status, "…")
        body = html.escape(self.message).replace("\n", "<br>")
        return (
            f'<div style="border-left:4px solid {colour};padding:0.4em 0.8em;margin:0.3em 0">'
            f'<b style="color:{colour}">{mark} {html.escape(self.exercise_id)}: {self.status}</b>'
            f"<br>{body}</div>"
        )


@dataclass(frozen=True)
class Reveal:
    """A hint or a solution: collapsed in Jupyter and in the book until the reader opens it."""

    label: str
    text: str
    code: bool = False

    def __str__(self) -> str:
        return f"{self.label}\n\n{self.text}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        inner = html.escape(self.text)
        inner = f"<pre>{inner}</pre>" if self.code else inner.replace("\n", "<br>")
        return f"<details><summary><b>{html.escape(self.label)}</b> (click to show)</summary>{inner}</details>"


@dataclass(frozen=True)
class Exercise:
    exercise_id: str
    title: str
    checker: Callable[[Any], Optional[str]]
    hint: str
    solution: Callable[[], str]
    solution_is_code: bool


_REGISTRY: Dict[str, Exercise] = {}


def exercise(
    exercise_id: str, *, title: str, hint: str, solution: Any, solution_is_code: Optional[bool] = None
) -> Callable[[Callable[[Any], Optional[str]]], Callable[[Any], Optional[str]]]:
    """Register the decorated checker under ``exercise_id``.

    ``solution`` is a function (its source is shown: a reference implementation) or a
    string produced by :func:`conceal` (shown decoded: a worked answer that must not appear
    in plain text in the source).
    """

    def register(checker: Callable[[Any], Optional[str]]) -> Callable[[Any], Optional[str]]:
        if exercise_id in _REGISTRY:
            raise ValueError(f"exercise {exercise_id!r} is registered twice")
        if callable(solution):
            text: Callable[[], str] = lambda: textwrap.dedent(inspect.getsource(solution))
            is_code = True if solution_is_code is None else solution_is_code
        else:
            text = lambda: reveal(solution)
            is_code = False if solution_is_code is None else solution_is_code
        _REGISTRY[exercise_id] = Exercise(exercise_id, title, checker, textwrap.dedent(hint).strip(), text, is_code)
        return checker

    return register


def _get(exercise_id: str) -> Exercise:
    if exercise_id not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"no exercise {exercise_id!r}; the exercises are: {known}")
    return _REGISTRY[exercise_id]


def check(exercise_id: str, answer: Any) -> Result:
    """Check ``answer`` for the exercise ``exercise_id`` and return a :class:`Result`.

    Never raises for a wrong or unfinished answer: an untouched stub (a function raising
    ``NotImplementedError``, or ``...``/``None`` for a value) is reported as not attempted.
    """
    ex = _get(exercise_id)
    if answer is None or answer is Ellipsis:
        return Result(exercise_id, NOT_ATTEMPTED, "Replace the placeholder with your answer, then run this cell again.")
    try:
        note = ex.checker(answer)
    except NotAttempted:
        return Result(exercise_id, NOT_ATTEMPTED, "Your function still raises NotImplementedError: write its body, then run this cell again.")
    except Mistake as mistake:
        return Result(exercise_id, FAILED, str(mistake) + f"\nStuck? Run hint({exercise_id!r}).")
    return Result(exercise_id, PASSED, note or "Well done.")


def hint(exercise_id: str) -> Reveal:
    """A hint for the exercise, collapsed until opened."""
    return Reveal(f"Hint for {exercise_id}", _get(exercise_id).hint)


def solution(exercise_id: str) -> Reveal:
    """The solution of the exercise, collapsed until opened. Try the exercise first."""
    ex = _get(exercise_id)
    return Reveal(f"Solution of {exercise_id}", ex.solution(), code=ex.solution_is_code)


def list_exercises() -> List[Dict[str, str]]:
    """Every registered exercise, as ``{"id": ..., "title": ...}`` in chapter order."""
    return [{"id": e.exercise_id, "title": e.title} for e in _REGISTRY.values()]


# -- concealed answers -------------------------------------------------------------------

_KEY = b"attncourse"


def conceal(text: str) -> str:
    """Encode ``text`` so that it cannot be read in the package source (not encryption)."""
    raw = text.encode()
    return base64.b64encode(bytes(b ^ _KEY[i % len(_KEY)] for i, b in enumerate(raw))).decode()


def reveal(encoded: str) -> str:
    """Decode a string made by :func:`conceal`."""
    raw = base64.b64decode(encoded)
    return bytes(b ^ _KEY[i % len(_KEY)] for i, b in enumerate(raw)).decode()


# -- helpers for checkers ----------------------------------------------------------------


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the learner's ``fn``: a stub becomes :class:`NotAttempted`, any other error a :class:`Mistake`."""
    if not callable(fn):
        raise Mistake(f"Expected a function, got {type(fn).__name__}.")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotAttempted() from None
    except Exception as error:  # the learner's code failed: report it, do not crash the notebook
        raise Mistake(f"Your function raised {type(error).__name__}: {error}") from None


def number(answer: Any, what: str = "answer") -> float:
    """The learner's answer as a float, or a :class:`Mistake` saying it is not a number."""
    if isinstance(answer, Tensor) and answer.numel() == 1:
        return float(answer.item())
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Mistake(f"The {what} should be a number, got {type(answer).__name__}.")
    return float(answer)


def expect_tensor(value: Any, shape: Sequence[int], what: str) -> Tensor:
    """Check that ``value`` is a tensor of ``shape``, else raise a :class:`Mistake`."""
    if not isinstance(value, Tensor):
        raise Mistake(f"{what} should be a torch.Tensor, got {type(value).__name__}.")
    if tuple(value.shape) != tuple(shape):
        raise Mistake(f"{what} should have shape {tuple(shape)}, got {tuple(value.shape)}.")
    return value


def matches(actual: Tensor, expected: Tensor, *, atol: float = 1e-5, rtol: float = 1e-4, equal_nan: bool = False) -> bool:
    """Same shape and values within tolerance. NaN matches nothing, unless ``equal_nan``
    (used to recognise a known mistake that itself produces NaN)."""
    if not isinstance(actual, Tensor) or actual.shape != expected.shape:
        return False
    actual = actual.detach().to(torch.float64).cpu()
    expected = expected.detach().to(torch.float64).cpu()
    if not equal_nan and not bool(torch.isfinite(actual).all()):
        return False
    return torch.allclose(actual, expected, atol=atol, rtol=rtol, equal_nan=equal_nan)


def diagnose(actual: Tensor, mistakes: Dict[str, Tensor], *, default: str, atol: float = 1e-5) -> str:
    """The message of the first known mistake whose output ``actual`` reproduces, else ``default``."""
    for message, wrong in mistakes.items():
        if matches(actual, wrong, atol=atol, equal_nan=True):
            return message
    return default


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
    for wrong, message in json.loads(reveal(concealed_mistakes)).items():
        if abs(value - float(wrong)) <= tolerance * max(1.0, abs(float(wrong))):
            raise Mistake(message)
    raise Mistake(otherwise.format(value=value))
