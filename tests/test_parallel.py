"""Head parallelism: shards, simulated workers, the ring all-reduce, real gloo processes, chapter 11's exercises.

Oracles: an attention written out head by head in this file with np.exp (not the package's code), the
package's single-process layer (itself checked against torch in test_multihead.py), np.sum for the
all-reduce, closed forms for the byte counts, complexity.mha_flops (checked against torch's FLOP counter
in test_complexity.py) for the per-worker work, and real processes for the distributed run.
"""

import importlib.util
import json
import math
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha_lessons as M
from common import random_params, same_but_for_rounding
from mha_lessons.parallel import (
    ParamShard, allreduce_bytes, partial_output, ring_allreduce, ring_schedule, shard_params,
    simulate_head_parallel, worker_heads, worker_matmul_flops,
)

ROOT = Path(__file__).resolve().parent.parent
EPS = np.finfo(np.float64).eps


def heads_by_hand(x_q, x_k, x_v, params, mask):
    """Every head's output, written from the equations of chapter 3 with a loop (the oracle): (h, ..., n, d_k)."""
    d_k = params.d_k
    zero = np.zeros(params.d_model)
    b = {name: zero if getattr(params, name) is None else getattr(params, name) for name in ("b_q", "b_k", "b_v")}
    heads = []
    for i in range(params.num_heads):
        f = slice(i * d_k, (i + 1) * d_k)
        q = x_q @ params.w_q[:, f] + b["b_q"][f]
        k = x_k @ params.w_k[:, f] + b["b_k"][f]
        v = x_v @ params.w_v[:, f] + b["b_v"][f]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d_k)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        top = np.max(s, axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(top), top, 0.0))
        total = e.sum(axis=-1, keepdims=True)
        heads.append(e / np.where(total > 0, total, 1.0) @ v)  # a query that sees nothing gets zeros
    return heads


def term_by_hand(heads, params, num_workers, rank):
    """Worker rank's term: the sum over its heads of head_i @ (rows of head i in W_O), plus b_O on worker 0."""
    d_k, per_worker = params.d_k, params.num_heads // num_workers
    term = sum(heads[i] @ params.w_o[i * d_k:(i + 1) * d_k] for i in range(rank * per_worker, (rank + 1) * per_worker))
    if rank == 0 and params.b_o is not None:
        term = term + params.b_o
    return term


def assert_rounding_close(actual, expected, terms):
    """Equal up to reordered float64 sums.

    Both sides compute the same sums of at most ``terms`` products in another order (one product with all
    columns against p products with some). Reordering a sum of K terms changes it by at most about
    K * eps * (sum of their absolute values); the values here are of order one, so |difference| <=
    K * eps * max(1, |expected|) with a factor 4 for the chain of sums (projection, scores, weighted sum,
    output) is the bound, some 1e-14, far below any real mistake.
    """
    bound = 4 * terms * EPS * np.maximum(1.0, np.abs(expected))
    assert np.all(np.abs(actual - expected) <= bound), float(np.max(np.abs(actual - expected) / bound))


# ---------------------------------------------------------------- which worker holds what

