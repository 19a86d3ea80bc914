"""Head parallelism: one multi-head attention layer split across p workers.

Heads do not talk to each other until the output projection, so p workers
(processes, GPUs) can each compute h / p of them. Worker r holds only its slice
of the parameters:

    heads     [r h_r, (r + 1) h_r)                      h_r = h / p heads
    W_Q, W_K, W_V   columns [r h_r d_k, (r + 1) h_r d_k)    (d_model, h_r d_k) each
    b_Q, b_K, b_V   the same entries                      (h_r d_k,) each
    W_O             the same ROWS                         (h_r d_k, d_model)
    b_O             on worker 0 only                      (d_model,)

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

The numpy functions simulate the workers with a loop over ranks;
``run_distributed`` runs them as real processes with ``torch.distributed``
(torch is imported inside it only).
"""

import math
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._checks import check_layer_arrays, require_positive_int
from .attention import scaled_dot_product_attention
from .multihead import MHAParams, _project, combine_heads, init_params, multihead_attention, split_heads


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
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < num_workers:
        raise ValueError(f"rank must be an integer in [0, num_workers) = [0, {num_workers}), got {rank!r}")
    per_worker = num_heads // num_workers  # h_r
    return range(rank * per_worker, (rank + 1) * per_worker)


@dataclass
class ParamShard:
    """The parameters one worker holds: its heads' columns of W_Q, W_K, W_V and rows of W_O.

    ``w_q, w_k, w_v`` have shape ``(d_model, h_r d_k)``, ``w_o`` has shape
    ``(h_r d_k, d_model)``; ``b_q, b_k, b_v`` have shape ``(h_r d_k,)`` or are
    ``None``; ``b_o`` has shape ``(d_model,)`` on worker 0 and is ``None``
    elsewhere (or everywhere, for a layer without biases).
    """

    rank: int
    num_workers: int
    heads: range
    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    b_q: Optional[np.ndarray] = None
    b_k: Optional[np.ndarray] = None
    b_v: Optional[np.ndarray] = None
    b_o: Optional[np.ndarray] = None

    def __post_init__(self):
        width = self.w_q.shape[1] if self.w_q.ndim == 2 else -1  # h_r d_k
        d_model = self.w_q.shape[0]
        expected = {"w_q": (d_model, width), "w_k": (d_model, width), "w_v": (d_model, width),
                    "w_o": (width, d_model), "b_q": (width,), "b_k": (width,), "b_v": (width,), "b_o": (d_model,)}
        for name, shape in expected.items():
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"{name} has shape {value.shape}, expected {shape} for a shard of "
                                 f"{len(self.heads)} heads with d_model = {d_model}")
        if width % len(self.heads):
            raise ValueError(f"the shard's width {width} is not a multiple of its {len(self.heads)} heads")

    @property
    def num_heads(self):
        """h_r, the number of heads on this worker."""
        return len(self.heads)

    @property
    def d_model(self):
        return self.w_q.shape[0]

    @property
    def d_k(self):
        return self.w_q.shape[1] // self.num_heads


def shard_params(params, num_workers, rank):
    """Cut out the parameters that worker ``rank`` of ``num_workers`` needs for its heads.

    Head i owns features ``[i d_k, (i + 1) d_k)``: columns of W_Q, W_K and W_V
    (where the head's queries, keys and values are made) and rows of W_O (where
    the head's output is read). Worker r's heads are consecutive, so its slices
    are single blocks of ``h_r d_k`` columns and rows.

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
    >>> p = init_params(8, 4, seed=0)           # d_model = 8, h = 4, d_k = 2
    >>> s = shard_params(p, 2, 1)               # worker 1 of 2: heads 2 and 3
    >>> s.heads, s.w_q.shape, s.w_o.shape, s.b_o
    (range(2, 4), (8, 4), (4, 8), None)
    >>> bool(np.array_equal(s.w_o, p.w_o[4:8, :]))   # rows 4-7 of W_O
    True
    """
    if not isinstance(params, MHAParams):
        raise ValueError(f"params must be an MHAParams (see init_params), got {type(params).__name__}")
    heads = worker_heads(params.num_heads, num_workers, rank)
    d_k = params.d_k
    features = slice(heads.start * d_k, heads.stop * d_k)  # this worker's h_r d_k features

    def cut(array, index):
        return None if array is None else array[index].copy()

    return ParamShard(
        rank=int(rank), num_workers=int(num_workers), heads=heads,
        w_q=cut(params.w_q, (slice(None), features)),  # (d_model, d_model) -> (d_model, h_r d_k)
        w_k=cut(params.w_k, (slice(None), features)),
        w_v=cut(params.w_v, (slice(None), features)),
        w_o=cut(params.w_o, (features, slice(None))),  # (d_model, d_model) -> (h_r d_k, d_model): ROWS
        b_q=cut(params.b_q, features), b_k=cut(params.b_k, features), b_v=cut(params.b_v, features),
        b_o=cut(params.b_o, slice(None)) if rank == 0 else None,
    )


