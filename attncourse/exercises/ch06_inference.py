"""Chapter 6 exercises: attention at inference (the KV cache, grouped-query attention, a sliding window)."""

from __future__ import annotations

import copy
import functools
import math
from typing import Tuple

import torch
import torch.nn.functional as F

from ..attention import scaled_dot_product_attention
from ..course.text import CharTokenizer, get_batch, load_text, train_val_split
from ..kv_cache import repeat_kv, window_mask_from_positions
from ..masks import causal_mask
from ..multihead import MultiHeadAttention, mean_pool_kv_heads
from ..training import next_token_loss
from ._core import (
    SOFTMAX_DIM,
    Mistake,
    NotAttempted,
    answer_field,
    call,
    check_number,
    diagnose,
    exercise,
    expect_tensor,
    expect_tuple,
    matches,
    number,
    random_tensor,
    reveal,
    several,
    softmax_over,
    stub_field,
)
from ._i18n import _

# -- 1. predict a number: the cache of Llama 2 70B ------------------------------------------

_CACHE_BYTES = "UEdAXFJYQkBLVQ=="
_CACHE_BYTES_MISTAKES = (
    "GlZCWVJfTUpFUVFWTk5BOx0TB0UIB1QGAgMTUgcNBFQVABAYEABJRRgbAU4PChMGUwoUAFQaCwpVFBIGFRsGTlFPXR"
    "AcEQlUP04CARFSJUUABhFOAA4WGhYBSFhUARFPFh0GCxUREE4GAxAfFgsVB1hODQABUhEcFREHTksNEx4cBBVFQk4X"
    "Dh4XAEVTVBYXFwoGUhYEAhxdQkMAB1IHCg4fVAo8BFVPU1NVVFwHF08cAVNdUE1GTkxPQ0ZTWEFFRlZKQVdeU0dSR0"
    "FbV1tGQENHW1RWOgsOAVIaFkEVVB8WDgcGFhdBGxJOFwcQUhILEgMRHFlPDB0GRQ0REhpDAAAGUwcOABxOFwcQUhUE"
    "AgAbHENdVRQcF0E/VA8NC1UkUwQPEFQaCwpVQFMHGAARHUMfEABTAA0RGQsNG1tQX0VDRURZUFhBQ0tXVURWVENNLB"
    "0GRRQHEQpDGx0XU1NVVAUbBh0MUhsAABAHVUMIBx0GFQQQWR8WCgcLUwQVABEAFwYaHFMGABccCxBPGhwfHEEAHAtD"
    "V1U5XDNBHBEPBxxbUF9FQ0FHWFtYRUtCV1FWTk5BNhoHUxASERBOFwcQUkVRQQUBCxEWVRoWBAUHVA8NC1UeFgMVVB"
    "sbF08UUhUEAgAbHENdVVo4RQAaEE41Q1UdAUUVHBFOARYBFwBMW1QXDwAHEFIHDQRUTE4oQCNSGwAAEAdCQyRVEx0B"
    "QSJYTlFPFwsHABJUEQ8AB1tQX0VDRkJWV1xARkZTUVZOTkE7HRMHRQgHVBoUBhYXUxEJEVQPDRwCFwFfQRYSAgwOAU"
    "NFRRUVHwsQT0dSERwVEQdCQwEaBlNRQVwbHEMWGgdTBg4BGhoGC1U5UwQPEFQ4QxsCGxAASFpWQkNNREREUlZGRVhB"
    "VVVQJw0AAFQHEE8aHBZFDRUNCxFIBlIQBAIcEVRDAgAeBwwRGA1OARZVBhsAQUxETg8ODBcBFk9WWE5BV0BKSlxSQE"
    "FXUV9XSFNHOBsBThYcEBZTEQkRVAMMCxAeUxIIEAAGQ1dES0FFEREGTihAI1IbAAAQT04GDhYaUy5OIlQGBg4RUhoW"
    "QRArBUNSVUpCXFNUW05VW1VPU1RTTFQZCgsQXFFJQVZFXlRcQkZCXVNAREBTTU9SUTEJFQBOChxVFxoCCQBUGgoCEA"
    "FTEQkRVA8NHAIXAV9BFh0aEE8cHAARBBUQTgwJVRAKEQQHS04iTxcUHwoAAEVYQwoZFx4ADwBUGgIEEAFTV0EWDRoG"
    "HFVaQlNBFh0aEEZbUF9FQ0VEWVBYQUNLV1VEWl5TTU9SUTwOAVQaDAAeUhc6ClRJTlteTEBTSkFMVFNDXkVAR0lBAB"
    "wLQxgcFgcNQRAdGAoLEBZTBxhUAAYGT01SOEo3VBwLAgsGSFMBPh9UBxBPARoWRRYdEBoLTxEbBQwFERBOARZVBhsA"
    "QUJAThIaEAAKRQkRFQoQQ1VDQV1NVBUAB08BGhZFWVQ/QTVPHRcSARJUBwYCHRBSBw0AAFQZCgsBGl1HTVRWXVFYQ0"
    "pDR1tUVjoLDgFSGhZBABwLQwwUERsAQRsSTgwBEFIHCgoRGkJDXEdCUy4INk5ODhoZBhoVDQ1UDBpPARoWRVVETVhD"
    "HxoBGhEIGxodQwATUgcNBFQHCxIaEBwQAE9WWE5BW0VLRUdbVFY6Cw4BUhoWQQAcC0MMFBEbAEEbEk4MARBSAwoSHQ"
    "AHDAFVGx1FDhoRTg8ODBcBRUlGVBZDV1UKU1RTTFQWQ11VEAoRBAddVEMCAB4HDBEYDU4BFlUGGwBBTERODw4MFwEW"
    "QRUaCkMbHRdTUVFNQk4TAAYbBwwOGgdAQUNVUEBXUVZOTkE7HRMHRQgHVBoLClUREgYJEVQBBU8aHBZFFRsfCw1PHB"
    "xTLgg2Tk4EBgMXUxEJEVQZCwAZF1MWBAUBCw0MEFUASUFARFdVTwUdAAwVHRsAEENVGx1FAw0ACxBBVw8="
)
_CACHE_BYTES_SOLUTION = (
    "U1QMTltfVR4SHAQGB04bT01SOEo3VBwLAgsGUgtFUEZMTksLKhlTWEFMRVdRT1pSRVFIVAxOV19MRFMVDgcdGgoAGwFTHUFGVAwa"
    "GxABeVhBRVhdV11ZQ0RSTUZMXkMNDAYWFkFJVF9NXUBSNAwjVAQLEU8GFwIQBBoXC09PGgBTVlNEVCUKLVUCFhdBABsFBgFbeCQM"
    "FRxUAxYDARteDQQVEE4CGwEXHREIGxpOS1lBUjhKN1QcCwILBltTDBVUAwEWAxFSEQBBTFQaCgIQAVMEElQZGwAHWVJCVUEzHSxD"
    "HxAAU1FRTUJDFwAeFx1FEhEFGwYBFhdd"
)


