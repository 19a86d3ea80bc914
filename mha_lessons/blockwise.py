"""Attention without the (n, m) matrix: the online softmax, and block-wise ("flash"-style) forward and backward passes.

Axis names as in ``attention.py`` (``...`` batch, ``n`` queries, ``m`` keys, ``d_k``, ``d_v``), and

    m_blk  keys per block (``block_size``): the key axis is cut into blocks of m_blk keys, the last maybe fewer
    n_blk  queries per tile (``query_block``; all n queries when it is None), the last tile maybe fewer
    u      the number of a key block, 0, 1, ...: block u holds the keys u m_blk ... (u + 1) m_blk - 1

as chapter 7 names them (``m`` is the number of keys, never a maximum).

The block-wise pass keeps three running quantities per query row and updates them as each block of
keys arrives (chapter 7 derives them, with the names in brackets; the comments name its equations):

    s_max  the largest scaled score seen so far (s̃_max,u after u blocks)   (..., n_blk, 1)
    z      the sum of exp(score - s_max) over the keys seen (Z_u)          (..., n_blk, 1)
    acc    the sum of exp(score - s_max) · value over those keys (acc_u)   (..., n_blk, d_v)

``online_softmax_steps`` (``online_softmax.py``), ``attention_state`` (``split_kv.py``) and
``blockwise_attention_with_lse`` use these names (in the last, one value per query of a tile). When a block brings a larger maximum, the old z and acc are
multiplied by exp(s_max_old - s_max_new), which turns them into sums relative to the new maximum. At
the end ``acc / z`` is exactly softmax · V, but the largest array that ever existed was one
(..., n_blk, m_blk) block of scores, never the (..., n, m) weights.

The backward pass (``blockwise_attention_backward``) works tile by tile too. From the output and the
log-sum-exp that the forward kept it gets, per query row,

    δ      rowsum(dO ⊙ O), which equals rowsum(dA ⊙ A) (eq-ch7-delta)   (..., n, 1)

and then recomputes each (n_blk, m_blk) tile of weights from the log-sum-exp instead of storing them.
Milakov and Gimelshein (2018) describe the running maximum and sum; Dao et al. (2022) build
FlashAttention on the same update, and its backward on the same recomputation.

How the scores are cut into tiles, and which tiles a causal or windowed pass skips, is ``tiles.py``;
the online softmax of one row (``online_softmax``, ``shift_for_exp``) and the states of independent
chunks of keys (``attention_state``, ``merge_states``, ``split_kv_attention``) have modules of their
own and are reachable here too.
"""

import math

import numpy as np

from ._checks import as_float_array, check_attention_call, is_int, working_dtype
from .grads import _sum_to_shape
from .online_softmax import online_softmax, online_softmax_steps, shift_for_exp  # noqa: F401  (reachable here)
from .split_kv import attention_state, merge_states, split_kv_attention  # noqa: F401  (reachable here)
from .tiles import Tiling, add_bias_tile, check_block, check_window, with_tile_axes


def _tiling(n, block_size, query_block, causal, window):
    """The checked ``Tiling`` of a pass over n queries (all n in one tile when query_block is None; a window is
    causal)."""
    tile = n if query_block is None else check_block(query_block, "query_block")
    return Tiling(check_block(block_size, "block_size"), tile, causal=check_window(window) or bool(causal),
                  window=window)


def _check_blockwise_call(q, k, v, mask, bias, block_size, query_block, causal, window):
    """Everything a block-wise pass is given, checked once: the arrays (a mask or bias with at least its query
    and key axes) and the ``Tiling`` of the scores."""
    q, k, v, mask, bias = check_attention_call(q, k, v, mask, bias)
    tiling = _tiling(q.shape[-2], block_size, query_block, causal, window)
    return q, k, v, with_tile_axes(mask), with_tile_axes(bias), tiling


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
    q, k, v, mask, bias, tiling = _check_blockwise_call(q, k, v, mask, bias, block_size, query_block, causal,
                                                        window)  # once, here: the loop below trusts its input
    n, d_k = q.shape[-2:]
    m_keys, d_v = v.shape[-2:]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    result = np.result_type(q, k, v)
    dtype = working_dtype(result)  # float16 is accumulated in float32
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    bias = None if bias is None else bias.astype(dtype, copy=False)
    q = q * (1 / math.sqrt(d_k))  # (..., n, d_k): scale the queries, as chapter 1 does (a Python float: no upcast)
    kt = np.swapaxes(k, -1, -2)  # (..., m, d_k) -> (..., d_k, m), a view
    out = np.empty(batch + (n, d_v), dtype=dtype)
    lse = np.empty(batch + (n,), dtype=dtype)
    for rows in tiling.query_tiles(n):  # query tiles (one tile of all n queries when query_block is None)
        n_blk = rows.stop - rows.start  # queries in this tile (query_block, or fewer in the last tile)
        s_max = np.full(batch + (n_blk, 1), -np.inf, dtype=dtype)  # (..., n_blk, 1) running maximum: s̃_max,0
        z = np.zeros(batch + (n_blk, 1), dtype=dtype)  # (..., n_blk, 1) running sum: Z_0
        acc = np.zeros(batch + (n_blk, d_v), dtype=dtype)  # (..., n_blk, d_v) running sum of values: acc_0
        for cols in tiling.key_blocks(m_keys):  # key blocks: block u = cols.start // block_size
            if tiling.skips(rows, cols):
                continue  # every key of this block lies in the future of (or too far back for) every query of the tile
            # the scores of this tile against block u, the only (n_blk, m_blk) array:
            s = q[..., rows, :] @ kt[..., :, cols]  # (..., n_blk, d_k) @ (..., d_k, m_blk) -> (..., n_blk, m_blk)
            full = batch + s.shape[-2:]
            if s.shape != full:  # v (or the mask) has batch axes that q and k lack
                s = np.broadcast_to(s, full).copy()  # (..., n_blk, m_blk) -> (batch, n_blk, m_blk)
            add_bias_tile(s, bias, rows, cols)
            tiling.forbid(s, mask, rows, cols)  # forbidden pairs: score -inf, weight 0
            s_max_new = np.maximum(s_max, s.max(axis=-1, keepdims=True))  # eq-ch7-running-max, (..., n_blk, 1)
            shift = shift_for_exp(s_max_new)  # s̃_max,u+1, or 0 for rows that have seen only masked keys
            s -= shift
            np.exp(s, out=s)  # (..., n_blk, m_blk): exp(s - s_max_new), in place
            rescale = np.exp(s_max - shift)  # exp(s̃_max,u - s̃_max,u+1), (..., n_blk, 1)
            z *= rescale  # eq-ch7-running-sum: Z_u, rescaled to the new maximum in place,
            z += s.sum(axis=-1, keepdims=True)  # plus block u's terms: Z_u+1
            acc *= rescale  # eq-ch7-running-acc: the same for the weighted sum of values,
            # plus block u's (..., n_blk, m_blk) @ (..., m_blk, d_v) -> (..., n_blk, d_v): acc_u+1
            acc += s @ v[..., cols, :]
            s_max = s_max_new  # s̃_max,u+1
            del s  # free this block's scores before the next block's exist: one (n_blk, m_blk) block at a time
        z_safe = np.where(z == 0, 1, z).astype(dtype)  # a row that saw nothing: 0 / 1 = 0
        out[..., rows, :] = acc / z_safe  # eq-ch7-final
        with np.errstate(divide="ignore"):  # log(0) = -inf for a row that saw nothing
            lse[..., rows] = (s_max + np.log(z))[..., 0]  # eq-ch7-lse, (..., n_blk, 1) -> (..., n_blk)
    return out.astype(result, copy=False), lse


