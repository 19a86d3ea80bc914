"""The multi-head attention layer drawn whole, every arrow labelled with the shape it carries.

Axis names as in ``multihead.py``: ``B`` batch, ``h`` heads, ``n`` queries, ``m``
keys and values, ``d_model`` the width of a token, ``d_k`` the width of a head's
queries and keys, ``d_v`` the width of its values.

``layer_arrows`` computes the shapes from the sizes alone (numpy is not even
needed); ``draw_layer`` draws them. matplotlib is imported inside ``draw_layer``
only, so ``import mha_lessons`` still needs numpy alone. A drawing is a few
boxes, arrows and labels, cheap enough to redraw on every move of a slider.
"""

from dataclasses import dataclass

from ._checks import check_num_heads, require_positive_int

# The size, in inches, that the layout is made for; an axes of about this size keeps every label apart.
FIGSIZE = (13.3, 4.75)


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
        """The text written on the arrow: the axes by name, then by size."""
        named = "(" + ", ".join(self.symbols) + ")"
        sized = "(" + ", ".join(str(s) for s in self.shape) + ")"
        return f"{named}\n{sized}"


def _sizes(d_model, num_heads, d_k, d_v, batch, n, m):
    """Validate the sizes and fill in the defaults (d_k = d_v = d_model / h)."""
    if d_k is None or d_v is None:
        check_num_heads(d_model, num_heads)  # the default head width d_model / h must be whole
    else:
        require_positive_int(num_heads, "num_heads")
        require_positive_int(d_model, "d_model")
    d_k = d_model // num_heads if d_k is None else d_k
    d_v = d_model // num_heads if d_v is None else d_v
    require_positive_int(d_k, "d_k")
    require_positive_int(d_v, "d_v")
    for name, value in (("batch", batch), ("n", n), ("m", m)):
        if value is not None:
            require_positive_int(value, name)
    return d_k, d_v


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


@dataclass
class LayerDiagram:
    """What ``draw_layer`` drew: the axes, the arrows with their labels, and the four matrices' shapes."""

    ax: object
    arrows: tuple
    matrices: dict

    @property
    def labels(self):
        """The text on every arrow, in the order of ``arrows``."""
        return [a.label for a in self.arrows]


# Layout, in inches of a FIGSIZE figure: three rows (queries, keys, values), columns left to right.
_ROWS = {"Q": 3.55, "K": 2.35, "V": 1.15}
_BOX_H = 0.56
_GAP = 1.15  # room for a label of up to about 18 characters above each arrow
_LABEL_SIZE = 8.5
_CHAR_WIDTH = 0.64  # width of a digit in DejaVu Sans, in ems (no wider than the labels' letters)
_NARROW, _NARROW_WIDTH = " ,()·", 0.4  # and of the narrow characters (space, comma, brackets, dot)
_MAX_CARDS = 8  # one card per head, at most this many drawn
_CAPTION_Y = 4.45  # the step names, above the columns
_WEIGHTS_Y = 0.12  # where the arrow of the attention weights ends


