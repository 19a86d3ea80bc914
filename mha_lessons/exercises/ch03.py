"""Checkers for chapter 3 (multi-head attention).

Axis names: h heads, n tokens, d_model the width of a token, d_k = d_model / h the width of a head.
The test arrays have n, h and d_k all different, so that every wrong order of the axes shows in the
shape or in the values, and entries that tell token and feature apart (entry = 10 t + f).
"""

import numpy as np

from ..multihead import combine_heads, split_heads
from ._verdict import Verdict, call_learner, compare


def _name(function, default):
    """The learner's name for their function (``my_split_heads``), or ``default`` for a lambda."""
    name = getattr(function, "__name__", default)
    return default if name == "<lambda>" else name


def _tokens(n, d_model):
    """An (n, d_model) array whose entry (t, f) is 10 t + f: token t, feature f, readable at a glance."""
    return 10.0 * np.arange(n)[:, None] + np.arange(d_model)[None, :]


def check_head_choices(choices, d_model=768):
    """Check a dict ``{h: d_k}`` of every number of heads h from 1 to 16 that divides ``d_model``.

    >>> import mha_lessons as M
    >>> M.exercises.check_head_choices({h: 768 // h for h in range(1, 17) if 768 % h == 0})
    Right: 8 ways to cut 768 features into equal heads.
    """
    expected = {h: d_model // h for h in range(1, 17) if d_model % h == 0}
    if choices is None:
        return Verdict(False, "your answer is None: nothing computed yet.")
    if not isinstance(choices, dict):
        try:
            heads = sorted(int(h) for h in choices)
        except (TypeError, ValueError):
            return Verdict(False, f"expected a dict {{h: d_k}}, got a {type(choices).__name__}.")
        if heads == sorted(expected):
            return Verdict(False, "these are the right numbers of heads; give each one's d_k too, as a dict {h: d_k}.")
        return Verdict(False, f"expected a dict {{h: d_k}}, got a {type(choices).__name__}.")
    for h in choices:
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 1 <= h <= 16:
            return Verdict(False, f"{h!r} is not a number of heads between 1 and 16.")
    for h in sorted(choices):
        if h not in expected:
            return Verdict(False, f"h = {h} does not divide {d_model}: {d_model} / {h} = {d_model / h:.4g} is not "
                                  "a whole number, so the heads could not all have the same width.")
    for h in expected:
        if h not in choices:
            return Verdict(False, f"h = {h} is missing: {d_model} % {h} == 0.")
        try:
            d_k = float(choices[h])
        except (TypeError, ValueError):
            return Verdict(False, f"for h = {h}, d_k should be one number, not {choices[h]!r}.")
        if d_k != expected[h]:
            if d_k == d_model:
                return Verdict(False, f"for h = {h}, d_k is not {d_model}: the heads share the {d_model} features, "
                                      f"each gets d_model / h of them.")
            return Verdict(False, f"for h = {h}, d_k should be d_model / h, not {choices[h]!r}.")
    return Verdict(True, f"{len(expected)} ways to cut {d_model} features into equal heads.")


def check_split_heads(split_heads_function):
    """Check ``split_heads(x, h)``: (n, d_model) -> (h, n, d_k), head i holding features [i d_k, (i+1) d_k).

    It is called on a (4, 6) array with h = 2 and then h = 3. Recognised mistakes: reshaping straight
    to (h, n, d_k) without a transpose; heads that take every h-th feature ((n, d_k, h) order); the
    transpose forgotten after the right reshape; each head's features as rows, (h, d_k, n).

    >>> import mha_lessons as M
    >>> M.exercises.check_split_heads(M.split_heads)
    Right: head i gets features i·d_k to (i+1)·d_k - 1 of every token, for h = 2 and h = 3.
    """
    n, d_model = 4, 6
    x = _tokens(n, d_model)
    name = _name(split_heads_function, "split_heads")
    for h in (2, 3):
        d_k = d_model // h
        answer, failure = call_learner(split_heads_function, x.copy(), h, name=name)
        if failure is not None:
            return failure
        no_transpose = ("reshaping (n, d_model) straight to (h, n, d_k) keeps the order of the numbers in memory, "
                        "so head 0 gets whole rows of the first tokens instead of the first d_k features of every "
                        "token. Reshape to (n, h, d_k), then move the head axis to the front.")
        other = 5 - h  # the other number of heads of the check, 3 or 2
        mistakes = [
            (split_heads(x, other), f"asked for {h} heads, your function made {other}: use the argument h."),
            (x.reshape(h, n, d_k), no_transpose),  # (n, d_model) -> (h, n, d_k): the rows cut at the wrong places
            (x.reshape(h, d_k, n).swapaxes(1, 2), no_transpose),  # (h, d_k, n) -> (h, n, d_k): same cut
            (x.reshape(n, d_k, h).transpose(2, 0, 1),  # (n, d_k, h) -> (h, n, d_k)
             "head i got features i, i + h, i + 2h, ... (every h-th one): reshape to (n, h, d_k), not (n, d_k, h), "
             "so that each head's features are consecutive."),
            (x.reshape(n, h, d_k),  # (n, d_model) -> (n, h, d_k), the transpose forgotten
             "the shape is (n, h, d_k): the reshape is right, now move the head axis to the front, "
             "(n, h, d_k) -> (h, n, d_k), with a transpose."),
            (x.reshape(n, h, d_k).transpose(1, 2, 0),  # (n, h, d_k) -> (h, d_k, n)
             "each head holds its features as rows, shape (h, d_k, n); the tokens come first: (h, n, d_k)."),
        ]
        verdict = compare(answer, split_heads(x, h), mistakes, what=f"{name}(x, {h}) for x of shape {x.shape}")
        if not verdict:
            return verdict
    return Verdict(True, "head i gets features i·d_k to (i+1)·d_k - 1 of every token, for h = 2 and h = 3.")


def check_combine_heads(combine_heads_function):
    """Check ``combine_heads(x)``: (h, n, d_k) -> (n, h d_k), the inverse of ``split_heads``.

    It is called on ``M.split_heads`` of a (4, 6) array with h = 2, so the right answer is that array.
    Recognised mistakes: a reshape without the transpose, the heads' features interleaved, the heads
    stacked as extra tokens, the final reshape forgotten.

    >>> import mha_lessons as M
    >>> M.exercises.check_combine_heads(M.combine_heads)
    Right: your combine_heads undoes split_heads exactly.
    """
    n, d_model, h = 4, 6, 2
    x = _tokens(n, d_model)
    heads = split_heads(x, h)  # (h, n, d_k)
    name = _name(combine_heads_function, "combine_heads")
    answer, failure = call_learner(combine_heads_function, heads.copy(), name=name)
    if failure is not None:
        return failure
    mistakes = [
        (heads.reshape(n, d_model),  # (h, n, d_k) -> (n, d_model) without moving the axes
         "reshaping (h, n, d_k) straight to (n, d_model) mixes tokens in one row. Transpose to (n, h, d_k) first, "
         "then merge the last two axes."),
        (heads.transpose(1, 2, 0).reshape(n, d_model),  # (h, n, d_k) -> (n, d_k, h) -> (n, d_model)
         "the features of the heads are interleaved: transpose to (n, h, d_k), not (n, d_k, h), so that head 0's "
         "features come first, then head 1's."),
        (np.concatenate(list(heads), axis=0),  # h blocks (n, d_k) -> (h n, d_k)
         "the heads are stacked as extra tokens (h·n rows of width d_k); join them along the features, axis=-1."),
        (heads.transpose(1, 0, 2),  # (h, n, d_k) -> (n, h, d_k)
         "the transpose is right; now merge the last two axes: reshape (n, h, d_k) -> (n, h·d_k)."),
    ]
    return compare(answer, combine_heads(heads), mistakes, what=f"{name}(heads)",
                   right=f"your {name} undoes split_heads exactly.")
