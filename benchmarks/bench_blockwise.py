"""Peak memory and time of block-wise attention against the plain version, side by side in one run.

One head, n = m = 16384 queries and keys, d_k = d_v = 64, float32. The plain version,
``M.scaled_dot_product_attention``, builds the (n, m) weights: n² · 4 bytes, a gigabyte at this size.
``M.blockwise.blockwise_attention`` processes the keys in blocks and never holds more than one
(t, b) block of scores. For each version the script measures

- the peak memory of one call, with tracemalloc (which sees numpy's allocations), and
- the median time of a few calls (after one warm-up call, without tracemalloc running, the versions
  taking turns so that a change of the machine's load affects them alike),

checks that every block-wise output equals the plain one to float32 round-off, asserts that every
block-wise peak is at most 5 % of the plain version's, and writes ``mha_lessons/results/blockwise.csv``
and ``blockwise.md`` (with the machine and its load average, which shows whether other work shared
the CPU: the times depend on it, the memory does not). Chapter 7 reads the Markdown file.

BLAS runs on one thread unless OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS, MKL_NUM_THREADS) is set: the
block-wise loop makes many small matrix products, and a multi-threaded BLAS waits for all its threads at
each one, which on a CPU shared with other work adds delays that have nothing to do with either
algorithm (in a trial on a shared two-core machine, a small case took about twenty times longer with
two BLAS threads than with one). The summary records the setting.

Usage: python benchmarks/bench_blockwise.py [--quick] [--repeats R] [--note TEXT]
"""

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # before numpy is imported, or it has no effect

import argparse  # noqa: E402
import csv  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mha_lessons as M  # noqa: E402
from _machine import QUICK_RESULTS, RESULTS, describe  # noqa: E402

MEMORY_TARGET = 0.05  # block-wise peak / plain peak, at most


def versions():
    """(label, block_size, query_block, function) for the plain version and the block-wise ones."""
    def blockwise(b, t):
        return lambda q, k, v: M.blockwise.blockwise_attention(q, k, v, block_size=b, query_block=t)

    return [
        ("plain (M.scaled_dot_product_attention)", None, None, lambda q, k, v: M.scaled_dot_product_attention(q, k, v)),
        ("blockwise, keys in blocks of 128", 128, None, blockwise(128, None)),
        ("blockwise, keys in blocks of 512", 512, None, blockwise(512, None)),
        ("blockwise, 1024 queries x 1024 keys tiles", 1024, 1024, blockwise(1024, 1024)),
    ]


peak_bytes = M.complexity.measure_peak_bytes


def float32_bound(q, k, v, block_size):
    """How far a float32 output may be from another float32 computation of it (as in tests/test_dtypes.py).

    A score adds d_k rounded products, an output m weighted values, and each of the ceil(m / b) blocks
    adds a rounding through its rescale factor; twice that covers both versions' errors.
    """
    d_k, m = q.shape[-1], k.shape[-2]
    u = float(np.finfo(np.float32).eps)
    score = float(np.abs(q).max() * np.abs(k).max() * math.sqrt(d_k))
    terms = d_k + m + 2 * math.ceil(m / (block_size or m))
    return 2 * 4 * terms * u * (1 + score) * float(np.abs(v).max())


