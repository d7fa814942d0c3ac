"""The C quantizer (csrc/host_compress.c) is bit for bit the numpy one it speeds up.

``quantize_linear_numpy`` is coremltools' arithmetic on fp16 in numpy (a dozen passes over
the tensor); ``anec_quantize_linear8`` does the same operations per value in two passes and
sums the gate's errors on the way. Both paths of the kernel (AVX where the CPU has it, and the
portable loop, built alone with -DANEC_HOST_SCALAR) are compared with numpy on tensors with
row tails, channels last, zero channels, -0, subnormals and values whose range overflows fp16.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from anec.compress import compress_tensor, get_format, quantize_linear, quantize_linear_numpy
from anec import c_extension as native  # the compressor's kernels are called through it

pytestmark = [pytest.mark.skipif(not native.available(), reason="the C runtime extension is not built"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]

CSRC = Path(__file__).resolve().parents[2] / "csrc"
LINEAR = ["int8", "int8-affine", "uint8-affine"]


@pytest.fixture(scope="session")
def portable(tmp_path_factory):
    """csrc/host_compress.c built alone without its AVX path: (ffi, lib)."""
    cffi = pytest.importorskip("cffi")
    build = importlib.util.spec_from_file_location("_ffi_build", CSRC.parent / "anec" / "runtime" / "_ffi_build.py")
    flags = importlib.util.module_from_spec(build)
    build.loader.exec_module(flags)
    cdef = (CSRC / "anec_rt.cdef.h").read_text()
    start = cdef.index("/* ---- compression (host_compress.c)")
    ffi = cffi.FFI()
    ffi.cdef(cdef[start:cdef.index("/* ---- host work of a training step")])
    ffi.set_source("_host_compress_portable", '#include "anec_rt.h"', sources=[str(CSRC / "host_compress.c")],
                   include_dirs=[str(CSRC)], define_macros=[("ANEC_HOST_SCALAR", None)],
                   extra_compile_args=flags.CFLAGS, libraries=["m"])
    tmp = tmp_path_factory.mktemp("host_compress_portable")
    try:
        so = ffi.compile(tmpdir=str(tmp))
    except Exception as e:  # noqa: BLE001 - no compiler here: the in-place build's tests still run
        pytest.skip(f"cannot build host_compress.c alone: {e}")
    spec = importlib.util.spec_from_file_location("_host_compress_portable", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


@pytest.fixture(params=["c", "portable"])
def path(request, monkeypatch):
    if request.param == "portable":
        ffi, lib = request.getfixturevalue("portable")
        monkeypatch.setattr(native, "ffi", ffi)
        monkeypatch.setattr(native, "lib", lib)
    return request.param


def _tensors():
    rng = np.random.default_rng(7)
    out = {}
    out["conv"] = (rng.standard_normal((40, 37, 1, 3)) * 0.05).astype(np.float16)  # rows of 111: tails
    w = (rng.standard_normal((24, 64)) * 3).astype(np.float16)
    w[3] = 0  # a channel of zeros
    w[5] = -0.0
    w[7] = np.abs(w[7])  # all positive: the affine range widens to 0
    w[8] = -np.abs(w[8])
    w[9, :] = np.float16(6e-8)  # subnormals
    w[10, 0] = 60000  # an outlier
    w[11, :2] = [65504, -65504]  # 2 * max overflows fp16: an infinite scale
    out["rows"] = w
    out["matmul"] = (rng.standard_normal((2, 3, 48, 20)) * 0.3).astype(np.float16)  # channels last
    out["gpt2"] = (rng.standard_normal((96, 768, 1, 1)) * 0.02).astype(np.float16)
    return out


AXES = {"conv": [0, 1, 3], "rows": [0, 1], "matmul": [3, 2, 1], "gpt2": [0]}


@pytest.mark.parametrize("fmt", LINEAR)
def test_the_kernel_quantizes_bit_for_bit_as_numpy(path, fmt):
    f = get_format(fmt)
    for name, w in _tensors().items():
        for axis in AXES[name]:
            want = quantize_linear_numpy(w, axis, f)
            got = quantize_linear(w, axis, f)
            for a, b, role in zip(got, want, ("q", "scale", "zero_point")):
                if b is None:
                    assert a is None
                    continue
                assert a.dtype == b.dtype and a.shape == b.shape, (name, axis, role)
                assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (name, axis, role)


@pytest.mark.parametrize("fmt", LINEAR)
def test_the_gate_errors_agree_with_numpy_and_across_paths(path, portable, monkeypatch, fmt):
    """The errors the gate reads: within rounding of numpy's float32 sums, and the same bits
    from the AVX and the portable code (the lanes are summed alike)."""
    f = get_format(fmt)
    for name, w in _tensors().items():
        for axis in AXES[name]:
            c = compress_tensor(w, f, axis)
            with monkeypatch.context() as m:
                m.setattr(native, "available", lambda: False)
                ref = compress_tensor(w, f, axis)
            with monkeypatch.context() as m:
                m.setattr(native, "ffi", portable[0])
                m.setattr(native, "lib", portable[1])
                port = compress_tensor(w, f, axis)
            for k in ("rel_l2", "channel_rel_l2", "max_abs", "rel_abs"):
                a, b = getattr(c, k), getattr(ref, k)
                assert (a == b) if not math.isfinite(b) else a == pytest.approx(b, rel=1e-5, abs=1e-12), (name, k)
                assert getattr(port, k) == a, (name, axis, k)  # bit for bit
            assert c.worst_channel == ref.worst_channel or c.channel_rel_l2 == pytest.approx(ref.channel_rel_l2)


def test_non_finite_weights_and_vanishing_scales_are_left_to_numpy(path):
    """A NaN or an infinity, or a scale that rounds to 0 (a range of a few subnormals): the
    kernel declines and numpy decides, so the result is numpy's."""
    f = get_format("int8")
    for bad in (np.nan, np.inf):
        w = np.ones((4, 16), np.float16)
        w[2, 3] = bad
        got, want = quantize_linear(w, 0, f), quantize_linear_numpy(w, 0, f)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1], equal_nan=True)
    tiny = np.zeros((2, 16), np.float16)
    tiny[0, 0] = np.float16(6e-8)  # span 1.2e-7, / 254 rounds to 0 in fp16
    got, want = quantize_linear(tiny, 0, f), quantize_linear_numpy(tiny, 0, f)
    assert np.array_equal(got[1], want[1]) and got[1][0] == 0


