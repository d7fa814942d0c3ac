"""Robustness: mutated examples and random text never raise anything but AnecError.

Whatever parses also prints, re-parses to the same module, and formats to a
fixed point. The default run checks a few thousand inputs; for a longer run::

    ANEC_FUZZ_EXAMPLES=100000 pytest -q tests/ir/test_ir_fuzz.py
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.cli import main
from anec.diagnostics import AnecError
from anec.ir.parser import parse
from anec.ir.printer import format_text, print_module
from anec.ir.verifier import check

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TEXTS = [p.read_text("utf-8") for p in sorted((ROOT / "examples").glob("*.ir"))]
N = int(os.environ.get("ANEC_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(
    max_examples=N, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
CLI_FUZZ = settings(
    max_examples=max(50, N // 10),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)

VOCAB = [
    "%",
    "%x",
    "%0",
    "%1a",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    "=",
    ":",
    '"',
    "@",
    "@{",
    "//",
    "/",
    "\n",
    " ",
    "\t",
    "\r\n",
    "func",
    "return",
    "weights",
    "const",
    "add",
    "gelu",
    "gleu",
    "split",
    "concat",
    "cast",
    "fp16",
    "fp32",
    "int32",
    "bool",
    "fp61",
    "1",
    "-1",
    "0",
    "3.5",
    "1e-05",
    "1e999",
    "-inf",
    "inf",
    "nan",
    "true",
    "false",
    "[1, 2]",
    "[[1], [2]]",
    "\\",
    "#",
    ";",
    "é",
    "\x00",
    "\u2028",
    "fp16[]",
    "value=",
    "weight=",
    "axis=",
    "bias=",
    "9" * 5000,
    '"\\u12"',
    '"\\x"',
    '"\\ud800"',
    '"\\ud83d\\ude00"',
    "[" * 40,
    "]" * 40,
]
TOKEN = re.compile(
    r'%[A-Za-z0-9_]+|[A-Za-z_][A-Za-z0-9_]*|"(?:[^"\\\n]|\\.)*"|-?\d[\w.+-]*|//[^\n]*|\s+|.'
)


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(EXAMPLE_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "token", "line"]))
        if kind == "token":
            toks = TOKEN.findall(text)
            i = draw(st.integers(0, len(toks) - 1))
            how = draw(st.sampled_from(["drop", "dup", "swap", "vocab"]))
            if how == "drop":
                del toks[i]
            elif how == "dup":
                toks.insert(i, toks[i])
            elif how == "swap" and i + 2 < len(toks):
                toks[i], toks[i + 2] = toks[i + 2], toks[i]
            else:
                toks[i] = draw(st.sampled_from(VOCAB))
            text = "".join(toks)
            continue
        if kind == "line":
            lines = text.split("\n")
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            lines.insert(j, lines.pop(i) if draw(st.booleans()) else lines[i])
            text = "\n".join(lines)
            continue
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 8)))
        piece = draw(st.sampled_from(VOCAB) | st.text(max_size=3))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + piece + text[i:]
        else:
            text = text[:i] + piece + text[j:]
    return text


def assert_robust(text: str) -> None:
    """parse/verify/print/fmt either work consistently or raise a located AnecError."""
    try:
        module = parse(text, "fuzz.ir")
    except AnecError as e:
        rendered = e.render()
        assert rendered.startswith("fuzz.ir:"), rendered
        assert 0 <= e.span.start <= e.span.end <= len(text)
        return
    report = check(module)
    for problem in report.errors + report.warnings:
        assert problem.render()
    printed = print_module(module)
    assert parse(printed) == module
    formatted = format_text(text)
    assert parse(formatted) == module
    assert format_text(formatted) == formatted


@FUZZ
@given(mutated())
def test_mutated_examples(text: str) -> None:
    assert_robust(text)


@settings(max_examples=max(200, N // 10), deadline=None, database=None)
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    assert_robust(text)


@settings(max_examples=max(100, N // 20), deadline=None, database=None)
@given(st.lists(st.sampled_from(VOCAB), max_size=60).map("".join))
def test_token_soup(text: str) -> None:
    assert_robust(text)


def _run(args: list[str]):
    result = CliRunner().invoke(main, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


FILE_BYTES = st.one_of(
    mutated().map(lambda t: t.encode("utf-8")),
    mutated().map(lambda t: b"\xff" + t.encode("utf-8")),  # not UTF-8
    st.binary(max_size=64),
)


@CLI_FUZZ
@given(FILE_BYTES)
def test_cli_on_mutated_files(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "model.ir"
    path.write_bytes(data)
    for args in (["fmt", str(path)], ["fmt", "--check", str(path)], ["check", str(path)]):
        result = _run(args)
        assert result.exit_code in (0, 1), (args, result.output)
        if result.exit_code == 1 and args[1] != "--check":
            assert "error" in result.output, result.output
