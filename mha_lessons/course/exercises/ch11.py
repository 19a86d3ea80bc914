"""Checkers for chapter 11 (heads across processes)."""

import numpy as np

from ...multihead import MHAParams, init_params
from ...parallel import allreduce_bytes, simulate_head_parallel
from ._verdict import Verdict, call_learner, compare


def check_w_o_rows(w_o_rows):
    """Check ``w_o_rows(w_o, num_heads, num_workers, rank)``: the part of W_O (d_model, d_model) a worker needs.

    Called with d_model = 12, h = 6, p = 3 and rank 1, so the right answer is rows 4 to 7 (heads 2 and 3,
    d_k = 2). The mistakes it recognises: columns instead of rows (also transposed), one head's rows instead
    of the worker's h / p heads, heads dealt out in turn instead of in blocks, and a neighbour's rows.

    >>> import mha_lessons as M
    >>> M.exercises.check_w_o_rows(lambda w_o, h, p, r: w_o[r * 4:(r + 1) * 4])
    Right: worker 1 of 3 reads rows 4 to 7 of W_O, the outputs of its heads 2 and 3.
    """
    d_model, h, p, rank = 12, 6, 3, 1
    d_k, per_worker = d_model // h, h // p
    w_o = np.random.default_rng(9).normal(size=(d_model, d_model))
    answer, failure = call_learner(w_o_rows, w_o.copy(), h, p, rank, name="w_o_rows")
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    rows = slice(rank * per_worker * d_k, (rank + 1) * per_worker * d_k)  # rows 4..7
    interleaved = np.concatenate([w_o[i * d_k:(i + 1) * d_k] for i in range(rank, h, p)])  # heads 1 and 4
    mistakes = [
        (w_o[:, rows], "these are columns of W_O; a head's output is read by ROWS of W_O (it multiplies from "
                       "the left: concat(heads) @ W_O), so take w_o[rows, :]."),
        (w_o[:, rows].T, "these are columns of W_O, transposed; a head's output is read by ROWS of W_O."),
        (w_o[rank * d_k:(rank + 1) * d_k], "these are the rows of one head (d_k rows); the worker holds "
                                           "h / p heads, so it needs h / p * d_k rows."),
        (interleaved, "these are the rows of heads 1 and 4 (heads dealt out in turn); here worker r holds the "
                      "consecutive block of heads r * h/p to (r + 1) * h/p - 1."),
        (w_o[(rank + 1) * per_worker * d_k:(rank + 2) * per_worker * d_k],
         "these are the rows of worker 2, the next worker: ranks count from 0."),
        (w_o[(rank - 1) * per_worker * d_k:rank * per_worker * d_k],
         "these are the rows of worker 0, the previous worker."),
    ]
    return compare(answer, w_o[rows], mistakes, what="the rows you returned",
                   right="worker 1 of 3 reads rows 4 to 7 of W_O, the outputs of its heads 2 and 3.")


def check_allreduce_bytes(answer):
    """Check the bytes each worker sends in the ring all-reduce of one forward pass.

    The setting of the exercise: B = 4 sequences of n = 2048 tokens, d_model = 4096, float32, p = 8 workers.

    >>> import mha_lessons as M
    >>> M.exercises.check_allreduce_bytes(2 * 7 / 8 * 4 * 2048 * 4096 * 4)
    Right: 2 (p - 1) / p x B n d_model x 4 bytes = 234,881,024 bytes (224 MiB) from each worker.
    """
    B, n, d_model, p, itemsize = 4, 2048, 4096, 8, 4
    elements = B * n * d_model
    tensor = elements * itemsize
    expected = allreduce_bytes(elements, p, itemsize)
    mistakes = [
        (tensor, "this is the size of the tensor; in a ring each worker sends 2 (p - 1) / p of it."),
        ((p - 1) / p * tensor, "this is one of the two phases (reduce-scatter); the all-gather that follows "
                               "sends as much again."),
        (2 * tensor, "the factor is 2 (p - 1) / p, not 2: in each phase a worker sends p - 1 of the p chunks."),
        (expected / itemsize, "this counts numbers, not bytes: a float32 takes 4 bytes."),
        (expected * 8, "this counts bits, not bytes."),
        ((p - 1) * tensor, "this sends the whole tensor to each of the other p - 1 workers; the ring needs "
                           "only 2 (p - 1) / p of it per worker."),
        (expected / p, "each worker's term has the full width d_model (its heads times its rows of W_O), "
                       "not d_model / p: the all-reduced tensor is B x n x d_model."),
    ]
    return compare(answer, expected, mistakes, what="your number of bytes",
                   right=f"2 (p - 1) / p x B n d_model x 4 bytes = {expected:,.0f} bytes "
                         f"({expected / 2**20:.0f} MiB) from each worker.")


def _exercise_params(d_model, num_heads, rng):
    """Random weights and random biases (zero biases would hide a b_O added on every worker)."""
    params = init_params(d_model, num_heads, seed=3)
    return MHAParams(num_heads, params.w_q, params.w_k, params.w_v, params.w_o,
                     *(rng.normal(size=d_model) for _ in range(4)))


