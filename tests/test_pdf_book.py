"""book/_ext/pdf_book.py, what the PDF (`make pdf`) prints in place of the website's outputs. The PDF itself
needs TeX Live and is not built by `make test`; these tests need neither."""

import base64
import doctest
import importlib.util
import json
import re
from pathlib import Path

import pytest

# make portability does not re-run this file (see scripts/portability.py)
pytestmark = pytest.mark.machine_independent("checks what the LaTeX builder's extension writes, as text")

ROOT = Path(__file__).resolve().parent.parent


def load_extension():
    spec = importlib.util.spec_from_file_location("pdf_book", ROOT / "book" / "_ext" / "pdf_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docstring_examples():
    failed, attempted = doctest.testmod(load_extension())
    assert attempted >= 3 and failed == 0


def test_a_stored_panel_prints_the_frames_it_shows_first():
    ext = load_extension()
    notebook = json.loads((ROOT / "book" / "03_multi_head_attention.ipynb").read_text())
    panels = [output["data"]["text/html"] for cell in notebook["cells"] for output in cell.get("outputs", [])
              if 'class="mha-panel"' in "".join(output.get("data", {}).get("text/html", ""))]
    assert len(panels) == 1
    markup = "".join(panels[0])
    frames = ext.panel_frames(markup)
    shown = re.findall(r'<img class="mha-panel-frame"[^>]*src="data:image/png;base64,([^"]+)"', markup)
    assert len(frames) == len(shown) == 2
    assert [data for data, _ in frames] == [base64.b64decode(s) for s in shown]
    assert all(data.startswith(b"\x89PNG\r\n\x1a\n") and alt for data, alt in frames)


def test_only_the_latex_builder_is_touched_and_make_test_builds_no_pdf():
    assert load_extension().PrintableOutputs.formats == ("latex",)
    makefile = (ROOT / "Makefile").read_text()
    test_rule = re.search(r"^test:(.*)$", makefile, flags=re.MULTILINE).group(1)
    assert "pdf" not in test_rule and re.search(r"^pdf:", makefile, flags=re.MULTILINE)
