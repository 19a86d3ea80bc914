"""Masks for a padded batch (chapter 6): combining them, the matching query mask, and PyTorch's opposite convention.

Axis names (as in ``attention.py`` and ``multihead.py``):

    B    sequences in the batch
    h    heads
    n    queries (positions that ask)
    m    keys (positions that are looked at)

Masks are boolean and **True means "may attend"**. ``attention.causal_mask``
builds the ``(n, m)`` causal mask and ``attention.padding_mask`` the ``(B, 1, m)``
key padding mask; this module combines masks, builds the ``(B, n, 1)`` mask of
real query positions, and converts to and from the boolean arguments of
``torch.nn.MultiheadAttention``, where **True means "blocked"**:

    ours (B, 1, m) key mask   <->  key_padding_mask (B, m),          True = ignore this key
    ours (n, m) or (B, n, m)  <->  attn_mask (n, m) or (B * h, n, m), True = not allowed

(``torch.nn.functional.scaled_dot_product_attention`` reads a boolean
``attn_mask`` our way, True = may attend, and needs no conversion.) The
converters take and return numpy arrays; ``np.asarray`` accepts CPU tensors and
``torch.from_numpy`` turns the results into tensors, so torch is never imported here.

Masks built from positions (``position_mask``, ``sliding_window_mask``) are in ``position_masks.py``
and reachable here too.
"""

import numpy as np

from ._checks import is_int, require_positive_int
from .attention import padding_mask
from .position_masks import position_mask, sliding_window_mask  # noqa: F401  (reachable here as before)


def _as_bool(mask, name, hint="for a 0/1 array write mask.astype(bool)"):
    arr = np.asarray(mask)
    if arr.dtype != np.bool_:
        raise ValueError(f"{name} must be boolean, got dtype {arr.dtype} (shape {arr.shape}); {hint}")
    return arr


def combine_masks(*masks):
    """Logical AND of boolean masks, broadcast together: a pair may attend only if every mask allows it.

    Parameters
    ----------
    *masks : array_like of bool
        One or more masks whose shapes broadcast together, for example the
        ``(B, 1, m)`` padding mask and the ``(n, m)`` causal mask.

    Returns
    -------
    ndarray of bool, the broadcast shape (``(B, n, m)`` in the example)

    Raises ValueError for no mask, a mask that is not boolean, and shapes that
    do not broadcast (the message lists them all).

    Examples
    --------
    >>> from mha_lessons.attention import causal_mask
    >>> both = combine_masks(padding_mask([3, 2], 3), causal_mask(3))   # (2, 1, 3) & (3, 3)
    >>> both.shape
    (2, 3, 3)
    >>> both[1].astype(int)                                              # sentence 1 has 2 real tokens
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 0]])
    """
    if not masks:
        raise ValueError("combine_masks needs at least one mask")
    arrays = [_as_bool(mask, f"mask {i}") for i, mask in enumerate(masks)]
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        listed = ", ".join(str(a.shape) for a in arrays)
        raise ValueError(
            f"masks of shapes {listed} do not broadcast together; line their axes up as (B, n, m), "
            f"with size 1 where a mask is the same along an axis"
        ) from None
    combined = np.ones(shape, dtype=bool)
    for a in arrays:
        combined &= a  # a broadcasts to the full shape
    return combined


def query_padding_mask(lengths, n):
    """Boolean ``(B, n, 1)`` mask, True where query position i of sequence b is a real token (i < lengths[b]).

    The last axis of size 1 broadcasts over the keys of a ``(B, n, m)`` mask and
    over the features of a ``(B, n, d_model)`` output, so the same array selects
    the real rows of either.

    Parameters
    ----------
    lengths : sequence of int, (B,)
        Number of real tokens in each sequence, between 0 and n.
    n : int
        Padded length.

    Returns
    -------
    ndarray of bool, (B, n, 1)

    Examples
    --------
    >>> query_padding_mask([3, 1], 3)[..., 0].astype(int)   # (B, n, 1) -> (B, n) for printing
    array([[1, 1, 1],
           [1, 0, 0]])
    """
    return np.swapaxes(padding_mask(lengths, n), -1, -2)  # (B, 1, n) -> (B, n, 1)


def to_torch_key_padding_mask(mask):
    """Our key mask (True = may attend) as torch's ``key_padding_mask`` (True = ignore this key).

    Parameters
    ----------
    mask : array_like of bool, (B, 1, m) as made by ``padding_mask``, or (B, m)
        One row per sequence, the same for every query.

    Returns
    -------
    ndarray of bool, (B, m)
        ``~mask`` without the query axis. Pass it as
        ``torch.nn.MultiheadAttention(...)(..., key_padding_mask=torch.from_numpy(result))``.

    Raises ValueError for a mask that differs between queries (middle axis
    larger than 1): that is an ``attn_mask``, see ``to_torch_attn_mask``.

    Examples
    --------
    >>> to_torch_key_padding_mask(padding_mask([2, 3], 3)).astype(int)
    array([[0, 0, 1],
           [0, 0, 0]])
    """
    mask = _as_bool(mask, "mask")
    if mask.ndim == 3 and mask.shape[1] == 1:
        mask = mask[:, 0, :]  # (B, 1, m) -> (B, m)
    if mask.ndim != 2:
        raise ValueError(
            f"a key padding mask has shape (B, 1, m) or (B, m), got shape {mask.shape}; "
            f"a mask that differs between queries goes to torch as attn_mask (see to_torch_attn_mask)"
        )
    return ~mask


