"""Chapter 10 exercises: the loops, two kernels to write, a bug to find and the backward pass.

1-2. the key blocks a causal query block visits and the tiles an adaptive-span head skips,
     in plain Python, checked against :mod:`attncourse.kernels.tiles`;
3-4. a masked row softmax and the online-softmax loop, written as Triton kernels that the
     checker launches (compiled on a GPU; without one, through Triton's interpreter on CPU
     tensors, which bounds-checks every load and store);
5.   find the wrong line of a causal-softmax kernel;
6.   the backward pass of attention from the saved log-sum-exp, checked against autograd.

triton is imported only when a kernel exercise is checked or launched (:func:`_triton`), so the
package imports without it.
"""

from __future__ import annotations

import ast
import collections.abc
import contextlib
import dataclasses
import inspect
import itertools
import json
import math
import operator
import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..efficient import tile_schedule
from ..kernels.tiles import causal_key_stop, key_block_range, tile_map
from ._core import (
    Mistake,
    NotAttempted,
    answer_field,
    call,
    check_line_number,
    check_number,
    diagnose,
    exercise,
    expect_tensor,
    integer,
    matches,
    named,
    number,
    several,
    stub_field,
)
from ._i18n import N_, _

# -- 1. the key blocks a causal query block must visit ----------------------------------------


def _key_blocks_solution(query_block, block_m, block_n, query_len, key_len):
    first_query = query_block * block_m
    last_query = min(first_query + block_m, query_len) - 1
    last_key = min(key_len - 1, last_query + key_len - query_len)  # bottom-right: j <= i + S - L
    if last_key < 0:
        return []  # every query of the block comes before the first key
    return list(range(last_key // block_n + 1))


def _blocks(
    query_block,
    block_m,
    block_n,
    query_len,
    key_len,
    *,
    top_left=False,
    everything=False,
    first_query=False,
) -> List[int]:
    """The known wrong answers, computed as a learner would."""
    if everything:
        return list(range(math.ceil(key_len / block_n)))
    offset = 0 if top_left else key_len - query_len
    # the keys up to the block's first query's last one, or up to its last query's
    stop = query_block * block_m + (1 if first_query else block_m)
    hi = min(key_len, stop + offset)
    return list(range(math.ceil(max(hi, 0) / block_n)))


_CASES = [  # (query_block, block_m, block_n, L, S): L = S, L < S (a cache), L > S, partial blocks
    (0, 16, 16, 64, 64),
    (2, 16, 16, 64, 64),
    (1, 16, 32, 50, 50),
    (0, 32, 16, 40, 100),
    (1, 32, 16, 40, 100),
    (3, 16, 16, 70, 37),
    (0, 16, 16, 70, 37),
    (2, 64, 32, 200, 200),
    (4, 16, 64, 77, 300),
    (1, 16, 16, 20, 20),
    (2, 16, 16, 33, 33),  # a last block of one query, whose last key (32) opens a new key block
    (1, 16, 16, 47, 16),  # L > S: the block's last query sees exactly one key, key 0
    (1, 32, 16, 48, 48),  # a cut last block with S a multiple of block_n: no block past S
    (0, 16, 16, 50, 30),  # a last key of -5: rounding toward zero would give block 0
]


#: More block indices than any case has: a generator that never stops is cut here.
_MOST_BLOCKS = 10_000


def _listed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose iterator result (a generator) is drawn inside the call, up to
    :data:`_MOST_BLOCKS` + 1 items, so that :func:`call`'s time limit also stops a generator
    that filters for ever; ``inspect.signature`` still sees ``fn``'s parameters. What is not a
    function is left to :func:`call`, which says what it is."""
    if not callable(fn) or inspect.isclass(fn):
        return fn

    def listed(*args: Any) -> Any:
        result = fn(*args)
        if isinstance(result, collections.abc.Iterator):
            result = list(itertools.islice(result, _MOST_BLOCKS + 1))
        return result

    try:
        listed.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - no signature to keep (a builtin, a hostile object)
        pass
    return listed


def _as_list(result) -> List[int]:
    """The block indices from a list, range, tuple, tensor or array of integers, else a Mistake."""
    kind = type(result).__name__
    if isinstance(result, list) and len(result) > _MOST_BLOCKS:
        raise Mistake(
            _(
                "Your function returned more than {count:,} block indices: does a generator "
                "never stop?"
            ).format(count=_MOST_BLOCKS)
        )
    if isinstance(result, (str, bytes)):  # its characters are not indices, even "012"
        raise Mistake(
            _("Return the key-block indices as a list or range of integers, got {kind}.").format(
                kind=kind
            )
        )
    if str(getattr(result, "dtype", "")) in ("torch.bool", "bool") or (
        isinstance(result, (list, tuple))
        and any(type(b).__name__ in ("bool", "bool_") for b in result)
    ):
        raise Mistake(
            _(
                "You returned booleans (which blocks are visible?): return the indices of the "
                "visible blocks, e.g. torch.nonzero(visible).flatten() or "
                "[b for b, seen in enumerate(visible) if seen]."
            )
        )
    if isinstance(result, torch.Tensor) and result.is_complex():
        raise Mistake(
            _("Return the key-block indices as integers, got a {result_dtype} tensor.").format(
                result_dtype=result.dtype
            )
        )

    def index(b) -> int:
        if isinstance(b, (str, bytes)):  # float("1") would read it
            raise TypeError(f"a block index, not {type(b).__name__}")
        try:
            return operator.index(b)  # Python, numpy and torch integers
        except TypeError:
            value = float(b)  # a whole float (np.arange of a float) is an index too; 1.5 is not
            if not value.is_integer():
                raise
            return int(value)

    try:
        if isinstance(result, torch.Tensor):
            result = result.detach().cpu().reshape(-1).tolist()
        blocks = [index(b) for b in result]
    except Exception:  # noqa: BLE001 - anything else the learner returned: a hostile object, a meta or sparse tensor
        raise Mistake(
            _("Return the key-block indices as a list or range of integers, got {kind}.").format(
                kind=kind
            )
        ) from None
    return sorted(blocks)


@exercise(
    "gpu/causal-key-blocks",
    title="The key blocks a causal query block must visit",
    hint=(
        """
            Which query of the block sees the most keys, and which is the last key it may
            see? The key blocks to visit run from the first up to the one holding that
            key; think about a block that sees no key at all.
        """,
        """
            Query i may attend to key j when j <= i + (S - L) (the last query aligned with the last key).
            The block holds the queries block_m * query_block .. min(block_m * (query_block + 1), L) - 1;
            its LAST query sees the most keys. The key blocks to visit are 0 .. (that last key) // block_n,
            and none at all when that last key is negative (L > S: the first queries come before every key).
        """,
    ),
    solution=_key_blocks_solution,
    name="causal_key_blocks",
    forbids=(key_block_range, tile_map, causal_key_stop, tile_schedule),
)
def _check_key_blocks(fn) -> str:
    for case in _CASES:
        where = _("query block {}, block_m={}, block_n={}, L={}, S={}").format(*case)
        try:
            got = _as_list(call(_listed(fn), *case))
        except Mistake as error:  # the learner's function failed: say on which input
            raise Mistake(_("At {where}: {message}").format(where=where, message=error)) from None
        expected = _key_blocks_solution(*case)
        if got == expected:
            continue
        if not expected:
            raise Mistake(
                _(
                    "At {where} every query of the block comes before the first key (L > S and the last "
                    "query aligned with the last key): the block visits no key block at all, got {got}."
                ).format(where=where, got=got)
            )
        if got == _blocks(*case, everything=True):
            raise Mistake(
                _(
                    "At {where} you visit every key block: blocks entirely above the diagonal hold only "
                    "masked scores. Stop at the block of the last key the block's last query may see."
                ).format(where=where)
            )
        if got == _blocks(*case, top_left=True):
            raise Mistake(
                _(
                    "At {where} you aligned the causal mask top left (j <= i): the package aligns the "
                    "last query with the last key, j <= i + (S - L)."
                ).format(where=where)
            )
        # (an empty list is also a last key 0 taken for "no key": no name for it)
        if got and got == _blocks(*case, first_query=True):
            raise Mistake(
                _(
                    "At {where} you stopped at the keys of the block's first query. Its last query "
                    "sees the most keys, up to j = i + (S - L) for that query i: the loop runs to "
                    "the block of that key."
                ).format(where=where)
            )
        if got == expected[:-1]:  # floor of the end, ceil of the last index, ...
            raise Mistake(
                _(
                    "At {where} you dropped the last key block. The last key the block may see, "
                    "j = i + (S - L) for its last query i, lies in block j // block_n, which is "
                    "visited although only partly visible: the blocks are 0 .. j // block_n, that "
                    "is j // block_n + 1 of them (or ceil((j + 1) / block_n), counted from the end "
                    "of the visible keys)."
                ).format(where=where)
            )
        raise Mistake(
            _("At {where} the blocks should be {expected}, got {got}.").format(
                where=where, expected=expected, got=got
            )
        )
    return _(
        "Right: the kernel's loop runs over exactly these blocks "
        "(attncourse.kernels.tiles.key_block_range)."
    )


# -- 2. the tiles an adaptive-span head skips --------------------------------------------------

_SKIPPED = "UENDXg=="
_SKIPPED_MISTAKES = (
    "GlZHX1NNT1JRMQkVAE4KHFUGGwBBGgEDAQoHUhwDQQAdAgYcVQYbAEEcEQ8HTxYdHhUUABEdWE8BGhZFBAwRHAAGBh"
    "dTBBIfB04LAAJSHgQPDVQBBU8BGhZFAhUBHQIDVQYaCQQHVAcXTwYZGhUSWlZCQ01GRUtTQ05UTDoAAFIQChQaAAsH"
    "TwEaFkUSHx0eEwoRUgcMDREHTgIIFBsdFhVUAAYGTwIaHAkEVAcfFg4HF1MKB1RCWkMXVURHRRUdGAsQVVUTUwYAAQ"
    "cPD08eFwELBBhUAAYZEABTEwgHHRoQTwEaFkUVHRgLEE8UEBwTBFQABgZPERsSAg4aFQJDDhsLBAQYWFQdDE8WHQYL"
    "FVQVCQIGGwEHRRUcEU4ADgABEglBAB0CBhxVWkVRQV5UWFZPWlJBRVxURl5bX1xcUUlBVkVWUF9XSFNHNRwGCwZPBh"
    "4aFRJUEQ8AB1UVGhMEVEVWUF9bUioKFFQZDxpPHRMFAEEYEQgXTxoHB0UVHBFOEQ4YAklFChENHUMaBVIHCkEQHR0X"
    "DhsRFkUCER0CSxVVWVM3SFRZTlJPSFJBUVJUBxoKAxlSGwQXEVQPQxgQGxQNFVhUHQxPARoWRRYdGgoMGFUbAEU2VE"
    "lOAAocHlsfQV9UPEpPSFJBUVVYVAAMG1UIU1hBRUxeTU8sHQZFDBUNTgsOAxdTFhUVBhoGC1UXEgYJVAUbBh0MUhEJ"
    "DhcfSRBPHhcKFkESBgEOTxwGAEUNFQcaQx4AFwEcW1QdGhBPExsBFhVUBRsGHQxSAQAAFxwLEE8TBwERCREHGkMNFB"
    "EYSUEAG04ICgxSHgQZXERCQ1lBUgFFTFQjTkhPRFtdRS4GVBcMGlUfEhxBHBUYBk8SGwUAD1QRGAYdDFICEAQGDU4B"
    "AxoRGEUCER0CSzhVXVNTVV1UBQYWVRAfCgIfB1RDDlUFGgsFGwNOFwcUBlMBDhEHTg0AAVIAEQAGAE4MAVUTUwcNGx"
    "cFQw0aBx0BAAYNThAbBxMXAQ0RB04MARBSEQkOFx9ODgAHF11HTVRWX1RZRVBJRUMtGxtDCBQEFkUEAhEcGk8EBxYX"
    "GFQWAgwMHlIQAAgYXDlDQFVER0xBX1RfQwQQC1MHDRsXBRBVVQYbAEESHRwQG1UDBgATDVQMDwAWGQBFCRUCC0MJEA"
    "UWF0EfERcQTxcXFQoTEVQaCwoYXlMEDxBUGgsKVQASCwYRVB0XDgcGAEUAAFQaCwpVEB8KAh9UBgwDERsdAkEfERdD"
    "AhQKW1VNVEJaQx1VX1MyQV9UX0pBV15TR1BDRV9BVVVQKgoUVBcBFgEBFxdFFRwRThEOGAJTERYdFwtZTwEaFkUMFQ"
    "cFQwkUHh8WQRIGAQ5PRFISEUEQHR0XDhsRFkUbVAABQ19VEwdFBR0HGgIBFhdTH0FfVDxPTwYdUxEJEVQFBhYGUgQM"
    "FRxUD0MYEBsUDRVUEQAHTxQGUwYEHRhGGU9eUiFMQVlUX0NSVUBHVkEVGgpDOFVPUwYEHRhGGU9eUiFMQUlUXFdbWV"
    "IdChVUDk5IT0cgU1hBR0RWTU0I"
)
_SKIPPED_SOLUTION = (
    "NRwRThQGGxYcEkEdB040T0hSEAAIGFwUQ0RVIFpFXFQXCwoDXUNLVUFfVFhXRlVPU1dVQE5OCAoMAVMEFVQQBxAbFB"
    "wQAEFEWkBRW0ZcUzQUEQYXQw0ZHRAOQQZURhIaEAAaABJUQloRT1tcU1NVBlRFQ1lGW1MLBBEQHUMbHRdTDgQNB04F"
    "HRofUwgADFxeT09DRgFFTFRGWlBGVQcDRRUbVFhXHVVZU1NSWFQaCw4BUhoWQQAcC0MEEAtTBw0bFwUQTxMeHAoTXB"
    "kPG0dFXlNTVQZUQ0NdQUFaRU5UQlpKT1tcUxdPVDIBEU8HUk1YQUBYTlVbB1JeRVNAR05eT0NGWxdBWVRaSk9eUkJW"
    "TVQHAUMNGR0QDhJUBk5OT0FSXUtBBk5OVk8BGx8AEk9UCAwdVQBTWEFEWE5SQ1VAX0VSTlQcQ0RVQ1MRCBgRHUNHRF"
    "JYRVNUX05QT15SR0VcVEVeSkFVOx1FABgYTlJfVVlTU1FUXk5WT0hSQFRRVAAHDwoGXlMEBhUdABAbVURHRUtUQltD"
    "QFVAU1hBRkRWU08THQFFERgVBw1PFhMGFgAYVA8XGxAcBwwOGk5OFwcQUhsAABBUHQgGBQFTVFZDRE4XBhkXAEVJTE"
    "FLSkFVJRoRCVQABgZPBRMQDgATEVRDGxweFjoMFQRGV19MRF9FVURNWE9PQ0ZfRVdAWE4ADgABEglcIAYbBkZbAQYI"
    "SV1UQ0MbHB4WOgwVBEZXX0xEX0VVRE1YT09DRl9FV0BYThQGGxYcElxGQFpKQQYHHk1IWg=="
)


@exercise(
    "gpu/span-skipped-tiles",
    title="The tiles an adaptive-span head skips",
    hint=(
        """
            Find the head's window of keys with a weight, then for each query block the
            key blocks that window reaches. Compare the tiles with the causal tiles;
            tiles.span_tile_maps can check your count.
        """,
        """
            The head's keys with a weight are those at distance 0 .. W - 1 with W = ceil(z + R). With L = 4096
            and 64 x 64 tiles, query block r needs the key blocks from the one holding key max(0, 64 r - W + 1)
            up to block r (the diagonal). Add the tiles over r = 0 .. 63 and subtract from the causal count
            64 * 65 / 2. Check with attncourse.kernels.tiles.span_tile_maps(span, ramp, length,
            block_m, block_n), the tiles each head computes, as the chapter counted them.
        """,
    ),
    solution=_SKIPPED_SOLUTION,
)
def _check_skipped(answer) -> str:
    return check_number(
        answer,
        _SKIPPED,
        _SKIPPED_MISTAKES,
        what=_("number of tiles"),
        right=(
            _(
                "Right: this head does about a seventh of the causal work, and its programs finish "
                "that much sooner."
            )
        ),
        otherwise=(
            _(
                "{value:g} is not it. Count the key blocks of each query block from the window W = "
                "ceil(z + R)."
            )
        ),
    )


# -- running a learner's Triton kernel ---------------------------------------------------------

# triton.language, bound by _triton() on first use: the kernel solutions below use it
tl: Any = None

NO_TRITON = N_(
    "This exercise runs your kernel with Triton, which is not installed here (triton has "
    "Linux wheels only; Colab has it). Run the chapter in Colab, or on Linux after pip "
    "install triton."
)


def _interpreter_on(triton: Any) -> bool:
    """Whether triton was imported with TRITON_INTERPRET=1 (its library functions are then
    interpreted)."""
    return type(triton.language.max).__name__ == "InterpretedFunction"


def _triton() -> Tuple[Any, torch.device]:
    """Import triton for a kernel exercise and say where kernels run: ``(triton, device)``.

    With a GPU (and the interpreter off) kernels are compiled and run on CUDA tensors. Without
    one they run in Triton's interpreter on CPU tensors, which needs ``TRITON_INTERPRET=1``
    before triton is first imported: it is set here when triton is not imported yet.
    Raises ``ImportError`` without triton, ``RuntimeError`` when it cannot run a kernel.
    """
    global tl
    gpu = torch.cuda.is_available()
    if "triton" not in sys.modules and not gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton
        import triton.language as language
    except ImportError:
        raise ImportError(NO_TRITON) from None
    tl = language
    if _interpreter_on(triton):
        return triton, torch.device("cpu")
    if gpu:
        return triton, torch.device("cuda")
    raise RuntimeError(
        _(
            "There is no GPU here, and triton was imported before TRITON_INTERPRET=1 was set, so "
            "its interpreter is off. Restart the runtime and run the chapter's first code cell "
            "(it sets TRITON_INTERPRET=1) first."
        )
    )


def _python_function(kernel: Any) -> Any:
    """The Python function of a kernel: the function decorated with ``@triton.jit``, or a plain
    one."""
    # JITFunction and InterpretedFunction keep the function in .fn
    fn = getattr(kernel, "fn", kernel)
    if not inspect.isfunction(fn):
        raise TypeError(
            _("kernel should be a function decorated with @triton.jit, got {type_name}").format(
                type_name=type(kernel).__name__
            )
        )
    if fn.__name__ == "<lambda>":
        raise TypeError(
            _(
                "you passed a lambda: a Triton kernel is a function written with def and "
                "decorated with @triton.jit, whose body Triton reads as source"
            )
        )
    return fn


def _launchable(kernel: Any, triton: Any, device: torch.device) -> Any:
    """``kernel`` in the form that runs on ``device``: interpreted on the CPU, compiled on a
    GPU."""
    fn = _python_function(kernel)
    if device.type == "cpu":
        from triton.runtime.interpreter import InterpretedFunction

        return kernel if isinstance(kernel, InterpretedFunction) else InterpretedFunction(fn)
    from triton.runtime.jit import JITFunction

    return kernel if isinstance(kernel, JITFunction) else triton.jit(fn)


def _is_stub(kernel: Any) -> bool:
    """Whether the kernel's body still raises NotImplementedError (the untouched stub)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(_python_function(kernel))))
    except Exception:  # noqa: BLE001 - no source: run it and see
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id == "NotImplementedError":
                return True
    return False


@dataclass
class _Region:
    """A tensor a kernel may touch: ``rows`` rows of ``cols`` elements, ``stride`` elements apart,
    inside a buffer twice its span wider (so that a stray access stays in memory the check
    owns)."""

    name: str
    view: torch.Tensor
    buffer: torch.Tensor
    fill: float
    writable: bool

    @property
    def rows(self) -> int:
        return self.view.size(0) if self.view.dim() == 2 else 1

    @property
    def cols(self) -> int:
        return self.view.size(-1)

    @property
    def stride(self) -> int:
        return self.view.stride(0) if self.view.dim() == 2 else self.view.numel()

    def where(self, address: int) -> Optional[str]:
        """Where ``address`` falls, if inside this region's buffer: ``None`` for an element of the
        tensor."""
        size = self.view.element_size()
        start, end = self.buffer.data_ptr(), self.buffer.data_ptr() + self.buffer.numel() * size
        if not start <= address < end:
            return _("outside every tensor")
        index = (address - self.view.data_ptr()) // size
        row, col = divmod(index, self.stride)
        if (
            0 <= row < self.rows
            and col < self.cols
            and (address - self.view.data_ptr()) % size == 0
        ):
            return None
        if self.view.dim() == 1:
            return _("{self_name}[{index}], past its {self_cols} elements").format(
                self_name=self.name, index=index, self_cols=self.cols
            )
        if 0 <= row < self.rows:
            return _(
                "{self_name}[{row}, {col}], past its last column ({self_cols} columns)"
            ).format(self_name=self.name, row=row, col=col, self_cols=self.cols)
        return _("{self_name} at row {row}, outside its {self_rows} rows").format(
            self_name=self.name, row=row, self_rows=self.rows
        )


def _place(
    name: str,
    values: torch.Tensor,
    device: torch.device,
    *,
    stride: Optional[int] = None,
    fill: float = float("nan"),
    writable: bool = False,
) -> _Region:
    """``values`` (1-D, or 2-D with rows ``stride`` elements apart) in the middle of a buffer
    filled with ``fill``."""
    rows = values.size(0) if values.dim() == 2 else 1
    cols = values.size(-1)
    stride = cols if stride is None or values.dim() == 1 else stride
    span = rows * stride
    buffer = torch.full((3 * span + 64,), fill, dtype=values.dtype, device=device)
    if values.dim() == 2:
        view = buffer[span + 32 : 2 * span + 32].view(rows, stride)[:, :cols]
    else:
        view = buffer[span + 32 : span + 32 + cols]
    view.copy_(values)
    return _Region(name, view, buffer, fill, writable)


class _OutOfBounds(Exception):
    """Raised inside the interpreter when a kernel reads or writes outside the tensors."""


@contextlib.contextmanager
def _bounds_checked(regions: List[_Region], device: torch.device):
    """In the interpreter, every enabled lane of every load and store must hit an element of a
    region (a store, of a writable one); the first that does not raises :class:`_OutOfBounds`.
    A compiled kernel is not checked: its stray stores show in the buffers' fill afterwards."""
    if device.type != "cpu":
        yield
        return
    import numpy as np
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    load, store = builder.create_masked_load, builder.create_masked_store

    def check(ptrs: Any, mask: Any, writing: bool) -> None:
        addresses = np.asarray(ptrs.data).astype(np.int64)
        enabled = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        addresses = addresses[enabled].reshape(-1)
        if addresses.size == 0:
            return
        ok = np.zeros(addresses.shape, dtype=bool)
        for region in regions:
            if writing and not region.writable:
                continue
            size = region.view.element_size()
            offset = addresses - region.view.data_ptr()
            index = offset // size
            ok |= (
                (offset >= 0)
                & (offset % size == 0)
                & (index // region.stride < region.rows)
                & (index % region.stride < region.cols)
            )
        if ok.all():
            return
        address = int(addresses[~ok][0])
        places = [p for p in (r.where(address) for r in regions) if p != _("outside every tensor")]
        if writing and any(p is None for p in places):
            name = next(r.name for r in regions if r.where(address) is None)
            where = _("into an input: {name}").format(name=name)
        else:
            where = next((p for p in places if p), _("outside every tensor"))
        message = _("your kernel wrote {where}") if writing else _("your kernel read {where}")
        raise _OutOfBounds(message.format(where=where))

    def checked_load(ptrs, mask, other, *args):
        check(ptrs, mask, False)
        return load(ptrs, mask, other, *args)

    def checked_store(ptrs, value, mask, *args):
        check(ptrs, mask, True)
        return store(ptrs, value, mask, *args)

    # atomics write too, and the interpreter does not bounds-check them: one far outside its
    # tensor ends the Python process (the checks refuse atomics before running; this guards any
    # that get past them)
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def checked_rmw(op, ptrs, value, mask, *args):
        check(ptrs, mask, True)
        return rmw(op, ptrs, value, mask, *args)

    def checked_cas(ptrs, cmp, value, *args):
        check(ptrs, _AllLanes(ptrs), True)
        return cas(ptrs, cmp, value, *args)

    hooks = {
        "create_masked_load": checked_load,
        "create_masked_store": checked_store,
        "create_atomic_rmw": checked_rmw,
        "create_atomic_cas": checked_cas,
    }
    for name, hook in hooks.items():
        setattr(builder, name, hook)
    try:
        yield
    finally:
        for name in hooks:
            delattr(builder, name)


class _AllLanes:
    """The mask of an access without one: every lane of ``ptrs`` enabled."""

    def __init__(self, ptrs: Any) -> None:
        import numpy as np

        self.data = np.ones(np.shape(ptrs.data), dtype=bool)


def _launch(
    kernel: Any,
    grid: Tuple[int, ...],
    regions: List[_Region],
    device: torch.device,
    args: List[Any],
    constants: Dict[str, int],
) -> Optional[str]:
    """Run ``kernel[grid](*args, **constants)``; ``None``, or what went wrong (an exception's text,
    an access outside the tensors, a store into a buffer's guard, an input changed)."""
    inputs = [(region, region.view.clone()) for region in regions if not region.writable]
    try:
        # _bounds_checked hooks Triton's interpreter (its loads, stores and atomics) for this
        # one launch only and takes the hooks off after it; on a GPU it does nothing
        with _bounds_checked(regions, device), warnings.catch_warnings():
            # numpy's, for inf - inf in the interpreter
            warnings.simplefilter("ignore", RuntimeWarning)
            kernel[grid](*args, **constants)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - the learner's kernel failed: say how
        cause = error
        while cause is not None and not isinstance(cause, _OutOfBounds):
            cause = cause.__cause__
        if cause is not None:
            return _(
                "{cause} (a load or store without its mask, or a wrong offset or stride)"
            ).format(cause=cause)
        return _kernel_error(error)
    for region in regions:
        start = (region.view.data_ptr() - region.buffer.data_ptr()) // region.view.element_size()
        mask = torch.ones_like(region.buffer, dtype=torch.bool)
        mask[start : start + region.rows * region.stride].view(region.rows, region.stride)[
            :, : region.cols
        ] = False
        outside = region.buffer[mask]
        untouched = outside.isnan() if math.isnan(region.fill) else outside == region.fill
        if not bool(untouched.all()):
            return _(
                "your kernel wrote outside {region_name} (a store without its mask, or a wrong "
                "offset or stride)"
            ).format(region_name=region.name)
    for region, before in inputs:
        if not torch.equal(region.view, before):
            return _(
                "your kernel changed its input {region_name}: a kernel reads its inputs and writes "
                "only its output"
            ).format(region_name=region.name)
    return None


def _innermost(error: BaseException) -> BaseException:
    """The error the kernel itself raised: the interpreter wraps it in an ``InterpreterError``
    per level of ``@triton.jit`` call (``InterpreterError(InterpreterError(ValueError(...)))``)."""
    seen = set()
    while (
        type(error).__name__ == "InterpreterError"
        and error.__cause__ is not None
        and id(error) not in seen
    ):
        seen.add(id(error))
        error = error.__cause__
    return error


def _kernel_error(error: BaseException) -> str:
    """What went wrong when the learner's kernel raised ``error``, in plain words."""
    error = _innermost(error)
    if type(error).__name__ == "CompilationError":  # compiled on a GPU
        complaint = _compiler_complaint(
            type(error).__name__,
            getattr(error, "error_message", None) or str(error),
            getattr(getattr(error, "node", None), "lineno", None),
            getattr(error, "src", None) or "",
        )
        return _("your kernel does not compile: {complaint}").format(complaint=complaint)
    text = _text_of(error).strip().splitlines()
    return _("your kernel raised {type_name}: {text}").format(
        type_name=type(error).__name__, text=text[-1] if text else ""
    )


def _text_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails
        return ""


# -- what the interpreter lets through: atomics, and what only a GPU compiler refuses ----------

_MISSING = object()


def _source(fn: Any) -> Optional[str]:
    """``fn``'s source, dedented, its decorator lines blanked (line numbers kept), or ``None``."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except Exception:  # noqa: BLE001 - no source (a builtin, code typed at a bare prompt)
        return None
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef):
        return None
    lines = source.split("\n")
    for decorator in definition.decorator_list:
        for index in range(decorator.lineno - 1, decorator.end_lineno or decorator.lineno):
            lines[index] = ""
    return "\n".join(lines)


def _names_read(fn: Any) -> List[str]:
    """The bare names ``fn``'s source reads (globals, closure variables, locals and builtins)."""
    source = _source(fn)
    if source is None:
        return list(fn.__code__.co_names)
    return sorted({n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)})


def _lookup(fn: Any, name: str) -> Any:
    """What ``name`` is bound to for ``fn``: a closure variable, or a global."""
    code = fn.__code__
    for cell_name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        if cell_name == name:
            try:
                return cell.cell_contents
            except ValueError:  # an empty cell
                return _MISSING
    return fn.__globals__.get(name, _MISSING)


def _kernel_functions(fn: Any) -> List[Any]:
    """The kernel's Python function and the ``@triton.jit`` functions it calls (and theirs),
    the helpers first."""
    order: List[Any] = []
    seen: set = set()

    def visit(f: Any) -> None:
        if id(f) in seen:
            return
        seen.add(id(f))
        for name in _names_read(f):
            value = _lookup(f, name)
            inner = getattr(value, "fn", None)
            if inspect.isfunction(inner) and type(value).__name__ in (
                "JITFunction",
                "InterpretedFunction",
            ):
                visit(inner)
        order.append(f)

    visit(fn)
    return order


def _atomic_called(fn: Any) -> Optional[str]:
    """The first ``tl.atomic_*`` the kernel (or a helper of it) calls, if any."""
    for f in _kernel_functions(fn):
        source = _source(f)
        if source is None:
            continue
        for node in ast.walk(ast.parse(source)):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else ""
            )
            if name.startswith("atomic_"):
                return name
    return None


#: The GPU a kernel that the interpreter accepted is also compiled for, on the CPU (an A100's
#: sm_80; no GPU needed): the interpreter runs kernels that a compiler refuses, such as a loop
#: variable that changes its type or a plain global read inside the kernel.
COMPILE_TARGET = ("cuda", 80, 32)

# Run in a fresh Python without TRITON_INTERPRET (triton, once imported with it, cannot compile
# in the same process): the learner's kernel arrives as source, with the globals it reads.
_COMPILE_SCRIPT = r"""
import importlib, json, linecache, sys, types
request = json.load(sys.stdin)
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

class Opaque:  # a global the kernel may not read once compiled, as the original
    pass

namespace = {"__name__": "learner_kernel", "triton": triton, "tl": tl}
for name, kind, value in request["globals"]:
    if kind == "module":
        namespace[name] = importlib.import_module(value)
    elif kind == "stand-in module":
        namespace[name] = types.ModuleType(value)
    elif kind == "constexpr":
        namespace[name] = tl.constexpr(value)
    elif kind == "dtype":
        namespace[name] = tl.dtype(value)
    elif kind == "value":
        namespace[name] = value
    elif kind == "triton object":
        namespace[name] = getattr(importlib.import_module(value[0]), value[1], None)
        if namespace[name] is None:
            namespace[name] = getattr(tl, name, Opaque())
    else:
        namespace[name] = Opaque()
for index, (name, source) in enumerate(request["functions"]):
    filename = "<learner kernel %d>" % index
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    namespace[name] = triton.jit(namespace[name])
kernel = namespace[request["functions"][-1][0]]
signature = dict(zip(request["names"], request["types"]))
constexprs = {(int(k),): v for k, v in request["constexprs"].items()}
result = {"error": None}
try:
    triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget(*request["target"]))
except Exception as error:
    node = getattr(error, "node", None)
    result = {
        "error": type(error).__name__,
        "message": getattr(error, "error_message", None) or str(error),
        "line": getattr(node, "lineno", None),
        "source": getattr(error, "src", None) or request["functions"][-1][1],
    }
print("ATTNCOURSE-COMPILED " + json.dumps(result))
"""

_COMPILED: Dict[str, Dict[str, Any]] = {}  # request -> the compiler's answer, per process


def _shipped(value: Any) -> Optional[List[Any]]:
    """How the compile script rebuilds a global the kernel reads: ``[kind, value]``."""
    import triton.language as language

    if inspect.ismodule(value):
        name = value.__name__
        real = name == "math" or name == "triton" or name.startswith("triton.")
        return ["module" if real else "stand-in module", name]
    if isinstance(value, language.constexpr):
        inner = value.value
        if inner is None or isinstance(inner, (bool, int, float, str)):
            return ["constexpr", inner]
        if isinstance(inner, language.dtype):
            return ["dtype", str(inner)]
        return ["other", type(inner).__name__]
    if isinstance(value, language.dtype):
        return ["dtype", str(value)]
    module = getattr(value, "__module__", None) or ""
    if module.startswith("triton.") and isinstance(getattr(value, "__name__", None), str):
        return ["triton object", [module, value.__name__]]  # tl.exp imported by name, ...
    if value is None or isinstance(value, (bool, int, float, str)):
        return ["value", value]
    return ["other", type(value).__name__]


def _compile_request(
    fn: Any, types: List[str], constexprs: Dict[int, int]
) -> Optional[Dict[str, Any]]:
    """What the compile script needs to compile ``fn`` as the check launches it, or ``None``
    when its source (or a helper's) cannot be read or its parameters are not the launch's."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    if len(names) != len(types):
        return None
    functions = _kernel_functions(fn)
    own = {f.__name__ for f in functions}
    sources, shipped = [], {}
    for f in functions:
        source = _source(f)
        if source is None:
            return None
        sources.append([f.__name__, source])
        for name in _names_read(f):
            value = _lookup(f, name)
            if name in own or value is _MISSING:
                continue
            shipped[name] = _shipped(value)
    return {
        "functions": sources,
        "globals": [[name, *how] for name, how in sorted(shipped.items())],
        "names": names,
        "types": types,
        "constexprs": {str(k): v for k, v in constexprs.items()},
        "target": list(COMPILE_TARGET),
    }


def _compile_for_a_gpu(fn: Any, types: List[str], constexprs: Dict[int, int]) -> Dict[str, Any]:
    """Compile the learner's kernel for :data:`COMPILE_TARGET` in a fresh Python (about half a
    second): ``{"error": None}``, the compiler's complaint (``error``, ``message``, ``line``,
    ``source``), or ``{"unavailable": ...}`` when it could not be tried (no source, no compiler,
    a time-out), which the check does not hold against the learner."""
    request = _compile_request(fn, types, constexprs)
    if request is None:
        return {"unavailable": "no source"}
    key = json.dumps(request, sort_keys=True)
    if key in _COMPILED:
        return _COMPILED[key]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _COMPILE_SCRIPT],
            input=key,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        line = next(
            line
            for line in reversed(done.stdout.splitlines())
            if line.startswith("ATTNCOURSE-COMPILED ")
        )
        answer = json.loads(line.split(" ", 1)[1])
    except (OSError, subprocess.SubprocessError, StopIteration, ValueError) as error:
        answer = {"unavailable": type(error).__name__}
    _COMPILED[key] = answer
    return answer


def _type_name(text: str) -> str:
    """A Triton type as the compiler writes it, shorter: ``<['16', '32'], fp32>`` is
    ``fp32[16, 32]``."""
    block = re.fullmatch(r"<\[(.*)\], (\w+)>", text.strip())
    if block is None:
        return text.strip()
    return f"{block.group(2)}[{', '.join(re.findall(r'[0-9]+', block.group(1)))}]"


def _compiler_complaint(kind: str, message: str, line: Optional[int], source: str) -> str:
    """The compiler's complaint about the learner's kernel, in plain words (``line`` counts the
    kernel's def line as 1, as Triton does)."""
    lines = source.split("\n")
    code = lines[line - 1].strip() if line and 0 < line <= len(lines) else "?"
    line = line or 0
    unwrapped = re.match(r"^\w+\((['\"])(.*)\1\)$", message.strip(), re.S)
    text = unwrapped.group(2) if unwrapped else message.strip()
    found = re.search(
        r"Loop-carried variable (\w+) has initial type (.+?) but is re-assigned to (.+?) in loop",
        text,
    )
    if found:
        return _(
            "the GPU compiler refuses it at line {line} ({code}): {name} is {before} before "
            "the loop and {after} inside it, and a compiled loop keeps each "
            "variable's type (the interpreter does not check it). Give it its type from the "
            "start: {name} = 0.0 for a float, tl.zeros(..., tl.float32) for a block"
        ).format(
            line=line,
            code=code,
            name=found.group(1),
            before=_type_name(found.group(2)),
            after=_type_name(found.group(3)),
        )
    found = re.search(r"Cannot access global variable (\w+)", text)
    if found:
        return _(
            "the GPU compiler refuses it at line {line} ({code}): it reads the global "
            "variable {name}, and a compiled kernel may read only the globals made with "
            "tl.constexpr (the interpreter reads any). Write {name} = tl.constexpr(...) at the "
            "top level (the annotation {name}: tl.constexpr = ... is not enough), or pass it "
            "as an argument"
        ).format(line=line, code=code, name=found.group(1))
    found = re.search(
        r"Mismatched type for (\w+) between then block \((.+?)\) and else block \((.+?)\)", text
    )
    if found:
        return _(
            "the GPU compiler refuses it at line {line} ({code}): {name} is {then} after "
            "the if and {other} after the else, and compiled code gives it one "
            "type (the interpreter does not check it). Give both branches the same type: 0.0, "
            "not 0, for a float"
        ).format(
            line=line,
            code=code,
            name=found.group(1),
            then=_type_name(found.group(2)),
            other=_type_name(found.group(3)),
        )
    return _(
        "the GPU compiler refuses it at line {line} ({code}), although the interpreter runs "
        "it: {kind}: {text}"
    ).format(line=line, code=code, kind=kind, text=_first_line(text))


def _first_line(text: str) -> str:
    """The first line of an error's text (and the next, after a colon), without the addresses
    of Python objects."""
    lines = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    first = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
    return re.sub(r" at 0x[0-9a-f]+", "", first)


def _compiles_for_a_gpu(kernel: Any, types: List[str], constexprs: Dict[int, int]) -> bool:
    """Compile a kernel that the interpreter accepted for a GPU as well: ``True`` when it
    compiles, ``False`` when that could not be tried; a :class:`Mistake` with the compiler's
    complaint in plain words when it is refused."""
    answer = _compile_for_a_gpu(_python_function(kernel), types, constexprs)
    if answer.get("unavailable"):
        return False
    if answer.get("error"):
        complaint = _compiler_complaint(
            answer["error"], answer.get("message") or "", answer.get("line"), answer["source"]
        )
        raise Mistake(
            _("Your kernel passes every case in the interpreter, but {complaint}.").format(
                complaint=complaint
            )
        )
    return True


def _where_it_ran(
    kernel: Any, device: torch.device, types: List[str], constexprs: Dict[int, int]
) -> str:
    """Where a kernel that passed every case ran, for the note of a right answer; one that ran
    in the interpreter is compiled for a GPU as well (:func:`_compiles_for_a_gpu`: a
    :class:`Mistake` when the compiler refuses it)."""
    if device.type == "cuda":
        return _("compiled on the GPU")
    if _compiles_for_a_gpu(kernel, types, constexprs):
        return _("in the interpreter, and it compiles for a GPU (sm_80)")
    return _("in the interpreter")


def _launch_output(
    what: str,
    run: Callable[..., Dict[str, Any]],
    runnable: Any,
    device: torch.device,
    inputs: Tuple[torch.Tensor, ...],
    *settings: Any,
) -> Any:
    """The output of one launch of the learner's kernel in case ``what``: ``run``
    (:func:`_softmax_run`, :func:`_online_run`) on ``inputs`` moved to ``device`` and the
    case's ``settings`` (blocks, strides), through :func:`call`; a launch that failed is a
    :class:`Mistake` that says why."""

    def launch(*tensors: torch.Tensor) -> Dict[str, Any]:
        return run(runnable, device, *(t.to(device) for t in tensors), *settings)

    result = call(launch, *inputs)
    if result["error"]:
        raise Mistake(_("With {what}: {result}.").format(what=what, result=result["error"]))
    return result["out"]


def _prepare(kernel: Any) -> Tuple[Any, torch.device]:
    """The learner's kernel ready to launch, and the device of its tensors; a :class:`Mistake`
    when triton cannot run it, :class:`NotAttempted` for the untouched stub."""
    try:
        triton, device = _triton()
    except (ImportError, RuntimeError) as error:
        raise Mistake(str(error)) from None
    if _is_stub(kernel):
        raise NotAttempted()
    try:
        runnable = _launchable(kernel, triton, device)
    except TypeError as error:
        raise Mistake(
            _("Pass your kernel, the function decorated with @triton.jit ({error}).").format(
                error=error
            )
        ) from None
    atomic = _atomic_called(_python_function(kernel))
    if atomic:
        raise Mistake(
            _(
                "Your kernel calls tl.{name}: these exercises need no atomic (each program writes "
                "only its own rows), and the check does not run one, since an atomic that lands "
                "outside its tensor ends the Python process instead of raising an error. Write "
                "the results with tl.store."
            ).format(name=atomic)
        )
    return runnable, device


def _power_of_two_block(name: str, block: Any, at_least: int) -> int:
    if block is None:
        return 1 << max(at_least - 1, 0).bit_length()
    if (
        isinstance(block, bool)
        or not isinstance(block, int)
        or block < at_least
        or block & (block - 1)
    ):
        raise ValueError(
            _("{name} should be a power of two >= {at_least}, got {block!r}").format(
                name=name, at_least=at_least, block=block
            )
        )
    return block


# -- 3. a masked row softmax, as a Triton kernel ------------------------------------------------


def masked_softmax_kernel(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one program per row
    cols = tl.arange(0, BLOCK)  # BLOCK >= n_cols
    length = tl.load(LENGTHS + row)
    keep = cols < length
    x = tl.load(X + row * stride_x + cols, mask=keep, other=float("-inf"))
    m = tl.max(x, axis=0)
    e = tl.where(keep, tl.exp(x - m), 0.0)  # an empty row has m = -inf: exp(x - m) is NaN
    total = tl.sum(e, axis=0)
    y = tl.where(total > 0, e / total, 0.0)  # a row of length 0 gives zeros
    tl.store(Y + row * stride_y + cols, y, mask=cols < n_cols)


def _softmax_run(
    kernel: Any,
    device: torch.device,
    x: torch.Tensor,
    lengths: torch.Tensor,
    block: int,
    stride_x: Optional[int] = None,
    stride_y: Optional[int] = None,
) -> Dict[str, Any]:
    """Launch a masked-softmax kernel on ``x`` placed with row stride ``stride_x`` (and Y with
    ``stride_y``) inside guarded buffers: ``{"out": Y (rows, n_cols) or None, "error": what went wrong
    or None}``."""
    rows, cols = x.shape
    X = _place("X", x, device, stride=stride_x)
    Y = _place("Y", torch.full_like(x, -3.0), device, stride=stride_y, fill=-3.0, writable=True)
    lens = _place("LENGTHS", lengths.to(torch.int32), device, fill=-1)
    error = _launch(
        kernel,
        (rows,),
        [X, Y, lens],
        device,
        [X.view, Y.view, lens.view, cols, X.stride, Y.stride],
        {"BLOCK": block},
    )
    return {"out": None if error else Y.view.cpu().clone(), "error": error}


def run_masked_softmax(
    kernel: Any, x: torch.Tensor, lengths: torch.Tensor, *, block: Optional[int] = None
) -> torch.Tensor:
    """Launch ``masked_softmax_kernel(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK)`` (chapter
    10's exercise) with one program per row: row ``r`` of the result is the softmax of
    ``x[r, :lengths[r]]``, zeros after it.

    Args:
        kernel: the kernel, a function decorated with ``@triton.jit``.
        x: scores ``(rows, n_cols)``, float32 or float16.
        lengths: ``(rows,)`` integers in ``0 .. n_cols``.
        block: ``BLOCK``, a power of two ``>= n_cols`` (default: the smallest).

    Returns:
        ``(rows, n_cols)`` on the device the kernels run on: CUDA with a GPU, else the CPU (Triton's
        interpreter, which also checks that every load and store stays inside the tensors).
    """
    if (
        not isinstance(x, torch.Tensor)
        or x.dim() != 2
        or x.dtype not in (torch.float32, torch.float16)
    ):
        raise TypeError(
            _("x should be a 2-D float32 or float16 tensor (rows, n_cols), got {value}").format(
                value=type(x).__name__
                if not isinstance(x, torch.Tensor)
                else (tuple(x.shape), x.dtype)
            )
        )
    if (
        not isinstance(lengths, torch.Tensor)
        or lengths.shape != (x.size(0),)
        or lengths.is_floating_point()
    ):
        raise ValueError(
            _("lengths should be an integer tensor of shape ({value},), got ").format(
                value=x.size(0)
            )
            + (
                str(tuple(lengths.shape))
                if isinstance(lengths, torch.Tensor)
                else type(lengths).__name__
            )
        )
    if bool((lengths < 0).any()) or bool((lengths > x.size(1)).any()):
        raise ValueError(
            _("lengths should lie in 0 .. {value}, got {lengths}").format(
                value=x.size(1), lengths=lengths.tolist()
            )
        )
    block = _power_of_two_block("block", block, x.size(1))
    triton, device = _triton()
    result = _softmax_run(
        _launchable(kernel, triton, device),
        device,
        x.detach().to(device),
        lengths.to(device),
        block,
    )
    if result["error"]:
        raise RuntimeError(result["error"])
    return result["out"].to(device)


def _masked_softmax_reference(
    x: torch.Tensor, lengths: torch.Tensor, keep: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Softmax of each row over the columns ``keep`` (default ``j < length``) in float64; zeros
    elsewhere and in empty rows."""
    x = x.double()
    if keep is None:
        keep = torch.arange(x.size(1)) < lengths[:, None]
    scores = x.masked_fill(~keep, float("-inf"))
    empty = ~keep.any(-1, keepdim=True)
    return torch.softmax(scores.masked_fill(empty, 0.0), -1).masked_fill(empty | ~keep, 0.0)


#: The known mistake "masked lanes loaded as 0 count in the sum" (several ways to write it).
_ZERO_LANES = N_(
    "the masked lanes count in the sum: they were loaded as 0 (exp(0 - m) > 0). Load them as "
    "float('-inf'), or zero their exponentials with tl.where, so that they get no weight."
)


def _zero_lanes(x: torch.Tensor, lengths: torch.Tensor, block: int) -> List[torch.Tensor]:
    """The outputs of kernels whose masked lanes, loaded as 0, count in the sum: over the BLOCK
    lanes or the n_cols columns, the masked columns of the output zeroed or not."""
    cols = torch.arange(x.size(1))
    keep = cols < lengths[:, None]
    zeros = x.double().masked_fill(~keep, 0.0)
    padded = torch.cat([zeros, zeros.new_zeros(x.size(0), block - x.size(1))], 1)
    outputs = []
    for scores in (padded, zeros):
        weights = torch.softmax(scores, -1)[:, : x.size(1)]
        outputs += [weights, weights.masked_fill(~keep, 0.0)]
    return outputs


def _softmax_mistakes(
    x: torch.Tensor, lengths: torch.Tensor, block: int
) -> Dict[str, torch.Tensor]:
    cols = torch.arange(x.size(1))
    keep = cols < lengths[:, None]
    inverted = x.double().masked_fill(keep, float("-inf"))
    return {
        (
            _(
                "the lengths are ignored: each row's softmax runs over all n_cols columns. Mask the "
                "columns cols >= LENGTHS[row] (load LENGTHS + row first)."
            )
        ): _masked_softmax_reference(x, lengths, cols < x.size(1) + 0 * lengths[:, None]),
        (
            _(
                "the mask is inverted: you kept the columns at or past the length and dropped the "
                "real ones. Keep cols < length."
            )
        ): _masked_softmax_reference(x, lengths, ~keep),
        _(
            "the mask is inverted (and the rows with no column left give NaN): keep cols < length."
        ): (torch.softmax(inverted, -1)),
        _(
            "the mask is off by one: cols <= length keeps one column too many; keep cols < length."
        ): (_masked_softmax_reference(x, lengths, cols <= lengths[:, None])),
        _(_ZERO_LANES): _zero_lanes(x, lengths, block)[0],
    }


_SOFTMAX_CASES = [  # (what, rows, n_cols, lengths, block, stride_x, stride_y, scale, shift)
    (N_("full rows, 16 columns, BLOCK 16"), 4, 16, [16, 16, 16, 16], 16, None, None, 2.0, 0.0),
    (
        (
            N_(
                "ragged lengths [37, 5, 1, 20, 36, 12] over 37 columns, BLOCK 64, X rows 48 apart "
                "and Y rows 40 apart"
            )
        ),
        6,
        37,
        [37, 5, 1, 20, 36, 12],
        64,
        48,
        40,
        1.5,
        0.0,
    ),
    (
        N_("large scores (rows between -260 and +250), 24 columns, BLOCK 32"),
        4,
        24,
        [24, 24, 10, 17],
        32,
        None,
        None,
        50.0,
        0.0,
    ),
    (N_("a row of length 0, 10 columns, BLOCK 32"), 3, 10, [10, 0, 3], 32, 16, None, 1.0, 0.0),
    (
        N_("+300 in the columns past each row's length, lengths [5, 12, 20, 1] of 20, BLOCK 32"),
        4,
        20,
        [5, 12, 20, 1],
        32,
        None,
        None,
        1.0,
        0.0,
    ),
]

#: The argument types and constants a masked-softmax kernel is compiled with (for a GPU,
#: without one): X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK.
_SOFTMAX_TYPES = ["*fp32", "*fp32", "*i32", "i32", "i32", "i32", "constexpr"]
_SOFTMAX_CONSTANTS = {6: 64}


def _softmax_inputs(index: int) -> Tuple[torch.Tensor, torch.Tensor]:
    what, rows, cols, lengths, block, _sx, _sy, scale, _x = _SOFTMAX_CASES[index]
    x = scale * torch.randn(rows, cols, generator=torch.Generator().manual_seed(100 + index))
    # rows far from 0: a missing max subtraction overflows (or underflows) exp in float32
    if index == 2:
        x = x + torch.tensor([0.0, -200.0, 200.0, 90.0])[:, None]
    if index == 4:  # the masked-off columns hold the largest scores: they must not count at all
        x = x.masked_fill(torch.arange(cols) >= torch.tensor(lengths)[:, None], 300.0)
    return x.float(), torch.tensor(lengths)


@exercise(
    "gpu/masked-softmax-kernel",
    title="A masked row softmax in Triton",
    hint=(
        """
            One program per row: load the row with a mask for its length, filling the rest
            with -inf, subtract the row's maximum, exponentiate and divide by the sum.
            What should a row of length 0 give?
        """,
        """
            One program per row: row = tl.program_id(0), cols = tl.arange(0, BLOCK). Load the row's
            length with tl.load(LENGTHS + row) and keep the columns cols < length. Load the row with
            that mask and other=float("-inf"), subtract its maximum before tl.exp, and divide by the
            sum. A row of length 0 has m = -inf and a sum of 0: zero its exponentials with
            tl.where(keep, ..., 0.0) and divide only where the sum is positive
            (tl.where(total > 0, e / total, 0.0)), so that it stores zeros. Store every column
            cols < n_cols (the zeros too), at Y + row * stride_y + cols.
        """,
    ),
    solution=masked_softmax_kernel,
)
def _check_masked_softmax(kernel) -> str:
    runnable, device = _prepare(kernel)
    for index, (what, _rows, cols, lengths, block, stride_x, stride_y, _scale, _x) in enumerate(
        _SOFTMAX_CASES
    ):
        what = _(what)  # the case's label, marked N_ in the table
        x, lens = _softmax_inputs(index)
        out = _launch_output(
            what, _softmax_run, runnable, device, (x, lens), block, stride_x, stride_y
        )
        expected = _masked_softmax_reference(x, lens)
        keep = torch.arange(cols) < lens[:, None]
        atol = 1e-5 if device.type == "cpu" else 1e-4
        if matches(out, expected, atol=atol):
            continue
        _diagnose_masked_softmax(what, index, out, expected, x, lens, lengths, keep, block, atol)
    where = _where_it_ran(kernel, device, _SOFTMAX_TYPES, _SOFTMAX_CONSTANTS)
    return _(
        "Right: masked lanes, ragged lengths, strided rows, large scores, an empty row and large "
        "scores in the padding all come out as the reference's (your kernel ran {value})."
    ).format(value=where)


def _diagnose_masked_softmax(
    what: str,
    index: int,
    out: torch.Tensor,
    expected: torch.Tensor,
    x: torch.Tensor,
    lens: torch.Tensor,
    lengths: List[int],
    keep: torch.Tensor,
    block: int,
    atol: float,
) -> None:
    """Raises the feedback on an output ``out`` of case ``index`` that is not ``expected``: the
    padding left unwritten, a usual mistake, the rows a wrong maximum spoils, NaN or inf and their
    cause, an underflowed row, or the gap."""
    if matches(out.masked_fill(~keep, 0.0), expected, atol=atol) and bool(
        (out[~keep] == -3.0).all()
    ):
        raise Mistake(
            _(
                "With {what}: the columns past each row's length still hold what Y held before (-3.0 "
                "here): store zeros there too (store every cols < n_cols, not only cols < length)."
            ).format(what=what)
        )
    message = diagnose(out, _softmax_mistakes(x, lens, block), default="", atol=atol)
    if not message and any(
        matches(out, other, atol=atol, equal_nan=True) for other in _zero_lanes(x, lens, block)
    ):
        message = _(_ZERO_LANES)
    if message:
        raise Mistake(_("With {what}: {message}").format(what=what, message=message))
    _masked_softmax_wrong_rows(what, out, expected, x, lens, keep, block, atol)
    if not bool(torch.isfinite(out).all()):
        if index == 2:
            raise Mistake(
                _(
                    "With {what}: your output has NaN or inf: tl.exp overflowed. Subtract the row's "
                    "maximum (over the kept columns) before the exponential."
                ).format(what=what)
            )
        if 0 in lengths:
            raise Mistake(
                _(
                    "With {what}: your output has NaN: the row of length 0 computes 0/0 (and -inf - "
                    "(-inf)). Give a row with no column zeros."
                ).format(what=what)
            )
        raise Mistake(
            _("With {what}: your output has NaN or inf where the reference has none.").format(
                what=what
            )
        )
    if index == 2 and not bool((out[1] > 0).any()):
        raise Mistake(
            _(
                "With {what}: the row whose scores are all near -200 came out zero: its exponentials "
                "underflowed. Subtract the row's own maximum, not a constant."
            ).format(what=what)
        )
    raise Mistake(
        _(
            "With {what}: your output differs from the softmax of each row over its first "
            "LENGTHS[row] columns (largest difference {value:.3g})."
        ).format(what=what, value=(out.double() - expected).abs().max().item())
    )


def _masked_softmax_wrong_rows(
    what: str,
    out: torch.Tensor,
    expected: torch.Tensor,
    x: torch.Tensor,
    lens: torch.Tensor,
    keep: torch.Tensor,
    block: int,
    atol: float,
) -> None:
    """Raises the feedback when the wrong rows are exactly those a wrong maximum spoils: one
    taken over the padding, or over lanes loaded as 0."""
    # the rows that are wrong, against what sets them apart
    wrong = [r for r in range(out.size(0)) if not matches(out[r], expected[r], atol=atol)]
    kept_max = x.masked_fill(~keep, float("-inf")).amax(-1)
    masked_max = x.masked_fill(keep, float("-inf")).amax(-1)
    if wrong and all(lens[r] > 0 and masked_max[r] > kept_max[r] for r in wrong):
        raise Mistake(
            _(
                "With {what}: exactly the rows with a larger score past their length are wrong: "
                "your maximum takes in the columns past each row's length (this case puts +300 "
                "there), and the exponentials of the kept columns underflow. Take the maximum "
                "over the kept columns only: load with mask=cols < length and "
                "other=float('-inf'), or tl.where(keep, x, float('-inf')) before tl.max."
            ).format(what=what)
        )
    if wrong and all(lens[r] > 0 and kept_max[r] < 0 and lens[r] < block for r in wrong):
        raise Mistake(
            _(
                "With {what}: exactly the rows whose kept scores are all below 0 are wrong: the "
                "masked lanes were loaded as 0, and that 0 enters the maximum (and the sum, "
                "unless you zero it), so the exponentials of such a row underflow. Load the "
                "masked lanes as float('-inf')."
            ).format(what=what)
        )


# -- 4. the online softmax over key tiles, as a Triton kernel -----------------------------------


def online_softmax_kernel(
    S,
    V,
    O,
    n_rows,
    n_keys,
    stride_s,
    stride_v,
    stride_o,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's rows of S and O
    dims = tl.arange(0, D)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running maximum
    l = tl.zeros((BLOCK_M,), tl.float32)  # running sum of exp(s - m)
    acc = tl.zeros((BLOCK_M, D), tl.float32)  # running sum of exp(s - m) v
    for start in range(0, n_keys, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        s = tl.load(
            S + rows[:, None] * stride_s + keys[None, :],
            mask=(rows[:, None] < n_rows) & (keys[None, :] < n_keys),
            other=float("-inf"),
        )
        v = tl.load(
            V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0
        )
        m_new = tl.maximum(m, tl.max(s, axis=1))
        correction = tl.exp(m - m_new)  # rescales what was summed with the old maximum
        p = tl.exp(s - m_new[:, None])
        l = correction * l + tl.sum(p, axis=1)
        acc = correction[:, None] * acc + tl.dot(p, v)
        m = m_new
    tl.store(
        O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_rows
    )


def _online_run(
    kernel: Any,
    device: torch.device,
    scores: torch.Tensor,
    value: torch.Tensor,
    block_m: int,
    block_n: int,
    strides: Tuple[int, int, int],
) -> Dict[str, Any]:
    """Launch an online-softmax kernel with S, V and O in guarded buffers (row strides
    ``strides``):
    ``{"out": O (n_rows, D) or None, "error": what went wrong or None}``."""
    n_rows, n_keys = scores.shape
    S = _place("S", scores, device, stride=strides[0])
    V = _place("V", value, device, stride=strides[1])
    O = _place(
        "O",
        torch.full((n_rows, value.size(1)), -3.0, device=device),
        device,
        stride=strides[2],
        fill=-3.0,
        writable=True,
    )
    error = _launch(
        kernel,
        (-(-n_rows // block_m),),
        [S, V, O],
        device,
        [S.view, V.view, O.view, n_rows, n_keys, S.stride, V.stride, O.stride],
        {"BLOCK_M": block_m, "BLOCK_N": block_n, "D": value.size(1)},
    )
    return {"out": None if error else O.view.cpu().clone(), "error": error}


def run_online_softmax(
    kernel: Any, scores: torch.Tensor, value: torch.Tensor, *, block_m: int = 16, block_n: int = 16
) -> torch.Tensor:
    """Launch ``online_softmax_kernel(S, V, O, n_rows, n_keys, stride_s, stride_v, stride_o,
    BLOCK_M,
    BLOCK_N, D)`` (chapter 10's exercise), one program per block of ``block_m`` rows: the result
    is ``softmax(scores) @ value``, computed one tile of ``block_n`` keys at a time.

    Args:
        kernel: the kernel, a function decorated with ``@triton.jit``.
        scores: ``(n_rows, n_keys)`` float32.
        value: ``(n_keys, D)`` float32, ``D`` a power of two >= 16.
        block_m, block_n: powers of two >= 16 (``tl.dot``'s smallest tile).

    Returns:
        ``(n_rows, D)`` float32 on the device the kernels run on (CUDA with a GPU, else the CPU).
    """
    for name, t in (("scores", scores), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype != torch.float32:
            raise TypeError(
                _("{name} should be a 2-D float32 tensor, got {value}").format(
                    name=name,
                    value=(tuple(t.shape), t.dtype)
                    if isinstance(t, torch.Tensor)
                    else type(t).__name__,
                )
            )
    if value.size(0) != scores.size(1):
        raise ValueError(
            _(
                "value should have one row per key: scores {scores_shape}, value {value_shape}"
            ).format(scores_shape=tuple(scores.shape), value_shape=tuple(value.shape))
        )
    _power_of_two_block("value.size(1)", value.size(1), 16)
    block_m, block_n = (
        _power_of_two_block("block_m", block_m, 16),
        _power_of_two_block("block_n", block_n, 16),
    )
    triton, device = _triton()
    result = _online_run(
        _launchable(kernel, triton, device),
        device,
        scores.detach().to(device),
        value.detach().to(device),
        block_m,
        block_n,
        (scores.size(1), value.size(1), value.size(1)),
    )
    if result["error"]:
        raise RuntimeError(result["error"])
    return result["out"].to(device)


def _online_emulation(
    scores: torch.Tensor,
    value: torch.Tensor,
    block_n: int,
    *,
    rescale_acc: bool = True,
    rescale_sum: bool = True,
    pad_zero: bool = False,
    normalise: bool = True,
) -> torch.Tensor:
    """The tile loop in float64 with one of the usual mistakes (for the diagnosis)."""
    s, v = scores.double(), value.double()
    n_keys = s.size(1)
    pad = -n_keys % block_n
    # masked scores loaded as 0 instead of -inf: the padding keys get a weight (with V = 0)
    if pad_zero:
        s = torch.cat([s, s.new_zeros(s.size(0), pad)], 1)
        v = torch.cat([v, v.new_zeros(pad, v.size(1))], 0)
    m = torch.full((s.size(0),), float("-inf"), dtype=torch.float64)
    l = torch.zeros_like(m)
    acc = torch.zeros(s.size(0), v.size(1), dtype=torch.float64)
    for start in range(0, s.size(1), block_n):
        tile = s[:, start : start + block_n]
        m_new = torch.maximum(m, tile.amax(-1))
        correction = torch.exp(m - m_new)
        p = torch.exp(tile - m_new[:, None])
        l = (correction if rescale_sum else 1.0) * l + p.sum(-1)
        acc = (correction[:, None] if rescale_acc else 1.0) * acc + p @ v[start : start + block_n]
        m = m_new
    return acc / l[:, None] if normalise else acc


# (what, n_rows, n_keys, D, BLOCK_M, BLOCK_N, (stride_s, stride_v, stride_o), scale)
_ONLINE_CASES = [
    (
        (
            N_(
                "40 rows, 50 keys (a ragged last tile of 18), D=16, BLOCK_M=16, BLOCK_N=32, S rows "
                "56 apart, V 24, O 20"
            )
        ),
        40,
        50,
        16,
        16,
        32,
        (56, 24, 20),
        2.0,
    ),
    (
        N_("40 rows, 70 keys, D=64, BLOCK_M=32, BLOCK_N=64, S rows 72 apart, V 80, O 72"),
        40,
        70,
        64,
        32,  # BLOCK_M differs from the other cases' (a literal 16 leaves rows out) and from D
        64,
        (72, 80, 72),
        3.0,
    ),
    (
        (
            N_(
                "large scores (the first key tile near +100, the last near -100, one row near -300), "
                "16 rows, 48 keys, BLOCK_M=BLOCK_N=16"
            )
        ),
        16,
        48,
        16,
        16,
        16,
        (48, 16, 16),
        1.0,
    ),
    (
        # more keys than any one block of a row holds: only a loop over the tiles covers them
        N_(
            "24 rows, 1100 keys (17 tiles of 64 and a ragged one of 12), D=16, BLOCK_M=16, BLOCK_N=64"
        ),
        24,
        1100,
        16,
        16,
        64,
        (1104, 16, 16),
        2.0,
    ),
]

#: The argument types and constants an online-softmax kernel is compiled with (for a GPU, without
#: one): S, V, O, n_rows, n_keys, stride_s, stride_v, stride_o, BLOCK_M, BLOCK_N, D.
_ONLINE_TYPES = ["*fp32"] * 3 + ["i32"] * 5 + ["constexpr"] * 3
_ONLINE_CONSTANTS = {8: 16, 9: 32, 10: 16}


def _online_inputs(index: int) -> Tuple[torch.Tensor, torch.Tensor]:
    _what, n_rows, n_keys, d, _bm, _bn, _strides, scale = _ONLINE_CASES[index]
    g = torch.Generator().manual_seed(200 + index)
    scores = scale * torch.randn(n_rows, n_keys, generator=g)
    if index == 2:
        # the maximum falls over the tiles
        scores = scores + torch.linspace(100.0, -100.0, n_keys)[None, :]
        scores[3] -= 300.0
        scores[5, -1] = 250.0  # and one row's maximum comes last
    return scores.float(), torch.randn(n_keys, d, generator=g).float()


@exercise(
    "gpu/online-softmax-kernel",
    title="The online softmax over key tiles in Triton",
    hint=(
        """
            It is the online softmax of chapter 7 inside a kernel: keep the running
            maximum, the running sum and the accumulator per row, in float32, and rescale
            them when a tile raises the maximum.
        """,
        """
            Keep, for each of the BLOCK_M rows, the running maximum m (start at -inf), the running sum
            l and
            the accumulator acc (BLOCK_M, D), all float32. For each tile of BLOCK_N keys: load the
            scores with
            the mask (rows < n_rows) & (keys < n_keys) and other=float("-inf"), and the value rows
            keys < n_keys;
            m_new = max(m, max of the tile); correction = exp(m - m_new); p = exp(s - m_new[:, None]);
            l = correction * l + sum(p); acc = correction[:, None] * acc + tl.dot(p, v); m = m_new. Store
            acc / l[:, None] for the rows < n_rows.
        """,
    ),
    solution=online_softmax_kernel,
)
def _check_online_softmax(kernel) -> str:
    runnable, device = _prepare(kernel)
    for index, (what, _n_rows, _n_keys, _d, block_m, block_n, strides, _scale) in enumerate(
        _ONLINE_CASES
    ):
        what = _(what)  # the case's label, marked N_ in the table
        scores, value = _online_inputs(index)
        out = _launch_output(
            what, _online_run, runnable, device, (scores, value), block_m, block_n, strides
        )
        expected = torch.softmax(scores.double(), -1) @ value.double()
        # in the interpreter a float32 kernel is within about 1e-6 of the float64 reference (a
        # float16 accumulator is 1e-3 off); on a GPU tl.dot rounds float32 to tf32 by default
        atol, rtol = (1e-5, 1e-5) if device.type == "cpu" else (1e-2, 1e-3)
        if matches(out, expected, atol=atol, rtol=rtol):
            continue
        _diagnose_online(what, index, out, expected, scores, value, block_m, block_n, atol, device)
    where = _where_it_ran(kernel, device, _ONLINE_TYPES, _ONLINE_CONSTANTS)
    return _(
        "Right: the running maximum, the rescaled sum and accumulator, and the masks of the "
        "ragged tiles all work (your kernel ran {value})."
    ).format(value=where)


def _diagnose_online(
    what: str,
    index: int,
    out: torch.Tensor,
    expected: torch.Tensor,
    scores: torch.Tensor,
    value: torch.Tensor,
    block_m: int,
    block_n: int,
    atol: float,
    device: torch.device,
) -> None:
    """Raises the feedback on an output ``out`` of case ``index`` that is not ``expected``: rows
    never written, a usual mistake, NaN or inf and their cause, 16-bit rounding, or the gap."""
    unwritten = [r for r in range(out.size(0)) if bool((out[r] == -3.0).all())]
    if unwritten:
        raise Mistake(
            _(
                "With {what}: rows {rows} of O were never written (they still hold O's fill, "
                "-3.0). Each program must cover BLOCK_M rows, rows = tl.program_id(0) * BLOCK_M "
                "+ tl.arange(0, BLOCK_M), and store every row < n_rows: a fixed number in "
                "place of BLOCK_M leaves rows out when BLOCK_M changes (here it is {block_m})."
            ).format(what=what, rows=_row_list(unwritten), block_m=block_m)
        )
    mistakes = _online_mistakes(scores, value, block_n)
    message = diagnose(out, mistakes, default="", atol=max(atol, 1e-4))
    if message:
        raise Mistake(_("With {what}: {message}").format(what=what, message=message))
    _online_not_finite(what, index, out, scores)
    largest = (out.double() - expected).abs().max().item()
    if device.type == "cpu" and matches(out, expected, atol=2e-2, rtol=2e-2):
        raise Mistake(
            _(
                "With {what}: your output is off by up to {value:.2g}, the rounding of float16 "
                "(or bfloat16), where a float32 kernel is within about 1e-6: is m, l, acc, p "
                "or V held in a 16-bit float? Keep the running maximum, the running sum and "
                "the accumulator in float32 (tl.float32), and p and V too."
            ).format(what=what, value=largest)
        )
    raise Mistake(
        _(
            "With {what}: your output differs from softmax(S) @ V (largest difference {value:.3g})."
        ).format(what=what, value=largest)
    )


def _online_not_finite(what: str, index: int, out: torch.Tensor, scores: torch.Tensor) -> None:
    """Raises the feedback on NaN or inf in ``out``, with its cause where the rows that have it
    tell: a running maximum started at 0, or no maximum subtracted."""
    bad = [r for r in range(out.size(0)) if not bool(torch.isfinite(out[r]).all())]
    row_max = scores.amax(-1)
    if bad and all(row_max[r] < -80.0 for r in bad):
        raise Mistake(
            _(
                "With {what}: your output has NaN in exactly the rows whose scores are all far "
                "below 0 (rows {rows}): there every exponential underflowed to 0, and 0/0 is "
                "NaN. Start the running maximum at -inf, not 0, so that the first tile's "
                "maximum replaces it and the largest exponential of a row is exp(0) = 1."
            ).format(what=what, rows=_row_list(bad))
        )
    if index == 2 and bad:
        raise Mistake(
            _(
                "With {what}: your output has NaN or inf: an exponential overflowed. Subtract the "
                "running maximum m_new = max(m, max of the tile), the largest score seen so far, in "
                "every exponential, so that each is at most 1 (the correction exp(m - m_new) "
                "too)."
            ).format(what=what)
        )
    if not bool(torch.isfinite(out).all()):
        raise Mistake(
            _(
                "With {what}: your output has NaN or inf where the reference has none: look for -inf "
                "- (-inf), 0/0, or exp of a score before the maximum is subtracted."
            ).format(what=what)
        )


def _online_mistakes(scores: torch.Tensor, value: torch.Tensor, block_n: int) -> dict:
    """The usual mistakes of the online softmax kernel, emulated: message -> output."""
    return {
        (
            _(
                "the accumulator is not rescaled: acc = correction[:, None] * acc + tl.dot(p, v), correction = "
                "exp(m - m_new), so that what earlier tiles added moves to the new maximum too."
            )
        ): _online_emulation(scores, value, block_n, rescale_acc=False),
        (
            _(
                "the running sum is not rescaled: l = correction * l + tl.sum(p, axis=1), like the "
                "accumulator."
            )
        ): _online_emulation(scores, value, block_n, rescale_sum=False),
        _("the output is not divided by the running sum: store acc / l[:, None]."): (
            _online_emulation(scores, value, block_n, normalise=False)
        ),
        (
            _(
                "the padding keys of the ragged last tile get a weight: their scores were loaded as "
                "0. Load them with other=float('-inf')."
            )
        ): _online_emulation(scores, value, block_n, pad_zero=True),
        (
            _(
                "neither the running sum nor the accumulator is rescaled: correction is always 1. "
                "Was m set to m_new before correction = exp(m - m_new) was computed? Compute correction "
                "(and p) first, then m = m_new; and multiply both l and acc by correction."
            )
        ): _online_emulation(scores, value, block_n, rescale_acc=False, rescale_sum=False),
        # a row loaded at once in a block of a fixed size: the keys past it are never seen
        **{
            _(
                "your kernel sees only the first {keys} keys of a row: loop over the key tiles "
                "(for start in range(0, n_keys, BLOCK_N)), whatever the number of keys."
            ).format(keys=keys): (
                torch.softmax(scores[:, :keys].double(), -1) @ value[:keys].double()
            )
            for keys in (32, 64, 128, 256, 512, 1024)
            if keys < scores.size(1)
        },
    }


def _row_list(rows: List[int]) -> str:
    """``[3, 4, 5, 9]`` as ``"3-5, 9"``."""
    runs: List[List[int]] = []
    for r in rows:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


# -- 5. find the bug in a causal softmax kernel ---------------------------------------------------

_BUG = "Vw=="
_BUG_MISTAKES = (
    "GlZFTFlPVz4aCwRURU4KHFUAGgIJAE5OIxsHGwcKD1oeBxdPFh0eFQgYER1DRxoAUwwPABEcEx0QBgBMQQAcC0MJABwQEQgbGk4C"
    "HFUTUw4EBhoLD0FVPhwKClQVGkMbHRdTCQgaER1DGx0TB0UCGxkeFhsQXFFJQVZGTFlPVz4aCwRURk4KHFUAGgIJAE5OFwcQUhgA"
    "ExoRAkMbFBkWFkEAHAtDHxobHREEBgdCQxsdF1MWCA4RHUMjVRMdAUEnWE4XBxBSAQoWVAcaEQYRFwBFABoQThcHEFIRCQ4XH04U"
    "BhEGG0tDWFRMUE1PUlEpCBoRTlBPHAFTBEEXGwMOChsGX0UAGhBOChtVAQcEFREHThcHEFIBEA0RVBoLClUZFhcPERhOEAcaBx8B"
    "QRIbAg8AAkhTD0FISU4KT15SIEVMVDhAQysaFwBFFRwRTgAAERdMR01UVlpBVVVQPwwPEVRaQwYGUgEMBhwAVEMAGxdTFRMbExwC"
    "AlUCFhdBBQELERZVABwSTVQdTl5PAR5dFRMbExwCAiobF01RXVpMT09XR1FfQVY4Bw0KVUdTDBJUBgcEBwFIUyctOzclPDxVTE5F"
    "MlQYDw0KBlIQChcRBk4XBxBSBA0OGBFOEQACSVMRCRFUAgIBEAFTD0FKSU4wTxQAFkUMFQcFBgtVEBYJDgNaTE9PV0VRX0FWOAcN"
    "ClVFUwwSVAYHBAcBSFMRCRFUAwIcHhcXRQ0VGgsQTxkdEgFBWR0ABUNVBRsKEhFUCxsfGhwWCxUdFQJDBgZSQ0lBBxtOFwcQC1MR"
    "AB8RTg0AVQUWDAYcAEBDLQAGUxIJHRcGQwMUHBYWQRAbCxBPARoWRQwVBwVDBBAXA1pDWFRMW01PUlEpCBoRTltPHAFTFwgTHBpZ"
    "TwYHERETFRcaCgESUgcNBFQGARRIBlIeBBkdGRsOTx4XFhUSVBEYBh0MUhYdERsaCw0bHBMfRQAAVAMMHAFSQkVJABwLQwIUARgA"
    "BVQYDw0KBlISFwRUWQcNCVlSAApBABwLGk8RHVMLDgBUDQsOGxUWRQgAXUBBQ1VQSkdbVFYiCgEQUkpFCAdUHAoIHQZJRQUdAgcH"
    "BhsVUwcYVAAGBk8HHQRCElQHGw5PGBMYABJUAAYGTwIXGgIJAAdOEBoYUgcKQUVaTE9PV0NDR1tUViIKARBSQlVBHQdOEQYSGgdf"
    "QQAcC0McAR0BAEEZAR0XTwIAGhEEVBEYBh0MUhAKDQEZAEMFVU5TNk1UAAYGTw8XAQoSVBsIQxsdF1MIAAcfCwdPHhcKFkEAGwFD"
    "RxgTAA4IGhNOChtVBRoRCVQCBxAGFx4WRRYbAQIHTxkXEhMEVAAGBgJVBx0SEx0AGgYBXFxRGA=="
)
_BUG_SOLUTION = (
    "LR0aC0NZT1IHDQRUEAcCCBocEglBHQdOFQYGGxEJBFhUHQxPARoWRQIbGgoKGxwdHUUIB1QEQ1NIUhpFSlQnTk5POV5TCw4AVARD"
    "U1UbU05BJ1RDQyNbUjIWQQMGBxcbEBxfRRABERwaTxxSHwoSEQdOFwcQUhgAGFQbAEMGAQFTChYaVAoKDhIdHQQNWFQPDQtVBRoR"
    "CVQnTl5POVICEAQGDU5TTxkdAAASVB0aEE8aHB8cQR8RF1lPHAYARRMbA04KHFVfGgsHVBEYBh0MBRsAExFUDw0LVREcCAQHVAEW"
    "G1U8EitBXERBU0ZbUicNBFQSBxsKEVIfDA8RTmRpT1VSUxMIBx0MDwpVT1NNC1RITjBGVVRTTQtUSFNDBlVZUzZBWVQiSg=="
)


@exercise(
    "gpu/find-the-bug",
    title="Find the bug in a causal softmax kernel",
    hint=(
        """
            Work through a small case by hand: which keys does query 0 see, and which
            should it see under the package's causal mask?
        """,
        """
            Run the kernel (or work it by hand) with L = S = 4: which keys does query 0 see, and
            which should it see? The package's causal mask lets query i attend to key j when
            j <= i + (S - L), the last query aligned with the last key.
        """,
    ),
    solution=_BUG_SOLUTION,
)
def _check_find_the_bug(answer) -> str:
    if isinstance(answer, str):
        raise Mistake(
            _(
                "Give the line number as a number, without quotes (for line 3: 3, not '3'), got "
                "the string {answer!r}."
            ).format(answer=answer[:40])
        )
    line = integer(answer, _("line number"))
    if not 1 <= line <= 10:
        raise Mistake(
            _(
                "The listing has lines 1 to 10; {line} is not one of them. Give the number of the "
                "wrong line."
            ).format(line=line)
        )
    return check_line_number(
        line,
        _BUG,
        _BUG_MISTAKES,
        right=(
            _(
                "Right: the diagonal is visible (j <= i + S - L); with < every query loses its own "
                "key, and the first query of a square block has none left."
            )
        ),
        otherwise=(
            _(
                "Line {value:g} is right. Run the kernel on a small square case and compare with the "
                "causal mask."
            )
        ),
    )


# -- 6. the backward pass from the saved log-sum-exp ----------------------------------------------


def attention_backward(query, key, value, out, lse, dout):
    scale = query.size(-1) ** -0.5
    # P recomputed, (..., L, S)
    p = torch.exp(query @ key.transpose(-2, -1) * scale - lse[..., None])
    dv = p.transpose(-2, -1) @ dout
    dp = dout @ value.transpose(-2, -1)
    d = (dout * out).sum(-1, keepdim=True)  # D_i = rowsum(dO * O) = rowsum(P * dP)
    ds = p * (dp - d)
    return ds @ key * scale, ds.transpose(-2, -1) @ query * scale, dv


def _backward_variants(query, key, value, out, lse, dout) -> Dict[str, Tuple[torch.Tensor, ...]]:
    """(dq, dk, dv) of the usual mistakes."""
    scale = query.size(-1) ** -0.5
    raw = query @ key.transpose(-2, -1)
    p = torch.exp(raw * scale - lse[..., None])
    dv = p.transpose(-2, -1) @ dout
    dp = dout @ value.transpose(-2, -1)
    d = (dout * out).sum(-1, keepdim=True)

    def grads(ds, s=scale):
        return ds @ key * s, ds.transpose(-2, -1) @ query * s, dv

    unscaled_p = torch.exp(raw - lse[..., None])
    return {
        (
            _(
                "D is missing: dS = P * (dP - D) with D_i = rowsum(dO * O), not P * dP. The "
                "softmax's Jacobian subtracts each row's weighted mean of dP."
            )
        ): grads(p * dp),
        _("the sign of D is flipped: dS = P * (dP - D)."): grads(p * (dp + d)),
        _("dS = dP - D lacks the factor P: dS = P * (dP - D)."): grads(dp - d),
        (
            _(
                "D sums over the wrong dimension: D_i = sum over the head dimension of dO_i * O_i, "
                "one number per query (keepdim=True, so it broadcasts over the keys)."
            )
        ): grads(p * (dp - (dout * out).sum(-2, keepdim=True).sum(-1, keepdim=True))),
        _(
            "dQ and dK lack the scale: S = Q K^T / sqrt(d_k), so dQ = dS K / sqrt(d_k) and dK = "
            "dS^T Q / sqrt(d_k)."
        ): grads(p * (dp - d), 1.0),
        _(
            "P was recomputed without the scale: P = exp(Q K^T / sqrt(d_k) - lse), the scores "
            "the forward saw."
        ): (
            lambda pp: (
                (pp * (dout @ value.transpose(-2, -1) - d)) @ key * scale,
                (pp * (dout @ value.transpose(-2, -1) - d)).transpose(-2, -1) @ query * scale,
                pp.transpose(-2, -1) @ dout,
            )
        )(unscaled_p),
    }


@exercise(
    "gpu/backward",
    title="The backward pass from the saved log-sum-exp",
    hint=(
        """
            Recompute the weights from the saved log-sum-exp, then go back through the two
            products and the softmax one at a time. The softmax's backward needs one
            number per query.
        """,
        """
            With s = Q K^T * scale (scale = 1/sqrt(d_k)): P = exp(s - lse[..., None]) recomputes the
            weights.
            dV = P^T dO; dP = dO V^T; D = rowsum(dO * O) (one number per query, keepdim=True);
            dS = P * (dP - D); dQ = dS K * scale; dK = dS^T Q * scale. Transpose only the last two
            dimensions.
        """,
    ),
    solution=attention_backward,
)
def _check_backward(fn) -> str:
    cases = [  # (what, batch, L, S, d_k, d_v)
        (_("L=5, S=7, d_k=8, d_v=6, no batch"), (), 5, 7, 8, 6),
        (_("batch (2, 3), L=S=6, d_k=d_v=4"), (2, 3), 6, 6, 4, 4),
        (_("batch (2,), L=9, S=4, d_k=16, d_v=3"), (2,), 9, 4, 16, 3),
    ]
    for index, (what, batch, L, S, d_k, d_v) in enumerate(cases):
        query, key, value, dout, out, lse, expected = _backward_inputs(index, batch, L, S, d_k, d_v)
        try:
            with _autograd_watched() as called:
                got = call(fn, query, key, value, out, lse, dout)
        except Mistake as error:  # the learner's function failed: say on which input
            raise Mistake(_("With {what}: {message}").format(what=what, message=error)) from None
        if called:
            # the engine behind a call already named is not named again
            names = sorted(set(called) - {_AUTOGRAD}) or [_AUTOGRAD]
            raise Mistake(
                _(
                    "Your function calls {names}: this exercise writes the backward by hand, from "
                    "the saved out and lse, as the backward kernels do (autograd is what the check "
                    "compares with)."
                ).format(names=" and ".join(names))
            )
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Mistake(
                _("Return the three gradients (dq, dk, dv); got {type_name}{value}.").format(
                    type_name=type(got).__name__,
                    value=_(" of length {length}").format(length=len(got))
                    if isinstance(got, (tuple, list))
                    else "",
                )
            )
        names = ("dq", "dk", "dv")
        for order in itertools.permutations(range(3)):
            if order != (0, 1, 2) and all(
                matches(got[i], expected[j], atol=1e-8, rtol=1e-6) for i, j in enumerate(order)
            ):
                raise Mistake(
                    _(
                        "With {what}: your gradients are right but returned as ({order}): return "
                        "them in the order (dq, dk, dv)."
                    ).format(what=what, order=", ".join(names[j] for j in order))
                )
        for name, g_, e in zip(names, got, expected):
            expect_tensor(g_, e.shape, _("With {what}, {name}").format(what=what, name=name))
        if all(matches(g_, e, atol=1e-8, rtol=1e-6) for g_, e in zip(got, expected)):
            continue
        _diagnose_backward(what, got, expected, names, (query, key, value, out, lse, dout))
    return _(
        "Right: your gradients match autograd's, with L != S, batch dimensions and d_k != d_v."
    )


@contextlib.contextmanager
def _autograd_watched():
    """Inside the block, autograd's calls are recorded (and run): yields the list of the names
    called. ``torch.autograd.grad``, ``torch.autograd.backward`` and ``Tensor.backward`` by
    name; and, whatever name the learner imported them under (``from torch.autograd import
    grad``), the backward engine that all of them, ``torch.func.vjp`` and ``jacrev`` run
    (``torch.autograd._engine_run_backward``, where this torch has it), and forward-mode
    autograd's ``make_dual`` (``torch.func.jacfwd``)."""
    import torch.autograd.forward_ad as forward_ad

    called: List[str] = []
    patched = [
        (torch.autograd, "grad", "torch.autograd.grad"),
        (torch.autograd, "backward", "torch.autograd.backward"),
        (torch.Tensor, "backward", "Tensor.backward"),
        (torch.autograd, "_engine_run_backward", _AUTOGRAD),
        (forward_ad, "make_dual", "forward-mode autograd"),
    ]
    patched = [(owner, name, label) for owner, name, label in patched if hasattr(owner, name)]
    saved = [getattr(owner, name) for owner, name, _label in patched]

    def watched(label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            called.append(label)
            return original(*args, **kwargs)

        return recorded

    for (owner, name, label), original in zip(patched, saved):
        setattr(owner, name, watched(label, original))
    try:
        yield called
    finally:
        for (owner, name, _label), original in zip(patched, saved):
            setattr(owner, name, original)


#: The name :func:`_autograd_watched` records for autograd's backward engine, reached by a name
#: it does not patch (an imported ``grad``, ``torch.func.vjp``, ...).
_AUTOGRAD = "autograd"


def _backward_inputs(index: int, batch: Tuple[int, ...], L: int, S: int, d_k: int, d_v: int):
    """Case ``index``'s seeded float64 inputs, the forward pass's ``out`` and ``lse``, and
    autograd's gradients: ``(query, key, value, dout, out, lse, (dq, dk, dv))``."""
    g = torch.Generator().manual_seed(300 + index)
    query, key = (
        torch.randn(*batch, L, d_k, generator=g, dtype=torch.float64),
        torch.randn(*batch, S, d_k, generator=g, dtype=torch.float64),
    )
    value = torch.randn(*batch, S, d_v, generator=g, dtype=torch.float64)
    dout = torch.randn(*batch, L, d_v, generator=g, dtype=torch.float64)
    q, k, v = (t.clone().requires_grad_(True) for t in (query, key, value))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    out = torch.softmax(scores, -1) @ v
    expected = torch.autograd.grad(out, (q, k, v), dout)
    out, lse = out.detach(), torch.logsumexp(scores.detach(), -1)
    return query, key, value, dout, out, lse, expected


def _diagnose_backward(
    what: str,
    got: Sequence[torch.Tensor],
    expected: Tuple[torch.Tensor, ...],
    names: Tuple[str, ...],
    inputs: Tuple[torch.Tensor, ...],
) -> None:
    """Raises the feedback on gradients ``got`` that are not ``expected``: a usual mistake,
    float32's precision, or which of dq, dk, dv are wrong. ``inputs``: query, key, value, out,
    lse, dout."""
    for message, wrong in _backward_variants(*inputs).items():
        if all(matches(g_, w, atol=1e-8, rtol=1e-6, equal_nan=True) for g_, w in zip(got, wrong)):
            raise Mistake(_("With {what}: {message}").format(what=what, message=named(message)))
    if all(matches(g_, e, atol=1e-5, rtol=1e-4) for g_, e in zip(got, expected)):
        largest = max((g_.double() - e).abs().max().item() for g_, e in zip(got, expected))
        raise Mistake(
            _(
                "With {what}: your gradients are right to about float32's precision (largest "
                "difference {value:.2g}) but not to float64's, which the check asks for: the "
                "formulas are right, the precision is not. Compute in the inputs' dtype, "
                "float64 (a .float(), or a tensor created as float32, drops the digits)."
            ).format(what=what, value=largest)
        )
    wrong = [
        name
        for name, g_, e in zip(names, got, expected)
        if not matches(g_, e, atol=1e-8, rtol=1e-6)
    ]
    if wrong == ["dv"]:
        raise Mistake(
            _(
                "With {what}: dq and dk are right, dv is not: dV = P^T dO, the weights transposed."
            ).format(what=what)
        )
    if "dv" not in wrong:
        raise Mistake(
            _(
                "With {what}: dv is right, {value} not: check dS = P * (dP - D) and the products dQ "
                "= dS K * scale, dK = dS^T Q * scale."
            ).format(what=what, value=" and ".join(wrong))
        )
    raise Mistake(
        _(
            "With {what}: {value} differ from autograd's. Recompute P = exp(s - lse) first and "
            "check it against torch.softmax."
        ).format(what=what, value=", ".join(wrong))
    )


# -- 7. achieved TFLOP/s and the roofline: a measurement on the learner's GPU -----------------------


def _roofline_solution(
    batch=4, heads=8, L=2048, S=2048, d_k=64, causal=True, peak_flops=8.1e12, bandwidth=320e9
):
    # The defaults: a T4, whose CUDA cores run this chapter's kernels (Triton makes tl.dot
    # fused multiply-adds there: 8.1 TFLOP/s; 320 GB/s). On another GPU, pass its numbers.
    from attncourse.kernels.flash import flash_attention

    q = torch.randn(batch, heads, L, d_k, device="cuda", dtype=torch.float16)
    k = torch.randn(batch, heads, S, d_k, device="cuda", dtype=torch.float16)
    v = torch.randn(batch, heads, S, d_k, device="cuda", dtype=torch.float16)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for run in range(23):  # 3 to warm up (the first call compiles the kernel), 20 timed
        start.record()
        flash_attention(q, k, v, causal=causal)
        end.record()
        torch.cuda.synchronize()  # the GPU runs asynchronously: wait until it has finished
        if run >= 3:
            times.append(start.elapsed_time(end))  # milliseconds between the two events
    ms = torch.tensor(times).median().item()
    # the (query, key) pairs attended: all L * S, or with causal=True those with key j <= i + S - L
    # (the last query aligned with the last key): about half of them when L = S
    pairs = sum(max(0, i + S - L + 1) for i in range(L)) if causal else L * S
    flops = 4 * batch * heads * pairs * d_k  # two products, a multiply-add is 2 FLOPs
    tflops = flops / (ms * 1e-3) / 1e12
    # bytes of Q, K and V read and O written once: the least any kernel moves
    intensity = flops / (q.element_size() * (2 * q.numel() + k.numel() + v.numel()))
    roofline = min(peak_flops, intensity * bandwidth)
    return {
        "device": torch.cuda.get_device_name(),
        "ms": ms,
        "batch": batch,
        "heads": heads,
        "L": L,
        "S": S,
        "d_k": d_k,
        "causal": causal,
        "flops": flops,
        "tflops": tflops,
        "peak_flops": peak_flops,
        "bandwidth": bandwidth,
        "intensity": intensity,
        "fraction": tflops * 1e12 / roofline,
    }


#: The fields of the answer, each with the other names accepted for it.
_ROOFLINE_FIELDS = {
    "ms": ("time_ms", "milliseconds", "median_ms"),
    "batch": ("batch_size", "B"),
    "heads": ("num_heads", "h", "H"),
    "L": ("query_len", "seq_len"),
    "S": ("key_len", "seq_len"),
    "d_k": ("d", "head_dim"),
    "causal": (),
    "flops": ("flop",),
    "tflops": ("tflop_s", "achieved_tflops"),
    "peak_flops": ("peak",),
    "bandwidth": ("bandwidth_bytes",),
    "intensity": (),
    "fraction": ("roofline_fraction",),
}

#: Bounds that no GPU crosses, with room: FLOP/s faster than any GPU's dense half-precision peak
#: (a B200's is 2.25e15), or slower than a CPU core (2e10); peaks and bandwidths of any GPU.
_FASTEST, _SLOWEST = 5e15, 2e10
_PEAK_RANGE, _BANDWIDTH_RANGE = (1e11, 2e16), (1e10, 3e13)

NO_GPU = N_(
    "This exercise measures a GPU, and there is none here (torch.cuda.is_available() is "
    "False): a time taken on the CPU, or in Triton's interpreter, says nothing about a GPU's "
    "roofline, so it is not graded. Run the chapter on a CUDA GPU: in Colab, Runtime > Change "
    "runtime type > T4 GPU, then run the notebook from the top."
)


def _answer_mapping(answer: Any) -> Optional[Dict[str, Any]]:
    """The fields of a dict, dataclass, namedtuple or SimpleNamespace answer; ``None`` for any
    other object."""
    if isinstance(answer, dict):
        return {str(k): v for k, v in answer.items()}
    if dataclasses.is_dataclass(answer) and not isinstance(answer, type):
        return {f.name: getattr(answer, f.name) for f in dataclasses.fields(answer)}
    if isinstance(answer, tuple) and hasattr(answer, "_asdict"):
        return {str(k): v for k, v in answer._asdict().items()}
    if isinstance(answer, types.SimpleNamespace):
        return dict(vars(answer))
    return None


def _flag(value: Any) -> bool:
    """``causal`` as a bool: Python, numpy and one-element torch booleans."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype == torch.bool:
        return bool(value.item())
    if isinstance(value, bool) or (
        type(value).__module__ == "numpy"
        and getattr(getattr(value, "dtype", None), "kind", "") == "b"
    ):
        return bool(value)
    raise Mistake(_("causal should be True or False, got {value}.").format(value=_short(value)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _causal_pairs(L: int, S: int, causal: bool) -> int:
    """The (query, key) pairs attention computes: all, or those of the package's causal mask
    (query i sees the keys j <= i + S - L)."""
    if not causal:
        return L * S
    m = max(1, S - L + 1)
    return S * (S + 1) // 2 - (m - 1) * m // 2


def _close(value: float, target: float, rel: float = 0.02) -> bool:
    return abs(value - target) <= rel * abs(target)


def _raise_named(
    value: float, known: List[Tuple[float, str]], right: List[float], feedback: str, **fields: Any
) -> None:
    """Raise the :class:`Mistake` that names the known mistakes ``value`` is, if it is any (those
    ``known`` values that differ from every ``right`` value by more than the tolerance):
    ``feedback`` filled with ``fields`` and, as ``{message}``, their messages."""
    found = [
        message
        for wrong, message in known
        if _close(value, wrong) and not any(_close(wrong, r, 0.05) for r in right)
    ]
    if found:
        raise Mistake(feedback.format(message=several(found), **fields))


@exercise(
    "gpu/roofline-fraction",
    title="Achieved TFLOP/s and the roofline",
    hint=(
        """
            Time the kernel on the GPU after a warm-up, count its FLOPs, and compare the
            achieved rate with the roofline of this GPU at the kernel's arithmetic
            intensity.
        """,
        """
            1. On the GPU, make q, k, v (float16, say B=4, h=8, L=S=2048, d_k=64) and call the kernel a few
            times first (the first call compiles it). Then time 20 calls, each between two
            torch.cuda.Event(enable_timing=True) recorded before and after it, with
            torch.cuda.synchronize() before start.elapsed_time(end), and keep the median (ms).
            2. FLOPs: two products of 2 L S d_k each per (batch, head), 4 B h L S d_k in all, about half of
            it with causal=True when L = S. TFLOP/s = FLOPs / (ms * 1e-3) / 1e12.
            3. Intensity: FLOPs / bytes moved, e.g. Q, K, V read and O written once (4 B h L d_k elements
            of 2 bytes when L = S). Roofline = min(peak, intensity * bandwidth), in FLOP/s; fraction =
            achieved FLOP/s / roofline, a number between 0 and 1.
        """,
    ),
    solution=_roofline_solution,
    name="measure_roofline",
    answer_is_function=False,  # the answer is the measurement in a dict; the solution takes it
)
def _check_roofline(answer) -> str:
    fields = _roofline_fields(answer)
    flops, dims = _roofline_flops(fields)
    ms = _roofline_time(fields, flops)
    tflops = _roofline_tflops(fields, flops, ms)
    peak, bandwidth, intensity, most = _roofline_gpu(fields, flops, dims)
    fraction, memory, roofline = _roofline_fraction(fields, tflops, peak, bandwidth, intensity)
    _roofline_not_above_one(tflops, peak, bandwidth, intensity, memory, roofline, most)
    bound = (
        _("memory-bound: your intensity is below the ridge point")
        if memory < peak
        else _("compute-bound: your intensity is past the ridge point")
    )
    return _(
        "Right: {tflops:.3g} TFLOP/s is {percent:.1f}% of the roofline, min(peak, intensity * "
        "bandwidth) = {roofline:.4g} TFLOP/s ({bound}). FlashAttention-2 reaches 50-73% of an "
        "A100's peak; the chapter's compile table shows what holds a kernel back (spills, "
        "tensor cores or not)."
    ).format(tflops=tflops, percent=100 * fraction, roofline=roofline / 1e12, bound=bound)


def _roofline_fields(answer) -> Dict[str, Any]:
    """The answer's fields by their stub names (a measurement on the GPU), or the feedback that
    it is not attempted, not a measurement, lacks a field or was taken on the CPU."""
    if callable(answer) and _answer_mapping(answer) is None:
        if inspect.isfunction(answer) and _is_stub(answer):
            raise NotAttempted()
        raise Mistake(
            _(
                "Pass the measurement (the dict your function returns: check(..., "
                "measure_roofline())), not the function."
            )
        )
    raw = _answer_mapping(answer)
    for key, value in (raw or {}).items():
        if value is Ellipsis:
            raise NotAttempted(stub_field(key))
    if not torch.cuda.is_available():
        raise NotAttempted(_(NO_GPU))
    if raw is None:
        raise Mistake(
            _(
                "Pass a dict (or a dataclass or namedtuple) with the fields {fields}; got "
                "{type_name}."
            ).format(fields=", ".join(_ROOFLINE_FIELDS), type_name=type(answer).__name__)
        )
    fields: Dict[str, Any] = {}
    missing = []
    for name, others in _ROOFLINE_FIELDS.items():
        key = next((k for k in (name, *others) if k in raw), None)
        if key is None:
            missing.append(name)
        else:
            fields[name] = raw[key]
    if missing:
        raise Mistake(
            _("Your answer lacks {missing}: give every field of the stub, {fields}.").format(
                missing=", ".join(missing), fields=", ".join(_ROOFLINE_FIELDS)
            )
        )
    device = raw.get("device", raw.get("gpu"))
    if device is not None and "cpu" in str(device).lower():
        raise Mistake(
            _(
                "Your device is {device}: this exercise times attention on the GPU. Create q, k "
                'and v with device="cuda" and time them there.'
            ).format(device=_short(device))
        )
    return fields


def _roofline_flops(fields: Dict[str, Any]) -> Tuple[float, Tuple[int, int, int, int, int]]:
    """The FLOPs the sizes cost (both products, halved where causal), and the sizes
    ``(B, h, L, S, d_k)``; the usual miscounts named."""
    B, H, L, S, d = (integer(fields[n], n) for n in ("batch", "heads", "L", "S", "d_k"))
    for name, size in zip(("batch", "heads", "L", "S", "d_k"), (B, H, L, S, d)):
        if size < 1:
            raise Mistake(
                _("{name} should be a positive size, got {size}.").format(name=name, size=size)
            )
    causal = _flag(fields["causal"])
    sizes = _("batch={B}, heads={H}, L={L}, S={S}, d_k={d}, causal={causal}").format(
        B=B, H=H, L=L, S=S, d=d, causal=causal
    )
    flops = number(fields["flops"], answer_field("flops"))
    full = 4 * B * H * L * S * d
    exact = 4 * B * H * d * _causal_pairs(L, S, causal)
    right = [exact] + ([full / 2] if causal and L == S else [])
    if not any(_close(flops, r) for r in right):
        _raise_named(
            flops,
            _flops_miscounts(B, H, L, S, causal, exact, full),
            right,
            _("Your {flops:.4g} FLOPs for {sizes}: {message}"),
            flops=flops,
            sizes=sizes,
        )
        raise Mistake(
            _(
                "Your {flops:.4g} FLOPs do not match {sizes}: the two products cost "
                "4 * batch * heads * L * S * d_k = {full:.4g} FLOPs (a multiply-add is 2), about "
                "half of it with causal=True when L = S (exactly {exact:.4g} here)."
            ).format(flops=flops, sizes=sizes, full=float(full), exact=float(exact))
        )
    return flops, (B, H, L, S, d)


def _flops_miscounts(
    B: int, H: int, L: int, S: int, causal: bool, exact: int, full: int
) -> List[Tuple[float, str]]:
    """The usual miscounts of attention's FLOPs, as (value, message) pairs."""
    known = [
        (
            exact / 2,
            _(
                "you counted a multiply-add as 1 FLOP: a product of an (m x k) and a (k x n) "
                "matrix costs 2 m k n FLOPs, a multiply and an add for each term."
            ),
        ),
        (
            exact / 2,
            _(
                "you counted only one of the two products: Q K^T and P V each cost "
                "2 L S d_k FLOPs per (batch, head) pair."
            ),
        ),
        (
            exact / 4,
            _(
                "you counted one product, and a multiply-add as 1 FLOP: both products count, "
                "2 L S d_k FLOPs each per (batch, head) pair."
            ),
        ),
        (
            exact / B,
            _("you left out the batch: every one of the {B} sequences counts.").format(B=B),
        ),
        (
            exact / H,
            _("you left out the heads: every one of the {H} heads counts.").format(H=H),
        ),
    ]
    if causal:
        known.append(
            (
                full,
                _(
                    "you counted causal attention as full: with causal=True a query sees only "
                    "the keys up to its own position, about half of the pairs when L = S."
                ),
            )
        )
        if L != S:
            known.append(
                (
                    full / 2,
                    _(
                        "you halved the count, but with L != S a causal query does not see "
                        "half of the keys: count the pairs j <= i + S - L."
                    ),
                )
            )
    else:
        known.append(
            (
                full / 2,
                _("you halved the count as for a causal mask, but your causal is False."),
            )
        )
    return known


def _roofline_time(fields: Dict[str, Any], flops: float) -> float:
    """Milliseconds some GPU could take for ``flops``: not the launch alone, not a first call."""
    ms = number(fields["ms"], answer_field("ms"))
    if ms <= 0:
        raise Mistake(_("ms should be a positive time, got {ms:g}.").format(ms=ms))
    if ms < max(1e-3, flops / _FASTEST * 1e3):
        raise Mistake(
            _(
                "{ms:.3g} ms for {flops:.4g} FLOPs would be {rate:.4g} TFLOP/s, faster than any "
                "GPU can run them: the time measured only the launch. A GPU runs asynchronously: "
                "the call returns as soon as the kernel is queued, so a clock read after it "
                "measures nothing of the kernel. Time with CUDA events and call "
                "torch.cuda.synchronize() before reading them (or use triton.testing.do_bench). "
                "Or were the milliseconds seconds?"
            ).format(ms=ms, flops=flops, rate=flops / (ms * 1e-3) / 1e12)
        )
    if ms > 100 + flops / _SLOWEST * 1e3:
        raise Mistake(
            _(
                "{ms:.4g} ms for {flops:.4g} FLOPs is {rate:.3g} TFLOP/s, slower than any GPU runs "
                "attention: did you time the first call (which compiles the kernel), CPU tensors "
                "or Triton's interpreter, the creation of the inputs, the 20 runs together "
                "instead of their median, or give microseconds?"
            ).format(ms=ms, flops=flops, rate=flops / (ms * 1e-3) / 1e12)
        )
    return ms


def _roofline_tflops(fields: Dict[str, Any], flops: float, ms: float) -> float:
    """The achieved TFLOP/s, the FLOPs over the time; the usual unit slips named."""
    tflops = number(fields["tflops"], answer_field("tflops"))
    achieved = flops / (ms * 1e-3) / 1e12
    if not _close(tflops, achieved):
        known = [
            (
                achieved / 1e3,
                _("you divided by the milliseconds as if they were seconds: seconds = ms * 1e-3."),
            ),
            (achieved * 1e3, _("that is GFLOP/s (divided by 1e9): TFLOP/s divide by 1e12.")),
            (
                achieved * 1e3,
                _("you turned the milliseconds into microseconds (* 1e-6): seconds = ms * 1e-3."),
            ),
            (achieved * 1e12, _("that is FLOP/s: divide by 1e12 for TFLOP/s.")),
            (
                achieved * 1e9,
                _("that is FLOPs per millisecond: TFLOP/s = FLOPs / (ms * 1e-3) / 1e12."),
            ),
            (
                1 / achieved,
                _("that is inverted: seconds per TFLOP; TFLOP/s = FLOPs / seconds / 1e12."),
            ),
        ]
        _raise_named(
            tflops, known, [achieved], _("Your {tflops:.4g} TFLOP/s: {message}"), tflops=tflops
        )
        raise Mistake(
            _(
                "Your {tflops:.4g} TFLOP/s is not your FLOPs over your time: {flops:.4g} FLOPs in "
                "{ms:.4g} ms are {achieved:.4g} TFLOP/s (FLOPs / (ms * 1e-3) / 1e12)."
            ).format(tflops=tflops, flops=flops, ms=ms, achieved=achieved)
        )
    return tflops


def _roofline_gpu(
    fields: Dict[str, Any], flops: float, dims: Tuple[int, int, int, int, int]
) -> Tuple[float, float, float, float]:
    """The GPU's peak and bandwidth in their units, and the kernel's intensity between 1 and the
    most it can reach (Q, K, V and O moved once), which is returned last."""
    B, H, L, S, d = dims
    peak = number(fields["peak_flops"], answer_field("peak_flops"))
    if not _PEAK_RANGE[0] <= peak <= _PEAK_RANGE[1]:
        raise Mistake(
            _(
                "peak_flops is in FLOP/s, a number such as 8.1e12 (a T4's CUDA cores) or 989e12 "
                "(an H100's tensor cores); {peak:.4g} is no GPU's peak. TFLOP/s or GFLOP/s where "
                "FLOP/s are meant?"
            ).format(peak=peak)
        )
    bandwidth = number(fields["bandwidth"], answer_field("bandwidth"))
    if not _BANDWIDTH_RANGE[0] <= bandwidth <= _BANDWIDTH_RANGE[1]:
        raise Mistake(
            _(
                "bandwidth is in bytes per second, a number such as 320e9 (a T4) or 3.35e12 (an "
                "H100); {bandwidth:.4g} is no GPU's. GB/s or TB/s where bytes/s are meant?"
            ).format(bandwidth=bandwidth)
        )
    _roofline_datasheet(peak, bandwidth)
    intensity = number(fields["intensity"], answer_field("intensity"))
    least_bytes = 2 * B * H * (2 * L * d + 2 * S * d)  # Q, K, V, O once, 2 bytes an element
    most = flops / least_bytes
    if intensity > 1.02 * most:
        raise Mistake(
            _(
                "Your intensity, {intensity:.4g} FLOP/byte, is more than any kernel reaches here: "
                "even Q, K and V read and O written once, in 2-byte halves, are {bytes:.4g} bytes, "
                "{most:.4g} FLOP/byte. Count the bytes of every (batch, head) pair, and bytes, "
                "not elements."
            ).format(intensity=intensity, bytes=float(least_bytes), most=most)
        )
    # below 1 FLOP/byte only where no kernel gets more (a single query, L = 1: about 1)
    least = min(1.0, most / 2)
    if intensity < least:
        raise Mistake(
            _(
                "Your intensity, {intensity:.3g} FLOP/byte, is below {least:.3g}, less than "
                "attention reaches at these sizes even when it moves its matrices through memory: "
                "intensity is FLOPs divided by bytes. Bytes divided by FLOPs, or bits counted?"
            ).format(intensity=intensity, least=least)
        )
    return peak, bandwidth, intensity, most


def _roofline_datasheet(peak: float, bandwidth: float) -> None:
    """On a T4 (Colab's GPU, the one the chapter's table gives both rooflines of), the peak
    and bandwidth must be the T4's: a Mistake names them otherwise."""
    try:
        name = torch.cuda.get_device_name()
    except Exception:  # noqa: BLE001 - no CUDA runtime to ask: nothing to compare with
        return
    if "T4" not in name:
        return
    if any(_close(peak, p, 0.1) for p in (8.1e12, 65e12)) and _close(bandwidth, 320e9, 0.1):
        return
    raise Mistake(
        _(
            "This GPU is a T4 ({name}): its peak is 8.1e12 FLOP/s on the CUDA cores, which run "
            "this chapter's kernels there (65e12 on its tensor cores, in float16), and its "
            "bandwidth 320e9 bytes/s; you gave peak_flops={peak:.4g} and bandwidth={bandwidth:.4g}."
        ).format(name=name, peak=peak, bandwidth=bandwidth)
    )


def _roofline_fraction(
    fields: Dict[str, Any], tflops: float, peak: float, bandwidth: float, intensity: float
) -> Tuple[float, float, float]:
    """The fraction achieved / min(peak, intensity * bandwidth); returns it with the memory
    roof and the roofline (FLOP/s)."""
    fraction = number(fields["fraction"], answer_field("fraction"))
    memory = intensity * bandwidth
    roofline = min(peak, memory)
    expected = tflops * 1e12 / roofline
    if not _close(fraction, expected):
        known = [
            (
                tflops * 1e12 / peak,
                _(
                    "you divided by the peak: the roofline is min(peak, intensity * bandwidth) = "
                    "{roofline:.4g} TFLOP/s here, below the peak, since your intensity is below "
                    "the ridge point peak / bandwidth = {ridge:.0f} FLOP/byte."
                ).format(roofline=roofline / 1e12, ridge=peak / bandwidth),
            ),
            (
                tflops * 1e12 / memory,
                _(
                    "you divided by intensity * bandwidth, which is above the peak here: the "
                    "roofline is the smaller of the two, min(peak, intensity * bandwidth) = "
                    "{roofline:.4g} TFLOP/s."
                ).format(roofline=roofline / 1e12),
            ),
            (
                1 / expected,
                _("that is inverted: achieved / roofline, not roofline / achieved."),
            ),
            (
                expected * 100,
                _(
                    "that is a percentage: give the fraction, {expected:.3g} for {percent:.3g}%."
                ).format(expected=expected, percent=expected * 100),
            ),
            (expected * 1e-12, _("you divided TFLOP/s by FLOP/s: put both in one unit.")),
            (expected * 1e12, _("you divided FLOP/s by TFLOP/s: put both in one unit.")),
        ]
        _raise_named(
            fraction,
            known,
            [expected],
            _("Your fraction {fraction:.4g}: {message}"),
            fraction=fraction,
        )
        raise Mistake(
            _(
                "Your fraction, {fraction:.4g}, is not achieved / roofline: {tflops:.4g} TFLOP/s "
                "over min(peak, intensity * bandwidth) = min({peak:.4g}, {memory:.4g}) = "
                "{roofline:.4g} TFLOP/s is {expected:.4g}."
            ).format(
                fraction=fraction,
                tflops=tflops,
                peak=peak / 1e12,
                memory=memory / 1e12,
                roofline=roofline / 1e12,
                expected=expected,
            )
        )
    return fraction, memory, roofline


def _roofline_not_above_one(
    tflops: float,
    peak: float,
    bandwidth: float,
    intensity: float,
    memory: float,
    roofline: float,
    most: float,
) -> None:
    """A fraction above 1 is impossible: above the peak, or above what the memory allows."""
    expected = tflops * 1e12 / roofline
    if expected > 1 and tflops * 1e12 > peak:
        raise Mistake(
            _(
                "{tflops:.4g} TFLOP/s is more than the peak you assumed, {peak:.4g} TFLOP/s: a "
                "fraction above 1 is impossible. Most often the timing is at fault: a GPU runs "
                "asynchronously, and a clock read without torch.cuda.synchronize() (or CUDA "
                "events) measures the launch, not the kernel. Otherwise the peak is not the one "
                "your kernel runs at (a T4 does 8.1 TFLOP/s on its CUDA cores, which run this "
                "chapter's kernels, 65 on its tensor cores)."
            ).format(tflops=tflops, peak=peak / 1e12)
        )
    if expected > 1:
        raise Mistake(
            _(
                "{tflops:.4g} TFLOP/s is more than the memory allows at your intensity, "
                "{intensity:.4g} FLOP/byte * {bandwidth:.4g} GB/s = {memory:.4g} TFLOP/s: a "
                "fraction above 1 is impossible. Most often the timing is at fault: a GPU runs "
                "asynchronously, and a clock read without torch.cuda.synchronize() (or CUDA "
                "events) measures the launch, not the kernel. Otherwise your intensity counts "
                "traffic that never reaches the memory, such as re-reads of K and V that the L2 "
                "cache serves: Q, K, V and O moved once give {most:.4g} FLOP/byte."
            ).format(
                tflops=tflops,
                intensity=intensity,
                bandwidth=bandwidth / 1e9,
                memory=memory / 1e12,
                most=most,
            )
        )
