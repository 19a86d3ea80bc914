"""Interactive panels for the chapters: sliders that redraw a figure.

ipywidgets and matplotlib are imported here only. Every panel is split in two:

- a pure *draw function* ``draw_<topic>(fig, **values) -> str`` that clears the
  figure, draws it for the given slider values and returns a short text summary
  (or a plain-words message for values that make no sense, never a traceback).
  Tests call it directly, without a browser or a kernel;
- a *panel function* ``<topic>_panel(**defaults)`` that builds the sliders with
  ``make_panel`` and redraws through the draw function on every change.

A website cannot run Python, so each chapter first calls the draw function with
the default values in an ordinary cell (the figure the website shows), then
displays the panel with a note that the sliders need a running notebook.
Only widgets common to ipywidgets 7.7 (Colab) and 8 (JupyterLab, Notebook 7)
are used: sliders, dropdowns, check boxes, ``Output``, ``HBox``/``VBox``, ``HTML``.
"""


def make_panel(draw, controls, figsize=(8, 4)):
    """Wire ipywidgets ``controls`` (a dict name -> widget) to ``draw(fig, **values) -> str``.

    Returns the ``VBox`` to display. The summary returned by ``draw`` is shown
    under the figure.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

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
