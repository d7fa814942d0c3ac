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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_native_floats_are_read_without_a_temporary_array(dtype):
    """The bit test allocates nothing the size of the weight (max(|w|) would copy it)."""
    import tracemalloc

    a = np.full(1 << 20, 0.5, dtype)
    a[12345] = -np.inf
    tracemalloc.start()
    try:
        assert beyond_fp16(a) is True
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < a.nbytes // 16, (peak, a.nbytes)


@pytest.mark.parametrize("dtype", [">f2", ">f4", ">f8", np.longdouble])
def test_other_floats_take_the_float64_comparison(dtype):
    """Byte-swapped storage and long doubles (no integer view of their width) compare
    ``|v| <= FP16_MAX`` in floats: FP16_MAX itself is in range, anything above it is not."""
    edge = np.array([0.25, -FP16_MAX, FP16_MAX], dtype)
    assert beyond_fp16(edge) is False
    above = np.array([FP16_MAX + 0.5 if np.dtype(dtype).itemsize >= 4 else np.inf], dtype)
    assert beyond_fp16(np.concatenate([edge, above])) is True
    assert beyond_fp16(np.concatenate([edge, -above])) is True
    assert beyond_fp16(np.array([1.0, np.nan], dtype)) is True


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_any_shape(dtype):
    assert beyond_fp16(np.array(np.inf if dtype is np.float16 else 7e4, dtype)) is True  # rank 0
    assert beyond_fp16(np.array(-3.5, dtype)) is False
    a = np.zeros((2, 3, 4, 5), dtype)
    assert beyond_fp16(a) is False
    a[1, 2, 3, 4] = np.nan
    assert beyond_fp16(a) is True and beyond_fp16(a[:, :, :, :4]) is False
