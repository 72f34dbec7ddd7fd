"""Chapter 5 exercises: from attention to a language model."""

from __future__ import annotations

import torch

from ..positions import apply_rope, rope_angles, sinusoidal_encoding
from ..sampling import next_token_distribution
from ..training import next_token_loss
from ._core import (
    Mistake,
    call,
    check_number,
    diagnose,
    exercise,
    expect_tensor,
    matches,
    random_tensor,
    softmax_over,
)
from ._i18n import _

# -- 1. the initial loss (predict a number) ------------------------------------------------------

_LOSS = "VVpFWlBeRkZEV1dHTV9WXEY="
_LOSS_MISTAKES = (
    "GlZBQFpYQkBEXFhGR1paVkxDREdbVFY6Cw4BUhoWQRgbCVFHQ0FaSUEAHAtDAxoBAEUIGlQMChsGSVM1GCAbHAAHUg"
    "FTBhMbBx1OChsGAQoRDVQbEAoGUgcNBFQaDxcaBxMfRQ0bEw8RBgEaHklBBxtOFwcQUhILEgMRHEMGBlIaC0EaFRoQ"
    "QVdeU0dXR1ZUQ01DQVMMElQABgZPAx0QBAMBGA8RFlUBGh8EVCJVQxsdF1MJDgcHTgwJVRNTEA8dEgERAlUVBgASB1"
    "QHEE8BGhZFDRsTDxEGARoeRQ4SVBoLClUcBggDEQZODAlVERsKCBcRHU1NWVJRUU9FQ1pQV0JARVxZTUFYUFhXSFNH"
    "V0FUBxBPARoWRRcbFw8BGhkTARxBGxJOFwcQUgYWFBUYThcGGwteNgkVHwsQHxATAQBBEh0CBlRVERwQDwBUGgsKVR"
    "YaFhUdGg0XTxYaEhcAFwALERxVHRVFFRwdHUMbEAoHRUkAGwVNGRoREgc+Bx0UBkZbUF9FQ0RaXlJaTUVAVVBBTFlQ"
    "X0RHS1JTVk5OQV5aREBFCAdUGgsKVQIBCgMVFgcPBgELUxEJEVQbDQYTHQEIQRkbCgYDVRUaEwQHVBoLClUAGgIJAF"
    "QNCw4HExARBAZPThcHEFIfChIHVAcQTxgbHRASVB0aEE8ZHRQEEx0ABg5BV15TR1JaR11TX0FFSlRTQ0ReUlZMRlFf"
    "QVYgBgIbVRsARRUcEU4GAQEAHBUYVBsIQxsdF1MGCRUGDwAbEABTAxMRBRsGARYbFhZBXAAGBk8AHBoCExUZTgEOBh"
    "cfDA8RXUJDGx0XUwkOBwdODAlVE1MIDhARAkMbHRMHRQkVB04PChQAHRFBABwLQwkHFwIQBBoXBwYcTlISEUEdGgcX"
    "BhQeGhYAAB0BDU8cBlMNAAdUAgYOBxwHRQ8bAAYKARJcUUlBVkVAVFZMQUdVVEBNWlZcQEpCUkNOVEw3BxQGUwwSVB"
    "gBBF5FWkVWSE9UGgsKVREBChIHWQsNGwcdAxxBAQcLEE8BGhZFDxUAGxEOGVIfCgYVBgcXBxhcURg="
)
_LOSS_SOLUTION = (
    "NRwRThYBAQASDA8REE4OABEXH0VJDhEcDE8aBwcVFABUAgIWEABaRQYdAgsQTxAEFhcYVBsABk8aFFMRCRFUOENSVU"
    "RARQIcFRwCDAEXARZBABwLQxwUHxZFDRsTBxdDVQEcbxIbEhoODg1SFAwXEQdOBg4WGlMVExsWDwEGGRsHHEFFW1hQ"
    "TxQcF0UVHBFOAB0aAQBIBBoAHAwfDFIcA0EVGhdDGxQAFAAVVB0dQ0IZHFtUTkJHR0NSVR4dRVdHVFNDW1tDR1ZBGh"
    "UaEGVdR11cVkNUDAobBltdRSBUGAEQHFUFFgkNVBUMDBkQUh8LQSJUDxdPBgYWFUFEVAMGDhsBUxEJEVQHDQYBGxIJ"
    "QRgbCQobBlISFwRUFwENCRwWFgsVGA1OFB0aHBRL"
)


