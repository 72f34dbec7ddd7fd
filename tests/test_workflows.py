"""The GitHub Actions workflows, checked here because no GitHub runner can be reached from a test.

``zizmor`` (pinned in requirements.txt, run offline) lints every workflow for the mistakes
that break or endanger a workflow: unpinned actions, excessive permissions, credentials left
in the checkout, template injection. The book's workflow is also checked for what it must
do: build and test as the README says on every push to main, every week and by hand, and
deploy ``_build/html`` with GitHub's own Pages actions and the permissions they need.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from project_tools import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BOOK = ROOT / ".github" / "workflows" / "book.yml"


def zizmor(*paths: Path) -> subprocess.CompletedProcess:
    executable = shutil.which("zizmor", path=str(Path(sys.executable).parent)) or shutil.which(
        "zizmor"
    )
    assert executable, "zizmor is missing: it is pinned in requirements.txt"
    return subprocess.run(
        [executable, "--offline", "--no-progress", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_workflows_pass_zizmor():
    assert WORKFLOWS, "no workflow under .github/workflows"
    result = zizmor(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_catches_a_dangerous_workflow(tmp_path):
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: [push, pull_request_target]\n"
        "permissions: write-all\n"
        "jobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    result = zizmor(bad)
    assert result.returncode != 0
    for audit in ("template-injection", "unpinned-uses", "artipacked", "dangerous-triggers"):
        assert audit in result.stdout, audit


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def uses(job: dict) -> list[str]:
    return [step["uses"].split("@")[0] for step in steps(job) if "uses" in step]


def book_workflow_problems(workflow: dict) -> list[str]:
    """What the book's workflow fails to do (empty when it builds, tests and deploys as it must)."""
    problems = []

    def need(condition, what):
        if not condition:
            problems.append(what)

    triggers = workflow.get("on") or {}
    need((triggers.get("push") or {}).get("branches") == ["main"], "runs on every push to main")
    cron = ((triggers.get("schedule") or [{}])[0]).get("cron", "")
    need(re.fullmatch(r"\d+ \d+ \* \* [0-6]", cron), "runs weekly (a cron on one weekday)")
    need("workflow_dispatch" in triggers, "can be run by hand")
    need(workflow.get("permissions") == {"contents": "read"}, "reads only, by default")
    need(
        (workflow.get("concurrency") or {}).get("cancel-in-progress") is False,
        "one deployment at a time, never cut off",
    )
    jobs = workflow.get("jobs", {})
    build, deploy = jobs.get("build", {}), jobs.get("deploy", {})
    need(re.match(r"python:3\.11\b", str(build.get("container", ""))), "builds with Python 3.11")
    need(
        "bash .ci/run" in [step.get("run", "") for step in steps(build)],
        "installs, builds and tests with .ci/run",
    )
    need(
        uses(build) == ["actions/checkout", "actions/upload-pages-artifact"],
        "checks out and uploads the Pages artifact",
    )
    upload = [step for step in steps(build) if "upload-pages-artifact" in step.get("uses", "")]
    need(upload and upload[0].get("with", {}).get("path") == "_build/html", "uploads _build/html")
    need(deploy.get("needs") == "build", "deploys after the build")
    need(
        deploy.get("permissions") == {"pages": "write", "id-token": "write"},
        "deploys with pages and id-token write",
    )
    need(
        (deploy.get("environment") or {}).get("name") == "github-pages",
        "deploys to the github-pages environment",
    )
    need(
        uses(deploy) == ["actions/configure-pages", "actions/deploy-pages"],
        "deploys with the official Pages actions",
    )
    need("refs/heads/main" in str(deploy.get("if", "")), "deploys only from main")
    for job in (build, deploy):
        for step in steps(job):
            if "uses" in step:
                need(
                    re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]),
                    f"pins {step['uses']} to a commit",
                )
    return problems


def test_book_workflow_builds_tests_and_deploys():
    assert book_workflow_problems(load(BOOK)) == []
    # .ci/run is the README's install and its two commands; make book builds with -W.
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make book" in ci and "make test" in ci and "rm -rf .venv _build" in ci
    # ruff (lint and format check) runs before the book, on the same fresh environment
    assert ci.index("make lint") < ci.index("make book")
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), flags=re.M)
    assert lint and "ruff check ." in lint.group(1) and "ruff format --check ." in lint.group(1)
    assert re.search(r"^ruff==", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert re.search(r"jupyter-book build \. -W", (ROOT / "Makefile").read_text())
    readme = (ROOT / "README.md").read_text()
    assert "make book" in readme and "make test" in readme and "requirements.txt" in readme


def test_shape_check_can_fail(tmp_path):
    text = (
        BOOK.read_text()
        .replace("id-token: write", "id-token: none")
        .replace("bash .ci/run", "make book")
        .replace("branches: [main]", "branches: [dev]")
        .replace("actions/deploy-pages@", "someone/deploy@")
    )
    broken = tmp_path / "book.yml"
    broken.write_text(text)
    problems = book_workflow_problems(load(broken))
    for expected in ("pages and id-token", ".ci/run", "push to main", "official Pages actions"):
        assert any(expected in p for p in problems), expected


def test_install_matrix_and_weekly_loaded_run():
    """macOS and Windows, Python 3.11 and 3.12, run the README's install and the fast tests; the
    loaded run of every notebook runs weekly (and by hand), not on every push."""
    jobs = load(BOOK)["jobs"]
    install, loaded = jobs["install"], jobs["loaded"]
    matrix = install["strategy"]["matrix"]
    assert sorted(matrix["os"]) == ["macos-latest", "windows-latest"] and matrix["python"] == [
        "3.11",
        "3.12",
    ]
    assert install["runs-on"] == "${{ matrix.os }}"
    assert [step.get("run") for step in steps(install)][-1] == "make test-fast"
    assert (
        "test-fast:" in (ROOT / "Makefile").read_text()
        and '-m "not slow"' in (ROOT / "Makefile").read_text()
    )
    assert "schedule" in loaded["if"] and "push" not in loaded["if"]
    assert [step.get("run") for step in steps(loaded)][-1] == "make book-loaded"
    assert "book-loaded" not in (ROOT / ".ci" / "run").read_text()
    for job in (install, loaded):
        for step in steps(job):
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]


def test_weekly_full_mutation_run():
    """Every mutant of the package weekly and by hand (make mutation-package, our tool: decision
    0007), not on every push, where .ci/run takes the sample."""
    mutation = load(BOOK)["jobs"]["mutation"]
    assert "schedule" in mutation["if"] and "push" not in mutation["if"]
    assert [step.get("run") for step in steps(mutation)][-1] == "make mutation-package"
    assert mutation["timeout-minutes"] <= 60
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^mutation-package:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert (
        recipe and "tools/mutate_package.py" in recipe.group(1) and "--min-rate" in recipe.group(1)
    )
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make mutation-package-sample" in ci
    assert not re.search(r"make mutation-package(?!-sample)", ci)
    for step in steps(mutation):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
