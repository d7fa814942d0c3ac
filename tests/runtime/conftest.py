"""Shared fixtures of the runtime tests."""

from __future__ import annotations

import pytest

from anec.runtime import Runtime, native

if not native.available():  # pragma: no cover - the extension is built by pip install / _ffi_build.py
    pytest.skip("the anec C runtime extension is not built", allow_module_level=True)


@pytest.fixture(scope="module")
def rt():
    """A sim runtime with a budget large enough for a whole test module."""
    r = Runtime("sim", compile_budget=100000)
    yield r
    r.close()


@pytest.fixture
def fresh_rt(tmp_path):
    """A sim runtime of its own (default budget) with program dirs under tmp_path."""
    r = Runtime("sim", temp_root=tmp_path / "programs")
    yield r
    r.close()
