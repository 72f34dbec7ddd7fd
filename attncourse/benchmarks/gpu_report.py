"""Reading the committed GPU reports of ``make gpu-check`` (chapter 10): find, load, summarise.

``make gpu-check`` (``tools/gpu_check.py``) runs on a machine with a CUDA GPU and writes
``reports/gpu/<gpu>.json`` and ``reports/gpu/<gpu>.md``: correctness on the GPU, chapter 10
executed there, timings of the course's kernels beside torch's SDPA backends and FlexAttention,
adaptive span's speed-up and the two launch-configuration questions. This module only reads
those files (it imports neither triton nor CUDA), so chapter 10 can show a GPU's figures on any
machine; the tool writes its ``.md`` with the same :func:`summary_markdown` and
:func:`targets_markdown`.

A report is a JSON object with ``schema_version`` :data:`SCHEMA_VERSION` and at least the keys
of :data:`REQUIRED_KEYS` (``environment`` with those of :data:`REQUIRED_ENVIRONMENT`). The
sections a run measured are further keys (``tests``, ``sweep``, ``memcheck``, ``chapter``,
``timings``, ``span``, ``design``); ``sections`` gives each one's status and ``skipped`` lists
what was not measured, and why. A run killed at its time limit leaves a partial report
(``complete`` false) that reads the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence

__all__ = [
    "SCHEMA_VERSION",
    "REQUIRED_KEYS",
    "REQUIRED_ENVIRONMENT",
    "find_reports",
    "no_reports_note",
    "load_report",
    "summary_markdown",
    "targets_markdown",
    "masks_markdown",
    "span_cost_findings",
]

#: The version of the report's layout this module reads.
SCHEMA_VERSION = 1

#: The keys every report has, whatever it measured.
REQUIRED_KEYS = (
    "schema_version",
    "date",
    "command",
    "quick",
    "complete",
    "environment",
    "sections",
    "skipped",
    "targets",
)

#: The keys of ``report["environment"]``: what the figures were measured on.
REQUIRED_ENVIRONMENT = (
    "gpu",
    "compute_capability",
    "torch",
    "triton",
    "cuda",
    "cudnn",
    "driver",
    "python",
)

# The length and dtype of the summary's comparison table (those of the targets).
_SUMMARY_LENGTH = 4096
_SUMMARY_DTYPE = "float16"


def find_reports(folder=None) -> List[Dict[str, object]]:
    """Every report in ``folder`` (``*.json``), loaded and checked, oldest first.

    ``folder``: a ``str`` or ``pathlib.Path``; ``None`` looks for ``reports/gpu`` in the current
    directory and each directory above it, and likewise from this package's location (a
    checkout). Returns ``[]`` when there is none (an installed package, as on Colab). Each report
    gets the key ``"path"``: the file it was read from.
    """
    if folder is None:
        folders = _default_folders()
    elif isinstance(folder, (str, os.PathLike)):
        folders = [Path(folder)]
    else:
        raise TypeError(
            f"folder must be a str or pathlib.Path folder (None: reports/gpu of the checkout), got"
            f" {type(folder).__name__} {folder!r}"
        )
    paths = sorted({p.resolve() for f in folders if f.is_dir() for p in f.glob("*.json")})
    reports = [dict(load_report(p), path=str(p)) for p in paths]
    return sorted(reports, key=lambda r: (str(r["date"]), str(r["environment"]["gpu"])))


def _default_folders() -> List[Path]:
    """The first ``reports/gpu`` above the current directory and above this file, if any."""
    found = []
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for place in (start, *start.parents):
            if (place / "reports" / "gpu").is_dir():
                found.append(place / "reports" / "gpu")
                break
    return found


def no_reports_note(what: str, page: str) -> str:
    """The sentence a chapter prints where :func:`find_reports` found no report of ``what``.

    In a checkout whose ``reports/gpu`` holds none: none has been committed yet. Where the
    package was installed without the repository (Colab): the reports are not part of the
    package, and the book's ``page`` shows those committed, in English and in the Chinese
    edition. ``page`` is a path below the book's address (which the package's metadata gives),
    such as ``"book/10_gpu_attention.html#gpu-measured"``; the Chinese edition's is below
    ``zh/``.
    """
    if _default_folders():
        return f"No {what} has been committed yet: `make gpu-check` on a GPU produces one."
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        urls = metadata("attncourse").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    home = next((u.split(",", 1)[1].strip() for u in urls if u.startswith("Homepage,")), None)
    if home:
        home = home.rstrip("/")
        where = f"{home}/{page} (中文版: {home}/zh/{page})"
    else:
        where = "this chapter's page of the book"
    return (
        f"This runtime has the attncourse package but not the repository's reports/gpu folder,"
        f" where each {what} is committed; the book shows them at {where}"
    )


def load_report(path) -> Dict[str, object]:
    """The report in the JSON file ``path`` (a ``str`` or ``pathlib.Path``), checked.

    Raises:
        TypeError: ``path`` is not a str or path.
        ValueError: the file is missing or not JSON, its ``schema_version`` is not
            :data:`SCHEMA_VERSION`, or a key of :data:`REQUIRED_KEYS` or
            :data:`REQUIRED_ENVIRONMENT` is missing (the message names them).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path must be a str or pathlib.Path of a report, got {type(path).__name__} {path!r}"
        )
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path {str(path)!r}: no such report file")
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"path {str(path)!r} is not valid JSON: {e}") from None
    _check_report(report, f"the report {path}")
    return report


