"""Property sweeps: every public function against an independent oracle on many random cases.

Each sweep draws its cases from a numpy Generator seeded with (SEED, the sweep's name, the case
number): random batch shapes (including axes of size 1 that broadcast), n and m from 1 upward,
d_model with h among its divisors, masks of random patterns that include rows allowing nothing.
A failed comparison names the sweep and the case (an exception raised inside the package shows it
with ``pytest -l``, as the local ``label``), and re-running reproduces it exactly. (hypothesis would
shrink a failing case; it is not a dependency of the course, and seeded sweeps need nothing.)

The oracle is torch in float64 (its softmax, its scaled_dot_product_attention, its
nn.MultiheadAttention with copied weights, its autograd), or a closed form.

Tolerance. Both sides evaluate the same exact formulas in float64, so they differ by round-off only:
about eps = 2.2e-16 per operation, times the number of terms in a sum (d_model + d_k + m, at most
about 40 here), relative to the largest entry involved: below 1e-14. RTOL = 1e-12 leaves a margin of
100 over that, while the smallest real mistake these sweeps are meant to catch (a missing 1/√d_k with
d_k = 2, a swapped head layout, a softmax over the wrong axis) changes results by more than 1e-3.
"""

import math
import zlib

import numpy as np
import pytest
import torch

import mha_lessons as M

SEED = 20261123
RTOL = 1e-12

