"""Checkers for chapter 8 (attention on a GPU: the Triton kernel, its cost, its measurements).

The right answers come from the package's counts: the FLOPs of the two matrix products of attention from
``M.complexity.mha_flops`` (whose counts the tests compare with PyTorch's FLOP counter), the key blocks a
causal pass computes from ``M.blockwise.tiles_computed`` (the rule ``blockwise_attention`` itself follows,
which the kernel's tests replay for the kernel's loop bounds). The wrong answers are what a forgotten factor,
a floor for a ceiling or chapter 7's equal-tile formula give.
"""

import math

import numpy as np

from ...blockwise import tiles_computed
from ...complexity import mha_flops
from ._verdict import Verdict, call_learner, compare


def _attention_flops(batch, heads, n, d_k, causal):
    """FLOPs of Q Kᵀ and A V for ``heads`` heads of width d_k (d_v = d_k), self-attention; halved when causal."""
    count = mha_flops(n, heads * d_k, heads, batch=batch)
    return (count["scores"] + count["weighted_sum"]) / (2 if causal else 1)


def _call_all(function, cases, name):
    """``function(*case)`` for every case, or (None, Verdict) at the first one that fails or returns None."""
    answers = []
    for case in cases:
        answer, failure = call_learner(function, *case, name=name)
        if failure is not None:
            return None, failure
        if answer is None:
            return None, Verdict(False, f"the result of {name}{case} is None: a function that forgot to `return`?")
        if isinstance(answer, (str, bytes)) or np.ndim(answer) != 0:
            return None, Verdict(False, f"{name} should return one number for each case; {name}{case} returned "
                                        f"{answer!r}.")
        answers.append(answer)
    try:
        return np.array(answers, dtype=float), None
    except (TypeError, ValueError):
        kinds = sorted({type(a).__name__ for a in answers})
        return None, Verdict(False, f"{name} should return one number for each case; it returned {kinds}.")


INTENSITY_CASES = [(512, 64, False), (4096, 64, False), (4096, 128, False), (4096, 64, True), (1000, 32, True)]


def check_forward_intensity(forward_intensity):
    """Check ``forward_intensity(n, d_k, causal) -> float``: FLOPs per byte of the fused forward of one head.

    One head of self-attention, n queries and keys, d_k = d_v, inputs and output in bfloat16 (2 bytes a
    number). The FLOPs are those of the two matrix products, Q Kᵀ and A V (a multiply-add is 2 FLOPs), halved
    when causal (the kernel skips the tiles above the diagonal). The bytes are the least a fused kernel must
    move to or from main memory: q, k and v read once, the output written once. Mistakes named: the output
    left out, multiply-adds counted as one FLOP or 4 bytes a number, the causal half forgotten, and the
    (n, n) scores and weights counted as if they went through main memory (the unfused path).

    >>> check_forward_intensity(lambda n, d_k, causal: n / (4 if causal else 2))
    Right: 4 n² d_k FLOPs (half when causal) over 8 n d_k bytes: n / 2 FLOPs per byte, n / 4 when causal, whatever d_k.
    """
    answers, failure = _call_all(forward_intensity, INTENSITY_CASES, "forward_intensity")
    if failure is not None:
        return failure
    flops = np.array([_attention_flops(1, 1, n, d, c) for n, d, c in INTENSITY_CASES])
    numbers = np.array([(n, d) for n, d, _ in INTENSITY_CASES], dtype=float)
    n, d = numbers[:, 0], numbers[:, 1]
    causal = np.array([c for *_, c in INTENSITY_CASES])
    minimal = 4 * n * d * 2  # q, k, v read, o written: 4 arrays of n d_k numbers, 2 bytes each
    full = flops * np.where(causal, 2, 1)
    mistakes = [
        (flops / (3 * n * d * 2), "the output is missing: the kernel reads q, k and v and writes o, four arrays "
                                  "of n · d_k numbers, each crossing main memory once."),
        (flops / 2 / minimal, "that is half the right value: either a multiply-add was counted as one FLOP "
                              "(it is 2: a multiplication and an addition) or a number as 4 bytes (bfloat16 "
                              "takes 2)."),
        (full / minimal, "a causal kernel skips the tiles above the diagonal, so it does half the FLOPs while "
                         "it still reads and writes every row: halve the FLOPs, not the bytes."),
        (flops / (minimal + 4 * n * n * 2), "that counts the (n, n) scores and weights written to and read back "
                                            "from main memory: the unfused path. The fused kernel keeps them "
                                            "on chip."),
    ]
    return compare(answers, flops / minimal, mistakes, what="your intensities", rtol=1e-9, atol=0,
                   right="4 n² d_k FLOPs (half when causal) over 8 n d_k bytes: n / 2 FLOPs per byte, n / 4 "
                         "when causal, whatever d_k.")


