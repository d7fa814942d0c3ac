"""The coremltools program of a compiled artifact: its ops rebuilt with coremltools' ``mb`` ops.

:class:`ProgramBuilder` rebuilds one compiled func op for op, each op named as
``model.mil`` names it (the artifact must re-emit to its ``model.mil``);
:class:`IOPlan` gives the package the model's logical I/O shapes with
``reshape`` / ``concat`` adapters inside; :func:`assemble` runs every stage's
builder in one ``main`` function (:func:`build_program`, :func:`build_pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from anec.frontends import CoreMLExportError
from anec.frontends.coreml_mil import MilStatement, mil_statements
from anec.frontends.coreml_wiring import Wiring, program_wiring, stage_name
from anec.ir.ops import const_literal, with_defaults
from anec.ir.types import DType
from anec.mil.manifest_types import Manifest, PipelineManifest


def opset(dialect: str) -> Any:
    import coremltools as ct

    opset = {"ios18": ct.target.iOS18, "ios16": ct.target.iOS16}.get(dialect)
    if opset is None:
        raise CoreMLExportError(f"MIL dialect '{dialect}' has no Core ML opset mapping")
    return opset


# ---------------------------------------------------------------------------
# building the program


class ProgramBuilder:
    """Rebuilds one compiled func with coremltools' ``mb`` ops, named as model.mil names them.

    ``rename`` maps each model.mil name to the package's name for it (a
    pipeline stage's ``v12`` becomes ``s03_v12``); names are claimed in
    model.mil's name space, so the package's names are exactly the renamed
    statement names.
    """

    def __init__(self, art: Any, rename: Callable[[str], str] | None = None) -> None:
        from anec.mil.artifact import artifact_weights
        from anec.mil.emitter import emit_mil
        from anec.targets import DEFAULT_TARGET, get_target

        self.art = art
        if any(w.part for w in art.manifest.weights):
            raise CoreMLExportError(
                f"artifact '{art.func}' holds compressed weights, which the Core ML export does not write yet",
                hint="export an artifact compiled without --compress (docs/compression.md)")
        module = art.program_module()
        self.graph = module.func(art.func)
        self.weights = artifact_weights(art)
        target = get_target(art.manifest.target or DEFAULT_TARGET)
        packed = len({w.file for w in art.manifest.weights}) == 1 and len(art.manifest.weights) > 1
        program = emit_mil(self.graph, target, pack_weights=packed)
        if program.text != art.mil_text:
            raise CoreMLExportError(
                f"artifact '{art.func}': program.ir does not re-emit to model.mil",
                hint="the artifact was compiled by another anec version or modified; recompile it")
        self.dialect = program.dialect
        self.names = program.names
        self.taken = set(self.names.values())
        self.env: dict[int, Any] = {}
        self.pkg = rename or (lambda name: name)

    def claim(self, base: str) -> str:
        from anec.mil.emitter import claim_name

        return claim_name(base, self.taken)

    def param(self, node_name: str, param: str, value: Any) -> Any:
        from coremltools.converters.mil import Builder as mb

        return mb.const(val=value, name=self.pkg(self.claim(f"{node_name}_{param}")))


    def emit(self, bound: dict[str, Any]) -> list[Any]:
        """Add the program's ops to the open function, its inputs bound to ``bound[name]``;
        returns the output vars."""
        from coremltools.converters.mil import Builder as mb

        for v in self.graph.inputs:
            self.env[id(v)] = bound[v.name]
        for n in self.graph.nodes:
            self.node(n, mb)
        return [self.env[id(v)] for v in self.graph.outputs]

    def name(self, v: Any) -> str:
        return self.names[v.name]

    def node(self, n: Any, mb: Any) -> None:
        a = with_defaults(n.op, n.attrs)
        r = n.results[0]
        nn = self.name(r)
        x = [self.env[id(v)] for v in n.operands]
        op = n.op
        if op == "const":
            t = r.type
            if "value" in a:
                arr = const_literal(a["value"], t)
                val = arr.reshape(()).astype(t.dtype.np)[()] if t.rank == 0 else arr
                if t.dtype == DType.bool and t.rank == 0:
                    val = bool(val)
            else:
                slot = next(w for w in self.art.manifest.weights if w.const == nn)
                from anec.mil.artifact import blob_key

                val = np.asarray(self.weights[blob_key(slot.file, slot.offset)]).reshape(t.shape)
            out = mb.const(val=val, name=self.pkg(nn))
        elif op == "split":
            op_name = self.claim(f"{nn}_split")
            axis = self.param(op_name, "axis", np.int32(a["axis"] % n.operands[0].type.rank))
            sizes = self.param(op_name, "split_sizes", np.array(a["sizes"], np.int32))
            outs = mb.split(x=x[0], axis=axis, split_sizes=sizes, name=self.pkg(op_name))
            for res, var in zip(n.results, outs):
                var.name = self.pkg(self.name(res))
                self.env[id(res)] = var
            return
        else:
            out = self.from_lowering(n, a, x, nn, mb)
        self.env[id(r)] = out

    def from_lowering(self, n: Any, a: dict, x: list[Any], nn: str, mb: Any) -> Any:
        """An op translated as its row's MIL lowering writes it (``get_op(op).lowering``): the
        same MIL op, operands under their MIL argument names, and the same parameters as
        named consts, in name order (every op but const and split: those the emitter writes
        as MIL statements of their own)."""
        from anec.ir.ops import Mil, MilScalar, lookup_op

        r = n.results[0]
        row = lookup_op(n.op)
        low = row.lowering if row is not None else None
        fn = getattr(mb, low.op, None) if isinstance(low, Mil) else None
        if fn is None or n.optional or len(n.results) != 1 or any(o.variadic for o in row.positional):
            raise CoreMLExportError(f"%{r.name}: op '{n.op}' has no Core ML translation",
                                    hint="it should not appear in a compiled program; recompile")
        params = low.params([v.type for v in n.operands], [r.type], a)

        def value(v: Any) -> Any:
            if isinstance(v, MilScalar):
                return np.asarray(v.value, v.dtype.np)[()]
            if isinstance(v, (str, DType)):
                return str(v)
            if isinstance(v, (bool, np.bool_)):
                return bool(v)
            if isinstance(v, (int, np.integer)):
                return np.int32(v)
            return np.array(v, np.int32)

        kw = {p: self.param(nn, p, value(params[p])) for p in sorted(params)}
        for operand, v in zip((o.name for o in row.positional), x):
            kw[low.arg(operand)] = v
        return fn(name=self.pkg(nn), **kw)


def build_program(art: Any) -> Any:
    wiring = program_wiring(art)
    plan = io_plan(art.manifest, [art])
    return assemble(plan, wiring, [ProgramBuilder(art, plan.through(lambda name: name))])


def build_pipeline(pipe: Any, wiring: Wiring) -> Any:
    """Every stage's ops in order in one ``main`` function, stage inputs bound to their sources."""
    plan = io_plan(pipe.manifest, pipe.stages)
    builders = [ProgramBuilder(art, plan.through(wiring.rename(k))) for k, art in enumerate(pipe.stages)]
    dialects = sorted({b.dialect for b in builders})
    if len(dialects) != 1:
        raise CoreMLExportError(f"pipeline '{pipe.func}': stages in several MIL dialects {dialects}",
                                hint="the artifact was modified after compiling; recompile it")
    return assemble(plan, wiring, builders)



