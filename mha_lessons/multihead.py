"""Multi-head attention: heads, parameters, the layer itself, and a bridge to PyTorch.

Axis names (as in ``attention.py``):

    ...       leading batch dimensions (B in the chapters)
    h         number of heads
    n, m      number of queries, number of keys/values
    d_model   width of a token vector entering and leaving the layer
    d_k       width of one head's queries and keys (d_model / h unless chosen otherwise)
    d_v       width of one head's values (d_model / h unless chosen otherwise)
    kdim      width of a token vector entering as a key (d_model unless chosen otherwise)
    vdim      width of a token vector entering as a value (d_model unless chosen otherwise)

Heads may have any width: W_Q is (d_model, h d_k), W_K is (kdim, h d_k), W_V is
(vdim, h d_v) and W_O is (h d_v, d_model). In cross-attention the keys and values
may come from tokens of another width than the queries (kdim, vdim: PyTorch's
``kdim``/``vdim``); in self-attention all three widths are d_model. The usual choice, and PyTorch's,
is d_k = d_v = d_model / h, which makes all four d_model × d_model; T5-11B
(1024 wide, 128 heads of 128) and Gemma-7B (3072 wide, 16 heads of 256) do not.

Weights are used as ``x @ w`` (rows are input features, columns are output
features), the convention of the equations in the chapters. PyTorch stores the
transpose (``x @ W.T``); ``params_from_torch`` and ``params_to_torch`` convert.
torch is imported only inside those two functions.
"""

import math
import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._checks import (as_float_array, check_bias, check_layer_arrays, check_num_heads, head_widths, require_ndim,
                      require_positive_int, working_dtype)
