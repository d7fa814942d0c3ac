"""Artifact: manifest fields, blobs, atomic writes, validated loading."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from anec import fsutil, hashing, thread_pools
from anec.diagnostics import ArtifactError, WeightError
from anec.ir import Builder
from anec.hashing import sha256
from anec.mil import artifact as artifact_mod
from anec.mil import output as output_mod
from anec.mil.artifact import Artifact, alloc_bytes
from anec.mil.blobfile import BlobReader
from anec.mil.emitter import emit_mil
from anec.mil.json_format import format_json
from anec.mil.manifest_types import IOEntry
from anec.passes.base import PassContext
from anec.passes.emit_mil import EmitMil
from anec.targets import get_target
from anec.ir.weight_binding import materialize, random_weights
from anec.weight_store import WeightStore

from .graphs import small_mlp, two_io


def build(graph, target=None, seed=0, pack=False, rewrites=()):
    target = target or get_target("m4")
    store = random_weights(graph, seed)
    return Artifact.build(graph, emit_mil(graph, target, pack_weights=pack), target, store, rewrites)


@pytest.mark.constraint("ANE-IO-ORDER")
def test_manifest_io_and_bindings():
    g = two_io()
    m = build(g).manifest.document
    assert m["format"] == "anec-artifact/1" and m["func"] == "two" and m["target"] == "m4"
    assert [(e["name"], e["binding"]) for e in m["inputs"]] == [("x", 1), ("mask", 0)]
    assert [(e["name"], e["binding"], e["logical"]) for e in m["outputs"]] == [
        ("b_out", 1, "b_out"), ("a_out", 0, "a_out")]
    assert m["inputs"][0] == {"name": "x", "dtype": "fp16", "shape": [1, 4, 1, 8], "binding": 1, "bytes": 64}
    # tiny tensors still get the minimum surface, the same for every input
    assert m["input_alloc_bytes"] == m["output_alloc_bytes"] == 49152
    assert m["logical_outputs"] == [
        {"name": "b_out", "dtype": "fp16", "shape": [1, 4, 1, 8], "axis": None, "pieces": ["b_out"]},
        {"name": "a_out", "dtype": "fp16", "shape": [1, 4, 1, 8], "axis": None, "pieces": ["a_out"]},
    ]
    assert m["limits"]["min_surface_bytes"] == 49152 and m["limits"]["allow_fp32_io"] is True
    assert m["mil"] == {"file": "model.mil", "sha256": sha256(build(g).mil_text), "dialect": "ios18"}
    assert m["weights"] == [] and m["rewrites"] == [] and m["host_casts"] == []


def test_the_manifest_is_read_as_typed_objects(tmp_path):
    """Artifact.load types the manifest once (parse_manifest): every entry by attribute, JSON
    arrays as tuples, unknown keys ignored, and equal to what the compile built."""
    art = build(small_mlp())
    d = art.write(tmp_path / "a")
    doc = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**doc, "from_a_newer_anec": {"x": 1}}))
    m = Artifact.load(d).manifest
    assert m == art.manifest and m.document["from_a_newer_anec"] == {"x": 1}
    assert (m.func, m.target, m.mil.file, m.mil.dialect) == ("mlp", "m4", "model.mil", "ios18")
    assert m.inputs[0] == IOEntry("x", "fp32", (1, 8, 1, 4), 0, 128)
    w1 = m.weights[0]
    assert (w1.key, w1.file, w1.offset, w1.shape, w1.perm, w1.part) == ("l0.w1", "weights/w1.bin", 64,
                                                                        (16, 8, 1, 1), None, None)
    assert w1.mil_path == "@model_path/weights/w1.bin" and w1.sha256 == doc["weights"][0]["sha256"]
    assert m.limits is not None and m.limits.given() == doc["limits"]
    assert m.sram is None and doc["sram"] is None  # built without annotate-sram


def test_a_typed_manifest_changed_apart_from_its_document_is_never_written(tmp_path):
    """The writer writes a manifest's JSON document: a typed manifest changed without it
    (dataclasses.replace) would be written as something else, so files() refuses it."""
    art = build(small_mlp())
    art.manifest = dataclasses.replace(art.manifest, weights=art.manifest.weights[:1])
    with pytest.raises(ArtifactError) as e:
        art.write(tmp_path / "a")
    assert e.value.message == "the manifest of 'mlp' differs from the JSON document it would be written as"
    assert not (tmp_path / "a").exists()


@pytest.mark.constraint("ANE-UNIFORM-SURFACES", "ANE-MIN-SURFACE", "ANE-SURFACE-ALIGN")
def test_alloc_bytes_uniform_aligned():
    m4, m5 = get_target("m4"), get_target("m5")
    assert alloc_bytes([100, 196608], m4) == 196608
    assert alloc_bytes([49153], m4) == 49152 + 64
    assert alloc_bytes([49153], m5) == 49152 + 128
    assert alloc_bytes([], m4) == 49152
    b = Builder("big")
    x = b.input("x", "fp32", [1, 768, 1, 64])
    m = b.input("m", "fp16", [1, 1, 64, 64])
    y = b.cast(b.relu(b.cast(x, dtype="fp16"), name="r"), dtype="fp32", name="y")
    s = b.sigmoid(m, name="s")
    b.ret(y, s)
    man = build(b.graph, m5).manifest.document
    assert [e["bytes"] for e in man["inputs"]] == [196608, 8192]
    assert man["input_alloc_bytes"] == man["output_alloc_bytes"] == 196608
    assert man["input_alloc_bytes"] % m5.surface_alignment == 0


def test_chunked_output_entries():
    b = Builder("head")
    x = b.input("x", "fp16", [1, 8, 1, 4])
    w0 = b.const_weight("proj", "fp16[6, 8, 1, 1]", name="w0", slice=[0, 0, 6])
    w1 = b.const_weight("proj", "fp16[4, 8, 1, 1]", name="w1", slice=[0, 6, 10])
    c0 = b.conv1x1(x, w0, name="logits__c0")
    c1 = b.conv1x1(x, w1, name="logits__c1")
    z = b.relu(x, name="z")
    b.ret(z, c0, c1)
    b.graph.facts.logical_outputs = [{"name": "logits", "axis": 1, "pieces": ["logits__c0", "logits__c1"]}]
    store = WeightStore({"proj": np.arange(80, dtype=np.float32).reshape(10, 8, 1, 1)})
    t = get_target("m4")
    art = Artifact.build(b.graph, emit_mil(b.graph, t), t, store)
    m = art.manifest.document
    assert [(o["name"], o["logical"], o["binding"]) for o in m["outputs"]] == [
        ("z", "z", 2), ("logits__c0", "logits", 0), ("logits__c1", "logits", 1)]
    assert m["logical_outputs"][1] == {"name": "logits", "dtype": "fp16", "shape": [1, 10, 1, 4], "axis": 1,
                                       "pieces": ["logits__c0", "logits__c1"]}
    assert [(w["key"], w["slice"], w["file"]) for w in m["weights"]] == [
        ("proj", [0, 0, 6], "weights/w0.bin"), ("proj", [0, 6, 10], "weights/w1.bin")]
    second = BlobReader(art.blobs["weights/w1.bin"]).read(64, np.float16)
    np.testing.assert_array_equal(second, np.arange(48, 80, dtype=np.float16))


def test_weights_blobs_and_sha(tmp_path):
    g = small_mlp()
    store = random_weights(g, 7)
    t = get_target("m4")
    art = Artifact.build(g, emit_mil(g, t), t, store)
    assert sorted(art.blobs) == ["weights/w1.bin", "weights/w2.bin"]
    for w in art.manifest.document["weights"]:
        node = next(n for n in g.nodes if n.results[0].name == w["const"])
        want = materialize(node, store)
        got = BlobReader(art.blobs[w["file"]]).read(w["offset"], np.float16).reshape(w["shape"])
        np.testing.assert_array_equal(got, want)
        assert w["sha256"] == sha256(want.tobytes())
        assert w["path"] == "@model_path/" + w["file"] and w["perm"] is None and w["dtype"] == "fp16"


def test_packed_weights_one_file():
    art = build(small_mlp(), pack=True)
    assert list(art.blobs) == ["weights/weight.bin"]
    r = BlobReader(art.blobs["weights/weight.bin"])
    assert [e.offset for e in r.entries()] == [w["offset"] for w in art.manifest.document["weights"]]


def test_mil_does_not_depend_on_weight_values():
    a, b = build(small_mlp(), seed=1), build(small_mlp(), seed=2)
    assert a.mil_text == b.mil_text and a.manifest.document["mil"] == b.manifest.document["mil"]
    assert a.blobs != b.blobs


def test_missing_weight_is_an_error():
    g = small_mlp()
    t = get_target("m4")
    with pytest.raises(WeightError, match="l0.w1"):
        Artifact.build(g, emit_mil(g, t), t, WeightStore({}))


def test_text_only_artifact_cannot_be_written(tmp_path):
    g = small_mlp()
    t = get_target("m4")
    art = Artifact.build(g, emit_mil(g, t), t, None)
    assert not art.complete and art.blobs == {}
    assert all(w["sha256"] is None for w in art.manifest.document["weights"])
    with pytest.raises(ArtifactError, match="no weight data") as e:
        art.write(tmp_path / "mlp")
    assert "--random-weights" in e.value.hint
    assert not (tmp_path / "mlp").exists()


def test_emit_mil_pass_stores_artifact_with_own_rewrites():
    g = small_mlp()
    ctx = PassContext.default("m4", weights=random_weights(g, 0))
    ctx.rewrites += [{"rule": "r1", "func": "mlp", "node": "h"}, {"rule": "r2", "func": "other", "node": "q"}]
    EmitMil().run(g, ctx)
    art = ctx.artifacts["mlp"]
    assert art.manifest.document["rewrites"] == [{"rule": "r1", "func": "mlp", "node": "h"}]
    assert art.complete and art.mil_text.startswith("program(1.3)")


# ---- write / load -------------------------------------------------------------


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_write_and_load_roundtrip(tmp_path):
    art = build(small_mlp())
    d = art.write(tmp_path / "out" / "mlp")
    assert sorted(_tree(d)) == ["manifest.json", "model.mil", "program.ir", "weights/w1.bin", "weights/w2.bin"]
    assert json.loads((d / "manifest.json").read_text()) == art.manifest.document
    back = Artifact.load(d)
    assert (back.func, back.mil_text, back.blobs, back.manifest, back.program_ir) == (
        art.func, art.mil_text, art.blobs, art.manifest, art.program_ir)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mlp"]  # no temp dirs left


@pytest.mark.parametrize("exchange", [True, False])
def test_rewrite_replaces_previous_artifact(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(fsutil, "_exchange", lambda a, b: False)
    d = tmp_path / "mlp"
    build(small_mlp(), pack=True).write(d)
    new = build(small_mlp(), seed=3)
    new.write(d)
    assert Artifact.load(d).blobs == new.blobs
    assert not (d / "weights" / "weight.bin").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["mlp"]


def test_failed_write_leaves_destination_unchanged(tmp_path, monkeypatch):
    d = tmp_path / "mlp"
    build(small_mlp(), seed=1).write(d)
    before = _tree(d)
    real = fsutil.write_new_file
    calls = []

    def failing(path, data):
        calls.append(path)
        if len(calls) == 2:  # after model.mil, while writing the first weight file
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(fsutil, "write_new_file", failing)
    with pytest.raises(ArtifactError, match="No space left"):
        build(small_mlp(), seed=2).write(d)
    assert _tree(d) == before
    assert [p.name for p in tmp_path.iterdir()] == ["mlp"]
    calls.clear()
    with pytest.raises(ArtifactError):
        build(small_mlp(), seed=2).write(tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp"]


def test_interrupted_write_leaves_destination_unchanged(tmp_path, monkeypatch):
    d = tmp_path / "mlp"
    build(small_mlp(), seed=1).write(d)
    before = _tree(d)

    def interrupted(a, b):
        raise KeyboardInterrupt

    monkeypatch.setattr(fsutil, "_exchange", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build(small_mlp(), seed=2).write(d)
    assert _tree(d) == before and [p.name for p in tmp_path.iterdir()] == ["mlp"]


def test_refuses_to_replace_a_non_artifact_directory(tmp_path):
    d = tmp_path / "mlp"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactError, match="refusing to replace"):
        build(small_mlp()).write(d)
    assert (d / "notes.txt").read_text() == "mine"
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ArtifactError, match="it is a file"):
        build(small_mlp()).write(f)


def test_load_detects_tampering(tmp_path):
    d = build(small_mlp()).write(tmp_path / "mlp")
    mil = d / "model.mil"
    mil.write_text(mil.read_text().replace("relu", "tanh"))
    with pytest.raises(ArtifactError, match="model.mil does not match the sha256"):
        Artifact.load(d)

    d = build(small_mlp()).write(tmp_path / "mlp2")
    w = d / "weights" / "w2.bin"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="'l0.w2' does not match its sha256"):
        Artifact.load(d)

    (d / "weights" / "w2.bin").unlink()
    with pytest.raises(ArtifactError, match="cannot read weight file"):
        Artifact.load(d)


def test_load_rejects_bad_manifests(tmp_path):
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        Artifact.load(tmp_path)
    d = build(small_mlp()).write(tmp_path / "mlp")
    man = json.loads((d / "manifest.json").read_text())
    for change, msg in [
        ({"format": "other/9"}, "field 'format': expected \"anec-artifact/1\", got \"other/9\""),
        ({"weights": [dict(man["weights"][0], dtype="fp32")]}, "holds 256 bytes of float16"),
        ({"weights": [dict(man["weights"][0], file="../../etc/passwd")]},
         r"field 'weights\[0\].file': expected a relative path inside the artifact"),
        ({"weights": [dict(man["weights"][0], offset=128)]}, "no blob metadata"),
    ]:
        (d / "manifest.json").write_text(json.dumps({**man, **change}))
        with pytest.raises(ArtifactError, match=msg):
            Artifact.load(d)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="the manifest is not valid JSON"):
        Artifact.load(d)
    man.pop("inputs")
    (d / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ArtifactError, match=r"field 'inputs': expected a value \(the field is missing\)"):
        Artifact.load(d)


def test_written_files_are_private_to_the_artifact(tmp_path):
    d = build(small_mlp()).write(tmp_path / "a" / "b" / "mlp")
    assert d.is_dir() and os.listdir(tmp_path / "a" / "b") == ["mlp"]


def test_refusals_to_replace_say_what_to_do_instead(tmp_path):
    """A non-artifact directory or a symbolic link as the destination: the hint names the way out."""
    d = tmp_path / "mlp"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactError, match="refusing to replace") as e:
        build(small_mlp()).write(d)
    assert e.value.hint == "choose an empty or new output directory"
    real = build(small_mlp()).write(tmp_path / "real")
    os.symlink(real, tmp_path / "link")
    with pytest.raises(ArtifactError, match=r"'.*link': it is a symbolic link") as e:
        build(small_mlp()).write(tmp_path / "link")
    assert e.value.hint == "give the real directory: a write replaces the path it is given"


# ---- summaries and the reference interpreter's view -----------------------------------


def test_op_count_counts_every_mil_statement():
    """Each statement of the func body (consts included) counts once; the func line does not."""
    art = build(small_mlp())
    statements = [line for line in art.mil_text.splitlines() if " = " in line and line.endswith("];")]
    assert len(statements) == 21
    assert art.op_count() == 21


def test_program_module_locates_its_values_in_the_func_program_ir():
    """Spans of the parsed program.ir name '<func>/program.ir', so interpreter errors point at the file."""
    g = build(small_mlp()).program_module().funcs["mlp"]
    assert g.inputs[0].span.location == "mlp/program.ir:3:10"
    assert all(n.results[0].span.location.startswith("mlp/program.ir:") for n in g.nodes)


def test_artifact_weights_have_the_manifest_shape_and_dtype():
    """Each weight is read as its manifest dtype and shape, keyed by file@offset; a blob holding
    another dtype than the manifest says is refused, naming the weight file."""
    g = small_mlp()
    store = random_weights(g, 4)
    art = build(g, seed=4)
    got = artifact_mod.artifact_weights(art)
    assert sorted(got) == ["weights/w1.bin@64", "weights/w2.bin@64"]
    w1 = next(n for n in g.nodes if n.results[0].name == "w1")
    assert got["weights/w1.bin@64"].shape == (16, 8, 1, 1) and got["weights/w2.bin@64"].shape == (8, 16, 1, 1)
    np.testing.assert_array_equal(got["weights/w1.bin@64"], materialize(w1, store))
    w2 = dataclasses.replace(art.manifest.weights[1], dtype="fp32")
    art.manifest = dataclasses.replace(art.manifest, weights=(art.manifest.weights[0], w2))
    with pytest.raises(ArtifactError) as e:
        artifact_mod.artifact_weights(art)
    assert e.value.message == "weights/w2.bin offset 64: blob holds float16, expected float32"


def test_artifact_weight_inputs_have_the_manifest_shape_and_dtype():
    """A weight compiled as an input comes back in its input's shape; a dtype the blob does not hold
    is refused, naming the input's BLOBFILE."""
    g = two_io()
    g.facts.weight_inputs = [{"key": "m", "input": "mask", "dtype": "fp16", "shape": [1, 4, 1, 8]}]
    value = np.arange(32, dtype=np.float32).reshape(1, 4, 1, 8)
    t = get_target("m4")
    art = Artifact.build(g, emit_mil(g, t), t, WeightStore({"m": value}))
    got = artifact_mod.artifact_weight_inputs(art)
    assert list(got) == ["mask"] and got["mask"].shape == (1, 4, 1, 8) and got["mask"].dtype == np.float16
    np.testing.assert_array_equal(got["mask"], value.astype(np.float16))
    wi = dataclasses.replace(art.manifest.weight_inputs[0], dtype="fp32")
    art.manifest = dataclasses.replace(art.manifest, weight_inputs=(wi,))
    with pytest.raises(ArtifactError) as e:
        artifact_mod.artifact_weight_inputs(art)
    assert e.value.message == "inputs/mask.bin offset 64: blob holds float16, expected float32"


