"""The emit-mil pass on a func the partition pass cut into stages: what it hands the multi-program build."""

from __future__ import annotations

import pytest

from anec.diagnostics import AnecError
from anec.multi_program_build import build_multi_program
from anec.passes import AnnotateSram, DeadCodeElimination, EmitMil, FuseCasts, Legalize, PassContext, Partition
from anec.ir.weight_binding import random_weights

from .passes_util import parse_module, run
from .test_partition import chain, target


def emit(pack_weights: bool | None, with_weights: bool = True, rewrites: list[dict] | None = None):
    """pack_weights None: the option is not given at all."""
    m = parse_module(chain(5), "c.ir")
    g = m.func()
    options = {} if pack_weights is None else {"pack_weights": pack_weights}
    ctx = PassContext.default(target(2), random_weights(m, 0) if with_weights else None, **options)
    ctx.build_stages = build_multi_program
    run((DeadCodeElimination(), FuseCasts(), AnnotateSram(), Legalize(), Partition()), g, ctx)
    assert g.facts.partition is not None  # cut into stages: the pipeline path
    ctx.rewrites += rewrites or []
    run(EmitMil(), g, ctx)
    return ctx.artifacts["f"]


def test_a_partitioned_func_gets_its_weights_per_stage():
    art = emit(pack_weights=False)
    assert len(art.stages) == 3
    assert sorted(art.stages[0].blobs) == ["weights/w0.bin", "weights/w1.bin"]
    assert all(len(b) > 64 for st in art.stages for b in st.blobs.values())
    assert all(not st.blobs for st in emit(pack_weights=False, with_weights=False).stages)


def test_a_partitioned_func_packs_its_weights_when_asked():
    art = emit(pack_weights=True)
    assert all(sorted(st.blobs) == ["weights/weight.bin"] for st in art.stages)
    # not asked: one file per weight
    assert sorted(emit(pack_weights=None).stages[0].blobs) == ["weights/w0.bin", "weights/w1.bin"]


def test_a_partitioned_func_records_its_own_rewrites_and_the_unattributed_ones():
    mine = {"rule": "r1", "constraint": "ANE-X", "node": "a", "location": "", "detail": "d1", "func": "f"}
    other = {**mine, "rule": "r2", "func": "g"}
    anyone = {k: v for k, v in mine.items() if k != "func"} | {"rule": "r3"}
    rules = [r["rule"] for r in emit(False, rewrites=[mine, other, anyone]).manifest.document["rewrites"]]
    assert "r1" in rules and "r3" in rules and "r2" not in rules


def test_a_cut_func_without_the_multi_program_build_is_a_clear_error():
    """emit-mil sits below the multi-program build: a pass context that does not hand it over
    gets an error naming the func and what to do, not a traceback or a one-program artifact."""
    m = parse_module(chain(5), "c.ir")
    g = m.func()
    ctx = PassContext.default(target(2), random_weights(m, 0))
    run((Legalize(), Partition()), g, ctx)
    with pytest.raises(AnecError) as e:
        EmitMil().run(g, ctx)
    assert "func 'f' is cut into 3 programs" in e.value.message and "compile_module" in e.value.hint
    assert "f" not in ctx.artifacts