@pytest.mark.parametrize("h, p", [(1, 1), (4, 1), (4, 2), (4, 4), (6, 3), (8, 2)])
def test_shards_hold_columns_of_wq_wk_wv_and_rows_of_wo_and_together_rebuild_the_layer(rng, h, p):
    params = random_params(rng, 2 * h, h)
    shards = [shard_params(params, p, r) for r in range(p)]
    for r, shard in enumerate(shards):
        assert list(shard.heads) == list(range(r * h // p, (r + 1) * h // p))
        assert shard.num_heads == h // p and shard.d_k == params.d_k and shard.d_model == params.d_model
        assert (shard.b_o is not None) == (r == 0)
    for name in ("w_q", "w_k", "w_v"):  # columns, in rank order, make the whole matrix again
        np.testing.assert_array_equal(np.concatenate([getattr(s, name) for s in shards], axis=1),
                                      getattr(params, name))
    np.testing.assert_array_equal(np.concatenate([s.w_o for s in shards], axis=0), params.w_o)  # rows
    for name in ("b_q", "b_k", "b_v"):
        np.testing.assert_array_equal(np.concatenate([getattr(s, name) for s in shards]), getattr(params, name))
    np.testing.assert_array_equal(shards[0].b_o, params.b_o)


def test_shards_are_copies_not_views(rng):
    params = random_params(rng, 8, 4)
    shard = shard_params(params, 2, 1)
    for name, value in vars(shard).items():
        if isinstance(value, np.ndarray):
            assert not np.shares_memory(value, getattr(params, name)), name


def test_layer_without_biases_gives_shards_without_biases(rng):
    shard = shard_params(random_params(rng, 8, 4, bias=False), 2, 0)
    assert shard.b_q is shard.b_k is shard.b_v is shard.b_o is None


# ---------------------------------------------------------------- the terms add up to the layer

CASES = [
    # (batch, n, m, d_model, h, bias, mask kind)
    ((), 5, 5, 8, 4, True, None),
    ((2,), 4, 7, 12, 6, True, "random"),  # cross-attention, n != m
    ((2, 3), 3, 3, 8, 2, False, "causal"),
    ((3,), 6, 4, 16, 8, True, "empty row"),  # a query that may attend to nothing
]


def make_case(rng, batch, n, m, d_model, h, bias, mask_kind):
    params = random_params(rng, d_model, h, bias)
    x_q, x_k, x_v = (rng.normal(size=batch + (length, d_model)) for length in (n, m, m))
    mask = None
    if mask_kind == "causal":
        mask = M.causal_mask(n, m)
    elif mask_kind in ("random", "empty row"):
        mask = rng.random(batch + (n, m)) < 0.6
        mask[..., 0] = True
        if mask_kind == "empty row":
            mask[..., 1, :] = False
    return x_q, x_k, x_v, params, mask


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-n{c[1]}-m{c[2]}-d{c[3]}-h{c[4]}-{c[6]}")
def test_every_term_and_their_sum_match_the_layer_written_out_by_hand(rng, case):
    x_q, x_k, x_v, params, mask = make_case(rng, *case)
    h, d_model, m = params.num_heads, params.d_model, x_k.shape[-2]
    heads = heads_by_hand(x_q, x_k, x_v, params, mask)
    y_single, w_single = M.multihead_attention(x_q, x_k, x_v, params, mask)
    for p in sorted({1, 2, 4, h} & {d for d in range(1, h + 1) if h % d == 0}):
        y, partials = simulate_head_parallel(x_q, x_k, x_v, params, p, mask)
        assert partials.shape == (p,) + y_single.shape
        for r in range(p):
            assert_rounding_close(partials[r], term_by_hand(heads, params, p, r), d_model + m)
        assert_rounding_close(y, y_single, d_model + m)
        weights = np.concatenate(  # each worker's heads' weights, side by side, are the layer's
            [partial_output(x_q, x_k, x_v, shard_params(params, p, r), mask)[1] for r in range(p)], axis=-3)
        assert_rounding_close(weights, w_single, d_model + m)


def test_one_worker_is_the_layer_itself(rng):
    x_q, x_k, x_v, params, mask = make_case(rng, (2,), 4, 6, 12, 3, True, "random")
    y, partials = simulate_head_parallel(x_q, x_k, x_v, params, 1, mask)
    same_but_for_rounding(y, M.multihead_attention(x_q, x_k, x_v, params, mask)[0])


def test_a_term_alone_is_not_the_output_and_b_o_counted_twice_would_show(rng):
    # the equality checks above can fail: one worker's term, or a b_O on every worker, is far off
    x_q, x_k, x_v, params, mask = make_case(rng, (), 5, 5, 8, 4, True, None)
    y, partials = simulate_head_parallel(x_q, x_k, x_v, params, 2, mask)
    assert np.abs(partials[0] - y).max() > 0.1
    assert np.abs(partials.sum(axis=0) + params.b_o - y).max() > 0.1


def test_float32_stays_float32(rng):
    params = M.init_params(8, 4, dtype=np.float32)
    x = rng.normal(size=(3, 8)).astype(np.float32)
    y, partials = simulate_head_parallel(x, x, x, params, 2)
    assert y.dtype == partials.dtype == np.float32


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("p", [3, 5, 8])
def test_workers_that_do_not_divide_the_heads_are_refused_naming_h_and_p(p):
    params = M.init_params(8, 4)
    with pytest.raises(ValueError, match=rf"p = {p} does not divide num_heads = h = 4"):
        shard_params(params, p, 0)
    with pytest.raises(ValueError, match=rf"p = {p} does not divide num_heads = h = 4"):
        simulate_head_parallel(np.ones((2, 8)), np.ones((2, 8)), np.ones((2, 8)), params, p)


@pytest.mark.parametrize("p, rank, words", [(0, 0, "num_workers must be a positive integer, got 0"),
                                            (2.0, 0, "got 2.0"), (True, 0, "got True"),
                                            (2, 2, r"rank must be an integer in \[0, num_workers\) = \[0, 2\), got 2"),
                                            (2, -1, "got -1")])
def test_bad_worker_counts_and_ranks(p, rank, words):
    with pytest.raises(ValueError, match=words):
        worker_heads(4, p, rank)


def test_bad_shards_and_inputs_are_named(rng):
    params = M.init_params(8, 4)
    with pytest.raises(TypeError, match="params must be an MHAParams"):
        shard_params({"w_q": params.w_q}, 2, 0)
    shard = shard_params(params, 2, 0)
    with pytest.raises(ValueError, match=r"x_k has shape \(3, 6\), but the parameters expect d_model = 8"):
        partial_output(np.ones((3, 8)), np.ones((3, 6)), np.ones((3, 8)), shard)
    with pytest.raises(TypeError, match="shard must be a ParamShard"):
        partial_output(np.ones((3, 8)), np.ones((3, 8)), np.ones((3, 8)), params)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 2\) does not broadcast"):
        partial_output(np.ones((3, 8)), np.ones((3, 8)), np.ones((3, 8)), shard, np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"w_o has shape \(8, 4\), expected \(4, 8\)"):
        ParamShard(2, shard.w_q, shard.w_k, shard.w_v, shard.w_o.T, rank=0, num_workers=2)
    with pytest.raises(ValueError, match=r"rank must be an integer in \[0, num_workers\) = \[0, 2\), got 2"):
        ParamShard(2, shard.w_q, shard.w_k, shard.w_v, shard.w_o, rank=2, num_workers=2)


# ---------------------------------------------------------------- the all-reduce and what it costs

@pytest.mark.parametrize("p", [1, 2, 3, 4, 7])
def test_ring_schedule_sends_every_chunk_once_per_step(p):
    schedule = ring_schedule(p)
    assert schedule.shape == (p, 2 * (p - 1))
    for step in range(2 * (p - 1)):  # at each step the p workers send p different chunks
        assert sorted(schedule[:, step]) == list(range(p))


@pytest.mark.parametrize("p, shape", [(1, (4,)), (2, (2, 5, 16)), (3, (7,)), (4, (3, 4)), (5, (3,)), (8, (2, 3, 8))])
def test_ring_allreduce_leaves_the_sum_on_every_worker_and_sends_the_closed_form(rng, p, shape):
    arrays = [rng.integers(-50, 50, size=shape).astype(float) for _ in range(p)]  # integers: sums are exact
    results, sent = ring_allreduce(arrays)
    total = np.sum(arrays, axis=0)
    for result in results:
        np.testing.assert_array_equal(result, total)
    N, itemsize = math.prod(shape), 8
    chunk = N / p  # elements per chunk, on average
    per_step_sizes = [chunk] * (2 * (p - 1))  # reduce-scatter: p - 1 steps, all-gather: p - 1 steps
    assert math.isclose(sent.mean() * itemsize, sum(per_step_sizes) * itemsize, rel_tol=1e-15)
    assert math.isclose(allreduce_bytes(N, p, itemsize), sum(per_step_sizes) * itemsize, rel_tol=1e-15)
    if N % p == 0:  # equal chunks: every worker sends exactly the same
        assert np.all(sent * itemsize == allreduce_bytes(N, p, itemsize))
    else:  # chunks differ by one element, and so do the workers (two chunks per worker are not sent)
        assert sent.max() - sent.min() <= 2


def test_allreduce_bytes_tends_to_twice_the_tensor_and_rejects_nonsense():
    tensor = 4 * 2048 * 4096 * 2
    ratios = [allreduce_bytes(4 * 2048 * 4096, p, 2) / tensor for p in (1, 2, 4, 8, 1024)]
    assert ratios == [0.0, 1.0, 1.5, 1.75, 2 * 1023 / 1024]
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="must be a positive integer"):
            allreduce_bytes(bad, 2)


