"""The package as a learner installs it: numpy only at import time, submodules reachable as attributes."""

import subprocess
import sys
from pathlib import Path

import pytest

import mha_lessons as M

ROOT = Path(__file__).resolve().parent.parent


def test_import_needs_only_numpy():
    code = (
        "import sys, mha_lessons\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'ipywidgets', 'IPython') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# Imports each module of the package first, in a package imported afresh each time (numpy stays loaded: cheaper
# than one interpreter per module). A cycle between two modules shows only when one of them is imported first.
IMPORT_FIRST = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for key in [k for k in sys.modules if k == "mha_lessons" or k.startswith("mha_lessons.")]:
        del sys.modules[key]
    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("mha_lessons")]
    try:
        importlib.import_module("mha_lessons." + name)
    except Exception as error:
        failed.append(f"mha_lessons.{name}: {type(error).__name__}: {error}")
print("\\n".join(failed))
"""


def test_every_module_can_be_imported_first():
    """`import mha_lessons.intensity` in a fresh interpreter once failed: complexity.py, which intensity.py
    imports, imported intensity's names back at import time (a cycle that only bites in that order)."""
    done = subprocess.run([sys.executable, "-c", IMPORT_FIRST, *sorted(M._SUBMODULES)], capture_output=True,
                          text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "", done.stdout


def test_public_api_is_exported():
    for name in ("softmax", "scaled_dot_product_attention", "causal_mask", "split_heads", "combine_heads",
                 "MHAParams", "init_params", "multihead_attention", "params_from_torch", "params_to_torch"):
        assert name in M.__all__ and callable(getattr(M, name)), name


def test_every_submodule_is_an_attribute():
    for name in M._LESSONS:
        assert getattr(M, name).__name__ == f"mha_lessons.{name}"
    for name in M._COURSE:  # the machinery, in course/, answers to its short name too
        assert getattr(M, name) is getattr(M.course, name), name
        assert getattr(M, name).__name__ == f"mha_lessons.course.{name}"


def test_a_course_module_imported_by_its_short_name_is_the_same_module():
    code = (
        "import sys\n"
        "from mha_lessons.notebook import glue\n"
        "import mha_lessons.exercises.ch01 as by_alias\n"
        "import mha_lessons as M\n"
        "assert by_alias is sys.modules['mha_lessons.course.exercises.ch01']\n"
        "assert glue is M.course.notebook.glue and M.exercises is M.course.exercises\n"
        "assert by_alias.__spec__.name == 'mha_lessons.course.exercises.ch01'\n"
        "copies = {}\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if name.startswith('mha_lessons') and getattr(module, '__file__', None):\n"
        "        copies.setdefault(module.__file__, set()).add(id(module))\n"
        "assert all(len(ids) == 1 for ids in copies.values()), 'a file loaded twice, as two modules'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_exercise_checker_is_imported_by_name_into_exercises():
    import importlib
    import pkgutil

    import mha_lessons.exercises as E

    for info in pkgutil.iter_modules(E.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"mha_lessons.exercises.{info.name}")
        for name in (n for n in dir(module) if n.startswith("check_")):
            assert getattr(E, name, None) is getattr(module, name), \
                f"{info.name}.{name} is not imported by name in mha_lessons/exercises/__init__.py"
            assert name in E.__all__, f"{name} is missing from mha_lessons.exercises.__all__"


def test_a_claim_about_torch_fails_on_the_pinned_version_and_is_a_note_elsewhere(monkeypatch, capsys):
    import re

    import torch

    from mha_lessons.notebook import PINNED_TORCH, check_torch_behaviour

    pin = re.search(r"^torch==(\d+\.\d+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert pin and pin.group(1) == PINNED_TORCH, "notebook.PINNED_TORCH must be the version requirements.txt pins"
    assert check_torch_behaviour(True, "holds") is True
    monkeypatch.setattr(torch, "__version__", PINNED_TORCH + ".0+cpu")
    with pytest.raises(AssertionError, match="no longer holds: the claim"):
        check_torch_behaviour(False, "the claim")
    monkeypatch.setattr(torch, "__version__", "2.5.1+cu121")
    assert check_torch_behaviour(False, "the claim") is False
    note = capsys.readouterr().out
    assert "2.5.1" in note and PINNED_TORCH in note and "the claim" in note
