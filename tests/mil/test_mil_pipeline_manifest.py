"""The top manifest of a pipeline (docs/mil.md, "A func cut into a pipeline"): what a compile
writes into it, and every field check_manifest refuses, word for word.

One real pipeline (tests/mil/pipelines.py: two stages, one weight compiled as an input) is
compiled once; each case breaks one field of a copy of its manifest.
"""

from __future__ import annotations

import copy

import pytest

from anec.diagnostics import ArtifactError
from anec.mil.manifest_types import IOEntry, Source, StagePort
from anec.mil.multi_program import FORMAT, PipelineArtifact, check_manifest, parse_pipeline_manifest
from anec.multi_program_build import build_multi_program
from tests.mil.pipelines import TARGET, compile_pipeline

WHERE = "out/f/manifest.json"


@pytest.fixture(scope="module")
def compiled():
    return compile_pipeline()


@pytest.fixture(scope="module")
def manifest(compiled):
    return compiled[0].artifacts["f"].manifest.document


def test_the_parsed_pipeline_manifest_is_typed_and_is_the_artifacts(compiled, manifest):
    """parse_pipeline_manifest: the checked JSON as typed objects, read by attribute, equal to
    what the compile built; unknown keys are ignored."""
    m = parse_pipeline_manifest({**copy.deepcopy(manifest), "from_a_newer_anec": 1}, WHERE)
    assert m == compiled[0].artifacts["f"].manifest
    s0, s1 = m.stages
    assert (s0.dir, s0.first, s0.nodes, s1.same_as) == ("stages/s00", "c.ir:3:9", 9, None)
    assert s1.inputs == (StagePort("in0", "h2", Source(stage=0, output="out0")),)
    assert m.outputs_from == {"h3": Source(stage=1, output="out0")}
    assert m.inputs[0] == IOEntry("x", "fp16", (1, 8, 1, 16), 1, 256)
    assert (m.surface_bytes, m.programs) == (manifest["surface_bytes"], 2)


def test_stages_record_where_they_start_and_end_in_the_source_and_their_wiring(manifest):
    assert manifest["format"] == FORMAT == "anec-pipeline/1"
    s0, s1 = manifest["stages"]
    # stage 0 runs layers 0-2 (%c0 on line 3 to %h2 on line 10), stage 1 layer 3 (lines 12-13)
    assert (s0["dir"], s0["first"], s0["last"], s0["nodes"]) == ("stages/s00", "c.ir:3:9", "c.ir:10:9", 9)
    assert (s1["dir"], s1["first"], s1["last"], s1["nodes"]) == ("stages/s01", "c.ir:12:9", "c.ir:13:9", 2)
    assert [i["from"] for i in s0["inputs"]] == [{"input": "x"}, {"input": "w1"}]
    assert s1["inputs"] == [{"name": "in0", "value": "h2", "from": {"stage": 0, "output": "out0"}}]
    assert manifest["outputs_from"] == {"h3": {"stage": 1, "output": "out0"}}
    check_manifest(manifest, WHERE)  # what a compile writes passes its own check


def test_building_from_the_plan_writes_one_blobfile_per_weight_unless_packing_is_asked(compiled):
    res, store = compiled
    graph = res.module.funcs["f"]
    plain = build_multi_program(graph, graph.facts.partition, TARGET, store, res.rewrites)
    packed = build_multi_program(graph, graph.facts.partition, TARGET, store, res.rewrites, pack_weights=True)
    weights = [r for r in plain.files() if "/weights/" in r]
    assert weights == [r for r in res.artifacts["f"].files() if "/weights/" in r] == [
        "stages/s00/weights/w0.bin", "stages/s00/weights/w1.bin", "stages/s01/weights/w0.bin"]
    assert [r for r in packed.files() if "/weights/" in r] == [
        "stages/s00/weights/weight.bin", "stages/s01/weights/weight.bin"]


def _set(path, value):
    """An edit setting manifest[path...] (deleting it when value is DELETE)."""
    def edit(m):
        *head, last = path
        for p in head:
            m = m[p]
        if value is DELETE:
            del m[last]
        else:
            m[last] = value
    return edit


DELETE = object()
STAGE_OBJECT = "an object with 'dir' and 'mil_sha256'"
EARLIER = "a func input or an output of an earlier stage"

