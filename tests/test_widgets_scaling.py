"""The scaling panel of chapter 2, driven without a browser: call the draw function, read back the figure."""

import math
import re

import matplotlib.patches
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.widgets import SCALING_KEYS, SCALING_ROWS, draw_scaling, scaling_panel


def drawn_histogram(ax):
    """Bin edges and heights of the bars that ax.hist drew."""
    bars = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    edges = np.array([b.get_x() for b in bars] + [bars[-1].get_x() + bars[-1].get_width()])
    return edges, np.array([b.get_height() for b in bars])


@pytest.mark.parametrize("d_k, scaled", [(1, True), (64, True), (64, False), (1024, False)])
def test_draws_the_scores_and_the_softmax_of_one_row(fig, d_k, scaled):
    summary = draw_scaling(fig, d_k=d_k, scaled=scaled, seed=0)
    ax_hist, ax_bar = fig.axes
    scores = M.scaling.attention_logits(SCALING_ROWS, SCALING_KEYS, d_k, divisor="sqrt" if scaled else "none", seed=0)

    # left: a density histogram of exactly these scores
    edges, heights = drawn_histogram(ax_hist)
    expected, _ = np.histogram(scores.ravel(), bins=edges, density=True)
    np.testing.assert_allclose(heights, expected, rtol=1e-12)
    assert np.sum(heights * np.diff(edges)) == pytest.approx(1.0, rel=1e-12)  # nothing fell outside the range
    # the curve is the normal density the derivation predicts: variance 1 scaled, d_k unscaled
    sigma = 1.0 if scaled else math.sqrt(d_k)
    x, y = ax_hist.lines[0].get_data()
    np.testing.assert_allclose(y, np.exp(-x**2 / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi)), rtol=1e-12)

    # right: one bar per key, the softmax of the first row (checked with torch)
    weights = torch.softmax(torch.from_numpy(scores[0]), dim=0).numpy()
    np.testing.assert_allclose([b.get_height() for b in ax_bar.patches], weights, rtol=1e-12)
    assert len(ax_bar.patches) == SCALING_KEYS

    entropy = float(torch.distributions.Categorical(probs=torch.from_numpy(weights)).entropy())
    assert f"d_k = {d_k}, {'divided by √d_k' if scaled else 'not scaled'}" in summary
    assert f"standard deviation {scores.std():.2f} (predicted {sigma:.2f})" in summary
    assert f"largest weight {weights.max():.3f}" in summary
    assert f"entropy of that row: {entropy:.3f} nats (uniform: log {SCALING_KEYS} = {math.log(SCALING_KEYS):.3f})" \
        in summary


def test_toggling_the_scale_divides_the_same_scores_by_sqrt_dk(fig):
    d_k = 256
    spread, top = {}, {}
    for scaled in (False, True):
        summary = draw_scaling(fig, d_k=d_k, scaled=scaled)
        spread[scaled] = float(re.search(r"standard deviation ([\d.]+)", summary).group(1))
        top[scaled] = float(re.search(r"largest weight ([\d.]+)", summary).group(1))
        limits = fig.axes[0].get_xlim()
        assert limits == pytest.approx((-4 * math.sqrt(d_k), 4 * math.sqrt(d_k)))  # same range either way
    # the two spreads are printed to 2 decimals: their ratio is √d_k up to that rounding
    assert spread[False] / spread[True] == pytest.approx(math.sqrt(d_k), abs=0.01 * math.sqrt(d_k) / spread[True])
    # without the scale a width of 256 saturates the row; with it the same row is spread out
    assert top[False] > 0.9 and top[True] < top[False]


@pytest.mark.parametrize("bad", [0, -4, 3.5, True])
def test_a_width_that_is_not_a_positive_whole_number_gets_a_message(fig, bad):
    summary = draw_scaling(fig, d_k=bad)
    assert f"got {bad!r}" in summary
    assert not any(ax.patches for ax in fig.axes)
    assert any("positive whole number" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_panel_builds_and_redraws_when_its_controls_change(capsys):
    panel = scaling_panel()
    slider, box = panel.controls["d_k"], panel.controls["scaled"]
    assert list(slider.options) == [2**i for i in range(11)]
    assert (slider.value, box.value) == (64, True)
    capsys.readouterr()
    slider.value = 256
    box.value = False
    printed = capsys.readouterr().out  # make_panel prints each summary under the figure
    labels = " ".join(w.value for row in panel.children[0].children for w in getattr(row, "children", ())
                      if isinstance(w, M.widgets.widgets.HTML))
    assert "<i>d</i><sub>k</sub>" in labels and ">1<" in labels and ">1024<" in labels  # symbol, both ends
    assert "d_k = 256, divided by √d_k" in printed
    assert "d_k = 256, not scaled" in printed
    plt.close("all")


def test_panel_rejects_a_width_the_slider_does_not_offer():
    with pytest.raises(ValueError, match=r"got d_k = 100"):
        scaling_panel(d_k=100)
