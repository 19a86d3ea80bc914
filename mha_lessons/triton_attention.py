"""Chapter 7's block-wise attention as one GPU kernel, written in Triton, and its backward pass.

Axis names as in ``blockwise.py``: ``...`` the leading axes (batch B and heads h), ``n`` queries, ``m`` keys,
``d_k`` and ``d_v`` the head widths, ``n_blk`` queries per tile (``BLOCK_M``), ``m_blk`` keys per block
(``BLOCK_N``). The tensors are torch tensors q (..., n, d_k), k (..., m, d_k), v (..., m, d_v) with the same
leading axes (the kernel does not broadcast them).

**Who does what.** ``blockwise_attention_kernel`` is the work of one *program*: one query tile of one head.
The launch starts a grid of ceil(n / n_blk) × B·h programs; the GPU runs as many of them at once as its
streaming multiprocessors hold. A program loads its (n_blk, d_k) tile of queries once, then runs through the
key blocks in order, as the inner loop of ``blockwise_attention_with_lse`` does (its outer loop, over the query
tiles, is the grid itself). The running maximum ``s_max``, running sum ``z`` and accumulator ``acc`` of the
tile's queries stay in registers, in float32 whatever the inputs. No (n_blk, m_blk) tile of scores ever reaches
the GPU's main memory; what leaves a program is its n_blk rows of the output and their log-sum-exps.

**Step for step.** The loop body numbers its steps and names the equation of chapter 7 each implements, the
tags that ``blockwise_attention_with_lse`` carries on the same lines: step 1 the scores of the tile against
block u, 2 the running maximum (eq-ch7-running-max), 3 the exponentials measured from it, 4 the running sum
(eq-ch7-running-sum), 5 the accumulator (eq-ch7-running-acc); after the last block, 6 the output
(eq-ch7-final) and 7 the log-sum-exp (eq-ch7-lse). Four things differ, for speed, none changing the result
beyond rounding: the kernel computes 2**x where numpy computes e**x (the scale carries the factor log2(e), so
the numbers are the same, and a GPU has an instruction for powers of two); it scales the row maximum rather
than every score (the scale is positive, so the maximum is the same); it multiplies the weights by V in the
inputs' 16-bit type, as FlashAttention does; and it builds a mask only for the blocks that need one, the last
block (keys past m) and, with ``causal``, the blocks on the diagonal.

**Causal.** ``causal=True`` lets query i see keys 0 … i, counted from the top-left corner as torch's
``scaled_dot_product_attention(..., is_causal=True)`` and ``blockwise_attention(..., causal=True)`` count them,
for n = m and n ≠ m alike (the flash-attn package, from version 2.1, aligns a non-square mask to the
bottom-right corner instead). Key blocks entirely above the diagonal of a tile are never loaded, the tiles
``blockwise.tiles_computed`` counts. Every query sees key 0, so no running maximum stays -inf and the kernel
needs no guard for it.

**Where it runs.** Triton compiles or interprets, once per Python process, when it is imported. In a process
with a CUDA GPU it compiles the kernel for the GPU, and the kernel takes CUDA tensors. In a process without one,
this module switches Triton to its interpreter (``TRITON_INTERPRET=1``), which runs the same Python source with
numpy on CPU tensors, one program after another: slowly, but on any Linux x86-64 machine, which is how the tests
and the chapter check the kernel. The interpreter multiplies bfloat16 tiles wrongly (Triton issue 11584), so
there it takes float16 and float32. Triton ships for Linux on x86-64 only; elsewhere this module still imports
and a call raises ``KernelUnavailable``, whose message says so in one sentence.
"""

from __future__ import annotations  # annotations stay text: the kernel's ``tl.constexpr`` needs no Triton to import

import math
import platform

import torch

from ._torch_checks import check_kernel_inputs, check_tiles
from ._triton_runtime import KernelUnavailable, default_tiles, jit, tl, triton  # noqa: F401 (public names)

HEAD_WIDTHS = (16, 32, 64, 128)  # tl.dot needs >= 16, tl.arange a power of two; the tiles are sized for <= 128


