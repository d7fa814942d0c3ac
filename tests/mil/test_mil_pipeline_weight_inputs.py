"""A pipeline manifest's weight inputs are read from a hostile file: every field the load and
PipelineArtifact.weight_inputs read is checked first (the one-program manifest schema's entry,
anec/mil/manifest.py), and a shape the BLOBFILE cannot fill is refused, never a traceback.
"""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from anec.diagnostics import ArtifactError
from anec.mil.multi_program import check_manifest, load_any
from tests.mil.pipelines import compile_pipeline

WHERE = "out/f/manifest.json"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipe") / "out"
    res, _ = compile_pipeline(out_dir=out)
    return res.artifacts["f"].manifest.document, out / "f"


def _entry(**change):
    def edit(w):
        for k, v in change.items():
            if v is None:
                del w[k]
            else:
                w[k] = v
    return edit


@pytest.mark.parametrize("edit,field,expected", [
    (_entry(key=None), "weight_inputs[0].key", "a value (the field is missing)"),
    (_entry(input="w 1"), "weight_inputs[0].input", "a MIL identifier ([A-Za-z_][A-Za-z0-9_]*)"),
    (_entry(input="w9"), "weight_inputs[0].input", "the name of a func input"),
    (_entry(file="weights/w1.bin"), "weight_inputs[0].file",
     "a relative path inside the artifact, below inputs/ (plain names, no '..')"),
    (_entry(offset="64"), "weight_inputs[0].offset", "an integer in [64, 2^62]"),
    (_entry(dtype="float16"), "weight_inputs[0].dtype", 'one of "fp16", "fp32", "uint8", "int8"'),
    (_entry(shape=[8, 0]), "weight_inputs[0].shape[1]", "a dimension in [1, 2^31)"),
    (_entry(sha256=None), "weight_inputs[0].sha256", "a value (the field is missing)"),
    (lambda w: w.clear(), "weight_inputs[0].key", "a value (the field is missing)"),
])
def test_each_broken_weight_input_field_is_refused_by_name(written, edit, field, expected):
    m = copy.deepcopy(written[0])
    edit(m["weight_inputs"][0])
    with pytest.raises(ArtifactError) as e:
        check_manifest(m, WHERE)
    assert e.value.message == f"{WHERE}: field '{field}' must be {expected}"


@pytest.mark.parametrize("value,field,expected", [
    ({"file": "inputs/w1.bin"}, "weight_inputs", "an array"),
    (["inputs/w1.bin"], "weight_inputs[0]", "an object"),
])
def test_weight_inputs_must_be_a_list_of_objects(written, value, field, expected):
    m = copy.deepcopy(written[0])
    m["weight_inputs"] = value
    with pytest.raises(ArtifactError) as e:
        check_manifest(m, WHERE)
    assert e.value.message == f"{WHERE}: field '{field}' must be {expected}"


def test_a_shape_the_blob_cannot_fill_is_refused_when_read(written, tmp_path):
    d = tmp_path / "f"
    shutil.copytree(written[1], d)
    man = json.loads((d / "manifest.json").read_text())
    man["weight_inputs"][0]["shape"] = [8, 4, 1, 1]  # the payload is untouched: its sha256 still matches
    (d / "manifest.json").write_text(json.dumps(man))
    pipe = load_any(d)
    with pytest.raises(ArtifactError) as e:
        pipe.weight_inputs()
    assert e.value.message == ("inputs/w1.bin offset 64: blob holds 64 values, the shape [8, 4, 1, 1] of weight "
                               "'l1.w' needs 32")
    assert e.value.hint == "the artifact was modified after compiling; recompile it"
