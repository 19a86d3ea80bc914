"""Statistics that several chapters use: the standard error of a variance, log-log slopes, entropy.

Chapter 2 uses all three (its Monte Carlo estimates of Var[q·k] and the softmax's
entropy); chapters 4 and 7 fit log-log slopes to measured times and memory.
"""

import math

import numpy as np

from ._checks import as_float_array, require_int_at_least, require_ndim


def variance_standard_error(variance, kurtosis, n_samples):
    """Standard error of the unbiased sample variance of ``n_samples`` independent draws.

    For draws with variance σ² and kurtosis κ = E[(x - μ)⁴] / σ⁴ the unbiased
    sample variance S² has Var[S²] = σ⁴ (κ - (N - 3) / (N - 1)) / N, so the
    standard error is its square root. For normal draws (κ = 3) this is about
    σ² √(2 / N).

    Parameters
    ----------
    variance : float or ndarray
        The true variance σ² (or an estimate of it).
    kurtosis : float or ndarray, at least 1
    n_samples : int, at least 2

    Returns
    -------
    float or ndarray, broadcast from ``variance`` and ``kurtosis``

    Examples
    --------
    >>> round(variance_standard_error(1.0, 3.0, 1000), 4)       # ≈ √(2 / 1000)
    0.0447
    """
    n = require_int_at_least(n_samples, "n_samples", 2)
    variance, kurtosis = np.asarray(variance, dtype=float), np.asarray(kurtosis, dtype=float)
    if np.any(variance < 0) or np.any(kurtosis < 1):
        raise ValueError(
            f"need variance >= 0 and kurtosis >= 1 (every distribution has kurtosis at least 1), "
            f"got variance {variance.tolist()} and kurtosis {kurtosis.tolist()}"
        )
    se = variance * np.sqrt((kurtosis - (n - 3) / (n - 1)) / n)
    return float(se) if se.ndim == 0 else se


def fit_loglog_slope(x, y, rel_se=None):
    """Least-squares line through (log x, log y), with the standard error of its slope.

    If y ∝ x^p, the points (log x, log y) lie on a line of slope p. Each log y
    has standard error ≈ ``rel_se`` (the relative standard error of y, by the
    delta method: d log y = dy / y), the points are independent, and the
    ordinary least-squares slope b = Σ (u_i - ū) log y_i / Σ (u_i - ū)² with
    u = log x then has Var[b] = Σ (u_i - ū)² rel_se_i² / (Σ (u_i - ū)²)².

    Parameters
    ----------
    x, y : array_like, (W,), positive
    rel_se : float or array_like, (W,), optional
        Relative standard error of each y, when it is known (a Monte Carlo
        estimate). Without it (timings, whose noise is unknown) the slope's
        standard error is estimated from the scatter of the points about the
        line: √(s² / Σ (u_i - ū)²), s² the residual variance on W - 2 degrees
        of freedom (NaN for two points).

    Returns
    -------
    slope, intercept, slope_se : float
        The line is log y = intercept + slope log x (natural logarithms).

    Examples
    --------
    >>> slope, intercept, se = fit_loglog_slope([1, 10, 100], [2, 20, 200], 0.01)
    >>> round(slope, 6), round(math.exp(intercept), 6), round(se, 5)
    (1.0, 2.0, 0.00307)
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
        raise ValueError(f"x and y must be 1-D of the same length, at least 2, got shapes {x.shape} and {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError(f"a log-log fit needs positive x and y, got x {x.tolist()} and y {y.tolist()}")
    if np.all(x == x[0]):
        raise ValueError(f"all x are equal ({x[0]}); a slope needs at least two different x")
    u, v = np.log(x), np.log(y)
    du = u - u.mean()
    sxx = np.sum(du**2)
    slope = np.sum(du * v) / sxx
    intercept = v.mean() - slope * u.mean()
    if rel_se is not None:
        rel_se = np.broadcast_to(np.asarray(rel_se, dtype=float), x.shape)
        slope_se = math.sqrt(np.sum(du**2 * rel_se**2)) / sxx
    else:
        dof = len(x) - 2
        residuals = v - intercept - slope * u
        slope_se = math.sqrt(np.sum(residuals**2) / dof / sxx) if dof > 0 else float("nan")
    return float(slope), float(intercept), float(slope_se)


def entropy(p, axis=-1):
    """Shannon entropy -Σ p log p (in nats) of probability vectors along ``axis``, with 0 log 0 = 0.

    It is log m for the uniform distribution over m keys and 0 for a one-hot one.

    Parameters
    ----------
    p : array_like, any shape with at least one axis
        Non-negative, summing to 1 along ``axis``.

    Returns
    -------
    ndarray, the shape of ``p`` without ``axis``

    Examples
    --------
    >>> float(entropy([0.25, 0.25, 0.25, 0.25])) == math.log(4)
    True
    >>> float(entropy([1.0, 0.0, 0.0]))
    0.0
    """
    p = as_float_array(p, "p")
    require_ndim(p, "p", 1, "(..., m)")
    if np.any(p < 0):
        raise ValueError(f"probabilities cannot be negative, got a minimum of {p.min()}")
    logs = np.log(p, out=np.zeros_like(p), where=p > 0)  # 0 log 0 = 0
    return 0.0 - np.sum(p * logs, axis=axis)  # 0.0 - x, not -x, so that a one-hot row gives 0.0, not -0.0
