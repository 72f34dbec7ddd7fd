"""Chapter 7 exercises: the online softmax update, the FLOPs of a multi-head layer, the scores a
causal tiled attention computes, a bug in a blocked softmax, and a FLOP count measured."""

from __future__ import annotations

import torch

from ..efficient import online_softmax_update, tiled_attention
from ._core import (
    Mistake,
    call,
    check_line_number,
    check_number,
    diagnose,
    exercise,
    expect_tuple,
    matches,
    named,
    random_tensor,
)
from ._i18n import _

# -- 1. the online softmax update for one new block -----------------------------------------


def _online_update_solution(running_max, running_sum, acc, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))  # (L,)
    correction = torch.exp(running_max - new_max)  # exp(-inf) = 0 before the first block
    weights = torch.exp(scores - new_max[:, None])  # (L, B_c), shifted by the NEW max
    new_sum = running_sum * correction + weights.sum(dim=-1)
    new_acc = acc * correction[:, None] + weights @ value
    return new_max, new_sum, new_acc


def _update_mistakes(running_max, running_sum, acc, scores, value):
    """The final (max, sum, acc) of the usual mistakes, as message -> triple."""
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    correction = torch.exp(running_max - new_max)
    w_new = torch.exp(scores - new_max[:, None])
    w_old = torch.exp(scores - running_max[:, None])
    return {
        (
            _(
                "The running sum is not rescaled: multiply the old sum by exp(old_max - new_max) "
                "before adding the new block."
            )
        ): (
            new_max,
            running_sum + w_new.sum(-1),
            acc * correction[:, None] + w_new @ value,
        ),
        _(
            "The accumulated values are not rescaled: multiply acc by exp(old_max - new_max) "
            "too, like the sum."
        ): (
            new_max,
            running_sum * correction + w_new.sum(-1),
            acc + w_new @ value,
        ),
        (
            _(
                "Neither the sum nor acc is rescaled: what was summed against the old max must be "
                "multiplied by exp(old_max - new_max)."
            )
        ): (
            new_max,
            running_sum + w_new.sum(-1),
            acc + w_new @ value,
        ),
        (
            _(
                "You exponentiated the new scores with the OLD maximum: update the running max "
                "first, then compute exp(scores - new_max)."
            )
        ): (
            new_max,
            running_sum * correction + w_old.sum(-1),
            acc * correction[:, None] + w_old @ value,
        ),
        _(
            "The correction factor is inverted: it is exp(old_max - new_max) (at most 1), not "
            "exp(new_max - old_max)."
        ): (
            new_max,
            running_sum / correction + w_new.sum(-1),
            acc / correction[:, None] + w_new @ value,
        ),
        (
            _(
                "The running max is the max of the new block only: it must be the max over every "
                "block so far, max(old_max, block max)."
            )
        ): (
            scores.amax(-1),
            running_sum * torch.exp(running_max - scores.amax(-1))
            + torch.exp(scores - scores.amax(-1)[:, None]).sum(-1),
            acc * torch.exp(running_max - scores.amax(-1))[:, None]
            + torch.exp(scores - scores.amax(-1)[:, None]) @ value,
        ),
    }


def _triple(fn, *args):
    return expect_tuple(
        call(fn, *args),
        3,
        _("Return three tensors (new_max, new_sum, new_acc); got {type_name}."),
        of=torch.Tensor,
    )


