"""Chapter 10's Triton kernels against the package's references and torch's SDPA.

Without a GPU the kernels run on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1``, set by ``conftest.py`` before triton is imported); with one, the same
tests run compiled on CUDA (the ``device`` fixture), and the CPU case skips. The interpreter
has no bfloat16, so bfloat16 is tested on CUDA only. Sizes are small on purpose: each
interpreted kernel launch costs a fraction of a second.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attncourse.adaptive_span import adaptive_span_attention
from attncourse.attention import scaled_dot_product_attention
from attncourse.kernels import tiles
from attncourse.masks import causal_mask, padding_mask

triton = pytest.importorskip("triton")
from attncourse.kernels import flash, flash_kernels, flash_launch  # noqa: E402  (needs triton)
from attncourse.kernels.config import LaunchConfig, launch_config  # noqa: E402

tl = triton.language


@pytest.fixture
def kdevice(device) -> torch.device:
    """The ``device`` fixture, where the kernels can run: CUDA, or the CPU under the interpreter."""
    if device.type == "cpu" and not flash.interpreting():
        pytest.skip("CPU tensors need Triton's interpreter (TRITON_INTERPRET=1); a GPU is present")
    return device


def _inputs(batch, heads, L, S, d, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, L, d, generator=g)
    k = torch.randn(batch, heads, S, d, generator=g)
    v = torch.randn(batch, heads, S, d, generator=g)
    return [t.to(device=device, dtype=dtype).requires_grad_() for t in (q, k, v)]


def _mask(L, S, causal, lengths, device):
    """The boolean mask (B or 1, 1, L, S) of the package's conventions, or None."""
    mask = causal_mask(L, S, device=device)[None, None] if causal else None
    if lengths is not None:
        keys = padding_mask(lengths, S)[:, None, None, :].to(device)
        mask = keys if mask is None else mask & keys
    return mask


def _reference(q, k, v, causal, lengths):
    """The package's attention in float64: output and log-sum-exp."""
    q64, k64, v64 = (t.double() for t in (q, k, v))
    mask = _mask(q.size(2), k.size(2), causal, lengths, q.device)
    out = scaled_dot_product_attention(q64, k64, v64, mask)[0]
    scores = q64 @ k64.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, torch.logsumexp(scores, dim=-1)


# (B, H, L, S, d, causal, lengths): L != S both ways, sizes not multiples of the 16-wide
# blocks, head sizes 16..128 (padded to powers of two), padded keys, empty sequences, and
# causal queries before the first key (L > S) whose rows are fully masked.
CASES = [
    pytest.param(2, 2, 33, 33, 32, False, None, id="square"),
    pytest.param(1, 2, 40, 40, 16, True, None, id="causal"),
    pytest.param(1, 2, 19, 45, 24, True, None, id="causal-L<S"),
    pytest.param(1, 2, 45, 19, 64, True, None, id="causal-L>S-empty-rows"),
    pytest.param(2, 1, 30, 37, 48, False, [37, 0], id="lengths-with-empty"),
    pytest.param(2, 2, 37, 37, 80, True, [9, 37], id="causal-lengths"),
    pytest.param(1, 1, 17, 23, 128, False, [20], id="d128"),
]


@pytest.mark.parametrize("batch,heads,L,S,d,causal,lengths", CASES)
def test_forward_and_gradients_match_float64_reference(
    kdevice, batch, heads, L, S, d, causal, lengths
):
    q, k, v = _inputs(batch, heads, L, S, d, kdevice)
    lens = torch.tensor(lengths, device=kdevice) if lengths is not None else None
    out, lse = flash.flash_attention_forward(q, k, v, causal=causal, lengths=lens)
    expected, expected_lse = _reference(q, k, v, causal, lengths)
    assert (
        out.dtype == torch.float32 and lse.dtype == torch.float32 and lse.shape == (batch, heads, L)
    )
    torch.testing.assert_close(out.double(), expected, atol=2e-6, rtol=1e-5)
    # -inf where the row is empty
    torch.testing.assert_close(lse.double(), expected_lse, atol=2e-6, rtol=1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(kdevice)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(expected, (q, k, v), grad.double())
    for name, g, w in zip("qkv", got, want):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.double(), w.double(), atol=5e-6, rtol=1e-5, msg=f"d{name}")


@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_sdpa(kdevice, causal):
    # torch's is_causal aligns top left; with L != S the bottom-right mask goes in as attn_mask
    q, k, v = _inputs(1, 3, 21, 34, 32, kdevice, seed=2)
    mask = causal_mask(21, 34, device=kdevice) if causal else None
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = flash.flash_attention(q, k, v, causal=causal)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(out)
    for g, w in zip(
        torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(expected, (q, k, v), grad)
    ):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_give_zeros_and_zero_gradients(kdevice):
    q, k, v = _inputs(2, 1, 20, 8, 16, kdevice, seed=3)
    lengths = torch.tensor([0, 8], device=kdevice)
    out, lse = flash.flash_attention_forward(q, k, v, causal=True, lengths=lengths)
    # sequence 0 has no key; in sequence 1 the first L - S = 12 causal queries precede every key
    assert (out[0] == 0).all() and (out[1, :, :12] == 0).all() and (out[1, :, 12:] != 0).any()
    assert (
        torch.isneginf(lse[0]).all()
        and torch.isneginf(lse[1, :, :12]).all()
        and torch.isfinite(lse[1, :, 12:]).all()
    )
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
    assert (
        (dq[0] == 0).all()
        and (dk[0] == 0).all()
        and (dv[0] == 0).all()
        and (dq[1, :, :12] == 0).all()
    )


