"""Attention without the (n, m) matrix: the online softmax, and block-wise ("flash"-style) forward and backward passes.

Axis names as in ``attention.py`` (``...`` batch, ``n`` queries, ``m`` keys, ``d_k``, ``d_v``), and

    m_blk  keys per block (``block_size``): the key axis is cut into blocks of m_blk keys, the last maybe fewer
    n_blk  queries per tile (``query_block``; all n queries when it is None), the last tile maybe fewer
    u      the number of a key block, 1, 2, ...: block u holds the keys (u - 1) m_blk ... u m_blk - 1

as chapter 7 names them (``m`` is the number of keys, never a maximum).

The block-wise pass keeps three running quantities per query row and updates them as each block of
keys arrives (chapter 7 derives them, with the names in brackets; the comments name its equations):

    s_max  the largest scaled score seen so far (s̃_max,u)                  (..., n_blk, 1)
    z      the sum of exp(score - s_max) over the keys seen (Z_u)          (..., n_blk, 1)
    acc    the sum of exp(score - s_max) · value over those keys (acc_u)   (..., n_blk, d_v)

``online_softmax_steps``, ``attention_state`` and ``blockwise_attention_with_lse`` use these names (in
the last, one value per query of a tile). When a block brings a larger maximum, the old z and acc are
multiplied by exp(s_max_old - s_max_new), which turns them into sums relative to the new maximum. At
the end ``acc / z`` is exactly softmax · V, but the largest array that ever existed was one
(..., n_blk, m_blk) block of scores, never the (..., n, m) weights.

The backward pass (``blockwise_attention_backward``) works tile by tile too. From the output and the
log-sum-exp that the forward kept it gets, per query row,

    δ      rowsum(dO ⊙ O), which equals rowsum(dA ⊙ A) (eq-ch7-delta)   (..., n, 1)

and then recomputes each (n_blk, m_blk) tile of weights from the log-sum-exp instead of storing them.
Milakov and Gimelshein (2018) describe the running maximum and sum; Dao et al. (2022) build
FlashAttention on the same update, and its backward on the same recomputation.
"""

import math

import numpy as np

from ._checks import (as_float_array, check_attention_bias, check_attention_inputs, is_int, require_softmax_axis,
                      working_dtype)


def _check_block(value, name):
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer (a number of positions per block), got {value!r}")
    return int(value)


def shift_for_exp(running_max):
    """The number to subtract before ``exp``: the running maximum, or 0 where it is still -inf.

    A row that has seen only masked keys has s_max = -inf; subtracting it would compute
    -inf - (-inf) = nan. Subtracting 0 instead gives exp(-inf) = 0, the right weight.
    """
    return np.where(np.isneginf(running_max), 0.0, running_max).astype(running_max.dtype)


def online_softmax_steps(x, block_size):
    """The running maximum and running sum of a streamed softmax, after each block of the last axis.

    Parameters
    ----------
    x : array_like, (..., m)
        Scores; each row (last axis) is streamed in blocks of ``block_size`` entries.
    block_size : int
        Entries per block; the last block is shorter when it does not divide m.

    Yields
    ------
    stop : int
        The blocks seen so far cover ``x[..., :stop]``.
    s_max : ndarray, (..., 1)
        Running maximum s̃_max,u, eq-ch7-running-max: the largest entry of ``x[..., :stop]``.
    z : ndarray, (..., 1)
        Running sum Z_u, eq-ch7-running-sum: ``sum(exp(x[..., :stop] - s_max))``.
        Both are float32 for float16 input: a float16 sum of 65,520 ones is infinite.

    Examples
    --------
    >>> for stop, s_max, z in online_softmax_steps(np.array([1.0, 3.0, 2.0]), block_size=2):
    ...     print(stop, s_max, z.round(4))
    2 [3.] [1.1353]
    3 [3.] [1.5032]
    """
    x = as_float_array(x, "x")
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"x of shape {x.shape} has no entries along its last axis; the softmax needs at least one")
    block_size = _check_block(block_size, "block_size")
    dtype = working_dtype(x.dtype)  # float32 for float16 input
    s_max = np.full(x.shape[:-1] + (1,), -np.inf, dtype=dtype)  # (..., 1) nothing seen yet: s̃_max,0
    z = np.zeros(x.shape[:-1] + (1,), dtype=dtype)  # (..., 1): Z_0
    for start in range(0, x.shape[-1], block_size):  # block u = start // block_size + 1
        block = x[..., start:start + block_size]  # (..., m_blk)
        s_max_new = np.maximum(s_max, block.max(axis=-1, keepdims=True))  # eq-ch7-running-max
        shift = shift_for_exp(s_max_new)
        # eq-ch7-running-sum: rescale the old sum to the new maximum, then add the block's terms
        z = z * np.exp(s_max - shift) + np.exp(block - shift).sum(axis=-1, keepdims=True)
        s_max = s_max_new
        yield min(start + block_size, x.shape[-1]), s_max.copy(), z.copy()


