"""Attention as a program (chapter 11): every variant of the course as a FlexAttention program.

``torch.nn.attention.flex_attention.flex_attention`` (torch >= 2.5; Dong et al. 2024) computes

    softmax(score_mod(s_bhij, b, h, i, j), with -inf where not mask_mod(b, h, i, j)) V,
    s_bhij = scale * q_bhi . k_bhj,

for a ``score_mod`` and a ``mask_mod`` written in plain PyTorch on the indices of one score:
batch ``b``, head ``h``, query ``i`` (``q_idx``), key ``j`` (``kv_idx``). Compiled, it becomes one
fused kernel that skips the ``(query block, key block)`` tiles that ``create_block_mask`` finds
empty. This module holds, as factories, the programs of every variant the course met (each
checked in ``tests/test_flex.py`` against the package function it replaces), a materialising
reference that evaluates the same programs with autograd on any device
(:func:`flex_reference`: on the CPU torch refuses FlexAttention when the query, key or value
requires gradients), the compile with its
eager fallback (:func:`compile_flex`), and the count of the blocks a block mask keeps against
the tiles the course counted (:func:`block_counts`, :func:`sparsity_table`).

Conventions (the package's): a causal mask aligns the last query with the last key
(:func:`attncourse.masks.causal_mask`): query ``i`` may attend to key ``j`` when
``j <= i + (S - L)``. A mask_mod returns ``True`` where the query may attend.

Every factory captures its tensors (lengths, slopes, spans, document ids, even the window) in
its closure: a compiled kernel is specialised on the program's code and on the shapes, not on
the values of captured tensors, so one compile serves every window, every span and every
packing of the same shapes.
"""

from __future__ import annotations

import inspect
import math
import operator
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ._checks import (
    fmt_shape,
    require_floating,
    require_non_negative_int,
    require_positive_int,
    require_positive_number,
    require_rank,
    require_same_dtype_and_device,
)
from .adaptive_span import computed_cells, span_window
from .attention import safe_softmax
from .efficient import tile_schedule
from .kernels.tiles import span_tile_maps, tile_map
from .positions import alibi_slopes

try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import (
        BlockMask,
        and_masks,
        create_block_mask,
        flex_attention,
    )
except ImportError:  # an older torch: flex_available() says so
    BlockMask = and_masks = create_block_mask = flex_attention = None  # type: ignore[assignment,misc]

__all__ = [
    "flex_available",
    "causal_mask_mod",
    "padding_mask_mod",
    "sliding_window_mask_mod",
    "document_mask_mod",
    "persistent_mask_mod",
    "span_mask_mod",
    "alibi_score_mod",
    "soft_span_score_mod",
    "document_ids",
    "flex_reference",
    "FlexKernel",
    "compile_flex",
    "block_counts",
    "sparsity_table",
]

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def flex_available() -> Tuple[bool, str]:
    """``(True, "")`` when this torch has FlexAttention, else ``(False, why)``."""
    if flex_attention is None:
        return False, (
            f"torch {torch.__version__} has no torch.nn.attention.flex_attention (it came with "
            "torch 2.5): upgrade torch to run this chapter"
        )
    return True, ""


def _require_flex() -> None:
    available, why = flex_available()
    if not available:
        raise RuntimeError(why)


def _offset(query_len: int, key_len: Optional[int]) -> int:
    """``S - L``, the shift of a bottom-right aligned mask, after checking both lengths."""
    require_positive_int("query_len", query_len)
    key_len = query_len if key_len is None else key_len
    require_positive_int("key_len", key_len)
    return int(key_len) - int(query_len)


