"""Why divide by √d_k: the closed forms against exact quadrature and simulation, the softmax Jacobian
against torch autograd and finite differences.

Monte Carlo comparisons use tolerances of Z standard errors, each derived from the sample size
(``variance_standard_error`` and the standard error of a mean). With Z = 5 a correct formula fails a
comparison with probability about 6e-7 (two-sided normal tail); the generators are seeded anyway.
"""

import math

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.scaling import (
    alignment_saturation,
    attention_logits,
    dot_product_kurtosis,
    dot_product_moments,
    dot_product_variance,
    query_gradient,
    sample_attention_rows,
    sample_qk,
    softmax_jacobian,
    softmax_saturation,
)
from mha_lessons.stats import entropy, fit_loglog_slope, variance_standard_error
from common import same_but_for_rounding

Z = 5.0  # standard errors allowed in a Monte Carlo comparison (see the module docstring)
EPS = np.finfo(np.float64).eps

CASES = {
    "standard": {},
    "variance sigma^2": dict(std_q=2.0, std_k=0.5),
    "correlated": dict(corr=0.6),
    "anti-correlated, other variances": dict(corr=-0.8, std_q=1.5, std_k=0.7),
    "non-zero means": dict(mean_q=0.5, mean_k=-1.0, std_q=1.5, std_k=0.7),
    "everything at once": dict(mean_q=0.3, mean_k=0.8, std_q=1.2, std_k=0.9, corr=0.5),
}


