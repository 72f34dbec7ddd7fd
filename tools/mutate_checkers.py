"""Mutation testing of the exercise checkers: does every checker reject near misses of its own solution?

For every coding exercise in the registry (every exercise registered with a solution
*function* that is also the form of the answer, so exercises added later are covered
without change; ``@exercise(..., answer_is_function=False)`` marks a solution function
that only computes a value answer: those listed in ``VALUE_INPUTS`` are mutated too, each
mutant's value checked as a learner's answer), this tool parses the
solution's source, makes mutants of it (one small change each: an operator, a comparison, a
constant, a dimension, an index, a called function or method, a keyword, a deleted
statement), and runs each mutant through ``check()``. A mutant that passes the check
*survives*: either it is equivalent to the solution (same outputs on every input the
exercise allows; listed with the reason in ``checker_mutants_equivalent.json``) or the
checker misses a near miss, which is a defect of the checker.

mutmut and cosmic-ray mutate whole files and judge mutants by a test command; neither can
take one function's source and judge each mutant by a call of ``check()``, so the mutator
here is a small one of our own over Python's ``ast``.

Usage::

    python tools/mutate_checkers.py            # every exercise, a table, exit status 1 on survivors
    python tools/mutate_checkers.py --list     # also print every mutant and its verdict
    python tools/mutate_checkers.py --exercise dot-product/scores
"""

from __future__ import annotations

import argparse
import ast
import copy
import inspect
import json
import linecache
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = Path(__file__).resolve().parent / "checker_mutants_equivalent.json"

# -- the mutation operators ---------------------------------------------------------------------

_BINOP_SWAPS = {
    ast.Add: [ast.Sub],
    ast.Sub: [ast.Add],
    ast.Mult: [ast.Div],
    ast.Div: [ast.Mult, ast.FloorDiv],
    ast.FloorDiv: [ast.Div],
    ast.Pow: [ast.Mult],
    ast.MatMult: [ast.Mult],
    ast.BitAnd: [ast.BitOr],
    ast.BitOr: [ast.BitAnd],
    ast.Mod: [ast.FloorDiv],
}
_CMP_SWAPS = {
    ast.Lt: [ast.LtE, ast.Gt],
    ast.LtE: [ast.Lt, ast.GtE],
    ast.Gt: [ast.GtE, ast.Lt],
    ast.GtE: [ast.Gt, ast.LtE],
    ast.Eq: [ast.NotEq],
    ast.NotEq: [ast.Eq],
    ast.Is: [ast.IsNot],
    ast.IsNot: [ast.Is],
}
_BOOLOP_SWAPS = {ast.And: ast.Or, ast.Or: ast.And}
# functions and methods replaced by a near relative
_NAME_SWAPS = {
    "softmax": ["log_softmax"],
    "amax": ["amin"],
    "amin": ["amax"],
    "max": ["min"],
    "min": ["max"],
    "maximum": ["minimum"],
    "minimum": ["maximum"],
    "exp": ["log"],
    "sum": ["mean"],
    "mean": ["sum"],
    "ceil": ["floor"],
    "floor": ["ceil"],
    "tril": ["triu"],
    "triu": ["tril"],
    "isneginf": ["isposinf"],
    "all": ["any"],
    "any": ["all"],
    "zeros": ["ones"],
    "ones": ["zeros"],
    "zeros_like": ["ones_like"],
    "ones_like": ["zeros_like"],
    "arange": ["ones"],
    "cat": ["stack"],
}
# methods and functions whose call can be dropped (x.f(...) -> x, f(x) -> x)
_DROPPABLE = {
    "transpose",
    "masked_fill",
    "clamp",
    "exp",
    "softmax",
    "contiguous",
    "expand",
    "float",
    "to",
    "abs",
    "ceil",
    "floor",
    "sqrt",
    "unsqueeze",
    "squeeze",
    "T",
    "maximum",
    "minimum",
    "tril",
    "triu",
    "reshape",
    "view",
    "permute",
    "sum",
    "amax",
    "max",
    "int",
    "round",
    "mean",
}

# two-argument calls whose arguments are not swapped: the swap is always equivalent
# (transpose(-2, -1) is transpose(-1, -2), maximum(a, b) is maximum(b, a)) or meaningless
_SYMMETRIC = {
    "transpose",
    "swapaxes",
    "maximum",
    "minimum",
    "max",
    "min",
    "add",
    "mul",
    "logical_and",
    "logical_or",
    "cat",
}


@dataclass(frozen=True)
class Mutant:
    """One mutant: a stable description and the mutated source of the solution."""

    exercise_id: str
    key: str  # "<exercise id> :: <original statement> => <mutated statement>" (+ " #n" when repeated)
    source: str


