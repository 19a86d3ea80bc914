"""Bad input: every public function raises ValueError with a message that names the shapes or numbers.

Also the behaviour at the edges that is not an error but must be exact: NaN (it propagates to
precisely the results that depend on it), and torch modules built with ``batch_first=False``.
Cases already covered by test_attention.py and test_multihead.py (q/k widths, k/v lengths, q's rank,
n = 0, a mask of the wrong shape or float dtype, num_heads 0/-2/2.0/True for init_params) are not
repeated here.
"""

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.lookup import lookup_target, lookup_tokens, two_position_lookup
from common import same_but_for_rounding

P = M.init_params(8, 2, seed=0)
X = np.random.default_rng(0).normal(size=(3, 8))
EYE = np.eye(4)

BAD = {
    # softmax
    "softmax complex": (
        lambda: M.softmax(np.array([1 + 1j])),
        r"x must hold real numbers, got an array of dtype complex128",
    ),
    "softmax strings": (
        lambda: M.softmax(np.array(["a", "b"])),
        r"x must hold real numbers, got an array of dtype <U1",
    ),
    "softmax axis out of range": (lambda: M.softmax(np.zeros(3), axis=2), r"axis 2 is out of (bounds|range)"),
    "softmax of a scalar": (
        lambda: M.softmax(3.0),
        r"axis -1 is out of (bounds|range) for (array of dimension 0|x of shape \(\))",
    ),
    "softmax over an empty axis": (
        lambda: M.softmax(np.zeros((3, 0))),
        r"x of shape \(3, 0\) has no entries along axis -1",
    ),
    # scaled dot-product attention
    "sdpa k of rank 1": (
        lambda: M.scaled_dot_product_attention(np.zeros((3, 4)), np.zeros(4), np.zeros((1, 2))),
        r"k must have at least 2 dimensions \(\.\.\., m, d_k\), got shape \(4,\)",
    ),
    "sdpa v of rank 1": (
        lambda: M.scaled_dot_product_attention(np.zeros((3, 4)), np.zeros((5, 4)), np.zeros(5)),
        r"v must have at least 2 dimensions \(\.\.\., m, d_v\), got shape \(5,\)",
    ),
    "sdpa d_k = 0": (
        lambda: M.scaled_dot_product_attention(np.zeros((3, 0)), np.zeros((5, 0)), np.zeros((5, 2))),
        r"q of shape \(3, 0\) has d_k = 0",
    ),
    "sdpa complex v": (
        lambda: M.scaled_dot_product_attention(np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2), complex)),
        r"v must hold real numbers, got an array of dtype complex128",
    ),
    "sdpa integer mask": (
        lambda: M.scaled_dot_product_attention(X, X, X, np.ones((3, 3), np.int64)),
        r"mask must be boolean \(True = may attend\), got dtype int64; for a 0/1 array write mask.astype\(bool\)",
    ),
    "sdpa object mask": (
        lambda: M.scaled_dot_product_attention(X, X, X, np.ones((3, 3), object)),
        r"mask must be boolean .* got dtype object",
    ),
    "sdpa mask with a batch the inputs lack": (
        lambda: M.scaled_dot_product_attention(X, X, X, np.ones((2, 3, 3), bool)),
        r"mask of shape \(2, 3, 3\) does not broadcast to the scores' shape \(3, 3\)",
    ),
    "sdpa mask transposed": (
        lambda: M.scaled_dot_product_attention(X, X[:2], X[:2], np.ones((2, 3), bool)),
        r"mask of shape \(2, 3\) does not broadcast to the scores' shape \(3, 2\)",
    ),
    # masks
    "causal_mask float size": (lambda: M.causal_mask(2.0), r"causal_mask needs positive integer sizes, got n = 2.0"),
    "causal_mask bool size": (
        lambda: M.causal_mask(3, True),
        r"causal_mask needs positive integer sizes, got m = True",
    ),
    "causal_mask unknown align": (
        lambda: M.causal_mask(2, 4, align="upper-left"),
        r'causal_mask\'s align must be "top-left" or "bottom-right", got \'upper-left\'',
    ),
    "padding_mask 2-D lengths": (lambda: M.padding_mask([[1, 2]], 3), r"lengths must be a 1-D sequence of integers"),
    "padding_mask float lengths": (lambda: M.padding_mask([1.5], 3), r"lengths must be a 1-D sequence of integers"),
    "padding_mask too long": (
        lambda: M.padding_mask([1, 4], 3),
        r"every length must lie between 0 and m = 3, got \[1, 4\]",
    ),
    "padding_mask negative": (
        lambda: M.padding_mask([-1], 3),
        r"every length must lie between 0 and m = 3, got \[-1\]",
    ),
    "padding_mask fractional m": (lambda: M.padding_mask([1, 2], 2.5), r"m must be a positive integer, got 2.5"),
    "padding_mask m = 0": (lambda: M.padding_mask([0], 0), r"m must be a positive integer, got 0"),
    # heads
    "split_heads rank 1": (
        lambda: M.split_heads(np.zeros(8), 2),
        r"x must have at least 2 dimensions \(\.\.\., n, d_model\), got shape \(8,\)",
    ),
    "split_heads h = 0": (lambda: M.split_heads(X, 0), r"num_heads must be a positive integer, got 0"),
    "split_heads h < 0": (lambda: M.split_heads(X, -4), r"num_heads must be a positive integer, got -4"),
    "split_heads h = 2.5": (lambda: M.split_heads(X, 2.5), r"num_heads must be a positive integer, got 2.5"),
    "split_heads h does not divide": (
        lambda: M.split_heads(X, 3),
        r"d_model = 8 is not divisible by num_heads = 3: each head gets d_model / num_heads = 2.66667 features",
    ),
    "split_heads more heads than features": (
        lambda: M.split_heads(np.zeros((2, 4)), 8),
        r"each head gets d_model / num_heads = 0.5 features",
    ),
    "split_heads d_model = 0": (
        lambda: M.split_heads(np.zeros((2, 0)), 1),
        r"d_model must be a positive integer, got 0",
    ),
    "combine_heads rank 2": (
        lambda: M.combine_heads(X),
        r"x must have at least 3 dimensions \(\.\.\., h, n, d_k\), got shape \(3, 8\)",
    ),
    # parameters
    "MHAParams h = 0": (lambda: M.MHAParams(0, EYE, EYE, EYE, EYE), r"num_heads must be a positive integer, got 0"),
    "MHAParams h < 0": (lambda: M.MHAParams(-2, EYE, EYE, EYE, EYE), r"num_heads must be a positive integer, got -2"),
    "MHAParams h does not divide": (
        lambda: M.MHAParams(3, EYE, EYE, EYE, EYE),
        r"w_q has shape \(4, 4\): its 4 columns cannot be cut into num_heads = 3 heads of equal width",
    ),
    "MHAParams w_k narrower than w_q": (
        lambda: M.MHAParams(2, EYE, np.zeros((4, 2)), EYE, EYE),
        r"w_k has shape \(4, 2\), expected \(4, 4\) for d_model = 4, h = 2, d_k = 2, d_v = 2",
    ),
    "MHAParams w_q of rank 1": (
        lambda: M.MHAParams(2, np.zeros(4), EYE, EYE, EYE),
        r"w_q must be a \(d_model, h d\) matrix, got shape \(4,\)",
    ),
    "MHAParams w_o transposed shape": (
        lambda: M.MHAParams(2, EYE, EYE, np.zeros((4, 8)), np.zeros((4, 8))),
        r"w_o has shape \(4, 8\), expected \(8, 4\) for d_model = 4, h = 2, d_k = 2, d_v = 4",
    ),
    "MHAParams b_k as a column": (
        lambda: M.MHAParams(2, EYE, EYE, EYE, EYE, b_k=np.zeros((4, 1))),
        r"b_k has shape \(4, 1\), expected \(4,\) for d_model = 4",
    ),
    "MHAParams complex weights": (
        lambda: M.MHAParams(2, EYE, EYE, EYE * 1j, EYE),
        r"w_v must hold real numbers, got an array of dtype complex128",
    ),
    "init_params d_k = 0": (lambda: M.init_params(8, 2, d_k=0), r"d_k must be a positive integer, got 0"),
    "params_to_torch of other head widths": (
        lambda: M.params_to_torch(M.init_params(8, 2, d_k=3)),
        r"torch.nn.MultiheadAttention needs d_k = d_v = d_model / h; these parameters have d_model = 8, h = 2, "
        r"d_k = 3, d_v = 4",
    ),
    "init_params d_model = 0": (lambda: M.init_params(0, 1), r"d_model must be a positive integer, got 0"),
    "init_params d_model < 0": (lambda: M.init_params(-8, 2), r"d_model must be a positive integer, got -8"),
    "init_params h does not divide": (lambda: M.init_params(4, 8), r"d_model = 4 is not divisible by num_heads = 8"),
    "param_count h = 0": (lambda: M.complexity.param_count(8, 0), r"num_heads must be a positive integer, got 0"),
    "param_count h < 0": (lambda: M.complexity.param_count(8, -1), r"num_heads must be a positive integer, got -1"),
    "param_count d_model = 0": (lambda: M.complexity.param_count(0, 1), r"d_model must be a positive integer, got 0"),
    # the layer
    "layer x_q of rank 1": (
        lambda: M.multihead_attention(np.zeros(8), X, X, P),
        r"x_q must have at least 2 dimensions \(\.\.\., n, d_model\), got shape \(8,\)",
    ),
    "layer x_v of rank 1": (
        lambda: M.multihead_attention(X, X, np.zeros(8), P),
        r"x_v must have at least 2 dimensions \(\.\.\., m, d_model\), got shape \(8,\)",
    ),
    "layer x_q too narrow": (
        lambda: M.multihead_attention(X[:, :6], X, X, P),
        r"x_q has shape \(3, 6\), but the parameters expect d_model = 8 features",
    ),
    "layer x_v too wide": (
        lambda: M.multihead_attention(X, X, np.zeros((3, 9)), P),
        r"x_v has shape \(3, 9\), but the parameters expect d_model = 8 features",
    ),
    "layer m = 0": (
        lambda: M.multihead_attention(X, np.zeros((0, 8)), np.zeros((0, 8)), P),
        r"x_k of shape \(0, 8\) has m = 0",
    ),
    "layer batches differ": (
        lambda: M.multihead_attention(np.zeros((2, 3, 8)), np.zeros((3, 3, 8)), np.zeros((3, 3, 8)), P),
        r"batch dimensions do not broadcast: x_q \(2,\), x_k \(3,\), x_v \(3,\)",
    ),
    "layer mask with a batch the inputs lack": (
        lambda: M.multihead_attention(X, X, X, P, np.ones((2, 3, 3), bool)),
        r"mask of shape \(2, 3, 3\) does not broadcast to the scores' shape \(3, 3\)",
    ),
    "layer float mask": (
        lambda: M.multihead_attention(X, X, X, P, np.ones((3, 3), np.float32)),
        r"mask must be boolean .* got dtype float32",
    ),
    "layer complex input": (
        lambda: M.multihead_attention(X * 1j, X, X, P),
        r"x_q must hold real numbers, got an array of dtype complex128",
    ),
    # the torch bridge
    "layer x_k of another width than kdim": (
        lambda: M.multihead_attention(X, X, X, M.init_params(8, 2, kdim=5)),
        r"x_k has shape \(3, 8\), but the parameters expect kdim = 5 features",
    ),
    "layer x_v of another width than vdim": (
        lambda: M.multihead_attention(X, X, X, M.init_params(8, 2, vdim=3)),
        r"x_v has shape \(3, 8\), but the parameters expect vdim = 3 features",
    ),
    "init_params kdim = 0": (
        lambda: M.init_params(8, 2, kdim=0),
        r"kdim must be a positive integer, got 0",
    ),
    "MHAParams w_k of another column count than w_q": (
        lambda: M.MHAParams(2, np.eye(4), np.ones((3, 6)), np.eye(4), np.eye(4)),
        r"w_k has shape \(3, 6\), expected \(3, 4\) for d_model = 4",
    ),
    # additive score biases
    "attention bias of the wrong shape": (
        lambda: M.scaled_dot_product_attention(np.ones((3, 4)), np.ones((5, 4)), np.ones((5, 2)),
                                               bias=np.zeros((3, 4))),
        r"bias of shape \(3, 4\) does not broadcast to the scores' shape \(3, 5\)",
    ),
    "attention bias of +inf": (
        lambda: M.scaled_dot_product_attention(np.ones((3, 4)), np.ones((5, 4)), np.ones((5, 2)),
                                               bias=np.array([0.0, 0.0, 0.0, 0.0, np.inf])),
        r"bias of shape \(5,\) holds \+inf; a bias may be -inf",
    ),
    "attention bias complex": (
        lambda: M.scaled_dot_product_attention(np.ones((3, 4)), np.ones((5, 4)), np.ones((5, 2)), bias=1j),
        r"bias must hold real numbers, got an array of dtype complex128",
    ),
    "layer bias without its head axis": (
        lambda: M.multihead_attention(np.ones((3, 4, 8)), np.ones((3, 4, 8)), np.ones((3, 4, 8)), P,
                                      bias=np.zeros((3, 4, 4))),
        r"bias of shape \(3, 4, 4\) does not broadcast to the scores' shape \(3, 2, 4, 4\)",
    ),
    "params_from_torch add_zero_attn": (
        lambda: M.params_from_torch(torch.nn.MultiheadAttention(8, 2, add_zero_attn=True)),
        r"add_bias_kv and add_zero_attn have no counterpart in MHAParams",
    ),
    # the lookup task
    "lookup n = 1": (
        lambda: lookup_tokens(2, 1, 3),
        r"the lookup needs n >= 2 positions and d_content >= 1, got n = 1, d_content = 3",
    ),
    "lookup d_content = 0": (lambda: two_position_lookup(2, 4, 0, (0, 1)), r"got n = 4, d_content = 0"),
    "lookup target out of range": (
        lambda: two_position_lookup(2, 4, 2, (0, 4)),
        r"targets must be two different positions in range\(n\) = range\(4\), got \(0, 4\)",
    ),
    "lookup three targets": (
        lambda: lookup_target(np.zeros((1, 4, 12)), 4, 2, (0, 1, 2)),
        r"targets must be two different positions in range\(n\) = range\(4\), got \(0, 1, 2\)",
    ),
}


