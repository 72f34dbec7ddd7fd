"""Chapter 9 exercises: all-attention and persistent memory vectors."""

from __future__ import annotations

import torch

from ..all_attention import ffn_as_attention
from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ._core import (
    SOFTMAX_DIM,
    SOFTMAX_DIM_ONE,
    Mistake,
    call,
    check_line_number,
    check_number,
    diagnose,
    exercise,
    expect_tensor,
    expect_tuple,
    matches,
    random_tensor,
    softmax_over,
)
from ._i18n import _

# -- 1. the parameters of an all-attention layer --------------------------------------------------

_COUNT = "UkVAW1RdTQ=="
_COUNT_MISTAKES = (
    "GlZFXVJfQkBDR1tUVjcMGlURHBAPABEKQxsdF1MVBAYHBxAbEBwHRRcRFxoMHQZSHANBGxoLQwcQExdFDhoYF1lPEB"
    "MQDUEbEk4XBxBSG0VcVExOCwoUFgBFCRUHTgobBlIcEg9UOk4ICgwBUwQPEFQgQxkUHgYAElQbCEMYHBYHDUEQKwVP"
    "TwYdU1dBOlQKPARVGlNYQUZUIEMLW1BfRUNGRFdUXkBAUV9BVi0BFk8WHQYLFREQTgsOGRRTCgdUHRpZTwEaFkUREQ"
    "YdChwBFx0RQR8RFxBPAhsHDQ4BAE4XBxBSBQQNAREdT08aAFMRCRFUHgYdBhsAEQQaAE4VChYGHBcSVAMHFwcaBwdF"
    "FRwRTgUAAABTFRMbHgsAGxwdHRZaVBwLEQpVEBwRCVQTBxUKVQYbAEEHFQMGTxsHHgcEBlpONwcQUh8EGBEGTgsOBl"
    "IRChUcWkxPT1dAS11SQUxaQVVVUCoKFFQYCwUbVR0GEUEVVB4RAB8XEBEIGxpUQzgrI19FNio/QkM4KyRTBA8QVBoL"
    "ClUdBhERAQBOEx0aGBYGFR0bAEM4Kz1TBBMRVAgMGgdSF0UZVBBODg4BABoGBAdaTE9PV0NEXVNBQ1dRTU9SUTwOAV"
    "QDFgMBGwMJCBEQTgEWVRpTCg8XEU4XABpSHAMVERpUQwoUERtFCREVCkQcVQQWBhUbBh1DBxQEFkUWHRAaC08RLRhF"
    "XFQQTkxPHV5TFg5UFQIPTx0XEgESVAABBAoBGhYXQRwbAgdPR1I9RQVUGhsODRAAAElBGhsaQ11VPFMBQRxaTE9PV0"
    "FCUVZDQ1hBVVVQKgoUVBUKBwoRUhEMAAcRHUMbGlIHDQRUBBwMBRARBwwOGgdVQxsdF1MVAAQRHEQcVRMfCUwVABoG"
    "AQEbHAtBGBUXBh1VGhIWQRobAAZPXRMdAUEAHAtDCg0XAQYIBxFOEA4MAVMWDl1aTE9PV0FCUVdDQVxBVVVQKgoUVB"
    "UKBwoRUgcNBFQ4DxoKBzwcFwxTB05RTxFSAwQTFRkLFwoHAUhFFRwRTgYXEAAQDBIRVA8QBAZSFQoTVAAGBk8UBgcA"
    "DwAdAQ1PGRMKABNUFQIMARBcUUlBVkFcV11NSkNHW1RWNwwaVREcEA8AEQpDDlUUFgAFWRIBERgUABdFDRUNCxFPFA"
    "FTEgQYGFRDGx0XUwQNGFkPFxsQHAcMDhpUAgIWEABTDQAHVAAMARBJUwwVB1QeBh0GGwARBBoAThUKFgYcFxJUBgsT"
    "AxQRFkUIAFpMT09XQ0NRWUFDWEFVVVAqChRUFwEWAQEXF0UVHBFOEx0aGBYGFR0bABBPGhwfHFtUAAYGTwUXARYIBw"
    "ALDRtVGRYcElQVAAdPAxMfEAQHVA8RClUCEhcAGREaBh0GUgcKDlpWQkNNR0JKUlBBRkBTTU9SUTEJFQBOChxVBhsA"
    "QRcbGw0bVRQcF0E6VFNDXkVAR0lBABwLQwEQCgdFBAwRHAAGBhdUFkEZEQMMHQxIUxEJHQdODw4MFwFFCRUHTi1PSF"
    "JBVVVMVB4GHQYbABEEGgBOFQoWBhwXElQECxFPHRcSAU9WCQ=="
)
_COUNT_SOLUTION = (
    "MQYbBAYMARscCxJOVDk9PllSJDsqWFQ5PTlZUiQ7LlQVHAZPEx0GF0EQVBZDC1UfEhETHRcLEE8CGwcNDgEATgEGFAEWFltUQE4b"
    "T0BDQTtTVElOUkNFRktJVENCQGk/EAAADBIAEQAXTwMXEBEOBgdUQwoUERtFDhJUGgsKVRpTWEFMVAYGDhEBUw0AB1QgQ1JVQENR"
    "WVQfCxocVRMdAUFGRFpbTwMTHxAEB1QBBU8CGxcRCVQQMQhPSFJGVFNUW05bT0hSRVFbfkZOG09HQkddQQxUWFdPDVJLRVxURk4t"
    "TxFSTkVTWERXVENER0FLayAbGgIDT1JHRQUqRk5IT0dSPUUFVElOUENERkZJVkZMQkMKDRMQEQ0NVA9DHAETHQEABhBODw4MFwFC"
    "ElRATgcxR1JYRVNUEE4HMBMUUxIIABxOBzATFFNYQTpUU0NdRUZLRUkWHQ8QCgZSEhYIEBFHTQ=="
)


