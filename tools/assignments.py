"""Build the instructor edition: one otter-grader assignment per chapter, in English and Chinese.

For every chapter of ``_toc.yml`` and each language, the chapter's Colab edition (generated from
``book/`` by ``tools/colab_edition.py``, in Chinese from the catalogues of ``book/locale``) is
turned into a master notebook in otter-grader's assign format, and ``otter assign`` turns that
into the student notebook and the autograder (a zip for Gradescope, or for ``otter run``):

* every teaching cell stays, in order; the student notebook is the Colab notebook, set-up cell
  first (it installs the package at the commit the assignment was built from, the version the
  autograder's requirements pin);
* each graded exercise (``tools/assignments.yml``: which, and how many points) becomes an otter
  question: its statement, its answer cell (the student gets the chapter's stub; the autograder
  notebook the reference answer: the package's solution, or ``tools/assignment_answers.py``), and
  one public test that grades the answer with the package's own checker
  (``check(id, answer)``), whose message is the feedback. Its ``check`` cell stays for the
  learner; its ``hint`` and ``solution`` cells, and cells that show the solution, go;
* the autograder runs the notebook as the student ran it, every teaching cell included (an answer
  may read any name the chapter defines); only the learner's ``check`` cells carry otter's
  ``otter_ignore`` tag, since each question's test grades the answer itself (and refuses a
  notebook that replaced part of the package: :func:`test_cell`).

One autograder per chapter grades both languages: the two notebooks share their code cells
and the assignment's name, and the feedback comes in the language the notebook's set-up cell
chose. So the Chinese build keeps only its student notebooks.

Nothing here is committed: ``make assignments`` writes ``_build/assignments/<lang>/<chapter>/``
(the master notebook, ``requirements.txt``, and otter's ``dist/``: ``student/``, and in English
``autograder/`` with the zip), from the book as it is, so it cannot fall out of step with it,
and with ``--site`` the downloads the instructors' page links: one zip per language.

Usage: ``python tools/assignments.py [--out DIR] [--site DIR] [--lang en zh] [--chapters 01 ...]``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import io
import re
import shutil
import subprocess
import sys
import time
import types
import zipfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import colab_edition  # noqa: E402
from assignment_answers import ANSWERS  # noqa: E402

from attncourse.exercises import registry  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_build" / "assignments"
CONFIG = ROOT / "tools" / "assignments.yml"
LANGUAGES = ("en", "zh")
IGNORE_TAG = "otter_ignore"
CHECK_CALL = re.compile(r'^check\(\s*"(?P<id>[^"]+)"')
SOLUTION_CALL = re.compile(r'^solution\(\s*"(?P<id>[^"]+)"')
HINT_LINE = re.compile(r'^#\s*(?:display\()?hint\(\s*"[^"]+"[^\n]*$\n?', re.M)


@dataclass
class Exercise:
    """Where one exercise sits in a chapter's notebook (indices into its cells)."""

    exercise_id: str
    answer: str  # the expression the check cell passes: the name of the learner's answer
    statement: int  # the Markdown cell that states it
    stub: int  # the learner's answer cell
    check: int  # the check cell
    solution: int | None  # the solution cell, if any


