"""Head and sequence parallelism on real processes: p workers joined by ``torch.distributed`` (chapters 11, 12).

``parallel.py`` holds the arithmetic of a split layer (shards, partial outputs,
the all-reduce); this module starts the processes, lets them find each other,
runs one worker's share in each, and checks the all-reduced result against one
process. torch is imported inside the functions only. Starting the processes,
joining them into a group and collecting their reports is ``processes.py``
(its ``time_allreduce`` is reachable here too).

Axis names as in ``parallel.py``: p workers, r a worker's rank.
"""

import math

import numpy as np

from ._checks import require_positive_int
from .multihead import multihead_attention
from .parallel import allreduce_bytes, demo_problem, partial_output, shard_params, worker_heads
from .sequence_layouts import check_layout
from .processes import (_check_torch_and_timeout, _join_group, _output_to_log, _run_workers,  # noqa: F401
                        loopback_interface, require_gloo, time_allreduce, timing_process)


def worker_process(rank, num_workers, store_path, problem, timeout, queue, log_path):
    """One process of ``run_distributed``: join the group, compute a partial output, all-reduce it, report."""
    import traceback

    _output_to_log(log_path)
    try:
        import torch

        dist = _join_group(rank, num_workers, store_path, timeout)
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
    for r in range(num_workers):
        worker_heads(num_heads, num_workers, r)  # p must divide h: fail here, not in every worker
    _check_torch_and_timeout("run_distributed", timeout)
    problem = {"batch": batch, "n": n, "m": m, "d_model": d_model, "num_heads": num_heads, "dtype": dtype,
               "seed": seed}
    demo_problem(**problem)  # bad sizes raise their ValueError here, before any process starts
    reports = _run_workers(worker_process, num_workers, (problem,), timeout)
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


def ring_attention_process(rank, num_workers, store_path, problem, timeout, queue, log_path):
    """One process of ``run_ring_attention``: hold its positions, pass key/value blocks around the ring.

    Each step first starts sending the block it holds to the right and receiving the next one from the
    left (``isend``/``irecv`` return at once), then computes on the block it holds, and only then waits
    for the transfers: the exchange runs while the worker computes, as in Liu et al. (2023).
    """
    import traceback

    _output_to_log(log_path)
    try:
        import torch

        from .attention import scaled_dot_product_attention
        from .blockwise import blockwise_attention_with_lse
        from .sequence_layouts import worker_positions
        from .sequence_parallel import merge_partials

        dist = _join_group(rank, num_workers, store_path, timeout)
        try:
            n, p, causal = problem["n"], num_workers, problem["causal"]
            q, k, v = np.random.default_rng(problem["seed"]).normal(
                size=(3, problem["num_heads"], n, problem["d_k"]))  # (h, n, d_k) each
            rows = [worker_positions(n, p, r, problem["layout"]) for r in range(p)]  # (n_r,) each
            mine = rows[rank]
            kv = torch.from_numpy(np.stack([k[..., mine, :], v[..., mine, :]])).contiguous()  # (2, h, n_r, d_k)
            state, sent = None, 0
            for step in range(p):
                owner = (rank - step) % p  # whose block this worker holds now
                if step < p - 1:  # start the exchange first: it runs while this worker computes
                    incoming = torch.empty_like(kv)
                    requests = [dist.isend(kv, (rank + 1) % p), dist.irecv(incoming, (rank - 1) % p)]
                tile = rows[owner][None, :] <= mine[:, None] if causal else None  # (n_r, n_r): key <= query
                if tile is None or tile.any():  # a block wholly in the future of every query: skip
                    part = blockwise_attention_with_lse(q[..., mine, :], kv[0].numpy(), kv[1].numpy(), tile)
                    state = part if state is None else merge_partials(*state, *part)
                if step < p - 1:  # the block arrived while we computed (or we wait for it now)
                    for request in requests:
                        request.wait()
                    sent += kv.numel()
                    kv = incoming
            blocks = [torch.empty(state[0].shape, dtype=torch.float64) for _ in range(p)]
            dist.all_gather(blocks, torch.from_numpy(np.ascontiguousarray(state[0])))  # only to check the result
            report = {"rank": rank, "positions": mine.tolist(), "sent": sent}
            if rank == 0:
                out = np.empty_like(q)  # (h, n, d_k): every worker's rows back in place
                for r, block in enumerate(blocks):
                    out[..., rows[r], :] = block.numpy()
                mask = (np.arange(n)[None, :] <= np.arange(n)[:, None]) if causal else None  # (n, n)
                reference, _ = scaled_dot_product_attention(q, k, v, mask)
                report["max_abs_diff"] = float(np.abs(out - reference).max())
                report["max_abs_output"] = float(np.abs(reference).max())
            queue.put(("ok", rank, report))
        finally:
            dist.destroy_process_group()
    except BaseException:
        queue.put(("error", rank, traceback.format_exc()))
        raise


def run_ring_attention(num_workers=2, *, num_heads=2, n=16, d_k=4, causal=True, layout="contiguous", seed=0,
                       timeout=60.0):
    """Ring attention on ``num_workers`` real gloo processes, checked against unsplit attention on one.

    Each process holds the positions ``worker_positions(n, p, rank, layout)`` of q, k and v (drawn from
    ``seed``; every process draws the same arrays and keeps its rows), and passes key/value blocks to its
    right-hand neighbour with ``dist.isend`` / ``dist.irecv`` while it computes on the block it holds,
    merging each block's partial softmax into its own (as ``sequence_parallel.ring_attention`` does in
    one process). Worker 0 gathers the rows and compares.

    Returns
    -------
    dict: ``num_workers``, ``positions`` (per rank, a list), ``sent`` (numbers each worker sent),
    ``max_abs_diff`` (the gathered output against unsplit attention) and ``max_abs_output`` (the size of
    that output).
    """
    for value, name in ((num_heads, "num_heads"), (d_k, "d_k")):
        require_positive_int(value, name)
    check_layout(n, num_workers, layout)
    _check_torch_and_timeout("run_ring_attention", timeout)
    problem = {"num_heads": num_heads, "n": n, "d_k": d_k, "causal": bool(causal), "layout": layout, "seed": seed}
    reports = _run_workers(ring_attention_process, num_workers, (problem,), timeout)
    return {"num_workers": num_workers, "positions": [reports[r]["positions"] for r in range(num_workers)],
            "sent": [reports[r]["sent"] for r in range(num_workers)], "max_abs_diff": reports[0]["max_abs_diff"],
            "max_abs_output": reports[0]["max_abs_output"]}
