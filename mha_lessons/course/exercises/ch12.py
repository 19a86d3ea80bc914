"""Checkers for chapter 12 (sequences across processes)."""

import numpy as np

from ...ring_overlap import min_hidden_block
from ...sequence_layouts import ring_work, worker_positions
from ...sequence_parallel import ring_attention_sent, ulysses_sent
from ._verdict import Verdict, call_learner, compare


def _numbers(answer, count, names):
    """The learner's numbers as a float array, or the Verdict that says they are not ``count`` numbers."""
    try:
        values = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return Verdict(False, f"give {count} numbers, ({names}); got {answer!r}.")
    if answer is None or values.shape != (count,):
        return compare(answer, np.zeros(count), what=f"({names})")
    return values


# The sizes of exercise 1: contiguous blocks, a causal mask.
RING_QUESTION = dict(n=4096, p=8)


def check_ring_pairs(answer):
    """Check ``answer = (pairs_worker_0, pairs_worker_7)`` of exercise 1: a causal ring on contiguous blocks.

    n = 4096 positions on p = 8 workers of c = 512: worker 0 scores only its own block, whose causal part
    is c (c + 1) / 2 pairs; worker 7 scores its own block the same way and the blocks of all 7 workers
    before it in full, 7 c² + c (c + 1) / 2.

    >>> import mha_lessons as M
    >>> c = 512
    >>> M.exercises.check_ring_pairs((c * (c + 1) // 2, 7 * c * c + c * (c + 1) // 2))
    Right: worker 0 computes 131,328 pairs and worker 7 1,966,336, 15 times as many; the ring waits for worker 7.
    """
    n, p = RING_QUESTION["n"], RING_QUESTION["p"]
    c = n // p
    work = ring_work(n, p, "contiguous").sum(axis=0)  # (p,) pairs per worker over the whole ring
    first, last = int(work[0]), int(work[-1])
    values = _numbers(answer, 2, "pairs_worker_0, pairs_worker_7")
    if isinstance(values, Verdict):
        return values
    diagonal = [(c * c / 2, "the causal part of a block includes its diagonal: c (c + 1) / 2 pairs, not c² / 2."),
                (c * c, "the worker's own block is causal: only the pairs with key <= query, c (c + 1) / 2.")]
    verdict = compare(values[0], first, diagonal, what="your count for worker 0", rtol=1e-9)
    if not verdict:
        return verdict
    last_mistakes = [
        ((p - 1) * c * c, "worker 7's own block is missing: add its causal part, c (c + 1) / 2."),
        (p * c * c, "worker 7's own block is causal, not full: (p - 1) c² + c (c + 1) / 2."),
        ((p - 1) * c * c + c * c / 2, "the causal part of a block includes its diagonal: c (c + 1) / 2."),
        ((p - 2) * c * c + c * (c + 1) / 2, "worker 7 holds blocks of workers 0 to 6 at some step: p - 1 = 7 "
                                            "full blocks, all in its past."),
        (n * (n + 1) / 2 / p, "that is the average worker's share; worker 7 does far more."),
    ]
    verdict = compare(values[1], last, last_mistakes, what="your count for worker 7", rtol=1e-9)
    if not verdict:
        return verdict
    return Verdict(True, f"worker 0 computes {first:,} pairs and worker 7 {last:,}, {last / first:.0f} times as "
                         f"many; the ring waits for worker 7.")


