"""Masks for padded batches, checked against PyTorch's two boolean conventions in float64.

torch.nn.MultiheadAttention reads key_padding_mask and a boolean attn_mask as True = blocked;
torch.nn.functional.scaled_dot_product_attention reads a boolean attn_mask as True = may attend,
like this course. The torch masks in the layer tests are built with torch from their definition
(torch.arange, torch.triu), not with the converters under test, so a converter that agrees with
itself but not with torch fails.
"""


import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha_lessons as M
from common import close, random_params
from mha_lessons.masks import (
    combine_masks,
    from_torch_masks,
    query_padding_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)

# float64 outputs of size O(1) after two d_model-long products and a softmax: rounding errors are a
# few units of 2.2e-16 per term; 1e-12 is a hundred times that bound and far below any real bug.
ATOL = 1e-12


def torch_layer(params, x, **masks):
    """torch.nn.MultiheadAttention (copied weights) on self-attention input x; masks in torch's convention."""
    module = M.params_to_torch(params)
    t = torch.from_numpy(x)
    y, w = module(t, t, t, need_weights=True, average_attn_weights=False,
                  **{name: torch.as_tensor(mask) for name, mask in masks.items()})
    return y.detach().numpy(), w.detach().numpy()


def real_rows(lengths, n):
    """(B, n) boolean: True at the positions of real (not padded) tokens, built without the package."""
    return np.array([[i < length for i in range(n)] for length in lengths])


# ---------------------------------------------------------------- the layer against torch.nn.MultiheadAttention

@pytest.mark.parametrize(
    "lengths, n, d_model, h",
    [([4], 4, 6, 1), ([5, 3, 2], 5, 8, 2), ([1, 6, 4, 6], 6, 12, 3), ([3, 1], 7, 8, 8)],
)
def test_causal_and_key_padding_match_torch_mha(rng, lengths, n, d_model, h):
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(len(lengths), n, d_model))  # (B, n, d_model)
    mask = combine_masks(M.padding_mask(lengths, n), M.causal_mask(n))  # (B, n, m)
    ours, w_ours = M.multihead_attention(x, x, x, params, mask=mask)
    # torch's masks from torch's own definition: True = blocked
    kpm = torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]  # (B, m): padded keys
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, m): keys after the query
    theirs, w_theirs = torch_layer(params, x, key_padding_mask=kpm, attn_mask=future)
    real = real_rows(lengths, n)
    np.testing.assert_allclose(ours[real], theirs[real], rtol=0, atol=ATOL)
    by_query = (0, 2, 1, 3)  # weights (B, h, n, m) -> (B, n, h, m), so that `real` (B, n) selects queries
    np.testing.assert_allclose(w_ours.transpose(by_query)[real], w_theirs.transpose(by_query)[real], rtol=0, atol=ATOL)
    # every length is at least 1, so no row is fully masked: padded query rows agree too
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)


@pytest.mark.parametrize("h", [1, 4])
def test_our_key_padding_mask_is_torchs_negated_and_gives_its_output(rng, h):
    lengths, n, d_model = [2, 5, 3], 5, 8
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(3, n, d_model))
    pad = M.padding_mask(lengths, n)  # (B, 1, m)
    converted = to_torch_key_padding_mask(pad)
    expected = (torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]).numpy()  # torch: True = ignore
    np.testing.assert_array_equal(converted, expected)
    ours, _ = M.multihead_attention(x, x, x, params, mask=pad)
    theirs, _ = torch_layer(params, x, key_padding_mask=converted)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)
    # the same mask passed without negation gives a different layer: the conventions really are opposite
    unconverted, _ = torch_layer(params, x, key_padding_mask=pad[:, 0, :])
    assert np.abs(unconverted[0, :2] - ours[0, :2]).max() > 1e-3