def online_softmax(x, block_size=128, axis=-1):
    """Softmax along ``axis``, normalised by a running maximum and sum computed block by block.

    One pass over the blocks finds the maximum and the sum together (eq-ch7-running-max and
    eq-ch7-running-sum); a second pass writes exp(x - s_max) / z. The plain stable softmax needs three
    passes (maximum, sum, division). The result equals ``M.softmax(x, axis)`` up to rounding.

    Parameters
    ----------
    x : array_like, any shape
    block_size : int
        Entries of the softmax axis per block.
    axis : int
        The axis whose entries become probabilities.

    Returns
    -------
    ndarray, same shape and floating dtype as ``x``
        Sums to 1 along ``axis``; a slice of all -inf (fully masked) gives zeros, as ``M.softmax``.
        Float16 is computed in float32 and the result rounded to float16, as ``M.softmax`` does.

    Examples
    --------
    >>> online_softmax(np.array([1.0, 2.0, 3.0]), block_size=2).round(4)
    array([0.09  , 0.2447, 0.6652])
    """
    x = as_float_array(x, "x")
    require_softmax_axis(x, axis)
    rows = np.moveaxis(x, axis, -1)  # (..., m): the softmax axis last (a view)
    for _, s_max, z in online_softmax_steps(rows, block_size):
        pass  # the state after the last block
    z[z == 0] = 1  # only all -inf rows sum to 0; their exp(-inf) = 0 entries stay 0
    weights = np.exp(rows - shift_for_exp(s_max)) / z  # eq-ch7-final, in s_max's type (float32 for float16 input)
    return np.moveaxis(weights.astype(x.dtype, copy=False), -1, axis)  # back to x's type and layout


def _mask_tile(mask, rows, cols):
    """The part of a broadcastable (..., n or 1, m or 1) mask that covers the given rows and columns."""
    if mask.shape[-2] != 1:
        mask = mask[..., rows, :]
    if mask.shape[-1] != 1:
        mask = mask[..., cols]
    return mask


def _add_bias_tile(scores, bias, rows, cols):
    """Add to a (..., n_blk, m_blk) tile of scores, in place, the part of the score bias that covers it."""
    if bias is not None:
        scores += _mask_tile(bias, rows, cols)  # the same slicing as a mask's: (..., n_blk or 1, m_blk or 1)


def _block_forbidden(scores, mask, rows, cols, causal, window=None):
    """Set to -inf, in place, the scores of a (..., n_blk, m_blk) tile that the mask or causality forbids."""
    allowed = None if mask is None else _mask_tile(mask, rows, cols)
    if causal:
        gap = np.arange(rows.start, rows.stop)[:, None] - np.arange(cols.start, cols.stop)  # (n_blk, m_blk): i - j
        future_ok = (gap >= 0) if window is None else (gap >= 0) & (gap < window)  # and inside the window
        allowed = future_ok if allowed is None else allowed & future_ok
    if allowed is not None:
        np.copyto(scores, -np.inf, where=~allowed)  # weight exp(-inf) = 0