from .attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    """Cut the feature axis into ``num_heads`` heads: (..., n, d_model) -> (..., h, n, d_k).

    Head i receives features ``[i * d_k, (i + 1) * d_k)`` of every position.

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
    x = np.asarray(x)
    require_ndim(x, "x", 2, "(..., n, d_model)")
    *batch, n, d_model = x.shape
    check_num_heads(d_model, num_heads)
    d_k = d_model // num_heads
    x = x.reshape(*batch, n, num_heads, d_k)  # (..., n, d_model) -> (..., n, h, d_k)
    return np.swapaxes(x, -3, -2)  # (..., n, h, d_k) -> (..., h, n, d_k)


def combine_heads(x):
    """Exact inverse of ``split_heads``: (..., h, n, d_k) -> (..., n, h * d_k).

    Examples
    --------
    >>> x = np.arange(8).reshape(2, 4)
    >>> np.array_equal(combine_heads(split_heads(x, 2)), x)
    True
    >>> combine_heads(np.zeros((4, 8, 10, 64))).shape     # (B, h, n, d_k) -> (B, n, h d_k)
    (4, 10, 512)
    """
    x = np.asarray(x)
    require_ndim(x, "x", 3, "(..., h, n, d_k)")
    *batch, h, n, d_k = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., h, n, d_k) -> (..., n, h, d_k)
    return x.reshape(*batch, n, h * d_k)  # (..., n, h, d_k) -> (..., n, d_model)


@dataclass
class MHAParams:
    """The learnable parameters of one multi-head attention layer.

    ``w_q`` has shape ``(d_model, h d_k)``, ``w_k`` ``(kdim, h d_k)``, ``w_v``
    ``(vdim, h d_v)`` and ``w_o`` ``(h d_v, d_model)``, all used as ``x @ w``
    (kdim = vdim = d_model in self-attention); ``b_q, b_k`` have shape ``(h d_k,)``, ``b_v`` ``(h d_v,)``
    and ``b_o`` ``(d_model,)``, or are ``None`` (no bias). Columns
    ``[i d_k, (i + 1) d_k)`` of ``w_q`` and ``w_k`` (``[i d_v, (i + 1) d_v)``
    of ``w_v``) are head i's projections; rows ``[i d_v, (i + 1) d_v)`` of
    ``w_o`` read head i's output.

    Examples
    --------
    >>> p = init_params(8, 2)
    >>> p.d_model, p.num_heads, p.d_k, p.d_v
    (8, 2, 4, 4)
    >>> wide = init_params(8, 2, d_k=16, d_v=3)        # heads of any width
    >>> wide.w_q.shape, wide.w_v.shape, wide.w_o.shape
    ((8, 32), (8, 6), (6, 8))
    >>> cross = init_params(8, 2, kdim=5, vdim=3)      # keys from 5-wide tokens, values from 3-wide ones
    >>> cross.w_k.shape, cross.w_v.shape, (cross.kdim, cross.vdim)
    ((5, 8), (3, 8), (5, 3))
    """

    num_heads: int
    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    b_q: Optional[np.ndarray] = None
    b_k: Optional[np.ndarray] = None
    b_v: Optional[np.ndarray] = None
    b_o: Optional[np.ndarray] = None

    def __post_init__(self):
        require_positive_int(self.num_heads, "num_heads")
        for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, as_float_array(value, name))
        h = self.num_heads
        for name, rows in (("w_q", "d_model"), ("w_k", "kdim"), ("w_v", "vdim")):  # they fix the widths
            w = getattr(self, name)
            if w.ndim != 2:
                raise ValueError(f"{name} must be a ({rows}, h d) matrix, got shape {w.shape}")
            if w.shape[1] % h:
                raise ValueError(f"{name} has shape {w.shape}: its {w.shape[1]} columns cannot be cut into "
                                 f"num_heads = {h} heads of equal width")
        d_model, hd_k, hd_v = self.w_q.shape[0], self.w_q.shape[1], self.w_v.shape[1]
        kdim, vdim = self.w_k.shape[0], self.w_v.shape[0]
        expected = {"w_k": (kdim, hd_k), "w_o": (hd_v, d_model),
                    "b_q": (hd_k,), "b_k": (hd_k,), "b_v": (hd_v,), "b_o": (d_model,)}
        for name, shape in expected.items():
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"{name} has shape {value.shape}, expected {shape} for d_model = {d_model}, "
                                 f"h = {h}, d_k = {hd_k // h}, d_v = {hd_v // h}")

    @property
    def d_model(self):
        return self.w_q.shape[0]

    @property
    def kdim(self):
        """Width of the tokens that enter as keys (the rows of w_k); d_model in self-attention."""
        return self.w_k.shape[0]

    @property
    def vdim(self):
        """Width of the tokens that enter as values (the rows of w_v); d_model in self-attention."""
        return self.w_v.shape[0]

    @property
    def d_k(self):
        return self.w_q.shape[1] // self.num_heads

    @property
    def d_v(self):
        return self.w_v.shape[1] // self.num_heads

    @property
    def has_bias(self):
        return any(getattr(self, name) is not None for name in ("b_q", "b_k", "b_v", "b_o"))

    def arrays(self):
        """The parameter arrays by name, ``None`` biases left out."""
        names = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")  # not a subclass's other fields
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    def astype(self, dtype):
        """The same parameters as arrays of ``dtype`` (a copy of the same class, its other fields kept).

        >>> init_params(4, 2).astype(np.float32).w_q.dtype
        dtype('float32')
        """
        return dataclasses.replace(self, **{name: a.astype(dtype) for name, a in self.arrays().items()})


def init_params(d_model, num_heads, *, d_k=None, d_v=None, bias=True, seed=0, dtype=np.float64, kdim=None,
                vdim=None):
    """Random parameters drawn the way ``torch.nn.MultiheadAttention`` draws them.

    torch initialises its fused ``(3 d_model, d_model)`` input projection with
    Xavier-uniform, U(-a, a) with a = √(6 / (d_model + 3 d_model)); the output
    projection keeps ``nn.Linear``'s default, U(-1/√d_model, 1/√d_model); all
    biases start at zero. The numbers differ from torch's (another generator),
    the distributions do not. With other head widths (``d_k``, ``d_v``, which
    torch's layer does not offer) the same rule applies to the wider or narrower
    matrices: a = √(6 / (d_model + h d_k + h d_k + h d_v)), and 1/√(h d_v) for W_O.
    With keys or values of their own widths (``kdim``, ``vdim``, default d_model)
    torch keeps three separate matrices and draws each with its own Xavier bound,
    a = √(6 / (rows + columns)); so does this function.

    ``seed`` is an int or a ``numpy.random.Generator``.

    Examples
    --------
    >>> p = init_params(6, 3, seed=1)
    >>> p.w_q.shape, p.b_o.shape
    ((6, 6), (6,))
    >>> bool(np.abs(p.w_q).max() <= math.sqrt(6 / (4 * 6)))
    True
    >>> init_params(3072, 16, d_k=256, d_v=256).w_q.shape   # Gemma-7B's shape: 16 heads of 256
    (3072, 4096)
    """
    d_k, d_v = head_widths(d_model, num_heads, d_k, d_v)
    kdim = d_model if kdim is None else kdim
    vdim = d_model if vdim is None else vdim
    require_positive_int(kdim, "kdim")
    require_positive_int(vdim, "vdim")
    h = num_heads
    rng = np.random.default_rng(seed)
    if kdim == vdim == d_model:  # torch draws one (3 d_model, d_model) matrix and uses its three row blocks transposed
        bounds = [math.sqrt(6.0 / (d_model + h * (2 * d_k + d_v)))] * 3
    else:  # torch draws (h d_k, d_model), (h d_k, kdim) and (h d_v, vdim) matrices separately
        bounds = [math.sqrt(6.0 / (rows + h * width)) for rows, width in ((d_model, d_k), (kdim, d_k), (vdim, d_v))]
    a_out = 1.0 / math.sqrt(h * d_v)
    w_q, w_k, w_v = (rng.uniform(-a, a, size=(rows, h * width)).astype(dtype)
                     for a, rows, width in zip(bounds, (d_model, kdim, vdim), (d_k, d_k, d_v)))
    w_o = rng.uniform(-a_out, a_out, size=(h * d_v, d_model)).astype(dtype)
    biases = [np.zeros(size, dtype=dtype) if bias else None for size in (h * d_k, h * d_k, h * d_v, d_model)]
    return MHAParams(num_heads, w_q, w_k, w_v, w_o, *biases)


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


def _check_layer_inputs(x_q, x_k, x_v, params, mask):
    """Validate the inputs of ``multihead_attention``; return the arrays as floats."""
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be an MHAParams (see init_params), got {type(params).__name__}")
    return check_layer_arrays(x_q, x_k, x_v, mask, params.d_model, "the parameters expect",
                              kdim=params.kdim, vdim=params.vdim)


def check_layer_bias(x_q, x_k, x_v, params, bias):
    """A layer's score bias checked against checked token arrays: it must broadcast to (..., h, n, m)."""
    if bias is None:
        return None
    batch = np.broadcast_shapes(x_q.shape[:-2], x_k.shape[:-2], x_v.shape[:-2])
    return check_bias(bias, batch + (params.num_heads, x_q.shape[-2], x_k.shape[-2]))


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
    q = split_heads(q, h)  # (..., n, h d_k) -> (..., h, n, d_k)
    k = split_heads(k, h)  # (..., m, h d_k) -> (..., h, m, d_k)
    v = split_heads(v, h)  # (..., m, h d_v) -> (..., h, m, d_v)
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
    """Steps 1 to 4 of ``multihead_attention`` on checked float arrays: everything before W_O.

    The layer (``multihead_attention``), its backward pass (``grads.mha_backward``),
    a worker's share of a split layer (``parallel.partial_output``) all run these
    same lines.
    """
    q, k, v = project_heads(x_q, x_k, x_v, params)  # steps 1-2: (..., h, n, d_k), (..., h, m, d_k), (..., h, m, d_v)
    # step 3: every head attends on its own; one mask serves all heads, the bias has its own head axis
    mask = mask_for_every_head(mask)  # (..., n, m) -> (..., 1, n, m)
    out, weights = scaled_dot_product_attention(q, k, v, mask, bias)  # out (..., h, n, d_v), weights (..., h, n, m)
    # step 4: put the heads side by side again
    concat = combine_heads(out)  # (..., h, n, d_v) -> (..., n, h d_v)
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
    x_q, x_k, x_v, mask = _check_layer_inputs(x_q, x_k, x_v, params, mask)
    bias = check_layer_bias(x_q, x_k, x_v, params, bias)
    dtype, work = layer_dtypes(x_q, x_k, x_v, params)
    if work != dtype:  # float16: every product and sum in float32, only the results rounded
        x_q, x_k, x_v, params = x_q.astype(work), x_k.astype(work), x_v.astype(work), params.astype(work)
    heads = attend_heads(x_q, x_k, x_v, params, mask, bias)  # steps 1-4
    y = mix_heads(heads.concat, params)  # step 5
    return y.astype(dtype, copy=False), heads.weights.astype(dtype, copy=False)


def mix_heads(concat, params):
    """Step 5 of the layer: the output projection, (..., n, h d_v) @ W_O (h d_v, d_model) + b_O -> (..., n, d_model)."""
    return _project(concat, params.w_o, params.b_o)


def params_from_torch(module):
    """Copy the parameters of a ``torch.nn.MultiheadAttention`` into an ``MHAParams``.

    The arrays keep the module's dtype (call ``module.double()`` first for
    float64). ``batch_first`` does not change the parameters, only how torch is
    called. A module with ``kdim``/``vdim`` different from ``embed_dim`` keeps
    three separate input matrices (``q_proj_weight``, ``k_proj_weight``,
    ``v_proj_weight``) instead of the fused ``in_proj_weight``; they become
    ``w_q`` (d_model, d_model), ``w_k`` (kdim, d_model) and ``w_v`` (vdim, d_model).
    ``add_bias_kv`` and ``add_zero_attn`` have no counterpart here and are rejected.
    """
    import torch  # imported here so that the package needs only numpy

    if not isinstance(module, torch.nn.MultiheadAttention):
        raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(module).__name__}")
    d_model = module.embed_dim
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv and add_zero_attn have no counterpart in MHAParams")

    def to_numpy(t):
        return t.detach().cpu().numpy().copy()

    if module._qkv_same_embed_dim:
        w_in = to_numpy(module.in_proj_weight)  # (3 d_model, d_model), used by torch as x @ w_in.T
        w_q, w_k, w_v = (w_in[i * d_model:(i + 1) * d_model].T for i in range(3))  # each (d_model, d_model)
    else:  # three matrices, transposed: (d_model, d_model), (d_model, kdim), (d_model, vdim) -> (kdim, d_model), ...
        w_q, w_k, w_v = (to_numpy(w).T for w in (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight))
    w_o = to_numpy(module.out_proj.weight).T
    b_q = b_k = b_v = b_o = None
    if module.in_proj_bias is not None:
        b_in = to_numpy(module.in_proj_bias)  # (3 d_model,)
        b_q, b_k, b_v = (b_in[i * d_model:(i + 1) * d_model] for i in range(3))
    if module.out_proj.bias is not None:
        b_o = to_numpy(module.out_proj.bias)
    return MHAParams(module.num_heads, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)


