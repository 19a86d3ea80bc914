"""Time multi-head attention: our numpy layer against torch's CPU layer, and what each speed-up bought.

Six measurements, each the fastest of several repeats, written to mha_lessons/results/:

1. ``mha_vs_n.csv``: time against the sequence length n (d_model = 512, h = 8, batch 1, float32)
   for numpy and torch, with numpy's peak memory (tracemalloc) beside the formula's prediction;
   the exponent of time against n is fitted over the large-n points, with its standard error.
2. ``mha_vs_width.csv``: time against d_model at n = 512.
3. ``mha_target.csv``: the target point (B = 4, n = 1024, d_model = 512, h = 8, float32):
   four versions of the attention core, from a straightforward one to the package's, against
   torch, with achieved GFLOP/s as a fraction of this machine's numpy matmul GFLOP/s.
4. ``mha_stages.csv``: each stage of the package's layer timed on its own at the target point, with its
   FLOPs and the bytes it must move (``M.complexity.mha_intensity``).
5. ``mha_machine.csv``: the machine's speeds that a roofline model needs: the FLOP rate P of a large
   float32 matrix product, and the byte rate W of an element-wise pass over an array too large for the
   caches: in place, into a new array, and for the exponential.
6. ``mha_torch_paths.csv`` (``--torch-paths`` runs only this): at the target point, the package's layer beside
   PyTorch's layer on both of its paths: ``need_weights=True`` (it computes and returns every head's weights, the
   path the rest of the script times) and ``need_weights=False`` (its usual path, a fused attention kernel that
   never returns the weights), in several runs, each with the load average of the machine while it ran.

plus ``mha_summary.md`` (the machine, the fits, the ratios) and ``mha_vs_n.png``.
The chapter on cost reads these files.

Both libraries run on one thread unless OMP_NUM_THREADS (or OPENBLAS_NUM_THREADS, MKL_NUM_THREADS) is set:
the same share of the machine for each, and no waiting for a second thread that other work on a shared machine
has delayed. On this project's two-core machine the target point's ratio came out between 0.82 and 0.93 in
three runs with two threads, and between 0.87 and 0.94 in seven runs with one thread while this script was being
revised. The summary records the setting.

Usage: python benchmarks/bench_mha.py [--quick | --torch-paths]
"""

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # before numpy and torch are imported, or it has no effect

import argparse  # noqa: E402
import csv  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mha_lessons as M  # noqa: E402
from _machine import QUICK_RESULTS, RESULTS, describe  # noqa: E402



# ---------------------------------------------------------------- four versions of the attention core
# Each takes heads q (..., n, d_k), k and v (..., m, d_k) and returns the output and the weights.

def core_straightforward(q, k, v):
    """Textbook code: np.sqrt returns a float64 scalar, which silently upcasts float32 scores to float64."""
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
                                                          (params.w_v, params.b_v)))  # (B, h, n, d_k)
    out, weights = core(q, k, v)
    return M.combine_heads(out) @ params.w_o + params.b_o, weights  # (B, h, n, d_k) -> (B, n, d_model)


# ---------------------------------------------------------------- timing helpers

def best_times(fns, repeats):
    """The fastest of ``repeats`` calls of each function, after one warm-up call each.

    The functions take turns, so that a change of the machine's load affects them alike. The fastest call,
    not the median, because other work on a shared machine can only slow a call down: on this project's
    machine the median of five calls at n = 2896 moved by 40 % between two runs of the script.
    """
    for fn in fns:
        fn()  # warm up
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, own in zip(fns, times):
            start = time.perf_counter()
            fn()
            own.append(time.perf_counter() - start)
    return [min(own) for own in times]


def best_time(fn, repeats):
    return best_times([fn], repeats)[0]


