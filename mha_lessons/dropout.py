"""Dropout on the attention weights: between the softmax (step 3) and the weighted sum (step 4).

While training, each weight a_ij is kept with probability 1 - p_drop and set to
0 otherwise; the kept ones are divided by 1 - p_drop ("inverted" dropout), so
that each weight keeps its expected value and nothing needs rescaling at
evaluation time, where dropout is switched off. A dropped weight means: for
this training step, query i does not read value j.

Axis names (as in ``attention.py``): ``...`` batch axes (B, and h for heads),
n queries, m keys. torch's ``torch.nn.functional.dropout(x, p)`` computes the
same ``x * keep / (1 - p)`` with a mask from its own random generator; passing
``keep_mask`` reproduces any mask it drew.
"""

import numbers

import numpy as np

from ._checks import as_float_array, require_ndim


def _check_p_drop(p_drop):
    if isinstance(p_drop, bool) or not isinstance(p_drop, numbers.Real) or not 0 <= p_drop < 1:
        raise ValueError(
            f"p_drop must be a number with 0 <= p_drop < 1 (the probability of dropping a weight), got {p_drop!r}"
        )
    return float(p_drop)


def draw_keep_mask(shape, p_drop, *, seed):
    """A boolean array of ``shape``, each entry True (kept) with probability 1 - p_drop, independently.

    ``seed`` is anything ``np.random.default_rng`` accepts except None: the
    mask is reproducible.

    Examples
    --------
    >>> keep = draw_keep_mask((1000, 1000), 0.1, seed=0)
    >>> keep.shape, keep.dtype, bool(abs(keep.mean() - 0.9) < 0.002)
    ((1000, 1000), dtype('bool'), True)
    """
    p_drop = _check_p_drop(p_drop)
    if seed is None:
        raise ValueError("draw_keep_mask needs a seed, so that the mask can be drawn again")
    return np.random.default_rng(seed).random(shape) >= p_drop  # P(u >= p_drop) = 1 - p_drop for u ~ U[0, 1)


def attention_dropout(weights, p_drop, *, keep_mask=None, seed=None, training=True):
    """Inverted dropout of attention weights: ``weights * keep_mask / (1 - p_drop)`` while training.

    Parameters
    ----------
    weights : array_like, (..., n, m)
        Attention weights after the softmax (step 3), before they multiply the values.
    p_drop : float, 0 <= p_drop < 1
        Probability that a weight is dropped (set to 0).
    keep_mask : array_like of bool, broadcastable to weights' shape, keyword-only
        True where a weight is kept. Give either this or ``seed`` when training.
    seed : int, keyword-only
        Draws the keep mask with ``draw_keep_mask(weights.shape, p_drop, seed=seed)``.
    training : bool, keyword-only
        False (evaluation) returns ``weights`` unchanged, whatever the other arguments.

    Returns
    -------
    ndarray, (..., n, m)
        Kept weights scaled by 1 / (1 - p_drop), dropped ones 0. A row then no
        longer sums to 1: it sums to (sum of its kept weights) / (1 - p_drop),
        which is 1 only on average over masks.

    Raises ValueError for p_drop outside [0, 1), for weights with fewer than 2
    axes, for a keep mask that is not boolean or does not broadcast to the
    weights, and, when training, unless exactly one of keep_mask and seed is given.

    Examples
    --------
    >>> w = np.array([[0.5, 0.25, 0.25]])
    >>> attention_dropout(w, 0.5, keep_mask=np.array([[True, False, True]]))
    array([[1. , 0. , 0.5]])
    >>> attention_dropout(w, 0.5, training=False)          # evaluation: the weights themselves
    array([[0.5 , 0.25, 0.25]])
    """
    p_drop = _check_p_drop(p_drop)
    weights = as_float_array(weights, "weights")
    require_ndim(weights, "weights", 2, "(..., n, m)")
    if not training:
        return weights
    if (keep_mask is None) == (seed is None):
        raise ValueError("when training, give exactly one of keep_mask (True = kept) and seed")
    if keep_mask is None:
        keep_mask = draw_keep_mask(weights.shape, p_drop, seed=seed)
    keep_mask = np.asarray(keep_mask)
    if keep_mask.dtype != np.bool_:
        raise ValueError(f"keep_mask must be boolean (True = kept), got dtype {keep_mask.dtype}")
    try:
        shape = np.broadcast_shapes(keep_mask.shape, weights.shape)
    except ValueError:
        shape = None
    if shape != weights.shape:
        raise ValueError(f"keep_mask of shape {keep_mask.shape} does not broadcast to the weights' shape {weights.shape}")
    scale = 1 / (1 - p_drop)  # multiply by 1 / (1 - p_drop), as torch does, rather than divide by 1 - p_drop
    return np.where(keep_mask, weights * scale, 0.0).astype(weights.dtype, copy=False)  # (..., n, m)
