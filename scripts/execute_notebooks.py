"""Re-execute the course's notebooks in place, storing fresh outputs and widget state.

Run it (``make execute``) after changing the package or a notebook, then commit the
notebooks: the website shows the stored outputs, and ``make test`` (nbval) fails
when they no longer match what the code computes.

Usage: python scripts/execute_notebooks.py [NOTEBOOK ...]   (default: every notebook in _toc.yml)
"""

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def notebooks_in_toc():
    toc = (ROOT / "_toc.yml").read_text()
    entries = re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)", toc, flags=re.MULTILINE)
    return [ROOT / f"{entry}.ipynb" for entry in entries if (ROOT / f"{entry}.ipynb").exists()]


def execute(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,  # no timestamps in the stored notebook
    )
    client.execute()
    if not _has_widgets(nb):
        nb.metadata.pop("widgets", None)  # no empty widget state in notebooks without widgets
    nbformat.write(nb, path)


def _has_widgets(nb):
    return any(
        "application/vnd.jupyter.widget-view+json" in output.get("data", {})
        for cell in nb.cells if cell.cell_type == "code"
        for output in cell.outputs
    )


def main(argv):
    paths = [Path(p).resolve() for p in argv] or notebooks_in_toc()
    for path in paths:
        start = time.perf_counter()
        print(f"executing {path.relative_to(ROOT)} ...", end=" ", flush=True)
        execute(path)
        print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
