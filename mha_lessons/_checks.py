"""Input checks shared by the public functions of every chapter's code.

Every public function turns bad input into a ``ValueError`` whose message names
the shapes or numbers involved, so that a learner never has to decode a numpy
broadcasting traceback from deep inside the package.
"""

import sys

import numpy as np


def is_bfloat16(dtype):
    """True for ``ml_dtypes.bfloat16``, the bfloat16 numpy lacks; ml_dtypes is never imported here.

    An array can only hold bfloat16 numbers once its maker has imported ml_dtypes, so the package asks
    ``sys.modules`` instead of importing it: the package still needs only numpy.
    """
    ml_dtypes = sys.modules.get("ml_dtypes")
    return ml_dtypes is not None and np.dtype(dtype) == ml_dtypes.bfloat16


def as_float_array(x, name):
    """Return ``x`` as a floating-point array, keeping float16/32/64 and bfloat16 as they are.

    Integer and boolean input is converted to float64 (documented behaviour of
    every public function); anything else (strings, objects, complex numbers)
    is rejected. bfloat16 is ``ml_dtypes.bfloat16`` (the type JAX and TensorFlow give numpy).
    """
    arr = np.asarray(x)
    if np.issubdtype(arr.dtype, np.floating) or is_bfloat16(arr.dtype):
        return arr
    if np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        return arr.astype(np.float64)
    raise ValueError(f"{name} must hold real numbers, got an array of dtype {arr.dtype}")


def working_dtype(dtype):
    """The floating type the arithmetic runs in: float32 for float16 and bfloat16 input, the type itself otherwise.

    float16 holds numbers only up to 65504 and about 3 decimal digits: a score of 256 · 256 · 80 / √80,
    or a sum of 66,000 ones, is already infinite. bfloat16 has float32's range but only about 2 decimal
    digits: a running sum of ones stops growing at 256. Libraries that take half-precision input (cuBLAS,
    PyTorch, FlashAttention) therefore multiply and add in float32 and round only the result to 16 bits;
    the package does the same.

    Examples
    --------
    >>> working_dtype(np.float16), working_dtype(np.float32), working_dtype(np.float64)
    (dtype('float32'), dtype('float32'), dtype('float64'))
    """
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 or is_bfloat16(dtype) else dtype


def require_ndim(arr, name, min_ndim, layout):
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions {layout}, got shape {arr.shape}"
        )


def require_nonempty(length, name, axis_name):
    if length < 1:
        raise ValueError(f"{name} has {axis_name} = {length}; a sequence needs at least one position")


def broadcast_batch(shapes_by_name):
    """Broadcast leading batch shapes, naming the arrays when they do not fit."""
    try:
        return np.broadcast_shapes(*shapes_by_name.values())
    except ValueError:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes_by_name.items())
        raise ValueError(f"batch dimensions do not broadcast: {listed}") from None


def check_same_shape(array, name, shape, what):
    """``array`` as a float array of exactly ``shape``; ValueError naming both shapes otherwise.

    For a gradient that must have the shape of what it is the gradient of (``what``).
    """
    array = as_float_array(array, name)
    if array.shape != tuple(shape):
        raise ValueError(f"{name} has shape {array.shape}, but {what} has shape {tuple(shape)}; they must match")
    return array


def is_int(value):
    """True for a Python or numpy integer, False for a bool (which Python counts as an int) and anything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def require_positive_int(value, name):
    """Raise ValueError unless ``value`` is an int (not a bool) of at least 1."""
    if not is_int(value):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")


def require_positive_ints(**values):
    """Raise ValueError unless every keyword's value is a positive integer (``require_positive_int``), naming it."""
    for name, value in values.items():
        require_positive_int(value, name)


