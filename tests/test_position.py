"""Sinusoidal position vectors, against closed forms written another way, and the rotation by an offset."""

import cmath
import math

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.position import frequencies, offset_rotation, sinusoidal_positions

SIZES = [(1, 2), (7, 4), (50, 16), (33, 10), (128, 64)]


def loop_positions(n, d_model, base=10000.0):
    """Vaswani et al.'s formula entry by entry: PE(t, 2i) = sin(t / base^(2i/d)), PE(t, 2i+1) = cos(same)."""
    table = [[0.0] * d_model for _ in range(n)]
    for t in range(n):
        for i in range(d_model // 2):
            angle = t / base ** (2 * i / d_model)
            table[t][2 * i] = math.sin(angle)
            table[t][2 * i + 1] = math.cos(angle)
    return np.array(table)


def torch_positions(n, d_model, base=10000.0):
    """The usual torch code: frequencies as exp(-(2i) ln(base) / d), then interleaved by slicing."""
    position = torch.arange(n, dtype=torch.float64)[:, None]
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(base) / d_model))
    pe = torch.zeros(n, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.numpy()


@pytest.mark.parametrize("n, d_model", SIZES)
def test_positions_match_the_formula_entry_by_entry_and_torchs_version(n, d_model):
    ours = sinusoidal_positions(n, d_model)
    assert ours.shape == (n, d_model) and ours.dtype == np.float64
    # The angle t·ω reaches 127 rad; a relative error of 1e-16 in ω moves sin by ~1e-14 there.
    np.testing.assert_allclose(ours, loop_positions(n, d_model), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours, torch_positions(n, d_model), rtol=0, atol=1e-12)


def test_another_base_changes_the_slowest_frequency():
    np.testing.assert_allclose(sinusoidal_positions(9, 6, base=100.0), loop_positions(9, 6, base=100.0),
                               rtol=0, atol=1e-13)
    np.testing.assert_allclose(frequencies(6, base=100.0), [1.0, 100 ** (-1 / 3), 100 ** (-2 / 3)], rtol=1e-15)


def test_known_values():
    P = sinusoidal_positions(4, 6)
    np.testing.assert_array_equal(P[0], [0, 1, 0, 1, 0, 1])  # sin 0 and cos 0
    np.testing.assert_allclose(P[2, :2], [math.sin(2), math.cos(2)], rtol=1e-15)  # the fastest pair: ω_0 = 1
    assert np.all(np.abs(P) <= 1)
    np.testing.assert_allclose((P ** 2).sum(axis=1), 3, rtol=1e-14)  # sin² + cos² = 1, d_model / 2 times


@pytest.mark.parametrize("n, d_model", SIZES[1:])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_an_offset_is_a_rotation_of_each_pair_written_as_a_complex_number(n, d_model, k):
    """cos(tω) + i sin(tω) = e^{itω}, so moving k positions on multiplies pair i by e^{ikω_i}, whatever t is."""
    if k >= n:
        pytest.skip("offset longer than the sequence")
    P = sinusoidal_positions(n, d_model)
    omega = [10000.0 ** (-2 * i / d_model) for i in range(d_model // 2)]
    for t in range(n - k):
        for i, w in enumerate(omega):
            z_t = complex(P[t, 2 * i + 1], P[t, 2 * i])
            z_tk = complex(P[t + k, 2 * i + 1], P[t + k, 2 * i])
            assert abs(z_t * cmath.exp(1j * k * w) - z_tk) < 1e-12


@pytest.mark.parametrize("d_model", [2, 8, 64])
@pytest.mark.parametrize("k", [0, 1, 7, -3])
def test_offset_rotation_moves_every_position_by_k(d_model, k):
    n = 40
    P = sinusoidal_positions(n, d_model)
    R = offset_rotation(k, d_model)
    start, stop = max(0, -k), min(n, n - k)  # the rows t with t + k inside 0 .. n - 1
    np.testing.assert_allclose(P[start:stop] @ R, P[start + k:stop + k], rtol=0, atol=1e-12)


def test_offset_rotation_is_a_rotation_and_offsets_add():
    R3, R4, R7 = (offset_rotation(k, 12) for k in (3, 4, 7))
    np.testing.assert_allclose(R3 @ R3.T, np.eye(12), rtol=0, atol=1e-14)  # orthogonal
    assert abs(np.linalg.det(R3) - 1) < 1e-12  # and no reflection
    np.testing.assert_allclose(R3 @ R4, R7, rtol=0, atol=1e-13)  # three steps, then four, are seven
    np.testing.assert_allclose(offset_rotation(-3, 12), R3.T, rtol=0, atol=1e-15)  # back is the inverse
    np.testing.assert_array_equal(offset_rotation(0, 12), np.eye(12))


def test_dot_product_of_two_positions_depends_only_on_their_distance():
    """P[t]·P[s] = Σ_i cos((t - s) ω_i): the Gram matrix is constant along every diagonal."""
    P = sinusoidal_positions(30, 16)
    gram = P @ P.T
    omega = frequencies(16)
    for t in range(30):
        for s in range(30):
            assert abs(gram[t, s] - np.cos((t - s) * omega).sum()) < 1e-12


@pytest.mark.parametrize("n, d_model, match", [
    (0, 4, "n must be a positive integer, got 0"),
    (2.0, 4, "n must be a positive integer, got 2.0"),
    (True, 4, "n must be a positive integer, got True"),
    (3, 0, "d_model must be a positive integer, got 0"),
    (3, 5, "d_model = 5 is odd"),
])
def test_bad_sizes_are_refused(n, d_model, match):
    with pytest.raises(ValueError, match=match):
        sinusoidal_positions(n, d_model)


@pytest.mark.parametrize("base", [1.0, 0.5, -2, float("nan"), float("inf"), "10000", True])
def test_bad_base_is_refused(base):
    with pytest.raises(ValueError, match="base must be a finite number above 1"):
        sinusoidal_positions(3, 4, base=base)


def test_offset_must_be_an_integer():
    with pytest.raises(ValueError, match="offset k must be an integer, got 1.5"):
        offset_rotation(1.5, 4)
    with pytest.raises(ValueError, match="d_model = 3 is odd"):
        offset_rotation(1, 3)


def test_positions_make_self_attention_see_order(rng):
    """Without positions a permutation only permutes the output; with them it changes the output itself."""
    n, d_model = 6, 8
    x = rng.normal(size=(n, d_model))
    params = M.init_params(d_model, 2, seed=3)
    perm = np.array([5, 2, 0, 4, 1, 3])

    def attend(x):
        return M.multihead_attention(x, x, x, params)[0]

    np.testing.assert_allclose(attend(x[perm]), attend(x)[perm], rtol=1e-12, atol=1e-14)
    P = sinusoidal_positions(n, d_model)
    assert np.abs(attend(x[perm] + P) - attend(x + P)[perm]).max() > 1e-2
