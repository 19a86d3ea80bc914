"""The exercise checkers: every right answer passes, and every typical wrong answer is named.

The wrong answers here are written the way a learner would write them (loops, a forgotten step),
not derived from the checkers' own lists of mistakes, so a checker that stops recognising a
mistake fails these tests.
"""

import numpy as np
import pytest

import mha_lessons as M
from mha_lessons.exercises import Verdict, compare


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


# ---------------------------------------------------------------- chapter 1

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


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda q, K, V: _loop_attention(q, K, V, 1.0), "not divided by sqrt(d_k)"),
        (lambda q, K, V: _loop_attention(q, K, V, 1 / len(q)), "divided by d_k"),
        (lambda q, K, V: _loop_attention(q, K, V, 1 / np.sqrt(len(q)), normalise=False), "do not sum to 1"),
        (lambda q, K, V: _loop_attention(q, K, V, 1 / np.sqrt(len(q)), softmax=False), "softmax is missing"),
        (lambda q, K, V: None, "forgot to `return`"),
        (lambda q, K, V: q @ V, "raised ValueError"),
    ],
)
def test_attend_one_typical_mistakes_are_named(wrong, words):
    verdict = M.exercises.check_attend_one(wrong)
    assert not verdict.ok and words in verdict.message, verdict.message


def test_band_mask_right_and_wrong():
    n = 5
    band = np.array([[abs(i - j) <= 1 for j in range(n)] for i in range(n)])
    assert M.exercises.check_band_mask(band).ok
    cases = {
        "swapped": ~band,
        "diagonal is missing": band & ~np.eye(n, dtype=bool),
        "only forward": np.triu(band),
        "only backward": np.tril(band),
        "dtype int64": band.astype(np.int64),
        "shape (4, 4)": band[:4, :4],
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_band_mask(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)
