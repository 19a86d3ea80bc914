"""Softmax, scaled dot-product attention and masks, checked against torch in float64."""

import math
import warnings

import numpy as np
import pytest
import torch

import mha_lessons as M
from common import same_but_for_rounding

RTOL = 1e-12


def torch_sdpa(q, k, v, mask=None):
    """torch's reference; its boolean attn_mask also means True = may attend (unlike nn.MultiheadAttention)."""
    t = [torch.from_numpy(a) for a in (q, k, v)]
    attn_mask = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    return torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=attn_mask).numpy()


# ---------------------------------------------------------------- softmax

def test_softmax_matches_torch_on_every_axis(rng):
    x = rng.normal(scale=3.0, size=(2, 3, 5))
    for axis in (0, 1, 2, -1):
        expected = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
        np.testing.assert_allclose(M.softmax(x, axis=axis), expected, rtol=RTOL, atol=0)


def test_softmax_is_finite_for_huge_logits():
    x = np.array([[1e4, -1e4, 0.0], [1e4, 1e4, -1e4], [-1e4, -1e4, -1e4]])
    p = M.softmax(x)
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(p, [[1, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-15, atol=0)


def test_softmax_closed_form_for_two_logits():
    # softmax([a, 0]) = [σ(a), σ(-a)] with the logistic function σ(a) = 1 / (1 + e^-a)
    for a in (-3.0, 0.0, 0.5, 7.0):
        sigma = [1 / (1 + math.exp(-a)), 1 / (1 + math.exp(a))]
        np.testing.assert_allclose(M.softmax(np.array([a, 0.0])), sigma, rtol=1e-14)


def test_softmax_of_an_all_minus_inf_row_is_zero():
    p = M.softmax(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]))
    np.testing.assert_array_equal(p, [[0.0, 0.0], [1.0, 0.0]])


# ---------------------------------------------------------------- causal and padding masks

@pytest.mark.parametrize("n, m", [(1, 1), (4, 4), (3, 5), (5, 3)])
def test_causal_mask_is_torch_mask_negated(n, m):
    # torch.nn.MultiheadAttention's boolean attn_mask says True = blocked: the opposite of ours.
    torch_blocked = torch.ones(n, m, dtype=torch.bool).triu(diagonal=1).numpy()
    np.testing.assert_array_equal(M.causal_mask(n, m), ~torch_blocked)
    # and it is exactly what torch's SDPA does with is_causal=True
    rng = np.random.default_rng(n * 10 + m)
    q, k, v = rng.normal(size=(n, 4)), rng.normal(size=(m, 4)), rng.normal(size=(m, 3))
    expected = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), is_causal=True
    ).numpy()
    out, _ = M.scaled_dot_product_attention(q, k, v, M.causal_mask(n, m))
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=1e-14)


@pytest.mark.parametrize("n, m", [(1, 1), (4, 4), (3, 5), (1, 6), (5, 3), (6, 2)])
def test_causal_mask_bottom_right_is_torch_causal_lower_right(n, m):
    from torch.nn.attention.bias import causal_lower_right

    # torch's lower-right causal bias, from its definition: query i may attend to key j iff j <= i + m - n
    allowed = ~torch.ones(n, m, dtype=torch.bool).triu(diagonal=m - n + 1).numpy()
    bottom_right = M.causal_mask(n, m, align="bottom-right")
    np.testing.assert_array_equal(bottom_right, allowed)
    # and the same outputs as torch's SDPA given causal_lower_right as its mask
    rng = np.random.default_rng(n * 10 + m)
    q, k, v = rng.normal(size=(n, 4)), rng.normal(size=(m, 4)), rng.normal(size=(m, 3))
    with warnings.catch_warnings():  # torch warns that rows with no key (n > m) may be NaN; they are not compared
        warnings.simplefilter("ignore", UserWarning)
        expected = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=causal_lower_right(n, m)
        ).numpy()
    out, weights = M.scaled_dot_product_attention(q, k, v, bottom_right)
    seeing = max(n - m, 0)  # the first n - m queries stand before key 0 and see nothing
    np.testing.assert_allclose(out[seeing:], expected[seeing:], rtol=RTOL, atol=1e-14)
    np.testing.assert_array_equal(out[:seeing], 0.0)
    # the last query stands at the last key's position and sees every key
    assert bottom_right[-1].all()


@pytest.mark.parametrize("n, m", [(1, 1), (4, 4), (3, 5), (5, 3)])
def test_causal_mask_default_is_top_left_and_the_alignments_agree_when_n_equals_m(n, m):
    top_left = M.causal_mask(n, m, align="top-left")
    np.testing.assert_array_equal(M.causal_mask(n, m), top_left)
    # top-left: the first query stands at the first key's position and sees key 0 only
    assert top_left[0, 0] and not top_left[0, 1:].any()
    same = np.array_equal(top_left, M.causal_mask(n, m, align="bottom-right"))
    assert same == (n == m)


def test_padding_mask_element_by_element():
    mask = M.padding_mask([0, 2, 4], 4)
    assert mask.shape == (3, 1, 4)
    for b, length in enumerate([0, 2, 4]):
        for j in range(4):
            assert mask[b, 0, j] == (j < length)


# ---------------------------------------------------------------- scaled dot-product attention

