"""Palettization: fp16 look-up tables from exact 1-D k-means, and each element's index.

:func:`kmeans_1d` finds the optimal centroids of a tensor's values by dynamic
programming over its distinct values (deterministic: the same tensor always
gives the same table; the C kernel, :func:`anec.c_extension.kmeans_1d_exact`,
runs the same program when the extension is built); :func:`kmeans_1d_many`
solves the channel groups of a grouped LUT together; :func:`quantize_lut` makes
the tables and indices of a ``lutN`` or ``lutN/gG`` format.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from anec import c_extension
from anec.compress.formats import Format


def kmeans_1d(values: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` centroids (float64, ascending) of the optimal 1-D k-means of ``values``:
    the partition of the sorted distinct values into ``k`` runs with the least squared error,
    by dynamic programming over the distinct values weighted by their counts (an fp16
    tensor has at most 63,488 of them). The row minima of each step are found by divide and
    conquer (the best split point never moves left as the run end moves right), vectorized
    one recursion level at a time. Exact, hence deterministic: ties take the leftmost split.
    Fewer distinct values than ``k``: each is a centroid, the rest repeat the largest."""
    return kmeans_1d_many([values], k)[0]


def kmeans_1d_many(groups: Sequence[np.ndarray], k: int, exact: bool = False) -> list[np.ndarray]:
    """:func:`kmeans_1d` of each array of ``groups``, all solved together: every step of the
    dynamic program and every level of its divide and conquer is one set of numpy calls over
    all the groups (the channel groups of a grouped LUT), whatever their number.

    The work grows with the distinct values of all the groups together. Above
    :data:`EXACT_DISTINCT` of them (channel groups of a large tensor, whose values are
    nearly all distinct) each group's values are first merged into :data:`BINS` equal-width
    bins (weighted means), the program is solved exactly on those, and Lloyd steps on the
    real values refine the result (each step lowers the error or keeps it)."""
    out: list[np.ndarray | None] = [None] * len(groups)
    big = []
    for g, values in enumerate(groups):
        v, w = _distinct(values if isinstance(values, _Weighted) else np.asarray(values))
        if v.size == 0:
            out[g] = np.zeros(k)
        elif v.size <= k:
            out[g] = np.concatenate([v, np.full(k - v.size, v[-1])])
        else:
            big.append((g, v, w.astype(np.float64)))
    if not big:
        return out  # type: ignore[return-value]
    if not exact and sum(v.size for _, v, _ in big) > EXACT_DISTINCT:
        binned = [(g, *_binned(v, w)) for g, v, w in big]
        coarse = kmeans_1d_many([_Weighted(v, w) for _, v, w in binned], k, exact=True)
        for (g, v, w), c in zip(big, coarse):
            out[g] = _lloyd(v, w, c)
        return out  # type: ignore[return-value]
    native = c_extension.kmeans_1d_exact([(v, w) for _, v, w in big], k)
    if native is not None:
        for (g, _, _), c in zip(big, native):
            out[g] = c
        return out  # type: ignore[return-value]
    return _kmeans_numpy(big, k, out)


def _kmeans_numpy(big: list, k: int, out: list) -> list[np.ndarray]:
    """The exact program of :func:`kmeans_1d_many` for the groups ``big`` in numpy, all at once."""
    # slots: group g's prefixes t = 0..n_g at base_g + t (prefix sums restart in each group)
    sizes = np.array([v.size for _, v, _ in big])
    base = np.concatenate([[0], np.cumsum(sizes + 1)[:-1]])

    def prefix(f) -> np.ndarray:
        return np.concatenate([np.concatenate([[0.0], np.cumsum(f(v, w))]) for _, v, w in big])

    W = prefix(lambda v, w: w)
    S1 = prefix(lambda v, w: w * v)
    S2 = prefix(lambda v, w: w * v * v)

    def cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # squared error of run [a, b) of one group
        ww = W[b] - W[a]
        s = S1[b] - S1[a]
        with np.errstate(invalid="ignore", divide="ignore"):  # a = b (an empty run) is never chosen
            return np.maximum(S2[b] - S2[a] - s * s / ww, 0.0)

    total = W.size
    owner_base = np.repeat(base, sizes + 1)
    prev = cost(owner_base, np.arange(total))  # one run: [0, t)
    prev[base] = np.inf
    splits = []
    for j in range(1, k):
        # D_j[t] = min over m in [j, t-1] of D_{j-1}[m] + cost(m, t), for t in [j+1, n_g]
        cur = np.full(total, np.inf)
        arg = np.zeros(total, np.int64)
        lo, hi = base + j + 1, base + sizes
        olo, ohi = base + j, base + sizes - 1
        while lo.size:
            mid = (lo + hi) // 2
            top = np.minimum(ohi, mid - 1)
            cnt = top - olo + 1
            rows = np.repeat(np.arange(mid.size), cnt)
            start = np.repeat(np.cumsum(cnt) - cnt, cnt)
            m = olo[rows] + (np.arange(rows.size) - start)
            val = prev[m] + cost(m, mid[rows])
            best = np.minimum.reduceat(val, np.cumsum(cnt) - cnt)
            first = np.flatnonzero(val == best[rows])  # the leftmost minimum of each row
            keep = np.concatenate([[True], rows[first][1:] != rows[first][:-1]])
            bm = m[first[keep]]
            cur[mid] = best
            arg[mid] = bm
            left = mid - 1 >= lo
            right = mid + 1 <= hi
            lo, hi, olo, ohi = (np.concatenate([lo[left], mid[right] + 1]),
                                np.concatenate([mid[left] - 1, hi[right]]),
                                np.concatenate([olo[left], bm[right]]),
                                np.concatenate([bm[left], ohi[right]]))
        splits.append(arg)
        prev = cur
    ends = base + sizes
    bounds = [ends]
    for arg in reversed(splits):
        bounds.append(arg[bounds[-1]])
    bounds.append(base)
    b = np.stack(bounds[::-1], axis=1)  # [groups, k + 1] slots
    cents = (S1[b[:, 1:]] - S1[b[:, :-1]]) / (W[b[:, 1:]] - W[b[:, :-1]])
    for (g, _, _), c in zip(big, cents):
        out[g] = c
    return out  # type: ignore[return-value]


