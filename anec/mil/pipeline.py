"""The artifact of a func compiled into a pipeline of ANE programs.

A func that breaks a per-program budget is cut into stages
(:mod:`anec.passes.partition`). Its artifact directory holds one ordinary
program artifact per stage and a top-level manifest that wires them::

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
form can be shared (docs/runtime.md). ``surface_bytes`` is one allocation
size for every stage surface, so that a stage output feeds the next stage's
input with no copy.

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
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from anec.version import __version__
from anec.diagnostics import ArtifactError
from anec.ir.types import DType
from anec.fsutil import parse_json
from anec.hashing import sha256
from anec.mil.artifact import (BLOB_MAX_BYTES, MANIFEST_FILE, OUTPUT_INDEX, PROGRAM_IR_FILE, PROGRAM_IR_MAX_BYTES, Artifact,
                               _io_entries, _logical_outputs, _utf8, alloc_bytes, blob_key, weight_keys,
                               build_weight_inputs, write_artifact_dir)
from anec.mil.beneath import check_rel
from anec.mil.json_format import format_json
from anec.mil.json_format import jsonable as _jsonable
from anec.mil.manifest import MANIFEST_MAX_BYTES, _Bad, _weight_input, array
from anec.mil.output import load_artifact
from anec.mil.blobfile import BlobReader

if TYPE_CHECKING:
    from anec.ir.graph import Graph, Module
    from anec.mil.beneath import Beneath
    from anec.passes.partition import Plan
    from anec.targets import Target

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
    manifest: dict
    program_ir: str = ""
    """The whole legalized func in anec IR, weights keyed by the stage BLOBFILEs holding them."""
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Top-level files other than the manifest: weights compiled as inputs (``inputs/*.bin``)."""

    # ---- building -----------------------------------------------------------------
    @classmethod
    def build(cls, graph: "Graph", plan: "Plan", target: "Target", weights: Mapping[str, np.ndarray] | None,
              rewrites: list[dict], pack_weights: bool = False,
              compression: Mapping[int, Any] | None = None, share: bool = False) -> "PipelineArtifact":
        from anec.mil.emitter import emit_mil
        from anec.passes.partition import extract_stage

        stages: list[Artifact] = []
        blob_of: dict[int, str] = {}  # id(original const node) -> blob key in a stage
        seen_mil: dict[str, int] = {}
        entries = []
        index = {id(v): (k, i) for k, s in enumerate(plan.stages) for i, v in enumerate(s.outputs)}
        built = []
        for k in range(len(plan.stages)):
            sg = extract_stage(graph, plan, k)
            origin = sg.meta["const_origin"]
            stage_comp = {}
            if compression:
                for n in sg.nodes:
                    node = origin.get(n.result.name) if n.op == "const" else None
                    if node is not None and id(node) in compression:
                        stage_comp[n.result.name] = compression[id(node)]
            program = emit_mil(sg, target, pack_weights=pack_weights, compression=stage_comp)
            built.append((sg, program, bool(stage_comp)))
        shared = _share_groups(graph, plan, built, target, pack_weights) if share else {}
        for k, st in enumerate(plan.stages):
            sg, program, _ = shared.get(k) or built[k]
            origin = sg.meta["const_origin"]
            art = Artifact.build(sg, program, target, weights, [])
            stages.append(art)
            for name, key in weight_keys(program).items():
                node = origin.get(name)
                if node is not None:
                    blob_of.setdefault(id(node), "+".join(f"{stage_dir(k)}/" + p for p in key.split("+")))
            same = seen_mil.setdefault(art.manifest["mil"]["sha256"], k)
            ins = []
            for i, v in enumerate(st.inputs):
                src = ({"input": v.name} if v.producer is None else
                       {"stage": index[id(v)][0], "output": f"out{index[id(v)][1]}"})
                ins.append({"name": f"in{i}", "value": v.name, "from": src})
            first, last = plan.items[st.start], plan.items[st.end - 1]
            entries.append({
                "dir": stage_dir(k), "mil_sha256": art.manifest["mil"]["sha256"],
                "same_as": same if same != k else None,
                "inputs": ins, "outputs": [{"name": f"out{i}", "value": v.name} for i, v in enumerate(st.outputs)],
                "nodes": st.end - st.start,
                "first": first.span.location if first.span else None,
                "last": last.span.location if last.span else None,
                "weights": len(st.weights), "blob_cap": st.blob_cap, "peak_sram": st.peak_sram,
                "in_bytes": st.in_bytes, "out_bytes": st.out_bytes, "reason": st.reason,
                "shares": same if k in shared else None,
                "weight_inputs": len(art.manifest.get("weight_inputs", [])),
            })
        outputs_from = {}
        for v in graph.outputs:
            k, i = index[id(v)]
            outputs_from[v.name] = {"stage": k, "output": f"out{i}"}
        logical, of = _logical_outputs(graph)
        inputs = _io_entries(graph.inputs)
        outputs = _io_entries(graph.outputs, of)
        sizes = [e["bytes"] for a in stages for e in [*a.manifest["inputs"], *a.manifest["outputs"]]]
        input_blobs, input_entries = build_weight_inputs(graph, weights)
        manifest = {
            "format": FORMAT,
            "anec_version": __version__,
            "func": graph.name,
            "target": target.name,
            "inputs": inputs,
            "outputs": outputs,
            "logical_inputs": _jsonable(graph.meta.get("logical_inputs", [])),
            "logical_outputs": logical,
            "host_casts": _jsonable(graph.meta.get("host_casts", [])),
            "stages": entries,
            "outputs_from": outputs_from,
            "surface_bytes": alloc_bytes(sizes, target),
            "crossing_bytes": plan.crossing_bytes,
            "programs": count_compiles(stages),
            "rewrites": [_jsonable(r) for r in rewrites],
            "sram": _jsonable(graph.meta.get("sram")),
        }
        if input_entries:
            manifest["weight_inputs"] = input_entries
        ir_text = _program_ir(graph, blob_of)
        manifest["program_ir"] = {"file": PROGRAM_IR_FILE, "sha256": sha256(ir_text)}
        return cls(graph.name, stages, manifest, ir_text, input_blobs)

    # ---- summary --------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return all(a.complete for a in self.stages) and all(
            w["file"] in self.blobs for w in self.manifest.get("weight_inputs", []))

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
        out[MANIFEST_FILE] = (format_json(self.manifest) + "\n").encode("utf-8")
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
    def _load(cls, d: "Beneath", manifest: dict, raw: bytes) -> "PipelineArtifact":
        """The pipeline in ``d`` (read beneath it, nothing followed through links): the wiring,
        every stage as an artifact, each stage's MIL against the wiring's sha256, program.ir."""
        where = d.path / MANIFEST_FILE
        check_manifest(manifest, where)
        stages = []
        for k, e in enumerate(manifest["stages"]):
            with d.subdir(e["dir"], "stage directory") as sub:
                art = Artifact._load(sub)
            if art.manifest["mil"]["sha256"] != e["mil_sha256"]:
                raise ArtifactError(f"{d.path / e['dir']}: stage {k} is not the program the pipeline manifest names",
                                    hint="the artifact was modified after compiling; recompile it")
            stages.append(art)
        blobs = {}
        for w in manifest.get("weight_inputs", []):
            rel = _rel(w["file"])
            blobs[rel] = d.read(rel, BLOB_MAX_BYTES, "weight input file")
            if sha256(BlobReader(blobs[rel], name=rel).payload(int(w["offset"]))) != w.get("sha256"):
                raise ArtifactError(f"{d.path / rel}: weight '{w['key']}' does not match its sha256",
                                    hint="the weight file was modified after compiling; recompile it")
        ir = d.read(PROGRAM_IR_FILE, PROGRAM_IR_MAX_BYTES, "program IR")
        if sha256(ir) != (manifest.get("program_ir") or {}).get("sha256"):
            raise ArtifactError(f"{d.path / PROGRAM_IR_FILE} does not match the sha256 in {MANIFEST_FILE}",
                                hint="the artifact was modified after compiling; recompile it")
        return cls(manifest["func"], stages, manifest, _utf8(ir, d.path / PROGRAM_IR_FILE, "program IR"), blobs)

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
        for w in self.manifest.get("weight_inputs", []):
            arr = BlobReader(self.blobs[w["file"]], name=w["file"]).read(w["offset"], DType(w["dtype"]).np)
            if arr.size != math.prod(w["shape"]):
                raise ArtifactError(f"{w['file']} offset {w['offset']}: blob holds {arr.size} values, the shape "
                                    f"{w['shape']} of weight '{w['key']}' needs {math.prod(w['shape'])}",
                                    hint="the artifact was modified after compiling; recompile it")
            out[w["input"]] = arr.reshape(w["shape"])
        return out