@pytest.mark.parametrize("n, m, d_model, h, batch", [(4, 4, 8, 2, 1), (100, 300, 128, 8, 2), (7, 50, 96, 12, 4)])
def test_each_worker_does_one_p_th_of_the_matrix_products(n, m, d_model, h, batch):
    total = M.complexity.mha_flops(n, d_model, h, m, batch=batch)["matmul"]
    for p in (d for d in range(1, h + 1) if h % d == 0):
        assert p * worker_matmul_flops(n, d_model, h, p, m, batch=batch) == total


# ---------------------------------------------------------------- real processes

def test_script_runs_two_gloo_processes_and_matches_one_process():
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "head_parallel.py"), "--json"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr  # no warnings: the workers' own output goes to their logs
    report = json.loads(done.stdout)
    assert report["backend"] == "gloo" and report["num_workers"] == 2
    assert report["heads"] == [[0, 1], [2, 3]]
    assert report["equal"] and report["identical_on_all_workers"]
    assert report["max_abs_diff"] <= 1e-12
    assert report["partial_max_abs_diff"] > 1e-3  # so the comparison above can fail
    assert report["shape"] == [2, 5, 16] and report["tensor_bytes"] == 2 * 5 * 16 * 8
    assert report["ring_bytes_per_worker"] == 2 * (2 - 1) / 2 * 2 * 5 * 16 * 8
    print(f"distributed run: {time.monotonic() - start:.1f} s")


