"""int8 activations end to end: compile_module(activations="int8", calibration=...).

The compiled program runs on the sim and its program.ir on the interpreter: bit for bit on a
conv chain whose arithmetic is exact in any summation order, through the project's
tolerance on a GPT-2 MLP with random weights (O(1) outputs), and across the programs of a
cut func. The emitted MIL type-checks under coremltools' op definitions (W8A8: int8
weights and int8 activations). The request's errors, and a compile without activations
writing the same bytes as before (the golden test pins those).
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.compress.activations import agreement, calibration_samples, parse_activations
from anec.diagnostics import AnecError
from anec.ir.interp import interpret
from anec.ir.parser import parse, parse_file
from anec.mil.artifact import artifact_weights
from anec.targets import get_target
from anec.weight_store import WeightStore
from tests.mil.milcheck import check_mil
from tolerances import assert_close

CHAIN = """\
func f(%x: fp16[1, 8, 1, 16]) {
  %w1 = const(weight="w1") : fp16[8, 8, 1, 1]
  %w2 = const(weight="w2") : fp16[8, 8, 1, 1]
  %w3 = const(weight="w3") : fp16[8, 8, 1, 1]
  %w4 = const(weight="w4") : fp16[8, 8, 1, 1]
  %h1 = conv1x1(%x, %w1) : fp16[1, 8, 1, 16]
  %a1 = relu(%h1) : fp16[1, 8, 1, 16]
  %h2 = conv1x1(%a1, %w2) : fp16[1, 8, 1, 16]
  %a2 = relu(%h2) : fp16[1, 8, 1, 16]
  %h3 = conv1x1(%a2, %w3) : fp16[1, 8, 1, 16]
  %a3 = relu(%h3) : fp16[1, 8, 1, 16]
  %y = conv1x1(%a3, %w4) : fp16[1, 8, 1, 16]
  return %y
}
"""
"""Four convs, three activations between them (%a1, %a2, %a3)."""


def _exact(rng, shape, step, top):
    """Multiples of ``step`` in [-top, top]: products and sums stay exact in fp32."""
    return (rng.integers(-int(top / step), int(top / step) + 1, size=shape) * step).astype(np.float16)


def _chain(seed=0):
    rng = np.random.default_rng(seed)
    weights = WeightStore({f"w{i}": _exact(rng, (8, 8, 1, 1), 1 / 8, 1.0) for i in range(1, 5)})
    calib = {"x": _exact(rng, (3, 1, 8, 1, 16), 1 / 16, 4.0)}
    x = _exact(rng, (1, 8, 1, 16), 1 / 16, 4.0)
    return parse(CHAIN, "chain.ir"), weights, calib, x


def _run_sim(rt, art, x):
    prog = rt.load(art)
    try:
        return prog(**x)
    finally:
        prog.close()


def _interp(art, x):
    program = art.program_module().funcs[art.manifest.func]
    weights = art.interp_weights() if hasattr(art, "interp_weights") else artifact_weights(art)
    return interpret(program, {v.name: x[v.name] for v in program.inputs}, weights, "fp16")


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_a_conv_chain_runs_bit_for_bit_as_the_interpreter(rt):
    """Weights in steps of 1/8 up to 1, 8 channels: every conv's sum is exact in fp32, so the
    sim and the interpreter round the same values and quantize them the same way."""
    m, weights, calib, x = _chain()
    art = compile_module(m, weights, activations="int8", calibration=calib, activations_min_cosine=-1.0
                         ).artifacts["f"]
    assert art.mil_text.count("= quantize(") == 3 and art.mil_text.count("= dequantize(") == 3
    assert art.manifest.activations.quantized == 3
    got = _run_sim(rt, art, {"x": x})["y"]
    ref = _interp(art, {"x": x})["y"]
    assert np.array_equal(got.astype(np.float16), np.asarray(ref, np.float16))
    plain = compile_module(m, weights).artifacts["f"]
    dense = _run_sim(rt, plain, {"x": x})["y"]
    assert not np.array_equal(got, dense)  # the int8 round trips change the result
    cos, _ = agreement(got, dense)
    assert cos > 0.99


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_a_cut_func_quantizes_inside_its_programs(rt):
    """Two BLOBFILEs per program: the func is cut into [conv1, conv2] and [conv3, conv4]; %a1
    and %a3 go through int8 inside their programs, %a2 crosses the cut and stays fp16."""
    m, weights, calib, x = _chain(1)
    tgt = get_target("m4").replace(max_blob_tensors=2)
    art = compile_module(m, weights, target=tgt, activations="int8", calibration=calib,
                         activations_min_cosine=-1.0).artifacts["f"]
    assert len(art.stages) == 2
    rows = {t.value: t for t in art.manifest.activations.tensors}
    assert (rows["a1"].dtype, rows["a2"].dtype, rows["a3"].dtype) == ("int8", "fp16", "int8")
    assert "crosses between the programs" in rows["a2"].reason
    assert [s.mil_text.count("= quantize(") for s in art.stages] == [1, 1]
    got = _run_sim(rt, art, {"x": x})["y"]
    assert np.array_equal(got.astype(np.float16), np.asarray(_interp(art, {"x": x})["y"], np.float16))


def _mlp_calibration(seed=0, samples=4):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((samples, 1, 768, 1, 64)).astype(np.float32)}


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_w8a8_gpt2_mlp_on_the_sim_matches_the_interpreter(rt):
    """int8 weights and int8 activations (the maderix W8A8 form): the residual output y is
    O(1); sim and interpreter differ only in summation order."""
    m = parse_file("examples/gpt2_mlp.ir")
    res = compile_module(m, random_seed=0, compress="int8", activations="int8", calibration=_mlp_calibration())
    art = res.artifacts["mlp"]
    acts = art.manifest.activations
    assert acts.quantized == 2 and [t.value for t in acts.tensors] == ["ln", "a"]
    assert "constexpr_affine_dequantize" in art.mil_text and art.mil_text.count("= quantize(") == 2
    x = {"x": np.random.default_rng(7).standard_normal((1, 768, 1, 64)).astype(np.float32)}
    got = _run_sim(rt, art, x)["y"]
    ref = _interp(art, x)["y"]
    rms = float(np.sqrt(np.mean(np.asarray(ref, np.float64) ** 2)))
    assert 0.3 < rms < 3.0
    assert_close(got, ref, "activations/w8a8-mlp-sim-vs-interp", ulps=2)
    check_mil(art.mil_text, art.blobs)


def test_the_emitted_ops_type_check_under_coremltools():
    m, weights, calib, _ = _chain()
    art = compile_module(m, weights, activations="int8", calibration=calib, activations_min_cosine=-1.0
                         ).artifacts["f"]
    prog = check_mil(art.mil_text, art.blobs)
    ops = [op.op_type for op in prog.functions["main"].operations]
    assert ops.count("quantize") == 3 and ops.count("dequantize") == 3


def test_a_tensor_read_by_two_convs_is_quantized_once():
    text = CHAIN.replace("%y = conv1x1(%a3, %w4)", "%y0 = conv1x1(%a3, %w4)").replace(
        "  return %y\n", "  %y1 = conv1x1(%a3, %w1) : fp16[1, 8, 1, 16]\n  %y = add(%y0, %y1) : fp16[1, 8, 1, 16]\n"
                         "  return %y\n")
    _, weights, calib, _ = _chain()
    art = compile_module(parse(text, "two.ir"), weights, activations="int8", calibration=calib,
                         activations_min_cosine=-1.0).artifacts["f"]
    rows = {t.value: t for t in art.manifest.activations.tensors}
    assert rows["a3"].consumers == ("y0", "y1")
    assert art.mil_text.count("= quantize(input = a3,") == 1
    assert art.mil_text.count("x = a3_dq)") == 2


def test_all_activations_kept_fp16_write_the_program_without_them():
    """A gate no int8 activation can pass: every one falls back, and the MIL is the MIL of a
    compile without --activations, byte for byte."""
    m, weights, calib, _ = _chain()
    art = compile_module(m, weights, activations="int8", calibration=calib, activations_min_cosine=1.0
                         ).artifacts["f"]
    assert art.manifest.activations.quantized == 0
    assert art.mil_text == compile_module(m, weights).artifacts["f"].mil_text


@pytest.mark.parametrize("kw,needle", [
    ({"activations": "int8"}, "needs calibration inputs"),
    ({"activations": "int4", "calibration": {}}, "unknown --activations 'int4'"),
    ({"activations": "int8", "calibration": {"x": np.zeros(1)}, "dialect": "ios16"},
     "the ios16 MIL dialect has no quantize/dequantize"),
    ({"calibration": {"x": np.zeros(1)}}, "calibration inputs were given without --activations"),
    ({"activations": "int8", "calibration": {"x": np.zeros(1)}, "with_weights": False}, "needs its weights"),
])
def test_a_request_that_cannot_run_is_a_clear_error(kw, needle):
    m, weights, _, _ = _chain()
    with pytest.raises(AnecError, match=needle) as e:
        compile_module(m, weights if kw.get("with_weights", True) else None, **kw)
    if "ios16" in needle:
        assert "--dialect ios18" in e.value.hint


def test_calibration_from_a_file(tmp_path):
    m, weights, calib, _ = _chain()
    np.savez(tmp_path / "calib.npz", **calib)
    a = compile_module(m, weights, activations="int8", calibration=tmp_path / "calib.npz",
                       activations_min_cosine=-1.0).artifacts["f"]
    b = compile_module(m, weights, activations="int8", calibration=calib, activations_min_cosine=-1.0).artifacts["f"]
    assert a.mil_text == b.mil_text and a.manifest.activations.samples == 3


def test_calibration_samples_split_a_leading_axis():
    one = np.arange(8.0).reshape(1, 8)
    assert len(calibration_samples({"x": one}, [("x", (1, 8))], "f")) == 1
    many = calibration_samples({"x": np.stack([one, 2 * one])}, [("x", (1, 8))], "f")
    assert [s["x"][0, 1] for s in many] == [1.0, 2.0]
    assert parse_activations(None, None, "ios16") is None


def test_the_manifest_report_is_written_and_read_back(tmp_path):
    from anec.mil.multi_program import load_any

    m, weights, calib, _ = _chain()
    compile_module(m, weights, activations="int8", calibration=calib, activations_min_cosine=-1.0,
                   out_dir=tmp_path / "out")
    art = load_any(tmp_path / "out", "f")
    acts = art.manifest.activations
    assert acts.dtype == "int8" and acts.quantized == 3 and acts.samples == 3
    assert all(t.scale > 0 and t.max_abs > 0 for t in acts.tensors if t.dtype == "int8")
    assert [t.value for t in acts.tensors if t.dtype == "fp16"] == ["x"]  # the program input
    assert "int8_x=" in art.program_ir


@pytest.mark.parametrize("path,value,expected", [
    (("tensors", 1, "dtype"), "int4", "one of \"int8\", \"fp16\""),
    (("tensors", 1, "scale"), "0.01", "a number"),
    (("dtype",), "int16", "one of \"int8\""),
    (("outputs",), {"y": 1.0}, "an array"),
])
def test_a_hostile_activation_report_is_refused(path, value, expected):
    import copy

    from anec.diagnostics import ArtifactError
    from anec.mil.manifest import validate_manifest

    m, weights, calib, _ = _chain()
    doc = copy.deepcopy(dict(compile_module(m, weights, activations="int8", calibration=calib,
                                            activations_min_cosine=-1.0).artifacts["f"].manifest.document))
    validate_manifest(copy.deepcopy(doc))
    at = doc["activations"]
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    field = "activations" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)
    with pytest.raises(ArtifactError) as e:
        validate_manifest(doc)
    assert f"field '{field}': expected {expected}" in str(e.value)


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_the_emitter_refuses_int8_in_the_ios16_dialect():
    """An int8 annotation written by hand (or a program.ir) compiled to ios16: no quantize there."""
    from anec.diagnostics import ConstraintError

    _, weights, _, _ = _chain()
    text = CHAIN.replace("%h2 = conv1x1(%a1, %w2) : fp16[1, 8, 1, 16]",
                         "%h2 = conv1x1(%a1, %w2) : fp16[1, 8, 1, 16] @{int8_x=0.125}")
    art = compile_module(parse(text, "hand.ir"), weights).artifacts["f"]
    assert art.mil_text.count("= quantize(input = a1,") == 1
    with pytest.raises(ConstraintError, match="the ios16 dialect has no quantize/dequantize") as e:
        compile_module(parse(text, "hand.ir"), weights, dialect="ios16")
    assert e.value.constraint == "ANE-INT8-ACTIVATIONS" and e.value.span.line == 8
