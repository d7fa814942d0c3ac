"""A program's manifest (anec-artifact/1): its fields and the references between them, word for word.

One real program is compiled once (two inputs, one of them a weight compiled as an input; one
weight; one output); each case edits a copy of its manifest and names the exact message
validate_manifest gives, or shows the edited manifest is still accepted.
"""

from __future__ import annotations

import copy

import pytest

from anec.compiler import compile_module
from anec.diagnostics import ArtifactError
from anec.ir.parser import parse
from anec.mil.manifest import MAX_BYTES, validate_manifest
from tests.runtime.hostile import FFN

WHERE = "out/ffn/manifest.json"
HINT = "the artifact is damaged or was not written by anec; recompile it"


@pytest.fixture(scope="module")
def compiled():
    res = compile_module(parse(FFN, "ffn.ir"), random_seed=0, weights_as_inputs=["l.proj.weight"])
    return res.artifacts["ffn"].manifest.document


@pytest.fixture
def man(compiled):
    return copy.deepcopy(compiled)


def refused(m) -> str:
    with pytest.raises(ArtifactError) as e:
        validate_manifest(m, WHERE)
    assert e.value.hint == HINT
    prefix = f"{WHERE}: "
    assert e.value.message.startswith(prefix)
    return e.value.message[len(prefix):]


def two_piece_output(m, shape2=(1, 8, 1, 2), dtype2="fp32", axis=3):
    """Output y is joined with a second output y2 along ``axis`` into the logical output y."""
    size = {"fp32": 4, "fp16": 2}[dtype2]
    n = 1
    for d in shape2:
        n *= d
    m["outputs"].append({"name": "y2", "dtype": dtype2, "shape": list(shape2), "binding": 1, "bytes": n * size,
                         "logical": "y"})
    lo = m["logical_outputs"][0]
    lo["pieces"], lo["axis"], lo["shape"] = ["y", "y2"], axis, None
    return lo


def test_the_compiled_manifest_is_accepted_as_it_is(man):
    """What the compiler writes passes, and validate_manifest gives the manifest itself back."""
    assert [(i["name"], i["binding"]) for i in man["inputs"]] == [("x", 1), ("w2", 0)]
    assert validate_manifest(man, WHERE) is man


def test_a_value_that_is_not_an_object_is_refused_as_the_manifest():
    """A JSON value that is no object is refused as a whole, against the default file name."""
    with pytest.raises(ArtifactError) as e:
        validate_manifest([1])
    assert e.value.message == "manifest.json: the manifest: expected a JSON object, got [1]"
    assert e.value.hint == HINT


def test_the_format_is_checked_first_and_named(man):
    """A missing or other format is reported before any other field is looked at."""
    del man["format"]
    man["func"] = 7
    assert refused(man) == "field 'format': expected \"anec-artifact/1\" (the field is missing)"
    man["format"] = "anec-artifact/2"
    assert refused(man) == "field 'format': expected \"anec-artifact/1\", got \"anec-artifact/2\""
    man["format"] = 1
    assert refused(man) == "field 'format': expected \"anec-artifact/1\", got 1"


def test_an_array_of_the_wrong_length_says_how_long_it_is(man):
    """A length error gives the count it found in parentheses, not the array itself."""
    man["inputs"][0]["shape"] = [1] * 9
    assert refused(man) == "field 'inputs[0].shape': expected an array of 0 to 8 items (9 items)"


# ---- fields: each edit breaks one field, named with what it expects ------------------------

