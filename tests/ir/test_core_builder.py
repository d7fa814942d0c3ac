"""Builder: programmatic graphs equal to parsed text, inference, and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anec.diagnostics import VerifyError
from anec.ir import Builder, DType, TensorType
from anec.ir.interp import interpret
from anec.ir.parser import parse_file
from anec.ir.verifier import verify

ROOT = Path(__file__).resolve().parents[2]


def build_gpt2_mlp() -> Builder:
    b = Builder("mlp")
    x = b.input("x", "fp32", [1, 768, 1, 64])
    xh = b.cast(x, dtype="fp16", name="xh")
    mu = b.reduce_mean(xh, axes=[1], keep_dims=True, name="mu")
    xc = b.sub(xh, mu, name="xc")
    sq = b.mul(xc, xc, name="sq")
    var = b.reduce_mean(sq, axes=[1], keep_dims=True, name="var")
    eps = b.const_value(1e-05, "fp16[]", name="eps")
    ve = b.add(var, eps, name="ve")
    rstd = b.rsqrt(ve, name="rstd")
    xn = b.mul(xc, rstd, name="xn")
    g = b.const_weight("h.0.ln_2.weight", "fp16[1, 768, 1, 1]", name="g")
    bb = b.const_weight("h.0.ln_2.bias", "fp16[1, 768, 1, 1]", name="b")
    xs = b.mul(xn, g, name="xs")
    ln = b.add(xs, bb, name="ln")
    w1 = b.const_weight("h.0.mlp.c_fc.weight", "fp16[3072, 768, 1, 1]", name="w1")
    b1 = b.const_weight("h.0.mlp.c_fc.bias", "fp16[1, 3072, 1, 1]", name="b1")
    h = b.conv1x1(ln, w1, bias=b1, name="h")
    a = b.gelu(h, mode="tanh", name="a")
    w2 = b.const_weight("h.0.mlp.c_proj.weight", "fp16[768, 3072, 1, 1]", name="w2")
    b2 = b.const_weight("h.0.mlp.c_proj.bias", "fp16[1, 768, 1, 1]", name="b2")
    o = b.conv1x1(a, w2, bias=b2, name="o")
    r = b.add(xh, o, name="r")
    b.ret(b.cast(r, dtype=DType.fp32, name="y"))
    return b


def test_builds_the_gpt2_mlp_example_exactly():
    built = build_gpt2_mlp()
    parsed = parse_file(ROOT / "examples" / "gpt2_mlp.ir")
    assert built.graph == parsed.func("mlp")
    module = Builder.module(built, weights=["gpt2_layer0.safetensors"])
    assert module == parsed
    verify(module)


def test_builds_multi_result_and_variadic_ops():
    parsed = parse_file(ROOT / "examples" / "multi_func.ir")
    enc = Builder("encode")
    x = enc.input("x", TensorType(DType.fp16, (1, 256, 1, 128)))
    h = enc.conv1x1(x, enc.const_weight("enc.weight", "fp16[512, 256, 1, 1]", name="w"), name="h")
    a = enc.relu(h, name="a")
    left, right = enc.split(a, axis=1, sizes=[256, 256], names=["left", "right"])
    enc.ret(left, enc.neg(right, name="neg_right"))
    assert enc.graph == parsed.funcs["encode"]

    cls = Builder("classify")
    f = cls.input("f", "fp16", [1, 256, 1, 128])
    g = cls.input("g", "fp16", (1, 256, 1, 128))
    fg = cls.concat(f, g, axis=1, name="fg")
    m = cls.conv1x1(fg, cls.const_weight("mix.weight", "fp16[256, 512, 1, 1]", name="wm"), name="m")
    t = cls.tanh(m, name="t")
    t3 = cls.reshape(t, shape=(1, 256, 128), name="t3")
    rows = cls.transpose(t3, perm=[0, 2, 1], name="rows")
    table = cls.const_weight("classes.weight", "fp16[256, 1000]", name="table")
    scores = cls.matmul(rows, table, name="scores")
    probs = cls.softmax(scores, axis=np.int64(-1), name="probs")
    cls.ret(cls.cast(probs, dtype="fp32", name="out"))
    assert cls.graph == parsed.funcs["classify"]
    assert Builder.module(enc, cls, weights=["multi.safetensors"]) == parsed


def test_fresh_names_and_inferred_types():
    b = Builder("f")
    x = b.input("x", "fp16", [2, 6])
    y = b.add(x, x)
    z = b.add(y, x)
    assert y.name == "add" and z.name.startswith("add_")
    p, q, r = b.split(z, axis=1, sizes=[1, 2, 3])
    assert len({p.name, q.name, r.name}) == 3
    assert [v.type for v in (p, q, r)] == [TensorType(DType.fp16, (2, n)) for n in (1, 2, 3)]
    w = b.const_weight("model.layers.0.w", "fp16[6]")
    assert w.name == "model_layers_0_w"
    assert b.op("matmul", x, b.reshape(x, shape=[6, 2]), transpose_x=False).type == TensorType(DType.fp16, (2, 2))
    b.ret(p, q)
    assert b.graph.output_names() == [p.name, q.name]


def test_built_graph_runs_in_the_interpreter():
    b = Builder("f")
    x = b.input("x", "fp32", [2, 3])
    s = b.softmax(x, name="s")
    total = b.reduce_sum(s, axes=[-1], name="total")
    b.ret(total)
    out = interpret(b.graph, {"x": np.random.default_rng(0).standard_normal((2, 3))})
    np.testing.assert_allclose(out["total"], np.ones(2), rtol=1e-6)


def test_errors_are_verify_errors_with_hints():
    b = Builder("f")
    x = b.input("x", "fp16", [1, 768, 1, 64])
    w = b.const_weight("w", "fp16[3072, 512, 1, 1]", name="w")
    with pytest.raises(VerifyError, match="conv1x1 input channels differ: input has 768, weight expects 512"):
        b.conv1x1(x, w)
    with pytest.raises(VerifyError, match="unknown op 'gleu'") as ei:
        b.op("gleu", x)
    assert ei.value.hint == "did you mean 'gelu'?"
    with pytest.raises(AttributeError, match="Builder has no op 'gleu'; did you mean 'gelu'?"):
        b.gleu(x)
    with pytest.raises(VerifyError, match="value %x is already defined"):
        b.neg(x, name="x")
    with pytest.raises(VerifyError, match="invalid value name 'a-b'"):
        b.neg(x, name="a-b")
    with pytest.raises(VerifyError, match="split has 2 results but 1 names were given"):
        b.split(x, axis=1, sizes=[384, 384], names=["only"])
    other = Builder("g").input("z", "fp16", [1])
    with pytest.raises(VerifyError, match="value %z does not belong to func 'f'"):
        b.neg(other)
    with pytest.raises(VerifyError, match="'fp16\\[1, x\\]' is not a tensor type"):
        b.const_value(1.0, "fp16[1, x]")
    with pytest.raises(VerifyError, match="unknown dtype 'fp64'"):
        b.input("y", "fp64", [1])
    y = b.neg(x, name="y")
    with pytest.raises(VerifyError, match="value %y is returned twice"):
        b.ret(y, y)
    with pytest.raises(VerifyError, match="func 'f' is defined twice"):
        Builder.module(b, Builder("f"))
    # nothing half-built was left behind by the failures
    assert [n.op for n in b.graph.nodes] == ["const", "neg"]


def test_facade_and_text_round_trip_of_a_built_module():
    import anec.ir as ir

    module = Builder.module(build_gpt2_mlp(), weights=["gpt2_layer0.safetensors"])
    text = ir.print_module(module)
    assert ir.parse(text) == module
    assert text == ir.print_module(ir.parse_file(ROOT / "examples" / "gpt2_mlp.ir"))
    assert ir.verify(module) == []
    assert "verify" in dir(ir)
    with pytest.raises(AttributeError):
        ir.no_such_tool  # noqa: B018
