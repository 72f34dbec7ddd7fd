"""The chapter 6 (inference) checkers accept right answers in several styles and reject
realistic wrong ones with the right diagnosis."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import assert_fails, assert_passes, stub

from attncourse import kv_cache
from attncourse.exercises import check
from attncourse.exercises.ch06_inference import (
    _buggy_top_left,
    _cached_attention_solution,
    _repeat_kv_solution,
    _rolling_update_solution,
)
from attncourse.masks import causal_mask
from attncourse.multihead import mean_pool_kv_heads
from attncourse.training import next_token_loss

# -- inference/cache-bytes -----------------------------------------------------------------

RIGHT_BYTES = 2 * 80 * 8 * 128 * 4096 * 2


@pytest.mark.parametrize(
    "answer", [RIGHT_BYTES, float(RIGHT_BYTES), torch.tensor(RIGHT_BYTES), 1.25 * 2**30]
)
def test_cache_bytes_accepts(answer):
    assert check("inference/cache-bytes", answer).passed


@pytest.mark.parametrize(
    "answer, words",
    [
        (RIGHT_BYTES // 2, "factor 2"),
        (RIGHT_BYTES // 4, "quarter"),
        (RIGHT_BYTES * 8, "64 query heads"),
        (RIGHT_BYTES * 4, "64 query heads and left out"),
        (RIGHT_BYTES * 2, "not 4"),
        (RIGHT_BYTES // 80, "80 layers"),
        (RIGHT_BYTES // 2, "elements, not bytes"),
        (RIGHT_BYTES // 2, "d_k = 64"),
        (2 * 80 * 8 * 8192 * 4096 * 2, "width 8192"),
        (1.25, "GiB"),
        (torch.tensor(1.25), "GiB"),  # any kind of number, not only a Python float
        (1280, "MiB"),
        (1342.18, "in MB"),
        (1.34, "in GB"),  # rounded, still the closest unit
        (1310720, "1,310,720 looks like the size in KiB"),
        (327680, "one token, 320 KiB: multiply by the 4096 positions"),
        (320, "one token in KiB"),
        (4096, "one position in one layer"),
        (2.5, "2.5 bytes is not it"),  # twice the answer in GiB is not taken for a unit
        (123456789, "123,456,789 bytes is not it"),
        (RIGHT_BYTES - 1, "1,342,177,279 bytes is not it"),  # printed whole, not as 1.34218e+09
        (1.342e9, "rounded to 4 significant digits"),  # the right count, rounded
        (1.34e9, "rounded to 3 significant digits"),
        (2 * 80 * 8 * (8192 // 8) * 4096 * 2, "8192 / 8 = 1024"),  # head_dim over the K/V heads
        ("1342177280", "should be a number"),
    ],
)
def test_cache_bytes_rejects(answer, words):
    assert_fails("inference/cache-bytes", answer, words)


# -- inference/repeat-kv ---------------------------------------------------------------------


def repeat_expand(x, g):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, g, s, d).reshape(b, h * g, s, d)


def repeat_index(x, g):
    return x[:, torch.arange(x.size(1) * g) // g]


def repeat_numpy(x, g):
    return torch.from_numpy(np.repeat(x.numpy(), g, axis=1)).to(x.dtype)


def repeat_loop(x, g):
    return torch.cat([x[:, i : i + 1] for i in range(x.size(1)) for _ in range(g)], dim=1)


@pytest.mark.parametrize(
    "answer", [_repeat_kv_solution, repeat_expand, repeat_index, repeat_numpy, repeat_loop]
)
def test_repeat_kv_accepts(answer):
    assert_passes("inference/repeat-kv", answer)


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda x, g: x.repeat(1, g, 1, 1), "0, 1, 2, 0, 1, 2"),
        (lambda x, g: x.repeat_interleave(g, dim=2), "along the sequence"),
        (lambda x, g: x, "should have shape"),
        (
            lambda x, g: (
                x.repeat_interleave(g, dim=1).double() if g == 2 else x.repeat_interleave(g, dim=1)
            ),
            "dtype",
        ),
        (lambda x, g: x.repeat_interleave(g, dim=1).flip(1), "differs from repeating"),
        # the package's function is the one to write
        (lambda x, g: kv_cache.repeat_kv(x, g), "calls attncourse.kv_cache.repeat_kv"),
    ],
)
def test_repeat_kv_rejects(wrong, words):
    assert_fails("inference/repeat-kv", wrong, words)


def test_repeat_kv_is_graded_on_a_torch_without_enable_gqa(monkeypatch):
    """torch 2.1 to 2.4, which the package supports, has no ``enable_gqa``: a right answer still
    passes and a wrong one still fails."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def before_2_5(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        return sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale=scale)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", before_2_5)
    assert_passes("inference/repeat-kv", repeat_index)
    # right at n_rep = 4 and 1, where it is compared with repeating; wrong at 3, the
    # grouped-query case
    assert_fails(
        "inference/repeat-kv",
        lambda x, g: x.repeat_interleave(g, dim=1) if g != 3 else x.repeat(1, g, 1, 1),
        "differs from F.scaled_dot_product_attention",
    )


