"""Chapter 4 exercises: cross-attention."""

from __future__ import annotations

import json

import torch

from ..course.toy_translation import alignment_accuracy, make_data, split_numbers
from ._core import (
    Mistake,
    as_shape,
    call,
    check_number,
    choice,
    exercise,
    expect_tensor,
    expect_tuple,
    matches,
    named,
    number,
    random_tensor,
    reveal,
)
from ._i18n import _, gettext_concealed

# -- 1. single-head cross-attention with a source padding mask ---------------------------------


def _cross_attention_solution(target, source, w_q, w_k, w_v, source_mask):
    query = target @ w_q  # (B, L, d_k): queries from the target
    key = source @ w_k  # (B, S, d_k): keys from the source
    value = source @ w_v  # (B, S, d_v): values from the source, with their own projection
    scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5  # (B, L, S), scaled by sqrt(d_k)
    scores = scores.masked_fill(~source_mask[:, None, :], float("-inf"))  # padded KEYS: (B, 1, S)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def _cross_variants(target, source, w_q, w_k, w_v, source_mask):
    """Weights of the usual mistakes: message -> (B, L, S) weights (only the mistakes that run on these sizes)."""
    query, key = target @ w_q, source @ w_k
    raw = query @ key.transpose(-2, -1)
    d_k, d_source = query.size(-1), source.size(-1)
    keys = ~source_mask[:, None, :]

    def soft(scores, dim=-1):
        return torch.softmax(scores, dim=dim)

    out = {
        (
            _(
                "The scores are scaled by sqrt of the source's width (the source text's sqrt(d_2)); the "
                "dot products are between vectors of width d_k = w_k.shape[1], so divide by "
                "sqrt(d_k)."
            )
        ): soft((raw / d_source**0.5).masked_fill(keys, float("-inf"))),
        _("The scores are not scaled: divide Q K^T by sqrt(d_k)."): soft(
            raw.masked_fill(keys, float("-inf"))
        ),
        _("The padding mask is ignored: a padded source position must get zero weight."): soft(
            raw / d_k**0.5
        ),
        _(
            "The padded scores are filled with 0, which leaves each padded key a weight of "
            "exp(0) / sum: fill them with -inf, whose exponential is 0."
        ): soft((raw / d_k**0.5).masked_fill(keys, 0.0)),
        (
            _(
                "The mask polarity is inverted: source_mask is True at real tokens, so fill the "
                "scores where it is False."
            )
        ): soft((raw / d_k**0.5).masked_fill(source_mask[:, None, :], float("-inf"))),
        (
            _(
                "The softmax runs over the target positions: each query's weights must sum to 1 over "
                "the source (dim=-1)."
            )
        ): soft((raw / d_k**0.5).masked_fill(keys, float("-inf")), dim=-2),
    }
    d_v, d_target = w_v.size(-1), target.size(-1)
    for width, message in (
        (
            d_v,
            _(
                "You scaled by sqrt(d_v) (the value width); the scale uses d_k, the width of "
                "queries and keys."
            ),
        ),
        (
            d_target,
            _(
                "The scores are scaled by sqrt of the target's width; the dot products are between "
                "vectors of width d_k = w_k.shape[1], so divide by sqrt(d_k)."
            ),
        ),
    ):
        if width != d_k:  # where the widths coincide the mistake gives the right weights
            out[message] = soft((raw / width**0.5).masked_fill(keys, float("-inf")))
    transposed = raw.transpose(-2, -1) / d_k**0.5  # (B, S, L): key @ query^T
    if target.size(1) == source.size(1):  # with L == S the transposed weights have the right shape
        for k, scores in enumerate((transposed, transposed.masked_fill(keys, float("-inf")))):
            out[
                _(
                    "Your weights are (B, S, L), one row per source position: you computed key @"
                    " query^T. Queries come from the target and keys from the source: scores ="
                    " (target @ w_q) @ (source @ w_k)^T, (B, L, S)."
                )
                + " " * k
            ] = soft(scores)
    if target.size(1) == source.size(1):  # only then does a query-side mask broadcast
        out[
            _(
                "You masked the queries (rows) instead of the keys (columns): the padding is in the"
                " source, so a padded source position must get no weight from any target position. Use"
                " source_mask[:, None, :] (B, 1, S)."
            )
        ] = soft((raw / d_k**0.5).masked_fill(~source_mask[:, :, None], float("-inf")))
    return out


