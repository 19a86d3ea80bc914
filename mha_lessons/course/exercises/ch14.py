"""Checkers for chapter 14 (induction heads)."""

import numpy as np

from ...attention import causal_mask, softmax
from ...induction_task import first_copy_floor, induction_score, previous_token_score
from ._verdict import call_learner, compare

_HALF = np.array([3, 5, 4])  # n_rep, the repeated segment's length, of three sequences of n = 10 tokens


def _random_weights(seed, h=2, n=10):
    """Causal attention weights of h heads over three sequences: (3, h, n, n), rows summing to 1."""
    scores = np.random.default_rng(seed).normal(scale=2.0, size=(len(_HALF), h, n, n))
    return softmax(np.where(causal_mask(n), scores, -np.inf))


def _score(weights, pairs):
    """Mean over (sequence, query, key) triples of every head's weight: (h,)."""
    b, q, k = (np.array(x) for x in zip(*pairs))
    return weights[b, :, q, k].mean(axis=0)


def _per_sequence_mean(weights, pairs):
    """The mean of each sequence's own mean: a sequence with few queries weighs as much as a long one."""
    rows = [_score(weights, [p for p in pairs if p[0] == b]) for b in range(len(_HALF))]
    return np.mean(rows, axis=0)


def check_previous_token_score(my_previous_token_score):
    """Check ``my_previous_token_score(weights, half)``: each head's mean weight on the previous token, (h,).

    The mean runs over the queries 1 .. n_rep - 1 of every sequence (the first copy, whose keys an induction head
    reads), each (sequence, query) pair counting once. Called on random causal weights (3, 2, 10, 10) with
    n_rep = 3, 5, 4. The mistakes it names are counting query 0 (it has no previous token), every query, the
    whole first copy and the token after it, a query's weight on itself, and a mean of per-sequence means.

    >>> import mha_lessons as M
    >>> M.exercises.check_previous_token_score(M.induction.previous_token_score)
    Right: both heads' scores match, over the first copies of 3 sequences.
    """
    weights = _random_weights(3)
    answer, failure = call_learner(my_previous_token_score, weights.copy(), _HALF.copy(),
                                   name="my_previous_token_score")
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    n = weights.shape[-1]
    expected = previous_token_score(weights, _HALF)

    def pairs(queries, offset=1):  # (sequence, query, key) with key = query - offset
        return [(b, i, i - offset) for b, length in enumerate(_HALF) for i in queries(length)]

    mistakes = [
        (_score(weights, pairs(lambda length: range(0, length))), "you counted query 0, which has no previous "
                                                                  "token: start at query 1."),
        (_score(weights, pairs(lambda length: range(1, n))), "you counted every query; count those of the first "
                                                             "copy, 1 .. n_rep - 1, whose keys the induction head reads."),
        (_score(weights, pairs(lambda length: range(1, length + 1))), "you counted query n_rep too, the first token "
                                                                      "of the second copy: stop at n_rep - 1."),
        (_score(weights, pairs(lambda length: range(1, length), offset=0)), "this is each query's weight on "
                                                                            "itself; the previous token is at i - 1."),
        (_per_sequence_mean(weights, pairs(lambda length: range(1, length))), "you averaged each sequence first, "
         "then the sequences; every (sequence, query) pair should count once."),
    ]
    return compare(answer, expected, mistakes, what="your scores",
                   right=f"both heads' scores match, over the first copies of {len(_HALF)} sequences.")


def check_induction_score(my_induction_score):
    """Check ``my_induction_score(weights, half)``: each head's mean weight on the token after the earlier copy, (h,).

    At query i of the second copy (n_rep .. 2 n_rep - 2) the current token sits earlier at i - n_rep, and the token
    that followed it at key i - n_rep + 1. Called on random causal weights (3, 2, 10, 10) with n_rep = 3, 5, 4. The
    mistakes it names are looking at the earlier copy of the current token itself, counting the last position
    of the second copy (its next token is random filler), query and key swapped, and a mean of per-sequence means.

    >>> import mha_lessons as M
    >>> M.exercises.check_induction_score(M.induction.induction_score)
    Right: both heads' induction scores match, over the second copies of 3 sequences.
    """
    weights = _random_weights(4)
    answer, failure = call_learner(my_induction_score, weights.copy(), _HALF.copy(), name="my_induction_score")
    if failure is not None:
        return failure
    expected = induction_score(weights, _HALF)

    def pairs(last, offset):  # (sequence, query, key) with key = query - L + offset
        return [(b, i, i - length + offset) for b, length in enumerate(_HALF) for i in range(length, last(length))]

    right = pairs(lambda length: 2 * length - 1, 1)
    mistakes = [
        (_score(weights, pairs(lambda length: 2 * length - 1, 0)), "this is the weight on the earlier copy of the "
         "current token (key i - n_rep); the induction head looks at the token after it, key i - n_rep + 1."),
        (_score(weights, pairs(lambda length: 2 * length, 1)), "you counted query 2 n_rep - 1 too; its next token "
         "is random filler, not a copy: the second copy's queries are n_rep .. 2 n_rep - 2."),
        (_score(weights.swapaxes(-1, -2), right), "query and key are swapped: weights[b, head, query, key], rows are "
                                                  "the queries."),
        (_per_sequence_mean(weights, right), "you averaged each sequence first, then the sequences; every "
                                             "(sequence, query) pair should count once."),
    ]
    return compare(answer, expected, mistakes, what="your scores",
                   right=f"both heads' induction scores match, over the second copies of {len(_HALF)} sequences.")


