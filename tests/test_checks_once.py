"""Inputs are checked once, where they enter the package; the steps after the check trust what they are given.

For one call of a public function every check of the package is counted: the functions named ``check_*``,
``_check_*``, ``require_*``, ``as_float_array`` and ``broadcast_batch`` in any module, wrapped where the
modules look them up. Only the outermost checks count (a check that calls another is one check), and a
parameter object that validates itself when it is built (``MHAParams.__post_init__``, a new cache) is not a
check of the call's input. Before the layer trusted its steps, one ``multihead_attention`` call entered eleven
checks: the layer's, the bias's, then the split of each projection into heads, the attention's, the heads'
concatenation.
"""

import importlib
import pkgutil
import re
import sys

import numpy as np
import pytest

import mha_lessons as M

CHECK = re.compile(r"^(_?check_|require_)|^(as_float_array|broadcast_batch)$")


def _lesson_modules():
    return [importlib.import_module(f"mha_lessons.{m.name}") for m in pkgutil.iter_modules(M.__path__)
            if m.name != "course"]


def _building_a_parameter_object():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__post_init__":
            return True
        frame = frame.f_back
    return False


def checks_entered(monkeypatch, call):
    """The names of the outermost checks that ``call()`` enters, in order."""
    entered, depth, wrappers = [], [0], {}

    def wrap(function):
        def counted(*args, **kwargs):
            if depth[0] == 0 and not _building_a_parameter_object():
                entered.append(function.__name__)
            depth[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1
        return counted

    for module in _lesson_modules():
        for name, value in list(vars(module).items()):
            if CHECK.search(name) and callable(value) and getattr(value, "__module__", "").startswith("mha_lessons"):
                wrapper = wrappers.setdefault(id(value), wrap(value))
                monkeypatch.setattr(module, name, wrapper)
    call()
    return entered


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    B, n, m, d_model, h = 2, 5, 7, 8, 2
    params = M.init_params(d_model, h, seed=1)
    x_q, x_kv = rng.normal(size=(B, n, d_model)), rng.normal(size=(B, m, d_model))
    mask = rng.random((B, n, m)) < 0.8
    bias = rng.normal(size=(h, n, m))
    q, k, v = rng.normal(size=(B, h, n, 4)), rng.normal(size=(B, h, m, 4)), rng.normal(size=(B, h, m, 3))
    return dict(params=params, x_q=x_q, x_kv=x_kv, mask=mask, bias=bias, q=q, k=k, v=v, rng=rng)


def _calls(p):
    x_q, x_kv, params, mask, bias, q, k, v = (p[name] for name in ("x_q", "x_kv", "params", "mask", "bias",
                                                                  "q", "k", "v"))
    d_y = p["rng"].normal(size=x_q.shape)
    out, lse = M.blockwise.blockwise_attention_with_lse(q, k, v, mask[:, None], block_size=3, query_block=2)
    _, cache = M.inference.decode_step(x_q, params)
    shard = M.parallel.shard_params(params, 2, 1)
    return {
        "multihead_attention": lambda: M.multihead_attention(x_q, x_kv, x_kv, params),
        "multihead_attention with mask and bias": lambda: M.multihead_attention(x_q, x_kv, x_kv, params, mask, bias),
        "mha_backward": lambda: M.grads.mha_backward(x_q, x_kv, x_kv, params, d_y, mask, bias, bias_grad=True),
        "scaled_dot_product_attention": lambda: M.scaled_dot_product_attention(q, k, v, mask[:, None], bias),
        "sdpa_backward": lambda: M.grads.sdpa_backward(q, k, v, out, mask[:, None]),
        "grouped_query_attention": lambda: M.inference.grouped_query_attention(q, k[:, :1], v[:, :1]),
        "decode_step": lambda: M.inference.decode_step(x_q[:, :1], params, cache),
        "blockwise_attention_with_lse": lambda: M.blockwise.blockwise_attention_with_lse(
            q, k, v, mask[:, None], block_size=3, query_block=2, bias=bias),
        "blockwise_attention_backward": lambda: M.blockwise.blockwise_attention_backward(
            q, k, v, out, lse, out, mask[:, None], block_size=3, query_block=2),
        "split_kv_attention": lambda: M.blockwise.split_kv_attention(q, k, v, mask[:, None], num_splits=3),
        "partial_output": lambda: M.parallel.partial_output(x_q, x_kv, x_kv, shard),
    }


CALLS = ["multihead_attention", "multihead_attention with mask and bias", "mha_backward",
         "scaled_dot_product_attention", "sdpa_backward", "grouped_query_attention", "decode_step",
         "blockwise_attention_with_lse", "blockwise_attention_backward", "split_kv_attention", "partial_output"]


@pytest.mark.parametrize("name", CALLS)
def test_one_public_call_enters_one_check(monkeypatch, problem, name):
    call = _calls(problem)[name]
    entered = checks_entered(monkeypatch, call)
    assert len(entered) == 1, f"{name} entered {len(entered)} checks, not one at its boundary: {entered}"


def test_the_count_sees_a_check_inside_the_steps(monkeypatch, problem):
    """The counter is not blind: a step that checks again (the public split_heads inside the layer) is counted."""
    real_split = M.multihead.split_heads
    monkeypatch.setattr(M.multihead, "split_heads", lambda x, h, check_input=True: real_split(x, h))
    entered = checks_entered(monkeypatch, lambda: M.multihead_attention(problem["x_q"], problem["x_kv"],
                                                                        problem["x_kv"], problem["params"]))
    assert entered.count("require_ndim") == 3 and len(entered) == 7, entered  # three splits, two checks each


def test_the_layer_meets_one_conversion_of_its_input(monkeypatch, problem):
    """x_q itself reaches as_float_array once: in the layer's check, not again in a step."""
    x_q = problem["x_q"]
    seen = []
    real = M._checks.as_float_array

    def spy(x, name):
        seen.append(x is x_q)
        return real(x, name)

    monkeypatch.setattr(M._checks, "as_float_array", spy)
    M.multihead_attention(x_q, problem["x_kv"], problem["x_kv"], problem["params"])
    assert seen.count(True) == 1