@exercise(
    "inference/cache-bytes",
    title="Predict the KV cache of Llama 2 70B",
    hint=(
        """
            Every layer caches one key vector and one value vector per K/V head and per
            position. Multiply those counts by the bytes of one number; with grouped-query
            attention, count the K/V heads, not the query heads.
        """,
        """
            Every layer caches one key and one value vector per K/V head per position:
            2 (K and V) x layers x kv_heads x d_k x S x bytes per element, with S the positions
            cached. Llama 2 70B has 80 layers, 64 query heads but only 8 K/V heads (grouped-query
            attention), d_k = 8192 / 64. bfloat16 takes 2 bytes.
        """,
    ),
    solution=_CACHE_BYTES_SOLUTION,
)
def _check_cache_bytes(answer) -> str:
    value = number(answer, _("number of bytes"))  # a Python, numpy or torch number
    unit = _unit_of(value, float(reveal(_CACHE_BYTES)))
    if unit:
        raise Mistake(
            _(
                "{answer:,.10g} looks like the size in {unit}: give it in bytes (an integer such as "
                "123456789)."
            ).format(answer=value, unit=unit)
        )
    return check_number(
        answer,
        _CACHE_BYTES,
        _CACHE_BYTES_MISTAKES,
        what=_("number of bytes"),
        mistake_rel_tol=1e-6,
        right=(
            _(
                "Right: 1,342,177,280 bytes = 1.25 GiB for one 4096-token sequence (multi-head "
                "attention would need 8 times as much)."
            )
        ),
        otherwise=(
            _(
                "{value:,.0f} bytes is not it. Count 2 x layers x kv_heads x d_k x S x bytes "
                "per element."
            )
        ),
    )


