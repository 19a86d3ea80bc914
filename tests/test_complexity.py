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


# ---------------------------------------------------------------- head widths chosen apart from d_model / h

def torch_layer_with_head_widths(d_model, h, d_k, d_v, bias):
    """The four projections of a layer whose heads are d_k (queries, keys) and d_v (values) wide, in torch."""
    return torch.nn.ModuleDict({
        "q": torch.nn.Linear(d_model, h * d_k, bias=bias, dtype=torch.float64),
        "k": torch.nn.Linear(d_model, h * d_k, bias=bias, dtype=torch.float64),
        "v": torch.nn.Linear(d_model, h * d_v, bias=bias, dtype=torch.float64),
        "o": torch.nn.Linear(h * d_v, d_model, bias=bias, dtype=torch.float64),
    })


@pytest.mark.parametrize("d_model, h, d_k, d_v", [(8, 2, 4, 4), (8, 2, 3, 5), (10, 4, 3, 7), (512, 8, 32, 128),
                                                   (512, 16, 64, 64), (12, 1, 1, 30)])
@pytest.mark.parametrize("bias", [True, False])
def test_param_count_with_any_head_widths_equals_a_torch_layer_of_those_shapes(d_model, h, d_k, d_v, bias):
    layer = torch_layer_with_head_widths(d_model, h, d_k, d_v, bias)
    # The shapes make a working layer: h heads of d_k-wide scores and d_v-wide values, back to d_model.
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    q, k, v = (layer[name](x).view(2, 5, h, -1).transpose(1, 2) for name in "qkv")  # (B, h, n, d_k or d_v)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, h, n, d_v)
    assert layer["o"](o.transpose(1, 2).reshape(2, 5, h * d_v)).shape == x.shape
    expected = sum(p.numel() for p in layer.parameters())
    assert M.complexity.param_count(d_model, h, bias=bias, d_k=d_k, d_v=d_v) == expected


def test_param_count_by_hand():
    # d_model = 6, h = 3, d_k = 2, d_v = 5: W_Q, W_K are 6 x 6, W_V is 6 x 15, W_O is 15 x 6.
    assert M.complexity.param_count(6, 3, d_k=2, d_v=5, bias=False) == 36 + 36 + 90 + 90
    assert M.complexity.param_count(6, 3, d_k=2, d_v=5) == 36 + 36 + 90 + 90 + (6 + 6 + 15 + 6)


@pytest.mark.parametrize("d_model, h", [(8, 1), (64, 8), (768, 12)])
def test_default_head_widths_give_four_square_matrices(d_model, h):
    d = d_model
    assert M.complexity.param_count(d_model, h, d_k=d // h, d_v=d // h) == 4 * d * d + 4 * d
    assert M.complexity.param_count(d_model, h, d_k=d // h) == M.complexity.param_count(d_model, h)


def test_fixed_head_widths_make_the_count_grow_with_the_heads():
    counts = [M.complexity.param_count(512, h, d_k=64, d_v=64, bias=False) for h in (1, 2, 4, 8)]
    assert counts == [4 * 512 * 64 * h for h in (1, 2, 4, 8)]


def test_explicit_widths_do_not_need_heads_that_divide_d_model():
    assert M.complexity.param_count(10, 4, d_k=3, d_v=3, bias=False) == 4 * 10 * 12


@pytest.mark.parametrize("widths, words", [
    (dict(d_k=0), "d_k must be a positive integer, got 0"),
    (dict(d_v=-2), "d_v must be a positive integer, got -2"),
    (dict(d_k=2.5, d_v=4), "d_k must be a positive integer, got 2.5"),
    (dict(d_k=4, d_v=True), "d_v must be a positive integer, got True"),
    (dict(d_k=4), None),  # d_v defaults to d_model / h = 10 / 4: not whole
])
def test_bad_head_widths_raise_value_error(widths, words):
    d_model = 10 if words is None else 8
    with pytest.raises(ValueError, match=words or "d_model = 10 is not divisible by num_heads = 4"):
        M.complexity.param_count(d_model, 4, **widths)


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


def test_total_against_the_closed_form_written_out_by_hand():
    # B = 2, n = 8, m = 3, d_model = 16, h = 4 (d_k = 4), with biases, computed independently of the code:
    # projections 2·B·d²·(n + 2m) + 2·B·n·d² = 2·2·256·14 + 2·2·8·256 = 14336 + 8192 = 22528
    # scores and weighted sum 2 · 2·B·n·m·d = 4·2·8·3·16 = 3072; scale B·n·d = 256
    # softmax 5·B·h·n·m = 5·2·4·8·3 = 960; biases B·d·(2n + 2m) = 2·16·22 = 704
    flops = M.complexity.mha_flops(8, 16, 4, 3, batch=2)
    assert flops["matmul"] == 22528 + 3072
    assert flops["total"] == 22528 + 3072 + 256 + 960 + 704


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
    slope, _, se = M.stats.fit_loglog_slope(x, y)
    coef, residual, *_ = np.polyfit(np.log(x), np.log(y), 1, full=True)
    expected_se = np.sqrt(residual[0] / (x.size - 2) / np.sum((np.log(x) - np.log(x).mean()) ** 2))
    assert slope == pytest.approx(coef[0], rel=1e-12)
    assert se == pytest.approx(expected_se, rel=1e-10)
    assert abs(slope - 2.1) < 5 * se + 1e-12


def test_loglog_fit_of_two_points_has_no_error_estimate():
    slope, _, se = M.stats.fit_loglog_slope([1.0, 4.0], [2.0, 32.0])
    assert slope == pytest.approx(2.0) and np.isnan(se)


# ---------------------------------------------------------------- element-wise work, counted from what the code touches

class Tally(np.ndarray):
    """An array that records, for every ufunc applied to it, the number of elements the ufunc reads.

    torch's counter sees only matrix products; this is the oracle for the element-wise stages.
    """

    calls = []

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = [a.view(np.ndarray) if isinstance(a, Tally) else a for a in inputs]
        if out is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, Tally) else o for o in out)
        Tally.calls.append((ufunc.__name__, method, max(np.size(a) for a in plain)))
        result = getattr(ufunc, method)(*plain, **kwargs)
        return out[0] if out is not None else result


@pytest.mark.parametrize("h, n, m", [(1, 3, 5), (4, 7, 2), (2, 16, 16)])
def test_softmax_stage_counts_the_passes_the_code_makes_over_the_scores(rng, h, n, m):
    scores = rng.normal(size=(h, n, m)).view(Tally)  # one sequence: (h, n, m) scores
    Tally.calls.clear()
    M.attention.softmax_inplace(scores, axis=-1)
    passes = [(name, method) for name, method, size in Tally.calls if size == h * n * m]  # full-size work only
    assert sorted(passes) == sorted([("maximum", "reduce"), ("subtract", "__call__"), ("exp", "__call__"),
                                     ("add", "reduce"), ("divide", "__call__")]), passes
    assert M.complexity.mha_flops(n, 4 * h, h, m)["softmax"] == len(passes) * h * n * m