def check_worker_output(worker_output):
    """Check ``worker_output(x, params, num_workers, rank)``: one worker's term of self-attention (n, d_model).

    Called on n = 5 tokens, d_model = 16, h = 4 heads, p = 2 workers, for both ranks; the terms must be the
    package's ``partial_output`` ones. The mistakes it recognises: b_O added on every worker or on none,
    the worker's columns cut into h heads instead of h / p, and terms that add up to the right output but
    belong to other heads.

    >>> import mha_lessons as M
    >>> def worker_output(x, params, p, r):
    ...     return M.parallel.partial_output(x, x, x, M.parallel.shard_params(params, p, r))[0]
    >>> M.exercises.check_worker_output(worker_output)
    Right: both workers' terms are right, and they add up to the layer's output.
    """
    from ...attention import scaled_dot_product_attention
    from ...multihead import combine_heads, split_heads

    rng = np.random.default_rng(4)
    n, d_model, h, p = 5, 16, 4, 2
    params = _exercise_params(d_model, h, rng)
    x = rng.normal(size=(n, d_model))
    answers = []
    for rank in range(p):
        answer, failure = call_learner(worker_output, x.copy(), params, p, rank, name="worker_output")
        if failure is not None:
            return failure
        if answer is None:
            return compare(None, x, what=f"the output for rank {rank}")
        answers.append(answer)
    y, partials = simulate_head_parallel(x, x, x, params, p)  # partials: (p, n, d_model)
    d_k, width = d_model // h, d_model // p

    def too_many_heads(rank):  # the worker's 2 d_k columns cut into h = 4 narrow heads
        cols = slice(rank * width, (rank + 1) * width)
        q, k, v = (x @ w[:, cols] + b[cols] for w, b in
                   ((params.w_q, params.b_q), (params.w_k, params.b_k), (params.w_v, params.b_v)))
        out, _ = scaled_dot_product_attention(*(split_heads(a, h) for a in (q, k, v)))  # (h, n, d_k / p)
        return combine_heads(out) @ params.w_o[cols] + (params.b_o if rank == 0 else 0)

    bias_everywhere = partials + params.b_o * (np.arange(p) > 0)[:, None, None]
    bias_nowhere = partials - params.b_o * (np.arange(p) == 0)[:, None, None]
    mistakes = [
        (bias_everywhere, "every worker adds b_O, so the all-reduce adds it p times; only worker 0 adds it "
                          "(or it is added once after the sum)."),
        (bias_nowhere, "b_O is missing: the output bias is added once, by worker 0."),
        (np.stack([too_many_heads(r) for r in range(p)]),
         f"the worker's {width} columns were cut into h = {h} heads; a worker holds h / p = {h // p} heads, "
         f"each still d_k = {d_k} wide."),
    ]
    try:
        stacked = np.stack([np.asarray(a, dtype=float) for a in answers])  # (p, n, d_model)
    except (TypeError, ValueError):
        return Verdict(False, f"the workers' outputs are not arrays of numbers of one shape: "
                              f"{[np.shape(a) for a in answers]}.")
    if stacked.shape == partials.shape and np.allclose(stacked.sum(axis=0), y) \
            and not np.allclose(stacked, partials):
        return Verdict(False, "your terms add up to the layer's output, but each worker computed other heads "
                              "than its block: here worker r holds heads r * h/p to (r + 1) * h/p - 1.")
    return compare(stacked, partials, mistakes, what="the stacked outputs of workers 0 and 1",
                   right="both workers' terms are right, and they add up to the layer's output.")


# The sizes of exercise 4 (every head split over two workers).
SPLIT_QUESTION = dict(B=4, n=2048, m=2048, h=32, d_model=4096)


def _split_sizes():
    """B, n, m, h, d_model and d_k = d_model / h of the question of exercises 3 and 4."""
    B, n, m, h, d_model = (SPLIT_QUESTION[k] for k in ("B", "n", "m", "h", "d_model"))
    return B, n, m, h, d_model, d_model // h


def _two_numbers(answer, names, expected, what):
    """The learner's two numbers as a float array, or the Verdict that says they are not two numbers."""
    try:
        pair = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return Verdict(False, f"give two numbers, ({names}); got {answer!r}.")
    if answer is None or pair.shape != (2,):
        return compare(answer, expected, what=what)
    return pair


