"""Between the package and PyTorch: a layer's parameters to and from ``torch.nn.MultiheadAttention``, and the
gradients autograd stored in one (chapters 3 and 5).

PyTorch stores the transpose of the package's weights (``x @ W.T``, and the three input projections
stacked in one ``in_proj_weight``); these functions rearrange them. torch is imported inside each
function, so that the package needs only numpy.
"""

import copy

import numpy as np

from .params import MHAParams


def params_from_torch(module):
    """Copy the parameters of a ``torch.nn.MultiheadAttention`` into an ``MHAParams``.

    The arrays keep the module's dtype (call ``module.double()`` first for
    float64). ``batch_first`` does not change the parameters, only how torch is
    called. A module with ``kdim``/``vdim`` different from ``embed_dim`` keeps
    three separate input matrices (``q_proj_weight``, ``k_proj_weight``,
    ``v_proj_weight``) instead of the fused ``in_proj_weight``; they become
    ``w_q`` (d_model, d_model), ``w_k`` (kdim, d_model) and ``w_v`` (vdim, d_model).
    ``add_bias_kv`` and ``add_zero_attn`` have no counterpart here and are rejected.
    """
    import torch  # imported here so that the package needs only numpy

    if not isinstance(module, torch.nn.MultiheadAttention):
        raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(module).__name__}")
    d_model = module.embed_dim
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv and add_zero_attn have no counterpart in MHAParams")

    def to_numpy(t):
        return t.detach().cpu().numpy().copy()

    if module._qkv_same_embed_dim:
        w_in = to_numpy(module.in_proj_weight)  # (3 d_model, d_model), used by torch as x @ w_in.T
        w_q, w_k, w_v = (w_in[i * d_model:(i + 1) * d_model].T for i in range(3))  # each (d_model, d_model)
    else:  # three matrices, transposed: (d_model, d_model), (d_model, kdim), (d_model, vdim) -> (kdim, d_model), ...
        w_q, w_k, w_v = (to_numpy(w).T for w in (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight))
    w_o = to_numpy(module.out_proj.weight).T
    b_q = b_k = b_v = b_o = None
    if module.in_proj_bias is not None:
        b_in = to_numpy(module.in_proj_bias)  # (3 d_model,)
        b_q, b_k, b_v = (b_in[i * d_model:(i + 1) * d_model] for i in range(3))
    if module.out_proj.bias is not None:
        b_o = to_numpy(module.out_proj.bias)
    return MHAParams(module.num_heads, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)


def params_to_torch(params, *, batch_first=True):
    """Build a ``torch.nn.MultiheadAttention`` (in eval mode) holding ``params``.

    The module has the dtype of ``params.w_q``. torch has biases for all four
    projections or for none, so a ``None`` bias among present ones becomes zeros.
    Parameters with ``kdim``/``vdim`` other than d_model give a module built with
    torch's ``kdim=``/``vdim=``.
    """
    import torch  # imported here so that the package needs only numpy

    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be an MHAParams, got {type(params).__name__}")
    d_model = params.d_model
    if params.num_heads * params.d_k != d_model or params.num_heads * params.d_v != d_model:
        raise ValueError(f"torch.nn.MultiheadAttention needs d_k = d_v = d_model / h; these parameters have "
                         f"d_model = {d_model}, h = {params.num_heads}, d_k = {params.d_k}, d_v = {params.d_v}")
    dtype = torch.from_numpy(params.w_q).dtype  # float64 -> torch.float64, float32 -> torch.float32
    module = torch.nn.MultiheadAttention(
        d_model, params.num_heads, bias=params.has_bias, batch_first=batch_first, dtype=dtype,
        kdim=params.kdim, vdim=params.vdim,
    )

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=params.w_q.dtype))

    with torch.no_grad():
        if module._qkv_same_embed_dim:  # one fused (3 d_model, d_model) matrix
            module.in_proj_weight.copy_(t(np.concatenate([params.w_q.T, params.w_k.T, params.w_v.T])))
        else:  # three: (d_model, d_model), (d_model, kdim), (d_model, vdim)
            for w, ours in ((module.q_proj_weight, params.w_q), (module.k_proj_weight, params.w_k),
                            (module.v_proj_weight, params.w_v)):
                w.copy_(t(ours.T))
        module.out_proj.weight.copy_(t(params.w_o.T))
        if params.has_bias:
            zero = np.zeros(d_model, dtype=params.w_q.dtype)
            b_q, b_k, b_v, b_o = (zero if b is None else b for b in (params.b_q, params.b_k, params.b_v, params.b_o))
            module.in_proj_bias.copy_(t(np.concatenate([b_q, b_k, b_v])))
            module.out_proj.bias.copy_(t(b_o))
    return module.eval()


def grads_from_torch(module):
    """The gradients autograd stored in a ``torch.nn.MultiheadAttention`` (``.grad``), as an ``MHAParams``.

    torch keeps ``in_proj_weight`` (3 d_model, d_model), used as ``x @ W.T``.
    Our weights are a fixed rearrangement of torch's (blocks, transposed), and
    the gradient of a rearranged array is the gradient rearranged the same way,
    so ``params_from_torch`` applied to the gradients gives ours.
    """
    import torch  # imported here so that the package needs only numpy

    if not isinstance(module, torch.nn.MultiheadAttention):
        raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(module).__name__}")
    missing = [name for name, p in module.named_parameters() if p.grad is None]
    if missing:
        raise ValueError(f"these parameters have no gradient (call backward first): {', '.join(missing)}")
    holder = copy.deepcopy(module)
    with torch.no_grad():
        for slot, p in zip(holder.parameters(), module.parameters()):
            slot.copy_(p.grad)
    return params_from_torch(holder)
