"""Parser behaviour beyond the golden errors: literals, inference, names, files."""

from __future__ import annotations

import math

import pytest

from anec.diagnostics import AnecError, ParseError, VerifyError
from anec.ir.lexical import MAX_LIST_DEPTH
from anec.ir.parser import parse, parse_file
from anec.ir.types import DType, TensorType
from anec.ir.printer import print_module
from anec.ir.verifier import verify, verify_all


def attrs_of(literal: str) -> object:
    """The parsed value of one attribute literal (on an annotation, so any literal goes)."""
    text = f"func f(%x: fp16[1]) {{\n  %y = relu(%x) : fp16[1] @{{v={literal}}}\n  return %y\n}}\n"
    return parse(text).func().nodes[0].annotations["v"]


@pytest.mark.parametrize(
    "literal, value",
    [
        ("0", 0),
        ("-3", -3),
        ("+7", 7),
        ("12345678901234567890", 12345678901234567890),
        ("1.0", 1.0),
        ("1e-05", 1e-05),
        ("-0.5", -0.5),
        ("1e+16", 1e16),
        ("2E3", 2000.0),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("true", True),
        ("false", False),
        ("fp16", DType.fp16),
        ("uint8", DType.uint8),
        ('"tanh"', "tanh"),
        ('"a\\"b\\\\c\\n\\t\\u00e9\\ud83d\\ude00"', 'a"b\\c\n\té\U0001f600'),
        ('"é // not a comment"', "é // not a comment"),
        ("[]", []),
        ("[1, 2.5, true]", [1, 2.5, True]),
        ("[[1, 2], [3, 4]]", [[1, 2], [3, 4]]),
    ],
)
def test_literals(literal: str, value: object) -> None:
    got = attrs_of(literal)
    assert got == value and type(got) is type(value)


def test_nan_literal() -> None:
    assert math.isnan(attrs_of("nan"))
    assert isinstance(attrs_of("1"), int) and isinstance(attrs_of("1.0"), float)


def test_list_depth_limit() -> None:
    ok = "[" * MAX_LIST_DEPTH + "]" * MAX_LIST_DEPTH
    assert attrs_of(ok) is not None
    with pytest.raises(ParseError, match="nested deeper"):
        attrs_of("[" + ok + "]")