def _check_window(window):
    """True when a sliding window is given (a positive integer), False for None; ValueError otherwise."""
    if window is None:
        return False
    if not is_int(window) or window < 1:
        raise ValueError(f"window must be a positive integer (the keys each query sees), got {window!r}")
    return True


def _older_than_window(rows, cols, window):
    """True when every key of ``cols`` is older than the window of every query of ``rows``."""
    return window is not None and cols.stop - 1 < rows.start - window + 1


def _check_blockwise_inputs(q, k, v, mask, block_size, query_block):
    """The checked arrays, the mask with at least its query and key axes, the key block and the query tile."""
    q, k, v, mask = check_attention_inputs(q, k, v, mask)
    block_size = _check_block(block_size, "block_size")
    if mask is not None and mask.ndim < 2:  # a (m,) or scalar mask: give it its query and key axes
        mask = mask.reshape((1,) * (2 - mask.ndim) + mask.shape)  # -> (1, m) or (1, 1)
    tile = q.shape[-2] if query_block is None else _check_block(query_block, "query_block")
    return q, k, v, mask, block_size, tile


def _check_blockwise_bias(q, k, v, bias, dtype):
    """The score bias checked against q, k, v, with at least its query and key axes, in the arithmetic's ``dtype``."""
    bias = check_attention_bias(q, k, v, bias)
    if bias is None:
        return None
    return bias.reshape((1,) * max(0, 2 - bias.ndim) + bias.shape).astype(dtype, copy=False)  # -> (..., n or 1, m or 1)


def blockwise_attention(q, k, v, mask=None, *, block_size=128, query_block=None, causal=False, window=None,
                        bias=None):
    """softmax(q kᵀ / √d_k) v computed over blocks of keys, never holding the (..., n, m) weights.

    The output of ``blockwise_attention_with_lse``, which documents the arguments.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 7, 4)), rng.normal(size=(2, 7, 3))
    >>> out = blockwise_attention(q, k, v, block_size=3)          # B = 2; blocks of 3, 3 and 1 keys
    >>> from mha_lessons import scaled_dot_product_attention
    >>> plain, weights = scaled_dot_product_attention(q, k, v)    # builds the (2, 5, 7) weights
    >>> out.shape, bool(np.allclose(out, plain, rtol=1e-13, atol=0))
    ((2, 5, 3), True)
    """
    return blockwise_attention_with_lse(q, k, v, mask, block_size=block_size, query_block=query_block,
                                        causal=causal, window=window, bias=bias)[0]


