"""Cutting a layer into shards (chapter 11): which heads, and which slices of the parameters, each worker holds.

Heads do not talk to each other until the output projection, so p workers can each hold h / p of
them. Worker r holds only its slice of the parameters:

    heads     [r h_r, (r + 1) h_r)                      h_r = h / p heads
    W_Q, W_K  columns [r h_r d_k, (r + 1) h_r d_k)      (d_model, h_r d_k) each
    W_V       columns [r h_r d_v, (r + 1) h_r d_v)      (d_model, h_r d_v)
    b_Q, b_K, b_V   the same entries                  (h_r d_k,), (h_r d_k,), (h_r d_v,)
    W_O       the same ROWS as W_V's columns          (h_r d_v, d_model)
    b_O       on worker 0 only                        (d_model,)

Axis names as in ``parallel.py``: p workers, r a worker's rank, h_r = h / p heads per worker.
"""

from dataclasses import dataclass

import numpy as np  # noqa: F401  (the examples)

from ._checks import is_int, require_positive_int
from .gqa import check_kv_heads
from .params import MHAParams, init_params  # noqa: F401  (init_params: the examples)


def worker_heads(num_heads, num_workers, rank):
    """The heads that worker ``rank`` of ``num_workers`` computes: a block of h / p consecutive heads.

    Examples
    --------
    >>> worker_heads(8, 4, 1)
    range(2, 4)
    >>> worker_heads(6, 4, 0)
    Traceback (most recent call last):
    ...
    ValueError: num_workers = p = 4 does not divide num_heads = h = 6: each worker must hold a whole number of heads (h / p = 1.5); choose p among the divisors of h: [1, 2, 3, 6]
    """
    require_positive_int(num_heads, "num_heads")
    require_positive_int(num_workers, "num_workers")
    if num_heads % num_workers:
        divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
        raise ValueError(
            f"num_workers = p = {num_workers} does not divide num_heads = h = {num_heads}: each worker must hold "
            f"a whole number of heads (h / p = {num_heads / num_workers:g}); choose p among the divisors of h: "
            f"{divisors}"
        )
    if not is_int(rank) or not 0 <= rank < num_workers:
        raise ValueError(f"rank must be an integer in [0, num_workers) = [0, {num_workers}), got {rank!r}")
    per_worker = num_heads // num_workers  # h_r
    return range(rank * per_worker, (rank + 1) * per_worker)


@dataclass
class ParamShard(MHAParams):
    """The parameters one worker holds: an ``MHAParams`` of h_r = h / p heads, and where they sit in the layer.

    Its ``w_q, w_k`` (d_model, h_r d_k) and ``w_v`` (d_model, h_r d_v) are its
    heads' columns of the layer's matrices, ``w_o`` (h_r d_v, d_model) their
    rows of W_O; ``b_o`` is present on worker 0 only. Being an ``MHAParams``,
    a shard runs through ``multihead_attention`` like any layer.
    """

    rank: int = 0
    num_workers: int = 1

    def __post_init__(self):
        super().__post_init__()
        require_positive_int(self.num_workers, "num_workers")
        if not is_int(self.rank) or not 0 <= self.rank < self.num_workers:
            raise ValueError(f"rank must be an integer in [0, num_workers) = [0, {self.num_workers}), got {self.rank!r}")

    @property
    def heads(self):
        """The layer's heads that this worker computes: [r h_r, (r + 1) h_r)."""
        return range(self.rank * self.num_heads, (self.rank + 1) * self.num_heads)


def shard_params(params, num_workers, rank):
    """Cut out the parameters that worker ``rank`` of ``num_workers`` needs for its heads.

    Head i owns columns ``[i d_k, (i + 1) d_k)`` of W_Q and W_K and
    ``[i d_v, (i + 1) d_v)`` of W_V (where its queries, keys and values are
    made) and the same rows of W_O as of W_V's columns (where its output is
    read). Worker r's heads are consecutive, so its slices are single blocks.

    The output bias b_O is not a property of any head: it is added once to the
    sum. If every worker added it, the all-reduce would add it p times, so it
    lives on worker 0 only (adding it after the all-reduce is equivalent).

    Parameters
    ----------
    params : MHAParams
    num_workers : int, dividing ``params.num_heads``
    rank : int in [0, num_workers)

    Returns
    -------
    ParamShard
        Copies of the slices, so that a shard does not keep the full matrices alive.

    Examples
    --------
    >>> p = init_params(8, 4, seed=0)           # d_model = 8, h = 4, d_k = d_v = 2
    >>> s = shard_params(p, 2, 1)               # worker 1 of 2: heads 2 and 3
    >>> s.heads, s.w_q.shape, s.w_o.shape, s.b_o
    (range(2, 4), (8, 4), (4, 8), None)
    >>> bool(np.array_equal(s.w_o, p.w_o[4:8, :]))   # rows 4-7 of W_O
    True
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be an MHAParams (see init_params), got {type(params).__name__}")
    heads = worker_heads(params.num_heads, num_workers, rank)
    qk = slice(heads.start * params.d_k, heads.stop * params.d_k)  # this worker's h_r d_k query/key features
    vo = slice(heads.start * params.d_v, heads.stop * params.d_v)  # its h_r d_v value features

    def cut(array, index):
        return None if array is None else array[index].copy()

    every = slice(None)
    return ParamShard(
        len(heads),
        w_q=cut(params.w_q, (every, qk)),  # (d_model, h d_k) -> (d_model, h_r d_k)
        w_k=cut(params.w_k, (every, qk)),
        w_v=cut(params.w_v, (every, vo)),  # (d_model, h d_v) -> (d_model, h_r d_v)
        w_o=cut(params.w_o, (vo, every)),  # (h d_v, d_model) -> (h_r d_v, d_model): ROWS
        b_q=cut(params.b_q, qk), b_k=cut(params.b_k, qk), b_v=cut(params.b_v, vo),
        b_o=cut(params.b_o, every) if rank == 0 else None,
        rank=int(rank), num_workers=int(num_workers),
    )


def worker_kv_heads(num_heads, num_kv_heads, num_workers, rank):
    """The key/value heads that worker ``rank`` needs when h_kv of them serve h query heads (chapter 10).

    Query head i reads key/value head i // g, g = h / h_kv. With h_kv >= p every
    worker holds its own key/value heads; with h_kv < p several workers read
    the same one, and each holds a copy: every key/value head is replicated on
    p / h_kv workers. Either p divides h_kv or h_kv divides p, so that no
    worker's block of query heads straddles a group.

    Examples
    --------
    >>> [worker_kv_heads(8, 4, 2, r) for r in range(2)]          # h_kv >= p: two each, none shared
    [range(0, 2), range(2, 4)]
    >>> [worker_kv_heads(8, 2, 4, r) for r in range(4)]          # h_kv < p: each head on two workers
    [range(0, 1), range(0, 1), range(1, 2), range(1, 2)]
    """
    heads = worker_heads(num_heads, num_workers, rank)
    check_kv_heads(num_heads, num_kv_heads)
    if num_kv_heads % num_workers and num_workers % num_kv_heads:
        raise ValueError(f"with h_kv = {num_kv_heads} key/value heads and p = {num_workers} workers, some "
                         f"worker's query heads would straddle two groups: p must divide h_kv or h_kv divide p")
    g = num_heads // num_kv_heads  # query heads per key/value head
    return range(heads.start // g, (heads.stop - 1) // g + 1)
