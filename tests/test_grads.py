"""Backward passes, checked three independent ways in float64: torch autograd, finite differences, closed forms."""

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.grads import (combine_heads_backward, gradcheck, grads_from_torch, mha_backward, sdpa_backward,
                               softmax_backward, split_heads_backward)

from common import FD_ATOL_REL, FD_RTOL, close, random_params


def with_param(params, name, value):
    fields = dict(params.arrays(), num_heads=params.num_heads)
    fields[name] = value
    return M.MHAParams(**fields)


def tensor(a, grad=True):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


# ---------------------------------------------------------------- gradcheck itself, on known derivatives

def test_gradcheck_on_functions_with_known_derivatives(rng):
    x = rng.uniform(0.5, 2.0, size=(3, 4))
    d_out = rng.normal(size=(3, 4))
    # a one-sided difference would be off by eps f''/2, relative 1e-6 here: the tolerance 1e-8 catches it
    np.testing.assert_allclose(gradcheck(lambda t: t ** 3, x), 3 * x ** 2, rtol=1e-8)
    close(gradcheck(np.sin, x, d_out), np.cos(x) * d_out, rtol=1e-8, atol_rel=FD_ATOL_REL)
    a = rng.normal(size=(5, 3))
    w = rng.normal(size=(4, 2))
    g = rng.normal(size=(5, 2))
    # L = sum((a @ x @ w) * g): dL/dx = aᵀ g wᵀ, a closed form
    close(gradcheck(lambda t: a @ t @ w, x, g), a.T @ g @ w.T, rtol=1e-8, atol_rel=FD_ATOL_REL)


def test_gradcheck_default_is_the_plain_sum_and_checks_its_input():
    x = np.array([0.3, -1.2])
    np.testing.assert_allclose(gradcheck(np.exp, x), np.exp(x), rtol=1e-8)
    with pytest.raises(ValueError, match=r"d_out has shape \(3,\), but f\(x\) has shape \(2,\)"):
        gradcheck(np.exp, x, d_out=np.ones(3))
    with pytest.raises(ValueError, match="eps must be positive, got 0"):
        gradcheck(np.exp, x, eps=0)


# ---------------------------------------------------------------- softmax

def test_softmax_backward_matches_torch_on_every_axis(rng):
    logits = rng.normal(scale=2.0, size=(2, 3, 5))
    g = rng.normal(size=logits.shape)
    for axis in (0, 1, 2, -1):
        t = tensor(logits)
        torch.softmax(t, dim=axis).backward(torch.from_numpy(g))
        ours = softmax_backward(M.softmax(logits, axis=axis), g, axis=axis)
        close(ours, t.grad.numpy())


def test_softmax_backward_is_the_full_jacobian_product(rng):
    # closed form of the Jacobian: ∂a_j/∂s_k = a_j (δ_jk − a_k), i.e. J = diag(a) − a aᵀ (symmetric)
    a = M.softmax(rng.normal(size=6))
    g = rng.normal(size=6)
    jacobian = np.diag(a) - np.outer(a, a)
    close(softmax_backward(a, g), jacobian.T @ g)
    # dropping the off-diagonal part (a ⊙ g) is a different answer: the test can tell them apart
    assert not np.allclose(a * g, jacobian.T @ g, rtol=1e-3)


def test_softmax_backward_sums_to_zero_and_is_zero_on_an_empty_row(rng):
    a = M.softmax(np.where(np.arange(4) < 2, rng.normal(size=(3, 4)), -np.inf))  # keys 2, 3 masked
    a[1] = 0.0  # a fully masked row
    ds = softmax_backward(a, rng.normal(size=(3, 4)))
    np.testing.assert_array_equal(ds[:, 2:], 0.0)  # masked entries: exactly 0
    np.testing.assert_array_equal(ds[1], 0.0)
    np.testing.assert_allclose(ds.sum(axis=-1), 0.0, atol=1e-15)


# ---------------------------------------------------------------- scaled dot-product attention

def torch_sdpa_grads(q, k, v, g, mask=None):
    """torch autograd through the functional SDPA (its boolean attn_mask also means True = may attend)."""
    t = [tensor(a) for a in (q, k, v)]
    attn_mask = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=attn_mask).backward(torch.from_numpy(g))
    return [x.grad.numpy() for x in t]


