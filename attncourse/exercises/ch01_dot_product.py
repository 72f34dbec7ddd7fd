"""Chapter 1 exercises: scaled dot-product attention."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..efficient import tiled_attention
from ._core import (
    SOFTMAX_DIM_ONE,
    Mistake,
    call,
    check_number,
    diagnose,
    exercise,
    expect_tensor,
    expect_tuple,
    matches,
    named,
    random_tensor,
)
from ._i18n import N_, _

#: The known mistake of both attention exercises: masked scores set to 0 (filled, or multiplied).
_ZERO_FILLED = N_(
    "The masked scores are filled with 0, not -inf: exp(0) = 1, so a masked key still gets "
    "weight. Fill them with float('-inf')."
)

#: The functions the two attention exercises ask the learner to write instead of calling, and
#: the operator behind F.scaled_dot_product_attention, ``torch.ops.aten.scaled_dot_product_attention``
#: (its fused backends, ``torch.ops.aten._scaled_dot_product_*``, are refused with it).
_ATTENTION_FUNCTIONS = (
    scaled_dot_product_attention,
    torch.nn.functional.scaled_dot_product_attention,
    torch.ops.aten.scaled_dot_product_attention,
    tiled_attention,
)


# -- 1. scaled scores ----------------------------------------------------------------------


def _scores_solution(query, key):
    d_k = query.size(-1)
    return query @ key.transpose(-2, -1) / d_k**0.5


@exercise(
    "dot-product/scores",
    title="Scaled scores Q K^T / sqrt(d_k)",
    hint=(
        """
            Each score is the dot product of one query with one key, and one matrix
            product can compute them all at once. Which dimensions of key have to swap for
            the product to pair every query with every key, and why does the result need
            scaling?
        """,
        """
            Multiply each query by each key: query (..., L, d_k) @ key^T (..., d_k, S) gives (..., L, S).
            Transpose only the last two dimensions of key (key.transpose(-2, -1)), so that leading
            batch dimensions stay where they are, then divide by the square root of d_k = query.size(-1).
        """,
    ),
    solution=_scores_solution,
    name="scaled_scores",
)
def _check_scores(fn) -> str:
    # L = 4, S = 5, d_k = 9: sqrt(d_k) = 3 differs from L, S, sqrt(L), sqrt(S) and d_k ** 0.25,
    # so each wrong scale shows
    query, key = random_tensor(4, 9, seed=1), random_tensor(5, 9, seed=2)
    expected = query @ key.T / 3
    out = call(fn, query, key)
    if isinstance(out, torch.Tensor) and out.shape == (5, 4):
        raise Mistake(
            _(
                "Your scores have shape (S, L) = (5, 4): you computed key @ query^T. Put the queries "
                "first: query @ key^T."
            )
        )
    expect_tensor(out, (4, 5), _("The scores for query (4, 9) and key (5, 9)"))
    if not matches(out, expected):
        raise Mistake(
            diagnose(
                out,
                {
                    _("Your scores are not scaled: divide Q K^T by sqrt(d_k)."): query @ key.T,
                    _("You divided by d_k; the scale is 1 / sqrt(d_k)."): query @ key.T / 9,
                    _("You multiplied by sqrt(d_k); divide by it instead."): query @ key.T * 3,
                    _(
                        "You divided by sqrt(L) or sqrt(S); d_k is the width of the queries and keys, "
                        "query.size(-1)."
                    ): (query @ key.T / math.sqrt(4)),
                    _(
                        "You divided by sqrt(S) or sqrt(L); d_k is the width of the queries and keys, "
                        "query.size(-1)."
                    ): (query @ key.T / math.sqrt(5)),
                },
                default=(
                    _("Your scores differ from Q K^T / sqrt(d_k) for query (4, 9) and key (5, 9).")
                ),
            )
        )
    query, key = random_tensor(2, 4, 3, 16, seed=3), random_tensor(2, 4, 6, 16, seed=4)
    advice = _(
        "Right for one matrix, wrong with batch dimensions: transpose only the last two "
        "dimensions of key (key.transpose(-2, -1), not key.T)."
    )
    try:
        out = call(fn, query, key)
        expect_tensor(
            out,
            (2, 4, 3, 6),
            _("With batch dimensions, query (2, 4, 3, 16) and key (2, 4, 6, 16) give scores that"),
        )
    except Mistake as mistake:
        raise Mistake(_("{advice}\n({mistake})").format(advice=advice, mistake=mistake)) from None
    raw = query @ key.transpose(-2, -1)
    if not matches(out, raw / 4):
        # the transpose is right if the output is the right product, scaled by some other number: blame the scale
        where = _("With batch dimensions, query (2, 4, 3, 16) and key (2, 4, 6, 16)")
        raise Mistake(
            diagnose(
                out,
                {
                    (
                        _(
                            "{where}: your scale is 1/sqrt(4), 4 being query.size(1), the number of heads here. "
                            "d_k is the LAST dimension: query.size(-1) (or query.shape[-1]), not query.shape[1]."
                        ).format(where=where)
                    ): (raw / 2),
                    (
                        _(
                            "{where}: your scale is 1/sqrt(2), 2 being query.size(0), the batch size here. d_k "
                            "is the LAST dimension: query.size(-1)."
                        ).format(where=where)
                    ): (raw / 2**0.5),
                    _(
                        "{where}: your scale is 1/sqrt(3), 3 being L, the number of queries. d_k is "
                        "query.size(-1)."
                    ).format(where=where): (raw / 3**0.5),
                    _(
                        "{where}: your scale is 1/sqrt(6), 6 being S, the number of keys. d_k is "
                        "query.size(-1)."
                    ).format(where=where): (raw / 6**0.5),
                },
                default=_scale_or_transpose(out, raw, where, advice),
            )
        )
    return _("Your scores match Q K^T / sqrt(d_k), with and without batch dimensions.")


def _scale_or_transpose(out: torch.Tensor, raw: torch.Tensor, where: str, advice: str) -> str:
    """The message for batched scores that are none of the known scales: ``raw`` times one
    constant (a scale written out for the first case, such as / 3) is a scale that does not
    follow d_k; anything else is the transpose's ``advice``."""
    factor = float((out.detach().to(torch.float64) * raw).sum() / (raw * raw).sum())
    if factor > 0 and matches(out, raw * factor):
        return _(
            "{where}: your scores are Q K^T times {factor:.4g}, not 1/sqrt(16) = 0.25. A scale "
            "written as a number is right for one d_k only: compute it from query.size(-1)."
        ).format(where=where, factor=factor)
    return advice