def _weights_identity(art: Artifact) -> tuple:
    """What a program's compiled form bakes besides its MIL: its weights (key and view)."""
    return tuple(sorted((str(w.get("path") or w.get("file")), str(w.get("key")), repr(w.get("perm")),
                         repr(w.get("slice"))) for w in art.manifest.get("weights", [])))


def count_compiles(programs: "list[Artifact]") -> int:
    """The compiles a runtime makes for these programs when no weight reload strategy is
    verified (the device's state until ``python -m anec.selftest`` verifies one): programs
    with the same MIL and the same weights share a compile (a cache hit), any other
    difference compiles again."""
    return len({(a.manifest["mil"]["sha256"], _weights_identity(a)) for a in programs})


def _share_groups(graph: "Graph", plan: "Plan", built: list, target: "Target",
                  pack_weights: bool) -> dict[int, tuple]:
    """Stage -> (graph, program, False) with its weights as inputs, for the groups of stages
    that have the same MIL but other weights (see the module docstring). A weight every
    stage of the group reads alike (a RoPE table, a mask) stays a BLOBFILE: the same bytes
    in every stage, which the runtime's cache shares. A group whose stages cannot take their
    weights as inputs (a compressed weight, an op that needs a constant, a result whose MIL
    differs) keeps its BLOBFILEs."""
    from anec.mil.emitter import emit_mil

    groups: dict[str, list[int]] = {}
    for k, (_, program, _) in enumerate(built):
        groups.setdefault(sha256(program.text), []).append(k)
    out: dict[int, tuple] = {}
    for members in groups.values():
        if len(members) < 2 or any(built[k][2] for k in members):
            continue
        views: dict[str, set] = {}  # canonical const name -> the views the members read there
        for k in members:
            for n in built[k][0].nodes:
                if n.op == "const" and "weight" in n.attrs:
                    views.setdefault(n.result.name, set()).add(
                        (n.attrs["weight"], repr(n.attrs.get("perm")), repr(n.attrs.get("slice"))))
        varying = {name for name, v in views.items() if len(v) > 1}
        if not varying:
            continue  # the same weights: one compile already
        done = {}
        for k in members:
            sg = _weights_to_inputs(built[k][0], varying, target)
            if sg is None:
                break
            done[k] = (sg, emit_mil(sg, target, pack_weights=pack_weights), False)
        if len(done) == len(members) and len({sha256(p.text) for _, p, _ in done.values()}) == 1:
            out.update(done)
    return out


