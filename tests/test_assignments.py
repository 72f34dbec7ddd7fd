"""The instructor edition (``tools/assignments.py``) grades with otter-grader, end to end.

For every chapter the assignment is built in English and Chinese (``otter assign`` on the
generated master notebooks), and two submissions are graded with otter's own grading
(``otter.api.grade_submission``, what ``otter run`` calls, without Docker) against the chapter's
one autograder, which serves both languages (a third, in two chapters):

* the English student notebook with a realistic mistake planted in the first, third, ... graded
  exercise and the reference answer in the others;
* the Chinese student notebook the other way round: the reference answer where the English one
  has the mistake, the mistake where it has the reference answer.

So every exercise is graded once with its reference answer (full marks) and once with its
mistake (no points), and every chapter's feedback is read in both languages: in English it
holds the checker's diagnosis (the words of the checkers' own test), in Chinese the diagnosis
``check`` gives the same mistake in Chinese in this process (but for the two kernels and a
mistake that needs the notebook's objects, where it must be Chinese);
* in chapters 1 and 10 (``UNTOUCHED``: functions to write, numbers, and Triton kernels run by
  the interpreter), the untouched student notebook: zero, every question graded (no crash).
  Every chapter's stubs take the same path (otter runs the answer cell, which raises or leaves
  ``...``; the question's test calls ``check``, which says "not attempted" and fails), and each
  exercise's stub is "not attempted" in its checker's own tests.

24 gradings (until 2026-11 the untouched notebook of every chapter too, 33; before that the
reference answers and the mistakes each a submission of their own, 44, which took CI past its
8 minutes).

The mistakes are the wrong answers of the checkers' own tests (``tests/test_exercises_*.py``):
for a coding exercise the first wrong function of a ``(wrong, diagnosis)`` parametrisation,
copied with what it needs from its test module; for a number, a mistake the checker names (read
from the checker by ``exercise_helpers.number_exercises``); the other value answers below.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path

import pytest
import torch
import yaml
from exercise_helpers import number_exercises
from project_tools import ROOT, tool

pytest.importorskip("otter", reason="otter-grader is the instructor extra (make test installs it)")
pytestmark = pytest.mark.slow

assignments = tool("assignments")
from attncourse.exercises import check, registry  # noqa: E402

CHAPTERS = [Path(doc).name for doc, _ in assignments.colab_edition.chapters()]
LANGUAGES = assignments.LANGUAGES
KINDS = ("en-mixed", "zh-mixed")
#: The chapters whose untouched student notebook is graded too (see the module's docstring).
UNTOUCHED = ("01_dot_product_attention", "10_gpu_attention")
#: The chapter whose submissions carry the two attacks on grading (:func:`rebound`, :func:`teaching_name`).
FULL_CHAPTER = "01_dot_product_attention"

#: Value answers that ``check_number`` does not grade: a wrong answer from the checkers' tests
#: and the words of its diagnosis there (``None``: the reference answer is prepended).
OTHER_MISTAKES = {
    "cross-attention/shapes": (
        'answer = {"weights": (2, 4, 9, 5), "output": (2, 5, 48), "key_padding_mask": (2, 1, 1, 9)}',
        "rows are queries and columns are keys",
    ),
    "cross-attention/which-bug": ('wrong_line = "b"', "Line (b) is right"),
    "cross-attention/diagonal-baseline": ("diagonal_accuracy = 28.06", "as a percentage"),
    "language-model/temperature-experiment": (
        "logits = torch.log(torch.tensor([0.5, 0.3, 0.2]))\n"
        "draws = torch.multinomial(torch.softmax(logits, -1), 20_000, replacement=True)",
        "temperature was not applied",
    ),
    "inference/mqa-gap": (None, "wrong sign"),
}
MQA_SIGN = '\nanswer["gap"] = -answer["gap"]'


# -- the mistakes ------------------------------------------------------------------------------


#: Coding exercises whose tests build the wrong answer inside the test: the same wrong
#: answer as an expression over their test module's names, and the words of its diagnosis.
BUILT_IN_TESTS = {
    "multi-head/forward": ("lambda *args: _forward(*args, out_proj=False)", "W^O is missing"),
    "masking/attention-mask": (
        "lambda n, S, causal: _mask(n, S, causal, with_padding=False)",
        "padding is missing",
    ),
    "cross-attention/single-head": ('_make(value="w_k")', "K = V = X_2 W^K"),
    "gpu/masked-softmax-kernel": ("_jit(softmax_no_lengths)", "lengths are ignored"),
    "gpu/online-softmax-kernel": (
        '_online_variant(**{"m_new = tl.maximum(m, tl.max(s, axis=1))": "m_new = tl.max(s, axis=1)"})',
        "overflowed",
    ),
    "flex/document-window-mask": ("_window(lambda s, q, k, w: s & (k <= q))", "window is ignored"),
    "flex/alibi-score-mod": (
        "_alibi(lambda s, m, n, h, q, k, o: s + m[h] * (q + o - k))",
        "wrong sign",
    ),
}


def _bound(node: ast.stmt) -> set[str]:
    """The names a module-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.Try):
        return set().union(*(_bound(n) for n in node.body))
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def standalone(expression: str, tree: ast.Module) -> str:
    """Code that defines ``_answer = expression`` with the module-level statements of its test
    module that it needs (functions, constants, imports), pytest's and the helpers' left out."""
    wanted = assignments._free_reads(ast.parse(expression))
    needed: list[ast.stmt] = []
    changed = True
    while changed:
        changed = False
        for node in tree.body:
            if node in needed or not _bound(node) & wanted:
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)) and (
                {a.name for a in node.names} & {"pytest"}
                or getattr(node, "module", "") in ("exercise_helpers", "project_tools")
            ):
                continue
            needed.append(node)
            wanted |= assignments._free_reads(node)
            changed = True
    body = [node for node in tree.body if node in needed]  # in the module's order
    return "\n".join([*(ast.unparse(n) for n in body), f"_answer = {expression}"])


