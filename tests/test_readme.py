"""The README follows the tree: its links resolve, its chapter table links every chapter's page on
the site and its Colab edition, and the files, modules and command options it names exist."""

import importlib
import importlib.util
import re

from project_tools import ROOT, colab

README = (ROOT / "README.md").read_text()
TOOLS = sorted(p.name for p in (ROOT / "tools").glob("*.py"))


def _layout() -> str:
    return README.split("## Layout", 1)[1].split("```", 2)[1]


def test_relative_links_resolve():
    links = re.findall(r"\]\((?!https?://|#|mailto:)([^)\s]+)\)", README)
    assert links
    for link in links:
        assert (ROOT / link.split("#")[0]).exists(), link


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


def test_named_paths_exist():
    named = set(
        re.findall(r"`((?:attncourse|tools|tests|book|notebooks|reports)/[\w./-]*)`", README)
    )
    assert named
    for path in named:
        if "<" in path or "*" in path:  # a pattern: ch07_benchmark_<device>.json, ..._cpu*.json
            folder, _, pattern = path.rpartition("/")
            regex = (
                re.escape(pattern)
                .replace("<device>", r"\w+")
                .replace(r"\*", ".*")
                .replace("<gpu>", r"\w+")
            )
            assert (
                any(re.fullmatch(regex, p.name) for p in (ROOT / folder).iterdir())
                or "gpu" in pattern
            ), path
        else:
            assert (ROOT / path).exists(), path


def test_named_modules_and_commands_exist():
    modules = set(re.findall(r"python -m (attncourse[\w.]*)", README)) | set(
        re.findall(r"`(attncourse\.[\w.]+)`", README)
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

    section = README.split("## Benchmark", 1)[1].split("\n## ", 1)[0]
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
    for name in re.findall(r"([\w]+\.py)", layout):
        assert list(ROOT.glob(f"**/{name}")), name