def test_non_contiguous_inputs(kdevice):
    # (B, L, H, d) projections viewed as (B, H, L, d): strided, as a multi-head layer produces them
    g = torch.Generator().manual_seed(14)
    q, k, v = (
        torch.randn(2, 21, 3, 16, generator=g).to(kdevice).transpose(1, 2).requires_grad_()
        for _ in range(3)
    )
    assert not q.is_contiguous()
    out = flash.flash_attention(q, k, v, causal=True)
    expected, _ = _reference(q, k, v, True, None)
    torch.testing.assert_close(out.double(), expected, atol=2e-6, rtol=1e-5)
    for g_, w in zip(
        torch.autograd.grad(out.sum(), (q, k, v)), torch.autograd.grad(expected.sum(), (q, k, v))
    ):
        torch.testing.assert_close(g_.double(), w.double(), atol=5e-6, rtol=1e-5)


def test_scale_argument(kdevice):
    q, k, v = _inputs(1, 1, 18, 18, 16, kdevice, seed=4)
    out = flash.flash_attention(q, k, v, scale=0.3)
    expected = scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.3)[0]
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)
    # the backward kernels take the scale too (a backward that used 1/sqrt(d) was right forward)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(kdevice)
    for ours, theirs in zip(
        torch.autograd.grad(out, (q, k, v), grad),
        torch.autograd.grad(expected, (q, k, v), grad.double()),
    ):
        torch.testing.assert_close(ours.double(), theirs.double(), atol=1e-4, rtol=1e-4)


def test_float16_accumulates_in_float32(kdevice):
    q, k, v = _inputs(1, 2, 35, 35, 64, kdevice, dtype=torch.float16, seed=5)
    out = flash.flash_attention(q, k, v, causal=True)
    assert out.dtype == torch.float16
    expected, _ = _reference(q, k, v, True, None)
    torch.testing.assert_close(out.double(), expected, atol=2e-3, rtol=2e-3)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(6)).to(kdevice)
    for g, w in zip(
        torch.autograd.grad(out, (q, k, v), grad.half()),
        torch.autograd.grad(expected, (q, k, v), grad.double()),
    ):
        assert g.dtype == torch.float16
        torch.testing.assert_close(g.double(), w.double(), atol=1e-2, rtol=1e-2)


def test_bfloat16_on_cuda(kdevice):
    if kdevice.type != "cuda":
        pytest.skip("Triton's interpreter has no bfloat16: tested on CUDA only")
    if torch.cuda.get_device_capability(kdevice) < (8, 0):
        pytest.skip("no bfloat16 tensor cores before compute capability 8.0 (e.g. a T4)")
    q, k, v = _inputs(2, 2, 100, 130, 64, kdevice, dtype=torch.bfloat16, seed=7)
    out = flash.flash_attention(q, k, v, causal=True)
    expected, _ = _reference(q, k, v, True, None)
    torch.testing.assert_close(out.double(), expected, atol=2e-2, rtol=2e-2)
    for g, w in zip(
        torch.autograd.grad(out.float().sum(), (q, k, v)),
        torch.autograd.grad(expected.sum(), (q, k, v)),
    ):
        torch.testing.assert_close(g.double(), w.double(), atol=5e-2, rtol=5e-2)


def test_softmax_rows(kdevice):
    x = torch.randn(5, 37, generator=torch.Generator().manual_seed(8)).to(kdevice)
    torch.testing.assert_close(flash.softmax_rows(x), torch.softmax(x, -1))
    # scores in the hundreds overflow exp() unless the row's maximum is subtracted, and a -inf
    # score gets weight 0
    large = torch.cat(
        [x + 100, x[:1].masked_fill(torch.arange(37, device=x.device) < 5, float("-inf"))]
    )
    torch.testing.assert_close(flash.softmax_rows(large), torch.softmax(large, -1))


