"""Property tests of the package against independent references, and its answers to bad input.

Hypothesis draws shapes (including empty dimensions L = 0 and S = 0), batch dimensions,
dtypes and memory layouts (non-contiguous transposes, stride-0 expanded views); each result
is compared with torch's own SDPA, ``nn.MultiheadAttention`` or a float64 recomputation.
The bad-input table checks that every public function refuses what it cannot compute with
a ``TypeError``/``ValueError`` naming the argument the caller passed and what it saw.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attncourse import masks as M
from attncourse.adaptive_span import (
    AdaptiveSpan,
    AdaptiveSpanAttention,
    AdaptiveSpanBlock,
    adaptive_span_attention,
    adaptive_span_lm,
    attention_cells,
    clamp_spans,
    computed_cells,
    soft_span_mask,
    span_penalty,
    span_window,
)
from attncourse.all_attention import AllAttention, AllAttentionBlock, ffn_as_attention
from attncourse.attention import safe_softmax, scaled_dot_product_attention
from attncourse.course.lookup_task import lookup_sequences
from attncourse.course.text import CharTokenizer, train_val_split
from attncourse.course.toy_translation import alignment_accuracy, number_to_words, split_numbers
from attncourse.efficient import online_softmax_update, tiled_attention
from attncourse.kv_cache import KVCache
from attncourse.multihead import MultiHeadAttention, merge_heads, split_heads
from attncourse.sampling import generate
from attncourse.training import next_token_loss, train
from attncourse.transformer import CausalLM, FeedForward, Seq2SeqTransformer, TransformerBlock

TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def layout(x: torch.Tensor, how: str) -> torch.Tensor:
    """The same values as ``x`` in another memory layout."""
    if how == "transposed":  # non-contiguous: the last two dims swapped in memory
        return x.transpose(-2, -1).contiguous().transpose(-2, -1)
    if how == "expanded" and x.dim() >= 3:  # stride 0 along the first batch dimension
        return x[:1].expand(x.shape)
    return x


@st.composite
def attention_case(draw, dtypes=(torch.float64, torch.float32, torch.float16, torch.bfloat16)):
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    L, S = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(0, 4))
    dtype = draw(st.sampled_from(dtypes))
    how = draw(st.sampled_from(["contiguous", "transposed", "expanded"]))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    # an argument whose batch size 1 broadcasts
    one = draw(st.sampled_from(["none", "query", "key", "value"]))
    q, k, v = (
        torch.randn(
            *((1,) + batch[1:] if name == one and batch else batch),
            n,
            d,
            generator=g,
            dtype=torch.float64,
        )
        for name, n, d in (("query", L, d_k), ("key", S, d_k), ("value", S, d_v))
    )
    if how == "expanded":
        q, k, v = (x[:1].expand(x.shape) if x.dim() >= 3 else x for x in (q, k, v))
    mask = None
    if draw(st.booleans()):
        mask = torch.rand(L, S, generator=g) > 0.3
    return [layout(x.to(dtype), how) for x in (q, k, v)], mask, dtype


@given(attention_case())
def test_sdpa_matches_torch_sdpa_in_every_dtype_layout_and_empty_dimension(case):
    (q, k, v), mask, dtype = case
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    # the reference: torch's math computed in float64 from the same (rounded) inputs
    q64, k64, v64 = q.double(), k.double(), v.double()
    ref = (
        F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask)
        if q.size(-2) and k.size(-2)
        else None
    )
    assert out.dtype == dtype and weights.dtype == dtype
    assert out.shape == (
        *torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]),
        q.size(-2),
        v.size(-1),
    )
    assert torch.isfinite(out).all()
    if ref is None:  # L = 0 (nothing) or S = 0 (no key: zeros)
        assert (out == 0).all()
        return
    keep = mask.any(-1) if mask is not None else torch.ones(q.size(-2), dtype=torch.bool)
    # rows with no visible key: torch gives NaN, the package zeros
    assert (out[..., ~keep, :] == 0).all()
    torch.testing.assert_close(
        out[..., keep, :].double(), ref[..., keep, :], atol=TOL[dtype] * 10, rtol=TOL[dtype] * 10
    )
    rows = weights.double().sum(-1)
    torch.testing.assert_close(
        rows[..., keep], torch.ones_like(rows[..., keep]), atol=TOL[dtype] * 10, rtol=0
    )


@given(
    attention_case(dtypes=(torch.float64, torch.float32)),
    st.integers(1, 4),
    st.integers(1, 4),
    st.booleans(),
)
def test_tiled_attention_equals_sdpa_for_any_blocks(case, block_n, block_m, causal):
    (q, k, v), mask, dtype = case
    out = tiled_attention(q, k, v, mask, causal=causal, block_m=block_m, block_n=block_n)
    full = mask
    if causal:
        cm = M.causal_mask(q.size(-2), k.size(-2))
        full = cm if mask is None else mask & cm
    ref, _ = scaled_dot_product_attention(q, k, v, full)
    assert out.shape == ref.shape and out.dtype == dtype
    torch.testing.assert_close(out, ref, atol=TOL[dtype] * 10, rtol=TOL[dtype] * 10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_do_not_overflow(dtype):
    """|q.k| of about 1e5 overflows float16 (max 65504) before the 1/sqrt(d) scale; torch's SDPA stays finite."""
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(2, 4, 16, generator=g) * 100).to(dtype)
    k = (torch.randn(2, 5, 16, generator=g) * 100).to(dtype)
    v = torch.randn(2, 5, 16, generator=g).to(dtype)
    # the trap exists
    assert not torch.isfinite((q @ k.transpose(-2, -1)).float().to(torch.float16)).all()
    out, weights = scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(out.double(), ref, atol=TOL[dtype] * 20, rtol=TOL[dtype] * 20)
    torch.testing.assert_close(
        tiled_attention(q, k, v).double(), ref, atol=TOL[dtype] * 20, rtol=TOL[dtype] * 20
    )


