"""Heads, parameters and multi-head attention, checked against torch.nn.MultiheadAttention in float64."""

import math

import numpy as np
import pytest
import torch

import mha_lessons as M
from common import random_params

RTOL = 1e-10


def torch_mha(params, x_q, x_k, x_v, blocked=None):
    """Run torch's layer on copied weights; `blocked` uses torch's convention (True = may NOT attend)."""
    module = M.params_to_torch(params)
    y, w = module(
        *(torch.from_numpy(x) for x in (x_q, x_k, x_v)),
        attn_mask=None if blocked is None else torch.from_numpy(blocked),
        need_weights=True,
        average_attn_weights=False,
    )
    return y.detach().numpy(), w.detach().numpy()


# ---------------------------------------------------------------- split and combine heads

@pytest.mark.parametrize("batch, n, d_model, h", [((), 1, 4, 1), ((), 3, 12, 4), ((2,), 5, 8, 2), ((2, 3), 2, 6, 6)])
def test_split_heads_layout_element_by_element(batch, n, d_model, h):
    x = np.arange(math.prod(batch) * n * d_model).reshape(batch + (n, d_model))
    heads = M.split_heads(x, h)
    d_k = d_model // h
    assert heads.shape == batch + (h, n, d_k)
    for idx in np.ndindex(*batch):
        for i in range(h):
            for pos in range(n):
                for f in range(d_k):
                    assert heads[idx + (i, pos, f)] == x[idx + (pos, i * d_k + f)]
    np.testing.assert_array_equal(M.combine_heads(heads), x)


def test_split_heads_matches_torch_view_transpose(rng):
    # the layout torch's MultiheadAttention uses internally: (B, n, h, d_k) then swap n and h
    x = rng.normal(size=(2, 5, 12))
    expected = torch.from_numpy(x).view(2, 5, 3, 4).transpose(1, 2).numpy()
    np.testing.assert_array_equal(M.split_heads(x, 3), expected)


# ---------------------------------------------------------------- the layer against torch

@pytest.mark.parametrize(
    "batch, n, m, d_model, h",
    [((1,), 4, 4, 8, 1), ((2,), 4, 4, 8, 2), ((3,), 5, 7, 12, 3), ((2,), 6, 3, 16, 8), ((1,), 1, 9, 6, 6)],
)
def test_multihead_matches_torch(rng, batch, n, m, d_model, h):
    params = random_params(rng, d_model, h)
    x_q, x_k, x_v = (rng.normal(size=batch + (length, d_model)) for length in (n, m, m))
    y, w = M.multihead_attention(x_q, x_k, x_v, params)
    y_ref, w_ref = torch_mha(params, x_q, x_k, x_v)
    assert y.shape == batch + (n, d_model) and w.shape == batch + (h, n, m)
    np.testing.assert_allclose(y, y_ref, rtol=RTOL, atol=1e-13)
    np.testing.assert_allclose(w, w_ref, rtol=RTOL, atol=1e-14)


@pytest.mark.parametrize("h", [1, 4])
def test_self_attention_with_causal_mask_matches_torch(rng, h):
    params = random_params(rng, 8, h)
    x = rng.normal(size=(2, 5, 8))
    mask = M.causal_mask(5)
    y, w = M.multihead_attention(x, x, x, params, mask=mask)
    y_ref, w_ref = torch_mha(params, x, x, x, blocked=~mask)  # torch: True = blocked
    np.testing.assert_allclose(y, y_ref, rtol=RTOL, atol=1e-13)
    np.testing.assert_allclose(w, w_ref, rtol=RTOL, atol=1e-14)


def test_padding_mask_matches_torch_key_padding_mask(rng):
    params = random_params(rng, 8, 2)
    x = rng.normal(size=(3, 4, 8))
    lengths = [4, 2, 1]
    y, _ = M.multihead_attention(x, x, x, params, mask=M.padding_mask(lengths, 4))
    module = M.params_to_torch(params)
    key_padding = torch.from_numpy(np.arange(4) >= np.array(lengths)[:, None])  # torch: True = padding
    t = torch.from_numpy(x)
    y_ref, _ = module(t, t, t, key_padding_mask=key_padding)
    np.testing.assert_allclose(y, y_ref.detach().numpy(), rtol=RTOL, atol=1e-13)


