"""Input checks shared by the package's public functions.

Every error names the argument at fault and the shapes (or dtypes) it saw, so that a
learner reading the traceback knows what to fix without opening the source.
"""

from __future__ import annotations

import math
import numbers
from typing import List, Sequence

import torch
from torch import Tensor


def fmt_shape(shape: Sequence[int]) -> str:
    """Format a shape as ``(2, 3, 4)``."""
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def require_tensor(name: str, x: object) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def require_floating(name: str, x: object) -> None:
    require_tensor(name, x)
    if not x.is_floating_point():  # type: ignore[union-attr]
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")  # type: ignore[union-attr]


def require_rank(name: str, x: Tensor, rank: int, layout: str, *, at_least: bool = False) -> None:
    """Check ``x.dim() == rank`` (or ``>= rank``); ``layout`` names the dimensions, e.g. ``"(B, L, E)"``."""
    ok = x.dim() >= rank if at_least else x.dim() == rank
    if not ok:
        wanted = f"at least {rank}" if at_least else f"exactly {rank}"
        raise ValueError(
            f"{name} must have {wanted} dimensions {layout}, got shape {fmt_shape(x.shape)}"
        )


def require_size(name: str, x: Tensor, dim: int, size: int, what: str) -> None:
    """Check ``x.size(dim) == size``; ``what`` says where ``size`` comes from."""
    if x.size(dim) != size:
        raise ValueError(
            f"{name} has size {x.size(dim)} in dimension {dim} but {what} is {size} "
            f"({name} has shape {fmt_shape(x.shape)})"
        )


def require_same_dtype_and_device(**tensors: Tensor) -> None:
    """All tensors share one dtype and one device."""
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.dtype != first.dtype:
            raise TypeError(
                f"{first_name} and {name} must have the same dtype, got {first.dtype} and {t.dtype}"
            )
        if t.device != first.device:
            raise ValueError(
                f"{first_name} and {name} must be on the same device, got {first.device} and"
                f" {t.device}"
            )


def broadcast_batch(**shapes: Sequence[int]) -> torch.Size:
    """Broadcast the given batch shapes like torch, or raise a ValueError naming them all."""
    try:
        return torch.broadcast_shapes(*[torch.Size(s) for s in shapes.values()])
    except RuntimeError:
        seen = ", ".join(f"{name} {fmt_shape(s)}" for name, s in shapes.items())
        raise ValueError(f"the batch dimensions do not broadcast: {seen}") from None


#: The dtypes of token ids (and other integer index tensors) the package accepts.
TOKEN_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
#: The seeds torch.manual_seed and torch.Generator.manual_seed accept: [low, high).
SEED_RANGE = (-(2**63), 2**64)


def _is_int(value: object) -> bool:
    """A Python or numpy integer (``numbers.Integral``), not a bool."""
    return (
        isinstance(value, numbers.Integral)
        and not isinstance(value, (bool,))
        and type(value).__name__ != "bool_"
    )


def _is_real(value: object) -> bool:
    """A real Python or numpy number (``numbers.Real``), not a bool."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and type(value).__name__ != "bool_"
    )


def require_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")


def check_token_id(name: str, value: object, vocab_size: int) -> int:
    """``value`` as a Python int: one token id (a Python or numpy integer) in ``[0, vocab_size)``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be a token id (an integer), got {type(value).__name__}")
    if not 0 <= value < vocab_size:  # type: ignore[operator]
        raise ValueError(f"{name} must be a token id in [0, {vocab_size}), got {value!r}")
    return int(value)  # type: ignore[call-overload]


def check_seed(name: str, seed: object) -> int:
    """``seed`` as a Python int: a Python or numpy integer (not a bool) torch accepts as a seed."""
    if not _is_int(seed):
        raise _not_a_number(name, seed, "an integer")
    if not SEED_RANGE[0] <= seed < SEED_RANGE[1]:  # type: ignore[operator]
        raise ValueError(f"{name} must be an integer in [-2**63, 2**64) (a torch seed), got {seed}")
    return int(seed)  # type: ignore[call-overload]


