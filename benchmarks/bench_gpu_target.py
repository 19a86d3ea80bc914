"""The performance target of the Triton kernel, timed two ways, in interleaved rounds, on one GPU.

``bench_gpu.py`` times every call alone: CUDA events around one call, then a wait for the GPU. That time holds
what the GPU computes *and* the gaps where it waits for Python to launch the next piece of work. For a call of a
millisecond or less those gaps are a visible share: the kernel's Python wrapper (input checks, tile choice, the
autograd Function) costs tens of microseconds, and so does ``sdpa_kernel``'s context manager around torch's
backends. This script separates the two:

- **one call**: as ``bench_gpu.py``, events around a single call, the GPU idle before it;
- **back to back**: events around ``CALLS`` calls launched one after another, so that Python prepares the next
  call while the GPU computes the last; the time per call is then the GPU's, as long as launching is faster than
  computing (true from a few hundred microseconds of work up).

For B = 4, h = 16, bfloat16, n in (512, 4096), d_k in (64, 128), causal and not, it times the kernel alone
(``attention_forward``: no autograd), the kernel through ``flash_attention`` (autograd, inputs that require
gradients, as in the sweep), and torch's ``flash`` and ``cudnn`` backends, in ``ROUNDS`` rounds that visit the
four in turn (so a drift of the GPU's clock during the run touches all four alike), and keeps the median over the
rounds. The kernel runs with the tiles ``bench_gpu.py`` chose (read from its stored summary), and, at the target
case, with a few more tile choices. Writes ``gpu_target.csv`` and ``gpu_target.md`` into ``--out`` and
``mha_lessons/results/``. ``--smoke`` runs it on the CPU under Triton's interpreter at tiny sizes.

Usage: PYTHONPATH=. python benchmarks/bench_gpu_target.py --out DIR | --smoke
"""

import argparse
import csv
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu as G  # noqa: E402  (the same inputs, backends, FLOP count and machine description)
from _machine import RESULTS  # noqa: E402

ROUNDS, CALLS = 5, 20
EXTRA_TILES = [(128, 64, 8, 4), (64, 64, 8, 3), (64, 128, 4, 3), (128, 128, 8, 3), (64, 64, 4, 4)]
COLUMNS = ["n", "d_k", "causal", "path", "tiles", "timing", "median_ms", "min_ms", "max_ms", "tflops", "rounds"]


def chosen_tiles():
    """{(d_k, causal): tiles} from bench_gpu.py's stored summary; the kernel's defaults where there is none."""
    summary = RESULTS / "gpu_attention.md"
    found = re.findall(r"d_k = (\d+), causal = (True|False): \((\d+), (\d+), (\d+), (\d+)\)",
                       summary.read_text() if summary.exists() else "")
    return {(int(d), c == "True"): tuple(map(int, t)) for d, c, *t in found}


def timer(cuda):
    """seconds(fn, calls): the time of ``calls`` calls launched back to back, the device drained before and after."""
    def seconds(fn, calls):
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        tick = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - tick
    return seconds


def paths(causal, tiles, q, k, v, qg, kg, vg):
    """name -> a function of no arguments that runs one forward call of that path."""
    T = G.T
    return {
        "kernel": lambda: T.attention_forward(q, k, v, causal=causal, tiles=tiles),
        "kernel+autograd": lambda: T.flash_attention(qg, kg, vg, causal=causal, tiles=tiles),
        "flash": lambda: G.attention("flash", causal)(qg, kg, vg),
        "cudnn": lambda: G.attention("cudnn", causal)(qg, kg, vg),
    }