def gauss_hermite_expectation(f, dims, nodes=6):
    """E[f(z)] for z standard normal in `dims` dimensions, exact when f is a polynomial of degree < 2 nodes."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)  # probabilists' Hermite: weight exp(-x²/2)
    w = w / w.sum()  # now the weights of a standard normal
    grids = np.meshgrid(*([x] * dims), indexing="ij")
    weights = np.prod(np.meshgrid(*([w] * dims), indexing="ij"), axis=0)
    return float(np.sum(weights * f(*grids)))


# ----------------------------------------------------------------------------- closed forms, exactly

@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_moments_of_one_term_by_exact_quadrature(case):
    """For d_k = 1, E[qk] and Var[qk] are polynomial expectations of two normals: quadrature is exact."""
    p = {"mean_q": 0.0, "mean_k": 0.0, "std_q": 1.0, "std_k": 1.0, "corr": 0.0} | CASES[case]
    rho = p["corr"]

    def product(z1, z2):  # the same construction of a correlated pair as any textbook, written out here
        q = p["mean_q"] + p["std_q"] * z1
        k = p["mean_k"] + p["std_k"] * (rho * z1 + math.sqrt(1 - rho**2) * z2)
        return q * k

    first = gauss_hermite_expectation(product, 2)
    second = gauss_hermite_expectation(lambda a, b: product(a, b) ** 2, 2)
    mean, variance = dot_product_moments(1, **CASES[case])
    assert mean == pytest.approx(first, rel=1e-12, abs=1e-14)
    assert variance == pytest.approx(second - first**2, rel=1e-12)
    # d_k independent terms: both moments add up
    assert dot_product_moments(37, **CASES[case]) == pytest.approx((37 * mean, 37 * variance), rel=1e-14)


@pytest.mark.parametrize("d_k", [1, 2, 3])
def test_kurtosis_by_exact_quadrature(d_k):
    """E[(q·k)⁴] over 2 d_k standard normals, a degree-8 polynomial: 5 or more nodes per axis are exact."""

    def fourth_power(*z):
        q, k = z[:d_k], z[d_k:]
        return sum(a * b for a, b in zip(q, k)) ** 4

    fourth = gauss_hermite_expectation(fourth_power, 2 * d_k, nodes=5)
    assert dot_product_kurtosis(d_k) == pytest.approx(fourth / d_k**2, rel=1e-12)


def test_uncorrelated_formula_holds_for_non_normal_coordinates(rng):
    """With corr = 0 only independence, means and variances enter: check with uniform coordinates."""
    d_k, n = 16, 40000
    mean_q, mean_k, std_q, std_k = 0.5, -1.0, 1.5, 0.7
    half_width = math.sqrt(3.0)  # uniform on [-√3, √3] has variance 1
    q = mean_q + std_q * rng.uniform(-half_width, half_width, (n, d_k))
    k = mean_k + std_k * rng.uniform(-half_width, half_width, (n, d_k))
    s = np.einsum("na,na->n", q, k)
    mean, variance = dot_product_moments(d_k, mean_q=mean_q, mean_k=mean_k, std_q=std_q, std_k=std_k)
    assert abs(s.mean() - mean) < Z * math.sqrt(variance / n)
    kurtosis = np.mean((s - s.mean()) ** 4) / s.var() ** 2
    assert abs(s.var(ddof=1) - variance) < Z * variance_standard_error(variance, kurtosis, n)


# ----------------------------------------------------------------------------- the sampler and the Monte Carlo

@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_simulated_moments_match_the_closed_forms(case):
    n, d_k = 20000, 16
    stats = dot_product_variance([d_k], n, seed=3, **CASES[case])
    mean, variance = dot_product_moments(d_k, **CASES[case])
    assert abs(stats.mean[0] - mean) < Z * math.sqrt(variance / n)
    se = variance_standard_error(variance, stats.kurtosis[0], n)  # kurtosis estimated from the sample
    assert abs(stats.variance[0] - variance) < Z * se


def test_sampler_has_the_requested_coordinate_statistics(rng):
    n = 50000
    q, k = sample_qk(n, 3, mean_q=1.0, mean_k=-2.0, std_q=2.0, std_k=0.5, corr=0.7, seed=rng)
    assert q.shape == k.shape == (n, 3)
    np.testing.assert_allclose(q.mean(0), 1.0, atol=Z * 2.0 / math.sqrt(n))
    np.testing.assert_allclose(k.mean(0), -2.0, atol=Z * 0.5 / math.sqrt(n))
    corr = [np.corrcoef(q[:, a], k[:, a])[0, 1] for a in range(3)]
    np.testing.assert_allclose(corr, 0.7, atol=Z * (1 - 0.7**2) / math.sqrt(n))  # SE of r ≈ (1 - ρ²)/√N
    across = np.corrcoef(q[:, 0], k[:, 1])[0, 1]  # different coordinates are independent
    assert abs(across) < Z / math.sqrt(n)


def test_variance_standard_error_matches_repeated_experiments(rng):
    """Repeat a small experiment many times: the spread of its sample variances is the standard error."""
    repeats, n = 4000, 100
    s = rng.standard_normal((repeats, n)) * rng.standard_normal((repeats, n))  # q·k with d_k = 1: kurtosis 9
    estimates = s.var(axis=1, ddof=1)  # (repeats,)
    predicted = variance_standard_error(1.0, dot_product_kurtosis(1), n)
    observed = estimates.std(ddof=1)
    # the standard error of a sample standard deviation: σ √((κ - 1) / (4 R)), κ the kurtosis of the estimates
    kappa = np.mean((estimates - estimates.mean()) ** 4) / estimates.var() ** 2
    assert abs(observed - predicted) < Z * predicted * math.sqrt((kappa - 1) / (4 * repeats))


def test_variance_grows_like_d_k_and_the_scale_removes_it():
    d_ks = 2 ** np.arange(2, 11)  # 4 ... 1024
    n = 2000
    stats = dot_product_variance(d_ks, n, seed=1)
    rel_se = variance_standard_error(1.0, dot_product_kurtosis(d_ks), n)  # (W,) relative standard errors
    slope, intercept, slope_se = fit_loglog_slope(stats.d_k, stats.variance, rel_se)
    assert abs(slope - 1.0) < Z * slope_se
    assert abs(intercept) < Z * float(np.max(rel_se))  # Var = 1 · d_k: intercept log 1 = 0
    # unscaled: Var = d_k; scaled: Var = 1, each within Z standard errors
    assert np.all(np.abs(stats.variance - d_ks) < Z * d_ks * rel_se)
    assert np.all(np.abs(stats.scaled_variance - 1.0) < Z * rel_se)
    np.testing.assert_array_equal(stats.d_k, d_ks)


def test_monte_carlo_is_reproducible_and_independent_across_widths():
    a = dot_product_variance([8, 8], 500, seed=7)
    b = dot_product_variance([8, 8], 500, seed=7)
    same_but_for_rounding(a.variance, b.variance)
    assert abs(a.variance[0] - a.variance[1]) > 1e-3 * a.variance[0]  # fresh samples for each width


def test_fit_loglog_slope_exact_power_and_its_standard_error(rng):
    x = np.array([4.0, 16, 64, 256, 1024])
    slope, intercept, _ = fit_loglog_slope(x, 3.0 * x**0.5, 0.01)
    assert slope == pytest.approx(0.5, abs=1e-13)
    assert intercept == pytest.approx(math.log(3.0), abs=1e-13)
    # the standard error: refit many noisy copies and compare the spread of the slopes
    rel_se = np.array([0.02, 0.05, 0.01, 0.03, 0.04])
    repeats = 3000
    slopes = [fit_loglog_slope(x, x * np.exp(rel_se * rng.standard_normal(5)), rel_se)[0] for _ in range(repeats)]
    predicted = fit_loglog_slope(x, x, rel_se)[2]
    # the sample standard deviation of R normal numbers has relative standard error √(1 / (2 (R - 1)))
    assert abs(np.std(slopes, ddof=1) / predicted - 1) < Z * math.sqrt(1 / (2 * (repeats - 1)))


# ----------------------------------------------------------------------------- softmax saturation

def test_entropy_matches_torch(rng):
    p = M.softmax(rng.normal(size=(4, 7)) * 3)
    expected = torch.distributions.Categorical(probs=torch.from_numpy(p)).entropy().numpy()
    np.testing.assert_allclose(entropy(p), expected, rtol=1e-13)
    assert entropy(np.full(5, 0.2)) == pytest.approx(math.log(5), rel=1e-15)
    assert entropy(np.eye(3)).tolist() == [0.0, 0.0, 0.0]


def test_logit_rows_have_the_predicted_spread():
    n_rows, m, d_k = 400, 50, 64
    for divisor, expected_var in (("none", d_k), ("sqrt", 1.0), ("d_k", 1.0 / d_k)):
        s = attention_logits(n_rows, m, d_k, divisor=divisor, seed=2)
        assert s.shape == (n_rows, m)
        # the r·m scores are not independent (a row shares its query), but the rows are: average per row
        row_means = (s**2).mean(axis=1)  # (r,) each an unbiased estimate of the variance (mean 0)
        se = row_means.std(ddof=1) / math.sqrt(n_rows)
        assert abs(row_means.mean() - expected_var) < Z * se


def test_unscaled_softmax_collapses_and_scaled_does_not():
    d_ks, m, n_rows = [4, 16, 64, 256, 1024], 32, 300
    raw = softmax_saturation(d_ks, m, n_rows, divisor="none", seed=0)
    assert np.all(np.diff(raw.entropy) < 0) and np.all(np.diff(raw.max_weight) > 0)
    assert raw.max_weight[-1] > 0.9 and raw.entropy[-1] < 0.1 * math.log(m)  # nearly one-hot

    # With the scale, a row is q·k_j / √d_k with |q|² / d_k → 1: as d_k grows it becomes a row of m
    # independent N(0, 1) scores. Compare with such rows simulated directly, within the sampling error.
    rng = np.random.default_rng(5)
    reference = M.softmax(rng.standard_normal((n_rows, m)), axis=-1)
    scaled = softmax_saturation([1024], m, n_rows, divisor="sqrt", seed=1)
    rows = M.softmax(attention_logits(n_rows, m, 1024, seed=np.random.default_rng(1)), axis=-1)
    se = math.sqrt(entropy(reference).var(ddof=1) / n_rows + entropy(rows).var(ddof=1) / n_rows)
    assert abs(scaled.entropy[0] - entropy(reference).mean()) < Z * se
    se_top = math.sqrt(reference.max(-1).var(ddof=1) / n_rows + rows.max(-1).var(ddof=1) / n_rows)
    assert abs(scaled.max_weight[0] - reference.max(-1).mean()) < Z * se_top


def test_dividing_by_d_k_flattens_the_softmax():
    """Scores of variance 1/d_k: to second order log m - H = (spread of the row) / 2 ≈ 1 / (2 d_k)."""
    m, d_k = 32, 1024
    sat = softmax_saturation([d_k], m, 200, divisor="d_k")
    gap = math.log(m) - sat.entropy[0]
    assert 0 < gap < 1 / d_k
    assert sat.max_weight[0] < 1.2 / m


# ----------------------------------------------------------------------------- keys aligned with the query

def test_each_key_has_the_moments_of_its_own_correlation():
    """Column j of the scaled scores: mean √d_k ρ_j, variance 1 + ρ_j² (case (c), the closed form divided by d_k)."""
    corrs = np.array([0.9, 0.5, 0.0, -0.6])
    n_rows, d_k = 20000, 32
    s = attention_logits(n_rows, len(corrs), d_k, seed=4, corr=corrs)  # (r, m), rows independent
    for j, rho in enumerate(corrs):
        mean, var = dot_product_moments(d_k, corr=float(rho))
        mean, var = mean / math.sqrt(d_k), var / d_k  # divided by √d_k
        col = s[:, j]
        assert abs(col.mean() - mean) < Z * math.sqrt(var / n_rows)
        kurtosis = np.mean((col - col.mean()) ** 4) / col.var() ** 2
        assert abs(col.var(ddof=1) - var) < Z * variance_standard_error(var, kurtosis, n_rows)


def test_zero_correlation_draws_the_same_numbers_as_before():
    """corr = 0 must not change the stream: chapter 2's stored tables depend on it."""
    rng = np.random.default_rng(11)
    q, k = rng.standard_normal((3, 1, 16)), rng.standard_normal((3, 5, 16))
    expected = np.einsum("rqa,rma->rm", q, k) / 4.0
    same_but_for_rounding(attention_logits(3, 5, 16, seed=11), expected)  # another stream: other numbers entirely
    same_but_for_rounding(attention_logits(3, 5, 16, seed=11, corr=np.zeros(5)), expected)