#: the units a size in bytes may be given in by mistake, and their size in bytes
_BYTE_UNITS = (
    (2**30, "GiB"),
    (10**9, "GB"),
    (2**20, "MiB"),
    (10**6, "MB"),
    (2**10, "KiB"),
    (10**3, "kB"),
)


def _unit_of(value: float, size: float) -> str:
    """The unit in which ``value`` is ``size`` bytes, within 5 % (1.25 GiB, 1.34 GB, 1280 MiB,
    with the closest unit where two fit), else ``""``."""
    if value <= 0 or value >= size / 2:
        return ""
    error, unit = min((abs(value * scale - size) / size, unit) for scale, unit in _BYTE_UNITS)
    return unit if error <= 0.05 else ""


# -- 2. repeat the K/V heads -----------------------------------------------------------------


def _repeat_kv_solution(x, n_rep):
    # (B, kv_heads, S, d_k) -> (B, kv_heads * n_rep, S, d_k): K/V head j serves query heads j*n_rep ...
    return x.repeat_interleave(n_rep, dim=1)


def _grouped_query_attention(query, key, value):
    """torch's grouped-query attention, ``enable_gqa=True`` (torch >= 2.5); an older torch has no
    such argument, and there query head ``i`` attends with K/V head ``i // n_rep``, by definition."""
    try:
        return F.scaled_dot_product_attention(query, key, value, enable_gqa=True)
    except TypeError:  # torch < 2.5
        group = torch.arange(query.size(1)) // (query.size(1) // key.size(1))
        return F.scaled_dot_product_attention(
            query, key.index_select(1, group), value.index_select(1, group)
        )


@exercise(
    "inference/repeat-kv",
    title="Share each K/V head among a group of query heads",
    hint=(
        """
            n_rep is the size of a group, not the number of groups. Which K/V head does
            query head i read? Write the order of the output's heads for n_rep = 2 and two
            K/V heads, then find the torch function that produces that order.
        """,
        """
            n_rep is the size of a group (h/g query heads per K/V head), not the number of groups.
            Query head i reads K/V head i // n_rep. So the output's heads are K/V head 0 n_rep
            times, then K/V head 1 n_rep times, and so on: repeat each head in place
            (x.repeat_interleave(n_rep, dim=1)), not the whole block.
        """,
    ),
    solution=_repeat_kv_solution,
    name="my_repeat_kv",
    forbids=(repeat_kv,),
)
def _check_repeat_kv(fn) -> str:
    x = random_tensor(2, 3, 5, 4, seed=60)
    expected = repeat_kv(x, 4)
    out = call(fn, x.clone(), 4)
    if isinstance(out, torch.Tensor) and out.shape == (2, 3, 20, 4):
        raise Mistake(
            _(
                "Your output repeats along the sequence (dim 2): repeat along the head dimension, "
                "dim=1, to get (B, kv_heads * n_rep, S, d_k)."
            )
        )
    expect_tensor(out, (2, 12, 5, 4), _("For x (2, 3, 5, 4) and n_rep=4 the output"))
    if not matches(out, expected, atol=0, rtol=0):
        raise Mistake(
            diagnose(
                out,
                {
                    (
                        _(
                            "Your heads come out in the order 0, 1, 2, 0, 1, 2, ... (x.repeat tiles the whole "
                            "block): query head i must read K/V head i // n_rep, so repeat each head in place "
                            "(repeat_interleave)."
                        )
                    ): x.repeat(1, 4, 1, 1),
                },
                default=_("Your output differs from repeating each K/V head n_rep times in place."),
                atol=0,
            )
        )
    if not matches(call(fn, x.clone(), 1), x, atol=0, rtol=0):
        raise Mistake(_("With n_rep=1 (multi-head attention) the output must equal the input."))
    y = x.float()
    if call(fn, y, 2).dtype != torch.float32:
        raise Mistake(_("Keep the input's dtype."))
    # the test that matters: attention with the repeated heads equals torch's grouped-query attention
    q, k, v = (
        random_tensor(2, 6, 5, 4, seed=61),
        random_tensor(2, 2, 5, 4, seed=62),
        random_tensor(2, 2, 5, 4, seed=63),
    )
    mine = scaled_dot_product_attention(q, call(fn, k, 3), call(fn, v, 3))[0]
    if not matches(mine, _grouped_query_attention(q, k, v)):
        raise Mistake(
            _(
                "Attention over your repeated heads differs from F.scaled_dot_product_attention(..., "
                "enable_gqa=True)."
            )
        )
    return _(
        "Right: attention over your repeated K/V heads equals torch's grouped-query "
        "attention (enable_gqa=True)."
    )