def _check_case(case, fn, args, value_mistake_possible):
    target, source, w_q, w_k, w_v, source_mask = args
    expected_out, expected_w = _cross_attention_solution(*args)
    output, weights = expect_tuple(
        call(fn, *args), 2, _("Return a pair (output, weights); got {type_name}.")
    )
    if (
        isinstance(output, torch.Tensor)
        and isinstance(weights, torch.Tensor)
        and output.shape == expected_w.shape
        and weights.shape == expected_out.shape
        and expected_w.shape != expected_out.shape
    ):
        raise Mistake(
            _(
                "{case}: your pair is (weights, output): return (output, weights), in that order."
            ).format(case=case)
        )
    if (
        isinstance(weights, torch.Tensor)
        and weights.shape == expected_w.shape[:1] + expected_w.shape[1:][::-1]
        and weights.shape != expected_w.shape
    ):
        raise Mistake(
            _(
                "{case}: your weights have shape {weights_shape}, (B, S, L): queries come from the "
                "target and keys from the source, so the scores are (target @ w_q) @ (source @ "
                "w_k)^T, of shape (B, L, S)."
            ).format(case=case, weights_shape=tuple(weights.shape))
        )
    expect_tensor(weights, expected_w.shape, _("{case}: the weights (B, L, S)").format(case=case))
    if (
        value_mistake_possible
        and matches(output, weights @ (source @ w_k))
        and not matches(output, expected_out)
    ):
        raise Mistake(
            _(
                "{case}: your values are source @ w_k, the keys (the source text's formula K = V = X_2 "
                "W^K). Values have their own projection: value = source @ w_v."
            ).format(case=case)
        )
    if matches(output, weights @ source):
        raise Mistake(
            _(
                "{case}: your output is weights @ source: the values need their projection, value = "
                "source @ w_v."
            ).format(case=case)
        )
    expect_tensor(output, expected_out.shape, _("{case}: the output (B, L, d_v)").format(case=case))
    if matches(weights, expected_w) and matches(output, expected_out):
        return
    if matches(weights, expected_w):
        if value_mistake_possible and matches(output, weights @ (source @ w_k)):
            raise Mistake(
                _(
                    "{case}: your values are source @ w_k; use their own projection, source @ w_v."
                ).format(case=case)
            )
        raise Mistake(
            _(
                "{case}: the weights are right but the output is not: it is weights @ (source @ w_v)."
            ).format(case=case)
        )
    for message, wrong in _cross_variants(*args).items():
        if matches(weights, wrong, equal_nan=True):
            raise Mistake(_("{case}: {value}").format(case=case, value=named(message.rstrip())))
    if torch.isnan(weights).any():
        raise Mistake(
            _(
                "{case}: your weights contain NaN: did a whole row get masked? Only source (key) "
                "positions are padding."
            ).format(case=case)
        )
    raise Mistake(
        _(
            "{case}: your weights differ from softmax((target W^Q)(source W^K)^T / sqrt(d_k)) "
            "with padded keys removed."
        ).format(case=case)
    )


@exercise(
    "cross-attention/single-head",
    title="Cross-attention from a target to a padded source",
    hint=(
        """
            It is the attention of chapter 1 with the queries taken from the target and
            the keys and values from the source. Where is the padding, in the queries or
            the keys, and so along which dimension of the scores must the mask act?
        """,
        """
            1. query = target @ w_q (B, L, d_k); key = source @ w_k (B, S, d_k); value = source @ w_v (B, S, d_v).
            2. scores = query @ key.transpose(-2, -1) / sqrt(d_k): shape (B, L, S), one row per target position.
            3. The padding is in the source, that is in the keys (the columns): source_mask (B, S) becomes
               source_mask[:, None, :] (B, 1, S); fill the scores where it is False with -inf.
            4. softmax over the last dimension (the source positions), then weights @ value.
        """,
    ),
    solution=_cross_attention_solution,
    name="cross_attention",
)
def _check_cross_attention(fn) -> str:
    # (case, shapes of target, source, w_q, w_k and w_v, source_mask, first seed, whether the
    # mistake value = source @ w_k can run). In the first L == S and d_k == d_v, so that the
    # usual mistakes run and can be recognised; in the second, the general case, every size differs
    cases = (
        (
            _("Target length 5, source length 5 (2 padded), d_k = d_v = 4"),
            ((2, 5, 6), (2, 5, 3), (6, 4), (3, 4), (3, 4)),
            torch.tensor([[True] * 5, [True, True, True, False, False]]),
            40,
            True,
        ),
        (
            _("Batch 3, target length 4 (width 8), source length 7 (width 5), d_k = 6, d_v = 2"),
            ((3, 4, 8), (3, 7, 5), (8, 6), (5, 6), (5, 2)),
            torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] + [False] * 6]),
            45,
            False,
        ),
    )
    for case, shapes, mask, seed, value_mistake_possible in cases:
        tensors = (random_tensor(*shape, seed=seed + i) for i, shape in enumerate(shapes))
        args = (*tensors, mask)
        _check_case(case, fn, args, value_mistake_possible=value_mistake_possible)
    # the general case, checked last, again: its padded positions get exactly zero weight
    output, weights = call(fn, *args)
    if not torch.all(weights[..., ~mask[0]] == 0) or not torch.all(weights[1][:, ~mask[1]] == 0):
        raise Mistake(
            _(
                "Padded source positions must get exactly zero weight: mask with -inf (or a boolean "
                "masked_fill)."
            )
        )
    return _(
        "Right: queries from the target, keys and values from the source with their own "
        "projections, padded keys masked."
    )