# -- adaptive span ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spans,ramp,L", [([0.0, 6.5, 17.2], 4.0, 50), ([3.3, 40.0, 80.0], 8.0, 41)]
)
def test_adaptive_span_matches_reference_with_span_gradient(kdevice, spans, ramp, L):
    q, k, v = _inputs(2, 3, L, L, 32, kdevice, seed=9)
    span = torch.tensor(spans, device=kdevice, requires_grad=True)
    out = flash.adaptive_span_flash_attention(q, k, v, span, ramp)
    expected, _ = adaptive_span_attention(q.double(), k.double(), v.double(), span.double(), ramp)
    torch.testing.assert_close(out.double(), expected, atol=2e-6, rtol=1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(10)).to(kdevice)
    got = torch.autograd.grad(out, (q, k, v, span), grad)
    want = torch.autograd.grad(expected, (q, k, v, span), grad.double())
    for name, g, w in zip(("dq", "dk", "dv", "dspan"), got, want):
        torch.testing.assert_close(g.double(), w.double(), atol=1e-5, rtol=1e-5, msg=name)
    assert got[3].dtype == span.dtype
    if spans[0] + ramp < L:  # a short head's span gets a gradient from its ramp keys
        assert got[3][0] != 0


def test_adaptive_span_float16(kdevice):
    q, k, v = _inputs(1, 2, 40, 40, 16, kdevice, dtype=torch.float16, seed=11)
    span = torch.tensor([5.0, 20.0], device=kdevice)
    out = flash.adaptive_span_flash_attention(q, k, v, span, 3.0)
    expected, _ = adaptive_span_attention(q.double(), k.double(), v.double(), span.double(), 3.0)
    torch.testing.assert_close(out.double(), expected, atol=2e-3, rtol=2e-3)


def _poisoned_rows(run, q, k, v, key_block, block_n):
    """Which query rows come out NaN when the keys and values of one key block are NaN."""
    k, v = k.detach().clone(), v.detach().clone()
    k[:, :, key_block * block_n : (key_block + 1) * block_n] = float("nan")
    v[:, :, key_block * block_n : (key_block + 1) * block_n] = float("nan")
    return torch.isnan(run(q.detach(), k, v)).any(-1)  # (B, H, L): 0 * NaN = NaN in a visited tile


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")
def test_kernels_visit_exactly_the_planned_tiles(kdevice):
    """A NaN key block spoils exactly the query blocks whose program visits it: the tiles module's plan."""
    L, S, block = 40, 56, 16
    q, k, v = _inputs(1, 1, L, S, 16, kdevice, seed=12)
    planned = tiles.tile_map(L, S, block, block, causal=True)
    for c in range(planned.size(1)):
        rows = _poisoned_rows(
            lambda *a: flash.flash_attention(*a, causal=True, block_m=block, block_n=block),
            q,
            k,
            v,
            c,
            block,
        )
        visited = rows[0, 0].view(-1).tolist()
        assert [visited[r * block] for r in range(planned.size(0))] == planned[:, c].tolist(), c
    # adaptive span: each head has its own plan, and short heads skip the far blocks
    L = 64
    q, k, v = _inputs(1, 2, L, L, 16, kdevice, seed=13)
    span, ramp = torch.tensor([3.0, 30.0], device=kdevice), 4.0
    maps = tiles.span_tile_maps(span.cpu(), ramp, L, block, block)
    for c in range(maps.size(2)):
        rows = _poisoned_rows(
            lambda *a: flash.adaptive_span_flash_attention(
                *a, span, ramp, block_m=block, block_n=block
            ),
            q,
            k,
            v,
            c,
            block,
        )
        for h in range(2):
            assert [bool(rows[0, h, r * block]) for r in range(maps.size(1))] == maps[
                h, :, c
            ].tolist(), (h, c)
    assert maps[0].sum() < maps[1].sum()


def test_bad_input_names_the_argument(kdevice):
    q, k, v = _inputs(1, 2, 8, 8, 16, kdevice)
    with pytest.raises(TypeError, match="query"):
        flash.flash_attention(q.double(), k, v)
    with pytest.raises(TypeError, match="key"):
        flash.flash_attention(q, k.long(), v)
    with pytest.raises(TypeError, match="dtype"):
        flash.flash_attention(q, k.half(), v)
    with pytest.raises(ValueError, match="query"):
        flash.flash_attention(q[0], k, v)
    with pytest.raises(ValueError, match="head size"):
        flash.flash_attention(q[..., :8], k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="value"):
        flash.flash_attention(q, k, v[:, :, :5])
    with pytest.raises(ValueError, match="lengths"):
        flash.flash_attention(q, k, v, lengths=torch.tensor([3, 4], device=kdevice))
    if flash_launch._reads_values(q):  # on a GPU, values are clamped instead (a test below)
        with pytest.raises(ValueError, match="lengths"):
            flash.flash_attention(q, k, v, lengths=torch.tensor([9], device=kdevice))
    with pytest.raises(TypeError, match="lengths"):
        flash.flash_attention(q, k, v, lengths=torch.tensor([3.0], device=kdevice))
    with pytest.raises(ValueError, match="block_m"):
        flash.flash_attention(q, k, v, block_m=24)
    with pytest.raises(ValueError, match="scale"):
        flash.flash_attention(q, k, v, scale=0.0)
    span = torch.tensor([1.0, 2.0], device=kdevice)
    with pytest.raises(ValueError, match="span"):
        flash.adaptive_span_flash_attention(q, k, v, span[:1], 2.0)
    if flash_launch._reads_values(span):  # on a GPU, an asynchronous assert (a test below)
        with pytest.raises(ValueError, match="span"):
            flash.adaptive_span_flash_attention(q, k, v, -span, 2.0)
    with pytest.raises(ValueError, match="ramp"):
        flash.adaptive_span_flash_attention(q, k, v, span, 0.0)
    with pytest.raises(ValueError, match="query and key"):
        flash.adaptive_span_flash_attention(q, k[:, :, :5], v[:, :, :5], span, 2.0)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match="query is on cpu"):
        flash.flash_attention(q, q, q)


