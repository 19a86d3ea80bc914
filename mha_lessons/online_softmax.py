"""The online softmax (chapter 7): the softmax of a row computed block by block, with a running maximum and sum.

Axis names as in ``blockwise.py``: ``m`` the entries of a row (keys), ``m_blk`` entries per block, block ``u``.

The running maximum s_max and the running sum z of exp(score - s_max) are updated as each block
arrives; when a block brings a larger maximum, the old sum is multiplied by exp(s_max_old - s_max_new),
which turns it into a sum relative to the new maximum (Milakov and Gimelshein, 2018). The block-wise
attention of ``blockwise.py`` keeps the same two numbers per query.
"""

import numpy as np

from ._checks import as_float_array, require_softmax_axis, working_dtype
from .tiles import check_block


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
        Running maximum s̃_max,u after u blocks, eq-ch7-running-max: the largest entry of ``x[..., :stop]``.
    z : ndarray, (..., 1)
        Running sum Z_u after u blocks, eq-ch7-running-sum: ``sum(exp(x[..., :stop] - s_max))``.
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
    block_size = check_block(block_size, "block_size")
    dtype = working_dtype(x.dtype)  # float32 for float16 input
    s_max = np.full(x.shape[:-1] + (1,), -np.inf, dtype=dtype)  # (..., 1) nothing seen yet: s̃_max,0
    z = np.zeros(x.shape[:-1] + (1,), dtype=dtype)  # (..., 1): Z_0
    for start in range(0, x.shape[-1], block_size):  # block u = start // block_size: state u -> u + 1
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
