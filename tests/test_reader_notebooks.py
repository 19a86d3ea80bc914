"""The reader notebooks (reader/book/, written by scripts/reader_notebooks.py from book/): what Colab's launch
button, the download button and a local Jupyter open. Their text must say what the website says, with no MyST left.
"""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from myst_nb.core.variables import format_plain_text  # the website's own formatting of glued values

# make portability does not re-run this file (see scripts/portability.py)
pytestmark = pytest.mark.machine_independent("compares the reader notebooks' text with the book's")

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("reader_notebooks", ROOT / "scripts" / "reader_notebooks.py")
R = importlib.util.module_from_spec(spec)
spec.loader.exec_module(R)

CHAPTERS = R.chapters()
IDS = [p.name for p in CHAPTERS]
# MyST that Jupyter and Colab would show as raw text
MYST_LEFT = [re.compile(r"\{[\w:-]+\}`"), re.compile(r"^\s*(?:`{3,}|:{3,})\s*\{[\w:-]+\}", re.MULTILINE),
             re.compile(r"^\s*:{3,}\s*$", re.MULTILINE), re.compile(r"^\s*\([\w:-]+\)=\s*$", re.MULTILINE),
             re.compile(r"\$\$\s*\([\w:-]+\)"), re.compile(r"^\s*:class:", re.MULTILINE)]


def load(path):
    return json.loads(path.read_text())


def reader(path):
    return load(R.READER / path.name)


def markdown(nb):
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def test_the_reader_notebooks_are_what_the_script_writes_from_the_book():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "reader_notebooks.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, ("reader/book/ is out of date: run `python scripts/reader_notebooks.py` and commit "
                                    "it\n" + result.stdout + result.stderr)


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_no_myst_role_or_directive_is_left(path):
    for index, text in enumerate(markdown(reader(path))):
        for pattern in MYST_LEFT:
            found = pattern.search(text)
            assert not found, f"{path.name}, Markdown cell {index}: MyST left: {text[max(0, found.start() - 60):found.end() + 60]!r}"


def test_the_check_finds_myst_where_there_is_some():
    assert all(any(p.search(s) for p in MYST_LEFT) for s in
               ["a {glue:text}`x:.2f` b", ":::{dropdown} Why\nbody\n:::", "```{note}\nx\n```", "(sec-a)=\n# A",
                "$$x$$ (eq-a)"])


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_same_code_cells_and_outputs_and_the_same_markdown_cells_in_order(path):
    book, read = load(path), reader(path)
    added = [c for c in read["cells"] if c.get("id") == "reader-references" or c.get("id", "").endswith("-note")]
    kept = [c for c in read["cells"] if c not in added]
    assert len(kept) == len(book["cells"])
    for a, b in zip(book["cells"], kept):
        assert (a["cell_type"], a.get("id")) == (b["cell_type"], b.get("id"))
        if a["cell_type"] == "code":
            hidden = bool(set(a["metadata"].get("tags", [])) & {"remove-input", "remove-cell"})
            assert b["metadata"].get("jupyter", {}).get("source_hidden", False) == hidden, (
                f"{path.name}: cell {a.get('id')}: its code should be collapsed in Jupyter exactly when the site hides it")
            b = json.loads(json.dumps(b))
            b["metadata"].get("jupyter", {}).pop("source_hidden", None)
            if b["metadata"].get("jupyter") == {}:
                b["metadata"].pop("jupyter")
            assert a == b  # source, outputs, tags: untouched
    assert "**Run this chapter:**" in markdown(read)[0] and f"`book/{path.name}`" in markdown(read)[0]
    assert "rocket" not in markdown(read)[0]  # the website's buttons are not in a notebook
    notes = [c for c in added if c.get("id", "").endswith("-note")]
    assert len(notes) == sum(1 for c in book["cells"] if R.is_panel_cell(c))
    assert read["metadata"]["kernelspec"] == book["metadata"]["kernelspec"]


