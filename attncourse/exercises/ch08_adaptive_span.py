"""Chapter 8 exercises: adaptive attention span."""

from __future__ import annotations

import math

import torch

from ..adaptive_span import soft_span_mask, span_window
from ._core import (
    SOFTMAX_DIM,
    Mistake,
    call,
    check_line_number,
    check_number,
    diagnose,
    exercise,
    expect_tensor,
    integer,
    matches,
    random_tensor,
    several,
    softmax_over,
)
from ._i18n import _

# -- 1. the soft mask m_z(x) ---------------------------------------------------------------------


def _mask_solution(distance, span, ramp):
    return ((ramp + span - distance) / ramp).clamp(0, 1)


def _mask_mistakes(distance, span, ramp):
    return {
        (
            _(
                "Your ramp is on the wrong side of z: it falls from 1 at z - R to 0 at z. The mask "
                "must stay 1 up to distance z and reach 0 only at z + R: m = clamp((R + z - x) / R, "
                "0, 1)."
            )
        ): (((span - distance) / ramp).clamp(0, 1)),
        (
            _(
                "The distance has the wrong sign: the mask must fall as the key gets farther back "
                "(larger x), so x enters with a minus sign."
            )
        ): (((ramp + span + distance) / ramp).clamp(0, 1)),
        _("You divided by z instead of R: the slope of the ramp is 1 / R, whatever the span."): (
            ((ramp + span - distance) / span).clamp(0, 1)
        ),
        _(
            "Your ramp is one position too wide (you divided by R + 1): the mask falls from 1 at "
            "distance z to 0 at distance z + R, a slope of 1 / R."
        ): (((ramp + span - distance) / (ramp + 1)).clamp(0, 1)),
        _(
            "This is 1 - x / z, the sources' formula: it has no ramp width R and starts falling "
            "at distance 0."
        ): ((1 - distance / span).clamp(0, 1)),
        _("Your mask goes above 1: clamp it from above as well (min(..., 1))."): (
            ((ramp + span - distance) / ramp).clamp(min=0)
        ),
        _("Your mask goes below 0: clamp it from below as well (max(..., 0))."): (
            ((ramp + span - distance) / ramp).clamp(max=1)
        ),
        (
            _(
                "This is a hard mask (1 up to z, 0 beyond): it has no gradient with respect to z. "
                "Use the linear ramp of width R."
            )
        ): ((distance <= span).to(torch.float64)),
    }


@exercise(
    "adaptive-span/soft-mask",
    title="The soft span mask m_z(x)",
    hint=(
        """
            The mask is 1 up to the span, falls linearly to 0 over the ramp, and is 0
            beyond. Write the linear part as a function of the distance, then keep it
            between 0 and 1; broadcasting does the rest.
        """,
        """
            m_z(x) = min(max((R + z - x) / R, 0), 1): compute (ramp + span - distance) / ramp, then clamp
            it into [0, 1] (tensor.clamp(0, 1)). Broadcasting does the rest: span of shape (h, 1, 1) and
            distance of shape (L, L) give (h, L, L).
        """,
    ),
    solution=_mask_solution,
    name="span_mask",
    forbids=(soft_span_mask,),
)
def _check_mask(fn) -> str:
    distance = torch.arange(0, 24, dtype=torch.float64)
    for span, ramp in [
        (torch.tensor(5.0, dtype=torch.float64), 3.0),  # z, R and R + 1 all differ
        (torch.tensor(9.5, dtype=torch.float64), 3.0),
    ]:
        expected = soft_span_mask(distance, span, ramp)
        out = call(fn, distance, span, ramp)
        expect_tensor(
            out,
            expected.shape,
            _("For span z={span:g} and ramp R={ramp:g}, the mask over distances 0..23").format(
                span=span.item(), ramp=ramp
            ),
        )
        if not matches(out, expected):
            raise Mistake(
                diagnose(
                    out,
                    _mask_mistakes(distance, span, ramp),
                    default=(
                        _(
                            "Your mask differs from min(max((R + z - x) / R, 0), 1) for z={span:g}, R={ramp:g}; "
                            "expected {expected} for x = 0..15."
                        ).format(span=span.item(), ramp=ramp, expected=expected[:16].tolist())
                    ),
                )
            )
    spans = torch.tensor([0.0, 3.0, 12.5], dtype=torch.float64)[:, None, None]
    grid = (torch.arange(6)[:, None] - torch.arange(6)[None, :] + 10).to(torch.float64)
    out = call(fn, grid, spans, 2.0)
    expect_tensor(out, (3, 6, 6), _("With spans of shape (3, 1, 1) and distances (6, 6), the mask"))
    if not matches(out, soft_span_mask(grid, spans, 2.0)):
        raise Mistake(
            _(
                "Right for one span, wrong with one span per head: use broadcasting, not a loop or a "
                "reshape."
            )
        )
    _check_mask_gradient(fn, distance)
    return _(
        "Your mask is 1 up to distance z, falls linearly to 0 at z + R, and broadcasts over heads."
    )