def test_fully_masked_query_gives_zero_weights_where_torch_gives_nan(rng):
    params = random_params(rng, 8, 2)
    x = rng.normal(size=(1, 4, 8))
    mask = np.ones((4, 4), dtype=bool)
    mask[2] = False
    y, w = M.multihead_attention(x, x, x, params, mask=mask)
    y_ref, w_ref = torch_mha(params, x, x, x, blocked=~mask)
    assert np.all(np.isnan(w_ref[:, :, 2]))  # torch's layer: nan for the empty row
    np.testing.assert_array_equal(w[:, :, 2], 0.0)  # ours: zero weights
    # the empty row's output is then the output projection of a zero vector: just the bias b_o
    np.testing.assert_allclose(y[0, 2], params.b_o, rtol=1e-14)
    keep = [0, 1, 3]
    np.testing.assert_allclose(y[:, keep], y_ref[:, keep], rtol=RTOL, atol=1e-13)
    np.testing.assert_allclose(w[:, :, keep], w_ref[:, :, keep], rtol=RTOL, atol=1e-14)


def test_no_bias_matches_torch(rng):
    params = random_params(rng, 8, 2, bias=False)
    x = rng.normal(size=(1, 3, 8))
    y, _ = M.multihead_attention(x, x, x, params)
    module = M.params_to_torch(params)
    assert module.in_proj_bias is None and module.out_proj.bias is None
    np.testing.assert_allclose(y, torch_mha(params, x, x, x)[0], rtol=RTOL, atol=1e-13)


def test_unbatched_input_matches_batch_of_one(rng):
    params = random_params(rng, 8, 2)
    x = rng.normal(size=(3, 8))
    y, w = M.multihead_attention(x, x, x, params)
    y_ref, w_ref = torch_mha(params, x[None], x[None], x[None])
    np.testing.assert_allclose(y, y_ref[0], rtol=RTOL, atol=1e-13)
    np.testing.assert_allclose(w, w_ref[0], rtol=RTOL, atol=1e-14)


def test_each_bias_is_used_and_the_key_bias_cancels(rng):
    params = random_params(rng, 8, 2)
    x = rng.normal(size=(4, 8))
    y, _ = M.multihead_attention(x, x, x, params)

    def without(name):
        fields = dict(params.arrays(), num_heads=params.num_heads)
        fields[name] = None
        return M.multihead_attention(x, x, x, M.MHAParams(**fields))[0]

    for name in ("b_q", "b_v", "b_o"):
        assert not np.allclose(y, without(name)), name
    # The key bias adds q_i · b_k to every score of row i: the same constant across the row,
    # which softmax ignores. So it has no effect on the output (torch has it all the same).
    np.testing.assert_allclose(without("b_k"), y, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- the torch bridge and the initialisation

def test_params_round_trip_through_torch(rng):
    params = random_params(rng, 12, 3)
    back = M.params_from_torch(M.params_to_torch(params))
    assert back.num_heads == 3
    for name, value in params.arrays().items():
        np.testing.assert_array_equal(getattr(back, name), value)


def test_params_from_torch_reads_a_torch_module():
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(8, 4, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        module.in_proj_bias.normal_()
        module.out_proj.bias.normal_()
    params = M.params_from_torch(module)
    x = np.random.default_rng(1).normal(size=(2, 3, 8))
    y_ref, _ = module(*(torch.from_numpy(x),) * 3)
    np.testing.assert_allclose(M.multihead_attention(x, x, x, params)[0], y_ref.detach().numpy(), rtol=RTOL, atol=1e-13)


def test_params_from_torch_rejects_what_it_cannot_represent():
    with pytest.raises(ValueError, match="add_bias_kv"):
        M.params_from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError, match="expected a torch.nn.MultiheadAttention, got Linear"):
        M.params_from_torch(torch.nn.Linear(2, 2))


def test_init_params_draws_from_torchs_distributions():
    d_model, h = 256, 4
    ours = M.init_params(d_model, h, seed=3)
    torch.manual_seed(3)
    theirs = M.params_from_torch(torch.nn.MultiheadAttention(d_model, h, dtype=torch.float64))
    for name in ("w_q", "w_k", "w_v", "w_o"):
        a, b = getattr(ours, name), getattr(theirs, name)
        # both uniform on the same interval: the same largest magnitude and the same standard deviation
        assert abs(np.abs(a).max() - np.abs(b).max()) < 0.01 * np.abs(b).max(), name
        assert abs(a.std() - b.std()) < 0.02 * b.std(), name
    for name in ("b_q", "b_k", "b_v", "b_o"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name))


