"""Sphinx extension: what the PDF (`make pdf`, Sphinx's LaTeX builder) prints in place of the web-only outputs.

Loaded through `sphinx.local_extensions` in _config.yml; it changes nothing in the website: every step
runs only when the builder writes LaTeX.

- A slider panel (mha_lessons/course/panels.py) is one HTML output that a page's script drives; LaTeX can print
  neither, and myst-nb would fall back to the output's plain text alone. In the PDF the panel prints as the
  figures of the state it shows first (its PNG frames, decoded from the HTML into files next to myst-nb's
  other output images) followed by that plain text, which names the state and its numbers.
- A cell tagged ``hide-cell`` (an exercise's solution, a collapsed check) is folded on the website behind a
  button; Jupyter Book's LaTeX transform would drop it from the PDF, figures included. The PDF prints it
  (its first comment line says what it is); ``hide-input`` (plotting code) still prints only the output.
- A table of more than 30 rows becomes a LaTeX longtable, whose columns Sphinx sets to the width of their
  longest line unless the table gives widths: the notation page's tables ran 500 pt off the page. Such a
  table gets widths in proportion to the mean length of its columns' text, so that its cells wrap.
- ``show_source`` outputs (IPython's ``Code``) carry a ``text/latex`` version written for nbconvert's
  preamble (``\\PY`` macros, an environment that cannot sit where myst-nb puts LaTeX output, in math): the
  PDF prints their plain text, the source as a code listing, instead.
"""

import base64
import hashlib
import html
import re
from pathlib import Path

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

PANEL = 'class="mha-panel"'
FRAME = re.compile(r'<img class="mha-panel-frame"[^>]*?>')
ATTRIBUTE = re.compile(r'\b(src|alt)="([^"]*)"')


def _bundles(document):
    return [
        node
        for node in document.findall(nodes.container)
        if node.get("nb_element") == "mime_bundle"
    ]


def _child(bundle, mime_type):
    return next((c for c in bundle.children if c.get("mime_type") == mime_type), None)


def panel_frames(markup):
    """The frames a panel's HTML shows first: a list of (png bytes, alt text), in page order.

    >>> png = base64.b64encode(b"not really a png").decode()
    >>> panel_frames(f'<img class="mha-panel-frame" data-frame="0" src="data:image/png;base64,{png}" alt="a &amp; b">')
    [(b'not really a png', 'a & b')]
    """
    frames = []
    for tag in FRAME.findall(markup):
        attributes = dict(ATTRIBUTE.findall(tag))
        src = attributes.get("src", "")
        if src.startswith("data:image/png;base64,"):
            frames.append((base64.b64decode(src.split(",", 1)[1]), html.unescape(attributes.get("alt", ""))))
    return frames


def column_widths(table, least=6):
    """Widths for a table's columns: the mean length of their cells' text, but no less than their longest
    word (code names do not break; monospaced, they count 1.4 times their letters) nor than ``least``.

    >>> def row(*cells):
    ...     return nodes.row("", *[nodes.entry("", nodes.paragraph(text=text)) for text in cells])
    >>> table = nodes.table("", nodes.tgroup("", nodes.colspec(), nodes.colspec(), nodes.colspec(), nodes.tbody(
    ...     "", row("x", "a long meaning " * 4, "mask"), row("yy", "short", "padding_mask"))))
    >>> column_widths(table)
    [6, 32, 12]
    >>> table[0][-1][-1][-1][0] = nodes.paragraph("", "", nodes.literal(text="padding_mask"))
    >>> column_widths(table)
    [6, 32, 17]
    """
    count = sum(1 for _ in table.findall(nodes.colspec))
    lengths, words = [[] for _ in range(count)], [0] * count
    for row in table.findall(nodes.row):
        for index, entry in enumerate(row.children[:count]):
            text = entry.astext()
            lengths[index].append(len(text))
            code = " ".join(literal.astext() for literal in entry.findall(nodes.literal))
            words[index] = max([words[index]] + [len(word) for word in text.split()]
                               + [round(1.4 * len(word)) for word in code.split()])  # monospace letters are wider
    return [max(least, word, round(sum(column) / len(column)) if column else 0)
            for column, word in zip(lengths, words)]


class PrintableOutputs(SphinxPostTransform):
    """Unfold hidden cells; rewrite the mime bundles of panels and ``show_source`` before myst-nb picks one type."""

    default_priority = 3  # myst-nb's SelectMimeType runs at 4
    formats = ("latex",)

    def run(self, **kwargs):
        for cell in self.document.findall(nodes.container):
            if "tag_hide-cell" in cell["classes"]:  # sphinx-jupyterbook-latex's transform (priority 400) drops these
                cell["classes"].remove("tag_hide-cell")
        for table in self.document.findall(nodes.table):
            tgroup = next(table.findall(nodes.tgroup), None)
            if tgroup is None or "colwidths-given" in table["classes"]:
                continue
            if sum(1 for _ in tgroup.findall(nodes.row)) > 30:  # Sphinx's test for a longtable
                for colspec, width in zip(tgroup.findall(nodes.colspec), column_widths(table)):
                    colspec["colwidth"] = width
                table["classes"].append("colwidths-given")
        folder = Path(self.app.outdir).parent / "jupyter_execute" / "pdf-panel-frames"
        for bundle in _bundles(self.document):
            latex = _child(bundle, "text/latex")
            if latex is not None and _child(bundle, "text/plain") is not None:
                bundle.remove(latex)
            markup = _child(bundle, "text/html")
            if markup is None or PANEL not in markup.astext():
                continue
            figures = []
            for data, alt in panel_frames(markup.astext()):
                path = folder / f"{hashlib.sha256(data).hexdigest()[:20]}.png"
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                uri = Path(path).relative_to(Path(self.app.srcdir)).as_posix()
                self.env.images.add_file(self.config.root_doc, uri)
                figures.append(nodes.image(uri=uri, candidates={"*": uri}, alt=alt))
            bundle.remove(markup)
            text = _child(bundle, "text/plain")
            after = list(text.children) if text is not None else []
            bundle.replace_self(figures + after)


def setup(app):
    app.add_post_transform(PrintableOutputs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
