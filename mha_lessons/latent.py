"""Multi-head latent attention (DeepSeek-V2, chapter 10): keys and values from one small latent per token.

Axis names (as in ``multihead.py`` and ``inference.py``):

    ...       leading batch dimensions (B in the chapters)
    h         heads
    s         new positions in one decoding call; t positions so far
    n, m      queries, keys
    d_model   width of a token
    d_k, d_v  width of one head's query/key and value
    d_c       width of the latent that is cached, d_c << h (d_k + d_v)

Every token is compressed to one latent ``c = x W_DKV`` of width ``d_c``, and each head's key and
value are linear in it: ``k = c W_UK``, ``v = c W_UV``. The layer is therefore an ordinary multi-head
layer whose key and value projections are the products ``W_DKV W_UK`` and ``W_DKV W_UV``, of rank
at most ``d_c`` (``to_mha_params``). At decode time only ``c`` is cached, and the up-projection of
the keys is *absorbed* into the query: q kᵀ = q (c W_UK)ᵀ = (q W_UKᵀ) cᵀ, so the scores are taken
against the cached latents themselves, and the weighted sum of latents is up-projected once, after
the attention (``decode_step``).

Absorbing is not free: each head's query becomes d_c wide, so every head scores and sums in the
latent space, d_c numbers per cached position instead of d_k. ``decode_attention_flops`` counts both
ways of decoding, absorbed and with the keys and values up-projected from the cached latents.

DeepSeek-V2 (DeepSeek-AI, 2024) adds a small shared rotary key per token (decoupled RoPE), because a
position-dependent rotation between q and W_UK would stop the absorption; ``cache_bytes`` and
``decode_attention_flops`` count it (``d_rope``), the layer here leaves positions out.
"""

import math
from dataclasses import dataclass

import numpy as np

from ._checks import as_float_array, require_positive_int, require_positive_ints, require_shapes
from .attention import softmax
from .multihead import MHAParams, combine_heads, split_heads
from .position_masks import position_mask


@dataclass(frozen=True, eq=False)
class MLAParams:
    """The weights of a multi-head latent attention layer (no biases), used as ``x @ w``.

    ``w_q`` (d_model, h d_k), ``w_dkv`` (d_model, d_c), ``w_uk`` (d_c, h d_k), ``w_uv`` (d_c, h d_v),
    ``w_o`` (h d_v, d_model).
    """

    num_heads: int
    w_q: np.ndarray
    w_dkv: np.ndarray
    w_uk: np.ndarray
    w_uv: np.ndarray
    w_o: np.ndarray

    def __post_init__(self):
        require_positive_int(self.num_heads, "num_heads")
        for name in ("w_q", "w_dkv", "w_uk", "w_uv", "w_o"):
            value = as_float_array(getattr(self, name), name)
            if value.ndim != 2:
                raise ValueError(f"{name} must be a matrix, got shape {value.shape}")
            object.__setattr__(self, name, value)
        h = self.num_heads
        d_model, d_c = self.w_dkv.shape
        if self.w_q.shape[1] % h or self.w_uv.shape[1] % h:
            raise ValueError(f"w_q {self.w_q.shape} and w_uv {self.w_uv.shape} must have columns for "
                             f"num_heads = {h} heads of equal width")
        hd_k, hd_v = self.w_q.shape[1], self.w_uv.shape[1]
        expected = {"w_q": (d_model, hd_k), "w_uk": (d_c, hd_k), "w_uv": (d_c, hd_v), "w_o": (hd_v, d_model)}
        require_shapes(vars(self), expected,
                       f"d_model = {d_model}, d_c = {d_c}, h = {h}, d_k = {hd_k // h}, d_v = {hd_v // h}")

    @property
    def d_latent(self):
        """d_c, the width of the cached latent."""
        return self.w_dkv.shape[1]

    @property
    def d_k(self):
        return self.w_q.shape[1] // self.num_heads

    def per_head(self, name):
        """``w_uk`` or ``w_uv`` cut into heads: (d_c, h d) -> (h, d_c, d)."""
        w = getattr(self, name)
        return np.moveaxis(w.reshape(w.shape[0], self.num_heads, -1), 1, 0)  # (d_c, h, d) -> (h, d_c, d)


def init_mla_params(d_model, num_heads, d_latent, *, d_k=None, d_v=None, seed=0):
    """Random MLA weights, each uniform in ±1/√(fan-in).

    Examples
    --------
    >>> p = init_mla_params(16, 4, 6)
    >>> p.w_dkv.shape, p.w_uk.shape, p.d_latent
    ((16, 6), (6, 16), 6)
    """
    require_positive_int(d_model, "d_model")
    require_positive_int(num_heads, "num_heads")
    require_positive_int(d_latent, "d_latent")
    d_k = d_model // num_heads if d_k is None else d_k
    d_v = d_k if d_v is None else d_v
    rng = np.random.default_rng(seed)
    shapes = [(d_model, num_heads * d_k), (d_model, d_latent), (d_latent, num_heads * d_k),
              (d_latent, num_heads * d_v), (num_heads * d_v, d_model)]
    return MLAParams(num_heads, *(rng.uniform(-1, 1, size=s) / math.sqrt(s[0]) for s in shapes))


