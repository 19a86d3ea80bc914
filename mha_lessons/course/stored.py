"""The benchmark results the package ships (``mha_lessons/results/``), read the same way wherever a chapter runs.

``make bench`` writes these tables; they travel inside the package (a clone, or Colab with the wheel), so a chapter
never reads the repository or the network. ``gpu_attention_table`` and ``gpu_ceilings`` read the GPU measurements
with the machine they name. Reachable as ``M.notebook.<name>`` too.
"""


def read_result(name):
    """The text of a stored benchmark result, ``mha_lessons/results/<name>``.

    ``make bench`` writes these tables; they ship inside the package, so that a chapter
    shows them wherever it runs (a clone, or Colab with the package installed from a wheel)
    without reading the repository or the network.

    Examples
    --------
    >>> read_result("mha_vs_n.csv").splitlines()[0].startswith("n,")
    True
    """
    from importlib.resources import files

    results = files("mha_lessons") / "results"
    path = results / name
    if not path.is_file():
        known = sorted(p.name for p in results.iterdir() if p.is_file())
        raise ValueError(f"no stored benchmark result named {name!r}; there are {known}")
    return path.read_text()



def has_result(name):
    """Whether the package holds a stored benchmark result ``mha_lessons/results/<name>``.

    >>> has_result("mha_vs_n.csv"), has_result("no_such_table.csv")
    (True, False)
    """
    from importlib.resources import files

    return (files("mha_lessons") / "results" / name).is_file()


def read_table(name):
    """A stored CSV result as a list of dicts, one per row, every value a string.

    >>> read_table("mha_vs_n.csv")[0]["n"]
    '64'
    """
    import csv
    import io

    return list(csv.DictReader(io.StringIO(read_result(name))))


# The shared measurement of PyTorch's attention backends on one H100 (machine, versions and date in the .md
# beside it), which the chapters draw until the course's own GPU benchmark (benchmarks/bench_gpu.py) has stored
# gpu_attention.csv with the same columns.
GPU_ANCHOR = ("h100_sdpa_2026-11-26.csv", "h100_2026-11-26.md")
GPU_COLUMNS = ("backend", "B", "h", "n", "d_k", "causal", "fwd_ms", "fwd_tflops", "fwd_peak_mib")


def gpu_attention_table():
    """The GPU attention timings a chapter draws: the course's own measurement if stored, else the shared one.

    ``gpu_attention.csv`` (from ``benchmarks/bench_gpu.py``) when the package holds it, else the anchor
    ``GPU_ANCHOR``. Either table has at least the columns ``GPU_COLUMNS``: the backend, the sizes
    (B, h, n, d_k), whether causal, the forward's median time (ms), its TFLOP/s and its peak memory (MiB);
    a case that failed (out of memory, refused) has empty numbers.

    Returns
    -------
    rows : list of dict
        One per case: ``backend`` (str), ``B``, ``h``, ``n``, ``d_k`` (int), ``causal`` (bool), ``ms``,
        ``tflops``, ``peak_mib`` (float, or None where the case failed), and ``error`` (str: what stopped a
        failed case, such as ``"OutOfMemoryError: ..."``; empty where the case ran or the table has no such
        column).
    machine : str
        The GPU, versions and date the table names.
    measured_by_course : bool
        True for the course's own table, False for the anchor.

    Examples
    --------
    >>> rows, machine, own = gpu_attention_table()
    >>> {"math", "flash", "cudnn"} <= {r["backend"] for r in rows} and "H100" in machine
    True
    """
    own = has_result("gpu_attention.csv")
    name = "gpu_attention.csv" if own else GPU_ANCHOR[0]
    table = read_table(name)
    missing = [c for c in GPU_COLUMNS if table and c not in table[0]]
    if not table or missing:
        raise ValueError(f"{name} has no rows or lacks the columns {missing}; it needs {list(GPU_COLUMNS)}")

    def number(text):
        return float(text) if text not in ("", None) else None

    rows = [{"backend": r["backend"], **{key: int(r[key]) for key in ("B", "h", "n", "d_k")},
             "causal": r["causal"].strip().lower() in ("true", "1"), "ms": number(r["fwd_ms"]),
             "tflops": number(r["fwd_tflops"]), "peak_mib": number(r["fwd_peak_mib"]),
             "error": r.get("error") or ""} for r in table]
    sidecar = "gpu_attention.md" if own else GPU_ANCHOR[1]
    machine = machine_from_summary(read_result(sidecar) if has_result(sidecar) else "")
    return rows, machine, own


def machine_from_summary(text):
    """The machine a benchmark's Markdown summary names, in one line, with its date but no time of day.

    A summary names its machine either in a line ``Machine: ...`` or in bullets ``- gpu: ...``, ``- driver: ...``,
    ``- cuda: ...``, ``- torch: ...``, ``- triton: ...``, ``- date: ...`` (as ``benchmarks/bench_gpu.py`` writes
    them). A stored notebook output must not carry a time of day, so only the date is kept.

    Examples
    --------
    >>> machine_from_summary("Machine: one H100, PyTorch 2.11; measured 2026-11-26.")
    'one H100, PyTorch 2.11; measured 2026-11-26.'
    >>> machine_from_summary("- date: 2026-11-27 09:15 UTC\\n- gpu: NVIDIA H100 80GB HBM3\\n- torch: 2.11.0")
    'gpu NVIDIA H100 80GB HBM3; torch 2.11.0; measured 2026-11-27'
    >>> machine_from_summary("")
    'machine not recorded'
    """
    import re

    lines = text.splitlines()
    for line in lines:
        if line.startswith("Machine:"):
            return line.split(":", 1)[1].strip()
    bullets = dict(re.findall(r"^- (\w+): (.+)$", text, flags=re.M))
    named = [f"{key} {bullets[key]}" for key in ("gpu", "driver", "cuda", "torch", "triton") if key in bullets]
    date = re.search(r"\d{4}-\d{2}-\d{2}", bullets.get("date", ""))
    if date:
        named.append(f"measured {date.group(0)}")
    return "; ".join(named) if named else "machine not recorded"


def gpu_ceilings():
    """The two roofline ceilings ``benchmarks/bench_gpu_ceilings.py`` measured on a GPU, or None if not stored.

    Returns
    -------
    dict or None
        ``quantity -> value`` (strings, as stored): ``device``, ``sm_count``, ``l2_cache``, ``driver``, ``cuda``,
        ``torch``, ``date``, ``bf16_matmul`` (TFLOP/s of a large bf16 product) and ``copy`` (GB/s read and
        written by a large copy), among others.
    """
    if not has_result("gpu_ceilings.csv"):
        return None
    return {r["quantity"]: r["value"] for r in read_table("gpu_ceilings.csv")}
