"""The multi-program build: a func cut into stages, compiled into one ANE program per stage.

The partition pass leaves the plan in ``graph.facts.partition``; emit-mil then
calls :func:`build_multi_program` (the compiler hands it to the pass context:
the build runs passes on each stage, so it sits above them). Each stage is cut
out of the func (:func:`~anec.passes.extract_stage.extract_stage`), emitted as
an ordinary program artifact, and wired by a top-level manifest into a
:class:`~anec.mil.multi_program.PipelineArtifact` (the layout is in
:mod:`anec.mil.multi_program`).

Programs shared across layers (``share=True``): stages with the same MIL but
other weights (the layers of a transformer, cut at the layer boundaries by the
aligned partition) would each compile, since a compiled program bakes its
weights. Every weight of such a stage that differs between the stages becomes
an input of its program (the weights-as-inputs pass on the stage, then
legalize: a conv1x1 over an input weight becomes a matmul,
ANE-CONV-CONST-WEIGHT), so the stages have the same MIL and no weight files of
their own: one compile, and every other stage of the group is a cache hit of it.
"""

from __future__ import annotations

import glob
from typing import Any, Mapping

import numpy as np

from anec.version import __version__
from anec.diagnostics import AnecError
from anec.ir.act_quant import has_quantized
from anec.ir.func_facts import Plan
from anec.ir.graph import Graph, Module
from anec.ir.ops import baked_view, is_weight_const
from anec.ir.printer import print_module
from anec.hashing import sha256
from anec.mil.artifact import (PROGRAM_IR_FILE, Artifact, alloc_bytes, build_weight_inputs, io_entries, logical_outputs,
                               weight_keys)
from anec.mil.json_format import jsonable
from anec.mil.emitter import emit_mil
from anec.mil.manifest_types import PipelineManifest
from anec.mil.multi_program import FORMAT, PipelineArtifact, count_compiles, stage_dir
from anec.passes.base import PassContext
from anec.passes.extract_stage import extract_stage
from anec.passes.legalize import Legalize
from anec.passes.partition import Partition
from anec.passes.weights_as_inputs import WeightsAsInputs
from anec.targets import Target


