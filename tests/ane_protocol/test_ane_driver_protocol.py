"""The ane driver's call protocol and its macOS build, checked on Linux.

The C program tests/ane_protocol/test_ane_protocol.c drives ``anec_driver_ane``
against a recording fake of the Objective-C runtime, CoreFoundation and
IOSurface (fake_apple.c); ``make -f mk/ane.mk ane-protocol-test`` builds it with
``-Wall -Wextra -Werror`` under ASan/UBSan and runs it. ``ane-macos-syntax``
type-checks and compiles the driver for arm64-apple-macos14 with clang, and
the runtime's SHA-256, which is CommonCrypto's there.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "ane_protocol"


def _make(target: str, build: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-j2", "--no-print-directory", "-f", "mk/ane.mk", target, f"ANE_BUILD={build}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                    reason="gcc and make are needed to build the protocol tests")
def test_ane_protocol_suite_passes(tmp_path: Path) -> None:
    r = _make("ane-protocol-test", tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # both C programs ran every test they declare, and all passed
    declared = [
        len(re.findall(r"^\s*\{\"[^\"]+\", test_\w+(, [01])?\},$", (HERE / name).read_text(), re.M))
        for name in ("test_ane_protocol.c", "test_ane_core.c")
    ]
    # the driver alone runs on the four devices of the loads that read files (baked or
    # optimistic; hexId of MIL + paths or of the weight values too); the core on all
    # eight: every reading of what a load reads (fake_apple.h) x both hexId kinds
    runs = [4 * declared[0], 8 * declared[1]]
    plans = [int(n) for n in re.findall(r"^1\.\.(\d+)$", r.stdout, re.M)]
    assert plans == runs and declared[0] >= 15 and declared[1] >= 16, out
    assert len(re.findall(r"^ok \d+ - ", r.stdout, re.M)) == sum(runs), out
    assert "not ok" not in r.stdout
    for mode in ("baked, hexId of MIL+paths", "baked, hexId of values", "optimistic, hexId of MIL+paths",
                 "optimistic, hexId of values"):
        assert r.stdout.count(f"[{mode}]") == declared[0], out
    for reading in ("baked (load reads data)", "optimistic (load re-reads weights/)", "in-memory (per object)",
                    "in-memory, cached per hexId"):
        for hexid in ("MIL+paths", "values"):
            assert r.stdout.count(f"[{reading}, hexId of {hexid}]") == declared[1], out
    for n in runs:
        assert f"# {n} tests, 0 failed" in r.stdout, out


@pytest.mark.skipif(shutil.which("clang") is None or shutil.which("make") is None,
                    reason="clang is needed for the arm64-apple-macos syntax check")
def test_ane_driver_builds_for_macos(tmp_path: Path) -> None:
    r = _make("ane-macos-syntax", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("driver_ane", "ane_symbols", "ane_foundation", "ane_hexdirs", "ane_surfaces", "rt_sha256"):
        obj = tmp_path / f"{name}.macos.o"
        assert obj.read_bytes()[:4] == bytes.fromhex("cffaedfe"), name  # Mach-O 64-bit
    if shutil.which("llvm-nm"):
        # the driver links no Apple symbol; the runtime's SHA-256 is CommonCrypto's there
        assert "only libc/libdl/libpthread symbols are linked" in r.stdout, r.stdout
        assert "rt_sha256.macos.o: SHA-256 from CommonCrypto" in r.stdout, r.stdout