@pytest.mark.parametrize(
    "batch, n, m, d_k, d_v",
    [((), 1, 1, 1, 1), ((), 4, 4, 8, 8), ((2,), 3, 5, 4, 6), ((2, 3), 5, 2, 16, 3), ((1, 2, 1), 2, 7, 3, 1)],
)
def test_sdpa_matches_torch(rng, batch, n, m, d_k, d_v):
    q = rng.normal(size=batch + (n, d_k))
    k = rng.normal(size=batch + (m, d_k))
    v = rng.normal(size=batch + (m, d_v))
    out, weights = M.scaled_dot_product_attention(q, k, v)
    assert out.shape == batch + (n, d_v) and weights.shape == batch + (n, m)
    np.testing.assert_allclose(out, torch_sdpa(q, k, v), rtol=RTOL, atol=1e-14)
    # the weights are the softmax of the scaled scores, computed independently by torch
    scores = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) / math.sqrt(d_k)
    np.testing.assert_allclose(weights, torch.softmax(scores, dim=-1).numpy(), rtol=RTOL, atol=1e-15)


@pytest.mark.parametrize("mask_shape", [(3, 5), (2, 3, 5), (2, 1, 5), (1, 3, 1)])
def test_sdpa_with_masks_matches_torch(rng, mask_shape):
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 6))
    mask = rng.random(mask_shape) < 0.6
    mask[..., 0] = True  # every query may see at least one key
    out, weights = M.scaled_dot_product_attention(q, k, v, mask)
    np.testing.assert_allclose(out, torch_sdpa(q, k, v, mask), rtol=RTOL, atol=1e-14)
    assert np.all(weights[~np.broadcast_to(mask, weights.shape)] == 0)


def test_sdpa_fully_masked_row_gives_zeros_not_nan(rng):
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), rng.normal(size=(4, 2))
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False  # query 1 may attend to nothing
    out, weights = M.scaled_dot_product_attention(q, k, v, mask)
    np.testing.assert_array_equal(weights[1], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    # the other rows are untouched by the empty one
    np.testing.assert_allclose(out[[0, 2]], torch_sdpa(q, k, v)[[0, 2]], rtol=RTOL, atol=1e-14)
    # torch's functional SDPA makes the same choice (a plain softmax would give nan)
    np.testing.assert_allclose(out, torch_sdpa(q, k, v, mask), rtol=RTOL, atol=1e-14)


def test_sdpa_weights_are_what_torch_multihead_returns_for_one_head(rng):
    # an independent path through torch: nn.MultiheadAttention with identity projections and h = 1
    d = 4
    q, k, v = rng.normal(size=(1, 3, d)), rng.normal(size=(1, 5, d)), rng.normal(size=(1, 5, d))
    mha = torch.nn.MultiheadAttention(d, 1, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([torch.eye(d, dtype=torch.float64)] * 3))
        mha.out_proj.weight.copy_(torch.eye(d, dtype=torch.float64))
    y, w = mha(*(torch.from_numpy(a) for a in (q, k, v)))
    out, weights = M.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out, y.detach().numpy(), rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(weights, w.detach().numpy(), rtol=RTOL, atol=1e-15)


def test_sdpa_keeps_float32():
    q = np.ones((2, 3), dtype=np.float32)
    out, weights = M.scaled_dot_product_attention(q, q, q)
    assert out.dtype == np.float32 and weights.dtype == np.float32


def test_sdpa_converts_integers_to_float64():
    q = np.arange(6).reshape(2, 3)
    out, _ = M.scaled_dot_product_attention(q, q, q)
    assert out.dtype == np.float64
    same_but_for_rounding(out, M.scaled_dot_product_attention(q * 1.0, q * 1.0, q * 1.0)[0])


# ---------------------------------------------------------------- bad input, with its message

@pytest.mark.parametrize(
    "shapes, mask, message",
    [
        (((3, 4), (5, 6), (5, 2)), None, r"query and key widths differ: q has d_k = 4 \(shape \(3, 4\)\), k has 6"),
        (((3, 4), (5, 4), (6, 2)), None, r"keys and values differ in length: k has m = 5 .* v has 6"),
        (((4,), (5, 4), (5, 2)), None, r"q must have at least 2 dimensions \(\.\.\., n, d_k\), got shape \(4,\)"),
        (((0, 4), (5, 4), (5, 2)), None, r"n = 0"),
        (((3, 4), (0, 4), (0, 2)), None, r"m = 0"),
        (((2, 3, 4), (3, 5, 4), (3, 5, 2)), None, r"batch dimensions do not broadcast: q \(2,\), k \(3,\)"),
        (((3, 4), (5, 4), (5, 2)), np.ones((3, 4), bool), r"mask of shape \(3, 4\) does not broadcast to .*\(3, 5\)"),
        (((3, 4), (5, 4), (5, 2)), np.ones((2, 3, 5), bool), r"mask of shape \(2, 3, 5\) does not broadcast"),
        (((3, 4), (5, 4), (5, 2)), np.ones((3, 5)), r"mask must be boolean .* got dtype float64"),
    ],
)
def test_sdpa_bad_input_messages(shapes, mask, message):
    q, k, v = (np.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        M.scaled_dot_product_attention(q, k, v, mask)


def test_causal_mask_bad_sizes():
    with pytest.raises(ValueError, match=r"n = 0"):
        M.causal_mask(0)
    with pytest.raises(ValueError, match=r"m = -2"):
        M.causal_mask(3, -2)
    for align in ("lower-right", "bottom_right", None, True):
        with pytest.raises(ValueError, match=r'align must be "top-left" or "bottom-right", got ' + repr(align)):
            M.causal_mask(3, 5, align=align)