@exercise(
    "language-model/initial-loss",
    title="The loss of an untrained character model",
    hint=(
        """
            An untrained model whose output layer is zero gives every character the same
            logit. What probability does the right character get, and what is the
            cross-entropy of that probability?
        """,
        """
            An untrained model whose output layer is zero gives every character the same logit.
            What probability does softmax then give the right character, and what is the
            cross-entropy (natural logarithm) of that probability? The vocabulary is
            CharTokenizer(load_text()).vocab_size characters.
        """,
    ),
    solution=_LOSS_SOLUTION,
)
def _check_initial_loss(answer) -> str:
    return check_number(
        answer,
        _LOSS,
        _LOSS_MISTAKES,
        what=_("loss"),
        rel_tol=1e-3,
        mistake_rel_tol=1e-3,
        right=(
            _(
                "Right: ln V nats. Check it on every new model before training: a much larger first "
                "loss means confidently wrong initial logits."
            )
        ),
        otherwise=(
            _(
                "{value:g} is not it. The model spreads its probability evenly over the V "
                "characters; the loss is -ln of the probability of the right one."
            )
        ),
    )


# -- 2. sinusoidal encoding ----------------------------------------------------------------------


def _sinusoidal_solution(length, d_model):
    position = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d/2,)
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * inv_freq)
    pe[:, 1::2] = torch.cos(position * inv_freq)
    return pe


