"""The statistics of a dot product q·k of random vectors (chapter 2): closed forms and Monte Carlo.

Axis names used in this module:

    N      independent draws of a query and a key (Monte Carlo samples)
    d_k    width of a query or key vector

The random model behind every function: the d_k coordinate pairs (q_a, k_a) of a
query and a key are independent and identically distributed; within a pair
q_a ~ N(mean_q, std_q²) and k_a ~ N(mean_k, std_k²), jointly normal with
correlation ``corr``. The defaults (means 0, standard deviations 1, correlation
0) are the assumptions under which Var[q·k] = d_k. Chapter 2 derives

    E[q·k]   = d_k (mean_q mean_k + corr std_q std_k)
    Var[q·k] = d_k (std_q² std_k² (1 + corr²) + std_q² mean_k² + std_k² mean_q²
                    + 2 corr std_q std_k mean_q mean_k)

(``dot_product_moments``) and checks it against ``dot_product_variance``.
``DIVISORS`` names what the scores are divided by before the softmax, for the
modules that follow the scores into the softmax (``scaling.py``, ``softmax_gradient.py``).
"""

import math
from typing import NamedTuple

import numpy as np

from ._checks import require_int_at_least


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
