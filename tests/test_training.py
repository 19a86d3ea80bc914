"""The tiny model of chapter 13: its task, its gradients, its optimiser, and what training makes of one and two heads.

Oracles: the task's targets against a slow loop written from the task's definition; the gradients against
torch autograd (float64) and central finite differences; Adam against torch.optim.Adam; the trained
heads against the relations' positions, and against a hand-built two-head model that solves the task exactly.
"""

import copy
import math

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.grads import gradcheck, grads_from_torch
from mha_lessons.task import (
    IGNORE, RELATIONS, distinct_queries, make_task, relation_mask, relation_positions, relation_score)
from mha_lessons.training import (
    TinyModel, accuracy, adam_step, cross_entropy, forward, head_attention, init_model, loss_and_grads, train)

from common import FD_ATOL_REL, FD_RTOL, RTOL, close, same_but_for_rounding


def largest(arrays):
    """The largest entry of all the gradients: the key bias's gradient is exactly 0 in exact arithmetic
    (adding b_K to every key adds the same number to a whole row of scores), so its round-off is relative
    to the gradients as a whole."""
    return max(np.abs(a).max() for a in arrays.values())


# ---------------------------------------------------------------- the task, against a slow loop


def slow_targets(tokens, segment):
    """The targets written from the definition, one position at a time."""
    batch, n = tokens.shape
    targets = np.full((batch, n, 2), -1)
    for b in range(batch):
        for i in range(n):
            if i > 0:
                targets[b, i, 0] = tokens[b, i - 1]  # the token one step back
            start = i
            while start % segment != 0:  # walk back to the first position of the segment
                start -= 1
            targets[b, i, 1] = tokens[b, start]
    return targets


@pytest.mark.parametrize("n, segment, vocab", [(12, 4, 8), (7, 3, 5), (5, 5, 2), (6, 1, 3)])
def test_targets_match_a_slow_loop(n, segment, vocab):
    tokens, targets = make_task(20, n, vocab, segment, seed=3)
    assert tokens.shape == (20, n) and targets.shape == (20, n, 2)
    assert tokens.min() >= 0 and tokens.max() < vocab
    np.testing.assert_array_equal(targets, slow_targets(tokens, segment))


def test_relation_positions_masks_and_distinct_queries_match_loops():
    n, segment = 11, 4
    positions = relation_positions(n, segment)
    for i in range(n):
        start = i - i % segment
        assert positions[0, i] == (i - 1 if i > 0 else -1)
        assert positions[1, i] == start
        for relation, target in (("previous", i - 1), ("first", start)):
            row = relation_mask(n, segment, relation)[i]
            assert row.tolist() == [j == target for j in range(n)]
        assert distinct_queries(n, segment)[i] == (i > 0 and i - 1 != start)
        expected_row = relation_mask(n, segment, "first") & distinct_queries(n, segment)[:, None]
        np.testing.assert_array_equal(relation_mask(n, segment, "first", distinct_only=True), expected_row)


def test_tokens_are_seeded_and_use_the_whole_vocabulary():
    a, _ = make_task(200, 12, 8, 4, seed=5)
    b, _ = make_task(200, 12, 8, 4, seed=5)
    c, _ = make_task(200, 12, 8, 4, seed=6)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    counts = np.bincount(a.ravel(), minlength=8)
    # 2400 uniform draws over 8 tokens: 300 expected per token, standard deviation √(2400 · 1/8 · 7/8) ≈ 16.2
    assert np.all(np.abs(counts - 300) < 5 * 16.2), counts


# ---------------------------------------------------------------- gradients and the optimiser


def random_model(rng, vocab, n, d_model, num_heads, keys_see_tokens, values_see_positions=None):
    """A model with every parameter random, biases included (zero biases would hide a wrong bias gradient)."""
    model = init_model(vocab, n, d_model, num_heads, seed=int(rng.integers(1000)), keys_see_tokens=keys_see_tokens,
                       values_see_positions=values_see_positions)
    for name, array in model.arrays().items():
        array[...] = rng.normal(scale=1 / math.sqrt(d_model) if name.startswith("attn") else 1.0, size=array.shape)
    return model