def blockwise_attention_with_lse(q, k, v, mask=None, *, block_size=128, query_block=None, causal=False,
                                 window=None, bias=None):
    """Block-wise attention (``blockwise_attention``) and the log-sum-exp of each query's scores.

    The log-sum-exp (eq-ch7-lse) is what a backward pass keeps instead of the weights, from which
    it recomputes them block by block, as FlashAttention does (``blockwise_attention_backward``).

    Parameters
    ----------
    q, k, v, mask : as in ``M.scaled_dot_product_attention``
        A stored (n, m) mask is itself n·m bytes; for the causal pattern prefer ``causal=True``.
    block_size : int
        Keys per block (m_blk). The largest temporary array is one (..., n_blk, m_blk) block of scores.
    query_block : int, optional
        Queries per tile (n_blk); None processes all n queries with each block of keys.
    causal : bool
        Query i may attend to keys 0..i only, like ``mask=M.causal_mask(n, m)`` (combined with
        ``mask`` if both are given), computed tile by tile; key blocks entirely in the future of a
        query tile are skipped, never read (so, unlike in the plain version, a NaN in such a value
        does not reach that tile's outputs).
    window : int, optional
        Causal sliding-window attention (implies ``causal``): query i attends to keys j with
        0 <= i - j < window, like ``mask=M.masks.sliding_window_mask(n, m, window=window)``; key
        blocks entirely older than the window of every query of a tile are skipped too
        (``tiles_computed`` counts the tiles that remain).
    bias : array_like, broadcastable to (..., n, m), optional
        The additive score bias of ``M.scaled_dot_product_attention``, added tile by tile.

    Returns
    -------
    out : ndarray, (..., n, d_v)
        Equal to ``M.scaled_dot_product_attention(q, k, v, mask, bias)[0]`` up to rounding, with
        the same floating dtype (float32 stays float32; float16 is accumulated in float32 and
        rounded at the end).
    lse : ndarray, (..., n)
        log Σ_j exp(scaled, masked score); -inf for a query that sees nothing. In the arithmetic's
        type: float32 for float16 input (as FlashAttention keeps it), where it would overflow.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 7, 4))
    >>> out, lse = blockwise_attention_with_lse(q, k, k, block_size=3)
    >>> scores = q @ np.swapaxes(k, -1, -2) / 2                       # (2, 5, 7), √d_k = 2
    >>> lse.shape, bool(np.allclose(lse, np.log(np.exp(scores).sum(axis=-1))))
    ((2, 5), True)
    """
    q, k, v, mask, block_size, tile = _check_blockwise_inputs(q, k, v, mask, block_size, query_block)
    causal = _check_window(window) or causal  # a window is causal
    n, d_k = q.shape[-2:]
    m_keys, d_v = v.shape[-2:]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    result = np.result_type(q, k, v)
    dtype = working_dtype(result)  # float16 is accumulated in float32
    bias = _check_blockwise_bias(q, k, v, bias, dtype)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    q = q * (1 / math.sqrt(d_k))  # (..., n, d_k): scale the queries, as chapter 1 does (a Python float: no upcast)
    kt = np.swapaxes(k, -1, -2)  # (..., m, d_k) -> (..., d_k, m), a view
    out = np.empty(batch + (n, d_v), dtype=dtype)
    lse = np.empty(batch + (n,), dtype=dtype)
    for i0 in range(0, n, tile):  # query tiles (one tile of all n queries when query_block is None)
        rows = slice(i0, min(i0 + tile, n))
        n_blk = rows.stop - rows.start  # queries in this tile (query_block, or fewer in the last tile)
        s_max = np.full(batch + (n_blk, 1), -np.inf, dtype=dtype)  # (..., n_blk, 1) running maximum: s̃_max,0
        z = np.zeros(batch + (n_blk, 1), dtype=dtype)  # (..., n_blk, 1) running sum: Z_0
        acc = np.zeros(batch + (n_blk, d_v), dtype=dtype)  # (..., n_blk, d_v) running sum of values: acc_0
        for j0 in range(0, m_keys, block_size):  # key blocks: block u = j0 // block_size + 1 starts at key j0
            if causal and j0 > rows.stop - 1:
                break  # this block and every later one lie in the future of every query of the tile
            cols = slice(j0, min(j0 + block_size, m_keys))
            if _older_than_window(rows, cols, window):
                continue  # every key of this block is older than the window of every query of the tile
            # the scores of this tile against block u, the only (n_blk, m_blk) array:
            s = q[..., rows, :] @ kt[..., :, cols]  # (..., n_blk, d_k) @ (..., d_k, m_blk) -> (..., n_blk, m_blk)
            full = batch + s.shape[-2:]
            if s.shape != full:  # v (or the mask) has batch axes that q and k lack
                s = np.broadcast_to(s, full).copy()  # (..., n_blk, m_blk) -> (batch, n_blk, m_blk)
            _add_bias_tile(s, bias, rows, cols)
            _block_forbidden(s, mask, rows, cols, causal, window)  # forbidden pairs: score -inf, weight 0
            s_max_new = np.maximum(s_max, s.max(axis=-1, keepdims=True))  # eq-ch7-running-max, (..., n_blk, 1)
            shift = shift_for_exp(s_max_new)  # s̃_max,u, or 0 for rows that have seen only masked keys
            s -= shift
            np.exp(s, out=s)  # (..., n_blk, m_blk): exp(s - s_max_new), in place
            rescale = np.exp(s_max - shift)  # exp(s̃_max,u-1 - s̃_max,u), (..., n_blk, 1)
            z *= rescale  # eq-ch7-running-sum: Z_u-1, rescaled to the new maximum in place,
            z += s.sum(axis=-1, keepdims=True)  # plus block u's terms: Z_u
            acc *= rescale  # eq-ch7-running-acc: the same for the weighted sum of values,
            # plus block u's (..., n_blk, m_blk) @ (..., m_blk, d_v) -> (..., n_blk, d_v): acc_u
            acc += s @ v[..., cols, :]
            s_max = s_max_new  # s̃_max,u
            del s  # free this block's scores before the next block's exist: one (n_blk, m_blk) block at a time
        z_safe = np.where(z == 0, 1, z).astype(dtype)  # a row that saw nothing: 0 / 1 = 0
        out[..., rows, :] = acc / z_safe  # eq-ch7-final
        with np.errstate(divide="ignore"):  # log(0) = -inf for a row that saw nothing
            lse[..., rows] = (s_max + np.log(z))[..., 0]  # eq-ch7-lse, (..., n_blk, 1) -> (..., n_blk)
    return out.astype(result, copy=False), lse


