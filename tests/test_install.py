"""The README's install resolves on every platform the book supports, checked from here.

``uv pip compile --python-platform P --python-version V requirements.txt`` resolves the install
for a platform against the package registry alone: ``--no-config`` and an environment without
``UV_*`` variables keep this machine's settings out (its pip finds a CPU-only torch on disk that
the registry does not have). For each of Linux x86-64 and aarch64, macOS arm64 (14+) and Windows
x86-64, on Python 3.11 and 3.12, the test checks that it resolves, that torch is the pinned
version, and that triton comes only on Linux, at exactly the version the pinned torch requires.
It also checks that the lock leaves a CPU-only torch alone (no CUDA library is pinned), and that
``attncourse[gpu]`` accepts the triton of each recent torch release, so that installing it
never fights the triton a runtime's torch brought (Colab's included).

Every test here skips, saying why, when the registry cannot be reached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from project_tools import ROOT

REGISTRY = "https://pypi.org/simple/"
# uv's names for the platforms of the README: {our name: uv's --python-platform}.
PLATFORMS = {
    "linux-x86_64": "x86_64-manylinux_2_28",
    "linux-aarch64": "aarch64-manylinux_2_28",
    "macos-arm64": "aarch64-apple-darwin",
    "windows-x86_64": "x86_64-pc-windows-msvc",
}
PYTHONS = ("3.11", "3.12")
# Recent torch releases, the oldest first: attncourse[gpu] must accept the triton each requires.
# (triton >= 3.0 is what the kernels need: tl.dot's input_precision; torch 2.4 is the first
# release that brings a triton 3.)
TORCH_RELEASES = (
    "2.4.1",
    "2.5.1",
    "2.6.0",
    "2.7.1",
    "2.8.0",
    "2.9.1",
    "2.10.0",
    "2.11.0",
    "2.12.1",
    "2.13.0",
    "2.14.1",
    "2.15.0",
)
# What uv says when it cannot reach an index (then the test skips instead of failing).
NO_REGISTRY = re.compile(
    r"Failed to fetch|error sending request|dns error|Connection refused|timed out"
    r"|Network is unreachable|failed to lookup address"
)


# The environment markers of each platform, to read the lock as pip does there.
MARKERS = {
    "linux-x86_64": dict(
        sys_platform="linux", platform_system="Linux", platform_machine="x86_64", os_name="posix"
    ),
    "linux-aarch64": dict(
        sys_platform="linux", platform_system="Linux", platform_machine="aarch64", os_name="posix"
    ),
    "macos-arm64": dict(
        sys_platform="darwin", platform_system="Darwin", platform_machine="arm64", os_name="posix"
    ),
    "windows-x86_64": dict(
        sys_platform="win32", platform_system="Windows", platform_machine="AMD64", os_name="nt"
    ),
}


def locked(platform: str = "linux-x86_64", python: str = "3.11") -> dict[str, str]:
    """``{name: version}``: the exact pins of requirements.txt whose marker holds on a platform.

    uv reads ``--python-version 3.11`` as 3.11.0, and so does this function.
    """
    environment = {
        **MARKERS[platform],
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            if requirement.marker is None or requirement.marker.evaluate(environment):
                name = canonicalize_name(requirement.name)
                assert name not in pins, f"{name} pinned twice for {platform}, Python {python}"
                pins[name] = specifier.version
    return pins


def torch_pin() -> str:
    return locked()["torch"]


@pytest.fixture(scope="module")
def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert found, "uv is missing: it is pinned in requirements.txt"
    try:
        urllib.request.urlopen(urllib.request.Request(REGISTRY, method="HEAD"), timeout=20).close()
    except (urllib.error.URLError, OSError) as error:
        pytest.skip(f"the package registry ({REGISTRY}) cannot be reached from here: {error}")
    return found


def resolve(
    uv: str, platform: str, python: str, requirements: str | Path, *options: str
) -> dict[str, str]:
    """``{name: version}``: the resolution of ``requirements`` (a file, or lines) for a platform."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("UV_") or key == "UV_CACHE_DIR"
    }
    if platform.endswith("apple-darwin"):
        env["MACOSX_DEPLOYMENT_TARGET"] = "14.0"  # torch 2.13's macOS wheels are macosx_14_0_arm64
    source = str(requirements) if isinstance(requirements, Path) else "-"
    command = [
        uv,
        "pip",
        "compile",
        "--no-config",
        "--no-header",
        "--no-annotate",
        "--python-platform",
        platform,
        "--python-version",
        python,
        "--python",
        sys.executable,
        "--index-url",
        REGISTRY,
        *options,
        source,
    ]
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        input=None if isinstance(requirements, Path) else requirements,
    )
    if result.returncode != 0 and NO_REGISTRY.search(result.stderr):
        pytest.skip(
            "the package registry could not be reached while resolving: "
            + result.stderr.strip()[-300:]
        )
    assert result.returncode == 0, (
        f"no resolution for {platform}, Python {python}:\n{result.stderr}"
    )
    versions = {}
    for line in result.stdout.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "-")):
            name, _, version = line.partition("==")
            versions[canonicalize_name(name)] = version.split(";")[0].strip()
    return versions


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_readme_install_resolves(uv, platform, python):
    target = PLATFORMS[platform]
    lock = locked(platform, python)
    install = resolve(uv, target, python, ROOT / "requirements.txt")
    assert install["torch"] == torch_pin() == "2.13.0"
    torch_alone = resolve(uv, target, python, f"torch=={torch_pin()}\n")
    if platform.startswith("linux"):
        # the triton the pinned torch requires, and the lock pins the same one
        assert "triton" in torch_alone, f"torch {torch_pin()} on {platform} no longer brings triton"
        assert install["triton"] == torch_alone["triton"] == lock["triton"], (
            install["triton"],
            torch_alone,
        )
    else:
        assert "triton" not in install, f"triton resolved on {platform}, which it has no wheels for"
    # every exact pin of the lock that applies here is what the resolution took
    assert "triton" in lock if platform.startswith("linux") else "triton" not in lock
    for name, version in install.items():
        if name in lock:
            assert lock[name] == version, (
                f"{name}: locked {lock[name]}, resolved {version} on {platform}"
            )
    missing = sorted(set(lock) - set(install))
    assert not missing, f"pinned for {platform} but not installed there: {missing}"


