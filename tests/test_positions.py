"""Position encodings: sinusoidal, learned, RoPE, ALiBi (chapter 5)."""

import math

import pytest
import torch
from torch import nn

from attncourse import CausalLM, MultiHeadAttention, TransformerBlock
from attncourse.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_encoding,
)


def test_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    perm = torch.randperm(7)
    out = layer(x, x, x)[0]
    torch.testing.assert_close(layer(x[:, perm], x[:, perm], x[:, perm])[0], out[:, perm])
    # adding positions breaks it
    pe = sinusoidal_encoding(7, 16, dtype=torch.float64)
    y = x + pe
    y_perm = x[:, perm] + pe
    assert not torch.allclose(layer(y_perm, y_perm, y_perm)[0], layer(y, y, y)[0][:, perm])


def test_sinusoidal_matches_the_paper_formula_elementwise():
    d, length = 10, 13
    pe = sinusoidal_encoding(length, d, dtype=torch.float64)
    for pos in range(length):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    assert pe.shape == (length, d) and sinusoidal_encoding(3, 4).dtype == torch.float32


def test_sinusoidal_offset_is_a_linear_map():
    """The paper's motivation: PE[pos + k] is a fixed linear (rotation) function of PE[pos] for each k."""
    d, k = 8, 3
    pe = sinusoidal_encoding(50, d, dtype=torch.float64)
    # (d, d) fitted on all positions at once
    solution = torch.linalg.lstsq(pe[:-k], pe[k:]).solution
    torch.testing.assert_close(pe[:-k] @ solution, pe[k:], atol=1e-9, rtol=0)


def test_rope_equals_complex_multiplication():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    pos = torch.arange(6)
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    as_complex = torch.view_as_complex(x.reshape(2, 6, 4, 2).contiguous())
    rotated = as_complex * torch.polar(torch.ones(6, 4, dtype=torch.float64), pos[:, None] * theta)
    torch.testing.assert_close(apply_rope(x, pos), torch.view_as_real(rotated).reshape(2, 6, 8))
    torch.testing.assert_close(rope_angles(pos, 8), pos[:, None].double() * theta)


def test_rope_score_depends_only_on_the_offset():
    torch.manual_seed(0)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)

    def score(m, n):
        return (
            apply_rope(q[None], torch.tensor([m])) @ apply_rope(k[None], torch.tensor([n])).T
        ).item()

    for m, n in [(5, 2), (40, 37), (103, 100)]:
        assert score(m, n) == pytest.approx(score(3, 0), abs=1e-10)
    assert abs(score(5, 2) - score(5, 3)) > 1e-3  # a different offset gives a different score
    # rotations keep the norm
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x, torch.arange(5) * 7).norm(dim=-1), x.norm(dim=-1))


def test_alibi_slopes_from_the_paper():
    assert alibi_slopes(8) == pytest.approx([1 / 2**i for i in range(1, 9)])
    assert alibi_slopes(16)[:2] == pytest.approx([2**-0.5, 1 / 2])
    # 12 heads: the 8 slopes of 8 heads, then every other slope of 16 heads (the authors' code)
    sixteen = [2 ** (-0.5 * i) for i in range(1, 17)]
    assert alibi_slopes(12) == pytest.approx(alibi_slopes(8) + sixteen[0::2][:4])
    assert len(alibi_slopes(6)) == 6


def test_alibi_bias_is_minus_slope_times_distance():
    bias = alibi_bias(4, 3, 5, dtype=torch.float64)
    slopes = alibi_slopes(4)
    assert bias.shape == (4, 3, 5)
    for h in range(4):
        for i in range(3):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * ((i + 2) - j))
    assert torch.all(bias[:, torch.arange(3), torch.arange(2, 5)] == 0)  # the diagonal m = n
    with pytest.raises(ValueError, match="source"):
        alibi_bias(4, 5, 3)