@exercise(
    "complexity/online-softmax",
    title="The online softmax update for one new block",
    hint=(
        """
            The new block may raise the running maximum. Everything summed so far was
            computed against the old maximum: by what factor must it be rescaled so that
            it is measured against the new one?
        """,
        """
            1. new_max = the larger of the old running max and the largest score of the new block (per query).
            2. correction = exp(old_max - new_max): what was summed against the old max shrinks by this factor.
            3. weights = exp(scores - new_max) for the new block, using the NEW max.
            4. new_sum = old_sum * correction + weights summed over the block;
               new_acc = acc * correction[:, None] + weights @ value.
            Before the first block old_max is -inf, and exp(-inf - new_max) = 0 makes the empty sums vanish.
        """,
    ),
    solution=_online_update_solution,
    name="update",
    forbids=(online_softmax_update, tiled_attention),
)
def _check_online_update(fn) -> str:
    L, B, d_v = 4, 5, 3
    # one step from a state built from an earlier block, with a new block of larger scores
    first, values_first = random_tensor(L, B, seed=1), random_tensor(B, d_v, seed=2)
    state = _online_update_solution(
        torch.full((L,), float("-inf"), dtype=torch.float64),
        torch.zeros(L, dtype=torch.float64),
        torch.zeros(L, d_v, dtype=torch.float64),
        first,
        values_first,
    )
    # rows 0 and 2 of the new block raise the maximum, rows 1 and 3 do not
    scores, value = (
        random_tensor(L, B, seed=3)
        + torch.tensor([[3.0], [-3.0], [3.0], [-3.0]], dtype=torch.float64),
        random_tensor(B, d_v, seed=4),
    )
    got = _triple(fn, *[t.clone() for t in state], scores.clone(), value.clone())
    expected = _online_update_solution(*state, scores, value)
    names = ("new_max", "new_sum", "new_acc")
    for name, g, e in zip(names, got, expected):
        if tuple(g.shape) != tuple(e.shape):
            raise Mistake(
                _("{name} should have shape {e_shape}, got {g_shape}.").format(
                    name=name, e_shape=tuple(e.shape), g_shape=tuple(g.shape)
                )
            )
    if not all(matches(g, e) for g, e in zip(got, expected)):
        for message, wrong in _update_mistakes(*state, scores, value).items():
            if all(matches(g, w, equal_nan=True) for g, w in zip(got, wrong)):
                raise Mistake(named(message))
        wrong_part = [n for n, g, e in zip(names, got, expected) if not matches(g, e)]
        raise Mistake(
            _(
                "After one update from a running state, {value} differ from the exact update."
            ).format(value=", ".join(wrong_part))
        )

    # fold a whole row of scores block by block, starting from the empty state: acc / sum must be softmax @ V
    # large scores: exp of them overflows float64 (past about 709) unless the max is subtracted
    scores, value = 30.0 * random_tensor(3, 23, seed=5) + 1000.0, random_tensor(23, 2, seed=6)
    state = (
        torch.full((3,), float("-inf"), dtype=torch.float64),
        torch.zeros(3, dtype=torch.float64),
        torch.zeros(3, 2, dtype=torch.float64),
    )
    for start in range(0, 23, 6):
        state = _triple(fn, *state, scores[:, start : start + 6], value[start : start + 6])
    out = state[2] / state[1][:, None]
    reference = torch.softmax(scores, dim=-1) @ value
    if not matches(out, reference):
        if not bool(torch.isfinite(out).all()):
            raise Mistake(
                _(
                    "Folding blocks from the empty state (max = -inf, sum = 0) gives inf or NaN: "
                    "subtract the max before exponentiating, and make sure exp(old_max - new_max) = 0 "
                    "when old_max is -inf."
                )
            )
        raise Mistake(
            diagnose(
                out,
                {},
                default=(
                    _(
                        "One update is right but folding 4 blocks from the empty state is not "
                        "softmax(scores) @ value."
                    )
                ),
            )
        )
    return _(
        "Right: folding the blocks one by one gives exactly softmax(scores) @ value, without "
        "ever holding a whole row."
    )


# -- 2. the FLOPs of a multi-head layer -------------------------------------------------------

