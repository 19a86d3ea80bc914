"""Invariants of softmax, attention and multi-head attention, each checked on seeded random cases.

These need no oracle: any correct implementation satisfies them, and each one fails for a familiar
mistake (a softmax over the wrong axis, a head layout transposed, a mask applied after the softmax,
batch elements mixed up).

Tolerances. Two float64 evaluations of the same quantity that add the same terms in a different
order (a permutation, a batch split differently) differ by at most about terms · eps · (the largest
magnitude in the sum) (Higham, 2002, *Accuracy and Stability of Numerical Algorithms*, ch. 3);
``roundoff`` gives that bound with a factor 4 for the few roundings per term. Where the invariant is
exact in floating point too (a masked key's weight is exactly 0, and 0 · v = 0), the test demands
equality.
"""

import math
import zlib

import numpy as np
import pytest

import mha_lessons as M
from common import random_params, same_but_for_rounding

SEED = 20261124
EPS = np.finfo(np.float64).eps
CASES = 40


def sweep(name, count=CASES):
    for case in range(count):
        yield f"{name} case {case}", np.random.default_rng([SEED, zlib.crc32(name.encode()), case])


def roundoff(terms, scale):
    """Bound on the difference of two orderings of a float64 sum of `terms` terms of size at most `scale`."""
    return 4 * terms * EPS * scale


def random_batch(rng, max_dims=2, max_size=3):
    return tuple(int(s) for s in rng.integers(1, max_size + 1, size=rng.integers(0, max_dims + 1)))


def random_mask(rng, batch, n, m):
    """A boolean (..., n, m) mask; about half the time one query may attend to nothing."""
    mask = rng.random(batch + (n, m)) < rng.uniform(0.3, 1.0)
    if rng.random() < 0.5:
        mask[..., rng.integers(0, n), :] = False
    return mask


def random_layer(rng, max_d_model=16):
    d_model = int(rng.integers(1, max_d_model + 1))
    h = int(rng.choice([h for h in range(1, d_model + 1) if d_model % h == 0]))
    return d_model, h, random_params(rng, d_model, h)


# ---------------------------------------------------------------- softmax

def test_softmax_rows_are_probabilities_and_keep_the_order_of_the_logits():
    for label, rng in sweep("softmax rows", 100):
        shape = tuple(int(s) for s in rng.integers(1, 7, size=rng.integers(1, 4)))
        axis = int(rng.integers(-len(shape), len(shape)))
        x = rng.normal(scale=10.0 ** rng.uniform(-2, 3), size=shape)
        x[rng.random(shape) < 0.2] = -np.inf
        p = M.softmax(x, axis=axis)
        m = shape[axis]
        empty = np.all(np.isneginf(x), axis=axis)
        total = p.sum(axis=axis)
        np.testing.assert_allclose(total[~empty], 1.0, rtol=0, atol=roundoff(m, 1.0), err_msg=label)
        assert np.all(total[empty] == 0), label  # a slice with nothing allowed: all zeros
        assert np.all((p >= 0) & (p <= 1)), label
        assert np.all(p[np.isneginf(x)] == 0), label  # exactly 0, not merely small
        # a larger logit never gets a smaller probability (along the axis)
        xs, ps = np.moveaxis(x, axis, -1), np.moveaxis(p, axis, -1)
        order = np.argsort(xs, axis=-1, kind="stable")
        assert np.all(np.diff(np.take_along_axis(ps, order, axis=-1), axis=-1) >= 0), label


