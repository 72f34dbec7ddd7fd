"""Count the machine instructions in a compiled kernel's loops (no GPU needed).

Triton compiles a kernel for an explicit GPU target without a GPU (``triton.compile`` with a
``GPUTarget``); its wheel bundles NVIDIA's ``nvdisasm``, which turns the compiled binary
(``cubin``) into SASS, the GPU's assembly. The inner loop of an attention kernel runs once per
tile, so the number of instructions in its body is a measure of the work per tile that needs
no timing: ``tools/sass_ratios.py`` compares :func:`our_counts` with Triton's own
fused-attention tutorial compiled the same way. A count is not a time (instructions differ in cost, and memory
stalls do not show), but a kernel that issues twice the instructions for the same tile leaves
the tensor cores idle for longer.

A loop in SASS is a branch back to an earlier label (``@P0 BRA `(.L_x_3)``): its body is
every instruction from the label to the branch.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

__all__ = [
    "Loop",
    "disassemble",
    "loops",
    "mma_loops",
    "tool_path",
    "per_scores",
    "specialise",
    "compile_cubin",
    "whole_tile_loop",
    "our_counts",
]

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*?`?\(?(\.L_x_\d+)\)?")
#: Tensor-core matrix instructions: HMMA (sm_75-sm_89), HGMMA (warpgroup MMA, sm_90).
MMA_OPCODES = ("HMMA", "HGMMA", "IMMA", "DMMA")


@dataclass(frozen=True)
class Loop:
    """One loop of a SASS listing: instructions ``[start, end]`` (indices), their opcodes."""

    start: int
    end: int
    opcodes: tuple

    @property
    def instructions(self) -> int:
        return len(self.opcodes)

    @property
    def mma(self) -> int:
        """Tensor-core instructions in the body."""
        return sum(op.split(".")[0] in MMA_OPCODES for op in self.opcodes)

    def histogram(self) -> Dict[str, int]:
        """Instructions per opcode (without modifiers), most frequent first."""
        counts: Dict[str, int] = {}
        for op in self.opcodes:
            key = op.split(".")[0]
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def tool_path(name: str) -> str:
    """The path of one of the NVIDIA tools that Triton's wheel bundles (``nvdisasm``, ``cuobjdump``)."""
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name} is not bundled with this triton ({path} is missing)")
    return path


