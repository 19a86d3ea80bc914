"""The online softmax and block-wise attention, against the package's plain versions and against torch.

Oracles: ``M.scaled_dot_product_attention`` and ``M.softmax`` (which build the whole (n, m) array),
``torch.nn.functional.scaled_dot_product_attention``, ``torch.softmax`` and ``torch.logsumexp`` in
float64, and direct formulas (the maximum and the sum of a prefix of a row). The block-wise backward is checked
against torch autograd in float64 and against ``grads.sdpa_backward``. Peak memory is measured
with tracemalloc, which sees numpy's allocations. The exercise checkers of chapter 7 are tested at the
end, with wrong answers written the way a learner would write them.
"""

import math

import numpy as np
import pytest
import torch

import mha_lessons as M
from mha_lessons.blockwise import blockwise_attention, blockwise_attention_with_lse, online_softmax, online_softmax_steps
from common import same_but_for_rounding

# float64: the block-wise pass adds the same terms as the plain one in another order and multiplies each
# by at most a few rescale factors, so the two agree to a few hundred units of round-off (u = 2.2e-16).
RTOL, ATOL = 1e-12, 1e-14
# No nan from -inf - (-inf), no overflow, no log(0) outside the documented -inf of the log-sum-exp.
# (Underflow of exp to 0 is the correct weight of a far smaller score and stays allowed.)
STRICT = dict(divide="raise", over="raise", invalid="raise")


def torch_sdpa(q, k, v, mask=None, is_causal=False):
    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v)]
    attn_mask = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    return torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=attn_mask, is_causal=is_causal).numpy()


def random_inputs(rng, batch_q, batch_k, batch_v, n, m, d_k, d_v):
    return (rng.normal(size=batch_q + (n, d_k)), rng.normal(size=batch_k + (m, d_k)),
            rng.normal(size=batch_v + (m, d_v)))


# ---------------------------------------------------------------- equal to the plain version

SHAPES = [  # (batch of q, of k, of v, n, m, d_k, d_v)
    ((), (), (), 9, 9, 4, 4),
    ((), (), (), 5, 13, 3, 6),  # n < m, d_k != d_v
    ((2,), (2,), (2,), 12, 7, 5, 2),  # n > m
    ((2, 3), (1, 3), (2, 1), 6, 11, 4, 3),  # batch axes that broadcast
    ((3,), (), (), 8, 10, 2, 5),  # keys and values shared by the batch
    ((), (), (2,), 4, 9, 3, 3),  # only v has a batch axis
]


def block_sizes(m):
    return sorted({1, 3, 7, m, m + 5})  # 3 and 7 do not divide most m; m + 5 is one short block


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"n{s[3]}_m{s[4]}_batch{s[0]}{s[1]}{s[2]}")
def test_equals_the_plain_version_for_every_block_size(rng, shape):
    *batches, n, m, d_k, d_v = shape
    q, k, v = random_inputs(rng, *batches, n, m, d_k, d_v)
    expected, _ = M.scaled_dot_product_attention(q, k, v)
    for b in block_sizes(m):
        for t in (None, 1, 4):
            out = blockwise_attention(q, k, v, block_size=b, query_block=t)
            assert out.shape == expected.shape
            np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL, err_msg=f"block_size={b}, query_block={t}")


@pytest.mark.parametrize("shape", SHAPES[:4], ids=lambda s: f"n{s[3]}_m{s[4]}_batch{s[0]}{s[1]}{s[2]}")
def test_equals_the_plain_version_with_masks(rng, shape):
    *batches, n, m, d_k, d_v = shape
    q, k, v = random_inputs(rng, *batches, n, m, d_k, d_v)
    batch = np.broadcast_shapes(*batches)
    masks = {
        "random": rng.random(batch + (n, m)) < 0.6,
        "causal": M.causal_mask(n, m),
        "keys only (m,)": rng.random(m) < 0.7,
        "per query (n, 1)": rng.random((n, 1)) < 0.7,  # some queries see nothing at all
        "padding (..., 1, m)": np.arange(m) < rng.integers(0, m + 1, size=batch + (1, 1)),
    }
    for name, mask in masks.items():
        expected, _ = M.scaled_dot_product_attention(q, k, v, mask)
        for b in block_sizes(m):
            for t in (None, 3):
                out = blockwise_attention(q, k, v, mask, block_size=b, query_block=t)
                np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL,
                                           err_msg=f"{name} mask, block_size={b}, query_block={t}")


