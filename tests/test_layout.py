"""The package's layout: what the chapters name resolves, the floors import downwards only, the rooms stay small.

Nothing here runs a notebook: the chapters' code is read as Python (ast), so a move that breaks a
chapter's ``M.blockwise.merge_states`` fails here in seconds, not after nbval has run every chapter.
"""

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

import mha_lessons as M

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mha_lessons"
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "reader" / "book").glob("*.ipynb"))


# ---------------------------------------------------------------- what the chapters name


def _code_cells(path):
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            # IPython's magics and shell lines are not Python: blank them, keeping the line numbers
            yield re.sub(r"^\s*[%!].*$", "", source, flags=re.MULTILINE)


def _dotted(node):
    """``a.b.c`` as ["a", "b", "c"] for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return None


def package_references(source, aliases=None):
    """Every name of the package that ``source`` uses: dotted paths such as "mha_lessons.blockwise.merge_states".

    Follows ``import mha_lessons as M``, ``import mha_lessons.x``, ``from mha_lessons import x as P`` and
    ``from mha_lessons.x import a, b``, then every attribute chain on those names (``M.plotting.heatmap``,
    ``P.run``). ``aliases`` (name -> dotted path) carries the imports of earlier cells and is updated.

    >>> sorted(package_references("import mha_lessons as M\\nfrom mha_lessons import pretrained as P\\n"
    ...                           "M.plotting.heatmap(w); P.run(['a'])"))
    ['mha_lessons', 'mha_lessons.plotting.heatmap', 'mha_lessons.pretrained', 'mha_lessons.pretrained.run']
    """
    tree = _annotate_parents(ast.parse(source))
    aliases = {} if aliases is None else aliases
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "mha_lessons":
                    found.add(a.name)
                    aliases[a.asname or "mha_lessons"] = a.name if a.asname else "mha_lessons"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mha_lessons":
            for a in node.names:
                found.add(f"{node.module}.{a.name}")
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None), ast.Attribute):
            chain = _dotted(node)
            if chain and chain[0] in aliases:
                found.add(".".join([aliases[chain[0]]] + chain[1:]))
    return found


def resolve(dotted):
    """Import and look up ``dotted`` as a chapter would; return None when it resolves, else what failed.

    Modules are imported (``import mha_lessons.notebook``), then attributes looked up, down to the first
    object that is not a module (an attribute of a function or a class is the chapter's business).
    """
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        if not hasattr(obj, part):
            try:
                obj = importlib.import_module(".".join(parts[:i + 1]))
                continue
            except ImportError:
                return f"{'.'.join(parts[:i])} has no attribute {part!r}"
        obj = getattr(obj, part)
        if not isinstance(obj, type(M)):
            return None
    return None


def _annotate_parents(tree):
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    return tree


def _chapter_references():
    refs = {}
    for path in NOTEBOOKS:
        aliases = {}  # a notebook's imports hold in its later cells
        for source in _code_cells(path):
            try:
                found = package_references(source, aliases)
            except SyntaxError as error:  # a chapter whose code is not Python would fail nbval anyway
                pytest.fail(f"{path.relative_to(ROOT)}: a code cell does not parse: {error}")
            for ref in found:
                refs.setdefault(ref, set()).add(path.relative_to(ROOT).as_posix())
    return refs


def test_the_chapters_name_the_package_many_times():
    """The reader below must find the chapters' references, or the next test would pass vacuously."""
    refs = _chapter_references()
    assert len(NOTEBOOKS) >= 20
    assert {"mha_lessons.blockwise.merge_states", "mha_lessons.notebook.glue", "mha_lessons.plotting.heatmap",
            "mha_lessons.exercises.check_band_mask", "mha_lessons.pretrained.run"} <= set(refs)
    assert len(refs) > 200


def test_every_name_a_chapter_uses_resolves():
    failures = {ref: (resolve(ref), sorted(where)) for ref, where in _chapter_references().items()}
    failures = {ref: value for ref, value in failures.items() if value[0] is not None}
    assert not failures, "names the chapters use that the package no longer has:\n" + "\n".join(
        f"  {ref}: {why} (in {', '.join(where)})" for ref, (why, where) in sorted(failures.items()))