@given(
    st.integers(1, 2),
    st.integers(0, 5),
    st.integers(0, 5),
    st.sampled_from([(4, 1), (4, 2), (6, 3)]),
    st.sampled_from([torch.float32, torch.float64]),
    st.booleans(),
    st.integers(0, 1000),
)
def test_multihead_matches_torch_multihead_attention(batch, L, S, dims, dtype, with_mask, seed):
    embed_dim, num_heads = dims
    torch.manual_seed(seed)
    ref = torch.nn.MultiheadAttention(embed_dim, num_heads, batch_first=True).to(dtype).eval()
    ours = MultiHeadAttention.from_torch(ref)
    q, k = (
        torch.randn(batch, L, embed_dim, dtype=dtype),
        torch.randn(batch, S, embed_dim, dtype=dtype),
    )
    mask = (torch.rand(L, S) > 0.3) if with_mask else None
    out, weights = ours(q, layout(k, "transposed"), k, mask)
    assert out.shape == (batch, L, embed_dim) and weights.shape == (batch, num_heads, L, S)
    if L == 0 or S == 0:
        return
    expected, _ = ref(q, k, k, attn_mask=None if mask is None else ~mask, need_weights=False)
    keep = mask.any(-1) if mask is not None else torch.ones(L, dtype=torch.bool)
    torch.testing.assert_close(
        out[:, keep], expected[:, keep], atol=TOL[dtype] * 10, rtol=TOL[dtype] * 10
    )


@given(st.lists(st.integers(0, 6), max_size=5), st.integers(0, 3))
def test_padding_mask_matches_a_loop(lengths, extra):
    max_len = max(lengths, default=0) + extra
    mask = M.padding_mask(lengths, max_len)
    assert mask.shape == (len(lengths), max_len)
    for b, n in enumerate(lengths):
        assert mask[b].tolist() == [j < n for j in range(max_len)]
    # numpy integers are integers too
    assert torch.equal(M.padding_mask(np.array(lengths, dtype=np.int64), np.int64(max_len)), mask)


@given(st.integers(0, 6), st.integers(0, 6))
def test_causal_mask_matches_its_definition(L, S):
    mask = M.causal_mask(L, S)
    assert mask.shape == (L, S)
    assert mask.tolist() == [[j <= i + S - L for j in range(S)] for i in range(L)]


@given(
    st.integers(0, 5),
    st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
)
def test_to_additive_matches_masked_fill(n, dtype):
    mask = torch.rand(n, 3, generator=torch.Generator().manual_seed(n)) > 0.5
    additive = M.to_additive(mask, dtype)
    assert additive.dtype == dtype
    assert torch.equal(torch.isneginf(additive), ~mask) and (additive[mask] == 0).all()
    assert torch.equal(M.to_boolean(additive), mask)


def test_padding_mask_takes_zero_dim_integer_tensors_and_a_device():
    lengths = [torch.tensor(1), torch.tensor(3, dtype=torch.int32), np.int64(0)]
    assert M.padding_mask(lengths).tolist() == [
        [True, False, False],
        [True, True, True],
        [False, False, False],
    ]
    meta = M.padding_mask(torch.tensor([1, 2]), 3, device="meta")
    assert meta.device.type == "meta" and meta.shape == (2, 3)


def test_to_additive_casts_a_float_mask_to_the_dtype():
    mask = torch.tensor([[0.0, float("-inf")]])
    assert M.to_additive(mask, torch.float64).dtype == torch.float64
    assert M.to_additive(mask.double(), torch.float16).dtype == torch.float16


def test_empty_sequences_give_empty_results():
    x0 = torch.randn(2, 0, 8)
    assert AllAttention(8, 2, 3)(x0)[0].shape == (2, 0, 8)
    layer = AdaptiveSpanAttention(8, 2, 4, 1.0)
    out, weights = layer(x0)
    assert out.shape == (2, 0, 8) and weights.shape == (2, 2, 0, 0) and layer.cells == 0
    out, weights = adaptive_span_attention(
        *(torch.randn(1, 2, 0, 4) for _ in range(3)), torch.tensor([1.0, 2.0]), 1.0
    )
    assert out.shape == (1, 2, 0, 4) and weights.shape == (1, 2, 0, 0)
    assert TransformerBlock(8, 2, 16)(x0).shape == (2, 0, 8)
    lm = CausalLM.standard(10, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=6)
    assert lm(torch.zeros(1, 0, dtype=torch.long)).shape == (1, 0, 10)
    assert tiled_attention(
        torch.randn(3, 0, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 2)
    ).shape == (3, 0, 2)
    # d_k = 0 with an explicit scale: every score is 0, uniform weights
    out, weights = scaled_dot_product_attention(
        torch.randn(2, 0), torch.randn(4, 0), torch.arange(4.0)[:, None], scale=1.0
    )
    assert torch.allclose(weights, torch.full((2, 4), 0.25)) and torch.allclose(
        out, torch.full((2, 1), 1.5)
    )


def test_layers_in_float64_match_float32():
    torch.manual_seed(0)
    for layer in (
        AllAttention(8, 2, 3),
        AdaptiveSpanAttention(8, 2, 4, 1.0),
        TransformerBlock(8, 2, 16),
        AllAttentionBlock(8, 2, 3),
    ):
        x = torch.randn(2, 5, 8)
        out32 = layer(x)
        out64 = layer.double()(x.double())
        a = out32[0] if isinstance(out32, tuple) else out32
        b = out64[0] if isinstance(out64, tuple) else out64
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5)


def test_all_attention_memory_scales_and_span_mask_dtype():
    # N = 9 persistent vectors and heads of d_k = 4: sqrt(N) = 3 and sqrt(d_k) = 2 tell the
    # two scales apart (and neither is 1 or the number of heads)
    layer = AllAttention(12, 3, 9)
    key, value = layer.memory()
    torch.testing.assert_close(value, layer.persistent_value * 3.0)  # sqrt(N)
    torch.testing.assert_close(key, layer.persistent_key * 2.0)  # sqrt(d_k)
    out, weights = AllAttention(8, 2, 3)(X, span_mask=torch.ones(4, 4, dtype=torch.float64))
    assert out.dtype == torch.float32 and weights.dtype == torch.float32


