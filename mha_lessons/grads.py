"""Backward passes of attention, mirroring ``attention.py`` and ``multihead.py``.

For a scalar loss L and any array X of the forward pass, ``dX`` denotes the
gradient ∂L/∂X: an array of the same shape as X. A backward function receives
the gradient of the forward function's output and returns the gradients of its
inputs. The functions come in the order of the forward code, and each line
names the step of the forward pass it undoes and the equation of chapter 5
(``eq-ch5-...``) it implements.

Axis names (as in the forward modules):

    ...       leading batch dimensions (B in the chapters)
    h         number of heads
    n, m      number of queries, number of keys/values
    d_model   width of a token vector entering and leaving the layer
    d_k       width of a query or key vector (of one head, in the layer)
    d_v       width of a value vector

Each public function checks its input once, where it enters; the steps it runs (the forward
recomputed, the backward of a part) trust what they are given (``check_input=False``).

The independent check, central finite differences, is ``gradcheck`` (in ``gradcheck.py``), and
the gradients of PyTorch's layer come back as ours through ``grads_from_torch``
(``torch_bridge.py``); both are reachable here too.
"""

import math

import numpy as np

from ._checks import as_float_array, check_attention_call, check_same_shape, working_dtype
from .attention import scaled_dot_product_attention
from .gradcheck import gradcheck  # noqa: F401  (the independent check, reachable here as before)
from .multihead import MHAParams, attend_heads, check_layer_inputs, combine_heads, layer_dtypes, split_heads
from .torch_bridge import grads_from_torch  # noqa: F401

def _sum_to_shape(grad, shape):
    """Undo broadcasting: sum ``grad`` over the axes along which an array of ``shape`` was broadcast.

    An input used at several places (a key array shared by a whole batch) collects
    the gradients of all the places it was used.
    """
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra)))  # leading axes the input did not have
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True)  # axes of size 1 that were stretched


# ---------------------------------------------------------------- attention.py


def softmax_backward(weights, d_weights, axis=-1, *, check_input=True):
    """Gradient with respect to the logits of ``weights = softmax(logits, axis)``.

    ds = a ⊙ (da − Σ_j da_j a_j), the Jacobian-vector product of the softmax
    (eq-ch5-softmax-backward) without ever forming the m × m Jacobian.

    Parameters
    ----------
    weights : array_like, any shape
        The softmax output ``a`` (it is all the backward needs). Masked entries
        hold 0 and so get gradient 0; an all-zero slice (a fully masked query)
        gets an all-zero gradient.
    d_weights : array_like, same shape
        ∂L/∂a.
    axis : int
        The axis the softmax normalised over.
    check_input : bool, keyword-only
        False for a caller that has checked both arrays already (``sdpa_backward``).

    Returns
    -------
    ndarray, same shape
        ∂L/∂logits. Along ``axis`` it sums to 0.

    Examples
    --------
    >>> a = np.array([0.5, 0.5])
    >>> softmax_backward(a, np.array([1.0, 0.0]))      # raising logit 0 raises a_0, lowers a_1
    array([ 0.25, -0.25])
    >>> softmax_backward(a, np.array([1.0, 1.0]))      # the loss sees only the sum, always 1
    array([0., 0.])
    """
    a, da = weights, d_weights
    if check_input:
        a = as_float_array(weights, "weights")
        da = check_same_shape(d_weights, "d_weights", a.shape, "weights")
    dtype = np.result_type(a, da)
    a, da = a.astype(working_dtype(dtype), copy=False), da.astype(working_dtype(dtype), copy=False)  # float16: float32
    # eq-ch5-softmax-backward: ds = a ⊙ (da − rowsum(da ⊙ a))
    return (a * (da - np.sum(da * a, axis=axis, keepdims=True))).astype(dtype, copy=False)


def _check_sdpa_backward_inputs(q, k, v, d_out, mask, bias):
    """The forward's arguments (``check_attention_call``) and d_out, which must have the shape of its output."""
    q, k, v, mask, bias = check_attention_call(q, k, v, mask, bias)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    d_out = check_same_shape(d_out, "d_out", batch + (q.shape[-2], v.shape[-1]), "the attention output")
    return q, k, v, d_out, mask, bias