def to_mha_params(params):
    """The ordinary multi-head layer with the same function: W_K = W_DKV W_UK, W_V = W_DKV W_UV.

    Examples
    --------
    >>> p = init_mla_params(16, 4, 6)
    >>> dense = to_mha_params(p)
    >>> dense.w_k.shape, int(np.linalg.matrix_rank(dense.w_k))   # (d_model, h d_k), rank d_c
    ((16, 16), 6)
    """
    return MHAParams(params.num_heads, params.w_q, params.w_dkv @ params.w_uk, params.w_dkv @ params.w_uv,
                     params.w_o)


def mla_attention(x, params, mask=None):
    """Self-attention of MLA written out (keys and values up-projected from the latents): (..., n, d_model).

    Examples
    --------
    >>> from mha_lessons.multihead import multihead_attention
    >>> p = init_mla_params(16, 4, 6)
    >>> x = np.random.default_rng(1).normal(size=(5, 16))
    >>> bool(np.allclose(mla_attention(x, p), multihead_attention(x, x, x, to_mha_params(p))[0]))
    True
    """
    x = as_float_array(x, "x")
    if x.ndim < 2 or x.shape[-1] != params.w_q.shape[0]:
        raise ValueError(f"x must be (..., n, d_model) with d_model = {params.w_q.shape[0]}, got shape {x.shape}")
    c = x @ params.w_dkv  # (..., n, d_model) -> (..., n, d_c): the latent of every token
    q = split_heads(x @ params.w_q, params.num_heads)  # (..., n, h d_k) -> (..., h, n, d_k)
    k = split_heads(c @ params.w_uk, params.num_heads)  # (..., n, d_c) -> (..., n, h d_k) -> (..., h, n, d_k)
    v = split_heads(c @ params.w_uv, params.num_heads)  # (..., n, d_c) -> (..., h, n, d_v)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(params.d_k)  # (..., h, n, n)
    if mask is not None:
        scores = np.where(np.asarray(mask), scores, -np.inf)
    return combine_heads(softmax(scores) @ v) @ params.w_o  # (..., h, n, d_v) -> (..., n, h d_v) -> d_model


def decode_step(x_new, params, cache=None):
    """Causal MLA for ``s`` new tokens with the key up-projection absorbed: only latents are cached.

    Parameters
    ----------
    x_new : array_like, (..., s, d_model)
    params : MLAParams
    cache : ndarray or None
        The latents of the earlier positions, (..., t - s, d_c); None before the first token.

    Returns
    -------
    y_new : ndarray, (..., s, d_model)
    cache : ndarray, (..., t, d_c)
        One latent of d_c numbers per position, for all heads together.

    Examples
    --------
    >>> p = init_mla_params(16, 4, 6)
    >>> x = np.random.default_rng(1).normal(size=(5, 16))
    >>> y_a, c = decode_step(x[:3], p)
    >>> y_b, c = decode_step(x[3:], p, c)
    >>> from mha_lessons.attention import causal_mask
    >>> bool(np.allclose(np.concatenate([y_a, y_b]), mla_attention(x, p, causal_mask(5)))), c.shape
    (True, (5, 6))
    """
    x_new = as_float_array(x_new, "x_new")
    if x_new.ndim < 2 or x_new.shape[-1] != params.w_q.shape[0]:
        raise ValueError(f"x_new must be (..., s, d_model) with d_model = {params.w_q.shape[0]}, "
                         f"got shape {x_new.shape}")
    c_new = x_new @ params.w_dkv  # (..., s, d_c)
    cache = c_new if cache is None else np.concatenate([as_float_array(cache, "cache"), c_new], axis=-2)
    s, t = x_new.shape[-2], cache.shape[-2]  # (..., t, d_c): every latent so far
    q = split_heads(x_new @ params.w_q, params.num_heads)  # (..., h, s, d_k)
    # absorb W_UK into the query: q_h W_UK,hᵀ, (..., h, s, d_k) @ (h, d_k, d_c) -> (..., h, s, d_c)
    q_latent = q @ np.swapaxes(params.per_head("w_uk"), -1, -2)
    c = cache[..., None, :, :]  # (..., t, d_c) -> (..., 1, t, d_c): one latent for all heads
    scores = q_latent @ np.swapaxes(c, -1, -2) / math.sqrt(params.d_k)  # (..., h, s, t), = q kᵀ / √d_k
    mask = position_mask(np.arange(t - s, t), np.arange(t))  # (s, t): bottom-right causal
    weights = softmax(np.where(mask, scores, -np.inf))  # (..., h, s, t)
    o_latent = weights @ c  # (..., h, s, t) @ (..., 1, t, d_c) -> (..., h, s, d_c): a weighted sum of latents
    o = o_latent @ params.per_head("w_uv")  # up-project once: (..., h, s, d_c) @ (h, d_c, d_v) -> (..., h, s, d_v)
    return combine_heads(o) @ params.w_o, cache  # (..., s, h d_v) @ (h d_v, d_model)


