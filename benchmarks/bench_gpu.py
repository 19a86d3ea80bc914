"""The Triton kernel of ``mha_lessons/triton_attention.py`` beside torch's attention backends, on one GPU.

Three steps, in one run on one GPU:

1. **Correctness on the GPU.** The kernel's output and log-sum-exp, and the gradients of ``flash_attention``,
   against attention in float32 (torch's ``math`` backend on the same numbers), in bfloat16 and float16, causal
   and not, n ≠ m and n not a multiple of the tiles; the kernel's error may be at most twice that of torch's
   ``flash`` backend on the same case (or a small floor). A failure stops the script, loudly.
2. **Tuning.** At B = 4, h = 16, n = 4096, bfloat16, for d_k 64 and 128, causal and not: a handful of tiles
   (BLOCK_M, BLOCK_N, num_warps, num_stages), each checked against ``flash``'s output and timed; the fastest per
   (d_k, causal) is used below and recorded.
3. **The sweep.** B = 4, h = 16, n = 512 … 32768, d_k = d_v = 64 and 128, causal and not, bfloat16: the kernel
   (backward: ``attention_backward`` in torch) and ``scaled_dot_product_attention`` under each backend
   (``flash`` = FlashAttention-2, ``efficient``, ``cudnn``, ``math`` = unfused), measured as
   ``../shared/measurements/README.md`` describes its table: q, k, v random normal with requires_grad=True;
   fwd_ms the median of 10 forward calls after 3 warm-ups, fwdbwd_ms the median of 5 forward+backward calls
   (random upstream gradient) after 2 warm-ups, each call timed with CUDA events (where a warm call takes more
   than 0.25 s, 3 calls after 2 warm-ups; the counts are in the table); fwd_tflops = 4 B h n² d_k / time,
   halved when causal; fwdbwd_tflops counts the backward as 2.5× the forward; fwd_peak_mib the peak of
   ``torch.cuda.max_memory_allocated()`` during the timed forward calls minus what was allocated before them
   (each call's output is dropped before the next starts, so this is one call's peak), fwdbwd_peak_mib the same
   for forward+backward. A case a backend refuses or runs out of memory on is recorded with its error, and the
   sweep goes on. Cases that would start after ``--budget-s`` seconds are recorded as skipped, as are tile
   choices that would start after 45% of it.

Writes ``gpu_attention.csv``, ``gpu_attention.md`` and ``gpu_attention.log`` into ``--out`` (and the first two
into ``mha_lessons/results/``, unless ``--smoke``). ``--smoke`` runs the whole pipeline on the CPU under
Triton's interpreter at tiny sizes (float16 and float32, ``time.perf_counter``), to check the script itself.

Usage: PYTHONPATH=. python benchmarks/bench_gpu.py --out DIR [--budget-s 225] | --smoke [--out DIR]
"""

import argparse
import csv
import datetime
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import RESULTS  # noqa: E402
from mha_lessons import triton_attention as T  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
FULL = dict(B=4, h=16, ns=(512, 1024, 2048, 4096, 8192, 16384, 32768), d_ks=(64, 128), dtype=torch.bfloat16,
            check_dtypes=(torch.bfloat16, torch.float16), check_cases=((2, 4, 1000, 1000), (1, 4, 777, 1500)),
            tune_n=4096, target=(4096, 64))
SMOKE = dict(B=1, h=2, ns=(40,), d_ks=(16,), dtype=torch.float32,
             check_dtypes=(torch.float32, torch.float16), check_cases=((1, 1, 23, 37),),
             tune_n=40, target=(40, 16))
TILE_CHOICES = {  # (BLOCK_M, BLOCK_N, num_warps, num_stages), default first; none spills registers on sm_90
    64: [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 32, 4, 4), (64, 64, 4, 3), (128, 64, 4, 4)],
    128: [(128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 8, 3)],
}
TRITON_BWD_MAX_N = 8192  # forward+backward of the Triton path timed up to this n (its backward is torch's)
SMOKE_TILES = [(16, 16, 4, 1), (32, 16, 4, 1)]
COLUMNS = ["backend", "B", "h", "n", "d_k", "causal", "dtype", "fwd_ms", "fwdbwd_ms", "fwd_tflops", "fwdbwd_tflops",
           "fwd_peak_mib", "fwdbwd_peak_mib", "fwd_calls", "fwdbwd_calls", "tiles", "error"]
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


