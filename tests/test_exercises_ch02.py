"""Chapter 2 checkers accept the reference and name the usual mistakes."""

import numpy as np
import pytest
import torch
from exercise_helpers import assert_fails as _failed
from exercise_helpers import stub as _stub

from attncourse.exercises import check
from attncourse.exercises.ch02_multihead import _forward_solution, _split_solution


@pytest.mark.parametrize("exercise_id", ["multi-head/split-heads", "multi-head/forward"])
def test_stub_is_not_attempted(exercise_id):
    assert check(exercise_id, _stub).status == "not attempted yet"


def test_parameter_count_placeholder_is_not_attempted():
    assert check("multi-head/parameter-count", ...).status == "not attempted yet"


# -- split heads ---------------------------------------------------------------------------------


def test_split_accepts_the_reference_and_equivalent_forms():
    assert check("multi-head/split-heads", _split_solution).passed
    assert check(
        "multi-head/split-heads",
        lambda x, h: x.reshape(x.size(0), x.size(1), h, -1).permute(0, 2, 1, 3),
    ).passed
    assert check(
        "multi-head/split-heads", lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=1)
    ).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda x, h: x.view(x.size(0), h, x.size(1), -1), "without a transpose"),
        (lambda x, h: x.view(x.size(0), x.size(1), h, -1), "not moved in front of the positions"),
        (lambda x, h: x.view(x.size(0), x.size(1), -1, h).permute(0, 3, 1, 2), "every h-th column"),
        (
            lambda x, h: x.view(x.size(0), x.size(1), h, -1).transpose(1, 2).transpose(2, 3),
            "should have shape",
        ),
        (
            lambda x, h: x.view(x.size(0), x.size(1), h, -1).transpose(1, 2).flip(1),
            "Right shape, wrong values",
        ),
        (lambda x, h: x[:, :, None].view(x.size(0), x.size(1) * 99, h), "raised RuntimeError"),
    ],
)
def test_split_rejects(wrong, words):
    _failed("multi-head/split-heads", wrong, words)


# -- forward ---------------------------------------------------------------------------------------


def _forward(
    x_q,
    x_kv,
    w_q,
    w_k,
    w_v,
    w_o,
    num_heads,
    *,
    scale_width=None,
    transpose=True,
    out_proj=True,
    merge_transpose=True,
    interleave=False,
    in_t=True,
    out_t=True,
    softmax_dim=-1,
):
    B, L, E = x_q.shape
    d = E // num_heads

    def split(t):
        if transpose:
            return t.view(t.size(0), t.size(1), num_heads, d).transpose(1, 2)
        return t.reshape(t.size(0), num_heads, t.size(1), d)

    def project(x, w, transposed):  # nn.Linear's layout: y = x @ w.T
        return x @ w.T if transposed else x @ w

    q = split(project(x_q, w_q, in_t))
    k, v = split(project(x_kv, w_k, in_t)), split(project(x_kv, w_v, in_t))
    scores = q @ k.transpose(-2, -1) / (scale_width or d) ** 0.5
    heads = torch.softmax(scores, dim=softmax_dim) @ v
    concat = heads.transpose(1, 2).reshape(B, L, E) if merge_transpose else heads.reshape(B, L, E)
    if interleave:  # column j * h + i holds feature j of head i
        concat = heads.permute(0, 2, 3, 1).reshape(B, L, E)
    return project(concat, w_o, out_t) if out_proj else concat


def test_forward_accepts_the_reference_and_the_package_layer():
    from attncourse import MultiHeadAttention

    assert check("multi-head/forward", _forward_solution).passed
    assert check("multi-head/forward", _forward).passed

    def with_layer(x_q, x_kv, w_q, w_k, w_v, w_o, num_heads):
        layer = MultiHeadAttention(x_q.size(-1), num_heads, bias=False).double()
        with torch.no_grad():
            for lin, w in zip(
                (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj), (w_q, w_k, w_v, w_o)
            ):
                lin.weight.copy_(w)
        return layer(x_q, x_kv, x_kv)[0]

    assert check("multi-head/forward", with_layer).passed


@pytest.mark.parametrize(
    "options,words",
    [
        ({"out_proj": False}, "W^O is missing"),
        ({"scale_width": -1}, "1/sqrt(E)"),
        ({"transpose": False, "merge_transpose": False}, "without a transpose"),
        ({"merge_transpose": False}, "merged with reshape"),
        ({"interleave": True}, "merged interleaved"),
        ({"in_t": False, "out_t": False}, "multiply as they are stored (x_q @ w_q)"),
        ({"out_t": False}, "You multiplied by w_o as stored"),
        ({"in_t": False}, "You multiplied by w_q, w_k, w_v as stored"),
        ({"softmax_dim": 1}, "dim=1"),  # the keys of a 2-D matrix only
    ],
)
def test_forward_rejects(options, words):
    def wrong(*args):
        opts = dict(options)
        if opts.get("scale_width") == -1:
            opts["scale_width"] = args[0].size(-1)
        return _forward(*args, **opts)

    _failed("multi-head/forward", wrong, words)


def test_forward_names_a_single_weight_multiplied_as_stored():
    def key_as_stored(x_q, x_kv, w_q, w_k, w_v, w_o, num_heads):
        layer = torch.nn.MultiheadAttention(x_q.size(-1), num_heads, bias=False, batch_first=True)
        layer = layer.to(x_q.dtype)
        with torch.no_grad():  # in_proj_weight stacks W^Q, W^K, W^V in nn.Linear's layout
            layer.in_proj_weight.copy_(torch.cat([w_q, w_k.T, w_v]))
            layer.out_proj.weight.copy_(w_o)
        return layer(x_q, x_kv, x_kv, need_weights=False)[0]

    _failed("multi-head/forward", key_as_stored, "You multiplied by w_k as stored")


