"""Head parallelism: one multi-head attention layer split across p workers.

Heads do not talk to each other until the output projection, so p workers
(processes, GPUs) can each compute h / p of them. Worker r holds only its slice
of the parameters:

    heads     [r h_r, (r + 1) h_r)                      h_r = h / p heads
    W_Q, W_K  columns [r h_r d_k, (r + 1) h_r d_k)      (d_model, h_r d_k) each
    W_V       columns [r h_r d_v, (r + 1) h_r d_v)      (d_model, h_r d_v)
    b_Q, b_K, b_V   the same entries                  (h_r d_k,), (h_r d_k,), (h_r d_v,)
    W_O       the same ROWS as W_V's columns          (h_r d_v, d_model)
    b_O       on worker 0 only                        (d_model,)

Its heads' outputs, put side by side, times its rows of W_O give a *partial*
output of the full shape (..., n, d_model). Because a concatenation times a
matrix is a sum of blocks, the sum of the p partials is the layer's output:
one all-reduce (sum) per forward pass. This is the scheme of Shoeybi et al.
(2019), *Megatron-LM: Training Multi-Billion Parameter Language Models Using
Model Parallelism*.

Axis names (as in ``multihead.py``), plus

    p     number of workers, which must divide h
    r     a worker's rank, 0 <= r < p
    h_r   heads per worker, h / p
    N     number of elements of the all-reduced tensor, B * n * d_model

The numpy functions here simulate the workers with a loop over ranks;
``distributed.run_distributed`` runs them as real processes with
``torch.distributed``. Chapter 9 teaches both.
"""

from dataclasses import dataclass

import numpy as np

from ._checks import is_int, require_positive_int
from .complexity import stage_flops
from .grads import mha_backward
from .inference import check_kv_heads, grouped_query_attention
from .multihead import MHAParams, init_params, multihead_attention


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


def partial_output(x_q, x_k, x_v, shard, mask=None):
    """What one worker computes: its heads, and their share of the output projection.

    A shard is a layer of h_r heads whose W_O has the worker's rows only, so
    this is ``multihead_attention`` itself: the worker's h_r heads side by side
    times its rows of W_O give a full-width (..., n, d_model) array that is
    *one term* of the layer's output.

    Parameters
    ----------
    x_q : array_like, (..., n, d_model)
    x_k, x_v : array_like, (..., m, d_model)
        Every worker holds the whole input.
    shard : ParamShard
    mask : array_like of bool, broadcastable to (..., n, m), optional (True = may attend)

    Returns
    -------
    y_r : ndarray, (..., n, d_model)
        This worker's term; the sum over workers is the layer's output.
    weights_r : ndarray, (..., h_r, n, m)
        The attention weights of this worker's heads.

    Examples
    --------
    >>> p = init_params(8, 4, seed=0)
    >>> x = np.random.default_rng(0).normal(size=(2, 3, 8))       # B = 2, n = 3
    >>> terms = [partial_output(x, x, x, shard_params(p, 2, r))[0] for r in range(2)]
    >>> terms[0].shape, bool(np.allclose(terms[0] + terms[1], multihead_attention(x, x, x, p)[0]))
    ((2, 3, 8), True)
    """
    if not isinstance(shard, ParamShard):
        raise TypeError(f"shard must be a ParamShard (see shard_params), got {type(shard).__name__}")
    return multihead_attention(x_q, x_k, x_v, shard, mask)


def simulate_head_parallel(x_q, x_k, x_v, params, num_workers, mask=None):
    """Head-parallel attention with the workers simulated by a loop over ranks.

    Parameters
    ----------
    x_q, x_k, x_v, mask : as for ``multihead_attention``
    params : MHAParams
    num_workers : int, dividing ``params.num_heads``

    Returns
    -------
    y : ndarray, (..., n, d_model)
        The sum of the partial outputs: what the all-reduce leaves on every worker.
    partials : ndarray, (p, ..., n, d_model)
        Each worker's term.

    Examples
    --------
    >>> p = init_params(8, 4, seed=0)
    >>> x = np.random.default_rng(0).normal(size=(2, 3, 8))      # B = 2, n = 3
    >>> y, partials = simulate_head_parallel(x, x, x, p, 4)
    >>> partials.shape
    (4, 2, 3, 8)
    >>> bool(np.allclose(y, multihead_attention(x, x, x, p)[0]))
    True
    """
    partials = []
    for rank in range(num_workers):  # in a real run, each iteration happens in its own process
        shard = shard_params(params, num_workers, rank)
        y_r, _ = partial_output(x_q, x_k, x_v, shard, mask)  # (..., n, d_model)
        partials.append(y_r)
    partials = np.stack(partials)  # p times (..., n, d_model) -> (p, ..., n, d_model)
    return partials.sum(axis=0), partials  # the all-reduce: (p, ..., n, d_model) -> (..., n, d_model)


