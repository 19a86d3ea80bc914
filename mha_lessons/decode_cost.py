"""What a decoding step costs: its FLOPs, the bytes of the key/value cache, the least bytes it reads (chapter 9).

Axis names (as in ``inference.py``):

    B         sequences decoded together (``batch``)
    h, h_kv   query heads, key/value heads (h_kv = h: multi-head attention)
    t         tokens so far, the new ones included: the keys each new query is scored against
    s         new tokens in one call (1 when decoding token by token; the whole prompt in a prefill)
    d_model   width of a token; d_k = d_v = d_model / h, the width of a head

FLOPs follow ``complexity.stage_flops`` (a multiply-add is 2 FLOPs, element-wise work 1 FLOP per
number and operation). Bytes are the least a step must move, each array read or written once: the
layer's weights, the keys and values of the t cached positions of every sequence, and the new tokens
in and their outputs out. The ratio of the two, FLOPs per byte, is what decides whether a step waits for
arithmetic or for memory (chapter 4's roofline).
"""

import numpy as np

from ._checks import check_num_heads, require_positive_ints
from .complexity import stage_flops
from .gqa import check_kv_heads, gqa_param_count


def kv_cache_bytes(seq_len, num_layers, num_kv_heads, d_k, *, batch=1, dtype="float16", d_v=None):
    """Bytes of the key/value cache of a model: batch · layers · h_kv · seq_len · (d_k + d_v) numbers.

    Parameters
    ----------
    seq_len : int
        Positions cached per sequence.
    num_layers, num_kv_heads, d_k : int
        Attention layers (each has its own cache), key/value heads per layer, width of a head.
    batch : int
        Sequences decoded together.
    dtype : numpy dtype or its name
        The type of the cached numbers (bfloat16, not a numpy type, has the size of float16).
    d_v : int, optional
        Width of a value head; defaults to ``d_k`` (values as wide as keys, as in
        ``multihead_attention``), which makes the count ``2 · batch · layers · h_kv · seq_len · d_k``.

    Examples
    --------
    >>> kv_cache_bytes(1, 1, 1, 1, dtype="float32")      # one key and one value of one number
    8
    >>> kv_cache_bytes(4096, 32, 32, 128) / 2**30        # 32 layers, 32 heads of width 128, float16
    2.0
    >>> kv_cache_bytes(1, 1, 1, 64, d_v=32, dtype="float32")   # a key of 64 numbers and a value of 32
    384
    """
    d_v = d_k if d_v is None else d_v
    require_positive_ints(seq_len=seq_len, num_layers=num_layers, num_kv_heads=num_kv_heads, d_k=d_k, d_v=d_v,
                          batch=batch)
    numbers = batch * num_layers * num_kv_heads * seq_len * (d_k + d_v)  # keys and values
    return numbers * np.dtype(dtype).itemsize


def _check_step(t, d_model, num_heads, num_kv_heads, new_tokens, batch):
    """The sizes of one step, checked: h_kv (default h) and d_k. ValueError naming the numbers otherwise."""
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_num_heads(d_model, num_heads)
    check_kv_heads(num_heads, num_kv_heads)
    require_positive_ints(t=t, new_tokens=new_tokens, batch=batch)
    if new_tokens > t:
        raise ValueError(f"new_tokens = {new_tokens} cannot exceed t = {t}, the tokens so far (new ones included)")
    return num_kv_heads, d_model // num_heads


