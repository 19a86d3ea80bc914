"""The layer diagram labels every arrow with the shape of the array that really flows there.

The shapes are read off arrays: the layer run step by step with the package's functions (and checked
against ``M.multihead_attention``), or, for head widths the package's layer does not take, a plain
numpy einsum version of the five steps written here. Nothing is compared with a formula copied from
``diagram.py``.
"""

import itertools

import matplotlib.pyplot as plt
import numpy as np
import pytest

import mha_lessons as M


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def shapes_by_arrow(arrows):
    return {(a.start, a.end): a.shape for a in arrows}


def run_steps(x_q, x_k, x_v, params):
    """The layer's five steps with the package's functions; every array the diagram draws, by arrow."""
    h = params.num_heads
    q = x_q @ params.w_q + params.b_q                       # step 1
    k = x_k @ params.w_k + params.b_k
    v = x_v @ params.w_v + params.b_v
    q_h, k_h, v_h = (M.split_heads(a, h) for a in (q, k, v))  # step 2
    out_h, weights = M.scaled_dot_product_attention(q_h, k_h, v_h)  # step 3
    concat = M.combine_heads(out_h)                        # step 4
    y = concat @ params.w_o + params.b_o                    # step 5
    y_package, weights_package = M.multihead_attention(x_q, x_k, x_v, params)
    np.testing.assert_allclose(y, y_package, rtol=1e-12, atol=1e-12)
    assert weights.shape == weights_package.shape
    return {
        "inputs": (x_q.shape, x_k.shape, x_v.shape),
        "projections": (q.shape, k.shape, v.shape),
        "heads": (q_h.shape, k_h.shape, v_h.shape),
        "out_h": out_h.shape, "concat": concat.shape, "y": y.shape, "weights": weights_package.shape,
    }


def expected_from_arrays(arrays, cross):
    x_names = ("X_q", "X_k", "X_v") if cross else ("X", "X", "X")
    expected = {}
    for row, x_name, x_shape, proj, head in zip("QKV", x_names, arrays["inputs"], arrays["projections"],
                                                arrays["heads"]):
        expected[x_name, f"W_{row}"] = x_shape
        expected[f"W_{row}", f"split {row}"] = proj
        expected[f"split {row}", "attention"] = head
    expected["attention", "concat"] = arrays["out_h"]
    expected["concat", "W_O"] = arrays["concat"]
    expected["W_O", "Y"] = arrays["y"]
    expected["attention", "weights"] = arrays["weights"]
    return expected


@pytest.mark.parametrize("d_model, h", [(8, 1), (6, 2), (12, 3), (16, 8), (512, 8)])
@pytest.mark.parametrize("batch", [None, 2])
def test_self_attention_arrows_carry_the_shapes_of_the_real_arrays(rng, d_model, h, batch):
    n = 5
    params = M.init_params(d_model, h, seed=1)
    x = rng.normal(size=(n, d_model) if batch is None else (batch, n, d_model))
    expected = expected_from_arrays(run_steps(x, x, x, params), cross=False)
    drawing = M.diagram.draw_layer(d_model, h, batch=batch, n=n)
    assert shapes_by_arrow(drawing.arrows) == expected
    assert len(drawing.arrows) == len(expected) == 13  # every arrow is a different (start, end)
    assert drawing.matrices == {"W_Q": params.w_q.shape, "W_K": params.w_k.shape, "W_V": params.w_v.shape,
                                "W_O": params.w_o.shape}


@pytest.mark.parametrize("d_model, h", [(8, 1), (12, 3), (16, 4)])
def test_cross_attention_arrows_keep_n_and_m_apart(rng, d_model, h):
    n, m, batch = 3, 7, 2
    params = M.init_params(d_model, h, seed=2)
    x_q = rng.normal(size=(batch, n, d_model))
    x_kv = rng.normal(size=(batch, m, d_model))
    expected = expected_from_arrays(run_steps(x_q, x_kv, x_kv, params), cross=True)
    arrows = M.diagram.layer_arrows(d_model, h, batch=batch, n=n, m=m)
    assert shapes_by_arrow(arrows) == expected
    assert len(arrows) == len(expected)


