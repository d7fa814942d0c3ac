"""Round trips: examples and random valid modules survive print → parse exactly,
and the canonical form is a fixed point of printing and of ``anec fmt``."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from anec.ir.parser import parse, parse_file
from anec.ir.printer import format_text, print_graph, print_module
from anec.ir.verifier import check, verify

from .strategies import graphs, modules

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_round_trip(path: Path) -> None:
    m = parse_file(path)
    assert verify(m) == []
    text = print_module(m)
    again = parse(text)
    assert again == m
    assert print_module(again) == text


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_fmt_keeps_comments_and_is_idempotent(path: Path) -> None:
    source = path.read_text("utf-8")
    formatted = format_text(source, path.name)
    assert format_text(formatted) == formatted
    assert parse(formatted) == parse(source)
    comments = [line.split("//", 1)[1].strip() for line in source.splitlines() if "//" in line]
    out_comments = [
        line.split("//", 1)[1].strip() for line in formatted.splitlines() if "//" in line
    ]
    assert out_comments == comments


def test_examples_other_than_comment_spacing_are_canonical() -> None:
    """The shipped examples are written in canonical form (modulo trailing-comment padding)."""
    import re

    for path in EXAMPLES:
        source = path.read_text("utf-8")
        squeeze = re.compile(r"\s+//")
        assert squeeze.sub(" //", format_text(source)) == squeeze.sub(" //", source), path.name


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_random_modules_round_trip(m) -> None:
    assert check(m).errors == []
    text = print_module(m)
    again = parse(text)
    assert again == m
    assert print_module(again) == text
    assert format_text(text) == text
    assert check(again).errors == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs("f"))
def test_print_graph_is_the_func_of_print_module(g) -> None:
    from anec.ir.graph import Module

    m = Module()
    m.add_func(g)
    assert print_graph(g) == print_module(m)
