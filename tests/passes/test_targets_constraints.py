"""Chip profiles and the constraint catalog: complete, sourced, honest, tested."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from anec.constraints import (CONSTRAINTS, DEMONSTRATED, DOCUMENTED, HANDLINGS, HYPOTHESIS, KINDS, PATHS,
                              REPORTED, STATUSES, Evidence, Scope, derive_status, get_constraint)
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


def test_compile_time_entries_are_triggered_by_named_tests():
    """Every check the passes enforce names a test in tests/passes; every named test exists."""
    for c in CONSTRAINTS.values():
        if c.handling == "n/a":
            assert not c.tested_by
            continue
        assert c.tested_by, c.id
        if c.stage == "compile" and c.handling in ("rewrite", "rewrite or error", "error",
                                                    "analysis"):
            assert any(ref.startswith("tests/passes/") for ref in c.tested_by), c.id
        for ref in c.tested_by:
            path, _, name = ref.partition("::")
            assert name, (c.id, ref)
            assert name in _test_names(ROOT / path), (c.id, ref)
