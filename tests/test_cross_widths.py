"""Keys and values from tokens of their own widths (kdim, vdim), as torch.nn.MultiheadAttention's kdim/vdim:
the layer, its backward pass and the torch bridge, against torch in float64."""

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.grads import gradcheck, grads_from_torch, mha_backward

from common import FD_ATOL_REL, FD_RTOL, close

D_MODEL, H, KDIM, VDIM = 8, 2, 5, 3


def torch_module(seed=0, bias=True, kdim=KDIM, vdim=VDIM):
    torch.manual_seed(seed)
    module = torch.nn.MultiheadAttention(D_MODEL, H, kdim=kdim, vdim=vdim, bias=bias, batch_first=True,
                                         dtype=torch.float64).eval()
    if bias:
        with torch.no_grad():  # torch starts biases at 0, which would hide a dropped one
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    return module


def tensor(a, grad=False):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


@pytest.mark.parametrize("kdim, vdim", [(5, 3), (8, 3), (5, 8), (16, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_with_keys_and_values_of_their_own_widths_matches_torch(rng, kdim, vdim, bias):
    module = torch_module(bias=bias, kdim=kdim, vdim=vdim)
    assert not module._qkv_same_embed_dim  # torch keeps three separate input matrices
    params = M.params_from_torch(module)
    assert (params.d_model, params.kdim, params.vdim) == (D_MODEL, kdim, vdim)
    assert params.w_k.shape == (kdim, D_MODEL) and params.w_v.shape == (vdim, D_MODEL)
    x_q, x_k, x_v = rng.normal(size=(3, 4, D_MODEL)), rng.normal(size=(3, 6, kdim)), rng.normal(size=(3, 6, vdim))
    mask = rng.random((4, 6)) < 0.7
    mask[:, 0] = True
    y, w = M.multihead_attention(x_q, x_k, x_v, params, mask)
    y_ref, w_ref = module(tensor(x_q), tensor(x_k), tensor(x_v), attn_mask=torch.from_numpy(~mask),
                          average_attn_weights=False)
    close(y, y_ref.detach().numpy())
    close(w, w_ref.detach().numpy())


def test_cross_width_params_round_trip_through_torch(rng):
    params = M.init_params(D_MODEL, H, kdim=KDIM, vdim=VDIM, seed=4)
    for name in ("b_q", "b_k", "b_v", "b_o"):
        getattr(params, name)[:] = rng.normal(size=getattr(params, name).shape)
    module = M.params_to_torch(params)
    assert (module.kdim, module.vdim) == (KDIM, VDIM)
    back = M.params_from_torch(module)
    for name, value in params.arrays().items():
        np.testing.assert_array_equal(getattr(back, name), value)
    x_q, x_k, x_v = rng.normal(size=(2, 3, D_MODEL)), rng.normal(size=(2, 5, KDIM)), rng.normal(size=(2, 5, VDIM))
    y_ref, _ = module(tensor(x_q), tensor(x_k), tensor(x_v))
    close(M.multihead_attention(x_q, x_k, x_v, params)[0], y_ref.detach().numpy())


def test_cross_width_backward_matches_autograd_and_finite_differences(rng):
    module = torch_module(seed=1)
    params = M.params_from_torch(module)
    x_q, x_k, x_v = rng.normal(size=(2, 3, D_MODEL)), rng.normal(size=(2, 4, KDIM)), rng.normal(size=(2, 4, VDIM))
    d_y = rng.normal(size=(2, 3, D_MODEL))
    tq, tk, tv = (tensor(a, grad=True) for a in (x_q, x_k, x_v))
    module(tq, tk, tv)[0].backward(torch.from_numpy(d_y))
    dx_q, dx_k, dx_v, dp = mha_backward(x_q, x_k, x_v, params, d_y)
    assert dx_k.shape == x_k.shape and dx_v.shape == x_v.shape
    for ours, t in zip((dx_q, dx_k, dx_v), (tq, tk, tv)):
        close(ours, t.grad.numpy())
    theirs = grads_from_torch(module)
    scale = max(np.abs(g).max() for g in theirs.arrays().values())  # the key bias's gradient is 0 up to round-off
    for name, g in dp.arrays().items():
        assert g.shape == getattr(params, name).shape, name
        close(g, getattr(theirs, name), scale=scale)
    numeric = gradcheck(lambda x: M.multihead_attention(x_q, x_k, x, params)[0], x_v, d_y)
    close(dx_v, numeric, rtol=FD_RTOL, atol_rel=FD_ATOL_REL)


def test_init_params_draws_cross_widths_as_torch_does():
    # torch draws its three separate input matrices with their own Xavier bounds √(6 / (rows + columns))
    d_model, h, kdim, vdim = 256, 4, 64, 1024
    ours = M.init_params(d_model, h, kdim=kdim, vdim=vdim, seed=3)
    torch.manual_seed(3)
    theirs = M.params_from_torch(torch.nn.MultiheadAttention(d_model, h, kdim=kdim, vdim=vdim, dtype=torch.float64))
    for name in ("w_q", "w_k", "w_v", "w_o"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.shape == b.shape, name
        assert abs(np.abs(a).max() - np.abs(b).max()) < 0.01 * np.abs(b).max(), name
        assert abs(a.std() - b.std()) < 0.02 * b.std(), name
    assert np.abs(ours.w_v).max() < 0.6 * np.abs(ours.w_k).max()  # bounds √(6 / 1280) and √(6 / 320)


def test_kdim_and_vdim_equal_to_d_model_change_nothing():
    default, explicit = M.init_params(8, 2, seed=2), M.init_params(8, 2, kdim=8, vdim=8, seed=2)
    for name, value in default.arrays().items():
        np.testing.assert_array_equal(getattr(explicit, name), value)
