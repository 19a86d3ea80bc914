"""What multi-head attention costs: parameters, FLOPs, memory and FLOPs per byte (chapter 4).

The backward pass's FLOPs and what it must keep from the forward (chapter 5) are counted in
``backward_cost.py`` and reachable here too.

Counts are derived from the code in ``multihead.py`` and ``grads.py``, step by step, and the
tests check them against PyTorch (``torch.nn.MultiheadAttention.parameters()``, its FLOP counter,
the tensors autograd saves) and against the arrays the package's own code creates and reads.
"""

from fractions import Fraction

import numpy as np

from ._checks import head_widths, layer_sizes, require_int_at_least, require_positive_int
from .backward_cost import mha_backward_flops, saved_for_backward_bytes  # noqa: F401  (chapter 5's, reachable here)


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
    m, d_k, d_v = layer_sizes(n, d_model, num_heads, m, batch, d_k, d_v)
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
    m, _, _ = layer_sizes(n, d_model, num_heads, m, batch)
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


# The bytes each stage moves, and FLOPs per byte, live in intensity.py, which builds on mha_flops above; its two
# names are reachable here as before, looked up when first asked for (PEP 562). Imported here at import time they
# made a cycle: `import mha_lessons.intensity` in a fresh interpreter failed (tests/test_package.py).
_FROM_INTENSITY = ("attention_core_traffic", "mha_intensity")


def __getattr__(name):
    if name in _FROM_INTENSITY:
        from . import intensity

        return getattr(intensity, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_FROM_INTENSITY])