def einsum_layer_shapes(d_model, h, d_k, d_v, n, m, rng):
    """The five steps with rectangular weights (heads of any width), written with reshape and einsum."""
    x_q, x_k, x_v = rng.normal(size=(n, d_model)), rng.normal(size=(m, d_model)), rng.normal(size=(m, d_model))
    w_q, w_k = rng.normal(size=(2, d_model, h * d_k))
    w_v, w_o = rng.normal(size=(d_model, h * d_v)), rng.normal(size=(h * d_v, d_model))
    q, k, v = x_q @ w_q, x_k @ w_k, x_v @ w_v
    q_h = q.reshape(n, h, d_k).transpose(1, 0, 2)
    k_h = k.reshape(m, h, d_k).transpose(1, 0, 2)
    v_h = v.reshape(m, h, d_v).transpose(1, 0, 2)
    scores = np.einsum("hnd,hmd->hnm", q_h, k_h) / np.sqrt(d_k)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out_h = np.einsum("hnm,hmd->hnd", weights, v_h)
    concat = out_h.transpose(1, 0, 2).reshape(n, h * d_v)
    y = concat @ w_o
    return {
        ("X_q", "W_Q"): x_q.shape, ("X_k", "W_K"): x_k.shape, ("X_v", "W_V"): x_v.shape,
        ("W_Q", "split Q"): q.shape, ("W_K", "split K"): k.shape, ("W_V", "split V"): v.shape,
        ("split Q", "attention"): q_h.shape, ("split K", "attention"): k_h.shape,
        ("split V", "attention"): v_h.shape, ("attention", "concat"): out_h.shape,
        ("concat", "W_O"): concat.shape, ("W_O", "Y"): y.shape, ("attention", "weights"): weights.shape,
    }, {"W_Q": w_q.shape, "W_K": w_k.shape, "W_V": w_v.shape, "W_O": w_o.shape}


@pytest.mark.parametrize("d_model, h, d_k, d_v", [(12, 3, 2, 5), (16, 2, 8, 8), (10, 4, 3, 1), (6, 1, 4, 9)])
def test_heads_of_any_width_are_drawn_with_the_shapes_they_make(rng, d_model, h, d_k, d_v):
    n, m = 4, 6
    expected, matrices = einsum_layer_shapes(d_model, h, d_k, d_v, n, m, rng)
    drawing = M.diagram.draw_layer(d_model, h, d_k=d_k, d_v=d_v, n=n, m=m)
    assert shapes_by_arrow(drawing.arrows) == expected
    assert drawing.matrices == matrices


def test_labels_name_the_axes_then_give_their_sizes_and_are_all_drawn():
    drawing = M.diagram.draw_layer(512, 8, n=4)
    by_arrow = {(a.start, a.end): a.label for a in drawing.arrows}
    assert by_arrow["X", "W_Q"] == "(n, d_model)\n(4, 512)"
    assert by_arrow["W_V", "split V"] == "(n, h·d_v)\n(4, 512)"
    assert by_arrow["split K", "attention"] == "(h, n, d_k)\n(8, 4, 64)"
    assert by_arrow["attention", "weights"] == "(h, n, n)\n(8, 4, 4)"
    assert drawing.labels == [a.label for a in drawing.arrows]
    # the figure typesets the names with mathtext (d_model as d with an upright "model"), the sizes stay plain
    assert by_tex(drawing)["X", "W_Q"] == "$(n, d_\\mathrm{model})$\n(4, 512)"
    assert by_tex(drawing)["W_V", "split V"] == "$(n, h\\,d_v)$\n(4, 512)"
    assert by_tex(drawing)["split K", "attention"] == "$(h, n, d_k)$\n(8, 4, 64)"
    drawn = [t.get_text() for t in drawing.ax.texts]
    for arrow in drawing.arrows:
        assert arrow.tex in drawn, arrow.tex
    # the three arrows out of X carry the same array, and each is labelled
    assert drawn.count("$(n, d_\\mathrm{model})$\n(4, 512)") == 4  # X -> W_Q, W_K, W_V, and W_O -> Y