# -- the tile plans (plain Python) -----------------------------------------------------------


@pytest.mark.parametrize("L,S", [(40, 40), (23, 50), (50, 23)])
def test_causal_plan_is_exactly_the_tiles_with_a_weight(L, S):
    mask = causal_mask(L, S)
    for bm, bn in ((16, 16), (16, 32), (32, 16)):
        planned = tiles.tile_map(L, S, bm, bn, causal=True)
        needed = torch.tensor(
            [
                [bool(mask[r : r + bm, c : c + bn].any()) for c in range(0, S, bn)]
                for r in range(0, L, bm)
            ]
        )
        assert torch.equal(planned, needed), (bm, bn)
        for c in range(planned.size(1)):  # the dK/dV programs' query ranges mirror it
            lo, hi = tiles.query_block_range(c * bn, bm, bn, S, L, causal=True)
            visited = [lo <= r * bm < hi for r in range(planned.size(0))]
            assert visited == planned[:, c].tolist()
    assert tiles.tile_map(L, S, 16, 16).all()


def test_span_plan_covers_every_weight_and_work_falls_with_the_span():
    L, ramp, block = 96, 4.0, 16
    spans = torch.tensor([0.0, 10.0, 30.0, 90.0])
    maps = tiles.span_tile_maps(spans, ramp, L, block, block)
    distance = torch.arange(L)[:, None] - torch.arange(L)[None, :]
    for h, z in enumerate(spans.tolist()):
        weight = (distance >= 0) & (distance < z + ramp)
        needed = torch.tensor(
            [
                [bool(weight[r : r + block, c : c + block].any()) for c in range(0, L, block)]
                for r in range(0, L, block)
            ]
        )
        assert (maps[h] | ~needed).all(), "a tile with a weight is skipped"
        assert (maps[h] & ~needed).sum() <= maps.size(1), "more than one extra tile per query block"
    counts = maps.sum(dim=(1, 2)).tolist()
    assert counts == sorted(counts) and counts[0] < counts[-1]
    # the longest is plain causal
    assert counts[-1] == tiles.tile_map(L, L, block, block, causal=True).sum()


# -- issue 18/21 fixes: each test failed on the kernels before the fix -------------------------


@pytest.mark.parametrize("L,S", [(1, 9), (7, 1), (1, 1)])
def test_gradients_of_strided_views_with_one_position(kdevice, L, S):
    """A decoder's q of shape (B, 1, H, d) viewed as (B, H, 1, d): the size-1 dimension keeps a
    stride that ``.contiguous()`` does not change; the kernels must address heads by their strides.
    """
    g = torch.Generator().manual_seed(20)
    q, k, v = (
        torch.randn(2, n, 3, 16, generator=g).to(kdevice).transpose(1, 2).requires_grad_()
        for n in (L, S, S)
    )
    assert q.stride(1) != q.size(2) * q.stride(2)  # bh * L * stride would address the wrong rows
    out = flash.flash_attention(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(21)).to(kdevice)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(expected, (q, k, v), grad)
    for name, a, b in zip("qkv", got, want):
        assert torch.isfinite(a).all(), name
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=f"d{name}")


@triton.jit
def _head_offset_probe(OUT, b, h, stride_b, stride_h):
    tl.store(OUT, flash_kernels._head_offset(b, h, stride_b, stride_h))


def test_head_offsets_are_64_bit_past_2_31(kdevice):
    """Where (b, h) starts for a tensor of more than 2^31 elements (computed, not allocated)."""
    out = torch.zeros(1, dtype=torch.int64, device=kdevice)
    b, h, stride_b, stride_h = 3, 5, 2**30, 2**27  # (B, H, L, d) = (4, 8, 2**20, 128)
    _head_offset_probe[(1,)](out, b, h, stride_b, stride_h)
    # 32-bit arithmetic would wrap to a negative offset
    assert int(out) == b * stride_b + h * stride_h > 2**31


def test_kernels_offsets_use_the_64_bit_helper():
    """Every kernel that addresses a (batch, head) goes through ``_head_offset`` (64 bits)."""
    import inspect

    for kernel in (
        flash_kernels._forward_kernel,
        flash_kernels._backward_dkdv_kernel,
        flash_kernels._backward_dq_kernel,
        flash_kernels._backward_preprocess_kernel,
    ):
        source = inspect.getsource(kernel.fn)
        assert "_head_offset(" in source and "bh * L *" not in source and "bh * S *" not in source