FIELDS = {
    "mil.file": (["mil", "file"], "../model.mil",
                 "field 'mil.file': expected a relative path inside the artifact (plain names, no '..'), "
                 "got \"../model.mil\""),
    "mil.sha256": (["mil", "sha256"], "ab", "field 'mil.sha256': expected a sha256 (64 lowercase hex digits), "
                                           "got \"ab\""),
    "mil.dialect": (["mil", "dialect"], "ios99", "field 'mil.dialect': expected one of \"ios18\", \"ios16\", "
                                                 "got \"ios99\""),
    "program_ir.file": (["program_ir", "file"], "/p.ir", "field 'program_ir.file': expected a relative path inside "
                                                         "the artifact, got \"/p.ir\""),
    "program_ir.sha256": (["program_ir", "sha256"], 0, "field 'program_ir.sha256': expected a sha256 (64 lowercase "
                                                       "hex digits), got 0"),
    "anec_version": (["anec_version"], "v" * 65, "field 'anec_version': expected a non-empty string of at most 64 "
                                                 "characters, got \"" + "v" * 56 + "..."),
    "target": (["target"], "m" * 65, "field 'target': expected a non-empty string of at most 64 characters, "
                                     "got \"" + "m" * 56 + "..."),
    "limits": (["limits", "max_blob_tensors"], -1, "field 'limits.max_blob_tensors': expected an integer in "
                                                   "[0, 2147483647], got -1"),
    "input_alloc_bytes": (["input_alloc_bytes"], 0, "field 'input_alloc_bytes': expected an integer in [1, 2^40], "
                                                    "got 0"),
    "output_alloc_bytes": (["output_alloc_bytes"], MAX_BYTES + 1, "field 'output_alloc_bytes': expected an integer "
                                                                  "in [1, 2^40], got 1099511627777"),
    "logical_inputs": (["logical_inputs", 0, "dtype"], "fp64", "field 'logical_inputs[0].dtype': expected one of "
                       "\"fp16\", \"fp32\", \"int32\", \"bool\", \"int8\", \"uint8\", got \"fp64\""),
    "logical_outputs": (["logical_outputs", 0, "dtype"], "f16", "field 'logical_outputs[0].dtype': expected one of "
                        "\"fp16\", \"fp32\", \"int32\", \"bool\", \"int8\", \"uint8\", got \"f16\""),
    "weight_inputs": (["weight_inputs", 0, "sha256"], "A" * 64, "field 'weight_inputs[0].sha256': expected a sha256 "
                      "(64 lowercase hex digits), got \"" + "A" * 56 + "..."),
    "rewrites": (["rewrites"], {}, "field 'rewrites': expected an array, got {}"),
    "host_casts": (["host_casts"], [{"name": "x", "kind": "in", "host_dtype": "fp16"}],
                   "field 'host_casts[0].kind': expected one of \"input\", \"output\", got \"in\""),
}


@pytest.mark.parametrize("case", list(FIELDS))
def test_each_malformed_field_is_refused_by_name(man, case):
    """Every field of the schema, required or optional, is checked and named in full."""
    keys, value, message = FIELDS[case]
    obj = man
    for k in keys[:-1]:
        obj = obj[k]
    obj[keys[-1]] = value
    assert refused(man) == message


def test_string_fields_and_byte_counts_take_their_largest_values(man):
    """The bounds are inclusive, and sram is not checked beyond being JSON."""
    man["anec_version"], man["target"] = "v" * 64, "m" * 64
    man["input_alloc_bytes"] = man["output_alloc_bytes"] = MAX_BYTES
    man["sram"] = {"anything": [1, "two", None]}  # bounded only by the JSON reader
    validate_manifest(man, WHERE)


def test_a_program_without_inputs_needs_an_input_allocation_of_one_byte(man):
    """No inputs: nothing to hold, yet the allocation is still at least one byte."""
    man["inputs"], man["logical_inputs"], man["weight_inputs"] = [], [], []
    man["input_alloc_bytes"] = 1
    validate_manifest(man, WHERE)
    man["input_alloc_bytes"] = 0
    assert refused(man) == "field 'input_alloc_bytes': expected an integer in [1, 2^40], got 0"


