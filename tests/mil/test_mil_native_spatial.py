"""The native spatial ops end to end: compile -> MIL -> coremltools type-check -> sim.

For each canonical form of tests/passes/spatial_forms.py: the compiled MIL holds exactly
one native statement for the layer (conv, conv_transpose, max_pool, avg_pool,
upsample_nearest_neighbor, upsample_bilinear), coremltools' own op definitions accept
the MIL and infer the declared types, and the sim's result agrees with the reference
interpreter on the core-op form (and on the selected program read back from the artifact).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.mil.artifact import Artifact, artifact_weights
from anec.runtime import Runtime, backend_available
from anec.weight_store import WeightStore
from tests.passes import spatial_forms as sf
from tests.passes.test_select_native import CASES

from .milcheck import check_mil

MIL_OP = {"conv": "conv", "conv_transpose": "conv_transpose", "max_pool": "max_pool", "avg_pool": "avg_pool",
          "upsample_nearest": "upsample_nearest_neighbor", "upsample_bilinear": "upsample_bilinear"}
NATIVE_MIL = set(MIL_OP.values())


@pytest.fixture(scope="module")
def rt():
    ok, why = backend_available("sim")
    if not ok:
        pytest.skip(why)
    with Runtime("sim") as r:
        yield r


def _compile(form: sf.Form, tmp_path):
    module = parse(form.text, "form.ir")
    compile_module(module, WeightStore(dict(form.weights)), target="m4", out_dir=tmp_path)
    return module, Artifact.load(tmp_path / "f")


def _mil_ops(text: str) -> list[str]:
    return re.findall(r"^\s*tensor<[^>]*> \w+ = (\w+)\(", text, re.M)


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_op_in_mil_typechecks_and_runs_on_the_sim(name, tmp_path, rt):
    from tolerances import assert_close

    form = CASES[name]
    module, art = _compile(form, tmp_path)
    ops = _mil_ops(art.mil_text)
    native = [op for op in ops if op in NATIVE_MIL]
    assert native == [MIL_OP[form.native]], ops
    if form.native in ("conv", "conv_transpose"):
        assert ops.count("conv") + ops.count("conv_transpose") == 1  # no leftover conv1x1 per position
    check_mil(art.mil_text, art.blobs)
    x = np.random.default_rng(7).standard_normal(form.x_shape).astype(np.float32)
    want = interpret(module.funcs["f"], {"x": x}, form.weights, mode="fp16")["y"]
    got = rt.load(tmp_path / "f")(x=x)["y"]
    assert got.shape == want.shape
    assert_close(got, want, "native-spatial/sim-vs-interp", ulps=4)
    # the selected program the artifact records interprets to the same values
    selected = art.program_module().funcs["f"]
    assert {n.op for n in selected.nodes} & {form.native}
    again = interpret(selected, {"x": x}, artifact_weights(art), mode="fp16")["y"].reshape(want.shape)
    assert_close(again, want, "native-spatial/selected-vs-form", ulps=4)


def _sim_error(rt, tmp_path, form: sf.Form, mil_edit) -> str:
    _, art = _compile(form, tmp_path)
    mil = mil_edit(art.mil_text)
    (tmp_path / "f" / "model.mil").write_text(mil)
    from anec.hashing import sha256  # the manifest pins the MIL's hash: refresh it

    import json

    mpath = tmp_path / "f" / "manifest.json"
    m = json.loads(mpath.read_text())
    m["mil"]["sha256"] = sha256(mil.encode())
    mpath.write_text(json.dumps(m))
    with pytest.raises(Exception) as e:
        rt.load(tmp_path / "f")
    return str(e.value)


@pytest.mark.parametrize("form,edit,constraint", [
    (CASES["maxpool3s2p1"], lambda t: re.sub(r"(tensor<int32, \[2\]> y_kernel_sizes = const\(\)\[name = "
                                             r"string\(\"y_kernel_sizes\"\), val = tensor<int32, \[2\]>\()\[3, 3\]",
                                             r"\1[17, 3]", t), "ANE-SPATIAL-LIMITS"),
    (CASES["conv3x3-pad1"], lambda t: t.replace("[1, 1, 1, 1])", "[3, 1, 1, 1])", 1), "ANE-SPATIAL-LIMITS"),
    (CASES["conv3x3-pad1"], lambda t: t.replace("[1, 1, 1, 1])", "[1, 3, 1, 1])", 1), "ANE-SPATIAL-LIMITS"),
    (CASES["maxpool3s2p1"], lambda t: t.replace('val = bool(false)', 'val = bool(true)', 1),
     "the sim runs ceil_mode = false only"),
])
@pytest.mark.constraint("ANE-SPATIAL-LIMITS")
def test_sim_refuses_native_ops_beyond_the_limits(form, edit, constraint, tmp_path, rt):
    msg = _sim_error(rt, tmp_path, form, edit)
    assert constraint in msg, msg


def test_sim_refuses_a_conv_transpose_weight_of_other_input_channels(rt):
    """The weight of conv_transpose is [Cin, Cout/groups, KH, KW]: Cin must be x's channels."""
    from anec.runtime import RuntimeFailure
    from anec.targets import get_target

    text = CHAIN.read_text()
    old = "tensor<fp16, [2, 2, 3, 3]> wt = const()[name = string(\"wt\"), val = tensor<fp16, [2, 2, 3, 3]>("
    assert old in text
    start = text.index(old)
    end = text.index(")];", start)
    text = text[:start] + old.replace("[2, 2, 3, 3]", "[1, 2, 3, 3]") + "[" + ", ".join(["0.125"] * 18) + "]" \
        + text[end:]
    with pytest.raises(RuntimeFailure) as e:
        rt.compile(text, limits=get_target("m4").runtime_limits())
    assert "conv_transpose: x has 2 input channels" in str(e.value.message)