def _parents(tree: ast.AST) -> Dict[int, Tuple[ast.AST, str, Optional[int]]]:
    out = {}
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST):
                        out[id(child)] = (parent, field, i)
            elif isinstance(value, ast.AST):
                out[id(value)] = (parent, field, None)
    return out


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    parent, field, index = _parents(tree)[id(old)]
    if index is None:
        setattr(parent, field, new)
    else:
        getattr(parent, field)[index] = new


def _callee_name(node: ast.Call) -> Optional[str]:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    return None


def _number_mutations(value) -> List:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return sorted({value + 1, value - 1} - {value})
    if isinstance(value, float):
        return [v for v in (value + 1.0, value / 2, 0.0 if value else 1.0) if v != value]
    if isinstance(value, str) and value in ("-inf", "inf", "nan"):
        return [{"-inf": "inf", "inf": "-inf", "nan": "-inf"}[value]]
    return []


def _mutations(
    node: ast.AST, assigned_before: set, params: Tuple[str, ...]
) -> Iterator[Callable[[ast.AST], Optional[ast.AST]]]:
    """Functions that turn a copy of ``node`` into one mutant of it (the copy found by position)."""
    if isinstance(node, ast.BinOp):
        for op in _BINOP_SWAPS.get(type(node.op), []):
            yield lambda n, op=op: ast.BinOp(n.left, op(), n.right)
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
            yield lambda n: n.left  # drop the right operand: x + y -> x, x / s -> x
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        for op in _CMP_SWAPS.get(type(node.ops[0]), []):
            yield lambda n, op=op: ast.Compare(n.left, [op()], n.comparators)
    elif isinstance(node, ast.BoolOp):
        yield lambda n: ast.BoolOp(_BOOLOP_SWAPS[type(n.op)](), n.values)
    elif isinstance(node, ast.UnaryOp):
        yield lambda n: n.operand  # ~m -> m, -x -> x, not c -> c
    elif isinstance(node, ast.Constant):
        for new in _number_mutations(node.value):
            yield lambda n, new=new: ast.Constant(new)
    elif (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Tuple)
        and len(node.slice.elts) >= 2
    ):
        elts = node.slice.elts
        if any(isinstance(e, ast.Constant) and e.value is None for e in elts):
            yield lambda n: ast.Subscript(
                n.value, ast.Tuple(list(reversed(n.slice.elts)), ast.Load()), ast.Load()
            )
    elif isinstance(node, ast.Call):
        name = _callee_name(node)
        for new in _NAME_SWAPS.get(name, []):

            def swap(n, new=new):
                func = copy.deepcopy(n.func)
                if isinstance(func, ast.Attribute):
                    func.attr = new
                else:
                    func.id = new
                return ast.Call(func, n.args, n.keywords)

            yield swap
        if name in _DROPPABLE:
            if isinstance(node.func, ast.Attribute) and not (
                isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "math")
            ):
                yield lambda n: n.func.value
            elif node.args:
                yield lambda n: n.args[0]
        for i in range(len(node.keywords)):
            yield lambda n, i=i: ast.Call(n.func, n.args, n.keywords[:i] + n.keywords[i + 1 :])
        if len(node.args) == 2 and name not in _SYMMETRIC:
            yield lambda n: ast.Call(n.func, list(reversed(n.args)), n.keywords)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in params:
        for other in params:
            if other != node.id:  # an argument ignored, another one used in its place
                yield lambda n, other=other: ast.Name(other, ast.Load())
    elif isinstance(node, ast.Slice):
        if node.lower is not None and not (
            isinstance(node.lower, ast.Constant) and node.lower.value == 0
        ):
            # x[a:b] -> x[:b] (x[0:b] -> x[:b] is the same slice)
            yield lambda n: ast.Slice(None, n.upper, n.step)
        if node.upper is not None:
            yield lambda n: ast.Slice(n.lower, None, n.step)  # x[a:b] -> x[a:]
        if (node.lower is None) != (node.upper is None):
            yield lambda n: ast.Slice(n.upper, n.lower, n.step)  # x[:k] -> x[k:], the other part
    elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        yield lambda n: n.value
    elif (
        isinstance(node, ast.Return)
        and isinstance(node.value, ast.Tuple)
        and len(node.value.elts) >= 2
    ):
        yield lambda n: ast.Return(ast.Tuple(list(reversed(n.value.elts)), ast.Load()))
    elif (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    ):
        if node.targets[0].id in assigned_before:
            yield lambda n: ast.Pass()  # drop a statement that updates an existing variable


def _statement_of(tree: ast.AST, node: ast.AST) -> ast.AST:
    parents = _parents(tree)
    while not isinstance(node, ast.stmt):
        node = parents[id(node)][0]
    return node