def _check_report(report: object, what: str) -> Dict[str, object]:
    """``report`` if it has the schema's version and every required key, else the error naming them."""
    if not isinstance(report, dict):
        raise TypeError(f"{what} must be a dict (a JSON object), got {type(report).__name__}")
    version = report.get("schema_version")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise ValueError(
            f"{what} has schema_version {report.get('schema_version')!r}; this reader reads"
            f" version {SCHEMA_VERSION}"
        )
    missing = [key for key in REQUIRED_KEYS if key not in report]
    if missing:
        raise ValueError(f"{what} lacks the key(s) {', '.join(missing)}")
    environment = report["environment"]
    if not isinstance(environment, dict):
        raise ValueError(f"{what}: environment must be a JSON object, got {environment!r}")
    missing = [key for key in REQUIRED_ENVIRONMENT if key not in environment]
    if missing:
        raise ValueError(f"{what}: environment lacks the key(s) {', '.join(missing)}")
    return report


def _caption(report: Dict[str, object]) -> str:
    """The line above every table: the GPU, the versions and the date the figures belong to."""
    env = report["environment"]
    return (
        f"_{env['gpu']} (compute capability {env['compute_capability']}) · torch {env['torch']}"
        f" · triton {env['triton']} · CUDA {env['cuda']} · cuDNN {env['cudnn']}"
        f" · driver {env['driver']} · {report['date']}_"
    )


def _number(value: Optional[float], form: str = ".1f") -> str:
    return "–" if value is None else format(value, form)