def test_weight_bytes_is_the_byte_size_of_every_weight():
    """small_mlp: fp16[16, 8, 1, 1] and fp16[8, 16, 1, 1], two bytes an element."""
    assert build(small_mlp()).weight_bytes() == 2 * (16 * 8 + 8 * 16)


def test_the_hash_pool_is_one_per_process_with_a_thread_per_core(monkeypatch):
    """Deferred weight hashes run on one pool per process (a forked child makes its own): a thread
    per core (one when the count is unknown), named anec-hash."""
    import threading

    monkeypatch.setattr(thread_pools, "_pools", {})
    pool = thread_pools.hash_pool()
    made = [pool]
    try:
        assert thread_pools.hash_pool() is pool
        assert pool._max_workers == os.cpu_count()
        assert pool.submit(lambda: threading.current_thread().name).result().startswith("anec-hash_")
        monkeypatch.setattr(thread_pools, "_pools", {"hash": (os.getpid() + 1, pool)})  # what a forked child inherits
        made.append(thread_pools.hash_pool())
        assert made[-1] is not pool
        monkeypatch.setattr(os, "cpu_count", lambda: None)
        monkeypatch.setattr(thread_pools, "_pools", {})
        made.append(thread_pools.hash_pool())
        assert made[-1]._max_workers == 1
    finally:
        for p in made:
            p.shutdown()


