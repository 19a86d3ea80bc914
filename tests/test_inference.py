"""The key/value cache, grouped-query attention and their costs, against independent oracles.

Oracles: the whole causal layer recomputed at every step (``multihead_attention``, itself checked against
torch) and torch.nn.MultiheadAttention with a causal mask; torch's
``scaled_dot_product_attention(..., enable_gqa=True)`` in float64; parameter counts of torch modules;
the nbytes of caches the package fills; torch's FLOP counter on a torch decoding step.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import mha_lessons as M
from common import random_params
from mha_lessons.inference import (KVCache, decode_bytes, decode_flops, decode_step, gqa_param_count,
                                   grouped_query_attention, kv_cache_bytes)

# float64 results of O(1) built from sums of a few dozen products: agreement to ~1e-14 is what round-off
# allows; 1e-12 leaves a margin of a hundred and still fails on any wrong formula.
TOL = dict(rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the cache

@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
@pytest.mark.parametrize("h", [1, 4])
@pytest.mark.parametrize("bias", [True, False])
def test_decoding_token_by_token_equals_recomputing_the_causal_layer_at_every_step(rng, batch, h, bias):
    T, d_model = 7, 8
    params = random_params(rng, d_model, h, bias)
    x = rng.normal(size=batch + (T, d_model))
    cache = None
    for t in range(1, T + 1):
        y_t, cache = decode_step(x[..., t - 1:t, :], params, cache)  # (..., 1, d_model)
        prefix = x[..., :t, :]
        full, _ = M.multihead_attention(prefix, prefix, prefix, params, M.causal_mask(t))
        np.testing.assert_allclose(y_t, full[..., -1:, :], **TOL)
        assert cache.k.shape == cache.v.shape == batch + (h, t, d_model // h)


def test_decoding_equals_torchs_causal_layer(rng):
    B, T, d_model, h = 2, 9, 12, 3
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, T, d_model))
    outputs, cache = [], None
    for t in range(1, T + 1):  # the t-th token, at position t - 1
        y_t, cache = decode_step(x[:, t - 1:t], params, cache)
        outputs.append(y_t)
    module = M.params_to_torch(params)
    xt = torch.from_numpy(x)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # torch's boolean attn_mask: True = may NOT attend
    with torch.no_grad():
        expected, _ = module(xt, xt, xt, attn_mask=future)
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), expected.numpy(), **TOL)


def test_the_cache_holds_the_projected_keys_and_values(rng):
    B, T, d_model, h = 2, 5, 8, 2
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, T, d_model))
    cache = None
    for t in range(1, T + 1):
        _, cache = decode_step(x[:, t - 1:t], params, cache)
    k_all = x @ params.w_k + params.b_k  # (B, T, d_model)
    v_all = x @ params.w_v + params.b_v
    np.testing.assert_allclose(cache.k, M.split_heads(k_all, h), **TOL)
    np.testing.assert_allclose(cache.v, M.split_heads(v_all, h), **TOL)


@pytest.mark.parametrize("prompt", [1, 3, 6])
def test_a_prompt_in_one_call_then_one_token_at_a_time_equals_the_full_layer(rng, prompt):
    B, T, d_model, h = 2, 8, 8, 4
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, T, d_model))
    y_prompt, cache = decode_step(x[:, :prompt], params)  # the prefill: s = prompt tokens at once
    outputs = [y_prompt]
    for t in range(prompt + 1, T + 1):  # the t-th token, at position t - 1
        y_t, cache = decode_step(x[:, t - 1:t], params, cache)
        outputs.append(y_t)
    full, _ = M.multihead_attention(x, x, x, params, M.causal_mask(T))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, **TOL)


def test_a_block_of_new_tokens_after_a_cache_is_causal_within_the_block(rng):
    B, d_model, h = 1, 8, 2
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, 7, d_model))
    _, cache = decode_step(x[:, :3], params)
    y_block, _ = decode_step(x[:, 3:], params, cache)  # 4 new tokens after 3 cached ones
    full, _ = M.multihead_attention(x, x, x, params, M.causal_mask(7))
    np.testing.assert_allclose(y_block, full[:, 3:], **TOL)



def test_a_block_of_new_tokens_is_bottom_right_aligned_and_top_left_is_wrong(rng):
    # new token i of s, after t - s cached ones, stands at position t - s + i: causal_mask(s, t, align="bottom-right")
    d_model, h, s_new, t = 8, 2, 3, 7
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(t, d_model))
    _, cache = decode_step(x[:t - s_new], params)
    y_block, _ = decode_step(x[t - s_new:], params, cache)
    full, _ = M.multihead_attention(x, x, x, params, M.causal_mask(t))
    chunk = {align: M.multihead_attention(x[t - s_new:], x, x, params, M.causal_mask(s_new, t, align=align))[0]
             for align in ("top-left", "bottom-right")}
    np.testing.assert_allclose(chunk["bottom-right"], full[t - s_new:], **TOL)
    np.testing.assert_allclose(y_block, chunk["bottom-right"], **TOL)
    assert not np.allclose(chunk["top-left"], full[t - s_new:], rtol=0, atol=1e-3)

# ---------------------------------------------------------------- grouped-query attention against torch

def torch_gqa(q, k, v, mask=None):
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v)]
    attn_mask = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))  # True = may attend
    return F.scaled_dot_product_attention(*tensors, attn_mask=attn_mask, enable_gqa=True).numpy()


def masks(rng, B, h, n, m):
    """No mask, a causal (n, m) mask, and a random (B, h, n, m) mask with at least one key per query."""
    per_head = rng.random((B, h, n, m)) < 0.5
    per_head[..., 0] = True  # torch gives NaN for a query that may attend to nothing
    return {"none": None, "causal": M.causal_mask(n, m), "per batch and head": per_head}


@pytest.mark.parametrize("h, h_kv", [(8, 2), (6, 3), (4, 1), (4, 4), (1, 1)])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "per batch and head"])
def test_grouped_query_attention_equals_torchs_enable_gqa(rng, h, h_kv, mask_kind):
    B, n, m, d_k, d_v = 2, 5, 7, 4, 3
    q = rng.normal(size=(B, h, n, d_k))
    k = rng.normal(size=(B, h_kv, m, d_k))
    v = rng.normal(size=(B, h_kv, m, d_v))
    mask = masks(rng, B, h, n, m)[mask_kind]
    out, weights = grouped_query_attention(q, k, v, mask)
    np.testing.assert_allclose(out, torch_gqa(q, k, v, mask), **TOL)
    assert weights.shape == (B, h, n, m)
    np.testing.assert_allclose(weights @ np.repeat(v, h // h_kv, axis=1), out, **TOL)


def test_query_head_i_reads_key_value_head_i_over_g(rng):
    # Keys that make each kv head pick out a different value: head i must see value head i // g.
    h, h_kv, m, d = 6, 3, 4, 2
    q = rng.normal(size=(h, 1, d))
    k = np.zeros((h_kv, m, d))  # all scores 0: every query averages its kv head's values
    v = np.arange(h_kv, dtype=float)[:, None, None] * np.ones((h_kv, m, d))  # kv head j holds the value j
    out, _ = grouped_query_attention(q, k, v)
    np.testing.assert_array_equal(out[:, 0, 0], [0, 0, 1, 1, 2, 2])


def test_with_as_many_kv_heads_as_query_heads_it_is_multi_head_attention(rng):
    B, h, n, m, d = 2, 4, 5, 6, 3
    q, k, v = rng.normal(size=(B, h, n, d)), rng.normal(size=(B, h, m, d)), rng.normal(size=(B, h, m, d))
    mask = M.causal_mask(n, m)
    out, weights = grouped_query_attention(q, k, v, mask)
    expected_out, expected_weights = M.scaled_dot_product_attention(q, k, v, mask[None, None])
    np.testing.assert_allclose(out, expected_out, **TOL)
    np.testing.assert_allclose(weights, expected_weights, **TOL)


def test_multi_query_attention_shares_one_key_value_head(rng):
    h, n, m, d = 5, 3, 4, 2
    q, k, v = rng.normal(size=(h, n, d)), rng.normal(size=(1, m, d)), rng.normal(size=(1, m, d))
    out, _ = grouped_query_attention(q, k, v)
    for i in range(h):
        np.testing.assert_allclose(out[i], M.scaled_dot_product_attention(q[i], k[0], v[0])[0], **TOL)


# ---------------------------------------------------------------- parameter counts and cache sizes

@pytest.mark.parametrize("d_model, h", [(8, 1), (8, 2), (64, 8), (768, 12)])
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_with_all_kv_heads_equals_torchs_multihead_attention(d_model, h, bias):
    module = torch.nn.MultiheadAttention(d_model, h, bias=bias, device="meta")  # meta: shapes only
    assert gqa_param_count(d_model, h, h, bias=bias) == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("d_model, h, h_kv", [(64, 8, 1), (64, 8, 2), (96, 12, 4), (8192, 64, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_equals_a_torch_layer_with_narrow_key_and_value_projections(d_model, h, h_kv, bias):
    d_kv = h_kv * (d_model // h)
    layers = [torch.nn.Linear(d_model, width, bias=bias, device="meta") for width in (d_model, d_kv, d_kv, d_model)]
    expected = sum(p.numel() for layer in layers for p in layer.parameters())
    assert gqa_param_count(d_model, h, h_kv, bias=bias) == expected


def test_cache_bytes_equal_the_nbytes_of_the_caches_a_decoder_stack_fills(rng):
    B, T, d_model, h, layers = 3, 6, 8, 2, 3
    params = [random_params(rng, d_model, h) for _ in range(layers)]
    for p in params:  # float32, to check that the dtype's size is used
        for name, a in p.arrays().items():
            setattr(p, name, a.astype(np.float32))
    x = rng.normal(size=(B, T, d_model)).astype(np.float32)
    caches = [None] * layers
    for t in range(1, T + 1):
        hidden = x[:, t - 1:t]
        for i, p in enumerate(params):  # layer i's input is layer i - 1's output
            hidden, caches[i] = decode_step(hidden, p, caches[i])
    assert caches[0].k.dtype == np.float32
    assert sum(c.nbytes for c in caches) == kv_cache_bytes(T, layers, h, d_model // h, batch=B, dtype="float32")


@pytest.mark.parametrize("h_kv", [1, 2, 8])
def test_cache_bytes_of_a_grouped_cache(rng, h_kv):
    B, T, d_k = 2, 5, 4
    cache = KVCache(np.empty((B, h_kv, 0, d_k), np.float16), np.empty((B, h_kv, 0, d_k), np.float16))
    for _ in range(T):
        cache = cache.append(rng.normal(size=(B, h_kv, 1, d_k)).astype(np.float16),
                             rng.normal(size=(B, h_kv, 1, d_k)).astype(np.float16))
    assert cache.nbytes == kv_cache_bytes(T, 1, h_kv, d_k, batch=B, dtype=np.float16)


def test_cache_bytes_with_values_narrower_than_keys(rng):
    B, T, h_kv, d_k, d_v = 2, 3, 2, 6, 4
    cache = KVCache(rng.normal(size=(B, h_kv, T, d_k)).astype(np.float32),
                    rng.normal(size=(B, h_kv, T, d_v)).astype(np.float32))
    assert cache.nbytes == kv_cache_bytes(T, 1, h_kv, d_k, d_v=d_v, batch=B, dtype="float32")
    assert kv_cache_bytes(T, 1, h_kv, d_k, d_v=d_k) == kv_cache_bytes(T, 1, h_kv, d_k)


def test_fewer_kv_heads_shrink_the_cache_by_h_over_h_kv():
    full = kv_cache_bytes(4096, 80, 64, 128)
    assert [full // kv_cache_bytes(4096, 80, h_kv, 128) for h_kv in (64, 8, 1)] == [1, 8, 64]


# ---------------------------------------------------------------- FLOPs against torch's counter

def torch_step_flops(t, d_model, h, h_kv, *, cached, bias, batch=1, new_tokens=1):
    """Torch's FLOP counter on one decoding step of a grouped-query layer written with F.linear and F.sdpa."""
    d_k = d_model // h
    d_kv = h_kv * d_k
    w = {name: torch.randn(out, d_model) for name, out in (("q", d_model), ("k", d_kv), ("v", d_kv), ("o", d_model))}
    b = {name: torch.randn(w[name].shape[0]) if bias else None for name in w}
    x = torch.randn(batch, t, d_model)
    new = x[:, t - new_tokens:] if cached else x  # with the cache only the new tokens are projected
    s = new.shape[1]
    k_past = torch.randn(batch, h_kv, t - s, d_k)  # what the cache would hold
    v_past = torch.randn(batch, h_kv, t - s, d_k)
    # The fused CPU kernels of F.scaled_dot_product_attention are invisible to the counter; the math
    # backend runs the same two products as matmuls, which it counts.
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        q = F.linear(new, w["q"], b["q"]).view(batch, s, h, d_k).transpose(1, 2)
        k = F.linear(new, w["k"], b["k"]).view(batch, s, h_kv, d_k).transpose(1, 2)
        v = F.linear(new, w["v"], b["v"]).view(batch, s, h_kv, d_k).transpose(1, 2)
        k, v = torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2)
        mask = torch.ones(s, t, dtype=torch.bool).tril(t - s)  # bottom-right causal: None-equivalent for s = 1
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        F.linear(out.transpose(1, 2).reshape(batch, s, d_model), w["o"], b["o"])
    return counter.get_total_flops()