def test_adaptive_span_penalty_and_window_before_clamping():
    span = AdaptiveSpan(2, 8, 1.5)
    assert float(span.penalty(0.0)) == 0.0  # a weight of 0 is allowed
    with torch.no_grad():
        span.span_fraction.fill_(-0.5)  # an optimiser step may leave the fractions outside [0, 1]
    assert span.window() == 2  # ceil(0 + 1.5): the span counts as 0 until clamp_ is called
    with torch.no_grad():
        span.span_fraction.fill_(2.0)
    assert span.window() == 10  # ceil(8 + 1.5)
    assert span.window(5) == 5


def test_defaults_of_adaptive_span_lm():
    model = adaptive_span_lm(10, max_span=4, ramp=1.0)
    block = model.blocks[0]
    assert len(model.blocks) == 1 and model.embed.positions.num_embeddings == 128
    assert (
        block.self_attn.projections.embed_dim == 64 and block.self_attn.projections.num_heads == 4
    )
    assert block.ffn.linear1.out_features == 256 and block.self_attn.block_m == 16
    assert AdaptiveSpanAttention(8, 2, 4, 1.0).cells == 0 and block.self_attn.trim is True


r = torch.randn
Q3, K3, V3 = r(2, 3, 4), r(2, 5, 4), r(2, 5, 6)
X = r(2, 4, 8)
SPAN = torch.tensor([1.0, 2.0])
Q4 = r(1, 2, 6, 4)


def cache_holding(window=None):
    """A KVCache that already stored one float32 step of shape (1, 2, 1, 4)."""
    cache = KVCache(window)
    cache.update(Q4[:, :, :1], Q4[:, :, :1])
    return cache


def x_refused(name, layer, width_words):
    """The three refusals of a layer's input ``x`` (an integer tensor, float64 for float32
    weights, the wrong width), as rows of ``BAD``: ``layer()`` builds a fresh layer, and the
    wrong width's message must hold ``width_words``."""
    return [
        (f"{name} int x", lambda: layer()(X.long()), TypeError, ["x", "int64"]),
        (f"{name} float64 x", lambda: layer()(X.double()), TypeError, ["x", "float64", "float32"]),
        (f"{name} x width", lambda: layer()(r(2, 4, 6)), ValueError, ["x", *width_words]),
    ]