def test_a_program_without_outputs_is_accepted(man):
    """No outputs: the largest output is taken as 0 bytes."""
    man["outputs"], man["logical_outputs"] = [], []
    man["output_alloc_bytes"] = 1
    validate_manifest(man, WHERE)


def test_optional_fields_older_artifacts_lack_may_be_absent(man):
    """Manifests written before the optional fields existed stay readable."""
    for key in ("logical_inputs", "logical_outputs", "weight_inputs", "host_casts", "limits", "target"):
        del man[key]
    del man["mil"]["dialect"]
    del man["outputs"][0]["logical"]
    for key in ("path", "perm", "slice"):
        del man["weights"][0][key]
    validate_manifest(man, WHERE)


# ---- inputs and outputs: names, bindings, bytes, allocations --------------------------------

def test_a_name_used_twice_in_inputs_is_refused(man):
    """Names bind buffers: two inputs with one name are refused at the first of them."""
    man["inputs"][1]["name"] = "x"
    assert refused(man) == "field 'inputs[0].name': expected a name used once in inputs, got \"x\""


def test_bindings_follow_the_alphabetical_order_of_the_names(man):
    """Binding i is the i-th name in sorted order (w2 before x)."""
    man["inputs"][0]["binding"] = 0
    assert refused(man) == "field 'inputs[0].binding': expected 1 (the index of \"x\" in alphabetical order), got 0"


def test_the_bytes_of_an_input_are_its_elements_times_its_dtype_size(man):
    """The byte count is held to shape x item size (32 fp32 elements: 128)."""
    man["inputs"][0]["bytes"] = 32
    assert refused(man) == "field 'inputs[0].bytes': expected 128 (elements x fp32 size), got 32"


def test_an_allocation_holds_the_largest_input_or_output_exactly(man):
    """An allocation the size of the largest buffer is enough; one byte less is not."""
    man["input_alloc_bytes"], man["output_alloc_bytes"] = 256, 128  # w2 is 256 bytes, y 128
    validate_manifest(man, WHERE)
    man["input_alloc_bytes"] = 255
    assert refused(man) == "field 'input_alloc_bytes': expected at least 256 (the largest input), got 255"
    man["input_alloc_bytes"], man["output_alloc_bytes"] = 256, 127
    assert refused(man) == "field 'output_alloc_bytes': expected at least 128 (the largest output), got 127"


# ---- logical inputs and outputs --------------------------------------------------------------

def test_a_logical_input_names_an_input_with_as_many_elements(man):
    """A logical input may reshape its input but not change its element count."""
    man["logical_inputs"][0]["shape"] = [32]  # the same 32 elements, reshaped
    validate_manifest(man, WHERE)
    man["logical_inputs"][0]["shape"] = [33]
    assert refused(man) == "field 'logical_inputs[0].shape': expected a shape of 32 elements (the input's), got [33]"
    man["logical_inputs"][0]["name"] = "q"
    assert refused(man) == "field 'logical_inputs[0].name': expected the name of an input, got \"q\""


def test_a_logical_output_name_is_used_once(man):
    """Two logical outputs with one name are refused at the second."""
    man["logical_outputs"].append(dict(man["logical_outputs"][0]))
    assert refused(man) == "field 'logical_outputs[1].name': expected a name used once in logical_outputs, got \"y\""


def test_an_output_belongs_to_one_logical_output(man):
    """A piece is an existing output, used by one logical output only."""
    man["logical_outputs"].append({"name": "z", "pieces": ["y"]})
    assert refused(man) == ("field 'logical_outputs[1].pieces[0]': expected an output that belongs to one logical "
                            "output, got \"y\"")
    man["logical_outputs"][1]["pieces"] = ["q"]
    assert refused(man) == "field 'logical_outputs[1].pieces[0]': expected the name of an output, got \"q\""


