"""Grouped-query attention: groups of query heads that share one key/value head (chapter 10).

Axis names (as in ``multihead.py``):

    ...       leading batch dimensions (B in the chapters)
    h         number of query heads
    h_kv      number of key/value heads; h_kv = h is multi-head attention,
              h_kv = 1 multi-query attention, anything between grouped-query attention
    g         query heads per key/value head, g = h / h_kv
    n, m      number of queries, number of keys/values
    d_k, d_v  width of a head's queries and keys, of its values

Query head i reads key/value head ``i // g``: heads 0..g-1 share key/value head 0,
the next g heads share key/value head 1, and so on (the order of
``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``).
"""

import numpy as np

from ._checks import as_float_array, broadcast_batch, check_mask, check_num_heads, require_ndim, require_positive_ints
from .attention import scaled_dot_product_attention
from .complexity import param_count


def check_kv_heads(num_heads, num_kv_heads):
    """Raise ValueError unless ``num_kv_heads`` is a positive integer that divides ``num_heads``.

    >>> check_kv_heads(8, 2)
    >>> check_kv_heads(8, 3)
    Traceback (most recent call last):
    ...
    ValueError: h = 8 query heads cannot be shared out among h_kv = 3 key/value heads: h_kv must divide h
    """
    require_positive_ints(num_heads=num_heads, num_kv_heads=num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"h = {num_heads} query heads cannot be shared out among h_kv = {num_kv_heads} key/value heads: "
            f"h_kv must divide h"
        )


def _check_gqa_inputs(q, k, v, mask):
    """q, k, v as float arrays of matching heads, lengths and widths, the mask boolean: ValueError otherwise."""
    q, k, v = as_float_array(q, "q"), as_float_array(k, "k"), as_float_array(v, "v")
    require_ndim(q, "q", 3, "(..., h, n, d_k)")
    require_ndim(k, "k", 3, "(..., h_kv, m, d_k)")
    require_ndim(v, "v", 3, "(..., h_kv, m, d_v)")
    *_, h, n, d_k = q.shape
    *_, h_kv, m, _ = k.shape
    if v.shape[-3] != h_kv:
        raise ValueError(f"k has h_kv = {h_kv} heads (shape {k.shape}) "
                         f"but v has {v.shape[-3]} (shape {v.shape})")
    check_kv_heads(h, h_kv)
    if k.shape[-1] != d_k:
        raise ValueError(f"query and key widths differ: "
                         f"q has shape {q.shape}, k has shape {k.shape}")
    if v.shape[-2] != m:
        raise ValueError(f"keys and values differ in length: "
                         f"k has shape {k.shape}, v has shape {v.shape}")
    batch = broadcast_batch({"q": q.shape[:-3], "k": k.shape[:-3], "v": v.shape[:-3]})
    if mask is not None:
        if np.ndim(mask) == 3 and batch and np.shape(mask)[0] == h == batch[-1] > 1:
            raise ValueError(f"a mask of shape {np.shape(mask)} is ambiguous for q of shape {batch + (h, n, d_k)}, "
                             f"where B = h = "
                             f"{h}: it would be read as one mask per head (h, n, m), not per sequence (B, n, m); "
                             f"give it a head axis, e.g. mask[:, None] for one mask per sequence, (B, 1, n, m)")
        mask = check_mask(mask, batch + (h, n, m))
    return q, k, v, mask