def test_grid_orders_and_their_limits():
    # blocks first (FlashAttention-2's order): blocks on axis 0, B and H on axes 1 and 2
    # > 65,535 blocks: fine on axis 0
    assert flash_launch._grid(4, 16, 70_000, True) == (70_000, 4, 16)
    with pytest.raises(ValueError, match="H = 65536 exceeds"):
        flash_launch._grid(1, 65_536, 1, True)
    with pytest.raises(ValueError, match="B = 70000 exceeds"):
        flash_launch._grid(70_000, 1, 1, True)
    # heads first: B * H on axis 0 (up to 2^31 - 1), the blocks on axis 1
    assert flash_launch._grid(7_000, 10, 3, False) == (70_000, 3)
    assert flash_launch._grid(2**31 - 1, 1, 1, False) == (2**31 - 1, 1)
    with pytest.raises(ValueError, match="grid axis 1"):
        flash_launch._grid(1, 1, 65_536, False)
    for blocks_first in (True, False):
        with pytest.raises(ValueError, match="B \\* H = 2147483648 exceeds"):
            flash_launch._grid(2**16, 2**15, 1, blocks_first)


@pytest.mark.parametrize("blocks_first", [True, False])
def test_launches_follow_the_configured_grid_order(blocks_first):
    """The launches the launcher builds (checked on meta tensors, B = 7,000 and H = 10)."""
    specs_grid = []
    q = torch.empty(7000, 10, 64, 32, device="meta")
    lse = torch.empty(7000, 10, 64, device="meta")
    cfg = LaunchConfig(64, 64, 4, 2, blocks_first)
    opts = flash_launch._Options(causal=True, ramp=1.0, scale=0.1)
    t = flash_launch._Pass(q, q, q, q, lse, do=q, delta=lse, dq=q, dk=q, dv=q, dspan=lse)
    kernel, grid, _, consts = flash_launch._forward_launch(t, opts, cfg)
    specs_grid.append(grid)
    assert consts["BLOCKS_FIRST"] is blocks_first
    for launch in flash_launch._backward_launches(t, opts, (cfg, cfg, cfg)):
        specs_grid.append(launch[1])
        assert launch[3]["BLOCKS_FIRST"] is blocks_first
    expected = (1, 7000, 10) if blocks_first else (70_000, 1)
    assert all(grid == expected for grid in specs_grid), specs_grid


def test_the_launcher_puts_blocks_first_by_default():
    assert launch_config((9, 0), torch.float16, 64, "forward").blocks_first
    q = torch.empty(2, 3, 100, 32, device="meta")
    assert flash_launch._config(q, "forward", None, None).blocks_first


def test_launch_override_replaces_fields_for_its_kernel_only():
    q = torch.empty(2, 3, 100, 32, device="meta")
    base = flash_launch._config(q, "forward", None, None)
    with flash.launch_override("forward", block_m=32, blocks_first=False):
        changed = flash_launch._config(q, "forward", None, None)
        other = flash_launch._config(q, "backward_dq", None, None)
        assert flash_launch._config(q, "forward", 64, None).block_m == 64  # the caller's block wins
    assert (changed.block_m, changed.blocks_first) == (32, False)
    assert other == base  # another kernel keeps its configuration
    assert flash_launch._config(q, "forward", None, None) == base  # restored on leaving
    with flash.launch_override(num_stages=3):
        assert flash_launch._config(q, "backward_dkdv", None, None).num_stages == 3


@pytest.mark.parametrize(
    "kernel,fields,error,match",
    [
        ("forwards", {}, ValueError, "kernel must be None or one of"),
        (None, {"block_k": 32}, TypeError, "unknown field 'block_k'"),
        (None, {"block_m": 48}, ValueError, "block_m must be a power of two"),
        (None, {"num_warps": 0}, ValueError, "num_warps"),
        (None, {"blocks_first": 1}, TypeError, "blocks_first must be a bool"),
    ],
)
def test_launch_override_refuses_what_no_launch_could_take(kernel, fields, error, match):
    with pytest.raises(error, match=match):
        with flash.launch_override(kernel, **fields):
            pass
    assert flash_launch._OVERRIDES == []


@pytest.mark.parametrize("causal,lengths", [(False, None), (True, [37, 9])])
def test_both_grid_orders_give_the_same_numbers(kdevice, causal, lengths):
    """Each order reads every (batch, head, block) once: outputs and gradients agree exactly
    with B != H, so that a swapped batch and head would show."""
    q, k, v = _inputs(2, 3, 37, 37, 32, kdevice, seed=3)
    lens = None if lengths is None else torch.tensor(lengths, device=kdevice)
    results = []
    for blocks_first in (True, False):
        with flash.launch_override(blocks_first=blocks_first):
            out = flash.flash_attention(q, k, v, causal=causal, lengths=lens)
            grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        results.append((out, *grads))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    expected, _ = _reference(q, k, v, causal, lens)
    torch.testing.assert_close(results[0][0].double(), expected, rtol=1e-5, atol=1e-5)