# -- 3. find the bug: one cached decoding step ------------------------------------------------


def _cached_attention_solution(query, new_key, new_value, past_key, past_value):
    # append first: the new positions must see themselves
    key = torch.cat([past_key, new_key], dim=-2)  # (..., S, d_k) with S = S_past + L
    value = torch.cat([past_value, new_value], dim=-2)
    # bottom right: the last query sees every key
    mask = causal_mask(query.size(-2), key.size(-2), device=query.device)
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return output, key, value


def _buggy_top_left(query, new_key, new_value, past_key, past_value):
    key = torch.cat([past_key, new_key], dim=-2)
    value = torch.cat([past_value, new_value], dim=-2)
    return F.scaled_dot_product_attention(query, key, value, is_causal=True), key, value


def _own_key_hidden(length: int, size: int) -> torch.Tensor:
    """The causal mask one diagonal too low: each new query misses its own key (row 0 of
    several queries keeps the cache)."""
    mask = torch.ones(length, size, dtype=torch.bool).tril(size - length - 1)
    mask[:, 0] = True  # a row with no key at all would be NaN: every query keeps the first key
    return mask


def _cached_step_mistakes(case: str, inputs: tuple, key: torch.Tensor, value: torch.Tensor):
    """The outputs of the known mistakes of a cached step on ``inputs`` (query, new key, new
    value, past key, past value), with ``key`` and ``value`` the right appended caches:
    message -> output (``None`` where the mistake gives the right output here)."""
    q, k, v, past_k, past_v = inputs
    length, d_k = q.size(-2), q.size(-1)
    old_only = scaled_dot_product_attention(q, past_k, past_v)[0]
    mask = causal_mask(length, key.size(-2))
    with softmax_over(-2):  # the package's attention calls torch.softmax, which this moves
        over_queries = scaled_dot_product_attention(q, key, value, mask)[0]
    return {
        (
            _(
                "{case}: your scores are not scaled: divide Q K^T by sqrt(d_k), the size of "
                "the query's last dimension (here {d_k})."
            ).format(case=case, d_k=d_k)
        ): scaled_dot_product_attention(q, key, value, mask, scale=1.0)[0],
        (
            _(
                "{case}: your scale is 1/2, which is 1/sqrt(d_k) only for d_k = 4: take d_k from "
                "the query's last dimension, query.size(-1) (here {d_k})."
            ).format(case=case, d_k=d_k)
        ): (scaled_dot_product_attention(q, key, value, mask, scale=0.5)[0] if d_k != 4 else None),
        _("{case}: {message}").format(case=case, message=_(SOFTMAX_DIM)): over_queries,
        (
            _(
                "{case}: your mask lets each new query see the key just after its own position "
                "(a diagonal one too high, such as tril(S - L + 1)): query t sees the keys up to "
                "S - L + t, included."
            ).format(case=case)
        ): (
            scaled_dot_product_attention(
                q, key, value, torch.ones_like(mask).tril(key.size(-2) - length + 1)
            )[0]
            if length > 1
            else None
        ),
        (
            _(
                "{case}: your mask is inverted: in causal_mask and in the boolean mask of "
                "F.scaled_dot_product_attention, True means the query may attend to the key "
                "(the last query, which should see every key, sees none: NaN)."
            ).format(case=case)
        ): F.scaled_dot_product_attention(q, key, value, attn_mask=~mask),
        (
            _(
                "{case}: the output is still the buggy one. is_causal=True aligns the top left "
                "corner, so the first new query sees only the first cached key."
            ).format(case=case)
        ): _buggy_top_left(q, k, v, past_k, past_v)[0],
        (
            _(
                "{case}: the queries attend to the old keys only: attend over the appended key and "
                "value (past and new rows), not over the past ones."
            ).format(case=case)
        ): (old_only),
        (
            _(
                "{case}: your mask hides each new query's own key (a diagonal one too low, such as "
                "tril(S - L - 1)): query t sees the keys up to its own position, S - L + t, included."
            ).format(case=case)
        ): scaled_dot_product_attention(q, key, value, _own_key_hidden(length, key.size(-2)))[0],
        (
            _(
                "{case}: the new queries see each other's future: with several new positions, query "
                "t may see keys up to its own position only (causal_mask(L, S))."
            ).format(case=case)
        ): scaled_dot_product_attention(q, key, value)[0],
    }


