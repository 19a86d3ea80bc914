"""Time multi-head attention on a CPU: our numpy layer beside PyTorch's, what each speed-up bought, and threads.

Chapter 4 reads the tables this script writes into mha_lessons/results/ (and, with ``--out DIR``, copies there):

1. ``mha_vs_n.csv``: time against the sequence length n (d_model = 512, h = 8, batch 1, float32) for numpy
   and torch (``need_weights=True``), with numpy's peak memory (tracemalloc) beside the formula's prediction.
2. ``mha_target.csv``: the target point (B = 4, n = 1024, d_model = 512, h = 8, float32): four versions of the
   attention core, from a straightforward one to the package's, then the package's layer and torch's.
3. ``mha_upcast.csv``: the two matrix products that the straightforward version runs in float64 (a float64
   scale promotes the scores, then the weights times v, then the heads' outputs times W_O), timed in float64
   and in float32 at the target point: the part of change 1's saving that is arithmetic, not memory passes.
4. ``mha_stages.csv``: each stage of the package's layer timed on its own at the target point, with its FLOPs
   and the bytes it must move (``M.complexity.mha_intensity``).
5. ``mha_machine.csv``: the machine's rates that a roofline needs, on one thread: the FLOP rate of a large
   float32 matrix product, and the byte rate of an element-wise pass over an array as large as the target point's
   scores, 134 MB (in place, into a new array, and the exponential).
6. ``mha_threads.csv``: at the target point, the numpy layer beside PyTorch's CPU paths
   (``nn.MultiheadAttention`` with ``need_weights=True`` and ``False``, and the same projections around
   ``F.scaled_dot_product_attention``) on 1, 2 and all the machine's threads; the median, fastest and slowest
   of several calls each, and the machine (CPU model, cores, BLAS, versions, date) and how the libraries were
   run (column ``libraries``) in every row.

plus ``mha_summary.md`` (the machine, the fits, the ratios).

Parts 1-5 run on one thread: the environment variables below are set before numpy and torch are imported (they
have no effect later) unless the environment already sets them, and the summary says how many threads torch used.
Part 6 runs each thread count in fresh Python processes, one for numpy's layer and one for PyTorch's three paths:
numpy's BLAS (OPENBLAS_NUM_THREADS) gets the threads in the first, PyTorch's (OMP_NUM_THREADS, MKL_NUM_THREADS,
``torch.set_num_threads``) in the second, and the other library one thread. In one process, numpy's and PyTorch's
thread pools would each hold as many threads as there are cores, and the threads of a BLAS or OpenMP pool keep
polling for work for a while after each call, so the library timed next can share the cores with them. The run of
2026-11-27, which timed both in one process, found numpy's layer no faster on 16 threads than on one and PyTorch's
``need_weights=True`` (timed right after it) four times slower than the shared measurement of 2026-11-26
(``h100_layer_2026-11-26.csv``); apart, neither library's threads can slow the other's. Every time is
``time.perf_counter`` around one call; the versions timed in one process take turns, so that a change of the
machine's load affects them alike.

Run it on a quiet machine: a ranking read from a machine that other work loads is not a ranking. The full run
takes about 1-1.5 minutes on a quiet 16-core server and 2-3 minutes on a 2-core one; ``--quick`` (small sizes,
results into benchmarks/quick/, not the package) under a minute.

Usage: python benchmarks/bench_mha.py [--quick] [--out DIR] [--repeats R]
"""

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # before numpy and torch are imported, or it has no effect

import argparse  # noqa: E402
import csv  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mha_lessons as M  # noqa: E402
from _machine import QUICK_RESULTS, RESULTS, describe  # noqa: E402

TARGET = dict(batch=4, n=1024, d_model=512, h=8)  # the target point of chapter 4
QUICK_TARGET = dict(batch=1, n=256, d_model=512, h=8)


# ---------------------------------------------------------------- four versions of the attention core
# Each takes heads q (..., n, d_k), k and v (..., m, d_k) and returns the output and the weights.

