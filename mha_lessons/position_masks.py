"""Masks from positions (chapters 6 and 9): causal by position, and the sliding window.

A query at position p may see a key at position p' when p' <= p, and within a sliding window of
n_win positions only when p - p' < n_win. Built from positions rather than from indices, the same
mask serves queries placed anywhere among the keys (new tokens at the end of a cache) and a rolling
cache, whose slots hold positions in the order they were overwritten.
"""

import numpy as np

from ._checks import is_int


def position_mask(query_positions, key_positions, *, window=None):
    """Boolean causal mask from positions: True where key position ≤ query position (and, with a window, closer).

    Query at position p may see a key at position p' when ``p' <= p`` and, if ``window`` is given,
    ``p - p' < window``: itself and the ``window - 1`` positions before it (a sliding window, or band).
    The positions need not be sorted, which is what a rolling cache needs: its slots hold
    positions in the order they were overwritten.

    Parameters
    ----------
    query_positions : array_like of int, (..., n)
    key_positions : array_like of int, (..., m)
    window : int, optional
        n_win, the number of positions each query sees (itself included); None: no limit.

    Returns
    -------
    ndarray of bool, (..., n, m)

    Examples
    --------
    >>> position_mask([4, 5], [3, 4, 5]).astype(int)            # two new tokens after three cached
    array([[1, 1, 0],
           [1, 1, 1]])
    >>> position_mask([4, 5], [3, 4, 5], window=2).astype(int)  # each sees itself and one before
    array([[1, 1, 0],
           [0, 1, 1]])
    """
    qp, kp = np.asarray(query_positions), np.asarray(key_positions)
    for name, arr in (("query_positions", qp), ("key_positions", kp)):
        if arr.ndim < 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must be an array of integer positions with at least one axis, "
                             f"got dtype {arr.dtype} and shape {arr.shape}")
    if window is not None and (not is_int(window) or window < 1):
        raise ValueError(f"window must be a positive integer (the positions a query sees), got {window!r}")
    gap = qp[..., :, None] - kp[..., None, :]  # (..., n, 1) - (..., 1, m) -> (..., n, m): p - p'
    allowed = gap >= 0
    if window is not None:
        allowed &= gap < window
    return allowed


def sliding_window_mask(n, m=None, *, window, align="top-left"):
    """Boolean ``(n, m)`` causal sliding-window mask: query i sees itself and the ``window - 1`` keys before it.

    The band of Mistral 7B's sliding-window attention (Jiang et al., 2023). ``align`` places the
    queries among the keys as in ``causal_mask``: "top-left" puts query i at position i,
    "bottom-right" at position m - n + i (new tokens at the end of a cache). With
    ``window >= m`` it is ``causal_mask(n, m, align=align)``.

    Examples
    --------
    >>> sliding_window_mask(4, window=2).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    """
    m = n if m is None else m
    for name, value in (("n", n), ("m", m)):
        if not is_int(value) or value < 1:
            raise ValueError(f"sliding_window_mask needs positive integer sizes, got {name} = {value!r}")
    if align not in ("top-left", "bottom-right"):
        raise ValueError(f'sliding_window_mask\'s align must be "top-left" or "bottom-right", got {align!r}')
    offset = 0 if align == "top-left" else m - n
    return position_mask(np.arange(n) + offset, np.arange(m), window=window)  # (n, m)
