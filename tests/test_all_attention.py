"""Tests of attncourse.all_attention and attncourse.course.lookup_task (chapter 9)."""

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from attncourse.all_attention import (
    AllAttention,
    AllAttentionBlock,
    all_attention_layer_parameters,
    count_parameters,
    extend_mask,
    ffn_as_attention,
    transformer_layer_parameters,
)
from attncourse.course.lookup_task import lookup_entropy, lookup_sequences, make_table
from attncourse.masks import causal_mask
from attncourse.multihead import MultiHeadAttention
from attncourse.training import next_token_loss
from attncourse.transformer import CausalLM, FeedForward, TransformerBlock


def _layer(d=16, h=4, n=6, *, bias=False, seed=0, dtype=torch.float64, device="cpu"):
    torch.manual_seed(seed)
    return AllAttention(d, h, n, bias=bias).to(device=device, dtype=dtype)


def _reference(layer: AllAttention, x: torch.Tensor, context_keep: torch.Tensor):
    """Float64 recomputation, head by head, with explicit loops over the heads: scores over the
    context (masked by ``context_keep`` (L, L)) and over the persistent keys, one softmax."""
    p = layer.projections
    q, k, v = p.q_proj(x), p.k_proj(x), p.v_proj(x)
    d_h, n = layer.head_dim, layer.num_persistent
    mk = layer.persistent_key * math.sqrt(d_h)
    mv = layer.persistent_value * math.sqrt(n)
    heads, all_weights = [], []
    for i in range(layer.num_heads):
        cols = slice(i * d_h, (i + 1) * d_h)
        s_ctx = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(d_h)  # (B, L, L)
        s_ctx = s_ctx.masked_fill(~context_keep, float("-inf"))
        s_mem = q[..., cols] @ mk[i].T / math.sqrt(d_h)  # (B, L, N)
        w = torch.softmax(torch.cat([s_ctx, s_mem], dim=-1), dim=-1)
        heads.append(w[..., : x.size(1)] @ v[..., cols] + w[..., x.size(1) :] @ mv[i])
        all_weights.append(w)
    return p.out_proj(torch.cat(heads, dim=-1)), torch.stack(all_weights, dim=1)


# -- the layer -------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("with_mask", [True, False])
def test_zero_persistent_equals_multihead_attention(device, bias, with_mask):
    layer = _layer(n=0, bias=bias, device=device)
    mha = MultiHeadAttention(16, 4, bias=bias).to(device=device, dtype=torch.float64)
    mha.load_state_dict(layer.projections.state_dict())
    x = torch.randn(3, 7, 16, dtype=torch.float64, device=device)
    mask = causal_mask(7, device=device) if with_mask else None
    out, weights = layer(x, mask)
    ref_out, ref_weights = mha(x, x, x, mask)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, ref_weights, rtol=0, atol=1e-12)


def test_zero_persistent_matches_torch_multihead_attention():
    torch.manual_seed(1)
    ref = nn.MultiheadAttention(16, 4, bias=False, batch_first=True).double().eval()
    layer = AllAttention(16, 4, 0).double()
    layer.projections.load_state_dict(MultiHeadAttention.from_torch(ref).state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    ignore = ~causal_mask(5)  # torch: True = ignore
    expected, _ = ref(x, x, x, attn_mask=ignore, need_weights=False)
    torch.testing.assert_close(layer(x, causal_mask(5))[0], expected)


def test_matches_float64_recomputation(device):
    layer = _layer(d=24, h=3, n=5, bias=True, device=device)
    x = torch.randn(2, 6, 24, dtype=torch.float64, device=device)
    keep = causal_mask(6, device=device)
    out, weights = layer(x, keep)
    ref_out, ref_weights = _reference(layer, x, keep)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)
    assert weights.shape == (2, 3, 6, 6 + 5)
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(2, 3, 6, dtype=torch.float64, device=device)
    )


def test_persistent_vectors_are_never_masked():
    layer = _layer(n=4)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    _, weights = layer(x, causal_mask(6))
    context, memory = weights[..., :6], weights[..., 6:]
    assert (memory > 0).all()  # every query, including the first, sees every persistent vector
    assert (context.masked_select(~causal_mask(6)) == 0).all()  # the future stays masked
    # a query whose context is masked entirely still attends: to the memory only, summing to 1
    nothing = torch.zeros(6, 6, dtype=torch.bool)
    out, weights = layer(x, nothing)
    assert (weights[..., :6] == 0).all()
    torch.testing.assert_close(weights[..., 6:].sum(-1), torch.ones(2, 4, 6, dtype=torch.float64))
    assert torch.isfinite(out).all()


