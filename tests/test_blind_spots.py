"""Tests for the blind spots that mutation testing of the core modules found (issue 28): each one fails on
the mutant named in its docstring, which the rest of the suite let through."""

import numpy as np
import pytest

import mha_lessons as M
from mha_lessons.blockwise import online_softmax
from mha_lessons.grads import sdpa_backward
from mha_lessons.inference import KVCache, decode_flops
from mha_lessons.masks import from_torch_masks
from common import same_but_for_rounding


# ---------------------------------------------------------------- attention.py

@pytest.mark.parametrize("lengths", [[2, -1], [-1, 2], [3, 0, -2]])
def test_padding_mask_refuses_a_negative_length_among_good_ones(lengths):
    """Mutant: ``np.any(lengths < 0)`` -> ``np.all(lengths < 0)`` (a single length cannot tell them apart)."""
    with pytest.raises(ValueError, match=r"every length must lie between 0 and m = 3"):
        M.padding_mask(lengths, 3)


# ---------------------------------------------------------------- multihead.py

def test_split_heads_takes_lists_and_keeps_any_type():
    """Mutant: ``x = np.asarray(x)`` deleted from ``split_heads``: a list has no ``ndim``."""
    nested = [[0, 1, 2, 3], [4, 5, 6, 7]]  # n = 2 positions, d_model = 4, as a plain list of ints
    heads = M.split_heads(nested, 2)
    np.testing.assert_array_equal(heads, [[[0, 1], [4, 5]], [[2, 3], [6, 7]]])
    assert heads.dtype == np.asarray(nested).dtype  # ints stay ints: the layout functions only move entries
    z = np.arange(8).reshape(2, 4) * (1 + 1j)
    assert M.split_heads(z, 2).dtype == z.dtype and np.array_equal(M.combine_heads(M.split_heads(z, 2)), z)
    assert M.combine_heads(heads.tolist()).tolist() == nested


# ---------------------------------------------------------------- grads.py

def test_sdpa_backward_converts_or_refuses_its_incoming_gradient(rng):
    """Mutant: ``as_float_array`` deleted from ``_check_same_shape``: a list of d_out has no shape, complex passes."""
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    d_out = rng.integers(-3, 4, size=(3, 2))
    expected = sdpa_backward(q, k, v, d_out.astype(np.float64))
    for given in (d_out.tolist(), d_out):  # a list of ints, an int array: converted to float64
        for ours, ref in zip(sdpa_backward(q, k, v, given), expected):
            assert ours.dtype == np.float64
            same_but_for_rounding(ours, ref)
    with pytest.raises(ValueError, match=r"d_out must hold real numbers, got an array of dtype complex128"):
        sdpa_backward(q, k, v, d_out * 1j)


# ---------------------------------------------------------------- inference.py

def test_kv_cache_converts_or_refuses_its_keys_and_values():
    """Mutant: ``as_float_array(self.v, "v")`` -> ``self.v`` in ``KVCache``: lists stay lists, complex passes."""
    k = [[[0, 1], [2, 3]]]  # (h_kv, t, d_k) = (1, 2, 2), a list of ints
    cache = KVCache(k, k)
    for name in ("k", "v"):
        arr = getattr(cache, name)
        assert isinstance(arr, np.ndarray) and arr.dtype == np.float64, name
        np.testing.assert_array_equal(arr, np.asarray(k, dtype=np.float64))
    assert cache.append(k, k).length == 4 and cache.nbytes == 2 * 4 * 8
    bad = np.asarray(k) * 1j
    with pytest.raises(ValueError, match=r"v must hold real numbers, got an array of dtype complex128"):
        KVCache(k, bad)
    with pytest.raises(ValueError, match=r"k must hold real numbers, got an array of dtype complex128"):
        KVCache(bad, k)


def test_decode_flops_refuses_a_width_that_the_heads_do_not_divide():
    """Mutant: ``check_num_heads(d_model, num_heads)`` deleted from ``decode_flops``: d_k = 10 // 3 silently."""
    with pytest.raises(ValueError, match=r"d_model = 10 is not divisible by num_heads = 3"):
        decode_flops(5, 10, 3)
    with pytest.raises(ValueError, match=r"d_model = 10 is not divisible by num_heads = 4"):
        decode_flops(5, 10, 4, 2, cached=False)


# ---------------------------------------------------------------- blockwise.py

@pytest.mark.parametrize("block_size", [1, 3])
def test_online_softmax_over_an_axis_of_length_one(block_size):
    """Mutant: the loop or the normaliser off by one on a softmax axis with a single entry."""
    x = np.array([[-2.0], [0.0], [7.5], [-np.inf]])  # (4, 1): each row one entry
    np.testing.assert_array_equal(online_softmax(x, block_size=block_size), [[1.0], [1.0], [1.0], [0.0]])
    y = np.array([[3.0, -1.0, 0.5]])  # (1, 3): softmax along axis 0, of length 1
    np.testing.assert_array_equal(online_softmax(y, block_size=block_size, axis=0), np.ones((1, 3)))
    np.testing.assert_array_equal(online_softmax(y, block_size=block_size, axis=0), M.softmax(y, axis=0))


