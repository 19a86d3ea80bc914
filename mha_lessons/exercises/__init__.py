"""Checkers for the exercises: write your answer, call ``M.exercises.check_...(answer)``, read the verdict.

Each checker computes the right answer with the package and the answers that the typical mistakes
give (the softmax over the wrong axis, the scale forgotten, the heads split in the wrong order, ...);
if yours matches one of those it names the mistake in plain words, otherwise it says what differs
(the shape, a NaN, the largest wrong entry). It returns a :class:`Verdict`, which a notebook shows
as one line and which is true when the answer is right.

The checkers of each chapter live in a module of this package (``ch01``, ``ch03``, ...). Every
``check_...`` function of those modules is also available here, so a chapter writes
``M.exercises.check_band_mask(my_mask)``.
"""

import importlib
import pkgutil

from ._verdict import Verdict, call_learner, compare

__all__ = ["Verdict", "call_learner", "compare"]

_CHAPTER_MODULES = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))

for _module_name in _CHAPTER_MODULES:
    _module = importlib.import_module(f".{_module_name}", __name__)
    for _name in dir(_module):
        if _name.startswith("check_"):
            if _name in globals():
                raise ImportError(f"two exercise modules define {_name}; the second is {_module.__name__}")
            globals()[_name] = getattr(_module, _name)
            __all__.append(_name)
