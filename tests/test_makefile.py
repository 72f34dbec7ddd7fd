"""The Makefile and the texts agree: every ``.PHONY`` target is a rule that does something and has
its one line for ``make help`` (a ``## `` comment on the target's line), nothing else is listed
there, and every ``make <target>`` that README.md, CONTRIBUTING.md, docs/, book/ or reports/ name
exists."""

import re
import shutil
import subprocess

import pytest
from project_tools import ROOT

MAKEFILE = (ROOT / "Makefile").read_text()
# The texts that name targets: the README, this guide, the decision records, the book (its
# chapters, pages and Chinese catalogues) and the reports' READMEs.
TEXTS = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    + [p for p in (ROOT / "docs").rglob("*.md")]
    + [p for p in (ROOT / "book").rglob("*") if p.suffix in {".md", ".ipynb", ".po"}]
    + [p for p in (ROOT / "reports").rglob("*.md")]
)


def phony(makefile: str) -> list[str]:
    """The targets of every ``.PHONY:`` line (continued lines joined)."""
    joined = makefile.replace("\\\n", " ")
    return [t for line in re.findall(r"^\.PHONY:(.*)$", joined, flags=re.M) for t in line.split()]


def rules(makefile: str) -> dict[str, dict]:
    """Every explicit rule of a plain target: ``{target: {"prerequisites", "recipe", "help"}}``."""
    found = {}
    lines = makefile.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^([a-zA-Z0-9_-]+):(?![:=])([^#]*)(?:## (.*))?$", line)
        if match:
            recipe = []
            for following in lines[i + 1 :]:
                if not following.startswith("\t"):
                    break
                recipe.append(following.strip())
            found[match.group(1)] = {
                "prerequisites": match.group(2).split(),
                "recipe": recipe,
                "help": (match.group(3) or "").strip(),
            }
    return found


def makefile_problems(makefile: str) -> list[str]:
    targets, declared = rules(makefile), phony(makefile)
    problems = []
    for name in declared:
        rule = targets.get(name)
        if rule is None:
            problems.append(f".PHONY target {name} has no rule")
            continue
        if not rule["recipe"] and not rule["prerequisites"]:
            problems.append(f".PHONY target {name} has no recipe and no prerequisite")
        if not rule["help"]:
            problems.append(f"{name} has no '## ' line for make help")
    for name, rule in targets.items():
        if rule["help"] and name not in declared:
            problems.append(f"{name} is listed by make help but not .PHONY")
    return problems


def named_targets(text: str) -> set[str]:
    """``make <target>`` in inline code (`make book`), or at the start of a line in a code block."""
    inline = re.findall(r"`make ([a-z][\w-]*)", text)
    blocks = "\n".join(re.findall(r"^```.*?^```", text, flags=re.M | re.S))
    return set(inline) | set(re.findall(r"^\s*(?:\$ )?make ([a-z][\w-]*)", blocks, flags=re.M))


def test_every_phony_target_has_a_recipe_and_a_help_line():
    assert makefile_problems(MAKEFILE) == []
    assert "help" in phony(MAKEFILE) and re.search(r"^\.DEFAULT_GOAL := help$", MAKEFILE, re.M)


def test_the_check_can_fail():
    """The Makefile as it was (issue 32): a ``.PHONY`` ``benchmark`` with no rule, and no help lines."""
    before = re.sub(r"  ## .*", "", MAKEFILE).replace(".PHONY: help", ".PHONY: help benchmark")
    problems = makefile_problems(before)
    assert ".PHONY target benchmark has no rule" in problems
    assert "book has no '## ' line for make help" in problems
    recipe_less = MAKEFILE + "\n.PHONY: nothing\nnothing:  ## does nothing\n"
    assert makefile_problems(recipe_less) == [
        ".PHONY target nothing has no recipe and no prerequisite"
    ]


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_target_the_texts_name_exists(path):
    targets = rules(MAKEFILE)
    missing = named_targets(path.read_text()) - set(targets)
    assert not missing, (
        f"{path.relative_to(ROOT)} names make {sorted(missing)}, which the Makefile lacks"
    )


def test_the_texts_name_targets():
    """The scan finds what it looks for: the README's two commands, in code and in a code block."""
    readme = (ROOT / "README.md").read_text()
    assert {"book", "test"} <= named_targets(readme)
    assert named_targets("run `make nothing-here` first") == {"nothing-here"}
    assert named_targets("```bash\nmake book   # builds\n```") == {"book"}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on the PATH")
def test_make_help_lists_every_target_once():
    out = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = [line.split()[1] for line in out.splitlines()]
    assert sorted(listed) == sorted(phony(MAKEFILE)), out
    for line in out.splitlines():
        assert len(line.split(None, 2)) == 3, line  # make <target> <one line>
