"""Measure a GPU's two roofline ceilings once: the bf16 matrix-product rate and the memory copy rate.

Chapter 4 draws the roofline of an NVIDIA H100 from its datasheet; this script measures the same two
ceilings on the GPU it runs on, so that the chapter can place the measured ones beside the datasheet's:

- **R_FLOP, bf16**: one large square product ``a @ b`` of random normal bf16 matrices (never zeros: a
  tensor core multiplying zeros draws less power, and a GPU held below its power limit runs faster than
  real work lets it), timed with CUDA events around each call; the median of the timed calls after a
  warm-up. FLOPs = 2 size³.
- **R_mem**: one large device-to-device copy ``dst.copy_(src)``; it reads every byte of ``src`` and writes
  every byte of ``dst``, so its rate counts 2 × the buffer's bytes per call (bytes read + written per
  second, as the roofline's memory axis counts them); the median of the timed calls.

It writes ``mha_lessons/results/gpu_ceilings.csv`` (quantity, value, unit), which also names the device,
its SM count and L2 size, the driver, CUDA and torch versions, and the date; with ``--out DIR`` a copy
goes there too. About 10-20 s on an H100 (most of it starting CUDA).

``--smoke`` runs the same code on the CPU at small sizes in a few seconds, timed with ``time.perf_counter``,
and writes into benchmarks/quick/ (never into the package): a check that the script works on a machine
without a GPU. Without a CUDA GPU and without ``--smoke`` the script says so and exits with status 1, or with
status 0 under ``--if-gpu`` (how ``make bench`` runs it, so that a machine without a GPU skips it).

Usage: python benchmarks/bench_gpu_ceilings.py [--smoke | --if-gpu] [--out DIR]
"""

import argparse
import csv
import datetime
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import QUICK_RESULTS, RESULTS  # noqa: E402

NAME = "gpu_ceilings.csv"


def timer(device):
    """A function that runs ``fn`` once and returns its seconds: CUDA events on a GPU, perf_counter on a CPU."""
    import torch

    if device.type == "cuda":
        def run(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3  # milliseconds -> seconds
    else:
        def run(fn):
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
    return run


def median_seconds(fn, device, *, warmup, calls):
    run = timer(device)
    for _ in range(warmup):
        run(fn)
    return statistics.median(run(fn) for _ in range(calls))


def matmul_rate(device, size, *, warmup, calls):
    """FLOP/s of one (size, size) @ (size, size) bf16 product on random normal data: 2 size³ FLOPs a call."""
    import torch

    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    out = torch.empty(size, size, device=device, dtype=torch.bfloat16)
    seconds = median_seconds(lambda: torch.matmul(a, b, out=out), device, warmup=warmup, calls=calls)
    expected = a[:4].float() @ b[:, :4].float()  # a corner of the product, recomputed in float32
    if not torch.allclose(out[:4, :4].float(), expected, rtol=2e-2, atol=size ** 0.5 * 2e-2):
        raise RuntimeError("the bf16 product does not match a float32 recomputation of its corner")
    return 2 * size ** 3 / seconds, seconds


def copy_rate(device, numbers, *, warmup, calls):
    """Bytes read + written per second by one device-to-device copy of ``numbers`` float32 numbers."""
    import torch

    src = torch.randn(numbers, device=device, dtype=torch.float32,
                      generator=torch.Generator(device=device).manual_seed(1))
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), device, warmup=warmup, calls=calls)
    if not torch.equal(dst[:1000], src[:1000]):
        raise RuntimeError("the copy did not copy")
    return 2 * src.numel() * src.element_size() / seconds, seconds


def driver_version():
    """The NVIDIA driver's version as nvidia-smi reports it, or 'unknown'."""
    if shutil.which("nvidia-smi") is None:
        return "unknown"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return out.strip().splitlines()[0] if out.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def describe_device(device):
    """The rows that name the machine: device, SM count, L2, driver, CUDA, torch, Python, date."""
    import torch

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    rows = [["date", date, "UTC"], ["torch", torch.__version__, ""], ["python", platform.python_version(), ""]]
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0)
        rows = [["device", props.name, ""], ["sm_count", props.multi_processor_count, "SMs"],
                ["l2_cache", l2 / 2**20 if l2 else "unknown", "MiB"],
                ["memory", props.total_memory / 2**30, "GiB"],
                ["driver", driver_version(), ""], ["cuda", torch.version.cuda, ""]] + rows
    else:
        rows = [["device", f"CPU ({platform.machine()}), smoke test only: not a GPU's ceilings", ""]] + rows
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds on the CPU, to check the script works")
    parser.add_argument("--if-gpu", action="store_true", help="without a CUDA GPU, say so and exit with status 0")
    parser.add_argument("--out", type=Path, help="also write a copy of the table into this folder")
    args = parser.parse_args(argv)
    import torch

    if args.smoke:
        device, results = torch.device("cpu"), QUICK_RESULTS
        sizes = dict(size=256, numbers=2**22, warmup=1, calls=3)
    elif torch.cuda.is_available():
        device, results = torch.device("cuda"), RESULTS
        # 8192³ products: 1.1 TFLOP a call, about 1.5 ms on an H100; a 1 GiB copy moves 2 GiB, about 1 ms
        sizes = dict(size=8192, numbers=2**28, warmup=100, calls=100)
    else:
        print("No CUDA GPU is visible to torch: nothing to measure (run with --smoke to check the script on a CPU).")
        return 0 if args.if_gpu else 1
    start = time.perf_counter()
    flops, matmul_s = matmul_rate(device, sizes["size"], warmup=sizes["warmup"], calls=sizes["calls"])
    moved, copy_s = copy_rate(device, sizes["numbers"], warmup=sizes["warmup"], calls=sizes["calls"])
    rows = describe_device(device) + [
        ["bf16_matmul", flops / 1e12, "TFLOP/s"],
        ["bf16_matmul_size", sizes["size"], "rows = columns"],
        ["bf16_matmul_median", matmul_s * 1e3, "ms"],
        ["copy", moved / 1e9, "GB/s read + written"],
        ["copy_buffer", sizes["numbers"] * 4 / 2**20, "MiB"],
        ["copy_median", copy_s * 1e3, "ms"],
        ["calls", sizes["calls"], "timed calls each, median"],
    ]
    results.mkdir(parents=True, exist_ok=True)
    targets = [results / NAME] + ([args.out / NAME] if args.out else [])
    for path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["quantity", "value", "unit"])
            writer.writerows(rows)
    for quantity, value, unit in rows:
        print(f"{quantity:>20}: {value:.6g} {unit}" if isinstance(value, float) else f"{quantity:>20}: {value} {unit}")
    print(f"wrote {', '.join(str(p) for p in targets)} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
