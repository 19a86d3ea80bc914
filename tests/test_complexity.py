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


# ---------------------------------------------------------------- the backward pass: FLOPs against torch's counter

import math  # noqa: E402

import mha_lessons.grads as grads  # noqa: E402


def torch_layer_by_hand(x_q, x_k, x_v, weights, biases, h):
    """The layer of multihead.py written out in torch, float64, so that autograd differentiates every step."""
    B, n, d = x_q.shape
    m = x_k.shape[1]

    def split(t, rows):  # (B, rows, d) -> (B, h, rows, d_k)
        return t.view(B, rows, h, d // h).transpose(1, 2)

    bq, bk, bv, bo = biases if biases is not None else (0, 0, 0, 0)
    q, k, v = split(x_q @ weights[0] + bq, n), split(x_k @ weights[1] + bk, m), split(x_v @ weights[2] + bv, m)
    a = torch.softmax((q * (1 / math.sqrt(d // h))) @ k.transpose(-1, -2), dim=-1)  # (B, h, n, m)
    concat = (a @ v).transpose(1, 2).reshape(B, n, d)  # (B, h, n, d_k) -> (B, n, d_model)
    return concat @ weights[3] + bo


def torch_leaves(batch, n, m, d_model, bias, self_attention=False, seed=0):
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()

    x_q = leaf(batch, n, d_model)
    x_k, x_v = (x_q, x_q) if self_attention else (leaf(batch, m, d_model), leaf(batch, m, d_model))
    weights = [leaf(d_model, d_model) for _ in range(4)]
    biases = [leaf(d_model) for _ in range(4)] if bias else None
    return x_q, x_k, x_v, weights, biases


@pytest.mark.parametrize("batch, n, m, d_model, h", [(1, 4, 4, 8, 1), (2, 5, 7, 12, 3), (1, 16, 16, 64, 8),
                                                     (3, 9, 2, 32, 4), (1, 1, 33, 16, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_backward_matmul_flops_equal_torchs_flop_counter(batch, n, m, d_model, h, bias):
    x_q, x_k, x_v, weights, biases = torch_leaves(batch, n, m, d_model, bias)
    y = torch_layer_by_hand(x_q, x_k, x_v, weights, biases, h)
    with FlopCounterMode(display=False) as counter:
        y.backward(torch.randn_like(y))
    assert M.complexity.mha_backward_flops(n, d_model, h, m, batch=batch, bias=bias)["matmul"] \
        == counter.get_total_flops()


def test_backward_flops_of_torchs_own_layer():
    # torch.nn.MultiheadAttention with need_weights=True runs the products explicitly; its backward's
    # products are ours too (self-attention: the three paths into one input change no product).
    batch, n, d_model, h = 2, 24, 32, 4
    module = torch.nn.MultiheadAttention(d_model, h, batch_first=True, dtype=torch.float64)
    x = torch.randn(batch, n, d_model, dtype=torch.float64, requires_grad=True)
    y, _ = module(x, x, x, need_weights=True, average_attn_weights=False)
    with FlopCounterMode(display=False) as counter:
        y.backward(torch.randn_like(y))
    assert M.complexity.mha_backward_flops(n, d_model, h, batch=batch)["matmul"] == counter.get_total_flops()


def test_backward_products_are_twice_the_forward_products():
    for n, m, d_model, h in [(7, 7, 16, 4), (100, 300, 128, 4), (1024, 1024, 512, 8)]:
        forward = M.complexity.mha_flops(n, d_model, h, m)
        backward = M.complexity.mha_backward_flops(n, d_model, h, m)
        d = d_model
        assert backward["matmul"] == 2 * (8 * n * d * d if n == m else 4 * n * d * d + 4 * m * d * d) \
            + 8 * n * m * d == 2 * forward["matmul"]


def test_backward_flops_by_hand():
    # n = 2, m = 3, d_model = 4, h = 2, batch 1: each product 2 · rows · inner · columns
    back = M.complexity.mha_backward_flops(2, 4, 2, 3)
    assert (back["d_concat"], back["dw_o"], back["db_o"]) == (2 * 2 * 4 * 4, 2 * 4 * 2 * 4, 2 * 4)
    assert back["dv"] == 2 * (2 * 3 * 2 * 2)  # two heads of (3, 2) @ (2, 2)
    assert back["softmax"] == 4 * 2 * 2 * 3 and back["scale"] == 2 * 2 * 3
    assert back["dx_k"] == back["dw_v"] == 2 * 3 * 4 * 4
    assert back["db_qkv"] == (2 + 3 + 3) * 4
    assert back["total"] == sum(v for k, v in back.items() if k not in ("matmul", "total"))
    assert M.complexity.mha_backward_flops(2, 4, 2, 3, bias=False)["db_qkv"] == 0


# ---------------------------------------------------------------- the backward pass: what it keeps

def spy_on_the_backward(monkeypatch):
    """Record every forward array that the backward formulas of grads.py read (not the gradients, not the weights
    of the layer): the x of each projection's backward, q, k and v in sdpa_backward, the weights in
    softmax_backward."""
    read = []
    project, sdpa, softmax_back = grads._project_backward, grads.sdpa_backward, grads.softmax_backward

    def project_spy(x, w, dy, has_bias):
        read.append(x)
        return project(x, w, dy, has_bias)

    def sdpa_spy(q, k, v, d_out, mask=None, bias=None, **options):
        read.extend((q, k, v))
        return sdpa(q, k, v, d_out, mask, bias, **options)

    def softmax_spy(weights, d_weights, axis=-1, **options):
        read.append(weights)
        return softmax_back(weights, d_weights, axis, **options)

    monkeypatch.setattr(grads, "_project_backward", project_spy)
    monkeypatch.setattr(grads, "sdpa_backward", sdpa_spy)
    monkeypatch.setattr(grads, "softmax_backward", softmax_spy)
    return read


def distinct_bytes(arrays):
    """Bytes of the distinct arrays among ``arrays`` (the same array read twice counts once)."""
    seen = {}
    for a in arrays:
        seen[(a.__array_interface__["data"][0], a.shape, a.strides)] = a.nbytes
    return sum(seen.values())


@pytest.mark.parametrize("self_attention", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_saved_bytes_are_the_arrays_the_backward_of_grads_reads(monkeypatch, self_attention, dtype):
    batch, n, d_model, h = 2, 6, 16, 4
    m = n if self_attention else 9
    rng = np.random.default_rng(0)
    params = M.init_params(d_model, h, dtype=dtype)
    x_q = rng.normal(size=(batch, n, d_model)).astype(dtype)
    x_k, x_v = (x_q, x_q) if self_attention else (rng.normal(size=(batch, m, d_model)).astype(dtype) for _ in "kv")
    read = spy_on_the_backward(monkeypatch)
    grads.mha_backward(x_q, x_k, x_v, params, np.ones((batch, n, d_model), dtype=dtype))
    saved = M.complexity.saved_for_backward_bytes(n, d_model, h, m, batch=batch, dtype=dtype,
                                                  self_attention=self_attention)
    assert len(read) == 8  # x_q, x_k, x_v, concat; q, k, v; the weights
    assert saved["total"] == distinct_bytes(read)
    weights = [a for a in read if a.shape == (batch, h, n, m)]
    assert len(weights) == 1 and saved["weights"] == weights[0].nbytes


def test_saved_bytes_are_what_torch_autograd_saves():
    # torch.autograd.graph.saved_tensors_hooks sees every tensor autograd keeps for the backward.
    batch, n, d_model, h = 2, 5, 12, 3
    x, _, _, weights, biases = torch_leaves(batch, n, n, d_model, bias=True, self_attention=True)
    parameters = {p.data_ptr() for p in weights + biases}
    storages = {}

    def keep(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in parameters:  # the layer's own weights are not the forward's arrays
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        torch_layer_by_hand(x, x, x, weights, biases, h)
    saved = M.complexity.saved_for_backward_bytes(n, d_model, h, batch=batch, dtype="float64", self_attention=True)
    assert sum(storages.values()) == saved["total"]


def test_recomputing_keeps_the_log_sum_exp_instead_of_the_weights():
    n, d_model, h = 64, 32, 4
    keep = M.complexity.saved_for_backward_bytes(n, d_model, h, batch=2)
    recompute = M.complexity.saved_for_backward_bytes(n, d_model, h, batch=2, recompute_weights=True)
    q = np.zeros((2, h, n, d_model // h), dtype=np.float32)
    _, lse = M.blockwise.blockwise_attention_with_lse(q, q, q)  # what the forward keeps instead
    assert (keep["lse"], recompute["weights"]) == (0, 0)
    assert recompute["lse"] == lse.nbytes
    assert keep["total"] - recompute["total"] == keep["weights"] - lse.nbytes


def test_saved_bytes_check_their_arguments():
    with pytest.raises(ValueError, match="m = 5 must equal n = 4"):
        M.complexity.saved_for_backward_bytes(4, 8, 2, 5, self_attention=True)
    with pytest.raises(ValueError, match="divisible"):
        M.complexity.saved_for_backward_bytes(4, 10, 3)
    with pytest.raises(ValueError, match="batch must be a positive integer, got 0"):
        M.complexity.mha_backward_flops(4, 8, 2, batch=0)


# ---------------------------------------------------------------- arithmetic intensity: the bytes each stage moves

class Traced(np.ndarray):
    """An array that adds up the bytes of the big arrays every numpy operation on it reads and writes."""

    log = None  # a list of (ufunc name, bytes of (B, h, n, m)-sized operands and results)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = [np.asarray(a) if isinstance(a, Traced) else a for a in inputs]
        outs = None if out is None else tuple(np.asarray(o) if isinstance(o, Traced) else o for o in out)
        result = getattr(ufunc, method)(*plain, **({"out": outs} if outs else {}), **kwargs)
        written = outs[0] if outs else result
        arrays = [a for a in plain if isinstance(a, np.ndarray)] + [written]
        Traced.log.append((ufunc.__name__, sum(a.nbytes for a in arrays if a.size == Traced.big)))
        return out[0] if out else result  # in place (x -= ...): x stays traced


def test_softmax_moves_the_bytes_the_intensity_count_says():
    batch, n, m, d_model, h = 2, 8, 12, 16, 4
    scores = np.random.default_rng(0).normal(size=(batch, h, n, m)).astype(np.float32)
    Traced.log, Traced.big = [], scores.size
    M.attention.softmax_inplace(scores.view(Traced), axis=-1)  # the package's in-place softmax, traced
    passes = [(name, moved) for name, moved in Traced.log if moved]
    assert [name for name, _ in passes] == ["maximum", "subtract", "exp", "add", "divide"]  # five passes
    big = sum(moved for _, moved in passes)
    stage = M.complexity.mha_intensity(n, d_model, h, m, batch=batch)["softmax"]
    assert stage["bytes"] == big + 4 * batch * h * n * 4  # the per-row maxima and sums, written and read once


def test_matrix_product_stages_move_their_operands_and_results():
    batch, n, m, d_model, h = 2, 6, 9, 16, 4
    rng = np.random.default_rng(1)
    params = M.init_params(d_model, h, dtype=np.float32)
    x_q = rng.normal(size=(batch, n, d_model)).astype(np.float32)
    x_kv = rng.normal(size=(batch, m, d_model)).astype(np.float32)
    q = M.split_heads(x_q @ params.w_q, h)  # (B, h, n, d_k)
    k, v = (M.split_heads(x_kv @ w, h) for w in (params.w_k, params.w_v))
    scores = q @ np.swapaxes(k, -1, -2)  # (B, h, n, m)
    out = scores @ v  # (B, h, n, d_k)
    concat = M.combine_heads(out)
    y = concat @ params.w_o
    stages = M.complexity.mha_intensity(n, d_model, h, m, batch=batch)
    assert stages["q_projection"]["bytes"] == x_q.nbytes + params.w_q.nbytes + q.nbytes
    assert stages["k_projection"]["bytes"] == x_kv.nbytes + params.w_k.nbytes + k.nbytes
    assert stages["scores"]["bytes"] == q.nbytes + k.nbytes + scores.nbytes
    assert stages["weighted_sum"]["bytes"] == scores.nbytes + v.nbytes + out.nbytes
    assert stages["combine_heads"]["bytes"] == out.nbytes + concat.nbytes
    assert stages["output_projection"]["bytes"] == concat.nbytes + params.w_o.nbytes + y.nbytes
    flops = M.complexity.mha_flops(n, d_model, h, m, batch=batch)
    for name, stage in stages.items():
        assert stage["flops"] == flops.get(name, 0)
        assert stage["intensity"] == stage["flops"] / stage["bytes"]


def test_products_have_high_intensity_and_element_wise_passes_low():
    stages = M.complexity.mha_intensity(1024, 512, 8)
    d, d_k, n = 512, 64, 1024
    assert stages["q_projection"]["intensity"] == pytest.approx(2 * n * d * d / (4 * (2 * n * d + d * d)))
    assert stages["scores"]["intensity"] == pytest.approx(2 * n * n * d / (4 * (2 * n * d + 8 * n * n)))
    assert stages["scores"]["intensity"] < d_k / 2  # at most d_k / 2 FLOPs per float32 number written
    assert max(stages[s]["intensity"] for s in ("scale", "softmax", "bias", "combine_heads")) < 1
    assert stages["softmax"]["intensity"] == pytest.approx(5 / 32, rel=1e-3)  # 5 FLOPs per 8 numbers moved
    assert M.complexity.mha_intensity(1024, 512, 8, dtype="float64")["scale"]["intensity"] == 1 / 16


def test_torchs_fused_layer_keeps_the_log_sum_exp_instead_of_the_weights():
    # With need_weights=False torch's CPU layer runs a fused attention kernel whose backward recomputes the
    # weights: it keeps x, the packed q, k, v, a (B, h, n) log-sum-exp and the output, which is the concatenated
    # heads (the same storage). If torch ever picks another kernel here, this test says so.
    batch, n, d_model, h = 2, 5, 12, 3
    module = torch.nn.MultiheadAttention(d_model, h, batch_first=True, dtype=torch.float64)
    parameters = {p.data_ptr() for p in module.parameters()}
    x = torch.randn(batch, n, d_model, dtype=torch.float64, requires_grad=True)
    storages, shapes = {}, []

    def keep(t):
        if t.untyped_storage().data_ptr() not in parameters:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        module(x, x, x, need_weights=False)
    assert (batch, h, n) in shapes and (batch, h, n, n) not in shapes
    saved = M.complexity.saved_for_backward_bytes(n, d_model, h, batch=batch, dtype="float64", self_attention=True,
                                                  recompute_weights=True)
    assert sum(storages.values()) == saved["total"]


# ---------------------------------------------------------------- chapter 4: the crossover and what a kernel moves

def test_ffn_flops_equal_torchs_counter_on_a_feed_forward_block():
    d_model, d_ff, batch, n = 12, 40, 3, 7
    block = torch.nn.Sequential(torch.nn.Linear(d_model, d_ff), torch.nn.GELU(), torch.nn.Linear(d_ff, d_model))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        block(torch.randn(batch, n, d_model))
    assert M.complexity.ffn_flops(n, d_model, d_ff, batch=batch) == counter.get_total_flops()


@pytest.mark.parametrize("d_model, h, d_ff", [(8, 2, 0), (8, 2, 32), (64, 8, 256), (512, 8, 2048), (96, 12, 200)])
def test_crossover_is_the_closed_form(d_model, h, d_ff):
    # 4 n² d = n (8 d² + 4 d d_ff)  =>  n = 2 d + d_ff; a causal kernel does 2 n² d  =>  n = 2 (2 d + d_ff)
    assert M.complexity.crossover_length(d_model, h, d_ff=d_ff) == 2 * d_model + d_ff
    assert M.complexity.crossover_length(d_model, h, d_ff=d_ff, causal=True) == 2 * (2 * d_model + d_ff)


def test_at_the_crossover_torchs_own_modules_do_as_many_quadratic_flops_as_linear_ones():
    d_model, h, d_ff = 8, 2, 32
    n = int(M.complexity.crossover_length(d_model, h, d_ff=d_ff))
    x = torch.randn(1, n, d_model)
    attention = torch.nn.MultiheadAttention(d_model, h, batch_first=True)
    ffn = torch.nn.Sequential(torch.nn.Linear(d_model, d_ff), torch.nn.ReLU(), torch.nn.Linear(d_ff, d_model))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        attention(x, x, x, need_weights=True, average_attn_weights=False)
        ffn(x)
    by_op = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    quadratic = by_op["aten.bmm"]                                  # the scores and the weighted sum, per head
    assert quadratic * 2 == counter.get_total_flops()              # equal to everything else: the projections, the FFN


@pytest.mark.parametrize("batch, h, n, m, d_k", [(1, 1, 4, 4, 8), (2, 3, 5, 7, 4), (1, 2, 16, 9, 64)])
def test_attention_core_flops_equal_torchs_counter_on_the_unfused_path(batch, h, n, m, d_k):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = torch.randn(batch, h, n, d_k), torch.randn(batch, h, m, d_k), torch.randn(batch, h, m, d_k)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for fused in (True, False):
        traffic = M.complexity.attention_core_traffic(n, d_k, m=m, batch=batch, num_heads=h, fused=fused)
        assert traffic["flops"] == counter.get_total_flops()
        assert M.complexity.attention_core_traffic(n, d_k, m=m, batch=batch, num_heads=h, fused=fused,
                                                   causal=True)["flops"] * 2 == traffic["flops"]


def test_attention_core_bytes_written_out_by_hand():
    # B = 2, h = 3, n = 5, m = 7, d_k = 4, bf16 in and out: q and o 2·(2·3·5·4) = 240 numbers, k and v
    # 2·(2·3·7·4) = 336: 576 numbers, 1152 bytes. Unfused, float32 scores: 4 · 2·3·5·7 = 840 numbers, 3360 bytes more.
    fused = M.complexity.attention_core_traffic(5, 4, m=7, batch=2, num_heads=3, fused=True)
    unfused = M.complexity.attention_core_traffic(5, 4, m=7, batch=2, num_heads=3, fused=False)
    assert fused["bytes"] == 1152 and unfused["bytes"] == 1152 + 3360
    assert fused["flops"] == 4 * 2 * 3 * 5 * 7 * 4 == unfused["flops"]
    assert fused["intensity"] == fused["flops"] / 1152
    long = M.complexity.attention_core_traffic(1 << 14, 64, fused=True)   # bf16: n / 2 FLOPs per byte when m = n
    assert long["intensity"] == (1 << 14) / 2


def test_pytorchs_unfused_path_keeps_bf16_scores_in_float32():
    # what score_bytes=4 stands for: the math path's product q kᵀ, on bf16 inputs, writes float32 scores
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils._python_dispatch import TorchDispatchMode

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.outputs = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ == "bmm":
                self.outputs.append(out)
            return out

    q = torch.randn(1, 2, 6, 8, dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.MATH), Products() as seen, torch.no_grad():
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    scores = seen.outputs[0]
    assert scores.shape[-2:] == (6, 6) and scores.dtype == torch.float32 and scores.element_size() == 4


@pytest.mark.parametrize("call, words", [
    (lambda: M.complexity.crossover_length(512, 8, d_ff=-1), "d_ff must be an integer of at least 0, got -1"),
    (lambda: M.complexity.ffn_flops(4, 8, 0), "d_ff must be a positive integer, got 0"),
    (lambda: M.complexity.attention_core_traffic(0, 64, fused=True), "n must be a positive integer, got 0"),
    (lambda: M.complexity.attention_core_traffic(8, 64, fused=False, score_bytes=2.5),
     "score_bytes must be a positive integer, got 2.5"),
])
def test_crossover_and_traffic_reject_bad_sizes(call, words):
    with pytest.raises(ValueError, match=words):
        call()