def _not_a_number(name: str, value: object, kind: str) -> TypeError:
    """The TypeError for a ``value`` of the wrong type where ``kind`` (a Python number) is due."""
    if isinstance(value, Tensor) and value.dim() == 0:
        return TypeError(f"{name} must be {kind}, got a 0-d tensor {value!r}: pass {name}.item()")
    return TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}")


def require_positive_int(name: str, value: object) -> None:
    if not _is_int(value):
        raise _not_a_number(name, value, "a positive integer")
    if value <= 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def require_heads_divide(name: str, width: object, num_heads: object, why: str = "") -> None:
    """``width`` (the argument ``name``) and ``num_heads`` are positive integers and the heads
    split the width evenly; ``why`` (what each head gets) ends the message."""
    require_positive_int(name, width)
    require_positive_int("num_heads", num_heads)
    if width % num_heads:  # type: ignore[operator]
        raise ValueError(f"num_heads={num_heads} must divide {name}={width}{why}")


def check_positive_ints(**values: object) -> List[int]:
    """Each value a positive integer (checked in the order given); returns them as Python ints
    (numpy integers would overflow silently)."""
    for name, value in values.items():
        require_positive_int(name, value)
    return [int(v) for v in values.values()]  # type: ignore[call-overload]


def require_non_negative_int(name: str, value: object) -> None:
    if not _is_int(value):
        raise _not_a_number(name, value, "a non-negative integer")
    if value < 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def require_pad_id(pad_id: object, src_vocab: int, tgt_vocab: int) -> None:
    """``pad_id`` of a translation model: a token id of both vocabularies (sizes checked)."""
    require_non_negative_int("pad_id", pad_id)
    if pad_id >= min(src_vocab, tgt_vocab):  # type: ignore[operator]
        raise ValueError(
            f"pad_id={pad_id} must be a token id of both vocabularies, below"
            f" src_vocab={src_vocab} and tgt_vocab={tgt_vocab}"
        )


def require_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}"
        )


def require_module(name: str, value: object) -> None:
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(value).__name__}")


def require_input_like(name: str, x: Tensor, parameter: Tensor, layer: str = "layer") -> None:
    """``x`` has the dtype and device of the ``layer``'s parameters (a floating ``x`` is assumed)."""
    if x.dtype != parameter.dtype:
        raise TypeError(
            f"{name} must have the dtype of the {layer}'s parameters ({parameter.dtype}), got"
            f" {x.dtype}; convert the input or the {layer} (e.g. {layer}.to({x.dtype}))"
        )
    if x.device != parameter.device:
        raise ValueError(
            f"{name} must be on the device of the {layer}'s parameters ({parameter.device}), got"
            f" {x.device}"
        )


def require_token_ids(name: str, tokens: object, vocab_size: int) -> None:
    """``tokens`` is an integer tensor of ids in ``[0, vocab_size)``."""
    require_tensor(name, tokens)
    assert isinstance(tokens, Tensor)
    if tokens.dtype not in TOKEN_DTYPES:
        raise TypeError(f"{name} must be an integer tensor of token ids, got dtype {tokens.dtype}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"{name} must hold token ids in [0, {vocab_size}), got values from {int(tokens.min())}"
            f" to {int(tokens.max())} ({name} shape {fmt_shape(tokens.shape)})"
        )


def default_scale(query: Tensor, scale: object, name: str = "query") -> float:
    """``scale`` checked, or ``1 / sqrt(d_k)`` from ``query``'s last size (a ValueError when ``d_k = 0``)."""
    if scale is None:
        if query.size(-1) == 0:
            raise ValueError(
                f"{name} has d_k = 0 features (shape {fmt_shape(query.shape)}): the default scale"
                " 1/sqrt(d_k) is undefined; pass scale= explicitly"
            )
        return query.size(-1) ** -0.5
    require_positive_number("scale", scale)
    return float(scale)  # type: ignore[arg-type]


