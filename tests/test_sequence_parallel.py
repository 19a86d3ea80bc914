"""Sequence parallelism simulated in numpy: ring attention and the all-to-alls of DeepSpeed-Ulysses.

Oracles: unsplit attention from torch.nn.functional.scaled_dot_product_attention in float64 (with and without
the causal mask), np.logaddexp-free merging written from exp sums here, and closed-form counts of what each
worker sends.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha_lessons as M
from mha_lessons.sequence_parallel import (
    all_to_all, merge_partials, ring_attention, ring_attention_sent, ulysses_attention, ulysses_sent)


def torch_attention(q, k, v, causal):
    return F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), is_causal=causal).numpy()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape, p", [((8, 3), 1), ((8, 3), 2), ((2, 12, 4), 3), ((2, 3, 12, 4), 4), ((1, 6, 2), 6)])
def test_ring_attention_equals_unsplit_attention_and_sends_p_minus_1_blocks(rng, shape, p, causal):
    q, k = rng.normal(size=shape), rng.normal(size=shape)
    v = rng.normal(size=shape[:-1] + (5,))
    out, sent = ring_attention(q, k, v, p, causal=causal)
    np.testing.assert_allclose(out, torch_attention(q, k, v, causal), rtol=1e-10, atol=1e-12)
    heads = int(np.prod(shape[:-2]))
    assert (sent == ring_attention_sent(shape[-2], shape[-1], 5, p, heads=heads)).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape, p", [((4, 8, 3), 1), ((4, 8, 3), 2), ((4, 8, 3), 4), ((2, 6, 9, 4), 3)])
def test_ulysses_equals_unsplit_attention_and_sends_the_closed_form(rng, shape, p, causal):
    q, k, v = (rng.normal(size=shape) for _ in range(3))
    out, sent = ulysses_attention(q, k, v, p, causal=causal)
    np.testing.assert_allclose(out, torch_attention(q, k, v, causal), rtol=1e-10, atol=1e-12)
    batch = int(np.prod(shape[:-3]))
    assert (sent == batch * ulysses_sent(shape[-2], shape[-1], shape[-1], p, heads=shape[-3])).all()


def test_merge_of_parts_equals_the_union_and_ignores_a_fully_masked_part(rng):
    q, k, v = rng.normal(size=(4, 3)), rng.normal(size=(7, 3)), rng.normal(size=(7, 2))
    scores = q @ k.T / np.sqrt(3)
    parts = []
    for cols in (slice(0, 3), slice(3, 7)):
        e = np.exp(scores[:, cols])
        parts += [e @ v[cols] / e.sum(axis=1, keepdims=True), np.log(e.sum(axis=1))]
    out, lse = merge_partials(*parts)
    e = np.exp(scores)
    np.testing.assert_allclose(out, e @ v / e.sum(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(lse, np.log(e.sum(axis=1)), rtol=1e-12)
    nothing = (np.zeros((4, 2)), np.full(4, -np.inf))
    np.testing.assert_array_equal(merge_partials(*parts[:2], *nothing)[0], parts[0])
    both_empty, lse_empty = merge_partials(*nothing, *nothing)
    assert np.all(both_empty == 0) and np.all(np.isneginf(lse_empty))


def test_all_to_all_transposes_who_holds_what():
    parts = [[np.full(3, 10 * r + j) for j in range(3)] for r in range(3)]
    received, sent = all_to_all(parts)
    for j in range(3):
        assert [int(x[0]) for x in received[j]] == [10 * r + j for r in range(3)]
    assert sent.tolist() == [6, 6, 6]


def test_bad_splits_name_the_numbers(rng):
    x = rng.normal(size=(4, 8, 2))
    with pytest.raises(ValueError, match="p = 3 does not divide the sequence length n = 8"):
        ring_attention(x, x, x, 3)
    with pytest.raises(ValueError, match="p = 8 must divide the number of heads h = 4"):
        ulysses_attention(x, x, x, 8)
    with pytest.raises(ValueError, match="p = 3 must divide the number of heads h = 4"):
        ulysses_attention(x, x, x, 3)
    with pytest.raises(ValueError, match="self-attention"):
        ring_attention(x, x[:, :4], x, 2)
    with pytest.raises(ValueError, match="p pieces"):
        all_to_all([[np.zeros(1)], [np.zeros(1), np.zeros(1)]])


@pytest.mark.parametrize("p, causal", [(2, True), (4, False)])
def test_ring_attention_on_real_gloo_processes_equals_unsplit_attention(p, causal):
    import multiprocessing

    report = M.distributed.run_ring_attention(p, num_heads=2, n=16, d_k=4, causal=causal, seed=1, timeout=120)
    assert report["max_abs_diff"] <= 1e-12 and report["max_abs_output"] > 0.1
    assert report["positions"] == [[r * 16 // p, (r + 1) * 16 // p] for r in range(p)]
    assert report["sent"] == [ring_attention_sent(16, 4, 4, p, heads=2)] * p
    assert multiprocessing.active_children() == []
    with pytest.raises(ValueError, match="p = 3 does not divide the sequence length n = 16"):
        M.distributed.run_ring_attention(3)