def _sinusoidal_variants(length, d_model):
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos * 10000.0 ** (-i / d_model)

    def interleave(even, odd):
        pe = torch.zeros(length, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = even, odd
        return pe

    half = pos * 10000.0 ** (-(i / 2) / d_model)  # exponent i / d instead of 2i / d
    double = pos * 10000.0 ** (-(2 * i) / d_model)  # 2 * arange(0, d, 2): the 2 counted twice
    return {
        (
            _(
                "The frequencies are wrong: the exponent is 2i / d_model with 2i the even feature "
                "index itself, 0, 2, 4, ...; yours doubles it (2 * arange(0, d_model, 2)). Use "
                "arange(0, d_model, 2) / d_model, or 2 * arange(d_model // 2) / d_model."
            )
        ): interleave(double.sin(), double.cos()),
        _(
            "Sine and cosine are swapped: the even features (0, 2, 4, ...) are sines, the odd "
            "ones cosines."
        ): interleave(angle.cos(), angle.sin()),
        (
            _(
                "The sines fill the first half and the cosines the second (a concatenation, as "
                "tensor2tensor does): the paper interleaves them, PE[pos, 2i] = sin, PE[pos, 2i + 1] "
                "= cos."
            )
        ): torch.cat([angle.sin(), angle.cos()], dim=-1),
        (
            _(
                "The frequencies are wrong: the exponent is 2i / d_model, where 2i is the even "
                "feature index (0, 2, 4, ...), so use arange(0, d_model, 2) / d_model."
            )
        ): interleave(half.sin(), half.cos()),
        (
            _(
                "You multiplied the position by 10000^(2i/d) instead of dividing: the wavelengths "
                "grow from 2*pi to 10000 * 2*pi."
            )
        ): interleave(
            (pos * 10000.0 ** (i / d_model)).sin(), (pos * 10000.0 ** (i / d_model)).cos()
        ),
        _("The positions start at 1; they start at 0 (the first row is sin 0 = 0, cos 0 = 1)."): (
            interleave(
                ((pos + 1) * 10000.0 ** (-i / d_model)).sin(),
                ((pos + 1) * 10000.0 ** (-i / d_model)).cos(),
            )
        ),
    }


@exercise(
    "language-model/sinusoidal",
    title="Sinusoidal position encodings",
    hint=(
        """
            Each pair of columns is a sine and a cosine of the position at one frequency,
            the frequencies falling geometrically across the pairs. Build the table of
            angles by broadcasting positions against frequencies.
        """,
        """
            Build a (length, 1) column of positions and a (d_model / 2,) row of inverse frequencies
            10000^(-2i / d_model) for 2i = 0, 2, 4, ...; their product is the (length, d_model / 2)
            table of angles. Write sin(angles) into the even columns pe[:, 0::2] and cos(angles)
            into the odd columns pe[:, 1::2].
        """,
    ),
    solution=_sinusoidal_solution,
    name="sinusoidal",
    # rope_angles computes the same angles, pos / 10000^(2i/d): the frequencies are the exercise
    forbids=(sinusoidal_encoding, rope_angles, apply_rope),
)
def _check_sinusoidal(fn) -> str:
    for length, d_model in ((7, 10), (50, 16)):
        expected = sinusoidal_encoding(length, d_model, dtype=torch.float64)
        out = expect_tensor(
            call(fn, length, d_model),
            (length, d_model),
            _("The encoding for length={length}, d_model={d_model}").format(
                length=length, d_model=d_model
            ),
        )
        if not matches(out, expected):
            raise Mistake(
                diagnose(
                    out,
                    _sinusoidal_variants(length, d_model),
                    default=(
                        _(
                            "Your table differs from PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = "
                            "cos(...) for length={length}, d_model={d_model}."
                        ).format(length=length, d_model=d_model)
                    ),
                )
            )
    return _("Your encoding matches the paper's formula.")


# -- 3. RoPE --------------------------------------------------------------------------------------


def _rope_solution(x, positions):
    d_k = x.size(-1)
    theta = 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # (d_k/2,)
    angle = positions.double()[:, None] * theta  # (L, d_k/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def _rope_variants(x, positions):
    d = x.size(-1)
    pairs = torch.arange(0, d, 2, dtype=torch.float64)  # 2i for i = 0 .. d/2 - 1
    x1, x2 = x[..., 0::2], x[..., 1::2]
    h1, h2 = x[..., : d // 2], x[..., d // 2 :]

    def rotated(theta, sign=1.0, swap=False):
        angle = positions.double()[:, None] * theta
        cos, sin = angle.cos(), sign * angle.sin()
        if swap:
            cos, sin = sin, cos
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)

    theta = 10000.0 ** (-pairs / d)
    angle = positions.double()[:, None] * theta
    cos, sin = angle.cos(), angle.sin()
    return {
        _(
            "You rotate the wrong way (by -m*theta): the second component is x1 sin + x2 cos, "
            "the first x1 cos - x2 sin."
        ): rotated(theta, sign=-1.0),
        (
            _(
                "You paired feature i with feature i + d_k/2 (GPT-NeoX's layout, and Hugging Face's "
                "rotate_half); this exercise follows the paper, as Meta's LLaMA code does, and "
                "pairs neighbours (2i, 2i + 1)."
            )
        ): torch.cat([h1 * cos - h2 * sin, h1 * sin + h2 * cos], dim=-1),
        _("The frequencies are wrong: theta_i = 10000^(-2i/d_k) for i = 0 .. d_k/2 - 1."): (
            rotated(theta / 2)
        ),
        _(
            "Your exponent is -i/d_k: theta_i = 10000^(-2i/d_k), where 2i runs over 0, 2, ..., d_k - 2 "
            "(torch.arange(0, d_k, 2) / d_k, with d_k = x.size(-1))."
        ): rotated(10000.0 ** (-pairs / 2 / d)),
        _(
            "Your exponent is positive, so the angles grow with i: theta_i = 10000^(-2i/d_k), the "
            "first pair turning fastest (one radian a position) and the last slowest."
        ): rotated(10000.0 ** (pairs / d)),
        _("Your function returns x unchanged: rotate the pair i of position m by m * theta_i."): x,
        _(
            "cos and sin are swapped: position 0 must not turn at all (cos 0 = 1, sin 0 = 0); the "
            "pair goes to (x1 cos - x2 sin, x1 sin + x2 cos)."
        ): rotated(theta, swap=True),
        (
            _(
                "You added the rotation (x + cos/sin terms) instead of rotating: RoPE multiplies "
                "each pair by a rotation matrix."
            )
        ): (x + torch.stack([cos, sin], dim=-1).flatten(-2)),
    }


def _rope_default(out: torch.Tensor, x: torch.Tensor) -> str:
    """The message for an unknown wrong map: is it at least a rotation of each pair, by an angle
    that depends only on the position and the pair (the same for every vector)?"""
    x1, x2, o1, o2 = x[..., 0::2], x[..., 1::2], out[..., 0::2], out[..., 1::2]
    length = x1**2 + x2**2
    if not matches(o1**2 + o2**2, length):
        return _("Your rotation differs from RoPE on x (2, 6, 8), positions 0..5.")
    # the cosine and sine of the angle that takes (x1, x2) to (o1, o2), per vector
    cos, sin = (x1 * o1 + x2 * o2) / length, (x1 * o2 - x2 * o1) / length
    if matches(cos, cos[:1].expand_as(cos)) and matches(sin, sin[:1].expand_as(sin)):
        return _(
            "Each pair (x[..., 2i], x[..., 2i + 1]) is rotated, but not by m * theta_i with "
            "theta_i = 10000^(-2i/d_k): check the base 10000, the exponent and the positions "
            "(position 0 is not turned at all)."
        )
    return _(
        "Each pair keeps its length but is not rotated (the angle would depend on the vector): "
        "a rotation sends (x1, x2) to (x1 cos - x2 sin, x1 sin + x2 cos). Check the order and "
        "the signs of the two components, and that cos and sin are not swapped."
    )


@exercise(
    "language-model/rope",
    title="Rotary position embedding",
    hint=(
        """
            RoPE treats the features in pairs, each pair a point in the plane, and rotates
            the pair of position m by an angle proportional to m, with a different
            frequency per pair.
        """,
        """
            Pair the features as (x[..., 0::2], x[..., 1::2]): each pair is a point in the plane.
            Rotate the pair of position m by the angle m * theta_i, theta_i = 10000^(-2i/d_k):
            (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos). Put the results back interleaved
            (torch.stack([...], dim=-1).flatten(-2)). Or view the pairs as complex numbers and
            multiply by exp(i m theta).
        """,
    ),
    solution=_rope_solution,
    name="rope",
    forbids=(apply_rope, rope_angles, sinusoidal_encoding),
)
def _check_rope(fn) -> str:
    x, positions = random_tensor(2, 6, 8, seed=30), torch.arange(6)
    out = expect_tensor(call(fn, x, positions), (2, 6, 8), _("apply_rope for x (2, 6, 8)"))
    if not matches(out, apply_rope(x, positions)):
        raise Mistake(
            diagnose(
                out,
                _rope_variants(x, positions),
                default=_rope_default(out, x),
            )
        )
    x, positions = random_tensor(3, 5, 4, 16, seed=31), torch.tensor([3, 10, 11, 40])
    out = expect_tensor(
        call(fn, x, positions),
        (3, 5, 4, 16),
        _("apply_rope for x (3, 5, 4, 16), two batch dimensions"),
    )
    if not matches(out, apply_rope(x, positions)):
        if matches(out, apply_rope(x, torch.arange(4))):
            raise Mistake(
                _(
                    "Right for positions 0..L-1, wrong for the positions [3, 10, 11, 40] with batch "
                    "dimensions: use the positions you are given."
                )
            )
        raise Mistake(
            _(
                "Right for x (2, 6, 8), wrong for x (3, 5, 4, 16) at positions [3, 10, 11, 40]: "
                "rotate the pairs of the last dimension, whatever the dimensions before it."
            )
        )
    x, positions = random_tensor(2, 6, 8, seed=34, dtype=torch.float32), torch.arange(6)
    out = call(fn, x, positions)  # float32 in, float32 out (the dtype rule)
    if not (isinstance(out, torch.Tensor) and matches(out, apply_rope(x, positions))):
        raise Mistake(_("Right in float64, wrong for a float32 x (2, 6, 8) at positions 0..5."))
    x, positions = random_tensor(6, 8, seed=36), torch.arange(6)
    out = call(fn, x, positions)  # one sequence, no batch dimension
    if not (isinstance(out, torch.Tensor) and matches(out, apply_rope(x, positions))):
        raise Mistake(
            _(
                "Right with batch dimensions, wrong for a 2-D x (6, 8) at positions 0..5: rotate "
                "the pairs of the last dimension, whatever the dimensions before it (none here)."
            )
        )
    # a long context: angles up to 1e5 rad, in float64 and in float32
    for dtype in (torch.float64, torch.float32):
        x, positions = (
            random_tensor(1, 4, 16, seed=35, dtype=dtype),
            torch.tensor([0, 1, 4097, 100000]),
        )
        out = call(fn, x, positions)
        if not (isinstance(out, torch.Tensor) and matches(out, apply_rope(x, positions))):
            raise Mistake(
                _(
                    "Right for small positions, wrong for x (1, 4, 16) in {dtype} at positions [0, "
                    "1, 4097, 100000]: at such positions a theta_i or an angle computed in float32 "
                    "(torch.arange(0, d_k, 2) / d_k without a dtype, or in x's dtype) puts the angle "
                    "m * theta_i off by about 1e-3 rad; compute theta and the angles in float64, "
                    "then return x's dtype."
                ).format(dtype=str(dtype).removeprefix("torch."))
            )
    q, k = random_tensor(1, 16, seed=32), random_tensor(1, 16, seed=33)
    score = lambda m, n: (call(fn, q, torch.tensor([m])) @ call(fn, k, torch.tensor([n])).T).item()  # noqa: E731
    if abs(score(7, 2) - score(105, 100)) > 1e-8:
        raise Mistake(_("The score of a rotated query and key should depend only on m - n."))
    return _("Your RoPE matches: the score of positions m and n depends only on m - n.")


# -- 4. temperature and top-k -----------------------------------------------------------------------


def _top_k_solution(logits, k, temperature):
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits / temperature, dim=-1)


