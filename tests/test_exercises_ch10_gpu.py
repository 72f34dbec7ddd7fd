"""The chapter 10 checkers accept right answers in several styles and name the usual mistakes."""
import math

import numpy as np
import pytest
import torch

from attncourse.exercises import check, solution
from attncourse.exercises.ch10_gpu import _CASES, _key_blocks_solution
from attncourse.kernels.tiles import key_block_range, tile_map
from attncourse.masks import causal_mask

from exercise_helpers import assert_fails, stub

ID = "gpu/causal-key-blocks"


def test_reference_agrees_with_the_masks_and_the_kernel_plan():
    for qb, bm, bn, L, S in _CASES:
        rows = causal_mask(L, S)[qb * bm:(qb + 1) * bm]
        from_mask = [c for c in range(math.ceil(S / bn)) if bool(rows[:, c * bn:(c + 1) * bn].any())]
        assert _key_blocks_solution(qb, bm, bn, L, S) == from_mask
        lo, hi = key_block_range(qb * bm, bm, bn, S, L, causal=True)
        assert from_mask == list(range(lo // bn, math.ceil(hi / bn))) if hi > lo else from_mask == []


def _with_range(qb, bm, bn, L, S):  # a range object, from the last key
    last = min(S, qb * bm + bm + S - L)
    return range(0, -(-last // bn)) if last > 0 else range(0)


def _as_tensor(qb, bm, bn, L, S):  # the mask itself, in a tensor
    rows = causal_mask(L, S)[qb * bm:(qb + 1) * bm]
    visible = torch.nn.functional.pad(rows, (0, -S % bn)).view(rows.size(0), -1, bn).any(-1).any(0)
    return torch.nonzero(visible).flatten()


def _numpy(qb, bm, bn, L, S):
    keys = np.arange(S)
    queries = np.arange(qb * bm, min(qb * bm + bm, L))
    ok = keys[None, :] <= queries[:, None] + (S - L)
    return np.unique(keys[ok.any(0)] // bn)


def _whole_floats(qb, bm, bn, L, S):  # np.arange of a float count: whole floats are indices too
    return np.arange(float(len(_key_blocks_solution(qb, bm, bn, L, S))))


@pytest.mark.parametrize("answer", [_key_blocks_solution, _with_range, _as_tensor, _numpy, _whole_floats])
def test_accepts(answer):
    assert check(ID, answer).passed


def _top_left(qb, bm, bn, L, S):
    return list(range(math.ceil(min(S, qb * bm + bm) / bn)))


def _floor(qb, bm, bn, L, S):
    return list(range(max(0, min(S, qb * bm + bm + S - L)) // bn))


def _everything(qb, bm, bn, L, S):
    return list(range(math.ceil(S / bn)))


def _never_empty(qb, bm, bn, L, S):
    return _key_blocks_solution(qb, bm, bn, L, S) or [0]


def _one_query_short(qb, bm, bn, L, S):  # the block's second-to-last query: the last key block it opens is missed
    last = min(qb * bm + bm, L) - 2 + S - L
    return list(range(last // bn + 1)) if last >= 0 else []


def _key_zero_is_no_key(qb, bm, bn, L, S):  # a last visible key 0 taken for "no key"
    last = min(qb * bm + bm, L) - 1 + S - L
    return list(range(last // bn + 1)) if last > 0 else []


@pytest.mark.parametrize(
    "wrong,words",
    [(_top_left, "top left"), (_floor, "round up"), (_everything, "every key block"), (_never_empty, "no key block at all"),
     (lambda *a: [0, 1], "should be"), (lambda *a: None, "list or range"),
     (_one_query_short, "L=33, S=33"), (_key_zero_is_no_key, "L=47, S=16"),
     (lambda *a: torch.ones(3, dtype=torch.bool), "boolean tensor"), (lambda *a: [0.5, 1.5], "list or range of integers")],
)
def test_diagnoses(wrong, words):
    assert_fails(ID, wrong, words)


def test_stub_is_not_attempted():
    assert check(ID, stub).status .startswith("not attempted")
    assert "last_key" in str(solution(ID))


def test_skipped_tiles():
    right = int(tile_map(4096, 4096, 64, 64, causal=True).sum() - tile_map(4096, 4096, 64, 64, window=212).sum())
    for answer in (right, float(right), torch.tensor(right), np.int64(right).item()):
        assert check("gpu/span-skipped-tiles", answer).passed
    assert_fails("gpu/span-skipped-tiles", int(tile_map(4096, 4096, 64, 64, window=212).sum()), "computes")
    assert_fails("gpu/span-skipped-tiles", 4096 - int(tile_map(4096, 4096, 64, 64, window=212).sum()), "whole square")
    assert_fails("gpu/span-skipped-tiles", 2080 - int(tile_map(4096, 4096, 64, 64, window=180).sum()), "ramp")
    assert_fails("gpu/span-skipped-tiles", 2080 - 64 * 5, "fewer keys")
    assert_fails("gpu/span-skipped-tiles", 1000, "is not it")
    assert_fails("gpu/span-skipped-tiles", "1770", "number")
    assert str(right) in str(solution("gpu/span-skipped-tiles"))
