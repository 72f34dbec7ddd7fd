"""Attention and residual dropout (chapter 5; chapter 2's note on dropout)."""

import pytest
import torch
from torch import nn

from attncourse import CausalLM, MultiHeadAttention, TransformerBlock
from attncourse.masks import causal_mask


def _layer(p, dtype=torch.float64, device="cpu"):
    torch.manual_seed(0)
    return MultiHeadAttention(16, 4, dropout=p).to(device=device, dtype=dtype)


def test_eval_mode_and_zero_dropout_change_nothing(device):
    x = torch.randn(2, 7, 16, dtype=torch.float64, device=device)
    plain = _layer(0.0, device=device)
    dropped = _layer(0.4, device=device)
    dropped.eval()
    out0, w0 = plain(x, x, x)
    for _ in range(3):  # deterministic: the same output every call
        out, w = dropped(x, x, x)
        torch.testing.assert_close(out, out0, rtol=0, atol=0)
        torch.testing.assert_close(w, w0, rtol=0, atol=0)
    plain.train()  # p = 0 in training mode draws nothing
    torch.testing.assert_close(plain(x, x, x)[0], out0, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_zero_dropout_in_training_mode_changes_nothing_in_half_precision(dtype):
    # half inputs are attended in float32 and rounded once: with p = 0 the training-mode output
    # must not be recomputed from the rounded weights
    layer = _layer(0.0, dtype=dtype)
    x = torch.randn(2, 7, 16, dtype=torch.float64).to(dtype)
    layer.eval()
    out_eval, w_eval = layer(x, x, x)
    layer.train()
    out, w = layer(x, x, x)
    torch.testing.assert_close(out, out_eval, rtol=0, atol=0)
    torch.testing.assert_close(w, w_eval, rtol=0, atol=0)


def test_training_mode_drops_weights_and_scales_the_rest(device):
    p = 0.25
    layer = _layer(p, device=device)
    x = torch.randn(3, 9, 16, dtype=torch.float64, device=device)
    layer.eval()
    out_eval, w_eval = layer(x, x, x)
    layer.train()
    torch.manual_seed(1)
    out, w = layer(x, x, x)
    kept = w != 0
    # every kept weight is the eval weight scaled by 1 / (1 - p); the dropped ones are zero
    torch.testing.assert_close(w[kept], w_eval[kept] / (1 - p))
    frac = 1 - kept.double().mean().item()
    assert abs(frac - p) < 0.06, frac  # 3 * 4 * 81 = 972 weights
    # the output is built from the dropped-out weights (recomputed independently here)
    v = layer.v_proj(x).view(3, 9, 4, 4).transpose(1, 2)
    heads = (w @ v).transpose(1, 2).reshape(3, 9, 16)
    torch.testing.assert_close(out, layer.out_proj(heads))
    assert not torch.allclose(out, out_eval)


def test_equals_nn_multihead_attention_in_training_mode():
    """Same dropout mask from the same random state, and the post-dropout weights are returned, as torch's."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, dropout=0.3, batch_first=True)
    layer = MultiHeadAttention.from_torch(ref)
    assert layer.dropout == 0.3
    x = torch.randn(2, 6, 16)
    mask = causal_mask(6)
    ref.train(), layer.train()
    for seed in range(3):
        torch.manual_seed(seed)
        expected, expected_w = ref(
            x, x, x, attn_mask=~mask, need_weights=True, average_attn_weights=False
        )
        torch.manual_seed(seed)
        out, w = layer(x, x, x, mask)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(w, expected_w)
    ref.eval(), layer.eval()
    torch.testing.assert_close(layer(x, x, x, mask)[0], ref(x, x, x, attn_mask=~mask)[0])


def test_equals_sdpa_dropout_in_expectation():
    """Mean over many draws: ours and torch's SDPA(dropout_p) both converge to the no-dropout output."""
    p, draws = 0.3, 20000
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 5, 8, dtype=torch.float64) for _ in range(3))
    layer = MultiHeadAttention(8, 1, bias=False, dropout=p).double()
    with torch.no_grad():  # identity projections, so the layer is bare attention on q, k, v
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            proj.weight.copy_(torch.eye(8))
    exact = nn.functional.scaled_dot_product_attention(q, k, v)
    layer.train()
    x_q, x_k, x_v = q[:, 0], k[:, 0], v[:, 0]
    # one batch of `draws` copies: every batch row gets its own dropout mask
    with torch.no_grad():
        ours = layer(*(t.expand(draws, 5, 8) for t in (x_q, x_k, x_v)))[0]
        theirs = nn.functional.scaled_dot_product_attention(
            *(t.expand(draws, 1, 5, 8) for t in (q, k, v)), dropout_p=p
        )[:, 0]
    # the standard error of a mean of 20000 draws: 3.5 of them is a loose, still failing-capable bound
    se = ours.std(0) / draws**0.5
    assert ((ours.mean(0) - exact[0, 0]).abs() < 3.5 * se + 1e-12).all()
    se_t = theirs.std(0) / draws**0.5
    assert ((theirs.mean(0) - exact[0, 0]).abs() < 3.5 * se_t + 1e-12).all()
    # and the spread of the two is the same (same Bernoulli(1 - p) / (1 - p) masks)
    torch.testing.assert_close(ours.var(0), theirs.var(0), rtol=0.15, atol=1e-6)
    # no dropout would have zero variance: the check above can fail
    assert ours.var(0).min() > 1e-4