def decode_flops(t, d_model, num_heads, num_kv_heads=None, *, cached=True, new_tokens=1, batch=1, bias=True):
    """FLOPs of the decoding step that brings the tokens so far to t: the new queries meet t keys.

    With the cache the step projects only the ``new_tokens`` = s new tokens (s = 1 when decoding
    token by token, s = t for a prompt processed in one call, the prefill) and scores their s
    queries against the t keys. Without it (``cached=False``, one new token) the step reruns the
    layer with ``causal_mask`` on all t tokens, as ``multihead_attention`` does: every projection
    and every one of the t × t scores (the masked ones are computed, then discarded). Counting
    conventions as in ``complexity.mha_flops``.

    Parameters
    ----------
    t : int
        Tokens so far, the new ones included: the last new token is the t-th, at position t - 1.
    d_model, num_heads : int
    num_kv_heads : int, optional
        Key/value heads (default ``num_heads``: multi-head attention).
    cached : bool
    new_tokens : int
        s, the tokens this call adds (with the cache only).
    batch : int
    bias : bool

    Returns
    -------
    dict
        The stages of ``complexity.mha_flops`` (``q_projection`` ... ``bias``),
        ``matmul`` (the matrix products, what torch's FLOP counter sees) and ``total``.

    Examples
    --------
    >>> f = decode_flops(100, 512, 8)
    >>> f["matmul"] == 8 * 512**2 + 4 * 100 * 512         # four projections of one token, 1 x 100 attention
    True
    >>> decode_flops(100, 512, 8, cached=False)["matmul"] == 8 * 100 * 512**2 + 4 * 100**2 * 512
    True
    >>> decode_flops(100, 512, 8, new_tokens=100) == decode_flops(100, 512, 8, cached=False)   # a prefill
    True
    """
    num_kv_heads, d_k = _check_step(t, d_model, num_heads, num_kv_heads, new_tokens, batch)
    if not cached and new_tokens != 1:
        raise ValueError(f"without a cache a step recomputes all t = {t} tokens; new_tokens = {new_tokens} "
                         f"applies to a cached step only")
    s = new_tokens if cached else t  # tokens projected, and queries asked, in this step
    return stage_flops(batch=batch, queries=s, keys=t, kv_tokens=s, d_model=d_model, num_heads=num_heads,
                       num_kv_heads=num_kv_heads, d_k=d_k, d_v=d_k, bias=bias)


def decode_bytes(t, d_model, num_heads, num_kv_heads=None, *, new_tokens=1, batch=1, bias=True,
                 dtype="float16"):
    """The least bytes one cached step of one attention layer moves: weights, cache, tokens in and out.

    Each array is counted once, as a step that keeps everything else on the chip would move it:
    the layer's weights (read once for the whole batch: every sequence uses the same ones), the
    keys and values of the t positions of every sequence (the cache, the s new positions included),
    and the s new tokens read in and their outputs written out. Intermediate arrays (scores,
    weights, heads) are left out: a fused kernel never writes them to memory.

    Parameters
    ----------
    t, d_model, num_heads, num_kv_heads, new_tokens, batch, bias : as in ``decode_flops``
    dtype : numpy dtype or its name
        The type of every stored number (16-bit by default, as in serving).

    Returns
    -------
    dict
        ``weights``, ``cache``, ``tokens`` and ``total``, in bytes.

    Examples
    --------
    >>> b = decode_bytes(100, 512, 8, bias=False)       # float16: 2 bytes a number
    >>> b["weights"] == 2 * 4 * 512**2, b["cache"] == 2 * 2 * 100 * 512, b["tokens"] == 2 * 2 * 512
    (True, True, True)
    >>> f = decode_flops(100, 512, 8, bias=False)
    >>> round(f["total"] / b["total"], 2)                # FLOPs per byte: about one
    1.0
    """
    num_kv_heads, d_k = _check_step(t, d_model, num_heads, num_kv_heads, new_tokens, batch)
    size = np.dtype(dtype).itemsize
    moved = {
        "weights": gqa_param_count(d_model, num_heads, num_kv_heads, bias=bias) * size,
        "cache": kv_cache_bytes(t, 1, num_kv_heads, d_k, batch=batch, dtype=dtype),  # (B, h_kv, t, d_k) twice
        "tokens": 2 * batch * new_tokens * d_model * size,  # x_new in, y_new out: (B, s, d_model) each
    }
    moved["total"] = sum(moved.values())
    return moved