class Run:
    """Where the run writes, how it times, and its log (printed and kept, line by line)."""

    def __init__(self, out, smoke, budget_s):
        self.out, self.smoke, self.budget_s, self.start = out, smoke, budget_s, time.perf_counter()
        self.cuda = torch.cuda.is_available() and not smoke
        self.device = "cuda" if self.cuda else "cpu"
        out.mkdir(parents=True, exist_ok=True)
        self.log_file = open(out / "gpu_attention.log", "w")

    def log(self, text):
        line = f"[{time.perf_counter() - self.start:6.1f}s] {text}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def over_budget(self, share=1.0):
        return time.perf_counter() - self.start > share * self.budget_s

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time_calls(self, fn, warmups, calls, slow_s=0.25):
        """(median milliseconds, calls, peak MiB): ``calls`` calls after ``warmups`` (1 and 3 where one is slow).

        The peak is torch.cuda.max_memory_allocated() during the timed calls minus what was allocated before
        them: each call's results are dropped before the next, so it is the peak of one call (nan on the CPU).
        """
        def seconds():
            tick = time.perf_counter()
            fn()
            self.sync()
            return time.perf_counter() - tick

        done = 1
        if seconds() > slow_s:  # the first call compiles a kernel the first time: the second one decides
            done = 2
            if seconds() > slow_s:
                warmups, calls = 2, 3
        if self.smoke:  # a check of the script: two calls are enough
            warmups, calls = done, 2
        for _ in range(warmups - done):
            fn()
        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        times = []
        for _ in range(calls):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                tick = time.perf_counter()
                fn()
                times.append((time.perf_counter() - tick) * 1e3)
        peak = (torch.cuda.max_memory_allocated() - before) / 2**20 if self.cuda else float("nan")
        return statistics.median(times), calls, peak


def attention(backend, causal, tiles=None):
    """A function (q, k, v) -> output: the Triton kernel with autograd, or SDPA restricted to one backend."""
    if backend == "triton":
        return lambda q, k, v: T.flash_attention(q, k, v, causal=causal, tiles=tiles)

    def sdpa(q, k, v):
        with sdpa_kernel(BACKENDS[backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return sdpa


def inputs(shape_q, shape_kv, dtype, device, seed, grad=False):
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(s, generator=g, device=device, dtype=dtype).requires_grad_(grad)
            for s in (shape_q, shape_kv, shape_kv)]


def relative_error(x, ref):
    return float((x.float() - ref.float()).abs().max() / ref.float().abs().max())


# ---------------------------------------------------------------- step 1: correctness


def check_correctness(run, cfg):
    """The kernel against float32 attention, beside flash's error on the same case; returns the table's rows."""
    rows, failures = [], []
    # Floors: the errors a correct kernel may show on these sizes (16-bit outputs are rounded to 2**-9 or 2**-12
    # relative, the backward's row sums inherit that), several times what we expect; a wrong mask, scale or
    # block gives errors of 0.1 or more. The lse is float32 arithmetic with approximate exp2 and log2.
    floors = {torch.bfloat16: (3e-2, 5e-2), torch.float16: (5e-3, 1e-2), torch.float32: (1e-5, 1e-5)}
    for dtype in cfg["check_dtypes"]:
        for B, h, n, m in cfg["check_cases"]:
            for d_k in cfg["d_ks"]:
                for causal in (False, True):
                    q, k, v = inputs((B, h, n, d_k), (B, h, m, d_k), dtype, run.device, seed=n + d_k, grad=True)
                    d_out = inputs((B, h, n, d_k), (1,), dtype, run.device, seed=1)[0]
                    ref_leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
                    ref = attention("math", causal)(*ref_leaves)
                    ref.backward(d_out.float())
                    s = (ref_leaves[0] @ ref_leaves[1].mT).detach() / math.sqrt(d_k)
                    if causal:
                        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=run.device).triu(1), -math.inf)
                    out, lse = T.attention_forward(q.detach(), k.detach(), v.detach(), causal=causal)
                    errors = {"out": relative_error(out, ref), "lse": relative_error(lse, torch.logsumexp(s, -1))}
                    out = T.flash_attention(q, k, v, causal=causal)
                    out.backward(d_out)
                    for name, leaf, ref_leaf in zip(("dq", "dk", "dv"), (q, k, v), ref_leaves):
                        errors[name] = relative_error(leaf.grad, ref_leaf.grad)
                    try:  # flash's own error on the same numbers, as a yardstick
                        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                        flash = attention("flash", causal)(*leaves)
                        flash.backward(d_out)
                        yard = {"out": relative_error(flash, ref), "lse": 0.0}
                        yard.update({name: relative_error(leaf.grad, r.grad)
                                     for name, leaf, r in zip(("dq", "dk", "dv"), leaves, ref_leaves)})
                    except RuntimeError as e:  # flash refuses some cases (float32, the CPU): the floor alone
                        yard = dict.fromkeys(errors, 0.0)
                        run.log(f"  (flash refused: {str(e).splitlines()[0][:100]})")
                    # twice flash's error, but at least the floor and at most five times it (flash aligns a causal
                    # mask differently when n != m in some versions, and then its "error" is no yardstick)
                    base = {"out": floors[dtype][0], "lse": 1e-4, "dq": floors[dtype][1], "dk": floors[dtype][1],
                            "dv": floors[dtype][1]}
                    bound = {name: max(base[name], min(2 * yard[name], 5 * base[name])) for name in errors}
                    ok = all(errors[name] <= bound[name] for name in errors)
                    label = f"{DTYPE_NAMES[dtype]} B={B} h={h} n={n} m={m} d_k={d_k} causal={causal}"
                    run.log(f"check {label}: " + ", ".join(f"{k_} {errors[k_]:.2e} (<= {bound[k_]:.1e})"
                                                             for k_ in errors) + ("  ok" if ok else "  WRONG"))
                    rows.append((label, errors, bound, ok))
                    if not ok:
                        failures.append(label)
    return rows, failures