@pytest.mark.parametrize("rho", [1.0, -1.0])
def test_keys_equal_to_plus_or_minus_the_query_give_a_uniform_row(rho):
    """Every k_j = ρ q with |ρ| = 1: all scores of a row equal, weights exactly 1/m, entropy log m."""
    m = 6
    sat = alignment_saturation([8, 256], [rho] * m, 50)
    np.testing.assert_allclose(sat.mean_weight, 1 / m, rtol=1e-12)
    np.testing.assert_allclose(sat.entropy, math.log(m), rtol=1e-12)
    np.testing.assert_allclose(sat.mean_weight_se, 0, atol=1e-14)


def reduced_rows(n_rows, d_k, corrs, rng, divisor):
    """The same rows from 1 + m numbers each, not 2 d_k: an independent Monte Carlo.

    With R = |q|² (chi-squared, d_k degrees of freedom) and, given q, q·z_j ~ N(0, R) independent
    across keys, the score of key j is exactly ρ_j R + √(1 - ρ_j²) √R N_j.
    """
    corrs = np.asarray(corrs)
    big_r = rng.chisquare(d_k, size=(n_rows, 1))  # (r, 1)
    noise = rng.standard_normal((n_rows, len(corrs)))  # (r, m)
    return (corrs * big_r + np.sqrt(1 - corrs**2) * np.sqrt(big_r) * noise) / divisor


