"""Chip profiles and the constraint catalog: complete, sourced, honest, tested."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from anec.constraints import CONSTRAINTS, HANDLINGS, get_constraint
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
        assert c.evidence in ("verified", "reported"), c.id
        assert c.handling in HANDLINGS and c.stage in ("compile", "runtime"), c.id
        assert c.title and c.symptom and c.source and c.detail and c.handled_by
        if c.switch is not None:
            assert hasattr(get_target("m4"), c.switch)
            assert c.evidence == "reported"  # only reported claims are switchable
    assert get_constraint("ane-concat").id == "ANE-CONCAT"
    with pytest.raises(AnecError) as info:
        get_constraint("ANE-CONCATT")
    assert "ANE-CONCAT" in info.value.hint


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
