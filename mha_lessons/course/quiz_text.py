"""How a self-check question's text and numbers show: a small TeX subset, emphasis, code, section links.

Part of ``quiz.py``'s machinery (``M.quiz`` re-exports what a chapter uses); numbers are shown with the digits
that every CPU and BLAS reproduce.
"""

import html
import math
import numbers
import re
import unicodedata

KEY_DIGITS = 6  # significant digits a float key keeps in the page (the same on every CPU and BLAS)


# ---------------------------------------------------------------- text: inline math, emphasis, code

SYMBOLS = {"times": "×", "cdot": "·", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠",
           "approx": "≈", "to": "→", "infty": "∞", "ell": "ℓ", "top": "⊤", "pm": "±", "dots": "…",
           "ldots": "…", "sum": "∑", "mid": "|", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ",
           "epsilon": "ε", "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ", "omega": "ω",
           "Pi": "Π", "Sigma": "Σ", ",": " ", ";": " ", " ": " ", "quad": " ", "{": "{", "}": "}", "%": "%"}
UPRIGHT = ("text", "mathrm", "operatorname")


def _parse_math(tex, i=0, stop=None):
    """Parse ``tex`` from ``i`` into a list of parts (kind, value) until ``stop`` (a closing brace) or the end."""
    parts = []
    while i < len(tex):
        if tex[i] == stop:
            return parts, i + 1
        if tex[i] in "_^":
            if i + 1 >= len(tex):
                raise ValueError(f"math ${tex}$: {tex[i]} with nothing after it")
            arg, end = _atom(tex, i + 1)
            parts.append(("sub" if tex[i] == "_" else "sup", arg))
            i = end
        else:
            atom, i = _atom(tex, i)
            parts += atom
    if stop is not None:
        raise ValueError(f"math ${tex}$: a brace is not closed")
    return parts, i


def _atom(tex, i):
    """One item at ``i``: a braced group, a command with its argument, a letter or a symbol."""
    c = tex[i]
    if c == "{":
        inner, i = _parse_math(tex, i + 1, "}")
        return [("group", inner)], i
    if c == "\\":
        name = re.match(r"[A-Za-z]+|.", tex[i + 1:])
        if name is None:
            raise ValueError(f"math ${tex}$ ends with a backslash")
        name, i = name.group(), i + 1 + len(name.group())
        if name in UPRIGHT:
            end = _closing(tex, i)
            return [("text", tex[i + 1:end])], end + 1
        if name == "sqrt":
            if i >= len(tex):
                raise ValueError(f"math ${tex}$: \\sqrt with nothing after it")
            arg, i = _atom(tex, i)
            return [("sqrt", arg)], i
        if name in SYMBOLS:
            return [("symbol", SYMBOLS[name])], i
        raise ValueError(f"math ${tex}$: \\{name} is not in the quiz's TeX subset "
                         f"(\\text, \\sqrt, _, ^ and {', '.join(sorted(k for k in SYMBOLS if k.isalpha()))})")
    return [("letter" if c.isalpha() else "symbol", c)], i + 1


def _closing(tex, i):
    if i >= len(tex) or tex[i] != "{":
        raise ValueError(f"math ${tex}$: expected {{ at position {i}")
    depth = 0
    for j in range(i, len(tex)):
        depth += {"{": 1, "}": -1}.get(tex[j], 0)
        if depth == 0:
            return j
    raise ValueError(f"math ${tex}$: a brace is not closed")


def _render(parts, as_html):
    out = []
    for kind, value in parts:
        if kind == "letter":
            out.append(f"<i>{value}</i>" if as_html else value)
        elif kind == "symbol":
            out.append(html.escape(value) if as_html else value)
        elif kind == "text":
            out.append(html.escape(value) if as_html else value)
        elif kind == "group":
            out.append(_render(value, as_html))
        elif kind == "sqrt":
            inner = _render(value, as_html)
            out.append(f"√{inner}" if len(value) <= 1 or as_html else f"√({inner})")
        else:  # sub, sup
            inner = _render(value, as_html)
            if as_html:
                out.append(f"<{kind}>{inner}</{kind}>")
            else:
                out.append(("_" if kind == "sub" else "^") + (inner if len(inner) == 1 or kind == "sub" else f"({inner})"))
    return "".join(out)


