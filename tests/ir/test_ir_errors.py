"""Golden diagnostics: every ``errors/<name>.ir`` is a small bad program and
``errors/<name>.expected`` the exact rendered error (location, message, caret
line, notes, hint). Regenerate with ``pytest --update-goldens`` and review the
diff."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from anec.diagnostics import AnecError, ParseError, VerifyError
from anec.ir.parser import parse
from anec.ir.verifier import verify

ERRORS = Path(__file__).parent / "errors"
CASES = sorted(p.stem for p in ERRORS.glob("*.ir"))


def first_error(path: Path) -> AnecError:
    """The error `anec check` would report first for this file."""
    try:
        verify(parse(path.read_text("utf-8"), path.name))
    except AnecError as e:
        return e
    raise AssertionError(f"{path.name} is valid but should not be")


def test_enough_distinct_mistakes() -> None:
    assert len(CASES) >= 15
    kinds = {type(first_error(ERRORS / f"{c}.ir")) for c in CASES}
    assert kinds == {ParseError, VerifyError}


@pytest.mark.parametrize("case", CASES)
def test_golden_error(case: str, update_goldens: bool) -> None:
    source = ERRORS / f"{case}.ir"
    expected_path = ERRORS / f"{case}.expected"
    rendered = first_error(source).render() + "\n"
    if update_goldens:
        expected_path.write_text(rendered, "utf-8")
    assert expected_path.exists(), f"missing {expected_path.name}; run pytest --update-goldens"
    assert rendered == expected_path.read_text("utf-8")


@pytest.mark.parametrize("case", CASES)
def test_golden_shape(case: str) -> None:
    """Each golden names file:line:col, shows the line with a caret, and a hint."""
    lines = (ERRORS / f"{case}.expected").read_text("utf-8").splitlines()
    m = re.match(rf"{re.escape(case)}\.ir:(\d+):(\d+): error: \S", lines[0])
    assert m, lines[0]
    line, col = int(m.group(1)), int(m.group(2))
    source_lines = (ERRORS / f"{case}.ir").read_text("utf-8").split("\n")
    assert lines[1] == "  " + source_lines[line - 1]
    assert re.fullmatch(rf" {{{col + 1}}}\^+", lines[2]), lines[2]
    assert any(x.startswith("hint: ") and len(x) > 8 for x in lines[3:])


def test_unknown_op_suggests_gelu() -> None:
    err = first_error(ERRORS / "unknown_op.ir")
    assert err.message == "unknown op 'gleu'"
    assert err.hint == "did you mean 'gelu'?"
    assert err.span.location == "unknown_op.ir:4:8"
