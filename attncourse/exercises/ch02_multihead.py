"""Chapter 2 exercises: multi-head attention."""

from __future__ import annotations

import itertools

import torch

from ..attention import scaled_dot_product_attention
from ..multihead import merge_heads, split_heads
from ._core import (
    SOFTMAX_DIM,
    SOFTMAX_DIM_ONE,
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

# -- 1. split into heads ----------------------------------------------------------------------


def _split_solution(x, num_heads):
    batch, length, width = x.shape
    head_dim = width // num_heads
    # (B, L, E) -> (B, L, h, head_dim): head i owns columns i*head_dim ... (i+1)*head_dim - 1
    return x.view(batch, length, num_heads, head_dim).transpose(1, 2)  # (B, h, L, head_dim)


def _split_mistakes(x: torch.Tensor, num_heads: int) -> dict:
    batch, length, width = x.shape
    head_dim = width // num_heads
    return {
        (
            _(
                "You reshaped (B, L, E) straight to (B, h, L, head_dim) with view/reshape, without a "
                "transpose: that cuts the flattened rows into blocks that mix positions. View as (B, "
                "L, h, head_dim) first, then transpose(1, 2)."
            )
        ): x.reshape(batch, num_heads, length, head_dim),
        (
            _(
                "Your heads take every h-th column (you viewed as (B, L, head_dim, h)). Head i owns "
                "the contiguous columns i*head_dim ... (i+1)*head_dim - 1: view as (B, L, h, "
                "head_dim)."
            )
        ): (x.view(batch, length, head_dim, num_heads).permute(0, 3, 1, 2)),
    }


@exercise(
    "multi-head/split-heads",
    title="Split the projected queries into heads",
    hint=(
        """
            The embedding width is the heads side by side. First give the head a dimension
            of its own, then move that dimension in front of the positions: a view and a
            transpose, no copy of the numbers.
        """,
        """
            x has shape (B, L, E) with E = h * head_dim. First make the head a dimension of its own:
            x.view(B, L, h, head_dim). Then move it in front of the positions with transpose(1, 2),
            so that each head is a (L, head_dim) matrix: (B, h, L, head_dim).
        """,
    ),
    solution=_split_solution,
    name="split_into_heads",
    forbids=(split_heads,),
)
def _check_split(fn) -> str:
    for seed, (batch, length, num_heads, head_dim) in enumerate(
        [(2, 5, 3, 4), (3, 4, 2, 3), (1, 6, 4, 2)]
    ):
        x = random_tensor(batch, length, num_heads * head_dim, seed=seed)
        out = call(fn, x, num_heads)
        expected = split_heads(x, num_heads)
        if isinstance(out, torch.Tensor) and tuple(out.shape) == (
            batch,
            length,
            num_heads,
            head_dim,
        ):
            raise Mistake(
                _(
                    "Your result has shape (B, L, h, head_dim) = {out_shape}: the heads are split but "
                    "not moved in front of the positions. Add .transpose(1, 2) to get (B, h, L, "
                    "head_dim)."
                ).format(out_shape=tuple(out.shape))
            )
        expect_tensor(
            out,
            expected.shape,
            _("For x of shape {x_shape} and h={num_heads}, the result").format(
                x_shape=tuple(x.shape), num_heads=num_heads
            ),
        )
        if not matches(out, expected, atol=0):
            raise Mistake(
                diagnose(
                    out,
                    _split_mistakes(x, num_heads),
                    atol=0,
                    default=(
                        _(
                            "Right shape, wrong values: head i at position t should be x[:, t, "
                            "i*head_dim:(i+1)*head_dim]."
                        )
                    ),
                )
            )
    return _("Right: head i holds columns i*head_dim ... (i+1)*head_dim - 1 of every position.")


# -- 2. a whole multi-head forward pass ----------------------------------------------------


def _forward_solution(x_q, x_kv, w_q, w_k, w_v, w_o, num_heads):
    def split(t):  # (B, L, E) -> (B, h, L, head_dim)
        batch, length, width = t.shape
        return t.view(batch, length, num_heads, width // num_heads).transpose(1, 2)

    q, k, v = split(x_q @ w_q.T), split(x_kv @ w_k.T), split(x_kv @ w_v.T)
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5  # scale by sqrt(head_dim)
    heads = torch.softmax(scores, dim=-1) @ v  # (B, h, L, head_dim)
    batch, _, length, head_dim = heads.shape
    concat = heads.transpose(1, 2).reshape(batch, length, num_heads * head_dim)
    return concat @ w_o.T  # mix the heads with W^O


#: The names of the four weight matrices of the forward exercise, in its arguments' order.
_WEIGHTS = ("w_q", "w_k", "w_v", "w_o")


def _forward_variants(x_q, x_kv, w_q, w_k, w_v, w_o, num_heads):
    """message -> output of a known mistake."""
    E = x_q.size(-1)
    head_dim = E // num_heads

    def run(split, scale, merge, out_proj=True, stored=()):
        # the weights named in ``stored`` multiply as stored (x @ w), the others as x @ w.T
        w = {n: m if n in stored else m.T for n, m in zip(_WEIGHTS, (w_q, w_k, w_v, w_o))}
        q, k, v = split(x_q @ w["w_q"]), split(x_kv @ w["w_k"]), split(x_kv @ w["w_v"])
        heads, _ = scaled_dot_product_attention(q, k, v, scale=scale)
        concat = merge(heads)
        return concat @ w["w_o"] if out_proj else concat

    good = lambda t: split_heads(t, num_heads)
    no_transpose = lambda t: t.reshape(t.size(0), num_heads, t.size(1), head_dim)
    merge_no_transpose = lambda h: h.reshape(h.size(0), h.size(2), -1)
    return {
        (
            _(
                "The output projection W^O is missing: the heads are concatenated but never mixed. "
                "Multiply the concatenation by w_o.T."
            )
        ): run(good, head_dim**-0.5, merge_heads, out_proj=False),
        _(
            "The scores are scaled by 1/sqrt(E); each head's scale uses its own width, "
            "1/sqrt(head_dim)."
        ): run(good, E**-0.5, merge_heads),
        (
            _(
                "The heads were split with view/reshape to (B, h, L, head_dim) without a transpose, "
                "which mixes positions. View as (B, L, h, head_dim), then transpose(1, 2)."
            )
        ): run(no_transpose, head_dim**-0.5, lambda h: h.reshape(h.size(0), h.size(2), -1)),
        (
            _(
                "The heads are merged with reshape(B, L, E) straight from (B, h, L, head_dim): "
                "transpose(1, 2) back first."
            )
        ): run(good, head_dim**-0.5, merge_no_transpose),
        (
            _(
                "The heads are merged interleaved: permute(0, 2, 3, 1) puts feature j of head i in "
                "column j * h + i. Concatenate the heads instead: head i fills columns "
                "i * head_dim to (i + 1) * head_dim - 1."
            )
        ): run(good, head_dim**-0.5, lambda h: h.permute(0, 2, 3, 1).flatten(2)),
        (
            _(
                "The scores are scaled by 1/sqrt(L), the number of positions (q.size(-2)); the scale "
                "uses the width of a head, 1/sqrt(head_dim) = 1/sqrt(q.size(-1))."
            )
        ): run(good, x_q.size(1) ** -0.5, merge_heads),
        _(
            "This is single-head attention over the whole width: split the projections into "
            "num_heads heads."
        ): run(lambda t: t.unsqueeze(1), E**-0.5, merge_heads),
        _(
            "The scores are not scaled: divide each head's scores by sqrt(head_dim) before the "
            "softmax."
        ): run(good, 1.0, merge_heads),
        _(
            "The weights multiply as they are stored (x_q @ w_q): like nn.Linear's, each is "
            "(out_features, in_features), so a projection is x W^T. Use x_q @ w_q.T, x_kv @ w_k.T, "
            "x_kv @ w_v.T and concat @ w_o.T."
        ): run(good, head_dim**-0.5, merge_heads, stored=_WEIGHTS),
        **{
            _(
                "You multiplied by {weights} as stored (x @ w): like nn.Linear's, each weight is "
                "(out_features, in_features), so a projection is x @ w.T. Transpose {weights} as "
                "you did the other weights."
            ).format(weights=", ".join(subset)): run(
                good, head_dim**-0.5, merge_heads, stored=subset
            )
            for size in (1, 2, 3)
            for subset in itertools.combinations(_WEIGHTS, size)
        },
        _(SOFTMAX_DIM): _with_softmax_over(-2, lambda: run(good, head_dim**-0.5, merge_heads)),
        _(SOFTMAX_DIM_ONE): _with_softmax_over(1, lambda: run(good, head_dim**-0.5, merge_heads)),
    }


def _with_softmax_over(dim, compute):
    with softmax_over(dim):
        return compute()


@exercise(
    "multi-head/forward",
    title="A multi-head forward pass from the weight matrices",
    hint=(
        """
            Four steps: project the inputs, split each projection into heads, attend in
            every head at once (batched over the batch and the heads), then merge the
            heads back and apply the output projection.
        """,
        """
            1. Project: q = x_q @ w_q.T, k = x_kv @ w_k.T, v = x_kv @ w_v.T (each (B, ., E)).
            2. Split each into heads: (B, h, ., head_dim), as in the previous exercise.
            3. Per head: softmax(q k^T / sqrt(head_dim)) v, batched over B and h at once.
            4. Concatenate the heads back to (B, L, E) (transpose(1, 2), then reshape) and multiply by w_o.T.
        """,
    ),
    solution=_forward_solution,
    name="multi_head",
)
def _check_forward(fn) -> str:
    # L, S, head_dim and E all differ in the last two cases, so that a scale taken from the wrong size shows
    for seed, (batch, length, source, num_heads, head_dim) in enumerate(
        [(2, 4, 6, 3, 4), (1, 5, 3, 2, 5), (2, 3, 7, 2, 6)]
    ):
        E = num_heads * head_dim
        x_q, x_kv = (
            random_tensor(batch, length, E, seed=10 + seed),
            random_tensor(batch, source, E, seed=20 + seed),
        )
        w_q, w_k, w_v, w_o = (
            random_tensor(E, E, seed=30 + 4 * seed + i) / E**0.5 for i in range(4)
        )
        args = (x_q, x_kv, w_q, w_k, w_v, w_o, num_heads)
        out = call(fn, *args)
        if isinstance(out, tuple):
            raise Mistake(_("Return only the output tensor (B, L, E), not a tuple."))
        expect_tensor(
            out,
            (batch, length, E),
            _("With B={batch}, L={length}, S={source}, E={E}, the output").format(
                batch=batch, length=length, source=source, E=E
            ),
        )
        q, k, v = (split_heads(t, num_heads) for t in (x_q @ w_q.T, x_kv @ w_k.T, x_kv @ w_v.T))
        expected = merge_heads(scaled_dot_product_attention(q, k, v)[0]) @ w_o.T
        if not matches(out, expected):
            case = _(
                "With B={batch}, L={length}, S={source}, E={E}, h={num_heads} (head_dim={head_dim})"
            ).format(
                batch=batch,
                length=length,
                source=source,
                E=E,
                num_heads=num_heads,
                head_dim=head_dim,
            )
            raise Mistake(
                _("{case}: ").format(case=case)
                + diagnose(
                    out,
                    _forward_variants(*args),
                    default=_("your output differs from Concat(head_1, ..., head_h) W^O."),
                )
            )
    return _(
        "Right: h heads of width E/h, each scaled by 1/sqrt(head_dim), concatenated and "
        "mixed by W^O (also with L != S)."
    )


# -- 3. counting parameters --------------------------------------------------------------------

_COUNT = "UERBXlVdQQ=="
_COUNT_MISTAKES = (
    "GlZFXldXQEVFR1tUVjcMGlURHBAPABEKQxsdF1MSBB0TBhccVVpHRRlUQV9RTw1SRlRTXVQMFhtVHBwRQQAcC0MNHBMAABJOVAsCDB1SHANBAB"
    "wLQwkaBwFFEQYbBAYMARscCxJUHA8QT0BDQUUOElQaCwoYXFFJQVZDVlRWQ0pRX0FWLQEWTxkXFRFBGwEaQxsdF1MKFAAEGxdPBQAcDwQXAAcM"
    "AVUlLSpBXEFfUU8NUkZUU1QDCwoIHQYARQAaEE5WXkdSEQwABxEdSlRVBhsAQRgVFwYdVRoSFkESGxsRTwUAHA8EFwAHDAEGXlMLDgBUGgsdEB"
    "ddR01UVllbWUFBQUdbVFY3DBpVERwQDwARCkMAGx4KRTYqJUJDOCs5UwQPEFQ5PTlVBRoRCRsBGkMNHBMAABJPVA8HC1UlLSpBFRoKQxsdF1MD"
    "DgEGTgEGFAFTEwQXAAERHFtQX0VDRUdfUF1NUElFQy0bG0MLHAQaAQQQVAwaTwEaFkUPARkMBh1VHRVFCREVChBBVSYbAEEcEQ8HHFUBGwQTEV"
    "QaCwpVEBoCQQQGAQkKFgYaCg8HTk4QHxkbBxEIGhNOCgEBHVNdQRwRDwccVR0VRVdAVA0MAwAfHRZBGhEHFwcQAFMEBRAHTg0AB1IBAAwbAgsQ"
    "TwUTAQQMEQALERxbUF9FQ0xAXldWTEBRX0FWLQEWTxgHHxEIBBgHBgtVEApFFRwRTg0aGBAWF0EbEk4LChQWAEtBMRUNC08dFxIBQRwVHUNZQV"
    "IQCg0BGQAQTxoUUwAAFxxOEx0aGBYGFR0bAE9PGx0HRVRFRlRDHAUeGhEVHRoJQw4RFgBFDxtUHgIdFB8WEQQGB0BBQ1VQQlVVTUJeU01PUlE8"
    "DgFUDQwaGwYWAUEAHBwGClUQGgQSEQdVQzgrI19FNio/QkM4KyRTBA8QVDk9IFUXEgYJVBwPFQpVHR0AQVxAThtPQENBTE9WCQ=="
)
_COUNT_SOLUTION = (
    "JxsBHEMfBx0ZAAIAHQENHFUcHUstHRoLAh1dR0JXTVRBX1FGT1IkOzBYVDk9JFlSJDs3VBUAB08iLDxLazEVDQtPHRMARVRFRk4bT0BDQUVcVE"
    "ZYUUNERkdFFhEdCQsbBlISCwVUQV9RTxcbEhYEB1pkNwABEx9fQUBUFkNdQ0BfVFVAVEVDW1UKU1BQRlRTQ15ZQkddTUFDWENEVUBfVVVMVFND"
    "XllCRlVNQkZaTWUhGhZFWVQcCwILBlIXCkEaGxpDDB0THQIEVB0aWU8dFxIBQR1UGxAKBlJFUUEbEk4XBxBSRlRTVBsbFx8ABlMGDhgBAw0cVR"
    "0VRTYqJUJDOCs5UwQPEFQ5PTl/Whc6ClRJTgcwA1JORVRFRk5MT01STkVXQF1CQxwaUgcNBFQSARECAB4SRVVUEDEOABEXHztTVF9OV08RLR4K"
    "BREYTgsAGRYARQcbBk4CAQxSG0trNxwLAARPUgAQDFwEQA0aGBcfTUhUEgERTwVSGgtBOQECFwY9FxIBIAAACw0bHB0dTVRFRkJDV1xcAwQTFR"
    "kLFwoHAVtMSFo="
)


@exercise(
    "multi-head/parameter-count",
    title="How many parameters has MultiHeadAttention(512, 8)?",
    hint=(
        """
            List the layer's projections and count each one's weights and biases. Does
            splitting into heads add or remove any parameter?
        """,
        """
            The layer has four nn.Linear(512, 512) projections: W^Q, W^K, W^V and W^O, each with a bias.
            How many weights has one, how many biases? Does splitting into heads add or remove any?
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
        right=_("Right: 4 d_model^2 + 4 d_model, whatever the number of heads."),
        otherwise=(
            _(
                "{value:g} is not it. Count the weights and biases of the four projections, or check "
                "with sum(p.numel() ...)."
            )
        ),
    )


# -- 4. find the bug: merging the heads back ----------------------------------------------------


def _merge_solution(heads):
    B, h, L, d_k = heads.shape
    # (B, L, h, d_k): each position's heads side by side
    return heads.transpose(1, 2).reshape(B, L, h * d_k)


@exercise(
    "multi-head/fix-merge",
    title="Find the bug: merging the heads with a reshape alone",
    hint=(
        """
            merge must undo split_heads. In what order are the numbers of a (B, h, L, d_k)
            tensor laid out in memory, and in what order must they be for a (B, L, h * d_k)
            result?
        """,
        """
            merge must undo split_heads: head i's d_k columns of position t must land in columns
            i*d_k ... (i+1)*d_k - 1 of row t. In (B, h, L, d_k) memory, the L positions of head 0 come
            first; a reshape keeps that order. Bring the positions in front of the heads first
            (transpose(1, 2)), then reshape (a view needs .contiguous() after a transpose).
        """,
    ),
    solution=_merge_solution,
    name="merge",
    forbids=(merge_heads,),
)
def _check_merge(fn) -> str:
    """Property: merge inverts the package's split_heads, on several shapes, and keeps dtype."""
    for B, h, L, d_k in ((2, 3, 4, 5), (1, 4, 6, 2), (3, 2, 2, 8)):
        x = random_tensor(B, L, h * d_k, seed=40 + h)
        heads = split_heads(
            x, h
        ).contiguous()  # (B, h, L, d_k), contiguous like an attention output
        # view() after the transpose: call() adds the advice to torch's error (use .reshape)
        out = call(fn, heads)
        if isinstance(out, torch.Tensor) and out.shape == (B, L, d_k):
            raise Mistake(
                _(
                    "Your output has shape (B, L, d_k) = {value}: the heads were summed or averaged, not "
                    "concatenated."
                ).format(value=(B, L, d_k))
            )
        expect_tensor(
            out,
            (B, L, h * d_k),
            _("For heads of shape {value} the merged output").format(value=(B, h, L, d_k)),
        )
        if not matches(out, x):
            raise Mistake(
                diagnose(
                    out,
                    {
                        (
                            _(
                                "This is still the given code: a reshape of (B, h, L, d_k) keeps head 0's positions "
                                "together, so row t mixes pieces of several positions."
                            )
                        ): heads.reshape(B, L, h * d_k),
                        (
                            _(
                                "The columns are interleaved (column j*h + i holds head i's feature j): "
                                "concatenate "
                                "whole heads, head 0's d_k columns first (transpose(1, 2), not permute(0, 2, 3, 1))."
                            )
                        ): (heads.permute(0, 2, 3, 1).reshape(B, L, h * d_k)),
                        _("The heads are concatenated in reverse order."): (
                            heads.flip(1).transpose(1, 2).reshape(B, L, h * d_k)
                        ),
                    },
                    default=(
                        _(
                            "For heads {value} your output is not Concat(head_1, ..., head_h) per position: "
                            "merge(split_heads(x, h)) should give x back."
                        ).format(value=(B, h, L, d_k))
                    ),
                )
            )
        if out.dtype != heads.dtype:
            raise Mistake(
                _("The output's dtype is {out_dtype}; keep the input's {heads_dtype}.").format(
                    out_dtype=out.dtype, heads_dtype=heads.dtype
                )
            )
    return _("Right: transpose to (B, L, h, d_k), then reshape: merge undoes split_heads exactly.")


# -- 5. a measured experiment: dropout on the attention weights -----------------------------------

_DROPOUT_STD = "UVpHX1Vd"
_DROPOUT_STD_MISTAKES = (
    "GlZETFlPVzNTFhEGEQ8HTxoUU1VBGREPDRxVFwUAEw1UHAwYVQEHDA0YVB0WAgZSBwpBRU5OBx0aAhwQFVQQBwdPGx"
    "0HDQgaE05LKVsWAQoRGwEaQwIAAQdFBhEAThcdFBsdDA8TSToRGhBJUwsPWjAcDB8aBwdFCAdUAQUJVRMVEQQGVEAG"
    "GRQeW0xIWFQBEU8cBlMXABpUDAYJGgAWRRUcEU4QABMGHgQZWFQZCwAGF1MLDgYZDw8GBhMHDA4aVBoLChtSBgsFGx"
    "EdQwYBXFMhExsEThcHEFIEAAgTHBoQTxQUBwATVAAGBk8GHRURDBUMQEFDVVBDS1BBTF9BVVVQJw0AAFQHEE8BGhZF"
    "EgQGCwILVQUaEQkbARpDGx0XU1RBW1RGUk9YUgNMQQYRHQAOGRsdAltUMkAHHRoCHBAVVBAHFQYRFwBFFRwRTggKBQ"
    "ZTEgQdEwYXHFUQCkVQVFlOE0NVARxFDBEVHRYdEFIaERJUGxsXHwAGUwQSVB0aQwYGXFFJQVZEQFJNT1JRMQkVAE4K"
    "HFUGGwBBAhUcCg4bERZFDhJUGgsKVQAcEkEHAQMQVFUGGwBBEQwLEQwcARZFAAcfHUMJGgBTEQkRHRxDHAETHQEABh"
    "BOBwoDGxIRCBsaTksGAQFTFhABFRwGTwcdHBFIWlZCQ01EUElFQyAcDxdPHAFTEQkRVAMGDhtSHANBABwLQx0aBVMW"
    "FBkHTksLBx0DChQAVAUGCgUBUwwVVBUaQ15cSVMRCRFUCxsKBxEaFgRUFR0IHFUUHBdBABwLCh1VAQcEDxAVHAdPER"
    "cFDAAAHQENQVdeU0dRWkFMWU9XQl1QQR0HThNDVQYbAEEEBgEBDhcbHwwVDVQBBU8RABwVER0aCUMAGxdTEgQdEwYX"
    "VFUfFgQSAQYLQxsdF1MWEQYRDwdPGhRTEQkRVBwMGFUBBggSWlZCQ01FXEJVQ05UTDcHFAZTDBJUAAYGTwYGEgsFFQ"
    "YKQwsQBBoEFR0bAEMAE1IADA8TGAtDCwcdAxUEEFQZBgYSGgcWQVwRDwAHVUJTChNUREBRRk9SABAMVBEPAAdVABwS"
    "QRIdHBAbVVpdFhQZXENSRlxeUxEJERpOFw4eF1MRCRFUHRMdEBMXRQ4SVBoLClU8UxcOA1QdFgIGXFEY"
)
_DROPOUT_STD_SOLUTION = (
    "QVRUThQKHBUbERJUSU4XAAcRG0sHARgCS0dEQkM6UUREQkNeRVtfRVFaRUdpT1VSUwETGwQeBgtVT1MRDgYXBk0BG1wVEA8XAAcMARQeXQETGw"
    "QBFhtdBRYMBhwAHU9PBU9DS1RYVBoRDhwcGgsGSSAcFgpceFNFQVQHGw4cVU9TARMbBB4GC1sBBghJWUVHaU9VUlMVEx0aGkscAB8ASwwRFQBL"
    "RllSABAMB1odFwtdW1pFQVRXTgINGgcHRVBaRF5DDhsWU1VPR0VYaWUwExANQQMRBwQHAVIRAAIbGQsQT0VcQkVOVFxfQ0JVAlpFXFREQFFPAh"
    "sHDUEEBgEBDhcbHwwVDVRfQ0JVAlMEDxBUXkMAARoWFxYdBwtPTwYdUwRBBhsZRBxVAQYIQR0HZFNBR1IHDAwRB04XBxBSHRAMFhEcQwATUhgA"
    "EQBUGQYGEhoHFk1UFU4hBhsdHgwAGFxfU0NVQl1QSE5UGAIdHBMdBgRUREBRMUdSWUVQRFREQ19bQEZFXFREQFJDfwEHBA8QFRwHTxEXBQwAAB"
    "0BDU8GAwERSURaX0pPSFJDS1JFQkBDJhtSFAAPEQYPD08GAwERSQRUQUNHXUNTSEEEXU4wRlxSFQoTVAEACgkaAB5FFhEdCQsbBlIcEwQGVD1D"
    "BBALAEs="
)


@exercise(
    "multi-head/dropout-row-sum",
    title="Measure how much dropout on the weights shakes a row's sum",
    hint=(
        """
            Simulate it: apply dropout in training mode to many rows of uniform attention
            weights, sum each row, and measure the spread of those sums.
        """,
        """
            weights = torch.full((N, 10), 0.1) is N rows of uniform attention over 10 keys. Apply
            torch.nn.functional.dropout(weights, p=0.5, training=True), sum each row (sum(-1)), and
            take the standard deviation of the N sums (N = 100,000 is quick). Check the mean too:
            dropout divides the survivors by 1 - p, so the mean stays 1.
        """,
    ),
    solution=_DROPOUT_STD_SOLUTION,
)
def _check_dropout_std(answer) -> str:
    return check_number(
        answer,
        _DROPOUT_STD,
        _DROPOUT_STD_MISTAKES,
        what=_("standard deviation"),
        rel_tol=0.05,
        mistake_rel_tol=0.03,
        right=(
            _(
                "Right: the rows sum to 1 only on average; a single row's sum has a standard "
                "deviation of about 0.32 (sqrt(p / ((1 - p) S))): a training-mode output is a noisy "
                "copy of the eval-mode one."
            )
        ),
        otherwise=(
            _(
                "{value:g} is not what the experiment gives (the checker allows 5% for sampling "
                "noise). Follow the hint."
            )
        ),
    )
