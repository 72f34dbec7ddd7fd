"""Tests of chapter 8's adaptive attention span, against independent references."""

import math

import pytest
import torch
from torch.nn import functional as F

from attncourse.adaptive_span import (
    AdaptiveSpan,
    AdaptiveSpanAttention,
    AdaptiveSpanBlock,
    adaptive_span_attention,
    adaptive_span_lm,
    attention_cells,
    block_plan,
    clamp_spans,
    computed_cells,
    soft_span_mask,
    span_penalty,
    span_window,
)
from attncourse.course.span_task import near_far_copy_task, near_far_entropy
from attncourse.masks import causal_mask
from attncourse.training import next_token_loss, train


def _qkv(batch=2, heads=3, length=11, dim=4, *, seed=0, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, heads, length, dim, generator=g, dtype=dtype).to(device)
        for _ in range(3)
    ]


def _reference(query, key, value, span, ramp):
    """Dense float64 recomputation of the paper's formula over the full causal window."""
    q, k, v, z = (t.double() for t in (query, key, value, span))
    length = q.size(-2)
    i = torch.arange(length, device=q.device)
    distance = (i[:, None] - i[None, :]).double()  # (L, L): query i, key j, distance i - j
    mask = ((ramp + z[:, None, None] - distance) / ramp).clamp(0, 1) * (distance >= 0)  # (H, L, L)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    probs = torch.softmax(scores.masked_fill(distance < 0, float("-inf")), dim=-1)
    weights = probs * mask
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v, weights


def _to_dense(weights_by_distance, length):
    """(..., L, W) weights by distance -> (..., L, L) weights by key position."""
    dense = weights_by_distance.new_zeros(*weights_by_distance.shape[:-1], length)
    for t in range(length):
        for x in range(min(weights_by_distance.size(-1), t + 1)):
            dense[..., t, t - x] = weights_by_distance[..., t, x]
    return dense


# -- the soft mask ---------------------------------------------------------------------------


def test_mask_at_its_breakpoints():
    z, ramp = 5.0, 4.0
    distance = torch.arange(-2, 13)
    # x = -2..12: 1 up to z = 5, 0 from z + R = 9
    expected = [1, 1] + [1] * 6 + [0.75, 0.5, 0.25] + [0, 0, 0, 0]
    torch.testing.assert_close(
        soft_span_mask(distance, z, ramp), torch.tensor(expected, dtype=torch.float32)
    )
    # exactly 1 at x = z and exactly 0 at x = z + R, for non-integer z and R as well
    z, ramp = torch.tensor(3.7, dtype=torch.float64), 2.5
    points = torch.tensor([3.7, 3.7 + 1.25, 6.2, 6.3], dtype=torch.float64)
    torch.testing.assert_close(
        soft_span_mask(points, z, ramp), torch.tensor([1.0, 0.5, 0.0, 0.0], dtype=torch.float64)
    )


def test_mask_broadcasts_one_span_per_head():
    spans = torch.tensor([0.0, 2.0, 10.0])[:, None, None]  # (H, 1, 1)
    distance = torch.arange(12)[None, :].expand(5, 12)  # (L, S)
    mask = soft_span_mask(distance, spans, 4)
    assert mask.shape == (3, 5, 12)
    for h, z in enumerate([0.0, 2.0, 10.0]):
        expected = torch.tensor([min(max((4 + z - x) / 4, 0), 1) for x in range(12)])
        torch.testing.assert_close(mask[h, 3], expected)


def test_gradient_reaches_the_span_only_through_the_ramp():
    z = torch.tensor(5.3, dtype=torch.float64, requires_grad=True)
    ramp = 4.0
    distance = torch.arange(0, 14, dtype=torch.float64)
    (grad,) = torch.autograd.grad(
        soft_span_mask(distance, z, ramp),
        z,
        torch.eye(14, dtype=torch.float64),
        is_grads_batched=True,
    )
    on_ramp = (distance > 5.3) & (distance < 9.3)  # x = 6, 7, 8, 9
    assert on_ramp.sum() == 4
    torch.testing.assert_close(grad, on_ramp.double() / ramp)


