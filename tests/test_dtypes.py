"""Floating types: what goes in comes out (no silent upcast), low precision stays accurate and finite,
integers and booleans become float64 as ``_checks.as_float_array`` documents. bfloat16 is ``ml_dtypes``'
(numpy has none), taken wherever float16 is.

Tolerances for the low-precision comparisons follow from the unit round-off u of the type
(np.finfo(dtype).eps): a sum of T terms of size at most S is off by at most about T u S, and a score
error δ changes a softmax weight by δ relatively (Higham, 2002, *Accuracy and Stability of Numerical
Algorithms*, ch. 3). The reference is torch in float64 on the very same (rounded) inputs, so the
comparison measures only the arithmetic of the lower precision.
"""

import math

import ml_dtypes
import numpy as np
import pytest
import torch

import mha_lessons as M
from common import same_but_for_rounding

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.float16, BF16, np.float32, np.float64]


def inputs(rng, dtype, *shapes, scale=1.0):
    return [(rng.normal(size=s) * scale).astype(dtype) for s in shapes]


# ---------------------------------------------------------------- each float type comes out as it went in

@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_attention_keeps_the_floating_type(rng, dtype):
    q, k, v = inputs(rng, dtype, (2, 3, 4), (2, 5, 4), (2, 5, 6))
    assert M.softmax(q).dtype == dtype
    assert M.softmax(q, axis=0).dtype == dtype
    for mask in (None, rng.random((3, 5)) < 0.5):
        out, w = M.scaled_dot_product_attention(q, k, v, mask)
        assert out.dtype == dtype and w.dtype == dtype, mask
    assert M.split_heads(q, 2).dtype == dtype and M.combine_heads(M.split_heads(q, 2)).dtype == dtype


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_the_layer_keeps_the_floating_type(rng, dtype):
    params = M.init_params(8, 2, dtype=dtype, seed=0)
    assert all(a.dtype == dtype for a in params.arrays().values())
    x_q, x_k = inputs(rng, dtype, (2, 3, 8), (2, 4, 8))
    y, w = M.multihead_attention(x_q, x_k, x_k, params, mask=rng.random((3, 4)) < 0.7)
    assert y.dtype == dtype and w.dtype == dtype
    rebuilt = M.MHAParams(2, *(a for a in params.arrays().values()))  # arrays handed in keep their type
    assert all(a.dtype == dtype for a in rebuilt.arrays().values())


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_the_torch_bridge_keeps_the_floating_type(dtype):
    params = M.init_params(8, 2, dtype=dtype, seed=0)
    module = M.params_to_torch(params)
    assert module.in_proj_weight.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    assert all(a.dtype == dtype for a in M.params_from_torch(module).arrays().values())


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_gradients_keep_the_floating_type(rng, dtype):
    from mha_lessons.grads import mha_backward, sdpa_backward, softmax_backward
    from mha_lessons.scaling import softmax_jacobian
    from mha_lessons.stats import entropy

    q, k, v, d_out = inputs(rng, dtype, (3, 4), (5, 4), (5, 2), (3, 2))
    w = M.softmax(q)
    assert softmax_backward(w, q).dtype == dtype
    assert all(g.dtype == dtype for g in sdpa_backward(q, k, v, d_out))
    params = M.init_params(4, 2, dtype=dtype)
    *dx, dp = mha_backward(q, k, k, params, q)
    assert all(g.dtype == dtype for g in dx) and all(g.dtype == dtype for g in dp.arrays().values())
    assert softmax_jacobian(q).dtype == dtype and entropy(w).dtype == dtype


def test_mixed_types_give_numpys_common_type(rng):
    # no function downcasts: float32 with float64 gives float64, as numpy's own arithmetic does
    q32, k64, v16 = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    out, w = M.scaled_dot_product_attention(q32, k64, v16.astype(np.float16))
    assert out.dtype == np.float64 and w.dtype == np.float64
    x32 = rng.normal(size=(3, 8)).astype(np.float32)
    y, _ = M.multihead_attention(x32, x32, x32, M.init_params(8, 2, dtype=np.float64))
    assert y.dtype == np.float64
    y, _ = M.multihead_attention(x32.astype(np.float64), x32, x32, M.init_params(8, 2, dtype=np.float32))
    assert y.dtype == np.float64


