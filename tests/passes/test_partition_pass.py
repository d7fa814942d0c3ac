"""The partition pass: the plan it stores, what it records, and where it sits in the pipelines."""

from __future__ import annotations

import pytest

from anec.diagnostics import ConstraintError
from anec.passes import Legalize, Partition, PassContext
from anec.passes.pipelines import DEFAULT, OPTIMIZE
from anec.targets import get_target

from .passes_util import parse_func, run
from .test_pass_docstrings import examples


def _doc_example():
    before, _ = examples(Partition)[0]
    return parse_func(before.split("\n", 1)[1], "f.ir")  # the "// target:" line is not IR


def test_the_docstring_plan_is_the_plan_the_pass_stores():
    g = _doc_example()
    run(Partition(), g, PassContext.default("m4"))
    assert g.facts.partition is None  # 2 BLOBFILE tensors fit one m4 program
    g = _doc_example()
    ctx = PassContext(target=get_target("m4").replace(max_blob_tensors=1))
    run(Partition(), g, ctx)
    lines = g.facts.partition.describe()
    doc = " ".join(Partition.documentation().split())
    assert lines[0] in doc
    for stage in (lines[1], lines[3]):
        assert stage.strip().split("; peak SRAM")[0] in doc
    assert lines[2].split("BLOBFILE budget: ")[1] in doc
    assert [(r["rule"], r["constraint"], r["func"]) for r in ctx.rewrites] == [("partition", "ANE-BLOB-BUDGET", "f")]


def test_partition_runs_right_after_legalize_and_before_emit_mil():
    names = [p.name for p in DEFAULT]
    assert names.index("partition") == names.index("legalize") + 1 == names.index("emit-mil") - 1
    assert [p.name for p in OPTIMIZE][-2:] == ["legalize", "partition"]


def test_a_func_no_plan_can_cut_is_a_located_error_and_leaves_no_plan():
    g = _doc_example()
    ctx = PassContext(target=get_target("m4").replace(max_blob_tensors=0))
    run(Legalize(), g, ctx)
    with pytest.raises(ConstraintError) as e:
        Partition().run(g, ctx)
    assert e.value.constraint == "ANE-BLOB-BUDGET" and e.value.span.location == "f.ir:3:9"
    assert g.facts.partition is None and ctx.rewrites == []
