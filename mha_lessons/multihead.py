"""Multi-head attention: heads, the layer's five steps, and the layer itself (chapter 3).

Axis names (as in ``attention.py``):

    ...       leading batch dimensions (B in the chapters)
    h         number of heads
    n, m      number of queries, number of keys/values
    d_model   width of a token vector entering and leaving the layer
    d_k       width of one head's queries and keys (d_model / h unless chosen otherwise)
    d_v       width of one head's values (d_model / h unless chosen otherwise)
    kdim      width of a token vector entering as a key (d_model unless chosen otherwise)
    vdim      width of a token vector entering as a value (d_model unless chosen otherwise)

Heads may have any width, and keys and values may come from tokens of other
widths than the queries (cross-attention): ``params.py`` gives the shapes.

Weights are used as ``x @ w`` (rows are input features, columns are output
features), the convention of the equations in the chapters. The parameters
(``MHAParams``, ``init_params``) live in ``params.py``, the bridge to PyTorch
(``params_from_torch``, ``params_to_torch``) in ``torch_bridge.py``; both are
reachable here too.

The layer checks its input once, where it enters (``check_layer_inputs``); the
steps after it trust what they are given.
"""

from dataclasses import dataclass
from typing import Optional

import math

import numpy as np

from ._checks import check_bias, check_layer_arrays, check_num_heads, require_ndim, working_dtype
from .attention import scaled_dot_product_attention
from .params import MHAParams, init_params  # noqa: F401  (the layer's parameters, reachable here as before)
from .torch_bridge import params_from_torch, params_to_torch  # noqa: F401


def split_heads(x, num_heads, *, check_input=True):
    """Cut the feature axis into ``num_heads`` heads: (..., n, d_model) -> (..., h, n, d_k).

    Head i receives features ``[i * d_k, (i + 1) * d_k)`` of every position. With
    ``check_input=False`` (the layer's own steps) ``x`` must be an array whose last axis
    ``num_heads`` divides.

    Examples
    --------
    >>> x = np.arange(8).reshape(2, 4)   # n = 2 positions, d_model = 4 features
    >>> split_heads(x, 2)                # head 0 gets features 0-1, head 1 gets 2-3
    array([[[0, 1],
            [4, 5]],
    <BLANKLINE>
           [[2, 3],
            [6, 7]]])
    >>> split_heads(np.zeros((4, 10, 512)), 8).shape     # (B, n, d_model) -> (B, h, n, d_k)
    (4, 8, 10, 64)
    """
    if check_input:
        x = np.asarray(x)
        require_ndim(x, "x", 2, "(..., n, d_model)")
        check_num_heads(x.shape[-1], num_heads)
    *batch, n, d_model = x.shape
    d_k = d_model // num_heads
    x = x.reshape(*batch, n, num_heads, d_k)  # (..., n, d_model) -> (..., n, h, d_k)
    return np.swapaxes(x, -3, -2)  # (..., n, h, d_k) -> (..., h, n, d_k)


def combine_heads(x, *, check_input=True):
    """Exact inverse of ``split_heads``: (..., h, n, d_k) -> (..., n, h * d_k).

    Examples
    --------
    >>> x = np.arange(8).reshape(2, 4)
    >>> np.array_equal(combine_heads(split_heads(x, 2)), x)
    True
    >>> combine_heads(np.zeros((4, 8, 10, 64))).shape     # (B, h, n, d_k) -> (B, n, h d_k)
    (4, 10, 512)
    """
    if check_input:
        x = np.asarray(x)
        require_ndim(x, "x", 3, "(..., h, n, d_k)")
    *batch, h, n, d_k = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., h, n, d_k) -> (..., n, h, d_k)
    return x.reshape(*batch, n, h * d_k)  # (..., n, h, d_k) -> (..., n, d_model)