def test_agrees_with_torch_in_float64(rng):
    q, k, v = random_inputs(rng, (2, 3), (2, 3), (2, 3), 10, 14, 8, 5)
    mask = rng.random((2, 3, 10, 14)) < 0.7
    mask[..., 0] = True  # torch gives nan for a query that sees nothing; that case is tested below
    for b in (1, 5, 14, 64):
        np.testing.assert_allclose(blockwise_attention(q, k, v, mask, block_size=b), torch_sdpa(q, k, v, mask),
                                   rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n, m", [(9, 9), (6, 11), (11, 6)])
def test_causal_flag_agrees_with_torch_is_causal(rng, n, m):
    q, k, v = random_inputs(rng, (2,), (2,), (2,), n, m, 4, 3)
    with np.errstate(**STRICT):  # the skipped and the fully masked blocks make no nan and no warning
        outs = [blockwise_attention(q, k, v, causal=True, block_size=b, query_block=t)
                for b in block_sizes(m) for t in (None, 1, 2, 4)]
    expected = torch_sdpa(q, k, v, is_causal=True)  # torch's is_causal: key j visible to query i iff j <= i
    for out in outs:
        np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    # the flag combines with a mask as `&`
    mask = rng.random((n, m)) < 0.7
    both, _ = M.scaled_dot_product_attention(q, k, v, mask & M.causal_mask(n, m))
    np.testing.assert_allclose(blockwise_attention(q, k, v, mask, causal=True, block_size=3, query_block=2), both,
                               rtol=RTOL, atol=ATOL)


def test_causal_pass_never_reads_blocks_in_the_future_of_a_query_tile(rng):
    # In the plain version NaN in a value reaches every output (0 · NaN = NaN). The block-wise causal pass
    # never reads a key block that lies after every query of a tile, so those queries stay finite.
    n, b = 12, 4
    q, k, v = random_inputs(rng, (), (), (), n, n, 3, 2)
    v[-1, 0] = np.nan  # the last key, in the last block
    out = blockwise_attention(q, k, v, causal=True, block_size=b, query_block=b)
    assert np.all(np.isfinite(out[: n - b])), "a query tile read a key block in its future"
    assert np.all(np.isnan(out[n - b:, 0]))  # the last tile does read it
    assert np.all(np.isnan(M.scaled_dot_product_attention(q, k, v, M.causal_mask(n))[0][:, 0]))


def test_fully_masked_rows_and_blocks_give_zeros_without_nan(rng):
    n, m = 6, 10
    q, k, v = random_inputs(rng, (), (), (), n, m, 4, 3)
    mask = np.ones((n, m), dtype=bool)
    mask[0] = False  # query 0 sees nothing
    mask[1, :7] = False  # query 1 sees only keys 7..9: its first blocks are entirely masked
    mask[2, 3:] = False  # query 2 sees only keys 0..2: its later blocks are entirely masked
    expected, _ = M.scaled_dot_product_attention(q, k, v, mask)
    for b in block_sizes(m):
        with np.errstate(**STRICT):  # -inf - (-inf) would be an 'invalid' floating point error
            out, lse = blockwise_attention_with_lse(q, k, v, mask, block_size=b)
        np.testing.assert_array_equal(out[0], 0.0)
        assert lse[0] == -np.inf
        np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    nothing = np.zeros((n, m), dtype=bool)
    np.testing.assert_array_equal(blockwise_attention(q, k, v, nothing, block_size=3), 0.0)


def test_log_sum_exp_agrees_with_torch(rng):
    q, k, v = random_inputs(rng, (2,), (2,), (2,), 7, 9, 4, 3)
    mask = rng.random((2, 7, 9)) < 0.6
    mask[0, 3] = False
    scores = torch.from_numpy(q @ np.swapaxes(k, -1, -2) / math.sqrt(4))
    expected = torch.logsumexp(scores.masked_fill(~torch.from_numpy(mask), float("-inf")), dim=-1).numpy()
    for b in (1, 4, 9):
        out, lse = blockwise_attention_with_lse(q, k, v, mask, block_size=b)
        assert lse.shape == (2, 7) and lse[0, 3] == -np.inf
        np.testing.assert_allclose(lse, expected, rtol=RTOL, atol=ATOL)
        same_but_for_rounding(out, blockwise_attention(q, k, v, mask, block_size=b))


def test_nan_in_a_query_reaches_its_row_only(rng):
    q, k, v = random_inputs(rng, (), (), (), 5, 8, 3, 2)
    q[2, 1] = np.nan
    out = blockwise_attention(q, k, v, block_size=3)
    assert np.all(np.isnan(out[2])) and np.all(np.isfinite(np.delete(out, 2, axis=0)))


# ---------------------------------------------------------------- floating types

def test_float32_stays_float32_and_is_accurate_to_float32_round_off(rng):
    n, m, d_k, d_v, b = 16, 50, 8, 4, 7
    q, k, v = (a.astype(np.float32) for a in random_inputs(rng, (2,), (2,), (2,), n, m, d_k, d_v))
    out = blockwise_attention(q, k, v, block_size=b)
    assert out.dtype == np.float32
    assert blockwise_attention(q, k, v.astype(np.float64), block_size=b).dtype == np.float64  # numpy's common type
    expected = torch_sdpa(*(a.astype(np.float64) for a in (q, k, v)))
    # As in test_dtypes.py: a score adds d_k rounded products, the output m weighted values, and each of the
    # ceil(m / b) blocks adds one more rounding to l and acc through its rescale factor.
    u = float(np.finfo(np.float32).eps)
    score = float(np.abs(q).max() * np.abs(k).max() * math.sqrt(d_k))  # bounds |q·k| / √d_k
    terms = d_k + m + 2 * math.ceil(m / b)
    np.testing.assert_allclose(out, expected, rtol=0, atol=4 * terms * u * (1 + score) * float(np.abs(v).max()))
    assert np.abs(out - expected).max() > 1e3 * np.finfo(np.float64).eps  # float32 arithmetic really was used


def test_float16_with_large_scores_stays_finite(rng):
    q, k, v = ((rng.normal(size=s) * 5).astype(np.float16) for s in ((4, 8), (6, 8), (6, 3)))  # scores ~ 50
    out = blockwise_attention(q, k, v, block_size=4)
    assert out.dtype == np.float16 and np.all(np.isfinite(out))


# ---------------------------------------------------------------- memory: never the (n, m) array

peak_bytes = M.complexity.measure_peak_bytes


@pytest.mark.parametrize("block_size, query_block, dtype",
                         [(64, None, np.float64), (128, None, np.float32), (256, 256, np.float64),
                          (128, 512, np.float32)])
def test_peak_memory_is_one_block_of_scores_not_the_whole_matrix(block_size, query_block, dtype):
    n = m = 2048
    d_k = d_v = 4
    itemsize = np.dtype(dtype).itemsize  # float32 blocks must stay float32: float64 ones would not fit
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=s).astype(dtype) for s in ((n, d_k), (m, d_k), (m, d_v)))
    t = n if query_block is None else query_block
    # What the pass must hold at once: one (t, b) block of scores; the scaled queries (n, d_k) and the
    # output (n, d_v) and log-sum-exp (n,); the running acc (t, d_v) and one block's contribution to it; and the
    # (t, 1) running maximum, sum and their temporaries (at most 10 of them, two for the log-sum-exp). tracemalloc
    # also counts Python's own small
    # objects, hence the slack, which is smaller than one block of scores: a second block would not fit.
    block = t * block_size * itemsize
    must_hold = block + (n * d_k + n * d_v + n + 2 * t * d_v + 10 * t) * itemsize
    slack = 64 * 1024
    assert slack < block
    assert must_hold + slack < n * m * itemsize / 4  # far below the plain version's weights (next test)
    blockwise = peak_bytes(lambda: blockwise_attention(q, k, v, block_size=block_size, query_block=query_block))
    assert blockwise <= must_hold + slack, (blockwise, must_hold)