# ---------------------------------------------------------------- low precision is still accurate

def torch_reference(q, k, v):
    t = [torch.from_numpy(a.astype(np.float64)) for a in (q, k, v)]
    scores = t[0] @ t[1].transpose(-1, -2) / math.sqrt(q.shape[-1])
    return (torch.softmax(scores, -1) @ t[2]).numpy(), torch.softmax(scores, -1).numpy()


@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0])
def test_float32_attention_is_accurate_to_float32_round_off(rng, scale):
    q, k, v = inputs(rng, np.float32, (4, 6, 16), (4, 9, 16), (4, 9, 8), scale=scale)
    out, w = M.scaled_dot_product_attention(q, k, v)
    ref_out, ref_w = torch_reference(q, k, v)
    u = np.finfo(np.float32).eps
    score = float(np.abs(q).max() * np.abs(k).max() * math.sqrt(16))  # bounds |q·k| / √d_k
    terms = 16 + 9  # a score adds d_k products, an output m weighted values
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=4 * terms * u * (1 + score))
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=4 * terms * u * (1 + score) * np.abs(v).max())
    # and float32 round-off is not float64's: the comparison would notice a silent upcast to float64
    assert np.abs(out - ref_out).max() > 1e3 * np.finfo(np.float64).eps * np.abs(ref_out).max()


def test_float32_layer_is_accurate_to_float32_round_off(rng):
    params64 = M.init_params(16, 4, seed=2)
    params64.b_q += rng.normal(size=16)  # non-zero biases take part in the comparison
    params32 = M.MHAParams(4, *(a.astype(np.float32) for a in params64.arrays().values()))
    x = rng.normal(size=(3, 7, 16)).astype(np.float32)
    y32, _ = M.multihead_attention(x, x, x, params32)
    module = M.params_to_torch(M.MHAParams(4, *(a.astype(np.float64) for a in params32.arrays().values())))
    t = torch.from_numpy(x.astype(np.float64))
    ref = module(t, t, t)[0].detach().numpy()
    # A score passes through d_model + d_k rounded terms, each off by u relative to the largest score S, and
    # moves its weight by that much relatively; the output adds m values and d_model columns of W_O more.
    u, d_model, d_k, m = np.finfo(np.float32).eps, 16, 4, 7
    p = params64
    q, k, v = (x.astype(np.float64) @ w + b for w, b in ((p.w_q, p.b_q), (p.w_k, p.b_k), (p.w_v, p.b_v)))
    score = np.abs(q).max() * np.abs(k).max() * math.sqrt(d_k)  # bounds |q_i · k_j| / √d_k
    y_size = np.abs(v).max() * d_model * np.abs(p.w_o).max() + np.abs(p.b_o).max()  # bounds |y|
    np.testing.assert_allclose(y32, ref, rtol=0, atol=4 * (3 * d_model + d_k + m) * u * (1 + score) * y_size)
    assert np.abs(y32 - ref).max() > 1e3 * np.finfo(np.float64).eps * np.abs(ref).max()  # float32 really was used


# ---------------------------------------------------------------- float16: huge logits, finite softmax

FP16_MAX = float(np.finfo(np.float16).max)  # 65504


