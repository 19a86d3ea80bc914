"""The chapters use the symbols of the notation page, book/notation.md.

The page is a Markdown table (symbol | meaning | shape or type | first used | in the code). These tests read the
symbols from it, not from this file, and check the chapters' Markdown where a check can be made mechanically:

- the page itself gives every symbol one meaning, and its "first used" links point at pages that exist;
- heads are indexed with the page's head index, never with its query index ("head $i$", $\\text{head}_i$, $Q^{(i)}$);
- the head widths are spelled as on the page ($d_k$, $d_v$), and no width hides behind a bare $d$;
- the page's key count ($m$) counts keys, and is not also a running maximum ($m_t$) or anything else subscripted;
- letters the page gives no meaning of their own (a bare $L$ or $M$) do not appear in the chapters' math.

Each check is a function of the text, and the last test feeds each one a line written the wrong way, so that a
check that can no longer fail is caught too.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
NOTATION = BOOK / "notation.md"
PAGES = sorted(BOOK.glob("*.ipynb")) + [BOOK / "intro.md"]

MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+(?:\n[^$\n]+)*\$", re.S)


def table_rows(text):
    """The rows of the page's tables: dicts with the row's symbols (without $) and its other columns."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] == "symbol":
            continue
        symbols = [s.strip() for s in re.findall(r"\$([^$]+)\$", cells[0])]
        assert symbols, f"notation.md: a row without a symbol in $...$: {line}"
        rows.append(dict(zip(("symbol", "meaning", "shape", "first", "code"), cells), symbols=symbols))
    return rows


def symbol(rows, meaning):
    """The first symbol of the one row whose meaning starts with ``meaning``."""
    found = [r for r in rows if r["meaning"].startswith(meaning)]
    assert len(found) == 1, f"notation.md has {len(found)} rows whose meaning starts with {meaning!r}"
    return found[0]["symbols"][0]


