"""Reload from fp16 and fp32 arrays: the one-pass value check accepts and rejects
exactly what the element-wise checks do, the payload is the same bytes, and a
reload from either dtype equals a fresh compile."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from anec.diagnostics import WeightError
from anec.ir.types import FP16_MAX
from anec.mil.manifest_types import Manifest, WeightEntry
from anec.runtime import Runtime
from anec.runtime.weights import materialize
from tests.runtime.test_rt_reload import CASES, X, blobs_for, keys_of, load, weights


def entry(shape, dtype="fp16", perm=None, slice_=None):
    return WeightEntry(key="k", file="weights/w.bin", offset=64, dtype=dtype, shape=tuple(shape),
                       perm=tuple(perm) if perm else None, slice=tuple(slice_) if slice_ else None)


def reference(arr, e):
    """The payload by plain numpy: transpose, slice, reshape, cast."""
    a = np.asarray(arr)
    if e.perm:
        a = np.transpose(a, e.perm)
    if e.slice:
        axis, start, stop = e.slice
        idx = [slice(None)] * a.ndim
        idx[axis] = slice(start, stop)
        a = a[tuple(idx)]
    return np.ascontiguousarray(a.reshape(e.shape).astype({"fp16": np.float16, "fp32": np.float32}[e.dtype]))


ENTRIES = [
    ((6, 4), entry((6, 4, 1, 1))),
    ((6, 4), entry((4, 6), perm=[1, 0])),
    ((6, 4), entry((3, 4), slice_=[0, 2, 5])),
    ((6, 4), entry((4, 2), perm=[1, 0], slice_=[1, 1, 3])),
    ((6, 4), entry((6, 4), "fp32")),
]


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,e", ENTRIES)
def test_payload_is_the_reference_cast_of_the_view(src, shape, e):
    r = np.random.default_rng(3)
    arr = (r.standard_normal(shape) * 100).astype(src)
    arr.flat[0] = -FP16_MAX  # the extremes are in range
    arr.flat[1] = FP16_MAX
    got = materialize("k", arr, e)
    want = reference(arr, e)
    assert got.dtype == want.dtype and got.flags.c_contiguous
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # a non-contiguous array of the same values gives the same payload
    wide = np.zeros((shape[0], shape[1] * 2), src)
    wide[:, ::2] = arr
    np.testing.assert_array_equal(materialize("k", wide[:, ::2], e).view(np.uint8), want.view(np.uint8))


BAD_VALUES = [
    (np.nan, "fp16", "non-finite value \\(NaN or Inf\\) at flat index 5"),
    (-np.inf, "fp16", "non-finite value \\(NaN or Inf\\) at flat index 5"),
    (np.inf, "fp32", "non-finite value \\(NaN or Inf\\) at flat index 5"),
    (np.nan, "fp32", "non-finite value \\(NaN or Inf\\) at flat index 5"),
    (65505.0, "fp16", "beyond the fp16 range"),   # rounds to 65504 in fp16, still rejected
    (-70000.0, "fp16", "beyond the fp16 range"),
]


# every source dtype that can hold the value (an fp16 array cannot hold 65505 or -70000)
@pytest.mark.parametrize("src,value,dtype,err", [
    (src, *case) for src in (np.float16, np.float32, np.float64) for case in BAD_VALUES
    if not np.isfinite(case[0]) or abs(case[0]) <= float(np.finfo(src).max)])
def test_bad_values_are_rejected_with_the_same_message(src, value, dtype, err):
    arr = np.ones((6, 4), np.float64)
    arr.flat[5] = value
    arr = arr.astype(src)
    with pytest.raises(WeightError, match=err):
        materialize("k", arr, entry((6, 4), dtype))


def test_a_large_value_outside_the_slice_is_not_part_of_the_payload():
    arr = np.ones((6, 4), np.float32)
    arr[0, 0] = 1e6  # beyond fp16, but the slice keeps rows 2..4 only
    got = materialize("k", arr, entry((3, 4), slice_=[0, 2, 5]))
    np.testing.assert_array_equal(got, np.ones((3, 4), np.float16))
    arr[0, 0] = np.inf  # non-finite anywhere is rejected, as before
    with pytest.raises(WeightError, match="non-finite"):
        materialize("k", arr, entry((3, 4), slice_=[0, 2, 5]))


def test_a_large_array_is_checked_across_chunks():
    arr = np.zeros(200_003, np.float32)
    arr[-1] = 1e5
    with pytest.raises(WeightError, match="fp16 range"):
        materialize("k", arr, entry((200_003,)))
    arr[-1] = np.nan
    with pytest.raises(WeightError, match="flat index 200002"):
        materialize("k", arr.astype(np.float16), entry((200_003,)))


@pytest.mark.parametrize("src", [np.float16, np.float32])
@pytest.mark.parametrize("form,device,strategy", CASES)
def test_reload_from_each_array_dtype_equals_a_fresh_compile(tmp_path, src, form, device, strategy):
    w0 = weights(0)
    w1 = {k: v.astype(src) for k, v in weights(1).items() if k in keys_of(form)}
    with Runtime("sim", temp_root=tmp_path / "a", sim_device=device) as rt:
        p = load(rt, w0, form)
        assert p.reload_info["strategy"] == strategy
        p.reload_weights(w1)
        y1 = p(x=X)["y"]
    with Runtime("sim", temp_root=tmp_path / "b", sim_device=device) as fresh:
        want = load(fresh, {**w0, **{k: v.astype(np.float32) for k, v in w1.items()}}, form)(x=X)["y"]
    np.testing.assert_array_equal(y1, want)


@pytest.mark.parametrize("src", [np.float16, np.float32])
@pytest.mark.parametrize("form,device", [("files", ""), ("packed", "data=file"), ("single", "")])
def test_unchanged_keys_write_no_file(tmp_path, src, form, device):
    w0 = weights(0)
    with Runtime("sim", temp_root=tmp_path, sim_device=device) as rt:
        p = load(rt, w0, form)
        files = [os.path.join(p.dir, f[len("@model_path/"):]) for f in blobs_for(w0, form)]
        before = [(os.stat(f).st_ino, os.stat(f).st_mtime_ns) for f in files]
        p.reload_weights({k: w0[k].astype(src) for k in keys_of(form)})
        assert [(os.stat(f).st_ino, os.stat(f).st_mtime_ns) for f in files] == before
        st = rt.stats
        assert st["reloads"] == 1 and st["blobs_patched"] == 0 and st["compiles"] == 1


def _packed_file(tmp_path, tensors, offsets=None):
    """A packed BLOBFILE of fp16 tensors in a program directory, and its manifest."""
    from tests.runtime import milkit as mk

    data = mk.blobfile(*tensors)
    (tmp_path / "weights").mkdir(exist_ok=True)
    (tmp_path / "weights" / "w.bin").write_bytes(data)
    offs, o = [], 64
    for t in tensors:
        offs.append(o)
        o += 64 + t.nbytes
        o += (-o) % 64
    entries = [{"key": f"t{i}", "file": "weights/w.bin", "path": "@model_path/weights/w.bin", "offset": off,
                "dtype": "fp16", "shape": list(t.shape), "perm": None, "slice": None}
               for i, (t, off) in enumerate(zip(tensors, offsets or offs))]
    return data, Manifest.of({"func": "f", "weights": entries})


def test_changed_blobs_reads_only_what_it_needs_and_equals_the_plain_patch(tmp_path):
    """The new file bytes equal a patch of the whole old file, whichever tensors
    change: all, some, none, or one that equals the old one in its first KiBs."""
    from anec.runtime.weights import changed_blobs, patched_blobs

    r = np.random.default_rng(3)
    tensors = [r.standard_normal(s).astype(np.float16) for s in ((64, 48, 1, 1), (5, 3, 1, 1), (4096, 2, 1, 1))]
    data, manifest = _packed_file(tmp_path, tensors)
    path = "@model_path/weights/w.bin"
    late = tensors[2].copy()
    late.reshape(-1)[-1] += 1  # equal over the first 4 KiB, changed at the end
    cases = [
        {"t0": -tensors[0], "t1": -tensors[1], "t2": -tensors[2]},
        {"t1": -tensors[1]},
        {"t0": tensors[0], "t2": tensors[2]},
        {"t2": late},
        {"t0": tensors[0], "t2": late},
    ]
    for new in cases:
        want = patched_blobs(manifest, {path: data}, new)[path]
        got = changed_blobs(manifest, tmp_path, new)
        if want == data:
            assert got == {}
        else:
            assert bytes(got[path]) == want


def test_changed_blobs_of_a_hostile_manifest_is_refused_or_plain(tmp_path):
    """Payloads that overlap a metadata record take the plain path (same bytes or
    the same error); a record outside the file is refused."""
    from anec.runtime.weights import changed_blobs, patched_blobs

    t = [np.arange(64, dtype=np.float16).reshape(64, 1, 1, 1), np.ones((32, 1, 1, 1), np.float16)]
    data, manifest = _packed_file(tmp_path, t)
    path = "@model_path/weights/w.bin"
    new = {"t0": t[0] + 1, "t1": t[1] * 2}
    assert bytes(changed_blobs(manifest, tmp_path, new)[path]) == patched_blobs(manifest, {path: data}, new)[path]
    w0, w1 = manifest.weights
    bad = dataclasses.replace(manifest, weights=(dataclasses.replace(w0, offset=len(data)),))
    with pytest.raises(WeightError, match="outside the file"):
        changed_blobs(bad, tmp_path, {"t0": t[0] + 1})
    # the record of t1 claims t0's payload region: refused the same way by both paths
    b = bytearray(data)
    b[w1.offset + 16:w1.offset + 24] = (w0.offset + 64).to_bytes(8, "little")
    b[w1.offset + 8:w1.offset + 16] = (128).to_bytes(8, "little")
    (tmp_path / "weights" / "w.bin").write_bytes(bytes(b))
    one = dataclasses.replace(manifest, weights=(dataclasses.replace(w1, shape=(64, 1, 1, 1)), w0))
    new = {"t1": np.full((64, 1, 1, 1), 3, np.float16), "t0": t[0]}
    want = patched_blobs(one, {path: bytes(b)}, new)
    assert bytes(changed_blobs(one, tmp_path, new)[path]) == want[path]


def test_the_native_magnitude_pass_equals_numpy():
    """The C pass (16 bytes at a time, then a scalar tail) finds the same largest
    magnitude as the numpy one: any length, signs, NaN and Inf anywhere."""
    from anec.runtime import native
    from anec.runtime.weights import _max_magnitude_bits_numpy

    r = np.random.default_rng(5)
    for dt in (np.float16, np.float32):
        for n in (0, 1, 7, 8, 9, 33, 1000, 70001):
            a = (r.standard_normal(n) * 100).astype(dt)
            cases = [a, -np.abs(a)]
            for i in {0, n // 2, n - 1} if n else ():
                for v in (np.inf, -np.inf, np.nan, -np.nan, -65504.0):
                    b = a.copy()
                    b[i] = v
                    cases.append(b)
            for x in cases:
                assert native.max_magnitude_bits(x) == _max_magnitude_bits_numpy(x), (dt, n)
