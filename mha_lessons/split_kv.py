"""Attention over chunks of keys processed independently, then merged (chapter 7, and Flash-Decoding in chapter 10).

Each chunk of keys gives a state (s_max, z, acc): the largest allowed scaled score, the sum of
exp(score - s_max) and the sum of exp(score - s_max) · value, per query (eq-ch7-state). States of
disjoint chunks merge exactly, each brought to the common maximum by its rescale factor, as the online
softmax brings its old sum to a new block's maximum (``online_softmax.py``). Axis names as in
``blockwise.py``, with ``m_c`` the keys of one chunk.
"""

import math

import numpy as np

from ._checks import as_float_array, check_attention_call, is_int, working_dtype
from .online_softmax import shift_for_exp
from .tiles import tile_of, with_tile_axes


def attention_state(q, k, v, mask=None, *, bias=None, check_input=True):
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
    check_input : bool, keyword-only
        False for a caller that has checked the arrays already (``split_kv_attention``).

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
    if check_input:  # the only check: the steps below trust their input
        q, k, v, mask, bias = check_attention_call(q, k, v, mask, bias)
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


def merge_states(*states, check_input=True):
    """Merge the states (s_max, z, acc) of disjoint chunks of keys into the state of all of them.

    Each part is brought to the common maximum by its rescale factor exp(s_max_part - s_max),
    exactly as eq-ch7-running-sum and eq-ch7-running-acc bring the old state to a new block's
    maximum; parts whose keys were all masked (s_max = -inf) contribute nothing. ``check_input=False``
    (keyword-only) is for a caller whose states are float arrays already (``split_kv_attention``).

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
    if check_input:  # states from attention_state are float arrays already (split_kv_attention passes False)
        states = [tuple(as_float_array(x, name) for x, name in zip(state, ("s_max", "z", "acc"))) for state in states]
    states = [tuple(a.astype(working_dtype(a.dtype), copy=False) for a in state)  # float16 parts merged in float32
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
    q, k, v, mask, bias = check_attention_call(q, k, v, mask, bias)  # once, here
    m_keys = k.shape[-2]
    if not is_int(num_splits) or not 1 <= num_splits <= m_keys:
        raise ValueError(f"num_splits must be an integer from 1 to m = {m_keys} (k of shape {k.shape}), "
                         f"got {num_splits!r}")
    mask, bias = with_tile_axes(mask), with_tile_axes(bias)  # (m,) or () -> (1, m) or (1, 1)
    chunk = -(-m_keys // num_splits)  # keys per chunk, rounded up
    every_query = slice(None)
    states = []
    for j0 in range(0, m_keys, chunk):
        cols = slice(j0, min(j0 + chunk, m_keys))
        part_mask = None if mask is None else tile_of(mask, every_query, cols)  # (..., n or 1, m_c or 1)
        part_bias = None if bias is None else tile_of(bias, every_query, cols)
        states.append(attention_state(q, k[..., cols, :], v[..., cols, :], part_mask, bias=part_bias,
                                      check_input=False))  # independent
    _, z, acc = merge_states(*states, check_input=False)
    out = acc / np.where(z == 0, 1, z)  # (..., n, d_v); a query that sees nothing: 0 / 1
    return out.astype(np.result_type(q, k, v), copy=False)  # float32 arithmetic rounded back for float16 input