def test_softmax_ignores_a_constant_added_to_each_slice():
    for label, rng in sweep("softmax shift", 100):
        shape = tuple(int(s) for s in rng.integers(1, 7, size=rng.integers(1, 4)))
        axis = int(rng.integers(-len(shape), len(shape)))
        x = rng.normal(scale=10.0 ** rng.uniform(-2, 2), size=shape)
        x[rng.random(shape) < 0.2] = -np.inf
        c = rng.uniform(-100, 100, size=np.sum(x, axis=axis, keepdims=True).shape)  # one constant per slice
        shifted = M.softmax(x + c, axis=axis)
        # Rounding x + c moves each exponent by up to eps |x + c|; the subtraction of the maximum by eps |x - max|;
        # each changes a probability by that much, relatively.
        finite = np.where(np.isfinite(x), x, 0)
        rtol = 4 * EPS * (np.abs(finite).max() + np.abs(c).max() + shape[axis])
        np.testing.assert_allclose(shifted, M.softmax(x, axis=axis), rtol=rtol, atol=0, err_msg=label)


def test_softmax_commutes_with_permuting_its_axis():
    for label, rng in sweep("softmax permutation", 60):
        shape = tuple(int(s) for s in rng.integers(1, 7, size=rng.integers(1, 4)))
        axis = int(rng.integers(-len(shape), len(shape)))
        x = rng.normal(scale=3, size=shape)
        perm = rng.permutation(shape[axis])
        np.testing.assert_allclose(M.softmax(np.take(x, perm, axis=axis), axis=axis),
                                   np.take(M.softmax(x, axis=axis), perm, axis=axis),
                                   rtol=roundoff(shape[axis], 1.0), atol=0, err_msg=label)


# ---------------------------------------------------------------- scaled dot-product attention

def random_sdpa_inputs(rng):
    batch = random_batch(rng)
    n, m, d_k, d_v = (int(s) for s in rng.integers(1, 8, size=4))
    q, k, v = (rng.normal(size=batch + s) for s in ((n, d_k), (m, d_k), (m, d_v)))
    mask = random_mask(rng, batch, n, m) if rng.random() < 0.7 else None
    return q, k, v, mask


def sdpa_tolerance(q, k, v):
    """Round-off of one attention output: scores are d_k-term sums, outputs m-term sums of values."""
    n_terms = q.shape[-1] + k.shape[-2]
    score = np.abs(q).max() * np.abs(k).max() * math.sqrt(q.shape[-1])  # bounds |q·k| / √d_k
    return roundoff(n_terms, (1 + score) * np.abs(v).max())


def test_permuting_keys_and_values_together_leaves_the_output_unchanged():
    for label, rng in sweep("sdpa keys"):
        q, k, v, mask = random_sdpa_inputs(rng)
        perm = rng.permutation(k.shape[-2])
        out, w = M.scaled_dot_product_attention(q, k, v, mask)
        out_p, w_p = M.scaled_dot_product_attention(q, k[..., perm, :], v[..., perm, :],
                                                    None if mask is None else mask[..., perm])
        tol = sdpa_tolerance(q, k, v)
        np.testing.assert_allclose(out_p, out, rtol=0, atol=tol, err_msg=label)
        np.testing.assert_allclose(w_p, w[..., perm], rtol=0, atol=tol, err_msg=label)  # the weights move along


def test_permuting_the_queries_permutes_the_output():
    for label, rng in sweep("sdpa queries"):
        q, k, v, mask = random_sdpa_inputs(rng)
        perm = rng.permutation(q.shape[-2])
        out, w = M.scaled_dot_product_attention(q, k, v, mask)
        out_p, w_p = M.scaled_dot_product_attention(q[..., perm, :], k, v,
                                                    None if mask is None else mask[..., perm, :])
        tol = sdpa_tolerance(q, k, v)
        np.testing.assert_allclose(out_p, out[..., perm, :], rtol=0, atol=tol, err_msg=label)
        np.testing.assert_allclose(w_p, w[..., perm, :], rtol=0, atol=tol, err_msg=label)