# Cases per sweep; the whole file runs more than a thousand (test_the_sweeps_add_up_to_a_thousand_cases).
COUNTS = {
    "softmax": 250,
    "sdpa": 250,
    "causal_mask": 60,
    "padding_mask": 60,
    "heads": 150,
    "multihead": 150,
    "init_params": 40,
    "torch_bridge": 40,
    "param_count": 60,
    "lookup": 40,
    "softmax_backward": 60,
    "sdpa_backward": 60,
    "mha_backward": 30,
    "softmax_jacobian": 40,
    "entropy": 40,
    "blockwise": 120,
    "gqa": 100,
}


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """torch's thread pool costs far more than these tiny products on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def sweep(name):
    """Yield (label, generator) for each case of the sweep `name`; the label is put in failure messages."""
    for case in range(COUNTS[name]):
        yield f"{name} case {case}", np.random.default_rng([SEED, zlib.crc32(name.encode()), case])


def close(ours, ref, label, rtol=RTOL, scale=None):
    """assert_allclose with round-off slack relative to `scale`, by default the largest reference entry.

    Entries that cancel to (almost) 0 keep only round-off, which is relative to the size of the
    quantities that cancelled, not to the entry itself.
    """
    ref = np.asarray(ref)
    if scale is None:
        scale = float(np.abs(ref).max()) if ref.size else 0.0
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * scale, err_msg=label)


# ---------------------------------------------------------------- random shapes, masks and parameters

def random_batch(rng, max_dims=3, max_size=3):
    return tuple(int(s) for s in rng.integers(1, max_size + 1, size=rng.integers(0, max_dims + 1)))


def broadcastable(rng, shape):
    """A shape that broadcasts to `shape`: some leading axes dropped, some axes set to 1."""
    shape = list(shape[rng.integers(0, len(shape) + 1):]) if shape else []
    return tuple(1 if rng.random() < 0.3 else s for s in shape)


def random_mask(rng, batch, n, m):
    """A boolean mask broadcastable to batch + (n, m), or None; often with rows that allow nothing."""
    if rng.random() < 0.2:
        return None
    shape = broadcastable(rng, batch) + tuple(1 if rng.random() < 0.2 else s for s in (n, m))
    mask = rng.random(shape) < rng.uniform(0.2, 1.0)
    if mask.shape[-2] > 1 and rng.random() < 0.5:
        mask[..., rng.integers(0, mask.shape[-2]), :] = False  # a query that may attend to nothing
    return mask


def divisors(d):
    return [h for h in range(1, d + 1) if d % h == 0]


def random_params(rng, d_model, num_heads):
    """Random weights and random biases (some biases missing at random): zero biases would hide mistakes."""
    def draw(*shape):
        return rng.normal(scale=1 / math.sqrt(d_model), size=shape)

    weights = [draw(d_model, d_model) for _ in range(4)]
    style = rng.choice(["all", "none", "some"], p=[0.6, 0.2, 0.2])
    biases = [draw(d_model) if style == "all" or (style == "some" and rng.random() < 0.5) else None
              for _ in range(4)]
    return M.MHAParams(num_heads, *weights, *biases)


def torch_attention(q, k, v, mask):
    """softmax(q kᵀ / √d_k) v written out in torch, on tensors (batch axes broadcast by torch, gradients kept).

    A fully masked row gets weights 0 (the documented contract) instead of NaN.
    """
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        allowed = torch.from_numpy(np.array(mask))
        some = allowed.any(dim=-1, keepdim=True)
        scores = torch.where(some, scores.masked_fill(~allowed, -math.inf), torch.zeros((), dtype=scores.dtype))
        weights = torch.softmax(scores, dim=-1) * some
    return weights @ v, weights


def torch_attention_np(q, k, v, mask):
    """torch_attention on numpy arrays."""
    return torch_attention(*(torch.from_numpy(np.array(a)) for a in (q, k, v)), mask)


# ---------------------------------------------------------------- attention.py

def test_softmax_against_torch():
    for label, rng in sweep("softmax"):
        shape = tuple(int(s) for s in rng.integers(1, 6, size=rng.integers(1, 5)))
        axis = int(rng.integers(-len(shape), len(shape)))
        x = rng.normal(size=shape) * 10.0 ** rng.uniform(-3, 3)
        x[rng.random(shape) < 0.15] = -np.inf  # masked entries; some slices end up all -inf
        if rng.random() < 0.3:
            x = x + rng.uniform(-1e4, 1e4)  # large logits: exp would overflow without the max shift
        p = M.softmax(x, axis=axis)
        ref = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
        empty = np.all(np.isneginf(x), axis=axis, keepdims=True)  # torch: nan there; ours: zeros
        assert p.shape == x.shape and p.dtype == np.float64, label
        close(p[~np.broadcast_to(empty, x.shape)], ref[~np.broadcast_to(empty, x.shape)], label)
        assert np.all(p[np.broadcast_to(empty, x.shape)] == 0), label


def test_causal_mask_against_torch():
    for label, rng in sweep("causal_mask"):
        n, m = (int(s) for s in rng.integers(1, 40, size=2))
        mask = M.causal_mask(n, m) if rng.random() < 0.7 else M.causal_mask(n)
        m = mask.shape[1]
        assert mask.dtype == np.bool_ and mask.shape == (n, m), label
        np.testing.assert_array_equal(mask, torch.ones(n, m, dtype=torch.bool).tril().numpy(), err_msg=label)


def test_padding_mask_against_torch_key_padding():
    for label, rng in sweep("padding_mask"):
        batch, m = int(rng.integers(1, 6)), int(rng.integers(1, 12))
        lengths = rng.integers(0, m + 1, size=batch)
        mask = M.padding_mask(lengths, m)
        assert mask.dtype == np.bool_ and mask.shape == (batch, 1, m), label
        # torch's key_padding_mask convention: True marks a padding position
        padding = torch.arange(m)[None, :] >= torch.from_numpy(lengths)[:, None]
        np.testing.assert_array_equal(mask[:, 0], ~padding.numpy(), err_msg=label)


def test_sdpa_against_torch():
    for label, rng in sweep("sdpa"):
        batch = random_batch(rng)
        n, m, d_k, d_v = (int(s) for s in rng.integers(1, 8, size=4))
        # each input may carry only part of the batch, or axes of size 1 that broadcast
        q = rng.normal(size=broadcastable(rng, batch) + (n, d_k))
        k = rng.normal(size=broadcastable(rng, batch) + (m, d_k))
        v = rng.normal(size=broadcastable(rng, batch) + (m, d_v)) * rng.uniform(0.1, 10)
        full = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        mask = random_mask(rng, full, n, m)
        out, weights = M.scaled_dot_product_attention(q, k, v, mask)
        # the weights do not depend on v: they carry the batch axes of q, k and the mask, which broadcast to `full`
        assert out.shape == full + (n, d_v) and weights.shape[-2:] == (n, m), label
        weights = np.broadcast_to(weights, full + (n, m))
        qb, kb, vb = (np.broadcast_to(a, full + a.shape[-2:]) for a in (q, k, v))
        mb = None if mask is None else np.broadcast_to(mask, full + (n, m))
        ref_out, ref_w = torch_attention_np(qb, kb, vb, mb)
        close(weights, ref_w.numpy(), label)
        close(out, ref_out.numpy(), label)
        # and torch's own fused function, which also gives an empty row zero output
        fused = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(np.array(a)) for a in (qb, kb, vb)),
            attn_mask=None if mb is None else torch.from_numpy(np.array(mb)),
        )
        close(out, fused.numpy(), label)


# ---------------------------------------------------------------- multihead.py

def test_split_and_combine_heads_against_torch_and_the_layout():
    for label, rng in sweep("heads"):
        batch = random_batch(rng)
        n, d_model = int(rng.integers(1, 7)), int(rng.integers(1, 25))
        h = int(rng.choice(divisors(d_model)))
        d_k = d_model // h
        x = rng.normal(size=batch + (n, d_model))
        heads = M.split_heads(x, h)
        expected = torch.from_numpy(x).reshape(*batch, n, h, d_k).transpose(-3, -2).numpy()
        np.testing.assert_array_equal(heads, expected, err_msg=label)
        for i in range(h):  # the layout in words: head i holds features [i d_k, (i + 1) d_k) of every position
            np.testing.assert_array_equal(heads[..., i, :, :], x[..., :, i * d_k:(i + 1) * d_k], err_msg=label)
        np.testing.assert_array_equal(M.combine_heads(heads), x, err_msg=label)
        y = rng.normal(size=batch + (h, n, d_k))
        np.testing.assert_array_equal(M.split_heads(M.combine_heads(y), h), y, err_msg=label)


def torch_layer(params, x_q, x_k, x_v, mask):
    """torch.nn.MultiheadAttention on copied weights, every batch axis flattened into torch's one."""
    h = params.num_heads
    full = np.broadcast_shapes(x_q.shape[:-2], x_k.shape[:-2], x_v.shape[:-2])
    flat = [np.broadcast_to(x, full + x.shape[-2:]).reshape((-1,) + x.shape[-2:]) for x in (x_q, x_k, x_v)]
    n, m = flat[0].shape[1], flat[1].shape[1]
    attn_mask = None
    if mask is not None:  # torch's attn_mask: True = blocked, one (n, m) matrix per (batch element, head)
        per_batch = np.broadcast_to(mask, full + (n, m)).reshape(-1, n, m)
        attn_mask = torch.from_numpy(np.repeat(~per_batch, h, axis=0))
    y, w = M.params_to_torch(params)(
        *(torch.from_numpy(np.array(x)) for x in flat),
        attn_mask=attn_mask, need_weights=True, average_attn_weights=False,
    )
    return y.detach().numpy().reshape(full + (n, -1)), w.detach().numpy().reshape(full + (h, n, m))


