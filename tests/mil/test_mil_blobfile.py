"""BLOBFILE: byte-identical to coremltools' writer, and each side reads the other's files."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from anec.diagnostics import ArtifactError
from anec.mil import blobfile
from anec.mil.blobfile import BlobReader, BlobWriter, plan_offsets

ms = pytest.importorskip("coremltools.libmilstoragepython")

_WRITE = {"float16": "write_fp16_data", "float32": "write_float_data", "int8": "write_int8_data",
          "uint8": "write_uint8_data", "int32": "write_int32_data", "int16": "write_int16_data",
          "uint16": "write_uint16_data", "uint32": "write_uint32_data"}
_READ = {k: v.replace("write", "read") for k, v in _WRITE.items()}


def coreml_write(path, arrays) -> list[int]:
    """Write ``arrays`` with coremltools' _BlobStorageWriter; returns the offsets."""
    w = ms._BlobStorageWriter(str(path), truncate_file=True)
    offsets = []
    for a in arrays:
        data = a.view(np.uint16) if a.dtype == np.float16 else a
        offsets.append(getattr(w, _WRITE[a.dtype.name])(np.ascontiguousarray(data).reshape(-1)))
    del w  # the file is complete once the writer is destroyed
    return offsets


def coreml_read(path, offset, dtype) -> np.ndarray:
    r = ms._BlobStorageReader(str(path))
    out = np.asarray(getattr(r, _READ[np.dtype(dtype).name])(offset))
    return out.view(np.float16) if np.dtype(dtype) == np.float16 else out


def _arrays(seed: int):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(7).astype(np.float16),
        rng.standard_normal((3, 5, 1, 1)).astype(np.float32),
        rng.integers(-128, 128, 33).astype(np.int8),
        rng.integers(0, 256, 64).astype(np.uint8),
        rng.integers(-2**31, 2**31 - 1, 10).astype(np.int32),
        rng.standard_normal(4096).astype(np.float16),  # a payload that is already 64-aligned
        np.zeros(0, np.float32),
    ]


@pytest.mark.parametrize("dtype", ["float16", "float32", "int8", "uint8"])
def test_single_blob_identical_to_coremltools(tmp_path, dtype):
    a = (np.arange(-50, 50) % 97).astype(dtype)
    theirs = tmp_path / "theirs.bin"
    assert coreml_write(theirs, [a]) == [64]
    w = BlobWriter()
    assert w.add(a) == 64
    assert w.to_bytes() == theirs.read_bytes()


@pytest.mark.parametrize("seed", [0, 1])
def test_many_blobs_identical_to_coremltools(tmp_path, seed):
    arrays = _arrays(seed)
    theirs = tmp_path / "theirs.bin"
    offsets = coreml_write(theirs, arrays)
    w = BlobWriter()
    ours = [w.add(a) for a in arrays]
    assert ours == offsets == plan_offsets([a.nbytes for a in arrays])
    assert w.count == len(arrays)
    assert w.to_bytes() == theirs.read_bytes()


def test_we_read_coremltools_files(tmp_path):
    arrays = _arrays(2)
    theirs = tmp_path / "theirs.bin"
    offsets = coreml_write(theirs, arrays)
    r = BlobReader(theirs)
    assert [e.offset for e in r.entries()] == offsets
    for a, off in zip(arrays, offsets):
        got = r.read(off, expect_dtype=a.dtype)
        np.testing.assert_array_equal(got, a.reshape(-1))


def test_coremltools_reads_our_files(tmp_path):
    arrays = _arrays(3)
    w = BlobWriter()
    offsets = [w.add(a) for a in arrays]
    ours = tmp_path / "ours.bin"
    ours.write_bytes(w.to_bytes())
    for a, off in zip(arrays, offsets):
        if a.size == 0:
            continue  # coremltools' typed readers refuse empty payloads
        np.testing.assert_array_equal(coreml_read(ours, off, a.dtype), a.reshape(-1))


