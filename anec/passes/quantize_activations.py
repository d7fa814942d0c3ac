"""quantize-activations: int8 activations into conv and matmul, calibrated and gated (W8A8)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

import numpy as np

from anec.compress.activations import DEFAULT_MIN_COSINE, agreement, calibration_samples
from anec.diagnostics import AnecError
from anec.ir.act_quant import PREFIX, QUANT_OPS, annotation_key, fake_quant, scale_for
from anec.ir.func_facts import ActivationOutput, ActivationReport, ActivationTensor
from anec.ir.interp import interpret
from anec.ir.ops import get_op
from anec.ir.types import DType, TensorType
from anec.ir.weight_binding import materialize_attrs
from anec.passes.base import Pass, PassContext

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node, Value

    Users = list[tuple[Node, int]]
    """The consumers of an activation: (node, positional operand index)."""


@dataclass(frozen=True)
class QuantizeActivations(Pass):
    """Give the activation operand of each conv/matmul that reads a weight an int8 round trip.

    The pass runs the func on the calibration inputs (``calibration``: one array per func
    input by name, the input's shape or that shape with a leading axis of samples) with the
    fp16 interpreter, records each candidate activation's max|x| over every sample and
    annotates its consumers with the scale ``fp16(max|x| / 127)`` (``int8_x=...``: per
    tensor, symmetric, zero point 0, as maderix's ``ane_int8_bench.m``). emit-mil then writes
    MIL ``quantize`` -> int8 -> ``dequantize`` before the op; the interpreter and the sim
    run the same round trip (:mod:`anec.ir.act_quant`).

    A candidate is the non-weight operand of a conv1x1, conv or matmul whose other operand
    is a weight (a const, or a weight compiled as an input), when it is fp16 and computed
    inside the program: the func's inputs (and their casts to fp16), and for a cut func the
    values crossing between its programs, stay fp16 (maderix quantizes between layers, never
    a program input), and so does a product of two activations (attention scores).

    The gate: the quantized func's outputs are compared with the unquantized ones on every
    sample; while an output's cosine is below ``min_cosine`` on some sample, the activation
    whose int8 round trip loses the most (the largest relative L2 error ``||x - q(x)|| /
    ||x||`` on a sample) goes back to fp16, and the gate runs again. The report
    (``graph.facts.activations``, the manifest's ``activations``) lists every candidate:
    int8 with its scale, or fp16 and why (all fp16 in a func none of whose inputs the
    calibration names: they are another func's). The IR op set does not change; the
    annotations are the decision. Without the weights it reads (``ctx.weights`` None, a
    MIL-only compile) the pass cannot calibrate and refuses to run.

    Before:
        // pass: calibration={"x": [[[[1.0, -2.0]], [[0.5, 3.0]]]]}
        func f(%x: fp16[1, 2, 1, 2]) {
          %w1 = const(value=[[[[1.0]], [[0.5]]], [[[-1.0]], [[0.25]]]]) : fp16[2, 2, 1, 1]
          %h = conv1x1(%x, %w1) : fp16[1, 2, 1, 2]
          %g = relu(%h) : fp16[1, 2, 1, 2]
          %w2 = const(value=[[[[0.5]], [[1.0]]], [[[1.0]], [[-0.5]]]]) : fp16[2, 2, 1, 1]
          %y = conv1x1(%g, %w2) : fp16[1, 2, 1, 2]
          return %y
        }
    After: %g (max 2.75 on the sample) goes through int8 with scale fp16(2.75 / 127); %x is
    the program's input and stays fp16.
        func f(%x: fp16[1, 2, 1, 2]) {
          %w1 = const(value=[[[[1.0]], [[0.5]]], [[[-1.0]], [[0.25]]]]) : fp16[2, 2, 1, 1]
          %h = conv1x1(%x, %w1) : fp16[1, 2, 1, 2]
          %g = relu(%h) : fp16[1, 2, 1, 2]
          %w2 = const(value=[[[[0.5]], [[1.0]]], [[[1.0]], [[-0.5]]]]) : fp16[2, 2, 1, 1]
          %y = conv1x1(%g, %w2) : fp16[1, 2, 1, 2] @{int8_x=0.0216522216796875}
          return %y
        }

    Unchanged: the only conv reads the program's input.
        // pass: calibration={"x": [[[[1.0, -2.0]], [[0.5, 3.0]]]]}
        func f(%x: fp16[1, 2, 1, 2]) {
          %w1 = const(value=[[[[1.0]], [[0.5]]], [[[-1.0]], [[0.25]]]]) : fp16[2, 2, 1, 1]
          %h = conv1x1(%x, %w1) : fp16[1, 2, 1, 2]
          %y = relu(%h) : fp16[1, 2, 1, 2]
          return %y
        }
    """

    name: ClassVar[str] = "quantize-activations"
    calibration: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Func input name -> calibration array(s) (not compared: arrays have no truth value)."""
    min_cosine: float = DEFAULT_MIN_COSINE
    """The gate: the least cosine of every output against the unquantized func, per sample."""

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        for n in graph.nodes:  # a decision made before (the pass run again) is made anew
            old = [k for k in n.annotations if k.startswith(PREFIX)]
            if old:
                graph.annotate(n, drop=old)
        cands, skipped = candidates(graph)
        order = {id(v): i for i, v in enumerate(graph.values())}
        as_inputs = {w["input"] for w in graph.facts.weight_inputs}
        data = [v.name for v in graph.inputs if v.name not in as_inputs]
        if data and not any(name in self.calibration for name in data):  # another func's inputs
            none = f"no calibration inputs for func '{graph.name}' (it takes {', '.join(data)})"
            found = [(v, users, none) for v, users in cands] + skipped
            found.sort(key=lambda f: order.get(id(f[0]), 0))
            graph.facts.activations = ActivationReport(
                dtype="int8", min_cosine=self.min_cosine, samples=0, outputs=[],
                tensors=[_row(v, users, "fp16", None, None, r) for v, users, r in found])
            return
        feeds = self._feeds(graph, ctx)
        refs = []
        maxes = {id(v): 0.0 for v, _ in cands}

        def observe_max(node: "Node", results: list[np.ndarray]) -> None:
            for r, arr in zip(node.results, results):
                if id(r) in maxes and arr.size:
                    maxes[id(r)] = max(maxes[id(r)], float(np.max(np.abs(arr.astype(np.float64)))))

        for feed in feeds:
            out = interpret(graph, feed, ctx.weights, mode="fp16", observe=observe_max)
            bad = [k for k, a in out.items() if a.dtype.kind == "f" and not np.all(np.isfinite(a))]
            if bad:
                raise AnecError(f"func '{graph.name}': output {bad[0]} is not finite on the calibration inputs "
                                "without int8 activations, so the activation gate cannot compare against it",
                                span=graph.span, hint="check the inputs with anec check --inputs (ANE-FP16-RANGE)")
            refs.append(out)
        rows: dict[int, ActivationTensor] = {}
        kept: dict[int, float] = {}
        for v, users in cands:
            scale, no_scale = scale_for(maxes[id(v)])
            rows[id(v)] = _row(v, users, "int8" if scale is not None else "fp16", scale, maxes[id(v)], no_scale)
            if scale is not None:
                kept[id(v)] = scale
        users_of = {id(v): users for v, users in cands}
        outputs = self._gate(graph, ctx, feeds, refs, kept, rows, users_of)
        for v, users, why in skipped:
            rows[id(v)] = _row(v, users, "fp16", None, None, why)
        graph.facts.activations = ActivationReport(
            dtype="int8", min_cosine=self.min_cosine, samples=len(feeds),
            tensors=[rows[k] for k in sorted(rows, key=lambda k: order.get(k, 0))], outputs=outputs)

    def _feeds(self, graph: "Graph", ctx: PassContext) -> list[dict[str, Any]]:
        """One interpreter feed per calibration sample (weights compiled as inputs included)."""
        reads = graph.facts.weight_inputs or any(n.op == "const" and "weight" in n.attrs for n in graph.nodes)
        if ctx.weights is None and reads:
            raise AnecError(f"func '{graph.name}': int8 activations are calibrated by running the func, which "
                            "needs its weights", span=graph.span,
                            hint="give the weights (--weights or --random-weights), or drop --activations")
        as_inputs = {w["input"]: w for w in graph.facts.weight_inputs}
        logical = {e["name"]: tuple(e["shape"]) for e in graph.facts.logical_inputs}
        data = [(v.name, logical.get(v.name, v.type.shape)) for v in graph.inputs if v.name not in as_inputs]
        calib = {k: np.asarray(a) for k, a in self.calibration.items()}
        samples = calibration_samples(calib, data, graph.name)
        fixed = {}
        for name, w in as_inputs.items():
            attrs = {"weight": w["key"], "perm": w.get("perm"), "slice": w.get("slice")}
            fixed[name] = materialize_attrs(attrs, TensorType(DType(w["dtype"]), tuple(w["shape"])), ctx.weights, name)
        shapes = {v.name: v.type.shape for v in graph.inputs}
        return [{**{k: a.reshape(shapes[k]) for k, a in s.items()}, **fixed} for s in samples]

    def _gate(self, graph: "Graph", ctx: PassContext, feeds: list[dict[str, Any]], refs: list[dict[str, np.ndarray]],
              kept: dict[int, float], rows: dict[int, ActivationTensor],
              users_of: dict[int, "Users"]) -> list[ActivationOutput]:
        """Annotate ``kept``; drop the worst activation while an output is below the gate."""
        names = [v.name for v in graph.outputs]
        if not kept:  # nothing in int8: the program is the unquantized one
            _annotate(graph, kept, users_of)
            return [ActivationOutput(output=n, cosine=1.0, max_rel=0.0) for n in names]
        while True:
            _annotate(graph, kept, users_of)
            errors = {k: 0.0 for k in kept}

            def observe_error(node: "Node", results: list[np.ndarray]) -> None:
                for r, arr in zip(node.results, results):
                    if id(r) in errors:
                        x = arr.astype(np.float64)
                        norm = float(np.linalg.norm(x))
                        if norm > 0:
                            e = float(np.linalg.norm(fake_quant(arr, kept[id(r)]).astype(np.float64) - x)) / norm
                            errors[id(r)] = max(errors[id(r)], e)

            figures = {n: (math.inf, 0.0) for n in names}
            for feed, ref in zip(feeds, refs):
                got = interpret(graph, feed, ctx.weights, mode="fp16", observe=observe_error)
                for n in names:
                    cos, rel = agreement(got[n], ref[n])
                    figures[n] = (min(figures[n][0], cos), max(figures[n][1], rel))
            for k, e in errors.items():
                rows[k]["rel_l2"] = e
            low = [n for n in names if not figures[n][0] >= self.min_cosine]
            if not low or not kept:
                return [ActivationOutput(output=n, cosine=_finite(figures[n][0]), max_rel=_finite(figures[n][1]))
                        for n in names]
            worst = max(kept, key=lambda k: (errors[k], -list(kept).index(k)))
            del kept[worst]
            rows[worst]["dtype"] = "fp16"
            rows[worst]["reason"] = (f"output {low[0]} cosine {figures[low[0]][0]:.6f} < {self.min_cosine:g} with "
                                     f"it in int8; the largest int8 error of those left (relative L2 "
                                     f"{errors[worst]:.4g})")


def _finite(v: float) -> float:
    return v if math.isfinite(v) else -1.0


def _row(v: "Value", users: "Users", dtype: str, scale: float | None, max_abs: float | None,
         why: str | None) -> ActivationTensor:
    return ActivationTensor(value=v.name, consumers=sorted({n.result.name for n, _ in users}), dtype=dtype,
                            scale=scale, max_abs=max_abs if max_abs is None or math.isfinite(max_abs) else None,
                            rel_l2=None, reason=why)


def _annotate(graph: "Graph", kept: Mapping[int, float], users_of: Mapping[int, "Users"]) -> None:
    """The ``int8_<operand>`` annotations of exactly the activations in ``kept``."""
    for k, users in users_of.items():
        for node, index in users:
            key = annotation_key(get_op(node.op).positional[index].name)
            if k in kept:
                graph.annotate(node, {key: kept[k]})
            elif key in node.annotations:
                graph.annotate(node, drop=[key])


def _is_weight(graph: "Graph", v: "Value") -> bool:
    if v.producer is not None:
        return v.producer.op == "const"
    return any(w["input"] == v.name for w in graph.facts.weight_inputs)


def candidates(graph: "Graph") -> tuple[list[tuple["Value", "Users"]], list[tuple["Value", "Users", str]]]:
    """The activations the pass may quantize, each with its consumers ``(node, operand
    index)`` (definition order), and the ones it may not, with the reason."""
    plan = graph.facts.partition
    crossing = {id(v) for s in plan.stages for v in s.inputs} if plan is not None else set()
    found: dict[int, tuple["Value", "Users"]] = {}
    for n in graph.nodes:
        if n.op not in QUANT_OPS or len(n.operands) < 2:
            continue
        a, b = (_is_weight(graph, v) for v in n.operands[:2])
        if a == b or (n.op != "matmul" and not b):
            continue  # two activations (or two weights); a conv over a non-weight never reaches here
        i = 1 if a else 0
        v = n.operands[i]
        found.setdefault(id(v), (v, []))[1].append((n, i))
    ok, skipped = [], []
    for v, users in found.values():
        src = v
        while src.producer is not None and src.producer.op == "cast":  # the input's fp16 copy is the input
            src = src.producer.operands[0]
        if v.type.dtype != DType.fp16:
            skipped.append((v, users, f"{v.type.dtype}, not fp16"))
        elif src.producer is None:
            skipped.append((v, users, "a program input (int8 activations go between layers, as maderix runs them)"))
        elif id(v) in crossing or id(src) in crossing:
            skipped.append((v, users, "crosses between the programs of the cut func (a program input)"))
        else:
            ok.append((v, users))
    return ok, skipped


__all__ = ["QuantizeActivations", "candidates"]