# -- 2. the whole attention ----------------------------------------------------------------


def _attention_solution(query, key, value, mask=None, *, scale=None):
    if scale is None:
        scale = 1 / query.size(-1) ** 0.5
    scores = query @ key.transpose(-2, -1) * scale  # (..., L, S)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))  # True = may attend
    elif mask is not None:
        scores = scores + mask  # additive mask
    fully_masked = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(fully_masked, 0.0), dim=-1)
    weights = weights.masked_fill(fully_masked, 0.0)  # a row with no key left: zeros, not NaN
    return weights @ value, weights


def _outputs(fn, *args, **kwargs):
    return expect_tuple(
        call(fn, *args, **kwargs), 2, _("Return a pair (output, weights); got {type_name}.")
    )


def _variants(query, key, value, mask=None):
    """Outputs of the usual mistakes on these inputs: message -> (output, weights)."""
    d_k, d_v = query.size(-1), value.size(-1)
    raw = query @ key.transpose(-2, -1)

    def finish(scores, dim=-1):
        weights = torch.softmax(scores, dim=dim)
        return weights @ value, weights

    def masked(scores, keep):
        return scores.masked_fill(~keep, float("-inf")) if keep is not None else scores

    out = {
        (
            _(
                "The softmax runs over the wrong dimension: each row (one query) must sum to 1 over "
                "the keys, so use dim=-1."
            )
        ): finish(masked(raw / d_k**0.5, mask), dim=-2),
        _("The scores are not scaled: divide Q K^T by sqrt(d_k) before the softmax."): finish(
            masked(raw, mask)
        ),
        _("The scale is 1 / d_k; it should be 1 / sqrt(d_k)."): finish(masked(raw / d_k, mask)),
        _(
            "You scaled by sqrt(d_v) (the value width); the scale uses d_k, the width of queries "
            "and keys."
        ): finish(masked(raw / d_v**0.5, mask)),
    }
    if raw.dim() > 3:  # dim=1 is the keys of a 2-D matrix only
        out[_(SOFTMAX_DIM_ONE)] = finish(masked(raw / d_k**0.5, mask), dim=1)
    if mask is not None and mask.dtype == torch.bool:
        zero_filled = (raw / d_k**0.5).masked_fill(~mask, 0.0)
        out[_(_ZERO_FILLED)] = finish(zero_filled)  # scores * mask too: the same zeros
    if mask is not None:
        w = torch.softmax(raw / d_k**0.5, dim=-1)
        out[_("The mask is ignored: positions where mask is False must get zero weight.")] = (
            w @ value,
            w,
        )
        out[
            _(
                "The mask polarity is inverted: True means 'may attend', so fill the positions where"
                " mask is False."
            )
        ] = finish(raw.masked_fill(mask, float("-inf")) / d_k**0.5)
        kept = w * mask
        out[
            _(
                "The mask is applied after the softmax, so the kept weights no longer sum to 1: mask"
                " the scores, then take the softmax."
            )
        ] = (
            kept @ value,
            kept,
        )
        big = torch.softmax((raw / d_k**0.5).masked_fill(~mask, -1e9), dim=-1)
        out[
            _(
                "A fully masked row came out uniform, as filling with -1e9 instead of -inf gives. Give"
                " a row with no allowed key zero weights and zero output."
            )
        ] = (
            big @ value,
            big,
        )
    return out