@pytest.mark.parametrize("name", BAD, ids=list(BAD))
def test_bad_input_raises_value_error_naming_the_numbers(name):
    call, message = BAD[name]
    with pytest.raises(ValueError, match=message):
        call()


# A value of the wrong type is a TypeError that names the type expected and the type given.
WRONG_TYPE = {
    "layer params a dict": (lambda: M.multihead_attention(X, X, X, {"w_q": EYE}), r"params must be an MHAParams"),
    "params_to_torch of a dict": (lambda: M.params_to_torch({"w_q": EYE}), r"params must be an MHAParams, got dict"),
    "params_from_torch of an array": (
        lambda: M.params_from_torch(EYE),
        r"expected a torch.nn.MultiheadAttention, got ndarray",
    ),
    "shard_params of a dict": (lambda: M.parallel.shard_params({}, 2, 0), r"params must be an MHAParams \(see init_params\), got dict"),
    "partial_output of full params": (
        lambda: M.parallel.partial_output(X, X, X, P), r"shard must be a ParamShard \(see shard_params\), got MHAParams"),
}


@pytest.mark.parametrize("name", WRONG_TYPE, ids=list(WRONG_TYPE))
def test_a_wrong_type_raises_type_error_naming_the_types(name):
    call, message = WRONG_TYPE[name]
    with pytest.raises(TypeError, match=message):
        call()