def test_the_write_pool_is_one_per_process_and_not_the_hash_pool(monkeypatch, tmp_path):
    """Outputs are written by one pool of _WRITERS threads per process (made again in a forked
    child), named anec-write: a write starts no threads of its own."""
    import threading

    monkeypatch.setattr(thread_pools, "_pools", {})
    pool = thread_pools.write_pool()
    made = [pool]
    try:
        assert thread_pools.write_pool() is pool
        assert pool is not thread_pools.hash_pool()
        made.append(thread_pools.hash_pool())
        assert pool._max_workers == thread_pools.WRITERS == 16
        assert pool.submit(lambda: threading.current_thread().name).result().startswith("anec-write_")
        started = threading.Thread.start
        starts = []
        monkeypatch.setattr(threading.Thread, "start", lambda t: (starts.append(t.name), started(t))[1])
        for i in range(2):  # more files than writers: the pool takes them all
            arts = {f"f{j}": build(small_mlp(), seed=j) for j in range(6)}
            output_mod.write_output(tmp_path / "out", arts)
        assert not [n for n in starts if not n.startswith("anec-write_")]
        assert len(starts) <= 16
        monkeypatch.setattr(threading.Thread, "start", started)
        assert thread_pools.write_pool() is pool
        monkeypatch.setattr(thread_pools, "_pools", {"write": (os.getpid() + 1, pool)})  # a forked child's
        made.append(thread_pools.write_pool())
        assert made[-1] is not pool and made[-1]._max_workers == 16
    finally:
        for p in made:
            p.shutdown()


