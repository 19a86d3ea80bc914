"""Sequence parallelism simulated in numpy: ring attention, its layouts and overlap, and DeepSpeed-Ulysses.

Oracles: unsplit attention from torch.nn.functional.scaled_dot_product_attention in float64 (with and without
the causal mask), np.logaddexp-free merging written from exp sums here, closed-form counts of what each
worker sends, a brute-force count of the pairs a full causal mask allows, chapter 7's tile count, torch's FLOP
counter for one step's compute, and a bisection for the block that hides its transfer.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha_lessons as M
from mha_lessons.ring_overlap import min_hidden_block, ring_step_times, ring_time
from mha_lessons.sequence_layouts import (
    LAYOUTS, causal_pairs, owners, ring_balance, ring_work, worker_positions)
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


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape, p", [((16, 3), 2), ((2, 24, 4), 3), ((2, 3, 16, 4), 4), ((1, 8, 2), 4)])
def test_ring_attention_equals_unsplit_attention_in_every_layout(rng, shape, p, causal, layout):
    q, k, v = (rng.normal(size=shape) for _ in range(3))
    out, sent = ring_attention(q, k, v, p, causal=causal, layout=layout)
    np.testing.assert_allclose(out, torch_attention(q, k, v, causal), rtol=1e-10, atol=1e-12)
    assert (sent == ring_attention_sent(shape[-2], shape[-1], shape[-1], p, heads=int(np.prod(shape[:-2])))).all()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n, p", [(8, 1), (16, 2), (24, 3), (64, 8)])
def test_layouts_give_every_position_to_exactly_one_worker(n, p, layout):
    held = [worker_positions(n, p, r, layout) for r in range(p)]
    assert all(len(h) == n // p and (np.diff(h) > 0).all() for h in held)
    assert sorted(np.concatenate(held).tolist()) == list(range(n))
    who = owners(n, p, layout)
    assert all((who[h] == r).all() for r, h in enumerate(held))


def brute_force_ring_work(n, p, layout):
    """Pairs per (step, worker), counted on the full (n, n) causal mask: the oracle of ring_work."""
    allowed = np.tril(np.ones((n, n), dtype=bool))  # query i (row) may see key j (column) iff j <= i
    held = [worker_positions(n, p, r, layout) for r in range(p)]
    return np.array([[allowed[np.ix_(held[r], held[(r - s) % p])].sum() for r in range(p)] for s in range(p)])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n, p", [(8, 2), (24, 3), (64, 4), (96, 8)])
def test_ring_work_counts_the_pairs_of_the_causal_mask(n, p, layout):
    work = ring_work(n, p, layout)
    np.testing.assert_array_equal(work, brute_force_ring_work(n, p, layout))
    assert work.sum() == n * (n + 1) // 2
    assert (ring_work(n, p, layout, causal=False) == (n // p) ** 2).all()


def test_ring_work_closed_forms_contiguous_striped_zigzag():
    n, p = 4096, 8
    c = n // p
    per_worker = {layout: ring_work(n, p, layout).sum(axis=0) for layout in LAYOUTS}
    r = np.arange(p)
    np.testing.assert_array_equal(per_worker["contiguous"], r * c * c + c * (c + 1) // 2)
    np.testing.assert_array_equal(per_worker["striped"], p * c * (c - 1) // 2 + c * (r + 1))
    np.testing.assert_array_equal(per_worker["zigzag"], np.full(p, p * c * c // 2 + c // 2))
    assert ring_balance(n, p) == pytest.approx((p - 1) * c * c / (n * (n + 1) / 2 / p) + c * (c + 1) / 2 /
                                               (n * (n + 1) / 2 / p))
    assert ring_balance(n, p, "zigzag") == 1.0 and 1 < ring_balance(n, p, "striped") < 1.01


def test_the_contiguous_ring_computes_chapter_7s_causal_tiles():
    """With blocks of n / p, the steps a contiguous causal ring does not skip are the tiles chapter 7 computes."""
    for n, p in [(16, 4), (64, 8)]:
        computed = int((ring_work(n, p) > 0).sum())
        assert computed == M.blockwise.tiles_computed(n, n, n // p, n // p, causal=True) == p * (p + 1) // 2


def test_causal_pairs_and_layouts_refuse_bad_input():
    assert causal_pairs([5, 0], [0, 5, 9]) == 3
    with pytest.raises(ValueError, match="layout must be one of"):
        worker_positions(8, 2, 0, "diagonal")
    with pytest.raises(ValueError, match="2p = 8 chunks, and 2p does not divide the sequence length n = 12"):
        ring_work(12, 4, "zigzag")
    with pytest.raises(ValueError, match="p = 5 does not divide the sequence length n = 12"):
        ring_attention(np.zeros((12, 2)), np.zeros((12, 2)), np.zeros((12, 2)), 5, layout="striped")
    with pytest.raises(ValueError, match=r"rank must be an integer in \[0, num_workers\) = \[0, 2\), got 2"):
        worker_positions(8, 2, 2)


def test_one_steps_flops_are_torchs_count_of_its_two_products():
    from torch.utils.flop_counter import FlopCounterMode

    c, d_k, d_v, h = 64, 16, 8, 3
    q, k, v = torch.zeros(h, c, d_k), torch.zeros(h, c, d_k), torch.zeros(h, c, d_v)
    with FlopCounterMode(display=False) as counter:
        torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
    compute, transfer = ring_step_times(c, d_k, d_v, flop_rate=1.0, r_link=1.0, heads=h, itemsize=1)
    assert compute == counter.get_total_flops()  # at 1 FLOP/s, seconds are FLOPs
    assert transfer == k.numel() + v.numel()  # at 1 byte/s and 1 byte a number: the key and value blocks


def test_min_hidden_block_is_where_compute_catches_up_with_transfer():
    rate, link = 989.5e12, 450e9
    for t_lat, fill in [(0.0, 1.0), (0.0, 0.5), (2e-5, 1.0)]:
        c = min_hidden_block(rate, link, t_lat=t_lat, fill=fill, d_k=128, d_v=128, heads=8)

        def gap(block):
            compute, transfer = ring_step_times(block, 128, 128, rate, link, heads=8, t_lat=t_lat, fill=fill)
            return compute - transfer

        below, above = 1, 10**7  # bisection on the integer block: the first block whose compute is not shorter
        while above - below > 1:
            middle = (below + above) // 2
            below, above = (middle, above) if gap(middle) < 0 else (below, middle)
        assert math.ceil(c - 1e-9) == above
    assert min_hidden_block(rate, link) == pytest.approx(rate * 2 / (2 * link))  # no latency: R_FLOP b / (2 r_link)
    assert min_hidden_block(rate, link, d_k=64, d_v=64, heads=32) == pytest.approx(min_hidden_block(rate, link))


def test_ring_time_overlapped_is_the_longer_of_the_two_and_never_more_than_serial():
    for block in (256, 2048, 16384):
        compute, transfer = ring_step_times(block, 128, 128, 989.5e12, 450e9, heads=8)
        overlapped = ring_time(block, 8, 128, 128, 989.5e12, 450e9, heads=8)
        serial = ring_time(block, 8, 128, 128, 989.5e12, 450e9, heads=8, overlap=False)
        assert overlapped == pytest.approx(7 * max(compute, transfer) + compute)
        assert serial == pytest.approx(8 * compute + 7 * transfer) and overlapped <= serial
    with pytest.raises(ValueError, match="fill is the fraction"):
        ring_step_times(8, 4, 4, 1.0, 1.0, fill=0)
    with pytest.raises(ValueError, match="flop_rate > 0, r_link > 0 and t_lat >= 0"):
        min_hidden_block(1e12, -1.0)


@pytest.mark.parametrize("p, causal, layout", [(2, True, "striped"), (4, False, "contiguous")])
def test_ring_attention_on_real_gloo_processes_equals_unsplit_attention(p, causal, layout):
    import multiprocessing

    report = M.distributed.run_ring_attention(p, num_heads=2, n=16, d_k=4, causal=causal, layout=layout, seed=1,
                                              timeout=120)
    assert report["max_abs_diff"] <= 1e-12 and report["max_abs_output"] > 0.1
    assert report["positions"] == [worker_positions(16, p, r, layout).tolist() for r in range(p)]
    assert report["sent"] == [ring_attention_sent(16, 4, 4, p, heads=2)] * p
    assert multiprocessing.active_children() == []
    with pytest.raises(ValueError, match="p = 3 does not divide the sequence length n = 16"):
        M.distributed.run_ring_attention(3)


# ---------------------------------------------------------------- chapter 12's exercises

def test_ring_pairs_exercise_right_and_wrong():
    c, p = 512, 8
    first, last = c * (c + 1) // 2, (p - 1) * c * c + c * (c + 1) // 2
    assert M.exercises.check_ring_pairs((first, last)).ok
    cases = {
        "includes its diagonal": (c * c / 2, last),
        "own block is causal": (c * c, last),
        "own block is missing": (first, (p - 1) * c * c),
        "causal, not full": (first, p * c * c),
        "p - 1 = 7": (first, (p - 2) * c * c + first),
        "average worker": (first, 4096 * 4097 / 2 / p),
        "give 2 numbers": "two",
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_ring_pairs(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_zigzag_exercise_right_and_wrong():
    def zigzag(n, p, r):  # written as a learner would, from chunk numbers
        size = n // (2 * p)
        return [size * r + i for i in range(size)] + [size * (2 * p - 1 - r) + i for i in range(size)]

    assert M.exercises.check_zigzag_positions(zigzag).ok
    assert M.exercises.check_zigzag_positions(lambda n, p, r: zigzag(n, p, r)[::-1]).ok  # any order
    cases = {
        "contiguous blocks": lambda n, p, r: list(range(r * n // p, (r + 1) * n // p)),
        "striped positions": lambda n, p, r: list(range(r, n, p)),
        "counting back from the end": lambda n, p, r: [2 * r, 2 * r + 1, 2 * (p + r), 2 * (p + r) + 1],
        "one too far": lambda n, p, r: [2 * r, 2 * r + 1, 2 * (2 * p - r), 2 * (2 * p - r) + 1],
        "chunk numbers": lambda n, p, r: [r, 2 * p - 1 - r],
        "not written yet": lambda n, p, r: (_ for _ in ()).throw(NotImplementedError),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_zigzag_positions(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_min_block_exercise_right_and_wrong():
    assert M.exercises.check_min_block((8000, 16000)).ok
    cases = {
        "swapped": (16000, 8000),
        "each number takes 2 bytes": (4000, 8000),
        "not 2 d_k": (16000, 32000),
        "bits": (64000, 128000),
        "compute is halved": (8000, 8000),
        "larger block, not a smaller one": (8000, 4000),
        "is None": None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_min_block(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_sequence_volumes_exercise_right_and_wrong():
    h, n, d, p = 32, 131072, 128, 8
    ring, ulysses = 2 * (p - 1) * h * n * d // p, 4 * (p - 1) * h * n * d // p ** 2
    assert M.exercises.check_sequence_volumes((ring, ulysses)).ok
    cases = {
        "p - 1 blocks, not p": (2 * h * n * d, ulysses),
        "a key block and a value block": (ring // 2, ulysses),
        "all h heads": (ring // h, ulysses),
        "the output goes back too": (ring, 3 * (p - 1) * h * n * d // p ** 2),
        "sends (p - 1) / p": (ring, 4 * h * n * d // p),
        "n / p positions only": (ring, ulysses * p),
        "counts bytes": (ring, 2 * ulysses),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_sequence_volumes(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)