def source(cell: dict) -> str:
    """A cell's source as one string."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def points() -> dict[str, dict[str, float]]:
    """``{chapter: {exercise id: points}}`` from ``tools/assignments.yml`` (0: not graded)."""
    config = yaml.safe_load(CONFIG.read_text())
    default = config.get("default_points", 1)
    exercises = registry()
    chapters = {Path(doc).name: doc for doc, _ in colab_edition.chapters()}
    listed = config.get("chapters") or {}
    unknown = set(listed) - set(chapters)
    if unknown:
        raise SystemExit(
            f"{CONFIG.name}: no chapter {sorted(unknown)}; the chapters are {sorted(chapters)}"
        )
    out: dict[str, dict[str, float]] = {}
    for chapter, doc in chapters.items():
        own = listed.get(chapter) or {}
        unknown = set(own) - set(exercises)
        if unknown:
            raise SystemExit(f"{CONFIG.name}: {chapter} names no exercise {sorted(unknown)}")
        elsewhere = set(own) - {
            e.exercise_id for e in find_exercises(colab_edition.convert(doc)["cells"])
        }
        if elsewhere:
            raise SystemExit(
                f"{CONFIG.name}: {sorted(elsewhere)} are not exercises of {chapter}: list each"
                " under its own chapter"
            )
        out[chapter] = {eid: own.get(eid, default) for eid in exercises}
    return out


def find_exercises(cells: list[dict]) -> list[Exercise]:
    """The exercises of a notebook: each check cell, its answer cell above, its statement above
    that, and its solution cell below."""
    found = []
    for i, cell in enumerate(cells):
        # the check call after the commented hint line above it
        match = (
            CHECK_CALL.match(HINT_LINE.sub("", source(cell)))
            if cell["cell_type"] == "code"
            else None
        )
        if not match:
            continue
        call = ast.parse(source(cell)).body[0].value
        statement = max(j for j in range(i) if cells[j]["cell_type"] == "markdown")
        solution = next(
            (
                j
                for j in range(i + 1, len(cells))
                if SOLUTION_CALL.match(source(cells[j])) and match.group("id") in source(cells[j])
            ),
            None,
        )
        found.append(
            Exercise(match.group("id"), ast.unparse(call.args[1]), statement, i - 1, i, solution)
        )
    return found


def imports_for(code: str, namespace: dict) -> str:
    """Import lines for the names ``code`` reads that its chapter's checker module imported
    (the solution's own imports: a module, or a public name of a module of the package)."""
    lines = []
    for name in sorted(_free_reads(ast.parse(code))):
        value = namespace.get(name)
        if isinstance(value, types.ModuleType):
            module = value.__name__
            lines.append(f"import {module}" if module == name else f"import {module} as {name}")
        elif getattr(value, "__module__", "").startswith("attncourse") and name[0] != "_":
            lines.append(f"from {value.__module__} import {name}")
    return "\n".join(lines) + "\n\n" if lines else ""


def reference_answer(exercise: Exercise) -> str:
    """The code of a right answer: the package's solution function, or a value's answer."""
    if exercise.exercise_id in ANSWERS:
        return ANSWERS[exercise.exercise_id]
    entry = registry()[exercise.exercise_id]
    if entry.reference is None:
        raise SystemExit(f"{exercise.exercise_id}: no reference answer in assignment_answers.py")
    code = entry.solution().rstrip()
    code = imports_for(code, vars(sys.modules[entry.checker.__module__])) + code
    if entry.answer_is_function:
        defined = ast.parse(code).body[-1]
        renamed = getattr(defined, "name", exercise.answer) != exercise.answer
        return f"{code}\n\n\n{exercise.answer} = {defined.name}" if renamed else code
    function = ast.parse(code).body[-1]  # a solution computing the value from the chapter's objects
    arguments = ", ".join(a.arg for a in function.args.args)
    return f"{code}\n\n\n{exercise.answer} = {function.name}({arguments})"


# -- what the autograder must execute ----------------------------------------------------------


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _free_reads(node: ast.AST) -> set[str]:
    """The names a piece of code reads from outside: a function's (or lambda's, or
    comprehension's) own parameters and locals do not count."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        inner = [*node.body] if isinstance(node.body, list) else [node.body]
        local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        reads = set().union(*(_free_reads(n) for n in inner))
        stores = {
            n.id for b in inner for n in ast.walk(b)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }  # fmt: skip
        defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
        decorators = getattr(node, "decorator_list", [])
        outer = set().union(set(), *(_free_reads(d) for d in [*defaults, *decorators]))
        return (reads - local - stores) | outer
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        targets = {
            n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
        }
        reads = set().union(*(_free_reads(c) for c in ast.iter_child_nodes(node)))
        return reads - targets
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) else set()
    return set().union(set(), *(_free_reads(c) for c in ast.iter_child_nodes(node)))


def names(code: str, modules: frozenset[str] = frozenset()) -> tuple[set[str], set[str]]:
    """``(written, read)``: the names a cell binds or changes in place (``x.y = ...``,
    ``x.fit()``, ``train(model)`` as a statement; a call on an imported module, ``modules``,
    changes nothing), and the names it reads from outside. Code that is not plain Python (a
    magic) writes ``*``: it is always executed."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {"*"}, set()
    written, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            written.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            written.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            written.add(_root(node) or "")
    for node in tree.body:  # statements that are calls: what they may change in place
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Attribute) and _root(call.func) not in modules:
                written.add(_root(call.func) or "")
            elif isinstance(call.func, ast.Name) and call.func.id not in dir(__builtins__):
                written.update(a.id for a in call.args if isinstance(a, ast.Name))
    return (written - {"", *modules}) | bound, _free_reads(tree)