def test_multihead_against_torch():
    for label, rng in sweep("multihead"):
        batch = random_batch(rng, max_dims=2)
        d_model = int(rng.integers(1, 17))
        h = int(rng.choice(divisors(d_model)))
        n, m = (int(s) for s in rng.integers(1, 7, size=2))
        params = random_params(rng, d_model, h)
        if rng.random() < 0.3:  # self-attention: one array three times
            x_q = x_k = x_v = rng.normal(size=batch + (n, d_model))
            m = n
        else:
            x_q = rng.normal(size=broadcastable(rng, batch) + (n, d_model))
            x_k = rng.normal(size=broadcastable(rng, batch) + (m, d_model))
            x_v = rng.normal(size=broadcastable(rng, batch) + (m, d_model))
        full = np.broadcast_shapes(x_q.shape[:-2], x_k.shape[:-2], x_v.shape[:-2])
        mask = random_mask(rng, full, n, m)
        y, w = M.multihead_attention(x_q, x_k, x_v, params, mask)
        y_ref, w_ref = torch_layer(params, x_q, x_k, x_v, mask)
        assert y.shape == full + (n, d_model) and w.shape[-3:] == (h, n, m), label
        w = np.broadcast_to(w, full + (h, n, m))  # like y, but without the batch axes only x_v has
        allowed = np.ones(full + (n, m), bool) if mask is None else np.broadcast_to(mask, full + (n, m))
        live = allowed.any(axis=-1)  # (..., n): queries that may attend to something
        close(y[live], y_ref[live], label)
        close(np.moveaxis(w, -3, -2)[live], np.moveaxis(w_ref, -3, -2)[live], label)
        # torch gives nan for a query that may attend to nothing; ours: zero weights, output b_o
        assert np.all(np.moveaxis(w, -3, -2)[~live] == 0), label
        b_o = np.zeros(d_model) if params.b_o is None else params.b_o
        np.testing.assert_array_equal(y[~live], np.broadcast_to(b_o, y[~live].shape), err_msg=label)


