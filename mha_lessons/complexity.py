"""What multi-head attention costs: parameters, FLOPs, memory and FLOPs per byte (chapter 4), and the
backward pass's FLOPs and what it must keep from the forward (chapter 5).

Counts are derived from the code in ``multihead.py`` and ``grads.py``, step by step, and the
tests check them against PyTorch (``torch.nn.MultiheadAttention.parameters()``, its FLOP counter,
the tensors autograd saves) and against the arrays the package's own code creates and reads.
"""

from fractions import Fraction

import numpy as np

from ._checks import head_widths, require_int_at_least, require_positive_int


def param_count(d_model, num_heads, *, bias=True, d_k=None, d_v=None):
    """Number of learnable numbers in one multi-head attention layer.

    With ``h`` heads whose queries and keys are ``d_k`` wide and whose values
    are ``d_v`` wide, the four weight matrices (used as ``x @ w``) are

    - W_Q and W_K: ``(d_model, h d_k)`` each,
    - W_V: ``(d_model, h d_v)``,
    - W_O: ``(h d_v, d_model)``,

    so the weights number ``2 d_model h d_k + 2 d_model h d_v``, and with
    ``bias`` the four biases add ``2 h d_k + h d_v + d_model`` (b_Q, b_K, b_V, b_O).

    By default ``d_k = d_v = d_model / h``, the choice of the original
    Transformer, of ``torch.nn.MultiheadAttention`` and of ``init_params``.
    Then ``h d_k = h d_v = d_model``, the four matrices are square and the count
    is ``4 d_model² + 4 d_model``: the number of heads drops out of it (it only
    decides how the columns of W_Q, W_K and W_V are grouped into heads, and must
    divide ``d_model``). With head widths chosen independently of ``h``, the
    count grows with ``h``.

    Parameters
    ----------
    d_model, num_heads : int
        Width of the tokens, number of heads ``h``.
    bias : bool
        Whether the layer has the four biases.
    d_k, d_v : int, optional, keyword-only
        Width of each head's queries and keys, and of its values. Each
        defaults to ``d_model / num_heads``, which must then be a whole number.

    Returns
    -------
    int

    Examples
    --------
    >>> param_count(512, 8)
    1050624
    >>> param_count(512, 8, bias=False) == 4 * 512 ** 2
    True
    >>> param_count(512, 8, d_k=32, d_v=128)   # 2·512·8·32 + 2·512·8·128 + (2·8·32 + 8·128 + 512)
    1312768
    """
    d_k, d_v = head_widths(d_model, num_heads, d_k, d_v)  # d_model / h each unless given
    h = num_heads
    # w_q, w_k: (d_model, h d_k) each; w_v: (d_model, h d_v); w_o: (h d_v, d_model)
    weights = 2 * d_model * h * d_k + 2 * d_model * h * d_v
    biases = (2 * h * d_k + h * d_v + d_model) if bias else 0  # b_q, b_k: h d_k each; b_v: h d_v; b_o: d_model
    return weights + biases


def _sizes(n, d_model, num_heads, m, batch, d_k=None, d_v=None):
    """Checked sizes: m (n unless given), and the widths d_k, d_v of a head (d_model / h unless given)."""
    d_k, d_v = head_widths(d_model, num_heads, d_k, d_v)
    m = n if m is None else m
    for name, value in (("n", n), ("m", m), ("batch", batch)):
        require_positive_int(value, name)
    return m, d_k, d_v


