"""`anec fmt` and `anec check`: output, exit codes (0 ok, 1 user error, 2 usage)."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from anec.cli import main

ROOT = Path(__file__).resolve().parents[2]
CANONICAL = "func f(%x: fp16[1, 8]) {\n  %y = relu(%x) : fp16[1, 8]  // keep me\n  return %y\n}\n"
MESSY = "func f(%x: fp16[1,8]) {\n    %y = relu(%x)   // keep me\n  return %y }\n"


def run(*args: str, input: bytes | None = None):
    result = CliRunner().invoke(main, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    path = tmp_path / "m.ir"
    path.write_text(MESSY)
    return path


def test_fmt_prints_canonical_form(messy: Path) -> None:
    r = run("fmt", str(messy))
    assert r.exit_code == 0 and r.stdout == CANONICAL
    assert messy.read_text() == MESSY


def test_fmt_check(messy: Path, tmp_path: Path) -> None:
    r = run("fmt", "--check", str(messy))
    assert r.exit_code == 1
    assert r.stderr == f"{messy}: not in canonical form (run 'anec fmt -i {messy}')\n"
    good = tmp_path / "good.ir"
    good.write_text(CANONICAL)
    r = run("fmt", "--check", str(good))
    assert r.exit_code == 0 and r.output == ""


def test_fmt_in_place_is_atomic_and_keeps_mode(messy: Path) -> None:
    os.chmod(messy, 0o640)
    inode = messy.stat().st_ino
    r = run("fmt", "-i", str(messy))
    assert r.exit_code == 0 and r.output == ""
    assert messy.read_text() == CANONICAL
    assert messy.stat().st_ino != inode  # replaced by rename, not rewritten in place
    assert messy.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in messy.parent.iterdir()) == ["m.ir"]
    assert run("fmt", "--in-place", str(messy)).exit_code == 0
    assert messy.stat().st_ino != inode


def test_fmt_stdin() -> None:
    r = run("fmt", "-", input=MESSY.encode())
    assert r.exit_code == 0 and r.stdout == CANONICAL
    r = run("fmt", "-", input=b"func f( {\n")
    assert r.exit_code == 1 and r.stderr.startswith("<stdin>:1:9: error:")
    r = run("fmt", "-", input=b"\xff")
    assert r.exit_code == 1 and "not valid UTF-8" in r.stderr


def test_fmt_errors_and_usage(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ir"
    bad.write_text("func f(%x: fp16[1]) {\n  %y = relu(%x\n  return %y\n}\n")
    r = run("fmt", str(bad))
    assert r.exit_code == 1
    assert r.stderr.startswith(f"{bad}:2:15: error: expected ')' or ',' before the end of the line\n")
    assert run("fmt", str(tmp_path / "nope.ir")).exit_code == 1
    assert run("fmt", "--check", "-i", str(bad)).exit_code == 2
    assert run("fmt", "-i", "-").exit_code == 2
    assert run("fmt").exit_code == 2


@pytest.mark.parametrize(
    "name, funcs, nodes",
    [
        ("gpt2_mlp.ir", "1 func", "22 nodes"),
        ("multi_func.ir", "2 funcs", "15 nodes"),
    ],
)
def test_check_examples(name: str, funcs: str, nodes: str, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "anec.passes.report", types.ModuleType("anec.passes.report"))
    path = ROOT / "examples" / name
    r = run("check", str(path))
    assert r.exit_code == 0, r.output
    assert r.stdout == f"{path}: ok ({funcs}, {nodes})\n"
    assert r.stderr == ""


def test_check_reports_every_error_and_warnings(tmp_path: Path) -> None:
    path = tmp_path / "m.ir"
    path.write_text(
        "func f(%x: fp16[1, 8]) {\n  %d = tanh(%x)\n  %a = relu(%x) : fp16[1, 9]\n"
        "  %y = gleu(%a) : fp16[1, 9]\n  return %y\n}\n"
    )
    r = run("check", str(path))
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr == (
        f"{path}:3:8: error: declared type fp16[1, 9] of %a does not match the inferred type "
        "fp16[1, 8]\n"
        "    %a = relu(%x) : fp16[1, 9]\n"
        "         ^^^^\n"
        "hint: fix the ': type' (or leave it out and the parser infers it)\n"
        f"{path}:4:8: error: unknown op 'gleu'\n"
        "    %y = gleu(%a) : fp16[1, 9]\n"
        "         ^^^^\n"
        "hint: did you mean 'gelu'?\n"
        f"{path}:2:8: warning: %d is never used (dce removes 'tanh')\n"
        "    %d = tanh(%x)\n"
        "         ^^^^\n"
        f"{path}: 2 errors\n"
    )


def test_check_ok_with_warning(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "anec.passes.report", types.ModuleType("anec.passes.report"))
    path = tmp_path / "m.ir"
    path.write_text("func f(%x: fp16[1, 8]) {\n  %d = tanh(%x)\n  %y = relu(%x)\n  return %y\n}\n")
    r = run("check", str(path))
    assert r.exit_code == 0
    assert r.stdout == f"{path}: ok (1 func, 2 nodes)\n"
    assert "warning: %d is never used" in r.stderr


def test_check_parse_error_and_usage(tmp_path: Path) -> None:
    path = tmp_path / "m.ir"
    path.write_text("func f(%x: fp16[1, 8]) {\n  y = relu(%x)\n  return %y\n}\n")
    r = run("check", str(path))
    assert r.exit_code == 1
    assert r.stderr.startswith(f"{path}:2:3: error: expected a value name like %x, got 'y'\n")
    assert run("check").exit_code == 2
    assert run("check", str(tmp_path / "missing.ir")).exit_code == 1
    r = run("check", "--target", "m9", str(path))
    assert r.exit_code == 1 and "unknown target 'm9'" in r.stderr


@pytest.mark.parametrize("value, col, message", [
    ("1e999", 20, "number 1e999 is beyond the float range (about 1.8e308)"),
    ("70000", 8, "const value 70000 is out of range for fp16 (-65504..65504)"),
])
def test_check_locates_a_literal_beyond_its_range(tmp_path: Path, value: str, col: int, message: str) -> None:
    path = tmp_path / "m.ir"
    path.write_text(f"func f(%x: fp16[2]) {{\n  %c = const(value={value}) : fp16[]\n  %y = add(%x, %c)\n  return %y\n}}\n")
    r = run("check", str(path))
    assert r.exit_code == 1
    lines = r.stderr.splitlines()
    assert lines[0] == f"{path}:2:{col}: error: {message}"
    assert lines[1] == f"    %c = const(value={value}) : fp16[]" and lines[2].strip().startswith("^")
    assert lines[3].startswith("hint: ") and "write inf (or -inf)" in lines[3]
    path.write_text(path.read_text().replace(value, "inf"))
    assert run("check", str(path)).exit_code == 0


def test_check_prints_the_legality_report_when_passes_provide_one(monkeypatch) -> None:
    seen = {}

    def legality_report(module, target_name: str) -> str:
        seen["args"] = (sorted(module.funcs), target_name)
        return "legality: 3 nodes need rewrites\n"

    fake = types.ModuleType("anec.passes.report")
    fake.legality_report = legality_report
    monkeypatch.setitem(sys.modules, "anec.passes.report", fake)
    path = ROOT / "examples" / "gpt2_mlp.ir"
    r = run("check", "--target", "M1", str(path))
    assert r.exit_code == 0
    assert r.stdout == f"{path}: ok (1 func, 22 nodes)\nlegality: 3 nodes need rewrites\n"
    assert seen["args"] == (["mlp"], "m1")
