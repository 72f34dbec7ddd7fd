"""Every notebook of the Colab edition starts in a fresh Colab-like runtime: its first cell
installs the package where it is missing and leaves it alone where a chapter before installed it.

The notebooks run are those a Colab user opens: ``notebooks/<name>.ipynb``, generated from
``book/`` by ``tools/colab_edition.py`` (``tests/test_colab_edition.py`` keeps them in step
with the book and proves their code cells are the book's, byte for byte).

A new virtual environment gets only what a Colab runtime already has that matters here
(torch, numpy, matplotlib, ipykernel and triton, at the versions pinned in requirements.txt) and
nothing else: no attncourse, no tqdm, no pytest. Notebooks then run in kernels of that
environment, each started in an empty working directory (like Colab's /content, so nothing of
the checkout is reachable by a relative path). The set-up cell installs attncourse with pip,
from this checkout instead of the repository URL through its one override
(``ATTNCOURSE_INSTALL_URL``). It is the same text in every chapter (asserted below), so two runs
of it prove it for all of them: once in a runtime without attncourse, where it installs it, and
once in a new kernel of the runtime that has it, where it must leave the runtime as it is (a
reader opening a second chapter in the same runtime).

One chapter (``FULL_CHAPTER``) runs every cell in the runtime without attncourse: its set-up cell
installs the package, the rest of the chapter runs on the installed copy. Then one new kernel
runs every other chapter's set-up cell and imports (the first code cell after the set-up), in the
order of the book: the first set-up cell finds the package installed, and the imports load every
module of the package the chapters use from the installed copy. The rest of their cells are the
book's byte for byte (tests/test_colab_edition.py) and run once, in the book build:
in CI chapter 10 executes twice more (here and in tests/test_gpu_check.py), every other chapter
once, and every reader path stays tested:
the set-up cell from nothing and with the package installed, one chapter end to end, every
chapter's imports, the installed package's files (every file of the package directory, package
data included).

This proves the set-up cell, the package's dependency bounds (pip must not touch the
runtime's torch, numpy or matplotlib) and that the built package holds everything the
notebooks need (package data, subpackages). It takes about a minute and a half: building the
environment, the full chapter's running time plus its install, and a few seconds for the rest.

The test is skipped only when the environment cannot be built because no package index can
be reached; any other failure fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from packaging.requirements import Requirement
from project_tools import ROOT, colab, normalize

# What a Colab runtime already has that matters to the notebooks; versions from requirements.txt.
# Colab's torch ships triton
RUNTIME_PACKAGES = (
    "torch",
    "numpy",
    "matplotlib",
    "ipykernel",
    "triton",
)
# The Colab edition, in the order of _toc.yml (what the Colab buttons and the README open).
NOTEBOOKS = [colab.OUT / f"{Path(doc).name}.ipynb" for doc, _ in colab.chapters()]
# pip's words when it cannot reach a package index (then the test is skipped, not failed).
NO_INDEX = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution"
    r"|Name or service not known|Network is unreachable|Max retries exceeded|ConnectTimeoutError"
)
# Left out of the copy of the checkout that pip builds from: local, generated or ignored files.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "_build",
    "build",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".ipynb_checkpoints",
)
# The chapter run end to end in the fresh runtime: it reads package data (the compile matrix's
# results), imports the library, the course's scaffolding, the benchmarks and the plotting, and
# runs the kernels through the runtime's own triton (its interpreter: no GPU here). Chapter 6,
# the full chapter until 2026-11, took twice as long and added nothing the others' imports and
# the package's files below do not prove.
FULL_CHAPTER = "10_gpu_attention"
# Appended to each notebook and run last in its kernel: where every attncourse module came from.
PROBE = """\
import importlib.metadata, json, os, sys, sysconfig
import matplotlib
_dist = importlib.metadata.distribution("attncourse")
print(json.dumps({
    "executable": sys.executable,
    "cwd": os.getcwd(),
    "sys_path": sys.path,
    "purelib": sysconfig.get_paths()["purelib"],
    "backend": matplotlib.get_backend(),
    "modules": {name: getattr(module, "__file__", None) for name, module in sys.modules.items()
                if name == "attncourse" or name.startswith("attncourse.")},
    "direct_url": json.loads(_dist.read_text("direct_url.json") or "null"),
    "files": [str(path) for path in _dist.files],
}))
"""


def runtime_pins() -> dict[str, str]:
    """``{name: "name==version"}`` for the runtime packages, parsed from requirements.txt."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep and name.lower() in RUNTIME_PACKAGES:
            pins[name.lower()] = f"{name}=={version}"
    assert sorted(pins) == sorted(RUNTIME_PACKAGES), (
        f"requirements.txt must pin each of {RUNTIME_PACKAGES}"
    )
    return pins


