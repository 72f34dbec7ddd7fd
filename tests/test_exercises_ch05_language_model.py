"""The chapter 5 (language model) checkers accept right answers in several styles and name realistic mistakes."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import assert_fails, assert_passes

from attncourse.exercises import check
from attncourse.exercises.ch05_language_model import (
    _rope_solution,
    _shifted_loss_solution,
    _sinusoidal_solution,
    _top_k_solution,
)

# -- language-model/initial-loss -----------------------------------------------------------------


@pytest.mark.parametrize("answer", [math.log(63), 4.143, torch.tensor(63.0).log(), np.log(63)])
def test_initial_loss_accepts(answer):
    assert_passes(
        "language-model/initial-loss", float(answer) if isinstance(answer, np.floating) else answer
    )


@pytest.mark.parametrize(
    "answer, diagnosis",
    [
        (math.log2(63), "bits"),
        (63, "vocabulary size"),
        (math.log(65), "tiny-Shakespeare"),
        (1 / 63, "minus its logarithm"),
        (3.33, "unigram"),
        (2.5, "is not it"),
        ("4.14", "should be a number"),
    ],
)
def test_initial_loss_rejects(answer, diagnosis):
    assert_fails("language-model/initial-loss", answer, diagnosis)


# -- language-model/sinusoidal --------------------------------------------------------------------


def sinusoidal_loops(length, d_model):
    pe = torch.zeros(length, d_model)
    for pos in range(length):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return pe


def sinusoidal_numpy(length, d_model):
    angle = np.arange(length)[:, None] / np.power(10000.0, np.arange(0, d_model, 2) / d_model)
    return torch.from_numpy(
        np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(length, d_model)
    )


def sinusoidal_swapped(length, d_model):
    return (
        _sinusoidal_solution(length, d_model).view(length, -1, 2).flip(-1).reshape(length, d_model)
    )


def sinusoidal_concat(length, d_model):
    pe = _sinusoidal_solution(length, d_model)
    return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=-1)


def sinusoidal_i_over_d(length, d_model):
    angle = torch.arange(length)[:, None] / 10000 ** (torch.arange(d_model // 2) / d_model)
    return torch.stack([angle.sin(), angle.cos()], -1).reshape(length, d_model)


def sinusoidal_2i_twice(length, d_model):  # i already steps by 2, and 2 * i doubles it
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = torch.arange(length)[:, None] / 10000 ** (2 * i / d_model)
    return torch.stack([angle.sin(), angle.cos()], -1).reshape(length, d_model)


def sinusoidal_from_one(length, d_model):
    return _sinusoidal_solution(length + 1, d_model)[1:]


@pytest.mark.parametrize("answer", [_sinusoidal_solution, sinusoidal_loops, sinusoidal_numpy])
def test_sinusoidal_accepts(answer):
    assert_passes("language-model/sinusoidal", answer)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (sinusoidal_swapped, "swapped"),
        (sinusoidal_concat, "interleaves"),
        (sinusoidal_i_over_d, "exponent is 2i / d_model"),
        (sinusoidal_2i_twice, "yours doubles it"),
        (sinusoidal_from_one, "start at 0"),
        (lambda L, d: torch.zeros(d, L), "should have shape"),
    ],
)
def test_sinusoidal_rejects(wrong, diagnosis):
    assert_fails("language-model/sinusoidal", wrong, diagnosis)


# -- language-model/rope --------------------------------------------------------------------------


def rope_complex(x, positions):
    d = x.size(-1)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(
        torch.ones(len(positions), d // 2, dtype=torch.float64), positions[:, None].double() * theta
    )
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).reshape(x.shape).to(x.dtype)


def rope_in_place(x, positions):
    out = x.clone()
    d = x.size(-1)
    for i in range(d // 2):
        a = positions.double() * 10000.0 ** (-2 * i / d)
        c, s = a.cos()[:, None].squeeze(-1), a.sin()
        x1, x2 = x[..., 2 * i].clone(), x[..., 2 * i + 1].clone()
        out[..., 2 * i] = x1 * c - x2 * s
        out[..., 2 * i + 1] = x1 * s + x2 * c
    return out


def rope_backwards(x, positions):
    return _rope_solution(x, -positions)


def rope_neox(x, positions):
    d = x.size(-1)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    a = positions.double()[:, None] * theta
    h1, h2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([h1 * a.cos() - h2 * a.sin(), h1 * a.sin() + h2 * a.cos()], -1)


def rope_ignores_positions(x, positions):
    return _rope_solution(x, torch.arange(x.size(-2)))


def rope_in_x_dtype(x, positions):
    """Angles in x's own dtype: right in float64, and in float32 at small positions only."""
    d = x.size(-1)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = positions.to(x.dtype)[:, None] * theta
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()], dim=-1).flatten(
        -2
    )