def _compare(case: str, got, expected, variants) -> None:
    output, weights = got
    exp_out, exp_w = expected
    expect_tensor(output, exp_out.shape, _("{case}: the output").format(case=case))
    expect_tensor(weights, exp_w.shape, _("{case}: the weights").format(case=case))
    if matches(weights, exp_w) and matches(output, exp_out):
        return
    if matches(weights, exp_w):
        raise Mistake(
            _(
                "{case}: the weights are right but the output is not: the output is weights @ value."
            ).format(case=case)
        )
    for message, (_output, wrong_weights) in variants.items():
        if matches(weights, wrong_weights, equal_nan=True):
            raise Mistake(_("{case}: {message}").format(case=case, message=named(message)))
    if torch.isnan(weights).any() or torch.isnan(output).any():
        raise Mistake(
            _(
                "{case}: your result contains NaN: look for inf - inf or 0/0. For instance a row "
                "whose keys are all masked gives softmax(-inf, ..., -inf) = 0/0; give such a row "
                "zero weights and a zero output."
            ).format(case=case)
        )
    raise Mistake(
        _("{case}: your weights differ from softmax(Q K^T / sqrt(d_k) + mask).").format(case=case)
    )


@exercise(
    "dot-product/attention",
    title="Scaled dot-product attention with a mask",
    hint=(
        """
            Follow the chapter's steps in order: scores, then the mask, then the softmax,
            then the weighted sum of the values. Where must the mask act so that the
            weights of a row still sum to 1, and what should a row that may see no key
            get?
        """,
        """
            1. scores = query @ key.transpose(-2, -1), times scale (1 / sqrt(d_k) by default).
            2. Boolean mask: True = may attend, so fill the scores where the mask is False with -inf.
               Float mask: add it to the scores.
            3. weights = softmax over the last dimension (the keys).
            4. A row that is -inf everywhere would give NaN: detect it and give it zero weights.
            5. output = weights @ value. Return (output, weights).
        """,
    ),
    solution=_attention_solution,
    name="attention",
    forbids=_ATTENTION_FUNCTIONS,
)
def _check_attention(fn) -> str:
    q, k, v = (
        random_tensor(4, 8, seed=10),
        random_tensor(6, 8, seed=11),
        random_tensor(6, 5, seed=12),
    )
    got = _outputs(fn, q, k, v)
    if isinstance(got[1], torch.Tensor) and got[1].shape == (6, 4):
        raise Mistake(
            _(
                "Your weights have shape (S, L): you computed key @ query^T. The scores are query @ "
                "key^T, shape (L, S)."
            )
        )
    _compare(
        _("Without a mask (L=4, S=6, d_k=8, d_v=5)"),
        got,
        scaled_dot_product_attention(q, k, v),
        _variants(q, k, v),
    )

    q, k, v = (
        random_tensor(2, 3, 4, 8, seed=13),
        random_tensor(2, 3, 7, 8, seed=14),
        random_tensor(2, 3, 7, 6, seed=15),
    )
    _compare(
        _("With batch dimensions (2, 3), L=4, S=7, d_k=8, d_v=6"),
        _outputs(fn, q, k, v),
        scaled_dot_product_attention(q, k, v),
        _variants(q, k, v),
    )

    q, k, v = (
        random_tensor(2, 5, 8, seed=16),
        random_tensor(2, 6, 8, seed=17),
        random_tensor(2, 6, 4, seed=18),
    )
    mask = torch.rand(2, 5, 6, generator=torch.Generator().manual_seed(19)) > 0.4
    mask[..., 0] = True  # every row keeps at least one key here
    _compare(
        _("With a boolean mask (B=2, L=5, S=6)"),
        _outputs(fn, q, k, v, mask),
        scaled_dot_product_attention(q, k, v, mask),
        _variants(q, k, v, mask),
    )

    additive = torch.zeros(2, 5, 6, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    _compare(
        _("With an additive float mask (0 keeps, -inf removes; B=2, L=5, S=6)"),
        _outputs(fn, q, k, v, additive),
        scaled_dot_product_attention(q, k, v, additive),
        {
            _("A float mask is added to the scores; treat only boolean masks as True/False."): (
                scaled_dot_product_attention(q, k, v)
            ),
            _(
                "You read the float mask as a boolean one: its 0s (keep) became False and its -infs "
                "(remove) became True, so your weights sit exactly on the removed keys. Add a float "
                "mask to the scaled scores; only a bool mask means True/False."
            ): scaled_dot_product_attention(q, k, v, additive != 0),
        },
    )

    # a finite float mask (a learned bias, ALiBi-like): it is added after the scale
    bias = 2 * random_tensor(2, 5, 6, seed=20)
    scaled = (q @ k.transpose(-2, -1) + bias) / 8**0.5
    _compare(
        _("With a finite float mask (a bias added to the scaled scores)"),
        _outputs(fn, q, k, v, bias),
        scaled_dot_product_attention(q, k, v, bias),
        {
            _(
                "The float mask is added before the scale: add it to the scaled scores, Q K^T * "
                "scale + mask."
            ): (
                torch.softmax(scaled, -1) @ v,
                torch.softmax(scaled, -1),
            ),
            (
                _(
                    "A float mask is added to the scores, whatever its values; only a boolean mask means "
                    "True/False."
                )
            ): scaled_dot_product_attention(q, k, v, torch.isfinite(bias)),
            _(
                "The float mask is ignored: add it to the scaled scores."
            ): scaled_dot_product_attention(q, k, v),
        },
    )

    empty = mask.clone()
    empty[1, 2] = False  # query 2 of the second sequence may attend to nothing
    _compare(
        _("With a fully masked row (B=2, L=5, S=6; query 2 of sequence 1 sees no key)"),
        _outputs(fn, q, k, v, empty),
        scaled_dot_product_attention(q, k, v, empty),
        _variants(q, k, v, empty),
    )
    _compare(
        _("With a float mask that is -inf over a whole row (query 2 of sequence 1)"),
        _outputs(fn, q, k, v, additive.masked_fill(~empty, float("-inf"))),
        scaled_dot_product_attention(q, k, v, empty),
        {},
    )

    # masks that broadcast, as the chapters pass them: a padding mask (B, 1, S), a causal (L, S)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, :]
    causal = torch.ones(5, 6, dtype=torch.bool).tril(diagonal=1)
    for case, broadcast in (
        (
            _("With a padding mask of shape (B, 1, S) = (2, 1, 6), broadcast over the queries"),
            padding,
        ),
        (_("With a causal mask of shape (L, S) = (5, 6), broadcast over the batch"), causal),
    ):
        _compare(
            case,
            _outputs(fn, q, k, v, broadcast),
            scaled_dot_product_attention(q, k, v, broadcast),
            _variants(q, k, v, broadcast),
        )

    _compare(
        _("With scale=0.5 (B=2, L=5, S=6)"),
        _outputs(fn, q, k, v, scale=0.5),
        scaled_dot_product_attention(q, k, v, scale=0.5),
        {
            _("The scale argument is ignored: use it instead of 1 / sqrt(d_k) when it is given."): (
                scaled_dot_product_attention(q, k, v)
            )
        },
    )

    q32, k32, v32 = q.float(), k.float(), v.float()
    output, weights = _outputs(fn, q32, k32, v32)
    if output.dtype != torch.float32 or weights.dtype != torch.float32:
        raise Mistake(
            _(
                "float32 inputs gave {output_dtype} output and {weights_dtype} weights: keep the "
                "input's dtype."
            ).format(output_dtype=output.dtype, weights_dtype=weights.dtype)
        )
    return _(
        "Your attention matches the reference: batches, L != S, boolean and float masks, masks "
        "that broadcast, fully masked rows, scale and dtype."
    )


# -- 3. the variance of a dot product --------------------------------------------------------

_VARIANCE = "V0A="
_VARIANCE_MISTAKES = (
    "GlZMTFlPVyYbBBVUHR1DGx0XUxYVFRoKAh0RUhcAFx0VGgoAG1IcA0EFKBtTXxdFGEtBIBwLQxkUABoEDxcRTgocVR"
    "sHFkEHBRsCHRBcUUlBVkVMWU9XJhsEFVQdHUMbHRdTEwAGHQ8NDBBSEgMVEQZOBwYDGxcMDxNUDBpPBgMBEUkQKwVK"
    "VVUGGwBBBQELEBscHR1FAAcfHUMOFx0GEUEAHAtDHRQFUwEOAFQeEQARBxART1ZYTkFbRUtFR1tUVjoLDgFSBAoUGB"
    "BOAQpVFiwOQQcFGwIdEBZdRSQVFwZDABNSBw0EVBAxCE8FABwBFBcAHUMeKhtTDj4dVAYCHFUEEhcIFRoNBk9EXlME"
    "DxBUGgsKVQQSFwgVGg0GHFUdFUUIGhALEwobFhYLFVQACxECBlISAQVaVkJDTUVQSUVDLhEcDE8cAVMRCRFUAwYOG1"
    "IcA0EFKBtTXxdFGElBGhsaQwYBAVMTAAYdDw0MEFxRGA=="
)
_VARIANCE_SOLUTION = (
    "ELbDBUNSVQMsVEEfK19DRFVcXUtBX1QfPFlBUhg6V0BaTiYOFhpTFRMbEBsAG1UDLAxBHysHQwATUgcSDlQdAAcKBR"
    "cdAQQaAEJDFRAAHEgMERUAT08AHBoRTAIVHAoOGxEWRQ8BGQwGHQZSGwQSVBkLAgFVQlMEDxBUGAIdHBMdBgRUMTUS"
    "MBwsQThBMS8FPAYrQC5FXFRFQEM7HRdTU1VUBBwMCwARBxZBFQYLQwYbFhYVBBoQCw0bWVIACkEAHAsKHVUEEhcIFR"
    "oNBhxVExcBW1QiDxFHBLDEDkhUSU4HMB5STkVXQFhOAk8GBhILBRUGCkMLEAQaBBUdGwBDABNSS0tBMB0YCgscHBRF"
    "Aw1UHRIdAVoXOgpdVFNDV1UQAQwPEwdOFwcQUgUEEx0VAAAKVRASBgpUAAFDXllSBA0AABEYBh1VFiwOQR0HQA=="
)


@exercise(
    "dot-product/score-variance",
    title="The variance of q·k when d_k = 64",
    hint=(
        """
            Write q·k as a sum of d_k products of independent standard normal numbers.
            What is the variance of one product, and how do the variances of independent
            terms combine?
        """,
        """
            Write q·k as a sum of d_k products q_i k_i. What are the mean and the variance of one
            product of two independent standard normal numbers? How do variances of independent
            terms combine? You can also estimate it: torch.randn(100_000, 64) gives many q's.
        """,
    ),
    solution=_VARIANCE_SOLUTION,
)
def _check_variance(answer) -> str:
    return check_number(
        answer,
        _VARIANCE,
        _VARIANCE_MISTAKES,
        what=_("variance"),
        rel_tol=0.03,
        mistake_rel_tol=0.05,  # estimates pass too
        right=(
            _(
                "Right: the variance grows like d_k, which is why the scores are divided by "
                "sqrt(d_k)."
            )
        ),
        otherwise=(
            _(
                "{value:g} is not it. Estimate it numerically with torch.randn, or work it out term "
                "by term."
            )
        ),
    )


# -- 4. find the bug: the mask applied after the softmax ----------------------------------------


def _fixed_masked_attention_solution(query, key, value, mask):
    scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5  # (..., L, S)
    scores = scores.masked_fill(~mask, float("-inf"))  # mask the SCORES: True = may attend
    weights = torch.softmax(scores, dim=-1)  # the kept weights of each row sum to 1
    return weights @ value


@exercise(
    "dot-product/fix-mask-after-softmax",
    title="Find the bug: a mask applied after the softmax",
    hint=(
        """
            Run the given function's first two lines on a small example and sum each row
            of weights. Which step produces weights that do not sum to 1?
        """,
        """
            Run the given function's first two lines on a small example and sum each row of
            weights. Which step produces weights that do not sum to 1? Masking must happen where
            the -inf can still be normalised away: on the scores, before the softmax.
        """,
    ),
    solution=_fixed_masked_attention_solution,
    name="fixed_attention",
    forbids=_ATTENTION_FUNCTIONS,
)
def _check_fixed_masked_attention(fn) -> str:
    """Property: on random inputs (every row keeps a key), the output equals the package's."""
    generator = torch.Generator().manual_seed(30)
    for case, shape in (("L=4, S=6", (4, 6)), (_("with a batch (2, 3)"), (2, 3, 4, 6))):
        *batch, L, S = shape
        q, k, v = (
            random_tensor(*batch, L, 8, seed=31),
            random_tensor(*batch, S, 8, seed=32),
            random_tensor(*batch, S, 5, seed=33),
        )
        mask = torch.rand(*batch, L, S, generator=generator) > 0.5
        mask[..., 0] = True  # every query keeps at least one key
        expected, weights = scaled_dot_product_attention(q, k, v, mask)
        out = call(fn, q, k, v, mask)
        expect_tensor(out, expected.shape, _("{case}: the output").format(case=case))
        if matches(out, expected):
            continue
        raw = q @ k.transpose(-2, -1) / 8**0.5
        after = torch.softmax(raw, -1).masked_fill(~mask, 0.0)
        renormalised = after / after.sum(-1, keepdim=True)
        raise Mistake(
            diagnose(
                out,
                {
                    (
                        _(
                            "This is still the given code: the weights are masked after the softmax, so each row "
                            "sums to less than 1."
                        )
                    ): (after @ v),
                    _(
                        "The mask polarity is inverted: True means 'may attend', so fill the scores where "
                        "mask is False."
                    ): (torch.softmax(raw.masked_fill(mask, float("-inf")), -1) @ v),
                    _(_ZERO_FILLED): (torch.softmax(raw.masked_fill(~mask, 0.0), -1) @ v),
                    _(
                        "The scale went missing: divide the scores by sqrt(d_k) as the given code did."
                    ): (
                        torch.softmax(
                            (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf")), -1
                        )
                        @ v
                    ),
                    _(
                        "The softmax runs over the queries (dim=-2); each row (one query) must sum to 1 over "
                        "the keys."
                    ): (
                        torch.softmax(raw.masked_fill(~mask, float("-inf")), -2).nan_to_num(0.0) @ v
                    ),
                    _(SOFTMAX_DIM_ONE): (
                        torch.softmax(raw.masked_fill(~mask, float("-inf")), 1).nan_to_num(0.0) @ v
                        if raw.dim() > 3
                        else None
                    ),
                },
                default=(
                    _(
                        "{case}: your output differs from softmax(QK^T / sqrt(d_k) with -inf at "
                        "masked keys) V. (Renormalising the masked weights would also be right; "
                        "yours are not that either.)"
                    )
                    if not matches(out, renormalised @ v)
                    else _(
                        "{case}: your output differs from softmax(QK^T / sqrt(d_k) with -inf at "
                        "masked keys) V. (Renormalising the masked weights would also be right; "
                        "check the shapes.)"
                    )
                ).format(case=case),
            )
        )
    return _(
        "Right: the mask belongs on the scores, before the softmax; then every row of "
        "weights sums to 1."
    )


# -- 5. a measured experiment: how much gradient reaches unscaled scores at d_k = 512 -----------

_GRADIENT_RATIO = "UVpGXlA="
_GRADIENT_RATIO_MISTAKES = (
    "GlZAQFpcV0hTRzgbAU4HBgMbFwAFVAAGBk8aBhsAE1QDDxpVVQYbAEERDAsRDBwBFkUABx8dQwkaAFMRCRFUGw0cFhMfAAVUExwCCxwXHRFBBx"
    "0UBk8RGwUMBREQTgEWVQYbAEEHFw8PChFSHAsEVFwPQwEAHxEAE1QWCw8AAlJCTE9WWE5BX1tCRlJWVk5OQTsdEwdFCAdUGgsKVQcdFgIVGAsH"
    "TxIAEgEIERoaQxwcCBZFABgbAAZUVRYaEwgQEU4KG1UQCkUVHBFOEAYPF1MKB1QABgZPEgASAQgRGhpDGBwGG0USFxUCBgtVARAKExEHQEFDVV"
    "BDS1NMQ0xZT1cmGwQVVB0dQxsdF1MWAhUYCwdPEgASAQgRGhpDHBwIFkUAGBsABlRVBhsAQRUaHRQKB1IaFkEAHAtDGhsBEAQNERBOEAYPF1MB"
    "CAIdCgYLVRAKRQgAWkxPT1dDUV9BVjVOEQ4BGxxFDhJUX0MCEBMdFkEWGxoLTwcHHRZBBxUZQxsdF1MWABkRThAMGgAWFltUEAcVBhEXUwoPEV"
    "QBBU8BGhYIQRYNThAeBwZbAT4fXU5eTwYDARFJQUVcSk8XFxUKExFUGgsKVQEcAxUZFRZNTQg="
)
_GRADIENT_RATIO_SOLUTION = (
    "LBEVHRYdEBZTEggAHE5SX0VeQ1VRVAUbBh0cFwBfQQAcC0MaGwEQBA0REE4EHRQWGgAPAFQADB0YUhITBAYVCQYcVRMRChQAVF5NX0BKUwQPEF"
    "QaCwpVARAEDREQTgwBEHgSBw4BAE5TQUdKRElBFVQcAhscHVMKB1QVDAwaAVJDS1NEVEYBCgEFFgAPVERAUlZVEx0BQURaXFFPAhsHDUFBWF5T"
    "X1UDBgATHREdQw4bFlMKFRwRHEMcEBcXFkhafmRDT1VSHUVcVEExU19FUlNGQQUBCxEGEAFJRQAAVAIGDgYGU1BNREReT08UAVMRCRFUCxsKBx"
    "EaFgRUFR0IHH9SU0VBBVhOCE9IUgcKExccQBEOGxYdTQ9YVF9PT0BDQUxNVAABEQwdXAEEDxAaRg1DVUNFSUFBRVxKZVVSU0UTFQNOXk9dA1Ml"
    "QR9aGhEOGwEDChIRXENRQ1VfQkxIWgcfFgoQCBZNUF1+TkNPVQcDFhUGEQ8OT0hSBwoTFxxAEQ4bFh1ND1hUX1VGf1JTRUEHHRQGHFVPUz48fl"
    "ROQ08THQFFElQdAENHBxMESUEGFRlDQFVHQldBXl5OU0FAW0lvQVRUTkNPVVIARVxUB0AAAxocFk1IWgYLEhocABYWPhMGDwcwXSYBEARdfk5D"
    "T1VSU0VBXAABEQwdXAAKBwAZDxtHBl5TSFBdVERDGgUBBxcEFRlHTRwAH1tMTxYVDQgYFAAXTUh+VE5DT1VSU0USHQ4LEEEUAgMADxBcHU0IBx"
    "MXSw8bBgNLCxwfTkhQXVoDBg4bWlpLCAARA0tGXHhTRUFUBg8XBhpSTkUSHQ4LEDRFL1NKQQcdFAYcLkMub2sgHAtDGhsBEAQNERBOEAwaABYW"
    "QRwVGAZPFFIAEQAaEA8RC1UWFhMIFQAHDAFVHRVFEgUGGktaREBaSUEVFgEWG1VAQUtXTlQaCwpVHhIXBhEHGkMAE1JCU0EBBxsCAxkLeRIIGg"
    "dOARZVHxILGFQBAAobBl5TEQkRVB0MCQEfEh1BHQdODQoUAB8cQRsaC04HGgZTBA8QVAcXHFU4EgYOFh0PDU8RGxICSQNdTk5PAlIEOzVUGgsC"
    "HRkLUx8EBhtA"
)


@exercise(
    "dot-product/saturation-gradient",
    title="Measure how much gradient reaches unscaled scores at d_k = 512",
    hint=(
        """
            Measure rather than derive: repeat the chapter's saturation experiment at one
            size, once with raw scores and once with scaled scores, and compare the sizes
            of the gradients that reach the scores.
        """,
        """
            Repeat the chapter's saturation experiment at one size: q (n, 1, 512) and k (n, 16, 512)
            standard normal, scores = (q @ k^T).squeeze(1) of shape (n, 16), a random upstream
            signal of the same shape, loss = (softmax(scores) * upstream).sum(). Take scores with
            requires_grad, call backward, and average the L2 norm of each row of scores.grad. Do it
            for raw scores and for scores / sqrt(512), with n of 5,000 or more, and divide.
        """,
    ),
    solution=_GRADIENT_RATIO_SOLUTION,
)
def _check_gradient_ratio(answer) -> str:
    return check_number(
        answer,
        _GRADIENT_RATIO,
        _GRADIENT_RATIO_MISTAKES,
        what=_("ratio"),
        rel_tol=0.15,
        mistake_rel_tol=0.03,
        right=(
            _(
                "Right: without the scale only about a fifth of the gradient reaches the scores at "
                "d_k = 512, and the share shrinks further as d_k grows (the chapter's figure)."
            )
        ),
        otherwise=(
            _(
                "{value:g} is outside the range a measurement gives (the checker allows 15% for "
                "sampling noise). Follow the hint step by step, with at least 5,000 queries."
            )
        ),
    )
