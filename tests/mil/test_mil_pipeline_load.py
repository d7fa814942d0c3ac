"""Reading a written pipeline back (PipelineArtifact._read through load_any): what it reads,
the weights compiled as inputs, and every tampering it refuses, word for word (docs/mil.md:
"A pipeline load checks the wiring, ..., every stage as an artifact, each stage's MIL
against mil_sha256, and program.ir"; weight inputs against their sha256).

One real pipeline (tests/mil/pipelines.py) is compiled and written once; each tampering
test edits a copy of its directory.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from anec.diagnostics import ArtifactError
from anec.mil.multi_program import PipelineArtifact, load_any, stage_dir
from tests.mil.pipelines import compile_pipeline

RECOMPILE = "the artifact was modified after compiling; recompile it"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(the compiled pipeline, its weight store, the directory it was written to)."""
    out = tmp_path_factory.mktemp("pipe") / "out"
    res, store = compile_pipeline(out_dir=out)
    return res.artifacts["f"], store, out / "f"


@pytest.fixture
def copy_of(written, tmp_path):
    def make(edit_manifest=None):
        d = tmp_path / "f"
        shutil.copytree(written[2], d)
        if edit_manifest is not None:
            man = json.loads((d / "manifest.json").read_text())
            edit_manifest(man)
            (d / "manifest.json").write_text(json.dumps(man))
        return d
    return make


def refused(d) -> ArtifactError:
    with pytest.raises(ArtifactError) as e:
        load_any(d)
    return e.value


def test_a_written_pipeline_reads_back_file_for_file(written):
    art, store, d = written
    again = load_any(d)
    assert isinstance(again, PipelineArtifact) and again.func == art.func == "f" and len(again.stages) == 2
    assert again.manifest == art.manifest
    assert again.program_ir == art.program_ir == (d / "program.ir").read_text()
    assert again.blobs == {"inputs/w1.bin": (d / "inputs" / "w1.bin").read_bytes()}
    assert again.complete
    files = again.files()
    assert sorted(files) == sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    assert all(files[rel] == (d / rel).read_bytes() for rel in files)
    assert art.files()["inputs/w1.bin"] == files["inputs/w1.bin"]
    assert art.files()["program.ir"] == art.program_ir.encode() == files["program.ir"]


def test_weights_compiled_as_inputs_read_back_as_their_initial_values(written):
    art, store, d = written
    want = store["l1.w"].astype(np.float16)
    for pipe in (art, load_any(d)):
        got = pipe.weight_inputs()
        assert list(got) == ["w1"]
        assert got["w1"].dtype == np.float16 and got["w1"].shape == (8, 8, 1, 1)
        np.testing.assert_array_equal(got["w1"], want)


def test_the_program_ir_parses_with_locations_in_the_pipeline(written):
    art, _, d = written
    for pipe in (art, load_any(d)):
        f = pipe.program_module().funcs["f"]
        assert [n.span.location for n in f.nodes[:2]] == ["f/program.ir:4:9", "f/program.ir:5:9"]
        assert f.nodes[0].attrs["weight"] == "stages/s00/weights/w0.bin@64"


def test_a_manifest_failing_its_check_is_refused_naming_the_manifest(copy_of):
    d = copy_of(lambda m: m.update(surface_bytes=0))
    assert refused(d).message == f"{d}/manifest.json: field 'surface_bytes' must be a positive integer"


def test_a_stage_that_is_not_the_program_the_manifest_names_is_refused(copy_of):
    d = copy_of(lambda m: m["stages"][1].update(mil_sha256="0" * 64))
    e = refused(d)
    assert e.message == f"{d}/stages/s01: stage 1 is not the program the pipeline manifest names"
    assert e.hint == RECOMPILE


def test_a_missing_stage_directory_is_named_as_one(copy_of):
    d = copy_of()
    shutil.rmtree(d / "stages" / "s01")
    assert refused(d).message == f"cannot read stage directory '{d}/stages/s01': it is missing"


def test_a_missing_weight_input_file_is_named_as_one(copy_of):
    d = copy_of()
    (d / "inputs" / "w1.bin").unlink()
    assert refused(d).message == f"cannot read weight input file '{d}/inputs/w1.bin': it is missing"


def test_a_changed_weight_input_is_refused_by_its_sha256(copy_of):
    d = copy_of()
    f = d / "inputs" / "w1.bin"
    data = bytearray(f.read_bytes())
    data[128] ^= 0x01  # the first payload byte (header 64 bytes, then the metadata record)
    f.write_bytes(bytes(data))
    e = refused(d)
    assert e.message == f"{d}/inputs/w1.bin: weight 'l1.w' does not match its sha256"
    assert e.hint == "the weight file was modified after compiling; recompile it"


