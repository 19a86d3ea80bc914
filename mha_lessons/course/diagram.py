"""The multi-head attention layer drawn whole, every arrow labelled with the shape it carries.

Axis names as in ``multihead.py``: ``B`` batch, ``h`` heads, ``n`` queries, ``m``
keys and values, ``d_model`` the width of a token, ``d_k`` the width of a head's
queries and keys, ``d_v`` the width of its values.

``layer_arrows`` (``layer_arrows.py``) computes the shapes from the sizes alone;
``draw_layer`` draws them. matplotlib is imported inside ``draw_layer``
only, so ``import mha_lessons`` still needs numpy alone. A drawing is a few
boxes, arrows and labels, cheap enough to redraw on every move of a slider.
"""

from dataclasses import dataclass

from .._checks import head_widths
from .layer_arrows import Arrow, layer_arrows  # noqa: F401  (the arrows' shapes, reachable here)

# The size, in inches, that the layout is made for; an axes of about this size keeps every label apart. With the
# 0.1-inch margin that a notebook saves figures with, it is as wide as the text column (plotting.COLUMN_INCHES,
# 6.6 inches), so that it is shown at the size it is drawn.
FIGSIZE = (6.4, 5.5)


@dataclass
class LayerDiagram:
    """What ``draw_layer`` drew: the axes, the arrows with their labels, and the four matrices' shapes."""

    ax: object
    arrows: tuple
    matrices: dict

    @property
    def labels(self):
        """The text on every arrow as plain text, in the order of ``arrows`` (the figure typesets it: ``Arrow.tex``)."""
        return [a.label for a in self.arrows]


# Layout, in inches of a FIGSIZE figure, for the text column: the three lanes (queries, keys, values)
# run down side by side through steps 1-3 (project, split, attend), each arrow's label beside it; steps 4 and 5
# (concatenate, W_O) run across a last row, each arrow's label above it. Every text is at least 9.5 points.
_LANE_X0 = 0.85  # left edge of the first lane (the step names are left of it)
_LANE_W = (FIGSIZE[0] - _LANE_X0 - 0.05) / 3  # a lane's width
_BOX_W, _BOX_H = 0.6, 0.42
_GAP = 0.48  # between two rows of boxes: room for a two-line label beside the arrow
_LABEL_SIZE = 10.0
_TEXT_SIZE = 9.5  # the smallest text drawn for sizes the course uses (mha_lessons.plotting.MIN_FONT_PT)
_CHAR_WIDTH = 0.64  # width of a digit in DejaVu Sans, in ems (no wider than the labels' letters)
_NARROW, _NARROW_WIDTH = " ,()·", 0.4  # and of the narrow characters (space, comma, brackets, dot)
_MAX_CARDS = 8  # one card per head, at most this many drawn
_STEP = 0.03  # offset between the cards of the attention stack
_CARD_H = 0.8  # height of the front card
_OUT_GAP = 0.85  # from the stack down to the last row: the label beside that arrow clears the labels above its row
_OUT_ARROW = 1.08  # length of the last row's arrows: a label of about 11 characters above each


def _label_size(label, room):
    """The size, at most _LABEL_SIZE, at which every line of ``label`` is at most ``room`` inches wide."""
    ems = max(sum(_NARROW_WIDTH if ch in _NARROW else _CHAR_WIDTH for ch in line) for line in label.split("\n"))
    return min(_LABEL_SIZE, 72 * room / ems)