def check_first_copy_floor(my_first_copy_floor):
    """Check ``my_first_copy_floor(half, vocab)``: the lowest loss any model can have on the first copy.

    At position i of the first copy (0 .. n_rep - 2) the next token is one of the N_vocab - i - 1 tokens not
    seen yet; the floor is the mean of log(N_vocab - i - 1) over every such (sequence, position) pair. Called with
    n_rep = 3, 5, 4 and N_vocab = 12. The mistakes it names are the guessing level log N_vocab, forgetting the current
    token (log(N_vocab - i)), counting position n_rep - 1 (its next token starts the second copy), and a mean of
    per-sequence means.

    >>> import mha_lessons as M
    >>> M.exercises.check_first_copy_floor(M.induction.first_copy_floor)
    Right: your floor matches, for n_rep = 3, 5, 4 and N_vocab = 12.
    """
    vocab = 12
    answer, failure = call_learner(my_first_copy_floor, _HALF.copy(), vocab, name="my_first_copy_floor")
    if failure is not None:
        return failure
    expected = first_copy_floor(_HALF, vocab)

    def floor(last, seen=1):  # mean of log(V - i - seen) over i = 0 .. last(L) - 1 of every sequence
        return np.mean([np.log(vocab - i - seen) for length in _HALF for i in range(last(length))])

    mistakes = [
        (np.log(vocab), "log N_vocab is the loss of guessing among every token; in the first copy the "
                        "tokens seen so far cannot come next."),
        (floor(lambda length: length - 1, seen=0), "at position i, i + 1 tokens are seen (positions 0 .. i), "
                                                   "the current one included: N_vocab - i - 1 remain."),
        (floor(lambda length: length), "you counted position n_rep - 1 too; its next token starts the second "
                                       "copy, a repeat: the first copy's predictions are at 0 .. n_rep - 2."),
        (np.mean([np.mean(np.log(vocab - np.arange(length - 1) - 1)) for length in _HALF]),
         "you averaged each sequence first, then the sequences; every (sequence, position) pair should count once, "
         "as in the loss."),
    ]
    return compare(answer, expected, mistakes, what="your floor",
                   right=f"your floor matches, for n_rep = {', '.join(map(str, _HALF))} and N_vocab = {vocab}.")


def check_mean_ablated_keys(my_mean_ablated_keys):
    """Check ``my_mean_ablated_keys(x0, y1)``: what layer 2's keys read when layer 1's output is mean-ablated.

    ``x0`` is the stream before layer 1 and ``y1`` layer 1's output, both (B, n, d_model); the answer is
    ``x0`` plus ``y1``'s mean over the B sequences at each position, (B, n, d_model). The mistakes it names
    are zero-ablation (``x0`` alone), no ablation (``x0 + y1``), a mean over the positions too or over the
    positions alone, and the mean without ``x0``.

    >>> import mha_lessons as M
    >>> M.exercises.check_mean_ablated_keys(lambda x0, y1: x0 + y1.mean(axis=0))
    Right: the keys match, for B = 4 sequences of n = 5 positions.
    """
    rng = np.random.default_rng(14)
    batch, n, d_model = 4, 5, 3
    x0, y1 = rng.normal(size=(batch, n, d_model)), rng.normal(size=(batch, n, d_model))
    answer, failure = call_learner(my_mean_ablated_keys, x0.copy(), y1.copy(), name="my_mean_ablated_keys")
    if failure is not None:
        return failure
    expected = x0 + y1.mean(axis=0)  # (B, n, d_model) + (n, d_model)
    mistakes = [
        (x0, "this is zero-ablation: the keys read x0 alone. Mean-ablation adds y1's mean over the sequences."),
        (x0 + y1, "this is no ablation at all: x0 + y1 is x1, what layer 2 reads anyway."),
        (x0 + y1.mean(axis=(0, 1)), "you averaged over the positions too; take the mean over the sequences only, "
                                    "one mean per position (axis 0)."),
        (x0 + y1.mean(axis=1, keepdims=True), "you averaged over the positions; take the mean over the sequences, "
                                              "axis 0."),
        (np.broadcast_to(y1.mean(axis=0), x0.shape), "the mean replaces y1 only: x0 stays in the keys."),
    ]
    return compare(answer, expected, mistakes, what="your keys",
                   right=f"the keys match, for B = {batch} sequences of n = {n} positions.")
