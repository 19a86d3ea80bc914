"""Checkers for chapter 7 (attention without the n × n matrix: the online softmax, block-wise attention).

A softmax *state* for one query row is ``(s_max, z, acc)``: the largest score seen, the sum of
exp(score - s_max) over the keys seen, and the sum of exp(score - s_max) · value over them (d_v,).
"""

import math

import numpy as np

from ...attention import causal_mask, scaled_dot_product_attention
from ...blockwise import blockwise_attention_with_lse
from ._verdict import Verdict, call_learner, compare


def _as_vector(answer, parts, what):
    """A tuple of ``parts`` numbers or arrays as one flat float vector, or a Verdict saying why not."""
    if answer is None:
        return None, Verdict(False, f"{what} is None: nothing computed yet, or a function that forgot to `return`.")
    if not isinstance(answer, (tuple, list)) or len(answer) != parts:
        return None, Verdict(False, f"{what} should be a tuple of {parts} items, got {type(answer).__name__}"
                                    f"{f' of length {len(answer)}' if isinstance(answer, (tuple, list)) else ''}.")
    try:
        return np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in answer]), None
    except (TypeError, ValueError):
        return None, Verdict(False, f"the items of {what} are not numbers or arrays of numbers.")


def _state(scores, values):
    """The softmax state (s_max, z, acc) of one row of scores (r,) against values (r, d_v), computed directly."""
    s_max = scores.max()
    e = np.exp(scores - s_max)  # (r,)
    return s_max, e.sum(), e @ values


def _row_scores():
    """Ten scores of size about 800 in blocks of 3: the maximum grows in blocks 1 and 2 (counted from 0), not in the last one.

    So forgetting the rescaling changes z, and keeping the last block's maximum changes s_max.
    """
    return 800.0 + np.array([0.3, -1.2, 1.0, 2.5, 0.1, 1.9, 4.0, 3.2, -0.5, 2.2])


def check_running_max_sum(running_max_sum):
    """Check ``running_max_sum(scores, block_size) -> (s_max, z)`` for one row of scores, streamed in blocks.

    s_max must be the largest score, z the sum of exp(score - s_max), both found in one pass over blocks of
    ``block_size`` scores (the last block may be shorter). The scores are about 800, so exp(score)
    alone overflows. The mistakes named: the old sum not rescaled when the maximum grows, the rescale
    factor upside down, the maximum of the last block kept instead of the running maximum, and each
    block's sum left relative to its own maximum.

    >>> import numpy as np
    >>> def running_max_sum(scores, block_size):
    ...     return scores.max(), np.exp(scores - scores.max()).sum()   # not one pass, but the right numbers
    >>> check_running_max_sum(running_max_sum)
    Right: s_max and z are right for 10 scores in blocks of 3, the last block shorter.
    """
    scores, block_size = _row_scores(), 3
    answer, failure = call_learner(running_max_sum, scores.copy(), block_size, name="running_max_sum")
    if failure is not None:  # a Verdict is false when it reports a mistake
        return failure
    answer, failure = _as_vector(answer, 2, "the result of running_max_sum")
    if failure is not None:
        return failure
    blocks = [scores[i:i + block_size] for i in range(0, len(scores), block_size)]
    s_max_true = scores.max()
    expected = [s_max_true, np.exp(scores - s_max_true).sum()]

    def streamed(rescale, running=True):
        s_max, z = -np.inf, 0.0
        for block in blocks:
            s_max_new = max(s_max, block.max()) if running else block.max()
            z = z * rescale(s_max, s_max_new) + np.exp(block - s_max_new).sum()
            s_max = s_max_new
        return [s_max, z]

    with np.errstate(over="ignore", invalid="ignore"):
        mistakes = [
            (streamed(lambda old, new: 1.0),
             "the old sum was not rescaled: when the maximum grows from s_max_old to s_max_new, multiply the sum "
             "so far by exp(s_max_old - s_max_new) before adding the new block's terms."),
            (streamed(lambda old, new: math.exp(new - old) if old > -np.inf else 0.0),
             "the rescale factor is upside down: the old terms exp(s - s_max_old) become exp(s - s_max_new) when "
             "multiplied by exp(s_max_old - s_max_new), which is at most 1."),
            (streamed(lambda old, new: math.exp(old - new) if old > -np.inf else 0.0, running=False),
             "s_max is the maximum of the last block only: keep the maximum of every score seen so far, "
             "s_max = max(s_max, block.max())."),
            ([s_max_true, sum(np.exp(b - b.max()).sum() for b in blocks)],
             "each block's terms are relative to that block's own maximum, and sums relative to different "
             "maxima cannot be added: bring them to the running maximum first."),
            ([s_max_true, np.exp(scores).sum()],
             "z is the sum of exp(score) itself, which overflows for scores near 800: subtract the running "
             "maximum before exp."),
        ]
    return compare(answer, np.array(expected), mistakes, what="(s_max, z)", rtol=1e-12, atol=0,
                   right="s_max and z are right for 10 scores in blocks of 3, the last block shorter.")


