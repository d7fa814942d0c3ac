"""Chip profiles and the constraint catalog: complete, sourced, honest, tested."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anec.constraints import (CONSTRAINTS, DEMONSTRATED, DOCUMENTED, HANDLINGS, HYPOTHESIS, KINDS, PATHS,
                              REPORTED, STATUSES, Evidence, Scope, derive_status, get_constraint, marked_tests)
from anec.constraints.markers import MarkerError
from anec.diagnostics import AnecError
from anec.targets import DEFAULT_TARGET, TARGETS, Target, get_target

ROOT = Path(__file__).resolve().parents[2]


def test_profiles_and_every_value_has_a_source():
    assert list(TARGETS) == ["m1", "m2", "m3", "m4", "m5"] and DEFAULT_TARGET == "m4"
    fields = [f.name for f in dataclasses.fields(Target) if f.name not in ("name", "sources")]
    for t in TARGETS.values():
        assert set(t.sources) == set(fields), t.name
        assert all(len(s) > 20 for s in t.sources.values())


def test_profile_values_follow_the_reports():
    m1, m4, m5 = get_target("m1"), get_target("m4"), get_target("m5")
    assert m4.sram_bytes == 32 * 1024 * 1024 and m4.max_blob_tensors == 16
    assert m4.scalar_penalty == 1 and m4.min_surface_bytes == 49152
    assert m4.max_conv_out_channels == 16384 and m4.fp32_io and m4.mil_dialect == "ios18"
    assert not m1.fp32_io and m1.one_file_per_weight
    # ios18 everywhere: M1 Pro/Max ran program(1.3) kernels; ios16 is a fallback (--dialect)
    assert all(t.mil_dialect == "ios18" for t in TARGETS.values())
    assert "M1 Pro" in m1.sources["mil_dialect"] and "--dialect ios16" in m1.sources["mil_dialect"]
    assert m5.surface_alignment == 128 and m4.surface_alignment == 64
    assert not any(t.softmax_pow2_only for t in TARGETS.values())
    assert all(t.reduce_mean_as_sum for t in TARGETS.values())
    assert m4.blob_cap(False) == 16 and m4.blob_cap(True) == 15
    # honesty: a value extrapolated from another chip says so
    assert m1.sources["sram_bytes"].startswith("anec assumption")
    assert "reported" in m5.sources["surface_alignment"]


def test_unknown_target_suggests_a_name():
    assert get_target(None).name == "m4" and get_target("M1").name == "m1"
    with pytest.raises(AnecError) as info:
        get_target("m44")
    assert info.value.hint == "did you mean 'm4'?"


def test_catalog_has_every_id_of_the_architecture_doc():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## Constraint ids"):doc.index("## MIL text")]
    ids = re.findall(r"`(ANE-[A-Z0-9-]+)`", section)
    assert sorted(ids) == sorted(CONSTRAINTS)


def test_entries_are_well_formed():
    for c in CONSTRAINTS.values():
        assert c.status in STATUSES, c.id
        assert c.handling in HANDLINGS and c.stage in ("compile", "runtime"), c.id
        assert c.title and c.symptom and c.evidence and c.detail and c.handled_by
        for r in c.evidence:
            assert isinstance(r, Evidence), c.id
            assert r.kind in KINDS and r.source and r.shows, (c.id, r)
            assert isinstance(r.scope, Scope) and r.scope.chip and r.scope.os, (c.id, r)
            assert r.scope.path in PATHS or r.scope.path.startswith("not stated"), (c.id, r.scope)
        if c.switch is not None:
            assert hasattr(get_target("m4"), c.switch)
            assert c.status != "verified", c.id  # only claims that are not settled are switchable
    assert get_constraint("ane-concat").id == "ANE-CONCAT"
    with pytest.raises(AnecError) as info:
        get_constraint("ANE-CONCATT")
    assert "ANE-CONCAT" in info.value.hint


def _rec(kind: str, supports: bool = True) -> Evidence:
    return Evidence("src", "shows", kind, Scope("in-memory", "M4", "macOS 15"), supports)


@pytest.mark.parametrize("records, status", [
    ([_rec(DEMONSTRATED)], "verified"),
    ([_rec(DOCUMENTED), _rec(REPORTED)], "verified"),
    ([_rec(REPORTED), _rec(HYPOTHESIS)], "reported"),
    ([_rec(HYPOTHESIS)], "hypothesis"),
    ([_rec(REPORTED), _rec(DEMONSTRATED, supports=False)], "contested"),
    ([_rec(DEMONSTRATED), _rec(REPORTED, supports=False)], "contested"),
    ([_rec(DEMONSTRATED), _rec(HYPOTHESIS, supports=False)], "verified"),  # a hypothesis decides nothing
])
def test_the_status_derives_from_the_records(records, status):
    assert derive_status(records) == status


def test_records_that_settle_nothing_are_refused():
    with pytest.raises(ValueError):
        derive_status([])
    with pytest.raises(ValueError):
        derive_status([_rec(DEMONSTRATED, supports=False)])


def test_the_device_behaviours_anec_relies_on_carry_what_their_sources_show():
    """The runtime behaviours: evidence per path, chip and OS, never more than the source shows."""
    status = {cid: CONSTRAINTS[cid].status for cid in CONSTRAINTS}
    assert status["ANE-CONCAT"] == "contested"
    concat = CONSTRAINTS["ANE-CONCAT"].evidence
    assert any(not r.supports and r.kind == DEMONSTRATED and "M5" in r.scope.chip for r in concat)
    assert any(r.supports and "Orion" in r.source and r.scope.path == "in-memory" for r in concat)
    assert status["ANE-DATA-IS-BLOBFILE"] == "verified" and status["ANE-NEW-OBJECT-LOAD"] == "verified"
    assert status["ANE-SAME-OBJECT-PATCH"] == "hypothesis"
    assert status["ANE-LOAD-REREADS-WEIGHTS"] == "contested"
    assert status["ANE-SURFACE-LOCK"] == "verified"
    reload = CONSTRAINTS["ANE-BAKED-WEIGHTS"].evidence[0]
    assert reload.scope == Scope("in-memory", "M5", "macOS 26.3")
    assert "kept in memory" in reload.shows or "in memory" in reload.shows
    delta = CONSTRAINTS["ANE-NEW-OBJECT-LOAD"].evidence[0]
    assert "test_delta_compile" in delta.source and "NEW" in delta.shows


def test_switches_per_target():
    fp32 = CONSTRAINTS["ANE-FP32-IO"]
    assert fp32.applies_to(get_target("m1")) and not fp32.applies_to(get_target("m4"))
    assert not CONSTRAINTS["ANE-SOFTMAX-POW2"].applies_to(get_target("m4"))
    assert CONSTRAINTS["ANE-REDUCE-MEAN"].applies_to(get_target("m4"))
    assert CONSTRAINTS["ANE-SURFACE-ALIGN"].applies_to(get_target("m5"))
    dialect = CONSTRAINTS["ANE-MIL-DIALECT"]
    assert dialect.on_target(get_target("m1")) == "off (mil_dialect=ios18)"
    assert dialect.on_target(get_target("m1").replace(mil_dialect="ios16")) == "on (mil_dialect=ios16)"


def _test_names(path: Path) -> set[str]:
    """Test functions defined in a Python test file or a C test file."""
    pattern = r"^static void (test_\w+)\(" if path.suffix == ".c" else r"^def (test_\w+)\("
    return set(re.findall(pattern, path.read_text(), re.M))


def test_every_entry_is_triggered_by_marked_tests():
    """Every entry anec handles has tests marked with its id, and every check the passes
    enforce one in tests/passes; an entry anec cannot meet has none; every marker names an
    entry of the catalog and a test that exists."""
    marked = marked_tests(ROOT)
    assert sorted(set(marked) - set(CONSTRAINTS)) == []
    for c in CONSTRAINTS.values():
        refs = marked.get(c.id, ())
        if c.handling == "n/a":
            assert not refs, c.id
            continue
        assert refs, c.id
        if c.stage == "compile" and c.handling in ("rewrite", "rewrite or error", "error",
                                                    "analysis"):
            assert any(ref.startswith("tests/passes/") for ref in refs), c.id
        for ref in refs:
            path, _, name = ref.partition("::")
            assert name in _test_names(ROOT / path), (c.id, ref)


MARKED_PY = """\
import pytest
from pytest import mark


