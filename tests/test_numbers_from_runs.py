"""No measured number is typed in a chapter's prose: each comes from the chapter's own run.

A number in a chapter's Markdown that looks measured (it has decimals, or a unit of a
measurement: ``%``, ``ms``, ``s``, ``x``/``×``/``times``, ``nats``, ``GB``...) must be one of:

* a number the executed chapter printed (``_build/executed/book/<chapter>.ipynb``, written by
  ``tools/execute_book.py``, which ``make book`` runs first; ``NUMBERS_EXECUTED_DIR`` names
  another folder of the same layout), as printed or rounded to the prose's digits (a fraction
  printed as ``0.976`` is ``97.6 %``, seconds are ``ms`` too);
* a value of a committed result that the chapter quotes (``attncourse/results/chNN_*.json``,
  or another result whose name its code mentions; chapter 10's GPU reports);
* a literal of the chapter's own code cells: an input (``steps=400``) or a bound that a cell
  asserts (``> 0.95``), which the notebook checks on every run;
* in a sentence or table row that cites a source (``{cite:p}``): the source's number;
* or an entry of :data:`ALLOWED` (or a table of :data:`PUBLISHED_TABLES`), with the reason it is
  not a measurement.

A chapter whose executed copy is missing, or whose code differs from the page's (a stale
execution), is skipped with the reason. Numbers a run gives change from run to run and machine
to machine: the prose says what holds (and what the cells assert) and points at the printed
output for the values, so that the page never shows a number that the run beside it contradicts.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

import pytest
from helpers import CHAPTERS, ROOT

RESULTS = ROOT / "attncourse" / "results"

#: (chapter stem or "*", the number as typed, the words just before it): why it is no
#: measurement of a run. Keep each reason honest: a definition, a constant from a paper or a
#: manual, a size that is an input.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("06_inference", "6.7", "Llama 2 7B's"): "Llama 2 7B's parameter count (its paper)",
    (
        "06_inference",
        "13.4",
        "take about",
    ): "Llama 2 7B's weights in 16-bit precision: 6.7e9 x 2 B = 13.4e9 B",
    ("07_complexity", "320", "a few TB/s ("): "the T4's memory bandwidth, from NVIDIA's data sheet",
    ("02_multi_head_attention", "0.16", "predict it:\n0, about"): "an exercise's answer choices",
    ("10_gpu_attention", "8.9", "from 8.0 to"): "compute capabilities: names of GPU generations",
    ("10_gpu_attention", "0.9", "the forward at least"): "a target the course sets, not a result",
}

#: (chapter stem, Markdown cell id): why the rows of its Markdown tables are no measurement of
#: a run. Only the table rows (lines starting with "|") are exempt, not the cell's prose.
PUBLISHED_TABLES: dict[tuple[str, str], str] = {
    ("08_adaptive_span", "3b076e4b"): "the adaptive-span paper's published bpc (its tables 1-2)",
    ("09_all_attention", "dc8a752b"): "the all-attention paper's published results",
}

UNIT = (
    r"(?P<unit>%|ms\b|µs\b|us\b|ns\b|s\b|seconds?\b|minutes?\b|min\b|×|x\b|times\b|nats?\b"
    r"|GB\b|GiB\b|MB\b|MiB\b|KiB\b|kB\b|[GT]?FLOP/s\b|GB/s\b)"
)
NUMBER = r"(?<![\w.,$])(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?(?![\w.]\d)"
CONNECTOR = re.compile(r"\s*(?:,\s*(?:and\s+|or\s+)?|and|or|to|/|-|–|—)\s*")
#: words before a number that make it a name, not a quantity
NAMES = re.compile(
    r"(?:section|chapter|chapters|figure|fig\.|exercise|table|equation|python|torch|triton"
    r"|version|numpy|cuda|sm_|llama|gpt-?|step|steps|layer|head|seed|seeds|nbformat)\s*$",
    re.I,
)


def prose(markdown: str) -> str:
    """The prose of a Markdown cell: no math, code, roles, links' targets, labels or options."""
    text = re.sub(r"<!--.*?-->", " ", markdown, flags=re.S)
    text = re.sub(r"^(```+|:::+)[^\n]*$", "\n", text, flags=re.M)  # directive fences stay prose
    text = re.sub(r"^:[\w-]+:.*$", " ", text, flags=re.M)  # directive options (:label: x)
    text = re.sub(r"\$\$.*?\$\$(\s*\([\w-]+\))?", " ", text, flags=re.S)
    text = re.sub(r"(?<!\\)\$[^$\n]+?(?<!\\)\$", " ", text)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", text)  # roles: {term}, {cite:p}, {numref}, {math}
    text = re.sub(r"``.*?``|`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # a link's target
    text = re.sub(r"^\([\w-]+\)=\s*$", " ", text, flags=re.M)  # labels
    text = re.sub(r"https?://\S+", " ", text)
    # indented code blocks (four spaces after a blank line)
    return re.sub(r"(?:(?<=\n\n)|^)(?: {4}[^\n]*\n?)+", " ", text)


def uncited(markdown: str) -> str:
    """``markdown`` without its sentences and table rows that cite a source (``{cite:p}``): a
    number there is the source's (a data sheet's bandwidth, a paper's result)."""
    pieces = re.split(r"(?<=[.!?;])\s+|\n\n|\n(?=\|)|(?<=\|)\n", markdown)
    return "\n\n".join(piece for piece in pieces if "{cite:" not in piece)


def typed_numbers(markdown: str) -> list[dict]:
    """The numbers of ``markdown``'s prose that look measured, each with its unit and context."""
    text = prose(markdown)
    found = []
    for m in re.finditer(NUMBER + r"(?P<space>\s?)" + UNIT + "?", text):
        unit = m.group("unit") or ""
        found.append(
            {
                "text": m.group(0).strip(),
                "number": m.group("int") + (f".{m.group('frac')}" if m.group("frac") else ""),
                "decimals": len(m.group("frac") or ""),
                "unit": unit,
                "start": m.start(),
                "end": m.end(),
                "before": text[max(0, m.start() - 40) : m.start()],
            }
        )
    # a unit after the last of "8 and 28 ms", "98.7/46.8 %", "0.28 to 0.38" covers them all;
    # decimals in a list ("28, 14.5, 14.7 and 32") make the whole list measured
    groups: list[list[dict]] = []
    for f in found:
        if groups and CONNECTOR.fullmatch(text[groups[-1][-1]["end"] : f["start"]]):
            groups[-1].append(f)
        else:
            groups.append([f])
    measured = []
    for group in groups:
        unit = next((f["unit"] for f in reversed(group) if f["unit"]), "")
        named = [bool(NAMES.search(f["before"])) for f in group]
        decimal = any(f["decimals"] for f, name in zip(group, named) if not name)
        for f, name in zip(group, named):
            f["unit"] = f["unit"] or unit
            if name or not (f["unit"] or decimal):
                continue
            if f["unit"] in ("times",) and not f["decimals"] and int(f["number"]) < 2:
                continue
            measured.append(f)
    return measured


_FLOAT = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def numbers_in(text: str) -> set[float]:
    values = set()
    for m in _FLOAT.finditer(text):
        try:
            values.add(abs(float(m.group(0).replace(",", ""))))
        except ValueError:
            pass
    return values


def _leaves(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [abs(float(value))]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)] + [
            x for k in value for x in _leaves(_as_number(k))
        ]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return []


