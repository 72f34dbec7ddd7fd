"""Masks (chapter 3): built from lengths and positions, combined, converted, and checked
against torch's own references (``causal_lower_right``/``causal_upper_left``, SDPA's
``is_causal``, ``nn.MultiheadAttention``'s ignore convention)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attncourse import scaled_dot_product_attention
from attncourse.masks import (
    causal_mask,
    combine_masks,
    from_ignore_mask,
    from_multihead_masks,
    padding_mask,
    to_additive,
    to_boolean,
    to_ignore_mask,
)


def _randn(*shape, seed, dtype=torch.float64, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype).to(
        device
    )


# -- padding ---------------------------------------------------------------------------------


def test_padding_mask_of_the_sources_batch():
    # Two sequences of length 3; the second has one real token and two pads.
    expected = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    assert torch.equal(padding_mask([3, 1]), expected)
    assert torch.equal(padding_mask(torch.tensor([3, 1]), max_len=3), expected)


@pytest.mark.parametrize("lengths,max_len", [([0, 4, 2, 5], 7), ([1], None), ([0, 0], 3), ([], 4)])
def test_padding_mask_matches_a_loop(lengths, max_len, device):
    mask = padding_mask(torch.tensor(lengths, dtype=torch.long), max_len, device=device)
    width = max(lengths, default=0) if max_len is None else max_len
    expected = torch.tensor(
        [[j < n for j in range(width)] for n in lengths], dtype=torch.bool
    ).reshape(len(lengths), width)
    assert mask.dtype == torch.bool and mask.device.type == torch.device(device).type
    assert torch.equal(mask.cpu(), expected)


@pytest.mark.parametrize(
    "lengths,max_len,error,words",
    [
        ([3, -1], None, ValueError, "non-negative"),
        ([3, 5], 4, ValueError, "exceed max_len=4"),
        ([2.0, 1.0], None, TypeError, "integers"),
        (torch.tensor([True, False]), None, TypeError, "integers"),
        (torch.ones(2, 2, dtype=torch.long), None, ValueError, "one-dimensional"),
        ([2, 1], -3, ValueError, "max_len"),
        ([2, 1], 2.5, TypeError, "max_len"),
    ],
)
def test_padding_mask_rejects_bad_lengths(lengths, max_len, error, words):
    if isinstance(lengths, list) and lengths and isinstance(lengths[0], float):
        lengths = torch.tensor(lengths)
    with pytest.raises(error, match=words):
        padding_mask(lengths, max_len)


def test_padding_changes_no_output(device):
    """Rewriting the content of padded key positions changes no output and no weight."""
    lengths = torch.tensor([5, 2, 3])
    keep = padding_mask(lengths, 6, device=device)[:, None, :]  # (B, 1, S): mask the keys
    q, k, v = (
        _randn(3, 4, 8, seed=1, device=device),
        _randn(3, 6, 8, seed=2, device=device),
        _randn(3, 6, 5, seed=3, device=device),
    )
    out, w = scaled_dot_product_attention(q, k, v, keep)
    pads = ~keep.transpose(1, 2)  # (B, S, 1)
    k2 = torch.where(pads, _randn(3, 6, 8, seed=4, device=device) * 100, k)
    v2 = torch.where(pads, _randn(3, 6, 5, seed=5, device=device) * 100, v)
    out2, w2 = scaled_dot_product_attention(q, k2, v2, keep)
    assert torch.equal(out, out2) and torch.equal(w, w2)
    assert torch.all(w.masked_select(~keep.expand_as(w)) == 0)
    # Without the mask the pads do leak in.
    assert not torch.allclose(
        scaled_dot_product_attention(q, k, v)[0], scaled_dot_product_attention(q, k2, v2)[0]
    )


# -- causal ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@pytest.mark.parametrize("query_len,key_len", [(1, 1), (5, 5), (2, 6), (3, 7), (6, 2), (4, 5)])
def test_causal_mask_is_torch_lower_right(query_len, key_len):
    expected = causal_lower_right(query_len, key_len)._materialize()
    assert torch.equal(causal_mask(query_len, key_len), expected)


def test_causal_mask_square_is_tril_and_sdpa_is_causal():
    assert torch.equal(causal_mask(6), torch.tril(torch.ones(6, 6, dtype=torch.bool)))
    q, k, v = _randn(2, 6, 4, seed=6), _randn(2, 6, 4, seed=7), _randn(2, 6, 3, seed=8)
    ours, _ = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch_out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(ours, torch_out, atol=1e-12)


def test_causal_alignment_differs_from_is_causal_when_lengths_differ():
    """2 new queries over 5 keys (3 cached + 2 new): the last query sees every key."""
    ours = causal_mask(2, 5)
    assert torch.equal(ours, torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))
    top_left = causal_upper_left(2, 5)._materialize()
    assert torch.equal(top_left, torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool))
    q, k, v = _randn(2, 5, seed=9), _randn(5, 5, seed=10), _randn(5, 3, seed=11)
    is_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(is_causal, scaled_dot_product_attention(q, k, v, top_left)[0], atol=1e-12)
    assert not torch.allclose(is_causal, scaled_dot_product_attention(q, k, v, ours)[0])


def test_causal_mask_with_fewer_keys_leaves_the_first_queries_empty():
    mask = causal_mask(5, 3)
    assert not mask[:2].any() and mask[2:].sum(-1).tolist() == [1, 2, 3]


def test_future_token_changes_no_earlier_output(device):
    L = 7
    x = _randn(1, L, 8, seed=12, device=device)
    out, _ = scaled_dot_product_attention(x, x, x, causal_mask(L, device=device))
    for t in range(L):
        y = x.clone()
        y[:, t] = _randn(8, seed=13 + t, device=device)
        out2, _ = scaled_dot_product_attention(y, y, y, causal_mask(L, device=device))
        assert torch.equal(out[:, :t], out2[:, :t]), t
        assert not torch.allclose(out[:, t:], out2[:, t:])


@pytest.mark.parametrize(
    "query_len, key_len, error",
    [(-1, 3, ValueError), (3, -2, ValueError), (2.0, 3, TypeError), (True, 2, TypeError)]
    + [(3, 1.5, TypeError), (torch.tensor(3), 3, TypeError)],
)
def test_causal_mask_rejects_bad_lengths(query_len, key_len, error):
    # a wrong value is a ValueError, a wrong type (a float, a bool, a 0-d tensor) a TypeError
    with pytest.raises(error, match="must be a non-negative integer"):
        causal_mask(query_len, key_len)


def test_a_0d_tensor_length_is_refused_with_the_way_out():
    with pytest.raises(TypeError, match=r"query_len must be .*0-d tensor.*query_len.item\(\)"):
        causal_mask(torch.tensor(3))


@pytest.mark.parametrize("query_len,key_len", [(0, 3), (3, 0), (0, 0)])
def test_causal_mask_of_an_empty_dimension_is_empty(query_len, key_len):
    mask = causal_mask(query_len, key_len)
    assert mask.shape == (query_len, key_len) and mask.dtype == torch.bool


# -- combining and converting -----------------------------------------------------------------


def test_combine_boolean_masks_is_logical_and():
    pad = padding_mask([4, 2], 4)[:, None, :]  # (2, 1, 4)
    both = combine_masks(causal_mask(4), pad, None)
    assert both.shape == (2, 4, 4) and both.dtype == torch.bool
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert bool(both[b, i, j]) == (j <= i and bool(pad[b, 0, j]))
    assert combine_masks() is None and combine_masks(None, None) is None


def test_combine_with_a_float_mask_adds_and_matches_boolean_attention():
    bias = _randn(4, 4, seed=20)  # an additive bias (e.g. a relative-position term)
    pad = padding_mask([4, 3], 4)[:, None, :]
    combined = combine_masks(bias, causal_mask(4), pad)
    assert combined.dtype == torch.float64 and combined.shape == (2, 4, 4)
    # built without to_additive: the bias where both masks keep, -inf elsewhere
    keep = torch.ones(4, 4, dtype=torch.bool).tril()[None] & pad
    expected = torch.where(keep, bias, torch.tensor(float("-inf"), dtype=torch.float64))
    assert torch.equal(combined, expected)
    # and in attention: the package's with the combined mask is torch's with the bias added
    # to the scores where both boolean masks keep
    q, k, v = (_randn(2, 4, 3, seed=s) for s in (22, 23, 24))
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, combined)[0],
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~keep, float("-inf"))),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_combine_keeps_the_float_masks_dtype_whatever_comes_first(dtype):
    """A boolean mask before a half-precision bias: the sum is in the bias's dtype, not
    float32 (which would silently promote a float16 model's scores)."""
    bias = _randn(4, 4, seed=21).to(dtype)
    combined = combine_masks(causal_mask(4), bias)
    assert combined.dtype == dtype
    expected = bias.masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf"))
    assert torch.equal(combined, expected)


def test_combine_masks_errors():
    with pytest.raises(ValueError, match="do not broadcast"):
        combine_masks(torch.ones(3, 4, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean or floating"):
        combine_masks(torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        combine_masks([[True]])


def test_conversions_round_trip_and_agree_in_attention():
    keep = torch.rand(3, 5, 6, generator=torch.Generator().manual_seed(0)) > 0.3
    keep[..., 0] = True
    additive = to_additive(keep, torch.float64)
    assert set(additive.unique().tolist()) == {0.0, float("-inf")}
    assert torch.equal(to_boolean(additive), keep) and to_boolean(keep) is keep
    assert torch.equal(to_ignore_mask(keep), ~keep) and torch.equal(
        from_ignore_mask(to_ignore_mask(keep)), keep
    )
    assert from_ignore_mask(additive) is additive  # floats mean the same in both conventions
    q, k, v = _randn(3, 5, 4, seed=21), _randn(3, 6, 4, seed=22), _randn(3, 6, 2, seed=23)
    a = scaled_dot_product_attention(q, k, v, keep)[0]
    assert torch.allclose(a, scaled_dot_product_attention(q, k, v, additive)[0], atol=1e-12)
    assert torch.allclose(a, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), atol=1e-12)


def test_to_boolean_refuses_what_has_no_boolean_form():
    with pytest.raises(ValueError, match="0 \\(keep\\) and -inf"):
        to_boolean(torch.tensor([[0.0, -1e9]]))
    with pytest.raises(TypeError, match="boolean or floating"):
        to_boolean(torch.tensor([[0, 1]]))


def test_from_multihead_masks_shapes_and_errors():
    B, H, L, S = 2, 3, 4, 5
    attn3 = torch.zeros(B * H, L, S, dtype=torch.bool)
    attn3[1 * H + 2, 0, 2] = True  # batch 1, head 2, query 0 ignores key 2
    kpm = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    mask = from_multihead_masks(attn3, kpm, num_heads=H)
    assert mask.shape == (B, H, L, S) and mask.dtype == torch.bool
    assert not mask[1, 2, 0, 2] and mask[1, 1, 0, 2] and mask[0, 2, 0, 2]
    assert not mask[1, :, :, 3:].any() and mask[0].all()
    assert from_multihead_masks(num_heads=H) is None
    assert from_multihead_masks(torch.zeros(L, S), None, num_heads=H).shape == (L, S)
    with pytest.raises(ValueError, match="not a multiple of num_heads=3"):
        from_multihead_masks(torch.zeros(4, L, S, dtype=torch.bool), num_heads=H)
    with pytest.raises(ValueError, match="key_padding_mask must have shape \\(B, S\\)"):
        from_multihead_masks(None, torch.zeros(S, dtype=torch.bool), num_heads=H)
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        from_multihead_masks(torch.zeros(1, 1, L, S), num_heads=H)


def test_edges_a_mutation_audit_found():
    # complex lengths are refused as not integers (a TypeError, not torch's NotImplementedError)
    with pytest.raises(TypeError, match="lengths must hold integers"):
        padding_mask(torch.tensor([1 + 0j, 2 + 0j]), 3)
    # the additive result takes the first floating mask's dtype
    wide, half = torch.zeros(2, 2, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float16)
    assert combine_masks(wide, half).dtype == torch.float64
    assert combine_masks(half, wide).dtype == torch.float16
    # a 3-D attn_mask is (B * num_heads, L, S), batch-major as torch reads it: one marked row
    # (batch 0, head 1) must land at [0, 1] and nowhere else
    B, H = 2, 3
    blocked = torch.zeros(B * H, 4, 5, dtype=torch.bool)
    blocked[0 * H + 1, 2, 3] = True  # torch's convention: True = may not attend
    mask = from_multihead_masks(blocked, None, num_heads=H)
    refused = ~mask.expand(B, H, 4, 5)
    assert refused.nonzero().tolist() == [[0, 1, 2, 3]]
