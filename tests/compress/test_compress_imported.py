"""Compression after ``anec.import_torch``: ``ImportedModel.runner(compress=...)`` compiles the
imported program with compressed weights, and the model still computes what torch does.

The tolerance is looser than an fp16 program's: int8 per-channel weights carry a relative
error of up to 1/254 of each channel's range, which an output sums over its inputs. Here an
MLP's outputs stay within 16 fp16 ulps (relative near the output's scale, absolute at its
fp16 resolution below) and at cosine > 0.9999 of torch's (fp16 alone: a few ulps)."""

from __future__ import annotations

import numpy as np
import pytest

from tolerances import assert_close

torch = pytest.importorskip("torch")

INT8_ULPS = 16


@pytest.fixture(scope="module")
def imported():
    import anec

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()
    x = torch.randn(1, 32, 64)
    return anec.import_torch(m, (x,)), m, x


def _rt_available():
    from anec.runtime import native

    if not native.available():
        pytest.skip("the anec C runtime extension is not built")


def test_an_imported_model_runs_with_int8_weights(imported):
    _rt_available()
    im, m, x = imported
    with torch.no_grad():
        want = m(x).numpy()
    with im.runner(backend="sim", compress="int8") as run:
        got = run(x.numpy())[0]
        reports = run.artifact.manifest.document["compression"]
        mil = run.artifact.mil_text
    assert {r["format"] for r in reports} == {"int8"} and len(reports) == 2  # both Linear weights
    assert mil.count("= constexpr_affine_dequantize(") == 2
    a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.9999
    assert_close(got, want, "compress/torch-int8", INT8_ULPS, "mlp int8")


def test_lut1_is_far_from_torch(imported):
    """The comparison can fail: 1-bit tables (gate lifted) move the outputs far off."""
    _rt_available()
    from anec.compress import Gate

    im, m, x = imported
    with torch.no_grad():
        want = m(x).numpy()
    with im.runner(backend="sim", compress="lut1>fp16", compress_gate=Gate(10, 10)) as run:
        got = run(x.numpy())[0]
    with pytest.raises(AssertionError):
        assert_close(got, want, "compress/torch-int8", INT8_ULPS, "mlp lut1")


def test_compress_needs_a_compiled_backend(imported, tmp_path):
    from anec.diagnostics import AnecError

    im, _, _ = imported
    with pytest.raises(AnecError, match="compress= applies when the runner compiles the program"):
        im.runner(backend="interp", compress="int8")
    with pytest.raises(AnecError, match="compress= applies when the runner compiles the program"):
        im.runner(backend="sim", artifact=tmp_path, compress="int8")