# ---------------------------------------------------------------- masks.py

def test_from_torch_masks_reads_a_3d_mask_with_one_head_by_default():
    """Mutant: ``num_heads=1`` -> another default: three pages cannot be cut into 2 heads, or are cut wrongly."""
    blocked = np.zeros((3, 2, 4), bool)  # (B * h, n, m) with h = 1: three sequences
    blocked[1, :, 3] = True
    blocked[2, 0, 1:] = True
    ours = from_torch_masks(attn_mask=blocked)
    assert ours.shape == (3, 2, 4)
    np.testing.assert_array_equal(ours, ~blocked)


@pytest.mark.parametrize("num_heads", [0, -1, -3])
def test_from_torch_masks_refuses_a_head_count_below_one(num_heads):
    """Mutant: ``num_heads < 1`` -> ``num_heads < 0`` in the page-count check: 0 gives a ZeroDivisionError."""
    with pytest.raises(ValueError, match=rf"needs num_heads dividing its 6 pages, got num_heads = {num_heads}"):
        from_torch_masks(attn_mask=np.zeros((6, 2, 4), bool), num_heads=num_heads)


# ---------------------------------------------------------------- complexity.py

def layer_arrays(batch, n, m, d_model, h, dtype):
    """The arrays ``multihead_attention`` creates, from the package's own steps, for sizes that differ."""
    rng = np.random.default_rng(0)
    params = M.init_params(d_model, h, dtype=dtype)
    x_q = rng.normal(size=(batch, n, d_model)).astype(dtype)
    x_kv = rng.normal(size=(batch, m, d_model)).astype(dtype)
    heads = M.multihead.attend_heads(x_q, x_kv, x_kv, params)
    out, _ = M.scaled_dot_product_attention(heads.q, heads.k, heads.v)  # the heads' output, (B, h, n, d_v)
    y = M.multihead.mix_heads(heads.concat, params)
    return params, heads, out, y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_memory_entry_is_the_size_of_its_array(dtype):
    """Mutants: any count of ``mha_memory`` other than the weights, the output and the parameters changed."""
    batch, n, m, d_model, h = 3, 5, 7, 12, 4
    params, heads, out, y = layer_arrays(batch, n, m, d_model, h, dtype)
    memory = M.complexity.mha_memory(n, d_model, h, m, batch=batch, dtype=dtype)
    real = {"q": heads.q, "k": heads.k, "v": heads.v, "weights": heads.weights, "heads_output": out,
            "concat": heads.concat, "y": y}
    for name, array in real.items():
        assert memory[name] == array.nbytes, name
    assert memory["activations"] == sum(a.nbytes for a in real.values())
    assert memory["parameters"] == sum(a.nbytes for a in params.arrays().values())
    assert set(memory) == set(real) | {"activations", "parameters"}


def test_scale_and_bias_stages_move_their_arrays_at_any_batch():
    """Mutants: a factor or the batch dropped from the scale's or the biases' bytes or FLOPs in ``mha_intensity``."""
    batch, n, m, d_model, h = 3, 5, 7, 12, 4
    params, heads, _, y = layer_arrays(batch, n, m, d_model, h, np.float32)
    stages = M.complexity.mha_intensity(n, d_model, h, m, batch=batch)
    # the scale reads the queries and writes them scaled; it multiplies each number once
    assert stages["scale"]["bytes"] == 2 * heads.q.nbytes
    assert stages["scale"]["flops"] == heads.q.size
    # each bias is added in place to its projection (read and write) and read itself
    projections = (heads.q, heads.k, heads.v, y)
    biases = (params.b_q, params.b_k, params.b_v, params.b_o)
    assert stages["bias"]["bytes"] == sum(2 * p.nbytes for p in projections) + sum(b.nbytes for b in biases)
    assert stages["bias"]["flops"] == sum(p.size for p in projections)  # one addition per projected number
    for name in ("scale", "bias"):
        assert stages[name]["intensity"] == stages[name]["flops"] / stages[name]["bytes"]


def test_saved_bytes_count_three_inputs_unless_told_it_is_self_attention():
    """Mutant: ``self_attention=False`` -> ``True`` as the default of ``saved_for_backward_bytes``."""
    n, m, d_model, h, batch = 4, 6, 8, 2, 3
    default = M.complexity.saved_for_backward_bytes(n, d_model, h, m, batch=batch)  # n != m: must not raise
    assert default == M.complexity.saved_for_backward_bytes(n, d_model, h, m, batch=batch, self_attention=False)
    assert default["inputs"] == batch * (n + 2 * m) * d_model * 4  # x_q, x_k, x_v, float32
    square = M.complexity.saved_for_backward_bytes(n, d_model, h, batch=batch)
    assert square["inputs"] == 3 * batch * n * d_model * 4  # three arrays even when n = m
    assert square["inputs"] == 3 * M.complexity.saved_for_backward_bytes(n, d_model, h, batch=batch,
                                                                          self_attention=True)["inputs"]
