"""Chapter 11: every variant of the course as a FlexAttention program, against the package.

Each program runs in FlexAttention's eager mode (forward only: on the CPU torch has no FlexAttention
backward for the query, key and value) and through :func:`attncourse.flex.flex_reference` (the same program with
autograd), and both are compared in float64 with the package function it replaces, forward and
gradients. Then the compile and its eager fallback (``torch.compile`` made to fail), the block
counts against the course's tile counts, the timing function's plumbing, and the input checks.
"""

import warnings

import pytest
import torch

from attncourse import flex
from attncourse.adaptive_span import adaptive_span_attention
from attncourse.all_attention import AllAttention
from attncourse.attention import scaled_dot_product_attention
from attncourse.benchmarks import flex as flex_benchmark
from attncourse.efficient import tile_schedule
from attncourse.kernels.tiles import span_tile_maps, tile_map
from attncourse.kv_cache import sliding_window_mask
from attncourse.masks import causal_mask, combine_masks, padding_mask
from attncourse.multihead import merge_heads, split_heads
from attncourse.positions import alibi_bias

available, why = flex.flex_available()
pytestmark = pytest.mark.skipif(not available, reason=why)
if available:
    from torch.nn.attention.flex_attention import and_masks, create_block_mask, flex_attention

FORWARD_TOL = dict(atol=1e-12, rtol=1e-12)  # float64, FlexAttention's eager forward
GRAD_TOL = dict(atol=1e-10, rtol=1e-10)  # float64, flex_reference's gradients


@pytest.fixture(autouse=True)
def _quiet():
    """FlexAttention warns that its eager mode is unfused: these tests mean to use it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
        yield


def _qkv(batch, heads, query_len, key_len, head_dim=8, value_dim=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, heads, query_len, head_dim, generator=g, dtype=torch.float64),
        torch.randn(batch, heads, key_len, head_dim, generator=g, dtype=torch.float64),
        torch.randn(batch, heads, key_len, value_dim, generator=g, dtype=torch.float64),
    )


def _flex_eager(q, k, v, *, score_mod=None, mask_mod=None, per_batch=False, per_head=False):
    block_mask = None
    if mask_mod is not None:
        block_mask = create_block_mask(
            mask_mod,
            q.size(0) if per_batch else None,
            q.size(1) if per_head else None,
            q.size(2),
            k.size(2),
            device=q.device,
        )
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


def _grads(fn, inputs, upstream):
    for x in inputs:
        x.grad = None
    (fn() * upstream).sum().backward()
    return [x.grad.clone() for x in inputs]


def _agree(package, program, inputs, **flex_options):
    """The program's forward (FlexAttention eager and flex_reference) and gradients
    (flex_reference) equal the package's."""
    q, k, v = inputs[:3]
    expected = package()
    eager = _flex_eager(q.detach(), k.detach(), v.detach(), **program, **flex_options)
    torch.testing.assert_close(eager, expected.detach(), **FORWARD_TOL)
    reference = lambda: flex.flex_reference(q, k, v, **program)  # noqa: E731
    torch.testing.assert_close(reference(), expected, **FORWARD_TOL)
    upstream = torch.randn(expected.shape, generator=torch.Generator().manual_seed(9)).double()
    ours = _grads(reference, inputs, upstream)
    theirs = _grads(package, inputs, upstream)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **GRAD_TOL)


def _leaves(*tensors):
    return [t.clone().requires_grad_(True) for t in tensors]


# -- each variant against the package ----------------------------------------------------------------


@pytest.mark.parametrize("query_len, key_len", [(9, 9), (5, 12), (12, 5)])
def test_causal_is_bottom_right_as_the_package(query_len, key_len):
    q, k, v = _leaves(*_qkv(2, 3, query_len, key_len))
    _agree(
        lambda: scaled_dot_product_attention(q, k, v, causal_mask(query_len, key_len))[0],
        {"mask_mod": flex.causal_mask_mod(query_len, key_len)},
        [q, k, v],
    )


