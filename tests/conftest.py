"""Project-wide pytest configuration.

Options registered here (pytest only reads options from the root conftest):
  --update-goldens   rewrite golden files (tests/*/golden/) instead of comparing
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite golden files instead of comparing against them",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    """True when the run was started with --update-goldens."""
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _fresh_sim_process_budget():
    """Each test starts like a new process: the device (and the sim) allow ~119
    compiles per process, and the suite as a whole compiles far more."""
    from anec.runtime import native

    if native.available():
        native.reset_process_budget("sim")
    yield
