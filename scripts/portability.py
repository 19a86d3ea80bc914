"""Re-run the notebooks (nbval) and the package's doctests as other readers' machines would compute them.

A stored output must hold on any CPU and BLAS library, but a test run sees only the machine it runs on.
numpy, OpenBLAS, PyTorch and MKL choose their SIMD code paths and thread splits at run time, and each
choice rounds long sums differently; this script makes other choices on this machine, so that an output
stored with more digits than another machine reproduces fails here first. Two settings:

- ``older-cpu``: numpy's SIMD loops down to its baseline (``NPY_DISABLE_CPU_FEATURES`` naming every
  dispatch target), PyTorch's kernels to its generic ones (``ATEN_CPU_CAPABILITY=default``), MKL on its
  conditional-reproducibility path for older CPUs (``MKL_CBWR=COMPATIBLE``), BLAS on one thread;
- ``avx2-cpu``: numpy without its AVX-512 loops, PyTorch and MKL limited to AVX2, as on most laptops.

``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` are never touched: some machines set them on purpose.
Each setting is checked to take effect (what numpy really turned off is printed), then pytest runs.
``make portability`` runs it; ``make test`` ends with it.

Usage: python scripts/portability.py [SETTING ...]   (default: both)
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
          "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--doctest-modules", "mha_lessons",
          *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").glob("*.ipynb"))]
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
                      "MKL_CBWR": "COMPATIBLE", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                      "MKL_NUM_THREADS": "1"},
        "avx2-cpu": {"NPY_DISABLE_CPU_FEATURES": " ".join(wide), "ATEN_CPU_CAPABILITY": "avx2",
                     "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    }


def main(names):
    here = probe(os.environ)
    print(f"this machine: numpy SIMD {' '.join(here['on']) or 'baseline only'}; PyTorch {here['torch']}")
    chosen = settings(here["dispatch"])
    unknown = set(names) - set(chosen)
    if unknown:
        sys.exit(f"unknown setting(s) {sorted(unknown)}; choose from {sorted(chosen)}")
    failed = []
    for name in names or chosen:
        env = {**os.environ, **chosen[name]}
        seen = probe(env)
        still_on = set(seen["on"]) & set(chosen[name]["NPY_DISABLE_CPU_FEATURES"].split())
        if still_on:
            sys.exit(f"{name}: numpy did not turn off {sorted(still_on)}")
        off = sorted(set(here["on"]) - set(seen["on"]))
        print(f"\n=== {name}: numpy SIMD off: {' '.join(off) or 'none (this CPU has none of them)'}; "
              f"PyTorch {seen['torch']}; " + ", ".join(f"{k}={v}" for k, v in chosen[name].items()
                                                      if k != "NPY_DISABLE_CPU_FEATURES"), flush=True)
        if subprocess.run(PYTEST, cwd=ROOT, env=env).returncode != 0:
            failed.append(name)
    if failed:
        sys.exit(f"stored outputs that another machine would not reproduce, under: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