def test_top_left_causal_differs_when_the_lengths_differ():
    mask = torch.nn.attention.flex_attention.create_mask(
        flex.causal_mask_mod(4, 7), 1, 1, 4, 7, device="cpu"
    )[0, 0]
    assert torch.equal(mask, causal_mask(4, 7))
    assert not torch.equal(mask, torch.ones(4, 7, dtype=torch.bool).tril())


def test_key_padding_with_causal_is_the_decoder_mask():
    lengths = [7, 3, 0]  # a sequence with no real key: zeros, not NaN
    q, k, v = _leaves(*_qkv(3, 2, 7, 7))
    mask = combine_masks(causal_mask(7), padding_mask(lengths, 7)[:, None, None, :])
    program = and_masks(flex.causal_mask_mod(7), flex.padding_mask_mod(lengths))
    _agree(
        lambda: scaled_dot_product_attention(q, k, v, mask)[0],
        {"mask_mod": program},
        [q, k, v],
        per_batch=True,
    )


def test_cross_attention_over_source_lengths():
    sources = torch.tensor([11, 4])
    q, k, v = _leaves(*_qkv(2, 3, 6, 11))
    _agree(
        lambda: scaled_dot_product_attention(q, k, v, padding_mask(sources, 11)[:, None, None])[0],
        {"mask_mod": flex.padding_mask_mod(sources)},
        [q, k, v],
        per_batch=True,
    )


@pytest.mark.parametrize("query_len, key_len, window", [(10, 10, 3), (4, 13, 5), (10, 10, 20)])
def test_sliding_window_as_chapter_6(query_len, key_len, window):
    q, k, v = _leaves(*_qkv(1, 2, query_len, key_len))
    mask = sliding_window_mask(query_len, key_len, window=window)
    _agree(
        lambda: scaled_dot_product_attention(q, k, v, mask)[0],
        {"mask_mod": flex.sliding_window_mask_mod(query_len, key_len, window=window)},
        [q, k, v],
    )


@pytest.mark.parametrize("heads, query_len, key_len", [(4, 9, 9), (3, 5, 12)])
def test_alibi_as_chapter_5(heads, query_len, key_len):
    q, k, v = _leaves(*_qkv(2, heads, query_len, key_len))
    bias = alibi_bias(heads, query_len, key_len, dtype=torch.float64)
    mask = combine_masks(causal_mask(query_len, key_len), bias)
    _agree(
        lambda: scaled_dot_product_attention(q, k, v, mask)[0],
        {
            "score_mod": flex.alibi_score_mod(heads, query_len, key_len),
            "mask_mod": flex.causal_mask_mod(query_len, key_len),
        },
        [q, k, v],
    )


def test_soft_span_as_chapter_8_with_the_gradient_of_the_spans():
    spans = torch.tensor([0.0, 2.5, 6.0, 30.0], dtype=torch.float64, requires_grad=True)
    ramp = 3.0
    q, k, v = _leaves(*_qkv(2, 4, 12, 12, value_dim=8))
    program = {
        "score_mod": flex.soft_span_score_mod(spans, ramp),
        "mask_mod": flex.span_mask_mod(spans, ramp),
    }
    # FlexAttention's forward gets the span detached here: its eager mode traces the program
    # with dynamo, which after the other tests' shapes traces with symbolic sizes, and with those
    # torch 2.13 fails to differentiate a captured tensor (the next test resets dynamo first)
    frozen = flex.soft_span_score_mod(spans.detach(), ramp)
    eager = _flex_eager(
        q.detach(),
        k.detach(),
        v.detach(),
        score_mod=frozen,
        mask_mod=program["mask_mod"],
        per_head=True,
    )
    torch.testing.assert_close(
        eager, adaptive_span_attention(q, k, v, spans, ramp)[0].detach(), **FORWARD_TOL
    )
    reference = lambda: flex.flex_reference(q, k, v, **program)  # noqa: E731
    package = lambda: adaptive_span_attention(q, k, v, spans, ramp)[0]  # noqa: E731
    torch.testing.assert_close(reference(), package(), **FORWARD_TOL)
    upstream = torch.randn(2, 4, 12, 8, dtype=torch.float64)
    for a, b in zip(
        _grads(reference, [q, k, v, spans], upstream), _grads(package, [q, k, v, spans], upstream)
    ):
        torch.testing.assert_close(a, b, **GRAD_TOL)
    # the span gets gradient only from keys on the ramp: head 3 reaches past every key
    grad = _grads(
        lambda: flex.flex_reference(q, k, v, **program), [spans], torch.ones(2, 4, 12, 8)
    )[0]
    assert torch.isfinite(grad).all() and grad[3] == 0 and (grad[1:3] != 0).all()