def sdpa_backward(q, k, v, d_out, mask=None, bias=None, *, bias_grad=False, check_input=True):
    """Gradients of ``scaled_dot_product_attention(q, k, v, mask, bias)`` with respect to q, k and v (and the bias).

    The forward's steps are undone in reverse order, 4 to 1; the attention
    weights are recomputed first (the backward needs them).

    Parameters
    ----------
    q : array_like, (..., n, d_k)
    k : array_like, (..., m, d_k)
    v : array_like, (..., m, d_v)
    d_out : array_like, (..., n, d_v)
        ∂L/∂out, the gradient of the attention output.
    mask : array_like of bool, broadcastable to (..., n, m), optional
        As in the forward. Masked pairs get no gradient; a fully masked query
        gets zero gradient.
    bias : array_like, broadcastable to (..., n, m), optional
        The additive score bias of the forward.
    bias_grad : bool, keyword-only
        Also return the gradient of the bias. The bias is added to the scaled
        scores, so its gradient is theirs, dS̃ (eq-ch5-softmax-backward), summed
        over the axes along which the bias was broadcast.
    check_input : bool, keyword-only
        False for a caller that has checked the arguments already (``mha_backward``).

    Returns
    -------
    dq : ndarray, shape of q
    dk : ndarray, shape of k
    dv : ndarray, shape of v
        An input broadcast over batch dimensions receives the sum of the
        gradients of every place it was used.
    d_bias : ndarray, shape of bias, only with ``bias_grad=True``
        (the shape of the scores, (..., n, m), when no bias was given).

    Float16 input is computed in float32, as in the forward, and the gradients
    rounded to float16.

    Examples
    --------
    >>> q = np.array([[1.0, 0.0]]); k = np.array([[1.0, 0.0], [0.0, 1.0]]); v = np.array([[10.0], [20.0]])
    >>> dq, dk, dv = sdpa_backward(q, k, v, d_out=np.array([[1.0]]))   # L = out[0, 0]
    >>> dv.round(4)                                                     # = the weights: 0.6698, 0.3302
    array([[0.6698],
           [0.3302]])
    >>> dq.round(3)            # turning q towards key 1 (value 20) raises the output, towards key 0 lowers it
    array([[-1.564,  1.564]])
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(4, 2, 3, 8)), rng.normal(size=(4, 2, 5, 8)), rng.normal(size=(4, 2, 5, 6))
    >>> [g.shape for g in sdpa_backward(q, k, v, d_out=np.ones((4, 2, 3, 6)))]   # (B, h, ·, ·)
    [(4, 2, 3, 8), (4, 2, 5, 8), (4, 2, 5, 6)]
    """
    if check_input:  # the only check: the steps below trust their input
        q, k, v, d_out, mask, bias = _check_sdpa_backward_inputs(q, k, v, d_out, mask, bias)
    dtype = np.result_type(q, k, v)
    q, k, v = (x.astype(working_dtype(dtype), copy=False) for x in (q, k, v))  # float16: float32
    out, a = scaled_dot_product_attention(q, k, v, mask, bias, check_input=False)  # forward again: a (..., n, m)
    a = np.broadcast_to(a, out.shape[:-1] + a.shape[-1:])  # with the batch axes only v has, as d_out has them
    dtype = np.result_type(dtype, d_out)  # the gradients' type: no input is downcast
    d_out = d_out.astype(working_dtype(d_out.dtype), copy=False)  # float16: float32
    d_k = q.shape[-1]
    # backward of step 4, O = A V
    dv = np.swapaxes(a, -1, -2) @ d_out  # eq-ch5-dv: dV = Aᵀ dO, (..., m, n) @ (..., n, d_v) -> (..., m, d_v)
    da = d_out @ np.swapaxes(v, -1, -2)  # eq-ch5-da: dA = dO Vᵀ, (..., n, d_v) @ (..., d_v, m) -> (..., n, m)
    # backward of step 3, the softmax over keys (masked entries have a = 0, so they get 0)
    ds_scaled = softmax_backward(a, da, axis=-1, check_input=False)  # eq-ch5-softmax-backward, (..., n, m)
    # backward of step 2, division by √d_k
    ds = ds_scaled / math.sqrt(d_k)  # eq-ch5-scale, (..., n, m)
    # backward of step 1, S = Q Kᵀ
    dq = ds @ k  # eq-ch5-dq: dQ = dS K, (..., n, m) @ (..., m, d_k) -> (..., n, d_k)
    dk = np.swapaxes(ds, -1, -2) @ q  # eq-ch5-dk: dK = dSᵀ Q, (..., m, n) @ (..., n, d_k) -> (..., m, d_k)
    grads = [_sum_to_shape(g, x.shape).astype(dtype, copy=False) for g, x in ((dq, q), (dk, k), (dv, v))]
    if bias_grad:  # the bias is added to the scaled scores: its gradient is ds_scaled, summed where it was broadcast
        grads.append(ds_scaled.astype(dtype, copy=False) if bias is None else _sum_to_shape(ds_scaled, bias.shape)
                     .astype(dtype, copy=False))
    return tuple(grads)