def test_span_window_is_the_last_nonzero_distance_plus_one():
    for z, ramp in [(0.0, 8), (4.0, 8), (4.5, 8), (31.99, 2.0), (7.0, 0.5)]:
        w = span_window(torch.tensor([0.0, z]), ramp)
        mask = soft_span_mask(torch.arange(w + 5, dtype=torch.float64), z, ramp)
        assert mask[w - 1] > 0 and (mask[w:] == 0).all(), (z, ramp, w)


# -- the attention -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_dense_recomputation_and_torch_sdpa(device, dtype):
    q, k, v = _qkv(length=13, dtype=dtype, device=device)
    span = torch.tensor([0.0, 2.6, 30.0], dtype=dtype, device=device)
    ramp = 3.0
    output, weights = adaptive_span_attention(q, k, v, span, ramp)
    expected_out, expected_w = _reference(q, k, v, span, ramp)
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(output.double(), expected_out, **tol)
    torch.testing.assert_close(_to_dense(weights, 13).double(), expected_w, **tol)
    # The same attention is softmax(scores + log m): an independent check with torch's own SDPA.
    i = torch.arange(13, device=device)
    distance = (i[:, None] - i[None, :]).to(dtype)
    mask = soft_span_mask(distance, span[:, None, None], ramp) * (distance >= 0)
    log_mask = torch.where(
        mask > 0,
        mask.clamp_min(1e-30).log(),
        torch.tensor(float("-inf"), dtype=dtype, device=device),
    )
    torch.testing.assert_close(
        output, F.scaled_dot_product_attention(q, k, v, attn_mask=log_mask), **tol
    )


@pytest.mark.parametrize("length, block_m", [(11, 4), (23, 16), (13, 5)])
def test_blocks_that_do_not_divide_the_length(length, block_m):
    # the last block is padded: the output and the weights keep exactly L rows
    q, k, v = _qkv(length=length, seed=7)
    span = torch.tensor([0.5, 1.0, 2.5], dtype=torch.float64)
    output, weights = adaptive_span_attention(q, k, v, span, 1.0, block_m=block_m)
    # W = ceil(2.5 + 1)
    assert output.shape == (2, 3, length, 4) and weights.shape == (
        2,
        3,
        length,
        4,
    )
    expected_out, expected_w = _reference(q, k, v, span, 1.0)
    torch.testing.assert_close(output, expected_out, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(_to_dense(weights, length), expected_w, atol=1e-12, rtol=1e-10)


def test_rows_sum_to_one_and_nothing_beyond_the_span(device):
    q, k, v = _qkv(length=20, device=device)
    span = torch.tensor([1.0, 4.0, 6.5], dtype=torch.float64, device=device)
    _, weights = adaptive_span_attention(q, k, v, span, 2.0, window=20)
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(2, 3, 20, dtype=torch.float64, device=device)
    )
    for h, z in enumerate(span.tolist()):
        assert (weights[:, h, :, math.ceil(z + 2.0) :] == 0).all()
    assert (weights[:, 2, 5, 6:] == 0).all()  # query 5 has no key at distance 6 or more


def test_trimmed_equals_untrimmed(device):
    q, k, v = _qkv(length=40, dim=8, seed=3, dtype=torch.float32, device=device)
    span = torch.tensor([2.0, 9.3, 5.0], device=device)
    trimmed_out, trimmed_w = adaptive_span_attention(q, k, v, span, 4.0, block_m=5)
    full_out, full_w = adaptive_span_attention(q, k, v, span, 4.0, window=40)
    # ceil(9.3 + 4) = 14 keys instead of 40
    assert trimmed_w.size(-1) == 14 and full_w.size(-1) == 40
    torch.testing.assert_close(trimmed_out, full_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(trimmed_w, full_w[..., :14], atol=1e-6, rtol=1e-5)
    assert (full_w[..., 14:] == 0).all()


def test_layer_trimmed_equals_untrimmed_and_cells_fall_with_the_span(device):
    torch.manual_seed(0)
    layer = AdaptiveSpanAttention(16, 4, max_span=32, ramp=4, init_span=32.0).to(device)
    x = torch.randn(3, 50, 16, device=device)
    cells = []
    for z in [32.0, 20.0, 7.5, 0.0]:
        with torch.no_grad():
            layer.span.span_fraction.fill_(z / 32)
        layer.trim = True
        out, _ = layer(x)
        cells.append(layer.cells)
        assert layer.cells == 3 * 4 * computed_cells(50, math.ceil(z + 4))
        layer.trim = False
        full, _ = layer(x)
        assert layer.cells == 3 * 4 * 50 * 50
        torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-4)
    assert cells == sorted(cells, reverse=True) and cells[-1] < cells[0] / 2


