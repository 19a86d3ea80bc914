"""The three kinds of self-check question (``Numeric``, ``Choice``, ``Shape``) and the ``Mistake`` each wrong
answer is; they refuse a question that cannot teach. ``quiz.py`` gathers them into a block.
"""

import hashlib
import json
import numbers
from dataclasses import dataclass

from .quiz_text import _canonical, _portable, _real, _require_text, _see_html, shown, text_html

MIN_QUESTIONS, MAX_QUESTIONS = 3, 6
WHY_LENGTH = 240  # characters: "why it is right" is one line
SLACK = 1e-9  # relative: a tolerance's edge counts as inside, whatever the rounding of the reader's number


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
        label = self.key_label()
        stop = "" if label.rstrip().endswith((".", "?", "!")) else "."   # an option's label may end a sentence
        return (f"<strong>The answer:</strong> {text_html(label)}{stop} {text_html(self.why)} "
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
        other = (f"<strong>Not quite.</strong> {_see_html(self.see)} Then try again, or show the answer.")
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
