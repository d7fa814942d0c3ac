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
@pytest.mark.constraint("ANE-INT32-SHAPE")
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


def _pt2_with_sequence(path, seq: int) -> None:
    """A saved torch.export program (Linear, then [1, S, 16] -> [4, S, 4]) exported at S = 8,
    whose metadata is then edited to say S = ``seq`` (sizes and strides; the weights are
    unchanged), as a hostile or mistaken .pt2 file can."""
    import zipfile

    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            h = self.lin(x).reshape(1, -1, 4, 4).transpose(1, 2)
            return h.reshape(4, -1, 4)

    small = path.with_name("small.pt2")
    torch.export.save(torch.export.export(M().eval(), (torch.randn(1, 8, 16),)), str(small))
    with zipfile.ZipFile(small) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("models/model.json"):
                text = data.decode()
                for old, new in ((8, seq), (128, 16 * seq), (32, 4 * seq)):  # S, and strides S*16, S*4
                    text = text.replace(f'{{"as_int": {old}}}', f'{{"as_int": {new}}}')
                data = text.encode()
            zout.writestr(info, data)


def test_a_pt2_whose_metadata_says_sequence_1e9_is_refused_at_import(tmp_path):
    """The importer verifies the IR it builds: the same check refuses the program at import
    (it used to import with exit 0, then fail to compile as 'legalize left the func invalid')."""
    pt2 = tmp_path / "huge.pt2"
    _pt2_with_sequence(pt2, 10**9)
    res = CliRunner().invoke(main, ["import", str(pt2), "-o", str(tmp_path / "out")])
    assert res.exit_code == 1, res.output
    assert res.output.startswith(
        "error: [ANE-INT32-SHAPE] %x_t has an invalid type: on the device it is laid out as "
        "[1, 16000000000, 1, 1], whose dimension 16000000000 is larger than 2147483647"), res.output
    assert "\nhint: split the tensor" in res.output
    assert not (tmp_path / "out").exists()
    _pt2_with_sequence(tmp_path / "ok.pt2", 1000)  # the same program at S = 1000 imports
    res = CliRunner().invoke(main, ["import", str(tmp_path / "ok.pt2"), "-o", str(tmp_path / "ok")])
    assert res.exit_code == 0, res.output
