"""Launching chapter 10's kernels: input checks, grids, launch settings and autograd.

``attncourse.kernels.flash_kernels`` holds the ``@triton.jit`` kernels; this module builds
each launch (kernel, grid, arguments, constexprs) from the tensors of a pass
(:class:`_Pass`) and the options of a call (:class:`_Options`), picks the launch settings
(:func:`~attncourse.kernels.config.launch_config`, :func:`launch_override`,
:func:`launch_target`) and joins the forward and backward kernels in a
``torch.autograd.Function``. The functions to call are in :mod:`attncourse.kernels.flash`.

Tiles: ``block_m`` queries by ``block_n`` keys (FlashAttention-2's ``B_r`` and ``B_c``, the
kernels' ``BLOCK_M`` and ``BLOCK_N``); :mod:`attncourse.kernels.tiles` says which the kernels
visit.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from typing import Dict, Iterator, List, Optional, Tuple

import torch
import triton
from torch import Tensor

from .._checks import (
    fmt_shape,
    require_floating,
    require_positive_int,
    require_positive_number,
    require_rank,
)
from .config import KERNELS, LaunchConfig, launch_config
from .flash_kernels import (
    _backward_dkdv_kernel,
    _backward_dq_kernel,
    _backward_preprocess_kernel,
    _forward_kernel,
)
from .tiles import num_blocks, span_windows

# attncourse.kernels.flash, the module to import, re-exports these
__all__ = ["interpreting", "kernel_launches", "launch_override", "launch_target"]


def interpreting() -> bool:
    """Whether Triton runs its kernels through the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# -- checking the inputs -----------------------------------------------------------------------

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_GRID_AXIS_1 = 65_535  # CUDA's limit on grid axes 1 and 2 (axis 0 goes to 2^31 - 1)
_MAX_GRID_AXIS_0 = 2**31 - 1


def _require_device(name: str, x: Tensor) -> None:
    if _TARGETS:  # capturing launches for another GPU (launch_target): no kernel runs
        return
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"{name} is on {x.device}: the Triton kernels run on a CUDA GPU, or on the CPU through"
            " Triton's interpreter (set TRITON_INTERPRET=1 before triton is imported)"
        )
    if x.device.type == "cpu" and x.dtype == torch.bfloat16:
        raise TypeError(
            f"{name} is bfloat16 on the CPU: Triton's interpreter has no bfloat16 (it would return"
            " wrong values); use float32 or float16 on the CPU, bfloat16 on a GPU of compute"
            " capability 8.0 or later"
        )


def _reads_values(x: Tensor) -> bool:
    """Whether checking ``x``'s values is free: on a GPU it would wait for the GPU (a host
    synchronisation on every call), so there the kernels clamp instead (see the docstrings)."""
    return x.device.type != "cuda"


