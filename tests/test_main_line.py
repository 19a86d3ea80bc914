"""Every chapter has a main line a learner can follow: short enough, and never relying on what comes later.

- **Length.** A chapter's main line is the words of its Markdown cells outside collapsed blocks: a MyST dropdown
  (``:::{dropdown} Title`` ... ``:::``, or a backtick fence ``{dropdown}``) and an admonition with
  ``:class: dropdown`` are removed, and so are display math (``$$...$$``), fenced code and inline code (the text of
  other directives, such as a ``{warning}``, counts). The exercises and the references (from a ``## Exercises``,
  ``## References`` or ``## Further reading`` heading to the next ``## `` heading) are not the main line either. The
  rest is split at whitespace and counted; it must stay at or below ``MAX_WORDS``. Code cells do not count.
  The "Check yourself" block (mha_lessons/course/quiz.py) is not part of the main line either: it tests the main
  line rather than adding to it, a reader may skip it, and its questions are the output of a code cell. Its heading
  cell (``## Check yourself`` and a sentence) is left out of the count, and may hold at most ``SELF_CHECK_WORDS``
  words and no other heading, so that no prose can hide there.
- **No forward references**, in the whole Markdown of a chapter (collapsed blocks included), of three kinds a
  test can see:

  1. "section N" (or "sections N and M", "§N") where N is a later section of the same chapter than the one the
     sentence stands in. Sections are the numbered headings ``## N. Title``;
  2. a ``{ref}``, ``{numref}`` or ``{eq}`` role whose target is defined later: further down the same chapter or in
     a later chapter (targets are ``(label)=`` lines and the ``$$ (label)`` of display equations);
  3. phrases that promise the reader something later: "later in this chapter", "as we will see", "further down",
     "see below" (the cell just below a sentence is not a forward reference: "the cell below" is allowed).

  Naming a later *chapter* as a pointer ("chapter 7 computes the softmax block by block") is allowed: the
  sentence must not need it, which a test cannot check.

The last tests feed both checks a chapter written the wrong way, so that a check that can no longer fail is caught.
"""

import json
import re
from pathlib import Path

import pytest

# make portability does not re-run this file (see scripts/portability.py)
pytestmark = pytest.mark.machine_independent("counts the words of the chapters' Markdown")

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
ALL_CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
CHAPTERS = ALL_CHAPTERS
MAX_WORDS = 2500
SELF_CHECK = re.compile(r"\A## Check yourself[ \t]*$", re.M)
SELF_CHECK_WORDS = 60

DROPDOWN = re.compile(
    r"^(:{3,})\{dropdown\}.*?^\1[ \t]*$"                      # :::{dropdown} Title ... :::
    r"|^(`{3,}|:{3,})\{dropdown\}.*?^\2[ \t]*$"               # ```{dropdown} Title ... ```
    r"|^(`{3,}|:{3,})\{[\w-]+\}[^\n]*\n(?:[ \t]*:[\w-]+:.*\n)*?[ \t]*:class:[^\n]*\bdropdown\b.*?^\3[ \t]*$",
    re.S | re.M)
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$(?:\s*\([\w-]+\))?", re.S)
FENCED = re.compile(r"^(`{3,})(?!\s*\{).*?^\1[ \t]*$", re.S | re.M)   # code, not a ```{directive}
CODE = re.compile(FENCED.pattern + r"|`[^`\n]*`", re.S | re.M)
SECTION = re.compile(r"^##\s+(\d+)\.\s", re.M)
SECTION_REF = re.compile(r"(?:\bsections?|§)\s*((?:\d+(?:\s*(?:,|and|or|to|–|-)\s*)?)+)", re.I)
LATER_PHRASES = re.compile(
    r"later in (?:this|the) chapter|as we (?:will|shall) see|we (?:will|shall) see (?:later|below)|further down"
    r"|\bsee below\b|(?:is|are) (?:explained|shown|derived) (?:later|below)", re.I)
ROLE = re.compile(r"\{(ref|numref|eq)\}`(?:[^`<]*<)?([\w-]+)>?`")
TARGET = re.compile(r"^\(([\w-]+)\)=\s*$|\$\$\s*\(([\w-]+)\)", re.M)