# -- the master notebook -----------------------------------------------------------------------


def raw(text: str) -> dict:
    return {"cell_type": "raw", "metadata": {}, "source": text}


def code(text: str, tags: list[str] | None = None) -> dict:
    metadata = {"tags": tags} if tags else {}
    return {"cell_type": "code", "execution_count": None, "metadata": metadata, "outputs": [],
            "source": text}  # fmt: skip


def question_name(exercise_id: str) -> str:
    """Otter's name of the question of an exercise (a test file's name): ``dot_product_scores``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", exercise_id).strip("_")


def test_cell(exercise: Exercise) -> str:
    """Otter's test of an exercise: the package's checker, its message the feedback.

    Otter runs the test in the student's Python process: the test first refuses a notebook that
    replaced a function or class of the package with one of its own (a rebound ``check``, a
    checker's helper), which would otherwise grade itself: an object of the notebook's
    (``__main__``, or an instance of a class of it), a ``functools.partial`` (the package holds
    none), or a function whose code was written in a notebook cell. A determined student can
    still forge all three; ``book/instructors.md`` says what to look for."""
    return (
        '""" # BEGIN TEST CONFIG\nhidden: false\n""" # END TEST CONFIG\n'
        "def test_check(env):\n"
        "    import functools\n"
        "    import sys\n\n"
        "    from attncourse.exercises import check\n\n"
        "    def notebooks(v):\n"
        '        cell = getattr(getattr(v, "__code__", None), "co_filename", "")\n'
        '        main = "__main__" in (getattr(v, "__module__", ""), type(v).__module__)\n'
        '        return main or isinstance(v, functools.partial) or "ipykernel_" in str(cell)\n\n'
        '    package = [m for n, m in list(sys.modules.items()) if n.split(".")[0] == "attncourse"]\n'
        "    spaces = [vars(m) for m in package if m is not None]\n"
        "    spaces += [vars(v) for s in list(spaces) for v in s.values() if isinstance(v, type)]\n"
        "    mine = {k for s in spaces for k, v in list(s.items()) if notebooks(v)}\n"
        '    assert not mine, f"the notebook replaced {sorted(mine)} in the course package, which grades"\n'
        f"    result = check({exercise.exercise_id!r}, eval({exercise.answer!r}, env))\n"
        "    assert result.passed, result.message\n"
    )


def question_cells(exercise: Exercise, cells: list[dict], worth: float) -> list[dict]:
    """The otter question of a graded exercise: config, statement, answer, test."""
    stub = source(cells[exercise.stub]).rstrip()
    answer = f"{stub}\n# BEGIN SOLUTION NO PROMPT\n{reference_answer(exercise)}\n# END SOLUTION"
    config = {"name": question_name(exercise.exercise_id), "points": worth, "check_cell": False}
    return [
        raw("# BEGIN QUESTION\n" + yaml.safe_dump(config, sort_keys=False).strip()),
        *cells[exercise.statement : exercise.stub],
        raw("# BEGIN SOLUTION"),
        {**copy.deepcopy(cells[exercise.stub]), "source": answer},
        raw("# END SOLUTION"),
        raw("# BEGIN TESTS"),
        code(test_cell(exercise)),
        raw("# END TESTS"),
        raw("# END QUESTION"),
    ]