def by_tex(drawing):
    return {(a.start, a.end): a.tex for a in drawing.arrows}


def test_a_size_left_out_is_typeset_as_its_letter():
    arrows = {(a.start, a.end): a.tex for a in M.diagram.layer_arrows(12, 3, m=7, batch=2)}
    assert arrows["attention", "weights"] == "$(B, h, n, m)$\n(2, 3, $n$, 7)"
    drawing = M.diagram.draw_layer(12, 3)
    fig = drawing.ax.figure
    fig.canvas.draw()   # mathtext parses every label, or raises


def test_sizes_left_out_stay_letters():
    arrows = shapes_by_arrow(M.diagram.layer_arrows(12, 3))
    assert arrows["X", "W_Q"] == ("n", 12)
    assert arrows["attention", "weights"] == (3, "n", "n")
    cross = shapes_by_arrow(M.diagram.layer_arrows(12, 3, m=7, batch=2))
    assert cross["split V", "attention"] == (2, 3, 7, 4)
    assert cross["attention", "weights"] == (2, 3, "n", 7)


@pytest.mark.parametrize("kwargs", [
    {"d_model": 512, "num_heads": 1, "n": 4},
    {"d_model": 512, "num_heads": 2, "n": 4},
    {"d_model": 512, "num_heads": 8, "n": 4},
    {"d_model": 64, "num_heads": 16, "n": 6},
    {"d_model": 12288, "num_heads": 96, "batch": 32, "n": 2048},
    {"d_model": 3072, "num_heads": 16, "d_k": 256, "d_v": 256, "n": 4096, "m": 4096, "batch": 8},
    {"d_model": 12, "num_heads": 3},
])
def test_no_two_texts_overlap_and_all_lie_inside_the_figure(kwargs):
    drawing = M.diagram.draw_layer(**kwargs)
    fig = drawing.ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawing.ax.texts if t.get_text()]
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    width, height = fig.get_size_inches() * fig.dpi
    for text, box in boxes:
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, f"{text!r} is cut off"
    # an arrow's label stays off the boxes (the text inside a box is not an arrow's label)
    patches = [p.get_window_extent(renderer) for p in drawing.ax.patches]
    for label in {a.tex for a in drawing.arrows}:
        for text in drawing.ax.texts:
            if text.get_text() == label:
                box = text.get_window_extent(renderer)
                assert not any(box.overlaps(patch) for patch in patches), f"{label!r} runs into a box"


def test_draws_into_a_given_axes():
    fig, ax = plt.subplots(figsize=M.diagram.FIGSIZE)
    drawing = M.diagram.draw_layer(64, 4, n=6, ax=ax)
    assert drawing.ax is ax and len(ax.patches) >= 7 + 4 + 2  # boxes and the stack's cards


@pytest.mark.parametrize("kwargs, message", [
    ({"d_model": 10, "num_heads": 3}, "d_model = 10 is not divisible by num_heads = 3"),
    ({"d_model": 0, "num_heads": 1}, "d_model must be a positive integer, got 0"),
    ({"d_model": 8, "num_heads": 0}, "num_heads must be a positive integer, got 0"),
    ({"d_model": 8, "num_heads": True}, "num_heads must be a positive integer, got True"),
    ({"d_model": 8, "num_heads": 2, "d_k": 0, "d_v": 4}, "d_k must be a positive integer, got 0"),
    ({"d_model": 8, "num_heads": 2, "d_k": 4, "d_v": 2.5}, "d_v must be a positive integer, got 2.5"),
    ({"d_model": 8, "num_heads": 2, "n": 0}, "n must be a positive integer, got 0"),
    ({"d_model": 8, "num_heads": 2, "m": -1}, "m must be a positive integer, got -1"),
    ({"d_model": 8, "num_heads": 2, "batch": 1.0}, "batch must be a positive integer, got 1.0"),
])
def test_bad_sizes_raise_a_value_error_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        M.diagram.layer_arrows(**kwargs)
    with pytest.raises(ValueError, match=message):
        M.diagram.draw_layer(**kwargs)
    assert not plt.get_fignums()  # nothing half-drawn is left behind