@pytest.mark.parametrize(
    "row",
    [
        [FP16_MAX, -FP16_MAX, 60000.0],  # the difference -65504 - 65504 overflows float16 to -inf: exp gives 0
        [FP16_MAX, FP16_MAX, FP16_MAX],
        [-FP16_MAX, -FP16_MAX, -60000.0],
        [30000.0, 29984.0, 29952.0],  # neighbours 16 and 48 apart: e^-16, e^-48
        [11.0, 12.0, -np.inf],  # exp(12) alone would be 162755 > 65504
        [-np.inf, -np.inf, -np.inf],
    ],
)
def test_float16_softmax_of_huge_logits_is_finite_and_right(row):
    x = np.array([row, row[::-1]], dtype=np.float16)
    with np.errstate(over="ignore"):  # the first row's overflow to -inf is the correct result
        p = M.softmax(x)
    assert p.dtype == np.float16 and np.all(np.isfinite(p))
    ref = torch.softmax(torch.from_numpy(x.astype(np.float64)), dim=-1).nan_to_num(0.0).numpy()
    # exponents are exact or off by u |x - max| / 2; exp(-t) t ≤ 1/e bounds what that does to a weight;
    # the sum and the division add m + 1 roundings of u / 2
    m, u = x.shape[-1], float(np.finfo(np.float16).eps)
    np.testing.assert_allclose(p.astype(np.float64), ref, rtol=0, atol=(m + 2) * u)


def test_float16_attention_with_scores_beyond_exp_range_is_finite(rng):
    q, k, v = inputs(rng, np.float16, (2, 4, 8), (2, 6, 8), (2, 6, 3), scale=5.0)  # scores of order 50
    out, w = M.scaled_dot_product_attention(q, k, v, mask=rng.random((4, 6)) < 0.7)
    assert out.dtype == np.float16 and w.dtype == np.float16
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(w))
    sums = w.astype(np.float64).sum(-1)
    live = sums > 0  # a fully masked row sums to 0
    np.testing.assert_allclose(sums[live], 1.0, rtol=0, atol=(6 + 2) * float(np.finfo(np.float16).eps))


# ---------------------------------------------------------------- integers and booleans become float64

@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.bool_])
def test_integer_and_boolean_input_becomes_float64(rng, dtype):
    x = (rng.integers(0, 3, size=(2, 3, 4)) > 0) if dtype is np.bool_ else rng.integers(0, 5, size=(2, 3, 4))
    x = x.astype(dtype)
    as_float = x.astype(np.float64)
    for ours, expected in [
        (M.softmax(x), M.softmax(as_float)),
        (M.scaled_dot_product_attention(x, x, x)[0], M.scaled_dot_product_attention(as_float, as_float, as_float)[0]),
    ]:
        assert ours.dtype == np.float64
        same_but_for_rounding(ours, expected)
    params = M.init_params(4, 2)
    y, w = M.multihead_attention(x, x, x, params)
    assert y.dtype == np.float64 and w.dtype == np.float64
    same_but_for_rounding(y, M.multihead_attention(as_float, as_float, as_float, params)[0])
    assert M.softmax([1, 2, 3]).dtype == np.float64  # a plain list of ints too


def test_integer_parameters_become_float64():
    eye = np.eye(4, dtype=np.int64)
    params = M.MHAParams(2, eye, eye, eye, eye, b_o=np.zeros(4, dtype=np.int32))
    assert all(a.dtype == np.float64 for a in params.arrays().values())


def test_layout_functions_keep_any_type():
    # split_heads and combine_heads only move entries: they neither need nor make floats
    for x in (np.arange(24).reshape(3, 8), np.arange(24).reshape(3, 8) % 2 == 0):
        heads = M.split_heads(x, 4)
        assert heads.dtype == x.dtype and M.combine_heads(heads).dtype == x.dtype


def test_masks_are_boolean():
    assert M.causal_mask(3).dtype == np.bool_ and M.causal_mask(2, 5).dtype == np.bool_
    assert M.padding_mask(np.array([1, 3], dtype=np.int32), 3).dtype == np.bool_


# ---------------------------------------------------------------- float16 is computed in float32, as libraries do

def sdpa16_all_ways(q, k, v, block_size, **kw):
    """float16 attention by every function that takes it: the plain pass, its weights, the block-wise pass."""
    from mha_lessons.blockwise import blockwise_attention

    out, w = M.scaled_dot_product_attention(q, k, v, **kw)
    return {"plain": out, "block-wise": blockwise_attention(q, k, v, block_size=block_size, **kw)}, w


