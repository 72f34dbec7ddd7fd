"""The chapter 10 checkers accept right answers in several styles and name the usual mistakes."""

import collections
import dataclasses
import inspect
import math
import textwrap
import types

import numpy as np
import pytest
import torch
from exercise_helpers import REGISTRY, assert_fails, stub
from torch.autograd import backward as imported_backward
from torch.autograd import grad as imported_grad

from attncourse.exercises import _core, _i18n, check, solution
from attncourse.exercises.ch10_gpu import _CASES, _key_blocks_solution
from attncourse.kernels.tiles import key_block_range, tile_map
from attncourse.masks import causal_mask

ID = "gpu/causal-key-blocks"


def test_reference_agrees_with_the_masks_and_the_kernel_plan():
    for qb, bm, bn, L, S in _CASES:
        rows = causal_mask(L, S)[qb * bm : (qb + 1) * bm]
        from_mask = [
            c for c in range(math.ceil(S / bn)) if bool(rows[:, c * bn : (c + 1) * bn].any())
        ]
        assert _key_blocks_solution(qb, bm, bn, L, S) == from_mask
        lo, hi = key_block_range(qb * bm, bm, bn, S, L, causal=True)
        assert (
            from_mask == list(range(lo // bn, math.ceil(hi / bn))) if hi > lo else from_mask == []
        )


def _with_range(qb, bm, bn, L, S):  # a range object, from the last key
    last = min(S, qb * bm + bm + S - L)
    return range(0, -(-last // bn)) if last > 0 else range(0)


def _as_tensor(qb, bm, bn, L, S):  # the mask itself, in a tensor
    rows = causal_mask(L, S)[qb * bm : (qb + 1) * bm]
    visible = torch.nn.functional.pad(rows, (0, -S % bn)).view(rows.size(0), -1, bn).any(-1).any(0)
    return torch.nonzero(visible).flatten()


def _numpy(qb, bm, bn, L, S):
    keys = np.arange(S)
    queries = np.arange(qb * bm, min(qb * bm + bm, L))
    ok = keys[None, :] <= queries[:, None] + (S - L)
    return np.unique(keys[ok.any(0)] // bn)


def _whole_floats(qb, bm, bn, L, S):  # np.arange of a float count: whole floats are indices too
    return np.arange(float(len(_key_blocks_solution(qb, bm, bn, L, S))))


@pytest.mark.parametrize(
    "answer", [_key_blocks_solution, _with_range, _as_tensor, _numpy, _whole_floats]
)
def test_accepts(answer):
    assert check(ID, answer).passed


def _top_left(qb, bm, bn, L, S):
    return list(range(math.ceil(min(S, qb * bm + bm) / bn)))


def _floor(qb, bm, bn, L, S):
    return list(range(max(0, min(S, qb * bm + bm + S - L)) // bn))


def _ceil_of_the_last_index(qb, bm, bn, L, S):  # ceil(j / bn) of the last key's index j
    last = min(qb * bm + bm, L) - 1 + S - L
    return list(range(math.ceil(last / bn))) if last >= 0 else []


def _floor_of_the_last_index(qb, bm, bn, L, S):  # j // bn blocks: the +1 forgotten
    last = min(qb * bm + bm, L) - 1 + S - L
    return list(range(last // bn)) if last >= 0 else []


def _first_query(qb, bm, bn, L, S):  # the block's first query, not its last, sets the stop
    last = min(qb * bm, L - 1) + S - L
    return list(range(last // bn + 1)) if last >= 0 else []


def _everything(qb, bm, bn, L, S):
    return list(range(math.ceil(S / bn)))


def _never_empty(qb, bm, bn, L, S):
    return _key_blocks_solution(qb, bm, bn, L, S) or [0]


# the block's second-to-last query: the last key block it opens is missed
def _one_query_short(qb, bm, bn, L, S):
    last = min(qb * bm + bm, L) - 2 + S - L
    return list(range(last // bn + 1)) if last >= 0 else []


def _key_zero_is_no_key(qb, bm, bn, L, S):  # a last visible key 0 taken for "no key"
    last = min(qb * bm + bm, L) - 1 + S - L
    return list(range(last // bn + 1)) if last > 0 else []


def _cut_at_l_not_l_minus_1(qb, bm, bn, L, S):  # the last block's last query taken as L
    last = min(bm * (qb + 1) - 1, L) + S - L
    return list(range(last // bn + 1)) if last >= 0 else []


def _rounded_toward_zero(qb, bm, bn, L, S):  # int(last / bn): -5 / 16 rounds to block 0
    last = min(bm * (qb + 1), L) - 1 + S - L
    return list(range(int(last / bn) + 1))


@pytest.mark.parametrize(
    "wrong,words",
    [
        (_top_left, "top left"),
        (_floor, "dropped the last key block"),
        (_ceil_of_the_last_index, "j // block_n + 1"),
        (_floor_of_the_last_index, "dropped the last key block"),
        (_everything, "every key block"),
        (_first_query, "first query"),
        (_never_empty, "no key block at all"),
        (lambda *a: [0, 1], "should be"),
        (lambda *a: None, "list or range"),
        (_one_query_short, "L=33, S=33"),
        (_key_zero_is_no_key, "L=47, S=16"),
        (lambda *a: torch.ones(3, dtype=torch.bool), "returned booleans"),
        (lambda *a: [0.5, 1.5], "list or range of integers"),
        (_cut_at_l_not_l_minus_1, "L=48, S=48"),
        (_rounded_toward_zero, "L=50, S=30"),
        # which blocks are visible, as booleans of any kind, is not their indices
        (lambda *a: [True, False, True], "returned booleans"),
        (lambda *a: np.array([True, True]), "returned booleans"),
        (lambda *a: [np.bool_(True)], "returned booleans"),
        # nor are the characters of a string ("012" read as 0, 1, 2)
        (
            lambda qb, bm, bn, L, S: "".join(map(str, _key_blocks_solution(qb, bm, bn, L, S))),
            "got str",
        ),
        (
            lambda qb, bm, bn, L, S: [str(b) for b in _key_blocks_solution(qb, bm, bn, L, S)],
            "list or range of integers",
        ),
    ],
)
def test_diagnoses(wrong, words):
    assert_fails(ID, wrong, words)


def test_stub_is_not_attempted():
    assert check(ID, stub).status.startswith("not attempted")
    assert "last_key" in str(solution(ID))


def test_skipped_tiles():
    right = int(
        tile_map(4096, 4096, 64, 64, causal=True).sum()
        - tile_map(4096, 4096, 64, 64, window=244).sum()
    )
    for answer in (right, float(right), torch.tensor(right), np.int64(right).item()):
        assert check("gpu/span-skipped-tiles", answer).passed
    assert_fails(
        "gpu/span-skipped-tiles", int(tile_map(4096, 4096, 64, 64, window=244).sum()), "computes"
    )
    assert_fails(
        "gpu/span-skipped-tiles",
        4096 - int(tile_map(4096, 4096, 64, 64, window=244).sum()),
        "whole square",
    )
    assert_fails(
        "gpu/span-skipped-tiles", 2080 - int(tile_map(4096, 4096, 64, 64, window=180).sum()), "ramp"
    )
    assert_fails(
        "gpu/span-skipped-tiles",
        2080 - int(tile_map(4096, 4096, 64, 64, window=180 + 2 * 64).sum()),
        "ramp twice",
    )
    assert_fails("gpu/span-skipped-tiles", 2080 - 64 * 5, "fewer keys")
    assert_fails("gpu/span-skipped-tiles", 1000, "is not it")
    assert_fails("gpu/span-skipped-tiles", "1770", "number")
    assert str(right) in str(solution("gpu/span-skipped-tiles"))


def test_skipped_tiles_names_every_slip_that_gives_1830():
    """Three slips give the same count: the ramp left out, each block's keys counted from its
    last query, and ceil(W / 64) key blocks for every block; the message names all three."""
    causal = int(tile_map(4096, 4096, 64, 64, causal=True).sum())
    no_ramp = causal - int(tile_map(4096, 4096, 64, 64, window=180).sum())
    from_last_query = causal - sum(r - max(0, 64 * r + 63 - 244 + 1) // 64 + 1 for r in range(64))
    no_plus_one = causal - sum(min(r + 1, math.ceil(244 / 64)) for r in range(64))
    assert no_ramp == from_last_query == no_plus_one  # 1830
    message = check("gpu/span-skipped-tiles", no_ramp).message
    for slip in ("left out the ramp", "from its last query", "ceil(W / 64) key blocks"):
        assert slip in message, message


# -- the kernel exercises: through Triton's interpreter here (conftest sets TRITON_INTERPRET=1) --

try:
    import triton
    import triton.language as tl
except ImportError:  # the kernels below are plain functions until a test hands them to triton
    triton, tl = None, None

from attncourse.exercises import ch10_gpu  # noqa: E402

needs_triton = pytest.mark.skipif(triton is None, reason="triton is not installed")
SOFTMAX = "gpu/masked-softmax-kernel"
ONLINE = "gpu/online-softmax-kernel"


def _jit(fn):
    return triton.jit(fn)


# right answers in other styles


def softmax_arithmetic_mask(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # the mask as arithmetic: masked lanes get -1e30 added, exponentials multiplied by the mask
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    n = tl.load(LENGTHS + r)
    inside = (c < n).to(tl.float32)
    x = tl.load(X + r * stride_x + c, mask=c < n, other=0.0) - 1e30 * (1.0 - inside)
    e = tl.exp(x - tl.max(x, axis=0)) * inside
    tl.store(Y + r * stride_y + c, e / tl.maximum(tl.sum(e, axis=0), 1e-30), mask=c < n_cols)


def softmax_exp2(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # exp2 with log2(e) folded in, the maximum made finite for an empty row
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    length = tl.load(LENGTHS + row)
    x = (
        tl.load(X + row * stride_x + cols, mask=cols < length, other=float("-inf"))
        * 1.4426950408889634
    )
    m = tl.max(x, axis=0)
    m = tl.where(m == float("-inf"), 0.0, m)
    e = tl.exp2(x - m)
    total = tl.sum(e, axis=0)
    tl.store(Y + row * stride_y + cols, e / tl.where(total == 0, 1.0, total), mask=cols < n_cols)


def softmax_early_exit_style(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # loads the whole row under cols < n_cols, masks with tl.where afterwards
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    length = tl.load(LENGTHS + row)
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=0.0)
    x = tl.where(cols < length, x, float("-inf"))
    m = tl.maximum(tl.max(x, axis=0), -3.0e38)
    e = tl.exp(x - m)
    y = e / (tl.sum(e, axis=0) + (length == 0).to(tl.float32))
    tl.store(Y + row * stride_y + cols, y, mask=cols < n_cols)


@needs_triton
@pytest.mark.parametrize(
    "kernel",
    [
        ch10_gpu.masked_softmax_kernel,
        softmax_arithmetic_mask,
        softmax_exp2,
        softmax_early_exit_style,
    ],
)
@pytest.mark.parametrize("decorated", [True, False])
def test_masked_softmax_accepts(kernel, decorated):
    result = check(SOFTMAX, _jit(kernel) if decorated else kernel)
    assert result.passed, result


# realistic wrong answers


def softmax_no_lengths(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride_y + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def _softmax_variant(
    polarity="<",
    store="cols < n_cols",
    row_stride="stride_x",
    other='float("-inf")',
    shift=True,
    guard=True,
):
    """A masked-softmax kernel with one mistake, as source (Triton needs a function's source)."""
    keep = {
        "<": "cols < length",
        ">=": "(cols >= length) & (cols < n_cols)",
        "<=": "cols <= length",
    }[polarity]
    source = f"""
def kernel(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    length = tl.load(LENGTHS + row)
    keep = {keep}
    x = tl.load(X + row * {row_stride} + cols, mask=keep, other={other})
    e = tl.exp(x - tl.max(x, axis=0)) if {shift} else tl.exp(x)
    e = tl.where(keep, e, 0.0) if {guard} else e
    total = tl.sum(e, axis=0)
    y = tl.where(total > 0, e / total, 0.0) if {guard} else e / total
    tl.store(Y + row * stride_y + cols, y{", mask=" + store if store else ""})
"""
    return _from_source(source, "kernel")


def _from_source(source, name):
    import linecache

    filename = f"<test kernel {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"tl": tl, "triton": triton}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


@needs_triton
@pytest.mark.parametrize(
    "variant,words",
    [
        (dict(), None),  # the variant builder's right answer: the checker must accept it
        (dict(polarity=">="), "mask is inverted"),
        # cols <= length: one column too many
        (dict(polarity="<="), "read X[0, 37], past its last column"),
        (dict(store="keep"), "still hold what Y held"),
        (dict(store=""), "wrote Y[0, 37], past its last column"),
        (dict(row_stride="n_cols"), "read X[0, 37]"),
        (dict(other="0.0", guard=False), "loaded as 0"),
        (dict(shift=False), "tl.exp overflowed"),
        (dict(guard=False), "row of length 0"),
    ],
)
def test_masked_softmax_diagnoses(variant, words):
    kernel = _jit(_softmax_variant(**variant))
    if words is None:
        assert check(SOFTMAX, kernel).passed
    else:
        assert_fails(SOFTMAX, kernel, words)


@needs_triton
def test_the_cases_label_is_translated_too():
    """The label of the case a kernel fails (marked N_ in the checker's table) reads in the
    learner's language; it once stood in English inside a Chinese message."""
    message = check(SOFTMAX, _jit(softmax_no_lengths), language="zh").message
    labels = [case[0] for case in ch10_gpu._SOFTMAX_CASES]
    with _i18n.language("zh"):
        chinese = [_i18n._(label) for label in labels]
    assert any(label in message for label in chinese), message
    assert not any(label in message for label in labels), message


@needs_triton
def test_masked_softmax_other_failures(monkeypatch):
    assert_fails(SOFTMAX, _jit(softmax_no_lengths), "lengths are ignored")
    assert_fails(SOFTMAX, 42, "function decorated with @triton.jit")
    assert_fails(SOFTMAX, lambda X, Y: None, "written with def and decorated with @triton.jit")

    def stub_kernel(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        raise NotImplementedError  # your code here

    assert check(SOFTMAX, _jit(stub_kernel)).status.startswith("not attempted")

    def forever(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        while True:
            pass

    # a kernel that never ends is stopped by check()'s time limit: a short one, or this waits
    # the learner's 10 s twice (in English and in Chinese)
    monkeypatch.setattr(_core, "TIME_LIMIT_S", 0.5)
    assert_fails(SOFTMAX, forever, "time limit")


@needs_triton
def test_run_masked_softmax_is_the_notebooks_launcher():
    x, lengths = torch.randn(3, 20), torch.tensor([20, 7, 0])
    y = ch10_gpu.run_masked_softmax(_jit(ch10_gpu.masked_softmax_kernel), x, lengths)
    expected = torch.softmax(x[1, :7], -1)
    torch.testing.assert_close(y[1, :7].cpu(), expected)
    assert (y[1, 7:] == 0).all() and (y[2] == 0).all()
    with pytest.raises(ValueError, match="lengths"):
        ch10_gpu.run_masked_softmax(ch10_gpu.masked_softmax_kernel, x, torch.tensor([21, 0, 0]))
    with pytest.raises(ValueError, match="block"):
        ch10_gpu.run_masked_softmax(ch10_gpu.masked_softmax_kernel, x, lengths, block=24)
    with pytest.raises(RuntimeError, match="wrote"):
        ch10_gpu.run_masked_softmax(_softmax_variant(store=""), x, lengths)


# -- the online softmax kernel -----------------------------------------------------------------


def _online_kernel(name, body):
    """An online-softmax kernel named ``name``: the signature of the chapter's
    ``online_softmax_kernel``, which every learner's kernel keeps, and ``body``, as source
    (Triton needs a function's source)."""
    source = textwrap.dedent(inspect.getsource(ch10_gpu.online_softmax_kernel))
    signature = source[: source.index("\n):\n") + len("\n):\n")]
    signature = signature.replace("online_softmax_kernel", name, 1)
    return _from_source(
        signature + textwrap.indent(textwrap.dedent(body).lstrip("\n"), "    "), name
    )


# exp2 with log2(e) folded into the scores, masks by tl.where, a broadcast sum for P V
online_exp2_where = _online_kernel(
    "online_exp2_where",
    """
    LOG2E: tl.constexpr = 1.4426950408889634
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    m_i = tl.zeros((BLOCK_M,), tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, n_keys, BLOCK_N):
        k = start + tl.arange(0, BLOCK_N)
        inside = (r[:, None] < n_rows) & (k[None, :] < n_keys)
        s = tl.load(S + r[:, None] * stride_s + k[None, :], mask=inside, other=0.0)
        s = tl.where(inside, s * LOG2E, float("-inf"))
        v = tl.load(V + k[:, None] * stride_v + d[None, :], mask=k[:, None] < n_keys, other=0.0)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        scale = tl.exp2(m_i - m_new)
        acc = acc * scale[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        l_i = l_i * scale + tl.sum(p, 1)
        m_i = m_new
    tl.store(O + r[:, None] * stride_o + d[None, :], acc / l_i[:, None], mask=r[:, None] < n_rows)
    """,
)

# the rows' loads masked once, a safe shift for the padding rows, tl.dot for P V
online_deferred_lse = _online_kernel(
    "online_deferred_lse",
    """
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    dims = tl.arange(0, D)
    m = tl.full((BLOCK_M,), -1.0e38, tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, n_keys, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        s = tl.load(
            S + rows[:, None] * stride_s + keys[None, :],
            mask=row_ok[:, None] & (keys[None, :] < n_keys),
            other=-1.0e38,
        )
        v = tl.load(
            V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0
        )
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        correction = tl.exp(m - m_new)
        l = l * correction + tl.sum(p, axis=1)
        acc = acc * correction[:, None]
        acc = tl.dot(p, v, acc, input_precision="ieee")
        m = m_new
    out = acc / l[:, None]
    tl.store(O + rows[:, None] * stride_o + dims[None, :], out, mask=row_ok[:, None])
    """,
)


# no loop: a whole row loaded at once in a block of 128 keys, enough for rows of up to 128 keys
online_one_block = _online_kernel(
    "online_one_block",
    """
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    keys = tl.arange(0, 128)
    dims = tl.arange(0, D)
    inside = (rows[:, None] < n_rows) & (keys[None, :] < n_keys)
    s = tl.load(S + rows[:, None] * stride_s + keys[None, :], mask=inside, other=float("-inf"))
    v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
    p = tl.exp(s - tl.max(s, axis=1)[:, None])
    out = tl.dot(p, v, input_precision="ieee") / tl.sum(p, axis=1)[:, None]
    tl.store(O + rows[:, None] * stride_o + dims[None, :], out, mask=rows[:, None] < n_rows)
    """,
)


@needs_triton
def test_online_softmax_without_a_loop_over_the_tiles_is_rejected():
    assert_fails(ONLINE, _jit(online_one_block), "sees only the first 128 keys")


@needs_triton
@pytest.mark.parametrize(
    "kernel", [ch10_gpu.online_softmax_kernel, online_exp2_where, online_deferred_lse]
)
def test_online_softmax_accepts(kernel):
    result = check(ONLINE, _jit(kernel))
    assert result.passed, result


def _online_variant(**change):
    """The solution with one line replaced: {line's start: new line}."""
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(ch10_gpu.online_softmax_kernel))
    for old, new in change.items():
        assert old in source, old
        source = source.replace(old, new)
    return _jit(_from_source(source, "online_softmax_kernel"))


@needs_triton
@pytest.mark.parametrize(
    "change,words",
    [
        ({"acc = correction[:, None] * acc +": "acc = acc +"}, "accumulator is not rescaled"),
        ({"l = correction * l +": "l = l +"}, "running sum is not rescaled"),
        ({"acc / l[:, None]": "acc"}, "not divided by the running sum"),
        (
            {
                "p = tl.exp(s - m_new[:, None])": "p = tl.exp(s)",
                "correction = tl.exp(m - m_new)": "correction = 1.0",
            },
            "overflowed",
        ),
        ({"m_new = tl.maximum(m, tl.max(s, axis=1))": "m_new = tl.max(s, axis=1)"}, "overflowed"),
        ({'other=float("-inf"),\n        )': "other=0.0,\n        )"}, "loaded as 0"),
        (
            {
                "mask=(rows[:, None] < n_rows) & (keys[None, :] < n_keys)": (
                    "mask=rows[:, None] < n_rows"
                )
            },
            "S[0, 50]",
        ),
        ({"mask=keys[:, None] < n_keys, other=0.0": "mask=None"}, "read V at row 50"),
        ({"mask=rows[:, None] < n_rows\n": "mask=None\n"}, "wrote O at row 40"),
        ({"rows[:, None] * stride_s": "rows[:, None] * n_keys"}, "read S["),
        ({"keys[:, None] * stride_v": "keys[:, None] * D"}, "read V[0, 16]"),
    ],
)
def test_online_softmax_diagnoses(change, words):
    assert_fails(ONLINE, _online_variant(**change), words)


@needs_triton
def test_run_online_softmax_is_the_notebooks_launcher():
    scores, value = torch.randn(20, 37), torch.randn(37, 16)
    out = ch10_gpu.run_online_softmax(
        _jit(ch10_gpu.online_softmax_kernel), scores, value, block_n=32
    )
    torch.testing.assert_close(out.cpu(), torch.softmax(scores, -1) @ value, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="block_n"):
        ch10_gpu.run_online_softmax(ch10_gpu.online_softmax_kernel, scores, value, block_n=8)
    with pytest.raises(TypeError, match="value"):
        ch10_gpu.run_online_softmax(ch10_gpu.online_softmax_kernel, scores, value.double())


def test_kernel_checks_without_triton_say_so_and_set_the_interpreter_themselves():
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import os, sys
        import torch
        missing = len(sys.argv) > 1
        if missing:
            sys.modules["triton"] = None  # as on macOS or Windows
        from attncourse.exercises import check
        from attncourse.exercises.ch10_gpu import masked_softmax_kernel
        result = check("gpu/masked-softmax-kernel", masked_softmax_kernel)
        print(result.status, os.environ.get("TRITON_INTERPRET"), result.message.splitlines()[0])
    """)
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    missing = subprocess.run(
        [sys.executable, "-c", script, "missing"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout.startswith("failed") and "not installed" in missing.stdout, missing.stdout
    if triton is not None and not torch.cuda.is_available():
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("passed 1 "), done.stdout


# -- find the bug ------------------------------------------------------------------------------

BUG = "gpu/find-the-bug"


@needs_triton
def test_bug_listing_is_wrong_on_line_6_only():
    from exercise_helpers import notebook_listing

    lines = notebook_listing("10_gpu_attention.ipynb", "ex-gpu-find-the-bug")
    assert len(lines) == 10 and "j < i + S - L" in lines[5]

    def run(listing, L, S):
        kernel = _jit(
            _from_source(
                "\n".join(line for line in listing if not line.startswith("@")) + "\n",
                "causal_softmax",
            )
        )
        x = torch.randn(L, S)
        p = torch.full((L, S), -1.0)
        kernel[(L,)](x, p, L, S, x.stride(0), p.stride(0), BLOCK_S=triton.next_power_of_2(S))
        weights = torch.softmax(x.masked_fill(~causal_mask(L, S), float("-inf")), -1)
        return p, weights

    buggy, expected = run(lines, 6, 6)
    assert buggy[0].isnan().all() and not torch.allclose(buggy[1:], expected[1:])
    fixed = list(lines)
    fixed[5] = "    visible = (j < S) & (j <= i + S - L)"
    for L, S in [(6, 6), (5, 9), (1, 3)]:
        got, expected = run(fixed, L, S)
        torch.testing.assert_close(got, expected)


# -- the backward pass -------------------------------------------------------------------------

BACKWARD = "gpu/backward"


def _backward_autograd(query, key, value, out, lse, dout):  # the learner who lets autograd do it
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (query, key, value))
    with torch.enable_grad():
        o = torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, -1) @ v
        return torch.autograd.grad(o, (q, k, v), dout)


def _backward_softmax_style(query, key, value, out, lse, dout):  # P from softmax, D from P and dP
    scale = 1 / math.sqrt(query.shape[-1])
    p = torch.softmax(torch.einsum("...ld,...sd->...ls", query, key) * scale, dim=-1)
    dp = torch.einsum("...le,...se->...ls", dout, value)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    return (
        torch.einsum("...ls,...sd->...ld", ds, key) * scale,
        torch.einsum("...ls,...ld->...sd", ds, query) * scale,
        torch.einsum("...ls,...le->...se", p, dout),
    )


@pytest.mark.parametrize("answer", [ch10_gpu.attention_backward, _backward_softmax_style])
def test_backward_accepts(answer):
    assert check(BACKWARD, answer).passed


def _backward_by_backward(query, key, value, out, lse, dout):  # .backward() on a recomputation
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (query, key, value))
    with torch.enable_grad():
        torch.nn.functional.scaled_dot_product_attention(q, k, v).backward(dout)
    return q.grad, k.grad, v.grad


def _recomputed(query, key, value):
    """Leaves that require grad, and attention recomputed on them."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (query, key, value))
    return (q, k, v), torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, -1) @ v


def _backward_imported_grad(query, key, value, out, lse, dout):  # from torch.autograd import grad
    with torch.enable_grad():
        leaves, o = _recomputed(query, key, value)
        return imported_grad(o, leaves, dout)


def _backward_imported_backward(query, key, value, out, lse, dout):
    with torch.enable_grad():
        leaves, o = _recomputed(query, key, value)
        imported_backward(o, dout)
    return tuple(t.grad for t in leaves)


def _backward_forward_mode(query, key, value, out, lse, dout):  # torch.func.jacfwd
    def loss(q, k, v):
        return (torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, -1) @ v * dout).sum()

    return torch.func.jacfwd(loss, argnums=(0, 1, 2))(query, key, value)


@pytest.mark.parametrize(
    "answer",
    [
        _backward_autograd,
        _backward_by_backward,
        _backward_imported_grad,
        _backward_imported_backward,
        _backward_forward_mode,
    ],
)
def test_backward_refuses_autograd(answer):
    """The exercise writes the backward as the kernels do; autograd is what it is checked with."""
    assert_fails(BACKWARD, answer, "writes the backward by hand")


def _backward_with(index):
    """The ``index``-th known mistake of the backward (by position: its message, the key, is in
    the language spoken when the checker calls it)."""

    def fn(query, key, value, out, lse, dout):
        return list(ch10_gpu._backward_variants(query, key, value, out, lse, dout).values())[index]

    return fn


@pytest.mark.parametrize(
    "index,words",
    [
        (0, "D is missing"),
        (1, "sign of D"),
        (2, "lacks the factor P"),
        (3, "wrong dimension"),
        (4, "lack the scale"),
        (5, "without the scale"),
    ],
)
def test_backward_diagnoses(index, words):
    assert_fails(BACKWARD, _backward_with(index), words)


def test_backward_rejects_shapes_and_transposes():
    def dv_not_transposed(query, key, value, out, lse, dout):
        dq, dk, dv = ch10_gpu.attention_backward(query, key, value, out, lse, dout)
        p = torch.exp(query @ key.transpose(-2, -1) * query.size(-1) ** -0.5 - lse[..., None])
        return dq, dk, p @ dout

    assert_fails(BACKWARD, dv_not_transposed, "shapes cannot be multiplied")
    assert_fails(BACKWARD, lambda *a: ch10_gpu.attention_backward(*a)[:2], "three gradients")
    assert_fails(
        BACKWARD, lambda *a: tuple(g.float() for g in ch10_gpu.attention_backward(*a)), "dtype"
    )
    assert check(BACKWARD, stub).status.startswith("not attempted")


@needs_triton
def test_the_solution_kernels_compile_for_a_gpu():
    """The GPU path of the checks: the solutions are real Triton, compiled here without a GPU
    (for an A100's sm_80, with the ptxas that the triton wheel ships)."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import triton, triton.language as tl
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from attncourse.exercises import ch10_gpu
        ch10_gpu.tl = tl
        ptrs = lambda *names: {n: "*fp32" for n in names}
        softmax = {**ptrs("X", "Y"), "LENGTHS": "*i32", "n_cols": "i32", "stride_x": "i32",
                   "stride_y": "i32", "BLOCK": "constexpr"}
        online = {**ptrs("S", "V", "O"), **{n: "i32" for n in ("n_rows", "n_keys", "stride_s",
                  "stride_v", "stride_o")}, "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                  "D": "constexpr"}
        for fn, signature, constants in [
            (ch10_gpu.masked_softmax_kernel, softmax, {(6,): 64}),
            (ch10_gpu.online_softmax_kernel, online, {(8,): 16, (9,): 32, (10,): 16}),
        ]:
            kernel = triton.compile(ASTSource(triton.jit(fn), signature, constants),
                                    target=GPUTarget("cuda", 80, 32))
            print(fn.__name__, "mma" if "mma" in kernel.asm["ttgir"] else "no mma")
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == [
        "masked_softmax_kernel no mma",
        "online_softmax_kernel mma",
    ]


# -- issue 31: independently written right and wrong kernels -----------------------------------


def _softmax_kernel(body, name="kernel", **globals_):
    """A masked-softmax kernel from the lines of its body (after ``row``, ``cols``, ``length``
    and ``keep``), as source."""
    source = (
        "def kernel(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):\n"
        "    row = tl.program_id(0)\n"
        "    cols = tl.arange(0, BLOCK)\n"
        "    length = tl.load(LENGTHS + row)\n"
        "    keep = cols < length\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return _from_source_with(source, name, globals_)


def _from_source_with(source, name, globals_):
    import linecache

    filename = f"<test kernel {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"tl": tl, "triton": triton, **globals_}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


_RIGHT_TAIL = (  # the rest of a right kernel, after x is loaded
    "\nm = tl.max(x, axis=0)"
    "\ne = tl.where(keep, tl.exp(x - m), 0.0)"
    "\ntotal = tl.sum(e, axis=0)"
    "\ny = tl.where(total > 0, e / total, 0.0)"
    "\ntl.store(Y + row * stride_y + cols, y, mask=cols < n_cols)\n"
)


@needs_triton
@pytest.mark.parametrize(
    "load,words",
    [
        # other=0.0, exponentials zeroed by tl.where: the 0 enters only the maximum
        ("x = tl.load(X + row * stride_x + cols, mask=keep, other=0.0)", "enters the maximum"),
        # the maximum over every column below n_cols, the padding's too
        (
            'x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))',
            "past each row's length",
        ),
    ],
)
def test_masked_softmax_names_what_its_maximum_takes_in(load, words):
    assert_fails(SOFTMAX, _jit(_softmax_kernel(load + _RIGHT_TAIL)), words)


@needs_triton
def test_masked_lanes_loaded_as_zero_and_summed_over_n_cols_are_named():
    kernel = _softmax_kernel("""
        x = tl.load(X + row * stride_x + cols, mask=keep, other=0.0)
        e = tl.exp(x - tl.max(x, axis=0))
        total = tl.sum(tl.where(cols < n_cols, e, 0.0), axis=0)
        tl.store(Y + row * stride_y + cols, tl.where(keep, e / total, 0.0), mask=cols < n_cols)
    """)
    assert_fails(SOFTMAX, _jit(kernel), "count in the sum")


@needs_triton
def test_right_kernels_with_helpers_and_constexpr_globals_compile_for_a_gpu():
    """What the compile step ships to a fresh Python (a @triton.jit helper, a tl.constexpr global,
    a dtype global) is enough: right kernels are not refused, and the check says it compiled."""
    helper = _from_source_with("def row_max(x):\n    return tl.max(x, axis=0)\n", "row_max", {})
    kernel = _softmax_kernel(
        """
        x = tl.load(X + row * stride_x + cols, mask=keep, other=float("-inf")).to(ACC)
        m = row_max(x)
        e = tl.where(keep, tl.exp2((x - m) * LOG2E), 0.0)
        total = tl.sum(e, axis=0)
        tl.store(Y + row * stride_y + cols, tl.where(total > 0, e / total, 0.0), mask=cols < n_cols)
        """,
        row_max=_jit(helper),
        LOG2E=tl.constexpr(1.4426950408889634),
        ACC=tl.float32,
    )
    # and a name imported from triton.language (from triton.language import constexpr)
    annotated = _from_source_with(
        textwrap.dedent(inspect.getsource(ch10_gpu.masked_softmax_kernel)).replace(
            "BLOCK: tl.constexpr", "BLOCK: constexpr"
        ),
        "masked_softmax_kernel",
        {"constexpr": tl.constexpr},
    )
    for right in (kernel, annotated):
        result = check(SOFTMAX, _jit(right))
        assert result.passed, result
        if not torch.cuda.is_available():
            assert "compiles for a GPU (sm_80)" in result.message


@needs_triton
def test_what_only_the_gpu_compiler_refuses_is_refused_in_plain_words():
    # a plain module-level float read inside the kernel (not a tl.constexpr)
    scaled = _softmax_kernel(
        'x = tl.load(X + row * stride_x + cols, mask=keep, other=float("-inf")) * SCALE'
        + _RIGHT_TAIL,
        SCALE=1.0,
    )
    assert_fails(SOFTMAX, _jit(scaled), "reads the global variable SCALE")
    # a loop sum started as an int and reassigned a float
    assert_fails(
        ONLINE,
        _online_variant(**{"l = tl.zeros((BLOCK_M,), tl.float32)": "l = 0"}),
        "l is int32 before the loop and fp32[16] inside it",
    )


@needs_triton
def test_the_gpu_compile_explains_the_compilers_complaints():
    complaint = ch10_gpu._compiler_complaint(
        "CompilationError",
        'AssertionError("Mismatched type for s between then block (fp32) and else block (int32)")',
        3,
        "def k(X):\n    if X:\n        s = 1.0\n",
    )
    assert "s is fp32 after the if and int32 after the else" in complaint
    assert "line 3 (s = 1.0)" in complaint
    other = ch10_gpu._compiler_complaint("CompilationError", "ValueError('odd')", 9, "")
    assert other.endswith("CompilationError: odd") and "line 9 (?)" in other


@needs_triton
def test_a_compiler_that_cannot_be_run_is_not_held_against_the_learner(monkeypatch):
    monkeypatch.setattr(ch10_gpu, "_COMPILED", {})
    monkeypatch.setattr(ch10_gpu.sys, "executable", "/nonexistent/python")
    result = check(SOFTMAX, _jit(ch10_gpu.masked_softmax_kernel))
    assert result.passed and "compiles for a GPU" not in result.message, result


@needs_triton
def test_online_softmax_names_a_float16_accumulator():
    kernel = _online_variant(
        **{
            "acc = tl.zeros((BLOCK_M, D), tl.float32)": "acc = tl.zeros((BLOCK_M, D), tl.float16)",
            "acc = correction[:, None] * acc + tl.dot(p, v)": (
                "acc = (correction[:, None] * acc + tl.dot(p, v)).to(tl.float16)"
            ),
        }
    )
    assert_fails(ONLINE, kernel, "the rounding of float16")


@needs_triton
def test_online_softmax_with_block_m_written_as_a_number_is_rejected():
    kernel = _online_variant(
        **{
            "rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)": (
                "rows = tl.program_id(0) * 16 + tl.arange(0, 16)"
            ),
            "tl.full((BLOCK_M,)": "tl.full((16,)",
            "tl.zeros((BLOCK_M,)": "tl.zeros((16,)",
            "tl.zeros((BLOCK_M, D)": "tl.zeros((16, D)",
        }
    )
    assert_fails(ONLINE, kernel, "rows 32-39 of O were never written")


@needs_triton
@pytest.mark.parametrize(
    "change,words",
    [
        # the running maximum started at 0: a row far below 0 underflows to 0/0, not overflows
        (
            {
                'm = tl.full((BLOCK_M,), float("-inf"), tl.float32)': "m = tl.zeros((BLOCK_M,), tl.float32)"
            },
            "underflowed to 0",
        ),
        # m updated before the correction: correction is always 1
        (
            {"correction = tl.exp(m - m_new)": "m = m_new\n        correction = tl.exp(m - m_new)"},
            "correction is always 1",
        ),
    ],
)
def test_online_softmax_diagnoses_the_running_maximum(change, words):
    result = check(ONLINE, _online_variant(**change))
    assert result.status == "failed" and words in result.message, result
    assert "overflowed" not in result.message and "largest difference" not in result.message


@pytest.mark.parametrize("answer", ["3", "6", "line 7", "", "seven"])
def test_find_the_bug_does_not_show_the_answer_to_a_string(answer):
    message = check(BUG, answer).message
    assert "as a number" in message and "6" not in message.replace(repr(answer), ""), message


_FAR_ATOMIC = """
import os
os.environ.setdefault("TRITON_INTERPRET", "1")
import linecache, triton, triton.language as tl
from attncourse.exercises import check, ch10_gpu
source = '''
def kernel(X, Y, LENGTHS, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.atomic_add(Y + row * 100000000 + cols, 1.0)
'''
linecache.cache["<far>"] = (len(source), None, source.splitlines(True), "<far>")
namespace = {"tl": tl, "triton": triton}
exec(compile(source, "<far>", "exec"), namespace)
kernel = triton.jit(namespace["kernel"])
print("CHECK", check("gpu/masked-softmax-kernel", kernel).message.splitlines()[0])
# past the check's refusal: the interpreter's atomics are bounds-checked too
triton_, device = ch10_gpu._triton()
import torch
x, lengths = torch.randn(3, 16), torch.tensor([16, 3, 0])
try:
    ch10_gpu.run_masked_softmax(kernel, x, lengths)
except RuntimeError as error:
    print("RUN", error)
"""


@needs_triton
def test_an_atomic_far_outside_its_tensor_does_not_end_the_learners_process():
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _FAR_ATOMIC], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "CHECK Your kernel calls tl.atomic_add" in done.stdout, done.stdout
    assert "RUN your kernel wrote outside every tensor" in done.stdout, done.stdout


@needs_triton
def test_an_atomic_into_an_input_is_refused():
    kernel = _softmax_kernel(
        'x = tl.load(X + row * stride_x + cols, mask=keep, other=float("-inf"))\n'
        "tl.atomic_add(X + row * stride_x + cols, 1.0, mask=keep)" + _RIGHT_TAIL
    )
    assert_fails(SOFTMAX, _jit(kernel), "calls tl.atomic_add")


def test_a_kernel_that_changes_its_input_is_told_so():
    """On a GPU nothing bounds-checks a store: the inputs are compared after the run."""
    device = torch.device("meta")  # neither the interpreter's checks nor a GPU synchronisation
    x = ch10_gpu._place("X", torch.ones(2, 4), torch.device("cpu"))
    y = ch10_gpu._place("Y", torch.zeros(2, 4), torch.device("cpu"), fill=-3.0, writable=True)

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: x.view.add_(1.0)

    error = ch10_gpu._launch(Kernel(), (2,), [x, y], device, [], {})
    assert error is not None and "changed its input X" in error


@needs_triton
def test_errors_inside_a_jit_helper_arrive_unwrapped():
    helper = _from_source_with("def bad(x):\n    return tl.reshape(x, (3, 7))\n", "bad", {})
    kernel = _softmax_kernel(
        'x = bad(tl.load(X + row * stride_x + cols, mask=keep, other=float("-inf")))' + _RIGHT_TAIL,
        bad=_jit(helper),
    )
    result = check(SOFTMAX, _jit(kernel))
    assert "your kernel raised ValueError: Shape element 0 must be a power of 2" in result.message
    assert "InterpreterError" not in result.message


def _float32_inside(query, key, value, out, lse, dout):
    grads = ch10_gpu.attention_backward(*(t.float() for t in (query, key, value, out, lse, dout)))
    return tuple(g.double() for g in grads)


def _dk_dv_swapped(*args):
    dq, dk, dv = ch10_gpu.attention_backward(*args)
    return dq, dv, dk


def _fails_on_a_batch(query, key, value, out, lse, dout):
    if query.dim() > 2:
        raise RuntimeError("cannot handle a batch")
    return ch10_gpu.attention_backward(query, key, value, out, lse, dout)


@pytest.mark.parametrize(
    "answer,words",
    [
        (_float32_inside, "right to about float32's precision"),
        (_dk_dv_swapped, "returned as (dq, dv, dk)"),
        (_fails_on_a_batch, "With batch (2, 3), L=S=6, d_k=d_v=4: Your function raised"),
    ],
)
def test_backward_names_precision_order_and_the_failing_case(answer, words):
    assert_fails(BACKWARD, answer, words)


@pytest.mark.parametrize(
    "answer",
    [
        lambda qb, bm, bn, L, S: range(
            key_block_range(qb * bm, bm, bn, S, L, causal=True)[0] // bn,
            -(-key_block_range(qb * bm, bm, bn, S, L, causal=True)[1] // bn),
        ),
        lambda qb, bm, bn, L, S: tile_map(L, S, bm, bn, causal=True)[qb].nonzero().flatten(),
    ],
)
def test_key_blocks_refuses_the_package_plan(answer):
    assert_fails(ID, answer, "which this exercise asks you to write yourself")


def test_key_blocks_stops_a_generator_that_never_ends(monkeypatch):
    """An iterator is drawn inside the time-limited call: one that yields for ever is cut at
    10,000 indices, one that filters for ever is stopped by the time limit (1 s here)."""
    import itertools
    import time

    monkeypatch.setattr(_core, "TIME_LIMIT_S", 1.0)

    def endless(query_block, block_m, block_n, query_len, key_len):
        return itertools.count()

    def filters_for_ever(query_block, block_m, block_n, query_len, key_len):
        last = min((query_block + 1) * block_m, query_len) - 1 + key_len - query_len
        return (b for b in itertools.count() if b * block_n <= last)

    assert_fails("gpu/causal-key-blocks", endless, "more than 10,000 block indices")
    started = time.monotonic()
    assert_fails("gpu/causal-key-blocks", filters_for_ever, "more than 1 s")
    assert time.monotonic() - started < 6  # both languages


def test_key_blocks_says_which_case_raised():
    def fails_when_l_differs(qb, bm, bn, L, S):
        if L != S:
            raise ValueError("L must equal S")
        return _key_blocks_solution(qb, bm, bn, L, S)

    assert_fails(
        ID, fails_when_l_differs, "At query block 0, block_m=32, block_n=16, L=40, S=100: Your"
    )


# -- issue 29: achieved TFLOP/s and the roofline, measured on a GPU -------------------------------

ROOFLINE = "gpu/roofline-fraction"
T4 = dict(peak_flops=8.1e12, bandwidth=320e9)  # CUDA cores, the chapter's kernels
T4_TENSOR = dict(peak_flops=65e12, bandwidth=320e9)
H100 = dict(peak_flops=989e12, bandwidth=3.35e12)


@pytest.fixture
def on_a_gpu(monkeypatch):
    """A CUDA runtime, as far as the check can tell (it asks torch.cuda.is_available())."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def _measured(
    batch=4,
    heads=8,
    L=2048,
    S=2048,
    d_k=64,
    causal=True,
    ms=3.1,
    peak_flops=8.1e12,
    bandwidth=320e9,
    exact=False,
    **changes,
):
    """A right answer, as a learner computes it from a time ``ms``; ``changes`` replace fields."""
    if exact:  # the exact count of the causal pairs (attncourse.benchmarks.measure.attention_flops)
        from attncourse.benchmarks.measure import attention_flops

        flops = attention_flops(batch, heads, L, S, d_k, causal=causal)
    else:
        flops = 4 * batch * heads * L * S * d_k // (2 if causal else 1)
    tflops = flops / (ms * 1e-3) / 1e12
    intensity = flops / (2 * batch * heads * (2 * L * d_k + 2 * S * d_k))
    roofline = min(peak_flops, intensity * bandwidth)
    answer = dict(
        ms=ms,
        batch=batch,
        heads=heads,
        L=L,
        S=S,
        d_k=d_k,
        causal=causal,
        flops=flops,
        tflops=tflops,
        peak_flops=peak_flops,
        bandwidth=bandwidth,
        intensity=intensity,
        fraction=tflops * 1e12 / roofline,
    )
    answer.update(changes)
    return answer


@dataclasses.dataclass
class Measurement:
    ms: float
    batch: int
    heads: int
    L: int
    S: int
    d_k: int
    causal: bool
    flops: float
    tflops: float
    peak_flops: float
    bandwidth: float
    intensity: float
    fraction: float
    device: str = "Tesla T4"


MeasurementTuple = collections.namedtuple("MeasurementTuple", list(_measured()))


def test_roofline_on_a_cpu_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = check(ROOFLINE, _measured())
    assert result.status.startswith("not attempted")
    assert "Runtime > Change runtime type > T4 GPU" in result.message
    assert "not graded" in result.message


@pytest.mark.parametrize("gpu", [True, False])
def test_roofline_stub_is_not_attempted(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    stub_answer = {field: ... for field in _measured()}
    result = check(ROOFLINE, stub_answer)
    assert result.status.startswith("not attempted") and "ms is still" in result.message
    with_field = Measurement(**{**_measured(), "tflops": ...})
    result = check(ROOFLINE, with_field)
    assert result.status.startswith("not attempted") and "tflops is still" in result.message


@pytest.mark.parametrize(
    "answer",
    [
        _measured(),  # T4, CUDA cores, causal, L = S
        _measured(exact=True),  # the causal pairs counted exactly
        _measured(causal=False, ms=6.0),
        _measured(causal=True, L=1024, S=4096, exact=True, ms=6.0),  # L < S: the exact causal count
        _measured(causal=False, ms=1.0, **T4_TENSOR),
        _measured(causal=False, ms=3.0, batch=8, heads=16, L=4096, S=4096, d_k=128, **H100),
        _measured(causal=True, ms=0.05, **H100),  # memory-bound? no: past the ridge
        # memory-bound
        _measured(batch=8, heads=8, L=64, S=64, causal=False, ms=0.012, **T4_TENSOR),
        _measured(ms=3.1, device="Tesla T4"),
        # one query decoding after a long cache: about 1 FLOP/byte at best, and right
        _measured(batch=4, heads=8, L=1, S=4096, d_k=64, causal=True, exact=True, ms=0.3),
        # the solution's count with L != S (the causal pairs, not half of L * S)
        _measured(causal=True, L=1024, S=2048, exact=True, ms=4.0),
        _measured(ms=3.1, device=torch.device("cuda", 0)),
    ],
)
def test_roofline_accepts_consistent_measurements(answer, on_a_gpu):
    result = check(ROOFLINE, answer)
    assert result.passed, result


def test_roofline_accepts_several_styles(on_a_gpu):
    import types

    import numpy as np

    right = _measured()
    renamed = {
        "time_ms": right["ms"],
        "batch_size": right["batch"],
        "num_heads": right["heads"],
        "query_len": right["L"],
        "key_len": right["S"],
        "head_dim": right["d_k"],
        **{k: right[k] for k in ("causal", "flops", "tflops", "intensity", "fraction")},
        "peak": right["peak_flops"],
        "bandwidth": right["bandwidth"],
    }
    as_numbers = {
        **right,
        "ms": np.float32(right["ms"]),
        "batch": np.int64(4),
        "causal": np.bool_(True),
        "flops": torch.tensor(float(right["flops"])),
        "tflops": torch.tensor(right["tflops"], dtype=torch.float64),
    }
    for answer in (
        Measurement(**right),
        MeasurementTuple(**right),
        types.SimpleNamespace(**right),
        renamed,
        as_numbers,
        # the book's symbols: B and h
        {
            "B": right["batch"],
            "h": right["heads"],
            **{k: v for k, v in right.items() if k not in ("batch", "heads")},
        },
        # d for the head width, as chapter 10 wrote it until 2026-11 (the book now writes d_k)
        {"d": right["d_k"], **{k: v for k, v in right.items() if k != "d_k"}},
    ):
        result = check(ROOFLINE, answer)
        assert result.passed, (answer, result)


def _over_the_peak():
    """A memory-bound measurement whose fraction is of the peak, not of the roofline."""
    right = _measured(batch=8, heads=8, L=64, S=64, causal=False, ms=0.012, **T4_TENSOR)
    return {**right, "fraction": right["tflops"] * 1e12 / right["peak_flops"]}


def _times(name, factor):
    right = _measured()
    return _measured(**{name: right[name] * factor})


@pytest.mark.parametrize(
    "answer,words",
    [
        # FLOPs
        (_times("flops", 0.5), "a multiply-add as 1 FLOP"),
        (_times("flops", 0.5), "only one of the two products"),
        (_times("flops", 0.25), "one product, and a multiply-add as 1 FLOP"),
        (_times("flops", 2.0), "counted causal attention as full"),
        (_measured(batch=3, flops=4 * 3 * 8 * 2048 * 2048 * 64 // 2 // 3), "left out the batch"),
        (_times("flops", 1 / 8), "left out the heads"),
        (_measured(causal=False, flops=4 * 4 * 8 * 2048 * 2048 * 64 // 2), "causal is False"),
        (
            _measured(causal=True, L=1024, S=4096, flops=4 * 4 * 8 * 1024 * 4096 * 64 // 2),
            "with L != S a causal query",
        ),
        (_times("flops", 3.0), "do not match"),
        # the time
        (_measured(ms=0.0001), "faster than any GPU"),
        (_measured(ms=0.0001), "torch.cuda.synchronize()"),
        (_measured(ms=3100.0), "slower than any GPU"),
        (_measured(ms=-1.0), "positive time"),
        # TFLOP/s
        (_times("tflops", 1e-3), "milliseconds as if they were seconds"),
        (_times("tflops", 1e3), "GFLOP/s"),
        (_times("tflops", 1e3), "microseconds"),
        (_times("tflops", 1e12), "that is FLOP/s"),
        (_times("tflops", 1e9), "FLOPs per millisecond"),
        (_times("tflops", 1.3), "is not your FLOPs over your time"),
        # the GPU's numbers
        (_measured(peak_flops=8.1), "TFLOP/s or GFLOP/s where FLOP/s"),
        (_measured(bandwidth=320.0), "GB/s or TB/s where bytes/s"),
        # intensity
        (_times("intensity", 32.0), "more than any kernel reaches"),
        (_times("intensity", 1 / 1000), "below 1"),
        # the fraction
        (_over_the_peak(), "you divided by the peak"),
        (_times("fraction", 100.0), "that is a percentage"),
        (_times("fraction", 1e-12), "divided TFLOP/s by FLOP/s"),
        (_times("fraction", 0.7), "is not achieved / roofline"),
        # impossible: above 1
        (_measured(ms=1.0), "more than the peak you assumed"),
        (_measured(ms=1.0), "torch.cuda.synchronize()"),
        (
            _measured(batch=8, heads=8, L=64, S=64, causal=False, ms=0.003, **T4_TENSOR),
            "more than the memory allows",
        ),
        # the form
        (_measured(device="cpu"), "time them there"),
        (_measured(causal="yes"), "True or False"),
        ({"ms": 3.1}, "lacks batch, heads"),
        (3.1, "Pass a dict"),
        ({**_measured(), "batch": 0}, "positive size"),
    ],
)
def test_roofline_names_the_mistake(answer, words, on_a_gpu):
    assert_fails(ROOFLINE, answer, words)


def test_roofline_on_a_t4_takes_a_t4s_peak_and_bandwidth(on_a_gpu, monkeypatch):
    """Another GPU's numbers, consistent among themselves, are refused on a T4; its own pass."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *device: "Tesla T4")
    for right in (T4, T4_TENSOR):
        assert check(ROOFLINE, _measured(**right)).passed
    assert_fails(ROOFLINE, _measured(ms=0.2, **H100), "This GPU is a T4 (Tesla T4)")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *device: "NVIDIA H100 80GB HBM3")
    assert check(ROOFLINE, _measured(ms=0.2, **H100)).passed


def test_roofline_names_an_inverted_fraction_and_max_for_min(on_a_gpu):
    right = _measured()
    assert_fails(ROOFLINE, {**right, "fraction": 1 / right["fraction"]}, "inverted")
    memory = right["intensity"] * right["bandwidth"]  # above the T4's peak: past the ridge
    assert_fails(
        ROOFLINE,
        {**right, "fraction": right["tflops"] * 1e12 / memory},
        "you divided by intensity * bandwidth",
    )


def test_roofline_refuses_a_function(on_a_gpu):
    assert_fails(ROOFLINE, _measured, "not the function")


def test_roofline_solution_times_with_cuda_events():
    text = str(solution(ROOFLINE))
    for words in (
        "def measure_roofline(",
        "torch.cuda.Event(enable_timing=True)",
        "torch.cuda.synchronize()",
        ".median()",
        "flash_attention",
        "min(peak_flops, intensity * bandwidth)",
    ):
        assert words in text, words


# -- the mutants of the roofline solution, run on a simulated GPU ----------------------------------
# tools/mutate_checkers.py mutates the solutions it can run; this one needs a GPU (CUDA events,
# CUDA tensors), so its mutants run here against a simulated one: tensors that only have a shape,
# a stream whose clock advances by each launch's work, events that refuse to be read before a
# synchronisation, as CUDA's do. Each mutant is run on four measurements (a T4, causal, L = S;
# an H100, L != S; a memory-bound T4 case; a T4, causal, L > S) and its answers are checked.


class _SimulatedTensor:
    def __init__(self, *shape, dtype=torch.float32, device=None):
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise TypeError(f"randn(): sizes must be non-negative integers, got {shape}")
        self.shape, self.dtype = shape, dtype

    def numel(self):
        return math.prod(self.shape)

    def element_size(self):
        return torch.empty((), dtype=self.dtype).element_size()


class _SimulatedGPU:
    """The stream's clock (ms), the synchronisations so far, and the simulated torch."""

    RATE = 5.5e12  # FLOP/s the simulated kernel runs at
    COMPILE_MS = 900.0  # the first call compiles: the GPU waits that long for the launch

    def __init__(self):
        self.clock, self.synchronisations, self.compiled = 0.0, 0, False
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.timing, self.recorded = enable_timing, None

            def record(self):
                self.recorded = (gpu.clock, gpu.synchronisations)

            def elapsed_time(self, end):
                if not (self.timing and end.timing):
                    raise RuntimeError("Both events must be created with enable_timing=True")
                if self.recorded is None or end.recorded is None:
                    raise RuntimeError("Both events must be recorded before elapsed_time")
                if end.recorded[1] == gpu.synchronisations:
                    raise RuntimeError("CUDA error: device not ready")
                return end.recorded[0] - self.recorded[0]

        def synchronize():
            gpu.synchronisations += 1

        self.cuda = types.SimpleNamespace(
            Event=Event, synchronize=synchronize, get_device_name=lambda: "Tesla T4 (simulated)"
        )

    def randn(self, *shape, dtype=torch.float32, device=None):
        if device != "cuda":
            raise ValueError(f"the simulated GPU only makes CUDA tensors, got device={device!r}")
        return _SimulatedTensor(*shape, dtype=dtype)

    def flash_attention(self, q, k, v, *, causal=False):
        """The launcher's checks (attncourse.kernels.flash), then the kernel's time on the clock."""
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        if not all(len(t.shape) == 4 and t.dtype == q.dtype for t in (k, v)) or len(q.shape) != 4:
            raise ValueError("expected 4-D query, key and value of one dtype")
        if k.shape[:2] != q.shape[:2] or v.shape != k.shape or k.shape[3] != q.shape[3]:
            raise ValueError("expected query (B, H, L, d), key and value (B, H, S, d)")
        if not 16 <= q.shape[3] <= 128:
            raise ValueError("the head size d must be in 16..128")
        (B, H, L, d), S = q.shape, k.shape[2]
        flops = 4 * B * H * d * ch10_gpu._causal_pairs(L, S, causal)
        self.clock += flops / self.RATE * 1e3 + 0.01 + (0 if self.compiled else self.COMPILE_MS)
        self.compiled = True


class _SimulatedTorch:
    """``torch`` as the mutant sees it: the simulated GPU's randn and cuda, the rest torch's."""

    def __init__(self, gpu):
        self.randn, self.cuda = gpu.randn, gpu.cuda

    def __getattr__(self, name):
        return getattr(torch, name)


ROOFLINE_RUNS = [
    {},  # the defaults: a T4's CUDA cores, causal, L = S = 2048
    dict(batch=2, heads=16, L=1024, S=4096, d_k=128, causal=False, **H100),
    dict(batch=8, heads=8, L=64, S=64, d_k=64, causal=False, **T4_TENSOR),  # memory-bound
    dict(batch=4, heads=8, L=2048, S=1024, d_k=64, causal=True),  # L > S: first queries see no key
]

# The mutants the check cannot see, by design: it grades the relations between the numbers it is
# given, not how they were measured. A mutant of the measurement (the sizes and GPU assumed in the
# defaults, the tensors made, the events, the timing loop, the median) that still reports
# consistent numbers is a right answer for the numbers it reports.
ROOFLINE_MEASUREMENT_LINES = (
    "def _roofline_solution(",
    "q = torch.randn(",
    "k = torch.randn(",
    "v = torch.randn(",
    "start = torch.cuda.Event(",
    "end = torch.cuda.Event(",
    "for run in range(",
    "if run >= 3:",
    "flash_attention(q, k, v, causal=causal)",
    "times.append(",
    "ms = torch.tensor(times)",
)
ROOFLINE_EQUIVALENT = {
    # any intensity between 1 FLOP/byte and that of Q, K, V and O moved once is an assumption the
    # exercise accepts (the worst case, K and V re-read per query block, is lower): counting more
    # bytes, or rounding the intensity down, is another assumption, consistently used
    "intensity = flops / (q.element_size() * (2 * q.numel() + k.numel() + v.numel())) => "
    "intensity = flops // (q.element_size() * (2 * q.numel() + k.numel() + v.numel()))",
    "intensity = flops / (q.element_size() * (2 * q.numel() + k.numel() + v.numel())) => "
    "intensity = flops / (q.element_size() * (3 * q.numel() + k.numel() + v.numel()))",
    # the causal pairs counted one per query more or fewer, or the queries that see no key given
    # one or minus one: a part in a thousand of the FLOPs at these sizes, within the check's
    # tolerance (the check grades how the numbers fit together, not the last pair)
    *(
        "pairs = sum((max(0, i + S - L + 1) for i in range(L))) if causal else L * S => "
        f"pairs = sum((max({low}, i + S - L{shift}) for i in range(L))) if causal else L * S"
        for low, shift in (
            (-1, " + 1"),
            (1, " + 1"),
            (0, " - 1"),
            (0, ""),
            (0, " + 0"),
            (0, " + 2"),
        )
    ),
    # the same number changed by a part in 1e12 or 1e13
    "tflops = flops / (ms * 0.001) / 1000000000000.0 => "
    "tflops = flops // (ms * 0.001) / 1000000000000.0",
    "tflops = flops / (ms * 0.001) / 1000000000000.0 => "
    "tflops = flops / (ms * 0.001) / 1000000000001.0",
    "return {'device': torch.cuda.get_device_name(), 'ms': ms, 'batch': batch, 'heads': heads, "
    "'L': L, 'S': S, 'd_k': d_k, 'causal': causal, 'flops': flops, 'tflops': tflops, "
    "'peak_flops': peak_flops, 'bandwidth': bandwidth, 'intensity': intensity, "
    "'fraction': tflops * 1000000000000.0 / roofline} => return {'device': "
    "torch.cuda.get_device_name(), 'ms': ms, 'batch': batch, 'heads': heads, 'L': L, 'S': S, "
    "'d_k': d_k, 'causal': causal, 'flops': flops, 'tflops': tflops, 'peak_flops': peak_flops, "
    "'bandwidth': bandwidth, 'intensity': intensity, 'fraction': tflops * 1000000000001.0 / "
    "roofline}",
}


def _run_simulated(mutant_source, name, solution_globals, monkeypatch):
    """The answers of a mutant on each of ROOFLINE_RUNS, each on a fresh simulated GPU."""
    import linecache
    import sys

    answers = []
    for run in ROOFLINE_RUNS:
        gpu = _SimulatedGPU()
        flash = types.ModuleType("attncourse.kernels.flash")
        flash.flash_attention = gpu.flash_attention
        monkeypatch.setitem(sys.modules, "attncourse.kernels.flash", flash)
        namespace = {**solution_globals, "torch": _SimulatedTorch(gpu)}
        filename = f"<roofline mutant {abs(hash(mutant_source))}>"
        linecache.cache[filename] = (
            len(mutant_source),
            None,
            mutant_source.splitlines(True),
            filename,
        )
        exec(compile(mutant_source, filename, "exec"), namespace)
        answers.append(namespace[name](**run))
    return answers


def test_every_mutant_of_the_roofline_solution_is_rejected_or_a_listed_equivalent(
    on_a_gpu, monkeypatch
):
    import inspect

    from project_tools import tool

    mutate = tool("mutate_checkers")
    reference = REGISTRY[ROOFLINE].reference
    source = textwrap.dedent(inspect.getsource(reference))
    for answer in _run_simulated(source, reference.__name__, reference.__globals__, monkeypatch):
        assert check(ROOFLINE, answer).passed, answer  # the solution itself is right
    mutants = mutate.mutants_of(ROOFLINE, reference)
    assert len(mutants) > 200
    killed, by_design, equivalent, survivors = 0, 0, set(), []
    for mutant in mutants:
        change = mutant.key.split(" :: ", 1)[1]
        try:
            answers = _run_simulated(
                mutant.source, reference.__name__, reference.__globals__, monkeypatch
            )
            passed = all(check(ROOFLINE, answer).passed for answer in answers)
        except Exception:  # noqa: BLE001 - a mutant that fails to run is killed, as on a GPU
            passed = False
        if not passed:
            killed += 1
        elif change.startswith(ROOFLINE_MEASUREMENT_LINES):
            by_design += 1
        elif change in ROOFLINE_EQUIVALENT:
            equivalent.add(change)
        else:
            survivors.append(change)
    assert not survivors, "mutants the checker accepts:\n" + "\n".join(survivors)
    assert equivalent == ROOFLINE_EQUIVALENT, ROOFLINE_EQUIVALENT - equivalent
    # the check stays a check: most mutants die, the measurement's ones too when they can be seen
    assert killed > 0.6 * len(mutants), (killed, by_design, len(mutants))
