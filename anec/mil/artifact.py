"""The compiled artifact: MIL text, weight BLOBFILEs and the manifest of one program.

On disk an artifact is one directory per func, the layout the ANE's in-memory
compiler expects in its model directory::

    out/mlp/model.mil          the MIL program (``@model_path`` is this directory)
    out/mlp/weights/w1.bin     BLOBFILEs (one per weight, or weights/weight.bin packed)
    out/mlp/manifest.json      the I/O contract between the compiler and the runtime
    out/mlp/program.ir         the same program in anec IR (weights keyed by BLOBFILE)

The manifest (format ``anec-artifact/1``, fields in docs/mil.md) says how to
call the program: inputs and outputs with dtype, shape, byte size and binding
index (the device binds surfaces in alphabetical order of MIL names), one
uniform allocation size per direction (never below the target's minimum
surface), chunked outputs and how to reassemble them, each weight's key,
file, offset and sha256, the SRAM report, the rewrites legalize applied and
the sha256 of the MIL text.

:meth:`Artifact.write` is atomic: everything is written and fsynced into a
temporary directory next to the destination, which then replaces the
destination in one rename; a failure leaves the destination as it was.
:meth:`Artifact.load` checks every file against the manifest.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from anec import __version__
from anec.diagnostics import ArtifactError, PassError, Span
from anec.ir.graph import Graph, Module
from anec.ir.types import DType, TensorType
from anec.mil.blobfile import BlobReader, BlobWriter
from anec.mil.emitter import MilProgram

if TYPE_CHECKING:
    from anec.targets import Target

FORMAT = "anec-artifact/1"
MIL_FILE = "model.mil"
PROGRAM_IR_FILE = "program.ir"
MANIFEST_FILE = "manifest.json"


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


def _jsonable(obj: Any) -> Any:
    """Graph metadata and rewrite records as plain JSON values."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=str) if isinstance(obj, (set, frozenset)) else obj
        return [_jsonable(v) for v in items]
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


