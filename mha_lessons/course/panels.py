"""The chapters' panels that work on the website with no kernel: every state drawn in Python, chosen in the browser.

``scaling_panel`` (chapter 2), ``multihead_panel`` (chapter 3) and ``cost_panel`` (chapter 4), built
with ``build_panel`` (``precomputed.py``, whose names are reachable here too) from the draw functions
of ``drawings.py``. In a live front end (JupyterLab, Notebook 7, Colab) each shows the live panel of
``widgets.py`` instead, and only then imports ipywidgets.
"""

import math

from . import drawings
from .drawings import (COST_HEADS, COST_LENGTHS, COST_WIDTHS, LINEAR_STAGES, QUADRATIC_STAGES,  # noqa: F401
                       cost_numbers)
from .precomputed import (FRAME_COLORS, FRAME_DPI, FRAME_MIN_WIDTH, LIVE_ENV, SELECT_JS, Checkbox,  # noqa: F401
                          Panel, Slider, State, build_panel, figure_png, live_frontend, state_key)


def _live(name, **values):
    """The live ipywidgets panel ``widgets.<name>(**values)``, for a live front end (ipywidgets imported here)."""
    from . import widgets

    return getattr(widgets, name)(**values)


# ---------------------------------------------------------------- chapter 2: why divide by √d_k

def scaling_state(d_k, scaled, *, seed=0):
    png, summary = figure_png(lambda fig: drawings.draw_scaling(fig, d_k=d_k, scaled=scaled, seed=seed),
                              figsize=(10, 3.8))
    scores = drawings.SCALING_ROWS * drawings.SCALING_KEYS
    alt = (f"Left: histogram of {scores} attention scores for d_k = {d_k}, "
           f"{'divided by the square root of d_k' if scaled else 'not scaled'}, with the predicted normal curve. "
           f"Right: the softmax weights of one row of {drawings.SCALING_KEYS} scores as bars, "
           f"with the uniform weight dashed. " + summary.splitlines()[0].split(": ", 1)[1].capitalize() + "; "
           + summary.splitlines()[1].split(": ", 1)[1] + ".")
    return State([png], [alt], summary)


def scaling_panel(d_k=64, scaled=True, *, widths=None, seed=0):
    """Chapter 2's panel: d_k (powers of two, 1 to 1024) and the 1/√d_k check box, every state precomputed.

    In a live front end it shows ``widgets.scaling_panel`` instead (``Panel._ipython_display_``).
    """
    controls = [Slider("d_k", "d_k", tuple(widths or drawings.SCALING_WIDTHS), d_k, symbol=drawings.SYMBOLS["d_k"]),
                Checkbox("scaled", "divide by √d_k", bool(scaled), symbol="divide by √<i>d</i><sub>k</sub>")]
    return build_panel(controls, lambda d_k, scaled: scaling_state(d_k, scaled, seed=seed),
                       title="Scores and softmax for a chosen d_k",
                       live=lambda: _live("scaling_panel", d_k=d_k, scaled=scaled))


# ---------------------------------------------------------------- chapter 3: heads and width

MULTIHEAD_HEADS = (1, 2, 4, 8, 16)  # every one divides every width below: each state is a layer
MULTIHEAD_WIDTHS = (16, 32, 64, 128, 256, 512)


def multihead_state(num_heads, d_model, *, n=6, seed=0, layer=True):
    from . import diagram

    png, summary = figure_png(lambda fig: drawings.draw_multihead(fig, num_heads=num_heads, d_model=d_model, n=n,
                                                                 seed=seed), figsize=(10, 3.6))
    if d_model % num_heads:
        frames, alts = [png], [summary]
        if layer:
            frames.append(None)
            alts.append("no layer diagram: h does not divide d_model")
        return State(frames, alts, summary)
    d_k = d_model // num_heads
    alts = [f"{num_heads} heat map{'s' if num_heads > 1 else ''} of attention weights, one per head, each "
            f"{n} by {n} (rows are the {n} query tokens, columns the keys); heads of width d_k = {d_k}."]
    frames = [png]
    if layer:
        def draw(fig):
            return diagram.draw_layer(d_model, num_heads, n=n, ax=fig.add_axes((0, 0, 1, 1)))  # laid out in inches
        # the dots per inch that make the frame FRAME_MIN_WIDTH px wide, the narrowest it is shown at
        layer_dpi = math.ceil(FRAME_MIN_WIDTH / diagram.FIGSIZE[0])
        layer_png, drawing = figure_png(draw, figsize=diagram.FIGSIZE, dpi=layer_dpi)
        frames.append(layer_png)
        alts.append(f"Diagram of the layer for d_model = {d_model}, h = {num_heads}, n = {n}: X goes through "
                    f"W_Q, W_K and W_V (each {drawing.matrices['W_Q'][0]} by {drawing.matrices['W_Q'][1]}), is split "
                    f"into {num_heads} heads of width {d_k}, the heads attend side by side, their outputs are "
                    f"concatenated and mixed by W_O ({drawing.matrices['W_O'][0]} by {drawing.matrices['W_O'][1]}) "
                    f"into Y. Arrows carry the shapes: " + "; ".join(drawing.labels).replace("\n", " ") + ".")
    return State(frames, alts, summary)