def test_future_tokens_cannot_change_earlier_outputs():
    layer = _layer(n=3)
    x = torch.randn(1, 8, 16, dtype=torch.float64)
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, 16, dtype=torch.float64)
    mask = causal_mask(8)
    torch.testing.assert_close(
        layer(x, mask)[0][:, :5], layer(y, mask)[0][:, :5], rtol=0, atol=1e-12
    )
    assert not torch.allclose(layer(x, mask)[0][:, 5:], layer(y, mask)[0][:, 5:])


def test_additive_float_mask_equals_boolean_mask():
    layer = _layer(n=5)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    keep = torch.rand(2, 6, 6, generator=torch.Generator().manual_seed(3)) > 0.5
    additive = torch.zeros(2, 6, 6, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    torch.testing.assert_close(layer(x, keep)[0], layer(x, additive)[0])
    torch.testing.assert_close(layer(x, keep)[0], _reference(layer, x, keep)[0])


def test_per_head_mask():
    layer = _layer(n=2)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    keep = torch.rand(2, 4, 5, 5, generator=torch.Generator().manual_seed(4)) > 0.3
    _, weights = layer(x, keep)
    assert (weights[..., :5].masked_select(~keep) == 0).all()
    assert (weights[..., 5:] > 0).all()


def test_memory_is_the_paper_scaling():
    layer = AllAttention(64, 4, 256)
    key, value = layer.memory()
    assert key.shape == value.shape == (4, 256, 16)
    torch.testing.assert_close(key, layer.persistent_key * 4.0)
    torch.testing.assert_close(value, layer.persistent_value * 16.0)
    # stored as N(0, 1/d_h) and N(0, 1/N): what attention sees starts at unit scale
    assert abs(layer.persistent_key.std().item() - 1 / 4) < 0.02
    assert abs(layer.persistent_value.std().item() - 1 / 16) < 0.005
    assert abs(key.std().item() - 1) < 0.05 and abs(value.std().item() - 1) < 0.05


def test_memory_with_one_persistent_vector_starts_at_unit_scale():
    # N = 1: the values are stored as N(0, 1/1) and seen unscaled, like any other N
    torch.manual_seed(0)
    layer = AllAttention(1024, 4, 1)
    key, value = layer.memory()
    assert key.shape == value.shape == (4, 1, 256)
    torch.testing.assert_close(value, layer.persistent_value)
    assert abs(layer.persistent_value.std().item() - 1) < 0.1 and abs(key.std().item() - 1) < 0.1


def test_span_mask_multiplies_context_weights_and_renormalises_jointly():
    layer = _layer(n=3)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    keep = causal_mask(6)
    _, plain = layer(x, keep)
    out_ones, w_ones = layer(x, keep, span_mask=torch.ones(6, 6, dtype=torch.float64))
    torch.testing.assert_close(w_ones, plain)
    # a 0/1 soft mask removes exactly what a boolean mask removes
    band = (torch.arange(6)[:, None] - torch.arange(6)[None, :]) <= 1
    out_soft, w_soft = layer(x, keep, span_mask=band.double())
    out_hard, w_hard = layer(x, keep & band)
    torch.testing.assert_close(out_soft, out_hard)
    torch.testing.assert_close(w_soft, w_hard)
    # fractional values: a_tr = m_tr e^{s_tr} / (sum_q m_tq e^{s_tq} + sum_n e^{s_tn})
    soft = torch.rand(4, 6, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    _, w = layer(x, keep, span_mask=soft)
    expected = torch.cat([plain[..., :6] * soft, plain[..., 6:]], dim=-1)
    expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(w, expected)
    assert (w[..., 6:] >= plain[..., 6:] - 1e-15).all()  # the memory keeps its share or gains


def test_span_mask_that_removes_the_whole_context_without_memory_leaves_zero_rows():
    # N = 0 and a span mask of zeros: no key is left in any row, the weights and the output stay 0 (not 0/0)
    layer = _layer(n=0)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out, weights = layer(x, span_mask=torch.zeros(5, 5, dtype=torch.float64))
    assert torch.equal(weights, torch.zeros(2, 4, 5, 5, dtype=torch.float64))
    # bias-free out_proj of zero heads
    assert torch.equal(out, torch.zeros(2, 5, 16, dtype=torch.float64))
    # only the rows left with nothing: the first row keeps its one key
    span = torch.ones(5, 5, dtype=torch.float64)
    span[1:] = 0
    _, weights = layer(x, span_mask=span)
    torch.testing.assert_close(weights[..., 0, :].sum(-1), torch.ones(2, 4, dtype=torch.float64))
    assert torch.equal(weights[..., 1:, :], torch.zeros(2, 4, 4, 5, dtype=torch.float64))


def test_span_mask_on_another_device_is_refused():
    layer = _layer(n=2)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"span_mask must be on the device of x \(cpu\), got meta"):
        layer(x, span_mask=torch.ones(5, 5, dtype=torch.float64, device="meta"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_casts_the_persistent_vectors_like_the_projections(dtype):
    # under autocast the projections return half-precision keys and values while the persistent
    # vectors stay float32 parameters: they are cast to the projections' dtype
    layer = _layer(n=3, dtype=torch.float32)
    x = torch.randn(2, 5, 16)
    mask = causal_mask(5)
    expected_out, expected_weights = layer(x, mask)
    with torch.autocast("cpu", dtype=dtype):
        out, weights = layer(x, mask)
    assert out.dtype == weights.dtype == dtype
    torch.testing.assert_close(out.float(), expected_out, atol=0.05, rtol=0.05)
    torch.testing.assert_close(weights.float(), expected_weights, atol=0.02, rtol=0.05)


def test_gradcheck_reaches_persistent_vectors():
    layer = _layer(d=8, h=2, n=3, bias=True)
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    mask = causal_mask(4)
    assert torch.autograd.gradcheck(lambda x: layer(x, mask)[0], (x,))
    layer(x, mask)[0].square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # the output as a function of the persistent vectors themselves
    key = layer.persistent_key.detach().clone().requires_grad_()
    value = layer.persistent_value.detach().clone().requires_grad_()
    as_memory = lambda k, v: functional_call(
        layer, {"persistent_key": k, "persistent_value": v}, (x.detach(), mask)
    )[0]
    assert torch.autograd.gradcheck(as_memory, (key, value))


def test_float32_and_devices(device):
    layer = _layer(n=4, dtype=torch.float32, device=device)
    x = torch.randn(2, 5, 16, device=device)
    out, weights = layer(x, causal_mask(5, device=device))
    assert out.dtype == weights.dtype == torch.float32 and out.device.type == device.type
    ref_out, _ = _reference(layer.double(), x.double(), causal_mask(5, device=device))
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_matches_cpu():
    layer = _layer(n=4)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = causal_mask(5)
    cpu = layer(x, mask)[0]
    gpu = layer.cuda()(x.cuda(), mask.cuda())[0]
    torch.testing.assert_close(gpu.cpu(), cpu)


def test_bad_input():
    layer = _layer(n=2)
    with pytest.raises(ValueError, match=r"x must have exactly 3 dimensions.*\(5, 16\)"):
        layer(torch.randn(5, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x has size 8 in dimension -1 but embed_dim is 16"):
        layer(torch.randn(2, 5, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        layer(torch.ones(2, 5, 16, dtype=torch.long))
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 7\) does not broadcast"):
        layer(x, torch.ones(5, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask must have shape \(L, L\).*got \(5,\)"):
        layer(x, torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be boolean"):
        layer(x, torch.ones(5, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="span_mask must be a floating-point tensor"):
        layer(x, span_mask=torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"span_mask of shape \(5, 6\) does not broadcast"):
        layer(x, span_mask=torch.ones(5, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match="num_persistent must be a non-negative integer, got -1"):
        AllAttention(16, 4, -1)
    with pytest.raises(ValueError, match="num_heads=3 must divide embed_dim=16"):
        AllAttention(16, 3, 4)


# -- the block in the chapter-4 model -------------------------------------------------------------


def test_block_is_layernorm_of_residual():
    torch.manual_seed(0)
    block = AllAttentionBlock(16, 4, 8).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = causal_mask(5)
    expected = nn.functional.layer_norm(
        x + block.attn(x, mask)[0], (16,), block.norm.weight, block.norm.bias
    )
    torch.testing.assert_close(block(x, mask), expected)
    assert block.self_weights.shape == (2, 4, 5, 5 + 8)
    assert not block.self_weights.requires_grad  # detached: keeping it holds no graph
    assert not any(
        isinstance(m, (FeedForward, nn.Linear)) and m.out_features == 8 for m in block.modules()
    )


def test_blocks_plug_into_causal_lm_and_train(device):
    torch.manual_seed(0)
    model = CausalLM(11, 16, 12, [AllAttentionBlock(16, 4, 8) for _ in range(2)]).to(device)
    tokens = torch.randint(11, (3, 12), device=device)
    logits = model(tokens)
    assert logits.shape == (3, 12, 11)
    # causal all the way through the model: changing the last token changes no earlier logit
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    torch.testing.assert_close(model(changed)[:, :-1], logits[:, :-1])
    loss = next_token_loss(logits, tokens)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.blocks[0].attn.persistent_key.grad.abs().sum() > 0


# -- FFN as attention -----------------------------------------------------------------------------


def test_ffn_as_attention_equals_bias_free_softmax_ffn():
    torch.manual_seed(0)
    ffn = FeedForward(12, 40).double()
    x = torch.randn(3, 5, 12, dtype=torch.float64)
    w1, w2 = ffn.linear1.weight, ffn.linear2.weight
    out, weights = ffn_as_attention(x, w1, w2)
    # the FFN's own modules, with biases dropped and softmax in place of the ReLU
    hidden = torch.softmax(nn.functional.linear(x, w1), dim=-1)
    torch.testing.assert_close(out, nn.functional.linear(hidden, w2))
    torch.testing.assert_close(weights, hidden)
    # and torch's SDPA over keys = rows of W1, values = columns of W2, scale 1
    sdpa = nn.functional.scaled_dot_product_attention(x.unsqueeze(-2), w1, w2.T, scale=1.0).squeeze(
        -2
    )
    torch.testing.assert_close(out, sdpa)
    # one all-attention head with N = d_ff, the context masked away, computes the same map
    layer = AllAttention(12, 1, 40).double()
    with torch.no_grad():
        for proj in (layer.projections.q_proj, layer.projections.out_proj):
            proj.weight.copy_(torch.eye(12))
        # attention sees key * sqrt(d_h) and divides the scores by sqrt(d_h): the stored keys are W1's rows
        layer.persistent_key.copy_(w1[None])
        layer.persistent_value.copy_(w2.T[None] / math.sqrt(40))  # attention sees value * sqrt(N)
    no_context = torch.zeros(5, 5, dtype=torch.bool)
    torch.testing.assert_close(layer(x, no_context)[0], out)


@pytest.mark.parametrize("shape", [(12,), (1, 12), (3, 12), (1, 1, 12), (2, 1, 3, 12)])
def test_ffn_as_attention_any_leading_shape(shape):
    torch.manual_seed(0)
    w1, w2 = torch.randn(40, 12, dtype=torch.float64), torch.randn(12, 40, dtype=torch.float64)
    x = torch.randn(shape, dtype=torch.float64)
    out, weights = ffn_as_attention(x, w1, w2)
    assert out.shape == shape and weights.shape == shape[:-1] + (40,)
    # float64 recomputation one query vector at a time
    rows = x.reshape(-1, 12)
    hidden = torch.stack([torch.softmax(w1 @ row, dim=0) for row in rows])
    torch.testing.assert_close(weights.reshape(-1, 40), hidden)
    torch.testing.assert_close(out.reshape(-1, 12), hidden @ w2.T)


def test_ffn_as_attention_bad_input():
    with pytest.raises(ValueError, match=r"w1 must be \(d_ff, d_model\).*w1 \(7, 5\)"):
        ffn_as_attention(torch.randn(4), torch.randn(7, 5), torch.randn(4, 7))
    with pytest.raises(ValueError, match=r"w1 must have exactly 2 dimensions.*\(7,\)"):
        ffn_as_attention(torch.randn(4), torch.randn(7), torch.randn(4, 7))
    with pytest.raises(ValueError, match="w2 must have exactly 2 dimensions"):
        ffn_as_attention(torch.randn(4), torch.randn(7, 4), torch.randn(4))
    with pytest.raises(TypeError, match="query must be a floating-point tensor"):
        ffn_as_attention(torch.ones(4, dtype=torch.long), torch.randn(7, 4), torch.randn(4, 7))


# -- parameter counts ------------------------------------------------------------------------------


@pytest.mark.parametrize("d, h, d_ff", [(64, 4, 256), (32, 2, 48), (512, 8, 2048)])
def test_transformer_layer_count_matches_modules(d, h, d_ff):
    ours = TransformerBlock(d, h, d_ff)
    assert count_parameters(ours) == transformer_layer_parameters(
        d, d_ff, attention_bias=True, layer_norm=True
    )
    # PyTorch's own encoder layer (biases everywhere, two LayerNorms) is an independent check
    theirs = nn.TransformerEncoderLayer(d, h, d_ff, batch_first=True)
    assert count_parameters(theirs) == transformer_layer_parameters(
        d, d_ff, attention_bias=True, layer_norm=True
    )
    # the paper's count: 4 d^2 + 2 d d_ff + FFN biases
    assert transformer_layer_parameters(d, d_ff) == 4 * d * d + 2 * d * d_ff + d_ff + d
    assert count_parameters(TransformerBlock(d, h, 0)) == transformer_layer_parameters(
        d, 0, attention_bias=True, layer_norm=True
    )


@pytest.mark.parametrize("d, h, n", [(64, 4, 256), (32, 2, 48), (16, 4, 0)])
def test_all_attention_count_matches_modules(d, h, n):
    assert (
        count_parameters(AllAttention(d, h, n))
        == all_attention_layer_parameters(d, n)
        == 4 * d * d + 2 * n * d
    )
    assert count_parameters(AllAttention(d, h, n, bias=True)) == all_attention_layer_parameters(
        d, n, attention_bias=True
    )
    assert count_parameters(AllAttentionBlock(d, h, n)) == all_attention_layer_parameters(
        d, n, layer_norm=True
    )


def test_n_equal_d_ff_matches_a_layer():
    d, d_ff = 512, 2048
    assert all_attention_layer_parameters(d, d_ff) + d_ff + d == transformer_layer_parameters(
        d, d_ff
    )


def test_count_bad_input():
    with pytest.raises(ValueError, match="d_model must be a positive integer"):
        transformer_layer_parameters(0, 10)
    with pytest.raises(ValueError, match="d_ff must be a non-negative integer"):
        transformer_layer_parameters(8, -1)
    with pytest.raises(TypeError, match="num_persistent must be a non-negative integer"):
        all_attention_layer_parameters(8, 2.5)
    with pytest.raises(ValueError, match="d_model must be a positive integer, got 0"):
        all_attention_layer_parameters(0, 4)
    with pytest.raises(ValueError, match="d_model must be a positive integer, got -8"):
        all_attention_layer_parameters(-8, 4)
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        count_parameters([1, 2])


# -- the lookup task ---------------------------------------------------------------------------------


def test_lookup_sequences_follow_the_table():
    g = torch.Generator().manual_seed(0)
    table = make_table(8, generator=g)
    clean = lookup_sequences(table, 50, 12, noise=0.0, generator=g)
    assert clean.shape == (50, 12) and clean.dtype == torch.long
    assert (clean[:, 2:] == table[clean[:, 1:-1], clean[:, :-2]]).all()
    noisy = lookup_sequences(table, 2000, 12, noise=0.2, generator=g)
    hits = (noisy[:, 2:] == table[noisy[:, 1:-1], noisy[:, :-2]]).double().mean().item()
    assert abs(hits - (0.8 + 0.2 / 8)) < 0.01
    torch.testing.assert_close(
        lookup_sequences(table, 5, 6, generator=torch.Generator().manual_seed(3)),
        lookup_sequences(table, 5, 6, generator=torch.Generator().manual_seed(3)),
    )


def test_lookup_entropy_is_the_bayes_loss():
    table = make_table(8, generator=torch.Generator().manual_seed(1))
    tokens = lookup_sequences(
        table, 4000, 10, noise=0.3, generator=torch.Generator().manual_seed(2)
    )
    hit = 1 - 0.3 + 0.3 / 8
    probs = torch.full((8, 8, 8), 0.3 / 8)  # (x_{t-1}, x_{t-2}, next)
    probs[torch.arange(8)[:, None], torch.arange(8)[None, :], table] = hit
    logits = torch.log(probs[tokens[:, 1:], tokens[:, :-1]])  # prediction for t + 1 at position t
    logits = torch.cat([torch.zeros(4000, 1, 8), logits], dim=1)
    loss = next_token_loss(logits, tokens, start=2).item()
    assert abs(loss - lookup_entropy(8, 0.3)) < 0.02
    assert lookup_entropy(8, 0.0) == 0.0 and math.isclose(lookup_entropy(8, 1.0), math.log(8))


def test_lookup_bad_input():
    table = make_table(4)
    with pytest.raises(TypeError, match="table must be a square integer tensor"):
        lookup_sequences(table.float(), 2, 5)  # a wrong dtype is a TypeError
    with pytest.raises(ValueError, match="table must be a square integer tensor"):
        lookup_sequences(table[:3], 2, 5)  # a wrong shape is a ValueError
    with pytest.raises(ValueError, match="length must be at least 3"):
        lookup_sequences(table, 2, 2)
    with pytest.raises(ValueError, match=r"noise must be a probability in \[0, 1\]"):
        lookup_sequences(table, 2, 5, noise=1.5)


def test_lookup_models_have_nearly_the_same_size():
    from attncourse.all_attention import count_parameters
    from attncourse.course.lookup_task import MODEL_KINDS, build_lookup_model

    sizes = [count_parameters(build_lookup_model(kind)) for kind in MODEL_KINDS]
    assert max(sizes) / min(sizes) < 1.03
    with pytest.raises(ValueError, match="kind"):
        build_lookup_model("FFN")


def test_compare_on_lookup_is_reproducible_and_writes_json(tmp_path):
    from attncourse.course.lookup_task import (
        MODEL_KINDS,
        compare_on_lookup,
        load_seed_results,
        main,
    )

    first = compare_on_lookup(1, steps=3, kinds=("all-attention",), progress=False)
    again = compare_on_lookup(1, steps=3, kinds=("all-attention",), progress=False)
    other = compare_on_lookup(2, steps=3, kinds=("all-attention",), progress=False)
    assert first["all-attention"]["curve"] == again["all-attention"]["curve"]  # seeded
    assert first["all-attention"]["curve"] != other["all-attention"]["curve"]  # the seed matters
    main(["--seeds", "0", "--steps", "2", "--output", str(tmp_path / "seeds.json")])
    written = load_seed_results(str(tmp_path / "seeds.json"))
    assert set(written["runs"]["0"]) == set(MODEL_KINDS) and written["steps"] == 2


def test_committed_seed_results_cover_every_model():
    from attncourse.course.lookup_task import MODEL_KINDS, load_seed_results

    committed = load_seed_results()
    assert len(committed["runs"]) >= 3 and committed["steps"] == 600
    assert all(set(run) == set(MODEL_KINDS) for run in committed["runs"].values())


def test_time_training_steps_interleaves_the_models_on_the_threads_asked():
    from attncourse.course.lookup_task import MODEL_KINDS, load_step_times, time_training_steps

    before = torch.get_num_threads()
    result = time_training_steps(rounds=2, warmup=0, batch=2, kinds=MODEL_KINDS[:2])
    assert torch.get_num_threads() == before  # restored
    assert result["threads"] == 1 and result["rounds"] == 2
    assert set(result["times_ms"]) == set(MODEL_KINDS[:2]) and all(
        len(t) == 2 for t in result["times_ms"].values()
    )
    assert all(t > 0 for t in result["median_ms"].values())
    with pytest.raises(ValueError, match="rounds must be a positive integer"):
        time_training_steps(rounds=0)
    with pytest.raises(ValueError, match="kinds must be a non-empty selection"):
        time_training_steps(kinds=["FFN"])
    committed = load_step_times()
    assert committed["threads"] == 1 and set(committed["median_ms"]) == set(MODEL_KINDS)


def test_extend_mask_appends_visible_columns_and_checks_its_input():
    boolean = torch.tensor([[True, False], [True, True]])
    assert extend_mask(boolean, 2).tolist() == [[True, False, True, True], [True, True, True, True]]
    additive = torch.tensor([[0.0, float("-inf")]])
    assert extend_mask(additive, 1).tolist() == [[0.0, float("-inf"), 0.0]]
    assert extend_mask(boolean, 0).equal(boolean)
    assert extend_mask(torch.ones(3, 2, 4, 5, dtype=torch.bool), 3).shape == (3, 2, 4, 8)
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        extend_mask([[True]], 1)
    for shape in ((), (4,)):
        with pytest.raises(ValueError, match="mask must have at least 2 dimensions"):
            extend_mask(torch.ones(shape, dtype=torch.bool), 1)
    with pytest.raises(ValueError, match="num_persistent"):
        extend_mask(boolean, -1)
    with pytest.raises(TypeError, match="num_persistent"):
        extend_mask(boolean, 1.0)


@pytest.mark.parametrize(
    "count, flag",
    [
        (lambda **f: transformer_layer_parameters(8, 16, **f), "attention_bias"),
        (lambda **f: transformer_layer_parameters(8, 16, **f), "ffn_bias"),
        (lambda **f: transformer_layer_parameters(8, 16, **f), "layer_norm"),
        (lambda **f: all_attention_layer_parameters(8, 4, **f), "attention_bias"),
        (lambda **f: all_attention_layer_parameters(8, 4, **f), "layer_norm"),
    ],
)
def test_parameter_counts_take_bool_flags(count, flag):
    with pytest.raises(TypeError, match=flag):
        count(**{flag: 1})


def test_the_lookup_runs_record_the_machine_they_ran_on(tmp_path):
    """Chapter 9's committed seed losses and step times must say where they were measured: the
    CPU, its cores, the date and the load (the step-times file had none of these)."""
    import json

    from attncourse.course import lookup_task

    out = tmp_path / "seeds.json"
    lookup_task.main(["--seeds", "0", "--steps", "2", "--output", str(out)])
    written = json.loads(out.read_text())
    assert (
        written["command"]
        == f"python -m attncourse.course.lookup_task --seeds 0 --steps 2 --output {out}"
    )
    recorded = written["machine"]
    assert {"cpu", "cpu_cores", "date", "torch_threads"} <= set(recorded)


def test_lookup_comparison_data_batches_and_loss_as_documented(monkeypatch):
    """compare_on_lookup's data come from a generator seeded with 0 whatever the seed, batch
    ``step`` is drawn with the seed ``step + 1_000_003 * seed``, and the test loss is the
    model's next-token loss on the test sequences from the third token on: each recomputed
    here from that description."""
    from attncourse.course import lookup_task
    from attncourse.training import next_token_loss

    generator = torch.Generator().manual_seed(0)
    table = make_table(32, generator=generator)
    train = lookup_sequences(table, 8192, 16, noise=0.0, generator=generator)
    test = lookup_sequences(table, 1024, 16, noise=0.0, generator=generator)
    batches = []

    def fake_train(model, get_batch, loss, *, steps, **options):
        batches.extend(get_batch(step) for step in range(steps))
        return [0.0] * steps

    monkeypatch.setattr(lookup_task, "train", fake_train)
    for seed in (1, 2):
        batches.clear()
        result = lookup_task.compare_on_lookup(
            seed, steps=2, batch=4, noise=0.0, kinds=("attention-only",), progress=False
        )["attention-only"]
        for step, tokens in enumerate(batches):
            g = torch.Generator().manual_seed(step + 1_000_003 * seed)
            assert torch.equal(tokens, train[torch.randint(8192, (4,), generator=g)])
        with torch.no_grad():
            expected = next_token_loss(result["model"](test), test, start=2).item()
        assert result["test_loss"] == pytest.approx(expected, rel=1e-6)


def test_step_timing_rotates_the_order_and_reports_the_middle_time(monkeypatch):
    from attncourse.course import lookup_task

    clock, order = [0.0], []
    durations = {"FFN Transformer": [1.0, 5.0, 2.0, 9.0], "attention-only": [3.0] * 4}

    class Fake(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind, self.weight = kind, nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            order.append(self.kind)
            clock[0] += durations[self.kind][sum(k == self.kind for k in order) - 1] / 1e3
            return torch.zeros(*tokens.shape, 32) + self.weight

    monkeypatch.setattr(lookup_task, "build_lookup_model", lambda kind, *a, **k: Fake(kind))
    monkeypatch.setattr(lookup_task.time, "perf_counter", lambda: clock[0])
    kinds = ("FFN Transformer", "attention-only")
    result = lookup_task.time_training_steps(rounds=4, warmup=0, kinds=kinds)
    assert order[:4] == ["FFN Transformer", "attention-only", "attention-only", "FFN Transformer"]
    assert result["times_ms"]["FFN Transformer"] == pytest.approx([1.0, 5.0, 2.0, 9.0])
    # the median of an even count is the upper of the two middle times, as median_high
    assert result["median_ms"]["FFN Transformer"] == pytest.approx(5.0)
