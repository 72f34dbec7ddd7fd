"""Chapter 10's compile results, read: what the compiler made of the kernels on five GPUs.

The results (:data:`RESULTS`, in ``attncourse/results``) were made without a GPU by the
repository's compile harness (``python tools/kernel_compile``, ``make compile-matrix``), which
compiles each kernel exactly as the launcher specialises it for each target: shared memory per
block against the target's limit, registers and spilled bytes per thread, and what ``tl.dot``
became (tensor-core instructions or not). This module only reads them: it needs neither triton
nor a GPU. Nothing here is a timing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "RESULTS",
    "load_results",
    "request_kernels",
    "compile_table",
    "target_summary",
    "summary_table",
    "exceeding",
]

#: The committed results' file name in ``attncourse/results``.
RESULTS = "ch10_compile_matrix.json"
_KERNEL_NAMES = {
    "forward": "forward",
    "backward_preprocess": "backward D",
    "backward_dkdv": "backward dK, dV",
    "backward_dq": "backward dQ",
}


def load_results(path: Optional[str] = None) -> Dict[str, Any]:
    """The committed compile results (:data:`RESULTS` in ``attncourse/results``), or ``path``'s."""
    if path is None:
        from importlib.resources import files

        text = files("attncourse").joinpath("results", RESULTS).read_text()
    else:
        text = Path(path).read_text()
    results = json.loads(text)
    if not {"kernels", "rows", "targets"} <= set(results):
        raise ValueError(f"not a compile result (no kernels, rows and targets): {path or RESULTS}")
    return results


def _results(results: Optional[Mapping[str, Any]]) -> Mapping[str, Any]:
    """``results`` (default :func:`load_results`), checked to be compile results."""
    if results is None:
        return load_results()
    if not isinstance(results, Mapping) or not {"kernels", "rows", "targets"} <= set(results):
        raise TypeError(
            "results must be compile results (a dict with kernels, rows and targets, as"
            f" load_results returns), got {type(results).__name__}"
        )
    return results


def request_kernels(
    results: Mapping[str, Any], target: str, variant: str, dtype: str, head_dim: int
) -> Optional[List[Dict[str, Any]]]:
    """The kernel summaries of one request in ``results``; ``None`` where the launcher refused it.

    Raises ``KeyError`` when the request is not in ``results``.
    """
    for row in results["rows"]:
        if (row["target"], row["variant"], row["dtype"], row["head_dim"]) == (
            target,
            variant,
            dtype,
            head_dim,
        ):
            if row["refused"]:
                return None
            return [results["kernels"][k] for k in row["kernels"]]
    raise KeyError(f"no request {(target, variant, dtype, head_dim)} in the results")


def _kib(n: int) -> str:
    return f"{n / 1024:.0f}" if n % 1024 == 0 or n >= 10 * 1024 else f"{n / 1024:.1f}"