def _top_k_variants(logits, k, temperature):
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    probs = torch.softmax(logits / temperature, dim=-1)
    kth_k1 = torch.topk(logits, k + 1, dim=-1).values[..., -1:] if k + 1 <= logits.size(-1) else kth
    return {
        (
            _(
                "The probabilities outside the top k were set to zero after the softmax, without "
                "renormalising: the kept ones must sum to 1 (mask the logits with -inf, then "
                "softmax)."
            )
        ): (probs * (logits >= kth)),
        (
            _(
                "Your function multiplies the logits by the temperature; divide them by it (a low temperature "
                "sharpens the distribution)."
            )
        ): torch.softmax((logits * temperature).masked_fill(logits < kth, float("-inf")), dim=-1),
        _(
            "The temperature has no effect on your distribution: either it is not used, or it "
            "scales the probabilities or shifts the logits, which normalising undoes. Divide the "
            "logits by T before the softmax."
        ): torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1),
        _(
            "Your rows sum to 1 / T: you divided the probabilities by T after the softmax. Divide "
            "the logits by T before it."
        ): torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1) / temperature,
        (
            _(
                "You kept k + 1 tokens: keep the logits >= the k-th largest (topk(...).values[..., "
                "-1:] is the k-th)."
            )
        ): torch.softmax(
            (logits / temperature).masked_fill(logits < kth_k1, float("-inf")), dim=-1
        ),
        _("top-k is missing: every token keeps some probability."): probs,
        _(
            "The logits outside the top k are set to 0, not -inf: exp(0) is not 0, so those tokens "
            "keep some probability. Fill them with float('-inf')."
        ): torch.softmax((logits / temperature).masked_fill(logits < kth, 0.0), dim=-1),
        (
            _(
                "You kept k - 1 tokens: keep every logit >= the k-th largest (topk(...).values[..., "
                "-1:] is the k-th, and it stays)."
            )
        ): (
            torch.softmax((logits / temperature).masked_fill(logits <= kth, float("-inf")), dim=-1)
            if k > 1
            else None
        ),
        _(
            "The softmax runs over the wrong dimension (not the vocabulary): each row, one "
            "position, must sum to 1 over the vocabulary: softmax(..., dim=-1)."
        ): _over_rows(logits, k, temperature),
    }


