"""Cutting one stage of a partition plan out of its func, as a func of its own.

The compiler builds a cut func's programs from these stage graphs
(:mod:`anec.multi_program_build`): one ordinary program per stage, named so
that stages doing the same computation on other weights get the same MIL.
"""

from __future__ import annotations

from typing import Any

from anec.diagnostics import Span
from anec.ir.act_quant import PREFIX as INT8_PREFIX
from anec.ir.func_facts import Plan, StageSource
from anec.ir.graph import Graph
from anec.ir.nodes import Node, Value
from anec.ir.types import TensorType, device_shape


def extract_stage(graph: Graph, plan: Plan, k: int) -> Graph:
    """Stage ``k`` of ``plan`` as a func of its own, with canonical names.

    Inputs are ``in0, in1, ...`` (in :attr:`Stage.inputs` order), outputs
    ``out0, out1, ...`` (:attr:`Stage.outputs` order), every other value
    ``v0, v1, ...`` in definition order and weight consts ``w0, w1, ...``: two
    stages doing the same computation on other weights (the layers of a
    transformer) get byte-identical MIL. Stage I/O is rank 4 (ANE-IO-RANK4):
    a crossing value of another rank travels in its device shape
    (:func:`anec.ir.types.device_shape`, the same bytes) with a reshape
    on each side. Spans are kept, so errors still point at the source, and so are the
    ``int8_*`` annotations of int8 activations (the other annotations are the func's analyses).
    ``facts.stage_source`` maps each canonical I/O name to the func's value name
    and each const's name to the func's const node.
    """
    s = plan.stages[k]
    g = Graph(f"{graph.name}_s{k:02d}", span=graph.span)
    vmap: dict[int, Value] = {}
    origin: dict[str, str] = {}
    const_origin: dict[str, "Node"] = {}
    counter = {"v": 0, "w": 0}

    def fresh(prefix: str) -> str:
        name = f"{prefix}{counter[prefix]}"
        counter[prefix] += 1
        return name

    def node(op: str, operands: list[Value], attrs: dict[str, Any], rtype: TensorType, span: Span | None,
             name: str) -> Value:
        r = Value(name, rtype, span=span)  # add_node sets its producer
        g.add_node(Node(op, operands, attrs, [r], {}, span))
        return r

    for i, v in enumerate(s.inputs):
        dev = v.type.with_shape(device_shape(v.type.shape))
        inp = g.add_input(f"in{i}", dev, v.span)
        origin[inp.name] = v.name
        vmap[id(v)] = inp if dev == v.type else node("reshape", [inp], {"shape": list(v.type.shape)}, v.type,
                                                     v.span, fresh("v"))
    run = plan.items[s.start:s.end]
    for x in run:
        for v in x.inputs():
            c = v.producer
            if c is not None and c.op == "const" and id(v) not in vmap:
                r = Value(fresh("w" if "weight" in c.attrs else "v"), v.type, span=v.span)
                g.add_node(Node("const", [], dict(c.attrs), [r], {}, c.span))
                vmap[id(v)] = r
                const_origin[r.name] = c
        results = [Value(fresh("v"), r.type, span=r.span) for r in x.results]
        notes = {k: v for k, v in x.annotations.items() if k.startswith(INT8_PREFIX)}  # the int8 decisions
        g.add_node(Node(x.op, [vmap[id(v)] for v in x.operands], dict(x.attrs), results,
                        {key: vmap[id(v)] for key, v in x.optional.items()}, x.span, notes))
        for r, nr in zip(x.results, results):
            vmap[id(r)] = nr
    outs = []
    for i, v in enumerate(s.outputs):
        src = vmap[id(v)]
        dev = v.type.with_shape(device_shape(v.type.shape))
        name = f"out{i}"
        if dev == v.type:
            g.rename_value(src, name)
            out = src
        else:
            out = node("reshape", [src], {"shape": list(dev.shape)}, dev, v.span, name)
        origin[name] = v.name
        outs.append(out)
    g.set_outputs(outs)
    g.return_span = graph.return_span
    g.facts.stage_source = StageSource(origin, const_origin)
    return g


__all__ = ["extract_stage"]
