"""``python -m anec.selftest`` on the sim: it must pass, and each check must be able to fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from anec import selftest
from anec.runtime import Program, native

pytestmark = pytest.mark.skipif(not native.available(), reason="the C runtime extension is not built")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report() -> dict:
    return selftest.run_selftest(backend="auto", target="m4", seed=0)


def _check(report: dict, cid: str) -> dict:
    return next(c for c in report["checks"] if c["id"] == cid)


def test_selftest_passes_on_the_sim(report: dict) -> None:
    assert report["driver"] == "sim"
    assert [c["id"] for c in report["checks"]] == [
        "legalized", "unlegalized", "binding", "min-surface", "delta-reload", "shared"]
    failed = [(c["id"], c["lines"]) for c in report["checks"] if not c["passed"]]
    assert not failed
    assert report["passed"] is True


def test_selftest_numbers(report: dict) -> None:
    leg = _check(report, "legalized")["data"]
    # every ANE-rejected op of the program was rewritten by legalize
    assert {"expand_gelu_tanh", "rsqrt_to_pow", "split_conv_bias", "split_concat_into_partial_convs",
            "lower_reduce_mean"} <= set(leg["rules"])
    assert leg["max_abs_err"] < 0.01 < leg["tolerance"]
    un = _check(report, "unlegalized")["data"]["results"]
    assert all(un[op]["rejected"] and un[op]["code"] == 5 for op in ("concat", "gelu", "rsqrt"))
    assert "ANE" in un["concat"]["message"] or "concat" in un["concat"]["message"]
    assert un["relu"] == {"rejected": False, "ran": True}
    b = _check(report, "binding")["data"]
    assert b["inputs"] == ["alpha", "zeta"] and b["outputs"] == ["ahalf", "zdiff"]
    ms = _check(report, "min-surface")["data"]
    assert ms["tensor_bytes"] == 64 and ms["padded_alloc_bytes"] >= 49152
    assert ms["exact_size"]["failed"] is True and "0x1d" in ms["exact_size"]["message"]
    dr = _check(report, "delta-reload")["data"]
    assert dr["reload_compiles"] == 0 and dr["vs_fresh"] == 0.0 and dr["change"] > 0.5
    sh = _check(report, "shared")["data"]
    assert sh["compiles"] == 1 and sh["cache_hits"] == 1 and sh["same_mil"]


def test_render_is_a_pasteable_report(report: dict) -> None:
    text = selftest.render(report)
    lines = text.splitlines()
    assert lines[0] == "anec selftest 0.1.0: driver sim (backend auto), target m4, seed 0"
    assert "PASS  binding       inputs and outputs bind in alphabetical order of MIL names" in lines
    assert lines[-1] == "6/6 checks passed"


def test_binding_check_fails_when_buffers_are_bound_in_declaration_order(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Program.evaluate_raw

    def declaration_order(self, inputs, outputs):  # what a device binding by position would do
        real(self, inputs[::-1], outputs)

    monkeypatch.setattr(Program, "evaluate_raw", declaration_order)
    c = selftest.Check("binding", "")
    selftest.check_binding(selftest._Env("sim", "m4", 0), c)
    assert not c.passed
    assert c.data["max_abs_err"]["device level:zdiff"] > 1.0


def test_delta_reload_check_fails_when_weights_stay_baked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Program, "reload_weights", lambda self, weights: None)
    c = selftest.Check("delta-reload", "")
    selftest.check_delta_reload(selftest._Env("sim", "m4", 0), c)
    assert not c.passed and c.data["change"] == 0.0


def test_unlegalized_check_fails_when_an_op_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    real = selftest.raw_mil
    # a device that accepts gelu: its program compiles like the control
    monkeypatch.setattr(selftest, "raw_mil", lambda op, d: real("relu" if op == "gelu" else op, d))
    c = selftest.Check("unlegalized", "")
    selftest.check_unlegalized(selftest._Env("sim", "m4", 0), c)
    assert not c.passed
    assert any(line.startswith("gelu: ACCEPTED") for line in c.lines)


def test_min_surface_check_fails_when_small_surfaces_give_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    def garbage(self, inputs, outputs):
        for o in outputs:
            o[...] = 7.0

    monkeypatch.setattr(Program, "evaluate_raw", garbage)
    c = selftest.Check("min-surface", "")
    selftest.check_min_surface(selftest._Env("sim", "m4", 0), c)
    assert not c.passed
    assert "WRONG" in c.lines[1]


def test_a_crashing_check_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(env, c):
        raise ValueError("boom")

    monkeypatch.setattr(selftest, "CHECKS", [("x", "crashes", boom), selftest.CHECKS[3]])
    rep = selftest.run_selftest("sim", "m4", 0)
    assert [c["passed"] for c in rep["checks"]] == [False, True]
    assert rep["checks"][0]["lines"] == ["crashed: ValueError: boom"]
    assert rep["passed"] is False


@pytest.mark.parametrize("target", ["m1", "m2", "m3", "m5"])
def test_selftest_passes_for_every_target_profile(target: str) -> None:
    rep = selftest.run_selftest(backend="sim", target=target, seed=1)
    assert rep["target"] == target
    assert [c["id"] for c in rep["checks"] if not c["passed"]] == []
    un = _check(rep, "unlegalized")["data"]
    assert un["dialect"] == ("ios16" if target in ("m1", "m2") else "ios18")


def test_raw_mil_dialects() -> None:
    old, new = selftest.raw_mil("concat", "ios16"), selftest.raw_mil("concat", "ios18")
    assert old.startswith("program(1.0)") and "func main<ios16>" in old
    assert 'tensor<int32, []> c_axis = const()[name = tensor<string, []>("c_axis"), val = tensor<int32, []>(1)];' in old
    assert new.startswith("program(1.3)") and "func main<ios18>" in new
    assert 'int32 c_axis = const()[name = string("c_axis"), val = int32(1)];' in new


def test_cli_json_and_exit_status() -> None:
    r = CliRunner().invoke(selftest.main, ["--json", "--backend", "sim", "--seed", "3"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["passed"] and rep["seed"] == 3 and rep["driver"] == "sim"
    assert all(isinstance(c["data"]["seconds"], float) for c in rep["checks"])


def test_cli_ane_on_linux_is_a_clear_error() -> None:
    r = CliRunner().invoke(selftest.main, ["--backend", "ane"])
    assert r.exit_code == 2
    assert "AppleNeuralEngine.framework not found" in r.output


def test_python_dash_m() -> None:
    r = subprocess.run([sys.executable, "-m", "anec.selftest", "--backend", "sim"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("6/6 checks passed")
    assert np.all([line.startswith("PASS") for line in r.stdout.splitlines() if line[:4] in ("PASS", "FAIL")])
