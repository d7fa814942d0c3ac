"""The test harness itself: the tolerance rule (tests/tolerances.py), its record
(tests/tolerances.json) and the reference-package requirement of tests/conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tolerances
from tolerances import check_close, error_ulps, ulp16, ulp32

HERE = Path(__file__).resolve().parent


def test_ulp_spacing():
    np.testing.assert_array_equal(ulp16([1.0, 1.9, 2.0, 0.0042, 65504.0, 2.0**-14, 1e-6, 0.0]),
                                  [2.0**-10, 2.0**-10, 2.0**-9, 2.0**-18, 32.0, 2.0**-24, 2.0**-24, 2.0**-24])
    np.testing.assert_array_equal(ulp32([1.0, 3.0, 0.0]), [2.0**-23, 2.0**-22, 2.0**-149])
    # the spacing really is the distance to the next fp16 value
    x = np.float16([0.0042, 1.5, 300.0, 6e-5, 3e-7])
    np.testing.assert_array_equal(np.nextafter(x, np.float16(np.inf)).astype(np.float64) - x, ulp16(x))


def test_small_outputs_are_checked_at_their_own_scale():
    """A softmax-like output of max 0.0042: one ulp off passes, zeros and a 10% error fail."""
    rng = np.random.default_rng(0)
    ref = rng.dirichlet(np.ones(1000) * 5, size=4).astype(np.float16)
    assert 1e-3 < ref.max() < 1e-2
    off = (ref.astype(np.float64) + ulp16(ref.max())).astype(np.float16)
    assert check_close(off, ref, 2)[0] <= 2
    for wrong in (np.zeros_like(ref), ref * np.float16(0.9)):
        with pytest.raises(AssertionError, match="fp16 ulps > allowed"):
            check_close(wrong, ref, 4)


def test_large_values_are_relative():
    """Near the scale the unit is 2**-10 |r| (1000: 0.977, two fp16 ulps of 0.5); small
    elements get the floor at the output's scale (ulp16(1000) = 0.5), not their own."""
    ref = np.float32([1000.0, 0.001])
    assert check_close(np.float32([1000.5, 0.001]), ref, 1)[0] <= 1
    with pytest.raises(AssertionError):
        check_close(np.float32([1003.0, 0.001]), ref, 2)
    assert check_close(np.float32([1000.0, 0.2]), ref, 1)[0] < 1
    with pytest.raises(AssertionError):
        check_close(np.float32([1000.0, 1.2]), ref, 2)


def test_non_finite_values_must_match():
    ref = np.float16([np.inf, -np.inf, np.nan, 1.0])
    check_close(ref.copy(), ref, 0)
    for wrong in ([np.inf, np.inf, np.nan, 1.0], [np.inf, -np.inf, 0.0, 1.0],
                  [np.inf, -np.inf, np.nan, np.inf], [65504.0, -np.inf, np.nan, 1.0]):
        with pytest.raises(AssertionError, match="non-finite"):
            check_close(np.float16(wrong), ref, 1e9)


def test_fp32_resolution():
    ref = np.float32([1.0, 3.0])
    check_close(np.nextafter(ref, np.float32(2)), ref, 1, resolution="fp32")
    with pytest.raises(AssertionError, match="fp32 ulps"):
        check_close(ref + np.float32(1e-3), ref, 4, resolution="fp32")
    # at 1.0 the floor is the fp32 spacing at the output's scale, 3.0: 2**-22
    assert error_ulps(ref + np.float32(2.0**-22), ref, "fp32")[0][0] == 1.0


@pytest.fixture
def committed_record():
    if tolerances._recording:
        pytest.skip("tests/tolerances.json is being rewritten by this run")


def test_record_is_consistent(committed_record):
    """Every recorded check allows at least what was observed, in the units it names."""
    checks = json.loads((HERE / "tolerances.json").read_text("utf-8"))["checks"]
    assert len(checks) > 50
    for name, rec in checks.items():
        if "min_cosine" in rec:
            assert rec["worst_cosine"] >= rec["min_cosine"], name
        else:
            allowed = rec.get("ulps", rec.get("fp32_ulps"))
            assert allowed is not None and rec["worst_ulps"] <= allowed, name