def check_zigzag_positions(zigzag_positions):
    """Check ``zigzag_positions(n, p, rank)``: the positions a worker holds in the zig-zag layout.

    Called with n = 16, p = 4 for every rank: the sequence is cut into 2p = 8 chunks of 2 positions, and
    worker r holds chunks r and 2p - 1 - r. Any order of the positions is accepted. The mistakes it
    recognises: contiguous blocks, striping, chunks r and p + r, chunk 2p - r, and chunk numbers instead
    of positions.

    >>> import mha_lessons as M
    >>> M.exercises.check_zigzag_positions(lambda n, p, r: M.sequence_layouts.worker_positions(n, p, r, "zigzag"))
    Right: worker r holds chunks r and 2p - 1 - r, and every worker computes 34 pairs of the causal ring.
    """
    n, p = 16, 4
    half = n // (2 * p)  # positions per chunk

    def chunks(first, second):
        return np.concatenate([np.arange(first * half, (first + 1) * half), np.arange(second * half, (second + 1) * half)])

    answers = []
    for rank in range(p):
        answer, failure = call_learner(zigzag_positions, n, p, rank, name="zigzag_positions")
        if failure is not None:
            return failure
        try:
            answers.append(np.sort(np.asarray(answer, dtype=float).ravel()))
        except (TypeError, ValueError):
            return compare(answer, worker_positions(n, p, rank, "zigzag"), what=f"the positions of worker {rank}")
    expected = [worker_positions(n, p, r, "zigzag") for r in range(p)]
    mistakes = {
        "contiguous": ([worker_positions(n, p, r, "contiguous") for r in range(p)],
                       "these are contiguous blocks; zig-zag cuts 2p chunks and gives worker r chunks r and "
                       "2p - 1 - r, one early and one late."),
        "striped": ([worker_positions(n, p, r, "striped") for r in range(p)],
                    "these are striped positions (r, r + p, ...); zig-zag gives each worker two chunks."),
        "r and p + r": ([chunks(r, p + r) for r in range(p)],
                        "chunks r and p + r pair an early chunk with a late one in the same order, so worker p - 1 "
                        "still gets the two latest of its halves; take chunk 2p - 1 - r, counting back from the end."),
        "2p - r": ([chunks(r, 2 * p - r) for r in range(p)],
                   "chunk 2p - r is one too far (worker 0 would get chunk 2p, past the end): the last chunk is "
                   "2p - 1, so worker r takes chunk 2p - 1 - r."),
        "chunk numbers": ([np.array([r, 2 * p - 1 - r]) for r in range(p)],
                          "these are chunk numbers; return the positions inside the chunks."),
    }
    for wrong, message in mistakes.values():
        if all(a.shape == np.shape(w) and np.array_equal(a, np.sort(w)) for a, w in zip(answers, wrong)):
            return Verdict(False, message)
    for rank in range(p):
        verdict = compare(answers[rank], expected[rank], what=f"the sorted positions of worker {rank}")
        if not verdict:
            return verdict
    pairs = int(ring_work(n, p, "zigzag").sum(axis=0)[0])
    return Verdict(True, f"worker r holds chunks r and 2p - 1 - r, and every worker computes {pairs} pairs of the "
                         f"causal ring.")


# The machine of exercise 3.
OVERLAP_QUESTION = dict(flop_rate=400e12, r_link=50e9, itemsize=2)


