"""What several test files share: random layer parameters, the tolerances for comparing gradients, and the
comparison of two results that only rounding may tell apart (``same_but_for_rounding``)."""

import math

import numpy as np

import mha_lessons as M


def random_params(rng, d_model, num_heads, bias=True):
    """Random weights *and random biases*: torch and init_params start biases at 0, which hides a dropped bias."""
    def draw(*shape):
        return rng.normal(scale=1 / math.sqrt(d_model), size=shape)

    weights = [draw(d_model, d_model) for _ in range(4)]
    biases = [draw(d_model) if bias else None for _ in range(4)]
    return M.MHAParams(num_heads, *weights, *biases)


# Against torch autograd: both sides evaluate the same exact formulas in float64, so they differ only by
# round-off, about 1e-16 per operation over a few dozen operations. rtol = 1e-10 leaves a wide margin and
# still catches any real mistake (the smallest one we know, a missing 1/√d_k with d_k = 4, is a factor 2).
RTOL = 1e-10
# Entries that cancel to (almost) 0 in exact arithmetic — the key bias's gradient is exactly 0 — keep only
# round-off, which is relative to the size of the gradient as a whole, not of the entry.
ATOL_REL = 1e-12
# Against central differences with eps = 1e-6: round-off of about ε_mach |L| / eps ≈ 1e-10 |L| plus truncation
# eps² |L'''| / 6 ≈ 1e-12 |L'''|; rtol = 1e-7 leaves a margin of 100 to 1000 above that.
FD_RTOL = 1e-7
FD_ATOL_REL = 1e-8


def close(ours, ref, scale=None, rtol=RTOL, atol_rel=ATOL_REL):
    """assert_allclose with an absolute slack at round-off level relative to `scale` (default: max |ref|)."""
    ref = np.asarray(ref)
    scale = np.abs(ref).max() if scale is None else scale
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol_rel * scale)


def same_but_for_rounding(ours, ref, err_msg="", ulps=1000):
    """Two results of computations that are equal in exact arithmetic: equal to within rounding, not bit for bit.

    Whatever went through a BLAS product or a reduction whose order a library chooses may come out in other
    bits on another machine, and even on the same machine: another shape or batch size takes another kernel,
    blocking or thread split, and MKL's results may change with the memory alignment of the very same numbers
    (Intel's "conditional numerical reproducibility", ``MKL_CBWR``). So a test states "the same numbers" as
    agreement to ``ulps`` units of the type's epsilon relative to the largest finite |ref|: far below any real
    difference (a missing term, a wrong mask, a leaked NaN), far above any summation order. NaN must stand where
    NaN stands and infinities must match, as ``assert_allclose`` checks.

    Exact equality stays right where it is guaranteed: integers and booleans, copies and moves of entries,
    element-wise operations with no sum, and zeros that IEEE arithmetic makes exact (a weight of exp(-inf),
    0 · x, a sum of exact zeros).
    """
    ours, ref = np.asarray(ours), np.asarray(ref)
    kind = np.result_type(ours.dtype, ref.dtype)
    eps = float(np.finfo(kind if np.issubdtype(kind, np.floating) else np.float64).eps)
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 1.0
    np.testing.assert_allclose(ours, ref, rtol=ulps * eps, atol=ulps * eps * scale, err_msg=err_msg)
