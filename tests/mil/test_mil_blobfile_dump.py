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
