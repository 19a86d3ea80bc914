"""Input checks of the Triton kernel (``triton_attention.py``): torch tensors, named in every message."""

import math

import torch


def check_kernel_inputs(q, k, v, scale, head_widths):
    """The scale (1/√d_k unless given) if q, k, v suit the kernel; else TypeError / ValueError naming the problem."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}; torch.from_numpy converts "
                            f"a numpy array")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"q, k and v must share one type out of float16, bfloat16 and float32; got {q.dtype}, "
                        f"{k.dtype} and {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device; got {q.device}, {k.device} and {v.device}")
    if min(q.dim(), k.dim(), v.dim()) < 2:
        raise ValueError(f"q, k and v need at least two axes (..., n, d); got shapes {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q, k and v must have the same leading (batch, head) axes; the kernel does not "
                         f"broadcast: {shapes}")
    if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
        raise ValueError(f"q (..., n, d_k), k (..., m, d_k) and v (..., m, d_v) do not fit: {shapes}")
    if min(q.shape[-2], k.shape[-2], math.prod(q.shape[:-2])) < 1:
        raise ValueError(f"attention needs at least one query, one key and one batch entry: {shapes}")
    if q.shape[-1] not in head_widths or v.shape[-1] not in head_widths:
        raise ValueError(f"the kernel takes head widths d_k and d_v in {head_widths} (tl.dot needs at least 16, "
                         f"tl.arange a power of two); got d_k = {q.shape[-1]}, d_v = {v.shape[-1]}")
    if scale is None:
        return 1 / math.sqrt(q.shape[-1])
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ValueError(f"scale must be a positive number (None: 1/sqrt(d_k)), got {scale!r}")
    return float(scale)


def check_tiles(tiles):
    """``tiles`` = (BLOCK_M, BLOCK_N, num_warps, num_stages) as a tuple of ints, or ValueError naming the bad one."""
    if not isinstance(tiles, (tuple, list)) or len(tiles) != 4:
        raise ValueError(f"tiles must be (BLOCK_M, BLOCK_N, num_warps, num_stages), got {tiles!r}")
    for name, value in zip(("BLOCK_M", "BLOCK_N"), tiles[:2]):
        if isinstance(value, bool) or not isinstance(value, int) or value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two of at least 16 (tl.dot's smallest tile), got {value!r}")
    for name, value in zip(("num_warps", "num_stages"), tiles[2:]):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return tuple(tiles)
