"""Where chapter 8's Triton kernel runs: compiled for a CUDA GPU, or interpreted on the CPU; its default tiles.

``triton_attention.py`` holds what the kernel computes; this module holds how Triton is brought in, which of its
two modes this process uses, the one-sentence error for machines where it cannot run, and the tile sizes to
start from. Triton ships for Linux on x86-64 only: elsewhere ``triton`` and ``tl`` are None and ``jit`` leaves the
kernel a plain function, so the package still imports and a call says what is missing.
"""

from __future__ import annotations

import os
import sys

import torch

# Triton decides once, when it is imported, whether its kernels are compiled or interpreted (its own library
# functions, tl.zeros or tl.max, are kernels too). Without a CUDA GPU only the interpreter can run them, so on
# such a machine this module asks for it before importing Triton, unless the choice was already made.
if "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
try:
    import triton
    import triton.language as tl

    jit = triton.jit  # compiles a kernel for the GPU, or hands it to the interpreter under TRITON_INTERPRET=1
except ImportError:  # not Linux x86-64: the kernel stays a plain function, and calls say what is missing
    triton = tl = None

    def jit(fn):
        return fn


class KernelUnavailable(RuntimeError):
    """The kernel cannot run on this machine or on these tensors; the message says why, in one sentence."""


def default_tiles(d_k, dtype, device):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for head width ``d_k`` and input type ``dtype`` on ``device``.

    Under the interpreter a tile's size only sets how many numpy steps run; on a GPU it sets how much work a
    program holds on chip (float32 tiles take twice the on-chip memory of 16-bit ones). The GPU values are
    starting points from Triton's fused-attention tutorial; ``benchmarks/bench_gpu.py`` tunes them on an H100
    and records its choice.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return 32, 32, 4, 1
    if dtype == torch.float32 or torch.cuda.get_device_capability(device) < (8, 0):  # T4: 64 KB per block
        return (64, 32, 4, 2) if d_k > 64 else (64, 64, 4, 2)
    return (128, 64, 8, 3) if d_k > 64 else (128, 64, 4, 3)
