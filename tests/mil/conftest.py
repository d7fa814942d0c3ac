"""Fixtures of the MIL tests.

Goldens (``tests/mil/golden/<example>__<func>.mil``) are rewritten with
``pytest --update-goldens``; the option and the ``update_goldens`` fixture are
registered by the root conftest (pytest reads options only there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anec.targets import get_target

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


@pytest.fixture
def m4():
    return get_target("m4")
