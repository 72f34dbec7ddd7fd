"""Chapter 7 exercises: the online softmax update, and the FLOPs of a multi-head layer."""
from __future__ import annotations


import torch

from ._core import Mistake, call, check_number, diagnose, exercise, matches


def _random(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- 1. the online softmax update for one new block -----------------------------------------


def _online_update_solution(running_max, running_sum, acc, scores, value):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))  # (L,)
    correction = torch.exp(running_max - new_max)  # exp(-inf) = 0 before the first block
    weights = torch.exp(scores - new_max[:, None])  # (L, B), shifted by the NEW max
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
        "The running sum is not rescaled: multiply the old sum by exp(old_max - new_max) before adding the new block.":
            (new_max, running_sum + w_new.sum(-1), acc * correction[:, None] + w_new @ value),
        "The accumulated values are not rescaled: multiply acc by exp(old_max - new_max) too, like the sum.":
            (new_max, running_sum * correction + w_new.sum(-1), acc + w_new @ value),
        "Neither the sum nor acc is rescaled: what was summed against the old max must be multiplied by exp(old_max - new_max).":
            (new_max, running_sum + w_new.sum(-1), acc + w_new @ value),
        "You exponentiated the new scores with the OLD maximum: update the running max first, then compute exp(scores - new_max).":
            (new_max, running_sum * correction + w_old.sum(-1), acc * correction[:, None] + w_old @ value),
        "The correction factor is inverted: it is exp(old_max - new_max) (at most 1), not exp(new_max - old_max).":
            (new_max, running_sum / correction + w_new.sum(-1), acc / correction[:, None] + w_new @ value),
        "The running max is the max of the new block only: it must be the max over every block so far, max(old_max, block max).":
            (scores.amax(-1), running_sum * torch.exp(running_max - scores.amax(-1)) + torch.exp(scores - scores.amax(-1)[:, None]).sum(-1),
             acc * torch.exp(running_max - scores.amax(-1))[:, None] + torch.exp(scores - scores.amax(-1)[:, None]) @ value),
    }


def _triple(fn, *args):
    result = call(fn, *args)
    if not isinstance(result, tuple) or len(result) != 3 or not all(isinstance(t, torch.Tensor) for t in result):
        raise Mistake(f"Return three tensors (new_max, new_sum, new_acc); got {type(result).__name__}.")
    return result


@exercise(
    "complexity/online-softmax",
    title="The online softmax update for one new block",
    hint="""
        1. new_max = the larger of the old running max and the largest score of the new block (per query).
        2. correction = exp(old_max - new_max): what was summed against the old max shrinks by this factor.
        3. weights = exp(scores - new_max) for the new block, using the NEW max.
        4. new_sum = old_sum * correction + weights summed over the block;
           new_acc = acc * correction[:, None] + weights @ value.
        Before the first block old_max is -inf, and exp(-inf - new_max) = 0 makes the empty sums vanish.
    """,
    solution=_online_update_solution,
)
def _check_online_update(fn) -> str:
    L, B, d_v = 4, 5, 3
    # one step from a state built from an earlier block, with a new block of larger scores
    first, values_first = _random(L, B, seed=1), _random(B, d_v, seed=2)
    state = _online_update_solution(torch.full((L,), float("-inf"), dtype=torch.float64), torch.zeros(L, dtype=torch.float64),
                                    torch.zeros(L, d_v, dtype=torch.float64), first, values_first)
    # rows 0 and 2 of the new block raise the maximum, rows 1 and 3 do not
    scores, value = _random(L, B, seed=3) + torch.tensor([[3.0], [-3.0], [3.0], [-3.0]], dtype=torch.float64), _random(B, d_v, seed=4)
    got = _triple(fn, *[t.clone() for t in state], scores.clone(), value.clone())
    expected = _online_update_solution(*state, scores, value)
    names = ("new_max", "new_sum", "new_acc")
    for name, g, e in zip(names, got, expected):
        if tuple(g.shape) != tuple(e.shape):
            raise Mistake(f"{name} should have shape {tuple(e.shape)}, got {tuple(g.shape)}.")
    if not all(matches(g, e) for g, e in zip(got, expected)):
        for message, wrong in _update_mistakes(*state, scores, value).items():
            if all(matches(g, w, equal_nan=True) for g, w in zip(got, wrong)):
                raise Mistake(message)
        wrong_part = [n for n, g, e in zip(names, got, expected) if not matches(g, e)]
        raise Mistake(f"After one update from a running state, {', '.join(wrong_part)} differ from the exact update.")

    # fold a whole row of scores block by block, starting from the empty state: acc / sum must be softmax @ V
    scores, value = _random(3, 23, seed=5, scale=30.0), _random(23, 2, seed=6)  # large scores: exp would overflow
    state = (torch.full((3,), float("-inf"), dtype=torch.float64), torch.zeros(3, dtype=torch.float64), torch.zeros(3, 2, dtype=torch.float64))
    for start in range(0, 23, 6):
        state = _triple(fn, *state, scores[:, start:start + 6], value[start:start + 6])
    out = state[2] / state[1][:, None]
    reference = torch.softmax(scores, dim=-1) @ value
    if not matches(out, reference):
        if not bool(torch.isfinite(out).all()):
            raise Mistake("Folding blocks from the empty state (max = -inf, sum = 0) gives inf or NaN: subtract the max before "
                          "exponentiating, and make sure exp(old_max - new_max) = 0 when old_max is -inf.")
        raise Mistake(diagnose(out, {}, default="One update is right but folding 4 blocks from the empty state is not softmax(scores) @ value."))
    return "Right: folding the blocks one by one gives exactly softmax(scores) @ value, without ever holding a whole row."