@pytest.mark.parametrize("B, n, h", [(1, 4, 1), (3, 5, 2), (2, 3, 4), (4, 6, 3)])
def test_to_torch_attn_mask_per_sequence_masks_match_torch(rng, B, n, h):
    # a different random mask per sequence: repeating the pages in the wrong order (np.tile) fails here
    d_model = 4 * h
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, n, d_model))
    mask = rng.random((B, n, n)) < 0.5
    mask[:, np.arange(n), rng.integers(0, n, size=n)] = True  # every query sees at least one key
    ours, w_ours = M.multihead_attention(x, x, x, params, mask=mask)
    theirs, w_theirs = torch_layer(params, x, attn_mask=to_torch_attn_mask(mask, h))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)
    np.testing.assert_allclose(w_ours, w_theirs, rtol=0, atol=ATOL)


def test_to_torch_attn_mask_of_one_page_for_all_sequences(rng):
    params = random_params(rng, 6, 3)
    x = rng.normal(size=(2, 4, 6))
    causal = M.causal_mask(4)
    ours, _ = M.multihead_attention(x, x, x, params, mask=causal)
    theirs, _ = torch_layer(params, x, attn_mask=to_torch_attn_mask(causal, 3))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)


@pytest.mark.parametrize("h", [1, 2])
def test_from_torch_masks_gives_torchs_output(rng, h):
    B, n, d_model = 3, 5, 4 * h
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(B, n, d_model))
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    kpm = torch.rand(B, n, generator=g) < 0.3  # torch: True = ignore this key
    kpm[:, 0] = False  # key 0 is real in every sequence ...
    blocked = torch.rand(B, n, n, generator=g) < 0.4
    blocked[:, :, 0] = False  # ... and every query may see it: no row is fully masked
    attn_mask = blocked.repeat_interleave(h, dim=0)  # (B, n, m) -> (B * h, n, m), torch's page order
    theirs, _ = torch_layer(params, x, key_padding_mask=kpm, attn_mask=attn_mask)
    ours, _ = M.multihead_attention(x, x, x, params, mask=from_torch_masks(kpm, attn_mask, num_heads=h))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)
    theirs_2d, _ = torch_layer(params, x, attn_mask=blocked[0])
    ours_2d, _ = M.multihead_attention(x, x, x, params, mask=from_torch_masks(attn_mask=blocked[0]))
    np.testing.assert_allclose(ours_2d, theirs_2d, rtol=0, atol=ATOL)


def test_fully_masked_row_torch_mha_gives_nan_ours_gives_output_bias(rng):
    # a query that may see nothing is NaN in torch's layer with need_weights=True (torch_layer's), b_o (zero
    # weights) in ours; the other paths are in the next test
    params = random_params(rng, 8, 2)
    x = rng.normal(size=(2, 4, 8))
    lengths = [4, 2]
    mask = combine_masks(M.padding_mask(lengths, 4), query_padding_mask(lengths, 4))  # padded rows all False
    ours, w_ours = M.multihead_attention(x, x, x, params, mask=mask)
    theirs, _ = torch_layer(params, x, attn_mask=to_torch_attn_mask(mask, 2))
    real = real_rows(lengths, 4)
    assert np.all(np.isnan(theirs[~real]))
    np.testing.assert_allclose(ours[real], theirs[real], rtol=0, atol=ATOL)
    np.testing.assert_array_equal(w_ours[1, :, 2:], 0.0)
    np.testing.assert_allclose(ours[1, 2:], np.broadcast_to(params.b_o, (2, 8)), rtol=0, atol=0)



