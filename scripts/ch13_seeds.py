"""Chapter 13's training runs over many seeds: writes mha_lessons/results/ch13_seeds.csv and ch13_seeds.md.

Every configuration of mha_lessons.seeds.CONFIGS is trained at seeds 0 .. S-1 (S = 10 unless --seeds says
otherwise), exactly as the chapter trains it; the chapter states only what holds in every row and re-runs
seed 0 to check that it matches its row. Training amplifies the last-digit rounding of each CPU and BLAS,
so another machine gives slightly different numbers; the .md file names the machine that made these.

    PYTHONPATH=. python scripts/ch13_seeds.py [--seeds 10]
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _machine import describe  # noqa: E402

from mha_lessons import seeds  # noqa: E402

RESULTS = ROOT / "mha_lessons" / "results"


def report(r):
    print(f"{r['config']:<12} seed {r['seed']}, {r['steps']} steps: both (distinct) {r['both_distinct']:.3f}, "
          f"previous {r['previous']:.3f}, first {r['first']:.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    rows, start = [], time.perf_counter()
    for config in seeds.CONFIGS:
        for seed in range(args.seeds):
            rows.append(seeds.run(config, seed)[2])
            report(rows[-1])
    for config in ("loophole", "qk_tokens"):
        for seed in range(args.seeds):
            rows.append(seeds.run(config, seed, steps=seeds.LONG_STEPS, eval_every=50)[2])
            report(rows[-1])
    (RESULTS / "ch13_seeds.csv").write_text(seeds.to_csv(rows))
    lines = [
        "# Chapter 13's training runs over seeds", "",
        f"Machine: {describe()}.",
        f"{len(rows)} runs ({len(seeds.CONFIGS)} configurations x {args.seeds} seeds, and two of them trained "
        f"{seeds.LONG_STEPS} steps) in "
        f"{time.perf_counter() - start:.0f} s. Settings: {seeds.SETTINGS}.", "",
        "| config | seed | steps | both, where the relations differ | previous | first | solved step |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['config']} | {r['seed']} | {r['steps']} | {r['both_distinct']:.3f} | {r['previous']:.3f} | "
              f"{r['first']:.3f} | {r['solved_step']} |" for r in rows]
    (RESULTS / "ch13_seeds.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