def _project(x, w, b):
    dtype = np.result_type(x, w)
    work = working_dtype(dtype)  # float16: multiplied and summed in float32, the result rounded once
    x = x.astype(work, copy=False)
    # one (rows, d_in) @ (d_in, d_out) product: numpy multiplies (B, n, d_in) by (d_in, d_out) as B small products,
    # each split over the BLAS threads, ten times slower or worse on two cores
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # (..., n, d_in) -> (rows, d_in)
    y = (rows @ w.astype(work, copy=False)).reshape(*x.shape[:-1], w.shape[-1])  # -> (..., n, d_out)
    if b is not None:
        y += b  # in place: y is a fresh array
    return y.astype(dtype, copy=False)


def mask_for_every_head(mask):
    """Give a layer's mask a head axis of size 1, so that one mask serves every head.

    (..., n, m) -> (..., 1, n, m); ``None`` stays ``None``.

    Examples
    --------
    >>> mask_for_every_head(np.ones((2, 3, 4), bool)).shape      # (B, n, m) -> (B, 1, n, m)
    (2, 1, 3, 4)
    """
    if mask is None:
        return None
    return mask.reshape(mask.shape[:-2] + (1,) + mask.shape[-2:])  # (..., n, m) -> (..., 1, n, m)


def check_layer_inputs(x_q, x_k, x_v, params, mask=None, bias=None):
    """Check everything the layer is given, once, where it enters: (x_q, x_k, x_v, mask, bias), converted.

    The token arrays become float arrays of the widths ``params`` expects, the mask a boolean array
    broadcastable to (..., n, m), the score bias a float array broadcastable to (..., h, n, m).
    Raises TypeError for parameters that are not an ``MHAParams``, ValueError naming the shapes otherwise.
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be an MHAParams (see init_params), got {type(params).__name__}")
    x_q, x_k, x_v, mask = check_layer_arrays(x_q, x_k, x_v, mask, params.d_model, "the parameters expect",
                                             kdim=params.kdim, vdim=params.vdim)
    if bias is not None:  # one bias per head: it must broadcast to (..., h, n, m)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_k.shape[:-2], x_v.shape[:-2])
        bias = check_bias(bias, batch + (params.num_heads, x_q.shape[-2], x_k.shape[-2]))
    return x_q, x_k, x_v, mask, bias


def layer_dtypes(x_q, x_k, x_v, params):
    """The layer's result type (numpy's common type of inputs and parameters) and the type it computes in.

    They differ only for float16, which is computed in float32 (``_checks.working_dtype``).
    """
    dtype = np.result_type(x_q, x_k, x_v, *params.arrays().values())
    return dtype, working_dtype(dtype)


def project_heads(x_q, x_k, x_v, params):
    """Steps 1 and 2 of the layer: project the tokens, then cut the projections into heads.

    Returns q (..., h, n, d_k), k (..., h, m, d_k) and v (..., h, m, d_v), from
    checked float arrays x_q (..., n, d_model) and x_k, x_v (..., m, d_model).
    """
    h = params.num_heads
    # step 1: project every token to a query, a key and a value
    q = _project(x_q, params.w_q, params.b_q)  # (..., n, d_model) @ (d_model, h d_k) -> (..., n, h d_k)
    k = _project(x_k, params.w_k, params.b_k)  # (..., m, h d_k)
    v = _project(x_v, params.w_v, params.b_v)  # (..., m, h d_v)
    # step 2: cut each into h heads
    q = split_heads(q, h, check_input=False)  # (..., n, h d_k) -> (..., h, n, d_k)
    k = split_heads(k, h, check_input=False)  # (..., m, h d_k) -> (..., h, m, d_k)
    v = split_heads(v, h, check_input=False)  # (..., m, h d_v) -> (..., h, m, d_v)
    return q, k, v


@dataclass
class Heads:
    """What steps 1 to 4 of the layer compute, kept for the output projection and for the backward pass.

    q (..., h, n, d_k), k (..., h, m, d_k), v (..., h, m, d_v): the heads' queries, keys and values;
    mask (..., 1, n, m) or None; weights (..., h, n, m); concat (..., n, h d_v): the heads' outputs side by side;
    bias (broadcastable to (..., h, n, m)) or None: the additive score bias.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: Optional[np.ndarray]
    weights: np.ndarray
    concat: np.ndarray
    bias: Optional[np.ndarray] = None


