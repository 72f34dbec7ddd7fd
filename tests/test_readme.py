"""The README follows the tree: its links resolve, its chapter table links every chapter's page on
the site and its Colab edition, and the files, modules and command options it names exist. The
same holds for what CONTRIBUTING.md took over from it (the layout of the repository, the
benchmarks, the commands in detail)."""

import importlib
import importlib.util
import re

import pytest
from project_tools import ROOT, colab

README = (ROOT / "README.md").read_text()
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()
BOTH = {"README.md": README, "CONTRIBUTING.md": CONTRIBUTING}
TOOLS = sorted(p.name for p in (ROOT / "tools").glob("*.py"))


def _layout() -> str:
    return CONTRIBUTING.split("## Layout of the repository", 1)[1].split("```", 2)[1]


def test_relative_links_resolve():
    links = re.findall(r"\]\((?!https?://|#|mailto:)([^)\s]+)\)", README)
    assert links
    for link in links:
        assert (ROOT / link.split("#")[0]).exists(), link


def test_readme_opens_with_the_learners_path():
    """Read online, run in Colab, or install the package, before anything for maintainers; the
    CPU-only torch before the two commands that would otherwise download the CUDA build."""
    urls = colab.project_urls()
    start = README.index("## Start here")
    assert start < README.index("| chapter | read | run |") < README.index("## Build the book")
    learner = README[start : README.index("| chapter | read | run |")]
    assert urls["Homepage"] in learner and "in Colab" in learner
    assert f'pip install "attncourse @ git+{urls["Repository"]}"' in learner
    assert "download.pytorch.org/whl/cpu" in learner
    build = README[README.index("## Build the book") :]
    cpu = build.index("PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu")
    assert cpu < build.index("make book   #") and "rm -rf .venv" in build[:cpu]
    assert "2.13.0+cpu" in build and "sorts above" in build
    pin = re.search(r"^torch==([\d.]+)$", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert pin and f"torch=={pin.group(1)}" in build and f"{pin.group(1)}+cpu" in build


def test_chapter_table_links_each_chapter_to_its_page_and_its_colab_edition():
    owner_repo = colab.project_urls()["Repository"].removeprefix("https://github.com/")
    branch = colab.project_urls()["Branch"].rsplit("/tree/", 1)[1]
    rows = [line for line in README.splitlines() if re.match(r"^\| \d+\. ", line)]
    chapters = colab.chapters()
    assert len(rows) == len(chapters)
    for row, (doc, number) in zip(rows, chapters):
        name = doc.removeprefix("book/")
        assert row.startswith(f"| {number}. "), row
        assert f"]({colab.page_url(doc)})" in row, row
        colab_link = f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/notebooks/{name}.ipynb"
        assert f"]({colab_link})" in row, row
        assert "](book/" not in row  # the raw MyST notebook on GitHub is not a reading page


@pytest.mark.parametrize("name", BOTH)
def test_named_paths_exist(name):
    named = set(
        re.findall(
            r"`((?:attncourse|tools|tests|book|notebooks|reports|docs)/[\w./-]*)`", BOTH[name]
        )
    )
    assert named
    for path in named:
        if re.search(r"[<*]|NN", path):  # a pattern: ch07_benchmark_<device>.json, chNN_*.py
            folder, _, pattern = path.rpartition("/")
            regex = re.sub(r"<\w+>", r"\\w+", re.escape(pattern).replace(r"\*", ".*"))
            regex = regex.replace("NN", r"\d\d").replace("slug", r"\w+")
            assert (
                any(re.fullmatch(regex, p.name) for p in (ROOT / folder).iterdir())
                or "gpu" in pattern
            ), path
        else:
            assert (ROOT / path).exists(), path


def test_named_modules_and_commands_exist():
    text = README + CONTRIBUTING
    modules = set(re.findall(r"python -m (attncourse[\w.]*)", text)) | set(
        re.findall(r"`(attncourse\.[\w.]+)`", text)
    )
    assert "attncourse.benchmarks" in modules
    for module in modules:  # a module, or a name in one: attncourse.efficient.tiled_attention
        parent, _, name = module.rpartition(".")
        if _find(module) is None:
            assert _find(parent) is not None and hasattr(importlib.import_module(parent), name), (
                module
            )


def _find(module: str):
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:  # the parent is a module, not a package
        return None


def test_benchmark_options_named_exist():
    from attncourse.benchmarks.__main__ import build_parser

    section = CONTRIBUTING.split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    before_lookup = section.split("Chapter 9's comparison", 1)[0]
    options = set(re.findall(r"`(--[a-z-]+)", before_lookup))
    known = {flag for action in build_parser()._actions for flag in action.option_strings}
    assert {"--cache", "--contexts", "--constants", "--span-time", "--output"} <= options
    assert options <= known, options - known


def test_layout_names_every_tool_and_part_of_the_package():
    layout = _layout()
    for name in TOOLS:
        assert name in layout, name
    packages = sorted(p.parent.name for p in (ROOT / "attncourse").glob("*/__init__.py"))
    for name in packages + ["results"]:
        assert f"{name}/" in layout, name
    for path in sorted((ROOT / "attncourse").glob("*.py")):
        if path.name != "__init__.py":
            assert path.name in layout, path.name
    # the project's own files: not the environment's (.venv), git's or the build's
    own = {
        path.name
        for top in ROOT.iterdir()
        if top.is_dir() and not top.name.startswith(".") and top.name != "_build"
        for path in top.rglob("*.py")
    } | {path.name for path in ROOT.glob("*.py")}
    for name in re.findall(r"([\w]+\.py)", layout):
        assert name in own, name


def test_api_page_counts_the_scaffolding_right():
    """book/api.md names every sub-package of the course's scaffolding (tests/test_layout.py's
    list) and counts them right; it said "three" while there were four (issue 32)."""
    from test_layout import SCAFFOLDING

    text = " ".join((ROOT / "book" / "api.md").read_text().split())
    sentence = text.split("scaffolding lives in ", 1)[1].split(". ", 1)[0]
    count = sentence.split()[0]
    numbers = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    named = set(re.findall(r"`(attncourse\.\w+)`", sentence))
    assert named == set(SCAFFOLDING), named ^ set(SCAFFOLDING)
    assert count == numbers[len(SCAFFOLDING) - 1], sentence


def test_contributing_opens_with_the_three_checklists():
    """A newcomer's paths come first (issue 32): add a chapter, an exercise, a kernel, each as
    numbered steps, before the first section of conventions."""
    first_section = CONTRIBUTING.index("\n## ")
    titles = re.findall(r"^### (Add [^(\n]+?) \(", CONTRIBUTING[:first_section], flags=re.M)
    assert titles == ["Add a chapter", "Add an exercise to a chapter", "Add a kernel"], titles
    for part in CONTRIBUTING[:first_section].split("\n### ")[1:]:
        steps = re.findall(r"^(\d+)\. ", part, flags=re.M)
        assert steps == [str(n) for n in range(1, len(steps) + 1)] and len(steps) >= 5, steps


def test_every_decision_record_is_listed_and_complete():
    folder = ROOT / "docs" / "decisions"
    index = (folder / "README.md").read_text()
    records = sorted(p for p in folder.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert records
    for record in records:
        assert f"]({record.name})" in index, record.name
        text = record.read_text()
        for part in ("**Context.**", "**Decision.**", "**Consequences.**", "**The reason"):
            assert part in text, (record.name, part)
        assert f"docs/decisions/{record.name}" in CONTRIBUTING, record.name