@pytest.mark.parametrize("layout", ["one aligned", "all aligned", "mixed"])
@pytest.mark.parametrize("d_k", [16, 256])
def test_alignment_saturation_matches_an_independent_monte_carlo(layout, d_k, rng):
    m, n_rows = 8, 3000
    corrs = {"one aligned": [0.5] + [0.0] * (m - 1), "all aligned": [0.5] * m,
             "mixed": [0.8, 0.3, 0.0, 0.0, -0.4, 0.3, 0.0, 0.1]}[layout]
    sat = alignment_saturation([d_k], corrs, n_rows, seed=2)
    p = M.softmax(reduced_rows(n_rows, d_k, corrs, rng, math.sqrt(d_k)), axis=-1)  # (r, m)
    se_w = np.sqrt(sat.mean_weight_se[0] ** 2 + p.var(axis=0, ddof=1) / n_rows)  # (m,)
    assert np.all(np.abs(sat.mean_weight[0] - p.mean(axis=0)) < Z * se_w + 1e-12)
    h = entropy(p)
    se_h = math.sqrt(sat.entropy_se[0] ** 2 + h.var(ddof=1) / n_rows)
    assert abs(sat.entropy[0] - h.mean()) < Z * se_h


def test_one_aligned_key_takes_over_and_a_shared_alignment_does_nothing():
    m, rho, d_ks = 16, 0.5, [4, 16, 64, 256, 1024]
    one = alignment_saturation(d_ks, [rho] + [0.0] * (m - 1), 400)
    assert np.all(np.diff(one.mean_weight[:, 0]) > 0) and one.mean_weight[-1, 0] > 0.99
    shared = alignment_saturation(d_ks, [rho] * m, 400)
    # from d_k = 64 on |q|²/d_k ≈ 1 and the rows have the same distribution at every width
    for i in (3, 4):
        assert abs(shared.entropy[i] - shared.entropy[2]) < Z * math.hypot(shared.entropy_se[i], shared.entropy_se[2])
    assert shared.entropy[-1] > 0.8 * math.log(m)
    # dividing by d_k instead: the aligned key's lead tends to ρ, its weight to e^ρ / (e^ρ + m - 1)
    by_d = alignment_saturation([4096], [rho] + [0.0] * (m - 1), 400, divisor="d_k")
    limit = math.exp(rho) / (math.exp(rho) + m - 1)
    assert abs(by_d.mean_weight[0, 0] - limit) < Z * by_d.mean_weight_se[0, 0] + 1e-3


