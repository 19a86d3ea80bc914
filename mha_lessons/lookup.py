"""A task that two heads can do and one head cannot: fetch two positions at once.

Every token is ``x_j = [c_j, p_j, 0]``: a random *content* vector ``c_j``
(``d_content`` numbers), a one-hot *position* ``p_j`` (``n`` numbers), and
zero padding up to ``d_model = 2 (d_content + n)``. The target output, at every
query position, is the content of two fixed positions side by side:
``[c_{t0}, c_{t1}, 0]``.

With two heads of width ``d_k = d_content + n`` the layer can do it exactly:
head 0 attends to position t0 and copies its content into the first slot,
head 1 does the same for t1 into the second. With one head there is one
softmax per query, so the layer sees a single blend ``p c_{t0} + (1-p) c_{t1}``
and no linear read-out can recover both parts: the chapter shows that at best
half of the target's variance is lost, whatever the blend.

``two_position_lookup`` builds those parameters by hand (no training), so the
chapter can show the mechanism before a later chapter learns it.
"""

import numpy as np

from .multihead import MHAParams


def lookup_tokens(batch, n, d_content, *, seed=0):
    """Random token vectors ``[c_j, p_j, 0]``: (batch, n, d_model) with d_model = 2 (d_content + n).

    Examples
    --------
    >>> x = lookup_tokens(2, 4, 3)
    >>> x.shape
    (2, 4, 14)
    >>> x[0, 2, 3:7]            # the one-hot position of token 2
    array([0., 0., 1., 0.])
    """
    _check_sizes(n, d_content)
    d_model = 2 * (d_content + n)
    x = np.zeros((batch, n, d_model))
    x[..., :d_content] = np.random.default_rng(seed).normal(size=(batch, n, d_content))
    x[..., d_content:d_content + n] = np.eye(n)  # (n, n) broadcast over the batch
    return x


def lookup_target(x, n, d_content, targets):
    """What the layer should output at every query: ``[c_{t0}, c_{t1}, 0]``, shape (batch, n, d_model).

    Examples
    --------
    >>> x = lookup_tokens(1, 4, 2)
    >>> y = lookup_target(x, 4, 2, (0, 3))
    >>> np.array_equal(y[0, 1, :2], x[0, 0, :2]), np.array_equal(y[0, 1, 2:4], x[0, 3, :2])
    (True, True)
    """
    t0, t1 = _check_targets(n, targets)
    target = np.zeros_like(x)
    target[..., :d_content] = x[..., t0:t0 + 1, :d_content]  # (B, 1, d_content) broadcast over queries
    target[..., d_content:2 * d_content] = x[..., t1:t1 + 1, :d_content]
    return target


def two_position_lookup(num_heads, n, d_content, targets, gap=20.0):
    """Hand-built parameters for the two-position lookup, with one or two heads.

    Parameters
    ----------
    num_heads : 1 or 2
        With 2 heads, head i attends to position ``targets[i]`` only. With 1
        head, the single softmax splits its weight equally between the two
        targets, and the output projection copies the blend into both slots
        (the best linear read-out of an equal blend).
    n, d_content : int
        Sequence length and width of the content part of a token.
    targets : pair of distinct positions in ``range(n)``
    gap : float
        How far the target's scaled score rises above the others. Every other
        key gets weight at most ``exp(-gap)`` times the target's.

    Returns
    -------
    MHAParams with d_model = 2 (d_content + n).

    Examples
    --------
    >>> p = two_position_lookup(2, n=5, d_content=3, targets=(1, 3))
    >>> p.d_model, p.num_heads, p.d_k
    (16, 2, 8)
    """
    _check_sizes(n, d_content)
    t0, t1 = _check_targets(n, targets)
    if num_heads not in (1, 2):
        raise ValueError(f"the lookup is built for 1 or 2 heads, got num_heads = {num_heads}")
    d_slot = d_content + n  # width of one head when h = 2
    d_model = 2 * d_slot
    d_k = d_model // num_heads
    content = slice(0, d_content)  # where c_j sits in a token
    position = slice(d_content, d_content + n)  # where p_j sits in a token
    score = gap * np.sqrt(d_k)  # after dividing by √d_k the target scores `gap`, the rest 0

    w_q = np.zeros((d_model, d_model))
    w_k, w_v, w_o = np.zeros_like(w_q), np.zeros_like(w_q), np.zeros_like(w_q)
    b_q = np.zeros(d_model)
    eye_n, eye_c = np.eye(n), np.eye(d_content)
    if num_heads == 2:
        for head, target in enumerate((t0, t1)):
            start = head * d_slot  # the head's columns: [start, start + d_slot)
            b_q[start + d_content + target] = score  # the query asks for one position...
            w_k[position, start + d_content:start + d_slot] = eye_n  # ...and each key says where it is
            w_v[content, start:start + d_content] = eye_c  # the value is the content
            w_o[start:start + d_content, head * d_content:(head + 1) * d_content] = eye_c  # head -> its slot
    else:
        b_q[d_content + t0] = b_q[d_content + t1] = score  # equal scores: half the weight on each target
        w_k[position, d_content:d_slot] = eye_n
        w_v[content, :d_content] = eye_c
        w_o[:d_content, :d_content] = eye_c  # the blend goes to both slots
        w_o[:d_content, d_content:2 * d_content] = eye_c
    zeros = np.zeros(d_model)
    return MHAParams(num_heads, w_q, w_k, w_v, w_o, b_q, zeros, zeros.copy(), zeros.copy())


def relative_error(y, target):
    """Squared error as a fraction of the target's squared size: ``‖y − target‖² / ‖target‖²``.

    Examples
    --------
    >>> relative_error(np.array([1.0, 1.0]), np.array([2.0, 0.0]))
    0.5
    """
    y, target = np.asarray(y), np.asarray(target)
    if y.shape != target.shape:
        raise ValueError(f"y of shape {y.shape} and target of shape {target.shape} differ")
    return float(np.sum((y - target) ** 2) / np.sum(target ** 2))


def _check_sizes(n, d_content):
    if n < 2 or d_content < 1:
        raise ValueError(f"the lookup needs n >= 2 positions and d_content >= 1, got n = {n}, d_content = {d_content}")


def _check_targets(n, targets):
    targets = tuple(targets)
    if len(targets) != 2 or not all(0 <= t < n for t in targets) or targets[0] == targets[1]:
        raise ValueError(f"targets must be two different positions in range(n) = range({n}), got {targets}")
    return targets
