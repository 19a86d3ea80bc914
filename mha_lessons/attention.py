"""Softmax, scaled dot-product attention and masks.

Axis names used throughout the package:

    ...      any number of leading batch dimensions (B in the chapters)
    n        number of queries
    m        number of keys (and values)
    d_k      width of a query or key vector
    d_v      width of a value vector

Masks are boolean and **True means "may attend"**. (PyTorch's boolean
``attn_mask`` of ``nn.MultiheadAttention`` uses the opposite convention.)
"""

import math

import numpy as np

from ._checks import (as_float_array, check_attention_call, is_int, require_positive_int, require_softmax_axis,
                      working_dtype)


def softmax(x, axis=-1):
    """Numerically stable softmax along ``axis``.

    Subtracting the row maximum before ``exp`` changes nothing mathematically
    (the factor ``exp(-max)`` cancels) but keeps every exponent at or below
    0, so logits of size 1e4 give finite results instead of ``inf / inf``.

    Parameters
    ----------
    x : array_like of real numbers, any shape
        Float16/32/64 input keeps its dtype; integers are converted to float64.
        Float16 is computed in float32 and only the result rounded to float16
        (``_checks.working_dtype``): a float16 sum of 65,520 or more terms of
        about 1 would be infinite.
    axis : int
        The axis whose entries are turned into probabilities.

    Returns
    -------
    ndarray, same shape as ``x``
        Non-negative, summing to 1 along ``axis``. A slice whose entries are all
        ``-inf`` (everything masked out) gives all zeros. NaN in a slice makes
        that slice NaN, and only that slice.

    Raises ValueError for an ``axis`` that ``x`` does not have (a scalar has
    none) and for an empty axis.

    Examples
    --------
    >>> softmax(np.array([1.0, 2.0, 3.0])).round(4)
    array([0.09  , 0.2447, 0.6652])
    >>> softmax(np.array([1e4, -1e4]))
    array([1., 0.])
    >>> scores = np.zeros((4, 2, 3, 5))            # (B, h, n, m): a batch of score matrices
    >>> softmax(scores).shape, float(softmax(scores)[0, 0, 0].sum())
    ((4, 2, 3, 5), 1.0)
    """
    x = as_float_array(x, "x")
    require_softmax_axis(x, axis)
    work = x.astype(working_dtype(x.dtype))  # a copy, float32 for float16 input
    return softmax_inplace(work, axis).astype(x.dtype, copy=False)


def softmax_inplace(x, axis=-1):
    """The softmax of ``x`` along ``axis``, written into ``x`` itself (a float array the caller owns).

    A speed-up of ``softmax``, named so: working in place saves the temporaries
    that ``exp(x - max) / sum`` would allocate, and for attention scores of shape
    (B, h, n, m) each of them is the size of all the scores (chapter 4 measures
    what that costs). ``x`` is not checked; ``softmax`` checks and copies first.

    Examples
    --------
    >>> scores = np.zeros((2, 3, 4))                # (B, n, m): every score equal
    >>> weights = softmax_inplace(scores)
    >>> weights is scores, weights[0, 0].tolist()   # the same buffer, now uniform rows
    (True, [0.25, 0.25, 0.25, 0.25])
    """
    row_max = np.max(x, axis=axis, keepdims=True)
    row_max[np.isneginf(row_max)] = 0  # an all -inf slice: exp(-inf - 0) = 0 below
    x -= row_max
    np.exp(x, out=x)
    total = np.sum(x, axis=axis, keepdims=True)
    total[total == 0] = 1  # only all -inf slices sum to 0; their zeros stay zeros
    x /= total
    return x