def build_multi_program(graph: Graph, plan: Plan, target: Target, weights: Mapping[str, np.ndarray] | None,
                        rewrites: list[dict], pack_weights: bool = False,
                        compression: Mapping[int, Any] | None = None, share: bool = False) -> PipelineArtifact:
    """The artifact of ``graph`` cut by ``plan``: one program per stage and the manifest wiring them.

    ``compression`` maps id(const node of ``graph``) to its compression decision; with
    ``share`` the groups of stages that differ only in their weights get them as inputs
    (see the module docstring)."""

    stages: list[Artifact] = []
    blob_of: dict[int, str] = {}  # id(original const node) -> blob key in a stage
    seen_mil: dict[str, int] = {}
    entries = []
    index = {id(v): (k, i) for k, s in enumerate(plan.stages) for i, v in enumerate(s.outputs)}
    built = []
    for k in range(len(plan.stages)):
        sg = extract_stage(graph, plan, k)
        origin = sg.facts.stage_source.const_origin
        stage_comp = {}
        if compression:
            for n in sg.nodes:
                node = origin.get(n.result.name) if n.op == "const" else None
                if node is not None and id(node) in compression:
                    stage_comp[n.result.name] = compression[id(node)]
        program = emit_mil(sg, target, pack_weights=pack_weights, compression=stage_comp)
        # a stage with compressed weights or int8 activations keeps its constants (not shared)
        built.append((sg, program, bool(stage_comp) or any(has_quantized(n) for n in sg.nodes)))
    shared = _share_groups(graph, plan, built, target, pack_weights) if share else {}
    for k, st in enumerate(plan.stages):
        sg, program, _ = shared.get(k) or built[k]
        origin = sg.facts.stage_source.const_origin
        art = Artifact.build(sg, program, target, weights, [])
        stages.append(art)
        for name, key in weight_keys(program).items():
            node = origin.get(name)
            if node is not None:
                blob_of.setdefault(id(node), "+".join(f"{stage_dir(k)}/" + p for p in key.split("+")))
        same = seen_mil.setdefault(art.manifest.mil.sha256, k)
        ins = []
        for i, v in enumerate(st.inputs):
            src = ({"input": v.name} if v.producer is None else
                   {"stage": index[id(v)][0], "output": f"out{index[id(v)][1]}"})
            ins.append({"name": f"in{i}", "value": v.name, "from": src})
        first, last = plan.items[st.start], plan.items[st.end - 1]
        entries.append({
            "dir": stage_dir(k), "mil_sha256": art.manifest.mil.sha256,
            "same_as": same if same != k else None,
            "inputs": ins, "outputs": [{"name": f"out{i}", "value": v.name} for i, v in enumerate(st.outputs)],
            "nodes": st.end - st.start,
            "first": first.span.location if first.span else None,
            "last": last.span.location if last.span else None,
            "weights": len(st.weights), "blob_cap": st.blob_cap, "peak_sram": st.peak_sram,
            "in_bytes": st.in_bytes, "out_bytes": st.out_bytes, "reason": st.reason,
            "shares": same if k in shared else None,
            "weight_inputs": len(art.manifest.weight_inputs),
        })
    outputs_from = {}
    for v in graph.outputs:
        k, i = index[id(v)]
        outputs_from[v.name] = {"stage": k, "output": f"out{i}"}
    logical, of = logical_outputs(graph)
    inputs = io_entries(graph.inputs)
    outputs = io_entries(graph.outputs, of)
    sizes = [e.bytes for a in stages for e in [*a.manifest.inputs, *a.manifest.outputs]]
    for entry, size in zip(entries, stage_surfaces(stages, entries, target)):
        entry["surface_bytes"] = size
    input_blobs, input_entries = build_weight_inputs(graph, weights)
    manifest = {
        "format": FORMAT,
        "anec_version": __version__,
        "func": graph.name,
        "target": target.name,
        "inputs": inputs,
        "outputs": outputs,
        "logical_inputs": jsonable(graph.facts.logical_inputs),
        "logical_outputs": logical,
        "host_casts": jsonable(graph.facts.host_casts),
        "stages": entries,
        "outputs_from": outputs_from,
        "surface_bytes": alloc_bytes(sizes, target),
        "crossing_bytes": plan.crossing_bytes,
        "programs": count_compiles(stages),
        "rewrites": [jsonable(r) for r in rewrites],
        "sram": jsonable(graph.facts.sram),
    }
    if input_entries:
        manifest["weight_inputs"] = input_entries
    if graph.facts.activations is not None:
        manifest["activations"] = jsonable(graph.facts.activations)
    ir_text = _program_ir(graph, blob_of)
    manifest["program_ir"] = {"file": PROGRAM_IR_FILE, "sha256": sha256(ir_text)}
    return PipelineArtifact(graph.name, stages, PipelineManifest.of(manifest), ir_text, input_blobs)


SURFACE_SLACK = 2
"""How much larger than its own largest tensor a stage's surfaces may be made so that a
neighbour's output surface binds to its input with no copy."""