def test_position_functions_check_their_input():
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(4, 7)
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.randn(3, 5), torch.arange(3))
    with pytest.raises(ValueError, match="one entry per row"):
        apply_rope(torch.randn(3, 4), torch.arange(4))
    with pytest.raises(TypeError):
        apply_rope(torch.ones(3, 4, dtype=torch.long), torch.arange(3))
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "none", "rope", "alibi"])
def test_causal_lm_positional_options(positional):
    torch.manual_seed(0)
    model = CausalLM.standard(
        10, d_model=16, num_heads=2, d_ff=32, max_len=12, positional=positional
    ).double()
    tokens = torch.randint(10, (2, 12))
    logits = model(tokens)
    assert logits.shape == (2, 12, 10)
    # the same token at two positions gets the same embedding only without positions
    same = torch.full((1, 12), 3)
    emb = model.embed(same)[0]
    # ... or with positions inside attention (RoPE, ALiBi), which add nothing to the embeddings
    assert torch.allclose(emb[0], emb[5]) == (positional in ("none", "rope", "alibi"))
    if positional == "sinusoidal":
        torch.testing.assert_close(
            emb - model.embed.tokens.weight[3], sinusoidal_encoding(12, 16, dtype=torch.float64)
        )
        assert not any("table" in name for name in model.state_dict())  # fixed, not saved
    if positional in ("learned", "sinusoidal"):  # a table of max_len rows
        with pytest.raises(ValueError, match="max_len=12"):
            model(torch.zeros(1, 13, dtype=torch.long))
    else:  # no table: any length
        assert model(torch.zeros(1, 13, dtype=torch.long)).shape == (1, 13, 10)


def test_bad_positional_is_rejected():
    with pytest.raises(ValueError, match="positional"):
        CausalLM.standard(10, positional="rotary")
    with pytest.raises(TypeError, match="positional"):
        CausalLM.standard(10, positional=None)


@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_relative_positions_must_be_built_into_the_blocks(positional):
    blocks = [TransformerBlock(16, 2, 32)]
    with pytest.raises(ValueError, match=f"positional='{positional}'.*blocks\\[0\\]"):
        CausalLM(10, 16, 12, blocks, positional=positional)
    with pytest.raises(ValueError, match="blocks\\[0\\] was built with positional"):
        CausalLM(10, 16, 12, [TransformerBlock(16, 2, 32, positional=positional)])
    with pytest.raises(TypeError, match="inside attention"):
        CausalLM(10, 16, 12, [nn.Linear(16, 16)], positional=positional)


@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_relative_positions_train(positional):
    """Gradients reach every parameter, and the model tells positions apart."""
    torch.manual_seed(0)
    model = CausalLM.standard(10, d_model=16, num_heads=2, d_ff=32, positional=positional)
    tokens = torch.randint(10, (2, 9))
    model(tokens).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # "1 2 3" and "2 1 3": the last token sees the same set of tokens in another order (in one
    # layer without positions, a set)
    logits = model(torch.tensor([[1, 2, 3], [2, 1, 3]]))[:, -1]
    assert not torch.allclose(logits[0], logits[1])
    none = CausalLM.standard(10, d_model=16, num_heads=2, num_layers=1, positional="none")
    plain = none(torch.tensor([[1, 2, 3], [2, 1, 3]]))[:, -1]
    torch.testing.assert_close(plain[0], plain[1])  # without positions: a set


# --- dtypes and positions that have no real meaning are refused ---------------------------------


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.bool, torch.complex64])
def test_tables_of_real_values_refuse_non_floating_dtypes(dtype):
    with pytest.raises(TypeError, match="dtype"):
        sinusoidal_encoding(4, 8, dtype=dtype)
    with pytest.raises(TypeError, match="dtype"):
        alibi_bias(2, 4, dtype=dtype)
    with pytest.raises(TypeError, match="dtype"):
        sinusoidal_encoding(4, 8, dtype="float32")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_tables_keep_a_floating_dtype(dtype):
    assert sinusoidal_encoding(4, 8, dtype=dtype).dtype == dtype
    assert alibi_bias(2, 4, dtype=dtype).dtype == dtype


def test_rope_refuses_boolean_complex_and_non_finite_positions():
    x = torch.randn(3, 4)
    with pytest.raises(TypeError, match="positions"):
        apply_rope(x, torch.tensor([True, False, True]))
    with pytest.raises(TypeError, match="positions"):
        apply_rope(x, torch.arange(3).to(torch.complex64))
    with pytest.raises(ValueError, match="positions"):
        apply_rope(x, torch.tensor([0.0, float("nan"), 2.0]))
    # integer and real positions are fine and agree
    torch.testing.assert_close(
        apply_rope(x, torch.arange(3)), apply_rope(x, torch.arange(3).double())
    )


def test_position_shapes_a_mutation_audit_found():
    # positions are (L,): a column (L, 1) is refused, not broadcast into (L, 1, head_dim / 2)
    with pytest.raises(ValueError, match="positions must be 1-D"):
        rope_angles(torch.arange(5)[:, None], 8)
    # a vector without a row dimension is refused with the package's error, not an IndexError
    with pytest.raises(ValueError, match=r"x must be \(\.\.\., L, head_dim\)"):
        apply_rope(torch.randn(8), torch.arange(1))
