"""Checkers for chapter 6 (masks in practice)."""

import numpy as np

from ...attention import causal_mask, padding_mask
from ...masks import combine_masks, query_padding_mask, to_torch_key_padding_mask
from ._verdict import Verdict, call_learner, compare


def _boolean_answer(answer, expected, what):
    """``answer`` as an array broadcast to ``expected``'s shape, or a Verdict naming why it cannot be compared."""
    if answer is None:
        return None, compare(None, expected, what=what)
    answer = np.asarray(answer)
    if answer.dtype == object:
        return None, Verdict(False, f"{what} is not an array of booleans (numpy reads it as objects).")
    try:
        shape = np.broadcast_shapes(answer.shape, expected.shape)
    except ValueError:
        shape = None
    if shape != expected.shape:
        return None, Verdict(False, f"{what} has shape {answer.shape}; expected shape {expected.shape}.")
    if answer.dtype != np.bool_:
        return None, Verdict(False, f"{what} has dtype {answer.dtype}; masks are boolean (True = may attend).")
    return np.broadcast_to(answer, expected.shape), None


def check_batch_mask(build_mask):
    """Check ``build_mask(lengths, n)``: the (B, n, n) self-attention mask of a padded batch.

    Query i of sequence b may attend to key j when j <= i (causal) and key j is
    a real token (j < lengths[b]); rows of padded queries are left as those two
    rules make them. An answer that broadcasts to (B, n, n) is accepted.

    >>> import mha_lessons as M
    >>> M.exercises.check_batch_mask(lambda lengths, n: M.padding_mask(lengths, n) & M.causal_mask(n))
    Right: causal and key padding, combined for the whole batch.
    """
    lengths, n = [5, 2, 4], 5
    answer, failure = call_learner(build_mask, list(lengths), n)
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    pad = padding_mask(lengths, n)  # (B, 1, m)
    causal = causal_mask(n)  # (n, m)
    expected = combine_masks(pad, causal)  # (B, n, m)
    answer, failure = _boolean_answer(answer, expected, "the mask")
    if failure is not None:
        return failure
    shape = expected.shape
    query_pad = query_padding_mask(lengths, n)  # (B, n, 1)
    off_by_one = (np.arange(n) <= np.asarray(lengths)[:, None])[:, None, :]  # (B, 1, m): one key too many
    mistakes = [
        (~expected, "True and False are swapped: in this course True means 'may attend' "
                    "(True = blocked is torch.nn.MultiheadAttention's convention)."),
        (np.broadcast_to(causal, shape),
         "the padded keys are not masked: combine the causal mask with the padding mask."),
        (np.broadcast_to(pad, shape), "the causal part is missing: query i may only see keys 0 .. i."),
        (pad & np.triu(np.ones((n, n), dtype=bool)),
         "the causal mask points the wrong way: query i may see keys 0 .. i, on and below the diagonal."),
        # with the causal mask, masking the padded queries (rows) blocks exactly the pairs that masking
        # them as well as the padded keys does: one mistake, two ways to make it
        (causal & query_pad, "the rows of the padded queries are all False: the padding masks the queries. Mask "
                             "only the padded keys (columns), with a (B, 1, m) mask that broadcasts over the "
                             "queries; padded query rows are ignored afterwards (torch.nn.MultiheadAttention "
                             "gives NaN for an all-False row with its default need_weights=True)."),
        (off_by_one & causal, "off by one: sequence b's real tokens are positions 0 .. lengths[b] - 1, "
                              "so key j is real when j < lengths[b]."),
    ]
    return compare(answer, expected, mistakes, what="the mask",
                   right="causal and key padding, combined for the whole batch.")


def check_torch_key_padding_mask(convert):
    """Check ``convert(mask)``: our (B, 1, m) padding mask turned into torch's (B, m) ``key_padding_mask``.

    torch's ``key_padding_mask`` says True = ignore this key; ours says True =
    may attend. A torch tensor as the answer is fine (it is read with ``np.asarray``).

    >>> import mha_lessons as M
    >>> M.exercises.check_torch_key_padding_mask(lambda mask: ~mask[:, 0, :])
    Right: True marks the padded keys, one row per sequence, as torch wants.
    """
    mask = padding_mask([3, 1, 4], 4)  # (B, 1, m)
    answer, failure = call_learner(convert, mask.copy())
    if failure is not None:
        return failure
    expected = to_torch_key_padding_mask(mask)  # (B, m)
    answer = np.asarray(answer)
    if answer.shape == expected.shape and answer.dtype != np.bool_:
        return Verdict(False, f"the key padding mask has dtype {answer.dtype}; return booleans: torch adds a float "
                              f"key_padding_mask to the scores, so a 1.0 there blocks nothing.")
    mistakes = [
        (mask[:, 0, :], "not negated: torch's key_padding_mask says True = ignore this key, the opposite of "
                        "ours, so pass ~mask."),
        (~mask, "torch wants shape (B, m): drop the query axis of size 1 (mask[:, 0, :])."),
        (mask, "neither negated nor reshaped: torch wants ~mask[:, 0, :], shape (B, m), True = ignore."),
        (expected.T, "the axes are swapped: torch wants one row per sequence, shape (B, m)."),
    ]
    return compare(answer, expected, mistakes, what="the key padding mask",
                   right="True marks the padded keys, one row per sequence, as torch wants.")


