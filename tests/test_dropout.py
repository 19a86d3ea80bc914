"""Dropout on attention weights, against torch.nn.functional.dropout with the same keep mask.

torch draws its masks from its own generator, which numpy cannot reproduce; so the tests read the mask
torch drew (the non-zero entries of its output) and hand that mask to ours.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha_lessons as M
from mha_lessons.dropout import attention_dropout, draw_keep_mask


def random_weights(rng, shape):
    return M.softmax(rng.normal(size=shape), axis=-1)  # every entry > 0, each row sums to 1


def torch_keep_mask(shape, p_drop, seed):
    """The mask torch's dropout draws after torch.manual_seed(seed): where a tensor of ones stays non-zero."""
    torch.manual_seed(seed)
    return (F.dropout(torch.ones(shape, dtype=torch.float64), p=p_drop, training=True) != 0).numpy()


@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 4, 6)])
@pytest.mark.parametrize("p_drop", [0.1, 0.5, 0.9])
def test_same_mask_same_result_as_torch(rng, shape, p_drop):
    w = random_weights(rng, shape)
    keep = torch_keep_mask(shape, p_drop, seed=7)
    torch.manual_seed(7)  # the same state again: torch drops the same entries of w
    theirs = F.dropout(torch.from_numpy(w), p=p_drop, training=True).numpy()
    np.testing.assert_array_equal(theirs != 0, keep)
    ours = attention_dropout(w, p_drop, keep_mask=keep)
    np.testing.assert_allclose(ours, theirs, rtol=1e-15, atol=0)
    # and written out: kept weights / (1 - p_drop), dropped ones 0
    np.testing.assert_allclose(ours, np.where(keep, w / (1 - p_drop), 0), rtol=1e-15, atol=0)


def test_dropout_sits_between_the_softmax_and_the_values_as_in_torchs_attention(rng):
    """torch's scaled_dot_product_attention(dropout_p=...) on the CPU drops with the same draw as F.dropout.

    That is an implementation detail of the torch version the course pins (requirements.txt); if it changes,
    this test says so, and chapter 1's cell that relies on it must change too.
    """
    q, k, v = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 6, 3)), rng.normal(size=(2, 6, 5))
    p_drop = 0.3
    keep = torch_keep_mask((2, 4, 6), p_drop, seed=11)
    torch.manual_seed(11)
    theirs = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), dropout_p=p_drop).numpy()
    _, w = M.scaled_dot_product_attention(q, k, v)
    ours = attention_dropout(w, p_drop, keep_mask=keep) @ v  # (B, n, m) @ (B, m, d_v)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_evaluation_is_the_identity_like_torch(rng):
    w = random_weights(rng, (3, 4))
    for kwargs in ({}, {"seed": 0}, {"keep_mask": np.zeros((3, 4), bool)}):
        out = attention_dropout(w, 0.5, training=False, **kwargs)
        np.testing.assert_array_equal(out, w)
    np.testing.assert_array_equal(F.dropout(torch.from_numpy(w), p=0.5, training=False).numpy(), w)


def test_rows_sum_to_kept_weight_over_one_minus_p_and_to_one_on_average(rng):
    w = random_weights(rng, (4, 8))
    p_drop = 0.25
    dropped = attention_dropout(w, p_drop, seed=1)
    keep = dropped != 0
    np.testing.assert_allclose(dropped.sum(-1), (w * keep).sum(-1) / (1 - p_drop), rtol=1e-14)
    assert not np.allclose(dropped.sum(-1), 1)  # this draw drops something in some row
    # E[row sum] = Σ_j w_j (1 - p) / (1 - p) = 1; over 20000 masks the mean is within 4 standard errors of 1
    sums = attention_dropout(np.broadcast_to(w, (20000, 4, 8)), p_drop, seed=2).sum(-1)  # (20000, 4)
    stderr = sums.std(axis=0) / np.sqrt(20000)
    assert np.all(np.abs(sums.mean(axis=0) - 1) < 4 * stderr)


def test_the_seeded_mask_keeps_one_minus_p_of_the_entries_and_is_reproducible():
    keep = draw_keep_mask((400, 500), 0.2, seed=3)
    assert keep.dtype == np.bool_ and keep.shape == (400, 500)
    assert abs(keep.mean() - 0.8) < 4 * np.sqrt(0.8 * 0.2 / keep.size)
    np.testing.assert_array_equal(keep, draw_keep_mask((400, 500), 0.2, seed=3))
    assert not np.array_equal(keep, draw_keep_mask((400, 500), 0.2, seed=4))
    w = np.full((400, 500), 0.002)
    np.testing.assert_array_equal(attention_dropout(w, 0.2, seed=3), np.where(keep, 0.002 / 0.8, 0))


def test_p_drop_zero_keeps_everything(rng):
    w = random_weights(rng, (3, 5))
    np.testing.assert_array_equal(attention_dropout(w, 0.0, seed=0), w)


def test_one_mask_broadcasts_over_batch_and_heads_and_float32_stays_float32(rng):
    w = random_weights(rng, (2, 3, 4, 5)).astype(np.float32)  # (B, h, n, m)
    keep = draw_keep_mask((4, 5), 0.5, seed=0)  # (n, m): the same entries in every head
    out = attention_dropout(w, 0.5, keep_mask=keep)
    assert out.dtype == np.float32 and out.shape == w.shape
    np.testing.assert_array_equal(out != 0, np.broadcast_to(keep, w.shape))


@pytest.mark.parametrize("p_drop", [1.0, -0.1, 1.5, True, "0.1", None])
def test_bad_p_drop_is_refused(p_drop):
    with pytest.raises(ValueError, match="0 <= p_drop < 1"):
        attention_dropout(np.full((2, 2), 0.5), p_drop, seed=0)


def test_bad_masks_and_arguments_are_refused():
    w = np.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match="exactly one of keep_mask"):
        attention_dropout(w, 0.1)
    with pytest.raises(ValueError, match="exactly one of keep_mask"):
        attention_dropout(w, 0.1, seed=0, keep_mask=np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="keep_mask must be boolean"):
        attention_dropout(w, 0.1, keep_mask=np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"keep_mask of shape \(3, 2\) does not broadcast to the weights' shape \(2, 3\)"):
        attention_dropout(w, 0.1, keep_mask=np.ones((3, 2), bool))
    with pytest.raises(ValueError, match=r"keep_mask of shape \(4, 2, 3\) does not broadcast"):
        attention_dropout(w, 0.1, keep_mask=np.ones((4, 2, 3), bool))  # would grow the weights
    with pytest.raises(ValueError, match=r"weights must have at least 2 dimensions \(\.\.\., n, m\), got shape \(3,\)"):
        attention_dropout(w[0], 0.1, seed=0)
    with pytest.raises(ValueError, match="needs a seed"):
        draw_keep_mask((2, 2), 0.1, seed=None)
