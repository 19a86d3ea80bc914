"""When ring attention's transfers hide behind its arithmetic (chapter 12): one step's time, priced by the α–β model.

At every step of ring attention (``sequence_parallel.ring_attention``) a worker does two things that need
not wait for each other: it computes attention of its n_r queries to the key/value block it holds, and it
sends that block on to its neighbour while receiving the next one. Done one after the other, a step takes
compute + transfer; overlapped, as Liu et al. (2023) do, it takes the longer of the two, and the transfer
costs nothing once the compute is longer. Per head and step, with n_r = c positions per worker:

    compute   2 (d_k + d_v) · fill · c² FLOPs at the rate R_FLOP      (Q K^T and the weights times V)
    transfer  t_lat + c (d_k + d_v) · itemsize bytes at the bandwidth r_link   (one key and one value block)

``fill`` is the fraction of the block's c² (query, key) pairs the step computes: 1 without a mask, about
1/2 for a causal mask under a balanced layout (``sequence_layouts.py``). The compute grows like c², the
transfer like c, so a large enough block always hides its transfer (``min_hidden_block``).
"""

import math

from ._checks import require_positive_int


def _check_rates(flop_rate, r_link, t_lat, fill, itemsize):
    if not (flop_rate > 0 and r_link > 0 and t_lat >= 0):
        raise ValueError(f"need flop_rate > 0, r_link > 0 and t_lat >= 0, got flop_rate = {flop_rate}, "
                         f"r_link = {r_link}, t_lat = {t_lat}")
    if not 0 < fill <= 1:
        raise ValueError(f"fill is the fraction of a block's pairs computed, in (0, 1], got {fill}")
    require_positive_int(itemsize, "itemsize")


def ring_step_times(block, d_k, d_v, flop_rate, r_link, *, heads=1, itemsize=2, t_lat=0.0, fill=1.0):
    """Seconds one ring step spends computing, and seconds it spends moving its key/value block.

    Parameters
    ----------
    block : int, c = n / p, the positions each worker holds
    d_k, d_v : int, head widths
    flop_rate : float, FLOP/s of one worker
    r_link : float, bytes/s of the link to the next worker (one direction)
    heads : int, heads attended per step (all of them: a worker holds every head of its positions)
    itemsize : int, bytes per number (2 for bfloat16)
    t_lat : float, seconds of latency per message
    fill : float in (0, 1], the fraction of the c² pairs computed

    Returns
    -------
    compute, transfer : float, seconds

    Examples
    --------
    >>> [round(t * 1e6, 3) for t in ring_step_times(1024, 128, 128, flop_rate=1e12, r_link=1e9)]   # µs
    [536.871, 524.288]
    """
    for value, name in ((block, "block"), (d_k, "d_k"), (d_v, "d_v"), (heads, "heads")):
        require_positive_int(value, name)
    _check_rates(flop_rate, r_link, t_lat, fill, itemsize)
    width = heads * (d_k + d_v)
    compute = 2 * width * fill * block ** 2 / flop_rate  # Q K^T: 2 d_k per pair; A V: 2 d_v per pair
    transfer = t_lat + block * width * itemsize / r_link  # one key block and one value block
    return compute, transfer


def ring_time(block, num_workers, d_k, d_v, flop_rate, r_link, *, overlap=True, **options):
    """Seconds for the p steps of a ring, with each transfer overlapped with a step's compute or not.

    Overlapped: the last step has nothing left to receive, so (p - 1) max(compute, transfer) + compute.
    One after the other: p compute + (p - 1) transfer. ``options`` as for ``ring_step_times``.

    >>> [round(ring_time(1024, 4, 128, 128, 1e12, 1e9, overlap=o) * 1e3, 4) for o in (True, False)]   # ms
    [2.1475, 3.7203]
    """
    require_positive_int(num_workers, "num_workers")
    compute, transfer = ring_step_times(block, d_k, d_v, flop_rate, r_link, **options)
    p = num_workers
    if overlap:
        return (p - 1) * max(compute, transfer) + compute
    return p * compute + (p - 1) * transfer


def min_hidden_block(flop_rate, r_link, *, itemsize=2, t_lat=0.0, fill=1.0, d_k=128, d_v=128, heads=1):
    """The smallest block c (positions per worker) whose compute lasts as long as its transfer.

    Solves 2 w fill c² / R_FLOP = t_lat + c w itemsize / r_link with w = heads (d_k + d_v). Without
    latency the widths cancel: c = R_FLOP · itemsize / (2 fill r_link), a property of the machine alone.
    A latency per message raises it (then the widths matter).

    Returns
    -------
    float

    Examples
    --------
    >>> round(min_hidden_block(1e12, 1e9), 6)            # 1 TFLOP/s over 1 GB/s, 2-byte numbers
    1000.0
    >>> round(min_hidden_block(1e12, 1e9, fill=0.5), 6)  # half of each block computed: twice the block
    2000.0
    """
    for value, name in ((d_k, "d_k"), (d_v, "d_v"), (heads, "heads")):
        require_positive_int(value, name)
    _check_rates(flop_rate, r_link, t_lat, fill, itemsize)
    width = heads * (d_k + d_v)
    a = 2 * width * fill / flop_rate  # seconds per c² of compute
    b = width * itemsize / r_link  # seconds per c of transfer
    return (b + math.sqrt(b * b + 4 * a * t_lat)) / (2 * a)  # the positive root of a c² - b c - t_lat