def test_the_plain_version_holds_the_whole_matrix():
    # the other side of the comparison, and a check that tracemalloc sees numpy's arrays at all
    n = m = 2048
    q = np.random.default_rng(0).normal(size=(n, 4))
    assert peak_bytes(lambda: M.scaled_dot_product_attention(q, q, q)) >= n * m * q.itemsize


# ---------------------------------------------------------------- the backward pass, block by block
# Oracles: torch autograd through torch.nn.functional.scaled_dot_product_attention in float64, and the package's
# sdpa_backward (which builds the whole (n, m) weights). The identity it rests on is checked on its own first.

from mha_lessons.blockwise import blockwise_attention_backward  # noqa: E402
from mha_lessons.grads import sdpa_backward  # noqa: E402


def torch_sdpa_grads(q, k, v, d_out, mask=None, is_causal=False):
    t = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    attn_mask = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    out = torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=attn_mask, is_causal=is_causal)
    out.backward(torch.from_numpy(d_out))
    return [a.grad.numpy() for a in t]


def block_backward(q, k, v, d_out, mask=None, causal=False, **blocks):
    out, lse = blockwise_attention_with_lse(q, k, v, mask, causal=causal, **blocks)
    return blockwise_attention_backward(q, k, v, out, lse, d_out, mask, causal=causal, **blocks)