def core_straightforward(q, k, v):
    """Textbook code: np.sqrt returns a float64 scalar, which silently upcasts float32 scores to float64.

    The weights are then float64 too, so ``weights @ v`` (float64 times float32) runs as a float64 product,
    and so does the output projection after it: two matrix products in float64, besides the passes.
    """
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # float64 (..., n, m)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))  # two more (..., n, m) temporaries
    weights = e / e.sum(axis=-1, keepdims=True)  # and one more
    return weights @ v, weights


def core_no_upcast(q, k, v):
    """The same with a Python float for the scale: float32 stays float32."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def core_scale_queries(q, k, v):
    """Scale the (n, d_k) queries instead of the (n, m) scores."""
    scores = (q * (1 / math.sqrt(q.shape[-1]))) @ np.swapaxes(k, -1, -2)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def core_package(q, k, v):
    """The package's scaled_dot_product_attention: scaled queries and a softmax done in place."""
    return M.scaled_dot_product_attention(q, k, v)


CORES = [
    ("straightforward (float64 upcast, temporaries)", core_straightforward),
    ("scale as a Python float (no upcast)", core_no_upcast),
    ("scale the queries, not the scores", core_scale_queries),
    ("softmax in place (the package)", core_package),
]


def layer_with_core(core, x, params):
    """Self-attention with the package's projections and heads around a given attention core."""
    h = params.num_heads
    q, k, v = (M.split_heads(x @ w + b, h) for w, b in ((params.w_q, params.b_q), (params.w_k, params.b_k),
                                                          (params.w_v, params.b_v)))  # (B, n, d_model) -> (B, h, n, d_k)
    out, weights = core(q, k, v)
    return M.combine_heads(out) @ params.w_o + params.b_o, weights  # (B, h, n, d_k) -> (B, n, d_model)


# ---------------------------------------------------------------- timing helpers

def call_times(fns, repeats):
    """Seconds of ``repeats`` calls of each function, after one warm-up call each, the functions taking turns."""
    for fn in fns:
        fn()  # warm up
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, own in zip(fns, times):
            start = time.perf_counter()
            fn()
            own.append(time.perf_counter() - start)
    return times


def best_times(fns, repeats):
    """The fastest of ``repeats`` calls of each function (other work can only slow a call down)."""
    return [min(own) for own in call_times(fns, repeats)]


def best_time(fn, repeats):
    return best_times([fn], repeats)[0]


