"""``--activations int8 --calibration INPUTS.npz`` on anec compile, mil and check."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from tests.passes.test_quantize_activations import TWO


@pytest.fixture
def files(tmp_path):
    """The model, and calibration inputs where %b has one outlier (it falls back to fp16)."""
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((4, 1, 8, 1, 16)).astype(np.float32)
    x2 = rng.standard_normal((4, 1, 8, 1, 16)).astype(np.float32)
    x2[0, 0, 3, 0, 5] = 1000.0
    np.savez(tmp_path / "calib.npz", x1=x1, x2=x2)
    (tmp_path / "two.ir").write_text(TWO)
    return tmp_path


def _invoke(*args, ok=True):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert (r.exit_code == 0) == ok, r.output
    assert "Traceback" not in r.output
    return r.output


def test_compile_says_what_went_int8_and_what_fell_back(files):
    out = _invoke("compile", files / "two.ir", "--random-weights", "0", "--activations", "int8",
                  "--calibration", files / "calib.npz", "-o", files / "out")
    assert "f: activations int8 1 of 2 tensors, worst output cosine 0.99" in out and "(gate 0.999), 1 kept fp16" in out
    assert "fp16: activation %b (output yb cosine" in out
    mil = (files / "out" / "f" / "model.mil").read_text()
    assert mil.count("= quantize(input = a,") == 1 and "input = b," not in mil


def test_the_gate_is_configurable(files):
    out = _invoke("compile", files / "two.ir", "--random-weights", "0", "--activations", "int8",
                  "--calibration", files / "calib.npz", "--activations-min-cosine", "-1", "-o", files / "out")
    assert "activations int8 2 of 2 tensors" in out and "kept fp16" not in out


def test_check_lists_every_activation(files):
    out = _invoke("check", files / "two.ir", "--random-weights", "0", "--activations", "int8",
                  "--calibration", files / "calib.npz")
    assert "activations:" in out
    assert "f: %a -> ya: int8, scale " in out and "f: %b -> yb: fp16 (output yb cosine" in out
    assert "f: output ya: cosine 0.99" in out


def test_mil_writes_quantize_and_dequantize(files):
    out = _invoke("mil", files / "two.ir", "--random-weights", "0", "--activations", "int8",
                  "--calibration", files / "calib.npz", "--activations-min-cosine", "-1")
    assert out.count("= quantize(") == 2 and out.count("= dequantize(") == 2
    assert 'string a_q_output_dtype = const()[name = string("a_q_output_dtype"), val = string("int8")];' in out


@pytest.mark.parametrize("args,needle", [
    (("--activations", "int8"), "needs calibration inputs"),
    (("--activations", "int8", "--calibration", "CALIB", "--dialect", "ios16"),
     "the ios16 MIL dialect has no quantize/dequantize"),
    (("--calibration", "CALIB"), "calibration inputs were given without --activations"),
    (("--activations", "int4"), "'int4' is not 'int8'"),
])
def test_a_request_that_cannot_run_is_a_clear_error(files, args, needle):
    args = [files / "calib.npz" if a == "CALIB" else a for a in args]
    out = _invoke("compile", files / "two.ir", "--random-weights", "0", *args, "-o", files / "out", ok=False)
    assert needle in out


def test_compress_check_covers_int8_activations_alone(files):
    rng = np.random.default_rng(3)
    np.savez(files / "one.npz", x1=rng.standard_normal((1, 8, 1, 16)).astype(np.float32),
             x2=rng.standard_normal((1, 8, 1, 16)).astype(np.float32))
    out = _invoke("compile", files / "two.ir", "--random-weights", "0", "--activations", "int8",
                  "--calibration", files / "calib.npz", "--compress-check", files / "one.npz", "-o", files / "out")
    assert "compress-check: f:ya cosine 0.99" in out and "compress-check: f:yb cosine 1.000000" in out
