"""Interactive panels for the chapters: sliders that redraw a figure.

ipywidgets are imported here only (matplotlib here and in ``plotting.py``). Every panel is split in two:

- a pure *draw function* ``draw_<topic>(fig, **values) -> str`` that clears the
  figure, draws it for the given slider values and returns a short text summary
  (or a plain-words message for values that make no sense, never a traceback).
  Tests call it directly, without a browser or a kernel;
- a *panel function* ``<topic>_panel(**defaults)`` that builds the sliders with
  ``make_panel`` and redraws through the draw function on every change.

A website cannot run Python, so the chapters show ``panels.py``'s precomputed
panels, which call these draw functions once per grid point when the notebook
runs and let the page pick a state; the live panels here remain for a running
notebook, where any value on the sliders works.
Only widgets common to ipywidgets 7.7 (Colab) and 8 (JupyterLab, Notebook 7)
are used: sliders, dropdowns, check boxes, ``Output``, ``HBox``/``VBox``, ``HTML``.

The package imports this module only when a chapter uses it (``M.widgets``), so
``import mha_lessons`` still needs numpy alone.
"""

import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np

from ._checks import is_int
from .attention import softmax
from .complexity import param_count
from .multihead import init_params, multihead_attention
from .plotting import heads_mosaic
from .scaling import attention_logits
from .stats import entropy


def make_panel(draw, controls, figsize=(8, 4)):
    """Wire ipywidgets ``controls`` (a dict name -> widget) to ``draw(fig, **values) -> str``.

    Returns the ``VBox`` to display. The summary returned by ``draw`` is shown
    under the figure.
    """
    def redraw(**values):  # interactive_output clears the output and calls this on every change
        fig = plt.figure(figsize=figsize)
        summary = draw(fig, **values)
        plt.show()
        if summary:
            print(summary)

    for control in controls.values():
        control.style = {"description_width": "initial"}
    output = widgets.interactive_output(redraw, controls)
    return widgets.VBox([widgets.HBox(list(controls.values())), output])


# ---------------------------------------------------------------- chapter 3: heads and width

MULTIHEAD_WIDTHS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512)


def draw_multihead(fig, num_heads=4, d_model=64, n=6, *, seed=0):
    """Draw every head's attention weights for a fixed input of n tokens; return a summary.

    The input tokens and the parameters are drawn from ``seed`` (parameters with
    ``init_params``, tokens from a standard normal). When ``num_heads`` does not
    divide ``d_model`` the figure says so in words and the summary explains why.

    Returns
    -------
    str : d_k, the parameter count, the output and weight shapes (or the message).
    """
    fig.clear()
    if d_model % num_heads:
        message = (f"d_model = {d_model} is not divisible by h = {num_heads}: every head needs the same whole "
                   f"number of features, and {d_model} / {num_heads} = {d_model / num_heads:.2f}.\n"
                   f"Pick h among the divisors of {d_model}: "
                   f"{[h for h in range(1, 17) if d_model % h == 0]}.")
        ax = fig.add_subplot()
        # Line breaks placed by hand: matplotlib's wrap=True costs about 50 ms a redraw.
        ax.text(0.5, 0.5, message.replace(": every", ":\nevery"), ha="center", va="center", fontsize=11)
        ax.axis("off")
        return message
    params = init_params(d_model, num_heads, seed=seed)
    x = np.random.default_rng(seed).normal(size=(n, d_model))  # (n, d_model): a fixed short input
    y, weights = multihead_attention(x, x, x, params)  # y (n, d_model), weights (h, n, n)
    heads_mosaic(weights, ax=fig.add_subplot())
    fig.suptitle(f"h = {num_heads} heads of width d_k = {d_model // num_heads}, on the same {n} tokens")
    return (f"d_model = {d_model}, h = {num_heads}  ->  d_k = d_model / h = {d_model // num_heads}\n"
            f"parameters: 4·d_model² + 4·d_model = {param_count(d_model, num_heads):,} (the same for every h)\n"
            f"output y: {y.shape}   weights: {weights.shape} = (h, n, n)")


def multihead_panel(num_heads=4, d_model=64):
    """Sliders for the number of heads h and the model width d_model, redrawing ``draw_multihead``."""
    controls = {
        "num_heads": widgets.IntSlider(value=num_heads, min=1, max=16, description="heads h"),
        "d_model": widgets.SelectionSlider(options=MULTIHEAD_WIDTHS, value=d_model, description="d_model"),
    }
    return make_panel(draw_multihead, controls, figsize=(10, 3.6))