@pytest.mark.parametrize("t, d_model, h, h_kv", [(1, 8, 2, 2), (5, 16, 4, 4), (9, 16, 4, 2), (17, 32, 8, 1),
                                                  (33, 64, 8, 8)])
@pytest.mark.parametrize("cached", [True, False])
def test_decode_flops_equal_torchs_flop_counter(t, d_model, h, h_kv, cached):
    counted = torch_step_flops(t, d_model, h, h_kv, cached=cached, bias=True, batch=2)
    assert decode_flops(t, d_model, h, h_kv, cached=cached, batch=2)["matmul"] == counted


@pytest.mark.parametrize("t, new_tokens, h_kv", [(6, 3, 4), (9, 9, 2), (12, 5, 1)])
def test_a_cached_step_of_several_new_tokens_equals_torchs_flop_counter(t, new_tokens, h_kv):
    counted = torch_step_flops(t, 16, 4, h_kv, cached=True, bias=False, batch=2, new_tokens=new_tokens)
    assert decode_flops(t, 16, 4, h_kv, new_tokens=new_tokens, batch=2, bias=False)["matmul"] == counted


def test_a_prefill_costs_what_the_whole_layer_costs_and_one_new_token_is_the_default():
    assert decode_flops(7, 64, 8, new_tokens=7, batch=3) == M.complexity.mha_flops(7, 64, 8, batch=3)
    assert decode_flops(7, 64, 8, new_tokens=1) == decode_flops(7, 64, 8)