def check_sliding_window_mask(sliding_window):
    """Check ``sliding_window(n, w)``: the (n, n) causal mask in which query i sees keys i - w + 1 .. i.

    Each token sees itself and the w - 1 tokens before it (fewer near the
    start). Checked for n = 7, w = 3 and for a window longer than the sequence
    (n = 4, w = 6), where the mask is the plain causal one.

    >>> import numpy as np, mha_lessons as M
    >>> def sliding_window(n, w):
    ...     gap = np.arange(n)[:, None] - np.arange(n)[None, :]   # (n, 1) - (1, n) -> (n, n): i - j
    ...     return (gap >= 0) & (gap < w)
    >>> M.exercises.check_sliding_window_mask(sliding_window)
    Right: each token sees itself and the w - 1 tokens before it.
    """
    for n, w in ((7, 3), (4, 6)):
        answer, failure = call_learner(sliding_window, n, w)
        if failure is not None:
            return failure
        gap = np.arange(n)[:, None] - np.arange(n)[None, :]  # (n, 1) - (1, n) -> (n, n): i - j
        expected = (gap >= 0) & (gap < w)
        answer, failure = _boolean_answer(answer, expected, f"the mask for n = {n}, w = {w}")
        if failure is not None:
            return failure
        mistakes = [
            (~expected, "True and False are swapped: in this course True means 'may attend'."),
            ((gap >= 0) & (gap <= w), "the window is one too wide: w counts the token itself, so query i sees "
                                      "keys i - w + 1 .. i."),
            ((gap >= 0) & (gap < w - 1), "the window is one too narrow: query i sees keys i - w + 1 .. i, "
                                         "w of them counting itself."),
            ((gap > 0) & (gap < w), "the diagonal is missing: each token may also attend to itself."),
            (np.abs(gap) < w, "this window also looks ahead: it must be causal (no key after the query)."),
            ((gap <= 0) & (gap > -w), "this window looks forward: query i should see the keys before it."),
            (gap >= 0, "the window is missing: this is the plain causal mask; cut it to the last w keys."),
        ]
        verdict = compare(answer, expected, mistakes, what=f"the mask for n = {n}, w = {w}",
                          right="each token sees itself and the w - 1 tokens before it.")
        if not verdict:
            return verdict
    return verdict


def _two_layer_changes(x, x_other, params_1, params_2, first_mask, second_mask):
    """(B, n) boolean: where the output of two self-attention layers differs between ``x`` and ``x_other``."""
    from ...multihead import multihead_attention

    def stack(inputs):
        y1, _ = multihead_attention(inputs, inputs, inputs, params_1, mask=first_mask)  # (B, n, d_model)
        y2, _ = multihead_attention(y1, y1, y1, params_2, mask=second_mask)  # (B, n, d_model)
        return y2

    return ~np.isclose(stack(x), stack(x_other), rtol=0, atol=1e-12).all(axis=-1)  # (B, n)


def check_changed_positions(changed_positions):
    """Check ``changed_positions(x, x_other, params_1, params_2, pad, second_mask)``: a (B, n) boolean array.

    Two self-attention layers run on ``x`` and on ``x_other`` (the same batch with other filler at the padded
    positions); the first layer gets the key padding mask ``pad``, the second ``second_mask``. True marks the
    positions whose output of the second layer differs between the two runs. Checked with
    ``second_mask = pad`` and with ``second_mask = None``.

    >>> import numpy as np, mha_lessons as M
    >>> def changed_positions(x, x_other, params_1, params_2, pad, second_mask):
    ...     def stack(inputs):
    ...         y1, _ = M.multihead_attention(inputs, inputs, inputs, params_1, mask=pad)
    ...         return M.multihead_attention(y1, y1, y1, params_2, mask=second_mask)[0]
    ...     return np.abs(stack(x) - stack(x_other)).max(axis=-1) > 1e-12
    >>> M.exercises.check_changed_positions(changed_positions)
    Right: the filler changes only padded positions while every layer masks it.
    """
    from ...multihead import init_params

    lengths, n, d_model, h = [5, 3, 4], 5, 8, 2
    rng = np.random.default_rng(6)
    pad = padding_mask(lengths, n)  # (B, 1, m)
    real = pad[:, 0, :]  # (B, n)
    x = rng.normal(size=(len(lengths), n, d_model))  # (B, n, d_model)
    x_other = x.copy()
    x_other[~real] = rng.normal(scale=3.0, size=(int((~real).sum()), d_model))  # other filler
    params_1, params_2 = init_params(d_model, h, seed=61), init_params(d_model, h, seed=62)
    # (B, n): True at every token of a sequence that has padding
    padded_rows = np.broadcast_to(~real.all(axis=-1, keepdims=True), real.shape)
    verdict = None
    for second_mask, case in ((pad, "with pad in both layers"), (None, "with second_mask=None")):
        answer, failure = call_learner(changed_positions, x.copy(), x_other.copy(), params_1, params_2,
                                       pad.copy(), second_mask, name="changed_positions")
        if failure is not None:  # a Verdict is false when it reports a mistake
            return failure
        expected = _two_layer_changes(x, x_other, params_1, params_2, pad, second_mask)  # (B, n)
        what = f"your array {case}"
        if answer is not None and np.shape(answer) == (*expected.shape, d_model):
            return Verdict(False, f"{what} has one entry per feature; reduce them to one per position "
                                  f"(.any(axis=-1)), shape (B, n).")
        answer, failure = _boolean_answer(answer, expected, what)
        if failure is not None:
            return failure
        mistakes = [
            (~expected, "True and False are swapped: True marks the positions whose output changed."),
            (np.zeros_like(expected), "nothing changed: run the stack on x_other as well as on x, and compare."),
        ]
        if second_mask is None:
            mistakes.append((~real, "without the mask in layer 2 the real tokens change too: give the second "
                                    "layer second_mask, and run both layers."))
        else:
            mistakes.append((padded_rows, "every token of a padded sequence changed: give the first layer "
                                          "the mask pad as well."))
        verdict = compare(answer, expected, mistakes, what=what,
                          right="the filler changes only padded positions while every layer masks it.")
        if not verdict:
            return verdict
    return verdict


