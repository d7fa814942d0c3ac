"""The canonical form: ordering, literal spelling, and comment-preserving fmt."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anec.ir.builder import Builder
from anec.ir.graph import Graph, Module, Node, Value
from anec.ir.parser import parse
from anec.ir.printer import format_literal, format_text, print_graph, print_module
from anec.ir.types import DType, TensorType

F = TensorType(DType.fp16, (1, 4))


def one_node(
    op: str, attrs: dict, optional: dict | None = None, annotations: dict | None = None
) -> str:
    g = Graph("f")
    x = g.add_input("x", F)
    b = g.add_input("b", F)
    g.add_node(
        Node(
            op,
            [x],
            attrs,
            [Value("y", F)],
            {"bias": b} if optional else {},
            None,
            annotations or {},
        )
    )
    return print_graph(g).splitlines()[1].strip()


def test_layout_of_a_module() -> None:
    b = Builder("f")
    x = b.input("x", "fp16", [1, 4])
    b.ret(b.relu(x, name="y"))
    b2 = Builder("g")
    x2 = b2.input("x", "fp32", [])
    b2.ret(b2.cast(x2, dtype="fp16", name="h"))
    m = Builder.module(b, b2, weights=["w.safetensors", 'q"uote.npz'])
    assert print_module(m) == (
        'weights "w.safetensors"\n'
        'weights "q\\"uote.npz"\n'
        "\n"
        "func f(%x: fp16[1, 4]) {\n"
        "  %y = relu(%x) : fp16[1, 4]\n"
        "  return %y\n"
        "}\n"
        "\n"
        "func g(%x: fp32[]) {\n"
        "  %h = cast(%x, dtype=fp16) : fp16[]\n"
        "  return %h\n"
        "}\n"
    )
    assert print_module(Module()) == ""


def test_attributes_in_op_table_order_unknown_sorted_after() -> None:
    line = one_node("matmul", {"zeta": 1, "transpose_y": True, "alpha": 2, "transpose_x": False})
    assert (
        line == "%y = matmul(%x, transpose_x=false, transpose_y=true, alpha=2, zeta=1) : fp16[1, 4]"
    )


def test_optional_operands_before_attributes() -> None:
    line = one_node("conv1x1", {"extra": 1}, optional=True)
    assert line == "%y = conv1x1(%x, bias=%b, extra=1) : fp16[1, 4]"


def test_defaults_are_neither_added_nor_dropped() -> None:
    assert one_node("softmax", {}) == "%y = softmax(%x) : fp16[1, 4]"
    assert one_node("softmax", {"axis": -1}) == "%y = softmax(%x, axis=-1) : fp16[1, 4]"


def test_annotations_sorted() -> None:
    line = one_node("relu", {}, annotations={"spill": True, "in_bytes": 8, "live_bytes": 16})
    assert line.endswith(": fp16[1, 4] @{in_bytes=8, live_bytes=16, spill=true}")


@pytest.mark.parametrize(
    "value, text",
    [
        (1, "1"),
        (-1, "-1"),
        (1.0, "1.0"),
        (1e-05, "1e-05"),
        (0.125, "0.125"),
        (1e16, "1e+16"),
        (-0.0, "-0.0"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (math.nan, "nan"),
        (True, "true"),
        (False, "false"),
        (DType.int8, "int8"),
        ('a"b\\c\nd\x01\u2028é', '"a\\"b\\\\c\\nd\\u0001\\u2028é"'),
        ("\ud800", '"\\ud800"'),
        ([1, [2.5, "x"]], '[1, [2.5, "x"]]'),
        ((1, 2), "[1, 2]"),
        (np.int64(3), "3"),
        (np.float32(0.5), "0.5"),
        (np.bool_(True), "true"),
        (np.array([[1, 2]]), "[[1, 2]]"),
    ],
)
def test_literal_spelling(value, text: str) -> None:
    assert format_literal(value) == text


@pytest.mark.parametrize(
    "value", [1e-05, 0.1, 1 / 3, 5e-324, 1.7976931348623157e308, -2.5e-7, 2**53 + 1.0]
)
def test_floats_read_back_bit_exactly(value: float) -> None:
    text = f"func f() {{\n  %c = const(value={format_literal(value)}) : fp32[]\n  return %c\n}}\n"
    assert parse(text).func().nodes[0].attrs["value"] == value


FORMATTED = """\
// header comment
weights "a.safetensors"  // trailing on weights

// about f
func f(%x: fp16[1, 4]) {  // after the brace
  // leading comment
  %y = relu(%x) : fp16[1, 4]  // trailing

  // a group after a blank line
  %z = tanh(%y) : fp16[1, 4]
  return %z  // the output
  // before the closing brace
}  // after it

// end of file
"""


def test_fmt_keeps_comments_and_single_blank_lines() -> None:
    messy = """\
// header comment
weights   "a.safetensors"     // trailing on weights



// about f
func f(%x:fp16[1,4]){    // after the brace

  // leading comment
  %y=relu(%x)   // trailing



  // a group after a blank line
      %z = tanh(%y)
  return %z // the output
  // before the closing brace

}  // after it
// end of file
"""
    out = format_text(messy)
    assert out == FORMATTED.replace("\n\n// end of file", "\n// end of file")
    assert format_text(out) == out
    assert format_text(FORMATTED) == FORMATTED


def test_fmt_hoists_weights_with_their_comments() -> None:
    text = (
        "func f(%x: fp16[1]) {\n  %y = relu(%x) : fp16[1]\n  return %y\n}\n"
        '// the checkpoint\nweights "w.npz"\n'
    )
    assert format_text(text) == (
        '// the checkpoint\nweights "w.npz"\n\n'
        "func f(%x: fp16[1]) {\n  %y = relu(%x) : fp16[1]\n  return %y\n}\n"
    )


def test_fmt_of_multiline_statement_joins_its_comments() -> None:
    text = (
        "func f(%x: fp16[1],  // first\n       %w: fp16[1]) {\n"
        "  %y = add(%x,  // left\n           %w)  // right\n  return %y\n}\n"
    )
    out = format_text(text)
    assert out == (
        "func f(%x: fp16[1], %w: fp16[1]) {  // first\n"
        "  %y = add(%x, %w) : fp16[1]  // left // right\n  return %y\n}\n"
    )
    assert format_text(out) == out


def test_comment_only_file() -> None:
    assert format_text("// just a note\n\n\n// another\n") == "// just a note\n\n// another\n"
    assert format_text("") == ""