def _cases(decorator: ast.AST, dicts: dict[str, ast.Dict]) -> list[tuple[ast.AST, str]]:
    """The ``(wrong answer, diagnosis)`` pairs of a ``parametrize``: tuples of a function (a
    name or a lambda) and a string, or the items of a module's ``{diagnosis: answer}``."""
    args = getattr(decorator, "args", [])
    cases = args[1] if len(args) > 1 else None
    if isinstance(cases, ast.Call) and isinstance(cases.func, ast.Attribute):
        table = dicts.get(getattr(cases.func.value, "id", ""))
        return [(v, k.value) for k, v in zip(table.keys, table.values)] if table else []
    pairs = []
    for case in getattr(cases, "elts", []):
        parts = getattr(case, "elts", [])
        answers = [p for p in parts if isinstance(p, (ast.Name, ast.Lambda))]
        words = [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
        if len(parts) == 2 and answers and words:
            pairs.append((answers[0], words[0]))
    return pairs


@cache
def wrong_functions() -> dict[str, tuple[str, str]]:
    """``{exercise id: (code defining _answer, diagnosis)}`` from the checkers' tests."""
    ids = set(registry())
    found: dict[str, tuple[str, str]] = {}
    for path in sorted((ROOT / "tests").glob("test_exercises_ch*.py")):
        tree = ast.parse(path.read_text())
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        constants = {
            n.targets[0].id: n.value.value
            for n in tree.body
            if isinstance(n, ast.Assign)
            and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Constant)
        }
        dicts = {
            n.targets[0].id: n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
            and isinstance(n.targets[0], ast.Name)
        }  # fmt: skip
        for eid, (expression, words) in BUILT_IN_TESTS.items():
            if eid in path.read_text() or any(v == eid for v in constants.values()):
                found.setdefault(eid, (standalone(expression, tree), words))
        for test in defs.values():
            mentioned = {
                n.value if isinstance(n, ast.Constant) else constants.get(n.id)
                for n in ast.walk(test)
                if isinstance(n, (ast.Constant, ast.Name))
            } & ids
            if len(mentioned) != 1 or (eid := mentioned.pop()) in found:
                continue
            for decorator in test.decorator_list:
                for answer, words in _cases(decorator, dicts):
                    if not isinstance(answer, ast.Name) or answer.id in defs:
                        found.setdefault(eid, (standalone(ast.unparse(answer), tree), words))
    return found