_FLOPS = "WURBXVNZRkRLVQ=="
_FLOPS_MISTAKES = (
    "GlZCWlddQUdDXFVAVlRDTSwdBkUCGwEAFwoRUhwLDQ1UAQ0KVR0VRRUcEU4XGBpSEhEVERoaCgAbUgMXDhABDRccT1"
    "IiRSoqIE4CARFSI0U3VBEPAAdVERwWFVRGTklPOSxBRUtUEEBBQ1VQQFdTRUZcVltCQFFfQVYgBgIbVRsARRUcEU4X"
    "GBpSEhEVERoaCgAbUgMXDhABDRccVRMfCg8RTk4CCxFSBw0EVBIBFh1VAgEKCxEXGgoAGwFTMj8lWE40MT5eUzI/Il"
    "QPDQtVJS0qTVQRDwAHVUBTT0E4VERDCytAXUdNVFZaW1xESkBdU0RMTFlPVyYbBBVUHR1DGx0XUwMOAQZOEx0aGBYG"
    "FR0bABBPFB4cCwROVA8HC1UGGwBBFQAaBgEBGxwLQQQGAQcaFgYASUElVCU9O1UTHQFBJFQ4T08QExANQUZUREMHVV"
    "hTKT9GVERDCyoZU1hBRlREQyMrQFNPQRBaTksiEBMAEBMREE4UBgEaUyMNGwQtDBobBhYXLBsQC0MAG1IdC085AQIX"
    "Bh0XEgEgAAALDRscHR1NT1paQkMBEBcXOhYRHQkLGwZPNQQNBxFHT08BGhoWQR0HThQHFAZTEQkRVA0MGhsGFhdBBx"
    "ELEE8aHFMEQTckO1lPARoWRQcBBwsHTxQGBwAPAB0BDU8eFwELBBhUBxdPFhMfCRJUAAYGHRBSGhZBGhsaQwwaBx0R"
    "BBBaTiAAABwHRRUcEU4XGBpSAxcOEAENFxxVCxwQEwcRAgVDVR0BRQwRFR0WHRBSBAwVHFQABgoRLQQACBMcGhBSIQ"
    "AGAE9dVkJDTUFCQVNUR0VWV19XSFNHOBsBTgAAABwHAAVUFU4OGhkGGhUNDVkPBwtVEwBFDhoRTgwfEAASEQgbGlRD"
    "DlU0PyoxVBcBFgEBUhAKFBoAHUMbHRdTCBQYAAcTAxwREhEIGxpOAgERUgcNBFQVCgcGARscC01UBwFDChQRG0UMAR"
    "gaCh8ZC14EBRBUBxBPR1xRSUFWQlZXWkRCR1RTTFZUQ00sHQZFBxsGCQwbVQYbAEEbARoTGgFSAxcOHhENFwYaHFMy"
    "PztOThcHEAAWRQAGEU4FAAAAUxUTGx4LABscHR0WTVQaARdPARoBAARaVkJDTUFBR11XQUBdW1hHUElFQy0bG0MIFA"
    "QWRQQCERwaTx0XEgFBABwLQwkAHh9FFh0QGgtPEUhTAAAXHE4LChQWUxIOBh8dQwAbUhc6ClRJTgdAHVJORVdAVAgG"
    "DgEHAQASWFQdDE8BGhZFCVQcCwILBlIHCgYRAAYGHVURHBYVVBUdQwIAERtFAAdUAQ0KVRoWBAVUGwhDGBwWBw1BEF"
    "pMT09XR0JVUUZDXVVZQVBJRUMtGxtDDBoHHREEEFQBDQpVGhYEBVQbAA8WT1IHDQQGEU4CHRBSG0VcVEVcQwcQExcW"
    "QRsSThQGEQYbRQUrH05eTxFdG0tDWFRMW19DR0VRV0FNXEFVVVAqChRUFwEWAQEXF0UVHBFOEAATBh4EGVRcX0MpOT"
    "0jRRERBk4QDBoAFklBRUZCVldHXkpUU1QdAEMOGR5aX0EAHAtDCg0XAQYIBxFOAAAAHAcWQQAcC0MCFAYBDBlUBBwM"
    "CwARBxZBGxoCGk9dBhsAQQQGAQkKFgYaCg8HVA8NC1UGGwBBAAMBQw4BBhYLFR0bAEMfBx0XEAIAB0dNTVlSUV1RQ0"
    "xcUVZAQkdHW1RWNwwaVREcEA8AEQpDGx0XUxYOEgADAhdVWkFFJzg7PhBPBRcBRRIXGxwGQ1VARklQQkFCW11BUhoL"
    "QRUYAkpVVQYbAEERDAsRDBwBFkUCGwEAFxxVBhsAQRkVGhEGDVIDFw4QAQ0XHFUdHQkYVFwaCwpVAgEKCxEXGgoAGw"
    "FTBA8QVBoLClUGBApBFQAaBgEBGxwLQQQGAQcaFgYATE9WWE5BV0VLQ11QRkBfVU1PUlE8DgFUDQwaGwYWAUEAHAtD"
    "HBoUBwgADFRGUE8zPjw1ElQECxFPBhEcFwRYVF1UQ0JGS0lWR0JOCgFVEx8JSE5UGgsKVRcLABMXHR0GTxYdBgsVB1"
    "QaCwpVHxIREx0MThMdGhYGBhUHVAENAwxSWxEJEVQeEQAfFxARCBsaHUMOGxZTEQkRVBoUAFUTBxEEGgAHDAFVAgEK"
    "BQEXGhBGW1BfRUNMRV5QXExHQFdZVk5OQTYaB1MGDgEaGgYLVQYbAEEHGwgXAhQKU01VVDIiLD8GUgMAE1QHDQwdEF"
    "5TUFFYR11SQ0NGS0UIGlQPDwNcSFMRCRFUCxsKBxEaFgRUFwEWAQEBUxEJEVQDAhsHGwtFEQYbChYMAQFTCg8YDU5L"
    "Gx0XUxUTGx4LABscHR0WQRUaCkMbHRdTERYbVA8XGxAcBwwOGlQeEQARBxAREl1aTE9PV0pCVFRNQ1ZRW0VQSUVDLR"
    "sbQwwaBx0RBBBUGgsKVQEcAxUZFRZDR0BSNSkuJAdOEwoHUgAGDgYRQkNZR15KVFVYQVhTTxwcUwQNGF1UQxsdF1MA"
    "GREGDQocEFIQChQaAB1DGx0XUwgAAAYHG08FABwBFBcAHUMAGx4KRUkAHAtDHwcdGQACAB0BDRxVEx0BQQAcC0MbAh"
    "1TBBUAEQAXBhocUxUTGxAbABsGW11HTVRWVlNaQ0BDXFVETExZT1crHBBBFxsbDRsQFlMRCRFUDAoOBhcARQ4SVBoL"
    "ClUUHBATVAQcDAUQEQcMDhoHTksAGxdTBAUQHRoKABtSAwATVBsbFx8ABl9FVVQ4TgdPSFJASVBAQUJUXU1SGgtBFR"
    "gCSlVVBhsAQQUBCxAbHB0dRQ0RFRgGHFUGGwAMVBsbF0NVERwQDwAdAARPARoWRQwVABwKF1UCAQoFARcaEE8aHB8c"
    "T1YJ"
)
_FLOPS_SOLUTION = (
    "MREGTgEOAREbRQQaABwaQ1UFGhEJVDhOXk8mUk5FUERGWk9PEVJORVZCTEJDB1VPU1RTWFQGBg4RUgQMBQAcTgcwHlJORQVbHE5e"
    "T0NGSW9rXlQ+EQAfFxARCBsaHVlPEx0GF0EZFRoRBhYXAEUFVAxOB09dJS00TVQjMChDVSUtM01UIzAsRllSFgQCHFQPEx8ZGxYB"
    "QQAbTi9PBx0EFlt+VE5XT19SQUVLVDhOSU8RLEFFXFRATklPR1JZRVBERlpDRVVFRV0/RlRTQ1tZSkBUTUxHVk9dRUpdb0tUNRoX"
    "ChsGGgoPTlQeBh1VGhYEBVhUP0MkKyZTBg4HAB1DXVVYUylBXlQiQ0VVFiwOQRUaCkM/VSRTBg4HAB1DXVVYUylBXlQiQ0VVFiwO"
    "WlQSARFPHVIbAAAQB2RDTwEaEhFBHQdOUU9fUkFFS1Q4MFFPX1IbRUtUEDEIT0hSR0VLVDgwUU9fUhdFXFRHQlFdRF5BV1RYQFlR"
    "QX9YUzEOABUCWU9NXkNQUlhEWFBDQ0pDRSc4Oz4QQ1UTEQoUAFRWTV5VNTUpLiRURhAAEwYeBBlUFQAHTxcbEhYEB1QADBtVERwQ"
    "DwARCkpBf3gnDQRUBBwMBRARBwwOGgdOBB0aBVMJCB8RTi9PESxBSUEAHAtDDgEGFgsVHRsAQwMcGRZFLSpGTgdVVRMHEQQaAAcM"
    "AVUWHAgIGhUaBhxVHR0GBFQ4Tl1PRxZdbykRBgtDI1VPU1RRRkBOX09HFlNYQUVBXVVDVQEcRRUcEU4THRoYFgYVHRsAEE8UABZF"
    "FRwRTg8OBxUWF0EEFRwXT11EQ0BIWg=="
)


