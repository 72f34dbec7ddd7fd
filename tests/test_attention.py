"""scaled_dot_product_attention against torch's own SDPA, float64 recomputation and gradcheck."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attncourse import scaled_dot_product_attention
from attncourse.attention import safe_softmax

TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def randn(*shape, dtype=torch.float64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


@st.composite
def problems(draw):
    """Random shapes with 0-2 batch dimensions, L != S allowed, and an optional mask of any broadcastable shape."""
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    L, S = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    d_k, d_v = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    kind = draw(st.sampled_from(["none", "bool", "float"]))
    # a mask shape: every dimension either full or 1, possibly with fewer leading dimensions
    full = batch + (L, S)
    keep = draw(st.integers(2, len(full)))
    mask_shape = tuple(s if draw(st.booleans()) else 1 for s in full[-keep:-2]) + tuple(
        s if draw(st.booleans()) else 1 for s in full[-2:]
    )
    seed = draw(st.integers(0, 2**16))
    return batch, L, S, d_k, d_v, kind, mask_shape, seed


@given(problems())
def test_matches_torch_sdpa(problem):
    batch, L, S, d_k, d_v, kind, mask_shape, seed = problem
    q, k, v = (
        randn(*batch, L, d_k, seed=seed),
        randn(*batch, S, d_k, seed=seed + 1),
        randn(*batch, S, d_v, seed=seed + 2),
    )
    mask = None
    if kind == "bool":
        mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(seed)) > 0.3
    elif kind == "float":
        mask = randn(*mask_shape, seed=seed + 3)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (*batch, L, d_v) and weights.shape == (*batch, L, S)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)
    # every row of the weights sums to 1, or to 0 when all its keys are masked
    sums = weights.sum(-1)
    if mask is not None and mask.dtype == torch.bool:
        empty = ~mask.expand(*batch, L, S).any(-1)
        torch.testing.assert_close(sums, (~empty).to(sums.dtype))
    else:
        torch.testing.assert_close(sums, torch.ones_like(sums))


def test_matches_float64_recomputation_by_hand():
    """The formula written out with explicit loops, independent of matmul broadcasting."""
    q, k, v = randn(3, 4, seed=1), randn(5, 4, seed=2), randn(5, 2, seed=3)
    out, weights = scaled_dot_product_attention(q, k, v)
    q, k, v = q.tolist(), k.tolist(), v.tolist()  # plain Python floats from here on
    for i in range(3):
        scores = [sum(q[i][t] * k[j][t] for t in range(4)) / math.sqrt(4) for j in range(5)]
        top = max(scores)
        exp = [math.exp(s - top) for s in scores]
        w = [e / sum(exp) for e in exp]
        assert weights[i].tolist() == pytest.approx(w, abs=1e-12)
        assert out[i].tolist() == pytest.approx(
            [sum(w[j] * v[j][c] for j in range(5)) for c in range(2)], abs=1e-12
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_dtypes_and_devices(device, dtype):
    q, k, v = (randn(2, 3, 5, 8, dtype=dtype, device=device, seed=s) for s in (1, 2, 3))
    mask = torch.rand(2, 1, 5, 5, generator=torch.Generator().manual_seed(0)).to(device) > 0.5
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == weights.dtype == dtype and out.device.type == device.type
    # float64 on the same (rounded) inputs: what is left is the one rounding of the output
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    torch.testing.assert_close(out.double(), reference, atol=TOL[dtype], rtol=TOL[dtype])
    assert not torch.isnan(out).any()


def test_fully_masked_row_gives_zeros_not_nan(device):
    q, k, v = (
        randn(4, 8, device=device, seed=1),
        randn(6, 8, device=device, seed=2),
        randn(6, 3, device=device, seed=3),
    )
    mask = torch.ones(4, 6, dtype=torch.bool, device=device)
    mask[2] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(weights[2], torch.zeros(6, dtype=weights.dtype, device=device))
    assert torch.equal(out[2], torch.zeros(3, dtype=out.dtype, device=device))
    additive = torch.zeros(4, 6, dtype=torch.float64, device=device).masked_fill(
        ~mask, float("-inf")
    )
    out_add, weights_add = scaled_dot_product_attention(q, k, v, additive)
    torch.testing.assert_close(out_add, out)
    torch.testing.assert_close(weights_add, weights)
    # the other rows are untouched, and the gradient is finite everywhere
    q.requires_grad_(True)
    scaled_dot_product_attention(q, k, v, mask)[0].sum().backward()
    assert torch.isfinite(q.grad).all()


def test_large_negative_float_mask_is_not_minus_infinity():
    """-1e9 on a whole row is a constant shift: float64 keeps the unmasked weights, float32 rounds them to uniform."""
    q, k, v = randn(2, 4, seed=1), randn(3, 4, seed=2), randn(3, 2, seed=3)
    mask = torch.tensor([[0.0, 0.0, 0.0], [-1e9, -1e9, -1e9]], dtype=torch.float64)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    _, unmasked = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(weights[1], unmasked[1], atol=1e-6, rtol=0)
    _, weights32 = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask.float())
    torch.testing.assert_close(weights32[1], torch.full((3,), 1 / 3), atol=1e-6, rtol=0)


def test_scale_argument():
    q, k, v = randn(2, 3, 4, seed=1), randn(2, 5, 4, seed=2), randn(2, 5, 6, seed=3)
    out, _ = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3))
    # default scale is 1/sqrt(d_k): doubling q and halving the scale changes nothing
    torch.testing.assert_close(
        scaled_dot_product_attention(2 * q, k, v, scale=0.25)[0],
        scaled_dot_product_attention(q, k, v)[0],
    )


def test_gradcheck_with_mask():
    q = randn(2, 3, 4, seed=1).requires_grad_(True)
    k = randn(2, 5, 4, seed=2).requires_grad_(True)
    v = randn(2, 5, 3, seed=3).requires_grad_(True)
    mask = torch.rand(2, 3, 5, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[0, 1] = False  # one fully masked row
    additive = randn(2, 3, 5, seed=4).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m), (q, k, v, additive)
    )


def test_gradients_match_torch():
    q, k, v = (randn(2, 4, 6, seed=s).requires_grad_(True) for s in (1, 2, 3))
    mask = torch.rand(4, 4, generator=torch.Generator().manual_seed(5)) > 0.4
    mask[:, 0] = True
    upstream = randn(2, 4, 6, seed=9)
    ours = torch.autograd.grad(
        (scaled_dot_product_attention(q, k, v, mask)[0] * upstream).sum(), (q, k, v)
    )
    theirs = torch.autograd.grad(
        (F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * upstream).sum(), (q, k, v)
    )
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_safe_softmax():
    scores = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3])
    weights = safe_softmax(scores)
    torch.testing.assert_close(weights[0], torch.softmax(scores[0], -1))
    assert torch.equal(weights[1], torch.zeros(3))


def test_safe_softmax_of_one_row_and_of_no_keys():
    """A 1-D ``scores`` is one row; ``S = 0`` gives empty weights of the scores' dtype."""
    row = torch.tensor([0.5, -1.0, 2.0])
    torch.testing.assert_close(safe_softmax(row), torch.softmax(row, -1))
    assert torch.equal(safe_softmax(torch.full((4,), float("-inf"))), torch.zeros(4))
    for dtype in (torch.float16, torch.float32, torch.float64):
        weights = safe_softmax(torch.zeros(3, 0, dtype=dtype))
        assert weights.shape == (3, 0) and weights.dtype == dtype