def test_one_long_head_keeps_the_layer_wide():
    layer = AdaptiveSpanAttention(16, 4, max_span=64, ramp=8)
    with torch.no_grad():
        layer.span.span_fraction.copy_(torch.tensor([0.0, 0.0, 0.0, 0.75]))
    layer(torch.randn(1, 100, 16))
    assert layer.cells == 4 * computed_cells(100, 56)  # W = ceil(48 + 8), set by the one long head
    # 7 blocks of 16 queries, each with 16 + 55 keys
    assert computed_cells(100, 56) == 7 * 16 * (16 + 55)


def test_computed_cells_fall_with_the_window_and_never_exceed_the_plain_count():
    counts = [computed_cells(200, w) for w in range(1, 201)]
    assert all(c <= 200 * 200 for c in counts)
    assert counts == sorted(counts) and counts[-1] == 200 * 200
    # ceil(200 / 16) = 13 blocks of 16 queries, 16 + 7 keys each
    assert computed_cells(200, 8) == 13 * 16 * 23
    assert computed_cells(200, 8, block_m=4) == 50 * 4 * 11
    assert computed_cells(10, 8) == 100  # one block with 10 + 7 keys would cost more than 10 x 10


def test_gradcheck_including_the_span():
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 9, 3, seed=5))
    span = torch.tensor([1.3, 4.6], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v, z: adaptive_span_attention(q, k, v, z, 2.0)[0], (q, k, v, span)
    )


def test_span_gradient_is_nonzero_only_when_a_key_is_on_the_ramp():
    q, k, v = _qkv(1, 2, 12, 4, seed=6)
    # head 1: ramp beyond the sequence
    span = torch.tensor([3.5, 20.0], dtype=torch.float64, requires_grad=True)
    output, _ = adaptive_span_attention(q, k, v, span, 2.0)
    output.square().sum().backward()
    assert span.grad[0] != 0 and span.grad[1] == 0


def test_causal_invariance(device):
    torch.manual_seed(1)
    model = adaptive_span_lm(
        10, max_span=8, ramp=2, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=30
    ).to(device)
    model.eval()
    tokens = torch.randint(10, (2, 30), device=device)
    changed = tokens.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % 10
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :20], b[:, :20])
    assert not torch.allclose(a[:, 20:], b[:, 20:])


def test_a_key_beyond_every_span_cannot_change_an_output():
    torch.manual_seed(2)
    layer = AdaptiveSpanAttention(8, 2, max_span=16, ramp=2, init_span=3.0)
    x = torch.randn(1, 20, 8)
    y = x.clone()
    # position 5 is 5 + 2 = 7 or more back from positions 12..19 (span 3 + ramp 2 = 5)
    y[:, 5] += 10.0
    with torch.no_grad():
        a, _ = layer(x)
        b, _ = layer(y)
    torch.testing.assert_close(a[:, 10:], b[:, 10:])
    assert not torch.allclose(a[:, 5:10], b[:, 5:10])


# -- spans, clamping, penalty, training ---------------------------------------------------------


