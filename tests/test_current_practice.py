"""Sliding windows, rotary positions in the cache, split-KV decoding and multi-head latent attention.

Oracles: masks written from their definition with loops; the whole sequence recomputed (RoPE written in
torch with complex numbers, torch's scaled_dot_product_attention); full attention with the band mask;
torch autograd for the block-wise backward with a window; torch.nn.MultiheadAttention with the dense
weights of a latent layer; brute-force counts of the tiles that hold an allowed pair.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import mha_lessons as M
from common import random_params
from mha_lessons import blockwise, latent
from mha_lessons.inference import KVCache, RollingKVCache, decode_step
from mha_lessons.masks import position_mask, sliding_window_mask, unmask_empty_rows
from mha_lessons.position import rotary

TOL = dict(rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- masks

@pytest.mark.parametrize("n, m", [(5, 5), (3, 7), (7, 3)])
@pytest.mark.parametrize("window", [1, 2, 4, 10])
@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
def test_sliding_window_mask_is_its_definition(n, m, window, align):
    offset = 0 if align == "top-left" else m - n
    expected = np.array([[0 <= (i + offset) - j < window for j in range(m)] for i in range(n)])
    assert np.array_equal(sliding_window_mask(n, m, window=window, align=align), expected)
    if window >= m + n:  # no limit left: the causal mask
        assert np.array_equal(sliding_window_mask(n, m, window=window, align=align), M.causal_mask(n, m, align=align))


def test_position_mask_refuses_bad_input():
    with pytest.raises(ValueError, match="window"):
        position_mask([0], [0], window=0)
    with pytest.raises(ValueError, match="integer positions"):
        position_mask([0.5], [0])


def test_left_padding_empties_rows_torch_gives_nan_and_unmasking_them_keeps_the_real_tokens(rng):
    B, n, d_model, h = 2, 5, 8, 2
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, n, d_model))
    lengths = np.array([5, 3])
    real = np.arange(n)[None, :] >= (n - lengths)[:, None]             # (B, n): left padding
    mask = real[:, None, :] & M.causal_mask(n)                         # (B, n, m)
    assert not mask[1, 0].any()                                        # a leading pad query sees nothing
    layer = M.params_to_torch(params)
    xt = torch.from_numpy(x)
    blocked = torch.from_numpy(M.masks.to_torch_attn_mask(mask, h))
    with torch.no_grad():
        y_nan, _ = layer(xt, xt, xt, attn_mask=blocked)
    assert torch.isnan(y_nan[1, 0]).all()
    fixed = unmask_empty_rows(mask)
    with torch.no_grad():
        y_fixed, _ = layer(xt, xt, xt, attn_mask=torch.from_numpy(M.masks.to_torch_attn_mask(fixed, h)))
    assert torch.isfinite(y_fixed).all()
    ours, _ = M.multihead_attention(x, x, x, params, mask=mask)
    np.testing.assert_allclose(y_fixed.numpy()[real], ours[real], **TOL)
    assert np.array_equal(fixed[real], mask[real])


# ---------------------------------------------------------------- rotary positions

def torch_rotary(x, positions, base=10000.0):
    """RoPE as complex multiplication: pair (x_2i, x_2i+1) is the number x_2i + i x_2i+1, turned by e^{i p ω_i}."""
    d = x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones_like(omega), positions[:, None].double() * omega)   # (n, d/2)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).reshape(x.shape)


def test_rotary_equals_complex_multiplication_and_depends_only_on_the_gap(rng):
    x = rng.normal(size=(3, 6, 8))
    pos = np.array([0, 1, 5, 9, 100, 4000])
    np.testing.assert_allclose(rotary(x, pos), torch_rotary(torch.from_numpy(x), torch.from_numpy(pos)).numpy(),
                               rtol=1e-12, atol=1e-12)
    q, k = rng.normal(size=(1, 8)), rng.normal(size=(1, 8))
    dots = [(rotary(q, [p + 3]) @ rotary(k, [p]).T).item() for p in (0, 7, 50)]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-12)
    with pytest.raises(ValueError, match="odd width"):
        rotary(np.ones((2, 3)), [0, 1])


@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [9]])
def test_decode_step_with_rope_equals_recomputing_the_whole_sequence_in_torch(rng, chunks):
    B, T, d_model, h = 2, sum(chunks), 16, 4
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, T, d_model))
    cache, outs = None, []
    for start, size in zip(np.cumsum([0] + chunks[:-1]), chunks):
        y, cache = decode_step(x[:, start:start + size], params, cache, rope_base=100.0)
        outs.append(y)
    # the whole sequence in torch: project, rotate every position, causal attention, mix
    t = {name: torch.from_numpy(a) for name, a in params.arrays().items()}
    xt = torch.from_numpy(x)
    heads = [(xt @ t[f"w_{c}"] + t[f"b_{c}"]).view(B, T, h, -1).transpose(1, 2) for c in "qkv"]
    positions = torch.arange(T)
    q, k = (torch_rotary(a, positions, base=100.0) for a in heads[:2])
    o = F.scaled_dot_product_attention(q, k, heads[2], is_causal=True)
    y_torch = o.transpose(1, 2).reshape(B, T, d_model) @ t["w_o"] + t["b_o"]
    np.testing.assert_allclose(np.concatenate(outs, axis=1), y_torch.numpy(), **TOL)
    assert np.array_equal(cache.positions, np.arange(T))


# ---------------------------------------------------------------- sliding window: rolling cache, tiles

@pytest.mark.parametrize("window", [1, 3, 5, 20])
@pytest.mark.parametrize("chunks", [[1] * 11, [6, 1, 1, 3], [2, 7, 2]])
def test_rolling_cache_decoding_equals_full_attention_with_the_band_mask(rng, window, chunks):
    B, d_model, h = 2, 8, 2
    T = sum(chunks)
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, T, d_model))
    cache, outs = None, []
    for start, size in zip(np.cumsum([0] + chunks[:-1]), chunks):
        y, cache = decode_step(x[:, start:start + size], params, cache, window=window)
        assert isinstance(cache, RollingKVCache) and cache.length == min(window, start + size)
        outs.append(y)
    full, _ = M.multihead_attention(x, x, x, params, sliding_window_mask(T, window=window))
    np.testing.assert_allclose(np.concatenate(outs, axis=1), full, **TOL)
    assert sorted(cache.positions) == list(range(max(0, T - window), T))
    assert all(cache.positions[slot] % window == slot for slot in range(cache.length))


def test_decode_step_refuses_a_window_other_than_the_caches(rng):
    params = random_params(rng, 8, 2)
    _, cache = decode_step(rng.normal(size=(3, 8)), params, window=2)
    with pytest.raises(ValueError, match="window"):
        decode_step(rng.normal(size=(1, 8)), params, cache, window=3)


@pytest.mark.parametrize("n, m, b, t", [(37, 37, 7, 10), (40, 40, 8, 8), (30, 45, 16, None), (50, 50, 1, 3)])
@pytest.mark.parametrize("window", [1, 5, 12, 100])
def test_blockwise_window_equals_the_band_mask_forward_backward_and_counts(rng, n, m, b, t, window):
    q, k, v = rng.normal(size=(2, n, 8)), rng.normal(size=(2, m, 8)), rng.normal(size=(2, m, 4))
    band = sliding_window_mask(n, m, window=window)
    plain, _ = M.scaled_dot_product_attention(q, k, v, band)
    out, lse = blockwise.blockwise_attention_with_lse(q, k, v, window=window, block_size=b, query_block=t)
    np.testing.assert_allclose(out, plain, **TOL)
    d_o = rng.normal(size=out.shape)
    grads = blockwise.blockwise_attention_backward(q, k, v, out, lse, d_o, window=window, block_size=b,
                                                   query_block=t)
    tensors = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    F.scaled_dot_product_attention(*tensors, attn_mask=torch.from_numpy(band)).backward(torch.from_numpy(d_o))
    for ours, ref in zip(grads, tensors):
        np.testing.assert_allclose(ours, ref.grad.numpy(), rtol=1e-10, atol=1e-12)
    tile = n if t is None else t
    brute = sum(band[i0:i0 + tile, j0:j0 + b].any() for i0 in range(0, n, tile) for j0 in range(0, m, b))
    assert blockwise.tiles_computed(n, m, b, t, window=window) == brute


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_blockwise_window_with_a_bias_is_torchs_float_mask_forward_and_backward(rng, dtype):
    n, m, b, t, window = 23, 23, 4, 5, 6
    q, k, v = rng.normal(size=(2, n, 8)), rng.normal(size=(2, m, 8)), rng.normal(size=(2, m, 4))
    bias = rng.normal(size=(2, 1, n, m))                 # (B, 1, n, m): per sequence, broadcast over heads
    q, k, v = (np.broadcast_to(a[:, None], (2, 3) + a.shape[1:]) for a in (q, k, v))  # 3 heads
    band = sliding_window_mask(n, m, window=window)
    float_mask = bias + np.where(band, 0.0, -np.inf)     # torch's float attn_mask: the bias, -inf off the band
    d_o = rng.normal(size=(2, 3, n, 4))
    tensors = [torch.tensor(np.ascontiguousarray(a), requires_grad=True) for a in (q, k, v)]
    ref = F.scaled_dot_product_attention(*tensors, attn_mask=torch.from_numpy(float_mask))
    ref.backward(torch.from_numpy(d_o))
    low = [a.astype(dtype) for a in (q, k, v, bias, d_o)]
    kw = dict(window=window, block_size=b, query_block=t, bias=low[3])
    out, lse = blockwise.blockwise_attention_with_lse(*low[:3], **kw)
    grads = blockwise.blockwise_attention_backward(*low[:3], out, lse, low[4], **kw)
    tol = TOL if dtype == np.float64 else dict(rtol=0, atol=2e-2)  # float16 inputs and outputs: ~3 digits
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    np.testing.assert_allclose(out, ref.detach().numpy(), **tol)
    for ours, theirs in zip(grads, tensors):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), **(TOL if dtype == np.float64 else
                                                                dict(rtol=0, atol=5e-2)))


# ---------------------------------------------------------------- split-KV decoding

@pytest.mark.parametrize("splits", [1, 2, 3, 7, 13])
def test_split_kv_attention_equals_the_unsplit_attention_and_torch(rng, splits):
    q = rng.normal(size=(2, 4, 1, 8))                    # one new query per head
    k, v = rng.normal(size=(2, 4, 13, 8)), rng.normal(size=(2, 4, 13, 5))
    mask = rng.random((2, 1, 1, 13)) < 0.6
    mask[1, 0, 0] = False                                # a query that sees nothing
    ours = blockwise.split_kv_attention(q, k, v, mask, num_splits=splits)
    plain, _ = M.scaled_dot_product_attention(q, k, v, mask)
    np.testing.assert_allclose(ours, plain, **TOL)
    theirs = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q[0], k[0], v[0])),
                                            attn_mask=torch.from_numpy(mask[0]))
    np.testing.assert_allclose(ours[0], theirs.numpy(), **TOL)
    with pytest.raises(ValueError, match="num_splits"):
        blockwise.split_kv_attention(q, k, v, num_splits=14)



@pytest.mark.parametrize("splits", [1, 4, 13])
def test_split_kv_attention_with_a_bias_is_torchs_float_mask(rng, splits):
    q = rng.normal(size=(2, 4, 1, 8))
    k, v = rng.normal(size=(2, 4, 13, 8)), rng.normal(size=(2, 4, 13, 5))
    bias = rng.normal(size=(1, 4, 1, 13))                # per head, as ALiBi's slopes give
    bias[0, 2, 0, 5:] = -np.inf                          # a head that sees only the first 5 keys
    ours = blockwise.split_kv_attention(q, k, v, num_splits=splits, bias=bias)
    theirs = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                            attn_mask=torch.from_numpy(bias))
    np.testing.assert_allclose(ours, theirs.numpy(), **TOL)
    np.testing.assert_allclose(ours, M.scaled_dot_product_attention(q, k, v, bias=bias)[0], **TOL)
    s_max, z, acc = blockwise.attention_state(q, k, v, bias=bias)
    np.testing.assert_allclose(acc / z, ours, **TOL)


def test_split_kv_attention_in_float16_counts_beyond_float16s_range():
    m = 70_000                                           # equal scores: z = m > 65504, the largest float16
    q, k = np.zeros((1, 4), np.float16), np.zeros((m, 4), np.float16)
    v = np.ones((m, 2), np.float16)
    v[:, 1] = np.arange(m) % 2                           # mean 1/2
    s_max, z, acc = blockwise.attention_state(q, k, v)
    assert z.dtype == np.float32 and float(z[0, 0]) == m
    out = blockwise.split_kv_attention(q, k, v, num_splits=3)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.array([[1.0, 0.5]], np.float16))
    merged = blockwise.merge_states(*(tuple(a.astype(np.float16) for a in blockwise.attention_state(
        q, k[j0:j0 + 30_000], v[j0:j0 + 30_000])) for j0 in range(0, m, 30_000)))
    assert all(a.dtype == np.float32 for a in merged) and float(merged[1][0, 0]) == m  # float16 parts, float32 sum


# ---------------------------------------------------------------- multi-head latent attention

@pytest.mark.parametrize("d_latent", [2, 6, 40])
def test_mla_absorbed_equals_unabsorbed_and_torch_mha_with_the_dense_weights(rng, d_latent):
    d_model, h, T = 16, 4, 9
    params = latent.init_mla_params(d_model, h, d_latent, seed=3)
    x = rng.normal(size=(2, T, d_model))
    causal = M.causal_mask(T)
    unabsorbed = latent.mla_attention(x, params, causal)
    y_a, c = latent.decode_step(x[:, :4], params)
    outs = [y_a]
    for i in range(4, T):
        y, c = latent.decode_step(x[:, i:i + 1], params, c)
        outs.append(y)
    absorbed = np.concatenate(outs, axis=1)
    np.testing.assert_allclose(absorbed, unabsorbed, **TOL)
    assert c.shape == (2, T, d_latent)
    layer = M.params_to_torch(latent.to_mha_params(params))
    xt = torch.from_numpy(x)
    with torch.no_grad():
        ref, _ = layer(xt, xt, xt, attn_mask=torch.from_numpy(~causal))
    np.testing.assert_allclose(unabsorbed, ref.numpy(), **TOL)


def test_mla_cache_is_the_latent_and_the_rotary_key_per_token():
    # DeepSeek-V2's shapes: d_c = 4 d_h = 512, d_rope = d_h / 2 = 64, so (d_c + d_rope) = 4.5 d_h numbers
    assert latent.cache_bytes(1, 1, 512, d_rope=64, dtype="float16") == 2 * 576
    assert latent.cache_bytes(10, 60, 512, d_rope=64, batch=3) == 3 * 60 * 10 * 576 * 2
    with pytest.raises(ValueError, match="d_rope"):
        latent.cache_bytes(1, 1, 8, d_rope=-1)
    with pytest.raises(ValueError):
        latent.MLAParams(2, np.ones((4, 4)), np.ones((4, 3)), np.ones((2, 4)), np.ones((3, 4)), np.ones((4, 4)))


def _mla_step_in_torch(c, k_rope, x_new, params, w_qr, *, absorbed):
    """One MLA decoding step for one new token per sequence, written in torch, both ways.

    c (B, t, d_c) cached latents, k_rope (B, t, d_rope) the shared rotary keys (already rotated),
    x_new (B, 1, d_model); w_qr (d_model, h d_rope) gives each head's rotary query. Only the products
    over the cache and the ones that differ between the two ways are done here; the shared
    projections (W_Q, W_DKV, W_O) are done outside, so torch's counter sees exactly what
    ``latent.decode_attention_flops`` counts.
    """
    h, d_k = params.num_heads, params.d_k
    B, t, d_c = c.shape
    w_uk = torch.from_numpy(params.per_head("w_uk"))  # (h, d_c, d_k)
    w_uv = torch.from_numpy(params.per_head("w_uv"))  # (h, d_c, d_v)
    q = (torch.from_numpy(x_new) @ torch.from_numpy(params.w_q)).view(B, 1, h, d_k).transpose(1, 2)
    q_rope = (torch.from_numpy(x_new) @ torch.from_numpy(w_qr)).view(B, 1, h, -1).transpose(1, 2)
    c, k_rope = torch.from_numpy(c), torch.from_numpy(k_rope)
    scale = 1 / math.sqrt(d_k + k_rope.shape[-1])
    with FlopCounterMode(display=False) as counter:
        if absorbed:
            q_latent = q @ w_uk.transpose(-1, -2)  # (B, h, 1, d_k) @ (h, d_k, d_c) -> (B, h, 1, d_c)
            scores = q_latent @ c[:, None].transpose(-1, -2) + q_rope @ k_rope[:, None].transpose(-1, -2)
            weights = torch.softmax(scores * scale, dim=-1)  # (B, h, 1, t)
            o = (weights @ c[:, None]) @ w_uv  # (B, h, 1, d_c) @ (h, d_c, d_v) -> (B, h, 1, d_v)
        else:
            k = (c @ torch.from_numpy(params.w_uk)).view(B, t, h, d_k).transpose(1, 2)  # (B, h, t, d_k)
            v = (c @ torch.from_numpy(params.w_uv)).view(B, t, h, -1).transpose(1, 2)  # (B, h, t, d_v)
            scores = q @ k.transpose(-1, -2) + q_rope @ k_rope[:, None].transpose(-1, -2)  # (B, h, 1, t)
            o = torch.softmax(scores * scale, dim=-1) @ v  # (B, h, 1, d_v)
    return o.numpy(), counter.get_total_flops()


@pytest.mark.parametrize("t, h, d_latent, d_k, d_v, d_rope", [(1, 2, 6, 4, 4, 0), (7, 4, 6, 4, 3, 2),
                                                              (12, 3, 20, 8, 8, 4)])
def test_mla_decode_flops_equal_torchs_count_of_both_ways_of_decoding(rng, t, h, d_latent, d_k, d_v, d_rope):
    # The oracle: torch's FLOP counter on the two computations written out, which give the same output.
    d_model, B = 12, 2
    params = latent.init_mla_params(d_model, h, d_latent, d_k=d_k, d_v=d_v, seed=5)
    c, k_rope = rng.normal(size=(B, t, d_latent)), rng.normal(size=(B, t, d_rope))
    x_new, w_qr = rng.normal(size=(B, 1, d_model)), rng.normal(size=(d_model, h * d_rope))
    counted = {}
    outputs = {}
    for absorbed in (True, False):
        outputs[absorbed], counted[absorbed] = _mla_step_in_torch(c, k_rope, x_new, params, w_qr, absorbed=absorbed)
        f = latent.decode_attention_flops(t, h, d_latent, d_k=d_k, d_v=d_v, d_rope=d_rope, absorbed=absorbed,
                                          batch=B)
        assert f["total"] == counted[absorbed]
    np.testing.assert_allclose(outputs[True], outputs[False], **TOL)  # the same attention, counted two ways


def test_mla_absorbed_step_written_in_torch_is_the_packages_decode_step(rng):
    # Without a rotary part, the torch computation counted above is the package's absorbed decoding.
    d_model, h, d_latent, t = 16, 4, 6, 5
    params = latent.init_mla_params(d_model, h, d_latent, seed=7)
    x = rng.normal(size=(2, t, d_model))
    _, c = latent.decode_step(x[:, :-1], params)
    y, c = latent.decode_step(x[:, -1:], params, c)
    o, _ = _mla_step_in_torch(c, np.zeros((2, t, 0)), x[:, -1:], params, np.zeros((d_model, 0)), absorbed=True)
    np.testing.assert_allclose(M.combine_heads(o) @ params.w_o, y, **TOL)


def test_absorbed_mla_with_deepseek_v2s_sizes_does_242_flops_per_byte_and_4_25_times_mhas_attention():
    # Closed forms, per cached position (16-bit numbers): MLA absorbed does h (2 (d_c + d_rope) + 2 d_c) FLOPs
    # and reads d_c + d_rope numbers; MHA with the same h heads of d_k does 4 h d_k FLOPs on 2 h d_k numbers.
    h, d_k, d_c, d_rope, t = 128, 128, 512, 64, 4096  # DeepSeek-V2 (arXiv 2405.04434, section 3.1.2)
    f = latent.decode_attention_flops(t, h, d_c, d_k=d_k, d_rope=d_rope)
    mla = (f["scores"] + f["weighted_sum"]) / latent.cache_bytes(t, 1, d_c, d_rope=d_rope)
    assert mla == 128 * 2176 / 1152 and round(mla) == 242
    mha = M.inference.decode_flops(t, h * d_k, h)  # attention stages depend on h d_k only
    assert (mha["scores"] + mha["weighted_sum"]) / M.inference.kv_cache_bytes(t, 1, h, d_k) == 1
    assert (f["scores"] + f["weighted_sum"]) / (mha["scores"] + mha["weighted_sum"]) == 4.25
    written_out = latent.decode_attention_flops(t, h, d_c, d_k=d_k, d_rope=d_rope, absorbed=False)
    assert written_out["up_project"] == 2 * t * d_c * h * 2 * d_k  # every cached latent, every step


# ---------------------------------------------------------------- bad input names what is wrong

@pytest.mark.parametrize("call, match", [
    (lambda: sliding_window_mask(3, window=0), "window"),
    (lambda: sliding_window_mask(0, window=2), "n = 0"),
    (lambda: sliding_window_mask(3, window=2, align="middle"), "align"),
    (lambda: unmask_empty_rows(np.ones(3, dtype=bool)), r"\(3,\)"),
    (lambda: unmask_empty_rows(np.ones((2, 2))), "boolean"),
    (lambda: rotary(np.ones((2, 4)), [0, 1, 2]), "do not broadcast"),
    (lambda: rotary(np.ones(4), [0]), r"\(4,\)"),
    (lambda: KVCache(np.ones((2, 3, 4)), np.ones((2, 3, 4)), positions=[0, 1]), "positions"),
    (lambda: RollingKVCache(np.ones((2, 3, 4)), np.ones((2, 3, 4)), window=2), "at most 2"),
    (lambda: blockwise.tiles_computed(0, 4, 2), "n = 0"),
    (lambda: blockwise.blockwise_attention(np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)), window=0), "window"),
    (lambda: blockwise.merge_states(), "at least one"),
    (lambda: latent.decode_step(np.ones((2, 5)), latent.init_mla_params(16, 4, 6)), r"\(2, 5\)"),
    (lambda: latent.init_mla_params(16, 4, 0), "d_latent"),
    (lambda: latent.decode_attention_flops(0, 4, 6, d_k=4), "t must be a positive integer, got 0"),
    (lambda: latent.decode_attention_flops(3, 4, 6, d_k=4, d_rope=-2), "d_rope"),
])
def test_bad_input_raises_value_error_naming_the_problem(call, match):
    with pytest.raises(ValueError, match=match):
        call()
