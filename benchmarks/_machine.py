"""A one-line description of the machine a benchmark ran on, for the tables the chapters show."""

import os
import platform


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