# -- 2. the shapes in an encoder-decoder layer ------------------------------------------------

_SHAPES = "GlYDCwoIHQYAR1tUL1xPT0FeU1BNVE0zT09XHQYREQEATFlPLkBfRVRYVFpbMllSUQ4EDSseAgsRGx0CPhkVHQhNT1IoV01URUJDXllSSjgc"
_SHAPES_MISTAKES = (
    "GlYDCwoIHQYAR1tUD0xLXVlSR0lBTVhOVkZXSFNHExsDHUMOBxdTFBQRBgcGHFUTHQFBFxsCFgIbAVMEExFUBQYWBkhTTSNYVAAW"
    "AioaFgQFB1hOL0NVIVpFFh0ABkMjVU9TUEEAFRwECgFSAwoSHQAHDAEGUhILBVQnTl5PTFIAChQGFwtDHxoBGhEIGxodTU1ZUlFN"
    "U1hUW09PTFtRX0FWAAYGTxkTCgATVAYLFxoHHABFFRwRThQKHBUbERJUGwhDCgMXARxBHBEPB1VVWjFJQRoBAzwHEBMXFk1UOEJD"
    "PFxcUUlBVlxcT09BXlNQTVRBR0FVVVAHDQRUFwEPGhgcAEUABhFOFwcQUgAKFAYXC0MfGgEaEQgbGh1DRyZSTkVYXU5OCgFVEQEK"
    "EgdZDxcbEBwHDA4aVCJDDhsWUzZBGRUXQwscFBUAE1pWQkNNXUBfRVVYVFdPT0xbUV9BVgAGBk8HHQQWQRUGC0MbHRdTFBQRBgcG"
    "HFlSFRcOGVQaCwpVBhIXBhEATksjVU9TUEhYVAAMG1UGGwBBBxsbEQwQXFEYTVRWARYbBQcHR1tUD0xLXVlSRklBR0ZHQVVVUAcN"
    "BFQbGxcfAAZUFkEDHQoXB1UbAEUEGRYLBzARGx5FXFRAVk9PGx0HRRUcEU4QAAAAEABGB1QZCgsBGlMOBR0ZQRULHB9TWEFHRlRD"
    "Gx0XUw0EFRAdRE8aBwcVFAAHTgIdEFIQCg8XFRoGARQGFgFBFRoKQzgrPVMIAAQHThcHEB9TEQ5UEQMBChEtFwwMWlZCQ01dQF9F"
    "WFhUWltGV0hTRxUcERwGTxwBUwoPEVQBFhsFBwdFExsDThMKB1ICEAQGDUJDDhsWUxEJEVQfFgoHGxYWQRcbAwZPEwAcCEEAHAtD"
    "GxQAFAAVVFwiQ1JVR1pLQ1hUTEtdWVJKSUFHRkdBVVVQBw0EVBsbFx8ABlMDDhgYARQcVQYbAEEFAQsRBhABX0UIGlQCBgESBhtF"
    "SUFdTgIBEVIaC0EDHQoXB1VaFggDERAxBwYYUk5FVUxdVUMbHRdTFg4BBg0GTwEXCxFGB1RJDU8NUhc6U1NUBxBPAgAcCwZUGwBD"
    "DRoGG0UCGwEAFxxbUF9FQ1xGQkNaWVJCV0hWTk5BXkdSGhZBGxoLQwcQExdCElQDBwcbHUlTEQkRVAYGDhEBUwQTEVQNDAEWEwcA"
    "DxUACwdPXUZTHUFFRkdDDhsWUxUTGx4LABsQFlMHGFQjMCxPAR1TAAwWEQo8CxwfU1hBQExAQUNVUFtXTVRAQkNaWVJCV0hWTk5B"
    "Gx0TB0UIB1QaCwpVGhYEBQdUDAYJGgAWRRUcERdDDgcXUwgEBhMLB1RVBhsAQRgVFwYdVQAWERQGGh1DRzdeUylNVBEDAQoRLRcM"
    "DF1aTB5DVVAYABgrBA8HCxwcFDoMFQcFQVVVCVFNU1hUV0pNT1JRBEFcNkJDPFxSHgQSH1QCCgEQAVMQEVQDBxcHVQYbAEEYFR0X"
    "TwEFHEUFHRkLDRwcHR0WQRsSThcHEFIEAAgTHBoQQ1VaP0lBJ11UQwYBUhUECBgHTksAB15TEgkRGk4vTx0TAxUEGgdOFwBVFwIQ"
    "ABhULE9PBhsfAA8AGBdDAhQBGBZBABwLQxgHHR0CQQAcBw0IXFxTJAUQVAoKAhAcAAwOGgdOBQAHUgcNBFQcCwILBlISCwVUAAYG"
    "TwQHFhcIEQdAQUNVUFtXTVRFQkNWXFBJRUMAHAcQTxwBUxEJEVQdCw4FF1MRCRFUAgIWEABTDBUHEQIFTwETGAASVFwHF08UFhcW"
    "QQAcC0MHEBMXRQAMHR1DGxpSEkVSWTBODg4GGVpJQRUaCkMbHRdTFg4BBg0GTwEXCxFGB1QPBxkcERZJQQEaHRIaEBcJAElFXVVD"
    "DQAGUxEJEVQfFgoGBhoKD1QVHQgcVRQcF0EAHAtDAhQBGEUVHBUaQwMcHBYWQQEEThQGARpTEQkRVBkGBhIaBxZBABwLDhwQHgUA"
    "ElhURlFDVUZfRVRYVFdKVVUTFAQIGgcaQxsdFx5FSUZYTlJDVUtaRQ0dGgsQTwACUwQSVFxfT09HXlNUTVRNR09PARoWRQMVAA0L"
    "TxQVEgwPBwBOFwcQUhsAABAHQkMYHRsQDUESFQcPHFVaHBdBHQdOEAYZFx0RDQ1UGREAGxVTEgkRGk4NGhgtGwAAEAdOXk9HW11F"
    "IBAQTgwBEFIeChMRVF9NTVlSUU1TWFRfT09AXlNUSFZOTkEbHRsARQwVBwUQTwQHFhcIEQdOSxsUABQAFVQEARAGARscCxJdWE4B"
    "GgFSBw0EVAQPBwscHBRFCAdUBw1PARoWRRIbARwACk9SBw0EVB8LGhxZUgcNBFQYDxAbVRYaCAQaBwcMAVVaIEVcVE1HTU1ZUlFN"
    "U1hUW09PRFtRX0FWAAYKHFUfEhYKB1QfFgoHGxYWQVwADxEIEAZTFQ4HHRoKABsBWklBFgEaQxsdF1MVABAQBw0IVRsARQgaVBoL"
    "ClUBHBATFxFUQxsdF1MOBA0HQkMbHRdTCQAHAE4HBhgXHRYIGxpOSzxVT1NcSFpWQkNNXUBfRVVYVFtPT0xbUV9BVgAGChxVARsE"
    "ERFUGQwdHgFfRQMBAE4KG1UAFhUEFQAdQwAbF1MVABAQBw0IVQISERURBgBDCRoAUwAXEQYXQwcQExdFABoQThIaEAAKX0ETHRgG"
    "TwEaHBYEVBAHDgobARoKDwdUHQoVEFJCRQAaEE4PCgFSERcOFRANAhwBGx0CQRAbTgobW1BfRUNcRUJDXllSQUlBTV1MWU9XBhsA"
    "QRYVGgAHVRYaCAQaBwcMAVURHAgEB1QICh0GBklFSTZYTlJDVUNfRTJdWkxPT1daQklBRVhOUkNVS1pHW1RWGQobHR0GEUEVVAwC"
    "GxYaUwEIGREAEAYaHFMKDxFUHgILERsdAkEEFRoXCgccUxIOARgKQxwQAAUAQRECCxEWVQEWCxURGg0GVVUGGwBBGRUdCE8DEwEM"
    "BAdUDw8AGxVTEQkRVAwCGxYaUwQPEFQaCwpVGRYcElhURiFDVUNfRVBYVD1KQVdeU0dJRlhOUkNVS19FUF1WVENNARoaFkEEARoQ"
    "TyZSHAtBABwLQx4AFwEcQRUMBxBVVQISAQUdGglDAxwEFhZBHRpOFwcQUhgAGAdYThcHEFIfBBIAVAoKAhAcAAwOGlhOSy1ZUkJJ"
    "QUVYTjBGW1AOGA=="
)
_SHAPES_SOLUTION = (
    "FhEdCQsbBlJbV01UQEJDWllSSkxbVBYPFwwdXlMNBBUQHU9PGhwWRRMbA04TCgdSBwQTExEaQx8aARoRCBsaTksbHRdTFBQRBgcGHFlS"
    "P0VcVEFHT08aHBZFAhsYGw4BVQIWF0EHGxsRDBBSAwoSHQAHDAFVWgcNBFQfCxocWVIgRVxUTUdNZRoHBxUUAFRGUUNVR19FVUxdVEMA"
    "GxdTFw4DVB4GHVUDBgATDVhOAgERUiQ7LlQWHAoBEgFTEQkRVA0MARYTBwAPFQALB08dFxIBElRcWkMXVUNBTEEWFQ0ITwEdUwAMFhEK"
    "PAscH1NYQUBMVUMbHRdTFg4BBg0GSAZSBAwFABxOUF1VHR0JGFQRABcKBwFTEQkGGxsEB1UlLS5BFRoKQzgrJF1vChENMRMOERYaCwYr"
    "GQ8QBFVaQUlBRVhOUkNVS1pfQQcbGxEMEC0eBBIfL1RPTzsdHQBNVDoBDQpZUkk4T1Q1CQIGGwEHRRUcEU4UChwVGxESVFwsT08dXlMp"
    "TVQnR0MGAVIRFw4VEA0CHAEBUwoXEQZOFwcQUhsAABAHTgIBEVIHDQRUBRsGHRwXAEUAGhBOEQoYHQUAElQEDwcLEBZTDgQNB05LDBoe"
    "BggPB11AQyIAHgcMKREVCiIbARcdEQgbGk4CAwYdUwQCFxEeFxxVARwQExcRMQ4OBhkoX01UOgENCllSSThBGxJOEAcUAhZFSTZYTlJD"
    "VSFaSUEWEQ0CGgYXUwwVVBUKBxxVBhsAQRwRDwdPERseAA8HHQENTwEdUwRBR1kqQwIUARhFCAAHCw8JWw=="
)
_SHAPE_KEYS = ("weights", "output", "key_padding_mask")


