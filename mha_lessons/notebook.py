"""Small helpers for the chapters' notebooks (IPython is imported inside each function).

``glue`` stores a computed value in a cell's output so that the website's prose
can quote it (``{glue:text}`name:.3f``` in a Markdown cell): no number in the
text is typed by hand. It writes the same output as ``myst_nb.glue`` but needs
only IPython, so the notebooks also run in Colab, where myst-nb is absent.
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

    if isinstance(value, float):
        # 12 significant digits: enough for any text, and stable against last-bit differences
        # between machines' math libraries, which nbval would otherwise report as a changed output.
        value = float(f"{value:.12g}")
    bundle, metadata = format_display_data(value)
    prefix = "" if display else "application/papermill.record/"
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + mime: data for mime, data in bundle.items()}, raw=True, metadata=metadata)


def show_source(obj):
    """Display the source code of a package function or class, highlighted.

    The chapters show the package's own code this way, never a pasted copy.
    """
    from IPython.display import Code, display

    display(Code(inspect.getsource(obj), language="python"))


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


# The course's repository: the chapters' Colab cell installs from it, and stored benchmark results
# are read from it when a chapter runs outside a clone (as in Colab). tests/test_book.py checks that
# it equals repository.url in _config.yml.
REPOSITORY = "https://github.com/mha-lessons/mha-lessons"


def read_result(name):
    """The text of a stored benchmark result, ``benchmarks/results/<name>``.

    Read from the clone the notebook runs in when there is one (searching upwards
    from the working directory), otherwise downloaded from the repository.
    """
    from pathlib import Path

    for folder in [Path.cwd(), *Path.cwd().parents]:
        path = folder / "benchmarks" / "results" / name
        if path.is_file():
            return path.read_text()
    from urllib.request import urlopen

    owner_repo = REPOSITORY.removeprefix("https://github.com/")
    with urlopen(f"https://raw.githubusercontent.com/{owner_repo}/main/benchmarks/results/{name}") as response:
        return response.read().decode()