def torch_loss_and_grads(model, tokens, targets):
    """The same model written with torch.nn.MultiheadAttention and F.cross_entropy; gradients by autograd."""
    embed = torch.tensor(model.embed, requires_grad=True)
    pos = torch.tensor(model.pos, requires_grad=True)
    w_out = torch.tensor(model.w_out, requires_grad=True)
    b_out = torch.tensor(model.b_out, requires_grad=True)
    layer = M.params_to_torch(model.attn)  # float64, batch_first
    tokens_t = torch.from_numpy(tokens)
    batch, n = tokens.shape
    # written from the definitions, not from attention_inputs: queries and keys see the tokens or not, values
    # see the positions or not (by default they do exactly when the keys see the tokens)
    values_see_positions = model.keys_see_tokens if model.values_see_positions is None else model.values_see_positions
    x_qk = embed[tokens_t] + pos if model.keys_see_tokens else pos.expand(batch, n, -1)
    x_v = embed[tokens_t] + pos if values_see_positions else embed[tokens_t]
    blocked = torch.from_numpy(~M.causal_mask(n))  # torch's boolean mask: True = may NOT attend
    y, _ = layer(x_qk, x_qk, x_v, attn_mask=blocked, need_weights=False)
    logits = (y @ w_out + b_out).reshape(batch, n, 2, model.vocab)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, model.vocab), torch.from_numpy(targets).reshape(-1),
                                             ignore_index=IGNORE)
    loss.backward()
    grads = TinyModel(embed.grad.numpy(), pos.grad.numpy(), grads_from_torch(layer), w_out.grad.numpy(),
                      b_out.grad.numpy(), model.keys_see_tokens, model.values_see_positions)
    return float(loss.detach()), grads


INPUTS = [(False, None), (True, None), (True, False), (False, True)]  # (keys_see_tokens, values_see_positions)


@pytest.mark.parametrize("num_heads", [1, 2])
@pytest.mark.parametrize("keys_see_tokens, values_see_positions", INPUTS)
def test_gradients_match_torch_autograd(rng, num_heads, keys_see_tokens, values_see_positions):
    model = random_model(rng, vocab=5, n=6, d_model=8, num_heads=num_heads, keys_see_tokens=keys_see_tokens,
                         values_see_positions=values_see_positions)
    tokens, targets = make_task(4, 6, 5, 3, seed=int(rng.integers(1000)))
    loss, grads = loss_and_grads(model, tokens, targets)
    torch_loss, torch_grads = torch_loss_and_grads(model, tokens, targets)
    assert loss == pytest.approx(torch_loss, rel=RTOL)
    ours, theirs = grads.arrays(), torch_grads.arrays()
    assert ours.keys() == theirs.keys()
    for name in ours:
        close(ours[name], theirs[name], scale=largest(theirs))


@pytest.mark.parametrize("keys_see_tokens, values_see_positions", INPUTS)
def test_gradients_match_finite_differences(rng, keys_see_tokens, values_see_positions):
    model = random_model(rng, vocab=3, n=4, d_model=4, num_heads=2, keys_see_tokens=keys_see_tokens,
                         values_see_positions=values_see_positions)
    tokens, targets = make_task(3, 4, 3, 2, seed=int(rng.integers(1000)))
    _, grads = loss_and_grads(model, tokens, targets)
    numeric = {}
    for name, array in model.arrays().items():
        def loss_of(moved_array, name=name):
            moved = copy.deepcopy(model)
            moved.arrays()[name][...] = moved_array
            return np.asarray(loss_and_grads(moved, tokens, targets)[0])

        numeric[name] = gradcheck(loss_of, array)
    for name, analytic in grads.arrays().items():
        close(analytic, numeric[name], rtol=FD_RTOL, atol_rel=FD_ATOL_REL, scale=largest(numeric))


