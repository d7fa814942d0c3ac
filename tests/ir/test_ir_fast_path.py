"""The fast path (anec/ir/scanner.py) against Lark, the grammar's own parser.

For every text, the two must agree exactly: the same syntax form (every
token and every position), the same Module (printed text and every span),
the same layout for ``anec fmt``, and for a rejected text the same error
(kind, message, span, hint, notes). Inputs: the examples, the acceptance and
error-case files, the GPT-2 and Llama frontends' programs (as printed, and with
the types left to inference), hypothesis-drawn valid modules and ANE programs,
and the mutated, broken and token-soup texts of the fuzzers.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.diagnostics import AnecError, Source
from anec.ir import parser
from anec.ir.graph import Module
from anec.ir.lark_fallback import lark_syntax
from anec.ir.lexical import MAX_LIST_DEPTH
from anec.ir.parser import parse, parse_with_layout
from anec.ir.printer import format_text, print_module
from anec.ir.scanner import scan

from passes.ane_strategies import ane_programs  # tests/ is on sys.path (rootdir conftest)

from .strategies import modules
from .test_ir_fuzz import VOCAB, mutated
from .test_ir_semantic_fuzz import broken_programs

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    [*(ROOT / "examples").glob("*.ir"), *(ROOT / "tests/acceptance/ir").glob("*.ir"),
     *(ROOT / "tests/ir/errors").glob("*.ir")]
)
SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def _lark_only(fn, *args):
    """Run ``fn`` with the fast path switched off (every text goes through Lark)."""
    saved = parser.scan
    parser.scan = lambda text: None
    try:
        return fn(*args)
    finally:
        parser.scan = saved


def _spans(m: Module) -> list:
    out: list = [("weights", w.path, w.span.start, w.span.end) for w in m.weight_sources]
    for g in m.funcs.values():
        out.append(("func", g.name, g.span.start, g.span.end,
                    g.return_span.start, g.return_span.end))
        out += [("input", v.name, v.span.start, v.span.end) for v in g.inputs]
        for n in g.nodes:
            out.append(("node", n.op, n.span.start, n.span.end))
            out += [("result", v.name, v.span.start, v.span.end) for v in n.results]
    return out


def _outcome(text: str):
    """What parsing ``text`` gives: the printed module, every span and the formatted
    text, or the error's kind, message, span, hint and notes."""
    try:
        module = parse(text, "t.ir")
        _, layout = parse_with_layout(text, "t.ir")
    except AnecError as e:
        return (type(e).__name__, e.message, e.span.start, e.span.end, e.hint, e.notes)
    try:
        formatted = format_text(text)
    except AnecError as e:  # e.g. a module that parses but cannot be printed
        formatted = (type(e).__name__, e.message)
    return (print_module(module), _spans(module), formatted,
            sorted(len(v) for v in layout.leading.values()), len(layout.blank_before))


def assert_same(text: str) -> None:
    scanned = scan(text)
    if scanned is not None:  # accepted: Lark accepts it too, with the same syntax form
        assert lark_syntax(Source("t.ir", text)) == scanned
    assert _outcome(text) == _lark_only(_outcome, text)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_files(path: Path) -> None:
    assert_same(path.read_text("utf-8"))


def test_the_fast_path_accepts_the_valid_files() -> None:
    valid = [p for p in FILES if "errors" not in p.parts]
    assert valid and all(scan(p.read_text("utf-8")) is not None for p in valid)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  \n// only a comment\n",
        'weights "a.safetensors"',
        'weights"a"func f(%x:fp16){%y=relu(%x):fp16[]@{}return%y}',
        "func f() { return }",
        "func func(%x: fp16) { %y = func(%x) return %y }",
        "func f(%x: fp16) { %a, %b = split(%x, axis=0, sizes=[1, 1]) return %a, %b }",
        "func f(%x: fp16[2]) { %y = add(%x, %x) : fp16[2], fp16[2] return %y }",
        "func f(%x: fp16[2]) { %y = relu(%x) @{a=1, b=[[1, -inf], \"s\"], c=[]} return %y }",
        "func f(%x: fp16[2]) { %y = relu(%x) @{a=1, a=2} return %y }",
        "func f(%x: fp16[2]) { %y = relu(%x, a=%x, %x) return %y }",
        "func f(%x: fp16[2]) { %y = relu(%x, a=1, a=2) return %y }",
        "func f(%x: fp16[2]) { %y = relu(%x) return %y }\nfunc f() { return }",
        # a statement's names fail; a later statement's arguments fail first
        "func f(%x: fp16) { %y = relu(%z) %w = relu(%x, a=1, a=2) return %y }",
        "func f(%x: fp16) { %y = relu(%z) %w = relu(%x) : fp61 return %y }",
        "func f(%x: fp16) { %y = relu(%z) %z = relu(%x) return %y }",
        "func f(%x: fp16) { %y = relu(%y) return %y }",
        "func f(%x: fp16) { %y = relu(%x) return %z }",
        "func f(%x: fp16) { %y = relu(%x) %y = relu(%x) %w = relu(%x, %x, k=\"\\q\") return %y }",
        "func f(%x: fp16[+2, 01]) { return %x }",
        "func f(%x: fp16[2.5]) { return %x }",
        "func f(%x: fp16[0]) { return %x }",
        # Lark's contextual lexer splits a keyword off a word: the fast path declines
        "funcf(%x: fp16) { return %x }",
        "func f(%x: fp16) { returnx }",
        "func f(%x: fp16) { %y = relu(%x) : fp16[2] return %y }",
        "func f(%x: fp16) { %y = cast(%x, dtype=true) return %y }",
        "func f(%x: fp16) { %y = relu(%x",
        "func f(%x: fp16) { %y = relu(%x) \u00a0 return %y }",
        'weights "\\ud800"',
        'weights "\\q"',
        "func f(%x: fp16) { %y = relu(%x, a=" + "[" * 40 + "]" * 40 + ") return %y }",
        "func f(%x: fp16) { %y = relu(%x, a=" + "[" * MAX_LIST_DEPTH + "1"
        + "]" * MAX_LIST_DEPTH + ") return %y }",
        "func f(%x: fp16) { %y = relu(%x, a=" + "[" * (MAX_LIST_DEPTH + 1)
        + "]" * (MAX_LIST_DEPTH + 1) + ") return %y }",
        "func f(%x: fp16) { %y = relu(%x, a=9" + "9" * 5000 + ") return %y }",
        # literals beyond the float range (located at the number) or their dtype's (at the op)
        "func f() { %c = const(value=1e999) : fp16[] return %c }",
        "func f() { %c = const(value=[1, -1e999]) : fp32[2] return %c }",
        "func f(%x: fp16[2]) { %y = pad(%x, before=[1], after=[0], value=1e400) return %y }",
        "func f() { %c = const(value=70000) : fp16[] return %c }",
        "func f() { %c = const(value=[inf, -inf, 65519]) : fp16[3] return %c }",
        "func f(%x: fp16[2]) { %y = pad(%x, before=[1], after=[0], value=-65520) return %y }",
    ],
)
def test_edge_cases(text: str) -> None:
    assert_same(text)


