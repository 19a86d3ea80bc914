"""Checkers for chapter 13 (one head, two jobs)."""

import numpy as np

from ...attention import causal_mask, softmax
from ...task import distinct_queries, relation_mask, relation_positions, relation_score
from ._verdict import call_learner, compare


def check_relation_positions(my_relation_positions):
    """Check ``my_relation_positions(n, segment)``: an integer array (2, n), -1 where a relation does not exist.

    Row 0 is the position of the previous token (i - 1), row 1 the position of
    the first token of i's segment. The function is called with n = 10,
    segment = 4; the mistakes it names are a previous position that wraps
    around or stops at 0, a row that points at the query itself or forward,
    segment numbers or offsets instead of positions, and swapped or
    transposed rows.

    >>> import mha_lessons as M
    >>> M.exercises.check_relation_positions(M.task.relation_positions)
    Right: both rows match, for n = 10 and segments of 4.
    """
    n, segment = 10, 4
    answer, failure = call_learner(my_relation_positions, n, segment, name="my_relation_positions")
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    expected = relation_positions(n, segment)  # (2, n)
    i = np.arange(n)
    first = expected[1]

    def rows(previous, first_row):
        return np.stack([previous, first_row])

    mistakes = [
        (rows(np.roll(i, 1), first), "position 0 has no previous token: mark it -1 instead of wrapping around to "
                                     "the last position (np.roll wraps around)."),
        (rows(np.maximum(i - 1, 0), first), "position 0 has no previous token: mark it -1; a 0 there would say "
                                            "that position 0 looks at itself."),
        (rows(i, first), "row 0 points at the query itself; the previous token sits at i - 1."),
        (rows(i + 1, first), "row 0 points one step forward; the previous token sits at i - 1."),
        (rows(expected[0], i // segment), "row 1 holds segment numbers (0, 1, 2, ...); multiply by the segment "
                                          "length to get the position where the segment starts."),
        (rows(expected[0], i % segment), "row 1 holds each position's offset inside its segment; the segment "
                                         "starts at i minus that offset."),
        (expected[::-1], "the rows are swapped: row 0 is the previous token, row 1 the first token of the segment."),
        (expected.T, "the array is (n, 2); put one relation per row, shape (2, n)."),
    ]
    return compare(answer, expected, mistakes, what="your array",
                   right=f"both rows match, for n = {n} and segments of {segment}.", rtol=0, atol=0)


def check_relation_score(my_relation_score):
    """Check ``my_relation_score(weights, marked)``: the mean weight on the marked keys, over the queries that have one.

    It is called on the softmax of random scores, (6, 6), and a relation mask
    with some empty rows. The mistakes it names are averaging over every
    query (empty rows too), counting where the largest weight lies instead of
    measuring the weight, and measuring the weight that misses the relation.

    >>> import mha_lessons as M
    >>> M.exercises.check_relation_score(M.task.relation_score)
    Right: your score matches the package's on random weights with empty rows.
    """
    n, segment = 6, 3
    scores = np.random.default_rng(11).normal(scale=2.0, size=(n, n))  # (n, n)
    weights = softmax(np.where(causal_mask(n), scores, -np.inf))  # causal weights, rows sum to 1
    marked = relation_mask(n, segment, "first", distinct_only=True)  # (n, n), rows 0, 1 and 4 empty
    answer, failure = call_learner(my_relation_score, weights.copy(), marked.copy(), name="my_relation_score")
    if failure is not None:
        return failure
    expected = relation_score(weights, marked)
    kept = marked.any(axis=-1)  # (n,)
    on_relation = (weights * marked).sum(axis=-1)  # (n,)
    top_is_marked = marked[np.arange(n), weights.argmax(axis=-1)]  # (n,)
    mistakes = [
        (on_relation.mean(), "you averaged over every query, including those whose row marks no key; "
                             "leave those queries out."),
        (top_is_marked[kept].mean(), "this counts the queries whose largest weight is on the relation; the score "
                                     "is the weight itself, averaged over the queries."),
        (1 - expected, "this is the weight that misses the relation; the score is the weight that lands on it."),
    ]
    return compare(answer, expected, mistakes, what="your score",
                   right="your score matches the package's on random weights with empty rows.")


def check_both_right(my_both_right):
    """Check ``my_both_right(predictions, targets, segment)``: the accuracy on both relations at the distinct positions.

    ``predictions`` and ``targets`` are integer arrays (B, n, 2); targets hold -1
    where a relation does not exist. The answer is the fraction of (sequence,
    position) pairs, over the positions of ``distinct_queries``, where both
    predictions are right. The mistakes it names are averaging the two
    relations separately, counting every position, and looking at one relation only.

    >>> import mha_lessons as M
    >>> def both_right(predictions, targets, segment):
    ...     right = (predictions == targets).all(axis=-1)
    ...     return right[:, M.task.distinct_queries(targets.shape[1], segment)].mean()
    >>> M.exercises.check_both_right(both_right)
    Right: your accuracy matches, on 50 sequences of 8 tokens.
    """
    batch, n, vocab, segment = 50, 8, 3, 4
    rng = np.random.default_rng(11)
    targets = np.stack([rng.integers(vocab, size=(batch, n)), rng.integers(vocab, size=(batch, n))], axis=-1)
    targets[:, 0, 0] = -1  # position 0 has no previous token
    predictions = np.where(rng.random((batch, n, 2)) < 0.7, targets, rng.integers(vocab, size=(batch, n, 2)))
    predictions[:, 0, 0] = rng.integers(vocab, size=batch)  # a model predicts something there too
    answer, failure = call_learner(my_both_right, predictions.copy(), targets.copy(), segment, name="my_both_right")
    if failure is not None:
        return failure
    distinct = distinct_queries(n, segment)  # (n,)
    right = predictions == targets  # (B, n, 2)
    expected = right.all(axis=-1)[:, distinct].mean()
    mistakes = [
        (right[:, distinct].mean(), "you averaged the two relations separately; a position counts as right only "
                                    "when both predictions are."),
        (right.all(axis=-1).mean(), "you counted every position; count only those where the two relations point "
                                    "to different tokens (distinct_queries), where a head must choose."),
        (right.all(axis=-1)[:, 1:].mean(), "you counted every position after the first; the second position of "
                                           "each segment has one token for both relations and tells nothing: leave "
                                           "it out too (distinct_queries)."),
        (right[:, distinct, 0].mean(), "you checked the previous token only; both relations must be right."),
        (right[:, distinct, 1].mean(), "you checked the first token of the segment only; both relations must be right."),
    ]
    return compare(answer, expected, mistakes, what="your accuracy",
                   right=f"your accuracy matches, on {batch} sequences of {n} tokens.")



def check_head_weights(head_weights):
    """Check ``head_weights(weights, segment)``: ``(w_prev, w_first)``, each (h, k), at the k distinct query positions.

    ``weights`` is (h, n, n), rows are queries. ``w_prev[l, j]`` is head l's weight ω_prev on the previous token and
    ``w_first[l, j]`` its weight ω_first on the first token of the segment, at the j-th position of
    ``distinct_queries``. Called on random causal weights, h = 2, in the chapter's task: n = 12 positions in
    segments of 4 (``make_task``'s defaults).

    >>> import numpy as np, mha_lessons as M
    >>> def head_weights(weights, segment):
    ...     previous, first = M.task.relation_positions(weights.shape[-1], segment)
    ...     queries = np.flatnonzero(M.task.distinct_queries(weights.shape[-1], segment))
    ...     return weights[:, queries, previous[queries]], weights[:, queries, first[queries]]
    >>> M.exercises.check_head_weights(head_weights)
    Right: both heads' weights match, at the 8 positions where the relations differ.
    """
    h, n, segment = 2, 12, 4  # the chapter's task, make_task's defaults
    scores = np.random.default_rng(10).normal(scale=2.0, size=(h, n, n))  # (h, n, n)
    weights = softmax(np.where(causal_mask(n), scores, -np.inf))  # causal, rows sum to 1
    answer, failure = call_learner(head_weights, weights.copy(), segment, name="head_weights")
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    previous, first = relation_positions(n, segment)  # (n,) each
    queries = np.flatnonzero(distinct_queries(n, segment))  # (k,)
    every = np.arange(n)

    def pair(rows, prev, fst):  # (2, h, len(rows))
        return np.stack([weights[:, rows, prev], weights[:, rows, fst]])

    expected = pair(queries, previous[queries], first[queries])  # (2, h, k)
    keys_rows = np.stack([weights[:, previous[queries], queries], weights[:, first[queries], queries]])
    mistakes = [
        (expected[::-1], "w_prev and w_first are swapped: w_prev is the weight on the previous token, w_first on "
                          "the first one."),
        (expected[:, ::-1], "the heads are swapped: row l of w_prev and w_first belongs to head l."),
        (expected.transpose(0, 2, 1), "each array is (k, h); make it (h, k), one row per head."),
        (keys_rows, "query and key are swapped: weights[head, query, key], rows are the queries."),
        (pair(queries, queries, first[queries]), "w_prev is the weight of each query on itself; the previous "
                                                 "token is at i - 1."),
        (pair(every, previous, first), "this keeps every position; keep only the distinct_queries, where "
                                       "the relations differ."),
        (pair(every[1:], previous[1:], first[1:]), "this keeps every position after the first; keep only "
                                                   "the distinct_queries, where the relations differ."),
    ]
    return compare(answer, expected, mistakes, what="your (w_prev, w_first)",
                   right=f"both heads' weights match, at the {len(queries)} positions where the relations differ.")
