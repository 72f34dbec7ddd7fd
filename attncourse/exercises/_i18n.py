"""The language of ``check``, ``hint`` and ``solution``: English by default, Chinese on request.

The messages are written in English in the checkers, marked with :func:`gettext` (``_``), and
translated through standard gettext catalogues shipped with the package
(``locale/<language>/LC_MESSAGES/attncourse.mo``, compiled from the ``.po`` next to it). A
message with values in it is marked as a template and filled after translation::

    raise Mistake(_("{what} should have shape {expected}, got {shape}.").format(...))

Text that must stay unreadable in the package source (the worked answers and the known wrong
values of a numeric exercise, see :func:`~attncourse.exercises._core.conceal`) is translated
through a second catalogue whose entries are concealed on both sides (:func:`gettext_concealed`).

``set_language("zh")`` chooses Chinese for the rest of the session (the Chinese notebooks'
set-up cell does it); the environment variable ``ATTNCOURSE_LANGUAGE`` sets the default.
"""

from __future__ import annotations

import contextlib
import gettext as _gettext
import os
import re
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, TypeVar

from ._concealed import conceal, reveal

T = TypeVar("T")

DOMAIN = "attncourse"
CONCEALED_DOMAIN = "attncourse_concealed"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"

#: The languages ``check`` speaks: the code ``set_language`` takes, and its catalogue's locale.
LANGUAGES: Dict[str, Optional[str]] = {"en": None, "zh": "zh_CN"}
_ALIASES = {"zh_cn": "zh", "zh-cn": "zh", "zh-hans": "zh", "zh_hans": "zh", "chinese": "zh"}
_ALIASES.update({"en_us": "en", "en-us": "en", "en_gb": "en", "en-gb": "en", "english": "en"})

_catalogues: Dict[tuple, _gettext.NullTranslations] = {}
_traces: List[List[str]] = []


def _normalise(language: str) -> str:
    if not isinstance(language, str):
        raise TypeError(
            f"language must be a string such as 'en' or 'zh', got {type(language).__name__}"
        )
    code = language.strip().lower()
    code = _ALIASES.get(code, code)
    if code not in LANGUAGES:
        known = ", ".join(repr(k) for k in LANGUAGES)
        raise ValueError(f"language={language!r} is not available; the languages are {known}")
    return code


_active = _normalise(os.environ.get("ATTNCOURSE_LANGUAGE", "en") or "en")


def set_language(language: str) -> None:
    """Speak ``language`` from now on in ``check``, ``hint`` and ``solution``: ``"en"``
    (English, the default) or ``"zh"`` (简体中文)."""
    global _active
    _active = _normalise(language)


def get_language() -> str:
    """The language ``check``, ``hint`` and ``solution`` speak now (``"en"`` or ``"zh"``)."""
    return _active


@contextlib.contextmanager
def language(code: str) -> Iterator[None]:
    """Speak ``code`` inside the block, then the language spoken before."""
    global _active
    before, _active = _active, _normalise(code)
    try:
        yield
    finally:
        _active = before


def in_language(code: str, make: Callable[[], T]) -> T:
    """``make()`` with ``code`` spoken."""
    with language(code):
        return make()


def extra_languages() -> List[str]:
    """The languages, other than the one spoken, that ``check``, ``hint`` and ``solution`` also
    render their output in: the comma-separated codes of ATTNCOURSE_EXTRA_LANGUAGES (the book
    build sets it, so that one execution serves both editions); none by default."""
    codes = [c for c in os.environ.get("ATTNCOURSE_EXTRA_LANGUAGES", "").split(",") if c.strip()]
    return [c for c in dict.fromkeys(_normalise(c) for c in codes) if c != _active]


def _catalogue(domain: str) -> _gettext.NullTranslations:
    locale = LANGUAGES[_active]
    if locale is None:
        return _gettext.NullTranslations()
    key = (domain, locale)
    if key not in _catalogues:
        _catalogues[key] = _gettext.translation(domain, str(LOCALE_DIR), languages=[locale])
    return _catalogues[key]


@contextlib.contextmanager
def trace() -> Iterator[List[str]]:
    """Record, in order, the English message of every translation looked up inside the block:
    the same answer must take the same messages in every language."""
    used: List[str] = []
    _traces.append(used)
    try:
        yield used
    finally:
        del _traces[next(i for i, t in enumerate(_traces) if t is used)]


def gettext(message: str) -> str:
    """``message`` (English, as written in the checker) in the language spoken now; an English
    message without a translation is returned as it is."""
    for used in _traces:
        used.append(message)
    return _catalogue(DOMAIN).gettext(message)


def gettext_concealed(message: str) -> str:
    """Like :func:`gettext` for text kept concealed in the package: ``message`` is looked up
    by its concealed form, and the translation is stored concealed as well."""
    for used in _traces:
        used.append(message)
    if LANGUAGES[_active] is None:
        return message
    key = conceal(message)
    found = _catalogue(CONCEALED_DOMAIN).gettext(key)
    return message if found == key else reveal(found)


def catalogue_entries(code: str) -> Dict[str, str]:
    """Every translated message of ``code``'s catalogues, ``{english: translation}`` (the
    concealed ones revealed); empty for English."""
    if LANGUAGES[_normalise(code)] is None:
        return {}
    with language(code):
        plain = dict(getattr(_catalogue(DOMAIN), "_catalog", {}))
        hidden = getattr(_catalogue(CONCEALED_DOMAIN), "_catalog", {})
    plain.update({reveal(k): reveal(v) for k, v in hidden.items() if k and isinstance(k, str)})
    return {k: v for k, v in plain.items() if isinstance(k, str) and k and v}


#: A Latin letter, digit or closing bracket right before a Chinese character, and the reverse.
_LATIN_THEN_CJK = re.compile(r"([A-Za-z0-9_)\]}'`%])([\u4e00-\u9fff])")
_CJK_THEN_LATIN = re.compile(r"([\u4e00-\u9fff])([A-Za-z0-9_(\[{'`])")


#: A Python string as repr() quotes it, the learner's own text echoed back: never respaced.
_QUOTED = re.compile(r"(?<![A-Za-z])'(?:[^'\\\n]|\\.)*'")


def spaced(text: str) -> str:
    """``text`` with a space between Chinese and the Latin text next to it (``positions 的形状``,
    ``写到了 Y 的第 3 行``), as the catalogues write it: a value filled into a Chinese template
    (a name, a shape, a number) is set off like the template's own Latin words. A quoted string
    (the learner's answer echoed back, ``'约4.14'``) is kept as it was written. Text without
    Chinese comes back unchanged."""
    quoted = _QUOTED.findall(text)
    masked = _QUOTED.sub(lambda m: "'\0'", text)
    masked = _LATIN_THEN_CJK.sub(r"\1 \2", masked)
    masked = _CJK_THEN_LATIN.sub(r"\1 \2", masked)
    pieces = masked.split("'\0'")
    return "".join(piece + (quoted[i] if i < len(quoted) else "") for i, piece in enumerate(pieces))


def N_(message: str) -> str:  # noqa: N802 - gettext's own name for "mark, translate later"
    """Mark ``message`` for the catalogue without translating it now (a module constant, whose
    translation happens where it is shown, ``_(CONSTANT)``)."""
    return message


_ = gettext
