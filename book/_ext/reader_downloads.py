"""The website's .ipynb download serves the reader notebook (reader/book/, scripts/reader_notebooks.py).

Sphinx copies each chapter's source notebook to ``_sources/``, which is what the download button
links to; after the build this replaces it by the reader notebook of the same name, whose Markdown
shows the glued numbers, equation numbers and citations as the page does.
"""

import shutil
from pathlib import Path


def copy_reader_notebooks(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    reader = Path(app.srcdir) / "reader" / "book"
    sources = Path(app.outdir) / "_sources" / "book"
    for notebook in sorted(reader.glob("*.ipynb")):
        target = sources / notebook.name
        if target.exists():
            shutil.copyfile(notebook, target)


def setup(app):
    app.connect("build-finished", copy_reader_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
