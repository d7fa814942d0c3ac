"""The passes of the anec compiler and their registry.

A pass is registered by being listed in :data:`ALL_PASSES`
(:mod:`anec.passes.registry`). Every pass is usable alone on a graph::

    from anec.passes import DeadCodeElimination, PassContext
    DeadCodeElimination().run(graph, PassContext.default())

and the manager runs whole pipelines (:mod:`anec.passes.pipelines`)::

    from anec.passes import run_pipeline
    from anec.passes.pipelines import DEFAULT
    run_pipeline(module, DEFAULT, ctx)
"""

from __future__ import annotations

from anec.passes.annotate_sram import AnnotateSram
from anec.passes.base import Pass, PassContext
from anec.passes.dce import DeadCodeElimination
from anec.passes.emit_mil import EmitMil
from anec.passes.fuse_casts import FuseCasts
from anec.passes.legalize import Legalize
from anec.passes.manager import run_passes, run_pipeline
from anec.passes.partition import Partition
from anec.passes.range_safe import RangeSafe
from anec.passes.quantize_activations import QuantizeActivations
from anec.passes.pipelines import PIPELINES, get_pass, get_pipeline, parse_pass_list, pass_name_hint
from anec.passes.registry import ALL_PASSES, PASSES
from anec.passes.select_native import SelectNative
from anec.passes.weights_as_inputs import WeightsAsInputs

__all__ = [
    "ALL_PASSES", "AnnotateSram", "DeadCodeElimination", "EmitMil", "FuseCasts", "Legalize",
    "PASSES", "PIPELINES", "Partition", "Pass", "PassContext", "get_pass", "get_pipeline", "parse_pass_list",
    "pass_name_hint", "QuantizeActivations", "RangeSafe", "run_passes", "run_pipeline", "SelectNative", "WeightsAsInputs",
]