def format_json(obj: Any, indent: int = 0) -> str:
    """JSON with 2-space indents, but lists of numbers and small flat dicts on one line.

    Shapes such as ``[1, 768, 1, 64]`` stay readable instead of taking a line
    per dimension; the result is ordinary JSON (``json.loads`` reads it).
    """
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        flat = all(not isinstance(v, (dict, list)) or _scalar_list(v) for v in obj.values())
        one = "{" + ", ".join(f"{json.dumps(k)}: {format_json(v)}" for k, v in obj.items()) + "}"
        if flat and len(one) <= 120:
            return one
        items = [f"{inner}{json.dumps(k)}: {format_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        if _scalar_list(obj):
            return "[" + ", ".join(json.dumps(v) for v in obj) + "]"
        return "[\n" + ",\n".join(inner + format_json(v, indent + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj)


def _scalar_list(v: Any) -> bool:
    return isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)


def _io_entries(values, with_logical: dict[str, str] | None = None) -> list[dict]:
    order = {name: i for i, name in enumerate(sorted(v.name for v in values))}
    out = []
    for v in values:
        e = {"name": v.name, "dtype": v.type.dtype.value, "shape": list(v.type.shape),
             "binding": order[v.name], "bytes": v.type.nbytes}
        if with_logical is not None:
            e["logical"] = with_logical[v.name]
        out.append(e)
    return out


def _logical_outputs(graph: Graph) -> tuple[list[dict], dict[str, str]]:
    """Logical outputs (chunked ones reassembled) and physical name -> logical name."""
    by_name = {v.name: v for v in graph.outputs}
    chunked: dict[str, dict] = {}
    for e in graph.meta.get("logical_outputs", []) or []:
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
    reshaped = {e["name"]: e for e in graph.meta.get("logical_inputs", []) or []}
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
    logical, of = _logical_outputs(graph)
    inputs = _io_entries(graph.inputs)
    outputs = _io_entries(graph.outputs, of)
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
        "sram": _jsonable(graph.meta.get("sram")),
        "rewrites": [_jsonable(r) for r in rewrites],
        "host_casts": _jsonable(graph.meta.get("host_casts", [])),
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
    from anec.ir.printer import print_module

    g = graph.clone()
    by_name = {n.results[0].name: n for n in g.nodes if n.op == "const"}
    for slot in program.weights:
        node = by_name[slot.node.results[0].name]
        node.attrs = {"weight": blob_key(slot.file, slot.offset)}
    module = Module()
    module.add_func(g)
    return ("// The compiled program in anec IR: the same ops as model.mil; weights are\n"
            "// keyed by the BLOBFILE and metadata offset that hold them.\n" + print_module(module))


def artifact_weights(artifact: "Artifact") -> dict[str, np.ndarray]:
    """The weights of ``program.ir`` (keyed by :func:`blob_key`) read from the blobs."""
    readers: dict[str, BlobReader] = {}
    out: dict[str, np.ndarray] = {}
    for w in artifact.manifest["weights"]:
        rel = w["file"]
        if rel not in readers:
            readers[rel] = BlobReader(artifact.blobs[rel], name=rel)
        arr = readers[rel].read(w["offset"], DType(w["dtype"]).np)
        out[blob_key(rel, w["offset"])] = arr.reshape(w["shape"])
    return out


def build_blobs(program: MilProgram, store: Mapping[str, np.ndarray] | None
                ) -> tuple[dict[str, bytes] | None, list[dict]]:
    """The BLOBFILE bytes of ``program``'s weight plan and the manifest weight entries.

    Without a store (``anec mil``) there are no blobs and each entry's
    ``sha256`` is None.
    """
    from anec.weights import materialize

    entries = []
    writers: dict[str, BlobWriter] = {}
    for slot in program.weights:
        digest = None
        if store is not None:
            arr = materialize(slot.node, store)
            writer = writers.setdefault(slot.file, BlobWriter())
            offset = writer.add(arr)
            if offset != slot.offset:  # the emitter's plan and the writer must agree
                raise PassError(f"emit-mil: blob offset {offset} != planned {slot.offset} in {slot.file}")
            digest = sha256(np.ascontiguousarray(arr).tobytes())
        entries.append({
            "key": slot.key, "const": slot.const, "file": slot.file, "path": slot.path,
            "offset": slot.offset, "dtype": slot.type.dtype.value, "shape": list(slot.type.shape),
            "perm": list(slot.perm) if slot.perm is not None else None,
            "slice": list(slot.slice) if slot.slice is not None else None,
            "sha256": digest,
        })
    blobs = {f: w.to_bytes() for f, w in writers.items()} if store is not None else None
    return blobs, entries


WEIGHT_INPUTS_DIR = "inputs"


def build_weight_inputs(graph: Graph, store: Mapping[str, np.ndarray] | None
                        ) -> tuple[dict[str, bytes], list[dict]]:
    """The initial values of the weights compiled as inputs (``graph.meta["weight_inputs"]``):
    one BLOBFILE each under ``inputs/`` (never referenced by the MIL; the runtime writes them
    into the input surfaces), and their manifest entries."""
    from anec.weights import materialize_attrs

    blobs: dict[str, bytes] = {}
    entries = []
    for w in graph.meta.get("weight_inputs", []) or []:
        file = f"{WEIGHT_INPUTS_DIR}/{w['input']}.bin"
        digest = None
        if store is not None:
            attrs = {"weight": w["key"], "perm": w.get("perm"), "slice": w.get("slice")}
            arr = materialize_attrs(attrs, TensorType(DType(w["dtype"]), tuple(w["shape"])), store, w["input"])
            writer = BlobWriter()
            writer.add(arr)
            blobs[file] = writer.to_bytes()
            digest = sha256(np.ascontiguousarray(arr).tobytes())
        entries.append({"key": w["key"], "input": w["input"], "file": file, "offset": 64, "dtype": w["dtype"],
                        "shape": list(w["shape"]), "perm": w.get("perm"), "slice": w.get("slice"),
                        "sha256": digest})
    return blobs, entries


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
    blobs: dict[str, bytes]
    """Weight file path relative to the artifact dir (``weights/w1.bin``) -> bytes."""
    manifest: dict
    program: MilProgram | None = field(default=None, repr=False, compare=False)
    """The emitter's result (names, weight plan) when built in this process."""
    program_ir: str = ""
    """The compiled program in anec IR (``program.ir``), weights keyed by BLOBFILE."""

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
        return cls(graph.name, program.text, {**(blobs or {}), **input_blobs}, manifest, program, ir_text)

    @property
    def complete(self) -> bool:
        """True when every weight file (the MIL's and the weight inputs') is present."""
        return all(w["file"] in self.blobs for w in _all_weight_entries(self.manifest))

    # ---- summary ------------------------------------------------------------
    def weight_bytes(self) -> int:
        return sum(math.prod(w["shape"]) * DType(w["dtype"]).itemsize for w in self.manifest["weights"])

    def op_count(self) -> int:
        """MIL statements, consts included."""
        return sum(1 for line in self.mil_text.splitlines() if line.startswith(" " * 8))

    # ---- files ---------------------------------------------------------------
    def files(self) -> dict[str, bytes]:
        """Every file of the artifact directory, relative path -> bytes."""
        if not self.complete:
            missing = next(w["file"] for w in _all_weight_entries(self.manifest) if w["file"] not in self.blobs)
            raise ArtifactError(
                f"artifact '{self.func}' has no weight data ({missing} is missing)",
                hint="compile with weights: --weights FILE or --random-weights SEED",
            )
        out = {MIL_FILE: self.mil_text.encode("utf-8"), PROGRAM_IR_FILE: self.program_ir.encode("utf-8")}
        for rel, data in sorted(self.blobs.items()):
            out[_safe_rel(rel)] = data
        out[MANIFEST_FILE] = (format_json(self.manifest) + "\n").encode("utf-8")
        return out

    def write(self, directory: str | os.PathLike) -> Path:
        """Write the artifact to ``directory`` atomically; returns the path.

        An existing artifact there is replaced; an existing non-empty
        directory that is not an artifact is refused (ArtifactError), so a
        mistyped ``-o`` never deletes user files.
        """
        dest = Path(directory)
        files = self.files()
        if dest.exists():
            if not dest.is_dir():
                raise ArtifactError(f"cannot write artifact to '{dest}': it is a file")
            if any(dest.iterdir()) and not (dest / MANIFEST_FILE).is_file():
                raise ArtifactError(
                    f"refusing to replace '{dest}': it is a non-empty directory without {MANIFEST_FILE}",
                    hint="choose an empty or new output directory",
                )
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArtifactError(f"cannot create '{dest.parent}': {e.strerror}") from None
        write_tree_atomic(dest, files)
        return dest

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "Artifact":
        """Read an artifact directory and check it against its manifest."""
        d = Path(directory)
        mpath = d / MANIFEST_FILE
        try:
            manifest = json.loads(mpath.read_text("utf-8"))
        except FileNotFoundError:
            raise ArtifactError(f"'{d}' is not an artifact: {MANIFEST_FILE} is missing",
                                hint="compile first: anec compile model.ir -o DIR") from None
        except (OSError, ValueError) as e:
            raise ArtifactError(f"{mpath}: unreadable manifest ({e})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            got = manifest.get("format") if isinstance(manifest, dict) else None
            raise ArtifactError(f"{mpath}: format {got!r}, expected {FORMAT!r}")
        for key in ("func", "mil", "inputs", "outputs", "weights", "input_alloc_bytes", "output_alloc_bytes"):
            if key not in manifest:
                raise ArtifactError(f"{mpath}: missing field '{key}'")
        mil_file = d / _safe_rel(manifest["mil"].get("file", MIL_FILE))
        try:
            mil_bytes = mil_file.read_bytes()
        except OSError as e:
            raise ArtifactError(f"cannot read {mil_file}: {e.strerror}") from None
        if sha256(mil_bytes) != manifest["mil"].get("sha256"):
            raise ArtifactError(f"{mil_file} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        blobs: dict[str, bytes] = {}
        readers: dict[str, BlobReader] = {}
        for w in _all_weight_entries(manifest):
            rel = _safe_rel(w["file"])
            if rel not in readers:
                readers[rel] = BlobReader(d / rel, name=str(d / rel))
                blobs[rel] = readers[rel].data
            r = readers[rel]
            dt = DType(w["dtype"])
            entry = r.entry(w["offset"])
            if entry.dtype != dt.np.name or entry.size != math.prod(w["shape"]) * dt.itemsize:
                raise ArtifactError(
                    f"{r.name} offset {w['offset']}: holds {entry.size} bytes of {entry.dtype}, the manifest "
                    f"says {w['dtype']}{w['shape']} for weight '{w['key']}'"
                )
            if sha256(r.payload(w["offset"])) != w.get("sha256"):
                raise ArtifactError(
                    f"{r.name} offset {w['offset']}: weight '{w['key']}' does not match its sha256",
                    hint="the weight file was modified after compiling; recompile it",
                )
        ir_entry = manifest.get("program_ir") or {}
        ir_file = d / _safe_rel(ir_entry.get("file", PROGRAM_IR_FILE))
        try:
            ir_bytes = ir_file.read_bytes()
        except OSError as e:
            raise ArtifactError(f"cannot read {ir_file}: {e.strerror}") from None
        if sha256(ir_bytes) != ir_entry.get("sha256"):
            raise ArtifactError(f"{ir_file} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        return cls(manifest["func"], mil_bytes.decode("utf-8"), blobs, manifest, None, ir_bytes.decode("utf-8"))

    def program_module(self) -> "Module":
        """``program.ir`` parsed (for the reference interpreter)."""
        from anec.ir.parser import parse

        return parse(self.program_ir, filename=f"{self.func}/{PROGRAM_IR_FILE}")


def _safe_rel(rel: str) -> str:
    """A relative path inside the artifact (no absolute paths, no '..')."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ArtifactError(f"artifact path '{rel}' points outside the artifact directory")
    return str(p)


# ---------------------------------------------------------------------------
# atomic directory replacement


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_tree_atomic(dest: Path, files: Mapping[str, bytes]) -> None:
    """Make ``dest`` a directory holding exactly ``files``, all or nothing.

    The files go to a fresh temporary directory next to ``dest`` (same file
    system), are fsynced, and the directory is renamed into place. An existing
    ``dest`` is swapped out atomically where the OS allows it (renameat2),
    otherwise moved aside, replaced and then deleted; on any error the
    temporary directory is removed and ``dest`` is left as it was.
    """
    parent = dest.parent
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=parent))
    except OSError as e:
        raise ArtifactError(f"cannot write to '{parent}': {e.strerror}") from None
    old: Path | None = None
    try:
        for rel, data in files.items():
            _write_file(tmp / rel, data)
        for sub in sorted({(tmp / rel).parent for rel in files}, key=lambda p: -len(p.parts)):
            _fsync_dir(sub)
        if dest.exists():
            if _exchange(tmp, dest):
                old = tmp  # tmp now holds the previous artifact
            else:
                old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=parent))
                os.rmdir(old)
                os.rename(dest, old)
                try:
                    os.rename(tmp, dest)
                except BaseException:
                    os.rename(old, dest)
                    raise
        else:
            os.rename(tmp, dest)
        _fsync_dir(parent)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactError(f"cannot write artifact '{dest}': {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