def test_weights_are_probabilities_over_the_allowed_keys():
    for label, rng in sweep("sdpa weights"):
        q, k, v, mask = random_sdpa_inputs(rng)
        out, w = M.scaled_dot_product_attention(q, k, v, mask)
        allowed = np.ones(w.shape, bool) if mask is None else mask
        some = allowed.any(axis=-1)
        np.testing.assert_allclose(w.sum(axis=-1)[some], 1.0, rtol=0, atol=roundoff(k.shape[-2], 1.0), err_msg=label)
        assert np.all(w[~allowed] == 0), label  # forbidden pairs get exactly 0
        assert np.all(w[~some] == 0) and np.all(out[~some] == 0), label  # nothing allowed: zero weights, zero output
        assert np.all(w[allowed] > 0), label  # every allowed key gets some weight (these scores are moderate)


def test_a_mask_that_allows_everything_changes_nothing():
    for label, rng in sweep("sdpa all true"):
        q, k, v, _ = random_sdpa_inputs(rng)
        everything = np.ones(q.shape[:-1] + (k.shape[-2],), bool)
        for a, b in zip(M.scaled_dot_product_attention(q, k, v, everything), M.scaled_dot_product_attention(q, k, v)):
            same_but_for_rounding(a, b, err_msg=label)


def test_adding_one_vector_to_every_key_changes_nothing():
    # It adds q_i · c to every score of row i: a constant along the keys, which the softmax over keys ignores.
    # A softmax over the wrong axis (the queries) would not ignore it.
    for label, rng in sweep("sdpa key shift"):
        q, k, v, mask = random_sdpa_inputs(rng)
        c = rng.normal(scale=3, size=k.shape[-1])
        out, w = M.scaled_dot_product_attention(q, k, v, mask)
        out_c, w_c = M.scaled_dot_product_attention(q, k + c, v, mask)
        tol = sdpa_tolerance(q, k + c, v)
        np.testing.assert_allclose(out_c, out, rtol=0, atol=tol, err_msg=label)
        np.testing.assert_allclose(w_c, w, rtol=0, atol=tol, err_msg=label)


def test_the_output_is_linear_in_the_values_and_depends_on_q_and_k_only_through_q_kT():
    for label, rng in sweep("sdpa linear"):
        q, k, v, mask = random_sdpa_inputs(rng)
        v2 = rng.normal(size=v.shape)
        a, b = rng.normal(size=2)
        out, w = M.scaled_dot_product_attention(q, k, v, mask)
        out2, _ = M.scaled_dot_product_attention(q, k, v2, mask)
        out_ab, _ = M.scaled_dot_product_attention(q, k, a * v + b * v2, mask)
        tol = sdpa_tolerance(q, k, np.abs(a * v) + np.abs(b * v2))
        np.testing.assert_allclose(out_ab, a * out + b * out2, rtol=0, atol=tol, err_msg=label)
        # q c and k / c give the same scores q kᵀ, so the same weights
        c = float(rng.uniform(0.25, 4))
        _, w_c = M.scaled_dot_product_attention(q * c, k / c, v, mask)
        np.testing.assert_allclose(w_c, w, rtol=0, atol=sdpa_tolerance(q, k, np.ones(1)), err_msg=label)


def test_causal_attention_output_i_ignores_every_input_after_i():
    for label, rng in sweep("sdpa causal"):
        batch = random_batch(rng)
        n, d_k, d_v = int(rng.integers(2, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 6))
        q, k, v = (rng.normal(size=batch + (n, d)) for d in (d_k, d_k, d_v))
        i = int(rng.integers(0, n - 1))
        mask = M.causal_mask(n)
        out, _ = M.scaled_dot_product_attention(q, k, v, mask)
        later = [rng.normal(scale=100, size=a.shape) * (np.arange(n) > i)[:, None] for a in (q, k, v)]
        out_p, _ = M.scaled_dot_product_attention(q + later[0], k + later[1], v + later[2], mask)
        # the later keys' weights are exactly 0, and 0 · v = 0: what is left are the same sums, to rounding
        # (perturbations of size 100 would show far above it)
        same_but_for_rounding(out_p[..., :i + 1, :], out[..., :i + 1, :], err_msg=label)
        assert not np.allclose(out_p[..., i + 1:, :], out[..., i + 1:, :]), label  # the perturbation is felt later
        unmasked, _ = M.scaled_dot_product_attention(q, k, v)
        unmasked_p, _ = M.scaled_dot_product_attention(q, k + later[1], v + later[2])
        assert not np.allclose(unmasked_p[..., i, :], unmasked[..., i, :]), label  # ... and without the mask, at i


