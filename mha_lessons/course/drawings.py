"""What the chapters' panels draw, and the values their sliders offer.

Each panel has a *draw function* ``draw_<topic>(fig, **values) -> str`` that clears the figure, draws it
for the given slider values and returns a short text summary (or a plain-words message for values that
make no sense, never a traceback). The live panels (``widgets.py``, ipywidgets) and the website's
precomputed panels (``panels.py``) both draw through them, and tests call them directly, without a
browser or a kernel. matplotlib is used here; ipywidgets is not.

    chapter 2   draw_scaling     scores and softmax for a chosen d_k, with and without 1/√d_k
    chapter 3   draw_multihead   every head's weights for a chosen h and d_model
    chapter 4   draw_cost        FLOPs by stage and memory by array, for n, d_model and h
"""

import math

import numpy as np

from .._checks import is_int
from ..attention import softmax
from ..complexity import param_count
from ..multihead import init_params, multihead_attention
from ..scaling import attention_logits
from ..stats import entropy
from .plotting import heads_mosaic

# Slider labels as the page writes the symbols (HTML, read by ipywidgets 7.7 in Colab and 8 in Jupyter alike).
SYMBOLS = {"num_heads": "heads <i>h</i>", "d_model": "width <i>d</i><sub>model</sub>", "d_k": "<i>d</i><sub>k</sub>",
           "n": "tokens <i>n</i>"}


# ---------------------------------------------------------------- chapter 3: heads and width

MULTIHEAD_MAX_HEADS = 16  # the h slider offers the divisors of d_model up to this many heads


def head_choices(d_model, most=MULTIHEAD_MAX_HEADS):
    """The numbers of heads that divide ``d_model`` (every head gets the same width), up to ``most``.

    >>> head_choices(64), head_choices(96), head_choices(12, most=4)
    ((1, 2, 4, 8, 16), (1, 2, 3, 4, 6, 8, 12, 16), (1, 2, 3, 4))
    """
    return tuple(h for h in range(1, most + 1) if d_model % h == 0)


def nearest_choice(value, choices):
    """The choice closest to ``value`` (the smaller one on a tie).

    >>> nearest_choice(6, (1, 2, 4, 8, 16)), nearest_choice(3, (1, 2, 4))
    (4, 2)
    """
    return min(choices, key=lambda c: (abs(c - value), c))


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
                   f"{list(head_choices(d_model))}.")
        ax = fig.add_subplot()
        # Line breaks placed by hand: matplotlib's wrap=True costs about 50 ms a redraw. Symbols typeset.
        shown = message.replace(": every", ":\nevery").replace("d_model =", r"$d_\mathrm{model}$ =")
        ax.text(0.5, 0.5, shown.replace("h =", "$h$ =").replace("Pick h", "Pick $h$"), ha="center", va="center",
                fontsize=11)
        ax.axis("off")
        return message
    params = init_params(d_model, num_heads, seed=seed)
    x = np.random.default_rng(seed).normal(size=(n, d_model))  # (n, d_model): a fixed short input
    y, weights = multihead_attention(x, x, x, params)  # y (n, d_model), weights (h, n, n)
    ax = heads_mosaic(weights, ax=fig.add_subplot(), label_size=10)
    ax.axis("on")  # heads_mosaic hides the axes; keep their labels, drop ticks and frame
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel(f"key token (columns of each block, {n} keys)", fontsize=10)
    ax.set_ylabel(f"query token\n({n} rows a block)", fontsize=10)
    fig.colorbar(ax.images[0], ax=ax, label="attention weight", fraction=0.04, pad=0.02)
    fig.suptitle(f"$h$ = {num_heads} heads of width $d_k$ = {d_model // num_heads}, on the same {n} tokens",
                 fontsize=12)
    return (f"d_model = {d_model}, h = {num_heads}  ->  d_k = d_model / h = {d_model // num_heads}\n"
            f"parameters: 4·d_model² + 4·d_model = {param_count(d_model, num_heads):,} (the same for every h)\n"
            f"output y: {y.shape}   weights: {weights.shape} = (h, n, n)")


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
        shown = "$d_k$" + message[len("d_k"):].replace("$", r"\$").replace(": a", ":\na")  # the symbol typeset
        ax.text(0.5, 0.5, shown, ha="center", va="center", fontsize=11)
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
                 label="normal, variance 1" if scaled else f"normal, variance $d_k$ = {d_k}")
    ax_hist.set_xlim(-reach, reach)
    ax_hist.set_xlabel(r"$q \cdot k / \sqrt{d_k}$" if scaled else r"$q \cdot k$")
    ax_hist.set_ylabel("density")
    ax_hist.set_title(f"{scores.size} scores, $d_k$ = {d_k}: standard deviation {measured_std:.2f}")
    ax_hist.legend(loc="upper right", fontsize=8)

    m = SCALING_KEYS
    ax_bar.bar(np.arange(m), weights, color="#e1812c")
    ax_bar.axhline(1 / m, color="black", ls="--", lw=1)
    ax_bar.set_ylim(0, 1)
    ax_bar.set_xticks(range(0, m, 3))
    ax_bar.set_xlabel("key $j$")
    ax_bar.set_ylabel("softmax weight")
    ax_bar.set_title(f"one row: largest weight {weights.max():.2f}")
    fig.tight_layout()
    return (f"d_k = {d_k}, {'divided by √d_k' if scaled else 'not scaled'}: "
            f"scores with standard deviation {measured_std:.2f} (predicted {predicted_std:.2f})\n"
            f"softmax of one row of {m} scores: largest weight {weights.max():.3f} (uniform: {1 / m:.3f})\n"
            f"entropy of that row: {float(entropy(weights)):.3f} nats (uniform: log {m} = {math.log(m):.3f})")