KEY_BLOCK_CASES = [(4096, 128, 64), (1000, 128, 64), (70, 32, 16), (100, 16, 32), (77, 64, 64), (300, 64, 128)]


def check_key_blocks_loaded(key_blocks_loaded):
    """Check ``key_blocks_loaded(n, block_m, block_n) -> int``: the key blocks a causal kernel loads for one head.

    n queries and n keys; the queries are cut into tiles of ``block_m`` (one program each), the keys into
    blocks of ``block_n``; the last tile and the last block may be shorter. A program loads every key block
    that holds a key at or before its last query and skips the others; the answer is the sum over all
    programs of one head. The right count is ``M.blockwise.tiles_computed(n, n, block_n, block_m,
    causal=True)``. Mistakes named: every pair of a tile and a block counted, chapter 7's T (T + 1) / 2 (which
    holds for equal tiles only), the partly allowed block of each tile left out, and blocks counted past the
    last key n.

    >>> def key_blocks_loaded(n, block_m, block_n):
    ...     return sum(-(-min(n, i0 + block_m) // block_n) for i0 in range(0, n, block_m))
    >>> check_key_blocks_loaded(key_blocks_loaded)
    Right: the counts are right for (n, BLOCK_M, BLOCK_N) = (4096, 128, 64), (1000, 128, 64), (70, 32, 16), (100, 16, 32), (77, 64, 64), (300, 64, 128).
    """
    answers, failure = _call_all(key_blocks_loaded, KEY_BLOCK_CASES, "key_blocks_loaded")
    if failure is not None:
        return failure
    expected = [tiles_computed(n, n, bn, bm, causal=True) for n, bm, bn in KEY_BLOCK_CASES]
    starts = [range(0, n, bm) for n, bm, _ in KEY_BLOCK_CASES]

    def per_program(rule):
        return [sum(rule(n, i0, bm, bn) for i0 in tiles) for (n, bm, bn), tiles in zip(KEY_BLOCK_CASES, starts)]

    def triangle(t):
        return t * (t + 1) // 2

    mistakes = [
        ([math.ceil(n / bm) * math.ceil(n / bn) for n, bm, bn in KEY_BLOCK_CASES],
         "that counts every (tile, block) pair: a causal program stops after the block holding its last query."),
        ([triangle(math.ceil(n / bn)) for n, bm, bn in KEY_BLOCK_CASES],
         "T (T + 1) / 2 with T = ceil(n / BLOCK_N) is chapter 7's count for equal tiles; with BLOCK_M ≠ BLOCK_N a "
         "program of BLOCK_M queries loads ceil(min(n, i0 + BLOCK_M) / BLOCK_N) blocks: sum that over the tiles."),
        ([triangle(math.ceil(n / bm)) for n, bm, bn in KEY_BLOCK_CASES],
         "T (T + 1) / 2 with T = ceil(n / BLOCK_M) counts query tiles, as if the key blocks were as tall; with "
         "BLOCK_M ≠ BLOCK_N sum ceil(min(n, i0 + BLOCK_M) / BLOCK_N) over the tiles."),
        (per_program(lambda n, i0, bm, bn: min(n, i0 + bm) // bn),
         "a floor drops the block that is only partly allowed (on the diagonal, or the last, shorter one): a "
         "program loads ceil(min(n, i0 + BLOCK_M) / BLOCK_N) blocks."),
        (per_program(lambda n, i0, bm, bn: math.ceil((i0 + bm) / bn)),
         "the last tile counts blocks past the last key: min(n, i0 + BLOCK_M), there are only n keys."),
    ]
    cases = ", ".join(f"({n}, {bm}, {bn})" for n, bm, bn in KEY_BLOCK_CASES)
    return compare(answers, np.array(expected, dtype=float), mistakes,
                   what=f"the counts for (n, BLOCK_M, BLOCK_N) = {cases}",
                   right=f"the counts are right for (n, BLOCK_M, BLOCK_N) = {cases}.")


TFLOPS_CASES = [(4, 16, 4096, 64, False, 0.6324), (4, 16, 4096, 64, True, 0.3694), (4, 16, 512, 128, False, 0.0773),
                (2, 8, 1000, 32, True, 0.05)]


def check_tflops(tflops):
    """Check ``tflops(B, h, n, d_k, causal, milliseconds) -> float``: the rate a benchmark reports for one call.

    Self-attention of B sequences, h heads, n queries and keys, d_k = d_v, one forward call that took
    ``milliseconds``. The FLOPs are those of Q Kᵀ and A V (a multiply-add is 2 FLOPs), halved when causal,
    as ``benchmarks/bench_gpu.py`` counts them; the answer is in TFLOP/s (10¹² FLOPs per second). Mistakes
    named: milliseconds taken for seconds, the causal half forgotten, one product only or multiply-adds,
    B or h left out.

    >>> check_tflops(lambda B, h, n, d_k, causal, ms: 4 * B * h * n**2 * d_k / (1 + causal) / (ms / 1e3) / 1e12)
    Right: 4 B h n² d_k FLOPs (half when causal) per call, over the call's seconds, in units of 10¹² FLOP/s.
    """
    answers, failure = _call_all(tflops, TFLOPS_CASES, "tflops")
    if failure is not None:
        return failure
    seconds = np.array([case[-1] / 1e3 for case in TFLOPS_CASES])
    work = np.array([_attention_flops(B, h, n, d, c) for B, h, n, d, c, _ in TFLOPS_CASES])
    whole = np.array([_attention_flops(B, h, n, d, False) for B, h, n, d, _, _ in TFLOPS_CASES])
    one_sequence = np.array([_attention_flops(1, h, n, d, c) for B, h, n, d, c, _ in TFLOPS_CASES])
    one_head = np.array([_attention_flops(B, 1, n, d, c) for B, h, n, d, c, _ in TFLOPS_CASES])
    expected = work / seconds / 1e12
    mistakes = [
        (expected / 1e3, "the time is in milliseconds: divide by ms / 1000 seconds, not by ms."),
        (expected * 1e3, "the time is in milliseconds: ms / 1000 seconds (multiplied by 1000 instead?)."),
        (whole / seconds / 1e12, "a causal call skips the tiles above the diagonal, and benchmarks count only "
                                 "the half it computes: halve the FLOPs when causal."),
        (expected / 2, "half the right rate: either one product only (Q Kᵀ and A V cost 2 n² d_k each) or a "
                       "multiply-add counted as one FLOP (it is 2)."),
        (one_sequence / seconds / 1e12, "B is missing: the call computes attention for all B sequences."),
        (one_head / seconds / 1e12, "h is missing: the call computes attention for all h heads."),
    ]
    return compare(answers, expected, mistakes, what="your rates", rtol=1e-9, atol=0,
                   right="4 B h n² d_k FLOPs (half when causal) per call, over the call's seconds, in units of "
                         "10¹² FLOP/s.")
