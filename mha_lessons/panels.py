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

    Slider(name, label, values, default)    a range input over ``values`` (any printable values)
    Checkbox(name, label, default)
    build_panel(controls, render, title=...) -> Panel
        ``render(**values)`` returns a ``State``: the frames (PNG bytes, or None for
        "no figure"), their alt texts and the text shown under them.

Chapter panels: ``scaling_panel`` (chapter 2), ``multihead_panel`` (chapter 3),
``cost_panel`` (chapter 4). matplotlib is imported here; the package imports this
module only when a chapter uses it (``M.panels``).
"""

import base64
import hashlib
import html
import io
import itertools
import json
from dataclasses import dataclass, field

from matplotlib.figure import Figure

FRAME_DPI = 72  # low resolution keeps a panel's grid of frames small
FRAME_COLORS = 64  # frames are stored with a palette of this many colours


@dataclass(frozen=True)
class Slider:
    name: str
    label: str
    values: tuple
    default: object

    def __post_init__(self):
        if self.default not in self.values:
            raise ValueError(f"slider {self.name!r}: default {self.default!r} is not among {list(self.values)}")


@dataclass(frozen=True)
class Checkbox:
    name: str
    label: str
    default: bool = True
    values: tuple = (False, True)


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

    def __init__(self, controls, states, title, frame_names):
        self.controls = list(controls)
        self.states = states  # key -> State
        self.title = title
        self.frame_names = list(frame_names)

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

        parts = [f'<div class="mha-panel" id="{uid}" role="group" aria-label="{esc(self.title)}">',
                 '<div class="mha-panel-controls" style="display:flex;flex-wrap:wrap;gap:0.4em 1.5em;'
                 'align-items:center;margin-bottom:0.5em">']
        for i, control in enumerate(self.controls):
            cid = f"{uid}-{control.name}"
            if isinstance(control, Checkbox):
                checked = " checked" if control.default else ""
                parts.append(f'<span><input type="checkbox" id="{cid}" data-control="{i}"{checked}> '
                             f'<label for="{cid}">{esc(control.label)}</label></span>')
            else:
                index = control.values.index(control.default)
                shown = [str(v) for v in control.values]
                parts.append(
                    f'<span><label for="{cid}">{esc(control.label)}</label> '
                    f'<input type="range" id="{cid}" data-control="{i}" min="0" max="{len(shown) - 1}" step="1" '
                    f'value="{index}" aria-valuetext="{esc(shown[index])}" '
                    f"data-values='{esc(json.dumps(shown))}' style=\"vertical-align:middle\"> "
                    f'<output for="{cid}" id="{cid}-value" style="display:inline-block;min-width:3em">'
                    f'{esc(shown[index])}</output></span>')
        parts.append("</div>")
        for j, name in enumerate(self.frame_names):
            ref = states[state_key(self._default_indices())]["f"][j]
            src = frames[ref] if ref is not None else ""
            hidden = " hidden" if ref is None else ""
            parts.append(f'<img class="mha-panel-frame" data-frame="{j}" data-name="{esc(name)}" src="{src}" '
                         f'alt="{esc(default.alts[j])}"{hidden} style="max-width:100%;height:auto;display:block">')
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


def build_panel(controls, render, *, title, frame_names=("figure",)):
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
    states = {}
    for indices in itertools.product(*(range(len(c.values)) for c in controls)):
        values = {c.name: c.values[i] for c, i in zip(controls, indices)}
        state = render(**values)
        if len(state.frames) != len(frame_names) or len(state.alts) != len(frame_names):
            raise ValueError(f"render gave {len(state.frames)} frames for {len(frame_names)} frame names")
        states[state_key(indices)] = state
    return Panel(controls, states, title, frame_names)


# ---------------------------------------------------------------- chapter 2: why divide by √d_k

def scaling_state(d_k, scaled, *, seed=0):
    from . import widgets

    png, summary = figure_png(lambda fig: widgets.draw_scaling(fig, d_k=d_k, scaled=scaled, seed=seed),
                              figsize=(10, 3.8))
    scores = widgets.SCALING_ROWS * widgets.SCALING_KEYS
    alt = (f"Left: histogram of {scores} attention scores for d_k = {d_k}, "
           f"{'divided by the square root of d_k' if scaled else 'not scaled'}, with the predicted normal curve. "
           f"Right: the softmax weights of one row of {widgets.SCALING_KEYS} scores as bars, "
           f"with the uniform weight dashed. " + summary.splitlines()[0].split(": ", 1)[1].capitalize() + "; "
           + summary.splitlines()[1].split(": ", 1)[1] + ".")
    return State([png], [alt], summary)


def scaling_panel(d_k=64, scaled=True, *, widths=None, seed=0):
    """Chapter 2's panel: d_k (powers of two, 1 to 1024) and the 1/√d_k check box, every state precomputed."""
    from . import widgets

    controls = [Slider("d_k", "d_k", tuple(widths or widgets.SCALING_WIDTHS), d_k),
                Checkbox("scaled", "divide by √d_k", bool(scaled))]
    return build_panel(controls, lambda d_k, scaled: scaling_state(d_k, scaled, seed=seed),
                       title="Scores and softmax for a chosen d_k")


# ---------------------------------------------------------------- chapter 3: heads and width

MULTIHEAD_HEADS = (1, 2, 3, 4, 6, 8, 12, 16)  # 3, 6 and 12 divide none of the widths: the panel says why
MULTIHEAD_WIDTHS = (8, 16, 32, 64, 128, 256, 512)


