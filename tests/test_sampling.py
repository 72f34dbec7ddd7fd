"""Sampling from a causal language model: temperature, top-k, generate (chapter 5)."""

import pytest
import torch
from torch import nn

from attncourse import CausalLM
from attncourse.sampling import generate, next_token_distribution, sample_next


def test_temperature_and_top_k_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]], dtype=torch.float64)
    torch.testing.assert_close(next_token_distribution(logits), torch.softmax(logits, -1))
    torch.testing.assert_close(
        next_token_distribution(logits, temperature=0.5), torch.softmax(2 * logits, -1)
    )
    top2 = next_token_distribution(logits, top_k=2)
    e = torch.exp(torch.tensor([2.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(
        top2, torch.cat([e / e.sum(), torch.zeros(2, dtype=torch.float64)])[None]
    )
    greedy = next_token_distribution(logits, temperature=0.0)
    assert greedy.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    # a low temperature approaches greedy, a high one approaches uniform
    assert next_token_distribution(logits, temperature=0.01)[0, 0] > 1 - 1e-12
    torch.testing.assert_close(
        next_token_distribution(logits, temperature=1e6),
        torch.full((1, 4), 0.25, dtype=torch.float64),
        atol=1e-5,
        rtol=0,
    )
    assert next_token_distribution(logits, top_k=10).shape == (1, 4)  # k >= V keeps all


def test_top_k_never_samples_outside_the_k_largest():
    torch.manual_seed(0)
    logits = torch.randn(64, 30)
    allowed = torch.topk(logits, 5, dim=-1).indices
    g = torch.Generator().manual_seed(0)
    # (64, 200)
    draws = torch.cat([sample_next(logits, top_k=5, generator=g) for _ in range(200)], dim=1)
    assert (draws[:, :, None] == allowed[:, None, :]).any(-1).all()
    # and does sample more than one of them
    assert (draws != draws[:, :1]).any()


def test_sampled_frequencies_follow_the_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    g = torch.Generator().manual_seed(0)
    draws = sample_next(logits.expand(20000, 3), generator=g)[:, 0]
    freq = torch.bincount(draws, minlength=3).double() / 20000
    torch.testing.assert_close(
        freq, torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), atol=0.015, rtol=0
    )


class Bigram(nn.Module):
    """A reference model: logits of the next token from a table, with a max_len."""

    def __init__(self, table, max_len=None):
        super().__init__()
        self.table = table
        if max_len is not None:
            self.max_len = max_len
        self.lengths = []

    def forward(self, tokens):
        self.lengths.append(tokens.size(1))
        return self.table[tokens]


def test_greedy_generation_equals_argmax_chain():
    torch.manual_seed(0)
    table = torch.randn(7, 7)
    start = torch.tensor([[3], [5]])
    expected = [start]
    for _ in range(6):
        expected.append(table[expected[-1]].argmax(-1))
    expected = torch.cat(expected, 1)
    assert torch.equal(generate(Bigram(table), start, 6, temperature=0.0), expected)
    assert torch.equal(generate(Bigram(table), start, 6, top_k=1), expected)


def test_generate_crops_to_max_len_and_is_seeded():
    table = torch.randn(7, 7)
    model = Bigram(table, max_len=4)
    out = generate(model, torch.tensor([[1, 2]]), 6, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 8) and out[0, :2].tolist() == [1, 2]
    assert model.lengths == [2, 3, 4, 4, 4, 4]
    again = generate(
        Bigram(table, max_len=4),
        torch.tensor([[1, 2]]),
        6,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(out, again)


def test_generate_with_a_causal_lm_restores_its_mode():
    torch.manual_seed(0)
    model = CausalLM.standard(9, d_model=16, num_heads=2, d_ff=32, max_len=5, dropout=0.5)
    model.train()
    start = torch.zeros(2, 3, dtype=torch.long)
    a = generate(model, start, 8, temperature=0.0)
    assert model.training and a.shape == (2, 11)
    # greedy in eval mode: the last logits of the cropped context decide each token
    model.eval()
    tokens = start
    for _ in range(8):
        nxt = model(tokens[:, -5:])[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], 1)
    assert torch.equal(a, tokens)


def test_bad_arguments():
    model = Bigram(torch.randn(4, 4))
    with pytest.raises(ValueError, match="temperature"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), 2, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), 2, top_k=0)
    with pytest.raises(ValueError, match="tokens"):
        generate(model, torch.zeros(1, 1), 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), -1)
    with pytest.raises(ValueError, match=r"\(B, V\)"):
        sample_next(torch.zeros(4))


