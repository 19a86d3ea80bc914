"""Checkers for chapter 10 (shrinking and serving the cache: grouped-query and latent attention)."""

import numpy as np

from ...decode_cost import kv_cache_bytes
from ...latent import cache_bytes, decode_attention_flops
from ._verdict import Verdict, call_learner, compare

# The question of exercise 1: the LLaMA-65B shape (Touvron et al. 2023, "LLaMA: Open and Efficient Foundation
# Language Models", Table 2: 80 layers, d_model 8192, 64 heads) with 8 key/value heads, the grouped variant that
# appendix A.2.1 of the Llama 2 paper describes (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned
# Chat Models"), at Llama 2's context of 4096 tokens (its Table 1).
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


def check_mla_flops_per_byte(mla_flops_per_byte):
    """Check ``mla_flops_per_byte(num_heads, d_latent, d_rope)``: FLOPs per byte of cache, absorbed MLA.

    One new query per sequence: every head scores its (d_c + d_rope)-wide absorbed query against each
    cached latent and rotary key and sums the d_c-wide latents; the cache holds d_c + d_rope 16-bit
    numbers per position. Called on three configurations, DeepSeek-V2's among them.

    >>> import mha_lessons as M
    >>> M.exercises.check_mla_flops_per_byte(lambda h, d_c, d_r: h * (2 * (d_c + d_r) + 2 * d_c) / (2 * (d_c + d_r)))
    Right: h (2 (d_c + d_rope) + 2 d_c) FLOPs on 2 (d_c + d_rope) bytes per cached position.
    """
    configurations = [(128, 512, 64), (16, 64, 0), (32, 256, 32)]  # (h, d_c, d_rope)
    answers = []
    for h, d_c, d_rope in configurations:
        answer, failure = call_learner(mla_flops_per_byte, h, d_c, d_rope, name="mla_flops_per_byte")
        if failure is not None:
            return failure
        answers.append(answer)
    expected, wrong = [], {name: [] for name in ("no_sum", "one_head", "numbers", "mha", "two_h")}
    for h, d_c, d_rope in configurations:
        f = decode_attention_flops(1, h, d_c, d_k=d_c, d_rope=d_rope)  # one cached position
        read = cache_bytes(1, 1, d_c, d_rope=d_rope)  # float16
        expected.append((f["scores"] + f["weighted_sum"]) / read)
        wrong["no_sum"].append(f["scores"] / read)
        wrong["one_head"].append((f["scores"] + f["weighted_sum"]) / h / read)
        wrong["numbers"].append((f["scores"] + f["weighted_sum"]) / (read / 2))
        wrong["mha"].append(1.0)  # as if absorbing changed nothing: MHA's 1 FLOP per byte
        wrong["two_h"].append(2.0 * h)  # 4 d FLOPs on 2 d bytes per head: the rotary key in the sum, or left out
    if any(a is None for a in answers):
        return Verdict(False, "mla_flops_per_byte returned None: did you forget to `return` the ratio?")
    try:
        answers = np.array(answers, dtype=float)  # (3,)
    except (TypeError, ValueError):
        return Verdict(False, "mla_flops_per_byte must return one number.")
    if answers.shape != (3,):
        return Verdict(False, f"mla_flops_per_byte must return one number, got {answers.shape[1:]}-shaped arrays.")
    mistakes = [
        (wrong["no_sum"], "only the scores are counted: the weighted sum of the latents costs 2 d_c FLOPs per head "
                          "and position as well."),
        (wrong["one_head"], "that is one head's arithmetic: all h heads read the same cached latent, so each "
                            "byte serves h heads."),
        (wrong["numbers"], "that is FLOPs per number: a 16-bit number takes 2 bytes."),
        (wrong["mha"], "that is multi-head attention's ratio, as if absorbing were free: absorbed, every head "
                       "works in the d_c-wide latent space."),
        (wrong["two_h"], "that is 2 h, what the rotary key gives if it entered the weighted sum as well, or if it "
                         "were left out: it enters the scores (d_c + d_rope wide) and the bytes, not the sum "
                         "(d_c wide)."),
    ]
    return compare(answers, np.array(expected), mistakes, what="your three ratios",
                   right="h (2 (d_c + d_rope) + 2 d_c) FLOPs on 2 (d_c + d_rope) bytes per cached position.")
