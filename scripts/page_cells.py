"""Set every chapter notebook's cell tags and metadata so that the page shows the lesson, not the machinery.

Re-runnable and idempotent: a second run changes nothing. Run it after adding or merging notebooks, then
re-execute them (the split cells need fresh execution counts and outputs):

    python scripts/page_cells.py            # every notebook in book/
    python scripts/execute_notebooks.py

It appends ``M.plotting.use_course_style()`` to the cell that imports the package (one figure style, 2x PNGs).
What it does to each code cell (the first cell, the install cell, is left alone):

1. ``# NBVAL_IGNORE_OUTPUT`` / ``# NBVAL_SKIP`` comment markers become nbval's cell tags
   (``nbval-ignore-output`` / ``nbval-skip``); the comment lines that follow the marker, its written
   reason, move to the cell's metadata (``nbval_reason``), where tests/test_notebooks_hygiene.py reads it.
2. A block of whole-line comments that names a file under ``tests/`` moves to the metadata too
   (``hidden_comments``): the page is for the learner, the test suite is the maintainers' business.
3. A cell that only records values for the prose (every statement a ``glue(..., display=False)`` call)
   gets ``remove-input`` and ``remove-output``: it runs, but the page does not show it.
4. A cell that computes and records: its top-level ``glue(..., display=False)`` statements (and top-level
   ``for`` loops made of nothing else) move into a new
   cell just below it (tagged as in 3, id ``<id>-glue``, with its parent's nbval tags), when that is safe: no name the glue reads is
   assigned again after the glue line. Otherwise the cell is left as it is and reported.
5. A cell that draws a figure (``plt.show()``) is collapsed (``hide-input``) unless already hidden or removed.
6. A figure cell gets a numbered caption (``mystnb.figure.caption``): the one in CAPTIONS for its cell id,
   else the first clause of its alt text; the script never replaces a caption already there.
7. A cell that only calls ``show_source(...)`` shows its listing without the call (``remove-input``).

It reports cells it could not split and visible listing lines longer than LISTING_WIDTH characters.
nbval compares outputs cell by cell in order, so cell ids stay unchanged (tests/test_notebooks_hygiene.py's
NOT_COMPARED names cells by id) and a new cell gets a deterministic id derived from its parent's.

Usage: python scripts/page_cells.py [--check] [NOTEBOOK ...]
  --check   change nothing; exit 1 if a run would change a notebook
"""

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTING_WIDTH = 90
REMOVED = ["remove-input", "remove-output"]
MARKER_TAGS = {"NBVAL_IGNORE_OUTPUT": "nbval-ignore-output", "NBVAL_SKIP": "nbval-skip"}
HIDING_TAGS = {"hide-input", "hide-cell", "remove-input", "remove-cell"}

# Short captions that say what to see, for figure cells whose alt text does not start with one. A caption is
# Markdown: symbols in $...$, as in the text.
CAPTIONS = {
    "alpha-beta-fit": "Time of one all-reduce between two processes against its size, with the fitted latency-bandwidth model.",
    "induction-train": "Training the two-layer model: the loss on the repeated half falls as the two heads form.",
    "all-heads-grid": "All 72 heads of the model on one sentence, one heat map per layer and head.",
    "coreference-figure": "How much each head moves the weight of 'it' from 'street' to 'animal' between the two sentences.",
    "sinusoidal-positions-figure": "Sinusoidal position vectors: each pair of features turns more slowly than the last.",
    "85b04ffc": "The attention weights of four heads of width $d_k = 16$ over the same six tokens.",
    "09174c2c": "Measured time per forward pass against n, this package's layer and PyTorch's.",
    "565ec09f": "The size of the gradient through the softmax against the spread of the scores.",
    "0e4d7b21": "Bytes read per decoding step against the cached positions, for a model of LLaMA-65B's shape.",
    "650ccf8c": "Learned attention weights, with the positions each relation points to marked.",
    "b14ffdab": "The band mask of the exercise's solution.",
    "a1d6e5e4": "Entropy and largest weight of a softmax row against $d_k$, with and without the scale.",
    "d87b2d87": "Entropy and largest weight of a softmax row against $d_k$, scaled scores.",
    "aad0e0dc": "Scaled scores for $d_k = 64$ against the unit normal, and one row of softmax weights.",
    "0c55c026": "Attention weights on the lookup task: one head against two.",
    "9669eeb5": "Training with the numpy backward pass and with torch autograd: the same curves.",
    "8e349930": "The causal mask, and causal and padding combined for each sentence.",
    "9ee039c3": "Online softmax: the running maximum over blocks of keys, and the rescaled sums.",
    "dbad96bb": "Blockwise attention, one tile at a time.",
    "8c49e53c": "Peak memory of plain and blockwise attention against n, and their ratio of times.",
    "cf3b48af": "Decoding with and without a key/value cache: what each step computes.",
    "526fb4fb": "Multi-head, grouped-query and multi-query attention: query heads and their key/value heads.",
    "d2e25645": "Two workers split a layer by heads and sum their partial outputs once.",
    "af9ba2d2": "Held-out accuracy during training, one head against two.",
    "one-head-whose-keys-see-tokens": "One head whose keys see tokens: accuracy where the relations differ.",
}