EXACT_DISTINCT = 1 << 17
"""Distinct values (over all the groups of one call) up to which :func:`kmeans_1d_many` is exact."""
BINS = 1024
"""Bins per group above :data:`EXACT_DISTINCT`."""


class _Weighted:
    """Distinct values with their weights, as :func:`_distinct` returns them (already merged)."""

    def __init__(self, v: np.ndarray, w: np.ndarray) -> None:
        self.v, self.w = v, w


def _binned(v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values ``v`` of weights ``w`` merged into at most :data:`BINS` equal-width bins
    (each the weighted mean of its values, with their total weight)."""
    if v.size <= BINS:
        return v, w
    edges = np.linspace(v[0], v[-1], BINS + 1)[1:-1]
    b = np.searchsorted(edges, v, side="right")
    starts = np.flatnonzero(np.concatenate([[True], b[1:] != b[:-1]]))
    ws = np.add.reduceat(w, starts)
    return np.add.reduceat(w * v, starts) / ws, ws


def _lloyd(v: np.ndarray, w: np.ndarray, c: np.ndarray, steps: int = 8) -> np.ndarray:
    """``steps`` Lloyd steps of centroids ``c`` on sorted values ``v`` of weights ``w``."""
    W = np.concatenate([[0.0], np.cumsum(w)])
    S = np.concatenate([[0.0], np.cumsum(w * v)])
    c = np.sort(np.asarray(c, dtype=np.float64))
    for _ in range(steps):
        cuts = np.searchsorted(v, (c[1:] + c[:-1]) / 2, side="left")
        b = np.concatenate([[0], cuts, [v.size]])
        cnt = W[b[1:]] - W[b[:-1]]
        new = np.where(cnt > 0, (S[b[1:]] - S[b[:-1]]) / np.where(cnt > 0, cnt, 1), c)
        if np.array_equal(new, c):
            break
        c = np.sort(new)
    return c


def _distinct(a: "np.ndarray | _Weighted") -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``a`` (ascending, float64) and their counts; fp16 by a
    histogram of the bit patterns (one pass, no sort of the tensor)."""
    if isinstance(a, _Weighted):
        return a.v, a.w
    if a.dtype == np.float16:
        counts = np.bincount(np.ascontiguousarray(a).reshape(-1).view(np.uint16), minlength=1 << 16)
        bits = np.flatnonzero(counts)
        vals = bits.astype(np.uint16).view(np.float16).astype(np.float64)
        order = np.argsort(vals, kind="stable")
        vals, cnt = vals[order], counts[bits][order]
        v, first = np.unique(vals, return_index=True)  # -0.0 and 0.0 are one value
        return v, np.add.reduceat(cnt, first)
    return np.unique(a.astype(np.float64).reshape(-1), return_counts=True)


def _lut_one(w: np.ndarray, bits: int, c: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One fp16 table of 2^bits entries for ``w`` (its k-means centroids ``c``, computed when
    not given) and each element's index (the nearest entry)."""
    k = 1 << bits
    c = np.sort((kmeans_1d(w, k) if c is None else c).astype(np.float16))  # rounding keeps the order
    cf = c.astype(np.float64)
    mids = (cf[1:] + cf[:-1]) / 2
    if w.dtype == np.float16 and w.size > 1 << 16:  # the index of every fp16 bit pattern, then a gather
        table = np.searchsorted(mids, _ALL_FP16, side="left").astype(np.uint8)
        return c, table[np.ascontiguousarray(w).view(np.uint16)].reshape(w.shape)
    idx = np.searchsorted(mids, w.astype(np.float64).reshape(-1), side="left")
    return c, idx.astype(np.uint8).reshape(w.shape)


with np.errstate(invalid="ignore"):
    _ALL_FP16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
"""Every fp16 bit pattern's value (NaN patterns never occur in a weight the gate accepts)."""


def quantize_lut(w: np.ndarray, axis: int, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, lut)``: indices in ``w``'s shape (uint8 values < 2^bits); lut of shape
    ``[groups, 2^bits]`` (groups of ``fmt.group`` channels along ``axis``, or 1)."""
    w = np.asarray(w)
    if not fmt.group:
        lut, idx = _lut_one(w, fmt.bits)
        return idx, lut.reshape(1, -1)
    c = w.shape[axis]
    moved = np.moveaxis(w, axis, 0)
    g = fmt.group
    idx = np.empty(moved.shape, np.uint8)
    luts = []
    blocks = [moved[i * g:(i + 1) * g] for i in range(c // g)]
    for i, (block, cents) in enumerate(zip(blocks, kmeans_1d_many(blocks, 1 << fmt.bits))):
        lut, ix = _lut_one(block, fmt.bits, cents)
        idx[i * g:(i + 1) * g] = ix
        luts.append(lut)
    return np.moveaxis(idx, 0, axis), np.stack(luts)
