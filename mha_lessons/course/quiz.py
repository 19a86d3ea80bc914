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
import html
import json
import math
import numbers
import re
import unicodedata
from dataclasses import dataclass

MIN_QUESTIONS, MAX_QUESTIONS = 3, 6
WHY_LENGTH = 240  # characters: "why it is right" is one line
SLACK = 1e-9  # relative: a tolerance's edge counts as inside, whatever the rounding of the reader's number
KEY_DIGITS = 6  # significant digits a float key keeps in the page (the same on every CPU and BLAS)


# ---------------------------------------------------------------- text: inline math, emphasis, code

SYMBOLS = {"times": "×", "cdot": "·", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠",
           "approx": "≈", "to": "→", "infty": "∞", "ell": "ℓ", "top": "⊤", "pm": "±", "dots": "…",
           "ldots": "…", "sum": "∑", "mid": "|", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ",
           "epsilon": "ε", "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ", "omega": "ω",
           "Pi": "Π", "Sigma": "Σ", ",": " ", ";": " ", " ": " ", "quad": " ", "{": "{", "}": "}", "%": "%"}
UPRIGHT = ("text", "mathrm", "operatorname")


def _parse_math(tex, i=0, stop=None):
    """Parse ``tex`` from ``i`` into a list of parts (kind, value) until ``stop`` (a closing brace) or the end."""
    parts = []
    while i < len(tex):
        if tex[i] == stop:
            return parts, i + 1
        if tex[i] in "_^":
            if i + 1 >= len(tex):
                raise ValueError(f"math ${tex}$: {tex[i]} with nothing after it")
            arg, end = _atom(tex, i + 1)
            parts.append(("sub" if tex[i] == "_" else "sup", arg))
            i = end
        else:
            atom, i = _atom(tex, i)
            parts += atom
    if stop is not None:
        raise ValueError(f"math ${tex}$: a brace is not closed")
    return parts, i


def _atom(tex, i):
    """One item at ``i``: a braced group, a command with its argument, a letter or a symbol."""
    c = tex[i]
    if c == "{":
        inner, i = _parse_math(tex, i + 1, "}")
        return [("group", inner)], i
    if c == "\\":
        name = re.match(r"[A-Za-z]+|.", tex[i + 1:])
        if name is None:
            raise ValueError(f"math ${tex}$ ends with a backslash")
        name, i = name.group(), i + 1 + len(name.group())
        if name in UPRIGHT:
            end = _closing(tex, i)
            return [("text", tex[i + 1:end])], end + 1
        if name == "sqrt":
            if i >= len(tex):
                raise ValueError(f"math ${tex}$: \\sqrt with nothing after it")
            arg, i = _atom(tex, i)
            return [("sqrt", arg)], i
        if name in SYMBOLS:
            return [("symbol", SYMBOLS[name])], i
        raise ValueError(f"math ${tex}$: \\{name} is not in the quiz's TeX subset "
                         f"(\\text, \\sqrt, _, ^ and {', '.join(sorted(k for k in SYMBOLS if k.isalpha()))})")
    return [("letter" if c.isalpha() else "symbol", c)], i + 1


def _closing(tex, i):
    if i >= len(tex) or tex[i] != "{":
        raise ValueError(f"math ${tex}$: expected {{ at position {i}")
    depth = 0
    for j in range(i, len(tex)):
        depth += {"{": 1, "}": -1}.get(tex[j], 0)
        if depth == 0:
            return j
    raise ValueError(f"math ${tex}$: a brace is not closed")


def _render(parts, as_html):
    out = []
    for kind, value in parts:
        if kind == "letter":
            out.append(f"<i>{value}</i>" if as_html else value)
        elif kind == "symbol":
            out.append(html.escape(value) if as_html else value)
        elif kind == "text":
            out.append(html.escape(value) if as_html else value)
        elif kind == "group":
            out.append(_render(value, as_html))
        elif kind == "sqrt":
            inner = _render(value, as_html)
            out.append(f"√{inner}" if len(value) <= 1 or as_html else f"√({inner})")
        else:  # sub, sup
            inner = _render(value, as_html)
            if as_html:
                out.append(f"<{kind}>{inner}</{kind}>")
            else:
                out.append(("_" if kind == "sub" else "^") + (inner if len(inner) == 1 or kind == "sub" else f"({inner})"))
    return "".join(out)


