"""Mutation testing of the package: how many small bugs do the unit tests catch?

For each module named below, every *mutant* (a copy of the module with one small change:
an operator, a comparison, a constant, a slice bound, a removed call or ``raise``) is run
against that module's unit tests; the mutant is *killed* when a test fails (or the run times
out), and *survives* when every test passes. The kill rate is the share of killed mutants.

Survivors that are equivalent to the original (no input can tell them apart) are listed in
``reports/mutation_equivalent.json``, keyed by a stable description (the function, the
mutation and the source text it changes), never by line number, so the list stays valid as
the modules change. The report excludes them from the rate's denominator and says so.

Usage::

    python tools/mutate_package.py                    # every module, whole run
    python tools/mutate_package.py --module masks     # one module
    python tools/mutate_package.py --sample 8 --seed 0  # a fixed sample per module (CI)
    python tools/mutate_package.py --list --module attention  # print the mutants only

Mutants run in two worker processes (``--jobs``), each importing torch once and forking a
child per mutant that runs ``pytest -x -q`` on the module's test files, with a per-mutant
time limit (``--timeout``). What is not mutated: docstrings, strings and f-strings
(messages), type annotations, ``__all__``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
EQUIVALENT_FILE = REPORTS / "mutation_equivalent.json"

# module -> the test files that are its unit tests
MODULES: Dict[str, List[str]] = {
    "attention": ["tests/test_attention.py", "tests/test_package_properties.py"],
    "masks": ["tests/test_masks.py", "tests/test_package_properties.py"],
    # multihead's attention dropout and grouped-query heads (num_kv_heads) are tested with their
    # chapters' code: tests/test_dropout.py and tests/test_inference.py
    "multihead": [
        "tests/test_multihead.py",
        "tests/test_package_properties.py",
        "tests/test_dropout.py",
        "tests/test_inference.py",
    ],
    "efficient": ["tests/test_efficient.py", "tests/test_package_properties.py"],
    "adaptive_span": ["tests/test_adaptive_span.py", "tests/test_package_properties.py"],
    "all_attention": ["tests/test_all_attention.py", "tests/test_package_properties.py"],
}

BINOP_SWAPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.MatMult: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
}
CMP_SWAPS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
MODULE_NAMES = {"torch", "math", "F", "nn", "np", "numpy", "functools", "itertools"}


@dataclass
class Mutant:
    module: str
    index: int
    function: str  # enclosing function or class, and the first line of the statement changed
    kind: str  # e.g. "binop Add->Sub"
    snippet: str  # the original source of the node it changes
    line: int  # for reading the report only; the key below does not use it
    first: int = 0  # the lines whose execution reaches the change (for choosing the tests)
    last: int = 0

    @property
    def key(self) -> str:
        """Stable across edits elsewhere in the module: function + mutation + source text."""
        return f"{self.module}:{self.function}: {self.kind}: {self.snippet}"


def _snippet(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 160 else text[:157] + "..."


class _Sites(ast.NodeVisitor):
    """Walk a module and record (node id, kind, apply-function) for every mutation site."""

    def __init__(self) -> None:
        # (node, function, kind, payload, lines)
        self.sites: List[Tuple[ast.AST, str, str, object, Tuple[int, int]]] = []
        self.scope: List[str] = []
        self.statements: List[ast.stmt] = []

    def visit(self, node):
        if isinstance(node, ast.stmt):
            self.statements.append(node)
            try:
                return super().visit(node)
            finally:
                self.statements.pop()
        return super().visit(node)

    # scopes -------------------------------------------------------------------------------
    def _scoped(self, node, name):
        self.scope.append(name)
        # skip the docstring, decorators' and annotations' contents
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                self.visit(d)
        for stmt in body:
            self.visit(stmt)
        self.scope.pop()

    def visit_FunctionDef(self, node):
        self._scoped(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._scoped(node, node.name)

    def _where(self) -> str:
        return ".".join(self.scope) or "<module>"

    def add(self, node, kind, payload=None):
        where = self._where()
        if (
            not isinstance(node, ast.stmt)
            and self.statements
            and not isinstance(self.statements[-1], (ast.FunctionDef, ast.ClassDef))
        ):
            where += " | " + _snippet(self.statements[-1]).split("\n")[0]
        stmt = node if isinstance(node, ast.stmt) or not self.statements else self.statements[-1]
        last = stmt.end_lineno or stmt.lineno
        header = getattr(stmt, "test", None) or getattr(stmt, "iter", None)
        if isinstance(stmt, (ast.If, ast.While, ast.For)) and header is not None:
            last = header.end_lineno or stmt.lineno  # the header only, not the body
        elif isinstance(stmt, (ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)):
            last = stmt.lineno
        self.sites.append((node, where, kind, payload, (stmt.lineno, last)))

    # things not mutated -------------------------------------------------------------------
    def visit_JoinedStr(self, node):  # f-strings: messages
        return

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)

    def visit_Assign(self, node):
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        self.generic_visit(node)

    def visit_Import(self, node):
        return

    visit_ImportFrom = visit_Import

    # mutation sites -----------------------------------------------------------------------
    def visit_BinOp(self, node):
        swap = BINOP_SWAPS.get(type(node.op))
        if swap:
            self.add(node, f"binop {type(node.op).__name__}->{swap.__name__}", swap)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        swap = BINOP_SWAPS.get(type(node.op))
        if swap:
            self.add(node, f"augassign {type(node.op).__name__}->{swap.__name__}", swap)
        self.generic_visit(node)

    def visit_Compare(self, node):
        for i, op in enumerate(node.ops):
            swap = CMP_SWAPS.get(type(op))
            if swap:
                self.add(node, f"compare[{i}] {type(op).__name__}->{swap.__name__}", (i, swap))
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        self.add(node, f"boolop {type(node.op).__name__}->{other.__name__}", other)
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, (ast.Not, ast.USub, ast.Invert)):
            self.add(node, f"unaryop drop {type(node.op).__name__}")
        self.generic_visit(node)

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool):
            self.add(node, f"constant {v}->{not v}", not v)
        elif isinstance(v, int):
            self.add(node, f"constant {v}->{v + 1}", v + 1)
            if v != 0:
                self.add(node, f"constant {v}->0", 0)
        elif isinstance(v, float):
            new = 1.0 if v == 0.0 else (v * 2 if v == v and abs(v) != float("inf") else 0.0)
            self.add(node, f"constant {v}->{new}", new)

    def visit_Slice(self, node):
        if node.lower is not None:
            self.add(node, "slice drop lower", "lower")
        if node.upper is not None:
            self.add(node, "slice drop upper", "upper")
        self.generic_visit(node)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Call):
            self.add(node, "statement removed")
        elif isinstance(node.value, ast.Constant):
            return  # a stray string
        self.generic_visit(node)

    def visit_Raise(self, node):
        self.add(node, "raise removed")
        # the message is not mutated

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute) and not (
            isinstance(f.value, ast.Name) and f.value.id in MODULE_NAMES
        ):
            self.add(node, f"call .{f.attr}() replaced by its receiver")
        self.generic_visit(node)

    def visit_keyword(self, node):
        self.visit(node.value)


def _apply(tree: ast.Module, target: ast.AST, kind: str, payload) -> str:
    """The source of ``tree`` with the mutation applied at ``target``; ``tree`` is left as it was."""
    parents = {
        child: (parent, field)
        for parent in ast.walk(tree)
        for field, value in ast.iter_fields(parent)
        for child in (value if isinstance(value, list) else [value])
        if child is target
    }
    parent, field = parents[target]

    def swap(new):  # put ``new`` where ``target`` is; return a function that undoes it
        value = getattr(parent, field)
        if isinstance(value, list):
            i = next(k for k, x in enumerate(value) if x is target)
            value[i] = new
            return lambda: value.__setitem__(i, target)
        setattr(parent, field, new)
        return lambda: setattr(parent, field, target)

    if kind.startswith(("binop", "augassign", "boolop")):
        old = target.op
        target.op = payload()
        undo = lambda: setattr(target, "op", old)  # noqa: E731
    elif kind.startswith("compare"):
        i, cls = payload
        old = target.ops[i]
        target.ops[i] = cls()
        undo = lambda: target.ops.__setitem__(i, old)  # noqa: E731
    elif kind.startswith("constant"):
        old = target.value
        target.value = payload
        undo = lambda: setattr(target, "value", old)  # noqa: E731
    elif kind.startswith("slice"):
        old = getattr(target, payload)
        setattr(target, payload, None)
        undo = lambda: setattr(target, payload, old)  # noqa: E731
    elif kind.startswith("unaryop"):
        undo = swap(target.operand)
    elif kind in ("statement removed", "raise removed"):
        undo = swap(ast.copy_location(ast.Pass(), target))
    elif kind.startswith("call"):
        undo = swap(target.func.value)
    else:
        raise ValueError(kind)
    try:
        return ast.unparse(tree)
    finally:
        undo()


def mutants_of(module: str, source: Optional[str] = None) -> Iterator[Tuple[Mutant, str]]:
    """Every mutant of ``attncourse/<module>.py`` (or of ``source``) with its source text."""
    if source is None:
        source = (ROOT / "attncourse" / f"{module}.py").read_text()
    tree = ast.parse(source)
    sites = _Sites()
    sites.visit(tree)
    seen: Dict[str, int] = {}
    for index, (node, function, kind, payload, (first, last)) in enumerate(sites.sites):
        m = Mutant(
            module,
            index,
            function,
            kind,
            _snippet(node).split("\n")[0],
            getattr(node, "lineno", 0),
            first,
            last,
        )
        seen[m.key] = seen.get(m.key, 0) + 1
        if seen[m.key] > 1:  # the same change of the same text twice in one statement
            m.kind += f" (occurrence {seen[m.key]})"
        try:
            text = _apply(tree, node, kind, payload)
            compile(text, f"{module}.py", "exec")
        except (SyntaxError, ValueError):
            continue
        yield m, text


# ------------------------------------------------------------------------------------------
# worker: imports torch once; forks one child per mutant


class _LineTracer:
    """A pytest plugin that records which tests execute which lines of some files.

    ``paths`` maps each file to its module's name. Lines run outside any test (at import:
    ``def`` lines, default arguments, constants) are recorded under the name ``""``; a mutant
    there runs the whole test selection.
    """

    def __init__(self, paths: Dict[str, str], out: str) -> None:
        self.modules, self.out, self.current = paths, out, ""
        self.lines: Dict[str, Dict[int, set]] = {path: {} for path in paths}
        sys.settrace(self._global)

    def _global(self, frame, event, arg):
        lines = self.lines.get(frame.f_code.co_filename)
        if lines is None:
            return None
        lines.setdefault(frame.f_lineno, set()).add(self.current)
        return self._local

    def _local(self, frame, event, arg):
        if event == "line":
            lines = self.lines[frame.f_code.co_filename]
            lines.setdefault(frame.f_lineno, set()).add(self.current)
        return self._local

    def pytest_runtest_setup(self, item):
        self.current = item.nodeid
        sys.settrace(self._global)  # in case something reset it

    def pytest_runtest_teardown(self, item):
        self.current = ""

    def save(self) -> None:
        sys.settrace(None)
        found = {
            self.modules[path]: {str(k): sorted(v) for k, v in lines.items()}
            for path, lines in self.lines.items()
        }
        Path(self.out).write_text(json.dumps(found))


def worker_main(workdir: str, timeout: float, warm_tests: List[str]) -> None:
    """Read jobs (JSON lines: module, source path, tests) from stdin; print one result line each."""
    os.chdir(workdir)
    sys.path.insert(0, workdir)
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    import hypothesis  # noqa: F401
    import numpy  # noqa: F401
    import pytest
    import torch  # noqa: F401  (the expensive imports, shared by every forked child)

    torch.set_num_threads(1)
    # Warm up: one collection imports every third-party module the tests need (matplotlib,
    # pytest plugins); then forget the modules of the work directory so that each child
    # imports the package and the tests afresh, with its mutant.
    with open(os.devnull, "w") as devnull:
        saved = sys.stdout
        sys.stdout = devnull
        try:
            pytest.main(
                ["--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *warm_tests]
            )
        finally:
            sys.stdout = saved
    for name, mod in list(sys.modules.items()):
        if (
            str(getattr(mod, "__file__", "") or "").startswith(workdir)
            or name.split(".")[0] in ("attncourse", "tests", "conftest")
            or name.startswith("test_")
        ):
            del sys.modules[name]
    for line in sys.stdin:
        job = json.loads(line)
        target = Path(workdir) / "attncourse" / f"{job['module']}.py"
        original = target.read_text()
        target.write_text(job["source"])
        start = time.time()
        pid = os.fork()
        if pid == 0:  # child
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                plugins = []
                if job.get("trace"):
                    traced = {
                        str(Path(workdir) / "attncourse" / f"{mod}.py"): mod
                        for mod in job["traced"]
                    }
                    plugins.append(_LineTracer(traced, job["trace"]))
                rc = pytest.main(
                    [
                        "-x",
                        "-q",
                        "-p",
                        "no:randomly",
                        "-p",
                        "no:cacheprovider",
                        "-o",
                        "addopts=",
                        *job["tests"],
                    ],
                    plugins=plugins,
                )
                if plugins:
                    plugins[0].save()
                os._exit(int(rc))
            except BaseException:
                os._exit(3)
        status = None
        while time.time() - start < timeout:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(st)
                break
            time.sleep(0.05)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            outcome = "timeout"
        else:
            outcome = {0: "survived", 1: "killed", 2: "killed", 3: "killed", 5: "no tests"}.get(
                status, "killed"
            )
        target.write_text(original)
        print(
            json.dumps(
                {
                    "id": job["id"],
                    "outcome": outcome,
                    "rc": status,
                    "seconds": round(time.time() - start, 2),
                }
            ),
            flush=True,
        )


def _make_workdir() -> str:
    d = tempfile.mkdtemp(prefix="attncourse-mutation-")
    shutil.copytree(
        ROOT / "attncourse", Path(d) / "attncourse", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "tests", Path(d) / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", d)
    return d


class Pool:
    """``n`` worker processes, each with its own copy of the package and the tests."""

    def __init__(self, n_workers: int, timeout: float, warm: List[str]) -> None:
        self.workdirs = [_make_workdir() for _ in range(n_workers)]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    w,
                    "--timeout",
                    str(timeout),
                    *[a for t in warm for a in ("--warm", t)],
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                bufsize=1,
            )
            for w in self.workdirs
        ]

    def map(self, jobs: List[dict], progress: bool = True) -> Dict[int, dict]:
        procs, results = self.procs, {}
        pending = list(jobs)
        busy: Dict[int, Optional[dict]] = {i: None for i in range(len(procs))}
        for i in busy:
            if pending:
                busy[i] = pending.pop(0)
                procs[i].stdin.write(json.dumps(busy[i]) + "\n")
        while any(b is not None for b in busy.values()):
            ready, _, _ = select.select(
                [procs[i].stdout for i in busy if busy[i] is not None], [], []
            )
            for stream in ready:
                i = next(k for k, p in enumerate(procs) if p.stdout is stream)
                line = stream.readline()
                if not line:
                    raise RuntimeError(f"mutation worker {i} died")
                result = json.loads(line)
                results[result["id"]] = result
                if progress:
                    print(
                        f"  {len(results)}/{len(jobs)} {busy[i]['label']}: {result['outcome']}"
                        f" ({result['seconds']} s)",
                        flush=True,
                    )
                busy[i] = pending.pop(0) if pending else None
                if busy[i] is not None:
                    procs[i].stdin.write(json.dumps(busy[i]) + "\n")
        return results

    def close(self) -> None:
        for p in self.procs:
            p.stdin.close()
            p.wait()
        for w in self.workdirs:
            shutil.rmtree(w, ignore_errors=True)


def select_tests(mutant: Mutant, lines: Dict[str, List[str]], files: List[str]) -> List[str]:
    """The tests that execute the mutated lines; all of ``files`` when import-time code is hit or nothing is."""
    chosen: set = set()
    for line in range(mutant.first, mutant.last + 1):
        chosen.update(lines.get(str(line), ()))
    if "" in chosen:
        return list(files)
    # the baseline also ran other modules' tests: only the module's own files judge its mutants
    chosen = {test for test in chosen if test.split("::")[0] in files}
    return sorted(chosen) if chosen else list(files)


def previous_counts(module: str, report: Optional[Path] = None) -> dict:
    """The module's entry in ``report`` (default ``reports/mutation-<module>.json``), read once."""
    path = report or REPORTS / f"mutation-{module}.json"
    if path not in _PREVIOUS:
        _PREVIOUS[path] = json.loads(Path(path).read_text())
    return _PREVIOUS[path]["modules"][module]