@SETTINGS
@given(modules())
def test_valid_modules(m: Module) -> None:
    text = print_module(m)
    assert scan(text) is not None
    assert_same(text)


@SETTINGS
@given(ane_programs())
def test_ane_programs(program) -> None:
    m = Module()
    m.add_func(program[0])
    text = print_module(m)
    assert scan(text) is not None
    assert_same(text)


@SETTINGS
@given(mutated())
def test_mutated_examples(text: str) -> None:
    assert_same(text)


@SETTINGS
@given(broken_programs())
def test_broken_programs(text: str) -> None:
    assert_same(text)


@SETTINGS
@given(st.lists(st.sampled_from(VOCAB), max_size=60).map("".join))
def test_token_soup(text: str) -> None:
    assert_same(text)


REDUCTIONS = """func f(%x: fp16[1, 4, 1, 2], %y: fp32[1, 8, 1, 2]) {
  %a = reduce_mean(%x, axes=[1], keep_dims=true)
  %b = reduce_mean(%y, axes=[1], keep_dims=true)
  %c = reduce_mean(%x, axes=[1], keep_dims=true)
  %d = reduce_mean(%x, axes=[1], keep_dims=false)
  return %a, %b, %c, %d
}
"""


def test_statements_alike_infer_alike() -> None:
    """Inferred types are reused only for the same op, operand types and attributes."""
    g = parse(REDUCTIONS).func()
    assert [str(n.result.type) for n in g.nodes] == [
        "fp16[1, 1, 1, 2]", "fp32[1, 1, 1, 2]", "fp16[1, 1, 1, 2]", "fp16[1, 1, 2]"
    ]


@pytest.mark.parametrize("literal", ["1", "1.0", '"true"', "[true]"])
def test_an_attribute_equal_to_an_accepted_one_is_still_checked(literal: str) -> None:
    text = REDUCTIONS.replace("%c = reduce_mean(%x, axes=[1], keep_dims=true)",
                              f"%c = reduce_mean(%x, axes=[1], keep_dims={literal})")
    with pytest.raises(AnecError) as e:
        parse(text)
    assert "keep_dims" in e.value.message and e.value.span.line == 4


LLAMA_2L = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8,
            "num_key_value_heads": 4, "num_hidden_layers": 2, "intermediate_size": 688,
            "vocab_size": 1000, "max_position_embeddings": 256}


@pytest.mark.parametrize("config", ["gpt2", "llama"])
def test_model_frontend_programs(tmp_path: Path, config: str) -> None:
    """The decoder frontends' programs (prefill, decode, per-layer, lm_head), printed."""
    from anec.ir.builder import Builder
    from anec.models.generate import decoder_frontend
    from tests.mil.emitted_bytes import GPT2_2L
    from tests.models.synthetic import shape_checkpoint

    keys = ["transformer.wte.weight"] if config == "gpt2" else ["model.embed_tokens.weight"]
    fe = decoder_frontend(shape_checkpoint(tmp_path, GPT2_2L if config == "gpt2" else LLAMA_2L,
                                           keys))
    w = fe.width
    graphs = [fe.prefill(w), fe.decode(w, 2 * w), fe.attn(0, w), fe.mlp(1, w), fe.lm_head(w)]
    text = print_module(Builder.module(*graphs))
    assert scan(text) is not None
    assert_same(text)
    # without the written types every statement's types are inferred (and reused)
    untyped = "\n".join(
        line if "= const(" in line else re.sub(r"\) : [^@\n]*", ") ", line)
        for line in text.splitlines()
    )
    assert untyped.count(" : ") < text.count(" : ") / 4
    assert_same(untyped)
    assert parse(untyped) == parse(text)
