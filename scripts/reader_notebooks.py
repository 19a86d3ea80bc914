"""Write the reader notebooks: the book's chapters as Jupyter and Colab show them, with no MyST left.

The chapters under ``book/`` are the source; the website is built from them. Jupyter and Colab
render plain Markdown, not MyST, so a learner who opened those files would read role syntax
where the website shows numbers. This script writes ``reader/book/NN_*.ipynb``, one per
chapter, with the same cells and outputs and every MyST construct replaced by what the
website shows:

- ``{glue:text}`name:fmt``` and ``{glue}`name``` -> the glued value, formatted as myst-nb does;
- ``{eq}`label``` -> the equation's number, and a labelled display equation gets ``\\tag{n}``;
- ``{cite:t}`key``` / ``{cite:p}`key``` -> "Author et al. (year)" / "(Author et al., year)",
  linked to a list of the chapter's references added at its end;
- ``{doc}`path``` -> a link to that chapter's reader notebook (relative, so that it opens in
  Jupyter and in Colab) and to the same chapter in Colab;
- dropdowns (``:::{dropdown}``, ``:class: dropdown``) -> ``<details>``; other admonitions ->
  a quoted block with their title; targets ``(label)=`` removed;

and a short note before each live panel cell. Equation numbers are those of the built site
(``_build/html``) when it exists, else counted as Sphinx numbers them with this configuration:
per chapter, (3.1), (3.2), ..., the chapters numbered in the order of ``_toc.yml``.

The launch buttons (``_config.yml``: ``repository.path_to_book: reader``) open these files, and
the website's download button serves them (``book/_ext/reader_downloads.py``).

Usage: python scripts/reader_notebooks.py          (re)write reader/book/
       python scripts/reader_notebooks.py --check  exit 1 if reader/book/ is not what the book gives
"""

import ast
import codecs
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
READER = ROOT / "reader" / "book"
SITE = ROOT / "_build" / "html"

ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
LABELLED_EQUATION = re.compile(r"\$\$(?P<body>.+?)\$\$[ \t]*\((?P<label>[\w:-]+)\)", re.DOTALL)
TARGET = re.compile(r"^\s*\([\w:-]+\)=\s*$\n?", re.MULTILINE)
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*)$")
ADMONITION_TITLES = {"note": "Note", "warning": "Warning", "tip": "Tip", "important": "Important", "hint": "Hint",
                     "seealso": "See also", "caution": "Caution", "attention": "Attention", "danger": "Danger",
                     "error": "Error"}
RUN_BOX = re.compile(r"^\*\*Run this chapter:\*\*.*?(?=\n\s*\n|\Z)", re.MULTILINE | re.DOTALL)
READER_BOX = ("**Run this chapter:** this notebook is the website's chapter for Jupyter and Colab, generated from "
              "`book/{name}`. Run its cells from the top (JupyterLab: *Run → Run All Cells*): the first one "
              "installs whatever is missing, and the sliders become live.")
PANEL_NOTE = ("*This panel is live in Jupyter and Colab: run the cells above, then this one, and move the sliders "
              "with the mouse or the arrow keys; any value redraws. Until the cell runs, the panel below is the "
              "website's precomputed one.*")


def chapters():
    """The chapter notebooks, in the order of _toc.yml."""
    toc = (ROOT / "_toc.yml").read_text()
    entries = re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)", toc, flags=re.MULTILINE)
    return [ROOT / f"{entry}.ipynb" for entry in entries if (ROOT / f"{entry}.ipynb").exists()]


def repository():
    """(owner/name, branch) from _config.yml's repository section."""
    config = (ROOT / "_config.yml").read_text()
    url = re.search(r"^repository:\s*\n\s+url:\s*https://github.com/(\S+)", config, flags=re.MULTILINE).group(1)
    branch = re.search(r"^repository:(?:\n[ \t]+.*)*?\n[ \t]+branch:\s*(\S+)", config, flags=re.MULTILINE)
    return url.strip("/"), branch.group(1) if branch else "main"


def colab_url(path):
    """The Colab address of a reader notebook (a path relative to the repository root)."""
    repo, branch = repository()
    return f"https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"


# ---------------------------------------------------------------- glue