def _as_shape(value, name):
    return as_shape(value, _("answer[{name!r}]").format(name=name))


@exercise(
    "cross-attention/shapes",
    title="The shapes of cross-attention in a decoder",
    hint=(
        """
            Which side gives the queries, and which the keys and values? The weights have
            one row per query and one column per key, for each head.
        """,
        """
            The queries come from the decoder (the target), keys and values from the encoder (the
            source). The weights have one row per query and one column per key, for each head. The
            output has one row per query, and the layer's out projection brings it back to embed_dim.
            A key padding mask must line up with the last dimension of the weights and broadcast over
            the heads and the queries: put a 1 where those dimensions are.
        """,
    ),
    solution=_SHAPES_SOLUTION,
)
def _check_shapes(answer) -> str:
    if not isinstance(answer, dict) or set(answer) != set(_SHAPE_KEYS):
        raise Mistake(
            _(
                "Give a dict with exactly the keys {_SHAPE_KEYS}, each mapped to a shape tuple."
            ).format(_SHAPE_KEYS=list(_SHAPE_KEYS))
        )
    expected = {k: tuple(v) for k, v in json.loads(reveal(_SHAPES)).items()}
    mistakes = json.loads(reveal(_SHAPES_MISTAKES))
    wrong = []
    for name in _SHAPE_KEYS:
        shape = _as_shape(answer[name], name)
        if shape == expected[name]:
            continue
        known = mistakes[name].get(str(shape))
        wrong.append(
            _("{name} {shape}: ").format(name=name, shape=shape)
            + (
                gettext_concealed(known)
                if known
                else _("not this shape; count the sizes again from the hint.")
            )
        )
    if wrong:
        raise Mistake("\n".join(wrong))
    return _(
        "Right: the output follows the queries (target), the weights have one column per "
        "source position."
    )