# ---------------------------------------------------------------- multihead.py


def split_heads_backward(d_heads, *, check_input=True):
    """Backward of ``split_heads``: (..., h, n, d_k) -> (..., n, d_model) (eq-ch5-heads).

    Splitting only moves entries, so each gradient entry moves back to where
    its entry came from: the backward is ``combine_heads``.

    Examples
    --------
    >>> split_heads_backward(np.ones((2, 3, 4))).shape
    (3, 8)
    """
    return combine_heads(d_heads, check_input=check_input)


def combine_heads_backward(d_x, num_heads, *, check_input=True):
    """Backward of ``combine_heads``: (..., n, d_model) -> (..., h, n, d_k) (eq-ch5-heads); it is ``split_heads``.

    Examples
    --------
    >>> combine_heads_backward(np.ones((3, 8)), 2).shape
    (2, 3, 4)
    """
    return split_heads(d_x, num_heads, check_input=check_input)


def _project_backward(x, w, dy, has_bias):
    """Backward of ``y = x @ w (+ b)``: return dx, dw, db (db is None without a bias).

    x (..., n, d_in) may have fewer or stretched batch dimensions than
    dy (..., n, d_out); w (d_in, d_out) and b are shared by every row of every
    batch element, so their gradients sum over all of them.
    """
    d_in, d_out = w.shape
    dx = _sum_to_shape(dy @ w.T, x.shape)  # eq-ch5-proj: dX = dY Wᵀ, (..., n, d_in)
    x_rows = np.broadcast_to(x, dy.shape[:-1] + (d_in,)).reshape(-1, d_in)  # (..., n, d_in) -> (N, d_in), N = all rows
    dy_rows = dy.reshape(-1, d_out)  # (..., n, d_out) -> (N, d_out)
    dw = x_rows.T @ dy_rows  # eq-ch5-proj: dW = Σ_rows Xᵀ dY, (d_in, N) @ (N, d_out) -> (d_in, d_out)
    db = dy_rows.sum(axis=0) if has_bias else None  # eq-ch5-proj: db = Σ_rows dY, (d_out,)
    return dx, dw, db


def _check_backward_inputs(x_q, x_k, x_v, params, d_y, mask, bias):
    """The layer's arguments (``multihead.check_layer_inputs``) and d_y, which must have the shape of its output."""
    x_q, x_k, x_v, mask, bias = check_layer_inputs(x_q, x_k, x_v, params, mask, bias)
    batch = np.broadcast_shapes(x_q.shape[:-2], x_k.shape[:-2], x_v.shape[:-2])
    d_y = check_same_shape(d_y, "d_y", batch + (x_q.shape[-2], params.d_model), "the layer's output")
    return x_q, x_k, x_v, d_y, mask, bias