def repeats_for(seconds_per_call, budget=1.0, lo=2, hi=8):
    return int(min(hi, max(lo, budget // max(seconds_per_call, 1e-6))))


def setup(batch, n, d_model, h, seed=0):
    params = M.init_params(d_model, h, seed=seed, dtype=np.float32)
    x = np.random.default_rng(seed).normal(size=(batch, n, d_model)).astype(np.float32)  # (B, n, d_model)
    module = M.params_to_torch(params)
    return params, x, module, torch.from_numpy(x)


def torch_layers(module, xt, h):
    """PyTorch's CPU paths for the same layer, each a function of no arguments."""
    batch, n, d_model = xt.shape
    d_k = d_model // h
    w_in, b_in = module.in_proj_weight, module.in_proj_bias  # (3 d_model, d_model), (3 d_model,)
    w_out, b_out = module.out_proj.weight, module.out_proj.bias

    def need_weights(flag):
        def run():
            with torch.no_grad():
                if flag:
                    return module(xt, xt, xt, need_weights=True, average_attn_weights=False)[0]
                return module(xt, xt, xt, need_weights=False)[0]
        return run

    def sdpa():
        with torch.no_grad():
            qkv = torch.nn.functional.linear(xt, w_in, b_in)  # (B, n, 3 d_model)
            q, k, v = qkv.view(batch, n, 3, h, d_k).permute(2, 0, 3, 1, 4)  # -> 3 of (B, h, n, d_k)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, h, n, d_k)
            o = o.transpose(1, 2).reshape(batch, n, d_model)  # (B, h, n, d_k) -> (B, n, d_model)
            return torch.nn.functional.linear(o, w_out, b_out)

    return {"torch nn.MultiheadAttention, need_weights=True": need_weights(True),
            "torch nn.MultiheadAttention, need_weights=False": need_weights(False),
            "torch F.scaled_dot_product_attention (same projections)": sdpa}


def write_csv(results, name, header, rows):
    with open(results / name, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def blas_description():
    """numpy's BLAS and torch's, as each library reports it: 'numpy: scipy-openblas 0.3.31; torch: mkl'."""
    numpy_blas = "unknown"
    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        numpy_blas = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    except Exception:  # older numpy: no mode="dicts"
        pass
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    capability = re.search(r"CPU capability usage: (\w+)", config)
    return (f"numpy: {numpy_blas}; torch: {blas.group(1) if blas else 'unknown'}"
            + (f" ({capability.group(1)} kernels)" if capability else ""))


def versions():
    return f"Python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}"


def machine_line():
    """The machine and versions in one line, as the chapters print it: CPU, cores, system, Python, numpy, torch."""
    return f"{describe()}, torch {torch.__version__}"


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


# ---------------------------------------------------------------- 1. time against n

def sweep_n(results, ns, d_model=512, h=8):
    rows = []
    for i, n in enumerate(ns, 1):
        params, x, module, xt = setup(1, n, d_model, h)
        ours = lambda: M.multihead_attention(x, x, x, params)  # noqa: E731
        theirs = torch_layers(module, xt, h)["torch nn.MultiheadAttention, need_weights=True"]
        start = time.perf_counter()
        ours()
        reps = repeats_for(time.perf_counter() - start)
        t_ours, t_theirs = best_times([ours, theirs], reps)
        peak = M.complexity.measure_peak_bytes(ours)
        predicted = M.complexity.mha_memory(n, d_model, h)["activations"]
        flops = M.complexity.mha_flops(n, d_model, h)["total"]
        rows.append([n, t_ours, t_theirs, peak, predicted, flops])
        print(f"  [{i}/{len(ns)}] n = {n:>5}: numpy {t_ours * 1e3:8.1f} ms, torch {t_theirs * 1e3:8.1f} ms "
              f"({reps} calls each), peak {peak / 2**20:7.1f} MiB", flush=True)
    write_csv(results, "mha_vs_n.csv", ["n", "numpy_s", "torch_s", "numpy_peak_bytes", "predicted_bytes", "flops"],
              rows)
    return rows


# ---------------------------------------------------------------- 2. the four cores at the target point

def target_point(results, batch, n, d_model, h, repeats):
    params, x, module, xt = setup(batch, n, d_model, h)
    flops = M.complexity.mha_flops(n, d_model, h, batch=batch)["matmul"]
    reference, _ = M.multihead_attention(x, x, x, params)
    for _, core in CORES:  # every version computes the same layer
        np.testing.assert_allclose(layer_with_core(core, x, params)[0], reference, rtol=2e-3, atol=2e-4)
    torch_layer = torch_layers(module, xt, h)["torch nn.MultiheadAttention, need_weights=True"]
    version_fns = [(label, lambda core=core: layer_with_core(core, x, params)) for label, core in CORES]
    version_fns += [("M.multihead_attention", lambda: M.multihead_attention(x, x, x, params)),
                    ("torch.nn.MultiheadAttention", torch_layer)]
    times = best_times([fn for _, fn in version_fns], repeats)
    rows = [[label, t, t / times[-1], flops / t / 1e9] for (label, _), t in zip(version_fns, times)]
    for i, row in enumerate(rows, 1):
        print(f"  [{i}/{len(rows)}] {row[0]}: {row[1] * 1e3:.0f} ms = {row[2]:.2f} x torch", flush=True)
    write_csv(results, "mha_target.csv", ["version", "seconds", "ratio_to_torch", "gflops"], rows)
    return rows


# ---------------------------------------------------------------- 3. the float64 products of change 1

def upcast_products(results, batch, n, d_model, h, repeats):
    """The weighted sum and the output projection in float64 (as the straightforward core runs them) and float32."""
    params, x, _, _ = setup(batch, n, d_model, h)
    d_k = d_model // h
    q, k, v = (M.split_heads(x @ w, h) for w in (params.w_q, params.w_k, params.w_v))  # (B, h, n, d_k)
    weights32 = M.attention.softmax_inplace((q @ np.swapaxes(k, -1, -2)) / math.sqrt(d_k))  # (B, h, n, m)
    weights64 = weights32.astype(np.float64)  # what the straightforward core's float64 weights look like
    concat32 = M.combine_heads(weights32 @ v)  # (B, h, n, d_k) -> (B, n, d_model)
    concat64 = concat32.astype(np.float64)
    parts = {  # part: (float32 call, float64 call as numpy promotes it: float64 times float32)
        "weighted_sum": (lambda: weights32 @ v, lambda: weights64 @ v),
        "output_projection": (lambda: concat32 @ params.w_o, lambda: concat64 @ params.w_o),
    }
    assert (weights64 @ v).dtype == (concat64 @ params.w_o).dtype == np.float64  # the promotion the core suffers
    fns = [fn for pair in parts.values() for fn in pair]
    times = best_times(fns, repeats)
    rows = [[name, times[2 * i], times[2 * i + 1]] for i, name in enumerate(parts)]
    for name, t32, t64 in rows:
        print(f"  {name:>17}: float32 {t32 * 1e3:6.1f} ms, float64 {t64 * 1e3:6.1f} ms", flush=True)
    write_csv(results, "mha_upcast.csv", ["product", "float32_s", "float64_s"], rows)
    return rows


# ---------------------------------------------------------------- 4. each stage at the target point

def stage_profile(results, batch, n, d_model, h, repeats):
    """Time each stage of the package's layer on its own, at the target point, the stages taking turns.

    The stages are those of ``M.complexity.mha_intensity`` and run the package's own lines in its order,
    each on the arrays the stage before produced; a stage that makes a new array makes it on every call,
    as the layer does. The softmax works in place, so after its first call it normalises rows that are
    already probabilities: the same passes over the same bytes.
    """
    params, x, _, _ = setup(batch, n, d_model, h)
    d_k = d_model // h
    projected = {name: x @ w for name, w in (("q", params.w_q), ("k", params.w_k), ("v", params.w_v))}
    q, k, v = (M.split_heads(projected[name], h) for name in "qkv")  # (B, n, d_model) -> (B, h, n, d_k)
    q_scaled = q * (1 / math.sqrt(d_k))
    scores = q_scaled @ np.swapaxes(k, -1, -2)  # (B, h, n, m)
    weights = M.attention.softmax_inplace(scores.copy())
    out = weights @ v  # (B, h, n, d_k)
    concat = M.combine_heads(out)  # (B, h, n, d_k) -> (B, n, d_model)
    y = concat @ params.w_o

    def biases():  # the four in-place additions of the layer
        for array, b in ((projected["q"], params.b_q), (projected["k"], params.b_k),
                         (projected["v"], params.b_v), (y, params.b_o)):
            array += b

    stages = {
        "q_projection": lambda: x @ params.w_q,
        "k_projection": lambda: x @ params.w_k,
        "v_projection": lambda: x @ params.w_v,
        "bias": biases,
        "scale": lambda: q * (1 / math.sqrt(d_k)),
        "scores": lambda: q_scaled @ np.swapaxes(k, -1, -2),
        "softmax": lambda: M.attention.softmax_inplace(weights),
        "weighted_sum": lambda: weights @ v,
        "combine_heads": lambda: M.combine_heads(out),
        "output_projection": lambda: concat @ params.w_o,
    }
    layer = lambda: M.multihead_attention(x, x, x, params)  # noqa: E731
    times = best_times([*stages.values(), layer], repeats)
    counted = M.complexity.mha_intensity(n, d_model, h, batch=batch)
    assert set(counted) == set(stages)
    rows = [[name, t, counted[name]["flops"], counted[name]["bytes"]] for name, t in zip(stages, times)]
    for name, t, flops, moved in rows:
        print(f"  {name:>17}: {t * 1e3:7.1f} ms, {flops / t / 1e9:6.1f} GFLOP/s, {moved / t / 1e9:6.1f} GB/s",
              flush=True)
    print(f"  sum of the stages {sum(r[1] for r in rows) * 1e3:.0f} ms, the whole layer {times[-1] * 1e3:.0f} ms")
    write_csv(results, "mha_stages.csv", ["stage", "seconds", "flops", "bytes"],
              rows + [["whole layer", times[-1], "", ""]])
    return rows, times[-1]


# ---------------------------------------------------------------- 5. the machine's rates, one thread

def matmul_gflops(size=2048, repeats=5):
    """R_FLOP of chapter 4: the float32 FLOP rate of one large square matrix product, the BLAS's best case."""
    a = np.random.default_rng(0).normal(size=(size, size)).astype(np.float32)
    t = best_time(lambda: a @ a, repeats)
    return 2 * size ** 3 / t / 1e9


def stream_gbps(numbers, repeats=7, *, kind="in place"):
    """The rate at which one element-wise pass streams a float32 array: chapter 4's R_mem (in place), R_new.

    The array has as many numbers as the scores at the target point (B h n m), far more than a cache holds.
    Each pass reads every number and writes one (8 bytes a number):

    - ``"in place"``: a multiplication written back into the array, as the softmax's passes work;
    - ``"new array"``: the same multiplication into a new array, as ``scores / scale`` or ``scores - max`` would;
    - ``"exp"``: the exponential into an existing array, the softmax's costliest pass.
    """
    a = np.full(numbers, -0.5, dtype=np.float32)
    out = np.empty_like(a)
    one = np.float32(1.0)
    pass_ = {"in place": lambda: np.multiply(a, one, out=a), "new array": lambda: np.multiply(a, one),
             "exp": lambda: np.exp(a, out=out)}[kind]
    return 8 * numbers / best_time(pass_, repeats) / 1e9


def machine_rates(results, numbers, matmul_size):
    peak = matmul_gflops(matmul_size)
    rates = {kind: stream_gbps(numbers, kind=kind) for kind in ("in place", "new array", "exp")}
    write_csv(results, "mha_machine.csv", ["quantity", "value", "unit"],
              [["matmul_float32", peak, "GFLOP/s"], ["inplace_pass_float32", rates["in place"], "GB/s"],
               ["new_array_pass_float32", rates["new array"], "GB/s"], ["exp_pass_float32", rates["exp"], "GB/s"]])
    print(f"  matmul {peak:.1f} GFLOP/s; passes: in place {rates['in place']:.1f}, new array "
          f"{rates['new array']:.1f}, exp {rates['exp']:.1f} GB/s", flush=True)
    return peak, rates


def warm_memory(gib):
    """Touch a few GiB once before timing anything.

    On a virtual machine the first use of a page of memory can be far slower than any later use (the host
    backs guest memory lazily): on this project's machine, fresh memory was first written at 0.4 GB/s and at
    8 GB/s on a second try. The layers allocate large arrays, so without this the first measurements would
    time the host, not the code.
    """
    np.ones(int(gib * 2**30) // 4, dtype=np.float32)


# ---------------------------------------------------------------- 6. threads: numpy beside torch's CPU paths

def thread_worker(threads, group, batch, n, d_model, h, repeats):
    """Run in a fresh process whose environment gives ``group``'s library ``threads`` threads: time its layers.

    ``group`` is ``"numpy"`` (the package's layer; torch kept to one thread) or ``"torch"`` (PyTorch's three
    paths; numpy's BLAS kept to one thread by the environment). Prints the times as JSON.
    """
    torch.set_num_threads(threads if group == "torch" else 1)
    params, x, module, xt = setup(batch, n, d_model, h)
    ours, _ = M.multihead_attention(x, x, x, params)  # the reference every path must compute
    if group == "numpy":
        layers = {"numpy M.multihead_attention": lambda: M.multihead_attention(x, x, x, params)}
    else:
        layers = torch_layers(module, xt, h)
    for label, fn in layers.items():
        np.testing.assert_allclose(np.asarray(fn()[0] if label.startswith("numpy") else fn()), ours,
                                   rtol=2e-3, atol=2e-4, err_msg=label)
    times = call_times(list(layers.values()), repeats)
    print(json.dumps({"threads": threads, "torch_threads": torch.get_num_threads(),
                      "times": dict(zip(layers, times))}))


LIBRARIES_APART = "numpy and torch in separate processes"  # the ``libraries`` column of mha_threads.csv


def thread_table(results, thread_counts, target, repeats):
    machine = describe()
    rows = []
    for threads in thread_counts:
        for group in ("numpy", "torch"):
            numpy_threads, torch_threads = (threads, 1) if group == "numpy" else (1, threads)
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(numpy_threads), OMP_NUM_THREADS=str(torch_threads),
                       MKL_NUM_THREADS=str(torch_threads))
            command = [sys.executable, __file__, "--thread-worker", str(threads), "--group", group,
                       "--repeats", str(repeats),
                       "--size", ",".join(str(target[key]) for key in ("batch", "n", "d_model", "h"))]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"the {group} worker for {threads} threads failed:\n{done.stderr}")
            report = json.loads(done.stdout.strip().splitlines()[-1])
            for label, times in report["times"].items():
                rows.append([threads, label, statistics.median(times), min(times), max(times), len(times),
                             machine, blas_description(), versions(), today(), LIBRARIES_APART])
                print(f"  {threads:>3} threads: {label:<56} median {statistics.median(times) * 1e3:7.1f} ms "
                      f"(fastest {min(times) * 1e3:.1f}, slowest {max(times) * 1e3:.1f})", flush=True)
    write_csv(results, "mha_threads.csv", ["threads", "version", "median_s", "min_s", "max_s", "calls", "machine",
                                           "blas", "versions", "date", "libraries"], rows)
    return rows


# ---------------------------------------------------------------- the run

WRITTEN = ("mha_vs_n.csv", "mha_target.csv", "mha_upcast.csv", "mha_stages.csv", "mha_machine.csv",
           "mha_threads.csv", "mha_summary.md")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, results into benchmarks/quick/")
    parser.add_argument("--out", type=Path, help="also copy the tables into this folder")
    parser.add_argument("--thread-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--group", choices=("numpy", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, help="timed calls per measurement at the target point "
                        "(default 5, 3 with --quick); more on a machine that other work shares")
    parser.add_argument("--size", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.thread_worker:
        batch, n, d_model, h = (int(v) for v in args.size.split(","))
        thread_worker(args.thread_worker, args.group, batch, n, d_model, h, args.repeats or 5)
        return
    results = QUICK_RESULTS if args.quick else RESULTS
    results.mkdir(parents=True, exist_ok=True)
    target = QUICK_TARGET if args.quick else TARGET
    repeats = args.repeats or (3 if args.quick else 5)
    cores = os.cpu_count() or 1
    thread_counts = sorted({1, min(2, cores), cores})
    start = time.perf_counter()
    print(f"Machine: {machine_line()}; BLAS {blas_description()}; "
          f"torch uses {torch.get_num_threads()} thread(s) in parts 1-5", flush=True)
    warm_memory(0.5 if args.quick else 4)
    parts = []

    def part(title, fn):
        t0 = time.perf_counter()
        print(title, flush=True)
        value = fn()
        parts.append((title, time.perf_counter() - t0))
        return value

    ns = [64, 128, 256, 512] if args.quick else [64, 128, 256, 512, 1024, 1448, 2048, 2896, 4096]
    rows_n = part("1. time against n, one thread", lambda: sweep_n(results, ns))
    target_rows = part("2. the four cores at the target point", lambda: target_point(results, **target,
                                                                                    repeats=repeats))
    upcast = part("3. the two products the float64 scale promotes",
                  lambda: upcast_products(results, **target, repeats=repeats))
    stage_rows, layer_s = part("4. each stage at the target point",
                               lambda: stage_profile(results, **target, repeats=repeats))
    numbers = target["batch"] * target["h"] * target["n"] ** 2  # as many as the target's scores
    peak, rates = part("5. the machine's rates, one thread",
                       lambda: machine_rates(results, numbers, 512 if args.quick else 2048))
    threads = part(f"6. numpy beside torch's CPU paths on {thread_counts} threads",
                   lambda: thread_table(results, thread_counts, target, repeats))

    large = [r for r in rows_n if r[0] >= (256 if args.quick else 1024)]
    slope, _, se = M.stats.fit_loglog_slope([r[0] for r in large], [r[1] for r in large])
    slope_t, _, se_t = M.stats.fit_loglog_slope([r[0] for r in large], [r[2] for r in large])
    target_text = ", ".join(f"{key} = {value}" for key, value in target.items())
    summary = [
        f"Machine: {machine_line()}; BLAS {blas_description()}; measured {today()}.",
        "",
        "# Multi-head attention timings on a CPU (benchmarks/bench_mha.py)",
        "",
        f"Parts 1-5 on one thread; part 6 on {thread_counts} threads. Target point: {target_text}, float32.",
        f"Exponent of time against n (n >= {large[0][0]}, {len(large)} points): numpy {slope:.2f}, "
        f"torch {slope_t:.2f} (standard errors {se:.2f} and {se_t:.2f}).",
        f"One thread: float32 matmul {peak:.1f} GFLOP/s; element-wise pass {rates['in place']:.1f} GB/s in place, "
        f"{rates['new array']:.1f} GB/s into a new array, {rates['exp']:.1f} GB/s for the exponential.",
        "",
        "| version (one thread) | ms | x torch (need_weights=True) |",
        "|---|---:|---:|",
        *[f"| {r[0]} | {r[1] * 1e3:.1f} | {r[2]:.2f} |" for r in target_rows],
        "",
        "| product, float32 vs float64 | float32 ms | float64 ms |",
        "|---|---:|---:|",
        *[f"| {r[0]} | {r[1] * 1e3:.1f} | {r[2] * 1e3:.1f} |" for r in upcast],
        "",
        f"Stages of M.multihead_attention (sum {sum(r[1] for r in stage_rows) * 1e3:.0f} ms, "
        f"the whole layer {layer_s * 1e3:.0f} ms):",
        "",
        "| stage | ms | GFLOP/s | GB/s |",
        "|---|---:|---:|---:|",
        *[f"| {r[0]} | {r[1] * 1e3:.1f} | {r[2] / r[1] / 1e9:.1f} | {r[3] / r[1] / 1e9:.1f} |" for r in stage_rows],
        "",
        "| threads | layer | median ms | fastest | slowest |",
        "|---:|---|---:|---:|---:|",
        *[f"| {r[0]} | {r[1]} | {r[2] * 1e3:.1f} | {r[3] * 1e3:.1f} | {r[4] * 1e3:.1f} |" for r in threads],
        "",
        "Seconds per part: " + ", ".join(f"{title.split('.')[0]}: {s:.0f}" for title, s in parts)
        + f"; total {time.perf_counter() - start:.0f}.",
    ]
    (results / "mha_summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for name in WRITTEN:
            shutil.copy(results / name, args.out / name)
        print(f"copied {len(WRITTEN)} tables into {args.out}")


if __name__ == "__main__":
    main()
