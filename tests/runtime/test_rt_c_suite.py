"""The C unit tests (tests/c/, built by mk/c.mk) run as part of the Python suite."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(not (shutil.which("make") and shutil.which("gcc")), reason="needs make and gcc")
def test_c_unit_tests(tmp_path):
    proc = subprocess.run(["make", "-s", "-j2", "-f", "mk/c.mk", "c-test", f"C_BUILD={tmp_path}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for name in ("test_mil", "test_blob", "test_kernels", "test_rt"):
        assert f"{name}: " in proc.stdout and f"{name}: 0 checks" not in proc.stdout
    assert " 0 failures" in proc.stdout and "failures\n" in proc.stdout