def test_gradcheck_in_eval_mode():
    layer = _layer(0.5)
    layer.eval()
    x = torch.randn(1, 3, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: layer(t, t, t)[0], (x,))


def test_bad_dropout_is_rejected():
    for bad, error in (
        (-0.1, ValueError),
        (1.0, ValueError),
        (float("nan"), ValueError),
        (True, TypeError),
        ("0.1", TypeError),
        (None, TypeError),
        (torch.tensor([0.1]), TypeError),
    ):
        with pytest.raises(error, match="dropout must be a probability"):
            MultiHeadAttention(16, 4, dropout=bad)
        with pytest.raises(error, match="dropout must be a probability"):
            TransformerBlock(16, 4, 32, dropout=bad)


def test_dropout_accepts_numpy_and_torch_numbers():
    np = pytest.importorskip("numpy")
    for good in (np.float64(0.25), np.float32(0.25), torch.tensor(0.25), 0):
        assert MultiHeadAttention(16, 4, dropout=good).dropout == pytest.approx(float(good))
        assert TransformerBlock(16, 4, 32, dropout=good) is not None


@pytest.mark.parametrize("norm_first", [False, True])
def test_block_residual_dropout(norm_first):
    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, dropout=0.2, norm_first=norm_first).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = causal_mask(5)
    block.eval()
    a, b = block(x, mask), block(x, mask)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    block.train()
    torch.manual_seed(1)
    c = block(x, mask)
    torch.manual_seed(1)
    d = block(x, mask)
    torch.testing.assert_close(c, d, rtol=0, atol=0)  # seeded
    assert not torch.allclose(a, c)
    # the residual dropout alone (the attention's switched off) still changes the output
    block.self_attn.dropout = 0.0
    assert not torch.allclose(block(x, mask), a)
    # the same block without dropout, same weights, equals the eval output
    clean = TransformerBlock(16, 4, 32, norm_first=norm_first).double()
    clean.load_state_dict(block.state_dict())
    torch.testing.assert_close(clean(x, mask), a)


def test_block_layouts_follow_their_formulas():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = causal_mask(5)
    for norm_first in (False, True):
        block = TransformerBlock(16, 4, 32, norm_first=norm_first).double().eval()
        attn = lambda h, block=block: block.self_attn(h, h, h, mask)[0]  # noqa: E731
        if norm_first:
            h = x + attn(block.norm1(x))
            expected = h + block.ffn(block.norm3(h))
        else:
            h = block.norm1(x + attn(x))
            expected = block.norm3(h + block.ffn(h))
        torch.testing.assert_close(block(x, mask), expected)


def test_causal_lm_dropout_and_final_norm():
    torch.manual_seed(0)
    model = CausalLM.standard(
        11, d_model=16, num_heads=2, d_ff=32, max_len=8, dropout=0.1, norm_first=True
    )
    assert model.norm is not None and all(b.norm_first for b in model.blocks)
    assert model.dropout.p == 0.1 and model.blocks[0].self_attn.dropout == 0.1
    tokens = torch.randint(11, (3, 8))
    model.eval()
    torch.testing.assert_close(model(tokens), model(tokens), rtol=0, atol=0)
    model.train()
    assert not torch.allclose(model(tokens), model(tokens))
    # the embedding dropout alone (every block's switched off) still changes the output
    for block in model.blocks:
        block.self_attn.dropout = 0.0
        block.dropout.p = 0.0
    assert not torch.allclose(model(tokens), model.eval()(tokens))
    # defaults leave the earlier chapters' models unchanged: no dropout, no final norm
    plain = CausalLM.standard(11, d_model=16, num_heads=2, d_ff=32, max_len=8)
    assert plain.norm is None and plain.dropout.p == 0.0 and not plain.blocks[0].norm_first
