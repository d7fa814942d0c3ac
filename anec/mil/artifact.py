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

A compile output (``anec compile -o out``) is one directory per func plus an
index, ``out/.anec-output.json``, naming every func and the sha256 of its
manifest; it is written last, so an output is complete exactly when it has
one. Writing is all or nothing for the whole output (:func:`write_output`;
:meth:`Artifact.write` for one func): every file is written and fsynced into a
temporary directory ``.out.anec-tmp-*`` next to the destination, which then
replaces the destination in one rename; writers of one destination take turns
(a lock file ``.out.anec-lock``) and each removes the temporary directories
killed writers left. Readers (:func:`load_artifact`, the runtime, ``anec run``)
never take a temporary directory.

:meth:`Artifact.load` reads through :class:`~anec.mil.beneath.Beneath` (no
symbolic link followed, regular files of bounded size only), validates the
manifest before anything else reads it, and checks every file against it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import stat
from concurrent import futures
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from anec import __version__
from anec.diagnostics import ArtifactError, PassError, Span, did_you_mean
from anec.ir.graph import Graph, Module
from anec.ir.types import DType, TensorType
from anec.fsutil import discard, fsync_dir, move_into_place
from anec.mil.beneath import Beneath, check_rel
from anec.mil.blobfile import HEADER_BYTES, BlobFiles, BlobReader, BlobWriter, pack_bits, payload_bytes
from anec.mil.emitter import MilProgram
from anec.mil.manifest import FORMAT, MANIFEST_MAX_BYTES, parse_json, parse_manifest, validate_manifest

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


def sha256(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


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


def jsonable(obj: Any) -> Any:
    """Graph metadata and rewrite records as plain JSON values."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=str) if isinstance(obj, (set, frozenset)) else obj
        return [jsonable(v) for v in items]
    if isinstance(obj, DType):
        return obj.value
    if isinstance(obj, TensorType):
        return str(obj)
    if isinstance(obj, Span):
        return obj.location
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


_ONE_LINE = (", ", ": ")


def format_json(obj: Any, indent: int = 0) -> str:
    """JSON with 2-space indents, but lists of numbers and small flat dicts on one line.

    Shapes such as ``[1, 768, 1, 64]`` stay readable instead of taking a line
    per dimension; the result is ordinary JSON (``json.loads`` reads it).
    """
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if all(not isinstance(v, (dict, list)) or _scalar_list(v) for v in obj.values()):
            one = json.dumps(obj, separators=_ONE_LINE)  # what the pieces below join to, in C
            if len(one) <= 120:
                return one
        items = [f"{inner}{json.dumps(k)}: {format_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        if _scalar_list(obj):
            return json.dumps(obj, separators=_ONE_LINE)
        return "[\n" + ",\n".join(inner + format_json(v, indent + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj)


def _scalar_list(v: Any) -> bool:
    return isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)


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
    from anec.ir.printer import print_graph

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
    groups: dict[str, list[tuple[dict, np.ndarray]]] = {}
    for w in artifact.manifest["weights"]:
        rel = w["file"]
        if rel not in readers:
            readers[rel] = BlobReader(artifact.blobs[rel], name=rel)
        arr = readers[rel].read(w["offset"], blob_np_name(w["dtype"]))
        if w.get("part"):
            groups.setdefault(w["part"]["of"], []).append((w, arr))
            continue
        out[blob_key(rel, w["offset"])] = arr.reshape(w["shape"])
    for of, parts in groups.items():
        out["+".join(blob_key(w["file"], w["offset"]) for w, _ in parts)] = decompress_parts(parts)
    return out


def blob_np_name(dtype: str) -> str:
    """A manifest weight dtype as :class:`BlobReader` names it (``fp16`` -> ``float16``;
    sub-byte names stay)."""
    return {"fp16": "float16", "fp32": "float32"}.get(dtype, dtype)


def decompress_parts(parts: list[tuple[dict, np.ndarray]]) -> np.ndarray:
    """The dense fp16 tensor of one compressed weight from its manifest part entries and
    payloads (1-D arrays as read)."""
    from anec.compress import decompress, get_format
    from anec.mil.blobfile import unpack_bits

    first = parts[0][0]["part"]
    fmt = get_format(first["format"])
    shape = tuple(first["shape"])
    roles = {}
    for w, arr in parts:
        p = w["part"]
        if p.get("packed"):
            arr = unpack_bits(np.ascontiguousarray(arr).tobytes(), fmt.bits, int(math.prod(shape)))
        roles[p["role"]] = arr
    if "lut" in roles:
        roles["lut"] = roles["lut"].reshape(-1, 1 << fmt.bits)
    return decompress(fmt, int(first["axis"]), shape, roles)


_PARALLEL_BYTES = 1 << 20
"""Payloads at least this large are hashed (and files this large written) on worker threads:
hashlib and file writes release the GIL."""


def _workers(sizes: list[int]) -> int:
    big = sum(1 for n in sizes if n >= _PARALLEL_BYTES)
    return min(big, os.cpu_count() or 1, 8)


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(memoryview(a.reshape(-1)).cast("B")).hexdigest()


def payload_digests(arrays: list[np.ndarray]) -> list[str]:
    """sha256 of each array's bytes (row-major), hashed in place, large ones in parallel."""
    workers = _workers([a.nbytes for a in arrays])
    if workers < 2:
        return [_digest(a) for a in arrays]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(_digest, arrays))