def test_flexattentions_own_backward_gives_the_spans_chapter_8s_gradient():
    """On the CPU FlexAttention refuses gradients for q, k and v, not for a captured tensor:
    chapter 11 differentiates the spans through FlexAttention itself."""
    spans = torch.tensor([0.0, 2.5, 6.0, 30.0], dtype=torch.float64)
    ramp = 3.0
    q, k, v = _qkv(2, 4, 12, 12, value_dim=8)
    with pytest.raises(NotImplementedError):
        flex_attention(q.clone().requires_grad_(), k, v)
    torch.compiler.reset()  # fresh traces with static sizes (see the test above)
    z = spans.clone().requires_grad_()
    blocks = create_block_mask(flex.span_mask_mod(spans, ramp), None, 4, 12, 12, device="cpu")
    out = flex_attention(q, k, v, score_mod=flex.soft_span_score_mod(z, ramp), block_mask=blocks)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (ours,) = torch.autograd.grad((out * upstream).sum(), z)
    z8 = spans.clone().requires_grad_()
    (chapter_8,) = torch.autograd.grad(
        (adaptive_span_attention(q, k, v, z8, ramp)[0] * upstream).sum(), z8
    )
    torch.testing.assert_close(ours, chapter_8, **GRAD_TOL)
    assert ours[3] == 0 and (ours[:3] != 0).all()


def test_log_of_a_zero_soft_mask_gives_nan_gradients_unless_clamped():
    spans = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    q, k, v = _qkv(1, 2, 8, 8)

    def naive(score, b, h, q_idx, kv_idx):
        return score + torch.log(((2.0 + spans[h] - (q_idx - kv_idx)) / 2.0).clamp(0, 1))

    causal = flex.causal_mask_mod(8)
    out = flex.flex_reference(q, k, v, score_mod=naive, mask_mod=causal)
    expected, _ = adaptive_span_attention(q, k, v, spans, 2.0)
    torch.testing.assert_close(out, expected, **FORWARD_TOL)  # the forward is right
    (grad,) = torch.autograd.grad(out.sum(), spans)
    assert grad.isnan().all()  # 0 * log'(0) = 0 * inf
    safe = flex.flex_reference(
        q, k, v, score_mod=flex.soft_span_score_mod(spans, 2.0), mask_mod=causal
    )
    (grad,) = torch.autograd.grad(safe.sum(), spans)
    (expected_grad,) = torch.autograd.grad(expected.sum(), spans)
    torch.testing.assert_close(grad, expected_grad, **GRAD_TOL)