def test_rowsum_identity_of_the_softmax_backward(rng):
    # rowsum(dA ⊙ A) = rowsum(dO ⊙ O) for dA = dO Vᵀ and O = A V, with a mask and an empty row too
    q, k, v = random_inputs(rng, (2,), (2,), (2,), 6, 9, 4, 3)
    mask = rng.random((2, 6, 9)) < 0.6
    mask[1, 2] = False
    d_out = rng.normal(size=(2, 6, 3))
    out, a = M.scaled_dot_product_attention(q, k, v, mask)
    d_a = d_out @ np.swapaxes(v, -1, -2)
    np.testing.assert_allclose(np.sum(d_a * a, axis=-1), np.sum(d_out * out, axis=-1), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"n{s[3]}_m{s[4]}_batch{s[0]}{s[1]}{s[2]}")
def test_backward_equals_sdpa_backward_for_every_block_size(rng, shape):
    *batches, n, m, d_k, d_v = shape
    q, k, v = random_inputs(rng, *batches, n, m, d_k, d_v)
    batch = np.broadcast_shapes(*batches)
    d_out = rng.normal(size=batch + (n, d_v))
    expected = sdpa_backward(q, k, v, d_out)
    for b in block_sizes(m):
        for t in (None, 1, 4):
            got = block_backward(q, k, v, d_out, block_size=b, query_block=t)
            for name, mine, ref in zip(("dq", "dk", "dv"), got, expected):
                assert mine.shape == ref.shape
                np.testing.assert_allclose(mine, ref, rtol=RTOL, atol=ATOL, err_msg=f"{name}, b={b}, t={t}")


def test_backward_agrees_with_torch_autograd_in_float64(rng):
    q, k, v = random_inputs(rng, (2, 3), (2, 3), (2, 3), 10, 14, 8, 5)
    d_out = rng.normal(size=(2, 3, 10, 5))
    mask = rng.random((2, 3, 10, 14)) < 0.7
    mask[..., 0] = True  # torch gives nan for a query that sees nothing; sdpa_backward covers that case
    for m_ in (None, mask):
        expected = torch_sdpa_grads(q, k, v, d_out, m_)
        for b, t in ((1, None), (5, 3), (14, 4), (64, None)):
            for mine, ref in zip(block_backward(q, k, v, d_out, m_, block_size=b, query_block=t), expected):
                np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("n, m", [(9, 9), (6, 11), (11, 6)])
def test_causal_backward_agrees_with_torch_is_causal(rng, n, m):
    q, k, v = random_inputs(rng, (2,), (2,), (2,), n, m, 4, 3)
    d_out = rng.normal(size=(2, n, 3))
    expected = torch_sdpa_grads(q, k, v, d_out, is_causal=True)
    for b in block_sizes(m):
        for t in (None, 1, 4):
            with np.errstate(**STRICT):
                got = block_backward(q, k, v, d_out, causal=True, block_size=b, query_block=t)
            for mine, ref in zip(got, expected):
                np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-13)