def test_batch_elements_are_computed_independently():
    for label, rng in sweep("sdpa batch"):
        q, k, v, mask = random_sdpa_inputs(rng)
        q, k, v = (a.reshape((-1,) + a.shape[-2:]) for a in (q, k, v))
        mask = None if mask is None else mask.reshape((-1,) + mask.shape[-2:])
        out, w = M.scaled_dot_product_attention(q, k, v, mask)
        for b in range(q.shape[0]):
            out_b, w_b = M.scaled_dot_product_attention(q[b], k[b], v[b], None if mask is None else mask[b])
            np.testing.assert_allclose(out[b], out_b, rtol=0, atol=sdpa_tolerance(q, k, v), err_msg=label)
            np.testing.assert_allclose(w[b], w_b, rtol=0, atol=sdpa_tolerance(q, k, np.ones(1)), err_msg=label)


# ---------------------------------------------------------------- multi-head attention

def random_layer_inputs(rng, self_attention=None, params=None):
    if params is None:
        _, _, params = random_layer(rng)
    d_model = params.d_model
    batch = random_batch(rng)
    n, m = (int(s) for s in rng.integers(1, 7, size=2))
    if self_attention or (self_attention is None and rng.random() < 0.3):
        x_q = x_k = x_v = rng.normal(size=batch + (n, d_model))
        m = n
    else:
        x_q, x_k, x_v = (rng.normal(size=batch + (s, d_model)) for s in (n, m, m))
    mask = random_mask(rng, batch, n, m) if rng.random() < 0.7 else None
    return params, x_q, x_k, x_v, mask


def layer_tolerance(params, x_q, x_k, x_v):
    """Round-off of the layer's output and weights.

    A score error δ changes a weight by δ relatively, and a score passes through d_model + d_k rounded terms
    (projection, dot product), each off by eps relative to the largest score S; the outputs add m more terms
    of the values, and W_O another d_model. So the error is about (3 d_model + d_k + m) eps (1 + S) Y, with
    Y bounding |y|.
    """
    d_model, d_k, m = params.d_model, params.d_k, x_k.shape[-2]
    q, k, v = (project(x, w, b) for x, w, b in ((x_q, params.w_q, params.b_q), (x_k, params.w_k, params.b_k),
                                                (x_v, params.w_v, params.b_v)))
    score = np.abs(q).max() * np.abs(k).max() * math.sqrt(d_k)  # bounds |q_i · k_j| / √d_k
    y_size = np.abs(v).max() * d_model * np.abs(params.w_o).max() + np.abs(params.b_o).max()  # bounds |y|
    return roundoff(3 * d_model + d_k + m, (1 + score) * y_size)


def test_layer_permuting_keys_and_values_together_changes_nothing_and_queries_permute_the_output():
    for label, rng in sweep("layer permutations"):
        params, x_q, x_k, x_v, mask = random_layer_inputs(rng, self_attention=False)
        y, w = M.multihead_attention(x_q, x_k, x_v, params, mask)
        tol = layer_tolerance(params, x_q, x_k, x_v)
        perm = rng.permutation(x_k.shape[-2])
        y_p, w_p = M.multihead_attention(x_q, x_k[..., perm, :], x_v[..., perm, :], params,
                                         None if mask is None else mask[..., perm])
        np.testing.assert_allclose(y_p, y, rtol=0, atol=tol, err_msg=label)
        np.testing.assert_allclose(w_p, w[..., perm], rtol=0, atol=tol, err_msg=label)
        perm = rng.permutation(x_q.shape[-2])
        y_p, w_p = M.multihead_attention(x_q[..., perm, :], x_k, x_v, params,
                                         None if mask is None else mask[..., perm, :])
        np.testing.assert_allclose(y_p, y[..., perm, :], rtol=0, atol=tol, err_msg=label)
        np.testing.assert_allclose(w_p, w[..., perm, :], rtol=0, atol=tol, err_msg=label)


