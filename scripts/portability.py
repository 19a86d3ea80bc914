"""Re-run, as other readers' machines would compute it, everything whose result another machine could round differently.

A stored output or a test must hold on any CPU and BLAS library, but a test run sees only the machine it runs on.
numpy, OpenBLAS, PyTorch and MKL choose their SIMD code paths at run time, and each choice rounds long sums
differently; this script makes other choices on this machine, so that an output stored with more digits than
another machine reproduces, or a test that asserts more than every machine computes, fails here first. Two settings:

- ``older-cpu``: numpy's SIMD loops down to its baseline (``NPY_DISABLE_CPU_FEATURES`` naming every
  dispatch target), PyTorch's kernels to its generic ones (``ATEN_CPU_CAPABILITY=default``), MKL on its
  conditional-reproducibility path for older CPUs (``MKL_CBWR=COMPATIBLE``);
- ``avx2-cpu``: numpy without its AVX-512 loops, PyTorch and MKL limited to AVX2, as on most laptops.

BLAS and OpenMP run on one thread per pytest worker in both (``make test`` does the same; ``make execute`` stores
the outputs with the machine's default threads, so nbval also compares one thread against several).
``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` are never touched: some machines set them on purpose.

What each setting re-runs, and why only that:

- every chapter notebook (nbval): each prints numbers computed in floating point;
- the package's doctests;
- the unit tests, except those marked ``slow`` (the browser, JupyterLab and Colab-wheel tests check pages, front
  ends and an install, not numbers; the chapters they run are re-run here through nbval) and the test files
  marked ``machine_independent`` with their reason (they read notebooks, text and configuration and compute
  nothing in floating point; tests/conftest.py refuses the mark on a file that imports numpy, torch or
  mha_lessons).

A new chapter or test file is re-run unless it says otherwise: nothing escapes by default. The two settings run at
the same time, each on its share of the cores (pytest-xdist), each writing its log to ``_build/portability/``.
Each setting is checked to take effect (what numpy really turned off is printed), then pytest runs.
``make portability`` runs it; ``make test`` ends with it.

Usage: python scripts/portability.py [SETTING ...] [-- PYTEST_ARGUMENT ...]
(default: both settings, on the selection above; arguments after ``--`` replace the selection, e.g.
``-- tests/test_dtypes.py``)
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "_build" / "portability"
NOTEBOOKS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").glob("*.ipynb"))
SELECTION = ["-m", "not slow and not machine_independent", "tests", "mha_lessons", *NOTEBOOKS]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
          "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--doctest-modules"]
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
PROBE = """
import json
try:
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
except ImportError:  # numpy 1.x
    from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
import torch
print(json.dumps({"dispatch": list(__cpu_dispatch__),
                  "on": [f for f in __cpu_dispatch__ if __cpu_features__.get(f)],
                  "torch": torch.backends.cpu.get_cpu_capability()}))
"""


def probe(env):
    """numpy's dispatch targets, those switched on under ``env``, and PyTorch's CPU capability."""
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def settings(dispatch):
    wide = [f for f in dispatch if "512" in f or f.endswith("V4")]  # AVX-512 and above
    return {
        "older-cpu": {"NPY_DISABLE_CPU_FEATURES": " ".join(dispatch), "ATEN_CPU_CAPABILITY": "default",
                      "MKL_CBWR": "COMPATIBLE", **ONE_THREAD},
        "avx2-cpu": {"NPY_DISABLE_CPU_FEATURES": " ".join(wide), "ATEN_CPU_CAPABILITY": "avx2",
                     "MKL_ENABLE_INSTRUCTIONS": "AVX2", **ONE_THREAD},
    }


def workers(count):
    """pytest-xdist's options for ``count`` workers (none: in this process)."""
    return ["-n", "0"] if count < 2 else ["-n", str(count), "--dist", "loadscope", "--no-loadscope-reorder"]


def main(argv):
    names, selection = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, SELECTION)
    here = probe(os.environ)
    print(f"this machine: numpy SIMD {' '.join(here['on']) or 'baseline only'}; PyTorch {here['torch']}")
    chosen = settings(here["dispatch"])
    unknown = set(names) - set(chosen)
    if unknown:
        sys.exit(f"unknown setting(s) {sorted(unknown)}; choose from {sorted(chosen)}")
    names = names or list(chosen)
    share = max(1, (os.cpu_count() or 1) // len(names))  # the settings run side by side
    LOGS.mkdir(parents=True, exist_ok=True)
    running = {}
    for name in names:
        env = {**os.environ, **chosen[name]}
        seen = probe(env)
        still_on = set(seen["on"]) & set(chosen[name]["NPY_DISABLE_CPU_FEATURES"].split())
        if still_on:
            sys.exit(f"{name}: numpy did not turn off {sorted(still_on)}")
        off = sorted(set(here["on"]) - set(seen["on"]))
        log = LOGS / f"{name}.log"
        print(f"=== {name}: numpy SIMD off: {' '.join(off) or 'none (this CPU has none of them)'}; "
              f"PyTorch {seen['torch']}; " + ", ".join(f"{k}={v}" for k, v in chosen[name].items()
                                                      if k != "NPY_DISABLE_CPU_FEATURES")
              + f"; {share} worker(s); log: {log.relative_to(ROOT)}", flush=True)
        with open(log, "w") as out:
            running[name] = (subprocess.Popen([*PYTEST, *workers(share), *selection], cwd=ROOT, env=env,
                                              stdout=out, stderr=subprocess.STDOUT), log, time.perf_counter())
    failed = []
    for name, (process, log, start) in running.items():
        code = process.wait()
        lines = log.read_text(errors="replace").splitlines()
        shown = lines if code != 0 else lines[-1:]  # a failure in full, a pass by its summary line
        print(f"\n=== {name} ({time.perf_counter() - start:.0f} s):\n" + "\n".join(shown[-400:]), flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        sys.exit(f"results that another machine would not reproduce, under: {', '.join(failed)} "
                 f"(logs in {LOGS.relative_to(ROOT)})")


if __name__ == "__main__":
    main(sys.argv[1:])