def test_spans_in_positions_clamping_and_penalty():
    span = AdaptiveSpan(4, max_span=64, ramp=8, init_span=48.0)
    torch.testing.assert_close(span.spans, torch.full((4,), 48.0))
    with torch.no_grad():
        span.span_fraction.copy_(torch.tensor([-0.3, 0.25, 1.7, 1.0]))
    span.clamp_()
    torch.testing.assert_close(span.spans, torch.tensor([0.0, 16.0, 64.0, 64.0]))
    penalty = span.penalty(0.01)
    torch.testing.assert_close(penalty, torch.tensor(0.01 * (0 + 16 + 64 + 64) / 4))
    penalty.backward()
    torch.testing.assert_close(span.span_fraction.grad, torch.full((4,), 0.01 * 64 / 4))
    assert span.window() == 72 and span.window(length=50) == 50


def test_training_loop_clamps_and_the_penalty_shrinks_spans():
    torch.manual_seed(0)
    model = adaptive_span_lm(
        8, max_span=16, ramp=2, d_model=16, num_heads=2, d_ff=0, max_len=24, init_span=16.0
    )
    tokens = torch.randint(8, (4, 24))
    # big steps overshoot [0, 1] without the clamp
    optimizer = torch.optim.SGD(model.parameters(), lr=50.0)
    losses = train(
        model,
        lambda step: tokens,
        # a penalty far stronger than the task's pull (its gradient on z' is 1.0 * 16 / 2 per head)
        lambda m, batch: next_token_loss(m(batch), batch) + span_penalty(m, 1.0),
        steps=3,
        optimizer=optimizer,
        after_step=clamp_spans,
        progress=False,
    )
    assert len(losses) == 3
    fraction = model.blocks[0].self_attn.span.span_fraction
    # pushed below 0, clamped to 0
    assert (fraction >= 0).all() and (fraction <= 1).all() and (fraction == 0).all()
    model(tokens)
    # W = ceil(0 + 2) = 2
    assert attention_cells(model) == 4 * 2 * computed_cells(24, 2) == 4 * 2 * 2 * 16 * 17


def test_span_penalty_sums_over_layers():
    model = adaptive_span_lm(
        8, max_span=10, ramp=2, d_model=8, num_heads=2, d_ff=0, num_layers=3, init_span=5.0
    )
    torch.testing.assert_close(span_penalty(model, 0.1), torch.tensor(3 * 0.1 * 5.0))
    with pytest.raises(ValueError, match="no AdaptiveSpan"):
        span_penalty(torch.nn.Linear(2, 2), 0.1)


def test_frozen_span_does_not_learn():
    span = AdaptiveSpan(2, max_span=16, ramp=2, init_span=8.0, learnable=False)
    assert not span.span_fraction.requires_grad


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ramp, error",
    [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError)]
    + [(True, TypeError), ("2", TypeError), (torch.tensor(2.0), TypeError)],
)
def test_bad_ramp(ramp, error):
    with pytest.raises(error, match="ramp"):
        soft_span_mask(torch.arange(4), 2.0, ramp)
    with pytest.raises(error, match="ramp"):
        AdaptiveSpan(2, 8, ramp)


