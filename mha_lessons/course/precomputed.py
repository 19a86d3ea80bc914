"""Panels that work on the website with no kernel: every state drawn in Python, chosen in the browser.

A website cannot run Python, so a panel here is computed whole when the notebook runs:
for every combination of its slider values (a small grid) the package draws the
figure(s) with the same draw functions the live ``widgets`` panels use, and writes
the numbers shown beside them and a text alternative for each figure. The cell then
displays ONE self-contained HTML output: native ``<input type="range">`` sliders
and check boxes, each with a visible ``<label>`` and a visible value (``<output>``),
the frames as PNG data, and a few lines of JavaScript that only *select* the frame,
the alt text and the numbers of the current values. No math runs in the browser.

The same output works on the built site (offline, no kernel, nothing loaded from
anywhere), in Jupyter and in Colab.

One call serves both places. A chapter's panel cell returns a ``Panel``; where a live
front end runs the kernel (JupyterLab, Notebook 7, Colab: ``live_frontend()``), it displays
the live ipywidgets panel of ``widgets.py`` instead (same controls, any value, redrawn by
Python), and only then computes nothing on the grid. Everywhere else (the notebooks run
for the website by ``scripts/execute_notebooks.py``, nbval, a plain IPython) it displays
the precomputed HTML, whose grid is computed when first needed.

    Slider(name, label, values, default)    a range input over ``values`` (any printable values)
    Checkbox(name, label, default)
    build_panel(controls, render, title=...) -> Panel
        ``render(**values)`` returns a ``State``: the frames (PNG bytes, or None for
        "no figure"), their alt texts and the text shown under them.

The chapters' panels are built with these in ``panels.py``. matplotlib and
Pillow are used here; ipywidgets only inside a live front end.
"""

import base64
import hashlib
import html
import io
import itertools
import json
import os
import sys
from dataclasses import dataclass, field

from matplotlib.figure import Figure

FRAME_DPI = 72  # low resolution keeps a panel's grid of frames small
FRAME_COLORS = 64  # frames are stored with a palette of this many colours
FRAME_MIN_WIDTH = 540  # px: narrower than this a frame scrolls in its box instead of shrinking


@dataclass(frozen=True)
class Slider:
    """A range input over ``values``; ``symbol`` is the label as HTML (typeset symbols), ``label`` its plain text."""
    name: str
    label: str
    values: tuple
    default: object
    symbol: str = ""

    def __post_init__(self):
        if self.default not in self.values:
            raise ValueError(f"slider {self.name!r}: default {self.default!r} is not among {list(self.values)}")


@dataclass(frozen=True)
class Checkbox:
    name: str
    label: str
    default: bool = True
    values: tuple = (False, True)
    symbol: str = ""


LIVE_ENV = "MHA_LESSONS_PANELS"  # "live" or "static" overrides live_frontend()


def live_frontend():
    """True where a panel cell should show the live ipywidgets panel rather than the precomputed one.

    Colab, and kernels that a Jupyter server started (JupyterLab, Notebook 7: the server sets
    ``JPY_SESSION_NAME`` in the kernel's environment), run the cells in front of a reader. The
    notebooks executed for the website, nbval and plain Python do not. The environment
    variable ``MHA_LESSONS_PANELS=live`` (or ``static``) decides where this guess is wrong
    (VS Code, for one).

    >>> import os; os.environ[LIVE_ENV] = "static"; live_frontend()
    False
    >>> del os.environ[LIVE_ENV]
    """
    choice = os.environ.get(LIVE_ENV, "").strip().lower()
    if choice in ("live", "static"):
        return choice == "live"
    if "google.colab" in sys.modules:
        return True
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel") and "JPY_SESSION_NAME" in os.environ


@dataclass
class State:
    """What the panel shows for one combination of values."""
    frames: list  # PNG bytes, or None where this state has no figure
    alts: list  # one text alternative per frame
    text: str  # the numbers shown under the figures
    extra: dict = field(default_factory=dict)  # numbers kept for tests, not shown


