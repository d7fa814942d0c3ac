"""``--compress-check INPUTS.npz``: the compressed program against the uncompressed one on
calibration inputs, on the sim, per output; the compile fails under the cosine asked for."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from anec.compiler import compile_module
from anec.compress import Gate
from anec.diagnostics import AnecError
from anec.ir.interp import random_inputs
from anec.ir.weight_binding import resolve_weights


@pytest.fixture
def calib(small):
    return random_inputs(small.funcs["f"], 3)


def test_each_output_is_compared_with_the_uncompressed_program(rt, small, calib, tmp_path):
    store = resolve_weights(small, None, 0)
    res = compile_module(small, store, compress="int8", compress_check=calib, out_dir=tmp_path / "o")
    rows = {r["output"]: r for r in res.compress_check}
    assert set(rows) == {"z", "m"} and all(r["func"] == "f" for r in rows.values())
    assert all(r["cosine"] > 0.9999 and 0 < r["max_rel"] < 0.02 for r in rows.values())
    prog = rt.load(str(tmp_path / "o" / "f"))  # the checked artifact is written whole
    try:
        assert set(prog(**calib)) == {"z", "m"}
    finally:
        prog.close()


def test_an_output_under_the_cosine_fails_the_compile_and_writes_nothing(rt, small, calib, tmp_path):
    store = resolve_weights(small, None, 0)
    with pytest.raises(AnecError, match=r"below cosine 0\.999 .*f:z cosine 0\.\d+.*f:m cosine"):
        compile_module(small, store, compress="lut1>fp16", compress_gate=Gate(10, 10), compress_check=calib,
                       out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()
    res = compile_module(small, store, compress="lut1>fp16", compress_gate=Gate(10, 10), compress_check=calib,
                         compress_min_cosine=0.0)  # the user's threshold decides
    assert min(r["cosine"] for r in res.compress_check) < 0.999


def test_bad_calibration_inputs_are_clear_errors(small, calib, tmp_path):
    store = resolve_weights(small, None, 0)
    with pytest.raises(AnecError, match=r"calibration inputs have no a for func 'f'"):
        compile_module(small, store, compress="int8", compress_check={"x": calib["x"]})
    with pytest.raises(AnecError, match="compress_check needs compress"):
        compile_module(small, store, compress_check=calib)


def test_the_cli_reports_per_output(rt, small, calib, tmp_path):
    from anec.cli import main
    from tests.compress.conftest import SMALL_IR

    ir = tmp_path / "small.ir"
    ir.write_text(SMALL_IR)
    np.savez(tmp_path / "in.npz", **calib)
    r = CliRunner().invoke(main, ["compile", str(ir), "--random-weights", "0", "--compress", "int8",
                                  "--compress-check", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "compress-check: f:z cosine 0.99" in r.output and "compress-check: f:m cosine" in r.output
    r = CliRunner().invoke(main, ["compile", str(ir), "--random-weights", "0", "--compress", "lut1>fp16",
                                  "--compress-gate", "10,10", "--compress-check", str(tmp_path / "in.npz"),
                                  "-o", str(tmp_path / "o2")])
    assert r.exit_code != 0 and "below cosine 0.999" in r.output and "Traceback" not in r.output