def test_cross_entropy_matches_torch_and_ignores_missing_targets(rng):
    logits = rng.normal(scale=3.0, size=(4, 5, 2, 6))
    targets = rng.integers(6, size=(4, 5, 2))
    targets[:, 0, 0] = IGNORE
    loss, d_logits = cross_entropy(logits, targets)
    t = torch.tensor(logits, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(t.reshape(-1, 6), torch.from_numpy(targets).reshape(-1), ignore_index=IGNORE)
    ref.backward()
    assert loss == pytest.approx(float(ref.detach()), rel=RTOL)
    close(d_logits, t.grad.numpy())
    assert np.all(d_logits[:, 0, 0] == 0)


def test_adam_steps_equal_torch_optim_adam(rng):
    params = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=5)}
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    optimiser = torch.optim.Adam(tensors.values(), lr=0.05)
    state = {}
    for _ in range(4):  # several steps: the bias correction and both running means matter
        grads = {k: rng.normal(size=v.shape) for k, v in params.items()}
        adam_step(params, grads, state, lr=0.05)
        for k, t in tensors.items():
            t.grad = torch.from_numpy(grads[k])
        optimiser.step()
    for k in params:
        close(params[k], tensors[k].detach().numpy())


# ---------------------------------------------------------------- training: one head against two


# The smaller version of the chapter's experiment: n = 8 (two segments of 4), V = 8, d_model = 16,
# 150 Adam steps on batches of 32. About a second per model.
N, SEGMENT, VOCAB, D_MODEL, STEPS = 8, 4, 8, 16, 150


@pytest.fixture(scope="module")
def trained():
    models, histories = {}, {}
    for h in (1, 2):
        models[h] = init_model(VOCAB, N, D_MODEL, h, seed=0)
        histories[h] = train(models[h], STEPS, segment=SEGMENT, batch=32, lr=0.01, seed=0, eval_every=STEPS)
    return models, histories


def hand_built_two_heads(sharpness=200.0):
    """Two heads set by hand (as in chapter 3): head 0 looks one step back, head 1 at the segment's start.

    Positions and tokens are one-hot; a key announces its position as a point on a circle, and a
    query asks for its target's point, so the score is largest exactly at the target.
    """
    model = init_model(VOCAB, N, D_MODEL, 2, seed=0)
    d_k = D_MODEL // 2
    angle = 2 * np.pi * np.arange(N) / N
    circle = np.stack([np.cos(angle), np.sin(angle)], axis=1)  # (n, 2)
    targets = np.maximum(relation_positions(N, SEGMENT), 0)  # (2, n)
    attn = model.attn
    for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        getattr(attn, name)[...] = 0
    model.embed[...] = np.eye(VOCAB, D_MODEL)  # token t -> e_t
    model.pos[...] = np.eye(N, D_MODEL)  # position i -> e_i
    model.w_out[...] = 0
    model.b_out[...] = 0
    for head in range(2):
        cols = slice(head * d_k, head * d_k + 2)
        attn.w_q[:N, cols] = sharpness * circle[targets[head]]  # query i asks for its target's point
        attn.w_k[:N, cols] = circle  # key j is at point j
        attn.w_v[:VOCAB, head * d_k:head * d_k + VOCAB] = np.eye(VOCAB)  # the value is the token, in the head's slice
        attn.w_o[head * d_k:(head + 1) * d_k, head * d_k:(head + 1) * d_k] = np.eye(d_k)
        model.w_out[head * d_k:head * d_k + VOCAB, head * VOCAB:(head + 1) * VOCAB] = np.eye(VOCAB)  # slice -> slot
    return model


def test_two_heads_can_solve_the_task_exactly():
    model = hand_built_two_heads()
    tokens, targets = make_task(500, N, VOCAB, SEGMENT, seed=1)
    assert accuracy(model, tokens, targets) == {"previous": 1.0, "first": 1.0, "both": 1.0}
    weights = head_attention(model)
    for head, relation in enumerate(RELATIONS):
        # the next best key scores sharpness (1 - cos 45°) / √d_k ≈ 20.7 lower: weight below (n - 1) e^-20.7
        assert relation_score(weights[head], relation_mask(N, SEGMENT, relation)) > 1 - N * math.exp(-20)