def torch_sdpa(q, k, v, dtype=torch.float64):
    import torch.nn.functional as F

    t = [torch.from_numpy(a).to(dtype) for a in (q, k, v)]
    return F.scaled_dot_product_attention(*t).numpy()


@pytest.mark.parametrize("value, d_k", [(256.0, 80), (4096.0, 128), (FP16_MAX, 64)])
def test_float16_scores_beyond_its_range_give_what_torch_gives(value, d_k):
    # The case first: q = k = v = 256, d_k = 80 makes every score 256 · 256 · 80 / √80 ≈ 5.9e5,
    # beyond float16's 65504; then larger values and widths up to the largest float16.
    x = np.full((1, 32, 23, d_k), value, dtype=np.float16)
    score = value * value * d_k / math.sqrt(d_k)
    assert score > FP16_MAX  # the float16 score itself would be infinite
    with np.errstate(over="raise", invalid="raise"):  # no overflow, no invalid operation anywhere
        outs, w = sdpa16_all_ways(x, x, x, block_size=8)
    ref = torch_sdpa(x, x, x, torch.float16)  # torch's own float16 attention
    # Every value is `value`, so the output is `value` times the sum of the weights: 1 within float32 rounding,
    # 23 u32 ≈ 3e-6 relatively, far inside half a float16 spacing (2^-11 ≈ 5e-4), so exactly `value` on any
    # machine, here and in torch (which also works in float32).
    assert np.all(ref == np.float16(value))
    for name, out in outs.items():
        assert out.dtype == np.float16, name
        np.testing.assert_array_equal(out, ref, err_msg=name)
    # The weights are NOT uniform everywhere: the 23 scores are equal in exact arithmetic, but at 5.9e5 and beyond
    # float32 spaces them 1/16 or more apart, and a BLAS sums the d_k products in an order of its choosing, which
    # can differ from one position to the next; the softmax turns a few ulps of the score into weights of 0.041
    # against 0.049 (or 0 against 1/7 at 4096). What holds on every machine: finite, non-negative weights whose
    # float32 sum is 1 within 23 u32, each then rounded to float16 (half a float16 ulp, relatively, or half the
    # smallest subnormal spacing), so the rows sum to 1 within 23 u32 + u16 / 2 + 23 · 2^-25.
    assert w.dtype == np.float16 and w.shape == (1, 32, 23, 23)
    assert np.all(np.isfinite(w)) and np.all(w >= 0)
    u16, u32 = float(np.finfo(np.float16).eps), float(np.finfo(np.float32).eps)
    np.testing.assert_allclose(w.astype(np.float64).sum(-1), 1.0, rtol=0, atol=23 * u32 + u16 / 2 + 23 * 2.0**-25)
    kv = x[:, :8]  # grouped-query attention: 8 key/value heads shared by the 32 query heads
    with np.errstate(over="raise", invalid="raise"):
        out_gqa, _ = M.inference.grouped_query_attention(x, kv, kv)
    assert out_gqa.dtype == np.float16
    np.testing.assert_array_equal(out_gqa, ref)