def measure(n, d, repeats, log_prefix):
    """One row per version at this n: peak bytes, median seconds, largest difference from the plain output.

    The versions are timed in turns (plain, blockwise, blockwise, ..., then again), so that a change in
    the machine's load during the run affects them alike.
    """
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(3))  # one head: (n, d_k), (m, d_k), (m, d_v)
    rows, reference = [], None
    for label, b, t, fn in versions():
        peak = peak_bytes(lambda: fn(q, k, v))
        out = fn(q, k, v)  # also the warm-up call
        if reference is None:
            reference, difference = out[0], 0.0  # the plain version returns (out, weights)
        else:
            difference = float(np.abs(out - reference).max())
            bound = float32_bound(q, k, v, b)
            assert difference <= bound, f"{label}: differs from the plain output by {difference:.3g} > {bound:.3g}"
        rows.append({"n": n, "version": label, "block_size": b or "", "query_block": t or "", "peak_bytes": peak,
                     "max_abs_difference": difference, "times": []})
        print(f"  {log_prefix} {label}: peak {peak / 2**20:.1f} MiB", flush=True)
    start = time.perf_counter()
    for round_ in range(max(repeats, 1)):
        for row, (_, _, _, fn) in zip(rows, versions()):
            tick = time.perf_counter()
            fn(q, k, v)
            row["times"].append(time.perf_counter() - tick)
        if round_ + 1 >= repeats and time.perf_counter() - start > 2.0:
            break
        if round_ + 1 >= 15:
            break
    for row in rows:
        row["repeats"] = len(row["times"])
        row["seconds"] = statistics.median(row["times"])
        row["best_seconds"] = min(row.pop("times"))
        row["peak_ratio"] = row["peak_bytes"] / rows[0]["peak_bytes"]
        row["time_ratio"] = row["seconds"] / rows[0]["seconds"]
    print(f"  {log_prefix} median of {rows[0]['repeats']} turns, seconds: "
          + ", ".join(f"{r['seconds']:.3f}" for r in rows), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 2048, to check the script works")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per version at least (median reported)")
    parser.add_argument("--note", default="", help="a sentence added to the Markdown summary")
    args = parser.parse_args()
    global RESULTS
    if args.quick:  # a check of the script, not results: keep the stored ones untouched
        RESULTS = QUICK_RESULTS
    RESULTS.mkdir(parents=True, exist_ok=True)
    ns = [256, 512, 1024, 2048] if args.quick else [1024, 2048, 4096, 8192, 16384]
    n, d = ns[-1], 64
    weights_bytes = n * n * np.dtype(np.float32).itemsize
    load_start = os.getloadavg()[0]
    print(f"Machine: {describe()}; load average {load_start:.2f}")
    print(f"d_k = d_v = {d}, float32; at n = {n} the plain weights alone take {weights_bytes / 2**30:.2f} GiB")
    rows = []
    for i, size in enumerate(ns, 1):
        rows += measure(size, d, args.repeats, f"[n = {size}, {i}/{len(ns)}]")
    load_end = os.getloadavg()[0]

    columns = ["n", "version", "block_size", "query_block", "peak_bytes", "peak_ratio", "seconds", "best_seconds",
               "repeats", "time_ratio", "max_abs_difference"]
    with open(RESULTS / "blockwise.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({c: row[c] for c in columns} for row in rows)

    last = [r for r in rows if r["n"] == n]
    worst = max(row["peak_ratio"] for row in last[1:])
    labels = [label for label, *_ in versions()]
    summary = [
        "# Block-wise attention: peak memory and time",
        "",
        f"Machine: {describe()}.",
        f"Load average (1 minute) at the start and the end of the run: {load_start:.2f} and {load_end:.2f}. "
        f"BLAS threads: OPENBLAS_NUM_THREADS = {os.environ['OPENBLAS_NUM_THREADS']}.",
        *([args.note] if args.note else []),
        "",
        f"One head, n = m = {n}, d_k = d_v = {d}, float32. The plain version's weights alone take "
        f"n² · 4 = {weights_bytes} bytes ({weights_bytes / 2**30:.2f} GiB). Peak memory of one call, measured "
        f"with tracemalloc; time: median of at least {args.repeats} calls after a warm-up call, the versions "
        f"taking turns.",
        "",
        "| version | peak (MiB) | peak / plain | time (s) | time / plain | max abs difference from plain |",
        "|---|---:|---:|---:|---:|---:|",
        *[f"| {r['version']} | {r['peak_bytes'] / 2**20:.1f} | {r['peak_ratio']:.1%} | {r['seconds']:.2f} | "
          f"{r['time_ratio']:.2f} | {r['max_abs_difference']:.1e} |" for r in last],
        "",
        f"Largest block-wise peak: {worst:.1%} of the plain version's"
        + ("." if args.quick else f" (target: at most {MEMORY_TARGET:.0%} at n = 16384)."),
        "",
        "Time relative to the plain version at every n (below 1: faster):",
        "",
        "| n | " + " | ".join(labels[1:]) + " |",
        "|---:|" + "---:|" * (len(labels) - 1),
        *[f"| {size} | " + " | ".join(f"{r['time_ratio']:.2f}" for r in rows if r["n"] == size and r["block_size"])
          + " |" for size in ns],
    ]
    (RESULTS / "blockwise.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    if not args.quick:  # the target is stated for n = 16384; at small n the (n, d) arrays weigh more
        assert worst <= MEMORY_TARGET, f"a block-wise peak is {worst:.1%} of the plain one, above {MEMORY_TARGET:.0%}"


if __name__ == "__main__":
    main()