def markdown_cells(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def main_line(markdown):
    """The text of the main line: collapsed blocks, display math and code removed."""
    text = DROPDOWN.sub(" ", markdown)
    text = DISPLAY_MATH.sub(" ", text)
    return CODE.sub(" ", text)


ASIDE_HEADING = re.compile(r"^##\s+(?:Exercises|References|Further reading|Check yourself)\b", re.M | re.I)
NEXT_HEADING = re.compile(r"^##\s", re.M)


def main_line_cells(cells):
    """The cells with the exercises and references cut out (from their ``## `` heading to the next one)."""
    kept, aside = [], False
    for cell in cells:
        text = ""
        for part in re.split(r"(?=^##\s)", cell, flags=re.M):
            if NEXT_HEADING.match(part):
                aside = bool(ASIDE_HEADING.match(part))
            if not aside:
                text += part
        kept.append(text)
    return kept


def main_line_words(cells):
    return sum(len(main_line(cell).split()) for cell in main_line_cells(cells))


def targets(cells):
    """{label: index of the cell that defines it}."""
    return {a or b: i for i, cell in enumerate(cells) for a, b in TARGET.findall(cell)}


def forward_references(cells, later_targets=frozenset()):
    """The forward references of a chapter given as its Markdown cells; ``later_targets``: labels of later chapters."""
    found, section = [], 0
    defined = targets(cells)
    for i, cell in enumerate(cells):
        prose = CODE.sub(" ", cell)
        # a sentence stands in the section whose heading came last before it, in this cell or an earlier one
        for part in re.split(r"(?=^##\s+\d+\.\s)", prose, flags=re.M):
            heading = SECTION.match(part)
            if heading:
                section = int(heading.group(1))
            for ref in SECTION_REF.finditer(part):
                numbers = [int(x) for x in re.findall(r"\d+", ref.group(1))]
                if any(x > section for x in numbers):
                    found.append(f"section {ref.group(1).strip()} from section {section}: ...{ref.group()}...")
            found += [f"phrase: {m.group()}" for m in LATER_PHRASES.finditer(part)]
        for kind, label in ROLE.findall(FENCED.sub(" ", cell)):
            if defined.get(label, -1) > i or label in later_targets:
                found.append(f"{{{kind}}}`{label}` is defined later")
    return found


def later_labels(path):
    later = [p for p in ALL_CHAPTERS if p.name[:2] > path.name[:2]]
    return {label for p in later for label in targets(markdown_cells(p))}


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_the_main_line_is_short_enough(path):
    words = main_line_words(markdown_cells(path))
    assert words <= MAX_WORDS, (f"{path.name}: {words} words outside collapsed blocks, more than {MAX_WORDS}: "
                                f"move proofs, error theory, estimator statistics or library internals into a "
                                f":::{{dropdown}} block")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_no_sentence_refers_forward(path):
    found = forward_references(markdown_cells(path), later_labels(path))
    assert not found, f"{path.name}: forward references: {found}"


@pytest.mark.parametrize("path", ALL_CHAPTERS, ids=[p.name for p in ALL_CHAPTERS])
def test_the_check_yourself_heading_cell_holds_no_prose(path):
    for cell in markdown_cells(path):
        if SELF_CHECK.match(cell):
            words = len(cell.split())
            assert words <= SELF_CHECK_WORDS, f"{path.name}: the Check yourself cell has {words} words"
            assert len(re.findall(r"^#", cell, flags=re.M)) == 1, f"{path.name}: a heading in the Check yourself cell"


def test_the_chapters_are_found():
    assert [p.name[:2] for p in CHAPTERS][:5] == ["01", "02", "03", "04", "05"] and len(CHAPTERS) >= 11


def test_the_checks_fail_on_a_chapter_written_the_wrong_way():
    long = ["word " * 2000, ":::{dropdown} Proof\n" + "hidden " * 5000 + "\n:::\n" + "word " * 501]
    assert main_line_words(long) == 2501 > MAX_WORDS
    admonition = "```{note}\n:class: dropdown\n" + "hidden " * 100 + "\n```\nfour words stay here"
    assert main_line_words([admonition, "$$\na + b = c\n$$ (eq-x)\n`code here` two words"]) == 6
    exercises = ["## 2. Last\n\nthree words here", "## Exercises\n\n" + "task " * 900, "more tasks " * 50,
                 "## Summary\n\nfour words count too"]
    assert main_line_words(exercises) == 6 + 6                              # two cells of six words; no exercise
    bad = ["# 1. Title\n\nSection 3 proves it, as we will see.",
           "## 1. First\n\nSee {eq}`eq-later` and {ref}`sec-later`; later in this chapter, more.",
           "(sec-later)=\n## 2. Second\n\n$$\nx\n$$ (eq-later)\n\nSections 1 and 3 differ.",
           "## 3. Third\n\nSection 2 and {eq}`eq-later` are behind us; {doc}`07_efficient_attention` is a pointer."]
    found = forward_references(bad, later_targets={"eq-chapter-9"})
    assert sum("from section" in f for f in found) == 2                     # from the title cell and from section 2
    assert sum("phrase" in f for f in found) == 2
    assert sum("defined later" in f for f in found) == 2                    # only the two uses in section 1
    assert forward_references(["## 1. A\n\nSee {eq}`eq-chapter-9`."], later_targets={"eq-chapter-9"})
    assert not forward_references(bad[3:])
