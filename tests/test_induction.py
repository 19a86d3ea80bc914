"""The two-layer attention-only model of chapter 14's induction heads: data, gradients, scores, ablations, stored runs.

Oracles: the gradients against torch autograd (float64, torch.nn.MultiheadAttention holding our weights) and
central finite differences; the zero- and mean-ablations against the same model written in torch; the data, the
scores and the first copy's floor against loops and an explicit predictor written here; the stored table of
scripts/ch14_induction_seeds.py, whose seed-0 row a fresh run must reproduce to a tolerance. The exercise
checkers of chapter 14 against answers written as a learner would.
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
    TwoLayerModel, copy_positions, first_copy_floor, forward, induction_score, init_two_layer, loss_and_grads,
    prefix_match_score, previous_token_score, repeated_sequences)

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


def test_the_prefix_match_score_against_a_loop_and_the_induction_score(rng):
    n, vocab = 12, 6
    tokens, half = repeated_sequences(6, n, vocab, seed=3)
    weights = M.softmax(np.where(M.causal_mask(n), rng.normal(size=(6, 2, n, n)), -np.inf))
    # on its own sequences, the one key whose previous token is the current one is the induction key
    np.testing.assert_allclose(prefix_match_score(weights, half, tokens), induction_score(weights, half), rtol=1e-12)
    # read as other sequences, a loop over the (sequence, query) pairs that have a matching key
    others = rng.integers(vocab, size=tokens.shape)
    rows = []
    for b in range(6):
        for i in range(half[b], 2 * half[b] - 1):
            keys = [j for j in range(1, i + 1) if others[b, j - 1] == tokens[b, i]]
            if keys:
                rows.append([sum(weights[b, h, i, j] for j in keys) for h in range(2)])
    assert len(rows) > 3
    np.testing.assert_allclose(prefix_match_score(weights, half, tokens, others), np.mean(rows, axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="no query"):
        prefix_match_score(weights, half, tokens, np.full_like(tokens, vocab))
    with pytest.raises(ValueError, match=r"\(B, n\)"):
        prefix_match_score(weights, half, tokens[:, :-1])


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
    same_but_for_rounding(forward(model, tokens, ablate_layer1_in_keys="zero")[2], w2_ablated)   # the same path, named


def torch_ablated(model, tokens, kind):
    """Logits and layer 2's weights with layer 1's output replaced in layer 2's keys, written in torch."""
    with torch.no_grad():
        layer1, layer2 = M.params_to_torch(model.attn1), M.params_to_torch(model.attn2)
        blocked = torch.from_numpy(~M.causal_mask(tokens.shape[1]))  # True = may NOT attend
        x0 = torch.from_numpy(model.embed)[torch.from_numpy(tokens)] + torch.from_numpy(model.pos)
        y1 = layer1(x0, x0, x0, attn_mask=blocked, need_weights=False)[0]
        x1 = x0 + y1
        if kind == "zero":
            keys = x0
        elif kind == "mean":
            keys = x0 + y1.mean(dim=0, keepdim=True)  # (1, n, d_model): one per position
        else:  # resample: sequence b's keys get the output layer 1 wrote for sequence b - 1
            keys = x0 + torch.cat([y1[-1:], y1[:-1]])
        y2, w2 = layer2(x1, keys, x1, attn_mask=blocked, average_attn_weights=False)
        logits = (x1 + y2) @ torch.from_numpy(model.w_u) + torch.from_numpy(model.b_u)
    return logits.numpy(), w2.numpy()


@pytest.mark.parametrize("kind", ["zero", "mean", "resample"])
def test_zero_mean_and_resample_ablations_match_the_model_written_in_torch(rng, kind):
    model = random_model(rng, vocab=6, n=8, d_model=8, num_heads=2)
    tokens, _ = repeated_sequences(5, 8, 6, seed=1)
    logits, _, w2 = forward(model, tokens, ablate_layer1_in_keys=kind)
    torch_logits, torch_w2 = torch_ablated(model, tokens, kind)
    close(logits, torch_logits)
    close(w2, torch_w2)