def glue_checks(path):
    """(name, format, text the reader shows) for every glue role of a chapter, aligned cell by cell."""
    book, read = load(path), reader(path)
    kept = [c for c in read["cells"] if c.get("id") != "reader-references" and not c.get("id", "").endswith("-note")]
    chapter = R.Chapter(path, {}, R.equation_numbers(CHAPTERS), R.bibliography(), {})
    # the structure (opening box, targets, labelled equations, fences) as the script rewrites it; roles left
    found = []
    for a, b in zip(book["cells"], kept):
        if a["cell_type"] != "markdown":
            continue
        source = "".join(a["source"])
        structure = R.structure(source, chapter).rstrip("\n")
        pattern, roles = "", []
        for piece in re.split(r"(\{[\w:-]+\}`[^`]*`)", structure):
            role = re.fullmatch(r"\{([\w:-]+)\}`([^`]*)`", piece)
            if role is None:
                pattern += re.escape(piece)
            else:
                pattern += "(.+?)"
                roles.append(role.groups())
        match = re.fullmatch(pattern, "".join(b["source"]).rstrip("\n"), flags=re.DOTALL)
        assert match, f"{path.name}: a Markdown cell's text differs beyond its roles"
        for (kind, content), shown in zip(roles, match.groups()):
            if kind.startswith("glue"):
                name, _, fmt = content.partition(":") if kind == "glue:text" else (content, "", "")
                found.append((name, fmt, shown))
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_every_glued_number_is_the_value_the_book_glues(path):
    glued = {}
    for cell in load(path)["cells"]:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                data = output["data"]
                glued[name] = "".join(data.get("application/papermill.record/text/plain", data.get("text/plain")))
    source = "\n".join(markdown(load(path)))
    checks = glue_checks(path)
    assert len(checks) == len(re.findall(r"\{glue(?::text)?\}`", source))  # every one of them, none skipped
    for name, fmt, shown in checks:
        assert shown == format_plain_text(glued[name], fmt), (path.name, name, fmt, shown)
        number = re.fullmatch(r"-?[\d,]*(?:\.(\d+))?(?:[eE]([-+]?\d+))?%?", shown)
        if number and fmt and fmt[-1] in "fFeEgG%":  # the shown number is the glued one, rounded at its last digit
            value = float(glued[name]) * (100 if fmt.endswith("%") else 1)
            decimals, exponent = len(number.group(1) or ""), int(number.group(2) or 0)
            tolerance = 0.5 * 10.0 ** (exponent - decimals)
            assert abs(float(shown.replace(",", "").rstrip("%")) - value) <= tolerance * (1 + 1e-9), (name, shown, value)


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_citations_name_author_and_year_and_lead_to_the_reference(path):
    references = R.bibliography()
    source, text = "\n".join(markdown(load(path))), "\n".join(markdown(reader(path)))
    for keys in re.findall(r"\{cite:\w+\}`([^`]+)`", source):
        for key in (k.strip() for k in keys.split(",")):
            short, year, full = references[key]
            assert f"](#{R.anchor(key)})" in text and short.split()[0] in text and year in text
            assert f'<a id="{R.anchor(key)}"></a>' in text and year in full


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_links_to_chapters_open_reader_notebooks_that_exist(path):
    for target in re.findall(r"\]\(([\w.-]+\.ipynb)\)", "\n".join(markdown(reader(path)))):
        assert (R.READER / target).exists(), f"{path.name} links to {target}, which is not generated"


def test_equation_numbers_are_the_website_s():
    numbers = R.equation_numbers(CHAPTERS)
    assert numbers and len(set(numbers.values())) == len(numbers)  # one number per equation
    if not (R.SITE / "book").exists():
        pytest.skip("the website is not built (`make book`): equation numbers checked against the count only")
    for path in CHAPTERS:
        page = (R.SITE / "book" / f"{path.stem}.html").read_text()
        for label in {m["label"] for text in markdown(load(path)) for m in R.LABELLED_EQUATION.finditer(text)}:
            shown = re.search(rf'id="{R.label_id(label)}">\s*<span class="eqno">\(([^)]+)\)', page)
            assert shown and shown.group(1) == numbers[label], (path.name, label)


def test_the_launch_buttons_and_downloads_point_at_the_reader_notebooks():
    config = (ROOT / "_config.yml").read_text()
    assert re.search(r"^repository:(?:\n[ \t]+.*)*\n[ \t]+path_to_book:\s*\"?reader\"?\s*$", config, re.MULTILINE)
    for path in CHAPTERS:  # Colab opens <path_to_book>/<page>.ipynb
        assert (ROOT / "reader" / path.relative_to(ROOT)).exists()


def test_each_myst_construct_becomes_what_jupyter_renders():
    """The constructs the chapters use, and those a chapter may start using (dropdowns, admonitions)."""
    references = R.bibliography()
    key = next(iter(references))
    short, year, _ = references[key]
    chapter = R.Chapter(CHAPTERS[0], {"x": "0.123456", "n": "4096"}, {"eq-a": "7"}, references,
                        {CHAPTERS[1].stem: "2. Title"})
    source = ("(sec-a)=\n## A\n\n$$\ny = x \\label{eq-a}\n$$ (eq-a)\n\nBy {eq}`eq-a`, x = {glue:text}`x:.3f` and "
              "n = {glue:text}`n:,` {cite:p}`" + key + "`; {cite:t}`" + key + "` say so; see {doc}`"
              + CHAPTERS[1].stem + "` and {math}`d_k`.\n\n:::{dropdown} Why it holds\nBecause "
              "{glue:text}`x:.1%`.\n\n```{note}\nNested.\n```\n:::\n\n```{admonition} Proof\n:class: dropdown\n"
              "Done.\n```\n\n```{warning}\nCareful.\n```\n\n```python\nprint(1)\n```")
    text = chapter.markdown(source)
    assert not any(p.search(text) for p in MYST_LEFT), text
    assert "$$\ny = x \\tag{7}$$" in text and "By (7)," in text
    assert "x = 0.123 and n = 4,096" in text
    assert f"4,096 ([{short}, {year}](#{R.anchor(key)}));" in text and f"[{short} ({year})](#{R.anchor(key)}) say" in text
    assert f"[2. Title]({CHAPTERS[1].stem}.ipynb)" in text and "$d_k$" in text
    assert "<details>\n<summary>Why it holds</summary>\n\nBecause 12.3%." in text
    assert "> **Note**\n>\n> Nested." in text and "<summary>Proof</summary>\n\nDone." in text
    assert "> **Warning**\n>\n> Careful." in text
    assert "```python\nprint(1)\n```" in text  # a plain code block stays one
    assert chapter.cited == [key]
    with pytest.raises(ValueError, match="names nothing the chapter glues"):
        chapter.markdown("{glue:text}`missing`")