def math_html(tex):
    """Inline TeX (a small subset) as HTML: italic letters, sub- and superscripts, a few symbols.

    >>> math_html(r"d_\\text{model} = 512")
    '<i>d</i><sub>model</sub> = 512'
    >>> math_html(r"1/\\sqrt{d_k}")
    '1/√<i>d</i><sub><i>k</i></sub>'
    """
    return _render(_parse_math(tex)[0], True)


def math_plain(tex):
    """Inline TeX as plain text: ``d_\\text{model}`` -> ``d_model``, ``\\sqrt{d_k}`` -> ``√d_k``."""
    return _render(_parse_math(tex)[0], False)


INLINE = re.compile(r"\$([^$]+)\$|`([^`]+)`|\*([^*\s][^*]*)\*")


def text_html(text):
    """Question text as HTML: ``$math$``, ```code``` and ``*emphasis*``; everything else escaped.

    >>> text_html("*sat* has $d_k = 2$ and `M.softmax`")
    '<em>sat</em> has <i>d</i><sub><i>k</i></sub> = 2 and <code>M.softmax</code>'
    """
    out, last = [], 0
    for match in INLINE.finditer(text):
        out.append(html.escape(text[last:match.start()]))
        tex, code, emphasis = match.groups()
        if tex is not None:
            out.append(math_html(tex))
        elif code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        else:
            out.append(f"<em>{html.escape(emphasis)}</em>")
        last = match.end()
    return "".join(out) + html.escape(text[last:])


def text_plain(text):
    """Question text as plain text (math as ``d_model``, code and emphasis without their marks)."""
    return INLINE.sub(lambda m: math_plain(m.group(1)) if m.group(1) is not None else (m.group(2) or m.group(3)),
                      text)


def section_anchor(heading):
    """The anchor the website (docutils' ``make_id``) gives a heading: ``"4. Counting parameters"`` ->
    ``"counting-parameters"``; math is read as its TeX, as the site does.

    >>> section_anchor(r"3. Step 2: divide by $\\sqrt{d_k}$")
    'step-2-divide-by-sqrt-d-k'
    """
    text = re.sub(r"\$([^$]*)\$", r"\1", heading.lstrip("#").strip())
    slug = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", " ".join(slug.split()))
    return re.sub(r"^[-0-9]+|-+$", "", slug)


def _see_html(heading):
    """A link to the section, which the page's script also finds in Jupyter (by the heading's words)."""
    words = section_anchor(heading.split("$")[0])  # the words before any math: what Jupyter's heading shows too
    shown = text_html(heading.lstrip("#").strip())
    return (f'See <a href="#{section_anchor(heading)}" data-words="{html.escape(words)}" '
            f'data-lm-suppress-shortcuts="true">“{shown}”</a>.')


