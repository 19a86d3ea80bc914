"""The learnable parameters of a multi-head attention layer, and their initialisation (chapter 3).

Heads may have any width: W_Q is (d_model, h d_k), W_K is (kdim, h d_k), W_V is
(vdim, h d_v) and W_O is (h d_v, d_model). In cross-attention the keys and values
may come from tokens of another width than the queries (kdim, vdim: PyTorch's
``kdim``/``vdim``); in self-attention all three widths are d_model. The usual choice, and PyTorch's,
is d_k = d_v = d_model / h, which makes all four d_model × d_model; T5-11B
(1024 wide, 128 heads of 128) and Gemma-7B (3072 wide, 16 heads of 256) do not.

Weights are used as ``x @ w`` (rows are input features, columns are output
features), the convention of the equations in the chapters. PyTorch stores the
transpose (``x @ W.T``); ``torch_bridge.py`` converts.
"""

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._checks import as_float_array, head_widths, require_positive_int, require_shapes


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
        require_shapes(vars(self), expected, f"d_model = {d_model}, h = {h}, d_k = {hd_k // h}, d_v = {hd_v // h}")

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