BAD = [
    # (description, call, exception, words the message must contain)
    (
        "sdpa int query",
        lambda: scaled_dot_product_attention(Q3.long(), K3, V3),
        TypeError,
        ["query", "int64"],
    ),
    (
        "sdpa d_k=0 default scale",
        lambda: scaled_dot_product_attention(r(2, 0), r(3, 0), r(3, 1)),
        ValueError,
        ["query", "d_k = 0", "(2, 0)"],
    ),
    (
        "sdpa scale 0",
        lambda: scaled_dot_product_attention(Q3, K3, V3, scale=0.0),
        ValueError,
        ["scale", "0.0"],
    ),
    (
        "sdpa d_k mismatch",
        lambda: scaled_dot_product_attention(Q3, V3, V3),
        ValueError,
        ["query", "key", "(2, 3, 4)", "(2, 5, 6)"],
    ),
    ("safe_softmax list", lambda: safe_softmax([1.0, 2.0]), TypeError, ["scores", "list"]),
    (
        "safe_softmax scalar",
        lambda: safe_softmax(torch.tensor(1.0)),
        ValueError,
        ["scores", "at least 1", "()"],
    ),
    (
        "safe_softmax int",
        lambda: safe_softmax(torch.ones(3, dtype=torch.long)),
        TypeError,
        ["scores", "int64"],
    ),
    (
        "online int max",
        lambda: online_softmax_update(torch.zeros(2, dtype=torch.long), torch.zeros(2), r(2, 3)),
        TypeError,
        ["running_max", "int64"],
    ),
    (
        "online int sum",
        lambda: online_softmax_update(torch.zeros(2), torch.zeros(2, dtype=torch.long), r(2, 3)),
        TypeError,
        ["running_sum", "int64"],
    ),
    (
        "online int scores",
        lambda: online_softmax_update(
            torch.zeros(2), torch.zeros(2), torch.ones(2, 3, dtype=torch.long)
        ),
        TypeError,
        ["scores", "int64"],
    ),
    (
        "online 0-d scores",
        lambda: online_softmax_update(torch.zeros(()), torch.zeros(()), torch.tensor(1.0)),
        ValueError,
        ["scores", "0-d"],
    ),
    (
        "online shapes",
        lambda: online_softmax_update(torch.zeros(2), torch.zeros(3), r(2, 3)),
        ValueError,
        ["running_max (2,)", "running_sum (3,)", "scores (2,)"],
    ),
    (
        "tiled d_k=0",
        lambda: tiled_attention(r(2, 0), r(3, 0), r(3, 1)),
        ValueError,
        ["query", "d_k = 0"],
    ),
    (
        "tiled causal int",
        lambda: tiled_attention(Q3, K3, V3, causal=1),
        TypeError,
        ["causal", "int"],
    ),
    (
        "tiled block_n float",
        lambda: tiled_attention(Q3, K3, V3, block_n=2.0),
        TypeError,
        ["block_n", "2.0"],
    ),
    (
        "tiled block_m 0",
        lambda: tiled_attention(Q3, K3, V3, block_m=0),
        ValueError,
        ["block_m", "0"],
    ),
    ("tiled scale", lambda: tiled_attention(Q3, K3, V3, scale=-1.0), ValueError, ["scale", "-1.0"]),
    ("padding float list", lambda: M.padding_mask([1.5, 2]), TypeError, ["lengths", "1.5"]),
    (
        "padding float tensor",
        lambda: M.padding_mask(torch.tensor([1.5, 2.0])),
        TypeError,
        ["lengths", "float32"],
    ),
    ("padding str", lambda: M.padding_mask("ab"), TypeError, ["lengths", "str"]),
    ("padding int", lambda: M.padding_mask(3), TypeError, ["lengths", "int"]),
    (
        "padding bool tensor",
        lambda: M.padding_mask(torch.tensor([True])),
        TypeError,
        ["lengths", "bool"],
    ),
    (
        "padding 2-d",
        lambda: M.padding_mask(torch.ones(2, 2, dtype=torch.long)),
        ValueError,
        ["lengths", "(2, 2)"],
    ),
    ("padding negative", lambda: M.padding_mask([1, -1]), ValueError, ["lengths", "-1"]),
    (
        "padding max_len small",
        lambda: M.padding_mask([1, 4], 3),
        ValueError,
        ["max_len=3", "[1, 4]"],
    ),
    ("padding max_len float", lambda: M.padding_mask([1, 2], 3.0), TypeError, ["max_len", "3.0"]),
    ("causal negative", lambda: M.causal_mask(-1), ValueError, ["query_len", "-1"]),
    ("causal key float", lambda: M.causal_mask(2, 1.5), TypeError, ["key_len", "1.5"]),
    (
        "to_additive bool dtype",
        lambda: M.to_additive(torch.ones(2, 2, dtype=torch.bool), torch.bool),
        TypeError,
        ["dtype", "torch.bool"],
    ),
    (
        "to_additive long dtype",
        lambda: M.to_additive(torch.ones(2, 2, dtype=torch.bool), torch.long),
        TypeError,
        ["dtype", "torch.int64"],
    ),
    (
        "to_additive str dtype",
        lambda: M.to_additive(torch.ones(2, 2, dtype=torch.bool), "float32"),
        TypeError,
        ["dtype", "float32"],
    ),
    ("to_additive list", lambda: M.to_additive([True]), TypeError, ["mask", "list"]),
    ("from_ignore list", lambda: M.from_ignore_mask([True]), TypeError, ["mask", "list"]),
    ("to_boolean list", lambda: M.to_boolean([True]), TypeError, ["mask", "list"]),
    (
        "multihead masks heads 0",
        lambda: M.from_multihead_masks(torch.zeros(2, 2, dtype=torch.bool), num_heads=0),
        ValueError,
        ["num_heads", "0"],
    ),
    (
        "padding 0-d float tensors",
        lambda: M.padding_mask([torch.tensor(1), torch.tensor(1.5)]),
        TypeError,
        ["lengths", "1.5"],
    ),
    (
        "padding 0-d bool tensors",
        lambda: M.padding_mask([torch.tensor(True)]),
        TypeError,
        ["lengths", "True"],
    ),
    (
        "padding 1-d tensors",
        lambda: M.padding_mask([torch.tensor([1, 2])]),
        TypeError,
        ["lengths", "[1, 2]"],
    ),
    ("padding float", lambda: M.padding_mask([2.0]), TypeError, ["lengths", "2.0", "float"]),
    (
        "to_boolean lists the values",
        lambda: M.to_boolean(torch.tensor([0.0, -1e9, 5.0, 5.0, float("-inf")])),
        ValueError,
        ["holds [-1000000000.0, 5.0]"],
    ),
    (
        "to_boolean at most five values",
        lambda: M.to_boolean(torch.arange(8.0)),
        ValueError,
        ["holds [1.0, 2.0, 3.0, 4.0, 5.0]"],
    ),
    (
        "to_additive int mask",
        lambda: M.to_additive(torch.ones(2, 2, dtype=torch.long)),
        TypeError,
        ["mask", "int64"],
    ),
    (
        "combine int",
        lambda: M.combine_masks(torch.ones(2, 2, dtype=torch.long)),
        TypeError,
        ["masks[0]", "int64"],
    ),
    (
        "combine list",
        lambda: M.combine_masks(torch.ones(2, 2, dtype=torch.bool), [True]),
        TypeError,
        ["masks[1]", "list"],
    ),
    (
        "combine shapes",
        lambda: M.combine_masks(
            torch.ones(2, 3, dtype=torch.bool), torch.ones(4, 3, dtype=torch.bool)
        ),
        ValueError,
        ["(2, 3)", "(4, 3)"],
    ),
    (
        "to_boolean finite",
        lambda: M.to_boolean(torch.tensor([0.0, -1e9])),
        ValueError,
        ["-1000000000.0"],
    ),
    ("to_boolean int", lambda: M.to_boolean(torch.tensor([0, 1])), TypeError, ["mask", "int64"]),
    (
        "from_ignore int",
        lambda: M.from_ignore_mask(torch.tensor([0, 1])),
        TypeError,
        ["mask", "int64"],
    ),
    (
        "multihead masks heads",
        lambda: M.from_multihead_masks(torch.zeros(3, 2, 2, dtype=torch.bool), num_heads=2),
        ValueError,
        ["attn_mask", "num_heads=2", "(3, 2, 2)"],
    ),
    (
        "multihead masks 1-d",
        lambda: M.from_multihead_masks(torch.zeros(2, dtype=torch.bool), num_heads=1),
        ValueError,
        ["attn_mask", "(2,)"],
    ),
    (
        "multihead masks kpm",
        lambda: M.from_multihead_masks(None, torch.zeros(2, 2, 2, dtype=torch.bool), num_heads=1),
        ValueError,
        ["key_padding_mask", "(2, 2, 2)"],
    ),
    (
        "multihead masks kpm list",
        lambda: M.from_multihead_masks(None, [True], num_heads=1),
        TypeError,
        ["key_padding_mask", "list"],
    ),
    (
        "multihead masks list",
        lambda: M.from_multihead_masks([True], num_heads=1),
        TypeError,
        ["attn_mask", "list"],
    ),
    ("split list", lambda: split_heads([1.0], 2), TypeError, ["x", "list"]),
    ("split num_heads 0", lambda: split_heads(r(2, 3, 4), 0), ValueError, ["num_heads", "0"]),
    ("merge list", lambda: merge_heads([1.0]), TypeError, ["x", "list"]),
    ("mha vdim 0", lambda: MultiHeadAttention(8, 2, vdim=0), ValueError, ["vdim", "0"]),
    ("mha kdim 0", lambda: MultiHeadAttention(8, 2, kdim=0), ValueError, ["kdim", "0"]),
    (
        "mha value width",
        lambda: MultiHeadAttention(8, 2)(X, X, r(2, 4, 7)),
        ValueError,
        ["value", "vdim", "(2, 4, 7)"],
    ),
    (
        "mha key width",
        lambda: MultiHeadAttention(8, 2)(X, r(2, 4, 7), X),
        ValueError,
        ["key", "kdim", "(2, 4, 7)"],
    ),
    (
        "mha input on another device",
        lambda: MultiHeadAttention(8, 2)(X.to("meta"), X.to("meta"), X.to("meta")),
        ValueError,
        ["device", "meta"],
    ),
    ("split width", lambda: split_heads(r(2, 3, 5), 2), ValueError, ["x", "5", "num_heads=2"]),
    ("split rank", lambda: split_heads(r(3, 4), 2), ValueError, ["x", "(3, 4)"]),
    ("merge rank", lambda: merge_heads(r(3, 4, 2)), ValueError, ["x", "(3, 4, 2)"]),
    ("mha bias str", lambda: MultiHeadAttention(8, 2, bias="no"), TypeError, ["bias", "'no'"]),
    ("mha heads", lambda: MultiHeadAttention(8, 3), ValueError, ["num_heads=3", "embed_dim=8"]),
    (
        "mha float64 input",
        lambda: MultiHeadAttention(8, 2)(X.double(), X.double(), X.double()),
        TypeError,
        ["query", "float64", "float32"],
    ),
    (
        "mha key padding shape",
        lambda: MultiHeadAttention(8, 2)(X, X, X, torch.ones(2, 4, dtype=torch.bool)[:, :3]),
        ValueError,
        ["mask"],
    ),
    ("soft span list", lambda: soft_span_mask([1, 2], 2.0, 1.0), TypeError, ["distance", "list"]),
    (
        "soft span str",
        lambda: soft_span_mask(torch.arange(3), "2", 1.0),
        TypeError,
        ["span", "str"],
    ),
    (
        "soft span bool",
        lambda: soft_span_mask(torch.arange(3), True, 1.0),
        TypeError,
        ["span", "bool"],
    ),
    (
        "soft span int tensor",
        lambda: soft_span_mask(torch.arange(3), torch.tensor([2]), 1.0),
        TypeError,
        ["span", "int64"],
    ),
    (
        "soft span nan",
        lambda: soft_span_mask(torch.arange(3), float("nan"), 1.0),
        ValueError,
        ["span", "finite"],
    ),
    (
        "soft span ramp",
        lambda: soft_span_mask(torch.arange(3), 2.0, 0.0),
        ValueError,
        ["ramp", "0.0"],
    ),
    (
        "soft span shapes",
        lambda: soft_span_mask(torch.arange(3), torch.ones(2), 1.0),
        ValueError,
        ["distance (3,)", "span (2,)"],
    ),
    ("span_window empty", lambda: span_window(torch.ones(0), 1.0), ValueError, ["span", "empty"]),
    ("span_window str", lambda: span_window("1", 1.0), TypeError, ["span", "str"]),
    ("span_window bool", lambda: span_window(True, 1.0), TypeError, ["span", "bool"]),
    (
        "span_window negative",
        lambda: span_window(torch.tensor([1.0, -1.0]), 1.0),
        ValueError,
        ["span", "-1."],
    ),
    ("span_window negative number", lambda: span_window(-1.0, 1.0), ValueError, ["span", "-1.0"]),
    ("span_window inf", lambda: span_window(float("inf"), 1.0), ValueError, ["span", "inf"]),
    ("span_window ramp", lambda: span_window(1.0, -1.0), ValueError, ["ramp", "-1.0"]),
    ("computed_cells length", lambda: computed_cells(0, 3), ValueError, ["length", "0"]),
    ("computed_cells window", lambda: computed_cells(4, 0), ValueError, ["window", "0"]),
    (
        "computed_cells block_m",
        lambda: computed_cells(4, 3, block_m=0),
        ValueError,
        ["block_m", "0"],
    ),
    (
        "asa int query",
        lambda: adaptive_span_attention(Q4.long(), Q4, Q4, SPAN, 1.0),
        TypeError,
        ["query", "int64"],
    ),
    (
        "asa int key",
        lambda: adaptive_span_attention(Q4, Q4.long(), Q4, SPAN, 1.0),
        TypeError,
        ["key", "int64"],
    ),
    (
        "asa int value",
        lambda: adaptive_span_attention(Q4, Q4, Q4.long(), SPAN, 1.0),
        TypeError,
        ["value", "int64"],
    ),
    (
        "asa int span",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN.long(), 1.0),
        TypeError,
        ["span", "int64"],
    ),
    (
        "asa query rank",
        lambda: adaptive_span_attention(Q4[0], Q4, Q4, SPAN, 1.0),
        ValueError,
        ["query", "(2, 6, 4)"],
    ),
    (
        "asa key rank",
        lambda: adaptive_span_attention(Q4, Q4[0], Q4, SPAN, 1.0),
        ValueError,
        ["key", "(2, 6, 4)"],
    ),
    (
        "asa value rank",
        lambda: adaptive_span_attention(Q4, Q4, Q4[0], SPAN, 1.0),
        ValueError,
        ["value", "(2, 6, 4)"],
    ),
    (
        "asa span rank",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN[None], 1.0),
        ValueError,
        ["span", "(1, 2)"],
    ),
    (
        "asa key shape",
        lambda: adaptive_span_attention(Q4, Q4[..., :3], Q4, SPAN, 1.0),
        ValueError,
        ["key", "(1, 2, 6, 3)"],
    ),
    (
        "asa value length",
        lambda: adaptive_span_attention(Q4, Q4, Q4[:, :, :5], SPAN, 1.0),
        ValueError,
        ["value", "(1, 2, 5, 4)"],
    ),
    (
        "asa span heads",
        lambda: adaptive_span_attention(Q4, Q4, Q4, torch.ones(3), 1.0),
        ValueError,
        ["span", "3", "2 heads"],
    ),
    (
        "asa d_k=0",
        lambda: adaptive_span_attention(Q4[..., :0], Q4[..., :0], Q4, SPAN, 1.0),
        ValueError,
        ["query", "d_k = 0"],
    ),
    (
        "asa block_m",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN, 1.0, block_m=0),
        ValueError,
        ["block_m", "0"],
    ),
    (
        "asa window float",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN, 1.0, window=4.0),
        TypeError,
        ["window", "4.0"],
    ),
    (
        "asa window small",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN, 1.0, window=2),
        ValueError,
        ["window=2", "need 3"],
    ),
    (
        "asa bias int",
        lambda: adaptive_span_attention(
            Q4, Q4, Q4, SPAN, 1.0, position_bias=torch.zeros(2, 8, dtype=torch.long)
        ),
        TypeError,
        ["position_bias", "int64"],
    ),
    (
        "asa bias rank",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN, 1.0, position_bias=torch.zeros(8)),
        ValueError,
        ["position_bias", "(8,)"],
    ),
    (
        "asa bias short",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN, 1.0, position_bias=torch.zeros(2, 2)),
        ValueError,
        ["position_bias", "(2, 2)", "D >= 3"],
    ),
    (
        "asa bias heads",
        lambda: adaptive_span_attention(Q4, Q4, Q4, SPAN, 1.0, position_bias=torch.zeros(3, 8)),
        ValueError,
        ["position_bias", "(3, 8)"],
    ),
    ("AdaptiveSpan heads", lambda: AdaptiveSpan(0, 8, 1.0), ValueError, ["num_heads", "0"]),
    ("AdaptiveSpan max_span", lambda: AdaptiveSpan(2, 0, 1.0), ValueError, ["max_span", "0"]),
    (
        "AdaptiveSpan init",
        lambda: AdaptiveSpan(2, 8, 1.0, init_span=9),
        ValueError,
        ["init_span", "9"],
    ),
    (
        "AdaptiveSpan init negative",
        lambda: AdaptiveSpan(2, 8, 1.0, init_span=-1),
        ValueError,
        ["init_span", "-1"],
    ),
    (
        "AdaptiveSpan init str",
        lambda: AdaptiveSpan(2, 8, 1.0, init_span="1"),
        ValueError,
        ["init_span", "'1'"],
    ),
    (
        "AdaptiveSpan init bool",
        lambda: AdaptiveSpan(2, 8, 1.0, init_span=True),
        ValueError,
        ["init_span", "True"],
    ),
    (
        "AdaptiveSpan penalty",
        lambda: AdaptiveSpan(2, 8, 1.0).penalty(-1.0),
        ValueError,
        ["weight", "-1.0"],
    ),
    (
        "AdaptiveSpan penalty nan",
        lambda: AdaptiveSpan(2, 8, 1.0).penalty(float("nan")),
        ValueError,
        ["weight", "nan"],
    ),
    (
        "AdaptiveSpan penalty bool",
        lambda: AdaptiveSpan(2, 8, 1.0).penalty(True),
        ValueError,
        ["weight", "True"],
    ),
    (
        "AdaptiveSpan penalty str",
        lambda: AdaptiveSpan(2, 8, 1.0).penalty("1"),
        ValueError,
        ["weight", "'1'"],
    ),
    (
        "ASA block_m",
        lambda: AdaptiveSpanAttention(8, 2, 4, 1.0, block_m=0),
        ValueError,
        ["block_m", "0"],
    ),
    ("ASA trim", lambda: AdaptiveSpanAttention(8, 2, 4, 1.0, trim=1), TypeError, ["trim", "1"]),
    (
        "ASA position_bias",
        lambda: AdaptiveSpanAttention(8, 2, 4, 1.0, position_bias=0),
        TypeError,
        ["position_bias", "0"],
    ),
    *x_refused("ASA", lambda: AdaptiveSpanAttention(8, 2, 4, 1.0), ["6", "embed_dim is 8"]),
    ("ASA x rank", lambda: AdaptiveSpanAttention(8, 2, 4, 1.0)(X[0]), ValueError, ["x", "(4, 8)"]),
    (
        "ASA mask list",
        lambda: AdaptiveSpanAttention(8, 2, 4, 1.0)(X, [True]),
        TypeError,
        ["mask", "list"],
    ),
    (
        "ASA mask not causal",
        lambda: AdaptiveSpanAttention(8, 2, 4, 1.0)(X, torch.ones(4, 4, dtype=torch.bool)),
        ValueError,
        ["mask", "(4, 4)"],
    ),
    (
        "ASA mask float",
        lambda: AdaptiveSpanAttention(8, 2, 4, 1.0)(X, torch.zeros(4, 4)),
        ValueError,
        ["mask", "float32"],
    ),
    (
        "ASA mask shape",
        lambda: AdaptiveSpanAttention(8, 2, 4, 1.0)(X, M.causal_mask(3)),
        ValueError,
        ["mask", "(3, 3)"],
    ),
    ("ASBlock d_ff", lambda: AdaptiveSpanBlock(8, 2, -3, 4, 1.0), ValueError, ["d_ff", "-3"]),
    (
        "ASBlock d_ff float",
        lambda: AdaptiveSpanBlock(8, 2, 3.5, 4, 1.0),
        TypeError,
        ["d_ff", "3.5"],
    ),
    ("span_penalty str", lambda: span_penalty("x", 0.1), TypeError, ["model", "str"]),
    (
        "span_penalty no span",
        lambda: span_penalty(torch.nn.Linear(2, 2), 0.1),
        ValueError,
        ["AdaptiveSpan"],
    ),
    ("clamp_spans str", lambda: clamp_spans("x"), TypeError, ["model", "str"]),
    ("attention_cells int", lambda: attention_cells(3), TypeError, ["model", "int"]),
    *x_refused("AA", lambda: AllAttention(8, 2, 3), ["(2, 4, 6)", "embed_dim"]),
    (
        "AA mask 5-d",
        lambda: AllAttention(8, 2, 3)(X, torch.ones(1, 1, 1, 4, 4, dtype=torch.bool)),
        ValueError,
        ["mask", "(1, 1, 1, 4, 4)"],
    ),
    ("AA mask list", lambda: AllAttention(8, 2, 3)(X, [True]), TypeError, ["mask", "list"]),
    (
        "AA mask int",
        lambda: AllAttention(8, 2, 3)(X, torch.ones(4, 4, dtype=torch.long)),
        TypeError,
        ["mask", "int64"],
    ),
    (
        "AA mask shape",
        lambda: AllAttention(8, 2, 3)(X, torch.ones(2, 3, 4, dtype=torch.bool)),
        ValueError,
        ["mask", "(2, 1, 3, 4)"],
    ),
    (
        "AA span_mask int",
        lambda: AllAttention(8, 2, 3)(X, span_mask=torch.ones(4, 4, dtype=torch.long)),
        TypeError,
        ["span_mask", "int64"],
    ),
    (
        "AA span_mask shape",
        lambda: AllAttention(8, 2, 3)(X, span_mask=torch.ones(4, 5)),
        ValueError,
        ["span_mask", "(4, 5)"],
    ),
    ("AA num_persistent", lambda: AllAttention(8, 2, -1), ValueError, ["num_persistent", "-1"]),
    (
        "ffn 0-d query",
        lambda: ffn_as_attention(torch.tensor(1.0), r(5, 4), r(4, 5)),
        ValueError,
        ["query", "()"],
    ),
    (
        "ffn int",
        lambda: ffn_as_attention(torch.ones(3, 4, dtype=torch.long), r(5, 4), r(4, 5)),
        TypeError,
        ["query", "int64"],
    ),
    (
        "ffn mixed dtypes",
        lambda: ffn_as_attention(r(3, 4, dtype=torch.float64), r(5, 4), r(4, 5)),
        TypeError,
        ["query", "w1", "float64", "float32"],
    ),
    (
        "ffn shapes",
        lambda: ffn_as_attention(r(3, 4), r(5, 3), r(4, 5)),
        ValueError,
        ["w1", "(5, 3)"],
    ),
    (
        "ffn w2 rank",
        lambda: ffn_as_attention(r(3, 4), r(5, 4), r(4, 5, 1)),
        ValueError,
        ["w2", "(4, 5, 1)"],
    ),
    ("FeedForward d_ff", lambda: FeedForward(8, -1), ValueError, ["d_ff", "-1"]),
    ("TransformerBlock d_ff", lambda: TransformerBlock(8, 2, -1), ValueError, ["d_ff", "-1"]),
    *x_refused("TransformerBlock", lambda: TransformerBlock(8, 2, 16), ["(2, 4, 6)", "d_model"]),
    (
        "CausalLM token range",
        lambda: CausalLM.standard(10, d_model=8, num_heads=2, d_ff=16, num_layers=1)(
            torch.full((1, 3), 10)
        ),
        ValueError,
        ["tokens", "[0, 10)", "10"],
    ),
    (
        "CausalLM negative token",
        lambda: CausalLM.standard(10, d_model=8, num_heads=2, d_ff=16, num_layers=1)(
            torch.full((1, 3), -1)
        ),
        ValueError,
        ["tokens", "-1"],
    ),
    (
        "next_token_loss L=1",
        lambda: next_token_loss(r(2, 1, 10), torch.zeros(2, 1, dtype=torch.long)),
        ValueError,
        ["tokens", "(2, 1)", "L >= 2"],
    ),
    (
        "next_token_loss float tokens",
        lambda: next_token_loss(r(2, 3, 10), torch.zeros(2, 3)),
        TypeError,
        ["tokens", "float32"],
    ),
    (
        "next_token_loss token range",
        lambda: next_token_loss(r(2, 3, 10), torch.full((2, 3), 10)),
        ValueError,
        ["tokens", "[0, 10)"],
    ),
    ("KVCache int key", lambda: KVCache().update(Q4.long(), Q4), TypeError, ["key", "int64"]),
    ("KVCache int value", lambda: KVCache().update(Q4, Q4.long()), TypeError, ["value", "int64"]),
    (
        "KVCache key dtype changes",
        lambda: cache_holding().update(Q4.double(), Q4.double()),
        TypeError,
        ["key", "float32", "float64"],
    ),
    (
        "KVCache window dtype changes",
        lambda: cache_holding(4).update(Q4.double(), Q4.double()),
        TypeError,
        ["key", "float32", "float64"],
    ),
    (
        "KVCache value dtype changes",
        lambda: cache_holding().update(Q4, Q4.double()),
        TypeError,
        ["value", "float32", "float64"],
    ),
    (
        "KVCache device changes",
        lambda: cache_holding().update(Q4.to("meta"), Q4.to("meta")),
        ValueError,
        ["key", "cpu", "meta"],
    ),
    (
        "generate model str",
        lambda: generate("model", torch.zeros(1, 2, dtype=torch.long), 1),
        TypeError,
        ["model", "str"],
    ),
    (
        "next_token_loss int logits",
        lambda: next_token_loss(
            torch.ones(2, 3, 10, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)
        ),
        TypeError,
        ["logits", "int64"],
    ),
]