def require_positive_number(name: str, value: object) -> None:
    if not _is_real(value):
        raise _not_a_number(name, value, "a positive finite number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def check_mask(
    mask: object, target: Sequence[int], *, name: str = "mask", layout: str = "(..., L, S)"
) -> None:
    """Check that ``mask`` can be applied to scores of shape ``target``.

    A mask is boolean (``True`` = this query may attend to this key) or floating (added to
    the scores). It needs at least the two trailing dimensions ``(L or 1, S or 1)`` and must
    broadcast to ``target`` without adding dimensions or growing it: broadcasting may expand
    the mask, never the scores.
    """
    require_tensor(name, mask)
    assert isinstance(mask, Tensor)
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"{name} must be boolean (True = may attend) or floating (added to the scores), "
            f"got dtype {mask.dtype}; if 1 means 'may attend', pass {name}.bool()"
        )
    if mask.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions {layout} so that queries and keys are"
            f" explicit, got shape {fmt_shape(mask.shape)}; a key padding mask of shape (B, S)"
            " becomes (B, 1, S) for scores (B, L, S) or (B, 1, 1, S) for scores (B, h, L, S)"
        )
    target = torch.Size(target)
    try:
        ok = mask.dim() <= len(target) and torch.broadcast_shapes(mask.shape, target) == target
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {fmt_shape(mask.shape)} does not broadcast to the scores' shape "
            f"{fmt_shape(target)} {layout}"
        )


def check_attention_inputs(
    query: object, key: object, value: object, mask: object = None
) -> torch.Size:
    """Check the arguments of an attention function and return the broadcast batch shape.

    ``query`` ``(..., L, d_k)``, ``key`` ``(..., S, d_k)``, ``value`` ``(..., S, d_v)``: floating
    tensors of one dtype and device whose batch dimensions broadcast; ``mask``, if given,
    broadcastable to ``(..., L, S)`` (see :func:`check_mask`) and on the same device.
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_floating(name, x)
    assert isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor)
    require_rank("query", query, 2, "(..., L, d_k)", at_least=True)
    require_rank("key", key, 2, "(..., S, d_k)", at_least=True)
    require_rank("value", value, 2, "(..., S, d_v)", at_least=True)
    require_same_dtype_and_device(query=query, key=key, value=value)
    if query.size(-1) != key.size(-1):
        raise ValueError(
            "query and key must share the feature size d_k (last dimension): "
            f"query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            "key and value must have the same number of positions S (dimension -2): "
            f"key {fmt_shape(key.shape)}, value {fmt_shape(value.shape)}"
        )
    batch = broadcast_batch(query=query.shape[:-2], key=key.shape[:-2], value=value.shape[:-2])
    if mask is not None:
        check_mask(mask, (*batch, query.size(-2), key.size(-2)))
        assert isinstance(mask, Tensor)
        if mask.device != query.device:
            raise ValueError(
                f"mask must be on the device of query ({query.device}), got {mask.device}"
            )
    return batch


def require_span_per_head(span: Tensor, query: Tensor) -> None:
    """``span`` ``(H,)`` (rank checked) holds one span per head of ``query`` ``(B, H, L, d_k)``, on
    its device."""
    if span.size(0) != query.size(1):
        raise ValueError(
            f"span has {span.size(0)} entries but query has {query.size(1)} heads (query"
            f" {fmt_shape(query.shape)})"
        )
    if span.device != query.device:
        raise ValueError(f"span must be on the device of query ({query.device}), got {span.device}")


def require_floating_dtype(name: str, dtype: object) -> None:
    """``dtype`` is a real floating ``torch.dtype`` (for tables of real values: encodings, biases)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    if not dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating-point dtype (the values are real, not whole), got {dtype}"
        )


def require_real_positions(name: str, positions: object) -> None:
    """``positions`` is a tensor of integer or real floating positions (not bool, not complex)."""
    require_tensor(name, positions)
    assert isinstance(positions, Tensor)
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(
            f"{name} must hold integer or real floating positions, got dtype {positions.dtype}"
        )
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError(
            f"{name} must be finite, got a non-finite value (shape {fmt_shape(positions.shape)})"
        )


def check_probability(name: str, value: object) -> float:
    """``value`` is a real number in ``[0, 1)`` (a dropout probability): Python, numpy or 0-d torch."""
    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 0
        and not value.dtype.is_complex
        and value.dtype != torch.bool
    ):
        value = value.item()
    if not _is_real(value):
        raise TypeError(
            f"{name} must be a probability (a real number in [0, 1)), got {type(value).__name__}"
            f" {value!r}"
        )
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")
    return float(value)
