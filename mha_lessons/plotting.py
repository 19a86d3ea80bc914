"""The course's figures: attention heat-maps, mask pictures and shape diagrams.

matplotlib is imported here only, so ``import mha_lessons`` needs numpy alone.
Every function draws on an ``ax`` it is given (or a new one) and returns it, so
a chapter can arrange several panels and tests can inspect what was drawn.
"""

import numpy as np
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

# Colours that read on a white and on a dark page alike.
WEIGHTS_CMAP = "viridis"
MASK_COLORS = ("#d9d9d9", "#3b75af")  # blocked, may attend
SHAPE_COLORS = {"q": "#3b75af", "k": "#e1812c", "v": "#3a923a", "s": "#845b53", "o": "#8e6cb8"}


# One style for every figure of the course. A figure is drawn for the text column of the website (660 px at
# 1280 px), COLUMN_INCHES wide at 100 dots per inch (one dot is one CSS pixel on the page); at that width
# the smallest text, MIN_FONT_PT, shows at 9 CSS points or more. A wider figure is shrunk into the column,
# its text with it: draw it narrower or split it into rows (tests/test_browser.py measures every figure).
COLUMN_INCHES = 6.6
MIN_FONT_PT = 9.5
STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 11,
    "axes.titlesize": 11,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 12,
    # white behind every figure, so that it reads the same on the site's dark theme
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "axes.facecolor": "white",
}


def use_course_style():
    """Apply the course's figure style; in a notebook, store figures as 2x PNGs that record their smallest text.

    Each chapter calls it once after its imports. The stored PNG has twice the pixels of its displayed size
    (sharp on high-density screens; the output's metadata gives the displayed width and height), and the
    metadata key ``mha_lessons.smallest_font_pt`` the size of the smallest text drawn, which the browser
    test compares with the width the figure is shown at. Outside IPython only the style is applied.

    Returns
    -------
    None (so that a notebook cell ending with the call prints nothing)

    Examples
    --------
    >>> use_course_style()
    >>> plt.rcParams["font.size"] >= MIN_FONT_PT
    True
    """
    plt.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is not None and "image/png" in shell.display_formatter.formatters:
        from matplotlib.figure import Figure

        # The inline backend sets its own figure formatter when it is loaded, which pyplot does lazily, at
        # the first figure: load it now, so that the formatter set below is the one that stays.
        plt.close(plt.figure())
        shell.display_formatter.formatters["image/png"].for_type(Figure, _retina_png)
    return None


