"""Tests that fail on the lines a mutation run found untested (issue 32): each one kills the mutant named in its
docstring, which the rest of the suite let through. The lines have moved since the run (blockwise.py's into
split_kv.py and tiles.py, inference.py's into gqa.py); the tests follow what the lines do, wherever they live."""

import numpy as np
import pytest

import mha_lessons as M
from mha_lessons.blockwise import (attention_state, blockwise_attention_backward, blockwise_attention_with_lse,
                                   split_kv_attention, tiles_computed)
from mha_lessons.grads import sdpa_backward
from mha_lessons.inference import grouped_query_attention
from mha_lessons.masks import sliding_window_mask
from mha_lessons.tiles import Tiling


# ---------------------------------------------------------------- attention_state's bias check


def test_attention_state_checks_and_converts_its_bias(rng):
    """Mutant: the bias check of ``attention_state`` deleted: a list bias has no ``astype``, a wrong shape
    broadcasts or fails inside numpy, +inf passes and makes its rows NaN."""
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    bias = rng.normal(size=(3, 5))
    as_list = attention_state(q, k, v, bias=bias.tolist())
    for got, want in zip(as_list, attention_state(q, k, v, bias=bias)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"bias of shape \(5, 3\) does not broadcast to the scores' shape \(3, 5\)"):
        attention_state(q, k, v, bias=bias.T)
    with pytest.raises(ValueError, match=r"holds \+inf"):
        attention_state(q, k, v, bias=np.where(bias > 1, np.inf, bias))


# ---------------------------------------------------------------- split_kv_attention's mask and bias


@pytest.mark.parametrize("shape", [(), (7,), (3, 1), (2, 1, 1), (2, 3, 1), (1, 7)])
def test_split_kv_attention_takes_a_bias_of_every_broadcastable_shape(rng, shape):
    """Mutants: ``bias.shape[-1] == 1`` -> ``== 0`` where a chunk takes its part of the bias (a bias of one column,
    shared by every key, would then be sliced to nothing after the first chunk), and the reshape of a bias with
    fewer than two axes deleted (a (m,) or () bias has no query axis to slice)."""
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 7, 4)), rng.normal(size=(2, 7, 2))
    bias = rng.normal(size=shape)
    want, _ = M.scaled_dot_product_attention(q, k, v, bias=bias)
    for splits in (2, 3, 7):
        np.testing.assert_allclose(split_kv_attention(q, k, v, num_splits=splits, bias=bias), want,
                                   rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape", [(), (7,), (3, 1), (2, 3, 1)])
def test_split_kv_attention_takes_a_mask_of_every_broadcastable_shape(rng, shape):
    """The same two lines for the mask: a mask of one column allows or forbids a query's every key."""
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 7, 4)), rng.normal(size=(2, 7, 2))
    mask = rng.random(shape) < 0.6
    want, _ = M.scaled_dot_product_attention(q, k, v, mask)
    for splits in (2, 3):
        np.testing.assert_allclose(split_kv_attention(q, k, v, mask, num_splits=splits), want,
                                   rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- the tiles a causal pass skips


def allowed_tiles(n, m, block_size, query_block, window):
    """The oracle, from the mask alone: the (query tile, key block) pairs holding at least one allowed pair."""
    mask = M.causal_mask(n, m) if window is None else sliding_window_mask(n, m, window=window)
    return {(i0, j0) for i0 in range(0, n, query_block) for j0 in range(0, m, block_size)
            if mask[i0:i0 + query_block, j0:j0 + block_size].any()}


SIZES = [(8, 8, 2, 2, None), (8, 8, 2, 4, None), (8, 8, 4, 2, None), (9, 7, 3, 2, None), (6, 10, 2, 3, None),
         (12, 12, 2, 3, 3), (12, 12, 4, 4, 2), (10, 10, 3, 2, 4)]


@pytest.mark.parametrize("n, m, block_size, query_block, window", SIZES)
def test_the_passes_compute_exactly_the_tiles_that_hold_an_allowed_pair(monkeypatch, rng, n, m, block_size,
                                                                       query_block, window):
    """Mutant: the causal test ``j0 > rows.stop - 1`` -> ``j0 > rows.stop`` (now ``Tiling.skips``): a key block
    that starts just after a query tile's last query would be computed. The tiles the forward and the backward
    actually compute are recorded (each calls ``Tiling.forbid`` once per tile) and compared with the tiles that
    hold an allowed pair of the mask: an oracle independent of the rule, which ``tiles_computed`` shares."""
    computed = []
    real_forbid = Tiling.forbid

    def record(self, scores, mask, rows, cols):
        computed.append((rows.start, cols.start))
        return real_forbid(self, scores, mask, rows, cols)

    monkeypatch.setattr(Tiling, "forbid", record)
    q, k, v = rng.normal(size=(n, 4)), rng.normal(size=(m, 4)), rng.normal(size=(m, 3))
    options = dict(block_size=block_size, query_block=query_block, causal=True, window=window)
    out, lse = blockwise_attention_with_lse(q, k, v, **options)
    forward, computed[:] = list(computed), []
    blockwise_attention_backward(q, k, v, out, lse, rng.normal(size=out.shape), **options)
    oracle = allowed_tiles(n, m, block_size, query_block, window)
    assert sorted(forward) == sorted(oracle)
    assert sorted(computed) == sorted(oracle)
    assert tiles_computed(n, m, block_size, query_block, causal=True, window=window) == len(oracle)


@pytest.mark.parametrize("query_block", [2, 3])
def test_a_nan_in_a_skipped_block_reaches_neither_output_nor_gradient(rng, query_block):
    """The same mutant seen from outside: key blocks in the future of a whole query tile are never read, so a NaN
    in such a block's values reaches no output of that tile and no gradient (the documented behaviour)."""
    n = m = 6
    q, k, v = rng.normal(size=(n, 4)), rng.normal(size=(m, 4)), rng.normal(size=(m, 3))
    v[query_block] = np.nan  # the first key after the first query tile: in the future of all its queries
    options = dict(block_size=query_block, query_block=query_block, causal=True)
    out, lse = blockwise_attention_with_lse(q, k, v, **options)
    tile = slice(0, query_block)
    assert np.isfinite(out[tile]).all()
    dq, dk, dv = blockwise_attention_backward(q, k, v, out, lse, np.ones_like(out), **options)
    clean = v.copy()
    clean[query_block] = 0.0  # what the first tile sees, with the NaN's key replaced: nothing of it is read
    want = sdpa_backward(q[tile], k[:query_block], clean[:query_block], np.ones((query_block, 3)),
                         M.causal_mask(query_block))
    np.testing.assert_allclose(dq[tile], want[0], rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- grouped_query_attention's check of v


def test_grouped_query_attention_names_values_without_a_head_axis(rng):
    """Mutant: the shape check of ``v`` deleted (inference.py then, gqa.py now): a (m, d_v) v would fail
    with an IndexError from ``v.shape[-3]`` instead of a ValueError naming v."""
    q, k = rng.normal(size=(4, 3, 2)), rng.normal(size=(2, 5, 2))
    with pytest.raises(ValueError, match=r"v must have at least 3 dimensions \(\.\.\., h_kv, m, d_v\), got shape "
                                         r"\(5, 2\)"):
        grouped_query_attention(q, k, rng.normal(size=(5, 2)))
