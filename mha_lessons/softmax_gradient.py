"""The gradient through a softmax (chapter 2): its Jacobian, and how much gradient reaches a query at each width.

Axis names used in this module:

    d_k    width of a query or key vector (and of a value: values as wide as keys, as in a head)
    r      independent rows of attention scores (one query each)
    m      keys in one row

The rows follow the random model of ``dot_products.py`` with its defaults: independent standard
normal coordinates. The backward pass is chapter 5's (``grads.softmax_backward``), not a second copy.
"""

import math
from typing import NamedTuple

import numpy as np

from ._checks import as_float_array, require_int_at_least, require_ndim
from .attention import softmax
from .dot_products import DIVISORS, _CHUNK, _check_divisor, _widths
from .grads import softmax_backward


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
