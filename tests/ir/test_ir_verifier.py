"""The verifier on graphs built or edited in memory (no text involved)."""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import VerifyError
from anec.ir.builder import Builder
from anec.ir.graph import Graph, Module, Node, Value
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.ir.types import DType, TensorType
from anec.ir.verifier import check, verify, verify_all

F = TensorType(DType.fp16, (1, 8))


def small() -> Builder:
    b = Builder("f")
    x = b.input("x", F)
    h = b.relu(x, name="h")
    b.ret(b.tanh(h, name="y"))
    return b


def messages(target) -> list[str]:
    return [e.message for e in verify_all(target)]


def test_built_graph_is_valid() -> None:
    b = small()
    assert verify(b.graph) == []
    assert verify(Builder.module(b)) == []


def test_operand_from_another_graph_is_undefined() -> None:
    other = small()
    b = small()
    b.graph.nodes[1].operands[0] = other.graph.nodes[0].results[0]
    b.graph.rebuild_uses()
    assert messages(b.graph) == ["use of undefined value %h"]


def test_nodes_out_of_order() -> None:
    b = small()
    g = b.graph
    h = g.nodes[0].results[0]
    g.create_node("relu", [h], {}, [h.type], names=["early"], before=g.nodes[0])
    assert messages(b.graph) == ["value %h is used before it is defined"]


def test_duplicate_value_names() -> None:
    b = small()
    b.graph.rename_value(b.graph.nodes[1].results[0], "h")
    assert messages(b.graph)[0] == "value %h is already defined"


def test_stale_use_lists_are_caught() -> None:
    b = small()
    g = b.graph
    g.nodes[1].operands[0] = g.inputs[0]  # edited without set_operand / rebuild_uses
    errs = verify_all(g)
    assert [e.message for e in errs] == [
        "use list of %x is out of date",
        "use list of %h is out of date",
    ]
    assert "rebuild_uses" in errs[0].hint
    g.rebuild_uses()
    assert verify_all(g) == []


def test_outputs() -> None:
    b = small()
    g = b.graph
    g.set_outputs([])
    assert messages(g) == ["func 'f' returns no value"]
    g.set_outputs([g.inputs[0]])
    err = verify_all(g)[0]
    assert err.message == "func 'f' returns its input %x directly"
    assert "identity" in err.hint
    y = g.nodes[1].results[0]
    g.set_outputs([y, y])
    assert messages(g) == ["%y is returned twice"]
    g.set_outputs([Value("ghost", F)])
    assert messages(g)[0] == "returned value %ghost is not defined in func 'f'"


def test_unprintable_names_and_attributes() -> None:
    b = small()
    g = b.graph
    g.rename_value(g.nodes[0].results[0], "h-1")
    g.nodes[1].attrs["blob"] = object()
    g.nodes[1].annotations["s"] = "\ud800"
    assert messages(g) == [
        "invalid value name 'h-1'",
        "attribute 'blob' of 'tanh' cannot be written in the IR: object is not a literal",
        "annotation 's' of 'tanh' cannot be written in the IR: string holds lone surrogates",
    ]


def test_bad_func_names_in_modules() -> None:
    b = small()
    m = Module()
    m.funcs["other"] = b.graph
    assert messages(m) == ["func 'f' is registered under the name 'other'"]
    b.graph.name = "f g"
    m = Module()
    m.add_func(b.graph)
    assert messages(m)[0] == "invalid func name 'f g'"


def test_invalid_types() -> None:
    g = Graph("f")
    x = g.add_input("x", TensorType(DType.fp16, (0, 2)))
    g.add_node(Node("relu", [x], {}, [Value("y", TensorType(DType.fp16, (0, 2)))]))
    g.set_outputs([g.nodes[0].results[0]])
    assert messages(g) == [
        "%x has an invalid type: fp16[0, 2] has a dimension < 1",
        "%y has an invalid type: fp16[0, 2] has a dimension < 1",
    ]


def test_all_errors_in_source_order() -> None:
    text = (
        "func f(%x: fp16[1, 8]) {\n"
        "  %a = relu(%x) : fp16[1, 9]\n"
        "  %b = softmax(%a, axsi=0) : fp16[1, 9]\n"
        "  %c = gleu(%b) : fp16[1, 9]\n"
        "  return %c, %x\n}\n"
    )
    errs = verify_all(parse(text, "m.ir"))
    assert [(e.span.location, e.message) for e in errs] == [
        ("m.ir:2:8", "declared type fp16[1, 9] of %a does not match the inferred type fp16[1, 8]"),
        ("m.ir:3:8", "softmax has no attribute 'axsi'"),
        ("m.ir:4:8", "unknown op 'gleu'"),
        ("m.ir:5:3", "func 'f' returns its input %x directly"),
    ]
    with pytest.raises(VerifyError, match="declared type"):
        verify(parse(text))