def test_a_run_that_cannot_finish_in_time_times_out_and_leaves_no_process():
    with pytest.raises(TimeoutError, match="did not report within timeout = 0.05 s"):
        M.distributed.run_distributed(2, timeout=0.05)
    assert multiprocessing.active_children() == []


def test_missing_gloo_and_bad_sizes_are_clear_errors():
    with pytest.raises(RuntimeError, match="no gloo backend"):
        M.distributed.require_gloo(SimpleNamespace(is_available=lambda: True, is_gloo_available=lambda: False))
    with pytest.raises(RuntimeError, match="no torch.distributed support"):
        M.distributed.require_gloo(SimpleNamespace(is_available=lambda: False, is_gloo_available=lambda: False))
    with pytest.raises(ValueError, match="p = 3 does not divide num_heads = h = 4"):  # before any process starts
        M.distributed.run_distributed(3)
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        M.distributed.run_distributed(2, n=0)
    with pytest.raises(ValueError, match="d_model = 10 is not divisible by num_heads = 4"):
        M.distributed.run_distributed(2, d_model=10)
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        M.distributed.run_distributed(2, timeout=0)
    assert load_script().main(["--workers", "3"]) == 2


def load_script():
    spec = importlib.util.spec_from_file_location("head_parallel", ROOT / "scripts" / "head_parallel.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_script_text_names_the_heads_the_check_and_the_bytes():
    script = load_script()
    args = script.parse(["--workers", "4", "--heads", "8"])
    report = {"num_workers": 4, "backend": "gloo", "heads": [[0, 1], [2, 3], [4, 5], [6, 7]], "shape": (2, 5, 16),
              "dtype": "float64", "allreduce_elements": 160, "tensor_bytes": 1280, "ring_bytes_per_worker": 1920.0,
              "max_abs_diff": 3e-16, "partial_max_abs_diff": 0.61, "max_abs_output": 0.77,
              "identical_on_all_workers": True}
    text = "\n".join(script.describe(report, args))
    for words in ("on 4 processes", "h = 8 heads of d_k = 2", "worker 3 computes heads [6, 7]",
                  "within 1e-12: True", "1 all-reduce of 160 numbers = 1280 bytes", "= 1920 bytes from each worker"):
        assert words in text, words
    assert "within 1e-12: False" in "\n".join(script.describe({**report, "max_abs_diff": 1e-9}, args))


# ---------------------------------------------------------------- chapter 11's exercises

def test_w_o_rows_right_and_wrong():
    def rows(w_o, h, p, r):
        width = w_o.shape[0] // p
        return w_o[r * width:(r + 1) * width, :]

    assert M.exercises.check_w_o_rows(rows).ok
    cases = {
        "columns of W_O": lambda w_o, h, p, r: rows(w_o.T, h, p, r).T,
        "transposed": lambda w_o, h, p, r: rows(w_o.T, h, p, r),
        "rows of one head": lambda w_o, h, p, r: w_o[r * (w_o.shape[0] // h):(r + 1) * (w_o.shape[0] // h)],
        "dealt out in turn": lambda w_o, h, p, r: np.vstack(
            [w_o[i * 2:(i + 1) * 2] for i in range(h) if i % p == r]),
        "ranks count from 0": lambda w_o, h, p, r: rows(w_o, h, p, r + 1),
        "previous worker": lambda w_o, h, p, r: rows(w_o, h, p, r - 1),
        "not written yet": lambda w_o, h, p, r: (_ for _ in ()).throw(NotImplementedError()),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_w_o_rows(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_allreduce_bytes_exercise_right_and_wrong():
    B, n, d, p = 4, 2048, 4096, 8
    numbers = B * n * d
    assert M.exercises.check_allreduce_bytes(2 * (p - 1) * numbers * 4 // p).ok
    cases = {
        "size of the tensor": numbers * 4,
        "one of the two phases": (p - 1) * numbers * 4 // p,
        "not 2": 2 * numbers * 4,
        "counts numbers, not bytes": 2 * (p - 1) * numbers // p,
        "counts bits": 2 * (p - 1) * numbers * 4 * 8 // p,
        "each of the other p - 1": (p - 1) * numbers * 4,
        "full width d_model": 2 * (p - 1) * (B * n * d // p) * 4 // p,
        "is None": None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_allreduce_bytes(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def _worker_output(x, params, p, r, bias="rank 0", heads_per_worker=None, block=True, w_o_columns=False):
    """Exercise 3 as a learner writes it, from the equations, with switches for the typical mistakes."""
    h, d_k = params.num_heads, params.d_k
    mine = [i for i in range(h) if (i // (h // p) == r if block else i % p == r)]  # this worker's heads
    cols = np.concatenate([np.arange(i * d_k, (i + 1) * d_k) for i in mine])
    q = x @ params.w_q[:, cols] + params.b_q[cols]
    k = x @ params.w_k[:, cols] + params.b_k[cols]
    v = x @ params.w_v[:, cols] + params.b_v[cols]
    heads = heads_per_worker or len(mine)  # the mistake: cutting the worker's columns into h heads
    width = len(cols) // heads
    outs = [M.scaled_dot_product_attention(q[:, j * width:(j + 1) * width], k[:, j * width:(j + 1) * width],
                                           v[:, j * width:(j + 1) * width])[0] for j in range(heads)]
    w_o = params.w_o[:, cols] if w_o_columns else params.w_o[cols, :]  # the mistake: columns, which clash
    y = np.concatenate(outs, axis=1) @ w_o
    if bias == "everywhere" or (bias == "rank 0" and r == 0):
        y = y + params.b_o
    return y


def test_worker_output_right_and_wrong():
    assert M.exercises.check_worker_output(_worker_output).ok
    cases = {
        "p times": lambda x, params, p, r: _worker_output(x, params, p, r, bias="everywhere"),
        "b_O is missing": lambda x, params, p, r: _worker_output(x, params, p, r, bias="nowhere"),
        "cut into h = 4 heads": lambda x, params, p, r: _worker_output(x, params, p, r, heads_per_worker=4),
        "other heads than its block": lambda x, params, p, r: _worker_output(x, params, p, r, block=False),
        "raised ValueError": lambda x, params, p, r: _worker_output(x, params, p, r, w_o_columns=True),
        "is None": lambda x, params, p, r: None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_worker_output(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_split_head_counts_exercise_right_and_wrong():
    B, n, m, h, d = 4, 2048, 2048, 32, 4096
    scores, output = B * h * n * m, B * n * d  # one partial score per (sequence, head, query, key); B n d outputs
    assert M.exercises.check_split_head_counts((scores, output)).ok
    assert M.exercises.check_split_head_counts([float(scores), np.int64(output)]).ok
    cases = {
        "batch is missing": (h * n * m, output),
        "one head's scores": (B * n * m, output),
        "one head of one sequence": (n * m, output),
        "features of q": (B * h * n * (d // h), output),
        "counts bytes": (scores * 4, output * 4),
        "output count misses the batch": (scores, n * d),
        "not d_k": (scores, B * n * (d // h)),
        "swapped": (output, scores),
        "give two numbers": "two numbers",
        "counts is None": None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_split_head_counts(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


# ---------------------------------------------------------------- the backward pass, and grouped keys and values

@pytest.mark.parametrize("p", [1, 2, 4])
def test_backward_terms_sum_to_the_layers_input_gradient_and_slices_are_local(rng, p):
    params = random_params(rng, 8, 4)
    x_q, x_kv = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8))
    mask = rng.random((2, 3, 5)) < 0.7
    mask[..., 0] = True
    d_y = rng.normal(size=(2, 3, 8))
    (dx_q, dx_k, dx_v), grads = M.parallel.simulate_head_parallel_backward(x_q, x_kv, x_kv, params, d_y, p, mask)
    # the oracle: torch autograd on the whole layer (torch's own nn.MultiheadAttention, float64)
    module = M.params_to_torch(params)
    tq, tkv = torch.tensor(x_q, requires_grad=True), torch.tensor(x_kv, requires_grad=True)
    y, _ = module(tq, tkv, tkv, attn_mask=torch.from_numpy(~np.repeat(mask, 4, axis=0)))
    y.backward(torch.from_numpy(d_y))
    np.testing.assert_allclose(dx_q, tq.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx_k + dx_v, tkv.grad.numpy(), rtol=1e-10, atol=1e-12)
    full = M.grads.grads_from_torch(module)
    width = 8 // p  # each worker's columns of W_Q, W_K, W_V and rows of W_O
    for r, g in enumerate(grads):
        cols = slice(r * width, (r + 1) * width)
        np.testing.assert_allclose(g.w_q, full.w_q[:, cols], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g.w_v, full.w_v[:, cols], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g.w_o, full.w_o[cols], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g.b_k, full.b_k[cols], rtol=1e-10, atol=1e-12)
        assert (g.b_o is not None) == (r == 0)


@pytest.mark.parametrize("h, h_kv, p", [(8, 8, 4), (8, 4, 2), (8, 2, 4), (8, 1, 8), (6, 3, 3), (8, 2, 8)])
def test_grouped_heads_split_over_workers_equal_torchs_gqa_and_replicate_as_predicted(rng, h, h_kv, p):
    q, k, v = rng.normal(size=(2, h, 3, 4)), rng.normal(size=(2, h_kv, 5, 4)), rng.normal(size=(2, h_kv, 5, 3))
    out = M.parallel.simulate_gqa_head_parallel(q, k, v, p)
    ref = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), enable_gqa=True).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    held = [M.parallel.worker_kv_heads(h, h_kv, p, r) for r in range(p)]
    copies = np.bincount([j for kv in held for j in kv], minlength=h_kv)
    assert np.all(copies == max(1, p // h_kv))  # every key/value head on p / h_kv workers, or on one
    for r, kv in enumerate(held):  # exactly the key/value heads its query heads read: i // (h / h_kv)
        assert set(kv) == {i // (h // h_kv) for i in M.parallel.worker_heads(h, p, r)}


def test_worker_groups_that_would_straddle_are_refused_with_the_numbers():
    with pytest.raises(ValueError, match=r"h_kv = 3 key/value heads and p = 4 workers"):
        M.parallel.worker_kv_heads(12, 3, 4, 1)


def test_a_shards_arrays_are_its_weights_and_biases_only():
    shard = shard_params(M.init_params(8, 4), 2, 0)
    assert list(shard.arrays()) == ["w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"]
    assert sum(a.size for a in shard.arrays().values()) == 4 * 8 * 4 + 3 * 4 + 8


# ---------------------------------------------------------------- what each worker holds, and the alpha-beta model

def holdings_by_sets(p):
    """The ring all-reduce followed with Python sets of worker ranks, written from the algorithm's description:
    worker r sends to r + 1; reduce-scatter step s: r sends chunk (r - s) mod p, which the receiver merges into
    its copy; all-gather step s: r sends chunk (r + 1 - s) mod p, which the receiver replaces."""
    held = [[{r} for _ in range(p)] for r in range(p)]
    states = [[[set(c) for c in row] for row in held]]
    for step in range(2 * (p - 1)):
        gather = step >= p - 1
        s = step - (p - 1) if gather else step
        messages = [(r, (r + 1 - s) % p if gather else (r - s) % p) for r in range(p)]
        sent = [(r, c, set(held[r][c])) for r, c in messages]
        for r, c, terms in sent:
            receiver = held[(r + 1) % p]
            receiver[c] = terms if gather else receiver[c] | terms
        states.append([[set(c) for c in row] for row in held])
    return states


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_ring_holdings_follow_the_algorithm_step_by_step(p):
    holdings = M.parallel.ring_holdings(p)
    assert holdings.shape == (2 * (p - 1) + 1, p, p)
    for step, state in enumerate(holdings_by_sets(p)):
        for r in range(p):
            for c in range(p):
                assert holdings[step, r, c] == sum(2 ** w for w in state[r][c]), (step, r, c)
    full = 2 ** p - 1
    assert [int(np.flatnonzero(holdings[p - 1, r] == full)[0]) for r in range(p)] == [(r + 1) % p for r in range(p)]
    assert (holdings[-1] == full).all()


def test_ring_allreduce_history_starts_with_the_inputs_and_ends_with_the_results(rng):
    arrays = [rng.normal(size=(2, 3)) for _ in range(3)]
    results, sent, states = ring_allreduce(arrays, history=True)
    assert states.shape == (5, 3, 2, 3)
    np.testing.assert_array_equal(states[0], np.stack(arrays))
    np.testing.assert_array_equal(states[-1], np.stack(results))
    np.testing.assert_allclose(states[-1][1], np.sum(arrays, axis=0), rtol=1e-12)


@pytest.mark.parametrize("p", [2, 3, 8])
def test_allreduce_time_counts_2_p_minus_1_latencies_and_the_ring_bytes_over_the_bandwidth(p):
    t_lat, r_link = 3e-6, 5e10
    n_bytes = np.array([0.0, 1e3, 1e9])
    expected = [2 * (p - 1) * t_lat + allreduce_bytes(int(max(b, 1)), p, 1) / r_link if b else 2 * (p - 1) * t_lat
                for b in n_bytes]
    np.testing.assert_allclose(M.parallel.allreduce_time(n_bytes, p, t_lat, r_link), expected, rtol=1e-12)
    assert isinstance(M.parallel.allreduce_time(1e3, p, t_lat, r_link), float)


def test_fit_alpha_beta_recovers_known_rates_and_weighs_every_size_alike(rng):
    sizes = 4.0 * 4 ** np.arange(11)
    for p, t_lat, r_link in [(2, 1.2e-4, 2e9), (4, 5e-6, 4e11)]:
        exact = M.parallel.allreduce_time(sizes, p, t_lat, r_link)
        assert M.parallel.fit_alpha_beta(sizes, exact, p) == pytest.approx((t_lat, r_link), rel=1e-9)
        noisy = exact * np.exp(rng.normal(scale=0.05, size=sizes.size))  # 5 % noise on every size
        fitted = M.parallel.fit_alpha_beta(sizes, noisy, p)
        assert fitted == pytest.approx((t_lat, r_link), rel=0.15)
    # relative weighting: a large error on the largest size must not swamp the latency
    skewed = M.parallel.allreduce_time(sizes, 2, 1e-4, 1e9)
    skewed[-1] *= 1.5
    assert M.parallel.fit_alpha_beta(sizes, skewed, 2)[0] == pytest.approx(1e-4, rel=0.1)


def test_alpha_beta_bad_input_names_the_numbers():
    with pytest.raises(ValueError, match="t_lat >= 0 seconds and r_link > 0 bytes/s, got t_lat = 1e-06, r_link = 0"):
        M.parallel.allreduce_time(10, 2, 1e-6, 0)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        M.parallel.allreduce_time(10, 2, 1e-6, 1e9, algorithm="tree")
    with pytest.raises(ValueError, match=r"same length >= 2, got shapes \(3,\) and \(2,\)"):
        M.parallel.fit_alpha_beta([1, 2, 3], [1, 2], 2)
    with pytest.raises(ValueError, match="p >= 2 workers \\(got 1\\)"):
        M.parallel.fit_alpha_beta([1, 2], [1, 2], 1)
    with pytest.raises(ValueError, match="bandwidth is not positive"):
        M.parallel.fit_alpha_beta([1, 1e6], [2e-3, 1e-3], 2)


def test_the_stored_gloo_times_fit_the_model_within_a_factor_of_two():
    rows = [line.split(",") for line in M.notebook.read_result("allreduce_gloo.csv").split()]
    assert rows[0] == ["bytes", "median_seconds", "min_seconds"]
    sizes, median, fastest = (np.array(c, dtype=float) for c in zip(*rows[1:]))
    assert np.all(fastest <= median) and sizes.size >= 8
    t_lat, r_link = M.parallel.fit_alpha_beta(sizes, fastest, 2)
    assert t_lat > 0 and r_link > 0
    assert np.all(np.abs(np.log(M.parallel.allreduce_time(sizes, 2, t_lat, r_link) / fastest)) < np.log(2))
    assert "Machine:" in M.notebook.read_result("allreduce_gloo.md")


def test_time_allreduce_runs_on_two_gloo_processes_and_reports_every_size():
    result = M.distributed.time_allreduce(2, sizes=(1, 1024), repeats=3, timeout=120)
    assert result["num_workers"] == 2 and result["bytes"] == [4, 4096]
    assert all(0 < fast <= med < 10 for fast, med in zip(result["min_seconds"], result["seconds"]))
    assert multiprocessing.active_children() == []
    with pytest.raises(ValueError, match="repeats must be a positive integer, got 0"):
        M.distributed.time_allreduce(2, repeats=0)


def test_one_shot_allreduce_pays_one_latency_and_p_minus_1_terms_into_each_worker():
    """A one-shot all-reduce written out: each worker reads the p - 1 other terms (N bytes each) in one step."""
    t_lat, r_link, n_bytes = 1e-5, 1e9, 8192.0
    for p in (1, 2, 4, 8):
        expected = 0.0 if p == 1 else t_lat + sum(n_bytes for _ in range(p - 1)) / r_link
        assert M.parallel.allreduce_time(n_bytes, p, t_lat, r_link, algorithm="one_shot") == pytest.approx(expected)
    # a small message: the ring's time grows like its 2 (p - 1) latencies, the one-shot's barely moves
    ring = [M.parallel.allreduce_time(n_bytes, p, t_lat, 4e11) for p in (2, 8)]
    shot = [M.parallel.allreduce_time(n_bytes, p, t_lat, 4e11, algorithm="one_shot") for p in (2, 8)]
    assert ring[1] / ring[0] > 6.9 and shot[1] / shot[0] < 1.02
    # a large one: the one-shot moves (p - 1) N into each worker, the ring 2 (p - 1) / p N
    big = 64 * 2**20
    assert M.parallel.allreduce_time(big, 8, t_lat, 4e11, algorithm="one_shot") > \
        2.5 * M.parallel.allreduce_time(big, 8, t_lat, 4e11)  # p / 2 = 4 times the bytes


def test_split_head_work_exercise_right_and_wrong():
    B, n, m, h, d = 4, 2048, 2048, 32, 4096
    d_k = d // h
    work = 2 * B * n * m * d_k
    swapped = B * n * d_k // 2 + B * m * d_k // 2  # each worker's halves of q and of k
    assert M.exercises.check_split_head_work((work, work // 2, swapped)).ok
    assert M.exercises.check_split_head_work([float(work), np.int64(work // 2), float(swapped)]).ok
    cases = {
        "need not both compute every score": (work, work, swapped),
        "a multiply-add is 2 FLOPs": (work // 2, work // 4, swapped),
        "batch is missing": (work // B, work // B // 2, swapped),
        "all h heads' scores": (2 * B * n * m * d, B * n * m * d, swapped),
        "half of the work at p = h": (work, work // 4, swapped),
        "only the half of q": (work, work // 2, B * n * d_k // 2),
        "only d_k / 2 features": (work, work // 2, B * (n + m) * d_k),
        "counts bytes": (work, work // 2, 4 * swapped),
        "give three numbers": "three numbers",
        "answer is None": None,
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_split_head_work(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)
