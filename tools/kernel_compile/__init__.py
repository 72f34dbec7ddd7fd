"""Compile chapter 10's Triton kernels for a GPU without one: what the compiler makes of them.

The repository's compile harness (``python tools/kernel_compile``, ``make compile-matrix``); the
package keeps only the reader of its committed results (:mod:`attncourse.kernels.compile`).

Triton compiles for an explicit target: ``GPUTarget("cuda", capability, 32)`` needs no GPU,
only the ``ptxas``, ``cuobjdump`` and ``nvdisasm`` that the triton wheel bundles. This module
compiles each kernel **exactly as the launcher specialises it** and reports what a GPU of that
kind would get:

* **shared memory per block** (``metadata.shared``, the dynamic shared memory the launch asks
  for) against the target's limit (:data:`TARGETS`); past it, the launch fails with
  ``OutOfResources``;
* **registers per thread** and **spilled bytes** (``ptxas -v``: spill stores and loads go to
  local memory, which lives in DRAM behind the caches);
* **tensor-core instructions**: whether ``tl.dot`` became an MMA layout in the TritonGPU IR
  (``nvidia_mma`` version 2 is ``mma.sync``, version 3 is Hopper's ``wgmma``) and how many
  ``HMMA`` / ``HGMMA`` instructions the SASS holds (``cuobjdump -sass``);
* the SASS text itself.

How the launcher's specialisation is captured. The launcher
(:func:`attncourse.kernels.flash.flash_attention` and friends) is run on small CPU tensors
while Triton's active driver is a stub that names the target, and Triton's
``knobs.runtime.jit_cache_hook`` records every kernel the launcher would compile and returns
``True``, which tells Triton to skip compiling and launching it. The record holds the kernel's
signature (argument types), constexprs (block sizes, flags, strides folded to 1), divisibility
attributes and options (``num_warps``, ``num_stages``): what a real launch on that GPU would
compile. Meanwhile ``torch.cuda.get_device_capability`` answers the target's capability and
the launcher runs under :func:`attncourse.kernels.flash.launch_target`, which makes it take the
CPU tensors and configure its launches for the target (CPU tensors would otherwise get the
interpreter's small tiles): :func:`attncourse.kernels.config.launch_config`'s choice.
``compile_specs`` (:mod:`.specs`) builds the same launches from the launcher's own functions,
and the tests check that both agree. The inputs have the
specialisation of the chapter's benchmark (``B=4, H=16, L=S=4096``): every size and stride a
multiple of 16 and none equal to 1 except the last stride.

Compiling takes from under a second to a minute per kernel on a CPU, so results are cached
on disk (:func:`cache_dir`), keyed by the kernel's source (with the functions it calls), the
triton version, the target and everything the launcher passed. A missing cache only costs time.

Capturing costs no compiling, so whether the committed full matrix
(:data:`attncourse.kernels.compile.RESULTS`, which chapter 10 reads) is still what the kernels
and the launcher give can be checked in seconds: each kernel's entry records its
``fingerprint`` (the cache key without line numbers), and ``stale_requests``
(``python tools/kernel_compile --check``) captures every request again and lists those
whose kernels, launch configuration or refusal changed since ``make compile-matrix``.

Nothing here runs a kernel, and nothing here is a timing: registers, spills and shared memory
are what the compiler produced, which bounds what a GPU can run, not how fast it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import importlib
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from attncourse.kernels.compile import load_results
from attncourse.kernels.config import TARGETS as CONFIG_TARGETS
from attncourse.kernels.config import shared_memory_per_block, supports_bfloat16

from .specs import compile_specs

__all__ = [
    "Target",
    "TARGETS",
    "VARIANTS",
    "DTYPES",
    "KernelLaunch",
    "CompileResult",
    "cache_dir",
    "capture_launches",
    "compile_launch",
    "compile_variant",
    "compile_matrix",
    "tensor_core_kind",
    "HEAD_DIMS",
    "matrix_requests",
    "main",
    "fingerprint",
    "stale_requests",
    "compile_specs",
]


# -- the targets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A GPU architecture to compile for.

    ``shared_per_block`` is the most shared memory one thread block may use, in bytes: the
    "maximum amount of shared memory per thread block" of the CUDA C++ Programming Guide's
    table of technical specifications per compute capability, 64 KiB on 7.5, 163 KiB on 8.0,
    99 KiB on 8.6 and 8.9, 227 KiB on 9.0 (above 48 KiB a kernel must opt in, which Triton's
    launcher does). ``bf16``: whether the architecture has bfloat16 arithmetic (8.0 and later).
    Both come from :mod:`attncourse.kernels.config`.
    """

    name: str
    capability: Tuple[int, int]
    shared_per_block: int
    gpus: str
    bf16: bool

    @property
    def arch(self) -> int:
        """The capability in Triton's notation, ``80`` for ``(8, 0)``."""
        return 10 * self.capability[0] + self.capability[1]