def test_persistent_vectors_as_chapter_9():
    torch.manual_seed(0)
    layer = AllAttention(12, 3, 5).double()
    x = torch.randn(2, 7, 12, dtype=torch.float64, requires_grad=True)
    p = layer.projections

    def program_output(run):
        q, k, v = (split_heads(proj(x), 3) for proj in (p.q_proj, p.k_proj, p.v_proj))
        memory_key, memory_value = layer.memory()
        k = torch.cat([k, memory_key.expand(2, -1, -1, -1)], dim=2)
        v = torch.cat([v, memory_value.expand(2, -1, -1, -1)], dim=2)
        return p.out_proj(merge_heads(run(q, k, v)))

    mask_mod = flex.persistent_mask_mod(7)
    expected = layer(x, causal_mask(7))[0]
    with torch.no_grad():
        eager = program_output(
            lambda q, k, v: _flex_eager(q.detach(), k.detach(), v.detach(), mask_mod=mask_mod)
        )
    torch.testing.assert_close(eager, expected.detach(), **FORWARD_TOL)
    ours = program_output(lambda q, k, v: flex.flex_reference(q, k, v, mask_mod=mask_mod))
    torch.testing.assert_close(ours, expected, **FORWARD_TOL)
    params = [x, layer.persistent_key, layer.persistent_value, p.q_proj.weight]
    upstream = torch.randn(expected.shape, dtype=torch.float64)
    g_ours = torch.autograd.grad((ours * upstream).sum(), params)
    g_theirs = torch.autograd.grad((layer(x, causal_mask(7))[0] * upstream).sum(), params)
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, **GRAD_TOL)


def test_document_masking_is_each_document_alone():
    lengths = [3, 6, 1, 4]
    q, k, v = _leaves(*_qkv(1, 2, 14, 14))
    program = and_masks(
        flex.causal_mask_mod(14), flex.document_mask_mod(flex.document_ids(lengths))
    )

    def alone():
        outputs, start = [], 0
        for n in lengths:
            part = slice(start, start + n)
            outputs.append(
                scaled_dot_product_attention(
                    q[:, :, part], k[:, :, part], v[:, :, part], causal_mask(n)
                )[0]
            )
            start += n
        return torch.cat(outputs, dim=2)

    _agree(alone, {"mask_mod": program}, [q, k, v])


def test_document_ids():
    assert flex.document_ids([2, 1, 3]).tolist() == [0, 0, 1, 2, 2, 2]
    assert flex.document_ids(torch.tensor([1])).tolist() == [0]


def test_the_reference_is_flex_attention_for_any_program():
    q, k, v = _qkv(2, 3, 9, 11, seed=3)
    table = torch.randn(3, 11, dtype=torch.float64)

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(kv_idx % 3 == b, score * 0.5, score + table[h, kv_idx])

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx + h) % 4 != kv_idx % 4

    expected = _flex_eager(
        q, k, v, score_mod=score_mod, mask_mod=mask_mod, per_batch=True, per_head=True
    )
    torch.testing.assert_close(
        flex.flex_reference(q, k, v, score_mod=score_mod, mask_mod=mask_mod),
        expected,
        **FORWARD_TOL,
    )
    torch.testing.assert_close(
        flex.flex_reference(q, k, v, scale=0.3), flex_attention(q, k, v, scale=0.3), **FORWARD_TOL
    )


# -- compiling, and the fallback when it fails ----------------------------------------------------


def test_compiled_kernel_matches_the_package():
    q, k, v = (t.float() for t in _qkv(1, 2, 256, 256, head_dim=16, value_dim=16, seed=4))
    block_mask = create_block_mask(flex.causal_mask_mod(256), None, None, 256, 256, device="cpu")
    kernel = flex.compile_flex(q, k, v, block_mask=block_mask)
    expected = scaled_dot_product_attention(q, k, v, causal_mask(256))[0]
    torch.testing.assert_close(
        kernel.attention(q, k, v, block_mask=block_mask), expected, atol=1e-5, rtol=1e-5
    )
    if kernel.compiled:  # a machine without a C++ compiler falls back, saying so
        assert "compiled" in kernel.note and kernel.first_call_s > 0
    else:
        assert "eagerly" in kernel.note


def _failing_compile(when):
    """torch.compile as on a machine without a C++ compiler (or a Windows torch): the default
    backend fails; FlexAttention's eager mode, which compiles with backend="eager", still works."""
    original = torch.compile

    def compile_(fn, *args, **kwargs):
        if kwargs.get("backend", "inductor") != "inductor":
            return original(fn, *args, **kwargs)
        if when == "at once":
            raise RuntimeError("Windows not yet supported for torch.compile")

        def broken(*a, **k):
            raise OSError("CppCompileError: C++ compile error\nno such file: cl.exe")

        return broken

    return compile_


