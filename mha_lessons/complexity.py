"""What multi-head attention costs: parameters (and, in the cost chapter, FLOPs and memory).

Counts are derived from the code in ``multihead.py``, step by step, and the
tests check them against PyTorch (``torch.nn.MultiheadAttention.parameters()``).
"""

import numpy as np

from ._checks import check_num_heads, require_positive_int


def param_count(d_model, num_heads, bias=True):
    """Number of learnable numbers in one multi-head attention layer.

    Four ``(d_model, d_model)`` weight matrices (W_Q, W_K, W_V, W_O) and, with
    ``bias``, four ``(d_model,)`` biases: ``4 d_model² + 4 d_model``. The number
    of heads does not appear: it decides how the columns of W_Q, W_K and W_V
    are grouped into heads, not how many there are. It is checked only for
    validity (it must divide ``d_model``).

    Examples
    --------
    >>> param_count(512, 8)
    1050624
    >>> param_count(512, 8, bias=False) == 4 * 512 ** 2
    True
    """
    check_num_heads(d_model, num_heads)
    weights = 4 * d_model * d_model  # w_q, w_k, w_v, w_o
    biases = 4 * d_model if bias else 0  # b_q, b_k, b_v, b_o
    return weights + biases


def _sizes(n, d_model, num_heads, m, batch):
    check_num_heads(d_model, num_heads)
    m = n if m is None else m
    for name, value in (("n", n), ("m", m), ("batch", batch)):
        require_positive_int(value, name)
    return m


def mha_flops(n, d_model, num_heads, m=None, *, batch=1, bias=True):
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
    """
    m = _sizes(n, d_model, num_heads, m, batch)
    B, d = batch, d_model
    stages = {
        "q_projection": 2 * B * n * d * d,  # (B, n, d) @ (d, d)
        "k_projection": 2 * B * m * d * d,  # (B, m, d) @ (d, d)
        "v_projection": 2 * B * m * d * d,
        "scale": B * n * d,  # q * (1 / √d_k)
        "scores": 2 * B * n * m * d,  # h products (n, d_k) @ (d_k, m): 2 B h n m d_k = 2 B n m d
        "softmax": 5 * B * num_heads * n * m,  # max, subtract, exp, sum, divide per score
        "weighted_sum": 2 * B * n * m * d,  # h products (n, m) @ (m, d_k)
        "output_projection": 2 * B * n * d * d,
        "bias": B * d * (2 * n + 2 * m) if bias else 0,  # b_q, b_k, b_v, b_o
    }
    matmul_stages = ("q_projection", "k_projection", "v_projection", "scores", "weighted_sum", "output_projection")
    stages["matmul"] = sum(stages[s] for s in matmul_stages)
    stages["total"] = sum(v for k, v in stages.items() if k != "matmul")
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
    m = _sizes(n, d_model, num_heads, m, batch)
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