def simulate_head_parallel_backward(x_q, x_k, x_v, params, d_y, num_workers, mask=None):
    """The backward pass of head-parallel attention, with the workers simulated by a loop over ranks.

    The all-reduce of the forward pass hands every worker the same gradient d_y
    (the backward of a sum copies its gradient to every term). Each worker then
    runs ``grads.mha_backward`` on its shard: the gradients of its slices of the
    weights are its own and need no communication, but every worker's heads
    read the whole input, so each has a *term* of the input gradient, and the
    terms must be summed: a second all-reduce, the backward mirror of the first.

    Returns
    -------
    dx_q, dx_k, dx_v : ndarrays, the shapes of x_q, x_k, x_v
        The all-reduced input gradients.
    shard_grads : list of p MHAParams
        Worker r's gradients of its own slices (shaped like its ``ParamShard``).

    Examples
    --------
    >>> p = init_params(8, 4, seed=0)
    >>> x = np.random.default_rng(0).normal(size=(2, 3, 8))          # B = 2, n = 3
    >>> (dx_q, dx_k, dx_v), grads = simulate_head_parallel_backward(x, x, x, p, np.ones((2, 3, 8)), 2)
    >>> full = mha_backward(x, x, x, p, np.ones((2, 3, 8)))
    >>> bool(np.allclose(dx_q, full[0])), grads[1].w_q.shape            # worker 1: columns 4-7 of W_Q
    (True, (8, 4))
    """
    terms, shard_grads = [], []
    for rank in range(num_workers):  # in a real run, each iteration happens in its own process
        shard = shard_params(params, num_workers, rank)
        dx_q, dx_k, dx_v, d_shard = mha_backward(x_q, x_k, x_v, shard, d_y, mask)
        terms.append((dx_q, dx_k, dx_v))  # this worker's terms of the input gradients
        shard_grads.append(d_shard)  # ∂L/∂(its slices), the shapes of its ParamShard
    dx = tuple(np.sum(np.stack(t), axis=0) for t in zip(*terms))  # the all-reduce: (p, ...) -> (...)
    return dx, shard_grads


def worker_kv_heads(num_heads, num_kv_heads, num_workers, rank):
    """The key/value heads that worker ``rank`` needs when h_kv of them serve h query heads (chapter 8).

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


def simulate_gqa_head_parallel(q, k, v, num_workers, mask=None):
    """Grouped-query attention with its query heads split over p workers, simulated by a loop over ranks.

    Worker r takes its block of h / p query heads and only the key/value heads
    they read (``worker_kv_heads``), and runs ``inference.grouped_query_attention``
    on them. Its outputs are its heads' outputs; put side by side they are the
    whole layer's (W_O then works as in ``partial_output``).

    Parameters
    ----------
    q : array_like, (..., h, n, d_k)
    k, v : array_like, (..., h_kv, m, d_k) and (..., h_kv, m, d_v)
    num_workers : int
    mask : array_like of bool, broadcastable to (..., 1, n, m), optional (one mask for every head)

    Returns
    -------
    out : ndarray, (..., h, n, d_v)

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.normal(size=(2, 8, 3, 4)), rng.normal(size=(2, 2, 5, 4))   # B = 2, h = 8, h_kv = 2
    >>> out = simulate_gqa_head_parallel(q, k, k, 4)
    >>> bool(np.allclose(out, grouped_query_attention(q, k, k)[0])), out.shape
    (True, (2, 8, 3, 4))
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    h, h_kv = q.shape[-3], k.shape[-3]
    outs = []
    for rank in range(num_workers):  # in a real run, each iteration happens in its own process
        heads, kv = worker_heads(h, num_workers, rank), worker_kv_heads(h, h_kv, num_workers, rank)
        out_r, _ = grouped_query_attention(q[..., heads.start:heads.stop, :, :],  # (..., h / p, n, d_k)
                                           k[..., kv.start:kv.stop, :, :],  # (..., kv heads it reads, m, d_k)
                                           v[..., kv.start:kv.stop, :, :], mask)
        outs.append(out_r)
    return np.concatenate(outs, axis=-3)  # p times (..., h / p, n, d_v) -> (..., h, n, d_v)