def test_bad_input_messages():
    with pytest.raises(ValueError, match="init_span"):
        AdaptiveSpan(2, max_span=8, ramp=2, init_span=9.0)
    with pytest.raises(ValueError, match="init_span"):
        AdaptiveSpan(2, max_span=8, ramp=2, init_span=-1.0)
    with pytest.raises(ValueError, match="max_span"):
        AdaptiveSpan(2, max_span=0, ramp=2)
    with pytest.raises(TypeError, match="distance"):
        soft_span_mask([0, 1, 2], 2.0, 1.0)
    with pytest.raises(ValueError, match=r"distance \(3,\), span \(4,\)"):
        soft_span_mask(torch.arange(3), torch.ones(4), 1.0)
    q, k, v = _qkv(1, 2, 6, 4)
    with pytest.raises(ValueError, match=">= 0"):
        adaptive_span_attention(q, k, v, torch.tensor([1.0, -0.5], dtype=torch.float64), 2.0)
    with pytest.raises(ValueError, match="span has 3 entries but query has 2 heads"):
        adaptive_span_attention(q, k, v, torch.ones(3, dtype=torch.float64), 2.0)
    with pytest.raises(ValueError, match="window=3 would drop keys"):
        adaptive_span_attention(
            q, k, v, torch.tensor([1.0, 2.0], dtype=torch.float64), 2.0, window=3
        )
    with pytest.raises(ValueError, match="query must have exactly 4 dimensions"):
        adaptive_span_attention(q[0], k[0], v[0], torch.ones(2, dtype=torch.float64), 2.0)
    with pytest.raises(ValueError, match="self-attention"):
        adaptive_span_attention(
            q, k[:, :, :5], v[:, :, :5], torch.ones(2, dtype=torch.float64), 2.0
        )
    with pytest.raises(TypeError, match="dtype"):
        adaptive_span_attention(q, k.float(), v, torch.ones(2, dtype=torch.float64), 2.0)
    layer = AdaptiveSpanAttention(8, 2, max_span=4, ramp=1)
    with pytest.raises(ValueError, match="causal by construction"):
        layer(torch.randn(1, 5, 8), torch.ones(5, 5, dtype=torch.bool))
    layer(torch.randn(1, 5, 8), causal_mask(5))  # the causal mask is accepted
    with pytest.raises(ValueError, match="embed_dim"):
        layer(torch.randn(1, 5, 6))
    with pytest.raises(ValueError, match="num_heads=3 must divide embed_dim=8"):
        AdaptiveSpanAttention(8, 3, max_span=4, ramp=1)
    with pytest.raises(ValueError, match="weight"):
        layer.span.penalty(-1.0)


def test_more_bad_input_messages():
    q, k, v = _qkv(1, 2, 6, 4)
    span = torch.ones(2, dtype=torch.float64)
    # a value of rank 3 or 5 whose first three sizes match the query's
    with pytest.raises(ValueError, match=r"value must have exactly 4 dimensions.*\(1, 2, 6\)"):
        adaptive_span_attention(q, k, v[..., 0], span, 2.0)
    with pytest.raises(
        ValueError, match=r"value must have exactly 4 dimensions.*\(1, 2, 6, 4, 1\)"
    ):
        adaptive_span_attention(q, k, v[..., None], span, 2.0)
    with pytest.raises(ValueError, match=r"position_bias must have exactly 2 dimensions.*\(2,\)"):
        adaptive_span_attention(
            q, k, v, span, 2.0, position_bias=torch.zeros(2, dtype=torch.float64)
        )
    # the span and the ramp are checked even when there is no query
    with pytest.raises(ValueError, match=">= 0"):
        adaptive_span_attention(
            q[:, :, :0],
            k[:, :, :0],
            v[:, :, :0],
            torch.tensor([1.0, -0.5], dtype=torch.float64),
            2.0,
        )
    # a span on another device (meta tensors: no GPU needed)
    with pytest.raises(ValueError, match=r"span must be on the device of query \(cpu\), got meta"):
        adaptive_span_attention(q, k, v, span.to("meta"), 2.0)
    with pytest.raises(
        ValueError, match="span and distance must be on the same device, got meta and cpu"
    ):
        soft_span_mask(torch.arange(4), torch.ones(2, 1, device="meta"), 1.0)


@pytest.mark.parametrize("distance_dtype", [torch.int64, torch.float64, torch.float16])
def test_mask_has_the_dtype_of_the_span(distance_dtype):
    # the distances are cast to the span's dtype: a float32 span gives a float32 mask
    distance = torch.arange(6).to(distance_dtype)
    span = torch.tensor([[1.5], [3.0]])
    mask = soft_span_mask(distance, span, 2.0)
    assert mask.dtype == torch.float32
    expected = ((2.0 + span.double() - torch.arange(6).double()) / 2.0).clamp(0, 1)
    torch.testing.assert_close(mask.double(), expected)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_span_of_another_dtype_is_used_in_the_query_dtype(dtype):
    # a float32 span (or position bias) with float64 or bfloat16 inputs: the mask is computed in the inputs' dtype,
    # exactly as if the span had been converted first
    q, k, v = (t.to(dtype) for t in _qkv(2, 2, 9, 4, seed=3))
    span = torch.tensor([1.3, 2.7])
    out, weights = adaptive_span_attention(q, k, v, span, 2.0)
    ref_out, ref_weights = adaptive_span_attention(q, k, v, span.to(dtype), 2.0)
    assert out.dtype == weights.dtype == dtype
    assert torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
    # the same for a float32 position bias
    bias = torch.randn(2, 5, generator=torch.Generator().manual_seed(4))
    out, weights = adaptive_span_attention(q, k, v, span.to(dtype), 2.0, position_bias=bias)
    ref_out, ref_weights = adaptive_span_attention(
        q, k, v, span.to(dtype), 2.0, position_bias=bias.to(dtype)
    )
    assert out.dtype == weights.dtype == dtype
    assert torch.equal(out, ref_out) and torch.equal(weights, ref_weights)