# ---------------------------------------------------------------- step 2: tuning


def tune(run, cfg):
    """Per (d_k, causal): each tile choice's forward time at the tuning size; returns ({(d_k, causal): tiles}, log)."""
    B, h, n, dtype = cfg["B"], cfg["h"], cfg["tune_n"], cfg["dtype"]
    chosen, table = {}, []
    for d_k in cfg["d_ks"]:
        choices = SMOKE_TILES if run.smoke else TILE_CHOICES[d_k]
        q, k, v = inputs((B, h, n, d_k), (B, h, n, d_k), dtype, run.device, seed=2)
        for causal in (False, True):
            try:
                reference = attention("flash", causal)(q, k, v)
            except RuntimeError:
                reference = attention("math", causal)(q, k, v)
            best = None
            for tiles in choices:
                if run.over_budget(0.45):  # tuning may take 45% of the budget at most: the sweep needs the rest
                    run.log(f"tune d_k={d_k} causal={causal} tiles={tiles}: skipped, past 45% of the budget")
                    continue
                try:
                    out, _ = T.attention_forward(q, k, v, causal=causal, tiles=tiles)
                    error = relative_error(out, reference)
                    if error > 2e-2:
                        raise ValueError(f"output differs from torch's by {error:.2e} of its largest value")
                    ms = run.time_calls(lambda: T.attention_forward(q, k, v, causal=causal, tiles=tiles), 3, 10)[0]
                    result = f"{ms:.4f} ms, {flops(B, h, n, d_k, causal) / ms / 1e9:.1f} TFLOP/s"
                    if best is None or ms < best[0]:
                        best = (ms, tiles)
                except Exception as e:  # a tile that needs more shared memory than the GPU has, and the like
                    result = f"error: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                run.log(f"tune d_k={d_k} causal={causal} tiles={tiles}: {result}")
                table.append((d_k, causal, tiles, result))
            chosen[d_k, causal] = best[1] if best else None  # None: the kernel's default_tiles
            run.log(f"tune d_k={d_k} causal={causal}: chose {chosen[d_k, causal]}")
    return chosen, table


# ---------------------------------------------------------------- step 3: the sweep


def flops(B, h, n, d_k, causal):
    return 4 * B * h * n * n * d_k / (2 if causal else 1)


