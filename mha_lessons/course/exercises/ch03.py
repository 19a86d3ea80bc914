"""Checkers for chapter 3 (multi-head attention).

Axis names: h heads, n tokens, d_model the width of a token, d_k = d_model / h the width of a head.
The test arrays have n, h and d_k all different, so that every wrong order of the axes shows in the
shape or in the values, and entries that tell token and feature apart (entry = 10 t + f).
"""

from dataclasses import replace

import numpy as np

from ...lookup import relative_error
from ...multihead import combine_heads, init_params, multihead_attention, split_heads
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


def _layer_with_biases():
    """x (5, 8) and an 8-wide layer with h = 2 heads whose four biases are all non-zero."""
    rng = np.random.default_rng(6)
    params = init_params(8, 2, seed=7)
    b_q, b_k, b_v, b_o = rng.normal(size=(4, 8))
    return rng.normal(size=(5, 8)), replace(params, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)


def _copy(params):
    """A copy of the parameters that the learner's function may change freely."""
    return replace(params, **{name: array.copy() for name, array in params.arrays().items()})


def check_key_bias_change(key_bias_change):
    """Check ``key_bias_change(x, params, b_k)``: the output with key bias b_k minus the output with params.

    Self-attention on x (5, 8), 2 heads, all biases non-zero. The key bias adds q·b_K to a whole row
    of scores, which the softmax cancels, so the right change is zero up to rounding. It is called
    with b_k = 0 and with random numbers. Recognised mistakes: another bias changed (b_Q, b_V or
    b_O), the new or old output returned instead of the change, a single number returned.

    >>> import mha_lessons as M
    >>> from dataclasses import replace
    >>> def change(x, params, b_k):
    ...     return (M.multihead_attention(x, x, x, replace(params, b_k=b_k))[0]
    ...             - M.multihead_attention(x, x, x, params)[0])
    >>> M.exercises.check_key_bias_change(change)
    Right: zero or random, b_K changed the output by rounding only: no effect.
    """
    x, params = _layer_with_biases()
    name = _name(key_bias_change, "key_bias_change")

    def output(**biases):  # the layer's output (n, d_model) with some biases replaced
        return multihead_attention(x, x, x, replace(params, **biases))[0]

    y = output()
    for b_k in (np.zeros(8), np.random.default_rng(9).normal(size=8) * 3.0):
        answer, failure = call_learner(key_bias_change, x.copy(), _copy(params), b_k.copy(), name=name)
        if failure is not None:
            return failure
        if answer is not None and np.ndim(answer) == 0 and not isinstance(answer, str):
            return Verdict(False, f"return the change of every output entry, shape {y.shape}, not one number.")
        expected = output(b_k=b_k) - y  # (n, d_model), zero up to rounding
        not_change = "this is an output; return the change: new output minus old."
        mistakes = [(y, not_change), (output(b_k=b_k), not_change)]  # equal: b_K has no effect
        for bias, words in (("b_q", "b_Q, the query bias"), ("b_v", "b_V, the value bias"),
                            ("b_o", "b_O, the output bias")):
            change = output(**{bias: b_k}) - y
            message = f"you changed {words}; the exercise replaces b_K: params.b_k."
            mistakes += [(change, message), (-change, message)]
        verdict = compare(answer, expected, mistakes, what=f"the change that {name} returns")
        if not verdict:
            return verdict
    return Verdict(True, "zero or random, b_K changed the output by rounding only: no effect.")


def check_unexplained_fraction(unexplained_fraction):
    """Check ``unexplained_fraction(c1, c4, p)``: the part of [c1, c4] the best linear read-out of the blend misses.

    c1 and c4 (samples, d_content) are independent contents; one head sees z = p c1 + (1 - p) c4,
    the best linear read-out is a least-squares fit of [c1, c4] from z, and the fraction is its
    relative squared error (``M.lookup.relative_error``). It is called with p = 0.8 and p = 0.3 on
    the same samples. Recognised mistakes: p on the wrong content, p ignored (0.5 or 0.8 typed in),
    one content as the target, the explained fraction, a ratio of norms, no fitted read-out, 1/2
    stated instead of measured.

    >>> import numpy as np, mha_lessons as M
    >>> def fraction(c1, c4, p):
    ...     z = p * c1 + (1 - p) * c4
    ...     wanted = np.concatenate([c1, c4], axis=-1)
    ...     readout = np.linalg.lstsq(z, wanted, rcond=None)[0]
    ...     return M.lookup.relative_error(z @ readout, wanted)
    >>> M.exercises.check_unexplained_fraction(fraction)
    Right: one head misses 0.499 at p = 0.8 and 0.498 at p = 0.3: half, whatever p.
    """
    rng = np.random.default_rng(12)
    c1, c4 = rng.normal(size=(2, 5000, 4))  # (samples, d_content) each
    wanted = np.concatenate([c1, c4], axis=-1)  # (samples, 2 d_content)
    name = _name(unexplained_fraction, "unexplained_fraction")

    def missed(p, target=wanted, a=c1, b=c4):  # the fraction of target that a read-out of p a + (1 - p) b misses
        z = p * a + (1 - p) * b  # (samples, d_content)
        readout = np.linalg.lstsq(z, target, rcond=None)[0]  # (d_content, width of target)
        return relative_error(z @ readout, target)

    found = {}
    for p in (0.8, 0.3):
        answer, failure = call_learner(unexplained_fraction, c1.copy(), c4.copy(), p, name=name)
        if failure is not None:
            return failure
        if answer is not None and np.size(answer) > 1:
            return Verdict(False, f"{name} returned {np.size(answer)} numbers; it should return one fraction.")
        expected = missed(p)
        z = p * c1 + (1 - p) * c4
        mistakes = [
            (missed(1 - p), "p is on position 4; it is the weight of position 1: z = p c1 + (1 - p) c4."),
            (missed(0.5), f"this is the blend p = 0.5 of section 5; use the argument p (here {p})."),
            (missed(0.8), f"this is for p = 0.8 whatever the argument; use p (here {p})."),
            (missed(p, target=c1), "that is the part of c1 alone; the target is both contents, [c1, c4]."),
            (missed(p, target=c4), "that is the part of c4 alone; the target is both contents, [c1, c4]."),
            (1 - expected, "that is the explained fraction; the exercise asks for the part missed."),
            (np.sqrt(expected), "that is a ratio of norms; the fraction compares squared sizes."),
            (relative_error(np.concatenate([z, z], axis=-1), wanted),
             "z in both slots is not the best read-out; fit one with np.linalg.lstsq."),
            (0.5, "1/2 is the theory; measure it on the samples with a fitted read-out."),
        ]
        verdict = compare(np.squeeze(answer) if answer is not None else None, expected, mistakes,
                          what=f"{name}(c1, c4, {p})")
        if not verdict:
            return verdict
        found[p] = expected
    return Verdict(True, f"one head misses {found[0.8]:.3f} at p = 0.8 and {found[0.3]:.3f} at p = 0.3: "
                         "half, whatever p.")
