"""Which positions each worker holds when a sequence is split over p workers, and what a causal ring costs each.

Ring attention (``sequence_parallel.py``, chapter 12) gives worker r a set of n / p positions of q, k and v.
Without a mask any set does: every query meets every key once. Under a causal mask, query i may see keys
0 .. i only, so the work of a (query block, key block) pair is the number of pairs (i, j) with j <= i, and
the layout decides how evenly that work falls on the workers:

    contiguous  worker r holds positions [r n_r, (r + 1) n_r): the last worker's queries see every key,
                the first's only their own block (Liu et al., 2023, as first described);
    striped     worker r holds positions r, r + p, r + 2p, ... (Brandon et al., 2023, Striped Attention);
    zigzag      the sequence is cut into 2p chunks and worker r holds chunks r and 2p - 1 - r, one early
                and one late (Megatron-Core's context parallelism, ``get_batch_on_this_cp_rank``).

Axis names as in ``sequence_parallel.py``: n positions, p workers, r a worker's rank, n_r = n / p
positions per worker, s a step of the ring (at step s worker r holds the key/value block of worker
(r - s) mod p).
"""

import numpy as np

from ._checks import is_int, require_positive_int

LAYOUTS = ("contiguous", "striped", "zigzag")


def check_layout(n, num_workers, layout):
    """ValueError unless ``layout`` is known and cuts n positions into p equal sets (2p chunks for zigzag)."""
    require_positive_int(n, "n")
    require_positive_int(num_workers, "num_workers")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if n % num_workers:
        raise ValueError(f"num_workers = p = {num_workers} does not divide the sequence length n = {n}: each worker "
                         f"must hold n / p whole positions")
    if layout == "zigzag" and n % (2 * num_workers):
        raise ValueError(f"the zigzag layout cuts the sequence into 2p = {2 * num_workers} chunks, and 2p does not "
                         f"divide the sequence length n = {n}")


def worker_positions(n, num_workers, rank, layout="contiguous", *, check_input=True):
    """The positions (rows of q, k and v) that worker ``rank`` holds, in increasing order.

    Parameters
    ----------
    n : int, the sequence length
    num_workers : int, p
    rank : int, 0 <= rank < p
    layout : "contiguous", "striped" or "zigzag"

    Returns
    -------
    ndarray of int, (n / p,)

    Examples
    --------
    >>> [worker_positions(8, 2, 0, layout).tolist() for layout in LAYOUTS]
    [[0, 1, 2, 3], [0, 2, 4, 6], [0, 1, 6, 7]]
    """
    if check_input:
        check_layout(n, num_workers, layout)
        if not is_int(rank) or not 0 <= rank < num_workers:
            raise ValueError(f"rank must be an integer in [0, num_workers) = [0, {num_workers}), got {rank!r}")
    p, size = num_workers, n // num_workers
    if layout == "contiguous":
        return np.arange(rank * size, (rank + 1) * size)
    if layout == "striped":
        return np.arange(rank, n, p)
    half = size // 2  # zigzag: chunks of n / (2p) positions
    late = 2 * p - 1 - rank
    return np.concatenate([np.arange(rank * half, (rank + 1) * half), np.arange(late * half, (late + 1) * half)])


def owners(n, num_workers, layout="contiguous"):
    """The worker that holds each position: an (n,) array of ranks.

    >>> owners(8, 2, "zigzag").tolist()
    [0, 0, 1, 1, 1, 1, 0, 0]
    """
    check_layout(n, num_workers, layout)
    result = np.empty(n, dtype=int)
    for r in range(num_workers):
        result[worker_positions(n, num_workers, r, layout, check_input=False)] = r
    return result


def causal_pairs(query_positions, key_positions):
    """How many (query, key) pairs of two sets of positions a causal mask allows: pairs with key <= query.

    Counted without forming the (len(q), len(k)) mask: for each query, the number of keys at or before it.

    >>> causal_pairs([0, 1, 2, 3], [0, 1, 2, 3]), causal_pairs([4, 5], [0, 1, 2]), causal_pairs([0, 1], [5])
    (10, 6, 0)
    """
    keys = np.sort(np.asarray(key_positions).ravel())
    queries = np.asarray(query_positions).ravel()
    return int(np.searchsorted(keys, queries, side="right").sum())  # keys j <= i, for each query i


def ring_work(n, num_workers, layout="contiguous", *, causal=True):
    """The (query, key) pairs each worker computes at each step of ring attention.

    At step s worker r holds the key/value block of worker (r - s) mod p and scores its own queries
    against it: under a causal mask only the pairs with key <= query (a step with none is skipped);
    without a mask all n_r² of them.

    Returns
    -------
    ndarray of int, (p, p)
        ``work[s, r]``: pairs worker r computes at step s. Summed over both axes: n (n + 1) / 2 with
        ``causal``, n² without.

    Examples
    --------
    >>> ring_work(8, 2).tolist()                    # contiguous: worker 1 has a full block at step 1
    [[10, 10], [0, 16]]
    >>> ring_work(8, 2, "striped").tolist()         # striped: every step is about half a block
    [[10, 10], [6, 10]]
    """
    check_layout(n, num_workers, layout)
    p = num_workers
    held = [worker_positions(n, p, r, layout, check_input=False) for r in range(p)]
    work = np.empty((p, p), dtype=int)
    for step in range(p):
        for r in range(p):
            owner = (r - step) % p  # whose keys worker r holds at this step
            work[step, r] = causal_pairs(held[r], held[owner]) if causal else held[r].size * held[owner].size
    return work


def ring_balance(n, num_workers, layout="contiguous"):
    """How evenly a causal ring spreads its work: the busiest worker's pairs over the average worker's.

    The ring ends when its busiest worker does, so this is the time it takes relative to a perfect
    split of the same n (n + 1) / 2 pairs (1.0: perfectly even).

    >>> round(ring_balance(4096, 8), 3), round(ring_balance(4096, 8, "zigzag"), 3)
    (1.875, 1.0)
    """
    per_worker = ring_work(n, num_workers, layout).sum(axis=0)  # (p,)
    return float(per_worker.max() / per_worker.mean())