def prose(path):
    """The Markdown of a chapter (or .md page) without code: fenced blocks, inline code and roles removed."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    return re.sub(r"(\{[\w:-]+\})?`[^`]*`", " ", text)


def maths(text):
    return [m.group() for m in MATH.finditer(text)]


# ---- the checks: each returns the offending snippets of a text -------------------------------------------------

def heads_indexed_by(text, letter, *, plain_words=False):
    """Places where a head is indexed with ``letter``: "head $ℓ$", \\text{head}_ℓ, ^{(ℓ)}; with ``plain_words``
    also "head i" written without math."""
    x = re.escape(letter)
    found = re.findall(rf"[Hh]eads?\s+\${x}\$" + (rf"|[Hh]eads? {x}\b(?!['’-])" if plain_words else ""), text)
    for m in maths(text):
        found += re.findall(rf"\\text\{{head\}}_\{{?{x}\b|\^\{{\({x}\)", m)
    return found


def head_index_misuses(text, head, query):
    """Places where a head is indexed with the query index."""
    return heads_indexed_by(text, query, plain_words=True)


def head_index_uses(text, head):
    return heads_indexed_by(text, head)


def width_misuses(text):
    """Head widths spelled otherwise than d_k, d_v (d_{k}, d_\\text{k}, d_K, d_head), and a bare d used as a width."""
    found = []
    for m in maths(text):
        found += re.findall(r"d_(?:\{\s*[kv]\s*\}|\\(?:text|mathrm|rm)\s*\{\s*[kv]\s*\}|[KV](?!\w)|\{?\\?\w*\{?head)", m)
        # a bare d: not a subscripted width, not the gradient prefix of dX, d\tilde S, d(K^T), not \frac{d}{dx}
        found += [m for _ in re.finditer(r"(?<![\w\\{])d(?![\w{}\\(])", m)]
    return found


def key_count_misuses(text, keys):
    """The key count with a subscript of its own (m_t, m_0: another quantity) or called a running maximum."""
    k = re.escape(keys)
    found = re.findall(rf"running maximum \${k}\b", text)
    for m in maths(text):
        found += re.findall(rf"(?<![\w\\]){k}_(?!\\text\{{blk\}})\{{?[\w\\]+\}}?", m)
    return found


def bare_letter_uses(text, letter):
    """A letter standing alone in math (not \\mathcal L, not inside a word, a subscript or a command)."""
    return [m for m in maths(text) for _ in re.finditer(rf"(?<!\\mathcal )(?<![\w\\{{]){letter}(?![\w])", m)]


# ---- the tests ---------------------------------------------------------------------------------------------------

ROWS = table_rows(NOTATION.read_text())
TEXTS = {path.name: prose(path) for path in PAGES}
IDS = list(TEXTS)


def test_the_page_gives_every_symbol_one_meaning_and_links_to_pages_that_exist():
    assert len(ROWS) > 50, "the notation page's table is missing or was not parsed"
    seen = {}
    for row in ROWS:
        for s in row["symbols"]:
            assert s not in seen, f"notation.md lists {s} twice: {seen[s]!r} and {row['meaning']!r}"
            seen[s] = row["meaning"]
        for doc in re.findall(r"\{doc\}`([\w-]+)`", row["first"]):
            assert any((BOOK / f"{doc}{ext}").exists() for ext in (".ipynb", ".md")), f"no page {doc} ({row['symbol']})"
    assert symbol(ROWS, "index of a head") != symbol(ROWS, "index of a query")


def test_the_intro_links_to_the_page_and_the_toc_lists_it_before_the_references():
    assert "{doc}`notation`" in (BOOK / "intro.md").read_text()
    toc = (ROOT / "_toc.yml").read_text()
    assert 0 <= toc.index("book/notation") < toc.index("book/references")


@pytest.mark.parametrize("name", IDS)
def test_heads_are_indexed_with_the_pages_head_index(name):
    head, query = symbol(ROWS, "index of a head"), symbol(ROWS, "index of a query")
    misuses = head_index_misuses(TEXTS[name], head, query)
    assert not misuses, f"{name}: heads indexed with the query index {query}: {misuses[:5]}"


def test_the_head_index_of_the_page_is_the_one_the_book_uses():
    head = symbol(ROWS, "index of a head")
    users = [name for name, text in TEXTS.items() if head_index_uses(text, head)]
    assert len(users) >= 4, f"only {users} index heads with {head}, the page's head index"


def test_the_head_widths_are_those_of_the_page():
    assert symbol(ROWS, "width of a query and of a key") == "d_k"
    assert symbol(ROWS, "width of a value") == "d_v"
    for width, at_least in (("d_k", 8), ("d_v", 4)):
        users = [name for name, text in TEXTS.items() if any(re.search(rf"{width}(?!\w)", m) for m in maths(text))]
        assert len(users) >= at_least, f"{width} appears in the math of {users} only"


@pytest.mark.parametrize("name", IDS)
def test_no_width_is_spelled_otherwise(name):
    misuses = width_misuses(TEXTS[name])
    assert not misuses, f"{name}: widths not written as the notation page writes them: {misuses[:5]}"


@pytest.mark.parametrize("name", IDS)
def test_the_key_count_means_only_the_key_count(name):
    keys = symbol(ROWS, "number of keys")
    misuses = key_count_misuses(TEXTS[name], keys)
    assert not misuses, f"{name}: {keys} (the number of keys) used for something else: {misuses[:5]}"


def test_the_key_count_and_the_running_maximum_are_the_pages():
    keys = symbol(ROWS, "number of keys")
    assert any(re.search(rf"\${re.escape(keys)}\$ keys", t) for t in TEXTS.values()), f"no '${keys}$ keys' anywhere"
    running_max = symbol(ROWS, "running maximum")
    assert running_max != keys and not running_max.startswith(f"{keys}_")
    blockwise = TEXTS["07_efficient_attention.ipynb"]
    assert any(running_max in m for m in maths(blockwise)), f"chapter 7 does not write the running maximum {running_max}"


@pytest.mark.parametrize("name", IDS)
def test_letters_without_a_meaning_on_the_page_are_not_used(name):
    unused = [letter for letter in ("L", "M") if not any(letter in r["symbols"] for r in ROWS)]
    assert unused == ["L", "M"], "the page now defines L or M: decide what the check should allow"
    assert symbol(ROWS, "the loss") == r"\mathcal L"
    for letter in unused:
        misuses = bare_letter_uses(TEXTS[name], letter)
        assert not misuses, f"{name}: ${letter}$ has no meaning on the notation page: {misuses[:5]}"


def test_each_check_fails_on_a_line_written_the_wrong_way():
    head, query = symbol(ROWS, "index of a head"), symbol(ROWS, "index of a query")
    keys = symbol(ROWS, "number of keys")
    assert head_index_misuses("the weights of head $i$ sum to one", head, query)
    assert head_index_misuses("where head i takes features", head, query)
    assert head_index_misuses(r"$\text{head}_i = \operatorname{Attention}(Q^{(i)}, K^{(i)}, V^{(i)})$", head, query)
    assert not head_index_misuses(r"head $\ell$ reads $Q^{(\ell)}$; query $i$ of head $\ell$", head, query)
    assert head_index_uses(r"head $\ell$ reads $Q^{(\ell)}$", head)
    assert width_misuses("heads of width $d = 64$") and width_misuses(r"$8 n d^2$") and width_misuses("$d_{k}$")
    assert width_misuses(r"$d_\text{head}$") and width_misuses("$d_K$")
    assert not width_misuses(r"$dQ = dS\, K$, $d\tilde S$, $d(K^\top)$, $\frac{d}{dx}$, $d_k$, $d_\text{model}$")
    assert key_count_misuses("keeps a running maximum $m$ and a running sum", keys)
    assert key_count_misuses(r"$m_t = \max(m_{t-1}, s_j)$", keys)
    assert not key_count_misuses(r"$m$ keys in blocks of $m_\text{blk}$, $n \times m$", keys)
    assert bare_letter_uses(r"$\partial L / \partial w$", "L") and bare_letter_uses("$e^{s_j - M}$", "M")
    assert not bare_letter_uses(r"$\partial \mathcal L / \partial w$, $N_\text{layers}$", "L")