def test_repeat_kv_stub_is_not_attempted():
    assert check("inference/repeat-kv", stub).status == "not attempted yet"


# -- inference/cached-step -------------------------------------------------------------------


def step_explicit_mask(query, new_key, new_value, past_key, past_value):
    key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
    L, S = query.size(-2), key.size(-2)
    keep = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + (S - L)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=keep), key, value


def step_einsum(query, new_key, new_value, past_key, past_value):
    key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
    scores = torch.einsum("bhld,bhsd->bhls", query, key) / query.size(-1) ** 0.5
    scores = scores.masked_fill(~causal_mask(query.size(-2), key.size(-2)), float("-inf"))
    return torch.einsum("bhls,bhsd->bhld", scores.softmax(-1), value), key, value


def step_attend_before_append(query, new_key, new_value, past_key, past_value):
    out = F.scaled_dot_product_attention(query, past_key, past_value)
    return out, torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)


def step_no_mask(query, new_key, new_value, past_key, past_value):
    key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
    return F.scaled_dot_product_attention(query, key, value), key, value


def step_forgets_to_append(query, new_key, new_value, past_key, past_value):
    return (
        step_explicit_mask(query, new_key, new_value, past_key, past_value)[0],
        past_key,
        past_value,
    )


def step_for_five_cached_positions(query, new_key, new_value, past_key, past_value):
    """The mask written for the 5 cached positions of the hint's example: wrong for 7."""
    key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
    mask = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool).tril(5)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask), key, value


def step_scaled_by(scale_of):
    """A manual step whose scale is ``scale_of(query)`` instead of 1 / sqrt(d_k)."""

    def step(query, new_key, new_value, past_key, past_value):
        key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
        mask = causal_mask(query.size(-2), key.size(-2))
        scale = scale_of(query)
        return F.scaled_dot_product_attention(query, key, value, mask, scale=scale), key, value

    return step


def step_softmax_over_queries(query, new_key, new_value, past_key, past_value):
    key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    scores = scores.masked_fill(~causal_mask(query.size(-2), key.size(-2)), float("-inf"))
    return scores.softmax(dim=-2) @ value, key, value


def step_mask(mask_of):
    """A step that attends under ``mask_of(L, S)`` instead of causal_mask(L, S)."""

    def step(query, new_key, new_value, past_key, past_value):
        key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
        mask = mask_of(query.size(-2), key.size(-2))
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask), key, value

    return step


@pytest.mark.parametrize("answer", [_cached_attention_solution, step_explicit_mask, step_einsum])
def test_cached_step_accepts(answer):
    assert_passes("inference/cached-step", answer)


@pytest.mark.parametrize(
    "wrong, words",
    [
        (_buggy_top_left, "is_causal=True aligns the top left"),
        (step_attend_before_append, "old keys only"),
        (step_no_mask, "each other's future"),
        (step_forgets_to_append, "only the 5 old positions"),
        (lambda *args: _cached_attention_solution(*args)[0], "triple"),
        (step_for_five_cached_positions, "7 cached positions"),
        # (output, value, key): the caches returned in the wrong order
        (
            lambda *args: (lambda out, k, v: (out, v, k))(*_cached_attention_solution(*args)),
            "swapped",
        ),
        # a scale right only for d_k = 4: sqrt(query.dim()) = 2, a scale written out, the batch size
        (step_scaled_by(lambda q: 1 / math.sqrt(q.dim())), "only for d_k = 4"),
        (step_scaled_by(lambda q: 0.5), "only for d_k = 4"),
        (step_scaled_by(lambda q: 1 / q.size(0)), "only for d_k = 4"),
        (step_scaled_by(lambda q: 1.0), "not scaled"),
        (step_softmax_over_queries, "wrong dimension"),
        (step_mask(lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L + 1)), "too high"),
        (step_mask(lambda L, S: ~causal_mask(L, S)), "inverted"),
    ],
)
def test_cached_step_rejects(wrong, words):
    assert_fails("inference/cached-step", wrong, words)


