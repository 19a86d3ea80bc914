"""Sequence and context parallelism (chapter 12), simulated in numpy: ring attention and DeepSpeed-Ulysses.

Head parallelism (``parallel.py``) gives each of p workers some heads and all the tokens. For long inputs
the other split is by tokens: each worker holds a block of n / p consecutive positions of q, k and v
(all heads). Attention then needs every key for every query, and there are two ways to bring them together.

Ring attention (Liu et al., 2023, *Ring Attention with Blockwise Transformers for Near-Infinite Context*):
each worker keeps its block of queries and passes key/value blocks around a ring, p - 1 times. After
each arrival it computes attention of its queries to that block, as an (output, log-sum-exp) pair, and
merges it into what it has, with chapter 7's merge of partial softmaxes (``merge_partials``). Which
positions each worker holds (a contiguous block, or a striped or zig-zag layout that balances the causal
mask's work) is ``sequence_layouts.py``.

DeepSpeed-Ulysses (Jacobs et al., 2023, *DeepSpeed Ulysses: System Optimizations for Enabling Training of
Extreme Long Sequence Transformer Models*): an all-to-all turns the split by tokens into a split by heads
(worker r then holds h / p heads for all n positions), each worker runs ordinary attention on its
heads, and a second all-to-all turns the result back. Heads are again the unit, so p must divide h.

Axis names as in ``attention.py`` and ``parallel.py``: h heads, n positions (queries and keys: self-
attention), d_k, d_v head widths, p workers, r a worker's rank, n_r = n / p positions per worker.
"""

import math

import numpy as np

from ._checks import require_positive_int
from .attention import causal_mask, scaled_dot_product_attention
from .blockwise import blockwise_attention_with_lse
from .sequence_layouts import check_layout, worker_positions


def _blocks(n, num_workers):
    require_positive_int(num_workers, "num_workers")
    if n % num_workers:
        raise ValueError(f"num_workers = p = {num_workers} does not divide the sequence length n = {n}: each worker "
                         f"must hold n / p whole positions")
    size = n // num_workers
    return [slice(r * size, (r + 1) * size) for r in range(num_workers)]


def merge_partials(out_a, lse_a, out_b, lse_b):
    """Merge two attention results over disjoint sets of keys into the result over their union (chapter 7).

    Each part is an output (softmax over its keys, times their values) and the log-sum-exp of its scores.
    The union's log-sum-exp is log(e^lse_a + e^lse_b), and its output the two outputs weighted by the
    shares e^(lse_a - lse) and e^(lse_b - lse) of the union's normaliser. A part whose keys were all
    masked has lse = -inf and weight 0.

    Parameters
    ----------
    out_a, out_b : ndarray, (..., n, d_v)
    lse_a, lse_b : ndarray, (..., n)

    Returns
    -------
    out : ndarray, (..., n, d_v); lse : ndarray, (..., n)

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    >>> a = blockwise_attention_with_lse(q, k[:2], v[:2])
    >>> b = blockwise_attention_with_lse(q, k[2:], v[2:])
    >>> out, _ = merge_partials(*a, *b)
    >>> bool(np.allclose(out, scaled_dot_product_attention(q, k, v)[0]))
    True
    """
    lse = np.logaddexp(lse_a, lse_b)  # (..., n); -inf only if both are -inf
    safe = np.where(np.isneginf(lse), 0.0, lse)  # rows that saw nothing at all: weights 0, not NaN
    share_a = np.exp(lse_a - safe)[..., None]  # (..., n, 1)
    share_b = np.exp(lse_b - safe)[..., None]
    return share_a * out_a + share_b * out_b, lse


