"""Sphinx extension: how every page of the course prints (loaded through `sphinx.local_extensions`).

- Reference labels that match the citations in the text. The text cites author–year
  (``bibtex_reference_style: author_year``: "Dao et al. [2022]"); pybtex's default labels in the list of
  references are alphabetic ("[DFE+22]"). The style ``course_author_year`` (``bibtex_default_style`` in
  _config.yml) labels each entry "Dao et al., 2022" and sorts by author and year.
- Chapter numbers come from the table of contents (`numbered: 1` in _toc.yml), so that equations and
  figures are numbered per chapter, (3.1), (3.2), ...; a number written by hand at the start of a page's
  title ("3. Multi-head attention") is dropped so that it does not show twice.
"""

import re
from collections import Counter

from docutils import nodes
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle


def _last_names(person):
    return Text.from_latex(" ".join(person.last_names)).render_as("text").replace("{", "").replace("}", "")


def author_year(entry):
    """'Vaswani et al., 2017', 'Shazeer, 2019', 'Ainslie and Lee, 2023' (editors when there is no author)."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_names(p) for p in people]
    if not names:
        who = entry.fields.get("organization") or entry.fields.get("title", entry.key)
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:  # two papers of the same authors and year: 2022a, 2022b
                seen[label] += 1
                label = f"{label}{'abcdefghijklmnopqrstuvwxyz'[seen[label] - 1]}"
            yield label


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "course_author_year"
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", "course_author_year", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "course_author_year", AuthorYearStyle)

HAND_NUMBER = re.compile(r"^\d+\.\s+")


def drop_hand_numbers(app, doctree):
    """Drop '3. ' from the start of the page's title: the table of contents numbers the chapters."""
    for section in doctree.findall(nodes.section):
        title = section.next_node(nodes.title)
        if title is not None and title.children and isinstance(title[0], nodes.Text):
            text = str(title[0])
            if HAND_NUMBER.match(text):
                title[0] = nodes.Text(HAND_NUMBER.sub("", text, count=1))
        break  # the page's title only


def static_changed(app, env, added, changed, removed):
    """The intro, rebuilt when a file of book/_static is newer than its copy in the site: Sphinx copies the static
    files only when it writes a page, so an edit of course.css alone would otherwise never reach the site."""
    from pathlib import Path

    source, built = Path(app.srcdir) / "book" / "_static", Path(app.outdir) / "_static"
    for path in source.glob("*"):
        copy = built / path.name
        if path.is_file() and (not copy.exists() or copy.stat().st_mtime < path.stat().st_mtime):
            return [env.config.root_doc]
    return []


def setup(app):
    app.connect("doctree-read", drop_hand_numbers, priority=400)  # before Sphinx collects the titles (500)
    app.connect("env-get-outdated", static_changed)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