def math_html(tex):
    """Inline TeX (a small subset) as HTML: italic letters, sub- and superscripts, a few symbols.

    >>> math_html(r"d_\\text{model} = 512")
    '<i>d</i><sub>model</sub> = 512'
    >>> math_html(r"1/\\sqrt{d_k}")
    '1/√<i>d</i><sub><i>k</i></sub>'
    """
    return _render(_parse_math(tex)[0], True)


def math_plain(tex):
    """Inline TeX as plain text: ``d_\\text{model}`` -> ``d_model``, ``\\sqrt{d_k}`` -> ``√d_k``."""
    return _render(_parse_math(tex)[0], False)


INLINE = re.compile(r"\$([^$]+)\$|`([^`]+)`|\*([^*\s][^*]*)\*")


def text_html(text):
    """Question text as HTML: ``$math$``, ```code``` and ``*emphasis*``; everything else escaped.

    >>> text_html("*sat* has $d_k = 2$ and `M.softmax`")
    '<em>sat</em> has <i>d</i><sub><i>k</i></sub> = 2 and <code>M.softmax</code>'
    """
    out, last = [], 0
    for match in INLINE.finditer(text):
        out.append(html.escape(text[last:match.start()]))
        tex, code, emphasis = match.groups()
        if tex is not None:
            out.append(math_html(tex))
        elif code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        else:
            out.append(f"<em>{html.escape(emphasis)}</em>")
        last = match.end()
    return "".join(out) + html.escape(text[last:])


def text_plain(text):
    """Question text as plain text (math as ``d_model``, code and emphasis without their marks)."""
    return INLINE.sub(lambda m: math_plain(m.group(1)) if m.group(1) is not None else (m.group(2) or m.group(3)),
                      text)


def section_anchor(heading):
    """The anchor the website (docutils' ``make_id``) gives a heading: ``"4. Counting parameters"`` ->
    ``"counting-parameters"``; math is read as its TeX, as the site does.

    >>> section_anchor(r"3. Step 2: divide by $\\sqrt{d_k}$")
    'step-2-divide-by-sqrt-d-k'
    """
    text = re.sub(r"\$([^$]*)\$", r"\1", heading.lstrip("#").strip())
    slug = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", " ".join(slug.split()))
    return re.sub(r"^[-0-9]+|-+$", "", slug)


def _see_html(heading):
    """A link to the section, which the page's script also finds in Jupyter (by the heading's words)."""
    words = section_anchor(heading.split("$")[0])  # the words before any math: what Jupyter's heading shows too
    shown = text_html(heading.lstrip("#").strip())
    return (f'See <a href="#{section_anchor(heading)}" data-words="{html.escape(words)}" '
            f'data-lm-suppress-shortcuts="true">“{shown}”</a>.')


def _require_text(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{what} is missing (empty)")
    return value.strip()


# ---------------------------------------------------------------- answers and their comparison

def _real(value, what):
    """A finite real number (int or float, numpy scalars included); bool is refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _canonical(value):
    """A comparable form of an option's value: arrays as nested tuples, floats to 12 digits, nan as 'nan'."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isnan(value):
            return "nan"
        return float(f"{float(value):.12g}") if not isinstance(value, numbers.Integral) else float(value)
    return value


def shown(value, digits=4):
    """How a value prints to the reader: ints with thousands separators, floats to ``digits``
    significant digits, shapes as tuples of plain ints (a comma inside a number would read as a new axis).

    >>> shown(1050624), shown(0.70534), shown((8, 4, 64)), shown((4096, 128))
    ('1,050,624', '0.7053', '(8, 4, 64)', '(4096, 128)')
    """
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return f"{float(value):,.{digits}g}" if abs(value) < 1e15 else f"{float(value):.{digits}g}"
    if isinstance(value, tuple):
        inner = [str(int(v)) if isinstance(v, numbers.Integral) else shown(v, digits) for v in value]
        return "(" + ", ".join(inner) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def _portable(value):
    value = _real(value, "value")
    return value if isinstance(value, int) else float(f"{value:.{KEY_DIGITS}g}")