def mistake(exercise) -> tuple[str, str]:
    """``(code of a wrong answer, the words of its diagnosis)`` for one exercise."""
    eid = exercise.exercise_id
    if eid in OTHER_MISTAKES:
        code, words = OTHER_MISTAKES[eid]
        if code is None:
            code = assignments.reference_answer(exercise) + MQA_SIGN
        return code, words
    numbers = number_exercises()
    if eid in numbers:
        value, message = numbers[eid][2][0]
        value = int(value) if value == int(value) else value
        return f"{exercise.answer} = {value!r}", message
    functions = wrong_functions()
    assert eid in functions, f"{eid}: no wrong answer found in the checkers' tests"
    source, words = functions[eid]
    return f"{source}\n{exercise.answer} = _answer", words


#: Kernels: in this process the checker launches them through Triton's interpreter or says why
#: it cannot, which the grading kernel decides for itself.
KERNEL_EXERCISES = {"gpu/masked-softmax-kernel", "gpu/online-softmax-kernel"}


def chinese_diagnosis(exercise) -> str | None:
    """The longest stretch without digits of the first line of what ``check`` says, in Chinese,
    to the planted mistake, computed in this process (the mistake's code run on its own); ``None``
    for a kernel, or a mistake whose code needs the notebook's objects."""
    if exercise.exercise_id in KERNEL_EXERCISES:
        return None
    namespace = {"torch": torch}
    try:
        exec(mistake(exercise)[0], namespace)
    except NameError:  # a value computed from the chapter's objects
        return None
    message = check(exercise.exercise_id, namespace[exercise.answer], language="zh").message
    return max(re.split(r"[-+.\d]*\d[-+.\de]*", message.splitlines()[0]), key=len)


# -- building and grading ----------------------------------------------------------------------


BUILT = ROOT / "_build" / "assignments"
SITE = ROOT / "_build" / "html" / "assignments"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The assignments ``make assignments`` built (``make test`` builds them first when a chapter
    or the tool changed), or, run without make, a fresh build in a temporary folder."""
    if (BUILT / ".built").exists():
        return BUILT
    out = tmp_path_factory.mktemp("assignments")
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "assignments.py"), "--out", str(out)], check=True
    )
    return out


@pytest.mark.parametrize("lang", LANGUAGES)
def test_no_graded_prediction_is_answered_below_it(built, lang):
    """A predict exercise's answer comes after it in the chapter (predict, then see); in a graded
    student notebook, which a student reads to the end, nothing below a graded prediction may
    give its answer (its value, or a formula the page names as giving it away)."""
    from test_predict_before_reveal import PREDICT_ANSWERS, _found

    points = assignments.points()
    answered = []
    for student in sorted((built / lang).glob("*/dist/student/*.ipynb")):
        cells = json.loads(student.read_text())["cells"]
        for exercise_id, (answer, giveaways) in PREDICT_ANSWERS.items():
            at = [
                i for i, c in enumerate(cells) if f'check("{exercise_id}"' in "".join(c["source"])
            ]
            if not points[student.stem].get(exercise_id) or not at:
                continue
            below = "\n".join("".join(c["source"]) for c in cells[at[0] + 1 :])
            for value in (answer, *(g for g in giveaways if isinstance(g, str))):
                answered += [(student.name, exercise_id, hit) for hit in _found(below, value)]
    assert not answered, answered


def test_the_sites_downloads_hold_every_chapter(built):
    """The instructors' page links one zip per language: every chapter's student notebook, and
    in English every chapter's autograder (which grades both languages)."""
    if built != BUILT:
        pytest.skip("no make assignments build: the downloads are written by make assignments")
    page = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    for lang in LANGUAGES:
        name = assignments.DOWNLOAD.format(lang=lang)
        assert f"assignments/{name}" in page, name
        with zipfile.ZipFile(SITE / name) as archive:
            files = archive.namelist()
        for chapter in CHAPTERS:
            assert f"{chapter}/student/{chapter}.ipynb" in files, (lang, chapter)
            autograders = [f for f in files if f.startswith(f"{chapter}/autograder/")]
            assert len(autograders) == (1 if lang == "en" else 0), (lang, chapter, autograders)