def test_init_params_is_reproducible_and_seeded():
    a, b, c = M.init_params(8, 2, seed=5), M.init_params(8, 2, seed=5), M.init_params(8, 2, seed=6)
    np.testing.assert_array_equal(a.w_q, b.w_q)
    assert not np.array_equal(a.w_q, c.w_q)
    assert M.init_params(8, 2, bias=False).b_q is None


def test_float32_stays_float32(rng):
    params = M.init_params(8, 2, dtype=np.float32)
    x = rng.normal(size=(3, 8)).astype(np.float32)
    y, w = M.multihead_attention(x, x, x, params)
    assert y.dtype == np.float32 and w.dtype == np.float32


# ---------------------------------------------------------------- bad input, with its message

@pytest.mark.parametrize("d_model, h", [(10, 3), (512, 7)])
def test_not_divisible_message(d_model, h):
    with pytest.raises(ValueError, match=rf"d_model = {d_model} is not divisible by num_heads = {h}"):
        M.init_params(d_model, h)
    with pytest.raises(ValueError, match="divisible"):
        M.split_heads(np.zeros((2, d_model)), h)


@pytest.mark.parametrize("h", [0, -2, 2.0, True])
def test_bad_num_heads(h):
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        M.init_params(8, h)


def test_parameter_of_the_wrong_shape():
    p = M.init_params(8, 2)
    with pytest.raises(ValueError, match=r"w_k has shape \(8, 4\), expected \(8, 8\) for d_model = 8, h = 2, d_k = 4, d_v = 4"):
        M.MHAParams(2, p.w_q, p.w_k[:, :4], p.w_v, p.w_o)
    with pytest.raises(ValueError, match=r"b_o has shape \(7,\), expected \(8,\) for d_model = 8"):
        M.MHAParams(2, p.w_q, p.w_k, p.w_v, p.w_o, b_o=np.zeros(7))


def test_multihead_bad_input_messages(rng):
    p = M.init_params(8, 2)
    x = rng.normal(size=(3, 8))
    with pytest.raises(ValueError, match=r"x_k has shape \(3, 6\), but the parameters expect d_model = 8"):
        M.multihead_attention(x, np.zeros((3, 6)), x, p)
    with pytest.raises(ValueError, match=r"keys and values differ in length: x_k has shape \(3, 8\), x_v has shape \(4, 8\)"):
        M.multihead_attention(x, x, np.zeros((4, 8)), p)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast"):
        M.multihead_attention(x, x, x, p, mask=np.ones((3, 4), bool))
    with pytest.raises(ValueError, match="mask must be boolean"):
        M.multihead_attention(x, x, x, p, mask=np.ones((3, 3), int))
    with pytest.raises(ValueError, match=r"x_q of shape \(0, 8\) has n = 0"):
        M.multihead_attention(np.zeros((0, 8)), x, x, p)
    with pytest.raises(TypeError, match="params must be an MHAParams"):
        M.multihead_attention(x, x, x, {"w_q": p.w_q})


def test_submodules_are_attributes_of_the_package():
    assert M.attention.softmax is M.softmax
    assert M.multihead.multihead_attention is M.multihead_attention