def stage_surfaces(stages: list[Artifact], entries: list[dict], target: Target) -> list[int]:
    """The surface size of every stage (one per program: ANE-UNIFORM-SURFACES).

    Each stage needs its own largest tensor (:func:`alloc_bytes`); a stage output feeds the
    next stage with no copy only when the two have the same size. Stages joined by an edge
    share one size when it stays within ``SURFACE_SLACK`` times every member's own need, so
    similar layers keep their zero-copy edges while a stage with large inputs (weights as
    inputs, a KV cache, the LM head's logits) no longer inflates every other surface; an
    edge between two sizes is a copy of its packed bytes. Stages with the same MIL (one
    compiled program) take the largest size of theirs."""
    need = [alloc_bytes([e.bytes for e in (*a.manifest.inputs, *a.manifest.outputs)], target)
            for a in stages]
    parent = list(range(len(stages)))
    lo, hi = list(need), list(need)  # per group root: the smallest and largest need

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for k, entry in enumerate(entries):
        for e in entry["inputs"]:
            if "stage" not in e["from"]:
                continue
            a, b = root(e["from"]["stage"]), root(k)
            if a != b and max(hi[a], hi[b]) <= SURFACE_SLACK * min(lo[a], lo[b]):
                parent[b] = a
                lo[a], hi[a] = min(lo[a], lo[b]), max(hi[a], hi[b])
    sizes = [hi[root(k)] for k in range(len(stages))]
    # stages with the same MIL are one compiled program (a cache hit takes the first one's
    # limits), so they take one size: the largest of theirs (an edge that then differs in
    # size is a copy, not a surface below the program's minimum)
    by_mil: dict[str, int] = {}
    for a, size in zip(stages, sizes):
        by_mil[a.manifest.mil.sha256] = max(by_mil.get(a.manifest.mil.sha256, 0), size)
    return [by_mil[a.manifest.mil.sha256] for a in stages]


def _share_groups(graph: Graph, plan: Plan, built: list, target: Target,
                  pack_weights: bool) -> dict[int, tuple]:
    """Stage -> (graph, program, False) with its weights as inputs, for the groups of stages
    that have the same MIL but other weights (see the module docstring). A weight every
    stage of the group reads alike (a RoPE table, a mask) stays a BLOBFILE: the same bytes
    in every stage, which the runtime's cache shares. A group whose stages cannot take their
    weights as inputs (a compressed weight, int8 activations, an op that needs a constant, a
    result whose MIL differs) keeps its BLOBFILEs."""
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
                if is_weight_const(n):
                    views.setdefault(n.result.name, set()).add(baked_view(n))
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


def _weights_to_inputs(sg: Graph, names: set[str], target: Target) -> Graph | None:
    """A copy of stage graph ``sg`` with the weight consts ``names`` program inputs, legalized
    again; None when it cannot be (an op that needs a constant weight, a new cut for a hard
    budget)."""
    keys = sorted({n.attrs["weight"] for n in sg.nodes if n.op == "const" and n.result.name in names})
    g = sg.clone()
    ctx = PassContext(target=target, options={"pack_weights": False})
    try:
        WeightsAsInputs(keys=tuple(glob.escape(k) for k in keys)).run(g, ctx)
        Legalize().run(g, ctx)
        Partition().run(g, ctx)
    except AnecError:
        return None
    plan = g.facts.partition
    if (plan is not None and plan.over_blobs) or any(
            n.op == "const" and n.attrs.get("weight") in keys for n in g.nodes):
        return None
    # Cut again only for the SRAM (ANE-SRAM is soft: ~30% slower, no failure): one program
    # with its spill risk reported, as a one-program func whose SRAM no cut lowers. Its
    # weights, now inputs, are what the SRAM model counts: a 32 MiB projection alone is
    # over, and cutting around it cannot make it fit.
    g.facts.partition = None
    g.facts.stage_source = sg.facts.stage_source
    return g


def _program_ir(graph: Graph, blob_of: dict[int, str]) -> str:
    """The whole func in anec IR with each weight const reading its stage BLOBFILE."""
    keyed = {id(n): {"weight": blob_of[id(n)]} for n in graph.nodes if id(n) in blob_of}  # weight consts only
    module = Module()
    module.add_func(graph)  # a module around the func, for the module's text: the func is not copied
    return ("// The compiled pipeline in anec IR: the func before it was cut into stages;\n"
            "// weights are keyed by the stage BLOBFILE and metadata offset that hold them.\n"
            + print_module(module, attrs=keyed))


__all__ = ["build_multi_program"]
