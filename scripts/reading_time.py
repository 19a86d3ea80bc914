"""Estimate how long each chapter and each path through the book takes, from its words and cells.

The intro (book/intro.md) quotes these estimates; tests/test_intro.py checks that it still does. The rule:

- **a first pass**: the main line (Markdown outside dropdowns, as tests/test_main_line.py counts it) read at
  READING_WPM words a minute, plus MINUTES_PER_CELL for every code cell the page shows (code to read, an output
  to look at, in Jupyter a cell to run);
- **everything**: the same, plus the deep dives (the words inside dropdowns) at the same rate, and
  MINUTES_PER_EXERCISE for every exercise (``**Exercise N`` in the Markdown).

READING_WPM is a slow reading speed, for text with equations that one follows rather than skims; the two
constants for cells and exercises are rough guesses, stated so that a reader can scale the result to their own pace.

Usage: python scripts/reading_time.py     (a table of chapters and paths, in hours)
"""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_main_line import DISPLAY_MATH, CODE, DROPDOWN, main_line  # noqa: E402  the main line, counted as there

READING_WPM = 100
MINUTES_PER_CELL = 1.0
MINUTES_PER_EXERCISE = 15.0
HIDDEN = {"remove-cell", "remove-input", "hide-cell"}

# The paths the intro offers, by final chapter number; a number whose file does not exist yet is left out.
PATHS = {"core": [1, 2, 3, 5], "systems": [4, 6, 7, 8, 9, 10, 11, 12], "interpretability": [13, 14, 15]}


def chapter_files():
    """{chapter number: notebook path} for the chapters that exist."""
    return {int(p.name[:2]): p for p in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))}


def counts(path):
    """(main-line words, deep-dive words, code cells shown, exercises) of one chapter."""
    cells = json.loads(path.read_text())["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    main = sum(len(main_line(m).split()) for m in markdown)
    folded = sum(len(CODE.sub(" ", DISPLAY_MATH.sub(" ", block.group())).split())
                 for m in markdown for block in DROPDOWN.finditer(m))
    shown = sum(1 for c in cells[1:] if c["cell_type"] == "code"
                and not HIDDEN & set(c.get("metadata", {}).get("tags", [])))
    exercises = sum(len(re.findall(r"\*\*Exercise \d+", m)) for m in markdown)
    return main, folded, shown, exercises


def minutes(path):
    """(first pass, everything) in minutes."""
    main, folded, shown, exercises = counts(path)
    first = main / READING_WPM + shown * MINUTES_PER_CELL
    return first, first + folded / READING_WPM + exercises * MINUTES_PER_EXERCISE


def path_hours():
    """{path: (first pass, everything, chapters counted)}, in hours."""
    files = chapter_files()
    result = {}
    for name, numbers in PATHS.items():
        present = [n for n in numbers if n in files]
        times = [minutes(files[n]) for n in present]
        result[name] = (sum(t[0] for t in times) / 60, sum(t[1] for t in times) / 60, present)
    return result


def main():
    print(f"{'chapter':<36}{'main':>6}{'deep':>6}{'cells':>6}{'ex.':>4}{'first h':>9}{'all h':>7}")
    for number, path in chapter_files().items():
        main_words, folded, shown, exercises = counts(path)
        first, everything = minutes(path)
        print(f"{path.stem:<36}{main_words:>6}{folded:>6}{shown:>6}{exercises:>4}{first / 60:>9.1f}{everything / 60:>7.1f}")
    for name, (first, everything, present) in path_hours().items():
        print(f"path {name:<17} chapters {present}: first pass {first:.1f} h, everything {everything:.1f} h")


if __name__ == "__main__":
    main()
