"""Why attention divides by √d_k: the statistics of a dot product, and what they do to the softmax.

Axis names used in this module:

    N      independent draws of a query and a key (Monte Carlo samples)
    d_k    width of a query or key vector
    r      independent rows of attention scores (one query each)
    m      keys in one row

The random model behind every function: the d_k coordinate pairs (q_a, k_a) of a
query and a key are independent and identically distributed; within a pair
q_a ~ N(mean_q, std_q²) and k_a ~ N(mean_k, std_k²), jointly normal with
correlation ``corr``. The defaults (means 0, standard deviations 1, correlation
0) are the assumptions under which Var[q·k] = d_k. Chapter 2 derives

    E[q·k]   = d_k (mean_q mean_k + corr std_q std_k)
    Var[q·k] = d_k (std_q² std_k² (1 + corr²) + std_q² mean_k² + std_k² mean_q²
                    + 2 corr std_q std_k mean_q mean_k)

(``dot_product_moments``) and checks it against ``dot_product_variance``.

For rows of scores the module also lets each key j of a row have its own
correlation ρ_j with the query (``attention_logits(..., corr=...)`` and
``alignment_saturation``): k_j = ρ_j q + √(1 - ρ_j²) z_j with z_j independent of
q. A correlation shared by every key of a row only adds ρ |q|² to the whole row,
which the softmax ignores; correlations that differ between keys are what make
it saturate.
"""

import math
from typing import NamedTuple

import numpy as np

from ._checks import as_float_array, require_int_at_least, require_ndim
from .attention import softmax
from .stats import entropy

# What the raw scores q·k are divided by before the softmax.
DIVISORS = {
    "none": lambda d_k: 1.0,
    "sqrt": math.sqrt,  # the Transformer's choice, softmax(q·k / √d_k)
    "d_k": float,
}

_CHUNK = 1 << 20  # draw at most about a million numbers at a time, whatever d_k is


# ----------------------------------------------------------------------------- input checks

def _widths(d_ks):
    """d_ks as a 1-D integer array of widths, each at least 1."""
    arr = np.atleast_1d(np.asarray(d_ks))
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1):
        raise ValueError(f"d_ks must be a non-empty 1-D sequence of integers of at least 1, got {d_ks!r}")
    return arr.astype(np.int64)


def _check_distribution(mean_q, mean_k, std_q, std_k, corr):
    for name, value in (("mean_q", mean_q), ("mean_k", mean_k), ("std_q", std_q), ("std_k", std_k), ("corr", corr)):
        if not np.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    for name, value in (("std_q", std_q), ("std_k", std_k)):
        if value < 0:
            raise ValueError(f"{name} is a standard deviation and cannot be negative, got {value}")
    if not -1 <= corr <= 1:
        raise ValueError(f"corr is a correlation and must lie in [-1, 1], got {corr}")


def _check_divisor(divisor):
    if divisor not in DIVISORS:
        raise ValueError(f"divisor must be one of {sorted(DIVISORS)}, got {divisor!r}")
    return DIVISORS[divisor]


# ----------------------------------------------------------------------------- the closed forms

