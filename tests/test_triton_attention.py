"""The Triton kernel of chapter 7's block-wise attention, run by Triton's interpreter on the CPU.

Oracles: the plain formula in float64 (numpy), ``M.blockwise.blockwise_attention`` (the numpy loop the kernel
mirrors), torch's ``scaled_dot_product_attention``, autograd of the plain formula in float64 and finite
differences (``torch.autograd.gradcheck``). Sizes are small (the interpreter runs each program in Python) and
chosen so that n and m are not multiples of the tiles, so that the last tile and the last key block are partial.

Tolerances. A float32 score sums d_k products, an output m weighted values: with unit round-off u32 = 6e-8,
inputs of size about 1 and scores below about 10 in size, errors stay below (d_k + m) · u32 · 10 ≈ 1e-4 in the
worst case we allow; we ask 2e-5, which is several times what we see (5e-7) and far below an error of
substance (a missing scale, a wrong mask, a block counted twice: each 1e-2 or more). Float16 inputs: the
kernel multiplies the weights by V in float16 (weights rounded to u16 / 2 = 4.9e-4 relative) and rounds the
output to float16, so the output is good to about 1e-3 of max |v|, and that is what we ask.
"""

import math
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons import triton_attention as T

TILES = (16, 16, 4, 1)  # the smallest tiles tl.dot allows: several tiles and key blocks at small n
F32_TOL = 2e-5
F16_TOL = 1e-3


def make(shape_q, shape_kv, dtype, seed, d_v=None):
    g = torch.Generator().manual_seed(seed)
    d_v = shape_kv[-1] if d_v is None else d_v
    q = torch.randn(shape_q, generator=g).to(dtype)
    k = torch.randn(shape_kv, generator=g).to(dtype)
    v = torch.randn(shape_kv[:-1] + (d_v,), generator=g).to(dtype)
    return q, k, v


def plain64(q, k, v, causal, scale=None):
    """The formula of chapter 1 in float64 numpy, on the very numbers the kernel got: (out, lse)."""
    q, k, v = (t.double().numpy() for t in (q, k, v))
    n, m = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)  # (..., n, m)
    if causal:
        s = np.where(M.causal_mask(n, m), s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)  # (..., n)
    return np.exp(s - lse[..., None]) @ v, lse


# ---------------------------------------------------------------- forward

CASES = [  # (B, h, n, m, d_k): n and m not multiples of the 16-wide tiles, n != m too
    (1, 2, 37, 37, 16),
    (2, 1, 45, 29, 32),
    (1, 2, 23, 50, 64),
    (1, 1, 33, 33, 128),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}h{}n{}m{}d{}".format(*c))
def test_forward_matches_the_plain_formula_blockwise_and_torch(case, dtype, causal):
    B, h, n, m, d_k = case
    q, k, v = make((B, h, n, d_k), (B, h, m, d_k), dtype, seed=n + m + d_k)
    out, lse = T.attention_forward(q, k, v, causal=causal, tiles=TILES)
    assert out.shape == (B, h, n, d_k) and out.dtype == dtype
    assert lse.shape == (B, h, n) and lse.dtype == torch.float32
    ref, ref_lse = plain64(q, k, v, causal)
    tol = F32_TOL if dtype == torch.float32 else F16_TOL
    scale = float(np.abs(ref).max())
    np.testing.assert_allclose(out.double().numpy(), ref, rtol=0, atol=tol * scale)
    # the log-sum-exp is float32 arithmetic in every case (scores summed in float32): float32's tolerance
    np.testing.assert_allclose(lse.double().numpy(), ref_lse, rtol=0, atol=F32_TOL * np.abs(ref_lse).max())
    blockwise = M.blockwise.blockwise_attention(*(t.double().numpy() for t in (q, k, v)), causal=causal,
                                                block_size=16, query_block=16)
    np.testing.assert_allclose(out.double().numpy(), blockwise, rtol=0, atol=tol * scale)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    np.testing.assert_allclose(out.double().numpy(), sdpa.numpy(), rtol=0, atol=tol * scale)


