"""How the checks are put together (CONTRIBUTING.md, "How the checks run"): what make portability re-runs, and in
which order pytest-xdist hands out the files."""

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import LONGEST_FIRST, NUMERIC_IMPORT, check_machine_independent, pytest_collection_modifyitems

# make portability does not re-run this file (see scripts/portability.py)
pytestmark = pytest.mark.machine_independent("checks how the test runs are put together")

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("portability", ROOT / "scripts" / "portability.py")
portability = importlib.util.module_from_spec(spec)
spec.loader.exec_module(portability)


class FakeItem(SimpleNamespace):
    """What the collection hook reads of a test item: its path, its marks, and adding a mark."""

    def __init__(self, path, marks=()):
        super().__init__(path=Path(path), marks=list(marks))

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m.name == name), None)

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def add_marker(self, mark):
        self.marks.append(mark.mark if hasattr(mark, "mark") else mark)


def test_machine_independent_needs_a_reason(tmp_path):
    test_file = tmp_path / "test_text.py"
    test_file.write_text("import json\n")
    check_machine_independent(FakeItem(test_file, [pytest.mark.machine_independent("reads JSON").mark]), set())
    with pytest.raises(pytest.UsageError, match="needs its reason"):
        check_machine_independent(FakeItem(test_file, [pytest.mark.machine_independent().mark]), set())


@pytest.mark.parametrize("line", ["import numpy as np", "from torch import nn", "import mha_lessons as M",
                                  "    from mha_lessons.blockwise import online_softmax"])
def test_a_file_that_computes_cannot_be_marked_machine_independent(tmp_path, line):
    test_file = tmp_path / "test_numbers.py"
    test_file.write_text(f"import json\n{line}\n")
    mark = pytest.mark.machine_independent("only text, it says").mark
    with pytest.raises(pytest.UsageError, match="make portability must re-run it"):
        check_machine_independent(FakeItem(test_file, [mark]), set())


def test_every_file_marked_machine_independent_passes_the_check():
    marked = [p for p in (ROOT / "tests").glob("test_*.py") if "pytest.mark.machine_independent(" in p.read_text()]
    assert len(marked) >= 5  # the files that read text only (test_pdf_book.py now imports the quiz rules)
    for path in marked:
        source = path.read_text()
        assert not NUMERIC_IMPORT.search(source), f"{path.name} imports what computes in floating point"
        assert re.search(r'pytest\.mark\.machine_independent\("[^"]+"\)', source), f"{path.name}: no reason given"


def test_portability_re_runs_every_notebook_the_tests_and_the_doctests():
    selection = portability.SELECTION
    assert set(portability.NOTEBOOKS) == {str(p.relative_to(ROOT)) for p in (ROOT / "book").glob("*.ipynb")}
    assert set(portability.NOTEBOOKS) <= set(selection) and {"tests", "mha_lessons"} <= set(selection)
    assert selection[:2] == ["-m", "not slow and not machine_independent"]  # opt-out only, by a marker
    assert "--doctest-modules" in portability.PYTEST and "--nbval" in portability.PYTEST


def test_portability_never_sets_openblas_coretype_or_l2_size():
    for setting in portability.settings(["SSE42", "AVX2", "AVX512F", "AVX512_SKX"]).values():
        assert not {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"} & set(setting)
        assert setting["OPENBLAS_NUM_THREADS"] == "1"  # two settings side by side, one worker per core each


def test_the_longest_files_come_first_and_each_file_keeps_its_order():
    root = ROOT
    items = [FakeItem(root / "tests/test_a.py"), FakeItem(root / "book/01_x.ipynb"), FakeItem(root / "book/01_x.ipynb"),
             FakeItem(root / "tests/test_wheel.py"), FakeItem(root / "tests/test_b.py"),
             FakeItem(root / "tests/test_wheel.py")]
    expected = [items[3], items[5], items[0], items[1], items[2], items[4]]
    pytest_collection_modifyitems(None, items)
    assert [id(i) for i in items] == [id(i) for i in expected]  # the wheel test first (the longest), the rest as collected
    assert LONGEST_FIRST[0] == "tests/test_wheel.py" and all((ROOT / name).exists() for name in LONGEST_FIRST)


@pytest.mark.parametrize("name", ["test_browser.py", "test_lab.py", "test_wheel.py"])
def test_the_browser_jupyterlab_and_wheel_tests_are_not_in_make_check(name):
    assert "pytestmark = pytest.mark.slow\n" in (ROOT / "tests" / name).read_text()


def test_make_runs_pytest_in_parallel_with_one_blas_thread_per_worker():
    makefile = (ROOT / "Makefile").read_text()
    assert "OPENBLAS_NUM_THREADS=1" in makefile and "-n auto --dist loadscope --no-loadscope-reorder" in makefile
    check = re.search(r"^check:.*\n\t(.*)$", makefile, flags=re.MULTILINE)[1]
    assert '-m "not slow"' in check and "--nbval" not in check and "NBVAL" not in check
