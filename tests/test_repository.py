"""The repository URL is written once (pyproject.toml); everything else agrees with it."""
import importlib.util
import json
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("normalize_notebooks", ROOT / "tools" / "normalize_notebooks.py")
normalize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(normalize)

URL, BRANCH = normalize.repository()


def test_canonical_url():
    assert URL == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert URL.startswith("https://github.com/") and BRANCH == "main"


def test_book_config_agrees():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == URL
    assert config["repository"]["branch"] == BRANCH
    assert config["execute"]["execute_notebooks"] == "force" and config["execute"]["raise_on_error"] is True


def test_readme_agrees():
    readme = (ROOT / "README.md").read_text()
    assert f"git+{URL}" in readme
    owner_repo = URL.removeprefix("https://github.com/")
    for path in normalize.notebooks():  # every chapter has its Colab link
        assert f"colab.research.google.com/github/{owner_repo}/blob/{BRANCH}/book/{path.name}" in readme, path.name


def test_every_notebook_is_normalised():
    """Kernelspec python3, no outputs, and the Colab set-up cell derived from pyproject.toml first."""
    assert normalize.notebooks(), "no notebooks found"
    assert normalize.stale() == []
    for path in normalize.notebooks():
        nb = json.loads(path.read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "python3"
        first = nb["cells"][0]
        assert first["source"] == normalize.setup_source() and f"git+{URL}@{BRANCH}" in first["source"]


def test_every_notebook_is_in_the_table_of_contents():
    toc = (ROOT / "_toc.yml").read_text()
    for path in normalize.notebooks():
        assert f"file: book/{path.stem}" in toc, path.name


def test_requirements_pin_exact_versions_and_pyproject_only_lower_bounds():
    pins = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]
    for line in pins:
        assert line == "-e ." or "==" in line, line
    assert "torch==2.13.0" in pins
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
    real_find_spec, real_run, real_invalidate = importlib.util.find_spec, subprocess.run, importlib.invalidate_caches
    importlib.util.find_spec = lambda name, *a: (real_find_spec(name, *a) if package_present else None)
    subprocess.run = lambda cmd, **kw: calls.append(("run", cmd, kw))
    importlib.invalidate_caches = lambda: calls.append(("invalidate_caches",))
    try:
        exec(normalize.setup_source(), {})
    finally:
        importlib.util.find_spec, subprocess.run, importlib.invalidate_caches = real_find_spec, real_run, real_invalidate
    return calls


def test_setup_cell_installs_from_the_repository_only_when_the_package_is_missing(monkeypatch):
    monkeypatch.delenv(normalize.INSTALL_URL_VARIABLE, raising=False)
    assert _run_setup_cell(package_present=True) == []
    (_, command, options), invalidate = _run_setup_cell(package_present=False)
    assert command[1:] == ["-m", "pip", "install", "--quiet", f"attncourse @ git+{URL}@{BRANCH}"]
    assert options == {"check": True}
    assert invalidate == ("invalidate_caches",)  # after pip, so the next cell's import finds the package


def test_setup_cell_honours_the_install_url_override(monkeypatch):
    monkeypatch.setenv(normalize.INSTALL_URL_VARIABLE, "file:///home/me/attncourse")
    assert _run_setup_cell(package_present=True) == []
    (_, command, options), _ = _run_setup_cell(package_present=False)
    assert command[1:] == ["-m", "pip", "install", "--quiet", "attncourse @ file:///home/me/attncourse"]
    assert not any("github.com" in part for part in command)


def test_install_url_override_is_documented():
    for name in ("README.md", "CONTRIBUTING.md"):
        assert normalize.INSTALL_URL_VARIABLE in (ROOT / name).read_text(), name
