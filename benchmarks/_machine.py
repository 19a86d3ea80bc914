"""What the benchmarks share: where their results go, and a one-line description of the machine they ran on."""

import os
import platform
from pathlib import Path

# The chapters show these tables, so they ship inside the package (Colab installs a wheel, not a clone):
# mha_lessons.notebook.read_result reads them from there.
RESULTS = Path(__file__).resolve().parent.parent / "mha_lessons" / "results"
# A --quick run checks that a script works; its numbers are not results, so they stay out of the package.
QUICK_RESULTS = Path(__file__).resolve().parent / "quick"


def describe():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    import numpy

    return (f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, numpy {numpy.__version__}")