# -- bad input ------------------------------------------------------------------------------

q, k, v = randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 6)


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        ((q.numpy(), k, v), {}, TypeError, ["query", "torch.Tensor"]),
        ((q.long(), k, v), {}, TypeError, ["query", "floating", "int64"]),
        ((randn(4), k, v), {}, ValueError, ["query", "at least 2", "(4,)"]),
        ((q, randn(5), v), {}, ValueError, ["key", "at least 2"]),
        ((q, k, randn(6)), {}, ValueError, ["value", "at least 2"]),
        ((q, randn(2, 5, 3), v), {}, ValueError, ["d_k", "(2, 3, 4)", "(2, 5, 3)"]),
        ((q, k, randn(2, 4, 6)), {}, ValueError, ["S", "(2, 5, 4)", "(2, 4, 6)"]),
        ((q, k.float(), v), {}, TypeError, ["dtype", "float64", "float32"]),
        ((randn(3, 3, 4), k, v), {}, ValueError, ["broadcast", "(3,)", "(2,)"]),
        (
            (q, k, v, torch.ones(2, 3, 5, dtype=torch.long)),
            {},
            TypeError,
            ["mask", "int64", ".bool()"],
        ),
        (
            (q, k, v, torch.ones(5, dtype=torch.bool)),
            {},
            ValueError,
            ["mask", "at least 2", "(5,)"],
        ),
        (
            (q, k, v, torch.ones(2, 5, dtype=torch.bool)),
            {},
            ValueError,
            ["mask", "(2, 5)", "(2, 3, 5)"],
        ),
        (
            (q, k, v, torch.ones(2, 1, 3, 5, dtype=torch.bool)),
            {},
            ValueError,
            ["mask", "(2, 1, 3, 5)", "(2, 3, 5)"],
        ),
        ((q, k, v, torch.ones(2, 3, 4, dtype=torch.bool)), {}, ValueError, ["mask", "(2, 3, 4)"]),
        ((q, k, v), {"scale": 0.0}, ValueError, ["scale", "positive"]),
        ((q, k, v), {"scale": float("nan")}, ValueError, ["scale"]),
    ],
)
def test_bad_input_names_the_argument_and_shapes(args, kwargs, error, words):
    with pytest.raises(error) as info:
        scaled_dot_product_attention(*args, **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_the_sources_key_padding_mask_shape_is_rejected_not_broadcast():
    """A (B, S) mask against (B, L, S) scores with B == L would broadcast silently in torch;
    here it needs its L axis."""
    q3, k3, v3 = randn(3, 3, 4), randn(3, 5, 4), randn(3, 5, 2)
    with pytest.raises(ValueError, match="at least 2|does not broadcast"):
        scaled_dot_product_attention(q3, k3, v3, torch.ones(3, 5, dtype=torch.bool)[0])
    out, _ = scaled_dot_product_attention(q3, k3, v3, torch.ones(3, 1, 5, dtype=torch.bool))
    assert out.shape == (3, 3, 2)


def test_safe_softmax_keeps_half_precision_dtype():
    """Half-precision scores are normalised in float32 internally but returned in their own dtype."""
    for dtype in (torch.float16, torch.bfloat16):
        scores = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3], dtype=dtype)
        weights = safe_softmax(scores)
        assert weights.dtype == dtype
        torch.testing.assert_close(
            weights[0].float(), torch.softmax(scores[0].float(), -1), atol=1e-2, rtol=0
        )
        assert (weights[1] == 0).all()


def test_gradient_through_a_row_masked_by_a_float_mask_is_finite():
    """A query whose keys are all removed by a float -inf mask: zero output and finite (zero) gradients."""
    query = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    key = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    value = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(3, 5, dtype=torch.float64)
    mask[1] = float("-inf")
    out, _ = scaled_dot_product_attention(query, key, value, mask)
    assert (out[:, 1] == 0).all()
    out.sum().backward()
    for t in (query, key, value):
        assert torch.isfinite(t.grad).all()
    assert (query.grad[:, 1] == 0).all()


def test_additive_mask_of_another_dtype_is_cast_to_the_scores():
    q, k, v = (torch.randn(2, 3, 4) for _ in range(3))
    mask = torch.randn(3, 3, dtype=torch.float64)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.float())
    assert out.dtype == weights.dtype == torch.float32
    torch.testing.assert_close(out, expected)
    # the mask took effect: without it the output is another one
    assert not torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-3)
