"""The exact MIL text of small programs the golden examples never write: rank-0 weights,
names (weight files, helper consts, renamed values) that collide more than once,
parameters rounded to the operand's dtype, escaped strings, and the refusal of a weight
dtype the dialect's BLOBFILE cannot hold."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from anec.diagnostics import ConstraintError
from anec.ir import Builder, ops
from anec.ir.parser import parse
from anec.mil.emitter import emit_mil
from anec.targets import get_target

from .milcheck import parse_mil

M4 = get_target("m4")
IOS16 = get_target("m2").replace(mil_dialect="ios16")  # what --dialect ios16 selects
HEAD = ("program(1.3)\n"
        '[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
        '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
        '{"coremltools-version", "9.0"}})]\n'
        "{\n")


def _func(text: str, filename: str = "t.ir"):
    return parse(inspect.cleandoc(text) + "\n", filename).func("main")


def test_a_rank0_weight_is_a_rank0_tensor_blobfile():
    """A BLOBFILE value is a tensor type also for a scalar: ``tensor<fp16, []>``, not ``fp16``."""
    g = _func("""
        func main(%x: fp16[1, 1, 1, 4]) {
          %s = const(weight="scale") : fp16[]
          %y = mul(%x, %s) : fp16[1, 1, 1, 4]
          return %y
        }
    """)
    prog = emit_mil(g, M4)
    assert prog.text == HEAD + (
        "    func main<ios18>(tensor<fp16, [1, 1, 1, 4]> x) {\n"
        '        tensor<fp16, []> s = const()[name = string("s"), val = tensor<fp16, []>(BLOBFILE('
        'path = string("@model_path/weights/s.bin"), offset = uint64(64)))];\n'
        '        tensor<fp16, [1, 1, 1, 4]> y = mul(x = x, y = s)[name = string("y")];\n'
        "    } -> (y);\n"
        "}\n")
    assert [(w.const, w.key, w.file, w.offset, str(w.type)) for w in prog.weights] == [
        ("s", "scale", "weights/s.bin", 64, "fp16[]")]


def test_weight_files_stay_unique_ignoring_case_past_the_first_suffix():
    """``w`` collides with ``W.bin`` and then with ``W_1.bin``: it gets the next free suffix."""
    g = _func("""
        func main(%x: fp16[1, 4, 1, 4]) {
          %W = const(weight="a") : fp16[4, 4, 1, 1]
          %W_1 = const(weight="b") : fp16[4, 4, 1, 1]
          %w = const(weight="c") : fp16[4, 4, 1, 1]
          %p = conv1x1(%x, %W) : fp16[1, 4, 1, 4]
          %q = conv1x1(%p, %W_1) : fp16[1, 4, 1, 4]
          %y = conv1x1(%q, %w) : fp16[1, 4, 1, 4]
          return %y
        }
    """)
    prog = emit_mil(g, M4)
    assert [(w.const, w.key, w.file) for w in prog.weights] == [
        ("W", "a", "weights/W.bin"), ("W_1", "b", "weights/W_1.bin"), ("w", "c", "weights/w_2.bin")]
    assert ('        tensor<fp16, [4, 4, 1, 1]> w = const()[name = string("w"), val = tensor<fp16, [4, 4, 1, 1]>'
            '(BLOBFILE(path = string("@model_path/weights/w_2.bin"), offset = uint64(64)))];\n') in prog.text


def test_pad_value_is_written_as_the_operands_dtype_holds_it():
    """pad's ``value`` attribute is a number; MIL gets the fp16 the interpreter pads with,
    in its shortest exact spelling (fp16(0.1) is 0.0999755859375, fp16(1/3) is 0.333251953125)."""
    g = _func("""
        func main(%x: fp16[1, 3, 1, 4]) {
          %p = pad(%x, before=[0, 0, 0, 1], after=[0, 0, 0, 0], value=0.1) : fp16[1, 3, 1, 5]
          %q = pad(%p, before=[0, 0, 0, 0], after=[0, 0, 0, 1], value=0.3333333333) : fp16[1, 3, 1, 6]
          return %q
        }
    """)
    text = emit_mil(g, M4).text
    assert text == HEAD + (
        "    func main<ios18>(tensor<fp16, [1, 3, 1, 4]> x) {\n"
        '        fp16 p_constant_val = const()[name = string("p_constant_val"), val = fp16(0.1)];\n'
        '        string p_mode = const()[name = string("p_mode"), val = string("constant")];\n'
        '        tensor<int32, [2]> p_pad = const()[name = string("p_pad"), val = tensor<int32, [2]>([1, 0])];\n'
        "        tensor<fp16, [1, 3, 1, 5]> p = pad(constant_val = p_constant_val, mode = p_mode, pad = p_pad, "
        'x = x)[name = string("p")];\n'
        '        fp16 q_constant_val = const()[name = string("q_constant_val"), val = fp16(0.3333)];\n'
        '        string q_mode = const()[name = string("q_mode"), val = string("constant")];\n'
        '        tensor<int32, [2]> q_pad = const()[name = string("q_pad"), val = tensor<int32, [2]>([0, 1])];\n'
        "        tensor<fp16, [1, 3, 1, 6]> q = pad(constant_val = q_constant_val, mode = q_mode, pad = q_pad, "
        'x = p)[name = string("q")];\n'
        "    } -> (q);\n"
        "}\n")
    assert np.float16("0.3333") == np.float16(0.3333333333) and np.float16("0.1") == np.float16(0.1)


@pytest.mark.parametrize(
    "target, dtype, allowed",
    [(M4, "bool", "fp16, fp32, int32, int8, uint8"), (IOS16, "int32", "fp16, fp32, int8, uint8")],
    ids=["ios18-bool", "ios16-int32"],
)
def test_a_weight_dtype_the_blobfile_cannot_hold_is_refused_word_for_word(target, dtype, allowed):
    g = _func(f"""
        func main(%x: fp16[1, 1, 1, 4]) {{
          %m = const(weight="mask") : {dtype}[1, 4]
          %mc = cast(%m, dtype="fp16") : fp16[1, 4]
          %y = mul(%x, %mc) : fp16[1, 1, 1, 4]
          return %y
        }}
    """, "mask.ir")
    with pytest.raises(ConstraintError) as e:
        emit_mil(g, target)
    dialect = target.mil_dialect
    assert str(e.value) == (
        f"mask.ir:2:8: error: [ANE-MIL-DIALECT] weight const %m has dtype {dtype}, which a BLOBFILE "
        f"cannot hold in the {dialect} dialect\n"
        f'    %m = const(weight="mask") : {dtype}[1, 4]\n'
        "         ^^^^^\n"
        f"hint: declare it as one of {allowed} and cast after loading")
    assert e.value.constraint == "ANE-MIL-DIALECT"


def test_helper_consts_and_renamed_values_take_the_next_free_suffix():
    """No two statements define one name: a helper const whose name two user values already
    hold (``h_strides``, ``h_strides_1``) is ``h_strides_2``; ``%0`` is renamed ``v0`` and
    ``%0_axis`` ``v0_axis``, so the softmax's axis const, named after ``v0``, is ``v0_axis_1``."""
    g = _func("""
        func main(%x: fp16[1, 4, 1, 4]) {
          %h_strides = relu(%x) : fp16[1, 4, 1, 4]
          %h_strides_1 = tanh(%h_strides) : fp16[1, 4, 1, 4]
          %w = const(weight="w") : fp16[4, 4, 1, 1]
          %h = conv1x1(%h_strides_1, %w) : fp16[1, 4, 1, 4]
          %0 = softmax(%h, axis=-1) : fp16[1, 4, 1, 4]
          %0_axis = relu(%0) : fp16[1, 4, 1, 4]
          %y = add(%0_axis, %h_strides) : fp16[1, 4, 1, 4]
          return %y
        }
    """)
    prog = emit_mil(g, M4)
    t = "tensor<fp16, [1, 4, 1, 4]>"
    assert prog.text == HEAD + (
        f"    func main<ios18>({t} x) {{\n"
        f'        {t} h_strides = relu(x = x)[name = string("h_strides")];\n'
        f'        {t} h_strides_1 = tanh(x = h_strides)[name = string("h_strides_1")];\n'
        '        tensor<fp16, [4, 4, 1, 1]> w = const()[name = string("w"), val = tensor<fp16, [4, 4, 1, 1]>'
        '(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(64)))];\n'
        '        tensor<int32, [2]> h_dilations = const()[name = string("h_dilations"), '
        'val = tensor<int32, [2]>([1, 1])];\n'
        '        int32 h_groups = const()[name = string("h_groups"), val = int32(1)];\n'
        '        tensor<int32, [4]> h_pad = const()[name = string("h_pad"), val = tensor<int32, [4]>([0, 0, 0, 0])];\n'
        '        string h_pad_type = const()[name = string("h_pad_type"), val = string("valid")];\n'
        '        tensor<int32, [2]> h_strides_2 = const()[name = string("h_strides_2"), '
        'val = tensor<int32, [2]>([1, 1])];\n'
        f"        {t} h = conv(dilations = h_dilations, groups = h_groups, pad = h_pad, pad_type = h_pad_type, "
        'strides = h_strides_2, weight = w, x = h_strides_1)[name = string("h")];\n'
        '        int32 v0_axis_1 = const()[name = string("v0_axis_1"), val = int32(3)];\n'
        f'        {t} v0 = softmax(axis = v0_axis_1, x = h)[name = string("v0")];\n'
        f'        {t} v0_axis = relu(x = v0)[name = string("v0_axis")];\n'
        f'        {t} y = add(x = v0_axis, y = h_strides)[name = string("y")];\n'
        "    } -> (y);\n"
        "}\n")
    assert prog.names == {"x": "x", "h_strides": "h_strides", "h_strides_1": "h_strides_1", "w": "w", "h": "h",
                          "0": "v0", "0_axis": "v0_axis", "y": "y"}


