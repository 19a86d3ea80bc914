"""The package as a learner installs it: numpy only at import time, submodules reachable as attributes."""

import subprocess
import sys

import mha_lessons as M


def test_import_needs_only_numpy():
    code = (
        "import sys, mha_lessons\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'ipywidgets', 'IPython') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_api_is_exported():
    for name in ("softmax", "scaled_dot_product_attention", "causal_mask", "split_heads", "combine_heads",
                 "MHAParams", "init_params", "multihead_attention", "params_from_torch", "params_to_torch"):
        assert name in M.__all__ and callable(getattr(M, name)), name


def test_every_submodule_is_an_attribute():
    for name in M._SUBMODULES:
        assert getattr(M, name).__name__ == f"mha_lessons.{name}"
