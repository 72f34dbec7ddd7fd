"""tiled_attention against the naive reference, torch's SDPA, float64 and gradcheck."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attncourse.attention import scaled_dot_product_attention
from attncourse.efficient import online_softmax_update, tile_schedule, tiled_attention
from attncourse.masks import causal_mask


def _qkv(
    *,
    batch=(2, 3),
    query_len=10,
    key_len=13,
    d_k=8,
    d_v=5,
    dtype=torch.float64,
    device="cpu",
    seed=0,
):
    g = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(
        device=device, dtype=dtype
    )
    return make(*batch, query_len, d_k), make(*batch, key_len, d_k), make(*batch, key_len, d_v)


@settings(max_examples=40)
@given(
    query_len=st.integers(1, 40),
    key_len=st.integers(1, 40),
    block_n=st.integers(1, 17),
    block_m=st.integers(1, 17),
    causal=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_matches_reference_on_random_shapes(query_len, key_len, block_m, block_n, causal, seed):
    q, k, v = _qkv(query_len=query_len, key_len=key_len, seed=seed)
    mask = causal_mask(query_len, key_len) if causal else None
    expected = scaled_dot_product_attention(q, k, v, mask)[0]
    got = tiled_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)


def test_matches_torch_sdpa(device):
    q, k, v = _qkv(
        batch=(2, 4), query_len=70, key_len=70, d_k=16, d_v=16, dtype=torch.float32, device=device
    )
    for causal in (False, True):  # L == S: torch's is_causal agrees with causal_mask
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        got = tiled_attention(q, k, v, causal=causal, block_m=24, block_n=16)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)


def test_causal_bottom_right_alignment_when_lengths_differ(device):
    q, k, v = _qkv(query_len=5, key_len=12, device=device)
    expected = scaled_dot_product_attention(q, k, v, causal_mask(5, 12, device=device))[0]
    torch.testing.assert_close(tiled_attention(q, k, v, causal=True, block_n=4), expected)
    # torch's is_causal aligns the top-left corner instead: a different answer
    assert not torch.allclose(F.scaled_dot_product_attention(q, k, v, is_causal=True), expected)


def test_more_queries_than_keys_gives_zero_rows():
    q, k, v = _qkv(query_len=9, key_len=4)
    got = tiled_attention(q, k, v, causal=True, block_m=2, block_n=3)
    assert torch.isfinite(got).all()
    assert (got[..., :5, :] == 0).all()  # the first L - S queries see no key
    torch.testing.assert_close(got, scaled_dot_product_attention(q, k, v, causal_mask(9, 4))[0])


@pytest.mark.parametrize("kind", ["bool", "float", "bool-broadcast", "padding"])
def test_masks(kind, device):
    q, k, v = _qkv(query_len=11, key_len=14, device=device)
    g = torch.Generator().manual_seed(5)
    if kind == "bool":
        mask = (torch.rand(2, 3, 11, 14, generator=g) > 0.5).to(device)
        mask[0, 1, 4] = False  # one query with no key at all
    elif kind == "float":
        mask = torch.randn(2, 1, 11, 14, generator=g, dtype=torch.float64).to(device)
        mask[..., 3] = float("-inf")
    elif kind == "bool-broadcast":
        mask = (torch.rand(11, 14, generator=g) > 0.3).to(device)
    else:  # key padding mask (B, 1, 1, S)
        mask = (torch.arange(14)[None, :] < torch.tensor([9, 14])[:, None])[:, None, None, :].to(
            device
        )
    for causal in (False, True):
        full = (
            mask
            if not causal
            else (
                mask & causal_mask(11, 14, device=device)
                if mask.dtype == torch.bool
                else mask
                + torch.zeros(11, 14, dtype=mask.dtype, device=device).masked_fill(
                    ~causal_mask(11, 14, device=device), float("-inf")
                )
            )
        )
        expected = scaled_dot_product_attention(q, k, v, full)[0]
        got = tiled_attention(q, k, v, mask, causal=causal, block_m=3, block_n=4)
        torch.testing.assert_close(got, expected)
        assert torch.isfinite(got).all()


def test_broadcast_batch_dimensions():
    q = torch.randn(2, 1, 7, 8, dtype=torch.float64)
    k = torch.randn(1, 3, 9, 8, dtype=torch.float64)
    v = torch.randn(3, 9, 4, dtype=torch.float64)
    expected = scaled_dot_product_attention(q, k, v)[0]
    got = tiled_attention(q, k, v, block_n=2)
    assert got.shape == (2, 3, 7, 4)
    torch.testing.assert_close(got, expected)


def test_unbatched_and_scale():
    q, k, v = _qkv(batch=(), query_len=6, key_len=9)
    torch.testing.assert_close(
        tiled_attention(q, k, v, scale=0.3, block_n=4),
        scaled_dot_product_attention(q, k, v, scale=0.3)[0],
    )


@pytest.mark.parametrize(
    "dtype,atol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2), (torch.float32, 1e-5)]
)
def test_low_precision_against_float64(dtype, atol, device):
    q, k, v = _qkv(query_len=40, key_len=50, d_k=16, d_v=16, device=device)
    expected = scaled_dot_product_attention(q, k, v, causal_mask(40, 50, device=device))[0]
    got = tiled_attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=True, block_n=16)
    assert got.dtype == dtype
    # the inputs are rounded to dtype first: compare with the float64 result of the rounded inputs
    rounded = scaled_dot_product_attention(
        q.to(dtype).double(),
        k.to(dtype).double(),
        v.to(dtype).double(),
        causal_mask(40, 50, device=device),
    )[0]
    torch.testing.assert_close(got.double(), rounded, atol=atol, rtol=0)
    torch.testing.assert_close(got.double(), expected, atol=4 * atol, rtol=0)


def test_large_scores_do_not_overflow():
    q, k, v = _qkv(query_len=8, key_len=20, dtype=torch.float32)
    q = q * 200  # scores of several thousand: exp would overflow without the running max
    got = tiled_attention(q, k, v, block_n=3)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(
        got,
        scaled_dot_product_attention(q.double(), k.double(), v.double())[0].float(),
        atol=1e-4,
        rtol=1e-4,
    )


def test_gradients_match_reference(device):
    q, k, v = (x.requires_grad_() for x in _qkv(query_len=9, key_len=12, device=device))
    mask = (torch.rand(9, 12, generator=torch.Generator().manual_seed(3)) > 0.3).to(device)
    weights = torch.randn(2, 3, 9, 5, dtype=torch.float64, device=device)
    (tiled_attention(q, k, v, mask, causal=True, block_m=4, block_n=5) * weights).sum().backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    (
        scaled_dot_product_attention(q, k, v, mask & causal_mask(9, 12, device=device))[0] * weights
    ).sum().backward()
    for got, expected in zip(grads, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(got, expected)


def test_gradcheck():
    q, k, v = (x.requires_grad_() for x in _qkv(batch=(2,), query_len=5, key_len=7, d_k=3, d_v=2))
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attention(q, k, v, causal=True, block_m=2, block_n=3),
        (q, k, v),
    )


def test_causal_skips_blocks():
    """A future key block is never touched: NaN keys there cannot leak into any output."""
    q, k, v = _qkv(batch=(), query_len=8, key_len=8)
    k, v = k.clone(), v.clone()
    k[6:], v[6:] = float("nan"), float("nan")
    got = tiled_attention(q, k, v, causal=True, block_m=2, block_n=2)
    assert torch.isfinite(got[:6]).all()  # queries 0..5 only read key blocks [0, 6)
    torch.testing.assert_close(
        got[:6], scaled_dot_product_attention(q[:6], k[:6], v[:6], causal_mask(6))[0]
    )


def test_future_tokens_cannot_change_earlier_outputs():
    q, k, v = _qkv(query_len=12, key_len=12)
    before = tiled_attention(q, k, v, causal=True, block_n=5)
    k2, v2 = k.clone(), v.clone()
    k2[..., 8:, :] += 3.0
    v2[..., 8:, :] -= 2.0
    after = tiled_attention(q, k2, v2, causal=True, block_n=5)
    torch.testing.assert_close(after[..., :8, :], before[..., :8, :])
    assert not torch.allclose(after[..., 8:, :], before[..., 8:, :])


def test_online_softmax_update_equals_softmax():
    scores = torch.randn(4, 30, dtype=torch.float64) * 5
    m = torch.full((4,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(4, dtype=torch.float64)
    for start in range(0, 30, 7):
        m, l, _ = online_softmax_update(m, l, scores[:, start : start + 7])
    torch.testing.assert_close(m, scores.amax(-1))
    torch.testing.assert_close(
        torch.exp(scores - m[:, None]) / l[:, None], torch.softmax(scores, -1)
    )


def test_online_softmax_update_all_masked_row():
    m, l, c = online_softmax_update(
        torch.tensor([float("-inf")]), torch.tensor([0.0]), torch.full((1, 3), float("-inf"))
    )
    assert m.item() == float("-inf") and l.item() == 0.0 and c.item() == 0.0


def test_input_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="d_k"):
        tiled_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="positions S"):
        tiled_attention(q, k, v[..., :3, :])
    with pytest.raises(ValueError, match="mask"):
        tiled_attention(q, k, v, torch.ones(10, 12, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask"):
        tiled_attention(q, k, v, torch.ones(10, 13, dtype=torch.int64))
    with pytest.raises(ValueError, match="block_n"):
        tiled_attention(q, k, v, block_n=0)
    with pytest.raises(ValueError, match="block_m"):
        tiled_attention(q, k, v, block_m=-1)
    with pytest.raises(TypeError, match="causal"):
        tiled_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="same dtype"):
        tiled_attention(q, k.float(), v)
    with pytest.raises(ValueError, match="at least 2"):
        tiled_attention(q[0, 0, 0], k, v)


@pytest.mark.parametrize(
    "shapes", [((1,), (3,), (1,)), ((1,), (1,), (3,)), ((3,), (1,), (1,)), ((2, 1), (1, 3), (1, 1))]
)
def test_batch_dimensions_broadcast_from_any_argument(shapes):
    """The batch size may come from query, key or value alone (broadcast like torch.matmul)."""
    bq, bk, bv = shapes
    g = torch.Generator().manual_seed(0)
    q = torch.randn(*bq, 5, 4, generator=g, dtype=torch.float64)
    k = torch.randn(*bk, 7, 4, generator=g, dtype=torch.float64)
    v = torch.randn(*bv, 7, 3, generator=g, dtype=torch.float64)
    for causal in (False, True):
        got = tiled_attention(q, k, v, causal=causal, block_m=2, block_n=3)
        mask = causal_mask(5, 7) if causal else None
        expected, _ = scaled_dot_product_attention(q, k, v, mask)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected)
    # no query: the empty output still has the broadcast batch shape
    empty = tiled_attention(q[..., :0, :], k, v)
    assert empty.shape == (*torch.broadcast_shapes(bq, bk, bv), 0, 3)


def test_gradients_with_a_finite_float_mask_match_reference():
    """The out-of-place path (taken when gradients are needed) adds a float mask, as the reference does."""
    q, k, v = (x.requires_grad_() for x in _qkv(batch=(2,), query_len=5, key_len=7, d_k=3, d_v=2))
    mask = torch.randn(5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = tiled_attention(q, k, v, mask, block_m=2, block_n=3)
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(got, expected)
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    for g, e in zip(grads, torch.autograd.grad(expected.sum(), (q, k, v))):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_with_masks_matches_reference(dtype):
    q, k, v = (x.to(dtype) for x in _qkv(batch=(2,), query_len=5, key_len=7, d_k=4, d_v=3))
    for mask in (
        torch.rand(5, 7, generator=torch.Generator().manual_seed(2)) > 0.3,
        torch.randn(5, 7).to(dtype),
    ):
        got = tiled_attention(q, k, v, mask, block_n=3)
        expected, _ = scaled_dot_product_attention(
            q.double(), k.double(), v.double(), mask if mask.dtype == torch.bool else mask.double()
        )
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), expected, atol=2e-2, rtol=2e-2)


# --- tile_schedule: the tiles tiled_attention computes (chapter 7's schematic) ---


def test_tile_schedule_lists_the_scores_tiled_attention_multiplies():
    """Independent check: FlopCounterMode counts 4 d FLOPs per computed score (Q K^T and P V)."""
    from torch.utils.flop_counter import FlopCounterMode

    for seq_q, seq_k, causal, bk, bq in [
        (300, 450, True, 100, 70),
        (300, 450, False, 100, 70),
        (512, 512, True, 128, 64),
        (450, 300, True, 64, 50),
    ]:
        q, k, v = (
            torch.randn(1, 1, seq_q, 4),
            torch.randn(1, 1, seq_k, 4),
            torch.randn(1, 1, seq_k, 4),
        )
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            tiled_attention(q, k, v, causal=causal, block_m=bq, block_n=bk)
        tiles = tile_schedule(seq_q, seq_k, causal=causal, block_m=bq, block_n=bk)
        assert counter.get_total_flops() == 4 * 4 * sum(
            (q1 - q0) * (k1 - k0) for q0, q1, k0, k1, _ in tiles
        )
        if not causal:
            assert not any(t[4] for t in tiles)


@pytest.mark.parametrize("seq_q, seq_k", [(7, 7), (5, 9), (9, 5), (1, 4), (4, 1)])
@pytest.mark.parametrize("bq, bk", [(1, 1), (2, 3), (3, 2), (4, 4), (16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_tile_schedule_against_the_mask_cell_by_cell(seq_q, seq_k, bq, bk, causal):
    """Brute force: the tiles are disjoint, lie in the grid, cover exactly the cells a (bottom-right
    aligned) causal mask keeps plus the masked cells of the diagonal tiles, and a tile is flagged
    exactly when it holds a masked cell."""
    keep = causal_mask(seq_q, seq_k) if causal else torch.ones(seq_q, seq_k, dtype=torch.bool)
    covered = torch.zeros(seq_q, seq_k, dtype=torch.int64)
    tiles = tile_schedule(seq_q, seq_k, causal=causal, block_m=bq, block_n=bk)
    for q0, q1, k0, k1, straddles in tiles:
        assert 0 <= q0 < q1 <= seq_q and 0 <= k0 < k1 <= seq_k
        assert q1 - q0 <= bq and k1 - k0 <= bk and q0 % bq == 0 and k0 % bk == 0
        covered[q0:q1, k0:k1] += 1
        assert straddles == bool((~keep[q0:q1, k0:k1]).any())
        assert keep[q0:q1, k0:k1].any()  # no tile of masked cells only
    assert covered.max() <= 1
    assert bool((covered[keep] == 1).all())


def test_tile_schedule_validates():
    with pytest.raises(ValueError, match="block_n"):
        tile_schedule(8, 8, block_n=0)
    with pytest.raises(ValueError, match="block_m"):
        tile_schedule(8, 8, block_m=0)
    with pytest.raises(ValueError, match="seq_q"):
        tile_schedule(0, 8)
    with pytest.raises(ValueError, match="seq_k"):
        tile_schedule(8, -1)
    with pytest.raises(TypeError, match="causal"):
        tile_schedule(8, 8, causal=1)
    assert tile_schedule(3, 2) == [(0, 3, 0, 2, False)]
    # the defaults: query blocks of 256, key blocks of 1024 (tiled_attention's)
    assert tile_schedule(257, 1025)[:3] == [
        (0, 256, 0, 1024, False),
        (0, 256, 1024, 1025, False),
        (256, 257, 0, 1024, False),
    ]