@pytest.mark.parametrize("target", [M4, IOS16], ids=["ios18", "ios16"])
def test_a_string_parameter_is_escaped_and_reads_back(monkeypatch, target):
    """A string const is a C-style literal: a quote or backslash in it is escaped, so a reader
    gets the attribute back exactly (here from a row with a ``str`` attribute)."""
    row = ops.OpDef("tagged", (ops.OperandDef("x"),), (ops.AttrDef("tag", "str"),), ops.FLOATS,
                    lambda operands, optional, attrs: [operands[0]], lambda operands, optional, attrs: [operands[0]],
                    "x", traits=frozenset({ops.Trait.elementwise, ops.Trait.unary}),
                    lowering=ops.Mil("tagged", ops.SimKernel("unary", "TAGGED")))
    monkeypatch.setitem(ops.OPS, "tagged", row)
    tag = 'say "hi" \\ bye'
    b = Builder("f")
    x = b.input("x", "fp16", [1, 4, 1, 4])
    b.ret(b.op("tagged", x, tag=tag, name="y"))
    prog = emit_mil(b.graph, target)
    text = prog.text
    assert prog.dialect == target.mil_dialect  # what the artifact records and Core ML export reads
    s = "tensor<string, []>" if target is IOS16 else "string"
    assert f'        {s} y_tag = const()[name = {s}("y_tag"), val = {s}("say \\"hi\\" \\\\ bye")];\n' in text
    consts = {st.results[0][1]: st.val.value for st in parse_mil(text).stmts if st.op == "const"}
    assert consts == {"y_tag": tag}
