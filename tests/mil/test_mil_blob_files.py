"""A compiled artifact's weight files are streamed from the weights to disk, never built as
bytes on the way (BlobFiles holding BlobWriters), yet read as the same bytes before and after
writing, and never change when the weights they came from change afterwards."""

from __future__ import annotations

import numpy as np

from anec.compiler import compile_module
from anec.ir import Builder
from anec.mil.artifact import Artifact
from anec.mil.output import load_artifact
from anec.mil.blobfile import BlobFiles, BlobReader, BlobWriter
from anec.mil.emitter import emit_mil
from anec.targets import get_target

from .graphs import small_mlp


def fp16_module():
    b = Builder("f")
    x = b.input("x", "fp16", [1, 8, 1, 4])
    w = b.const_weight("w", "fp16[16, 8, 1, 1]", name="w")
    b.ret(b.conv1x1(x, w, name="y"))
    return Builder.module(b.graph)


def store16():
    return {"w": (np.arange(128, dtype=np.float16) / 8).reshape(16, 8, 1, 1)}


def test_reading_a_file_builds_its_bytes_once_and_membership_builds_nothing():
    w = BlobWriter()
    w.add(np.arange(10, dtype=np.float16))
    files = BlobFiles({"weights/a.bin": w, "inputs/b.bin": b"raw"})
    assert "weights/a.bin" in files and "weights/c.bin" not in files and len(files) == 2
    assert files.source("weights/a.bin") is w  # membership and sources leave the writer alone
    data = files["weights/a.bin"]
    assert data == w.to_bytes() and files.source("weights/a.bin") is data
    assert files["inputs/b.bin"] == b"raw" and dict(files) == {"weights/a.bin": data, "inputs/b.bin": b"raw"}


def test_a_written_writer_reads_the_file_it_wrote(tmp_path):
    arr = np.arange(100, dtype=np.float16)
    w = BlobWriter()
    w.add(arr)
    want = w.to_bytes()
    with open(tmp_path / "w.bin", "w+b") as f:
        w.write_to(f)
        f.flush()
        w.written(f.fileno())
    arr[:] = 0  # the weights change after the write: the file's bytes stay
    assert w.to_bytes() == want == (tmp_path / "w.bin").read_bytes()
    with open(tmp_path / "again.bin", "wb") as f:  # and can be written again
        w.write_to(f)
    assert (tmp_path / "again.bin").read_bytes() == want


def test_compile_to_disk_streams_the_weights_and_keeps_the_bytes(tmp_path):
    weights = store16()
    res = compile_module(fp16_module(), weights=weights, out_dir=tmp_path / "out")
    art = res.artifacts["f"]
    assert isinstance(art.blobs, BlobFiles)
    assert isinstance(art.blobs.source("weights/w.bin"), BlobWriter)  # written without building bytes
    on_disk = (tmp_path / "out" / "f" / "weights" / "w.bin").read_bytes()
    weights["w"][:] = 7  # the caller's arrays change after the compile
    assert art.blobs["weights/w.bin"] == on_disk
    np.testing.assert_array_equal(BlobReader(on_disk).read(64, np.float16), store16()["w"].reshape(-1))
    assert load_artifact(tmp_path / "out").blobs == dict(art.blobs)


def test_compile_in_memory_copies_the_weights_out(tmp_path):
    weights = store16()
    art = compile_module(fp16_module(), weights=weights).artifacts["f"]
    weights["w"][:] = 7
    np.testing.assert_array_equal(BlobReader(art.blobs["weights/w.bin"]).read(64, np.float16),
                                  store16()["w"].reshape(-1))
    art.write(tmp_path / "a")  # an artifact written later writes the same bytes
    assert Artifact.load(tmp_path / "a").blobs == dict(art.blobs)


def test_artifact_build_and_write_match_bytes_written_from_the_mapping(tmp_path):
    g = small_mlp()
    t = get_target("m4")
    from anec.ir.weight_binding import random_weights

    store = random_weights(g, 3)
    lazy = Artifact.build(g, emit_mil(g, t), t, store)
    eager = Artifact.build(g, emit_mil(g, t), t, store)
    eager.blobs.pin()
    lazy.write(tmp_path / "lazy")
    eager.write(tmp_path / "eager")
    for rel in eager.blobs:
        assert (tmp_path / "lazy" / rel).read_bytes() == (tmp_path / "eager" / rel).read_bytes() == lazy.blobs[rel]


def test_deferred_hashes_are_in_every_manifest_before_it_is_read_or_written(tmp_path):
    from concurrent.futures import Future

    from anec.hashing import deferred_hashes, sha256
    from anec.ir.weight_binding import random_weights

    g = small_mlp()
    t = get_target("m4")
    store = random_weights(g, 5)
    want = Artifact.build(g, emit_mil(g, t), t, store).manifest.document["weights"]
    assert all(isinstance(w["sha256"], str) for w in want)  # outside the block: hashed at once
    with deferred_hashes():
        art = Artifact.build(g, emit_mil(g, t), t, store)
    assert len(art.pending) == 2 and all(isinstance(digest, Future) for _, digest in art.pending)
    assert all(w.sha256 is None for w in art.manifest.weights)  # not known yet
    art.write(tmp_path / "a")  # writing finishes the manifest first
    assert not art.pending and art.manifest.document["weights"] == want
    loaded = Artifact.load(tmp_path / "a")
    assert loaded.manifest.document["weights"] == want
    for w in want:
        payload = BlobReader(loaded.blobs[w["file"]]).payload(w["offset"])
        assert sha256(payload) == w["sha256"]


def test_compile_to_disk_returns_finished_manifests(tmp_path):
    res = compile_module(fp16_module(), weights=store16(), out_dir=tmp_path / "out")
    art = res.artifacts["f"]
    assert not art.pending and all(isinstance(w["sha256"], str) for w in art.manifest.document["weights"])
    assert load_artifact(tmp_path / "out").manifest == art.manifest
