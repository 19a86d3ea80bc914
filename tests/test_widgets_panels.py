"""The precomputed panels (mha_lessons/course/panels.py): one frame per grid point, numbers from the package, HTML a
browser can drive with no kernel. The browser itself is exercised by tests/test_browser.py."""

import base64
import html
import io
import json
import re

import pytest
import torch
from matplotlib.figure import Figure
from PIL import Image

import mha_lessons as M
from mha_lessons import panels


def payload(panel):
    """The JSON the page's script reads, parsed back."""
    text = re.search(r'<script type="application/json" class="mha-panel-data">(.*?)</script>', panel.to_html(),
                     flags=re.DOTALL).group(1)
    return json.loads(text.replace("<\\/", "</"))


def decoded(uri):
    assert uri.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


@pytest.fixture(scope="module")
def small_multihead():
    return panels.multihead_panel(num_heads=2, d_model=16, heads=(1, 2, 3), widths=(8, 16))


@pytest.fixture(scope="module")
def small_scaling():
    return panels.scaling_panel(d_k=4, scaled=True, widths=(1, 4, 64))


def test_every_grid_point_has_its_own_frames_and_text(small_multihead):
    data = payload(small_multihead)
    assert set(data["states"]) == {f"{i},{j}" for i in range(3) for j in range(2)}
    heads_frames = [s["f"][0] for s in data["states"].values()]
    assert len(set(heads_frames)) == 6  # six different pictures, none shared
    for key, state in data["states"].items():
        h = (1, 2, 3)[int(key[0])]
        if h == 3:  # 3 divides neither 8 nor 16: a message, no layer diagram
            assert state["f"][1] is None and "not divisible" in state["t"]
        else:
            assert decoded(data["frames"][state["f"][1]]).size[0] > 400
        image = decoded(data["frames"][state["f"][0]])
        assert image.format == "PNG" and "Software" not in image.info  # nothing about the machine that drew it


def test_multihead_numbers_are_what_torch_and_the_draw_function_give(small_multihead):
    for h, d_model in [(1, 8), (2, 16), (1, 16)]:
        state = small_multihead.state(num_heads=h, d_model=d_model)
        expected_params = sum(p.numel() for p in torch.nn.MultiheadAttention(d_model, h, device="meta").parameters())
        assert f"d_k = d_model / h = {d_model // h}" in state.text
        assert f"{expected_params:,}" in state.text
        assert state.text == M.widgets.draw_multihead(Figure(), num_heads=h, d_model=d_model, n=6, seed=0)
        assert "one per head, each 6 by 6" in state.alts[0] and f"width d_k = {d_model // h}" in state.alts[0]
        assert f"d_model = {d_model}, h = {h}" in state.alts[1]


def test_scaling_numbers_follow_the_check_box(small_scaling):
    for d_k in (1, 4, 64):
        for scaled in (False, True):
            state = small_scaling.state(d_k=d_k, scaled=scaled)
            assert state.text == M.widgets.draw_scaling(Figure(), d_k=d_k, scaled=scaled, seed=0)
            scores = M.scaling.attention_logits(M.widgets.SCALING_ROWS, M.widgets.SCALING_KEYS, d_k,
                                                divisor="sqrt" if scaled else "none", seed=0)
            assert f"standard deviation {scores.std():.2f}" in state.text
            assert f"d_k = {d_k}" in state.alts[0]
    unscaled = small_scaling.state(d_k=64, scaled=False).text
    assert "predicted 8.00" in unscaled  # √64: an independent closed form


def test_html_has_a_labelled_control_with_a_visible_value_for_each_slider(small_scaling):
    page = small_scaling.to_html()
    for control in small_scaling.controls:
        cid = re.search(rf'id="([\w-]+-{control.name})"', page).group(1)
        shown_label = control.symbol or html.escape(control.label)
        assert re.search(rf'<label for="{cid}"[^>]*>{re.escape(shown_label)}</label>', page)
        if isinstance(control, panels.Slider):
            assert f'<output for="{cid}"' in page
            tag = re.search(rf'<input type="range" id="{cid}"[^>]*>', page).group(0)
            assert f'max="{len(control.values) - 1}"' in tag and 'value="1"' in tag  # d_k = 4 is the 2nd value
        else:
            assert re.search(rf'<input type="checkbox" id="{cid}"[^>]*checked', page)
    # the script only looks values up: no arithmetic on the data beyond reading positions
    script = page.rsplit("<script>", 1)[1]
    assert "data.states[key]" in script and "Math." not in script


def test_the_default_state_is_in_the_html_before_any_script_runs(small_scaling):
    page = small_scaling.to_html()
    default = small_scaling.default_state()
    assert html.escape(default.text) in page
    assert f'alt="{html.escape(default.alts[0])}"' in page
    assert default.text in repr(small_scaling)  # the text/plain fallback


def test_cost_panel_numbers_are_the_complexity_module_s():
    panel = panels.cost_panel(n=1024, d_model=512, num_heads=8, lengths=(256, 1024, 4096), widths=(512,),
                              heads=(1, 8))
    assert len(panel.states) == 6 and len(payload(panel)["frames"]) == 6  # a chart per state
    for n in (256, 1024, 4096):
        for h in (1, 8):
            state = panel.state(n=n, d_model=512, num_heads=h)
            # closed forms: 8 n d² for the projections, 4 n² d for scores and weighted sum, h n n float32 weights
            assert state.extra["flops"]["matmul"] == 8 * n * 512**2 + 4 * n * n * 512
            assert state.extra["memory"]["weights"] == 4 * h * n * n
            assert f"(h, n, n) {state.extra['memory']['weights'] / 2**20:.3g} MiB" in state.text
            assert state.extra["crossover"] == 1024  # 2 d_model: the matrix products tie there, the softmax tips it
            assert state.text == M.widgets.draw_cost(Figure(), n=n, d_model=512, num_heads=h)
            share = 100 * state.extra["flops"]["scores"] / state.extra["flops"]["total"]
            assert f"scores {share:.0f}%" in state.alts[0] and f"n = {n}" in state.alts[0]
    assert panel.state(n=256, d_model=512, num_heads=1).text != panel.state(n=256, d_model=512, num_heads=8).text


