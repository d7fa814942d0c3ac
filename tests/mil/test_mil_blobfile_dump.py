"""`python -m anec.mil.blobfile FILE`: the listing, its exit codes, and the payload hint.

Needs no reference package: the expected listing is computed here from the arrays
(offsets by the format's arithmetic, digests with hashlib).
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from anec.diagnostics import ArtifactError
from anec.mil.blobfile import SENTINEL, BlobReader, BlobWriter, dump, main

ARRAYS = [
    np.array([1.5, -2.25, 3], np.float16),
    np.array([], np.float32),
    np.arange(-3, 5, dtype=np.int8),
    np.array([7, 9], np.uint32),
]


def _file(tmp_path):
    w = BlobWriter()
    for a in ARRAYS:
        w.add(a)
    path = tmp_path / "w.bin"
    path.write_bytes(w.to_bytes())
    return path


def _expected(path) -> str:
    rows = [f"{path}: 456 bytes, version 2, 4 blob(s)",
            "    offset  dtype        count      bytes           min          max  sha256"]
    for off, a, name in zip((64, 192, 256, 384), ARRAYS, ("fp16", "fp32", "int8", "uint32")):
        lo, hi = (f"{float(a.min()):.6g}", f"{float(a.max()):.6g}") if a.size else ("-", "-")
        digest = hashlib.sha256(a.tobytes()).hexdigest()[:16]
        rows.append(f"{off:>10}  {name:<7} {a.size:>10} {a.nbytes:>10}  {lo:>12} {hi:>12}  {digest}")
    return "\n".join(rows)


def test_dump_lists_every_blob_exactly(tmp_path):
    path = _file(tmp_path)
    text = dump(path)
    assert text == _expected(path)
    # spot checks written out, so a change of the format helper above cannot hide one of dump's
    assert text.splitlines()[2] == "        64  fp16             3          6         -2.25            3  " \
        + hashlib.sha256(ARRAYS[0].tobytes()).hexdigest()[:16]
    assert text.splitlines()[3].startswith("       192  fp32             0          0             -            -")


def test_main_prints_the_listing_and_returns_0(tmp_path, capsys):
    path = _file(tmp_path)
    assert main([str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == _expected(path) + "\n" and err == ""


@pytest.mark.parametrize("argv", [[], ["-h"], ["--help"], ["a.bin", "b.bin"]])
def test_main_usage(argv, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "usage: python -m anec.mil.blobfile FILE\n"


def test_main_reads_sys_argv(tmp_path, capsys, monkeypatch):
    path = _file(tmp_path)
    monkeypatch.setattr("sys.argv", ["blobfile", str(path)])
    assert main() == 0
    assert capsys.readouterr().out == _expected(path) + "\n"


def test_main_renders_a_bad_file_as_an_error(tmp_path, capsys):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(struct.pack("<II", 1, 3) + bytes(56))
    assert main([str(bad)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"error: {bad}: BLOBFILE version 3, expected 2\n"
                   "hint: the file is not a MILBlob storage v2 weight file\n")


def test_the_payload_hint_at_the_last_bytes_of_a_file():
    # a sentinel in the last 4 bytes: offset 128 is past the end, and the record before it is real
    data = struct.pack("<II", 1, 2) + bytes(56) + struct.pack("<I", SENTINEL)
    with pytest.raises(ArtifactError) as e:
        BlobReader(data).entry(128)
    assert e.value.message == "<bytes> offset 128: past the end of the file (68 bytes)"
    assert e.value.hint == "offset 128 is a payload; MIL must reference the metadata record at 64"
    # fewer than 4 bytes after the previous record's start: no sentinel can be read there
    for tail in (b"", b"\xef", b"\xef\xbe", b"\xef\xbe\xad"):
        with pytest.raises(ArtifactError) as e:
            BlobReader(data[:64] + tail).entry(128)
        assert e.value.hint is None
        assert e.value.message == f"<bytes> offset 128: past the end of the file ({64 + len(tail)} bytes)"


# ---- the writer: no copy of a payload, none once written, nothing after --------------------------

def test_adding_a_tensor_does_not_copy_it():
    import tracemalloc

    a = np.arange(2 << 20, dtype=np.float32)  # 8 MiB, little-endian and contiguous already
    w = BlobWriter()
    tracemalloc.start()
    try:
        w.add(a)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < a.nbytes // 8  # the record and a view; a copy would be the whole 8 MiB
    assert w.to_bytes()[128:] == a.tobytes()


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0, 2)])
def test_an_empty_tensor_of_any_rank_is_a_record_with_no_payload(shape):
    w = BlobWriter()
    first = w.add(np.zeros(shape, np.float16))
    second = w.add(np.arange(3, dtype=np.float16))
    blob = w.to_bytes()
    r = BlobReader(blob)
    assert r.payload(first) == b"" and r.payload(second) == np.arange(3, dtype=np.float16).tobytes()


def test_a_written_writer_reads_its_file_and_takes_no_more_tensors(tmp_path):
    a = np.arange(16, dtype=np.float16)
    w = BlobWriter()
    w.add(a)
    path = tmp_path / "w.bin"
    with open(path, "wb") as f:
        assert w.write_to(f) == w.size == 160
    expected = path.read_bytes()
    with open(path, "rb") as f:
        w.written(f.fileno())
    a[:] = 0  # the arrays are let go: the bytes are the file's now
    assert w.to_bytes() == expected
    with pytest.raises(ValueError) as e:
        w.add(a)
    assert str(e.value) == "this BLOBFILE has been written; it takes no more tensors"


# ---- the reader: every refusal names the file, the offset and (where it is one) the constraint ----

def _record(code: int, size: int, data_offset: int, padding: int = 0) -> bytes:
    return struct.pack("<IIQQQ", SENTINEL, code, size, data_offset, padding) + bytes(32)


def _header(count: int = 1) -> bytes:
    return struct.pack("<II", count, 2) + bytes(56)


def _refusal(data: bytes, offset: int) -> ArtifactError:
    with pytest.raises(ArtifactError) as e:
        BlobReader(data, name="w.bin").entry(offset)
    return e.value


@pytest.mark.parametrize("offset", [0, 63, 65, 100])
def test_a_misaligned_offset_is_the_offset_constraint(offset):
    err = _refusal(_header() + _record(1, 2, 128) + b"\0\0", offset)
    assert err.message == f"w.bin offset {offset}: a blob offset must be a multiple of 64 and at least 64"
    assert err.constraint == "ANE-BLOBFILE-OFFSET" and err.hint is None


def test_the_first_record_never_gets_the_payload_hint():
    # a header whose count reads as the sentinel: offset 64 still has no record before it
    err = _refusal(struct.pack("<II", SENTINEL, 2) + bytes(56) + bytes(64), 64)
    assert err.message == "w.bin offset 64: no blob metadata here (sentinel 0x00000000, expected 0xDEADBEEF)"
    assert err.hint is None and err.constraint == "ANE-BLOBFILE-OFFSET"


def test_an_unknown_dtype_code():
    err = _refusal(_header() + _record(5, 2, 128) + b"\0\0", 64)
    assert err.message == "w.bin offset 64: unsupported blob dtype code 5" and err.constraint is None


@pytest.mark.parametrize("data_offset,size", [(64, 2), (127, 2), (128, 4)])
def test_a_payload_outside_the_file_or_inside_its_own_record(data_offset, size):
    err = _refusal(_header() + _record(1, size, data_offset) + b"\0\0", 64)
    assert err.message == (f"w.bin offset 64: payload [{data_offset}, {data_offset + size}) is outside "
                           "the file (130 bytes)")


def test_a_payload_that_is_not_whole_elements():
    err = _refusal(_header() + _record(2, 6, 128) + bytes(6), 64)
    assert err.message == "w.bin offset 64: payload size 6 is not a multiple of 4"


def test_an_entry_reads_back_every_field_of_its_record():
    e = BlobReader(_header() + _record(14, 8, 128, padding=3) + bytes(8)).entry(64)
    assert (e.offset, e.dtype, e.size, e.data_offset, e.padding_bits, e.count) == (64, "int32", 8, 128, 3, 2)


def test_a_dtype_no_blob_can_hold_names_the_storable_ones():
    from anec.mil.blobfile import dtype_code

    with pytest.raises(ValueError) as e:
        dtype_code(np.float64)
    assert str(e.value) == ("dtype float64 cannot be stored in a BLOBFILE (storable: float16, float32, "
                            "uint8, int8, int16, uint16, int32, uint32)")


def test_a_record_after_a_payload_one_byte_past_a_boundary_starts_at_the_next_one():
    from anec.mil.blobfile import align, plan_offsets

    w = BlobWriter()
    offsets = [w.add(np.array([7], np.int8)), w.add(np.array([1, 2], np.int8))]
    assert offsets == plan_offsets([1, 2]) == [64, 192]  # payload [128, 129): next record at 192
    assert [align(n) for n in (0, 1, 63, 64, 65, 127, 129)] == [0, 64, 64, 64, 128, 128, 192]
    r = BlobReader(w.to_bytes())
    assert [e.offset for e in r.entries()] == [64, 192]