def figure_png(draw, figsize, dpi=FRAME_DPI, colors=FRAME_COLORS):
    """Draw ``draw(fig)`` on a new figure (not registered with pyplot) and return (PNG bytes, what draw returned).

    The PNG carries no software version (nothing machine-specific) and a palette of
    ``colors`` colours, which makes it about three times smaller.
    """
    from PIL import Image

    fig = Figure(figsize=figsize)
    result = draw(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB").quantize(colors)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue(), result


def state_key(indices):
    """The key of a state: the positions of the values on each control, joined by commas (what the JS builds)."""
    return ",".join(str(i) for i in indices)


class Panel:
    """A grid of precomputed states and the controls that select one; displays as HTML (text as a fallback)."""

    def __init__(self, controls, states, title, frame_names, live=None):
        self.controls = list(controls)
        self._states = states  # key -> State, or a callable that computes them (when first needed)
        self.title = title
        self.frame_names = list(frame_names)
        self.live = live  # a callable returning the live ipywidgets panel, or None

    @property
    def states(self):
        if callable(self._states):
            self._states = self._states()
        return self._states

    def _ipython_display_(self):
        """In a live front end: the live panel (and its helper output); elsewhere the precomputed HTML."""
        from IPython.display import HTML, display

        if self.live is not None and live_frontend():
            display(self.live())
            from .widgets import live_helper_html

            display(HTML(live_helper_html()))
            return
        display({"text/html": self.to_html(), "text/plain": repr(self)}, raw=True)

    def state(self, **values):
        """The State for these control values (every control must be given)."""
        indices = []
        for control in self.controls:
            value = values[control.name]
            if value not in control.values:
                raise ValueError(f"{control.name} = {value!r} is not on the panel's grid {list(control.values)}")
            indices.append(control.values.index(value))
        return self.states[state_key(indices)]

    def default_state(self):
        return self.state(**{c.name: c.default for c in self.controls})

    def to_html(self):
        frames, frame_index, states = [], {}, {}
        for key, state in self.states.items():
            refs = []
            for png in state.frames:
                if png is None:
                    refs.append(None)
                    continue
                if png not in frame_index:  # identical frames are stored once
                    frame_index[png] = len(frames)
                    frames.append("data:image/png;base64," + base64.b64encode(png).decode("ascii"))
                refs.append(frame_index[png])
            states[key] = {"f": refs, "a": state.alts, "t": state.text}
        payload = json.dumps({"frames": frames, "states": states}, ensure_ascii=False, separators=(",", ":"))
        payload = payload.replace("</", "<\\/")  # nothing inside may close the script element
        uid = "mha-panel-" + hashlib.sha256(payload.encode()).hexdigest()[:10]
        default = self.default_state()
        esc = html.escape

        # data-lm-suppress-shortcuts: JupyterLab and Notebook 7 leave the keys to the focused control
        parts = [f'<div class="mha-panel" id="{uid}" role="group" aria-label="{esc(self.title)}" '
                 f'data-lm-suppress-shortcuts="true">',
                 '<div class="mha-panel-controls" style="display:flex;flex-wrap:wrap;gap:0.4em 1.5em;'
                 'align-items:center;margin-bottom:0.5em">']
        for i, control in enumerate(self.controls):
            cid = f"{uid}-{control.name}"
            if isinstance(control, Checkbox):
                checked = " checked" if control.default else ""
                parts.append(f'<span><input type="checkbox" id="{cid}" data-control="{i}"{checked} '
                             f'data-lm-suppress-shortcuts="true"> '
                             f'<label for="{cid}">{control.symbol or esc(control.label)}</label></span>')
            else:
                index = control.values.index(control.default)
                shown = [str(v) for v in control.values]
                end = '<span class="mha-panel-end" aria-hidden="true" style="font-size:85%;opacity:0.75">'
                parts.append(
                    f'<span style="white-space:nowrap"><label for="{cid}" aria-label="{esc(control.label)}">'
                    f'{control.symbol or esc(control.label)}</label> '
                    f'{end}{esc(shown[0])}</span> '
                    f'<input type="range" id="{cid}" data-control="{i}" min="0" max="{len(shown) - 1}" step="1" '
                    f'value="{index}" aria-valuetext="{esc(shown[index])}" data-lm-suppress-shortcuts="true" '
                    f"data-values='{esc(json.dumps(shown))}' style=\"vertical-align:middle\"> "
                    f'{end}{esc(shown[-1])}</span> '
                    f'<output for="{cid}" id="{cid}-value" style="display:inline-block;min-width:3em;font-weight:bold">'
                    f'{esc(shown[index])}</output></span>')
        parts.append("</div>")
        for j, name in enumerate(self.frame_names):
            ref = states[state_key(self._default_indices())]["f"][j]
            src = frames[ref] if ref is not None else ""
            hidden = " hidden" if ref is None else ""
            # On a narrow screen the frame keeps most of its width and scrolls sideways in its box, so
            # that its text stays legible; the page itself never gets wider than the screen.
            parts.append(f'<div class="mha-panel-frame-box" style="overflow-x:auto;max-width:100%">'
                         f'<img class="mha-panel-frame" data-frame="{j}" data-name="{esc(name)}" src="{src}" '
                         f'alt="{esc(default.alts[j])}"{hidden} style="max-width:100%;min-width:{FRAME_MIN_WIDTH}px;'
                         f'height:auto;display:block"></div>')
        parts.append(f'<pre class="mha-panel-text" aria-live="polite" style="white-space:pre-wrap">'
                     f'{esc(default.text)}</pre>')
        parts.append(f'<script type="application/json" class="mha-panel-data">{payload}</script>')
        parts.append("<script>" + SELECT_JS.replace("PANEL_ID", uid) + "</script>")
        parts.append("</div>")
        return "".join(parts)

    def _default_indices(self):
        return [c.values.index(c.default) for c in self.controls]

    def size_bytes(self):
        """Bytes of the HTML this panel displays."""
        return len(self.to_html().encode())

    def _repr_html_(self):
        return self.to_html()

    def __repr__(self):
        names = ", ".join(f"{c.name} ({len(c.values)} values)" for c in self.controls)
        return (f"{self.title}: {len(self.states)} precomputed states over {names}; "
                f"open the page in a browser or Jupyter to move the controls. Shown now:\n{self.default_state().text}")


# The only JavaScript: read the controls' positions, look the state up, show its frames and text.
SELECT_JS = """
(function () {
  var root = document.getElementById("PANEL_ID");
  if (!root) { return; }
  var data = JSON.parse(root.querySelector("script.mha-panel-data").textContent);
  var controls = Array.prototype.slice.call(root.querySelectorAll("[data-control]"));
  var images = Array.prototype.slice.call(root.querySelectorAll("img.mha-panel-frame"));
  var text = root.querySelector("pre.mha-panel-text");
  function show() {
    var key = controls.map(function (c) {
      if (c.type === "checkbox") { return c.checked ? 1 : 0; }
      var shown = JSON.parse(c.dataset.values)[Number(c.value)];
      root.querySelector('output[for="' + c.id + '"]').textContent = shown;
      c.setAttribute("aria-valuetext", shown);
      return Number(c.value);
    }).join(",");
    var state = data.states[key];
    images.forEach(function (img, j) {
      var ref = state.f[j];
      img.hidden = ref === null;
      if (ref !== null) { img.src = data.frames[ref]; }
      img.alt = state.a[j];
    });
    text.textContent = state.t;
  }
  controls.forEach(function (c) { c.addEventListener("input", show); c.addEventListener("change", show); });
})();
"""


def build_panel(controls, render, *, title, frame_names=("figure",), live=None):
    """Render every combination of the controls' values into a Panel.

    ``render(**values) -> State`` is called once per grid point, in the order of
    ``itertools.product`` over the controls' values.

    Parameters
    ----------
    controls : list of Slider and Checkbox
    render : callable
        ``render(**values) -> State``, with one frame and one alt text per name in ``frame_names``.
    title : str
        The panel's accessible name.
    frame_names : tuple of str
        One per figure the panel shows (empty for numbers only).
    live : callable, optional
        Returns the live ipywidgets panel that a live front end shows instead (``live_frontend``).

    Returns
    -------
    Panel : ``.state(**values)`` gives a grid point's State; displays as HTML in a notebook.

    Examples
    --------
    >>> panel = build_panel([Slider("h", "heads h", (1, 2, 4), 2), Checkbox("bias", "bias")],
    ...                     lambda h, bias: State([], [], f"h = {h}, bias {bias}"), title="demo", frame_names=())
    >>> len(panel.states), panel.state(h=4, bias=False).text
    (6, 'h = 4, bias False')
    >>> '<label for="' in panel.to_html() and 'type="range"' in panel.to_html()
    True
    """
    def compute():
        states = {}
        for indices in itertools.product(*(range(len(c.values)) for c in controls)):
            values = {c.name: c.values[i] for c, i in zip(controls, indices)}
            state = render(**values)
            if len(state.frames) != len(frame_names) or len(state.alts) != len(frame_names):
                raise ValueError(f"render gave {len(state.frames)} frames for {len(frame_names)} frame names")
            states[state_key(indices)] = state
        return states

    return Panel(controls, compute, title, frame_names, live=live)
