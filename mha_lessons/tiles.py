"""Tiles of the score matrix (chapter 7): which tiles a block-wise pass computes, and what covers each tile.

A tile is the part of the (n, m) scores where a block of queries, ``rows`` = slice(i0, i0 + n_blk),
meets a block of keys, ``cols`` = slice(j0, j0 + m_blk) (the names of ``blockwise.py``). A ``Tiling``
says how the scores are cut and which tiles a causal or sliding-window pass may skip, because no query
of the tile may see any key of the block; the block-wise forward and backward passes, and
``tiles_computed`` which counts their tiles, all ask it. The other helpers cut the part of a mask or of a
score bias that covers one tile, and forbid the pairs that the mask or causality forbids.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._checks import is_int


def check_block(value, name):
    """``value`` as an int: ValueError unless it is a positive integer (a number of positions per block)."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer (a number of positions per block), got {value!r}")
    return int(value)


def check_window(window):
    """True when a sliding window is given (a positive integer), False for None; ValueError otherwise."""
    if window is None:
        return False
    if not is_int(window) or window < 1:
        raise ValueError(f"window must be a positive integer (the keys each query sees), got {window!r}")
    return True


@dataclass(frozen=True)
class Tiling:
    """Query tiles of ``tile`` rows, key blocks of ``block_size`` columns, and the tiles a pass skips.

    With ``causal`` query i may see keys 0..i; with a ``window`` (causal too) only the keys j with
    0 <= i - j < window.

    Examples
    --------
    >>> tiling = Tiling(block_size=2, tile=2, causal=True)
    >>> [(rows.start, cols.start) for rows in tiling.query_tiles(4) for cols in tiling.key_blocks(4)
    ...  if not tiling.skips(rows, cols)]                           # the tiles on and below the diagonal
    [(0, 0), (2, 0), (2, 2)]
    """

    block_size: int
    tile: int
    causal: bool = False
    window: Optional[int] = None

    def query_tiles(self, n):
        """The rows of each query tile: slices of ``tile`` queries, the last maybe fewer."""
        return [slice(i0, min(i0 + self.tile, n)) for i0 in range(0, n, self.tile)]

    def key_blocks(self, m):
        """The columns of each key block: slices of ``block_size`` keys, the last maybe fewer (block u, counted
        from 0, starts at key u · block_size)."""
        return [slice(j0, min(j0 + self.block_size, m)) for j0 in range(0, m, self.block_size)]

    def skips(self, rows, cols):
        """True when no query of ``rows`` may see any key of ``cols``, so that the tile is never computed."""
        if self.causal and cols.start > rows.stop - 1:  # the block's first key comes after the tile's last query
            return True
        # with a window: the block's last key is older than the window of the tile's first query
        return self.window is not None and cols.stop - 1 < rows.start - self.window + 1

    def forbid(self, scores, mask, rows, cols):
        """Set to -inf, in place, the scores of a (..., n_blk, m_blk) tile that the mask or causality forbids."""
        allowed = None if mask is None else tile_of(mask, rows, cols)
        if self.causal:
            gap = np.arange(rows.start, rows.stop)[:, None] - np.arange(cols.start, cols.stop)  # (n_blk, m_blk): i - j
            future_ok = (gap >= 0) if self.window is None else (gap >= 0) & (gap < self.window)  # and in the window
            allowed = future_ok if allowed is None else allowed & future_ok
        if allowed is not None:
            np.copyto(scores, -np.inf, where=~allowed)  # weight exp(-inf) = 0


def with_tile_axes(array):
    """A mask or bias with at least its query and key axes: () -> (1, 1), (m,) -> (1, m); None stays None."""
    if array is None:
        return None
    return array.reshape((1,) * max(0, 2 - array.ndim) + array.shape)


def tile_of(array, rows, cols):
    """The part of a broadcastable (..., n or 1, m or 1) mask or bias that covers the given rows and columns."""
    if array.shape[-2] != 1:
        array = array[..., rows, :]
    if array.shape[-1] != 1:
        array = array[..., cols]
    return array


def add_bias_tile(scores, bias, rows, cols):
    """Add to a (..., n_blk, m_blk) tile of scores, in place, the part of the score bias that covers it."""
    if bias is not None:
        scores += tile_of(bias, rows, cols)  # (..., n_blk or 1, m_blk or 1), broadcast