def test_a_changed_tolerance_needs_a_new_record(committed_record, monkeypatch):
    """A check whose allowed error differs from the record fails, naming the record command."""
    monkeypatch.setattr(tolerances, "_recording", False)
    monkeypatch.setattr(tolerances, "_observed", {})
    name = "differential/multi_func.ir:classify:out:interp-fp16"
    recorded = tolerances.recorded()[name]["ulps"]
    x = np.float16([0.5, 0.25])
    tolerances.assert_close(x, x, name, recorded)
    monkeypatch.setattr(tolerances, "_observed", {})
    with pytest.raises(AssertionError, match="--record-tolerances"):
        tolerances.assert_close(x, x, name, recorded * 2)
    with pytest.raises(AssertionError, match="not recorded"):
        tolerances.assert_close(x, x, "no/such-check", 1)


# ---- ANEC_REQUIRE_REFS ----------------------------------------------------------------------

SKIPPING_TEST = """
import pytest

ref = pytest.importorskip("no_such_reference_package")


def test_compares_with_the_reference():
    assert ref
"""


def _conftest(packages: dict[str, str]) -> str:
    """tests/conftest.py with another list of reference packages (importing torch and
    transformers in each small run would only make it slow)."""
    text = (HERE / "conftest.py").read_text("utf-8")
    start = text.index("REFERENCE_PACKAGES = {")
    end = text.index("}", start) + 1
    return text[:start] + f"REFERENCE_PACKAGES = {packages!r}" + text[end:]


@pytest.fixture
def harness(pytester):
    """A directory with this conftest (and tolerances.py) and a suite whose reference is missing."""
    pytester.makeconftest(_conftest({"json": "json"}))
    pytester.makepyfile(tolerances=(HERE / "tolerances.py").read_text("utf-8"), test_ref=SKIPPING_TEST)
    return pytester


def test_the_reference_packages_are_the_ones_the_suites_import():
    import conftest

    assert set(conftest.REFERENCE_PACKAGES) >= {"torch", "coremltools", "transformers",
                                                "sentence_transformers", "peft"}


def test_a_missing_reference_skips_locally(harness, monkeypatch):
    monkeypatch.delenv("ANEC_REQUIRE_REFS", raising=False)
    result = harness.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)


def test_a_missing_reference_fails_under_ci(harness, monkeypatch):
    monkeypatch.setenv("ANEC_REQUIRE_REFS", "1")
    result = harness.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*ANEC_REQUIRE_REFS is set*no_such_reference_package*"])
    assert "skipped" not in result.stdout.lines[-1]


NATIVE_SUITE = """
import pytest

pytestmark = pytest.mark.skip(reason="the anec C runtime extension is not built")


def test_runs_the_runtime():
    pass
"""

OTHER_SKIP = """
import pytest


@pytest.mark.skip(reason="needs make and gcc")
def test_builds_with_make():
    pass
"""


def test_a_missing_extension_skips_locally_and_fails_under_ci(harness, monkeypatch):
    """The runtime suites' skip without the C extension counts as a missing reference."""
    harness.makepyfile(test_ref="def test_nothing_missing():\n    pass\n", test_native=NATIVE_SUITE,
                       test_other=OTHER_SKIP)
    monkeypatch.delenv("ANEC_REQUIRE_REFS", raising=False)
    harness.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1, skipped=2)
    monkeypatch.setenv("ANEC_REQUIRE_REFS", "1")
    result = harness.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    assert result.ret != 0
    result.assert_outcomes(passed=1, errors=1, skipped=1)  # (a skip mark fails in setup) another reason stays a skip
    result.stdout.fnmatch_lines(["*ANEC_REQUIRE_REFS is set*C runtime extension is not built*"])


def test_ci_names_a_missing_extension_before_running(harness, monkeypatch):
    harness.makeconftest(_conftest({"json": "json", "anec_no_such_extension": "the C extension (build it)"}))
    monkeypatch.setenv("ANEC_REQUIRE_REFS", "1")
    result = harness.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*missing: the C extension (build it)*"])


def test_the_extension_is_a_reference():
    import conftest

    assert "anec.runtime._native" in conftest.REFERENCE_PACKAGES
    reason = "the anec C runtime extension is not built"  # tests/runtime/conftest.py's skip
    assert any(phrase in reason.lower() for phrase in conftest.MISSING_REFERENCE_SKIPS)
    assert reason in (HERE / "runtime" / "conftest.py").read_text("utf-8")


def test_ci_names_missing_reference_packages_before_running(harness, monkeypatch):
    harness.makeconftest(_conftest({"json": "json", "no_such_ref_pkg": "no-such-ref-pkg"}))
    monkeypatch.setenv("ANEC_REQUIRE_REFS", "1")
    result = harness.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*reference packages are missing: no-such-ref-pkg*"])
    monkeypatch.setenv("ANEC_REQUIRE_REFS", "0")  # "0" is off
    harness.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(skipped=1)
