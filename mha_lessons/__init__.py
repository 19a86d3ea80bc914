"""mha_lessons: the tested numpy code behind the course on multi-head attention.

>>> import mha_lessons as M
>>> M.causal_mask(2).tolist()
[[True, False], [True, True]]

The core needs only numpy. Submodules that need more (``plotting`` needs
matplotlib, ``widgets`` needs ipywidgets) are imported the first time they are
used, as attributes of the package: ``M.plotting.heatmap(...)``.
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


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)
