"""``compile_specs``: what the launcher would compile on a GPU, specialised as Triton does.

:func:`attncourse.kernels.flash.kernel_launches` gives the launches the launcher would make on a
GPU of a given capability (kernel, arguments, constexprs, configuration), built without a GPU;
this adds what Triton does to them at launch (integers equal to 1 become constants, those
divisible by 16 and 16-byte aligned pointers are marked so), which needs a private Triton API
(``native_specialize_impl``), so it lives with the compile harness, not in the package.
"""

from __future__ import annotations

from typing import Any, Tuple

import torch
from torch import Tensor

__all__ = ["compile_specs"]


def compile_specs(
    capability: Tuple[int, int], dtype: torch.dtype, head_dim: int, **shape: Any
) -> dict:
    """What the launcher would compile on a GPU of ``capability``, for a compile test without a GPU.

    Returns ``{kernel name: (jit function, signature, constexprs, attrs, options)}`` for
    ``forward``, ``backward_preprocess``, ``backward_dkdv`` and ``backward_dq``, built from
    :func:`attncourse.kernels.flash.kernel_launches` (the very functions the launcher calls), with
    the argument specialisation Triton applies at launch. ``triton.compile(ASTSource(fn,
    signature, constexprs, attrs), target=GPUTarget("cuda", major * 10 + minor, 32),
    options=options)`` compiles one. ``shape`` takes :func:`kernel_launches`'s keywords
    (``causal``, ``lengths``, ``span``, ``batch``, ``heads``, ``length``).
    """
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    from attncourse.kernels.flash import kernel_launches

    launches = kernel_launches(capability, dtype, head_dim, **shape)
    types = {
        torch.float16: "fp16",
        torch.bfloat16: "bf16",
        torch.float32: "fp32",
        torch.int32: "i32",
    }
    specs = {}
    for name, ((kernel, _, args, constexprs), config) in launches.items():
        signature, attrs, consts = {}, {}, dict(constexprs)
        params = [p for p in kernel.arg_names if p not in constexprs]
        for param, value in zip(params, args):
            if isinstance(value, Tensor):
                signature[param], attrs[(kernel.arg_names.index(param),)] = (
                    "*" + types[value.dtype],
                    [["tt.divisibility", 16]],
                )
                continue
            kind, attr = native_specialize_impl(BaseBackend, value, False, True, True)
            if kind == "constexpr":
                consts[param] = value
                signature[param] = "constexpr"
            else:
                signature[param] = kind
                if attr == "D":
                    attrs[(kernel.arg_names.index(param),)] = [["tt.divisibility", 16]]
        for c in constexprs:
            signature[c] = "constexpr"
        signature = {p: signature[p] for p in kernel.arg_names}
        specs[name] = (
            kernel,
            signature,
            consts,
            attrs,
            dict(num_warps=config.num_warps, num_stages=config.num_stages),
        )
    return specs