def _sum_to_batch(grad, shape):
    """Sum ``grad`` (batch + (rows, width)) back to ``shape``, over the batch axes an input was broadcast along."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra)))  # leading batch axes the input did not have
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad  # batch axes of size 1 that were stretched


def blockwise_attention_backward(q, k, v, out, lse, d_out, mask=None, *, block_size=128, query_block=None,
                                 causal=False, window=None, bias=None):
    """Gradients of ``blockwise_attention`` with respect to q, k and v, tile by tile, without the (n, m) weights.

    The backward of chapter 5 needs the weights A and, for the softmax, the row sums
    δ_i = Σ_j da_ij a_ij (eq-ch5-softmax-backward). This pass uses instead what the forward
    kept by ``blockwise_attention_with_lse``: the output ``out`` and the log-sum-exp ``lse`` of each query.
    Because dA = dO Vᵀ and O = A V, δ_i = Σ_c do_ic o_ic (eq-ch7-delta), computed from the output
    before any block is read. Then every (n_blk, m_blk) tile of weights is recomputed from the log-sum-exp,
    p_ij = exp(s_ij − lse_i) (eq-ch7-recompute), and its part of each gradient is added in. Keys
    are the outer loop, so that dK and dV of one block are finished before the next block starts;
    dQ collects a part from every block. The largest temporary arrays are (n_blk, m_blk) tiles.

    Parameters
    ----------
    q, k, v, mask, block_size, query_block, causal, window, bias
        As given to ``blockwise_attention`` (the mask, ``causal``, ``window`` and the bias must be the same).
    out : array_like, (..., n, d_v)
        The forward's output.
    lse : array_like, (..., n)
        The forward's log-sum-exp (``blockwise_attention_with_lse``); -inf for a query that sees nothing.
    d_out : array_like, (..., n, d_v)
        ∂L/∂out.

    Returns
    -------
    dq, dk, dv : ndarrays, the shapes of q, k and v
        Equal to ``grads.sdpa_backward(q, k, v, d_out, mask)`` up to rounding. An input broadcast
        over batch dimensions receives the sum over every place it was used; a query that sees
        nothing gets zero gradient, and so do the keys and values only it could see.
        Float16 is computed in float32 and the gradients rounded to float16.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(7, 4)), rng.normal(size=(7, 3))
    >>> out, lse = blockwise_attention_with_lse(q, k, v, block_size=3)
    >>> d_out = rng.normal(size=(5, 3))
    >>> dq, dk, dv = blockwise_attention_backward(q, k, v, out, lse, d_out, block_size=3)
    >>> from mha_lessons.grads import sdpa_backward                # builds the (5, 7) weights
    >>> all(np.allclose(a, b, rtol=1e-12, atol=1e-14) for a, b in zip((dq, dk, dv), sdpa_backward(q, k, v, d_out)))
    True
    """
    q, k, v, mask, block_size, tile = _check_blockwise_inputs(q, k, v, mask, block_size, query_block)
    causal = _check_window(window) or causal  # a window is causal
    n, d_k = q.shape[-2:]
    m_keys, d_v = v.shape[-2:]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    result = np.result_type(q, k, v)
    dtype = working_dtype(result)  # float16 is accumulated in float32
    bias = _check_blockwise_bias(q, k, v, bias, dtype)
    expected = {"out": batch + (n, d_v), "lse": batch + (n,), "d_out": batch + (n, d_v)}
    given = {}
    for name, array in (("out", out), ("lse", lse), ("d_out", d_out)):
        given[name] = as_float_array(array, name)
        if given[name].shape != expected[name]:
            raise ValueError(f"{name} has shape {given[name].shape}, but q {q.shape}, k {k.shape} and v {v.shape} "
                             f"give the forward's {name} the shape {expected[name]}")
    out, lse, d_out = given["out"], given["lse"], given["d_out"]
    q, k, v, out, d_out = (a.astype(working_dtype(a.dtype), copy=False) for a in (q, k, v, out, d_out))
    scale = 1 / math.sqrt(d_k)  # a Python float: float32 stays float32
    qf = np.broadcast_to(q, batch + (n, d_k))  # (..., n, d_k), a view with the full batch axes
    kf = np.broadcast_to(k, batch + (m_keys, d_k))  # (..., m, d_k)
    vf = np.broadcast_to(v, batch + (m_keys, d_v))  # (..., m, d_v)
    # eq-ch7-delta: δ = rowsum(dO ⊙ O) = rowsum(dA ⊙ A), one number per query, (..., n, 1)
    delta = np.sum(d_out * out, axis=-1, keepdims=True, dtype=dtype)
    lse_col = shift_for_exp(lse[..., None].astype(dtype))  # (..., n, 1); 0 for a query that sees nothing
    dq = np.zeros(batch + (n, d_k), dtype=dtype)
    dk = np.zeros(batch + (m_keys, d_k), dtype=dtype)
    dv = np.zeros(batch + (m_keys, d_v), dtype=dtype)
    for j0 in range(0, m_keys, block_size):  # key block u = j0 // block_size + 1: its dK and dV are finished here
        cols = slice(j0, min(j0 + block_size, m_keys))
        k_blk, v_blk = kf[..., cols, :], vf[..., cols, :]  # (..., m_blk, d_k), (..., m_blk, d_v)
        for i0 in range(0, n, tile):  # query tiles
            rows = slice(i0, min(i0 + tile, n))
            if causal and j0 > rows.stop - 1 or _older_than_window(rows, cols, window):
                continue  # every key of this block lies in the future of (or too far back for) every query
            # the forward's scores of this tile against block u:
            # (..., n_blk, d_k) @ (..., d_k, m_blk) -> (..., n_blk, m_blk)
            p = (qf[..., rows, :] * scale) @ np.swapaxes(k_blk, -1, -2)
            _add_bias_tile(p, bias, rows, cols)
            _block_forbidden(p, mask, rows, cols, causal, window)  # forbidden pairs: score -inf, weight 0
            p -= lse_col[..., rows, :]
            # eq-ch7-recompute: p_ij = exp(s_ij - lse_i), the weights of this tile, (..., n_blk, m_blk)
            np.exp(p, out=p)
            do_blk = d_out[..., rows, :]  # (..., n_blk, d_v)
            # eq-ch5-dv: (..., m_blk, n_blk) @ (..., n_blk, d_v)
            dv[..., cols, :] += np.swapaxes(p, -1, -2) @ do_blk
            # eq-ch5-da: dA of this tile, (..., n_blk, d_v) @ (..., d_v, m_blk)
            ds = do_blk @ np.swapaxes(v_blk, -1, -2)
            ds -= delta[..., rows, :]  # eq-ch5-softmax-backward with eq-ch7-delta: da_ij - δ_i
            ds *= p  # ... times p_ij: dS̃ of this tile, in place, (..., n_blk, m_blk)
            ds *= scale  # eq-ch5-scale: dS = dS̃ / √d_k
            dq[..., rows, :] += ds @ k_blk  # eq-ch5-dq: (..., n_blk, m_blk) @ (..., m_blk, d_k)
            # eq-ch5-dk: (..., m_blk, n_blk) @ (..., n_blk, d_k)
            dk[..., cols, :] += np.swapaxes(ds, -1, -2) @ qf[..., rows, :]
            del p, ds  # free this tile before the next one exists
    return tuple(_sum_to_batch(g, x.shape).astype(result, copy=False) for g, x in ((dq, q), (dk, k), (dv, v)))


# ---------------------------------------------------------------- counting tiles, and splitting the keys

def tiles_computed(n, m, block_size, query_block=None, *, causal=False, window=None):
    """How many (query tile, key block) pairs ``blockwise_attention`` computes; the others it skips.

    The same rules as the pass itself: with ``causal`` a key block in the future of every query
    of a tile is skipped, with ``window`` also a block older than every query's window.

    Examples
    --------
    >>> tiles_computed(8, 8, 2, 2), tiles_computed(8, 8, 2, 2, causal=True), tiles_computed(8, 8, 2, 2, window=2)
    (16, 10, 7)
    """
    for name, value in (("n", n), ("m", m)):
        if not is_int(value) or value < 1:
            raise ValueError(f"tiles_computed needs positive integer sizes, got {name} = {value!r}")
    block_size = _check_block(block_size, "block_size")
    tile = n if query_block is None else _check_block(query_block, "query_block")
    causal = _check_window(window) or causal
    count = 0
    for i0 in range(0, n, tile):
        rows = slice(i0, min(i0 + tile, n))
        for j0 in range(0, m, block_size):
            cols = slice(j0, min(j0 + block_size, m))
            count += not (causal and j0 > rows.stop - 1 or _older_than_window(rows, cols, window))
    return count


def attention_state(q, k, v, mask=None, *, bias=None):
    """The running state (s_max, z, acc) of eq-ch7-state and eq-ch7-running-acc for one chunk of keys.

    For each query: ``s_max`` the largest allowed scaled score of the chunk (-inf if none),
    ``z`` the sum of exp(score - s_max), ``acc`` the sum of exp(score - s_max) · value. Chunks
    processed independently are combined by ``merge_states``; ``acc / z`` of the merged state is
    the attention output over all the chunks' keys.

    Parameters
    ----------
    q : array_like, (..., n, d_k)
    k, v : array_like, (..., m_c, d_k) and (..., m_c, d_v): one chunk of keys and values
    mask : array_like of bool, broadcastable to (..., n, m_c), optional
    bias : array_like, broadcastable to (..., n, m_c), optional
        The additive score bias of ``M.scaled_dot_product_attention`` for this chunk's keys.

    Returns
    -------
    s_max, z : ndarrays, (..., n, 1)
    acc : ndarray, (..., n, d_v)
        In the arithmetic's type: float32 for float16 input (a float16 z or acc overflows at 65504).

    Examples
    --------
    >>> s_max, z, acc = attention_state(np.zeros((1, 2)), np.zeros((3, 2)), np.ones((3, 1)))
    >>> float(s_max[0, 0]), float(z[0, 0]), float(acc[0, 0])     # three equal scores 0
    (0.0, 3.0, 3.0)
    """
    q, k, v, mask = check_attention_inputs(q, k, v, mask)
    bias = check_attention_bias(q, k, v, bias)
    dtype = working_dtype(np.result_type(q, k, v))  # float16 is accumulated in float32
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]))  # (..., n, d_k) @ (..., d_k, m_c)
    if bias is not None:
        s = s + bias.astype(dtype, copy=False)  # (..., n, m_c), broadcast
    if mask is not None:
        s = np.where(mask, s, -np.inf)  # (..., n, m_c)
    s_max = s.max(axis=-1, keepdims=True)  # (..., n, 1)
    p = np.exp(s - shift_for_exp(s_max))  # (..., n, m_c); 0 where masked
    return s_max, p.sum(axis=-1, keepdims=True), p @ v  # (..., n, 1), (..., n, 1), (..., n, d_v)


def merge_states(*states):
    """Merge the states (s_max, z, acc) of disjoint chunks of keys into the state of all of them.

    Each part is brought to the common maximum by its rescale factor exp(s_max_part - s_max),
    exactly as eq-ch7-running-sum and eq-ch7-running-acc bring the old state to a new block's
    maximum; parts whose keys were all masked (s_max = -inf) contribute nothing.

    Examples
    --------
    >>> a = (np.array([[1.0]]), np.array([[1.0]]), np.array([[2.0]]))   # one key: score 1, value 2
    >>> b = (np.array([[1.0]]), np.array([[1.0]]), np.array([[4.0]]))   # one key: score 1, value 4
    >>> s_max, z, acc = merge_states(a, b)
    >>> float((acc / z)[0, 0])                                            # equal weights: the mean
    3.0
    """
    if not states:
        raise ValueError("merge_states needs at least one state")
    states = [tuple(a.astype(working_dtype(a.dtype), copy=False)  # float16 parts are merged in float32
                    for a in (as_float_array(x, name) for x, name in zip(state, ("s_max", "z", "acc"))))
              for state in states]
    s_max = np.maximum.reduce([state[0] for state in states])  # (..., n, 1)
    shift = shift_for_exp(s_max)
    z, acc = 0, 0
    for part_max, part_z, part_acc in states:
        rescale = np.exp(part_max - shift)  # exp(s_max_part - s_max) <= 1; 0 for an empty part
        z, acc = z + rescale * part_z, acc + rescale * part_acc
    return s_max, z, acc


def split_kv_attention(q, k, v, mask=None, *, num_splits, bias=None):
    """Attention with the keys split into ``num_splits`` chunks processed independently, then merged.

    Flash-Decoding's split over the keys: when one query (a decoding step) meets a long cache, the
    chunks of the cache can be processed in parallel, each giving a state (``attention_state``),
    and the states are merged (``merge_states``). Equal to ``scaled_dot_product_attention(q, k, v,
    mask, bias)[0]`` up to rounding; a query that sees no key gets zeros.

    Parameters
    ----------
    q, k, v, mask, bias : as in ``M.scaled_dot_product_attention``
    num_splits : int
        Number of chunks of keys, 1 .. m (the last one may be shorter).

    Returns
    -------
    out : ndarray, (..., n, d_v)
        The floating dtype of the inputs; float16 is accumulated in float32 and rounded at the end.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(1, 4)), rng.normal(size=(10, 4)), rng.normal(size=(10, 3))
    >>> from mha_lessons import scaled_dot_product_attention
    >>> bool(np.allclose(split_kv_attention(q, k, v, num_splits=3), scaled_dot_product_attention(q, k, v)[0]))
    True
    """
    q, k, v, mask = check_attention_inputs(q, k, v, mask)
    bias = check_attention_bias(q, k, v, bias)
    m_keys = k.shape[-2]
    if not is_int(num_splits) or not 1 <= num_splits <= m_keys:
        raise ValueError(f"num_splits must be an integer from 1 to m = {m_keys} (k of shape {k.shape}), "
                         f"got {num_splits!r}")
    if mask is not None and mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + mask.shape)  # (m,) -> (1, m)
    if bias is not None and bias.ndim < 2:
        bias = bias.reshape((1,) * (2 - bias.ndim) + bias.shape)  # (m,) or () -> (1, m) or (1, 1)
    chunk = -(-m_keys // num_splits)  # keys per chunk, rounded up
    states = []
    for j0 in range(0, m_keys, chunk):
        cols = slice(j0, min(j0 + chunk, m_keys))
        part_mask = None if mask is None else (mask if mask.shape[-1] == 1 else mask[..., cols])
        part_bias = None if bias is None else (bias if bias.shape[-1] == 1 else bias[..., cols])
        states.append(attention_state(q, k[..., cols, :], v[..., cols, :], part_mask, bias=part_bias))  # independent
    _, z, acc = merge_states(*states)
    out = acc / np.where(z == 0, 1, z)  # (..., n, d_v); a query that sees nothing: 0 / 1
    return out.astype(np.result_type(q, k, v), copy=False)  # float32 arithmetic rounded back for float16 input