def _make_target(capability: Tuple[int, int]) -> Target:
    return Target(
        f"sm_{capability[0]}{capability[1]}",
        capability,
        shared_memory_per_block(capability),
        CONFIG_TARGETS[capability][0],
        supports_bfloat16(capability),
    )


#: The architectures compiled for, with their limits from :mod:`attncourse.kernels.config`
#: (the one place the course states them).
TARGETS: Dict[str, Target] = {t.name: t for t in map(_make_target, CONFIG_TARGETS)}

#: The four kinds of attention the launcher specialises its kernels for.
VARIANTS = ("plain", "causal", "lengths", "span")
#: The dtypes the launcher takes, by name.
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _target(target) -> Target:
    if isinstance(target, Target):
        return target
    if isinstance(target, str) and target in TARGETS:
        return TARGETS[target]
    raise ValueError(f"target must be a Target or one of {sorted(TARGETS)}, got {target!r}")


# -- capturing what the launcher compiles ----------------------------------------------------


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel as a launcher would compile it for one target.

    ``kernel`` is a short name (``_forward_kernel`` gives ``"forward"``); ``module`` and
    ``qualname`` locate the ``@triton.jit`` function; ``signature``, ``constexprs`` and
    ``attrs`` are what Triton's ``ASTSource`` takes; ``options`` the compile options
    (``num_warps``, ``num_stages``, ...).
    """

    kernel: str
    module: str
    qualname: str
    signature: Dict[str, str]
    constexprs: Dict[Tuple[int, ...], Any]
    attrs: Dict[Tuple[int, ...], Any]
    options: Dict[str, Any]

    def function(self):
        """The ``@triton.jit`` function (imported by name: a launch can cross processes)."""
        obj: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj

    @property
    def constants(self) -> Dict[str, Any]:
        """Each constexpr under its argument's name, as in ``{"BLOCK_M": 64, "CAUSAL": True}``."""
        names = list(self.signature)
        return {names[path[0]]: value for path, value in self.constexprs.items() if len(path) == 1}


def _short_name(name: str) -> str:
    return name.strip("_").removesuffix("_kernel")


class _StubDriver:
    """Stands in for Triton's CUDA driver: names the target, owns no GPU."""

    def __init__(self, target: Target):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", target.arch, 32)
        self.device = (  # its own key in each kernel's per-device caches
            f"attncourse-compile-{target.name}"
        )

    def is_active(self) -> bool:
        return True

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        return torch.device("cpu")


@contextlib.contextmanager
def _capturing(target: Target) -> Iterator[List[KernelLaunch]]:
    """Within it, launching a Triton kernel records a :class:`KernelLaunch` instead of compiling.

    Also answers ``torch.cuda`` queries as the target GPU would, and runs the launcher under
    :func:`attncourse.kernels.flash.launch_target`, so that it takes CPU tensors (never read by a
    kernel) and picks the launch settings of the target
    (:func:`attncourse.kernels.config.launch_config`), not the interpreter's small tiles.
    """
    from triton import knobs
    from triton.runtime.driver import driver

    from attncourse.kernels import flash

    _require_compiled_kernels(flash)
    launches: List[KernelLaunch] = []
    touched = []

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        jit = fn.jit_function
        touched.append(jit)
        names = list(compile["signature"])
        options = {
            k: compile[k]
            for k in (
                "num_warps",
                "num_ctas",
                "num_stages",
                "enable_fp_fusion",
                "launch_cooperative_grid",
            )
        }
        launches.append(
            KernelLaunch(
                kernel=_short_name(jit.fn.__name__),
                module=jit.fn.__module__,
                qualname=jit.fn.__qualname__,
                signature=dict(compile["signature"]),
                constexprs=dict(compile["constants"]),
                attrs=dict(compile["configs"][0]),
                options=options,
            )
        )
        assert len(names) == len(jit.params)
        return True  # tells Triton not to compile (nor launch) this kernel

    stub = _StubDriver(target)
    saved_active = driver._active
    saved_hook = knobs.runtime.jit_cache_hook
    patches = {
        (torch.cuda, "get_device_capability"): lambda device=None: target.capability,
        (torch.cuda, "is_available"): lambda: True,
        (torch.cuda, "is_bf16_supported"): lambda *a, **k: target.bf16,
        (torch.cuda, "get_device_name"): lambda device=None: f"compile-only {target.name}",
        (torch.cuda, "device"): lambda device=None: contextlib.nullcontext(),
        (torch.cuda, "current_device"): lambda: 0,
    }
    saved = {(obj, name): getattr(obj, name) for obj, name in patches if hasattr(obj, name)}
    driver.set_active(stub)
    knobs.runtime.jit_cache_hook = hook
    for (obj, name), value in patches.items():
        setattr(obj, name, value)
    try:
        with flash.launch_target(target.capability, target.gpus):
            yield launches
    finally:
        for obj, name in patches:
            if (obj, name) in saved:
                setattr(obj, name, saved[(obj, name)])
            else:
                delattr(obj, name)
        knobs.runtime.jit_cache_hook = saved_hook
        driver._active = saved_active
        for jit in touched:  # the stub device's binder and target go with it
            jit.device_caches.pop(stub.device, None)