def draw_layer(d_model, num_heads, *, d_k=None, d_v=None, batch=None, n=None, m=None, ax=None):
    """Draw one multi-head attention layer from X to Y, each arrow labelled with its shape.

    X goes through the three projections W_Q, W_K, W_V, each result is split into
    h heads, the h attentions run side by side, their outputs are concatenated and
    mixed by W_O. Each arrow carries the array's axes by name and by size (from
    ``layer_arrows``); under each matrix its shape is written, as used in ``x @ w``.

    Parameters
    ----------
    d_model, num_heads, d_k, d_v, batch, n, m
        As in ``layer_arrows``.
    ax : matplotlib axes, optional
        Where to draw; the layout is made for an axes of about ``FIGSIZE`` inches.
        Without it a new figure of that size is made.

    Returns
    -------
    LayerDiagram
        ``.ax``, ``.arrows`` (the ``Arrow`` objects), ``.labels`` (their text) and
        ``.matrices`` (name -> (rows, columns) of W_Q, W_K, W_V, W_O).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> drawing = draw_layer(512, 8, n=4)
    >>> drawing.matrices["W_O"]
    (512, 512)
    >>> print(drawing.labels[6])
    (h, n, d_k)
    (8, 4, 64)
    """
    arrows = layer_arrows(d_model, num_heads, d_k=d_k, d_v=d_v, batch=batch, n=n, m=m)
    d_k, d_v = _sizes(d_model, num_heads, d_k, d_v, batch, n, m)
    h = num_heads
    matrices = {"W_Q": (d_model, h * d_k), "W_K": (d_model, h * d_k), "W_V": (d_model, h * d_v),
                "W_O": (h * d_v, d_model)}

    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba
    from matplotlib.patches import FancyBboxPatch

    from .plotting import SHAPE_COLORS

    if ax is None:
        fig = plt.figure(figsize=FIGSIZE)
        ax = fig.add_axes((0, 0, 1, 1))
    colors = {"Q": SHAPE_COLORS["q"], "K": SHAPE_COLORS["k"], "V": SHAPE_COLORS["v"]}
    out_color, attn_color = SHAPE_COLORS["o"], SHAPE_COLORS["s"]

    def box(x, y, width, height, text, color, fontsize=11, z=2):
        tint = to_rgba(color)  # an opaque pale fill, so that a card hides the cards behind it
        fill = tuple(0.78 + 0.22 * c for c in tint[:3])
        ax.add_patch(FancyBboxPatch((x, y - height / 2), width, height, boxstyle="round,pad=0,rounding_size=0.06",
                                    facecolor=fill, edgecolor=color, linewidth=1.6, zorder=z))
        if text:
            ax.text(x + width / 2, y, text, ha="center", va="center", fontsize=fontsize, zorder=z + 1)

    def arrow(x0, y0, x1, y1, color, label=None, label_at="above"):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=1,
                    arrowprops={"arrowstyle": "-|>", "color": color, "linewidth": 1.4, "shrinkA": 0, "shrinkB": 0})
        if label_at == "above":
            # a long label (a batch axis, big sizes) is set smaller so that it stays within its arrow
            ems = max(sum(_NARROW_WIDTH if ch in _NARROW else _CHAR_WIDTH for ch in line) for line in label.split("\n"))
            size = min(_LABEL_SIZE, 72 * (x1 - x0 - 0.1) / ems)
            ax.text((x0 + x1) / 2, y0 + 0.07, label, ha="center", va="bottom", fontsize=size, linespacing=1.15)
        else:  # beside a vertical arrow
            ax.text(x0 + 0.1, (y0 + y1) / 2, label, ha="left", va="center", fontsize=_LABEL_SIZE, linespacing=1.15)

    labels = {(a.start, a.end): a.label for a in arrows}
    top, bottom = _ROWS["Q"] + 0.45, _ROWS["V"] - 0.45
    middle = _ROWS["K"]

    def caption(x, text):  # the step of the chapter's table that a column performs
        ax.text(x, _CAPTION_Y, text, ha="center", va="bottom", fontsize=9, color="#555555", style="italic")

    def matrix_shape(x, y, name):  # under a matrix: its shape, as used in x @ w
        rows, cols = matrices[name]
        ax.text(x, y - _BOX_H / 2 - 0.05, f"{rows} × {cols}", ha="center", va="top", fontsize=7.5, color="#444444")

    # Column left edges, fixed for every size so that the drawing does not jump when a slider moves.
    in_w, w_w, s_w, a_w, c_w, o_w, y_w = 0.55, 0.72, 0.72, 1.75, 0.78, 0.72, 0.5
    step = 0.055  # offset between the cards of the attention stack
    x_in = 0.15
    x_w = x_in + in_w + _GAP
    x_s = x_w + w_w + _GAP
    x_a = x_s + s_w + _GAP
    x_c = x_a + a_w + (_MAX_CARDS - 1) * step + _GAP
    x_o = x_c + c_w + _GAP
    x_y = x_o + o_w + _GAP

    # step 1: the input(s) and the three projections, with each matrix's shape under it
    if m is None:
        box(x_in, (top + bottom) / 2, in_w, top - bottom, "$X$", out_color, fontsize=14)
        sources = {"Q": "X", "K": "X", "V": "X"}
    else:
        sources = {"Q": "X_q", "K": "X_k", "V": "X_v"}
        for row, name in sources.items():
            box(x_in, _ROWS[row], in_w, _BOX_H, f"${name}$", colors[row], fontsize=13)
    caption(x_w + w_w / 2, "1. project")
    for row in "QKV":
        y = _ROWS[row]
        arrow(x_in + in_w, y, x_w, y, colors[row], labels[sources[row], f"W_{row}"])
        box(x_w, y, w_w, _BOX_H, f"$W_{row}$", colors[row], fontsize=13)
        matrix_shape(x_w + w_w / 2, y, f"W_{row}")

    # step 2: split into heads
    caption(x_s + s_w / 2, "2. split")
    for row in "QKV":
        y = _ROWS[row]
        arrow(x_w + w_w, y, x_s, y, colors[row], labels[f"W_{row}", f"split {row}"])
        box(x_s, y, s_w, _BOX_H, "split\ninto h", colors[row], fontsize=9)

    # step 3: h attentions, a stack of cards, one per head (at most _MAX_CARDS drawn), front card at the middle
    cards = min(h, _MAX_CARDS)
    caption(x_a + a_w / 2, "3. attend, per head")
    for i in reversed(range(cards)):  # back to front, each card up and to the right of the one before
        box(x_a + i * step, middle + i * step, a_w, top - bottom, None, attn_color, z=2 + 2 * (cards - i))
    front = 3 + 2 * cards
    for row in "QKV":
        y = _ROWS[row]
        arrow(x_s + s_w, y, x_a, y, colors[row], labels[f"split {row}", "attention"])
    heads_text = "1 attention" if h == 1 else f"{h} attentions,\none per head"
    ax.text(x_a + a_w / 2, middle + 0.55, heads_text, ha="center", va="center", fontsize=10.5, fontweight="bold",
            zorder=front)
    ax.text(x_a + a_w / 2, middle - 0.45, r"$\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V$",
            ha="center", va="center", fontsize=10.5, zorder=front)
    # the weights, which the layer returns beside Y: an arrow down out of the stack
    w_x = x_a + a_w / 2
    arrow(w_x, bottom, w_x, _WEIGHTS_Y, attn_color, labels["attention", "weights"], label_at="beside")
    ax.text(w_x - 0.1, (bottom + _WEIGHTS_Y) / 2, "weights", ha="right", va="center", fontsize=10)

    # steps 4 and 5: concatenate, then W_O, on the middle row
    caption(x_c + c_w / 2, "4. concatenate")
    arrow(x_a + a_w + (cards - 1) * step, middle, x_c, middle, out_color, labels["attention", "concat"])
    box(x_c, middle, c_w, _BOX_H, "concat", out_color, fontsize=10)
    caption(x_o + o_w / 2, "5. output projection")
    arrow(x_c + c_w, middle, x_o, middle, out_color, labels["concat", "W_O"])
    box(x_o, middle, o_w, _BOX_H, "$W_O$", out_color, fontsize=13)
    matrix_shape(x_o + o_w / 2, middle, "W_O")
    arrow(x_o + o_w, middle, x_y, middle, out_color, labels["W_O", "Y"])
    box(x_y, middle, y_w, _BOX_H, "$Y$", out_color, fontsize=14)

    ax.set_xlim(0, FIGSIZE[0])
    ax.set_ylim(0, FIGSIZE[1])
    ax.axis("off")
    return LayerDiagram(ax=ax, arrows=arrows, matrices=matrices)