def _right_in_float32(fn, inputs, expected) -> bool:
    """Whether ``fn`` gives ``expected`` on float32 copies of the float64 ``inputs`` (within
    float32's precision): then its error is a dtype it chose, not its method."""
    try:
        result = call(fn, *(t.float() for t in inputs))
    except Mistake:
        return False
    output = result[0] if isinstance(result, (tuple, list)) and result else result
    return matches(output, expected, atol=1e-4, rtol=1e-3)


@exercise(
    "inference/cached-step",
    title="Find the bug in a cached attention step",
    hint=(
        """
            Run the buggy function with one new query and a short cache, and look at which
            keys the query may attend to. Which key should the last query be aligned with?
        """,
        """
            Run the buggy function with one new query and a cache of 5 positions and look at which
            keys it may attend to. F.scaled_dot_product_attention's is_causal=True aligns the first
            query with the first key (top left): with L = 1 query and S = 6 keys, which keys does
            that leave? The cache needs the bottom-right alignment of causal_mask(L, S).
        """,
    ),
    solution=_cached_attention_solution,
    name="cached_attention",
)
def _check_cached_step(fn) -> str:
    # several new queries first: there the known mistakes give different outputs; then one, and
    # another cache length (a mask written for 5 cached positions is not the mask); a head size
    # d_k of its own in each case (a scale of 1/2 is 1/sqrt(d_k) only for d_k = 4)
    for past, length, d_k in ((5, 3, 4), (5, 1, 8), (7, 2, 6)):
        past_k = random_tensor(2, 3, past, d_k, seed=64 + 10 * (past - 5))  # 64, 65 and 84, 85
        past_v = random_tensor(2, 3, past, d_k, seed=65 + 10 * (past - 5))
        q, k, v = (
            random_tensor(2, 3, length, d_k, seed=66 + length),
            random_tensor(2, 3, length, d_k, seed=68 + length),
            random_tensor(2, 3, length, d_k, seed=70 + length),
        )
        expected, key, value = _cached_attention_solution(q, k, v, past_k, past_v)
        output, new_key, new_value = expect_tuple(
            call(fn, q, k, v, past_k.clone(), past_v.clone()),
            3,
            _("Return a triple (output, key, value), as the buggy function does; got {type_name}."),
        )
        if length == 1:
            case = _("With 1 new query and {past} cached positions").format(past=past)
        else:
            case = _("With {length} new queries and {past} cached positions").format(
                length=length, past=past
            )
        if isinstance(new_key, torch.Tensor) and new_key.shape == past_k.shape:
            raise Mistake(
                _(
                    "{case}: the returned key holds only the {past} old positions: append the new "
                    "keys to the cache."
                ).format(case=case, past=past)
            )
        expect_tensor(new_key, key.shape, _("{case}: the returned key").format(case=case))
        if matches(new_key, value) and matches(new_value, key):
            raise Mistake(
                _(
                    "{case}: the returned key and value are swapped: return (output, key, "
                    "value), the key cache second."
                ).format(case=case)
            )
        if not (matches(new_key, key) and matches(new_value, value)):
            raise Mistake(
                _(
                    "{case}: the returned key/value must be the cached rows followed by the new ones "
                    "(torch.cat along dim=-2)."
                ).format(case=case)
            )
        expect_tensor(output, expected.shape, _("{case}: the output").format(case=case))
        if matches(output, expected):
            continue
        default = _(
            "{case}: your output differs from attention over the cached and new keys under "
            "causal_mask(L, S)."
        ).format(case=case)
        message = diagnose(
            output,
            _cached_step_mistakes(case, (q, k, v, past_k, past_v), key, value),
            default=default,
        )
        if message == default and _right_in_float32(fn, (q, k, v, past_k, past_v), expected):
            message = _(
                "{case}: your answer is right on float32 inputs but not on these float64 ones. A "
                "tensor you create (torch.zeros(L, S), torch.full(...)) is float32 unless you give "
                "it dtype=query.dtype, and torch 2.13's CPU scaled_dot_product_attention returns "
                "wrong numbers, without an error, for a float32 attn_mask with float64 inputs of "
                "some shapes."
            ).format(case=case)
        raise Mistake(message)
    return _(
        "Right: append, then attend with the bottom-right causal mask; one query sees the "
        "whole cache, a chunk stays causal."
    )