def _integer_vector(name: str, values: Union[Tensor, Sequence[int]], *, positive: bool) -> Tensor:
    """``values`` (a 1-D integer tensor or a sequence of ints) as a long tensor, checked."""
    if not isinstance(values, Tensor):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(
                f"{name} must be a sequence or 1-D tensor of integers, got {type(values).__name__}"
            )
        values = list(values)
        for i, v in enumerate(values):
            try:
                if isinstance(v, bool) or (isinstance(v, Tensor) and v.dim() != 0):
                    raise TypeError
                operator.index(v)
            except TypeError:
                raise TypeError(
                    f"{name} must hold integers, got {v!r} (of type {type(v).__name__}) at index"
                    f" {i}"
                ) from None
        values = torch.tensor([operator.index(v) for v in values], dtype=torch.long)
    if values.dtype == torch.bool or values.is_floating_point() or values.is_complex():
        raise TypeError(f"{name} must hold integers, got dtype {values.dtype}")
    if values.dim() != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {fmt_shape(values.shape)}")
    if values.numel() == 0:
        raise ValueError(f"{name} must not be empty")
    smallest = int(values.min())
    if smallest < (1 if positive else 0):
        wanted = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be {wanted}, got {values.tolist()}")
    return values.long()


# -- the mask_mods ---------------------------------------------------------------------------------


def causal_mask_mod(query_len: int, key_len: Optional[int] = None) -> MaskMod:
    """Causal attention, the last query aligned with the last key (bottom right).

    ``mask_mod(b, h, q_idx, kv_idx)`` is ``kv_idx <= q_idx + (S - L)``: the program of
    :func:`attncourse.masks.causal_mask`. ``is_causal=True`` in torch's SDPA and the ``q_idx >=
    kv_idx`` of FlexAttention's documentation align the top left instead; both agree when
    ``L = S``.
    """
    offset = _offset(query_len, key_len)

    def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx + offset

    return causal