def multihead_panel(num_heads=4, d_model=64, *, heads=MULTIHEAD_HEADS, widths=MULTIHEAD_WIDTHS, layer=True, seed=0):
    """Chapter 3's panel: h and d_model -> every head's weights, the layer diagram, d_k, parameters, shapes.

    In a live front end it shows ``widgets.multihead_panel`` instead, whose h slider follows the
    divisors of d_model (``Panel._ipython_display_``).
    """
    controls = [Slider("num_heads", "heads h", tuple(heads), num_heads, symbol=drawings.SYMBOLS["num_heads"]),
                Slider("d_model", "width d_model", tuple(widths), d_model, symbol=drawings.SYMBOLS["d_model"])]
    return build_panel(controls, lambda num_heads, d_model: multihead_state(num_heads, d_model, seed=seed,
                                                                             layer=layer),
                       title="Heads and width", frame_names=("heads", "layer") if layer else ("heads",),
                       live=lambda: _live("multihead_panel", num_heads=num_heads, d_model=d_model))


# ---------------------------------------------------------------- chapter 4: what the layer costs

# The website's grid (each state a chart); the live panel offers widgets.COST_* (every power of two).
COST_PANEL_LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
COST_PANEL_WIDTHS = (512, 2048)
COST_PANEL_HEADS = (1, 8)


def _mib(x):
    return f"{x / 2**20:.3g} MiB"


def cost_state(n, d_model, num_heads):
    """The cost explorer for one state: the chart of ``drawings.draw_cost``, its alt text and summary."""
    numbers = cost_numbers(n, d_model, num_heads)
    flops, memory = numbers["flops"], numbers["memory"]
    png, summary = figure_png(lambda fig: drawings.draw_cost(fig, n=n, d_model=d_model, num_heads=num_heads),
                              figsize=(9, 3.4), colors=16)
    stages = ", ".join(f"{s.replace('_', ' ')} {100 * flops[s] / flops['total']:.0f}%"
                       for s in drawings.LINEAR_STAGES + drawings.QUADRATIC_STAGES)
    arrays = ", ".join(f"{a.replace('_', ' ')} {_mib(memory[a])}" for a in drawings.MEMORY_ARRAYS)
    alt = (f"Two bar charts on logarithmic axes for n = {n}, d_model = {d_model}, h = {num_heads}. "
           f"FLOPs by stage, as shares of the total: {stages}. Memory by array, float32: {arrays}.")
    return State([png], [alt], summary, extra=numbers)


def cost_panel(n=1024, d_model=512, num_heads=8, *, lengths=COST_PANEL_LENGTHS, widths=COST_PANEL_WIDTHS,
               heads=COST_PANEL_HEADS):
    """Chapter 4's cost explorer: n, d_model and h -> FLOPs by stage, memory by array, the n² crossover.

    In a live front end it shows ``widgets.cost_panel`` instead (``Panel._ipython_display_``).
    """
    controls = [Slider("n", "tokens n", tuple(lengths), n, symbol=drawings.SYMBOLS["n"]),
                Slider("d_model", "width d_model", tuple(widths), d_model, symbol=drawings.SYMBOLS["d_model"]),
                Slider("num_heads", "heads h", tuple(heads), num_heads, symbol=drawings.SYMBOLS["num_heads"])]
    return build_panel(controls, cost_state, title="What one layer costs", frame_names=("chart",),
                       live=lambda: _live("cost_panel", n=n, d_model=d_model, num_heads=num_heads))