def _check_mask_gradient(fn, distance: torch.Tensor) -> None:
    """The mask passes the gradient to z: d/dz of its sum is the number of distances on the
    ramp, divided by R (z = 5.5 and R = 4 keep every integer distance off the ramp's ends).

    The span reaches ``fn`` from a closure, not as an argument of :func:`call`, whose copy of it
    would take the gradient; ``call`` still limits the time and restores torch's state."""
    span = torch.tensor(5.5, dtype=torch.float64, requires_grad=True)
    reference = torch.tensor(5.5, dtype=torch.float64, requires_grad=True)
    soft_span_mask(distance, reference, 4.0).sum().backward()

    def mask_and_backward(distance: torch.Tensor, ramp: float) -> None:
        try:  # span * 1, not the leaf itself: an in-place edit of it is the learner's own affair
            out = fn(distance, span * 1, ramp)
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.sum().backward()
        except Exception:  # noqa: BLE001 - e.g. span.numpy(), refused on a tensor that needs a gradient
            pass

    call(mask_and_backward, distance, 4.0)
    if span.grad is None or not matches(span.grad, reference.grad):
        raise Mistake(
            _(
                "Your mask has the right values but passes no gradient to z (or the wrong one): "
                "with span.detach(), .data, .item(), torch.no_grad() or a detour through NumPy, "
                "z cannot be learned, which is what the soft mask is for. Compute it from span "
                "with tensor operations."
            )
        )


# -- 2. the window to keep --------------------------------------------------------------------------


def _window_solution(spans, ramp):
    return math.ceil(float(spans.max()) + ramp)


@exercise(
    "adaptive-span/window",
    title="How many keys back must a layer compute?",
    hint=(
        """
            For which distances is the soft mask non-zero? The window must hold every such
            key, and the heads of a layer share one window.
        """,
        """
            The mask is non-zero exactly when x < z + R. The largest such whole distance is
            ceil(z + R) - 1, so distances 0 .. ceil(z + R) - 1 are needed: ceil(z + R) keys. All the
            heads of a layer share one computation, so the longest span decides.
        """,
    ),
    solution=_window_solution,
    name="keys_to_keep",
    keep_dtype=False,  # a count: an int, a float or a tensor of any dtype holding it will do
    forbids=(span_window,),
)
def _check_window(fn) -> str:
    cases = [
        (torch.tensor([3.0, 17.2, 5.5, 0.0]), 8.0),
        (torch.tensor([12.0, 4.0]), 8.0),
        (torch.tensor([0.0, 0.0, 0.0]), 4.0),
        (torch.tensor([30.6, 29.9]), 2.5),
        # ceil(z) + ceil(R) = 5 but ceil(z + R) = 4: where the ceil goes matters
        (torch.tensor([2.3, 0.6]), 1.5),
        # z + R = 21, odd and whole: round(z + R + 0.5) rounds the half to even, 22
        (torch.tensor([13.0, 2.0]), 8.0),
    ]
    for spans, ramp in cases:
        got = call(fn, spans, ramp)
        try:
            got = integer(got, _("number of keys"))
        except Mistake as mistake:
            raise Mistake(
                _(
                    "{mistake} Return a whole number of keys (an int). (spans {spans}, R = {ramp:g})"
                ).format(mistake=mistake, spans=spans.tolist(), ramp=ramp)
            ) from None
        expected = span_window(spans, ramp)
        if got == expected:
            continue
        z, mean = float(spans.max()), float(spans.mean())
        known = [  # (value, message): every mistake that gives the learner's value is named
            (
                math.ceil(z + ramp) - 1,
                _(
                    "That is the largest distance with a weight, ceil(z + R) - 1: the keys are the "
                    "distances 0 up to it, one more than it."
                ),
            ),
            (
                math.ceil(z),
                _(
                    "You forgot the ramp: the mask reaches 0 only at distance z + R, so keys up to "
                    "there still count."
                ),
            ),
            (
                math.floor(z + ramp),
                _(
                    "You rounded down: a non-integer z + R still leaves a non-zero weight at "
                    "distance floor(z + R); use ceil."
                ),
            ),
            (
                math.ceil(z + ramp) + 1,
                _(
                    "One too many: at distance z + R the mask is already 0, so ceil(z + R) keys "
                    "(distances 0 .. ceil(z + R) - 1) are enough."
                ),
            ),
            (
                math.ceil(mean + ramp),
                _(
                    "You used the mean span: every head shares the computation, so the longest "
                    "span decides."
                ),
            ),
            (
                math.ceil(float(spans.min()) + ramp),
                _("You used the shortest span: the longest head needs its keys too."),
            ),
            (
                math.ceil(z + 2 * ramp),
                _("The ramp counts once: the mask is 0 from distance z + R on."),
            ),
        ]
        if math.ceil(z) + math.ceil(ramp) != math.ceil(z + ramp):  # then it is one too many
            known.append(
                (
                    math.ceil(z) + math.ceil(ramp),
                    _(
                        "One too many: did you round z and R up separately? ceil(z) + ceil(R) can "
                        "exceed ceil(z + R) by one; round the sum once."
                    ),
                )
            )
        found = [words for value, words in known if value == got]
        message = several(found) if found else None
        raise Mistake(
            (
                message
                or _("For spans {spans} and ramp {ramp:g} you returned {got}.").format(
                    spans=spans.tolist(), ramp=ramp, got=got
                )
            )
            + _(" (spans {spans}, R = {ramp:g})").format(spans=spans.tolist(), ramp=ramp)
        )
    return _("Right: W = ceil(max_h z_h + R); one long head keeps the whole layer wide.")


