"""Position vectors: how a Transformer tells attention where each token stands.

Attention itself ignores order (chapter 1 shows it): permuting the tokens only
permutes the outputs. The smallest fix adds a vector that depends on the
position to every token vector before the first layer.

Axis names (as in ``attention.py``):

    n         number of positions (tokens)
    d_model   width of a token vector, and of its position vector
    t         a position, 0 .. n - 1
    i         a frequency, 0 .. d_model / 2 - 1; it fills features 2i and 2i + 1
"""

import math

import numpy as np

from ._checks import as_float_array, require_positive_int


def _check_sizes(n, d_model, base):
    require_positive_int(n, "n")
    require_positive_int(d_model, "d_model")
    if d_model % 2:
        raise ValueError(
            f"d_model = {d_model} is odd; sinusoidal positions fill features in (sin, cos) pairs, "
            f"so d_model must be even"
        )
    if isinstance(base, bool) or not isinstance(base, (int, float, np.integer, np.floating)) \
            or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number above 1, got {base!r}")


def frequencies(d_model, *, base=10000.0):
    """The d_model / 2 angular frequencies ω_i = base^(-2i / d_model), from 1 down towards 1 / base.

    Examples
    --------
    >>> frequencies(4, base=100.0)        # ω_0 = 1, ω_1 = 100^(-2/4)
    array([1. , 0.1])
    """
    _check_sizes(1, d_model, base)
    return float(base) ** (-np.arange(0, d_model, 2) / d_model)  # (d_model / 2,)


def sinusoidal_positions(n, d_model, *, base=10000.0):
    """The sinusoidal position vectors of Vaswani et al. (2017), one row per position.

    Row t holds, for each frequency ω_i = base^(-2i / d_model),

        P[t, 2i] = sin(t ω_i),    P[t, 2i + 1] = cos(t ω_i),

    so every entry lies in [-1, 1], row 0 is (0, 1, 0, 1, ...), and the first
    pair turns fastest (one radian per position) while the last turns slowest.

    Parameters
    ----------
    n : int
        Number of positions, 0 .. n - 1.
    d_model : int
        Width of a token vector; must be even (one sin and one cos per frequency).
    base : float, keyword-only
        Sets the slowest frequency, 1 / base (10000 in the paper).

    Returns
    -------
    ndarray, (n, d_model), float64

    Raises ValueError for sizes that are not positive integers, an odd
    ``d_model``, or a ``base`` that is not a finite number above 1.

    Examples
    --------
    >>> P = sinusoidal_positions(6, 4)
    >>> P.shape
    (6, 4)
    >>> P[0]                               # position 0: sin 0 = 0, cos 0 = 1
    array([0., 1., 0., 1.])
    >>> P[1, :2].round(4)                  # position 1, fastest pair: sin 1, cos 1
    array([0.8415, 0.5403])
    """
    _check_sizes(n, d_model, base)
    angle = np.arange(n)[:, None] * frequencies(d_model, base=base)  # (n, 1) * (d_model/2,) -> (n, d_model/2)
    positions = np.empty((n, d_model))
    positions[:, 0::2] = np.sin(angle)  # features 0, 2, 4, ...
    positions[:, 1::2] = np.cos(angle)  # features 1, 3, 5, ...
    return positions


def offset_rotation(k, d_model, *, base=10000.0):
    """The (d_model, d_model) matrix R_k with P[t + k] = P[t] @ R_k for every position t.

    Moving k positions on turns each (sin, cos) pair by the angle k ω_i:
    sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b.
    R_k is block-diagonal with one 2 × 2 rotation per frequency, and it does not
    depend on t: an offset is the same linear map wherever it starts.

    Parameters
    ----------
    k : int
        The offset; any integer (negative turns back).
    d_model : int
        Even width, as for ``sinusoidal_positions``.

    Examples
    --------
    >>> P = sinusoidal_positions(10, 6)
    >>> bool(np.allclose(P[:-3] @ offset_rotation(3, 6), P[3:]))   # every t at once
    True
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"the offset k must be an integer, got {k!r}")
    angle = k * frequencies(d_model, base=base)  # (d_model/2,)
    cos, sin = np.cos(angle), np.sin(angle)
    rotation = np.zeros((d_model, d_model))
    # As a row vector times R: (s, c) @ [[cos, -sin], [sin, cos]] = (s cos + c sin, c cos - s sin).
    rotation[0::2, 0::2] = np.diag(cos)   # sin feature -> sin feature
    rotation[1::2, 0::2] = np.diag(sin)   # cos feature -> sin feature
    rotation[0::2, 1::2] = np.diag(-sin)  # sin feature -> cos feature
    rotation[1::2, 1::2] = np.diag(cos)   # cos feature -> cos feature
    return rotation


def rotary(x, positions, *, base=10000.0):
    """Rotary position embedding (RoPE, Su et al.): turn each feature pair of a row by its position's angle.

    Row at position p, features (2i, 2i + 1), frequency ω_i = base^(-2i / d) (``frequencies``):

        (x_2i, x_2i+1) -> (x_2i cos(p ω_i) - x_2i+1 sin(p ω_i),  x_2i sin(p ω_i) + x_2i+1 cos(p ω_i)),

    applied to queries and keys (not to values) after their projection. A rotation keeps lengths,
    and the dot product of a query rotated to p and a key rotated to p' depends on p - p' only:
    this is why a cache can hold keys already rotated, and a new query is rotated to its own position.

    Parameters
    ----------
    x : array_like, (..., n, d)
        Queries or keys of one head (or of all heads, with a head axis before n); d even.
    positions : array_like of int, broadcastable to (..., n)
        The position of each row.
    base : float, keyword-only
        As in ``sinusoidal_positions`` (10000 in the RoFormer paper).

    Returns
    -------
    ndarray, the shape of ``x``

    Examples
    --------
    >>> rotary(np.array([[1.0, 0.0]]), [1]).round(4)          # one pair turned by 1 radian
    array([[0.5403, 0.8415]])
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.normal(size=(1, 4)), rng.normal(size=(1, 4))
    >>> a = rotary(q, [7]) @ rotary(k, [5]).T                  # positions 7 and 5
    >>> b = rotary(q, [2]) @ rotary(k, [0]).T                  # 2 and 0: the same gap
    >>> bool(np.allclose(a, b))
    True
    """
    x = as_float_array(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x must have a row axis and a feature axis (..., n, d), got shape {x.shape}")
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"x of shape {x.shape} has an odd width d = {d}; rotary embedding turns feature pairs")
    positions = np.asarray(positions)
    if not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(f"positions must be integers, got dtype {positions.dtype}")
    try:
        np.broadcast_shapes(positions.shape, x.shape[:-1])
    except ValueError:
        raise ValueError(f"positions of shape {positions.shape} do not broadcast against the rows of x, "
                         f"shape {x.shape[:-1]}") from None
    angle = positions[..., None] * frequencies(d, base=base)  # (..., n, 1) * (d/2,) -> (..., n, d/2)
    cos, sin = np.cos(angle).astype(x.dtype), np.sin(angle).astype(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., n, d/2) each: the two features of every pair
    out = np.empty(np.broadcast_shapes(x.shape, angle.shape[:-1] + (d,)), dtype=x.dtype)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