def test_the_manifests_are_written_while_the_stages_are(tmp_path, monkeypatch):
    """write_output starts each stage's MIL, program.ir and weight files first (their fsyncs overlap
    the weight hashing), then, while those are still being written, the manifests and the index;
    the tree is renamed into place only once every write has finished."""
    import threading

    from .pipelines import compile_pipeline

    res, _ = compile_pipeline()
    batches = []
    release = threading.Event()
    real_start, real_write, real_move = fsutil._start_writes, fsutil.write_new_file, fsutil.move_into_place
    written = []

    def start(root, files, jobs):
        batches.append(sorted(files))
        real_start(root, files, jobs)
        if len(batches) == 2:
            release.set()  # the first batch's writes may end only now

    def write(path, data):
        if path.name == "program.ir" and path.parent.name == "f":
            assert release.wait(10)  # held until the manifests were started
        real_write(path, data)
        written.append(path.name)

    def move(src, dest, **kw):
        batches.append(("moved", len(written)))
        return real_move(src, dest, **kw)

    monkeypatch.setattr(fsutil, "_start_writes", start)
    monkeypatch.setattr(fsutil, "write_new_file", write)
    monkeypatch.setattr(fsutil, "move_into_place", move)
    output_mod.write_output(tmp_path / "out", res.artifacts)
    first, second, moved = batches
    assert {"f/stages/s00/model.mil", "f/stages/s01/model.mil", "f/stages/s00/program.ir",
            "f/stages/s01/program.ir", "f/program.ir", "f/inputs/w1.bin"} <= set(first)
    assert not any(rel.endswith("manifest.json") for rel in first)
    assert {"f/manifest.json", "f/stages/s00/manifest.json", artifact_mod.OUTPUT_INDEX} <= set(second)
    assert moved == ("moved", len(first) + len(second))  # every file written before the rename
    from anec.mil.multi_program import PipelineArtifact

    assert PipelineArtifact.load(tmp_path / "out" / "f").func == "f"