def _check_shard_inputs(x_q, x_k, x_v, shard, mask):
    """Validate the inputs of ``partial_output``; return the arrays as floats."""
    if not isinstance(shard, ParamShard):
        raise ValueError(f"shard must be a ParamShard (see shard_params), got {type(shard).__name__}")
    return check_layer_arrays(x_q, x_k, x_v, mask, shard.d_model, "the shard expects")


def partial_output(x_q, x_k, x_v, shard, mask=None):
    """What one worker computes: its heads, and their share of the output projection.

    The steps are those of ``multihead_attention`` with h_r heads instead of h;
    only step 5 differs: the worker's h_r d_k features times its rows of W_O
    give a full-width (..., n, d_model) array that is *one term* of the output.

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
    >>> x = np.random.default_rng(0).normal(size=(3, 8))
    >>> terms = [partial_output(x, x, x, shard_params(p, 2, r))[0] for r in range(2)]
    >>> bool(np.allclose(terms[0] + terms[1], multihead_attention(x, x, x, p)[0]))
    True
    """
    x_q, x_k, x_v, mask = _check_shard_inputs(x_q, x_k, x_v, shard, mask)
    h_r = shard.num_heads
    # step 1: project, with this worker's columns only
    q = _project(x_q, shard.w_q, shard.b_q)  # (..., n, d_model) @ (d_model, h_r d_k) -> (..., n, h_r d_k)
    k = _project(x_k, shard.w_k, shard.b_k)  # (..., m, h_r d_k)
    v = _project(x_v, shard.w_v, shard.b_v)  # (..., m, h_r d_k)
    # step 2: cut into this worker's h_r heads
    q = split_heads(q, h_r)  # (..., n, h_r d_k) -> (..., h_r, n, d_k)
    k = split_heads(k, h_r)  # (..., m, h_r d_k) -> (..., h_r, m, d_k)
    v = split_heads(v, h_r)  # (..., m, h_r d_k) -> (..., h_r, m, d_k)
    # step 3: every head attends on its own, exactly as on a single machine
    if mask is not None:
        mask = mask.reshape(mask.shape[:-2] + (1,) + mask.shape[-2:])  # (..., n, m) -> (..., 1, n, m)
    out, weights = scaled_dot_product_attention(q, k, v, mask)  # (..., h_r, n, d_k), (..., h_r, n, m)
    # step 4: this worker's heads side by side
    out = combine_heads(out)  # (..., h_r, n, d_k) -> (..., n, h_r d_k)
    # step 5: this worker's rows of W_O give one term of the output (b_O on worker 0 only)
    y_r = _project(out, shard.w_o, shard.b_o)  # (..., n, h_r d_k) @ (h_r d_k, d_model) -> (..., n, d_model)
    return y_r, weights


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