@exercise(
    "complexity/multihead-flops",
    title="The FLOPs of a multi-head attention layer",
    hint=(
        """
            Count the matrix products of the layer, the projections and the attention
            products of each head, at 2 FLOPs per multiply-add.
        """,
        """
            Count the matrix products, 2 FLOPs per multiply-add (an (m x k) @ (k x n) product costs 2 m k n).
            The layer has four projections d x d applied to L rows each (W^Q, W^K, W^V and W^O), and per
            head two attention products of width d_k = d / h: Q K^T and P V. Check with
            attncourse.benchmarks.measure.multihead_flops, or with torch.utils.flop_counter.FlopCounterMode.
        """,
    ),
    solution=_FLOPS_SOLUTION,
)
def _check_flops(answer) -> str:
    return check_number(
        answer,
        _FLOPS,
        _FLOPS_MISTAKES,
        what=_("FLOP count"),
        # exact, as FlopCounterMode counts: biases counted (+0.04 %) are a mistake, and
        # 8.1e9 or 8.053e9 are told they are the count rounded
        mistake_rel_tol=1e-4,  # softmax counted: +0.16 %; biases: +0.04 %
        right=(
            _(
                "Right: the projections (8 L d^2) are 60 % of it here, the attention products (4 L^2 "
                "d) 40 %: L < 2d."
            )
        ),
        otherwise=(
            _(
                "{value:.4g} is not it. Count the four projections and the two attention products, 2 "
                "FLOPs per multiply-add."
            )
        ),
    )


