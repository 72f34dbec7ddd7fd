"""Instructions per tile in the inner loops of chapter 10's kernels against Triton's tutorial.

Usage: ``python tools/sass_ratios.py PATH/TO/06-fused-attention.py [--targets 80 90]``

Both are compiled for each target without a GPU (Triton's ``GPUTarget``), float16, d = 64,
and disassembled with the ``nvdisasm`` that Triton's wheel bundles; the counts are the
instructions of the loop over whole tiles (no masks), times the warps, per 4,096 scores
(a 64 x 64 tile). The tutorial's file is read from the given path (it is not part of this
repository): only its ``@triton.jit`` functions are taken from it, so it needs no GPU to load.
Its forward is compiled with its 64 x 64 tiles, 4 warps and 3 stages, its backward with the
blocks, warps and stages its launcher fixes (32 x 128 for dK/dV, 128 x 32 for dQ, 4 warps,
5 stages). Counts are compiler output, not timings.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from kernel_compile import sass  # tools/kernel_compile: this file's folder is on sys.path


def load_jit_functions(path: Path) -> dict:
    """The ``@triton.jit`` functions of a Python file, without running the rest of it."""
    tree = ast.parse(path.read_text())
    keep = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            "jit" in ast.unparse(d) for d in node.decorator_list
        ):
            node.decorator_list = [d for d in node.decorator_list if ast.unparse(d) == "triton.jit"]
            keep.append(node)
    module = ast.Module(body=keep, type_ignores=[])
    namespace = {"triton": triton, "tl": tl, "__name__": "tutorial_kernels"}
    code = compile(ast.fix_missing_locations(module), str(path), "exec")
    # triton.jit reads the source of each function, so give it the file's lines
    import linecache

    linecache.cache[str(path)] = (
        len(path.read_text()),
        None,
        path.read_text().splitlines(True),
        str(path),
    )
    exec(code, namespace)
    return namespace


def tutorial_counts(path: Path, capability) -> dict:
    fns = load_jit_functions(path)
    batch, heads, n_ctx, d = 4, 32, 4096, 64
    t = torch.empty(batch, heads, n_ctx, d, device="meta", dtype=torch.float16)
    m = torch.empty(batch, heads, n_ctx, device="meta", dtype=torch.float32)
    strides = dict(zip(("z", "h", "m", "k"), t.stride()))
    fwd = fns["_attn_fwd"]
    values = {"Q": t, "K": t, "V": t, "Out": t, "M": m, "sm_scale": 0.5, "Z": batch, "H": heads}
    for p in "qkvo":
        for axis, name in zip(("z", "h", "m", "k"), ("z", "h", "m", "k")):
            values_name = {
                "q": f"stride_q{axis}",
                "k": f"stride_k{axis}",
                "v": f"stride_v{axis}",
                "o": f"stride_o{axis}",
            }
            values[values_name[p]] = strides[name]
    values.update(
        stride_kn=strides["m"],
        stride_vk=strides["m"],
        stride_vn=strides["k"],
        stride_on=strides["k"],
    )
    consts = dict(HEAD_DIM=d, BLOCK_M=64, BLOCK_N=64, CAUSAL=False, N_CTX=n_ctx)
    values = {k: v for k, v in values.items() if k in fwd.arg_names}
    sig, consts, attrs = sass.specialise(fwd, values, consts)
    loop = sass.whole_tile_loop(
        sass.compile_cubin(fwd, sig, consts, attrs, dict(num_warps=4, num_stages=3), capability)
    )
    forward = sass.per_scores(loop.instructions, 4, 64 * 64)
    bwd = fns["_attn_bwd"]
    values = {
        "Q": t,
        "K": t,
        "V": t,
        "DO": t,
        "DQ": t,
        "DK": t,
        "DV": t,
        "M": m,
        "D": m,
        "sm_scale": 0.5,
        "stride_z": strides["z"],
        "stride_h": strides["h"],
        "stride_tok": strides["m"],
        "stride_d": 1,
        "H": heads,
        "N_CTX": n_ctx,
    }
    consts = dict(
        BLOCK_M1=32, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=32, BLK_SLICE_FACTOR=2, HEAD_DIM=d
    )
    sig, consts, attrs = sass.specialise(bwd, values, consts)
    cubin = sass.compile_cubin(bwd, sig, consts, attrs, dict(num_warps=4, num_stages=5), capability)
    loops = sass.mma_loops(sass.disassemble(cubin))
    # In address order: dK/dV on the diagonal (16-query tiles), dK/dV whole (32 x 128), dQ on the
    # diagonal (128 x 16), dQ whole (128 x 32). A diagonal loop of 8 steps may be unrolled by the
    # compiler, leaving 3 loops; the diagonal loop is the one with half the whole loop's MMAs.
    if len(loops) == 4:
        whole = [loops[1], loops[3]]
    elif len(loops) == 3 and loops[1].mma == 2 * loops[0].mma:
        whole = [loops[1], loops[2]]
    elif len(loops) == 3:
        whole = [loops[0], loops[2]]
    else:
        raise RuntimeError(f"expected 3 or 4 backward loops in the tutorial, got {len(loops)}")
    backward = sum(sass.per_scores(lp.instructions, 4, 32 * 128) for lp in whole)
    return {"forward": forward, "backward": backward}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "tutorial", type=Path, help="path to Triton's python/tutorials/06-fused-attention.py"
    )
    parser.add_argument(
        "--targets", type=int, nargs="+", default=[80, 90], help="compute capabilities, e.g. 80 90"
    )
    args = parser.parse_args(argv)
    print(
        f"triton {triton.__version__}; float16, d = 64; instructions (all warps) per 4,096 scores, "
        "whole-tile loops; compiler output, not timings"
    )
    print(f"{'target':>7} {'pass':>9} {'ours':>8} {'tutorial':>9} {'ratio':>6}")
    for cc in args.targets:
        capability = (cc // 10, cc % 10)
        ours, theirs = sass.our_counts(capability), tutorial_counts(args.tutorial, capability)
        for name in ("forward", "backward"):
            print(
                f"{'sm_' + str(cc):>7} {name:>9} {ours[name]:8.0f} {theirs[name]:9.0f}"
                f" {ours[name] / theirs[name]:6.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