def test_a_pipeline_stage_directory_outside_the_func_is_refused_before_writing(tmp_path):
    from .pipelines import compile_pipeline

    res, _ = compile_pipeline()
    pipe = res.artifacts["f"]
    escaped = dataclasses.replace(pipe.manifest.stages[0], dir="../../escaped")
    pipe.manifest = dataclasses.replace(pipe.manifest, stages=(escaped, *pipe.manifest.stages[1:]))
    with pytest.raises(ArtifactError) as e:
        output_mod.write_output(tmp_path / "out", res.artifacts)
    assert e.value.message == ("stage directory '../../escaped' points outside the artifact directory "
                               "(every component must be a plain name)")
    assert os.listdir(tmp_path) == []


def test_files_name_the_missing_weight_file_and_how_to_get_weights():
    g = small_mlp()
    t = get_target("m4")
    art = Artifact.build(g, emit_mil(g, t), t, None)
    with pytest.raises(ArtifactError) as e:
        art.files()
    assert e.value.message == "artifact 'mlp' has no weight data (weights/w1.bin is missing)"
    assert e.value.hint == "compile with weights: --weights FILE or --random-weights SEED"


def test_files_refuse_a_manifest_that_load_would_refuse_naming_the_func():
    art = build(small_mlp())
    art.manifest.document["format"] = "other/9"
    with pytest.raises(ArtifactError) as e:
        art.files()
    assert e.value.message.startswith("the manifest of 'mlp': field 'format': expected \"anec-artifact/1\"")


def test_a_weight_file_outside_the_artifact_is_never_written(tmp_path):
    """A weight file path climbing out of the artifact: refused before anything is written."""
    art = build(small_mlp())
    art.blobs = {**{rel: art.blobs[rel] for rel in art.blobs}, "../escaped.bin": b"x" * 64}
    with pytest.raises(ArtifactError) as e:
        art.write(tmp_path / "out" / "mlp")
    assert e.value.message == ("weight file '../escaped.bin' points outside the artifact directory "
                               "(every component must be a plain name)")
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_loading_an_artifact_directory_for_another_func_is_refused(tmp_path):
    d = build(small_mlp()).write(tmp_path / "mlp")
    assert output_mod.load_artifact(d, "mlp").func == "mlp"
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(d, "other")
    assert e.value.message == f"'{d}' holds func 'mlp', not 'other'"


def test_func_names_that_cannot_name_an_output_directory_are_refused(tmp_path):
    """Empty, hidden, with a path separator or NUL, or not a string: refused; any other name is a
    directory of the output (capital letters included)."""
    art = build(small_mlp())
    for bad in ("", ".hidden", "a/b", "a\\b", "a\0b", 5, None):
        with pytest.raises(ArtifactError) as e:
            output_mod.write_output(tmp_path / "out", {bad: art})
        assert e.value.message == f"func name {bad!r:.60} cannot name a directory of the output"
    assert not (tmp_path / "out").exists()
    paths = output_mod.write_output(tmp_path / "out", {"XmlpX": art})
    assert paths == {"XmlpX": tmp_path / "out" / "XmlpX"} and (paths["XmlpX"] / "manifest.json").is_file()


def test_an_output_index_naming_an_empty_func_is_refused(tmp_path):
    out = tmp_path / "out"
    output_mod.write_output(out, {"mlp": build(small_mlp())})
    index = json.loads((out / ".anec-output.json").read_text())
    index["funcs"] = {"": index["funcs"]["mlp"]}
    (out / ".anec-output.json").write_text(json.dumps(index))
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(out)
    assert e.value.message == "func name '' cannot name a directory of the output"