def smallest_font_pt(fig):
    """The size in points of the smallest visible, non-empty text in ``fig`` (None if it has no text).

    Examples
    --------
    >>> fig, ax = plt.subplots()
    >>> _ = ax.text(0.5, 0.5, "small", fontsize=7)
    >>> smallest_font_pt(fig)
    7.0
    >>> plt.close(fig)
    """
    texts = list(fig.texts)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += list(ax.texts) + [ax.title, ax._left_title, ax._right_title]
        if ax.axison:  # tick labels and axis labels are drawn only when the axes' frame is
            for axis in (ax.xaxis, ax.yaxis):
                texts += [axis.label] + axis.get_ticklabels(which="both")
        legend = ax.get_legend()
        if legend is not None:
            texts += list(legend.get_texts()) + [legend.get_title()]
    sizes = [t.get_fontsize() for t in texts if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else None


def _figure_texts(fig):
    texts = list(fig.texts)
    for ax in fig.axes:
        texts += list(ax.texts) + [ax.title, ax._left_title, ax._right_title]
        for axis in (ax.xaxis, ax.yaxis):
            texts += [axis.label, axis.offsetText] + axis.get_ticklabels(which="both")
        legend = ax.get_legend()
        if legend is not None:
            texts += list(legend.get_texts()) + [legend.get_title()]
    return texts


def fit_to_column(fig):
    """Redraw ``fig`` for the text column: no text below MIN_FONT_PT, no wider than COLUMN_INCHES.

    Text drawn smaller than MIN_FONT_PT is raised to it. A figure wider than the column is made as wide as the
    column: a strip of three or more panels side by side (one row of a grid, no colour bars) is split into two
    rows of panels of the same shape; any other wide figure of panels is narrowed, its layout made again (a
    drawing laid out in inches on a free axes, as ``diagram.draw_layer`` makes, is left as it is). Fonts keep
    their size, so that, shown in the column, the text is at least MIN_FONT_PT. Figures are displayed in a
    notebook through this function (``use_course_style``); a chapter may call it before ``plt.show()`` too.

    Parameters
    ----------
    fig : matplotlib.figure.Figure

    Returns
    -------
    matplotlib.figure.Figure
        ``fig``, changed in place.

    Examples
    --------
    >>> fig, axes = plt.subplots(1, 4, figsize=(12, 3))
    >>> _ = axes[0].set_title("small", fontsize=7)
    >>> _ = fit_to_column(fig)
    >>> smallest_font_pt(fig) >= MIN_FONT_PT, round(float(fig.get_figwidth()), 2)
    (True, 6.6)
    >>> sorted({ax.get_subplotspec().get_gridspec().get_geometry() for ax in axes})
    [(2, 2)]
    >>> plt.close(fig)
    """
    import math
    import warnings

    for text in _figure_texts(fig):
        if text.get_fontsize() < MIN_FONT_PT:
            text.set_fontsize(MIN_FONT_PT)
    for ax in fig.axes:
        for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            labels = axis.get_ticklabels(which="both")
            if labels and min(t.get_fontsize() for t in labels) < MIN_FONT_PT:
                ax.tick_params(axis=name, which="both", labelsize=MIN_FONT_PT)
    width, height = fig.get_size_inches()
    if width <= COLUMN_INCHES * 1.02:
        return fig
    specs = [ax.get_subplotspec() for ax in fig.axes]
    grids = {id(spec.get_gridspec()) if spec is not None else None for spec in specs}
    grid = specs[0].get_gridspec() if specs and specs[0] is not None else None
    n = len(fig.axes)
    if (n >= 3 and len(grids) == 1 and grid is not None and grid.get_geometry() == (1, n)
            and sorted(spec.colspan.start for spec in specs) == list(range(n))):
        from matplotlib.gridspec import GridSpec

        columns = math.ceil(n / 2)
        rows = GridSpec(2, columns, figure=fig)
        for ax, spec in zip(fig.axes, specs):
            ax.set_subplotspec(rows[spec.colspan.start // columns, spec.colspan.start % columns])
        panel_height = height * (COLUMN_INCHES / columns) / (width / n)
        fig.set_size_inches(COLUMN_INCHES, min(2 * panel_height, 2.2 * height))
    elif any(spec is None and not ax.axison for ax, spec in zip(fig.axes, specs)):
        return fig  # a drawing laid out in inches on one free axes (diagram.py): it is drawn for its size
    else:
        fig.set_size_inches(COLUMN_INCHES, height)
        for ax in fig.axes:  # a long legend inside a narrowed panel would cover its curves: put it below
            legend = ax.get_legend()
            if legend is not None and len(legend.get_texts()) >= 4 and legend.get_bbox_to_anchor() == ax.bbox:
                fig.set_size_inches(COLUMN_INCHES, max(fig.get_figheight(), height + 0.22 * len(legend.get_texts())))
                ax.legend(legend.legend_handles, [t.get_text() for t in legend.get_texts()],
                          loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):  # constrained layout redoes itself
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig.tight_layout()
    return fig


def _retina_png(fig):
    from IPython.core.pylabtools import retina_figure

    fit_to_column(fig)
    result = retina_figure(fig, base64=True, bbox_inches="tight")
    if result is None:
        return None
    data, metadata = result
    metadata["mha_lessons"] = {"smallest_font_pt": smallest_font_pt(fig), "dpi": float(fig.dpi)}
    return data, metadata


def _new_ax(ax, size):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def heatmap(matrix, *, ax=None, row_labels=None, col_labels=None, title=None, annotate=True,
            fmt="{:.2f}", vmin=0.0, vmax=None, cmap=WEIGHTS_CMAP, xlabel="key", ylabel="query"):
    """Draw a matrix (for example attention weights, queries down, keys across) with its values written in.

    Parameters
    ----------
    matrix : array_like, (n, m)
    row_labels, col_labels : sequences of str, optional
        Token names for the rows (queries) and columns (keys).
    annotate : bool
        Write each value in its cell, in black or white for contrast.

    Returns
    -------
    matplotlib.axes.Axes
    """
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {matrix.shape}")
    n, m = matrix.shape
    ax = _new_ax(ax, (0.6 * m + 1.5, 0.5 * n + 1.2))
    vmax = float(np.nanmax(matrix)) if vmax is None else vmax
    ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(m), labels=col_labels if col_labels is not None else range(m))
    ax.set_yticks(range(n), labels=row_labels if row_labels is not None else range(n))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    if title:
        ax.set_title(title, pad=12)
    if annotate:
        middle = vmin + 0.5 * (vmax - vmin)
        for i in range(n):
            for j in range(m):
                value = matrix[i, j]
                ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=9,
                        color="black" if value > middle else "white")
    return ax


def mask_picture(mask, *, ax=None, row_labels=None, col_labels=None, title=None):
    """Draw a boolean (n, m) mask: blue where the query may attend, grey where it may not."""
    mask = np.asarray(mask)
    if mask.ndim != 2 or mask.dtype != np.bool_:
        raise ValueError(f"mask_picture needs a 2-D boolean mask, got shape {mask.shape} and dtype {mask.dtype}")
    n, m = mask.shape
    ax = _new_ax(ax, (0.45 * m + 1.5, 0.45 * n + 1.2))
    from matplotlib.colors import ListedColormap

    ax.imshow(mask.astype(int), cmap=ListedColormap(MASK_COLORS), vmin=0, vmax=1)
    ax.set_xticks(range(m), labels=col_labels if col_labels is not None else range(m))
    ax.set_yticks(range(n), labels=row_labels if row_labels is not None else range(n))
    ax.set_xticks(np.arange(m + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(n + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    if title:
        ax.set_title(title, pad=12)
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
        ("Q", d_k, n, "q", f"n × d_k\n{n} × {d_k}"), ("·", None, None, None, None),
        ("Kᵀ", m, d_k, "k", f"d_k × m\n{d_k} × {m}"), ("→", None, None, None, None),
        ("S", m, n, "s", f"n × m\n{n} × {m}"), ("softmax\n→", None, None, None, None),
        ("A", m, n, "s", f"n × m\n{n} × {m}"), ("·", None, None, None, None),
        ("V", d_v, m, "v", f"m × d_v\n{m} × {d_v}"), ("→", None, None, None, None),
        ("out", d_v, n, "o", f"n × d_v\n{n} × {d_v}"),
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


HEAD_COLORS = ("#3b75af", "#e1812c", "#3a923a", "#c03d3e", "#8e6cb8", "#845b53", "#d684bd", "#7f7f7f")


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
    from ._checks import check_num_heads

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
    ax.text(left_w / 2, 0.35 * u + 0.1, f"(n, d_model) = ({n}, {d_model})", ha="center", fontsize=10)
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
    ax.text(x1 + right_w / 2, -(n + 0.9) * u, f"(h, n, d_k) = ({num_heads}, {n}, {d_k})",
            ha="center", fontsize=10)
    ax.set_xlim(-1.0, x1 + right_w + 0.3)
    ax.set_ylim(-(n + 1.5) * u, 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def heads_mosaic(weights, *, ax=None, max_cols=8, vmax=None, cmap=WEIGHTS_CMAP, label_size=8):
    """Draw the (h, n, m) attention weights of all heads as one image: a grid of n × m blocks.

    One image on one axes is far cheaper to draw than h separate heat-maps, which
    keeps a slider move fast. Blocks are separated by a blank row and column;
    head i sits at grid cell (i // cols, i % cols), read left to right, top to bottom.

    Returns
    -------
    matplotlib.axes.Axes whose single image is the mosaic (NaN in the gaps).
    """
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 3:
        raise ValueError(f"heads_mosaic needs weights of shape (h, n, m), got shape {weights.shape}")
    h, n, m = weights.shape
    cols = min(h, max_cols)
    rows = -(-h // cols)  # ceiling division
    mosaic = np.full((rows * (n + 1) - 1, cols * (m + 1) - 1), np.nan)
    for i in range(h):
        r, c = divmod(i, cols)
        mosaic[r * (n + 1):r * (n + 1) + n, c * (m + 1):c * (m + 1) + m] = weights[i]
    ax = _new_ax(ax, (1.2 * cols + 1, 1.2 * rows + 0.6))
    colormap = plt.get_cmap(cmap).with_extremes(bad=(0, 0, 0, 0))  # gaps are transparent
    vmax = float(np.nanmax(weights)) if vmax is None else vmax
    ax.imshow(mosaic, cmap=colormap, vmin=0.0, vmax=vmax, interpolation="nearest")
    if h <= max_cols:  # a label per head; with more rows, one label per row keeps redrawing cheap
        for i in range(h):
            ax.text(i * (m + 1) + (m - 1) / 2, -0.7, f"head {i}", ha="center", va="bottom",
                    fontsize=label_size)
    else:
        for r in range(rows):
            last = min(h, (r + 1) * cols) - 1
            ax.text(-0.8, r * (n + 1) + (n - 1) / 2, f"heads {r * cols}-{last}", ha="right", va="center",
                    fontsize=label_size)
    ax.axis("off")
    return ax


def position_vectors(positions, *, ax=None, title=None, cmap="RdBu_r"):
    """Draw position vectors, one row per position and one column per feature, from -1 (blue) to +1 (red).

    Made for ``position.sinusoidal_positions``: its even columns are sines and its odd ones
    cosines, each pair turning more slowly than the one to its left.

    Parameters
    ----------
    positions : array_like, (n, d_model)

    Returns
    -------
    matplotlib.axes.Axes whose single image is ``positions``, with a colour bar beside it.
    """
    positions = np.asarray(positions, dtype=float)
    if positions.ndim != 2:
        raise ValueError(f"position_vectors needs an (n, d_model) matrix, got shape {positions.shape}")
    n, d_model = positions.shape
    ax = _new_ax(ax, (0.25 * d_model + 2.5, 0.08 * n + 1.5))
    image = ax.imshow(positions, cmap=cmap, vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, fraction=0.05, pad=0.03)
    ax.set_xlabel("feature (even: sin, odd: cos)")
    ax.set_ylabel("position i")  # i, as in chapter 1 (the notation page keeps t for decoding steps)
    if title:
        ax.set_title(title)
    return ax


def roofline(intensities, roofs, *, measured=None, ax=None, title=None):
    """The roofline picture: attainable FLOP/s against arithmetic intensity, one roof per machine, stages as points.

    A machine that does at most ``R_FLOP`` FLOP/s and moves at most ``R_mem`` bytes/s attains
    ``min(R_FLOP, I * R_mem)`` FLOP/s on work of intensity ``I`` FLOPs per byte (Williams et al., 2009): a sloped
    line (memory-bound) that meets a flat one (compute-bound) at the balance point ``I = R_FLOP / R_mem``.

    Parameters
    ----------
    intensities : dict of str to float
        Each stage's FLOPs per byte; stages of zero intensity (a copy) are left out.
    roofs : dict of str to (float, float)
        For each machine, ``(R_FLOP, R_mem)`` in FLOP/s and bytes/s. Each stage is drawn on each roof.
    measured : dict of str to float, optional
        FLOP/s each stage reached on the first machine, drawn as open markers beside its roof point.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        With one roof line per machine (labelled by its name) and a vertical dotted line at each balance point.

    Examples
    --------
    >>> ax = roofline({"softmax": 0.16, "scores": 28.4}, {"CPU": (1e11, 5e10)})
    >>> [line.get_label() for line in ax.get_lines()][:1]
    ['CPU']
    """
    points = {name: float(i) for name, i in intensities.items() if i > 0}
    if not points or not roofs:
        raise ValueError(f"roofline needs at least one stage of positive intensity and one machine, got "
                         f"{len(points)} stages and {len(roofs)} machines")
    for machine, (r_flop, r_mem) in roofs.items():
        if not (r_flop > 0 and r_mem > 0):
            raise ValueError(f"machine {machine!r}: rates must be positive, got R_FLOP = {r_flop}, R_mem = {r_mem}")
    ax = _new_ax(ax, (7, 4.5))
    lo = min(min(points.values()), *(f / m for f, m in roofs.values())) / 4
    hi = max(max(points.values()), *(f / m for f, m in roofs.values())) * 4
    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    markers = "os^vDP*X"
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (machine, (r_flop, r_mem)) in enumerate(roofs.items()):
        color = colors[k % len(colors)]
        ax.loglog(grid, np.minimum(r_flop, grid * r_mem), "-", color=color, linewidth=2, label=machine)
        ax.axvline(r_flop / r_mem, color=color, linestyle=":", linewidth=1)
        for s, (name, intensity) in enumerate(points.items()):
            ax.plot(intensity, min(r_flop, intensity * r_mem), markers[s % len(markers)], color=color,
                    markersize=7, label=name if k == 0 else None, markeredgecolor="black")
    if measured:
        first = list(roofs)[0]
        for s, (name, intensity) in enumerate(points.items()):
            if name in measured:
                ax.plot(intensity, measured[name], markers[s % len(markers)], markerfacecolor="none",
                        markeredgecolor="black", markersize=9,
                        label=f"measured on {first}" if s == 0 else None)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("attainable FLOP/s")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    return ax
