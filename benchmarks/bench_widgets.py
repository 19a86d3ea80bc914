"""How long one slider move of chapter 3's multi-head panel takes: redraw plus rendering to PNG.

A slider move calls ``draw_multihead`` and then the notebook's inline backend renders the figure to a PNG;
both are timed here, with the Agg backend, for a sequence of slider positions. Target: under 100 ms.
Writes mha_lessons/results/widgets.md.

Usage: python benchmarks/bench_widgets.py [--repeats N]
"""

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mha_lessons as M  # noqa: E402
from _machine import RESULTS, describe  # noqa: E402

TARGET_MS = 100.0
MOVES = [(1, 64), (2, 64), (4, 64), (8, 64), (16, 64), (8, 128), (8, 256), (8, 512), (16, 512), (7, 512)]


def one_move(num_heads, d_model):
    fig = plt.figure(figsize=(10, 3.6))
    start = time.perf_counter()
    M.widgets.draw_multihead(fig, num_heads=num_heads, d_model=d_model)
    fig.savefig(io.BytesIO(), format="png")  # what the inline backend does on plt.show()
    elapsed = time.perf_counter() - start
    plt.close(fig)
    return elapsed * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one_move(4, 64)  # warm up: imports, font cache
    rows = []
    for i, (h, d_model) in enumerate(MOVES, 1):
        times = [one_move(h, d_model) for _ in range(args.repeats)]
        rows.append((h, d_model, statistics.median(times), max(times)))
        print(f"[{i}/{len(MOVES)}] h = {h:>2}, d_model = {d_model:>3}: median {rows[-1][2]:.1f} ms", flush=True)
    worst = max(r[2] for r in rows)
    lines = [
        "# One slider move of the multi-head panel (chapter 3)",
        "",
        f"Machine: {describe()}.",
        f"Median of {args.repeats} repeats per slider position; draw plus PNG rendering with matplotlib's Agg backend.",
        "",
        "| h | d_model | median (ms) | slowest (ms) |",
        "|---:|---:|---:|---:|",
        *[f"| {h} | {d} | {med:.1f} | {mx:.1f} |" for h, d, med, mx in rows],
        "",
        f"Slowest median: {worst:.1f} ms; target {TARGET_MS:.0f} ms: {'met' if worst < TARGET_MS else 'NOT met'}.",
    ]
    out = RESULTS / "widgets.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