def test_a_float32_mask_for_float64_inputs_is_named_where_torch_misreads_it():
    """An additive mask built with torch.zeros(L, S), float32, for the checker's float64 inputs.
    torch 2.13's CPU SDPA returns wrong numbers for some shapes (here (2, 3, 3, 4) queries over
    8 keys) without an error; where this torch reads it right, the answer is right."""
    additive = step_mask(
        lambda L, S: torch.zeros(L, S).masked_fill(~causal_mask(L, S), float("-inf"))
    )
    q, k, v = (torch.randn(2, 3, n, 4, dtype=torch.float64) for n in (3, 8, 8))
    mask = causal_mask(3, 8)
    misread = not torch.allclose(
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        F.scaled_dot_product_attention(
            q, k, v, attn_mask=torch.zeros(3, 8).masked_fill(~mask, float("-inf"))
        ),
    )
    if misread:
        assert_fails("inference/cached-step", additive, "right on float32 inputs")
    else:
        assert_passes("inference/cached-step", additive)


# -- inference/rolling-buffer ----------------------------------------------------------------


def rolling_in_place(keys, positions, new_key, position):
    slot = position % keys.size(-2)
    keys[:, :, slot] = new_key[:, :, 0]
    positions[slot] = position
    return keys, positions


def rolling_shift(keys, positions, new_key, position):
    """A FIFO that shifts left and writes the last slot: another right answer (positions are tracked)."""
    keys = torch.cat([keys[:, :, 1:], new_key], dim=2)
    positions = torch.cat([positions[1:], torch.tensor([position])])
    return keys, positions


def rolling_stops_when_full(keys, positions, new_key, position):
    if position >= keys.size(-2):
        return keys, positions
    return _rolling_update_solution(keys, positions, new_key, position)


def rolling_forgets_positions(keys, positions, new_key, position):
    keys, _ = _rolling_update_solution(keys, positions, new_key, position)
    positions = positions.clone()
    positions[min(position, keys.size(-2) - 1)] = position
    return keys, positions


def rolling_key_in_wrong_slot(keys, positions, new_key, position):
    window = keys.size(-2)
    keys, positions = keys.clone(), positions.clone()
    keys[:, :, (position + 1) % window] = new_key[:, :, 0]
    positions[position % window] = position
    return keys, positions


def rolling_loop_over_heads_as_batch(keys, positions, new_key, position):
    """Loops over dim 1 (the heads) to index dim 0 (the batch): right when B == h."""
    slot = position % keys.size(-2)
    for b in range(keys.size(1)):
        keys[b, :, slot] = new_key[b, :, 0]
    positions[slot] = position
    return keys, positions


def rolling_first_batch_entry_only(keys, positions, new_key, position):
    """Right for a batch of one: the second batch entry's rows are never written."""
    slot = position % keys.size(-2)
    keys[0, :, slot] = new_key[0, :, 0]
    positions[slot] = position
    return keys, positions


@pytest.mark.parametrize("answer", [_rolling_update_solution, rolling_in_place, rolling_shift])
def test_rolling_buffer_accepts(answer):
    assert_passes("inference/rolling-buffer", answer)


@pytest.mark.parametrize(
    "wrong, words",
    [
        (rolling_stops_when_full, "the first ones"),
        (rolling_forgets_positions, "it should hold the last W"),
        (rolling_key_in_wrong_slot, "its row is another position's key"),
        (lambda k, p, n, q: k, "pair"),
        (lambda k, p, n, q: (k, p.float()), "integer"),
        (rolling_first_batch_entry_only, "another position's key"),
        (rolling_loop_over_heads_as_batch, "another position's key"),
    ],
)
def test_rolling_buffer_rejects(wrong, words):
    assert_fails("inference/rolling-buffer", wrong, words)


# -- inference/mqa-gap -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained():
    """A small model trained a few steps on a repeating pattern, so that its heads differ, and
    validation tokens: the inputs the checker mutation tool runs this exercise's mutants on."""
    from project_tools import tool

    return tool("mutate_checkers")._trained_model_and_tokens()