def _as_number(key: str):
    try:
        return float(key)
    except ValueError:
        return None


def committed_files(page: Path, code: str) -> list[Path]:
    """The committed results ``page`` quotes: ``chNN_*.json`` of its chapter, the other results
    whose name its code mentions (``constants_cpu.json`` through ``load_constants``), and the
    GPU reports where it reads them (``gpu_report``)."""
    prefix = f"ch{page.stem[:2]}_"
    files = [
        path
        for path in sorted(RESULTS.glob("*.json"))
        if path.name.startswith(prefix)
        or (not path.name.startswith("ch") and path.stem.split("_cpu")[0] in code)
    ]
    if "gpu_report" in code:
        files += sorted((ROOT / "reports" / "gpu").glob("*.json"))
    return files


@cache
def committed_values(path: Path) -> frozenset[float]:
    return frozenset(_leaves(json.loads(path.read_text())))


def executed_dir() -> Path:
    return Path(os.environ.get("NUMBERS_EXECUTED_DIR", ROOT / "_build" / "executed"))


def executed(page: Path) -> tuple[dict | None, str]:
    """The executed copy of ``page``, or None and why it cannot be used."""
    copy = executed_dir() / "book" / page.name
    if not copy.is_file():
        return None, f"{copy} is missing: run tools/execute_book.py (make book runs it)"
    run, source = json.loads(copy.read_text()), json.loads(page.read_text())

    def code(nb):
        return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]

    if code(run) != code(source):
        return None, f"{copy} is stale: its code cells differ from {page.name}'s"
    return run, ""