# -- 3. predict: the parameters of a cross-attention layer -----------------------------------------

_CROSS_COUNT = "VkxDXA=="
_CROSS_COUNT_MISTAKES = (
    "GlZNWlNXV0hTR1hARFZDBgZSPhANAB0mBg4RMwcRBBoABwwBXUZLSUFAXU4UBgEaHBAVVB8KCgJVEx0BQQIQBw5VVSUtLkEVGgpDOCskUxcEFR"
    "BOCgEFBwcWQRsSThQGEQYbRVJGVAYGHRBeUxYOVBEPAAdVGhIWQUdGThtPQUpTEgQdEwYXHFtQX0VDQ0JWU01PUlE8DgFUAgYJAVIcEBVUAAYG"
    "TxcbEhYEB05OBg4WGlMKB1QABgZPEx0GF0EEBgEJChYGGgoPB1QGAhxVHR0AQRsSThQGEQYbRVVMWkxPT1dLQVRXVk5OQTsdEwdFCAdUWkMXVU"
    "ZLRRlUQFZZTwEaFkUKEQ1OAgERUgUEDQERTgoBBQcHFkEVBgtDXEdSBAwFEVhOAgERUhYEAhxUHhEAHxcQEQgbGk4LDgZSEkUDHRUdQxsaHV1H"
    "TVRWWFteQ1BJRUMtGxtDHwcdGQACABEKQwQQCwBFABoQThUOGQcWFkEAG04UBhEGG0VSRk5OCAscH1MEDxBUGAcGGFISFwRUAAYGTwIbFxEJB1"
    "QBBU8BGhZFCBoEGxccTlIkOypUFQAHTyIsJUUSAB0CD08FABwPBBcAThcAVRceBwQQKwoKAlVPU1FZVFwaCwpVGhYEBQdUHRMDHAZTUVldWkxP"
    "T1dDSlNZVk5OQTsdEwdFCAdUAQ0KVRoWBAVTB04QBxQAFl9BABwLQwcQExcWQQcEAgobVQYbAEEEBgEJChYGGgoPB1hOFwcQC1MBDlQaARdPGA"
    "cfEQgEGBdDAAdSFwwXHRALQxsdF1MGDgEaGkMAE1IHDQRUGA8aCgdcUUlBVkdfV1dNUElFQy0bG0MCAB4HDBEYHQsHTxcLUxEJEVRaQwcQExcW"
    "W1QABgZPHRcSARJUBx4PBgFSBw0EVAQcDAUQEQcMDhoHQkMbHRcKRQAQEE4NAFUCEhcAGREaBh0GXFEY"
)
_CROSS_COUNT_SOLUTION = (
    "QVRUTjQxJEhTUVlUDE5XV1VZU1FZVElOUVxAQFNFQVwFGwYdHBcARQ4SVBkKCwEaUwAMFhEKPAscH1NYQUBMR2lPVVJTMj8/Tk5Q"
    "XVUKU1FZVF9OV1dVT1NUVExATkNPXRkWHBJUGwhDGBwWBw1BHxAHDk9IUkBXTVQEHAwFEBEHAAVUAAFDW01beUVBVFQ5PTlPUkBX"
    "QQxUWltPXlJHXUFJVF9WV0FSU0VJAhUCFgoGUhwDQQMdChcHVQQXDAxUSU5QXVlSAxcOHhENFwoRUgcKQUBMR2lPVVJTMj87Tk5X"
    "V1UKU1FZVF9OV1dVT1NXUkFGZGlYTUVBRQgaVA8PA1lSBw0AAFQHEE9HUjY7U1RfTiZPHhYaCEFfVCtDGREbHkVKVEBOJk8CGwcN"
    "QTFUU0NbTVxTJgkRFwVZZX9SU0VBBwEDSx9bHAYIBBhcR0MJGgBTFUEdGk4uGhkGGi0EFRAvFxsQHAcMDhpcWltDVUZfRQoQHQNe"
    "XEdeUxMFHRlTUF1cXAMEExUZCxcKBwFbTEg="
)


