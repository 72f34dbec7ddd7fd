"""Repository-wide checks: the repository URL is written once (pyproject.toml) and everything else
agrees with it; every figure of the book is described; every chapter states its objectives and ends
with a summary."""

import json
import re
import tomllib

import pytest
import yaml
from project_tools import ROOT, colab, normalize

URL, BRANCH = normalize.repository()
SITE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]


def test_canonical_url():
    assert (
        URL == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    )
    assert URL.startswith("https://github.com/") and BRANCH == "main"


def test_book_config_agrees():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == URL
    assert config["repository"]["branch"] == BRANCH
    # cache: tools/execute_book.py fills the emptied cache afresh before every build (Makefile)
    assert (
        config["execute"]["execute_notebooks"] == "cache"
        and config["execute"]["raise_on_error"] is True
    )
    recipe = (ROOT / "Makefile").read_text()
    assert "rm -rf _build/html _build/zh _build/.jupyter_cache _build/executed" in recipe
    assert recipe.index("tools/execute_book.py") < recipe.index("jupyter-book build . ")


def test_book_excludes_only_what_exists():
    """Every folder or file the book build excludes by name exists (or is a build output): the
    exclude of a removed top-level ``benchmarks`` folder stayed behind for a while (issue 32)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    outputs = {"_build", ".venv"}  # made by make book itself
    for pattern in config["exclude_patterns"]:
        if not re.search(r"[*?\[]", pattern) and pattern not in outputs:
            assert (ROOT / pattern).exists(), pattern


def test_readme_agrees():
    readme = (ROOT / "README.md").read_text()
    assert f"git+{URL}" in readme
    owner_repo = URL.removeprefix("https://github.com/")
    for path in normalize.notebooks():  # every chapter has its Colab link, to its Colab edition
        assert (
            f"colab.research.google.com/github/{owner_repo}/blob/{BRANCH}/notebooks/{path.name}"
            in readme
        ), path.name
        assert (ROOT / "notebooks" / path.name).is_file(), path.name
    # none to book/
    for link in re.findall(r"colab\.research\.google\.com/github/(\S+?\.ipynb)", readme):
        assert link.startswith(f"{owner_repo}/blob/{BRANCH}/notebooks/"), link


def test_site_url_is_written_once_and_everything_agrees():
    """The published book is the GitHub Pages site of the repository; the rest derives from pyproject.toml."""
    owner, repo = URL.removeprefix("https://github.com/").split("/")
    assert SITE == f"https://{owner}.github.io/{repo}/"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["html"]["baseurl"] == SITE
    assert colab.site_url() == SITE
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:5])  # the README's first lines
    assert SITE in head and "(notebooks/)" in head
    for name in (
        "README.md",
        "CONTRIBUTING.md",
        "_config.yml",
        ".github/workflows/book.yml",
        "book/intro.md",
    ):
        text = (ROOT / name).read_text()
        for url in re.findall(r"https://[\w.-]+\.github\.io/[\w./-]*", text):
            assert url.startswith(SITE.rstrip("/")), (name, url)


def test_exercise_index_opens_the_colab_edition():
    text = (ROOT / "book" / "exercises.md").read_text()
    links = re.findall(r"https://colab\.research\.google\.com/github/([^)\s]+)", text)
    assert links
    for link in links:
        assert link.startswith(
            f"{URL.removeprefix('https://github.com/')}/blob/{BRANCH}/notebooks/"
        ), link
        assert (ROOT / link.split(f"/blob/{BRANCH}/", 1)[1]).is_file(), link


def test_every_notebook_is_normalised():
    """Kernelspec python3, no outputs, and the Colab set-up cell derived from pyproject.toml first."""
    assert normalize.notebooks(), "no notebooks found"
    assert normalize.stale() == []
    for path in normalize.notebooks():
        nb = json.loads(path.read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "python3"
        first = nb["cells"][0]
        assert (
            first["source"] == normalize.setup_source() and f"git+{URL}@{BRANCH}" in first["source"]
        )


def test_every_notebook_is_in_the_table_of_contents():
    toc = (ROOT / "_toc.yml").read_text()
    for path in normalize.notebooks():
        assert f"file: book/{path.stem}" in toc, path.name


def test_requirements_pin_exact_versions_and_pyproject_only_lower_bounds():
    lines = [
        line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
    ]
    pins = [line for line in lines if line]
    for line in pins:
        assert line == "-e ." or "==" in line, line
    assert "torch==2.13.0" in pins
    assert any(
        line.startswith("triton==3.7.1 ;") and "sys_platform == 'linux'" in line for line in pins
    )
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert deps and all(">=" in d and "==" not in d for d in deps)


def _run_setup_cell(package_present: bool) -> list:
    """Execute the set-up cell with find_spec, subprocess.run and invalidate_caches replaced.

    Returns the calls it made, in order: ``("run", command, options)`` and ``("invalidate_caches",)``.
    """
    import importlib
    import importlib.util
    import subprocess

    calls = []
    real_find_spec, real_run, real_invalidate = (
        importlib.util.find_spec,
        subprocess.run,
        importlib.invalidate_caches,
    )
    importlib.util.find_spec = lambda name, *a: (
        real_find_spec(name, *a) if package_present else None
    )
    subprocess.run = lambda cmd, **kw: calls.append(("run", cmd, kw))
    importlib.invalidate_caches = lambda: calls.append(("invalidate_caches",))
    try:
        exec(normalize.setup_source(), {})
    finally:
        importlib.util.find_spec, subprocess.run, importlib.invalidate_caches = (
            real_find_spec,
            real_run,
            real_invalidate,
        )
    return calls


def test_setup_cell_installs_from_the_repository_only_when_the_package_is_missing(monkeypatch):
    monkeypatch.delenv(normalize.INSTALL_URL_VARIABLE, raising=False)
    assert _run_setup_cell(package_present=True) == []
    (_, command, options), invalidate = _run_setup_cell(package_present=False)
    assert command[1:] == ["-m", "pip", "install", "--quiet", f"attncourse @ git+{URL}@{BRANCH}"]
    assert options == {"check": True}
    # after pip, so the next cell's import finds the package
    assert invalidate == ("invalidate_caches",)


def test_setup_cell_honours_the_install_url_override(monkeypatch):
    monkeypatch.setenv(normalize.INSTALL_URL_VARIABLE, "file:///home/me/attncourse")
    assert _run_setup_cell(package_present=True) == []
    (_, command, options), _ = _run_setup_cell(package_present=False)
    assert command[1:] == [
        "-m",
        "pip",
        "install",
        "--quiet",
        "attncourse @ file:///home/me/attncourse",
    ]
    assert not any("github.com" in part for part in command)


def test_install_url_override_is_documented():
    for name in ("README.md", "CONTRIBUTING.md"):
        assert normalize.INSTALL_URL_VARIABLE in (ROOT / name).read_text(), name


# --- Figures: every plotting cell has a caption, a name and alt text (myst-nb cell metadata) ---

# Calls that draw: the package's heat maps and schematics, matplotlib through ``plt``, an Axes' ``.plot(`` and
# anything else that makes a figure (``subplots``, ``imshow``, a ``plot`` helper of a module).
PLOTTING_CALL = re.compile(
    r"\b(plot_attention|plot_heads|heatmap|draw_\w+|plot_transformer_blocks)\s*\(|\bplt\.\w+\s*\(|\.(plot|imshow|bar|hist|scatter|subplots)\s*\(|\bfigure\s*\("
)
# Calls that make a new figure; ``heatmap``, ``plot_attention`` and the ``draw_*``
# schematics make one only without ``ax=``.
NEW_FIGURE_CALL = re.compile(
    r"\b(plt\.subplots|plt\.figure|plot_heads|benchmark\.plot|plot_attention|heatmap|draw_\w+|plot_transformer_blocks)\s*\("
)
FIGURE_NAME = re.compile(r"fig-[a-z0-9]+(-[a-z0-9]+)+")


def _code_lines(source: str) -> str:
    """The source without comment lines and import lines (``import matplotlib.pyplot as plt`` draws nothing)."""
    keep = [
        line
        for line in source.splitlines()
        if not re.match(r"\s*(#|import |from \S+ import )", line)
    ]
    return "\n".join(keep)


def draws_a_figure(source: str) -> bool:
    return bool(PLOTTING_CALL.search(_code_lines(source)))


def _arguments(source: str, open_paren: int) -> str:
    """The text between the parenthesis at ``open_paren`` and the one that closes it."""
    depth = 0
    for i in range(open_paren, len(source)):
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        if depth == 0:
            return source[open_paren + 1 : i]
    return source[open_paren + 1 :]


def new_figures(source: str) -> int:
    """How many calls in the source make a figure of their own (a call in a loop counts once)."""
    code = _code_lines(source)
    count = 0
    for call in NEW_FIGURE_CALL.finditer(code):
        if (
            call.group(1) in ("plot_attention", "heatmap") or call.group(1).startswith("draw_")
        ) and re.search(r"\bax\s*=", _arguments(code, call.end() - 1)):
            continue  # draws into an existing figure
        count += 1
    return count


def figure_problems(nb: dict) -> list[str]:
    """What is missing in the figure metadata of one notebook (empty when every figure is described)."""
    problems = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        meta = cell.get("metadata", {}).get("mystnb", {})
        figure, image = meta.get("figure", {}), meta.get("image", {})
        where = f"cell {index} ({cell.get('id')})"
        if not draws_a_figure(source):
            if figure or image:
                problems.append(f"{where}: figure metadata on a cell that draws nothing")
            continue
        caption, name, alt = figure.get("caption", ""), figure.get("name", ""), image.get("alt", "")
        if len(caption.split()) < 8:
            problems.append(f"{where}: no caption (mystnb.figure.caption) of a sentence or more")
        if not FIGURE_NAME.fullmatch(name):
            problems.append(
                f"{where}: no figure name fig-<chapter>-<slug> (mystnb.figure.name), got {name!r}"
            )
        if len(alt.split()) < 12 or alt == caption:
            problems.append(f"{where}: no alt text (mystnb.image.alt) describing the picture")
        if new_figures(source) > 1:
            problems.append(
                f"{where}: draws more than one figure; split the cell so each figure has its"
                " caption"
            )
    return problems


def test_every_figure_has_a_caption_a_name_and_alt_text():
    names = []
    for path in normalize.notebooks():
        nb = json.loads(path.read_text())
        assert figure_problems(nb) == [], path.name
        names += [
            c["metadata"]["mystnb"]["figure"]["name"]
            for c in nb["cells"]
            if "mystnb" in c.get("metadata", {})
        ]
    assert len(names) == len(set(names)), "figure names must be unique across the book"
    assert len(names) >= 7, "every chapter shows at least one figure"


def test_figure_check_catches_a_stripped_notebook():
    """The check above can fail: remove the metadata of chapter 1 (or draw twice in a cell) and it complains."""
    nb = json.loads((ROOT / "book" / "01_dot_product_attention.ipynb").read_text())
    figures = [
        c for c in nb["cells"] if c["cell_type"] == "code" and draws_a_figure("".join(c["source"]))
    ]
    assert len(figures) >= 2
    stripped = json.loads(json.dumps(nb))
    for cell in stripped["cells"]:
        cell.get("metadata", {}).pop("mystnb", None)
    # caption, name and alt of every figure
    assert len(figure_problems(stripped)) == 3 * len(figures)
    no_alt = json.loads(json.dumps(nb))
    next(c for c in no_alt["cells"] if "mystnb" in c["metadata"])["metadata"]["mystnb"].pop("image")
    assert len(figure_problems(no_alt)) == 1
    twice = json.loads(json.dumps(nb))
    twice["cells"][nb["cells"].index(figures[0])]["source"] += (
        "\nplot_attention(weights_he, ['he'], tokens)"
    )
    assert any("more than one figure" in p for p in figure_problems(twice))
    assert (
        new_figures(
            "fig, axes = plt.subplots(1, 2)\nheatmap(m, ax=axes[0], title=f'{b}')\nheatmap(m,"
            " ax=axes[1])"
        )
        == 1
    )
    assert not draws_a_figure(
        "import matplotlib.pyplot as plt\nfrom attncourse.plotting import plot_heads"
    )
    assert (
        draws_a_figure("ax.plot(x, y)")
        and draws_a_figure("plot_heads(w)")
        and draws_a_figure("plt.show()")
    )


# --- Learning objectives open every chapter, a Summary closes it ---

OBJECTIVES = re.compile(r"^:::\{admonition\} Learning objectives\n(?P<body>.*?)^:::$", re.S | re.M)


def chapter_structure_problems(nb: dict) -> list[str]:
    markdown = [c for c in nb["cells"] if c["cell_type"] == "markdown"]
    problems = []
    if not markdown:
        return ["no markdown cell"]
    first = "".join(markdown[0]["source"])
    match = OBJECTIVES.search(first)
    if not first.startswith("# ") or match is None:
        problems.append("the title cell has no ':::{admonition} Learning objectives' box")
    else:
        body = match.group("body")
        bullets = re.findall(r"^[*-] ", body, re.M)
        if "After this chapter you can" not in body or not 3 <= len(bullets) <= 5:
            problems.append(
                "the objectives box needs 'After this chapter you can' and 3 to 5 bullets, has"
                f" {len(bullets)}"
            )
        if re.search(r"^##+ ", first[: match.start()], re.M):
            problems.append("the objectives box must come before the first section")
    last = nb["cells"][-1]
    last_source = "".join(last["source"])
    headings = [
        line
        for c in markdown
        for line in "".join(c["source"]).splitlines()
        if re.match(r"#{1,2} ", line)
    ]
    if last["cell_type"] != "markdown" or not last_source.startswith("## Summary\n"):
        problems.append("the last cell is not a '## Summary' section")
    elif headings[-1] != "## Summary" or headings.count("## Summary") != 1:
        problems.append("'## Summary' must be the last section, and the only one")
    elif len(re.findall(r"^[*-] ", last_source, re.M)) < 3:
        problems.append("the summary needs at least three bullets")
    numbered = [
        line
        for c in markdown
        for line in "".join(c["source"]).splitlines()
        if re.match(r"#+ \d+\.", line)
    ]
    if numbered:
        problems.append(f"hand-numbered headings (Sphinx numbers sections): {numbered}")
    return problems


def test_every_chapter_opens_with_objectives_and_closes_with_a_summary():
    for path in normalize.notebooks():
        assert chapter_structure_problems(json.loads(path.read_text())) == [], path.name


def test_chapter_structure_check_can_fail():
    nb = json.loads((ROOT / "book" / "09_all_attention.ipynb").read_text())
    assert chapter_structure_problems(nb) == []
    no_box = json.loads(json.dumps(nb))
    no_box["cells"][1]["source"] = OBJECTIVES.sub("", no_box["cells"][1]["source"])
    assert any("Learning objectives" in p for p in chapter_structure_problems(no_box))
    no_summary = json.loads(json.dumps(nb))
    no_summary["cells"].pop()
    assert any("Summary" in p for p in chapter_structure_problems(no_summary))
    summary_not_last = json.loads(json.dumps(nb))
    summary_not_last["cells"][-1]["source"] += "\n\n## Afterword\n\nMore text."
    assert any("last section" in p for p in chapter_structure_problems(summary_not_last))
    numbered = json.loads(json.dumps(nb))
    section = next(
        c
        for c in numbered["cells"]
        if c["cell_type"] == "markdown" and c["source"].startswith("## ")
    )
    section["source"] = section["source"].replace("## ", "## 1. ", 1)
    assert any("hand-numbered" in p for p in chapter_structure_problems(numbered))


# --- The Pythons supported: stated once (requires-python), said the same everywhere ---


def _python_floor() -> tuple:
    """The oldest Python supported, from ``requires-python`` (``>=3.11``), the one statement."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=\s*3\.(\d+)", spec.strip())
    assert match, f"requires-python is {spec!r}: a floor (>=3.N) is what the texts below state"
    return 3, int(match.group(1))