BROKEN = {
    "format of a one-program artifact": (_set(["format"], "anec-artifact/1"), "format", repr(FORMAT)),
    "no format": (_set(["format"], DELETE), "format", "'anec-pipeline/1'"),
    "func a number": (_set(["func"], 7), "func", "a string"),
    "inputs not a list": (_set(["inputs"], {"x": 1}), "inputs", "a list"),
    "outputs missing": (_set(["outputs"], DELETE), "outputs", "a list"),
    "stages a string": (_set(["stages"], "stages/s00"), "stages", "a list"),
    "logical_outputs null": (_set(["logical_outputs"], None), "logical_outputs", "a list"),
    "no stages": (_set(["stages"], []), "stages", "a non-empty list"),
    "surface_bytes zero": (_set(["surface_bytes"], 0), "surface_bytes", "a positive integer"),
    "surface_bytes negative": (_set(["surface_bytes"], -4096), "surface_bytes", "a positive integer"),
    "surface_bytes 2^40": (_set(["surface_bytes"], 1 << 40), "surface_bytes", "a positive integer"),
    "surface_bytes a string": (_set(["surface_bytes"], "4096"), "surface_bytes", "a positive integer"),
    "a stage that is a path": (_set(["stages", 1], "stages/s01"), "stages[1]", STAGE_OBJECT),
    "a stage without dir": (_set(["stages", 0, "dir"], DELETE), "stages[0]", STAGE_OBJECT),
    "a stage dir a number": (_set(["stages", 0, "dir"], 0), "stages[0]", STAGE_OBJECT),
    "a stage without mil_sha256": (_set(["stages", 1, "mil_sha256"], DELETE), "stages[1]", STAGE_OBJECT),
    "a stage input that is a name": (_set(["stages", 1, "inputs", 0], "h2"), "stages[1].inputs[0].from", EARLIER),
    "a stage input from itself": (_set(["stages", 1, "inputs", 0, "from"], {"stage": 1, "output": "out0"}),
                                  "stages[1].inputs[0].from", EARLIER),
    "a stage input from a later stage": (_set(["stages", 0, "inputs", 1, "from"], {"stage": 1, "output": "out0"}),
                                         "stages[0].inputs[1].from", EARLIER),
    "a stage input from stage -1": (_set(["stages", 1, "inputs", 0, "from"], {"stage": -1, "output": "out0"}),
                                    "stages[1].inputs[0].from", EARLIER),
    "a stage input naming no output": (_set(["stages", 1, "inputs", 0, "from"], {"stage": 0}),
                                       "stages[1].inputs[0].from", EARLIER),
    "a stage input from an unknown func input": (_set(["stages", 0, "inputs", 0, "from"], {"input": "y"}),
                                                 "stages[0].inputs[0].from", EARLIER),
    "no outputs_from": (_set(["outputs_from"], DELETE), "outputs_from", "an object"),
    "outputs_from a list": (_set(["outputs_from"], [{"stage": 1, "output": "out0"}]), "outputs_from", "an object"),
    "an output from past the last stage": (_set(["outputs_from", "h3"], {"stage": 2, "output": "out0"}),
                                           "outputs_from.h3", "a stage output"),
    "an output from stage -1": (_set(["outputs_from", "h3"], {"stage": -1, "output": "out0"}),
                                "outputs_from.h3", "a stage output"),
    "an output naming no stage output": (_set(["outputs_from", "h3"], {"stage": 1}), "outputs_from.h3",
                                         "a stage output"),
    "an output from a stage named by a string": (_set(["outputs_from", "h3"], {"stage": "1", "output": "out0"}),
                                                 "outputs_from.h3", "a stage output"),
    "an output that is a path": (_set(["outputs_from", "h3"], "stages/s01/out0"), "outputs_from.h3",
                                 "a stage output"),
    # what the typed objects are built from is checked too (anec.mil.manifest_types)
    "an input without a dtype": (_set(["inputs", 0, "dtype"], DELETE), "inputs[0].dtype",
                                 "a value (the field is missing)"),
    "an output shape of strings": (_set(["outputs", 0, "shape"], ["1"]), "outputs[0].shape[0]",
                                   "a dimension in [1, 2^31)"),
    "a logical output without pieces": (_set(["logical_outputs", 0, "pieces"], DELETE), "logical_outputs[0].pieces",
                                        "a value (the field is missing)"),
    "an sram peak that is a string": (_set(["sram"], {"peak_bytes": "1"}), "sram.peak_bytes",
                                      "an integer in [0, 2^62]"),
    "program_ir a list": (_set(["program_ir"], []), "program_ir", "an object with 'file' and 'sha256'"),
    "a stage's outputs an object": (_set(["stages", 0, "outputs"], {"name": "out0"}), "stages[0].outputs", "a list"),
    "a stage output without a name": (_set(["stages", 0, "outputs", 0, "name"], DELETE), "stages[0].outputs[0]",
                                      "an object with a 'name' (and a 'value') string"),
    "a stage input value a number": (_set(["stages", 1, "inputs", 0, "value"], 3), "stages[1].inputs[0]",
                                     "an object with a 'name' (and a 'value') string"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_broken_field_is_refused_by_name(manifest, case):
    edit, field, expected = BROKEN[case]
    m = copy.deepcopy(manifest)
    edit(m)
    with pytest.raises(ArtifactError) as e:
        check_manifest(m, WHERE)
    assert e.value.message == f"{WHERE}: field '{field}' must be {expected}"
    assert e.value.hint is None


@pytest.mark.parametrize("m", [None, [], "anec-pipeline/1", [("format", FORMAT)]])
def test_a_manifest_that_is_not_an_object_is_refused_by_its_format(m):
    with pytest.raises(ArtifactError) as e:
        check_manifest(m, WHERE)
    assert e.value.message == f"{WHERE}: field 'format' must be 'anec-pipeline/1'"


def test_a_stage_directory_must_stay_inside_the_artifact(manifest):
    m = copy.deepcopy(manifest)
    m["stages"][1]["dir"] = "stages/../../etc"
    with pytest.raises(ArtifactError) as e:
        check_manifest(m, WHERE)
    assert e.value.message == ("artifact path 'stages/../../etc' points outside the artifact directory "
                            "(every component must be a plain name)")


@pytest.mark.parametrize("surface", [1, 4096, (1 << 40) - 1])
def test_surface_bytes_from_one_to_just_under_two_to_the_forty_are_accepted(manifest, surface):
    m = copy.deepcopy(manifest)
    m["surface_bytes"] = surface
    check_manifest(m, WHERE)


def test_every_earlier_stage_and_every_func_input_may_feed_a_stage(manifest):
    m = copy.deepcopy(manifest)
    m["stages"].append(copy.deepcopy(m["stages"][1]))
    m["stages"][2]["inputs"] = [{"name": "in0", "value": "h2", "from": {"stage": 0, "output": "out0"}},
                                {"name": "in1", "value": "h3", "from": {"stage": 1, "output": "out0"}},
                                {"name": "in2", "value": "w1", "from": {"input": "w1"}}]
    m["outputs_from"] = {"h3": {"stage": 2, "output": "out0"}, "h2": {"stage": 0, "output": "out0"}}
    check_manifest(m, WHERE)


def test_host_casts_and_logical_inputs_are_the_funcs_as_in_one_program():
    from tests.mil.pipelines import compile_io

    piped = compile_io().artifacts["h"]
    whole = compile_io(TARGET.replace(fp32_io=False, max_blob_tensors=64)).artifacts["h"]
    assert isinstance(piped, PipelineArtifact) and len(piped.stages) == 2
    m, one = piped.manifest.document, whole.manifest.document
    assert m["host_casts"] == one["host_casts"] == [
        {"name": "x", "kind": "input", "host_dtype": "fp32", "program_dtype": "fp16"}]
    # the caller passes b as [8, 16]; the program reads it as [1, 8, 1, 16]
    assert {"name": "b", "dtype": "fp16", "shape": [8, 16]} in m["logical_inputs"]
    assert all(e in one["logical_inputs"] for e in m["logical_inputs"])


def test_stages_of_one_compiled_program_get_one_surface_size():
    # stages with the same MIL are one compile (a cache hit keeps the first one's limits), so
    # a size chosen per neighbourhood must not differ between them: the 1B-shaped decode
    # evaluated a shared stage on a surface below its program's minimum
    from types import SimpleNamespace as NS

    from anec.multi_program_build import stage_surfaces
    from anec.targets import get_target

    def stage(mil: str, need: int):
        io = [NS(bytes=need)]
        return NS(manifest=NS(inputs=io, outputs=io, mil=NS(sha256=mil)))

    stages = [stage("stem", 2048), stage("A", 1024), stage("B", 8192), stage("A", 1024)]
    entries = [{"inputs": []}] + [{"inputs": [{"from": {"stage": k}}]} for k in range(3)]
    t = get_target("m4").replace(min_surface_bytes=512)
    sizes = stage_surfaces(stages, entries, t)  # s1 joins the stem's size; s3 would stay alone
    assert sizes[1] == sizes[3] == 2048 and sizes[2] == 8192
