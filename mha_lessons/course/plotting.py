"""The course's figures: attention heat-maps, mask pictures and shape diagrams (their style: ``style.py``).

matplotlib is imported here only, so ``import mha_lessons`` needs numpy alone.
Every function draws on an ``ax`` it is given (or a new one) and returns it, so
a chapter can arrange several panels and tests can inspect what was drawn.
"""

import numpy as np
import matplotlib.pyplot as plt

from .shapes import _new_ax, head_layout, sdpa_shapes  # noqa: F401  (reachable here)
from .style import (COLUMN_INCHES, HEAD_COLORS, MASK_COLORS, MIN_FONT_PT, SHAPE_COLORS, STYLE,  # noqa: F401
                    WEIGHTS_CMAP, fit_to_column, smallest_font_pt, use_course_style)

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
    ax.set_ylabel("position $i$")  # i, as in chapter 1 (the notation page keeps t for decoding steps)
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