# -- 4. the rolling buffer -------------------------------------------------------------------


def _rolling_update_solution(keys, positions, new_key, position):
    window = keys.size(-2)
    slot = position % window  # position p lives in slot p % W, overwriting position p - W
    keys = keys.clone()
    positions = positions.clone()
    keys[..., slot, :] = new_key[..., 0, :]
    positions[slot] = position
    return keys, positions


def _run_buffer(fn, window: int, steps: int, seed: int):
    """Feed ``steps`` keys one by one to the learner's update; return (keys, positions, all keys)."""
    # three batch entries and two heads: a loop over the wrong one of the two leaves one out
    stream = random_tensor(3, 2, steps, 3, seed=seed)
    keys = torch.zeros(3, 2, window, 3, dtype=torch.float64)
    positions = torch.full((window,), -1, dtype=torch.long)
    for p in range(steps):
        keys, positions = expect_tuple(
            call(fn, keys, positions, stream[:, :, p : p + 1].clone(), p),
            2,
            _("Return a pair (keys, positions); got {type_name}."),
        )
        expect_tensor(
            keys,
            (3, 2, window, 3),
            _("After position {p}, the buffer (window {window})").format(p=p, window=window),
        )
        expect_tensor(positions, (window,), _("After position {p}, positions").format(p=p))
        if (
            positions.dtype.is_floating_point
            or positions.dtype.is_complex
            or positions.dtype == torch.bool
        ):
            raise Mistake(
                _(
                    "After position {p}, positions is {positions_dtype}: it must stay an integer tensor "
                    "(slot -> position held, -1 = empty)."
                ).format(p=p, positions_dtype=positions.dtype)
            )
        if keys.dtype != stream.dtype:
            raise Mistake(
                _(
                    "After position {p}, the buffer is {keys_dtype}, the keys were {stream_dtype}: keep "
                    "the input's dtype."
                ).format(p=p, keys_dtype=keys.dtype, stream_dtype=stream.dtype)
            )
    return keys, positions, stream


@exercise(
    "inference/rolling-buffer",
    title="A rolling-buffer KV cache",
    hint=(
        """
            The buffer has a fixed number of slots, reused in turn: which slot does
            position p go to, and which position does it overwrite? The rows are then no
            longer in time order, so the mask must come from the positions recorded.
        """,
        """
            The buffer has W = keys.size(-2) slots. Position p goes to slot p % W; once p >= W it
            overwrites position p - W, which has just left the window. Record which position each
            slot holds in positions (-1 = empty): the rows are no longer in time order, and the
            attention mask is computed from positions.
        """,
    ),
    solution=_rolling_update_solution,
    name="rolling_update",
    keep_dtype=False,  # the checker checks the dtypes itself, to name integer positions turned floating
)
def _check_rolling_buffer(fn) -> str:
    for window, steps in ((4, 11), (3, 2), (1, 5)):
        keys, positions, stream = _run_buffer(fn, window, steps, seed=80 + window)
        held = sorted(int(p) for p in positions if p >= 0)
        expected = list(range(max(0, steps - window), steps))
        case = _("With W = {window} after {steps} positions").format(window=window, steps=steps)
        if held != expected:
            last = [stream[:, :, p] for p in expected]
            rows_are_last = all(
                any(matches(keys[:, :, slot], row, atol=0, rtol=0) for slot in range(window))
                for row in last
            )
            if held == list(range(min(window, steps))) and rows_are_last and steps > window:
                raise Mistake(
                    _(
                        "{case}: the buffer's rows are the last W keys, but positions lists {positions}, the "
                        "slots: record the position p of the key a slot holds, not the slot p % W."
                    ).format(case=case, positions=positions.tolist())
                )
            if held == list(range(min(window, steps))):
                raise Mistake(
                    _(
                        "{case}: the buffer still holds positions {held}, the first ones: once it is full, "
                        "overwrite the oldest (slot p % W)."
                    ).format(case=case, held=held)
                )
            if len(set(held)) != len(held):
                raise Mistake(
                    _("{case}: positions lists {positions}: a position appears twice.").format(
                        case=case, positions=positions.tolist()
                    )
                )
            raise Mistake(
                _(
                    "{case}: the buffer holds positions {held}; it should hold the last W, {expected}."
                ).format(case=case, held=held, expected=expected)
            )
        for slot, p in enumerate(positions.tolist()):
            if p >= 0 and not matches(keys[:, :, slot], stream[:, :, p], atol=0, rtol=0):
                raise Mistake(
                    _(
                        "{case}: slot {slot} says it holds position {p} but its row is another position's "
                        "key: write the key where you record its position."
                    ).format(case=case, slot=slot, p=p)
                )
    # the buffer in use: the newest query over the buffer equals sliding-window attention
    keys, positions, stream = _run_buffer(fn, 4, 9, seed=90)
    query = random_tensor(3, 2, 1, 3, seed=91)
    mask = window_mask_from_positions(torch.tensor([8]), positions, 4)
    got = scaled_dot_product_attention(query, keys, keys, mask)[0]
    want = scaled_dot_product_attention(query, stream[:, :, 5:9], stream[:, :, 5:9])[0]
    if not matches(got, want):
        raise Mistake(_("Attention over your buffer differs from attention over the last W keys."))
    return _(
        "Right: the buffer holds the last W positions, each row with its position; attention "
        "over it is sliding-window attention."
    )