def measure(run, cfg, backend, n, d_k, causal, tiles):
    """One row of the table: forward, then forward+backward, or the error that stopped it."""
    B, h, dtype = cfg["B"], cfg["h"], cfg["dtype"]
    row = dict(backend=backend, B=B, h=h, n=n, d_k=d_k, causal=causal, dtype=DTYPE_NAMES[dtype],
               tiles="x".join(map(str, tiles)) if backend == "triton" and tiles else "", error="")
    fn = attention(backend, causal, tiles)
    try:
        q, k, v = inputs((B, h, n, d_k), (B, h, n, d_k), dtype, run.device, seed=n, grad=True)
        d_out = torch.randn_like(q)
        row["fwd_ms"], row["fwd_calls"], row["fwd_peak_mib"] = run.time_calls(lambda: fn(q, k, v), 3, 10)

        def forward_backward():
            q.grad = k.grad = v.grad = None  # the previous call's gradients go before this call's exist
            fn(q, k, v).backward(d_out)
        # The kernel's backward is chapter 7's loop in torch, not a kernel: seconds a call at n = 32768, and what
        # it shows (an unfused backward is slow) the rows up to TRITON_BWD_MAX_N show already. Past it, not timed.
        if backend != "triton" or n <= TRITON_BWD_MAX_N:
            row["fwdbwd_ms"], row["fwdbwd_calls"], row["fwdbwd_peak_mib"] = run.time_calls(forward_backward, 2, 5)
    except Exception as e:  # a backend that refuses the case, or runs out of memory: recorded, and on to the next
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"
    finally:
        q = k = v = d_out = None
        if run.cuda:
            torch.cuda.empty_cache()
    work = flops(B, h, n, d_k, causal)
    for key, factor in (("fwd", 1.0), ("fwdbwd", 3.5)):
        if f"{key}_ms" in row:
            row[f"{key}_tflops"] = round(factor * work / row[f"{key}_ms"] / 1e9, 1)
            row[f"{key}_ms"] = round(row[f"{key}_ms"], 4)
            row[f"{key}_peak_mib"] = round(row[f"{key}_peak_mib"], 1)
    return row


def sweep(run, cfg, chosen):
    rows = []
    for n in cfg["ns"]:
        for d_k in cfg["d_ks"]:
            for causal in (False, True):
                for backend in ["triton", *BACKENDS]:
                    if run.over_budget():
                        row = dict(backend=backend, B=cfg["B"], h=cfg["h"], n=n, d_k=d_k, causal=causal,
                                   dtype=DTYPE_NAMES[cfg["dtype"]], error=f"skipped: past the {run.budget_s} s budget")
                    else:
                        row = measure(run, cfg, backend, n, d_k, causal, chosen.get((d_k, causal)))
                    run.log(" ".join(f"{key}={row[key]}" for key in COLUMNS if row.get(key) not in (None, "")))
                    rows.append(row)
                write_csv(run.out / "gpu_attention.csv", rows)  # after every case: a cut-off run keeps its rows
    return rows


# ---------------------------------------------------------------- the machine, and the summary


def machine(run):
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
            "triton": getattr(T.triton, "__version__", "not installed"), "cuda": torch.version.cuda or "none",
            "host": f"{platform.system()} {platform.machine()}, {__import__('os').cpu_count()} logical CPUs"}
    if run.cuda:
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = (f"{props.name}, {props.total_memory / 2**20:,.0f} MiB, "
                       f"compute capability {props.major}.{props.minor}")
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
            info["driver"] = smi
        except (OSError, subprocess.SubprocessError, IndexError) as e:
            info["driver"] = f"unknown ({type(e).__name__})"
    else:
        info["gpu"] = "none: --smoke, Triton's interpreter on the CPU (times are not GPU results)"
    return info


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: row.get(key, "") for key in COLUMNS})


def find(rows, backend, n, d_k, causal):
    return next((r for r in rows if (r["backend"], r["n"], r["d_k"], r["causal"]) == (backend, n, d_k, causal)), {})


def ratio(a, b, key):
    return f"{a[key] / b[key]:.2f}" if a.get(key) and b.get(key) else "n/a (a case failed or was skipped)"