def test_a_mean_ablation_puts_the_mean_of_layer_1s_output_at_each_position(rng):
    model = random_model(rng, vocab=6, n=8, d_model=8, num_heads=1)
    tokens, _ = repeated_sequences(6, 8, 6, seed=2)
    x0 = model.embed[tokens] + model.pos
    outputs = [M.multihead_attention(x0[b], x0[b], x0[b], model.attn1, M.causal_mask(8))[0] for b in range(6)]
    mean = np.array([np.mean([out[i] for out in outputs], axis=0) for i in range(8)])  # position by position
    np.testing.assert_allclose(induction.layer1_mean(model, tokens), mean, rtol=1e-12, atol=1e-14)
    # an array given in its place is used as it is; the batch's own mean is the "mean" ablation
    by_array = forward(model, tokens, ablate_layer1_in_keys=mean)
    by_name = forward(model, tokens, ablate_layer1_in_keys="mean")
    for ours, theirs in zip(by_array, by_name):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)
    # a single sequence ablated with another batch's mean differs from its own (degenerate) mean
    own = forward(model, tokens[:1], ablate_layer1_in_keys="mean")[2]
    np.testing.assert_allclose(own, forward(model, tokens[:1])[2], rtol=1e-12)   # the mean of one is itself
    assert not np.allclose(forward(model, tokens[:1], ablate_layer1_in_keys=mean)[2], own)


def test_bad_ablations_are_named():
    model = init_two_layer(vocab=6, n=8, d_model=8)
    tokens, _ = repeated_sequences(2, 8, 6)
    with pytest.raises(ValueError, match='"zero", "mean"'):
        forward(model, tokens, ablate_layer1_in_keys="median")
    with pytest.raises(ValueError, match=r"\(n, d_model\) = \(8, 8\), got \(8, 4\)"):
        forward(model, tokens, ablate_layer1_in_keys=np.zeros((8, 4)))
    with pytest.raises(TypeError, match="got list"):
        forward(model, tokens, ablate_layer1_in_keys=[0.0])
    with pytest.raises(ValueError, match="B >= 2 sequences to swap, got B = 1"):
        forward(model, tokens[:1], ablate_layer1_in_keys="resample")


def test_the_first_copys_floor_is_the_loss_of_guessing_among_the_unseen_tokens():
    vocab, n = 12, 16
    tokens, half = repeated_sequences(50, n, vocab, seed=4)
    # the predictor that gives every token not seen so far the same probability, and seen tokens none
    logits = np.zeros((50, n, vocab))
    for b in range(50):
        for i in range(n):
            logits[b, i, tokens[b, :i + 1]] = -1e30
    first_loss, _ = induction.half_losses(logits, tokens, half)
    assert first_copy_floor(half, vocab) == pytest.approx(first_loss, rel=1e-12)
    assert first_copy_floor(half, vocab) < math.log(vocab)
    with pytest.raises(ValueError, match="lengths 2 .. vocab"):
        first_copy_floor([1, 3], vocab)


def stored_rows():
    return list(csv.DictReader(io.StringIO(M.notebook.read_result("ch14_induction.csv"))))


def test_the_stored_table_holds_five_seeds_or_more_and_the_loader_reads_it():
    rows = stored_rows()
    assert len({row["seed"] for row in rows}) >= 5
    assert set(rows[0]) == set(induction.INDUCTION_COLUMNS)
    table = M.seeds.load_induction_table()
    assert table["seed"].tolist() == [int(r["seed"]) for r in rows]
    np.testing.assert_array_equal(table["mean_induction"], [float(r["mean_induction"]) for r in rows])


def test_a_run_summarises_its_ablations_on_the_held_out_batch():
    model, history, summary = induction.induction_run(1, steps=20, eval_every=10, eval_batch=16)
    held_out, half = induction.evaluation_batch(1, 16, 20, 24)
    assert summary["induction"] == history["induction"][-1][0]
    layer2 = {}
    for kind in ("resample", "zero", "mean"):   # not the order of induction.ABLATIONS
        logits, _, layer2[kind] = forward(model, held_out, ablate_layer1_in_keys=kind)
        assert summary[f"{kind}_induction"] == pytest.approx(induction_score(layer2[kind], half)[0], rel=1e-12)
        assert summary[f"{kind}_loss_second"] == pytest.approx(induction.half_losses(logits, held_out, half)[1])
    donors = held_out[np.r_[15, 0:15]]  # sequence b took layer 1's output of sequence b - 1
    assert summary["resample_follows"] == pytest.approx(prefix_match_score(layer2["resample"], half, held_out,
                                                                           donors)[0])
    clean = forward(model, held_out)[2]
    assert summary["clean_follows"] == pytest.approx(prefix_match_score(clean, half, held_out, donors)[0])
    # the first evaluated step whose second-copy loss is below each level, -1 if none
    below = {level: [s for s, loss in zip(history["step"], history["loss_second"]) if loss < level]
             for level in (math.log(model.vocab) - induction.STARTED, induction.DROPPED)}
    assert [summary["drop_start"], summary["drop_step"]] == [steps[0] if steps else -1 for steps in below.values()]