def _weights_to_inputs(sg: "Graph", names: set[str], target: "Target") -> "Graph | None":
    """A copy of stage graph ``sg`` with the weight consts ``names`` program inputs, legalized
    again; None when it cannot be (an op that needs a constant weight, a new cut)."""
    import glob

    from anec.diagnostics import AnecError
    from anec.passes.base import PassContext
    from anec.passes.legalize import Legalize
    from anec.passes.weights_as_inputs import WeightsAsInputs

    keys = sorted({n.attrs["weight"] for n in sg.nodes if n.op == "const" and n.result.name in names})
    g = sg.clone()
    ctx = PassContext(target=target, options={"pack_weights": False})
    try:
        WeightsAsInputs(keys=tuple(glob.escape(k) for k in keys)).run(g, ctx)
        Legalize().run(g, ctx)
    except AnecError:
        return None
    if g.meta.get("partition") is not None or any(
            n.op == "const" and n.attrs.get("weight") in keys for n in g.nodes):
        return None
    g.meta["const_origin"] = sg.meta["const_origin"]
    return g


def _rel(rel: str) -> str:
    check_rel(rel)
    return rel


def _program_ir(graph: "Graph", blob_of: dict[int, str]) -> str:
    """The whole func in anec IR with each weight const reading its stage BLOBFILE."""
    from anec.ir.graph import Module
    from anec.ir.printer import print_module

    keyed = {id(n): {"weight": blob_of[id(n)]} for n in graph.nodes if id(n) in blob_of}  # weight consts only
    module = Module()
    module.add_func(graph)  # a module around the func, for the module's text: the func is not copied
    return ("// The compiled pipeline in anec IR: the func before it was cut into stages;\n"
            "// weights are keyed by the stage BLOBFILE and metadata offset that hold them.\n"
            + print_module(module, attrs=keyed))


def is_pipeline_manifest(manifest: Any) -> bool:
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def check_manifest(m: Any, where: Path | str) -> None:
    """Every field the runtime reads of a pipeline manifest, with its type (ArtifactError otherwise)."""
    def bad(field_: str, expected: str) -> ArtifactError:
        return ArtifactError(f"{where}: field '{field_}' must be {expected}")

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
    names = {e.get("name") for e in m["inputs"] if isinstance(e, dict)}
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
        n_wi = e.get("weight_inputs", 0)
        if not (isinstance(n_wi, int) and not isinstance(n_wi, bool) and 0 <= n_wi <= MAX_STAGE_WEIGHT_INPUTS):
            raise bad(f"stages[{k}].weight_inputs", f"an integer in [0, {MAX_STAGE_WEIGHT_INPUTS}]")
        for i, src in enumerate(e.get("inputs") or []):
            f = src.get("from") if isinstance(src, dict) else None
            ok = isinstance(f, dict) and (
                (f.get("input") in names) or
                (isinstance(f.get("stage"), int) and 0 <= f["stage"] < k and isinstance(f.get("output"), str)))
            if not ok:
                raise bad(f"stages[{k}].inputs[{i}].from", "a func input or an output of an earlier stage")
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
    try:  # read at load (file, offset, sha256) and by weight_inputs (dtype, shape, input)
        wi = array(_weight_input)(m.get("weight_inputs", []), "weight_inputs")
    except _Bad as e:
        raise bad(e.path, e.expected) from None
    for i, w in enumerate(wi):
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
        return PipelineArtifact._load(d, manifest, raw)
    return Artifact._load(d, manifest_sha)


def load_any(path: str | os.PathLike, func: str | None = None) -> "Artifact | PipelineArtifact":
    """The artifact at ``path``, a single program or a pipeline: an artifact directory, or a
    compile output (``func`` picks one); read as :func:`anec.mil.artifact.load_artifact` reads."""
    return load_artifact(path, func, loader=_load_dir)


__all__ = ["FORMAT", "PipelineArtifact", "check_manifest", "is_pipeline_manifest", "load_any", "stage_dir"]