def grouped_query_attention(q, k, v, mask=None, *, check_input=True):
    """Attention in which groups of g = h / h_kv query heads share one key/value head.

    Query head i attends with key/value head ``i // g``. h_kv = h is ordinary
    multi-head attention (every head has its own keys and values), h_kv = 1 is
    multi-query attention (all heads share one).

    Parameters
    ----------
    q : array_like, (..., h, n, d_k)
    k : array_like, (..., h_kv, m, d_k)
    v : array_like, (..., h_kv, m, d_v)
        h_kv must divide h.
    mask : array_like of bool, broadcastable to (..., h, n, m), optional
        True where query i may attend to key j (an (n, m) mask serves every
        head). Read by broadcasting, a layer-style (B, n, m) mask is taken for
        one mask per head (h, n, m); when B = h that would be silently wrong,
        so a three-axis mask whose first axis is both B and h is refused. Give
        it its head axis: (B, 1, n, m) for one mask per sequence.
    check_input : bool, keyword-only
        False for a caller that has checked the arguments already (``inference.decode_step``).

    Returns
    -------
    out : ndarray, (..., h, n, d_v)
    weights : ndarray, (..., h, n, m)

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q = rng.normal(size=(4, 3, 2))            # h = 4 query heads, n = 3, d_k = 2
    >>> k = rng.normal(size=(2, 5, 2))            # h_kv = 2 key/value heads, m = 5
    >>> out, w = grouped_query_attention(q, k, k)
    >>> out.shape, w.shape
    ((4, 3, 2), (4, 3, 5))
    >>> same = scaled_dot_product_attention(q[1], k[0], k[0])[0]  # head 1 reads 1 // 2
    >>> bool(np.allclose(out[1], same))
    True
    """
    if check_input:  # the only check: the steps below trust their input
        q, k, v, mask = _check_gqa_inputs(q, k, v, mask)
    *_, h, n, d_k = q.shape
    h_kv, m = k.shape[-3], k.shape[-2]
    g = h // h_kv
    # (..., h, n, d_k) -> (..., h_kv, g, n, d_k)
    q = q.reshape(q.shape[:-3] + (h_kv, g, n, d_k))
    # (..., h_kv, m, d_k) -> (..., h_kv, 1, m, d_k): broadcast over the g query heads
    k = k[..., None, :, :]
    v = v[..., None, :, :]  # (..., h_kv, m, d_v) -> (..., h_kv, 1, m, d_v)
    if mask is not None:
        # (n, m) -> (1, n, m): give the mask a head axis
        mask = mask.reshape((1,) * max(0, 3 - mask.ndim) + mask.shape)
        if mask.shape[-3] == h:  # one mask per query head
            # (..., h, n, m) -> (..., h_kv, g, n, m)
            mask = mask.reshape(mask.shape[:-3] + (h_kv, g) + mask.shape[-2:])
        else:  # one mask for all heads
            # (..., 1, n, m) -> (..., 1, 1, n, m)
            mask = mask.reshape(mask.shape[:-3] + (1, 1) + mask.shape[-2:])
    # out (..., h_kv, g, n, d_v), weights (..., h_kv, g, n, m)
    out, weights = scaled_dot_product_attention(q, k, v, mask, check_input=False)
    # merge the groups back: (..., h_kv, g, n, ·) -> (..., h, n, ·)
    out = out.reshape(out.shape[:-4] + (h,) + out.shape[-2:])
    weights = weights.reshape(weights.shape[:-4] + (h, n, m))
    return out, weights


def gqa_param_count(d_model, num_heads, num_kv_heads, *, bias=True):
    """Learnable numbers of one attention layer with ``num_kv_heads`` key/value heads.

    W_Q and W_O stay ``(d_model, d_model)``; W_K and W_V shrink to
    ``(d_model, h_kv d_k)``, each losing ``(h - h_kv) d_k`` columns of
    ``d_model`` weights (and one bias each). Computed from
    ``complexity.param_count``, so h_kv = h gives exactly its count.

    Examples
    --------
    >>> gqa_param_count(512, 8, 8) == param_count(512, 8)
    True
    >>> gqa_param_count(512, 8, 1, bias=False)        # 2 * 512² + 2 * 512 * 64
    589824
    """
    check_num_heads(d_model, num_heads)
    check_kv_heads(num_heads, num_kv_heads)
    d_k = d_model // num_heads
    missing_columns = 2 * (num_heads - num_kv_heads) * d_k  # of W_K and W_V together
    per_column = d_model + (1 if bias else 0)  # a column of weights and its bias
    return param_count(d_model, num_heads, bias=bias) - missing_columns * per_column
