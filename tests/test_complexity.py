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
