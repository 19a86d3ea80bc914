"""The chapters use the symbols of the notation page, book/notation.md.

The page is a Markdown table (symbol | meaning | shape or type | first used | in the code). These tests read the
symbols from it, not from this file, and check the chapters' Markdown where a check can be made mechanically:

- the page itself gives every symbol one meaning, and its "first used" links point at pages that exist;
- heads are indexed with the page's head index, never with its query index ("head $i$", $\\text{head}_i$, $Q^{(i)}$);
- the head widths are spelled as on the page ($d_k$, $d_v$), and no width hides behind a bare $d$;
- the page's key count ($m$) counts keys, and is not also a running maximum ($m_t$) or anything else subscripted;
- letters the page gives no meaning of their own (a bare $L$ or $M$) do not appear in the chapters' math;
- every symbol a page's math uses is listed on the notation page (``unlisted_symbols``; its docstring states the
  rule, so that a chapter that adds a symbol knows what row to add).

Each check is a function of the text, and the last test feeds each one a line written the wrong way, so that a
check that can no longer fail is caught too.
"""

import json
import re
from pathlib import Path

import pytest

# make portability does not re-run this file (see scripts/portability.py)
pytestmark = pytest.mark.machine_independent("reads the notation page and the chapters' Markdown")

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


# ---- every symbol in the math is on the page -------------------------------------------------------------------

GREEK = set("""alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi varpi rho
varrho sigma varsigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega
ell""".split())
FONTS = {"mathcal", "mathbb", "mathtt", "mathbf", "boldsymbol", "mathsf", "mathfrak"}  # \mathcal L is one symbol
# \tilde s is one symbol
ACCENTS = {"tilde", "hat", "bar", "widetilde", "widehat", "overline", "vec", "dot", "check", "breve"}
WORDS = {"text", "mathrm", "textrm", "rm", "textit", "mathit"}  # words: a symbol only as \text{mask}_{ij}
SKIPPED = {"begin", "end", "operatorname", "label", "tag", "mbox", "hbox", "textbf", "color"}  # names, not symbols


def _group(s, k):
    """(content, end) of the {...} group that starts at s[k], or of the one token there."""
    while k < len(s) and s[k] == " ":
        k += 1
    if k < len(s) and s[k] == "{":
        depth = 0
        for end in range(k, len(s)):
            depth += {"{": 1, "}": -1}.get(s[end], 0)
            if depth == 0:
                return s[k + 1:end], end + 1
        return s[k + 1:], len(s)
    if k < len(s) and s[k] == "\\":
        command = re.match(r"\\([A-Za-z]+|.)", s[k:])
        end = k + command.end()
        if command.group(1) in WORDS | FONTS:
            argument, end = _group(s, end)
            return f"\\{command.group(1)}{{{argument}}}", end
        return command.group(), end
    return s[k:k + 1], k + 1


def _tokens(math, subscript):
    """The symbols of a piece of math, each normalised by ``subscript(base, sub)``."""
    s = math.strip("$")
    found, k = [], 0
    while k < len(s):
        base = None
        if s[k] == "\\":
            command = re.match(r"\\([A-Za-z]+|.)", s[k:])
            name, k = command.group(1), k + command.end()
            if name in GREEK:
                base = "\\" + name
            elif name in FONTS:
                argument, k = _group(s, k)
                base = f"\\{name} {argument.strip()}"
            elif name in ACCENTS:
                argument, k = _group(s, k)
                inner = _tokens(argument, subscript)
                if len(inner) == 1:
                    base = f"\\{name} {inner[0]}"
                else:
                    found += inner
            elif name in WORDS:
                argument, k = _group(s, k)
                if s[k:].lstrip().startswith("_"):
                    base = f"\\text{{{argument.strip()}}}"
            elif name in SKIPPED:
                _, k = _group(s, k)
            if base is None:
                continue
        elif s[k].isalpha():
            base, k = s[k], k + 1
        else:
            k += 1
            continue
        sub = None
        while k < len(s):
            if s[k] == "'":
                base, k = base + "'", k + 1
            elif s[k] == "_" and sub is None:
                sub, k = _group(s, k + 1)
            elif s[k] == "^":
                sup, k = _group(s, k + 1)
                found += _tokens(sup, subscript)  # an exponent or a head index: its symbols count on their own
            elif s[k] == " " and s[k + 1:k + 2] in ("_", "^", "'"):
                k += 1
            else:
                break
        found.append(base if sub is None else subscript(base, sub))
    return found


