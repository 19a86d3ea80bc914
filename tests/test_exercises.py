"""The exercise checkers: every right answer passes, and every typical wrong answer is named.

The answers here are written the way a learner would write them (loops, slicing, einsum, a forgotten
step), not derived from the checkers' own lists of mistakes, so a checker that stops recognising a
mistake fails these tests. Right answers are written a second way where one exists (finite
differences for the gradients, loops for the attention), so that a checker whose own "right answer"
were wrong would fail them too.
"""

import math

import numpy as np
import pytest

import mha_lessons as M
from mha_lessons.exercises import Verdict, compare


def assert_named(verdict, words):
    """The verdict is a failure whose message contains ``words``."""
    assert isinstance(verdict, Verdict)
    assert not verdict.ok and words in verdict.message, (words, verdict.message)


# ---------------------------------------------------------------- the shared machinery

def test_compare_reports_shape_nan_and_largest_difference():
    expected = np.arange(6.0).reshape(2, 3)
    assert compare(expected.copy(), expected).ok
    assert "shape (3, 2); expected shape (2, 3)" in compare(expected.T, expected).message
    with_nan = expected.copy()
    with_nan[1, 0] = np.nan
    assert "nan at index (1, 0)" in compare(with_nan, expected).message
    off = expected.copy()
    off[0, 2] += 1.0
    verdict = compare(off, expected)
    assert not verdict and "at index (0, 2) it is 3 where 2 is expected" in verdict.message


def test_compare_of_single_numbers_names_no_index():
    assert compare(3, 3.0).ok
    assert compare(3.5, 3.0).message == "your answer is 3.5 where 3 is expected."
    assert "is nan where 3 is expected" in compare(float("nan"), 3.0).message


def test_compare_names_none_and_non_numbers():
    assert "forgot to `return`" in compare(None, np.zeros(2)).message
    assert "not an array of numbers" in compare("ab", np.zeros(2)).message


def test_verdict_is_true_only_when_right_and_shows_one_line():
    assert bool(Verdict(True, "ok")) and not bool(Verdict(False, "no"))
    assert repr(Verdict(False, "the scale is missing.")) == "Not yet: the scale is missing."


def test_every_checker_is_exported_and_documented():
    names = [name for name in M.exercises.__all__ if name.startswith("check_")]
    assert len(names) >= 2
    for name in names:
        assert getattr(M.exercises, name).__doc__, f"{name} has no docstring"


def test_an_unwritten_function_gets_the_not_written_yet_message():
    def unwritten(*args):
        raise NotImplementedError

    for check in (M.exercises.check_attend_one, M.exercises.check_attention, M.exercises.check_self_score_moments,
                  M.exercises.check_uniform_jacobian, M.exercises.check_score_divisor, M.exercises.check_split_heads,
                  M.exercises.check_combine_heads, M.exercises.check_weighted_sum_backward,
                  M.exercises.check_temperature_gradient, M.exercises.check_shifted_weights,
                  M.exercises.check_key_bias_change, M.exercises.check_unexplained_fraction):
        assert_named(check(unwritten), "is not written yet")


# ---------------------------------------------------------------- chapter 1

def test_zero_query_weights():
    check = M.exercises.check_zero_query_weights
    e = np.exp(np.zeros(5))
    assert check(e / e.sum()).ok
    _, weights = M.scaled_dot_product_attention(np.zeros((1, 3)), np.ones((5, 3)), np.ones((5, 2)))
    assert check(weights).ok  # the (1, m) row that the package gives for one query
    assert_named(check(np.zeros(5)), "does not mean a weight of 0")
    assert_named(check(e), "weights sum to 1")
    assert_named(check(1 / 5), "one weight per key")
    assert_named(check(None), "is None")
    assert_named(check([0.5, 0.5]), "shape (2,); expected shape (5,)")


def _loop_attention(q, K, V, scale, normalise=True, softmax=True):
    """Attention for one query, written with a loop as exercise 2 asks, with optional mistakes."""
    scores = np.array([np.dot(q, k) for k in K]) * scale
    if not softmax:
        w = scores
    else:
        w = np.exp(scores - scores.max())
        if normalise:
            w = w / w.sum()
    return sum(w_j * v_j for w_j, v_j in zip(w, V))


def test_attend_one_right_answer_passes():
    assert M.exercises.check_attend_one(lambda q, K, V: _loop_attention(q, K, V, 1 / np.sqrt(len(q)))).ok


def _weights_only(q, K, V):
    s = K @ q / np.sqrt(len(q))
    return np.exp(s) / np.exp(s).sum()


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda q, K, V: _loop_attention(q, K, V, 1.0), "not divided by sqrt(d_k)"),
        (lambda q, K, V: _loop_attention(q, K, V, 1 / len(q)), "divided by d_k"),
        (lambda q, K, V: _loop_attention(q, K, V, 1 / np.sqrt(len(q)), normalise=False), "do not sum to 1"),
        (lambda q, K, V: _loop_attention(q, K, V, 1 / np.sqrt(len(q)), softmax=False), "softmax is missing"),
        (_weights_only, "these are the 6 weights"),
        (lambda q, K, V: None, "forgot to `return`"),
        (lambda q, K, V: q @ V, "raised ValueError"),
    ],
)
def test_attend_one_typical_mistakes_are_named(wrong, words):
    assert_named(M.exercises.check_attend_one(wrong), words)