@pytest.mark.parametrize("m", [66_000, 200_000])
def test_float16_softmax_over_more_keys_than_float16_can_count(m):
    # The second case: a float16 sum of m ≥ 65,520 ones is infinite. Weights 1/m, output 1.
    q = np.zeros((1, 2, 4, 16), np.float16)
    k = np.zeros((1, 2, m, 16), np.float16)
    v = np.ones((1, 2, m, 16), np.float16)
    with np.errstate(over="raise", invalid="raise"):  # (1/m is a subnormal float16: underflow is expected)
        outs, w = sdpa16_all_ways(q, k, v, block_size=4096)
        p = M.softmax(np.zeros((4, m), np.float16))
        p_online = M.blockwise.online_softmax(np.zeros((4, m), np.float16), block_size=4096)
    # The output is a float32 sum of m weights 1/m: its order is the BLAS's choice, and summed one after the
    # other it comes to 0.99944 (m = 66,000) or 1.0012 (m = 200,000), a float16 ulp or two from 1. What every
    # machine guarantees is the bound of a sum of m positive terms, (m + 1) u32 relatively, plus the final
    # rounding to float16 (u16 / 2); a float16 sum would be inf.
    u16, u32 = float(np.finfo(np.float16).eps), float(np.finfo(np.float32).eps)
    bound = (m + 1) * u32 + u16 / 2
    ref = torch_sdpa(q, k, v, torch.float16)  # torch's float16 agrees, within the same bound
    for name, out in (*outs.items(), ("torch", ref)):
        assert out.dtype == np.float16, name
        np.testing.assert_allclose(out.astype(np.float64), 1.0, rtol=0, atol=bound, err_msg=name)
    # The weights are exact everywhere: exp(0) = 1, and a float32 sum of m ones is m exactly (m < 2^24)
    one_over_m = np.float16(1 / m)
    assert one_over_m > 0
    for name, weights in (("weights", w), ("softmax", p), ("online softmax", p_online)):
        assert weights.dtype == np.float16, name
        np.testing.assert_array_equal(weights, one_over_m, err_msg=name)


def test_online_softmax_keeps_its_running_sum_in_float32():
    x = np.zeros((2, 70_000), np.float16)
    *_, (stop, s_max, z) = M.blockwise.online_softmax_steps(x, block_size=10_000)
    assert stop == 70_000 and s_max.dtype == z.dtype == np.float32
    np.testing.assert_array_equal(z, 70_000.0)  # float16 would hold inf