_PREVIOUS: Dict[object, dict] = {}


def load_equivalent() -> Dict[str, str]:
    if EQUIVALENT_FILE.exists():
        return json.loads(EQUIVALENT_FILE.read_text())
    return {}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--module",
        action="append",
        choices=sorted(MODULES),
        help="module(s) to mutate (default: all)",
    )
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant")
    p.add_argument(
        "--sample",
        type=int,
        default=0,
        help="mutate only this many mutants per module (a fixed random sample)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    p.add_argument(
        "--min-rate", type=float, default=0.0, help="exit 1 when a module's kill rate is below this"
    )
    p.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    p.add_argument(
        "--recheck",
        action="store_true",
        help=(
            "run only the survivors of the last report (--report, or"
            " reports/mutation-<module>.json) and update it"
        ),
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--warm", action="append", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.recheck and args.report is None and args.module and len(args.module) == 1:
        # the report rechecked is the one updated
        args.report = REPORTS / f"mutation-{args.module[0]}.json"
    if args.worker:
        worker_main(args.worker, args.timeout, args.warm)
        return 0

    modules = args.module or sorted(MODULES)
    equivalent = load_equivalent()
    jobs, mutants = [], {}
    for module in modules:
        found = list(mutants_of(module))
        if args.recheck:
            previous = previous_counts(module, args.report)
            again = {row["key"] for row in previous["survivors"]}
            found = [(m, text) for m, text in found if m.key in again]
        if args.sample:
            rng = random.Random(f"{args.seed}:{module}")
            found = rng.sample(found, min(args.sample, len(found)))
        for m, text in found:
            job_id = len(jobs)
            mutants[job_id] = m
            jobs.append(
                {
                    "id": job_id,
                    "module": module,
                    "source": text,
                    "tests": MODULES[module],
                    "label": m.key[:140],
                }
            )
    if args.list:
        for m in mutants.values():
            print(f"{m.line:4d} {m.key}")
        print(f"{len(mutants)} mutants")
        return 0

    started = time.time()
    files = sorted({t for mod in modules for t in MODULES[mod]})  # the modules' test files
    pool = Pool(args.jobs, args.timeout, files)
    try:
        # The unmutated modules first: their tests must pass (or every mutant would look
        # killed), and a line tracer records which tests run which line of each module. Each
        # worker runs a share of the test files once, tracing every module (a file several
        # modules share, test_package_properties, runs once, not once a module).
        shares = [files[k :: args.jobs] for k in range(min(args.jobs, len(files)))]
        traces = [tempfile.mktemp(prefix="mutation-lines-", suffix=".json") for _ in shares]
        baseline = [
            {
                "id": -1 - k,
                "module": modules[0],
                "source": (ROOT / "attncourse" / f"{modules[0]}.py").read_text(),
                "tests": share,
                "label": f"{', '.join(share)} (unmutated)",
                "trace": traces[k],
                "traced": modules,
            }
            for k, share in enumerate(shares)
        ]
        base = pool.map(baseline, progress=False)
        broken = [s for k, s in enumerate(shares) if base[-1 - k]["outcome"] != "survived"]
        if broken:
            print(f"{broken} fail on the unmutated code: fix them first", file=sys.stderr)
            return 2
        lines: Dict[str, Dict[str, set]] = {mod: {} for mod in modules}
        for path in traces:
            for mod, found in json.loads(Path(path).read_text()).items():
                for line, tests in found.items():
                    lines[mod].setdefault(line, set()).update(tests)
            os.unlink(path)
        for job in jobs:
            job["tests"] = select_tests(
                mutants[job["id"]], lines[job["module"]], MODULES[job["module"]]
            )
        results = pool.map(jobs)
    finally:
        pool.close()
    elapsed = time.time() - started

    report = {
        "sample": args.sample,
        "seed": args.seed,
        "recheck": args.recheck,
        "seconds": round(elapsed, 1),
        "modules": {},
    }
    worst = 1.0
    for module in modules:
        rows = [(mutants[i], results[i]) for i in mutants if mutants[i].module == module]
        killed = [m for m, r in rows if r["outcome"] in ("killed", "timeout")]
        survived = [m for m, r in rows if r["outcome"] not in ("killed", "timeout")]
        eq = [m for m in survived if m.key in equivalent]
        missing = [m for m in survived if m.key not in equivalent]
        total, n_killed = len(rows), len(killed)
        if args.recheck:  # the mutants killed last time count as killed
            total, n_killed = (
                previous_counts(module, args.report)["mutants"],
                previous_counts(module, args.report)["killed"] + len(killed),
            )
        denominator = total - len(eq)
        rate = n_killed / denominator if denominator else 1.0
        worst = min(worst, rate)
        report["modules"][module] = {
            "mutants": total,
            "killed": n_killed,
            "timeouts": sum(r["outcome"] == "timeout" for _, r in rows),
            "equivalent": len(eq),
            "survived_not_equivalent": len(missing),
            "kill_rate": round(rate, 4),
            "kill_rate_all": round(n_killed / total, 4) if total else 1.0,
            "seconds": round(sum(r["seconds"] for _, r in rows), 1),
            "survivors": [
                {"key": m.key, "line": m.line, "equivalent": equivalent.get(m.key)}
                for m in survived
            ],
        }
        print(
            f"{module:14s} {total:4d} mutants  {n_killed:4d} killed  {len(eq):3d} equivalent "
            f" {len(missing):3d} surviving  kill rate {rate:.1%} (of all mutants"
            f" {report['modules'][module]['kill_rate_all']:.1%})"
        )
        for m in missing:
            print(f"    SURVIVED line {m.line}: {m.key}")
    print(f"total time {elapsed:.0f} s with {args.jobs} workers")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if worst < args.min_rate else 0


if __name__ == "__main__":
    sys.exit(main())