@pytest.mark.parametrize("when", ["at once", "on the first call"])
def test_a_failing_compile_falls_back_to_eager_mode_and_says_why(monkeypatch, when):
    monkeypatch.setattr(torch, "compile", _failing_compile(when))
    q, k, v = _qkv(1, 2, 20, 20, seed=5)
    block_mask = create_block_mask(flex.causal_mask_mod(20), None, None, 20, 20, device="cpu")
    kernel = flex.compile_flex(q, k, v, block_mask=block_mask)
    assert not kernel.compiled and kernel.attention is flex_attention
    assert "eagerly" in kernel.note and "\n" not in kernel.note
    assert ("Windows" in kernel.note) == (when == "at once")
    assert ("CppCompileError" in kernel.note) == (when != "at once")
    torch.testing.assert_close(
        kernel.attention(q, k, v, block_mask=block_mask),
        scaled_dot_product_attention(q, k, v, causal_mask(20))[0],
        **FORWARD_TOL,
    )


def test_the_timing_function_measures_side_by_side(monkeypatch):
    monkeypatch.setattr(torch, "compile", _failing_compile("on the first call"))  # no compile
    result = flex_benchmark.time_flex_against_sdpa(
        "cpu",
        length=256,
        num_heads=2,
        head_dim=16,
        window=64,
        documents=3,
        block_size=64,
        repeats=1,
        warmup=1,
    )
    assert not result["compiled"] and "eagerly" in result["note"]
    assert [r["mask"] for r in result["rows"]] == list(flex_benchmark.MASKS)
    assert sum(result["document_lengths"]) == 256 and len(result["document_lengths"]) == 3
    kept = {r["mask"]: r["kept"] for r in result["rows"]}
    assert kept["causal"] == len(tile_schedule(256, 256, causal=True, block_m=64, block_n=64))
    assert kept["sliding window"] == int(tile_map(256, 256, 64, 64, window=64).sum())
    for row in result["rows"]:
        assert row["max_error"] < 1e-5 and row["total"] == 16
        assert row["flex_over_sdpa"] == pytest.approx(row["flex_ms"] / row["sdpa_ms"])
    assert "flex/SDPA" in flex_benchmark.flex_timing_table(result)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(device="tpu"), ValueError, "device"),
        (dict(length=0), ValueError, "length"),
        (dict(length=2.0), TypeError, "length"),
        (dict(documents=300, length=256), ValueError, "documents"),
        (dict(dtype=torch.int32), TypeError, "dtype"),
        (dict(repeats=0), ValueError, "repeats"),
        (dict(seed="0"), TypeError, "seed"),
    ],
)
def test_the_timing_function_refuses_bad_arguments_before_measuring(
    monkeypatch, kwargs, error, words
):
    def refuse(*args, **kw):
        raise AssertionError("measured before checking")

    monkeypatch.setattr(flex_benchmark, "compile_flex", refuse)
    monkeypatch.setattr(flex_benchmark, "time_interleaved", refuse)
    kwargs = {"device": "cpu", **kwargs}
    with pytest.raises(error, match=words):
        flex_benchmark.time_flex_against_sdpa(**kwargs)


# -- block sparsity against the course's tile counts ------------------------------------------------


