"""The multi-program artifact: a func compiled into a pipeline of ANE programs, read and checked.

A func that breaks a per-program budget is cut into stages (the partition
pass); the compiler builds one program per stage (:mod:`anec.multi_program_build`).
This module holds the result, :class:`PipelineArtifact`, its files, and the
reading side: :func:`load_any` (either layout), :func:`check_manifest`. The
artifact directory holds one ordinary program artifact per stage and a
top-level manifest that wires them::

    out/gpt2/manifest.json            format anec-pipeline/1: the func's I/O, the stages,
                                      where every stage input comes from, the plan
    out/gpt2/program.ir               the whole func in anec IR (weights keyed by stage BLOBFILE)
    out/gpt2/stages/s00/model.mil     stage 0: an ordinary artifact (manifest.json,
    out/gpt2/stages/s00/weights/...             weights/, program.ir)
    out/gpt2/stages/s01/...
    out/gpt2/inputs/<name>.bin        initial values of weights compiled as inputs

A func that fits one program keeps the single-program layout
(:mod:`anec.mil.artifact`). Stages with byte-identical MIL (the layers of a
transformer, cut the same way) are marked ``same_as`` the first of them; the
runtime's program cache then compiles the text once wherever the compiled
form can be shared (docs/runtime.md). Each stage entry's ``surface_bytes``
is the allocation size of that stage's surfaces (stages of one size pass
outputs to inputs with no copy); the top-level ``surface_bytes`` is the
largest, and sizes every stage of a manifest without per-stage sizes.

Programs shared across layers (``share=True``): stages with the same MIL but
other weights (the layers of a transformer, cut at the layer boundaries by
the aligned partition) would each compile, since a compiled program bakes
its weights. Every weight of such a stage becomes an input of its program
(the weights-as-inputs pass on the stage, then legalize: a conv1x1 over an
input weight becomes a matmul, ANE-CONV-CONST-WEIGHT), so the stages have
the same MIL and *no* weight files: one compile, and every other stage of
the group is a cache hit of it. Each stage keeps its own weights, as the
initial values of its weight inputs in its own directory
(``stages/sNN/inputs/*.bin``, listed in its manifest's ``weight_inputs``);
the runtime writes them once into that stage's input surfaces at load. The
stage entry's ``shares`` names the first stage of its group (the program it
shares; the first names itself, a stage that shares nothing has null) and ``weight_inputs`` counts its weight inputs; the manifest's
``programs`` is the number of distinct compiles the pipeline needs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anec.diagnostics import ArtifactError
from anec.fsutil import parse_json
from anec.hashing import sha256
from anec.ir.types import DType
from anec.mil.artifact import (BLOB_MAX_BYTES, MANIFEST_FILE, OUTPUT_INDEX, PROGRAM_IR_FILE, PROGRAM_IR_MAX_BYTES,
                               Artifact, decode_utf8, file_bytes, write_artifact_dir)
from anec.mil.beneath import check_rel
from anec.mil.json_format import format_json
from anec.mil.output import load_artifact
from anec.mil.blobfile import BlobReader
from anec.mil.manifest import (ACTIVATIONS, HOST_CAST_ENTRY, IO_ENTRY, LOGICAL_INPUT_ENTRY, LOGICAL_OUTPUT_ENTRY,
                               MANIFEST_MAX_BYTES, SRAM_REPORT, WEIGHT_INPUT_ENTRY, Check, ManifestFieldError, array,
                               nullable)
from anec.mil.manifest_types import PipelineManifest, check_written

if TYPE_CHECKING:
    from anec.ir.graph import Module
    from anec.mil.beneath import Beneath

FORMAT = "anec-pipeline/1"
MAX_STAGE_WEIGHT_INPUTS = 4096
"""The most weight inputs a manifest may give one stage (a stage holds far fewer: its
weights before sharing fit one program's BLOBFILE budget)."""
STAGES_DIR = "stages"


def stage_dir(k: int) -> str:
    return f"{STAGES_DIR}/s{k:02d}"


@dataclass
class PipelineArtifact:
    """A func compiled into several programs: the stage artifacts and the wiring."""

    func: str
    stages: list[Artifact]
    manifest: PipelineManifest
    """The wiring, typed (its JSON object, as written: ``manifest.document``)."""
    program_ir: str = ""
    """The whole legalized func in anec IR, weights keyed by the stage BLOBFILEs holding them."""
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Top-level files other than the manifest: weights compiled as inputs (``inputs/*.bin``)."""

    # ---- summary --------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return all(a.complete for a in self.stages) and all(
            w.file in self.blobs for w in self.manifest.weight_inputs)

    def weight_bytes(self) -> int:
        return sum(a.weight_bytes() for a in self.stages)

    def op_count(self) -> int:
        return sum(a.op_count() for a in self.stages)

    @property
    def mil_text(self) -> str:
        """Every stage's MIL, each after a ``// stage N`` line (for reading, not for a device)."""
        return "".join(f"// stage {k} ({stage_dir(k)}/model.mil)\n{a.mil_text}" for k, a in enumerate(self.stages))

    # ---- files ----------------------------------------------------------------------
    def files(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for k, art in enumerate(self.stages):
            for rel, data in art.files().items():
                out[f"{stage_dir(k)}/{rel}"] = data
        for rel, data in self.blobs.items():
            out[rel] = data
        out[PROGRAM_IR_FILE] = self.program_ir.encode("utf-8")
        check_written(self.manifest, PipelineManifest.of(self.manifest.document), self.func)
        out[MANIFEST_FILE] = (format_json(self.manifest.document) + "\n").encode("utf-8")
        return out

    def write(self, directory: str | os.PathLike) -> Path:
        """Write the whole pipeline atomically (as :meth:`Artifact.write`)."""
        return write_artifact_dir(directory, self.files())

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "PipelineArtifact":
        """Read the pipeline in ``directory`` (as :func:`load_any`, which reads either layout)."""
        art = load_any(directory)
        if not isinstance(art, cls):
            raise ArtifactError(f"'{directory}' holds one program, not a pipeline")
        return art

    @classmethod
    def _read(cls, d: "Beneath", manifest: PipelineManifest) -> "PipelineArtifact":
        """The pipeline in ``d`` (read beneath it, nothing followed through links): the wiring,
        every stage as an artifact, each stage's MIL against the wiring's sha256, program.ir."""
        stages = []
        for k, e in enumerate(manifest.stages):
            with d.subdir(e.dir, "stage directory") as sub:
                art = Artifact.read(sub)
            if art.manifest.mil.sha256 != e.mil_sha256:
                raise ArtifactError(f"{d.path / e.dir}: stage {k} is not the program the pipeline manifest names",
                                    hint="the artifact was modified after compiling; recompile it")
            stages.append(art)
        blobs = {}
        for w in manifest.weight_inputs:
            rel = _rel(w.file)
            blobs[rel] = d.read(rel, BLOB_MAX_BYTES, "weight input file")
            if sha256(BlobReader(blobs[rel], name=rel).payload(w.offset)) != w.sha256:
                raise ArtifactError(f"{d.path / rel}: weight '{w.key}' does not match its sha256",
                                    hint="the weight file was modified after compiling; recompile it")
        ir = d.read(PROGRAM_IR_FILE, PROGRAM_IR_MAX_BYTES, "program IR")
        if sha256(ir) != (manifest.program_ir.sha256 if manifest.program_ir else None):
            raise ArtifactError(f"{d.path / PROGRAM_IR_FILE} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        return cls(manifest.func, stages, manifest, decode_utf8(ir, d.path / PROGRAM_IR_FILE, "program IR"), blobs)

    def program_module(self) -> "Module":
        from anec.ir.parser import parse

        return parse(self.program_ir, filename=f"{self.func}/{PROGRAM_IR_FILE}", target_forms=True)

    def interp_weights(self) -> dict[str, np.ndarray]:
        """The weights of :attr:`program_ir` (keyed by stage BLOBFILE), read from the stages."""
        from anec.mil.artifact import artifact_weights

        out = {}
        for k, art in enumerate(self.stages):
            for key, arr in artifact_weights(art).items():
                out["+".join(f"{stage_dir(k)}/{part}" for part in key.split("+"))] = arr
        return out

    def weight_inputs(self) -> dict[str, np.ndarray]:
        """Input name -> initial value of every weight compiled as an input."""
        out = {}
        for w in self.manifest.weight_inputs:
            arr = BlobReader(file_bytes(self.blobs, w.file), name=w.file).read(w.offset, DType(w.dtype).np)
            if arr.size != math.prod(w.shape):
                raise ArtifactError(f"{w.file} offset {w.offset}: blob holds {arr.size} values, the shape "
                                    f"{list(w.shape)} of weight '{w.key}' needs {math.prod(w.shape)}",
                                    hint="the artifact was modified after compiling; recompile it")
            out[w.input] = arr.reshape(w.shape)
        return out


def _weights_identity(art: Artifact) -> tuple:
    """What a program's compiled form bakes besides its MIL: its weights (key and view)."""
    return tuple(sorted((w.path or w.file, w.key, repr(w.perm), repr(w.slice)) for w in art.manifest.weights))


def count_compiles(programs: "list[Artifact]") -> int:
    """The compiles a runtime makes for these programs when no weight reload strategy is
    verified (the device's state until ``python -m anec.selftest`` verifies one): programs
    with the same MIL and the same weights share a compile (a cache hit), any other
    difference compiles again."""
    return len({(a.manifest.mil.sha256, _weights_identity(a)) for a in programs})


def _rel(rel: str) -> str:
    check_rel(rel)
    return rel


def is_pipeline_manifest(manifest: Any) -> bool:
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def parse_pipeline_manifest(m: Any, where: Path | str) -> PipelineManifest:
    """The pipeline manifest in the JSON value ``m``, checked (:func:`check_manifest`) and
    typed: the one parser every reader of a pipeline goes through."""
    check_manifest(m, where)
    return PipelineManifest.of(m)


def check_manifest(m: Any, where: Path | str) -> None:
    """Every field the runtime reads of a pipeline manifest, with its type (ArtifactError otherwise)."""
    def bad(field_: str, expected: str) -> ArtifactError:
        return ArtifactError(f"{where}: field '{field_}' must be {expected}")

    def checked(key: str, check: Check, default: Any = None) -> Any:
        try:
            return check(m.get(key, default), key)
        except ManifestFieldError as e:
            raise bad(e.path, e.expected) from None

    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise bad("format", repr(FORMAT))
    for key in ("func",):
        if not isinstance(m.get(key), str):
            raise bad(key, "a string")
    for key in ("inputs", "outputs", "stages", "logical_outputs"):
        if not isinstance(m.get(key), list):
            raise bad(key, "a list")
    if not m["stages"]:
        raise bad("stages", "a non-empty list")
    if not isinstance(m.get("surface_bytes"), int) or not 0 < m["surface_bytes"] < 1 << 40:
        raise bad("surface_bytes", "a positive integer")
    for key, check in (("inputs", IO_ENTRY), ("outputs", IO_ENTRY), ("logical_inputs", LOGICAL_INPUT_ENTRY),
                       ("logical_outputs", LOGICAL_OUTPUT_ENTRY), ("host_casts", HOST_CAST_ENTRY)):
        checked(key, array(check), [])
    checked("sram", SRAM_REPORT)
    checked("activations", nullable(ACTIVATIONS))
    ir = m.get("program_ir")
    if ir is not None and not (isinstance(ir, dict) and isinstance(ir.get("file"), str)
                               and isinstance(ir.get("sha256"), str)):
        raise bad("program_ir", "an object with 'file' and 'sha256'")
    names = {e["name"] for e in m["inputs"]}
    for k, e in enumerate(m["stages"]):
        if not isinstance(e, dict) or not isinstance(e.get("dir"), str) or not isinstance(e.get("mil_sha256"), str):
            raise bad(f"stages[{k}]", "an object with 'dir' and 'mil_sha256'")
        _rel(e["dir"])
        ref = e.get("same_as")  # reported, not used: an earlier stage
        if ref is not None and not (isinstance(ref, int) and not isinstance(ref, bool) and 0 <= ref < k):
            raise bad(f"stages[{k}].same_as", "null or an earlier stage")
        ref = e.get("shares")  # the stage whose program this one shares: the same MIL
        if ref is not None and not (isinstance(ref, int) and not isinstance(ref, bool) and 0 <= ref <= k
                                    and isinstance(m["stages"][ref], dict)
                                    and m["stages"][ref].get("mil_sha256") == e["mil_sha256"]):
            raise bad(f"stages[{k}].shares", "null or a stage (this one or an earlier) with the same mil_sha256")
        size = e.get("surface_bytes", 1)  # this stage's own size (older manifests: the top-level one)
        if not (isinstance(size, int) and not isinstance(size, bool) and 0 < size < 1 << 40):
            raise bad(f"stages[{k}].surface_bytes", "a positive integer")
        n_wi = e.get("weight_inputs", 0)
        if not (isinstance(n_wi, int) and not isinstance(n_wi, bool) and 0 <= n_wi <= MAX_STAGE_WEIGHT_INPUTS):
            raise bad(f"stages[{k}].weight_inputs", f"an integer in [0, {MAX_STAGE_WEIGHT_INPUTS}]")
        for direction in ("inputs", "outputs"):
            if not isinstance(e.get(direction, []), list):
                raise bad(f"stages[{k}].{direction}", "a list")
        for i, src in enumerate(e.get("inputs") or []):
            f = src.get("from") if isinstance(src, dict) else None
            ok = isinstance(f, dict) and (
                (f.get("input") in names) or
                (isinstance(f.get("stage"), int) and 0 <= f["stage"] < k and isinstance(f.get("output"), str)))
            if not ok:
                raise bad(f"stages[{k}].inputs[{i}].from", "a func input or an output of an earlier stage")
        for direction in ("inputs", "outputs"):
            for i, port in enumerate(e.get(direction) or []):
                if not (isinstance(port, dict) and isinstance(port.get("name"), str)
                        and isinstance(port.get("value", ""), str)):
                    raise bad(f"stages[{k}].{direction}[{i}]", "an object with a 'name' (and a 'value') string")
    programs = m.get("programs", 1)
    if not (isinstance(programs, int) and not isinstance(programs, bool) and 1 <= programs <= len(m["stages"])):
        raise bad("programs", f"an integer in [1, {len(m['stages'])}] (the stages' distinct compiles)")
    of = m.get("outputs_from")
    if not isinstance(of, dict):
        raise bad("outputs_from", "an object")
    for name, src in of.items():
        if not (isinstance(src, dict) and isinstance(src.get("stage"), int)
                and 0 <= src["stage"] < len(m["stages"]) and isinstance(src.get("output"), str)):
            raise bad(f"outputs_from.{name}", "a stage output")
    # read at load (file, offset, sha256) and by weight_inputs (dtype, shape, input)
    for i, w in enumerate(checked("weight_inputs", array(WEIGHT_INPUT_ENTRY), [])):
        if w["input"] not in names:
            raise bad(f"weight_inputs[{i}].input", "the name of a func input")


def _load_dir(d: "Beneath", manifest_sha: str | None) -> "Artifact | PipelineArtifact":
    """One func's directory: a pipeline or a single program, by its manifest's format."""
    raw = d.read(MANIFEST_FILE, MANIFEST_MAX_BYTES, "manifest")
    if manifest_sha is not None and sha256(raw) != manifest_sha:
        raise ArtifactError(f"{d.path / MANIFEST_FILE} is not the manifest the output index {OUTPUT_INDEX} names",
                            hint="the output was modified after compiling; recompile it")
    manifest = parse_json(raw, str(d.path / MANIFEST_FILE))
    if is_pipeline_manifest(manifest):
        return PipelineArtifact._read(d, parse_pipeline_manifest(manifest, d.path / MANIFEST_FILE))
    return Artifact.read(d, manifest_sha)


def load_any(path: str | os.PathLike, func: str | None = None) -> "Artifact | PipelineArtifact":
    """The artifact at ``path``, a single program or a pipeline: an artifact directory, or a
    compile output (``func`` picks one); read as :func:`anec.mil.artifact.load_artifact` reads."""
    return load_artifact(path, func, loader=_load_dir)


__all__ = ["FORMAT", "PipelineArtifact", "check_manifest", "is_pipeline_manifest", "load_any", "parse_pipeline_manifest",
           "stage_dir"]

