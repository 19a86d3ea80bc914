"""Bytes moved and FLOPs per byte: what a roofline needs from chapter 4's counts.

``mha_intensity`` gives, for each stage of the package's layer, the FLOPs of ``complexity.mha_flops`` and the
fewest bytes the stage must read and write; ``attention_core_traffic`` does the same for the attention core alone,
unfused (the n × m scores and weights go through memory) or fused (only q, k, v and the output do). Both are
reachable as ``M.complexity.<name>`` too.
"""

from fractions import Fraction

import numpy as np

from ._checks import layer_sizes, require_positive_int
from .complexity import mha_flops


def attention_core_traffic(n, d_k, *, fused, m=None, batch=1, num_heads=1, io_bytes=2, score_bytes=4, causal=False):
    """FLOPs of the attention core, softmax(q kᵀ / √d_k) v in every head, and the fewest bytes it must move.

    **FLOPs**: the two products, ``2 · 2 B h n m d_k`` (the ``scores`` and ``weighted_sum`` of ``mha_flops``,
    and the count PyTorch's FLOP counter and chapter 4's GPU measurements use); ``causal=True`` halves them, as a
    kernel that skips the masked half of the scores does.

    **Bytes**, read from or written to the GPU's main memory (or a CPU's), at least once each:

    - every path reads q ``(B, h, n, d_k)``, k and v ``(B, h, m, d_k)`` and writes the output ``(B, h, n, d_k)``,
      ``io_bytes`` per number (2 for bf16 or fp16);
    - a path that is not fused also writes the ``(B, h, n, m)`` scores, reads them for the softmax, writes the
      weights and reads them for the weighted sum: ``4 B h n m`` numbers of ``score_bytes`` each (4 where it keeps
      them in float32, as PyTorch's unfused ``math`` path does for bf16 inputs). It writes every score even when
      causal: the masked ones are set to -inf, not skipped.
    - a fused kernel keeps its tiles of scores and weights on the chip and moves only q, k, v and the output.

    Parameters
    ----------
    n, d_k : int
        Queries per head and their width (``d_v = d_k``).
    fused : bool, keyword-only
    m, batch, num_heads : int, keyword-only
        Keys per head (default ``n``), B and h.
    io_bytes, score_bytes : int, keyword-only
        Bytes per number of q, k, v and the output; of the scores and weights of an unfused path.
    causal : bool, keyword-only

    Returns
    -------
    dict
        ``flops``, ``bytes`` and ``intensity`` (FLOPs per byte).

    Examples
    --------
    >>> attention_core_traffic(8192, 64, fused=True)["intensity"]          # n / 2 FLOPs per byte in bf16
    4096.0
    >>> round(attention_core_traffic(8192, 64, fused=False)["intensity"], 2)   # about d_k / 4 with float32 scores
    15.94
    """
    m = n if m is None else m
    for name, value in (("n", n), ("m", m), ("d_k", d_k), ("batch", batch), ("num_heads", num_heads),
                        ("io_bytes", io_bytes), ("score_bytes", score_bytes)):
        require_positive_int(value, name)
    heads = batch * num_heads
    flops = Fraction(2 * 2 * heads * n * m * d_k, 2 if causal else 1)  # q kᵀ and (weights) v
    moved = heads * (2 * n + 2 * m) * d_k * io_bytes  # q, k, v read; the output written
    if not fused:
        moved += 4 * heads * n * m * score_bytes  # scores written and read, weights written and read
    flops = int(flops) if flops.denominator == 1 else float(flops)
    return {"flops": flops, "bytes": moved, "intensity": flops / moved}


def mha_intensity(n, d_model, num_heads, m=None, *, batch=1, dtype="float32"):
    """Arithmetic intensity of each stage of ``multihead_attention``: FLOPs per byte moved to or from memory.

    The FLOPs are those of ``mha_flops`` (with biases). The bytes are the
    least each stage must move: every array it reads, read once, and every
    array it writes, written once, as the code does it. A matrix product reads
    its two factors and writes its result; an element-wise pass reads its
    input and writes its output. The softmax, done in place, makes five passes
    over the (B, h, n, m) scores: the maximum (read), the subtraction (read and
    write), the exponential (read and write), the sum (read) and the division
    (read and write), 8 B h n m numbers moved, plus the per-row maxima and sums
    (the two guards on those small (B, h, n) arrays are left out). The scale
    multiplies the queries (read and write); the biases are added in place
    (read and write the projection, read the bias); ``combine_heads`` copies
    the heads' outputs (read and write, no FLOPs).

    Parameters
    ----------
    n, m, d_model, num_heads, batch : int
        As in ``mha_flops``.
    dtype : numpy dtype or its name

    Returns
    -------
    dict
        For each stage (those of ``mha_flops``, without ``matmul`` and
        ``total``, and ``combine_heads``), a dict with ``flops``, ``bytes``
        and ``intensity`` (their ratio, FLOPs per byte).

    Examples
    --------
    >>> stages = mha_intensity(1024, 512, 8)                   # float32
    >>> round(stages["q_projection"]["intensity"], 1)           # 2 n d² / (4 (2 n d + d²))
    102.4
    >>> stages["softmax"]["intensity"] < 1 < stages["scores"]["intensity"]
    True
    """
    m, _, _ = layer_sizes(n, d_model, num_heads, m, batch)
    size = np.dtype(dtype).itemsize
    B, d, h = batch, d_model, num_heads
    scores = B * h * n * m
    moved = {  # numbers read + numbers written
        "q_projection": B * n * d + d * d + B * n * d,  # x_q, w_q -> q
        "k_projection": B * m * d + d * d + B * m * d,
        "v_projection": B * m * d + d * d + B * m * d,
        "scale": 2 * B * n * d,  # q -> q / √d_k
        "scores": B * n * d + B * m * d + scores,  # q, k -> (B, h, n, m)
        "softmax": 8 * scores + 4 * B * h * n,  # five passes; the row maxima and sums written once, read once
        "weighted_sum": scores + B * m * d + B * n * d,  # weights, v -> (B, h, n, d_v)
        "combine_heads": 2 * B * n * d,  # a copy into (B, n, d_model)
        "output_projection": B * n * d + d * d + B * n * d,  # concat, w_o -> y
        "bias": 2 * B * (2 * n + 2 * m) * d + 4 * d,  # y += b in place, four times; the four bias vectors
    }
    flops = mha_flops(n, d_model, num_heads, m, batch=batch)
    stages = {}
    for name, numbers in moved.items():
        f = flops.get(name, 0)
        stages[name] = {"flops": f, "bytes": numbers * size, "intensity": f / (numbers * size)}
    return stages
