"""Magnitude pruning to an exact count: :func:`pruned_count` and :func:`prune`.

A ``sparseP`` weight keeps the elements of largest magnitude and zeroes the
rest. How many are zeroed depends only on the tensor's size and P
(:func:`pruned_count`), never on its values, so the number of values kept -- the
length of the MIL ``nonzero_data`` operand, part of the program's types -- is
fixed when the program is compiled, and new weights given to a reload are
pruned to the same count (docs/compression.md). The count is the one
coremltools' ``OpMagnitudePrunerConfig(target_sparsity=P/100)`` prunes in a
tensor whose magnitudes are distinct: every element at or below the linear
``np.percentile`` of the magnitudes at ``100 * target_sparsity``. Where
magnitudes tie across that threshold coremltools zeroes them all (its count
grows); :func:`prune` zeroes exactly the count, the tied elements in row-major
order (the first ones first).
"""

from __future__ import annotations

import math

import numpy as np


def pruned_count(numel: int, sparsity: int) -> int:
    """The number of elements ``sparseP`` zeroes in a tensor of ``numel`` elements (P =
    ``sparsity``, 1..99): coremltools' percentile index, ``floor((n - 1) * q) + 1`` with
    ``q`` computed as it computes it (``target_sparsity * 100`` then ``/ 100``, in float64)."""
    if numel <= 0:
        return 0
    q = np.float64(sparsity / 100) * np.float64(100) / np.float64(100)
    return min(numel, int(math.floor(np.float64(numel - 1) * q)) + 1)


def kept_count(numel: int, sparsity: int) -> int:
    """The number of values a ``sparseP`` tensor of ``numel`` elements keeps (the length of
    its ``nonzero_data``)."""
    return numel - pruned_count(numel, sparsity)


def prune(w: np.ndarray, sparsity: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, values)``: ``mask`` (uint8 0/1 in ``w``'s shape) marks the elements kept --
    all but the :func:`pruned_count` of smallest magnitude, ties zeroed in row-major order --
    and ``values`` (fp16, 1-D) are those elements in row-major order. A kept element may be
    0 (a tensor with more zeros than the count prunes); it is a value like any other."""
    w = np.asarray(w)
    flat = np.ascontiguousarray(w).reshape(-1)
    k = pruned_count(flat.size, sparsity)
    mag = np.abs(flat.astype(np.float32))
    mag[np.isnan(mag)] = np.inf  # a NaN is kept (the gate refuses the tensor)
    keep = np.ones(flat.size, bool)
    if k:
        # the k smallest magnitudes (what a stable sort's first k are): all below the k-th
        # smallest, and as many of those equal to it as remain, first positions first
        t = np.partition(mag, k - 1)[k - 1]
        below = mag < t
        keep = ~below
        keep[np.flatnonzero(mag == t)[:k - int(np.count_nonzero(below))]] = False
    values = flat[keep].astype(np.float16)
    return keep.astype(np.uint8).reshape(w.shape), values


def densify(mask: np.ndarray, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The fp16 tensor of ``shape`` a mask (0/1, ``shape`` or flat) and its values encode (the
    numpy reference of constexpr_sparse_to_dense). ValueError when the mask's count of ones is
    not the number of values."""
    m = np.asarray(mask).reshape(-1).astype(bool)
    if m.size != math.prod(shape):
        raise ValueError(f"the mask has {m.size} elements, the tensor {math.prod(shape)}")
    v = np.asarray(values).reshape(-1)
    if int(m.sum()) != v.size:
        raise ValueError(f"the mask sets {int(m.sum())} elements but there are {v.size} values")
    out = np.zeros(m.size, np.float16)
    out[m] = v.astype(np.float16)
    return out.reshape(shape)