def assignment_config(chapter: str) -> str:
    config = {
        "name": chapter,  # one name in both languages: one autograder grades both
        "requirements": "requirements.txt",
        "init_cell": False,
        "check_all_cell": False,
        "export_cell": False,
        "run_tests": False,
        "solutions_pdf": False,
        "tests": {"files": True, "ok_format": False},
        # every test is public: on Gradescope each exercise's points and feedback show at once
        "generate": {"pdf": False, "filtering": False, "show_all_public": True},
        "python_version": "3.11",
    }
    return "# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False)


def revealing(cells: list[dict], exercises: list[Exercise]) -> set[int]:
    """Code cells right after a solution cell (before any Markdown) that show the solution
    worked: dropped unless a later cell reads a name they write."""
    out = set()
    for exercise in exercises:
        i = (exercise.solution or 0) + 1
        while exercise.solution is not None and i < len(cells) and cells[i]["cell_type"] == "code":
            written = names(source(cells[i]))[0]
            later = set().union(
                *(names(source(c))[1] for c in cells[i + 1 :] if c["cell_type"] == "code")
            )
            if not written & later:
                out.add(i)
            i += 1
    return out


#: The note under a student notebook's title: how the assignment differs from the chapter.
ASSIGNMENT_NOTE = {
    "en": (
        "> **Assignment.** This notebook is graded. Write each graded exercise's answer in its"
        " answer cell and run its `check` cell, which grades it as the autograder will. The"
        " graded exercises come without their hints and solutions. The autograder runs the"
        " whole notebook, so an answer may use anything the chapter defines."
    ),
    "zh": (
        "> **作业。** 这个笔记本要评分。在每道计分练习的答题单元格中写出答案，并运行它的 `check`"
        " 单元格，它的评分方式与自动评分器相同。计分的练习不提供提示和解答。自动评分器会运行整个"
        "笔记本，所以答案可以用到本章定义的任何东西。"
    ),
}
#: A chapter's sentence on ``hint(...)`` and ``solution(...)`` (the exercises' introduction of
#: chapters 1, 5 and 6, in either language): the student notebook drops it where it imports
#: neither.
HELP_SENTENCE = re.compile(r'\s?`hint\("\.\.\."\)`.*?`solution\("\.\.\."\)`[^.。]*[.。]', re.S)
#: The chapters' import of the exercise functions (the Colab edition's imports cell).
EXERCISE_IMPORT = re.compile(r"^from attncourse\.exercises import (check(?:, \w+)*)(.*)$", re.M)


def _used_exercise_functions(cells: list[dict]) -> str:
    """``check``, and ``hint``/``solution`` where a kept cell still calls them."""
    code = "\n".join(source(c) for c in cells if c["cell_type"] == "code")
    code = EXERCISE_IMPORT.sub("", code)
    # comments aside, but for a commented call the learner is meant to uncomment
    code = re.sub(r"#(?!\s*(?:display\()?(?:hint|solution)\()[^\n]*", "", code)
    return ", ".join(["check"] + [f for f in ("hint", "solution") if re.search(rf"\b{f}\(", code)])


#: What ``hint`` and ``solution`` say of a graded exercise in a student notebook.
WITHHELD = {
    "en": "{exercise_id} is graded in this assignment: no {what} here",
    "zh": "{exercise_id} 在本作业中计分：这里不提供{what}",
}
WITHHELD_WHAT = {
    "en": {"hint": "hint", "solution": "solution"},
    "zh": {"hint": "提示", "solution": "解答"},
}


#: The wrappers' signatures and their calls of the package's function.
WRAPPED = {"hint": ("exercise_id, level=1", "exercise_id, level"), "solution": ("exercise_id",) * 2}