def test_pieces_joined_along_an_axis_may_differ_on_that_axis_only(man):
    """Concatenated pieces match except on the axis; the declared shape has their total size."""
    lo = two_piece_output(man)
    validate_manifest(man, WHERE)
    lo["shape"] = [1, 8, 1, 6]
    validate_manifest(man, WHERE)
    lo["shape"] = [1, 8, 1, 4]
    assert refused(man) == ("field 'logical_outputs[0].shape': expected a shape of 48 elements (its pieces), "
                            "got [1, 8, 1, 4]")
    lo["shape"] = None
    man["outputs"][1]["shape"], man["outputs"][1]["bytes"] = [1, 4, 1, 4], 64
    assert refused(man) == ("field 'logical_outputs[0].pieces[1]': expected an output whose shape matches "
                            "[1, 8, 1, 4] except on axis 3, got [1, 4, 1, 4]")


def test_pieces_of_another_rank_are_refused(man):
    """A piece of lower rank is refused even where its dims agree with the first."""
    two_piece_output(man, shape2=(1, 8, 1))
    assert refused(man) == ("field 'logical_outputs[0].pieces[1]': expected an output whose shape matches "
                            "[1, 8, 1, 4] except on axis 3, got [1, 8, 1]")


def test_every_piece_after_the_first_is_compared_with_it(man):
    """The third piece is checked too, and named by its own index."""
    lo = two_piece_output(man, shape2=(1, 8, 1, 4))
    man["outputs"].append({"name": "y3", "dtype": "fp32", "shape": [2, 8, 1, 4], "binding": 2, "bytes": 256})
    lo["pieces"].append("y3")
    man["output_alloc_bytes"] = 256
    assert refused(man) == ("field 'logical_outputs[0].pieces[2]': expected an output whose shape matches "
                            "[1, 8, 1, 4] except on axis 3, got [2, 8, 1, 4]")


@pytest.mark.parametrize("axis", [-4, -1, 0, 3])
def test_a_negative_axis_counts_from_the_last(man, axis):
    """Pieces differing on dim 0 join along axis 0 (-4), not along the others."""
    two_piece_output(man, shape2=(2, 8, 1, 4), axis=axis)
    man["output_alloc_bytes"] = 256
    if axis in (-4, 0):
        validate_manifest(man, WHERE)
    else:
        assert refused(man) == ("field 'logical_outputs[0].pieces[1]': expected an output whose shape matches "
                                f"[1, 8, 1, 4] except on axis {axis}, got [2, 8, 1, 4]")


@pytest.mark.parametrize("axis", [-5, 4])
def test_the_axis_is_within_the_rank_of_the_pieces(man, axis):
    """The axis is in [-rank, rank - 1]; one past either end is refused."""
    two_piece_output(man, axis=axis)
    assert refused(man) == ("field 'logical_outputs[0].axis': expected an axis in [-4, 3] (the pieces have rank 4), "
                            f"got {axis}")


def test_several_pieces_need_an_axis_one_does_not(man):
    """One piece may carry an axis or none; two pieces without one are refused."""
    man["logical_outputs"][0]["axis"] = 0  # one piece along an axis: the output as it is
    validate_manifest(man, WHERE)
    two_piece_output(man, axis=None)
    assert refused(man) == "field 'logical_outputs[0].axis': expected an axis (the output has several pieces), got None"


def test_the_pieces_of_a_logical_output_share_one_dtype(man):
    """Pieces of different dtypes are refused, naming the dtypes found."""
    two_piece_output(man, dtype2="fp16")
    assert refused(man) == "field 'logical_outputs[0].pieces': expected outputs of one dtype, got [\"fp16\", \"fp32\"]"


def test_an_output_names_a_logical_output_when_there_are_some(man):
    """outputs[].logical names a logical output when the manifest lists any, and is a string."""
    man["outputs"][0]["logical"] = "q"
    assert refused(man) == "field 'outputs[0].logical': expected the name of a logical output, got \"q\""
    del man["logical_outputs"]
    validate_manifest(man, WHERE)  # no logical outputs to name: any string
    man["outputs"][0]["logical"] = 5
    assert refused(man) == "field 'outputs[0].logical': expected the name of a logical output, got 5"