def ring_attention(q, k, v, num_workers, *, causal=False, layout="contiguous"):
    """Self-attention with the sequence split over p workers that pass key/value blocks around a ring.

    Worker r holds the positions ``worker_positions(n, p, r, layout)`` of q, k and v (n_r = n / p of
    them: a contiguous block, every p-th position, or two chunks; ``sequence_layouts.py``). At step s
    (0 .. p - 1) it holds the key/value block of worker (r - s) mod p: it attends to it
    (``blockwise_attention_with_lse``, with the causal mask's part for these positions when ``causal``)
    and merges the result into its own with ``merge_partials``; then every worker sends the block it
    holds to worker r + 1. A step whose block has no key that a query of worker r may see is skipped
    (the block is still passed on).

    Parameters
    ----------
    q, k : ndarray, (..., n, d_k); v : ndarray, (..., n, d_v)
    num_workers : int, dividing n (2p dividing n for ``layout="zigzag"``)
    causal : bool
    layout : "contiguous", "striped" or "zigzag"

    Returns
    -------
    out : ndarray, (..., n, d_v)
        The workers' rows put back in place: equal to unsplit attention up to rounding.
    sent : ndarray of int, (p,)
        Numbers each worker sent: p - 1 key blocks and p - 1 value blocks.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> q, k, v = (rng.normal(size=(2, 8, 4)) for _ in range(3))         # (h, n, d_k)
    >>> out, sent = ring_attention(q, k, v, 4, causal=True, layout="striped")
    >>> bool(np.allclose(out, scaled_dot_product_attention(q, k, v, causal_mask(8))[0])), sent.tolist()
    (True, [96, 96, 96, 96])
    """
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    n = q.shape[-2]
    if k.shape[-2] != n or v.shape[-2] != n:
        raise ValueError(f"ring_attention is self-attention: q, k and v need the same n, got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    check_layout(n, num_workers, layout)
    p = num_workers
    rows = [worker_positions(n, p, r, layout, check_input=False) for r in range(p)]  # (n_r,) each
    held = [(k[..., rows[r], :], v[..., rows[r], :]) for r in range(p)]  # worker r starts with its own block
    states = [None] * p  # (out, lse) of each worker, merged so far
    sent = np.zeros(p, dtype=int)
    for step in range(p):
        for r in range(p):
            owner = (r - step) % p  # whose key/value block worker r holds at this step
            tile = rows[owner][None, :] <= rows[r][:, None] if causal else None  # (n_r, n_r): key j <= query i
            if tile is not None and not tile.any():
                continue  # every key of the block is in the future of every query of worker r
            part = blockwise_attention_with_lse(q[..., rows[r], :], *held[r], tile)  # (..., n_r, d_v), (..., n_r)
            states[r] = part if states[r] is None else merge_partials(*states[r], *part)
        if step < p - 1:  # pass every block on to the right-hand neighbour, all at once
            for r in range(p):
                sent[r] += held[r][0].size + held[r][1].size
            held = [held[(r - 1) % p] for r in range(p)]
    out = np.empty(q.shape[:-1] + v.shape[-1:])  # (..., n, d_v)
    for r in range(p):
        out[..., rows[r], :] = states[r][0]  # worker r's rows back in place
    return out, sent


def all_to_all(parts):
    """The all-to-all collective: worker r sends its j-th piece to worker j and receives everyone's r-th piece.

    Parameters
    ----------
    parts : list (p workers) of lists (p pieces) of ndarray

    Returns
    -------
    received : list (p) of lists (p): ``received[j][r] = parts[r][j]``
    sent : ndarray of int, (p,): numbers each worker sent to the others (its own piece stays)

    Examples
    --------
    >>> received, sent = all_to_all([[np.zeros(2), np.ones(2)], [np.full(2, 2.0), np.full(2, 3.0)]])
    >>> received[1][0], sent.tolist()
    (array([1., 1.]), [2, 2])
    """
    p = len(parts)
    if any(len(pieces) != p for pieces in parts):
        raise ValueError(f"all_to_all needs p pieces from each of the p = {p} workers, got {[len(x) for x in parts]}")
    sent = np.array([sum(parts[r][j].size for j in range(p) if j != r) for r in range(p)])
    return [[parts[r][j] for r in range(p)] for j in range(p)], sent


def ulysses_attention(q, k, v, num_workers, *, causal=False):
    """Self-attention with the sequence split over p workers, by way of two all-to-alls (DeepSpeed-Ulysses).

    Worker r holds positions ``[r n_r, (r + 1) n_r)`` of q, k and v for all h heads, (h, n_r, d). The first
    all-to-all (one per tensor) sends head block j of those positions to worker j, so that worker j holds
    heads ``[j h / p, (j + 1) h / p)`` for all n positions, (h / p, n, d). It runs ordinary attention on them;
    the second all-to-all sends position block r of its output back to worker r.

    Parameters
    ----------
    q, k : ndarray, (h, n, d_k) or (B, h, n, d_k); v : the same with d_v
    num_workers : int, dividing both h and n
    causal : bool

    Returns
    -------
    out : ndarray, the shape of q with d_v: equal to unsplit attention up to rounding
    sent : ndarray of int, (p,): numbers each worker sent in the four all-to-alls (q, k, v in, the output back)

    Examples
    --------
    >>> rng = np.random.default_rng(2)
    >>> q, k, v = (rng.normal(size=(4, 6, 3)) for _ in range(3))         # h = 4, n = 6
    >>> out, sent = ulysses_attention(q, k, v, 2)
    >>> bool(np.allclose(out, scaled_dot_product_attention(q, k, v)[0])), sent.tolist()
    (True, [72, 72])
    """
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    if q.ndim < 3:
        raise ValueError(f"ulysses_attention needs a head axis: q of shape (..., h, n, d_k), got {q.shape}")
    h, n = q.shape[-3:-1]
    if k.shape[-3:-1] != (h, n) or v.shape[-3:-1] != (h, n):
        raise ValueError(f"q, k and v need the same (h, n), got {q.shape}, {k.shape}, {v.shape}")
    if num_workers > h or h % num_workers:
        raise ValueError(f"num_workers = p = {num_workers} must divide the number of heads h = {h} (so p <= h): "
                         f"after the all-to-all each worker holds h / p whole heads")
    positions = _blocks(n, num_workers)
    p = num_workers
    heads = [slice(j * (h // p), (j + 1) * (h // p)) for j in range(p)]
    sent = np.zeros(p, dtype=int)
    by_heads = []
    for x in (q, k, v):
        local = [x[..., positions[r], :] for r in range(p)]  # worker r: (..., h, n_r, d), all heads
        received, count = all_to_all([[part[..., heads[j], :, :] for j in range(p)] for part in local])
        sent += count
        by_heads.append([np.concatenate(pieces, axis=-2) for pieces in received])  # worker j: (..., h/p, n, d)
    mask = causal_mask(n) if causal else None
    outs = [scaled_dot_product_attention(*(t[j] for t in by_heads), mask)[0] for j in range(p)]  # (..., h/p, n, d_v)
    received, count = all_to_all([[out[..., positions[r], :] for r in range(p)] for out in outs])
    sent += count
    local_out = [np.concatenate(pieces, axis=-3) for pieces in received]  # worker r: (..., h, n_r, d_v)
    return np.concatenate(local_out, axis=-2), sent  # (..., h, n, d_v)


def ring_attention_sent(n, d_k, d_v, num_workers, heads=1):
    """Numbers each worker sends in ``ring_attention``: (p - 1) key and value blocks of n / p positions.

    >>> ring_attention_sent(8, 4, 4, 4, heads=2)
    96
    """
    _blocks(n, num_workers)
    return (num_workers - 1) * heads * (n // num_workers) * (d_k + d_v)


def ulysses_sent(n, d_k, d_v, num_workers, heads):
    """Numbers each worker sends in ``ulysses_attention``: (p - 1) / p of its q, k, v and output blocks.

    >>> ulysses_sent(6, 3, 3, 2, heads=4)
    72
    """
    _blocks(n, num_workers)
    p = num_workers
    return math.prod((p - 1, heads // p, n // p)) * (2 * d_k + 2 * d_v)
