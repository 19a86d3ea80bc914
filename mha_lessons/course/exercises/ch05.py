"""Checkers for chapter 5 (gradients by hand).

Axis names: ... leading batch axes, n queries, m keys (and values), d_v the width of a value.
For a loss L and an array X, dX is ∂L/∂X, of the shape of X. The right answers are the package's
backward formulas (``grads.py``), which the tests compare with torch autograd.
"""

import numpy as np

from ...attention import softmax
from ...grads import softmax_backward
from ._verdict import Verdict, call_learner, compare


def _pair(result, name):
    """``result`` as a pair (da, dv), or a Verdict saying why it is not one."""
    if result is None:
        return Verdict(False, f"{name} returned None: a function that forgot to `return` its result?")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return Verdict(False, f"{name} should return a pair (da, dv); it returned a {type(result).__name__}"
                              + (f" of length {len(result)}." if isinstance(result, (tuple, list)) else "."))
    return result


def check_weighted_sum_backward(weighted_sum_backward):
    """Check ``weighted_sum_backward(a, v, d_o) -> (da, dv)``, the backward of O = A V over any batch axes.

    It is called twice: on 2-D arrays with n = m = d_v = 3, where a forgotten or misplaced transpose
    still runs and gives a recognisable wrong answer, then on arrays with batch axes (2, 3), n = 4,
    m = 6, d_v = 2, where ``x.T`` (which reverses *all* axes) makes the products fail.

    >>> import numpy as np, mha_lessons as M
    >>> M.exercises.check_weighted_sum_backward(
    ...     lambda a, v, d_o: (d_o @ np.swapaxes(v, -1, -2), np.swapaxes(a, -1, -2) @ d_o))
    Right: dA = dO Vᵀ and dV = Aᵀ dO, with batch axes too.
    """
    rng = np.random.default_rng(12)
    name = "weighted_sum_backward"
    cases = [
        ((), 3, 3, 3),  # 2-D: square, so every misplaced transpose still runs
        ((2, 3), 4, 6, 2),  # 2 sequences of 3 heads
    ]
    for batch, n, m, d_v in cases:
        a = softmax(rng.normal(size=(*batch, n, m)))  # (..., n, m), rows sum to 1
        v, d_o = rng.normal(size=(*batch, m, d_v)), rng.normal(size=(*batch, n, d_v))
        shapes = f"a {a.shape}, v {v.shape}, d_o {d_o.shape}"
        result, failure = call_learner(weighted_sum_backward, a.copy(), v.copy(), d_o.copy(), name=name)
        if failure is not None:
            if "raised" not in failure.message:
                return failure
            hint = ""
            if batch:
                hint = (" It works without batch axes, so look for x.T: on an array with more than two axes it "
                        "reverses all of them. Swap only the last two: np.swapaxes(x, -1, -2).")
            return Verdict(False, f"{failure.message.rstrip('.')} (called with {shapes}).{hint}")
        pair = _pair(result, name)
        if isinstance(pair, Verdict):
            return pair
        da, dv = pair
        vt, at = np.swapaxes(v, -1, -2), np.swapaxes(a, -1, -2)  # (..., d_v, m), (..., m, n)
        expected_da, expected_dv = d_o @ vt, at @ d_o  # (..., n, m), (..., m, d_v)
        if not batch and compare(da, expected_dv) and compare(dv, expected_da):
            return Verdict(False, "da and dv are swapped: return (da, dv) in that order.")
        where = f" (for {shapes})"
        da_mistakes, dv_mistakes = [], []
        if not batch:  # square 2-D arrays: a misplaced transpose runs, and gives one of these
            da_mistakes = [
                (d_o @ v, "da = dO V: V is not transposed. dA = dO Vᵀ, (n, d_v) @ (d_v, m)."),
                (v @ d_o.T, "da is transposed: it has the shape of a, (n, m), with da[i, j] = Σ_c dO[i, c] V[j, c]."),
            ]
            dv_mistakes = [
                (a @ d_o, "dv = A dO: A is not transposed. dV = Aᵀ dO, (m, n) @ (n, d_v)."),
                (d_o.T @ a, "dv is transposed: it has the shape of v, (m, d_v), with "
                            "dv[j, c] = Σ_i A[i, j] dO[i, c]."),
            ]
        for what, answer, expected, mistakes in (("da", da, expected_da, da_mistakes),
                                                 ("dv", dv, expected_dv, dv_mistakes)):
            verdict = compare(answer, expected, mistakes, what=what + where)
            if not verdict:
                return verdict
    return Verdict(True, "dA = dO Vᵀ and dV = Aᵀ dO, with batch axes too.")