# -- 5. experiment: what does mean-pooling to one K/V head cost? -----------------------------


def _converted(model, num_kv_heads: int, how: str = "mean"):
    converted = copy.deepcopy(model)
    for block in converted.blocks:
        layer = block.self_attn
        if how == "mean":
            block.self_attn = mean_pool_kv_heads(layer, num_kv_heads)
        else:  # keep the first head of each group (a conversion Ainslie et al. compare with)
            group, d = layer.num_heads // num_kv_heads, layer.head_dim
            first = copy.deepcopy(layer)
            for name in ("k_proj", "v_proj"):
                w = getattr(layer, name).weight.detach().view(num_kv_heads, group, d, -1)[:, 0]
                setattr(
                    first,
                    name,
                    torch.nn.Linear(
                        layer.embed_dim,
                        num_kv_heads * d,
                        bias=getattr(layer, name).bias is not None,
                    ),
                )
                getattr(first, name).weight.data.copy_(w.reshape(num_kv_heads * d, -1))
                if getattr(layer, name).bias is not None:
                    getattr(first, name).bias.data.copy_(
                        getattr(layer, name)
                        .bias.detach()
                        .view(num_kv_heads, group, d)[:, 0]
                        .reshape(-1)
                    )
            first.num_kv_heads = num_kv_heads
            first.to(layer.q_proj.weight.dtype)
            block.self_attn = first
    return converted.eval()


@functools.lru_cache(maxsize=1)
def _chapter_data() -> Tuple[int, torch.Tensor]:
    """The chapter's vocabulary size (its model's output width) and its ``val_tokens``: 32
    sequences of 64 characters of the validation split, from one reading of the text."""
    text = load_text()
    tokenizer = CharTokenizer(text)
    _, val_ids = train_val_split(tokenizer.encode(text))
    return tokenizer.vocab_size, get_batch(val_ids, 64, 32, torch.Generator().manual_seed(1))


@torch.no_grad()
def _loss(model, tokens) -> float:
    return float(next_token_loss(model.eval()(tokens), tokens))


def _mqa_gap_solution(model, val_tokens):
    # then answer = measure_gap(model, val_tokens): the dict is what check() takes
    mqa = copy.deepcopy(model)  # convert a copy: the checker needs the original
    for block in mqa.blocks:
        block.self_attn = mean_pool_kv_heads(block.self_attn, 1)  # one K/V head per layer
    with torch.no_grad():
        gap = (
            next_token_loss(mqa.eval()(val_tokens), val_tokens)
            - next_token_loss(model.eval()(val_tokens), val_tokens)
        ).item()
    return {"model": model, "tokens": val_tokens, "gap": gap}


