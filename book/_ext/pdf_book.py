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
- A "Check yourself" block (mha_lessons/course/quiz.py) is an HTML output whose script checks the answers.
  The PDF prints its questions, each choice question with its options (a), (b), ..., and gathers the answers,
  why each is right and what each wrong answer reveals, with links to the sections, in a chapter "Answers to
  the self-checks" at the end of the book (before the references).
"""

import base64
import hashlib
import html
import json
import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

PANEL = 'class="mha-panel"'
QUIZ = 'class="mha-quiz"'
QUIZ_DATA = re.compile(r'<script type="application/json" class="mha-quiz-data">(.*?)</script>', re.DOTALL)
INLINE = re.compile(r"\$([^$]+)\$|`([^`]+)`|\*([^*\s][^*]*)\*")  # as mha_lessons/course/quiz.py writes text
ANSWERS_TITLE = "Answers to the self-checks"
ANSWERS_DOC = "book/self-check-answers"  # the name its labels take in the LaTeX file; no such source file
ANSWERS_ID = "answers-to-the-self-checks"
FRAME = re.compile(r'<img class="mha-panel-frame"[^>]*?>')
ATTRIBUTE = re.compile(r'\b(src|alt)="([^"]*)"')


def _bundles(document):
    return [
        node
        for node in document.findall(nodes.container)
        if node.get("nb_element") == "mime_bundle"
    ]


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


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


def quiz_data(markup):
    """The questions of a "Check yourself" block's HTML, as its ``print`` data (text, options, answer, why, ...).

    >>> quiz_data('<script type="application/json" class="mha-quiz-data">{"print": [{"text": "a <\\\\/b>"}]}</script>')
    [{'text': 'a </b>'}]
    """
    match = QUIZ_DATA.search(markup)
    return json.loads(match.group(1))["print"] if match else []  # JSON reads the page's "<\\/" as "</"


def inline(text):
    """Question text as docutils nodes: ``$math$`` typeset, ```code``` and ``*emphasis*``.

    >>> [type(n).__name__ for n in inline("width $d_k$ of `q`, *sat*")]
    ['Text', 'math', 'Text', 'literal', 'Text', 'emphasis']
    """
    out, last = [], 0
    for match in INLINE.finditer(text):
        if match.start() > last:
            out.append(nodes.Text(text[last:match.start()]))
        tex, code, emphasis = match.groups()
        if tex is not None:
            out.append(nodes.math(tex, tex))
        elif code is not None:
            out.append(nodes.literal(code, code))
        else:
            out.append(nodes.emphasis(emphasis, emphasis))
        last = match.end()
    if last < len(text):
        out.append(nodes.Text(text[last:]))
    return out


def see(heading, anchor, docname):
    """'See “heading”.' with a link to the section (Sphinx's LaTeX writer turns '%doc#id' into \\hyperref)."""
    link = nodes.reference("", "", *inline(heading.lstrip("#").strip()), refuri=f"%{docname}#{anchor}",
                           internal=True)
    return [nodes.Text(" See “"), link, nodes.Text("”.")]


def quiz_questions(questions):
    """The questions as the PDF prints them: a numbered paragraph each, then its options (a), (b), ..."""
    printed = []
    for number, q in enumerate(questions, 1):
        printed.append(nodes.paragraph("", "", nodes.strong(text=f"Question {number}. "), *inline(q["text"])))
        if q["options"]:
            options = nodes.enumerated_list(enumtype="loweralpha", prefix="(", suffix=")")
            options += [nodes.list_item("", nodes.paragraph("", "", *inline(label))) for label in q["options"]]
            printed.append(options)
        else:
            how = "the exact whole number" if q["tolerance"].startswith("the exact") else f"a number, {q['tolerance']}"
            printed.append(nodes.paragraph("", "", nodes.emphasis(text=f"Answer with {how}.")))
    return printed


def _anchor(heading):
    """The anchor Sphinx gives a heading (the one ``mha_lessons.course.quiz.section_anchor`` computes)."""
    return nodes.make_id(re.sub(r"\$([^$]*)\$", r"\1", heading.lstrip("#").strip()))


def quiz_answers(chapter, docname, questions):
    """A chapter's answers: its title, then per question the key, why it is right and every wrong answer's reason."""
    found = [nodes.rubric(text=chapter)]
    answers = nodes.enumerated_list(enumtype="arabic", prefix="", suffix=".")
    for q in questions:
        letter = {label: "abcdef"[i] for i, label in enumerate(q["options"])}
        shown = f"({letter[q['answer']]}) " if q["answer"] in letter else ""
        item = nodes.list_item("", nodes.paragraph("", "", nodes.strong("", "", nodes.Text(shown), *inline(q["answer"])),
                                                   nodes.Text(" — "), *inline(q["why"]),
                                                   *see(q["see"], q["anchor"], docname)))
        wrong = nodes.bullet_list()
        for w in q["wrong"]:
            shown = f"({letter[w['label']]}) " if w["label"] in letter else ""
            wrong += nodes.list_item("", nodes.paragraph("", "", nodes.Text(shown), *inline(w["label"]),
                                                         nodes.Text(" — "), *inline(w["feedback"]),
                                                         *see(w["see"], _anchor(w["see"]), docname)))
        if q["wrong"]:
            item += wrong
        answers += item
    return found + [answers]


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
        answers = []
        for bundle in _bundles(self.document):
            latex = _child(bundle, "text/latex")
            if latex is not None and _child(bundle, "text/plain") is not None:
                bundle.remove(latex)
            markup = _child(bundle, "text/html")
            if markup is not None and QUIZ in markup.astext():
                questions = quiz_data(markup.astext())
                docname, chapter = self.chapter_of(bundle)
                answers += quiz_answers(chapter, docname, questions)
                where = nodes.reference("", ANSWERS_TITLE, refuri=f"%{ANSWERS_DOC}#{ANSWERS_ID}", internal=True)
                note = nodes.paragraph("", "", nodes.emphasis("", "The answers, with what each wrong answer reveals, "
                                                              "are at the end of the book: ", where, "."))
                bundle.replace_self(quiz_questions(questions) + [note])
                continue
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
        if answers:
            self.add_answers(answers)

    def chapter_of(self, node):
        """(docname, title) of the chapter a node stands in. In the book's one tree (Sphinx's
        ``inline_all_toctrees``) each file's sections carry its ``docname``; the topmost one is the chapter."""
        chapter = None
        for parent in _ancestors(node):
            if isinstance(parent, nodes.section):
                chapter = parent
        if chapter is None:
            return self.env.docname, self.env.docname
        title = next(chapter.findall(nodes.title), None)
        return chapter.get("docname", self.env.docname), title.astext() if title is not None else chapter["docname"]

    def add_answers(self, answers):
        """The chapter of answers, at the level of the book's chapters, before the references (else at the end)."""
        section = nodes.section("", nodes.title(text=ANSWERS_TITLE), ids=[ANSWERS_ID],
                                names=[ANSWERS_TITLE.lower()])
        section += nodes.paragraph(text="For each chapter's “Check yourself” questions: the answer and why it is "
                                        "right, then what each wrong answer reveals, with the section that settles it.")
        section += answers
        files = [n for n in self.document.findall(addnodes.start_of_file)]
        last = next((f for f in files if f["docname"].endswith("references")), None)
        if last is not None:
            last.parent.insert(last.parent.index(last), addnodes.start_of_file("", section, docname=ANSWERS_DOC))
        else:
            self.document += section


def setup(app):
    app.add_post_transform(PrintableOutputs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
