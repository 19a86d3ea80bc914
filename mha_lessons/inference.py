"""Attention at inference time: a key/value cache for decoding, and grouped-query attention.

Axis names (as in ``attention.py`` and ``multihead.py``):

    ...       leading batch dimensions (B in the chapters)
    h         number of query heads
    h_kv      number of key/value heads; h_kv = h is multi-head attention,
              h_kv = 1 multi-query attention, anything between grouped-query attention
    g         query heads per key/value head, g = h / h_kv
    t         number of tokens so far, the newest included (the length of the cache once
              it is appended): the newest token is the t-th, at position t - 1 (positions
              count from 0, as in the masks), and its query meets t keys
    s         number of new positions in one decoding call (1 when decoding token by token)
    n, m      number of queries, number of keys/values
    d_model   width of a token vector entering and leaving the layer
    d_k       width of one head (also used for the value width)

Query head i reads key/value head ``i // g``: heads 0..g-1 share key/value head 0,
the next g heads share key/value head 1, and so on (the order of
``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``).
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._checks import as_float_array, broadcast_batch, check_mask, check_num_heads, require_ndim, require_positive_int
from .attention import scaled_dot_product_attention
from .masks import position_mask
from .complexity import param_count, stage_flops
from .multihead import _check_layer_inputs, combine_heads, mix_heads, project_heads
from .position import rotary


def _positive_ints(**values):
    for name, value in values.items():
        require_positive_int(value, name)


def check_kv_heads(num_heads, num_kv_heads):
    """Raise ValueError unless ``num_kv_heads`` is a positive integer that divides ``num_heads``.

    >>> check_kv_heads(8, 2)
    >>> check_kv_heads(8, 3)
    Traceback (most recent call last):
    ...
    ValueError: h = 8 query heads cannot be shared out among h_kv = 3 key/value heads: h_kv must divide h
    """
    _positive_ints(num_heads=num_heads, num_kv_heads=num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"h = {num_heads} query heads cannot be shared out among h_kv = {num_kv_heads} key/value heads: "
            f"h_kv must divide h"
        )


# ---------------------------------------------------------------- the cache

@dataclass(frozen=True, eq=False)
class KVCache:
    """The keys and values of every position decoded so far, for one attention layer.

    ``k`` and ``v`` have shape ``(..., h_kv, t, d_k)``: the heads already split,
    positions along the second-last axis. ``positions`` holds the position of each
    cached key, ``(t,)``; by default 0 .. t - 1. ``append`` returns a new cache with
    more positions; the cache itself never changes. (A faster version would
    allocate one buffer for the longest sequence up front and write into it;
    a new array per step is simpler to read and gives the same numbers.)

    Examples
    --------
    >>> k = np.zeros((2, 3, 4))                      # h_kv = 2 heads, t = 3 positions, d_k = 4
    >>> cache = KVCache(k, k).append(np.ones((2, 1, 4)), np.ones((2, 1, 4)))
    >>> cache.length, cache.k.shape, cache.nbytes, cache.positions
    (4, (2, 4, 4), 512, array([0, 1, 2, 3]))
    """

    k: np.ndarray
    v: np.ndarray
    positions: Optional[np.ndarray] = None

    window = None  # a plain cache keeps every position (RollingKVCache keeps the last `window`)

    def __post_init__(self):
        k, v = as_float_array(self.k, "k"), as_float_array(self.v, "v")
        require_ndim(k, "k", 3, "(..., h_kv, t, d_k)")
        require_ndim(v, "v", 3, "(..., h_kv, t, d_v)")
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(
                f"the cache's keys and values must agree in batch, heads and positions: "
                f"k has shape {k.shape}, v has shape {v.shape}"
            )
        positions = np.arange(k.shape[-2]) if self.positions is None else np.asarray(self.positions)
        if positions.shape != (k.shape[-2],) or not np.issubdtype(positions.dtype, np.integer):
            raise ValueError(f"positions must be {k.shape[-2]} integers, one per cached key of k {k.shape}, "
                             f"got shape {positions.shape} and dtype {positions.dtype}")
        object.__setattr__(self, "k", k)  # frozen dataclass: store the converted arrays
        object.__setattr__(self, "v", v)
        object.__setattr__(self, "positions", positions)

    @property
    def length(self):
        """The number of positions held, t."""
        return self.k.shape[-2]

    @property
    def next_position(self):
        """The position of the next token: one after the last cached one (0 for an empty cache)."""
        return int(self.positions.max()) + 1 if self.length else 0

    @property
    def nbytes(self):
        """Bytes held by the keys and the values together."""
        return self.k.nbytes + self.v.nbytes

    def append(self, k_new, v_new):
        """A new cache with ``s`` more positions: ``k_new``, ``v_new`` of shape ``(..., h_kv, s, d_k)``."""
        new = KVCache(k_new, v_new)
        for name, old, added in (("k", self.k, new.k), ("v", self.v, new.v)):
            if old.shape[:-2] != added.shape[:-2] or old.shape[-1] != added.shape[-1]:
                raise ValueError(
                    f"cannot append {name} of shape {added.shape} to a cache of shape {old.shape}: "
                    f"batch, heads and width (all axes but the positions, -2) must be equal"
                )
        # (..., h_kv, t - s, d_k) and (..., h_kv, s, d_k) -> (..., h_kv, t, d_k)
        k = np.concatenate([self.k, new.k], axis=-2)
        v = np.concatenate([self.v, new.v], axis=-2)
        positions = np.concatenate([self.positions, self.next_position + np.arange(new.length)])  # (t,)
        return KVCache(k, v, positions)


@dataclass(frozen=True, eq=False)
class RollingKVCache(KVCache):
    """A cache of fixed size for sliding-window attention: ``window`` slots, position p in slot p mod window.

    With a window of n_win positions (Mistral 7B's rolling buffer cache, Jiang et al., 2023), a
    new token never looks further back than n_win - 1 positions, so older keys and values can be
    overwritten: the cache stops growing at ``window`` positions. The slots are in the order the
    ring writes them, not in position order; ``positions`` says which position each slot holds,
    and the mask of ``decode_step`` is built from it.

    Examples
    --------
    >>> empty = RollingKVCache(np.zeros((1, 0, 2)), np.zeros((1, 0, 2)), window=3)
    >>> cache = empty.append(np.ones((1, 5, 2)), np.ones((1, 5, 2)))   # positions 0 .. 4
    >>> cache.positions, cache.k.shape                                 # 3, 4 kept; 2 in slot 2
    (array([3, 4, 2]), (1, 3, 2))
    """

    window: Optional[int] = None

    def __post_init__(self):
        super().__post_init__()
        require_positive_int(self.window, "window")
        if self.length > self.window:
            raise ValueError(f"a rolling cache of window {self.window} holds at most {self.window} positions, "
                             f"got k of shape {self.k.shape}")

    def append(self, k_new, v_new):
        """The cache after writing ``s`` new positions; only the last ``window`` positions stay."""
        grown = KVCache.append(self, k_new, v_new)  # (..., h_kv, t_old + s, d_k), every position
        keep = np.flatnonzero(grown.positions > grown.next_position - 1 - self.window)  # the last `window`
        slots = keep[np.argsort(grown.positions[keep] % self.window)]  # position p goes to slot p mod window
        return RollingKVCache(grown.k[..., slots, :], grown.v[..., slots, :], grown.positions[slots],
                              window=self.window)


def decode_step(x_new, params, cache=None, *, rope_base=None, window=None):
    """Causal self-attention of ``s`` new tokens, reusing the cached keys and values.

    Only the new tokens are projected; their keys and values are appended to
    the cache, and their queries attend to every cached position up to their
    own. The outputs equal the last ``s`` rows of ``multihead_attention`` run
    on the whole sequence with ``causal_mask``.

    Parameters
    ----------
    x_new : array_like, (..., s, d_model)
        The new tokens: s = 1 when decoding one token at a time, the whole
        prompt for the first call (the "prefill").
    params : MHAParams
    cache : KVCache or None
        The keys and values of the t - s earlier positions,
        ``(..., h, t - s, d_k)``; None before the first token.
    rope_base : float, optional
        Rotary position embedding (``position.rotary``) with this base: the new
        queries and keys are rotated to their positions t - s .. t - 1, and the
        keys are cached rotated. None: no positions inside attention.
    window : int, optional
        Sliding-window attention: each token sees itself and the ``window - 1``
        positions before it, and the first call creates a ``RollingKVCache`` of
        ``window`` slots. Later calls take the window from the cache.

    Returns
    -------
    y_new : ndarray, (..., s, d_model)
        The layer's output for the new tokens, at positions t - s .. t - 1.
    cache : KVCache
        The cache with all t positions, ``(..., h, t, d_k)`` (the last ``window``
        of them for a rolling cache).

    Examples
    --------
    >>> from mha_lessons.multihead import init_params, multihead_attention
    >>> from mha_lessons.attention import causal_mask
    >>> p = init_params(8, 2)
    >>> x = np.random.default_rng(0).normal(size=(3, 8))   # three tokens
    >>> y0, cache = decode_step(x[:1], p)                   # token 0
    >>> y1, cache = decode_step(x[1:2], p, cache)           # token 0's k, v: cached
    >>> y2, cache = decode_step(x[2:3], p, cache)
    >>> full, _ = multihead_attention(x, x, x, p, causal_mask(3))
    >>> bool(np.allclose(np.concatenate([y0, y1, y2]), full)), cache.k.shape
    (True, (2, 3, 4))
    """
    x_new, _, _, _ = _check_layer_inputs(x_new, x_new, x_new, params, None)
    s = x_new.shape[-2]
    # step 1, for the new tokens only: project and split into heads (chapter 3's steps 1-2),
    # (..., s, d_model) -> (..., h, s, d_k) and (..., h, s, d_v)
    q, k, v = project_heads(x_new, x_new, x_new, params)
    if cache is None:  # an empty cache, (..., h, 0, d_k): plain, or rolling for a window
        empty = dict(k=k[..., :0, :], v=v[..., :0, :])
        cache = KVCache(**empty) if window is None else RollingKVCache(**empty, window=window)
    elif window is not None and window != cache.window:
        raise ValueError(f"window = {window} differs from the cache's window = {cache.window}")
    new_positions = cache.next_position + np.arange(s)  # (s,): positions t - s .. t - 1
    if rope_base is not None:  # rotate the new queries and keys to their own positions; cache keys rotated
        q, k = rotary(q, new_positions, base=rope_base), rotary(k, new_positions, base=rope_base)
    # step 2: the cached keys and values followed by the new ones, nothing dropped yet: (..., h, t, d_k)
    seen = KVCache.append(cache, k, v)
    # step 3: new token i sits at position t - s + i and sees positions 0 .. t - s + i (the causal mask
    # aligned bottom-right), and with a window only the last `window` of them
    mask = position_mask(new_positions, seen.positions, window=cache.window)  # (s, t)
    out, _ = grouped_query_attention(q, seen.k, seen.v, mask)  # (..., h, s, d_v)
    # step 4: heads side by side, (..., h, s, d_v) -> (..., s, h d_v), then W_O (chapter 3's steps 4-5)
    return mix_heads(combine_heads(out), params), cache.append(k, v)


# ---------------------------------------------------------------- grouped-query attention

def grouped_query_attention(q, k, v, mask=None):
    """Attention in which groups of g = h / h_kv query heads share one key/value head.

    Query head i attends with key/value head ``i // g``. h_kv = h is ordinary
    multi-head attention (every head has its own keys and values), h_kv = 1 is
    multi-query attention (all heads share one).

    Parameters
    ----------
    q : array_like, (..., h, n, d_k)
    k : array_like, (..., h_kv, m, d_k)
    v : array_like, (..., h_kv, m, d_v)
        h_kv must divide h.
    mask : array_like of bool, broadcastable to (..., h, n, m), optional
        True where query i may attend to key j (an (n, m) mask serves every
        head). Read by broadcasting, a layer-style (B, n, m) mask is taken for
        one mask per head (h, n, m); when B = h that would be silently wrong,
        so a three-axis mask whose first axis is both B and h is refused. Give
        it its head axis: (B, 1, n, m) for one mask per sequence.

    Returns
    -------
    out : ndarray, (..., h, n, d_v)
    weights : ndarray, (..., h, n, m)

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q = rng.normal(size=(4, 3, 2))            # h = 4 query heads, n = 3, d_k = 2
    >>> k = rng.normal(size=(2, 5, 2))            # h_kv = 2 key/value heads, m = 5
    >>> out, w = grouped_query_attention(q, k, k)
    >>> out.shape, w.shape
    ((4, 3, 2), (4, 3, 5))
    >>> same = scaled_dot_product_attention(q[1], k[0], k[0])[0]  # head 1 reads 1 // 2
    >>> bool(np.allclose(out[1], same))
    True
    """
    q, k, v = as_float_array(q, "q"), as_float_array(k, "k"), as_float_array(v, "v")
    require_ndim(q, "q", 3, "(..., h, n, d_k)")
    require_ndim(k, "k", 3, "(..., h_kv, m, d_k)")
    require_ndim(v, "v", 3, "(..., h_kv, m, d_v)")
    *_, h, n, d_k = q.shape
    *_, h_kv, m, _ = k.shape
    if v.shape[-3] != h_kv:
        raise ValueError(f"k has h_kv = {h_kv} heads (shape {k.shape}) "
                         f"but v has {v.shape[-3]} (shape {v.shape})")
    check_kv_heads(h, h_kv)
    if k.shape[-1] != d_k:
        raise ValueError(f"query and key widths differ: "
                         f"q has shape {q.shape}, k has shape {k.shape}")
    if v.shape[-2] != m:
        raise ValueError(f"keys and values differ in length: "
                         f"k has shape {k.shape}, v has shape {v.shape}")
    batch = broadcast_batch({"q": q.shape[:-3], "k": k.shape[:-3], "v": v.shape[:-3]})
    g = h // h_kv
    # (..., h, n, d_k) -> (..., h_kv, g, n, d_k)
    q = q.reshape(q.shape[:-3] + (h_kv, g, n, d_k))
    # (..., h_kv, m, d_k) -> (..., h_kv, 1, m, d_k): broadcast over the g query heads
    k = k[..., None, :, :]
    v = v[..., None, :, :]  # (..., h_kv, m, d_v) -> (..., h_kv, 1, m, d_v)
    if mask is not None:
        if np.ndim(mask) == 3 and batch and np.shape(mask)[0] == h == batch[-1] > 1:
            raise ValueError(f"a mask of shape {np.shape(mask)} is ambiguous for q of shape {batch + (h, n, d_k)}, "
                             f"where B = h = "
                             f"{h}: it would be read as one mask per head (h, n, m), not per sequence (B, n, m); "
                             f"give it a head axis, e.g. mask[:, None] for one mask per sequence, (B, 1, n, m)")
        mask = check_mask(mask, batch + (h, n, m))
        # (n, m) -> (1, n, m): give the mask a head axis
        mask = mask.reshape((1,) * max(0, 3 - mask.ndim) + mask.shape)
        if mask.shape[-3] == h:  # one mask per query head
            # (..., h, n, m) -> (..., h_kv, g, n, m)
            mask = mask.reshape(mask.shape[:-3] + (h_kv, g) + mask.shape[-2:])
        else:  # one mask for all heads
            # (..., 1, n, m) -> (..., 1, 1, n, m)
            mask = mask.reshape(mask.shape[:-3] + (1, 1) + mask.shape[-2:])
    # out (..., h_kv, g, n, d_v), weights (..., h_kv, g, n, m)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    # merge the groups back: (..., h_kv, g, n, ·) -> (..., h, n, ·)
    out = out.reshape(out.shape[:-4] + (h,) + out.shape[-2:])
    weights = weights.reshape(weights.shape[:-4] + (h, n, m))
    return out, weights


# ---------------------------------------------------------------- what it costs

def gqa_param_count(d_model, num_heads, num_kv_heads, *, bias=True):
    """Learnable numbers of one attention layer with ``num_kv_heads`` key/value heads.

    W_Q and W_O stay ``(d_model, d_model)``; W_K and W_V shrink to
    ``(d_model, h_kv d_k)``, each losing ``(h - h_kv) d_k`` columns of
    ``d_model`` weights (and one bias each). Computed from
    ``complexity.param_count``, so h_kv = h gives exactly its count.

    Examples
    --------
    >>> gqa_param_count(512, 8, 8) == param_count(512, 8)
    True
    >>> gqa_param_count(512, 8, 1, bias=False)        # 2 * 512² + 2 * 512 * 64
    589824
    """
    check_num_heads(d_model, num_heads)
    check_kv_heads(num_heads, num_kv_heads)
    d_k = d_model // num_heads
    missing_columns = 2 * (num_heads - num_kv_heads) * d_k  # of W_K and W_V together
    per_column = d_model + (1 if bias else 0)  # a column of weights and its bias
    return param_count(d_model, num_heads, bias=bias) - missing_columns * per_column


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
    _positive_ints(seq_len=seq_len, num_layers=num_layers, num_kv_heads=num_kv_heads, d_k=d_k, d_v=d_v, batch=batch)
    numbers = batch * num_layers * num_kv_heads * seq_len * (d_k + d_v)  # keys and values
    return numbers * np.dtype(dtype).itemsize


def decode_flops(t, d_model, num_heads, num_kv_heads=None, *, cached=True, batch=1, bias=True):
    """FLOPs of the decoding step for the t-th token (position t - 1): its query meets t keys.

    With the cache the step projects one token and attends from one query to
    t cached keys. Without it, the step reruns the layer with ``causal_mask``
    on all t tokens, as ``multihead_attention`` does: every projection and
    every one of the t × t scores (the masked ones are computed, then
    discarded). Counting conventions as in ``complexity.mha_flops``: a
    multiply-add is 2 FLOPs, element-wise work 1 FLOP per number and operation.

    Parameters
    ----------
    t : int
        Tokens so far, the new one included: the new token is the t-th, at
        position t - 1, and its query is scored against t keys.
    d_model, num_heads : int
    num_kv_heads : int, optional
        Key/value heads (default ``num_heads``: multi-head attention).
    cached : bool
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
    """
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_num_heads(d_model, num_heads)
    check_kv_heads(num_heads, num_kv_heads)
    _positive_ints(t=t, batch=batch)
    d_k = d_model // num_heads
    s = 1 if cached else t  # tokens projected, and queries asked, in this step
    return stage_flops(batch=batch, queries=s, keys=t, kv_tokens=s, d_model=d_model, num_heads=num_heads,
                       num_kv_heads=num_kv_heads, d_k=d_k, d_v=d_k, bias=bias)
