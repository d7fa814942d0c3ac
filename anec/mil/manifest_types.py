"""The manifest as typed objects: frozen dataclasses for ``manifest.json`` and its parts.

:func:`anec.mil.manifest.parse_manifest` (a program, ``anec-artifact/1``) and
:func:`anec.mil.multi_program.parse_pipeline_manifest` (a pipeline,
``anec-pipeline/1``) validate the JSON once and turn it into a :class:`Manifest`
or a :class:`PipelineManifest` here; everything after reads attributes
(``manifest.inputs[0].shape``, ``stage.mil_sha256``). Each class lists the
fields it reads, named as the JSON keys are; :func:`from_json` fills them by
name, so adding a field to the format is one line in its class (a nested entry
names its class in ``one``/``many``). Unknown JSON keys are ignored; JSON arrays
become tuples. A top-level manifest keeps the JSON object it was read from or
built as (``document``): the writer lays out exactly those bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, TypeVar

from anec.diagnostics import ArtifactError

MODEL_PATH = "@model_path/"

Shape = tuple[int, ...]
T = TypeVar("T")


def one(cls: type, default: Any = None, key: str | None = None) -> Any:
    """A field holding one ``cls`` (read from JSON key ``key``, default the field name)."""
    return field(default=default, metadata={"type": cls, "key": key})


def many(cls: type) -> Any:
    """A field holding a tuple of ``cls`` (a JSON array of objects)."""
    return field(default=(), metadata={"type": cls, "many": True})


def _frozen(v: Any) -> Any:
    """JSON arrays as tuples (shapes, perms, pieces); objects stay as read."""
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


def from_json(cls: type[T], obj: Mapping[str, Any]) -> T:
    """``cls`` from a JSON object whose types were checked: every field by its JSON key."""
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        key = f.metadata.get("key") or f.name
        if key not in obj or f.name == "document":
            continue
        v, sub = obj[key], f.metadata.get("type")
        if sub is None:
            kwargs[f.name] = _frozen(v)
        elif v is None:
            kwargs[f.name] = None
        elif f.metadata.get("many"):
            kwargs[f.name] = tuple(from_json(sub, x) for x in v)
        elif sub is dict:
            kwargs[f.name] = {k: from_json(f.metadata["each"], x) for k, x in v.items()}
        else:
            kwargs[f.name] = from_json(sub, v)
    return cls(**kwargs)


# ---- a program (anec-artifact/1) ----------------------------------------------------------

@dataclass(frozen=True)
class IOEntry:
    """A program input or output: device name, dtype, shape, binding index and byte size."""

    name: str
    dtype: str
    shape: Shape
    binding: int
    bytes: int
    logical: str | None = None
    """Outputs only: the logical output this one is (a piece of)."""


@dataclass(frozen=True)
class FileRef:
    """A file of the artifact and its sha256 (``mil``, ``program_ir``)."""

    file: str
    sha256: str
    dialect: str | None = None
    """``mil`` only: the MIL dialect it is written in."""


@dataclass(frozen=True)
class WeightPart:
    """One payload of a compressed weight: which weight, its role, the format."""

    of: str
    role: str
    format: str
    axis: int
    shape: Shape
    packed: bool = False


@dataclass(frozen=True)
class WeightEntry:
    """One BLOBFILE tensor: the checkpoint key, file, offset, stored dtype/shape and view."""

    key: str
    file: str
    offset: int
    dtype: str
    shape: Shape
    sha256: str | None = None
    """None in a compile without weights, and while it is computed (``Artifact.pending``)."""
    const: str | None = None
    path: str | None = None
    perm: Shape | None = None
    slice: Shape | None = None
    part: WeightPart | None = one(WeightPart)

    @property
    def mil_path(self) -> str:
        """The path the MIL names the file by (``@model_path/weights/w1.bin``)."""
        return self.path or MODEL_PATH + self.file


@dataclass(frozen=True)
class WeightInputEntry:
    """A weight compiled as a program input: its initial value's BLOBFILE and view."""

    key: str
    input: str
    file: str
    offset: int
    dtype: str
    shape: Shape
    sha256: str | None = None
    perm: Shape | None = None
    slice: Shape | None = None