def causal_mask(n, m=None, *, align="top-left"):
    """Boolean ``(n, m)`` causal mask: query i may see the keys at or before its own position.

    With n = m the queries and keys are the same positions and query i sees keys
    0..i (True on and below the diagonal). With n != m the queries must be placed
    among the keys, and two placements are in use:

    ``align="top-left"`` (the default)
        Query i stands at position i and sees keys 0..i, whatever m is: the
        queries are the first n positions. This is PyTorch's ``is_causal=True``
        and ``blockwise_attention(..., causal=True)``.
    ``align="bottom-right"``
        Query i stands at position m - n + i and sees keys 0..m - n + i: the
        queries are the last n positions, so the last query sees every key.
        This is the mask for n new tokens against a cache that ends with them
        (``inference.decode_step``), and PyTorch's
        ``torch.nn.attention.bias.causal_lower_right``. When n > m the first
        n - m queries see nothing (their rows are all False).

    Parameters
    ----------
    n : int
        Number of queries.
    m : int, optional
        Number of keys; defaults to ``n``.
    align : {"top-left", "bottom-right"}
        Where the queries sit among the keys; the two agree when n = m.

    Raises ValueError for sizes that are not positive integers and for any
    other ``align``.

    Examples
    --------
    >>> causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    >>> causal_mask(2, 4).astype(int)                        # query i sees keys 0..i
    array([[1, 0, 0, 0],
           [1, 1, 0, 0]])
    >>> causal_mask(2, 4, align="bottom-right").astype(int)  # query i sees keys 0..2 + i
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])
    """
    m = n if m is None else m
    for name, value in (("n", n), ("m", m)):
        if not is_int(value) or value < 1:
            raise ValueError(f"causal_mask needs positive integer sizes, got {name} = {value!r}")
    if align == "top-left":
        offset = 0  # query i stands at position i
    elif align == "bottom-right":
        offset = m - n  # query i stands at position m - n + i
    else:
        raise ValueError(f'causal_mask\'s align must be "top-left" or "bottom-right", got {align!r}')
    return np.tril(np.ones((n, m), dtype=bool), k=offset)  # True where j <= i + offset


def padding_mask(lengths, m):
    """Boolean ``(B, 1, m)`` key mask for a batch of sequences padded to length ``m``.

    Sequence b has ``lengths[b]`` real tokens followed by padding; its keys at
    positions ``>= lengths[b]`` are masked out for every query. The middle axis
    of size 1 broadcasts over the queries.

    Examples
    --------
    >>> padding_mask([2, 3], 3).astype(int)
    array([[[1, 1, 0]],
    <BLANKLINE>
           [[1, 1, 1]]])
    """
    require_positive_int(m, "m")
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths must be a 1-D sequence of integers, got {lengths!r}")
    if np.any(lengths < 0) or np.any(lengths > m):
        raise ValueError(f"every length must lie between 0 and m = {m}, got {lengths.tolist()}")
    return (np.arange(m) < lengths[:, None])[:, None, :]  # (B, m) -> (B, 1, m)