_deferring: ContextVar[bool] = ContextVar("anec_defer_weight_hashes", default=False)
_pools: dict[str, tuple[int, Any]] = {}  # name -> (pid, ThreadPoolExecutor)


@contextmanager
def deferred_hashes() -> Iterator[None]:
    """Within this block :meth:`Artifact.build` hashes the weights on worker threads and
    returns at once: each manifest's weight ``sha256`` is filled in by
    :meth:`Artifact.finish` (which :meth:`Artifact.files`, and so every write, calls first).
    :func:`anec.compiler.compile_module` builds its artifacts so, and
    :func:`write_output` streams the weights to disk while they are hashed."""
    token = _deferring.set(True)
    try:
        yield
    finally:
        _deferring.reset(token)


def _pool(name: str, workers: int) -> Any:
    """The process's worker threads ``anec-<name>``: made on first use and kept (a compile
    would otherwise start dozens of threads, each a wait on a busy machine); made again in a
    forked child."""
    kept = _pools.get(name)
    if kept is None or kept[0] != os.getpid():
        kept = _pools[name] = (os.getpid(), futures.ThreadPoolExecutor(workers, thread_name_prefix=f"anec-{name}"))
    return kept[1]


def hash_pool() -> Any:
    """The process's worker threads for work on the cores that releases the GIL: the deferred
    weight hashes, and the page prefault of :func:`anec.weights.touch_pages` (one per core)."""
    return _pool("hash", os.cpu_count() or 1)


def build_blobs(program: MilProgram, store: Mapping[str, np.ndarray] | None
                ) -> tuple[dict[str, BlobWriter] | None, list[dict]]:
    """The BLOBFILEs of ``program``'s weight plan (a writer per file, its payloads views of
    the store where no conversion is needed) and the manifest weight entries.

    A payload of a compressed weight comes from its decision (:mod:`anec.compress`),
    sub-byte payloads packed as coremltools packs them. Without a store (``anec mil``)
    there are no blobs and each entry's ``sha256`` is None.
    """
    from anec.weights import materialize

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
    elif _deferring.get():  # Futures: Artifact.build leaves them to Artifact.finish
        pool = hash_pool()
        digests = [pool.submit(_digest, a) for a in payloads]
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
        from anec.mil.blobfile import SUBBYTE_BITS

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


def build_weight_inputs(graph: Graph, store: Mapping[str, np.ndarray] | None
                        ) -> tuple[BlobFiles, list[dict]]:
    """The initial values of the weights compiled as inputs (``graph.facts.weight_inputs``):
    one BLOBFILE each under ``inputs/`` (never referenced by the MIL; the runtime writes them
    into the input surfaces), and their manifest entries."""
    from anec.weights import materialize_attrs

    blobs: dict[str, BlobWriter] = {}
    entries = []
    for w in graph.facts.weight_inputs:
        file = f"{WEIGHT_INPUTS_DIR}/{w['input']}.bin"
        digest = None
        if store is not None:
            attrs = {"weight": w["key"], "perm": w.get("perm"), "slice": w.get("slice")}
            arr = materialize_attrs(attrs, TensorType(DType(w["dtype"]), tuple(w["shape"])), store, w["input"])
            writer = BlobWriter()
            writer.add(arr)
            blobs[file] = writer
            digest = payload_digests([arr])[0]
        entries.append({"key": w["key"], "input": w["input"], "file": file, "offset": HEADER_BYTES, "dtype": w["dtype"],
                        "shape": list(w["shape"]), "perm": w.get("perm"), "slice": w.get("slice"),
                        "sha256": digest})
    return BlobFiles(blobs), entries


