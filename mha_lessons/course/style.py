"""The course's figure style: one look for every figure, drawn for the text column of the website.

``use_course_style`` applies it in a chapter; ``fit_to_column`` redraws a figure for the column (no text
below MIN_FONT_PT, no wider than COLUMN_INCHES), and a notebook displays every figure through it. The
figures themselves are drawn by ``plotting.py``, which makes these names reachable too.
"""

import matplotlib.pyplot as plt

# Colours that read on a white and on a dark page alike.
WEIGHTS_CMAP = "viridis"
MASK_COLORS = ("#d9d9d9", "#3b75af")  # blocked, may attend
SHAPE_COLORS = {"q": "#3b75af", "k": "#e1812c", "v": "#3a923a", "s": "#845b53", "o": "#8e6cb8"}
HEAD_COLORS = ("#3b75af", "#e1812c", "#3a923a", "#c03d3e", "#8e6cb8", "#845b53", "#d684bd", "#7f7f7f")

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


def _figure_texts(fig, *, shown_only=False):
    """Every text of ``fig``; with ``shown_only``, only what is drawn: the texts of visible axes, their tick and
    axis labels only where the axes' frame is drawn."""
    texts = list(fig.texts)
    for ax in fig.axes:
        if shown_only and not ax.get_visible():
            continue
        texts += list(ax.texts) + [ax.title, ax._left_title, ax._right_title]
        if ax.axison or not shown_only:  # tick labels and axis labels are drawn only when the axes' frame is
            for axis in (ax.xaxis, ax.yaxis):
                texts += [axis.label] + ([] if shown_only else [axis.offsetText]) + axis.get_ticklabels(which="both")
        legend = ax.get_legend()
        if legend is not None:
            texts += list(legend.get_texts()) + [legend.get_title()]
    return texts


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
    texts = _figure_texts(fig, shown_only=True)
    sizes = [t.get_fontsize() for t in texts if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else None


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
