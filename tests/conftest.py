import os
import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest

# The Triton kernel (mha_lessons/triton_attention.py) is checked by Triton's interpreter on CPU tensors on every
# machine, with a GPU or without: Triton reads this when it is first imported, and the notebook kernels that
# nbval starts inherit it. (A session started with TRITON_INTERPRET=0 compiles, and the kernel's tests fail.)
os.environ.setdefault("TRITON_INTERPRET", "1")

# Figures are drawn off-screen in the tests. Not through the MPLBACKEND variable: the kernels
# that nbval starts would inherit it, and plt.show() would then store no figure at all.
matplotlib.use("Agg")

# ---------------------------------------------------------------- running in parallel (pytest-xdist)
#
# `make test`, `make check` and `make portability` run pytest with `-n auto --dist loadscope
# --no-loadscope-reorder` (CONTRIBUTING.md, "How the checks run"). Under loadscope every file is one unit of work:
# all its tests run on one worker, in order. So a notebook's cells run in order in one kernel (nbval), and a test
# file's module fixtures (a server, a browser, an environment) are made once. Units are handed out in the order
# collected (--no-loadscope-reorder), so the longest files are moved to the front below: a worker that starts a
# three-minute file last would keep the whole run waiting. (Under `--dist loadgroup`, with each notebook marked as
# one group, the cells of a notebook did not run in one kernel: NameErrors from the second cell on.)
LONGEST_FIRST = ("tests/test_wheel.py", "tests/test_browser.py", "tests/test_lab.py",
                 "book/15_real_model_heads.ipynb", "book/13_one_head_two_jobs.ipynb", "book/04_cost.ipynb",
                 "book/02_why_sqrt_dk.ipynb", "book/11_heads_across_processes.ipynb",
                 "book/03_multi_head_attention.ipynb", "book/07_efficient_attention.ipynb",
                 "tests/test_widgets_panels.py", "tests/test_scaling.py", "tests/test_sequence_parallel.py",
                 "tests/test_induction.py", "tests/test_pretrained.py", "tests/test_parallel.py")


# The browser test is the longest file by far (every page in Chromium: axe in three settings, folds, the quiz by
# mouse and keyboard, widths: 10-45 s a page, about 5 minutes of both workers in all). As one unit it kept one
# worker busy for a quarter of an hour while the other finished everything else, so its pages are units of their
# own (a page's desktop and phone tests together): each worker starts its own
# Chromium and web server (module fixtures) and takes pages as it comes free. Site-wide tests stay one unit.
SPLIT_BY_PAGE = "tests/test_browser.py"


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist", None) != "loadscope":
        return None                                   # xdist's own scheduler for any other --dist
    from xdist.scheduler import LoadScopeScheduling

    class BrowserPagesApart(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            page = re.search(r"\[(book/\w+)", nodeid) if nodeid.startswith(SPLIT_BY_PAGE + "::") else None
            return f"{SPLIT_BY_PAGE}::{page[1]}" if page else super()._split_scope(nodeid)

    return BrowserPagesApart(config, log)


def unit_of(item, root):
    """The file an item belongs to, relative to the root: pytest-xdist's unit of work under loadscope."""
    try:
        return item.path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(item.path)


# ---------------------------------------------------------------- what make portability re-runs
#
# scripts/portability.py re-runs every test under settings that round like other CPUs and BLAS, except those marked
# `slow` and the files marked `machine_independent("why")`: a file that computes nothing in floating point (it reads
# notebooks, text or configuration). The mark needs its reason, and a file that imports numpy, torch or the package
# cannot carry it: whatever computes with them can round differently elsewhere.
NUMERIC_IMPORT = re.compile(r"^\s*(?:import|from)\s+(numpy|torch|mha_lessons)\b", re.MULTILINE)


def check_machine_independent(item, seen):
    mark = item.get_closest_marker("machine_independent")
    if mark is None or item.path in seen:
        return
    seen.add(item.path)
    reason = mark.args[0] if mark.args else mark.kwargs.get("reason", "")
    if not str(reason).strip():
        raise pytest.UsageError(f"{item.path.name}: machine_independent needs its reason, "
                                f'pytest.mark.machine_independent("what it reads instead of computing")')
    found = NUMERIC_IMPORT.search(item.path.read_text())
    if found:
        raise pytest.UsageError(f"{item.path.name} is marked machine_independent but imports {found[1]}: what it "
                                f"computes can round differently on another machine, so make portability must "
                                f"re-run it (remove the mark)")


def pytest_collection_modifyitems(config, items):
    seen = set()
    for item in items:
        check_machine_independent(item, seen)
    root = Path(__file__).resolve().parent.parent
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(unit_of(item, root), len(rank)))  # stable: each file keeps its order


# ---------------------------------------------------------------- fixtures

@pytest.fixture
def rng():
    """A fresh, seeded generator for each test, so tests do not depend on their order."""
    return np.random.default_rng(20261123)


@pytest.fixture
def fig():
    """A fresh matplotlib figure, for the widgets' draw functions; every figure is closed afterwards."""
    import matplotlib.pyplot as plt

    figure = plt.figure()
    yield figure
    plt.close("all")