def test_init_span_bounds_are_inclusive():
    for init_span in (0, 0.0, 0.5, 8):
        span = AdaptiveSpan(2, max_span=8, ramp=2, init_span=init_span)
        torch.testing.assert_close(span.spans.detach(), torch.full((2,), float(init_span)))
    for bad in (True, "4", -0.1, 8.5):
        with pytest.raises(ValueError, match="init_span must be a number in"):
            AdaptiveSpan(2, max_span=8, ramp=2, init_span=bad)


def test_projections_have_biases_by_default():
    # like nn.MultiheadAttention: biases unless bias=False
    layer = AdaptiveSpanAttention(8, 2, max_span=4, ramp=1)
    no_bias = AdaptiveSpanAttention(8, 2, max_span=4, ramp=1, bias=False)
    projections = ("q_proj", "k_proj", "v_proj", "out_proj")
    assert all(getattr(layer.projections, name).bias is not None for name in projections)
    assert all(getattr(no_bias.projections, name).bias is None for name in projections)
    # and a relative position bias per head and distance unless position_bias=False
    assert layer.position_bias is not None and layer.position_bias.shape == (2, 4 + 1)
    assert (
        AdaptiveSpanAttention(8, 2, max_span=4, ramp=1, position_bias=False).position_bias is None
    )
    with pytest.raises(ValueError, match=r"x must have exactly 3 dimensions.*\(5, 8\)"):
        layer(torch.randn(5, 8))


@pytest.mark.parametrize("d_ff", [32, 1, 0])
def test_block_is_post_norm_residual_attention_and_ffn(d_ff):
    torch.manual_seed(0)
    block = AdaptiveSpanBlock(16, 4, d_ff, max_span=6, ramp=2.0).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    mask = causal_mask(9)
    attended, weights = block.self_attn(x, mask)
    h = F.layer_norm(x + attended, (16,), block.norm1.weight, block.norm1.bias)
    if d_ff:
        ffn = F.linear(
            F.relu(F.linear(h, block.ffn.linear1.weight, block.ffn.linear1.bias)),
            block.ffn.linear2.weight,
            block.ffn.linear2.bias,
        )
        h = F.layer_norm(h + ffn, (16,), block.norm3.weight, block.norm3.bias)
    else:
        assert block.ffn is None and block.norm3 is None
    torch.testing.assert_close(block(x, mask), h)
    torch.testing.assert_close(block.self_weights, weights.detach())
    assert not block.self_weights.requires_grad
    # the dtype is named first
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        block(torch.ones(2, 9, dtype=torch.long))


def test_half_precision_is_close_to_float64():
    q, k, v = _qkv(1, 2, 16, 8, seed=9)
    span = torch.tensor([2.0, 6.0], dtype=torch.float64)
    expected, _ = adaptive_span_attention(q, k, v, span, 2.0)
    got, weights = adaptive_span_attention(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), span.bfloat16(), 2.0
    )
    assert got.dtype == weights.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), expected, atol=3e-2, rtol=3e-2)


# -- the synthetic task ---------------------------------------------------------------------------