def scaled_dot_product_attention(q, k, v, mask=None, bias=None, *, check_input=True):
    """softmax(q kᵀ / √d_k + bias) v, over any leading batch dimensions.

    Parameters
    ----------
    q : array_like, (..., n, d_k)
    k : array_like, (..., m, d_k)
    v : array_like, (..., m, d_v)
    mask : array_like of bool, broadcastable to (..., n, m), optional
        True where query i may attend to key j. A query whose row is all False
        attends to nothing: its weights are all 0 and its output is the zero
        vector (a plain softmax gives NaN, and so does torch.nn.MultiheadAttention
        with its default need_weights=True).
    bias : array_like of real numbers, broadcastable to (..., n, m), optional
        Added to the scaled scores before the softmax: ALiBi's distance penalties,
        T5's relative position bias and PyTorch's float ``attn_mask`` are all such
        a bias. -inf forbids a pair (as False in ``mask``); +inf is refused. It is
        added in the arithmetic's type (float32 for float16 input, see below), so
        it does not change the result's dtype.
    check_input : bool, keyword-only
        Check the arguments first (the default). A caller that has checked its own input
        already, such as the layer (``multihead.attend_heads``), passes False: q, k and v
        are then float arrays of the shapes above, the mask boolean or None, the bias a
        float array or None, and nothing is checked twice.

    Returns
    -------
    out : ndarray, (..., n, d_v)
    weights : ndarray, (..., n, m)
        Each row sums to 1 (or is all 0 for a fully masked query). Its batch
        axes are those of q, k and the mask; batch axes that only v has are
        not repeated here.

    The result has the floating dtype of the inputs (float32 stays float32);
    integer input is converted to float64. Float16 input is computed in float32,
    as cuBLAS, PyTorch and FlashAttention do, and only the results are rounded
    to float16: in float16 itself a score of 256 · 256 · 80 / √80 (q = k = 256
    everywhere, d_k = 80) overflows to inf, and so does the softmax's sum of
    66,000 equal weights.

    NaN reaches exactly what depends on it: NaN in query i makes row i of
    ``out`` and ``weights`` NaN; NaN in key j makes NaN every query that may
    attend to key j (a masked-out key cannot reach a query). NaN in feature c
    of a value makes feature c of *every* output NaN, even for queries whose
    weight on that value is 0, because 0 · NaN = NaN in the weighted sum
    (torch does the same).

    Examples
    --------
    >>> q = np.array([[1.0, 0.0]])               # one query,  d_k = 2
    >>> k = np.array([[1.0, 0.0], [0.0, 1.0]])   # two keys
    >>> v = np.array([[10.0], [20.0]])           # their values, d_v = 1
    >>> out, w = scaled_dot_product_attention(q, k, v)
    >>> w.round(4)
    array([[0.6698, 0.3302]])
    >>> out.round(4)
    array([[13.3024]])
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(4, 3, 8)), rng.normal(size=(4, 5, 8)), rng.normal(size=(4, 5, 2))
    >>> out, w = scaled_dot_product_attention(q, k, v, causal_mask(3, 5))   # B = 4, n = 3, m = 5
    >>> out.shape, w.shape
    ((4, 3, 2), (4, 3, 5))
    >>> alibi = -0.5 * np.abs(np.arange(3)[:, None] - np.arange(5))   # (n, m): a penalty growing with distance
    >>> scaled_dot_product_attention(q, k, v, bias=alibi)[1].shape
    (4, 3, 5)
    """
    if check_input:  # the only check: the steps below trust their input
        q, k, v, mask, bias = check_attention_call(q, k, v, mask, bias)
    dtype = np.result_type(q, k, v)
    work = working_dtype(dtype)  # float32 for float16 input, else the type itself (no copy)
    q, k, v = (a.astype(work, copy=False) for a in (q, k, v))
    d_k = q.shape[-1]
    # steps 1 and 2: scores of the scaled queries, (q / √d_k) kᵀ = q kᵀ / √d_k.
    # Scaling q costs n·d_k multiplications, scaling the scores would cost n·m.
    scores = (q * (1 / math.sqrt(d_k))) @ np.swapaxes(k, -1, -2)  # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    if bias is not None:  # the additive bias, broadcast: it may carry batch axes that q and k lack
        scores = scores + bias.astype(work, copy=False)  # (..., n, m)
    if mask is not None:  # forbidden pairs get score -inf, so weight exactly 0
        full = np.broadcast_shapes(scores.shape, mask.shape)
        if full != scores.shape:  # the mask has batch axes that q and k lack
            scores = np.broadcast_to(scores, full).copy()  # (..., n, m) -> the mask's batch axes too
        np.copyto(scores, -np.inf, where=~mask)
    # step 3: softmax over the keys, row by row (in place: the scores are not needed again)
    weights = softmax_inplace(scores, axis=-1)  # (..., n, m)
    # step 4: weighted sum of the values
    out = weights @ v  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    return out.astype(dtype, copy=False), weights.astype(dtype, copy=False)  # float16 in, float16 out