def project(x, w, b):
    return x @ w + b


def test_one_head_is_single_head_attention_on_the_projections():
    for label, rng in sweep("one head"):
        params = random_params(rng, int(rng.integers(1, 17)), 1)
        _, x_q, x_k, x_v, mask = random_layer_inputs(rng, params=params)
        y, w = M.multihead_attention(x_q, x_k, x_v, params, mask)
        out, w_ref = M.scaled_dot_product_attention(project(x_q, params.w_q, params.b_q),
                                                    project(x_k, params.w_k, params.b_k),
                                                    project(x_v, params.w_v, params.b_v), mask)
        tol = layer_tolerance(params, x_q, x_k, x_v)
        np.testing.assert_allclose(y, project(out, params.w_o, params.b_o), rtol=0, atol=tol, err_msg=label)
        np.testing.assert_allclose(w[..., 0, :, :], w_ref, rtol=0, atol=tol, err_msg=label)


def test_h_heads_are_h_attentions_on_column_slices_read_by_row_blocks_of_w_o():
    # y = Σ_i Attention(X_q W_Q[:, cols_i] + b_Q[cols_i], ...) W_O[cols_i, :] + b_O, with cols_i = [i d_k, (i+1) d_k):
    # the equation of chapter 3 written head by head, with no reshape that could be transposed by mistake.
    for label, rng in sweep("h heads"):
        params, x_q, x_k, x_v, mask = random_layer_inputs(rng)
        y, w = M.multihead_attention(x_q, x_k, x_v, params, mask)
        d_k = params.d_k
        total = np.broadcast_to(params.b_o, y.shape).copy()
        tol = layer_tolerance(params, x_q, x_k, x_v)
        for i in range(params.num_heads):
            cols = slice(i * d_k, (i + 1) * d_k)
            out_i, w_i = M.scaled_dot_product_attention(project(x_q, params.w_q[:, cols], params.b_q[cols]),
                                                        project(x_k, params.w_k[:, cols], params.b_k[cols]),
                                                        project(x_v, params.w_v[:, cols], params.b_v[cols]), mask)
            np.testing.assert_allclose(w[..., i, :, :], w_i, rtol=0, atol=tol, err_msg=f"{label}, head {i}")
            total += out_i @ params.w_o[cols, :]
        np.testing.assert_allclose(y, total, rtol=0, atol=tol, err_msg=label)


def test_renumbering_the_heads_only_renumbers_their_weights():
    for label, rng in sweep("head permutation"):
        params, x_q, x_k, x_v, mask = random_layer_inputs(rng)
        h, d_k = params.num_heads, params.d_k
        perm = rng.permutation(h)
        features = (perm[:, None] * d_k + np.arange(d_k)).ravel()  # head perm[i]'s features become head i's
        moved = M.MHAParams(h, params.w_q[:, features], params.w_k[:, features], params.w_v[:, features],
                            params.w_o[features, :], params.b_q[features], params.b_k[features],
                            params.b_v[features], params.b_o)
        y, w = M.multihead_attention(x_q, x_k, x_v, params, mask)
        y_p, w_p = M.multihead_attention(x_q, x_k, x_v, moved, mask)
        tol = layer_tolerance(params, x_q, x_k, x_v)
        np.testing.assert_allclose(y_p, y, rtol=0, atol=tol, err_msg=label)
        np.testing.assert_allclose(w_p, w[..., perm, :, :], rtol=0, atol=tol, err_msg=label)


