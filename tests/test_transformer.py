"""The small Transformers: against torch's own layers, causal and padding invariants, gradcheck, bad inputs."""

import pytest
import torch
from torch import nn

from attncourse.masks import causal_mask, to_additive
from attncourse.multihead import MultiHeadAttention
from attncourse.transformer import CausalLM, FeedForward, Seq2SeqTransformer, TransformerBlock


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    ours.load_state_dict(MultiHeadAttention.from_torch(theirs).state_dict())


def _copy_layer(block: TransformerBlock, layer: nn.Module) -> None:
    """Give ``block`` the weights of a torch post-norm encoder or decoder layer."""
    _copy_attention(block.self_attn, layer.self_attn)
    block.ffn.linear1.load_state_dict(layer.linear1.state_dict())
    block.ffn.linear2.load_state_dict(layer.linear2.state_dict())
    block.norm1.load_state_dict(layer.norm1.state_dict())
    if isinstance(layer, nn.TransformerDecoderLayer):
        _copy_attention(block.cross_attn, layer.multihead_attn)
        block.norm2.load_state_dict(layer.norm2.state_dict())
        block.norm3.load_state_dict(layer.norm3.state_dict())
    else:
        block.norm3.load_state_dict(layer.norm2.state_dict())


def test_encoder_block_matches_torch_encoder_layer(device):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).to(device).eval()
    block = TransformerBlock(16, 4, 32).to(device).eval()
    _copy_layer(block, layer)
    x = torch.randn(3, 6, 16, device=device)
    lengths = torch.tensor([6, 4, 1], device=device)
    keep = torch.arange(6, device=device)[None, :] < lengths[:, None]  # (B, S), True = real token
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=~keep)
        got = block(x, keep[:, None, :])
    # torch's fast path may return zeros at padded query rows: compare the real positions
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


def test_decoder_block_matches_torch_decoder_layer(device):
    torch.manual_seed(1)
    layer = nn.TransformerDecoderLayer(16, 2, 24, dropout=0.0, batch_first=True).to(device).eval()
    block = TransformerBlock(16, 2, 24, cross_attention=True).to(device).eval()
    _copy_layer(block, layer)
    x, memory = torch.randn(2, 5, 16, device=device), torch.randn(2, 7, 16, device=device)
    memory_keep = torch.ones(2, 7, dtype=torch.bool, device=device)
    memory_keep[1, 4:] = False
    causal = causal_mask(5, device=device)
    with torch.no_grad():
        expected = layer(
            x, memory, tgt_mask=to_additive(causal), memory_key_padding_mask=~memory_keep
        )
        got = block(x, causal, memory, memory_keep[:, None, :])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert block.cross_weights.shape == (2, 2, 5, 7)
    assert torch.all(block.cross_weights[1, :, :, 4:] == 0)


def test_block_without_ffn_and_its_errors():
    torch.manual_seed(3)
    block = TransformerBlock(8, 2, 0)
    assert block.ffn is None and block.norm3 is None
    x = torch.randn(1, 3, 8)
    # post-LN without an FFN: LayerNorm(x + attention(x)), recomputed by hand
    attended = block.self_attn(x, x, x, causal_mask(3))[0]
    expected = block.norm1(x + attended)
    torch.testing.assert_close(block(x, causal_mask(3)), expected)
    assert not torch.allclose(expected, x)
    with pytest.raises(ValueError, match="no cross-attention"):
        block(torch.randn(1, 3, 8), None, torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match="pass memory"):
        TransformerBlock(8, 2, 16, cross_attention=True)(torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match="num_heads=3 must divide d_model=8"):
        TransformerBlock(8, 3, 16)


def test_feed_forward_is_position_wise():
    torch.manual_seed(2)
    ffn = FeedForward(8, 16)
    x = torch.randn(2, 5, 8)
    by_position = torch.stack([ffn(x[:, t]) for t in range(5)], dim=1)
    torch.testing.assert_close(ffn(x), by_position)


