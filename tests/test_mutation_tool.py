"""The package's mutation tool (tools/mutate_package.py): its mutants and their stable keys."""

import ast

from project_tools import tool

mutate_package = tool("mutate_package")

SOURCE = '''
"""Docstring: never mutated."""
__all__ = ["f"]


def f(x: int, y: int = 2) -> int:
    """Docstring."""
    if x < 0 and y:
        raise ValueError(f"x must be >= 0, got {x}")
    check(x)
    return (x + y) * items[1:3].sum(dim=-1)
'''


def test_mutants_cover_each_operator_kind_and_skip_docstrings_and_messages():
    found = list(mutate_package.mutants_of("demo", SOURCE))
    kinds = {m.kind for m, _ in found}
    for kind in (
        "binop Add->Sub",
        "binop Mult->Div",
        "compare[0] Lt->LtE",
        "boolop And->Or",
        "raise removed",
        "statement removed",
        "slice drop lower",
        "slice drop upper",
        "unaryop drop USub",
        "constant 2->3",
        "call .sum() replaced by its receiver",
    ):
        assert kind in kinds, kind
    for m, text in found:
        ast.parse(text)  # every mutant compiles
        # untouched
        assert "Docstring" in text and ("x must be >= 0" in text or m.kind == "raise removed")
        assert "__all__ = ['f']" in text
    assert len({m.key for m, _ in found}) == len(found)  # keys are unique


def test_keys_do_not_depend_on_line_numbers():
    before = [m.key for m, _ in mutate_package.mutants_of("demo", SOURCE)]
    after = [m.key for m, _ in mutate_package.mutants_of("demo", "\n\nimport os\n" + SOURCE)]
    assert before == after


def test_every_listed_equivalent_mutant_still_exists(monkeypatch):
    """A stale entry (the code changed) must be removed from the list, not left to excuse nothing.

    Only the listed mutants need their source: mutants_of's ``_apply`` (a search of the module's
    tree and an unparse of the whole module, per mutant) gives every other one a stand-in, and
    the listed ones get the real source and its compile check, as mutants_of does, after it
    has made their keys."""
    equivalent = mutate_package.load_equivalent()
    apply, last_call = mutate_package._apply, []

    def stand_in(*args):
        last_call[:] = [args]
        return "pass"

    monkeypatch.setattr(mutate_package, "_apply", stand_in)
    keys = set()
    for module in mutate_package.MODULES:
        for m, _ in mutate_package.mutants_of(module):
            if m.key in equivalent:
                try:  # the tree is as it was: mutants_of's _apply undoes its change
                    compile(apply(*last_call[0]), f"{module}.py", "exec")
                except (SyntaxError, ValueError):
                    continue  # mutants_of leaves out a mutant that does not compile
            keys.add(m.key)
    assert not set(equivalent) - keys, sorted(set(equivalent) - keys)
    assert all(isinstance(reason, str) and len(reason) > 20 for reason in equivalent.values())


def test_a_mutant_runs_the_tests_of_its_module_that_reach_it():
    """The baseline traces every module under every test file: a line that another module's
    tests reach runs only the mutated module's own tests that reach it, or all of them."""
    files = ["tests/test_attention.py", "tests/test_package_properties.py"]
    lines = {
        "3": ["tests/test_attention.py::test_a", "tests/test_multihead.py::test_m"],
        "4": ["tests/test_multihead.py::test_m"],
        "5": ["", "tests/test_attention.py::test_a"],
    }

    def chosen(first, last):
        mutant = mutate_package.Mutant("attention", 0, "f", "k", "x", first, first, last)
        return mutate_package.select_tests(mutant, lines, files)

    assert chosen(3, 3) == ["tests/test_attention.py::test_a"]
    assert chosen(4, 4) == files  # only another module's tests reach it
    assert chosen(5, 5) == files  # run at import
    assert chosen(9, 9) == files  # reached by no test
