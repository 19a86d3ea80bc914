"""What the checkers of every chapter share: run the learner's code safely, compare, and name the mistake.

A checker builds the right answer with the package, builds the answers that the typical mistakes
give (the softmax over the wrong axis, the scale forgotten, ...), and hands them to :func:`compare`,
which returns a :class:`Verdict`: right, one of the named mistakes, or a plain description of the
difference (shape, NaN, the largest wrong entry).
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: ``ok`` and one sentence for the learner. True when the answer is right.

    >>> Verdict(True, "the weights sum to 1.")
    Right: the weights sum to 1.
    >>> bool(Verdict(False, "the scale is missing."))
    False
    """

    ok: bool
    message: str

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return ("Right: " if self.ok else "Not yet: ") + self.message


def call_learner(function, *args, name=None):
    """Call the learner's ``function(*args)``; return ``(result, None)``, or ``(None, Verdict)`` if it failed.

    Test the second item with ``is not None``: a failing Verdict is itself false.

    >>> call_learner(lambda x: x + 1, 1)
    (2, None)
    >>> call_learner(lambda x: x / 0, 1)[1]
    Not yet: <lambda>(...) raised ZeroDivisionError: division by zero
    """
    name = name or getattr(function, "__name__", "your function")
    if not callable(function):
        return None, Verdict(False, f"expected a function, got {type(function).__name__}.")
    try:
        result = function(*args)
    except NotImplementedError:
        return None, Verdict(False, f"{name} is not written yet: replace `raise NotImplementedError`.")
    except Exception as error:  # the learner's bug, reported in one line instead of a traceback
        return None, Verdict(False, f"{name}(...) raised {type(error).__name__}: {error}")
    return result, None


def compare(answer, expected, mistakes=(), *, what="your answer", right="it matches the package.",
            rtol=1e-7, atol=1e-10):
    """Compare an answer with the expected array, naming a typical mistake when the answer matches one.

    Parameters
    ----------
    answer : array_like or None
        What the learner computed.
    expected : array_like
        The right result, computed by the package.
    mistakes : sequence of (array_like, str)
        For each typical mistake, the result it gives and the sentence that explains it. A mistake
        is reported only when the answer matches its result (shape and values) and not the right one.
    what : str
        How to call the answer in messages.
    right : str
        The sentence shown when the answer is right.
    rtol, atol : float
        Tolerances of ``np.allclose``; the defaults accept float64 rounding, not a wrong formula.

    Returns
    -------
    Verdict

    >>> compare([0.5, 0.5], np.array([0.5, 0.5]))
    Right: it matches the package.
    >>> compare([1.0, 0.0], np.array([0.5, 0.5]), [(np.array([1.0, 0.0]), "the scale is missing.")])
    Not yet: the scale is missing.
    >>> compare([[1.0, 2.0]], np.array([1.0, 2.0]))
    Not yet: your answer has shape (1, 2); expected shape (2,).
    >>> compare(3.0, 4.0)
    Not yet: your answer is 3 where 4 is expected.
    """
    expected = np.asarray(expected, dtype=float)
    if answer is None:
        return Verdict(False, f"{what} is None: not computed yet, or a function forgot to `return` it.")
    try:
        answer = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return Verdict(False, f"{what} is a {type(answer).__name__}, which is not an array of numbers.")

    def same(a, b):
        return a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=atol)

    if same(answer, expected):
        return Verdict(True, right)
    for wrong, message in mistakes:
        if same(answer, np.asarray(wrong, dtype=float)):
            return Verdict(False, message)
    if answer.shape != expected.shape:
        return Verdict(False, f"{what} has shape {answer.shape}; expected shape {expected.shape}.")
    if answer.ndim == 0:  # one number: no index to point at
        return Verdict(False, f"{what} is {float(answer):.6g} where {float(expected):.6g} is expected.")
    if not np.all(np.isfinite(answer)):
        first = tuple(int(i) for i in np.argwhere(~np.isfinite(answer))[0])
        return Verdict(False, f"{what} has {answer[first]} at index {first}; every entry should be finite.")
    gap = np.abs(answer - expected)
    worst = np.unravel_index(np.argmax(gap), gap.shape)
    worst = tuple(int(i) for i in worst)
    return Verdict(
        False,
        f"{what} has the right shape but not the right values: at index {worst} it is "
        f"{answer[worst]:.6g} where {expected[worst]:.6g} is expected.",
    )