@jit
def blockwise_attention_kernel(Q, K, V, O, LSE,  # pointers to the first number of q, k, v, the output, the lse
                               stride_qb, stride_qn, stride_kb, stride_km, stride_vb, stride_vm, stride_ob, stride_on,
                               n, m, qk_scale,  # queries, keys, and the scale times log2(e)
                               D_K: tl.constexpr, D_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One program: query tile ``program_id(0)`` of batch·head ``program_id(1)``, all its key blocks in order.

    Q, K, V, O point at (B·h, n or m, d) arrays whose rows are contiguous; LSE at a contiguous (B·h, n) one.
    """
    tile = tl.program_id(0)
    if CAUSAL:  # the tiles at the bottom have the most key blocks: start them first, so none is left for last
        tile = tl.num_programs(0) - 1 - tile
    bh = tl.program_id(1).to(tl.int64)  # int64: bh · stride passes 2**31 for large B·h·n·d
    i0 = tile * BLOCK_M  # the tile's first query
    rows = i0 + tl.arange(0, BLOCK_M)  # (n_blk,) its queries; those >= n are padding, loaded as 0, never stored
    d_k, d_v = tl.arange(0, D_K), tl.arange(0, D_V)
    q = tl.load(Q + bh * stride_qb + rows[:, None] * stride_qn + d_k[None, :],
                mask=rows[:, None] < n, other=0.0)  # (n_blk, d_k), loaded once, kept on chip
    s_max = tl.full([BLOCK_M], float("-inf"), tl.float32)  # (n_blk,) running maximum, s̃_max,0 (in base 2)
    z = tl.zeros([BLOCK_M], tl.float32)  # (n_blk,) running sum Z_0
    acc = tl.zeros([BLOCK_M, D_V], tl.float32)  # (n_blk, d_v) running sum of values acc_0
    j_whole = m // BLOCK_N * BLOCK_N  # the blocks before key j_whole hold m_blk real keys each
    j_stop = m
    if CAUSAL:  # keys past the tile's last query (or past n) are in its future: skipped, never loaded
        j_whole = tl.minimum(j_whole, i0 // BLOCK_N * BLOCK_N)  # blocks ending before query i0: seen whole
        j_stop = tl.minimum(j_stop, tl.minimum(n, i0 + BLOCK_M))
    for masked in tl.static_range(2):  # unrolled when compiled: first the blocks every query sees whole, unmasked;
        lo = j_whole if masked else 0  # then the blocks on the diagonal or holding the last key, masked
        hi = j_stop if masked else j_whole
        for j0 in range(lo, hi, BLOCK_N):  # key block u = j0 // BLOCK_N (0, 1, ...)
            cols = j0 + tl.arange(0, BLOCK_N)  # (m_blk,) its keys
            k = tl.load(K + bh * stride_kb + cols[:, None] * stride_km + d_k[None, :],
                        mask=cols[:, None] < m, other=0.0)  # (m_blk, d_k)
            v = tl.load(V + bh * stride_vb + cols[:, None] * stride_vm + d_v[None, :],
                        mask=cols[:, None] < m, other=0.0)  # (m_blk, d_v)
            # step 1: the scores of this tile against block u, unscaled: (n_blk, d_k) @ (d_k, m_blk)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (n_blk, m_blk), float32
            if masked:  # forbidden pairs: score -inf, weight 0
                allowed = cols[None, :] < m
                if CAUSAL:
                    allowed = allowed & (rows[:, None] >= cols[None, :])
                s = tl.where(allowed, s, float("-inf"))
            # step 2, eq-ch7-running-max: s̃_max,u+1, from the largest unscaled score of each row (base 2)
            s_max_new = tl.maximum(s_max, tl.max(s, axis=1) * qk_scale)
            # step 3: the exponentials measured from the new maximum, one multiply-add and a power of 2 each
            p = tl.exp2(s * qk_scale - s_max_new[:, None])  # (n_blk, m_blk)
            rescale = tl.exp2(s_max - s_max_new)  # (n_blk,) exp(s̃_max,u - s̃_max,u+1)
            # step 4, eq-ch7-running-sum: Z_u rescaled to the new maximum, plus block u's terms
            z = z * rescale + tl.sum(p, axis=1)
            # step 5, eq-ch7-running-acc: the same for acc, plus (n_blk, m_blk) @ (m_blk, d_v), added on chip
            acc = tl.dot(p.to(v.dtype), v, acc * rescale[:, None], input_precision=DOT_PRECISION)
            s_max = s_max_new  # s̃_max,u+1
    # step 6, eq-ch7-final: divide once, after the last block
    out = acc / z[:, None]  # (n_blk, d_v)
    tl.store(O + bh * stride_ob + rows[:, None] * stride_on + d_v[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < n)
    # step 7, eq-ch7-lse: s_max + log2(z) is the log-sum-exp in base 2; times ln 2 it is the natural one
    tl.store(LSE + bh * n + rows, (s_max + tl.log2(z)) * 0.6931471805599453, mask=rows < n)


# ---------------------------------------------------------------- launching it


def where_it_runs(device):
    """``"compiled"`` (a GPU kernel) or ``"interpreter"`` (Triton's interpreter): how tensors on ``device`` run.

    The interpreter runs in a process that has no CUDA GPU (this module then sets ``TRITON_INTERPRET=1`` before
    importing Triton) or where ``TRITON_INTERPRET=1`` was set by hand; CPU tensors need it. Raises
    ``KernelUnavailable``, one sentence saying why, where the kernel cannot run.
    """
    if triton is None:
        if (platform.system(), platform.machine()) == ("Linux", "x86_64"):  # it could be: say how
            raise KernelUnavailable("Triton is not installed: on Linux x86-64 `pip install triton` adds it (a CUDA "
                                    "build of torch brings the version it needs); until then the Triton kernel "
                                    "cannot run, the rest of the course can")
        raise KernelUnavailable(
            f"Triton is not installed: it ships for Linux on x86-64 only, and this is {platform.system()} on "
            f"{platform.machine()}; the Triton kernel cannot run here, the rest of the course can")
    device = torch.device(device)
    if device.type not in ("cuda", "cpu"):
        raise KernelUnavailable(f"Triton runs kernels on CUDA GPUs, or on the CPU through its interpreter; these "
                                f"tensors are on {device}: move them with .cpu() or .cuda()")
    if type(blockwise_attention_kernel).__name__ == "InterpretedFunction":
        return "interpreter"  # CPU tensors, or CUDA tensors copied to the CPU and back
    if device.type == "cpu":
        raise KernelUnavailable("this Python process compiles Triton kernels for a GPU and these tensors are on the "
                                "CPU: move them with .cuda(), or start Python with TRITON_INTERPRET=1 (or import "
                                "this module before Triton on a machine without a GPU) to interpret the kernel")
    return "compiled"


def attention_forward(q, k, v, *, causal=False, scale=None, tiles=None):
    """Run ``blockwise_attention_kernel``: the attention output and each query's log-sum-exp (no autograd).

    Parameters
    ----------
    q, k, v : torch.Tensor, (..., n, d_k), (..., m, d_k), (..., m, d_v)
        One type (float16, bfloat16, float32) and one device; d_k, d_v in ``HEAD_WIDTHS``.
    causal : bool
        Query i sees keys 0 … i (top-left, as torch's ``is_causal``); blocks above the diagonal are skipped.
    scale : float, optional
        The score scale, 1/√d_k unless given.
    tiles : tuple, optional
        (BLOCK_M, BLOCK_N, num_warps, num_stages); ``default_tiles`` unless given.

    Returns
    -------
    out : torch.Tensor, (..., n, d_v), the type of q
    lse : torch.Tensor, (..., n), float32: log Σ_j exp(scale · q_i · k_j), eq-ch7-lse

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v = (torch.randn(2, 40, 16, generator=g) for _ in range(3))  # CPU: Triton's interpreter
    >>> out, lse = attention_forward(q, k, v, causal=True)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> out.shape, lse.shape, bool(torch.allclose(out, ref, atol=1e-5))
    (torch.Size([2, 40, 16]), torch.Size([2, 40]), True)
    """
    scale = check_kernel_inputs(q, k, v, scale, HEAD_WIDTHS)
    interpret = where_it_runs(q.device) == "interpreter"
    if interpret and q.dtype == torch.bfloat16:
        raise TypeError("Triton's interpreter multiplies bfloat16 tiles wrongly (Triton issue 11584): on the CPU "
                        "use float16 or float32; bfloat16 runs on a GPU")
    if q.dtype == torch.bfloat16 and torch.cuda.get_device_capability(q.device) < (8, 0):
        raise TypeError(f"bfloat16 needs a GPU of compute capability 8.0 or newer (tensor cores for it); this "
                        f"{torch.cuda.get_device_name(q.device)} has {torch.cuda.get_device_capability(q.device)}: "
                        f"use float16")
    tiles = default_tiles(q.shape[-1], q.dtype, q.device) if tiles is None else check_tiles(tiles)
    block_m, block_n, num_warps, num_stages = tiles
    *batch, n, d_k = q.shape
    m, d_v = v.shape[-2:]
    q3, k3, v3 = (t.reshape(-1, t.shape[-2], t.shape[-1]) for t in (q, k, v))  # (..., n, d) -> (B·h, n, d)
    q3, k3, v3 = (t if t.stride(-1) == 1 else t.contiguous() for t in (q3, k3, v3))  # each row in one piece
    out = torch.empty((q3.shape[0], n, d_v), dtype=q.dtype, device=q.device)  # (B·h, n, d_v)
    lse = torch.empty((q3.shape[0], n), dtype=torch.float32, device=q.device)  # (B·h, n)
    grid = (triton.cdiv(n, block_m), q3.shape[0])  # one program per (query tile, batch·head)
    blockwise_attention_kernel[grid](
        q3, k3, v3, out, lse, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
        out.stride(0), out.stride(1), n, m, scale * math.log2(math.e),
        D_K=d_k, D_V=d_v, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else None,  # float32: true float32 products, not TF32
        num_warps=num_warps, num_stages=num_stages)
    return out.reshape(*batch, n, d_v), lse.reshape(*batch, n)


# ---------------------------------------------------------------- the backward pass, and autograd


def attention_backward(q, k, v, out, lse, d_out, *, causal=False, scale=None, block=None):
    """Gradients of attention with respect to q, k and v, tile by tile, from the forward's log-sum-exp.

    ``blockwise_attention_backward`` of chapter 7 in torch, on whatever device the tensors are, in float32
    (float64 stays float64): the same loops (key blocks outside, query tiles inside) and the same steps, each
    line naming its equation.
    It never holds more than a few (..., block, block) tiles; ``block`` is 1024 unless given (at B·h = 64
    heads a float32 tile then takes 256 MiB).

    Parameters
    ----------
    q, k, v, causal, scale
        As given to ``attention_forward``.
    out, lse : torch.Tensor, (..., n, d_v) and (..., n)
        What ``attention_forward`` returned.
    d_out : torch.Tensor, (..., n, d_v)
        ∂L/∂out.

    Returns
    -------
    dq, dk, dv : torch.Tensor, the shapes and types of q, k, v

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v, d_out = (torch.randn(3, 40, 16, generator=g, dtype=torch.float64) for _ in range(4))
    >>> w = torch.softmax(q @ k.mT / 4, dim=-1)                                 # √d_k = 4
    >>> lse = torch.logsumexp(q @ k.mT / 4, dim=-1)
    >>> grads = attention_backward(q, k, v, w @ v, lse, d_out, block=16)
    >>> qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    >>> (torch.softmax(qr @ kr.mT / 4, dim=-1) @ vr).backward(d_out)             # autograd, the (n, m) way
    >>> all(torch.allclose(a, b.grad) for a, b in zip(grads, (qr, kr, vr)))
    True
    """
    n, d_k = q.shape[-2:]
    m = k.shape[-2]
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    block = 1024 if block is None else block
    dtypes = q.dtype, k.dtype, v.dtype
    work = torch.float64 if q.dtype == torch.float64 else torch.float32  # 16-bit inputs: float32 arithmetic
    q, k, v, out, d_out = (t.to(work) for t in (q, k, v, out, d_out))
    lse = lse.to(work)[..., None]  # (..., n) -> (..., n, 1)
    # eq-ch7-delta: δ = rowsum(dO ⊙ O) = rowsum(dA ⊙ A), one number per query, (..., n, 1)
    delta = (d_out * out).sum(dim=-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, m, block):  # key block u = j0 // block: its dK and dV are finished here
        cols = slice(j0, min(j0 + block, m))
        k_blk, v_blk = k[..., cols, :], v[..., cols, :]  # (..., m_blk, d_k), (..., m_blk, d_v)
        for i0 in range(0, n, block):  # query tiles
            rows = slice(i0, min(i0 + block, n))
            if causal and j0 > rows.stop - 1:
                continue  # every key of this block lies in the future of every query of the tile
            # the forward's scores of this tile against block u: (..., n_blk, d_k) @ (..., d_k, m_blk)
            p = (q[..., rows, :] * scale) @ k_blk.mT  # (..., n_blk, m_blk)
            if causal and cols.stop - 1 > rows.start:  # the tile crosses the diagonal: forbidden pairs get -inf
                gap = torch.arange(rows.start, rows.stop, device=q.device)[:, None] - torch.arange(
                    cols.start, cols.stop, device=q.device)  # (n_blk, m_blk): i - j
                p.masked_fill_(gap < 0, float("-inf"))
            p.sub_(lse[..., rows, :]).exp_()  # eq-ch7-recompute: p_ij = exp(s_ij - lse_i), in place
            do_blk = d_out[..., rows, :]  # (..., n_blk, d_v)
            dv[..., cols, :] += p.mT @ do_blk  # eq-ch5-dv: (..., m_blk, n_blk) @ (..., n_blk, d_v)
            ds = do_blk @ v_blk.mT  # eq-ch5-da: dA of this tile, (..., n_blk, d_v) @ (..., d_v, m_blk)
            ds.sub_(delta[..., rows, :])  # eq-ch5-softmax-backward with eq-ch7-delta: da_ij - δ_i
            ds.mul_(p)  # ... times p_ij: dS̃ of this tile, in place, (..., n_blk, m_blk)
            ds.mul_(scale)  # eq-ch5-scale: dS = dS̃ / √d_k
            dq[..., rows, :] += ds @ k_blk  # eq-ch5-dq: (..., n_blk, m_blk) @ (..., m_blk, d_k)
            dk[..., cols, :] += ds.mT @ q[..., rows, :]  # eq-ch5-dk: (..., m_blk, n_blk) @ (..., n_blk, d_k)
            del p, ds  # free this tile before the next one exists
    return tuple(g.to(dtype) for g, dtype in zip((dq, dk, dv), dtypes))


class FlashAttention(torch.autograd.Function):
    """The kernel's forward, and ``attention_backward`` driven by the log-sum-exp it saved: one autograd node."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, tiles):
        out, lse = attention_forward(q, k, v, causal=causal, scale=scale, tiles=tiles)
        ctx.save_for_backward(q, k, v, out, lse)  # the (..., n) log-sum-exp, never the (..., n, m) weights
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, out, lse, d_out, causal=ctx.causal, scale=ctx.scale)
        return dq, dk, dv, None, None, None  # no gradient for causal, scale, tiles


def flash_attention(q, k, v, *, causal=False, scale=None, tiles=None):
    """softmax(q kᵀ · scale) v by the Triton kernel, differentiable: torch's autograd calls ``attention_backward``.

    The arguments and the output are those of ``attention_forward`` (without the log-sum-exp, which autograd
    keeps for the backward pass). Equal, up to rounding, to
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k, v = (torch.randn(2, 40, 16, generator=g, requires_grad=True) for _ in range(3))
    >>> flash_attention(q, k, v, causal=True).sum().backward()                 # CPU: Triton's interpreter
    >>> q.grad.shape, k.grad.shape, v.grad.shape
    (torch.Size([2, 40, 16]), torch.Size([2, 40, 16]), torch.Size([2, 40, 16]))
    """
    return FlashAttention.apply(q, k, v, bool(causal), scale, tiles)
