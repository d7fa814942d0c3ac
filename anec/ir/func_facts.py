"""The typed facts passes hand to later stages about one func (``Graph.facts``).

A pass that learns something later stages need and that the IR text does not
show writes it here: how the func is cut into programs (:class:`Plan`, written
by the partition pass), the shapes callers see when legalize gave the program
rank-4 or chunked I/O (``logical_inputs``/``logical_outputs``), the I/O the
host converts (``host_casts``), the weights compiled as inputs
(``weight_inputs``), the SRAM summary (``sram``), the int8 activation report
(``activations``, the quantize-activations pass), for a stage graph cut
out of a func, where its names come from (:class:`StageSource`), and, while
autodiff builds a backward func, the stored shapes of its weights
(``weight_shapes``). The entries
are plain dicts with a declared shape (TypedDicts): the artifact writes them
into the manifest as they are.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from anec.ir.nodes import Node, Value


class LogicalInput(TypedDict):
    """An input the program takes in another shape than the caller passes (ANE-IO-RANK4)."""

    name: str
    dtype: str
    shape: list[int]


class _LogicalOutputBase(TypedDict):
    name: str
    axis: int | None
    pieces: list[str]


class LogicalOutput(_LogicalOutputBase, total=False):
    """An output as the caller sees it: the program outputs ``pieces`` joined along ``axis``
    (chunked convs, ANE-CONV-CHANNELS) or reshaped to ``shape`` (ANE-IO-RANK4)."""

    dtype: str
    shape: list[int] | None


class HostCast(TypedDict):
    """An fp32 input or output the program takes or returns as fp16 (ANE-FP32-IO)."""

    name: str
    kind: str
    host_dtype: str
    program_dtype: str


class WeightInput(TypedDict):
    """A weight const compiled as a program input (the weights-as-inputs pass)."""

    key: str
    input: str
    dtype: str
    shape: list[int]
    perm: list[int] | None
    slice: list[int] | None


class SramReport(TypedDict):
    """The program's SRAM summary (the annotate-sram pass; refreshed by legalize)."""

    target: str
    sram_bytes: int
    peak_bytes: int
    peak_node: str | None
    spill_nodes: list[str]
    weight_bytes: int


class ActivationTensor(TypedDict):
    """One activation the quantize-activations pass considered: int8 with its scale (its
    consumers carry ``int8_<operand>`` annotations), or fp16 and why."""

    value: str
    consumers: list[str]
    dtype: str
    scale: float | None
    max_abs: float | None
    rel_l2: float | None
    reason: str | None


class ActivationOutput(TypedDict):
    """An output's agreement with the unquantized func on the calibration inputs (worst sample)."""

    output: str
    cosine: float
    max_rel: float


class ActivationReport(TypedDict):
    """What the quantize-activations pass decided, and the gate it held."""

    dtype: str
    min_cosine: float
    samples: int
    tensors: list[ActivationTensor]
    outputs: list[ActivationOutput]


@dataclass
class Stage:
    """One program of a cut func: items ``[start, end)`` of :attr:`Plan.items`."""

    start: int
    end: int
    inputs: list["Value"] = field(default_factory=list)
    """Values it reads that are func inputs or results of earlier stages (first-use order)."""
    outputs: list["Value"] = field(default_factory=list)
    """Its results that later stages read or the func returns (definition order)."""
    weights: list["Node"] = field(default_factory=list)
    """The weight consts its items read (one BLOBFILE tensor each)."""
    blob_cap: int = 0
    peak_sram: int = 0
    reason: str = ""
    """Why the stage ends where it ends."""

    @property
    def in_bytes(self) -> int:
        return sum(v.type.nbytes for v in self.inputs)

    @property
    def out_bytes(self) -> int:
        return sum(v.type.nbytes for v in self.outputs)