def test_the_kernel_refuses_bad_arguments():
    ffi, lib = native.ffi, native.lib
    w = np.ones(8, np.float16).view(np.uint16)
    q, s, z = np.empty(8, np.int8), np.empty(1, np.uint16), np.empty(1, np.int8)
    e, n = np.empty(1), np.empty(1)
    mx = ffi.new("float[2]")

    def call(outer=1, channels=1, inner=8, mode=0, zp=True):
        return lib.anec_quantize_linear8(ffi.from_buffer("uint16_t[]", w), outer, channels, inner, mode,
                                         ffi.from_buffer("int8_t[]", q), ffi.from_buffer("uint16_t[]", s),
                                         ffi.from_buffer("int8_t[]", z) if zp else ffi.NULL,
                                         ffi.from_buffer("double[]", e), ffi.from_buffer("double[]", n), mx, mx + 1)

    assert call() == 0
    assert call(mode=3) == lib.ANEC_EINVAL
    assert call(mode=1, zp=False) == lib.ANEC_EINVAL  # affine needs a zero point
    assert call(inner=0) == lib.ANEC_EINVAL
    assert call(outer=2**40, channels=2**40) == lib.ANEC_EINVAL  # overflowing sizes


def _numpy_path(monkeypatch):
    m = monkeypatch.context()
    ctx = m.__enter__()
    ctx.setattr(native, "available", lambda: False)
    return m


@pytest.mark.parametrize("k", [2, 4, 16, 64])
def test_the_kmeans_kernel_finds_numpys_centroids_bit_for_bit(path, monkeypatch, k):
    """The exact program in C (AVX build and portable alike: no vector code) and in numpy:
    the same centroids, on ties (integers, few distinct values), counts, and groups."""
    from anec.compress import kmeans_1d, kmeans_1d_many

    rng = np.random.default_rng(k)
    cases = [rng.standard_normal(3000).astype(np.float16),
             rng.integers(-20, 20, 500).astype(np.float16),  # many equal costs
             np.repeat(np.arange(k + 1, dtype=np.float16), 3),  # one more distinct value than k
             (rng.standard_normal(20000) * 0.02).astype(np.float16)]
    groups = [rng.standard_normal(400).astype(np.float16) * (i + 1) for i in range(6)]
    got = [kmeans_1d(a, k) for a in cases] + kmeans_1d_many(groups, k)
    m = _numpy_path(monkeypatch)
    try:
        want = [kmeans_1d(a, k) for a in cases] + kmeans_1d_many(groups, k)
    finally:
        m.__exit__(None, None, None)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype == np.float64 and np.array_equal(a, b)


def test_the_kmeans_kernel_refuses_bad_arguments():
    ffi, lib = native.ffi, native.lib
    v, w, c = np.arange(4.0), np.ones(4), np.empty(4)
    buf = lambda a: ffi.from_buffer("double[]", a)  # noqa: E731
    assert lib.anec_kmeans_1d(buf(v), buf(w), 4, 2, buf(c)) == 0
    assert list(c[:2]) == [0.5, 2.5]
    assert lib.anec_kmeans_1d(buf(v), buf(w), 4, 4, buf(c)) == lib.ANEC_EINVAL  # k must be below n
    assert lib.anec_kmeans_1d(buf(v), buf(w), 4, 0, buf(c)) == lib.ANEC_EINVAL
