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


# ---------------------------------------------------------------- floors: core <- lessons <- course

# The core: what every lesson builds on. The lessons: every other module at the top of the package.
# The course's machinery: mha_lessons/course/. Imports point down only, never up a floor.
CORE = {"_checks", "attention", "params", "multihead", "grads", "torch_bridge", "gradcheck"}
# Not imported at the top of a core or lesson module: presentation belongs to course/, and optional
# dependencies are imported inside the functions that need them, so that numpy alone runs the lessons.
HEAVY = {"matplotlib", "ipywidgets", "IPython", "PIL", "torch", "scipy", "transformers", "safetensors", "tokenizers"}
# Lessons whose subject is a torch program (chapter 8's Triton kernel and its input checks): torch at their top is
# what they teach. No other module imports them at its top, so `import mha_lessons` still loads numpy alone.
TORCH_LESSONS = {"mha_lessons.triton_attention", "mha_lessons._torch_checks", "mha_lessons._triton_runtime"}
MAX_LINES = 330  # "no module above about 300 lines": a module this long has two jobs


def _modules():
    """(dotted name, floor, path) of every module of the package; floor 0 core, 1 lessons, 2 course."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(("mha_lessons",) + parts)
        floor = 2 if parts[:1] == ("course",) else 0 if parts and parts[0] in CORE else 1
        if not parts:
            floor = 0  # mha_lessons/__init__.py: it imports the core only (and makes the course's aliases)
        yield name, floor, path


def _floor_of(dotted):
    parts = dotted.split(".")[1:]
    if parts[:1] == ["course"] or (parts and parts[0] in M._COURSE):
        return 2
    return 0 if not parts or parts[0] in CORE else 1


def _imports(path, name):
    """(line, imported module, at the module's top level) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
                names = [f"{module}.{a.name}" for a in node.names] if not node.module else [module]
            else:
                names = [node.module]
            for module in names:
                yield node.lineno, module, id(node) in top


def test_the_floors_are_what_this_test_says():
    floors = {name: floor for name, floor, _ in _modules()}
    assert floors["mha_lessons.multihead"] == 0 and floors["mha_lessons.blockwise"] == 1
    assert floors["mha_lessons.course.plotting"] == 2 and floors["mha_lessons.course.exercises.ch01"] == 2
    assert CORE <= {name.split(".")[1] for name in floors if name.count(".") == 1}, "a core module was renamed"


def test_imports_point_down_the_floors_only():
    upward = []
    for name, floor, path in _modules():
        for line, module, _ in _imports(path, name):
            if module.split(".")[0] == "mha_lessons" and _floor_of(module) > floor:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not upward, "imports up a floor (core <- lessons <- course):\n" + "\n".join(upward)


def test_no_core_or_lesson_module_imports_a_heavy_library_at_its_top():
    heavy = []
    for name, floor, path in _modules():
        if floor < 2 and name not in TORCH_LESSONS:
            heavy += [f"{path.relative_to(ROOT)}:{line} imports {module} at its top"
                      for line, module, at_top in _imports(path, name) if at_top and module.split(".")[0] in HEAVY]
    assert not heavy, "\n".join(heavy)
    importers = [f"{path.relative_to(ROOT)}:{line} imports {module} at its top" for name, _, path in _modules()
                 if name not in TORCH_LESSONS
                 for line, module, at_top in _imports(path, name) if at_top and module in TORCH_LESSONS]
    assert not importers, "\n".join(importers)


def test_the_floor_checks_can_fail(tmp_path):
    """The two checks above read imports correctly: an upward and a heavy import are found where they are."""
    path = tmp_path / "blockwise.py"
    path.write_text("import torch\nfrom .course import plotting\nfrom ..attention import softmax\n\n"
                    "def f():\n    import matplotlib\n")
    found = list(_imports(path, "mha_lessons.blockwise"))
    assert found == [(1, "torch", True), (2, "mha_lessons.course.plotting", True), (3, "attention", True),
                     (6, "matplotlib", False)] or found[:2] == [(1, "torch", True), (2, "mha_lessons.course", True)]
    assert _floor_of("mha_lessons.course.plotting") == 2 and _floor_of("mha_lessons.plotting") == 2
    assert _floor_of("mha_lessons.attention") == 0 and _floor_of("mha_lessons.scaling") == 1


def test_no_module_is_long_enough_to_hold_two_jobs():
    long = {str(path.relative_to(ROOT)): n for _, _, path in _modules()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines; split them by responsibility: {long}"