@pytest.mark.constraint("ANE-GELU", "ANE-NEG")
@pytest.mark.parametrize("x", [1, 2])
def test_one(x):
    pass


@pytest.mark.parametrize("x", [1])
@mark.constraint("ANE-GELU")
def test_two(x):
    pass


def test_unmarked():
    pass
"""


def test_the_marker_reader_finds_python_and_c_markers(tmp_path: Path) -> None:
    (tmp_path / "tests" / "c").mkdir(parents=True)
    (tmp_path / "tests" / "test_a.py").write_text(MARKED_PY)
    (tmp_path / "tests" / "c" / "test_b.c").write_text(
        "/* a comment */\n/* constraint: ANE-NEG ANE-SPLIT */\nstatic void test_c(void)\n{\n}\n")
    assert marked_tests(tmp_path) == {
        "ANE-GELU": ("tests/test_a.py::test_one", "tests/test_a.py::test_two"),
        "ANE-NEG": ("tests/c/test_b.c::test_c", "tests/test_a.py::test_one"),
        "ANE-SPLIT": ("tests/c/test_b.c::test_c",),
    }
    assert marked_tests(tmp_path / "no-checkout") == {}  # anec installed without its tests


@pytest.mark.parametrize("name, text, line", [
    ("test_m.py", "import pytest\npytestmark = pytest.mark.constraint('ANE-GELU')\n", 2),
    ("test_m.py", "import pytest\nIDS = ('ANE-GELU',)\n\n\n@pytest.mark.constraint(*IDS)\ndef test_x():\n"
                  "    pass\n", 5),
    ("test_m.py", "import pytest\n\n\n@pytest.mark.constraint\ndef test_x():\n    pass\n", 4),
    ("test_m.py", "import pytest\n\n\nclass TestX:\n    @pytest.mark.constraint('ANE-GELU')\n"
                  "    def test_x(self):\n        pass\n", 5),
    ("test_m.py", "import pytest\n\n\n@pytest.mark.constraint('ANE-GELU')\ndef helper():\n    pass\n", 4),
    ("test_m.c", "/* constraint: ANE-GELU */\n\nstatic void test_x(void) {}\n", 1),
    ("test_m.c", "/* constraint: ANE-GELU */\nstatic int helper(void) { return 0; }\n", 1),
])
def test_a_marker_the_reader_cannot_read_is_an_error(tmp_path: Path, name: str, text: str, line: int) -> None:
    """A marker that pytest might apply but the reader would not see (or one on no test) is an
    error naming its file and line, never a test silently left out of the listing."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / name).write_text(text)
    with pytest.raises(MarkerError, match=f"^tests/{name}:{line}: "):
        marked_tests(tmp_path)


def test_the_reader_agrees_with_pytest_on_marked_files() -> None:
    """pytest's own collection selects by the constraint marker the tests the reader lists."""
    files = ["tests/passes/test_dce.py", "tests/passes/test_legalize_concat.py", "tests/mil/test_mil_emitter.py"]
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", "constraint", *files], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert res.returncode == 0, res.stdout + res.stderr
    collected = {line.split("[")[0] for line in res.stdout.splitlines() if "::" in line}
    listed = {ref for refs in marked_tests(ROOT).values() for ref in refs if ref.split("::")[0] in files}
    assert collected == listed and len(listed) >= 3