# ---------------------------------------------------------------- what it costs

def ring_schedule(num_workers):
    """Which chunk each worker sends at each step of a ring all-reduce of p chunks.

    Worker r always sends to worker (r + 1) mod p. Steps 0 to p - 2
    (reduce-scatter): worker r sends chunk (r - s) mod p, and the receiver adds
    it to its own copy; afterwards worker r holds the full sum of chunk
    (r + 1) mod p. Steps p - 1 to 2p - 3 (all-gather): worker r passes on a
    finished chunk, (r + 1 - s') mod p at all-gather step s', and the receiver
    overwrites its copy.

    Returns
    -------
    ndarray of int, (p, 2 (p - 1))
        ``schedule[r, s]``: the chunk worker r sends at step s.

    Examples
    --------
    >>> ring_schedule(3)
    array([[0, 2, 1, 0],
           [1, 0, 2, 1],
           [2, 1, 0, 2]])
    """
    require_positive_int(num_workers, "num_workers")
    p = num_workers
    r = np.arange(p)[:, None]  # (p, 1) ranks
    reduce_scatter = (r - np.arange(p - 1)[None, :]) % p  # (p, p - 1)
    all_gather = (r + 1 - np.arange(p - 1)[None, :]) % p  # (p, p - 1)
    return np.concatenate([reduce_scatter, all_gather], axis=1)  # (p, 2 (p - 1))


def ring_allreduce(arrays, *, history=False):
    """Sum p equal-shape arrays the way a ring all-reduce does, and count what each worker sends.

    Every worker's array is cut into p chunks (as equal as possible, along the
    flattened array). At every step all workers send one chunk to their
    neighbour at the same time, following ``ring_schedule``.

    Parameters
    ----------
    arrays : sequence of p array_like, all of the same shape
        Worker r's input is ``arrays[r]``.
    history : bool
        Also return what every worker holds before the first step and after each step.

    Returns
    -------
    results : list of p ndarray
        What each worker holds at the end: the sum of all inputs.
    sent : ndarray of int, (p,)
        The number of elements each worker sent.
    states : ndarray, (2 (p - 1) + 1, p, ...), only with ``history=True``
        ``states[s, r]``: worker r's array after s steps (``states[0]`` is the input).

    Examples
    --------
    >>> results, sent = ring_allreduce([np.arange(6.0), np.ones(6), np.full(6, 10.0)])
    >>> results[2], sent
    (array([11., 12., 13., 14., 15., 16.]), array([8, 8, 8]))
    """
    p = len(arrays)
    require_positive_int(p, "the number of arrays")
    shape = np.shape(arrays[0])
    if any(np.shape(a) != shape for a in arrays):
        raise ValueError(f"every worker's array needs the same shape, got {[np.shape(a) for a in arrays]}")
    buffers = [np.array(a, dtype=float).reshape(-1) for a in arrays]  # worker r's copy, (N,)
    chunks = np.array_split(np.arange(buffers[0].size), p)  # p index blocks covering 0..N-1
    schedule = ring_schedule(p)
    sent = np.zeros(p, dtype=int)
    states = [np.stack(buffers)]  # (p, N) after 0 steps
    for step in range(2 * (p - 1)):
        # all workers send at once: read every message before any receiver changes its buffer
        messages = [(r, buffers[r][chunks[schedule[r, step]]].copy(), chunks[schedule[r, step]]) for r in range(p)]
        for r, data, index in messages:
            receiver = buffers[(r + 1) % p]
            if step < p - 1:
                receiver[index] += data  # reduce-scatter: add to the running sum
            else:
                receiver[index] = data  # all-gather: copy the finished sum
            sent[r] += data.size
        states.append(np.stack(buffers))  # (p, N) after step + 1 steps
    results = [b.reshape(shape) for b in buffers]
    if history:
        return results, sent, np.stack(states).reshape((len(states), p) + shape)  # (steps + 1, p, ...)
    return results, sent