def measure_case(seconds, n, d_k, causal, tiles, B, h, dtype, device, rounds, calls, log):
    q, k, v = G.inputs((B, h, n, d_k), (B, h, n, d_k), dtype, device, seed=n + d_k)
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    runs = paths(causal, tiles, q, k, v, qg, kg, vg)
    usable = {}
    for name, fn in runs.items():
        try:
            fn(), fn()  # compile, warm up
            usable[name] = fn
        except RuntimeError as e:  # a backend that refuses this case
            log(f"n={n} d_k={d_k} causal={causal} {name}: refused ({str(e).splitlines()[0][:100]})")
    times = {(name, timing): [] for name in usable for timing in ("one call", "back to back")}
    for _ in range(rounds):
        for name, fn in usable.items():
            times[name, "one call"].append(statistics.median(seconds(fn, 1) for _ in range(calls // 2)))
            times[name, "back to back"].append(seconds(fn, calls) / calls)
    work = G.flops(B, h, n, d_k, causal)
    rows = []
    for (name, timing), values in times.items():
        median = statistics.median(values)
        rows.append(dict(n=n, d_k=d_k, causal=causal, path=name, tiles="x".join(map(str, tiles or ())) if
                         name.startswith("kernel") else "", timing=timing, median_ms=round(median * 1e3, 4),
                         min_ms=round(min(values) * 1e3, 4), max_ms=round(max(values) * 1e3, 4),
                         tflops=round(work / median / 1e12, 1), rounds=len(values)))
        log(" ".join(f"{key}={rows[-1][key]}" for key in COLUMNS))
    return rows


def summary(rows, info, target, smoke):
    n, d_k = target
    lines = [f"# The Triton kernel's target, timed two ways{' (smoke run: not results)' if smoke else ''}", "",
             "Written by `benchmarks/bench_gpu_target.py`; the method is in its docstring.", ""]
    lines += [f"- {key}: {value}" for key, value in info.items()] + [""]
    for timing in ("back to back", "one call"):
        lines += [f"## Forward at n = {n}, d_k = {d_k}, timed {timing} (median of {ROUNDS} rounds)", ""]
        for causal in (False, True):
            pick = {r["path"]: r for r in rows
                    if (r["n"], r["d_k"], r["causal"], r["timing"]) == (n, d_k, causal, timing)}
            best_kernel = max((r for r in rows if (r["n"], r["d_k"], r["causal"], r["timing"], r["path"]) ==
                               (n, d_k, causal, timing, "kernel")), key=lambda r: r["tflops"], default=None)
            cells = {p: pick.get(p, {}).get("tflops") for p in ("kernel+autograd", "flash", "cudnn")}
            if best_kernel:
                cells["kernel"] = best_kernel["tflops"]
            ratios = ", ".join(f"{p} / {b} = {cells[p] / cells[b]:.2f}" for p in ("kernel", "kernel+autograd")
                               for b in ("flash", "cudnn") if cells.get(p) and cells.get(b))
            lines.append(f"- causal={causal}: TFLOP/s " + ", ".join(f"{p} {v}" for p, v in cells.items())
                         + (f" (kernel tiles {best_kernel['tiles']})" if best_kernel else "") + f"; {ratios}")
        lines.append("")
    lines += ["## Every row", "", "| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    out = args.out or (Path(tempfile.mkdtemp(prefix="bench_gpu_target_")) if args.smoke else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    run = G.Run(out, args.smoke, budget_s=float("inf"))
    if not run.cuda and not args.smoke:
        run.log("no CUDA GPU: use --smoke to check the script on the CPU")
        return 2
    cfg = G.SMOKE if args.smoke else G.FULL
    B, h, dtype = cfg["B"], cfg["h"], cfg["dtype"]
    ns = (cfg["ns"][0],) if args.smoke else (512, 4096)
    rounds, calls = (2, 2) if args.smoke else (ROUNDS, CALLS)
    info = G.machine(run)
    seconds = timer(run.cuda)
    tiles = chosen_tiles()
    rows = []
    for n in ns:
        for d_k in cfg["d_ks"]:
            for causal in (False, True):
                choice = tiles.get((d_k, causal)) if not args.smoke else G.SMOKE_TILES[0]
                rows += measure_case(seconds, n, d_k, causal, choice, B, h, dtype, run.device, rounds, calls, run.log)
    n, d_k = cfg["target"]
    for extra in ([] if args.smoke else EXTRA_TILES):  # more tiles at the target: the kernel alone
        for causal in (False, True):
            try:
                found = measure_case(seconds, n, d_k, causal, extra, B, h, dtype, run.device, rounds, calls,
                                     run.log)
                rows += [r for r in found if r["path"] == "kernel"]
            except Exception as e:  # a tile that needs more on-chip memory than the GPU has
                run.log(f"tiles {extra} causal={causal}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
    for folder in {out, *(() if args.smoke or out == RESULTS else (RESULTS,))}:
        with open(folder / "gpu_target.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        (folder / "gpu_target.md").write_text(summary(rows, info, cfg["target"], args.smoke))
    run.log(f"done: {out / 'gpu_target.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