def check_min_block(answer):
    """Check ``answer = (without_mask, causal)`` of exercise 3: the smallest block whose compute hides its transfer.

    A worker computes at 400 TFLOP/s and sends 50 GB/s one way, in 2-byte numbers, no latency. Per head a
    step computes 2 (d_k + d_v) fill c² FLOPs and sends c (d_k + d_v) · 2 bytes, so c = R_FLOP · 2 /
    (2 fill r_link): 8000 without a mask (fill = 1), 16,000 under a balanced causal layout (fill = 1/2).

    >>> import mha_lessons as M
    >>> M.exercises.check_min_block((8000, 16000))
    Right: 8,000 positions per worker without a mask and 16,000 under a causal mask, whatever the heads and widths.
    """
    rate, link, size = (OVERLAP_QUESTION[k] for k in ("flop_rate", "r_link", "itemsize"))
    full = min_hidden_block(rate, link, itemsize=size)
    causal = min_hidden_block(rate, link, itemsize=size, fill=0.5)
    values = _numbers(answer, 2, "without_mask, causal")
    if isinstance(values, Verdict):
        return values
    if np.allclose(values, [causal, full], rtol=1e-6):
        return Verdict(False, "the two are swapped: a causal step computes half the pairs, so it needs a block twice "
                              "as large to last as long as its transfer.")
    mistakes = [
        (full / size, "the transfer is in bytes: each number takes 2 bytes, which doubles the block needed."),
        (full * 2, "a step computes Q K^T and the weights times V: 2 (d_k + d_v) FLOPs per pair, not 2 d_k."),
        (full / 2, "a step sends a key block and a value block: c (d_k + d_v) numbers."),
        (full * 8, "the bandwidth is in bytes per second, not bits."),
    ]
    verdict = compare(values[0], full, mistakes, what="your block without a mask", rtol=1e-6)
    if not verdict:
        return verdict
    verdict = compare(values[1], causal, [(full, "under a causal mask a balanced step computes about half of its "
                                                 "block's pairs, so its compute is halved: twice the block."),
                                          (full / 2, "half the compute needs a larger block, not a smaller one.")],
                      what="your block under a causal mask", rtol=1e-6)
    if not verdict:
        return verdict
    return Verdict(True, f"{full:,.0f} positions per worker without a mask and {causal:,.0f} under a causal mask, "
                         f"whatever the heads and widths.")


# The sizes of exercise 4.
VOLUME_QUESTION = dict(h=32, n=131072, d=128, p=8)


def check_sequence_volumes(answer):
    """Check ``answer = (ring, ulysses)`` of exercise 4: the numbers each worker sends in one attention forward.

    h = 32 heads, n = 131,072 positions, d_k = d_v = 128, p = 8 workers. Ring attention: p - 1 key and value
    blocks of n / p positions and h heads, 2 (p - 1) / p · h n d. Ulysses: (p - 1) / p of the worker's q, k,
    v and output, each h (n / p) d, 4 (p - 1) / p² · h n d.

    >>> import mha_lessons as M
    >>> M.exercises.check_sequence_volumes((2 * 7 / 8 * 32 * 131072 * 128, 4 * 7 / 64 * 32 * 131072 * 128))
    Right: ring attention sends 939,524,096 numbers per worker and Ulysses 234,881,024, p / 2 = 4 times fewer.
    """
    h, n, d, p = (VOLUME_QUESTION[k] for k in ("h", "n", "d", "p"))
    ring = ring_attention_sent(n, d, d, p, heads=h)
    ulysses = ulysses_sent(n, d, d, p, heads=h)
    values = _numbers(answer, 2, "ring, ulysses")
    if isinstance(values, Verdict):
        return values
    bytes_ = "this counts bytes; count the numbers."
    ring_mistakes = [
        (ring * p / (p - 1), "a worker passes on p - 1 blocks, not p: the last block it receives goes no further."),
        (ring / 2, "each step passes a key block and a value block."),
        (ring / h, "a worker holds all h heads of its positions, and passes all of them."),
        (ring * 2, bytes_),
    ]
    verdict = compare(values[0], ring, ring_mistakes, what="your count for ring attention", rtol=1e-9)
    if not verdict:
        return verdict
    ulysses_mistakes = [
        (ulysses * 3 / 4, "the output goes back too: q, k and v in, the output out, four all-to-alls."),
        (ulysses * p / (p - 1), "of each tensor a worker keeps the 1/p that is its own and sends (p - 1) / p."),
        (ulysses * p, "each tensor a worker holds is h (n / p) d numbers, n / p positions only."),
        (ulysses * 2, bytes_),
    ]
    verdict = compare(values[1], ulysses, ulysses_mistakes, what="your count for Ulysses", rtol=1e-9)
    if not verdict:
        return verdict
    return Verdict(True, f"ring attention sends {ring:,} numbers per worker and Ulysses {ulysses:,}, p / 2 = "
                         f"{ring // ulysses} times fewer.")
