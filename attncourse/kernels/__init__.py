"""Attention on the GPU (chapter 10): FlashAttention-2 and adaptive span as Triton kernels.

:mod:`attncourse.kernels.tiles` (plain Python) says which tiles the kernels compute;
:mod:`attncourse.kernels.flash` holds the functions to call, which need triton
(``pip install attncourse[gpu]``): the ``@triton.jit`` kernels are in
``attncourse.kernels.flash_kernels``, their launching (grids, launch settings, autograd)
in ``attncourse.kernels.flash_launch``. The functions are importable from here too; they
import triton on first use, so ``import attncourse.kernels`` works without it.
"""

from __future__ import annotations

from .tiles import key_block_range, query_block_range, span_tile_maps, span_windows, tile_map

_FLASH = (
    "flash_attention",
    "flash_attention_forward",
    "adaptive_span_flash_attention",
    "softmax_rows",
    "interpreting",
)

__all__ = [
    "key_block_range",
    "query_block_range",
    "tile_map",
    "span_tile_maps",
    "span_windows",
    *_FLASH,
]


def __getattr__(name: str):
    if name in _FLASH:
        from . import flash

        return getattr(flash, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
