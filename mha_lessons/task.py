"""The task of chapter 13: two relations that a position must answer at once.

A sequence of ``n`` random tokens (integers below ``V``) is cut into segments
of ``segment`` consecutive positions. At every position ``i`` a model must
name two tokens, one per *relation*:

    relation 0, "previous":  the token at position i - 1
    relation 1, "first":     the token at the first position of i's segment

Position 0 has no previous token; that target does not exist and is not scored.
``relation_score`` measures how much of a head's attention lands where a relation
points. The model that learns the task is in ``training.py``.

Axis names: B sequences, n positions, V vocabulary size, R = 2 relations.
"""

import numpy as np

RELATIONS = ("previous", "first")  # relation r is row r of relation_positions and slot r of the targets
IGNORE = -1  # a target (or a key position) that does not exist


def relation_positions(n, segment):
    """For every query position, the key position each relation points to: (R, n), -1 where there is none.

    Row 0 ("previous") is ``i - 1``; row 1 ("first") is ``segment * (i // segment)``.

    Examples
    --------
    >>> relation_positions(6, 3)
    array([[-1,  0,  1,  2,  3,  4],
           [ 0,  0,  0,  3,  3,  3]])
    """
    _check_task_sizes(n, segment)
    i = np.arange(n)
    previous = i - 1  # position 0 gets -1 = IGNORE: it has no previous token
    first = segment * (i // segment)
    return np.stack([previous, first])  # (R, n)


def distinct_queries(n, segment):
    """Boolean (n,): True at the positions where both relations exist and point to different keys.

    Only at these positions does a prediction show which relation a head
    follows: at position 0 there is no previous token, and at the second
    position of a segment the previous token *is* the first one.

    Examples
    --------
    >>> distinct_queries(6, 3).astype(int)
    array([0, 0, 1, 1, 0, 1])
    """
    previous, first = relation_positions(n, segment)
    return (previous != IGNORE) & (previous != first)


def relation_mask(n, segment, relation, *, distinct_only=False):
    """Boolean (n, n) matrix, True at (i, j) when relation ``relation`` of query i points to key j.

    A query for which the relation does not exist has an all-False row; with
    ``distinct_only`` so has every query outside ``distinct_queries``.

    Examples
    --------
    >>> relation_mask(4, 2, "first").astype(int)
    array([[1, 0, 0, 0],
           [1, 0, 0, 0],
           [0, 0, 1, 0],
           [0, 0, 1, 0]])
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    where = relation_positions(n, segment)[RELATIONS.index(relation)]  # (n,)
    marked = where[:, None] == np.arange(n)[None, :]  # (n, 1) == (1, n) -> (n, n); -1 matches no key
    if distinct_only:
        marked &= distinct_queries(n, segment)[:, None]  # (n, n) & (n, 1)
    return marked


def make_task(batch, n=12, vocab=8, segment=4, *, seed=0):
    """Random token sequences and, at every position, the tokens the two relations point to.

    Parameters
    ----------
    batch, n : int
        Number of sequences B and their length.
    vocab : int
        V: tokens are drawn uniformly from 0 .. V - 1.
    segment : int
        Length of a segment; the first segment starts at position 0.
    seed : int or numpy.random.SeedSequence

    Returns
    -------
    tokens : ndarray of int, (B, n)
    targets : ndarray of int, (B, n, R)
        ``targets[b, i, r]`` is the token at ``relation_positions(n, segment)[r, i]``,
        or -1 where that position does not exist (``i = 0`` for "previous").

    Examples
    --------
    >>> tokens, targets = make_task(1, n=6, vocab=10, segment=3, seed=1)
    >>> tokens
    array([[4, 5, 7, 9, 0, 1]])
    >>> targets[0].T            # row 0: previous token, row 1: first token of the segment
    array([[-1,  4,  5,  7,  9,  0],
           [ 4,  4,  4,  9,  9,  9]])
    """
    _check_task_sizes(n, segment)
    if vocab < 2 or batch < 1:
        raise ValueError(f"the task needs vocab >= 2 and batch >= 1, got vocab = {vocab}, batch = {batch}")
    tokens = np.random.default_rng(seed).integers(vocab, size=(batch, n))  # (B, n)
    where = relation_positions(n, segment)  # (R, n)
    targets = tokens[:, np.maximum(where, 0)]  # (B, n) indexed by (R, n) -> (B, R, n)
    targets[:, where == IGNORE] = IGNORE  # positions that do not exist
    return tokens, np.swapaxes(targets, 1, 2)  # (B, R, n) -> (B, n, R)


def _check_task_sizes(n, segment):
    if n < 2 or segment < 1 or segment > n:
        raise ValueError(f"the task needs n >= 2 positions and 1 <= segment <= n, got n = {n}, segment = {segment}")


def relation_score(weights, relation_positions):
    """Fraction of the attention weight that lands on a relation's positions.

    Parameters
    ----------
    weights : array_like, (..., n, m)
        Attention weights, each row summing to 1.
    relation_positions : array_like of bool, broadcastable to (..., n, m)
        True at (i, j) when key j is where the relation of query i points.
        Queries whose row has no True are left out.

    Returns
    -------
    float
        The mean, over the queries kept, of the weight on the marked keys: 1
        when each of them looks only there, 0 when none looks there at all.

    Examples
    --------
    >>> w = np.array([[1.0, 0.0], [0.3, 0.7]])
    >>> relation_score(w, np.array([[True, False], [True, False]]))     # (1.0 + 0.3) / 2
    0.65
    >>> relation_score(w, np.array([[False, False], [False, True]]))    # query 0 left out
    0.7
    """
    weights = np.asarray(weights, dtype=float)
    marked = np.asarray(relation_positions)
    if marked.dtype != bool:
        raise ValueError(f"relation_positions must be boolean (True where the relation points), got {marked.dtype}")
    if weights.ndim < 2:
        raise ValueError(f"weights must have shape (..., n, m), got {weights.shape}")
    try:
        marked = np.broadcast_to(marked, weights.shape)
    except ValueError:
        raise ValueError(f"relation_positions of shape {marked.shape} does not broadcast to the weights' "
                         f"shape {weights.shape}") from None
    kept = marked.any(axis=-1)  # (..., n): queries that have a relation position
    if not kept.any():
        raise ValueError("relation_positions marks no position at all")
    on_relation = np.sum(weights * marked, axis=-1)  # (..., n)
    return float(on_relation[kept].mean())