def test_two_heads_beat_one_by_a_clear_margin(trained):
    # At the distinct positions one head must name two different positions' tokens from one blend. The chapter
    # proves it cannot be right on all of (a, a), (a, b), (b, a), (b, b); trained, it is right on both about
    # when a = b (1 in V = 8) or by luck: 0.23 to 0.35 over seeds 0-7. Two heads can be exact
    # (test_two_heads_can_solve_the_task_exactly) and reach 1.0. Margin: at least 0.95 against at most 0.5.
    _, histories = trained
    one, two = histories[1]["both_distinct"][-1], histories[2]["both_distinct"][-1]
    assert two >= 0.95, two
    assert one <= 0.5, one
    assert histories[2]["both"][-1] >= 0.95
    assert histories[1]["both"][0] < 0.2 and histories[2]["both"][0] < 0.2  # both start near chance


def test_each_trained_head_specialises_in_one_relation(trained):
    models, _ = trained
    weights = head_attention(models[2])  # (h, n, n)
    scores = np.array([[relation_score(weights[head], relation_mask(N, SEGMENT, r, distinct_only=True))
                        for r in RELATIONS] for head in range(2)])  # (head, relation)
    chosen = scores.argmax(axis=1)
    assert sorted(chosen.tolist()) == [0, 1], scores  # the two heads follow different relations
    assert np.all(scores.max(axis=1) >= 0.9), scores  # each puts at least 90 % of its weight on its relation
    assert np.all(scores.min(axis=1) <= 0.1), scores  # and at most 10 % on the other
    # the single head spreads its weight over both positions instead (the chapter's heat-map)
    one = head_attention(models[1])[0]
    spread = [relation_score(one, relation_mask(N, SEGMENT, r, distinct_only=True)) for r in RELATIONS]
    assert min(spread) >= 0.25, spread


def test_one_head_is_wrong_on_one_of_every_four_inputs(trained):
    # The chapter's theorem, checked on the trained single head at every distinct query and every pair a != b:
    # among the sequences with (a, a), (a, b), (b, a), (b, b) at (previous, first), one is predicted wrong.
    models, _ = trained
    context = make_task(1, N, VOCAB, SEGMENT, seed=9)[0][0]  # the other positions' tokens, held fixed
    previous, first = relation_positions(N, SEGMENT)
    for i in np.flatnonzero(distinct_queries(N, SEGMENT)):
        for a in range(VOCAB):
            for b in range(a + 1, VOCAB):
                batch = np.tile(context, (4, 1))
                for row, (x, y) in enumerate([(a, a), (a, b), (b, a), (b, b)]):
                    batch[row, previous[i]], batch[row, first[i]] = x, y
                logits, _ = forward(models[1], batch)
                predicted = logits[:, i].argmax(axis=-1)  # (4, R)
                wanted = batch[:, [previous[i], first[i]]]  # (4, R)
                assert not np.array_equal(predicted, wanted), (i, a, b)