def padding_mask_mod(lengths: Union[Tensor, Sequence[int]]) -> MaskMod:
    """Key padding: sequence ``b`` has ``lengths[b]`` real keys, the rest is padding.

    ``mask_mod`` is ``kv_idx < lengths[b]``: the program of
    ``attncourse.masks.padding_mask(lengths)[:, None, None, :]``, for self-attention (combine
    it with :func:`causal_mask_mod` through torch's ``and_masks``) or cross-attention over
    source sentences of ``lengths`` words. ``lengths``: ``(B,)`` non-negative integers.
    """
    lengths = _integer_vector("lengths", lengths, positive=False)

    def padding(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx < lengths[b]

    return padding


def sliding_window_mask_mod(
    query_len: int,
    key_len: Optional[int] = None,
    *,
    window: int,
    device: Optional[torch.device] = None,
) -> MaskMod:
    """Causal attention within a window: ``0 <= (q_idx + S - L) - kv_idx < window``.

    The program of :func:`attncourse.kv_cache.sliding_window_mask` (chapter 6): each query sees
    its own position and the ``window - 1`` before it. The window is captured as a tensor, so
    one compiled kernel serves every window (``window >= S`` is plain causal attention);
    ``device``: where that tensor lives, the device of the inputs.
    """
    offset = _offset(query_len, key_len)
    require_positive_int("window", window)
    width = torch.tensor(int(window), device=device)

    def sliding_window(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        distance = q_idx + offset - kv_idx
        return (distance >= 0) & (distance < width)

    return sliding_window


def document_mask_mod(document: Union[Tensor, Sequence[int]]) -> MaskMod:
    """Document masking of a packed row: a query attends only to keys of its own document.

    ``document``: ``(T,)`` integers, the document each position of the packed row belongs to
    (:func:`document_ids`). ``mask_mod`` is ``document[q_idx] == document[kv_idx]``; with
    :func:`causal_mask_mod` (``and_masks``) it is causal attention within each document,
    as if each had run alone.
    """
    document = _integer_vector("document", document, positive=False)

    def same_document(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return document[q_idx] == document[kv_idx]

    return same_document


def persistent_mask_mod(length: int) -> MaskMod:
    """All-attention (chapter 9): causal over the ``length`` context keys, and the persistent
    keys appended after them (indices ``>= length``) always admitted.

    The program of :func:`attncourse.all_attention.extend_mask` applied to a causal mask: the
    keys are ``[context; persistent]``, ``S = length + N``, the queries are the context's.
    """
    require_positive_int("length", length)
    context = int(length)

    def persistent(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx <= q_idx) | (kv_idx >= context)

    return persistent


def _require_span(span: object) -> Tensor:
    require_floating("span", span)
    assert isinstance(span, Tensor)
    require_rank("span", span, 1, "(H,)")
    if span.numel() == 0:
        raise ValueError("span is empty: give one span per head")
    detached = span.detach()
    if not bool(torch.isfinite(detached).all()) or float(detached.min()) < 0:
        raise ValueError(f"every span must be finite and >= 0, got {detached.tolist()}")
    return span


def span_mask_mod(span: Tensor, ramp: float) -> MaskMod:
    """The keys an adaptive span can reach (chapter 8), per head: ``0 <= q_idx - kv_idx < z_h + R``.

    Exactly the keys where the soft mask ``m_z(x)`` of :func:`attncourse.adaptive_span.soft_span_mask`
    is not 0 (causal self-attention, ``L = S``); the rest are skipped, block by block. ``span``:
    ``(H,)`` the spans ``z`` in positions; ``ramp``: ``R > 0``.
    """
    span = _require_span(span)
    require_positive_number("ramp", ramp)
    reach = span.detach() + float(ramp)  # a key at distance x has m > 0 exactly when x < z + R

    def within_span(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        distance = q_idx - kv_idx
        return (distance >= 0) & (distance < reach[h])

    return within_span


# -- the score_mods --------------------------------------------------------------------------------


def alibi_score_mod(
    num_heads: int,
    query_len: int,
    key_len: Optional[int] = None,
    *,
    device: Optional[torch.device] = None,
) -> ScoreMod:
    """ALiBi (chapter 5): ``score - slope_h * (q_idx + S - L - kv_idx)``.

    The program of :func:`attncourse.positions.alibi_bias` (the queries are the last ``L`` of
    ``S`` positions) with the slopes of :func:`attncourse.positions.alibi_slopes`, computed
    per score instead of stored as an ``(H, L, S)`` table. The bias is computed in float64
    and rounded to the scores' dtype once, as ``alibi_bias`` does; ``device``: where the slopes
    live, the device of the inputs.
    """
    require_positive_int("num_heads", num_heads)
    offset = _offset(query_len, key_len)
    slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float64, device=device)

    def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        bias = -slopes[h] * (q_idx + offset - kv_idx)
        return score + bias.to(score.dtype)

    return alibi


def soft_span_score_mod(span: Tensor, ramp: float) -> ScoreMod:
    """The adaptive span's soft mask as a score_mod: ``score + log m_z(x)``, ``x = q_idx - kv_idx``.

    Why it is the chapter 8 computation: ``m_j p_j / sum_k m_k p_k`` with ``p = softmax(s)``
    is ``m_j e^(s_j) / sum_k m_k e^(s_k) = softmax(s + log m)_j``. Where ``m = 0`` the log is
    ``-inf`` and the weight exactly 0; but at the key where the ramp ends (``x = z + R``, a
    whole number for a span clamped to 0 and a whole ramp) the clamp of ``m`` still passes the
    gradient, and the gradient of ``log m`` there is ``0 * inf = NaN``. So ``m`` is clamped to
    the smallest normal number of the dtype before the log (the weight there is then below
    ``1e-38`` of the others, and the gradient 0), and :func:`span_mask_mod` removes those keys
    exactly. ``span`` may require gradients: they reach it through the ramp, as in the package.
    """
    span = _require_span(span)
    require_positive_number("ramp", ramp)
    width = float(ramp)

    def soft_span(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        distance = q_idx - kv_idx
        m = ((width + span[h] - distance) / width).clamp(0.0, 1.0)
        tiny = torch.finfo(score.dtype).tiny
        return score + torch.log(m.to(score.dtype).clamp_min(tiny))

    return soft_span


def document_ids(lengths: Union[Tensor, Sequence[int]]) -> Tensor:
    """``(sum(lengths),)`` long: the document of each position when documents of ``lengths``
    are packed one after another into one row (``[0, 0, 0, 1, 1, 2, ...]``)."""
    lengths = _integer_vector("lengths", lengths, positive=True)
    return torch.repeat_interleave(torch.arange(lengths.numel()), lengths)


# -- the same programs, materialised: autograd on every device ---------------------------------


def _grids(batch: int, heads: int, query_len: int, key_len: int, device: torch.device):
    """The index tensors ``b, h, q_idx, kv_idx``, shaped to broadcast to ``(B, h, L, S)``."""
    return (
        torch.arange(batch, device=device).view(-1, 1, 1, 1),
        torch.arange(heads, device=device).view(1, -1, 1, 1),
        torch.arange(query_len, device=device).view(1, 1, -1, 1),
        torch.arange(key_len, device=device).view(1, 1, 1, -1),
    )


def _check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    """Query ``(B, h, L, d_k)``, key ``(B, h, S, d_k)`` and value ``(B, h, S, d_v)``, floating, of
    one dtype and on one device (what FlexAttention and :func:`flex_reference` take)."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_floating(name, x)
        require_rank(name, x, 4, "(B, h, L or S, d_k)")
    require_same_dtype_and_device(query=query, key=key, value=value)
    if key.shape[:2] != query.shape[:2] or value.shape[:3] != key.shape[:3]:
        raise ValueError(
            "query (B, h, L, d_k), key (B, h, S, d_k) and value (B, h, S, d_v) must share B and h,"
            f" and key and value S: query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)},"
            f" value {fmt_shape(value.shape)}"
        )
    if query.size(-1) != key.size(-1):
        raise ValueError(
            "query and key must share the feature size E (last dimension): query"
            f" {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}"
        )


def flex_reference(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    score_mod: Optional[ScoreMod] = None,
    mask_mod: Optional[MaskMod] = None,
    scale: Optional[float] = None,
) -> Tensor:
    """FlexAttention's formula evaluated in plain PyTorch, every score materialised.

    The programs run once on index tensors shaped ``(B, 1, 1, 1)``, ``(1, h, 1, 1)``,
    ``(1, 1, L, 1)`` and ``(1, 1, 1, S)``, which broadcast to the ``(B, h, L, S)`` scores (a
    program written with tensor operations and indexing of captured tensors runs unchanged;
    FlexAttention's eager mode evaluates it the same way through ``vmap``). Autograd works
    through it on every device, including into tensors the programs capture (an adaptive
    span): the check of the gradients, which FlexAttention cannot run on a CPU.

    Args:
        query: ``(B, h, L, d_k)``.
        key: ``(B, h, S, d_k)``.
        value: ``(B, h, S, d_v)``.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` -> the modified scores.
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx)`` -> boolean, ``True`` = may attend.
        scale: multiplies ``q . k``; defaults to ``1 / sqrt(d_k)``.

    Returns:
        ``(B, h, L, d_v)``. A query with no key left gets zeros, as in FlexAttention and in
        :func:`attncourse.attention.scaled_dot_product_attention`.
    """
    _check_qkv(query, key, value)
    for name, mod in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if mod is not None and not callable(mod):
            raise TypeError(f"{name} must be a function or None, got {type(mod).__name__}")
    if scale is None:
        if query.size(-1) == 0:
            raise ValueError("query has E = 0 features: pass scale= explicitly")
        scale = query.size(-1) ** -0.5
    else:
        require_positive_number("scale", scale)
    batch, heads, query_len, _ = query.shape
    key_len = key.size(2)
    shape = (batch, heads, query_len, key_len)
    b, h, q_idx, kv_idx = _grids(batch, heads, query_len, key_len, query.device)
    scores = (query @ key.transpose(-2, -1)) * scale
    if score_mod is not None:
        scores = _run_program("score_mod", score_mod, (scores, b, h, q_idx, kv_idx), shape)
        if not isinstance(scores, Tensor) or not scores.is_floating_point():
            raise TypeError(
                "score_mod must return a floating tensor (the modified scores), got"
                f" {type(scores).__name__}"
            )
        try:
            scores = scores.to(query.dtype).expand(shape)
        except RuntimeError:
            raise ValueError(
                f"score_mod returned shape {fmt_shape(scores.shape)}, which does not broadcast to"
                f" the scores {fmt_shape(shape)}"
            ) from None
    if mask_mod is not None:
        keep = _run_program("mask_mod", mask_mod, (b, h, q_idx, kv_idx), shape)
        if not isinstance(keep, Tensor) or keep.dtype != torch.bool:
            raise TypeError(
                "mask_mod must return a boolean tensor (True = may attend), got"
                f" {getattr(keep, 'dtype', type(keep).__name__)}"
            )
        try:
            keep = keep.expand(shape)
        except RuntimeError:
            raise ValueError(
                f"mask_mod returned shape {fmt_shape(keep.shape)}, which does not broadcast to"
                f" the scores {fmt_shape(shape)}"
            ) from None
        scores = scores.masked_fill(~keep, float("-inf"))
    return safe_softmax(scores) @ value


def _run_program(name: str, program: Callable, args: tuple, shape: Tuple[int, ...]):
    """``program(*args)``; an index error (a captured tensor with fewer entries than the
    batch, the heads or the positions it is indexed by) becomes a ValueError naming it."""
    try:
        return program(*args)
    except IndexError as error:
        raise ValueError(
            f"{name} indexes a tensor it captured out of range for (B, h, L, S) ="
            f" {shape}: was it built for other sizes? ({error})"
        ) from None


# -- compiling, with an eager fallback -------------------------------------------------------------


@dataclass(frozen=True)
class FlexKernel:
    """What :func:`compile_flex` made: call ``attention`` as ``flex_attention`` is called.

    ``compiled``: whether ``attention`` is the compiled kernel (else FlexAttention's eager
    mode: the same numbers, every score materialised). ``note``: one line that says which, and
    why. ``first_call_s``: the seconds of the first call, which compiled (tracing, code
    generation and the C++ or Triton build) and ran once.
    """

    attention: Callable[..., Tensor]
    compiled: bool
    note: str
    first_call_s: float


def _check_program_fits(
    query: Tensor,
    key: Tensor,
    score_mod: Optional[ScoreMod],
    block_mask: Optional["BlockMask"],
) -> None:
    """The programs FlexAttention would refuse for these inputs, refused here naming the
    argument: inside :func:`compile_flex` it would read as a compiler failure."""
    if score_mod is not None:
        try:
            inspect.signature(score_mod).bind(*range(5))
        except TypeError:
            raise TypeError(
                "score_mod must take (score, b, h, q_idx, kv_idx); a mask_mod (b, h, q_idx,"
                " kv_idx) goes into a block mask (create_block_mask)"
            ) from None
        except ValueError:  # a builtin without a signature: FlexAttention will tell
            pass
    if block_mask is not None:
        B, H, L, S = query.size(0), query.size(1), query.size(2), key.size(2)
        mask_b, mask_h, mask_l, mask_s = block_mask.shape
        if (mask_l, mask_s) != (L, S) or mask_b not in (1, B) or mask_h not in (1, H):
            raise ValueError(
                f"block_mask was built for (B, h, L, S) = {tuple(block_mask.shape)}, the inputs"
                f" have ({B}, {H}, {L}, {S}) (B and h of the mask may be 1)"
            )


def compile_flex(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    score_mod: Optional[ScoreMod] = None,
    block_mask: Optional["BlockMask"] = None,
) -> FlexKernel:
    """Compile ``flex_attention`` for these inputs, or fall back to its eager mode.

    ``torch.compile`` compiles on the first call, so this function makes that call (with
    gradients off: on a CPU FlexAttention runs forward only) and times it. Compiling for the CPU
    needs an x86 CPU with AVX2 and a C++ compiler (Linux and Colab have gcc; Windows often has
    none; torch 2.13 does not compile it for a Mac's CPU), and Triton on an NVIDIA or AMD GPU
    (torch 2.13 compiles it for a Mac's GPU, MPS, without Triton); where anything in it fails,
    the kernel is FlexAttention's eager mode, which computes the same numbers, materialising the
    scores, and the note says why.

    Later calls with the same shapes, dtype and programs (any values of their captured
    tensors, any block mask of the same shape) reuse the compiled kernel.
    """
    _require_flex()
    _check_qkv(query, key, value)
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be a function or None, got {type(score_mod).__name__}")
    if block_mask is not None and not isinstance(block_mask, BlockMask):
        raise TypeError(
            f"block_mask must be a BlockMask (create_block_mask) or None, got"
            f" {type(block_mask).__name__}"
        )
    _check_program_fits(query, key, score_mod, block_mask)
    args = (query.detach(), key.detach(), value.detach())
    start = time.perf_counter()
    try:
        compiled = torch.compile(flex_attention)
        with torch.no_grad():
            compiled(*args, score_mod=score_mod, block_mask=block_mask)
    except Exception as error:  # noqa: BLE001 - no compiler, an old torch, ...: run eagerly
        lines = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {lines[0] if lines else ''}".strip().rstrip(":")
        if len(reason) > 160:
            reason = reason[:157] + "..."
        return FlexKernel(
            flex_attention,
            False,
            f"torch.compile failed here ({reason}); FlexAttention runs eagerly: correct, slower",
            time.perf_counter() - start,
        )
    seconds = time.perf_counter() - start
    return FlexKernel(
        compiled,
        True,
        f"FlexAttention compiled for {query.device.type} (first call {seconds:.1f} s: tracing,"
        " code generation, building the kernel)",
        seconds,
    )


# -- block sparsity against the tiles the course counted --------------------------------------------


def block_counts(block_mask: "BlockMask") -> Dict[str, int]:
    """The blocks a ``BlockMask`` keeps and skips, summed over its batch and heads.

    Returns ``{"partial", "full", "kept", "skipped", "total"}``: ``partial`` blocks hold masked
    and unmasked scores (the kernel evaluates the mask_mod in them), ``full`` blocks only
    unmasked ones (no mask_mod), ``kept = partial + full`` are computed, ``skipped`` never,
    of ``total = B * H * ceil(L / block_q) * ceil(S / block_kv)``. A block that sticks out
    past ``L`` or ``S`` is partial: its missing positions count as masked. (``BlockMask.sparsity()``
    divides by the unpadded ``L * S`` instead, so it is wrong, even negative, when the lengths
    are not multiples of the block size.)
    """
    _require_flex()
    if not isinstance(block_mask, BlockMask):
        raise TypeError(
            f"block_mask must be a BlockMask (create_block_mask), got {type(block_mask).__name__}"
        )
    partial = int(block_mask.kv_num_blocks.sum())
    full = (
        int(block_mask.full_kv_num_blocks.sum()) if block_mask.full_kv_num_blocks is not None else 0
    )
    batch, heads, _, key_len = block_mask.shape
    query_blocks = block_mask.kv_num_blocks.size(-1)  # one count per block of queries
    total = batch * heads * query_blocks * math.ceil(key_len / block_mask.BLOCK_SIZE[1])
    return {
        "partial": partial,
        "full": full,
        "kept": partial + full,
        "skipped": total - partial - full,
        "total": total,
    }


def _blocks(
    mask_mod: MaskMod,
    batch: Optional[int],
    heads: Optional[int],
    query_len: int,
    key_len: int,
    block_size: int,
) -> Dict[str, int]:
    mask = create_block_mask(
        mask_mod, batch, heads, query_len, key_len, device="cpu", BLOCK_SIZE=block_size
    )
    return block_counts(mask)


def _row(mask: str, flex: Dict[str, int], course: int, source: str, note: str) -> Dict[str, object]:
    return {
        "mask": mask,
        "partial": flex["partial"],
        "full": flex["full"],
        "kept": flex["kept"],
        "skipped": flex["skipped"],
        "course": course,
        "course_source": source,
        "agree": flex["kept"] == course,
        "note": note,
    }


def sparsity_table(
    length: int = 2048,
    *,
    block_size: int = 128,
    window: int = 256,
    spans: Sequence[float] = (40.0, 150.0, 400.0, 1024.0),
    ramp: float = 32.0,
    num_persistent: int = 64,
    document_lengths: Sequence[int] = (300, 120, 500, 64, 400, 200, 264, 200),
) -> List[Dict[str, object]]:
    """``create_block_mask``'s kept and skipped blocks for each mask, against the course's count.

    One row per mask, with ``block_size`` blocks on both sides (``L = S = length`` unless the
    row says otherwise), each a dict: ``mask``, FlexAttention's ``partial``, ``full``, ``kept``
    and ``skipped`` blocks (:func:`block_counts`), ``course`` (the same count from the
    course's own tile arithmetic, ``course_source`` naming it), ``agree`` (kept == course)
    and ``note`` (what differs and why):

    * causal: ``efficient.tile_schedule`` (chapter 7) with ``block_size`` tiles;
    * causal, ``L = S`` not a multiple of the block: the same, and why FlexAttention has more
      partial blocks than ``tile_schedule`` has tiles crossing the diagonal;
    * causal, ``L = 2 * block_size`` new queries after ``S = length`` keys (bottom right);
    * the sliding window: ``kernels.tiles.tile_map(window=...)`` (chapter 10); chapter 8's
      ``computed_cells`` in the note;
    * the adaptive spans (one per head): ``kernels.tiles.span_tile_maps`` (chapter 10);
    * cross-attention of ``length / 4`` queries over two sources, ``length`` and ``length / 3``
      keys: ``tile_schedule`` per sequence, over its own length;
    * persistent vectors (chapter 9): the causal tiles plus one column of blocks;
    * document masking of ``document_lengths`` packed into one row: no course count matches
      (the documents alone, through ``tile_schedule``, cut their blocks at their own starts).
    """
    _require_flex()
    require_positive_int("length", length)
    require_positive_int("block_size", block_size)
    require_positive_int("window", window)
    require_positive_number("ramp", ramp)
    require_non_negative_int("num_persistent", num_persistent)
    spans_t = torch.tensor([float(z) for z in spans], dtype=torch.float64)
    _require_span(spans_t)
    docs = _integer_vector("document_lengths", document_lengths, positive=True)
    if int(docs.sum()) != length:
        raise ValueError(
            f"document_lengths must add up to length={length}, got {docs.tolist()} (sum"
            f" {int(docs.sum())})"
        )
    if length < 4 * block_size:
        raise ValueError(
            f"length={length} must be at least 4 * block_size={4 * block_size} for the"
            " table's masks to have blocks to skip"
        )

    def schedule(
        query_len: int, key_len: int, causal: bool
    ) -> List[Tuple[int, int, int, int, bool]]:
        return tile_schedule(
            query_len, key_len, causal=causal, block_m=block_size, block_n=block_size
        )

    rows = []
    causal = _blocks(causal_mask_mod(length), None, None, length, length, block_size)
    tiles = schedule(length, length, True)
    rows.append(
        _row(
            f"causal, L = S = {length}",
            causal,
            len(tiles),
            f"efficient.tile_schedule, {block_size} x {block_size} tiles",
            f"partial blocks {causal['partial']} = tiles crossing the diagonal"
            f" {sum(t[4] for t in tiles)}",
        )
    )
    odd = length - block_size // 2 - 3  # not a multiple of the block
    uneven = _blocks(causal_mask_mod(odd), None, None, odd, odd, block_size)
    tiles = schedule(odd, odd, True)
    crossing = sum(t[4] for t in tiles)
    rows.append(
        _row(
            f"causal, L = S = {odd}",
            uneven,
            len(tiles),
            f"efficient.tile_schedule, {block_size} x {block_size} tiles",
            f"{uneven['partial']} partial blocks against {crossing} tiles crossing the diagonal:"
            " the last row of blocks sticks out past L, and FlexAttention counts its missing"
            " positions as masked",
        )
    )
    new = 2 * block_size
    decode = _blocks(causal_mask_mod(new, length), None, None, new, length, block_size)
    rows.append(
        _row(
            f"causal, L = {new} new queries after S = {length} keys",
            decode,
            len(schedule(new, length, True)),
            "efficient.tile_schedule (bottom right, as the package aligns)",
            "both align the last query with the last key",
        )
    )
    sliding = _blocks(
        sliding_window_mask_mod(length, window=window), None, None, length, length, block_size
    )
    kernel = int(tile_map(length, length, block_size, block_size, window=window).sum())
    cells = computed_cells(length, window, block_m=block_size)
    rows.append(
        _row(
            f"sliding window {window}",
            sliding,
            kernel,
            "kernels.tile_map(window=...), chapter 10",
            f"chapter 8's computed_cells with queries in blocks of {block_size}: {cells:,} scores"
            f" against FlexAttention's {sliding['kept'] * block_size**2:,}: chapter 8 cuts a"
            f" band of {block_size} + {window} - 1 keys per block, not aligned to key blocks,"
            " and pads the first blocks with keys before position 0",
        )
    )
    heads = spans_t.numel()
    span = _blocks(span_mask_mod(spans_t, ramp), None, heads, length, length, block_size)
    maps = span_tile_maps(spans_t, ramp, length, block_size, block_size)
    windows = [min(span_window(z, ramp), length) for z in spans_t.tolist()]
    rows.append(
        _row(
            f"adaptive spans {', '.join(f'{z:g}' for z in spans_t.tolist())}, R = {ramp:g}",
            span,
            int(maps.sum()),
            "kernels.span_tile_maps, chapter 10 (one map per head)",
            f"windows ceil(z + R) = {windows}: every head skips its own blocks",
        )
    )
    queries = length // 4
    sources = [length, length // 3]
    cross = _blocks(padding_mask_mod(sources), len(sources), None, queries, length, block_size)
    per_sequence = sum(len(schedule(queries, s, False)) for s in sources)
    rows.append(
        _row(
            f"cross-attention, L = {queries}, sources {sources[0]} and {sources[1]}",
            cross,
            per_sequence,
            "efficient.tile_schedule per sequence, over its own source length",
            f"tiled_attention on the padded batch computes"
            f" {len(sources) * len(schedule(queries, length, False))}: it masks the padding"
            " keys, FlexAttention skips their blocks",
        )
    )
    memory = _blocks(
        persistent_mask_mod(length), None, None, length, length + num_persistent, block_size
    )
    extra = math.ceil(length / block_size) * (
        math.ceil((length + num_persistent) / block_size) - math.ceil(length / block_size)
    )
    rows.append(
        _row(
            f"persistent vectors, N = {num_persistent}",
            memory,
            len(schedule(length, length, True)) + extra,
            "efficient.tile_schedule (causal) + the memory's column of blocks",
            "every query sees the persistent keys: one more block per query block",
        )
    )
    packed = _blocks(
        and_masks(causal_mask_mod(length), document_mask_mod(document_ids(docs))),
        None,
        None,
        length,
        length,
        block_size,
    )
    alone = sum(len(schedule(n, n, True)) for n in docs.tolist())
    padded = docs.numel() * len(schedule(int(docs.max()), int(docs.max()), True))
    rows.append(
        _row(
            f"{docs.numel()} documents packed, longest {int(docs.max())}",
            packed,
            alone,
            "efficient.tile_schedule of each document alone",
            "packed, the documents start mid-block: a block straddling two of them is computed"
            " (partial), while alone each document's blocks start at its first position; a"
            f" padded batch of {docs.numel()} x {int(docs.max())} would compute"
            f" {padded} causal tiles",
        )
    )
    return rows