@pytest.mark.parametrize("bias", [True, False])
def test_a_step_without_cache_costs_what_the_whole_layer_costs(bias):
    for t in (1, 7, 64):
        assert decode_flops(t, 64, 8, cached=False, batch=3, bias=bias) == \
            M.complexity.mha_flops(t, 64, 8, batch=3, bias=bias)


def test_cached_step_grows_linearly_and_uncached_quadratically():
    d = 512
    cached = [decode_flops(t, d, 8)["matmul"] for t in (100, 200, 300)]
    uncached = [decode_flops(t, d, 8, cached=False)["matmul"] for t in (100, 200, 300)]
    assert cached[2] - cached[1] == cached[1] - cached[0] == 4 * 100 * d  # one query against 100 more keys
    second_difference = uncached[2] - 2 * uncached[1] + uncached[0]
    assert second_difference == 2 * 4 * 100**2 * d  # from the 4 t² d term


@pytest.mark.parametrize("cached", [True, False])
def test_element_wise_stages_count_the_numbers_they_touch(rng, cached):
    # torch's counter sees only the products; the element-wise stages are checked against the sizes of
    # the arrays they work on: the scaled queries, the weights (5 operations per score), and the biases
    # of a torch layer with narrow key/value projections, added once per projected token.
    B, t, d_model, h, h_kv = 2, 6, 16, 8, 2
    d_k = d_model // h
    s = 1 if cached else t
    q = rng.normal(size=(B, h, s, d_k))
    k = rng.normal(size=(B, h_kv, t, d_k))
    _, weights = grouped_query_attention(q, k, k)
    layers = [torch.nn.Linear(d_model, width, device="meta") for width in (d_model, h_kv * d_k, h_kv * d_k, d_model)]
    f = decode_flops(t, d_model, h, h_kv, cached=cached, batch=B)
    assert f["scale"] == q.size
    assert f["softmax"] == 5 * weights.size
    assert f["bias"] == B * s * sum(layer.bias.numel() for layer in layers)


