"""Attention at inference time: a key/value cache for decoding (chapters 9 and 10).

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

What a step costs (``decode_flops``, ``kv_cache_bytes``, ``decode_bytes``) is in ``decode_cost.py``;
grouped-query attention, in which g query heads share a key/value head (chapter 10), is in ``gqa.py``
(``grouped_query_attention``, ``check_kv_heads``, ``gqa_param_count``). All are reachable here too.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._checks import as_float_array, require_ndim, require_positive_int
from .decode_cost import decode_bytes, decode_flops, kv_cache_bytes  # noqa: F401  (reachable here as before)
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
