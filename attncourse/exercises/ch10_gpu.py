"""Chapter 10 exercises: the key blocks a causal query block visits, and the tiles an adaptive-span head skips.

Both are questions about the loops of the Triton kernels; they are answered in plain Python
(no GPU, no triton), and checked against :mod:`attncourse.kernels.tiles`.
"""
from __future__ import annotations

import math
import operator
from typing import List

import torch

from ._core import Mistake, call, check_number, exercise


# -- 1. the key blocks a causal query block must visit ----------------------------------------


def _key_blocks_solution(query_block, block_m, block_n, query_len, key_len):
    first_query = query_block * block_m
    last_query = min(first_query + block_m, query_len) - 1
    last_key = min(key_len - 1, last_query + key_len - query_len)  # bottom-right: j <= i + S - L
    if last_key < 0:
        return []  # every query of the block comes before the first key
    return list(range(last_key // block_n + 1))


def _blocks(query_block, block_m, block_n, query_len, key_len, *, top_left=False, floor=False, everything=False) -> List[int]:
    """The known wrong answers, computed as a learner would."""
    if everything:
        return list(range(math.ceil(key_len / block_n)))
    offset = 0 if top_left else key_len - query_len
    hi = min(key_len, query_block * block_m + block_m + offset)
    return list(range(max(hi, 0) // block_n if floor else math.ceil(max(hi, 0) / block_n)))


_CASES = [  # (query_block, block_m, block_n, L, S): L = S, L < S (a cache), L > S, partial blocks
    (0, 16, 16, 64, 64), (2, 16, 16, 64, 64), (1, 16, 32, 50, 50), (0, 32, 16, 40, 100), (1, 32, 16, 40, 100),
    (3, 16, 16, 70, 37), (0, 16, 16, 70, 37), (2, 64, 32, 200, 200), (4, 16, 64, 77, 300), (1, 16, 16, 20, 20),
    (2, 16, 16, 33, 33),  # a last block of one query, whose last key (32) opens a new key block
    (1, 16, 16, 47, 16),  # L > S: the block's last query sees exactly one key, key 0
]


def _as_list(result) -> List[int]:
    """The block indices from a list, range, tuple, tensor or array of integers, else a Mistake."""
    kind = type(result).__name__
    if isinstance(result, torch.Tensor) and result.dtype == torch.bool:
        raise Mistake("You returned a boolean tensor (which blocks are visible?): return the indices of the visible blocks, "
                      "e.g. torch.nonzero(visible).flatten().")
    if isinstance(result, torch.Tensor) and result.is_complex():
        raise Mistake(f"Return the key-block indices as integers, got a {result.dtype} tensor.")

    def index(b) -> int:
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
        raise Mistake(f"Return the key-block indices as a list or range of integers, got {kind}.") from None
    return sorted(blocks)


@exercise(
    "gpu/causal-key-blocks",
    title="The key blocks a causal query block must visit",
    hint="""
        Query i may attend to key j when j <= i + (S - L) (the last query aligned with the last key).
        The block holds the queries block_m * query_block .. min(block_m * (query_block + 1), L) - 1;
        its LAST query sees the most keys. The key blocks to visit are 0 .. (that last key) // block_n,
        and none at all when that last key is negative (L > S: the first queries come before every key).
    """,
    solution=_key_blocks_solution,
)
def _check_key_blocks(fn) -> str:
    for case in _CASES:
        got = _as_list(call(fn, *case))
        expected = _key_blocks_solution(*case)
        if got == expected:
            continue
        where = "query block {}, block_m={}, block_n={}, L={}, S={}".format(*case)
        if not expected:
            raise Mistake(f"At {where} every query of the block comes before the first key (L > S and the last query "
                          f"aligned with the last key): the block visits no key block at all, got {got}.")
        if got == _blocks(*case, everything=True):
            raise Mistake(f"At {where} you visit every key block: blocks entirely above the diagonal hold only masked "
                          f"scores. Stop at the block of the last key the block's last query may see.")
        if got == _blocks(*case, top_left=True):
            raise Mistake(f"At {where} you aligned the causal mask top left (j <= i): the package aligns the last query "
                          f"with the last key, j <= i + (S - L).")
        if got == _blocks(*case, floor=True):
            raise Mistake(f"At {where} you dropped the last key block, which is only partly visible: round up "
                          f"(it still holds keys the block's queries may see).")
        raise Mistake(f"At {where} the blocks should be {expected}, got {got}.")
    return "Right: the kernel's loop runs over exactly these blocks (attncourse.kernels.tiles.key_block_range)."


# -- 2. the tiles an adaptive-span head skips --------------------------------------------------

_SKIPPED = "UENDXg=="
_SKIPPED_MISTAKES = (
    "GlZHX1NNT1JRMQkVAE4KHFUGGwBBGgEDAQoHUhwDQQAdAgYcVQYbAEEcEQ8HTxYdHhUUABEdWE8BGhZFBAwRHAAGBhdTBBIfB04LAAJSHgQPDVQBBU8BGhZFAhUBHQIDVQYaCQQHVAcXTwYZGhUSWlZCQ01GRUtTQ05UTDoAAFIQChQaAAsHTwEaFkUSHx0eEwoRUgcMDREHTgIIFBsdFhVUAAYGTwIaHAkEVAcfFg4HF1MKB1RCWkMXVURHRRUdGAsQVVUTUwYAAQcPD08eFwELBBhUAAYZEABTEwgHHRoQTwEaFkUVHRgLEE8UEBwTBFQABgZPERsSAg4aFQJDDhsLBAQYWFQdDE8WHQYLFVQVCQIGGwEHRRUcEU4ADgABEglBAB0CBhxVWkVRQV5UWFZPWlJBRVxURl5bX1xcUUlBVkVWUF9XSFNHOBsBTg8KEwZTChQAVBoLClUAEggRTlQFBhYGUgYVQQAbTgcGBgYSCwIRVA0GBhlaCUVKVCZHQ0JVQ1NYQUZFX0McARsfCUEcFRgGTxRSBAAIExwaT08GHVMRCRFUGQoBER0ERQgHVDlDUlURFgwNXA5OSE8nW1NYQUZFXE9PGx0HRRtUSU5SV0VcUUlBVkVZVV9XSFNHOBsBTgQOAxdTABcRBhdDHgAXARxBFhgBAARVERYMDVwjTkxPQ0ZaRUpURU4ICgxSEQkOFx8dWU8BGhZFBx0GHRdPBAcWFxhUFgIMDB4BUw0AAhFOBQoCFwFFChENHUMNEBQcFwRUAAYGAllSEgsFVAAGBk8HEx0CBFQHGgIdAQFTBBVUAAYGTxceHAYKVBwBDwscHBRFChENTg4ODVpDSUFCQE4RT1hSJEVKVEVHTU0I"
)
_SKIPPED_SOLUTION = (
    "NRwRThQGGxYcEkEdB040T0hSEAAIGFwUQ0RVIFpFXFQXCwoDXUNLVUFfVF1RRlVPU1dQRk5OCAoMAVMEFVQQBxAbFBwQAEFEWkBRXkRcUzQUEQYXQw0ZHRAOQQZURhIaEAAaABJUQloRT1tcU1NVBlRFQ1lGW1MLBBEQHUMbHRdTDgQNB04FHRofUwgADFxeT09DRgFFTFRGX1JGVQcDRRUbVFhXHVVZU1NSWFQaCw4BUhoWQQAcC0MEEAtTBw0bFwUQTxMeHAoTXBkPG0dFXlNTVQZUQ0NdRENaRU5UQlpKT1tcUxdPVDIBEU8HUk1YQUBYTlVbB1JeRVNFRU5eT0NGWxdBWVRaSk9eUkdQTVQHAUMNGR0QDhJUBk5OT0FSXUtBBk5OVk8BGx8AEk9UCAwdVQBTWEFEWE5SQ1VAX0VSTlQcQ0RVQ1MRCBgRHUNHRFJYRVNUX05QT15SR0VcVEVeSkFVOx1FABgYTlJfVVlTU1FUXk5WT0hSQFRRVAAHDwoGXlMEBhUdABAbVURHRUtUQltDQFVAU1hBRkRWU08THQFFERgVBw1PFhMGFgAYVA8XGxAcBwwOGk5OFwcQUhsAABBUHQgGBQFTVFZDRE4XBhkXAEVJTEFLSkFVJRoRCVQABgZPBRMQDgATEVRDGxweFjoMFQRGV19MRF9FVURNWE9PQ0ZfRVdAWE4ADgABEglcIAYbBkZbAQYISV1UQ0MbHB4WOgwVBEZXX0xEX0VVRE1YT09DRl9FV0BYThQGGxYcElxGRVxKQQYHHk1IWg=="
)


@exercise(
    "gpu/span-skipped-tiles",
    title="The tiles an adaptive-span head skips",
    hint="""
        The head's keys with a weight are those at distance 0 .. W - 1 with W = ceil(z + R). With L = 4096
        and 64 x 64 tiles, query block r needs the key blocks from the one holding key max(0, 64 r - W + 1)
        up to block r (the diagonal). Add the tiles over r = 0 .. 63 and subtract from the causal count
        64 * 65 / 2. Check with attncourse.kernels.tiles.tile_map.
    """,
    solution=_SKIPPED_SOLUTION,
)
def _check_skipped(answer) -> str:
    return check_number(
        answer, _SKIPPED, _SKIPPED_MISTAKES, what="number of tiles",
        right="Right: this head does about a seventh of the causal work, and its programs finish that much sooner.",
        otherwise="{value:g} is not it. Count the key blocks of each query block from the window W = ceil(z + R).",
    )