def file_source(blobs: Mapping[str, bytes], rel: str) -> "bytes | BlobWriter":
    """What writes weight file ``rel`` of ``blobs``: its bytes, or the writer streaming them."""
    return blobs.source(rel) if isinstance(blobs, BlobFiles) else blobs[rel]


def artifact_weight_inputs(artifact: "Artifact") -> dict[str, np.ndarray]:
    """Input name -> initial value of every weight compiled as an input."""
    out = {}
    for w in artifact.manifest.get("weight_inputs", []):
        arr = BlobReader(artifact.blobs[w["file"]], name=w["file"]).read(w["offset"], DType(w["dtype"]).np)
        out[w["input"]] = arr.reshape(w["shape"])
    return out


def _all_weight_entries(manifest: Mapping[str, Any]) -> list[dict]:
    return list(manifest["weights"]) + list(manifest.get("weight_inputs", []))


@dataclass
class Artifact:
    """One compiled program: what the runtime loads."""

    func: str
    mil_text: str
    blobs: Mapping[str, bytes]
    """Weight file path relative to the artifact dir (``weights/w1.bin``) -> bytes. A
    compiled artifact holds a :class:`~anec.mil.blobfile.BlobFiles`: each file's bytes are
    built when first read, and writing the artifact streams the weights to disk instead."""
    manifest: dict
    program: MilProgram | None = field(default=None, repr=False, compare=False)
    """The emitter's result (names, weight plan) when built in this process."""
    program_ir: str = ""
    """The compiled program in anec IR (``program.ir``), weights keyed by BLOBFILE."""
    pending: list = field(default_factory=list, repr=False, compare=False)
    """Manifest weight entries whose sha256 is still being computed (see :func:`deferred_hashes`)."""

    @classmethod
    def build(cls, graph: Graph, program: MilProgram, target: "Target",
              weights: Mapping[str, np.ndarray] | None, rewrites: Iterable[Mapping] = ()) -> "Artifact":
        """Materialize the weights of ``program`` and assemble the manifest.

        With ``weights=None`` the artifact has MIL and a manifest but no
        weight files (:attr:`complete` is False) and cannot be written.
        """
        blobs, entries = build_blobs(program, weights)
        input_blobs, input_entries = build_weight_inputs(graph, weights)
        ir_text = program_ir_text(graph, program)
        manifest = build_manifest(graph, program, target, entries, rewrites, ir_text)
        if input_entries:
            manifest["weight_inputs"] = input_entries
        report = compression_report(program)
        if report:
            manifest["compression"] = report
        files = BlobFiles({**(blobs or {}), **{rel: input_blobs.source(rel) for rel in input_blobs}})
        pending = [e for e in entries if not (e["sha256"] is None or isinstance(e["sha256"], str))]
        return cls(graph.name, program.text, files, manifest, program, ir_text, pending)

    def finish(self) -> None:
        """Wait for the weight hashes still being computed and put them in the manifest."""
        for entry in self.pending:
            entry["sha256"] = entry["sha256"].result()
        self.pending = []

    @property
    def complete(self) -> bool:
        """True when every weight file (the MIL's and the weight inputs') is present."""
        return all(w["file"] in self.blobs for w in _all_weight_entries(self.manifest))

    # ---- summary ------------------------------------------------------------
    def weight_bytes(self) -> int:
        return sum(payload_bytes(w["dtype"], math.prod(w["shape"])) for w in self.manifest["weights"])

    def op_count(self) -> int:
        """MIL statements, consts included."""
        return sum(1 for line in self.mil_text.splitlines() if line.startswith(" " * 8))

    # ---- files ---------------------------------------------------------------
    def files(self) -> dict[str, "bytes | BlobWriter"]:
        """Every file of the artifact directory, relative path -> bytes (a weight file not
        read yet: the :class:`~anec.mil.blobfile.BlobWriter` that writes it)."""
        self.finish()
        if not self.complete:
            missing = next(w["file"] for w in _all_weight_entries(self.manifest) if w["file"] not in self.blobs)
            raise ArtifactError(
                f"artifact '{self.func}' has no weight data ({missing} is missing)",
                hint="compile with weights: --weights FILE or --random-weights SEED",
            )
        validate_manifest(self.manifest, f"the manifest of '{self.func}'")  # never write what load refuses
        out = {MIL_FILE: self.mil_text.encode("utf-8"), PROGRAM_IR_FILE: self.program_ir.encode("utf-8")}
        for rel in sorted(self.blobs):
            check_rel(rel, "weight file")
            out[rel] = file_source(self.blobs, rel)
        out[MANIFEST_FILE] = (format_json(self.manifest) + "\n").encode("utf-8")
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
            return cls._load(d)

    @classmethod
    def _load(cls, d: Beneath, manifest_sha: str | None = None) -> "Artifact":
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
        mil_rel = manifest["mil"]["file"]
        mil_bytes = d.read(mil_rel, MIL_MAX_BYTES, "MIL text")
        if sha256(mil_bytes) != manifest["mil"]["sha256"]:
            raise ArtifactError(f"{d.path / mil_rel} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        mil_text = decode_utf8(mil_bytes, d.path / mil_rel, "MIL text")
        blobs: dict[str, bytes] = {}
        readers: dict[str, BlobReader] = {}
        for w in _all_weight_entries(manifest):
            rel = w["file"]
            if rel not in readers:
                readers[rel] = BlobReader(d.read(rel, BLOB_MAX_BYTES, "weight file"), name=str(d.path / rel))
                blobs[rel] = readers[rel].data
            r = readers[rel]
            entry = r.entry(w["offset"])
            numel = math.prod(w["shape"])
            if entry.dtype != blob_np_name(w["dtype"]) or entry.size != payload_bytes(w["dtype"], numel) or \
                    entry.count != numel:
                raise ArtifactError(
                    f"{r.name} offset {w['offset']}: holds {entry.size} bytes of {entry.dtype}, the manifest "
                    f"says {w['dtype']}{w['shape']} for weight '{w['key']}'"
                )
            if sha256(r.payload(w["offset"])) != w["sha256"]:
                raise ArtifactError(
                    f"{r.name} offset {w['offset']}: weight '{w['key']}' does not match its sha256",
                    hint="the weight file was modified after compiling; recompile it",
                )
        ir_rel = manifest["program_ir"]["file"]
        ir_bytes = d.read(ir_rel, PROGRAM_IR_MAX_BYTES, "program IR")
        if sha256(ir_bytes) != manifest["program_ir"]["sha256"]:
            raise ArtifactError(f"{d.path / ir_rel} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        ir_text = decode_utf8(ir_bytes, d.path / ir_rel, "program IR")
        return cls(manifest["func"], mil_text, blobs, manifest, None, ir_text)

    def program_module(self) -> "Module":
        """``program.ir`` parsed (for the reference interpreter)."""
        from anec.ir.parser import parse

        return parse(self.program_ir, filename=f"{self.func}/{PROGRAM_IR_FILE}", target_forms=True)


def write_artifact_dir(directory: str | os.PathLike, files: Mapping[str, "bytes | BlobWriter"]) -> Path:
    """Make ``directory`` hold exactly ``files`` (an artifact), atomically. An existing artifact
    is replaced; a non-empty directory that is not one is refused (ArtifactError)."""
    dest = Path(directory)
    if _exists(dest):
        with Beneath.open(_real_dir(dest)) as d:
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


# ---------------------------------------------------------------------------
# compile outputs: one directory per func and the output index


def _func_dir_name(name: Any) -> str:
    if not isinstance(name, str) or not name or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise ArtifactError(f"func name {name!r:.60} cannot name a directory of the output")
    return name


def write_output(out: str | os.PathLike, artifacts: Mapping[str, "Artifact"],
                 keep_funcs: bool = False) -> dict[str, Path]:
    """Write every func's artifact to ``out/<func>/`` and the output index, all or nothing.

    ``out`` is replaced as a whole, and a reader sees the complete previous
    output or the complete new one. Afterwards it holds exactly these funcs;
    with ``keep_funcs`` also the funcs of the previous output that these do
    not replace (hard-linked into the new tree, so adding one func costs no
    copy). An existing ``out`` must be empty, an anec output or an artifact,
    so a mistyped ``-o`` never deletes user files. Returns func -> directory.
    """
    dest = Path(out)
    early: dict[str, "bytes | BlobWriter"] = {}
    for name, art in artifacts.items():
        d = _func_dir_name(name)
        if not art.complete:
            art.files()  # the error naming the missing weight file
        for rel, data in _early_files(art):
            early[f"{d}/{rel}"] = data
    index: dict[str, str] = {}

    def last(tmp: Path) -> dict[str, bytes]:
        """While the weight files, MIL and program.ir are written: every other file (the
        manifests wait for the weight hashes computed meanwhile) and the output index, with
        the kept funcs linked in first; runs under the write lock, so the previous output is
        stable. (The order of the writes into the temporary directory does not matter: the
        output appears whole, by a rename, once every file is fsynced.)"""
        rest: dict[str, "bytes | BlobWriter"] = {}
        for name, art in artifacts.items():
            d = _func_dir_name(name)
            for rel, data in art.files().items():
                if f"{d}/{rel}" not in early:
                    rest[f"{d}/{rel}"] = data
            index[d] = sha256(rest[f"{d}/{MANIFEST_FILE}"])
        kept = _link_funcs(dest, tmp, exclude=index) if keep_funcs and _exists(dest) else {}
        marker = {"format": OUTPUT_FORMAT, "anec_version": __version__, "funcs": {**kept, **index}}
        return {**rest, OUTPUT_INDEX: (format_json(marker) + "\n").encode("utf-8")}

    if _exists(dest):
        _check_replaceable_output(dest)
    write_tree_atomic(dest, early, last)
    return {name: dest / name for name in artifacts}


def _early_files(art: Any) -> list[tuple[str, "bytes | BlobWriter"]]:
    """The files of an artifact (and of a pipeline's stages) that do not wait for the weight
    hashes, relative path -> bytes or the writer streaming them: the weight files, the MIL and
    program.ir. :func:`write_output` writes them first, so their fsyncs overlap; the manifests
    follow once the hashes are known."""
    out = []
    stages = getattr(art, "stages", None)
    if stages is not None:  # a pipeline: its manifest names each stage's directory
        for entry, stage in zip(art.manifest["stages"], stages):
            check_rel(entry["dir"], "stage directory")
            out += [(f"{entry['dir']}/{rel}", data) for rel, data in _early_files(stage)]
    else:
        out.append((MIL_FILE, art.mil_text.encode("utf-8")))
    out.append((PROGRAM_IR_FILE, art.program_ir.encode("utf-8")))
    for rel in art.blobs:
        check_rel(rel, "weight file")
        out.append((rel, file_source(art.blobs, rel)))
    return out


def _link_funcs(dest: Path, tmp: Path, exclude: Mapping[str, str]) -> dict[str, str]:
    """Hard-link the func directories of the output ``dest`` (all but ``exclude``) into
    ``tmp``; func -> manifest sha256. Only plain directories and regular files are taken."""
    kept: dict[str, str] = {}
    with Beneath.open(_real_dir(dest)) as d:
        if d.kind(MANIFEST_FILE) is not None:
            return kept  # a single artifact, not an output: nothing to keep
        for name, digest in output_funcs(d).items():
            if name in exclude:
                continue
            with d.subdir(name, "func directory") as sub:
                _link_tree(sub, tmp / name)
                kept[name] = digest or sha256(sub.read(MANIFEST_FILE, MANIFEST_MAX_BYTES, "manifest"))
    return kept


def _link_tree(src: Beneath, to: Path) -> None:
    to.mkdir()
    for name in src.names():
        kind = src.kind(name)
        if kind == "directory":
            with src.subdir(name) as sub:
                _link_tree(sub, to / name)
        elif kind == "file":
            try:
                os.link(name, to / name, src_dir_fd=src.fileno, follow_symlinks=False)
            except OSError:  # no hard links here: copy
                _write_file(to / name, src.read(name, BLOB_MAX_BYTES, "file"))
        else:
            raise ArtifactError(f"cannot keep '{src.path / name}' in the output: it is a {kind}",
                                hint="recompile that func, or write the output without keeping funcs")


def _check_replaceable_output(dest: Path) -> None:
    """ArtifactError unless ``dest`` is empty, an anec output or an artifact (outputs of
    older versions: func directories with a manifest, and their writers' temporary
    directories)."""
    with Beneath.open(_real_dir(dest)) as d:
        names = d.names()
        if not names or d.kind(OUTPUT_INDEX) == "file" or d.kind(MANIFEST_FILE) == "file":
            return
        for n in names:
            if is_temp_name(n):
                continue
            if d.kind(n) == "directory":
                with d.subdir(n) as sub:
                    if sub.kind(MANIFEST_FILE) == "file":
                        continue
            raise ArtifactError(f"refusing to replace '{dest}': it holds '{n}', which is not part of an anec output",
                                hint="choose an empty or new output directory")


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _real_dir(dest: Path) -> Path:
    """``dest`` if it is a real directory (not a link to one); ArtifactError otherwise."""
    st = os.lstat(dest)
    if stat.S_ISLNK(st.st_mode):
        raise ArtifactError(f"cannot write to '{dest}': it is a symbolic link",
                            hint="give the real directory: a write replaces the path it is given")
    if not stat.S_ISDIR(st.st_mode):
        raise ArtifactError(f"cannot write artifact to '{dest}': it is a file")
    return dest


_TEMP = re.compile(r"\..+\.(anec-tmp-[A-Za-z0-9_]+|[A-Za-z0-9_]{8}\.(tmp|old))\Z")


def is_temp_name(name: str) -> bool:
    """True for the temporary directories of a write (``.out.anec-tmp-*``; older versions
    wrote ``.out.XXXXXXXX.tmp``/``.old``): never an output or an artifact."""
    return bool(_TEMP.match(name))


def _temp_of(dest_name: str, name: str) -> bool:
    """True if ``name`` is a temporary directory of a write of ``dest_name``."""
    if not name.startswith(f".{dest_name}."):
        return False
    rest = name[len(dest_name) + 2:]
    return rest.startswith("anec-tmp-") or bool(re.fullmatch(r"[A-Za-z0-9_]{8}\.(tmp|old)", rest))


def load_artifact(path: str | os.PathLike, func: str | None = None,
                  loader: "Callable[[Beneath, str | None], Any] | None" = None) -> "Artifact":
    """The artifact at ``path``: an artifact directory, its ``manifest.json``, or a compile
    output (``func`` picks one when it holds several). A temporary directory of a write is
    never taken; an output replaced by a newer compile while it is read is read again.
    ``loader(directory, manifest sha256 or None)`` reads one func's directory (default:
    :meth:`Artifact._load`; :func:`anec.mil.multi_program.load_any` also reads pipelines)."""
    p = Path(os.fspath(path))
    if p.name == MANIFEST_FILE and not os.path.isdir(p):
        p = p.parent
    for part in (p.name, p.parent.name):
        if part and is_temp_name(part):
            raise ArtifactError(f"'{p}' is a temporary directory of an unfinished or replaced compile; "
                                "it is never loaded", hint="load the output directory the compile was given (-o)")
    for attempt in range(3):
        with Beneath.open(p) as d:
            try:
                return _load_from(d, func, loader or Artifact._load)
            except ArtifactError:
                if d.replaced and attempt < 2:  # a newer compile replaced the output meanwhile
                    continue
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _load_from(d: Beneath, func: str | None, loader: Callable[[Beneath, str | None], Any]) -> "Artifact":
    if d.kind(MANIFEST_FILE) is not None:
        art = loader(d, None)
        if func is not None and art.func != func:
            raise ArtifactError(f"'{d.path}' holds func '{art.func}', not '{func}'")
        return art
    funcs = output_funcs(d)
    if not funcs:
        raise ArtifactError(f"'{d.path}' is not an artifact directory (no manifest.json in it or its subdirectories)",
                            hint="compile first: anec compile model.ir -o DIR")
    names = sorted(funcs)
    if func is None:
        if len(names) > 1:
            raise ArtifactError(f"'{d.path}' holds several funcs ({', '.join(names)}); choose one",
                                hint="pass func=NAME (CLI: --func NAME)")
        func = names[0]
    if func not in funcs:
        raise ArtifactError(f"'{d.path}' has no func '{func}' (funcs: {', '.join(names)})",
                            hint=did_you_mean(func, names))
    with d.subdir(_func_dir_name(func), "func directory") as sub:
        art = loader(sub, funcs[func])
    if art.func != func:
        raise ArtifactError(f"'{d.path / func}' holds func '{art.func}', not '{func}'")
    return art


def output_funcs(d: Beneath) -> dict[str, str | None]:
    """Func -> manifest sha256 of the compile output in ``d``, from its index (outputs of
    older versions have none: every plain subdirectory holding a manifest, sha256 None)."""
    if d.kind(OUTPUT_INDEX) is not None:
        where = d.path / OUTPUT_INDEX
        index = parse_json(d.read(OUTPUT_INDEX, MANIFEST_MAX_BYTES, "output index"), str(where), "output index")
        funcs = index.get("funcs") if isinstance(index, dict) else None
        if not isinstance(index, dict) or index.get("format") != OUTPUT_FORMAT or not isinstance(funcs, dict) or \
                not all(isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for v in funcs.values()):
            raise ArtifactError(f'{where}: expected {{"format": "{OUTPUT_FORMAT}", "funcs": {{name: sha256}}}}',
                                hint="the output is damaged or was not written by anec; recompile it")
        for name in funcs:
            _func_dir_name(name)
        return dict(funcs)
    found: dict[str, str | None] = {}
    for n in d.names():
        if n.startswith(".") or d.kind(n) != "directory":
            continue
        with d.subdir(n) as sub:
            if sub.kind(MANIFEST_FILE) is not None:
                found[n] = None
    return found


# ---------------------------------------------------------------------------
# atomic directory replacement


def _start_writes(root: Path, files: Mapping[str, "bytes | BlobWriter"], jobs: list) -> None:
    """Start writing and fsyncing every file under ``root`` (bytes, or a BLOBFILE streamed by
    its writer), largest first, on the writer threads, adding their jobs to ``jobs`` (for
    :func:`_finish`); a few files are written here and now. A write or an fsync releases the
    GIL, so the disk's latencies overlap each other and the caller's work. The directories are
    made here first (a file's creation never stats or makes its parents: on the writer threads
    that was one more call per file, each waiting for the directory that other threads were
    creating files in)."""
    for parent in sorted({(root / rel).parent for rel in files}):
        parent.mkdir(parents=True, exist_ok=True)
    if len(files) < 4:
        for rel, data in files.items():
            _write_file(root / rel, data)
        return
    for rel in sorted(files, key=lambda rel: -_size(files[rel])):
        jobs.append(_write_pool().submit(_write_file, root / rel, files[rel]))


def _finish(jobs: list) -> None:
    """Wait for every job of ``jobs``; then raise the first error among them (in their order)."""
    errors = [job.exception() for job in jobs]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


def _fsync_dirs(dirs: list[Path]) -> None:
    """fsync every directory of ``dirs`` (their entries are durable when this returns),
    on worker threads when there are several."""
    if len(dirs) < 4:
        for d in dirs:
            fsync_dir(d)
        return
    _on_writers(fsync_dir, [(d,) for d in dirs])


_WRITERS = 16
"""Threads writing an output: mostly waiting on fsync, so more than the cores."""


def _write_pool() -> Any:
    """The worker threads writing and fsyncing outputs (shared by every write of the process:
    none of their jobs waits for another)."""
    return _pool("write", _WRITERS)


def _on_writers(fn: Callable[..., Any], calls: list[tuple]) -> None:
    """``fn(*args)`` for every ``args`` of ``calls`` on the writer threads; once all have
    finished, the first error (in the order of ``calls``) is raised."""
    _finish([_write_pool().submit(fn, *args) for args in calls])


def _size(data: "bytes | BlobWriter") -> int:
    return data.size if isinstance(data, BlobWriter) else len(data)


def _write_file(path: Path, data: "bytes | BlobWriter") -> None:
    """Create ``path`` (its directory exists), write ``data`` and fsync it."""
    mode = os.O_RDWR if isinstance(data, BlobWriter) else os.O_WRONLY  # readable: mapped once written
    fd = os.open(path, mode | os.O_CREAT | os.O_EXCL, 0o666)  # not inherited (os.open: PEP 446)
    with os.fdopen(fd, "wb") as f:
        if isinstance(data, BlobWriter):
            data.write_to(f)
        else:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
        if isinstance(data, BlobWriter):
            data.written(f.fileno())  # its bytes are now this file's, not the weights'


class _WriteLock:
    """The exclusive right to write ``dest``: ``flock`` on ``.<name>.anec-lock`` next to it.

    Writers wait for each other. The holder deletes the lock file when done;
    a writer that locked a file deleted meanwhile locks the new one. A killed
    writer's lock is released by the kernel (the next writer removes its file).
    """

    def __init__(self, dest: Path) -> None:
        self.path = dest.parent / f".{dest.name}.anec-lock"
        self.fd = -1

    def __enter__(self) -> "_WriteLock":
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        while True:
            try:
                fd = os.open(self.path, flags, 0o600)
            except OSError as e:
                raise ArtifactError(f"cannot lock '{self.path}': {e.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self.fd = fd
                return self
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)


def _remove_stale(dest: Path) -> None:
    """Remove the temporary directories that earlier, killed writes of ``dest`` left."""
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return
    for n in names:
        if _temp_of(dest.name, n):
            p = dest.parent / n
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:
                    pass


def write_tree_atomic(dest: Path, files: Mapping[str, "bytes | BlobWriter"],
                      last: Callable[[Path], Mapping[str, bytes]] | None = None) -> None:
    """Make ``dest`` a directory holding exactly ``files``, all or nothing.

    Under the write lock of ``dest``, the temporary directories of killed
    writes are removed, then the files go to a fresh temporary directory next
    to ``dest`` (same file system); while they are written, ``last(tmp)`` makes
    the files that complete the tree (it may also add to ``tmp``), which go
    there too; once every file and directory is fsynced, the directory is
    renamed into place. An
    existing ``dest`` is swapped out atomically where the OS allows it
    (renameat2), otherwise moved aside and replaced (a reader may then find
    no ``dest`` for a moment, never a partial one) and then deleted. On any
    error the temporary directory is removed and ``dest`` is left as it was.
    """
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(f"cannot create '{parent}': {e.strerror}") from None
    with _WriteLock(dest):
        _remove_stale(dest)
        _swap_in(dest, files, last)


def _temp_dir(dest: Path) -> Path:
    """A new directory ``.<name>.anec-tmp-XXXXXXXX`` next to ``dest``, with the mode a plain
    ``mkdir`` gives (the umask applies, as for the directory it becomes)."""
    for _ in range(100):
        p = dest.parent / f".{dest.name}.anec-tmp-{secrets.token_hex(4)}"
        try:
            os.mkdir(p, 0o777)
            return p
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name", str(dest.parent))


def _swap_in(dest: Path, files: Mapping[str, "bytes | BlobWriter"], last: Callable[[Path], Mapping[str, bytes]] | None) -> None:
    parent = dest.parent
    try:
        tmp = _temp_dir(dest)
    except OSError as e:
        raise ArtifactError(f"cannot write to '{parent}': {e.strerror}") from None
    old: Path | None = None
    jobs: list = []
    try:
        try:
            _start_writes(tmp, files, jobs)
            # while those are written and fsynced, last() makes the files that complete the
            # tree (the manifests wait for the weight hashes), and their writes start too
            _start_writes(tmp, last(tmp) if last is not None else {}, jobs)
        except BaseException:
            futures.wait(jobs)  # nothing may still write into tmp when it is removed
            raise
        _finish(jobs)
        dirs = {tmp} | {Path(root) for root, _, _ in os.walk(tmp)}
        _fsync_dirs(sorted(dirs, key=lambda p: -len(p.parts)))
        old = move_into_place(tmp, dest, aside=_temp_dir)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactError(f"cannot write artifact '{dest}': {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    discard(old)
