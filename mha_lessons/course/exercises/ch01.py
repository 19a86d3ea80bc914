"""Checkers for chapter 1 (scaled dot-product attention).

Axis names: n queries, m keys (and values), d_k the width of a query or key, d_v the width of a value.
"""

import math

import numpy as np

from ...attention import scaled_dot_product_attention, softmax
from ._verdict import Verdict, call_learner, compare


def check_zero_query_weights(weights, m=5):
    """Check the predicted attention weights of a query of zeros over ``m`` keys: 1/m each.

    Parameters
    ----------
    weights : array_like, (m,) or (1, m)
        One weight per key.
    m : int
        The number of keys (5 in the chapter's example).

    >>> import numpy as np, mha_lessons as M
    >>> M.exercises.check_zero_query_weights(np.full(5, 0.2))
    Right: equal scores give equal weights, 1/m each.
    """
    answer = weights
    if answer is not None and np.ndim(answer) == 2 and np.shape(answer)[0] == 1:
        answer = np.asarray(answer)[0]  # (1, m) -> (m,), the shape scaled_dot_product_attention gives one query
    if answer is not None and np.ndim(answer) == 0 and not isinstance(answer, str):
        return Verdict(False, f"give one weight per key: an array of m = {m} numbers, not a single number.")
    mistakes = [
        (np.zeros(m), "a score of 0 does not mean a weight of 0: exp(0) = 1 for every key, "
                      "and the softmax then divides by the sum."),
        (np.ones(m), "exp(0) = 1 for every key, but weights sum to 1: divide by the sum of the exponentials."),
    ]
    return compare(answer, np.full(m, 1 / m), mistakes, what="your prediction",
                   right="equal scores give equal weights, 1/m each.")


def check_attend_one(attend_one):
    """Check ``attend_one(q, K, V)``: attention for one query q (d_k,), keys K (m, d_k), values V (m, d_v).

    The function is called on seeded random inputs and its result compared with the package's; the
    mistakes it recognises are a missing or wrong scale, weights that are not normalised, a missing
    softmax, and returning the weights instead of the weighted sum of the values.

    >>> import mha_lessons as M
    >>> M.exercises.check_attend_one(lambda q, K, V: M.scaled_dot_product_attention(q[None], K, V)[0][0])
    Right: your function matches the package on a random query, 6 keys and d_k = 4.
    """
    rng = np.random.default_rng(1)
    q, K, V = rng.normal(size=4), rng.normal(size=(6, 4)), rng.normal(size=(6, 3))  # d_k = 4, m = 6, d_v = 3
    answer, failure = call_learner(attend_one, q.copy(), K.copy(), V.copy(), name="attend_one")
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    scores = K @ q  # (m,)
    mistakes = [
        (softmax(scores) @ V, "the scores are not divided by sqrt(d_k): scale them before the softmax."),
        (softmax(scores / 4) @ V, "the scores are divided by d_k; the scale is 1/sqrt(d_k)."),
        (np.exp(scores / 2) @ V, "the weights do not sum to 1: divide the exponentials by their sum."),
        (np.exp(scores / 2 - (scores / 2).max()) @ V,
         "the weights do not sum to 1: subtracting the maximum keeps exp finite, but you still need to divide by the sum."),
        ((scores / 2) @ V, "the softmax is missing: the weights are the softmax of the scaled scores."),
        (softmax(scores / 2), "these are the 6 weights, one per key; return their weighted sum of the values, "
                              "a vector of width d_v = 3."),
    ]
    expected = scaled_dot_product_attention(q[None], K, V)[0][0]  # (1, d_v) -> (d_v,)
    return compare(answer, expected, mistakes, what="the output of attend_one",
                   right="your function matches the package on a random query, 6 keys and d_k = 4.")