def test_launches_happen_under_a_guard_for_the_tensors_device(kdevice, monkeypatch):
    seen = []
    real = flash_launch._device_guard

    def recording(device):
        seen.append(device)
        return real(device)

    for module in (flash, flash_launch):  # softmax_rows's, the launcher's
        monkeypatch.setattr(module, "_device_guard", recording)
    q, k, v = _inputs(1, 1, 16, 16, 16, kdevice)
    flash.flash_attention(q, k, v).sum().backward()
    flash.softmax_rows(torch.ones(2, 3, device=kdevice))
    assert seen == [q.device] * 3  # forward, backward, softmax_rows (cuda:0, not cuda)


def test_device_guard_selects_the_tensors_gpu():
    guard = flash_launch._device_guard(torch.device("cuda", 1))
    assert isinstance(guard, torch.cuda.device) and guard.idx == 1
    assert not isinstance(flash_launch._device_guard(torch.device("cpu")), torch.cuda.device)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_a_second_gpu():
    q, k, v = _inputs(1, 2, 40, 40, 32, torch.device("cuda", 1))
    out = flash.flash_attention(q, k, v, causal=True)
    torch.testing.assert_close(
        out.double(), _reference(q, k, v, True, None)[0], atol=2e-5, rtol=1e-4
    )


def test_no_host_synchronisation_for_gpu_tensors(kdevice, monkeypatch):
    """On a GPU, reading a tensor's values on the host waits for the GPU: the launch path must not.
    Checked on the CPU by treating the tensors as GPU tensors and failing every host read."""
    q, k, v = _inputs(2, 2, 20, 20, 16, kdevice)
    lengths = torch.tensor([20, 7], device=kdevice)
    span = torch.tensor([3.0, 9.0], device=kdevice, requires_grad=True)
    for module in (flash, flash_launch):  # the span's check and the launcher's
        monkeypatch.setattr(module, "_reads_values", lambda x: False)
    monkeypatch.setattr(torch, "_assert_async", lambda *a, **kw: None)

    def sync(*args, **kwargs):
        raise AssertionError("host synchronisation in the launch path")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, sync)
    out = flash.flash_attention(q, k, v, causal=True, lengths=lengths)
    out.backward(torch.ones_like(out))
    flash.adaptive_span_flash_attention(q, k, v, span, 2.0).backward(torch.ones_like(out))
    monkeypatch.undo()
    torch.testing.assert_close(
        out.double(), _reference(q, k, v, True, [20, 7])[0], atol=2e-6, rtol=1e-5
    )


def test_lengths_out_of_range_on_a_gpu_are_clamped_not_read(kdevice, monkeypatch):
    q, k, v = _inputs(2, 1, 10, 10, 16, kdevice)
    for module in (flash, flash_launch):  # the span's check and the launcher's
        monkeypatch.setattr(module, "_reads_values", lambda x: False)
    out = flash.flash_attention(q, k, v, lengths=torch.tensor([-3, 99], device=kdevice))
    expected = flash.flash_attention(q, k, v, lengths=torch.tensor([0, 10], device=kdevice))
    assert torch.equal(out, expected)


@pytest.mark.parametrize("flag", ["False", 0, 1, None, torch.tensor(True)])
def test_causal_must_be_a_bool(kdevice, flag):
    q, k, v = _inputs(1, 1, 8, 8, 16, kdevice)
    with pytest.raises(TypeError, match="causal must be a bool"):
        flash.flash_attention(q, k, v, causal=flag)
    with pytest.raises(TypeError, match="causal must be a bool"):
        flash.flash_attention_forward(q, k, v, causal=flag)


def test_bfloat16_under_the_interpreter_is_refused():
    if not flash.interpreting():
        pytest.skip("about Triton's interpreter; compiled, CPU tensors are refused (test above)")
    q = torch.randn(1, 1, 8, 16).bfloat16()
    with pytest.raises(TypeError, match="interpreter has no bfloat16"):
        flash.flash_attention(q, q, q)
    with pytest.raises(TypeError, match="interpreter has no bfloat16"):
        flash.softmax_rows(q[0, 0])
    with pytest.raises(TypeError, match="interpreter has no bfloat16"):
        flash.adaptive_span_flash_attention(q, q, q, torch.ones(1), 2.0)


@pytest.mark.parametrize(
    "x,error,match",
    [
        (torch.zeros(3, 0), ValueError, "empty rows"),
        (torch.zeros(3), ValueError, "dimensions"),
        (torch.zeros(2, 3, dtype=torch.float64), TypeError, "float16, bfloat16 or float32"),
        (torch.zeros(2, 3, dtype=torch.int64), TypeError, "floating"),
        ([[1.0, 2.0]], TypeError, "torch.Tensor"),
    ],
)
def test_softmax_rows_refuses_degenerate_input(kdevice, x, error, match):
    x = x.to(kdevice) if isinstance(x, torch.Tensor) else x
    with pytest.raises(error, match=match):
        flash.softmax_rows(x)


