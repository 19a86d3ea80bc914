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
# The characters of code the text column shows at 1280 px with room for other fonts (it holds about 86).
LISTING_FITS = 80


def python_object(obj):
    """The Python function behind ``obj``: a Triton kernel (``triton.jit``) keeps it in ``.fn``; anything else as is.

    Examples
    --------
    >>> def kernel():
    ...     pass
    >>> class Jitted:                    # what triton.jit returns, in short
    ...     def __init__(self, fn):
    ...         self.fn = fn
    >>> python_object(Jitted(kernel)) is kernel, python_object(kernel) is kernel
    (True, True)
    """
    inner = getattr(obj, "fn", None)
    if inspect.isfunction(obj) or inspect.isclass(obj) or not inspect.isfunction(inner):
        return obj
    return inner


def source_without_docstring(obj):
    """The source code of a function or class, without its docstring (the page explains it instead).

    A Triton kernel shows the Python function it was written as (``python_object``).

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

    lines = textwrap.dedent(inspect.getsource(python_object(obj))).splitlines()
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
    note = listing_width_note(code)
    if count <= FOLD_OVER and not note:
        display(Code(code, language="python"))
        return
    listing = note + Code(code, language="python")._repr_html_()
    if count > FOLD_OVER:
        names = ", ".join(f"<code>{python_object(obj).__qualname__}</code>" for obj in objs)
        listing = f"<details><summary>The code of {names} ({count} lines): click to open</summary>{listing}</details>"
    display({"text/html": listing, "text/plain": code}, raw=True)


def listing_width_note(code):
    """The line a listing wider than the text column carries above it ('' if it fits): how wide it is.

    The chapters' own code is wrapped to ``LISTING_FITS`` characters; the package's source may be wider, and
    then says so rather than scrolling without warning (tests/test_browser.py looks for the note's class).

    >>> listing_width_note("x = 1")
    ''
    >>> listing_width_note("y = " + "1" * 90)
    '<p class="mha-listing-width">Its widest line has 94 characters: where the column is narrower, scroll sideways.</p>'
    """
    widest = max(len(line) for line in code.splitlines())
    if widest <= LISTING_FITS:
        return ""
    return (f'<p class="mha-listing-width">Its widest line has {widest} characters: where the column is '
            "narrower, scroll sideways.</p>")


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


# Stored benchmark results (read_result, read_table, the GPU tables) live in stored.py; reachable here as before.
from .stored import (GPU_ANCHOR, GPU_COLUMNS, gpu_attention_table, gpu_ceilings, has_result,  # noqa: E402,F401
                      machine_from_summary, read_result, read_table)


class skip_with_reason:  # noqa: N801 (used as a statement: ``with skip_with_reason(...):``)
    """Run a cell's block; if it raises one of ``errors``, print the error's message and go on with the chapter.

    Chapter 8 runs its Triton kernel in such blocks: on a machine where the kernel cannot run (no Triton on
    macOS or Windows), each block says why in one sentence instead of stopping the notebook with a traceback,
    and the chapter runs to its end. Any other error still stops the cell.

    Examples
    --------
    >>> with skip_with_reason(KeyError):
    ...     {}["missing"]
    Skipped: 'missing'
    >>> with skip_with_reason(KeyError):
    ...     print("ran")
    ran
    """

    def __init__(self, *errors):
        if not errors or not all(isinstance(e, type) and issubclass(e, BaseException) for e in errors):
            raise TypeError(f"skip_with_reason takes exception classes, got {errors!r}")
        self.errors = errors

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is not None and issubclass(kind, self.errors):
            import textwrap

            print(textwrap.fill(f"Skipped: {error}", width=80))  # fits the page's output column
            return True  # the error is handled: the notebook goes on
        return False


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
