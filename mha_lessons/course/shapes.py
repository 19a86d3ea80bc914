"""Pictures of shapes: the arrays of scaled dot-product attention as blocks (chapter 1), the heads' slices of a
layer's features (chapter 3). Drawn on an ``ax`` given (or a new one), which is returned.
"""

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from .style import HEAD_COLORS, SHAPE_COLORS


def _new_ax(ax, size):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def _block(ax, x, y, width, height, color, label, dims):
    ax.add_patch(Rectangle((x, y), width, height, facecolor=color, alpha=0.35, edgecolor=color, linewidth=2))
    ax.text(x + width / 2, y + height / 2, label, ha="center", va="center", fontsize=13, fontweight="bold")
    ax.text(x + width / 2, y - 0.35, dims, ha="center", va="top", fontsize=9)


def sdpa_shapes(n, m, d_k, d_v, *, ax=None, unit=0.5):
    """Draw the two matrix products of attention as blocks whose sides are proportional to n, m, d_k, d_v.

    Q (n × d_k) times Kᵀ (d_k × m) gives the scores (n × m); the weights (n × m)
    times V (m × d_v) give the output (n × d_v).

    Returns
    -------
    matplotlib.axes.Axes, with one patch per block (six blocks).
    """
    for name, value in (("n", n), ("m", m), ("d_k", d_k), ("d_v", d_v)):
        if value < 1:
            raise ValueError(f"sdpa_shapes needs positive sizes, got {name} = {value}")
    ax = _new_ax(ax, (11, 3.2))
    u = unit
    gap = 1.2
    x = 0.0
    top = max(n, d_k, m) * u
    # Blocks are drawn hanging from a common top line; height is the number of rows.
    items = [
        ("$Q$", d_k, n, "q", f"$n \\times d_k$\n{n} × {d_k}"), ("·", None, None, None, None),
        ("$K^\\top$", m, d_k, "k", f"$d_k \\times m$\n{d_k} × {m}"), ("→", None, None, None, None),
        ("$S$", m, n, "s", f"$n \\times m$\n{n} × {m}"), ("softmax\n→", None, None, None, None),
        ("$A$", m, n, "s", f"$n \\times m$\n{n} × {m}"), ("·", None, None, None, None),
        ("$V$", d_v, m, "v", f"$m \\times d_v$\n{m} × {d_v}"), ("→", None, None, None, None),
        ("out", d_v, n, "o", f"$n \\times d_v$\n{n} × {d_v}"),
    ]
    for label, cols, rows, color, dims in items:
        if cols is None:
            size = 18 if len(label) == 1 else 10
            ax.text(x + gap / 2, top - 0.5 * u * n, label, ha="center", va="center", fontsize=size)
            x += gap
            continue
        _block(ax, x, top - rows * u, cols * u, rows * u, SHAPE_COLORS[color], label, dims)
        x += cols * u + 0.2
    ax.set_xlim(-0.3, x + 0.3)
    ax.set_ylim(-2.0, top + 0.3)  # room for the two-line shapes under the lowest block
    ax.set_aspect("equal")
    ax.axis("off")
    return ax




def head_layout(n, d_model, num_heads, *, ax=None, unit=0.32):
    """Draw how ``split_heads`` cuts an (n, d_model) matrix into h slabs of shape (n, d_k).

    Left: the projected queries, one row per token, columns coloured by the head
    that receives them. Right: the same numbers as the (h, n, d_k) array, one slab
    per head, drawn as a stack.

    Returns
    -------
    matplotlib.axes.Axes, with one patch per (token, head) cell on each side:
    ``2 * n * num_heads`` patches in all.
    """
    from .._checks import check_num_heads

    check_num_heads(d_model, num_heads)
    d_k = d_model // num_heads
    ax = _new_ax(ax, (11, 0.5 * n + 2.2))
    u = unit
    width = min(1.0, 12.0 / d_model) * u  # one feature column; wide models are drawn narrower
    colors = [HEAD_COLORS[i % len(HEAD_COLORS)] for i in range(num_heads)]
    # left: (n, d_model)
    for row in range(n):
        for head in range(num_heads):
            ax.add_patch(Rectangle((head * d_k * width, -(row + 1) * u), d_k * width, u,
                                   facecolor=colors[head], edgecolor="white", linewidth=1, alpha=0.8))
    left_w = d_model * width
    ax.text(left_w / 2, 0.35 * u + 0.1, f"$(n, d_\\mathrm{{model}})$ = ({n}, {d_model})", ha="center", fontsize=10)
    for row in range(n):
        ax.text(-0.1, -(row + 0.5) * u, f"token {row}", ha="right", va="center", fontsize=8)
    # arrow
    x0 = left_w + 0.6
    ax.annotate("", xy=(x0 + 1.2, -n * u / 2), xytext=(x0, -n * u / 2),
                arrowprops={"arrowstyle": "->", "linewidth": 1.5})
    ax.text(x0 + 0.6, -n * u / 2 + 0.15, "split_heads", ha="center", fontsize=9)
    # right: (h, n, d_k), one (n, d_k) slab per head, side by side
    x1 = x0 + 1.7
    gap = 0.25
    slab = d_k * width
    for head in range(num_heads):
        left = x1 + head * (slab + gap)
        for row in range(n):
            ax.add_patch(Rectangle((left, -(row + 1) * u), slab, u,
                                   facecolor=colors[head], edgecolor="white", linewidth=1, alpha=0.8))
        ax.text(left + slab / 2, 0.1, f"head {head}", ha="center", va="bottom", fontsize=8,
                rotation=0 if num_heads <= 4 else 45)
    right_w = num_heads * slab + (num_heads - 1) * gap
    ax.text(x1 + right_w / 2, -(n + 0.9) * u, f"$(h, n, d_k)$ = ({num_heads}, {n}, {d_k})",
            ha="center", fontsize=10)
    ax.set_xlim(-1.0, x1 + right_w + 0.3)
    ax.set_ylim(-(n + 1.5) * u, 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax
