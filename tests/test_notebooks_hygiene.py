"""Notebook hygiene that tests/test_book.py does not already check.

test_book.py checks the table of contents, execution order, stored outputs, the Colab cell, glue
names, and addresses/paths/timings in text/* outputs. This file adds:

- nbval markers (``# NBVAL_IGNORE_OUTPUT``, ``# NBVAL_SKIP``, ...) and nbval tags are spelled so that
  nbval recognises them (a marker nbval does not see, but test_book.py's substring check does, would
  silently switch off both checks), and each one carries a written reason;
- no stderr, no leaked object reprs, every ``plt.show()`` stored as an image, widget state stored;
- no timing metadata in cells, valid nbformat;
- machine-specific text that test_book.py's patterns miss, in every textual output (glued values too);
- the nbval sanitizer cannot hide a changed number;
- chapters appear in the table of contents in the order of their numbers.
"""

import configparser
import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
IDS = [p.name for p in NOTEBOOKS]

# nbval's comment markers (nbval/plugin.py: a comment line whose text, after '#', is exactly one of these)
MARKERS = {"NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION", "NBVAL_SKIP",
           "PYTEST_VALIDATE_IGNORE_OUTPUT"}
MARKERS_NEEDING_A_REASON = MARKERS - {"NBVAL_CHECK_OUTPUT"}
# nbval's metadata tags: the markers in lower case with '-', and 'raises-exception'
TAGS_NEEDING_A_REASON = {m.lower().replace("_", "-") for m in MARKERS_NEEDING_A_REASON} | {"raises-exception"}
REASON_WORDS = 3  # a reason is a comment of at least this many words


def load(path):
    return json.loads(path.read_text())


def code_cells(path):
    """(index among code cells, source text, cell) for every code cell."""
    cells = [c for c in load(path)["cells"] if c["cell_type"] == "code"]
    return [(i, "".join(c["source"]), c) for i, c in enumerate(cells)]


def comment(line):
    """The text of a comment line (without '#'), or None for a line that is not a comment."""
    stripped = line.strip()
    return stripped.lstrip("#").strip() if stripped.startswith("#") else None


def marker_lines(source):
    return [(n, comment(line)) for n, line in enumerate(source.splitlines()) if comment(line) in MARKERS]


def has_reason(source, cell=None):
    """True if a comment line other than a marker, or the cell's metadata ``nbval_reason`` (where
    scripts/page_cells.py moves it, out of the reader's sight), has at least REASON_WORDS words."""
    reason = (cell or {}).get("metadata", {}).get("nbval_reason", "")
    return len(re.findall(r"\w+", reason)) >= REASON_WORDS or any(
        text is not None and text not in MARKERS and len(re.findall(r"\w+", text)) >= REASON_WORDS
        for text in map(comment, source.splitlines())
    )


def ignored(cell, source):
    """True if nbval does not compare this cell's output (marker or tag)."""
    tags = set(cell.get("metadata", {}).get("tags", []))
    markers = {m for _, m in marker_lines(source)}
    return bool(markers & {"NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP", "PYTEST_VALIDATE_IGNORE_OUTPUT"}) \
        or bool(tags & {"nbval-ignore-output", "nbval-skip"})


def texts(output):
    """Every textual payload of an output: stream text, and every non-image, non-widget mime bundle entry."""
    if "text" in output:
        yield "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
    for mime, data in output.get("data", {}).items():
        if mime.startswith("image/") or mime == "application/vnd.jupyter.widget-view+json":
            continue
        yield "".join(data) if isinstance(data, list) else (data if isinstance(data, str) else json.dumps(data))


# ---------------------------------------------------------------- nbval markers and tags

@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_nbval_markers_are_spelled_so_that_nbval_sees_them(path):
    for index, source, _ in code_cells(path):
        for n, line in enumerate(source.splitlines()):
            text = comment(line)
            if re.search(r"\bNBVAL_\w*|PYTEST_VALIDATE_\w*", line) and text not in MARKERS:
                pytest.fail(f"{path.name}, code cell {index}, line {n + 1}: {line.strip()!r} is not a marker nbval "
                            f"recognises; write it alone on its own comment line, e.g. '# NBVAL_IGNORE_OUTPUT'")
            if text is not None and re.match(r"nbval[-_ ]", text, flags=re.IGNORECASE) and text not in MARKERS:
                pytest.fail(f"{path.name}, code cell {index}: {line.strip()!r} looks like an nbval marker but is "
                            f"not one (markers are upper case: {sorted(MARKERS)})")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_nbval_marker_and_tag_has_a_written_reason(path):
    for index, source, cell in code_cells(path):
        needing = [m for _, m in marker_lines(source) if m in MARKERS_NEEDING_A_REASON]
        needing += sorted(set(cell.get("metadata", {}).get("tags", [])) & TAGS_NEEDING_A_REASON)
        if needing and not has_reason(source, cell):
            pytest.fail(f"{path.name}, code cell {index}: {', '.join(needing)} without a reason; say why on the "
                        f"comment line after the marker, or in the cell metadata 'nbval_reason' (at least "
                        f"{REASON_WORDS} words)")


# ---------------------------------------------------------------- what the outputs may hold

@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_stderr_in_outputs(path):
    for index, source, cell in code_cells(path):
        if ignored(cell, source):
            continue
        for output in cell["outputs"]:
            if output["output_type"] == "stream" and output.get("name") == "stderr":
                text = "".join(output["text"])
                pytest.fail(f"{path.name}, code cell {index} wrote to stderr (a warning?): {text[:200]!r}")