def outputs_text(nb: dict) -> str:
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append("".join(out["text"]))
            data = out.get("data", {})
            for kind in ("text/plain", "text/markdown", "text/html"):
                if kind in data:
                    parts.append("".join(data[kind]))
    return "\n".join(parts)


def scales(unit: str) -> tuple[float, ...]:
    return {"%": (1, 100), "ms": (1, 1e3), "µs": (1, 1e6), "us": (1, 1e6), "ns": (1, 1e9)}.get(
        unit, (1,)
    )


def unexplained(page: Path, run: dict) -> list[str]:
    """Each measured-looking number of ``page``'s prose that no output, result, code or allowance
    explains, as "cell N: 'context'"."""
    source = json.loads(page.read_text())
    code = "\n".join("".join(c["source"]) for c in source["cells"] if c["cell_type"] == "code")
    values = numbers_in(outputs_text(run)) | numbers_in(code)
    for path in committed_files(page, code):
        values |= committed_values(path)
    problems = []
    for i, cell in enumerate(source["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        if (page.stem, cell.get("id")) in PUBLISHED_TABLES:
            text = re.sub(r"^\|.*$", " ", text, flags=re.M)
        for f in typed_numbers(uncited(text)):
            if any(
                (stem in ("*", page.stem))
                and number == f["number"]
                and f["before"].rstrip().endswith(words)
                for (stem, number, words) in ALLOWED
            ):
                continue
            p = float(f["number"].replace(",", ""))
            half = 0.5 * 10 ** -f["decimals"] + 1e-9
            if any(abs(v * s - p) <= half for v in values for s in scales(f["unit"])):
                continue
            context = (f["before"][-30:] + f["text"]).replace("\n", " ")
            problems.append(f"cell {i}: {f['text']!r} in '...{context}'")
    return problems


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.stem)
def test_every_measured_number_in_the_prose_comes_from_the_run(page):
    run, why = executed(page)
    if run is None:
        pytest.skip(why)
    problems = unexplained(page, run)
    assert not problems, (
        f"{page.name}: numbers typed in the prose that match no output of the executed chapter,"
        " no committed result and no literal of its code (print them in a cell and point the"
        " text at the output, or add a reasoned entry to ALLOWED):\n  " + "\n  ".join(problems)
    )


def test_the_extraction_finds_measured_numbers_and_leaves_names_and_math():
    found = typed_numbers(
        "In our run **95.8%** (heads 98.7/46.8 %), 40 s of training, between 8 and 28 ms,"
        " a speed-up of 1.1, spans 28, 14.5 and 32, 150 times faster, a 32x gain.\n"
        "Section 6.5, chapter 4, $d_k = 0.125$, `x = 2.5`, {numref}`fig-3.2`, Python 3.11,"
        " 400 steps, 2 heads, 20 numbers."
    )
    assert [f["number"] for f in found] == [
        "95.8", "98.7", "46.8", "40", "8", "28", "1.1", "28", "14.5", "32", "150", "32",
    ]  # fmt: skip
    assert [f["unit"] for f in found][:6] == ["%", "%", "%", "s", "ms", "ms"]


def test_a_typed_number_is_explained_by_an_output_rounded_or_scaled(tmp_path):
    page = tmp_path / "99_x.ipynb"
    cell = {"cell_type": "markdown", "metadata": {}, "source": "about 97.6 % and 12 ms, not 3.3"}
    code = {"cell_type": "code", "metadata": {}, "source": "print(x)", "outputs": []}
    page.write_text(json.dumps({"cells": [cell, code]}))
    run = {
        "cells": [
            cell,
            dict(code, outputs=[{"output_type": "stream", "text": "0.9761 0.01204"}]),
        ]
    }
    problems = unexplained(page, run)
    assert len(problems) == 1 and "'3.3'" in problems[0]
    cited = "It runs at 1.5 ms.\nThe paper reaches 73% {cite:p}`x2023`, or 2.5 ms.\n\n| T4 | 8.1 |"
    assert uncited(cited).split() == ["It", "runs", "at", "1.5", "ms.", "|", "T4", "|", "8.1", "|"]