def test_fully_masked_row_torch_mha_depends_on_the_path(rng):
    # The chapter's finer claim (torch 2.13, CPU): torch's layer gives NaN for a query that may see nothing when it
    # computes the weights (need_weights=True, the default) and on its fast path (eval mode, no autograd, query, key
    # and value one tensor); with need_weights=False elsewhere it gives what ours gives (b_o), with finite gradients.
    d_model, h, lengths, n = 8, 2, [4, 2], 4
    params = random_params(rng, d_model, h)
    x = rng.normal(size=(len(lengths), n, d_model))
    # torch's mask from its definition: True = blocked unless both the query and the key are real tokens
    real_t = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]  # (B, n)
    blocked = ~(real_t[:, :, None] & real_t[:, None, :])  # (B, n, m): padded rows all blocked
    blocked = blocked.repeat_interleave(h, dim=0)  # (B, n, m) -> (B * h, n, m), page b * h + head
    ours, _ = M.multihead_attention(x, x, x, params, mask=~blocked[::h].numpy())
    real = real_rows(lengths, n)
    module = M.params_to_torch(params)  # eval mode
    t = torch.from_numpy(x)
    with torch.no_grad():
        default, _ = module(t, t, t, attn_mask=blocked)
        fast, _ = module(t, t, t, attn_mask=blocked, need_weights=False)
        general, _ = module(t, t.clone(), t.clone(), attn_mask=blocked, need_weights=False)
    assert torch.isnan(default[~torch.from_numpy(real)]).all()
    assert torch.isnan(fast[~torch.from_numpy(real)]).all()
    np.testing.assert_allclose(general.numpy(), ours, rtol=0, atol=ATOL)  # b_o at the padded rows
    np.testing.assert_allclose(ours[~real], np.broadcast_to(params.b_o, ours[~real].shape), rtol=0, atol=0)

    # with autograd on, the layer leaves its fast path: need_weights decides alone
    d_y = 2 * ours * real[..., None]  # d loss / d y for loss = sum of y² over the real positions
    _, _, _, grads = M.grads.mha_backward(x, x, x, params, d_y, mask=~blocked[::h].numpy())
    for need_weights in (True, False):
        module.zero_grad()
        y, _ = module(t, t, t, attn_mask=blocked, need_weights=need_weights)
        y[torch.from_numpy(real)].pow(2).sum().backward()
        d_w_q = module.in_proj_weight.grad[:d_model].T.numpy()  # torch's (out, in) -> our x @ w layout
        if need_weights:
            assert np.isnan(d_w_q).all()
        else:
            close(d_w_q, grads.w_q)

# ---------------------------------------------------------------- torch.nn.functional: True = may attend, like ours

@pytest.mark.parametrize("lengths, n, h", [([3], 3, 1), ([5, 2, 4], 5, 2), ([1, 3], 3, 4)])
def test_sdpa_with_combined_boolean_mask_matches_torch_functional(rng, lengths, n, h):
    B, d_k = len(lengths), 4
    q, k, v = (rng.normal(size=(B, h, n, d_k)) for _ in range(3))  # (B, h, n, d_k)
    key_mask = combine_masks(M.padding_mask(lengths, n), M.causal_mask(n))  # (B, n, m)
    full = combine_masks(key_mask, query_padding_mask(lengths, n))  # padded query rows fully masked too
    for mask in (key_mask, full):
        ours, _ = M.scaled_dot_product_attention(q, k, v, mask[:, None])  # (B, n, m) -> (B, 1, n, m)
        theirs = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                                attn_mask=torch.from_numpy(mask[:, None])).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)  # fully masked rows: zeros in both


# ---------------------------------------------------------------- the small functions, from their definitions

def test_combine_masks_is_elementwise_and(rng):
    a = rng.random((3, 1, 5)) < 0.5
    b = rng.random((4, 5)) < 0.5
    c = rng.random((3, 4, 1)) < 0.5
    combined = combine_masks(a, b, c)
    assert combined.shape == (3, 4, 5) and combined.dtype == bool
    for i, j, l in np.ndindex(3, 4, 5):
        assert combined[i, j, l] == (a[i, 0, l] and b[j, l] and c[i, j, 0])
    np.testing.assert_array_equal(combine_masks(b), b)


def test_query_padding_mask_element_by_element():
    mask = query_padding_mask([0, 2, 4], 4)
    assert mask.shape == (3, 4, 1)
    np.testing.assert_array_equal(mask[..., 0], real_rows([0, 2, 4], 4))