def _require_compiled_kernels(flash) -> None:
    if flash.interpreting():
        raise RuntimeError(
            "triton was imported with TRITON_INTERPRET=1, so the kernels are interpreted, "
            "not compiled: compile in a process that imports triton without it "
            "(python tools/kernel_compile)"
        )


def _inputs(variant: str, dtype: torch.dtype, head_dim: int, length: int):
    # Uninitialised: no kernel runs, and the launcher reads no value of q, k or v, only their
    # dtype, sizes, strides and the alignment of their data, which is all Triton specialises
    # on. Filling them (random values, zeros) would cost most of a capture's time.
    q, k, v = (
        torch.empty(2, 16, length, head_dim, dtype=dtype).requires_grad_(True) for _ in range(3)
    )
    return q, k, v


def _run_launcher(
    variant: str, dtype: torch.dtype, head_dim: int, backward: bool, length: int = 256
) -> None:
    from attncourse.kernels import flash

    q, k, v = _inputs(variant, dtype, head_dim, length)
    if variant == "plain":
        out = flash.flash_attention(q, k, v)
    elif variant == "causal":
        out = flash.flash_attention(q, k, v, causal=True)
    elif variant == "lengths":
        out = flash.flash_attention(q, k, v, lengths=torch.tensor([length, length // 2]))
    elif variant == "span":
        span = torch.full((q.size(1),), length / 4, requires_grad=True)
        out = flash.adaptive_span_flash_attention(q, k, v, span, ramp=32.0)
    else:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if backward:
        out.backward(torch.empty_like(out))  # the gradient's values are never read either


def capture_launches(
    target, variant: str, dtype, head_dim: int, *, backward: bool = True
) -> List[KernelLaunch]:
    """The kernels the launcher compiles for ``variant`` on ``target``, in launch order.

    Args:
        target: a :class:`Target` or its name (``"sm_75"`` ... ``"sm_90"``).
        variant: one of :data:`VARIANTS`: ``"plain"``, ``"causal"``, ``"lengths"`` (a key
            padding length per sequence) or ``"span"`` (adaptive span, causal).
        dtype: ``torch.float16``, ``torch.bfloat16`` or ``torch.float32`` (or its name).
        head_dim: the head size ``d`` (16..128).
        backward: also run the backward pass (its three kernels).

    Raises:
        ValueError: an unknown target, variant or dtype name, or a request the launcher refuses
            for the target (bfloat16 on sm_75).
        TypeError: a dtype that is not one of :data:`DTYPES`, a head size that is not an int.
    """
    target = _target(target)
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        dtype = DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise TypeError(f"dtype must be float16, bfloat16 or float32, got {dtype}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    with _capturing(target) as launches:
        _run_launcher(variant, dtype, head_dim, backward)
    return launches


# -- compiling one kernel --------------------------------------------------------------------


@dataclass
class CompileResult:
    """What compiling one :class:`KernelLaunch` for one target gave.

    Sizes in bytes; ``registers`` per thread; ``spill_stores``/``spill_loads`` per thread
    (``ptxas -v``); ``mma_version`` 0 where ``tl.dot`` stayed on the FMA path, 2 for
    ``mma.sync``, 3 for ``wgmma``; ``hmma``/``hgmma`` the counts of those SASS instructions;
    ``seconds`` the compile's wall time on the machine that compiled it (0 from the cache).
    """

    target: str
    kernel: str
    constants: Dict[str, Any]
    num_warps: int
    num_stages: int
    shared: int
    shared_limit: int
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    mma_version: int
    hmma: int
    hgmma: int
    sass_instructions: int
    seconds: float
    cached: bool = False
    sass: str = field(default="", repr=False)

    @property
    def fits(self) -> bool:
        """Whether the block's shared memory fits the target's limit (else the launch fails)."""
        return self.shared <= self.shared_limit

    @property
    def spills(self) -> int:
        """Bytes spilled per thread (stores; loads read them back)."""
        return self.spill_stores

    @property
    def tensor_cores(self) -> str:
        """What ``tl.dot`` became, ``"wgmma"``, ``"mma.sync"`` or ``"none (FMA)"``
        (:func:`tensor_core_kind`)."""
        return tensor_core_kind(self.mma_version, self.hmma, self.hgmma)

    def summary(self) -> Dict[str, Any]:
        """The facts as a JSON-ready dict, no SASS, no timing (what the committed results keep)."""
        blocks = [self.constants.get(name) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_D")]
        out = {name: getattr(self, name) for name in _SUMMARY_FIELDS}
        out.update(blocks=blocks, fits=self.fits, tensor_cores=self.tensor_cores)
        return out


_SUMMARY_FIELDS = (
    "target",
    "kernel",
    "num_warps",
    "num_stages",
    "shared",
    "registers",
    "spill_stores",
    "spill_loads",
    "stack",
    "mma_version",
    "hmma",
    "hgmma",
    "sass_instructions",
)


def tensor_core_kind(mma_version: int, hmma: int, hgmma: int) -> str:
    """Name what ``tl.dot`` compiled to from the IR's MMA version and the SASS counts.

    ``"wgmma"`` (Hopper's warpgroup MMA, ``HGMMA`` in SASS), ``"mma.sync"`` (``HMMA``),
    ``"none (FMA)"`` when neither the IR nor the SASS holds a tensor-core instruction.
    """
    if hgmma > 0:
        return "wgmma"
    if hmma > 0:
        return "mma.sync"
    if mma_version:
        return f"mma v{mma_version} in IR only"
    return "none (FMA)"


def cache_dir() -> str:
    """The directory of cached results: ``$ATTNCOURSE_COMPILE_CACHE``, else
    ``~/.cache/attncourse/compile``."""
    env = os.environ.get("ATTNCOURSE_COMPILE_CACHE")
    return env if env else str(Path.home() / ".cache" / "attncourse" / "compile")


def _jsonable(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


def _launch_key(launch: KernelLaunch, target: Target, source: str) -> str:
    import triton

    blob = json.dumps(
        [
            triton.__version__,
            target.name,
            launch.module,
            launch.qualname,
            source,
            _jsonable(launch.signature),
            _jsonable(launch.constexprs),
            _jsonable(launch.attrs),
            _jsonable(launch.options),
        ]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _cache_key(launch: KernelLaunch, target: Target) -> str:
    # Triton's own key of the source: the kernel's and its callees' source, their line numbers
    # and the constexpr globals they read
    return _launch_key(launch, target, launch.function().cache_key)


def fingerprint(launch: KernelLaunch, target) -> str:
    """What compiling ``launch`` for ``target`` depends on, as 32 hex digits; no compiling.

    A hash of the triton version, the target, the kernel's source and that of every
    ``@triton.jit`` function it calls, the ``tl.constexpr`` globals they read, and the launch's
    signature, constexprs, divisibility attributes and options: the compile cache's key
    (:func:`compile_launch`) without the line numbers Triton's own key holds, so that moving a
    kernel within its file (an edited docstring above it) changes no fingerprint. The full
    matrix records each kernel's fingerprint; :func:`stale_requests` recomputes them.
    """
    return _launch_key(launch, _target(target), _source_fingerprint(launch.function()))


_SOURCE_FINGERPRINTS: Dict[int, Tuple[Any, str]] = {}


def _source_fingerprint(fn) -> str:
    """``fn.cache_key`` (triton.runtime.jit.JITCallable) without the line numbers.

    Triton hashes a ``@triton.jit`` function's source, the keys of the jit functions it calls
    (found by its ``DependenciesFinder``), its first line's number and the ``tl.constexpr``
    globals it reads. This does the same with the same finder, leaving out the line numbers.
    """
    from triton.language.core import constexpr
    from triton.runtime.jit import DependenciesFinder

    known = _SOURCE_FINGERPRINTS.get(id(fn))
    if known is not None and known[0] is fn:
        return known[1]
    _SOURCE_FINGERPRINTS[id(fn)] = (fn, f"recursion:{fn._fn_name}")

    class Finder(DependenciesFinder):
        def _update_hash(self, func):  # a callee: its fingerprint, not its cache_key
            callee = _source_fingerprint(func) + str(getattr(func, "noinline", False))
            self.hasher.update(callee.encode("utf-8"))

    finder = Finder(
        name=fn._fn_name,
        globals=fn.__globals__,
        nonlocals=inspect.getclosurevars(fn.fn).nonlocals,
        src=fn.src,
    )
    try:
        finder.visit(fn.parse())
    except BaseException:
        del _SOURCE_FINGERPRINTS[id(fn)]  # no placeholder left behind as if it were the key
        raise
    constants = sorted(  # by name and value: the keys' second half, id(globals), varies
        (name, str(val))
        for (name, _), (val, _) in finder.used_global_vals.items()
        if isinstance(val, constexpr)
    )
    key = hashlib.sha256((finder.ret + str(constants)).encode("utf-8")).hexdigest()
    _SOURCE_FINGERPRINTS[id(fn)] = (fn, key)
    return key


_PTXAS_SPILLS = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_MMA_LAYOUT = re.compile(r"nvidia_mma<\{versionMajor = (\d+)")


def _nvidia_tool(name: str) -> str:
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"{name} is neither in the triton wheel ({path.parent}) nor on PATH"
        )
    return found


def _sass(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run(
            [_nvidia_tool("cuobjdump"), "-sass", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout


def _compile_uncached(launch: KernelLaunch, target: Target) -> CompileResult:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    log = io.StringIO()
    start = time.perf_counter()
    saved = (knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile, knobs.cache.dir)
    with tempfile.TemporaryDirectory() as tmp:
        # always_compile + a private cache directory: ptxas runs here, and its -v log is printed
        knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile, knobs.cache.dir = (
            True,
            True,
            tmp,
        )
        try:
            with contextlib.redirect_stdout(log):
                kernel = triton.compile(
                    ASTSource(launch.function(), launch.signature, launch.constexprs, launch.attrs),
                    target=GPUTarget("cuda", target.arch, 32),
                    options=dict(launch.options),
                )
        finally:
            knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile, knobs.cache.dir = saved
    seconds = time.perf_counter() - start
    ptxas = log.getvalue()
    spills = _PTXAS_SPILLS.search(ptxas)
    regs = _PTXAS_REGS.search(ptxas)
    if spills is None or regs is None:
        raise RuntimeError(
            f"could not read ptxas -v's report for {launch.kernel} on {target.name}:\n{ptxas}"
        )
    layout = _MMA_LAYOUT.search(kernel.asm["ttgir"])
    mma_version = int(layout.group(1)) if layout else 0
    if "warp_group_dot" in kernel.asm["ttgir"]:
        mma_version = max(mma_version, 3)
    sass = _sass(kernel.asm["cubin"])
    opcodes = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass)
    return CompileResult(
        target=target.name,
        kernel=launch.kernel,
        constants=_jsonable(launch.constants),
        num_warps=int(launch.options["num_warps"]),
        num_stages=int(launch.options["num_stages"]),
        shared=int(kernel.metadata.shared),
        shared_limit=target.shared_per_block,
        registers=int(regs.group(1)),
        stack=int(spills.group(1)),
        spill_stores=int(spills.group(2)),
        spill_loads=int(spills.group(3)),
        mma_version=mma_version,
        hmma=sum(op.startswith("HMMA") for op in opcodes),
        hgmma=sum(op.startswith("HGMMA") for op in opcodes),
        sass_instructions=len(opcodes),
        seconds=round(seconds, 3),
        sass=sass,
    )


def compile_launch(
    launch: KernelLaunch, target, *, cache: Optional[str] = None, use_cache: bool = True
) -> CompileResult:
    """Compile one captured kernel for ``target`` (or read it from the cache) and report on it.

    Args:
        launch: from :func:`capture_launches`.
        target: a :class:`Target` or its name.
        cache: the cache directory (default :func:`cache_dir`).
        use_cache: ``False`` compiles afresh (and refreshes the cache).

    Raises:
        TypeError: ``launch`` is not a :class:`KernelLaunch`.
        RuntimeError: ptxas's report cannot be read (triton's own compile errors pass through).
    """
    if not isinstance(launch, KernelLaunch):
        raise TypeError(
            f"launch must be a KernelLaunch (from capture_launches), got {type(launch).__name__}"
        )
    target = _target(target)
    directory = Path(cache if cache is not None else cache_dir())
    key = _cache_key(launch, target)
    path = directory / f"{key}.json"
    if use_cache and path.exists():
        try:
            data = json.loads(path.read_text())
            sass_path = directory / f"{key}.sass.gz"
            data["sass"] = (
                gzip.decompress(sass_path.read_bytes()).decode() if sass_path.exists() else ""
            )
            data["cached"] = True
            data["seconds"] = 0.0
            return CompileResult(**data)
        except (OSError, ValueError, TypeError):
            pass  # a damaged entry: compile again
    result = _compile_uncached(launch, target)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        data = {
            f.name: getattr(result, f.name)
            for f in dataclasses.fields(result)
            if f.name not in ("sass", "cached")
        }
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        (directory / f"{key}.sass.gz").write_bytes(gzip.compress(result.sass.encode()))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache: results are still returned
    return result


def compile_variant(
    target,
    variant: str,
    dtype,
    head_dim: int,
    *,
    backward: bool = True,
    cache: Optional[str] = None,
) -> List[CompileResult]:
    """Capture and compile every kernel the launcher uses for one request on ``target``.

    Example: ``compile_variant("sm_75", "causal", torch.float16, 64)`` gives four results
    (forward, backward preprocess, backward dK/dV, backward dQ) with shared memory, registers,
    spills and the tensor-core instructions of each.
    """
    target = _target(target)
    return [
        compile_launch(launch, target, cache=cache)
        for launch in capture_launches(target, variant, dtype, head_dim, backward=backward)
    ]


# -- many at once ----------------------------------------------------------------------------


def _worker_init(niceness: int) -> None:
    if niceness:
        try:
            os.nice(niceness)
        except OSError:
            pass
    torch.set_num_threads(1)


def _worker_compile(launch: KernelLaunch, target_name: str, cache: Optional[str]) -> CompileResult:
    return compile_launch(launch, target_name, cache=Path(cache) if cache else None)


def compile_matrix(
    requests: Iterable[Tuple[str, str, str, int]],
    *,
    workers: int = 2,
    niceness: int = 10,
    cache: Optional[str] = None,
    backward: bool = True,
    progress: Optional[Callable[[str], None]] = None,
) -> Dict[str, Any]:
    """Compile many ``(target, variant, dtype name, head_dim)`` requests, ``workers`` at a time.

    Captures every request's kernels here (fast), compiles each distinct one once (two requests
    that differ only in ``d`` within one padded block size often share kernels) in ``workers``
    processes at ``nice`` level ``niceness``. Returns ``{"kernels": {id: summary}, "rows": [...],
    "compile_seconds": {id: seconds}}``: each kernel's :meth:`CompileResult.summary` (or
    ``{"error": message}``) once, with its ``"fingerprint"`` (what compiling it depends on,
    line numbers aside, which ``--check`` compares without compiling), and one row per request
    with its fields, ``"refused"`` (the launcher's message, or ``None``) and ``"kernels"``, the
    ids of the kernels it launches.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows, jobs = _capture_requests(requests, backward)
    results: Dict[Tuple[str, str], Any] = {}
    cache_arg = str(cache) if cache is not None else None
    if workers <= 1:
        for key, (launch, target_name) in jobs.items():
            results[key] = _safe_compile(launch, target_name, cache_arg)
            if progress:
                progress(_progress_line(key, results[key], len(results), len(jobs)))
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_worker_init, initargs=(niceness,)
        ) as pool:
            futures = {
                key: pool.submit(_safe_compile, launch, target_name, cache_arg)
                for key, (launch, target_name) in jobs.items()
            }
            for key, future in futures.items():
                results[key] = future.result()
                if progress:
                    progress(_progress_line(key, results[key], len(results), len(jobs)))

    ids = {key: f"{key[0]}/{key[1][:12]}" for key in jobs}
    kernels = {
        ids[key]: {
            **(r.summary() if isinstance(r, CompileResult) else {"error": r}),
            "fingerprint": fingerprint(*jobs[key]),
        }
        for key, r in results.items()
    }
    seconds = {ids[key]: r.seconds for key, r in results.items() if isinstance(r, CompileResult)}
    for row in rows:
        row["kernels"] = [ids[key] for key in row.pop("keys")]
    return {"kernels": kernels, "rows": rows, "compile_seconds": seconds}


def _capture_requests(
    requests: Iterable[Tuple[str, str, str, int]], backward: bool = True
) -> Tuple[List[Dict[str, Any]], Dict[Tuple[str, str], Tuple[KernelLaunch, str]]]:
    """Capture every request's kernels (no compiling): one row per request, with the request's
    fields, ``"refused"`` (the launcher's message, or ``None``) and ``"keys"``, the
    ``(target, cache key)`` of each kernel it launches; and each distinct kernel's launch."""
    rows: List[Dict[str, Any]] = []
    jobs: Dict[Tuple[str, str], Tuple[KernelLaunch, str]] = {}
    for target_name, variant, dtype_name, head_dim in requests:
        target = _target(target_name)
        row: Dict[str, Any] = dict(
            target=target.name,
            variant=variant,
            dtype=dtype_name,
            head_dim=head_dim,
            refused=None,
            keys=[],
        )
        try:
            launches = capture_launches(target, variant, dtype_name, head_dim, backward=backward)
        except (TypeError, ValueError, RuntimeError) as error:
            row["refused"] = f"{type(error).__name__}: {error}"
            launches = []
        for launch in launches:
            key = (target.name, _cache_key(launch, target))
            jobs.setdefault(key, (launch, target.name))
            row["keys"].append(key)
        rows.append(row)
    return rows, jobs


def stale_requests(results: Optional[Mapping[str, Any]] = None) -> List[str]:
    """The requests of ``results`` (default :func:`load_results`) that the kernels and the
    launcher would no longer compile as recorded, each as a line saying what changed; compiles
    nothing.

    Captures every request's kernels now (a few hundredths of a second each) and compares their
    :func:`fingerprint` with those ``make compile-matrix`` recorded, kernel by kernel, and
    whether the launcher refuses the request. Results from another triton version give one
    line. An empty list: every recorded result is what compiling now would give, as far as
    the compiler's inputs tell (the compiler's output itself is not checked here).
    """
    import triton

    results = load_results() if results is None else results
    if results.get("triton") != triton.__version__:
        return [
            f"compiled with triton {results.get('triton')}, this is triton {triton.__version__}"
        ]
    fields = ("target", "variant", "dtype", "head_dim")
    requests = [tuple(row[f] for f in fields) for row in results["rows"]]
    rows, jobs = _capture_requests(requests)
    prints = {key: fingerprint(*job) for key, job in jobs.items()}
    stale = []
    for then, now in zip(results["rows"], rows):
        name = "{} {} {} d={}".format(*(then[f] for f in fields))
        if bool(then["refused"]) != bool(now["refused"]):
            was = "refused" if then["refused"] else "compiled"
            stale.append(f"{name}: {was} then, {now['refused'] or 'compiled'} now")
            continue
        recorded = [results["kernels"][k] for k in then["kernels"]]
        current = [(jobs[key][0].kernel, prints[key]) for key in now["keys"]]
        if [k.get("kernel") for k in recorded] != [kernel for kernel, _ in current]:
            stale.append(
                f"{name}: launches {[kernel for kernel, _ in current]} now, "
                f"{[k.get('kernel') for k in recorded]} then"
            )
            continue
        if any("fingerprint" not in k for k in recorded):
            stale.append(f"{name}: no fingerprint recorded")
            continue
        changed = [
            kernel
            for (kernel, now_print), k in zip(current, recorded)
            if k["fingerprint"] != now_print
        ]
        if changed:
            stale.append(f"{name}: {', '.join(changed)} changed (source or launch)")
    return stale


def _safe_compile(launch: KernelLaunch, target_name: str, cache: Optional[str]):
    try:
        return _worker_compile(launch, target_name, cache)
    except Exception as error:  # a compile failure is a result of the matrix, not its end
        return f"{type(error).__name__}: {str(error)[:2000]}"


def _progress_line(key, result, done: int, total: int) -> str:
    if isinstance(result, CompileResult):
        what = (
            f"{result.kernel:20s} shared {result.shared // 1024:4d} KiB regs {result.registers:3d} "
            f"spills {result.spill_stores:5d} {result.tensor_cores:10s} {result.seconds:6.1f} s"
            f"{' (cached)' if result.cached else ''}"
        )
    else:
        what = f"FAILED {result[:200]}"
    return f"[{done}/{total}] {key[0]} {what}"


# -- the committed results and chapter 10's tables ------------------------------------------

#: The full matrix's result, as ``make compile-matrix`` writes it into the package.
# -- the requests, and the command line ------------------------------------------------------

#: The head sizes of the full matrix, in the order it compiles them. Each padded block size comes
#: first (128, 64, 32, 16; the largest tiles first), then one size that is not a power of two
#: (96), which the kernels mask.
HEAD_DIMS = (128, 64, 32, 16, 96)


def matrix_requests(
    *, subset: bool = False, head_dims: Sequence[int] = HEAD_DIMS
) -> List[Tuple[str, str, str, int]]:
    """The ``(target, variant, dtype, head_dim)`` requests of the full matrix, or of CI's subset.

    The full matrix is every target x variant x dtype x head size in ``head_dims`` (bfloat16 on
    sm_75 included: the launcher must refuse it), one head size after the other. The subset is
    what CI compiles to compare with the committed full matrix, whose freshness
    ``stale_requests`` checks for every request without compiling: at d = 128 (the largest
    tiles, nearest the shared-memory and register limits), causal float16 on sm_75 (the T4,
    Colab's GPU: the FMA path), on sm_80 (the A100: ``mma.sync``) and on sm_90 (the H100:
    ``wgmma``), and adaptive span in bfloat16 on sm_90 and on sm_75, where the launcher refuses
    it (nothing to compile). About half a minute's compiling on one core.
    """
    if subset:
        return [
            ("sm_75", "causal", "float16", 128),
            ("sm_75", "span", "bfloat16", 128),
            ("sm_80", "causal", "float16", 128),
            ("sm_90", "causal", "float16", 128),
            ("sm_90", "span", "bfloat16", 128),
        ]
    return [
        (name, variant, dtype, d)
        for d in head_dims
        for name in TARGETS
        for variant in VARIANTS
        for dtype in DTYPES
    ]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python tools/kernel_compile [--subset] [--out FILE]``: compile, write JSON;
    ``--check [FILE]``: list the stale requests of the committed results (or FILE's)."""
    import argparse
    import platform
    import sys

    parser = argparse.ArgumentParser(prog="python tools/kernel_compile", description=main.__doc__)
    parser.add_argument(
        "--subset", action="store_true", help="CI's sample of the matrix, not the full matrix"
    )
    parser.add_argument(
        "--targets", nargs="*", default=None, help=f"restrict to these of {list(TARGETS)}"
    )
    parser.add_argument(
        "--head-dims",
        nargs="*",
        type=int,
        default=list(HEAD_DIMS),
        help="the full matrix's head sizes, in this order",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--check",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help=(
            "compile nothing: list the requests of the committed results (or of FILE) whose "
            "kernels or launch changed since they were compiled; exit 1 if any"
        ),
    )
    args = parser.parse_args(argv)
    if args.check is not None:
        results = load_results(args.check or None)
        stale = stale_requests(results)
        for line in stale:
            print(line)
        kernels = sum(len(row["kernels"]) for row in results["rows"])
        print(
            f"{len(results['rows'])} requests ({kernels} kernels) checked without compiling: "
            f"{len(stale)} stale" + (", rerun make compile-matrix" if stale else ""),
            file=sys.stderr,
        )
        return 1 if stale else 0

    requests = matrix_requests(subset=args.subset, head_dims=args.head_dims)
    if args.targets:
        unknown = set(args.targets) - set(TARGETS)
        if unknown:
            parser.error(f"unknown targets {sorted(unknown)}")
        requests = [r for r in requests if r[0] in args.targets]
    if args.workers <= 1 and args.nice:
        os.nice(args.nice)  # compiling in this process: it is the one to yield the CPU
    start = time.perf_counter()
    matrix = compile_matrix(
        requests,
        workers=args.workers,
        niceness=args.nice,
        progress=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
    )
    seconds = matrix.pop("compile_seconds")
    import triton

    report = {
        "what": (
            "compiler output for chapter 10's kernels, not timings: shared memory per "
            "block, registers and spilled bytes per thread, tensor-core instructions, per target, "
            "compiled without a GPU "
            "by python tools/kernel_compile"
        ),
        "triton": triton.__version__,
        "torch": torch.__version__.split("+")[0],
        "subset": bool(args.subset),
        "head_dims": sorted({r[3] for r in requests}),
        "targets": {
            t.name: {**dataclasses.asdict(t), "capability": list(t.capability)}
            for t in TARGETS.values()
        },
        **matrix,
    }
    text = _dump(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    else:
        print(text, end="")
    errors = [k for k, v in report["kernels"].items() if "error" in v]
    print(
        f"{len(report['rows'])} requests, {len(report['kernels'])} distinct kernels "
        f"({len(errors)} failed), "
        f"{sum(seconds.values()):.0f} s of compiling, {time.perf_counter() - start:.0f} s wall "
        f"on {platform.node()} ({os.cpu_count()} cores, {args.workers} workers)",
        file=sys.stderr,
    )
    return 1 if errors else 0


def _dump(report: Dict[str, Any]) -> str:
    """JSON with one kernel and one row per line: small, and readable in a diff."""
    head = {k: v for k, v in report.items() if k not in ("kernels", "rows")}
    lines = ["{"]
    lines += [
        f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}," for k, v in sorted(head.items())
    ]
    lines.append(' "kernels": {')
    items = sorted(report["kernels"].items())
    lines += [
        f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}{',' if i < len(items) - 1 else ''}"
        for i, (k, v) in enumerate(items)
    ]
    lines.append(" },")
    lines.append(' "rows": [')
    rows = report["rows"]
    lines += [
        f"  {json.dumps(r, sort_keys=True)}{',' if i < len(rows) - 1 else ''}"
        for i, r in enumerate(rows)
    ]
    lines += [" ]", "}"]
    return "\n".join(lines) + "\n"