def mha_backward(x_q, x_k, x_v, params, d_y, mask=None, bias=None, *, bias_grad=False):
    """Gradients of ``multihead_attention(x_q, x_k, x_v, params, mask, bias)`` with respect to inputs and parameters.

    The forward's steps are undone in reverse order, 5 to 1, after the forward
    intermediates are recomputed.

    Parameters
    ----------
    x_q : array_like, (..., n, d_model)
    x_k : array_like, (..., m, kdim)
    x_v : array_like, (..., m, vdim)
    params : MHAParams
    d_y : array_like, (..., n, d_model)
        ∂L/∂y, the gradient of the layer's output.
    mask : array_like of bool, broadcastable to (..., n, m), optional
    bias : array_like, broadcastable to (..., h, n, m), optional
        The additive score bias of the forward.
    bias_grad : bool, keyword-only
        Also return the bias's gradient (``sdpa_backward``), of the bias's shape.

    Returns
    -------
    dx_q, dx_k, dx_v : ndarrays, the shapes of x_q, x_k, x_v
        In self-attention (one array passed three times) the gradient of that
        array is the sum ``dx_q + dx_k + dx_v`` (eq-ch5-three-paths).
    dparams : MHAParams
        Gradients of w_q, w_k, w_v, w_o (used as ``x @ w``) and of the biases,
        summed over the batch dimensions; a bias that is ``None`` in ``params``
        has gradient ``None``.
    d_bias : ndarray, only with ``bias_grad=True``

    Float16 is computed in float32 and the gradients rounded to float16, as in the forward.

    Examples
    --------
    >>> from mha_lessons import init_params
    >>> p = init_params(4, 2, seed=0)
    >>> x = np.random.default_rng(0).normal(size=(3, 4))
    >>> dx_q, dx_k, dx_v, dp = mha_backward(x, x, x, p, d_y=np.ones((3, 4)))
    >>> (dx_q + dx_k + dx_v).shape, dp.w_q.shape, dp.b_o.tolist()   # b_o's gradient: 3 rows of ones
    ((3, 4), (4, 4), [3.0, 3.0, 3.0, 3.0])
    >>> xb = np.random.default_rng(1).normal(size=(5, 3, 4))            # B = 5 sequences
    >>> dx_q, dx_k, dx_v, dp = mha_backward(xb, xb, xb, p, d_y=np.ones((5, 3, 4)))
    >>> dx_q.shape, dp.w_q.shape                                        # weights: summed over the batch
    ((5, 3, 4), (4, 4))
    """
    x_q, x_k, x_v, d_y, mask, bias = _check_backward_inputs(x_q, x_k, x_v, params, d_y, mask, bias)  # once, here
    dtype, work = layer_dtypes(x_q, x_k, x_v, params)
    if work != dtype:  # float16: computed in float32, the gradients rounded at the end
        x_q, x_k, x_v, params = x_q.astype(work), x_k.astype(work), x_v.astype(work), params.astype(work)
    h = params.num_heads
    heads = attend_heads(x_q, x_k, x_v, params, mask, bias)  # the forward's steps 1-4 again, keeping what we need
    d_y = d_y.astype(np.result_type(d_y, work), copy=False)
    # backward of step 5, the output projection y = concat @ w_o + b_o
    d_concat, dw_o, db_o = _project_backward(heads.concat, params.w_o, d_y, params.b_o is not None)  # eq-ch5-proj
    # backward of step 4, combine heads
    d_out = combine_heads_backward(d_concat, h, check_input=False)  # eq-ch5-heads: (..., n, h d_v) -> (..., h, n, d_v)
    # backward of step 3, attention in every head (sdpa steps 4 to 1)
    with_bias = {} if heads.bias is None and not bias_grad else {"bias": heads.bias, "bias_grad": bias_grad}
    dq, dk, dv, *d_bias = sdpa_backward(heads.q, heads.k, heads.v, d_out, heads.mask, **with_bias,
                                        check_input=False)  # eq-ch5-dv to eq-ch5-dk
    # backward of step 2, split heads
    dq = split_heads_backward(dq, check_input=False)  # eq-ch5-heads: (..., h, n, d_k) -> (..., n, h d_k)
    dk = split_heads_backward(dk, check_input=False)  # (..., h, m, d_k) -> (..., m, h d_k)
    dv = split_heads_backward(dv, check_input=False)  # (..., h, m, d_v) -> (..., m, h d_v)
    # backward of step 1, the three input projections
    dx_q, dw_q, db_q = _project_backward(x_q, params.w_q, dq, params.b_q is not None)  # eq-ch5-proj
    dx_k, dw_k, db_k = _project_backward(x_k, params.w_k, dk, params.b_k is not None)  # eq-ch5-proj
    dx_v, dw_v, db_v = _project_backward(x_v, params.w_v, dv, params.b_v is not None)  # eq-ch5-proj
    dparams = MHAParams(h, dw_q, dw_k, dw_v, dw_o, db_q, db_k, db_v, db_o)
    if work != dtype:
        dx_q, dx_k, dx_v, dparams = dx_q.astype(dtype), dx_k.astype(dtype), dx_v.astype(dtype), dparams.astype(dtype)
        d_bias = [g.astype(dtype) for g in d_bias]
    return (dx_q, dx_k, dx_v, dparams, *d_bias)
