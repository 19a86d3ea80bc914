"""Parameter counts against PyTorch's own modules."""

import pytest
import torch

import mha_lessons as M


@pytest.mark.parametrize("d_model, h", [(8, 1), (8, 2), (64, 8), (512, 8), (768, 12), (96, 96)])
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_matches_torch(d_model, h, bias):
    module = torch.nn.MultiheadAttention(d_model, h, bias=bias, device="meta")  # meta: shapes only, no memory
    expected = sum(p.numel() for p in module.parameters())
    assert M.complexity.param_count(d_model, h, bias=bias) == expected


def test_param_count_matches_our_params():
    params = M.init_params(48, 6, bias=True)
    assert M.complexity.param_count(48, 6) == sum(a.size for a in params.arrays().values())


def test_param_count_rejects_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="d_model = 10 is not divisible by num_heads = 4"):
        M.complexity.param_count(10, 4)


# ---------------------------------------------------------------- FLOPs against torch's counter

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import numpy as np  # noqa: E402


def torch_flops(module, q, k, v, **kwargs):
    with FlopCounterMode(display=False) as counter:
        with torch.no_grad():
            module(q, k, v, **kwargs)
    return counter.get_total_flops()


@pytest.mark.parametrize("batch, n, m, d_model, h", [(1, 4, 4, 8, 1), (2, 5, 7, 12, 3), (1, 16, 16, 64, 8),
                                                     (3, 9, 2, 32, 4), (1, 1, 33, 16, 16)])
def test_matmul_flops_equal_torchs_flop_counter(batch, n, m, d_model, h):
    module = torch.nn.MultiheadAttention(d_model, h, batch_first=True)
    q, k, v = torch.randn(batch, n, d_model), torch.randn(batch, m, d_model), torch.randn(batch, m, d_model)
    counted = torch_flops(module, q, k, v, need_weights=True, average_attn_weights=False)
    assert M.complexity.mha_flops(n, d_model, h, m, batch=batch)["matmul"] == counted


def test_fused_kernel_is_invisible_to_the_counter():
    # With need_weights=False torch's CPU path runs a fused attention kernel that FlopCounterMode
    # does not count: only the four projections remain.
    n, d_model, h = 16, 32, 4
    module = torch.nn.MultiheadAttention(d_model, h, batch_first=True)
    x = torch.randn(1, n, d_model)
    flops = M.complexity.mha_flops(n, d_model, h)
    projections = sum(flops[s] for s in ("q_projection", "k_projection", "v_projection", "output_projection"))
    assert torch_flops(module, x, x, x, need_weights=False) == projections < flops["matmul"]


def test_attention_stages_match_the_counter_for_the_products_alone():
    batch, h, n, m, d_k = 2, 3, 5, 7, 4
    q, k = torch.randn(batch, h, n, d_k), torch.randn(batch, h, m, d_k)
    with FlopCounterMode(display=False) as counter:
        torch.matmul(q, k.transpose(-1, -2))
    assert M.complexity.mha_flops(n, h * d_k, h, m, batch=batch)["scores"] == counter.get_total_flops()


def test_heads_change_no_flop_count_of_the_products():
    counts = {h: M.complexity.mha_flops(256, 512, h)["matmul"] for h in (1, 2, 4, 8, 16)}
    assert len(set(counts.values())) == 1, counts


def test_total_is_the_sum_of_the_stages():
    flops = M.complexity.mha_flops(8, 16, 4, 3, batch=2)
    stages = {k: v for k, v in flops.items() if k not in ("matmul", "total")}
    assert flops["total"] == sum(stages.values())


# ---------------------------------------------------------------- memory against the arrays themselves

def test_memory_entries_are_the_sizes_of_the_real_arrays():
    batch, n, m, d_model, h = 2, 6, 9, 16, 4
    params = M.init_params(d_model, h, dtype=np.float32)
    rng = np.random.default_rng(0)
    x_q = rng.normal(size=(batch, n, d_model)).astype(np.float32)
    x_kv = rng.normal(size=(batch, m, d_model)).astype(np.float32)
    y, weights = M.multihead_attention(x_q, x_kv, x_kv, params)
    memory = M.complexity.mha_memory(n, d_model, h, m, batch=batch, dtype=np.float32)
    assert memory["weights"] == weights.nbytes
    assert memory["y"] == y.nbytes
    assert memory["parameters"] == sum(a.nbytes for a in params.arrays().values())


def test_peak_memory_is_what_the_formula_says():
    # numpy reports its allocations to tracemalloc. The layer's peak must hold the (B, h, n, m) weights
    # and cannot exceed every activation the formula lists plus small bookkeeping.
    batch, n, d_model, h = 1, 512, 64, 8
    params = M.init_params(d_model, h, dtype=np.float32)
    x = np.random.default_rng(1).normal(size=(batch, n, d_model)).astype(np.float32)
    memory = M.complexity.mha_memory(n, d_model, h, batch=batch)
    peak = M.complexity.measure_peak_bytes(lambda: M.multihead_attention(x, x, x, params))
    assert memory["weights"] <= peak <= memory["activations"] * 1.05 + 64 * 1024


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        M.complexity.mha_flops(0, 8, 2)
    with pytest.raises(ValueError, match="divisible"):
        M.complexity.mha_memory(4, 10, 3)


def test_loglog_fit_without_known_errors_against_numpys_polyfit(rng):
    # How the cost chapter fits the exponent of measured times, whose noise is unknown.
    x = np.array([64, 128, 256, 512, 1024, 2048])
    y = 1e-9 * x ** 2.1 * np.exp(rng.normal(scale=0.05, size=x.size))
    slope, _, se = M.scaling.fit_loglog_slope(x, y)
    coef, residual, *_ = np.polyfit(np.log(x), np.log(y), 1, full=True)
    expected_se = np.sqrt(residual[0] / (x.size - 2) / np.sum((np.log(x) - np.log(x).mean()) ** 2))
    assert slope == pytest.approx(coef[0], rel=1e-12)
    assert se == pytest.approx(expected_se, rel=1e-10)
    assert abs(slope - 2.1) < 5 * se + 1e-12


def test_loglog_fit_of_two_points_has_no_error_estimate():
    slope, _, se = M.scaling.fit_loglog_slope([1.0, 4.0], [2.0, 32.0])
    assert slope == pytest.approx(2.0) and np.isnan(se)
