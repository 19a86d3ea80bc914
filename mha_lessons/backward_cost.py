"""What the backward pass of multi-head attention costs (chapter 5): its FLOPs, product by product, and the
bytes of the forward's arrays it must keep.

Counted from the code of ``grads.py`` line by line, with the conventions of ``complexity.mha_flops``
(a multiply-add is 2 FLOPs, element-wise work 1 FLOP per number and operation); the tests check the
counts against PyTorch's FLOP counter and against the arrays ``grads.mha_backward`` reads.
"""

import numpy as np

from ._checks import layer_sizes


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
    m, _, _ = layer_sizes(n, d_model, num_heads, m, batch)
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
    >>> from mha_lessons.complexity import mha_flops
    >>> back["matmul"] == 2 * mha_flops(4, 8, 2)["matmul"]
    True
    """
    m, _, _ = layer_sizes(n, d_model, num_heads, m, batch)
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