def _ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _times(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _row(*cells: object) -> str:
    """One row of a Markdown table."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _table(title: str, report: Dict[str, object], header: Sequence[str], rows: List[str]) -> str:
    """A Markdown table under its title and the report's caption: the header, its rule, ``rows``."""
    rule = "|" + "---|" * len(header)
    # the caption a paragraph of its own, not run into the title's sentence
    return "\n".join([title, "", _caption(report), "", _row(*header), rule, *rows])


def source_digest(paths: Sequence[Path], root: Path) -> str:
    """SHA-256 (first 16 hex digits) of ``paths``' names relative to ``root`` and their bytes,
    in sorted order: it changes with any edit, not with where the files lie."""
    sha = hashlib.sha256()
    for path in sorted(paths):
        sha.update(path.relative_to(root).as_posix().encode() + b"\0")
        sha.update(path.read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def kernels_fingerprint() -> str:
    """The fingerprint a report records as ``source["kernels"]``, of the kernels installed
    here (``attncourse/kernels/**/*.py``): equal to a report's when it timed this code."""
    package = Path(__file__).resolve().parents[1]
    return source_digest(list((package / "kernels").rglob("*.py")), package.parent)


def _command_and_source(report: Dict[str, object], against_installed: bool = False) -> str:
    """``"`python tools/gpu_check.py ...` at commit abc123456789, kernels' fingerprint `...`"``:
    the command that measured the report, and the code it measured (nothing for a report that
    predates the ``source`` key). A commit the command passed (``--commit``) is named once, in
    the command, shortened to 12 characters."""
    command = str(report["command"])
    source = report.get("source")
    if not isinstance(source, dict):
        return f"`{command}`"
    commit = str(source.get("commit") or "")
    if commit and commit in command:
        at = ""
        command = command.replace(commit, commit[:12])
    else:
        at = f" at commit {commit[:12]}" if commit else " (commit not recorded)"
    timed = source.get("kernels")
    named = f"`{command}`{at}, kernels' fingerprint `{timed}`"
    if not against_installed:  # a report file: what it says must not go stale
        return named
    here = kernels_fingerprint()
    if timed == here:
        return f"{named}; the kernels installed here are the ones it timed"
    return (
        f"{named}; the kernels installed here (`{here}`) differ from those it timed: its figures"
        " are those of the commit it names"
    )


def summary_markdown(report: Dict[str, object], *, against_installed: bool = False) -> str:
    """A compact Markdown summary of ``report`` (a dict as :func:`load_report` returns it).

    The GPU, its versions and the date; correctness counts; the course's forward and
    forward+backward against torch's flash and cuDNN backends at L = 4096 in float16 (TFLOP/s
    and the course's throughput as a multiple of each); adaptive span's speed-up beside the
    ratio of tiles it skips; the design questions' winners; and what was skipped. Each table
    is headed with the GPU, the versions and the date. ``against_installed`` (a chapter showing
    the report) adds whether the kernels installed here are the ones the report timed; the
    report's own ``.md`` leaves it out, since it would go stale.
    """
    report = _check_report(report, "report")
    env = report["environment"]
    kind = " (quick run)" if report["quick"] else ""
    partial = "" if report["complete"] else " — partial: the run stopped before its end"
    parts = [
        f"#### GPU check: {env['gpu']}{kind}{partial}",
        f"Compute capability {env['compute_capability']}, torch {env['torch']}, triton"
        f" {env['triton']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, driver {env['driver']},"
        f" Python {env['python']}; measured {report['date']} (UTC) by"
        f" {_command_and_source(report, against_installed)}.",
        _correctness_lines(report),
        _comparison_table(report),
        _span_table(report),
        _span_cost_table(report),
        _design_table(report),
        masks_markdown(report),
        _skipped_lines(report),
    ]
    return "\n\n".join(part for part in parts if part) + "\n"


def _correctness_lines(report: Dict[str, object]) -> str:
    """One bullet per correctness section that ran: its counts."""
    lines = []
    sweep = report.get("sweep")
    if sweep:
        lines.append(
            f"- sweep: {sweep['passed']} of {sweep['passed'] + sweep['failed']} cases passed"
            " (outputs and gradients against float64 references)"
        )
    tests = report.get("tests")
    if tests:
        lines.append(
            f"- kernel tests on the GPU: {tests['passed']} passed, {tests['failed']} failed,"
            f" {tests['errors']} errors, {tests['skipped']} skipped"
        )
    chapter = report.get("chapter")
    if chapter:
        lines.append(
            f"- chapter 10: {chapter['passed']} of {chapter['passed'] + chapter['failed']} code"
            f" cells ran as expected; GPU branch: {'ran' if chapter['on_gpu'] else 'did not run'}"
        )
    memcheck = report.get("memcheck")
    if memcheck and memcheck.get("cases"):
        clean = sum(1 for case in memcheck["cases"] if case["clean"])
        lines.append(
            f"- compute-sanitizer memcheck: {clean} of {len(memcheck['cases'])} cases clean"
        )
    return "\n".join(["Correctness:", *lines]) if lines else ""


def _timing(rows: List[dict], **want) -> Optional[dict]:
    """The measured row of ``rows`` that has every field of ``want``, or ``None``."""
    for row in rows:
        if row.get("status") == "ok" and all(row.get(k) == v for k, v in want.items()):
            return row
    return None


def _pass_words(name: object) -> str:
    """A pass as a table shows it: ``"forward + backward"``, which a narrow column can wrap."""
    return str(name).replace("+", " + ")


def _comparison_table(report: Dict[str, object]) -> str:
    """The course against torch's flash and cuDNN backends at L = 4096, float16."""
    rows = (report.get("timings") or {}).get("rows") or []
    lines = []
    for row in rows:
        if not (
            row.get("impl") == "course"
            and row.get("status") == "ok"
            and row.get("length") == _SUMMARY_LENGTH
            and row.get("dtype") == _SUMMARY_DTYPE
        ):
            continue
        same = {k: row[k] for k in ("length", "dtype", "head_dim", "causal", "pass")}
        flash, cudnn = (
            _timing(rows, impl="sdpa-flash", **same),
            _timing(rows, impl="sdpa-cudnn", **same),
        )
        flash_tflops = flash["tflops"] if flash else None
        cudnn_tflops = cudnn["tflops"] if cudnn else None
        lines.append(
            _row(
                row["head_dim"],
                "yes" if row["causal"] else "no",
                _pass_words(row["pass"]),
                _number(row["tflops"]),
                _number(flash_tflops),
                _times(_ratio(row["tflops"], flash_tflops)),
                _number(cudnn_tflops),
                _times(_ratio(row["tflops"], cudnn_tflops)),
            )
        )
    if not lines:
        return ""
    timings = report["timings"]
    return _table(
        f"Attention at L = {_SUMMARY_LENGTH}, {_SUMMARY_DTYPE}, {timings['shapes']};"
        f" {timings['convention']}",
        report,
        (
            "d_k",
            "causal",
            "pass",
            "course TFLOP/s",
            "torch flash TFLOP/s",
            "course / flash",
            "torch cuDNN TFLOP/s",
            "course / cuDNN",
        ),
        lines,
    )


def _span_table(report: Dict[str, object]) -> str:
    """Adaptive span: every span at the short span against every span at the full length."""
    span = report.get("span")
    if not span or not span.get("speedup"):
        return ""
    short, full = span["spans"]
    lines = []
    for name, speedup in span["speedup"].items():
        times = {r["span"]: r["median_ms"] for r in span["rows"] if r["pass"] == name}
        lines.append(
            _row(
                _pass_words(name),
                _number(times.get(full), ".3f"),
                _number(times.get(short), ".3f"),
                _times(speedup),
                _times(span["tile_ratio"]),
            )
        )
    return _table(
        f"Adaptive span at L = {span['length']}, {span['dtype']}, d_k = {span['head_dim']},"
        f" ramp {span['ramp']:g}: the tile ratio is {span['tiles']['full']} /"
        f" {span['tiles']['short']} tiles per head ({span['block_m']} x {span['block_n']}"
        " tiles)",
        report,
        ("pass", f"span {full:g} (ms)", f"span {short:g} (ms)", "speed-up", "tile ratio"),
        lines,
    )


def _span_cost_table(report: Dict[str, object]) -> str:
    """Adaptive span at several spans: its work, its time three ways, and a line fitted to it,
    one table per pass (two passes side by side would not fit a page's width)."""
    cost = (report.get("span") or {}).get("cost")
    if not cost or not cost.get("passes"):
        return ""
    parts = []
    for name, measured in cost["passes"].items():
        rows = {row["span"]: row for row in measured["rows"]}
        lines = []
        for z in cost["spans"]:
            row = rows.get(z, {})
            cells = [f"{z:g}", _number(row.get("work"), ",.0f")]
            cells += [_number(row.get(key), ".3f") for key in ("event_ms", "kernel_ms", "host_ms")]
            lines.append(_row(*cells))
        fits = []
        for key, what in (("event_ms", "events"), ("kernel_ms", "kernels")):
            line = measured.get(f"fit_{key}")
            if line:
                fits.append(
                    f"- {what}: {line['fixed_ms']:.3f} ms + {line['per_tile_ns']:.2f} ns"
                    f" per tile (r² {line['r2']:.3f})"
                )
        if measured.get("kernel_error"):
            fits.append(f"- kernels: not measured ({measured['kernel_error']})")
        table = _table(
            f"Where adaptive span's time goes, {_pass_words(name)}: at each span, the tiles the"
            f" pass computes over all {cost['heads']} heads (in 64 x 64 tiles: the dK/dV"
            " kernel's smaller tiles count for their area), and the time of one call measured"
            " by CUDA events around it (as the speed-up above), by the durations of the GPU's"
            " kernels alone (torch's profiler) and by the host's time to issue it",
            report,
            ("span", "tiles", "events (ms)", "kernels (ms)", "host (ms)"),
            lines,
        )
        fitted = "A line time = fixed + per tile × tiles, fitted over the spans:"
        parts.append("\n".join([table, "", fitted, *fits]))
    return "\n\n".join(parts)


#: The names this package's Triton kernels run under (``_forward_kernel``, ...); the profiler
#: lists torch's own kernels (the span's checks) under their C++ names.
_COURSE_KERNEL = re.compile(r"_\w+_kernel")


def span_cost_findings(report: Dict[str, object]) -> Dict[str, Dict[str, float]]:
    """What the adaptive-span cost measurement says, per pass (``{}`` where the report has none
    measured by the profiler): the line fitted to the GPU's kernel times (``fixed_ms``,
    ``per_tile_ns``, ``r2``); at the report's short and full span (``short``, ``full``), the
    speed-up by the kernels' times (``kernel_speedup``), by CUDA events around each call
    (``event_speedup``, the report's speed-up) and as the line predicts it
    (``line_speedup``); the line's fixed part as a share of the kernels' time at the short span
    (``fixed_share``); and, where the report lists the kernels by name, the time at the short
    span of torch's small kernels around the course's own (``torch_kernels_ms``: the span's
    checks)."""
    report = _check_report(report, "report")
    span = report.get("span") or {}
    cost = span.get("cost") or {}
    if not cost.get("passes") or len(span.get("spans") or ()) != 2:
        return {}
    short, full = span["spans"]
    findings = {}
    for name, measured in cost["passes"].items():
        line = measured.get("fit_kernel_ms")
        rows = {row["span"]: row for row in measured["rows"]}
        if not line or short not in rows or full not in rows:
            continue
        at_short, at_full = rows[short], rows[full]
        predicted = [
            line["fixed_ms"] + line["per_tile_ns"] * 1e-6 * r["work"] for r in (at_short, at_full)
        ]
        found = {
            "fixed_ms": line["fixed_ms"],
            "per_tile_ns": line["per_tile_ns"],
            "r2": line["r2"],
            "short": short,
            "full": full,
            "kernel_speedup": at_full["kernel_ms"] / at_short["kernel_ms"],
            "event_speedup": span.get("speedup", {}).get(name),
            "line_speedup": predicted[1] / predicted[0],
            "fixed_share": line["fixed_ms"] / at_short["kernel_ms"],
        }
        if at_short.get("kernels_ms"):
            found["torch_kernels_ms"] = sum(
                ms
                for kernel, ms in at_short["kernels_ms"].items()
                if not _COURSE_KERNEL.fullmatch(kernel)
            )
        findings[name] = found
    return findings


def _design_table(report: Dict[str, object]) -> str:
    """The winner of each design comparison and by how much it won."""
    design = report.get("design") or {}
    lines = []
    for question, answer in design.items():
        if not isinstance(answer, dict):
            continue
        for c in answer.get("comparisons", []):
            if c.get("winner") is None:
                continue
            lines.append(
                _row(
                    question,
                    c["length"],
                    c["head_dim"],
                    "yes" if c["causal"] else "no",
                    _pass_words(c["pass"]),
                    c["winner"],
                    _times(c["by"]),
                )
            )
    if not lines:
        return ""
    return _table(
        f"Design questions on {design['target']}, float16 (`by`: the runner-up's time over"
        " the winner's)",
        report,
        ("question", "L", "d_k", "causal", "pass", "winner", "by"),
        lines,
    )


def masks_markdown(report: Dict[str, object]) -> str:
    """Chapter 11's three masks on the report's GPU: FlexAttention compiled beside SDPA and the
    tiled attention, as a Markdown table ("" where the report has no such section)."""
    report = _check_report(report, "report")
    masks = report.get("masks") or {}
    if not masks.get("rows"):
        return ""
    lines = [
        _row(
            row["mask"],
            f"{row['kept']} of {row['total']}",
            _number(row["flex_ms"], ".3f"),
            _number(row["sdpa_ms"], ".3f"),
            _number(row["tiled_ms"], ".3f"),
            _number(row["flex_over_sdpa"], ".2f"),
        )
        for row in masks["rows"]
    ]
    return _table(
        f"Chapter 11's masks at L = {masks['length']}, {masks['num_heads']} heads,"
        f" d_k = {masks['head_dim']}, {masks['dtype']}: one FlexAttention program, "
        + (
            f"compiled ({_number(masks['compile_s'])} s to compile, not in the times)"
            if masks.get("compiled")
            else f"run eagerly ({masks.get('note') or 'not compiled'})"
        ),
        report,
        ("mask", "blocks kept", "FlexAttention (ms)", "SDPA (ms)", "tiled (ms)", "flex / SDPA"),
        lines,
    )


def _skipped_lines(report: Dict[str, object]) -> str:
    skipped = report["skipped"]
    if not skipped:
        return ""
    return "\n".join(
        ["Not measured:", *(f"- {entry['what']}: {entry['reason']}" for entry in skipped)]
    )


def targets_markdown(report: Dict[str, object]) -> str:
    """The report's targets as a Markdown table: threshold, measured value and whether it is met."""
    report = _check_report(report, "report")
    verdict = {True: "met", False: "missed", None: "not measured"}
    lines = []
    for target in report["targets"]:
        measured = target["measured"]
        shown = f"{measured:.2f}" if isinstance(measured, float) else str(measured)
        lines.append(
            _row(
                target["name"],
                target["threshold"],
                "–" if measured is None else shown,
                verdict[target["met"]],
            )
        )
    header = ("target", "threshold", "measured", "result")
    return _table("#### Targets", report, header, lines) + "\n"