# -- 3. predict: the scores a causal tiled attention computes --------------------------------------

_CELLS = "WU1FXFtWQw=="
_CELLS_MISTAKES = (
    "GlZFWFRYQkBCU0NOVEw3BxQGUwwSVBEYBh0MUgAGDgYRQkMjK0BJRRYdAAZDDBQHAAQNSSAcFgpVBhoJBBArDxcbEBwHDA4aVB0I"
    "BgUBUxEJEVQFBhZVEB8KAh8HTgYBARsBAA0NVAcNTxRSAhAEBg1OAQMaERhCElQSGxcaBxddR01UVlZQVkVERlNDTlRMNwcUBlMM"
    "ElQABgZPEAoSBhVUFw8WHBQeUxETHRUABAMQXlMpQVw4TkhPRFtTSkFGTk4XBxBSBwwNEQdOFwcUBlMGExsHHUMbHRdTAQgVEwEN"
    "DhlSEhcEVBcBDh8ABhYBQR0aTgUaGR5fRRUcEQBDAhQBGAAFWlZCQ01NQUtdV0RMTFlPVyYbBBVUHR1DBxQeFUUOElQiPV1PUgcN"
    "BFQABw8KBlIHDQAAVA0RAAYBUxEJEVQKCg4SHR0EDVQVHAZPFh0eFRQAEQpDBhtSFRANGFhOEABVGwdFCAdUAwwdEFIHDQAaVAYC"
    "AxNcUUlBVkVeV1dARUVVQ05UTDoAAFIQCgwEARoGC1VGQ0UHARgCQxscHhYWQRsSTlFaQ1ILRVBERlpZTwEaFkUNFQcaQwQQC1MR"
    "CBgRTgwJVRNTFBQRBhdDDRkdEA5BBwABExxVEwdFFRwVGkMNGR0QDkYHVAICHAFSAhAEBg1CQxwaUhoRQR0HTgAaAVIADQ4GAEBB"
    "Q1VQRFRSREdfVVdXSFNHNRwVGkMGBlISCQ1UTE4LChQWAF9BABwLQx4AFwARCBsaTgIcHgFTAw4GVBoLClUBEAoTEQdODAlVHR0A"
    "QRwRDwdBV15TR1VEVlRDTSEaEhFBHQdOFwcQUh0QDBYRHEMAE1IHDA0RB04XBxBSAAYJERAbDwpVBBoWCAAHTksfBxsdEQQQVAcN"
    "TwEaFkUCHBUeFwoHW19FDxsATgwJVQEQChMRB1RDDhEWUxARVAAGBk8GERwXBAdUBw0cHBYWRRUcEQNPTwEaFkUNFQcaQxscHhZF"
    "DhJUCwIMHVICEAQGDU4BAxoRGEUCAQBOEAcaAAdFAABUBxccVR4SFhVUBRsGHQxcURg="
)
_CELLS_SOLUTION = (
    "MAERHBpPFx4cBgpUHU5LBlVPU1VPWkVbSk8dHR8BElQABgZPBAcWFwgRB05RWkNSGkVPWlRcVllVG1NOQUZBW01PIhsHDUEXFRsQ"
    "DhlPJxcUEVQHF08GFxYWawAcC0MEEAsARVFUWkBDXUBEU00IVF9OUkZVX1NUQRUaCkMBGlIVEBMAHAsRT10HA0UVG1QaCwpVEB8K"
    "Ah9THUMDFAEHRRABERwaRk9SFhMEBg1ODw4BFwFFChENTgocVRsdbxUcEU4FGgEHAQBBGxJOBhkQAApFEAERHBpPGhRTEQkRVAwP"
    "ABYZXUUoAAdOFwYZFwBFAAYRTlJfR0ZTDgQNB04UBhEXUwAZFxEeF08BGhZFDRUHGkMAGxdfRRYcHQ0LTxwBeQYUAFQPF08BGhZF"
    "AxgbDQhIBlIfBBIAVB8WCgcLX0USG1QfFgoHC1MHDRsXBUMGVREcCBEBAAsQT0dHRUUZVEZbVU9dG1NOQUVdThAMGgAWFk9+fj0W"
    "AlUdBQATVB1UQ11ARFNPQUZBWENFVVpCRUpURk5IT1tcXUVKVEVYSk9IUkVQTUFHWENFVUNAU0FJVFZPVkRAX11YQlQdAAAHFwBF"
    "EREGTgsKFBZfRVRHWl9DSlUdFW8tKkZOXk9ERF9SVkNYXFJZVVoHDQRUERYCDAFSEAQUBxUCQxsHGxILBhgRTgocVUpfVlhEWFhW"
    "WU9SBw0EVBAHAggaHBIJQUZBWEMXVUBGU0EHBRsCHRABUwQTEX4NDAIFBwcABVQdAEMJAB4fSUEAHAsNTxgTAA4EEF1AQyYbUgcM"
    "DREHVENbRVJbFBQRBhdDDRkdEA5NVB8LGk8XHhwGCl1UHgIGBwFTCgdUAAYGT0NGXQ=="
)


