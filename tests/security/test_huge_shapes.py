"""Sizes beyond the device's int32 shapes (ANE-INT32-SHAPE): an IR reshape or transpose with
10^9 positions is a located error with a constraint id and a hint in every command that reads
IR (exit 1), never an internal error (exit 3) from the MIL emitter's int32 conversion."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from anec.cli import main

HUGE = """// 10^9 positions, 4 channels: fine as rank 4, not as [4, 10^9, 1]
func f(%x: fp16[1, 4, 1, 1000000000]) {
  %r = reshape(%x, shape=[4, 1000000000, 1]) : fp16[4, 1000000000, 1]
  %t = transpose(%r, perm=[2, 0, 1]) : fp16[1, 4, 1000000000]
  %u = reshape(%t, shape=[1, 4, 1, 1000000000]) : fp16[1, 4, 1, 1000000000]
  %y = relu(%u)
  return %y
}
"""

EXPECTED = [
    "huge.ir:3:3: error: [ANE-INT32-SHAPE] %r has an invalid type: on the device it is laid out as "
    "[1, 4000000000, 1, 1], whose dimension 4000000000 is larger than 2147483647 (MIL shapes and strides "
    "are int32)",
    "    %r = reshape(%x, shape=[4, 1000000000, 1]) : fp16[4, 1000000000, 1]",
    "    ^^",
    "hint: split the tensor (fewer positions per func, e.g. a smaller sequence bucket), or keep it rank 4 "
    "with each axis below 2^31",
]


@pytest.mark.parametrize("command", [
    ["check"], ["compile", "-o", "OUT"], ["mil"], ["interp", "--random-inputs", "0"],
    ["run", "--random-inputs", "0", "--backend", "sim"],
])
def test_huge_reshapes_are_located_errors_in_every_command(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "huge.ir").write_text(HUGE)
    args = [a if a != "OUT" else str(tmp_path / "out") for a in command]
    res = CliRunner().invoke(main, [args[0], "huge.ir", *args[1:]])
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    start = lines.index(EXPECTED[0])
    assert lines[start:start + 4] == EXPECTED
    assert "internal error" not in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_the_same_tensor_as_rank4_is_accepted(tmp_path):
    """The bound is the device layout: the same 4 * 10^9 elements as rank 4 verify."""
    text = HUGE.replace("[4, 1000000000, 1]", "[1, 4, 1000000000, 1]").replace(
        "perm=[2, 0, 1]) : fp16[1, 4, 1000000000]", "perm=[0, 1, 3, 2]) : fp16[1, 4, 1, 1000000000]")
    text = text.replace("%u = reshape(%t, shape=[1, 4, 1, 1000000000])", "%u = relu(%t)").replace(
        " : fp16[1, 4, 1, 1000000000]\n  %y", "\n  %y", 1)
    (tmp_path / "ok.ir").write_text(text)
    res = CliRunner().invoke(main, ["check", str(tmp_path / "ok.ir")])
    assert res.exit_code == 0, res.output
