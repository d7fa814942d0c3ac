"""The registry of passes: every pass class, by the name used on the command line.

A pass is registered by being listed in :data:`ALL_PASSES` (no decorators,
no import side effects).
"""

from __future__ import annotations

from anec.passes.annotate_sram import AnnotateSram
from anec.passes.base import Pass
from anec.passes.dce import DeadCodeElimination
from anec.passes.emit_mil import EmitMil
from anec.passes.fuse_casts import FuseCasts
from anec.passes.legalize import Legalize
from anec.passes.partition import Partition
from anec.passes.quantize_activations import QuantizeActivations
from anec.passes.range_safe import RangeSafe
from anec.passes.select_native import SelectNative
from anec.passes.weights_as_inputs import WeightsAsInputs

ALL_PASSES: tuple[type[Pass], ...] = (
    DeadCodeElimination,
    FuseCasts,
    WeightsAsInputs,
    SelectNative,
    RangeSafe,
    AnnotateSram,
    Legalize,
    Partition,
    QuantizeActivations,
    EmitMil,
)
"""Every pass, in pipeline order."""

PASSES: dict[str, type[Pass]] = {p.name: p for p in ALL_PASSES}
"""Pass id -> pass class."""