@exercise(
    "inference/mqa-gap",
    title="Measure what mean-pooling to one K/V head costs",
    hint=(
        """
            Convert a copy of the trained model to a single K/V head per layer, with the
            chapter's conversion, and compare its validation loss with the original's,
            both in eval mode.
        """,
        """
            Convert a copy (copy.deepcopy) of the trained model: replace every block's self_attn by
            mean_pool_kv_heads(block.self_attn, 1). Then gap = loss of the converted copy minus
            loss of the original, both with next_token_loss on the same validation tokens, in
            eval() mode. Pass {"model": the original model, "tokens": those tokens, "gap": your gap}.
        """,
    ),
    solution=_mqa_gap_solution,
    name="measure_gap",
    answer_is_function=False,  # the answer is the measured gap in a dict; the solution computes it
)
def _check_mqa_gap(answer) -> str:
    # the measurement is a number in a dict; a function is only accepted as the untouched stub
    if callable(answer):
        try:
            call(answer)
        except Mistake:
            pass
        raise Mistake(
            _('Pass a dict {"model": model, "tokens": val_tokens, "gap": gap}, not a function.')
        )
    if not isinstance(answer, dict) or not {"model", "tokens", "gap"} <= set(answer):
        raise Mistake(_('Pass a dict {"model": model, "tokens": val_tokens, "gap": gap}.'))
    model, tokens = answer["model"], answer["tokens"]
    if answer["gap"] is None or answer["gap"] is Ellipsis:
        raise NotAttempted(stub_field("gap"))
    gap = number(answer["gap"], answer_field("gap"))
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(
        isinstance(getattr(b, "self_attn", None), MultiHeadAttention) for b in blocks
    ):
        raise Mistake(
            _(
                "model should be the chapter's CausalLM, whose blocks have a MultiHeadAttention "
                "self_attn."
            )
        )
    if any(b.self_attn.num_kv_heads != b.self_attn.num_heads for b in blocks):
        raise Mistake(
            _(
                "Your model has already been converted (num_kv_heads < num_heads): convert a copy "
                "(copy.deepcopy) and pass the original."
            )
        )
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise Mistake(_("tokens should be the (B, L) validation tokens you measured on."))
    vocabulary, chapter = _chapter_data()
    width = getattr(getattr(model, "head", None), "out_features", None)
    # the chapter's model (its character vocabulary) is measured on the chapter's held-out batch
    if width == vocabulary and not (
        tokens.shape == chapter.shape and torch.equal(tokens.cpu(), chapter)
    ):
        raise Mistake(
            _(
                "tokens should be the chapter's validation batch, val_tokens (32 sequences of 64 "
                "characters of the validation split): the gap is measured on text the model did "
                "not train on."
            )
        )
    before = _loss(model, tokens)
    # and after its training: untrained, its heads are alike and pooling them costs nothing
    if width == vocabulary and before > 0.7 * math.log(width):
        raise Mistake(
            _(
                "Your model's loss on these tokens is {loss:.3f} nats, close to ln V = {chance:.3f}, "
                "the loss of a uniform guess: it has not been trained. Train it (the chapter's "
                "training cell), then measure the gap on the trained model."
            ).format(loss=before, chance=math.log(width))
        )
    true_gap = _loss(_converted(model, 1), tokens) - before
    heads = {b.self_attn.num_heads for b in blocks}
    known = {
        _(
            "You gave the loss of the converted model; the gap is that loss minus the original "
            "model's."
        ): (before + true_gap),
        _(
            "Your gap has the wrong sign: converted minus original (a loss that went up is a "
            "positive gap)."
        ): (-true_gap),
        # defined only where every layer's heads split into 2 groups
        _(
            "That is the gap of 2 K/V heads, not 1: pool every layer down to num_kv_heads=1 "
            "(multi-query attention)."
        ): (
            _loss(_converted(model, 2), tokens) - before if all(h % 2 == 0 for h in heads) else None
        ),
        (
            _(
                "That is the gap of keeping the first head of each group; the exercise asks for the "
                "mean of the group's heads."
            )
        ): (_loss(_converted(model, 1, "first"), tokens) - before),
    }
    # stated tolerance: 2 % or 0.001 nats, and always closer to the right gap than to a known mistake's
    distances = [abs(value - true_gap) for value in known.values() if value is not None]
    tolerance = min([max(0.02 * abs(true_gap), 1e-3)] + [d / 2 for d in distances if d > 0])
    if abs(gap - true_gap) <= tolerance:
        return _(
            "Right: mean-pooling every layer to one K/V head costs {true_gap:.3f} nats on these "
            "tokens (checked within 2 %)."
        ).format(true_gap=true_gap)
    found = [
        message
        for message, value in known.items()
        if value is not None
        and abs(gap - value) <= min(max(0.02 * abs(value), 1e-3), abs(value - true_gap) / 2)
    ]
    if found:
        raise Mistake(several(found))
    raise Mistake(
        _(
            "Your gap {gap:.4f} differs from the one measured here by more than 2 %. Did you "
            "convert every block's self_attn, and measure both models on the same tokens?"
        ).format(gap=gap)
    )