@dataclass
class IOPlan:
    """The package's inputs and outputs in the model's logical shapes, and the ops that
    adapt them to the program's rank-4 device I/O (ANE-IO-RANK4).

    An input ``x`` of logical shape ``[1, 16, 64]`` whose program input is
    ``[1, 16, 1, 64]`` is read by ``x_device = reshape(x)``, which the
    program's uses of ``x`` read instead; an output ``y`` is the program's
    value (renamed ``y_device``) reshaped to its logical shape, and a chunked
    output (``pieces`` along ``axis``) is their ``concat`` reshaped.
    ``adapters`` lists those ops as model.mil statements (in package names),
    ``inner`` the renaming of the device I/O inside the package.
    """

    inputs: list[tuple[str, str, list[int]]]   # name, dtype, logical shape
    outputs: list[tuple[str, str, list[int]]]
    inner: dict[str, str]
    before: list["MilStatement"]
    after: list["MilStatement"]

    def through(self, rename: Callable[[str], str]) -> Callable[[str], str]:
        return lambda name: self.inner.get(rename(name), rename(name))


def io_plan(man: "Manifest | PipelineManifest", arts: list[Any]) -> IOPlan:
    from anec.mil.emitter import claim_name

    try:
        return _read_io_plan(man, arts, claim_name)
    except (KeyError, TypeError, ValueError) as e:
        raise CoreMLExportError(f"'{man.func}': malformed logical I/O in the manifest "
                                f"({type(e).__name__}: {e})",
                                hint="the artifact was modified after compiling; recompile it") from None