def test_causal_self_attention_output_i_ignores_every_token_after_i():
    for label, rng in sweep("layer causal"):
        d_model, h, params = random_layer(rng)
        n = int(rng.integers(2, 8))
        x = rng.normal(size=random_batch(rng) + (n, d_model))
        i = int(rng.integers(0, n - 1))
        mask = M.causal_mask(n)
        later = rng.normal(scale=100, size=x.shape) * (np.arange(n) > i)[:, None]
        y, _ = M.multihead_attention(x, x, x, params, mask)
        y_p, _ = M.multihead_attention(x + later, x + later, x + later, params, mask)
        same_but_for_rounding(y_p[..., :i + 1, :], y[..., :i + 1, :], err_msg=label)
        earlier = rng.normal(scale=1, size=x.shape) * (np.arange(n) == i)[:, None]
        y_e, _ = M.multihead_attention(x + earlier, x + earlier, x + earlier, params, mask)
        assert not np.allclose(y_e[..., i, :], y[..., i, :]), label  # but token i itself is felt at i


def test_padded_tokens_do_not_reach_real_tokens():
    for label, rng in sweep("layer padding"):
        d_model, h, params = random_layer(rng)
        batch, m = int(rng.integers(1, 4)), int(rng.integers(2, 8))
        lengths = rng.integers(1, m + 1, size=batch)
        x = rng.normal(size=(batch, m, d_model))
        padded = (np.arange(m) >= lengths[:, None])[..., None]  # (B, m, 1)
        garbage = x + rng.normal(scale=100, size=x.shape) * padded
        mask = M.padding_mask(lengths, m)
        y, _ = M.multihead_attention(x, x, x, params, mask)
        y_g, _ = M.multihead_attention(x, garbage, garbage, params, mask)  # the same queries, other padding
        same_but_for_rounding(y_g, y, err_msg=label)


def test_layer_batch_elements_are_computed_independently():
    for label, rng in sweep("layer batch", 20):
        params, x_q, x_k, x_v, mask = random_layer_inputs(rng, self_attention=False)
        batch = int(rng.integers(2, 4))
        x_q, x_k, x_v = (rng.normal(size=(batch,) + x.shape[-2:]) for x in (x_q, x_k, x_v))
        y, w = M.multihead_attention(x_q, x_k, x_v, params)
        tol = layer_tolerance(params, x_q, x_k, x_v)
        for b in range(batch):
            y_b, w_b = M.multihead_attention(x_q[b], x_k[b], x_v[b], params)
            np.testing.assert_allclose(y[b], y_b, rtol=0, atol=tol, err_msg=label)
            np.testing.assert_allclose(w[b], w_b, rtol=0, atol=tol, err_msg=label)


# ---------------------------------------------------------------- no function writes into its inputs

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_no_function_modifies_its_inputs(rng, dtype):
    x = rng.normal(size=(2, 5, 8)).astype(dtype)
    x[0, 1, 2] = -np.inf  # softmax must not write the shifted logits back
    mask = rng.random((2, 5, 5)) < 0.6
    params = M.init_params(8, 2, dtype=dtype, seed=1)
    params.b_q += 1  # non-zero biases, so an in-place "y += b" on a view would show
    finite = np.where(np.isfinite(x), x, 0)
    saved = [a.copy() for a in (x, finite, mask, *params.arrays().values())]
    M.softmax(x)
    M.softmax(x, axis=0)
    M.scaled_dot_product_attention(finite, finite, finite, mask)
    M.multihead_attention(finite, finite, finite, params, mask)
    M.combine_heads(M.split_heads(finite, 2))
    from mha_lessons.grads import mha_backward, sdpa_backward, softmax_backward

    weights = M.softmax(finite)
    saved.append(weights.copy())
    softmax_backward(weights, finite)
    sdpa_backward(finite, finite, finite, finite, mask)
    mha_backward(finite, finite, finite, params, finite, mask)
    for before, after in zip(saved, (x, finite, mask, *params.arrays().values(), weights)):
        np.testing.assert_array_equal(after, before)