@pytest.mark.parametrize("keys_see_tokens, values_see_positions", [(False, False), (True, False), (True, True)])
def test_the_scores_are_the_weights_times_the_ov_table_plus_the_biases(rng, keys_see_tokens, values_see_positions):
    """eq-ch13-scores, on which chapter 13's proof and its extension stand: psi_rel(C) at query i is
    sum_j a_ij Gamma_rel[tok_j, C] + theta_rel(C), Gamma_rel = E W_V W_O W_out^(rel), whatever the weights depend
    on; values that carry positions add sum_j a_ij phi_rel[j, C], phi_rel = P W_V W_O W_out^(rel) (the dropdown's
    phi terms). Checked against the forward pass, every parameter random."""
    model = init_model(VOCAB, N, D_MODEL, 1, seed=4, keys_see_tokens=keys_see_tokens,
                       values_see_positions=values_see_positions)
    for array in model.arrays().values():  # biases too: zeros would hide theta
        array[...] = rng.normal(scale=0.5, size=array.shape)
    tokens, _ = make_task(3, N, VOCAB, SEGMENT, seed=5)
    logits, weights = forward(model, tokens)  # (B, n, R, V); (h, n, n) or (B, h, n, n)
    a = np.broadcast_to(weights, (3, 1, N, N))[:, 0]  # (B, n, n), one head
    attn = model.attn
    for r in range(len(RELATIONS)):
        w_out = model.w_out[:, r * VOCAB:(r + 1) * VOCAB]  # W_out^(rel), (d_model, V)
        gamma = model.embed @ attn.w_v @ attn.w_o @ w_out  # (V, V)
        theta = (attn.b_v @ attn.w_o + attn.b_o) @ w_out + model.b_out[r * VOCAB:(r + 1) * VOCAB]  # (V,)
        expected = np.einsum("bij,bjc->bic", a, gamma[tokens]) + theta  # (B, n, V)
        if values_see_positions:
            expected += np.einsum("bij,jc->bic", a, model.pos @ attn.w_v @ attn.w_o @ w_out)
        np.testing.assert_allclose(logits[:, :, r], expected, rtol=1e-10, atol=1e-12)


def test_training_is_deterministic():
    runs = []
    for _ in range(2):
        model = init_model(VOCAB, N, D_MODEL, 2, seed=3)
        runs.append((train(model, 10, segment=SEGMENT, batch=8, seed=4, eval_every=5, eval_batch=16), model))
    (history_a, model_a), (history_b, model_b) = runs
    # the same batches and the same steps; bit-for-bit equality of the two runs is not promised by every BLAS
    # (MKL's results may depend on memory alignment), so the same numbers to rounding
    assert history_a.keys() == history_b.keys() and history_a["step"] == history_b["step"]
    for name in history_a:
        same_but_for_rounding(history_a[name], history_b[name], err_msg=name)
    for name, array in model_a.arrays().items():
        same_but_for_rounding(array, model_b.arrays()[name], err_msg=name)
    other = init_model(VOCAB, N, D_MODEL, 2, seed=3)
    train(other, 10, segment=SEGMENT, batch=8, seed=5, eval_every=5, eval_batch=16)
    assert not np.array_equal(other.attn.w_q, model_a.attn.w_q)  # another seed, other batches


# ---------------------------------------------------------------- smaller pieces


def test_same_seed_same_start_for_one_and_two_heads():
    one, two = init_model(8, 12, 16, 1, seed=2), init_model(8, 12, 16, 2, seed=2)
    assert one.size() == two.size() == 8 * 16 + 12 * 16 + M.complexity.param_count(16, 1) + 16 * 16 + 16
    for name, array in one.arrays().items():
        np.testing.assert_array_equal(array, two.arrays()[name])


def test_weights_depend_on_positions_only_unless_keys_see_tokens():
    model = init_model(5, 6, 8, 2, seed=1)
    tokens, _ = make_task(3, 6, 5, 3, seed=2)
    _, weights = forward(model, tokens)
    assert weights.shape == (2, 6, 6)
    same_but_for_rounding(weights, head_attention(model))
    model.keys_see_tokens = True
    _, weights = forward(model, tokens)
    assert weights.shape == (3, 2, 6, 6) and not np.allclose(weights[0], weights[1])
    assert model.values_with_positions   # by default the values follow the keys
    x_qk, x_v = M.training.attention_inputs(model, tokens)
    np.testing.assert_array_equal(x_v, model.embed[tokens] + model.pos)
    model.values_see_positions = False   # the ablation: the same weights, values without positions
    x_qk_ablated, x_v = M.training.attention_inputs(model, tokens)
    np.testing.assert_array_equal(x_qk_ablated, x_qk)
    np.testing.assert_array_equal(x_v, model.embed[tokens])
    same_but_for_rounding(forward(model, tokens)[1], weights)