# ----------------------------------------------------------------------------- the softmax Jacobian

def test_softmax_jacobian_matches_torch_autograd(rng):
    x = rng.normal(size=(2, 3, 5)) * 4
    jac = softmax_jacobian(x)
    assert jac.shape == (2, 3, 5, 5)
    full = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, dim=-1), torch.from_numpy(x))
    full = full.numpy()  # (2, 3, 5, 2, 3, 5): every output against every input
    for b in range(2):
        for i in range(3):
            # torch forms p_i - p_i², which is only accurate to a few eps in absolute terms
            np.testing.assert_allclose(jac[b, i], full[b, i, :, b, i, :], rtol=1e-13, atol=4 * EPS)
    # rows of different (b, i) do not influence each other
    assert np.all(full[0, 0][:, 1] == 0)


def test_softmax_jacobian_matches_central_differences(rng):
    x = rng.normal(size=6) * 2
    h = 1e-5
    numeric = np.empty((6, 6))
    for j in range(6):
        step = np.zeros(6)
        step[j] = h
        numeric[:, j] = (M.softmax(x + step) - M.softmax(x - step)) / (2 * h)
    # truncation ≤ h² |p'''| / 6 with |p'''| ≤ 1, rounding ≤ a few eps / h: allow both with room to spare
    np.testing.assert_allclose(softmax_jacobian(x), numeric, rtol=0, atol=h**2 + 10 * EPS / h)


@pytest.mark.parametrize("c", [0.0, 1.0, 5.0, 20.0, 60.0])
def test_two_keys_closed_form(c):
    """Scores (c, 0): p = σ(c), J = σ(1 - σ) [[1, -1], [-1, 1]], spectral norm 2 σ (1 - σ).

    σ (1 - σ) = e^{-c} / (1 + e^{-c})² without cancellation, so the comparison is in relative terms
    even where the softmax is saturated and J is tiny.
    """
    e = math.exp(-c)
    slope = e / (1 + e) ** 2  # σ(c) (1 - σ(c))
    jac = softmax_jacobian([c, 0.0])
    np.testing.assert_allclose(jac, slope * np.array([[1, -1], [-1, 1]]), rtol=1e-13, atol=0)
    assert np.linalg.norm(jac, 2) == pytest.approx(2 * slope, rel=1e-13)


def test_jacobian_structure_and_vanishing_bound(rng):
    for scale in (0.1, 1.0, 8.0, 32.0):
        x = rng.normal(size=(50, 16)) * scale
        jac = softmax_jacobian(x)
        p = M.softmax(x)
        np.testing.assert_allclose(jac.sum(axis=-1), 0, atol=1e-15)  # a constant shift changes nothing
        np.testing.assert_array_equal(jac, np.swapaxes(jac, -1, -2))
        norms = np.linalg.norm(jac, 2, axis=(-2, -1))
        # 1 - p_i as the sum of the other weights: no cancellation when p_i is close to 1
        rest = np.array([[np.sum(np.delete(row, i)) for i in range(16)] for row in p])  # (50, 16)
        bound = 2 * np.max(p * rest, axis=-1)
        assert np.all(norms <= bound * (1 + 1e-12))
        assert np.all(bound <= 2 * rest[np.arange(50), p.argmax(axis=-1)] * (1 + 1e-12))