def mha_flops(n, d_model, num_heads, m=None, *, batch=1, bias=True, d_k=None, d_v=None):
    """Floating-point operations of ``multihead_attention``, stage by stage, as the code does them.

    A multiply-add counts as 2 FLOPs, the convention of ``torch.utils.flop_counter``.
    Element-wise work counts 1 FLOP per element and operation: the scale is one
    multiplication per query feature (the code scales q, not the scores), the
    softmax five per score (max, subtract, exp, sum, divide), a bias one
    addition per output number.

    Parameters
    ----------
    n, m : int
        Number of queries and of keys/values (``m`` defaults to ``n``: self-attention).
    d_model, num_heads : int
    batch : int
    bias : bool
    d_k, d_v : int, optional
        Widths of a head's queries/keys and values (default d_model / h each).

    Returns
    -------
    dict
        One entry per stage (``q_projection``, ``k_projection``, ``v_projection``,
        ``scale``, ``scores``, ``softmax``, ``weighted_sum``, ``output_projection``,
        ``bias``), then ``matmul`` (the matrix products only, what torch's counter
        sees) and ``total``.

    Examples
    --------
    >>> f = mha_flops(4, 8, 2)
    >>> f["scores"] == 2 * 4 * 4 * 8      # h heads of (n, d_k) @ (d_k, m): 2 n m d_model
    True
    >>> f["matmul"]
    2560
    >>> mha_flops(4, 8, 2, batch=3)["matmul"] == 3 * 2560        # B = 3 sequences: 3 times the work
    True
    >>> t5 = mha_flops(512, 1024, 128, d_k=128, d_v=128)           # T5-11B's shape: h d_k = 16384 > d_model
    >>> t5["q_projection"] == 2 * 512 * 1024 * 128 * 128
    True
    """
    m, d_k, d_v = _sizes(n, d_model, num_heads, m, batch, d_k, d_v)
    return stage_flops(batch=batch, queries=n, keys=m, kv_tokens=m, d_model=d_model, num_heads=num_heads,
                       num_kv_heads=num_heads, d_k=d_k, d_v=d_v, bias=bias)


MATMUL_STAGES = ("q_projection", "k_projection", "v_projection", "scores", "weighted_sum", "output_projection")


def stage_flops(*, batch, queries, keys, kv_tokens, d_model, num_heads, num_kv_heads, d_k, d_v, bias):
    """The one table of what an attention layer computes, stage by stage; every FLOP count reads it.

    ``mha_flops`` (the layer), ``inference.decode_flops`` (a decoding step, where
    only the new tokens are projected and the keys come from a cache) and
    ``parallel.worker_matmul_flops`` (one worker's heads) are this table with
    their sizes. Conventions as in ``mha_flops``: a multiply-add is 2 FLOPs,
    element-wise work 1 FLOP per number and operation. Sizes are not checked
    here; the callers check them.

    Parameters (all keyword-only)
    ----------
    batch, queries, keys : int
        B, the queries n asked, the keys m each query is scored against.
    kv_tokens : int
        Tokens whose keys and values are projected (m for the layer, the new tokens when decoding).
    d_model, num_heads, num_kv_heads, d_k, d_v : int
    bias : bool

    Examples
    --------
    >>> f = stage_flops(batch=1, queries=4, keys=4, kv_tokens=4, d_model=8, num_heads=2, num_kv_heads=2,
    ...                 d_k=4, d_v=4, bias=True)
    >>> f == mha_flops(4, 8, 2)
    True
    """
    B, d, h, h_kv = batch, d_model, num_heads, num_kv_heads
    n, m, s = queries, keys, kv_tokens
    stages = {
        "q_projection": 2 * B * n * d * h * d_k,  # (B, n, d) @ (d, h d_k)
        "k_projection": 2 * B * s * d * h_kv * d_k,  # (B, s, d) @ (d, h_kv d_k)
        "v_projection": 2 * B * s * d * h_kv * d_v,  # (B, s, d) @ (d, h_kv d_v)
        "scale": B * n * h * d_k,  # q * (1 / √d_k)
        "scores": 2 * B * h * n * m * d_k,  # h products (n, d_k) @ (d_k, m)
        "softmax": 5 * B * h * n * m,  # max, subtract, exp, sum, divide per score
        "weighted_sum": 2 * B * h * n * m * d_v,  # h products (n, m) @ (m, d_v)
        "output_projection": 2 * B * n * h * d_v * d,  # (B, n, h d_v) @ (h d_v, d)
        "bias": B * (n * h * d_k + s * h_kv * (d_k + d_v) + n * d) if bias else 0,  # b_q; b_k, b_v; b_o
    }
    stages["matmul"] = sum(stages[name] for name in MATMUL_STAGES)
    stages["total"] = sum(value for name, value in stages.items() if name != "matmul")
    return stages