def attend_heads(x_q, x_k, x_v, params, mask=None, bias=None):
    """Steps 1 to 4 of ``multihead_attention`` on checked arrays (``check_layer_inputs``): everything before W_O.

    The layer (``multihead_attention``), its backward pass (``grads.mha_backward``),
    a worker's share of a split layer (``parallel.partial_output``) all run these
    same lines.
    """
    q, k, v = project_heads(x_q, x_k, x_v, params)  # steps 1-2: (..., h, n, d_k), (..., h, m, d_k), (..., h, m, d_v)
    # step 3: every head attends on its own; one mask serves all heads, the bias has its own head axis
    mask = mask_for_every_head(mask)  # (..., n, m) -> (..., 1, n, m)
    # out (..., h, n, d_v), weights (..., h, n, m); the layer checked its input, the steps trust it
    out, weights = scaled_dot_product_attention(q, k, v, mask, bias, check_input=False)
    # step 4: put the heads side by side again
    concat = combine_heads(out, check_input=False)  # (..., h, n, d_v) -> (..., n, h d_v)
    return Heads(q, k, v, mask, weights, concat, bias)


def multihead_attention(x_q, x_k, x_v, params, mask=None, bias=None):
    """Multi-head attention: h scaled dot-product attentions on slices of learned projections.

    Parameters
    ----------
    x_q : array_like, (..., n, d_model)
        The tokens that ask (queries).
    x_k : array_like, (..., m, kdim)
    x_v : array_like, (..., m, vdim)
        The tokens that are looked at (keys) and read from (values); kdim and
        vdim are d_model unless the parameters say otherwise (``init_params(...,
        kdim=, vdim=)``). Self-attention passes the same array three times.
    params : MHAParams
    mask : array_like of bool, broadcastable to (..., n, m), optional
        True where query i may attend to key j; the same mask for every head.
        A query that may attend to nothing gets zero weights, so its output is
        the output bias ``b_o`` (zero without biases); PyTorch's layer gives NaN
        there when it computes the weights (chapter 6).
    bias : array_like of real numbers, broadcastable to (..., h, n, m), optional
        Added to every head's scaled scores before the softmax (see
        ``scaled_dot_product_attention``). Unlike the mask it has a head axis,
        since ALiBi and T5 give each head its own bias: (n, m) serves all heads
        and sequences, (h, n, m) is one per head, (B, 1, n, m) one per sequence.
        PyTorch's float ``attn_mask`` of shape (B * h, n, m) is this bias
        reshaped to (B, h, n, m).

    Returns
    -------
    y : ndarray, (..., n, d_model)
    weights : ndarray, (..., h, n, m)
        The attention weights of every head (not averaged). Its batch axes are
        those of x_q, x_k and the mask; batch axes that only x_v has are not
        repeated here.

    Float16 inputs and parameters are computed in float32 (projections, scores,
    sums) and the results rounded to float16, as in ``scaled_dot_product_attention``.

    Examples
    --------
    >>> p = init_params(8, 2, seed=0)
    >>> x = np.random.default_rng(0).normal(size=(4, 3, 8))   # B = 4 sequences of n = 3 tokens
    >>> y, w = multihead_attention(x, x, x, p)
    >>> y.shape, w.shape
    ((4, 3, 8), (4, 2, 3, 3))
    """
    x_q, x_k, x_v, mask, bias = check_layer_inputs(x_q, x_k, x_v, params, mask, bias)  # once, here
    dtype, work = layer_dtypes(x_q, x_k, x_v, params)
    if work != dtype:  # float16: every product and sum in float32, only the results rounded
        x_q, x_k, x_v, params = x_q.astype(work), x_k.astype(work), x_v.astype(work), params.astype(work)
    heads = attend_heads(x_q, x_k, x_v, params, mask, bias)  # steps 1-4
    y = mix_heads(heads.concat, params)  # step 5
    return y.astype(dtype, copy=False), heads.weights.astype(dtype, copy=False)


def mix_heads(concat, params):
    """Step 5 of the layer: the output projection, (..., n, h d_v) @ W_O (h d_v, d_model) + b_O -> (..., n, d_model)."""
    return _project(concat, params.w_o, params.b_o)