class Symbols:
    """The symbols of the notation page, and the rule that decides whether a symbol in a chapter is among them.

    The rule, for a chapter that adds a symbol:

    - A symbol is a Latin letter, a Greek letter (``\\omega``, ``\\ell``), a letter in a font (``\\mathcal L``,
      ``\\mathbb E``, ``\\mathbf{acc}``) or under an accent (``\\tilde s``, ``\\hat a``), or a word in ``\\text``
      that carries a subscript (``\\text{mask}_{ij}``), each with its primes and its subscript. Exponents are read
      as math of their own; operator names (``\\exp``, ``\\operatorname{softmax}``) and words in ``\\text`` with
      no subscript are not symbols.
    - A subscript made only of indices (the page's "Indices" table), sizes (its "Sizes" table), numbers and
      arithmetic is an index: $q_1$, $q_j$, $x_{t-1}$, $\\text{head}_{h-1}$ all count as the listed $q_i$, $x_j$,
      $\\text{head}_\\ell$. Any other subscript is part of the name and must be listed as written:
      $p_\\text{drop}$, $W_O$, $d_k$, $R_\\text{FLOP}$ (``\\mathrm`` counts as ``\\text``; ``\\max`` as a word).
      A subscript that mixes words and indices keeps the words: the listed $\\tilde s_{\\max,u}$ covers
      $\\tilde s_{\\max,1}$, not $\\tilde s_{\\min,1}$.
    - A subscript $\\beta$ selects a sequence of a batch (the page's conventions): $O_\\beta$ counts as $O$, and
      $X_{q,\\beta}$ as $X_q$. A listed upper-case letter with an index subscript is an entry of that array
      ($dQ_{\\beta i}$, $S_{ij}$).
    - So a new symbol needs a row of the page (or one more symbol in the first column of the row whose meaning it
      shares): ``| $p_\\text{drop}$ | dropout rate | ... |``. Every symbol in that column is read by the same rule.
      The test's message names each unlisted symbol as the rule normalises it (an index subscript shows as ``#``)
      with the math it stands in.
    """

    def __init__(self, text):
        sections = re.split(r"^## ", text, flags=re.M)
        table = {s.splitlines()[0].strip(): table_rows(s) for s in sections[1:]}
        self.indices = {x for row in table["Indices"] for x in row["symbols"]}
        self.sizes = {x for row in table["Sizes"] for x in row["symbols"]}
        raw = [s for row in table_rows(text) for s in row["symbols"]]
        self.listed = set()
        for _ in range(2):  # the second pass lets a listed symbol (j_prev) stand in another's subscript
            self.listed = {t for s in raw for t in _tokens(s, self.subscript)}

    def subscript(self, base, sub):
        sub = re.sub(r"\\beta\b", " ", sub).strip(" ,")  # a sequence of a batch: O_beta counts as O
        if not sub:
            return base
        sub = re.sub(r"\\(?:mathrm|rm|textrm)\b", r"\\text", sub)
        sub = re.sub(r"\\(max|min)\b", r"\\text{\1}", sub)
        sub = re.sub(r"\\[,;:! ]", " ", sub)
        words = re.findall(r"(?<!_)\\text\{([^{}]*)\}", sub)
        rest = re.sub(r"(?<!_)\\text\{[^{}]*\}", " ", sub)
        parts = _tokens(rest, self.subscript)
        known = self.indices | self.sizes | getattr(self, "listed", set())
        parts = [p.rstrip("'") for p in parts]
        named = len(parts) == 1 and re.fullmatch(r"[A-Za-z]|\\mathtt \w", parts[0]) \
            and parts[0] not in self.indices | self.sizes
        if named or not all(p in known for p in parts):
            return f"{base}_{{{re.sub(r'[{} ]', '', sub).strip(',')}}}"
        kept = [w.strip() for w in words] + (["#"] if parts or not words else [])
        return f"{base}_{{{','.join(kept)}}}"

    def unlisted(self, math):
        """The symbols of ``math`` (one $...$ or $$...$$ string) that the page does not list."""
        return [s for s in _tokens(math, self.subscript) if s not in self.listed and not self.entry(s)]

    def entry(self, symbol_):
        """An entry of a listed matrix, written with indices ($dQ_{\\beta i}$, $O_{i,\\, \\ell d_k + f}$)."""
        return bool(re.fullmatch(r"[A-Z]_\{#\}", symbol_)) and symbol_[0] in self.listed


# Symbols of chapters that other work owns, not yet listed or renamed. Each entry says why; the test below fails
# as soon as an entry is no longer used, so that the list only shrinks. (Chapter 5's C and N, for O and N_rows,
# are renamed on the branch that rewrites chapter 5; until it is merged, chapter 5 fails here.)
NOT_YET_LISTED = {}


def unlisted_symbols(text, page):
    """(symbol, the math it stands in) for every symbol of the text's math that the notation page does not list."""
    return [(s, m) for m in maths(text) for s in page.unlisted(m)]


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


PAGE = Symbols(NOTATION.read_text())


@pytest.mark.parametrize("name", IDS)
def test_every_symbol_in_the_math_is_on_the_notation_page(name):
    known = NOT_YET_LISTED.get(name, {})
    missing = sorted({s for s, _ in unlisted_symbols(TEXTS[name], PAGE)} - set(known))
    where = {s: m[:80] for s, m in unlisted_symbols(TEXTS[name], PAGE)}
    assert not missing, (f"{name}: symbols in the math that book/notation.md does not list (the rule is in "
                         f"Symbols' docstring): {[(s, where[s]) for s in missing]}")
    stale = sorted(set(known) - {s for s, _ in unlisted_symbols(TEXTS[name], PAGE)})
    assert not stale, f"{name}: no longer uses {stale}: remove them from NOT_YET_LISTED"


def test_the_symbol_check_fails_on_symbols_the_page_does_not_list():
    # a letter, a subscripted name, an accent, a word with a subscript and a Greek letter the page does not list
    for line in (r"$\chi$", r"$p_\text{keep}$", r"$\check q$ and $\breve k_j$", r"$\text{gate}_{ij}$", r"$\varpi_i$",
                 r"$\Omega_f$", r"$R_k$", r"$\tilde s_{\min,1}$"):
        assert unlisted_symbols(line, PAGE), line
    assert [s for s, _ in unlisted_symbols(r"$\sin(a + b)$", PAGE)] == ["b"]   # a is listed, b is not
    # and lets through what the page lists, in every form the rule allows
    fine = (r"$q_1 \cdot k_j$, $\tilde s_{\max,1}$, $\text{head}_{h-1}$, $O_\beta$, $X_{q,\beta}$, $dQ_{\beta i}$, "
            r"$d_\mathrm{model}$, $\mathbb{E}[\xi]$, $W_O^{(\ell)}$, $p_\text{drop}$, $\exp(\tilde s_{ij})$")
    assert unlisted_symbols(fine, PAGE) == []
