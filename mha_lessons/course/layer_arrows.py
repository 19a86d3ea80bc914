"""What each arrow of the layer diagram carries (chapter 3): the shapes of the layer's arrays, from the sizes alone.

Axis names as in ``multihead.py``: ``B`` batch, ``h`` heads, ``n`` queries, ``m`` keys and values,
``d_model`` the width of a token, ``d_k`` the width of a head's queries and keys, ``d_v`` of its values.
``diagram.draw_layer`` draws the arrows; numpy is not even needed here.
"""

from dataclasses import dataclass

from .._checks import head_widths, require_positive_int


@dataclass(frozen=True)
class Arrow:
    """One arrow of the diagram: the array that flows from ``start`` to ``end``.

    ``symbols`` names its axes (``("h", "n", "d_k")``); ``shape`` holds their
    sizes, with the symbol itself where a size was not given (``n`` left as ``"n"``).
    """

    start: str
    end: str
    symbols: tuple
    shape: tuple

    @property
    def label(self):
        """The arrow's text as plain text: the axes by name, then by size (for alt text and tests)."""
        named = "(" + ", ".join(self.symbols) + ")"
        sized = "(" + ", ".join(str(s) for s in self.shape) + ")"
        return f"{named}\n{sized}"

    @property
    def tex(self):
        """The arrow's text as the figure draws it: the names typeset with matplotlib's mathtext, the sizes plain
        (a size left out is its letter, typeset).

        >>> print(Arrow("W_Q", "split Q", ("n", "h·d_k"), ("n", 512)).tex)
        $(n, h\\,d_k)$
        ($n$, 512)
        """
        named = "$(" + ", ".join(TEX.get(s, s) for s in self.symbols) + ")$"
        sized = "(" + ", ".join(str(s) if isinstance(s, int) else f"${s}$" for s in self.shape) + ")"
        return f"{named}\n{sized}"


# How the axes' names are typeset (mathtext), as the chapters write them: d_model upright "model", h·d_k as h d_k.
TEX = {"d_model": r"d_\mathrm{model}", "h·d_k": r"h\,d_k", "h·d_v": r"h\,d_v"}


def _sizes(d_model, num_heads, d_k, d_v, batch, n, m):
    """Validate the sizes and fill in the defaults (d_k = d_v = d_model / h)."""
    for name, value in (("batch", batch), ("n", n), ("m", m)):
        if value is not None:
            require_positive_int(value, name)
    return head_widths(d_model, num_heads, d_k, d_v)


def layer_arrows(d_model, num_heads, *, d_k=None, d_v=None, batch=None, n=None, m=None):
    """The arrays that flow through one multi-head attention layer, in the order of its five steps.

    Parameters
    ----------
    d_model, num_heads : int
        Width of the tokens and number of heads ``h``.
    d_k, d_v : int, optional, keyword-only
        Width of each head's queries and keys, and of its values; each defaults to
        ``d_model / h``, which must then be a whole number.
    batch : int, optional
        Number of sequences ``B``; without it the arrays are drawn for one sequence.
    n, m : int, optional
        Number of queries and of keys/values. Left out, they stay as the letters.
        Without ``m`` the layer is self-attention (keys and values come from the
        queries' tokens, so ``m = n``); with it, cross-attention with three inputs.

    Returns
    -------
    tuple of Arrow
        Thirteen arrows: the three inputs into ``W_Q``, ``W_K``, ``W_V``; the three
        projections into the splits; the three head-split arrays into the attention;
        the heads' outputs into the concatenation; the concatenation into ``W_O``;
        the layer's output ``Y``; and the attention weights that the layer also returns.

    Examples
    --------
    >>> arrows = layer_arrows(512, 8, n=4)
    >>> [a.shape for a in arrows if a.end == "attention"]
    [(8, 4, 64), (8, 4, 64), (8, 4, 64)]
    >>> print(arrows[-1].label)
    (h, n, n)
    (8, 4, 4)
    """
    d_k, d_v = _sizes(d_model, num_heads, d_k, d_v, batch, n, m)
    h = num_heads
    cross = m is not None
    kv_symbol = "m" if cross else "n"  # self-attention: the keys are the queries' tokens
    n_size = "n" if n is None else n
    m_size = m if cross else n_size
    lead_symbols = ("B",) if batch is not None else ()
    lead_sizes = (batch,) if batch is not None else ()

    def arrow(start, end, *axes):  # axes: (symbol, size) pairs after the batch axis
        return Arrow(start, end, lead_symbols + tuple(s for s, _ in axes), lead_sizes + tuple(v for _, v in axes))

    inputs = ("X_q", "X_k", "X_v") if cross else ("X", "X", "X")
    q_len, kv_len = ("n", n_size), (kv_symbol, m_size)
    return (
        arrow(inputs[0], "W_Q", q_len, ("d_model", d_model)),                  # step 1: project
        arrow(inputs[1], "W_K", kv_len, ("d_model", d_model)),
        arrow(inputs[2], "W_V", kv_len, ("d_model", d_model)),
        arrow("W_Q", "split Q", q_len, ("h·d_k", h * d_k)),                    # step 2: split into heads
        arrow("W_K", "split K", kv_len, ("h·d_k", h * d_k)),
        arrow("W_V", "split V", kv_len, ("h·d_v", h * d_v)),
        arrow("split Q", "attention", ("h", h), q_len, ("d_k", d_k)),          # step 3: attend, per head
        arrow("split K", "attention", ("h", h), kv_len, ("d_k", d_k)),
        arrow("split V", "attention", ("h", h), kv_len, ("d_v", d_v)),
        arrow("attention", "concat", ("h", h), q_len, ("d_v", d_v)),           # step 4: concatenate
        arrow("concat", "W_O", q_len, ("h·d_v", h * d_v)),                     # step 5: output projection
        arrow("W_O", "Y", q_len, ("d_model", d_model)),
        arrow("attention", "weights", ("h", h), q_len, kv_len),               # returned beside Y
    )