def repeats_for(seconds_per_call, budget=3.0, lo=5, hi=15):
    return int(min(hi, max(lo, budget // max(seconds_per_call, 1e-6))))


def setup(batch, n, d_model, h, seed=0):
    params = M.init_params(d_model, h, seed=seed, dtype=np.float32)
    x = np.random.default_rng(seed).normal(size=(batch, n, d_model)).astype(np.float32)
    module = M.params_to_torch(params)
    return params, x, module, torch.from_numpy(x)


def time_pair(batch, n, d_model, h):
    params, x, module, xt = setup(batch, n, d_model, h)

    def ours():
        M.multihead_attention(x, x, x, params)

    def theirs():
        with torch.no_grad():
            module(xt, xt, xt, need_weights=True, average_attn_weights=False)

    start = time.perf_counter()
    ours()
    reps = repeats_for(time.perf_counter() - start)
    t_ours, t_theirs = best_times([ours, theirs], reps)  # taking turns, like the target point
    return t_ours, t_theirs, reps


peak_bytes = M.complexity.measure_peak_bytes


def matmul_gflops(size=2048, repeats=5):
    """R_FLOP of chapter 4: the float32 FLOP rate of one large square matrix product, the BLAS's best case."""
    a = np.random.default_rng(0).normal(size=(size, size)).astype(np.float32)
    t = best_time(lambda: a @ a, repeats)
    return 2 * size ** 3 / t / 1e9


def stream_gbps(numbers=4 * 8 * 1024 * 1024, repeats=7, *, kind="in place"):
    """The rate at which one element-wise pass streams a float32 array: chapter 4's R_mem (in place), R_new.

    The array has as many numbers as the scores at the target point (B h n m), far more than any cache holds.
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


def warm_memory(gib=6):
    """Touch a few GiB once before timing anything.

    On a virtual machine the first use of a page of memory can be far slower than any later use (the host
    backs guest memory lazily): on this project's machine, fresh memory was first written at 0.4 GB/s and at
    8 GB/s on a second try. The layers allocate large arrays, so without this the first measurements would
    time the host, not the code.
    """
    np.ones(gib * 2**30 // 4, dtype=np.float32)


def write_csv(name, header, rows):
    with open(RESULTS / name, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


# ---------------------------------------------------------------- the three measurements

def sweep_n(ns, d_model=512, h=8):
    rows = []
    for i, n in enumerate(ns, 1):
        ours, theirs, reps = time_pair(1, n, d_model, h)
        params, x, _, _ = setup(1, n, d_model, h)
        peak = peak_bytes(lambda: M.multihead_attention(x, x, x, params))
        predicted = M.complexity.mha_memory(n, d_model, h)["activations"]
        flops = M.complexity.mha_flops(n, d_model, h)["total"]
        rows.append([n, ours, theirs, peak, predicted, flops])
        print(f"  [{i}/{len(ns)}] n = {n:>5}: numpy {ours * 1e3:8.1f} ms, torch {theirs * 1e3:8.1f} ms "
              f"({reps} repeats), peak {peak / 2**20:7.1f} MiB", flush=True)
    write_csv("mha_vs_n.csv", ["n", "numpy_s", "torch_s", "numpy_peak_bytes", "predicted_bytes", "flops"], rows)
    return rows


def sweep_width(widths, n=512, h=8):
    rows = []
    for i, d in enumerate(widths, 1):
        ours, theirs, reps = time_pair(1, n, d, h)
        rows.append([d, ours, theirs, M.complexity.mha_flops(n, d, h)["total"]])
        print(f"  [{i}/{len(widths)}] d_model = {d:>5}: numpy {ours * 1e3:8.1f} ms, torch {theirs * 1e3:8.1f} ms",
              flush=True)
    write_csv("mha_vs_width.csv", ["d_model", "numpy_s", "torch_s", "flops"], rows)
    return rows


def target_point(batch=4, n=1024, d_model=512, h=8, repeats=7):
    params, x, module, xt = setup(batch, n, d_model, h)
    flops = M.complexity.mha_flops(n, d_model, h, batch=batch)["matmul"]
    peak_matmul = matmul_gflops()
    reference, _ = M.multihead_attention(x, x, x, params)
    for label, core in CORES:
        y, _ = layer_with_core(core, x, params)
        np.testing.assert_allclose(y, reference, rtol=2e-3, atol=2e-4)  # every version computes the same layer

    def torch_layer():
        with torch.no_grad():
            module(xt, xt, xt, need_weights=True, average_attn_weights=False)

    versions = [(label, lambda core=core: layer_with_core(core, x, params)) for label, core in CORES]
    versions += [("M.multihead_attention", lambda: M.multihead_attention(x, x, x, params)),
                 ("torch.nn.MultiheadAttention", torch_layer)]
    times = best_times([fn for _, fn in versions], repeats)  # every version, torch included, taking turns
    t_torch = times[-1]
    rows = [[label, t, t / t_torch, flops / t / 1e9, flops / t / 1e9 / peak_matmul]
            for (label, _), t in zip(versions, times)]
    for i, row in enumerate(rows, 1):
        print(f"  [{i}/{len(rows)}] {row[0]}: {row[1] * 1e3:.0f} ms = {row[2]:.2f} x torch", flush=True)
    t_pkg = times[-2]
    write_csv("mha_target.csv", ["version", "seconds", "ratio_to_torch", "gflops", "fraction_of_matmul"], rows)
    return rows, peak_matmul, t_pkg / t_torch


def stage_profile(batch=4, n=1024, d_model=512, h=8, repeats=7):
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
    write_csv("mha_stages.csv", ["stage", "seconds", "flops", "bytes"], rows + [["whole layer", times[-1], "", ""]])
    return rows, times[-1]


def torch_paths(batch=4, n=1024, d_model=512, h=8, repeats=7, runs=5):
    """The target point's three layers, taking turns: ours, and PyTorch's with and without the weights.

    ``runs`` separate measurements, each the fastest of ``repeats`` interleaved calls, each row with the machine's
    load average: on a shared, loaded machine one run can rank PyTorch's two paths either way, so the table keeps
    every run and the chapter says in how many of them each path was faster.
    """
    params, x, module, xt = setup(batch, n, d_model, h)

    def torch_layer(need_weights):
        with torch.no_grad():
            if need_weights:
                return module(xt, xt, xt, need_weights=True, average_attn_weights=False)
            return module(xt, xt, xt, need_weights=False)

    ours, _ = M.multihead_attention(x, x, x, params)
    for need_weights in (True, False):  # both paths compute the same layer as ours
        np.testing.assert_allclose(torch_layer(need_weights)[0].numpy(), ours, rtol=2e-3, atol=2e-4)
    versions = [("M.multihead_attention", lambda: M.multihead_attention(x, x, x, params)),
                ("torch.nn.MultiheadAttention, need_weights=True", lambda: torch_layer(True)),
                ("torch.nn.MultiheadAttention, need_weights=False", lambda: torch_layer(False))]
    rows = []
    for run in range(1, runs + 1):
        load_before = os.getloadavg()[0]
        times = best_times([fn for _, fn in versions], repeats)
        load = max(load_before, os.getloadavg()[0])
        rows += [[run, label, t, t / times[1], load] for (label, _), t in zip(versions, times)]
        print(f"  run {run}: " + ", ".join(f"{label} {t * 1e3:.0f} ms" for (label, _), t in zip(versions, times))
              + f"; load average {load:.1f} on {os.cpu_count()} logical cores", flush=True)
    write_csv("mha_torch_paths.csv", ["run", "version", "seconds", "ratio_to_torch_need_weights", "load_average"],
              rows)
    return rows


def plot(rows_n, slope, se_slope, slope_t, se_t):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = np.array([r[0] for r in rows_n])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(ns, [r[1] for r in rows_n], "o-", label=f"numpy (slope {slope:.2f} ± {se_slope:.2f})")
    ax.loglog(ns, [r[2] for r in rows_n], "s-", label=f"torch (slope {slope_t:.2f} ± {se_t:.2f})")
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("seconds per forward pass")
    ax.set_title("d_model = 512, h = 8, batch 1, float32")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "mha_vs_n.png", dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run, to check the script works")
    parser.add_argument("--torch-paths", action="store_true",
                        help="time only PyTorch's two paths beside the package's layer at the target point")
    args = parser.parse_args()
    global RESULTS
    if args.quick:  # a check of the script, not results: keep the stored ones untouched
        RESULTS = QUICK_RESULTS
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.torch_paths:
        print(f"Machine: {describe()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
        warm_memory(2)
        torch_paths()
        return
    # above n = 1024 in steps of about sqrt(2), so that the slope's fit has points to spare
    ns = [64, 128, 256, 512] if args.quick else [64, 128, 256, 512, 1024, 1448, 2048, 2896, 4096]
    widths = [64, 128, 256] if args.quick else [64, 128, 256, 512, 1024, 2048]
    print(f"Machine: {describe()}; torch uses {torch.get_num_threads()} threads")
    warm_memory(1 if args.quick else 6)
    print("1. time against n")
    rows_n = sweep_n(ns)
    large = [r for r in rows_n if r[0] >= (256 if args.quick else 1024)]
    slope, _, se = M.stats.fit_loglog_slope([r[0] for r in large], [r[1] for r in large])
    slope_t, _, se_t = M.stats.fit_loglog_slope([r[0] for r in large], [r[2] for r in large])
    print("2. time against d_model")
    sweep_width(widths)
    print("3. the target point")
    target, peak_matmul, ratio = (target_point(batch=1, n=256) if args.quick else target_point())
    print("4. each stage of the layer at the target point")
    stage_rows, layer_seconds = (stage_profile(batch=1, n=256) if args.quick else stage_profile())
    print("6. PyTorch's two paths at the target point")
    torch_paths(batch=1, n=256, runs=1) if args.quick else torch_paths()
    print("5. the machine's speeds")
    size = 2**20 if args.quick else 4 * 8 * 1024 * 1024
    kinds = ("in place", "new array", "exp")
    bandwidth, bandwidth_new, bandwidth_exp = (stream_gbps(size, kind=kind) for kind in kinds)
    write_csv("mha_machine.csv", ["quantity", "value", "unit"],
              [["matmul_float32", peak_matmul, "GFLOP/s"], ["inplace_pass_float32", bandwidth, "GB/s"],
               ["new_array_pass_float32", bandwidth_new, "GB/s"], ["exp_pass_float32", bandwidth_exp, "GB/s"]])
    plot(rows_n, slope, se, slope_t, se_t)
    summary = [
        "# Multi-head attention timings",
        "",
        f"Machine: {describe()}; torch {torch.__version__}. Threads: torch {torch.get_num_threads()}, "
        f"BLAS (OPENBLAS_NUM_THREADS) {os.environ['OPENBLAS_NUM_THREADS']}.",
        "",
        f"Exponent of time against n (n >= {large[0][0]}, {len(large)} points): numpy {slope:.2f}, "
        f"torch {slope_t:.2f}" + (f" (standard errors {se:.2f} and {se_t:.2f})." if len(large) > 3 else
                                  " (too few points for a standard error)."),
        f"numpy matmul on this machine: {peak_matmul:.1f} GFLOP/s (float32, 2048 x 2048).",
        f"One element-wise pass over a float32 array of the target's scores' size: {bandwidth:.1f} GB/s in place, "
        f"{bandwidth_new:.1f} GB/s into a new array, {bandwidth_exp:.1f} GB/s for the exponential.",
        f"Target point: numpy / torch = {ratio:.2f} (target: at most 1.0).",
        "",
        "| version | ms | x torch | GFLOP/s | of matmul |",
        "|---|---:|---:|---:|---:|",
        *[f"| {r[0]} | {r[1] * 1e3:.0f} | {r[2]:.2f} | {r[3]:.1f} | {r[4]:.0%} |" for r in target],
        "",
        f"Each stage of M.multihead_attention timed on its own (sum {sum(r[1] for r in stage_rows) * 1e3:.0f} ms, "
        f"the whole layer {layer_seconds * 1e3:.0f} ms):",
        "",
        "| stage | ms | GFLOP/s | GB/s |",
        "|---|---:|---:|---:|",
        *[f"| {r[0]} | {r[1] * 1e3:.1f} | {r[2] / r[1] / 1e9:.1f} | {r[3] / r[1] / 1e9:.1f} |" for r in stage_rows],
    ]
    (RESULTS / "mha_summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
