"""Interactive panels for the chapters: sliders that redraw a figure.

ipywidgets are imported here only (matplotlib here and in ``plotting.py``). Every panel is split in two:

- a pure *draw function* ``draw_<topic>(fig, **values) -> str`` (``drawings.py``,
  whose names are reachable here too) that draws the figure for the given slider
  values and returns a short text summary;
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

import ipywidgets as widgets
from IPython.display import display
from matplotlib.figure import Figure

from .drawings import (COST_HEADS, COST_LENGTHS, COST_WIDTHS, LINEAR_STAGES, MEMORY_ARRAYS,  # noqa: F401  (reachable)
                       MULTIHEAD_WIDTHS, QUADRATIC_STAGES, SCALING_KEYS, SCALING_ROWS, SCALING_WIDTHS, SYMBOLS,
                       MULTIHEAD_MAX_HEADS, cost_numbers, cost_summary, draw_cost, draw_multihead, draw_scaling,
                       head_choices, nearest_choice)


def make_panel(draw, controls, figsize=(8, 4), *, symbols=None, adjust=None):
    """Wire ipywidgets ``controls`` (a dict name -> widget) to ``draw(fig, **values) -> str``.

    Each control is shown after its label and between the two ends of its range
    (``symbols``: name -> (label as HTML, lowest value, highest value); without it the
    control's ``description`` serves). The summary returned by ``draw`` is printed under
    the figure. ``adjust(name, controls)``, if given, runs before a redraw when control
    ``name`` moved, and may change the other controls (their options, their value)
    without causing a second redraw.

    Returns
    -------
    ipywidgets.VBox, with the class ``mha-live-panel`` and the dict of controls as ``.controls``.
    Its second child (under the controls) is a note, hidden until the front end marks the
    panel as cut off from its kernel (a restart): ``live_helper_html`` holds the style that
    shows it.
    """
    output = widgets.Output()
    busy = []

    def redraw(change=None):
        if busy:
            return
        if change is not None and adjust is not None:
            busy.append(True)
            try:
                adjust(change["owner"].mha_name, controls)
            finally:
                busy.clear()
        values = {name: control.value for name, control in controls.items()}
        # A Figure outside pyplot: no figure left open to be shown again by the next redraw's plt.show()
        fig = Figure(figsize=figsize)
        summary = draw(fig, **values)
        with output:
            output.clear_output(wait=True)
            display(fig)
            if summary:
                print(summary)

    rows = []
    for name, control in controls.items():
        control.mha_name = name
        control.style = {"description_width": "initial"}
        if symbols and name in symbols:
            label, low, high = symbols[name]
            control.description = ""
            end = "margin:0 0.3em;font-size:90%;color:#555"
            rows.append(widgets.HBox([widgets.HTML(f"<b>{label}</b>", layout={"margin": "0 0.4em 0 0"}),
                                      widgets.HTML(f'<span style="{end}">{low}</span>'), control,
                                      widgets.HTML(f'<span style="{end}">{high}</span>')],
                                     layout={"align_items": "center", "margin": "0 1.5em 0 0"}))
        else:
            rows.append(control)
        control.observe(redraw, names="value")
    stale = widgets.HTML(f'<div class="mha-stale" style="display:none">{STALE_NOTE}</div>')
    box = widgets.VBox([widgets.HBox(rows, layout={"flex_flow": "row wrap"}), stale, output])
    box.add_class("mha-live-panel")
    box.controls = controls
    redraw()
    return box


STALE_NOTE = ("This panel has lost its kernel (it was restarted or shut down), so moving the sliders redraws "
              "nothing. Run the notebook's cells again, down to this one, to make it live.")

# Shown after a live panel (an HTML output, trusted because the kernel produced it): the style that
# reveals the stale note when ipywidgets marks a view `jupyter-widgets-disconnected`, and a script that
# marks every element of a live panel `data-lm-suppress-shortcuts`, so that JupyterLab and Notebook 7 leave
# the arrow keys to the focused slider, and that replaces "model not found" in a reopened notebook by an instruction.
LIVE_HELPER = """<style>
.jupyter-widgets-disconnected .mha-stale { display: block !important; color: #a40000; font-weight: bold; }
.mha-live-panel .jupyter-widgets-disconnected::before { content: none !important; }  /* one note, not an icon each */
</style>
<script>
(function () {
  function mark() {
    // Lumino stops looking for a shortcut at the first element that carries the attribute, walking up
    // from the focused one, which a selector such as ".jp-Notebook :focus" matches first: mark them all.
    document.querySelectorAll(".mha-live-panel, .mha-live-panel *").forEach(function (node) {
      if (!node.hasAttribute("data-lm-suppress-shortcuts")) {
        node.setAttribute("data-lm-suppress-shortcuts", "true");
      }
    });
    document.querySelectorAll(".jupyter-widgets").forEach(function (node) {
      if (node.children.length === 0 && /model not found/.test(node.textContent)) {
        node.textContent = "This live panel belongs to an earlier session: run the notebook's cells again, " +
          "down to this one, to make it live.";
      }
    });
  }
  mark();
  if (!window.mhaLessonsObserver) {  // one observer, however many panels and re-runs
    window.mhaLessonsObserver = new MutationObserver(mark);
    window.mhaLessonsObserver.observe(document.body, {childList: true, subtree: true});
  }
})();
</script>"""


def live_helper_html():
    """The HTML output that goes with live panels (style and script above); shown once after each panel."""
    return LIVE_HELPER


# ---------------------------------------------------------------- chapter 3: heads and width

def multihead_panel(num_heads=4, d_model=64):
    """Sliders for the number of heads h and the model width d_model, redrawing ``draw_multihead``.

    The h slider offers only the divisors of d_model (``head_choices``); moving d_model keeps h
    where it still divides, and moves it to the nearest divisor otherwise.
    """
    if d_model not in MULTIHEAD_WIDTHS:
        raise ValueError(f"the d_model slider offers {list(MULTIHEAD_WIDTHS)}, got d_model = {d_model!r}")
    if num_heads not in head_choices(d_model):
        raise ValueError(f"h = {num_heads!r} does not divide d_model = {d_model}: "
                         f"choose among {list(head_choices(d_model))}")
    controls = {
        "num_heads": widgets.SelectionSlider(options=head_choices(d_model), value=num_heads),
        "d_model": widgets.SelectionSlider(options=MULTIHEAD_WIDTHS, value=d_model),
    }

    def adjust(moved, controls):
        if moved == "d_model":
            heads, choices = controls["num_heads"], head_choices(controls["d_model"].value)
            keep = nearest_choice(heads.value, choices)
            heads.options = choices
            heads.value = keep

    symbols = {"num_heads": (SYMBOLS["num_heads"], "1", f"{MULTIHEAD_MAX_HEADS} (divisors of d<sub>model</sub>)"),
               "d_model": (SYMBOLS["d_model"], MULTIHEAD_WIDTHS[0], MULTIHEAD_WIDTHS[-1])}
    return make_panel(draw_multihead, controls, figsize=(10, 3.6), symbols=symbols, adjust=adjust)


# ---------------------------------------------------------------- chapter 2: why divide by √d_k

def scaling_panel(d_k=64, scaled=True):
    """A slider for d_k (powers of two, 1 to 1024) and a check box for the 1/√d_k, redrawing ``draw_scaling``."""
    if d_k not in SCALING_WIDTHS:
        raise ValueError(f"the d_k slider offers {list(SCALING_WIDTHS)}, got d_k = {d_k!r}")
    controls = {
        "d_k": widgets.SelectionSlider(options=SCALING_WIDTHS, value=d_k),
        "scaled": widgets.Checkbox(value=bool(scaled), description="divide by √d_k", indent=False),
    }
    symbols = {"d_k": (SYMBOLS["d_k"], SCALING_WIDTHS[0], SCALING_WIDTHS[-1])}
    return make_panel(draw_scaling, controls, figsize=(10, 3.8), symbols=symbols)


# ---------------------------------------------------------------- chapter 4: what the layer costs

def cost_panel(n=1024, d_model=512, num_heads=8):
    """Sliders for n, d_model and h (h among the divisors of d_model), redrawing ``draw_cost``."""
    for name, value, offered in (("n", n, COST_LENGTHS), ("d_model", d_model, COST_WIDTHS),
                                 ("num_heads", num_heads, COST_HEADS)):
        if value not in offered:
            raise ValueError(f"the {name} slider offers {list(offered)}, got {name} = {value!r}")
    controls = {"n": widgets.SelectionSlider(options=COST_LENGTHS, value=n),
                "d_model": widgets.SelectionSlider(options=COST_WIDTHS, value=d_model),
                "num_heads": widgets.SelectionSlider(options=COST_HEADS, value=num_heads)}
    symbols = {name: (SYMBOLS[name], values[0], values[-1])
               for name, values in (("n", COST_LENGTHS), ("d_model", COST_WIDTHS), ("num_heads", COST_HEADS))}
    return make_panel(draw_cost, controls, figsize=(9, 3.4), symbols=symbols)