@dataclass(frozen=True)
class LogicalInput:
    """An input in the shape the caller passes (ANE-IO-RANK4)."""

    name: str
    dtype: str
    shape: Shape


@dataclass(frozen=True)
class LogicalOutput:
    """An output as the caller sees it: ``pieces`` joined along ``axis``, reshaped to ``shape``."""

    name: str
    pieces: tuple[str, ...]
    dtype: str | None = None
    shape: Shape | None = None
    axis: int | None = None


@dataclass(frozen=True)
class HostCast:
    """An fp32 input or output the program takes or returns as fp16 (ANE-FP32-IO)."""

    name: str
    kind: str
    host_dtype: str
    program_dtype: str | None = None


@dataclass(frozen=True)
class Concat:
    """How the program reads concat (``rewrite`` or ``native``) and why."""

    reading: str
    why: str


@dataclass(frozen=True)
class CompressionRecord:
    """One weight stored by a compression decision: the format used and what it cost."""

    const: str
    key: str
    format: str
    requested: str | None = None
    axis: int | None = None
    dense_bytes: int = 0
    bytes: int | None = None
    rel_l2: float | str | None = None
    max_abs: float | str | None = None
    rel_abs: float | str | None = None
    channel_rel_l2: Any = None
    fallbacks: tuple[Any, ...] = ()
    """The formats tried first and why each was given up (``{"format", "reason"}``)."""
    warning: str | None = None


@dataclass(frozen=True)
class ActivationEntry:
    """One activation the quantize-activations pass considered: int8 with its scale, or fp16 and why."""

    value: str
    dtype: str
    consumers: tuple[str, ...] = ()
    scale: float | None = None
    max_abs: float | None = None
    rel_l2: float | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ActivationAgreement:
    """An output's worst cosine and max relative error against the unquantized func (calibration)."""

    output: str
    cosine: float | None = None
    max_rel: float | None = None


@dataclass(frozen=True)
class Activations:
    """The int8 activation report (docs/compression.md, "int8 activations")."""

    dtype: str
    min_cosine: float | None = None
    samples: int | None = None
    tensors: tuple[ActivationEntry, ...] = many(ActivationEntry)
    outputs: tuple[ActivationAgreement, ...] = many(ActivationAgreement)

    @property
    def quantized(self) -> int:
        """How many activations go through the report's dtype."""
        return sum(1 for t in self.tensors if t.dtype == self.dtype)


@dataclass(frozen=True)
class Limits:
    """The target limits the program was compiled for (the runtime applies them)."""

    max_blob_tensors: int | None = None
    scalar_penalty: int | None = None
    max_conv_out_channels: int | None = None
    min_surface_bytes: int | None = None
    allow_fp32_io: bool | None = None
    surface_alignment: int | None = None
    sram_bytes: int | None = None

    def given(self) -> dict[str, Any]:
        """The limits the manifest gives (absent ones left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class SramSummary:
    """The program's SRAM report (the annotate-sram pass): peak use and the nodes that may spill."""

    target: str | None = None
    sram_bytes: int | None = None
    peak_bytes: int | None = None
    peak_node: str | None = None
    spill_nodes: tuple[Any, ...] = ()
    weight_bytes: int | None = None