def index_unreachable(pip_output: str) -> bool:
    """Whether pip failed because it could not connect to a package index (it retries, and says why)."""
    return NO_INDEX.search(pip_output) is not None


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def installed(python: Path, cwd: Path) -> dict[str, str]:
    """``{distribution name: version}`` of everything installed in the environment of ``python``.

    Run in an empty folder: from the checkout, Python would also list its ``attncourse.egg-info``.
    """
    code = (
        "import importlib.metadata, json; print(json.dumps({d.metadata['Name'].lower().replace('_',"
        " '-'): d.version for d in importlib.metadata.distributions()}))"
    )
    result = run([str(python), "-c", code], cwd=cwd, env=kernel_env(python, ""), check=True)
    return json.loads(result.stdout)


def can_import_attncourse(python: Path, cwd: Path) -> bool:
    return (
        run(
            [str(python), "-c", "import attncourse"], cwd=cwd, env=kernel_env(python, "")
        ).returncode
        == 0
    )


def kernel_env(python: Path, install_url: str) -> dict[str, str]:
    """The process environment minus whatever could point Python at the checkout or change its defaults."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONSTARTUP",
            "VIRTUAL_ENV",
            "MPLBACKEND",
            "JUPYTER_PATH",
            # Colab's Python writes bytecode: the first kernel caches what it compiles for the next
            "PYTHONDONTWRITEBYTECODE",
        }
    }
    path = [
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if entry and not entry.startswith(str(ROOT))
    ]
    env["PATH"] = os.pathsep.join([str(python.parent), *path])
    env[normalize.INSTALL_URL_VARIABLE] = install_url
    return env


def say(capsys, text: str) -> None:
    """Print to the terminal even though pytest captures output (the timings are the report)."""
    with capsys.disabled():
        print(text, flush=True)


@pytest.fixture(scope="module")
def runtime():
    """A fresh venv with only the runtime packages, a ``python3`` kernelspec running it, and a
    clean copy of the checkout.

    All in one temporary folder, removed afterwards (the venv takes more than 1 GB).
    """
    with tempfile.TemporaryDirectory(prefix="attncourse-colab-") as folder:
        yield build_runtime(Path(folder))


def build_runtime(base: Path) -> dict:
    # python3.11 where it is on the PATH; elsewhere (Windows, a python.org install on macOS) the
    # interpreter that runs the tests, outside its venv
    python3_11 = shutil.which("python3.11") or getattr(sys, "_base_executable", sys.executable)
    start = time.perf_counter()
    subprocess.run([python3_11, "-m", "venv", str(base / "venv")], check=True)
    python = base / "venv" / "bin" / "python"
    pins = runtime_pins()
    # The pip of the tests' environment installs them into the venv (--python): the same
    # distributions as the venv's own older pip would install, in less time, and its words when
    # no index answers are those test_only_an_unreachable_index_skips checks. --no-compile: no
    # byte-compiling of the thousands of modules of torch and triton that no notebook imports
    # (two thirds of the time); the kernels compile what they import, as Python always does.
    # The venv keeps its own pip (ensurepip's), which the set-up cell runs.
    result = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-compile",
            *pins.values(),
        ]
    )
    if result.returncode != 0:
        output = result.stdout + result.stderr
        if index_unreachable(output):
            pytest.skip(
                "no package index reachable, cannot build the Colab-like"
                f" environment:\n{output[-2000:]}"
            )
        pytest.fail(f"pip could not install {list(pins.values())}:\n{output[-4000:]}")
    seconds = time.perf_counter() - start

    # pip builds a local project in its source tree (build/, *.egg-info) and may reuse a stale
    # build/lib; a fresh copy of the working tree keeps the checkout clean and the wheel exact.
    source = base / "checkout"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    kernels = base / "kernels"
    (kernels / "python3").mkdir(parents=True)
    (kernels / "python3" / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (Colab-like runtime)",
                "language": "python",
            }
        )
    )
    return {
        "base": base,
        "python": python,
        "source": source,
        "kernels": kernels,
        "pins": pins,
        "seconds": seconds,
    }


def test_runtime_holds_only_the_runtime_packages(runtime, capsys):
    python, pins = runtime["python"], runtime["pins"]
    empty = runtime["base"] / "empty"
    empty.mkdir(exist_ok=True)
    packages = installed(python, empty)
    for name, pin in pins.items():  # "torch==2.13.0" admits the local version 2.13.0+cpu
        assert name in packages and Requirement(pin).specifier.contains(packages[name]), (
            pin,
            packages.get(name),
        )
    for absent in ("attncourse", "tqdm", "pytest", "nbval", "jupyter-book"):
        assert absent not in packages, absent
    assert not can_import_attncourse(python, empty)
    say(
        capsys,
        f"\nColab-like venv built in {runtime['seconds']:.0f} s: {', '.join(pins.values())} "
        f"and their dependencies, {len(packages)} distributions",
    )


def test_only_an_unreachable_index_skips(tmp_path):
    """pip's real output: no connection to an index skips the test; a version no index has fails it."""

    def pip_download(index_url: str) -> str:
        result = run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--isolated",
                "--no-deps",
                "--retries",
                "1",
                "--timeout",
                "5",
                "--index-url",
                index_url,
                "--dest",
                str(tmp_path / "out"),
                "tqdm==4.70.1",
            ]
        )
        assert result.returncode != 0
        return result.stdout + result.stderr

    assert index_unreachable(pip_download("http://127.0.0.1:9/simple"))  # nothing listens on port 9
    (tmp_path / "simple").mkdir()
    # reachable, but empty
    assert not index_unreachable(pip_download((tmp_path / "simple").as_uri()))


