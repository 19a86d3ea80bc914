"""Checkers for chapter 9 (the key/value cache and what decoding costs)."""

import numpy as np

from ...decode_cost import decode_bytes, decode_flops
from ._verdict import Verdict, call_learner, compare

# The question of exercise 2: one attention layer of width d_model = 4096 with 32 heads, t = 8192 cached
# positions per sequence, 16-bit numbers, no biases; batches of 1, 16 and 256 sequences.
BATCH_QUESTION = dict(d_model=4096, num_heads=32, t=8192, batches=(1, 16, 256))


def check_earlier_changed(earlier_changed):
    """Check ``earlier_changed(x, params, causal)``: which earlier outputs change when the last token arrives.

    ``x`` is (n, d_model). Return a boolean (n - 1,) array, True at position i when row i of the
    self-attention output on ``x[:-1]`` differs from row i of the output on all of ``x``, with a causal
    mask when ``causal`` is True and no mask otherwise. Checked for both cases.

    >>> import numpy as np, mha_lessons as M
    >>> def earlier_changed(x, params, causal):
    ...     n = len(x)
    ...     old, _ = M.multihead_attention(x[:-1], x[:-1], x[:-1], params, M.causal_mask(n - 1) if causal else None)
    ...     new, _ = M.multihead_attention(x, x, x, params, M.causal_mask(n) if causal else None)
    ...     return ~np.isclose(new[:-1], old).all(axis=-1)
    >>> M.exercises.check_earlier_changed(earlier_changed)
    Right: causal rows stay put; without the mask every earlier row changes.
    """
    from ...attention import causal_mask
    from ...multihead import init_params, multihead_attention

    n, d_model, h = 6, 8, 2
    x = np.random.default_rng(81).normal(size=(n, d_model))  # (n, d_model)
    params = init_params(d_model, h, seed=82)
    answers, expected = [], []
    for causal in (True, False):
        answer, failure = call_learner(earlier_changed, x.copy(), params, causal, name="earlier_changed")
        if failure is not None:  # a Verdict is false when it reports a mistake
            return failure
        old, _ = multihead_attention(x[:-1], x[:-1], x[:-1], params, causal_mask(n - 1) if causal else None)
        new, _ = multihead_attention(x, x, x, params, causal_mask(n) if causal else None)
        expected.append(~np.isclose(new[:-1], old, rtol=0, atol=1e-12).all(axis=-1))  # (n - 1,)
        what = f"your array for causal={causal}"
        if answer is None or np.shape(answer) != (n - 1,):
            if np.shape(answer) == (n,):
                return Verdict(False, f"{what} has n entries; the new token has no old output: "
                                      f"give the n - 1 earlier ones.")
            if np.shape(answer) in ((n - 1, d_model), (n, d_model)):
                return Verdict(False, f"{what} has one entry per feature; give one per position "
                                      f"(.any(axis=-1)).")
            return compare(answer, expected[-1], what=what)
        answers.append(answer)
    expected = np.stack(expected)  # (2, n - 1): row 0 causal, row 1 no mask
    old_unmasked, _ = multihead_attention(x[:-1], x[:-1], x[:-1], params)  # the shorter run forgot the mask
    new_causal, _ = multihead_attention(x, x, x, params, causal_mask(n))
    one_mask = ~np.isclose(new_causal[:-1], old_unmasked, rtol=0, atol=1e-12).all(axis=-1)  # (n - 1,)
    yes, no = np.ones(n - 1), np.zeros(n - 1)
    mistakes = [
        (~expected, "True and False are swapped: True marks the earlier outputs that changed."),
        (np.stack([yes, yes]), "with the causal mask no earlier row can see the new token: use a causal mask "
                               "in both runs and compare row i with row i."),
        (np.stack([one_mask, expected[1]]), "the causal case has the mask in one run only: the shorter "
                                            "sequence needs causal_mask(n - 1)."),
        (np.stack([no, no]), "without a mask the new key enters every row's softmax: leave the mask out of "
                             "both runs when causal is False."),
    ]
    try:
        answers = np.stack([np.asarray(a, dtype=float) for a in answers])  # (2, n - 1)
    except (TypeError, ValueError):
        return Verdict(False, "your arrays are not arrays of True/False.")
    return compare(answers, expected, mistakes, what="your arrays for causal=True, False",
                   right="causal rows stay put; without the mask every earlier row changes.")


def check_batch_flops_per_byte(answer):
    """Check exercise 2: FLOPs per byte of one layer's decoding step at batches 1, 16 and 256.

    The step does B (8 d² + 4 t d) FLOPs of matrix products and reads the 16-bit weights once
    (8 d² bytes) and the caches of the B sequences (4 B t d bytes): d_model = 4096, t = 8192.

    >>> import mha_lessons as M
    >>> d, t = 4096, 8192
    >>> M.exercises.check_batch_flops_per_byte([b * (8 * d**2 + 4 * t * d) / (8 * d**2 + 4 * b * t * d)
    ...                                         for b in (1, 16, 256)])
    Right: the weights are read once for the batch, each sequence's cache once for itself.
    """
    q = BATCH_QUESTION
    d, t, batches = q["d_model"], q["t"], np.array(q["batches"])
    flops = np.array([decode_flops(t, d, q["num_heads"], batch=int(b), bias=False)["matmul"] for b in batches])
    moved = [decode_bytes(t, d, q["num_heads"], batch=int(b), bias=False) for b in batches]
    weights = np.array([m["weights"] for m in moved])
    cache = np.array([m["cache"] for m in moved])
    expected = flops / (weights + cache)  # (3,)
    one = flops / batches  # the FLOPs of one sequence
    mistakes = [
        (flops / (batches * weights + cache), "the weights are counted once per sequence: every sequence of the "
                                              "batch uses the same weights, which the step reads once."),
        (flops / (weights + cache / batches), "the cache is counted once for the whole batch: each sequence "
                                              "has its own keys and values, so the cache read grows with B."),
        (one / (weights + cache), "the FLOPs are those of one sequence: a batch of B does B times the "
                                  "arithmetic."),
        (expected / 8, "that is FLOPs per bit; a byte is 8 bits."),
        (flops / (weights + cache) * 2, "the bytes count numbers, not bytes: 16-bit numbers take 2 bytes."),
        (flops / (weights / 2 + cache), "only the projections of the queries and outputs are counted as "
                                        "weights: W_K and W_V are read too (4 d² numbers in all)."),
    ]
    return compare(answer, expected, mistakes, what="your three numbers", rtol=1e-6,
                   right="the weights are read once for the batch, each sequence's cache once for itself.")