def test_band_mask_right_and_wrong():
    n = 5
    band = np.array([[abs(i - j) <= 1 for j in range(n)] for i in range(n)])
    assert M.exercises.check_band_mask(band).ok
    cases = {
        "swapped": ~band,
        "diagonal is missing": band & ~np.eye(n, dtype=bool),
        "only forward": np.triu(band),
        "only backward": np.tril(band),
        "too wide": np.array([[abs(i - j) <= 2 for j in range(n)] for i in range(n)]),
        "dtype int64": band.astype(np.int64),
        "shape (4, 4)": band[:4, :4],
        "is None": None,
    }
    for words, wrong in cases.items():
        assert_named(M.exercises.check_band_mask(wrong), words)


def _matrix_attention(Q, K, V, scale=True, axis=-1, transpose=True, stable=True, keepdims=True,
                      whole_matrix=False, return_weights=False):
    """Exercise 5 the way a learner writes it, with switches for the usual slips."""
    S = Q @ K.T if transpose else Q @ K
    if scale:
        S = S / np.sqrt(Q.shape[1])
    if whole_matrix:
        e = np.exp(S - S.max())
        W = e / e.sum()
    else:
        e = np.exp(S - S.max(axis=axis, keepdims=True)) if stable else np.exp(S)
        W = e / e.sum(axis=axis, keepdims=keepdims)
    return W if return_weights else W @ V


def test_attention_right_answers_pass():
    def with_loops(Q, K, V):  # row by row, with math.exp: another way to write it
        out = []
        for q in Q:
            s = [float(np.dot(q, k)) / math.sqrt(len(q)) for k in K]
            e = [math.exp(x - max(s)) for x in s]
            out.append(sum(e_j / sum(e) * v_j for e_j, v_j in zip(e, V)))
        return np.array(out)

    assert M.exercises.check_attention(_matrix_attention).ok
    assert M.exercises.check_attention(with_loops).ok


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(axis=0), "over the queries (axis 0)"),
        (dict(scale=False), "not divided by sqrt(d_k)"),
        (dict(transpose=False), "Q @ K.T"),
        (dict(return_weights=True), "these are the weights"),
        (dict(stable=False), "np.exp overflowed"),
        (dict(keepdims=False), "keepdims=True"),
        (dict(whole_matrix=True), "sum of the whole matrix"),
    ],
)
def test_attention_typical_mistakes_are_named(options, words):
    with np.errstate(over="ignore", invalid="ignore"):  # the overflow is the learner's, and it is the point
        verdict = M.exercises.check_attention(lambda Q, K, V: _matrix_attention(Q, K, V, **options))
    assert_named(verdict, words)


def test_attention_bad_types():
    assert_named(M.exercises.check_attention(lambda Q, K, V: None), "forgot to `return`")
    assert_named(M.exercises.check_attention(lambda Q, K, V: [1.0, 2.0, 3.0]), "shape (3,); expected shape (3, 2)")
    assert_named(M.exercises.check_attention(None), "expected a function")


def _my_shifted_weights(Q, K, V, c, shift_queries=False, shift_keys=True, only_first=False, per_key=False,
                        axis=-1, what="weights"):
    """Exercise 3 the way a learner writes it: shift, scores, a hand-written softmax; switches for the usual slips."""
    Q, K = Q.copy(), K.copy()
    if shift_queries:
        Q = Q + c
    if shift_keys:
        if only_first:
            K[0] += c
        elif per_key:
            K = K + c.reshape(-1, 1)
        else:
            K = np.array([k + c for k in K])
    S = Q @ K.T / np.sqrt(K.shape[1])
    e = np.exp(S - S.max(axis=axis, keepdims=True))
    W = e / e.sum(axis=axis, keepdims=True)
    return {"weights": W, "scores": S, "output": W @ V}[what]


def test_shifted_weights_right_answers_pass():
    check = M.exercises.check_shifted_weights
    assert check(_my_shifted_weights).ok
    # the weights are those of the unshifted keys: the fact the exercise is about, computed by PyTorch
    import torch
    assert check(lambda Q, K, V, c: torch.softmax(torch.tensor(Q @ (K + c).T / 2.0), dim=-1).numpy()).ok


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(shift_queries=True, shift_keys=False), "you shifted the queries"),
        (dict(shift_queries=True), "you shifted the queries"),  # the keys too: same weights
        (dict(only_first=True), "only key 0 moved"),
        (dict(per_key=True), "every feature of key j"),
        (dict(axis=0), "over the queries (axis 0)"),
        (dict(what="scores"), "these are the scores"),
        (dict(what="output"), "this is the output"),
    ],
)
def test_shifted_weights_typical_mistakes_are_named(options, words):
    assert_named(M.exercises.check_shifted_weights(lambda Q, K, V, c: _my_shifted_weights(Q, K, V, c, **options)),
                 words)


