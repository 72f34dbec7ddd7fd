"""Chapter 5's comparison of positional encodings: one model, five ways to give it positions.

The same small character-level GPT (chapter 5's configuration by default) is trained on the
shipped Shakespeare text with no positions, learned or sinusoidal vectors added to the tokens,
rotary embeddings (RoPE) or ALiBi's bias inside attention, from the same seed, on the same
batches, and scored on the same validation windows. It is a loss, not a timing: the machine's
load changes how long it takes, not the numbers (one torch thread, seeded).

``python -m attncourse.benchmarks.positions`` writes ``ch05_positions.json`` to the working
directory (or ``--output``); the committed one, which chapter 5 prints, is read by
:func:`load_positions`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from .._checks import check_positive_ints, check_seed
from ..course.runtime import set_threads
from ..course.text import CharTokenizer, get_batch, load_text, train_val_split
from ..training import train
from ..transformer import POSITIONAL, CausalLM
from .common import _require_choice, command_line, machine, read_result, write_result

__all__ = [
    "ENCODINGS",
    "train_positional",
    "compare_positions",
    "load_positions",
    "positions_table",
]

#: The encodings compared, in the order of the chapter's table.
ENCODINGS = ("none", "learned", "sinusoidal", "rope", "alibi")
NAME = "ch05_positions.json"
_MODEL = dict(d_model=64, num_heads=4, d_ff=256, num_layers=2, context=64)


def _window_loss(model: nn.Module, window: torch.Tensor) -> torch.Tensor:
    """``(B, context + 1)`` windows: predict ``window[:, 1:]`` from ``window[:, :-1]``."""
    logits = model(window[:, :-1])
    return nn.functional.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())


def train_positional(
    positional: str,
    *,
    seed: int = 0,
    steps: int = 500,
    d_model: int = 64,
    num_heads: int = 4,
    d_ff: int = 256,
    num_layers: int = 2,
    context: int = 64,
    batch_size: int = 32,
    lr: float = 3e-3,
    val_batches: int = 8,
) -> float:
    """Train a pre-LN :class:`attncourse.transformer.CausalLM` with ``positional`` and return its
    validation loss (nats per character, the mean over ``val_batches`` batches of 64 windows).

    ``seed`` sets the initialisation and the training batches; the validation windows are the
    same for every seed and encoding.
    """
    _require_choice("positional", positional, POSITIONAL)
    check_seed("seed", seed)
    check_positive_ints(
        steps=steps,
        d_model=d_model,
        num_heads=num_heads,
        d_ff=d_ff,
        num_layers=num_layers,
        context=context,
        batch_size=batch_size,
        val_batches=val_batches,
    )
    text = load_text()
    tokenizer = CharTokenizer(text)
    train_ids, val_ids = train_val_split(tokenizer.encode(text))
    torch.manual_seed(seed)
    model = CausalLM.standard(
        tokenizer.vocab_size,
        d_model=d_model,
        num_heads=num_heads,
        d_ff=d_ff,
        num_layers=num_layers,
        max_len=context,
        norm_first=True,
        positional=positional,
    )
    generator = torch.Generator().manual_seed(seed)
    train(
        model,
        lambda step: get_batch(train_ids, context + 1, batch_size, generator),
        _window_loss,
        steps=steps,
        # foreach: one call per step for all parameters (same numbers, less Python on a CPU)
        optimizer=torch.optim.AdamW(model.parameters(), lr=lr, foreach=True),
        progress=False,
    )
    val_gen = torch.Generator().manual_seed(123)
    with torch.no_grad():
        losses = [
            _window_loss(model, get_batch(val_ids, context + 1, 64, val_gen)).item()
            for _ in range(val_batches)
        ]
    return sum(losses) / len(losses)


def compare_positions(
    *, seeds: Sequence[int] = (0, 1, 2), steps: int = 1000, encodings: Sequence[str] = ENCODINGS
) -> Dict[str, object]:
    """Train every encoding with every seed (chapter 5's model, one torch thread); returns the
    result :func:`positions_table` prints: the configuration, the machine, each run's
    validation loss and, per encoding, the mean and the standard deviation over the seeds."""
    seeds = [check_seed("seeds", s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    for e in encodings:
        _require_choice("encodings", e, ENCODINGS)
    set_threads(1)
    info = machine("cpu")
    start = time.perf_counter()
    runs: Dict[str, Dict[str, float]] = {e: {} for e in encodings}
    for seed in seeds:
        for e in encodings:
            runs[e][str(seed)] = train_positional(e, seed=seed, steps=steps)
    summary = {
        e: {
            "mean": statistics.fmean(losses.values()),
            "std": statistics.stdev(losses.values()) if len(losses) > 1 else 0.0,
            "min": min(losses.values()),
            "max": max(losses.values()),
        }
        for e, losses in runs.items()
    }
    if hasattr(os, "getloadavg"):
        info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "what": "validation loss (nats per character) of chapter 5's GPT per positional encoding",
        "command": command_line("attncourse.benchmarks.positions"),
        "model": dict(_MODEL, norm_first=True, batch_size=32, lr=3e-3, optimizer="AdamW"),
        "steps": steps,
        "seeds": seeds,
        "machine": info,
        "seconds": round(time.perf_counter() - start, 1),
        "runs": runs,
        "summary": summary,
    }


def load_positions(folder=None) -> Dict[str, object]:
    """The committed comparison (``ch05_positions.json``), or the one in ``folder``."""
    return read_result(NAME, folder)


def positions_table(result: Dict[str, object]) -> str:
    """The comparison as a text table: each encoding's mean validation loss, its spread (the
    standard deviation over the seeds) and its range, best first."""
    if not isinstance(result, dict) or "summary" not in result:
        raise TypeError("result must be a dict from compare_positions() or load_positions()")
    summary = result["summary"]
    rows: List[str] = [f"{'encoding':<12}{'mean':>8}{'std':>8}{'min':>8}{'max':>8}"]
    for e in sorted(summary, key=lambda e: summary[e]["mean"]):
        s = summary[e]
        rows.append(f"{e:<12}{s['mean']:>8.3f}{s['std']:>8.3f}{s['min']:>8.3f}{s['max']:>8.3f}")
    return "\n".join(rows)


def main(argv: Optional[List[str]] = None) -> Path:
    """``python -m attncourse.benchmarks.positions [--steps N] [--seeds ...] [--output DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m attncourse.benchmarks.positions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    result = compare_positions(seeds=args.seeds, steps=args.steps)
    path = write_result(result, args.output, NAME)
    print(positions_table(result))
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
