"""A synthetic language that needs a fixed lookup table (chapter 9's experiment).

Each token is read off a fixed random table indexed by the two tokens before it::

    x_t = TABLE[x_{t-1}, x_{t-2}]   with probability 1 - noise,
    x_t ~ uniform over the vocabulary otherwise.

Attention can fetch ``x_{t-1}`` and ``x_{t-2}`` from the context, but the table itself is
knowledge about the task that no context holds: a model must store its ``V^2`` entries in
its weights, in a feed-forward layer or in persistent memory vectors.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

import torch
from torch import Tensor

from .._checks import (
    SEED_RANGE,
    check_seed,
    fmt_shape,
    require_non_negative_int,
    require_positive_int,
    require_tensor,
    require_token_ids,
)
from ..all_attention import AllAttentionBlock, count_parameters
from ..benchmarks.common import command_line, machine
from ..training import next_token_loss, train
from ..transformer import CausalLM, TransformerBlock
from .text import _check_fraction, _require_float_size, _require_generator, _seeded

__all__ = [
    "make_table",
    "lookup_sequences",
    "lookup_entropy",
    "MODEL_KINDS",
    "build_lookup_model",
    "compare_on_lookup",
    "load_seed_results",
    "time_training_steps",
    "load_step_times",
]


def make_table(vocab_size: int, *, generator: Optional[torch.Generator] = None) -> Tensor:
    """A random table ``(V, V)`` of token ids: ``TABLE[a, b]`` follows the pair ``(b, a)``."""
    require_positive_int("vocab_size", vocab_size)
    _require_generator("generator", generator)
    vocab_size = int(vocab_size)
    return torch.randint(vocab_size, (vocab_size, vocab_size), generator=generator)


def _check_noise(noise: object) -> float:
    return _check_fraction("noise", noise, closed=True, kind="a probability")


def lookup_sequences(
    table: Tensor,
    num_sequences: int,
    length: int,
    *,
    noise: float = 0.2,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    """Sample ``(num_sequences, length)`` token sequences of the lookup language.

    Args:
        table: ``(V, V)`` integer table from :func:`make_table`: token ids in ``[0, V)``.
        num_sequences: ``B``.
        length: ``L >= 3``; the first two tokens of each sequence are uniform.
        noise: probability that a token is uniform instead of read from the table.
        generator: for reproducible samples.
    """
    require_tensor("table", table)
    if table.is_floating_point() or table.is_complex() or table.dtype == torch.bool:
        raise TypeError(
            f"table must be a square integer tensor (V, V), got {table.dtype}"
            f" {fmt_shape(table.shape)}"
        )
    if table.dim() != 2 or table.size(0) != table.size(1):
        raise ValueError(
            f"table must be a square integer tensor (V, V), got {table.dtype}"
            f" {fmt_shape(table.shape)}"
        )
    if table.numel() == 0:
        raise ValueError(f"table must be non-empty (V >= 1), got shape {fmt_shape(table.shape)}")
    vocab = table.size(0)
    require_token_ids("table", table, vocab)
    require_positive_int("num_sequences", num_sequences)
    require_positive_int("length", length)
    num_sequences, length = int(num_sequences), int(length)
    if length < 3:
        raise ValueError(
            f"length must be at least 3 (two free tokens, then the table), got {length}"
        )
    noise = _check_noise(noise)
    _require_generator("generator", generator)
    # the noise, and x_0, x_1
    tokens = torch.randint(vocab, (num_sequences, length), generator=generator)
    use_table = torch.rand(num_sequences, length, generator=generator) >= noise
    for t in range(2, length):
        looked_up = table[tokens[:, t - 1], tokens[:, t - 2]]
        tokens[:, t] = torch.where(use_table[:, t], looked_up, tokens[:, t])
    return tokens


def lookup_entropy(vocab_size: int, noise: float) -> float:
    """The lowest achievable next-token loss (nats) for a token read from the table.

    A model that knows the table perfectly puts ``1 - noise + noise / V`` on the table's
    entry and ``noise / V`` on each other token; its expected cross-entropy is the entropy
    of that distribution.
    """
    require_positive_int("vocab_size", vocab_size)
    _require_float_size("vocab_size", vocab_size)
    vocab_size, noise = int(vocab_size), _check_noise(noise)
    hit, miss = 1 - noise + noise / vocab_size, noise / vocab_size
    entropy = -hit * math.log(hit) if hit > 0 else 0.0
    if miss > 0:
        entropy -= (vocab_size - 1) * miss * math.log(miss)
    return entropy


# -- chapter 9's experiment: three models of the same size on the lookup language -------------

MODEL_KINDS = ("FFN Transformer", "all-attention", "attention-only")
# The committed results chapter 9 quotes (package data); the command writes to the working directory.
RESULTS = Path(__file__).resolve().parent.parent / "results" / "ch09_lookup_seeds.json"
STEP_TIMES = Path(__file__).resolve().parent.parent / "results" / "ch09_step_times_cpu.json"


def build_lookup_model(kind: str, vocab_size: int = 32, length: int = 16, *, seed: int = 0):
    """One of the three models of (nearly) the same size that chapter 9 compares, initialised with ``seed``.

    ``"FFN Transformer"``: 2 standard layers, ``d = 64``, 4 heads, ``d_ff = 256``;
    ``"all-attention"``: 2 all-attention layers, ``d = 64``, 4 heads, ``N = 256`` per head;
    ``"attention-only"``: 6 standard layers without an FFN (``d_ff = 0``).

    The weights are drawn from torch's global CPU generator seeded with ``seed`` inside
    ``torch.random.fork_rng``: the caller's own random stream goes on as if nothing was drawn.
    """
    if kind not in MODEL_KINDS:
        raise ValueError(f"kind must be one of {MODEL_KINDS}, got {kind!r}")
    require_positive_int("vocab_size", vocab_size)
    require_positive_int("length", length)
    seed = check_seed("seed", seed)
    with _seeded(seed):
        return _new_model(kind, int(vocab_size), int(length))


def _new_model(kind: str, vocab_size: int, length: int) -> CausalLM:
    if kind == "FFN Transformer":
        return CausalLM.standard(
            vocab_size, d_model=64, num_heads=4, d_ff=256, num_layers=2, max_len=length
        )
    if kind == "all-attention":
        return CausalLM(
            vocab_size, 64, length, [AllAttentionBlock(64, 4, num_persistent=256) for _ in range(2)]
        )
    return CausalLM(vocab_size, 64, length, [TransformerBlock(64, 4, d_ff=0) for _ in range(6)])


def compare_on_lookup(
    seed: int = 0,
    *,
    steps: int = 600,
    batch: int = 32,
    vocab_size: int = 32,
    length: int = 16,
    noise: float = 0.2,
    kinds: Sequence[str] = MODEL_KINDS,
    progress: bool = True,
) -> Dict[str, Dict[str, object]]:
    """Train each model of ``kinds`` on the same lookup language and batches; return their results.

    The table and the data (8192 training and 1024 test sequences) come from a generator
    seeded with 0, whatever ``seed``; ``seed`` sets the models' initialisation and the order
    of the batches (seed 0: batch ``step`` is drawn by a generator seeded with ``step``). The
    loss is counted from the third token on, the first with a table entry to predict.

    Returns ``{kind: {"test_loss", "parameters", "curve", "seconds"}}``; ``"curve"`` holds the
    training loss of every step.
    """
    seed, kinds = check_seed("seed", seed), _check_kinds(kinds)
    require_positive_int("steps", steps)
    require_positive_int("batch", batch)
    batch = int(batch)
    if 1_000_003 * seed < SEED_RANGE[0] or 1_000_003 * seed + int(steps) - 1 >= SEED_RANGE[1]:
        raise ValueError(
            f"seed={seed} is too far from 0: the batch of step s is drawn with the seed"
            f" s + 1_000_003 * seed, which must lie in [-2**63, 2**64) for the {steps} steps"
        )
    generator = torch.Generator().manual_seed(0)
    table = make_table(vocab_size, generator=generator)
    train_tokens = lookup_sequences(table, 8192, length, noise=noise, generator=generator)
    test_tokens = lookup_sequences(table, 1024, length, noise=noise, generator=generator)

    def get_batch(step: int) -> Tensor:
        rows = torch.randint(
            len(train_tokens),
            (batch,),
            generator=torch.Generator().manual_seed(step + 1_000_003 * seed),
        )
        return train_tokens[rows]

    def loss_fn(model, tokens: Tensor) -> Tensor:
        return next_token_loss(model(tokens), tokens, start=2)

    results: Dict[str, Dict[str, object]] = {}
    for kind in kinds:
        model = build_lookup_model(kind, vocab_size, length, seed=seed)
        start = time.perf_counter()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        curve = train(
            model,
            get_batch,
            loss_fn,
            steps=steps,
            optimizer=optimizer,
            progress=progress,
            desc=kind,
        )
        seconds = time.perf_counter() - start
        with torch.no_grad():
            test_loss = loss_fn(model, test_tokens).item()
        results[kind] = {
            "test_loss": test_loss,
            "parameters": count_parameters(model),
            "curve": curve,
            "seconds": seconds,
            "model": model,
        }
    return results


def time_training_steps(
    *,
    rounds: int = 30,
    warmup: int = 3,
    batch: int = 32,
    vocab_size: int = 32,
    length: int = 16,
    seed: int = 0,
    threads: int = 1,
    kinds: Sequence[str] = MODEL_KINDS,
) -> Dict[str, object]:
    """Time one training step (forward, backward, Adam) of each model of ``kinds``, interleaved.

    Every round times one step of each model on the same ``(batch, length)`` batch, the order
    of the models rotating from round to round, so that a change in the machine's load hits
    them alike; ``warmup`` untimed rounds come first. torch runs on ``threads`` threads (the
    previous setting is restored). Returns ``{"threads", "rounds", "batch", "load_average",
    "times_ms": {kind: [ms, ...]}, "median_ms": {kind: ms}}``.
    """
    require_positive_int("rounds", rounds)
    require_non_negative_int("warmup", warmup)
    require_positive_int("threads", threads)
    require_positive_int("batch", batch)
    seed, kinds = check_seed("seed", seed), _check_kinds(kinds)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(seed)
        table = make_table(vocab_size, generator=generator)
        tokens = lookup_sequences(table, batch, length, generator=generator)
        models = {kind: build_lookup_model(kind, vocab_size, length, seed=seed) for kind in kinds}
        optimizers = {
            kind: torch.optim.Adam(model.parameters(), lr=3e-3) for kind, model in models.items()
        }

        def step(kind: str) -> float:
            start = time.perf_counter()
            optimizers[kind].zero_grad(set_to_none=True)
            next_token_loss(models[kind](tokens), tokens, start=2).backward()
            optimizers[kind].step()
            return 1e3 * (time.perf_counter() - start)

        times: Dict[str, List[float]] = {kind: [] for kind in kinds}
        for r in range(warmup + rounds):
            for i in range(len(kinds)):
                kind = kinds[(r + i) % len(kinds)]
                elapsed = step(kind)
                if r >= warmup:
                    times[kind].append(elapsed)
    finally:
        torch.set_num_threads(previous)
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "threads": threads,
        "rounds": rounds,
        "batch": batch,
        "load_average": load,
        "times_ms": times,
        "median_ms": {kind: sorted(t)[len(t) // 2] for kind, t in times.items()},
    }


def _check_kinds(kinds: object) -> List[str]:
    """``kinds`` as a list: a non-empty selection of :data:`MODEL_KINDS`, each at most once."""
    if isinstance(kinds, (str, bytes)) or not isinstance(kinds, Iterable):
        raise TypeError(
            f"kinds must be a sequence of model kinds from {MODEL_KINDS}, got"
            f" {type(kinds).__name__} {kinds!r}"
        )
    kinds = list(kinds)
    if not kinds or any(kind not in MODEL_KINDS for kind in kinds):
        raise ValueError(f"kinds must be a non-empty selection of {MODEL_KINDS}, got {kinds}")
    if len(set(kinds)) < len(kinds):
        raise ValueError(f"kinds must not repeat a model kind, got {kinds}")
    return kinds


def load_step_times(path: Union[str, Path, None] = None) -> Dict[str, object]:
    """The committed result of ``python -m attncourse.course.lookup_task --step-times`` (package data),
    or the JSON file ``path``."""
    return _load_json(path, STEP_TIMES)


def load_seed_results(path: Union[str, Path, None] = None) -> Dict[str, object]:
    """The committed results of ``python -m attncourse.course.lookup_task`` (several seeds, package data),
    or the JSON file ``path``."""
    return _load_json(path, RESULTS)


def _load_json(path: object, default: Path) -> Dict[str, object]:
    """The JSON file ``path`` (``None``: ``default``); a missing file is a FileNotFoundError."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path must be a str or os.PathLike (None: the committed file), got"
            f" {type(path).__name__} {path!r}"
        )
    file = default if path is None else Path(path)
    if file.is_dir():
        raise ValueError(f"path must name a JSON file, got the directory {str(path)!r}")
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"path {str(file)!r} does not hold JSON: {err}") from None


