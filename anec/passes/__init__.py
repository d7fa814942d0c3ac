"""The passes of the anec compiler and their registry.

A pass is registered by being listed in :data:`ALL_PASSES` (no decorators,
no import side effects). Every pass is usable alone on a graph::

    from anec.passes import DeadCodeElimination, PassContext
    DeadCodeElimination().run(graph, PassContext.default())

and the manager runs whole pipelines (:mod:`anec.passes.pipelines`)::

    from anec.passes import run_pipeline
    from anec.passes.pipelines import DEFAULT
    run_pipeline(module, DEFAULT, ctx)
"""

from __future__ import annotations

from anec.diagnostics import AnecError, did_you_mean
from anec.passes.annotate_sram import AnnotateSram
from anec.passes.base import Pass, PassContext
from anec.passes.dce import DeadCodeElimination
from anec.passes.emit_mil import EmitMil
from anec.passes.fuse_casts import FuseCasts
from anec.passes.legalize import Legalize
from anec.passes.manager import run_passes, run_pipeline

ALL_PASSES: tuple[type[Pass], ...] = (
    DeadCodeElimination,
    FuseCasts,
    AnnotateSram,
    Legalize,
    EmitMil,
)
"""Every pass, in pipeline order."""

PASSES: dict[str, type[Pass]] = {p.name: p for p in ALL_PASSES}
"""Pass id -> pass class."""


def get_pass(name: str) -> type[Pass]:
    """The pass class called ``name``; AnecError with a suggestion otherwise."""
    if name in PASSES:
        return PASSES[name]
    hint = did_you_mean(name, PASSES) or f"passes: {', '.join(PASSES)}"
    raise AnecError(f"unknown pass '{name}'", hint=hint)


__all__ = [
    "ALL_PASSES", "AnnotateSram", "DeadCodeElimination", "EmitMil", "FuseCasts", "Legalize",
    "PASSES", "Pass", "PassContext", "get_pass", "run_passes", "run_pipeline",
]
