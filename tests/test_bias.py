"""The additive score bias (``bias=``), checked against PyTorch's float ``attn_mask``, torch autograd and
finite differences, in float64: the plain pass, the block-wise pass, the layer and their backward passes."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha_lessons as M
from mha_lessons.blockwise import blockwise_attention, blockwise_attention_backward, blockwise_attention_with_lse
from mha_lessons.grads import gradcheck, grads_from_torch, mha_backward, sdpa_backward

from common import FD_ATOL_REL, FD_RTOL, close, random_params, same_but_for_rounding


def tensor(a, grad=False):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


def with_minus_inf(rng, bias, fraction=0.2):
    """Some entries set to -inf (never attend), keeping at least one finite entry in every row."""
    bias = bias.copy()
    off = rng.random(bias.shape) < fraction
    off[..., 0] = False
    bias[off] = -np.inf
    return bias


# bias shapes that broadcast to the scores' (B, h, n, m) = (2, 3, 4, 5)
BIAS_SHAPES = [(5,), (4, 5), (4, 1), (3, 4, 5), (2, 1, 4, 5), (2, 3, 4, 5), (1, 3, 1, 5)]


@pytest.mark.parametrize("shape", BIAS_SHAPES, ids=str)
def test_attention_bias_is_torchs_float_attn_mask(rng, shape):
    q, k, v = rng.normal(size=(2, 3, 4, 6)), rng.normal(size=(2, 3, 5, 6)), rng.normal(size=(2, 3, 5, 7))
    bias = with_minus_inf(rng, rng.normal(scale=2.0, size=shape))
    out, w = M.scaled_dot_product_attention(q, k, v, bias=bias)
    attn_mask = tensor(np.broadcast_to(bias, bias.shape[:-2] + (4, 5)))  # torch wants the query axis at least
    ref = F.scaled_dot_product_attention(tensor(q), tensor(k), tensor(v), attn_mask=attn_mask).numpy()
    close(out, ref)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(6) + bias  # the definition, written out
    close(w, torch.softmax(tensor(scores), dim=-1).numpy())
    assert np.all(w[np.broadcast_to(np.isneginf(bias), w.shape)] == 0)  # -inf: weight exactly 0


def test_a_bias_of_zero_and_minus_inf_is_a_boolean_mask(rng):
    q, k, v = rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 5, 6)), rng.normal(size=(2, 5, 3))
    mask = rng.random((2, 4, 5)) < 0.6
    mask[..., 0] = True
    as_bias = np.where(mask, 0.0, -np.inf)
    for ours, theirs in zip(M.scaled_dot_product_attention(q, k, v, bias=as_bias),
                            M.scaled_dot_product_attention(q, k, v, mask)):
        same_but_for_rounding(ours, theirs)


def test_bias_and_mask_together(rng):
    q, k, v = rng.normal(size=(3, 4, 6)), rng.normal(size=(3, 5, 6)), rng.normal(size=(3, 5, 2))
    mask, bias = rng.random((3, 4, 5)) < 0.7, rng.normal(size=(4, 5))
    mask[:, 2] = False  # query 2 sees nothing: zero weights and output (torch: NaN)
    out, w = M.scaled_dot_product_attention(q, k, v, mask, bias)
    combined = np.where(mask, bias, -np.inf)
    ref = F.scaled_dot_product_attention(tensor(q), tensor(k), tensor(v), attn_mask=tensor(combined)).numpy()
    live = mask.any(-1)
    close(out[live], ref[live])
    assert np.all(out[~live] == 0) and np.all(w[~live] == 0)


def test_alibi_bias_prefers_near_keys():
    # ALiBi (Press et al., 2022): head i subtracts slope_i · distance; equal scores leave only the bias
    n, h = 6, 2
    slopes = np.array([0.5, 0.25])[:, None, None]
    distance = np.abs(np.arange(n)[:, None] - np.arange(n))  # (n, m)
    bias = -slopes * distance  # (h, n, m)
    x = np.zeros((h, n, 4))
    _, w = M.scaled_dot_product_attention(x, x, x, M.causal_mask(n), bias)
    expected = np.exp(-slopes * distance) * M.causal_mask(n)
    close(w, expected / expected.sum(-1, keepdims=True))
    assert np.all(np.diff(w[:, -1], axis=-1) > 0)  # the last query weighs nearer keys more


@pytest.mark.parametrize("shape", [(4, 5), (2, 1, 4, 5), (3, 4, 5)], ids=str)
def test_attention_backward_with_bias_matches_autograd(rng, shape):
    q, k, v = rng.normal(size=(2, 3, 4, 6)), rng.normal(size=(2, 3, 5, 6)), rng.normal(size=(2, 3, 5, 7))
    bias, d_out = with_minus_inf(rng, rng.normal(size=shape)), rng.normal(size=(2, 3, 4, 7))
    tq, tk, tv, tb = (tensor(a, grad=True) for a in (q, k, v, bias))
    F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tb).backward(torch.from_numpy(d_out))
    dq, dk, dv, db = sdpa_backward(q, k, v, d_out, bias=bias, bias_grad=True)
    for ours, t in zip((dq, dk, dv, db), (tq, tk, tv, tb)):
        assert ours.shape == t.shape
        close(ours, t.grad.numpy())
    assert np.all(db[np.isneginf(bias)] == 0)  # a pair that is never attended gets no gradient
    # without bias_grad the three gradients are the same and nothing else comes back
    without = sdpa_backward(q, k, v, d_out, bias=bias)
    assert len(without) == 3
    for a, b in zip(without, (dq, dk, dv)):
        same_but_for_rounding(a, b)


def test_bias_gradient_by_finite_differences(rng):
    q, k, v = rng.normal(size=(4, 6)), rng.normal(size=(5, 6)), rng.normal(size=(5, 3))
    bias, d_out = rng.normal(size=(4, 5)), rng.normal(size=(4, 3))
    *_, db = sdpa_backward(q, k, v, d_out, bias=bias, bias_grad=True)
    numeric = gradcheck(lambda b: M.scaled_dot_product_attention(q, k, v, bias=b)[0], bias, d_out)
    close(db, numeric, rtol=FD_RTOL, atol_rel=FD_ATOL_REL)
    # no bias: the gradient of a zero bias, shaped like the scores
    *_, d_scores = sdpa_backward(q, k, v, d_out, bias_grad=True)
    close(d_scores, sdpa_backward(q, k, v, d_out, bias=np.zeros((4, 5)), bias_grad=True)[3])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(9, 11), (2, 1, 9, 11), (11,)], ids=str)
def test_blockwise_with_bias_matches_the_plain_pass_and_autograd(rng, shape, causal):
    q, k, v = rng.normal(size=(2, 3, 9, 4)), rng.normal(size=(2, 3, 11, 4)), rng.normal(size=(2, 3, 11, 5))
    bias, d_out = with_minus_inf(rng, rng.normal(size=shape)), rng.normal(size=(2, 3, 9, 5))
    mask = M.causal_mask(9, 11) if causal else None
    kw = dict(block_size=3, query_block=4, causal=causal, bias=bias)
    out, lse = blockwise_attention_with_lse(q, k, v, **kw)
    close(out, M.scaled_dot_product_attention(q, k, v, mask, bias)[0])
    close(blockwise_attention(q, k, v, **kw), out)
    tq, tk, tv = (tensor(a, grad=True) for a in (q, k, v))
    attn_mask = tensor(np.where(mask, bias, -np.inf) if causal else np.broadcast_to(bias, bias.shape[:-2] + (9, 11)))
    F.scaled_dot_product_attention(tq, tk, tv, attn_mask=attn_mask).backward(torch.from_numpy(d_out))
    for ours, t in zip(blockwise_attention_backward(q, k, v, out, lse, d_out, **kw), (tq, tk, tv)):
        close(ours, t.grad.numpy())


# ---------------------------------------------------------------- the layer, against torch.nn.MultiheadAttention

def torch_layer(params, x_q, x_k, x_v, attn_mask, grad=False):
    module = M.params_to_torch(params).double()
    tq, tk, tv, tm = (tensor(a, grad=grad) for a in (x_q, x_k, x_v, attn_mask))
    y, _ = module(tq, tk, tv, attn_mask=tm, need_weights=True, average_attn_weights=False)
    return module, (tq, tk, tv, tm), y


@pytest.mark.parametrize("per", ["every head", "per head", "per sequence and head"])
def test_layer_bias_is_torchs_float_attn_mask(rng, per):
    B, n, m, d_model, h = 2, 4, 6, 8, 2
    params = random_params(rng, d_model, h)
    x_q, x_kv = rng.normal(size=(B, n, d_model)), rng.normal(size=(B, m, d_model))
    shape = {"every head": (n, m), "per head": (h, n, m), "per sequence and head": (B, h, n, m)}[per]
    bias = with_minus_inf(rng, rng.normal(size=shape))
    y, w = M.multihead_attention(x_q, x_kv, x_kv, params, bias=bias)
    # torch's float attn_mask is (n, m) or (B * h, n, m), page b * h + i for sequence b, head i
    attn_mask = bias if bias.ndim == 2 else np.broadcast_to(bias, (B, h, n, m)).reshape(B * h, n, m)
    _, _, y_ref = torch_layer(params, x_q, x_kv, x_kv, attn_mask)
    close(y, y_ref.detach().numpy())
    assert w.shape == (B, h, n, m)


def test_layer_backward_with_bias_matches_autograd(rng):
    B, n, d_model, h = 2, 5, 8, 2
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, n, d_model))
    bias = with_minus_inf(rng, rng.normal(size=(B, h, n, n)))
    d_y = rng.normal(size=(B, n, d_model))
    module, (tq, tk, tv, tm), y = torch_layer(params, x, x, x, bias.reshape(B * h, n, n), grad=True)
    y.backward(torch.from_numpy(d_y))
    dx_q, dx_k, dx_v, dp, db = mha_backward(x, x, x, params, d_y, bias=bias, bias_grad=True)
    for ours, t in zip((dx_q, dx_k, dx_v), (tq, tk, tv)):
        close(ours, t.grad.numpy())
    close(db, tm.grad.numpy().reshape(B, h, n, n))
    theirs = grads_from_torch(module)
    scale = max(np.abs(g).max() for g in theirs.arrays().values())  # the key bias's gradient is 0 up to round-off
    for name, g in dp.arrays().items():
        close(g, getattr(theirs, name), scale=scale)


def test_layer_bias_gradient_by_finite_differences(rng):
    params = random_params(rng, 4, 2)
    x, d_y = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    bias = rng.normal(size=(2, 1, 3))  # one row per head, shared by the queries
    *_, db = mha_backward(x, x, x, params, d_y, bias=bias, bias_grad=True)
    numeric = gradcheck(lambda b: M.multihead_attention(x, x, x, params, bias=b)[0], bias, d_y)
    assert db.shape == bias.shape
    close(db, numeric, rtol=FD_RTOL, atol_rel=FD_ATOL_REL)