def glued_values(nb):
    """name -> the text/plain a chapter glued (what myst-nb's roles read)."""
    values = {}
    for cell in nb["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                data = output["data"]
                text = data.get("application/papermill.record/text/plain", data.get("text/plain"))
                values[name] = "".join(text) if isinstance(text, list) else text
    return values


def format_glued(text, fmt):
    """The glued text/plain formatted as myst-nb's ``glue:text`` role does (myst_nb.core.variables)."""
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if fmt == "":
        return str(value)
    kind = fmt[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, fmt)


# ---------------------------------------------------------------- equations

def label_id(label):
    """The HTML id Sphinx gives a labelled equation."""
    return "equation-" + re.sub(r"[^\w-]+", "-", label.lower()).replace("_", "-").strip("-")


def equation_numbers(paths):
    """label -> number as the website shows it (from _build/html if built, else counted per chapter).

    ``paths`` are the numbered chapters in the order of ``_toc.yml`` (``chapters()``): without a built
    site, the k-th labelled equation of the c-th chapter is numbered c.k, as ``numfig_secnum_depth: 1``
    numbers it.
    """
    numbers = {}
    for chapter, path in enumerate(paths, start=1):
        count = 0
        nb = json.loads(path.read_text())
        page = SITE / "book" / (path.stem + ".html")
        shown = {}
        if page.exists():
            for ident, number in re.findall(r'id="(equation-[\w-]+)">\s*<span class="eqno">\(([^)]+)\)',
                                            page.read_text()):
                shown[ident] = number
        for cell in nb["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for match in LABELLED_EQUATION.finditer("".join(cell["source"])):
                count += 1
                label = match["label"]
                numbers[label] = shown.get(label_id(label), f"{chapter}.{count}") if page.exists() else f"{chapter}.{count}"
    return numbers


# ---------------------------------------------------------------- citations

def bibliography():
    """key -> (short author text, year, full reference in Markdown), from references.bib."""
    import latexcodec  # noqa: F401  (registers the "ulatex" codec)
    from pybtex.database import parse_file

    def plain(text):
        return codecs.decode(text, "ulatex").replace("{", "").replace("}", "")

    entries = {}
    for key, entry in parse_file(str(ROOT / "references.bib")).entries.items():
        people = entry.persons.get("author", [])
        last = [plain(" ".join(p.prelast_names + p.last_names)) for p in people]
        short = last[0] if len(last) == 1 else " and ".join(last) if len(last) == 2 else f"{last[0]} et al."
        names = ", ".join(plain(" ".join(p.first_names + p.middle_names + p.prelast_names + p.last_names))
                          for p in people)
        fields = entry.fields
        year = fields.get("year", "n.d.")
        venue = fields.get("booktitle") or fields.get("journal") or fields.get("publisher") or fields.get("howpublished", "")
        link = ""
        if fields.get("doi"):
            link = f" <https://doi.org/{fields['doi']}>"
        elif fields.get("eprint"):
            link = f" <https://arxiv.org/abs/{fields['eprint']}>"
        elif fields.get("url"):
            link = f" <{fields['url']}>"
        full = f"{names} ({year}). {plain(fields.get('title', key))}." + (f" *{plain(venue)}*." if venue else "") + link
        entries[key] = (short, year, full)
    return entries


def anchor(key):
    return "ref-" + re.sub(r"[^\w-]", "-", key)


# ---------------------------------------------------------------- Markdown

class Chapter:
    """What the conversion of one chapter needs: its glued values, the book's numbers and references."""

    def __init__(self, path, glue, equations, references, titles):
        self.path, self.glue, self.equations, self.references, self.titles = path, glue, equations, references, titles
        self.cited = []

    def role(self, match):
        name, content = match.group(1), match.group(2)
        if name in ("glue:text", "glue"):
            key, _, fmt = content.partition(":") if name == "glue:text" else (content, "", "")
            if key not in self.glue:
                raise ValueError(f"{self.path.name}: {{{name}}}`{content}` names nothing the chapter glues")
            return format_glued(self.glue[key], fmt)
        if name == "eq":
            label = explicit(content)[1]
            if label not in self.equations:
                raise ValueError(f"{self.path.name}: {{eq}}`{content}`: no labelled equation {label!r}")
            return f"({self.equations[label]})"
        if name.startswith("cite"):
            keys = [k.strip() for k in content.split(",")]
            parts = []
            for key in keys:
                if key not in self.references:
                    raise ValueError(f"{self.path.name}: cites {key!r}, which references.bib does not hold")
                if key not in self.cited:
                    self.cited.append(key)
                short, year, _ = self.references[key]
                parts.append((short, year, key))
            if name in ("cite:t", "cite:ts"):
                return "; ".join(f"[{s} ({y})](#{anchor(k)})" for s, y, k in parts)
            return "(" + "; ".join(f"[{s}, {y}](#{anchor(k)})" for s, y, k in parts) + ")"
        if name == "doc":
            text, target = explicit(content)
            stem = Path(target).name
            title = text or self.titles.get(stem, stem)
            if stem in self.titles:  # a chapter: its reader notebook, here and in Colab
                return f"[{title}]({stem}.ipynb) ([in Colab]({colab_url(f'reader/book/{stem}.ipynb')}))"
            repo, branch = repository()  # a page of the book (notation, references): its source on GitHub
            return f"[{text or stem.replace('_', ' ')}](https://github.com/{repo}/blob/{branch}/book/{stem}.md)"
        if name == "math":
            return f"${content}$"
        return explicit(content)[0] or explicit(content)[1]  # ref, numref, term, ...: their text

    def markdown(self, text):
        text = structure(text, self)
        return ROLE.sub(self.role, text)

    def equation(self, match):
        body = re.sub(r"\\label\{[^}]*\}", "", match["body"])
        return f"$${body.rstrip()} \\tag{{{self.equations[match['label']]}}}$$"


def structure(text, chapter):
    """Everything but the roles: the opening box, targets, labelled equations, fenced directives."""
    text = RUN_BOX.sub(lambda m: READER_BOX.format(name=chapter.path.name), text, count=1)
    text = TARGET.sub("", text)
    text = LABELLED_EQUATION.sub(chapter.equation, text)
    return directives(text, chapter)


def explicit(content):
    """(text, target) of a role's content written 'text <target>' or just 'target'."""
    found = re.fullmatch(r"(.*?)\s*<([^>]+)>", content.strip(), flags=re.DOTALL)
    return (found.group(1), found.group(2)) if found else ("", content.strip())


def directives(text, chapter):
    """Replace every fenced directive (``` or :::, nested ones too) by plain Markdown or HTML."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        opened = FENCE_OPEN.match(lines[i])
        if not opened:
            out.append(lines[i])
            i += 1
            continue
        fence, indent = opened["fence"], opened["indent"]
        close = re.compile(rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = lines[i + 1:j]
        options = {}
        while body and re.match(r"^\s*:[\w-]+:", body[0]):
            key, _, value = body.pop(0).strip()[1:].partition(":")
            options[key] = value.strip()
        inner = directives("\n".join(body), chapter).strip("\n")
        out.extend(render_directive(opened["name"], opened["arg"].strip(), options, inner).split("\n"))
        i = j + 1
    return "\n".join(out)


def render_directive(name, title, options, body):
    dropdown = name == "dropdown" or "dropdown" in options.get("class", "").split()
    if name in ADMONITION_TITLES:
        title = title or ADMONITION_TITLES[name]
    if dropdown:
        return f"<details>\n<summary>{title or 'Details'}</summary>\n\n{body}\n\n</details>"
    if name in ADMONITION_TITLES or name == "admonition":
        quoted = "\n".join("> " + line if line else ">" for line in body.split("\n"))
        return f"> **{title}**\n>\n{quoted}"
    if name in ("math",):
        return f"$$\n{body}\n$$"
    return body  # figure, margin, sidebar, ...: their content


def chapter_title(nb):
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            found = re.search(r"^#\s+(.+)$", "".join(cell["source"]), flags=re.MULTILINE)
            if found:
                return found.group(1).strip()
    return ""


# ---------------------------------------------------------------- notebooks

def is_panel_cell(cell):
    return cell["cell_type"] == "code" and re.search(r"^\s*M\.panels\.\w+_panel\(", "".join(cell["source"]),
                                                     flags=re.MULTILINE)


def split_source(text):
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def reader_notebooks():
    """{reader path: notebook dict} for every chapter."""
    paths = chapters()
    books = {path: json.loads(path.read_text()) for path in paths}
    equations = equation_numbers(paths)
    references = bibliography()
    titles = {path.stem: chapter_title(nb) for path, nb in books.items()}
    result = {}
    for path, nb in books.items():
        chapter = Chapter(path, glued_values(nb), equations, references, titles)
        cells = []
        for cell in nb["cells"]:
            cell = json.loads(json.dumps(cell))
            if cell["cell_type"] == "markdown":
                cell["source"] = split_source(chapter.markdown("".join(cell["source"])))
            elif set(cell["metadata"].get("tags", [])) & {"remove-input", "remove-cell"}:
                # the install cell and the cells that only record values for the website: collapsed in Jupyter
                cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True
            elif is_panel_cell(cell):
                cells.append({"cell_type": "markdown", "id": f"{cell.get('id', 'panel')}-note", "metadata": {},
                              "source": [PANEL_NOTE]})
            cells.append(cell)
        if chapter.cited:
            listing = "\n\n".join(f'<a id="{anchor(k)}"></a>{references[k][2]}' for k in chapter.cited)
            cells.append({"cell_type": "markdown", "id": "reader-references", "metadata": {},
                          "source": split_source(f"## References\n\n{listing}\n")})
        reader = dict(nb, cells=cells)
        reader["metadata"] = dict(nb["metadata"], mha_lessons={
            "generated_from": f"book/{path.name}",
            "generated_by": "scripts/reader_notebooks.py: edit the source, not this file"})
        result[READER / path.name] = reader
    return result


def dumps(nb):
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv):
    notebooks = reader_notebooks()
    stale = [p for p, nb in notebooks.items() if not p.exists() or p.read_text() != dumps(nb)]
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is not what `python scripts/reader_notebooks.py` writes")
        return 1 if stale else 0
    READER.mkdir(parents=True, exist_ok=True)
    for path, nb in notebooks.items():
        path.write_text(dumps(nb))
    for old in set(READER.glob("*.ipynb")) - set(notebooks):
        old.unlink()
    print(f"wrote {len(notebooks)} reader notebooks to {READER.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