def summary(run, cfg, info, checks, tuning, chosen, rows):
    n, d_k = cfg["target"]
    lines = [f"# The Triton kernel beside torch's attention backends{' (smoke run: not results)' if run.smoke else ''}",
             "", "Written by `benchmarks/bench_gpu.py`; the method is in its docstring.", ""]
    lines += [f"- {key}: {value}" for key, value in info.items()] + [""]
    lines += [f"## Performance targets (forward, {DTYPE_NAMES[cfg['dtype']]}, B = {cfg['B']}, h = {cfg['h']}, "
              f"n = {n}, d_k = {d_k})", ""]
    for causal in (False, True):
        ours, flash, cudnn = (find(rows, b, n, d_k, causal) for b in ("triton", "flash", "cudnn"))
        lines.append(f"- causal={causal}: Triton {ours.get('fwd_tflops', 'n/a')} TFLOP/s with tiles "
                     f"{ours.get('tiles', 'n/a')}; flash {flash.get('fwd_tflops', 'n/a')}, cudnn "
                     f"{cudnn.get('fwd_tflops', 'n/a')}. Triton / flash = {ratio(ours, flash, 'fwd_tflops')} "
                     f"(target >= 1), Triton / cudnn = {ratio(ours, cudnn, 'fwd_tflops')}"
                     f"{' (target >= 0.8)' if not causal else ''}; peak memory Triton / flash = "
                     f"{ratio(ours, flash, 'fwd_peak_mib')} (target <= 2).")
    lines += ["", "## Tiles chosen (BLOCK_M, BLOCK_N, num_warps, num_stages), fastest forward at n = "
              f"{cfg['tune_n']}", ""]
    lines += [f"- d_k = {d}, causal = {c}: {t}" for (d, c), t in chosen.items()]
    lines += ["", "| d_k | causal | tiles | forward |", "|---|---|---|---|"]
    lines += [f"| {d} | {c} | {t} | {r} |" for d, c, t, r in tuning]
    lines += ["", "## Correctness on this device (largest error / largest reference value; bound in brackets)", ""]
    lines += [f"- {label}: " + ", ".join(f"{k} {e[k]:.1e} ({b[k]:.0e})" for k in e) + (" ok" if ok else " WRONG")
              for label, e, b, ok in checks]
    lines += ["", "## Forward TFLOP/s (the full table, with times, memory and forward+backward, is the CSV)", ""]
    backends = ["triton", *BACKENDS]
    lines += ["| n | d_k | causal | " + " | ".join(backends) + " |", "|---" * (3 + len(backends)) + "|"]
    for n_ in cfg["ns"]:
        for d in cfg["d_ks"]:
            for c in (False, True):
                cells = [str(find(rows, b, n_, d, c).get("fwd_tflops", "-")) for b in backends]
                lines.append(f"| {n_} | {d} | {c} | " + " | ".join(cells) + " |")
    lines += ["", "The Triton row's backward is `attention_backward` in torch (float32 tiles), not a fused kernel."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the CSV, the summary and the log go")
    parser.add_argument("--smoke", action="store_true", help="the whole pipeline on the CPU at tiny sizes")
    parser.add_argument("--budget-s", type=float, default=225.0, help="start no new case after this many seconds")
    args = parser.parse_args()
    out = args.out or (Path(tempfile.mkdtemp(prefix="bench_gpu_")) if args.smoke else RESULTS)
    run = Run(out, args.smoke, args.budget_s)
    cfg = SMOKE if args.smoke else FULL
    if not run.cuda and not args.smoke:
        run.log("no CUDA GPU: this benchmark measures a GPU (use --smoke to check the script on the CPU)")
        return 2
    info = machine(run)
    for key, value in info.items():
        run.log(f"{key}: {value}")
    try:
        checks, failures = check_correctness(run, cfg)
        if failures:
            run.log(f"CORRECTNESS FAILED on {len(failures)} case(s): {failures}; nothing timed")
            (out / "gpu_attention.md").write_text(summary(run, cfg, info, checks, [], {}, []))
            return 1
        chosen, tuning = tune(run, cfg)
        rows = sweep(run, cfg, chosen)
    except Exception:  # whatever stopped the run goes into the log that comes back
        run.log("FAILED:\n" + traceback.format_exc())
        return 1
    info["seconds"] = f"{time.perf_counter() - run.start:.0f} s for the whole run (budget {run.budget_s:.0f} s)"
    text = summary(run, cfg, info, checks, tuning, chosen, rows)
    (out / "gpu_attention.md").write_text(text)
    if not args.smoke and out != RESULTS:
        RESULTS.mkdir(parents=True, exist_ok=True)
        write_csv(RESULTS / "gpu_attention.csv", rows)
        (RESULTS / "gpu_attention.md").write_text(text)
    run.log(f"done: {out / 'gpu_attention.csv'}, {out / 'gpu_attention.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