def multihead_state(num_heads, d_model, *, n=6, seed=0, layer=True):
    from . import diagram, widgets

    png, summary = figure_png(lambda fig: widgets.draw_multihead(fig, num_heads=num_heads, d_model=d_model, n=n,
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
            return diagram.draw_layer(d_model, num_heads, n=n, ax=fig.add_subplot())
        layer_png, drawing = figure_png(draw, figsize=diagram.FIGSIZE, dpi=60)
        frames.append(layer_png)
        alts.append(f"Diagram of the layer for d_model = {d_model}, h = {num_heads}, n = {n}: X goes through "
                    f"W_Q, W_K and W_V (each {drawing.matrices['W_Q'][0]} by {drawing.matrices['W_Q'][1]}), is split "
                    f"into {num_heads} heads of width {d_k}, the heads attend side by side, their outputs are "
                    f"concatenated and mixed by W_O ({drawing.matrices['W_O'][0]} by {drawing.matrices['W_O'][1]}) "
                    f"into Y. Arrows carry the shapes: " + "; ".join(drawing.labels).replace("\n", " ") + ".")
    return State(frames, alts, summary)


def multihead_panel(num_heads=4, d_model=64, *, heads=MULTIHEAD_HEADS, widths=MULTIHEAD_WIDTHS, layer=True, seed=0):
    """Chapter 3's panel: h and d_model -> every head's weights, the layer diagram, d_k, parameters, shapes."""
    controls = [Slider("num_heads", "heads h", tuple(heads), num_heads),
                Slider("d_model", "d_model", tuple(widths), d_model)]
    return build_panel(controls, lambda num_heads, d_model: multihead_state(num_heads, d_model, seed=seed,
                                                                             layer=layer),
                       title="Heads and width", frame_names=("heads", "layer") if layer else ("heads",))


# ---------------------------------------------------------------- chapter 4: what the layer costs

COST_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
COST_WIDTHS = (256, 512, 1024, 2048, 4096)
COST_HEADS = (1, 4, 8, 16, 32)
LINEAR_STAGES = ("q_projection", "k_projection", "v_projection", "output_projection", "scale", "bias")
QUADRATIC_STAGES = ("scores", "softmax", "weighted_sum")


def cost_numbers(n, d_model, num_heads):
    """FLOPs by stage and memory by array from ``complexity``, and where the n² stages overtake the rest.

    Returns a dict: ``flops`` (mha_flops), ``memory`` (mha_memory, float32), ``linear`` and
    ``quadratic`` (FLOPs of the stages that grow like n and like n²), and ``crossover``:
    the smallest n (a power of two, up to 2**20) at which the quadratic stages cost more
    than the linear ones for this d_model and h.
    """
    from .complexity import mha_flops, mha_memory

    def split(flops):
        return sum(flops[s] for s in LINEAR_STAGES), sum(flops[s] for s in QUADRATIC_STAGES)

    flops = mha_flops(n, d_model, num_heads)
    linear, quadratic = split(flops)
    crossover = None
    for k in range(21):
        lin, quad = split(mha_flops(2**k, d_model, num_heads))
        if quad > lin:
            crossover = 2**k
            break
    return {"flops": flops, "memory": mha_memory(n, d_model, num_heads), "linear": linear, "quadratic": quadratic,
            "crossover": crossover}


def _si(x, unit):
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _mib(x):
    return f"{x / 2**20:.3g} MiB"


def cost_state(n, d_model, num_heads):
    """The cost explorer's text for one state: a table of FLOPs by stage and of memory by array, the crossover."""
    numbers = cost_numbers(n, d_model, num_heads)
    flops, memory = numbers["flops"], numbers["memory"]
    share = numbers["quadratic"] / flops["total"]
    lines = [f"n = {n}, d_model = {d_model}, h = {num_heads} (d_k = {d_model // num_heads})", "",
             f"{'FLOPs by stage':<22}{'':>14}  share"]
    for stage in LINEAR_STAGES + QUADRATIC_STAGES:
        mark = "  (n²)" if stage in QUADRATIC_STAGES else ""
        lines.append(f"  {stage:<20}{_si(flops[stage], 'FLOP'):>14}  {100 * flops[stage] / flops['total']:4.0f}%{mark}")
    lines += [f"  {'total':<20}{_si(flops['total'], 'FLOP'):>14}",
              f"  the n² stages: {100 * share:.0f}% of the total; they overtake the rest from n = "
              f"{numbers['crossover']} on, for this d_model and h", "",
              f"{'memory (float32)':<22}{'':>14}  share of activations"]
    for array in ("q", "k", "v", "weights", "heads_output", "concat", "y"):
        mark = "  (h, n, n)" if array == "weights" else ""
        lines.append(f"  {array:<20}{_mib(memory[array]):>14}  "
                     f"{100 * memory[array] / memory['activations']:4.0f}%{mark}")
    lines += [f"  {'activations':<20}{_mib(memory['activations']):>14}",
              f"  {'parameters':<20}{_mib(memory['parameters']):>14}"]
    return State([], [], "\n".join(lines), extra=numbers)


def cost_panel(n=1024, d_model=512, num_heads=8, *, lengths=COST_LENGTHS, widths=COST_WIDTHS, heads=COST_HEADS):
    """Chapter 4's cost explorer: n, d_model and h -> FLOPs by stage, memory by array, the n² crossover."""
    controls = [Slider("n", "tokens n", tuple(lengths), n), Slider("d_model", "d_model", tuple(widths), d_model),
                Slider("num_heads", "heads h", tuple(heads), num_heads)]
    return build_panel(controls, cost_state, title="What one layer costs", frame_names=())
