"""Measure gloo's all-reduce on this machine and store the times for chapter 11's α–β fit.

Starts p = 2 worker processes with torch.distributed and the gloo backend over 127.0.0.1, as chapter 11 does
(mha_lessons.distributed.time_allreduce), and times dist.all_reduce of float32 tensors from 4 bytes to
4 MiB: a warm-up call, then REPEATS calls per size, each after a barrier; a call's time is the slower
worker's; the table holds the median and the fastest call of each size, and the chapter fits the fastest
(on a shared machine, the calls least disturbed by other work). Writes mha_lessons/results/allreduce_gloo.csv (bytes, seconds)
and allreduce_gloo.md (the machine, the load, the settings). The times depend on the machine and on what
else it runs, which is why the chapter reads them from here instead of measuring them live.

    PYTHONPATH=. python scripts/allreduce_alpha_beta.py
"""

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _machine import describe  # noqa: E402

from mha_lessons.distributed import time_allreduce  # noqa: E402
from mha_lessons.parallel import fit_alpha_beta  # noqa: E402

RESULTS = ROOT / "mha_lessons" / "results"
WORKERS, REPEATS = 2, 200
SIZES = tuple(4 ** k for k in range(11))  # float32 elements: 1 to 4**10 (4 bytes to 4 MiB)


def main():
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    result = time_allreduce(WORKERS, SIZES, repeats=REPEATS, timeout=600)
    elapsed = time.perf_counter() - start
    load_after = os.getloadavg()[0]
    lines = ["bytes,median_seconds,min_seconds"] + [
        f"{b},{t:.6e},{m:.6e}" for b, t, m in zip(result["bytes"], result["seconds"], result["min_seconds"])]
    (RESULTS / "allreduce_gloo.csv").write_text("\n".join(lines) + "\n")
    t_lat, r_link = fit_alpha_beta(result["bytes"], result["min_seconds"], WORKERS)  # α, and 1 / β
    text = [
        "# gloo all-reduce times for chapter 11's α–β fit", "",
        f"Machine: {describe()}.",
        f"p = {WORKERS} processes, torch.distributed with gloo over 127.0.0.1, float32 tensors; "
        f"{REPEATS} calls per size after a warm-up call, each after a barrier, a call's time being the slower "
        f"worker's; the table gives the median and the fastest call. Run took {elapsed:.0f} s; load average (1 minute) {load_before:.2f} at the start "
        f"and {load_after:.2f} at the end.", "",
        f"Fit to the fastest calls of the ring's model t = 2 (p - 1) t_lat + 2 (p - 1) / p · N / R_link: "
        f"t_lat = α = {t_lat * 1e6:.1f} µs, R_link = 1 / β = {r_link / 1e9:.2f} GB/s.", "",
        "| bytes | median seconds | fastest seconds |", "|---:|---:|---:|",
    ] + [f"| {b} | {t:.3e} | {m:.3e} |" for b, t, m in zip(result["bytes"], result["seconds"], result["min_seconds"])]
    (RESULTS / "allreduce_gloo.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