def setup_cell(nb) -> int:
    """The index of a chapter's set-up cell: its first code cell (under the chapter's title and
    first paragraph, tests/test_colab_edition.py)."""
    return next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")


def imports_cell(nb) -> int:
    """The index of a chapter's imports: the first code cell after the set-up cell."""
    setup = setup_cell(nb)
    return next(i for i, cell in enumerate(nb.cells) if i > setup and cell.cell_type == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_every_chapter_starts_with_the_set_up_cell_then_its_imports(path):
    """One text in every chapter: so its two runs below prove every chapter's set-up cell. It is
    the first code cell, a Colab form: its title line, then the book's set-up cell."""
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[setup_cell(nb)]
    title, _, code = first.source.partition("\n")
    assert title.startswith("#@title ") and first.metadata.get("cellView") == "form"
    assert code == normalize.setup_source()
    assert normalize.INSTALL_URL_VARIABLE in first.source
    imports = nb.cells[imports_cell(nb)].source
    assert "import attncourse" in imports or "from attncourse" in imports


def run_in_the_runtime(
    runtime, name: str, cells: list[tuple[str, object]], metadata: dict, capsys
) -> None:
    """Run ``cells`` (``(chapter, cell)`` pairs) in one new kernel of the runtime (``metadata``:
    a chapter's), started in an empty working directory, then check where every attncourse
    module came from and what the set-up cell did to the runtime.

    The first run here starts without attncourse (its set-up cell must install it); every later
    one finds it installed (its set-up cell must install nothing).
    """
    python, source = runtime["python"], runtime["source"]
    install_url = source.as_uri()
    # an empty working directory, like Colab's /content
    content = runtime["base"] / ("content-" + re.sub(r"\W+", "-", name))
    content.mkdir()
    fresh = "installed_by" not in runtime  # the first notebook run here installs the package
    if fresh:
        subprocess.run(
            [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", "attncourse"], check=True
        )
        assert not can_import_attncourse(python, content)
    before = installed(python, content)

    nb = nbformat.v4.new_notebook(metadata=metadata)
    chapters = [chapter for chapter, _ in cells] + ["probe"]
    nb.cells = [cell for _, cell in cells] + [nbformat.v4.new_code_cell(PROBE)]
    # The kernel talks over Unix sockets (ipc), not TCP ports: jupyter_client chooses a TCP port
    # free and the kernel binds it a moment later, and another process of the test run (otter's
    # log server, another kernel) may take it in between; this kernel would then die unstarted.
    # The sockets' path is absolute (the kernel runs in its own working directory) and outside
    # that directory.
    kernel_manager = AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[str(runtime["kernels"])], ensure_native_kernel=False
        ),
        transport="ipc",
        ip=str(runtime["base"] / ("ipc-" + content.name)),
    )
    client = NotebookClient(
        nb, km=kernel_manager, timeout=600, resources={"metadata": {"path": str(content)}}
    )
    seconds = []
    # cleanup_kc: shut the kernel down afterwards although the client was handed its manager.
    with client.setup_kernel(env=kernel_env(python, install_url), cleanup_kc=True):
        for index, cell in enumerate(nb.cells):
            start = time.perf_counter()
            try:
                client.execute_cell(cell, index)  # raises CellExecutionError when a cell fails
            except Exception as error:
                raise AssertionError(f"{chapters[index]}, cell {index} of this kernel") from error
            if cell.cell_type == "code":  # the set-up cell's time first
                seconds.append(time.perf_counter() - start)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code_cells)
    errors = [
        output for cell in code_cells for output in cell.outputs if output.output_type == "error"
    ]
    assert errors == []

    probe = json.loads(
        "".join(output.text for output in nb.cells[-1].outputs if output.output_type == "stream")
    )
    venv = runtime["base"] / "venv"
    # The kernel ran the fresh runtime's Python in the empty folder, with nothing of the checkout on its path.
    assert Path(probe["executable"]).parent == python.parent
    assert Path(probe["cwd"]).resolve() == content.resolve()
    assert not any(
        entry and Path(entry).resolve().is_relative_to(ROOT) for entry in probe["sys_path"]
    )
    assert "inline" in probe["backend"]  # figures inline, as in Colab
    # Every attncourse module the notebook used comes from the fresh runtime's site-packages.
    purelib = Path(probe["purelib"])
    assert purelib.resolve().is_relative_to(venv.resolve())
    assert "attncourse" in probe["modules"] and "attncourse.exercises" in probe["modules"]
    for module, file in probe["modules"].items():
        assert file and Path(file).resolve().is_relative_to(purelib.resolve()), (module, file)
    # ... installed by the first cell, as a regular (not editable) install from the override's URL.
    assert probe["direct_url"]["url"] == install_url
    assert not probe["direct_url"].get("dir_info", {}).get("editable", False)
    # The installed package holds every file of the package directory, its data and subpackages included.
    shipped = {
        file
        for file in probe["files"]
        if file.startswith("attncourse/") and "__pycache__" not in file
    }
    expected = {
        file.relative_to(source).as_posix()
        for file in (source / "attncourse").rglob("*")
        if file.is_file() and "__pycache__" not in file.parts
    }
    assert shipped == expected
    assert any(
        file.startswith("attncourse/results/") and file.endswith(".json") for file in shipped
    )

    # The pip resolver's view of the dependency bounds: it adds packages, never changes the runtime's.
    after = installed(python, content)
    changed = {
        package: (version, after.get(package))
        for package, version in before.items()
        if after.get(package) != version
    }
    assert changed == {}, f"the set-up cell changed packages of the runtime: {changed}"
    added = sorted(set(after) - set(before))
    if fresh:
        assert "attncourse" in added
        runtime["installed_by"] = name
    else:  # found installed: the set-up cell installs nothing
        assert added == [], f"the set-up cell installed {added} over {runtime['installed_by']}'s"

    say(
        capsys,
        f"\n{name}: {sum(seconds):.0f} s in all, first set-up cell {seconds[0]:.1f} s, "
        f"{len(code_cells) - 1} code cells; the set-up cell installed "
        + (
            ", ".join(f"{package} {after[package]}" for package in added)
            or "nothing (already installed)"
        ),
    )
    return nb


