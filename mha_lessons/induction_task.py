"""The task of chapter 14: sequences whose first segment repeats, and what measures an induction head.

A sequence of n tokens starts with a segment of L distinct random tokens,
followed by the same L tokens again, and then random tokens up to n. L differs
from sequence to sequence (from n // 4 to n // 2), so that no fixed offset of
positions finds the earlier copy. The next token is new in the first copy and
predictable in the second, but only by looking back: at position i of the
second copy the answer is the token that followed the earlier occurrence of the
current token, at position i - L + 1. The model that learns it is in
``induction.py``.

Axis names: B sequences, n positions, L the length of the repeated segment
(``half`` in the code), V vocabulary, h heads.
"""

import numpy as np

from ._checks import require_positive_int


def repeated_sequences(batch, n, vocab, *, seed=0):
    """Sequences whose first L tokens (distinct) come again right after them; L varies from n // 4 to n // 2.

    Returns
    -------
    tokens : ndarray of int, (B, n)
    half : ndarray of int, (B,): L, the length of the repeated segment of each sequence

    Examples
    --------
    >>> tokens, half = repeated_sequences(1, 10, 12, seed=0)
    >>> half, bool(np.array_equal(tokens[0, :half[0]], tokens[0, half[0]:2 * half[0]]))
    (array([5]), True)
    """
    require_positive_int(batch, "batch")
    if n < 4 or vocab < n // 2:
        raise ValueError(f"repeated_sequences needs n >= 4 and vocab >= n // 2 (distinct tokens in a segment), "
                         f"got n = {n}, vocab = {vocab}")
    rng = np.random.default_rng(seed)
    half = rng.integers(n // 4, n // 2 + 1, size=batch)  # (B,)
    tokens = rng.integers(vocab, size=(batch, n))  # (B, n): random filler
    for b, length in enumerate(half):
        segment = rng.permutation(vocab)[:length]  # L distinct tokens
        tokens[b, :length] = segment
        tokens[b, length:2 * length] = segment
    return tokens, half


def copy_positions(half, n):
    """Boolean (B, n) masks of the positions whose next token is predictable, and of those in the first copy.

    Returns
    -------
    second : True at i = L .. 2 L - 2, where the next token is a copy of token i - L + 1
    first : True at i = 0 .. L - 2, where the next token is new

    Examples
    --------
    >>> second, first = copy_positions([3], 8)
    >>> second.astype(int), first.astype(int)
    (array([[0, 0, 0, 1, 1, 0, 0, 0]]), array([[1, 1, 0, 0, 0, 0, 0, 0]]))
    """
    i = np.arange(n)[None, :]  # (1, n)
    half = np.asarray(half)[:, None]  # (B, 1)
    return (i >= half) & (i <= 2 * half - 2), i <= half - 2


def next_token_targets(tokens):
    """The next token at positions 0 .. n - 2 and -1 (not scored) at the last one: (B, n).

    Examples
    --------
    >>> next_token_targets(np.array([[4, 5, 6]]))
    array([[ 5,  6, -1]])
    """
    return np.concatenate([tokens[:, 1:], np.full((tokens.shape[0], 1), -1)], axis=1)


def previous_token_score(weights, half):
    """Mean weight of each head on the previous token, at the queries of the first copy (1 .. L - 1).

    Those are the positions whose keys the induction head reads: what the
    previous-token head writes there is what composition needs. ``weights`` (B, h, n, n),
    ``half`` (B,) -> (h,).

    Examples
    --------
    >>> w = np.eye(4, k=-1)[None, None]          # every query looks one step back
    >>> w[0, 0, 0, 0] = 1.0                      # (query 0 has no previous token)
    >>> previous_token_score(w, [3])
    array([1.])
    """
    i = np.arange(weights.shape[-1])[None, :]  # (1, n)
    first = (i >= 1) & (i <= np.asarray(half)[:, None] - 1)  # (B, n)
    b, q = np.nonzero(first)
    return weights[b, :, q, q - 1].mean(axis=0)  # (pairs, h) -> (h,)


def induction_score(weights, half):
    """Mean weight of each head, at the queries of the second copy, on the token after the earlier occurrence.

    Query i of the second copy (L <= i <= 2 L - 2) holds the same token as
    position i - L; the token that followed it sits at key i - L + 1. ``weights`` (B, h, n, n),
    ``half`` (B,) -> (h,), averaged over every such query of every sequence.

    Examples
    --------
    >>> w = np.zeros((1, 1, 6, 6))
    >>> w[0, 0, [3, 4], [1, 2]] = 1.0             # L = 3: queries 3 and 4 look at keys 1 and 2
    >>> induction_score(w, [3])
    array([1.])
    """
    second, _ = copy_positions(half, weights.shape[-1])  # (B, n)
    b, i = np.nonzero(second)  # the (sequence, query) pairs
    return weights[b, :, i, i - np.asarray(half)[b] + 1].mean(axis=0)  # (pairs, h) -> (h,)


def prefix_match_score(weights, half, tokens, keys_from=None):
    """Mean weight of each head, at the queries of the second copy, on the keys whose previous token is the current one.

    At query i of sequence b the current token is ``tokens[b, i]``; key j matches when the token before it,
    read in ``keys_from[b]`` (by default ``tokens[b]``), is that token. By default the one matching key is
    i - L + 1 and the score is ``induction_score``. When layer 2's keys are given layer 1's output for
    other sequences (a resample-ablation), pass those sequences as ``keys_from``: the score is then the
    weight on the keys that *their* previous tokens would make an induction head pick. Queries with no
    matching key are left out. ``weights`` (B, h, n, n), ``half`` (B,), ``tokens`` and ``keys_from``
    (B, n) -> (h,).

    Examples
    --------
    >>> tokens = np.array([[5, 6, 7, 5, 6, 7]])              # L = 3
    >>> w = np.zeros((1, 1, 6, 6))
    >>> w[0, 0, [3, 4], [1, 2]] = 1.0                         # queries 3, 4 on keys 1, 2: the induction keys
    >>> prefix_match_score(w, [3], tokens)
    array([1.])
    >>> other = np.array([[5, 9, 9, 6, 0, 0]])                # read so, keys 1 and 4 match
    >>> prefix_match_score(w, [3], tokens, keys_from=other)   # query 3 looks at key 1, query 4 not at key 4
    array([0.5])
    """
    tokens = np.asarray(tokens)
    keys_from = tokens if keys_from is None else np.asarray(keys_from)
    if weights.ndim != 4 or tokens.shape != weights.shape[:1] + weights.shape[-1:] or keys_from.shape != tokens.shape:
        raise ValueError(f"weights must be (B, h, n, n) and tokens, keys_from (B, n); got {weights.shape}, "
                         f"{tokens.shape} and {keys_from.shape}")
    n = weights.shape[-1]
    before = np.concatenate([np.full((len(tokens), 1), -1), keys_from[:, :-1]], axis=1)  # (B, n): token before key j
    match = (before[:, None, :] == tokens[:, :, None]) & np.tril(np.ones((n, n), dtype=bool))  # (B, n, n): (b, i, j)
    second, _ = copy_positions(half, n)  # (B, n)
    kept = second & match.any(axis=-1)  # (B, n): second-copy queries with a matching key
    if not kept.any():
        raise ValueError("no query of the second copy has a matching key")
    on_match = np.sum(weights * match[:, None], axis=-1)  # (B, h, n)
    return on_match.transpose(0, 2, 1)[kept].mean(axis=0)  # (B, n, h)[kept] -> (pairs, h) -> (h,)


def first_copy_floor(half, vocab):
    """The lowest next-token loss that any model can have on the first copy: the mean of log(V - i - 1).

    At position i of the first copy the next token is none of the i + 1
    distinct tokens seen so far, and each of the other V - i - 1 is equally
    likely; a model that gives them probability q_t has loss -mean log q_t over
    them, at least log(V - i - 1) since the q_t sum to at most 1. Averaged over
    the positions of ``copy_positions``' first copy, as the loss is.

    Examples
    --------
    >>> round(first_copy_floor([3], 10), 4)         # positions 0 and 1: (log 9 + log 8) / 2
    2.1383
    """
    half = np.asarray(half)
    require_positive_int(vocab, "vocab")
    if half.ndim != 1 or half.size == 0 or half.min() < 2 or half.max() > vocab:
        raise ValueError(f"half must be a non-empty 1-D array of lengths 2 .. vocab = {vocab}, got {half}")
    i = np.concatenate([np.arange(length - 1) for length in half])  # every first-copy position, every sequence
    return float(np.log(vocab - i - 1).mean())