def test_block_counts_sum_batches_and_heads_and_count_edge_blocks_as_partial():
    block_mask = create_block_mask(
        and_masks(flex.causal_mask_mod(300), flex.padding_mask_mod([300, 100])),
        2,
        3,
        300,
        300,
        device="cpu",
    )
    counts = flex.block_counts(block_mask)
    dense = block_mask.to_dense()
    assert counts["kept"] == int(dense.sum()) == counts["partial"] + counts["full"]
    assert (
        counts["total"] == 2 * 3 * 3 * 3 and counts["skipped"] == counts["total"] - counts["kept"]
    )
    # sequence 0: the 6 causal blocks, 3 of them on the diagonal and 2 more in the ragged last row
    single = flex.block_counts(
        create_block_mask(flex.causal_mask_mod(300), None, None, 300, 300, device="cpu")
    )
    assert single == {"partial": 5, "full": 1, "kept": 6, "skipped": 3, "total": 9}
    assert counts["kept"] == 3 * (6 + 3)  # sequence 1 keeps the first key block of each row
    assert (
        create_block_mask(flex.causal_mask_mod(300), None, None, 300, 300, device="cpu").sparsity()
        < 0
    )


def test_sparsity_table_against_the_course():
    rows = flex.sparsity_table(
        512,
        block_size=64,
        window=100,
        spans=(10.0, 70.0, 300.0),
        ramp=8.0,
        num_persistent=20,
        document_lengths=(100, 50, 200, 162),
    )
    by_mask = {row["mask"].split(",")[0].split(" ")[0]: row for row in rows}
    # every block of the grid is kept (partial or full) or skipped: (query blocks) x (key
    # blocks) x (batch entries and heads), from the sizes alone
    blocks = [
        8 * 8,  # causal, L = S = 512
        8 * 8,  # L = S = 477: still 8 blocks of 64 each way
        2 * 8,  # 128 queries after 512 keys
        8 * 8,  # sliding window
        3 * 8 * 8,  # three heads, one span each
        2 * 2 * 8,  # two sequences, 128 queries, keys padded to 512
        8 * 9,  # 512 + 20 keys: a ninth column of blocks for the memory
        8 * 8,  # documents packed in one row of 512
    ]
    assert [row["kept"] + row["skipped"] for row in rows] == blocks
    for row in rows:
        assert row["partial"] + row["full"] == row["kept"], row
        assert row["agree"] == (row["kept"] == row["course"])
        assert row["agree"] or "documents packed" in row["mask"], row
    assert rows[0]["kept"] == len(tile_schedule(512, 512, causal=True, block_m=64, block_n=64))
    assert rows[0]["partial"] == 8  # the diagonal
    assert rows[1]["partial"] > sum(
        t[4] for t in tile_schedule(445, 445, causal=True, block_m=64, block_n=64)
    )
    assert by_mask["sliding"]["kept"] == int(tile_map(512, 512, 64, 64, window=100).sum())
    spans = torch.tensor([10.0, 70.0, 300.0], dtype=torch.float64)
    assert by_mask["adaptive"]["kept"] == int(span_tile_maps(spans, 8.0, 512, 64, 64).sum())
    documents = rows[-1]
    alone = sum(
        len(tile_schedule(n, n, causal=True, block_m=64, block_n=64)) for n in (100, 50, 200, 162)
    )
    assert documents["course"] == alone != documents["kept"] and documents["kept"] < rows[0]["kept"]


