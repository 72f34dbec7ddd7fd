"""``python -m attncourse.benchmarks``: the command line of every benchmark (``--help``)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import List, Optional

import torch

from . import attention, kernels
from .common import MAX_LOAD_PER_CORE, command_line, machine, require_quiet, write_result


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m attncourse.benchmarks``."""
    parser = argparse.ArgumentParser(
        prog="python -m attncourse.benchmarks", description=attention.__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384]
    )
    parser.add_argument("--layer-lengths", type=int, nargs="*", default=[1024, 2048])
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda", "all"],
        default="all",
        help="'all': the CPU, and CUDA when present",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("."),
        help="folder of the JSON results (default: the working directory)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch's CPU threads (default: torch's own choice)",
    )
    parser.add_argument("--tag", default="", help="appended to the JSON file name, e.g. '_1thread'")
    parser.add_argument(
        "--cache",
        action="store_true",
        help="time a decoding step with and without the KV cache (chapter 6)",
    )
    parser.add_argument(
        "--contexts",
        type=int,
        nargs="+",
        default=[64, 128, 256, 512, 1024, 2048],
        help="context lengths for --cache",
    )
    parser.add_argument(
        "--max-load-per-core",
        type=float,
        default=MAX_LOAD_PER_CORE,
        help="--cache: refuse to write the timings when the 1-minute load average, at the start"
        f" or the end, exceeds this times the cores (default {MAX_LOAD_PER_CORE})",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="--cache: write the timings whatever the load (it is recorded in the file)",
    )
    parser.add_argument(
        "--constants",
        action="store_true",
        help="measure only the CPU constants (constants_cpu.json): a minute",
    )
    parser.add_argument(
        "--gpu-lengths",
        type=int,
        nargs="+",
        default=[512, 1024, 2048, 4096, 8192, 16384, 32768],
        help="sequence lengths of the Triton kernels' benchmark (CUDA only)",
    )
    parser.add_argument(
        "--gpu-dtypes",
        nargs="+",
        choices=["float16", "bfloat16", "float32"],
        default=["float16", "bfloat16"],
    )
    parser.add_argument(
        "--no-kernels", action="store_true", help="on CUDA, leave out chapter 10's Triton kernels"
    )
    parser.add_argument(
        "--no-attention",
        action="store_true",
        help="leave out the attention and layer benchmark (chapter 7)",
    )
    parser.add_argument(
        "--span-time",
        action="store_true",
        help="time chapter 8's adaptive-span layer against its span on the CPU",
    )
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if any(sep in args.tag for sep in ("/", os.sep, os.altsep) if sep):
        parser.error(f"--tag is appended to file names: it must not hold a path, got {args.tag!r}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    command = command_line("attncourse.benchmarks", argv)  # recorded in every file written
    if args.constants:
        result = dict(attention.constants(), command=command)
        args.output.mkdir(parents=True, exist_ok=True)
        path = args.output / f"constants_cpu{args.tag}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
        print(f"written to {path}")
        return
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    if args.cache:
        for device in devices:
            print(f"== {device}: one decoding step, KV cache or not ==", flush=True)
            if device == "cpu":  # refuse before minutes of timing, and again after them
                require_quiet(machine("cpu"), args.max_load_per_core, force=args.force)
            result = dict(attention.run_cache(args.contexts, device), command=command)
            print(attention.cache_table(result["rows"]))  # type: ignore[arg-type]
            measured_on: dict = result["machine"]  # type: ignore[assignment]
            print(
                "load average at start and end:",
                measured_on.get("load_average_at_start"),
                measured_on.get("load_average_at_end"),
            )
            if device == "cpu":
                require_quiet(measured_on, args.max_load_per_core, force=args.force)
            name = f"ch06_cache_benchmark_{device}{args.tag}.json"
            print(f"written to {write_result(result, args.output, name)}")
        return
    if args.span_time:
        print("== adaptive-span layer on the CPU: time against span ==", flush=True)
        result = dict(kernels.run_span_time(), command=command)
        print(kernels.span_table(result))
        print(f"written to {write_result(result, args.output, f'span_time_cpu{args.tag}.json')}")
    for device in devices:
        if device == "cuda" and not args.no_kernels:
            print("== cuda: Triton kernels ==", flush=True)
            result = dict(
                kernels.run_gpu(args.gpu_lengths, device="cuda", dtypes=args.gpu_dtypes),
                command=command,
            )
            print(kernels.gpu_table(result["rows"]))  # type: ignore[arg-type]
            print(json.dumps(result["targets"], indent=1))
            gpu = str(result["machine"]["gpu"])  # type: ignore[index]
            name = kernels.gpu_file_name(gpu).replace(".json", f"{args.tag}.json")
            print(f"written to {write_result(result, args.output, name)}")
        if args.no_attention:
            continue
        print(f"== {device} ==", flush=True)
        print(attention.table([]), flush=True)
        result = dict(
            attention.run(args.lengths, device, layer_lengths=args.layer_lengths), command=command
        )
        print("\n" + attention.table(result["rows"]))  # type: ignore[arg-type]
        args.output.mkdir(parents=True, exist_ok=True)
        path = args.output / f"ch07_benchmark_{device}{args.tag}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"written to {path}")


if __name__ == "__main__":
    main()