def _stub_cpu_torch(folder: Path, version: str) -> Path:
    """A wheel that stands for a CPU-only torch build (``+cpu``): torch's metadata without CUDA."""
    name = f"torch-{version}+cpu"
    path = folder / f"torch-{version}+cpu-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        info = f"{name}.dist-info"
        wheel.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: torch\nVersion: {version}+cpu\n"
            "Requires-Dist: filelock\nRequires-Dist: sympy>=1.13.3\n",
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_a_cpu_only_torch_brings_no_cuda_library(uv, tmp_path):
    """Where a CPU build of the pinned torch is found (a CPU index, a wheel on disk), the lock
    installs it and no nvidia-*/cuda-* package: those are torch's CUDA build's own requirements,
    which the lock leaves to it. triton still comes on Linux, for chapter 10's interpreter."""
    _stub_cpu_torch(tmp_path, torch_pin())
    install = resolve(
        uv,
        PLATFORMS["linux-x86_64"],
        "3.11",
        ROOT / "requirements.txt",
        "--find-links",
        str(tmp_path),
    )
    assert install["torch"] == f"{torch_pin()}+cpu"
    cuda = sorted(name for name in install if name.startswith(("nvidia-", "cuda-")))
    assert cuda == [], f"a CPU torch would still download {cuda}"
    assert install["triton"] == locked()["triton"]
    # ... whereas the registry's torch is the CUDA build, which brings them
    assert any(
        name.startswith("nvidia-")
        for name in resolve(uv, PLATFORMS["linux-x86_64"], "3.11", "torch==2.13.0\n")
    )


def gpu_extra() -> Requirement:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (triton,) = [
        Requirement(r) for r in extras["gpu"] if canonicalize_name(Requirement(r).name) == "triton"
    ]
    return triton


@pytest.mark.parametrize("torch_version", TORCH_RELEASES)
def test_the_gpu_extra_accepts_the_triton_of_each_recent_torch(uv, torch_version):
    triton = resolve(uv, PLATFORMS["linux-x86_64"], "3.11", f"torch=={torch_version}\n").get(
        "triton"
    )
    assert triton, f"torch {torch_version} brings no triton on Linux"
    assert gpu_extra().specifier.contains(triton, prereleases=True), (
        f"attncourse[gpu] asks for {gpu_extra()}, torch {torch_version} requires triton=={triton}"
    )


def test_the_gpu_extra_has_no_ceiling_and_the_floor_the_kernels_need():
    specifier = gpu_extra().specifier
    assert not any(s.operator in ("<", "<=", "==", "~=", "===") for s in specifier), specifier
    # tl.dot(input_precision=...)
    assert not specifier.contains("2.3.1") and specifier.contains("3.0.0")
    assert Version(locked()["triton"]) in specifier