# ---------------------------------------------------------------- chapter 4: what the layer costs

COST_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
COST_WIDTHS = (256, 512, 1024, 2048, 4096)
COST_HEADS = (1, 4, 8, 16, 32)
LINEAR_STAGES = ("q_projection", "k_projection", "v_projection", "output_projection", "scale", "bias")
QUADRATIC_STAGES = ("scores", "softmax", "weighted_sum")
MEMORY_ARRAYS = ("q", "k", "v", "weights", "heads_output", "concat", "y")


def cost_numbers(n, d_model, num_heads):
    """FLOPs by stage and memory by array from ``complexity``, and where the n² stages overtake the rest.

    Returns a dict: ``flops`` (mha_flops), ``memory`` (mha_memory, float32), ``linear`` and
    ``quadratic`` (FLOPs of the stages that grow like n and like n²), and ``crossover``:
    the smallest n (a power of two, up to 2**20) at which the quadratic stages cost more
    than the linear ones for this d_model and h.

    >>> cost_numbers(1024, 512, 8)["crossover"]
    1024
    """
    from ..complexity import mha_flops, mha_memory

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


def cost_summary(n, d_model, num_heads):
    """The lines printed under the cost chart: totals, the n² stages' share and the crossover."""
    numbers = cost_numbers(n, d_model, num_heads)
    flops, memory = numbers["flops"], numbers["memory"]
    return (f"n = {n}, d_model = {d_model}, h = {num_heads} (d_k = {d_model // num_heads}): "
            f"{_si(flops['total'], 'FLOP')} in all, {100 * numbers['quadratic'] / flops['total']:.0f}% of it in "
            f"the n² stages, which overtake the rest from n = {numbers['crossover']} on\n"
            f"activations {memory['activations'] / 2**20:.3g} MiB (float32), of which the weights "
            f"(h, n, n) {memory['weights'] / 2**20:.3g} MiB; parameters {memory['parameters'] / 2**20:.3g} MiB")


def draw_cost(fig, n=1024, d_model=512, num_heads=8):
    """Two bar charts for one layer: FLOPs by stage and float32 memory by array, the n² ones in orange.

    Bars are drawn on a logarithmic axis (the stages differ by orders of magnitude) with each
    bar's share of its total written at its end.

    Returns
    -------
    str : ``cost_summary(n, d_model, num_heads)``.
    """
    fig.clear()
    numbers = cost_numbers(n, d_model, num_heads)
    flops, memory = numbers["flops"], numbers["memory"]
    ax_flops, ax_mem = fig.subplots(1, 2, gridspec_kw={"wspace": 0.75})
    linear_color, quadratic_color = "#3b75af", "#e1812c"

    def bars(ax, names, values, total, quadratic, unit, title):
        labels = [name.replace("_", " ") + (" ($n^2$)" if name in quadratic else "") for name in names]
        y = np.arange(len(names))[::-1]
        colors = [quadratic_color if name in quadratic else linear_color for name in names]
        ax.barh(y, values, color=colors)
        ax.set_yticks(y, labels=labels, fontsize=10)
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 3, max(values) * 8)
        for yi, value in zip(y, values):
            ax.text(value * 1.2, yi, f"{100 * value / total:.0f}%", va="center", fontsize=9)
        ax.set_xlabel(unit, fontsize=10)
        ax.set_title(title, fontsize=11)

    stages = LINEAR_STAGES + QUADRATIC_STAGES
    bars(ax_flops, stages, [flops[s] for s in stages], flops["total"], QUADRATIC_STAGES, "FLOPs (log scale)",
         f"FLOPs by stage: {_si(flops['total'], 'FLOP')}")
    bars(ax_mem, MEMORY_ARRAYS, [memory[a] / 2**20 for a in MEMORY_ARRAYS], memory["activations"] / 2**20,
         ("weights",), "MiB, float32 (log scale)", f"memory by array: {memory['activations'] / 2**20:.3g} MiB")
    fig.suptitle(f"$n$ = {n}, $d_\\mathrm{{model}}$ = {d_model}, $h$ = {num_heads}: orange grows like $n^2$",
                 fontsize=12)
    fig.subplots_adjust(left=0.17, right=0.98, top=0.8, bottom=0.17)
    return cost_summary(n, d_model, num_heads)