def check_merge_states(merge):
    """Check ``merge(state_a, state_b) -> (s_max, z, acc)``: the state of two parts of a row of keys, combined.

    Each state is ``(s_max, z, acc)`` with floats s_max and z and an array acc of shape (d_v,). The merged state
    must be the state of all the keys of both parts, as if they had been one block. The checker merges
    two ordinary parts twice (the larger maximum once in each part); a part whose keys are all masked,
    state (-inf, 0, zeros); and two such parts, where exp(s_max_a - s_max) with s_max_a = s_max = -inf is exp(nan)
    unless guarded. Mistakes named: the rescale factors forgotten, upside down, or applied to one part
    only; nan for two empty parts.

    >>> import numpy as np
    >>> def merge(a, b):
    ...     s_max = max(a[0], b[0])
    ...     shift = 0.0 if s_max == -np.inf else s_max        # two empty parts: exp(-inf - 0) = 0
    ...     fa, fb = np.exp(a[0] - shift), np.exp(b[0] - shift)
    ...     return s_max, fa * a[1] + fb * b[1], fa * a[2] + fb * b[2]
    >>> check_merge_states(merge)
    Right: two parts, a part with every key masked, and two such parts all merge correctly.
    """
    rng = np.random.default_rng(3)
    s_a, s_b = rng.normal(size=4), rng.normal(size=5) + 3.0  # the larger scores in part b
    v_a, v_b = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))  # d_v = 3
    a, b = _state(s_a, v_a), _state(s_b, v_b)
    empty = (-np.inf, 0.0, np.zeros(3))

    def flat(state):
        return np.concatenate([[state[0], state[1]], state[2]])

    def merged(first, second, fa, fb):
        """Both parts' sums multiplied by fa(s_max_a, s_max) and fb(s_max_b, s_max), s_max = max(s_max_a, s_max_b)."""
        s_max = max(first[0], second[0])
        f, g = fa(first[0], s_max), fb(second[0], s_max)
        return flat((s_max, f * first[1] + g * second[1], f * first[2] + g * second[2]))

    def down(s_max_part, s_max):
        return math.exp(s_max_part - s_max)

    def up(s_max_part, s_max):
        return math.exp(s_max - s_max_part)

    def one(s_max_part, s_max):
        return 1.0

    # two ordinary merges side by side, (a, b) with the maximum in b and (b, a) with it in a, so that
    # rescaling only one part is wrong in one of them whichever part it is
    pairs = [(a, b), (b, a)]
    whole = flat(_state(np.concatenate([s_a, s_b]), np.concatenate([v_a, v_b])))  # all 9 keys as one block
    both = np.concatenate([whole, whole])  # the order of the parts does not matter

    def in_both_orders(rescale_a, rescale_b):  # a mistaken merge of (a, b) and of (b, a), side by side
        return np.concatenate([merged(x, y, rescale_a, rescale_b) for x, y in pairs])

    mistakes = [
        (in_both_orders(one, one),
         "the parts were added without rescaling: part a's sums are relative to s_max_a, so multiply them by "
         "exp(s_max_a - s_max), and part b's by exp(s_max_b - s_max), where s_max = max(s_max_a, s_max_b)."),
        (in_both_orders(up, up),
         "the rescale factors are upside down: a part's sums become relative to s_max when multiplied by "
         "exp(s_max_part - s_max), which is at most 1."),
        (in_both_orders(down, one),
         "only part a was rescaled: part b's sums also need exp(s_max_b - s_max) (it is 1 only when s_max_b "
         "is the larger)."),
        (in_both_orders(one, down),
         "only part b was rescaled: part a's sums also need exp(s_max_a - s_max) (it is 1 only when s_max_a "
         "is the larger)."),
    ]
    answers = []
    for first, second in pairs + [(a, empty), (empty, empty)]:
        copies = [(s[0], s[1], s[2].copy()) for s in (first, second)]
        with np.errstate(invalid="ignore"):  # the unguarded -inf - (-inf) is the learner's to see, as nan
            answer, failure = call_learner(merge, *copies, name="merge")
        if failure is not None:
            return failure
        answer, failure = _as_vector(answer, 3, "the result of merge")
        if failure is not None:
            return failure
        answers.append(answer)
    if len({x.shape for x in answers}) > 1:
        return Verdict(False, f"the merged states have different sizes {[x.shape for x in answers]}; each should "
                              f"be (s_max, z, acc) with acc of shape (3,).")
    verdict = compare(np.concatenate(answers[:2]), both, mistakes, what="the merged state of two ordinary parts",
                      rtol=1e-12, atol=1e-15)
    if not verdict:
        return verdict
    verdict = compare(answers[2], flat(a), what="the merged state of part a and a part whose keys are all masked",
                      rtol=1e-12, atol=1e-15)
    if not verdict:
        return verdict
    if np.isnan(answers[3]).any():
        return Verdict(False, "two empty parts (s_max = -inf, z = 0: every key masked) give nan: with s_max = -inf, "
                              "exp(s_max_a - s_max) is exp(-inf + inf) = exp(nan). Subtract 0 instead of s_max "
                              "when s_max is -inf.")
    verdict = compare(answers[3], flat(empty), what="the merged state of two parts whose keys are all masked")
    if not verdict:
        return verdict
    return Verdict(True, "two parts, a part with every key masked, and two such parts all merge correctly.")


