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
from anec.passes.pipelines import PIPELINES, get_pipeline, parse_pass_list
from anec.passes.weights_as_inputs import WeightsAsInputs

ALL_PASSES: tuple[type[Pass], ...] = (
    DeadCodeElimination,
    FuseCasts,
    WeightsAsInputs,
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
    raise AnecError(f"unknown pass '{name}'", hint=pass_name_hint(name))


def pass_name_hint(name: str, extra: tuple[str, ...] = ()) -> str:
    """What to write instead of the unknown pass ``name`` (spelling, case, ``_`` for ``-``)."""
    choices = [*PASSES, *extra]
    normal = name.strip().lower().replace("_", "-")
    if normal in choices:
        return f"did you mean '{normal}'? (pass names are lowercase, with '-')"
    if name in PIPELINES:
        return (f"'{name}' is a pipeline, not a pass: use --pipeline {name} "
                f"(passes: {', '.join(p.name for p in PIPELINES[name])})")
    return did_you_mean(normal, choices) or f"passes: {', '.join(choices)}"


__all__ = [
    "ALL_PASSES", "AnnotateSram", "DeadCodeElimination", "EmitMil", "FuseCasts", "Legalize",
    "PASSES", "PIPELINES", "Pass", "PassContext", "get_pass", "get_pipeline", "parse_pass_list",
    "pass_name_hint", "run_passes", "run_pipeline", "WeightsAsInputs",
]
