"""Check yourself: a chapter's self-check questions, answered on the page with no kernel (issue 35).

A chapter closes its main line with one "Check yourself" block of three to six questions. The chapter's
notebook cell computes every key and every typical wrong value with the package's functions, the
ones the chapter used, and passes them in: this module never types a key. It refuses a question that
cannot teach (``ValueError`` naming what is wrong): a wrong option equal to the key, a tolerance that
would accept a listed mistake, two options alike, a wrong answer without feedback or section.

    Numeric(text, key, why=..., see=..., mistakes=[Mistake(value, feedback, see=...)],
            absolute=..., relative=...)          a number, right within the tolerance shown to the reader
    Choice(text, key, why=..., see=..., wrong=[Mistake(value, feedback, see=..., label=...)],
           label=...)                            one right option among several
    Shape(text, key, why=..., see=..., wrong=[Mistake(shape, feedback, see=...)])
                                                 which of these shapes (tuples of ints)
    check_yourself(question, ...) -> Block       what the cell displays

Each wrong answer's feedback names the misconception and links to the section that settles it;
``see`` is that section's heading as the chapter writes it (``"4. Counting parameters"``), and the
link goes to the anchor the website gives it (``section_anchor``). A right answer says in one line
why it is right. Typical wrong numbers of a ``Numeric`` question are ``Mistake``s too, recognised
with the question's own tolerance. Text may hold ``$inline math$`` (a small TeX subset:
``math_html``), ``*emphasis*`` and ```code```.

The block displays as ONE HTML output: native radio buttons, a text field and buttons (keyboard,
visible focus), one fieldset per question, feedback in a live region (``role="status"``) that screen
readers announce, and a few lines of JavaScript (``QUIZ_JS``) that compare the reader's answer with
the stored key and wrong values and show the stored feedback; it loads nothing. Where the browser
allows it, the answers are remembered in its local storage and the block counts the right ones.

Where it works: on the website, offline. In Notebook 7, JupyterLab, Colab and VS Code once the cell
has run: a front end runs the script of an output that its kernel produced. JupyterLab and Notebook 7
do not run the scripts of outputs stored in a notebook they do not trust (a downloaded one): there
the block shows its questions and says to run the cell. In the PDF, ``book/_ext/pdf_book.py`` prints
the questions and gathers the answers and explanations at the end of the book, from the ``print``
part of the block's data.
"""

import hashlib
import json

from .quiz_assets import QUIZ_CSS, QUIZ_JS
# What a chapter and the tests use, from the rooms that hold it (the question model, how text shows):
from .quiz_questions import (  # noqa: F401
    MAX_QUESTIONS, MIN_QUESTIONS, SLACK, WHY_LENGTH, Choice, Mistake, Numeric, Question, Shape)
from .quiz_text import (  # noqa: F401
    INLINE, KEY_DIGITS, math_html, math_plain, section_anchor, shown, text_html, text_plain)


# ---------------------------------------------------------------- the block

class Block:
    """A chapter's "Check yourself" block: displays as one HTML output (plain text where HTML cannot show)."""

    def __init__(self, questions):
        self.questions = list(questions)
        if not MIN_QUESTIONS <= len(self.questions) <= MAX_QUESTIONS:
            raise ValueError(f"a Check yourself block has {MIN_QUESTIONS} to {MAX_QUESTIONS} questions, "
                             f"got {len(self.questions)}")
        for q in self.questions:
            if not isinstance(q, Question):
                raise TypeError(f"a block holds Numeric, Choice and Shape questions, got {type(q).__name__}")
        texts = [q.text for q in self.questions]
        if len(set(texts)) != len(texts):
            raise ValueError(f"two questions have the same text: {[t for t in texts if texts.count(t) > 1][0]!r}")

    def data(self):
        """What the page's script reads (``questions``) and what the PDF prints (``print``)."""
        return {"questions": [dict(q.browser(), id=q.ident) for q in self.questions],
                "print": [dict(q.printed(), text=q.text, answer=q.key_label(), why=q.why, see=q.see,
                               anchor=section_anchor(q.see)) for q in self.questions]}

    def to_html(self):
        payload = json.dumps(self.data(), ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
        uid = "mha-quiz-" + hashlib.sha256(payload.encode()).hexdigest()[:10]
        count = len(self.questions)
        parts = [f'<div class="mha-quiz" id="{uid}" role="group" aria-label="Check yourself: {count} questions" '
                 f'data-lm-suppress-shortcuts="true"><style>{QUIZ_CSS}</style>',
                 f'<p class="mha-quiz-intro">{count} questions on this chapter. Your answers are checked in this page '
                 f'and stay in your browser.</p>',
                 '<p class="mha-quiz-run"><strong>Run this cell</strong> to check your answers here: Jupyter runs '
                 'the script of this block only once the cell has run.</p>']
        for i, q in enumerate(self.questions):
            qid = f"{uid}-q{i}"
            parts.append(f'<fieldset class="mha-quiz-question" id="{qid}" data-kind="{q.kind}" '
                         f'data-lm-suppress-shortcuts="true"><legend><strong>Question {i + 1}.</strong> '
                         f'{text_html(q.text)}</legend>'
                         f'{q.fields_html(qid)}<div class="mha-quiz-buttons">'
                         f'<button type="button" class="mha-quiz-check" data-lm-suppress-shortcuts="true">'
                         f'Check</button> <button type="button" class="mha-quiz-reveal" '
                         f'data-lm-suppress-shortcuts="true">Show the answer</button></div>'
                         f'<div class="mha-quiz-feedback" role="status" aria-live="polite"></div></fieldset>')
        parts.append(f'<div class="mha-quiz-footer"><p class="mha-quiz-score" aria-live="polite">0 of {count} '
                     f'answered right.</p><button type="button" class="mha-quiz-reset" '
                     f'data-lm-suppress-shortcuts="true">Forget my answers</button></div>')
        parts.append(f'<script type="application/json" class="mha-quiz-data">{payload}</script>')
        parts.append("<script>" + QUIZ_JS.replace("QUIZ_ID", uid) + "</script></div>")
        return "".join(parts)

    def to_text(self):
        """The questions as plain text, without their answers (a terminal, nbval's record of the output)."""
        lines = [f"Check yourself: {len(self.questions)} questions (open the notebook in Jupyter or the website "
                 f"to check your answers)."]
        for i, q in enumerate(self.questions):
            lines.append(f"{i + 1}. {text_plain(q.text)}")
            if isinstance(q, Choice):
                lines += [f"   ({'abcdef'[j]}) {text_plain(label)}" for j, (label, _) in enumerate(q.options())]
            else:
                exact = not (q.absolute or q.relative)
                lines.append("   The exact whole number." if exact else f"   A number, {q.tolerance_text()}.")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.to_html(), "text/plain": self.to_text()}

    def __repr__(self):
        return self.to_text()


def check_yourself(*questions):
    """The chapter's "Check yourself" block, from its questions (3 to 6); display it as a cell's last value.

    >>> q = Numeric("How many keys?", 5, why="One per token.", see="1. The example")
    >>> block = check_yourself(q, Numeric("How many queries?", 5, why="One per token.", see="1. The example"),
    ...                        Shape("Shape of S?", (5, 5), why="n by m.", see="2. Step 1: scores",
    ...                              wrong=[Mistake((5, 2), "That is Q.", see="2. Step 1: scores"),
    ...                                     Mistake((2, 5), "That is K transposed.", see="2. Step 1: scores")]))
    >>> 'role="status"' in block.to_html(), block.questions[2].judge("(5, 2)")
    (True, ('wrong', 'That is Q.'))
    """
    return Block(questions)