def test_backward_with_masks_and_queries_that_see_nothing(rng):
    n, m = 7, 10
    q, k, v = random_inputs(rng, (2,), (2,), (2,), n, m, 4, 3)
    d_out = rng.normal(size=(2, n, 3))
    mask = rng.random((2, n, m)) < 0.5
    mask[0, 0] = False  # sees nothing
    mask[1, 1, :7] = False  # its first blocks are entirely masked
    mask[:, :, 9] = False  # key 9 is seen by no query: zero dk and dv
    expected = sdpa_backward(q, k, v, d_out, mask)
    for b in block_sizes(m):
        for t in (None, 2):
            with np.errstate(**STRICT):  # no nan from lse = -inf
                got = block_backward(q, k, v, d_out, mask, block_size=b, query_block=t)
            for mine, ref in zip(got, expected):
                np.testing.assert_allclose(mine, ref, rtol=RTOL, atol=ATOL)
            np.testing.assert_array_equal(got[0][0, 0], 0.0)
            np.testing.assert_array_equal(got[1][:, 9], 0.0)
            np.testing.assert_array_equal(got[2][:, 9], 0.0)


def test_backward_uses_the_saved_output_and_log_sum_exp(rng):
    # Not a recomputed forward: a wrong lse or a wrong output gives wrong gradients.
    q, k, v = random_inputs(rng, (), (), (), 5, 8, 3, 2)
    d_out = rng.normal(size=(5, 2))
    out, lse = blockwise_attention_with_lse(q, k, v, block_size=3)
    right = blockwise_attention_backward(q, k, v, out, lse, d_out, block_size=3)
    shifted = blockwise_attention_backward(q, k, v, out, lse + 0.5, d_out, block_size=3)  # weights e^-0.5 too small
    np.testing.assert_allclose(shifted[2], np.exp(-0.5) * right[2], rtol=1e-12)
    wrong_out = blockwise_attention_backward(q, k, v, out + 1.0, lse, d_out, block_size=3)
    assert not np.allclose(wrong_out[0], right[0])
    np.testing.assert_allclose(wrong_out[2], right[2], rtol=1e-12)  # dV = Pᵀ dO does not read the output


def test_backward_keeps_float32(rng):
    q, k, v = (a.astype(np.float32) for a in random_inputs(rng, (2,), (2,), (2,), 16, 30, 8, 4))
    d_out = rng.normal(size=(2, 16, 4)).astype(np.float32)
    got = block_backward(q, k, v, d_out, block_size=7)
    expected = sdpa_backward(*(a.astype(np.float64) for a in (q, k, v, d_out)))
    for mine, ref in zip(got, expected):
        assert mine.dtype == np.float32
        np.testing.assert_allclose(mine, ref, rtol=2e-4, atol=2e-5 * float(np.abs(ref).max()))


def test_backward_never_holds_the_whole_matrix():
    n = m = 2048
    b = 128
    rng = np.random.default_rng(0)
    q, k, v, d_out = (rng.normal(size=(s, 4)).astype(np.float32) for s in (n, m, m, n))
    out, lse = blockwise_attention_with_lse(q, k, v, block_size=b)
    peak = peak_bytes(lambda: blockwise_attention_backward(q, k, v, out, lse, d_out, block_size=b))
    tiles = 3 * n * b * 4  # the weights, their gradient and one product of a tile, at most, at once
    assert tiles + 64 * 1024 < n * m * 4 / 2
    assert peak <= tiles + (8 * n * 4) * 4 + 64 * 1024, peak  # plus dq, dk, dv, δ, lse and the scaled queries
    assert peak_bytes(lambda: sdpa_backward(q, k, v, d_out)) >= n * m * 4  # the plain backward holds the weights


def test_backward_rejects_arrays_that_do_not_fit(rng):
    q, k, v = random_inputs(rng, (2,), (2,), (2,), 5, 8, 3, 2)
    out, lse = blockwise_attention_with_lse(q, k, v)
    d_out = np.ones_like(out)
    with pytest.raises(ValueError, match=r"lse has shape \(2, 5, 1\), but .* the shape \(2, 5\)"):
        blockwise_attention_backward(q, k, v, out, lse[..., None], d_out)
    with pytest.raises(ValueError, match=r"d_out has shape \(2, 5, 3\), but .* the shape \(2, 5, 2\)"):
        blockwise_attention_backward(q, k, v, out, lse, np.ones((2, 5, 3)))
    with pytest.raises(ValueError, match=r"out has shape \(5, 2\)"):
        blockwise_attention_backward(q, k, v, out[0], lse, d_out)
    with pytest.raises(ValueError, match=r"block_size must be a positive integer"):
        blockwise_attention_backward(q, k, v, out, lse, d_out, block_size=0)


# ---------------------------------------------------------------- the online softmax