@pytest.mark.parametrize(
    "chapters, words",
    [
        ({"03_maskin": {"masking/count-allowed": 3}}, "no chapter ['03_maskin']"),
        ({"03_masking": {"masking/count-alowed": 3}}, "names no exercise ['masking/count-alowed']"),
        (
            {"03_masking": {"dot-product/attention": 2}},
            "['dot-product/attention'] are not exercises of 03_masking",
        ),
    ],
)
def test_a_mistyped_points_file_is_refused_naming_the_entry(tmp_path, monkeypatch, chapters, words):
    """An instructor's typo in tools/assignments.yml stops the build: it used to leave every
    point at 1 without a word when it was in a chapter's name or put an id under another chapter."""
    config = tmp_path / "assignments.yml"
    config.write_text(json.dumps({"default_points": 1, "chapters": chapters}))
    monkeypatch.setattr(assignments, "CONFIG", config)
    with pytest.raises(SystemExit) as stopped:
        assignments.points()
    assert words in str(stopped.value), str(stopped.value)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_gradescope_shows_each_exercises_points_and_feedback(built, chapter):
    """Otter shows every test's result on Gradescope (not only a summary of the public tests)
    when its config has ``show_all_public`` and every test is public: both must hold."""
    zip_path = next((built / "en" / chapter / "dist" / "autograder").glob("*.zip"))
    with zipfile.ZipFile(zip_path) as archive:
        config = json.loads(archive.read("otter_config.json"))
        tests = [archive.read(n).decode() for n in archive.namelist() if n.startswith("tests/")]
    assert config.get("show_all_public") is True, config
    assert tests and all("hidden=False" in t and "hidden=True" not in t for t in tests)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_autograder_installs_a_cpu_torch(built, chapter):
    """Gradescope builds the autograder's image from its ``environment.yml``: the pip list must
    carry PyTorch's CPU index (else pip takes torch's CUDA build and its nvidia-* libraries, some
    2.5 GB, on a machine with no GPU) and the package at the commit the students install, with
    triton where the chapter runs Triton kernels."""
    zip_path = next((built / "en" / chapter / "dist" / "autograder").glob("*.zip"))
    with zipfile.ZipFile(zip_path) as archive:
        environment = yaml.safe_load(archive.read("environment.yml"))
    pip = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert f"--extra-index-url {assignments.CPU_TORCH_INDEX}" in pip, pip
    assert assignments.CPU_TORCH_INDEX == "https://download.pytorch.org/whl/cpu"
    package = [line for line in pip if re.match(r"attncourse(\[gpu\])? @ git\+", line)]
    assert len(package) == 1 and re.search(r"@[0-9a-f]{40}$|@main$", package[0]), pip
    # triton, for the chapter whose exercises run Triton kernels (through its interpreter)
    kernels = "import_kernels(" in (ROOT / "book" / f"{chapter}.ipynb").read_text()
    assert package[0].startswith("attncourse[gpu] @") == kernels, (chapter, package)