def mha_memory(n, d_model, num_heads, m=None, *, batch=1, dtype="float32"):
    """Bytes of every array ``multihead_attention`` creates, and of its parameters.

    Parameters
    ----------
    n, m, d_model, num_heads, batch : int
        As in ``mha_flops``.
    dtype : numpy dtype or its name
        The floating type of the inputs and parameters.

    Returns
    -------
    dict
        ``q``, ``k``, ``v`` (the projections), ``weights`` (the (B, h, n, m)
        scores, turned into weights in the same buffer), ``heads_output``,
        ``concat``, ``y``, ``parameters``, and ``activations`` (all but the
        parameters) in bytes.

    Examples
    --------
    >>> mem = mha_memory(1024, 512, 8)
    >>> mem["weights"] == 8 * 1024 * 1024 * 4      # h n m float32 numbers
    True
    """
    m, _, _ = _sizes(n, d_model, num_heads, m, batch)
    size = np.dtype(dtype).itemsize
    B, d = batch, d_model
    arrays = {
        "q": B * n * d,
        "k": B * m * d,
        "v": B * m * d,
        "weights": B * num_heads * n * m,
        "heads_output": B * n * d,  # (B, h, n, d_k)
        "concat": B * n * d,  # combine_heads copies into (B, n, d_model)
        "y": B * n * d,
    }
    memory = {name: count * size for name, count in arrays.items()}
    memory["activations"] = sum(memory.values())
    memory["parameters"] = param_count(d_model, num_heads) * size
    return memory


# ---------------------------------------------------------------- where the n² part takes over; what a kernel moves


def ffn_flops(n, d_model, d_ff, *, batch=1):
    """FLOPs of the two matrix products of a Transformer block's feed-forward sublayer.

    ``(B, n, d_model) @ (d_model, d_ff)``, then ``(B, n, d_ff) @ (d_ff, d_model)``: ``2 · 2 B n d_model d_ff``
    (a multiply-add is 2 FLOPs). The activation and the biases, one operation per number, are left out, as the
    ``matmul`` entry of ``mha_flops`` leaves out the softmax.

    Examples
    --------
    >>> ffn_flops(4, 8, 32) == 2 * (2 * 4 * 8 * 32)
    True
    """
    for name, value in (("n", n), ("d_model", d_model), ("d_ff", d_ff), ("batch", batch)):
        require_positive_int(value, name)
    return 2 * 2 * batch * n * d_model * d_ff


def crossover_length(d_model, num_heads, *, d_ff=0, causal=False):
    """The sequence length from which self-attention's n² products cost more FLOPs than the products that grow like n.

    Read from the counts, not from a formula typed here: ``mha_flops`` at any length n gives the scores and the
    weighted sum (together ``4 n² d_model``, growing like n²) and the four projections (``8 n d_model²``, like n);
    a Transformer block adds its feed-forward products (``ffn_flops``, like n) when ``d_ff > 0``. The two parts
    are equal at ``n* = n · linear(n) / quadratic(n)``. ``causal=True`` counts half the n² products, as a kernel
    that skips the masked half of the scores does.

    Parameters
    ----------
    d_model, num_heads : int
    d_ff : int, keyword-only
        Width of the feed-forward block; 0 (the default) for the attention sublayer alone.
    causal : bool, keyword-only

    Returns
    -------
    float
        n*, a whole number whenever the sizes make it one.

    Examples
    --------
    >>> crossover_length(512, 8)                           # the attention sublayer alone: 2 d_model
    1024.0
    >>> crossover_length(512, 8, d_ff=4 * 512)             # a block with d_ff = 4 d_model: 6 d_model
    3072.0
    >>> crossover_length(512, 8, d_ff=4 * 512, causal=True)    # and a causal kernel: 12 d_model
    6144.0
    """
    require_int_at_least(d_ff, "d_ff", 0)
    n = d_model  # any length will do: each part is a whole multiple of n or of n²
    flops = mha_flops(n, d_model, num_heads, bias=False)
    quadratic = Fraction(flops["scores"] + flops["weighted_sum"], 2 if causal else 1)
    linear = flops["matmul"] - flops["scores"] - flops["weighted_sum"] + (ffn_flops(n, d_model, d_ff) if d_ff else 0)
    return float(n * linear / quadratic)


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