def check_chunk_outputs(chunk_outputs):
    """Check ``chunk_outputs(x_new, x_all, params)``: causal self-attention of n new tokens against a cache.

    ``x_all``, shape (m, d_model), holds every token so far, the n new ones last; ``x_new`` is its last n
    rows. The answer, shape (n, d_model), must equal the last n rows of the causal layer ``params`` run on
    the whole of ``x_all``. Checked for n = 3 new tokens after 4 earlier ones and for n = 1 after 5.

    >>> import mha_lessons as M
    >>> def chunk_outputs(x_new, x_all, params):
    ...     mask = M.causal_mask(len(x_new), len(x_all), align="bottom-right")   # (n, m)
    ...     return M.multihead_attention(x_new, x_all, x_all, params, mask=mask)[0]
    >>> M.exercises.check_chunk_outputs(chunk_outputs)
    Right: new token i stands at position m - n + i and sees keys 0 .. m - n + i.
    """
    from ...multihead import init_params, multihead_attention

    d_model, h = 8, 2
    rng = np.random.default_rng(65)
    params = init_params(d_model, h, seed=65)
    for name in ("b_q", "b_k", "b_v", "b_o"):  # non-zero biases, so that no term can go missing unseen
        setattr(params, name, rng.normal(scale=0.5, size=d_model))
    verdict = None
    for n, m in ((3, 7), (1, 6)):  # n new tokens, m tokens in all (chapter 6's letters)
        x_all = rng.normal(size=(m, d_model))  # (m, d_model): m - n earlier tokens, then n new ones
        x_new = x_all[m - n:]  # (n, d_model)
        answer, failure = call_learner(chunk_outputs, x_new.copy(), x_all.copy(), params, name="chunk_outputs")
        if failure is not None:  # a Verdict is false when it reports a mistake
            return failure
        what = f"your output for n = {n} new tokens after {m - n} earlier ones"
        if isinstance(answer, tuple) and len(answer) == 2:
            return Verdict(False, f"{what} is a pair: multihead_attention returns (outputs, weights); "
                                  f"return only the outputs.")
        whole, _ = multihead_attention(x_all, x_all, x_all, params, mask=causal_mask(m))  # (m, d_model)
        expected = whole[m - n:]  # (n, d_model): the rows of the new tokens

        def chunk(mask, keys=x_all):
            return multihead_attention(x_new, keys, keys, params, mask=mask)[0]  # (n, d_model)

        before_itself = np.arange(m) < m - n + np.arange(n)[:, None]  # (n, m): key j < m - n + i
        mistakes = [
            (chunk(causal_mask(n, m)),
             "top-left causal mask used for new queries against a cache: causal_mask(n, m) lets new token i "
             "see keys 0 .. i, as if it stood at position i. It stands at position m - n + i, so it may see "
             "keys 0 .. m - n + i: the bottom-right mask, causal_mask(n, m, align=\"bottom-right\")."),
            (chunk(None), "no mask: each new token also sees the new tokens after it. New token i may see keys "
                          "0 .. m - n + i."),
            (chunk(causal_mask(n), keys=x_new), "the cached tokens are missing: the new tokens attend only to "
                                                "one another. Use the keys and values of x_all."),
            (chunk(before_itself), "each new token must also see itself: key j is allowed when j <= m - n + i."),
            (whole, "these are the outputs of all m tokens: return only those of the n new ones, computed from "
                    "their queries alone."),
        ]
        verdict = compare(answer, expected, mistakes, what=what,
                          right="new token i stands at position m - n + i and sees keys 0 .. m - n + i.")
        if not verdict:
            return verdict
    return verdict