@pytest.mark.parametrize(
    "batch, n, m, d_k, d_v, masked",
    [((), 1, 1, 1, 1, False), ((), 4, 4, 8, 8, True), ((2,), 3, 5, 4, 6, True), ((2, 3), 5, 2, 16, 3, False)],
)
def test_sdpa_backward_matches_torch_autograd(rng, batch, n, m, d_k, d_v, masked):
    q, k, v = rng.normal(size=batch + (n, d_k)), rng.normal(size=batch + (m, d_k)), rng.normal(size=batch + (m, d_v))
    g = rng.normal(size=batch + (n, d_v))
    mask = None
    if masked:
        mask = rng.random(batch + (n, m)) < 0.6
        mask[..., 0, :] = False  # query 0 attends to nothing: torch's functional SDPA gives 0, as we do
    ours = sdpa_backward(q, k, v, g, mask)
    for mine, ref in zip(ours, torch_sdpa_grads(q, k, v, g, mask)):
        assert mine.shape == ref.shape
        close(mine, ref)
    if masked:
        np.testing.assert_array_equal(ours[0][..., 0, :], 0.0)  # no gradient reaches an empty query


@pytest.mark.parametrize("shared_batch", [(), (1,)])
def test_sdpa_backward_sums_over_a_shared_key_set(rng, shared_batch):
    # one set of keys and values, (m, d) or (1, m, d), used by every batch element: its gradient sums over the batch
    q = rng.normal(size=(3, 4, 5))
    k, v = rng.normal(size=shared_batch + (6, 5)), rng.normal(size=shared_batch + (6, 2))
    g = rng.normal(size=(3, 4, 2))
    tq, tk, tv = tensor(q), tensor(k), tensor(v)
    torch.nn.functional.scaled_dot_product_attention(tq, tk.expand(3, 6, 5), tv.expand(3, 6, 2)).backward(
        torch.from_numpy(g))
    dq, dk, dv = sdpa_backward(q, k, v, g)
    assert dk.shape == k.shape and dv.shape == v.shape
    for mine, ref in ((dq, tq), (dk, tk), (dv, tv)):
        close(mine, ref.grad.numpy())


def test_sdpa_backward_matches_finite_differences_with_masks(rng):
    q, k, v = rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    g = rng.normal(size=(4, 2))
    mask = M.causal_mask(4, 5)
    mask[2] = False  # a fully masked query
    dq, dk, dv = sdpa_backward(q, k, v, g, mask)
    for name, mine in (("q", dq), ("k", dk), ("v", dv)):
        def f(x, name=name):
            args = {"q": q, "k": k, "v": v, name: x}
            return M.scaled_dot_product_attention(args["q"], args["k"], args["v"], mask)[0]

        numeric = gradcheck(f, {"q": q, "k": k, "v": v}[name], g)
        close(mine, numeric, rtol=FD_RTOL, atol_rel=FD_ATOL_REL)
    np.testing.assert_array_equal(dq[2], 0.0)
    np.testing.assert_array_equal(dk[4], 0.0)  # the last key is masked for every query (causal, m > n)


def test_sdpa_backward_bad_input(rng):
    q, k, v = rng.normal(size=(2, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 5))
    with pytest.raises(ValueError, match=r"d_out has shape \(2, 3\), but the attention output has shape \(2, 5\)"):
        sdpa_backward(q, k, v, np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"d_weights has shape \(3,\), but weights has shape \(4,\)"):
        softmax_backward(np.ones(4) / 4, np.ones(3))


# ---------------------------------------------------------------- heads: pure rearrangements

def test_head_rearrangements_pass_gradients_back(rng):
    x = rng.normal(size=(2, 3, 8))              # (B, n, d_model)
    heads = rng.normal(size=(2, 4, 3, 2))       # (B, h, n, d_k)
    d_heads, d_x = rng.normal(size=(2, 2, 3, 4)), rng.normal(size=(2, 3, 8))
    close(split_heads_backward(d_heads), gradcheck(lambda t: M.split_heads(t, 2), x, d_heads),
          rtol=FD_RTOL, atol_rel=FD_ATOL_REL)
    close(combine_heads_backward(d_x, 4), gradcheck(M.combine_heads, heads, d_x), rtol=FD_RTOL, atol_rel=FD_ATOL_REL)


# ---------------------------------------------------------------- the layer, against torch.nn.MultiheadAttention

def torch_layer_grads(params, x_q, x_k, x_v, g, mask=None):
    """Gradients by torch autograd through nn.MultiheadAttention with our weights copied in."""
    module = M.params_to_torch(params)
    t = [tensor(x) for x in (x_q, x_k, x_v)]
    blocked = None if mask is None else torch.from_numpy(~mask)  # torch's layer: True = may NOT attend
    y, _ = module(*t, attn_mask=blocked, need_weights=False)
    y.backward(torch.from_numpy(g))
    return [x.grad.numpy() for x in t], grads_from_torch(module)


