"""legalize's weight range check (ANE-FP16-RANGE) reads the bits of each stored tensor: it
must agree with ``max(|w|) <= FP16_MAX`` in float64 on every value, NaN and Inf included."""

from __future__ import annotations

import numpy as np
import pytest

from anec.ir.types import FP16_MAX
from anec.passes.legalize import beyond_fp16


def reference(a: np.ndarray) -> bool:
    with np.errstate(invalid="ignore"):
        return not float(np.max(np.abs(a.astype(np.float64)))) <= FP16_MAX  # NaN compares False


def test_every_fp16_value():
    """All 65536 fp16 bit patterns, each alone and next to ordinary values."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = bits.view(np.float16)
    base = np.array([0.5, -3.0, 1000.0], np.float16)
    for v in values:
        single = np.array([v], np.float16)
        assert beyond_fp16(single) == reference(single), hex(single.view(np.uint16)[0])
        mixed = np.concatenate([base, single, base])
        assert beyond_fp16(mixed) == reference(mixed)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_wide_floats_at_the_edges(dtype):
    f = np.dtype(dtype).type
    edge = f(FP16_MAX)
    specials = [edge, -edge, np.nextafter(edge, f(np.inf)), -np.nextafter(edge, f(np.inf)),
                np.nextafter(edge, f(0)), f(np.inf), f(-np.inf), f(np.nan), np.copysign(f(np.nan), f(-1)),
                f(0.0), f(-0.0), np.finfo(dtype).max, -np.finfo(dtype).max, np.finfo(dtype).tiny]
    rng = np.random.default_rng(0)
    for s in specials:
        for scale in (1.0, 1e3, 1e-3):
            a = (rng.standard_normal(33) * scale).astype(dtype)
            a[17] = s
            assert beyond_fp16(a) == reference(a), (dtype, s, scale)
            assert beyond_fp16(-np.abs(a)) == reference(-np.abs(a))
    raw = rng.integers(0, 1 << 63, size=4000, dtype=np.uint64)
    words = raw.astype(np.uint32) if np.dtype(dtype).itemsize == 4 else raw
    for v in words.view(dtype):
        a = np.array([v, 1.0], dtype)
        assert beyond_fp16(a) == reference(a)


def test_views_and_byte_order():
    a = np.arange(24, dtype=np.float16).reshape(4, 6)
    a[3, 5] = np.inf
    assert beyond_fp16(a.T) is True and beyond_fp16(a[:, 1::2]) is True  # any layout
    assert beyond_fp16(a[:, ::2]) is False and beyond_fp16(a[:3]) is False
    big = np.array([1.0, 7e4], dtype=">f4")
    assert beyond_fp16(big) is True and beyond_fp16(big[:1]) is False
