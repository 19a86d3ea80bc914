"""The all-reduce that head parallelism needs (chapter 11): a ring all-reduce step by step, and what it costs.

p workers each hold a term of the same sum (a partial output of the layer, N numbers); after the
all-reduce every worker holds the sum. In a ring, each worker sends to its neighbour only: p - 1
steps of reduce-scatter, then p - 1 of all-gather, each step one chunk of N / p numbers. The α–β
model prices each message as a fixed latency α plus its bytes times β, the seconds per byte. This
module writes the two as the chapter does: ``t_lat`` = α in seconds, and ``r_link`` = 1 / β, the
link's bandwidth in bytes per second. A one-shot all-reduce, which serving engines use for small
tensors, is priced the same way (``allreduce_time(..., algorithm="one_shot")``).

Axis names as in ``parallel.py``: p workers, r a worker's rank, N the elements all-reduced.
"""

import numpy as np

from ._checks import require_positive_int


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


ALGORITHMS = ("ring", "one_shot")


def allreduce_time(num_bytes, num_workers, t_lat, r_link, *, algorithm="ring"):
    """The α–β model of an all-reduce of N bytes on p workers, in seconds.

    ``"ring"``: 2 (p - 1) steps, each one message of N / p bytes that the next step waits for,
    2 (p - 1) t_lat + 2 (p - 1) / p · N / r_link. ``"one_shot"``: every worker reads the other
    p - 1 workers' whole terms at once and adds them itself (vLLM's ``cross_device_reduce_1stage``):
    one latency, but (p - 1) N bytes into each worker, t_lat + (p - 1) · N / r_link.

    Parameters
    ----------
    num_bytes : float or ndarray
        N, the size of the all-reduced tensor in bytes.
    num_workers : int
    t_lat : float
        Latency of one message in seconds (the α of the α–β model).
    r_link : float
        Bandwidth of a link in bytes per second (1 / β, β being the seconds per byte).
    algorithm : "ring" or "one_shot"

    Returns
    -------
    float, or ndarray of the shape of ``num_bytes``: seconds

    Examples
    --------
    >>> allreduce_time(1e6, 2, 1e-5, 1e9)                  # 2 t_lat + 1 MB at 1 GB/s
    0.00102
    >>> round(allreduce_time(1e3, 8, 1e-5, 1e9, algorithm="one_shot") * 1e6, 6)   # t_lat + 7 kB
    17.0
    """
    require_positive_int(num_workers, "num_workers")
    if not (t_lat >= 0 and r_link > 0):
        raise ValueError(f"allreduce_time needs t_lat >= 0 seconds and r_link > 0 bytes/s, got t_lat = {t_lat}, "
                         f"r_link = {r_link}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    p, size = num_workers, np.asarray(num_bytes, dtype=float)
    if p == 1:
        time = np.zeros_like(size)  # nothing to exchange
    elif algorithm == "ring":
        time = 2 * (p - 1) * t_lat + 2 * (p - 1) / p * size / r_link
    else:
        time = t_lat + (p - 1) * size / r_link
    return float(time) if time.ndim == 0 else time


def fit_alpha_beta(num_bytes, seconds, num_workers):
    """Fit the ring's α–β model (``allreduce_time``) to measured all-reduce times, by least squares.

    The model is linear in t_lat and 1 / r_link: t = 2 (p - 1) t_lat + (2 (p - 1) / p · N) (1 / r_link).
    Relative errors count equally: each row is divided by its measured time,
    so that the small messages (which fix t_lat) weigh as much as the large ones
    (which fix r_link).

    Parameters
    ----------
    num_bytes, seconds : 1-D array_like of the same length (at least 2), sizes and measured times
    num_workers : int

    Returns
    -------
    t_lat : float
        Seconds per message (α).
    r_link : float
        Bytes per second (1 / β).

    Examples
    --------
    >>> sizes = np.array([8, 1e3, 1e5, 1e7])
    >>> t_lat, r_link = fit_alpha_beta(sizes, allreduce_time(sizes, 2, 2e-5, 3e9), 2)
    >>> round(t_lat * 1e6, 6), round(r_link / 1e9, 6)
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
    (t_lat, seconds_per_byte), *_ = np.linalg.lstsq(design / times[:, None], np.ones_like(times), rcond=None)
    if seconds_per_byte <= 0:
        raise ValueError("the fitted bandwidth is not positive: the times do not grow with the size")
    return float(t_lat), float(1 / seconds_per_byte)


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
