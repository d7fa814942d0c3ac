"""``anec doctor`` on Linux (CliRunner), and its rendering of a macOS report."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest
from click.testing import CliRunner

from anec import __version__, doctor
from anec.cli import main
from anec.runtime import native
from anec.targets import DEFAULT_TARGET, get_target

needs_native = pytest.mark.skipif(not native.available(), reason="the C runtime extension is not built")


def _row(key: str, value: object) -> str:
    return f"  {key:<22} {value}"


@needs_native
def test_doctor_on_linux_reports_drivers_budget_and_target() -> None:
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    out = r.output.splitlines()
    assert _row("os", f"Linux {platform.release()} ({platform.machine()})") in out
    assert _row("python", f"{platform.python_version()} ({__import__('sys').executable})") in out
    assert any(line.startswith(_row("anec", __version__)) for line in out)
    assert _row("numpy", np.__version__) in out
    assert _row("driver sim", "available: the sim runs everywhere") in out
    assert _row("driver ane", "unavailable: AppleNeuralEngine.framework not found: this driver "
                              "needs macOS on Apple silicon") in out
    assert _row("auto picks", "sim") in out
    assert _row("compile budget", "119 of 119 compiles left in a fresh runtime") in out
    assert _row("reloads verified", "data-patch, new-object, inputs") in out  # the sim's own device model
    assert _row("framework", f"{doctor.ANE_FRAMEWORK_DIR}: not found") in out
    t = get_target(DEFAULT_TARGET)
    assert _row("default", t.name) in out
    assert _row("min_surface_bytes", t.min_surface_bytes) in out
    assert _row("max_blob_tensors", t.max_blob_tensors) in out
    assert _row("mil_dialect", t.mil_dialect) in out


@needs_native
def test_doctor_json() -> None:
    r = CliRunner().invoke(main, ["doctor", "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["platform"]["os"] == "Linux"
    assert info["versions"]["anec"] == __version__
    assert info["runtime"]["drivers"]["ane"]["available"] is False
    assert info["runtime"]["drivers"]["sim"]["available"] is True
    assert info["runtime"]["fresh_runtime"] == {"driver": "sim", "compile_budget": 119, "compile_budget_left": 119,
                                                "reload_verified": ["data-patch", "new-object", "recompile", "inputs"]}
    assert info["framework"]["directory_exists"] is False
    assert info["target"]["limits"]["surface_alignment"] == get_target(DEFAULT_TARGET).surface_alignment


def test_doctor_without_the_extension_says_how_to_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "lib", None)
    monkeypatch.setattr(native, "_IMPORT_ERROR", ImportError("No module named 'anec.runtime._native'"))
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    assert "NOT BUILT (No module named 'anec.runtime._native')" in r.output
    assert "pip install ." in r.output and "xcode-select --install" in r.output
    assert "driver ane" not in r.output


def test_doctor_reports_a_failing_probe_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(chip):
        raise ImportError("anec.targets is broken")

    monkeypatch.setattr(doctor, "_target", broken)
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    assert _row("error", "ImportError: anec.targets is broken") in r.output.splitlines()


@pytest.mark.parametrize("chip, target", [
    ("Apple M1", "m1"), ("Apple M2 Pro", "m2"), ("Apple M3 Max", "m3"), ("Apple M4 Max", "m4"),
    ("Apple M5", "m5"), ("Apple M9 Ultra", None), ("Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz", None),
    (None, None),
])
def test_target_for_chip(chip: str | None, target: str | None) -> None:
    assert doctor.target_for_chip(chip) == target


def test_render_of_a_macos_report() -> None:
    info = {
        "platform": {"os": "Darwin", "release": "24.1.0", "machine": "arm64", "macos": "15.1",
                     "chip": "Apple M2 Pro", "rosetta": False},
        "versions": {"python": "3.12.4", "python_executable": "/opt/py/bin/python3", "anec": "0.1.0",
                     "anec_location": "/Users/u/anec/anec", "numpy": "2.1.0", "cffi": "1.17.1"},
        "framework": {"path": doctor.ANE_FRAMEWORK_DIR, "directory_exists": True, "binary_file_exists": False},
        "runtime": {"extension": True,
                    "drivers": {"sim": {"available": True, "why": "the sim runs everywhere"},
                                "ane": {"available": True, "why": ""}},
                    "fresh_runtime": {"driver": "ane", "compile_budget": 119, "compile_budget_left": 119}},
        "target": {"default": "m4", "limits": {"min_surface_bytes": 49152}, "suggested_for_chip": "m2"},
    }
    out = doctor.render(info).splitlines()
    assert _row("macOS", "15.1") in out
    assert _row("chip", "Apple M2 Pro") in out
    assert _row("driver ane", "available") in out
    assert _row("auto picks", "ane") in out
    assert _row("framework", f"{doctor.ANE_FRAMEWORK_DIR}: present (binary in the dyld shared cache)") in out
    assert _row("this chip", "m2 (pass --target m2)") in out
    # no verdict cached yet on this Mac: the doctor says what to run
    assert _row("reloads verified", "none (run `python -m anec.selftest`: until it verifies data patches or "
                                    "new objects, reloads recompile)") in out
    info["runtime"]["fresh_runtime"]["reload_verified"] = ["data-patch", "recompile", "inputs"]
    assert _row("reloads verified", "data-patch, inputs") in doctor.render(info).splitlines()
    info["runtime"]["fresh_runtime"]["reload_verified"] = ["new-object", "recompile", "inputs"]
    assert _row("reloads verified", "new-object, inputs") in doctor.render(info).splitlines()
    info["platform"]["rosetta"] = True
    assert any("Rosetta" in line for line in doctor.render(info).splitlines())