def _gap(model, tokens, num_kv_heads=1):
    converted = copy.deepcopy(model)
    for block in converted.blocks:
        block.self_attn = mean_pool_kv_heads(block.self_attn, num_kv_heads)
    with torch.no_grad():
        return (
            next_token_loss(converted(tokens), tokens) - next_token_loss(model(tokens), tokens)
        ).item()


def test_mqa_gap_accepts(trained):
    model, tokens = trained
    gap = _gap(model, tokens)
    assert abs(gap) > 0.01  # the experiment measures something
    for answer in (gap, torch.tensor(gap), gap * 1.01):
        assert_passes("inference/mqa-gap", {"model": model, "tokens": tokens, "gap": answer})


def test_mqa_gap_rejects(trained):
    model, tokens = trained
    gap = _gap(model, tokens)
    with torch.no_grad():
        before = next_token_loss(model(tokens), tokens).item()
    assert_fails(
        "inference/mqa-gap",
        {"model": model, "tokens": tokens, "gap": before + gap},
        "loss of the converted model",
    )
    assert_fails("inference/mqa-gap", {"model": model, "tokens": tokens, "gap": -gap}, "wrong sign")
    assert_fails(
        "inference/mqa-gap",
        {"model": model, "tokens": tokens, "gap": _gap(model, tokens, 2)},
        "2 K/V heads",
    )
    assert_fails(
        "inference/mqa-gap",
        {"model": model, "tokens": tokens, "gap": gap * 1.5},
        "differs from the one measured",
    )
    assert_fails("inference/mqa-gap", gap, "Pass a dict")
    assert_fails("inference/mqa-gap", lambda m, t: gap, "not a function")
    assert check("inference/mqa-gap", stub).status == "not attempted yet"
    assert (
        check("inference/mqa-gap", {"model": model, "tokens": tokens, "gap": ...}).status
        == "not attempted yet"
    )
    converted = copy.deepcopy(model)
    converted.blocks[0].self_attn = mean_pool_kv_heads(converted.blocks[0].self_attn, 1)
    assert_fails(
        "inference/mqa-gap",
        {"model": converted, "tokens": tokens, "gap": gap},
        "already been converted",
    )


def test_mqa_gap_names_first_head_selection(trained):
    from attncourse.exercises.ch06_inference import _converted, _loss

    model, tokens = trained
    first = _loss(_converted(model, 1, "first"), tokens) - _loss(model, tokens)
    assert abs(first - _gap(model, tokens)) > 0.01  # the two conversions differ here
    assert_fails(
        "inference/mqa-gap",
        {"model": model, "tokens": tokens, "gap": first},
        "first head of each group",
    )


def test_mqa_gap_of_the_chapters_model_is_measured_on_its_validation_batch():
    """A model of the chapter's vocabulary is measured on the chapter's val_tokens: a gap
    measured on training text (or on part of the batch) is refused, whatever its value."""
    from attncourse import CausalLM
    from attncourse.course.text import CharTokenizer, get_batch, load_text, train_val_split

    text = load_text()
    tokenizer = CharTokenizer(text)
    train_ids, val_ids = train_val_split(tokenizer.encode(text))
    val_tokens = get_batch(val_ids, 64, 32, torch.Generator().manual_seed(1))  # the chapter's
    torch.manual_seed(0)
    model = CausalLM.standard(
        tokenizer.vocab_size, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=64
    ).eval()
    # untrained, the model's conversion costs nothing worth measuring
    answer = {"model": model, "tokens": val_tokens, "gap": _gap(model, val_tokens)}
    assert_fails("inference/mqa-gap", answer, "has not been trained")
    train_tokens = get_batch(train_ids, 64, 32, torch.Generator().manual_seed(0))
    for tokens in (train_tokens, val_tokens[:4]):
        answer = {"model": model, "tokens": tokens, "gap": _gap(model, tokens)}
        assert_fails("inference/mqa-gap", answer, "the chapter's validation batch")


def test_mqa_gap_of_one_converted_block_asks_about_every_block(trained):
    model, tokens = trained
    partly = copy.deepcopy(model)
    partly.blocks[0].self_attn = mean_pool_kv_heads(partly.blocks[0].self_attn, 1)
    with torch.no_grad():
        gap = (
            next_token_loss(partly(tokens), tokens) - next_token_loss(model(tokens), tokens)
        ).item()
    answer = {"model": model, "tokens": tokens, "gap": gap}
    assert_fails("inference/mqa-gap", answer, "convert every block's self_attn")