def test_init_params_against_torchs_initialisation():
    for label, rng in sweep("init_params"):
        d_model = int(rng.integers(1, 65))
        h = int(rng.choice(divisors(d_model)))
        bias, seed = bool(rng.random() < 0.5), int(rng.integers(0, 2**31))
        dtype = (np.float32, np.float64)[int(rng.integers(0, 2))]
        params = M.init_params(d_model, h, bias=bias, seed=seed, dtype=dtype)
        torch.manual_seed(seed)
        theirs = torch.nn.MultiheadAttention(d_model, h, bias=bias, dtype=torch.float64)
        assert (params.num_heads, params.d_model, params.d_k) == (h, d_model, d_model // h), label
        # torch's Xavier bound for the fused (3 d_model, d_model) input projection, and nn.Linear's for the
        # output projection: torch's own weights lie within them, and so do ours
        a_in, a_out = math.sqrt(6 / (d_model + 3 * d_model)), 1 / math.sqrt(d_model)
        assert float(theirs.in_proj_weight.detach().abs().max()) <= a_in, label
        assert float(theirs.out_proj.weight.detach().abs().max()) <= a_out, label
        for name in ("w_q", "w_k", "w_v", "w_o"):
            w = getattr(params, name)
            assert w.shape == (d_model, d_model) and w.dtype == dtype, label
            bound = (a_out if name == "w_o" else a_in) * (1 + np.finfo(dtype).eps)  # float32 rounds half an ulp
            assert np.abs(w).max() <= bound, f"{label} {name}"
        for name in ("b_q", "b_k", "b_v", "b_o"):
            b = getattr(params, name)
            assert (b is None) if not bias else (b.shape == (d_model,) and b.dtype == dtype and not b.any()), label
        again = M.init_params(d_model, h, bias=bias, seed=seed, dtype=dtype)
        for name, value in params.arrays().items():
            np.testing.assert_array_equal(getattr(again, name), value, err_msg=label)


def test_params_round_trip_through_torch():
    for label, rng in sweep("torch_bridge"):
        d_model = int(rng.integers(1, 17))
        h = int(rng.choice(divisors(d_model)))
        params = random_params(rng, d_model, h)
        module = M.params_to_torch(params, batch_first=bool(rng.random() < 0.5))
        assert (module.embed_dim, module.num_heads, module.training) == (d_model, h, False), label
        back = M.params_from_torch(module)
        assert back.num_heads == h, label
        zeros = np.zeros(d_model)
        for name in ("w_q", "w_k", "w_v", "w_o"):
            np.testing.assert_array_equal(getattr(back, name), getattr(params, name), err_msg=f"{label} {name}")
        for name in ("b_q", "b_k", "b_v", "b_o"):
            value, got = getattr(params, name), getattr(back, name)
            if not params.has_bias:
                assert got is None, label
            else:  # torch has all four biases or none: a missing one comes back as zeros
                np.testing.assert_array_equal(got, zeros if value is None else value, err_msg=f"{label} {name}")


# ---------------------------------------------------------------- complexity.py and lookup.py

def test_param_count_against_torch():
    for label, rng in sweep("param_count"):
        d_model = int(rng.integers(1, 1025))
        h = int(rng.choice(divisors(d_model)))
        bias = bool(rng.random() < 0.5)
        module = torch.nn.MultiheadAttention(d_model, h, bias=bias, device="meta")  # shapes only
        assert M.complexity.param_count(d_model, h, bias=bias) == sum(p.numel() for p in module.parameters()), label


def test_lookup_weights_match_their_closed_form():
    from mha_lessons.lookup import lookup_target, lookup_tokens, relative_error, two_position_lookup

    for label, rng in sweep("lookup"):
        n, d_content, batch = int(rng.integers(2, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
        t0, t1 = (int(t) for t in rng.choice(n, size=2, replace=False))
        gap = float(rng.uniform(1, 20))
        x = lookup_tokens(batch, n, d_content, seed=int(rng.integers(0, 1000)))
        d_model = 2 * (d_content + n)
        assert x.shape == (batch, n, d_model), label
        np.testing.assert_array_equal(x[..., d_content:d_content + n], np.broadcast_to(np.eye(n), (batch, n, n)))
        assert not x[..., d_content + n:].any(), label  # zero padding
        target = lookup_target(x, n, d_content, (t0, t1))
        np.testing.assert_array_equal(target[..., :d_content], np.repeat(x[:, [t0], :d_content], n, axis=1))
        np.testing.assert_array_equal(target[..., d_content:2 * d_content], np.repeat(x[:, [t1], :d_content], n, 1))
        # Closed form: the target's scaled score is `gap`, every other key's is 0, so with two heads
        # head i puts e^gap / (e^gap + n - 1) on targets[i]; one head splits e^gap / (2 e^gap + n - 2) on each.
        _, w2 = M.multihead_attention(x, x, x, two_position_lookup(2, n, d_content, (t0, t1), gap=gap))
        _, w1 = M.multihead_attention(x, x, x, two_position_lookup(1, n, d_content, (t0, t1), gap=gap))
        e = math.exp(gap)
        for head, t in enumerate((t0, t1)):
            np.testing.assert_allclose(w2[:, head, :, t], e / (e + n - 1), rtol=1e-13, err_msg=label)
        np.testing.assert_allclose(w1[:, 0, :, [t0, t1]], e / (2 * e + n - 2), rtol=1e-13, err_msg=label)
        # relative_error against the same ratio computed by torch
        y, t = rng.normal(size=(2, 3, 4))
        ref = float(((torch.from_numpy(y) - torch.from_numpy(t)) ** 2).sum() / (torch.from_numpy(t) ** 2).sum())
        assert math.isclose(relative_error(y, t), ref, rel_tol=1e-13), label


# ---------------------------------------------------------------- grads.py, against torch autograd

def test_softmax_backward_against_autograd():
    from mha_lessons.grads import softmax_backward

    for label, rng in sweep("softmax_backward"):
        shape = tuple(int(s) for s in rng.integers(1, 6, size=rng.integers(1, 4)))
        axis = int(rng.integers(-len(shape), len(shape)))
        logits = torch.tensor(rng.normal(scale=3, size=shape), requires_grad=True)
        g = rng.normal(size=shape)
        a = torch.softmax(logits, dim=axis)
        a.backward(torch.from_numpy(g))
        close(softmax_backward(a.detach().numpy(), g, axis=axis), logits.grad.numpy(), label)


def test_sdpa_backward_against_autograd():
    from mha_lessons.grads import sdpa_backward

    for label, rng in sweep("sdpa_backward"):
        batch = random_batch(rng, max_dims=2)
        n, m, d_k, d_v = (int(s) for s in rng.integers(1, 6, size=4))
        q = rng.normal(size=broadcastable(rng, batch) + (n, d_k))
        k = rng.normal(size=broadcastable(rng, batch) + (m, d_k))
        v = rng.normal(size=broadcastable(rng, batch) + (m, d_v))
        full = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        mask = random_mask(rng, full, n, m)
        d_out = rng.normal(size=full + (n, d_v))
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
        out, _ = torch_attention(tq, tk, tv, mask)
        out.backward(torch.from_numpy(d_out))
        for ours, ref in zip(sdpa_backward(q, k, v, d_out, mask), (tq.grad, tk.grad, tv.grad)):
            close(ours, ref.numpy(), label)


def test_mha_backward_against_autograd():
    from mha_lessons.grads import mha_backward

    for label, rng in sweep("mha_backward"):
        batch = random_batch(rng, max_dims=1)
        d_model = int(rng.integers(1, 13))
        h = int(rng.choice(divisors(d_model)))
        n, m = (int(s) for s in rng.integers(1, 6, size=2))
        params = random_params(rng, d_model, h)
        if not params.has_bias or any(getattr(params, b) is None for b in ("b_q", "b_k", "b_v", "b_o")):
            params = M.params_from_torch(M.params_to_torch(params))  # torch's biases: all or none
        x_q, x_k, x_v = (rng.normal(size=batch + (s, d_model)) for s in (n, m, m))
        mask = rng.random((n, m)) < 0.6
        mask[np.arange(n), rng.integers(0, m, size=n)] = True  # torch's layer gives nan for an empty row
        d_y = rng.normal(size=batch + (n, d_model))
        module = M.params_to_torch(params)
        xs = [torch.tensor(x, requires_grad=True) for x in (x_q, x_k, x_v)]
        y, _ = module(*xs, attn_mask=torch.from_numpy(~mask), need_weights=False)
        y.backward(torch.from_numpy(d_y))
        dx_q, dx_k, dx_v, dp = mha_backward(x_q, x_k, x_v, params, d_y, mask)
        # Some gradients are exactly 0 (the key bias's; the keys' when m = 1, since one key gets weight 1
        # whatever its score): their round-off is relative to the size of the other gradients.
        grads = {p_name: p.grad.numpy() for p_name, p in module.named_parameters()}
        scale = max(float(np.abs(g).max()) for g in [*grads.values(), *(x.grad.numpy() for x in xs)])
        for ours, ref in zip((dx_q, dx_k, dx_v), xs):
            close(ours, ref.grad.numpy(), label, scale=scale)
        # torch keeps (3 d_model, d_model) used as x @ W.T; ours are its blocks, transposed
        w_in = grads["in_proj_weight"]
        for i, name in enumerate(("w_q", "w_k", "w_v")):
            close(getattr(dp, name), w_in[i * d_model:(i + 1) * d_model].T, f"{label} {name}", scale=scale)
        close(dp.w_o, grads["out_proj.weight"].T, f"{label} w_o", scale=scale)
        if params.has_bias:
            b_in = grads["in_proj_bias"]
            for i, name in enumerate(("b_q", "b_k", "b_v")):
                close(getattr(dp, name), b_in[i * d_model:(i + 1) * d_model], f"{label} {name}", scale=scale)
            close(dp.b_o, grads["out_proj.bias"], f"{label} b_o", scale=scale)


# ---------------------------------------------------------------- scaling.py

def test_softmax_jacobian_against_autograd():
    from mha_lessons.scaling import softmax_jacobian

    for label, rng in sweep("softmax_jacobian"):
        m = int(rng.integers(1, 7))
        x = rng.normal(scale=rng.uniform(0.1, 10), size=random_batch(rng, max_dims=2) + (m,))
        ref = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, dim=-1), torch.from_numpy(x))
        # jacobian of a (..., m) -> (..., m) map is (..., m, ..., m); keep the blocks of one slice each
        ref = ref.reshape(-1, m, x.size // m, m).diagonal(dim1=0, dim2=2).permute(2, 0, 1)
        close(softmax_jacobian(x), ref.numpy().reshape(x.shape + (m,)), label)


def test_entropy_against_torch():
    from mha_lessons.stats import entropy

    for label, rng in sweep("entropy"):
        m = int(rng.integers(1, 9))
        logits = rng.normal(scale=3, size=random_batch(rng, max_dims=2) + (m,))
        logits[rng.random(logits.shape) < 0.2] = -np.inf  # zero probabilities: 0 log 0 = 0
        logits[..., 0] = np.maximum(logits[..., 0], 0.0)  # at least one positive probability per row
        p = torch.softmax(torch.from_numpy(logits), dim=-1)
        ref = torch.distributions.Categorical(probs=p).entropy()
        # a one-hot row has entropy 0, computed as a sum of round-off: slack relative to log m, the largest entropy
        close(entropy(p.numpy()), ref.numpy(), label, scale=max(1.0, math.log(m)))


# ---------------------------------------------------------------- blockwise.py and inference.py

def test_blockwise_against_torch():
    for label, rng in sweep("blockwise"):
        batch = random_batch(rng, max_dims=2)
        n, m, d_k, d_v = (int(s) for s in rng.integers(1, 12, size=4))
        q, k, v = rng.normal(size=batch + (n, d_k)), rng.normal(size=batch + (m, d_k)), rng.normal(size=batch + (m, d_v))
        mask = random_mask(rng, batch, n, m)
        block_size = int(rng.integers(1, m + 3))  # dividing m or not, and larger than m
        query_block = None if rng.random() < 0.5 else int(rng.integers(1, n + 2))
        out = M.blockwise.blockwise_attention(q, k, v, mask, block_size=block_size, query_block=query_block)
        mb = None if mask is None else np.broadcast_to(mask, batch + (n, m))
        ref_out, _ = torch_attention_np(q, k, v, mb)
        close(out, ref_out.numpy(), f"{label} (block {block_size}, query block {query_block})")


def test_grouped_query_attention_against_torch():
    for label, rng in sweep("gqa"):
        batch = random_batch(rng, max_dims=2)
        h_kv = int(rng.integers(1, 4))
        h = h_kv * int(rng.integers(1, 4))  # h_kv divides h
        n, m, d_k, d_v = (int(s) for s in rng.integers(1, 7, size=4))
        q = rng.normal(size=batch + (h, n, d_k))
        k, v = rng.normal(size=batch + (h_kv, m, d_k)), rng.normal(size=batch + (h_kv, m, d_v))
        mask = None if rng.random() < 0.3 else rng.random(batch + (1 if rng.random() < 0.5 else h, n, m)) < 0.7
        if mask is not None and rng.random() < 0.5:
            mask[..., 0, :] = False  # a query that may attend to nothing: zeros in both
        out, _ = M.inference.grouped_query_attention(q, k, v, mask)
        ref = torch.nn.functional.scaled_dot_product_attention(
            torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
            attn_mask=None if mask is None else torch.from_numpy(mask), enable_gqa=True,
        )
        close(out, ref.numpy(), f"{label} (h = {h}, h_kv = {h_kv})")


def test_the_sweeps_add_up_to_a_thousand_cases():
    assert sum(COUNTS.values()) >= 1000
