"""Checkers for chapter 15 (what the heads of a real model do)."""

import numpy as np

from ...attention import softmax
from ._verdict import call_learner, compare


def check_previous_share(my_previous_share):
    """Check ``my_previous_share(weights)``: the weight on the previous token, averaged over all n queries.

    For weights (n, n) (queries down, keys across), query i gives ``weights[i, i - 1]`` to the
    token before it; query 0 has none and counts as 0, as in ``pretrained.head_census``. It is
    called on the softmax of random scores, (7, 7). The mistakes it names are averaging over
    queries 1 to n - 1 only, taking the next token, reading the matrix transposed (the previous
    *query*), taking the diagonal, and letting query 0 wrap around to the last key.

    >>> import mha_lessons as M
    >>> def share(w):
    ...     return M.pretrained.pattern_masks(["t"] * len(w))["previous"].__mul__(w).sum(-1).mean()
    >>> M.exercises.check_previous_share(share)
    Right: the weight on the previous token, averaged over all 7 queries.
    """
    n = 7
    weights = softmax(np.random.default_rng(111).normal(scale=2.0, size=(n, n)))  # (n, n), rows sum to 1
    answer, failure = call_learner(my_previous_share, weights.copy(), name="my_previous_share")
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    i = np.arange(1, n)
    below = weights[i, i - 1]  # (n - 1,): query i's weight on key i - 1
    expected = below.sum() / n
    mistakes = [
        (below.mean(), "you averaged over the n - 1 queries that have a previous token; average over all n "
                       "queries (query 0 gives 0), as the census does, so that shares of different patterns "
                       "are comparable."),
        (weights[i - 1, i].sum() / n, "this is the weight on the *next* token (row i - 1, column i) or the matrix "
                                      "read transposed: rows are queries, so query i's weight on key i - 1 "
                                      "is weights[i, i - 1]."),
        (np.trace(weights) / n, "this is the weight on the token itself (the diagonal), not on the previous one."),
        ((below.sum() + weights[0, n - 1]) / n, "query 0 wrapped around to the last key (np.roll does that): "
                                                "query 0 has no previous token and gives 0."),
    ]
    return compare(answer, expected, mistakes, what="your share",
                   right=f"the weight on the previous token, averaged over all {n} queries.")


def check_mean_pool(my_mean_pool):
    """Check ``my_mean_pool(hidden, lengths)``: sentence embeddings (B, d_model), unit length, padding left out.

    It is called with hidden states (3, 5, 4) of sequences of 5, 2 and 3 real tokens (the rest
    padding, filled with large numbers). The mistakes it names are averaging the padding too,
    forgetting to normalise, normalising before averaging, dividing by the padded length, and
    taking the [CLS] token alone.

    >>> import mha_lessons as M
    >>> def pool(hidden, lengths):
    ...     pooled = M.pretrained.mean_pool(hidden, lengths)
    ...     return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)
    >>> M.exercises.check_mean_pool(pool)
    Right: the mean of the real tokens, scaled to length 1, for 3 padded sentences.
    """
    lengths = np.array([5, 2, 3])
    rng = np.random.default_rng(112)
    hidden = rng.normal(size=(3, 5, 4))  # (B, n, d_model)
    real = np.arange(5)[None, :] < lengths[:, None]  # (B, n)
    hidden[~real] = 50.0  # padding positions hold numbers that must not count
    answer, failure = call_learner(my_mean_pool, hidden.copy(), lengths.copy(), name="my_mean_pool")
    if failure is not None:
        return failure

    def unit(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    summed = (hidden * real[..., None]).sum(axis=1)  # (B, d_model)
    expected = unit(summed / lengths[:, None])
    mistakes = [
        (unit(hidden.mean(axis=1)), "the padding was averaged too: leave out the positions at or beyond each "
                                    "sentence's length."),
        (summed / lengths[:, None], "the mean is right but not scaled to length 1: divide each row by its norm."),
        (unit((unit(hidden) * real[..., None]).sum(axis=1) / lengths[:, None]),
         "you scaled each token to length 1 before averaging; average first, then scale the mean."),
        ((unit(hidden) * real[..., None]).sum(axis=1) / lengths[:, None],
         "you scaled each token to length 1 before averaging (and not the mean); average first, then scale."),
        (unit(summed / hidden.shape[1]), "you divided by the padded length n; divide by each sentence's own "
                                         "number of real tokens (after scaling, that matters only if you "
                                         "also counted padding)."),
        (unit(hidden[:, 0]), "this is the [CLS] token alone; this model's sentence embedding is the mean of all "
                             "real tokens."),
    ]
    return compare(answer, expected, mistakes, what="your embeddings",
                   right="the mean of the real tokens, scaled to length 1, for 3 padded sentences.")


def check_head_query_weights(my_head_query_weights):
    """Check ``my_head_query_weights(weight, head, num_heads)``: one head's W_Q, (d_model, d_k), from BERT's layout.

    BERT (as torch's ``nn.Linear``) stores the query weight as (out = h d_k, in = d_model) and
    computes x @ weight.T; head ``head`` owns outputs ``[head d_k, (head + 1) d_k)``. It is called
    with a (12, 6) matrix, 3 heads of d_k = 4, head 1. The mistakes it names are the slice not
    transposed, the slice taken along the input axis, heads taken interleaved (every h-th output),
    and the neighbouring head.

    >>> import mha_lessons as M
    >>> M.exercises.check_head_query_weights(lambda w, i, h: w.T[:, i * (w.shape[0] // h):(i + 1) * (w.shape[0] // h)])
    Right: head 1's W_Q, (d_model, d_k) = (6, 4), used as x @ w.
    """
    h, d_k, d_model, head = 3, 4, 6, 1
    weight = np.random.default_rng(113).normal(size=(h * d_k, d_model))  # (out, in), torch's layout
    answer, failure = call_learner(my_head_query_weights, weight.copy(), head, h, name="my_head_query_weights")
    if failure is not None:
        return failure
    expected = weight.T[:, head * d_k:(head + 1) * d_k]  # (d_model, d_k)
    mistakes = [
        (weight[head * d_k:(head + 1) * d_k], "these are the right numbers in torch's (d_k, d_model) layout; the "
                                              "course computes x @ w, so transpose them to (d_model, d_k)."),
        (weight.T[:, head::h], "heads are contiguous blocks of d_k outputs, not every h-th output: head i owns "
                               "outputs i d_k to (i + 1) d_k - 1."),
        (weight[head::h].T, "heads are contiguous blocks of d_k outputs, not every h-th output."),
        (weight.T[:, (head + 1) * d_k:(head + 2) * d_k], "this is head 2's block; heads are counted from 0."),
        (weight.T[:, (head - 1) * d_k:head * d_k], "this is head 0's block; head i starts at output i d_k."),
    ]
    return compare(answer, expected, mistakes, what="your matrix",
                   right=f"head {head}'s W_Q, (d_model, d_k) = ({d_model}, {d_k}), used as x @ w.", rtol=0, atol=0)
