"""Chapter 11's measurement: compiled FlexAttention against torch's SDPA and the package's tiled
attention, for three masks of one program, timed side by side in one run.

:func:`time_flex_against_sdpa` takes the device, so that the same code measures the CPU (the
chapter) and a GPU (the GPU check). The three masks are one mask_mod, causal attention within a
window and within a document, whose window and document ids are captured tensors: plain
causal attention (a window of ``L``, one document), a sliding window, and documents packed
into one row. One compile therefore serves all three, and its time is reported apart from
the run times.
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch
import torch.nn.functional as F

from .._checks import check_positive_ints, check_seed, require_floating_dtype, require_positive_int
from ..attention import scaled_dot_product_attention
from ..efficient import tiled_attention
from ..flex import (
    and_masks,
    block_counts,
    compile_flex,
    create_block_mask,
    document_ids,
    document_mask_mod,
    flex_available,
    sliding_window_mask_mod,
)
from ..kv_cache import sliding_window_mask
from .common import _require_device
from .measure import time_interleaved

__all__ = ["time_flex_against_sdpa", "flex_timing_table"]

#: The masks timed, in order.
MASKS = ("causal", "sliding window", "documents")


def _document_lengths(length: int, count: int, generator: torch.Generator) -> List[int]:
    """``count`` random document lengths that add up to ``length`` (each at least 1)."""
    cuts = torch.randperm(length - 1, generator=generator)[: count - 1] + 1
    edges = [0] + sorted(cuts.tolist()) + [length]
    return [b - a for a, b in zip(edges, edges[1:])]


def time_flex_against_sdpa(
    device,
    *,
    length: int = 2048,
    num_heads: int = 4,
    head_dim: int = 64,
    window: int = 256,
    documents: int = 8,
    dtype: torch.dtype = torch.float32,
    block_size: int = 128,
    repeats: int = 9,
    warmup: int = 1,
    seed: int = 0,
) -> Dict[str, Any]:
    """Compile FlexAttention once, check it against the package, and time it beside SDPA.

    Three masks of ``L = S = length`` (batch 1, ``num_heads`` heads of ``head_dim``): causal, a
    causal sliding ``window``, and ``documents`` random documents packed into the row (causal
    within each). For each: FlexAttention compiled (:func:`attncourse.flex.compile_flex`, its
    eager mode where compiling fails), torch's SDPA computing the same output (``is_causal``
    for causal, the dense boolean mask otherwise) and the package's ``tiled_attention`` (causal,
    ``block_size`` tiles, the dense mask on top), timed round-robin in one
    ``time_interleaved`` call so that every ratio shares the machine's load. The medians are of
    ``repeats`` runs: nine by default, so that a neighbour that slows four runs of one kernel
    does not move its median (five were not enough on a 2-core machine building the book).

    Returns ``{"device", "threads", "compiled", "note", "compile_s", "first_call_s", "length",
    "num_heads", "head_dim", "dtype", "document_lengths", "rows"}``: ``compile_s`` is the
    first call's time less one run's; each row has ``mask``, ``kept`` and ``total`` blocks,
    ``sparsity`` (skipped / total), ``max_error`` (FlexAttention's output against
    ``attncourse.scaled_dot_product_attention`` with the same mask), the medians ``flex_ms``,
    ``sdpa_ms`` and ``tiled_ms``, and ``flex_over_sdpa`` and ``flex_over_tiled``.
    """
    device = _require_device("device", device)
    length, num_heads, head_dim, window, documents, block_size = check_positive_ints(
        length=length,
        num_heads=num_heads,
        head_dim=head_dim,
        window=window,
        documents=documents,
        block_size=block_size,
    )
    require_floating_dtype("dtype", dtype)
    require_positive_int("repeats", repeats)
    require_positive_int("warmup", warmup)
    if documents > length:
        raise ValueError(f"documents={documents} must not exceed length={length}")
    available, why = flex_available()
    if not available:
        raise RuntimeError(why)
    g = torch.Generator().manual_seed(check_seed("seed", seed))
    q, k, v = (
        torch.randn(1, num_heads, length, head_dim, generator=g).to(device=device, dtype=dtype)
        for _ in range(3)
    )
    lengths = _document_lengths(length, documents, g)
    one_document = torch.zeros(length, dtype=torch.long, device=device)
    packed = document_ids(lengths).to(device)
    settings = {  # (window, document ids): one program, three settings of its captured tensors
        "causal": (length, one_document),
        "sliding window": (window, one_document),
        "documents": (length, packed),
    }
    block_masks, scores_mask = {}, {}
    for name, (width, document) in settings.items():
        program = and_masks(
            sliding_window_mask_mod(length, window=width, device=device),
            document_mask_mod(document),
        )
        block_masks[name] = create_block_mask(
            program, None, None, length, length, device=device, BLOCK_SIZE=block_size
        )
        # the reference's (L, S) mask, from the package's masks, not from the program
        same_document = document[:, None] == document[None, :]
        scores_mask[name] = sliding_window_mask(length, window=width, device=device) & same_document
    kernel = compile_flex(q, k, v, block_mask=block_masks["causal"])

    def flex(name):
        return lambda: kernel.attention(q, k, v, block_mask=block_masks[name])

    def sdpa(name):
        if name == "causal":
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=scores_mask[name])

    def tiled(name):
        mask = None if name == "causal" else scores_mask[name]
        return lambda: tiled_attention(
            q, k, v, mask, causal=True, block_m=block_size, block_n=block_size
        )

    errors = {}
    with torch.no_grad():
        for name in MASKS:
            reference, _ = scaled_dot_product_attention(q, k, v, scores_mask[name])
            errors[name] = float((flex(name)() - reference).abs().max())
        fns = {}
        for name in MASKS:
            fns[f"flex {name}"] = flex(name)
            fns[f"sdpa {name}"] = sdpa(name)
            fns[f"tiled {name}"] = tiled(name)
        timings = time_interleaved(fns, repeats=repeats, warmup=warmup, device=device)
    rows = []
    for name in MASKS:
        counts = block_counts(block_masks[name])
        flex_ms, sdpa_ms, tiled_ms = (
            1e3 * timings[f"{impl} {name}"].median for impl in ("flex", "sdpa", "tiled")
        )
        rows.append(
            {
                "mask": name,
                "kept": counts["kept"],
                "total": counts["total"],
                "sparsity": counts["skipped"] / counts["total"],
                "max_error": errors[name],
                "flex_ms": flex_ms,
                "sdpa_ms": sdpa_ms,
                "tiled_ms": tiled_ms,
                "flex_over_sdpa": flex_ms / sdpa_ms,
                "flex_over_tiled": flex_ms / tiled_ms,
            }
        )
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "compiled": kernel.compiled,
        "note": kernel.note,
        "first_call_s": kernel.first_call_s,
        "compile_s": max(kernel.first_call_s - rows[0]["flex_ms"] / 1e3, 0.0),
        "length": length,
        "num_heads": num_heads,
        "head_dim": head_dim,
        "dtype": str(dtype).removeprefix("torch."),
        "document_lengths": lengths,
        "rows": rows,
    }


def flex_timing_table(result: Dict[str, Any]) -> str:
    """The rows of :func:`time_flex_against_sdpa` as a printable table, one line per mask."""
    if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
        raise TypeError(
            "result must be the dict time_flex_against_sdpa returns (with its 'rows'), got"
            f" {type(result).__name__}"
        )
    # within the 80 columns of a chapter's output
    lines = [
        f"{'mask':<14} {'blocks':>7} {'error':>7} {'flex ms':>7} "
        f"{'SDPA ms':>7} {'tiled ms':>8} {'flex/SDPA':>9} {'flex/tiled':>10}"
    ]
    for row in result["rows"]:
        blocks = f"{row['kept']}/{row['total']}"
        lines.append(
            f"{row['mask']:<14} {blocks:>7}"
            f" {row['max_error']:>7.1e} {row['flex_ms']:>7.1f} {row['sdpa_ms']:>7.1f}"
            f" {row['tiled_ms']:>8.1f} {row['flex_over_sdpa']:>9.2f}"
            f" {row['flex_over_tiled']:>10.2f}"
        )
    return "\n".join(lines)