def check_split_head_counts(counts):
    """Check ``counts = (partial_scores, output_numbers)`` of exercise 4: numbers, not bytes.

    When each head's d_k features are split over two workers, the workers must add up their partial
    scores, one per (sequence, head, query, key): B h n m numbers. The output all-reduce of the chapter
    adds up B n d_model numbers. Sizes: B = 4, n = m = 2048, h = 32, d_model = 4096.

    >>> import mha_lessons as M
    >>> M.exercises.check_split_head_counts((4 * 32 * 2048 * 2048, 4 * 2048 * 4096))
    Right: B h n m = 536,870,912 partial scores; B n d_model = 33,554,432 outputs.
    """
    B, n, m, h, d_model, d_k = _split_sizes()
    scores, output = B * h * n * m, B * n * d_model
    pair = _two_numbers(counts, "partial_scores, output_numbers", [scores, output], "counts")
    if isinstance(pair, Verdict):
        return pair
    if np.allclose(pair, [output, scores], rtol=1e-9):
        return Verdict(False, "the two counts are swapped: partial scores first, then the output.")
    bytes_ = "this counts bytes; count the numbers (elements)."
    score_mistakes = [
        (h * n * m, "the batch is missing: each of the B sequences has its own scores."),
        (B * n * m, "that is one head's scores; every head is split, so multiply by h."),
        (n * m, "that is one head of one sequence; multiply by B and h."),
        (B * h * n * d_k, "that counts the features of q (B h n d_k); the partial sums are the scores, "
                          "one per query-key pair: B h n m."),
        (scores * 4, bytes_),
        (scores * 8, bytes_),
    ]
    verdict = compare(pair[0], scores, score_mistakes, what="your count of partial scores", rtol=1e-9)
    if not verdict:
        return verdict
    output_mistakes = [
        (n * d_model, "the output count misses the batch: it is B n d_model."),
        (B * n * d_k, "the all-reduce adds full rows of d_model numbers, not d_k: B n d_model."),
        (B * h * n * d_model, "the all-reduce adds the workers' terms once, not once per head: B n d_model."),
        (output * 4, bytes_),
        (output * 8, bytes_),
    ]
    return compare(pair[1], output, output_mistakes, what="your output count", rtol=1e-9,
                   right=f"B h n m = {scores:,} partial scores; B n d_model = {output:,} outputs.")


def check_split_head_work(answer):
    """Check ``answer = (flops_at_h, flops_at_2h, swapped)`` of exercise 4: a head split over two workers.

    At p = h a worker holds one head and computes all its scores, 2 B n m d_k FLOPs (a multiply-add is 2).
    At p = 2h each of a head's two workers holds d_k / 2 of its query and key features; once they have
    swapped those halves, each holds the head's complete q and k, so they can split the head's queries:
    2 B (n / 2) m d_k FLOPs each, half. The swap costs each worker B n d_k / 2 + B m d_k / 2 numbers sent,
    in the middle of the attention. Sizes: B = 4, n = m = 2048, h = 32, d_model = 4096.

    >>> import mha_lessons as M
    >>> work = 2 * 4 * 2048 * 2048 * 128
    >>> M.exercises.check_split_head_work((work, work // 2, 4 * 2048 * 64 * 2))
    Right: 4,294,967,296 FLOPs at p = h, 2,147,483,648 at p = 2h once the queries are split, for 1,048,576 numbers swapped by each worker in the middle of the attention.
    """
    B, n, m, h, d_model, d_k = _split_sizes()
    work = 2 * B * n * m * d_k
    swapped = B * n * d_k // 2 + B * m * d_k // 2
    try:
        values = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return Verdict(False, f"give three numbers, (flops_at_h, flops_at_2h, swapped); got {answer!r}.")
    if answer is None or values.shape != (3,):
        return compare(answer, [work, work / 2, swapped], what="answer")
    at_h, at_2h, sent = values
    mistakes = [
        (work / 2, "a multiply-add is 2 FLOPs: the scores of one head take 2 B n m d_k."),
        (2 * n * m * d_k, "the batch is missing: each of the B sequences has its own scores."),
        (2 * B * n * m * d_model, "that is all h heads' scores (d_model = h d_k): at p = h each worker holds "
                                  "h / p = 1 head, whose scores are dot products over its d_k features."),
    ]
    verdict = compare(at_h, work, mistakes, what="your count at p = h", rtol=1e-9)
    if not verdict:
        return verdict
    if np.isclose(at_2h, work, rtol=1e-9):
        return Verdict(False, "at p = 2h, once the two workers have swapped their halves of q and k, both hold the "
                              "head's complete q and k: they need not both compute every score. Split the head's "
                              "queries, n / 2 each, and each does half of the work.")
    verdict = compare(at_2h, work / 2, [(work / 4, "half of the queries, each scored over all d_k features: "
                                                   "2 B (n / 2) m d_k, half of the work at p = h.")],
                      what="your count at p = 2h", rtol=1e-9)
    if not verdict:
        return verdict
    bytes_ = "this counts bytes; count the numbers sent."
    sent_mistakes = [
        (B * n * d_k // 2, "that is only the half of q; the worker sends its half of the keys too."),
        (B * (n + m) * d_k, "that is twice the count: each worker holds only d_k / 2 features of each query and "
                            "key and sends those (the two workers together send this much)."),
        ((n + m) * d_k // 2, "the batch is missing: each of the B sequences has its own queries and keys."),
        (swapped * 4, bytes_), (swapped * 8, bytes_),
    ]
    verdict = compare(sent, swapped, sent_mistakes, what="your count of numbers swapped", rtol=1e-9)
    if not verdict:
        return verdict
    return Verdict(True, f"{work:,} FLOPs at p = h, {work // 2:,} at p = 2h once the queries are split, for "
                         f"{swapped:,} numbers swapped by each worker in the middle of the attention.")