def test_cost_chart_draws_each_stage_s_flops_and_each_array_s_bytes():
    fig = Figure()
    M.widgets.draw_cost(fig, n=2048, d_model=512, num_heads=8)
    ax_flops, ax_mem = fig.axes
    flops = M.complexity.mha_flops(2048, 512, 8)
    memory = M.complexity.mha_memory(2048, 512, 8)
    stages = M.widgets.LINEAR_STAGES + M.widgets.QUADRATIC_STAGES
    assert [p.get_width() for p in ax_flops.patches] == [flops[s] for s in stages]
    assert [p.get_width() for p in ax_mem.patches] == [memory[a] / 2**20 for a in M.widgets.MEMORY_ARRAYS]
    assert ax_flops.get_xscale() == "log" and ax_flops.get_xlabel() and ax_mem.get_xlabel()


def test_a_value_off_the_grid_is_refused_by_name(small_scaling):
    with pytest.raises(ValueError, match="d_k = 8 is not on the panel's grid"):
        small_scaling.state(d_k=8, scaled=True)
    with pytest.raises(ValueError, match="default 5 is not among"):
        panels.Slider("h", "h", (1, 2), 5)


@pytest.mark.slow   # draws every state of two chapters' panels (30 s); make test runs it, make check does not
def test_chapter_panels_fit_the_size_budget():
    # a page's first load should stay under about 2 MB, the site's own assets included
    sizes = {"scaling": panels.scaling_panel().size_bytes(), "cost": panels.cost_panel().size_bytes()}
    assert all(size < 600_000 for size in sizes.values()), sizes


def test_labels_show_typeset_symbols_and_both_ends_of_the_range(small_multihead):
    page = small_multihead.to_html()
    assert "heads <i>h</i>" in page and "<i>d</i><sub>model</sub>" in page
    assert re.search(r'aria-hidden="true"[^>]*>1</span> <input type="range"[^>]*> <span[^>]*>3</span>', page)
    # Jupyter's shortcuts leave the keys to the focused control: the attribute is on the control itself
    assert all("data-lm-suppress-shortcuts" in tag for tag in re.findall(r"<input [^>]*>", page))


def test_the_chapter_grid_offers_only_heads_that_divide_the_width():
    assert all(d % h == 0 for h in panels.MULTIHEAD_HEADS for d in panels.MULTIHEAD_WIDTHS)


@pytest.mark.parametrize("env, colab, server, expected", [
    ("", False, False, False), ("", False, True, True), ("", True, False, True),
    ("static", True, True, False), ("live", False, False, True)])
def test_live_front_ends_get_the_live_panel_and_everything_else_the_precomputed_one(monkeypatch, env, colab,
                                                                                   server, expected):
    import sys
    import types

    import IPython

    monkeypatch.setenv(panels.LIVE_ENV, env)
    if server:
        monkeypatch.setenv("JPY_SESSION_NAME", "book/03_multi_head_attention.ipynb")
    else:
        monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(IPython, "get_ipython", lambda: types.SimpleNamespace(kernel=object()))
    assert panels.live_frontend() is expected

    shown, built = [], []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    panel = panels.build_panel([panels.Slider("h", "h", (1, 2), 1)], lambda h: panels.State([], [], f"h = {h}"),
                               title="t", frame_names=(), live=lambda: built.append(1) or "LIVE")
    panel._ipython_display_()
    if expected:
        assert shown[0] == "LIVE" and "data-lm-suppress-shortcuts" in shown[1].data
        assert callable(panel._states)  # the grid was never computed
    else:
        assert built == [] and "text/html" in shown[0] and "h = 1" in shown[0]["text/html"]



def test_the_website_loads_frames_as_files_with_the_same_bytes(small_scaling, tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "panel_frames", Path(__file__).resolve().parent.parent / "book" / "_ext" / "panel_frames.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    page = tmp_path / "book" / "02.html"
    page.parent.mkdir()
    before = small_scaling.to_html()
    after = ext.externalize(f"<p>text</p>{before}<p>more</p>", page, tmp_path / "_static")
    assert "data:image" not in after and after.startswith("<p>text</p>") and after.endswith("<p>more</p>")
    frames_before = [base64.b64decode(u.split(",", 1)[1]) for u in payload(small_scaling)["frames"]]
    text = re.search(r'class="mha-panel-data">(.*?)</script>', after, flags=re.DOTALL).group(1)
    urls = json.loads(text)["frames"]
    assert len(urls) == len(frames_before) == 6 and all(u.startswith("../_static/panel-frames/") for u in urls)
    assert [(page.parent / u).read_bytes() for u in urls] == frames_before  # the same pictures, byte for byte
    default = re.search(r'<img class="mha-panel-frame"[^>]*src="([^"]+)"', after).group(1)
    assert (page.parent / default).read_bytes() == small_scaling.default_state().frames[0]
    # everything but the frames is unchanged: the states, their alt texts and numbers
    assert json.loads(text)["states"] == payload(small_scaling)["states"]