# -- 3. mask the probabilities and renormalise ---------------------------------------------------------


def _weights_solution(scores, span, ramp):
    length = scores.size(-1)
    i = torch.arange(length)
    distance = (i[:, None] - i[None, :]).to(scores.dtype)  # query i, key j: i - j positions back
    mask = ((ramp + span - distance) / ramp).clamp(0, 1)
    probs = torch.softmax(scores.masked_fill(distance < 0, float("-inf")), dim=-1)  # causal softmax
    weights = probs * mask  # the mask multiplies the probabilities ...
    return weights / weights.sum(-1, keepdim=True)  # ... which are renormalised


def _causal_softmax(scores: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
    """The softmax of ``scores`` over the keys each query may see (``causal``: key j <= query i)."""
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)


def _renormalised(weights: torch.Tensor) -> torch.Tensor:
    """``weights`` divided by their row sums."""
    return weights / weights.sum(-1, keepdim=True)


def _reference_weights(scores, span, ramp):
    length = scores.size(-1)
    i = torch.arange(length)
    distance = (i[:, None] - i[None, :]).to(torch.float64)
    mask = soft_span_mask(distance, span, ramp) * (distance >= 0)
    probs = _causal_softmax(scores, distance >= 0)
    return _renormalised(probs * mask), probs, mask, distance


def _weights_mistakes(scores, span, ramp):
    expected, probs, mask, distance = _reference_weights(scores, span, ramp)
    causal = distance >= 0
    flipped = soft_span_mask(-distance, span, ramp)
    no_causal = torch.softmax(scores, -1) * soft_span_mask(distance, span, ramp)
    return {
        (
            _(
                "The weights are not renormalised: after multiplying the probabilities by the mask, "
                "divide each row by its sum."
            )
        ): (probs * mask),
        (
            _(
                "Every past key kept its full weight, so the span limits nothing: either the mask is "
                "not applied, or the distance has the wrong sign (j - i gives every past key mask "
                "1). For query i and key j the distance is i - j, and the weights are probs * m_z(i "
                "- j), renormalised."
            )
        ): _renormalised(probs * flipped),
        (
            _(
                "You put the mask on the scores (softmax(scores * m)): mask the probabilities, then "
                "renormalise."
            )
        ): _causal_softmax(scores * mask, causal),
        _(
            "You added the mask to the scores (softmax(scores + m)): the mask multiplies the "
            "probabilities."
        ): _causal_softmax(scores + mask, causal),
        _(
            "The future is not masked: query i may only see keys j <= i (take the softmax over "
            "the causal window)."
        ): _renormalised(no_causal),
        _(
            "You took the softmax twice: renormalise by dividing by the row sum, not with "
            "another softmax."
        ): _causal_softmax(probs * mask, causal),
        _(SOFTMAX_DIM): _over_queries(scores, span, ramp),
        # a wrong soft mask written inline: the diagnoses of the soft-mask exercise
        **{
            message: _renormalised(probs * wrong * causal)
            for message, wrong in _mask_mistakes(distance, span, ramp).items()
        },
    }