# -- 2. the FLOPs of a multi-head layer -------------------------------------------------------

_FLOPS = "UEZMVldWRUNLXVk="
_FLOPS_MISTAKES = (
    "GlZMW1tWTEFHUFhGVlRDTSwdBkUCGwEAFwoRUhwLDQ1UAQ0KVR0VRRUcEU4XGBpSEhEVERoaCgAbUgMXDhABDRccT1IiRSoqIE4CARFSI0U3VBEPAAdVERwWFVRGTklPOSxBRUtUMUBBQ1VQR1dYQE1YVF1MRFFfQVYgBgIbVRsARRUcEU4FAAAAUxUTGx4LABscHR0WQRUYAQ0KT1ISAQVUAAYGTxQGBwAPAB0BDU8FABwBFBcAHU9PJFI4OzVUFQAHTyVSJUlBERUNC09HUllFCVReTi8xR1JZRUkxWwZKT0hSQUVLVDgwUU9fUjZLQ1hUTFVbQUBHUFFNQFpBVVVQKgoUVBcBFgEBFxdFAFQZGw8bHAIfHEwVEApDDgZSHAsEVBseBh0UBhoKD05UD0MpOT0jRQIbAQAXTxYdBgsVB1QaCwpVHwYJFR0EAgoMFAYaCg9UFQAHTwEaFkUAEBAHFwYaHF9FEhtUCwIMHVIeEA0AHR4PFlgTFwFBHQdOUUFXXlNHUEVMX1JeQ0JDU1VWTk5BNhoHUwMOBhMBF08BGhZFDgEAHhYbVQIBCgsRFxoKABtSJDsuTlQaCwoHF1MEExFUCAwaB1IDFw4eEQ0XBhocAElBGhsaQxsdABYAT1ZYTkFYRkJCUVVAQF5QXVdIU0c4GwFOBA4DF1MAFxEGF0MHEBMXRRUcEU4FGhkeUxIIEAAGQypPUhYEAhxUBgYOEVIEChMfB04MAVU3XA1BSVRYV08TFxIRFAYRHU9PBh1TEQkRVAZDBxATFxZBABsJBhsdFwFFAhsHGkMOBlIeEAIcVA8QTxocFkUJERUKQwATUgQMBQAcTiZBV15TR1RHQlZUX0xDQVVDTlRMOgAAUhAKFBoACwdPGhwWRQkRFQpDABseCl9BABwLEQpVEwEAQRxUU0NXVRoWBAUHVAEFTwIbFxEJVDFBC0FXDw=="
)
_FLOPS_SOLUTION = (
    "MREGTgEOAREbRQQaABwaQ1UFGhEJVDhOXk8mUk5FU0RAVk9PMFJORVRFRkJDB1VPU11NVBwLAgtVBRoBFRxUCkNSVTdcDUFJVFhXVX94WUUxBhsEBgwBGxwLEk5UCAwaB1IeBBUGHQ0GHFU3Ux1BMVRGNDEkXlMyPz9YTjQxI15TMj87XUJDChQRG0UABAQCCgoRUgcKQThUHAwYBkh5RUFAVERDXVVYUylBXlQrPV1VT1NRQV5UXENFVUBDUVlUXk5WXkcsQUVcVEBCUVZBXkpTVlhGV1VBf1hTJBUAEQAXBhocSUUREQZOCwoUFl9FMFQ/MDdPFh0AERJURk5JTzlSWUUtVF5OB08UHBdFMVQiTgAABgYARVNUXk4vT19SP0VLVBBVQwkaAFMNQRwRDwccf1JTEQkVAE4KHFVAU09BRlREQyMrQFNPQRxUREMLVU9TUUFeVCI9XVVYUyBBSVRWT1pNS19cUkBYW1pdW3hZRTUbAA8PVVVDQUlZTEBCWl9EXktdWVQyIiw/Bl5TBAMbARpDXkdcSkUmMjghM09dARwDFRkVFkMOGxZTBwgVBwsQTxsdB0UCGwEAFwoRW11vayAcC0MfBx0ZAAIAHQENHFUVAQoWVBgHCApVPlMgP0ZYThcHEFISERURGhoKABtSHwwKEVQiPV1VN0lFAAAACw0bHB0dRQUbGQcNDgEXAEUOGhcLQyNVTFNXJH5cBgYdEFI/RVxURl5XV1VMU1RRRkBCQxwaUhIRFREaGgoAG1IaFkEAAwFDGx0bAQESVBsIQxsdF1MRDgAVAkpB"
)


@exercise(
    "complexity/multihead-flops",
    title="The FLOPs of a multi-head attention layer",
    hint="""
        Count the matrix products, 2 FLOPs per multiply-add (an (m x k) @ (k x n) product costs 2 m k n).
        The layer has four projections E x E applied to L rows each (W^Q, W^K, W^V and W^O), and per
        head two attention products of width d = E / h: Q K^T and P V. Check with
        attncourse.measure.multihead_flops, or with torch.utils.flop_counter.FlopCounterMode.
    """,
    solution=_FLOPS_SOLUTION,
)
def _check_flops(answer) -> str:
    return check_number(
        answer, _FLOPS, _FLOPS_MISTAKES, what="FLOP count", rel_tol=0.01,
        right="Right: attention (4 L^2 E) is two thirds of it here, the projections (8 L E^2) one third.",
        otherwise="{value:.4g} is not it. Count the four projections and the two attention products, 2 FLOPs per multiply-add.",
    )
