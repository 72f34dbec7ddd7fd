"""Shared fixtures: every test that takes ``device`` runs on the CPU and, when present, on CUDA."""

import os

import pytest
import torch

# Chapter 10's Triton kernels (tests/test_kernels.py): without a GPU they run through Triton's
# interpreter, which must be switched on before triton is first imported. Nothing else in the
# test suite imports triton, so this changes no other test.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
from hypothesis import settings

# Deterministic property tests: the same examples on every run, no example database on disk.
settings.register_profile(
    "default", deadline=None, derandomize=True, database=None, max_examples=60
)
settings.register_profile("thorough", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


# `make test-fast` (and the workflow's macOS and Windows jobs) runs `pytest tests -m "not slow"`:
# these modules build a fresh environment, drive Chromium or execute every notebook.
SLOW_MODULES = {
    "test_colab_runtime.py",
    "test_book_browser.py",
    "test_colab_browser.py",
    "test_loaded_run.py",
}


# `make test` runs on two workers (pytest -n 2 --dist loadscope --no-loadscope-reorder): a module
# goes to one worker whole, in the order collected. The longest go first, so that neither
# worker is left with a long module at the end while the other waits.
LONGEST_FIRST = (  # by their time in a fresh-clone CI run (seconds): 113, 114, 62, 40, 38, 27, ...
    "test_assignments.py",  # grades two submissions at a time: first, for the most work
    "test_book_browser.py",
    "test_colab_runtime.py",
    "test_exercises_grading.py",
    "test_compile_matrix.py",
    "test_colab_browser.py",
    "test_gpu_check.py",
    "test_install.py",
    "test_exercises_ch10_gpu.py",
    "test_kernels.py",
    "test_compile.py",
    "test_runtime.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_MODULES or item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept within


# One torch thread per worker: two workers on two cores, not four threads fighting for them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


# -- every check of the checker tests, in Chinese as well ------------------------------------------
# Each check() a checker test makes is made a second time in Chinese: the two must take the same
# path (the same messages looked up, in the same order: the same case, the same mistakes named)
# and every message the Chinese one shows must be translated. So each Chinese message is tested
# by exactly the cases that test the English one. The mutants of the solutions
# (test_exercises_grading.py) are judged in English only: their hundreds of checks took 12 s
# more in Chinese, and each message they reach is translated (test_zh_messages.py).
BILINGUAL_MODULES = ("test_exercises_",)
MONOLINGUAL_MODULES = ("test_exercises_grading.py",)


@pytest.fixture(autouse=True)
def _checks_in_chinese_too(request, monkeypatch):
    name = request.path.name
    if not name.startswith(BILINGUAL_MODULES) or name in MONOLINGUAL_MODULES:
        yield
        return
    from attncourse.exercises import _core, _i18n

    original = _core._check
    seen = []

    def bilingual(exercise_id, answer):
        if _i18n.get_language() != "en":
            return original(exercise_id, answer)
        with _i18n.trace() as english:
            result = original(exercise_id, answer)
        with _i18n.language("zh"), _i18n.trace() as chinese:
            translated = original(exercise_id, answer)
        seen.append((exercise_id, result, translated, english, chinese))
        return result

    monkeypatch.setattr(_core, "_check", bilingual)
    yield
    catalogue = _i18n.catalogue_entries("zh")
    for exercise_id, result, translated, english, chinese in seen:
        where = f"{exercise_id}: {result.message[:200]!r}"
        assert translated.status == result.status, where
        assert chinese == english, f"{where}: the Chinese check took another path"
        missing = [m for m in english if not catalogue.get(m)]
        assert not missing, f"{where}: untranslated messages {missing}"