def withheld(used: str, ungraded: list[str], lang: str, rest: str = "") -> tuple[str, str]:
    """The imports cell's import of the exercise functions (``used``: ``check``, and ``hint``,
    ``solution`` where an ungraded exercise's cell calls them), and the code for the end of that
    cell. The package's ``hint`` and ``solution`` answer for every exercise, so the notebook
    imports them under a private name and wraps them to answer only for the ``ungraded``
    exercises and refuse the graded ones, as the note under the title says (``""`` where it
    imports neither)."""
    line = f"from attncourse.exercises import check{rest}"
    wrapped = [n for n in WRAPPED if n in used.split(", ")]
    if not wrapped:
        return line, ""
    imports = f"{line}\nfrom attncourse.exercises import " + ", ".join(
        f"{n} as _{n}" for n in wrapped
    )
    lines = ["# the exercises this assignment does not grade: the only ones with a hint and a"]
    lines += ["# solution here", f"UNGRADED = {tuple(ungraded)!r}"]
    for name in wrapped:
        signature, arguments = WRAPPED[name]
        refusal = WITHHELD[lang].format(exercise_id="{exercise_id}", what=WITHHELD_WHAT[lang][name])
        lines += [
            "",
            "",
            f"def {name}({signature}):",
            f'    assert exercise_id in UNGRADED, f"{refusal}"',
            f"    return _{name}({arguments})",
        ]
    return imports, "\n".join(lines)


def master(nb: dict, chapter: str, worth: dict[str, float], commit: str, lang: str = "en") -> dict:
    """The master notebook of one chapter in otter's assign format.

    Under the title, a note says how the assignment differs from the chapter
    (:data:`ASSIGNMENT_NOTE`); the imports cell imports ``hint`` and ``solution`` only where a
    cell still calls them (an ungraded exercise's), and where none does, the text no longer
    tells how to call them (:data:`HELP_SENTENCE`)."""
    cells = nb["cells"]
    exercises = [e for e in find_exercises(cells) if worth.get(e.exercise_id, 0) > 0]
    by_stub = {e.stub: e for e in exercises}
    checks = {e.check for e in exercises}
    setup = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    dropped = revealing(cells, exercises) | {
        e.solution for e in exercises if e.solution is not None
    }
    skip = {j for e in exercises for j in range(e.statement, e.stub)}
    out = [raw(assignment_config(chapter))]
    for i, cell in enumerate(cells):
        if i in dropped or i in skip:
            continue
        if i in by_stub:
            out += question_cells(by_stub[i], cells, worth[by_stub[i].exercise_id])
            continue
        cell = copy.deepcopy(cell)
        if i == setup:
            cell["source"] = source(cell).replace("@main", f"@{commit}")
        elif i in checks:  # the learner's own check: the question's test grades the answer
            cell.setdefault("metadata", {}).setdefault("tags", []).append(IGNORE_TAG)
            cell["source"] = HINT_LINE.sub("", source(cell)).rstrip()
        out.append(cell)
    used = _used_exercise_functions(out)
    ungraded = [e.exercise_id for e in find_exercises(cells) if worth.get(e.exercise_id, 0) <= 0]
    for cell in out:
        if cell["cell_type"] == "code" and (found := EXERCISE_IMPORT.search(source(cell))):
            imports, wrappers = withheld(used, ungraded, lang, found.group(2))
            text = source(cell).replace(found.group(0), imports, 1)
            cell["source"] = f"{text.rstrip()}\n\n\n{wrappers}" if wrappers else text
        elif cell["cell_type"] == "markdown" and used == "check":  # no hint, no solution
            cell["source"] = HELP_SENTENCE.sub("", source(cell))
    title = next(i for i, c in enumerate(out) if c["cell_type"] == "markdown")
    out.insert(
        title + 1, {"cell_type": "markdown", "metadata": {}, "source": ASSIGNMENT_NOTE[lang]}
    )
    metadata = {k: v for k, v in nb["metadata"].items() if k != "attncourse"}
    return {**nb, "metadata": metadata, "cells": out}


# -- building ----------------------------------------------------------------------------------


def commit() -> str:
    """The commit the assignments are built from (the package version both sides install);
    a warning when the working tree has changes that commit lacks."""
    found = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if changed.stdout.strip():
        print(
            f"warning: the assignments pin {found.stdout.strip()[:7] or 'main'}, which lacks the"
            " uncommitted changes of this tree: commit, then build them again",
            file=sys.stderr,
        )
    return found.stdout.strip() or "main"


