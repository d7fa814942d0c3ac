"""Shared fixtures of the runtime tests.

Without the C runtime extension every test here is skipped (collected, so a run names
them), and under ``ANEC_REQUIRE_REFS=1`` each of those skips is a failure (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anec.runtime import Runtime, native

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if native.available():
        return
    skip = pytest.mark.skip(reason="the anec C runtime extension is not built")
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(skip)


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