def _read_io_plan(man: "Manifest | PipelineManifest", arts: list[Any], claim_name: Callable) -> IOPlan:
    from anec.mil.manifest_types import LogicalOutput

    taken = {e.name for e in [*man.inputs, *man.outputs]}
    taken |= {e.name for e in man.logical_outputs}
    for a in arts:  # model.mil's own names (a pipeline's stage names are sNN_ prefixed: taken too)
        taken |= {name for st in mil_statements(a.mil_text)[1] for _, name in st.results}
    if len(arts) > 1:
        taken |= {stage_name(k, name) for k, a in enumerate(arts)
                  for st in mil_statements(a.mil_text)[1] for _, name in st.results}
    device = {e.name: e for e in [*man.inputs, *man.outputs]}
    logical_in = {e.name: [int(d) for d in e.shape] for e in man.logical_inputs}
    inner: dict[str, str] = {}
    before: list[MilStatement] = []
    after: list[MilStatement] = []

    def shape_const(at: str, shape: list[int], into: list) -> str:
        name = claim_name(f"{at}_shape", taken)
        into.append(MilStatement([("tensor<int32>", name)], "const", {}, np.array(shape, np.int32)))
        return name

    inputs = []
    for e in man.inputs:
        name, dev = e.name, [int(d) for d in e.shape]
        shape = logical_in.get(name, dev)
        if int(np.prod(shape)) != int(np.prod(dev)):
            raise ValueError(f"input '{name}': logical shape {shape} is not {dev}'s elements")
        inputs.append((name, e.dtype, shape))
        if shape != dev:
            inner[name] = claim_name(f"{name}_device", taken)
            sc = shape_const(inner[name], dev, before)
            before.append(MilStatement([("tensor", inner[name])], "reshape", {"x": name, "shape": sc}))
    outputs = []
    los = man.logical_outputs or tuple(LogicalOutput(e.name, (e.name,), shape=e.shape) for e in man.outputs)
    for lo in los:
        name, pieces, axis = lo.name, [str(p) for p in lo.pieces], lo.axis
        specs = [device[p] for p in pieces]
        dtype = specs[0].dtype
        dev = [int(d) for d in specs[0].shape]
        if axis is not None and len(pieces) > 1:
            dev[axis] = sum(int(sp.shape[axis]) for sp in specs)
        shape = [int(d) for d in lo.shape] if lo.shape is not None else dev
        if int(np.prod(shape)) != int(np.prod(dev)):
            raise ValueError(f"output '{name}': logical shape {shape} is not {dev}'s elements")
        outputs.append((name, dtype, shape))
        if len(pieces) == 1 and shape == dev and pieces[0] == name:
            continue
        for p in pieces:  # the device values that hold a package output's name move aside
            if p == name or p in {n for n, _, _ in outputs[:-1]}:
                inner[p] = claim_name(f"{p}_device", taken)
        src = [inner.get(p, p) for p in pieces]
        if len(pieces) > 1:
            joined = name if shape == dev else claim_name(f"{name}_concat", taken)
            ax = claim_name(f"{joined}_axis", taken)
            il = claim_name(f"{joined}_interleave", taken)
            after += [MilStatement([("int32", ax)], "const", {}, np.asarray(axis, np.int32)),
                      MilStatement([("bool", il)], "const", {}, np.asarray(False)),
                      MilStatement([("tensor", joined)], "concat",
                                   {"values": "(" + ", ".join(src) + ")", "axis": ax, "interleave": il})]
            src = [joined]
        if src[0] != name:
            sc = shape_const(name, shape, after)
            after.append(MilStatement([("tensor", name)], "reshape", {"x": src[0], "shape": sc}))
    return IOPlan(inputs, outputs, inner, before, after)


def assemble(plan: IOPlan, wiring: Wiring, builders: list[Any]) -> Any:
    """The coremltools program: one ``main`` taking and returning the logical shapes
    (:class:`IOPlan`), running each stage's builder on its bound inputs."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program
    from coremltools.converters.mil.mil.types.type_mapping import string_to_builtin

    specs = {name: mb.TensorSpec(tuple(shape), string_to_builtin(dtype)) for name, dtype, shape in plan.inputs}
    with Function(specs, opset_version=opset(builders[0].dialect)) as func:
        values: dict[str, Any] = dict(func.inputs)
        _adapt(plan.before, values, mb)
        produced: dict[tuple[int, str], Any] = {}
        for k, b in enumerate(builders):
            bound = {}
            for name, src in wiring.sources[k].items():
                if src[0] == "input":
                    bound[name] = values[plan.inner.get(src[1], src[1])]
                else:
                    bound[name] = produced[src[1:]]
            for v, var in zip(b.graph.outputs, b.emit(bound)):
                produced[(k, v.name)] = var
        for name, k, out in wiring.outputs:
            values[name] = produced[(k, out)]
            values[plan.inner.get(name, name)] = produced[(k, out)]
        _adapt(plan.after, values, mb)
        func.set_outputs([values[name] for name, _, _ in plan.outputs])
    prog = Program()
    prog.add_function("main", func)
    return prog


def _adapt(stmts: list["MilStatement"], values: dict[str, Any], mb: Any) -> None:
    """Add the I/O adapter ops of an :class:`IOPlan` (consts, reshape, concat)."""
    for st in stmts:
        name = st.results[0][1]
        if st.op == "const":
            val = st.value if np.ndim(st.value) else st.value[()]
            values[name] = mb.const(val=val.item() if isinstance(val, np.bool_) else val, name=name)
        elif st.op == "reshape":
            values[name] = mb.reshape(x=values[st.args["x"]], shape=values[st.args["shape"]], name=name)
        else:  # concat
            parts = tuple(values[p.strip()] for p in st.args["values"].strip("()").split(","))
            values[name] = mb.concat(values=parts, axis=values[st.args["axis"]],
                                     interleave=values[st.args["interleave"]], name=name)
