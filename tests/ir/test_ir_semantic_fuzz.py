"""Semantic fuzzing of the IR front end: valid programs, broken on purpose.

hypothesis draws a valid module (``strategies.modules``) and breaks it one to three times
in ways the grammar allows and the semantics do not:

* literals: overflowing (``1e999``, a 400-digit integer), subnormal (``4.9e-324``,
  ``1e-999``, fp16 subnormals), at and past the fp16 and int32 limits, ``-0``;
* attributes of the wrong kind (a list for an int, a string for a bool, ...), unknown
  attributes, missing required ones;
* declared types that disagree with inference (shape, rank, dtype), inputs retyped so
  the ops using them no longer fit;
* operands: one too many or too few, a keyword operand the op does not take;
* names: defined twice, used but never defined, used before their definition, a result
  used by its own statement, returned twice or not at all;
* dims: zero, 2**32, 2**63, forty digits, in input and declared types.

Every input must end in success or in an ``AnecError`` located in the file
(``file:line:col: error: ...``, the source line, a caret under the span), and never in
any other exception, through what ``anec check`` and ``anec mil`` do with it: parse,
verify, print and re-parse, ``fmt``, the ANE legality report, and (for valid programs)
the whole pipeline down to MIL text.

The default run draws 300 inputs; for the long run (10,000 inputs, a few minutes)::

    ANEC_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -q tests/ir/test_ir_semantic_fuzz.py
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from anec.compiler import compile_module
from anec.diagnostics import AnecError, ParseError
from anec.ir.graph import Module, Value
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.ir.printer import format_text, print_module
from anec.ir.types import DType, TensorType
from anec.ir.verifier import check
from anec.passes.report import legality

from passes.ane_strategies import ane_programs  # tests/ is on sys.path (rootdir conftest)

from .strategies import modules

FILE = "broken.ir"
N = int(os.environ.get("ANEC_FUZZ_EXAMPLES", "0")) or 300
FUZZ = settings(max_examples=N, deadline=None, database=None, suppress_health_check=list(HealthCheck))

BIG_INT = "9" * 400
EVIL_NUMBERS = [
    "65504", "65504.00001", "65519.99", "65520", "-65520", "1e-999", "-1e-999", "4.9e-324",
    "2.5e-324", "2.2250738585072014e-308", "5.960464477539063e-08", "2.9802322387695312e-08",
    "6.097555160522461e-05", "-0.0", "-0", "+0", "0e0", "1e38", "3.5e38", BIG_INT, "-" + BIG_INT,
    "2147483648", "-2147483649", "4294967296", "9223372036854775808", "18446744073709551616", "0",
    "-1", "1e999", "-1e999", "1.7976931348623159e308",
]
"""Spellings that overflow, underflow or sit at a type's limit (numbers anywhere: attributes,
const values, annotations, dims). The ones no float64 holds (``1e999``) are syntax errors, so
they come last: hypothesis draws the first entries most, and the breaks are meant to reach
the verifier."""
EVIL_DIMS = ["0", "+1", "16385", "65536", "2147483648", "4294967296", "9223372036854775808", "9" * 40]
HUGE = [2**31, 2**32, 2**63, 10**30]
EVIL_ATTR_VALUES = [
    1, -1, 0, 2.5, -0.0, math.inf, -math.inf, math.nan, 5e-324, 10**400, -(10**400), 2**31, "s", "",
    True, False, [], [1, 2], [1, [2]], [[1], [2]], [1.5], ["a"], DType.fp16, DType.bool, [10**400],
]
"""Attribute and const values of every kind, wrong for most slots."""

INLINE_LIMIT = 1 << 16
"""MIL emission writes a value const inline, element by element: a scalar literal
declared with billions of elements would take that much memory (a known gap of the
emitter), so such programs stop after the legality report."""

NUMBER = re.compile(r"(?<![\w%.])[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])")
DIM_LIST = re.compile(r"\b(?:fp16|fp32|int32|int8|uint8|bool)\[([^\]]*)\]")
VALUE = re.compile(r"%[A-Za-z0-9_]+")


# ---- breaking a module in memory (printed afterwards) ----------------------------------


def _nodes(m: Module) -> list:
    return [n for g in m.funcs.values() for n in g.nodes]


def _values(m: Module) -> list[Value]:
    return [v for g in m.funcs.values() for v in [*g.inputs, *(r for n in g.nodes for r in n.results)]]


def _other_type(draw, t: TensorType) -> TensorType:
    how = draw(st.sampled_from(["dtype", "grow", "shrink", "rank+", "rank-", "huge", "scalar"]))
    shape = list(t.shape)
    if how == "dtype":
        return TensorType(draw(st.sampled_from([d for d in DType if d != t.dtype])), t.shape)
    if how == "grow" and shape:
        i = draw(st.integers(0, len(shape) - 1))
        shape[i] += draw(st.integers(1, 3))
    elif how == "shrink" and shape:
        i = draw(st.integers(0, len(shape) - 1))
        shape[i] = max(1, shape[i] - 1) if shape[i] > 1 else 2
    elif how == "rank+":
        shape.insert(draw(st.integers(0, len(shape))), draw(st.integers(1, 3)))
    elif how == "rank-" and shape:
        shape.pop(draw(st.integers(0, len(shape) - 1)))
    elif how == "huge":
        shape = (shape or [1])[:]
        shape[draw(st.integers(0, len(shape) - 1))] = draw(st.sampled_from(HUGE))
    else:
        shape = []
    return TensorType(t.dtype, tuple(shape))


def break_in_memory(draw, m: Module) -> str:
    """One semantic break of ``m`` (in place); its name, for statistics."""
    nodes, values = _nodes(m), _values(m)
    with_attrs = [n for n in nodes if n.attrs]
    kinds = ["result_type", "arity", "optional"]
    kinds += ["attr_kind", "attr_unknown", "attr_missing"] if with_attrs else []
    kinds += ["input_type"] if any(g.inputs for g in m.funcs.values()) else []
    kinds += ["const_value"] if any(n.op == "const" and "value" in n.attrs for n in nodes) else []
    kind = draw(st.sampled_from(kinds))
    if kind.startswith("attr"):
        node = draw(st.sampled_from(with_attrs))
        key = draw(st.sampled_from(sorted(node.attrs)))
        if kind == "attr_kind":
            node.attrs[key] = draw(st.sampled_from(EVIL_ATTR_VALUES))
        elif kind == "attr_unknown":
            node.attrs[draw(st.sampled_from(["axis", "axes", "bias", "value", "weight", "mode", "zz"]))] = \
                draw(st.sampled_from(EVIL_ATTR_VALUES))
        else:
            del node.attrs[key]
    elif kind == "const_value":
        node = draw(st.sampled_from([n for n in nodes if n.op == "const" and "value" in n.attrs]))
        node.attrs["value"] = draw(st.sampled_from(EVIL_ATTR_VALUES))
    elif kind == "result_type":
        node = draw(st.sampled_from(nodes))
        r = draw(st.sampled_from(node.results))
        r.type = _other_type(draw, r.type)
    elif kind == "input_type":
        v = draw(st.sampled_from([v for g in m.funcs.values() for v in g.inputs]))
        v.type = _other_type(draw, v.type)
    elif kind == "arity":
        node = draw(st.sampled_from(nodes))
        if node.operands and draw(st.booleans()):
            node.operands.pop(draw(st.integers(0, len(node.operands) - 1)))
        else:
            node.operands.append(draw(st.sampled_from(values)))
    else:  # a keyword operand, known to few ops
        node = draw(st.sampled_from(nodes))
        node.optional[draw(st.sampled_from(["bias", "axis", "x", "weight"]))] = draw(st.sampled_from(values))
    return kind


# ---- breaking the printed text ----------------------------------------------------------


def _statement_lines(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if re.match(r"  %\S.* = \w+\(", line)]


def break_text(draw, text: str) -> tuple[str, str]:
    """One textual break of canonical IR text: (new text, its name)."""
    lines = text.split("\n")
    stmts = _statement_lines(lines)
    kinds = ["number", "dim"] + (["use", "define", "return"] if stmts else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "number":  # in attributes, const values and annotations (dims: below)
        in_types = [m.span(1) for m in DIM_LIST.finditer(text)]
        spots = [m.span() for m in NUMBER.finditer(text)
                 if not any(a <= m.start() < b for a, b in in_types)]
        if not spots:
            return text, "number (none)"
        a, b = draw(st.sampled_from(spots))
        return text[:a] + draw(st.sampled_from(EVIL_NUMBERS)) + text[b:], kind
    if kind == "dim":
        spots = [(m.start(1), m.end(1)) for m in DIM_LIST.finditer(text)]
        if not spots:
            return text, "dim (none)"
        a, b = draw(st.sampled_from(spots))
        dims = [d.strip() for d in text[a:b].split(",") if d.strip()]
        if dims and draw(st.booleans()):
            dims[draw(st.integers(0, len(dims) - 1))] = draw(st.sampled_from(EVIL_DIMS))
        else:
            dims.insert(draw(st.integers(0, len(dims))), draw(st.sampled_from(EVIL_DIMS)))
        return text[:a] + ", ".join(dims) + text[b:], kind
    i = draw(st.sampled_from(stmts))
    line = lines[i]
    head, _, call = line.partition(" = ")
    defined = VALUE.findall(head)
    later = [n for j in stmts if j > i for n in VALUE.findall(lines[j].partition(" = ")[0])]
    earlier = [n for j in stmts if j < i for n in VALUE.findall(lines[j].partition(" = ")[0])]
    if kind == "use":
        uses = list(VALUE.finditer(call))
        if not uses:
            return text, "use (none)"
        u = draw(st.sampled_from(uses))
        new = draw(st.sampled_from(["%never_defined", *defined, *later[:3]]))
        lines[i] = head + " = " + call[:u.start()] + new + call[u.end():]
    elif kind == "define":
        if not earlier:
            return text, "define (none)"
        old = draw(st.sampled_from(defined))
        lines[i] = head.replace(old, draw(st.sampled_from(earlier)), 1) + " = " + call
    else:
        r = next(j for j in range(i, len(lines)) if lines[j].startswith("  return"))
        names = VALUE.findall(lines[r])
        choice = draw(st.sampled_from(["nothing", "twice", "input", "undefined"]))
        if choice == "nothing":
            lines[r] = "  return"
        elif choice == "twice" and names:
            lines[r] = f"  return {names[0]}, {names[0]}"
        elif choice == "input":
            head_line = max(j for j in range(r) if lines[j].startswith("func "))
            params = VALUE.findall(lines[head_line])
            lines[r] = f"  return {params[0]}" if params else "  return %nothing"
        else:
            lines[r] = "  return %undefined_name"
        kind = f"return {choice}"
    return "\n".join(lines), kind


def _ane_module(program) -> Module:
    m = Module()
    m.add_func(program[0])
    return m


VALID_MODULES = st.one_of(modules(max_funcs=2), ane_programs().map(_ane_module))
"""Any valid module (odd names, every op and dtype), or one in the ANE layout that
compiles as it is (so breaks also reach legalize and MIL emission)."""


@st.composite
def broken_programs(draw) -> str:
    """The text of a valid module after one to three semantic breaks."""
    m = draw(VALID_MODULES)
    kinds = []
    for _ in range(draw(st.integers(0, 2))):
        kinds.append(break_in_memory(draw, m))
    text = print_module(m)
    if not kinds or draw(st.booleans()):
        text, kind = break_text(draw, text)
        kinds.append(kind)
    for kind in kinds:
        event(f"break: {kind.split(' ')[0]}")
    return text


# ---- what a user's tools do with the text ------------------------------------------------


def assert_located(e: AnecError, text: str) -> None:
    """``e`` renders as ``broken.ir:L:C: error: ...`` with the source line and a caret under it."""
    rendered = e.render()
    assert e.span is not None, f"unlocated {type(e).__name__}: {rendered}"
    lines = rendered.split("\n")
    line, col = e.span.source.line_col(e.span.start)
    assert lines[0].startswith(f"{FILE}:{line}:{col}: {e.kind}: "), rendered
    src = text.split("\n")[line - 1].rstrip("\r") if line <= text.count("\n") + 1 else ""
    assert lines[1] == "  " + src, rendered
    assert lines[2].strip().startswith("^") and len(lines[2]) - len(lines[2].lstrip()) == col + 1, rendered


def exercise(text: str) -> str:
    """Run the front end on ``text`` as ``anec check`` / ``anec mil`` would; the stage it ends in.

    Raises AssertionError for an unlocated AnecError; any other exception propagates.
    """
    try:
        module = parse(text, FILE)
    except AnecError as e:  # syntax, or names (the parser resolves them)
        assert_located(e, text)
        return "syntax error" if isinstance(e, ParseError) else "name error"
    report = check(module)
    for problem in report.errors + report.warnings:
        assert_located(problem, text)
    assert parse(print_module(module), FILE) == module
    assert parse(format_text(text, FILE), FILE) == module
    if report.errors:
        return "verify error"
    legality(module, "m4")  # the report `anec check` prints
    if any(n.op == "const" and "value" in n.attrs and n.result.type.numel > INLINE_LIMIT
           for g in module.funcs.values() for n in g.nodes):
        return "valid, not emitted"
    try:
        compile_module(module, with_weights=False)  # `anec mil`: passes and MIL, no weights
    except AnecError as e:
        assert_located(e, text)
        return "compile error"
    return "valid"


@FUZZ
@given(broken_programs())
def test_broken_programs_end_in_located_errors(text: str) -> None:
    event(exercise(text))


def test_breaks_reach_the_verifier_and_beyond() -> None:
    """Most broken inputs parse: the breaks are semantic, checked past the syntax stage."""
    stages: Counter = Counter()

    @settings(max_examples=100, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(broken_programs())
    def collect(text: str) -> None:
        stages[exercise(text)] += 1

    collect()
    total = sum(stages.values())
    assert stages["syntax error"] <= 0.1 * total, stages
    assert stages["verify error"] + stages["name error"] >= 0.5 * total, stages
    assert stages["valid"] + stages["compile error"] >= 0.15 * total, stages
    assert stages["valid, not emitted"] <= 0.02 * total, stages


# ---- named cases: each would have been a traceback ----------------------------------------


def _func(body: str, params: str = "%x: fp16[2, 4]") -> str:
    return f"func f({params}) {{\n{body}\n}}\n"


def test_overflowing_float_literal_is_a_located_error() -> None:
    """``const(value=1e999)`` (no float64 holds it) and ``70000`` in fp16 (rounds to inf) are
    located errors, never an OverflowError and never a silent inf; ``inf`` written out is an
    fp16 infinity the parser, the verifier, the interpreter and MIL emission all take."""
    for body, stage, message in (
            ("  %c = const(value=1e999) : fp16[]", "syntax error", "number 1e999 is beyond the float range"),
            ("  %c = const(value=-1e999) : fp32[]", "syntax error", "number -1e999 is beyond the float range"),
            ("  %c = const(value=70000) : fp16[]", "verify error", "const value 70000 is out of range for fp16")):
        text = _func(body + "\n  %y = add(%x, %c)\n  return %y")
        assert exercise(text) == stage
        try:
            errors = check(parse(text, FILE)).errors
        except ParseError as e:
            errors = [e]
        assert errors[0].message.startswith(message) and errors[0].span.line == 2
    text = _func("  %c = const(value=inf) : fp16[]\n  %m = const(value=-inf) : fp32[2, 4]\n"
                 "  %y = add(%x, %c)\n  %z = cast(%x, dtype=fp32)\n  %w = mul(%z, %m)\n  return %y, %w")
    module = parse(text, FILE)
    consts = [n.attrs["value"] for n in module.func().nodes if n.op == "const"]
    assert consts == [math.inf, -math.inf]
    assert check(module).errors == []
    out = interpret(module.func(), {"x": np.ones((2, 4), np.float16)}, None, "fp16")
    assert np.all(out["y"] == np.inf) and np.all(out["w"] == -np.inf)
    assert exercise(text) == "valid"


@pytest.mark.parametrize("literal", ["1e-999", "4.9e-324", "5.960464477539063e-08", "2e-8", "-0.0"])
def test_subnormal_and_vanishing_literals(literal: str) -> None:
    """Literals below the fp16 (or float64) resolution round to zero or to an fp16 subnormal."""
    text = _func(f"  %c = const(value={literal}) : fp16[]\n  %y = mul(%x, %c)\n  return %y")
    assert exercise(text) == "valid"
    out = interpret(parse(text, FILE).func(), {"x": np.ones((2, 4), np.float16)}, None, "fp16")["y"]
    np.testing.assert_array_equal(out, np.full((2, 4), np.float16(float(literal))))


@pytest.mark.parametrize("body, message", [
    (f"  %c = const(value={BIG_INT}) : fp16[]\n  %y = add(%x, %c)\n  return %y",
     "const value 999999999999... (400 digits) is beyond the float range"),
    (f"  %c = const(value=[-{BIG_INT}, 1, 2, 3]) : fp32[4]\n  %z = cast(%x, dtype=fp32)\n  %y = add(%z, %c)\n  return %y",
     "const value -999999999999... (400 digits) is beyond the float range"),
    (f"  %y = pad(%x, before=[0, 0], after=[0, 1], value={BIG_INT})\n  return %y",
     "attribute 'value' of pad is 999999999999... (400 digits), beyond the float range"),
    (f"  %y = pad(%x, before=[0, {BIG_INT}], after=[0, 1])\n  return %y",
     "%y has an invalid type: a dimension is larger than 2147483647 (MIL shapes are int32)"),
    ("  %y = pad(%x, before=[0, 4294967296], after=[0, 4294967296])\n  return %y",
     "%y has an invalid type: a dimension is larger than 2147483647"),
    ("  %c = const(value=1) : fp16[4294967296, 4294967296]\n  %y = add(%c, %c)\n  return %y",
     "%c has an invalid type: a dimension is larger than 2147483647"),
])
def test_huge_integers_and_dims(body: str, message: str) -> None:
    """Integers beyond float64 where a float is expected, and dims beyond MIL's int32: a
    located error (these were OverflowErrors in the verifier, the `anec check` report and
    MIL emission)."""
    text = _func(body)
    stage = exercise(text)
    assert stage in ("name error", "verify error"), stage
    errors = _errors(text)
    assert any(message in e.message for e in errors), [e.message for e in errors]


@pytest.mark.parametrize("params", ["%x: fp16[4294967296, 4294967296, 65536]", f"%x: fp16[{'9' * 40}]"])
def test_huge_input_dims(params: str) -> None:
    text = _func("  %y = relu(%x)\n  return %y", params)
    assert exercise(text) == "verify error"
    assert "%x has an invalid type: a dimension is larger than 2147483647" in _errors(text)[0].message


def test_largest_dims_still_work() -> None:
    """Dims up to 2**31 - 1 are valid and reach the legality report (nothing is allocated)."""
    text = _func("  %y = relu(%x)\n  return %y", "%x: fp16[2147483647, 65536]")
    assert exercise(text) == "valid"


def _errors(text: str) -> list[AnecError]:
    try:
        return check(parse(text, FILE)).errors
    except AnecError as e:
        return [e]