def test_near_far_task_follows_its_rule():
    tokens = near_far_copy_task(256, 60, vocab_size=16, near=3, far=30, noise=0.1, seed=1)
    assert tokens.shape == (256, 60) and tokens.dtype == torch.int64
    prev = tokens[:, 29:59]
    rule = torch.where(prev < 8, tokens[:, 27:57], tokens[:, 0:30])
    agreement = (tokens[:, 30:] == rule).double().mean().item()
    assert abs(agreement - (0.9 + 0.1 / 16)) < 0.01
    assert torch.equal(
        tokens, near_far_copy_task(256, 60, vocab_size=16, near=3, far=30, noise=0.1, seed=1)
    )
    # the entropy floor equals the cross-entropy of the exact predictive distribution
    p = torch.full((16,), 0.1 / 16, dtype=torch.float64)
    p[0] += 0.9
    assert abs(near_far_entropy(16, 0.1) - float(-(p * p.log()).sum())) < 1e-9
    with pytest.raises(ValueError, match="near < far < length"):
        near_far_copy_task(2, 20, near=5, far=30)


def test_position_bias_is_added_per_head_and_distance(device):
    q, k, v = _qkv(2, 3, 21, 4, seed=11, device=device)
    span = torch.tensor([2.0, 5.5, 9.0], dtype=torch.float64, device=device)
    bias = torch.randn(3, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(12)).to(
        device
    )
    got, _ = adaptive_span_attention(q, k, v, span, 3.0, position_bias=bias, block_m=4)
    # reference: the bias enters the scores, i.e. multiplies each probability by exp(bias[h, i - j])
    i = torch.arange(21, device=device)
    distance = i[:, None] - i[None, :]
    # (H, L, L); beyond distance 11 the mask is 0 anyway
    dense_bias = bias[:, distance.clamp(0, 11)]
    scores = q @ k.transpose(-2, -1) / 2 + dense_bias
    mask = soft_span_mask(distance.double(), span[:, None, None], 3.0) * (distance >= 0)
    weights = torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) * mask
    torch.testing.assert_close(got, (weights / weights.sum(-1, keepdim=True)) @ v)
    with pytest.raises(ValueError, match="position_bias"):
        adaptive_span_attention(q, k, v, span, 3.0, position_bias=bias[:, :5])


@pytest.mark.parametrize("fraction", [1.25, -0.1])
def test_span_fraction_outside_the_unit_interval_is_named(fraction):
    layer = AdaptiveSpanAttention(16, 2, max_span=8, ramp=2.0)
    with torch.no_grad():
        layer.span.span_fraction.fill_(fraction)
    with pytest.raises(ValueError, match=r"span_fraction must lie in \[0, 1\].*clamp"):
        layer(torch.randn(1, 12, 16))
    layer.span.clamp_()
    assert layer(torch.randn(1, 12, 16))[0].shape == (1, 12, 16)


def test_block_plan_by_hand_and_its_checks():
    """Blocks of 16 queries by default, each meeting its own keys and the window - 1 before them;
    one plain block when that is no cheaper than L * L."""
    assert block_plan(64, 8) == (4, 16, 23)  # 4 * 16 * 23 = 1472 < 4096 scores
    assert block_plan(64, 8, 32) == (2, 32, 39)
    assert block_plan(40, 8) == (3, 16, 23)  # the last block is short: ceil(40 / 16)
    assert block_plan(64, 64) == (1, 64, 64)  # the window covers the sequence
    assert block_plan(20, 10) == (1, 20, 20)  # 2 * 16 * 25 = 800 >= 400: the plain computation
    assert block_plan(8, 100) == (1, 8, 8)  # a window longer than the sequence
    for kwargs, name in (
        (dict(length=0, window=4), "length"),
        (dict(length=8, window=0), "window"),
        (dict(length=8, window=4, block_m=0), "block_m"),
    ):
        with pytest.raises(ValueError, match=name):
            block_plan(**kwargs)
    with pytest.raises(TypeError, match="length"):
        block_plan(8.0, 4)


def test_adaptive_span_learnable_is_a_bool():
    with pytest.raises(TypeError, match="learnable"):
        AdaptiveSpan(2, 16, 4.0, learnable=1)
    assert not AdaptiveSpan(2, 16, 4.0, learnable=False).span_fraction.requires_grad