def check_temperature_gradient(temperature_gradient):
    """Check ``temperature_gradient(S, v, d_o, tau) -> dτ`` for O = softmax(S / τ) V.

    S (n, m) are the raw scores q kᵀ, v (m, d_v), d_o = ∂L/∂O (n, d_v), tau a positive number (the
    temperature, a divisor as on the notation page); dτ is one number, -Σ_ij ds̃_ij s_ij / τ² with ds̃
    the gradient of the scaled scores S / τ. Recognised mistakes: the softmax backward left out or
    summed over the wrong axis, the factor -s_ij / τ² replaced by s_ij / τ, by s_ij or by nothing, the
    minus sign lost, an array instead of one number.

    >>> import mha_lessons as M
    >>> from mha_lessons.grads import softmax_backward
    >>> M.exercises.check_temperature_gradient(
    ...     lambda S, v, d_o, tau: -(softmax_backward(M.softmax(S / tau), d_o @ v.T) * S).sum() / tau**2)
    Right: dτ = -Σ ds̃ ⊙ S / τ², through the softmax backward.
    """
    rng = np.random.default_rng(13)
    S, v, d_o = rng.normal(size=(3, 5)) * 2, rng.normal(size=(5, 2)), rng.normal(size=(3, 2))
    tau = 1.4
    answer, failure = call_learner(temperature_gradient, S.copy(), v.copy(), d_o.copy(), tau,
                                   name="temperature_gradient")
    if failure is not None:
        return failure
    a = softmax(S / tau)  # (n, m)
    da = d_o @ v.T  # (n, m), eq-ch5-da
    ds_scaled = softmax_backward(a, da)  # (n, m), the gradient of S / τ
    if answer is not None and np.shape(answer) == (1,):
        answer = np.asarray(answer)[0]  # a one-element array, as gradcheck gives, counts as one number
    if answer is not None and np.shape(answer) == S.shape:
        return Verdict(False, f"this has the shape of the scores, {S.shape}; dτ is one number: τ is used by every "
                              "score, so sum the contributions ds̃_ij ∂(s_ij / τ)/∂τ over all i and j.")
    right = -np.sum(ds_scaled * S) / tau**2
    mistakes = [
        (-np.sum(da * S) / tau**2, "the softmax backward is missing: dO Vᵀ is the gradient of the weights A; the "
                                   "gradient of the scaled scores S / τ is A ⊙ (dA - rowsum(dA ⊙ A))."),
        (-np.sum(softmax_backward(a, da, axis=0) * S) / tau**2,
         "the softmax backward sums over the wrong axis: the softmax ran along each row (over the keys), so "
         "the sum in A ⊙ (dA - Σ_j dA_ij A_ij) runs along each row too (axis=-1)."),
        (-right, "the sign is wrong: s_ij / τ falls as τ grows, ∂(s_ij / τ)/∂τ = -s_ij / τ²."),
        (np.sum(ds_scaled * S) / tau, "∂(s_ij / τ)/∂τ is -s_ij / τ², not s_ij / τ: differentiate 1/τ."),
        (np.sum(ds_scaled * S), "τ divides the scores, so ∂(s_ij / τ)/∂τ = -s_ij / τ²; s_ij alone is the factor "
                                "for a τ that multiplies them."),
        (np.sum(ds_scaled), "every score uses τ with its own factor -s_ij / τ²: dτ = -Σ_ij ds̃_ij s_ij / τ² "
                            "(without the factor the sum is 0, since each row of ds̃ sums to 0)."),
    ]
    return compare(answer, right, mistakes, what="your dτ",
                   right="dτ = -Σ ds̃ ⊙ S / τ², through the softmax backward.")


def check_causal_gradient_rows(rows):
    """Check the predicted non-zero rows of dX when only output 1 of 4 causally masked tokens feeds the loss.

    Parameters
    ----------
    rows : iterable of int, or a boolean array of length 4
        The row indices of dX that are not zero (or a flag per row).

    >>> import mha_lessons as M
    >>> M.exercises.check_causal_gradient_rows([0, 1])
    Right: output 1 reads tokens 0 and 1 only, so only their rows of dX are non-zero.
    """
    n, position = 4, 1
    expected = [0, 1]
    if rows is None:
        return Verdict(False, "your answer is None: nothing predicted yet.")
    if isinstance(rows, str):
        return Verdict(False, f"expected the row numbers as a list of integers, like [0, 3]; got {rows!r}.")
    flags = np.asarray(rows) if not isinstance(rows, (set, frozenset)) else None
    if flags is not None and flags.dtype == bool:
        if flags.shape != (n,):
            return Verdict(False, f"a flag per row needs {n} booleans; got shape {flags.shape}.")
        rows = np.flatnonzero(flags)
    try:
        answer = sorted({int(r) for r in rows if float(r) == int(r)})
        if len(answer) != len(set(float(r) for r in rows)):
            raise ValueError("not whole numbers")
    except (TypeError, ValueError):
        return Verdict(False, f"expected the row numbers as a list of integers, like [0, 3]; got {rows!r}.")
    outside = [r for r in answer if not 0 <= r < n]
    if outside:
        return Verdict(False, f"dX has {n} rows, numbered 0 to {n - 1}; {outside} is outside.")
    named = {
        (1,): "output 1 also reads the key and value of token 0, so token 0 gets a gradient too.",
        (0,): "token 1 gives output 1 its query (and a key and a value), so row 1 is non-zero too.",
        (1, 2, 3): "the causal mask lets position 1 see positions 0 and 1 (True on and below the diagonal): "
                   "tokens 2 and 3 are in its future and cannot influence it.",
        (2, 3): "the causal mask lets position 1 see positions 0 and 1, not the later ones.",
        (0, 1, 2, 3): "the mask stops tokens 2 and 3 from reaching output 1: their rows of dX are zero.",
        (): "output 1 depends on some inputs, so some rows of dX are non-zero.",
    }
    if answer == expected:
        return Verdict(True, f"output {position} reads tokens 0 and 1 only, so only their rows of dX are non-zero.")
    return Verdict(False, named.get(tuple(answer), f"rows {answer} is not it: output {position} gets its query from "
                                                   f"token {position} and, through the causal mask, keys and values "
                                                   f"from tokens 0 to {position}."))
