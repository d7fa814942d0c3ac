"""The compiled artifact: MIL text, weight BLOBFILEs and the manifest of one program.

On disk an artifact is one directory per func, the layout the ANE's in-memory
compiler expects in its model directory::

    out/mlp/model.mil          the MIL program (``@model_path`` is this directory)
    out/mlp/weights/w1.bin     BLOBFILEs (one per weight, or weights/weight.bin packed)
    out/mlp/manifest.json      the I/O contract between the compiler and the runtime
    out/mlp/program.ir         the same program in anec IR (weights keyed by BLOBFILE)

The manifest (format ``anec-artifact/1``, fields in docs/mil.md, schema in
:mod:`anec.mil.manifest`) says how to call the program: inputs and outputs
with dtype, shape, byte size and binding index (the device binds surfaces in
alphabetical order of MIL names), one uniform allocation size per direction
(never below the target's minimum surface), chunked outputs and how to
reassemble them, each weight's key, file, offset and sha256, the SRAM report,
the rewrites legalize applied and the sha256 of the MIL text.

:meth:`Artifact.write` writes the directory all or nothing
(:func:`anec.fsutil.write_tree_atomic`); a compile output, one such directory
per func plus the output index, is :mod:`anec.mil.output`. The manifest is laid
out by :func:`anec.mil.json_format.format_json`; weight payloads are hashed by
:mod:`anec.hashing` (on worker threads within
:func:`anec.hashing.deferred_hashes`).

:meth:`Artifact.load` (:meth:`Artifact.read` from an open directory) reads through :class:`~anec.mil.beneath.Beneath` (no
symbolic link followed, regular files of bounded size only), validates the
manifest before anything else reads it, and checks every file against it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from anec.compress import decompress, get_format
from anec.diagnostics import ArtifactError, PassError
from anec.fsutil import TreeFile, real_dir, write_tree_atomic
from anec.hashing import array_sha256, hashes_deferred, payload_digests, sha256
from anec.ir.graph import Graph, Module
from anec.ir.parser import parse
from anec.ir.printer import print_graph
from anec.ir.types import DType, TensorType
from anec.ir.weight_binding import materialize, materialize_attrs
from anec.mil.beneath import Beneath, check_rel
from anec.mil.blobfile import (HEADER_BYTES, SUBBYTE_BITS, BlobFiles, BlobReader, BlobWriter, pack_bits, payload_bytes,
                               unpack_bits)
from anec.mil.emitter import MilProgram
from anec.mil.json_format import format_json, jsonable
from anec.mil.manifest import FORMAT, MANIFEST_MAX_BYTES, parse_manifest, validate_manifest
from anec.mil.manifest_types import Manifest, WeightEntry, WeightInputEntry, check_written
from anec.thread_pools import hash_pool
from anec.version import __version__

if TYPE_CHECKING:
    from anec.targets import Target

MIL_FILE = "model.mil"
PROGRAM_IR_FILE = "program.ir"
MANIFEST_FILE = "manifest.json"
OUTPUT_INDEX = ".anec-output.json"
OUTPUT_FORMAT = "anec-output/1"
MIL_MAX_BYTES = 256 << 20
PROGRAM_IR_MAX_BYTES = 256 << 20
BLOB_MAX_BYTES = 1 << 36
"""Bounds of the files an artifact may hold (weight files: the C runtime's bound)."""


def alloc_bytes(sizes: Iterable[int], target: "Target") -> int:
    """The uniform surface size for tensors of these byte sizes.

    The largest tensor, at least ``target.min_surface_bytes`` (smaller surfaces
    fail at eval, ANE-MIN-SURFACE), rounded up to ``target.surface_alignment``
    (ANE-SURFACE-ALIGN). All inputs (or all outputs) share it: surfaces of
    different sizes fail at eval (ANE-UNIFORM-SURFACES).
    """
    n = max([target.min_surface_bytes, *sizes])
    a = max(1, target.surface_alignment)
    return (n + a - 1) // a * a


def io_entries(values, with_logical: dict[str, str] | None = None) -> list[dict]:
    """The manifest entries of func inputs or outputs: name, dtype, shape, binding, bytes."""
    order = {name: i for i, name in enumerate(sorted(v.name for v in values))}
    out = []
    for v in values:
        e = {"name": v.name, "dtype": v.type.dtype.value, "shape": list(v.type.shape),
             "binding": order[v.name], "bytes": v.type.nbytes}
        if with_logical is not None:
            e["logical"] = with_logical[v.name]
        out.append(e)
    return out


def logical_outputs(graph: Graph) -> tuple[list[dict], dict[str, str]]:
    """Logical outputs (chunked ones reassembled) and physical name -> logical name."""
    by_name = {v.name: v for v in graph.outputs}
    chunked: dict[str, dict] = {}
    for e in graph.facts.logical_outputs:
        pieces = list(e["pieces"])
        missing = [p for p in pieces if p not in by_name]
        if missing:
            raise PassError(
                f"func '{graph.name}': logical output '{e['name']}' lists piece '{missing[0]}', "
                "which the func does not return"
            )
        for p in pieces:
            chunked[p] = e
    logical, of = [], {}
    done: set[str] = set()
    for v in graph.outputs:
        e = chunked.get(v.name)
        if e is None:
            logical.append({"name": v.name, "dtype": v.type.dtype.value, "shape": list(v.type.shape),
                            "axis": None, "pieces": [v.name]})
            of[v.name] = v.name
            continue
        of[v.name] = e["name"]
        if e["name"] in done:
            continue
        done.add(e["name"])
        axis = e.get("axis")
        types = [by_name[p].type for p in e["pieces"]]
        shape = list(types[0].shape)
        if axis is not None:
            shape[axis] = sum(t.shape[axis] for t in types)
        if e.get("shape") is not None:  # the shape the program computes (rank-4 I/O is reshaped)
            if math.prod(e["shape"]) != math.prod(shape):
                raise PassError(f"func '{graph.name}': logical output '{e['name']}' has shape "
                                f"{list(e['shape'])}, which does not hold the {shape} it is built from")
            shape = list(e["shape"])
        logical.append({"name": e["name"], "dtype": types[0].dtype.value, "shape": shape,
                        "axis": axis, "pieces": list(e["pieces"])})
    return logical, of


def _logical_inputs(graph: Graph) -> list[dict]:
    """Every input with the shape the caller passes (reshaped inputs, see ANE-IO-RANK4)."""
    reshaped = {e["name"]: e for e in graph.facts.logical_inputs}
    out = []
    for v in graph.inputs:
        shape = list(reshaped[v.name]["shape"]) if v.name in reshaped else list(v.type.shape)
        if math.prod(shape) != v.type.numel:
            raise PassError(f"func '{graph.name}': logical input '{v.name}' has shape {shape}, "
                            f"which does not hold {v.type}")
        out.append({"name": v.name, "dtype": v.type.dtype.value, "shape": shape})
    return out


def build_manifest(graph: Graph, program: MilProgram, target: "Target", weights: list[dict],
                   rewrites: Iterable[Mapping] = (), program_ir: str = "") -> dict:
    """The manifest dict of one compiled func (see the module docstring)."""
    logical, of = logical_outputs(graph)
    inputs = io_entries(graph.inputs)
    outputs = io_entries(graph.outputs, of)
    return {
        "format": FORMAT,
        "anec_version": __version__,
        "func": graph.name,
        "target": target.name,
        "mil": {"file": MIL_FILE, "sha256": sha256(program.text), "dialect": program.dialect},
        "program_ir": {"file": PROGRAM_IR_FILE, "sha256": sha256(program_ir)},
        "limits": {
            "max_blob_tensors": target.max_blob_tensors,
            "scalar_penalty": target.scalar_penalty,
            "max_conv_out_channels": target.max_conv_out_channels,
            "min_surface_bytes": target.min_surface_bytes,
            "allow_fp32_io": target.fp32_io,
            "surface_alignment": target.surface_alignment,
            "sram_bytes": target.sram_bytes,
        },
        "inputs": inputs,
        "outputs": outputs,
        "input_alloc_bytes": alloc_bytes((e["bytes"] for e in inputs), target),
        "output_alloc_bytes": alloc_bytes((e["bytes"] for e in outputs), target),
        "logical_inputs": _logical_inputs(graph),
        "logical_outputs": logical,
        "weights": weights,
        "sram": jsonable(graph.facts.sram),
        "rewrites": [jsonable(r) for r in rewrites],
        "host_casts": jsonable(graph.facts.host_casts),
        "concat": {"reading": target.concat, "why": target.sources.get("concat", "the target's default")},
    }


def blob_key(file: str, offset: int) -> str:
    """How ``program.ir`` names a weight: the BLOBFILE and metadata offset holding it."""
    return f"{file}@{offset}"


def program_ir_text(graph: Graph, program: MilProgram) -> str:
    """The compiled program in anec IR, with its weights keyed by BLOBFILE.

    This is the exact program the MIL text encodes (after every pass), so
    the reference interpreter can check a runtime against an artifact
    directory alone: each weight const reads ``"weights/w.bin@64"``, the
    payload the MIL's BLOBFILE reference points at (perm/slice already
    applied there).
    """
    by_name = {n.results[0].name: n for n in graph.nodes if n.op == "const"}
    keyed = {id(by_name[name]): {"weight": key} for name, key in weight_keys(program).items()}
    return ("// The compiled program in anec IR: the same ops as model.mil; weights are\n"
            "// keyed by the BLOBFILE and metadata offset that hold them.\n" + print_graph(graph, keyed))


def weight_keys(program: MilProgram) -> dict[str, str]:
    """IR const name -> how ``program.ir`` names its weight: the BLOBFILE and metadata offset
    holding it (:func:`blob_key`), or for a compressed weight the keys of its payloads joined
    by ``+`` (the interpreter decompresses them, :func:`artifact_weights`)."""
    keys: dict[str, list[str]] = {}
    for slot in program.weights:
        keys.setdefault(slot.node.results[0].name, []).append(blob_key(slot.file, slot.offset))
    return {name: "+".join(k) for name, k in keys.items()}


def artifact_weights(artifact: "Artifact") -> dict[str, np.ndarray]:
    """The weights of ``program.ir`` (keyed as :func:`weight_keys` does) read from the blobs;
    compressed weights are decompressed (numpy, :func:`anec.compress.decompress`) exactly as
    their MIL ``constexpr_*`` op says."""
    readers: dict[str, BlobReader] = {}
    out: dict[str, np.ndarray] = {}
    groups: dict[str, list[tuple[WeightEntry, np.ndarray]]] = {}
    for w in artifact.manifest.weights:
        rel = w.file
        if rel not in readers:
            readers[rel] = BlobReader(artifact.blobs[rel], name=rel)
        arr = readers[rel].read(w.offset, blob_np_name(w.dtype))
        if w.part:
            groups.setdefault(w.part.of, []).append((w, arr))
            continue
        out[blob_key(rel, w.offset)] = arr.reshape(w.shape)
    for of, parts in groups.items():
        out["+".join(blob_key(w.file, w.offset) for w, _ in parts)] = decompress_parts(parts)
    return out


def blob_np_name(dtype: str) -> str:
    """A manifest weight dtype as :class:`BlobReader` names it (``fp16`` -> ``float16``;
    sub-byte names stay)."""
    return {"fp16": "float16", "fp32": "float32"}.get(dtype, dtype)


def decompress_parts(parts: list[tuple[WeightEntry, np.ndarray]]) -> np.ndarray:
    """The dense fp16 tensor of one compressed weight from its manifest part entries and
    payloads (1-D arrays as read)."""
    first = parts[0][0].part
    assert first is not None
    fmt = get_format(first.format)
    shape = tuple(first.shape)
    roles = {}
    for w, arr in parts:
        p = w.part
        assert p is not None
        if p.packed:
            arr = unpack_bits(np.ascontiguousarray(arr).tobytes(), fmt.bits, int(math.prod(shape)))
        roles[p.role] = arr
    if "lut" in roles:
        roles["lut"] = roles["lut"].reshape(-1, 1 << fmt.bits)
    return decompress(fmt, int(first.axis), shape, roles)


def build_blobs(program: MilProgram, store: Mapping[str, np.ndarray] | None
                ) -> tuple[dict[str, BlobWriter] | None, list[dict]]:
    """The BLOBFILEs of ``program``'s weight plan (a writer per file, its payloads views of
    the store where no conversion is needed) and the manifest weight entries.

    A payload of a compressed weight comes from its decision (:mod:`anec.compress`),
    sub-byte payloads packed as coremltools packs them. Without a store (``anec mil``)
    there are no blobs and each entry's ``sha256`` is None.
    """
    entries = []
    writers: dict[str, BlobWriter] = {}
    payloads = []
    for slot in program.weights:
        if store is not None:
            packed = None
            if slot.part is not None:
                arr, hashed, packed = _part_payload(slot)
            else:
                # a view of the (memory-mapped) store when no conversion is needed: the blob
                # is the one copy
                arr = hashed = materialize(slot.node, store, copy=False)
            writer = writers.setdefault(slot.file, BlobWriter())
            offset = writer.add(arr, dtype=slot.storage, packed=packed)
            if offset != slot.offset:  # the emitter's plan and the writer must agree
                raise PassError(f"emit-mil: blob offset {offset} != planned {slot.offset} in {slot.file}")
            payloads.append(hashed)
    if store is None:
        digests: list[Any] = [None] * len(program.weights)
    elif hashes_deferred():  # Futures: Artifact.build leaves them to Artifact.finish
        pool = hash_pool()
        digests = [pool.submit(array_sha256, a) for a in payloads]
    else:
        digests = payload_digests(payloads)
    for slot, digest in zip(program.weights, digests):
        entry = {
            "key": slot.key, "const": slot.const, "file": slot.file, "path": slot.path,
            "offset": slot.offset, "dtype": slot.dtype_name, "shape": list(slot.type.shape),
            "perm": list(slot.perm) if slot.perm is not None else None,
            "slice": list(slot.slice) if slot.slice is not None else None,
            "sha256": digest,
        }
        if slot.part is not None:
            entry["part"] = dict(slot.part)
        entries.append(entry)
    return (writers if store is not None else None), entries


def _part_payload(slot: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """(what the writer adds, the payload bytes as an array for the hash, the packed payload
    and its padding bits for a sub-byte dtype or None) of one payload of a compressed weight."""
    comp = slot.decision.compressed
    if comp is None:
        raise PassError(f"emit-mil: compressed weight '{slot.part['of']}' has no payloads")
    arr = np.ascontiguousarray(comp.parts[slot.part["role"]])
    if slot.part.get("packed"):  # ios16 LUT indices: the packed bytes as uint8
        arr = np.frombuffer(pack_bits(arr, comp.fmt.bits)[0], np.uint8)
    arr = arr.reshape(slot.type.shape)
    if slot.storage is not None:
        raw, padding = pack_bits(arr, SUBBYTE_BITS[slot.storage])
        packed = np.frombuffer(raw, np.uint8)
        return arr, packed, (packed, padding)
    return arr, arr, None


def compression_report(program: MilProgram) -> list[dict]:
    """The manifest's ``compression``: per weight const stored by a compression decision,
    the format used, the one asked for, bytes, the errors and the formats that fell back."""
    out, seen = [], set()
    for slot in program.weights:
        d = slot.decision
        name = slot.part["of"] if slot.part else slot.const
        if d is None or name in seen:
            continue
        seen.add(name)
        out.append({"const": name, **jsonable(d.report())})
    for name, d in (program.uncompressed or {}).items():
        if name not in seen:
            seen.add(name)
            out.append({"const": name, **jsonable(d.report())})
    return out


WEIGHT_INPUTS_DIR = "inputs"


def build_weight_inputs(graph: Graph, store: Mapping[str, np.ndarray] | None, defer: bool = False
                        ) -> tuple[BlobFiles, list[dict]]:
    """The initial values of the weights compiled as inputs (``graph.facts.weight_inputs``):
    one BLOBFILE each under ``inputs/`` (never referenced by the MIL; the runtime writes them
    into the input surfaces), and their manifest entries. With ``defer`` (for
    :meth:`Artifact.build`, whose :meth:`~Artifact.finish` waits for them) each entry's
    ``sha256`` is a Future within :func:`anec.hashing.deferred_hashes`."""
    blobs: dict[str, BlobWriter] = {}
    entries = []
    for w in graph.facts.weight_inputs:
        file = f"{WEIGHT_INPUTS_DIR}/{w['input']}.bin"
        digest = None
        if store is not None:
            attrs = {"weight": w["key"], "perm": w.get("perm"), "slice": w.get("slice")}
            arr = materialize_attrs(attrs, TensorType(DType(w["dtype"]), tuple(w["shape"])), store, w["input"],
                                    copy=False)  # a view of the store where no conversion is needed
            writer = BlobWriter()
            writer.add(arr)
            blobs[file] = writer
            digest = hash_pool().submit(array_sha256, arr) if defer and hashes_deferred() else array_sha256(arr)
        entries.append({"key": w["key"], "input": w["input"], "file": file, "offset": HEADER_BYTES, "dtype": w["dtype"],
                        "shape": list(w["shape"]), "perm": w.get("perm"), "slice": w.get("slice"),
                        "sha256": digest})
    return BlobFiles(blobs), entries


def file_source(blobs: Mapping[str, bytes], rel: str) -> TreeFile:
    """What writes weight file ``rel`` of ``blobs``: its bytes, or the writer streaming them."""
    return blobs.source(rel) if isinstance(blobs, BlobFiles) else blobs[rel]


def file_bytes(blobs: Mapping[str, bytes], rel: str) -> bytes:
    """Weight file ``rel``'s bytes, built for this read only: reading a compiled artifact's
    :class:`~anec.mil.blobfile.BlobFiles` through the mapping would keep each file's bytes
    for the artifact's life (a second copy of the weights next to the runtime's)."""
    src = file_source(blobs, rel)
    return src if isinstance(src, bytes) else src.to_bytes()


def artifact_weight_inputs(artifact: "Artifact") -> dict[str, np.ndarray]:
    """Input name -> initial value of every weight compiled as an input."""
    out = {}
    for w in artifact.manifest.weight_inputs:
        arr = BlobReader(file_bytes(artifact.blobs, w.file), name=w.file).read(w.offset, DType(w.dtype).np)
        out[w.input] = arr.reshape(w.shape)
    return out


def _all_weight_entries(manifest: Manifest) -> list[WeightEntry | WeightInputEntry]:
    return [*manifest.weights, *manifest.weight_inputs]


@dataclass
class Artifact:
    """One compiled program: what the runtime loads."""

    func: str
    mil_text: str
    blobs: Mapping[str, bytes]
    """Weight file path relative to the artifact dir (``weights/w1.bin``) -> bytes. A
    compiled artifact holds a :class:`~anec.mil.blobfile.BlobFiles`: each file's bytes are
    built when first read, and writing the artifact streams the weights to disk instead."""
    manifest: Manifest
    """The manifest, typed (its JSON object, as written: ``manifest.document``)."""
    program: MilProgram | None = field(default=None, repr=False, compare=False)
    """The emitter's result (names, weight plan) when built in this process."""
    program_ir: str = ""
    """The compiled program in anec IR (``program.ir``), weights keyed by BLOBFILE."""
    pending: list = field(default_factory=list, repr=False, compare=False)
    """(manifest weight entry, Future of its sha256) while the hashes are computed (see
    :func:`anec.hashing.deferred_hashes`); the entries say None until :meth:`finish`."""

    @classmethod
    def build(cls, graph: Graph, program: MilProgram, target: "Target",
              weights: Mapping[str, np.ndarray] | None, rewrites: Iterable[Mapping] = ()) -> "Artifact":
        """Materialize the weights of ``program`` and assemble the manifest.

        With ``weights=None`` the artifact has MIL and a manifest but no
        weight files (:attr:`complete` is False) and cannot be written.
        """
        blobs, entries = build_blobs(program, weights)
        input_blobs, input_entries = build_weight_inputs(graph, weights, defer=True)
        ir_text = program_ir_text(graph, program)
        manifest = build_manifest(graph, program, target, entries, rewrites, ir_text)
        if input_entries:
            manifest["weight_inputs"] = input_entries
        report = compression_report(program)
        if report:
            manifest["compression"] = report
        if graph.facts.activations is not None:
            manifest["activations"] = jsonable(graph.facts.activations)
        files = BlobFiles({**(blobs or {}), **{rel: input_blobs.source(rel) for rel in input_blobs}})
        pending = [(e, e["sha256"]) for e in [*entries, *input_entries]
                   if not (e["sha256"] is None or isinstance(e["sha256"], str))]
        for e, _ in pending:
            e["sha256"] = None
        return cls(graph.name, program.text, files, Manifest.of(manifest), program, ir_text, pending)

    def finish(self) -> None:
        """Wait for the weight hashes still being computed and put them in the manifest."""
        if self.pending:
            for entry, digest in self.pending:
                entry["sha256"] = digest.result()
            self.pending = []
            self.manifest = Manifest.of(self.manifest.document)

    def cancel(self) -> None:
        """Let go of the weight hashes not yet computed: for an artifact that is never
        written or loaded (a compile planned again without it); its entries stay None."""
        for _, digest in self.pending:
            digest.cancel()
        self.pending = []

    @property
    def complete(self) -> bool:
        """True when every weight file (the MIL's and the weight inputs') is present."""
        return all(w.file in self.blobs for w in _all_weight_entries(self.manifest))

    # ---- summary ------------------------------------------------------------
    def weight_bytes(self) -> int:
        return sum(payload_bytes(w.dtype, math.prod(w.shape)) for w in self.manifest.weights)

    def op_count(self) -> int:
        """MIL statements, consts included."""
        return sum(1 for line in self.mil_text.splitlines() if line.startswith(" " * 8))

    # ---- files ---------------------------------------------------------------
    def files(self) -> dict[str, TreeFile]:
        """Every file of the artifact directory, relative path -> bytes (a weight file not
        read yet: the :class:`~anec.mil.blobfile.BlobWriter` that writes it)."""
        self.finish()
        if not self.complete:
            missing = next(w.file for w in _all_weight_entries(self.manifest) if w.file not in self.blobs)
            raise ArtifactError(
                f"artifact '{self.func}' has no weight data ({missing} is missing)",
                hint="compile with weights: --weights FILE or --random-weights SEED",
            )
        document = self.manifest.document
        validate_manifest(document, f"the manifest of '{self.func}'")  # never write what load refuses
        check_written(self.manifest, Manifest.of(document), self.func)
        out = {MIL_FILE: self.mil_text.encode("utf-8"), PROGRAM_IR_FILE: self.program_ir.encode("utf-8")}
        for rel in sorted(self.blobs):
            check_rel(rel, "weight file")
            out[rel] = file_source(self.blobs, rel)
        out[MANIFEST_FILE] = (format_json(document) + "\n").encode("utf-8")
        return out

    def write(self, directory: str | os.PathLike) -> Path:
        """Write the artifact to ``directory`` atomically; returns the path.

        An existing artifact there is replaced; an existing non-empty
        directory that is not an artifact is refused (ArtifactError), so a
        mistyped ``-o`` never deletes user files.
        """
        return write_artifact_dir(directory, self.files())

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "Artifact":
        """Read an artifact directory and check it against its manifest."""
        with Beneath.open(directory) as d:
            return cls.read(d)

    @classmethod
    def read(cls, d: Beneath, manifest_sha: str | None = None) -> "Artifact":
        """The artifact in ``d``; with ``manifest_sha``, its manifest must have that sha256."""
        where = d.path / MANIFEST_FILE
        if d.kind(MANIFEST_FILE) is None:
            raise ArtifactError(f"'{d.path}' is not an artifact: {MANIFEST_FILE} is missing",
                                hint="compile first: anec compile model.ir -o DIR")
        data = d.read(MANIFEST_FILE, MANIFEST_MAX_BYTES, "manifest")
        if manifest_sha is not None and sha256(data) != manifest_sha:
            raise ArtifactError(f"{where} is not the manifest the output index {OUTPUT_INDEX} names",
                                hint="the output was modified after compiling; recompile it")
        manifest = parse_manifest(data, str(where))  # the one validation, before anything reads it
        mil_rel = manifest.mil.file
        mil_bytes = d.read(mil_rel, MIL_MAX_BYTES, "MIL text")
        if sha256(mil_bytes) != manifest.mil.sha256:
            raise ArtifactError(f"{d.path / mil_rel} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        mil_text = decode_utf8(mil_bytes, d.path / mil_rel, "MIL text")
        blobs: dict[str, bytes] = {}
        readers: dict[str, BlobReader] = {}
        for w in _all_weight_entries(manifest):
            rel = w.file
            if rel not in readers:
                readers[rel] = BlobReader(d.read(rel, BLOB_MAX_BYTES, "weight file"), name=str(d.path / rel))
                blobs[rel] = readers[rel].data
            r = readers[rel]
            entry = r.entry(w.offset)
            numel = math.prod(w.shape)
            if entry.dtype != blob_np_name(w.dtype) or entry.size != payload_bytes(w.dtype, numel) or \
                    entry.count != numel:
                raise ArtifactError(
                    f"{r.name} offset {w.offset}: holds {entry.size} bytes of {entry.dtype}, the manifest "
                    f"says {w.dtype}{list(w.shape)} for weight '{w.key}'"
                )
            if sha256(r.payload(w.offset)) != w.sha256:
                raise ArtifactError(
                    f"{r.name} offset {w.offset}: weight '{w.key}' does not match its sha256",
                    hint="the weight file was modified after compiling; recompile it",
                )
        ir_rel = manifest.program_ir.file
        ir_bytes = d.read(ir_rel, PROGRAM_IR_MAX_BYTES, "program IR")
        if sha256(ir_bytes) != manifest.program_ir.sha256:
            raise ArtifactError(f"{d.path / ir_rel} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        ir_text = decode_utf8(ir_bytes, d.path / ir_rel, "program IR")
        return cls(manifest.func, mil_text, blobs, manifest, None, ir_text)

    def program_module(self) -> "Module":
        """``program.ir`` parsed (for the reference interpreter)."""
        return parse(self.program_ir, filename=f"{self.func}/{PROGRAM_IR_FILE}", target_forms=True)


def write_artifact_dir(directory: str | os.PathLike, files: Mapping[str, TreeFile]) -> Path:
    """Make ``directory`` hold exactly ``files`` (an artifact), atomically. An existing artifact
    is replaced; a non-empty directory that is not one is refused (ArtifactError)."""
    dest = Path(directory)
    if os.path.lexists(dest):
        with Beneath.open(real_dir(dest)) as d:
            if d.names() and d.kind(MANIFEST_FILE) != "file":
                raise ArtifactError(
                    f"refusing to replace '{dest}': it is a non-empty directory without {MANIFEST_FILE}",
                    hint="choose an empty or new output directory",
                )
    write_tree_atomic(dest, files)
    return dest


def decode_utf8(data: bytes, path: Path, what: str) -> str:
    """``data`` as text; ArtifactError naming ``path`` and the first bad byte otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{path}: the {what} is not valid UTF-8 (byte {e.start})",
                            hint="the artifact is damaged or was not written by anec; recompile it") from None