def ring_allreduce(arrays):
    """Sum p equal-shape arrays the way a ring all-reduce does, and count what each worker sends.

    Every worker's array is cut into p chunks (as equal as possible, along the
    flattened array). At every step all workers send one chunk to their
    neighbour at the same time, following ``ring_schedule``.

    Parameters
    ----------
    arrays : sequence of p array_like, all of the same shape
        Worker r's input is ``arrays[r]``.

    Returns
    -------
    results : list of p ndarray
        What each worker holds at the end: the sum of all inputs.
    sent : ndarray of int, (p,)
        The number of elements each worker sent.

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
    return [b.reshape(shape) for b in buffers], sent


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
    B, d, h_r = batch, d_model, len(heads)
    d_k = d // num_heads
    width = h_r * d_k  # the shard's columns of W_Q, W_K, W_V and rows of W_O
    return (2 * B * n * d * width  # queries: (B, n, d) @ (d, h_r d_k)
            + 2 * 2 * B * m * d * width  # keys and values: (B, m, d) @ (d, h_r d_k)
            + 2 * B * h_r * n * m * d_k  # scores: h_r times (n, d_k) @ (d_k, m)
            + 2 * B * h_r * n * m * d_k  # weighted sum: h_r times (n, m) @ (m, d_k)
            + 2 * B * n * width * d)  # output: (B, n, h_r d_k) @ (h_r d_k, d)


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


def _loopback_interface():
    """The name of the loopback network interface ('lo' on Linux, 'lo0' on macOS), or None."""
    import socket

    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):  # not available on every platform
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def _require_gloo(dist):
    """Raise a RuntimeError that says what is missing if ``dist`` (torch.distributed) cannot run gloo."""
    if not dist.is_available():
        raise RuntimeError("this PyTorch build has no torch.distributed support, so run_distributed cannot run")
    if not dist.is_gloo_available():
        raise RuntimeError("this PyTorch build has no gloo backend (torch.distributed.is_gloo_available() is "
                           "False); run_distributed needs gloo to all-reduce between CPU processes")


def _worker(rank, num_workers, store_path, problem, timeout, queue, log_path):
    """One process of ``run_distributed``: join the group, compute a partial output, all-reduce it, report."""
    import traceback

    # this process's own output (a warning of gloo's, say) goes to a log file, not into the notebook or
    # terminal that started it; the parent quotes the log if something fails
    with open(log_path, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        _require_gloo(dist)
        torch.set_num_threads(1)
        interface = _loopback_interface()
        if interface is not None:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)  # gloo connects the workers over 127.0.0.1
        store = dist.FileStore(store_path, num_workers)  # where the workers find each other's addresses
        dist.init_process_group("gloo", store=store, rank=rank, world_size=num_workers,
                                timeout=timedelta(seconds=timeout))
        try:
            x_q, x_kv, params, mask = demo_problem(**problem)
            shard = shard_params(params, num_workers, rank)  # this worker's heads and slices only
            y_r, _ = partial_output(x_q, x_kv, x_kv, shard, mask)  # (B, n, d_model), one term of the sum
            tensor = torch.from_numpy(y_r.copy())  # a copy: the all-reduce overwrites it, rank 0 needs y_r
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # the layer's only communication: sum over workers
            y = tensor.numpy()  # (B, n, d_model), the same on every worker
            report = {"rank": rank, "heads": list(shard.heads), "backend": dist.get_backend(), "y": y}
            if rank == 0:  # rank 0 checks against the whole layer computed by one process
                y_single, _ = multihead_attention(x_q, x_kv, x_kv, params, mask)
                report["max_abs_diff"] = float(np.abs(y - y_single).max())
                report["partial_max_abs_diff"] = float(np.abs(y_r - y_single).max())
                report["max_abs_output"] = float(np.abs(y_single).max())
            queue.put(("ok", rank, report))
        finally:
            dist.destroy_process_group()
    except BaseException:  # report every failure to the parent, which raises it with this traceback
        queue.put(("error", rank, traceback.format_exc()))
        raise


def run_distributed(num_workers=2, *, batch=2, n=5, m=7, d_model=16, num_heads=4, dtype="float64", seed=0,
                    timeout=60.0):
    """Run head-parallel attention on ``num_workers`` real processes and check it against one process.

    The workers are started with the ``spawn`` method (fresh interpreters,
    whatever the calling process has imported or started). They find each
    other through a file store in a temporary folder, so no port has to be
    chosen in advance, and join a ``torch.distributed`` group with the gloo
    backend, which connects them over the loopback interface (127.0.0.1).
    Each computes its ``partial_output`` with this package's numpy code on
    ``demo_problem``'s inputs, turns it into a torch tensor and all-reduces it
    (sum). Worker 0 compares the result with ``multihead_attention`` on the
    whole layer. Every worker leaves the group with ``destroy_process_group``;
    a worker that fails, hangs or dies is reported with its log, and no worker
    outlives the call.

    Parameters
    ----------
    num_workers : int, dividing ``num_heads``
    batch, n, m, d_model, num_heads, dtype, seed : the problem, see ``demo_problem``
    timeout : float
        Seconds for the whole run (starting the processes included) and for
        each collective operation.

    Returns
    -------
    dict
        ``num_workers``, ``backend``, ``heads`` (per rank), ``shape`` of the
        all-reduced tensor, ``dtype``, ``allreduce_elements``, ``tensor_bytes``,
        ``ring_bytes_per_worker`` (``allreduce_bytes``), ``max_abs_diff``
        (all-reduced result against one process), ``partial_max_abs_diff``
        (worker 0's term alone against one process), ``max_abs_output``, and
        ``identical_on_all_workers``.

    Raises
    ------
    RuntimeError
        PyTorch, torch.distributed or its gloo backend is missing, or a worker failed.
    TimeoutError
        The workers did not all report within ``timeout`` seconds.
    """
    import importlib.util
    import multiprocessing
    import queue as queue_module
    import tempfile
    import time

    for r in range(num_workers):
        worker_heads(num_heads, num_workers, r)  # p must divide h: fail here, not in every worker
    if importlib.util.find_spec("torch") is None:
        raise RuntimeError("run_distributed needs PyTorch (pip install torch), which is not installed")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    problem = {"batch": batch, "n": n, "m": m, "d_model": d_model, "num_heads": num_heads, "dtype": dtype,
               "seed": seed}
    demo_problem(**problem)  # bad sizes raise their ValueError here, before any process starts
    start = time.monotonic()
    context = multiprocessing.get_context("spawn")  # fresh interpreters: safe whatever the parent has imported
    results = context.Queue()
    reports = {}
    with tempfile.TemporaryDirectory() as folder:
        store_path = os.path.join(folder, "store")  # the rendezvous: workers write their addresses here
        log_paths = [os.path.join(folder, f"worker{r}.log") for r in range(num_workers)]
        processes = [context.Process(target=_worker, daemon=True,
                                     args=(r, num_workers, store_path, problem, timeout, results, log_paths[r]))
                     for r in range(num_workers)]

        def logs_text():
            texts = []
            for r, path in enumerate(log_paths):
                text = ""
                if os.path.exists(path):
                    with open(path) as log:
                        text = log.read().strip()
                texts.append(f"--- worker {r} log ---\n{text[-2000:] or '(empty)'}")
            return "\n".join(texts)

        try:
            for process in processes:
                process.start()
            while len(reports) < num_workers:
                remaining = timeout - (time.monotonic() - start)
                if remaining <= 0:
                    raise TimeoutError(f"{num_workers - len(reports)} of {num_workers} workers did not report within "
                                       f"timeout = {timeout} s\n{logs_text()}")
                try:
                    status, rank, payload = results.get(timeout=min(remaining, 0.2))
                except queue_module.Empty:
                    dead = [r for r, p in enumerate(processes) if p.exitcode not in (None, 0) and r not in reports]
                    if dead:
                        raise RuntimeError(f"worker {dead[0]} exited with code {processes[dead[0]].exitcode} "
                                           f"without reporting\n{logs_text()}") from None
                    continue
                if status == "error":
                    last = payload.strip().splitlines()[-1]
                    raise RuntimeError(f"worker {rank} failed: {last}\n{payload}")
                reports[rank] = payload
            for process in processes:  # each worker has left the group; wait for it to exit
                process.join(max(1.0, timeout - (time.monotonic() - start)))
        finally:
            for process in processes:  # nothing outlives the call, whatever happened
                if process.is_alive():
                    process.terminate()
                if process.pid is not None:  # started: wait for its exit
                    process.join(5)
                if process.is_alive():
                    process.kill()
                    process.join()
            results.close()
            results.join_thread()
    outputs = [reports[r]["y"] for r in range(num_workers)]
    shape = tuple(outputs[0].shape)
    elements = math.prod(shape)
    itemsize = outputs[0].dtype.itemsize
    return {
        "num_workers": num_workers,
        "backend": reports[0]["backend"],
        "heads": [reports[r]["heads"] for r in range(num_workers)],
        "shape": shape,
        "dtype": str(outputs[0].dtype),
        "allreduce_elements": elements,
        "tensor_bytes": elements * itemsize,
        "ring_bytes_per_worker": allreduce_bytes(elements, num_workers, itemsize),
        "max_abs_diff": reports[0]["max_abs_diff"],
        "partial_max_abs_diff": reports[0]["partial_max_abs_diff"],
        "max_abs_output": reports[0]["max_abs_output"],
        "identical_on_all_workers": all(np.array_equal(y, outputs[0]) for y in outputs),
    }