@pytest.mark.parametrize("block_size", [1, 3, 7, 10, 11, 100])
def test_online_softmax_equals_the_plain_softmax_and_torch(rng, block_size):
    x = rng.normal(scale=4.0, size=(3, 4, 10))
    for axis in (0, 1, 2, -1):
        ours = online_softmax(x, block_size=block_size, axis=axis)
        np.testing.assert_allclose(ours, M.softmax(x, axis=axis), rtol=RTOL, atol=0)
        np.testing.assert_allclose(ours, torch.softmax(torch.from_numpy(x), dim=axis).numpy(), rtol=RTOL, atol=0)


def test_online_softmax_of_huge_and_masked_rows():
    x = np.array([[1e4, -1e4, 0.0, 5.0], [-np.inf, -np.inf, -np.inf, -np.inf], [-np.inf, -np.inf, 2.0, 2.0]])
    with np.errstate(**STRICT):
        p = online_softmax(x, block_size=2)
    np.testing.assert_allclose(p, [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0.5, 0.5]], rtol=1e-15, atol=0)
    assert online_softmax(x.astype(np.float32), block_size=3).dtype == np.float32


def test_online_steps_hold_the_maximum_and_sum_of_everything_seen(rng):
    # the invariant of the derivation: after each block, m is the maximum of the prefix seen and
    # l the sum of exp(x - m) over it, checked directly on the prefix
    x = rng.normal(scale=3.0, size=(2, 17))
    stops = []
    for stop, m, l in online_softmax_steps(x, block_size=5):
        prefix = x[:, :stop]
        np.testing.assert_array_equal(m[:, 0], prefix.max(axis=-1))
        np.testing.assert_allclose(l[:, 0], np.exp(prefix - prefix.max(-1, keepdims=True)).sum(-1), rtol=RTOL)
        stops.append(stop)
    assert stops == [5, 10, 15, 17]


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "8", None])
def test_bad_block_sizes_raise_naming_the_argument(rng, bad):
    q = rng.normal(size=(3, 2))
    with pytest.raises(ValueError, match=rf"block_size must be a positive integer .*got {bad!r}"):
        blockwise_attention(q, q, q, block_size=bad)
    if bad is not None:  # query_block=None is allowed: all queries at once
        with pytest.raises(ValueError, match=rf"query_block must be a positive integer .*got {bad!r}"):
            blockwise_attention(q, q, q, query_block=bad)
    with pytest.raises(ValueError, match=r"block_size must be a positive integer"):
        online_softmax(q, block_size=bad)


def test_bad_inputs_use_the_package_checks(rng):
    q = rng.normal(size=(3, 4))
    with pytest.raises(ValueError, match=r"query and key widths differ: q has d_k = 4"):
        blockwise_attention(q, rng.normal(size=(5, 3)), rng.normal(size=(5, 2)))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 3\) does not broadcast to the scores' shape \(3, 3\)"):
        blockwise_attention(q, q, q, np.ones((4, 3), dtype=bool))
    with pytest.raises(ValueError, match=r"x of shape \(2, 0\) has no entries along axis -1"):
        online_softmax(np.zeros((2, 0)))
    with pytest.raises(ValueError, match=r"axis 2 is out of range for x of shape \(3,\)"):
        online_softmax(np.zeros(3), axis=2)


# ---------------------------------------------------------------- the exercises of chapter 7