# -- the programs' input checks name the argument --------------------------------------------------


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: flex.causal_mask_mod(0), ValueError, "query_len"),
        (lambda: flex.causal_mask_mod(4, 2.5), TypeError, "key_len"),
        (lambda: flex.padding_mask_mod([3, 1.5]), TypeError, "lengths"),
        (lambda: flex.padding_mask_mod(torch.tensor([[3]])), ValueError, "lengths"),
        (lambda: flex.padding_mask_mod([-1, 2]), ValueError, "lengths"),
        (lambda: flex.padding_mask_mod("3"), TypeError, "lengths"),
        (lambda: flex.sliding_window_mask_mod(4, window=0), ValueError, "window"),
        (lambda: flex.sliding_window_mask_mod(4, window=True), TypeError, "window"),
        (lambda: flex.document_mask_mod(torch.tensor([0.0, 1.0])), TypeError, "document"),
        (lambda: flex.document_ids([2, 0]), ValueError, "lengths"),
        (lambda: flex.persistent_mask_mod(-1), ValueError, "length"),
        (lambda: flex.span_mask_mod(torch.tensor([1, 2]), 2.0), TypeError, "span"),
        (lambda: flex.span_mask_mod(torch.tensor([-1.0]), 2.0), ValueError, "span"),
        (lambda: flex.soft_span_score_mod(torch.tensor([1.0]), 0.0), ValueError, "ramp"),
        (lambda: flex.soft_span_score_mod(torch.tensor(1.0), 2.0), ValueError, "span"),
        (lambda: flex.alibi_score_mod(0, 4), ValueError, "num_heads"),
        (
            lambda: flex.flex_reference(*_qkv(1, 1, 3, 3)[:2], torch.randn(1, 1, 4, 2).double()),
            ValueError,
            "value",
        ),
        (
            lambda: flex.flex_reference(*_qkv(1, 1, 3, 3)[:2], torch.randn(1, 1, 3, 2)),
            TypeError,
            "dtype",
        ),
        (
            lambda: flex.flex_reference(torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 8)),
            ValueError,
            "query",
        ),
        (lambda: flex.flex_reference(*_qkv(1, 1, 3, 3), mask_mod="causal"), TypeError, "mask_mod"),
        (
            lambda: flex.flex_reference(*_qkv(1, 1, 3, 3), mask_mod=lambda b, h, q, k: q - k),
            TypeError,
            "mask_mod",
        ),
        (lambda: flex.flex_reference(*_qkv(1, 1, 3, 3), scale=-1.0), ValueError, "scale"),
        (
            lambda: flex.compile_flex(*_qkv(1, 1, 3, 3), block_mask=torch.ones(3, 3)),
            TypeError,
            "block_mask",
        ),
        (lambda: flex.block_counts(torch.ones(2, 2)), TypeError, "block_mask"),
        (lambda: flex.sparsity_table(256, block_size=128), ValueError, "length"),
        (
            lambda: flex.sparsity_table(1024, document_lengths=(10, 20)),
            ValueError,
            "document_lengths",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


# -- FlexAttention's own backward pass, where it has one ------------------------------------------


def test_flex_attention_backward_against_the_reference(device):
    """On a GPU FlexAttention has a backward pass: its gradients equal flex_reference's (the
    check the chapter makes on the CPU, where FlexAttention has none: it refuses, saying so)."""
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g).to(device).requires_grad_() for _ in range(3))
    alibi = flex.alibi_score_mod(3, 40, 40, device=device)
    mask_mod = flex.sliding_window_mask_mod(40, window=9, device=device)
    block_mask = create_block_mask(mask_mod, None, None, 40, 40, device=device)
    if device.type == "cpu":
        with pytest.raises(NotImplementedError, match="backward on CPU"):
            flex_attention(q, k, v, score_mod=alibi, block_mask=block_mask)
        # what the chapter checks instead: the same programs, materialised, against the
        # package's attention with the bias and the window as masks, forward and gradients
        reference = flex.flex_reference(q, k, v, score_mod=alibi, mask_mod=mask_mod)
        mask = combine_masks(sliding_window_mask(40, window=9), alibi_bias(3, 40, 40))
        expected = scaled_dot_product_attention(q, k, v, mask)[0]
        torch.testing.assert_close(reference, expected, atol=1e-5, rtol=1e-5)
        upstream = torch.randn(expected.shape, generator=g)
        ours = torch.autograd.grad((reference * upstream).sum(), (q, k, v))
        theirs = torch.autograd.grad((expected * upstream).sum(), (q, k, v))
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        return
    out = flex_attention(q, k, v, score_mod=alibi, block_mask=block_mask)
    reference = flex.flex_reference(q, k, v, score_mod=alibi, mask_mod=mask_mod)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    upstream = torch.randn(out.shape, generator=g).to(device)
    ours = torch.autograd.grad((out * upstream).sum(), (q, k, v))
    theirs = torch.autograd.grad((reference * upstream).sum(), (q, k, v))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