def params_to_torch(params, *, batch_first=True):
    """Build a ``torch.nn.MultiheadAttention`` (in eval mode) holding ``params``.

    The module has the dtype of ``params.w_q``. torch has biases for all four
    projections or for none, so a ``None`` bias among present ones becomes zeros.
    Parameters with ``kdim``/``vdim`` other than d_model give a module built with
    torch's ``kdim=``/``vdim=``.
    """
    import torch  # imported here so that the package needs only numpy

    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be an MHAParams, got {type(params).__name__}")
    d_model = params.d_model
    if params.num_heads * params.d_k != d_model or params.num_heads * params.d_v != d_model:
        raise ValueError(f"torch.nn.MultiheadAttention needs d_k = d_v = d_model / h; these parameters have "
                         f"d_model = {d_model}, h = {params.num_heads}, d_k = {params.d_k}, d_v = {params.d_v}")
    dtype = torch.from_numpy(params.w_q).dtype  # float64 -> torch.float64, float32 -> torch.float32
    module = torch.nn.MultiheadAttention(
        d_model, params.num_heads, bias=params.has_bias, batch_first=batch_first, dtype=dtype,
        kdim=params.kdim, vdim=params.vdim,
    )

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=params.w_q.dtype))

    with torch.no_grad():
        if module._qkv_same_embed_dim:  # one fused (3 d_model, d_model) matrix
            module.in_proj_weight.copy_(t(np.concatenate([params.w_q.T, params.w_k.T, params.w_v.T])))
        else:  # three: (d_model, d_model), (d_model, kdim), (d_model, vdim)
            for w, ours in ((module.q_proj_weight, params.w_q), (module.k_proj_weight, params.w_k),
                            (module.v_proj_weight, params.w_v)):
                w.copy_(t(ours.T))
        module.out_proj.weight.copy_(t(params.w_o.T))
        if params.has_bias:
            zero = np.zeros(d_model, dtype=params.w_q.dtype)
            b_q, b_k, b_v, b_o = (zero if b is None else b for b in (params.b_q, params.b_k, params.b_v, params.b_o))
            module.in_proj_bias.copy_(t(np.concatenate([b_q, b_k, b_v])))
            module.out_proj.bias.copy_(t(b_o))
    return module.eval()
