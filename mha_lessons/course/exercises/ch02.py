"""Checkers for chapter 2 (why divide by sqrt(d_k)).

The answers here are formulas and the numbers they predict: variances of dot products, a Jacobian,
a divisor. Each checker calls the learner's function at widths and variances that the chapter's
own examples do not use, so that an answer typed in for one case does not pass by luck.
"""

import math

import numpy as np

from ...scaling import dot_product_moments, softmax_jacobian
from ._verdict import Verdict, call_learner, compare


def _results(function, cases, name, size):
    """Call ``function(*case)`` for every case; return an array (cases, size) of numbers, or a Verdict."""
    rows = []
    for case in cases:
        call = f"{name}({', '.join(str(value) for value in case)})"
        result, failure = call_learner(function, *case, name=name)
        if failure is not None:
            return failure
        if result is None:
            return Verdict(False, f"{call} returned None: a function that forgot to `return` its result?")
        try:
            row = np.asarray(result, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            return Verdict(False, f"{call} returned a {type(result).__name__}, which is not {size} number(s).")
        if row.size != size:
            return Verdict(False, f"{call} returned {row.size} number(s); expected {size}.")
        rows.append(row)
    return np.array(rows)


def check_variance_prediction(prediction):
    """Check the predicted (Var[q·k], Var[q·k / sqrt(d_k)]) for d_k = 64 and coordinates of variance 2.

    Parameters
    ----------
    prediction : pair of numbers
        The variance of the raw score, then of the scaled score.

    >>> import mha_lessons as M
    >>> M.exercises.check_variance_prediction((256, 4))
    Right: Var[q·k] = d_k σ_q² σ_k² = 64 · 2 · 2, and dividing by √64 = 8 divides it by 64.
    """
    d_k, var = 64, 2.0
    expected = np.array([d_k * var * var, var * var])  # Var[q·k] = d_k σ_q² σ_k²; scaled by 1/d_k
    mistakes = [
        ([d_k, 1.0], "these are the values for coordinates of variance 1; here each product q_a k_a has "
                     "variance E[q_a²] E[k_a²] = 2 · 2 = 4."),
        ([d_k * var, var], "each product q_a k_a has variance E[q_a²] E[k_a²] = 2 · 2 = 4, not 2: "
                           "both factors count."),
        ([d_k * var * var, d_k * var * var], "the second number is the variance of the scaled score: dividing by "
                                             "√d_k = 8 divides the variance by 64."),
        ([d_k * var * var, d_k * var * var / math.sqrt(d_k)],
         "dividing a number by 8 divides its variance by 8² = 64, not by 8."),
        ([math.sqrt(d_k) * var, var], "these are standard deviations; the exercise asks for variances, their squares."),
    ]
    verdict = compare(prediction, expected, mistakes, what="your prediction",
                      right="Var[q·k] = d_k σ_q² σ_k² = 64 · 2 · 2, and dividing by √64 = 8 divides it by 64.")
    if not verdict and "right shape but not the right values" in verdict.message:
        answer = np.asarray(prediction, dtype=float)
        if np.allclose(answer, expected, rtol=0.05):
            return Verdict(False, "close, but these look like simulated values; the prediction from the formula "
                                  "is exact (whole numbers here).")
    return verdict


def check_self_score_moments(self_score_moments):
    """Check ``self_score_moments(d_k)`` -> (mean of q·q, variance of q·q, mean of q·q / sqrt(d_k)).

    q has d_k independent standard normal coordinates. The function is called for d_k = 16 and 100;
    each of the three numbers is checked on its own, so that the message names the one that is wrong.

    >>> import math, mha_lessons as M
    >>> M.exercises.check_self_score_moments(lambda d: (d, 2 * d, math.sqrt(d)))
    Right: q·q has mean d_k and variance 2 d_k, and its scaled mean √d_k grows with the width.
    """
    widths = np.array([16, 100])
    answers = _results(self_score_moments, [(int(d),) for d in widths], "self_score_moments", 3)
    if isinstance(answers, Verdict):
        return answers
    mean, var = dot_product_moments(widths, corr=1.0)  # k = q: correlation 1
    d = widths.astype(float)
    parts = [
        ("the mean of q·q", mean, [
            (np.zeros(2), "the mean of q·q is not 0: it is a sum of squares q_a², each with mean 1 (0 is the mean "
                          "for independent q and k)."),
            (np.ones(2), "q·q = Σ_a q_a² adds d_k squares of mean 1 each: its mean grows with d_k."),
        ]),
        ("the variance of q·q", var, [
            (d, "each square q_a² has variance E[q_a⁴] − (E[q_a²])² = 3 − 1 = 2, not 1, "
                "so q·q has variance 2 d_k."),
            (3 * d, "E[q_a⁴] = 3 is the second moment of q_a²; its variance subtracts the squared mean: "
                    "3 − 1 = 2."),
            (2 * d ** 2, "the d_k squares are independent, so their variances add: d_k · 2, not d_k² · 2."),
        ]),
        ("the mean of the scaled score", mean / np.sqrt(d), [
            (d, "the scale is forgotten: the scaled score is q·q / √d_k, with mean d_k / √d_k = √d_k."),
            (np.ones(2), "the scores are divided by √d_k, not by d_k: the mean is d_k / √d_k."),
            (np.full(2, 2.0), "2 is the variance of the scaled score (2 d_k / d_k); the question asks for its mean."),
            (np.zeros(2), "the scaled score q·q / √d_k is positive: its mean is d_k / √d_k, not 0."),
        ]),
    ]
    for column, (what, expected, mistakes) in enumerate(parts):
        verdict = compare(answers[:, column], expected, mistakes, what=f"{what} (for d_k = 16 and 100)")
        if not verdict:
            return verdict
    return Verdict(True, "q·q has mean d_k and variance 2 d_k, and its scaled mean √d_k grows with the width.")


def check_uniform_jacobian(uniform_jacobian):
    """Check ``uniform_jacobian(m)``: the (m, m) Jacobian of the softmax at equal scores, I/m - 11ᵀ/m².

    The function is called with m = 7 and compared with ``M.scaling.softmax_jacobian(np.zeros(7))``.

    >>> import numpy as np, mha_lessons as M
    >>> M.exercises.check_uniform_jacobian(lambda m: np.eye(m) / m - np.ones((m, m)) / m**2)
    Right: J = diag(p) - p pᵀ with p = 1/m everywhere.
    """
    m = 7
    answer, failure = call_learner(uniform_jacobian, m, name="uniform_jacobian")
    if failure is not None:
        return failure
    shape = np.shape(answer) if answer is not None else None
    if shape is not None and len(shape) == 2 and shape[0] == shape[1] and shape[0] != m:
        return Verdict(False, f"called with m = {m}, your function returned a {shape[0]} × {shape[1]} matrix: "
                              "build it from the argument m.")
    eye, ones = np.eye(m), np.ones((m, m))
    mistakes = [
        (eye / m, "this is diag(p) alone: subtract the outer product p pᵀ, whose entries are 1/m²."),
        (eye / m - ones / m, "p pᵀ has entries (1/m)(1/m) = 1/m², not 1/m."),
        (ones / m**2 - eye / m, "the sign is flipped: J = diag(p) - p pᵀ, positive on the diagonal."),
        (eye / m - (ones - eye) / m**2, "p pᵀ has 1/m² on the diagonal too: subtract it from every entry."),
        (ones / m, "p is 1/m everywhere, but J = diag(p) - p pᵀ: 1/m - 1/m² on the diagonal, -1/m² elsewhere."),
    ]
    return compare(answer, softmax_jacobian(np.zeros(m)), mistakes, what="your Jacobian",
                   right="J = diag(p) - p pᵀ with p = 1/m everywhere.")


def check_score_divisor(score_divisor):
    """Check ``score_divisor(d_k, std_q, std_k)``: the number that gives the scores variance 1.

    Var[q·k] = d_k σ_q² σ_k² for independent coordinates of mean 0, so the divisor is the standard
    deviation √d_k σ_q σ_k. The function is called for three widths and pairs of standard deviations.

    >>> import math, mha_lessons as M
    >>> M.exercises.check_score_divisor(lambda d_k, std_q, std_k: math.sqrt(d_k) * std_q * std_k)
    Right: divide by the standard deviation of q·k, √d_k σ_q σ_k.
    """
    cases = [(128, 2.0, 0.5), (16, 3.0, 0.5), (64, 1.0, 2.0)]
    answers = _results(score_divisor, cases, "score_divisor", 1)
    if isinstance(answers, Verdict):
        return answers
    d, s_q, s_k = (np.array(column, dtype=float) for column in zip(*cases))
    # the standard deviation of q·k, case by case
    expected = np.array([math.sqrt(dot_product_moments(w, std_q=a, std_k=b)[1]) for w, a, b in cases])
    mistakes = [
        (np.sqrt(d), "√d_k is right only for variance-1 coordinates: Var[q·k] = d_k σ_q² σ_k², so divide by "
                     "√d_k σ_q σ_k."),
        (np.sqrt(d) * s_q**2 * s_k**2, "σ_q² σ_k² is a factor of the variance; the divisor is the standard "
                                       "deviation, so it takes σ_q σ_k."),
        (d * s_q * s_k, "d_k belongs under the square root: the standard deviation of q·k is √d_k σ_q σ_k."),
        (d * s_q**2 * s_k**2, "that is the variance of q·k; dividing by it leaves a variance of 1 / Var. "
                              "Divide by the standard deviation, its square root."),
        (np.sqrt(d * (s_q**2 + s_k**2)), "the variances multiply, they do not add: Var[q_a k_a] = σ_q² σ_k²."),
    ]
    return compare(answers[:, 0], expected, mistakes, what="your divisors (for three cases)",
                   right="divide by the standard deviation of q·k, √d_k σ_q σ_k.")