# --- limits, precision and refusals (issue: no silent wrong result) ---------------------------


def test_float64_logits_are_computed_in_float64():
    # logits 1e-7 apart at T = 1e-6: the reference is softmax([-0.1, 0]) computed by hand
    logits = torch.tensor([1.0, 1.0 + 1e-7], dtype=torch.float64)
    probs = next_token_distribution(logits, temperature=1e-6)
    diff = (logits[0] - logits[1]).item() / 1e-6
    e = torch.tensor([diff, 0.0], dtype=torch.float64).exp()
    torch.testing.assert_close(probs, e / e.sum(), rtol=1e-9, atol=0)
    assert probs.dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_tiny_temperature_is_the_argmax_limit(dtype):
    logits = torch.tensor([[0.5, 2.0, -1.0], [3.0, 3.0, 1.0]], dtype=dtype)
    probs = next_token_distribution(logits, temperature=1e-300)
    assert torch.isfinite(probs).all() and probs.dtype == dtype
    # the limit T -> 0+: all the mass on the largest logit, shared equally by a tie
    expected = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], dtype=dtype)
    assert torch.equal(probs, expected)
    assert sample_next(logits, temperature=1e-300)[0].item() == 1


def test_numpy_and_integer_temperatures_are_numbers():
    np = pytest.importorskip("numpy")
    logits = torch.tensor([[2.0, 1.0, 0.5]], dtype=torch.float64)
    ref = next_token_distribution(logits, temperature=0.5)
    torch.testing.assert_close(next_token_distribution(logits, temperature=np.float64(0.5)), ref)
    torch.testing.assert_close(next_token_distribution(logits, temperature=np.float32(0.5)), ref)
    torch.testing.assert_close(
        next_token_distribution(logits, temperature=2),
        next_token_distribution(logits, temperature=2.0),
    )


@pytest.mark.parametrize(
    "temperature, error, words",
    [
        (-0.5, ValueError, "temperature"),
        (float("nan"), ValueError, "temperature"),
        (float("inf"), ValueError, "temperature"),
        ("1", TypeError, "temperature"),
        (True, TypeError, "temperature"),
        (None, TypeError, "temperature"),
    ],
)
def test_bad_temperatures_are_refused_by_name(temperature, error, words):
    with pytest.raises(error, match=words):
        next_token_distribution(torch.zeros(1, 3), temperature=temperature)


@pytest.mark.parametrize(
    "logits, words",
    [
        (torch.full((2, 3), float("-inf")), "-inf everywhere"),
        (torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]]), r"row \(1,\)"),
        (torch.tensor([[0.0, float("nan")]]), "NaN"),
        (torch.tensor([[0.0, float("inf")]]), r"\+inf"),
        (torch.zeros(2, 0), "V >= 1"),
    ],
)
def test_logits_without_a_distribution_are_refused(logits, words):
    with pytest.raises(ValueError, match=words):
        next_token_distribution(logits)
    with pytest.raises(ValueError, match=words):
        sample_next(logits)


def test_a_partly_minus_inf_row_is_fine():
    logits = torch.tensor([[float("-inf"), 0.0, float("-inf")]])
    assert next_token_distribution(logits).tolist() == [[0.0, 1.0, 0.0]]


def test_generate_with_cache_refuses_a_model_without_one():
    from attncourse.adaptive_span import adaptive_span_lm

    model = adaptive_span_lm(11, max_span=8, ramp=2.0, d_model=16, num_heads=2, d_ff=0, max_len=16)
    prompt = torch.tensor([[1, 2, 3]])
    with pytest.raises(TypeError, match="AdaptiveSpanBlock.*use_cache=False"):
        generate(model, prompt, 2, use_cache=True)
    assert generate(model, prompt, 2, temperature=0.0).shape == (1, 5)
    with pytest.raises(TypeError, match="use_cache"):
        generate(model, prompt, 2, use_cache="yes")
    with pytest.raises(TypeError, match="new_cache"):
        generate(Bigram(torch.randn(7, 7)), prompt, 2, use_cache=True)