def test_jacobian_of_masked_scores():
    """A score of -inf gets weight 0 and no gradient; the others behave as a softmax of their own."""
    jac = softmax_jacobian([1.0, -np.inf, 0.5])
    np.testing.assert_array_equal(jac[1], 0)
    np.testing.assert_array_equal(jac[:, 1], 0)
    np.testing.assert_allclose(jac[np.ix_([0, 2], [0, 2])], softmax_jacobian([1.0, 0.5]), rtol=1e-15)


def test_jacobian_keeps_float32():
    assert softmax_jacobian(np.zeros(3, dtype=np.float32)).dtype == np.float32


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: softmax_jacobian(3.0), r"at least 1 dimensions \(\.\.\., m\), got shape \(\)"),
        (lambda: softmax_jacobian(np.zeros((2, 0))), r"shape \(2, 0\) has m = 0"),
        (lambda: softmax_jacobian(["a"]), "real numbers"),
        (lambda: dot_product_moments(0), "got 0"),
        (lambda: dot_product_moments(4.5), "got 4.5"),
        (lambda: dot_product_moments(4, corr=1.5), r"\[-1, 1\], got 1.5"),
        (lambda: dot_product_moments(4, std_k=-2.0), "got -2.0"),
        (lambda: dot_product_moments(4, mean_q=np.nan), "mean_q must be a finite number, got nan"),
        (lambda: dot_product_kurtosis(0), "got 0"),
        (lambda: sample_qk(0, 4), "n_samples must be an integer of at least 1, got 0"),
        (lambda: sample_qk(3, True), "d_k must be an integer of at least 1, got True"),
        (lambda: dot_product_variance([4, 0], 10), r"got \[4, 0\]"),
        (lambda: dot_product_variance([4], 1), "n_samples must be an integer of at least 2, got 1"),
        (lambda: dot_product_variance([4], 10, std=2.0), r"unknown distribution parameters \['std'\]"),
        (lambda: variance_standard_error(1.0, 0.5, 10), r"kurtosis 0.5"),
        (lambda: fit_loglog_slope([1, 2], [1, -1], 0.1), r"y \[1.0, -1.0\]"),
        (lambda: fit_loglog_slope([2, 2], [1, 3], 0.1), r"all x are equal \(2.0\)"),
        (lambda: fit_loglog_slope([1, 2, 3], [1, 2], 0.1), r"shapes \(3,\) and \(2,\)"),
        (lambda: entropy([0.5, -0.1]), "minimum of -0.1"),
        (lambda: attention_logits(2, 3, 4, divisor="cube"), r"one of \['d_k', 'none', 'sqrt'\], got 'cube'"),
        (lambda: softmax_saturation([4], 3, 2, divisor=2), r"got 2"),
        (lambda: attention_logits(2, 3, 4, corr=[0.1, 0.2]), r"shape \(3,\), got shape \(2,\)"),
        (lambda: attention_logits(2, 2, 4, corr=[0.1, 1.5]), r"\[-1, 1\], got \[0.1, 1.5\]"),
        (lambda: alignment_saturation([4], 0.5, 10), r"1-D sequence, got shape \(\)"),
        (lambda: alignment_saturation([4], [0.5, 0.0], 1), "n_rows must be an integer of at least 2, got 1"),
        (lambda: alignment_saturation([4], [0.5, np.nan], 10), r"got \[0.5, nan\]"),
        (lambda: query_gradient([4, 0], 8, 10), r"got \[4, 0\]"),
        (lambda: query_gradient([4], 0, 10), "m must be an integer of at least 1, got 0"),
        (lambda: query_gradient([4], 8, 10, divisor="cube"), r"got 'cube'"),
        (lambda: sample_attention_rows(0, 3, 4), "n_rows must be an integer of at least 1, got 0"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_numbers(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("d_k", [1, 2, 4])
def test_measured_kurtosis_equals_its_closed_form(d_k):
    # The sample kurtosis that dot_product_variance reports (and chapter 2 feeds into the standard errors)
    # against the closed form 3 + 6 / d_k: 9 for d_k = 1, far from a normal's 3, so a kurtosis that is
    # assumed rather than measured fails here. Its own standard error is a few per cent at this size.
    measured = dot_product_variance([d_k], 400_000, seed=7).kurtosis[0]
    assert measured == pytest.approx(dot_product_kurtosis(d_k), rel=0.08)


# ----------------------------------------------------------------------------- the gradient that reaches a query

@pytest.mark.parametrize("divisor", ["sqrt", "none", "d_k"])
@pytest.mark.parametrize("d_k", [1, 8, 64])
def test_query_gradient_matches_torch_autograd(divisor, d_k):
    """|dq_i| from the package's backward against torch autograd on the same draws, in float64."""
    r, m, seed = 50, 6, 3
    ours = query_gradient([d_k], m, r, divisor=divisor, seed=seed).norms[0]  # one chunk: the draws below
    q, k, v, d_out = sample_attention_rows(r, m, d_k, seed=np.random.default_rng(seed))
    c = {"sqrt": math.sqrt(d_k), "none": 1.0, "d_k": float(d_k)}[divisor]
    q_t = torch.tensor(q, requires_grad=True)
    k_t, v_t = torch.from_numpy(k), torch.from_numpy(v)
    a = torch.softmax(torch.einsum("rf,rjf->rj", q_t, k_t) / c, dim=-1)  # (r, m)
    out = torch.einsum("rj,rjf->rf", a, v_t)  # (r, d_v)
    (out * torch.from_numpy(d_out)).sum().backward()  # L = Σ O ⊙ dO
    expected = q_t.grad.norm(dim=-1).numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-300)


def test_query_gradient_divisors_agree_at_width_one():
    # with d_k = 1 every divisor is 1: the same draws must give the same numbers
    a, b = (query_gradient([1], 8, 30, divisor=d, seed=2).norms for d in ("sqrt", "none"))
    same_but_for_rounding(a, b)


def test_incoming_gradient_has_unit_variance_at_every_width():
    # the model's promise: dA = dO Vᵀ has entries of variance 1 whatever d_k (Var[dO_f] = 1/d_k)
    for d_k in (2, 256):
        _, _, v, d_out = sample_attention_rows(4000, 8, d_k, seed=5)
        d_a = np.einsum("rf,rjf->rj", d_out, v)
        # Var[dO·v_j] = 1; the sample variance of 32000 correlated-by-row entries: a few per cent
        assert d_a.var() == pytest.approx(1.0, rel=0.06)


def test_scaled_gradient_is_width_independent_and_unscaled_is_not():
    widths = [16, 64, 256, 1024]
    scaled = query_gradient(widths, 32, 2000, divisor="sqrt", seed=0)
    unscaled = query_gradient(widths, 32, 2000, divisor="none", seed=0)
    # scaled: the median and the total stay within 10% of their value at d_k = 16
    assert np.all(np.abs(scaled.median / scaled.median[0] - 1) < 0.1)
    assert np.all(np.abs(scaled.rms / scaled.rms[0] - 1) < 0.1)
    # unscaled: the typical query loses its gradient, the total grows, and a tenth of the rows carry most of it
    assert unscaled.median[-1] < 0.05 * scaled.median[-1]
    assert np.all(np.diff(unscaled.rms) > 0) and unscaled.rms[-1] > 10 * scaled.rms[-1]
    assert unscaled.top_share[-1] > 0.9 > 0.5 > scaled.top_share[-1]


def test_dividing_by_d_k_gives_the_uniform_row_closed_form():
    """With the divisor d_k the row tends to uniform; then E|dq|² = (m - 1) / (m² d_k) exactly."""
    m, r = 32, 6000
    for d_k in (256, 1024):
        g = query_gradient([d_k], m, r, divisor="d_k", seed=4)
        predicted = math.sqrt((m - 1) / (m**2 * d_k))
        # the squares have a relative standard error of about √(2/r) ≈ 2%; the rows are not exactly uniform
        assert g.rms[0] == pytest.approx(predicted, rel=0.05)