def draw_layer(d_model, num_heads, *, d_k=None, d_v=None, batch=None, n=None, m=None, ax=None):
    """Draw one multi-head attention layer from X to Y, each arrow labelled with its shape.

    X goes through the three projections W_Q, W_K, W_V, each result is split into
    h heads, the h attentions run side by side, their outputs are concatenated and
    mixed by W_O. Each arrow carries the array's axes by name and by size (from
    ``layer_arrows``); beside each matrix its shape is written, as used in ``x @ w``.
    The drawing is laid out for the text column (``FIGSIZE``, 6.4 inches wide):
    queries, keys and values run down side by side, the last two steps across.

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
    >>> min(t.get_fontsize() for t in drawing.ax.texts) >= 9.5
    True
    """
    arrows = layer_arrows(d_model, num_heads, d_k=d_k, d_v=d_v, batch=batch, n=n, m=m)
    d_k, d_v = head_widths(d_model, num_heads, d_k, d_v)  # checked by layer_arrows already
    h = num_heads
    matrices = {"W_Q": (d_model, h * d_k), "W_K": (d_model, h * d_k), "W_V": (d_model, h * d_v),
                "W_O": (h * d_v, d_model)}

    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba
    from matplotlib.patches import FancyBboxPatch

    from .style import SHAPE_COLORS

    if ax is None:
        fig = plt.figure(figsize=FIGSIZE)
        ax = fig.add_axes((0, 0, 1, 1))
    colors = {"Q": SHAPE_COLORS["q"], "K": SHAPE_COLORS["k"], "V": SHAPE_COLORS["v"]}
    out_color, attn_color = SHAPE_COLORS["o"], SHAPE_COLORS["s"]
    labels = {(a.start, a.end): a for a in arrows}  # each arrow by its ends
    width, height = FIGSIZE

    def box(x, y, w, hgt, text, color, fontsize=13, z=2):  # (x, y): the middle of the left edge
        tint = to_rgba(color)  # an opaque pale fill, so that a card hides the cards behind it
        fill = tuple(0.78 + 0.22 * c for c in tint[:3])
        ax.add_patch(FancyBboxPatch((x, y - hgt / 2), w, hgt, boxstyle="round,pad=0,rounding_size=0.06",
                                    facecolor=fill, edgecolor=color, linewidth=1.6, zorder=z))
        if text:
            ax.text(x + w / 2, y, text, ha="center", va="center", fontsize=fontsize, zorder=z + 1)

    def arrow(x0, y0, x1, y1, color, carried, room=None):
        """An arrow; the shape it carries (an ``Arrow``, typeset) above it if it runs across, right of it (in
        ``room`` inches) if it runs down; the size that fits is worked out on the plain text, no narrower."""
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=1,
                    arrowprops={"arrowstyle": "-|>", "color": color, "linewidth": 1.4, "shrinkA": 0, "shrinkB": 0})
        if y0 == y1:  # a long label (a batch axis, big sizes) is set smaller so that it stays within its arrow
            ax.text((x0 + x1) / 2, y0 + 0.07, carried.tex, ha="center", va="bottom",
                    fontsize=_label_size(carried.label, x1 - x0 - 0.1), linespacing=1.3)
        else:
            ax.text(x0 + 0.08, (y0 + y1) / 2, carried.tex, ha="left", va="center",
                    fontsize=_label_size(carried.label, room), linespacing=1.3)

    def caption(x, y, text, ha="left"):  # the step of the chapter's table that a row performs
        ax.text(x, y, text, ha=ha, va="center", fontsize=_TEXT_SIZE, color="#555555", style="italic")

    # Rows from the top (y is the middle of each row of boxes); lane i's arrows run down at lane_x[i].
    y_in = height - 0.05 - _BOX_H / 2
    y_w = y_in - _BOX_H - _GAP
    y_s = y_w - _BOX_H - _GAP
    stack_top = y_s - _BOX_H / 2 - _GAP  # top of the backmost card
    cards = min(h, _MAX_CARDS)
    front_top = stack_top - (_MAX_CARDS - 1) * _STEP  # fixed, so that the drawing does not jump as h changes
    front_mid = front_top - _CARD_H / 2
    y_out = front_top - _CARD_H - _OUT_GAP - _BOX_H / 2
    lane_x = {row: _LANE_X0 + i * _LANE_W + _BOX_W / 2 for i, row in enumerate("QKV")}
    room = _LANE_W - _BOX_W / 2 - 0.08 - 0.05  # for a label right of a lane's arrow

    # step 1: the input(s) and the three projections, with each matrix's shape beside it
    if m is None:
        right = lane_x["V"] + _BOX_W / 2
        box(_LANE_X0, y_in, right - _LANE_X0, _BOX_H, "$X$", out_color, fontsize=14)
        sources = {"Q": "X", "K": "X", "V": "X"}
    else:
        sources = {"Q": "X_q", "K": "X_k", "V": "X_v"}
        for row, name in sources.items():
            box(lane_x[row] - _BOX_W / 2, y_in, _BOX_W, _BOX_H, f"${name}$", colors[row])
    caption(0.05, y_w, "1. project")
    for row in "QKV":
        x = lane_x[row]
        arrow(x, y_in - _BOX_H / 2, x, y_w + _BOX_H / 2, colors[row], labels[sources[row], f"W_{row}"], room)
        box(x - _BOX_W / 2, y_w, _BOX_W, _BOX_H, f"$W_{row}$", colors[row])
        rows, cols = matrices[f"W_{row}"]
        ax.text(x + _BOX_W / 2 + 0.06, y_w, f"{rows} × {cols}", ha="left", va="center", fontsize=_TEXT_SIZE,
                color="#444444")

    # step 2: split into heads
    caption(0.05, y_s, "2. split")
    for row in "QKV":
        x = lane_x[row]
        arrow(x, y_w - _BOX_H / 2, x, y_s + _BOX_H / 2, colors[row], labels[f"W_{row}", f"split {row}"], room)
        box(x - _BOX_W / 2, y_s, _BOX_W, _BOX_H + 0.04, "split\ninto $h$", colors[row], fontsize=_TEXT_SIZE)

    # step 3: h attentions, a stack of cards, one per head (at most _MAX_CARDS drawn), each card behind the one
    # before it up and to the right; the three lanes' arrows end on the top of the backmost card
    caption(0.05, front_mid, "3. attend,\nper head")
    card_x, card_w = _LANE_X0 - 0.05, width - 0.05 - (_MAX_CARDS - 1) * _STEP - (_LANE_X0 - 0.05)
    for i in reversed(range(cards)):
        box(card_x + i * _STEP, front_mid + i * _STEP, card_w, _CARD_H, None, attn_color, z=2 + 2 * (cards - i))
    front = 3 + 2 * cards
    back_top = front_top + (cards - 1) * _STEP
    for row in "QKV":
        x = lane_x[row]
        arrow(x, y_s - _BOX_H / 2 - 0.02, x, back_top, colors[row], labels[f"split {row}", "attention"], room)
    heads_text = "1 attention" if h == 1 else f"{h} attentions, one per head"
    ax.text(card_x + card_w / 2, front_mid + 0.17, heads_text, ha="center", va="center", fontsize=10.5,
            fontweight="bold", zorder=front)
    ax.text(card_x + card_w / 2, front_mid - 0.17, r"$\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V$",
            ha="center", va="center", fontsize=10.5, zorder=front)

    # steps 4 and 5, across the last row: concatenate (under the queries' lane), W_O, Y; and the weights,
    # which the layer returns beside Y, down out of the stack at the right
    front_bottom = front_top - _CARD_H
    x_c, c_w = lane_x["Q"] - 0.375, 0.75
    arrow(lane_x["Q"], front_bottom, lane_x["Q"], y_out + _BOX_H / 2, out_color, labels["attention", "concat"],
          room)
    box(x_c, y_out, c_w, _BOX_H, "concat", out_color, fontsize=10)
    x_o = x_c + c_w + _OUT_ARROW
    arrow(x_c + c_w, y_out, x_o, y_out, out_color, labels["concat", "W_O"])
    box(x_o, y_out, _BOX_W, _BOX_H, "$W_O$", out_color)
    x_y = x_o + _BOX_W + _OUT_ARROW
    arrow(x_o + _BOX_W, y_out, x_y, y_out, out_color, labels["W_O", "Y"])
    box(x_y, y_out, 0.45, _BOX_H, "$Y$", out_color, fontsize=14)
    rows, cols = matrices["W_O"]
    shape_y = y_out - _BOX_H / 2 - 0.13
    ax.text(x_o + _BOX_W / 2, shape_y, f"{rows} × {cols}", ha="center", va="center", fontsize=_TEXT_SIZE,
            color="#444444")
    caption(x_c + c_w / 2, shape_y - 0.2, "4. concatenate", ha="center")
    caption(x_o + _BOX_W / 2, shape_y - 0.2, "5. output projection", ha="center")
    w_x = x_y + 0.45 + 0.4
    arrow(w_x, front_bottom, w_x, y_out, attn_color, labels["attention", "weights"], width - w_x - 0.08 - 0.05)
    ax.text(w_x, y_out - 0.05, "weights", ha="center", va="top", fontsize=10)

    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return LayerDiagram(ax=ax, arrows=arrows, matrices=matrices)