def _over_rows(logits, k, temperature):
    with softmax_over(-2):
        return _top_k_solution(logits, k, temperature)


@exercise(
    "language-model/top-k",
    title="Temperature and top-k sampling",
    hint=(
        """
            Keep the k largest logits of each row and make every other token impossible
            before the softmax. What value of a logit makes a token's probability exactly
            zero?
        """,
        """
            1. Find the k-th largest logit of each row: torch.topk(logits, k, dim=-1).values[..., -1:].
            2. Set every logit below it to -inf.
            3. Return softmax(logits / temperature) over the last dimension.
        """,
    ),
    solution=_top_k_solution,
    name="top_k_distribution",
    forbids=(next_token_distribution,),
)
def _check_top_k(fn) -> str:
    for shape, k, temperature in (((4, 10), 3, 0.7), ((2, 3, 50), 5, 1.5), ((5, 10), 10, 1.3)):
        logits = random_tensor(*shape, seed=40 + k)
        expected = next_token_distribution(logits, temperature=temperature, top_k=k)
        out = expect_tensor(
            call(fn, logits, k, temperature),
            shape,
            _("The distribution for logits {shape}").format(shape=shape),
        )
        if not matches(out, expected):
            raise Mistake(
                diagnose(
                    out,
                    _top_k_variants(logits, k, temperature),
                    default=(
                        _(
                            "Your distribution differs from softmax(top-k logits / T) for logits {shape}, k={k}, "
                            "T={temperature}."
                        ).format(shape=shape, k=k, temperature=temperature)
                    ),
                )
            )
    _check_top_k_ties(fn)
    return _(
        "Your top-k distribution matches: the k largest logits keep probability (with ties at "
        "the k-th, every tied one or exactly k), renormalised, sharpened or flattened by T."
    )