def _require_text(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{what} is missing (empty)")
    return value.strip()


# ---------------------------------------------------------------- answers and their comparison

def _real(value, what):
    """A finite real number (int or float, numpy scalars included); bool is refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _canonical(value):
    """A comparable form of an option's value: arrays as nested tuples, floats to 12 digits, nan as 'nan'."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isnan(value):
            return "nan"
        return float(f"{float(value):.12g}") if not isinstance(value, numbers.Integral) else float(value)
    return value


def shown(value, digits=4):
    """How a value prints to the reader: ints with thousands separators, floats to ``digits``
    significant digits, shapes as tuples.

    >>> shown(1050624), shown(0.70534), shown((8, 4, 64))
    ('1,050,624', '0.7053', '(8, 4, 64)')
    """
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return f"{float(value):,.{digits}g}" if abs(value) < 1e15 else f"{float(value):.{digits}g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(shown(v, digits) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def _portable(value):
    value = _real(value, "value")
    return value if isinstance(value, int) else float(f"{value:.{KEY_DIGITS}g}")


@dataclass(frozen=True)
class Mistake:
    """A wrong answer and what it reveals.

    value: the number (``Numeric``), the shape (``Shape``) or the option's value (``Choice``) that the
        misconception gives, computed by the chapter's cell;
    feedback: names the misconception, in the reader's terms ("you counted d_k columns per matrix ...");
    see: the heading of the section that settles it, as the chapter writes it;
    label: how a ``Choice`` option prints (default: the value).
    """
    value: object
    feedback: str
    see: str
    label: str = None


class Question:
    """What every kind of question shares: its text, why the key is right, the section that explains it."""

    kind = None

    def __init__(self, text, *, why, see):
        self.text = _require_text(text, "a question's text")
        self.why = _require_text(why, f"the explanation (why=) of {self.text[:60]!r}")
        if "\n" in self.why or len(self.why) > WHY_LENGTH:
            raise ValueError(f"why= of {self.text[:60]!r} must be one line of at most {WHY_LENGTH} characters, "
                             f"got {len(self.why)} characters")
        self.see = _require_text(see, f"the section (see=) of {self.text[:60]!r}")
        text_html(self.text), text_html(self.why), text_html(self.see)  # refuses math outside the subset now

    def _check_mistake(self, mistake, index):
        if not isinstance(mistake, Mistake):
            raise TypeError(f"{self.text[:60]!r}: wrong answer {index} must be a Mistake, got {type(mistake).__name__}")
        _require_text(mistake.feedback, f"{self.text[:60]!r}: the feedback of the wrong answer {mistake.value!r}")
        _require_text(mistake.see, f"{self.text[:60]!r}: the section (see=) of the wrong answer {mistake.value!r}")
        text_html(mistake.feedback), text_html(mistake.see)

    @property
    def ident(self):
        """A stable name for the question (its text and key as shown), under which a browser remembers the answer."""
        return "q" + hashlib.sha256(json.dumps([self.text, self.key_label()]).encode()).hexdigest()[:12]

    def right_html(self):
        return f"<strong>Right.</strong> {text_html(self.why)}"

    def wrong_html(self, mistake):
        return f"<strong>Not quite.</strong> {text_html(mistake.feedback)} {_see_html(mistake.see)}"

    def answer_html(self):
        return (f"<strong>The answer:</strong> {text_html(self.key_label())}. {text_html(self.why)} "
                f"{_see_html(self.see)}")


class Numeric(Question):
    """A number typed by the reader, right within a stated tolerance.

    The answer ``x`` is right when ``|x - key| <= max(absolute, relative * |key|)``; a typical wrong
    number (a ``Mistake``) is recognised with the same rule around its own value. With neither
    tolerance the key must be a whole number, and only that number counts.
    """

    kind = "number"

    def __init__(self, text, key, *, why, see, mistakes=(), absolute=0.0, relative=0.0, digits=4):
        super().__init__(text, why=why, see=see)
        self.key = _real(key, f"the key of {self.text[:60]!r}")
        self.absolute = _real(absolute, "absolute")
        self.relative = _real(relative, "relative")
        if self.absolute < 0 or self.relative < 0:
            raise ValueError(f"{self.text[:60]!r}: tolerances must be >= 0, got absolute={absolute}, relative={relative}")
        if self.absolute == 0 and self.relative == 0 and self.key != int(self.key):
            raise ValueError(f"{self.text[:60]!r}: the key {self.key!r} is not a whole number, so the question needs "
                             f"a tolerance (absolute= or relative=) that the reader is told")
        self.digits = digits
        self.mistakes = list(mistakes)
        for index, mistake in enumerate(self.mistakes):
            self._check_mistake(mistake, index)
            value = _real(mistake.value, f"{self.text[:60]!r}: the wrong value {mistake.value!r}")
            if value == self.key:
                raise ValueError(f"{self.text[:60]!r}: the wrong value {value!r} equals the key "
                                 f"(feedback {mistake.feedback[:50]!r}): it is not a mistake")
            if self.accepts(value):
                raise ValueError(f"{self.text[:60]!r}: the tolerance ({self.tolerance_text()}) accepts the listed "
                                 f"mistake {value!r} (key {self.key!r}, feedback {mistake.feedback[:50]!r})")
        values = [m.value for m in self.mistakes]
        for i, a in enumerate(values):
            for b in values[i + 1:]:
                if abs(a - b) <= self._width(a) + self._width(b):
                    raise ValueError(f"{self.text[:60]!r}: the wrong values {a!r} and {b!r} are duplicates: "
                                     f"within the tolerance of each other, one answer would match both")

    def _width(self, value):
        return max(self.absolute, self.relative * abs(value)) * (1 + SLACK) + SLACK * abs(value)

    def near(self, x, value):
        """True if ``x`` counts as ``value`` under this question's tolerance (the rule the page's script uses)."""
        return abs(x - value) <= self._width(value)

    def accepts(self, x):
        return self.near(x, self.key)

    def judge(self, x):
        """(verdict, feedback) for an answer ``x``: 'right', or 'wrong' with the matched mistake's feedback or None."""
        if self.accepts(x):
            return "right", self.why
        for mistake in self.mistakes:
            if self.near(x, mistake.value):
                return "wrong", mistake.feedback
        return "wrong", None

    def tolerance_text(self):
        if self.absolute == 0 and self.relative == 0:
            return "the exact whole number"
        parts = []
        if self.absolute:
            parts.append(f"±{shown(self.absolute, 3)}")
        if self.relative:
            parts.append(f"{shown(100 * self.relative, 3)}%")
        return "within " + " or ".join(parts) + (", whichever is larger" if len(parts) == 2 else "")

    def key_label(self):
        return shown(self.key, self.digits)

    def browser(self):
        other = (f"<strong>Not quite</strong>, and not one of the slips this question knows. "
                 f"{_see_html(self.see)} Then try again, or show the answer.")
        return {"kind": "number", "key": _portable(self.key), "abs": self.absolute, "rel": self.relative,
                "mistakes": [{"value": _portable(m.value), "html": self.wrong_html(m)} for m in self.mistakes],
                "right": self.right_html(), "other": other, "answer": self.answer_html()}

    def fields_html(self, qid):
        hint = f"Type a number; answers {self.tolerance_text()} count as right." if self.absolute or self.relative \
            else "Type the exact whole number (1,234 and 1234 both work)."
        return (f'<div class="mha-quiz-entry"><label for="{qid}-in">Your answer</label> '
                f'<input type="text" id="{qid}-in" inputmode="decimal" autocomplete="off" spellcheck="false" '
                f'aria-describedby="{qid}-tol" data-lm-suppress-shortcuts="true"></div>'
                f'<p class="mha-quiz-tolerance" id="{qid}-tol">{hint}</p>')

    def printed(self):
        return {"kind": "number", "tolerance": self.tolerance_text(), "options": [],
                "wrong": [{"label": shown(m.value, self.digits), "feedback": m.feedback, "see": m.see}
                          for m in self.mistakes]}


class Choice(Question):
    """One right option among several wrong ones, each wrong one a ``Mistake`` with its own feedback.

    ``key`` is the right option's value, computed by the chapter; ``label`` is how it prints (default:
    the value). The options show in a fixed order in which the key's place follows from the question's
    text (``position`` chooses it instead).
    """

    kind = "choice"

    def __init__(self, text, key, *, why, see, wrong, label=None, position=None):
        super().__init__(text, why=why, see=see)
        self.key = self._value(key, "the key")
        self.wrong = list(wrong)
        if len(self.wrong) < 2:
            raise ValueError(f"{self.text[:60]!r}: give at least two wrong options, got {len(self.wrong)}")
        if len(self.wrong) > 5:
            raise ValueError(f"{self.text[:60]!r}: at most five wrong options, got {len(self.wrong)}")
        self.label = _require_text(label, f"{self.text[:60]!r}: the key's label") if label is not None \
            else self._label(self.key)
        seen = {_canonical(self.key): "the key"}
        labels = {self.label: "the key"}
        for index, mistake in enumerate(self.wrong):
            self._check_mistake(mistake, index)
            value = _canonical(self._value(mistake.value, f"wrong option {index}"))
            label = mistake.label if mistake.label is not None else self._label(mistake.value)
            _require_text(label, f"{self.text[:60]!r}: the label of wrong option {index}")
            if value in seen:
                what = ("equals the key: two options would both be right" if seen[value] == "the key"
                        else f"duplicates {seen[value]}")
                raise ValueError(f"{self.text[:60]!r}: wrong option {label!r} (value {mistake.value!r}) {what}")
            if label in labels:
                raise ValueError(f"{self.text[:60]!r}: two options print alike: {label!r}")
            seen[value], labels[label] = f"wrong option {label!r}", f"wrong option {index}"
        count = len(self.wrong) + 1
        if position is None:
            position = int(hashlib.sha256(self.text.encode()).hexdigest(), 16) % count
        if not 0 <= position < count:
            raise ValueError(f"{self.text[:60]!r}: position {position} is not among 0..{count - 1}")
        self.position = position

    def _value(self, value, what):
        return value

    def _label(self, value):
        return shown(value)

    def options(self):
        """The options in the order they print: (label, Mistake or None for the key)."""
        wrong = [(m.label if m.label is not None else self._label(m.value), m) for m in self.wrong]
        return wrong[:self.position] + [(self.label, None)] + wrong[self.position:]

    def judge(self, label):
        """(verdict, feedback) for the option printed as ``label``."""
        for text, mistake in self.options():
            if text == label:
                return ("right", self.why) if mistake is None else ("wrong", mistake.feedback)
        raise ValueError(f"{label!r} is not an option of {self.text[:60]!r}")

    def key_label(self):
        return self.label

    def browser(self):
        return {"kind": "choice", "answer": self.answer_html(),
                "options": [{"right": m is None, "html": self.right_html() if m is None else self.wrong_html(m)}
                            for _, m in self.options()]}

    def fields_html(self, qid):
        rows = []
        for j, (label, _) in enumerate(self.options()):
            rows.append(f'<div class="mha-quiz-option"><input type="radio" name="{qid}" id="{qid}-o{j}" value="{j}" '
                        f'data-lm-suppress-shortcuts="true"><label for="{qid}-o{j}">{text_html(label)}</label></div>')
        return '<div class="mha-quiz-options">' + "".join(rows) + "</div>"

    def printed(self):
        return {"kind": self.kind, "tolerance": None, "options": [label for label, _ in self.options()],
                "wrong": [{"label": label, "feedback": m.feedback, "see": m.see} for label, m in self.options() if m]}


class Shape(Choice):
    """Which of these shapes: the key and every wrong option are tuples of non-negative ints."""

    kind = "shape"

    def __init__(self, text, key, *, why, see, wrong, position=None):
        super().__init__(text, key, why=why, see=see, wrong=wrong, position=position)

    def _value(self, value, what):
        if not isinstance(value, (tuple, list)) or not all(
                isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0 for v in value):
            raise TypeError(f"{self.text[:60]!r}: {what} must be a shape, a tuple of non-negative ints, got {value!r}")
        return tuple(int(v) for v in value)


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


# ---------------------------------------------------------------- what the page carries

# Scoped to the block; the theme's colours where the website gives them (light and dark), else the front end's.
QUIZ_CSS = """
.mha-quiz{border:1px solid var(--pst-color-border,var(--jp-border-color1,#999));border-radius:6px;
padding:.2em 1em .6em;margin:1em 0;max-width:100%;box-sizing:border-box;overflow-wrap:anywhere}
.mha-quiz fieldset{border:0;border-top:1px solid var(--pst-color-border,var(--jp-border-color2,#ccc));
margin:.8em 0 0;padding:.8em 0 .2em;min-width:0}
/* a legend that floats leaves the fieldset's top border whole (as Bootstrap, the website's theme, does) */
.mha-quiz legend{font-size:1em;line-height:1.5;font-weight:normal;float:left;width:100%;padding:0;
margin-bottom:.3em;white-space:normal}
.mha-quiz legend+*{clear:left}
.mha-quiz-option{display:flex;gap:.5em;align-items:baseline;margin:.25em 0}
.mha-quiz-option input{flex:none;margin:0}
.mha-quiz input[type=text]{font:inherit;width:12em;max-width:100%;color:inherit;background:transparent;
border:1px solid currentColor;border-radius:3px;padding:.15em .4em}
.mha-quiz button{font:inherit;font-size:.95em;color:inherit;background:transparent;border:1px solid currentColor;
border-radius:4px;padding:.15em .8em;margin:.3em .4em 0 0;cursor:pointer}
.mha-quiz :focus-visible{outline:3px solid #e1812c;outline-offset:2px}
.mha-quiz-tolerance{font-size:.9em;margin:.3em 0}
.mha-quiz-feedback:not(:empty){margin-top:.5em;padding:.2em 0 .2em .7em;border-left:4px solid #888}
.mha-quiz-feedback[data-verdict=right]{border-left-color:#2e7d32}
.mha-quiz-feedback[data-verdict=wrong]{border-left-color:#c62828}
.mha-quiz-feedback a{color:inherit;text-decoration:underline}
.mha-quiz-footer{border-top:1px solid var(--pst-color-border,var(--jp-border-color2,#ccc));padding-top:.4em;
display:flex;flex-wrap:wrap;gap:.2em 1em;align-items:baseline}
.mha-quiz-footer p,.mha-quiz-intro{margin:.4em 0}
"""

# The only JavaScript: compare an answer with the stored key and wrong values, show the stored feedback,
# remember the answers where the browser allows it. No math runs in the page.
QUIZ_JS = """
(function () {
  var me = document.currentScript;
  var root = (me && me.closest && me.closest(".mha-quiz")) || document.getElementById("QUIZ_ID");
  if (!root || root.getAttribute("data-ready")) { return; }
  root.setAttribute("data-ready", "true");
  var note = root.querySelector(".mha-quiz-run");
  if (note) { note.remove(); }
  var data = JSON.parse(root.querySelector("script.mha-quiz-data").textContent);
  var store = null;
  try { store = window.localStorage; store.getItem("mha-lessons-quiz"); } catch (e) { store = null; }
  function load(id) { try { return JSON.parse(store.getItem("mha-lessons-quiz:" + id)); } catch (e) { return null; } }
  function save(id, v) { try { store.setItem("mha-lessons-quiz:" + id, JSON.stringify(v)); } catch (e) { } }
  function forget(id) { try { store.removeItem("mha-lessons-quiz:" + id); } catch (e) { } }
  function number(text) {
    var t = String(text).replace(/[\\s,_\\u2009\\u202f]/g, "").replace(/\\u2212/g, "-");
    return /^[-+]?(\\d+\\.?\\d*|\\.\\d+)(e[-+]?\\d+)?$/i.test(t) ? Number(t) : NaN;
  }
  function near(x, v, q) {
    return Math.abs(x - v) <= Math.max(q.abs, q.rel * Math.abs(v)) * (1 + SLACK) + SLACK * Math.abs(v);
  }
  var boxes = Array.prototype.slice.call(root.querySelectorAll("fieldset.mha-quiz-question"));
  var right = {};
  function judge(q, box) {
    if (q.kind === "number") {
      var raw = box.querySelector("input[type=text]").value;
      if (!raw.trim()) { return {verdict: "empty", html: "Type a number first."}; }
      var x = number(raw);
      if (isNaN(x)) { return {verdict: "empty", html: "That is not a number: type digits, such as 1050624 or 0.25."}; }
      if (near(x, q.key, q)) { return {verdict: "right", html: q.right, answer: raw}; }
      for (var i = 0; i < q.mistakes.length; i++) {
        if (near(x, q.mistakes[i].value, q)) { return {verdict: "wrong", html: q.mistakes[i].html, answer: raw}; }
      }
      return {verdict: "wrong", html: q.other, answer: raw};
    }
    var chosen = box.querySelector("input[type=radio]:checked");
    if (!chosen) { return {verdict: "empty", html: "Choose an option first."}; }
    var option = q.options[Number(chosen.value)];
    return {verdict: option.right ? "right" : "wrong", html: option.html, answer: chosen.value};
  }
  function show(box, result) {
    var out = box.querySelector(".mha-quiz-feedback");
    out.setAttribute("data-verdict", result.verdict);
    out.innerHTML = result.html;
  }
  function count() {
    var n = boxes.filter(function (b, i) { return right[data.questions[i].id]; }).length;
    root.querySelector(".mha-quiz-score").textContent = n + " of " + boxes.length + " answered right.";
  }
  boxes.forEach(function (box, i) {
    var q = data.questions[i];
    var input = box.querySelector("input[type=text]");
    function check() {
      var result = judge(q, box);
      show(box, result);
      if (result.answer !== undefined) {
        right[q.id] = result.verdict === "right";
        save(q.id, {a: result.answer});
        count();
      }
    }
    box.querySelector(".mha-quiz-check").addEventListener("click", check);
    box.querySelector(".mha-quiz-reveal").addEventListener("click", function () {
      show(box, {verdict: "answer", html: q.answer});
    });
    if (input) {
      input.addEventListener("keydown", function (e) { if (e.key === "Enter") { e.preventDefault(); check(); } });
    }
    var stored = load(q.id);
    if (stored && stored.a !== undefined) {
      if (input) { input.value = stored.a; }
      var radio = box.querySelector("input[type=radio][value='" + Number(stored.a) + "']");
      if (radio) { radio.checked = true; }
      var result = judge(q, box);
      if (result.answer !== undefined) { show(box, result); right[q.id] = result.verdict === "right"; }
    }
  });
  root.querySelector(".mha-quiz-reset").addEventListener("click", function () {
    boxes.forEach(function (box, i) {
      forget(data.questions[i].id);
      right[data.questions[i].id] = false;
      box.querySelectorAll("input[type=radio]").forEach(function (r) { r.checked = false; });
      var input = box.querySelector("input[type=text]");
      if (input) { input.value = ""; }
      show(box, {verdict: "", html: ""});
    });
    count();
  });
  function slug(text) {
    var s = text.toLowerCase().normalize("NFKD").replace(/[^\\x00-\\x7f]/g, "");
    return s.replace(/[^a-z0-9]+/g, "-").replace(/^[-0-9]+|-+$/g, "");
  }
  // A link to a section: the website has the anchor; in Jupyter, find the heading by its words.
  root.addEventListener("click", function (e) {
    var link = e.target.closest && e.target.closest("a[data-words]");
    if (!link || document.getElementById(link.getAttribute("href").slice(1))) { return; }
    e.preventDefault();
    var words = link.getAttribute("data-words");
    var scope = root.closest(".jp-Notebook, .notebook_app, body") || document;
    var found = Array.prototype.slice.call(scope.querySelectorAll("h1, h2, h3, h4")).filter(function (h) {
      return words && slug(h.textContent).indexOf(words) === 0;
    })[0];
    if (found) { found.scrollIntoView({block: "start"}); }
  });
  count();
})();
""".replace("SLACK", repr(SLACK))