def measure_peak_bytes(fn):
    """Run ``fn()`` and return the most memory it held at once, in bytes, as ``tracemalloc`` sees it.

    numpy reports its array buffers to ``tracemalloc``, so this measures what ``mha_memory`` and
    the block-wise chapter predict from the shapes. The arrays ``fn`` returns count (they exist at
    the end); memory held before the call does not.

    >>> import numpy as np
    >>> measure_peak_bytes(lambda: np.zeros(1_000_000)) >= 8_000_000
    True
    """
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------- training: the backward pass


def saved_for_backward_bytes(n, d_model, num_heads, m=None, *, batch=1, dtype="float32", self_attention=False,
                             recompute_weights=False):
    """Bytes of the forward's arrays that the backward of ``grads.mha_backward`` reads, array by array.

    The backward formulas of chapter 5 read, besides the parameters and the
    incoming gradients:

    - the layer's inputs, for the weight gradients of the input projections
      (dW_Q = X_qᵀ dQ, and so on): x_q, x_k and x_v, or one x in self-attention;
    - the projections q, k and v: dK = dSᵀ Q needs q, dQ = dS K needs k,
      dA = dO Vᵀ needs v;
    - the attention weights A, (B, h, n, m): dV = Aᵀ dO and the softmax
      backward A ⊙ (dA − rowsum(dA ⊙ A));
    - the heads' outputs side by side, ``concat``, for dW_O = Cᵀ dY.

    A framework that stores these arrays during the forward needs all of them
    until the backward has used them. ``grads.mha_backward`` itself stores
    nothing: it is given only the inputs and computes the forward again.
    FlashAttention-2 stores no weights either: it keeps the log-sum-exp of each
    query's scores, (B, h, n) numbers, and recomputes the weights block by block
    (chapter 7); the attention output, which its backward also reads, holds the
    numbers of ``concat`` (``recompute_weights=True``). The boolean mask, if
    any, is not counted.

    Parameters
    ----------
    n, m, d_model, num_heads, batch : int
        As in ``mha_flops`` (``m`` defaults to ``n``).
    dtype : numpy dtype or its name
        The floating type of the arrays.
    self_attention : bool, keyword-only
        The same array is x_q, x_k and x_v, stored once (then ``m`` must be ``n``).
    recompute_weights : bool, keyword-only
        Keep the (B, h, n) log-sum-exp instead of the (B, h, n, m) weights.

    Returns
    -------
    dict
        ``inputs``, ``q``, ``k``, ``v``, ``weights`` (0 when recomputed),
        ``lse`` (0 unless recomputed), ``concat`` and ``total``, in bytes.

    Examples
    --------
    >>> saved = saved_for_backward_bytes(1024, 512, 8, self_attention=True)
    >>> saved["weights"] == 8 * 1024 * 1024 * 4            # B h n m float32 numbers
    True
    >>> saved["total"] // 2**20                             # MiB: x, q, k, v, concat (2 MiB each) and the weights
    42
    >>> saved_for_backward_bytes(1024, 512, 8, self_attention=True, recompute_weights=True)["total"] // 2**10
    10272
    """
    m, _, _ = _sizes(n, d_model, num_heads, m, batch)
    if self_attention and m != n:
        raise ValueError(f"self_attention=True passes one array as queries, keys and values, so m = {m} must equal "
                         f"n = {n}")
    size = np.dtype(dtype).itemsize
    B, d, h = batch, d_model, num_heads
    counts = {
        "inputs": B * n * d if self_attention else B * (n + 2 * m) * d,  # x, or x_q (B, n, d) and x_k, x_v (B, m, d)
        "q": B * n * d,  # (B, h, n, d_k), read by dK = dSᵀ Q
        "k": B * m * d,  # (B, h, m, d_k), read by dQ = dS K
        "v": B * m * d,  # (B, h, m, d_v), read by dA = dO Vᵀ
        "weights": 0 if recompute_weights else B * h * n * m,  # (B, h, n, m), read by dV = Aᵀ dO and the softmax
        "lse": B * h * n if recompute_weights else 0,  # (B, h, n), from which the weights are recomputed
        "concat": B * n * d,  # (B, n, d_model), read by dW_O = Cᵀ dY (and, recomputing, by rowsum(dO ⊙ O))
    }
    saved = {name: count * size for name, count in counts.items()}
    saved["total"] = sum(saved.values())
    return saved