def rope_float32_theta(x, positions):
    d = x.size(-1)
    # float32, as many tutorials write it
    theta = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)
    a = positions[:, None] * theta
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()], dim=-1).flatten(
        -2
    )


def rope_with_theta(theta_of):
    """A complex-number RoPE whose frequencies are ``theta_of(d)``, a learner's other formula."""

    def rope(x, positions):
        theta = theta_of(x.size(-1))
        turn = torch.polar(torch.ones_like(theta), positions.double()[:, None] * theta)
        pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)

    return rope


def _swapped_cos_sin(x, positions):
    d_k = x.size(-1)
    angle = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, d_k, 2).double() / d_k)
    sin, cos = angle.cos().to(x.dtype), angle.sin().to(x.dtype)  # the names swapped
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def rope_float64_out(x, positions):
    return _rope_solution(x.double(), positions)


@pytest.mark.parametrize("answer", [_rope_solution, rope_complex, rope_in_place])
def test_rope_accepts(answer):
    assert_passes("language-model/rope", answer)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (rope_backwards, "wrong way"),
        (rope_neox, "GPT-NeoX"),
        (rope_ignores_positions, "use the positions"),
        (lambda x, p: x, "returns x unchanged"),
        (lambda x, p: x.flip(-1), "differs from RoPE"),
        # the two components in the other order: a reflection, not a rotation
        (
            lambda x, p: _rope_solution(x, p).unflatten(-1, (-1, 2)).flip(-1).flatten(-2),
            "not rotated",
        ),
        # cos and sin swapped: a rotation by pi/2 - m theta_i
        (_swapped_cos_sin, "cos and sin are swapped"),
        (rope_float32_theta, "computed in float32"),
        # float32 angles for a float32 x: off by about 1e-3 rad at position 100000
        (rope_in_x_dtype, "in float32 at positions [0, 1, 4097, 100000]"),
        # right with batch dimensions only
        (lambda x, p: x if x.dim() == 2 else _rope_solution(x, p), "2-D x (6, 8)"),
        (rope_float64_out, "keep the input's dtype"),
        # 10000^(-i/d) over the d/2 pairs: the exponent counts pairs, not features
        (rope_with_theta(lambda d: 10000.0 ** (-torch.arange(d // 2).double() / d)), "-i/d"),
        (rope_with_theta(lambda d: 10000.0 ** (torch.arange(0, d, 2).double() / d)), "positive"),
        # another base: still a rotation, by other angles
        (
            rope_with_theta(lambda d: 500000.0 ** (-torch.arange(0, d, 2).double() / d)),
            "is rotated, but not by m * theta_i",
        ),
    ],
)
def test_rope_rejects(wrong, diagnosis):
    assert_fails("language-model/rope", wrong, diagnosis)


# -- language-model/top-k -------------------------------------------------------------------------


def top_k_scatter(logits, k, temperature):
    values, idx = torch.topk(logits / temperature, k, dim=-1)
    out = torch.zeros_like(logits)
    return out.scatter_(-1, idx, torch.softmax(values, -1))


def top_k_numpy(logits, k, temperature):
    z = logits.numpy() / temperature
    kth = np.sort(z, axis=-1)[..., -k][..., None]
    z = np.where(z >= kth, z, -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    return torch.from_numpy(e / e.sum(-1, keepdims=True))


def top_k_not_renormalised(logits, k, temperature):
    p = torch.softmax(logits / temperature, -1)
    kth = torch.topk(logits, k, -1).values[..., -1:]
    return p * (logits >= kth)


def top_k_times_t(logits, k, temperature):
    return _top_k_solution(logits * temperature * temperature, k, temperature)


def top_k_no_temperature(logits, k, temperature):
    return _top_k_solution(logits, k, 1.0)


def top_k_plus_one(logits, k, temperature):
    return _top_k_solution(logits, min(k + 1, logits.size(-1)), temperature)


def top_k_finite_fill(logits, k, temperature):
    """-100 for the logits outside the top k: e^-100 of weight, nothing."""
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return torch.softmax(logits.masked_fill(logits < kth, -100.0) / temperature, -1)


def top_k_forgets_t_when_k_is_v(logits, k, temperature):
    if k >= logits.size(-1):
        return torch.softmax(logits, -1)
    return _top_k_solution(logits, k, temperature)


@pytest.mark.parametrize("answer", [_top_k_solution, top_k_scatter, top_k_numpy, top_k_finite_fill])
def test_top_k_accepts(answer):
    assert_passes("language-model/top-k", answer)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (top_k_not_renormalised, "without renormalising"),
        (top_k_times_t, "multiplies the logits"),
        (top_k_no_temperature, "temperature has no effect"),
        # T applied after the softmax: undone by the renormalisation, or left in the rows' sums
        (
            lambda z, k, t: _renormalised(torch.softmax(_top_k_masked(z, k), -1) / t),
            "temperature has no effect",
        ),
        (lambda z, k, t: torch.softmax(_top_k_masked(z, k), -1) / t, "rows sum to 1 / T"),
        (top_k_plus_one, "k + 1"),
        (top_k_forgets_t_when_k_is_v, "temperature has no effect"),
        (lambda z, k, t: torch.softmax(z / t, -1), "top-k is missing"),
        # the logits outside the top k zeroed, as a learner fills a mask with 0
        (
            lambda z, k, t: torch.softmax(
                torch.where(z >= z.topk(k, -1).values[..., -1:], z / t, torch.zeros_like(z)), -1
            ),
            "set to 0, not -inf",
        ),
        # right without ties, uniform over the vocabulary at a tie with the k-th logit
        (
            lambda z, k, t: (
                torch.full_like(z, 1 / z.size(-1))
                if bool((z == z.topk(k, -1).values[..., -1:]).sum(-1).gt(1).any())
                else _top_k_solution(z, k, t)
            ),
            "tie at the k-th largest",
        ),
    ],
)
def test_top_k_rejects(wrong, diagnosis):
    assert_fails("language-model/top-k", wrong, diagnosis)


def _top_k_masked(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def _renormalised(p):
    return p / p.sum(-1, keepdim=True)


def test_the_package_functions_the_notebook_imports_do_not_pass_for_the_learners():
    from attncourse.positions import apply_rope, sinusoidal_encoding
    from attncourse.sampling import next_token_distribution

    for exercise_id, wrapper in (
        ("language-model/sinusoidal", lambda length, d: sinusoidal_encoding(length, d)),
        ("language-model/rope", lambda x, positions: apply_rope(x, positions)),
        (
            "language-model/top-k",
            lambda z, k, t: next_token_distribution(z, temperature=t, top_k=k),
        ),
    ):
        assert_fails(exercise_id, wrapper, "asks you to write yourself")


def test_rope_for_three_dimensions_only_is_told_about_the_shape():
    def three_dimensional(x, positions):  # (B, L, d) assumed: flatten(2) breaks (B, H, L, d)
        d = x.size(-1)
        theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
        angles = positions.to(x.dtype)[:, None] * theta
        c, s_ = angles.cos(), angles.sin()
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * c - x2 * s_, x1 * s_ + x2 * c], -1).flatten(2)

    message = check("language-model/rope", three_dimensional).message
    assert "x (3, 5, 4, 16)" in message and "use the positions you are given" not in message