# ---------------------------------------------------------------- NaN propagates exactly as far as it should

def test_nan_in_softmax_makes_its_slice_nan_and_nothing_else(rng):
    x = rng.normal(size=(4, 5))
    x[1, 2] = np.nan
    x[3, 0] = -np.inf  # -inf is a legal logit (masked out): it must not be confused with NaN
    with np.errstate(invalid="ignore"):
        rows, cols = M.softmax(x, axis=-1), M.softmax(x, axis=0)
    assert np.all(np.isnan(rows[1])) and not np.any(np.isnan(rows[[0, 2, 3]]))
    same_but_for_rounding(rows[[0, 2, 3]], M.softmax(x[[0, 2, 3]], axis=-1))
    assert np.all(np.isnan(cols[:, 2])) and not np.any(np.isnan(cols[:, [0, 1, 3, 4]]))
    same_but_for_rounding(cols[:, [0, 1, 3, 4]], M.softmax(x[:, [0, 1, 3, 4]], axis=0))
    with np.errstate(invalid="ignore"):
        assert np.all(np.isnan(M.softmax(np.array([np.nan, -np.inf]))))  # NaN wins over "masked"


def test_nan_in_attention_reaches_exactly_what_depends_on_it(rng):
    n, m = 4, 5
    q, k, v = rng.normal(size=(n, 3)), rng.normal(size=(m, 3)), rng.normal(size=(m, 2))
    mask = M.causal_mask(n, m)  # query i may attend to keys 0..i
    out, w = M.scaled_dot_product_attention(q, k, v, mask)
    with np.errstate(invalid="ignore"):
        # NaN in query 1: its row of weights and output, nothing else
        q_nan = q.copy()
        q_nan[1, 0] = np.nan
        out_q, w_q = M.scaled_dot_product_attention(q_nan, k, v, mask)
        # NaN in key 2: every query that may attend to key 2 (2 and 3); queries 0 and 1 may not, and are untouched
        k_nan = k.copy()
        k_nan[2, 1] = np.nan
        out_k, w_k = M.scaled_dot_product_attention(q, k_nan, v, mask)
        # NaN in feature 1 of value 4: weights untouched, but feature 1 of every output is NaN, even for queries
        # whose weight on key 4 is 0, because 0 · NaN = NaN in the weighted sum (torch behaves the same)
        v_nan = v.copy()
        v_nan[4, 1] = np.nan
        out_v, w_v = M.scaled_dot_product_attention(q, k, v_nan, mask)
    assert np.all(np.isnan(w_q[1])) and np.all(np.isnan(out_q[1]))
    same_but_for_rounding(np.delete(out_q, 1, axis=0), np.delete(out, 1, axis=0))  # finite, and unchanged
    same_but_for_rounding(np.delete(w_q, 1, axis=0), np.delete(w, 1, axis=0))
    assert np.all(np.isnan(w_k[2:])) and np.all(np.isnan(out_k[2:]))
    same_but_for_rounding(out_k[:2], out[:2])
    same_but_for_rounding(w_k[:2], w[:2])
    same_but_for_rounding(w_v, w)
    assert np.all(np.isnan(out_v[:, 1])) and not np.any(np.isnan(out_v[:, 0]))
    same_but_for_rounding(out_v[:, 0], out[:, 0])


