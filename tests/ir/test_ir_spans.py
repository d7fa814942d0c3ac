"""Every parsed node and value points at its own text (for diagnostics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anec.ir.parser import parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))


def at(text: str, span) -> str:
    return text[span.start : span.end]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_spans(path: Path) -> None:
    text = path.read_text("utf-8")
    m = parse(text, path.name)
    lines = text.split("\n")
    for ws in m.weight_sources:
        assert at(text, ws.span) == f'"{ws.path}"'
    for g in m.funcs.values():
        assert at(text, g.span) == g.name
        assert lines[g.span.line - 1].startswith(f"func {g.name}(")
        for v in g.inputs:
            assert at(text, v.span) == f"%{v.name}"
            assert v.span.line == g.span.line
        for n in g.nodes:
            assert n.span.source is m.source
            assert at(text, n.span) == n.op
            line = lines[n.span.line - 1]
            assert line[n.span.col - 1 :].startswith(n.op + "(")
            for r in n.results:
                assert at(text, r.span) == f"%{r.name}"
                assert r.span.line == n.span.line and r.span.col < n.span.col
        ret = at(text, g.return_span)
        assert ret == "return " + ", ".join(f"%{v.name}" for v in g.outputs)


def test_spans_locate_lines_and_columns() -> None:
    text = (
        "// c\nfunc f(%x: fp16[2]) {\n  %a = relu(%x)\n"
        "  %b, %c = split(%a, axis=0, sizes=[1, 1])\n  return %b\n}\n"
    )
    g = parse(text, "t.ir").func()
    relu, split = g.nodes
    assert relu.span.location == "t.ir:3:8"
    assert split.span.location == "t.ir:4:12"
    assert [r.span.location for r in split.results] == ["t.ir:4:3", "t.ir:4:7"]
    assert g.inputs[0].span.location == "t.ir:2:8"
    assert g.span.location == "t.ir:2:6"
    assert g.return_span.location == "t.ir:5:3"
    assert relu.span.caret_lines() == "    %a = relu(%x)\n         ^^^^"


def test_inferred_statement_still_has_spans() -> None:
    text = "func f(%x: fp16[1, 4]) {\n  %y = softmax(%x)\n  return %y\n}\n"
    g = parse(text).func()
    assert g.nodes[0].span.location == "<string>:2:8"
    assert g.nodes[0].results[0].span.location == "<string>:2:3"