def _over_queries(scores, span, ramp):
    with softmax_over(-2):
        return _reference_weights(scores, span, ramp)[0]


@exercise(
    "adaptive-span/weights",
    title="Mask the probabilities and renormalise",
    hint=(
        """
            Compute the causal softmax first, multiply it by the soft mask of each key's
            distance, then renormalise each row.
        """,
        """
            1. distance[i, j] = i - j (how far back key j is from query i); keys with j > i are the future.
            2. probs = softmax over the keys of the scores, with the future set to -inf.
            3. weights = probs * m_z(distance), then divide each row by its sum.
        """,
    ),
    solution=_weights_solution,
    name="span_weights",
)
def _check_weights(fn) -> str:
    for seed, length, span, ramp in [(1, 10, 2.0, 2.0), (2, 7, 4.5, 3.0), (3, 13, 0.0, 1.5)]:
        scores = random_tensor(length, length, seed=seed)
        expected = _reference_weights(scores, span, ramp)[0]
        out = call(fn, scores.clone(), span, ramp)
        expect_tensor(
            out,
            (length, length),
            _("The weights for scores of shape ({length}, {length})").format(length=length),
        )
        if not matches(out, expected, atol=1e-6):
            raise Mistake(
                diagnose(
                    out,
                    _weights_mistakes(scores, span, ramp),
                    default=(
                        _(
                            "Your weights differ from m_z(i - j) p_ij / sum_j' m_z(i - j') p_ij', "
                            "with p the causal softmax of the scores (0 for j > i; span "
                            "z={span:g}, ramp R={ramp:g})."
                        ).format(span=span, ramp=ramp)
                    ),
                    atol=1e-6,
                )
            )
    return _(
        "Right: the mask multiplies the causal softmax probabilities, and each row is "
        "renormalised to sum to 1."
    )


# -- 4. predict: the scores a trimmed layer computes -----------------------------------------------