def compare_layer_grads(ours, ref):
    (dx_ref, dparams_ref) = ref
    dx_q, dx_k, dx_v, dparams = ours
    scale = max(np.abs(a).max() for a in dparams_ref.arrays().values())
    for mine, theirs in zip((dx_q, dx_k, dx_v), dx_ref):
        assert mine.shape == theirs.shape
        close(mine, theirs)
    assert dparams.arrays().keys() == dparams_ref.arrays().keys()
    for name, theirs in dparams_ref.arrays().items():
        close(getattr(dparams, name), theirs, scale=scale)


@pytest.mark.parametrize(
    "batch, n, m, d_model, h, masked",
    [((1,), 4, 4, 8, 1, False), ((2,), 3, 5, 8, 2, True), ((2,), 6, 3, 12, 4, True), ((1,), 1, 7, 6, 6, False)],
)
def test_cross_attention_backward_matches_torch(rng, batch, n, m, d_model, h, masked):
    params = random_params(rng, d_model, h)
    x_q, x_k, x_v = (rng.normal(size=batch + (length, d_model)) for length in (n, m, m))  # three distinct inputs
    g = rng.normal(size=batch + (n, d_model))
    mask = None
    if masked:
        mask = rng.random((n, m)) < 0.5
        mask[:, 0] = True  # torch's layer gives NaN for a query with nothing to attend to
    ours = mha_backward(x_q, x_k, x_v, params, g, mask)
    compare_layer_grads(ours, torch_layer_grads(params, x_q, x_k, x_v, g, mask))


@pytest.mark.parametrize("h", [1, 4])
def test_self_attention_gradient_sums_three_paths(rng, h):
    params = random_params(rng, 8, h)
    x = rng.normal(size=(2, 5, 8))
    g = rng.normal(size=(2, 5, 8))
    mask = M.causal_mask(5)
    module = M.params_to_torch(params)
    t = tensor(x)
    y, _ = module(t, t, t, attn_mask=torch.from_numpy(~mask), need_weights=False)  # the same tensor three times
    y.backward(torch.from_numpy(g))
    dx_q, dx_k, dx_v, dparams = mha_backward(x, x, x, params, g, mask)
    close(dx_q + dx_k + dx_v, t.grad.numpy())
    for one_path in (dx_q, dx_k, dx_v):  # each path alone is wrong
        assert not np.allclose(one_path, t.grad.numpy(), rtol=1e-2)
    scale = max(float(p.grad.abs().max()) for p in module.parameters())
    for name, theirs in grads_from_torch(module).arrays().items():
        close(getattr(dparams, name), theirs, scale=scale)


def test_backward_without_biases_and_unbatched_input(rng):
    params = random_params(rng, 8, 2, bias=False)
    x_q, x_kv = rng.normal(size=(3, 8)), rng.normal(size=(4, 8))  # no batch axis at all
    g = rng.normal(size=(3, 8))
    dx_q, dx_k, dx_v, dparams = mha_backward(x_q, x_kv, x_kv, params, g)
    assert dparams.b_q is None and dparams.b_o is None and not dparams.has_bias
    (rq, rk, rv), ref = torch_layer_grads(params, x_q[None], x_kv[None], x_kv[None], g[None])
    compare_layer_grads((dx_q[None], dx_k[None], dx_v[None], dparams), ((rq, rk, rv), ref))


@pytest.mark.parametrize("shared_batch", [(), (1,)])
def test_layer_keys_shared_by_a_batch(rng, shared_batch):
    # x_k, x_v of shape (m, d_model) or (1, m, d_model) serve every batch element of x_q (B, n, d_model)
    params = random_params(rng, 8, 2)
    x_q, x_kv = rng.normal(size=(3, 2, 8)), rng.normal(size=shared_batch + (4, 8))
    g = rng.normal(size=(3, 2, 8))
    module = M.params_to_torch(params)
    tq, tkv = tensor(x_q), tensor(x_kv)
    y, _ = module(tq, tkv.expand(3, 4, 8), tkv.expand(3, 4, 8), need_weights=False)
    y.backward(torch.from_numpy(g))
    dx_q, dx_k, dx_v, dparams = mha_backward(x_q, x_kv, x_kv, params, g)
    assert dx_k.shape == x_kv.shape
    close(dx_q, tq.grad.numpy())
    close(dx_k + dx_v, tkv.grad.numpy())
    close(dparams.w_k, grads_from_torch(module).w_k)


