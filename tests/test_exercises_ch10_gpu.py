"""The chapter 10 checkers accept right answers in several styles and name the usual mistakes."""

import math

import numpy as np
import pytest
import torch
from exercise_helpers import assert_fails, stub

from attncourse.exercises import _core, check, solution
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


def _everything(qb, bm, bn, L, S):
    return list(range(math.ceil(S / bn)))


def _never_empty(qb, bm, bn, L, S):
    return _key_blocks_solution(qb, bm, bn, L, S) or [0]


def _one_query_short(
    qb, bm, bn, L, S
):  # the block's second-to-last query: the last key block it opens is missed
    last = min(qb * bm + bm, L) - 2 + S - L
    return list(range(last // bn + 1)) if last >= 0 else []


def _key_zero_is_no_key(qb, bm, bn, L, S):  # a last visible key 0 taken for "no key"
    last = min(qb * bm + bm, L) - 1 + S - L
    return list(range(last // bn + 1)) if last > 0 else []


@pytest.mark.parametrize(
    "wrong,words",
    [
        (_top_left, "top left"),
        (_floor, "round up"),
        (_everything, "every key block"),
        (_never_empty, "no key block at all"),
        (lambda *a: [0, 1], "should be"),
        (lambda *a: None, "list or range"),
        (_one_query_short, "L=33, S=33"),
        (_key_zero_is_no_key, "L=47, S=16"),
        (lambda *a: torch.ones(3, dtype=torch.bool), "boolean tensor"),
        (lambda *a: [0.5, 1.5], "list or range of integers"),
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
        - tile_map(4096, 4096, 64, 64, window=212).sum()
    )
    for answer in (right, float(right), torch.tensor(right), np.int64(right).item()):
        assert check("gpu/span-skipped-tiles", answer).passed
    assert_fails(
        "gpu/span-skipped-tiles", int(tile_map(4096, 4096, 64, 64, window=212).sum()), "computes"
    )
    assert_fails(
        "gpu/span-skipped-tiles",
        4096 - int(tile_map(4096, 4096, 64, 64, window=212).sum()),
        "whole square",
    )
    assert_fails(
        "gpu/span-skipped-tiles", 2080 - int(tile_map(4096, 4096, 64, 64, window=180).sum()), "ramp"
    )
    assert_fails("gpu/span-skipped-tiles", 2080 - 64 * 5, "fewer keys")
    assert_fails("gpu/span-skipped-tiles", 1000, "is not it")
    assert_fails("gpu/span-skipped-tiles", "1770", "number")
    assert str(right) in str(solution("gpu/span-skipped-tiles"))


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
        (
            dict(polarity="<="),
            "read X[0, 37], past its last column",
        ),  # cols <= length: one column too many
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
def test_masked_softmax_other_failures(monkeypatch):
    assert_fails(SOFTMAX, _jit(softmax_no_lengths), "lengths are ignored")
    assert_fails(SOFTMAX, 42, "function decorated with @triton.jit")
    assert_fails(SOFTMAX, lambda X, Y: None, "your kernel raised")

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


def online_exp2_where(
    S,
    V,
    O,
    n_rows,
    n_keys,
    stride_s,
    stride_v,
    stride_o,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
):
    # exp2 with log2(e) folded into the scores, masks by tl.where, a broadcast sum for P V
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


def online_deferred_lse(
    S,
    V,
    O,
    n_rows,
    n_keys,
    stride_s,
    stride_v,
    stride_o,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
):
    # the rows' loads masked once, a safe shift for the padding rows, tl.dot for P V
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
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p, v, acc, input_precision="ieee")
        m = m_new
    out = acc / l[:, None]
    tl.store(O + rows[:, None] * stride_o + dims[None, :], out, mask=row_ok[:, None])


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
        ({"acc = alpha[:, None] * acc +": "acc = acc +"}, "accumulator is not rescaled"),
        ({"l = alpha * l +": "l = l +"}, "running sum is not rescaled"),
        ({"acc / l[:, None]": "acc"}, "not divided by the running sum"),
        (
            {
                "p = tl.exp(s - m_new[:, None])": "p = tl.exp(s)",
                "alpha = tl.exp(m - m_new)": "alpha = 1.0",
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
    assert len(lines) == 10 and "j < i + N - L" in lines[5]

    def run(listing, L, N):
        kernel = _jit(
            _from_source(
                "\n".join(line for line in listing if not line.startswith("@")) + "\n",
                "causal_softmax",
            )
        )
        s = torch.randn(L, N)
        p = torch.full((L, N), -1.0)
        kernel[(L,)](s, p, L, N, s.stride(0), p.stride(0), BLOCK_N=triton.next_power_of_2(N))
        weights = torch.softmax(s.masked_fill(~causal_mask(L, N), float("-inf")), -1)
        return p, weights

    buggy, expected = run(lines, 6, 6)
    assert buggy[0].isnan().all() and not torch.allclose(buggy[1:], expected[1:])
    fixed = list(lines)
    fixed[5] = "    visible = (j < N) & (j <= i + N - L)"
    for L, N in [(6, 6), (5, 9), (1, 3)]:
        got, expected = run(fixed, L, N)
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("answer", [6, 6.0, np.int64(6), torch.tensor(6), torch.tensor([6.0])])
def test_find_the_bug_accepts_the_line(answer):
    assert check(BUG, answer).passed


@pytest.mark.parametrize(
    "answer,words",
    [
        (7, "masked lanes load -inf"),
        (10, "every column j < N"),
        (3, "comment"),
        (8, "maximum"),
        (11, "lines 1 to 10"),
        (0, "lines 1 to 10"),
        (6.5, "whole number"),
        ("6", "as a number"),
        (True, "boolean"),
        ([6], "number"),
        (float("nan"), "whole number"),
    ],
)
def test_find_the_bug_rejects(answer, words):
    assert_fails(BUG, answer, words)
    assert check(BUG, ...).status.startswith("not attempted")


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


@pytest.mark.parametrize(
    "answer", [ch10_gpu.attention_backward, _backward_autograd, _backward_softmax_style]
)
def test_backward_accepts(answer):
    assert check(BACKWARD, answer).passed


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