def test_decoder_block_gradcheck():
    torch.manual_seed(3)
    block = TransformerBlock(8, 2, 12, cross_attention=True).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    keep = torch.tensor([[True, True, True, True], [True, True, False, False]])[:, None, :]
    assert torch.autograd.gradcheck(lambda x, m: block(x, causal_mask(3), m, keep), (x, memory))


# -- CausalLM ------------------------------------------------------------------------------


def test_causal_lm_shapes_and_causality(device):
    torch.manual_seed(4)
    model = (
        CausalLM.standard(11, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=12)
        .to(device)
        .eval()
    )
    tokens = torch.randint(11, (3, 9), device=device)
    logits = model(tokens)
    assert logits.shape == (3, 9, 11)
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 11  # change the future of position 4
    other = model(changed)
    torch.testing.assert_close(other[:, :5], logits[:, :5])
    assert not torch.allclose(other[:, 5:], logits[:, 5:])


def test_causal_lm_takes_any_blocks():
    calls = []

    class Recorder(nn.Module):
        def forward(self, x, mask):
            calls.append((tuple(x.shape), mask.clone()))
            return x

    model = CausalLM(5, 8, 10, [Recorder(), Recorder()])
    model(torch.zeros(2, 4, dtype=torch.long))
    assert [shape for shape, _ in calls] == [(2, 4, 8)] * 2
    assert torch.equal(calls[0][1], torch.ones(4, 4, dtype=torch.bool).tril())


@pytest.mark.parametrize(
    "tokens, error, match",
    [
        (torch.zeros(2, 3), TypeError, "integer tensor"),
        (
            torch.zeros(2, 3, 1, dtype=torch.long),
            ValueError,
            r"tokens must have exactly 2 dimensions",
        ),
        (torch.zeros(1, 13, dtype=torch.long), ValueError, "max_len=12"),
        ([[1, 2]], TypeError, "torch.Tensor"),
    ],
)
def test_causal_lm_bad_inputs(tokens, error, match):
    model = CausalLM.standard(7, d_model=8, num_heads=2, d_ff=8, num_layers=1, max_len=12)
    with pytest.raises(error, match=match):
        model(tokens)


def test_causal_lm_bad_sizes():
    with pytest.raises(ValueError, match="vocab_size"):
        CausalLM(0, 8, 10, [])
    with pytest.raises(TypeError, match="max_len"):
        CausalLM(5, 8, 2.5, [])


# -- Seq2SeqTransformer ----------------------------------------------------------------------


def _seq2seq(device, **kwargs):
    torch.manual_seed(5)
    return (
        Seq2SeqTransformer(
            13, 9, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=10, **kwargs
        )
        .to(device)
        .eval()
    )


def test_seq2seq_shapes_and_weights(device):
    model = _seq2seq(device)
    src = torch.randint(1, 13, (3, 7), device=device)
    tgt = torch.randint(1, 9, (3, 4), device=device)
    assert model(src, tgt).shape == (3, 4, 9)
    for block in model.decoder:
        # queries from the target, keys from the source
        assert block.cross_weights.shape == (
            3,
            2,
            4,
            7,
        )
        torch.testing.assert_close(block.cross_weights.sum(-1), torch.ones(3, 2, 4, device=device))


def test_seq2seq_decoder_is_causal(device):
    model = _seq2seq(device)
    src = torch.randint(1, 13, (2, 6), device=device)
    tgt = torch.randint(1, 9, (2, 5), device=device)
    logits = model(src, tgt)
    changed = tgt.clone()
    changed[:, 3:] = changed[:, 3:] % 8 + 1  # new, non-pad tokens from position 3 on
    other = model(src, changed)
    torch.testing.assert_close(other[:, :3], logits[:, :3])
    assert not torch.allclose(other[:, 3:], logits[:, 3:])


