"""Why attention divides by √d_k (chapter 2): what the size of the scores does to the softmax.

Axis names used in this module:

    d_k    width of a query or key vector
    r      independent rows of attention scores (one query each)
    m      keys in one row

Queries and keys follow the random model of ``dot_products.py`` (independent
standard normal coordinates by default, under which Var[q·k] = d_k), row by row.
For rows of scores the module also lets each key j of a row have its own
correlation ρ_j with the query (``attention_logits(..., corr=...)`` and
``alignment_saturation``): k_j = ρ_j q + √(1 - ρ_j²) z_j with z_j independent of
q. A correlation shared by every key of a row only adds ρ |q|² to the whole row,
which the softmax ignores; correlations that differ between keys are what make
it saturate.

Chapter 2's code is in three rooms: the statistics of one dot product (``dot_products.py``), the
softmax of a row of scores (here), and the gradient that gets through the softmax
(``softmax_gradient.py``). Every name of the three is reachable here.
"""

import math
from typing import NamedTuple

import numpy as np

from ._checks import require_int_at_least
from .attention import softmax
from .dot_products import (DIVISORS, DotProductStats, _CHUNK, _check_divisor, _widths,  # noqa: F401  (reachable here)
                           dot_product_kurtosis, dot_product_moments, dot_product_variance, sample_qk)
from .softmax_gradient import (QueryGradient, query_gradient, sample_attention_rows,  # noqa: F401  (reachable here)
                               softmax_jacobian)
from .stats import entropy


# ----------------------------------------------------------------------------- the softmax of a row

def _key_correlations(corr, m):
    """corr as an (m,) array of per-key correlations in [-1, 1] (a number applies to every key)."""
    rho = np.asarray(corr, dtype=float)
    if rho.ndim > 1 or (rho.ndim == 1 and rho.shape != (m,)):
        raise ValueError(f"corr must be a number or one correlation per key, shape ({m},), got shape {rho.shape}")
    if not np.all(np.isfinite(rho)) or np.any(np.abs(rho) > 1):
        raise ValueError(f"corr holds correlations, each in [-1, 1], got {rho.tolist()}")
    return np.broadcast_to(rho, (m,))


def attention_logits(n_rows, m, d_k, *, divisor="sqrt", seed=None, corr=0.0):
    """Rows of attention scores q·k_j / divisor for standard normal queries and keys.

    Row i compares one query with its own m keys, so the rows are independent.
    Key j is ``corr[j] q + √(1 - corr[j]²) z_j`` with z_j standard normal and
    independent of q: every coordinate of k_j has mean 0, variance 1 and
    correlation ``corr[j]`` with the same coordinate of q (case (c) of
    chapter 2), and the keys are independent of each other given q.

    Parameters
    ----------
    n_rows, m, d_k : int, at least 1
        r rows, m keys per row, width d_k.
    divisor : {"sqrt", "none", "d_k"}
        Divide the scores by √d_k (the Transformer), by 1, or by d_k.
    seed : int, numpy.random.Generator or None
    corr : float or array_like, (m,), each in [-1, 1]
        The correlation of each key with the query; a number applies to every
        key. The default 0 gives independent queries and keys, drawn exactly
        as without the argument.

    Returns
    -------
    ndarray, (r, m)

    Examples
    --------
    >>> attention_logits(2, 5, 64, seed=0).shape
    (2, 5)
    >>> s = attention_logits(1, 3, 64, seed=0, corr=1.0)          # k_j = q for every key
    >>> bool(np.allclose(s, s[0, 0]))
    True
    """
    r = require_int_at_least(n_rows, "n_rows", 1)
    m = require_int_at_least(m, "m", 1)
    d = require_int_at_least(d_k, "d_k", 1)
    scale = _check_divisor(divisor)(d)
    rho = _key_correlations(corr, m)  # (m,)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((r, 1, d))  # (r, 1, d_k): one query per row
    k = rng.standard_normal((r, m, d))  # (r, m, d_k): m keys per row, independent of q so far
    if np.any(rho != 0):
        k = rho[:, None] * q + np.sqrt(1.0 - rho**2)[:, None] * k  # (m, 1) * (r, 1, d_k) + (m, 1) * (r, m, d_k)
    return np.einsum("rqa,rma->rm", q, k) / scale  # (r, 1, d_k) · (r, m, d_k) -> (r, m)


class Saturation(NamedTuple):
    """Average entropy and largest weight of a softmax row, one entry per width (shape (W,))."""

    d_k: np.ndarray
    entropy: np.ndarray  # mean over rows of the entropy of softmax(row), in nats
    max_weight: np.ndarray  # mean over rows of the largest weight of softmax(row)


