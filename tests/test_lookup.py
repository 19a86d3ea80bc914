"""The two-position lookup: exact with two heads, at best half right with one."""

import math

import numpy as np
import pytest

import mha_lessons as M
from mha_lessons.lookup import lookup_target, lookup_tokens, relative_error, two_position_lookup

N, D_CONTENT, TARGETS = 6, 4, (1, 4)


def run(num_heads, batch=64, seed=0, gap=20.0):
    x = lookup_tokens(batch, N, D_CONTENT, seed=seed)
    params = two_position_lookup(num_heads, N, D_CONTENT, TARGETS, gap=gap)
    y, weights = M.multihead_attention(x, x, x, params)
    return x, y, weights, lookup_target(x, N, D_CONTENT, TARGETS)


def test_two_heads_each_attend_to_their_position():
    _, _, weights, _ = run(2)
    leak = (N - 1) * math.exp(-20.0)  # every other key has weight exp(-gap) relative to the target
    for head, target in enumerate(TARGETS):
        np.testing.assert_allclose(weights[:, head, :, target], 1.0, atol=leak)


def test_two_heads_solve_the_task_up_to_softmax_leakage():
    x, y, weights, target = run(2)
    # Each head outputs c_t + sum_{j != t} a_j (c_j - c_t); bound the error by the leaked weight.
    c = x[..., :D_CONTENT]
    for head, t in enumerate(TARGETS):
        slot = y[..., head * D_CONTENT:(head + 1) * D_CONTENT]
        leaked = 1 - weights[:, head, :, t]  # (B, n)
        spread = np.max(np.linalg.norm(c - c[:, t:t + 1], axis=-1), axis=-1)  # (B,)
        err = np.linalg.norm(slot - target[..., head * D_CONTENT:(head + 1) * D_CONTENT], axis=-1)
        assert np.all(err <= leaked * spread[:, None] * (1 + 1e-9) + 1e-15)
    assert relative_error(y, target) < 1e-12


def test_one_head_outputs_the_equal_blend_in_both_slots():
    x, y, weights, target = run(1)
    np.testing.assert_allclose(weights[:, 0, :, TARGETS[0]], 0.5, atol=1e-8)
    np.testing.assert_allclose(weights[:, 0, :, TARGETS[1]], 0.5, atol=1e-8)
    blend = (x[:, TARGETS[0], :D_CONTENT] + x[:, TARGETS[1], :D_CONTENT]) / 2  # (B, d_content)
    np.testing.assert_allclose(y[..., :D_CONTENT], np.broadcast_to(blend[:, None], y[..., :D_CONTENT].shape), atol=1e-7)
    np.testing.assert_allclose(y[..., D_CONTENT:2 * D_CONTENT], y[..., :D_CONTENT], rtol=1e-12)


def test_one_head_loses_half_the_target():
    # Closed form: with z = (c0 + c1)/2 in both slots, the error is |c1 - c0|^2 / 2 per query while the
    # target's size is |c0|^2 + |c1|^2; for independent standard normal contents the ratio of their
    # expectations is d_content / (2 d_content) = 1/2.
    batch = 4000
    _, y, _, target = run(1, batch=batch, seed=3)
    # The estimate is a ratio of sums of `samples` i.i.d. terms; the numerator's terms are chi-square(1)
    # (variance 2), the denominator's chi-square(2)/2 per component (variance 1). The delta method gives a
    # standard error below sqrt((2 + 1) / 4 / samples); allow five of them.
    samples = batch * D_CONTENT
    tolerance = 5 * math.sqrt(3 / 4 / samples)
    assert abs(relative_error(y, target) - 0.5) < tolerance


@pytest.mark.parametrize("p", [0.5, 0.7, 0.9, 1.0])
def test_no_linear_readout_of_a_single_blend_beats_one_half(p):
    # Whatever blend p c0 + (1 - p) c1 one head forms, the best linear map back to [c0, c1]
    # (least squares, an independent oracle) leaves half of the target's variance unexplained.
    rng = np.random.default_rng(7)
    samples = 20000
    c0, c1 = rng.normal(size=(2, samples, D_CONTENT))
    z = p * c0 + (1 - p) * c1  # (samples, d_content)
    target = np.concatenate([c0, c1], axis=-1)  # (samples, 2 d_content)
    readout, *_ = np.linalg.lstsq(z, target, rcond=None)
    unexplained = relative_error(z @ readout, target)
    assert abs(unexplained - 0.5) < 5 * math.sqrt(3 / 4 / (samples * D_CONTENT))


def test_bad_input():
    with pytest.raises(ValueError, match=r"1 or 2 heads, got num_heads = 3"):
        two_position_lookup(3, N, D_CONTENT, TARGETS)
    with pytest.raises(ValueError, match=r"two different positions in range\(n\) = range\(6\), got \(2, 2\)"):
        two_position_lookup(2, N, D_CONTENT, (2, 2))
    with pytest.raises(ValueError, match=r"y of shape \(2,\) and target of shape \(3,\) differ"):
        relative_error(np.zeros(2), np.ones(3))