def _device_guard(device: torch.device):
    """Launch on ``device``'s GPU even when another one is current (Triton launches on the current one)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _grid(batch: int, heads: int, blocks: int, blocks_first: bool) -> Tuple[int, ...]:
    """The launch grid: ``(blocks, B, H)`` with ``blocks_first`` (FlashAttention-2's order, the
    blocks along the sequence on axis 0, up to 2^31 - 1; B and H up to 65,535 each on axes 1
    and 2), else ``(B * H, blocks)`` (``B * H`` up to 2^31 - 1, the blocks up to 65,535)."""
    if batch * heads > _MAX_GRID_AXIS_0:  # b * H + h indexes the saved statistics in 32 bits
        raise ValueError(f"B * H = {batch * heads} exceeds {_MAX_GRID_AXIS_0}")
    if blocks_first:
        for name, size in (("B", batch), ("H", heads)):
            if size > _MAX_GRID_AXIS_1:
                raise ValueError(
                    f"{name} = {size} exceeds the {_MAX_GRID_AXIS_1} programs of a grid axis"
                    " after the first: use fewer (split the batch into several calls)"
                )
        if blocks > _MAX_GRID_AXIS_0:
            raise ValueError(f"{blocks} blocks exceed the {_MAX_GRID_AXIS_0} programs of axis 0")
        return (blocks, batch, heads)
    if blocks > _MAX_GRID_AXIS_1:
        raise ValueError(
            f"{blocks} blocks along the sequence exceed the {_MAX_GRID_AXIS_1} programs of grid"
            " axis 1: use larger blocks (block_m, block_n) or a shorter sequence"
        )
    return (batch * heads, blocks)


def _require_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}"
        )
    return value


def _check_inputs(
    query: Tensor, key: Tensor, value: Tensor, lengths: Optional[Tensor], scale: Optional[float]
) -> float:
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_floating(name, x)
        require_rank(name, x, 4, "(B, h, L or S, d_k)")
        if x.dtype not in _DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {x.dtype}")
        _require_device(name, x)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(
            f"query, key and value must share one dtype, got {query.dtype}, {key.dtype},"
            f" {value.dtype}"
        )
    if key.device != query.device or value.device != query.device:
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, {key.device},"
            f" {value.device}"
        )
    if key.shape[:2] != query.shape[:2] or value.shape != key.shape or key.size(3) != query.size(3):
        raise ValueError(
            "expected query (B, h, L, d_k), key and value (B, h, S, d_k) with the same B, h and d_k:"
            f" query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}, value"
            f" {fmt_shape(value.shape)}"
        )
    if not 16 <= query.size(3) <= 128:
        raise ValueError(f"the head size d must be in 16..128, got query {fmt_shape(query.shape)}")
    if min(query.size(0), query.size(1), query.size(2), key.size(2)) == 0:
        raise ValueError(
            "query and key need at least one batch, head and position, got query"
            f" {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}"
        )
    if lengths is not None:
        if not isinstance(lengths, Tensor):
            raise TypeError(
                f"lengths must be a tensor of integers (B,), got {type(lengths).__name__}"
            )
        if lengths.dtype == torch.bool or lengths.is_floating_point() or lengths.is_complex():
            raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
        if lengths.shape != query.shape[:1]:
            raise ValueError(
                f"lengths must have shape (B,) = ({query.size(0)},), got {fmt_shape(lengths.shape)}"
            )
        if lengths.device != query.device:
            raise ValueError(
                f"lengths must be on the device of query ({query.device}), got {lengths.device}"
            )
        if _reads_values(lengths) and (int(lengths.min()) < 0 or int(lengths.max()) > key.size(2)):
            raise ValueError(f"lengths must lie in [0, S={key.size(2)}], got {lengths.tolist()}")
    if scale is None:
        return query.size(3) ** -0.5
    require_positive_number("scale", scale)
    return float(scale)


def _check_blocks(block_m: Optional[int], block_n: Optional[int]) -> None:
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is not None:
            require_positive_int(name, value)
            if value < 16 or value & (value - 1):
                raise ValueError(
                    f"{name} must be a power of two >= 16 (tl.dot needs 16), got {value}"
                )


# -- the launch settings -----------------------------------------------------------------------

# Replacements for fields of the launch configurations, set by launch_override: (kernel or
# None for every kernel, {field: value}), the innermost last.
_OVERRIDES: list = []
# The GPU that launch_target stands for: (capability, device name), the innermost last.
_TARGETS: List[Tuple[Tuple[int, int], Optional[str]]] = []


@contextlib.contextmanager
def launch_override(kernel: Optional[str] = None, **fields: object) -> Iterator[None]:
    """Within it, the launcher uses ``fields`` in place of those that
    :func:`~attncourse.kernels.config.launch_config` picks.

    For measuring the alternatives on a GPU (``make gpu-check``): e.g.
    ``with launch_override("forward", block_m=128, num_stages=3):`` or
    ``with launch_override(blocks_first=False):`` (every kernel). ``kernel``: one of
    :data:`~attncourse.kernels.config.KERNELS` (``"backward_dq"`` also sets the backward's
    first kernel, which computes ``D``), or ``None`` for all. ``fields``: any of ``block_m``,
    ``block_n``, ``num_warps``, ``num_stages``, ``blocks_first``. Sizes that do not fit the GPU
    fail at launch (Triton's ``OutOfResources``). Block sizes passed to a call still win.
    """
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"kernel must be None or one of {', '.join(KERNELS)}, got {kernel!r}")
    names = {f.name: f.type for f in dataclass_fields(LaunchConfig)}
    for name, value in fields.items():
        if name not in names:
            raise TypeError(
                f"launch_override got an unknown field {name!r}: use {', '.join(names)}"
            )
        if name == "blocks_first":
            _require_flag(name, value)
        else:
            require_positive_int(name, value)
    if {"block_m", "block_n"} & fields.keys():
        _check_blocks(fields.get("block_m"), fields.get("block_n"))
    _OVERRIDES.append((kernel, dict(fields)))
    try:
        yield
    finally:
        _OVERRIDES.remove((kernel, fields))


@contextlib.contextmanager
def launch_target(capability: Tuple[int, int], device_name: Optional[str] = None) -> Iterator[None]:
    """Within it, the launcher configures every launch as for a GPU of ``capability`` (named
    ``device_name``), whatever the tensors' device, and takes tensors on any device.

    For capturing, without that GPU, what the launcher would launch on it: the repository's
    compile harness (``tools/kernel_compile``) runs the public functions on CPU tensors under
    it, with a Triton hook that stops each launch before it compiles or runs. Outside such a
    capture nothing should be launched under it: the kernels would run on the wrong device.
    ``capability`` is checked as :func:`~attncourse.kernels.config.launch_config` checks it.
    """
    launch_config(capability, torch.float32, 64, "forward", device_name=device_name)
    entry = (capability, device_name)
    _TARGETS.append(entry)
    try:
        yield
    finally:
        _TARGETS.remove(entry)


def _config(q: Tensor, kernel: str, block_m: Optional[int], block_n: Optional[int]) -> LaunchConfig:
    """The launch settings of ``kernel`` for ``q``'s GPU (:func:`~attncourse.kernels.config.launch_config`),
    or for :func:`launch_target`'s, or 16 x 16 tiles under the interpreter, then
    :func:`launch_override`'s fields; ``block_m``/``block_n`` given by the caller win."""
    if _TARGETS:
        capability, name = _TARGETS[-1]
        config = launch_config(capability, q.dtype, q.size(3), kernel, device_name=name)
    elif q.device.type == "cuda":
        capability = torch.cuda.get_device_capability(q.device)
        config = launch_config(
            capability, q.dtype, q.size(3), kernel, device_name=torch.cuda.get_device_name(q.device)
        )
    else:  # the interpreter: warps and stages mean nothing there; small tiles keep it quick
        config = LaunchConfig(16, 16, 1, 1)
    for which, fields in _OVERRIDES:
        if which is None or which == kernel:
            config = replace(config, **fields)
    return replace(config, block_m=block_m or config.block_m, block_n=block_n or config.block_n)


def _precision(dtype: torch.dtype) -> str:
    """float32 inputs multiply in full precision ("ieee"), not TF32, so that they match the references."""
    return "ieee" if dtype == torch.float32 else "tf32"


# -- the launches ------------------------------------------------------------------------------

_LOG2E_HOST = math.log2(math.e)


@dataclass(frozen=True)
class _Options:
    """What one call asks for besides its tensors: the masks, the span, the scale, the tiles.

    ``lengths`` ``(B,)`` int32, ``spans`` ``(H,)`` float32 and ``windows`` ``(H,)`` int32
    (:func:`~attncourse.kernels.tiles.span_windows`), or ``None``; ``block_m``/``block_n``:
    the caller's tiles, or ``None`` for the launch settings'."""

    causal: bool = False
    lengths: Optional[Tensor] = None
    spans: Optional[Tensor] = None
    windows: Optional[Tensor] = None
    ramp: float = 1.0
    scale: float = 1.0
    block_m: Optional[int] = None
    block_n: Optional[int] = None

    def config(self, q: Tensor, kernel: str) -> LaunchConfig:
        if self.spans is not None:
            kernel = {"forward": "forward_span", "backward_dkdv": "backward_dkdv_span"}.get(
                kernel, kernel
            )
        return _config(q, kernel, self.block_m, self.block_n)

    def optional_pointers(self, dummy: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """``LENGTHS``, ``SPANS``, ``WINDOWS``: ``dummy`` stands for those a call does not read."""
        return tuple(
            x if x is not None else dummy for x in (self.lengths, self.spans, self.windows)
        )

    def scalars(self) -> Tuple[float, float, float]:
        """``qk_scale`` (the scale times log2(e): the kernels' scores are in base 2), ``ramp``, ``1 / ramp``."""
        return self.scale * _LOG2E_HOST, self.ramp, 1.0 / self.ramp

    def constexprs(self, q: Tensor, config: LaunchConfig) -> dict:
        head_dim = q.size(3)
        return dict(
            CAUSAL=self.causal or self.spans is not None,
            HAS_LENGTHS=self.lengths is not None,
            HAS_SPAN=self.spans is not None,
            PRECISION=_precision(q.dtype),
            HEAD_DIM=head_dim,
            BLOCK_M=config.block_m,
            BLOCK_N=config.block_n,
            BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
            BLOCKS_FIRST=config.blocks_first,
        )


@dataclass(frozen=True)
class _Pass:
    """The tensors of a pass: ``q, k, v`` (``(B, h, L or S, d_k)``), the output ``out`` and
    ``lse`` ``(B, h, L)`` float32 that the forward writes and the backward reads; for the
    backward also ``do`` (the output's gradient), ``delta`` (``D``, like ``lse``) and what it
    writes, ``dq``, ``dk``, ``dv`` and ``dspan`` ``(B, h, key blocks)`` float32."""

    q: Tensor
    k: Tensor
    v: Tensor
    out: Tensor
    lse: Tensor
    do: Optional[Tensor] = None
    delta: Optional[Tensor] = None
    dq: Optional[Tensor] = None
    dk: Optional[Tensor] = None
    dv: Optional[Tensor] = None
    dspan: Optional[Tensor] = None


def _forward_launch(t: _Pass, opts: _Options, config: LaunchConfig):
    """``(kernel, grid, args, constexprs)`` of the forward pass: what the launcher runs and what
    :func:`kernel_launches` returns."""
    batch, heads, length, _ = t.q.shape
    # fmt: off
    args = (t.q, t.k, t.v, t.out, t.lse, *opts.optional_pointers(t.lse),
            *t.q.stride(), *t.k.stride(), *t.v.stride(), *t.out.stride(),
            heads, length, t.k.size(2), *opts.scalars())
    # fmt: on
    grid = _grid(batch, heads, num_blocks(length, config.block_m), config.blocks_first)
    return _forward_kernel, grid, args, opts.constexprs(t.q, config)


def _backward_launches(t: _Pass, opts: _Options, configs: Tuple[LaunchConfig, ...]):
    """The three backward launches ``[(kernel, grid, args, constexprs), ...]``: ``D``, then
    ``dK`` and ``dV`` (and the span's gradient), then ``dQ``, with ``configs`` in that order."""
    batch, heads, length, _ = t.q.shape
    keys = t.k.size(2)
    extra = opts.optional_pointers(t.lse)
    strides = (*t.q.stride(), *t.k.stride(), *t.v.stride(), *t.do.stride())
    qk_scale, ramp, inv_ramp = opts.scalars()
    pre, kv, qc = configs
    pre_consts = opts.constexprs(t.q, pre)
    preprocess = (
        _backward_preprocess_kernel,
        _grid(batch, heads, num_blocks(length, pre.block_m), pre.blocks_first),
        (t.out, t.do, t.delta, *t.out.stride(), *t.do.stride(), heads, length),
        {key: pre_consts[key] for key in ("HEAD_DIM", "BLOCK_M", "BLOCK_D", "BLOCKS_FIRST")},
    )
    num_key_blocks = num_blocks(keys, kv.block_n)
    # fmt: off
    dkdv_args = (t.q, t.k, t.v, t.do, t.dk, t.dv, t.lse, t.delta, t.dspan, *extra, *strides,
                 heads, length, keys, opts.scale, qk_scale, ramp, inv_ramp, num_key_blocks)
    dq_args = (t.q, t.k, t.v, t.do, t.dq, t.lse, t.delta, *extra, *strides,
               heads, length, keys, opts.scale, qk_scale, ramp, inv_ramp)
    # fmt: on
    dkdv = (
        _backward_dkdv_kernel,
        _grid(batch, heads, num_key_blocks, kv.blocks_first),
        dkdv_args,
        opts.constexprs(t.q, kv),
    )
    dq = (
        _backward_dq_kernel,
        _grid(batch, heads, num_blocks(length, qc.block_m), qc.blocks_first),
        dq_args,
        opts.constexprs(t.q, qc),
    )
    return [preprocess, dkdv, dq]


def _backward_configs(q: Tensor, opts: _Options) -> Tuple[LaunchConfig, ...]:
    """The settings of the three backward kernels: ``D`` takes those of ``dQ``."""
    dq = opts.config(q, "backward_dq")
    return dq, opts.config(q, "backward_dkdv"), dq


def _run(launch, config: LaunchConfig) -> None:
    kernel, grid, args, constexprs = launch
    kernel[grid](*args, **constexprs, num_warps=config.num_warps, num_stages=config.num_stages)


def _forward(q: Tensor, k: Tensor, v: Tensor, opts: _Options) -> Tuple[Tensor, Tensor]:
    batch, heads, length, _ = q.shape
    config = opts.config(q, "forward")
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, length, device=q.device, dtype=torch.float32)
    with _device_guard(q.device):
        _run(_forward_launch(_Pass(q, k, v, out, lse), opts, config), config)
    return out, lse


def _backward(t: _Pass, opts: _Options) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``dQ, dK, dV`` and the span's gradient ``(H,)`` for the pass ``t`` (``do`` set)."""
    batch, heads, length, head_dim = t.q.shape
    keys = t.k.size(2)
    configs = _backward_configs(t.q, opts)
    like = dict(device=t.q.device, dtype=t.q.dtype)  # contiguous, whatever q's strides
    floats = dict(device=t.q.device, dtype=torch.float32)
    t = replace(
        t,
        delta=torch.empty_like(t.lse),
        dq=torch.empty(batch, heads, length, head_dim, **like),
        dk=torch.empty(batch, heads, keys, head_dim, **like),
        dv=torch.empty(batch, heads, keys, head_dim, **like),
        dspan=torch.zeros(batch, heads, num_blocks(keys, configs[1].block_n), **floats),
    )
    with _device_guard(t.q.device):
        for launch, config in zip(_backward_launches(t, opts, configs), configs):
            _run(launch, config)
    return t.dq, t.dk, t.dv, t.dspan.sum(dim=(0, 2))


def kernel_launches(
    capability: Tuple[int, int],
    dtype: torch.dtype,
    head_dim: int,
    *,
    causal: bool = False,
    lengths: bool = False,
    span: bool = False,
    batch: int = 2,
    heads: int = 4,
    length: int = 1024,
) -> Dict[str, tuple]:
    """What the launcher would launch on a GPU of ``capability``, built without a GPU (no data).

    Returns ``{kernel name: ((jit function, grid, args, constexprs), LaunchConfig)}`` for
    ``forward``, ``backward_preprocess``, ``backward_dkdv`` and ``backward_dq``, built by the very
    functions the launcher calls, on tensors of the ``meta`` device (which hold no data), with the
    configuration :func:`~attncourse.kernels.config.launch_config` picks for ``capability``. The
    repository's compile harness (``tools/kernel_compile``) specialises these as Triton does at
    launch and compiles them for that GPU.
    """
    meta = dict(device="meta", dtype=dtype)
    q = torch.empty(batch, heads, length, head_dim, **meta)
    k, v, out, do, dq, dk, dv = (torch.empty_like(q) for _ in range(7))
    lse = torch.empty(batch, heads, length, device="meta", dtype=torch.float32)
    opts = _Options(
        causal=causal,
        lengths=torch.empty(batch, device="meta", dtype=torch.int32) if lengths else None,
        spans=torch.empty(heads, device="meta", dtype=torch.float32) if span else None,
        windows=torch.empty(heads, device="meta", dtype=torch.int32) if span else None,
        ramp=32.0,
        scale=head_dim**-0.5,
    )
    with launch_target(capability):
        forward_config = opts.config(q, "forward")
        backward_configs = _backward_configs(q, opts)
    t = _Pass(q, k, v, out, lse, do=do, delta=lse, dq=dq, dk=dk, dv=dv, dspan=lse)
    launches = {"forward": (_forward_launch(t, opts, forward_config), forward_config)}
    for name, launch, config in zip(
        ("backward_preprocess", "backward_dkdv", "backward_dq"),
        _backward_launches(t, opts, backward_configs),
        backward_configs,
    ):
        launches[name] = (launch, config)
    return launches


class _FlashAttention(torch.autograd.Function):
    """Joins the forward kernel and the backward kernels; saves ``Q, K, V, O`` and ``lse``, never the weights."""

    @staticmethod
    def forward(ctx, q, k, v, span, opts: _Options):
        if span is not None:
            opts = replace(
                opts,
                spans=span.detach().float().contiguous(),
                windows=span_windows(span, opts.ramp, q.size(2)),
            )
        out, lse = _forward(q, k, v, opts)
        ctx.save_for_backward(q, k, v, out, lse, opts.lengths, opts.spans, opts.windows)
        ctx.opts = replace(opts, lengths=None, spans=None, windows=None)  # tensors saved above
        ctx.span_dtype = span.dtype if span is not None else None
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, lengths, spans, windows = ctx.saved_tensors
        opts = replace(ctx.opts, lengths=lengths, spans=spans, windows=windows)
        dq, dk, dv, dspan = _backward(_Pass(q, k, v, out, lse, do=grad_out), opts)
        dspan = dspan.to(ctx.span_dtype) if ctx.span_dtype is not None else None
        return dq, dk, dv, dspan, None
