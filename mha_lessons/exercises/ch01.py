"""Checkers for chapter 1 (scaled dot-product attention)."""

import numpy as np

from ..attention import scaled_dot_product_attention, softmax
from ._verdict import Verdict, call_learner, compare


def check_attend_one(attend_one):
    """Check ``attend_one(q, K, V)``: attention for one query q (d_k,), keys K (m, d_k), values V (m, d_v).

    The function is called on seeded random inputs and its result compared with the package's; the
    mistakes it recognises are a missing or wrong scale, weights that are not normalised, and the
    softmax taken over the features instead of the keys.

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
    ]
    expected = scaled_dot_product_attention(q[None], K, V)[0][0]  # (1, d_v) -> (d_v,)
    return compare(answer, expected, mistakes, what="the output of attend_one",
                   right="your function matches the package on a random query, 6 keys and d_k = 4.")


def check_band_mask(mask, n=5):
    """Check a boolean mask (n, n) that lets token i see tokens i - 1, i and i + 1 only (True = may attend).

    >>> import numpy as np, mha_lessons as M
    >>> M.exercises.check_band_mask(np.abs(np.arange(5)[:, None] - np.arange(5)) <= 1)
    Right: each token sees itself and its two neighbours.
    """
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]  # (n, 1) query positions, (1, n) key positions
    expected = np.abs(i - j) <= 1  # (n, n)
    mask_array = np.asarray(mask)
    if mask_array.shape == expected.shape and mask_array.dtype != bool:
        return Verdict(False, f"the mask has dtype {mask_array.dtype}; masks are boolean (True = may attend).")
    mistakes = [
        (~expected, "True and False are swapped: in this course True means 'may attend'."),
        (np.abs(i - j) == 1, "the diagonal is missing: each token may also attend to itself."),
        (np.abs(i - j) <= 2, "the band is too wide: only the immediate neighbours (|i - j| <= 1)."),
        ((j - i <= 1) & (j >= i), "this looks only forward: a token sees the neighbour before it too."),
        ((i - j <= 1) & (j <= i), "this looks only backward: a token sees the neighbour after it too."),
    ]
    return compare(mask_array, expected, mistakes, what="the mask",
                   right="each token sees itself and its two neighbours.")