@pytest.mark.parametrize("B, t, new_tokens, bias", [(1, 1, 1, True), (2, 7, 1, False), (3, 6, 6, True),
                                                     (2, 9, 4, True)])
def test_decode_bytes_equal_the_nbytes_of_what_a_float32_step_reads_and_writes(rng, B, t, new_tokens, bias):
    # Independent count: the arrays a real step touches, each once: the layer's parameters, the cache
    # after the step (t positions per sequence), the new tokens and their outputs, all in float32.
    d_model, h = 16, 4
    params = random_params(rng, d_model, h, bias)
    params = M.MHAParams(h, *(None if a is None else a.astype(np.float32) for a in
                              (params.w_q, params.w_k, params.w_v, params.w_o,
                               params.b_q, params.b_k, params.b_v, params.b_o)))
    x = rng.normal(size=(B, t, d_model)).astype(np.float32)
    cache = None
    if t > new_tokens:
        _, cache = decode_step(x[:, :t - new_tokens], params)
    y, cache = decode_step(x[:, t - new_tokens:], params, cache)
    assert y.dtype == cache.k.dtype == np.float32
    weights = sum(a.nbytes for a in (params.w_q, params.w_k, params.w_v, params.w_o,
                                     params.b_q, params.b_k, params.b_v, params.b_o) if a is not None)
    counted = decode_bytes(t, d_model, h, new_tokens=new_tokens, batch=B, bias=bias, dtype="float32")
    assert counted["weights"] == weights
    assert counted["cache"] == cache.nbytes
    assert counted["tokens"] == x[:, t - new_tokens:].nbytes + y.nbytes
    assert counted["total"] == weights + cache.nbytes + 2 * y.nbytes