@pytest.mark.constraint("ANE-BLOBFILE-OFFSET")
def test_layout_fields():
    w = BlobWriter()
    assert w.to_bytes() == struct.pack("<II", 0, 2) + bytes(56)
    m0 = w.add(np.array([1.0, -2.0, 0.5], np.float16))
    m1 = w.add(np.array([1.0, 2.0], np.float32))
    data = w.to_bytes()
    assert (m0, m1) == (64, 192)
    assert struct.unpack_from("<II", data, 0) == (2, 2)
    assert struct.unpack_from("<IIQQQ", data, 64) == (0xDEADBEEF, 1, 6, 128, 0)
    assert data[128:134] == np.array([1.0, -2.0, 0.5], np.float16).tobytes()
    assert struct.unpack_from("<IIQQQ", data, 192) == (0xDEADBEEF, 2, 8, 256, 0)
    assert len(data) == 256 + 8  # no padding after the last payload


def test_unstorable_dtype():
    with pytest.raises(ValueError, match="bool"):
        BlobWriter().add(np.array([True]))


def _one_blob() -> bytes:
    w = BlobWriter()
    w.add(np.arange(8, dtype=np.float16))
    return w.to_bytes()


def test_reader_rejects_wrong_version():
    data = bytearray(_one_blob())
    struct.pack_into("<I", data, 4, 3)
    with pytest.raises(ArtifactError, match="version 3, expected 2"):
        BlobReader(bytes(data))


@pytest.mark.parametrize("count", [8, 256])  # payload shorter / longer than a metadata record
def test_reader_rejects_payload_offset_with_hint(count):
    w = BlobWriter()
    w.add(np.ones(count, np.float16))
    r = BlobReader(w.to_bytes())
    with pytest.raises(ArtifactError) as e:
        r.read(128)
    assert e.value.constraint == "ANE-BLOBFILE-OFFSET"
    assert "reference the metadata record at 64" in e.value.hint


def test_reader_rejects_unaligned_and_out_of_bounds():
    r = BlobReader(_one_blob())
    with pytest.raises(ArtifactError, match="multiple of 64"):
        r.read(65)
    with pytest.raises(ArtifactError, match="past the end"):
        r.read(64 * 10)
    truncated = _one_blob()[:-2]
    with pytest.raises(ArtifactError, match="outside the file"):
        BlobReader(truncated).read(64)


def test_reader_rejects_dtype_mismatch_and_bad_count():
    r = BlobReader(_one_blob())
    with pytest.raises(ArtifactError, match="holds float16, expected float32"):
        r.read(64, expect_dtype=np.float32)
    data = bytearray(_one_blob())
    struct.pack_into("<I", data, 0, 5)
    with pytest.raises(ArtifactError, match="header says 5 blobs, the file holds 1"):
        BlobReader(bytes(data)).entries()
    with pytest.raises(ArtifactError, match="too short"):
        BlobReader(b"\x00" * 10)


def test_reader_missing_file(tmp_path):
    with pytest.raises(ArtifactError, match="cannot read weight file"):
        BlobReader(tmp_path / "nope.bin")


def test_dump_cli(tmp_path, capsys):
    p = tmp_path / "w.bin"
    p.write_bytes(_one_blob())
    assert blobfile.main([str(p)]) == 0
    out = capsys.readouterr().out
    assert "1 blob(s)" in out and "fp16" in out and "        64" in out
    assert blobfile.main([]) == 2
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00" * 3)
    assert blobfile.main([str(bad)]) == 1
    assert "too short" in capsys.readouterr().err


def test_write_to_streams_the_same_bytes(tmp_path):
    import io

    w = BlobWriter()
    for a in _arrays(4):
        w.add(a)
    buf = io.BytesIO()
    assert w.write_to(buf) == w.size == len(w.to_bytes())
    assert buf.getvalue() == w.to_bytes()


def test_big_endian_and_strided_inputs_are_stored_little_endian_row_major():
    a = np.arange(12, dtype=">f4").reshape(3, 4).T  # big-endian and not contiguous
    w = BlobWriter()
    w.add(a)
    np.testing.assert_array_equal(BlobReader(w.to_bytes()).read(64, np.float32), a.astype("<f4").reshape(-1))
