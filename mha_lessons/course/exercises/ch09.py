"""Checkers for chapter 8 (attention at inference time: the key/value cache, multi-query and grouped-query attention)."""

import numpy as np

from ...inference import kv_cache_bytes
from ._verdict import Verdict, call_learner, compare

# The question of exercise 1: the published LLaMA-65B shape (Touvron et al. 2023, "LLaMA: Open and Efficient
# Foundation Language Models", Table 2: 80 layers, d_model 8192, 64 heads) with 8 key/value heads, as in the
# grouped-query variant of the Llama 2 paper (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat
# Models", appendix A.2.1, which uses 8 key/value projections).
CACHE_QUESTION = dict(seq_len=4096, num_layers=80, num_heads=64, num_kv_heads=8, d_k=8192 // 64, batch=1)


def check_cache_bytes(answer):
    """Check the bytes of the float16 key/value cache of exercise 1 (the LLaMA-65B shape with 8 key/value heads).

    >>> import mha_lessons as M
    >>> M.exercises.check_cache_bytes(2 * 80 * 8 * 4096 * 128 * 2)
    Right: 2 (k, v) · 80 layers · 8 heads · 4096 positions · 128 features · 2 bytes.
    """
    c = CACHE_QUESTION
    expected = kv_cache_bytes(c["seq_len"], c["num_layers"], c["num_kv_heads"], c["d_k"], batch=c["batch"])
    g = c["num_heads"] // c["num_kv_heads"]
    mistakes = [
        (expected * g, "that is 8 times too much: either it counts one key/value head per query head (64 heads, "
                       "or d_model columns), where grouped-query attention caches only the 8 shared key/value heads, "
                       "or it is in bits instead of bytes."),
        (expected / 2, "only the keys are counted: the values take the same room again (a factor 2)."),
        (expected / c["num_layers"], "that is one layer's cache; each of the 80 layers keeps its own."),
        (expected * 2, "float16 numbers take 2 bytes each, not 4."),
        (expected / 2**30, "that is in GiB; give the number of bytes."),
        (expected / 1e9, "that is in GB; give the number of bytes."),
    ]
    return compare(answer, expected, mistakes, what="your number of bytes",
                   right="2 (k, v) · 80 layers · 8 heads · 4096 positions · 128 features · 2 bytes.")


def check_expand_kv(expand_kv):
    """Check ``expand_kv(k, num_heads)``: (..., h_kv, m, d_k) -> (..., h, m, d_k), query head i gets kv head i // g.

    Called on keys with one batch axis and with none; the mistakes it names are np.tile's order, the
    repeat along the wrong axis, and repeating h times instead of g.

    >>> import numpy as np, mha_lessons as M
    >>> M.exercises.check_expand_kv(lambda k, h: np.repeat(k, h // k.shape[-3], axis=-3))
    Right: query head i reads key/value head i // g, with or without batch axes.
    """
    rng = np.random.default_rng(8)
    h, h_kv = 6, 2
    g = h // h_kv
    k = rng.normal(size=(2, h_kv, 5, 3))  # (B, h_kv, m, d_k)
    answer, failure = call_learner(expand_kv, k.copy(), h, name="expand_kv")
    if failure is not None:
        return failure
    expected = np.repeat(k, g, axis=-3)  # (B, h_kv, m, d_k) -> (B, h, m, d_k)
    mistakes = [
        (np.tile(k, (1, g, 1, 1)),
         "the heads come out in np.tile's order (kv heads 0, 1, 0, 1, ...), so query head i reads kv head i % h_kv. "
         "Consecutive query heads share a kv head: head i reads i // g, which is np.repeat's order."),
        (np.repeat(k, g, axis=-2), "the positions were repeated (axis -2); repeat along the head axis, -3."),
        (np.repeat(k, g, axis=0), "the batch axis was repeated; repeat along the head axis, -3."),
        (np.repeat(k, h, axis=-3), "each kv head was repeated h times; it serves g = h / h_kv query heads."),
        (np.tile(k, (1, h, 1, 1)), "each kv head appears h times, in np.tile's order; repeat each one g = h / h_kv "
                                   "times with np.repeat."),
    ]
    verdict = compare(answer, expected, mistakes, what="expand_kv(k, 6) for k of shape (2, 2, 5, 3)",
                      right="query head i reads key/value head i // g.")
    if not verdict:
        return verdict
    k3 = k[0]  # (h_kv, m, d_k): no batch axis
    answer, failure = call_learner(expand_kv, k3.copy(), h, name="expand_kv")
    if failure is not None:
        return Verdict(False, f"right with a batch axis, but without one {failure.message}")
    mistakes = [(np.repeat(k3, g, axis=1), "right with one batch axis only: axis 1 is the head axis when there is "
                                           "exactly one batch axis. Count from the end: axis=-3.")]
    return compare(answer, np.repeat(k3, g, axis=-3), mistakes, what="expand_kv(k, 6) for k of shape (2, 5, 3)",
                   right="query head i reads key/value head i // g, with or without batch axes.")


def check_mean_pool_kv(mean_pool_kv):
    """Check ``mean_pool_kv(w, num_heads, num_kv_heads)``: (d_model, h d_k) -> (d_model, h_kv d_k).

    The columns of the g consecutive heads of each group are averaged (the conversion of a multi-head
    checkpoint in Ainslie et al. 2023). The mistakes it names: strided groups, a sum instead of a mean,
    keeping one head per group, averaging the features of a head.

    >>> import mha_lessons as M
    >>> M.exercises.check_mean_pool_kv(lambda w, h, h_kv: w.reshape(len(w), h_kv, h // h_kv, -1).mean(2).reshape(len(w), -1))
    Right: each key/value head is the mean of the g consecutive heads of its group.
    """
    rng = np.random.default_rng(80)
    d_model, h, h_kv = 12, 6, 2
    g, d_k = h // h_kv, d_model // h
    w = rng.normal(size=(d_model, d_model))  # (d_model, h d_k): columns [i d_k, (i + 1) d_k) are head i
    answer, failure = call_learner(mean_pool_kv, w.copy(), h, h_kv, name="mean_pool_kv")
    if failure is not None:
        return failure
    grouped = w.reshape(d_model, h_kv, g, d_k)  # (d_model, h d_k) -> (d_model, h_kv, g, d_k)
    expected = grouped.mean(axis=2).reshape(d_model, h_kv * d_k)  # (d_model, h_kv, d_k) -> (d_model, h_kv d_k)
    strided = w.reshape(d_model, g, h_kv, d_k).mean(axis=1).reshape(d_model, h_kv * d_k)  # heads j, j + h_kv, ...
    mistakes = [
        (strided, "each group holds heads j, j + h_kv, j + 2 h_kv, ... (strided); a group is g consecutive heads, "
                  "the ones that share a key/value head in grouped_query_attention."),
        (grouped.sum(axis=2).reshape(d_model, h_kv * d_k), "the heads of a group are summed; mean pooling divides "
                                                           "by g."),
        (grouped[:, :, 0].reshape(d_model, h_kv * d_k), "this keeps the first head of each group; mean pooling "
                                                        "averages all g of them."),
        (grouped.mean(axis=3).reshape(d_model, h), "this averages the d_k features inside each head; average "
                                                   "over the heads of a group and keep the features."),
        (w.reshape(h_kv, g, d_k, d_model).mean(axis=1).reshape(h_kv * d_k, d_model),
         "the rows were pooled; rows are input features (x @ w), the heads are the columns."),
    ]
    return compare(answer, expected, mistakes, what="mean_pool_kv(w, 6, 2) for w of shape (12, 12)",
                   right="each key/value head is the mean of the g consecutive heads of its group.")


def check_earlier_changed(earlier_changed):
    """Check ``earlier_changed(x, params, causal)``: which earlier outputs change when the last token arrives.

    ``x`` is (n, d_model). Return a boolean (n - 1,) array, True at position i when row i of the
    self-attention output on ``x[:-1]`` differs from row i of the output on all of ``x``, with a causal
    mask when ``causal`` is True and no mask otherwise. Checked for both cases.

    >>> import numpy as np, mha_lessons as M
    >>> def earlier_changed(x, params, causal):
    ...     n = len(x)
    ...     old, _ = M.multihead_attention(x[:-1], x[:-1], x[:-1], params, M.causal_mask(n - 1) if causal else None)
    ...     new, _ = M.multihead_attention(x, x, x, params, M.causal_mask(n) if causal else None)
    ...     return ~np.isclose(new[:-1], old).all(axis=-1)
    >>> M.exercises.check_earlier_changed(earlier_changed)
    Right: causal rows stay put; without the mask every earlier row changes.
    """
    from ...attention import causal_mask
    from ...multihead import init_params, multihead_attention

    n, d_model, h = 6, 8, 2
    x = np.random.default_rng(81).normal(size=(n, d_model))  # (n, d_model)
    params = init_params(d_model, h, seed=82)
    answers, expected = [], []
    for causal in (True, False):
        answer, failure = call_learner(earlier_changed, x.copy(), params, causal, name="earlier_changed")
        if failure is not None:  # a Verdict is false when it reports a mistake
            return failure
        old, _ = multihead_attention(x[:-1], x[:-1], x[:-1], params, causal_mask(n - 1) if causal else None)
        new, _ = multihead_attention(x, x, x, params, causal_mask(n) if causal else None)
        expected.append(~np.isclose(new[:-1], old, rtol=0, atol=1e-12).all(axis=-1))  # (n - 1,)
        what = f"your array for causal={causal}"
        if answer is None or np.shape(answer) != (n - 1,):
            if np.shape(answer) == (n,):
                return Verdict(False, f"{what} has n entries; the new token has no old output: "
                                      f"give the n - 1 earlier ones.")
            if np.shape(answer) in ((n - 1, d_model), (n, d_model)):
                return Verdict(False, f"{what} has one entry per feature; give one per position "
                                      f"(.any(axis=-1)).")
            return compare(answer, expected[-1], what=what)
        answers.append(answer)
    expected = np.stack(expected)  # (2, n - 1): row 0 causal, row 1 no mask
    old_unmasked, _ = multihead_attention(x[:-1], x[:-1], x[:-1], params)  # the shorter run forgot the mask
    new_causal, _ = multihead_attention(x, x, x, params, causal_mask(n))
    one_mask = ~np.isclose(new_causal[:-1], old_unmasked, rtol=0, atol=1e-12).all(axis=-1)  # (n - 1,)
    yes, no = np.ones(n - 1), np.zeros(n - 1)
    mistakes = [
        (~expected, "True and False are swapped: True marks the earlier outputs that changed."),
        (np.stack([yes, yes]), "with the causal mask no earlier row can see the new token: use a causal mask "
                               "in both runs and compare row i with row i."),
        (np.stack([one_mask, expected[1]]), "the causal case has the mask in one run only: the shorter "
                                            "sequence needs causal_mask(n - 1)."),
        (np.stack([no, no]), "without a mask the new key enters every row's softmax: leave the mask out of "
                             "both runs when causal is False."),
    ]
    try:
        answers = np.stack([np.asarray(a, dtype=float) for a in answers])  # (2, n - 1)
    except (TypeError, ValueError):
        return Verdict(False, "your arrays are not arrays of True/False.")
    return compare(answers, expected, mistakes, what="your arrays for causal=True, False",
                   right="causal rows stay put; without the mask every earlier row changes.")
