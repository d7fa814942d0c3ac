"""Every refusal of the MIL emitter, word for word: location, caret, constraint id and hint.

The emitter is the last check before text reaches the device compiler: a func legalize
has not prepared (or a target it cannot write for) is refused with the constraint it
breaks and the step that fixes it, pointing at the IR line concerned.
"""

from __future__ import annotations

import inspect

import pytest

from anec.diagnostics import ConstraintError, PassError
from anec.ir import ops
from anec.ir.parser import parse
from anec.mil.emitter import emit_mil
from anec.targets import get_target

M1, M4 = get_target("m1"), get_target("m4")
LEGALIZE = "hint: run the legalize pass (part of the default pipeline), which rewrites it"
RENAME = ("hint: I/O names are kept exactly (the device binds I/O by name); rename it to start with "
          "a letter or _, e.g. %")

CASES = {
    "returns-its-input": (
        M4, {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          return %x
        }""",
        "t.ir:2:3: error: [ANE-LIVE-OUTPUTS] func 'main' returns its input %x; the ANE only returns values "
        "the program computes\n"
        "    return %x\n"
        "    ^^^^^^^^^\n"
        "hint: return an identity copy: %x_out = identity(%x)"),
    "returned-twice": (  # parsed, not verified: the verifier refuses it as well
        M4, {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %y = relu(%x) : fp16[1, 4, 1, 4]
          return %y, %y
        }""",
        "t.ir:3:3: error: [ANE-IO-ORDER] value %y is returned twice from func 'main'\n"
        "    return %y, %y\n"
        "    ^^^^^^^^^^^^^\n"
        "hint: return it once, or return an identity copy under another name"),
    "input-name-0": (
        M4, {}, """
        func main(%0: fp16[1, 4, 1, 4]) {
          %y = relu(%0) : fp16[1, 4, 1, 4]
          return %y
        }""",
        "t.ir:1:11: error: [ANE-IO-ORDER] input name '0' of func 'main' is not a valid MIL identifier\n"
        "  func main(%0: fp16[1, 4, 1, 4]) {\n"
        "            ^^\n"
        f"{RENAME}v0"),
    "output-name-keyword": (
        M4, {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %bool = relu(%x) : fp16[1, 4, 1, 4]
          return %bool
        }""",
        "t.ir:2:3: error: [ANE-IO-ORDER] output name 'bool' of func 'main' is a MIL keyword\n"
        "    %bool = relu(%x) : fp16[1, 4, 1, 4]\n"
        "    ^^^^^\n"
        f"{RENAME}bool_"),
    "output-name-digit": (
        M4, {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %9a = relu(%x) : fp16[1, 4, 1, 4]
          return %9a
        }""",
        "t.ir:2:3: error: [ANE-IO-ORDER] output name '9a' of func 'main' is not a valid MIL identifier\n"
        "    %9a = relu(%x) : fp16[1, 4, 1, 4]\n"
        "    ^^^\n"
        f"{RENAME}v9a"),
    "op-not-on-ane": (
        M4, {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %y = gelu(%x) : fp16[1, 4, 1, 4]
          return %y
        }""",
        "t.ir:2:8: error: [ANE-GELU] gelu is not a MIL op the ANE accepts; it must not reach MIL emission\n"
        "    %y = gelu(%x) : fp16[1, 4, 1, 4]\n"
        "         ^^^^\n"
        f'{LEGALIZE} into its tanh formula (an approximation for mode="exact")'),
    "operand-not-on-ane": (
        M4, {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %w = const(weight="w") : fp16[4, 4, 1, 1]
          %b = const(weight="b") : fp16[1, 4, 1, 1]
          %y = conv1x1(%x, %w, bias=%b) : fp16[1, 4, 1, 4]
          return %y
        }""",
        "t.ir:4:8: error: [ANE-CONV-BIAS] the ANE rejects conv with bias=; it must not reach MIL emission\n"
        "    %y = conv1x1(%x, %w, bias=%b) : fp16[1, 4, 1, 4]\n"
        "         ^^^^^^^\n"
        f"{LEGALIZE} into conv + add"),
    "fp32-input": (
        M1, {}, """
        func main(%x: fp32[1, 4, 1, 4]) {
          %y = relu(%x) : fp32[1, 4, 1, 4]
          return %y
        }""",
        "t.ir:1:11: error: [ANE-FP32-IO] input %x is fp32, but target m1 only accepts fp16 I/O\n"
        "  func main(%x: fp32[1, 4, 1, 4]) {\n"
        "            ^^\n"
        "hint: compile with --host-casts (the host converts fp32 <-> fp16) or declare it fp16"),
    "fp32-output": (
        M1, {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %y = cast(%x, dtype="fp32") : fp32[1, 4, 1, 4]
          return %y
        }""",
        "t.ir:2:3: error: [ANE-FP32-IO] output %y is fp32, but target m1 only accepts fp16 I/O\n"
        '    %y = cast(%x, dtype="fp32") : fp32[1, 4, 1, 4]\n'
        "    ^^\n"
        "hint: compile with --host-casts (the host converts fp32 <-> fp16) or declare it fp16"),
    "rank2-input": (
        M4, {}, """
        func main(%x: fp16[4, 4]) {
          %y = relu(%x) : fp16[4, 4]
          return %y
        }""",
        "t.ir:1:11: error: [ANE-IO-RANK4] input %x is fp16[4, 4]; every program the references run has "
        "rank-4 [1, C, 1, S] inputs and outputs\n"
        "  func main(%x: fp16[4, 4]) {\n"
        "            ^^\n"
        f"{LEGALIZE} (a reshape inside the program)"),
    "rank1-output": (
        M4, {}, """
        func main(%x: fp16[1, 1, 1, 16]) {
          %y = reshape(%x, shape=[16]) : fp16[16]
          return %y
        }""",
        "t.ir:2:3: error: [ANE-IO-RANK4] output %y is fp16[16]; every program the references run has "
        "rank-4 [1, C, 1, S] inputs and outputs\n"
        "    %y = reshape(%x, shape=[16]) : fp16[16]\n"
        "    ^^\n"
        f"{LEGALIZE} (a reshape inside the program)"),
    "packed-on-one-file-target": (
        M1, {"pack_weights": True}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %y = relu(%x) : fp16[1, 4, 1, 4]
          return %y
        }""",
        "error: [ANE-ONE-FILE-PER-WEIGHT] target m1 needs one BLOBFILE per weight; --pack-weights is not "
        "allowed\n"
        "hint: compile without --pack-weights"),
    "unknown-dialect": (
        M4.replace(mil_dialect="ios99"), {}, """
        func main(%x: fp16[1, 4, 1, 4]) {
          %y = relu(%x) : fp16[1, 4, 1, 4]
          return %y
        }""",
        "error: [ANE-MIL-DIALECT] target m4 asks for MIL dialect 'ios99', which anec does not write\n"
        "hint: known dialects: ios18, ios16"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refusal_word_for_word(case):
    target, kw, src, want = CASES[case]
    graph = parse(inspect.cleandoc(src) + "\n", "t.ir").func("main")
    with pytest.raises(ConstraintError) as e:
        emit_mil(graph, target, **kw)
    assert str(e.value) == want
    assert e.value.constraint == want.split("[")[1].split("]")[0]


# ---- an op row that is not finished: the emitter names what is missing -------------------

def _row(name, lowering, n_results=1):
    """A throwaway unary op row (as tests/ir/test_core_op_table.py adds them)."""
    def infer(operands, optional, attrs):
        return [operands[0]] * n_results

    return ops.OpDef(name, (ops.OperandDef("x"),), (ops.AttrDef("alpha", "float", 0.5),), ops.FLOATS, infer,
                     lambda operands, optional, attrs: [operands[0]] * n_results, "x",
                     traits=frozenset({ops.Trait.elementwise, ops.Trait.unary}), lowering=lowering)


ROW_TEXT = """func main(%x: fp16[1, 4, 1, 4]) {
  %y = leaky(%x) : fp16[1, 4, 1, 4]
  return %y
}
"""


def _emit_row(monkeypatch, lowering):
    monkeypatch.setitem(ops.OPS, "leaky", _row("leaky", lowering))
    graph = parse(ROW_TEXT, "t.ir").func("main")
    with pytest.raises(PassError) as e:
        emit_mil(graph, M4)
    return str(e.value)


def test_a_row_without_a_lowering_is_a_pass_error(monkeypatch):
    assert _emit_row(monkeypatch, None) == (
        "t.ir:2:8: error: emit-mil: no MIL translation for op 'leaky'\n"
        "    %y = leaky(%x) : fp16[1, 4, 1, 4]\n"
        "         ^^^^^")


def test_a_row_giving_a_parameter_no_mil_const_type_is_a_pass_error(monkeypatch):
    """A params function must give a float as a MilScalar (its dtype is the const's)."""
    low = ops.Mil("leaky_relu", ops.SimKernel("unary", "LEAKY"), params=lambda o, r, a: {"alpha": 0.5})
    assert _emit_row(monkeypatch, low) == (
        "t.ir:2:8: error: emit-mil: parameter 'alpha' of 'leaky' is 0.5, which has no MIL const type "
        "(give it as a MilScalar)\n"
        "    %y = leaky(%x) : fp16[1, 4, 1, 4]\n"
        "         ^^^^^")


def _layout_row(name, operand, n_results):
    return ops.OpDef(name, (operand,), (), ops.FLOATS, lambda operands, optional, attrs: [operands[0]] * n_results,
                     lambda operands, optional, attrs: [operands[0]] * n_results, "x",
                     traits=frozenset({ops.Trait.elementwise}),
                     lowering=ops.Mil(name, ops.SimKernel("unary", name.upper())))


def test_a_row_with_two_results_is_a_pass_error(monkeypatch):
    """Every MIL op the ANE runs has one result."""
    row = _layout_row("pair", ops.OperandDef("x"), 2)
    monkeypatch.setitem(ops.OPS, row.name, row)
    src = "%a, %b = pair(%x) : fp16[1, 4, 1, 4], fp16[1, 4, 1, 4]\n  %y = add(%a, %b) : fp16[1, 4, 1, 4]"
    text = f"func main(%x: fp16[1, 4, 1, 4]) {{\n  {src}\n  return %y\n}}\n"
    with pytest.raises(PassError) as e:
        emit_mil(parse(text, "t.ir").func("main"), M4)
    assert str(e.value) == (
        "t.ir:2:12: error: emit-mil: 'pair' has several results, which no MIL op the ANE runs has\n"
        f"    {src.splitlines()[0]}\n"
        "             ^^^^")


def test_a_variadic_operand_is_written_as_a_mil_tuple(monkeypatch):
    """A variable number of operands is one MIL tuple argument (concat's values = (a, b))."""
    row = _layout_row("gather", ops.OperandDef("x", variadic=True), 1)
    monkeypatch.setitem(ops.OPS, row.name, row)
    text = "func main(%x: fp16[1, 4, 1, 4]) {\n  %y = gather(%x, %x) : fp16[1, 4, 1, 4]\n  return %y\n}\n"
    mil = emit_mil(parse(text, "t.ir").func("main"), M4).text
    assert "tensor<fp16, [1, 4, 1, 4]> y = gather(x = (x, x))[name = string(\"y\")];" in mil


@pytest.mark.parametrize(
    "line, where",
    [("%0 = gelu(%x) : fp16[1, 4, 1, 8]", ("2:8", "    %0 = gelu(%x) : fp16[1, 4, 1, 8]\n         ^^^^")),
     ("%0 = relu(%x) : fp16[1, 4, 1, 8]", ("2:3", "    %0 = relu(%x) : fp16[1, 4, 1, 8]\n    ^^")),
     ("%0 = reshape(%x, shape=[4, 8]) : fp16[4, 8]", ("3:3", "    return %0\n    ^^^^^^^^^"))],
    ids=["rewritten-op", "as-written", "reshaped-by-legalize"],
)
def test_an_invalid_output_name_points_at_its_source_after_legalize(line, where):
    """Legalize rewrites the op behind an output (gelu) or the output itself (rank 2 -> rank 4)
    under the same name; the emitter's refusal of the name still points at the source: the value,
    else the op that made it, else the return."""
    from anec.compiler import compile_module

    text = f"func main(%x: fp16[1, 4, 1, 8]) {{\n  {line}\n  return %0\n}}\n"
    with pytest.raises(ConstraintError) as e:
        compile_module(parse(text, "t.ir"), {}, target="m4", with_weights=False)
    loc, caret = where
    assert str(e.value) == (
        f"t.ir:{loc}: error: [ANE-IO-ORDER] output name '0' of func 'main' is not a valid MIL identifier\n"
        f"{caret}\n"
        f"{RENAME}v0")