@exercise(
    "complexity/causal-cells",
    title="Predict the scores a causal tiled attention computes",
    hint=(
        """
            With causal=True, a query block needs no key after its last query. Count the
            scores each query block computes, then add over the blocks.
        """,
        """
            tiled_attention walks over query blocks of 256. With causal=True, query block i (queries
            256 i .. 256 i + 255) needs no key after its last query: its key range stops at 256 (i + 1),
            and its last key tile is cut there. Count the scores of each query block, then sum over the
            16 blocks. The tiles that cross the diagonal are computed in full, then masked.
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
        rel_tol=1e-9,  # a count computed through floats is still the count
        right=(
            _(
                "Right: 53 % of L^2, a little more than the causal half, because the diagonal "
                "squares are computed in full."
            )
        ),
        otherwise=(
            _(
                "{value:,.10g} is not it. Count query block by query block: which keys can its "
                "queries see at most?"
            )
        ),
    )


# -- 4. find the bug: a blocked softmax ------------------------------------------------------------

_BUG = "UEc="
_BUG_MISTAKES = (
    "GlZHTFlPVz4aCwRUR04KHFUAGgIJAE5OUkAGAwERSRBdTgocVQYbAEEBBxsCA1UBEAQNEVpMT09XRlFfQVY4Bw0KVUZTDBJUBgcEBwFIUxEJEV"
    "QcFgEbGx0CQRkVFgoCAB9TFhUVBhoQTxQGU0gIGhJCQxwaUgcNAABUCxsfXR9TSEEZKwAGGFxSTkVRVBYLBQAHF1MRCRFUCAodBgZTBw0bFwVN"
    "TVlSUVBDTlRMLwYbF1NQQR0HThEGEhoHX0EAHAtDHQAcHQwPE1QdFgJVAQcEEwAHTgIbVUJdR01UVlhBVVVQPwwPEVRYQwYGUgEMBhwAVEMbHR"
    "dTFxQaGgcNCFUFFgwGHAALB08GBx5FEgAVHBccVRMHRVFYVAENClUAHBJBGxJOFAYRBhtFBSsCThMKB1ICEAQGDUBBQ1VQS0dbVFYiCgEQUktF"
    "CAdUHAoIHQZJRQ4aEU4XBhkXUwoHVAcNAgMQFlMWAhsGCxBDVQMGABMdER1DDQxSBw0EVB8LGhxVHRVFFRwdHUMNGR0QDk9WWE5BVldIU0ctHR"
    "oLQ1ZVGwBFEx0TBhdVVQYbAEEaERlDAhQKGggUGVQHEE8BGhZFDRUGCQYdVR0VRRUcEU4MAxFSHAsEVBUAB08BGhZFAxgbDQhIBlIfBBMTER0X"
    "TwYRHBcEWlZCQ01EQlFfQVY4Bw0KVUNDRQgHVBwKCB0GSUUVHBFODQoCUhEJDhcfTgocVRcLFQ4aEQAXBhQGFgFBFRMPCgEGBlMRCRFUICY4VR"
    "8SHQgZAQNNTVlSUVRQVk5OQSMcHBZFUEVUBxBPBxsUDRVOVA1DUlUXCxVJGVRDQwIqHBYSSFQdHUMOAVIeChIAVF9PTxQcF0VRVBYLBQAHF1MR"
    "CRFUCAodBgZTBw0bFwVNTVlSUVRTVk5OQSMcHBZFUEZUBxBPBxsUDRVOVBoLClUdHwFBBwEDQwYGUgEAEhcVAgYLVRAKRQJUFgsFAAcXUxEJEV"
    "QABhhVEB8KAh9UBxBPFBYXAAVaVkJDTURGUV9BVjgHDQpVQ0dFCAdUHAoIHQZJRRUcEU4RGhscGgsGVBkPGwYYBx5FDBsCCxBPAR1TEQkRVAAG"
    "GFUdHQBBFRIaBh1VBhsAQQEECgIbEFxRSUFWRVtBVVVQPwwPEVRfVk8cAVMXCBMcGllPARoWRQ8bBgMCAxwBEhEIGxpOCw4FAhYLElQbAAAKWV"
    "ISEUEAHAtDChsWXUdNVFZZQVVVUD8MDxFUWUMGBlIBDAYcAFRDGx0XUwkOGwROFQYGGwcWQQAcC0MEEAtTBw0bFwUQTxwcUwoTEBEcT08XHhwG"
    "ClQXAQ8aGBwARQAAVA9DGxwfFktDCQ=="
)
_BUG_SOLUTION = (
    "LR0aC0NeRlxTIBcRBhcXBxwcFEUAFxcbDhoZEwcABVQdAEMOFhFTFg5UEg8RTwITAEUWER0JCxsQFlMHGFQRFhNHBl"
    "JeRQxdVBkKGx1SBw0EVDsiJ08YEwsMDAEZVWkbHRdTCwQDVAwPABYZVBZBAxEHBAcBAVMQEhFUAzwBEAVdRS0dGgtD"
    "XkdSAQASFxUCBhxVBhsAQQcBA0MDVRAKRQJUSU4GFwVaHkVMVBkxDQoCW19FAwEATg8GGxdTVFJ+FQoHHFUGHEUAFx"
    "dOFAYBGhwQFVQGCxAMFB4aCwZUHRpPTwYdUxEJEVQBFhsFBwdFDB0MCxBPAQUcRRIcHQgXHFtSJA0EGhEYBh1VE1MJ"
    "AAARHEMNGR0QDkEGFQcQCgZSEm8TGwNJEE8YEwsMDAEZQkMbHRdTAAAGGAcGHVUEEgkUEQdOAh0QUhwTBAZZGQYGEh"
    "oHAAVUFhdDCg0CWwg+GhEZQ0JVH1pLa35UTkNPFBEQRVxUFzVNQVteUysOGhEzQ0VVExAGQV9UHkMvVQQoS09aWE4J"
    "VR9SWEUDGBsNCENVSC5vayYBAEMNGgYbRQATFQcNHAFSBwoTFxxAEAATBh4EGVwFTiNPHlwHFwAaBx4MHBBaXldNVF"
    "lfSk9fUgAGABgRQkNCRFtTJUECTk4UBgEaUwoPEVQMDwAWGVNNAxgbDQhPS09TNkh+AAYGTxcHFEUIB1QHDRkcARoH"
    "DRFYThAGGxEWRQJUHR1DX1UdHUUVHBFODAEZC1MWFREEVUMYHAYbRRIRAgsRDhlSEQkOFx8dQw4bFlMEQRkVFgoCAB"
    "9TEQkVAE4OAAMXAElrABwLQwAABgMQFQdUCgoJExcBSw=="
)


@exercise(
    "complexity/find-the-bug",
    title="Find the bug in a blocked softmax",
    hint=(
        """
            Compare the function with plain attention, first with one block, then with
            several. A bug that shows only with several blocks is in what carries over
            from block to block.
        """,
        """
            Run the function against torch.softmax(q @ k.transpose(-2, -1) * scale, -1) @ v, first with one
            block (block >= S), then with several. Which running quantity is weighted with the old
            maximum and never brought to the new one?
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
                "Right: acc must be rescaled by c like the sum l; otherwise earlier blocks keep the "
                "old shift."
            )
        ),
        otherwise=(
            _(
                "Line {value:g} is not a line that computes: those are lines 3 to 15 (line 1 is "
                "the signature, line 2 the docstring). Give the number of the wrong line."
            )
        ),
    )