def test_decode_bytes_of_a_grouped_layer_count_its_narrow_projections():
    # The weights of a torch layer with narrow key/value projections (h_kv = 2 of h = 8 heads), 2 bytes each.
    d_model, h, h_kv = 64, 8, 2
    layers = [torch.nn.Linear(d_model, width, device="meta") for width in (d_model, 16, 16, d_model)]
    numbers = sum(p.numel() for layer in layers for p in layer.parameters())
    counted = decode_bytes(10, d_model, h, h_kv)
    assert counted["weights"] == 2 * numbers
    assert counted["cache"] == 2 * 2 * h_kv * 10 * (d_model // h)


def test_decoding_one_token_is_memory_bound_and_a_long_prompt_is_not():
    # Closed forms for one layer of width d, 16-bit numbers, no biases: a step at t >> 1 does about
    # 8 d² + 4 t d FLOPs per new token and reads 8 d² bytes of weights and 4 t d of cache: about 1 FLOP
    # per byte for one token; a prompt of s tokens reuses every weight s times.
    d, h, t = 1024, 8, 2048
    one = decode_flops(t, d, h, bias=False)["total"] / decode_bytes(t, d, h, bias=False)["total"]
    prompt = decode_flops(t, d, h, new_tokens=t, bias=False)["total"] / \
        decode_bytes(t, d, h, new_tokens=t, bias=False)["total"]
    assert 1 <= one < 1.1
    assert prompt > 0.5 * (8 * t * d**2 + 4 * t**2 * d) / (8 * d**2 + 8 * t * d)


def test_stages_add_up_to_the_total():
    f = decode_flops(10, 32, 4, 2, batch=2)
    assert f["total"] == sum(v for k, v in f.items() if k not in ("matmul", "total"))


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, words", [
    (lambda: grouped_query_attention(np.ones((6, 2, 4)), np.ones((4, 3, 4)), np.ones((4, 3, 4))),
     "h = 6 query heads cannot be shared out among h_kv = 4"),
    (lambda: grouped_query_attention(np.ones((4, 2, 4)), np.ones((2, 3, 4)), np.ones((1, 3, 4))),
     "k has h_kv = 2 heads (shape (2, 3, 4)) but v has 1"),
    (lambda: grouped_query_attention(np.ones((4, 2, 4)), np.ones((2, 3, 5)), np.ones((2, 3, 5))),
     "query and key widths differ"),
    (lambda: grouped_query_attention(np.ones((4, 2, 4)), np.ones((2, 3, 4)), np.ones((2, 2, 4))),
     "keys and values differ in length"),
    (lambda: grouped_query_attention(np.ones((2, 4, 2, 4)), np.ones((3, 2, 3, 4)), np.ones((3, 2, 3, 4))),
     "batch dimensions do not broadcast"),
    (lambda: grouped_query_attention(np.ones((4, 2, 4)), np.ones((2, 3, 4)), np.ones((2, 3, 4)),
                                     np.ones((2, 2, 3), bool)),
     "does not broadcast to the scores' shape (4, 2, 3)"),
    (lambda: grouped_query_attention(np.ones((2, 4)), np.ones((2, 3, 4)), np.ones((2, 3, 4))),
     "q must have at least 3 dimensions"),
    (lambda: gqa_param_count(64, 8, 3), "h = 8 query heads cannot be shared out among h_kv = 3"),
    (lambda: gqa_param_count(64, 8, 16), "h = 8 query heads cannot be shared out among h_kv = 16"),
    (lambda: gqa_param_count(64, 8, 0), "num_kv_heads must be a positive integer, got 0"),
    (lambda: kv_cache_bytes(0, 1, 1, 1), "seq_len must be a positive integer, got 0"),
    (lambda: kv_cache_bytes(4, 2, True, 1), "num_kv_heads must be a positive integer, got True"),
    (lambda: kv_cache_bytes(4, 2, 1, 8, d_v=0), "d_v must be a positive integer, got 0"),
    (lambda: decode_flops(0, 8, 2), "t must be a positive integer, got 0"),
    (lambda: decode_flops(3, 8, 4, 3), "h_kv = 3"),
    (lambda: decode_flops(3, 8, 4, new_tokens=4), "new_tokens = 4 cannot exceed t = 3"),
    (lambda: decode_flops(3, 8, 4, cached=False, new_tokens=2), "applies to a cached step only"),
    (lambda: decode_bytes(3, 8, 4, new_tokens=0), "new_tokens must be a positive integer, got 0"),
    (lambda: KVCache(np.ones((2, 3, 4)), np.ones((2, 4, 4))), "k has shape (2, 3, 4), v has shape (2, 4, 4)"),
    (lambda: KVCache(np.ones((2, 3, 4)), np.ones((2, 3, 4))).append(np.ones((1, 1, 4)), np.ones((1, 1, 4))),
     "cannot append k of shape (1, 1, 4) to a cache of shape (2, 3, 4)"),
])
def test_bad_input_raises_value_error_naming_the_numbers(call, words):
    with pytest.raises(ValueError) as error:
        call()
    assert words in str(error.value), str(error.value)


