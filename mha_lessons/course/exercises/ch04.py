"""Checkers for chapter 4 (what attention costs).

The right answers come from ``M.complexity``, whose counts the tests compare with PyTorch's FLOP
counter; the wrong ones are the counts that a forgotten factor or a swapped size gives. Exercise 3's
right answer comes from running ``scaled_dot_product_attention`` on float32 inputs.
"""

import math

import numpy as np

from ...attention import scaled_dot_product_attention
from ...complexity import mha_flops, mha_memory
from ._verdict import Verdict, compare


def check_cross_attention_flops(flops):
    """Check the matrix-product FLOPs of cross-attention (exercise 1).

    n = 100 decoder tokens attend to m = 1000 encoder tokens, with d_model = 256 and h = 4 heads.

    >>> import mha_lessons as M
    >>> M.exercises.check_cross_attention_flops(M.complexity.mha_flops(100, 256, 4, 1000)["matmul"])
    Right: 2nd² + 4md² + 4nmd + 2nd², as mha_flops counts it.
    """
    n, m, d, h = 100, 1000, 256, 4  # decoder tokens, encoder tokens, d_model, heads
    expected = mha_flops(n, d, h, m)["matmul"]
    projections_q_o = 4 * n * d * d  # queries in, output out: 2 n d² each
    projections_k_v = 4 * m * d * d  # keys and values: 2 m d² each
    attention = 4 * n * m * d  # scores and weighted sum: 2 n m d each
    mistakes = [
        (mha_flops(n, d, h, m)["total"], "that count includes the element-wise work (scale, softmax, biases); "
                                         "the exercise counts the matrix products only."),
        (expected / 2, "you counted multiply-adds; each one is 2 FLOPs (a multiplication and an addition)."),
        (8 * n * d * d + 4 * n * n * d, "that is self-attention on the n = 100 decoder tokens: the keys and values "
                                        "are the m = 1000 encoder tokens, projected and scored with m, not n."),
        (projections_q_o + 4 * n * d * d + attention, "the key and value projections run over the m = 1000 "
                                                      "encoder tokens: 2 m d² each, not 2 n d²."),
        (expected - 2 * n * d * d, "the output projection W_O (2 n d² FLOPs) is missing."),
        (projections_q_o + projections_k_v + h * attention, "the heads share d_model: h products of width "
                                                           "d_k = d_model / h cost as much as one of width d_model; "
                                                           "do not multiply by h."),
        (projections_q_o + projections_k_v + attention / 2, "both attention products cost 2 n m d: the scores "
                                                            "Q Kᵀ and the weighted sum A V."),
        (projections_q_o + projections_k_v, "the attention itself is missing: the scores Q Kᵀ and the weighted "
                                            "sum A V cost 2 n m d each."),
    ]
    return compare(flops, expected, mistakes, what="your count",
                   right="2nd² + 4md² + 4nmd + 2nd², as mha_flops counts it.")


def check_weights_memory_length(n_min):
    """Check the first self-attention length n whose float16 weights (h, n, n) exceed 1 GiB (exercise 2).

    >>> import mha_lessons as M
    >>> M.exercises.check_weights_memory_length(5793)
    Right: at n = 5793 the weights take 1,073,883,168 bytes, more than 2^30 = 1,073,741,824.
    """
    num_heads, limit = 16, 2**30

    def first_above(bytes_per_number, heads=num_heads, budget=limit):  # smallest n with heads n² bytes > budget
        n = math.isqrt(budget // (heads * bytes_per_number))
        while heads * n * n * bytes_per_number <= budget:
            n += 1
        return n

    expected = first_above(2)
    # the package's count of the weights' bytes, at n and one below (d_model does not matter for the weights)
    weights, before = (mha_memory(n, 64, num_heads, dtype="float16")["weights"] for n in (expected, expected - 1))
    mistakes = [
        (expected - 1, f"at n = {expected - 1} the weights take {before:,} bytes, not more than 2^30 = {limit:,}: "
                       "round the solution of h n² · 2 = 2^30 up, not down."),
        (math.sqrt(limit / (num_heads * 2)), "n counts tokens, a whole number: round the solution of "
                                             "h n² · 2 = 2^30 up to the next integer."),
        (first_above(4), "that is for float32, 4 bytes a number; float16 takes 2."),
        (first_above(4) - 1, "that is for float32, 4 bytes a number; float16 takes 2."),
        (first_above(16), "float16 takes 16 bits, which is 2 bytes, not 16."),
        (first_above(2, heads=1), f"each of the h = {num_heads} heads has its own n × n weights."),
        (first_above(2, heads=1) - 1, f"each of the h = {num_heads} heads has its own n × n weights."),
        (first_above(2, budget=10**9), f"1 GiB is 2^30 = {limit:,} bytes, not 10^9 (that is 1 GB)."),
        (first_above(2, budget=10**9) - 1, f"1 GiB is 2^30 = {limit:,} bytes, not 10^9 (that is 1 GB)."),
    ]
    return compare(n_min, expected, mistakes, what="your n",
                   right=f"at n = {expected} the weights take {weights:,} bytes, more than 2^30 = {limit:,}.",
                   rtol=0, atol=1e-9)


def check_float32_weights(weights_dtype):
    """Check the dtype of the weights that ``scaled_dot_product_attention`` returns for float32 inputs (exercise 3).

    Give ``weights.dtype`` (a pair ``(out.dtype, weights.dtype)`` or the weights array itself also do).
    The check runs the package on float32 inputs itself, so it fails if the package ever upcasts.

    >>> import numpy as np, mha_lessons as M
    >>> M.exercises.check_float32_weights(np.float32)
    Right: float32 in, float32 out: the package does not upcast to float64.
    """
    q = np.ones((2, 3, 4), dtype=np.float32)
    out, weights = scaled_dot_product_attention(q, q, q)
    expected = np.result_type(out, weights)  # what the package gives
    if weights_dtype is None:
        return Verdict(False, "your answer is None: not computed yet.")
    if isinstance(weights_dtype, (bool, np.bool_)):
        return Verdict(False, "give the dtype itself, weights.dtype, so that the check can read it.")
    answers = list(weights_dtype) if isinstance(weights_dtype, (tuple, list)) else [weights_dtype]
    try:
        dtypes = [a.dtype if isinstance(a, (np.ndarray, np.generic)) else np.dtype(a) for a in answers]
    except TypeError:
        return Verdict(False, f"{weights_dtype!r} is not a dtype; give weights.dtype.")
    for dtype in dtypes:
        if dtype == np.float64:
            return Verdict(False, "float64: make the inputs float32; np.ones gives float64 by default.")
        if dtype != expected:
            return Verdict(False, f"{dtype}? with float32 inputs the package gives {expected}.")
    if expected != np.float32:  # the package itself upcast: not the learner's mistake
        return Verdict(False, f"the package returned {expected} for float32 inputs; it should keep float32.")
    return Verdict(True, "float32 in, float32 out: the package does not upcast to float64.")
