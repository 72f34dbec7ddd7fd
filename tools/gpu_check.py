"""`make gpu-check`: check and time the course on a real CUDA GPU, in one command (issue 29).

Measured on an H200: 139 s and 121 s for the full run (2026-11-27; from the two runs' progress
logs: phase 1 58-69 s, its slowest process a warm-up or the sweep; timings 46-59 s; masks
13-18 s). The estimates below,
made before any run, are the upper ends; the report's ``wall_s`` and each section's
``seconds`` are the real figures:

* start-up (torch, triton, CUDA, nvidia-smi): 5-15 s, before the budget's clock starts;
* phase 1, processes side by side, each killed at 210 s (70 s with ``--quick``); it lasts as
  long as its slowest process: kernel tests 60-150 s, sweep 60-120 s, chapter 10 40-90 s,
  memcheck 30-120 s (torch starting under compute-sanitizer is most of it), the compile
  warm-up 100-180 s (FlexAttention's cold Inductor compiles are most of that);
* phase 2, alone on the GPU: timings 60-120 s (48 configurations, 4 or 5 implementations
  each, about 30 s of it GPU time; FlexAttention's 8 compiles 3-10 s each from warm caches,
  20-60 s each from cold ones), span 2-5 s, design 10-30 s.

Full run: about 4.5 to 6 minutes, at most start-up + the budget (390 s) + the one measurement
under way when it ends, about 7 minutes. ``--quick``: about 1.5 minutes, at most about 2.

When the budget runs short, what is left out first: FlexAttention (each of its configurations
needs 120 s left, for its compile), then the timing configurations still to come (each needs
60 s left, 25 s with ``--quick``, kept for span and design; the targets' configurations, L =
4096 float16, come first, so bfloat16 at L = 16384 is the first to go), then adaptive span
(10 s), then the design comparisons (3 s). Phase 1's processes are killed at its limit
(``timed out`` in the report, a failed correctness check). Every one is listed under
``skipped`` with its reason.

GPU memory: no L x L buffer anywhere (torch's math backend is never timed, FlexAttention only
compiled, at L = 4096): a timed configuration (B * L = 16384 tokens, H * d = 1024) needs a few
hundred MiB; the sweep's offset case 4 GiB (skipped with its reason below 6 GiB free); phase
1's processes a CUDA context each, about 18 at once.

Run with the GPU machine's own Python and its own torch and triton (nothing is installed or
downloaded), from the repository root: ``PYTHONPATH=. python3 tools/gpu_check.py [--quick]``.
Without a CUDA GPU it refuses in one sentence and exits with status 2. The report goes to
reports/gpu, or to ``--out DIR`` (on a borrowed machine whose results come back from one
folder: ``make gpu-check GPU_CHECK_ARGS="--out $OUT"``); its first and last lines say where.

It runs in two phases, printing timestamped progress as it goes:

1. Correctness, as separate processes side by side (a crash or a hung kernel cannot take the
   rest down, and their compiles share the machine's cores): the kernel tests on CUDA
   (``tests``); a sweep of cases against float64 references (``sweep``); chapter 10 executed
   cell by cell (``chapter``); one small case per kernel under ``compute-sanitizer``
   (``memcheck``). Beside them, helper processes compile the kernels the timings will launch,
   so that Triton's and Inductor's caches on disk are warm when phase 2 starts.
2. Timings in this process, alone on the GPU: the course's kernels against torch's SDPA
   backends and FlexAttention (``timings``), adaptive span's speed-up (``span``), and the two
   launch-configuration questions (``design``).

After each section, and in phase 2 after each configuration, it rewrites
``reports/gpu/<gpu>.json`` and ``<gpu>.md`` (the Markdown by
:mod:`attncourse.benchmarks.gpu_report`), so a run killed at its time limit still leaves what
it measured; a measurement that raises is recorded (with its traceback) and the others go on.
A rerun never replaces a complete report before it completes itself: it writes
``<gpu>-partial.json`` and ``.md`` meanwhile, and renames them when it completes. SIGTERM or
Ctrl-C kills phase 1's processes (in their own sessions, the signal does not reach them) and
saves the report, ``interrupted``. A time budget (``--budget-s``) skips the remaining optional measurements, saying
so in the report, rather than overrun. The exit status is 1 when a correctness check failed
or could not finish, 0 otherwise: timings never fail the run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import linecache
import math
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the package of this checkout, whatever is installed

try:
    import torch
except ImportError:  # the machine's own Python is the one to use: never install anything here
    sys.exit(
        f"gpu_check needs torch with CUDA in the Python that runs it ({sys.executable} has no"
        " torch): make gpu-check GPU_PYTHON=/path/to/python"
    )
import torch.nn.functional as F  # noqa: E402

from attncourse.adaptive_span import adaptive_span_attention  # noqa: E402
from attncourse.attention import scaled_dot_product_attention  # noqa: E402
from attncourse.benchmarks import gpu_report  # noqa: E402
from attncourse.benchmarks.measure import (  # noqa: E402
    attention_flops,
    autograd_pass,
    cuda_peak_memory,
)
from attncourse.kernels import config as launch  # noqa: E402
from attncourse.kernels import sdpa, tiles  # noqa: E402
from attncourse.masks import causal_mask, padding_mask  # noqa: E402

TOOL = Path(__file__).resolve()
NOTEBOOK = ROOT / "book" / "10_gpu_attention.ipynb"
REPORTS = ROOT / "reports" / "gpu"

CORRECTNESS = ("sweep", "tests", "chapter", "memcheck")
TIMING = ("timings", "span", "design", "masks")
SECTIONS = CORRECTNESS + TIMING

MEMCHECK_CASES = ("softmax_rows", "forward", "backward", "span")
SDPA_IMPLS = ("flash", "efficient", "cudnn")  # torch's fused backends, each timed alone
FLOPS_CONVENTION = (
    "TFLOP/s = attncourse.benchmarks.measure.attention_flops(B, H, L, L, d, causal) / median"
    " time; forward+backward counts 3.5 times the forward's FLOPs (the FlashAttention papers'"
    " convention: the backward does 2.5 times the forward's matrix products)"
)
RAMP = 32.0  # adaptive span's ramp, as in chapter 8 and attncourse.benchmarks.kernels
SPAN_HEAD_DIM = 64

# The sweep's tolerances: |got - ref| <= atol * max(1, max |ref|) + rtol * |ref|, elementwise.
TOLERANCES = {
    "float32": {"output": (1e-5, 1e-5), "gradients": (1e-4, 1e-4)},
    "float16": {"output": (2e-3, 2e-3), "gradients": (1e-2, 1e-2)},
    "bfloat16": {"output": (2e-2, 2e-2), "gradients": (5e-2, 5e-2)},
}
TOLERANCE_RULE = (
    "a result passes when it is finite and |got - ref| <= atol * max(1, max |ref|) + rtol * |ref|"
    " elementwise, ref computed in float64 by attncourse.attention.scaled_dot_product_attention"
    " (attncourse.adaptive_span.adaptive_span_attention for span) from the same rounded inputs"
)

_STARTED = time.monotonic()


def log(message: str) -> None:
    """Print one progress line with the time since the start and the UTC clock, at once."""
    clock = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    print(f"[{time.monotonic() - _STARTED:6.1f} s, {clock} UTC] {message}", flush=True)


def first_line(error: BaseException) -> str:
    """``Type: the first line of the message`` of an exception."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip()


# -- what to run: the plan, the budget --------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The sizes of one run (``--quick`` or full), chosen so the full run ends within 7 minutes
    on one H100 and the quick one within 2 (see the README of reports/gpu)."""

    quick: bool
    budget_s: float  # the whole run
    phase1_s: float  # the correctness processes, side by side
    sweep_shards: int
    warm_shards: int
    test_workers: int
    test_files: Tuple[str, ...]
    test_filter: Optional[str]
    lengths: Tuple[int, ...]
    head_dims: Tuple[int, ...]
    dtypes: Tuple[str, ...]
    tokens: int  # B * L of every timed configuration
    width: int  # H * d of every timed configuration
    repeats: int
    warmup: int
    flex_lengths: Tuple[int, ...]  # FlexAttention is timed (and compiled) at these L only
    target_length: int  # the targets' L (float16, every d of head_dims)
    span_length: int
    spans: Tuple[float, float]  # (short, full)
    cost_spans: Tuple[float, ...]  # where adaptive span's time goes: a line fitted over these
    design_head_dims: Tuple[int, ...]
    design_tiles: bool  # block_m and num_stages, beside the grid order
    notebook: Path = NOTEBOOK


FULL = Plan(
    quick=False,
    budget_s=390.0,
    phase1_s=210.0,
    sweep_shards=4,
    warm_shards=3,
    test_workers=6,
    test_files=(
        "tests/test_kernels.py",
        "tests/test_gpu_host_code.py",
        "tests/test_kernel_benchmark.py",
    ),
    test_filter=None,
    lengths=(4096, 1024, 16384),
    head_dims=(64, 128),
    dtypes=("float16", "bfloat16"),
    tokens=16384,
    width=1024,
    repeats=25,
    warmup=3,
    flex_lengths=(4096,),
    target_length=4096,
    span_length=4096,
    spans=(256.0, 4096.0),
    cost_spans=(64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0),
    design_head_dims=(64, 128),
    design_tiles=True,
)
QUICK = replace(
    FULL,
    quick=True,
    budget_s=105.0,
    phase1_s=70.0,
    warm_shards=2,
    test_files=("tests/test_kernels.py",),
    test_filter="cuda",
    lengths=(4096,),
    dtypes=("float16",),
    repeats=20,
    flex_lengths=(),
    cost_spans=(),
    design_head_dims=(64,),
    design_tiles=False,
)


def plan_for(quick: bool, budget_s: Optional[float] = None) -> Plan:
    """The plan of a full run, or of a ``--quick`` one; ``budget_s`` replaces its time budget."""
    plan = QUICK if quick else FULL
    return plan if budget_s is None else replace(plan, budget_s=float(budget_s))


class Budget:
    """The run's time budget: how much is left, and whether an optional step still fits."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def allows(self, reserve: float) -> bool:
        """Whether more than ``reserve`` seconds are left (kept for what comes after)."""
        return self.left() > reserve

    def reason(self) -> str:
        return f"time budget: {max(self.left(), 0):.0f} s left of {self.seconds:.0f} s"


# -- command line -------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/gpu_check.py",
        description="Check and time the course on a CUDA GPU (make gpu-check); writes"
        " reports/gpu/<gpu>.json and .md. Refuses to run without a CUDA GPU.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sweep and timings (about 2 minutes)"
    )
    parser.add_argument(
        "--out", type=Path, default=REPORTS, help="folder of the report (default reports/gpu)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        metavar="SECTION",
        help=f"run only these sections ({', '.join(SECTIONS)}); the report's name says which",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        help="time budget in seconds, after which optional measurements are skipped"
        " (default 390, --quick 105)",
    )
    parser.add_argument(
        "--memcheck-case",
        choices=MEMCHECK_CASES,
        metavar="NAME",
        help="run one small case of a kernel and exit (what compute-sanitizer runs):"
        f" {', '.join(MEMCHECK_CASES)}",
    )
    parser.add_argument(
        "--commit",
        metavar="SHA",
        help="the commit of this checkout, recorded in the report (a GPU machine given a copy"
        " of the tree has no git to ask)",
    )
    parser.add_argument(
        "--fingerprint",
        action="store_true",
        help="print this checkout's source fingerprints (what a report's 'source' records) and"
        " exit; needs no GPU",
    )
    internal = parser.add_argument_group("internal (the tool runs itself with these)")
    internal.add_argument("--sweep-shard", metavar="K/N", help="run every N-th sweep case from K")
    internal.add_argument("--warm-shard", metavar="K/N", help="compile every N-th timed kernel")
    internal.add_argument("--chapter", type=Path, metavar="NOTEBOOK", help="run its code cells")
    internal.add_argument("--result", type=Path, metavar="FILE", help="the JSON a worker writes")
    args = parser.parse_args(argv)
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error(f"--budget-s must be positive, got {args.budget_s:g}")
    for option in ("sweep_shard", "warm_shard"):
        value = getattr(args, option)
        if value is not None and not re.fullmatch(r"\d+/[1-9]\d*", value):
            parser.error(f"--{option.replace('_', '-')} must be K/N, got {value!r}")
    workers = (args.sweep_shard, args.warm_shard, args.chapter)
    if any(w is not None for w in workers) and args.result is None:
        parser.error("--sweep-shard, --warm-shard and --chapter need --result FILE")
    return args