def test_decode_step_rejects_a_cache_of_another_layer(rng):
    params = M.init_params(8, 2)
    _, cache = decode_step(rng.normal(size=(1, 8)), M.init_params(8, 4))  # 4 heads of width 2
    with pytest.raises(ValueError, match=r"cannot append k of shape \(2, 1, 4\) to a cache of shape \(4, 1, 2\)"):
        decode_step(rng.normal(size=(1, 8)), params, cache)
    with pytest.raises(ValueError, match="expect d_model = 8"):
        decode_step(rng.normal(size=(1, 6)), params)


# ---------------------------------------------------------------- the chapter's exercises

def test_cache_bytes_exercise():
    # Written out as a learner would: 2 (k and v) x layers x kv heads x positions x d_k x bytes per number.
    layers, h, h_kv, d_model, seq_len = 80, 64, 8, 8192, 4096
    d_k = d_model // h
    right = 2 * layers * h_kv * seq_len * d_k * 2
    assert M.exercises.check_cache_bytes(right).ok
    assert M.exercises.check_cache_bytes(float(right)).ok
    cases = {
        "query head": 2 * layers * h * seq_len * d_k * 2,
        "only the keys": layers * h_kv * seq_len * d_k * 2,
        "one layer's cache": 2 * h_kv * seq_len * d_k * 2,
        "2 bytes each, not 4": 2 * layers * h_kv * seq_len * d_k * 4,
        "in bits": 2 * layers * h_kv * seq_len * d_k * 16,
        "in GiB": right / 1024**3,
        "forgot to `return`": None,
        "shape (2,)": [right, right],
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_cache_bytes(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def _expand_with_a_loop(k, num_heads, order="repeat", axis=-3):
    """expand_kv written with a loop over query heads, as a learner might, with the ordering as a choice."""
    h_kv = k.shape[-3]
    g = num_heads // h_kv
    if axis != -3:
        return np.repeat(k, g, axis=axis)
    pick = [i // g if order == "repeat" else i % h_kv for i in range(num_heads)]
    return np.stack([k[..., j, :, :] for j in pick], axis=-3)


def test_expand_kv_exercise():
    assert M.exercises.check_expand_kv(_expand_with_a_loop).ok
    assert M.exercises.check_expand_kv(lambda k, h: np.repeat(k, h // k.shape[-3], axis=-3)).ok
    cases = {
        "np.tile's order": lambda k, h: np.tile(k, (1, h // k.shape[-3], 1, 1)),
        "i % h_kv": lambda k, h: _expand_with_a_loop(k, h, order="tile"),
        "positions were repeated": lambda k, h: _expand_with_a_loop(k, h, axis=-2),
        "batch axis was repeated": lambda k, h: _expand_with_a_loop(k, h, axis=0),
        "repeated h times": lambda k, h: np.repeat(k, h, axis=-3),
        "Count from the end": lambda k, h: np.repeat(k, h // k.shape[-3], axis=1),
        "not written yet": lambda k, h: (_ for _ in ()).throw(NotImplementedError),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_expand_kv(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def _pool_with_a_loop(w, h, h_kv, groups="consecutive", reduce=np.mean):
    """mean_pool_kv written head by head, as a learner might."""
    d_k = w.shape[1] // h
    g = h // h_kv
    heads = [w[:, i * d_k:(i + 1) * d_k] for i in range(h)]  # each (d_model, d_k)
    members = [[j * g + r for r in range(g)] if groups == "consecutive" else [j + r * h_kv for r in range(g)]
               for j in range(h_kv)]
    return np.concatenate([reduce([heads[i] for i in group], axis=0) for group in members], axis=1)


def test_mean_pool_kv_exercise():
    assert M.exercises.check_mean_pool_kv(_pool_with_a_loop).ok
    cases = {
        "strided": lambda w, h, h_kv: _pool_with_a_loop(w, h, h_kv, groups="strided"),
        "summed": lambda w, h, h_kv: _pool_with_a_loop(w, h, h_kv, reduce=np.sum),
        "first head of each group": lambda w, h, h_kv: _pool_with_a_loop(w, h, h_kv, reduce=lambda a, axis: a[0]),
        "features inside each head": lambda w, h, h_kv: np.stack(
            [w[:, i * (w.shape[1] // h):(i + 1) * (w.shape[1] // h)].mean(axis=1) for i in range(h)], axis=1),
        "rows were pooled": lambda w, h, h_kv: _pool_with_a_loop(w.T, h, h_kv).T,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_mean_pool_kv(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def _earlier_changed(x, params, causal, old_mask="causal", shift=False, keep_last=False):
    """Exercise 4 as a learner writes it, row by row, with switches for the typical mistakes."""
    n = len(x)
    mask_new = M.causal_mask(n) if causal else None
    mask_old = M.causal_mask(n - 1) if (causal if old_mask == "causal" else old_mask) else None
    old, _ = M.multihead_attention(x[:-1], x[:-1], x[:-1], params, mask_old)
    new, _ = M.multihead_attention(x, x, x, params, mask_new)
    rows = new[1:] if shift else new[:-1]  # shift: row i + 1 compared with old row i
    changed = [not np.allclose(rows[i], old[i]) for i in range(n - 1)]
    return np.array(changed + [True] if keep_last else changed)


def test_earlier_changed_exercise():
    assert M.exercises.check_earlier_changed(_earlier_changed).ok
    cases = {
        "True and False are swapped": lambda x, p, c: ~_earlier_changed(x, p, c),
        "compare row i with row i": lambda x, p, c: _earlier_changed(x, p, c, shift=True),
        "in one run only": lambda x, p, c: _earlier_changed(x, p, c, old_mask=False),
        "leave the mask out of both runs": lambda x, p, c: _earlier_changed(x, p, True),
        "the new token has no old output": lambda x, p, c: _earlier_changed(x, p, c, keep_last=True),
        "not written yet": lambda x, p, c: (_ for _ in ()).throw(NotImplementedError),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_earlier_changed(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_earlier_changed_matches_the_cache_oracle():
    """The checker's causal answer agrees with decode_step: cached rows are final, so nothing earlier changes."""
    rng = np.random.default_rng(5)
    params = M.init_params(8, 2, seed=3)
    x = rng.normal(size=(6, 8))
    cache, rows = None, []
    for t in range(6):
        y, cache = decode_step(x[t:t + 1], params, cache)
        rows.append(y[0])
    full, _ = M.multihead_attention(x, x, x, params, M.causal_mask(6))
    np.testing.assert_allclose(np.array(rows), full, rtol=1e-12, atol=1e-12)  # decoding = causal full pass
    assert M.exercises.check_earlier_changed(
        lambda x, params, causal: np.zeros(len(x) - 1, bool) if causal else np.ones(len(x) - 1, bool)).ok


def test_a_layer_style_mask_is_not_silently_read_as_one_mask_per_head(rng):
    # With B = h, a (B, n, m) padding mask broadcasts to (B, h, n, m) as if it were (h, n, m): torch's SDPA
    # rule, and a silent wrong answer for a reader who meant one mask per sequence. It is refused instead.
    B = h = 2
    q, k = rng.normal(size=(B, h, 3, 4)), rng.normal(size=(B, 1, 5, 4))
    per_sequence = np.ones((B, 3, 5), bool)
    per_sequence[0, :, 3:] = False  # sequence 0 has two padded keys
    with pytest.raises(ValueError, match=r"a mask of shape \(2, 3, 5\) is ambiguous .* B = h = 2: .* mask\[:, None\]"):
        grouped_query_attention(q, k, k, per_sequence)
    out, weights = grouped_query_attention(q, k, k, per_sequence[:, None])  # (B, 1, n, m): what was meant
    assert np.all(weights[0, :, :, 3:] == 0) and np.all(weights[1] > 0)
    ref = M.scaled_dot_product_attention(q, k, k, per_sequence[:, None])[0]  # h_kv = 1 broadcast over heads
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
