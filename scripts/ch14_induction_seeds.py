"""Chapter 14's induction-head model over seeds: writes mha_lessons/results/ch14_induction.csv and .md.

Trains mha_lessons.induction's two-layer attention-only model at seeds 0 .. S-1 (S = 10 unless --seeds says
otherwise), exactly as the chapter does, and stores one row per seed (mha_lessons.induction.induction_run).
The chapter re-runs seed 0 and checks that it matches its row, and states only what holds in every row.

    PYTHONPATH=. python scripts/ch14_induction_seeds.py [--seeds 10]
"""

import argparse
import csv
import io
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _machine import describe  # noqa: E402

from mha_lessons import induction  # noqa: E402

RESULTS = ROOT / "mha_lessons" / "results"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    rows, start = [], time.perf_counter()
    for seed in range(args.seeds):
        rows.append(induction.induction_run(seed)[2])
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=induction.INDUCTION_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (RESULTS / "ch14_induction.csv").write_text(out.getvalue())
    lines = ["# Chapter 14's induction-head model over seeds", "", f"Machine: {describe()}.",
             f"{len(rows)} runs in {time.perf_counter() - start:.0f} s. Settings: {induction.INDUCTION_SETTINGS}.", "",
             "Ablations take layer 1's output out of layer 2's keys, replaced by zero, by its mean over the "
             "held-out batch at each position, or by its value for another sequence of the batch (resample). "
             "'follows': weight on the keys whose previous token, in that other sequence, is the current token "
             "(resample-ablated head; unablated head on the same keys).", "",
             "| seed | loss, first copy | loss, second copy | drop start | drop step | previous-token score | "
             "induction score | zero: induction, loss | mean: induction, loss | resample: induction, loss | "
             "follows, resampled | follows, unablated |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['seed']} | {r['loss_first']:.3f} | {r['loss_second']:.3f} | {r['drop_start']} | {r['drop_step']} | "
              f"{r['previous']:.3f} | {r['induction']:.3f} | "
              + " | ".join(f"{r[k + '_induction']:.3f}, {r[k + '_loss_second']:.3f}" for k in induction.ABLATIONS)
              + f" | {r['resample_follows']:.3f} | {r['clean_follows']:.3f} |" for r in rows]
    (RESULTS / "ch14_induction.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
