"""weights-as-inputs: chosen weight consts become func inputs; conv weights then go through matmul."""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module, with_weights_as_inputs
from anec.diagnostics import AnecError
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.passes import PassContext, WeightsAsInputs
from anec.passes.pipelines import DEFAULT
from anec.ir.weight_binding import random_weights

MLP = """\
func mlp(%x: fp16[1, 64, 1, 8]) {
  %w1 = const(weight="h.0.fc.weight") : fp16[128, 64, 1, 1]
  %b1 = const(weight="h.0.fc.bias") : fp16[1, 128, 1, 1]
  %h = conv1x1(%x, %w1, bias=%b1)
  %w2 = const(weight="h.0.proj.weight", perm=[1, 0, 2, 3]) : fp16[64, 128, 1, 1]
  %y = conv1x1(%h, %w2)
  return %y
}
"""


def test_the_docstring_example_records_the_view():
    """The docstring's Before/After runs in test_pass_docstrings; here: what it records."""
    m = parse(MLP_DOC, "before.ir")
    WeightsAsInputs(keys=("*.c_fc.weight",)).run(m.funcs["mlp"], PassContext.default())
    assert m.funcs["mlp"].facts.weight_inputs == [
        {"key": "h.0.mlp.c_fc.weight", "input": "w1", "dtype": "fp16", "shape": [3072, 768, 1, 1],
         "perm": None, "slice": None}]


MLP_DOC = """
func mlp(%x: fp16[1, 768, 1, 64]) {
  %w1 = const(weight="h.0.mlp.c_fc.weight") : fp16[3072, 768, 1, 1]
  %b1 = const(weight="h.0.mlp.c_fc.bias") : fp16[1, 3072, 1, 1]
  %h = conv1x1(%x, %w1) : fp16[1, 3072, 1, 64]
  %y = add(%h, %b1) : fp16[1, 3072, 1, 64]
  return %y
}
"""


def test_patterns_select_keys_and_keep_the_view():
    m = parse(MLP, "mlp.ir")
    g = m.funcs["mlp"]
    WeightsAsInputs(keys=("*.weight",)).run(g, PassContext.default())
    assert [v.name for v in g.inputs] == ["x", "w1", "w2"]
    assert [n.attrs.get("weight") for n in g.nodes if n.op == "const"] == ["h.0.fc.bias"]
    assert g.facts.weight_inputs[1]["perm"] == [1, 0, 2, 3]


def test_the_pass_sits_after_cleanup_and_before_legalize():
    names = [p.name for p in with_weights_as_inputs(DEFAULT, ["*"])]
    assert names == ["dce", "fuse-casts", "dce", "weights-as-inputs", "select-native", "range-safe",
                     "annotate-sram", "legalize", "partition", "emit-mil"]


@pytest.mark.constraint("ANE-CONV-CONST-WEIGHT")
def test_conv_with_an_input_weight_becomes_matmul():
    m = parse(MLP, "mlp.ir")
    store = random_weights(m, 3)
    res = compile_module(m, weights=store, weights_as_inputs=["h.0.fc.weight"])
    art = res.artifacts["mlp"]
    rules = [r["rule"] for r in art.manifest.document["rewrites"]]
    assert "conv_dynamic_weight_to_matmul" in rules
    assert "ANE-CONV-CONST-WEIGHT" in {r["constraint"] for r in art.manifest.document["rewrites"]}
    g = res.module.funcs["mlp"]
    convs = [n for n in g.nodes if n.op == "conv1x1"]
    assert all(n.operands[1].producer is not None and n.operands[1].producer.op == "const" for n in convs)
    # the compiled program computes the same function (interpreter, weights fed as inputs)
    x = np.random.default_rng(0).standard_normal((1, 64, 1, 8)).astype(np.float16)
    from anec.mil.artifact import artifact_weight_inputs, artifact_weights

    got = interpret(art.program_module().funcs["mlp"], {"x": x, **artifact_weight_inputs(art)},
                    artifact_weights(art), mode="fp32")["y"]
    ref = interpret(m.funcs["mlp"], {"x": x}, store, mode="fp32")["y"]
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)


def test_a_pattern_that_matches_nothing_is_an_error():
    m = parse(MLP, "mlp.ir")
    with pytest.raises(AnecError, match="matches no weight") as ei:
        compile_module(m, random_seed=0, weights_as_inputs="h.0.nope.*")
    assert "fnmatch" in ei.value.hint


def test_fp32_weights_come_in_as_fp16_on_targets_without_fp32_io():
    text = MLP.replace('%w2 = const(weight="h.0.proj.weight", perm=[1, 0, 2, 3]) : fp16[64, 128, 1, 1]\n'
                       '  %y = conv1x1(%h, %w2)',
                       '%w2 = const(weight="h.0.proj.weight") : fp32[1, 128, 1, 8]\n'
                       '  %hf = cast(%h, dtype=fp32)\n  %y32 = mul(%hf, %w2)\n  %y = cast(%y32, dtype=fp16)')
    m = parse(text, "mlp.ir")
    res = compile_module(m, random_seed=0, target="m1", weights_as_inputs=["h.0.proj.weight"])
    art = res.artifacts["mlp"]
    (w,) = art.manifest.document["weight_inputs"]
    assert w["dtype"] == "fp16" and {i["name"]: i["dtype"] for i in art.manifest.document["inputs"]}[w["input"]] == "fp16"