def require_int_at_least(value, name, minimum):
    """``value`` as an int, or ValueError unless it is an int (not a bool) of at least ``minimum``."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, got {value!r}")
    return int(value)


def require_softmax_axis(x, axis):
    """Raise ValueError unless ``x`` has a non-empty ``axis`` (what every softmax needs)."""
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for x of shape {x.shape}")
    if x.shape[axis] == 0:
        raise ValueError(f"x of shape {x.shape} has no entries along axis {axis}; the softmax needs at least one")


def check_num_heads(d_model, num_heads):
    require_positive_int(num_heads, "num_heads")
    require_positive_int(d_model, "d_model")
    if d_model % num_heads:
        raise ValueError(
            f"d_model = {d_model} is not divisible by num_heads = {num_heads}: "
            f"each head gets d_model / num_heads = {d_model / num_heads:g} features, "
            f"which must be a whole number"
        )


def head_widths(d_model, num_heads, d_k=None, d_v=None):
    """``(d_k, d_v)``, each d_model / h unless given; h must divide d_model only for a width not given.

    Examples
    --------
    >>> head_widths(512, 8), head_widths(1024, 128, d_k=128, d_v=128)
    ((64, 64), (128, 128))
    """
    require_positive_int(d_model, "d_model")
    require_positive_int(num_heads, "num_heads")
    if d_k is None or d_v is None:
        check_num_heads(d_model, num_heads)
    d_k = d_model // num_heads if d_k is None else d_k
    d_v = d_model // num_heads if d_v is None else d_v
    require_positive_int(d_k, "d_k")
    require_positive_int(d_v, "d_v")
    return d_k, d_v


def layer_sizes(n, d_model, num_heads, m, batch, d_k=None, d_v=None):
    """Checked sizes: m (n unless given), and the widths d_k, d_v of a head (d_model / h unless given)."""
    d_k, d_v = head_widths(d_model, num_heads, d_k, d_v)
    m = n if m is None else m
    for name, value in (("n", n), ("m", m), ("batch", batch)):
        require_positive_int(value, name)
    return m, d_k, d_v


def require_shapes(arrays, expected, sizes):
    """Raise ValueError naming the first array of ``arrays`` (name -> array or None) not of ``expected[name]``.

    ``sizes`` completes the message ("... expected (8, 4) for d_model = 8, h = 2"); None is skipped
    (a bias that is absent).
    """
    for name, shape in expected.items():
        value = arrays[name]
        if value is not None and value.shape != shape:
            raise ValueError(f"{name} has shape {value.shape}, expected {shape} for {sizes}")


def check_mask(mask, target_shape):
    """Return ``mask`` as a boolean array that broadcasts to ``target_shape``."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise ValueError(
            f"mask must be boolean (True = may attend), got dtype {mask.dtype}; "
            f"for a 0/1 array write mask.astype(bool)"
        )
    try:
        shape = np.broadcast_shapes(mask.shape, target_shape)
    except ValueError:
        shape = None
    if shape != tuple(target_shape):
        raise ValueError(
            f"mask of shape {mask.shape} does not broadcast to the scores' shape {tuple(target_shape)}"
        )
    return mask


def check_bias(bias, target_shape):
    """Return an additive score ``bias`` as a float array that broadcasts to ``target_shape``.

    -inf is allowed (that pair gets weight 0, as a False in a mask); +inf is not (it would
    make its row NaN).
    """
    bias = as_float_array(bias, "bias")
    try:
        shape = np.broadcast_shapes(bias.shape, target_shape)
    except ValueError:
        shape = None
    if shape != tuple(target_shape):
        raise ValueError(f"bias of shape {bias.shape} does not broadcast to the scores' shape {tuple(target_shape)}")
    if np.any(np.isposinf(bias)):
        raise ValueError(f"bias of shape {bias.shape} holds +inf; a bias may be -inf (never attend) but not +inf, "
                         f"which would make the whole row NaN")
    return bias


