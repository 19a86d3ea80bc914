"""Worker processes that find each other (chapter 11): p spawned processes joined by ``torch.distributed``'s gloo
backend, their reports collected, and the all-reduce between them timed.

``distributed.py`` runs the head-parallel layer and ring attention on these processes. torch is
imported inside the functions only; every process is a fresh interpreter (``spawn``), whatever the
calling process has imported or started.
"""

import os

import numpy as np

from ._checks import require_positive_int


def loopback_interface():
    """The name of the loopback network interface ('lo' on Linux, 'lo0' on macOS), or None."""
    import socket

    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):  # not available on every platform
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def require_gloo(dist):
    """Raise a RuntimeError that says what is missing if ``dist`` (torch.distributed) cannot run gloo."""
    if not dist.is_available():
        raise RuntimeError("this PyTorch build has no torch.distributed support, so run_distributed cannot run")
    if not dist.is_gloo_available():
        raise RuntimeError("this PyTorch build has no gloo backend (torch.distributed.is_gloo_available() is "
                           "False); run_distributed needs gloo to all-reduce between CPU processes")


def _output_to_log(log_path):
    """Send this worker process's own output (a warning of gloo's, say) to a log file, not into the notebook or
    terminal that started it; the parent quotes the log if something fails."""
    with open(log_path, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)


def _check_torch_and_timeout(caller, timeout):
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise RuntimeError(f"{caller} needs PyTorch (pip install torch), which is not installed")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


def _run_workers(target, num_workers, args, timeout):
    """Start ``target(rank, num_workers, store_path, *args, timeout, queue, log_path)`` in p spawned processes.

    Returns every rank's report (what it put on the queue with status "ok"), and raises with the workers'
    logs if one fails, dies or does not report within ``timeout`` seconds. No worker outlives the call.
    """
    import multiprocessing
    import queue as queue_module
    import tempfile
    import time

    start = time.monotonic()
    context = multiprocessing.get_context("spawn")  # fresh interpreters: safe whatever the parent has imported
    results = context.Queue()
    reports = {}
    with tempfile.TemporaryDirectory() as folder:
        store_path = os.path.join(folder, "store")  # the rendezvous: workers write their addresses here
        log_paths = [os.path.join(folder, f"worker{r}.log") for r in range(num_workers)]
        processes = [context.Process(target=target, daemon=True,
                                     args=(r, num_workers, store_path, *args, timeout, results, log_paths[r]))
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
    return reports


def _join_group(rank, num_workers, store_path, timeout):
    """In a worker process: join the gloo group through the file store; returns torch.distributed."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    require_gloo(dist)
    torch.set_num_threads(1)
    interface = loopback_interface()
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)  # gloo connects the workers over 127.0.0.1
    store = dist.FileStore(store_path, num_workers)  # where the workers find each other's addresses
    dist.init_process_group("gloo", store=store, rank=rank, world_size=num_workers,
                            timeout=timedelta(seconds=timeout))
    return dist


def timing_process(rank, num_workers, store_path, sizes, repeats, timeout, queue, log_path):
    """One process of ``time_allreduce``: all-reduce float32 tensors of each size ``repeats`` times, timing each."""
    import time
    import traceback

    _output_to_log(log_path)
    try:
        import torch

        dist = _join_group(rank, num_workers, store_path, timeout)
        try:
            seconds = {}
            for size in sizes:
                tensor = torch.ones(size, dtype=torch.float32)
                dist.all_reduce(tensor)  # a warm-up call: connections and buffers are set up here
                times = []
                for _ in range(repeats):
                    dist.barrier()  # every worker starts together
                    start = time.perf_counter()
                    dist.all_reduce(tensor)
                    times.append(time.perf_counter() - start)
                seconds[size] = times
            queue.put(("ok", rank, {"seconds": seconds}))
        finally:
            dist.destroy_process_group()
    except BaseException:
        queue.put(("error", rank, traceback.format_exc()))
        raise


def time_allreduce(num_workers=2, sizes=(1, 256, 4096, 65536, 262144, 1048576), *, repeats=20, timeout=120.0):
    """Time ``dist.all_reduce`` of float32 tensors of several sizes on ``num_workers`` gloo processes.

    The processes are started and joined as in ``run_distributed``. For each
    size every worker all-reduces once to warm up, then ``repeats`` times,
    each after a barrier; a call's time is the slowest worker's.

    Returns
    -------
    dict: ``num_workers``, ``bytes`` (list, 4 x each size), ``seconds`` (the medians over the repeats) and
    ``min_seconds`` (the fastest calls: on a busy machine, the closest to the undisturbed cost).
    """
    require_positive_int(num_workers, "num_workers")
    require_positive_int(repeats, "repeats")
    for size in sizes:
        require_positive_int(size, "each size")
    _check_torch_and_timeout("time_allreduce", timeout)
    reports = _run_workers(timing_process, num_workers, (tuple(sizes), repeats), timeout)
    calls = [np.max([reports[r]["seconds"][size] for r in range(num_workers)], axis=0) for size in sizes]
    return {"num_workers": num_workers, "bytes": [4 * size for size in sizes],
            "seconds": [float(np.median(c)) for c in calls], "min_seconds": [float(np.min(c)) for c in calls]}