def test_unused_results_are_warnings() -> None:
    text = (
        "func f(%x: fp16[1, 8]) {\n"
        "  %dead = relu(%x)\n"
        "  %a, %b = split(%x, axis=1, sizes=[4, 4])\n"
        "  %c, %d = split(%x, axis=1, sizes=[2, 6])\n"
        "  %y = tanh(%a)\n"
        "  return %y\n}\n"
    )
    m = parse(text, "w.ir")
    warnings = verify(m)
    assert warnings == [
        "w.ir:2:11: warning: %dead is never used (dce removes 'relu')\n"
        "    %dead = relu(%x)\n"
        "            ^^^^",
        "w.ir:4:12: warning: %c, %d are never used (dce removes 'split')\n"
        "    %c, %d = split(%x, axis=1, sizes=[2, 6])\n"
        "             ^^^^^",
    ]
    assert check(m).errors == []


def test_const_rules() -> None:
    def err(decl: str) -> str:
        text = f"func f() {{\n  %c = {decl}\n  return %c\n}}\n"
        return verify_all(parse(text))[0].message

    assert err("const() : fp16[1]") == "const needs exactly one of weight= or value="
    assert err('const(weight="") : fp16[1]') == "const weight key is empty"
    assert err("const(value=[1, 2]) : fp16[1, 2]").startswith("const value has shape [2]")
    assert err("const(value=true) : fp32[]") == "const value true is not a number for a fp32 const"
    assert err("const(value=300) : uint8[]") == "const value 300 is out of range for uint8 (0..255)"
    assert err('const(weight="w", perm=[0, 0]) : fp16[2, 2]').startswith("const perm [0, 0]")
    big = "const(value=0.0) : fp16[65536, 65536, 65536]"  # a scalar fills the shape, not allocated
    assert verify(parse(f"func f() {{\n  %c = {big}\n  return %c\n}}\n")) == []


def test_float_literals_that_round_to_inf_are_errors() -> None:
    """A finite literal is an error where its dtype rounds it to inf (decided by the dtype's
    round-to-nearest: 65519 is the fp16 65504, 65520 is inf); inf written out stays."""
    def outcome(decl: str, x: str = "fp16[2]") -> str:
        text = f"func f(%x: {x}) {{\n  %c = {decl}\n  return %c\n}}\n"
        try:  # the parser infers pad's type (and checks it); the verifier checks a const's value
            errors = verify_all(parse(text))
        except VerifyError as e:
            errors = [e]
        assert not errors or errors[0].span.location == "<string>:2:8"
        return errors[0].message if errors else "ok"

    fp16 = "is out of range for fp16 (-65504..65504)"
    assert outcome("const(value=70000) : fp16[]") == f"const value 70000 {fp16}"
    assert outcome("const(value=65520) : fp16[]") == f"const value 65520 {fp16}"
    assert outcome("const(value=-65520.0) : fp16[]") == f"const value -65520.0 {fp16}"
    assert outcome("const(value=[1, -2, 70000.5]) : fp16[3]") == f"const value 70000.5 {fp16}"
    assert outcome("const(value=[[1], [1e5]]) : fp16[2, 1]") == f"const value 100000.0 {fp16}"
    assert outcome("pad(%x, before=[1], after=[0], value=65520)") == f"pad value 65520 {fp16}"
    assert outcome("const(value=1e39) : fp32[]").startswith("const value 1e+39 is out of range for fp32")
    assert outcome("const(value=2147483648) : int32[]") == \
        "const value 2147483648 is out of range for int32 (-2147483648..2147483647)"
    for fine in ("const(value=65519) : fp16[]", "const(value=-65519.99) : fp16[]", "const(value=inf) : fp16[]",
                 "const(value=[-inf, nan, 65504]) : fp16[3]", "const(value=70000) : fp32[]",
                 "const(value=3.4028235e38) : fp32[]", "pad(%x, before=[1], after=[0], value=-inf)"):
        assert outcome(fine) == "ok", fine
    assert outcome("pad(%x, before=[1], after=[0], value=70000)", "fp32[2]") == "ok"
    g = parse("func f() {\n  %c = const(value=65519) : fp16[]\n  return %c\n}\n").func()
    assert interpret(g, {})["c"] == np.float16(65504)


def test_overflowing_literals_in_the_builder() -> None:
    """The builder applies the same rule to Python values (whose 1e999 is already inf)."""
    b = Builder("f")
    with pytest.raises(VerifyError, match="const value 70000 is out of range for fp16") as e:
        b.const_value(70000, "fp16[]")
    assert "magnitude below 65520 rounds to a finite value" in e.value.hint
    assert b.const_value(float("inf"), "fp16[]").type == TensorType(DType.fp16, ())


def test_operand_attribute_confusion() -> None:
    text = "func f(%x: fp16[1, 8], %a: fp16[1]) {\n  %y = softmax(%x, axis=%a)\n  return %y\n}\n"
    with pytest.raises(VerifyError) as e:
        parse(text)
    assert e.value.message == "attribute 'axis' of softmax takes a literal, not a value"
    assert e.value.hint == "write axis=<int>"