@pytest.mark.parametrize("h", [1, 3])
def test_converters_round_trip(rng, h):
    pad = M.padding_mask([2, 5, 1], 5)  # (B, 1, m)
    np.testing.assert_array_equal(from_torch_masks(key_padding_mask=to_torch_key_padding_mask(pad)), pad)
    per_sequence = rng.random((3, 4, 5)) < 0.5
    np.testing.assert_array_equal(from_torch_masks(attn_mask=to_torch_attn_mask(per_sequence, h), num_heads=h),
                                  per_sequence)
    causal = M.causal_mask(4, 5)
    np.testing.assert_array_equal(from_torch_masks(attn_mask=to_torch_attn_mask(causal, h)), causal)
    both = from_torch_masks(to_torch_key_padding_mask(pad), to_torch_attn_mask(causal, h))
    np.testing.assert_array_equal(both, pad & causal)
    assert to_torch_attn_mask(per_sequence, h).shape == (3 * h, 4, 5)


# ---------------------------------------------------------------- bad input names the shapes

@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: combine_masks(np.ones((2, 1, 5), bool), np.ones((4, 4), bool)),
         r"masks of shapes \(2, 1, 5\), \(4, 4\) do not broadcast"),
        (lambda: combine_masks(np.ones((4, 4), bool), np.ones((4, 4))), "mask 1 must be boolean, got dtype float64"),
        (lambda: combine_masks(), "at least one mask"),
        (lambda: to_torch_key_padding_mask(np.ones((2, 3, 5), bool)),
         r"\(B, 1, m\) or \(B, m\), got shape \(2, 3, 5\)"),
        (lambda: to_torch_key_padding_mask(np.ones((2, 5), int)), "must be boolean, got dtype int"),
        (lambda: to_torch_attn_mask(np.ones((2, 2, 3, 5), bool), 2), r"got shape \(2, 2, 3, 5\)"),
        (lambda: to_torch_attn_mask(np.ones((3, 5), bool), 0), "num_heads must be a positive integer, got 0"),
        (lambda: from_torch_masks(), "needs a key_padding_mask, an attn_mask, or both"),
        (lambda: from_torch_masks(attn_mask=np.ones((6, 3, 3), bool), num_heads=4),
         r"shape \(6, 3, 3\) needs num_heads"),
        (lambda: from_torch_masks(attn_mask=np.arange(8).reshape(4, 1, 2) % 3 == 0, num_heads=2),
         r"attn_mask of shape \(4, 1, 2\) differs between the 2 heads"),
        (lambda: from_torch_masks(attn_mask=(np.arange(8).reshape(4, 1, 2) % 3 == 0).tolist(), num_heads=2),
         r"attn_mask of shape \(4, 1, 2\) differs between the 2 heads"),  # a nested list, not an array
        (lambda: from_torch_masks(attn_mask=np.zeros((3, 3))), "float attn_mask is added to the scores"),
        (lambda: from_torch_masks(key_padding_mask=np.ones((2, 1, 3), bool)), r"\(B, m\), got shape \(2, 1, 3\)"),
        (lambda: from_torch_masks(np.ones((2, 3), bool), np.ones((4, 3, 3), bool), num_heads=1),
         r"masks of shapes \(2, 1, 3\), \(4, 3, 3\) do not broadcast"),
        (lambda: query_padding_mask([2, 5], 4), "between 0 and m = 4"),
    ],
)
def test_bad_input_raises_value_error_naming_it(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- chapter 6's exercises, right and wrong

def learner_batch_mask(lengths, n):
    """The loop a learner might write: query i sees key j if j <= i and j is a real token."""
    mask = np.zeros((len(lengths), n, n), dtype=bool)
    for b, length in enumerate(lengths):
        for i in range(n):
            for j in range(n):
                mask[b, i, j] = j <= i and j < length
    return mask


def test_batch_mask_right_answers_pass():
    assert M.exercises.check_batch_mask(learner_batch_mask).ok
    assert M.exercises.check_batch_mask(lambda lengths, n: M.padding_mask(lengths, n) & M.causal_mask(n)).ok
    assert M.exercises.check_batch_mask(  # torch tensors are fine too
        lambda lengths, n: torch.from_numpy(learner_batch_mask(lengths, n))).ok


def _loop_mask(rule):
    def build(lengths, n):
        return np.array([[[rule(i, j, L) for j in range(n)] for i in range(n)] for L in lengths])
    return build


@pytest.mark.parametrize(
    "wrong, words",
    [
        (_loop_mask(lambda i, j, L: j > i or j >= L), "True and False are swapped"),
        (lambda lengths, n: np.tril(np.ones((n, n), dtype=bool)), "padded keys are not masked"),
        (lambda lengths, n: np.arange(n)[None, None, :] < np.array(lengths)[:, None, None], "causal part is missing"),
        (_loop_mask(lambda i, j, L: j >= i and j < L), "points the wrong way"),
        (_loop_mask(lambda i, j, L: j <= i and i < L), "rows of the padded queries are all False"),
        (_loop_mask(lambda i, j, L: j <= i and j < L and i < L), "rows of the padded queries are all False"),
        (_loop_mask(lambda i, j, L: j <= i and j <= L), "off by one"),
        (lambda lengths, n: learner_batch_mask(lengths, n).astype(int), "dtype int64"),
        (lambda lengths, n: learner_batch_mask(lengths, n).transpose(1, 2, 0), "expected shape (3, 5, 5)"),
        (lambda lengths, n: None, "is None"),
    ],
)
def test_batch_mask_typical_mistakes_are_named(wrong, words):
    verdict = M.exercises.check_batch_mask(wrong)
    assert not verdict.ok and words in verdict.message, verdict.message


def test_torch_key_padding_mask_right_answers_pass():
    assert M.exercises.check_torch_key_padding_mask(lambda mask: ~mask[:, 0, :]).ok
    assert M.exercises.check_torch_key_padding_mask(lambda mask: torch.from_numpy(~mask).squeeze(1)).ok
    assert M.exercises.check_torch_key_padding_mask(lambda mask: np.logical_not(mask.reshape(mask.shape[0], -1))).ok


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda mask: mask[:, 0, :], "not negated"),
        (lambda mask: ~mask, "drop the query axis"),
        (lambda mask: mask, "neither negated nor reshaped"),
        (lambda mask: (~mask[:, 0, :]).astype(float), "a 1.0 there blocks nothing"),
        (lambda mask: np.logical_not(mask).squeeze().T, "axes are swapped"),
        (lambda mask: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_torch_key_padding_mask_typical_mistakes_are_named(wrong, words):
    verdict = M.exercises.check_torch_key_padding_mask(wrong)
    assert not verdict.ok and words in verdict.message, verdict.message


def learner_window(n, w):
    return np.array([[0 <= i - j < w for j in range(n)] for i in range(n)])


def test_sliding_window_right_answers_pass():
    assert M.exercises.check_sliding_window_mask(learner_window).ok
    assert M.exercises.check_sliding_window_mask(
        lambda n, w: np.tril(np.ones((n, n), dtype=bool)) & ~np.tril(np.ones((n, n), dtype=bool), -w)).ok


@pytest.mark.parametrize(
    "wrong, words",
    [
        (lambda n, w: ~learner_window(n, w), "swapped"),
        (lambda n, w: np.array([[0 <= i - j <= w for j in range(n)] for i in range(n)]), "one too wide"),
        (lambda n, w: np.array([[0 < i - j < w for j in range(n)] for i in range(n)]), "the diagonal is missing"),
        (lambda n, w: np.array([[abs(i - j) < w for j in range(n)] for i in range(n)]), "also looks ahead"),
        (lambda n, w: np.array([[0 <= j - i < w for j in range(n)] for i in range(n)]), "looks forward"),
        (lambda n, w: np.tril(np.ones((n, n), dtype=bool)), "the window is missing"),
        (lambda n, w: np.tril(np.ones((n, n))) - np.tril(np.ones((n, n)), -w), "dtype float64"),
        (lambda n, w: learner_window(7, 3), "for n = 4, w = 6"),  # sizes typed in instead of used
    ],
)
def test_sliding_window_typical_mistakes_are_named(wrong, words):
    verdict = M.exercises.check_sliding_window_mask(wrong)
    assert not verdict.ok and words in verdict.message, verdict.message


def _learner_stack(first, second, compare=lambda a, b: (a != b).any(axis=-1)):
    """A learner's changed_positions: ``first`` and ``second`` pick the masks from (pad, second_mask)."""
    def changed_positions(x, x_other, params_1, params_2, pad, second_mask):
        def stack(inputs):
            y1, _ = M.multihead_attention(inputs, inputs, inputs, params_1, mask=first(pad, second_mask))
            y2, _ = M.multihead_attention(y1, y1, y1, params_2, mask=second(pad, second_mask))
            return y2
        return compare(stack(x), stack(x_other))
    return changed_positions


def _one_layer(x, x_other, params_1, params_2, pad, second_mask):
    """Forgets the second layer: compares the first layer's outputs only."""
    y, y_other = (M.multihead_attention(a, a, a, params_1, mask=pad)[0] for a in (x, x_other))
    return ~np.isclose(y, y_other).all(axis=-1)


def test_changed_positions_right_answers_pass():
    assert M.exercises.check_changed_positions(_learner_stack(lambda p, s: p, lambda p, s: s)).ok
    assert M.exercises.check_changed_positions(_learner_stack(  # a tolerance instead of exact equality
        lambda p, s: p, lambda p, s: s, lambda a, b: ~np.isclose(a, b).all(axis=-1))).ok


@pytest.mark.parametrize(
    "wrong, words",
    [
        (_learner_stack(lambda p, s: p, lambda p, s: s, lambda a, b: np.isclose(a, b).all(axis=-1)), "swapped"),
        (_learner_stack(lambda p, s: None, lambda p, s: s), "give the first layer the mask pad"),
        (_learner_stack(lambda p, s: p, lambda p, s: p), "give the second layer second_mask"),
        (_one_layer, "give the second layer second_mask, and run both layers"),
        (_learner_stack(lambda p, s: p, lambda p, s: s, lambda a, b: a != b), "one entry per feature"),
        (_learner_stack(lambda p, s: p, lambda p, s: s, lambda a, b: (a != a).any(axis=-1)), "nothing changed"),
        (_learner_stack(lambda p, s: p, lambda p, s: s, lambda a, b: np.abs(a - b).max(axis=-1)), "dtype float64"),
    ],
)
def test_changed_positions_typical_mistakes_are_named(wrong, words):
    verdict = M.exercises.check_changed_positions(wrong)
    assert not verdict.ok and words in verdict.message, verdict.message


def test_changed_positions_against_an_independent_loop():
    """The checker's answer, rebuilt by a plain loop over sequences with no batching: it must accept it."""
    def per_sequence(x, x_other, params_1, params_2, pad, second_mask):
        rows = []
        for b in range(len(x)):
            m1 = pad[b]  # (1, m)
            m2 = None if second_mask is None else second_mask[b]
            outs = []
            for inputs in (x[b], x_other[b]):
                y1, _ = M.multihead_attention(inputs, inputs, inputs, params_1, mask=m1)
                outs.append(M.multihead_attention(y1, y1, y1, params_2, mask=m2)[0])
            # changed beyond rounding (as the checker's own answer tells them apart: bit-for-bit equality of two
            # runs is not promised by every BLAS)
            rows.append([np.abs(outs[0][i] - outs[1][i]).max() > 1e-12 for i in range(x.shape[1])])
        return np.array(rows)
    assert M.exercises.check_changed_positions(per_sequence).ok
