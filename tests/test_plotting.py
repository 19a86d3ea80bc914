"""The figures draw what they are given: checked by reading back the matplotlib objects, no browser needed."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import mha_lessons as M  # noqa: E402
from mha_lessons.notebook import format_table  # noqa: E402


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
