"""Small helpers for the chapters' notebooks (IPython is imported inside each function).

``glue`` stores a computed value in a cell's output so that the website's prose
can quote it (``{glue:text}`name:.3f``` in a Markdown cell): no number in the
text is typed by hand. It writes the same output as ``myst_nb.glue`` but needs
only IPython, so the notebooks also run in Colab, where myst-nb is absent.
Floats are stored to ``GLUE_DIGITS`` significant digits (``portable``), so that
the stored output is the same on any CPU and BLAS library.
"""

import inspect


def glue(name, value, display=True):
    """Record ``value`` under ``name`` for the book's ``{glue:text}`` role, and show it.

    Examples
    --------
    >>> glue("answer", 42)   # outside a notebook this prints the value
    42
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    value = portable(value)
    bundle, metadata = format_display_data(value)
    prefix = "" if display else "application/papermill.record/"
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + mime: data for mime, data in bundle.items()}, raw=True, metadata=metadata)


# Significant digits a glued float keeps. Another CPU or BLAS library rounds long sums differently, in the
# last few of a double's 16 digits; 6 digits are far above that, and above what any page prints (at most 5:
# tests/test_notebooks_hygiene.py checks every {glue:text} format against this number).
GLUE_DIGITS = 6


def portable(value, digits=GLUE_DIGITS):
    """``value`` with a float rounded to ``digits`` significant digits; anything else as it is.

    A stored notebook output must come out the same on the reader's machine, whose CPU and
    BLAS library round in other places than ours: the last digits of a long computation are
    not part of the result.

    Examples
    --------
    >>> portable(0.933120326467), portable(0.933120326458)     # two machines, one stored value
    (0.93312, 0.93312)
    >>> portable(7), portable("text")
    (7, 'text')
    """
    import numbers

    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return float(f"{float(value):.{digits}g}")
    return value


# A listing longer than this many lines starts folded on the page: a reader opens it when wanted.
FOLD_OVER = 25


def source_without_docstring(obj):
    """The source code of a function or class, without its docstring (the page explains it instead).

    Examples
    --------
    >>> def add(a, b):
    ...     "Add two numbers."
    ...     return a + b   # the sum
    >>> print(source_without_docstring(add))
    def add(a, b):
        return a + b   # the sum
    """
    import ast
    import textwrap

    lines = textwrap.dedent(inspect.getsource(obj)).splitlines()
    node = ast.parse("\n".join(lines)).body[0]
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        del lines[first.lineno - 1:first.end_lineno]  # ast counts lines from 1
    return "\n".join(lines)


def show_source(*objs):
    """Display the code of package functions or classes, highlighted, without their docstrings.

    The chapters show the package's own code this way, never a pasted copy.
    Several objects are shown one after another, in the order given. A listing
    longer than ``FOLD_OVER`` lines starts folded (an HTML ``<details>``
    element, opened with a click), so that the page stays readable.
    """
    from IPython.display import Code, display

    code = "\n\n\n".join(source_without_docstring(obj) for obj in objs)
    count = code.count("\n") + 1
    if count <= FOLD_OVER:
        display(Code(code, language="python"))
        return
    names = ", ".join(f"<code>{obj.__qualname__}</code>" for obj in objs)
    html = (f"<details><summary>The code of {names} ({count} lines): click to open</summary>"
            f"{Code(code, language='python')._repr_html_()}</details>")
    display({"text/html": html, "text/plain": code}, raw=True)


def format_table(matrix, row_labels=None, col_labels=None, fmt="{:.3f}"):
    """A 2-D array as an aligned text table with row and column labels.

    Examples
    --------
    >>> print(format_table([[1, 0.5], [0, 2]], ["a", "b"], ["x", "y"], fmt="{:.1f}"))
         x    y
    a  1.0  0.5
    b  0.0  2.0
    """
    import numpy as np

    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"format_table needs a 2-D matrix, got shape {matrix.shape}")
    n, m = matrix.shape
    rows = [str(r) for r in (row_labels if row_labels is not None else range(n))]
    cols = [str(c) for c in (col_labels if col_labels is not None else range(m))]
    if len(rows) != n or len(cols) != m:
        raise ValueError(f"{len(rows)} row and {len(cols)} column labels for a matrix of shape {matrix.shape}")
    cells = [[fmt.format(v) for v in row] for row in matrix]
    width = max([len(c) for c in cols] + [len(c) for row in cells for c in row]) + 2
    first = max(len(r) for r in rows)
    lines = [" " * first + "".join(c.rjust(width) for c in cols)]
    lines += [r.ljust(first) + "".join(c.rjust(width) for c in row) for r, row in zip(rows, cells)]
    return "\n".join(lines)


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


PINNED_TORCH = "2.13"  # the PyTorch that requirements.txt pins and the stored outputs were computed with


def check_torch_behaviour(holds, claim, pinned=PINNED_TORCH):
    """Assert a claim about what PyTorch does on the version the course pins; on another version, say so instead.

    A chapter that describes a detail of PyTorch (what a path returns for a fully masked row, which random numbers
    a function draws) checks it against the PyTorch that ran the cell. On the pinned version a claim that fails is an
    error, as any failed check. On another version, such as the one Colab ships, the cell prints a visible note
    that names both versions, and goes on: the package itself does not depend on the detail.

    Parameters
    ----------
    holds : bool
        Whether the claim held on the PyTorch that ran the cell.
    claim : str
        The claim, as a sentence ("the functional path returns zeros for a fully masked row").
    pinned : str, optional
        The version the text describes, as ``"major.minor"``.

    Returns
    -------
    bool
        ``holds``.

    Raises
    ------
    AssertionError
        If the claim does not hold on the pinned version.

    Examples
    --------
    >>> check_torch_behaviour(True, "1 + 1 = 2 in PyTorch too")
    True
    """
    if holds:
        return True
    import torch

    version = torch.__version__.split("+")[0]
    if version == pinned or version.startswith(pinned + "."):
        raise AssertionError(f"on PyTorch {version}, the version the course pins, this no longer holds: {claim}")
    print(f"Note: on your PyTorch {version} this does not hold: {claim}. The text describes PyTorch {pinned}, "
          f"the version the course pins; nothing in mha_lessons depends on it.")
    return False
