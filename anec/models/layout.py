"""The ANE activation layout the model frontends use, and host-side conversions.

Every activation crossing a program boundary uses the ANE's "BC1S" layout
``[1, C, 1, S]``: channels in dim 1, sequence positions in dim 3, so a
Linear layer is a 1x1 convolution and a per-channel vector is ``[1, C, 1, 1]``.
Attention moves to heads as ``[1, C, 1, S] -> [1, H, D, S] -> [1, H, S, D]``.
The host holds activations as ``[S, C]`` arrays; :func:`to_bc1s` and
:func:`from_bc1s` convert.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anec.models.common import ModelError

MASK_NEG = -1e4
"""Additive mask value for a forbidden position. Finite (fp16 has no room for
-inf arithmetic: -inf - -inf is NaN) and large enough that exp() underflows to 0."""


def to_bc1s(x: np.ndarray, width: int | None = None, dtype: Any = np.float32) -> np.ndarray:
    """``[S, C]`` host rows -> ``[1, C, 1, width]`` (zero-padded on the right)."""
    s, c = x.shape
    width = s if width is None else width
    if s > width:
        raise ModelError(f"{s} positions do not fit a bucket of {width}")
    out = np.zeros((1, c, 1, width), dtype=dtype)
    out[0, :, 0, :s] = x.T
    return out


def from_bc1s(x: np.ndarray, n: int | None = None) -> np.ndarray:
    """``[1, C, 1, S]`` -> ``[n, C]`` host rows (the first ``n`` positions)."""
    x = np.asarray(x)
    rows = x[0, :, 0, :].T
    return rows if n is None else rows[:n]


def causal_mask(s: int) -> np.ndarray:
    """``[1, 1, s, s]`` additive mask: 0 where key j <= query i, else MASK_NEG."""
    m = np.triu(np.full((s, s), MASK_NEG, dtype=np.float32), k=1)
    return m.reshape(1, 1, s, s).astype(np.float16)


def step_mask(s: int) -> np.ndarray:
    """``[1, 1, s, s]`` new-block mask of a one-token decode step (the token in column 0):
    every row opens column 0 alone. Row 0 is the causal mask's, so the token's column
    computes what it would under :func:`causal_mask`; the padding rows equal it, so padding
    columns with equal inputs stay equal at every layer (the sim computes a product's
    repeated columns once), and no softmax row is all masked."""
    m = np.full((1, 1, s, s), MASK_NEG, dtype=np.float16)
    m[..., 0] = 0
    return m