def source(cell):
    return "".join(cell["source"])


def set_source(cell, text):
    lines = text.splitlines(keepends=True)
    cell["source"] = lines


def comment_text(line):
    stripped = line.strip()
    return stripped.lstrip("#").strip() if stripped.startswith("#") else None


def tags_of(cell):
    """The cell's tag list, created if missing (process() drops it again when it stays empty)."""
    return cell.setdefault("metadata", {}).setdefault("tags", [])


def tag_set(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def add_tags(cell, *new):
    tags = tags_of(cell)
    for tag in new:
        if tag not in tags:
            tags.append(tag)


def move_nbval_markers(cell):
    """Markers to tags; the reason (the comment lines right after the marker) to metadata."""
    lines = source(cell).splitlines(keepends=True)
    kept, i, changed = [], 0, False
    while i < len(lines):
        text = comment_text(lines[i])
        if text in MARKER_TAGS:
            add_tags(cell, MARKER_TAGS[text])
            reason = []
            i += 1
            while i < len(lines) and comment_text(lines[i]) and comment_text(lines[i]) not in MARKER_TAGS:
                reason.append(comment_text(lines[i]))
                i += 1
            if reason:
                words = " ".join(reason).strip()
                if words.startswith("(") and words.endswith(")"):
                    words = words[1:-1]
                previous = cell["metadata"].get("nbval_reason")
                cell["metadata"]["nbval_reason"] = f"{previous} {words}" if previous else words
            changed = True
            continue
        kept.append(lines[i])
        i += 1
    if changed:
        set_source(cell, "".join(kept))
    return changed


def hide_test_comments(cell):
    """Move blocks of whole-line comments that name a tests/ file into metadata (hidden_comments)."""
    lines = source(cell).splitlines(keepends=True)
    blocks, start = [], None
    for n, line in enumerate(lines + ["\n"]):
        if comment_text(line) is not None and start is None:
            start = n
        elif comment_text(line) is None and start is not None:
            blocks.append((start, n))
            start = None
    drop = set()
    for a, b in blocks:
        if any(re.search(r"\btests/", lines[k]) for k in range(a, b)):
            drop.update(range(a, b))
    if not drop:
        return False
    hidden = cell["metadata"].setdefault("hidden_comments", [])
    hidden.extend(comment_text(lines[k]) for k in sorted(drop))
    set_source(cell, "".join(line for k, line in enumerate(lines) if k not in drop))
    return True


def is_hidden_glue(node):
    """True for a statement ``glue(..., display=False)`` (or ``M.notebook.glue``)."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name != "glue":
        return False
    return any(k.arg == "display" and isinstance(k.value, ast.Constant) and k.value.value is False
               for k in node.value.keywords)


def is_glue_block(node):
    """A hidden glue call, or a ``for`` loop whose body is nothing but hidden glue calls."""
    if is_hidden_glue(node):
        return True
    return isinstance(node, ast.For) and not node.orelse and all(is_hidden_glue(b) for b in node.body)


def parse(text):
    """The module's AST with magics blanked out (line numbers kept), or None."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines())
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def assigned_names(nodes):
    names = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                names.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return names


def read_names(node):
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)}


def split_glue(cell, notes, where):
    """Return the new glue-only cell split off ``cell``, or None (and a note when unsafe)."""
    text = source(cell)
    tree = parse(text)
    if tree is None or not tree.body:
        return None
    body = tree.body
    glues = [k for k, node in enumerate(body) if is_glue_block(node)]
    if not glues:
        if "glue(" in text and "display=False" in text:
            notes.append(f"{where}: glue(..., display=False) not at the top level; left in place")
        return None
    if len(glues) == len(body):
        if not set(REMOVED) <= tag_set(cell):
            add_tags(cell, *REMOVED)
            return "tagged"
        return None
    for k in glues:
        rest = [n for j, n in enumerate(body) if j > k and j not in glues]
        clash = read_names(body[k]) & assigned_names(rest)
        if isinstance(body[k], ast.For):  # the loop's own variables must not be read after it
            clash |= assigned_names([body[k].target]) & set().union(*map(read_names, rest))
        if clash:
            notes.append(f"{where}: not split, {sorted(clash)} assigned again after its glue line")
            return None
    lines = text.splitlines(keepends=True)
    glue_lines = set()
    for k in glues:
        node = body[k]
        glue_lines.update(range(node.lineno - 1, node.end_lineno))
    kept = "".join(line for n, line in enumerate(lines) if n not in glue_lines).rstrip("\n")
    moved = "".join(lines[n] for n in sorted(glue_lines)).rstrip("\n")
    set_source(cell, kept)
    glue_outputs = [o for o in cell.get("outputs", []) if o.get("metadata", {}).get("scrapbook")]
    cell["outputs"] = [o for o in cell.get("outputs", []) if not o.get("metadata", {}).get("scrapbook")]
    # nbval skips the new cell's outputs when it skips its parent's (the hygiene test lists both under one entry)
    inherited = [t for t in tag_set(cell) if t in MARKER_TAGS.values()]
    metadata = {"tags": list(REMOVED) + sorted(inherited)}
    if inherited:
        metadata["nbval_reason"] = cell["metadata"].get("nbval_reason") or "the cell above says why"
    new = {"cell_type": "code", "execution_count": None, "id": f"{cell.get('id', 'cell')}-glue"[:64],
           "metadata": metadata, "outputs": glue_outputs, "source": []}
    set_source(new, moved)
    return new


