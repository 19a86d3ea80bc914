"""mha_lessons: the tested numpy code behind the course on multi-head attention.

>>> import mha_lessons as M
>>> M.causal_mask(2).tolist()
[[True, False], [True, True]]

The core needs only numpy. Submodules that need more (``plotting`` needs
matplotlib, ``widgets`` needs ipywidgets) are imported the first time they are
used, as attributes of the package: ``M.plotting.heatmap(...)``. Each module's
docstring names the chapter that teaches it.

Conventions, the same in every module:

- **Sizes** have one name each: ``B`` sequences, ``h`` heads (``num_heads`` as
  an argument), ``n`` queries, ``m`` keys and values, ``d_model`` the width of
  a token, ``d_k`` and ``d_v`` the widths of a head's queries/keys and values.
  Shapes are written beside every reshape, ``# (B, n, d_model) -> (B, h, n, d_k)``.
- **Weights** are used as ``x @ w`` (rows are input features); PyTorch stores
  the transpose, and ``params_from_torch``/``params_to_torch`` convert.
- **Masks** are boolean and True means "may attend" (PyTorch's boolean masks
  mean the opposite; chapter 6).
- **Randomness** comes from a keyword argument ``seed``: an int, a
  ``numpy.random.Generator`` or None, passed to ``numpy.random.default_rng``.
- **Options** are keyword-only; a function returns one kind of result.
- **Bad input**: a value of the wrong type raises ``TypeError`` naming the
  types; a wrong shape or size raises ``ValueError`` naming the shapes or
  numbers, never a numpy broadcasting traceback.
"""

import importlib
import pkgutil

from .attention import causal_mask, padding_mask, scaled_dot_product_attention, softmax
from .multihead import (
    MHAParams,
    combine_heads,
    init_params,
    multihead_attention,
    params_from_torch,
    params_to_torch,
    split_heads,
)

__version__ = "0.1.0"

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "split_heads",
    "combine_heads",
    "MHAParams",
    "init_params",
    "multihead_attention",
    "params_from_torch",
    "params_to_torch",
]

# Every submodule (complexity, grads, plotting, widgets, ...) is reachable as an attribute,
# imported on first use so that matplotlib, ipywidgets or torch load only when needed.
_SUBMODULES = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
# The course's machinery in course/ answers to its short name too: M.quiz is mha_lessons.course.quiz.
_COURSE = {m.name for m in pkgutil.iter_modules([f"{__path__[0]}/course"]) if not m.name.startswith("_")}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _COURSE:
        return importlib.import_module(f".course.{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES | _COURSE)