def test_nan_in_the_layer_reaches_exactly_what_depends_on_it(rng):
    x = rng.normal(size=(2, 5, 8))
    mask = M.causal_mask(5)
    y, _ = M.multihead_attention(x, x, x, P, mask)
    x_nan = x.copy()
    x_nan[1, 3, 0] = np.nan  # token 3 of sequence 1
    with np.errstate(invalid="ignore"):
        y_q, _ = M.multihead_attention(x_nan, x, x, P, mask)  # as a query only: its own output
        y_k, _ = M.multihead_attention(x, x_nan, x, P, mask)  # as a key only: every query that may see it
    assert np.all(np.isnan(y_q[1, 3])) and np.isnan(y_q).sum() == 8
    assert np.all(np.isnan(y_k[1, 3:])) and np.isnan(y_k).sum() == 2 * 8
    for y_nan in (y_q, y_k):
        same_but_for_rounding(y_nan[0], y[0])  # the other sequence of the batch is untouched
        same_but_for_rounding(y_nan[1, :3], y[1, :3])  # and so are the queries before token 3


# ---------------------------------------------------------------- torch modules with batch_first=False

def test_parameters_do_not_depend_on_torchs_batch_first(rng):
    torch.manual_seed(1)
    module = torch.nn.MultiheadAttention(8, 4, batch_first=False, dtype=torch.float64).eval()
    with torch.no_grad():
        module.in_proj_bias.normal_()
        module.out_proj.bias.normal_()
    params = M.params_from_torch(module)
    x = rng.normal(size=(2, 5, 8))  # ours: (B, n, d_model)
    mask = M.causal_mask(5)
    y, w = M.multihead_attention(x, x, x, params, mask)
    t = torch.from_numpy(x.transpose(1, 0, 2).copy())  # torch's batch_first=False layout: (n, B, d_model)
    y_ref, w_ref = module(t, t, t, attn_mask=torch.from_numpy(~mask), average_attn_weights=False)
    np.testing.assert_allclose(y, y_ref.detach().numpy().transpose(1, 0, 2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w, w_ref.detach().numpy(), rtol=1e-12, atol=1e-15)  # weights stay (B, h, n, m)
    # built back with batch_first=False, the module computes the same thing on (n, B, d_model) tensors
    rebuilt = M.params_to_torch(params, batch_first=False)
    assert rebuilt.batch_first is False
    y_back, _ = rebuilt(t, t, t, attn_mask=torch.from_numpy(~mask))
    same_but_for_rounding(y_back.detach().numpy(), y_ref.detach().numpy())
    # and the same parameters in a batch_first=True module agree with it too
    batch_first = M.params_to_torch(params, batch_first=True)
    y_first, _ = batch_first(*(torch.from_numpy(x),) * 3, attn_mask=torch.from_numpy(~mask))
    np.testing.assert_allclose(y_first.detach().numpy(), y, rtol=1e-12, atol=1e-14)
