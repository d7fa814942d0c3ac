"""tests/ mirrors the package, so a module's tests are found by its path: the tests of
``anec/<name>/`` (a package) or ``anec/<name>.py`` (a module) are in ``tests/<name>/``.

The directories that test something other than one part of the package are listed in
:data:`OTHER` with what they test; any other directory under tests/ fails here.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
ANEC = ROOT / "anec"

OTHER = {
    "acceptance": "the user-visible behaviour of the CLI and the pipeline on a corpus of IR files",
    "c": "csrc/: the C runtime, the sim's kernels, MIL and BLOBFILE parsers (C tests and fuzzers)",
    "ane_protocol": "csrc/driver_ane.c and the ane_*.c files against a recording fake of the Objective-C runtime",
    "tools": "tools/ (the mutation report)",
    "benchmarks": "benchmarks/: sections of the benchmark scripts run on tiny shapes",
}
"""Test directories that mirror something other than a part of anec/, with what they test."""


def part_of_anec(name: str) -> bool:
    return (ANEC / name / "__init__.py").is_file() or (ANEC / f"{name}.py").is_file()


def test_every_test_directory_mirrors_a_part_of_anec():
    dirs = [d.name for d in sorted(TESTS.iterdir()) if d.is_dir() and not d.name.startswith((".", "__"))]
    stray = [d for d in dirs if d not in OTHER and not part_of_anec(d)]
    assert not stray, (f"tests/{stray[0]}/ is neither a package or module of anec/ (tests/<name>/ holds the tests "
                       f"of anec/<name>) nor listed in OTHER with what it tests")


def test_the_listed_directories_exist():
    missing = [d for d in OTHER if not (TESTS / d).is_dir()]
    assert not missing, f"OTHER lists tests/{missing[0]}/, which does not exist: drop it"


def test_the_rule_tells_a_package_or_module_from_a_stray_name():
    assert part_of_anec("ir") and part_of_anec("fsutil")  # a package, a module
    assert not part_of_anec("security") and not part_of_anec("ir_core")  # what the tests were grouped by before
