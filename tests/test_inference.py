"""Attention at inference (chapter 6): grouped-query attention against torch's SDPA with
``enable_gqa=True`` and against repeated K/V heads, the KV cache against uncached decoding at
every step, the rolling-buffer cache against full attention under a sliding-window mask."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attncourse import CausalLM, MultiHeadAttention
from attncourse.adaptive_span import soft_span_mask
from attncourse.kv_cache import (
    KVCache,
    kv_cache_bytes,
    repeat_kv,
    sliding_window_mask,
    window_mask_from_positions,
)
from attncourse.masks import causal_mask
from attncourse.multihead import mean_pool_kv_heads, merge_heads, split_heads
from attncourse.positions import apply_rope
from attncourse.sampling import generate


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _layer(
    embed_dim, num_heads, num_kv_heads, *, seed=0, device="cpu", dtype=torch.float64, bias=True
):
    torch.manual_seed(seed)
    return MultiHeadAttention(embed_dim, num_heads, num_kv_heads=num_kv_heads, bias=bias).to(
        device=device, dtype=dtype
    )


# -- grouped-query attention ---------------------------------------------------------------


@pytest.mark.parametrize("num_heads,num_kv_heads", [(8, 8), (8, 4), (8, 2), (8, 1), (6, 3), (3, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_layer_equals_torch_sdpa_enable_gqa(device, num_heads, num_kv_heads, causal):
    embed_dim, L = 4 * num_heads, 7
    layer = _layer(embed_dim, num_heads, num_kv_heads, device=device)
    x = torch.randn(2, L, embed_dim, generator=_gen(1), dtype=torch.float64).to(device)
    mask = causal_mask(L, device=device) if causal else None
    out, weights = layer(x, x, x, mask)
    assert layer.k_proj.weight.shape == (num_kv_heads * 4, embed_dim)
    assert weights.shape == (2, num_heads, L, L)
    # the reference: torch's projections by hand, torch's SDPA with enable_gqa (K/V keep num_kv_heads heads)
    q = F.linear(x, layer.q_proj.weight, layer.q_proj.bias).view(2, L, num_heads, 4).transpose(1, 2)
    k = (
        F.linear(x, layer.k_proj.weight, layer.k_proj.bias)
        .view(2, L, num_kv_heads, 4)
        .transpose(1, 2)
    )
    v = (
        F.linear(x, layer.v_proj.weight, layer.v_proj.bias)
        .view(2, L, num_kv_heads, 4)
        .transpose(1, 2)
    )
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    expected = F.linear(
        ref.transpose(1, 2).reshape(2, L, embed_dim), layer.out_proj.weight, layer.out_proj.bias
    )
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    # and equal to plain multi-head attention with each K/V head repeated (repeat_interleave)
    group = num_heads // num_kv_heads
    ref = F.scaled_dot_product_attention(
        q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=causal
    )
    torch.testing.assert_close(out, layer.out_proj(merge_heads(ref)), rtol=1e-10, atol=1e-12)


def test_repeat_kv_is_repeat_interleave_not_repeat():
    x = torch.randn(2, 3, 5, 4, generator=_gen(2))
    torch.testing.assert_close(repeat_kv(x, 4), x.repeat_interleave(4, dim=1), rtol=0, atol=0)
    assert not torch.equal(repeat_kv(x, 2), x.repeat(1, 2, 1, 1))  # head order matters: 0,0,1,1,2,2
    assert repeat_kv(x, 1) is x


def test_repeat_kv_takes_the_group_size_not_the_number_of_groups():
    """``n_rep = h / g``: 2 K/V heads (g = 2, "GQA-2") for 8 query heads are each repeated 4 times."""
    layer = MultiHeadAttention(32, 8, num_kv_heads=2)
    x = torch.randn(1, 2, 5, 4)
    assert repeat_kv(x, n_rep=layer.num_heads // layer.num_kv_heads).shape == (1, 8, 5, 4)
    with pytest.raises(ValueError, match="n_rep"):
        repeat_kv(x, 0)
    with pytest.raises(TypeError):
        repeat_kv(x, num_groups=4)


def test_gqa_with_equal_heads_per_group_equals_mha():
    """An MHA layer whose heads in each group share K/V weights is exactly the GQA layer."""
    mha = _layer(16, 4, 4, seed=3)
    gqa = _layer(16, 4, 2, seed=4)
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(gqa, name).load_state_dict(getattr(mha, name).state_dict())
        for name in ("k_proj", "v_proj"):
            w, b = getattr(gqa, name).weight.view(2, 4, 16), getattr(gqa, name).bias.view(2, 4)
            getattr(mha, name).weight.copy_(w.repeat_interleave(2, 0).reshape(16, 16))
            getattr(mha, name).bias.copy_(b.repeat_interleave(2, 0).reshape(16))
    x = torch.randn(3, 6, 16, generator=_gen(5), dtype=torch.float64)
    torch.testing.assert_close(gqa(x, x, x)[0], mha(x, x, x)[0])
    # mean pooling that MHA layer gives back the GQA layer's weights: the conversion is lossless here
    pooled = mean_pool_kv_heads(mha, 2)
    for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
        torch.testing.assert_close(getattr(pooled, name).weight, getattr(gqa, name).weight)
        torch.testing.assert_close(getattr(pooled, name).bias, getattr(gqa, name).bias)


def test_mean_pool_averages_each_group_of_heads():
    mha = _layer(12, 6, 6, seed=6)
    pooled = mean_pool_kv_heads(mha, 2)
    assert pooled.num_kv_heads == 2 and pooled.k_proj.weight.shape == (4, 12)
    heads = mha.k_proj.weight.view(6, 2, 12)  # (head, head_dim, in)
    torch.testing.assert_close(pooled.k_proj.weight[:2], heads[0:3].mean(0))
    torch.testing.assert_close(pooled.k_proj.weight[2:], heads[3:6].mean(0))
    torch.testing.assert_close(pooled.v_proj.bias[2:], mha.v_proj.bias.view(6, 2)[3:6].mean(0))
    same = mean_pool_kv_heads(mha, 6)
    x = torch.randn(2, 5, 12, generator=_gen(7), dtype=torch.float64)
    torch.testing.assert_close(same(x, x, x)[0], mha(x, x, x)[0])
    with pytest.raises(ValueError, match="num_kv_heads"):
        mean_pool_kv_heads(pooled, 1)
    with pytest.raises(TypeError):
        mean_pool_kv_heads(nn.Linear(2, 2), 1)


def test_num_kv_heads_validation():
    with pytest.raises(ValueError, match=r"num_kv_heads=3.*num_heads=8"):
        MultiHeadAttention(32, 8, num_kv_heads=3)
    for bad, error in ((0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="num_kv_heads"):
            MultiHeadAttention(32, 8, num_kv_heads=bad)
    assert MultiHeadAttention(32, 8).num_kv_heads == 8


def test_from_torch_still_multi_head():
    ref = nn.MultiheadAttention(16, 4, batch_first=True).double().eval()
    layer = MultiHeadAttention.from_torch(ref)
    assert layer.num_kv_heads == 4
    x = torch.randn(2, 5, 16, generator=_gen(8), dtype=torch.float64)
    torch.testing.assert_close(layer(x, x, x)[0], ref(x, x, x, need_weights=False)[0])


# -- the KV cache --------------------------------------------------------------------------


def _decode_in_chunks(layer, x, chunks, cache):
    """Feed ``x`` through ``layer`` with ``cache``, ``chunks`` positions at a time."""
    outs, weights, start = [], [], 0
    for size in chunks:
        part = x[:, start : start + size]
        out, w = layer(part, part, part, cache=cache)
        outs.append(out)
        weights.append(w)
        start += size
    return torch.cat(outs, dim=1), weights


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 1, 1, 1], [3, 3, 3], [9]])
def test_cached_layer_equals_full_causal_attention(device, num_kv_heads, chunks):
    layer = _layer(16, 4, num_kv_heads, seed=10, device=device)
    x = torch.randn(2, 9, 16, generator=_gen(11), dtype=torch.float64).to(device)
    full, full_w = layer(x, x, x, causal_mask(9, device=device))
    cache = KVCache()
    out, weights = _decode_in_chunks(layer, x, chunks, cache)
    torch.testing.assert_close(out, full, rtol=1e-10, atol=1e-12)
    # each chunk's weights are the rows of the full weights, over the keys seen so far
    start = 0
    for size, w in zip(chunks, weights):
        torch.testing.assert_close(
            w, full_w[:, :, start : start + size, : start + size], rtol=1e-10, atol=1e-12
        )
        start += size
    assert len(cache) == cache.seen == 9
    assert cache.keys.shape == (2, num_kv_heads, 9, 4)  # the cache holds K/V heads, not query heads
    assert cache.nbytes() == kv_cache_bytes(
        num_layers=1, num_kv_heads=num_kv_heads, head_dim=4, length=9, batch=2, bytes_per_element=8
    )


def test_cached_layer_combines_the_callers_mask_with_the_cache_mask():
    # a mask passed with a cache (here: some keys hidden from some queries) is applied on top of
    # the cache's causal mask, so chunked decoding equals full attention under both masks
    layer = _layer(16, 4, 2, seed=12)
    x = torch.randn(2, 9, 16, generator=_gen(13), dtype=torch.float64)
    keep = torch.rand(2, 9, 9, generator=_gen(14)) > 0.4
    keep |= torch.eye(9, dtype=torch.bool)  # every query keeps at least itself
    full, full_w = layer(x, x, x, causal_mask(9) & keep)
    cache, start = KVCache(), 0
    for size in (4, 1, 3, 1):
        part = x[:, start : start + size]
        out, w = layer(part, part, part, keep[:, start : start + size, : start + size], cache=cache)
        torch.testing.assert_close(out, full[:, start : start + size], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(
            w, full_w[:, :, start : start + size, : start + size], rtol=1e-10, atol=1e-12
        )
        start += size


def test_cache_mask_is_bottom_right_causal_mask():
    cache = KVCache()
    k = torch.zeros(1, 1, 3, 2)
    assert torch.equal(cache.update(k, k)[2], causal_mask(3))
    assert torch.equal(cache.update(k[:, :, :2], k[:, :, :2])[2], causal_mask(2, 5))
    # torch's is_causal=True (top left) would hide the cache from the new queries
    assert not torch.equal(causal_mask(2, 5), torch.ones(2, 5, dtype=torch.bool).tril())


def test_forgotten_offset_would_be_caught():
    """The equality test fails for a cache whose new positions restart at 0 (the classic bug)."""
    layer = _layer(8, 2, 2, seed=12)
    x = torch.randn(1, 6, 8, generator=_gen(13), dtype=torch.float64)
    full = layer(x, x, x, causal_mask(6))[0]

    class NoOffset(KVCache):
        def _append(self, key, value):  # what MultiHeadAttention calls (update = checks + _append)
            keys, values, mask = super()._append(key, value)
            return keys, values, causal_mask(key.size(2), keys.size(2)).flip(1)  # wrong alignment

    out, _ = _decode_in_chunks(layer, x, [3, 1, 1, 1], NoOffset())
    assert not torch.allclose(out, full)

    # and the real cache numbers new positions after the stored ones (one token at a time, the
    # equality test above cannot see a restart at 0: one query sees every key either way)
    cache = KVCache()
    key = torch.randn(1, 2, 3, 4, generator=_gen(14), dtype=torch.float64)
    cache.update(key, key)
    _, _, mask = cache.update(key[:, :, :1], key[:, :, :1])
    assert cache.positions.tolist() == [0, 1, 2, 3] and torch.equal(mask, causal_mask(1, 4))
    _, _, mask = cache.update(key[:, :, :2], key[:, :, :2])
    assert cache.positions.tolist() == list(range(6)) and torch.equal(mask, causal_mask(2, 6))


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8, 20])
@pytest.mark.parametrize("chunks", [[1] * 12, [5, 1, 1, 1, 1, 1, 1, 1], [7, 5], [12]])
def test_rolling_buffer_equals_sliding_window_attention(device, window, chunks):
    layer = _layer(16, 4, 2, seed=14, device=device)
    x = torch.randn(2, 12, 16, generator=_gen(15), dtype=torch.float64).to(device)
    full = layer(x, x, x, sliding_window_mask(12, window=window, device=device))[0]
    cache = KVCache(window=window)
    out, _ = _decode_in_chunks(layer, x, chunks, cache)
    torch.testing.assert_close(out, full, rtol=1e-10, atol=1e-12)
    assert len(cache) == min(window, 12) and cache.seen == 12
    assert cache.keys.size(2) == window  # the buffer never grows
    # slot p % W holds position p: the last W positions, not in time order
    stored = sorted(cache.positions[cache.positions >= 0].tolist())
    assert stored == list(range(max(0, 12 - window), 12))
    for slot, position in enumerate(cache.positions.tolist()):
        assert position < 0 or position % window == slot


def test_sliding_window_mask_against_causal_mask_and_adaptive_span():
    for L, S in [(6, 6), (3, 8), (1, 10)]:
        assert torch.equal(sliding_window_mask(L, S, window=S), causal_mask(L, S))
        for window in (1, 2, 4):
            mask = sliding_window_mask(L, S, window=window)
            assert bool((mask.sum(-1) <= window).all())
            i = torch.arange(L)[:, None] + (S - L)
            j = torch.arange(S)[None, :]
            distance = i - j  # how far back each key is
            # adaptive span's soft mask with span z = W - 1 and ramp R = 1 is this window, as a hard 0/1 mask
            assert torch.equal(
                mask, (soft_span_mask(distance, window - 1.0, 1.0) > 0) & causal_mask(L, S)
            )
            assert torch.equal(mask, window_mask_from_positions(i[:, 0], j[0], window))
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(4, window=0)


def test_kv_cache_validation():
    cache = KVCache()
    with pytest.raises(ValueError, match="key"):
        cache.update(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"key and value"):
        cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4))
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not fit"):
        cache.update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))
    with pytest.raises(ValueError, match="window"):
        KVCache(window=0)
    layer = _layer(8, 2, 2)
    x = torch.zeros(1, 1, 8, dtype=torch.float64)
    cache = KVCache()
    layer(x, x, x, cache=cache)
    with pytest.raises(ValueError, match="mask"):  # S = 2 with the cache, not 1
        layer(x, x, x, torch.ones(1, 3, dtype=torch.bool), cache=cache)
    assert cache.seen == 1  # a rejected call leaves the cache as it was


def test_kv_cache_bytes_llama2_7b():
    # Llama 2 7B: 32 layers, 32 heads of 128 (no GQA at 7B), fp16: 0.5 MiB per token, 2 GiB at 4096
    assert kv_cache_bytes(num_layers=32, num_kv_heads=32, head_dim=128, length=1) == 2**19
    assert kv_cache_bytes(num_layers=32, num_kv_heads=32, head_dim=128, length=4096) == 2**31
    # Mistral 7B's 8 KV heads
    assert kv_cache_bytes(num_layers=32, num_kv_heads=8, head_dim=128, length=4096) == 2**29
    with pytest.raises(ValueError, match="head_dim"):
        kv_cache_bytes(num_layers=1, num_kv_heads=1, head_dim=0, length=1)


# -- the model and generation --------------------------------------------------------------


def _model(device="cpu"):
    torch.manual_seed(20)
    return (
        CausalLM.standard(17, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=40)
        .to(device=device, dtype=torch.float64)
        .eval()
    )


def test_cached_model_logits_equal_uncached_at_every_step(device):
    model = _model(device)
    tokens = torch.randint(0, 17, (3, 30), generator=_gen(21)).to(device)
    full = model(tokens)
    cache = model.new_cache()
    steps = [model(tokens[:, :10], cache)] + [
        model(tokens[:, t : t + 1], cache) for t in range(10, 30)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
    assert all(c.seen == 30 for c in cache)
    # the cached step attends one query row over t keys; the uncached pass computes all rows
    assert model.blocks[0].self_weights.shape == (3, 4, 1, 30)


@pytest.mark.parametrize(
    "kwargs", [dict(temperature=0), dict(temperature=1.0), dict(temperature=0.7, top_k=4)]
)
def test_generate_with_cache_equals_without(device, kwargs):
    model = _model(device)
    prompt = torch.randint(0, 17, (2, 6), generator=_gen(22)).to(device)
    # the same seed for both runs: with and without the cache they draw the same tokens
    a, b = (
        generate(
            model,
            prompt,
            30,
            generator=_gen(23) if device.type == "cpu" else None,
            use_cache=use_cache,
            **kwargs,
        )
        for use_cache in (False, True)
    )
    assert a.shape == (2, 36) and torch.equal(a[:, :6], prompt)
    if device.type == "cpu" or kwargs.get("temperature") == 0:
        assert torch.equal(a, b)


def test_generate_top_k_and_validation():
    model = _model()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    out = generate(model, prompt, 20, temperature=1.0, top_k=1, generator=_gen(24))
    assert torch.equal(out, generate(model, prompt, 20, temperature=0))  # top_k=1 is greedy
    for bad in (dict(temperature=-1), dict(top_k=0)):
        with pytest.raises(ValueError):
            generate(model, prompt, 2, **bad)
    with pytest.raises(TypeError, match="cache"):
        model(prompt, [KVCache()])
    with pytest.raises(ValueError, match="max_len"):
        generate(model, prompt, 41, use_cache=True)  # the 41st step would run position 40
    assert generate(model, prompt, 40, use_cache=True).shape == (1, 41)


def test_cache_snapshot_by_shallow_copy():
    """A shallow copy of a full cache is a snapshot: updates rebind the tensors, never write into them."""
    model = _model()
    tokens = torch.randint(0, 17, (1, 8), generator=_gen(25))
    cache = model.new_cache()
    model(tokens[:, :7], cache)
    snapshot = [copy.copy(c) for c in cache]
    a = model(tokens[:, 7:], snapshot)
    b = model(tokens[:, 7:], [copy.copy(c) for c in cache])
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert cache[0].seen == 7 and snapshot[0].seen == 8


# --- contracts: a cache owns its storage, masks of the documented shape, copies keep the mode ---


def test_cache_does_not_keep_the_callers_key():
    cache = KVCache()
    key, value = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    cache.update(key, value)
    saved_key, saved_value = key.clone(), value.clone()
    key.add_(100.0)
    value.zero_()
    assert torch.equal(cache.keys, saved_key) and torch.equal(cache.values, saved_value)


@pytest.mark.parametrize("window", [None, 3, 6])
def test_a_mask_of_shape_len_plus_new_is_accepted_while_the_buffer_fills(window):
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).double().eval()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    reference = layer(x, x, x, sliding_window_mask(6, window=window or 6))[0]
    cache = KVCache(window=window)
    outputs = []
    for t in range(6):
        S = len(cache) + 1  # the documented S = len(cache) + L
        assert cache.attended_length(1) == S
        allow_all = torch.ones(1, S, dtype=torch.bool)  # an extra mask of the documented shape
        outputs.append(
            layer(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], allow_all, cache=cache)[0]
        )
    torch.testing.assert_close(torch.cat(outputs, 1), reference)


def test_layer_given_the_list_of_caches_names_the_mistake():
    model = CausalLM.standard(11, d_model=8, num_heads=2, d_ff=16, num_layers=2, max_len=8)
    caches = model.new_cache()
    layer = model.blocks[0].self_attn
    x = torch.randn(1, 1, 8)
    with pytest.raises(TypeError, match=r"cache must be a KVCache, got list.*cache\[i\]"):
        layer(x, x, x, cache=caches)


@pytest.mark.parametrize("training", [True, False])
def test_mean_pooled_copy_keeps_the_mode(training):
    layer = MultiHeadAttention(8, 4).train(training)
    assert mean_pool_kv_heads(layer, 2).training is training
    assert mean_pool_kv_heads(layer, 4).training is training


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.complex64])
def test_positions_must_be_integers(dtype):
    good = torch.arange(3)
    bad = torch.arange(3).to(dtype) if dtype != torch.bool else torch.tensor([True, False, True])
    with pytest.raises(TypeError, match="query_positions"):
        window_mask_from_positions(bad, good)
    with pytest.raises(TypeError, match="key_positions"):
        window_mask_from_positions(good, bad)


def test_a_decoding_step_checks_its_inputs_once():
    """MultiHeadAttention checks query/key/value at its boundary; the steps inside (splitting the
    heads, the cache's update, the window mask, repeating K/V heads, attention) run unchecked."""
    import sys

    layer = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    cache = KVCache(window=3)
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        layer(x, x, x, cache=cache)
    step = torch.randn(1, 1, 16)
    called = []

    def profile(frame, event, arg):
        if event == "call" and "attncourse" in frame.f_code.co_filename:
            called.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        with torch.no_grad():
            out, _ = layer(step, step, step, cache=cache)
    finally:
        sys.setprofile(None)
    checked_entry_points = {
        "split_heads",
        "merge_heads",
        "update",
        "window_mask_from_positions",
        "repeat_kv",
        "scaled_dot_product_attention",
        "check_attention_inputs",
        "safe_softmax",
    }
    assert "forward" in called and "_append" in called and "_attention" in called
    assert not checked_entry_points & set(called), checked_entry_points & set(called)
    assert called.count("require_floating") == 3  # query, key and value, once each
    reference = layer(
        torch.cat([x, step], 1),
        torch.cat([x, step], 1),
        torch.cat([x, step], 1),
        sliding_window_mask(6, window=3),
    )[0][:, -1:]
    torch.testing.assert_close(out, reference)


# -- relative positions and the cache (chapter 6) ------------------------------------------


def _relative_model(positional, max_len=8, seed=0):
    torch.manual_seed(seed)
    return (
        CausalLM.standard(
            11, d_model=16, num_heads=4, d_ff=32, max_len=max_len, positional=positional
        )
        .double()
        .eval()
    )


def _windowed_logits(model, tokens, window):
    """One uncached pass under the sliding-window mask (no max_len for relative positions)."""
    x = model.embed(tokens)
    mask = sliding_window_mask(tokens.size(1), window=window)
    for block in model.blocks:
        x = block(x, mask)
    return model.head(x)


@pytest.mark.parametrize("positional", ["rope", "alibi"])
@pytest.mark.parametrize("chunks", [[8], [3, 1, 1, 1, 1, 1], [1] * 8, [5, 3]])
def test_relative_model_cached_decoding_equals_the_forward_pass(device, positional, chunks):
    model = _relative_model(positional).to(device)
    tokens = torch.randint(11, (3, 8), generator=_gen(1)).to(device)
    with torch.no_grad():
        full = model(tokens)
        cache, steps, start = model.new_cache(), [], 0
        for n in chunks:
            steps.append(model(tokens[:, start : start + n], cache))
            start += n
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("positional", ["rope", "alibi"])
@pytest.mark.parametrize("window", [1, 3, 8])
def test_rolling_buffer_decodes_past_max_len_with_relative_positions(positional, window):
    model = _relative_model(positional, max_len=8)
    tokens = torch.randint(11, (2, 30), generator=_gen(2))  # almost four times max_len
    with torch.no_grad():
        cache = model.new_cache(window=window)
        steps = torch.cat([model(tokens[:, t : t + 1], cache) for t in range(30)], dim=1)
        reference = _windowed_logits(model, tokens, window)
    torch.testing.assert_close(steps, reference)
    assert cache[0].seen == 30 and cache[0].keys.shape[2] == window


def test_rope_cache_stores_the_keys_rotated_at_their_positions():
    model = _relative_model("rope", max_len=8)
    tokens = torch.randint(11, (1, 12), generator=_gen(3))
    block = model.blocks[0]
    with torch.no_grad():
        cache = model.new_cache(window=4)
        for t in range(12):
            model(tokens[:, t : t + 1], cache)
        x = model.embed(tokens)
        keys = apply_rope(split_heads(block.self_attn.k_proj(x), 4), torch.arange(12))
    for slot, p in enumerate(cache[0].positions.tolist()):
        torch.testing.assert_close(cache[0].keys[:, :, slot], keys[:, :, p])


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_rolling_buffer_with_a_position_table_refuses_past_max_len(positional):
    model = _relative_model(positional, max_len=8)
    cache = model.new_cache(window=4)
    tokens = torch.randint(11, (1, 9), generator=_gen(4))
    with torch.no_grad():
        for t in range(8):
            model(tokens[:, t : t + 1], cache)
        with pytest.raises(ValueError, match="offset 8.*max_len=8.*relative positions"):
            model(tokens[:, 8:9], cache)
    assert cache[0].seen == 8  # nothing was stored


def test_mean_pooled_copy_keeps_rope():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, positional="rope")
    assert mean_pool_kv_heads(layer, 2).positional == "rope"
    x = torch.randn(1, 5, 16)
    torch.testing.assert_close(mean_pool_kv_heads(layer, 4)(x, x, x)[0], layer(x, x, x)[0])


def test_cache_edges_a_mutation_audit_found():
    # a negative key position (an empty slot of a rolling buffer) is never visible
    mask = window_mask_from_positions(torch.tensor([3]), torch.tensor([-1, 2]))
    assert mask.tolist() == [[False, True]]
    # keys of another head size do not fit the stored rows: the cache says so, naming itself
    cache = KVCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not fit the cache's rows"):
        cache.update(torch.zeros(1, 2, 1, 6), torch.zeros(1, 2, 1, 4))
