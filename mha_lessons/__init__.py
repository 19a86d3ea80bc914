"""mha_lessons: the tested numpy code behind the course on multi-head attention.

>>> import mha_lessons as M
>>> M.causal_mask(2).tolist()
[[True, False], [True, True]]

Where things live. The lesson code, what the chapters teach, sits at the top of
the package, one job per module, each docstring naming its chapter: the core
(``attention``, ``params``, ``multihead``, ``grads``, ``gradcheck``,
``torch_bridge``, with the input checks they share in ``_checks``), then the
chapters' modules (``scaling``, ``complexity``, ``masks``, ``blockwise``,
``inference``, ``parallel``, ``pretrained``, ...). The course's machinery, what
shows, records and checks the lessons (figures, panels, recorded values, seed
tables, exercise checkers), sits in ``course/``. Imports point one way: core <-
lessons <- course. A module that was split keeps every name it had: a function
that moved to a new module is reachable from the old one too.

The lessons need only numpy. Submodules that need more (``plotting`` needs
matplotlib, ``widgets`` needs ipywidgets) are imported the first time they are
used, as attributes of the package: ``M.plotting.heatmap(...)``; the machinery
answers to its short name (``M.plotting`` is ``M.course.plotting``). Every
public function checks its input once, where it enters; the steps it calls
trust what they are given.

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
import importlib.abc
import importlib.util
import pkgutil
import sys

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

# Every submodule (complexity, grads, ...) is reachable as an attribute, imported on first use so that
# matplotlib, ipywidgets or torch load only when needed. The course's machinery (course/plotting.py, ...) is
# reachable under its short name as well: M.plotting is M.course.plotting.
_LESSONS = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
_COURSE = {m.name for m in pkgutil.iter_modules([f"{__path__[0]}/course"]) if not m.name.startswith("_")}
_SUBMODULES = _LESSONS | _COURSE


class _CourseAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import ``mha_lessons.<name>[.<sub>]`` of a module in course/ as ``mha_lessons.course.<name>[.<sub>]``.

    One module object answers to both names, so ``from mha_lessons.notebook import glue``,
    ``import mha_lessons.exercises.ch01`` and ``M.notebook`` all reach the file in ``course/``.
    """

    def find_spec(self, fullname, path=None, target=None):
        package, _, rest = fullname.partition(".")
        if package == __name__ and rest.split(".")[0] in _COURSE:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(f"{__name__}.course.{spec.name.partition('.')[2]}")
        spec.loader_state = module.__spec__  # the import system stamps the alias's spec on the module: undone below
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # the module is already executed, under its own name


if not any(isinstance(finder, _CourseAlias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _CourseAlias())  # first, so that no path finder loads a second copy of a course module


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)