def test_loading_an_output_without_naming_the_func_needs_exactly_one(tmp_path):
    """No func: an error saying how to compile; two or more: an error listing them and how to choose."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(empty)
    assert e.value.message == (f"'{empty}' is not an artifact directory (no manifest.json in it or its "
                               "subdirectories)")
    assert e.value.hint == "compile first: anec compile model.ir -o DIR"
    out = tmp_path / "out"
    output_mod.write_output(out, {"b": build(small_mlp("b")), "a": build(small_mlp("a"))})
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(out)
    assert e.value.message == f"'{out}' holds several funcs (a, b); choose one"
    assert e.value.hint == "pass func=NAME (CLI: --func NAME)"
    assert output_mod.load_artifact(out, "b").func == "b"


def test_loading_a_func_an_output_does_not_hold_as_named(tmp_path):
    """A missing func (with a suggestion), a func directory that is a link, a directory holding another func."""
    out = tmp_path / "out"
    output_mod.write_output(out, {"mlp": build(small_mlp()), "other": build(small_mlp("b"))})
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(out, "mlq")
    assert e.value.message == f"'{out}' has no func 'mlq' (funcs: mlp, other)"
    assert e.value.hint == "did you mean 'mlp'?"
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(out, "other")
    assert e.value.message == f"'{out / 'other'}' holds func 'b', not 'other'"
    os.rename(out / "mlp", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", out / "mlp")
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(out, "mlp")
    assert e.value.message == f"cannot read func directory '{out / 'mlp'}' (it is a symbolic link)"


def test_a_temporary_directory_is_never_loaded(tmp_path):
    tmp = build(small_mlp()).write(tmp_path / ".out.anec-tmp-1a2b3c4d")
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(tmp)
    assert e.value.message == (f"'{tmp}' is a temporary directory of an unfinished or replaced compile; "
                               "it is never loaded")
    assert e.value.hint == "load the output directory the compile was given (-o)"


def test_an_output_replaced_while_it_is_loaded_is_read_again_up_to_three_times(tmp_path):
    """Each failed read of an output a newer compile replaced meanwhile is retried; the third failure is raised."""
    src = build(small_mlp()).write(tmp_path / "src")
    out = tmp_path / "out"
    shutil.copytree(src, out)
    calls = []

    def replacing_loader(d, sha):
        calls.append(d.path)
        os.rename(out, tmp_path / f"gone-{fail_times}-{len(calls)}")
        shutil.copytree(src, out)
        if len(calls) < fail_times:
            raise ArtifactError("damaged")
        return Artifact.read(d, sha)

    fail_times = 3
    assert output_mod.load_artifact(out, loader=replacing_loader).func == "mlp" and len(calls) == 3
    calls.clear()
    fail_times = 4
    with pytest.raises(ArtifactError, match="damaged"):
        output_mod.load_artifact(out, loader=replacing_loader)
    assert len(calls) == 3


def test_an_artifact_manifest_must_be_there_be_a_file_and_be_the_one_the_index_names(tmp_path):
    """Missing, a directory, or changed after the output index was written: each refused with its words."""
    with pytest.raises(ArtifactError) as e:
        Artifact.load(tmp_path)
    assert e.value.message == f"'{tmp_path}' is not an artifact: manifest.json is missing"
    assert e.value.hint == "compile first: anec compile model.ir -o DIR"
    d = tmp_path / "d"
    (d / "manifest.json").mkdir(parents=True)
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    assert e.value.message == f"cannot read manifest '{d / 'manifest.json'}' (it is a directory); expected a regular file"
    out = tmp_path / "out"
    output_mod.write_output(out, {"mlp": build(small_mlp())})
    manifest = out / "mlp" / "manifest.json"
    manifest.write_text(manifest.read_text() + " ")
    with pytest.raises(ArtifactError) as e:
        output_mod.load_artifact(out)
    assert e.value.message == f"{manifest} is not the manifest the output index .anec-output.json names"
    assert e.value.hint == "the output was modified after compiling; recompile it"


def test_a_damaged_manifest_or_mil_names_its_file_and_says_to_recompile(tmp_path):
    d = build(small_mlp()).write(tmp_path / "mlp")
    mil = d / "model.mil"
    mil.write_text(mil.read_text().replace("relu", "tanh"))
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    assert e.value.message == f"{mil} does not match the sha256 in manifest.json"
    assert e.value.hint == "the artifact was modified after compiling; recompile it"
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    assert e.value.message.startswith(f"{d / 'manifest.json'}: the manifest is not valid JSON (")


def test_a_weight_entry_disagreeing_with_its_blob_is_refused_naming_the_weight_file(tmp_path):
    """Another size of the same dtype, or an offset with no blob: the error names the weight file's path."""
    d = build(small_mlp()).write(tmp_path / "mlp")
    man = json.loads((d / "manifest.json").read_text())
    w1 = d / "weights" / "w1.bin"
    for change, words in [({"shape": [8, 8, 1, 1]}, "offset 64: holds 256 bytes of float16, the manifest says "
                                                      "fp16[8, 8, 1, 1] for weight 'l0.w1'"),
                          ({"offset": 128}, "offset 128: ")]:
        (d / "manifest.json").write_text(json.dumps({**man, "weights": [dict(man["weights"][0], **change),
                                                                        man["weights"][1]]}))
        with pytest.raises(ArtifactError) as e:
            Artifact.load(d)
        assert e.value.message.startswith(f"{w1} {words}")