OBJECT_REPR = re.compile(r"^\[?<[\w.]+( object)? at 0x|^\[?<matplotlib\.|^Text\(|^<Figure size|^<Axes", re.MULTILINE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_object_reprs_and_every_figure_stored_as_an_image(path):
    for index, source, cell in code_cells(path):
        if ignored(cell, source):
            continue
        images = [o for o in cell["outputs"] if {"image/png", "image/svg+xml"} & set(o.get("data", {}))]
        for output in cell["outputs"]:
            plain = "".join(output.get("data", {}).get("text/plain", ""))
            if output in images:
                continue  # a figure's text/plain fallback ('<Figure size ...>') next to its image is fine
            assert not OBJECT_REPR.search(plain), (
                f"{path.name}, code cell {index}: an object repr leaked into the output ({plain[:80]!r}); "
                f"end the cell with plt.show() or a ';'"
            )
        if re.search(r"^\s*plt\.show\(\)", source, flags=re.MULTILINE):
            assert images, f"{path.name}, code cell {index} calls plt.show() but stored no image"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_widget_state_is_stored_for_every_widget_shown(path):
    nb = load(path)
    state = nb["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for index, _, cell in code_cells(path):
        for output in cell["outputs"]:
            view = output.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            if view:
                assert view["model_id"] in state, (
                    f"{path.name}, code cell {index}: widget {view['model_id']} has no stored state; "
                    f"execute with scripts/execute_notebooks.py (store_widget_state=True)"
                )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_timing_metadata_and_valid_nbformat(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert "papermill" not in nb.metadata, f"{path.name}: papermill run metadata (durations, timestamps) stored"
    for index, cell in enumerate(nb.cells):
        stored = set(cell.get("metadata", {})) & {"execution", "ExecuteTime", "papermill"}
        assert not stored, f"{path.name}, cell {index}: run timings stored in the cell metadata: {sorted(stored)}"


# Patterns test_book.py does not cover (it checks /home/, /root/, /work/, /tmp/, site-packages, 0x addresses,
# ms/µs/ns timings and %time output, in text/* outputs only).
MACHINE_SPECIFIC = [
    (re.compile(r"(/home/|/root/|/work/|/tmp/|site-packages|C:\\\\)"), "a machine path"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|µs|us|ns)\b|\bWall time\b|\bCPU times\b"), "a timing"),
    (re.compile(r"(?<![\w.])/(usr|opt|Users|var|private|mnt|srv|scratch)/"), "a machine path"),
    (re.compile(r"(?<![\w\\])[A-Z]:\\(Users|Windows|Program Files|ProgramData)\b"), "a Windows path"),
    (re.compile(r"ipykernel_\d+|<ipython-input-"), "a kernel's temporary file name"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"), "a timestamp"),
    (re.compile(r"\b\d+\.\d+\s?(s|sec|seconds)\b|\bit/s\b|\bs/it\b"), "a timing in seconds"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}"), "a memory address"),
]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_machine_specific_text_in_any_output(path):
    for index, source, cell in code_cells(path):
        if ignored(cell, source):
            continue
        for output in cell["outputs"]:
            for text in texts(output):
                for pattern, what in MACHINE_SPECIFIC:
                    match = pattern.search(text)
                    assert not match, f"{path.name}, code cell {index}: {what} in the output: {match.group(0)!r}"


# ---------------------------------------------------------------- the sanitizer and the table of contents

def sanitizers():
    config = configparser.ConfigParser()
    config.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return {name: (re.compile(config[name]["regex"]), config[name]["replace"]) for name in config.sections()}


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def test_the_sanitizer_cannot_hide_a_number():
    rules = sanitizers()
    assert rules, "tests/nbval_sanitize.cfg has no sections"
    for name, (regex, replace) in rules.items():
        assert replace, f"sanitizer [{name}] has no replacement"
    samples = ["0.6698", "array([0.09  , 0.2447, 0.6652])", "[[1 0 0]\n [1 1 0]]", "d_model = 512, h = 8, 1050624",
               "-1.234e-05", "(3, 8) float32 True"]
    # and every number the notebooks actually print: sanitizing must leave them all in place
    for path in NOTEBOOKS:
        for _, source, cell in code_cells(path):
            if not ignored(cell, source):
                samples += [t for o in cell["outputs"] for t in texts(o)]
    for text in samples:
        cleaned = text
        for regex, replace in rules.values():
            cleaned = regex.sub(replace, cleaned)
        assert NUMBER.findall(cleaned) == NUMBER.findall(text), f"the sanitizer changes the numbers in {text[:120]!r}"


def test_chapters_are_listed_in_the_order_of_their_numbers():
    toc = (ROOT / "_toc.yml").read_text()
    entries = re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)", toc, flags=re.MULTILINE)
    numbers = [int(m.group(1)) for e in entries if (m := re.match(r"(\d+)_", Path(e).name))]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), f"chapter order in _toc.yml: {numbers}"


# ---------------------------------------------------------------- outputs that hold on any machine

# Every cell whose output nbval does not compare, by notebook and cell id, with what kind of cell it is.
# "claims" cells print results that depend on the machine (training amplifies each CPU's and BLAS's
# last-digit rounding; peak memory moves with the numpy version): each must assert, in the cell, what
# the text says of its numbers. "timing" cells time code on the reader's machine and claim nothing that a
# test could hold (speed targets live in the benchmarks). "panel" cells show a precomputed panel
# (mha_lessons/course/panels.py) whose PNG frames' bytes follow the matplotlib and Pillow versions; the cell before
# each prints the default state's numbers (chapter 4 asserts them), and tests/test_widgets_*.py check every state. Adding a cell here is a decision:
# first try to print fewer digits or a measure that does not sit on a knife's edge.
NOT_COMPARED = {
    ("02_why_sqrt_dk.ipynb", "scaling-panel"): "panel",
    ("03_multi_head_attention.ipynb", "multihead-panel"): "panel",
    ("04_cost.ipynb", "cost-explorer"): "panel",
    ("04_cost.ipynb", "timings-on-this-machine"): "timing",
    ("07_efficient_attention.ipynb", "peak-memory-measured"): "claims",
    ("07_efficient_attention.ipynb", "sliding-window-measured"): "claims",
    ("11_heads_across_processes.ipynb", "alpha-beta-fit"): "claims",
    ("11_heads_across_processes.ipynb", "decode-versus-prompt"): "claims",
    ("13_one_head_two_jobs.ipynb", "train-one-and-two-heads"): "claims",
    ("13_one_head_two_jobs.ipynb", "relation-scores-of-trained-heads"): "claims",
    ("13_one_head_two_jobs.ipynb", "one-head-equal-and-unequal-tokens"): "claims",
    ("13_one_head_two_jobs.ipynb", "one-head-whose-keys-see-tokens"): "claims",
    ("14_induction_heads.ipynb", "induction-train"): "claims",
    ("14_induction_heads.ipynb", "first-copy"): "claims",
    ("14_induction_heads.ipynb", "ablation-seeds"): "claims",
    ("15_real_model_heads.ipynb", "real-model-panel"): "panel",
}


def test_the_cells_nbval_does_not_compare_are_the_listed_ones_and_each_asserts_its_claims():
    import ast

    found = {}
    for path in NOTEBOOKS:
        for _, source, cell in code_cells(path):
            if ignored(cell, source):
                # scripts/page_cells.py moves a cell's glue lines into a cell '<id>-glue' right below it,
                # which nbval skips with its parent: one entry covers both, and the parent's asserts count
                key = re.sub(r"-glue$", "", cell.get("id") or "")
                found[path.name, key] = found.get((path.name, key), "") + "\n" + source
    assert set(found) == set(NOT_COMPARED), (
        f"not compared by nbval but not listed: {sorted(set(found) - set(NOT_COMPARED))}; "
        f"listed but compared (or gone): {sorted(set(NOT_COMPARED) - set(found))}")
    for key, kind in NOT_COMPARED.items():
        code = "\n".join(line for line in found[key].splitlines() if not line.lstrip().startswith(("%", "!")))
        asserts = [node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Assert)]
        if kind == "claims":
            assert asserts, f"{key}: its output is not compared, so the cell must assert what the text claims"


# glue (mha_lessons/course/notebook.py) stores floats to GLUE_DIGITS significant digits; the text may show fewer.
GLUE_FORMAT = re.compile(r"\{glue:text\}`([\w-]+)(?::([^`]*))?`")


def shown_digits(text):
    """Significant digits of a number as the page shows it: '0.00726' -> 3, '1.40' -> 3, '47%' -> 2."""
    mantissa = re.split(r"[eE]", text.strip().lstrip("-").rstrip("%").replace(",", ""))[0]
    return len(mantissa.replace(".", "").lstrip("0"))


def test_shown_digits_counts_what_a_reader_sees():
    assert [shown_digits(t) for t in ["0.00726", "1.40", "47%", "1.2e-07", "0.000", "1,050,624"]] == [3, 3, 2, 2, 0, 7]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_glued_float_is_shown_with_more_digits_than_glue_keeps(path):
    from mha_lessons.notebook import GLUE_DIGITS

    nb = load(path)
    stored = {}
    for _, _, cell in code_cells(path):
        for output in cell["outputs"]:
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                data = output["data"]
                stored[name] = "".join(next(v for k, v in data.items() if k.endswith("text/plain")))
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for name, spec in GLUE_FORMAT.findall(prose):
        value = stored.get(name)
        if value is None or not re.fullmatch(r"-?[\d.]+(e[-+]?\d+)?", value) or not re.search(r"[.e]", value):
            continue  # not a float (ints are exact; the glue-name test reports missing names)
        shown = format(float(value), spec) if spec else value
        assert shown_digits(shown) < GLUE_DIGITS, (
            f"{path.name}: {{glue:text}}`{name}{':' + spec if spec else ''}` shows {shown!r}, "
            f"{shown_digits(shown)} significant digits; glue keeps {GLUE_DIGITS}, and digits beyond about 4 "
            f"differ between machines")


def test_every_notebook_is_set_for_the_page_by_scripts_page_cells():
    """Glue cells hidden, nbval markers as tags, plotting cells collapsed, captions: scripts/page_cells.py has run
    on every notebook (its --check mode changes nothing and fails if a run would change a notebook)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "page_cells.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, (f"run `python scripts/page_cells.py` and re-execute the notebooks: "
                                    f"{result.stdout.strip().splitlines()[-1]}")