# -- 5. experiment: the FLOPs that causal tiling saves ----------------------------------------------

_RATIO = "UVpBWFFa"
_RATIO_MISTAKES = (
    "GlZEQFZNT1JRVU9BVAcQTwEaFkUIEBEPD08dEx8DQVwABgZPEAoSBhVUFw8WHBQeUxETHRUABAMQUgQKFBgQTgEKVUJdUFFERlpX"
    "QVtcWl9BGREPEBoHF1MMFU9UGgsKVQYaCQQHVBoLDgFSEBcOBwdOFwcQUhcMABMbAAIDVRMBAEEXGwMTGgEXF0UIGlQIFgMZXFFJ"
    "QVZFQFNNT1JRJEEGFRoKAFUdFUVQTlQKCgtVCxwQQRcbGw0bVQYbAEEaFQcVClUBEAQNERAxBwABLQMXDhABDRcwFAYHAA8AHQEN"
    "TwIbBw1BFVQNAhoGEx9FDBUHBVxPPAZTBg4ZBBsXCgZSFhMEBg1OEAwaABZFABoQThcHEBxTCAAHHx1YTwEbHwAFKxUaFwobBhoK"
    "D1wXDxYcFB5OMRMBEUdDHB4bAxZBABwLQwkABgYXBFQfCxpPFx4cBgoHWkxPT1dDXVJWQ0NZVFhCRURSVkNDWVRNT1JRPA4BVAoK"
    "GRwWFgFBABwLQwEaHF4GAAEHDw9PFh0GCxVUFhdDGx0XUwYAAQcPD08aHBZfQQAcC0MeABcAEQgbGk4CHB4BUwYAAQcPD09aUh0K"
    "D1kXDxYcFB5dR01UVltVQUdHUV9BViAGAhtVGwBFAFQECxEMEBwHBAYRTk4EBgMXUxEJEVQcAhscHVMGAAEHDw9PWlIdCg9ZFw8W"
    "HBQeUwQSVBVODRoYEBYXQRYRGhQKEBxTVUEVGgpDXltQX0VDRFpaUFhAUElFQyAcDxdPHAFTEQkRVB0LDgcXUwoHVAAGBk8GERwX"
    "BAdUGgsOAVIQBBQHFQJeOwcHFkUSFQILEE9dQ1NIQRcVGxAOGVJcRQ8bGkMADgABEglITlQaCwpVAwYAEgAdAQ1PFAEYFkESGxxD"
    "DBQHAAQNVFtODQAbXxAEFAcVAk1NCA=="
)
_RATIO_SOLUTION = (
    "QVRUThQGARpTEQ4GFwZNARotFBcAEFxHT08zHhwVIhsBABcKBz8cAQRcEAcQHxkTClgnFRgdBkZVEwBFAhsBABcKB0h5RUFUVE5D"
    "T1UGGgkEECsPFxsQHAcMDhpcH09PHl5TE01UFw8WHBQeTjETARFHaU9VUlMGAAEHDw9PSFIQChQaAAsRQRIXBzoVGwAPDzATHhwV"
    "ElxdZENPVVJQRRUcEU4QDhgXUxIIABxOAA4AARIJXDIVAhAKVV9NRVlYQVZaQ0xBR0lUTUZOJSM6IgBeQRcVGxAOGUhTUU1MR19P"
    "V0ZKX1dRTE9OEQ4BGxxFUVpBWFFaW3h5MgkNVF5NWkNARkVcVE1BUllPUgQMFRxUIkNSVUBDUVlUAAYGHRBSEhcEVExOEhoQAApF"
    "AxgbDQgcVR0VRVNBQlVDDRkdEA5BHVQNDAIFBwcAElRGW1VPDVJBUFdUXAdDRFVDWm8SFxscBhxVWhoRElQfCxpPBxMdAgRUEQAH"
    "HFUTB0UIAAdODw4GBlMUFBEGF0pDVQEcRRUcEU4ADgABEglBBgEAQwwaHwMQFREHTlFaQyxBRUlFVEVDQVtcU05BTF1OXmVHR0U7"
    "U1QMTlBZVQEQChMRB0JDDhITGgsSAFRcU1tNLEFFXFRGW1UxR1ILRVdATk5QWVpER0tBNhsaC08FABwBFBcAHUNHJFI4OzVUFQAH"
    "TyVSJUxBBxcPDwpVBRoRCVQABgZlFh0eFRQAEQpDHBYdAQASWFQdDE8BGhZFJzg7PhBPER1TEQ4bWk43BxBSFh0AFwBOFx0cEx0C"
    "DRFUGQwaGRZTBwRUREBWX0VASEUVHBFOBwYUFRwLABhUHRIaFAAWFkEVBgtpDBofAxAVERBOCgFVFAYJDVQVAAdPGBMADgQQWg=="
)


@exercise(
    "complexity/causal-flops",
    title="Measure the FLOPs that causal tiling saves",
    hint=(
        """
            Count the FLOPs of one causal and one non-causal call on the same inputs with
            torch's FlopCounterMode, and divide.
        """,
        """
            Wrap each call in `with torch.no_grad(), FlopCounterMode(display=False) as counter:` and read
            counter.get_total_flops(), once with causal=True and once with causal=False, on the same
            (1, 8, 2048, 64) inputs and the default block sizes. Report causal / non-causal.
        """,
    ),
    solution=_RATIO_SOLUTION,
)
def _check_ratio(answer) -> str:
    return check_number(
        answer,
        _RATIO,
        _RATIO_MISTAKES,
        what=_("ratio"),
        rel_tol=0.01 / 0.5625,
        mistake_rel_tol=0.01,
        right=(
            _(
                "Right (within 0.01): 9/16 of the FLOPs, more than half because the diagonal tiles "
                "are computed in full."
            )
        ),
        otherwise=(
            _(
                "{value:.4g} is not within 0.01 of the measured ratio. Count the FLOPs of "
                "tiled_attention with causal=True and with causal=False, and divide."
            )
        ),
    )