def to_torch_attn_mask(mask, num_heads):
    """Our mask (True = may attend) as ``torch.nn.MultiheadAttention``'s boolean ``attn_mask`` (True = not allowed).

    Parameters
    ----------
    mask : array_like of bool, (n, m) or (B, n, m)
        An (n, m) mask serves every sequence; a (B, n, m) mask has one (n, m)
        page per sequence.
    num_heads : int
        torch wants a 3-D mask with one page per sequence *and head*.

    Returns
    -------
    ndarray of bool, (n, m) or (B * h, n, m)
        ``~mask``; for a 3-D mask each page repeated h times, page ``b * h + i``
        belonging to sequence b and head i (the order torch reads them in).

    Examples
    --------
    >>> from mha_lessons.attention import causal_mask
    >>> to_torch_attn_mask(causal_mask(3), num_heads=4).astype(int)
    array([[0, 1, 1],
           [0, 0, 1],
           [0, 0, 0]])
    >>> to_torch_attn_mask(np.ones((2, 3, 5), dtype=bool), num_heads=4).shape
    (8, 3, 5)
    """
    mask = _as_bool(mask, "mask")
    require_positive_int(num_heads, "num_heads")
    if mask.ndim == 2:
        return ~mask
    if mask.ndim != 3:
        raise ValueError(f"torch's attn_mask comes from a mask of shape (n, m) or (B, n, m), got shape {mask.shape}")
    return np.repeat(~mask, num_heads, axis=0)  # (B, n, m) -> (B * h, n, m), page b * h + i


def from_torch_masks(key_padding_mask=None, attn_mask=None, *, num_heads=1):
    """Our mask (True = may attend) from ``torch.nn.MultiheadAttention``'s boolean masks (True = blocked).

    Parameters
    ----------
    key_padding_mask : array_like of bool, (B, m), optional
        True = ignore this key.
    attn_mask : array_like of bool, (n, m) or (B * h, n, m), optional
        True = not allowed. A 3-D mask must be the same for all heads of a
        sequence, since ``multihead_attention`` uses one mask for every head.
    num_heads : int
        Needed to read a 3-D ``attn_mask``.

    Returns
    -------
    ndarray of bool
        The negated masks combined: (B, 1, m) from a key padding mask alone,
        (n, m) from a 2-D attn_mask alone, (B, n, m) otherwise. Pass it as
        ``mask=`` to ``multihead_attention``.

    Float (additive) torch masks are rejected: one that holds only 0 and -inf
    becomes torch's boolean convention with ``attn_mask != 0`` (True where -inf).
    Any float ``attn_mask`` is a score bias: pass it to ``multihead_attention`` as
    ``bias=``, an (n, m) one as it is, a (B * h, n, m) one reshaped to (B, h, n, m).

    Examples
    --------
    >>> kpm = np.array([[False, False, True]])                     # torch: ignore key 2
    >>> from_torch_masks(key_padding_mask=kpm).astype(int)           # (B, 1, m)
    array([[[1, 1, 0]]])
    """
    if key_padding_mask is None and attn_mask is None:
        raise ValueError("from_torch_masks needs a key_padding_mask, an attn_mask, or both")
    masks = []
    if key_padding_mask is not None:
        kpm = _as_bool(key_padding_mask, "key_padding_mask")
        if kpm.ndim != 2:
            raise ValueError(f"torch's key_padding_mask has shape (B, m), got shape {kpm.shape}")
        masks.append(~kpm[:, None, :])  # (B, m) -> (B, 1, m)
    if attn_mask is not None:
        blocked = _as_bool(attn_mask, "attn_mask", "a float attn_mask is added to the scores (pass it as bias=); "
                           "one that holds only 0 and -inf becomes boolean with attn_mask != 0")
        if blocked.ndim == 3:
            pages, given = blocked.shape[0], blocked.shape  # the shape as given, for the messages
            if not is_int(num_heads) or num_heads < 1 \
                    or pages % num_heads:
                raise ValueError(
                    f"a 3-D attn_mask of shape {blocked.shape} needs num_heads dividing its {pages} pages, "
                    f"got num_heads = {num_heads!r}"
                )
            # (B * h, n, m) -> (B, h, n, m): page b * h + i is sequence b, head i
            blocked = blocked.reshape(pages // num_heads, num_heads, *blocked.shape[1:])
            if not np.all(blocked == blocked[:, :1]):
                raise ValueError(
                    f"the attn_mask of shape {given} differs between the {num_heads} heads of a sequence; "
                    f"multihead_attention uses one mask for every head"
                )
            blocked = blocked[:, 0]  # (B, h, n, m) -> (B, n, m)
        elif blocked.ndim != 2:
            raise ValueError(f"torch's attn_mask has shape (n, m) or (B * h, n, m), got shape {blocked.shape}")
        masks.append(~blocked)
    return combine_masks(*masks)


def unmask_empty_rows(mask):
    """The mask with every row that allows no key at all opened to every key.

    Under left padding, a causal mask combined with a key padding mask leaves the
    leading padded queries with no key; a softmax over an empty row is 0/0, which
    some implementations turn into NaN (``torch.nn.MultiheadAttention``) and then
    into NaN gradients. Hugging Face Transformers' ``_unmask_unattended`` (its later
    4.x releases) did what this does: let such rows attend to everything. Their outputs are garbage, as for any
    padded query, but finite; rows that allow at least one key are unchanged.

    Parameters
    ----------
    mask : array_like of bool, (..., n, m)

    Returns
    -------
    ndarray of bool, same shape

    Examples
    --------
    >>> unmask_empty_rows(np.array([[False, False], [True, False]])).astype(int)
    array([[1, 1],
           [1, 0]])
    """
    mask = _as_bool(mask, "mask")
    if mask.ndim < 2:
        raise ValueError(f"mask must have query and key axes (..., n, m), got shape {mask.shape}")
    return mask | ~mask.any(axis=-1, keepdims=True)  # (..., n, m) | (..., n, 1)