def test_forward_is_not_float64_and_would_notice_a_wrong_scale():
    # the comparison above can fail: another scale changes the output by far more than the tolerance
    q, k, v = make((1, 1, 37, 32), (1, 1, 37, 32), torch.float32, seed=1)
    out, _ = T.attention_forward(q, k, v, scale=1 / 5, tiles=TILES)
    ref, _ = plain64(q, k, v, False)
    assert np.abs(out.double().numpy() - ref).max() > 100 * F32_TOL
    np.testing.assert_allclose(out.double().numpy(), plain64(q, k, v, False, scale=1 / 5)[0], rtol=0, atol=F32_TOL)


def test_head_widths_can_differ_and_tiles_can_be_unequal():
    q, k, v = make((2, 19, 32), (2, 41, 32), torch.float32, seed=3, d_v=64)  # 3-D: (B·h, n, d)
    for tiles in ((16, 32, 4, 1), (32, 16, 4, 1)):
        for causal in (False, True):
            out, _ = T.attention_forward(q, k, v, causal=causal, tiles=tiles)
            assert out.shape == (2, 19, 64)
            np.testing.assert_allclose(out.numpy(), plain64(q, k, v, causal)[0], rtol=0, atol=F32_TOL * 4)


def test_default_tiles_on_the_cpu():
    q, k, v = make((1, 2, 70, 64), (1, 2, 70, 64), torch.float32, seed=4)
    out, _ = T.attention_forward(q, k, v, causal=True)  # default_tiles: 32 x 32 under the interpreter
    np.testing.assert_allclose(out.numpy(), plain64(q, k, v, True)[0], rtol=0, atol=F32_TOL * 4)


@pytest.mark.filterwarnings("ignore:All-NaN slice")  # numpy's word for the NaN rows the test expects
def test_causal_skips_the_key_blocks_above_the_diagonal_without_loading_them():
    # Keys and values from position 48 on are NaN. A query tile whose queries all come before 48 (tiles 0-2 of
    # 16 queries) never loads a block from 48 on, so its outputs stay finite and exact; the tiles from 48 on load
    # the NaN block on their diagonal and turn NaN, which shows that the poison reaches every tile that loads it.
    n, cut = 80, 48
    q, k, v = make((1, 2, n, 32), (1, 2, n, 32), torch.float32, seed=5)
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[..., cut:, :] = float("nan")
    v_bad[..., cut:, :] = float("nan")
    out, lse = T.attention_forward(q, k_bad, v_bad, causal=True, tiles=TILES)
    ref, ref_lse = plain64(q[..., :cut, :], k[..., :cut, :], v[..., :cut, :], True)
    np.testing.assert_allclose(out[..., :cut, :].numpy(), ref, rtol=0, atol=F32_TOL * 4)
    np.testing.assert_allclose(lse[..., :cut].numpy(), ref_lse, rtol=0, atol=F32_TOL * 4)
    assert torch.isnan(out[..., cut:, :]).all() and torch.isnan(lse[..., cut:]).all()
    # the same pass without the causal option reads every block, so every row turns NaN
    out_full, _ = T.attention_forward(q, k_bad, v_bad, causal=False, tiles=TILES)
    assert torch.isnan(out_full).all()


def test_causal_computes_the_tiles_chapter_7_counts():
    # the kernel's loop bounds, replayed in Python for every program: j0 runs to min(m, n, end of the tile)
    n, m, b_m, b_n = 70, 90, 32, 16
    counted = sum(math.ceil(min(m, n, i0 + b_m) / b_n) for i0 in range(0, n, b_m))
    assert counted == M.blockwise.tiles_computed(n, m, b_n, b_m, causal=True)
    # and the kernel skips the blocks it does not count: keys from 80 on (the first block past the last query,
    # n = 70) are NaN. A loaded block would spread its NaN to every row of the tile, masked or not (0 · NaN = NaN)
    q, k, v = make((1, 1, n, 16), (1, 1, m, 16), torch.float32, seed=6)
    skipped = math.ceil(n / b_n) * b_n
    k[..., skipped:, :], v[..., skipped:, :] = float("nan"), float("nan")
    out, _ = T.attention_forward(q, k, v, causal=True, tiles=(b_m, b_n, 4, 1))
    np.testing.assert_allclose(out.numpy(), plain64(q, k[..., :n, :], v[..., :n, :], True)[0], rtol=0,
                               atol=F32_TOL * 4)
    v[..., n:skipped, :] = float("nan")  # a NaN value in the last block read, where no query may look, does spread
    assert torch.isnan(T.attention_forward(q, k, v, causal=True, tiles=(b_m, b_n, 4, 1))[0][..., 64:, :]).all()