_CELLS = "UEBBWlNX"
_CELLS_MISTAKES = (
    "GlZNXlVdQVBJRUMtGxtDCBQEFkUEAhEcGk8dFxIBQR0AHUMAAhxTEggaEAEUVVUGGwBBGBUXBh1VERwIEQEACxBPGh"
    "wWRRYdGgoMGFUUHBdBFRgCQwcQExcWTVQHCxdPFwtTEQkRVAIMARIXABFBBwQPDU9dHxIdQQ5URUM9XFxRSUFWRV9R"
    "WUFCUV9BVi0BFk8THQECDgBUGgsKVQASCBFOVA9DBBALUw0AB1QPQwEaHF4fBAYbTg4OBhlTEBFUAAFDCxwBBwQPFx"
    "FOGU9eUiFJQQcbTjRPSFIQAAgYXFpTT15SQlNIVElOVllZUh0KFVRAXk1NWVJRVFBAQlZbTU9SUTEJFQBOChxVPlMd"
    "QSNUFkMHEBMXFltUEQ8AB1UDBgATDVQMDwAWGVMKB1RFWEMGBlIQCgwEFRwGC1UFGhEJVB0aEE8aBR1FUEJUBQYWBl"
    "IyKyVUAAYGTyJSXkVQVB8LGhxVEBYDDgYRTgobT1JCU0FfVDlDQlVDUw4EDQdOEwoHUhEJDhcfQEFDVVBAU1JBRkxZ"
    "T1cmGwQVVB0dQwAbF1MNBBUQVEMbHRdTFBQRBxoKABtSEhYKB1QIDB1VEx8JQUBUBgYOEQFTCgdUAAYGTxkTCgATWl"
    "ZCQ01EQkddVENCTFlPVyYbBBVUHR1DGx0XUwMUGBhOL08NUj9FBxsGTldPHRcSARJOVBoRBhgfGgsGVBcBDh8ABhYW"
    "QRsaAhpPIlJORVRCVAoKHAETHQYEB1QMAgweXFFJQVZBXFZcREBRX0FWIAYCG1UbAEUVHBFOAA4AARIJQQAGBwIBEh"
    "4WRQcbBk5XTx0XEgESTlQaEQYYHxoLBlQXAQ4fAAYWFkEbGgIaTwEaFkUFHQcaAgEWFwBFAxEYARRPIlJORVRCWkxP"
    "T1dDR1JVQUJMWU9XKxwQQQEHCwdPIlJORVRDVEYZT15SIUVKVEVHWU8BGhZFBR0HGgIBFhcARVFUWkBDOFVfU1RBAx"
    "0aC08iUk5FAhEdAksCFApTH0FfVDxKT0hSRlNBBwEIBQYWF11HTVRWX1dYQUdFS1FWTk5BNhoHUwYOGQQPEQoRUhYE"
    "AhxUDA8AFhlTCgdURVhDHgAXAQwEB1QZChsdUiRFXFRBWEMEEAsARQMREgERClUbBxZBGwMAQ15DSFMRCRFUBQYWBl"
    "IRAAcbBgtDGx0XUwcNGxcFQw4HF1MyQVlUX0NSVUdGRUkAHAtDCRwAABFBBQELERZVHRVFFRwRTgEDGhEYRQ0bGwUQ"
    "TxcTEA5BI1RDQ15VAhwWCAAdAQ0cVRMHRQwbBxpKQVdeU0dQR0NaVF1XSFNHOBsBTg8KEwZTChQAVBoLClUZFhwSVB"
    "YLBQAHF1MVDgcdGgoAG1JDRQgaVBoLClUUGhcSAFQMDwAWGQBLQSAcC0MDFAsWF0EXGwMTGgEXAEUEAhEcGk8XHhwG"
    "ClQbCENeQ1ICEAQGHQsQTxQeGg4EWFQPBA4cHAARQUVCTkhPIlJeRVBUSU5UXlUZFhxBBBsdChscHR0WW1QABgwcEF"
    "IRAAcbBgtDGx0XUxYVFQYaQwATUgcNBFQHCxIaEBwQAEEVBgtDHxQWFwwPE1hOEAwaABYBQRUaCkMbHRcdRQwVBwUG"
    "C1VaHwQYEQZAAAoZHgBFAhsBABccVQYbAAxdWE4QAFUXEgYJVBsIQxsdF1NWU1QWAgwMHgFTBg4HAB1DGx0XUxYAGR"
    "FAQRI="
)
_CELLS_SOLUTION = (
    "NRwRTg8AGxUWFhVUHAsCC1UBFhESVAAGBk8CGx0BDgNUAQVPARoWRRYcGwIGTxkTCgATTlQ5Q1JVERYMDVwZDxswHV"
    "IJOglUX04xRlVPUwYEHRhGV19VWVNUV11UU0NaQ3gXDBIAFQAACgZSW1VBWlpOVlpcXFM0FBEGBwYcVRUcRQgaVAwP"
    "ABYZAEUOElRfVU9dQUFFAxgbDQgcVRQcF0E4VFNDWkRAWl5BERUNC08XHhwGClQdHUMMGh8DBBMREE4UBgEaeQwVB1"
    "QBFAFVQ0VFChENHUMOGxZTEQkRVDlDQlVDU1hBQUFOAQoTHQEAQQAcCw5VVUVCRQoRDR1NZX8iFhdBHBEPB1VVQUFF"
    "GVRFWEMXVUVCRVxUR1hPXEBAUxYCGwYLEFRVFBwXQUBUBgYOEQFJRVBAQUJXX01SAwATVAcLEhoQHBAATVRFXU1WVV"
    "dTCgdUAAYGTwAcBxcIGRkLB2VBUgtFVEVGMFFPSFJCSVFATEJWWENcUyYJERcFWU8ZEwoAE1oXCw8DBlISAxURBk4M"
    "ARBSFQoTAxUcB08FEwAWQRsSTgJPXUNfRVRFRkJDC1xSGgsRAQBA"
)


@exercise(
    "adaptive-span/cells",
    title="Predict the scores a trimmed layer computes",
    hint=(
        """
            The whole layer uses one window, set by the longest span. Count what one query
            block compares with, then multiply by the number of blocks, the queries per
            block and the heads.
        """,
        """
            One window for the whole layer: W = ceil(max_h z_h + R). Queries go in blocks of 16; each block
            is compared with its own 16 keys and the W - 1 keys before them. Multiply by the number of
            blocks, the queries per block and the heads.
        """,
    ),
    solution=_CELLS_SOLUTION,
)
def _check_cells(answer) -> str:
    return check_number(
        answer,
        _CELLS,
        _CELLS_MISTAKES,
        what=_("number of scores"),
        right=(
            _(
                "Right: about 14 % of the untrimmed 4 x 512^2, and the longest head alone decides it."
            )
        ),
        otherwise=(
            _(
                "{value:,.0f} is not it. Find the layer's window W first, then count the keys each "
                "block of 16 queries is compared with."
            )
        ),
    )