def disassemble(cubin: bytes) -> str:
    """The SASS listing of a compiled kernel (``nvdisasm -c``)."""
    if not isinstance(cubin, (bytes, bytearray)) or not cubin:
        raise TypeError(
            "cubin must be the non-empty bytes of a compiled kernel (kernel.asm['cubin'])"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        result = subprocess.run(
            [tool_path("nvdisasm"), "-c", path], capture_output=True, text=True, check=True
        )
    return result.stdout


def _opcode(text: str) -> str:
    """``@!P1 IMAD.IADD R4, ...`` -> ``IMAD.IADD``."""
    words = text.split()
    return words[1] if words[0].startswith("@") else words[0]


def loops(sass: str) -> List[Loop]:
    """Every loop of a SASS listing (a branch back to an earlier label), in address order."""
    opcodes: List[str] = []
    texts: List[str] = []
    labels: Dict[str, int] = {}
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(opcodes)
            continue
        ins = _INSTRUCTION.search(line)
        if ins:
            texts.append(ins.group(2))
            opcodes.append(_opcode(ins.group(2)))
    found = []
    for i, text in enumerate(texts):
        if _opcode(text).split(".")[0] != "BRA":
            continue
        target = _BRANCH.search(text)
        if target and target.group(1) in labels and labels[target.group(1)] <= i:
            start = labels[target.group(1)]
            found.append(Loop(start, i, tuple(opcodes[start : i + 1])))
    return sorted(found, key=lambda loop: loop.start)


def mma_loops(sass: str) -> List[Loop]:
    """The loops that multiply matrices on the tensor cores (the tile loops), outermost first
    where loops nest (a loop inside another is dropped)."""
    found = [loop for loop in loops(sass) if loop.mma]
    return [
        a
        for a in found
        if not any(b is not a and b.start <= a.start and a.end <= b.end for b in found)
    ]


def per_scores(
    loop_instructions: int, num_warps: int, tile_scores: int, scores: int = 4096
) -> float:
    """Instructions all warps issue for ``scores`` attention scores, from one loop body per warp."""
    if min(loop_instructions, num_warps, tile_scores, scores) <= 0:
        raise ValueError("counts, warps and scores must be positive")
    return loop_instructions * num_warps * scores / tile_scores


def specialise(fn, values: Dict[str, object], constexprs: Dict[str, object]):
    """``(signature, constexprs, attrs)`` for ``triton.compile(ASTSource(fn, ...))``, as a launch with
    these argument values would specialise them: a tensor becomes a 16-byte-aligned pointer, an
    integer equal to 1 a constant, one divisible by 16 is marked so (what lets Triton vectorise)."""
    import torch
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    types = {
        torch.float16: "fp16",
        torch.bfloat16: "bf16",
        torch.float32: "fp32",
        torch.int32: "i32",
    }
    signature, attrs, consts = {}, {}, dict(constexprs)
    for index, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        value = values[name]
        if isinstance(value, torch.Tensor):
            signature[name] = "*" + types[value.dtype]
            attrs[(index,)] = [["tt.divisibility", 16]]
            continue
        kind, attr = native_specialize_impl(BaseBackend, value, False, True, True)
        signature[name] = kind
        if kind == "constexpr":
            consts[name] = value
        elif attr == "D":
            attrs[(index,)] = [["tt.divisibility", 16]]
    return signature, consts, attrs


def compile_cubin(fn, signature, constexprs, attrs, options, capability: Tuple[int, int]) -> bytes:
    """Compile a Triton kernel for ``sm_<major><minor>`` without a GPU; the binary (cubin)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", capability[0] * 10 + capability[1], 32)
    return triton.compile(
        ASTSource(fn, signature, constexprs, attrs), target=target, options=options
    ).asm["cubin"]


def whole_tile_loop(cubin: bytes) -> Loop:
    """The cheapest tile loop: the one over whole tiles, which needs no masks."""
    found = mma_loops(disassemble(cubin))
    if not found:
        raise ValueError("no loop with tensor-core (or matrix) instructions in this kernel")
    return min(found, key=lambda loop: loop.instructions)


def our_counts(
    capability: Tuple[int, int], head_dim: int = 64, length: int = 4096
) -> Dict[str, float]:
    """Instructions (all warps) per 4,096 scores in the whole-tile loops of chapter 10's kernels,
    float16, compiled as the launcher launches them on ``capability``: ``forward`` and ``backward``
    (the dK/dV loop plus the dQ loop)."""
    import torch

    from .specs import compile_specs

    specs = compile_specs(capability, torch.float16, head_dim, causal=True, length=length)
    counts = {}
    for name in ("forward", "backward_dkdv", "backward_dq"):
        fn, signature, consts, attrs, options = specs[name]
        loop = whole_tile_loop(compile_cubin(fn, signature, consts, attrs, options, capability))
        counts[name] = per_scores(
            loop.instructions, options["num_warps"], consts["BLOCK_M"] * consts["BLOCK_N"]
        )
    return {
        "forward": counts["forward"],
        "backward": counts["backward_dkdv"] + counts["backward_dq"],
    }


def main(argv: Optional[List[str]] = None) -> int:
    """``PYTHONPATH=tools python -m kernel_compile.sass [80 90 ...]``: our instructions per 4,096 scores per
    target (``tools/sass_ratios.py`` adds Triton's tutorial beside them, given its path)."""
    import sys

    targets = [int(a) for a in (sys.argv[1:] if argv is None else argv)] or [80, 90]
    print("float16, d = 64: instructions (all warps) per 4,096 scores in the whole-tile loops")
    for cc in targets:
        counts = our_counts((cc // 10, cc % 10))
        print(f"sm_{cc}: forward {counts['forward']:.0f}, backward {counts['backward']:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