#: PyTorch's index of CPU-only builds. Grading runs on the CPU; from PyPI alone pip would take
#: torch's CUDA build on Linux, which brings gigabytes of nvidia-* libraries to every autograder.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def requirements(revision: str, kernels: bool = False) -> str:
    """The autograder's requirements: the course package at the students' version, with a CPU
    build of torch, and triton (the package's ``gpu`` extra) for a chapter whose exercises run
    Triton kernels (``kernels``: through the interpreter; else the notebook would install
    triton while it is graded). Otter copies each line into its ``environment.yml``'s pip list,
    and conda hands that list to pip as a requirements file, option lines included. With the
    CPU index beside PyPI, pip sees ``2.x.y+cpu`` next to ``2.x.y`` and takes the higher
    version, the local ``+cpu`` one (PEP 440 sorts a local version after its public one)."""
    url = colab_edition.project_urls()["Repository"].rstrip("/")
    package = "attncourse[gpu]" if kernels else "attncourse"
    return f"--extra-index-url {CPU_TORCH_INDEX}\n{package} @ git+{url}@{revision}\n"


def runs_kernels(nb: dict) -> bool:
    """Whether a chapter loads the Triton kernels (``import_kernels()``, chapter 10)."""
    return any(c["cell_type"] == "code" and "import_kernels(" in source(c) for c in nb["cells"])


def otter_assign(folder: Path, chapter: str) -> None:
    """``otter assign --no-pdfs <chapter>.ipynb dist`` in ``folder``, called in this process:
    otter's imports take a second, most of a command's time, paid here once a language."""
    from otter.assign import main as assign

    # otter reads the master's neighbours and writes dist/ relative to it
    with (
        contextlib.chdir(folder),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        assign(f"{chapter}.ipynb", "dist", no_pdfs=True)


def build_language(lang: str, out: Path, only: list[str], revision: str) -> list[str]:
    """Write the master notebooks of one language, pinning ``revision``, and run ``otter
    assign`` on each."""
    if lang == "zh":
        colab_edition.chinese_edition()
    worth = points()
    built = []
    for doc, _ in colab_edition.chapters():
        chapter = Path(doc).name
        if only and not any(chapter.startswith(prefix) for prefix in only):
            continue
        folder = out / lang / chapter
        folder.mkdir(parents=True, exist_ok=True)
        nb = master(colab_edition.convert(doc), chapter, worth[chapter], revision, lang)
        (folder / f"{chapter}.ipynb").write_text(colab_edition.dump(nb))
        (folder / "requirements.txt").write_text(requirements(revision, runs_kernels(nb)))
        otter_assign(folder, chapter)
        if lang != "en":  # the English autograder grades this language's notebooks too
            shutil.rmtree(folder / "dist" / "autograder")
        built.append(f"{lang}/{chapter}")
    return built


#: The downloads of the instructors' page: ``<site>/attncourse-assignments-<lang>.zip``.
DOWNLOAD = "attncourse-assignments-{lang}.zip"


def package(out: Path, site: Path, languages: list[str]) -> list[Path]:
    """Zip each language's assignments for the site: every chapter's student notebook, and in
    English each chapter's autograder zip (which grades both languages)."""
    site.mkdir(parents=True, exist_ok=True)
    written = []
    for lang in languages:
        path = site / DOWNLOAD.format(lang=lang)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for chapter_dir in sorted((out / lang).iterdir()):
                dist = chapter_dir / "dist"
                for file in sorted(dist.rglob("*")):
                    keep = file.suffix == ".zip" or file.parent.name == "student"
                    if file.is_file() and keep:
                        name = f"{chapter_dir.name}/{file.relative_to(dist)}"
                        archive.write(file, name)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--site", type=Path, help="also zip each language's assignments here")
    parser.add_argument("--lang", nargs="+", default=list(LANGUAGES), choices=LANGUAGES)
    parser.add_argument("--chapters", nargs="*", default=[], help="chapter prefixes (01 02 ...)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=len(args.lang)) as pool:
        revision = commit()
        jobs = [
            pool.submit(build_language, lang, args.out, args.chapters, revision)
            for lang in args.lang
        ]
        built = [name for job in jobs for name in job.result()]
    print(f"{len(built)} assignments in {args.out} in {time.perf_counter() - start:.0f} s")
    if args.site:
        for path in package(args.out, args.site, args.lang):
            print(f"{path} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