def main(argv: Optional[List[str]] = None) -> None:
    """Run :func:`compare_on_lookup` for several seeds and write the test losses as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m attncourse.course.lookup_task", description=main.__doc__
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument(
        "--output",
        type=Path,
        default=Path(RESULTS.name),
        help="JSON file (default: in the working directory)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch's CPU threads (default: torch's own choice)",
    )
    parser.add_argument(
        "--step-times",
        action="store_true",
        help=(
            "time one training step of each model, interleaved, on one thread"
            " (ch09_step_times_cpu.json)"
        ),
    )
    args = parser.parse_args(argv)
    command = command_line("attncourse.course.lookup_task", argv)  # recorded with the numbers
    if args.step_times:
        result = time_training_steps()
        output = Path(STEP_TIMES.name)  # the working directory, never the installed package
        record = dict(result, command=command, torch=torch.__version__, machine=machine("cpu"))
        output.write_text(json.dumps(record, indent=1) + "\n")
        print(
            {kind: round(ms, 1) for kind, ms in result["median_ms"].items()}, f"written to {output}"
        )
        return
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    runs = {}
    for seed in args.seeds:
        result = compare_on_lookup(seed, steps=args.steps, progress=False)
        runs[str(seed)] = {
            kind: {"test_loss": r["test_loss"], "parameters": r["parameters"]}
            for kind, r in result.items()
        }
        print(seed, {kind: round(r["test_loss"], 4) for kind, r in result.items()}, flush=True)
    payload = {
        "command": command,
        "steps": args.steps,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": machine("cpu"),
        "runs": runs,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
