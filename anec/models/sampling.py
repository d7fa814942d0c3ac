"""Picking the next token from an LM head's logits chunk by chunk.

The LM head returns its logits in vocabulary chunks (``logits_c0``, ``logits_c1``,
... fp16, each within the target's conv channel limit: see
:meth:`anec.models.decoder.DecoderFrontend.lm_head`). The functions here read
those chunks where they are and hold at most one chunk in float64 at a time, so
a 152k vocabulary never becomes one fp32 (or float64) vector:

* greedy: a running argmax over the chunks (the first maximum wins, as
  ``np.argmax`` over the concatenation);
* temperature + top-k: a running top-k merge gives the k-th largest scaled logit
  (the same threshold as ``np.partition`` over the concatenation), then one pass
  accumulates ``exp(z - max)`` of the kept entries into a running total, chunk
  after chunk, remembering each chunk's end; one uniform draw picks the chunk
  whose cumulative share passes it, and only that chunk is summed again to find
  the token.

The result is the token ``numpy.random.Generator.choice(p=softmax)`` picks over
the concatenated float64 logits with the same generator: the same one uniform
draw, the same per-entry weights summed in the same order. Only the rounding of
the normalization differs (the cumulative sum of the weights divided by its total,
where the reference divides each weight by ``p.sum()`` first), by a few ulps,
which can change the token only when the draw lands within those ulps of a
boundary between two tokens.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from anec.models.common import ModelError

Chunks = Sequence[np.ndarray]
"""One 1-D array of logits per vocabulary chunk, in vocabulary order (any float dtype)."""


def _widened(c: np.ndarray) -> np.ndarray:
    """An fp16 chunk as a contiguous fp32 copy (exact; numpy's fp16 max/argmax are ~6x slower
    than fp32 on a strided view); any other dtype as it is."""
    return c.astype(np.float32) if c.dtype == np.float16 else c


def argmax_chunks(chunks: Chunks) -> int:
    """The index of the largest logit over all chunks (the first one on ties; the first NaN
    if there is one, as ``np.argmax``)."""
    best, best_v, off = -1, -np.inf, 0
    for c in chunks:
        f = _widened(c)
        i = int(np.argmax(f))
        v = f[i]
        del f  # one chunk widened at a time
        if np.isnan(v):
            return off + i
        if best < 0 or v > best_v:
            best, best_v = off + i, v
        off += c.shape[0]
    if best < 0:
        raise ModelError("no logits to pick a token from")
    return best


def _kth_largest(chunks: Chunks, k: int, temperature: float) -> float:
    """The k-th largest of ``logit / temperature`` (float64) over all chunks, merging each
    chunk's k largest into a running set of k candidates."""
    top = np.empty(0, np.float64)
    for c in chunks:
        best = c if c.shape[0] <= k else np.partition(c, -k)[-k:]
        top = np.concatenate([top, np.asarray(best, np.float64) / temperature])
        if top.size > k:
            top = np.partition(top, -k)[-k:]
    return float(np.partition(top, -k)[-k])


def _weights(c: np.ndarray, temperature: float, zmax: float, kth: float | None) -> np.ndarray:
    """``exp(z - zmax)`` of one chunk's scaled logits ``z`` (0 below the top-k threshold)."""
    z = c.astype(np.float64)
    z /= temperature
    drop = None if kth is None else z < kth
    z -= zmax
    w = np.exp(z, out=z)
    if drop is not None:
        w[drop] = 0.0
    return w


def sample_chunks(chunks: Chunks, temperature: float = 0.0, top_k: int = 0,
                  rng: np.random.Generator | None = None) -> int:
    """Next token from chunked logits: argmax when ``temperature <= 0``, else a draw from the
    softmax of ``logits / temperature`` restricted to the ``top_k`` largest (0 = all) with
    ``rng`` (one uniform draw per call, as ``rng.choice``)."""
    if temperature <= 0:
        return argmax_chunks(chunks)
    vocab = sum(c.shape[0] for c in chunks)
    zmax = max(float(np.max(_widened(c))) for c in chunks) / temperature if chunks else float("nan")
    if not np.isfinite(zmax):
        raise ModelError("the logits are not finite: no token can be sampled",
                         hint="run with ANEC_CHECK_FINITE=1 to find the program that overflows")
    kth = _kth_largest(chunks, top_k, temperature) if 0 < top_k < vocab else None
    ends, run = [], 0.0
    for c in chunks:  # the running cumulative total at each chunk's end
        w = _weights(c, temperature, zmax, kth)
        w[0] += run
        run = float(np.cumsum(w, out=w)[-1])
        ends.append(run)
        del w  # one chunk in float64 at a time
    if not np.isfinite(run) or run <= 0:
        raise ModelError("the logits are not finite: no token can be sampled",
                         hint="run with ANEC_CHECK_FINITE=1 to find the program that overflows")
    rng = rng if rng is not None else np.random.default_rng()
    u = rng.random()
    start, off = 0.0, 0
    for c, end in zip(chunks, ends):
        if end / run > u:
            w = _weights(c, temperature, zmax, kth)
            w[0] += start
            cdf = np.cumsum(w, out=w)
            cdf /= run
            return off + int(np.searchsorted(cdf, u, side="right"))
        start, off = end, off + c.shape[0]
    raise AssertionError("the last chunk ends at the total, above any draw in [0, 1)")