def shard(value: str) -> Tuple[int, int]:
    """``"K/N"`` as ``(K, N)``."""
    k, n = value.split("/")
    return int(k), int(n)


def gpu_problem() -> Optional[str]:
    """Why this machine cannot run the check (one sentence), or ``None``."""
    if not torch.cuda.is_available():
        return (
            f"gpu_check needs a CUDA GPU, and torch {torch.__version__} sees none"
            " (torch.cuda.is_available() is False): run it on a machine with an NVIDIA GPU."
        )
    try:
        import triton  # noqa: F401
    except ImportError as error:
        return f"gpu_check needs triton to compile the course's kernels, and it cannot be imported ({error})."
    return None


def report_slug(gpu: str, quick: bool, only: Optional[Sequence[str]] = None) -> str:
    """The report's file name without suffix: the GPU model (``nvidia-h100-80gb-hbm3``), then
    ``-quick`` for a quick run and the sections of an ``--only`` run."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "unknown-gpu"
    if quick:
        slug += "-quick"
    if only:
        slug += "-only-" + "-".join(s for s in SECTIONS if s in only)
    return slug


# -- the machine ----------------------------------------------------------------------------------


def nvidia_smi() -> Optional[Dict[str, str]]:
    """The driver version, compute mode and GPU name that ``nvidia-smi`` reports, or ``None``
    without it. The compute mode matters here: phase 1 runs many CUDA processes at once, which
    a GPU in ``Exclusive_Process`` mode refuses (one context at a time)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=driver_version,compute_mode,name",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    if done.returncode != 0 or line.count(",") < 2:
        return None
    driver, mode, name = (part.strip() for part in line.split(",", 2))
    return {"driver": driver, "compute_mode": mode, "name": name}


def environment(device: str = "cuda") -> Dict[str, object]:
    """The GPU, its compute capability and memory, and the versions the figures belong to."""
    import triton

    major, minor = torch.cuda.get_device_capability(device)
    smi = nvidia_smi()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "gpu": torch.cuda.get_device_name(device),
        "gpu_count": torch.cuda.device_count(),
        "compute_capability": f"{major}.{minor}",
        "sm": f"sm_{major}{minor}",
        "memory_gib": round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1),
        "multiprocessors": torch.cuda.get_device_properties(device).multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn else "none",
        "driver": smi["driver"] if smi else "unknown",
        "driver_source": "nvidia-smi" if smi else "none: nvidia-smi is not on the PATH",
        "compute_mode": smi["compute_mode"] if smi else "unknown",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": os.cpu_count(),
        "tools": {
            name: shutil.which(name) for name in ("nvcc", "compute-sanitizer", "ncu", "nvidia-smi")
        },
    }


def source_fingerprint(root: Path = ROOT) -> Dict[str, str]:
    """SHA-256 digests (first 16 hex digits) of the code a report's figures belong to.

    ``kernels`` covers ``attncourse/kernels/**/*.py`` (what the timings launch), ``package``
    every ``attncourse/**/*.py``, ``tool`` this file. Each digest hashes the files' paths
    relative to ``root`` and their bytes, in sorted order, so it changes with any edit and
    not with where the checkout lies or how it was copied.
    """

    def digest(paths: Sequence[Path]) -> str:
        return gpu_report.source_digest(paths, root)

    package = root / "attncourse"
    return {
        "kernels": digest(list((package / "kernels").rglob("*.py"))),
        "package": digest(list(package.rglob("*.py"))),
        "tool": digest([root / "tools" / "gpu_check.py"]),
    }


def git_commit(root: Path = ROOT) -> Optional[str]:
    """The checkout's commit, or ``None`` where git or the repository is missing."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def source_record(commit: Optional[str] = None) -> Dict[str, Optional[str]]:
    """A report's ``source``: the commit (``commit``, else git's) and the code's fingerprints."""
    return {"commit": commit or git_commit(), **source_fingerprint()}


def capability_of(env: Dict[str, object]) -> Tuple[int, int]:
    major, minor = str(env["compute_capability"]).split(".")
    return int(major), int(minor)


# -- the report ---------------------------------------------------------------------------------


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_report(args: argparse.Namespace, plan: Plan, env: Dict[str, object]) -> Dict[str, object]:
    """The report before anything is measured: the machine, the command, every section pending."""
    selected = args.only or SECTIONS
    report: Dict[str, object] = {
        "schema_version": gpu_report.SCHEMA_VERSION,
        "tool": "tools/gpu_check.py",
        "command": shlex.join([sys.executable, *sys.argv]),
        "quick": plan.quick,
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "started_utc": utc_now(),
        "finished_utc": None,
        "wall_s": 0.0,
        "complete": False,
        "environment": env,
        "source": source_record(args.commit),
        "budget": {"budget_s": plan.budget_s, "phase1_s": plan.phase1_s},
        "sections": {name: {"status": "pending"} for name in SECTIONS if name in selected},
        "skipped": [],
        "targets": [],
    }
    for name in SECTIONS:
        if name not in selected:
            skip(report, f"section {name}", "not selected (--only)", section=name)
    return report


def skip(report: Dict[str, object], what: str, reason: str, *, section: Optional[str] = None):
    """Record that ``what`` was not measured, and why (and mark ``section`` skipped)."""
    report["skipped"].append({"what": what, "reason": reason})
    if section is not None:
        report["sections"][section] = {"status": "skipped", "reason": reason}
    log(f"skipped {what}: {reason}")


def json_safe(value: object) -> object:
    """``value`` with every NaN or infinity replaced by ``None`` (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a kill never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def save(report: Dict[str, object], folder: Path, slug: str) -> Path:
    """Evaluate the targets, then write ``<slug>.json`` and ``<slug>.md``; return the JSON's path.
    Never raises for the report's content: a verdict or summary that fails is written as its
    error (``save_errors``), so that the measurements reach the disk whatever happens."""
    report["wall_s"] = round(time.monotonic() - _STARTED, 1)
    errors = []
    for key, evaluate in (("correctness", correctness), ("targets", evaluate_targets)):
        try:
            report[key] = evaluate(report)
        except Exception as error:
            errors.append(f"{key}: {first_line(error)}")
    if errors:
        report["save_errors"] = errors
    safe = json_safe(report)
    path = folder / f"{slug}.json"
    text = json.dumps(safe, indent=1, allow_nan=False, default=repr)
    write_atomically(path, text + "\n")
    try:
        markdown = gpu_report.summary_markdown(safe) + "\n" + gpu_report.targets_markdown(safe)
    except Exception as error:
        markdown = (
            f"#### GPU check: {report['environment'].get('gpu')}\n\nThe summary could not be"
            f" written ({first_line(error)}): the measurements are in {path.name}.\n"
        )
    write_atomically(folder / f"{slug}.md", markdown)
    return path


def run_section(
    report: Dict[str, object], name: str, measure: Callable[[], Dict[str, object]], folder, slug
) -> None:
    """Run one section, store what it returns under ``report[name]``, record its status and
    time (a crash is recorded with its traceback, not raised), and save the report."""
    start = time.monotonic()
    log(f"section {name}: started")
    try:
        report[name] = measure()
        skipped = report["sections"].get(name, {}).get("status") == "skipped"  # by the section
        status = {"status": "skipped" if skipped else "done"}
    except Exception as error:  # a section's crash must not lose the others
        status = {
            "status": "crashed",
            "error": first_line(error),
            "traceback": traceback.format_exc()[-3000:],
        }
    status["seconds"] = round(time.monotonic() - start, 1)
    report["sections"][name] = {**report["sections"].get(name, {}), **status}
    log(f"section {name}: {status['status']} in {status['seconds']} s")
    save(report, folder, slug)


# -- correctness: the sweep -------------------------------------------------------------------

VARIANTS = ("plain", "causal", "lengths", "span")
DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class Case:
    """One sweep case: a variant of the launcher, a dtype, sizes and a memory layout."""

    variant: str  # plain, causal, lengths (padded keys) or span (adaptive span, causal)
    dtype: str
    head_dim: int
    length: int  # L
    keys: int  # S (= L for span)
    layout: str = "contiguous"  # contiguous, strided, strided-d or offset-2^31
    batch: int = 2
    heads: int = 2

    @property
    def name(self) -> str:
        return (
            f"{self.variant}-{self.dtype}-d{self.head_dim}-L{self.length}-S{self.keys}"
            f"-{self.layout}"
        )


def case(variant: str, dtype: str, head_dim: int, length=100, keys=77, layout="contiguous"):
    """A sweep case with the sizes its variant needs (span: L = S and three heads of different
    spans; lengths: three sequences, one of them empty; offset-2^31: one sequence of two heads)."""
    if variant == "span":
        keys = length
    batch, heads = (3 if variant == "lengths" else 2), (3 if variant == "span" else 2)
    if layout == "offset-2^31":
        batch = 1
    return Case(variant, dtype, head_dim, length, keys, layout, batch, heads)


def sweep_cases(quick: bool) -> List[Case]:
    """Every variant in every dtype at d = 64 (L = 100, S = 77: no multiple of any block), then
    (full run) d = 16, 32 and 128, L = 1 and S = 1, L > S (causal rows with no key), strided
    views and a key/value head that sits past 2^31 elements."""
    cases = [case(v, t, 64) for v in VARIANTS for t in DTYPES]
    edges = [
        case("causal", "float16", 64, length=1),
        case("plain", "bfloat16", 32, keys=1),
        case("causal", "float16", 64, layout="strided"),
        case("plain", "float16", 64, length=64, keys=128, layout="offset-2^31"),
    ]
    if quick:
        return cases + edges
    head_sizes = [case("causal", t, 128) for t in DTYPES]
    head_sizes += [case(v, "float16", 128) for v in ("plain", "lengths", "span")]
    head_sizes += [case("lengths", t, 16) for t in DTYPES] + [case("span", "float16", 16)]
    head_sizes += [case("span", t, 32) for t in DTYPES] + [case("causal", "float16", 32)]
    more_edges = [
        case("span", "float32", 16, length=1),
        case("lengths", "float16", 128, length=1, keys=1),
        case("causal", "bfloat16", 64, length=100, keys=37),
        case("plain", "bfloat16", 128, layout="strided"),
        case("lengths", "float32", 32, layout="strided-d"),
        case("span", "float16", 64, layout="strided"),
    ]
    return cases + head_sizes + edges + more_edges


def _values(shape, seed: int) -> torch.Tensor:
    """Seeded standard normal values, drawn on the CPU (the same on every machine)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _laid_out(values: torch.Tensor, layout: str, dtype, device) -> torch.Tensor:
    """A ``(B, H, N, d)`` leaf holding ``values`` in ``layout``: contiguous; ``strided``, a view
    with the heads' and positions' axes swapped in memory (and the rows 2d apart); ``strided-d``,
    the head dimension not contiguous."""
    B, H, N, d = values.shape
    if layout == "strided":
        base = torch.zeros(B, N, H, 2 * d, dtype=dtype, device=device)
        view = base.transpose(1, 2)[..., :d]
    elif layout == "strided-d":
        view = torch.zeros(B, H, d, N, dtype=dtype, device=device).transpose(2, 3)
    else:
        view = torch.zeros(B, H, N, d, dtype=dtype, device=device)
    view.copy_(values)
    return view.detach().requires_grad_()