def test_a_weight_input_offset_off_its_record_is_refused_naming_the_file(copy_of):
    d = copy_of(lambda m: m["weight_inputs"][0].update(offset=96))
    e = refused(d)
    assert e.message == "inputs/w1.bin offset 96: a blob offset must be a multiple of 64 and at least 64"
    assert e.constraint == "ANE-BLOBFILE-OFFSET"


def test_a_weight_input_whose_dtype_disagrees_with_its_blob_is_refused_when_read(copy_of):
    d = copy_of(lambda m: m["weight_inputs"][0].update(dtype="fp32"))
    pipe = load_any(d)  # the payload is untouched: its sha256 still matches
    with pytest.raises(ArtifactError) as e:
        pipe.weight_inputs()
    assert e.value.message == "inputs/w1.bin offset 64: blob holds float16, expected float32"


def test_a_missing_program_ir_is_named_as_the_program_ir(copy_of):
    d = copy_of()
    (d / "program.ir").unlink()
    assert refused(d).message == f"cannot read program IR '{d}/program.ir': it is missing"


def test_a_changed_program_ir_is_refused_by_its_sha256(copy_of):
    d = copy_of()
    (d / "program.ir").write_text((d / "program.ir").read_text() + "\n")
    e = refused(d)
    assert e.message == f"{d}/program.ir does not match the sha256 in manifest.json"
    assert e.hint == RECOMPILE


def test_a_program_ir_that_is_not_utf8_is_refused_even_with_a_matching_sha256(copy_of):
    import hashlib

    bad = b"// \xff\n"
    d = copy_of(lambda m: m["program_ir"].update(sha256=hashlib.sha256(bad).hexdigest()))
    (d / "program.ir").write_bytes(bad)
    e = refused(d)
    assert e.message == f"{d}/program.ir: the program IR is not valid UTF-8 (byte 3)"
    assert e.hint == "the artifact is damaged or was not written by anec; recompile it"


def test_a_manifest_that_is_not_json_is_refused_naming_it(copy_of):
    d = copy_of()
    (d / "manifest.json").write_bytes(b"{\"format\": \"anec-pipeline/1\",")
    assert refused(d).message.startswith(f"{d}/manifest.json: the manifest is not valid JSON (")


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    """A compile output (the index names every func's manifest): pipeline h, one program g."""
    from tests.mil.pipelines import compile_io

    out = tmp_path_factory.mktemp("io") / "out"
    compile_io(out_dir=out)
    return out


@pytest.mark.parametrize("func", ["h", "g"])
def test_a_func_manifest_changed_after_the_compile_output_was_written_is_refused(output, tmp_path, func):
    from anec.mil.artifact import OUTPUT_INDEX

    assert type(load_any(output, func)).__name__ == ("PipelineArtifact" if func == "h" else "Artifact")
    out = tmp_path / "out"
    shutil.copytree(output, out)
    (out / func / "manifest.json").write_text((out / func / "manifest.json").read_text() + " ")
    with pytest.raises(ArtifactError) as e:
        load_any(out, func)
    assert e.value.message == f"{out}/{func}/manifest.json is not the manifest the output index {OUTPUT_INDEX} names"
    assert e.value.hint == "the output was modified after compiling; recompile it"


def test_a_one_program_manifest_replaced_while_it_is_read_is_refused(output, monkeypatch):
    """The manifest a one-program func is parsed from must be the one the index names, even when
    the file changes between the first read (which picks the layout) and the one parsed."""
    from anec.mil.artifact import OUTPUT_INDEX
    from anec.mil.beneath import Beneath

    real = Beneath.read
    reads = []

    def read(self, rel, limit, what="file"):
        data = real(self, rel, limit, what)
        if rel == "manifest.json":
            reads.append(rel)
            if len(reads) == 2:
                return data + b" "
        return data

    monkeypatch.setattr(Beneath, "read", read)
    with pytest.raises(ArtifactError) as e:
        load_any(output, "g")
    assert len(reads) == 2
    assert e.value.message == f"{output}/g/manifest.json is not the manifest the output index {OUTPUT_INDEX} names"


def test_the_pipeline_api_writes_loads_and_counts_its_programs(written, tmp_path):
    art, _, d = written
    out = art.write(tmp_path / "again")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == \
        sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    again = PipelineArtifact.load(out)
    assert again.manifest == art.manifest and again.program_ir == art.program_ir
    assert again.op_count() == sum(s.op_count() for s in art.stages) > art.stages[0].op_count() > 0
    stage = out / stage_dir(0)
    assert not isinstance(load_any(stage), PipelineArtifact)  # a stage is one program
    with pytest.raises(ArtifactError) as e:
        PipelineArtifact.load(stage)
    assert e.value.message == f"'{stage}' holds one program, not a pipeline"


def test_blob_files_name_their_files():
    from anec.mil.blobfile import BlobFiles

    assert repr(BlobFiles({"b.bin": b"", "a.bin": b""})) == "<BlobFiles ['a.bin', 'b.bin']>"