def _unparse(node: ast.AST) -> str:
    if isinstance(node, (ast.If, ast.For, ast.While, ast.FunctionDef)):  # only the header line
        text = ast.unparse(node).splitlines()[0]
    else:
        text = ast.unparse(node)
    return " ".join(text.split())


def mutants_of(exercise_id: str, solution: Callable) -> List[Mutant]:
    """Every mutant of ``solution``'s source, each with a stable key."""
    source = textwrap.dedent(inspect.getsource(solution))
    tree = ast.parse(source)
    func = tree.body[0]
    func.decorator_list = []
    params = tuple(a.arg for a in func.args.args + func.args.kwonlyargs)
    assigned: set = set(params)
    sites: List[Tuple[int, Callable, set]] = []
    nodes = list(ast.walk(tree))
    seen_assign: Dict[int, set] = {}
    # the names assigned before each statement, in source order
    names = set(assigned)
    for stmt in sorted(
        (n for n in nodes if isinstance(n, ast.stmt)), key=lambda n: (n.lineno, n.col_offset)
    ):
        seen_assign[id(stmt)] = set(names)
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                names |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
    for index, node in enumerate(nodes):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value not in ("-inf", "inf", "nan")
        ):
            continue
        for mutate in _mutations(node, seen_assign.get(id(node), set()), params):
            sites.append((index, mutate))
    mutants, counts, sources = [], {}, {source}
    for index, mutate in sites:
        fresh = ast.parse(source)
        fresh.body[0].decorator_list = []
        target = list(ast.walk(fresh))[index]
        before = _unparse(_statement_of(fresh, target))
        new = mutate(copy.deepcopy(target))
        if new is None:
            continue
        ast.copy_location(new, target)
        if target is fresh.body[0]:
            continue
        _replace(fresh, target, new)
        stmt = new if isinstance(new, ast.stmt) else _statement_of(fresh, new)
        after = _unparse(stmt)
        if after == before:
            continue
        ast.fix_missing_locations(fresh)
        try:
            mutated = ast.unparse(fresh)
            compile(mutated, "<mutant>", "exec")
        except (SyntaxError, ValueError, TypeError):
            continue
        if mutated in sources:  # the same mutant reached by two operators counts once
            continue
        sources.add(mutated)
        key = f"{exercise_id} :: {before} => {after}"
        counts[key] = counts.get(key, 0) + 1
        if counts[key] > 1:
            key += f" #{counts[key]}"
        mutants.append(Mutant(exercise_id, key, mutated))
    return mutants


def compile_mutant(mutant: Mutant, solution: Callable) -> Callable:
    namespace = dict(solution.__globals__)
    filename = f"<mutant of {mutant.exercise_id}>"
    # the mutant's source where inspect.getsource finds it: Triton reads a kernel's source to run it
    linecache.cache[filename] = (len(mutant.source), None, mutant.source.splitlines(True), filename)
    exec(compile(mutant.source, filename, "exec"), namespace)
    return namespace[solution.__name__]


# -- running them -----------------------------------------------------------------------------


@dataclass
class Report:
    exercise_id: str
    generated: int
    killed: int
    equivalent: List[str]
    survivors: List[str]
    seconds: float
    verdicts: List[Tuple[str, str]]


def load_equivalents(path: Path = EQUIVALENTS) -> Dict[str, str]:
    """``{mutant key: why it is equivalent}`` from the committed file."""
    return json.loads(path.read_text()) if path.exists() else {}


def _trained_model_and_tokens():
    """A small CausalLM trained a few steps on a repeating pattern (its heads differ) and validation tokens."""
    import torch

    from attncourse import CausalLM
    from attncourse.training import next_token_loss

    torch.manual_seed(0)
    model = CausalLM.standard(11, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=32)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(60):
        start = torch.randint(0, 11, (16, 1), generator=g)
        tokens = (start + torch.arange(24) * torch.randint(1, 4, (16, 1), generator=g)) % 11
        loss = next_token_loss(model(tokens), tokens)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), (torch.arange(8)[:, None] + torch.arange(24) * 2) % 11


# Exercises whose solution function computes the learner's *value* answer from the notebook's
# objects (``@exercise(..., answer_is_function=False)``): the inputs to run the solution and its
# mutants on. The value each mutant computes is passed to check() like a learner's answer.
VALUE_INPUTS: Dict[str, Callable[[], tuple]] = {
    "inference/mqa-gap": _trained_model_and_tokens,
}
_INPUTS_CACHE: Dict[str, tuple] = {}


