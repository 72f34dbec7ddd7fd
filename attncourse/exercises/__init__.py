"""Self-graded exercises: ``check(exercise_id, answer)``, ``hint(exercise_id)``, ``solution(exercise_id)``.

Every chapter's exercises live in a module of this package and register themselves on
import; ``list_exercises()`` shows them all, ``registry()`` maps each id to its
exercise. ``set_language("zh")`` makes them speak Chinese (简体中文); English is the default.
"""

import importlib
import pkgutil

from ._core import Exercise, Result, check, hint, list_exercises, registry, solution
from ._i18n import get_language, set_language

# Importing each chapter's module is what registers its exercises: the @exercise decorator
# (in _core.py) adds each checker to the registry that check(), hint() and solution() read.
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "check",
    "hint",
    "solution",
    "list_exercises",
    "registry",
    "Exercise",
    "Result",
    "set_language",
    "get_language",
]