# -- language-model/shifted-loss -------------------------------------------------------------------


def loss_log_softmax(logits, tokens):
    logp = torch.log_softmax(logits[:, :-1], -1)
    return -logp.gather(-1, tokens[:, 1:, None]).mean()


def loss_transpose(logits, tokens):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])


@pytest.mark.parametrize("answer", [_shifted_loss_solution, loss_log_softmax, loss_transpose])
def test_shifted_loss_accepts(answer):
    assert_passes("language-model/shifted-loss", answer)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda z, t: F.cross_entropy(z.reshape(-1, z.size(-1)), t.reshape(-1)), "still unshifted"),
        (
            lambda z, t: F.cross_entropy(z[:, 1:].reshape(-1, z.size(-1)), t[:, :-1].reshape(-1)),
            "wrong way",
        ),
        (
            lambda z, t: F.cross_entropy(
                z[:, :-1].reshape(-1, z.size(-1)), t[:, 1:].reshape(-1), reduction="sum"
            ),
            "summed",
        ),
        (
            lambda z, t: F.cross_entropy(
                z[:, :-1].reshape(-1, z.size(-1)), t[:, 1:].reshape(-1), reduction="none"
            ),
            "scalar",
        ),
        # shifted after flattening: the rows' ends meet the next rows' starts (it was named
        # "the wrong way" when the checker's random logits made every loss nearly equal)
        (
            lambda z, t: F.cross_entropy(z.reshape(-1, z.size(-1))[:-1], t.reshape(-1)[1:]),
            "after flattening",
        ),
        (
            lambda z, t: (
                F.cross_entropy(z[:, :-1].reshape(-1, z.size(-1)), t[:, 1:].reshape(-1)) + 1e-3
            ),
            "differs from the mean cross-entropy",
        ),
    ],
)
def test_shifted_loss_rejects(wrong, diagnosis):
    assert_fails("language-model/shifted-loss", wrong, diagnosis)