@dataclass
class Plan:
    """How a func is cut into programs: its items and the stages over them.

    It refers to the graph's own nodes; a copy of the graph (``Graph.clone``)
    shares the plan instead of copying the nodes it names."""

    func: str
    items: list["Node"]
    stages: list[Stage]
    crossing_bytes: int = 0
    """Bytes crossing all cuts (each crossing value counted once per cut it crosses)."""
    over_blobs: bool = True
    """The func needs more BLOBFILE tensors than one program holds (else only the SRAM cut it)."""

    @property
    def constraints(self) -> list[str]:
        """The per-program budgets that forced the cuts."""
        sram = any(s.reason.startswith("SRAM") for s in self.stages)
        return (["ANE-BLOB-BUDGET"] if self.over_blobs else []) + (["ANE-SRAM"] if sram else [])

    def __deepcopy__(self, memo: dict[int, Any]) -> "Plan":
        return self

    def describe(self) -> list[str]:
        """One line per stage, then why each cut is where it is (``anec check``)."""
        lines = [f"func '{self.func}' is cut into {len(self.stages)} programs ({', '.join(self.constraints)}); "
                 f"{size_text(self.crossing_bytes)} cross stage boundaries"]
        for i, s in enumerate(self.stages):
            first, last = self.items[s.start], self.items[s.end - 1]
            lines.append(
                f"  stage {i}: {s.end - s.start} nodes, %{first.results[0].name} ({_loc(first)}) .. "
                f"%{last.results[0].name} ({_loc(last)}); weights {len(s.weights)} of {s.blob_cap}; "
                f"peak SRAM {size_text(s.peak_sram)}; in {len(s.inputs)} ({size_text(s.in_bytes)}), "
                f"out {len(s.outputs)} ({size_text(s.out_bytes)})")
            lines.append(f"    cut after: {s.reason}")
        return lines


def _loc(n: "Node") -> str:
    return n.span.location if n.span is not None else "?"


def size_text(n: int) -> str:
    """``n`` bytes for a reader: ``12 B``, ``3.0 KiB``, ``1.5 MiB``."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


@dataclass
class StageSource:
    """Where the names of a stage graph come from (:func:`anec.passes.extract_stage.extract_stage`).

    Both map into the func the stage was cut from and are shared, not copied, by
    ``Graph.clone``."""

    origin: dict[str, str]
    """Each canonical I/O name (``in0``, ``out0``, ...) -> the func's value name."""
    const_origin: dict[str, "Node"]
    """Each const's name in the stage -> the func's const node."""

    def __deepcopy__(self, memo: dict[int, Any]) -> "StageSource":
        return self


@dataclass
class FuncFacts:
    """What passes tell later stages about one func; empty for a func no pass has touched."""

    partition: Plan | None = None
    """How the func is cut into programs (the partition pass); None: it is one program."""
    logical_inputs: list[LogicalInput] = field(default_factory=list)
    logical_outputs: list[LogicalOutput] = field(default_factory=list)
    host_casts: list[HostCast] = field(default_factory=list)
    weight_inputs: list[WeightInput] = field(default_factory=list)
    sram: SramReport | None = None
    """The SRAM summary; None until annotate-sram runs."""
    activations: ActivationReport | None = None
    """The int8 activation report; None unless quantize-activations ran."""
    stage_source: StageSource | None = None
    """For a stage graph cut out of a func: where its names come from."""
    weight_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """While autodiff builds a backward func: checkpoint key -> the stored tensor's shape (a
    weight's transpose is then the same tensor under another ``perm=``); empty otherwise."""

    def copy(self) -> "FuncFacts":
        """A copy for a cloned graph: the lists are copied, the plan and the stage source
        (which name the original's nodes) are shared."""
        return copy.deepcopy(self)


__all__ = ["ActivationOutput", "ActivationReport", "ActivationTensor", "FuncFacts", "HostCast", "LogicalInput",
           "LogicalOutput", "Plan", "SramReport", "Stage", "StageSource", "WeightInput", "size_text"]