@pytest.mark.parametrize("rel, key, bad, what", [
    ("model.mil", "mil", b"program(1.3)\xff", "the MIL text is not valid UTF-8 (byte 12)"),
    ("program.ir", "program_ir", b"func @f\xfe", "the program IR is not valid UTF-8 (byte 7)"),
])
def test_text_that_is_not_utf8_is_refused_naming_the_file(tmp_path, rel, key, bad, what):
    """MIL text and program IR whose sha256 matches the manifest but whose bytes are not UTF-8."""
    d = build(small_mlp()).write(tmp_path / "mlp")
    (d / rel).write_bytes(bad)
    man = json.loads((d / "manifest.json").read_text())
    man[key]["sha256"] = sha256(bad)
    (d / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    assert e.value.message == f"{d / rel}: {what}"


def test_a_changed_weight_names_the_weight_and_says_to_recompile(tmp_path):
    d = build(small_mlp()).write(tmp_path / "mlp")
    w = d / "weights" / "w2.bin"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    assert e.value.message == f"{w} offset 64: weight 'l0.w2' does not match its sha256"
    assert e.value.hint == "the weight file was modified after compiling; recompile it"


def test_a_program_ir_that_is_not_a_file_is_named_as_the_program_ir(tmp_path):
    d = build(small_mlp()).write(tmp_path / "mlp")
    (d / "program.ir").unlink()
    (d / "program.ir").mkdir()
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    assert e.value.message == f"cannot read program IR '{d / 'program.ir'}' (it is a directory); expected a regular file"


def test_a_changed_program_ir_names_its_file_and_says_to_recompile(tmp_path):
    d = build(small_mlp()).write(tmp_path / "mlp")
    ir = d / "program.ir"
    ir.write_text(ir.read_text() + "\n")
    with pytest.raises(ArtifactError) as e:
        Artifact.load(d)
    assert e.value.message == f"{ir} does not match the sha256 in manifest.json"
    assert e.value.hint == "the artifact was modified after compiling; recompile it"


def test_alloc_bytes_with_alignment_one_or_zero_keeps_the_size():
    """An alignment of 1 (or 0, read as 1) rounds nothing: an odd size stays odd."""
    import dataclasses

    for align in (0, 1):
        t = dataclasses.replace(get_target("m4"), surface_alignment=align)
        assert alloc_bytes([49153], t) == 49153


def test_rewrite_records_become_plain_json_values():
    """Sets become lists sorted by their text, tensor types their text, finite floats stay floats,
    infinities and NaN become strings, and any other object its str."""
    from anec.ir.types import DType, TensorType

    record = {"pass": "p", "ids": {10, 9}, "mixed": frozenset({"a", 1}),
              "type": TensorType(DType("fp16"), (1, 4)), "scale": 0.5,
              "big": float("inf"), "nan": float("nan"), "path": Path("a/b")}
    m = build(two_io(), rewrites=[record]).manifest.document
    assert m["rewrites"] == [{"pass": "p", "ids": [10, 9], "mixed": [1, "a"], "type": "fp16[1, 4]",
                              "scale": 0.5, "big": "inf", "nan": "nan", "path": "a/b"}]


@pytest.mark.parametrize("n", [111, 112])
def test_a_flat_dict_stays_on_one_line_up_to_120_characters(n):
    """format_json puts a flat dict on one line when that line is at most 120 characters."""
    obj = {"k": "x" * n}  # one line: {"k": "xxx..."} is n + 9 characters
    got = format_json(obj)
    assert json.loads(got) == obj
    if n + 9 <= 120:
        assert got == '{"k": "' + "x" * n + '"}'
    else:
        assert got == '{\n  "k": "' + "x" * n + '"\n}'


def test_a_logical_output_listing_a_piece_the_func_does_not_return_is_refused():
    """A logical output must be built from outputs the func returns; the error names both."""
    from anec.diagnostics import PassError

    g = two_io()
    g.facts.logical_outputs = [{"name": "both", "axis": 1, "pieces": ["a_out", "gone"]}]
    with pytest.raises(PassError) as e:
        build(g)
    assert e.value.message == "func 'two': logical output 'both' lists piece 'gone', which the func does not return"


def test_a_logical_output_shape_that_does_not_hold_its_pieces_is_refused():
    """The shape a logical output is reshaped to must hold exactly its pieces' elements."""
    from anec.diagnostics import PassError

    g = two_io()
    g.facts.logical_outputs = [{"name": "a", "axis": None, "pieces": ["a_out"], "shape": [4, 9]}]
    with pytest.raises(PassError) as e:
        build(g)
    assert e.value.message == ("func 'two': logical output 'a' has shape [4, 9], "
                               "which does not hold the [1, 4, 1, 8] it is built from")


def test_the_hashing_threads_are_one_per_large_payload_up_to_the_cores_and_eight(monkeypatch):
    """A thread per payload of at least 1 MiB, but no more than the cores (one when the count is
    unknown) and never more than eight."""
    big = hashing.PARALLEL_BYTES
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert hashing.parallel_workers([]) == 0
    assert hashing.parallel_workers([big - 1]) == 0
    assert hashing.parallel_workers([big, big - 1]) == 1
    assert hashing.parallel_workers([big] * 4) == 4
    assert hashing.parallel_workers([big] * 10) == 8
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert hashing.parallel_workers([big] * 5) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert hashing.parallel_workers([big] * 5) == 1


def test_two_large_payloads_are_hashed_on_two_threads_and_one_without_a_pool(monkeypatch):
    """payload_digests: each array's own sha256, in order; two payloads of 1 MiB are hashed on a
    pool of two threads, a single one without a pool."""
    import concurrent.futures
    import hashlib

    pools = []

    class Recording(concurrent.futures.ThreadPoolExecutor):
        def __init__(self, max_workers=None, *args, **kwargs):
            pools.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Recording)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    n = hashing.PARALLEL_BYTES // 2
    arrays = [np.full(n, 1, np.float16), np.arange(6, dtype=np.float32).reshape(2, 3), np.full(n, 2, np.float16)]
    assert hashing.payload_digests(arrays) == [hashlib.sha256(a.tobytes()).hexdigest() for a in arrays]
    assert pools == [2]
    assert hashing.payload_digests(arrays[:2]) == [hashlib.sha256(a.tobytes()).hexdigest() for a in arrays[:2]]
    assert pools == [2]