def _check_backward_call(q, k, v, out, lse, d_out, mask, bias, block_size, query_block, causal, window):
    """The forward's arguments (``_check_blockwise_call``), and out, lse and d_out of the forward's shapes."""
    q, k, v, mask, bias, tiling = _check_blockwise_call(q, k, v, mask, bias, block_size, query_block, causal, window)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n, d_v = q.shape[-2], v.shape[-1]
    expected = {"out": batch + (n, d_v), "lse": batch + (n,), "d_out": batch + (n, d_v)}
    given = {}
    for name, array in (("out", out), ("lse", lse), ("d_out", d_out)):
        given[name] = as_float_array(array, name)
        if given[name].shape != expected[name]:
            raise ValueError(f"{name} has shape {given[name].shape}, but q {q.shape}, k {k.shape} and v {v.shape} "
                             f"give the forward's {name} the shape {expected[name]}")
    return q, k, v, mask, bias, tiling, given["out"], given["lse"], given["d_out"]


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
    q, k, v, mask, bias, tiling, out, lse, d_out = _check_backward_call(
        q, k, v, out, lse, d_out, mask, bias, block_size, query_block, causal, window)  # once, here
    n, d_k = q.shape[-2:]
    m_keys, d_v = v.shape[-2:]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    result = np.result_type(q, k, v)
    dtype = working_dtype(result)  # float16 is accumulated in float32
    bias = None if bias is None else bias.astype(dtype, copy=False)
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
    for cols in tiling.key_blocks(m_keys):  # key block u = cols.start // block_size: its dK and dV finish here
        k_blk, v_blk = kf[..., cols, :], vf[..., cols, :]  # (..., m_blk, d_k), (..., m_blk, d_v)
        for rows in tiling.query_tiles(n):  # query tiles
            if tiling.skips(rows, cols):
                continue  # every key of this block lies in the future of (or too far back for) every query
            # the forward's scores of this tile against block u:
            # (..., n_blk, d_k) @ (..., d_k, m_blk) -> (..., n_blk, m_blk)
            p = (qf[..., rows, :] * scale) @ np.swapaxes(k_blk, -1, -2)
            add_bias_tile(p, bias, rows, cols)
            tiling.forbid(p, mask, rows, cols)  # forbidden pairs: score -inf, weight 0
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
    return tuple(_sum_to_shape(g, x.shape).astype(result, copy=False) for g, x in ((dq, q), (dk, k), (dv, v)))


# ---------------------------------------------------------------- counting tiles

def tiles_computed(n, m, block_size, query_block=None, *, causal=False, window=None):
    """How many (query tile, key block) pairs ``blockwise_attention`` computes; the others it skips.

    The same rule as the pass itself (``Tiling.skips``): with ``causal`` a key block in the future of
    every query of a tile is skipped, with ``window`` also a block older than every query's window.

    Examples
    --------
    >>> tiles_computed(8, 8, 2, 2), tiles_computed(8, 8, 2, 2, causal=True), tiles_computed(8, 8, 2, 2, window=2)
    (16, 10, 7)
    """
    for name, value in (("n", n), ("m", m)):
        if not is_int(value) or value < 1:
            raise ValueError(f"tiles_computed needs positive integer sizes, got {name} = {value!r}")
    tiling = _tiling(n, block_size, query_block, causal, window)
    return sum(not tiling.skips(rows, cols) for rows in tiling.query_tiles(n) for cols in tiling.key_blocks(m))