@pytest.mark.parametrize(
    "literal, message",
    [
        ("tahn", "unknown word 'tahn'"),
        ("1.", "expected"),
        (".5", "unexpected character '.'"),
        ("9" * 5000, "integer literal too large"),
        ('"\\q"', "invalid escape"),
        ("-x", "'-'"),
        ('"\\ud800"', "unpaired surrogate"),
        ('"\\ude00\\ud83d"', "unpaired surrogate"),
    ],
)
def test_bad_literals(literal: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        attrs_of(literal)


def test_types_are_inferred_when_omitted() -> None:
    untyped = """
    weights "gpt2.safetensors"
    func mlp(%x: fp32[1, 768, 1, 64]) {
      %xh = cast(%x, dtype=fp16)
      %w1 = const(weight="h.0.mlp.c_fc.weight") : fp16[3072, 768, 1, 1]
      %b1 = const(weight="h.0.mlp.c_fc.bias") : fp16[1, 3072, 1, 1]
      %h  = conv1x1(%xh, %w1, bias=%b1)
      %g  = gelu(%h)
      %w2 = const(weight="h.0.mlp.c_proj.weight") : fp16[768, 3072, 1, 1]
      %o  = conv1x1(%g, %w2)
      %a, %b = split(%o, axis=1, sizes=[512, 256])
      %y  = cast(%a, dtype=fp32)
      return %y, %b
    }
    """
    g = parse(untyped).func()
    types = {r.name: r.type for n in g.nodes for r in n.results}
    assert types["h"] == TensorType(DType.fp16, (1, 3072, 1, 64))
    assert types["a"] == TensorType(DType.fp16, (1, 512, 1, 64))
    assert types["b"] == TensorType(DType.fp16, (1, 256, 1, 64))
    assert types["y"] == TensorType(DType.fp32, (1, 512, 1, 64))
    assert g.nodes[3].optional["bias"].name == "b1"
    assert verify(parse(untyped)) == []


def test_inference_errors_are_reported_by_parse() -> None:
    with pytest.raises(VerifyError, match="conv1x1 input channels differ") as e:
        parse(
            "func f(%x: fp16[1, 3, 1, 1], %w: fp16[2, 4, 1, 1]) {\n"
            "  %y = conv1x1(%x, %w)\n  return %y\n}\n",
            "m.ir",
        )
    assert e.value.span.location == "m.ir:2:8"


def test_annotations_and_weights_directives() -> None:
    text = (
        'weights "a.safetensors"\nfunc f(%x: fp16[1]) {\n'
        '  %y = relu(%x) : fp16[1] @{in_bytes=2, spill=true, where="sram"}\n'
        '  %z = tanh(%y) : fp16[1] @{}\n  return %z\n}\nweights "b.npz"\n'
    )
    m = parse(text)
    assert [w.path for w in m.weight_sources] == ["a.safetensors", "b.npz"]
    y, z = m.func().nodes
    assert y.annotations == {"in_bytes": 2, "spill": True, "where": "sram"}
    assert z.annotations == {}


def test_keywords_are_fine_as_names() -> None:
    text = (
        "func weights(%func: fp16[1]) {\n  %return = relu(%func)\n  return %return\n}\n"
        "func return(%x: fp16[1]) {\n  %1 = relu(%x)\n  %0_w = tanh(%1)\n  return %0_w\n}\n"
    )
    m = parse(text)
    assert list(m.funcs) == ["weights", "return"]
    assert m.funcs["return"].outputs[0].name == "0_w"
    assert verify(m) == []


def test_scalar_types_and_empty_inputs() -> None:
    g = parse("func f() {\n  %c = const(value=0.5) : fp32[]\n  return %c\n}\n").func()
    assert g.inputs == () and g.outputs[0].type == TensorType(DType.fp32, ())


def test_empty_and_comment_only_files() -> None:
    assert parse("").funcs == {}
    assert parse("// nothing here\n\n").funcs == {}
    # they parse (and format), but a program needs a func
    from anec.ir.verifier import verify_all

    errors = verify_all(parse("// nothing here\n", "n.ir"))
    assert [e.render() for e in errors] == [
        "n.ir:1:1: error: the file defines no func\n  // nothing here\n  ^\n"
        "hint: a file holds one or more funcs: func main(%x: fp16[1, 64, 1, 64]) "
        "{ %y = relu(%x)  return %y }"
    ]


def test_crlf_and_tabs() -> None:
    text = "func f(%x: fp16[1])\t{\r\n\t%y = relu(%x)\r\n\treturn %y\r\n}\r\n"
    g = parse(text, "w.ir").func()
    assert g.nodes[0].span.location == "w.ir:2:7"


def test_parse_file(tmp_path) -> None:
    path = tmp_path / "m.ir"
    path.write_bytes(b"\xef\xbb\xbffunc f(%x: fp16[1]) {\n  %y = relu(%x)\n  return %y\n}\n")
    m = parse_file(path)
    assert m.path == str(path) and m.func().nodes[0].span.location == f"{path}:2:8"
    with pytest.raises(AnecError, match="cannot read"):
        parse_file(tmp_path / "missing.ir")
    with pytest.raises(AnecError, match="is a directory, not a regular file"):
        parse_file(tmp_path)
    bad = tmp_path / "bad.ir"
    bad.write_bytes(b"func f() {\n \xff\xfe }\n")
    with pytest.raises(AnecError, match=r"not valid UTF-8 \(byte 12, line 2\)"):
        parse_file(bad)


def test_parse_errors_are_never_lark_errors() -> None:
    for text in [
        "func",
        "func f(",
        "%",
        "@{",
        "weights",
        'weights "x" "y"',
        "}",
        "\x00",
        "func f() { return %y }",
    ]:
        with pytest.raises(AnecError) as e:
            parse(text)
        assert e.value.span is not None
        assert "lark" not in type(e.value).__module__


def test_expected_tokens_use_human_names() -> None:
    with pytest.raises(ParseError) as e:
        parse("func f(%x: fp16[1, 2) {\n}\n")
    assert e.value.message == "expected ',' or ']', got ')'"
    with pytest.raises(ParseError) as e:
        parse("func f(%x: fp16[1]) {\n  %y = relu(%x) : fp16[1] @{a 1}\n  return %y\n}\n")
    assert e.value.message == "expected '=', got '1'"


def test_parse_restores_the_garbage_collector_state() -> None:
    import gc

    from anec.diagnostics import ParseError

    assert gc.isenabled()
    parse("func f(%x: fp16[2]) {\n  %y = relu(%x)\n  return %y\n}\n")
    with pytest.raises(ParseError):
        parse("func f(")
    assert gc.isenabled()
    gc.disable()
    try:
        parse("func f(%x: fp16[2]) {\n  %y = relu(%x)\n  return %y\n}\n")
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


def test_a_scalar_type_may_be_a_bare_dtype() -> None:
    """``: fp16`` (as MIL writes a scalar) and ``: fp16[]`` are the same type; the printer writes ``fp16[]``."""
    bare = parse("func f(%x: fp16, %v: fp32[4]) {\n  %c = const(value=0.5) : fp32\n"
                 "  %y = relu(%x) : fp16\n  %a, %b = split(%v, axis=0, sizes=[1, 3]) : fp32[1], fp32[3]\n"
                 "  return %y, %c\n}\n")
    assert verify_all(bare) == []
    g = bare.func()
    assert g.inputs[0].type == TensorType(DType.fp16, ()) and g.nodes[0].result.type == TensorType(DType.fp32, ())
    text = print_module(bare)
    assert "%x: fp16[]" in text and ": fp32[] " not in text and "%c = const(value=0.5) : fp32[]" in text
    assert parse(text) == bare


@pytest.mark.parametrize("text,where,message", [
    ("func f(%x: fp16[4]) {\n  %y = relu(%x\n  return %y\n}\n", "2:15", "expected ')' or ','"),
    ("func f(%x: fp16[4]) {\n  %y = add(%x,\n  return %y\n}\n", "2:15", "expected a value name like %x or a name"),
    ("func f(%x: fp16[4]) {\n  %y = relu(%x) :\n  return %y\n}\n", "2:18", "expected a type"),
    ("func f(%x: fp16[4]) {\n  %y = relu(%x\n  %z = tanh(%y)\n  return %z\n}\n", "2:15", "expected ')' or ','"),
])
def test_an_error_caused_by_a_line_end_is_reported_on_that_line(text, where, message) -> None:
    with pytest.raises(ParseError) as e:
        parse(text, "f.ir")
    assert e.value.span.location == f"f.ir:{where}"
    assert e.value.message.startswith(message) and e.value.message.endswith("before the end of the line")


def test_a_complete_line_keeps_the_error_on_the_next_token() -> None:
    with pytest.raises(ParseError) as e:  # the statement on line 2 is complete: 'y' is the mistake
        parse("func f(%x: fp16[4]) {\n  %h = relu(%x)\n  y = tanh(%h)\n  return %y\n}\n", "f.ir")
    assert e.value.span.location == "f.ir:3:3"