def test_an_empty_payload_of_any_rank_hashes_as_no_bytes():
    """An array with no elements, however many dimensions, is the sha256 of empty bytes."""
    empty = sha256(b"")
    assert hashing.payload_digests([np.zeros((0, 4), np.float16), np.zeros((2, 0, 3), np.float32),
                                         np.zeros(0, np.float16)]) == [empty] * 3


def test_a_logical_input_shape_that_does_not_hold_the_input_is_refused():
    """The shape a caller passes an input in must hold exactly the input's elements."""
    from anec.diagnostics import PassError

    g = two_io()
    g.facts.logical_inputs = [{"name": "x", "dtype": "fp16", "shape": [4, 9]}]
    with pytest.raises(PassError) as e:
        build(g)
    assert e.value.message == "func 'two': logical input 'x' has shape [4, 9], which does not hold fp16[1, 4, 1, 8]"


def test_build_manifest_hashes_the_program_ir_it_is_given_and_empty_text_by_default():
    """The manifest's program_ir sha256 is that of the text passed (the empty text when none is)."""
    g, t = two_io(), get_target("m4")
    program = emit_mil(g, t)
    assert artifact_mod.build_manifest(g, program, t, [])["program_ir"] == {"file": "program.ir", "sha256": sha256("")}
    assert artifact_mod.build_manifest(g, program, t, [], program_ir="x")["program_ir"]["sha256"] == sha256("x")


def test_building_copies_no_weight_already_in_its_declared_dtype():
    """An fp16 weight stored as fp16 is not copied by Artifact.build: its blob reads it from the
    store (the one copy is made when the file is written)."""
    import tracemalloc

    b = Builder("wide")
    x = b.input("x", "fp16", [1, 512, 1, 8])
    w = b.const_weight("w", "fp16[1024, 512, 1, 1]", name="w")
    b.ret(b.conv1x1(x, w, name="y"))
    t = get_target("m4")
    program = emit_mil(b.graph, t)
    value = np.full((1024, 512, 1, 1), 0.5, np.float16)  # 1 MiB
    store = WeightStore({"w": value})
    tracemalloc.start()
    try:
        art = Artifact.build(b.graph, program, t, store)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < value.nbytes // 8, (peak, value.nbytes)
    assert art.blobs["weights/w.bin"][128:] == value.tobytes()


def test_a_weight_plan_the_blob_writer_disagrees_with_is_refused():
    """The emitter's planned offset of each weight must be where the writer puts it."""
    import dataclasses

    from anec.diagnostics import PassError

    g, t = small_mlp(), get_target("m4")
    program = emit_mil(g, t)
    program.weights[1] = dataclasses.replace(program.weights[1], offset=128)
    with pytest.raises(PassError) as e:
        Artifact.build(g, program, t, random_weights(g, 0))
    assert e.value.message == "emit-mil: blob offset 64 != planned 128 in weights/w2.bin"


def test_without_weights_there_are_no_blobs_and_no_digests():
    """build_blobs and build_weight_inputs without a store: no blob files, every sha256 None."""
    g = two_io()
    g.facts.weight_inputs = [{"key": "m", "input": "mask", "dtype": "fp16", "shape": [1, 4, 1, 8]}]
    t = get_target("m4")
    blobs, entries = artifact_mod.build_blobs(emit_mil(small_mlp(), t), None)
    assert blobs is None and [e["sha256"] for e in entries] == [None, None]
    art = Artifact.build(g, emit_mil(g, t), t, None)
    assert art.manifest.document["weight_inputs"][0]["sha256"] is None and not art.complete


def test_a_built_artifact_keeps_the_emitted_program():
    """Artifact.build keeps the emitter's result (names and weight plan) it was built from."""
    g, t = small_mlp(), get_target("m4")
    program = emit_mil(g, t)
    assert Artifact.build(g, program, t, random_weights(g, 0)).program is program


def test_a_weight_input_is_the_slice_of_its_stored_tensor():
    """A weight compiled as an input takes the slice its entry names, and the manifest records it."""
    g = two_io()
    g.facts.weight_inputs = [{"key": "m", "input": "mask", "dtype": "fp16", "shape": [1, 4, 1, 8],
                                "slice": [1, 2, 6]}]
    value = np.arange(64, dtype=np.float32).reshape(1, 8, 1, 8)
    t = get_target("m4")
    art = Artifact.build(g, emit_mil(g, t), t, WeightStore({"m": value}))
    assert art.manifest.document["weight_inputs"][0]["slice"] == [1, 2, 6]
    np.testing.assert_array_equal(artifact_mod.artifact_weight_inputs(art)["mask"],
                                  value[:, 2:6].astype(np.float16))


def test_a_stored_weight_input_of_the_wrong_shape_names_the_input():
    """A stored tensor that cannot fill a weight input is refused, naming the weight and the input."""
    g = two_io()
    g.facts.weight_inputs = [{"key": "m", "input": "mask", "dtype": "fp16", "shape": [1, 4, 1, 8]}]
    t = get_target("m4")
    with pytest.raises(WeightError) as e:
        Artifact.build(g, emit_mil(g, t), t, WeightStore({"m": np.zeros((1, 4, 1, 9), np.float32)}))
    assert e.value.message == ("weight 'm' has shape [1, 4, 1, 9] (36 elements) but const %mask is declared "
                               "fp16[1, 4, 1, 8] (32 elements)")