#: Other ways of stating the Pythons supported ("Python 3.11 or 3.12", "3.11 and up", "3.11+").
OTHER_STATEMENTS = re.compile(
    r"Python (?:3\.\d+ (?:or|to) 3\.\d+\b|3\.\d+ and up|3\.\d+\+)|\b3\.\d+ or 3\.\d+\b"
)


def _agree(name: str, text: str) -> None:
    said = "Python {}.{} or newer".format(*_python_floor())
    assert said in text, f"{name} does not say {said!r}"
    for claim in re.findall(r"Python 3\.\d+ or newer", text):
        assert claim == said, (name, claim)
    assert not OTHER_STATEMENTS.findall(text), (name, OTHER_STATEMENTS.findall(text))


def test_the_supported_pythons_are_stated_once_and_agree():
    major, minor = _python_floor()
    floor = f"{major}.{minor}"
    for name in ("README.md", "CONTRIBUTING.md"):
        _agree(name, (ROOT / name).read_text())
    makefile = (ROOT / "Makefile").read_text()
    assert f"sys.version_info >= ({major}, {minor})" in makefile
    assert f"needs {floor} or newer" in makefile and not re.search(r"3\.\d+ or 3\.\d+", makefile)
    header = (ROOT / "requirements.txt").read_text().split("\n", 1)[0]
    assert f"Python {floor}+" in header, header  # tools/lock_requirements.py writes it
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff.get("target-version", f"py{major}{minor}") == f"py{major}{minor}"


def test_the_python_check_can_fail():
    """The statements the texts made before there was one (issue 30) are caught."""
    before = {
        "README.md": "On a fresh machine with Python 3.11 or 3.12 and `make`",
        "CONTRIBUTING.md": "one file for Linux, macOS and Windows, Python 3.11 and up.",
    }
    for name, sentence in before.items():
        with pytest.raises(AssertionError):
            _agree(name, (ROOT / name).read_text() + "\n" + sentence)
