"""The independent check of every gradient in the package: central finite differences (chapter 5)."""

import numpy as np

from ._checks import check_same_shape


def gradcheck(f, x, d_out=None, eps=1e-6):
    """Numerical gradient of L(x) = sum(f(x) * d_out) by central finite differences (eq-ch5-central).

    Each entry of ``x`` is moved by ±eps in turn: ∂L/∂x_i ≈ (L(x + eps e_i) − L(x − eps e_i)) / (2 eps).
    The error is about eps² |L'''| / 6 (truncation) plus about ε_machine |L| / eps
    (round-off). For eps = 1e-6 in float64 and a smooth f the round-off term
    dominates, near 1e-10 relative, while truncation is near 1e-13.

    Parameters
    ----------
    f : callable, array -> array
        The function to differentiate; it must accept an array shaped like ``x``.
    x : array_like, any shape (converted to float64)
    d_out : array_like, shape of f(x), optional
        The weights of the loss; default all ones, L = sum(f(x)).
    eps : float
        The step.

    Returns
    -------
    ndarray, shape of x
        The numerical ∂L/∂x, to compare with an analytic gradient.

    Examples
    --------
    >>> gradcheck(lambda x: x ** 3, np.array([1.0, 2.0])).round(6)     # 3 x²
    array([ 3., 12.])
    """
    x = np.array(x, dtype=np.float64)  # a private copy, moved entry by entry
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    y = np.asarray(f(x))
    d_out = np.ones_like(y, dtype=np.float64) if d_out is None else check_same_shape(d_out, "d_out", y.shape, "f(x)")

    def loss():
        return float(np.sum(np.asarray(f(x)) * d_out))

    grad = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        saved = x[i]
        x[i] = saved + eps
        up = loss()
        x[i] = saved - eps
        down = loss()
        x[i] = saved
        grad[i] = (up - down) / (2 * eps)  # eq-ch5-central
    return grad