def planted(student: dict, chapter_exercises: list, first: int) -> dict:
    """The student notebook with a wrong answer in every other answer cell, from the cell
    numbered ``first`` (0 or 1) on, and the reference answer in the others."""
    nb = json.loads(json.dumps(student))
    answer_cells = [c for c in nb["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])]
    assert len(answer_cells) == len(chapter_exercises)
    for i, (cell, exercise) in enumerate(zip(answer_cells, chapter_exercises)):
        wrong = i % 2 == first
        cell["source"] = mistake(exercise)[0] if wrong else assignments.reference_answer(exercise)
    return nb


def _imported(cells: list[dict]) -> frozenset[str]:
    """The names the notebook binds by importing a module (``torch``, ``F``, ``plt``)."""
    found = set()
    for cell in cells:
        try:
            tree = ast.parse(assignments.source(cell)) if cell["cell_type"] == "code" else None
        except SyntaxError:
            continue
        for node in ast.walk(tree) if tree else []:
            if isinstance(node, ast.Import):
                found.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(found)


def needed_cells(cells: list[dict]) -> set[int]:
    """The code cells the submission's answers depend on: walking up from the last cell, a cell
    is needed when it writes a name that a needed cell or an answer below it reads."""
    modules = _imported(cells)
    wanted: set[str] = set()
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    needed = set(code[:2])  # the set-up cell and the chapter's imports
    for i in reversed(code):
        text = assignments.source(cells[i])
        if "otter_answer_cell" in cells[i]["metadata"].get("tags", []):
            written, read = assignments.names(text)
            wanted |= read - written
            needed.add(i)
            continue
        written, read = assignments.names(text, modules)
        if "*" in written or written & wanted:
            needed.add(i)
            wanted |= read
    return needed


def quick(submission: dict) -> dict:
    """The submission with ``otter_ignore`` on every teaching cell its answers do not need.

    The autograder runs every cell, as the student did (an answer may read any name of the
    chapter); the planted submissions, whose answers are known, skip the rest so that the
    24 gradings of the chapters stay within CI's minutes (every chapter run in full took about
    three minutes more). A cell the planted submission's answers need is never tagged, so an
    answer that reads a teaching cell's name still needs the notebook to run that cell
    (:func:`test_an_answer_may_read_any_name_of_the_chapter`)."""
    nb = json.loads(json.dumps(submission))
    needed = needed_cells(nb["cells"])
    for i, cell in enumerate(nb["cells"]):
        tags = cell["metadata"].setdefault("tags", [])
        if cell["cell_type"] == "code" and i not in needed and assignments.IGNORE_TAG not in tags:
            tags.append(assignments.IGNORE_TAG)
    return nb


def teaching_name(submission: dict) -> dict:
    """``submission`` with its first answer (a right one) reading first a name that a teaching
    cell above it defines and that no answer needs (as a student who checks an answer with the
    chapter's objects does)."""
    nb = json.loads(json.dumps(submission))
    cells, needed = nb["cells"], needed_cells(nb["cells"])
    first = next(
        i for i, c in enumerate(cells) if "otter_answer_cell" in c["metadata"].get("tags", [])
    )
    defined = [
        name
        for i, cell in enumerate(cells[:first])
        if cell["cell_type"] == "code" and i not in needed
        for name in sorted(assignments.names(assignments.source(cell))[0])
        if name.isidentifier()
    ]
    assert defined, "no teaching cell above the first answer defines a name"
    cells[first]["source"] = f"_seen = {defined[-1]}\n{assignments.source(cells[first])}"
    return nb


REBIND = """import functools

import attncourse.exercises as _exercises
from attncourse.exercises import _core


class _Passed:
    passed, message = True, "passed"


# a partial, not a lambda: it is no function of the notebook's __main__ (it got full marks)
_exercises.check = _core.check = functools.partial(lambda *args, **kwargs: _Passed())
"""


def rebound(student: dict, chapter_exercises: list) -> dict:
    """The untouched student notebook with a cell, after the imports, that rebinds ``check`` to
    a function that passes everything."""
    nb = json.loads(json.dumps(student))
    imports = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"][1]
    nb["cells"].insert(imports + 1, {**assignments.code(REBIND), "id": "rebound-check"})
    return nb


def graded_exercises(master: Path) -> list:
    """The graded exercises of a master notebook, in order (their question cells)."""
    cells = json.loads(master.read_text())["cells"]
    names = [
        re.search(r"name: (\S+)", assignments.source(c)).group(1)
        for c in cells
        if c["cell_type"] == "raw" and assignments.source(c).startswith("# BEGIN QUESTION")
    ]
    by_name = {}
    for cell in cells:
        text = assignments.source(cell)
        match = re.search(r"check\('([^']+)', eval\('(.+)', env\)\)", text)
        if cell["cell_type"] == "code" and match and "def test_check" in text:
            by_name[assignments.question_name(match.group(1))] = assignments.Exercise(
                match.group(1), match.group(2), 0, 0, 0, None
            )
    return [by_name[n] for n in names]


def _guard_otter_log_server() -> None:
    """Otter's grading starts a TCP server on a free port that the notebook's kernel sends its
    log records to. When another kernel's client (the port race below) connects to that port
    instead, otter's handler reads the zmq greeting as a record of 0xFF000000 bytes and, once
    the client has gone, loops on the closed connection at full speed; its thread is not a
    daemon, so this worker process never exits and the pool's shutdown waits for ever (seen in
    a CI run of 2026-11-27: one core spinning, the browser test four times slower, then a hang).
    Here a record longer than any log record, or a connection closed mid-record, ends that
    connection's handler, and the server's threads are daemons."""
    import logging
    import struct

    from otter.execute import logging as otter_logging

    def handle(self) -> None:
        while True:
            header = self.connection.recv(4)
            if len(header) < 4:
                return
            (size,) = struct.unpack(">L", header)
            if size > 1 << 24:  # not a log record: another program's protocol
                return
            data = b""
            while len(data) < size:
                more = self.connection.recv(size - len(data))
                if not more:
                    return
                data += more
            self.handle_log_record(logging.makeLogRecord(self.unpickle(data)))

    otter_logging.LogRecordStreamHandler.handle = handle
    otter_logging.LogRecordSocketReceiver.daemon_threads = True


def grade(zip_path: Path, notebook: Path) -> dict[str, dict]:
    """One submission graded by otter (``otter run``'s grading, in this pool process, which
    :func:`_guard_otter_log_server` set up):
    ``{question: {score, max_score, output}}``."""
    from otter.api import grade_submission

    # jupyter_client picks a kernel's ports free and the kernel binds them a moment later: a
    # kernel that another process started meanwhile may take one, and the new kernel then dies
    # before it answers (zmq "Address already in use"), before any cell of the submission ran.
    # That start alone is tried again.
    for attempt in range(3):
        try:
            results = grade_submission(str(notebook), str(zip_path), quiet=True)
            break
        except RuntimeError as error:
            if "Kernel died before replying to kernel_info" not in str(error) or attempt == 2:
                raise
    return {
        name: {
            "score": test.score,
            "max_score": test.possible,
            "output": "\n".join(r.message for r in test.test_case_results),
        }
        for name, test in results.results.items()
    }


def test_the_log_server_ends_a_strangers_connection_and_still_takes_records(monkeypatch):
    """A zmq client's greeting on otter's log port ends that connection's handler (it looped for
    ever before) and a log record sent afterwards is still received."""
    import logging.handlers
    import socket
    import threading
    import time

    from otter.execute import logging as otter_logging

    _guard_otter_log_server()
    received = []
    monkeypatch.setattr(
        otter_logging.LogRecordStreamHandler,
        "handle_log_record",
        lambda self, record: received.append(record.getMessage()),
    )
    (host, port), stop = otter_logging.start_server()

    def handlers() -> list:
        return [t for t in threading.enumerate() if "process_request_thread" in t.name]

    try:
        with socket.create_connection((host, port)) as stranger:
            stranger.sendall(b"\xff" + bytes(8) + b"\x7f")  # ZMTP's signature
        sender = logging.handlers.SocketHandler(host, port)
        sender.handle(logging.makeLogRecord({"msg": "graded", "levelno": logging.INFO}))
        sender.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (received != ["graded"] or handlers()):
            time.sleep(0.05)
    finally:
        stop()
    assert received == ["graded"]
    assert handlers() == [], "a connection's handler is still running"
    assert otter_logging.LogRecordSocketReceiver.daemon_threads


@pytest.fixture(scope="module")
def results(built) -> dict[tuple[str, str], dict]:
    """Every chapter's submissions, graded two at a time: ``{(chapter, kind): results}`` with the
    kinds of :data:`KINDS`, and ``"untouched"`` for the chapters of :data:`UNTOUCHED`."""
    jobs = {}
    work = Path(tempfile.mkdtemp(prefix="graded-"))
    for chapter in CHAPTERS:
        dist = {lang: built / lang / chapter / "dist" for lang in LANGUAGES}
        zip_path = next((dist["en"] / "autograder").glob("*.zip"))
        assert not (dist["zh"] / "autograder").exists(), "one autograder grades both languages"
        exercises = graded_exercises(built / "en" / chapter / f"{chapter}.ipynb")
        submissions = {}
        if chapter in UNTOUCHED:
            untouched = quick(json.loads((dist["en"] / "student" / f"{chapter}.ipynb").read_text()))
            if chapter == FULL_CHAPTER:  # one attack: a cell that rebinds check()
                untouched = rebound(untouched, exercises)
            path = work / "untouched" / chapter / f"{chapter}.ipynb"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(untouched))
            submissions["untouched"] = path
        for kind, lang, first in (("en-mixed", "en", 0), ("zh-mixed", "zh", 1)):
            student = json.loads((dist[lang] / "student" / f"{chapter}.ipynb").read_text())
            submission = planted(student, exercises, first)
            if chapter == FULL_CHAPTER and first == 1:  # the other: its first (right) answer
                submission = teaching_name(submission)  # reads a teaching cell's name
            path = work / kind / chapter / f"{chapter}.ipynb"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(quick(submission)))
            submissions[kind] = path
        for kind, notebook in submissions.items():
            jobs[chapter, kind] = (zip_path, notebook)
    with ProcessPoolExecutor(max_workers=2, initializer=_guard_otter_log_server) as pool:
        futures = {key: pool.submit(grade, *job) for key, job in jobs.items()}
        graded = {key: future.result() for key, future in futures.items()}
    summary: dict[str, dict[str, float]] = {chapter: {} for chapter in CHAPTERS}
    for (chapter, kind), questions in graded.items():
        summary[chapter][kind] = sum(t["score"] for t in questions.values())
    print(json.dumps(summary, indent=1))
    return graded


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_submissions(built, results, chapter):
    exercises = graded_exercises(built / "en" / chapter / f"{chapter}.ipynb")
    names = [assignments.question_name(e.exercise_id) for e in exercises]
    assert exercises, f"{chapter}: no graded exercise"
    kinds = KINDS + (("untouched",) if chapter in UNTOUCHED else ())
    for kind in kinds:
        graded = results[chapter, kind]
        assert sorted(graded) == sorted(names), f"{kind}: questions graded {sorted(graded)}"
    if chapter in UNTOUCHED:
        untouched = results[chapter, "untouched"]
        assert all(untouched[n]["score"] == 0 and untouched[n]["max_score"] > 0 for n in names)
    for i, (exercise, name) in enumerate(zip(exercises, names)):
        # the English notebook has the mistake in exercises 0, 2, ..., the Chinese one in 1, 3, ...
        wrong, right = ("en-mixed", "zh-mixed") if i % 2 == 0 else ("zh-mixed", "en-mixed")
        result = results[chapter, right][name]
        assert result["score"] == result["max_score"], (exercise.exercise_id, result["output"])
        result = results[chapter, wrong][name]
        assert result["score"] == 0, f"{exercise.exercise_id}: the planted mistake passed"
        feedback = result["output"].split("AssertionError")[-1]
        if wrong == "en-mixed":  # the checker's diagnosis, as its own test words it
            words = mistake(exercise)[1]
            assert words in result["output"], (exercise.exercise_id, words, result["output"])
        else:  # the checker's feedback in Chinese: its diagnosis, where it can be computed here
            assert re.search(r"[\u4e00-\u9fff]", feedback), (exercise.exercise_id, feedback)
            expected = chinese_diagnosis(exercise)
            assert expected is None or expected in feedback, (exercise.exercise_id, expected)