def test_softmax_rows_of_no_rows(kdevice):
    assert flash.softmax_rows(torch.zeros(0, 5, device=kdevice)).shape == (0, 5)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(scale=float("inf")), ValueError, "scale"),
        (dict(scale=float("nan")), ValueError, "scale"),
        (dict(scale=-1.0), ValueError, "scale"),
        (dict(scale=True), TypeError, "scale"),
        (dict(block_m=16.0), TypeError, "block_m"),
        (dict(block_n=True), TypeError, "block_n"),
        (dict(block_n=8), ValueError, "block_n"),
        (dict(lengths=[3]), TypeError, "lengths"),
        (dict(lengths=torch.tensor([True])), TypeError, "lengths"),
        (dict(lengths=torch.tensor([-1])), ValueError, "lengths"),
    ],
)
def test_every_argument_is_checked(kdevice, kwargs, error, match):
    q, k, v = _inputs(1, 1, 8, 8, 16, kdevice)
    if isinstance(kwargs.get("lengths"), torch.Tensor):
        kwargs = dict(lengths=kwargs["lengths"].to(kdevice))
        if error is ValueError and not flash_launch._reads_values(kwargs["lengths"]):
            pytest.skip("on a GPU, lengths are clamped, not read (test_lengths_out_of_range_...)")
    with pytest.raises(error, match=match):
        flash.flash_attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    "span,ramp,error,match",
    [
        ([1.0, float("nan")], 2.0, ValueError, "span"),
        ([1.0, float("inf")], 2.0, ValueError, "span"),
        ([1, 2], 2.0, TypeError, "span"),
        ([1.0, 2.0], float("inf"), ValueError, "ramp"),
        ([1.0, 2.0], -1.0, ValueError, "ramp"),
        ([1.0, 2.0], "2", TypeError, "ramp"),
    ],
)
def test_adaptive_span_arguments_are_checked(kdevice, span, ramp, error, match):
    q, k, v = _inputs(1, 2, 8, 8, 16, kdevice)
    span = torch.tensor(span, device=kdevice)
    if match == "span" and error is ValueError and not flash_launch._reads_values(span):
        pytest.skip("on a GPU, span's values are asserted asynchronously (the test below)")
    with pytest.raises(error, match=match):
        flash.adaptive_span_flash_attention(q, k, v, span, ramp)


_BAD_SPAN_ON_A_GPU = """
import torch
from attncourse.kernels import flash
q = torch.randn(1, 2, 8, 16, device="cuda")
flash.adaptive_span_flash_attention(q, q, q, torch.tensor([1.0, {value}], device="cuda"), 2.0)
torch.cuda.synchronize()
print("no error")
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("value", ["float('nan')", "float('inf')", "-1.0"])
def test_span_values_on_a_gpu_fail_at_the_next_synchronisation(value):
    """On a GPU the span is checked without waiting for it (``torch._assert_async``): a bad
    value fails the process at its next synchronisation. In a child process, because a
    device-side assert leaves the CUDA context unusable."""
    root = Path(__file__).resolve().parents[1]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    code = _BAD_SPAN_ON_A_GPU.format(value=value)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=root
    )
    assert done.returncode != 0 and "no error" not in done.stdout, done.stdout
    assert "device-side assert" in done.stderr, done.stderr[-2000:]


def test_empty_batch_or_heads_are_refused(kdevice):
    q = torch.zeros(0, 2, 8, 16, device=kdevice)
    with pytest.raises(ValueError, match="at least one batch"):
        flash.flash_attention(q, q, q)


# -- the loop split: every tile the plan lists is computed, with or without masks ---------------


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")
def test_dkdv_kernel_visits_exactly_the_planned_query_blocks(kdevice):
    """A NaN query block spoils the dK of exactly the key blocks whose program visits it."""
    L, block = 64, 16
    q, k, v = _inputs(1, 2, L, L, 16, kdevice, seed=30)
    span, ramp = torch.tensor([3.0, 30.0], device=kdevice), 4.0
    maps = tiles.span_tile_maps(span.cpu(), ramp, L, block, block)
    for r in range(maps.size(1)):
        qn = q.detach().clone()
        qn[:, :, r * block : (r + 1) * block] = float("nan")
        qn.requires_grad_()
        kk = k.detach().clone().requires_grad_()
        out = flash.adaptive_span_flash_attention(
            qn, kk, v.detach(), span, ramp, block_m=block, block_n=block
        )
        (dk,) = torch.autograd.grad(out, (kk,), torch.ones_like(out))
        for h in range(2):
            spoiled = [bool(torch.isnan(dk[0, h, c * block]).any()) for c in range(maps.size(2))]
            assert spoiled == maps[h, r].tolist(), (h, r)


# -- adaptive span: the tiles the kernel computes, at the size ---------------------------


# fmt: off
@triton.jit
def _key_range_probe(OUT, L, S, LENGTHS, SPANS, WINDOWS,  #
                     CAUSAL: tl.constexpr, HAS_LENGTHS: tl.constexpr, HAS_SPAN: tl.constexpr,  #
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    kv_len, lo, full_lo, full_hi, hi, span = flash_kernels._key_range(
        start_m, 0, 0, L, S, LENGTHS, SPANS, WINDOWS,  #
        CAUSAL, HAS_LENGTHS, HAS_SPAN, BLOCK_M, BLOCK_N)
    base = OUT + tl.program_id(0) * 4
    tl.store(base, lo)
    tl.store(base + 1, full_lo)
    tl.store(base + 2, full_hi)
    tl.store(base + 3, hi)
# fmt: on


def _kernel_key_ranges(L, S, block, causal, span=None, ramp=None, length=None):
    """``(query blocks, 4)``: the forward kernel's ``lo, full_lo, full_hi, hi`` per query block."""
    out = torch.zeros(math.ceil(L / block), 4, dtype=torch.int32)
    spans = torch.tensor([float(span)]) if span is not None else torch.zeros(1)
    windows = (
        tiles.span_windows(spans, ramp, L)
        if span is not None
        else torch.zeros(1, dtype=torch.int32)
    )
    lengths = (
        torch.tensor([length], dtype=torch.int32)
        if length is not None
        else torch.zeros(1, dtype=torch.int32)
    )
    _key_range_probe[(out.size(0),)](
        out,
        L,
        S,
        lengths,
        spans,
        windows,
        CAUSAL=causal or span is not None,
        HAS_LENGTHS=length is not None,
        HAS_SPAN=span is not None,
        BLOCK_M=block,
        BLOCK_N=block,
    )
    return out.long()