@exercise(
    "cross-attention/parameter-count",
    title="How many parameters has MultiHeadAttention(48, 4, kdim=32, vdim=32)?",
    hint=(
        """
            Four projections, each with a weight matrix and a bias. Which width does each
            one map from, and which to? The number of heads plays no part.
        """,
        """
            Four nn.Linear layers, each with a bias of its output width. W^Q maps the queries'
            width to embed_dim, W^K and W^V map kdim and vdim to embed_dim, W^O maps embed_dim to
            embed_dim. The number of heads does not change the count.
        """,
    ),
    solution=_CROSS_COUNT_SOLUTION,
)
def _check_cross_count(answer) -> str:
    return check_number(
        answer,
        _CROSS_COUNT,
        _CROSS_COUNT_MISTAKES,
        what=_("parameter count"),
        right=(
            _(
                "Right: kdim and vdim change only the input side of W^K and W^V; everything is "
                "projected to embed_dim."
            )
        ),
        otherwise=(
            _(
                "{value:g} is not it. Count the weights and biases of the four projections, or check "
                "with sum(p.numel() ...)."
            )
        ),
    )


# -- 4. a measured experiment: how much of the alignment is position alone -------------------------


_DIAGONAL_SOLUTION = (
    "QVRUTi1DVT5TWEEAER0XMBETBwRPFRgHBAEYFx0RTwccDxMKf1JTRUEnVFNDGxABBzoFFQAPTRwHEV0WCA4RRlJGf1JTRUEHFQMGMAUdAAwVHR"
    "sAQ1JVBhwXAhxaCxoKXT5fRTJdWgsbHxQcF00vWFQiT08mW1NFQVdUGgIdEhcHRREbBwcXBhocUwxBGBsBCBxVEwdFEhsBHAAKVQIcFggAHQEN"
    "Txx4U0VBVBUCCggbHxYLFSsVDQAaBxMQHEkHFQMGMAUdAAwVHRsAT08BFwARPhAVGgJBFB4aAg8ZEQAXRlVSU0ZBFRYBFhtVQl1XWUV+ZDMABh"
    "sHDA4aVA8PABsXUwMIGhAdQxsdF1MWDgEGDQZPAh0BAUEbEk5RV1BSHANBABwLQwcQHhdIDgEATgcGEhsHFk9UIAYGTwIdAQESVBsIQw5VHAYI"
    "AxEGTgIdEHgABAgQVAcNTxQcUwoTEBEcQ0cBGhwQEhUaChBDVVAHDQ4BBw8NC1deUw0UGhAcBgsGXlNHCQEaChEKEVBfRRQaHRoQQ1VQEgsFVl"
    "hOFwobAVpFFRwVGkMfAAYAbwwbBxpDCxwVGhESU1QZDB0RAVMEFVQbGgsKB1IDChIdAAcMAQZSBw0AGlQaCwpVFhoCCAAHQkMcGlISRQkRFQpD"
    "AgABB0UTERUKQxsdF1MSDgYQHUMbGlISCQgTGmQXBxAfSUUVHBFOFx0UGx0ABVQZAQcKGVUARQ0VBxpDAxQLFhdNVB0aEE8dFxIBElQVGAYdFB"
    "UWAU1UEwsXHFUfHBcEVAAGAgFVS0NAQVwABgZPFhoSFRURBmQCHAYXARESVB0aQw4bFlMVEx0aGhBPARoaFkEGAQBEHFUBGwQTEV1A"
)