@exercise(
    "all-attention/parameter-count",
    title="The parameters of one all-attention layer",
    hint=(
        """
            Count the projections first, then the persistent vectors: each head has its
            own persistent keys and values, each vector of the head's width.
        """,
        """
            Count the four projections W^Q, W^K, W^V, W^O first (no biases). Then the persistent
            vectors: each of the h heads has N keys and N values, each a vector of d_k = d / h
            numbers. Multiply out: how many numbers do all heads' keys and values hold together?
        """,
    ),
    solution=_COUNT_SOLUTION,
)
def _check_count(answer) -> str:
    return check_number(
        answer,
        _COUNT,
        _COUNT_MISTAKES,
        what=_("parameter count"),
        right=(
            _(
                "Right: 4 d^2 + 2 N d. With N = d_ff it is exactly the size of a standard layer "
                "without biases."
            )
        ),
        otherwise=(
            _(
                "{value:,.0f} is not it. Count the projections and the persistent keys and values "
                "separately, then add."
            )
        ),
    )


# -- 2. one head over the context and the persistent vectors ---------------------------------------


def _persistent_head_solution(query, key, value, memory_key, memory_value, mask):
    n = memory_key.size(-2)
    keys = torch.cat([key, memory_key], dim=-2)  # (..., L + N, d_k): context first, then memory
    values = torch.cat([value, memory_value], dim=-2)
    always = torch.ones(*mask.shape[:-1], n, dtype=torch.bool)  # persistent keys: never masked
    scores = query @ keys.transpose(-2, -1) / query.size(-1) ** 0.5  # (..., L, L + N)
    scores = scores.masked_fill(~torch.cat([mask, always], dim=-1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # one softmax over context and memory together
    return weights @ values, weights


def _head_mistakes(query, key, value, memory_key, memory_value, mask):
    """Weights of the usual mistakes: message -> (L, L + N) weights."""
    n, length, d_k = memory_key.size(-2), key.size(-2), query.size(-1)
    keys = torch.cat([key, memory_key], dim=-2)
    scores = query @ keys.transpose(-2, -1) / d_k**0.5

    def soft(s, keep):
        return torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)

    always = torch.ones(*mask.shape[:-1], n, dtype=torch.bool)
    never = torch.zeros_like(always)
    ctx = soft(scores[..., :length], mask)
    mem = torch.softmax(scores[..., length:], dim=-1)
    unscaled = torch.cat([scores[..., :length], scores[..., length:] * d_k**0.5], dim=-1)
    return {
        (
            _(
                "The persistent vectors got no weight: the causal mask reached them. Extend the mask "
                "with N columns of True (always visible) for the memory."
            )
        ): soft(scores, torch.cat([mask, never], dim=-1)),
        (
            _(
                "The causal mask was built over all L + N keys (causal_mask(L, L + N) aligns the "
                "last query with the last persistent key, so queries see future tokens and lose "
                "persistent vectors). Mask the L context columns only and leave the N persistent columns "
                "visible."
            )
        ): soft(scores, causal_mask(length, length + n)),
        (
            _(
                "You took one softmax over the context and another over the memory (each sums to 1, "
                "the row sums to 2). Take ONE softmax over the L + N scores together."
            )
        ): torch.cat([ctx, mem], dim=-1),
        (
            _(
                "You averaged a softmax over the context and one over the memory. The paper takes "
                "one joint softmax, so the split between context and memory is learned per query."
            )
        ): (torch.cat([ctx, mem], dim=-1) / 2),
        _(
            "The mask polarity is inverted: True means 'may attend', so fill the context scores "
            "where mask is False."
        ): soft(scores, torch.cat([~mask, always], dim=-1)),
        _(
            "The mask polarity is inverted (True means 'may attend'), and the N persistent "
            "columns were masked with it: fill the scores where the extended mask is False."
        ): soft(scores, torch.cat([~mask, never], dim=-1)),
        _(
            "You built a causal mask of your own: use the mask you are given (here not a causal "
            "one), extended with N columns of True."
        ): (
            soft(scores, torch.cat([causal_mask(length, length), always], dim=-1))
            if not torch.equal(mask, causal_mask(length, length))
            else None
        ),
        _(
            "The scores of the persistent keys are not divided by sqrt(d_k): scale all L + N "
            "scores the same way. (Or you multiplied memory_key by sqrt(d_k), as AllAttention "
            "does with the keys it stores at 1 / sqrt(d_k): here the inputs are at unit scale.)"
        ): soft(unscaled, torch.cat([mask, always], dim=-1)),
        _("The scores are not scaled: divide every score by sqrt(d_k)."): soft(
            scores * d_k**0.5, torch.cat([mask, always], dim=-1)
        ),
        _(
            "The persistent keys came first: put the context's L columns first, then the N "
            "persistent ones."
        ): soft(
            torch.cat([scores[..., length:], scores[..., :length]], dim=-1),
            torch.cat([always, mask], dim=-1),
        ),
        _(SOFTMAX_DIM): _softmax_moved(-2, query, key, value, memory_key, memory_value, mask),
        _(SOFTMAX_DIM_ONE): _softmax_moved(1, query, key, value, memory_key, memory_value, mask),
    }


def _softmax_moved(dim, *args):
    """The weights of a head whose softmax runs over ``dim`` (the queries, or dimension 1)."""
    with softmax_over(dim):
        return _persistent_head_solution(*args)[1]


def _head_outputs(fn, *args):
    return expect_tuple(call(fn, *args), 2, _("Return a pair (output, weights); got {type_name}."))


@exercise(
    "all-attention/persistent-head",
    title="One head over the context and the persistent vectors",
    hint=(
        """
            The persistent vectors are extra keys and values that every query may see.
            Append them to the context's keys and values, extend the mask to match, and
            take one softmax over all the keys together.
        """,
        """
            1. Append the memory after the context: keys = cat([key, memory_key], dim=-2), the same for values.
            2. Extend the (L, L) mask with N columns of True: the persistent vectors are always visible.
            3. scores = query @ keys^T / sqrt(d_k); fill -inf where the extended mask is False.
            4. ONE softmax over the last dimension (all L + N keys), then weights @ values.
        """,
    ),
    solution=_persistent_head_solution,
    name="persistent_head",
)
def _check_persistent_head(fn) -> str:
    cases = [
        (_("One head, L = 5, N = 3, d_k = 4, causal mask"), (5, 4), 3, causal_mask(5)),
        (
            _("A batch (2, 3) of heads, L = 6, N = 4, d_k = 8, causal mask"),
            (2, 3, 6, 8),
            4,
            causal_mask(6),
        ),
    ]
    g = torch.Generator().manual_seed(7)
    random_mask = torch.rand(6, 6, generator=g) > 0.5
    random_mask[:, 0] = True
    cases.append((_("A random boolean mask (L = 6, N = 2)"), (6, 8), 2, random_mask))
    # more persistent vectors than positions, as in the paper (N = 2048 and short contexts)
    cases.append((_("One head, L = 3, N = 5, d_k = 4, causal mask"), (3, 4), 5, causal_mask(3)))
    for seed, (case, shape, n, mask) in enumerate(cases):
        *batch, length, d_k = shape
        query, key, value = (random_tensor(*shape, seed=10 * seed + k) for k in range(3))
        memory_key, memory_value = (
            random_tensor(*batch, n, d_k, seed=10 * seed + 3),
            random_tensor(*batch, n, d_k, seed=10 * seed + 4),
        )
        args = (query, key, value, memory_key, memory_value, mask)
        expected_out, expected_w = _persistent_head_solution(*args)
        try:
            output, weights = _head_outputs(fn, *args)
        except Mistake as error:  # the learner's function failed: say on which input
            raise Mistake(_("{case}: {message}").format(case=case, message=error)) from None
        expect_tensor(
            weights,
            expected_w.shape,
            _("{case}: the weights (context columns, then memory columns)").format(case=case),
        )
        expect_tensor(output, expected_out.shape, _("{case}: the output").format(case=case))
        if matches(weights, expected_w):
            if not matches(output, expected_out):
                raise Mistake(
                    _(
                        "{case}: the weights are right but not the output: weights @ cat([value, "
                        "memory_value])."
                    ).format(case=case)
                )
            continue
        raise Mistake(
            _("{case}: ").format(case=case)
            + diagnose(
                weights,
                _head_mistakes(*args),
                default=(
                    _(
                        "your weights differ from one softmax over [q K^T, q M_K^T] / sqrt(d_k) with only "
                        "the context masked."
                    )
                ),
            )
        )
    # nothing visible in the context: the memory alone must take all the weight, without NaN
    query, key, value = (random_tensor(4, 4, seed=40 + k) for k in range(3))
    memory_key, memory_value = random_tensor(3, 4, seed=43), random_tensor(3, 4, seed=44)
    nothing = torch.zeros(4, 4, dtype=torch.bool)
    output, weights = _head_outputs(fn, query, key, value, memory_key, memory_value, nothing)
    expected = scaled_dot_product_attention(query, memory_key, memory_value)
    if not (matches(weights[..., 4:], expected[1]) and matches(output, expected[0])):
        raise Mistake(
            _(
                "With every context key masked, each query should attend to the persistent vectors "
                "alone (they are never masked): your result differs."
            )
        )
    return _(
        "Your head matches the all-attention layer: one softmax, the memory never masked, "
        "any batch shape."
    )


# -- 3. an FFN's weights as keys and values -------------------------------------------------------


def _ffn_solution(w1, w2):
    keys = w1  # (d_ff, d_model): row i of w1 (column i of W_1) is the key of hidden unit i
    values = w2.T  # (d_ff, d_model): column i of w2 (row i of W_2) is its value
    return keys, values


@exercise(
    "all-attention/ffn-as-attention",
    title="Turning FFN weights into persistent keys and values",
    hint=(
        """
            Read the feed-forward layer as attention: the input is the query, each hidden
            unit is one key and one value. Which row of w1 (linear1.weight) scores the
            input for hidden unit i, and which column of w2 does that unit add to the output?
        """,
        """
            Hidden unit i of softmax(x W_1) W_2 is softmax_i(x . w1[i]): a score of x against row i
            of w1, which is column i of W_1. It then adds its weight times column i of w2 (row i of
            W_2) to the output.
            Each key and each value is a vector of width d_model, one per hidden unit: both tensors
            have shape (d_ff, d_model).
        """,
    ),
    solution=_ffn_solution,
    name="ffn_to_memory",
)
def _check_ffn(fn) -> str:
    d_model, d_ff = 6, 10
    w1, w2 = random_tensor(d_ff, d_model, seed=50), random_tensor(d_model, d_ff, seed=51)
    x = random_tensor(7, d_model, seed=52)
    keys, values = expect_tuple(
        call(fn, w1, w2), 2, _("Return a pair (keys, values); got {type_name}.")
    )
    for name, one, t in ((_("keys"), _("key"), keys), (_("values"), _("value"), values)):
        if isinstance(t, torch.Tensor) and t.shape == (d_model, d_ff):
            raise Mistake(
                _(
                    "Your {name} have shape (d_model, d_ff) = {t_shape}: one {name2} per hidden unit "
                    "means d_ff rows of width d_model. Transpose."
                ).format(name=name, t_shape=tuple(t.shape), name2=one)
            )
    expect_tensor(keys, (d_ff, d_model), _("The keys (one per hidden unit)"))
    expect_tensor(values, (d_ff, d_model), _("The values (one per hidden unit)"))
    expected, _weights = ffn_as_attention(x, w1, w2)
    got, _weights = scaled_dot_product_attention(x, keys.to(x.dtype), values.to(x.dtype), scale=1.0)
    if matches(got, expected):
        return _(
            "Right: keys = rows of w1, values = columns of w2 (the columns of W_1 and the rows of "
            "W_2); attention over them is softmax(x W_1) W_2."
        )
    raise Mistake(
        diagnose(
            keys,
            {
                (
                    _(
                        "Your keys are the columns of w2: keys and values are swapped. The scores "
                        "come from w1."
                    )
                    if matches(values, w1)
                    else _(
                        "Your keys are the columns of w2: the scores come from w1, so the keys are "
                        "its rows."
                    )
                ): (w2.T),
                (
                    _(
                        "Your keys are divided by sqrt(d_model). The FFN has no such scale: keys are the "
                        "rows of w1 as they are."
                    )
                ): (w1 / d_model**0.5),
            },
            default=_(
                "Attention with your keys and values (scale 1) does not give softmax(x W_1) W_2."
            ),
        )
        if not matches(keys, w1)
        else (
            _(
                "Your keys are right, your values are not: value i must be what hidden unit i "
                "adds to the output, weighted by its activation."
            )
        )
    )


# -- 4. predict: the multiply-adds of the persistent memory ------------------------------------------

_MACS = "UERAVlZYQw=="
_MACS_MISTAKES = (
    "GlZMXVtXQ0JLR1tUVjcMGlUVEhMEVBEYBh0MUhsAABBUGgsKVRQGCQ1UAwcHGx1SF19BERUNC08dFxIBRgdUIEMEEAsARQAaEE4V"
    "DhkHFhZBFQYLQwsqGVNYQRBUQUMHVQUaAQRYVB0MTwEaFkUJVBwLAgsGUgcKBhEABgYdVREcFhVURk4tTxFcUUlBVkFcV11NSlFf"
    "QVYgBgIbVRsARRUcEU4QDBoAFhZBFRgBDQpVWgJFT1QfTgUAB1I9RQoRDR1DBhtSFgQCHFQGBg4RSFMrQRBUBw1PFB4fTFtUFQoH"
    "TwEaFkUWER0JCxsQFlMWFBlUAQVPARoWRS9UAg8PGhABX0UAGhsaCwoHUj1FBVpWQkNNREFCVVZGVlRDTSEaEhFBHQdODAEQUhsA"
    "ABBOThcHEAAWRQAGEU4LT0hSS0UJERUKEENVFxIGCVQDBxcHVRsHFkEbAwBDIVUCFhcSHQcaBgEBUhgAGAdUDw0LVQQSCRQRB0BB"
    "Q1VQQlNSTEBMWU9XKxwQQRIbHAQAAVIHDQRUAwcHGx1SHANBABwLQxkQEQcKEwdOTgYOFhpTCgdUAAYGTx1SPUUSFxscBhxVGwBF"
    "AFQQARdPBQAcARQXAE4MCVUWLA5BSVRYV08YBx8RCAQYF04OERYAS0NYVExRX0xFQlBTVk5OQTsdEwdFCAdUKC8gJQFTTVNUBAsR"
    "TxgHHxEIBBgXTg4RFlpfQQAcC0MeABcAEQgbGk4AAAAcBxZBGQECFwYFHgpIABAQHU1NWVJRV1FNQ19WXVtCUV9BViAGAhtVGwBF"
    "U1Q6TgdPAhsHDUE6VFNDXUVGS0lBABwLQx8HFwUMDgEHTgYXEAAQDBIRUx1DAhAfHBcYTlQaCwYGUh4KBREYTgsOBlI9RVxURV5R"
    "W1UCFhcSHQcaBgEBUgUAAgAbHBBPBRcBRQkRFQpNTVlSUVdRTUNfVl1bQkNHW1RWOgsOAVIaFkFGVCBDC1UCHxASVAAGBk8ZEwoA"
    "E1MHTgUAAABTFRMbHgsAGxwdHRZBIyo/T08iLDhJQSMqOE9PIiw8RUlAVAo9XVUfBgkVHQQCGkIUFhcWSE5UGgsKDFISFwRUAAYG"
    "TxkTCgATUwdODBgbUgQKEx9YThQHFAYWEwQGVBoLClUfFggOBg1VQxsdF1MUFBEHGgoAG1IQChQaAB1DGx0XUxUEBgcHEBsQHAdF"
    "DBEZAREWUgFTFgIbBgsQTxQcF0UWER0JCxsQFlMWFBlUAQ0DDFxRGA=="
)
_MACS_SOLUTION = (
    "MREGTgsKFBZJRS9UBw0MHRABUxRBWlQFPAFZUhYEAhxUCjwEVR8GCRUdBAIaQhQWFxZBXDpOBzAeW19FABoQThcHEFIEAAgTHBoG"
    "C1UBBghBGxJOLU8DEx8QBAdUAQVPAhsXEQl+EDEIT108UwE+H11AQykaAFMNQRwRDwccT1JBRQlUOk4HMB5STkVTVDpOB09IUkFF"
    "GVRFXlFbVQpTUFBGVFNDXllCR11NQUNYQwIAHgcMERgNQwILEQFTFQQGVBoMBBAcXW9rNRpOJSk7UgQMFRxUCjwJE1JORS9USU5S"
    "X0dGUwYOBwAdQwtVFiwDB1QZGw8bHAIfHEwVEAoQTxMdAUUZVCMxUk8UHBdFBSsSCEMLVRQcF0EAHAtDHwcdFxACAFQZChsdUiQ6"
    "U05+XEMLVRYsAwdYVBoLClUBEggEWlQ5Cw4BUhcMBxIRHBBlHAFTEQkRVB0MCQEfEh1BGwILEU8dUj1FXFRMQlJWR1IABg4GER1D"
    "HxAAUxEOHxEAQ0cUHFMjJzpUDxMfGRsWFkEVVDwGIyBSBwpBECsIBU9IUkJJUUZAThYBHAYATEEVGgppGx0XUwYOBA1ODAlVBhsA"
    "QRkRAwwdDFIaCxUbVAsVCgcLUwcAABcGRBxVGRYcElQVAAdPAxMfEAQHWg=="
)


@exercise(
    "all-attention/memory-cost",
    title="Predict the multiply-adds of the persistent memory",
    hint=(
        """
            Count the work of one head over the persistent vectors (the scores and the
            weighted sum), then multiply by the heads, remembering the head's width.
        """,
        """
            In one head: N scores, each a dot product of width d_k, then a weighted sum of N values of
            width d_k. Then multiply by the h heads; remember d_k = d / h.
        """,
    ),
    solution=_MACS_SOLUTION,
)
def _check_macs(answer) -> str:
    return check_number(
        answer,
        _MACS,
        _MACS_MISTAKES,
        what=_("number of multiply-adds"),
        right=(
            _(
                "Right: 2 N d, exactly an FFN's 2 d d_ff when N = d_ff. The softmax over h N scores "
                "is what costs more."
            )
        ),
        otherwise=(
            _("{value:,.0f} is not it. Count one head's scores and weighted sum, then the heads.")
        ),
    )


# -- 5. find the bug: a memory that is never read ----------------------------------------------------

_BUG = "Vg=="
_BUG_MISTAKES = (
    "GlZHTFlPVz4aCwRUR04KHFUAGgIJAE5OL08WHR0RBAwAThMABhsHDA4aB04CARFSPUUREQYdChwBFx0RQQIRDRcABwFdR01UVlpB"
    "VVVQPwwPEVRaQwYGUgEMBhwAVEMbHRdTFQQGBwcQGxAcB0UKEQ0dQw4HF1MEEQQRAAcKEVISAxURBk4XBxBSEAoPABEWF0gGXFFJ"
    "QVZBTFlPVz4aCwRUQU4KHFUAGgIJAE5OFwcQUgMAEwcdHRcKGwZTEwAYAQsQTxQAFkUABAQLDQsQFlMMD1QABgZPBhMeAEEbBgoG"
    "HVUTAEUVHBFOCAoMAV1HTVRWWEFVVVA/DA8RVFhDBgZSAQwGHABUQwoDFwEcQQcXAREKVRsARRIXFQIGC1UQCkVQWwcfERtdFiwO"
    "SFpWQkNNTVBJRUM4HQAGT01SGhZBBh0JCxtPUgcNBFQdABUGBhsRCQRUHwsaHFUVFhFBWR0ABU8XFxUKExFUGgsKVQEcAxUZFRZN"
    "TVlSUVxDTlRMLwYbF1NcQR0HThEGEhoHX0E7OitDHBoUBwgADFQBFQoHUhAKDwARFhdPFBwXRQwRGQERFlUGHAIEABwLEUFXXlNH"
    "UERWVENNORsdAEFFRE4KHFUAGgIJAE5OFwcQUgQACBMcGhBPGgQWF0E4VEVDIVUZFhwSVAAHDgoGUgcNBFQ4TkhPO1IFBA0BER1N"
    "TQg="
)
_BUG_SOLUTION = (
    "LR0aC0NYW1IHChMXHEAMARABWylNVDhOSE87W10REx0YRkpPHhcWFRJUFwEPGhgcUwZBEhscQx0aBVMRQRsaAhpPAh"
    "oWC0EXVFJeTwFJUxEJEVQeBh0GGwARBBoATgAAGQceCxJ+FRwGTzlSXUtBOFRFQyFVX1NUTVQVAg9PFxcKCg8QVAsV"
    "CgcLUxcOA1hOEABVBhsAQRkRAwwdDFIaFkEZFR0IChFSFQoTVBEYBh0MUgIQBAYNTgIBEVIdABcRBk4RChQWXW81HB"
    "FOAA4AARIJQRkVHQhPGAcAEUEXGxgGHVUGGwBBFxsAFwoNBlMGDhgBAw0cVR0dCRhPVBoLClU8UwgEGRscGk8WHR8Q"
    "DBoHTgIdEFIFDBIdFgIGTwEdUwQNGE5kaU9VUlMTCAcdDA8KVU9TEQ4GFwZNDBQGWz4VGwYNC0EaHBYWSThYTi9DVR"
    "YHHBERSRoMHRYaXQcOGxhHTRsHGx9NSFhUGgwdFhpdCg8RB0YvQ1U8X0UFAA0eBlIBHQEGCVoWAQwDXC9fRQUdGVNO"
    "Xlw="
)


@exercise(
    "all-attention/find-the-bug",
    title="Find the bug in a persistent-memory head",
    hint=(
        """
            Run its lines 3 to 9 with a few persistent vectors and look at weights[0],
            the first query's weights: how much goes to the persistent columns?
        """,
        """
            Run its lines 3 to 9 with N = 4 and look at weights[0]: how much goes to the last N
            columns, the persistent ones? Which line decides which columns each query may see?
        """,
    ),
    solution=_BUG_SOLUTION,
)
def _check_bug(answer) -> str:
    return check_line_number(
        answer,
        _BUG,
        _BUG_MISTAKES,
        right=(
            _(
                "Right: the causal mask covers the context columns only; the persistent columns are "
                "visible to every query."
            )
        ),
        otherwise=(
            _(
                "Line {value:g} is not a line that computes: those are lines 3 to 10 (line 1 is "
                "the signature, line 2 the docstring). Give the number of the wrong line."
            )
        ),
    )