def test_forward_rejects_single_head_and_tuples():
    _failed(
        "multi-head/forward",
        lambda x_q, x_kv, w_q, w_k, w_v, w_o, h: _forward(x_q, x_kv, w_q, w_k, w_v, w_o, 1),
        "single-head",
    )
    _failed("multi-head/forward", lambda *a: (_forward(*a), None), "not a tuple")
    _failed("multi-head/forward", lambda *a: _forward(*a) + 1e-3, "differs from Concat")


# -- parameter count --------------------------------------------------------------------------------


def test_parameter_count():
    from attncourse import MultiHeadAttention

    truth = sum(p.numel() for p in MultiHeadAttention(512, 8).parameters())
    assert check("multi-head/parameter-count", truth).passed
    assert check("multi-head/parameter-count", torch.tensor(truth)).passed
    without_bias = sum(p.numel() for p in MultiHeadAttention(512, 8, bias=False).parameters())
    _failed("multi-head/parameter-count", without_bias, "not the biases")
    _failed("multi-head/parameter-count", truth - (512 * 512 + 512), "output projection W^O")
    _failed("multi-head/parameter-count", truth // 8, "divided by the number of heads")
    _failed("multi-head/parameter-count", truth * 8, "multiplied by the number of heads")
    _failed("multi-head/parameter-count", 12345, "is not it")
    _failed("multi-head/parameter-count", truth / 1e6, "in millions")
    _failed("multi-head/parameter-count", 1050, "in thousands")
    _failed("multi-head/parameter-count", 1.05e6, "rounded to 3 significant digits")
    _failed("multi-head/parameter-count", "1050624", "should be a number")


# -- find the bug: merging the heads -----------------------------------------------------------------

from attncourse.exercises.ch02_multihead import _merge_solution  # noqa: E402


def _merge_einops_style(heads):
    B, h, L, d = heads.shape
    return heads.permute(0, 2, 1, 3).contiguous().view(B, L, h * d)


def _merge_cat(heads):
    return torch.cat(heads.unbind(1), dim=-1)  # Concat(head_1, ..., head_h) along the features


def _merge_numpy(heads):
    a = heads.numpy()
    return torch.from_numpy(np.concatenate([a[:, i] for i in range(a.shape[1])], axis=-1))


def _merge_in_place(heads):
    B, h, L, d = heads.shape
    out = torch.empty(B, L, h * d, dtype=heads.dtype)
    for i in range(h):
        out[..., i * d : (i + 1) * d] = heads[:, i]
    return out


@pytest.mark.parametrize(
    "answer", [_merge_solution, _merge_einops_style, _merge_cat, _merge_numpy, _merge_in_place]
)
def test_merge_accepts_right_answers(answer):
    assert check("multi-head/fix-merge", answer).passed


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda t: t.reshape(t.size(0), t.size(2), -1), "still the given code"),
        (lambda t: t.permute(0, 2, 3, 1).reshape(t.size(0), t.size(2), -1), "interleaved"),
        (lambda t: t.flip(1).transpose(1, 2).reshape(t.size(0), t.size(2), -1), "reverse order"),
        (lambda t: t.transpose(1, 2).view(t.size(0), t.size(2), -1), "memory in order"),
        (lambda t: t.mean(1), "summed or averaged"),
        (lambda t: t.transpose(1, 2).reshape(t.size(0), t.size(2), -1).float(), "dtype"),
        (lambda t: t.transpose(1, 2).reshape(t.size(0), t.size(2), -1) * 2, "should give x back"),
    ],
)
def test_merge_rejects(wrong, words):
    _failed("multi-head/fix-merge", wrong, words)


def test_merge_stub_is_not_attempted():
    assert check("multi-head/fix-merge", _stub).status == "not attempted yet"


# -- experiment: dropout on the weights ---------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_dropout_std_accepts_independent_measurements(seed):
    torch.manual_seed(seed)
    sums = torch.nn.functional.dropout(torch.full((20_000, 10), 0.1), p=0.5, training=True).sum(-1)
    assert check("multi-head/dropout-row-sum", sums.std()).passed  # a one-element tensor
    assert check("multi-head/dropout-row-sum", float(np.std(sums.numpy()))).passed
    assert check("multi-head/dropout-row-sum", (0.5 / (0.5 * 10)) ** 0.5).passed  # the worked value


@pytest.mark.parametrize(
    "wrong,words",
    [
        (0.0, "dropout did nothing"),
        (0.0, "or it ran before the softmax"),  # whose normalisation undoes it
        (0.158, "without the 1 / (1 - p) rescaling"),
        (0.1, "variance"),
        (1.0, "mean of the row sums"),
        (0.5, "probability of dropping"),
        (0.25, "not what the experiment gives"),
    ],
)
def test_dropout_std_rejects(wrong, words):
    _failed("multi-head/dropout-row-sum", wrong, words)


def test_split_and_merge_are_written_not_delegated():
    """The notebook imports the package's split_heads and merge_heads: calling them passed."""
    from attncourse.multihead import merge_heads, split_heads

    _failed("multi-head/split-heads", lambda x, h: split_heads(x, h), "write yourself")
    _failed("multi-head/fix-merge", lambda heads: merge_heads(heads), "write yourself")
