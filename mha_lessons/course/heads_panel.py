"""Chapter 15's panel: pick a sentence, a layer and a head of all-MiniLM-L6-v2, see that head's map.

It is a ``panels.build_panel`` panel (every state precomputed, works on the website with no kernel).
A real model has 72 heads per sentence, so a frame per state drawn by matplotlib would take
seconds; instead matplotlib draws each sentence's labelled, empty heat map once (through
``plotting.heatmap``, the course's style, with its colour bar), and each head's weights are
coloured with the same colour map and written into the image's pixels. The frames are the
pictures ``plotting.heatmap`` would draw, up to the palette of ``panels.FRAME_COLORS`` colours
every frame is stored with, at the cost of an array copy each.

matplotlib and Pillow are imported here; the package imports this module only when a chapter uses it.
"""

import io

import numpy as np

from . import panels, plotting

FIGSIZE = (4.6, 4.4)


def _template(tokens):
    """The labelled, empty heat map of one sentence as an RGB array, and the pixel box of its image."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(tokens)
    fig = Figure(figsize=FIGSIZE, dpi=panels.FRAME_DPI)
    canvas = FigureCanvasAgg(fig)  # not registered with pyplot
    ax = fig.add_subplot()
    plotting.heatmap(np.zeros((n, n)), ax=ax, row_labels=tokens, col_labels=tokens, annotate=False,
                     vmin=0.0, vmax=1.0, xlabel="key", ylabel="query")
    ax.tick_params(axis="x", labelrotation=90, labelsize=8)
    ax.tick_params(axis="y", labelsize=8)
    fig.colorbar(ax.images[0], ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    fig.tight_layout()
    canvas.draw()
    rgb = np.asarray(canvas.buffer_rgba())[..., :3].copy()  # (H, W, 3), row 0 at the top
    x0, y0, x1, y1 = ax.images[0].get_window_extent().extents  # display pixels, y up
    height = rgb.shape[0]
    return rgb, (x0, height - y1, x1, height - y0)  # (left, top, right, bottom), y down


def head_frames(tokens, weights):
    """PNG frames of every head's map for one sentence: {(layer, head): bytes}.

    Parameters
    ----------
    tokens : list of str, n tokens
    weights : array, (L, h, n, n): ``pretrained.attention_maps``'s weights

    Returns
    -------
    dict : (layer, head) -> PNG bytes, each a heat map with the tokens on both axes.
    """
    import matplotlib
    from PIL import Image

    weights = np.asarray(weights, dtype=float)
    n = len(tokens)
    if weights.ndim != 4 or weights.shape[-2:] != (n, n):
        raise ValueError(f"weights must be (L, h, n, n) with n = {n} tokens, got shape {weights.shape}")
    rgb, (left, top, right, bottom) = _template(tokens)
    cols = np.arange(int(np.ceil(left)), int(np.floor(right)))  # pixel columns inside the image
    rows = np.arange(int(np.ceil(top)), int(np.floor(bottom)))
    key = np.minimum(((cols + 0.5 - left) / (right - left) * n).astype(int), n - 1)  # the key of each column
    query = np.minimum(((rows + 0.5 - top) / (bottom - top) * n).astype(int), n - 1)
    colormap = matplotlib.colormaps[plotting.WEIGHTS_CMAP]
    frames = {}
    for layer in range(weights.shape[0]):
        for head in range(weights.shape[1]):
            colours = (colormap(weights[layer, head])[..., :3] * 255).round().astype(np.uint8)  # (n, n, 3)
            frame = rgb.copy()
            frame[rows[:, None], cols[None, :]] = colours[query[:, None], key[None, :]]  # (rows, cols, 3)
            image = Image.fromarray(frame).quantize(panels.FRAME_COLORS)
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")  # optimize=True: 10% smaller, twice as slow
            frames[layer, head] = buffer.getvalue()
    return frames


def _describe(tokens, weights):
    """One line per query: the key it gives the most weight, and how much."""
    top = weights.argmax(axis=-1)  # (n,)
    return "; ".join(f"{tokens[i]} → {tokens[j]} {weights[i, j]:.2f}" for i, j in enumerate(top))


def real_model_panel(sentences, *, sentence=None, layer=0, head=0):
    """The panel: sliders for the sentence, the layer and the head; the map, its alt text, each query's top key.

    Parameters
    ----------
    sentences : dict
        A short name -> (tokens, weights (L, h, n, n)) for each sentence, e.g. from
        ``pretrained.attention_maps``.
    sentence, layer, head : the state shown first (the first sentence by default).

    Returns
    -------
    panels.Panel
    """
    names = tuple(sentences)
    frames = {name: head_frames(*sentences[name]) for name in names}
    num_layers, num_heads = next(iter(sentences.values()))[1].shape[:2]

    def render(sentence, layer, head):
        tokens, weights = sentences[sentence]
        w = np.asarray(weights[layer, head], dtype=float)
        text = " ".join(t for t in tokens if t not in ("[CLS]", "[SEP]"))
        alt = (f"Heat map of the attention weights of layer {layer}, head {head} for the sentence \"{text}\": "
               f"{len(tokens)} query tokens down, the same tokens as keys across, colour from 0 (dark) to 1 "
               f"(yellow). Each query's largest weight: " + _describe(tokens, w) + ".")
        shown = (f"sentence: {text}\nlayer {layer}, head {head}; each query's largest weight:\n"
                 + _describe(tokens, w))
        return panels.State([frames[sentence][layer, head]], [alt], shown)

    controls = [panels.Slider("sentence", "sentence", names, sentence or names[0]),
                panels.Slider("layer", "layer", tuple(range(num_layers)), layer),
                panels.Slider("head", "head", tuple(range(num_heads)), head)]
    return panels.build_panel(controls, render, title="One head of all-MiniLM-L6-v2", frame_names=("map",))