def check_attention_inputs(q, k, v, mask):
    """Validate the inputs of scaled dot-product attention; return them as float arrays.

    q (..., n, d_k), k (..., m, d_k), v (..., m, d_v), mask boolean and
    broadcastable to (..., n, m) or None.
    """
    q, k, v = (as_float_array(a, name) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    require_ndim(q, "q", 2, "(..., n, d_k)")
    require_ndim(k, "k", 2, "(..., m, d_k)")
    require_ndim(v, "v", 2, "(..., m, d_v)")
    n, d_k = q.shape[-2:]
    m = k.shape[-2]
    require_nonempty(n, f"q of shape {q.shape}", "n")
    require_nonempty(m, f"k of shape {k.shape}", "m")
    if d_k < 1:
        raise ValueError(f"q of shape {q.shape} has d_k = 0; queries and keys need at least one feature")
    if k.shape[-1] != d_k:
        raise ValueError(
            f"query and key widths differ: q has d_k = {d_k} (shape {q.shape}), "
            f"k has {k.shape[-1]} (shape {k.shape}); the dot product needs them equal"
        )
    if v.shape[-2] != m:
        raise ValueError(
            f"keys and values differ in length: k has m = {m} (shape {k.shape}), "
            f"v has {v.shape[-2]} (shape {v.shape}); each key needs exactly one value"
        )
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2]})
    if mask is not None:
        mask = check_mask(mask, batch + (n, m))
    halves = [a.dtype for a in (q, k, v) if a.dtype == np.float16 or is_bfloat16(a.dtype)]
    if len(set(halves)) > 1:  # numpy has no common type for the two (torch computes such a pair in float32)
        raise TypeError(f"q, k and v mix float16 and bfloat16 ({q.dtype}, {k.dtype}, {v.dtype}); numpy has no "
                        f"type for both: convert them to one, e.g. with .astype(np.float32)")
    return q, k, v, mask


def check_attention_call(q, k, v, mask=None, bias=None):
    """Everything ``scaled_dot_product_attention(q, k, v, mask, bias)`` needs checked, in one call.

    Returns q, k, v as float arrays, the mask as a boolean array (or None) and the bias as a float
    array (or None), each broadcastable as the function documents.
    """
    q, k, v, mask = check_attention_inputs(q, k, v, mask)
    return q, k, v, mask, check_attention_bias(q, k, v, bias)


def check_attention_bias(q, k, v, bias):
    """``bias`` checked against checked q (..., n, d_k), k (..., m, d_k) and v (..., m, d_v).

    It must broadcast to the scores' shape (..., n, m).
    """
    if bias is None:
        return None
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return check_bias(bias, batch + (q.shape[-2], k.shape[-2]))


def check_layer_arrays(x_q, x_k, x_v, mask, d_model, expecting, *, kdim=None, vdim=None):
    """Validate a layer's token arrays and mask against a width d_model; return the arrays as floats.

    ``expecting`` completes the message for a wrong width: "x_q has shape ..., but {expecting} d_model = ...".
    Keys and values are ``kdim`` and ``vdim`` wide (each d_model unless given).
    """
    arrays = []
    kdim = d_model if kdim is None else kdim
    vdim = d_model if vdim is None else vdim
    widths = (("x_q", x_q, "n", "d_model", d_model),  # a width equal to d_model is called d_model
              ("x_k", x_k, "m", "d_model" if kdim == d_model else "kdim", kdim),
              ("x_v", x_v, "m", "d_model" if vdim == d_model else "vdim", vdim))
    for name, x, axis, width_name, width in widths:
        x = as_float_array(x, name)
        require_ndim(x, name, 2, f"(..., {axis}, {width_name})")
        require_nonempty(x.shape[-2], f"{name} of shape {x.shape}", axis)
        if x.shape[-1] != width:
            raise ValueError(f"{name} has shape {x.shape}, but {expecting} {width_name} = {width} features")
        arrays.append(x)
    x_q, x_k, x_v = arrays
    if x_k.shape[-2] != x_v.shape[-2]:
        raise ValueError(f"keys and values differ in length: x_k has shape {x_k.shape}, x_v has shape {x_v.shape}")
    batch = broadcast_batch({"x_q": x_q.shape[:-2], "x_k": x_k.shape[:-2], "x_v": x_v.shape[:-2]})
    if mask is not None:
        mask = check_mask(mask, batch + (x_q.shape[-2], x_k.shape[-2]))
    return x_q, x_k, x_v, mask
