"""Head-parallel multi-head attention on real processes: torch.distributed, gloo, 127.0.0.1.

Starts p worker processes (2 by default). Each computes its block of h / p heads and its share of the
output projection with the package's numpy code (``mha_lessons.parallel.partial_output``), then the
workers sum their shares with one all-reduce; worker 0 compares the sum with the whole layer computed
on one process. The work is done by ``mha_lessons.distributed.run_distributed``; this script chooses the
problem from the command line and prints what happened: which heads went where, how far the result is
from the single-process one, and how many bytes the all-reduce moves. It prints no timings, ports or
process ids, so two runs print the same text.

Usage:
    python scripts/head_parallel.py                    # p = 2 workers, float64
    python scripts/head_parallel.py --workers 4 --heads 8
    python scripts/head_parallel.py --json             # the report as JSON, for tests

Exit status 0 when the all-reduced output equals the single-process output within the tolerance of the
dtype (1e-12 for float64, 1e-5 for float32), 1 when it does not, 2 for bad arguments.
"""

import argparse
import json
import sys

import numpy as np

import mha_lessons as M

TOLERANCE = {"float64": 1e-12, "float32": 1e-5}


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="number of processes p (must divide --heads)")
    parser.add_argument("--heads", type=int, default=4, help="number of heads h")
    parser.add_argument("--d-model", type=int, default=16, help="width of a token vector")
    parser.add_argument("--batch", type=int, default=2, help="number of sequences B")
    parser.add_argument("--n", type=int, default=5, help="number of queries per sequence")
    parser.add_argument("--m", type=int, default=7, help="number of keys and values per sequence")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float64")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole run")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def describe(report, args):
    """The report as lines of text, the same on every run and machine (no timings, ports or ids)."""
    p = report["num_workers"]
    tol = TOLERANCE[args.dtype]
    lines = [
        f"head-parallel multi-head attention on {p} processes (torch.distributed, {report['backend']} backend, "
        f"over 127.0.0.1)",
        f"problem: cross-attention, x_q {(args.batch, args.n, args.d_model)}, x_k = x_v "
        f"{(args.batch, args.m, args.d_model)}, h = {args.heads} heads of d_k = {args.d_model // args.heads}, "
        f"random mask and biases, {report['dtype']}",
    ]
    lines += [f"worker {r} computes heads {heads}" for r, heads in enumerate(report["heads"])]
    lines += [
        f"worker 0's term alone is off by up to {report['partial_max_abs_diff']:.3f}: the heads of the other "
        f"workers are missing",
        f"after one all-reduce (sum) of a {report['shape']} tensor:",
        f"  every worker holds the same output: {report['identical_on_all_workers']}",
        f"  equal to the single-process output within {tol:g}: {report['max_abs_diff'] <= tol}",
        f"communication per forward pass: 1 all-reduce of {report['allreduce_elements']} numbers "
        f"= {report['tensor_bytes']} bytes",
        f"a ring all-reduce sends 2 (p - 1) / p x {report['tensor_bytes']} = "
        f"{report['ring_bytes_per_worker']:.0f} bytes from each worker",
    ]
    return lines


def main(argv=None):
    args = parse(argv)
    try:
        report = M.distributed.run_distributed(
            args.workers, batch=args.batch, n=args.n, m=args.m, d_model=args.d_model, num_heads=args.heads,
            dtype=args.dtype, seed=args.seed, timeout=args.timeout)
    except ValueError as error:  # bad sizes, e.g. p not dividing h
        print(f"error: {error}", file=sys.stderr)
        return 2
    equal = report["max_abs_diff"] <= TOLERANCE[args.dtype] and report["identical_on_all_workers"]
    if args.json:
        print(json.dumps({**report, "tolerance": TOLERANCE[args.dtype], "equal": bool(equal)}))
    else:
        print("\n".join(describe(report, args)))
        # the one number that may differ between machines (last-bit rounding), printed last
        print(f"max |all-reduced - single process| = {report['max_abs_diff']:.1e} "
              f"(machine epsilon of {args.dtype}: {np.finfo(args.dtype).eps:.1e})")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
