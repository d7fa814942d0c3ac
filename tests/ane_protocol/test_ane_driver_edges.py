"""Edges of the ane driver's protocol, checked on Linux against the fake of the Apple side.

tests/ane_protocol/test_ane_driver_edges.c drives ``anec_driver_ane`` where the main
protocol program does not: a weight without bytes and a patch path outside the program
are refused before the framework or the disk sees them; the request follows the order
the surfaces are bound in; one surface bound twice is handed over once; the options the
core passes to every driver are accepted. It is built here like mk/ane.mk builds the
protocol programs (-Wall -Wextra -Werror, ASan + UBSan) and run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "ane_protocol"
# the driver (its entry points and the files they use), the fake, the shared runner, the tests
DRIVER = [ROOT / "csrc" / "driver_ane.c", *sorted((ROOT / "csrc").glob("ane_*.c"))]
SOURCES = [*DRIVER, HERE / "fake_apple.c", HERE / "tap_runner.c", HERE / "test_ane_driver_edges.c"]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the protocol tests")
def test_ane_driver_edges_pass(tmp_path: Path) -> None:
    exe = tmp_path / "test_ane_driver_edges"
    build = subprocess.run(
        ["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-DANEC_ANE_TESTING",
         f"-I{ROOT / 'csrc'}", f"-I{HERE}", "-o", str(exe), *map(str, SOURCES), "-ldl", "-lpthread"],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1", TMPDIR=str(tmp_path))
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    declared = len(re.findall(r'^\s*\{"[^"]+", test_\w+, 0\},$', SOURCES[-1].read_text(), re.M))
    assert declared >= 5
    # every test declared ran, and passed
    assert re.findall(r"^1\.\.(\d+)$", r.stdout, re.M) == [str(declared)], out
    assert len(re.findall(r"^ok \d+ - ", r.stdout, re.M)) == declared, out
    assert "not ok" not in r.stdout and f"# {declared} tests, 0 failed" in r.stdout, out
