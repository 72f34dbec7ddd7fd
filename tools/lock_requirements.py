"""Write requirements.txt, the lock of the book's environment, from requirements.in (``make lock``).

One universal resolution (``uv pip compile --universal``) for every platform the README names:
exact versions, each with the environment marker under which it installs (``triton`` only on
Linux, ``colorama`` only on Windows, ...). Left out: the CUDA libraries (``nvidia-*``,
``cuda-*``) that the pinned torch's Linux wheel requires at versions of its own choosing. Pinned
here, pip would download them (gigabytes) even where a CPU-only build of the same torch is
installed; left out, pip takes exactly the ones the torch it installs asks for. CONTRIBUTING.md
says more. uv's own configuration files are ignored (``--no-config``): the lock is the
registry's, whatever this machine's settings.

    python tools/lock_requirements.py            # rewrite requirements.txt
    python tools/lock_requirements.py --upgrade  # also move the unpinned to newer releases

It then writes requirements-instructor.txt, the lock of the instructor extra (otter-grader, for
``make assignments``), from requirements-instructor.in, constrained by requirements.txt: the
extra adds packages and moves none of the readers' install.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The oldest Python the lock must serve; a universal lock covers every newer one too.
PYTHON_VERSION = "3.11"
# Packages that torch's CUDA build requires and that the lock leaves to torch.
LEFT_TO_TORCH = re.compile(r"^(nvidia-[\w.-]+|cuda-[\w.-]+)==", re.MULTILINE)
INSTRUCTOR_HEADER = """\
# The lock of the instructor extra (otter-grader): installed on top of requirements.txt, whose
# versions it keeps. Generated from requirements-instructor.in by `make lock`; do not edit by hand.
"""
HEADER = """\
# The lock of the book's environment: exact versions for Linux, macOS and Windows, Python 3.11+.
# Generated from requirements.in by `make lock` (tools/lock_requirements.py); do not edit by hand.
# torch's CUDA libraries (nvidia-*, cuda-*) are left to torch (CONTRIBUTING.md says why).
"""


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        sys.exit("uv is needed: it is pinned in requirements.in")
    return found


def compile_lock(output: Path, exclude: list[str], upgrade: bool) -> None:
    command = [
        uv(),
        "pip",
        "compile",
        "--no-config",
        "--universal",
        "--python-version",
        PYTHON_VERSION,
        "--no-header",
        "--quiet",
        "requirements.in",
        "-o",
        str(output),
    ]
    command += [arg for name in exclude for arg in ("--no-emit-package", name)]
    if upgrade:
        command.append("--upgrade")
    subprocess.run(command, cwd=ROOT, check=True)


def compile_instructor_lock(upgrade: bool) -> None:
    """requirements-instructor.txt from requirements-instructor.in, the book's lock as
    constraints (its editable ``-e .`` left out: uv takes no editable constraint)."""
    target = ROOT / "requirements-instructor.txt"
    with tempfile.TemporaryDirectory() as folder:
        constraints = Path(folder) / "constraints.txt"
        locked = (ROOT / "requirements.txt").read_text().splitlines()
        constraints.write_text("\n".join(line for line in locked if not line.startswith("-e")))
        source = (ROOT / "requirements-instructor.in").read_text()
        draft_in = Path(folder) / "requirements-instructor.in"
        draft_in.write_text(source.replace("-c requirements.txt", f"-c {constraints}"))
        draft = Path(folder) / "requirements-instructor.txt"
        if target.exists():
            shutil.copy(target, draft)
        command = [uv(), "pip", "compile", "--no-config", "--universal", "--python-version",
                   PYTHON_VERSION, "--no-header", "--quiet", str(draft_in), "-o", str(draft)]  # fmt: skip
        subprocess.run(command + (["--upgrade"] if upgrade else []), cwd=ROOT, check=True)
        text = draft.read_text().replace(str(draft_in), "requirements-instructor.in")
        text = text.replace(str(constraints), "requirements.txt")
        target.write_text(INSTRUCTOR_HEADER + text)
    print(f"wrote {target.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--upgrade", action="store_true", help="let unpinned packages move to newer releases"
    )
    args = parser.parse_args(argv)
    target = ROOT / "requirements.txt"
    with tempfile.TemporaryDirectory() as folder:
        draft = Path(folder) / "requirements.txt"
        if target.exists():
            # uv keeps the versions already locked unless told to upgrade
            shutil.copy(target, draft)
        compile_lock(draft, [], args.upgrade)
        exclude = sorted(set(LEFT_TO_TORCH.findall(draft.read_text())))
        compile_lock(draft, exclude, args.upgrade)
        target.write_text(HEADER + draft.read_text())
    print(f"wrote {target.relative_to(ROOT)}; left to torch: {', '.join(exclude) or 'nothing'}")
    compile_instructor_lock(args.upgrade)


if __name__ == "__main__":
    main()
