"""Launch settings of chapter 10's kernels per GPU: tile sizes, warps and pipeline stages.

A Triton kernel is compiled for one GPU architecture and one set of compile-time constants.
What fits differs from GPU to GPU: a block (one program) may use at most 64 KiB of shared
memory on a T4 (compute capability 7.5), 99 KiB on an RTX 30xx or an L4 (8.6, 8.9), 163 KiB
on an A100 (8.0) and 227 KiB on an H100 (9.0) (NVIDIA's CUDA C++ Programming Guide, table of
technical specifications per compute capability). A tile too large for the target fails at
launch with ``OutOfResources``; one too large for the registers (255 per thread at most)
spills to slow local memory. So :func:`launch_config` picks, per target, dtype and head size,
the largest tiles that compile within both limits, and refuses what a GPU cannot do at all
(bfloat16 before compute capability 8.0). ``attncourse.kernels.flash_launch`` calls it with the
capability of the tensors' GPU; the compile test compiles exactly what it returns for every
target, without a GPU.

This module imports neither triton nor CUDA: it is plain Python, tested on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

__all__ = [
    "KERNELS",
    "TARGETS",
    "LaunchConfig",
    "launch_config",
    "shared_memory_per_block",
    "supports_bfloat16",
    "block_d",
]

#: The kernels of ``attncourse.kernels.flash_kernels`` that take a launch configuration;
#: ``backward_dkdv_span`` is the dK/dV kernel of adaptive span, which also accumulates the
#: span's gradient and needs more registers.
KERNELS = ("forward", "forward_span", "backward_dkdv", "backward_dq", "backward_dkdv_span")

#: The compute capabilities the course compiles for (the compile test's targets), a GPU of
#: each kind, and the most shared memory one block may use there (bytes, the opt-in maximum).
TARGETS = {
    (7, 5): ("T4", 64 * 1024),
    (8, 0): ("A100", 163 * 1024),
    (8, 6): ("RTX 30xx / A10", 99 * 1024),
    (8, 9): ("L4 / RTX 40xx", 99 * 1024),
    (9, 0): ("H100", 227 * 1024),
}
# Other capabilities with a known limit (Jetson Orin, B200, RTX 50xx); any other gets 99 KiB,
# the smallest limit from 8.6 on, for which every rule below also holds.
_OTHER_SHARED = {(8, 7): 163 * 1024, (10, 0): 227 * 1024, (12, 0): 99 * 1024}
_DEFAULT_SHARED = 99 * 1024

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class LaunchConfig:
    """How one kernel is launched: a tile of ``block_m`` queries by ``block_n`` keys, run by
    ``num_warps`` warps of 32 threads, with ``num_stages`` tiles of K and V (or Q and dO) in
    flight in shared memory while the current one is multiplied (software pipelining).

    ``blocks_first``: the grid's order. True puts the blocks along the sequence on grid axis 0,
    the batch and the heads on axes 1 and 2 (FlashAttention-2's ``grid(num_m_block, b, h)``):
    programs that run side by side are blocks of one head, which re-read the same K and V
    while those are in the L2 cache. False puts ``B * H`` on axis 0 and the blocks on axis 1.
    Which is faster is measured on a GPU (``make gpu-check``), not settled here."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    blocks_first: bool = True


def check_capability(capability: object) -> Tuple[int, int]:
    """``capability`` as given, once it is a pair of ints ``(major, minor)``; a ``TypeError`` if not."""
    if (
        not isinstance(capability, tuple)
        or len(capability) != 2
        or not all(isinstance(c, int) and not isinstance(c, bool) for c in capability)
    ):
        raise TypeError(
            f"capability must be a pair of ints (major, minor) like (8, 0), got {capability!r}"
        )
    return capability  # type: ignore[return-value]


def _describe(capability: Tuple[int, int], device_name: Optional[str]) -> str:
    known = TARGETS.get(capability, ("a GPU",))[0]
    name = device_name or known
    return (
        f"{name} (compute capability {capability[0]}.{capability[1]},"
        f" sm_{capability[0]}{capability[1]})"
    )


def shared_memory_per_block(capability: Tuple[int, int]) -> int:
    """The most shared memory (bytes) one block may use on a GPU of this compute capability.

    Capabilities before 7.5 are refused; unknown later ones get 99 KiB (see ``_OTHER_SHARED``).
    """
    capability = check_capability(capability)
    if capability < (7, 5):
        raise ValueError(
            "the course's kernels need compute capability 7.5 or later (a T4 or newer), "
            f"got {_describe(capability, None)}"
        )
    if capability in TARGETS:
        return TARGETS[capability][1]
    return _OTHER_SHARED.get(capability, _DEFAULT_SHARED)


def supports_bfloat16(capability: Tuple[int, int]) -> bool:
    """bfloat16 tensor-core products exist from compute capability 8.0 (Ampere) on."""
    return check_capability(capability) >= (8, 0)


def block_d(head_dim: int) -> int:
    """The head size padded to a power of two of at least 16 (``tl.arange`` and ``tl.dot`` need it)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not 1 <= head_dim <= 128:
        raise ValueError(f"head_dim must be an integer in 1..128, got {head_dim!r}")
    return max(16, 1 << (head_dim - 1).bit_length())


def launch_config(
    capability: Tuple[int, int],
    dtype: torch.dtype,
    head_dim: int,
    kernel: str,
    *,
    device_name: Optional[str] = None,
) -> LaunchConfig:
    """Tiles, warps and stages for ``kernel`` on a GPU of ``capability``, inputs of ``dtype``
    and head size ``head_dim``.

    Args:
        capability: ``(major, minor)``, as ``torch.cuda.get_device_capability`` returns it.
        dtype: ``torch.float16``, ``torch.bfloat16`` or ``torch.float32``.
        head_dim: ``d``, 16..128 (the kernels pad it to a power of two).
        kernel: one of :data:`KERNELS`.
        device_name: the GPU's name for error messages (``torch.cuda.get_device_name``).

    Raises:
        ValueError: bfloat16 before compute capability 8.0, a capability before 7.5, an unknown
            kernel or a head size outside 16..128.
        TypeError: a dtype the kernels do not take.

    The rules, checked by compiling every case for every target in :data:`TARGETS`:

    * float16/bfloat16 multiply on the tensor cores; the tiles are 64 x 64 where they fit in
      shared memory and in the registers without spilling (the backward's dK/dV tiles take
      32 queries before sm_90, the dQ tiles 32 keys below 160 KiB). At ``d = 128`` the tiles
      of K and V (forward) or the accumulators (backward) double, so the key tile halves and
      the backward takes 8 warps, which share the accumulators among twice the registers.
    * float32 multiplies in full precision ("ieee") on the ordinary cores, where every
      thread holds its share of a tile in registers: tiles of 32 x 32 (the dK/dV kernel with
      8 warps from sm_80 on).
    * On a T4 (64 KiB) at ``d = 128`` the backward takes 16 x 32 (dK/dV) and 32 x 32 (dQ)
      tiles with one stage: larger ones need 70-98 KiB there.
    * Pipelining stages cost a copy of each streamed tile: 2 where shared memory is at most
      99 KiB, 3 on an A100 or an H100 (the forward: 2 on an A100, where a third spills).
    * With 2 stages (sm_86, sm_89) the dK/dV kernel at ``d = 64`` takes 8 warps: with 4 it
      spills; so does the adaptive-span forward (``forward_span``) before sm_90.
    * One exception, made by a measurement: on sm_90 at ``d = 128`` the dK/dV kernel takes
      64 x 64 tiles with 4 warps, which spill (160-260 bytes per thread), because on an H200
      they were faster than the four other tiles tried (``make gpu-check``'s ``dkdv_tile``);
      ``d = 96`` takes the same tiles, unmeasured.
    """
    capability = check_capability(capability)
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if dtype not in _DTYPES:
        raise TypeError(f"dtype must be float16, bfloat16 or float32, got {dtype}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not 16 <= head_dim <= 128:
        raise ValueError(f"head_dim must be an integer in 16..128, got {head_dim!r}")
    shared = shared_memory_per_block(capability)  # refuses capabilities before 7.5
    if dtype == torch.bfloat16 and not supports_bfloat16(capability):
        raise ValueError(
            "bfloat16 needs compute capability 8.0 or later (A100, L4, H100); "
            f"{_describe(capability, device_name)} has none: use float16 or float32"
        )
    d = block_d(head_dim)
    stages = 3 if shared >= 160 * 1024 else 2
    small = shared < 96 * 1024  # a T4: 64 KiB, and no tensor cores for tl.dot (FMA instead)
    backward_dkdv = kernel.startswith("backward_dkdv")
    if dtype == torch.float32:
        if backward_dkdv and small and d > 64:
            return LaunchConfig(16, 32, 4, 1)
        # the dK/dV kernel holds two float32 accumulators: 8 warps keep them in registers
        warps = 8 if backward_dkdv and not small else 4
        return LaunchConfig(32, 32, warps, 1 if small else 2)
    if kernel in ("forward", "forward_span"):
        if capability >= (9, 0):
            return LaunchConfig(64, 64 if d <= 64 else 32, 4, stages)
        # 2 stages before sm_90: on an A100 a third copy of the K and V tiles spills registers
        # at d = 32 and d = 96 (8 and 12 bytes per thread, make compile-matrix); the span's
        # forward holds the soft mask's weights as well and takes 8 warps (4 spill at d = 64)
        warps = 8 if kernel == "forward_span" and not small else 4
        return LaunchConfig(64, 64 if d <= 64 else 32, warps, 2)
    if d > 64:  # dK and dV (or dQ) accumulators of 128 columns
        if small:  # within a T4's 64 KiB: smaller tiles, one stage
            return LaunchConfig(16, 32, 4, 1) if backward_dkdv else LaunchConfig(32, 32, 4, 1)
        # elsewhere 8 warps share the accumulators among twice the registers
        if kernel == "backward_dkdv" and capability >= (9, 0):
            # measured, not derived: spills 160-260 bytes per thread, yet beat 32 x 64 with
            # 8 warps (half its products mma.sync) by 1.37x (1.07x causal) forward+backward on an
            # H200 (make gpu-check, design question dkdv_tile; reports/gpu/)
            return LaunchConfig(64, 64, 4, stages)
        return LaunchConfig(32, 64, 8, stages) if backward_dkdv else LaunchConfig(64, 32, 8, stages)
    # the span's gradient too: smaller tiles keep it in registers
    if kernel == "backward_dkdv_span":
        return LaunchConfig(32, 32, 4, stages)
    if kernel == "backward_dkdv":  # one program per key block, looping over query blocks
        # 64 x 64 tiles fit an H100's registers without spilling; before sm_90, 32 queries per tile
        if capability >= (9, 0):
            return LaunchConfig(64, 64, 4, stages)
        # with 2 stages (sm_86, sm_89) 4 warps spill 4 bytes per thread at d = 64: take 8
        warps = 8 if d == 64 and stages == 2 and not small else 4
        return LaunchConfig(32, 64, warps, stages)
    # backward_dq, one program per query block: 64 x 64 where shared memory allows
    return LaunchConfig(64, 64 if shared >= 160 * 1024 else 32, 4, stages)