def test_seq2seq_source_padding_cannot_change_any_output(device):
    model = _seq2seq(device)
    src = torch.randint(1, 13, (2, 7), device=device)
    src[0, 4:] = 0
    src[1, 6:] = 0
    tgt = torch.randint(1, 9, (2, 5), device=device)
    logits = model(src, tgt)
    weights = model.decoder[-1].cross_weights
    assert torch.all(weights[0, :, :, 4:] == 0) and torch.all(weights[1, :, :, 6:] == 0)
    # the same sentences padded further with more pad tokens: every output is unchanged
    longer = torch.cat([src, torch.zeros(2, 2, dtype=torch.long, device=device)], dim=1)
    torch.testing.assert_close(model(longer, tgt), logits, atol=1e-5, rtol=1e-5)
    # a model whose pad embedding is scrambled gives the same outputs too
    with torch.no_grad():
        model.src_embed.tokens.weight[0] = torch.randn(16, device=device) * 10
    torch.testing.assert_close(model(src, tgt), logits, atol=1e-5, rtol=1e-5)


def test_seq2seq_target_padding_cannot_change_real_positions(device):
    model = _seq2seq(device)
    src = torch.randint(1, 13, (1, 6), device=device)
    # pads at the end are hidden from the real positions by the causal mask already; a pad
    # before real tokens is hidden only by the target padding mask
    tgt = torch.tensor([[1, 4, 5, 0, 0], [1, 0, 4, 5, 0]], device=device)
    src = src.expand(2, -1)
    real = tgt != 0
    logits = model(src, tgt)
    with torch.no_grad():
        model.tgt_embed.tokens.weight[0] = torch.randn(16, device=device) * 10
    torch.testing.assert_close(model(src, tgt)[real], logits[real])


def test_greedy_decode_agrees_with_teacher_forcing(device):
    model = _seq2seq(device)
    src = torch.randint(1, 13, (4, 6), device=device)
    out = model.greedy_decode(src, bos_id=1, max_len=6)
    assert out.shape == (4, 6) and out.dtype == torch.long
    # fed back its own output, the model predicts that output at every step
    tgt_in = torch.cat([torch.ones(4, 1, dtype=torch.long, device=device), out[:, :-1]], dim=1)
    predicted = model(src, tgt_in).argmax(-1)
    # a pad token in the output is masked as a key when fed back: compare up to the first pad
    for row in range(4):
        upto = int((out[row] == 0).nonzero()[0]) + 1 if (out[row] == 0).any() else 6
        assert torch.equal(predicted[row, :upto], out[row, :upto])


def test_seq2seq_gradcheck():
    torch.manual_seed(6)
    model = Seq2SeqTransformer(
        7, 5, d_model=8, num_heads=2, d_ff=8, num_layers=1, max_len=6
    ).double()
    src = torch.tensor([[3, 4, 5, 0], [6, 2, 0, 0]])
    tgt = torch.tensor([[1, 3, 2], [1, 4, 0]])
    memory = model.encode(src).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda m: model.decode(tgt, m, src), (memory,))


def test_seq2seq_bad_inputs():
    model = Seq2SeqTransformer(7, 5, d_model=8, num_heads=2, d_ff=8, num_layers=1, max_len=6)
    src, tgt = torch.tensor([[3, 4, 5]]), torch.tensor([[1, 3]])
    with pytest.raises(ValueError, match="same batch size"):
        model(src.expand(2, 3), tgt)
    with pytest.raises(
        ValueError, match=r"src must have exactly 2 dimensions \(B, L\), got shape \(3,\)"
    ):
        model(src[0], tgt)
    with pytest.raises(TypeError, match="integer tensor"):
        model(src.float(), tgt)
    with pytest.raises(ValueError, match="max_len=6"):
        model(torch.ones(1, 7, dtype=torch.long), tgt)
    with pytest.raises(TypeError, match="src must be a torch.Tensor"):
        model([[3, 4]], tgt)
    with pytest.raises(ValueError, match="bos_id"):
        model.greedy_decode(src, bos_id=5, max_len=3)
    with pytest.raises(ValueError, match="max_len"):
        model.greedy_decode(src, bos_id=1, max_len=0)
    with pytest.raises(ValueError, match="src must have exactly 2 dimensions"):
        model.greedy_decode(src[0], bos_id=1, max_len=3)
