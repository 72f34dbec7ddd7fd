"""Multi-head attention (chapter 2) against ``torch.nn.MultiheadAttention``, a per-head
recomputation, gradcheck and the invariants of masking."""

import warnings

import pytest
import torch
from torch import nn

from attncourse import MultiHeadAttention, scaled_dot_product_attention
from attncourse.kv_cache import KVCache, repeat_kv
from attncourse.masks import causal_mask, combine_masks, from_multihead_masks, padding_mask
from attncourse.multihead import merge_heads, split_heads
from attncourse.positions import alibi_bias, apply_rope

MASK_KINDS = [
    "none",
    "bool-2d",
    "float-2d",
    "bool-3d",
    "float-3d",
    "kpm-bool",
    "kpm-float",
    "bool-2d+kpm-bool",
    "float-3d+kpm-float",
    "bool-3d+kpm-float",  # mixed kinds: torch turns both into floats (with a deprecation warning)
    "is_causal",
    "is_causal+kpm-bool",
]
# (kdim, vdim): self-attention widths, or cross-attention with other key/value widths
WIDTHS = [(None, None), (7, 5)]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _cross_attention_case(embed_dim, num_heads, kdim, vdim, L, lengths):
    """A float64 layer with other key/value widths, seeded inputs ``(B, L, E)``, ``(B, S, kdim)``,
    ``(B, S, vdim)`` with ``B = len(lengths)``, ``S = max(lengths)``, and the key padding mask
    ``(B, 1, S)`` of ``lengths``."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(embed_dim, num_heads, kdim=kdim, vdim=vdim).double()
    B, S = len(lengths), max(lengths)
    q, k, v = (
        torch.randn(B, L, embed_dim).double(),
        torch.randn(B, S, kdim).double(),
        torch.randn(B, S, vdim).double(),
    )
    return layer, (q, k, v), padding_mask(lengths, S)[:, None, :]


def _torch_masks(kind, B, H, L, S, dtype, seed):
    """``(attn_mask, key_padding_mask, is_causal)`` in torch's convention (True = ignore).

    Every query keeps at least one key, so torch gives no NaN rows."""
    g = _gen(seed)
    attn_mask = kpm = None
    is_causal = kind.startswith("is_causal")
    if "2d" in kind or "3d" in kind:
        shape = (L, S) if "2d" in kind else (B * H, L, S)
        ignore = torch.rand(shape, generator=g) < 0.4
        ignore[..., 0] = False
        attn_mask = (
            ignore
            if kind.startswith("bool")
            else torch.randn(shape, generator=g, dtype=dtype).masked_fill(ignore, float("-inf"))
        )
    if is_causal:
        attn_mask = ~causal_mask(L, S)
    if "kpm" in kind:
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        lengths[0] = S
        ignore = ~padding_mask(lengths, S)
        kpm = (
            ignore
            if kind.endswith("kpm-bool")
            else torch.zeros(B, S, dtype=dtype).masked_fill(ignore, float("-inf"))
        )
    return attn_mask, kpm, is_causal


def _config(seed):
    g = _gen(seed)
    num_heads = int(torch.randint(1, 5, (), generator=g))
    head_dim = int(torch.randint(1, 6, (), generator=g))
    B, L, S = (int(x) for x in torch.randint(1, 7, (3,), generator=g))
    return num_heads * head_dim, num_heads, B, L, S


def compare_with_torch(bias, widths, batch_first, kind, seed, dtype=torch.float64, device="cpu"):
    """Max abs differences (output, per-head weights) between torch's layer and ``from_torch``."""
    embed_dim, num_heads, B, L, S = _config(seed)
    kdim, vdim = widths
    if kind.startswith("is_causal") or kdim is None:
        S = L  # self-attention; is_causal needs a square mask
    torch.manual_seed(seed)
    module = nn.MultiheadAttention(
        embed_dim, num_heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=batch_first
    )
    module = module.to(device, dtype).eval()
    # torch leaves in_proj_bias at zero and out_proj.bias at zero; make them count
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "bias" in name:
                p.normal_()
    ours = MultiHeadAttention.from_torch(module)
    g = _gen(seed + 1)
    query = torch.randn(B, L, embed_dim, generator=g, dtype=dtype).to(device)
    key = torch.randn(B, S, kdim or embed_dim, generator=g, dtype=dtype).to(device)
    value = torch.randn(B, S, vdim or embed_dim, generator=g, dtype=dtype).to(device)
    if kdim is None:
        key = value = query  # self-attention
    attn_mask, kpm, is_causal = _torch_masks(kind, B, num_heads, L, S, dtype, seed + 2)
    attn_mask = None if attn_mask is None else attn_mask.to(device)
    kpm = None if kpm is None else kpm.to(device)
    t = (lambda x: x) if batch_first else (lambda x: x.transpose(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's notes on bool/float mask mixes
        inputs = (t(query), t(key), t(value))
        masks = dict(key_padding_mask=kpm, attn_mask=attn_mask, is_causal=is_causal)
        out_t, w_t = module(*inputs, **masks, need_weights=True, average_attn_weights=False)
        # need_weights=False goes through torch's SDPA path (is_causal taken as such when it can)
        out_fast, _ = module(*inputs, **masks, need_weights=False)
    mask = from_multihead_masks(attn_mask, kpm, num_heads=num_heads)
    out, w = ours(query, key, value, mask)
    assert out.shape == (B, L, embed_dim) and w.shape == (B, num_heads, L, S)
    d_out = max((out - t(out_t)).abs().max().item(), (out - t(out_fast)).abs().max().item())
    d_w = (w - w_t).abs().max().item()
    return d_out, d_w


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
@pytest.mark.parametrize("widths", WIDTHS, ids=["self", "kdim_vdim"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_from_torch_equals_nn_multihead_attention(bias, widths, batch_first, kind):
    for seed in range(3):  # three random sizes per configuration
        d_out, d_w = compare_with_torch(
            bias, widths, batch_first, kind, seed=100 * seed + len(kind)
        )
        assert d_out < 1e-12 and d_w < 1e-12, (seed, d_out, d_w)


def test_from_torch_on_device_in_float32(device):
    d_out, d_w = compare_with_torch(
        True, (None, None), True, "bool-2d+kpm-bool", seed=5, dtype=torch.float32, device=device
    )
    assert d_out < 1e-5 and d_w < 1e-6


def test_from_torch_fully_masked_row_gives_zeros_where_torch_gives_nan():
    module = nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    ignore = torch.zeros(3, 3, dtype=torch.bool)
    ignore[1] = True  # query 1 may attend to nothing
    out_t, w_t = module(x, x, x, attn_mask=ignore, average_attn_weights=False)
    out, w = MultiHeadAttention.from_torch(module)(
        x, x, x, from_multihead_masks(ignore, num_heads=2)
    )
    assert torch.isnan(w_t[:, :, 1]).all() and torch.equal(w[:, :, 1], torch.zeros_like(w[:, :, 1]))
    rows = [0, 2]
    assert torch.allclose(out[:, rows], out_t[:, rows], atol=1e-12)
    # with zero weights the row's heads are zero, so its output is the output bias
    assert torch.allclose(out[0, 1], module.out_proj.bias, atol=1e-12)


def test_from_torch_rejects_what_it_cannot_copy():
    with pytest.raises(TypeError, match="nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True))


def test_heads_equal_separate_small_projections():
    """One (E x E) projection split into h slices = h separate (E x head_dim) projections."""
    layer, (q_in, k_in, v_in), keep = _cross_attention_case(12, 3, 5, 7, L=4, lengths=[6, 3])
    out, weights = layer(q_in, k_in, v_in, keep)
    heads = []
    for h in range(3):
        rows = slice(4 * h, 4 * (h + 1))  # W_h is a block of rows of the big nn.Linear weight
        q = q_in @ layer.q_proj.weight[rows].T + layer.q_proj.bias[rows]
        k = k_in @ layer.k_proj.weight[rows].T + layer.k_proj.bias[rows]
        v = v_in @ layer.v_proj.weight[rows].T + layer.v_proj.bias[rows]
        head, w = scaled_dot_product_attention(q, k, v, keep)
        assert torch.allclose(w, weights[:, h], atol=1e-12)
        heads.append(head)
    concat = torch.cat(heads, dim=-1)  # (B, L, h * head_dim)
    assert torch.allclose(out, concat @ layer.out_proj.weight.T + layer.out_proj.bias, atol=1e-12)


@pytest.mark.parametrize(
    "embed_dim,num_heads,kdim,vdim,bias",
    [(64, 8, None, None, True), (12, 3, 5, 7, True), (12, 4, 9, 9, False)],
)
def test_parameter_count(embed_dim, num_heads, kdim, vdim, bias):
    layer = MultiHeadAttention(embed_dim, num_heads, kdim=kdim, vdim=vdim, bias=bias)
    E, k, v = embed_dim, kdim or embed_dim, vdim or embed_dim
    # W^Q, W^K, W^V, W^O (+ biases)
    expected = E * E + E * k + E * v + E * E + (4 * E if bias else 0)
    assert sum(p.numel() for p in layer.parameters()) == expected
    torch_layer = nn.MultiheadAttention(embed_dim, num_heads, kdim=kdim, vdim=vdim, bias=bias)
    assert sum(p.numel() for p in torch_layer.parameters()) == expected


def test_split_and_merge_heads():
    x = torch.arange(2 * 3 * 8).reshape(2, 3, 8).float()
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[1, 2, 0], x[1, 0, 4:6])  # head 2 of position 0 = columns 4..5
    assert torch.equal(merge_heads(heads), x)
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        split_heads(x, 3)
    with pytest.raises(ValueError, match="exactly 4 dimensions"):
        merge_heads(x)


def test_gradcheck():
    layer, (q, k, v), keep = _cross_attention_case(6, 2, 4, 3, L=3, lengths=[4, 2])
    inputs = tuple(t.clone().requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda *x: layer(*x, keep)[0], inputs)
    params = tuple(layer.parameters())

    def as_function(*weights):
        names = [n for n, _ in layer.named_parameters()]
        return torch.func.functional_call(layer, dict(zip(names, weights)), (q, k, v, keep))[0]

    assert torch.autograd.gradcheck(
        as_function, tuple(p.detach().clone().requires_grad_() for p in params)
    )


def test_padding_content_changes_no_output(device):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).to(device)
    lengths = torch.tensor([6, 2, 4])
    x = torch.randn(3, 6, 16, device=device)
    keep = padding_mask(lengths, 6, device=device)
    out, _ = layer(x, x, x, keep[:, None, :])
    y = torch.where(keep[..., None], x, 1e3 * torch.randn_like(x))
    out2, _ = layer(y, y, y, keep[:, None, :])
    real = keep[..., None].expand_as(out)
    # every real position is untouched by the pads' content
    assert torch.equal(out[real], out2[real])


def test_future_token_changes_no_earlier_output(device):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).to(device)
    x = torch.randn(2, 7, 16, device=device)
    out, _ = layer(x, x, x, causal_mask(7, device=device))
    for t in range(7):
        y = x.clone()
        y[:, t] = torch.randn(2, 16, device=device)
        out2, _ = layer(y, y, y, causal_mask(7, device=device))
        assert torch.equal(out[:, :t], out2[:, :t])
        assert not torch.allclose(out[:, t], out2[:, t])


def test_cross_attention_shapes():
    layer = MultiHeadAttention(8, 2, kdim=3, vdim=5)
    out, w = layer(torch.randn(4, 6, 8), torch.randn(4, 9, 3), torch.randn(4, 9, 5))
    assert out.shape == (4, 6, 8) and w.shape == (4, 2, 6, 9)
    assert torch.allclose(w.sum(-1), torch.ones(4, 2, 6))


def test_half_precision_on_device(device):
    dtype = torch.float16 if torch.device(device).type == "cuda" else torch.bfloat16
    torch.manual_seed(0)
    low = MultiHeadAttention(16, 4).to(device, dtype)
    xl = torch.randn(2, 5, 16, dtype=torch.float64, device=device).to(dtype)
    out, w = low(xl, xl, xl, causal_mask(5, device=device))
    assert out.dtype == dtype and w.dtype == dtype
    # float64 on the same rounded weights and inputs: what is left is the low-precision
    # arithmetic (about 0.003 here; a 1.5x error in the scale gives 0.08)
    layer = MultiHeadAttention(16, 4).double().to(device)
    layer.load_state_dict({k: v.double() for k, v in low.state_dict().items()})
    ref, _ = layer(xl.double(), xl.double(), xl.double(), causal_mask(5, device=device))
    assert (out.double() - ref).abs().max() < 0.02


@pytest.mark.parametrize(
    "build,error,words",
    [
        (lambda: MultiHeadAttention(64, 10), ValueError, "num_heads=10 must divide embed_dim=64"),
        (lambda: MultiHeadAttention(0, 1), ValueError, "embed_dim must be a positive integer"),
        (lambda: MultiHeadAttention(8, 2, kdim=0), ValueError, "kdim must be a positive integer"),
        (lambda: MultiHeadAttention(8, 2.0), TypeError, "num_heads must be a positive integer"),
    ],
)
def test_bad_construction(build, error, words):
    with pytest.raises(error, match=words):
        build()


def _bad_calls():
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    return [
        ((torch.randn(3, 3, 8), kv, kv), ValueError, "same batch size"),
        ((torch.randn(2, 3, 6), kv, kv), ValueError, "embed_dim is 8"),
        ((q, torch.randn(2, 4, 5), kv), ValueError, "kdim is 8"),
        ((q, kv, torch.randn(2, 5, 8)), ValueError, "same length S"),
        ((torch.randn(3, 8), kv, kv), ValueError, "exactly 3 dimensions"),
        ((q.double(), kv, kv), TypeError, "dtype of the layer's parameters"),
        ((q.long(), kv, kv), TypeError, "floating-point"),
        ((q, kv, kv, torch.ones(2, 3, 5, dtype=torch.bool)), ValueError, "does not broadcast"),
        ((q, kv, kv, torch.ones(3, 3, 4, dtype=torch.bool)), ValueError, "does not broadcast"),
        (
            (q, kv, kv, torch.ones(2, 4, dtype=torch.bool)),
            ValueError,
            r"key padding mask \(B, S\).*mask\[:, None, :\]",
        ),
        (
            (q, kv, kv, torch.ones(2, 1, 1, 1, 4, dtype=torch.bool)),
            ValueError,
            "mask must have shape",
        ),
        ((q, kv, kv, torch.ones(3, 4, dtype=torch.long)), TypeError, "boolean"),
        ((q, kv, kv, [[True] * 4] * 3), TypeError, "torch.Tensor"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_calls(case):
    args, error, words = _bad_calls()[case]
    with pytest.raises(error, match=words):
        MultiHeadAttention(8, 2)(*args)


def test_forward_uses_the_chapter_1_attention(monkeypatch):
    """The layer calls chapter 1's attention once, on all heads at once: the unchecked core of
    attncourse.attention.scaled_dot_product_attention (the layer checked its inputs itself)."""
    import attncourse.attention as attention
    import attncourse.multihead as multihead

    assert multihead._attention is attention._attention
    calls = []

    def spy(q, k, v, mask, scale):
        calls.append((tuple(q.shape), tuple(k.shape), None if mask is None else tuple(mask.shape)))
        assert scale == q.size(-1) ** -0.5
        return attention._attention(q, k, v, mask, scale)

    monkeypatch.setattr(multihead, "_attention", spy)
    layer = MultiHeadAttention(8, 2)
    layer(
        torch.randn(3, 4, 8),
        torch.randn(3, 5, 8),
        torch.randn(3, 5, 8),
        torch.ones(3, 4, 5, dtype=torch.bool),
    )
    assert calls == [((3, 2, 4, 4), (3, 2, 5, 4), (3, 1, 4, 5))]


# -- relative positions inside attention (chapters 5 and 6) ----------------------------------


@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_rope_layer_equals_rotated_queries_and_keys(device, num_kv_heads):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads, positional="rope")
    layer = layer.to(device=device, dtype=torch.float64)
    x = torch.randn(2, 7, 16, device=device, dtype=torch.float64)
    mask = causal_mask(7, device=device)
    out, _ = layer(x, x, x, mask)
    positions = torch.arange(7, device=device)
    q = apply_rope(split_heads(layer.q_proj(x), 4), positions)
    k = apply_rope(split_heads(layer.k_proj(x), num_kv_heads), positions)
    v = split_heads(layer.v_proj(x), num_kv_heads)
    group = 4 // num_kv_heads
    heads = scaled_dot_product_attention(q, repeat_kv(k, group), repeat_kv(v, group), mask)[0]
    torch.testing.assert_close(out, layer.out_proj(merge_heads(heads)))


def test_alibi_layer_equals_the_bias_added_to_the_scores(device):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, positional="alibi").to(device=device, dtype=torch.float64)
    plain = MultiHeadAttention(16, 4).to(device=device, dtype=torch.float64)
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(2, 6, 16, device=device, dtype=torch.float64)
    mask = causal_mask(6, device=device)
    bias = alibi_bias(4, 6, device=device, dtype=torch.float64)
    expected = plain(x, x, x, combine_masks(mask, bias)[None])[0]  # (1, h, L, S)
    torch.testing.assert_close(layer(x, x, x, mask)[0], expected)


@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_relative_layer_depends_on_offsets_only(positional):
    """The same keys and queries at positions shifted by a constant: the same outputs."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, positional=positional).double()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    fresh = layer(x, x, x, causal_mask(5))[0]
    cache = KVCache()
    cache.seen = 1000  # as if 1000 positions had gone through a rolling buffer and left it
    shifted = layer(x, x, x, cache=cache)[0]
    torch.testing.assert_close(shifted, fresh)


def test_positional_checks_name_the_argument():
    with pytest.raises(ValueError, match="positional"):
        MultiHeadAttention(16, 4, positional="rotary")
    with pytest.raises(TypeError, match="positional"):
        MultiHeadAttention(16, 4, positional=True)
    with pytest.raises(ValueError, match=r"head_dim must be even.*head_dim=3$"):
        MultiHeadAttention(9, 3, positional="rope")
    MultiHeadAttention(9, 3, positional="alibi")  # ALiBi needs no pairs


@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_gradients_flow_through_relative_positions(positional):
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2, positional=positional).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: layer(t, t, t, causal_mask(4))[0], (x,))