def dot_product_moments(d_k, *, mean_q=0.0, mean_k=0.0, std_q=1.0, std_k=1.0, corr=0.0):
    """Mean and variance of q·k under the module's random model (closed forms).

    Each term z_a = q_a k_a has mean ``mean_q mean_k + corr std_q std_k`` and,
    for jointly normal pairs, variance ``std_q² std_k² (1 + corr²) +
    std_q² mean_k² + std_k² mean_q² + 2 corr std_q std_k mean_q mean_k``; the
    d_k terms are independent, so both add up d_k times. With ``corr = 0`` the
    formulas hold for any distribution of the coordinates, not only the normal.

    Parameters
    ----------
    d_k : int or array_like of int, any shape
        Widths, each at least 1.
    mean_q, mean_k, std_q, std_k : float
        Mean and standard deviation of every coordinate of q and of k.
    corr : float in [-1, 1]
        Correlation between q_a and k_a (the same coordinate of q and k).

    Returns
    -------
    mean, variance : float, or ndarrays of the shape of ``d_k``

    Examples
    --------
    >>> dot_product_moments(64)
    (0.0, 64.0)
    >>> dot_product_moments(64, std_q=2.0)        # Var = d_k std_q² std_k²
    (0.0, 256.0)
    >>> dot_product_moments(64, corr=1.0)         # q = k: q·q has mean d_k, variance 2 d_k
    (64.0, 128.0)
    """
    _check_distribution(mean_q, mean_k, std_q, std_k, corr)
    widths = np.asarray(d_k)
    if not np.issubdtype(widths.dtype, np.integer) or np.any(widths < 1):
        raise ValueError(f"d_k must be an integer of at least 1 (or an array of them), got {d_k!r}")
    cov = corr * std_q * std_k  # Cov(q_a, k_a)
    term_mean = mean_q * mean_k + cov  # E[q_a k_a]
    term_var = (std_q**2 * std_k**2 + cov**2  # Var[q_a k_a], Isserlis' theorem for the normal pair
                + std_q**2 * mean_k**2 + std_k**2 * mean_q**2 + 2 * cov * mean_q * mean_k)
    mean, variance = widths * term_mean, widths * term_var  # d_k independent terms
    if widths.ndim == 0:
        return float(mean), float(variance)
    return mean.astype(float), variance.astype(float)


def dot_product_kurtosis(d_k):
    """Kurtosis E[s⁴] / Var[s]² of s = q·k for standard normal coordinates: 3 + 6 / d_k.

    The terms z_a = q_a k_a are independent with E[z] = 0, E[z²] = 1 and
    E[z⁴] = E[q⁴] E[k⁴] = 3 · 3 = 9. Expanding (z_1 + ... + z_d)⁴, only the
    terms z_a⁴ (d of them) and z_a² z_b² (3 d (d - 1) of them) have a non-zero
    mean, so E[s⁴] = 9 d + 3 d (d - 1) = 3 d² + 6 d, while Var[s]² = d².
    A normal variable has kurtosis 3; q·k has heavier tails, approaching the
    normal as d_k grows (the central limit theorem).

    Parameters
    ----------
    d_k : int or array_like of int

    Returns
    -------
    float, or ndarray of the shape of ``d_k``

    Examples
    --------
    >>> dot_product_kurtosis(1), dot_product_kurtosis(64)
    (9.0, 3.09375)
    """
    widths = np.asarray(d_k)
    if not np.issubdtype(widths.dtype, np.integer) or np.any(widths < 1):
        raise ValueError(f"d_k must be an integer of at least 1 (or an array of them), got {d_k!r}")
    kurtosis = 3.0 + 6.0 / widths
    return float(kurtosis) if widths.ndim == 0 else kurtosis


# ----------------------------------------------------------------------------- Monte Carlo

def sample_qk(n_samples, d_k, *, mean_q=0.0, mean_k=0.0, std_q=1.0, std_k=1.0, corr=0.0, seed=None):
    """Draw ``n_samples`` independent (query, key) pairs from the module's random model.

    k is built from the same standard normal numbers as q plus independent
    ones, ``corr z_q + √(1 - corr²) z_new``, which gives it correlation
    ``corr`` with q coordinate by coordinate.

    Parameters
    ----------
    n_samples, d_k : int, at least 1
    mean_q, mean_k, std_q, std_k, corr : float
        See ``dot_product_moments``.
    seed : int, numpy.random.Generator or None
        A generator, or a seed for a new one.

    Returns
    -------
    q, k : ndarray, (N, d_k) each

    Examples
    --------
    >>> q, k = sample_qk(5, 3, seed=0)
    >>> q.shape, k.shape
    ((5, 3), (5, 3))
    """
    n = require_int_at_least(n_samples, "n_samples", 1)
    d = require_int_at_least(d_k, "d_k", 1)
    _check_distribution(mean_q, mean_k, std_q, std_k, corr)
    rng = np.random.default_rng(seed)
    z_q = rng.standard_normal((n, d))  # (N, d_k)
    z_k = corr * z_q + math.sqrt(1.0 - corr**2) * rng.standard_normal((n, d))  # (N, d_k), corr with z_q
    return mean_q + std_q * z_q, mean_k + std_k * z_k