# The full chapter's test comes first: its set-up cell installs the package from nothing.
def test_the_full_chapter_installs_the_package_and_runs_in_a_fresh_colab_like_runtime(
    runtime, capsys
):
    path = colab.OUT / f"{FULL_CHAPTER}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cells = [(FULL_CHAPTER, cell) for cell in nb.cells]
    ran = run_in_the_runtime(runtime, FULL_CHAPTER, cells, nb.metadata, capsys)
    # The GPU reports are committed with the repository, not the package: the reader is told
    # where the book shows them (not that none exists).
    (reports,) = [cell for cell in ran.cells if cell.get("id") == "gpu-measured-reports"]
    printed = "".join(out.get("text", "") for out in reports.outputs)
    assert "not the repository's reports/gpu folder" in printed, printed
    assert "/book/10_gpu_attention.html#gpu-measured (中文版: " in printed, printed


def test_the_other_chapters_set_up_cells_and_imports_run_in_a_new_kernel_of_that_runtime(
    runtime, capsys
):
    """A reader opening a second chapter: its set-up cell, first in a new kernel, finds the package
    (the full chapter's set-up cell installed it) and installs nothing; each chapter's imports then
    load the modules it uses from the installed copy."""
    cells = []
    for path in (path for path in NOTEBOOKS if path.stem != FULL_CHAPTER):  # in the book's order
        nb = nbformat.read(path, as_version=4)
        cells += [(path.stem, nb.cells[setup_cell(nb)]), (path.stem, nb.cells[imports_cell(nb)])]
    run_in_the_runtime(runtime, "the other chapters", cells, nb.metadata, capsys)


def test_the_full_chapter_is_a_chapter_of_the_colab_edition():
    assert FULL_CHAPTER in [path.stem for path in NOTEBOOKS]