def test_running_max_sum_right_and_wrong():
    def right(scores, block_size):
        s_max, z = -np.inf, 0.0
        for start in range(0, len(scores), block_size):
            block = scores[start:start + block_size]
            s_max_new = max(s_max, block.max())
            z = z * np.exp(s_max - s_max_new) + np.exp(block - s_max_new).sum()
            s_max = s_max_new
        return s_max, z

    assert M.exercises.check_running_max_sum(right).ok

    def no_rescale(scores, block_size):
        s_max, z = -np.inf, 0.0
        for start in range(0, len(scores), block_size):
            block = scores[start:start + block_size]
            s_max = max(s_max, block.max())
            z += np.exp(block - s_max).sum()
        return s_max, z

    def upside_down(scores, block_size):
        s_max, z = -np.inf, 0.0
        for start in range(0, len(scores), block_size):
            block = scores[start:start + block_size]
            s_max_new = max(s_max, block.max())
            z = (z * np.exp(s_max_new - s_max) if z else 0.0) + np.exp(block - s_max_new).sum()
            s_max = s_max_new
        return s_max, z

    def block_max(scores, block_size):
        s_max, z = -np.inf, 0.0
        for start in range(0, len(scores), block_size):
            block = scores[start:start + block_size]
            z = (z * np.exp(s_max - block.max()) if z else 0.0) + np.exp(block - block.max()).sum()
            s_max = block.max()
        return s_max, z

    def own_maxima(scores, block_size):
        blocks = [scores[i:i + block_size] for i in range(0, len(scores), block_size)]
        return max(b.max() for b in blocks), sum(np.exp(b - b.max()).sum() for b in blocks)

    def no_shift(scores, block_size):
        with np.errstate(over="ignore"):
            return scores.max(), sum(np.exp(scores[i:i + block_size]).sum() for i in range(0, len(scores), block_size))

    cases = {
        "not rescaled": no_rescale,
        "upside down": upside_down,
        "maximum of the last block only": block_max,
        "own maximum": own_maxima,
        "overflows": no_shift,
        "forgot to `return`": lambda scores, block_size: None,
        "tuple of 2 items": lambda scores, block_size: scores.max(),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_running_max_sum(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def _merge(a, b, guard=True, rescale_a=True, rescale_b=True, flip=False):
    """Merging two (m, l, acc) states as a learner would, with switches for the usual mistakes."""
    m = max(a[0], b[0])
    shift = 0.0 if (guard and m == -np.inf) else m
    factor = (lambda mp: np.exp(shift - mp)) if flip else (lambda mp: np.exp(mp - shift))
    fa = factor(a[0]) if rescale_a else 1.0
    fb = factor(b[0]) if rescale_b else 1.0
    return m, fa * a[1] + fb * b[1], fa * a[2] + fb * b[2]


def test_merge_states_right_and_wrong():
    assert M.exercises.check_merge_states(_merge).ok
    cases = {
        "without rescaling": lambda a, b: _merge(a, b, rescale_a=False, rescale_b=False),
        "only part a was rescaled": lambda a, b: _merge(a, b, rescale_b=False),
        "only part b was rescaled": lambda a, b: _merge(a, b, rescale_a=False),
        "give nan": lambda a, b: _merge(a, b, guard=False),
        "raised IndexError": lambda a, b: (a[0], a[1], a[3]),
        "tuple of 3 items": lambda a, b: (a[0], a[1]),
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_merge_states(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)
    # the flipped factor: exp(m - m_a) is inf-free here only when guarded against m_a = -inf
    flipped = M.exercises.check_merge_states(lambda a, b: _merge(a, b, flip=True))
    assert not flipped.ok and "upside down" in flipped.message, flipped.message


def test_causal_blocks_right_and_wrong():
    def right(n, b):
        tiles = math.ceil(n / b)
        return sum(i + 1 for i in range(tiles))  # query tile i needs key blocks 0..i

    assert M.exercises.check_causal_blocks(right).ok
    cases = {
        "every pair": lambda n, b: math.ceil(n / b) ** 2,
        "diagonal tiles are missing": lambda n, b: sum(i for i in range(math.ceil(n / b))),
        "shorter tile is missing": lambda n, b: sum(i + 1 for i in range(n // b)),
        "should return a number": lambda n, b: "many",
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_causal_blocks(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_weights_from_lse_right_and_wrong():
    def right(q, k, lse):
        scores = q @ k.T / math.sqrt(q.shape[-1])
        return np.exp(scores - lse.reshape(-1, 1))

    assert M.exercises.check_weights_from_lse(right).ok
    cases = {
        "not divided by sqrt(d_k)": lambda q, k, lse: np.exp(q @ k.T - lse[:, None]),
        "along the keys": lambda q, k, lse: np.exp(q @ k.T / math.sqrt(q.shape[-1]) - lse),
        "lse was added": lambda q, k, lse: np.exp(q @ k.T / math.sqrt(q.shape[-1]) + lse[:, None]),
        "the *log* of the denominator": lambda q, k, lse: np.exp(q @ k.T / math.sqrt(q.shape[-1])) / lse[:, None],
        "has shape": lambda q, k, lse: np.exp(q @ k.T / math.sqrt(q.shape[-1]) - lse[:, None]).T[:3],
    }
    for words, wrong in cases.items():
        verdict = M.exercises.check_weights_from_lse(wrong)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)
