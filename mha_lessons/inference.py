"""Attention at inference time: a key/value cache for decoding, and what it costs (chapter 9).

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

Grouped-query attention, in which g query heads share a key/value head, is in ``gqa.py``
(``grouped_query_attention``, ``check_kv_heads``, ``gqa_param_count`` are reachable here too).
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._checks import as_float_array, check_num_heads, require_ndim, require_positive_int, require_positive_ints
from .complexity import stage_flops
from .gqa import check_kv_heads, gqa_param_count, grouped_query_attention  # noqa: F401  (reachable here as before)
from .multihead import check_layer_inputs, combine_heads, mix_heads, project_heads
from .position import rotary
from .position_masks import position_mask


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
    x_new, _, _, _, _ = check_layer_inputs(x_new, x_new, x_new, params)  # once, here: the steps trust it
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
    out, _ = grouped_query_attention(q, seen.k, seen.v, mask, check_input=False)  # (..., h, s, d_v)
    # step 4: heads side by side, (..., h, s, d_v) -> (..., s, h d_v), then W_O (chapter 3's steps 4-5)
    return mix_heads(combine_heads(out, check_input=False), params), cache.append(k, v)


# ---------------------------------------------------------------- what it costs

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
    require_positive_ints(seq_len=seq_len, num_layers=num_layers, num_kv_heads=num_kv_heads, d_k=d_k, d_v=d_v, batch=batch)
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
    require_positive_ints(t=t, batch=batch)
    d_k = d_model // num_heads
    s = 1 if cached else t  # tokens projected, and queries asked, in this step
    return stage_flops(batch=batch, queries=s, keys=t, kv_tokens=s, d_model=d_model, num_heads=num_heads,
                       num_kv_heads=num_kv_heads, d_k=d_k, d_v=d_k, bias=bias)