def only_shows_source(cell):
    """True for a cell whose every statement is a ``show_source(...)`` call: its output is the listing."""
    tree = parse(source(cell))
    nodes = tree.body if tree is not None else []
    return bool(nodes) and all(
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
        and getattr(node.value.func, "id", getattr(node.value.func, "attr", None)) == "show_source"
        for node in nodes)


def draws_figure(cell):
    return bool(re.search(r"^\s*plt\.show\(\)", source(cell), flags=re.MULTILINE)) or any(
        "image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {}) for o in cell.get("outputs", []))


def caption_for(cell):
    if cell.get("id") in CAPTIONS:
        return CAPTIONS[cell["id"]]
    alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")
    first = re.split(r"(?<=[a-z0-9)])[.:;]\s", alt.strip(), maxsplit=1)[0].strip().rstrip(".")
    if len(first.split()) < 4 or len(first) > 120 or first.lower().startswith(("left", "first")):
        return None
    return first + "."


STYLE_LINE = "M.plotting.use_course_style()   # the course's figure style, sharp on any screen"


def ensure_figure_style(cells, name, notes):
    """Append STYLE_LINE to the cell that imports mha_lessons as M, once per notebook."""
    if any(re.search(r"^M\.plotting\.use_course_style\(", source(c), flags=re.MULTILINE) for c in cells):
        return
    for cell in cells:
        if cell["cell_type"] == "code" and re.search(r"^import mha_lessons as M\b", source(cell), flags=re.MULTILINE):
            set_source(cell, source(cell).rstrip("\n") + "\n" + STYLE_LINE)
            return
    notes.append(f"{name}: no 'import mha_lessons as M' cell, so no figure style applied")


def process(nb, name, notes):
    cells, out = nb["cells"], []
    ensure_figure_style(cells, name, notes)
    code_seen = 0
    for cell in cells:
        out.append(cell)
        if cell["cell_type"] != "code":
            continue
        code_seen += 1
        if code_seen == 1:
            continue  # the install cell (tests/test_book.py checks it is first and identical everywhere)
        where = f"{name}, cell {cell.get('id')}"
        move_nbval_markers(cell)
        hide_test_comments(cell)
        new = split_glue(cell, notes, where)
        if isinstance(new, dict):
            out.append(new)
        tags = tag_set(cell)
        if only_shows_source(cell) and not tags & HIDING_TAGS:
            add_tags(cell, "remove-input")  # the listing it prints is the lesson; the call is not
        if draws_figure(cell):
            if not tags & HIDING_TAGS:
                add_tags(cell, "hide-input")
            figure = cell["metadata"].setdefault("mystnb", {}).setdefault("figure", {})
            if "caption" not in figure:
                caption = caption_for(cell)
                if caption:
                    figure["caption"] = caption
                else:
                    notes.append(f"{where}: a figure without a caption; add one to CAPTIONS")
                    cell["metadata"]["mystnb"].pop("figure")
        if "tags" in cell["metadata"] and not cell["metadata"]["tags"]:
            cell["metadata"].pop("tags")
        if not tag_set(cell) & HIDING_TAGS:
            wide = [n + 1 for n, line in enumerate(source(cell).splitlines()) if len(line) > LISTING_WIDTH]
            if wide:
                notes.append(f"{where}: {len(wide)} visible lines wider than {LISTING_WIDTH} characters "
                             f"(lines {', '.join(map(str, wide))})")
    nb["cells"] = out
    return nb


def main(argv):
    check = "--check" in argv
    paths = [Path(p) for p in argv if p != "--check"] or sorted((ROOT / "book").glob("*.ipynb"))
    changed, notes = [], []
    for path in paths:
        before = path.read_text()
        nb = process(json.loads(before), path.name, notes)
        after = json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
        if after != before:
            changed.append(path.name)
            if not check:
                path.write_text(after)
    for note in notes:
        print("note:", note)
    print(("would change: " if check else "changed: ") + (", ".join(changed) or "nothing"))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