# ---------------------------------------------------------------- chapter 2: why divide by √d_k

SCALING_WIDTHS = tuple(2**i for i in range(11))  # the d_k slider: 1, 2, 4, ..., 1024
SCALING_ROWS = 200  # rows of scores in the histogram
SCALING_KEYS = 16  # keys per row; the softmax bars show the first row


def draw_scaling(fig, d_k=64, scaled=True, *, seed=0):
    """Histogram of attention scores and the softmax of one row, for width d_k, with or without 1/√d_k.

    The scores are ``scaling.attention_logits(SCALING_ROWS, SCALING_KEYS, d_k, ...)``
    (standard normal queries and keys, drawn from ``seed``). Left: the histogram
    of all of them as a density, with the normal density of variance d_k
    (unscaled) or 1 (scaled) that the derivation predicts; the x-range is
    ±4 √d_k either way, so toggling the scale shows the spread shrink by √d_k.
    Right: the softmax of the first row, one bar per key, with the uniform
    weight 1/m dashed.

    Returns
    -------
    str : the measured and predicted spread, the largest weight and the entropy
    of the row (or a message for a width that is not a positive whole number).
    """
    fig.clear()
    if not is_int(d_k) or d_k < 1:
        message = f"d_k is the number of features of a query or key: a positive whole number, got {d_k!r}."
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, message.replace(": a", ":\na"), ha="center", va="center", fontsize=11)
        ax.axis("off")
        return message
    d_k = int(d_k)
    scores = attention_logits(SCALING_ROWS, SCALING_KEYS, d_k, divisor="sqrt" if scaled else "none",
                              seed=seed)  # (r, m)
    weights = softmax(scores[0])  # (m,): the first row
    predicted_std = 1.0 if scaled else math.sqrt(d_k)
    measured_std = float(scores.std())
    reach = 4 * max(1.0, math.sqrt(d_k))
    ax_hist, ax_bar = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})

    width = predicted_std / 4  # bins a quarter of a standard deviation wide, scaled or not, only where scores are
    bins = width * np.arange(np.floor(scores.min() / width), np.ceil(scores.max() / width) + 1)
    ax_hist.hist(scores.ravel(), bins=bins, density=True, color="#3b75af", alpha=0.7, label="scores")
    grid = np.linspace(-reach, reach, 400)
    density = np.exp(-0.5 * (grid / predicted_std) ** 2) / (predicted_std * math.sqrt(2 * math.pi))
    ax_hist.plot(grid, density, color="black", lw=1.2,
                 label="normal, variance 1" if scaled else f"normal, variance d_k = {d_k}")
    ax_hist.set_xlim(-reach, reach)
    ax_hist.set_xlabel("q·k / √d_k" if scaled else "q·k")
    ax_hist.set_ylabel("density")
    ax_hist.set_title(f"{scores.size} scores, d_k = {d_k}: standard deviation {measured_std:.2f}")
    ax_hist.legend(loc="upper right", fontsize=8)

    m = SCALING_KEYS
    ax_bar.bar(np.arange(m), weights, color="#e1812c")
    ax_bar.axhline(1 / m, color="black", ls="--", lw=1)
    ax_bar.set_ylim(0, 1)
    ax_bar.set_xticks(range(0, m, 3))
    ax_bar.set_xlabel("key j")
    ax_bar.set_ylabel("softmax weight")
    ax_bar.set_title(f"one row: largest weight {weights.max():.2f}")
    fig.tight_layout()
    return (f"d_k = {d_k}, {'divided by √d_k' if scaled else 'not scaled'}: "
            f"scores with standard deviation {measured_std:.2f} (predicted {predicted_std:.2f})\n"
            f"softmax of one row of {m} scores: largest weight {weights.max():.3f} (uniform: {1 / m:.3f})\n"
            f"entropy of that row: {float(entropy(weights)):.3f} nats (uniform: log {m} = {math.log(m):.3f})")


def scaling_panel(d_k=64, scaled=True):
    """A slider for d_k (powers of two, 1 to 1024) and a check box for the 1/√d_k, redrawing ``draw_scaling``."""
    if d_k not in SCALING_WIDTHS:
        raise ValueError(f"the d_k slider offers {list(SCALING_WIDTHS)}, got d_k = {d_k!r}")
    controls = {
        "d_k": widgets.SelectionSlider(options=SCALING_WIDTHS, value=d_k, description="d_k"),
        "scaled": widgets.Checkbox(value=bool(scaled), description="divide by √d_k"),
    }
    return make_panel(draw_scaling, controls, figsize=(10, 3.8))