def _diagonal_baseline() -> tuple:
    """(the accuracy of the same-position head, of an always-the-first-word head, with the EOS counted)."""
    _, test_numbers = split_numbers(0.2, seed=0)
    data = make_data(test_numbers)
    N, L = data.alignment.shape
    S = data.src.size(1)
    weights = torch.eye(L, S).expand(N, L, S)
    counted = data.alignment >= 0
    with_eos = ((weights.argmax(-1) == data.alignment) & counted).sum().item() / (N * L)
    return (
        alignment_accuracy(weights, data.alignment),
        alignment_accuracy(torch.zeros(N, L, S), data.alignment),
        with_eos,
    )


@exercise(
    "cross-attention/diagonal-baseline",
    title="Measure the alignment accuracy of a head that ignores content",
    hint=(
        """
            Build a head that always looks at the same position as the query (one-hot
            weights on the diagonal) and score it with the chapter's alignment accuracy on
            the held-out data.
        """,
        """
            Build the held-out data as the chapter does (split_numbers(0.2, seed=0), make_data).
            A head that looks at the same position is one-hot weights: torch.eye(L, S) expanded to
            (N, L, S), with L = test_data.alignment.size(1) and S = test_data.src.size(1). Score it
            with alignment_accuracy(weights, test_data.alignment), which skips the end-of-sentence
            token. Give a fraction between 0 and 1.
        """,
    ),
    solution=_DIAGONAL_SOLUTION,
)
def _check_diagonal_baseline(answer) -> str:
    value = number(answer, _("accuracy"))
    right, first_word, with_eos = _diagonal_baseline()
    if abs(value - right) <= 0.005:
        return _(
            "Right: {right:.1%}. Position alone finds the source word of fewer than a third of "
            "the digits; the trained cross-attention, which reads the words, finds nearly all of "
            "them."
        ).format(right=right)
    if abs(value / 100 - right) <= 0.005:
        raise Mistake(
            _(
                "That is the right measurement as a percentage: give it as a fraction between 0 and "
                "1."
            )
        )
    if abs(value - with_eos) <= 0.005:
        raise Mistake(
            _(
                "You counted the end-of-sentence tokens as misses: they have no source word "
                "(alignment -1) and are not scored; alignment_accuracy skips them."
            )
        )
    if abs(value - first_word) <= 0.005:
        raise Mistake(
            _(
                "That is the accuracy of a head that always picks the first word (argmax of equal or "
                "zero weights is position 0): put the weight of target position i on source position "
                "i."
            )
        )
    if value > 1 and float(value).is_integer():
        raise Mistake(
            _(
                "{value:g} looks like a count of digits: the accuracy is the share of the scored "
                "digits whose source word the head finds, a fraction between 0 and 1."
            ).format(value=value)
        )
    raise Mistake(
        _(
            "{value:g} is not what this head scores on the held-out numbers; follow the hint "
            "(the checker allows 0.005 around its own measurement)."
        ).format(value=value)
    )