def test_shifted_weights_bad_returns():
    check = M.exercises.check_shifted_weights

    def shift_in_place(Q, K, V, c):
        K += c  # and forgets the return

    assert_named(check(shift_in_place), "forgot to `return`")
    first_query = lambda Q, K, V, c: M.scaled_dot_product_attention(Q[:1], K + c, V)[1][0]  # noqa: E731
    assert_named(check(first_query), "shape (4,); expected shape (3, 4)")


# ---------------------------------------------------------------- chapter 2

def test_variance_prediction():
    check = M.exercises.check_variance_prediction
    assert check([64 * 2 * 2, 64 * 2 * 2 / 64]).ok
    cases = {
        "variance 1": (64, 1),
        "both factors count": (64 * 2, 2),
        "divides the variance by 64": (256, 256),
        "not by 8": (256, 256 / 8),
        "standard deviations": (16, 2),
        "simulated values": (255.1, 3.98),
        "is None": None,
        "shape (3,); expected shape (2,)": (256, 4, 0),
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def test_self_score_moments():
    check = M.exercises.check_self_score_moments
    assert check(lambda d: (d, 2 * d, d / math.sqrt(d))).ok
    cases = {
        "the mean of q·q is not 0": lambda d: (0, 2 * d, math.sqrt(d)),
        "3 − 1 = 2": lambda d: (d, d, math.sqrt(d)),
        "the scale is forgotten": lambda d: (d, 2 * d, d),
        "not by d_k": lambda d: (d, 2 * d, d / d),
        "2 is the variance of the scaled score": lambda d: (d, 2 * d, 2 * d / d),
        "at index (0,) it is 64 where 16 is expected": lambda d: (64, 128, 8),  # typed in for d_k = 64
        "returned 2 number(s); expected 3": lambda d: (d, 2 * d),
        "returned None": lambda d: None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def test_uniform_jacobian():
    check = M.exercises.check_uniform_jacobian

    def right(m):
        p = np.full(m, 1 / m)
        return np.diag(p) - np.outer(p, p)

    assert check(right).ok
    cases = {
        "diag(p) alone": lambda m: np.diag(np.full(m, 1 / m)),
        "not 1/m": lambda m: np.eye(m) / m - 1 / m,
        "sign is flipped": lambda m: -right(m),
        "build it from the argument m": lambda m: right(32),
        "forgot to `return`": lambda m: None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def test_score_divisor():
    check = M.exercises.check_score_divisor
    assert check(lambda d_k, s_q, s_k: math.sqrt(d_k * s_q**2 * s_k**2)).ok
    cases = {
        "right only for variance-1": lambda d_k, s_q, s_k: math.sqrt(d_k),
        "takes σ_q σ_k": lambda d_k, s_q, s_k: math.sqrt(d_k) * s_q**2 * s_k**2,
        "under the square root": lambda d_k, s_q, s_k: d_k * s_q * s_k,
        "variance of q·k": lambda d_k, s_q, s_k: d_k * s_q**2 * s_k**2,
        "multiply, they do not add": lambda d_k, s_q, s_k: math.sqrt(d_k * (s_q**2 + s_k**2)),
        "returned 2 number(s)": lambda d_k, s_q, s_k: (d_k, s_q),
        "returned None": lambda d_k, s_q, s_k: None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


# ---------------------------------------------------------------- chapter 3

def test_head_choices():
    check = M.exercises.check_head_choices
    right = {}
    for h in range(1, 17):
        if 768 % h == 0:
            right[h] = 768 // h
    assert check(right).ok
    cases = {
        "h = 5 does not divide 768": {h: 768 // h for h in range(1, 17)},
        "h = 16 is missing": {h: d for h, d in right.items() if h != 16},
        "give each one's d_k too": list(right),
        "share the 768 features": {h: 768 for h in right},
        "should be d_model / h": {h: 768 * h for h in right},
        "not a number of heads": {0: 0, **right},
        "is None": None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def _split_by_slicing(x, h):
    d_k = x.shape[1] // h
    return np.stack([x[:, i * d_k:(i + 1) * d_k] for i in range(h)])  # h slices (n, d_k) -> (h, n, d_k)


def test_split_heads():
    check = M.exercises.check_split_heads
    assert check(_split_by_slicing).ok
    cases = {
        "keeps the order of the numbers in memory": lambda x, h: x.reshape(h, x.shape[0], x.shape[1] // h),
        "every h-th one": lambda x, h: np.stack([x[:, i::h] for i in range(h)]),
        "move the head axis to the front": lambda x, h: x.reshape(x.shape[0], h, -1),
        "the tokens come first": lambda x, h: np.stack([x[:, i * (x.shape[1] // h):(i + 1) * (x.shape[1] // h)].T
                                                        for i in range(h)]),
        "use the argument h": lambda x, h: x.reshape(4, 2, 3).transpose(1, 0, 2),  # h = 2 typed in
        "raised ValueError": lambda x, h: x.reshape(4, h, 3).transpose(1, 0, 2),  # d_k = 3 typed in
        "forgot to `return`": lambda x, h: None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def test_combine_heads():
    check = M.exercises.check_combine_heads
    assert check(lambda heads: np.concatenate(list(heads), axis=-1)).ok
    assert check(lambda heads: np.hstack([heads[i] for i in range(heads.shape[0])])).ok
    cases = {
        "mixes tokens in one row": lambda heads: heads.reshape(heads.shape[1], -1),
        "interleaved": lambda heads: np.stack(list(heads), axis=-1).reshape(heads.shape[1], -1),
        "stacked as extra tokens": lambda heads: np.concatenate(list(heads)),
        "merge the last two axes": lambda heads: np.swapaxes(heads, 0, 1),
        "forgot to `return`": lambda heads: None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def _my_key_bias_change(x, params, b_k, bias="b_k", returned="change"):
    """Exercise 3 the way a learner writes it: set the bias on the given params, run the layer twice."""
    y_old = M.multihead_attention(x, x, x, params)[0]
    setattr(params, bias, b_k)  # the checker hands over a copy
    y_new = M.multihead_attention(x, x, x, params)[0]
    return {"change": y_new - y_old, "reverse": y_old - y_new, "new": y_new, "old": y_old,
            "max": np.abs(y_new - y_old).max()}[returned]


def test_key_bias_change_right_answers_pass():
    check = M.exercises.check_key_bias_change
    assert check(_my_key_bias_change).ok
    assert check(lambda x, params, b_k: _my_key_bias_change(x, params, b_k, returned="reverse")).ok


def test_key_bias_change_is_checked_against_an_independent_layer():
    """The right answer is zero: a torch layer with b_K replaced gives the same output (float64)."""
    import torch
    rng = np.random.default_rng(0)
    params = M.init_params(8, 2, seed=1)
    params.b_q, params.b_k, params.b_v, params.b_o = rng.normal(size=(4, 8))
    x = torch.tensor(rng.normal(size=(1, 5, 8)))
    layer = M.params_to_torch(params)
    y_old = layer(x, x, x, need_weights=False)[0]
    with torch.no_grad():
        layer.in_proj_bias[8:16] = torch.tensor(rng.normal(size=8) * 3.0)  # the key bias
    y_new = layer(x, x, x, need_weights=False)[0]
    np.testing.assert_allclose((y_new - y_old).detach().numpy(), 0.0, atol=1e-13)


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(bias="b_q"), "you changed b_Q"),
        (dict(bias="b_v"), "you changed b_V"),
        (dict(bias="b_o"), "you changed b_O"),
        (dict(bias="b_q", returned="reverse"), "you changed b_Q"),
        (dict(returned="new"), "this is an output"),
        (dict(returned="old"), "this is an output"),
        (dict(returned="max"), "not one number"),
    ],
)
def test_key_bias_change_typical_mistakes_are_named(options, words):
    verdict = M.exercises.check_key_bias_change(lambda x, params, b_k: _my_key_bias_change(x, params, b_k,
                                                                                               **options))
    assert_named(verdict, words)


def _my_unexplained_fraction(c1, c4, p, weight=None, target="both", readout="lstsq", measure="fraction"):
    """Exercise 4 the way a learner writes it: normal equations instead of lstsq, squared errors by hand."""
    p = p if weight is None else weight
    z = p * c1 + (1 - p) * c4
    wanted = {"both": np.hstack([c1, c4]), "c1": c1, "c4": c4}[target]
    if readout == "lstsq":
        guess = z @ np.linalg.solve(z.T @ z, z.T @ wanted)
    else:  # the blend copied into both slots, as the one-head layer of section 5 does
        guess = np.hstack([z, z])
    missed = ((guess - wanted) ** 2).sum() / (wanted ** 2).sum()
    return {"fraction": missed, "explained": 1 - missed, "norms": np.sqrt(missed)}[measure]


def test_unexplained_fraction_right_answers_pass():
    check = M.exercises.check_unexplained_fraction
    assert check(_my_unexplained_fraction).ok
    assert check(lambda c1, c4, p: np.array([_my_unexplained_fraction(c1, c4, p)])).ok  # a one-element array


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(weight=0.5), "the blend p = 0.5 of section 5"),
        (dict(weight=0.8), "p = 0.8 whatever the argument"),
        (dict(target="c1"), "the part of c1 alone"),
        (dict(target="c4"), "the part of c4 alone"),
        (dict(measure="explained"), "explained fraction"),
        (dict(measure="norms"), "ratio of norms"),
        (dict(readout="copy"), "not the best read-out"),
    ],
)
def test_unexplained_fraction_typical_mistakes_are_named(options, words):
    verdict = M.exercises.check_unexplained_fraction(lambda c1, c4, p: _my_unexplained_fraction(c1, c4, p, **options))
    assert_named(verdict, words)


def test_unexplained_fraction_other_slips():
    check = M.exercises.check_unexplained_fraction
    swapped = lambda c1, c4, p: _my_unexplained_fraction(c4, c1, p)  # noqa: E731 (p on position 4's content)
    assert_named(check(swapped), "p is on position 4")
    exact = lambda c1, c4, p: (p**2 + (1 - p)**2) / (p**2 + (1 - p)**2) / 2  # noqa: E731 (the formula, not measured)
    assert_named(check(exact), "1/2 is the theory")
    assert_named(check(lambda c1, c4, p: [0.5, 0.5]), "returned 2 numbers")
    assert_named(check(lambda c1, c4, p: None), "is None")


# ---------------------------------------------------------------- chapter 4

def test_cross_attention_flops():
    check = M.exercises.check_cross_attention_flops
    n, m, d = 100, 1000, 256
    products = {  # (rows, inner, columns) of each matrix product, over all heads
        "q": (n, d, d), "k": (m, d, d), "v": (m, d, d),
        "scores": (n, d, m), "weighted sum": (n, m, d), "out": (n, d, d),
    }
    right = sum(2 * a * b * c for a, b, c in products.values())
    assert check(right).ok
    cases = {
        "multiply-adds": right // 2,
        "that is self-attention": 8 * n * d**2 + 4 * n**2 * d,
        "2 m d² each": 8 * n * d**2 + 4 * n * m * d,
        "W_O": right - 2 * n * d * d,
        "do not multiply by h": right + 3 * 4 * n * m * d,
        "both attention products": right - 2 * n * m * d,
        "element-wise work": M.complexity.mha_flops(n, d, 4, m)["total"],
        "is None": None,
        "shape (2,); expected shape ()": [right, right],
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def test_weights_memory_length():
    check = M.exercises.check_weights_memory_length

    def first_n(heads=16, bytes_per_number=2, budget=2**30):
        n = 1
        while heads * n * n * bytes_per_number <= budget:
            n += 1
        return n

    assert check(first_n()).ok
    cases = {
        "round the solution of h n² · 2 = 2^30 up, not down": int(math.sqrt(2**30 / 32)),
        "a whole number": math.sqrt(2**30 / 32),
        "that is for float32": first_n(bytes_per_number=4),
        "own n × n weights": first_n(heads=1),
        "not 10^9": first_n(budget=10**9),
        "2 bytes, not 16": first_n(bytes_per_number=16),
        "is None": None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def test_float32_weights():
    check = M.exercises.check_float32_weights
    q = np.ones((1, 2, 3), dtype=np.float32)
    out, weights = M.scaled_dot_product_attention(q, q, q)
    assert check(weights.dtype).ok and check((out.dtype, weights.dtype)).ok and check(weights).ok
    assert check("float32").ok
    q64 = np.ones((1, 2, 3))  # the dtype forgotten: numpy's default is float64
    cases = {
        "make the inputs float32": M.scaled_dot_product_attention(q64, q64, q64)[1].dtype,
        "float16?": np.float16,
        "give the dtype itself": weights.dtype == np.float32,
        "is not a dtype": "thirty-two bits",
        "is None": None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


# ---------------------------------------------------------------- chapter 5

def _numerical_weighted_sum_backward(a, v, d_o):
    """The oracle: central differences of sum(dO ⊙ (A V)). O is linear in A and in V, so a step of 1
    makes the differences exact up to rounding."""
    return (M.grads.gradcheck(lambda t: t @ v, a, d_o, eps=1.0),
            M.grads.gradcheck(lambda t: a @ t, v, d_o, eps=1.0))


def test_weighted_sum_backward_right_answers_pass():
    check = M.exercises.check_weighted_sum_backward
    assert check(_numerical_weighted_sum_backward).ok
    assert check(lambda a, v, d_o: (np.einsum("...ic,...jc->...ij", d_o, v),
                                    np.einsum("...ij,...ic->...jc", a, d_o))).ok


def test_weighted_sum_backward_typical_mistakes_are_named():
    check = M.exercises.check_weighted_sum_backward
    sw = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731 (the learner's helper)
    cases = {
        "reverses all of them": lambda a, v, d_o: (d_o @ v.T, a.T @ d_o),
        "V is not transposed": lambda a, v, d_o: (d_o @ v, sw(a) @ d_o),
        "A is not transposed": lambda a, v, d_o: (d_o @ sw(v), a @ d_o),
        "da is transposed": lambda a, v, d_o: (np.einsum("...ic,...jc->...ji", d_o, v), sw(a) @ d_o),
        "swapped": lambda a, v, d_o: (sw(a) @ d_o, d_o @ sw(v)),
        "should return a pair (da, dv)": lambda a, v, d_o: d_o @ sw(v),
        "returned None": lambda a, v, d_o: None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def _numerical_temperature_gradient(S, v, d_o, tau):
    """The oracle: central differences of sum(dO ⊙ softmax(S / τ) V) in τ (error about 1e-11 for a step of 1e-5)."""
    return M.grads.gradcheck(lambda t: M.softmax(S / t) @ v, np.array([tau]), d_o, eps=1e-5)


def _my_temperature_gradient(S, v, d_o, tau, backward_axis=-1, softmax_backward=True, factor="-S/tau2",
                             total=True):
    """Exercise 2 the way a learner writes it, with switches for the usual slips."""
    a = np.exp(S / tau - (S / tau).max(axis=-1, keepdims=True))
    a /= a.sum(axis=-1, keepdims=True)
    da = d_o @ v.T
    ds = a * (da - (da * a).sum(axis=backward_axis, keepdims=True)) if softmax_backward else da
    contributions = ds * {"-S/tau2": -S / tau**2, "S/tau2": S / tau**2, "S/tau": S / tau, "S": S,
                          "none": 1.0}[factor]
    return contributions.sum() if total else contributions


def test_temperature_gradient():
    check = M.exercises.check_temperature_gradient
    assert check(_numerical_temperature_gradient).ok
    assert check(_my_temperature_gradient).ok
    assert check(lambda *args: np.array([_my_temperature_gradient(*args)])).ok  # one-element array, like gradcheck's
    cases = {
        "the softmax backward is missing": dict(softmax_backward=False),
        "sums over the wrong axis": dict(backward_axis=0),
        "the sign is wrong": dict(factor="S/tau2"),
        "not s_ij / τ": dict(factor="S/tau"),
        "for a τ that multiplies them": dict(factor="S"),
        "its own factor": dict(factor="none"),
        "the shape of the scores": dict(total=False),
    }
    for words, options in cases.items():
        assert_named(check(lambda *args: _my_temperature_gradient(*args, **options)), words)
    assert_named(check(lambda *args: None), "is None")


def test_causal_gradient_rows():
    check = M.exercises.check_causal_gradient_rows
    # the right answer, computed as the exercise's solution does: from the gradient itself
    params = M.init_params(8, 2, seed=3)
    x = np.random.default_rng(4).normal(size=(4, 8))
    d_y = np.zeros((4, 8))
    d_y[1] = 1.0
    dx_q, dx_k, dx_v, _ = M.grads.mha_backward(x, x, x, params, d_y, M.causal_mask(4))
    flags = np.any((dx_q + dx_k + dx_v) != 0, axis=1)  # (4,) which rows of dX are non-zero
    assert check(flags).ok and check(list(np.flatnonzero(flags))).ok and check((1, 0)).ok and check({0, 1}).ok
    cases = {
        "token 0 gets a gradient too": [1],
        "row 1 is non-zero too": [0],
        "cannot influence it": [1, 2, 3],
        "their rows of dX are zero": range(4),
        "outside": [0, 1, 4],
        "needs 4 booleans": np.array([True, True, False]),
        "as a list of integers": ["first", "second"],
        "like [0, 3]": "0, 1",
        "is None": None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


# ---------------------------------------------------------------- chapter 6 (its other exercises: test_masks.py)

def _chunk_by_loops(x_new, x_all, params, visible):
    """Exercise 5 the way a learner writes it: the mask from a rule visible(i, j, s, t), then the layer."""
    s, t = len(x_new), len(x_all)
    mask = np.array([[visible(i, j, s, t) for j in range(t)] for i in range(s)])  # (s, t)
    y, _ = M.multihead_attention(x_new, x_all, x_all, params, mask=mask)
    return y


def _chunk_by_decode_step(x_new, x_all, params):
    """An independent right answer: chapter 9's cache, filled with the earlier tokens, then the new ones in one call."""
    _, cache = M.inference.decode_step(x_all[:len(x_all) - len(x_new)], params)
    y, _ = M.inference.decode_step(x_new, params, cache)
    return y


def test_chunk_outputs_right_answers_pass():
    check = M.exercises.check_chunk_outputs
    assert check(lambda x_new, x_all, params: _chunk_by_loops(x_new, x_all, params,
                                                              lambda i, j, s, t: j <= t - s + i)).ok
    assert check(_chunk_by_decode_step).ok
    assert check(lambda x_new, x_all, params: M.multihead_attention(
        x_new, x_all, x_all, params, mask=M.causal_mask(len(x_new), len(x_all), align="bottom-right"))[0]).ok


def test_chunk_outputs_typical_mistakes_are_named():
    check = M.exercises.check_chunk_outputs
    top_left = "top-left causal mask used for new queries against a cache"
    cases = [
        # the package's causal_mask with its default alignment, as a learner would first try it
        (lambda x_new, x_all, params: M.multihead_attention(
            x_new, x_all, x_all, params, mask=M.causal_mask(len(x_new), len(x_all)))[0], top_left),
        # the same mistake written by hand: query i sees keys 0 .. i
        (lambda x_new, x_all, params: _chunk_by_loops(x_new, x_all, params, lambda i, j, s, t: j <= i), top_left),
        (lambda x_new, x_all, params: M.multihead_attention(x_new, x_all, x_all, params)[0], "no mask"),
        (lambda x_new, x_all, params: M.multihead_attention(
            x_new, x_new, x_new, params, mask=M.causal_mask(len(x_new)))[0], "the cached tokens are missing"),
        (lambda x_new, x_all, params: _chunk_by_loops(x_new, x_all, params, lambda i, j, s, t: j < t - s + i),
         "must also see itself"),
        (lambda x_new, x_all, params: M.multihead_attention(
            x_all, x_all, x_all, params, mask=M.causal_mask(len(x_all)))[0], "outputs of all m tokens"),
        (lambda x_new, x_all, params: M.multihead_attention(
            x_new, x_all, x_all, params, mask=M.causal_mask(len(x_new), len(x_all), align="bottom-right")),
         "return only the outputs"),
        (lambda x_new, x_all, params: None, "is None"),
    ]
    for wrong, words in cases:
        assert_named(check(wrong), words)

    def unwritten(x_new, x_all, params):
        raise NotImplementedError

    assert_named(check(unwritten), "is not written yet")


# ---------------------------------------------------------------- chapter 8

def _bytes_of(*arrays):
    return sum(a.size * a.itemsize for a in arrays)


def test_forward_intensity_right_answers_pass():
    check = M.exercises.check_forward_intensity

    def by_counting(n, d_k, causal):  # the arrays themselves, in bfloat16-sized numbers (float16: 2 bytes too)
        q = k = v = o = np.zeros((n, d_k), dtype=np.float16)
        products = 2 * n * n * d_k + 2 * n * n * d_k  # Q Kᵀ, then A V: n·n dot products of length d_k each
        return products / (2 if causal else 1) / _bytes_of(q, k, v, o)

    assert check(by_counting).ok
    assert check(lambda n, d_k, causal: n / 4 if causal else n / 2).ok


def test_forward_intensity_typical_mistakes_are_named():
    check = M.exercises.check_forward_intensity
    cases = {
        "the output is missing": lambda n, d, c: 4 * n * n * d / (1 + c) / (3 * n * d * 2),
        "multiply-add was counted as one FLOP": lambda n, d, c: 2 * n * n * d / (1 + c) / (4 * n * d * 2),
        "or a number as 4 bytes": lambda n, d, c: 4 * n * n * d / (1 + c) / (4 * n * d * 4),
        "halve the FLOPs, not the bytes": lambda n, d, c: n / 2,
        "the unfused path": lambda n, d, c: 4 * n * n * d / (1 + c) / (4 * n * d * 2 + 2 * 2 * n * n * 2),
        "is None": lambda n, d, c: None,
        "one number for each case": lambda n, d, c: (n, d),
        "returned 'n / 2'": lambda n, d, c: "n / 2",
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)
    assert not check(lambda n, d, c: n / 2 + 1).ok  # close, but not right


def test_key_blocks_loaded_right_answers_pass():
    check = M.exercises.check_key_blocks_loaded

    def brute_force(n, block_m, block_n):  # a block is loaded when it holds a pair j <= i of the tile
        allowed = M.causal_mask(n)
        return sum(bool(allowed[i0:i0 + block_m, j0:j0 + block_n].any())
                   for i0 in range(0, n, block_m) for j0 in range(0, n, block_n))

    assert check(brute_force).ok
    assert check(lambda n, bm, bn: sum(math.ceil(min(n, i0 + bm) / bn) for i0 in range(0, n, bm))).ok


def test_key_blocks_loaded_typical_mistakes_are_named():
    check = M.exercises.check_key_blocks_loaded
    cases = {
        "every (tile, block) pair": lambda n, bm, bn: math.ceil(n / bm) * math.ceil(n / bn),
        "T = ceil(n / BLOCK_N) is chapter 7's count": lambda n, bm, bn: math.comb(math.ceil(n / bn) + 1, 2),
        "T = ceil(n / BLOCK_M) counts query tiles": lambda n, bm, bn: math.comb(math.ceil(n / bm) + 1, 2),
        "a floor drops the block": lambda n, bm, bn: sum(min(n, i0 + bm) // bn for i0 in range(0, n, bm)),
        "blocks past the last key": lambda n, bm, bn: sum(math.ceil((i0 + bm) / bn) for i0 in range(0, n, bm)),
        "is None": lambda n, bm, bn: None,
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


def _flop_counter_tflops(B, h, n, d_k, causal, ms):
    """An independent right answer: PyTorch's FLOP counter on the unfused formula, halved when causal."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.zeros(B, h, n, d_k, device="meta")  # shapes only: the counter needs no numbers
    with FlopCounterMode(display=False) as counter:
        torch.softmax(q @ q.mT, dim=-1) @ q  # (B, h, n, n) @ (B, h, n, d_k)
    return counter.get_total_flops() / (2 if causal else 1) / (ms / 1e3) / 1e12


def test_tflops_right_answers_pass():
    check = M.exercises.check_tflops
    assert check(_flop_counter_tflops).ok
    # and the stored benchmark's own column: its rows' times give its rates, to the 4 digits it keeps of a time
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(M.notebook.read_result("gpu_attention.csv"))))
    for row in [r for r in rows if r["fwd_ms"]][:12]:
        case = (int(row["B"]), int(row["h"]), int(row["n"]), int(row["d_k"]), row["causal"] == "True",
                float(row["fwd_ms"]))
        assert abs(_flop_counter_tflops(*case) - float(row["fwd_tflops"])) <= 0.05 + 2e-3 * float(row["fwd_tflops"])


def test_tflops_typical_mistakes_are_named():
    check = M.exercises.check_tflops
    right = _flop_counter_tflops
    cases = {
        "divide by ms / 1000 seconds, not by ms": lambda *a: right(*a) / 1e3,
        "multiplied by 1000 instead": lambda *a: right(*a) * 1e3,
        "halve the FLOPs when causal": lambda B, h, n, d, c, ms: right(B, h, n, d, False, ms),
        "either one product only": lambda *a: right(*a) / 2,
        "B is missing": lambda B, h, n, d, c, ms: right(1, h, n, d, c, ms),
        "h is missing": lambda B, h, n, d, c, ms: right(B, 1, n, d, c, ms),
        "is not written yet": lambda *a: (_ for _ in ()).throw(NotImplementedError),
    }
    for words, wrong in cases.items():
        assert_named(check(wrong), words)


# ---------------------------------------------------------------- chapter 9: what decoding costs

def _batch_ratios(weights_per_sequence=False, cache_once=False, one_sequence=False, bytes_per_number=2,
                  only_q_and_o=False):
    """Exercise 2 as a learner writes it from section 3's closed forms, with switches for the slips."""
    d, t = 4096, 8192
    ratios = []
    for b in (1, 16, 256):
        flops = (1 if one_sequence else b) * (8 * d**2 + 4 * t * d)  # four projections, scores, weighted sum
        weight_numbers = (2 if only_q_and_o else 4) * d * d
        weights = weight_numbers * bytes_per_number * (b if weights_per_sequence else 1)
        cache = 2 * t * d * bytes_per_number * (1 if cache_once else b)  # keys and values, per sequence
        ratios.append(flops / (weights + cache))
    return ratios


def test_batch_flops_per_byte():
    check = M.exercises.check_batch_flops_per_byte
    assert check(_batch_ratios()).ok
    assert check(np.array(_batch_ratios())).ok
    assert check(tuple(_batch_ratios())).ok
    assert_named(check(_batch_ratios(weights_per_sequence=True)), "counted once per sequence")
    assert_named(check(_batch_ratios(cache_once=True)), "once for the whole batch")
    assert_named(check(_batch_ratios(one_sequence=True)), "those of one sequence")
    assert_named(check(_batch_ratios(bytes_per_number=1)), "numbers, not bytes")
    assert_named(check(_batch_ratios(only_q_and_o=True)), "W_K and W_V are read too")
    assert_named(check([r / 8 for r in _batch_ratios()]), "per bit")
    assert_named(check(_batch_ratios()[:2]), "shape (2,)")
    assert_named(check(None), "forgot to `return`")


# ---------------------------------------------------------------- chapter 10: latent attention's arithmetic

def _mla_ratio(h, d_c, d_r, weighted_sum=True, heads=True, bytes_per_number=2, rope_in_sum=False, rope=True):
    """Exercise 4 written per head and per cached position, as a learner would, with switches for the slips."""
    d_r = d_r if rope else 0
    per_head = 2 * (d_c + d_r)  # the absorbed query against one latent and its rotary key
    if weighted_sum:
        per_head += 2 * (d_c + d_r if rope_in_sum else d_c)  # a weight times one latent, added up
    flops = per_head * (h if heads else 1)
    return flops / ((d_c + d_r) * bytes_per_number)


def test_mla_flops_per_byte():
    check = M.exercises.check_mla_flops_per_byte
    assert check(_mla_ratio).ok
    assert check(lambda h, d_c, d_r: h * (4 * d_c + 2 * d_r) / (2 * d_c + 2 * d_r)).ok
    assert_named(check(lambda h, d_c, d_r: _mla_ratio(h, d_c, d_r, weighted_sum=False)), "only the scores")
    assert_named(check(lambda h, d_c, d_r: _mla_ratio(h, d_c, d_r, heads=False)), "one head's arithmetic")
    assert_named(check(lambda h, d_c, d_r: _mla_ratio(h, d_c, d_r, bytes_per_number=1)), "FLOPs per number")
    assert_named(check(lambda h, d_c, d_r: 1.0), "as if absorbing were free")
    assert_named(check(lambda h, d_c, d_r: _mla_ratio(h, d_c, d_r, rope_in_sum=True)), "not the sum")
    assert_named(check(lambda h, d_c, d_r: _mla_ratio(h, d_c, d_r, rope=False)), "or if it were left out")
    assert_named(check(lambda h, d_c, d_r: None), "forget to `return`")
    assert_named(check(lambda h, d_c, d_r: [1.0, 2.0]), "must return one number")

    def unwritten(h, d_c, d_r):
        raise NotImplementedError

    assert_named(check(unwritten), "is not written yet")