# -- 5. find the bug: the sources' distance ---------------------------------------------------------

_BUG = "Vw=="
_BUG_MISTAKES = (
    "GlZHTFlPVz4aCwRUR04KHFUAGgIJAE5OFwcQUh0QDBYRHEMAE1IDChIdAAcMAQZcUUlBVkBMWU9XPhoLBFRATgocVQ"
    "AaAgkATk4KTxwcFwAZEQdOFwcQUgIQBAYdCxBPXQAcEhJdWkxPT1dHUV9BVjgHDQpVR1MMElQGBwQHAUhTD0EdGgoG"
    "FxABUxEJEVQFBhYGUlsGDhgBAw0cXFxRSUFWQ0xZT1c+GgsEVENOChxVABoCCQBOThcHEFIACgcAVAMCHB5SHjobXA"
    "xHQ1JVER8EDARcRjFPXlIJRUxUDEdDQFUgX0VRWFRfSkFXXlNHWVZOTkEjHBwWRVlUHR1DHRwVGxFbVAAGBk8WEwYW"
    "ABhUHQwJAR8SHUEbEk4XBxBSAAYOBhEdT08BGhZFBwEAGxEKVR8SFgoREE4UBgEaU0gIGhJAQUNVUEpHW1RWIgoBEF"
    "JKRQgHVBwKCB0GSUUVHBFOEw4FFwFFDAEYGgofGRsWFkEAHAtDHwcdEQQDHRgHFwYQAVNNDxsAThcHEFIABg4GER1K"
    "TxcLUxEJEVQDAhweXFFJQVZFXkFVVVA/DA8RVF9TTxwBUxcIExwaWU8BGhZFDBUHBQYLVQIBCgMVFgcPBgEbFhZBFQ"
    "YLQx0QHBwXDBUYBxAKEVIHCkEHAQNDGxpSQktDCQ=="
)
_BUG_SOLUTION = (
    "LR0aC0NZW1InDQRUEAcQGxQcEABBGxJOCAoMUhlFBwYbA0MeABcBHEEdVAcQTx0dBEUHFQZOIS42OVMRCRFUBQYWVR"
    "sAX0EMVFNDBlVfUw9BXEROBQAHUgcNBFQFGwYdDFUAbw4DGk4TAAYbBwwOGlhOEwAGGwcMFxFUCAwdVQYbAEEEFR0X"
    "RltSJAwVHFQKChwBEx0GBFRJTglPWFIaRQQCERwaTwUTABFBHxEXQwcUAVMEQRoRCQIbHAQWRQUdBxoCARYXX28SG1"
    "RGMU9eUglFTFQMR0NAVSBTW0FFVA8NC1UGGwBBFxgPDh9VFRoTBAdUBxdPGBMADkFFTk4XBxBSABUAGlQCCgIcBgBF"
    "DxsABgoBElIaC0EAHAtDHxQBB0lBFRoKQwAbHgpvBwEAGxEKVRkWHBJUXA8PHRATFxxBBhEDDBkQFlMHGFQABgZPFh"
    "MGFgAYVB0MCQEfEh1IVBUcBk8HEx4VBBBaTiobVRsARRUcEU4QAAAAEAASU1QIAhoZBl1va1RUTkMLHAEHBA8XEU5e"
    "TxxSXkUL"
)


@exercise(
    "adaptive-span/find-the-bug",
    title="Find the bug in an adaptive-span head",
    hint=(
        """
            Run its lines 3 to 7 for a small L with a small span and ramp, and print mask.
            Which keys get a mask below 1, and which should?
        """,
        """
            Run its lines 3 to 7 for a small L, say 6, with span 1 and ramp 1, and print mask. Which
            keys get a mask below 1? They should be the far PAST keys.
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
                "Right: the distance is i - j, query minus key; with j - i the past always gets mask "
                "1."
            )
        ),
        otherwise=(
            _(
                "Line {value:g} is not a line that computes: those are lines 3 to 10 (line 1 is "
                "the signature, line 2 the docstring). Give the number of the wrong line."
            )
        ),
    )
