"""The intro's promises that a test can check: its chapter map names all fifteen chapters in order, links only to
pages that exist, its reading times are what scripts/reading_time.py computes from the chapters, and it sends
a learner on their own machine to `make lab` and the reader notebooks, not to the MyST sources in book/.

The last test feeds the checks an intro written the wrong way, so that a check that can no longer fail is caught.
"""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INTRO = ROOT / "book" / "intro.md"
sys.path.insert(0, str(ROOT / "scripts"))
import reading_time  # noqa: E402

CHAPTERS = 15
TOLERANCE = 0.15   # a stated time may differ from the script's by this fraction before the intro must be updated
PATHS = ("core", "systems", "interpretability")


def chapter_map(text):
    """The numbers of the map's list items, in order; an item that links a chapter must carry its file's number
    (``3. {doc}`03_...```), one that does not yet exist its title in bold (``8. **Title** (in preparation)``)."""
    section = text.split("## Chapter map", 1)[1].split("\n## ", 1)[0]
    numbers = []
    for line in section.splitlines():
        item = re.match(r"(\d+)\. (?:\{doc\}`(\d\d)_[\w-]+`|\*\*[^*]+\*\* \(in preparation\))", line)
        if item:
            number, linked = int(item.group(1)), item.group(2)
            numbers.append(number if linked is None or int(linked) == number else -number)
    return numbers


def broken_links(text):
    return [doc for doc in re.findall(r"\{doc\}`([\w-]+)`", text)
            if not any((ROOT / "book" / f"{doc}{ext}").exists() for ext in (".ipynb", ".md"))]


def stated_hours(text):
    """{path: (first pass, everything)} from the table of paths: rows ``| core | about 3.5 hours | about 8 hours |``."""
    found = {}
    for line in text.splitlines():
        row = re.match(r"\| (\w+) \| (?:about )?([\d.]+) hours \| (?:about )?([\d.]+) hours \|", line)
        if row and row.group(1) in PATHS:
            found[row.group(1)] = (float(row.group(2)), float(row.group(3)))
    return found


def wrong_times(stated, computed):
    return [(name, s, round(c, 1)) for name, pair in stated.items()
            for s, c in zip(pair, computed[name][:2]) if abs(s - c) > TOLERANCE * c]


def test_the_chapter_map_lists_every_chapter_once_in_order():
    assert chapter_map(INTRO.read_text()) == list(range(1, CHAPTERS + 1))


def test_every_link_of_the_intro_points_to_a_page():
    assert not broken_links(INTRO.read_text())


def test_the_stated_reading_times_are_the_scripts():
    stated = stated_hours(INTRO.read_text())
    assert set(stated) == set(PATHS), f"the intro's table gives times for {sorted(stated)}"
    computed = reading_time.path_hours()
    assert not wrong_times(stated, computed), (
        f"the intro's reading times (path, stated, computed) are off by more than {TOLERANCE:.0%}: "
        f"{wrong_times(stated, computed)}; run scripts/reading_time.py and update book/intro.md")


def test_running_it_locally_means_make_lab_and_the_reader_notebooks():
    text = INTRO.read_text()
    assert "`make lab`" in text and "`reader/book/`" in text


@pytest.mark.parametrize("wrong", [
    "## Chapter map\n\n1. {doc}`01_scaled_dot_product_attention`: a\n3. **Three** (in preparation): c\n",
    "## Chapter map\n\n1. {doc}`02_why_sqrt_dk`: b\n2. {doc}`01_scaled_dot_product_attention`: a\n",
])
def test_the_checks_fail_on_an_intro_written_the_wrong_way(wrong):
    assert chapter_map(wrong) != list(range(1, len(chapter_map(wrong)) + 1))
    assert chapter_map("## Chapter map\n\n1. {doc}`01_a`: a\n2. **B** (in preparation): b\n") == [1, 2]
    assert broken_links("see {doc}`08_gpu_kernel`") == ["08_gpu_kernel"]
    table = "| core | 3.6 hours | 8.1 hours |\n| systems | 9.0 hours | 10.7 hours |"
    stated = stated_hours(table)
    assert wrong_times(stated, {"core": (3.5, 8.0), "systems": (5.6, 10.7)}) == [("systems", 9.0, 5.6)]