def test_a_fresh_run_reproduces_the_stored_row_for_seed_0():
    _, _, summary = induction.induction_run(0)
    row = next(r for r in stored_rows() if r["seed"] == "0")
    for name in ("loss_second", "previous", "induction", "zero_induction", "mean_induction", "resample_induction",
                 "resample_follows", "clean_follows"):
        assert abs(float(row[name]) - summary[name]) < 0.1, name  # other rounding moves a run this much


# ---------------------------------------------------------------- the exercises of chapter 14, as a learner writes

def learner_previous(weights, half, start=1, stop_after=0, offset=1, per_sequence=False, every=False):
    """The previous-token score with loops, with switches for the typical mistakes."""
    per_head = []
    for head in range(weights.shape[1]):
        values = []
        for b, length in enumerate(half):
            stop = weights.shape[-1] if every else length + stop_after
            row = [weights[b, head, i, i - offset] for i in range(start, stop)]
            values += [np.mean(row)] if per_sequence else row
        per_head.append(np.mean(values))
    return np.array(per_head)


def test_previous_token_score_exercise():
    assert M.exercises.check_previous_token_score(learner_previous).ok
    cases = {
        "counted query 0": lambda w, L: learner_previous(w, L, start=0),
        "counted every query": lambda w, L: learner_previous(w, L, every=True),
        "counted query n_rep too": lambda w, L: learner_previous(w, L, stop_after=1),
        "weight on itself": lambda w, L: learner_previous(w, L, offset=0),
        "averaged each sequence first": lambda w, L: learner_previous(w, L, per_sequence=True),
        "not written yet": lambda w, L: (_ for _ in ()).throw(NotImplementedError),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_previous_token_score(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def learner_induction(weights, half, offset=1, extra=0, transpose=False, per_sequence=False):
    per_head = []
    for head in range(weights.shape[1]):
        values = []
        for b, length in enumerate(half):
            row = []
            for i in range(length, 2 * length - 1 + extra):
                key = i - length + offset
                row.append(weights[b, head, key, i] if transpose else weights[b, head, i, key])
            values += [np.mean(row)] if per_sequence else row
        per_head.append(np.mean(values))
    return np.array(per_head)


def test_induction_score_exercise():
    assert M.exercises.check_induction_score(learner_induction).ok
    cases = {
        "earlier copy of the current token": lambda w, L: learner_induction(w, L, offset=0),
        "counted query 2 n_rep - 1": lambda w, L: learner_induction(w, L, extra=1),
        "query and key are swapped": lambda w, L: learner_induction(w, L, transpose=True),
        "averaged each sequence first": lambda w, L: learner_induction(w, L, per_sequence=True),
        "forgot to `return`": lambda w, L: None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_induction_score(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def learner_floor(half, vocab, seen=1, extra=0, per_sequence=False, guess=False):
    if guess:
        return math.log(vocab)
    values = []
    for length in half:
        row = [math.log(vocab - i - seen) for i in range(length - 1 + extra)]
        values += [sum(row) / len(row)] if per_sequence else row
    return sum(values) / len(values)


def test_first_copy_floor_exercise():
    assert M.exercises.check_first_copy_floor(learner_floor).ok
    cases = {
        "log N_vocab is the loss of guessing": lambda L, V: learner_floor(L, V, guess=True),
        "the current one included": lambda L, V: learner_floor(L, V, seen=0),
        "counted position n_rep - 1": lambda L, V: learner_floor(L, V, extra=1),
        "averaged each sequence first": lambda L, V: learner_floor(L, V, per_sequence=True),
        "raised ZeroDivisionError": lambda L, V: 1 / 0,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_first_copy_floor(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def learner_keys(x0, y1, axes=(0,), keep_x0=True, ablate=True):
    if not ablate:
        return x0 + y1
    mean = y1.mean(axis=axes, keepdims=True)
    return x0 + mean if keep_x0 else np.broadcast_to(mean, x0.shape)


def test_mean_ablated_keys_exercise():
    assert M.exercises.check_mean_ablated_keys(learner_keys).ok
    assert M.exercises.check_mean_ablated_keys(
        lambda x0, y1: np.stack([x0[b] + sum(y1) / len(y1) for b in range(len(x0))])).ok
    cases = {
        "this is zero-ablation": lambda x0, y1: x0.copy(),
        "no ablation at all": lambda x0, y1: learner_keys(x0, y1, ablate=False),
        "over the positions too": lambda x0, y1: learner_keys(x0, y1, axes=(0, 1)),
        "you averaged over the positions;": lambda x0, y1: learner_keys(x0, y1, axes=(1,)),
        "x0 stays in the keys": lambda x0, y1: learner_keys(x0, y1, keep_x0=False),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_mean_ablated_keys(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)