def _value_inputs(exercise_id: str) -> tuple:
    """Fresh deep copies of the exercise's inputs (a mutant may change them in place)."""
    if exercise_id not in _INPUTS_CACHE:
        _INPUTS_CACHE[exercise_id] = VALUE_INPUTS[exercise_id]()
    return copy.deepcopy(_INPUTS_CACHE[exercise_id])


def coding_exercises() -> Dict[str, Callable]:
    """The exercises mutated: every coding exercise (the answer is a function; a solution without
    parameters computes a value answer), and the value exercises of :data:`VALUE_INPUTS`."""
    from attncourse.exercises import registry  # importing it registers every exercise

    return {
        ex.exercise_id: ex.reference
        for ex in registry().values()
        if ex.reference is not None and (ex.answer_is_function or ex.exercise_id in VALUE_INPUTS)
    }


def _judge(exercise_id: str, fn: Callable):
    """check() of ``fn`` as the learner would pass it: the function itself, or the value it computes."""
    from attncourse.exercises import check, registry

    if registry()[exercise_id].answer_is_function:
        return check(exercise_id, fn)
    return check(exercise_id, fn(*_value_inputs(exercise_id)))


def run(
    exercise_id: str, solution: Callable, equivalents: Dict[str, str], sample: Optional[int] = None
) -> Report:
    start = time.perf_counter()
    result = _judge(exercise_id, solution)
    if not result.passed:
        key = f"{exercise_id} :: THE SOLUTION ITSELF IS REJECTED: {result.message.splitlines()[0]}"
        return Report(
            exercise_id, 0, 0, [], [key], time.perf_counter() - start, [(key, "SURVIVED")]
        )
    mutants = mutants_of(exercise_id, solution)
    if sample is not None and len(mutants) > sample:
        step = len(mutants) / sample
        mutants = [mutants[int(i * step)] for i in range(sample)]
    killed, equivalent, survivors, verdicts = 0, [], [], []
    for mutant in mutants:
        try:
            fn = compile_mutant(mutant, solution)
            passed = _judge(exercise_id, fn).passed
        except BaseException as error:  # noqa: BLE001 - a mutant that cannot even be built is killed
            if isinstance(error, KeyboardInterrupt):
                raise
            killed += 1
            verdicts.append((mutant.key, f"killed ({type(error).__name__} when built)"))
            continue
        if not passed:
            killed += 1
            verdicts.append((mutant.key, "killed"))
        elif mutant.key in equivalents:
            equivalent.append(mutant.key)
            verdicts.append((mutant.key, "equivalent"))
        else:
            survivors.append(mutant.key)
            verdicts.append((mutant.key, "SURVIVED"))
    return Report(
        exercise_id,
        len(mutants),
        killed,
        equivalent,
        survivors,
        time.perf_counter() - start,
        verdicts,
    )


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", action="append", help="only this exercise id (repeatable)")
    parser.add_argument("--list", action="store_true", help="print every mutant and its verdict")
    args = parser.parse_args(argv)
    sys.path.append(str(ROOT))  # the repository's package, unless PYTHONPATH names another
    # mutants trigger torch's deprecation warnings (x.T on 4-D tensors, ...)
    warnings.simplefilter("ignore")
    equivalents = load_equivalents()
    exercises = coding_exercises()
    chosen = args.exercise or list(exercises)
    total = [0, 0, 0, 0]
    start = time.perf_counter()
    print(
        f"{'exercise':38} {'mutants':>7} {'killed':>7} {'equiv.':>7} {'survived':>8}"
        f" {'kill rate':>9} {'time':>7}"
    )
    used = set()
    for exercise_id in chosen:
        report = run(exercise_id, exercises[exercise_id], equivalents)
        used |= set(report.equivalent)
        rate = report.killed / max(1, report.generated - len(report.equivalent))
        print(
            f"{exercise_id:38} {report.generated:7d} {report.killed:7d} {len(report.equivalent):7d}"
            f" {len(report.survivors):8d} {rate:9.1%} {report.seconds:6.1f}s"
        )
        for key, verdict in report.verdicts:
            if args.list or verdict == "SURVIVED":
                print(f"    {verdict:10} {key}")
        for i, n in enumerate(
            (report.generated, report.killed, len(report.equivalent), len(report.survivors))
        ):
            total[i] += n
    rate = total[1] / max(1, total[0] - total[2])
    print(
        f"{'all':38} {total[0]:7d} {total[1]:7d} {total[2]:7d} {total[3]:8d} {rate:9.1%}"
        f" {time.perf_counter() - start:6.1f}s"
    )
    stale = [k for k in equivalents if k.split(" :: ")[0] in chosen and k not in used]
    for key in stale:
        print(f"    STALE      {key} (listed as equivalent but killed or no longer generated)")
    return 1 if total[3] or stale else 0


if __name__ == "__main__":
    sys.exit(main())