# ---------------------------------------------------------------- backward


def sdpa64_grads(q, k, v, d_out, causal):
    """Autograd of the plain formula in float64: the gradients with respect to q, k and v."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(d_out.double())
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("causal, n, m", [(False, 37, 21), (True, 37, 37), (True, 21, 37)])
def test_attention_backward_in_float64_equals_autograd_and_blockwise(causal, n, m):
    # driven by the exact log-sum-exp, the torch backward is exact to float64 round-off, with several tiles
    q, k, v = make((2, n, 16), (2, m, 16), torch.float64, seed=n + m, d_v=32)
    d_out = make((2, n, 32), (2, 1, 1), torch.float64, seed=7)[0]
    ref, lse = (torch.from_numpy(a) for a in plain64(q, k, v, causal))
    grads = T.attention_backward(q, k, v, ref, lse, d_out, causal=causal, block=16)
    for ours, theirs in zip(grads, sdpa64_grads(q, k, v, d_out, causal)):
        assert ours.dtype == torch.float64
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-12)
    numpy_grads = M.blockwise.blockwise_attention_backward(q.numpy(), k.numpy(), v.numpy(), ref.numpy(),
                                                           lse.numpy(), d_out.numpy(), causal=causal, block_size=16,
                                                           query_block=16)
    for ours, theirs in zip(grads, numpy_grads):
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_backward_passes_gradcheck(causal):
    # finite differences, through a float64 node whose backward is attention_backward
    class Node(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse = (torch.from_numpy(a) for a in plain64(q, k, v, causal))
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, d_out):
            return T.attention_backward(*ctx.saved_tensors, d_out, causal=causal, block=4)

    q, k, v = (t.requires_grad_() for t in make((6, 3), (6, 3), torch.float64, seed=8))
    assert torch.autograd.gradcheck(Node.apply, (q, k, v))


@pytest.mark.parametrize("dtype, causal, n, m", [(torch.float32, False, 37, 50), (torch.float32, True, 45, 45),
                                                 (torch.float16, True, 45, 30)])
def test_flash_attention_gradients_equal_autograd_of_the_plain_formula(dtype, causal, n, m):
    q, k, v = make((1, 2, n, 32), (1, 2, m, 32), dtype, seed=9)
    d_out = make((1, 2, n, 32), (1, 1, 1), dtype, seed=10)[0]
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = T.flash_attention(*leaves, causal=causal, tiles=TILES)
    out.backward(d_out)
    # float32: the saved lse and the output carry float32 errors; float16: the output and the gradients are
    # rounded to float16 and the forward's weights were float16 in p @ v, hence the float16 tolerance
    tol = F32_TOL * 4 if dtype == torch.float32 else 4 * F16_TOL
    for leaf, ref in zip(leaves, sdpa64_grads(q, k, v, d_out, causal)):
        assert leaf.grad.dtype == dtype and leaf.grad.shape == leaf.shape
        np.testing.assert_allclose(leaf.grad.double().numpy(), ref.numpy(), rtol=0, atol=tol * ref.abs().max())


# ---------------------------------------------------------------- bad input, and machines that cannot run it


def good(dtype=torch.float32, d=16):
    return make((1, 2, 20, d), (1, 2, 20, d), dtype, seed=0)


@pytest.mark.parametrize("change, error, words", [
    (lambda q, k, v: (q.double(), k.double(), v.double()), TypeError, "float64"),
    (lambda q, k, v: (q, k.half(), v), TypeError, "torch.float16"),
    (lambda q, k, v: (q.numpy(), k, v), TypeError, "ndarray"),
    (lambda q, k, v: (q, k[..., :5, :], v), ValueError, "(1, 2, 5, 16)"),
    (lambda q, k, v: (q, k[:, :1], v[:, :1]), ValueError, "does not broadcast"),
    (lambda q, k, v: (q[..., :8], k[..., :8], v), ValueError, "d_k = 8"),
    (lambda q, k, v: (torch.randn(1, 2, 20, 48), torch.randn(1, 2, 20, 48), v), ValueError, "d_k = 48"),
    (lambda q, k, v: (q, k, torch.randn(1, 2, 20, 256)), ValueError, "d_v = 256"),
    (lambda q, k, v: (q[..., :0, :], k, v), ValueError, "at least one query"),
    (lambda q, k, v: (q.to("meta"), k, v), ValueError, "meta"),
    (lambda q, k, v: (q[0, 0, 0], k, v), ValueError, "two axes"),
])
def test_bad_input_is_named(change, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        T.attention_forward(*change(*good()))


@pytest.mark.parametrize("kwargs, words", [
    ({"scale": 0.0}, "scale must be a positive"), ({"scale": "1"}, "scale must be a positive"),
    ({"tiles": (8, 16, 4, 1)}, "BLOCK_M must be a power of two"),
    ({"tiles": (16, 24, 4, 1)}, "BLOCK_N must be a power of two"),
    ({"tiles": (16, 16, 0, 1)}, "num_warps must be a positive"),
])
def test_bad_options_are_named(kwargs, words):
    with pytest.raises(ValueError, match=words):
        T.attention_forward(*good(), **kwargs)


def test_bfloat16_is_refused_under_the_interpreter():
    with pytest.raises(TypeError, match="11584"):
        T.attention_forward(*good(torch.bfloat16))


def test_without_triton_or_without_the_interpreter_a_call_says_so_in_one_sentence():
    # One fresh Python process (torch takes seconds to import), two machines: first one without Triton (as on
    # macOS or Windows, importing it fails), then one whose Triton compiles for a GPU (TRITON_INTERPRET=0) while
    # the tensors are on the CPU.
    code = ("import importlib, os, sys, torch\n"
            "sys.modules['triton'] = None\n"
            "from mha_lessons import _triton_runtime as R, triton_attention as T\n"
            "for attempt in range(2):\n"
            "    try:\n"
            "        T.flash_attention(*(torch.ones(1, 4, 16) for _ in range(3)))\n"
            "    except T.KernelUnavailable as e:\n"
            "        print('MESSAGE', e)\n"
            "    sys.modules.pop('triton', None)\n"
            "    os.environ['TRITON_INTERPRET'] = '0'\n"
            "    R = importlib.reload(R)\n"
            "    T = importlib.reload(T)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert result.returncode == 0, result.stderr
    first, second = [line for line in result.stdout.splitlines() if line.startswith("MESSAGE")]
    assert first.startswith("MESSAGE Triton is not installed: ")
    if (platform.system(), platform.machine()) == ("Linux", "x86_64"):  # where it could be installed: how
        assert "`pip install triton` adds it" in first
    else:
        assert "it ships for Linux on x86-64 only" in first
    assert second.startswith("MESSAGE this Python process compiles Triton kernels for a GPU")


# ---------------------------------------------------------------- the GPU benchmark, checked on the CPU


def test_the_gpu_benchmark_runs_its_whole_pipeline_on_the_cpu(tmp_path):
    # benchmarks/bench_gpu.py --smoke: correctness step, tuning, sweep and summary at tiny sizes, so that the
    # script is known to work before it runs, once, on a GPU
    import csv
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_gpu.py"), "--smoke", "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(root)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = list(csv.DictReader(open(tmp_path / "gpu_attention.csv")))
    assert {r["backend"] for r in rows} == {"triton", "flash", "efficient", "cudnn", "math"}
    for row in rows:
        if row["backend"] in ("triton", "math"):  # these run on the CPU: numbers, no error
            assert float(row["fwd_ms"]) > 0 and float(row["fwdbwd_ms"]) > 0 and not row["error"], row
        if row["backend"] == "efficient":  # a CUDA-only backend: its refusal is recorded, and the sweep went on
            assert row["error"] and not row["fwd_ms"], row
    summary = (tmp_path / "gpu_attention.md").read_text()
    assert "smoke run: not results" in summary and "WRONG" not in summary
    assert summary.count(" ok") == 4  # the smoke's correctness cases: float32 and float16, causal and not
    assert "CORRECTNESS" not in (tmp_path / "gpu_attention.log").read_text()