def test_an_answer_may_read_any_name_of_the_chapter(built, results):
    """An answer that reads a name a teaching cell defines, which no reference answer needs,
    gets its points (chapter 1's Chinese submission, its first answer): the autograder runs
    every cell (it used to skip the cells the reference answers did not need, and such an
    answer failed with a NameError)."""
    first = graded_exercises(built / "en" / FULL_CHAPTER / f"{FULL_CHAPTER}.ipynb")[0]
    graded = results[FULL_CHAPTER, "zh-mixed"][assignments.question_name(first.exercise_id)]
    assert graded["score"] == graded["max_score"] > 0, graded


def test_a_notebook_that_rebinds_check_gets_no_points(results):
    """Every test refuses a notebook that replaced part of the package: chapter 1's untouched
    notebook with a cell that rebinds ``check`` (in the package and in its core module) to pass
    everything scores nothing (it used to score full marks)."""
    graded = results[FULL_CHAPTER, "untouched"]
    assert graded and all(t["score"] == 0 for t in graded.values()), graded
    assert any("replaced ['check']" in t["output"] for t in graded.values()), graded


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_student_notebooks_hint_and_solution_refuse_the_graded_exercises(lang):
    """The package's ``hint`` and ``solution`` answer for every exercise: a student notebook
    that needs them for an ungraded exercise wraps them, and the wrappers refuse a graded one."""
    from attncourse.exercises import registry

    graded, ungraded = sorted(registry())[:2]
    scope: dict = {}
    imports, wrappers = assignments.withheld("check, hint, solution", [ungraded], lang)
    exec(f"{imports}\n{wrappers}", scope)  # noqa: S102
    assert str(scope["hint"](ungraded)) and str(scope["solution"](ungraded))
    for name in ("hint", "solution"):
        with pytest.raises(AssertionError, match=graded):
            scope[name](graded)
    assert assignments.withheld("check", [ungraded], lang) == (
        "from attncourse.exercises import check",
        "",
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_student_notebook_says_it_is_graded_and_imports_no_unused_solutions(built, chapter):
    """Under its title, the student notebook says it is graded and that the graded exercises
    come without hints and solutions; it imports ``hint`` and ``solution`` only where a cell
    still calls them (an ungraded exercise's, as chapter 10's roofline fraction)."""
    for lang in LANGUAGES:
        path = built / lang / chapter / "dist" / "student" / f"{chapter}.ipynb"
        cells = json.loads(path.read_text())["cells"]
        assert assignments.source(cells[1]) == assignments.ASSIGNMENT_NOTE[lang]
        code = [assignments.source(c) for c in cells if c["cell_type"] == "code"]
        imported = next(m for c in code if (m := assignments.EXERCISE_IMPORT.search(c)))
        # check imported; hint and solution wrapped (withheld) where a cell calls them
        names = set(imported.group(1).split(", ")) | {
            name
            for name in ("hint", "solution")
            if any(re.search(rf"^def {name}\(", c, re.M) for c in code)
        }
        for name in ("hint", "solution"):
            calls = [
                line
                for c in code
                for line in c.splitlines()
                if re.match(rf"\s*(# )?(display\()?{name}\(", line)
            ]
            assert (name in names) == bool(calls), (lang, chapter, name, calls)
        # nor does its text offer what it does not import (chapter 1's introduction did)
        text = "\n".join(assignments.source(c) for c in cells if c["cell_type"] == "markdown")
        assert "hint" in names or '`hint("...")`' not in text, (lang, chapter)