# The training loop, the encoder-decoder and the course's tasks (a learner calls them too).
def _trainable():
    model = torch.nn.Linear(2, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _train(**changes):
    model, optimizer = _trainable()
    arguments = dict(
        model=model,
        get_batch=lambda step: torch.randn(4, 2),
        loss_fn=lambda m, batch: m(batch).pow(2).mean(),
        steps=2,
        optimizer=optimizer,
        progress=False,
    )
    arguments.update(changes)
    return lambda: train(**arguments)


_SRC, _TGT = torch.randint(1, 5, (2, 4)), torch.randint(1, 6, (2, 3))


def _seq2seq(**changes):
    arguments = dict(d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=6)
    arguments.update(changes)
    return Seq2SeqTransformer(5, 6, **arguments)


BAD += [
    ("train model list", _train(model=[1]), TypeError, ["model", "list"]),
    ("train get_batch None", _train(get_batch=None), TypeError, ["get_batch", "NoneType"]),
    ("train loss_fn str", _train(loss_fn="mse"), TypeError, ["loss_fn", "str"]),
    ("train optimizer None", _train(optimizer=None), TypeError, ["optimizer", "NoneType"]),
    ("train after_step int", _train(after_step=3), TypeError, ["after_step", "int"]),
    ("train loss float", _train(loss_fn=lambda m, b: 1.0), TypeError, ["loss_fn", "float"]),
    (
        "train loss nan",
        _train(loss_fn=lambda m, b: m(b).sum() * float("nan")),
        ValueError,
        ["loss_fn", "nan", "step 0"],
    ),
    ("seq2seq src_vocab 0", lambda: Seq2SeqTransformer(0, 5), ValueError, ["src_vocab", "0"]),
    ("seq2seq num_layers 0", lambda: _seq2seq(num_layers=0), ValueError, ["num_layers", "0"]),
    ("seq2seq max_len float", lambda: _seq2seq(max_len=6.0), TypeError, ["max_len", "6.0"]),
    ("seq2seq pad_id outside", lambda: _seq2seq(pad_id=5), ValueError, ["pad_id=5", "src_vocab=5"]),
    ("seq2seq pad_id -1", lambda: _seq2seq(pad_id=-1), ValueError, ["pad_id", "-1"]),
    ("seq2seq src float", lambda: _seq2seq()(_SRC.float(), _TGT), TypeError, ["src", "float32"]),
    ("seq2seq src ids", lambda: _seq2seq()(_SRC + 9, _TGT), ValueError, ["src", "[0, 5)"]),
    (
        "seq2seq tgt_in too long",
        lambda: _seq2seq()(_SRC, torch.ones(2, 9, dtype=torch.long)),
        ValueError,
        ["tgt_in", "max_len=6"],
    ),
    ("tokenizer int", lambda: CharTokenizer(123), TypeError, ["text", "int"]),
    ("split str", lambda: train_val_split(torch.arange(9), "0.1"), TypeError, ["val_fraction"]),
    ("words float", lambda: number_to_words(3.0), TypeError, ["n", "float"]),
    ("split_numbers str", lambda: split_numbers("0.2"), TypeError, ["test_fraction", "str"]),
    (
        "alignment float",
        lambda: alignment_accuracy(torch.rand(2, 3, 4), torch.zeros(2, 3)),
        TypeError,
        ["alignment", "float32"],
    ),
    (
        "alignment outside the source",
        lambda: alignment_accuracy(torch.rand(2, 3, 4), torch.full((2, 3), 4)),
        ValueError,
        ["alignment", "S=4"],
    ),
    (
        "lookup table float",
        lambda: lookup_sequences(torch.zeros(4, 4), 2, 5),
        TypeError,
        ["table", "float32"],
    ),
]


@pytest.mark.parametrize("call,error,words", [pytest.param(c, e, w, id=d) for d, c, e, w in BAD])
def test_bad_input_is_refused_with_the_callers_argument_named(call, error, words):
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    # never an internal name the caller did not pass (causal_mask's query_len, the layer's window)
    for internal in ("query_len", "window"):
        if not any(internal in word for word in words):
            assert internal not in message, f"{internal!r} named in {message!r}"


@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.integers(0, 999),
)
def test_online_softmax_update_folds_blocks_into_logsumexp(batch, blocks, seed):
    """Folding blocks of scores of any batch shape gives max and sum(exp(s - max)) of all of them."""
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(*batch, n, generator=g, dtype=torch.float64) * 3 for n in blocks]
    parts[0][..., 0] = float("-inf")  # masked entries take part too
    running_max = torch.full(batch, float("-inf"), dtype=torch.float64)
    running_sum = torch.zeros(batch, dtype=torch.float64)
    for part in parts:
        old_max = running_max
        running_max, running_sum, correction = online_softmax_update(running_max, running_sum, part)
        assert correction.shape == tuple(batch)
        # the factor that rescales what was summed before: exp(old max - new max), 0 where
        # nothing was seen yet (an old max of -inf)
        expected = torch.where(
            torch.isneginf(old_max), torch.zeros_like(old_max), (old_max - running_max).exp()
        )
        torch.testing.assert_close(correction, expected)
    scores = torch.cat(parts, dim=-1)
    torch.testing.assert_close(running_max, scores.amax(-1))
    torch.testing.assert_close(running_max + running_sum.log(), scores.logsumexp(-1))


@pytest.mark.parametrize("window", [None, 4])
def test_a_refused_cache_update_leaves_the_cache_as_it_was(window):
    cache = cache_holding(window)
    keys, seen = cache.keys.clone(), cache.seen
    for key in (Q4.double(), Q4.long(), Q4.to("meta")):
        with pytest.raises((TypeError, ValueError)):
            cache.update(key, key)
    assert cache.seen == seen == 1 and len(cache) == 1 and torch.equal(cache.keys, keys)
    stored, _, mask = cache.update(Q4, Q4)  # still usable: the one stored row, then 6 new ones
    assert stored.shape == (1, 2, 7, 4)  # S = len(cache) + L = 1 + 6, with or without a window
    assert mask.shape == (6, 7) and cache.seen == 7
