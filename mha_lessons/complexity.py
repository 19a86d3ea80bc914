"""What multi-head attention costs: parameters (and, in the cost chapter, FLOPs and memory).

Counts are derived from the code in ``multihead.py``, step by step, and the
tests check them against PyTorch (``torch.nn.MultiheadAttention.parameters()``).
"""

from ._checks import check_num_heads


def param_count(d_model, num_heads, bias=True):
    """Number of learnable numbers in one multi-head attention layer.

    Four ``(d_model, d_model)`` weight matrices (W_Q, W_K, W_V, W_O) and, with
    ``bias``, four ``(d_model,)`` biases: ``4 d_model² + 4 d_model``. The number
    of heads does not appear: it decides how the columns of W_Q, W_K and W_V
    are grouped into heads, not how many there are. It is checked only for
    validity (it must divide ``d_model``).

    Examples
    --------
    >>> param_count(512, 8)
    1050624
    >>> param_count(512, 8, bias=False) == 4 * 512 ** 2
    True
    """
    check_num_heads(d_model, num_heads)
    weights = 4 * d_model * d_model  # w_q, w_k, w_v, w_o
    biases = 4 * d_model if bias else 0  # b_q, b_k, b_v, b_o
    return weights + biases
