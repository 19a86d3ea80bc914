"""The two-layer attention-only model of chapter 10's induction heads: data, gradients, scores, stored runs.

Oracles: the gradients against torch autograd (float64, torch.nn.MultiheadAttention holding our weights) and
central finite differences; the data and the scores against loops written here; the stored table of
scripts/ch10_induction_seeds.py, whose seed-0 row a fresh run must reproduce to a tolerance.
"""

import copy
import csv
import io
import math

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons import induction
from mha_lessons.grads import gradcheck, grads_from_torch
from mha_lessons.induction import (
    TwoLayerModel, copy_positions, forward, induction_score, init_two_layer, loss_and_grads, previous_token_score,
    repeated_sequences)

from common import FD_ATOL_REL, FD_RTOL, close, same_but_for_rounding


def random_model(rng, vocab, n, d_model, num_heads):
    """Every parameter random, biases included (zero biases would hide a wrong bias gradient)."""
    model = init_two_layer(vocab, n, d_model, num_heads, seed=int(rng.integers(1000)))
    for name, array in model.arrays().items():
        array[...] = rng.normal(scale=1 / math.sqrt(d_model), size=array.shape)
    return model


def torch_loss_and_grads(model, tokens):
    """The same model written with two torch.nn.MultiheadAttention layers; gradients by autograd."""
    embed, pos, w_u, b_u = (torch.tensor(a, requires_grad=True) for a in (model.embed, model.pos, model.w_u, model.b_u))
    layer1, layer2 = M.params_to_torch(model.attn1), M.params_to_torch(model.attn2)
    n = tokens.shape[1]
    blocked = torch.from_numpy(~M.causal_mask(n))  # True = may NOT attend
    x0 = embed[torch.from_numpy(tokens)] + pos
    x1 = x0 + layer1(x0, x0, x0, attn_mask=blocked, need_weights=False)[0]
    x2 = x1 + layer2(x1, x1, x1, attn_mask=blocked, need_weights=False)[0]
    logits = x2 @ w_u + b_u
    targets = torch.from_numpy(induction.next_token_targets(tokens))
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, model.vocab), targets.reshape(-1), ignore_index=-1)
    loss.backward()
    return float(loss.detach()), TwoLayerModel(embed.grad.numpy(), pos.grad.numpy(), grads_from_torch(layer1),
                                               grads_from_torch(layer2), w_u.grad.numpy(), b_u.grad.numpy())


def largest(arrays):
    return max(np.abs(a).max() for a in arrays.values())


@pytest.mark.parametrize("num_heads", [1, 2])
def test_gradients_match_torch_autograd(rng, num_heads):
    model = random_model(rng, vocab=6, n=8, d_model=8, num_heads=num_heads)
    tokens, _ = repeated_sequences(3, 8, 6, seed=int(rng.integers(1000)))
    loss, grads = loss_and_grads(model, tokens)
    torch_loss, theirs = torch_loss_and_grads(model, tokens)
    assert loss == pytest.approx(torch_loss, rel=1e-12)
    ours, theirs = grads.arrays(), theirs.arrays()
    assert ours.keys() == theirs.keys()
    for name in ours:
        close(ours[name], theirs[name], scale=largest(theirs))


def test_gradients_match_finite_differences(rng):
    model = random_model(rng, vocab=4, n=4, d_model=4, num_heads=2)
    tokens, _ = repeated_sequences(2, 4, 4, seed=3)
    _, grads = loss_and_grads(model, tokens)
    numeric = {}
    for name, array in model.arrays().items():
        def loss_of(moved_array, name=name):
            moved = copy.deepcopy(model)
            moved.arrays()[name][...] = moved_array
            return np.asarray(loss_and_grads(moved, tokens)[0])

        numeric[name] = gradcheck(loss_of, array)
    for name, analytic in grads.arrays().items():
        close(analytic, numeric[name], rtol=FD_RTOL, atol_rel=FD_ATOL_REL, scale=largest(numeric))


def test_sequences_repeat_a_segment_of_distinct_tokens_whose_length_varies():
    tokens, half = repeated_sequences(400, 20, 24, seed=1)
    assert tokens.shape == (400, 20) and half.min() == 5 and half.max() == 10
    for row, length in zip(tokens, half):
        assert len(set(row[:length])) == length
        np.testing.assert_array_equal(row[:length], row[length:2 * length])
    second, first = copy_positions(half, 20)
    for b in range(5):
        assert np.flatnonzero(second[b]).tolist() == list(range(half[b], 2 * half[b] - 1))
        assert np.flatnonzero(first[b]).tolist() == list(range(0, half[b] - 1))
    with pytest.raises(ValueError, match="vocab >= n // 2"):
        repeated_sequences(2, 20, 9)


def test_scores_against_loops(rng):
    weights = M.softmax(rng.normal(size=(3, 2, 10, 10)))
    half = np.array([3, 4, 5])
    prev = [np.mean([weights[b, h, i, i - 1] for b in range(3) for i in range(1, half[b])]) for h in range(2)]
    ind = [np.mean([weights[b, h, i, i - half[b] + 1] for b in range(3) for i in range(half[b], 2 * half[b] - 1)])
           for h in range(2)]
    np.testing.assert_allclose(previous_token_score(weights, half), prev, rtol=1e-12)
    np.testing.assert_allclose(induction_score(weights, half), ind, rtol=1e-12)


def test_the_ablation_changes_only_layer_2s_keys(rng):
    model = random_model(rng, vocab=6, n=8, d_model=8, num_heads=1)
    tokens, _ = repeated_sequences(2, 8, 6, seed=0)
    _, w1, w2 = forward(model, tokens)
    _, w1_ablated, w2_ablated = forward(model, tokens, ablate_layer1_in_keys=True)
    same_but_for_rounding(w1, w1_ablated)
    x0 = model.embed[tokens] + model.pos
    x1 = x0 + M.multihead_attention(x0, x0, x0, model.attn1, M.causal_mask(8))[0]
    expected = M.multihead_attention(x1, x0, x1, model.attn2, M.causal_mask(8))[1]
    np.testing.assert_allclose(w2_ablated, expected, rtol=1e-12)
    assert not np.allclose(w2, w2_ablated)


def stored_rows():
    return list(csv.DictReader(io.StringIO(M.notebook.read_result("ch10_induction.csv"))))


def test_the_stored_table_holds_five_seeds_or_more():
    rows = stored_rows()
    assert len({row["seed"] for row in rows}) >= 5
    assert set(rows[0]) == set(induction.INDUCTION_COLUMNS)


def test_a_fresh_run_reproduces_the_stored_row_for_seed_0():
    _, _, summary = induction.induction_run(0)
    row = next(r for r in stored_rows() if r["seed"] == "0")
    for name in ("loss_second", "previous", "induction", "ablated_induction"):
        assert abs(float(row[name]) - summary[name]) < 0.1, name  # other rounding moves a run this much