def test_layer_backward_matches_finite_differences_with_an_empty_query(rng):
    # torch's layer gives NaN for a query that may attend to nothing, so central differences are the oracle here
    params = random_params(rng, 6, 3)
    x_q, x_k, x_v = rng.normal(size=(4, 6)), rng.normal(size=(5, 6)), rng.normal(size=(5, 6))
    g = rng.normal(size=(4, 6))
    mask = rng.random((4, 5)) < 0.6
    mask[1] = False
    dx_q, dx_k, dx_v, dparams = mha_backward(x_q, x_k, x_v, params, g, mask)
    inputs = {"x_q": x_q, "x_k": x_k, "x_v": x_v}
    for name, mine in zip(inputs, (dx_q, dx_k, dx_v)):
        def f(x, name=name):
            args = dict(inputs, **{name: x})
            return M.multihead_attention(args["x_q"], args["x_k"], args["x_v"], params, mask)[0]

        close(mine, gradcheck(f, inputs[name], g), rtol=FD_RTOL, atol_rel=FD_ATOL_REL)
    scale = max(np.abs(a).max() for a in dparams.arrays().values())  # b_k's gradient is 0: only round-off
    for name, value in params.arrays().items():
        numeric = gradcheck(lambda w, name=name: M.multihead_attention(
            x_q, x_k, x_v, with_param(params, name, w), mask)[0], value, g)
        close(getattr(dparams, name), numeric, scale=scale, rtol=FD_RTOL, atol_rel=FD_ATOL_REL)
    np.testing.assert_array_equal(dx_q[1], 0.0)  # the empty query's output is b_o alone: no gradient to x_q[1]


def test_key_bias_gets_zero_gradient(rng):
    # Σ_j dS_ij = 0 for every query (softmax rows sum to 1), so db_k = Σ_ij dS_ij q_i / √d_k = 0: a closed form
    params = random_params(rng, 8, 2)
    x = rng.normal(size=(2, 5, 8))
    _, _, _, dparams = mha_backward(x, x, x, params, rng.normal(size=(2, 5, 8)), M.causal_mask(5))
    scale = np.abs(dparams.b_q).max()
    assert np.abs(dparams.b_k).max() < 1e-14 * scale * x.size


def test_one_sgd_step_equals_torch_optim_sgd(rng):
    params = random_params(rng, 8, 2)
    x_q, x_kv = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 4, 8))
    target = rng.normal(size=(2, 3, 8))
    lr = 0.1
    mask = np.ones((3, 4), dtype=bool)
    mask[0, 2:] = False
    # ours: L = mean((y - target)²), so dL/dy = 2 (y - target) / size
    y, _ = M.multihead_attention(x_q, x_kv, x_kv, params, mask)
    _, _, _, dparams = mha_backward(x_q, x_kv, x_kv, params, 2 * (y - target) / y.size, mask)
    stepped = {name: value - lr * getattr(dparams, name) for name, value in params.arrays().items()}
    # torch: the same layer, the same loss, its own optimiser
    module = M.params_to_torch(params)
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    y_t, _ = module(tensor(x_q, False), tensor(x_kv, False), tensor(x_kv, False),
                    attn_mask=torch.from_numpy(~mask), need_weights=False)
    torch.nn.functional.mse_loss(y_t, torch.from_numpy(target)).backward()
    optimizer.step()
    after = M.params_from_torch(module)
    for name, value in stepped.items():
        if name != "b_k":  # b_k's gradient is 0, so the step leaves it where it was
            assert not np.allclose(value, getattr(params, name), rtol=1e-6, atol=0), name  # the step moved it
        close(value, getattr(after, name), rtol=1e-12)


def test_layer_backward_bad_input(rng):
    params = random_params(rng, 8, 2)
    x = rng.normal(size=(3, 8))
    with pytest.raises(ValueError, match=r"d_y has shape \(3, 4\), but the layer's output has shape \(3, 8\)"):
        mha_backward(x, x, x, params, np.ones((3, 4)))
    with pytest.raises(ValueError, match="no gradient"):
        grads_from_torch(M.params_to_torch(params))
    with pytest.raises(TypeError, match="expected a torch.nn.MultiheadAttention, got Linear"):
        grads_from_torch(torch.nn.Linear(2, 2))