class DotProductStats(NamedTuple):
    """Measured statistics of s = q·k, one entry per width (arrays of shape (len(d_ks),))."""

    d_k: np.ndarray
    mean: np.ndarray  # sample mean of s
    variance: np.ndarray  # unbiased sample variance of s
    scaled_variance: np.ndarray  # unbiased sample variance of s / √d_k
    kurtosis: np.ndarray  # sample kurtosis of s (fourth central moment / variance²)
    n_samples: int


def dot_product_variance(d_ks, n_samples, *, seed=0, **distribution):
    """Monte Carlo: the variance of q·k, with and without the 1/√d_k, for several widths.

    For each width, ``n_samples`` fresh pairs are drawn with ``sample_qk``
    (independently across widths), so the estimates for different widths are
    independent of each other.

    Parameters
    ----------
    d_ks : sequence of int, (W,)
        The widths d_k to try.
    n_samples : int, at least 2
        N, the number of (q, k) pairs per width.
    seed : int
        Seed of the one generator used for all widths.
    **distribution
        ``mean_q``, ``mean_k``, ``std_q``, ``std_k``, ``corr`` of ``sample_qk``.

    Returns
    -------
    DotProductStats
        Fields ``d_k``, ``mean``, ``variance``, ``scaled_variance``, ``kurtosis``,
        each of shape (W,), and ``n_samples``.

    Examples
    --------
    >>> stats = dot_product_variance([4, 64], 20000)
    >>> stats.variance.round(), stats.scaled_variance.round(2)     # about d_k, and about 1
    (array([ 4., 64.]), array([1.  , 0.99]))
    """
    widths = _widths(d_ks)
    n = require_int_at_least(n_samples, "n_samples", 2)
    unknown = set(distribution) - {"mean_q", "mean_k", "std_q", "std_k", "corr"}
    if unknown:
        raise ValueError(f"unknown distribution parameters {sorted(unknown)}")
    rng = np.random.default_rng(seed)
    fields = {name: np.empty(len(widths)) for name in ("mean", "variance", "scaled_variance", "kurtosis")}
    for i, d in enumerate(widths):
        s = np.empty(n)  # (N,) the dot products q·k
        rows = max(1, _CHUNK // int(d))
        for start in range(0, n, rows):
            q, k = sample_qk(min(rows, n - start), int(d), seed=rng, **distribution)  # (rows, d_k) each
            s[start:start + len(q)] = np.einsum("na,na->n", q, k)  # (rows, d_k) · (rows, d_k) -> (rows,)
        scaled = s / math.sqrt(d)  # the scores the Transformer feeds to the softmax
        centred = s - s.mean()
        fields["mean"][i] = s.mean()
        fields["variance"][i] = s.var(ddof=1)
        fields["scaled_variance"][i] = scaled.var(ddof=1)
        fields["kurtosis"][i] = np.mean(centred**4) / np.mean(centred**2) ** 2
    return DotProductStats(widths, n_samples=n, **fields)


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


def softmax_jacobian(x):
    """Jacobian of the softmax over the last axis: J = diag(p) - p pᵀ, with p = softmax(x).

    J[..., i, j] = ∂p_i / ∂x_j = p_i (δ_ij - p_j). Row i sums to
    p_i (1 - Σ_j p_j) = 0, because adding the same number to every score does
    not change the softmax. Its absolute row sums are 2 p_i (1 - p_i), and J is
    symmetric, so its spectral norm is at most 2 max_i p_i (1 - p_i), which is
    at most 2 (1 - max_i p_i): the gradient through a softmax vanishes as the
    softmax becomes one-hot.

    Parameters
    ----------
    x : array_like, (..., m)
        Scores; the softmax runs over the last axis.

    Returns
    -------
    ndarray, (..., m, m)
        Symmetric in its last two axes.

    Examples
    --------
    >>> softmax_jacobian([0.0, 0.0])
    array([[ 0.25, -0.25],
           [-0.25,  0.25]])
    """
    x = as_float_array(x, "x")
    require_ndim(x, "x", 1, "(..., m)")
    if x.shape[-1] < 1:
        raise ValueError(f"x of shape {x.shape} has m = 0 scores on its last axis; the softmax needs at least one")
    p = softmax(x, axis=-1)  # (..., m)
    p_col = p[..., :, None]  # (..., m) -> (..., m, 1)
    p_row = p[..., None, :]  # (..., m) -> (..., 1, m)
    off_diagonal = p_col * p_row * (1 - np.eye(x.shape[-1], dtype=p.dtype))  # p_i p_j for i != j, (..., m, m)
    # The diagonal p_i - p_i² equals p_i Σ_{j≠i} p_j. Written as a sum of small positive numbers it stays
    # accurate when p_i is close to 1 (saturation), where p_i - p_i² would cancel to rounding noise.
    diagonal = off_diagonal.sum(axis=-1)  # (..., m)
    return diagonal[..., :, None] * np.eye(x.shape[-1], dtype=p.dtype) - off_diagonal  # diag(p) - p pᵀ


# ----------------------------------------------------------------------------- the gradient that reaches a query

def sample_attention_rows(n_rows, m, d_k, *, seed=None):
    """Independent rows of one attention head, and a random gradient arriving at each row's output.

    Row i has one query q_i and its own m keys and m values, all of width d_k
    (values as wide as keys, as in a head), with independent standard normal
    coordinates (assumptions (A1)-(A3) of chapter 2). The gradient arriving at
    the output, dO, has independent normal coordinates of variance 1/d_k, so
    that every entry of dA = dO Vᵀ has variance 1 whatever the width: what
    reaches the softmax is the same at every d_k, and only the attention step
    itself changes.

    Parameters
    ----------
    n_rows, m, d_k : int, at least 1
        r rows, m keys per row, width d_k.
    seed : int, numpy.random.Generator or None

    Returns
    -------
    q : ndarray, (r, d_k)
    k : ndarray, (r, m, d_k)
    v : ndarray, (r, m, d_k)
    d_out : ndarray, (r, d_k)

    Examples
    --------
    >>> q, k, v, d_out = sample_attention_rows(5, 3, 4, seed=0)
    >>> q.shape, k.shape, v.shape, d_out.shape
    ((5, 4), (5, 3, 4), (5, 3, 4), (5, 4))
    """
    r = require_int_at_least(n_rows, "n_rows", 1)
    m = require_int_at_least(m, "m", 1)
    d = require_int_at_least(d_k, "d_k", 1)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((r, d))  # (r, d_k)
    k = rng.standard_normal((r, m, d))  # (r, m, d_k)
    v = rng.standard_normal((r, m, d))  # (r, m, d_v = d_k)
    d_out = rng.standard_normal((r, d)) / math.sqrt(d)  # (r, d_v): Var[dO_f] = 1/d_k, so Var[dA_j] = 1
    return q, k, v, d_out


class QueryGradient(NamedTuple):
    """The size |dq_i| of the gradient reaching each query, one entry per width.

    ``norms`` has shape (W, r), the other statistics shape (W,). The root mean
    square is what the total gradient of W_Q is built from (dW_Q = X_qᵀ dQ
    sums x_iᵀ dq_i over the rows); ``top_share`` is the share of Σ_i |dq_i|²
    that the largest tenth of the rows carry (0.1 if every row got the same).
    """

    d_k: np.ndarray
    norms: np.ndarray  # (W, r): |dq_i| for every row
    median: np.ndarray  # (W,): the typical query
    rms: np.ndarray  # (W,): √(mean |dq_i|²), the total
    top_share: np.ndarray  # (W,): share of Σ|dq_i|² in the largest 10% of the rows


_QUERY_GRADIENT_NORMS = {}  # (widths, m, n_rows, seed) -> {divisor: norms (W, r)}: see query_gradient


def query_gradient(d_ks, m, n_rows, *, divisor="sqrt", seed=0):
    """How large the gradient that reaches a query is, row by row, for several widths.

    For rows drawn by ``sample_attention_rows``, the attention of chapter 1 with
    the scores divided by ``divisor`` is run backward (``grads.softmax_backward``):
    dA = dO Vᵀ, dS̃ = A ⊙ (dA - rowsum(dA ⊙ A)), and dq_i = Σ_j ds̃_ij k_j / c
    with c = √d_k, 1 or d_k. The divisor enters twice: it sets how peaked A is,
    and it divides the gradient on its way from the scores to the query.

    Parameters
    ----------
    d_ks : sequence of int, (W,)
    m : int, at least 1
        Keys per row.
    n_rows : int, at least 1
        Independent rows (queries) per width.
    divisor : {"sqrt", "none", "d_k"}
        See ``attention_logits``.
    seed : int, numpy.random.Generator or None
        Seed of the one generator used for all widths; rows are drawn in chunks
        of about a million numbers.

    Returns
    -------
    QueryGradient
        Fields ``d_k`` (W,), ``norms`` (W, r), ``median``, ``rms``, ``top_share`` (W,).

    Examples
    --------
    >>> scaled = query_gradient([16, 256], 32, 400, divisor="sqrt")
    >>> unscaled = query_gradient([16, 256], 32, 400, divisor="none")
    >>> bool(np.all(np.abs(scaled.median / scaled.median[0] - 1) < 0.15))   # the same at every width
    True
    >>> bool(unscaled.median[1] < unscaled.median[0] and unscaled.rms[1] > unscaled.rms[0])
    True
    """
    from .grads import softmax_backward  # the backward of chapter 5, not a second copy of it

    widths = _widths(d_ks)
    _check_divisor(divisor)
    m = require_int_at_least(m, "m", 1)
    r = require_int_at_least(n_rows, "n_rows", 1)
    # Drawing the rows costs far more than the backward pass. With an integer seed the draws are the same
    # whatever the divisor, so the norms of every divisor are computed from one sample and kept for the next
    # call (chapter 2 asks for the same draws with each divisor in turn); any other seed: this divisor only.
    key = (tuple(int(d) for d in widths), m, r, int(seed)) if isinstance(seed, (int, np.integer)) else None
    if key is None or key not in _QUERY_GRADIENT_NORMS:
        names = tuple(DIVISORS) if key is not None else (divisor,)
        rng = np.random.default_rng(seed)
        computed = {name: np.empty((len(widths), r)) for name in names}
        for w, d in enumerate(widths):
            rows = max(1, _CHUNK // (m * int(d)))
            for start in range(0, r, rows):
                stop = min(r, start + rows)
                q, k, v, d_out = sample_attention_rows(stop - start, m, int(d), seed=rng)
                scores = (k @ q[:, :, None])[..., 0]  # (r, m, d_k) @ (r, d_k, 1) -> (r, m)
                d_a = (v @ d_out[:, :, None])[..., 0]  # dA = dO Vᵀ: (r, m, d_v) @ (r, d_v, 1) -> (r, m)
                for name in names:
                    c = DIVISORS[name](int(d))
                    a = softmax(scores / c, axis=-1)  # (r, m)
                    d_s = softmax_backward(a, d_a)  # dS̃, (r, m)
                    d_q = (d_s[:, None, :] @ k)[:, 0] / c  # dq = dS̃ K / c: (r, 1, m) @ (r, m, d_k) -> (r, d_k)
                    computed[name][w, start:stop] = np.linalg.norm(d_q, axis=-1)
        if key is None:
            norms = computed[divisor]
        else:
            if len(_QUERY_GRADIENT_NORMS) >= 16:
                _QUERY_GRADIENT_NORMS.clear()
            _QUERY_GRADIENT_NORMS[key] = computed
    if key is not None:
        norms = _QUERY_GRADIENT_NORMS[key][divisor].copy()  # a copy: the caller may change it
    squares = np.sort(norms**2, axis=-1)  # (W, r), ascending
    top = max(1, int(round(0.1 * r)))
    return QueryGradient(
        d_k=widths,
        norms=norms,
        median=np.median(norms, axis=-1),
        rms=np.sqrt(squares.mean(axis=-1)),
        top_share=squares[:, -top:].sum(axis=-1) / squares.sum(axis=-1),
    )