def cache_bytes(seq_len, num_layers, d_latent, *, d_rope=0, batch=1, dtype="float16"):
    """Bytes of an MLA cache: batch · layers · seq_len · (d_c + d_rope) numbers.

    ``d_rope`` counts DeepSeek-V2's shared rotary key (decoupled RoPE), cached beside the latent.

    Examples
    --------
    >>> cache_bytes(1, 1, 512, d_rope=64)        # one position of one layer: 576 numbers of 2 bytes
    1152
    """
    for name, value in (("seq_len", seq_len), ("num_layers", num_layers), ("d_latent", d_latent),
                        ("batch", batch)):
        require_positive_int(value, name)
    if not isinstance(d_rope, (int, np.integer)) or isinstance(d_rope, bool) or d_rope < 0:
        raise ValueError(f"d_rope must be a non-negative integer, got {d_rope!r}")
    return batch * num_layers * seq_len * (d_latent + d_rope) * np.dtype(dtype).itemsize


def decode_attention_flops(t, num_heads, d_latent, *, d_k, d_v=None, d_rope=0, absorbed=True, batch=1):
    """FLOPs of MLA's attention for one new token per sequence against t cached latents (matrix products).

    Absorbed (``decode_step``): the query of head i is taken into latent space, q_i W_UK,iᵀ
    (``absorb``: that product and the weighted sum's up-projection by W_UV,i, once per new token),
    then every head scores its d_c-wide query, plus its d_rope-wide rotary part, against each
    cached latent and rotary key (``scores``: 2 B h t (d_c + d_rope)), and sums the latents
    (``weighted_sum``: 2 B h t d_c). Not absorbed: the t cached latents are up-projected into every
    head's keys and values at each step (``up_project``: 2 B t d_c h (d_k + d_v)), and each head
    attends with keys of d_k + d_rope and values of d_v numbers, as multi-head attention does.
    The projections of the new token (W_Q, W_DKV, W_O) are the same either way and left out.

    Parameters
    ----------
    t : int
        Cached positions each new query meets (the new one included).
    num_heads, d_latent : int
        h, and d_c, the width of the cached latent.
    d_k, d_v : int
        Width of a head's key (the part up-projected from the latent) and value; d_v defaults to d_k.
    d_rope : int
        Width of the shared rotary key cached beside the latent (DeepSeek-V2's decoupled RoPE); 0: none.
    absorbed : bool
    batch : int

    Returns
    -------
    dict
        ``up_project``, ``absorb``, ``scores``, ``weighted_sum`` and ``total``.

    Examples
    --------
    >>> f = decode_attention_flops(1, 128, 512, d_k=128, d_rope=64)   # DeepSeek-V2's sizes, one position
    >>> f["scores"] + f["weighted_sum"] == 128 * (2 * (512 + 64) + 2 * 512)
    True
    >>> decode_attention_flops(1, 128, 512, d_k=128, d_rope=64, absorbed=False)["up_project"]
    33554432
    """
    d_v = d_k if d_v is None else d_v
    require_positive_ints(t=t, num_heads=num_heads, d_latent=d_latent, d_k=d_k, d_v=d_v, batch=batch)
    if not isinstance(d_rope, (int, np.integer)) or isinstance(d_rope, bool) or d_rope < 0:
        raise ValueError(f"d_rope must be a non-negative integer, got {d_rope!r}")
    B, h, d_c = batch, num_heads, d_latent
    if absorbed:
        flops = {
            "up_project": 0,
            "absorb": 2 * B * h * d_k * d_c + 2 * B * h * d_c * d_v,  # (B, h, 1, d_k) @ (h, d_k, d_c); o W_UV
            "scores": 2 * B * h * t * (d_c + d_rope),  # (B, h, 1, d_c + d_rope) @ (B, 1, d_c + d_rope, t)
            "weighted_sum": 2 * B * h * t * d_c,  # (B, h, 1, t) @ (B, 1, t, d_c)
        }
    else:
        flops = {
            "up_project": 2 * B * t * d_c * h * (d_k + d_v),  # (B, t, d_c) @ (d_c, h d_k) and (d_c, h d_v)
            "absorb": 0,
            "scores": 2 * B * h * t * (d_k + d_rope),  # (B, h, 1, d_k + d_rope) @ (B, h, d_k + d_rope, t)
            "weighted_sum": 2 * B * h * t * d_v,  # (B, h, 1, t) @ (B, h, t, d_v)
        }
    flops["total"] = sum(flops.values())
    return flops