def ring_holdings(num_workers):
    """Whose terms each worker's copy of each chunk holds, after every step of a ring all-reduce.

    Runs ``ring_allreduce`` on inputs that label each worker: worker r's
    term is 2**r in every chunk, so a partial sum is a set of workers
    written in binary.

    Returns
    -------
    ndarray of int, (2 (p - 1) + 1, p, p)
        ``holdings[s, r, c]``: after s steps, the bit mask of the workers whose terms
        are summed in worker r's copy of chunk c. All p bits set: the complete sum.

    Examples
    --------
    >>> holdings = ring_holdings(3)
    >>> holdings[0].tolist()          # at the start every worker holds its own term only
    [[1, 1, 1], [2, 2, 2], [4, 4, 4]]
    >>> holdings[2].tolist()          # after reduce-scatter: worker r has the full sum (7) of chunk r + 1
    [[1, 7, 5], [3, 2, 7], [7, 6, 4]]
    >>> bool((holdings[-1] == 7).all())
    True
    """
    require_positive_int(num_workers, "num_workers")
    p = num_workers
    labels = [np.full(p, 2.0 ** r) for r in range(p)]  # worker r: 2**r in each of the p one-element chunks
    _, _, states = ring_allreduce(labels, history=True)  # (2 (p - 1) + 1, p, p)
    return states.astype(int)


def allreduce_time(num_bytes, num_workers, alpha, beta):
    """The α–β model of a ring all-reduce: 2 (p - 1) α + 2 (p - 1) / p · N / β seconds.

    Each of the 2 (p - 1) steps waits for one message: a fixed latency α
    (seconds) plus its N / p bytes at the bandwidth β (bytes per second).

    Parameters
    ----------
    num_bytes : float or ndarray
        N, the size of the all-reduced tensor in bytes.
    num_workers : int
    alpha : float, seconds per message
    beta : float, bytes per second

    Returns
    -------
    float, or ndarray of the shape of ``num_bytes``: seconds

    Examples
    --------
    >>> allreduce_time(1e6, 2, alpha=1e-5, beta=1e9)      # 2 α + 1 MB at 1 GB/s
    0.00102
    """
    require_positive_int(num_workers, "num_workers")
    if not (alpha >= 0 and beta > 0):
        raise ValueError(f"allreduce_time needs alpha >= 0 and beta > 0, got alpha = {alpha}, beta = {beta}")
    p = num_workers
    time = 2 * (p - 1) * alpha + 2 * (p - 1) / p * np.asarray(num_bytes, dtype=float) / beta
    return float(time) if time.ndim == 0 else time


def fit_alpha_beta(num_bytes, seconds, num_workers):
    """Fit the α–β model of ``allreduce_time`` to measured all-reduce times, by least squares.

    The model is linear in α and 1/β: t = 2 (p - 1) α + (2 (p - 1) / p · N) (1 / β).
    Relative errors count equally: each row is divided by its measured time,
    so that the small messages (which fix α) weigh as much as the large ones
    (which fix β).

    Parameters
    ----------
    num_bytes, seconds : 1-D array_like of the same length (at least 2), sizes and measured times
    num_workers : int

    Returns
    -------
    alpha : float, seconds
    beta : float, bytes per second

    Examples
    --------
    >>> sizes = np.array([8, 1e3, 1e5, 1e7])
    >>> alpha, beta = fit_alpha_beta(sizes, allreduce_time(sizes, 2, 2e-5, 3e9), 2)
    >>> round(alpha * 1e6, 6), round(beta / 1e9, 6)
    (20.0, 3.0)
    """
    require_positive_int(num_workers, "num_workers")
    sizes = np.asarray(num_bytes, dtype=float)
    times = np.asarray(seconds, dtype=float)
    if sizes.ndim != 1 or sizes.shape != times.shape or sizes.size < 2:
        raise ValueError(f"fit_alpha_beta needs two 1-D arrays of the same length >= 2, got shapes "
                         f"{sizes.shape} and {times.shape}")
    if num_workers < 2 or np.any(times <= 0) or np.ptp(sizes) == 0:
        raise ValueError(f"fit_alpha_beta needs p >= 2 workers (got {num_workers}), positive times and at least "
                         f"two different sizes")
    p = num_workers
    design = np.stack([np.full_like(sizes, 2.0 * (p - 1)), 2 * (p - 1) / p * sizes], axis=1)  # (k, 2)
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design / times[:, None], np.ones_like(times), rcond=None)
    if inverse_beta <= 0:
        raise ValueError("the fitted bandwidth is not positive: the times do not grow with the size")
    return float(alpha), float(1 / inverse_beta)