def _check_top_k_ties(fn) -> None:
    """Ties at the k-th largest logit: keeping every tied logit (the package's choice) or exactly
    k of them (torch.topk, then scatter) are both top-k; the kept ones must share
    softmax(logits / T)."""
    tied = torch.tensor([[2.0, 1.0, 1.0, 0.0], [0.5, 0.5, 0.5, -1.0]], dtype=torch.float64)
    out = expect_tensor(
        call(fn, tied, 2, 0.8), tied.shape, _("The distribution for logits with ties")
    )
    for row, probs in zip(tied, out.detach().to(torch.float64)):
        kth = row.topk(2).values[-1]
        kept = probs > 1e-30  # a finite fill such as -100 leaves e^-100: nothing
        allowed = bool((kept <= (row >= kth)).all() and (kept >= (row > kth)).all())
        if allowed and int(kept.sum()) in (2, int((row >= kth).sum())):
            expected = torch.softmax((row / 0.8).masked_fill(~kept, float("-inf")), dim=-1)
            if matches(probs, expected):
                continue
        raise Mistake(
            _(
                "With a tie at the k-th largest logit (logits {row}, k = 2, T = 0.8) keep every "
                "tied logit or exactly k of them, and give the kept ones softmax(logits / T) "
                "renormalised; your distribution is {probs}."
            ).format(
                row=[round(x, 2) for x in row.tolist()], probs=[round(x, 3) for x in probs.tolist()]
            )
        )


# -- 5. find the bug: the next-token loss -------------------------------------------------------------


def _shifted_loss_solution(logits, tokens):
    predicted = logits[:, :-1]  # the logits at t predict the token at t + 1
    targets = tokens[:, 1:]
    return torch.nn.functional.cross_entropy(
        predicted.reshape(-1, predicted.size(-1)), targets.reshape(-1)
    )


@exercise(
    "language-model/shifted-loss",
    title="Find the bug: a language-model loss that is too easy",
    hint=(
        """
            A causal model's logits at position t have seen tokens 0..t. Which token may
            they be asked to predict?
        """,
        """
            A causal model's logits at position t have seen tokens 0..t. Which token may they be
            asked to predict? Drop the last position's logits and the first token.
        """,
    ),
    solution=_shifted_loss_solution,
    name="lm_loss",
    forbids=(next_token_loss,),
)
def _check_shifted_loss(fn) -> str:
    tokens = torch.randint(11, (3, 9), generator=torch.Generator().manual_seed(51))
    # logits that predict the next token well: the right loss is small, and every wrong
    # pairing of logits with tokens costs far more than a rounding error
    logits = random_tensor(3, 9, 11, seed=50)
    logits[:, :-1] += 6 * torch.nn.functional.one_hot(tokens[:, 1:], 11).to(logits.dtype)
    out = call(fn, logits, tokens)
    if not isinstance(out, torch.Tensor) or out.dim() != 0:
        raise Mistake(_("Return the mean loss as a scalar tensor."))
    expected = next_token_loss(logits, tokens)
    if matches(out, expected):
        return _(
            "Right: the logits at t are scored on token t + 1; unshifted, the model would only "
            "have to copy its input."
        )
    ce = torch.nn.functional.cross_entropy
    v = logits.size(-1)
    raise Mistake(
        diagnose(
            out,
            {
                (
                    _(
                        "The loss is still unshifted: logits[:, t] are compared with tokens[:, t], the token "
                        "the model already sees."
                    )
                ): ce(logits.reshape(-1, v), tokens.reshape(-1)),
                (
                    _(
                        "Shifted the wrong way: logits[:, 1:] against tokens[:, :-1] asks each position for "
                        "the token before it. Use logits[:, :-1] and tokens[:, 1:]."
                    )
                ): ce(logits[:, 1:].reshape(-1, v), tokens[:, :-1].reshape(-1)),
                _("The loss is summed; take the mean over the predicted positions."): ce(
                    logits[:, :-1].reshape(-1, v), tokens[:, 1:].reshape(-1), reduction="sum"
                ),
                (
                    _(
                        "You shifted after flattening: each sequence's last logits are scored on "
                        "the first token of the next sequence. Shift within each sequence, "
                        "logits[:, :-1] and tokens[:, 1:], then flatten."
                    )
                ): ce(logits.reshape(-1, v)[:-1], tokens.reshape(-1)[1:]),
            },
            default=(
                _(
                    "Your loss differs from the mean cross-entropy of logits[:, :-1] against tokens[:, "
                    "1:]."
                )
            ),
        )
    )