def mha_backward_flops(n, d_model, num_heads, m=None, *, batch=1, bias=True):
    """Floating-point operations of the backward pass of ``grads.mha_backward``, product by product.

    Counted with the conventions of ``mha_flops`` from the lines of
    ``grads.mha_backward`` and ``grads.sdpa_backward`` that undo the forward,
    in their order. Every matrix product Y = X W of the forward becomes two of
    the same size in the backward, dX = dY Wᵀ and dW = Xᵀ dY (or dA and dV,
    dQ and dK in attention), so the matrix products of the backward are
    exactly twice those of the forward. Element-wise work: the softmax
    backward a ⊙ (da − rowsum(da ⊙ a)) does four operations per score
    (product, sum, subtraction, product); the scale is one division per
    score (the backward scales dS̃, not dQ); a bias gradient is one addition
    per output number. ``grads.mha_backward`` also runs the forward again
    (twice for the attention core, once in ``mha_backward`` and once in
    ``sdpa_backward``), which this count leaves out: it counts what the
    backward adds to a forward that stored its arrays.

    Parameters
    ----------
    n, m, d_model, num_heads, batch, bias
        As in ``mha_flops``.

    Returns
    -------
    dict
        ``d_concat`` (dC = dY W_Oᵀ), ``dw_o`` (Cᵀ dY), ``db_o``, ``dv`` (Aᵀ dO),
        ``d_weights`` (dO Vᵀ), ``softmax``, ``scale``, ``dq`` (dS K), ``dk``
        (dSᵀ Q), ``dx_q``, ``dw_q``, ``dx_k``, ``dw_k``, ``dx_v``, ``dw_v``,
        ``db_qkv``, then ``matmul`` (what torch's counter sees) and ``total``.

    Examples
    --------
    >>> back = mha_backward_flops(4, 8, 2)
    >>> back["dv"] == back["d_weights"] == 2 * 4 * 4 * 8     # 2 n m d_model each
    True
    >>> back["matmul"] == 2 * mha_flops(4, 8, 2)["matmul"]
    True
    """
    m, _, _ = _sizes(n, d_model, num_heads, m, batch)
    B, d, h = batch, d_model, num_heads
    stages = {
        # backward of step 5, y = concat @ w_o + b_o
        "d_concat": 2 * B * n * d * d,  # dY W_Oᵀ: (B, n, d) @ (d, d)
        "dw_o": 2 * B * n * d * d,  # Cᵀ dY: (d, B n) @ (B n, d)
        "db_o": B * n * d if bias else 0,  # sum of dY over the rows
        # backward of step 3, attention in every head (sdpa_backward, steps 4 to 1)
        "dv": 2 * B * n * m * d,  # h products Aᵀ dO: (m, n) @ (n, d_v)
        "d_weights": 2 * B * n * m * d,  # h products dO Vᵀ: (n, d_v) @ (d_v, m)
        "softmax": 4 * B * h * n * m,  # da ⊙ a, rowsum, subtract, ⊙ a
        "scale": B * h * n * m,  # dS̃ / √d_k
        "dq": 2 * B * n * m * d,  # h products dS K: (n, m) @ (m, d_k)
        "dk": 2 * B * n * m * d,  # h products dSᵀ Q: (m, n) @ (n, d_k)
        # backward of step 1, the three input projections
        "dx_q": 2 * B * n * d * d,  # dQ W_Qᵀ
        "dw_q": 2 * B * n * d * d,  # X_qᵀ dQ
        "dx_k": 2 * B * m * d * d,
        "dw_k": 2 * B * m * d * d,
        "dx_v": 2 * B * m * d * d,
        "dw_v": 2 * B * m * d * d,
        "db_qkv": B * (n + 2 * m) * d if bias else 0,  # sums of dQ, dK, dV over the rows
    }
    elementwise = ("db_o", "softmax", "scale", "db_qkv")
    stages["matmul"] = sum(v for k, v in stages.items() if k not in elementwise)
    stages["total"] = sum(v for k, v in stages.items() if k != "matmul")
    return stages


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
    m, _, _ = _sizes(n, d_model, num_heads, m, batch)
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
