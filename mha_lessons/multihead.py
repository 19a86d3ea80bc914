"""Multi-head attention: heads, parameters, the layer itself, and a bridge to PyTorch.

Axis names (as in ``attention.py``):

    ...       leading batch dimensions (B in the chapters)
    h         number of heads
    n, m      number of queries, number of keys/values
    d_model   width of a token vector entering and leaving the layer
    d_k       width of one head, d_model / h (also used for the value width)

Weights are used as ``x @ w`` (rows are input features, columns are output
features), the convention of the equations in the chapters. PyTorch stores the
transpose (``x @ W.T``); ``params_from_torch`` and ``params_to_torch`` convert.
torch is imported only inside those two functions.
"""

import math
from dataclasses import dataclass, fields
from typing import Optional

import numpy as np

from ._checks import as_float_array, check_layer_arrays, check_num_heads, require_ndim
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
    """
    x = np.asarray(x)
    require_ndim(x, "x", 3, "(..., h, n, d_k)")
    *batch, h, n, d_k = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., h, n, d_k) -> (..., n, h, d_k)
    return x.reshape(*batch, n, h * d_k)  # (..., n, h, d_k) -> (..., n, d_model)


@dataclass
class MHAParams:
    """The learnable parameters of one multi-head attention layer.

    ``w_q, w_k, w_v, w_o`` have shape ``(d_model, d_model)`` and are used as
    ``x @ w``; ``b_q, b_k, b_v, b_o`` have shape ``(d_model,)`` or are ``None``
    (no bias). Columns ``[i * d_k, (i + 1) * d_k)`` of ``w_q``, ``w_k`` and
    ``w_v`` are head i's projections; rows ``[i * d_k, (i + 1) * d_k)`` of
    ``w_o`` read head i's output.

    Examples
    --------
    >>> p = init_params(8, 2)
    >>> p.d_model, p.num_heads, p.d_k
    (8, 2, 4)
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
        for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, as_float_array(value, name))
        w_q = self.w_q
        if w_q.ndim != 2 or w_q.shape[0] != w_q.shape[1]:
            raise ValueError(f"w_q must be a square (d_model, d_model) matrix, got shape {w_q.shape}")
        d_model = w_q.shape[0]
        check_num_heads(d_model, self.num_heads)
        for name in ("w_k", "w_v", "w_o"):
            shape = getattr(self, name).shape
            if shape != (d_model, d_model):
                raise ValueError(f"{name} has shape {shape}, expected (d_model, d_model) = {(d_model, d_model)}")
        for name in ("b_q", "b_k", "b_v", "b_o"):
            value = getattr(self, name)
            if value is not None and value.shape != (d_model,):
                raise ValueError(f"{name} has shape {value.shape}, expected (d_model,) = {(d_model,)}")

    @property
    def d_model(self):
        return self.w_q.shape[0]

    @property
    def d_k(self):
        return self.d_model // self.num_heads

    @property
    def has_bias(self):
        return any(getattr(self, name) is not None for name in ("b_q", "b_k", "b_v", "b_o"))

    def arrays(self):
        """The parameter arrays by name, ``None`` biases left out."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "num_heads" and getattr(self, f.name) is not None}


def init_params(d_model, num_heads, *, bias=True, seed=0, dtype=np.float64):
    """Random parameters drawn the way ``torch.nn.MultiheadAttention`` draws them.

    torch initialises its fused ``(3 d_model, d_model)`` input projection with
    Xavier-uniform, U(-a, a) with a = √(6 / (d_model + 3 d_model)); the output
    projection keeps ``nn.Linear``'s default, U(-1/√d_model, 1/√d_model); all
    biases start at zero. The numbers differ from torch's (another generator),
    the distributions do not.

    Examples
    --------
    >>> p = init_params(6, 3, seed=1)
    >>> p.w_q.shape, p.b_o.shape
    ((6, 6), (6,))
    >>> bool(np.abs(p.w_q).max() <= math.sqrt(6 / (4 * 6)))
    True
    """
    check_num_heads(d_model, num_heads)
    rng = np.random.default_rng(seed)
    a_in = math.sqrt(6.0 / (d_model + 3 * d_model))
    a_out = 1.0 / math.sqrt(d_model)
    # torch draws one (3 d_model, d_model) matrix and uses its three row blocks transposed.
    w_q, w_k, w_v = (rng.uniform(-a_in, a_in, size=(d_model, d_model)).astype(dtype) for _ in range(3))
    w_o = rng.uniform(-a_out, a_out, size=(d_model, d_model)).astype(dtype)
    biases = [np.zeros(d_model, dtype=dtype) if bias else None for _ in range(4)]
    return MHAParams(num_heads, w_q, w_k, w_v, w_o, *biases)


def _project(x, w, b):
    y = x @ w  # (..., n, d_model) @ (d_model, d_model) -> (..., n, d_model)
    if b is not None:
        y += b  # in place: y is a fresh array
    return y


def _check_layer_inputs(x_q, x_k, x_v, params, mask):
    """Validate the inputs of ``multihead_attention``; return the arrays as floats."""
    if not isinstance(params, MHAParams):
        raise ValueError(f"params must be an MHAParams (see init_params), got {type(params).__name__}")
    return check_layer_arrays(x_q, x_k, x_v, mask, params.d_model, "the parameters expect")


def multihead_attention(x_q, x_k, x_v, params, mask=None):
    """Multi-head attention: h scaled dot-product attentions on slices of learned projections.

    Parameters
    ----------
    x_q : array_like, (..., n, d_model)
        The tokens that ask (queries).
    x_k, x_v : array_like, (..., m, d_model)
        The tokens that are looked at (keys) and read from (values).
        Self-attention passes the same array three times.
    params : MHAParams
    mask : array_like of bool, broadcastable to (..., n, m), optional
        True where query i may attend to key j; the same mask for every head.
        A query that may attend to nothing gets zero weights, so its output is
        the output bias ``b_o`` (zero without biases), where PyTorch gives NaN.

    Returns
    -------
    y : ndarray, (..., n, d_model)
    weights : ndarray, (..., h, n, m)
        The attention weights of every head (not averaged). Its batch axes are
        those of x_q, x_k and the mask; batch axes that only x_v has are not
        repeated here.

    Examples
    --------
    >>> p = init_params(8, 2, seed=0)
    >>> x = np.random.default_rng(0).normal(size=(3, 8))   # n = 3 tokens
    >>> y, w = multihead_attention(x, x, x, p)
    >>> y.shape, w.shape
    ((3, 8), (2, 3, 3))
    """
    x_q, x_k, x_v, mask = _check_layer_inputs(x_q, x_k, x_v, params, mask)
    h = params.num_heads
    # step 1: project every token to a query, a key and a value
    q = _project(x_q, params.w_q, params.b_q)  # (..., n, d_model)
    k = _project(x_k, params.w_k, params.b_k)  # (..., m, d_model)
    v = _project(x_v, params.w_v, params.b_v)  # (..., m, d_model)
    # step 2: cut each into h heads of width d_k
    q = split_heads(q, h)  # (..., n, d_model) -> (..., h, n, d_k)
    k = split_heads(k, h)  # (..., m, d_model) -> (..., h, m, d_k)
    v = split_heads(v, h)  # (..., m, d_model) -> (..., h, m, d_k)
    # step 3: every head attends on its own; one mask serves all heads
    if mask is not None:
        mask = mask.reshape(mask.shape[:-2] + (1,) + mask.shape[-2:])  # (..., n, m) -> (..., 1, n, m)
    out, weights = scaled_dot_product_attention(q, k, v, mask)  # out (..., h, n, d_k), weights (..., h, n, m)
    # step 4: put the heads side by side again
    out = combine_heads(out)  # (..., h, n, d_k) -> (..., n, d_model)
    # step 5: mix the heads with the output projection
    y = _project(out, params.w_o, params.b_o)  # (..., n, d_model)
    return y, weights


def params_from_torch(module):
    """Copy the parameters of a ``torch.nn.MultiheadAttention`` into an ``MHAParams``.

    The arrays keep the module's dtype (call ``module.double()`` first for
    float64). ``batch_first`` does not change the parameters, only how torch is
    called; modules with ``kdim``/``vdim`` different from ``embed_dim``,
    ``add_bias_kv`` or ``add_zero_attn`` have no counterpart here and are
    rejected.
    """
    import torch  # imported here so that the package needs only numpy

    if not isinstance(module, torch.nn.MultiheadAttention):
        raise ValueError(f"expected a torch.nn.MultiheadAttention, got {type(module).__name__}")
    d_model = module.embed_dim
    if not module._qkv_same_embed_dim:
        raise ValueError(
            f"this module has kdim = {module.kdim}, vdim = {module.vdim} but embed_dim = {d_model}; "
            f"MHAParams needs all three equal"
        )
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv and add_zero_attn have no counterpart in MHAParams")

    def to_numpy(t):
        return t.detach().cpu().numpy().copy()

    w_in = to_numpy(module.in_proj_weight)  # (3 d_model, d_model), used by torch as x @ w_in.T
    w_q, w_k, w_v = (w_in[i * d_model:(i + 1) * d_model].T for i in range(3))  # each (d_model, d_model)
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
    """
    import torch  # imported here so that the package needs only numpy

    if not isinstance(params, MHAParams):
        raise ValueError(f"params must be an MHAParams, got {type(params).__name__}")
    d_model = params.d_model
    dtype = torch.from_numpy(params.w_q).dtype  # float64 -> torch.float64, float32 -> torch.float32
    module = torch.nn.MultiheadAttention(
        d_model, params.num_heads, bias=params.has_bias, batch_first=batch_first, dtype=dtype
    )

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=params.w_q.dtype))

    with torch.no_grad():
        module.in_proj_weight.copy_(t(np.concatenate([params.w_q.T, params.w_k.T, params.w_v.T])))
        module.out_proj.weight.copy_(t(params.w_o.T))
        if params.has_bias:
            zero = np.zeros(d_model, dtype=params.w_q.dtype)
            b_q, b_k, b_v, b_o = (zero if b is None else b for b in (params.b_q, params.b_k, params.b_v, params.b_o))
            module.in_proj_bias.copy_(t(np.concatenate([b_q, b_k, b_v])))
            module.out_proj.bias.copy_(t(b_o))
    return module.eval()
