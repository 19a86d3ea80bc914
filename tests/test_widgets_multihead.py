"""The multi-head panel of chapter 3, driven without a browser: call the draw function, read back the figure."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import mha_lessons as M


@pytest.mark.parametrize("h, d_model", [(1, 8), (4, 64), (8, 512), (16, 32)])
def test_draws_one_heat_map_per_head_with_that_heads_weights(fig, h, d_model):
    summary = M.widgets.draw_multihead(fig, num_heads=h, d_model=d_model, n=6, seed=0)
    (mosaic,) = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    cols = min(h, 8)
    images = [mosaic[(i // cols) * 7:(i // cols) * 7 + 6, (i % cols) * 7:(i % cols) * 7 + 6] for i in range(h)]
    assert np.isnan(np.ma.getdata(mosaic)).sum() == mosaic.size - h * 36  # only the gaps are blank
    # the same layer, run through torch.nn.MultiheadAttention: its per-head weights are what is drawn
    params = M.init_params(d_model, h, seed=0)
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(1, 6, d_model)))
    _, w = M.params_to_torch(params)(x, x, x, average_attn_weights=False)
    for head in range(h):
        np.testing.assert_allclose(images[head], w[0, head].detach().numpy(), rtol=1e-10)
    expected_params = sum(p.numel() for p in torch.nn.MultiheadAttention(d_model, h, device="meta").parameters())
    assert f"d_k = d_model / h = {d_model // h}" in summary
    assert f"{expected_params:,}" in summary
    assert f"output y: (6, {d_model})" in summary and f"weights: ({h}, 6, 6)" in summary


def test_heads_that_do_not_divide_get_a_message_not_a_traceback(fig):
    summary = M.widgets.draw_multihead(fig, num_heads=7, d_model=64)
    assert "d_model = 64 is not divisible by h = 7" in summary
    assert "[1, 2, 4, 8, 16]" in summary  # the divisors it could use instead
    assert not any(ax.images for ax in fig.axes)
    assert any("not divisible" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_panel_offers_only_divisors_of_d_model_and_follows_its_sliders(capsys):
    panel = M.widgets.multihead_panel(num_heads=2, d_model=16)
    heads_slider, width_slider = panel.controls["num_heads"], panel.controls["d_model"]
    assert (heads_slider.value, width_slider.value) == (2, 16)
    assert tuple(heads_slider.options) == (1, 2, 4, 8, 16)
    capsys.readouterr()
    width_slider.value = 48  # 2 still divides 48: h stays, and the slider now offers 3, 6 and 12 too
    assert tuple(heads_slider.options) == tuple(h for h in range(1, 17) if 48 % h == 0) and heads_slider.value == 2
    heads_slider.value = 3
    width_slider.value = 64  # 3 does not divide 64: h moves to the nearest divisor (2 and 4 tie: the smaller)
    assert (heads_slider.value, width_slider.value) == (2, 64)
    printed = capsys.readouterr().out
    assert "d_model = 48, h = 3  ->  d_k = d_model / h = 16" in printed
    assert printed.count("d_model = 64, h = 2") == 1  # moving d_model redrew once, not once per control
    assert "not divisible" not in printed
    plt.close("all")


def test_no_head_count_on_the_slider_leaves_a_remainder():
    for d_model in M.widgets.MULTIHEAD_WIDTHS:
        assert all(d_model % h == 0 for h in M.widgets.head_choices(d_model))
        assert max(M.widgets.head_choices(d_model)) <= M.widgets.MULTIHEAD_MAX_HEADS
    with pytest.raises(ValueError, match=r"h = 5 does not divide d_model = 64"):
        M.widgets.multihead_panel(num_heads=5, d_model=64)