# -- 6. a measured experiment: sampling at temperature 0.5 ----------------------------------------------

_TEMP = "UVpCW1RXTEZEVldMQFxSX0BB"
_TEMP_MISTAKES = (
    "GlZEQFZNT1JRVU9BVAcQTwEaFkURBhsMAg0cHhoRGFQVGkMbEB8DABMVABsRClVDSUUVHBFOFwoYAhYXAAABHAZPAhMARQ8bAE4CHwUeGgAFWl"
    "QqChkcFhZFFRwRTg8AEhsHFkEWDU5TQUBSEQAHGwYLQxsdF1MWDhIAAwIXW1BfRUNEWlpSWkFGRlxQR0ZbU1xBQkJRQ05UTDcHFAZTDBJUAAYG"
    "TxMAFhQUERoNGk8UBlMRBBkECxEOAQcBAEFGTk4aAABSHhANAB0eDwYQFlMRCRFUAgwIHAYARQMNVBoLClUGFggREQYPFxoHF0hFBR0CBwcKVQ"
    "YbAAxUFhdDBgFcUUlBVkVAU01PUlFUT0RUBxBPEgAWAAUNVAoGDBoWGgsGVFwaBgIFFwEEFQEGC0NfXElTBBVUAAsOHxAAEhEUBhFOU0FAUgcN"
    "BFQbGgsKB1IHCgoRGh1DDgcXUxcABhEcT08bHQdFCBkEARAcHBAfAE9WWE5BWUBcRF1YQENdVVdBQEJVVEdWVENNIRoSEUEYGwEIHFUeGg4EVB"
    "VOEwoHERYLFRUTC1lPEhsFAEEAHAtDCQcTEBEIGxpODAlVFgEEFgdUGgsOAVISFwRUAAEIChtSQ0lBFVQAFgIXFwFFAxEAGQYKG1JDRQAaEE5S"
    "QVcP"
)
_TEMP_SOLUTION = (
    "JR0CBwcGGxVTEQkRVAIMCBwGAEUDDVQ6Q1JVQl1QQQcFGwIdEAFTEQkRVB4RABcTEQwNHQAHBhxVEBYDDgYRThEKGx0BCAAYHR0K"
    "ARJIeVVPRkFOTE9dQl1XVFRfTlNBRUtTTkFEWl5XRlVPU1VPQkFWTU84FxIWFAYRClllf1JTRUEYGwkKGwZSTkUVGwYNC0EZHRRN"
    "FRsGDQtBARcdFg4GXDVTQUBeU1VPR1hOU0FHL1pMa1RUTkMfBx0RFkFJVBoMHRYaXRYOEgADAhddHhwCCAAHTkxPRVxGSUFZRUdp"
    "T1VSUwETFQMdQ1JVBhwXAhxaAxYDARsdCgwdFQJLHwcdERZNVEZePF9FQl9FExEEAgIMEB8WCxVJIBwWCllSFAAPEQYPFwAHTwcK"
    "ExccQCQKGxcBBBUbBkZKQRgTHRAAGCsdBgoRWkNMSH5UTkNPBQAaCxVcXAoRDgIBU1hcVERHTQkZHRIRSV1aAwYOG1paSwgAEQNL"
    "RlxSU0VCVBUMDBoBUkNLV0FM"
)