def allreduce_bytes(num_elements, num_workers, itemsize=8):
    """Bytes each worker sends in a ring all-reduce of N elements: 2 (p - 1) / p * N * itemsize.

    Reduce-scatter and all-gather take p - 1 steps each, and at every step a
    worker sends one chunk of N / p elements. When p does not divide N the
    chunks differ by one element and so do the workers; the formula is then
    their average (which it equals exactly).

    Parameters
    ----------
    num_elements : int
        N, for example B * n * d_model for the output of an attention layer.
    num_workers : int
    itemsize : int
        Bytes per element (8 for float64, 4 for float32, 2 for float16).

    Returns
    -------
    float

    Examples
    --------
    >>> allreduce_bytes(2 * 5 * 16, 2)      # a (2, 5, 16) float64 tensor, 2 workers: the tensor's size
    1280.0
    >>> allreduce_bytes(1000, 1000, 1)      # many workers: nearly twice the tensor
    1998.0
    """
    require_positive_int(num_elements, "num_elements")
    require_positive_int(num_workers, "num_workers")
    require_positive_int(itemsize, "itemsize")
    return 2 * (num_workers - 1) * num_elements * itemsize / num_workers


def worker_matmul_flops(n, d_model, num_heads, num_workers, m=None, *, batch=1):
    """Matrix-product FLOPs of one worker's ``partial_output``, counted from the shard's shapes.

    Every product of the layer shrinks by the factor p: the projections have
    d_model / p columns, there are h / p heads, and W_O has d_model / p rows.
    (A multiply-add is 2 FLOPs, as in ``complexity.mha_flops``.)

    Examples
    --------
    >>> worker_matmul_flops(4, 8, 2, 2) * 2 == worker_matmul_flops(4, 8, 2, 1)
    True
    """
    heads = worker_heads(num_heads, num_workers, 0)
    for name, value in (("n", n), ("batch", batch)) + ((("m", m),) if m is not None else ()):
        require_positive_int(value, name)
    m = n if m is None else m
    d_k = d_model // num_heads
    # a worker is a layer of h_r heads whose W_O has only its h_r d_k rows: the same table, with h_r heads
    return stage_flops(batch=batch, queries=n, keys=m, kv_tokens=m, d_model=d_model, num_heads=len(heads),
                       num_kv_heads=len(heads), d_k=d_k, d_v=d_k, bias=False)["matmul"]


# ---------------------------------------------------------------- real processes

def demo_problem(batch=2, n=5, m=7, d_model=16, num_heads=4, *, dtype="float64", seed=0):
    """The inputs of the distributed demonstration: cross-attention with random biases and a random mask.

    Every worker calls this with the same seed and so holds the same input and
    parameters (a real worker would load only its shard of the parameters).

    Returns
    -------
    x_q : ndarray, (batch, n, d_model)
    x_kv : ndarray, (batch, m, d_model), used as keys and values
    params : MHAParams, biases random (not zero, which would hide a b_O counted p times)
    mask : ndarray of bool, (batch, n, m), every query may see key 0

    Examples
    --------
    >>> x_q, x_kv, params, mask = demo_problem()
    >>> x_q.shape, x_kv.shape, params.num_heads, mask.shape
    ((2, 5, 16), (2, 7, 16), 4, (2, 5, 7))
    """
    for name, value in (("batch", batch), ("n", n), ("m", m)):
        require_positive_int(value, name)
    rng = np.random.default_rng(seed)
    params = init_params(d_model, num_heads, seed=seed, dtype=dtype)
    for name in ("b_q", "b_k", "b_v", "b_o"):
        setattr(params, name, rng.normal(scale=0.1, size=d_model).astype(dtype))
    x_q = rng.normal(size=(batch, n, d_model)).astype(dtype)
    x_kv = rng.normal(size=(batch, m, d_model)).astype(dtype)
    mask = rng.random((batch, n, m)) < 0.7  # (B, n, m), True = may attend
    mask[..., 0] = True
    return x_q, x_kv, params, mask