def offset_buffer_bytes(c: Case) -> int:
    """The bytes of the key/value buffer of an ``offset-2^31`` case."""
    return (
        _offset_heads(c) * c.keys * 2 * c.head_dim * torch.finfo(getattr(torch, c.dtype)).bits // 8
    )


def _offset_heads(c: Case) -> int:
    """Heads of the buffer: enough that its last head starts past 2^31 elements."""
    return 2**31 // (c.keys * 2 * c.head_dim) + 2


def _far_key_values(c: Case, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Key and value ``(1, 2, S, d)`` whose second head starts more than 2^31 elements after their
    first: heads 0 and n - 1 of one ``(1, n, S, 2, d)`` buffer filled with NaN elsewhere, so a
    wrongly computed (32-bit, wrapped) offset reads NaN."""
    dtype = getattr(torch, c.dtype)
    n = _offset_heads(c)
    buffer = torch.full((1, n, c.keys, 2, c.head_dim), float("nan"), dtype=dtype, device=device)
    pair = []
    for i in range(2):
        view = buffer[:, :: n - 1, :, i]
        assert view.stride(1) > 2**31
        view.copy_(_values((1, 2, c.keys, c.head_dim), seed=11 + i))
        pair.append(view.detach().requires_grad_())
    return pair[0], pair[1]


def case_inputs(c: Case, device) -> Dict[str, object]:
    """The leaves of a case (``q``, ``k``, ``v`` and ``span`` for span) and its ``lengths``."""
    dtype = getattr(torch, c.dtype)
    B, H, L, S, d = c.batch, c.heads, c.length, c.keys, c.head_dim
    q = _laid_out(
        _values((B, H, L, d), 1),
        "contiguous" if c.layout == "offset-2^31" else c.layout,
        dtype,
        device,
    )
    if c.layout == "offset-2^31":
        k, v = _far_key_values(c, device)
    else:
        k = _laid_out(_values((B, H, S, d), 2), c.layout, dtype, device)
        v = _laid_out(_values((B, H, S, d), 3), c.layout, dtype, device)
    inputs: Dict[str, object] = {"q": q, "k": k, "v": v, "lengths": None, "span": None}
    if c.variant == "lengths":
        inputs["lengths"] = torch.tensor([S, S // 3, 0][:B], device=device)
    if c.variant == "span":
        spans = [0.0, 17.5, 0.7 * L][:H]
        inputs["span"] = torch.tensor(spans, device=device, requires_grad=True)
    inputs["dout"] = _values((B, H, L, d), 4).to(device=device, dtype=dtype)
    return inputs


def kernel_results(c: Case, inputs) -> Dict[str, torch.Tensor]:
    """The course's kernels: the output and the gradients of ``(output * dout).sum()``."""
    from attncourse.kernels import flash

    q, k, v, span = inputs["q"], inputs["k"], inputs["v"], inputs["span"]
    if c.variant == "span":
        out = flash.adaptive_span_flash_attention(q, k, v, span, 8.0)
        leaves = {"dq": q, "dk": k, "dv": v, "dspan": span}
    else:
        causal = c.variant == "causal"
        out = flash.flash_attention(q, k, v, causal=causal, lengths=inputs["lengths"])
        leaves = {"dq": q, "dk": k, "dv": v}
    grads = torch.autograd.grad(out, list(leaves.values()), inputs["dout"])
    return {"output": out.detach(), **dict(zip(leaves, grads))}


def reference_results(c: Case, inputs) -> Dict[str, torch.Tensor]:
    """The package's attention in float64 from the same (rounded) inputs, and its gradients."""
    q, k, v = (inputs[n].detach().double().requires_grad_() for n in ("q", "k", "v"))
    leaves = {"dq": q, "dk": k, "dv": v}
    if c.variant == "span":
        span = inputs["span"].detach().double().requires_grad_()
        out = adaptive_span_attention(q, k, v, span, 8.0)[0]
        leaves["dspan"] = span
    else:
        out = scaled_dot_product_attention(q, k, v, _mask(c, inputs["lengths"], q.device))[0]
    grads = torch.autograd.grad(out, list(leaves.values()), inputs["dout"].double())
    return {"output": out.detach(), **dict(zip(leaves, grads))}


def _mask(c: Case, lengths, device) -> Optional[torch.Tensor]:
    """The boolean mask (True: may attend) of a case: causal and/or the keys' padding."""
    mask = (
        causal_mask(c.length, c.keys, device=device)[None, None] if c.variant == "causal" else None
    )
    if lengths is not None:
        keys = padding_mask(lengths, c.keys)[:, None, None, :].to(device)
        mask = keys if mask is None else mask & keys
    return mask


def compare(got: Dict[str, torch.Tensor], want: Dict[str, torch.Tensor], dtype: str) -> Dict:
    """Per result: finite, max |error| and within the dtype's tolerance (:data:`TOLERANCES`)."""
    results = {}
    for name, ref in want.items():
        atol, rtol = TOLERANCES[dtype]["output" if name == "output" else "gradients"]
        value = got[name].double()
        error = (value - ref).abs()
        limit = atol * max(1.0, float(ref.abs().max()) if ref.numel() else 1.0) + rtol * ref.abs()
        finite = bool(torch.isfinite(value).all())
        results[name] = {
            "max_error": float(error.max()) if error.numel() and finite else None,
            "finite": finite,
            "ok": finite and bool((error <= limit).all()),
        }
    return results


def run_case(c: Case, device) -> Dict[str, object]:
    """One sweep case against its reference; every error is recorded, never raised."""
    record: Dict[str, object] = {
        "name": c.name,
        "variant": c.variant,
        "dtype": c.dtype,
        "shape": {"B": c.batch, "H": c.heads, "L": c.length, "S": c.keys, "d": c.head_dim},
        "layout": c.layout,
    }
    start = time.monotonic()
    on_cuda = torch.device(device).type == "cuda"
    if c.dtype == "bfloat16" and on_cuda:
        if not launch.supports_bfloat16(torch.cuda.get_device_capability(device)):
            return {**record, "status": "skipped", "reason": "no bfloat16 before sm_80"}
    if c.layout == "offset-2^31":
        need = offset_buffer_bytes(c)
        free = torch.cuda.mem_get_info(device)[0] if on_cuda else 0
        if need + 2 * 2**30 > free:
            return {
                **record,
                "status": "skipped",
                "reason": f"needs {need / 2**30:.1f} GiB + 2 GiB free, {free / 2**30:.1f} GiB free",
            }
    try:
        inputs = case_inputs(c, device)
        results = compare(kernel_results(c, inputs), reference_results(c, inputs), c.dtype)
        passed = all(r["ok"] for r in results.values())
        record.update(status="passed" if passed else "failed", results=results)
    except Exception as error:  # a failing launch is a failed case, not a crash of the sweep
        record.update(
            status="failed", error=first_line(error), traceback=traceback.format_exc()[-2000:]
        )
    record["seconds"] = round(time.monotonic() - start, 2)
    return record


def sweep_worker(spec: str, result: Path, quick: bool, device="cuda") -> int:
    """``--sweep-shard K/N``: run every N-th case from the K-th, writing ``result`` after each."""
    k, n = shard(spec)
    records = []
    for c in sweep_cases(quick)[k::n]:
        records.append(run_case(c, device))
        log(f"sweep {c.name}: {records[-1]['status']}")
        write_atomically(result, json.dumps(json_safe(records)))
    return 0


def collect_sweep(jobs: List["Job"], quick: bool, report) -> Dict[str, object]:
    """The sweep's cases from its shards, in the plan's order; a case no shard reported is
    ``not run`` (its shard crashed or timed out), a case skipped is listed in the report's
    ``skipped``."""
    done = {}
    for job in jobs:
        if job.result.is_file():
            done.update({r["name"]: r for r in json.loads(job.result.read_text())})
    problems = {job.name: job.outcome() for job in jobs if job.outcome() != "finished"}
    cases = []
    for c in sweep_cases(quick):
        cases.append(
            done.get(c.name)
            or {
                "name": c.name,
                "status": "not run",
                "reason": "; ".join(f"{name} {what}" for name, what in problems.items())
                or "no shard reported it",
            }
        )
    for record in cases:
        if record["status"] == "skipped":
            skip(report, f"sweep case {record['name']}", record["reason"])
    count = {
        s: sum(1 for r in cases if r["status"] == s)
        for s in ("passed", "failed", "skipped", "not run")
    }
    return {
        "tolerances": TOLERANCES,
        "rule": TOLERANCE_RULE,
        "passed": count["passed"],
        "failed": count["failed"] + count["not run"],
        "skipped": count["skipped"],
        "not_run": count["not run"],
        "shards": {job.name: job.summary() for job in jobs},
        "cases": cases,
    }


# -- correctness: phase 1's processes -----------------------------------------------------------


@dataclass
class Job:
    """A process of phase 1: its command, its log, the JSON it writes, and how it ended."""

    section: str
    name: str
    command: List[str]
    log: Path
    result: Optional[Path] = None
    env: Dict[str, str] = field(default_factory=dict)
    process: Optional[subprocess.Popen] = None
    started: float = 0.0
    seconds: Optional[float] = None
    timed_out: bool = False
    interrupted: bool = False  # killed because this run was interrupted

    def outcome(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if self.process is None or self.process.returncode is None:
            return "did not start"
        return (
            "finished" if self.process.returncode == 0 else f"exited with {self.process.returncode}"
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""

    def summary(self) -> Dict[str, object]:
        return {"outcome": self.outcome(), "seconds": self.seconds, "tail": self.output()[-1500:]}


def child_env(**extra: str) -> Dict[str, str]:
    """This process's environment for a child: the checkout first on ``PYTHONPATH``, compiled
    kernels (no ``TRITON_INTERPRET``), unbuffered output, and ``extra``."""
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(PYTHONUNBUFFERED="1", MPLBACKEND="Agg", **extra)
    return env


_STARTED_JOBS: List[Job] = []  # every job started, so that an interrupted run can kill them


def start_job(job: Job, cwd: Path) -> None:
    """Start ``job`` in its own process group (so a time-out can kill its children too)."""
    log(f"start {job.name}: {shlex.join(job.command)}")
    with open(job.log, "w") as output:
        job.process = subprocess.Popen(
            job.command,
            cwd=cwd,
            env=job.env or child_env(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    job.started = time.monotonic()
    _STARTED_JOBS.append(job)


def kill_job(job: Job) -> None:
    """Kill ``job``'s process group (its children too) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.process.pid, signal.SIGKILL)
    job.process.wait()


def stop_jobs() -> List[str]:
    """Kill every started job still running (their own sessions do not get the signal that
    stopped this process); return the names of all it killed, this call or an earlier one."""
    for job in _STARTED_JOBS:
        if job.process is not None and job.process.poll() is None:
            kill_job(job)
            job.interrupted = True
    return [job.name for job in _STARTED_JOBS if job.interrupted]


def wait_for(jobs: List[Job], deadline: float) -> None:
    """Wait until every job has ended, killing those still running at ``deadline`` (monotonic)."""
    running = [job for job in jobs if job.process is not None]
    while running:
        for job in list(running):
            if job.process.poll() is not None:
                job.seconds = round(time.monotonic() - job.started, 1)
                log(f"{job.name}: {job.outcome()} in {job.seconds} s")
                running.remove(job)
            elif time.monotonic() > deadline:
                kill_job(job)
                job.timed_out, job.seconds = True, round(time.monotonic() - job.started, 1)
                log(f"{job.name}: {job.outcome()}")
                running.remove(job)
        time.sleep(0.2)


def tool_command(*args: str) -> List[str]:
    return [sys.executable, str(TOOL), *args]


def test_command(plan: Plan) -> List[str]:
    """pytest over the kernel tests, compiled on CUDA (pyproject's addopts name nbval, which the
    GPU machine lacks, hence ``-o addopts=``); on several workers where pytest-xdist is there.
    Verbose (``-v``): a line per test as it ends, so that a run killed at phase 1's limit,
    which prints no summary, still tells what had passed and failed."""
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-v"]
    command += ["-rfE", *plan.test_files]
    if plan.test_filter:
        command += ["-k", plan.test_filter]
    with contextlib.suppress(ImportError):
        import xdist  # noqa: F401

        command += ["-n", str(plan.test_workers)]
    return command


_OUTCOMES = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
# a verbose per-test line: pytest-xdist's "[gw0] [ 12%] PASSED id", or plain "id PASSED [ 12%]"
_PROGRESS = re.compile(
    rf"^(?:\[gw\d+\] \[\s*\d+%\] (?P<a>{_OUTCOMES}) (?P<ida>\S+::\S+)"
    rf"|(?P<idb>\S+::\S+) (?P<b>{_OUTCOMES})\b)",
    re.MULTILINE,
)
_SHORT = re.compile(r"^(?:FAILED|ERROR) (\S+::\S+)", re.MULTILINE)  # -rfE's short summary


def parse_pytest(output: str) -> Dict[str, object]:
    """The counts of pytest's last summary line (``3 passed, 1 failed, 2 skipped in 4.0s``);
    without one (pytest killed), those of its verbose per-test lines. ``summary``: whether the
    summary line was there."""
    counts: Dict[str, object] = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    if lines:
        for number, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", lines[-1]):
            counts["errors" if word.startswith("error") else word] = int(number)
        return {**counts, "summary": True}
    names = {"PASSED": "passed", "XFAIL": "passed", "XPASS": "passed", "FAILED": "failed"}
    names.update(ERROR="errors", SKIPPED="skipped")
    for match in _PROGRESS.finditer(output):
        key = names[match["a"] or match["b"]]
        counts[key] += 1
    return {**counts, "summary": False}


def failed_tests(output: str) -> List[str]:
    """The tests that failed or errored: from the short summary where pytest printed it, else
    from the per-test lines."""
    short = _SHORT.findall(output)
    if short:
        return list(dict.fromkeys(short))
    found = []
    for match in _PROGRESS.finditer(output):
        if (match["a"] or match["b"]) in ("FAILED", "ERROR"):
            found.append(match["ida"] or match["idb"])
    return list(dict.fromkeys(found))


def collect_tests(job: Job) -> Dict[str, object]:
    output = job.output()
    counts = parse_pytest(output)
    ok = job.outcome() == "finished" and counts["passed"] > 0
    return {
        "command": shlex.join(job.command),
        "outcome": job.outcome(),
        "seconds": job.seconds,
        **counts,
        "failed_tests": failed_tests(output)[:50],
        "ok": ok,
        "tail": output[-4000:],
    }


# an error's first line in compute-sanitizer's output (its details follow, indented)
_SANITIZER_HEADER = re.compile(r"^========= (?! )(.+?)\s*$", re.MULTILINE)
_NOT_AN_ERROR = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "LEAK SUMMARY", "Target application")


def memcheck_verdict(returncode: Optional[int], output: str, name: str) -> Dict[str, object]:
    """Whether a case ran clean under ``compute-sanitizer --tool memcheck``: it finished, printed
    its done line, and the sanitizer counted 0 errors. The first few errors are kept by kind:
    ``api_errors``, CUDA API calls that returned an error ("Program hit ...", from torch as a
    rule), and ``access_errors``, everything else (the kernels' invalid accesses)."""
    summary = re.findall(r"ERROR SUMMARY: (\d+) errors?", output)
    finished = f"memcheck case {name}: done" in output
    errors = int(summary[-1]) if summary else None
    headers = [h for h in _SANITIZER_HEADER.findall(output) if not h.startswith(_NOT_AN_ERROR)]
    api = [h for h in headers if h.startswith("Program hit")]
    return {
        "name": name,
        "clean": returncode == 0 and finished and errors == 0,
        "returncode": returncode,
        "errors": errors,
        "case_finished": finished,
        "access_errors": [h for h in headers if h not in api][:5],
        "api_errors": api[:5],
    }


def collect_memcheck(jobs: List[Job], sanitizer: str) -> Dict[str, object]:
    cases = []
    for job in jobs:
        verdict = memcheck_verdict(
            job.process.returncode if job.process else None, job.output(), job.name.split(" ")[-1]
        )
        cases.append(
            {
                **verdict,
                "outcome": job.outcome(),
                "seconds": job.seconds,
                "tail": job.output()[-2000:],
            }
        )
    return {
        "tool": sanitizer,
        "command": "compute-sanitizer --tool memcheck --error-exitcode 1 python"
        " tools/gpu_check.py --memcheck-case NAME",
        "environment": "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (every tensor its own allocation, so an"
        " access past its end is caught)",
        "cases": cases,
    }


def memcheck_case(name: str, device="cuda") -> int:
    """``--memcheck-case NAME``: one small launch of a kernel (what the sanitizer watches)."""
    from attncourse.kernels import flash

    g = torch.Generator().manual_seed(0)
    qkv = [torch.randn(2, 2, 70, 64, generator=g).to(device, torch.float16) for _ in range(3)]
    if name == "softmax_rows":
        flash.softmax_rows(torch.randn(7, 50, generator=g).to(device))
    elif name == "forward":
        flash.flash_attention_forward(*qkv, causal=True)
    elif name == "backward":
        q, k, v = (t.requires_grad_() for t in qkv)
        lengths = torch.tensor([70, 33], device=device)
        flash.flash_attention(q, k, v, lengths=lengths).float().sum().backward()
    else:
        q, k, v = (t.requires_grad_() for t in qkv)
        span = torch.tensor([5.0, 30.0], device=device, requires_grad=True)
        flash.adaptive_span_flash_attention(q, k, v, span, 8.0).float().sum().backward()
    torch.cuda.synchronize()
    print(f"memcheck case {name}: done", flush=True)
    return 0


# -- correctness: chapter 10, cell by cell --------------------------------------------------------

SETUP_TAG = "remove-cell"  # the first cell: Colab's set-up, which pip-installs the package
RAISES_TAG = "raises-exception"
_STUB = re.compile(r"^\s*raise NotImplementedError", re.MULTILINE)


def code_cells(notebook: Path) -> List[Dict[str, object]]:
    """The notebook's code cells: ``{"cell": index in the notebook, "source", "tags"}``."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    return [
        {
            "cell": i,
            "source": "".join(c["source"]) if isinstance(c["source"], list) else c["source"],
            "tags": c.get("metadata", {}).get("tags", []),
        }
        for i, c in enumerate(cells)
        if c["cell_type"] == "code"
    ]


def install_ipython_stub() -> bool:
    """Where IPython is missing, a stand-in ``IPython.display`` (``Markdown``, ``display``) that
    prints; returns whether it was installed. The stand-in package also answers what others
    ask of an ``IPython`` they find in ``sys.modules`` as IPython outside a shell would:
    ``get_ipython()`` is ``None`` (matplotlib's pyplot asks it at its first figure, its canvas
    reads ``version_info``)."""
    try:
        import IPython.display  # noqa: F401

        return False
    except ImportError:
        pass

    class Markdown:
        def __init__(self, data=None):
            self.data = data

        def _repr_markdown_(self):
            return self.data

        def __repr__(self):
            return str(self.data)

    def display(*objects, **_):
        for obj in objects:
            print(obj._repr_markdown_() if hasattr(obj, "_repr_markdown_") else repr(obj))

    package, module = types.ModuleType("IPython"), types.ModuleType("IPython.display")
    module.Markdown, module.display = Markdown, display
    package.display, package.get_ipython = module, lambda: None
    package.version_info, package.__version__ = (0, 0, 0, "stand-in"), "0+stand-in"
    sys.modules.update({"IPython": package, "IPython.display": module})
    return True


def run_cell(cell: Dict[str, object], namespace: Dict[str, object]) -> Dict[str, object]:
    """Execute one cell's source in ``namespace`` and judge it as nbval would: a cell tagged
    ``raises-exception`` must raise; an exercise stub (``raise NotImplementedError``) may raise
    NotImplementedError; any other exception fails the cell."""
    source, tags = str(cell["source"]), list(cell["tags"])
    filename = f"<chapter cell {cell['cell']}>"
    # registered as IPython does, so that inspect.getsource (and triton.jit) finds the source
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    start, error = time.monotonic(), None
    try:
        exec(compile(source, filename, "exec"), namespace)
    except Exception as e:
        error = e
    record = {"cell": cell["cell"], "seconds": round(time.monotonic() - start, 2)}
    if RAISES_TAG in tags:
        status = "raised as expected" if error else "failed"
        detail = first_line(error) if error else "expected an exception (tag raises-exception)"
    elif error is None:
        status, detail = "ok", None
    elif isinstance(error, NotImplementedError) and _STUB.search(source):
        status, detail = "stub", "an exercise stub, not attempted"
    else:
        status = "failed"
        detail = first_line(error) + "\n" + "".join(traceback.format_exception(error)[-3:])[-1500:]
    return {**record, "status": status, "detail": detail}


def execute_cells(cells: List[Dict[str, object]], on_record=None) -> Dict[str, object]:
    """Run code cells in order in one namespace, skipping the set-up cell (the first, tagged
    ``remove-cell``: it would pip-install the package, which comes from the checkout here).
    ``on_record(result)`` is called after each cell (to save progress)."""
    namespace: Dict[str, object] = {"__name__": "__main__"}
    result: Dict[str, object] = {"cells": [], "ipython_stub": install_ipython_stub()}
    for position, cell in enumerate(cells):
        if position == 0 and SETUP_TAG in cell["tags"]:
            record = {"cell": cell["cell"], "status": "skipped", "detail": "the Colab set-up cell"}
        else:
            record = run_cell(cell, namespace)
            if "matplotlib.pyplot" in sys.modules:
                sys.modules["matplotlib.pyplot"].close("all")
        result["cells"].append(record)
        result["on_gpu"] = bool(namespace.get("ON_GPU"))
        log(f"cell {record['cell']}: {record['status']}")
        if on_record is not None:
            on_record(result)
    return result


def chapter_worker(notebook: Path, result_path: Path) -> int:
    """``--chapter NOTEBOOK``: execute its code cells, writing ``result_path`` after each."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    save_result = lambda r: write_atomically(result_path, json.dumps(json_safe(r)))
    result = execute_cells(code_cells(notebook), on_record=save_result)
    result["finished"] = True
    save_result(result)
    return 0


def collect_chapter(job: Job, notebook: Path) -> Dict[str, object]:
    result = json.loads(job.result.read_text()) if job.result.is_file() else {"cells": []}
    cells = result["cells"]
    accepted = ("ok", "raised as expected", "stub", "skipped")
    return {
        "notebook": str(Path(notebook).relative_to(ROOT))
        if Path(notebook).is_relative_to(ROOT)
        else str(notebook),
        "outcome": job.outcome(),
        "seconds": job.seconds,
        "on_gpu": bool(result.get("on_gpu")),
        "ipython_stub": result.get("ipython_stub"),
        "finished": bool(result.get("finished")),
        "passed": sum(1 for c in cells if c["status"] in accepted),
        "failed": sum(1 for c in cells if c["status"] not in accepted),
        "cells": cells,
        "tail": job.output()[-3000:],
    }


# -- timings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One timed configuration: shapes, dtype, mask and pass."""

    length: int
    head_dim: int
    dtype: str
    causal: bool
    backward: bool
    batch: int
    heads: int

    @property
    def pass_name(self) -> str:
        return "forward+backward" if self.backward else "forward"

    def describe(self) -> str:
        return (
            f"L={self.length} d={self.head_dim} {self.dtype} {'causal' if self.causal else 'full'}"
            f" {self.pass_name}"
        )


def setting(plan: Plan, length: int, head_dim: int, dtype: str, causal: bool, backward: bool):
    """A setting with ``B * L = plan.tokens`` and ``H * d = plan.width`` (the same work per token)."""
    return Setting(
        length,
        head_dim,
        dtype,
        causal,
        backward,
        max(1, plan.tokens // length),
        max(1, plan.width // head_dim),
    )


def timing_settings(plan: Plan) -> List[Setting]:
    """Every timed setting, the targets' first (L = target_length, float16), so that a short
    budget still measures them."""
    settings = [
        setting(plan, L, d, t, c, b)
        for t in plan.dtypes
        for L in plan.lengths
        for d in plan.head_dims
        for c in (False, True)
        for b in (False, True)
    ]
    first = lambda s: not (s.length == plan.target_length and s.dtype == "float16")
    return sorted(settings, key=first)


def inputs_for(s: Setting, device) -> Tuple[torch.Tensor, ...]:
    """Seeded ``q, k, v`` ``(B, H, L, d)`` (leaves that need gradients for forward+backward) and
    the output's gradient ``dout``."""
    dtype = getattr(torch, s.dtype)
    g = torch.Generator(device=device).manual_seed(0)
    shape = (s.batch, s.heads, s.length, s.head_dim)
    q, k, v, dout = (torch.randn(shape, generator=g, device=device, dtype=dtype) for _ in range(4))
    return (*(t.requires_grad_(s.backward) for t in (q, k, v)), dout)


def sdpa_backends_of_build() -> Tuple[List[str], Dict[str, str]]:
    """The fused SDPA backends this torch has (of :data:`SDPA_IMPLS`), and why each other is missing."""
    from torch.nn.attention import SDPBackend

    names = {
        "flash": "FLASH_ATTENTION",
        "efficient": "EFFICIENT_ATTENTION",
        "cudnn": "CUDNN_ATTENTION",
    }
    have = [b for b in SDPA_IMPLS if hasattr(SDPBackend, names[b])]
    missing = {
        b: f"this torch ({torch.__version__}) has no SDPBackend.{names[b]}"
        for b in SDPA_IMPLS
        if b not in have
    }
    return have, missing


_FLEX: Dict[str, object] = {}


def flex_support() -> Tuple[Optional[Dict[str, object]], Optional[str]]:
    """torch's FlexAttention compiled (``torch.compile(flex_attention)``) and ``create_block_mask``,
    or ``None`` and why it is missing."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as error:
        return None, f"this torch ({torch.__version__}) has no FlexAttention ({error})"
    if not _FLEX:
        from torch import _dynamo

        dynamo = _dynamo.config
        limit = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
        setattr(dynamo, limit, max(getattr(dynamo, limit), 64))  # one compile per shape and mask
        _FLEX.update(
            compiled=torch.compile(flex_attention, dynamic=False), block_mask=create_block_mask
        )
    return _FLEX, None


def implementations(
    s: Setting, inputs, flex: Optional[Dict[str, object]], sdpa_names: Sequence[str]
) -> Dict[str, Callable[[], object]]:
    """The calls timed side by side at ``s``: the course's kernels, torch's SDPA restricted to
    each backend of ``sdpa_names``, and FlexAttention when ``flex`` is given."""
    from attncourse.kernels import flash

    q, k, v, dout = inputs
    forwards = {"course": lambda: flash.flash_attention(q, k, v, causal=s.causal)}
    for backend in sdpa_names:
        forwards[f"sdpa-{backend}"] = _restricted(backend, q, k, v, s.causal)
    if flex is not None:
        forwards["flex"] = _flex_call(flex, s, q, k, v)
    return {name: autograd_pass(fn, s.backward, (q, k, v), dout) for name, fn in forwards.items()}


def _flex_call(flex: Dict[str, object], s: Setting, q, k, v) -> Callable[[], torch.Tensor]:
    """Compiled FlexAttention at ``s``; a causal setting's block mask is built at the first call
    (the probe, untimed) and kept, so that an error there is FlexAttention's alone."""
    masks: Dict[str, object] = {}

    def call():
        if s.causal and "causal" not in masks:
            causal = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx
            masks["causal"] = flex["block_mask"](
                causal, None, None, s.length, s.length, device=q.device
            )
        return flex["compiled"](q, k, v, block_mask=masks.get("causal"))

    return call


def _restricted(backend: str, q, k, v, causal: bool) -> Callable[[], torch.Tensor]:
    def call():
        with sdpa.restrict_sdpa(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def probe(
    fns: Dict[str, Callable[[], object]], device
) -> Tuple[Dict[str, Callable], Dict[str, str], Dict[str, float]]:
    """Call each function once (compiling it): ``(those that ran, {name: why not}, {name: seconds
    of that first call})``. A refusal's reason is its error's first line, with torch's first
    warning (which says why a backend declined)."""
    ran, failed, first = {}, {}, {}
    for name, fn in fns.items():
        start = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fn()
                synchronize(device)
            except Exception as error:
                said = [
                    str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()
                ]
                failed[name] = first_line(error) + (f" ({said[0]})" if said else "")
                continue
        ran[name], first[name] = fn, round(time.monotonic() - start, 2)
    return ran, failed, first


def time_round_robin(
    fns: Dict[str, Callable[[], object]], repeats: int, warmup: int
) -> Dict[str, Dict]:
    """Time ``fns`` with CUDA events, interleaved round-robin (each repeat calls every function
    once, in turn) after ``warmup`` rounds: ``{name: {median_ms, p20_ms, p80_ms, times_ms}}``."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    pairs: Dict[str, list] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            fn()
            end.record()
            pairs[name].append((start, end))
    torch.cuda.synchronize()
    return {name: summarize([s.elapsed_time(e) for s, e in p]) for name, p in pairs.items()}


def summarize(times_ms: List[float]) -> Dict[str, object]:
    """Median, 20th and 80th percentiles of the repeats, in milliseconds."""
    p20, _, _, p80 = (
        statistics.quantiles(times_ms, n=5, method="inclusive")
        if len(times_ms) > 1
        else times_ms * 4
    )
    return {
        "median_ms": statistics.median(times_ms),
        "p20_ms": p20,
        "p80_ms": p80,
        "times_ms": [round(t, 5) for t in times_ms],
    }


def peak_mib(fn: Callable[[], object], device) -> float:
    """Peak memory of one call above what was allocated before it, in MiB."""
    return round(cuda_peak_memory(fn, torch.device(device)) / 2**20, 1)


def torch_choice_of(s: Setting, inputs) -> str:
    """The backend torch itself would pick for SDPA at ``s`` (``unknown`` where it cannot say)."""
    try:
        return sdpa.torch_choice(*inputs[:3], is_causal=s.causal)
    except Exception as error:
        return f"unknown ({first_line(error)})"


def measure_setting(
    plan: Plan, s: Setting, device, flex, sdpa_names, unavailable: Dict[str, str], cold: Dict
) -> List[Dict[str, object]]:
    """The rows of one setting: every implementation probed, timed side by side, its peak memory."""
    inputs = inputs_for(s, device)
    fns = implementations(s, inputs, flex, sdpa_names)
    ran, failed, first_call = probe(fns, device)
    timings = time_round_robin(ran, plan.repeats, plan.warmup) if ran else {}
    flops = attention_flops(s.batch, s.heads, s.length, s.length, s.head_dim, causal=s.causal)
    flops = int(flops * (3.5 if s.backward else 1))
    choice = torch_choice_of(s, inputs)
    rows = []
    names = list(fns) + [n for n in unavailable if n not in fns]
    for name in names:
        row = {
            "impl": name,
            "pass": s.pass_name,
            "dtype": s.dtype,
            "length": s.length,
            "head_dim": s.head_dim,
            "batch": s.batch,
            "heads": s.heads,
            "causal": s.causal,
            "flops": flops,
            "torch_choice": choice,
        }
        if name in timings:
            t = timings[name]
            row.update(status="ok", **t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
            row["peak_mib"] = peak_mib(ran[name], device)
        else:
            row.update(status="unavailable", reason=failed.get(name) or unavailable[name])
        if name == "flex" and name in first_call:
            row["compile_s"] = first_call[name]
            row["cold_compile_s"] = cold.get(s.describe())
        rows.append(row)
    return rows


def _crashed(report, result: Dict[str, object], what: str, error: Exception) -> None:
    """Record a measurement that raised (the others go on): in ``result["errors"]`` with its
    traceback, and in the report's ``skipped``."""
    result.setdefault("errors", []).append(
        {"what": what, "error": first_line(error), "traceback": traceback.format_exc()[-2000:]}
    )
    skip(report, what, f"crashed: {first_line(error)}")


def timings_section(
    plan: Plan, device, budget: Budget, report, warm: Dict, checkpoint=lambda: None
) -> Dict[str, object]:
    """The course's kernels against torch's SDPA backends (and FlexAttention at plan.flex_lengths,
    float16), every setting of :func:`timing_settings` while the budget allows. The rows are
    kept in ``report["timings"]`` as they are measured, and ``checkpoint()`` (which saves the
    report) is called after each setting; a setting that raises is recorded and skipped."""
    sdpa_names, missing = sdpa_backends_of_build()
    for backend, reason in missing.items():
        skip(report, f"timings of sdpa-{backend}", reason)
    flex, flex_missing = (None, None)
    if plan.flex_lengths:
        flex, flex_missing = flex_support()
        if flex is None:
            skip(report, "timings of FlexAttention", flex_missing)
        else:
            flex_missing = flex_broken_in_warmup(warm)
            if flex_missing is not None:
                flex = None
                skip(report, "timings of FlexAttention", flex_missing)
    else:
        skip(report, "timings of FlexAttention", "not in this plan (--quick: no compiles)")
    result: Dict[str, object] = {
        "convention": FLOPS_CONVENTION,
        "shapes": f"B * L = {plan.tokens} tokens and h * d_k = {plan.width} in every configuration",
        "statistics": f"CUDA events; {plan.warmup} warm-up rounds, then the median, 20th and 80th"
        f" percentiles of {plan.repeats} repeats, the implementations interleaved round-robin",
        "peak_memory": "torch.cuda.max_memory_allocated above what was allocated before the call",
        "flex_compile": "compile_s: the first call in this process (Dynamo's trace, then"
        " Inductor's caches, warmed in phase 1); cold_compile_s: that call in phase 1's warm-up"
        " process, from empty caches",
        "repeats": plan.repeats,
        "warmup": plan.warmup,
        "rows": [],
    }
    report["timings"] = result  # what a run killed in the middle leaves
    flex_failures = 0  # FlexAttention's failures in a row: after two, it is not tried again
    for s in timing_settings(plan):
        if not budget.allows(reserve=60 if plan.design_tiles else 25):
            skip(report, f"timings at {s.describe()}", budget.reason())
            continue
        unavailable = {f"sdpa-{b}": reason for b, reason in missing.items()}
        use_flex = None
        if s.length in plan.flex_lengths and s.dtype == "float16":
            use_flex = flex
            if flex is None:
                unavailable["flex"] = flex_missing
            elif not budget.allows(reserve=120):
                use_flex, unavailable["flex"] = None, budget.reason() + " (its compile)"
                skip(report, f"FlexAttention at {s.describe()}", unavailable["flex"])
        log(f"timing {s.describe()} (B={s.batch}, H={s.heads})")
        cold = warm.get("flex", {})
        try:
            rows = measure_setting(plan, s, device, use_flex, sdpa_names, unavailable, cold)
        except Exception as error:  # one setting's crash must not lose the others
            _crashed(report, result, f"timings at {s.describe()}", error)
            rows = []
        result["rows"] += rows
        if use_flex is not None and rows:
            failed = [r for r in rows if r["impl"] == "flex" and r["status"] != "ok"]
            flex_failures = flex_failures + 1 if failed else 0
            if flex_failures >= 2:  # its compile is broken here: each try would cost seconds
                why = f"failed twice in a row, last at {s.describe()}: {failed[0]['reason']}"
                flex, flex_missing = None, why
                skip(report, "the rest of FlexAttention's timings", why)
        checkpoint()
    return result


def flex_broken_in_warmup(warm: Dict) -> Optional[str]:
    """Why FlexAttention is not worth compiling again in phase 2: every one (two or more) of its
    compiles in phase 1's warm-up failed. ``None`` otherwise."""
    items = [r for r in warm.get("items", []) if r["what"].startswith("flex ")]
    if len(items) < 2 or any("error" not in r for r in items):
        return None
    return f"its {len(items)} compiles in phase 1's warm-up all failed: {items[0]['error']}"


# -- adaptive span --------------------------------------------------------------------------------


def span_tiles(capability: Tuple[int, int], plan: Plan) -> Dict[str, object]:
    """Tiles per head the adaptive-span forward computes at the short and the full span, with the
    tiles the launcher picks on this GPU (``config.launch_config(..., "forward_span")``)."""
    cfg = launch.launch_config(capability, torch.float16, SPAN_HEAD_DIM, "forward_span")
    maps = tiles.span_tile_maps(
        torch.tensor(plan.spans), RAMP, plan.span_length, cfg.block_m, cfg.block_n
    )
    short, full = (int(n) for n in maps.sum(dim=(1, 2)).tolist())
    return {
        "block_m": cfg.block_m,
        "block_n": cfg.block_n,
        "tiles": {"short": short, "full": full},
        "tile_ratio": full / short,
    }


def span_calls(
    plan: Plan, s: Setting, device, spans: Optional[Sequence[float]] = None
) -> Dict[str, Callable[[], object]]:
    """``{"span <z>": call}``: the adaptive-span kernel at ``s`` with every head's span at ``z``,
    for each of ``spans`` (the plan's short and full span by default), on the same inputs."""
    from attncourse.kernels import flash

    q, k, v, dout = inputs_for(s, device)
    calls = {}
    for z in plan.spans if spans is None else spans:
        per_head = torch.full((s.heads,), z, device=device)
        forward = lambda per_head=per_head: flash.adaptive_span_flash_attention(
            q, k, v, per_head, RAMP
        )
        calls[f"span {z:g}"] = autograd_pass(forward, s.backward, (q, k, v), dout)
    return calls


def span_section(
    plan: Plan, device, budget: Budget, report, capability, checkpoint=lambda: None
) -> Dict[str, object]:
    """Adaptive span with every head's span short against every span full, forward and
    forward+backward, timed side by side; the speed-up beside the ratio of tiles (kept in
    ``report["span"]`` as measured, ``checkpoint()`` after each pass, a pass that raises
    recorded and skipped)."""
    base = setting(plan, plan.span_length, SPAN_HEAD_DIM, "float16", True, False)
    result = {
        "length": base.length,
        "batch": base.batch,
        "heads": base.heads,
        "head_dim": SPAN_HEAD_DIM,
        "dtype": "float16",
        "ramp": RAMP,
        "spans": list(plan.spans),
        **span_tiles(capability, plan),
        "rows": [],
        "speedup": {},
    }
    report["span"] = result
    for backward in (False, True):
        s = replace(base, backward=backward)
        if not budget.allows(reserve=10):
            skip(report, f"adaptive span {s.pass_name}", budget.reason())
            continue
        try:
            timed = time_round_robin(span_calls(plan, s, device), plan.repeats, plan.warmup)
        except Exception as error:
            _crashed(report, result, f"adaptive span {s.pass_name}", error)
            continue
        for z in plan.spans:
            result["rows"].append({"pass": s.pass_name, "span": z, **timed[f"span {z:g}"]})
        short, full = (timed[f"span {z:g}"]["median_ms"] for z in plan.spans)
        result["speedup"][s.pass_name] = full / short
        checkpoint()
    if plan.cost_spans:
        if budget.allows(reserve=20):
            try:
                result["cost"] = span_cost(plan, base, device, capability)
            except Exception as error:
                _crashed(report, result, "adaptive span's cost per tile", error)
            checkpoint()
        else:
            skip(report, "adaptive span's cost per tile", budget.reason())
    return result


def host_ms(fn: Callable[[], object], repeats: int, device) -> float:
    """The host's time to issue one call of ``fn`` (its Python, checks and launches), in ms:
    ``repeats`` calls in a row without waiting for the GPU, after it has finished its work."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    issued = time.perf_counter() - start
    synchronize(device)
    return issued / repeats * 1e3


def kernel_times(fn: Callable[[], object], repeats: int, device) -> Dict[str, float]:
    """The GPU's own time for one call of ``fn``, in ms, per kernel: ``{kernel name: ms}``, the
    durations of the kernels it ran, added up by torch's profiler (CUPTI), so without the gaps in
    which the GPU waited for the host. Raises where the profiler records no kernel time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        synchronize(device)
    # the GPU's own events only, as torch's table totals them: an operator on the CPU also
    # carries its kernels' time, and counting both would count each kernel twice
    times = {
        entry.key: entry.self_device_time_total / repeats / 1e3
        for entry in prof.key_averages()
        if entry.device_type == DeviceType.CUDA
    }
    if sum(times.values()) <= 0:
        raise RuntimeError("the profiler recorded no kernel time")
    return times


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Optional[Dict[str, float]]:
    """The least-squares line ``y = fixed + per_unit * x`` and its coefficient of determination,
    or ``None`` where the ``xs`` do not differ (no line is determined)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    per_unit = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    fixed = my - per_unit * mx
    residual = sum((y - fixed - per_unit * x) ** 2 for x, y in zip(xs, ys))
    total = sum((y - my) ** 2 for y in ys)
    return {"fixed": fixed, "per_unit": per_unit, "r2": 1 - residual / total if total else 1.0}


#: The kernels each adaptive-span pass launches (the backward's row sums aside, whose work does
#: not depend on the span).
SPAN_KERNELS = {
    "forward": ("forward_span",),
    "forward+backward": ("forward_span", "backward_dq", "backward_dkdv_span"),
}


def span_work(plan: Plan, base: Setting, capability) -> Dict[str, object]:
    """The tiles each adaptive-span kernel computes per head at each of ``plan.cost_spans``, with
    the launcher's tiles on this GPU, and each pass's work: the area of those tiles over all
    ``B * H`` heads, in 64 x 64 tiles (the dK/dV kernel's 32 x 32 tiles count a quarter)."""
    spans = torch.tensor(plan.cost_spans)
    kernels = {}
    for kernel in SPAN_KERNELS["forward+backward"]:
        cfg = launch.launch_config(capability, torch.float16, SPAN_HEAD_DIM, kernel)
        maps = tiles.span_tile_maps(spans, RAMP, plan.span_length, cfg.block_m, cfg.block_n)
        kernels[kernel] = {
            "block_m": cfg.block_m,
            "block_n": cfg.block_n,
            "tiles_per_head": [int(n) for n in maps.sum(dim=(1, 2)).tolist()],
        }
    work = {
        name: [
            base.batch
            * base.heads
            * sum(
                kernels[k]["tiles_per_head"][i] * kernels[k]["block_m"] * kernels[k]["block_n"]
                for k in used
            )
            / (64 * 64)
            for i in range(len(plan.cost_spans))
        ]
        for name, used in SPAN_KERNELS.items()
    }
    return {"kernels": kernels, "work": work}


def span_cost(plan: Plan, base: Setting, device, capability) -> Dict[str, object]:
    """Where adaptive span's time goes (chapter 10 asks whether a fixed cost per program explains
    a speed-up below the tile ratio): each pass at every span of ``plan.cost_spans``, timed
    three ways: CUDA events around each call, round-robin, as the speed-up is (``event_ms``);
    the host's time to issue a call (``host_ms``); and the GPU's kernel time alone, from the
    profiler (``kernel_ms``, and ``kernels_ms`` by kernel; absent where it records nothing;
    taken last, as a profiler session slows the calls issued after it). A line
    ``time = fixed + per tile * work`` is fitted to the events and to the kernels, ``work`` being
    the pass's tiles over all heads in 64 x 64 tiles (:func:`span_work`): it assumes a tile's
    cost is the same in every kernel of the pass, which holds for the forward's one kernel
    only."""
    planned = span_work(plan, base, capability)
    result: Dict[str, object] = {
        "spans": list(plan.cost_spans),
        "heads": base.batch * base.heads,
        "kernels": planned["kernels"],
        "passes": {},
    }
    calls = {}
    for backward in (False, True):  # events and host times first, both passes
        s = replace(base, backward=backward)
        calls[s.pass_name] = span_calls(plan, s, device, plan.cost_spans)
        timed = time_round_robin(calls[s.pass_name], plan.repeats, plan.warmup)
        result["passes"][s.pass_name] = {
            "rows": [
                {
                    "span": z,
                    "work": planned["work"][s.pass_name][i],
                    "event_ms": timed[f"span {z:g}"]["median_ms"],
                    "host_ms": host_ms(calls[s.pass_name][f"span {z:g}"], plan.repeats, device),
                }
                for i, z in enumerate(plan.cost_spans)
            ]
        }
    for name, measured in result["passes"].items():  # then the profiler's kernel times
        rows = measured["rows"]
        try:
            kernel = [
                kernel_times(calls[name][f"span {r['span']:g}"], plan.repeats, device) for r in rows
            ]
        except Exception as error:  # a profiler that records nothing: the other two stand
            measured["kernel_error"] = first_line(error)
        else:
            for row, times in zip(rows, kernel):
                row["kernel_ms"] = sum(times.values())
                row["kernels_ms"] = times  # which kernels the fixed part is made of
        for key in ("event_ms", "kernel_ms"):
            line = None
            if all(key in row for row in rows):
                line = fit_line([row["work"] for row in rows], [row[key] for row in rows])
            if line is not None:
                measured[f"fit_{key}"] = {
                    "fixed_ms": line["fixed"],
                    "per_tile_ns": line["per_unit"] * 1e6,
                    "r2": line["r2"],
                }
    return result


# -- the design questions -----------------------------------------------------------------------


def design_questions(plan: Plan) -> Dict[str, Dict[str, Tuple[Optional[str], Dict[str, object]]]]:
    """``{question: {alternative: (kernel, launch_override fields)}}``: the grid order (every
    kernel), for the forward its block_m and its pipeline stages, and the dK/dV kernel's tile
    (with ``design_tiles``)."""
    questions = {
        "grid_order": {
            "blocks first": (None, {"blocks_first": True}),
            "heads first": (None, {"blocks_first": False}),
        }
    }
    if plan.design_tiles:
        questions["block_m"] = {f"block_m {m}": ("forward", {"block_m": m}) for m in (64, 128)}
        questions["num_stages"] = {
            f"num_stages {n}": ("forward", {"num_stages": n}) for n in (2, 3, 4)
        }
        # the dK/dV kernel's tile (timed with the backward): with 32 queries most of its
        # products compile to mma.sync on sm_90, with 64 x 64 at d = 128 it spills registers
        questions["dkdv_tile"] = {
            f"{m}x{n}, {w} warps, {st} stages": (
                "backward_dkdv",
                {"block_m": m, "block_n": n, "num_warps": w, "num_stages": st},
            )
            for m, n, w, st in DKDV_TILES
        }
    return questions


#: The dK/dV tiles the design question times: (block_m, block_n, num_warps, num_stages).
DKDV_TILES = ((32, 64, 8, 3), (64, 64, 8, 3), (64, 64, 8, 2), (64, 32, 8, 3), (64, 64, 4, 3))
#: The design questions timed with the backward: the grid order both ways, the dK/dV tile
#: with the backward only (the forward does not launch that kernel).
DESIGN_PASSES = {"grid_order": (False, True), "dkdv_tile": (True,)}


def overridden(fn: Callable[[], object], kernel: Optional[str], fields: Dict[str, object]):
    """``fn`` run under ``flash.launch_override(kernel, **fields)`` (its backward too)."""
    from attncourse.kernels import flash

    def call():
        with flash.launch_override(kernel, **fields):
            return fn()

    return call


def compare_alternatives(plan: Plan, s: Setting, alternatives, device) -> Dict[str, object]:
    """The alternatives of one question at ``s``, timed side by side: the times, those that
    failed (e.g. Triton's OutOfResources), the winner and how many times faster it was than
    the runner-up."""
    from attncourse.kernels import flash

    q, k, v, dout = inputs_for(s, device)
    course = autograd_pass(
        lambda: flash.flash_attention(q, k, v, causal=s.causal), s.backward, (q, k, v), dout
    )
    fns = {
        label: overridden(course, kernel, fields)
        for label, (kernel, fields) in alternatives.items()
    }
    ran, failed, _ = probe(fns, device)
    timed = time_round_robin(ran, plan.repeats, plan.warmup) if ran else {}
    ranked = sorted(timed, key=lambda label: timed[label]["median_ms"])
    return {
        "head_dim": s.head_dim,
        "causal": s.causal,
        "pass": s.pass_name,
        "length": s.length,
        "dtype": s.dtype,
        "times": {
            label: {k: t[k] for k in ("median_ms", "p20_ms", "p80_ms")}
            for label, t in timed.items()
        },
        "failed": failed,
        "winner": ranked[0] if ranked else None,
        "by": timed[ranked[1]]["median_ms"] / timed[ranked[0]]["median_ms"]
        if len(ranked) > 1
        else None,
    }


def design_section(
    plan: Plan, device, budget: Budget, report, env, checkpoint=lambda: None
) -> Dict[str, object]:
    """Each design question at L = target_length, float16, d of design_head_dims, causal and not:
    the forward (and forward+backward for the grid order), per compute capability (kept in
    ``report["design"]`` as measured, ``checkpoint()`` after each comparison, one that raises
    recorded and skipped)."""
    from attncourse.kernels import flash

    if not hasattr(flash, "launch_override"):
        raise RuntimeError("attncourse.kernels.flash has no launch_override in this checkout")
    result: Dict[str, object] = {"target": env["sm"], "gpu": env["gpu"]}
    report["design"] = result
    if not plan.design_tiles:
        skip(
            report,
            "design questions block_m, num_stages and dkdv_tile",
            "not in this plan (--quick)",
        )
    for question, alternatives in design_questions(plan).items():
        comparisons = []
        result[question] = {
            "alternatives": {k: {"kernel": kn, **f} for k, (kn, f) in alternatives.items()},
            "comparisons": comparisons,
        }
        passes = DESIGN_PASSES.get(question, (False,))
        for d in plan.design_head_dims:
            for causal in (False, True):
                for backward in passes:
                    s = setting(plan, plan.target_length, d, "float16", causal, backward)
                    what = f"design {question} at {s.describe()}"
                    if not budget.allows(reserve=3):
                        skip(report, what, budget.reason())
                        continue
                    log(what)
                    try:
                        comparisons.append(compare_alternatives(plan, s, alternatives, device))
                    except Exception as error:
                        _crashed(report, result[question], what, error)
                    checkpoint()
    return result


# -- warming the compile caches -----------------------------------------------------------------


def warm_items(plan: Plan) -> List[Tuple[str, Callable[[str], None]]]:
    """``(what, run(device))`` for every kernel phase 2 will launch, at phase 2's shapes: one
    forward and forward+backward each, so the compiles land in the caches on disk."""
    items = []
    for dtype in plan.dtypes:
        for d in plan.head_dims:
            for causal in (False, True):
                s = setting(plan, plan.target_length, d, dtype, causal, True)
                items.append(
                    (
                        f"course {s.describe()}",
                        lambda device, s=s: _warm_course(s, device, None, {}),
                    )
                )
    span = setting(plan, plan.span_length, SPAN_HEAD_DIM, "float16", True, True)
    items.append(("adaptive span", lambda device: _warm_span(plan, span, device)))
    for alternatives in design_questions(plan).values():
        for label, (kernel, fields) in alternatives.items():
            for d in plan.design_head_dims:
                for causal in (False, True):
                    s = setting(plan, plan.target_length, d, "float16", causal, True)
                    what = f"design {label} {s.describe()}"
                    items.append(
                        (
                            what,
                            lambda device, s=s, k=kernel, f=fields: _warm_course(s, device, k, f),
                        )
                    )
    for L in plan.flex_lengths:
        for d in plan.head_dims:
            for causal in (False, True):
                for backward in (False, True):
                    s = setting(plan, L, d, "float16", causal, backward)
                    items.append(
                        (f"flex {s.describe()}", lambda device, s=s: _warm_flex(s, device))
                    )
    return items


def _warm_course(s: Setting, device, kernel, fields) -> None:
    """The course's forward, then its forward and backward, at ``s`` (under ``fields``)."""
    for backward in (False, True):
        both = replace(s, backward=backward)
        call = implementations(both, inputs_for(both, device), None, ())["course"]
        overridden(call, kernel, fields)()


def _warm_span(plan: Plan, s: Setting, device) -> None:
    """The adaptive-span kernels at ``s``: forward, then forward and backward."""
    for backward in (False, True):
        next(iter(span_calls(plan, replace(s, backward=backward), device).values()))()


def _warm_flex(s: Setting, device) -> None:
    flex, why = flex_support()
    if flex is None:
        raise RuntimeError(why)
    implementations(s, inputs_for(s, device), flex, ())["flex"]()


def warm_worker(spec: str, result: Path, plan: Plan, device="cuda") -> int:
    """``--warm-shard K/N``: compile every N-th item of :func:`warm_items` from the K-th,
    recording each one's seconds (a cold compile) and any error."""
    k, n = shard(spec)
    records = []
    for what, run in warm_items(plan)[k::n]:
        start = time.monotonic()
        try:
            run(device)
            synchronize(device)
            record = {"what": what, "seconds": round(time.monotonic() - start, 2)}
        except Exception as error:
            record = {"what": what, "error": first_line(error)}
        records.append(record)
        log(f"warm {what}: {record.get('seconds', record.get('error'))}")
        write_atomically(result, json.dumps(json_safe(records)))
    return 0


def collect_warm(jobs: List[Job]) -> Dict[str, object]:
    records = [
        r for job in jobs if job.result.is_file() for r in json.loads(job.result.read_text())
    ]
    flex = {
        r["what"].removeprefix("flex "): r.get("seconds")
        for r in records
        if r["what"].startswith("flex ")
    }
    return {"items": records, "flex": flex, "jobs": {job.name: job.summary() for job in jobs}}


# -- targets and the verdict ---------------------------------------------------------------------


def _row(rows, **want) -> Optional[Dict[str, object]]:
    for row in rows:
        if row.get("status") == "ok" and all(row.get(k) == v for k, v in want.items()):
            return row
    return None


def evaluate_targets(report: Dict[str, object]) -> List[Dict[str, object]]:
    """The issue's targets against what the report measured (``met`` is None where it did not)."""
    targets = []
    rows = (report.get("timings") or {}).get("rows", [])
    for pass_name, threshold in (("forward", 0.9), ("forward+backward", 0.7)):
        for d in (64, 128):
            for causal in (False, True):
                want = dict(length=4096, dtype="float16", head_dim=d, causal=causal)
                course = _row(rows, impl="course", **want, **{"pass": pass_name})
                flash = _row(rows, impl="sdpa-flash", **want, **{"pass": pass_name})
                ratio = course["tflops"] / flash["tflops"] if course and flash else None
                targets.append(
                    {
                        "name": f"{pass_name} L=4096 d={d} float16"
                        f" {'causal' if causal else 'full'}: course / torch flash throughput",
                        "threshold": f">= {threshold}",
                        "measured": ratio,
                        "met": None if ratio is None else ratio >= threshold,
                    }
                )
    span = report.get("span") or {}
    ratio = span.get("tile_ratio")
    for pass_name in ("forward", "forward+backward"):
        speedup = (span.get("speedup") or {}).get(pass_name)
        needed = 0.8 * ratio if ratio else None
        targets.append(
            {
                "name": f"adaptive span {pass_name}: time at the full span / time at the short span",
                "threshold": f">= {needed:.2f} (80% of the tile ratio {ratio:.2f})"
                if needed
                else ">= 80% of the tile ratio",
                "measured": speedup,
                "met": None if speedup is None or needed is None else speedup >= needed,
            }
        )
    verdict = report["correctness"]
    targets.append(
        {
            "name": "every correctness check passes (sweep, kernel tests, chapter 10)",
            "threshold": "all",
            "measured": verdict["summary"],
            "met": verdict["ok"] if verdict["checked"] else None,
        }
    )
    memcheck = report.get("memcheck") or {}
    cases = memcheck.get("cases") or []
    targets.append(
        {
            "name": "compute-sanitizer memcheck clean",
            "threshold": "every case clean",
            "measured": f"{sum(c['clean'] for c in cases)} of {len(cases)} clean"
            if cases
            else None,
            "met": all(c["clean"] for c in cases) if cases else None,
        }
    )
    return targets


def correctness(report: Dict[str, object]) -> Dict[str, object]:
    """Whether every correctness section that was selected finished and passed."""
    problems, checked = [], []
    for name in CORRECTNESS:
        status = report["sections"].get(name, {}).get("status")
        if status in (None, "skipped"):
            continue
        checked.append(name)
        payload = report.get(name) or {}
        if status != "done":
            problems.append(f"{name}: {status}")
        elif name == "sweep" and payload.get("failed"):
            problems.append(
                f"sweep: {payload['failed']} of {payload['passed'] + payload['failed']} cases failed or did not run"
            )
        elif name == "tests" and not payload.get("ok"):
            problems.append(
                f"tests: {payload.get('failed')} failed, {payload.get('errors')} errors ({payload.get('outcome')})"
            )
        elif name == "chapter" and (
            payload.get("failed") or not payload.get("finished") or not payload.get("on_gpu")
        ):
            problems.append(
                f"chapter: {payload.get('failed')} cells failed, finished"
                f" {payload.get('finished')}, ON_GPU {payload.get('on_gpu')}"
            )
        elif name == "memcheck" and not all(c["clean"] for c in payload.get("cases", [])):
            problems.append("memcheck: not clean")
    summary = (
        "; ".join(problems)
        if problems
        else (f"{', '.join(checked)} passed" if checked else "none checked")
    )
    return {"checked": checked, "ok": not problems, "problems": problems, "summary": summary}


# -- the run ------------------------------------------------------------------------------------


def worker_jobs(kind: str, shards: int, plan: Plan, work: Path) -> List[Job]:
    """``shards`` processes of this tool, each running its share (``--sweep-shard K/N`` or
    ``--warm-shard K/N``) and writing it to a JSON file."""
    jobs = []
    for k in range(shards):
        result = work / f"{kind}{k}.json"
        command = tool_command(f"--{kind}-shard", f"{k}/{shards}", "--result", str(result))
        if plan.quick:
            command.append("--quick")
        jobs.append(Job(kind, f"{kind} {k}/{shards}", command, work / f"{kind}{k}.log", result))
    return jobs


def memcheck_jobs(sanitizer: str, work: Path) -> List[Job]:
    """One process per kernel under ``compute-sanitizer --tool memcheck``, with PyTorch's caching
    allocator off (each tensor its own allocation, so an access past its end is caught)."""
    env = child_env(PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    check = [sanitizer, "--tool", "memcheck", "--error-exitcode", "1"]
    return [
        Job(
            "memcheck",
            f"memcheck {name}",
            [*check, *tool_command("--memcheck-case", name)],
            work / f"memcheck-{name}.log",
            env=env,
        )
        for name in MEMCHECK_CASES
    ]


def phase1_jobs(plan: Plan, selected: Sequence[str], work: Path, report) -> Dict[str, List[Job]]:
    """The processes of phase 1 for the selected sections (and the cache warm-up for timing)."""
    jobs: Dict[str, List[Job]] = {}
    if "sweep" in selected:
        jobs["sweep"] = worker_jobs("sweep", plan.sweep_shards, plan, work)
    if "tests" in selected:
        jobs["tests"] = [Job("tests", "tests", test_command(plan), work / "tests.log")]
    if "chapter" in selected:
        result = work / "chapter.json"
        command = tool_command("--chapter", str(plan.notebook), "--result", str(result))
        jobs["chapter"] = [Job("chapter", "chapter", command, work / "chapter.log", result)]
    if "memcheck" in selected:
        sanitizer = shutil.which("compute-sanitizer")
        if sanitizer is None:
            skip(report, "memcheck", "compute-sanitizer is not on the PATH", section="memcheck")
        else:
            jobs["memcheck"] = memcheck_jobs(sanitizer, work)
    if set(TIMING) & set(selected) and plan.warm_shards:
        jobs["warm"] = worker_jobs("warm", plan.warm_shards, plan, work)
    return jobs


def run_phase1(
    plan, selected, work: Path, report, budget: Budget, folder, slug
) -> Dict[str, object]:
    """Start every phase-1 process, wait for them (killing those past the phase's time), and
    record each correctness section; return the warm-up's record."""
    jobs = phase1_jobs(plan, selected, work, report)
    cwd = Path(tempfile.mkdtemp(prefix="gpu-check-cwd-", dir=work))  # nothing lands in the checkout
    for group in jobs.values():
        for job in group:
            start_job(job, ROOT if job.section == "tests" else cwd)
    deadline = time.monotonic() + max(min(plan.phase1_s, budget.left() - 15), 5)
    try:
        wait_for([job for group in jobs.values() for job in group], deadline)
    except BaseException:  # killed before their folder goes (SIGTERM, Ctrl-C)
        stop_jobs()
        raise
    collectors = {
        "sweep": lambda: collect_sweep(jobs["sweep"], plan.quick, report),
        "tests": lambda: collect_tests(jobs["tests"][0]),
        "chapter": lambda: collect_chapter(jobs["chapter"][0], plan.notebook),
        "memcheck": lambda: collect_memcheck(jobs["memcheck"], jobs["memcheck"][0].command[0]),
    }
    for name in CORRECTNESS:
        if name in jobs:
            run_section(report, name, collectors[name], folder, slug)
            timed_out = [j.name for j in jobs[name] if j.timed_out]
            if timed_out and report["sections"][name]["status"] == "done":
                report["sections"][name]["status"] = "timed out"
                report["sections"][name]["reason"] = (
                    f"{', '.join(timed_out)} passed phase 1's {plan.phase1_s:.0f} s"
                )
                save(report, folder, slug)  # run_section saved it as done
    try:
        return collect_warm(jobs["warm"]) if "warm" in jobs else {}
    except Exception as error:  # the warm-up only saves compile time: never the run's end
        return {"error": first_line(error)}


def writing_slug(folder: Path, slug: str) -> str:
    """The name a run writes its report under while it runs: ``slug``, or ``slug-partial`` where
    ``<slug>.json`` is a complete report, which is kept until this run completes (a run killed
    on the way never replaces a complete report with a partial one)."""
    try:
        complete = json.loads((folder / f"{slug}.json").read_text()).get("complete") is True
    except (OSError, ValueError, AttributeError):
        complete = False
    return f"{slug}-partial" if complete else slug


def promote(folder: Path, partial: str, slug: str) -> Path:
    """Give a completed run's report (``partial``) the report's own name ``slug``."""
    for suffix in (".md", ".json"):
        os.replace(folder / f"{partial}{suffix}", folder / f"{slug}{suffix}")
    return folder / f"{slug}.json"


class Terminated(BaseException):
    """SIGTERM (a time limit's kill): raised in the main process so that the report is saved
    and phase 1's processes are killed on the way out."""


def _terminate(signum, frame):
    raise Terminated(f"signal {signum} (SIGTERM)")


# -- chapter 11 on the GPU: one FlexAttention program, three masks ---------------------------

MASKS_LENGTH, MASKS_QUICK_LENGTH = 4096, 2048


def masks_section(plan: Plan, device, budget: Budget, report) -> Dict[str, object]:
    """Chapter 11's measurement on this GPU: one compiled FlexAttention program (causal, a
    sliding window of 256, 8 packed documents) beside SDPA and the package's tiled attention,
    in float16 (:func:`attncourse.benchmarks.flex.time_flex_against_sdpa`, the same function
    the chapter runs on the CPU). Last of the sections: it is the first to go when the budget
    runs short, and a torch without FlexAttention skips it with the reason."""
    from attncourse.benchmarks.flex import time_flex_against_sdpa
    from attncourse.flex import flex_available

    available, why = flex_available()
    if not available:
        skip(report, "chapter 11's masks", why, section="masks")
        return {"skipped": why}
    if not budget.allows(reserve=45):  # a compile (10-40 s on a GPU) and three masks
        skip(report, "chapter 11's masks", budget.reason(), section="masks")
        return {"skipped": budget.reason()}
    return time_flex_against_sdpa(
        device,
        length=MASKS_QUICK_LENGTH if plan.quick else MASKS_LENGTH,
        num_heads=16,
        head_dim=64,
        window=256,
        documents=8,
        dtype=torch.float16,
        repeats=10 if plan.quick else 20,
        warmup=3,
    )


def run_check(args: argparse.Namespace, device="cuda") -> int:
    """The whole check: phase 1's processes, then phase 2's timings; returns the exit status."""
    plan = plan_for(args.quick, args.budget_s)
    budget = Budget(plan.budget_s)
    selected = args.only or SECTIONS
    env = environment(device)
    folder = Path(args.out).resolve()
    final = report_slug(str(env["gpu"]), plan.quick, args.only)
    slug = writing_slug(folder, final)
    report = new_report(args, plan, env)
    kept = f" (the complete {final}.json there is kept until this run completes)"
    log(
        f"gpu check on {env['gpu']} ({env['sm']}), torch {env['torch']}, triton"
        f" {env['triton']}; report {folder / slug}.json and .md{kept if slug != final else ''}"
    )
    if env.get("compute_mode") not in ("Default", "unknown", None):
        log(
            f"warning: the GPU's compute mode is {env['compute_mode']}: phase 1's processes"
            " share the GPU at once, and may be refused a CUDA context (nvidia-smi -c DEFAULT)"
        )
    checkpoint = lambda: save(report, folder, slug)
    _STARTED_JOBS.clear()  # this run's
    try:
        checkpoint()
        with tempfile.TemporaryDirectory(prefix="gpu-check-", ignore_cleanup_errors=True) as work:
            warm = run_phase1(plan, selected, Path(work), report, budget, folder, slug)
        if warm:
            report["warmup"] = warm
        capability = capability_of(env)
        phase2 = {
            "timings": lambda: timings_section(plan, device, budget, report, warm, checkpoint),
            "span": lambda: span_section(plan, device, budget, report, capability, checkpoint),
            "design": lambda: design_section(plan, device, budget, report, env, checkpoint),
            "masks": lambda: masks_section(plan, device, budget, report),
        }
        for name in TIMING:
            if name in selected:
                run_section(report, name, phase2[name], folder, slug)
    except BaseException as error:  # Ctrl-C, SIGTERM: kill phase 1's processes, keep the report
        if signal.getsignal(signal.SIGTERM) is _terminate:  # a second SIGTERM must wait
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stopped = stop_jobs()
        report["interrupted"] = first_line(error) + (
            f"; killed {', '.join(stopped)}" if stopped else ""
        )
        save(report, folder, slug)
        log(f"interrupted ({report['interrupted']}); the report so far: {folder / slug}.json")
        raise
    report["complete"], report["finished_utc"] = True, utc_now()
    path = save(report, folder, slug)
    if slug != final:
        path = promote(folder, slug, final)
    verdict = report["correctness"]
    log(f"done: {path} and {path.with_suffix('.md')}; correctness: {verdict['summary']}")
    return 0 if verdict["ok"] else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.chapter is not None:
        return chapter_worker(args.chapter, args.result)
    if args.fingerprint:
        print(json.dumps(source_record(), indent=1))
        return 0
    problem = gpu_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    if args.memcheck_case is not None:
        return memcheck_case(args.memcheck_case)
    if args.sweep_shard is not None:
        return sweep_worker(args.sweep_shard, args.result, args.quick)
    if args.warm_shard is not None:
        return warm_worker(args.warm_shard, args.result, plan_for(args.quick))
    signal.signal(signal.SIGTERM, _terminate)
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