@exercise(
    "language-model/temperature-experiment",
    title="Measure what temperature 0.5 does",
    hint=(
        """
            Sample many tokens from the given logits at temperature 0.5 (softmax of the
            logits divided by the temperature, then torch.multinomial), and pass the drawn
            token ids.
        """,
        """
            logits = torch.log(torch.tensor([0.5, 0.3, 0.2])) is a model's output for three tokens.
            Draw 20,000 tokens at temperature 0.5 (softmax(logits / 0.5), then torch.multinomial
            with replacement=True and a seeded generator) and pass the drawn token ids: the check
            counts the fraction that are token 0.
        """,
    ),
    solution=_TEMP_SOLUTION,
)
def _check_temperature(answer) -> str:
    draws = _as_draws(answer)
    fraction = (draws == 0).double().mean().item()
    note = check_number(
        fraction,
        _TEMP,
        _TEMP_MISTAKES,
        what=_("frequency"),
        rel_tol=0.03,
        mistake_rel_tol=0.03,  # 20,000 draws: sd about 0.0034
        right=(
            _(
                "Right: {fraction:.4f} of your draws are token 0, within the sampling error of "
                "20,000 draws: temperature 0.5 squares the probabilities and renormalises, so the "
                "likeliest token gains."
            ).format(fraction=fraction)
        ),
        otherwise=(
            _(
                "{value:g} of your draws are token 0, which is not it (20,000 draws should be within "
                "about 0.01 of the true frequency). Follow the hint: softmax(logits / 0.5), 20,000 "
                "draws, the fraction that are token 0."
            )
        ),
    )
    if not bool((draws == 1).any() and (draws == 2).any()):
        raise Mistake(
            _(
                "Tokens 1 and 2 should both appear among 20,000 draws at temperature 0.5: draw from "
                "the whole distribution."
            )
        )
    return note


def _as_draws(answer) -> torch.Tensor:
    """The learner's 20,000 drawn token ids as a 1-D long tensor, or a Mistake saying why not."""
    if isinstance(answer, (bool, int, float)) or getattr(answer, "ndim", None) == 0:
        raise Mistake(
            _(
                "Pass the 20,000 drawn token ids themselves, not a number: the check counts token 0 "
                "among your draws (a fraction could come from the formula instead of a measurement)."
            )
        )
    try:
        draws = torch.as_tensor(answer).detach().cpu().reshape(-1)
    except Exception:  # noqa: BLE001 - not array-like
        raise Mistake(
            _("Pass the drawn token ids as a tensor or a list, got {type_name}.").format(
                type_name=type(answer).__name__
            )
        ) from None
    if draws.numel() != 20_000:
        raise Mistake(_("Draw 20,000 tokens; got {value} values.").format(value=draws.numel()))
    if draws.dtype == torch.bool or draws.is_complex():
        raise Mistake(_("The draws should be token ids 0, 1 or 2 (there are three tokens)."))
    if draws.is_floating_point():
        if not bool((draws == draws.round()).all()):
            raise Mistake(_("The draws should be token ids (0, 1 or 2), got fractional values."))
    draws = draws.long()  # any integer dtype (uint16 has no comparisons on the CPU)
    if bool(((draws < 0) | (draws > 2)).any()):
        raise Mistake(_("The draws should be token ids 0, 1 or 2 (there are three tokens)."))
    if draws.unique().numel() > 1 and bool((draws[1:] >= draws[:-1]).all()):
        raise Mistake(
            _("Your draws are sorted: pass them in the order torch.multinomial drew them.")
        )
    # independent draws change token at a rate 1 - sum p^2 (about half of the time here);
    # counts written out as blocks, in any order, change a few times
    shares = torch.bincount(draws, minlength=3).double() / draws.numel()
    expected = draws.numel() * (1 - float((shares**2).sum()))
    changes = int((draws[1:] != draws[:-1]).sum())
    if changes < expected / 2:
        raise Mistake(
            _(
                "Your draws come in long runs of one token ({changes:,} changes of token in "
                "20,000 draws, where independent draws change about {expected:,.0f} times): pass "
                "the draws in the order torch.multinomial drew them, not counts written out."
            ).format(changes=changes, expected=expected)
        )
    # independent draws: the token after a 0, a 1 or a 2 has the same frequencies whatever came
    # before; a pattern written out repeats its own successions (a chi-square test of the 3 x 3
    # table of successive pairs, 4 degrees of freedom: above 60 with probability about 3e-12)
    pairs = torch.bincount(draws[:-1] * 3 + draws[1:], minlength=9).double().view(3, 3)
    independent = pairs.sum(1, keepdim=True) * pairs.sum(0, keepdim=True) / pairs.sum()
    statistic = float(((pairs - independent) ** 2 / independent.clamp(min=1e-12)).sum())
    if statistic > 60:
        raise Mistake(
            _(
                "Your draws follow a pattern: with independent draws the token after a 0, a 1 or a "
                "2 has the same frequencies whatever came before, and in yours it does not "
                "(chi-square {statistic:,.0f} on 4 degrees of freedom, where independent draws stay "
                "below 60). Pass the draws torch.multinomial made, in their order."
            ).format(statistic=statistic)
        )
    return draws