# -- 5. find the bug: name it ---------------------------------------------------------------------

_WHICH_BUG = "BQ=="
_WHICH_BUG_MISTAKES = (
    "GlYVTFlPVz4aCwRUXA9KTxwBUxcIExwaWU8GFwMEExUAC0M4KzlTBA8QVDk9OVUeFhFBFVQdDBoHERZFERsHBxcGGhxTBwRUEgEWARFSERxBGx"
    "oLQxsdGx0CQRUaCkMHFBwXRQ4CERxDDhsdBw0EBk9OFxYcHBRFFRwRA0NHI1JORTkrRk40MT5bUwwSVAAGBk8GHQYXAhFUGgYXAVUARQwdBxoC"
    "BBBeUwsOAFQaCwYGUhAKBRFTHU1NWVJRB0NOVEwvBhsXU00DXVQHEE8HGxQNFU5UGgsKVQEQChMRB04CHRBSFwoVVAQcDAsAEQcWQRsSTgcwHl"
    "8EDAURVBgGDAEdARZNVAcBQxwEAAdNBSsfR0MGBlIHDQRUBw0CAxBJUxEJEVQdDBoHERZCElQDBwcbHVIXOlNUBAICFgZSHQpBBBUcF09dBhsM"
    "ElQXBgIfARcBRQwRFR0WHRABUwwVXVpMT09XEVFfQVY4Bw0KVVoQTEEdB04RBhIaB19BBBUKBwYbFVMJCAIRHUMGG1IHDQRUHwsaHFlSAApBAB"
    "wLQ0c3XlM2SFQZDxAEVRAWBg4ZER1DRzdeU1RNVCdHT08BGhZFEhUZC0MJGgBTABcRBhdDGxQAFAAVVAQBEAYBGxwLT1ZYTkEKV0hTRy0dGgtD"
    "RxBbUwwSVAYHBAcBSFMRCRFUARYbBQcHRQkVB04MARBSAQoWVAQLEU8EBxYXGFhUGgsKVQYSFwYRAEkQTxkXHQIVHFQiT08UHBdFFRwRThQKHB"
    "UbERJUFRwGTwcXBxATGhEKQw0QARoBBFQdGk1NCA=="
)
_WHICH_BUG_SOLUTION = (
    "SRBdQEM7HRdTFgIbBgsQTxQAFkVJNlhOL0NVIVpfQRAdAwYBBhscC0FFVAcQTwEaFkUVFQYJBhtVAhwWCAAdAQ0cW1IACgcAGQ8bRxEbHlhQXV"
    "QDAgQQAVMAABccZBAAAAAQAEEXGwIWAhtSABAMVAABQ15VHQUAE1QABgZPBAcWFwgRB0JDHBpSEkUQAREcGkgGUgQACBMcGhBPGx1TCQ4aEwsR"
    "TwYHHkUVG1RfT08UHBdFAFQEDwcLEBZ5Fg4BBg0GTxYdHxAMGlhOTgYbFFMDDgZUCxUKBwtTFBQRBhdPTxcXEAoMEQdOU0BFUk5FLxU6QkMYHR"
    "sQDUEHBBwGDhEBUwwPABtOBhkQAApFDgEAHhYbVR0VRRUcEWQQChsGFgsCEVpOJQYNSFMSBB0TBhccVU9TEQ4GFwZNHBoUBwgADFwdAAAHFwBJ"
    "QRAdA15CRFtd"
)
_WHICH_BUG_CHOICES = ("a", "b", "c", "d", "e")


@exercise(
    "cross-attention/which-bug",
    title="Find the bug: which line of this cross-attention is wrong?",
    hint=(
        """
            Run the function on a batch with padding and look for NaN, then check over
            which dimension its weights sum to 1.
        """,
        """
            Run the function on a batch whose second sentence has padding and look for NaN. Then
            sum its weights over the last dimension: a query's weights should sum to 1 over the
            source positions. Which line decides over which dimension they sum?
        """,
    ),
    solution=_WHICH_BUG_SOLUTION,
)
def _check_which_bug(answer) -> str:
    letter = choice(answer, _WHICH_BUG_CHOICES, _("line letter"))
    if letter == reveal(_WHICH_BUG):
        return _(
            "Right: softmax(dim=1) normalises each source column over the target positions; a "
            "padded column is all -inf there, so it turns into NaN. Use dim=-1, over the keys."
        )
    raise Mistake(gettext_concealed(json.loads(reveal(_WHICH_BUG_MISTAKES))[letter]))