def check_band_mask(mask, n=5):
    """Check a boolean mask (n, n) that lets token i see tokens i - 1, i and i + 1 only (True = may attend).

    >>> import numpy as np, mha_lessons as M
    >>> M.exercises.check_band_mask(np.abs(np.arange(5)[:, None] - np.arange(5)) <= 1)
    Right: each token sees itself and its immediate neighbours (just one at each end).
    """
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]  # (n, 1) query positions, (1, n) key positions
    expected = np.abs(i - j) <= 1  # (n, n)
    mask_array = None if mask is None else np.asarray(mask)
    if mask_array is not None and mask_array.shape == expected.shape and mask_array.dtype != bool:
        return Verdict(False, f"the mask has dtype {mask_array.dtype}; masks are boolean (True = may attend).")
    mistakes = [
        (~expected, "True and False are swapped: in this course True means 'may attend'."),
        (np.abs(i - j) == 1, "the diagonal is missing: each token may also attend to itself."),
        (np.abs(i - j) <= 2, "the band is too wide: only the immediate neighbours (|i - j| <= 1)."),
        ((j - i <= 1) & (j >= i), "this looks only forward: a token sees the neighbour before it too."),
        ((i - j <= 1) & (j <= i), "this looks only backward: a token sees the neighbour after it too."),
    ]
    return compare(mask_array, expected, mistakes, what="the mask",
                   right="each token sees itself and its immediate neighbours (just one at each end).")


def _attention_inputs():
    """Q (3, 4), K (4, 4), V (4, 2) for ``check_attention``; query 1 is 1500 times longer than the others.

    d_k = m = 4, so that ``Q @ K`` (a transpose forgotten) runs instead of failing on the shapes, and
    the long query's scaled scores reach several hundred, where ``np.exp`` overflows unless the row
    maximum is subtracted first.
    """
    rng = np.random.default_rng(11)
    Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), rng.normal(size=(4, 2))
    Q[1] *= 1500.0
    return Q, K, V


def check_attention(attention):
    """Check ``attention(Q, K, V)`` written with matrix products and a hand-written softmax.

    It is called on 3 queries and 4 keys with d_k = 4 and d_v = 2; query 1 is 1500 times longer than
    the others, so that its scaled scores exceed 700 and a softmax that does not subtract the row
    maximum overflows. Recognised mistakes: the softmax over the queries (axis 0) instead of the keys,
    over the whole matrix, or left out; the scale forgotten or wrong; ``Q @ K`` instead of ``Q @ K.T``;
    the weights returned instead of the output; ``np.exp`` overflowing; the row sums divided without
    ``keepdims=True``.

    >>> import mha_lessons as M
    >>> M.exercises.check_attention(lambda Q, K, V: M.scaled_dot_product_attention(Q, K, V)[0])
    Right: your attention matches the package, also for a query whose scores reach the hundreds.
    """
    Q, K, V = _attention_inputs()
    n, m = Q.shape[0], K.shape[0]
    answer, failure = call_learner(attention, Q.copy(), K.copy(), V.copy(), name="attention")
    if failure is not None:
        if f"({n},{m}) ({n},)" in failure.message:  # e / e.sum(axis=-1): (n, m) / (n,) does not broadcast
            return Verdict(False, failure.message.rstrip(" .") + f". A row sum over axis=-1 has shape ({n},); "
                           f"with keepdims=True it has shape ({n}, 1), which divides each row of the "
                           f"({n}, {m}) scores.")
        return failure
    expected = scaled_dot_product_attention(Q, K, V)[0]  # (n, d_v)
    scale = 1 / math.sqrt(Q.shape[-1])
    scores = Q @ K.T * scale  # (n, m)
    row_max = scores.max(axis=-1, keepdims=True)  # (n, 1)
    mistakes = [
        (softmax(scores, axis=0) @ V,
         "the softmax runs down the columns, over the queries (axis 0); it must run along each row, over the "
         "keys (axis=-1), so that each query's weights sum to 1."),
        (np.exp(scores - row_max) / np.exp(scores - row_max).sum() @ V,
         "the exponentials are divided by the sum of the whole matrix; each row must sum to 1: "
         "sum over axis=-1 with keepdims=True."),
        (np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum() @ V,
         "the exponentials are divided by the sum of the whole matrix; each row must sum to 1: "
         "sum over axis=-1 with keepdims=True (and subtract each row's own maximum)."),
        (softmax(Q @ K.T) @ V, "the scores are not divided by sqrt(d_k): scale them before the softmax."),
        (softmax(Q @ K.T / Q.shape[-1]) @ V, "the scores are divided by d_k; the scale is 1/sqrt(d_k)."),
        (softmax(Q @ K.T * math.sqrt(Q.shape[-1])) @ V,
         "the scores are multiplied by sqrt(d_k); divide them by it."),
        (softmax(Q @ K * scale) @ V,
         "the scores are Q @ K, which pairs query features with key positions (the shapes only fit because "
         "d_k = m here); the scores are Q @ K.T, each query against each key."),
        (scores @ V, "the softmax is missing: the weights are the softmax of the scaled scores."),
        (softmax(scores), f"these are the weights, shape (n, m) = ({n}, {m}); return the output, "
                          f"weights @ V, shape (n, d_v) = ({n}, {V.shape[1]})."),
    ]
    try:
        answer_array = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        answer_array = None
    if answer_array is not None and answer_array.shape == expected.shape and not np.all(np.isfinite(answer_array)):
        bad_rows = sorted({int(r) for r in np.argwhere(~np.isfinite(answer_array))[:, 0]})
        if bad_rows == [1]:  # only the long query: an overflow, whatever else may be wrong
            return Verdict(False, f"row 1, whose scaled scores reach {scores[1].max():.0f}, is not finite: np.exp "
                           "overflowed. Subtract each row's maximum from the scores before np.exp.")
    return compare(answer, expected, mistakes, what="the output of attention",
                   right="your attention matches the package, also for a query whose scores reach the hundreds.")