def softmax_saturation(d_ks, m, n_rows, *, divisor="sqrt", seed=0):
    """How peaked the softmax of a row of m random scores is, for several widths.

    Parameters
    ----------
    d_ks : sequence of int, (W,)
    m : int, at least 1
        Keys per row. A uniform softmax has entropy log m and largest weight 1/m;
        a one-hot one has entropy 0 and largest weight 1.
    n_rows : int, at least 1
        Rows averaged over, for each width.
    divisor : {"sqrt", "none", "d_k"}
        See ``attention_logits``.
    seed : int

    Returns
    -------
    Saturation
        Fields ``d_k``, ``entropy``, ``max_weight``, each of shape (W,).

    Examples
    --------
    >>> softmax_saturation([4, 1024], m=16, n_rows=100, divisor="none").max_weight.round(2)
    array([0.41, 0.97])
    >>> softmax_saturation([4, 1024], m=16, n_rows=100, divisor="sqrt").max_weight.round(2)
    array([0.23, 0.25])
    """
    widths = _widths(d_ks)
    _check_divisor(divisor)
    rng = np.random.default_rng(seed)
    ent, top = np.empty(len(widths)), np.empty(len(widths))
    for i, d in enumerate(widths):
        p = softmax(attention_logits(n_rows, m, int(d), divisor=divisor, seed=rng), axis=-1)  # (r, m)
        ent[i] = entropy(p, axis=-1).mean()
        top[i] = p.max(axis=-1).mean()
    return Saturation(widths, ent, top)


class AlignmentSaturation(NamedTuple):
    """Softmax rows whose keys are aligned with the query by different amounts, one entry per width.

    ``entropy``, ``max_weight`` and their standard errors have shape (W,);
    ``mean_weight`` and ``mean_weight_se`` have shape (W, m): the weight of key
    j averaged over the rows, and the standard error of that average.
    """

    d_k: np.ndarray
    entropy: np.ndarray  # mean over rows of the entropy of softmax(row), in nats
    entropy_se: np.ndarray  # its standard error (rows are independent)
    max_weight: np.ndarray  # mean over rows of the largest weight
    mean_weight: np.ndarray  # (W, m): mean over rows of the weight of each key
    mean_weight_se: np.ndarray  # (W, m): its standard error


def alignment_saturation(d_ks, corr, n_rows, *, divisor="sqrt", seed=0):
    """How the softmax of a row responds to keys aligned with its query, for several widths.

    Key j of every row has per-coordinate correlation ``corr[j]`` with the
    query (see ``attention_logits``), so its score has mean d_k corr[j] and
    variance d_k (1 + corr[j]²) before the division (``dot_product_moments``).
    The part ``corr[j] |q|²`` of that score is shared by every key with the same
    correlation. Two cases show the difference:

    * every key equally aligned, ``corr = [ρ] * m``: the shared part moves the
      whole row and the softmax ignores it; the rest is ``√(1 - ρ²) q·z_j``,
      so the rows look like independent rows of a slightly smaller spread,
      at every width;
    * one key aligned, ``corr = [ρ, 0, ..., 0]``: divided by √d_k, that key
      leads the others by about ρ √d_k, and its weight tends to 1 as d_k grows.

    Parameters
    ----------
    d_ks : sequence of int, (W,)
    corr : float or array_like, (m,), each in [-1, 1]
        The correlation of each key with the query; m is its length, so a
        single number needs a row length and is rejected here.
    n_rows : int, at least 2
        Independent rows averaged over, for each width (at least two, for the
        standard errors).
    divisor : {"sqrt", "none", "d_k"}
        See ``attention_logits``.
    seed : int
        Seed of the one generator used for all widths; rows are drawn in
        chunks of about a million numbers.

    Returns
    -------
    AlignmentSaturation
        Fields ``d_k``, ``entropy``, ``entropy_se``, ``max_weight`` (W,) and
        ``mean_weight``, ``mean_weight_se`` (W, m).

    Examples
    --------
    >>> one = alignment_saturation([4, 1024], [0.5] + [0.0] * 15, 200)
    >>> one.mean_weight[:, 0].round(2)                       # the aligned key takes over
    array([0.13, 1.  ])
    >>> shared = alignment_saturation([64, 1024], [0.5] * 16, 200)
    >>> shared.entropy.round(2)                              # every key aligned alike: no collapse
    array([2.43, 2.45])
    """
    widths = _widths(d_ks)
    rho = np.asarray(corr, dtype=float)
    if rho.ndim != 1 or rho.size == 0:
        raise ValueError(f"corr must be one correlation per key, a non-empty 1-D sequence, got shape {rho.shape}")
    m = len(rho)
    _key_correlations(rho, m)
    r = require_int_at_least(n_rows, "n_rows", 2)
    _check_divisor(divisor)
    rng = np.random.default_rng(seed)
    fields = {name: np.empty(len(widths)) for name in ("entropy", "entropy_se", "max_weight")}
    weight, weight_se = np.empty((len(widths), m)), np.empty((len(widths), m))
    for i, d in enumerate(widths):
        p = np.empty((r, m))  # (r, m) the weights of every row
        rows = max(1, _CHUNK // (m * int(d)))
        for start in range(0, r, rows):
            stop = min(r, start + rows)
            logits = attention_logits(stop - start, m, int(d), divisor=divisor, seed=rng, corr=rho)  # (rows, m)
            p[start:stop] = softmax(logits, axis=-1)
        h = entropy(p, axis=-1)  # (r,)
        fields["entropy"][i], fields["entropy_se"][i] = h.mean(), h.std(ddof=1) / math.sqrt(r)
        fields["max_weight"][i] = p.max(axis=-1).mean()
        weight[i], weight_se[i] = p.mean(axis=0), p.std(axis=0, ddof=1) / math.sqrt(r)
    return AlignmentSaturation(widths, mean_weight=weight, mean_weight_se=weight_se, **fields)