# -- language-model/temperature-experiment -----------------------------------------------------------


def measured(temperature, seed=0, n=20_000):
    """The draws of the experiment at ``temperature``: ``n`` token ids."""
    probs = torch.softmax(torch.log(torch.tensor([0.5, 0.3, 0.2])) / temperature, -1)
    return torch.multinomial(
        probs, n, replacement=True, generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_temperature_experiment_accepts_measurements(seed):
    assert_passes("language-model/temperature-experiment", measured(0.5, seed))
    assert_passes("language-model/temperature-experiment", measured(0.5, seed).tolist())
    assert_passes("language-model/temperature-experiment", measured(0.5, seed).numpy())
    assert_passes("language-model/temperature-experiment", measured(0.5, seed).float())
    # any integer dtype (torch has no comparisons for uint16 on the CPU)
    assert_passes(
        "language-model/temperature-experiment", measured(0.5, seed).numpy().astype("uint16")
    )


@pytest.mark.parametrize("value", [0.25 / 0.38, 0.658, torch.tensor(0.25 / 0.38), 13158 / 20000])
def test_temperature_experiment_rejects_the_closed_form(value):
    """A number, however close to the truth, is not a measurement: the draws must be passed."""
    assert_fails("language-model/temperature-experiment", value, "not a number")


def _blocks(tokens, counts):
    return torch.cat([torch.full((n,), token) for token, n in zip(tokens, counts)])


def _shuffled(counts):
    ids = torch.cat([torch.full((n,), token) for token, n in enumerate(counts)])
    return ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(3))]


@pytest.mark.parametrize(
    "answer, diagnosis",
    [
        (measured(1.0), "temperature was not applied"),
        (measured(2.0), "multiplied the logits"),
        (torch.zeros(20_000, dtype=torch.long), "greedy"),
        (_shuffled([16_000, 2_000, 2_000]), "is not it"),
        (measured(0.5).sort().values, "sorted"),
        # the right counts written out as blocks, in another order than ascending
        (_blocks([2, 1, 0], [2_105, 4_737, 13_158]), "long runs"),
        (measured(0.5, n=2000), "20,000"),
        (measured(0.5) + 1, "0, 1 or 2"),
        (_shuffled([13_158, 6_842]), "both appear"),
        # the right frequencies as a pattern repeated: right counts, changes enough, not random
        (torch.tensor(([0, 1] * 9 + [0, 2] * 4 + [0] * 12) * 526 + [0] * 12), "follow a pattern"),
    ],
)
def test_temperature_experiment_rejects(answer, diagnosis):
    assert_fails("language-model/temperature-experiment", answer, diagnosis)


def test_sinusoidal_and_rope_refuse_the_package_angles():
    """rope_angles gives pos * 10000^(-2i/d), the frequencies both exercises ask for."""
    from attncourse.positions import rope_angles

    def sinusoidal_from_angles(length, d_model):
        angle = rope_angles(torch.arange(length), d_model)
        return torch.stack([angle.sin(), angle.cos()], -1).reshape(length, d_model)

    assert_fails("language-model/sinusoidal", sinusoidal_from_angles, "rope_angles")

    def rope_from_angles(x, positions):
        angle = rope_angles(positions, x.size(-1)).to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        cos, sin = angle.cos(), angle.sin()
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)

    assert_fails("language-model/rope", rope_from_angles, "rope_angles")