# ---- weights and weight inputs -------------------------------------------------------------

def test_a_weight_path_is_model_path_and_its_file(man):
    """A weight's MIL path is @model_path/ + its file, or null."""
    man["weights"][0]["path"] = "@model_path/weights/w2.bin"
    assert refused(man) == ("field 'weights[0].path': expected \"@model_path/weights/w1.bin\" (@model_path/ + file), "
                            "got \"@model_path/weights/w2.bin\"")
    man["weights"][0]["path"] = None
    validate_manifest(man, WHERE)


def test_a_weight_view_is_a_permutation_and_a_non_empty_slice(man):
    """perm is a permutation (empty: none); slice starts at 0 or later and before its stop."""
    w = man["weights"][0]
    w["perm"], w["slice"] = [1, 0, 2, 3], [0, 0, 8]
    validate_manifest(man, WHERE)
    w["perm"] = []
    validate_manifest(man, WHERE)
    w["perm"] = [0, 0, 1, 1]
    assert refused(man) == "field 'weights[0].perm': expected a permutation of 0..3, got [0, 0, 1, 1]"
    w["perm"] = None
    for sl in ([0, 2, 2], [1, -1, 4]):
        w["slice"] = sl
        assert refused(man) == ("field 'weights[0].slice': expected [axis, start, stop] with 0 <= start < stop, "
                                f"got {sl}")


def test_a_weight_input_view_is_checked_by_its_own_name(man):
    """The view of a weight input is checked as a weight's is, under weight_inputs[i]."""
    man["weight_inputs"][0]["perm"] = [2, 1, 1, 0]
    assert refused(man) == "field 'weight_inputs[0].perm': expected a permutation of 0..3, got [2, 1, 1, 0]"
    man["weight_inputs"][0]["perm"], man["weight_inputs"][0]["slice"] = [1, 0, 2, 3], [1, 3, 1]
    assert refused(man) == ("field 'weight_inputs[0].slice': expected [axis, start, stop] with 0 <= start < stop, "
                            "got [1, 3, 1]")


def test_a_weight_input_gives_one_input_its_value_in_as_many_elements(man):
    """A weight input names a real input, once, with as many elements as it has."""
    wi = man["weight_inputs"][0]
    wi["shape"] = [128]
    validate_manifest(man, WHERE)
    wi["shape"] = [8, 8, 1, 1]
    assert refused(man) == ("field 'weight_inputs[0].shape': expected a shape of 128 elements (input \"w2\"), "
                            "got [8, 8, 1, 1]")
    wi["shape"] = [128]
    man["weight_inputs"].append(dict(wi))
    assert refused(man) == "field 'weight_inputs[1].input': expected an input given one initial value, got \"w2\""
    wi["input"] = "q"
    assert refused(man) == "field 'weight_inputs[0].input': expected the name of an input, got \"q\""


# ---- host casts ------------------------------------------------------------------------------

def test_a_host_cast_names_an_input_or_an_output_of_its_kind(man):
    """An input cast names an input; an output cast an output or a logical output."""
    man["logical_outputs"][0]["name"] = man["outputs"][0]["logical"] = "z"
    man["host_casts"] = [{"name": "x", "kind": "input", "host_dtype": "fp16"},
                         {"name": "y", "kind": "output", "host_dtype": "fp16"},
                         {"name": "z", "kind": "output", "host_dtype": "fp16"}]
    validate_manifest(man, WHERE)
    man["host_casts"][1]["name"] = "x"
    assert refused(man) == "field 'host_casts[1].name': expected the name of an output, got \"x\""
    man["host_casts"][1]["name"] = "y"
    man["host_casts"][0]["name"] = "y"
    assert refused(man) == "field 'host_casts[0].name': expected the name of an input, got \"y\""