def check_shifted_weights(shifted_weights):
    """Check ``shifted_weights(Q, K, V, c)``: the weights (n, m) after the vector c (d_k,) is added to every key.

    Adding c to key j adds q·c to the score of query q against it: the same number for the whole row,
    which the softmax cancels, so the right answer is the weights of the unshifted keys. The check
    runs it on 3 queries and 4 keys with d_k = 4 (m = d_k, so that c added along the wrong axis runs).
    Recognised mistakes: the queries shifted instead of (or as well as) the keys, one key shifted
    only, c added along the wrong axis, the softmax over the queries, the scores or the output
    returned instead of the weights.

    >>> import mha_lessons as M
    >>> M.exercises.check_shifted_weights(lambda Q, K, V, c: M.scaled_dot_product_attention(Q, K + c, V)[1])
    Right: the weights did not change: each row of scores rose by the same q·c.
    """
    rng = np.random.default_rng(3)
    Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), rng.normal(size=(4, 2))  # n = 3, m = d_k = 4
    c = rng.normal(size=4) * 3.0  # (d_k,), large enough that a wrong shift shows
    answer, failure = call_learner(shifted_weights, Q.copy(), K.copy(), V.copy(), c.copy(), name="shifted_weights")
    if failure is not None:
        return failure
    scale = 1 / math.sqrt(Q.shape[-1])
    K_one = K.copy()
    K_one[0] += c  # only the first key moved
    scores = (Q @ (K + c).T) * scale  # (n, m), the shifted keys' scores

    def weights(q, k):
        return scaled_dot_product_attention(q, k, V)[1]  # (n, m)

    mistakes = [
        # (q + c)·(k + c) differs from (q + c)·k by q·c + c·c, the same for a whole row: both give these weights
        (weights(Q + c, K), "you shifted the queries; the exercise adds c to the keys only: K + c."),
        (weights(Q, K_one), "only key 0 moved, and then the weights change; add c to every key."),
        (weights(Q, K + c[:, None]), "c[j] went to every feature of key j; add the vector c to each key: K + c."),
        (softmax(scores, axis=0), "the softmax runs over the queries (axis 0); each query's row sums to 1."),
        (scores, "these are the scores; the weights are their softmax along each row."),
        (scaled_dot_product_attention(Q, K + c, V)[0], "this is the output, (n, d_v); return the weights, (n, m)."),
    ]
    return compare(answer, weights(Q, K), mistakes, what="the weights",
                   right="the weights did not change: each row of scores rose by the same q·c.")