@dataclass(frozen=True)
class Manifest:
    """The manifest of one compiled program (``anec-artifact/1``, docs/mil.md)."""

    func: str
    mil: FileRef = one(FileRef)
    program_ir: FileRef = one(FileRef)
    inputs: tuple[IOEntry, ...] = many(IOEntry)
    outputs: tuple[IOEntry, ...] = many(IOEntry)
    input_alloc_bytes: int = 0
    output_alloc_bytes: int = 0
    weights: tuple[WeightEntry, ...] = many(WeightEntry)
    format: str = ""
    anec_version: str | None = None
    target: str | None = None
    limits: Limits | None = one(Limits)
    logical_inputs: tuple[LogicalInput, ...] = many(LogicalInput)
    logical_outputs: tuple[LogicalOutput, ...] = many(LogicalOutput)
    weight_inputs: tuple[WeightInputEntry, ...] = many(WeightInputEntry)
    compression: tuple[CompressionRecord, ...] = many(CompressionRecord)
    activations: Activations | None = one(Activations)
    host_casts: tuple[HostCast, ...] = many(HostCast)
    concat: Concat | None = one(Concat)
    sram: SramSummary | None = one(SramSummary)
    rewrites: tuple[Any, ...] = ()
    document: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The JSON object as read or built (what the writer lays out, byte for byte)."""

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> "Manifest":
        """The typed view of a checked (or just built) manifest JSON object."""
        return _with_document(cls, document)


# ---- a pipeline (anec-pipeline/1) --------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """Where a stage input or a pipeline output comes from: a func ``input``, or an
    ``output`` of an earlier ``stage``."""

    input: str | None = None
    stage: int | None = None
    output: str | None = None


@dataclass(frozen=True)
class StagePort:
    """A stage program's input or output (``in0``, ``out1``), the func value it carries and,
    for an input, its source."""

    name: str
    value: str | None = None
    source: Source | None = one(Source, key="from")


@dataclass(frozen=True)
class StageEntry:
    """One stage of a pipeline: its directory, MIL sha256, wiring and the plan's numbers."""

    dir: str
    mil_sha256: str
    same_as: int | None = None
    shares: int | None = None
    weight_inputs: int = 0
    """How many weight inputs the stage program has."""
    surface_bytes: int | None = None
    """This stage's surface size (older manifests: None, the top-level ``surface_bytes``)."""
    inputs: tuple[StagePort, ...] = many(StagePort)
    outputs: tuple[StagePort, ...] = many(StagePort)
    nodes: int | None = None
    first: str | None = None
    last: str | None = None
    weights: int | None = None
    blob_cap: int | None = None
    peak_sram: int | None = None
    in_bytes: int | None = None
    out_bytes: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class PipelineManifest:
    """The manifest of a func compiled into several programs (``anec-pipeline/1``)."""

    func: str
    inputs: tuple[IOEntry, ...] = many(IOEntry)
    outputs: tuple[IOEntry, ...] = many(IOEntry)
    stages: tuple[StageEntry, ...] = many(StageEntry)
    outputs_from: Mapping[str, Source] = field(default_factory=dict, metadata={"type": dict, "each": Source})
    surface_bytes: int = 0
    programs: int = 1
    format: str = ""
    anec_version: str | None = None
    target: str | None = None
    logical_inputs: tuple[LogicalInput, ...] = many(LogicalInput)
    logical_outputs: tuple[LogicalOutput, ...] = many(LogicalOutput)
    host_casts: tuple[HostCast, ...] = many(HostCast)
    weight_inputs: tuple[WeightInputEntry, ...] = many(WeightInputEntry)
    program_ir: FileRef | None = one(FileRef)
    activations: Activations | None = one(Activations)
    crossing_bytes: int | None = None
    sram: SramSummary | None = one(SramSummary)
    rewrites: tuple[Any, ...] = ()
    document: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The JSON object as read or built (what the writer lays out, byte for byte)."""

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> "PipelineManifest":
        """The typed view of a checked (or just built) pipeline manifest JSON object."""
        return _with_document(cls, document)


def check_written(typed: Any, written: Any, func: str) -> None:
    """ArtifactError unless the manifest about to be written (``written``: its document, typed
    again) says what ``typed`` says: a typed manifest changed apart from its document
    (``dataclasses.replace``) is never written as something else."""
    if typed != written:
        raise ArtifactError(f"the manifest of '{func}' differs from the JSON document it would be written as",
                            hint="build a changed manifest from its JSON: Manifest.of(document)")


def _with_document(cls: type[T], document: Mapping[str, Any]) -> T:
    typed = from_json(cls, document)
    object.__setattr__(typed, "document", document)
    return typed