CAUSAL_CASES = [(16, 4), (10, 3), (7, 7), (5, 8), (12, 1), (100, 32)]  # (n, b)


def check_causal_blocks(blocks_needed):
    """Check ``blocks_needed(n, b) -> int``: the (query tile, key block) pairs a causal pass must compute.

    Queries and keys are both cut into tiles of b positions (the last one shorter when b does not
    divide n); a pair must be computed when at least one of its (query i, key j) entries has j <= i.
    The right counts are found by brute force from the causal mask. Mistakes named: every pair
    counted, the diagonal tiles left out, the shorter last tile forgotten.

    >>> check_causal_blocks(lambda n, b: sum(range(1, -(-n // b) + 1)))
    Right: the counts are right for (n, b) = (16, 4), (10, 3), (7, 7), (5, 8), (12, 1), (100, 32).
    """
    answers = []
    for n, b in CAUSAL_CASES:
        answer, failure = call_learner(blocks_needed, n, b, name="blocks_needed")
        if failure is not None:
            return failure
        answers.append(answer)
    try:
        answers = np.array(answers, dtype=float)
    except (TypeError, ValueError):
        return Verdict(False, "blocks_needed should return a number.")
    expected, every, below, floor_tiles = [], [], [], []
    for n, b in CAUSAL_CASES:
        allowed = causal_mask(n)  # (n, n), j <= i
        tiles = range(0, n, b)
        expected.append(sum(allowed[i:i + b, j:j + b].any() for i in tiles for j in tiles))
        t, whole = math.ceil(n / b), n // b
        every.append(t * t)
        below.append(t * (t - 1) // 2)
        floor_tiles.append(whole * (whole + 1) // 2)
    cases = ", ".join(f"({n}, {b})" for n, b in CAUSAL_CASES)
    mistakes = [
        (every, "that counts every pair of tiles: the causal mask lets a pass skip the key blocks that lie "
                "entirely after the last query of the tile."),
        (below, "the diagonal tiles are missing: a tile on the diagonal holds the pairs j <= i inside it."),
        (floor_tiles, "the last, shorter tile is missing when b does not divide n: there are ceil(n / b) tiles."),
    ]
    verdict = compare(answers, np.array(expected, dtype=float), mistakes,
                      what=f"the counts for (n, b) = {cases}", right=f"the counts are right for (n, b) = {cases}.")
    return verdict


def check_weights_from_lse(weights_from_lse):
    """Check ``weights_from_lse(q, k, lse) -> (n, m)``: the attention weights recomputed from the log-sum-exp.

    ``lse`` (n,) is what ``blockwise_attention_with_lse(...)`` returns: the log of each query's
    softmax denominator. The weights must equal those of ``M.scaled_dot_product_attention``. Mistakes
    named: the scale forgotten, lse subtracted along the keys instead of the queries, lse added, and
    exp(scores) divided by lse instead of by exp(lse).

    >>> import numpy as np
    >>> check_weights_from_lse(lambda q, k, lse: np.exp(q @ k.T / np.sqrt(q.shape[-1]) - lse[:, None]))
    Right: the recomputed weights equal the package's, and each row sums to 1.
    """
    rng = np.random.default_rng(11)
    q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))  # n = m = 5, d_k = 4
    _, lse = blockwise_attention_with_lse(q, k, v, block_size=2)
    answer, failure = call_learner(weights_from_lse, q.copy(), k.copy(), lse.copy(), name="weights_from_lse")
    if failure is not None:
        return failure
    scores = q @ k.T / 2.0  # (n, m), √d_k = 2
    mistakes = [
        (np.exp(q @ k.T - lse[:, None]), "the scores are not divided by sqrt(d_k): lse was computed from the "
                                         "scaled scores, so scale them the same way."),
        (np.exp(scores - lse[None, :]), "lse was subtracted along the keys: it holds one number per query, so "
                                        "subtract it from each row, lse[:, None]."),
        (np.exp(scores + lse[:, None]), "lse was added: the weights are exp(score - lse), since exp(lse) is the "
                                        "softmax denominator."),
        (np.exp(scores) / lse[:, None], "exp(scores) was divided by lse, which is the *log* of the denominator: "
                                        "divide by exp(lse), or subtract lse inside the exp."),
    ]
    expected = scaled_dot_product_attention(q, k, v)[1]
    return compare(answer, expected, mistakes, what="the recomputed weights",
                   right="the recomputed weights equal the package's, and each row sums to 1.")
