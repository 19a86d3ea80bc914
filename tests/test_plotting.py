"""The figures draw what they are given: checked by reading back the matplotlib objects, no browser needed."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

import mha_lessons as M
from mha_lessons.notebook import format_table


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_heatmap_shows_the_matrix_and_writes_every_value(rng):
    weights = M.softmax(rng.normal(size=(3, 4)))
    ax = M.plotting.heatmap(weights, row_labels=list("abc"), col_labels=list("wxyz"), title="w")
    np.testing.assert_array_equal(ax.images[0].get_array(), weights)
    texts = {(t.get_position(), t.get_text()) for t in ax.texts}
    expected = {((j, i), f"{weights[i, j]:.2f}") for i in range(3) for j in range(4)}
    assert texts == expected
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abc")
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")


def test_mask_picture_shows_the_mask():
    mask = M.causal_mask(3, 4)
    ax = M.plotting.mask_picture(mask)
    np.testing.assert_array_equal(ax.images[0].get_array(), mask.astype(int))
    with pytest.raises(ValueError, match="boolean"):
        M.plotting.mask_picture(mask.astype(int))


def test_sdpa_shapes_draws_blocks_in_proportion():
    n, m, d_k, d_v = 3, 5, 4, 6
    ax = M.plotting.sdpa_shapes(n, m, d_k, d_v, unit=1.0)
    sizes = [(p.get_width(), p.get_height()) for p in ax.patches]
    # Q, Kᵀ, S, A, V, out as (columns, rows)
    assert sizes == [(d_k, n), (m, d_k), (m, n), (m, n), (d_v, m), (d_v, n)]
    with pytest.raises(ValueError, match="d_v = 0"):
        M.plotting.sdpa_shapes(1, 1, 1, 0)


def test_heatmap_rejects_a_vector():
    with pytest.raises(ValueError, match=r"2-D matrix, got shape \(3,\)"):
        M.plotting.heatmap(np.zeros(3))


def test_format_table_checks_its_labels():
    table = format_table(np.eye(2), ["a", "b"], ["x", "y"], fmt="{:.0f}")
    assert table.splitlines()[1].split() == ["a", "1", "0"]
    with pytest.raises(ValueError, match=r"1 row and 2 column labels for a matrix of shape \(2, 2\)"):
        format_table(np.eye(2), ["a"], ["x", "y"])


@pytest.mark.parametrize("n, d_model, h", [(4, 12, 3), (2, 512, 8), (3, 6, 1)])
def test_head_layout_draws_every_token_of_every_head_twice(n, d_model, h):
    ax = M.plotting.head_layout(n, d_model, h)
    widths = [p.get_width() for p in ax.patches]
    assert len(widths) == 2 * n * h  # left: (n, d_model) cut by head; right: h slabs of n rows
    assert len(set(np.round(widths, 9))) == 1  # every head's block is d_k wide, on both sides
    labels = [t.get_text() for t in ax.texts]
    assert f"$(h, n, d_k)$ = ({h}, {n}, {d_model // h})" in labels   # the names typeset with mathtext
    assert f"$(n, d_\\mathrm{{model}})$ = ({n}, {d_model})" in labels
    assert [f"head {i}" for i in range(h)] == [t for t in labels if t.startswith("head ")]


def test_head_layout_rejects_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="divisible"):
        M.plotting.head_layout(3, 10, 4)


def test_heads_mosaic_places_head_i_at_its_grid_cell(rng):
    weights = rng.random((11, 3, 4))
    ax = M.plotting.heads_mosaic(weights, max_cols=4)
    mosaic = ax.images[0].get_array()
    assert mosaic.shape == (3 * 4 - 1, 4 * 5 - 1)  # 3 rows and 4 columns of 3 x 4 blocks with gaps
    for i in range(11):
        r, c = divmod(i, 4)
        np.testing.assert_array_equal(mosaic[r * 4:r * 4 + 3, c * 5:c * 5 + 4], weights[i])
    assert np.isnan(np.ma.getdata(mosaic)).sum() == mosaic.size - weights.size
    with pytest.raises(ValueError, match=r"\(h, n, m\), got shape \(3, 4\)"):
        M.plotting.heads_mosaic(weights[0])


def test_position_vectors_draws_the_matrix_on_a_fixed_scale_from_minus_one_to_one():
    P = M.position.sinusoidal_positions(20, 8)
    ax = M.plotting.position_vectors(P, title="positions")
    np.testing.assert_array_equal(ax.images[0].get_array(), P)
    assert ax.images[0].get_clim() == (-1.0, 1.0)  # the same colours for any n and d_model
    assert ax.get_ylabel() == "position $i$" and ax.get_title() == "positions"
    assert len(ax.figure.axes) == 2  # the picture and its colour bar
    with pytest.raises(ValueError, match=r"\(n, d_model\) matrix, got shape \(8,\)"):
        M.plotting.position_vectors(P[0])


def test_roofline_draws_each_roof_as_the_smaller_of_its_two_limits():
    from mha_lessons.plotting import roofline

    roofs = {"slow": (1e11, 5e10), "fast": (1.56e14, 2.039e12)}
    ax = roofline({"softmax": 0.156, "scores": 28.4, "copy": 0.0}, roofs, measured={"scores": 6e10})
    lines = {line.get_label(): line for line in ax.get_lines()}
    for machine, (r_flop, r_mem) in roofs.items():
        x, y = lines[machine].get_data()
        np.testing.assert_allclose(y, np.minimum(r_flop, x * r_mem))
    # the points sit on the roofs: softmax memory-bound on both, scores compute-bound on the slow machine only
    assert np.isclose(lines["softmax"].get_data()[1][0], 0.156 * 5e10)
    assert np.isclose(lines["scores"].get_data()[1][0], 1e11)
    assert "copy" not in lines                                   # zero intensity has no place on a log axis
    with pytest.raises(ValueError, match="R_mem = 0"):
        roofline({"scores": 1.0}, {"broken": (1e11, 0)})
