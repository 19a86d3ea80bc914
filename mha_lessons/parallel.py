"""Head parallelism: one multi-head attention layer split across p workers.

Heads do not talk to each other until the output projection, so p workers
(processes, GPUs) can each compute h / p of them, holding only their slice of
the parameters (``sharding.py``). A worker's heads' outputs, put side by side,
times its rows of W_O give a *partial* output of the full shape (..., n, d_model).
Because a concatenation times a matrix is a sum of blocks, the sum of the p
partials is the layer's output: one all-reduce (sum) per forward pass. This is the scheme of Shoeybi et al.
(2019), *Megatron-LM: Training Multi-Billion Parameter Language Models Using
Model Parallelism*.

Axis names (as in ``multihead.py``), plus

    p     number of workers, which must divide h
    r     a worker's rank, 0 <= r < p
    h_r   heads per worker, h / p
    N     number of elements of the all-reduced tensor, B * n * d_model

The numpy functions here simulate the workers with a loop over ranks;
``distributed.run_distributed`` runs them as real processes with
``torch.distributed``. Chapter 11 teaches both. The shards (``worker_heads``,
``shard_params``, ...) and the all-reduce with its costs (``ring_allreduce``,
``allreduce_bytes``, ...) have modules of their own, reachable here too.
"""

import numpy as np

from ._checks import require_positive_int
from .allreduce import (allreduce_bytes, allreduce_time, fit_alpha_beta, ring_allreduce,  # noqa: F401  (reachable here)
                        ring_holdings, ring_schedule)
from .complexity import stage_flops
from .gqa import grouped_query_attention
from .grads import mha_backward
from .multihead import init_params, multihead_attention
from .sharding import ParamShard, shard_params, worker_heads, worker_kv_heads


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


def simulate_gqa_head_parallel(q, k, v, num_workers, mask=None):
    """Grouped-query attention with its query heads split over p workers, simulated by a loop over ranks.

    Worker r takes its block of h / p query heads and only the key/value heads
    they read (``worker_kv_heads``), and runs ``gqa.grouped_query_attention``
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
