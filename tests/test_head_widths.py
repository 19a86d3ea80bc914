"""Heads of any width: d_k and d_v other than d_model / h, as in T5-11B (1024 wide, 128 heads of 128).

torch.nn.MultiheadAttention requires d_k = d_v = d_model / h, so the reference here is written for the case in
torch: four weight tensors of the general shapes, heads cut with view/transpose, and torch's own
``F.scaled_dot_product_attention`` (which allows d_v != d_k) for the attention itself. Forward passes,
autograd gradients, decoding with a cache, head-parallel shards and the FLOP and parameter counts are all
checked against it in float64.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import mha_lessons as M
from mha_lessons.grads import mha_backward
from mha_lessons.inference import decode_step
from mha_lessons.parallel import simulate_head_parallel

# (d_model, h, d_k, d_v): wider heads than d_model / h, narrower, values unlike keys, one head
SHAPES = [(8, 2, 6, 3), (12, 4, 2, 5), (6, 3, 4, 4), (5, 1, 7, 2), (16, 8, 4, 4)]


def random_wide_params(rng, d_model, h, d_k, d_v):
    """Random weights and non-zero biases of the general shapes (a zero bias would hide a dropped one)."""
    def draw(*shape):
        return rng.normal(scale=0.5, size=shape)

    return M.MHAParams(h, draw(d_model, h * d_k), draw(d_model, h * d_k), draw(d_model, h * d_v),
                       draw(h * d_v, d_model), draw(h * d_k), draw(h * d_k), draw(h * d_v), draw(d_model))


def torch_layer(x_q, x_k, x_v, p, mask=None, fused=True):
    """The layer written directly in torch for any head widths; returns y and the parameter tensors.

    ``fused=False`` writes the attention as its two matrix products, which torch's FLOP counter sees
    (its CPU kernel for ``F.scaled_dot_product_attention`` may be a fused one that the counter does not).
    """
    h = p.num_heads
    t = {name: torch.tensor(a, requires_grad=True) for name, a in p.arrays().items()}

    def heads(x, w, b):
        y = x @ w + b  # (B, n, h d)
        B, n, width = y.shape
        return y.view(B, n, h, width // h).transpose(1, 2)  # (B, h, n, d)

    q, k, v = heads(x_q, t["w_q"], t["b_q"]), heads(x_k, t["w_k"], t["b_k"]), heads(x_v, t["w_v"], t["b_v"])
    attn_mask = None if mask is None else torch.from_numpy(mask)[:, None]  # (B, n, m) -> (B, 1, n, m)
    if fused:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, h, n, d_v)
    else:
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5  # (B, h, n, m)
        out = torch.softmax(scores, dim=-1) @ v  # (B, h, n, d_v)
    B, _, n, d_v = out.shape
    y = out.transpose(1, 2).reshape(B, n, h * d_v) @ t["w_o"] + t["b_o"]
    return y, t


@pytest.mark.parametrize("d_model, h, d_k, d_v", SHAPES)
def test_forward_and_gradients_equal_a_torch_layer_written_for_the_case(rng, d_model, h, d_k, d_v):
    p = random_wide_params(rng, d_model, h, d_k, d_v)
    assert (p.d_k, p.d_v) == (d_k, d_v)
    B, n, m = 2, 4, 5
    x_q, x_kv = rng.normal(size=(B, n, d_model)), rng.normal(size=(B, m, d_model))
    mask = rng.random((B, n, m)) < 0.7
    mask[..., 0] = True
    y, w = M.multihead_attention(x_q, x_kv, x_kv, p, mask)
    assert y.shape == (B, n, d_model) and w.shape == (B, h, n, m)
    tq, tkv = torch.tensor(x_q, requires_grad=True), torch.tensor(x_kv, requires_grad=True)
    y_ref, t = torch_layer(tq, tkv, tkv, p, mask)
    np.testing.assert_allclose(y, y_ref.detach().numpy(), rtol=1e-12, atol=1e-12)

    d_y = rng.normal(size=y.shape)
    y_ref.backward(torch.from_numpy(d_y))
    dx_q, dx_k, dx_v, dp = mha_backward(x_q, x_kv, x_kv, p, d_y, mask)
    np.testing.assert_allclose(dx_q, tq.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx_k + dx_v, tkv.grad.numpy(), rtol=1e-10, atol=1e-12)
    for name, grad in dp.arrays().items():
        np.testing.assert_allclose(grad, t[name].grad.numpy(), rtol=1e-10, atol=1e-11, err_msg=name)


def test_init_params_gives_the_general_shapes_and_torchs_bounds():
    p = M.init_params(12, 4, d_k=5, d_v=2, seed=3)
    assert p.w_q.shape == p.w_k.shape == (12, 20) and p.w_v.shape == (12, 8) and p.w_o.shape == (8, 12)
    assert p.b_q.shape == (20,) and p.b_v.shape == (8,) and p.b_o.shape == (12,)
    # Xavier-uniform for the fused input projection of (h(2 d_k + d_v), d_model), 1/sqrt(fan_in) for W_O
    assert np.abs(p.w_q).max() <= np.sqrt(6 / (12 + 4 * (2 * 5 + 2)))
    assert np.abs(p.w_o).max() <= 1 / np.sqrt(4 * 2)
    default = M.init_params(12, 4, seed=3)
    assert np.array_equal(default.w_q, M.init_params(12, 4, d_k=3, d_v=3, seed=3).w_q)  # d_model / h given explicitly


def test_decoding_with_a_cache_equals_the_causal_layer_for_wide_heads(rng):
    p = random_wide_params(rng, 8, 2, 6, 3)
    x = rng.normal(size=(3, 7, 8))
    full, _ = M.multihead_attention(x, x, x, p, M.causal_mask(7))
    y_prompt, cache = decode_step(x[:, :4], p)
    steps = [y_prompt]
    for i in range(4, 7):
        y_i, cache = decode_step(x[:, i:i + 1], p, cache)
        steps.append(y_i)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-12, atol=1e-12)
    assert cache.k.shape == (3, 2, 7, 6) and cache.v.shape == (3, 2, 7, 3)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_shards_of_wide_heads_sum_to_the_layer(rng, workers):
    p = random_wide_params(rng, 12, 4, 2, 5)
    x = rng.normal(size=(2, 3, 12))
    y, partials = simulate_head_parallel(x, x, x, p, workers)
    np.testing.assert_allclose(y, M.multihead_attention(x, x, x, p)[0], rtol=1e-12, atol=1e-12)
    assert partials.shape == (workers, 2, 3, 12)


@pytest.mark.parametrize("d_model, h, d_k, d_v", SHAPES)
def test_counts_of_wide_heads_equal_torchs_counter_and_the_arrays(rng, d_model, h, d_k, d_v):
    p = M.init_params(d_model, h, d_k=d_k, d_v=d_v)
    assert M.complexity.param_count(d_model, h, d_k=d_k, d_v=d_v) == sum(a.size for a in p.arrays().values())
    B, n, m = 2, 3, 5
    x_q, x_kv = torch.randn(B, n, d_model, dtype=torch.float64), torch.randn(B, m, d_model, dtype=torch.float64)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        torch_layer(x_q, x_kv, x_kv, p, fused=False)
    # torch's counter sees the four projections and the attention's two products (scores, weighted sum)
    assert M.complexity.mha_flops(n, d_model, h, m, batch=B, d_k=d_k, d_v=d_v)["matmul"] == counter.get_total_flops()


def test_the_torch_bridge_refuses_widths_that_torchs_layer_cannot_hold():
    with pytest.raises(ValueError, match=r"needs d_k = d_v = d_model / h"):
        M.params_to_torch(M.init_params(8, 2, d_k=3, d_v=4))