@pytest.mark.skipif(not flash.interpreting(), reason="the probe runs through the interpreter")
def test_span_256_of_4096_computes_369_tiles_instead_of_2080():
    """Issue 18's adaptive-span target on the CPU: with every span at 256 (ramp 32) of L = 4,096,
    causal, 64 x 64 tiles, the kernel's loops visit 369 tiles per head, against 2,080 at full span.
    """
    L, block, ramp = 4096, 64, 32.0
    maps = tiles.span_tile_maps(torch.tensor([256.0, float(L)]), ramp, L, block, block)
    assert maps.sum(dim=(1, 2)).tolist() == [369, 2080]
    for span, expected in ((256.0, 369), (float(L), 2080)):
        ranges = _kernel_key_ranges(L, L, block, True, span=span, ramp=ramp)
        lo, full_lo, full_hi, hi = ranges.unbind(1)
        visited = ((hi - lo + block - 1) // block).clamp_min(0)
        assert int(visited.sum()) == expected
        planned = tiles.span_tile_maps(torch.tensor([span]), ramp, L, block, block)[0]
        for r in range(planned.size(0)):  # the same tiles, block by block
            row = torch.zeros(planned.size(1), dtype=torch.bool)
            row[int(lo[r]) // block : (int(hi[r]) + block - 1) // block] = True
            assert torch.equal(row, planned[r]), r
    print(f"tiles per head: {2080} at full span, {369} at span 256: {2080 / 369:.2f}x fewer")


@pytest.mark.skipif(not flash.interpreting(), reason="the probe runs through the interpreter")
@pytest.mark.parametrize(
    "L,S,causal,span,length",
    [
        (300, 300, True, None, None),
        (200, 333, True, None, 250),
        (256, 256, False, None, 100),
        (260, 260, True, 70.5, None),
        (256, 256, True, 0.0, None),
        (256, 256, True, 64.0, None),
    ],
)
def test_whole_tiles_need_no_mask_and_boundary_tiles_are_few(L, S, causal, span, length):
    """The loop split: every tile in [full_lo, full_hi) has weight 1 everywhere (no mask, no ramp);
    the masked tiles are at most a few per query block."""
    block, ramp = 16, 8.0
    ranges = _kernel_key_ranges(L, S, block, causal, span=span, ramp=ramp, length=length)
    kv_len = S if length is None else length
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    visible = (j < kv_len) & (j <= i + (S - L) if causal or span is not None else True)
    whole_weight = visible & ((i - j) < span if span is not None else True)
    for r, (lo, full_lo, full_hi, hi) in enumerate(ranges.tolist()):
        assert lo <= full_lo <= full_hi <= hi and (full_hi - full_lo) % block == 0
        rows = slice(r * block, min((r + 1) * block, L))
        for c in range(full_lo, full_hi, block):
            assert whole_weight[rows, c : c + block].all(), (r, c)
        boundary = math.ceil((full_lo - lo) / block) + math.ceil(max(hi - full_hi, 0) / block)
        assert boundary <= 2 + (math.ceil((ramp + 1) / block) if span is not None else 0), (
            r,
            boundary,
        )
