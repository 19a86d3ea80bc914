"""book/_ext/pdf_book.py, what the PDF (`make pdf`) prints in place of the website's outputs. The PDF itself
needs TeX Live and is not built by `make test`; these tests need neither."""

import base64
import doctest
import importlib.util
import json
import re
from pathlib import Path

import pytest

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


def test_a_check_yourself_block_prints_its_questions_and_its_answers_with_links_to_the_sections():
    """book/_ext/pdf_book.py on chapter 3's stored block: every question and option prints; the answers list each
    key, why it is right and every wrong answer's feedback, linked to sections of the chapter."""
    from mha_lessons.course.quiz import section_anchor

    ext = load_extension()
    notebook = json.loads((ROOT / "book" / "03_multi_head_attention.ipynb").read_text())
    blocks = ["".join(output["data"]["text/html"]) for cell in notebook["cells"] for output in cell.get("outputs", [])
              if 'class="mha-quiz"' in "".join(output.get("data", {}).get("text/html", ""))]
    assert len(blocks) == 1
    questions = ext.quiz_data(blocks[0])
    printed = " ".join(node.astext() for node in ext.quiz_questions(questions))
    answers = ext.quiz_answers("Multi-head attention", "book/03_multi_head_attention", questions)
    listed = " ".join(node.astext() for node in answers)
    assert len(questions) == 5
    for number, q in enumerate(questions, 1):
        assert f"Question {number}. {q['text'].split('$')[0]}" in printed
        for option in q["options"]:
            assert option in printed
        assert q["answer"] in listed and all(w["feedback"].split("$")[0] in listed for w in q["wrong"])
    assert "0.768" not in printed and "2,362,368" not in printed and "2,362,368" in listed   # the answers stay apart
    links = [node["refuri"] for node in answers[1].findall(ext.nodes.reference)]
    assert links and all(link.startswith("%book/03_multi_head_attention#") for link in links)
    headings = {section_anchor(q["see"]) for q in questions}
    assert {link.split("#")[1] for link in links} >= headings


def test_the_pdf_reads_question_text_and_anchors_as_the_quiz_module_writes_them():
    """book/_ext/pdf_book.py does not import the package (the book builds from stored outputs): its copies of the
    quiz's text rule and of the anchor rule must stay those of mha_lessons/course/quiz_text.py."""
    from mha_lessons.course import quiz_text as quiz  # where the text rule and the anchor rule live

    ext = load_extension()
    assert ext.INLINE.pattern == quiz.INLINE.pattern
    for heading in ("4. Counting parameters", "3. Step 2: divide by $\\sqrt{d_k}$", "One head against eight, side by side",
                    "## 1. From one head to $h$ heads, in five steps"):
        assert ext._anchor(heading) == quiz.section_anchor(heading)