def test_relation_score_against_a_loop(rng):
    weights = M.softmax(rng.normal(size=(3, 5, 5)))
    marked = rng.random((5, 5)) < 0.3
    marked[1] = False
    kept = [i for i in range(5) if marked[i].any()]
    expected = np.mean([sum(weights[b, i, j] for j in range(5) if marked[i, j]) for b in range(3) for i in kept])
    assert relation_score(weights, marked) == pytest.approx(expected, rel=1e-12)


def test_accuracy_against_a_loop(rng):
    model = random_model(rng, vocab=4, n=6, d_model=8, num_heads=2, keys_see_tokens=False)
    tokens, targets = make_task(30, 6, 4, 3, seed=1)
    predicted = forward(model, tokens)[0].argmax(axis=-1)
    distinct = distinct_queries(6, 3)
    both = [all(predicted[b, i, r] == targets[b, i, r] for r in range(2) if targets[b, i, r] != -1)
            for b in range(30) for i in range(6) if distinct[i]]
    previous = [predicted[b, i, 0] == targets[b, i, 0] for b in range(30) for i in range(1, 6)]
    result = accuracy(model, tokens, targets, positions=distinct)
    assert result["both"] == pytest.approx(np.mean(both))
    assert accuracy(model, tokens, targets)["previous"] == pytest.approx(np.mean(previous))


def test_bad_input_raises_value_errors_that_name_the_numbers():
    model = init_model(5, 6, 8, 2)
    with pytest.raises(ValueError, match="1 <= segment <= n, got n = 6, segment = 7"):
        make_task(2, 6, 5, 7)
    with pytest.raises(ValueError, match="vocab >= 2 and batch >= 1, got vocab = 1"):
        make_task(2, 6, 1, 3)
    with pytest.raises(ValueError, match="relation must be one of"):
        relation_mask(6, 3, "next")
    with pytest.raises(ValueError, match=r"tokens must lie in 0 .. 4, got values 0 .. 5"):
        forward(model, np.array([[0, 1, 2, 3, 4, 5]]))
    with pytest.raises(ValueError, match=r"shape \(1, 4\), but the model has position embeddings for n = 6"):
        forward(model, np.zeros((1, 4), dtype=int))
    with pytest.raises(ValueError, match="array of integers"):
        forward(model, np.zeros((1, 6)))
    with pytest.raises(ValueError, match=r"targets has shape \(1, 6\); .* it must be \(1, 6, 2\)"):
        loss_and_grads(model, np.zeros((1, 6), dtype=int), np.zeros((1, 6), dtype=int))
    with pytest.raises(ValueError, match="must be boolean"):
        relation_score(np.eye(3), np.eye(3))
    with pytest.raises(ValueError, match=r"shape \(2, 2\) does not broadcast to the weights' shape \(3, 3\)"):
        relation_score(np.eye(3), np.eye(2, dtype=bool))
    with pytest.raises(ValueError, match="marks no position"):
        relation_score(np.eye(3), np.zeros((3, 3), dtype=bool))
    with pytest.raises(ValueError, match="pass tokens"):
        head_attention(init_model(5, 6, 8, 2, keys_see_tokens=True))
    with pytest.raises(ValueError, match="steps = -1"):
        train(model, -1)


# ---------------------------------------------------------------- the exercises of chapter 13


