"""Hostile input to the newer library modules (kv_cache, kernels.tiles, efficient, sampling,
flex, kernels.compile, benchmarks.gpu_report), after a helper attacked them.

Each row of the table once failed deep inside torch or Python (ZeroDivisionError, IndexError,
AttributeError, KeyError), blamed the wrong thing, or was accepted silently; now each is refused
with the argument named. Below the table: the inputs that gave a wrong answer without a word,
each checked against an independent computation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attncourse import flex
from attncourse.benchmarks import gpu_report
from attncourse.efficient import online_softmax_update
from attncourse.kernels import compile as compile_results
from attncourse.kernels.tiles import (
    key_block_range,
    num_blocks,
    span_tile_maps,
    span_windows,
    tile_map,
)
from attncourse.kv_cache import (
    KVCache,
    kv_cache_bytes,
    sliding_window_mask,
    window_mask_from_positions,
)
from attncourse.sampling import generate

FLEX, WHY_NOT = flex.flex_available()


class Vocabulary300(nn.Module):
    """A model of 300 tokens whose next token is always 280, whatever it reads."""

    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, 300)
        logits[..., 280] = 1.0
        return logits


def update_twice(first_value_width: int, second_value_width: int):
    cache = KVCache()
    cache.update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, first_value_width))
    cache.update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, second_value_width))


def qkv(batch=1, heads=2, length=6, dim=4):
    return [torch.randn(batch, heads, length, dim) for _ in range(3)]


def flex_only(case):
    return pytest.param(*case, marks=pytest.mark.skipif(not FLEX, reason=WHY_NOT))


BAD = [
    # kv_cache
    (
        lambda: KVCache().update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4).double()),
        TypeError,
        "must have the same dtype",
    ),
    (lambda: update_twice(4, 6), ValueError, "value (1, 1, 1, 6)"),
    (lambda: KVCache().attended_length(-5), ValueError, "new"),
    (lambda: KVCache().attended_length(1.5), TypeError, "new"),
    # kernels.tiles
    (lambda: num_blocks(5, 0), ValueError, "block"),
    (lambda: num_blocks(-5, 2), ValueError, "length"),
    (lambda: tile_map(5, 5, 0, 2), ValueError, "block_m"),
    (lambda: tile_map(-4, 5, 2, 2), ValueError, "query_len"),
    (lambda: key_block_range(0, 2, 2, 8, 8, causal="no"), TypeError, "causal"),
    (lambda: span_windows([1.0, 2.0], 2.0, 8), TypeError, "span"),
    (lambda: span_windows(torch.zeros(0), 2.0, 8), ValueError, "span"),
    (lambda: span_tile_maps(torch.tensor([float("nan")]), 2.0, 8, 4, 4), ValueError, "span"),
    (lambda: span_tile_maps(torch.tensor([-1.0]), 2.0, 8, 4, 4), ValueError, "span"),
    # efficient
    (
        lambda: online_softmax_update(torch.zeros(3), torch.zeros(3), torch.zeros(3, 0)),
        ValueError,
        "scores",
    ),
    (
        lambda: online_softmax_update(torch.zeros(3), torch.zeros(3).double(), torch.zeros(3, 2)),
        TypeError,
        "dtype",
    ),
    # sampling
    (
        lambda: generate(Vocabulary300(), torch.zeros(1, 2, dtype=torch.uint8), 1),
        TypeError,
        "uint8",
    ),
    (
        lambda: generate(Vocabulary300(), torch.zeros(1, 2, dtype=torch.long), 7, use_cache="no"),
        TypeError,
        "use_cache",
    ),
    (
        lambda: generate(Vocabulary300(), torch.zeros(1, 2, dtype=torch.long), 1, generator=0),
        TypeError,
        "generator",
    ),
    # kernels.compile (the committed compile results)
    (
        lambda: compile_results.compile_table(dtype=torch.float16),
        ValueError,
        "['bfloat16', 'float16', 'float32']",
    ),
    (lambda: compile_results.compile_table(variant="nope"), ValueError, "variant"),
    (lambda: compile_results.compile_table(head_dim=0), ValueError, "head_dim"),
    (lambda: compile_results.compile_table("results.json"), TypeError, "results"),
    # benchmarks.gpu_report
    (lambda: gpu_report.masks_markdown(None), TypeError, "report"),
    (lambda: gpu_report.masks_markdown([]), TypeError, "report"),
    (lambda: gpu_report.span_cost_findings("report.json"), TypeError, "report"),
    (lambda: gpu_report.summary_markdown({"schema_version": True}), ValueError, "schema_version"),
]

FLEX_BAD = [
    # compile_flex refuses what FlexAttention would refuse, instead of calling it a compile failure
    (
        lambda: flex.compile_flex(*qkv(heads=2)[:1], *qkv(heads=3)[1:]),
        ValueError,
        "query (1, 2, 6, 4)",
    ),
    (
        lambda: flex.compile_flex(*qkv(), score_mod=lambda b, h, q, k: q >= k),
        TypeError,
        "a mask_mod",
    ),
    (
        lambda: flex.compile_flex(
            *qkv(length=6),
            block_mask=flex.create_block_mask(
                lambda b, h, q, k: q >= k, None, None, 8, 8, device="cpu"
            ),
        ),
        ValueError,
        "block_mask was built for",
    ),
    # a program whose captured tensor is smaller than the sizes it is indexed by
    (
        lambda: flex.flex_reference(*qkv(batch=2), mask_mod=flex.padding_mask_mod([3])),
        ValueError,
        "mask_mod indexes a tensor it captured out of range",
    ),
    (
        lambda: flex.flex_reference(
            *qkv(heads=4), score_mod=flex.soft_span_score_mod(torch.ones(2), 2.0)
        ),
        ValueError,
        "score_mod indexes",
    ),
    (
        lambda: flex.flex_reference(*qkv(), score_mod=lambda s, b, h, q, k: s[..., :2]),
        ValueError,
        "score_mod returned shape",
    ),
]


@pytest.mark.parametrize("call, error, match", BAD + [flex_only(case) for case in FLEX_BAD])
def test_bad_input_is_refused_naming_the_argument(call, error, match):
    torch.manual_seed(0)
    with pytest.raises(error) as raised:
        call()
    assert match in str(raised.value), str(raised.value)


# -- the inputs that gave a wrong answer silently ------------------------------------------------


def test_kv_cache_bytes_of_numpy_sizes_does_not_overflow():
    sizes = dict(num_layers=32, num_kv_heads=8, head_dim=128, length=131072)
    expected = 2 * 32 * 8 * 128 * 131072 * 2
    assert kv_cache_bytes(**{k: np.int32(v) for k, v in sizes.items()}) == expected
    assert kv_cache_bytes(**sizes) == expected


def test_positions_in_an_unsigned_dtype_never_show_a_future_key():
    queries, keys = torch.tensor([0, 1]), torch.tensor([0, 1, 2])
    expected = window_mask_from_positions(queries, keys)
    assert not expected[0, 2]
    for dtype in (torch.uint8, torch.int16, torch.int32):
        assert torch.equal(window_mask_from_positions(queries.to(dtype), keys.to(dtype)), expected)


def test_generate_keeps_the_token_ids_it_samples():
    out = generate(Vocabulary300(), torch.zeros(1, 2, dtype=torch.int16), 3, temperature=0)
    assert out[0, 2:].tolist() == [280, 280, 280]


@pytest.mark.parametrize("block_m, block_n", [(1, 1), (2, 3), (4, 2)])
def test_windowed_tiles_cover_the_sliding_window_when_the_lengths_differ(block_m, block_n):
    """Every tile holding a pair that ``sliding_window_mask`` lets through is visited (the
    window's lower bound ignored ``S - L`` and lost pairs whenever L != S)."""
    for query_len in range(1, 8):
        for key_len in range(1, 8):
            for window in range(1, 9):
                visited = tile_map(query_len, key_len, block_m, block_n, window=window)
                mask = sliding_window_mask(query_len, key_len, window=window)
                for r in range(visited.size(0)):
                    for c in range(visited.size(1)):
                        tile = mask[
                            r * block_m : (r + 1) * block_m, c * block_n : (c + 1) * block_n
                        ]
                        assert visited[r, c] or not tile.any(), (query_len, key_len, window, r, c)


def test_adaptive_span_attention_refuses_zero_width_heads_without_offering_a_scale():
    """It takes no ``scale``: the refusal of d_k = 0 must not tell the caller to pass one."""
    from attncourse.adaptive_span import adaptive_span_attention

    query = torch.randn(1, 2, 4, 0)
    with pytest.raises(ValueError, match=r"d_k = 0") as raised:
        adaptive_span_attention(
            query, query, torch.randn(1, 2, 4, 3), torch.tensor([1.0, 1.0]), 2.0
        )
    assert "scale=" not in str(raised.value)