CHAIN = (__import__("pathlib").Path(__file__).resolve().parents[1] / "c" / "corpus" / "mil" / "spatial.mil")
CHAIN_IR = """func main(%x: fp16[1, 2, 4, 4]) {
  %w = const(value=0.25) : fp16[2, 2, 3, 3]
  %c = conv(%x, %w, strides=[1, 1], pad=[1, 1, 1, 1], dilations=[1, 1], groups=1)
  %wd = const(value=0.5) : fp16[2, 1, 2, 2]
  %d = conv(%c, %wd, strides=[2, 2], pad=[0, 1, 0, 1], dilations=[1, 1], groups=2)
  %wt = const(value=0.125) : fp16[2, 2, 3, 3]
  %t = conv_transpose(%d, %wt, strides=[2, 2], pad=[1, 0, 1, 0], dilations=[1, 1], groups=1)
  %m = max_pool(%t, kernel_sizes=[3, 3], strides=[2, 2], pad=[1, 1, 1, 1])
  %a = avg_pool(%m, kernel_sizes=[2, 2], strides=[1, 1], pad=[0, 1, 0, 1], exclude_padding_from_average=true)
  %u = upsample_nearest(%a, scales=[2, 1])
  %y = upsample_bilinear(%u, size=[6, 5], align_corners=false)
  return %y
}
"""


def test_a_program_of_target_forms_compiles_to_the_fuzz_seed_and_runs(tmp_path, rt):
    """Target forms read back from IR (target_forms=True) compile as they are: the MIL is the
    C fuzzer's seed for the native ops (tests/c/corpus/mil/spatial.mil), and the sim agrees
    with the interpreter running the target forms' references."""
    from tolerances import assert_close

    module = parse(CHAIN_IR, "chain.ir", target_forms=True)
    compile_module(module, {}, target="m4", out_dir=tmp_path)
    art = Artifact.load(tmp_path / "main")
    assert art.mil_text == CHAIN.read_text()
    check_mil(art.mil_text, art.blobs)
    x = np.random.default_rng(5).standard_normal((1, 2, 4, 4)).astype(np.float32)
    want = interpret(module.funcs["main"], {"x": x}, {}, mode="fp16")["y"]
    got = rt.load(tmp_path / "main")(x=x)["y"]
    assert_close(got, want, "native-spatial/chain", ulps=4)


def test_a_weight_compiled_as_an_input_keeps_the_core_op_form(tmp_path, rt):
    """A native conv reads a constant weight: with the weight as a program input the layer
    stays in its core-op form (legalize turns its conv1x1s into matmuls), and still runs right."""
    from tolerances import assert_close

    form = CASES["conv3x3-stride2"]
    module = parse(form.text, "form.ir")
    compile_module(module, WeightStore(dict(form.weights)), target="m4", out_dir=tmp_path,
                   weights_as_inputs=["*"])
    art = Artifact.load(tmp_path / "f")
    ops = _mil_ops(art.mil_text)
    assert not NATIVE_MIL & set(ops) and "matmul" in ops
    x = np.random.default_rng(7).standard_normal(form.x_shape).astype(np.float32)
    want = interpret(module.funcs["f"], {"x": x}, form.weights, mode="fp16")["y"]
    got = rt.load(tmp_path / "f")(x=x)["y"]
    assert_close(got, want, "native-spatial/weight-input", ulps=4)