def compile_table(
    results: Optional[Mapping[str, Any]] = None,
    *,
    variant: str = "causal",
    dtype: str = "float16",
    head_dim: int = 128,
) -> str:
    """Chapter 10's table: per target and kernel, tiles, shared memory, registers, spills, MMA.

    One request (default: causal, float16, ``d = 128``, the largest tiles) for every target in
    ``results`` (default :func:`load_results`), as a Markdown table. Compiler output, not timings.
    """
    results = _results(results)
    for name, value in (("variant", variant), ("dtype", dtype), ("head_dim", head_dim)):
        choices = sorted({row[name] for row in results["rows"]})
        if isinstance(value, bool) or value not in choices:
            raise ValueError(
                f"{name} must be one of {choices} (the requests compiled), got {value!r}"
            )
    lines = [
        (
            "| GPU (target) | kernel | tile, warps, stages | shared memory per block | registers | "
            "spilled bytes per thread | `tl.dot` became |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for name, target in results["targets"].items():
        kernels = request_kernels(results, name, variant, dtype, head_dim)
        gpu = f"{target['gpus']} ({name})"
        if kernels is None:
            lines.append(f"| {gpu} | refused by the launcher | | | | | |")
            continue
        for k in kernels:
            if "error" in k:
                lines.append(f"| {gpu} | compile error | | | | | |")
                continue
            if k["kernel"] == "backward_preprocess":
                continue  # a row-wise sum: no tiles of scores, no tl.dot
            m, n, _ = k["blocks"]
            limit = target["shared_per_block"]
            fits = "" if k["shared"] <= limit else " **too much**"
            lines.append(
                f"| {gpu} | {_KERNEL_NAMES.get(k['kernel'], k['kernel'])} | {m}x{n}, "
                f"{k['num_warps']}, {k['num_stages']} | {_kib(k['shared'])} of {_kib(limit)} KiB"
                f"{fits} | {k['registers']} | "
                f"{k['spill_stores']} | {k['tensor_cores']} |"
            )
    return "\n".join(lines)


def target_summary(results: Optional[Mapping[str, Any]] = None) -> List[Dict[str, Any]]:
    """Per target, over every request in ``results``: what compiled, what fits, what spills.

    Each dict: ``target``, ``gpus``, ``requests``, ``refused`` (the refused dtypes),
    ``errors``, ``fit`` (requests whose kernels all fit the shared memory), ``max_shared``
    (bytes), ``shared_limit``, ``half_spill_free`` and ``half`` (float16/bfloat16 requests with
    no spilled byte, and all of them), ``tensor_cores`` (what ``tl.dot`` became in float16 and
    in float32).
    """
    results = _results(results)
    out = []
    for name, target in results["targets"].items():
        rows = [r for r in results["rows"] if r["target"] == name]
        refused = sorted({r["dtype"] for r in rows if r["refused"]})
        compiled = [[results["kernels"][k] for k in r["kernels"]] for r in rows if not r["refused"]]
        errors = sum(any("error" in k for k in ks) for ks in compiled)
        good = [
            (r, [results["kernels"][k] for k in r["kernels"]])
            for r in rows
            if not r["refused"] and not any("error" in results["kernels"][k] for k in r["kernels"])
        ]
        half = [ks for r, ks in good if r["dtype"] in ("float16", "bfloat16")]
        kinds = {}
        for dtype in ("float16", "float32"):
            kinds[dtype] = sorted(
                {
                    k["tensor_cores"]
                    for r, ks in good
                    if r["dtype"] == dtype
                    for k in ks
                    if k["kernel"] != "backward_preprocess"
                }
            )
        out.append(
            {
                "target": name,
                "gpus": target["gpus"],
                "requests": len(rows),
                "refused": refused,
                "errors": errors,
                "fit": sum(
                    all(k["shared"] <= target["shared_per_block"] for k in ks) for _, ks in good
                ),
                "compiled": len(good),
                "max_shared": max((k["shared"] for _, ks in good for k in ks), default=0),
                "shared_limit": target["shared_per_block"],
                "half_spill_free": sum(all(k["spill_stores"] == 0 for k in ks) for ks in half),
                "half": len(half),
                "max_spill": max((k["spill_stores"] for _, ks in good for k in ks), default=0),
                "tensor_cores": kinds,
            }
        )
    return out


def exceeding(results: Optional[Mapping[str, Any]] = None) -> List[Dict[str, Any]]:
    """The kernels in ``results`` whose block needs more shared memory than their GPU has.

    One dict per (request, kernel): ``target``, ``variant``, ``dtype``, ``head_dim``,
    ``kernel``, ``shared`` and ``limit`` (bytes). Such a launch fails with ``OutOfResources``.
    """
    results = _results(results)
    out = []
    for row in results["rows"]:
        limit = results["targets"][row["target"]]["shared_per_block"]
        for k in map(results["kernels"].get, row["kernels"]):
            if "error" not in k and k["shared"] > limit:
                out.append(
                    {
                        **{f: row[f] for f in ("target", "variant", "dtype", "head_dim")},
                        "kernel": k["kernel"],
                        "shared": k["shared"],
                        "limit": limit,
                    }
                )
    return out


def summary_table(results: Optional[Mapping[str, Any]] = None) -> str:
    """:func:`target_summary` as a Markdown table, one line per target."""
    lines = [
        (
            "| GPU (target) | requests compiled | fit in shared memory | largest block | "
            "float16 or bfloat16 without spills | most spilled per thread | "
            "`tl.dot` in float16 / float32 |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for t in target_summary(results):
        refused = f" ({', '.join(t['refused'])} refused)" if t["refused"] else ""
        errors = f", {t['errors']} failed" if t["errors"] else ""
        lines.append(
            f"| {t['gpus']} ({t['target']}) | {t['compiled']} of {t['requests']}{refused}"
            f"{errors} | {t['fit']} of {t['compiled']} | {_kib(t['max_shared'])} of "
            f"{_kib(t['shared_limit'])} KiB | "
            f"{t['half_spill_free']} of {t['half']} | {t['max_spill']} B | "
            f"{', '.join(t['tensor_cores']['float16'])} / "
            f"{', '.join(t['tensor_cores']['float32'])} |"
        )
    return "\n".join(lines)