def learner_positions(n, segment, previous_at_zero=-1, first_style="position"):
    """relation_positions written with loops, as a learner would, with optional mistakes."""
    rows = [[], []]
    for i in range(n):
        rows[0].append(i - 1 if i > 0 else previous_at_zero)
        if first_style == "position":
            rows[1].append(i - i % segment)
        elif first_style == "segment number":
            rows[1].append(i // segment)
        else:
            rows[1].append(i % segment)
    return np.array(rows)


def test_relation_positions_exercise():
    assert M.exercises.check_relation_positions(learner_positions).ok
    cases = {
        "wrapping around": lambda n, s: np.stack([np.roll(np.arange(n), 1), learner_positions(n, s)[1]]),
        "a 0 there": lambda n, s: learner_positions(n, s, previous_at_zero=0),
        "segment numbers": lambda n, s: learner_positions(n, s, first_style="segment number"),
        "offset inside its segment": lambda n, s: learner_positions(n, s, first_style="offset"),
        "rows are swapped": lambda n, s: learner_positions(n, s)[::-1],
        "shape (2, n)": lambda n, s: learner_positions(n, s).T,
        "the query itself": lambda n, s: np.stack([np.arange(n), learner_positions(n, s)[1]]),
        "not written yet": lambda n, s: (_ for _ in ()).throw(NotImplementedError),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_relation_positions(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def learner_score(weights, marked, skip_empty=True, use_argmax=False, miss=False):
    total, count = 0.0, 0
    for row_w, row_m in zip(weights, marked):
        if skip_empty and not row_m.any():
            continue
        if use_argmax:
            value = float(row_m[np.argmax(row_w)])
        else:
            value = sum(w for w, m in zip(row_w, row_m) if m != miss)
        total, count = total + value, count + 1
    return total / count


def test_relation_score_exercise():
    assert M.exercises.check_relation_score(learner_score).ok
    cases = {
        "including those whose row marks no key": lambda w, m: learner_score(w, m, skip_empty=False),
        "largest weight": lambda w, m: learner_score(w, m, use_argmax=True),
        "misses the relation": lambda w, m: learner_score(w, m, miss=True),
        "forgot to `return`": lambda w, m: None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_relation_score(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def learner_both_right(predictions, targets, segment, which=(0, 1), only_distinct=True, per_relation=False):
    batch, n, _ = targets.shape
    hits, count = 0, 0
    for b in range(batch):
        for i in range(n):
            start = i - i % segment
            if only_distinct and (i == 0 or i - 1 == start):
                continue
            if per_relation:
                for r in which:
                    hits, count = hits + int(predictions[b, i, r] == targets[b, i, r]), count + 1
            else:
                hits += int(all(predictions[b, i, r] == targets[b, i, r] for r in which))
                count += 1
    return hits / count


def test_both_right_exercise():
    assert M.exercises.check_both_right(learner_both_right).ok
    cases = {
        "averaged the two relations separately": lambda p, t, s: learner_both_right(p, t, s, per_relation=True),
        "you counted every position;": lambda p, t, s: learner_both_right(p, t, s, only_distinct=False),
        "previous token only": lambda p, t, s: learner_both_right(p, t, s, which=(0,)),
        "first token of the segment only": lambda p, t, s: learner_both_right(p, t, s, which=(1,)),
        "raised IndexError": lambda p, t, s: p[:, :, 2].mean(),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_both_right(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def learner_head_weights(weights, segment, swap_pq=False, every=False, transpose=False, itself=False):
    """Exercise 4 as a learner writes it, position by position, with switches for the typical mistakes."""
    h, n, _ = weights.shape
    p, q = [], []
    for i in range(n):
        start = i - i % segment
        if not every and (i == 0 or i - 1 == start):
            continue  # the relations coincide, or there is no previous token
        prev = i if itself else i - 1
        get = (lambda l, key: weights[l, key, i]) if transpose else (lambda l, key: weights[l, i, key])
        p.append([get(l, prev) for l in range(h)])
        q.append([get(l, start) for l in range(h)])
    p, q = np.array(p).T, np.array(q).T  # (h, k)
    return (q, p) if swap_pq else (p, q)


def test_head_weights_exercise():
    assert M.exercises.check_head_weights(learner_head_weights).ok
    cases = {
        "w_prev and w_first are swapped": lambda w, s: learner_head_weights(w, s, swap_pq=True),
        "heads are swapped": lambda w, s: tuple(a[::-1] for a in learner_head_weights(w, s)),
        "one row per head": lambda w, s: tuple(a.T for a in learner_head_weights(w, s)),
        "query and key are swapped": lambda w, s: learner_head_weights(w, s, transpose=True),
        "on itself": lambda w, s: learner_head_weights(w, s, itself=True),
        "keeps every position;": lambda w, s: learner_head_weights(w, s, every=True),
        "forgot to `return`": lambda w, s: None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_head_weights(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)