@pytest.mark.parametrize("half", [np.float16, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_half_precision_is_the_float32_computation_rounded_once(rng, scale, half):
    # What the package promises for float16 and bfloat16: every product and sum in float32, the result rounded
    # to the 16-bit type. So the 16-bit answer is exactly the float32 answer on the same 16-bit numbers, rounded.
    from mha_lessons.blockwise import blockwise_attention_backward, blockwise_attention_with_lse
    from mha_lessons.grads import mha_backward, sdpa_backward, softmax_backward

    q, k, v, d_out = inputs(rng, half, (2, 2, 5, 16), (2, 2, 300, 16), (2, 2, 300, 8), (2, 2, 5, 8),
                            scale=scale)
    bias, layer_bias = inputs(rng, half, (5, 300), (2, 40, 40))  # the layer's bias: one per head
    mask = rng.random((5, 300)) < 0.8
    up = [a.astype(np.float32) for a in (q, k, v, d_out, bias)]

    info = ml_dtypes.finfo(half)  # float16 or bfloat16: its spacing and its smallest subnormal
    u16, u32 = float(info.eps), float(np.finfo(np.float32).eps)
    tiniest = float(info.smallest_subnormal)

    def same(ours16, ours32, name):
        # Rounded once: within half a 16-bit ulp of the float32 answer (relatively, or half the smallest
        # subnormal spacing: 2^-25 for float16). Not bit for bit: the two float32 runs sum through a BLAS, whose
        # order may differ between them (by a few u32 of the largest entry: 16 u32 of slack); a computation in
        # the 16-bit type itself would be off by its ulps of the terms, some hundreds of times more.
        assert ours16.dtype == half, name
        x32 = ours32.astype(np.float64)
        np.testing.assert_array_equal(np.isfinite(ours16), np.isfinite(x32), err_msg=name)
        finite = np.isfinite(x32)
        gap = np.abs(ours16.astype(np.float64) - x32)
        allowed = u16 / 2 * np.abs(x32) + tiniest / 2 + 16 * u32 * (np.abs(x32[finite]).max() if finite.any() else 0)
        assert np.all(gap[finite] <= allowed[finite]), (name, float(np.max(gap - allowed)))

    with np.errstate(over="raise", invalid="raise"):
        for i, (a, b) in enumerate(zip(M.scaled_dot_product_attention(q, k, v, mask, bias),
                                       M.scaled_dot_product_attention(*up[:3], mask, up[4]))):
            same(a, b, f"attention {i}")
        same(M.softmax(q), M.softmax(up[0]), "softmax")
        w = M.softmax(q)
        same(softmax_backward(w, q), softmax_backward(w.astype(np.float32), up[0]), "softmax backward")
        for i, (a, b) in enumerate(zip(sdpa_backward(q, k, v, d_out, mask, bias, bias_grad=True),
                                       sdpa_backward(*up[:4], mask, up[4], bias_grad=True))):
            same(a, b, f"attention backward {i}")
        out16, lse16 = blockwise_attention_with_lse(q, k, v, mask, block_size=64, bias=bias)
        out32, lse32 = blockwise_attention_with_lse(*up[:3], mask, block_size=64, bias=up[4])
        same(out16, out32, "block-wise")
        assert lse16.dtype == np.float32
        same_but_for_rounding(lse16, lse32)
        for i, (a, b) in enumerate(zip(
                blockwise_attention_backward(q, k, v, out16, lse16, d_out, mask, block_size=64, bias=bias),
                blockwise_attention_backward(*up[:3], out16.astype(np.float32), lse32, up[3], mask, block_size=64,
                                             bias=up[4]))):
            same(a, b, f"block-wise backward {i}")
        params = M.init_params(16, 2, dtype=half, seed=1)
        x = inputs(rng, half, (3, 40, 16), scale=scale)[0]
        params32 = params.astype(np.float32)
        x32, d_y, layer_bias32 = x.astype(np.float32), np.ones_like(x), layer_bias.astype(np.float32)
        for i, (a, b) in enumerate(zip(M.multihead_attention(x, x, x, params, bias=layer_bias),
                                       M.multihead_attention(x32, x32, x32, params32, bias=layer_bias32))):
            same(a, b, f"layer {i}")
        *dx16, dp16, db16 = mha_backward(x, x, x, params, d_y, bias=layer_bias, bias_grad=True)
        *dx32, dp32, db32 = mha_backward(x32, x32, x32, params32, d_y.astype(np.float32), bias=layer_bias32,
                                         bias_grad=True)
        for i, (a, b) in enumerate(zip(dx16 + [db16], dx32 + [db32])):
            same(a, b, f"layer backward {i}")
        for name, g in dp16.arrays().items():
            same(g, getattr(dp32, name), f"layer backward d{name}")


def test_float16_attention_at_large_scores_is_as_accurate_as_float32_allows(rng):
    # Against torch in float64 on the same float16 numbers: the float32 arithmetic's error (scores of
    # size S carry about d_k u32 S of it) plus one float16 rounding of the result (u16 / 2 relative).
    q, k, v = inputs(rng, np.float16, (2, 3, 6, 32), (2, 3, 2000, 32), (2, 3, 2000, 8), scale=30.0)
    out, w = M.scaled_dot_product_attention(q, k, v)
    ref_out, ref_w = torch_reference(q, k, v)
    u32, u16 = float(np.finfo(np.float32).eps), float(np.finfo(np.float16).eps)
    score = float(np.abs(q.astype(np.float64)).max() * np.abs(k.astype(np.float64)).max() * math.sqrt(32))
    assert score > FP16_MAX
    terms = 32 + 2000
    v_max = float(np.abs(v).max())
    np.testing.assert_allclose(w.astype(np.float64), ref_w, rtol=u16, atol=4 * 32 * u32 * score + u16 / 2 * 2 ** -14)
    np.testing.assert_allclose(out.astype(np.float64), ref_out, rtol=u16,
                               atol=(4 * (32 * score + terms) * u32 + u16) * v_max)


def test_float16_projections_accumulate_in_float32():
    # +8000 on 32 features and -8000 on 32 others, every weight 0.5: the exact projections are 0, but a float16
    # running sum would pass 32 · 8000 · 0.5 = 128000 > 65504 on the way. Decoding (which projects with the
    # layer's own steps outside multihead_attention) and the output projection must give exactly 0. (numpy's
    # float16 matmul itself sums in float32, so this pins the behaviour rather than catching a present bug.)
    half = np.full((64, 64), 0.5, np.float16)
    params = M.MHAParams(4, half, half, half, half)
    x = np.concatenate([np.full(32, 8000.0), np.full(32, -8000.0)]).astype(np.float16)[None]  # (s, d_model) = (1, 64)
    with np.errstate(over="raise", invalid="raise"):
        y, cache = M.inference.decode_step(x, params)
        mixed = M.multihead.mix_heads(x, params)
    assert y.dtype == cache.k.dtype == cache.v.dtype == mixed.dtype == np.float16
    assert np.all(y == 0) and np.all(cache.k == 0) and np.all(cache.v == 0) and np.all(mixed == 0)


# ---------------------------------------------------------------- bfloat16 against torch's bfloat16


def test_bfloat16_attention_and_gradients_agree_with_torchs_bfloat16(rng):
    # torch's bfloat16 attention on the CPU also multiplies and adds in float32 and rounds the result once. Two
    # float32 computations of one number differ by float32 round-off (the bound of the float32 tests above:
    # terms · u32 · score size); rounded to bfloat16 they can then land one bfloat16 step apart, 2**-7 of the
    # value at most (bfloat16 keeps 8 significant bits). Against float64 on the same numbers, ours is off by the
    # one rounding, u/2 = 2**-9 relative, plus float32's round-off: a second rounding to bfloat16 on the way
    # (of the scores, say) would add errors of 2**-9 times the score size and exceed it at these sizes.
    from mha_lessons.grads import sdpa_backward

    q, k, v, d_out = inputs(rng, BF16, (3, 6, 32), (3, 200, 32), (3, 200, 16), (3, 6, 16), scale=2.0)
    out, w = M.scaled_dot_product_attention(q, k, v)
    grads = sdpa_backward(q, k, v, d_out)
    assert out.dtype == w.dtype == BF16 and all(g.dtype == BF16 for g in grads)
    t16 = [torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16).requires_grad_() for a in (q, k, v)]
    t_out = torch.nn.functional.scaled_dot_product_attention(*t16)
    t_out.backward(torch.from_numpy(d_out.astype(np.float32)).to(torch.bfloat16))
    t64 = [torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*t64)
    ref.backward(torch.from_numpy(d_out.astype(np.float64)))
    u32 = float(np.finfo(np.float32).eps)
    score = float(np.abs(q.astype(np.float64)).max() * np.abs(k.astype(np.float64)).max() * math.sqrt(32))
    f32 = 4 * (32 + 200) * u32 * (1 + score)  # float32's round-off, relative to the size of what is compared
    pairs = [("out", out, t_out, ref)] + [(f"d{name}", g, t.grad, r.grad)
                                          for name, g, t, r in zip("qkv", grads, t16, t64)]
    for name, ours, theirs, exact in pairs:
        ours, theirs, exact = ours.astype(np.float64), theirs.detach().double().numpy(), exact.detach().numpy()
        size = np.abs(exact).max()
        np.testing.assert_allclose(ours, theirs, rtol=2**-7, atol=f32 * size, err_msg=name)
        np.testing.assert_allclose(ours, exact, rtol=2**-9, atol=f32 * size, err_msg=name)
    # the weights against torch's softmax of the same scores in float32, rounded to bfloat16 once
    scores = torch.from_numpy((q.astype(np.float32) @ np.swapaxes(k.astype(np.float32), -1, -2)) / math.sqrt(32))
    t_w = torch.softmax(scores, dim=-1).to(torch.bfloat16).double().numpy()
    np.testing.assert_allclose(w.astype(np.float64), t_w, rtol=2**-7, atol=f32)


def test_float16_and_bfloat16_together_are_refused_by_name(rng):
    q, k, v = inputs(rng, np.float16, (3, 8), (4, 8), (4, 8))
    with pytest.raises(TypeError, match="mix float16 and bfloat16"):
        M.scaled_dot_product_attention(q, k.astype(BF16), v)
    out, _ = M.scaled_dot_product_attention(q, k.astype(BF16).astype(np.float32), v)  # float32 and float16:
    assert out.dtype == np.float32  # numpy's common type, as for any other pair
