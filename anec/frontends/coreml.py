"""``anec export-coreml``: a compiled artifact as a Core ML ML Program (``.mlpackage``).

The public Core ML API is the supported way to run the very program anec
compiled on a Mac (and Xcode's Core ML performance report the only public
view of per-op ANE placement). The package is built op for op from the
artifact -- ``program.ir`` (the compiled program in anec IR), the weights in
``weights/*.bin`` and the manifest -- with coremltools' MIL builder, so that
each ``model.mil`` statement becomes the same Core ML op with the same name,
arguments and constant values::

    anec compile model.ir -o build/
    anec export-coreml build/main -o model.mlpackage

coremltools' optimization passes are off (``PassPipeline.EMPTY``) and the
precision is left as the program says (``FLOAT32`` keeps coremltools from
inserting casts: the program already computes in fp16). The package is
written to a temporary directory, verified, then renamed into place.

The package takes and returns the model's logical shapes (the manifest's
``logical_inputs`` / ``logical_outputs``), not the device's rank-4 ones: an
input ``x`` is read by ``x_device = reshape(x)``, which the program's uses of
``x`` read instead, and an output ``y`` is the program's value (renamed
``y_device``) reshaped, or the ``concat`` of its pieces (:class:`_IOPlan`).

Verification (:func:`verify_package`, run by every export) reads the package
back with coremltools (spec + weights) and checks, on Linux:

* the function's operations equal, one to one, the I/O adapters and
  ``model.mil``'s statements after the rewrites coremltools' backend makes
  even under ``PassPipeline.EMPTY`` (:data:`FUSIONS`, e.g. ``mul(x,
  sigmoid(x))`` -> ``silu(x)``; :data:`BACKEND_PASSES`): op type, result
  names, argument names, and every constant's value (BLOBFILE constants
  compared with the artifact's ``weights/*.bin`` payloads). Any other
  difference is refused, first by op kind ("1 more 'silu'") with a hint;
* the inputs and outputs have the model's names, dtypes and logical shapes.

A pipeline artifact (a func legalize cut into stages, ``anec-pipeline/1``)
becomes ONE package whose ``main`` computes the whole func: Core ML does its
own partitioning for the ANE, so a Core ML user wants one function, not one
package per stage. The stages' ops follow each other in stage order, each
stage input bound to the value the top manifest wires it to. Names:

* a value ``v12`` (or weight ``w0``, parameter ``v12_pad``) of stage 3's
  model.mil is ``s03_v12`` (``s03_w0``, ``s03_v12_pad``);
* a stage input is not an op: its uses read the source, a func input by its
  name or an earlier stage's output by that output's package name;
* a stage output that is a func output is named as the func output
  (``logits``), so the package's I/O are the top manifest's (in their
  logical shapes, as above).

A func input or output named like a stage value (``s00_x``) is refused. Before
building, the wiring is checked against the stages' manifests (names, dtypes,
device shapes) and proved against the whole func's ``program.ir``: the stages'
``program.ir`` composed by the wiring must compute, value for value, what the
func computes (:class:`_Terms`). Verification then compares the package with
every stage's ``model.mil`` statement by statement under the renaming, every
BLOBFILE weight with ``stages/sNN/weights/*.bin``, and its I/O with the top
manifest.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from anec.frontends import CoreMLExportError, require
from anec.fsutil import discard, move_into_place
from anec.ir.ops import const_literal, with_defaults
from anec.ir.types import DType

_CT_DTYPES = {"fp16": "fp16", "fp32": "fp32", "int32": "int32", "bool": "bool", "int8": "int8",
              "uint8": "uint8"}


@dataclass
class ExportReport:
    """What :func:`export_coreml` wrote and checked."""

    path: Path
    ops: int
    consts: int
    weights: int
    checks: list[str] = field(default_factory=list)
    stages: int = 1
    """Programs exported into the package's one function (a pipeline's stages)."""


# ---------------------------------------------------------------------------
# locating the artifact


def find_artifact(directory: str | os.PathLike, func: str | None = None) -> Any:
    """The artifact in ``directory`` (a func directory, or a compile output directory
    holding one func, or ``func``): an :class:`~anec.mil.artifact.Artifact` or a
    :class:`~anec.mil.multi_program.PipelineArtifact`."""
    from anec.mil.artifact import MANIFEST_FILE
    from anec.mil.multi_program import load_any

    d = Path(directory)
    if not d.is_dir():
        raise CoreMLExportError(f"'{d}' is not a directory",
                                hint="give a compiled artifact: anec compile model.ir -o build/")
    if (d / MANIFEST_FILE).is_file():
        if func is not None and d.name != func:
            art = load_any(d)
            if art.func != func:
                raise CoreMLExportError(f"'{d}' holds func '{art.func}', not '{func}'")
            return art
        return load_any(d)
    funcs = sorted(p.name for p in d.iterdir() if (p / MANIFEST_FILE).is_file())
    if not funcs:
        raise CoreMLExportError(f"'{d}' holds no compiled program ({MANIFEST_FILE} is missing)",
                                hint="compile first: anec compile model.ir -o build/")
    if func is None:
        if len(funcs) > 1:
            raise CoreMLExportError(f"'{d}' holds {len(funcs)} programs; choose one",
                                    hint=f"pass --func with one of: {', '.join(funcs)}")
        func = funcs[0]
    if func not in funcs:
        raise CoreMLExportError(f"no program '{func}' in '{d}'", hint=f"programs: {', '.join(funcs)}")
    return load_any(d / func)


def _opset(dialect: str) -> Any:
    import coremltools as ct

    opset = {"ios18": ct.target.iOS18, "ios16": ct.target.iOS16}.get(dialect)
    if opset is None:
        raise CoreMLExportError(f"MIL dialect '{dialect}' has no Core ML opset mapping")
    return opset


# ---------------------------------------------------------------------------
# building the program


class _Builder:
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
        if any(w.get("part") for w in art.manifest["weights"]):
            raise CoreMLExportError(
                f"artifact '{art.func}' holds compressed weights, which the Core ML export does not write yet",
                hint="export an artifact compiled without --compress (docs/compression.md)")
        module = art.program_module()
        self.graph = module.func(art.func)
        self.weights = artifact_weights(art)
        target = get_target(art.manifest.get("target", DEFAULT_TARGET))
        packed = len({w["file"] for w in art.manifest["weights"]}) == 1 and len(art.manifest["weights"]) > 1
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
                slot = next(w for w in self.art.manifest["weights"] if w["const"] == nn)
                from anec.mil.artifact import blob_key

                val = np.asarray(self.weights[blob_key(slot["file"], slot["offset"])]).reshape(t.shape)
            out = mb.const(val=val, name=self.pkg(nn))
        elif op in ("identity", "exp", "sqrt", "relu", "tanh", "sigmoid"):
            out = getattr(mb, op)(x=x[0], name=self.pkg(nn))
        elif op in ("add", "sub", "mul", "pow", "real_div"):
            out = getattr(mb, op)(x=x[0], y=x[1], name=self.pkg(nn))
        elif op == "cast":
            out = mb.cast(x=x[0], dtype=self.param(nn, "dtype", str(DType(a["dtype"]))), name=self.pkg(nn))
        elif op == "conv1x1":
            if n.optional:
                raise CoreMLExportError(f"%{r.name}: conv bias= reached the compiled program")
            kw = {
                "dilations": self.param(nn, "dilations", np.array([1, 1], np.int32)),
                "groups": self.param(nn, "groups", np.int32(1)),
                "pad": self.param(nn, "pad", np.array([0, 0, 0, 0], np.int32)),
                "pad_type": self.param(nn, "pad_type", "valid"),
                "strides": self.param(nn, "strides", np.array([1, 1], np.int32)),
            }
            out = mb.conv(x=x[0], weight=x[1], name=self.pkg(nn), **kw)
        elif op == "matmul":
            tx = self.param(nn, "transpose_x", bool(a["transpose_x"]))
            ty = self.param(nn, "transpose_y", bool(a["transpose_y"]))
            out = mb.matmul(x=x[0], y=x[1], transpose_x=tx, transpose_y=ty, name=self.pkg(nn))
        elif op == "softmax":
            axis = self.param(nn, "axis", np.int32(a["axis"] % n.operands[0].type.rank))
            out = mb.softmax(x=x[0], axis=axis, name=self.pkg(nn))
        elif op in ("reduce_sum", "reduce_mean", "reduce_max"):
            rank = n.operands[0].type.rank
            axes = self.param(nn, "axes", np.array([ax % rank for ax in a["axes"]], np.int32))
            keep = self.param(nn, "keep_dims", bool(a["keep_dims"]))
            out = getattr(mb, op)(x=x[0], axes=axes, keep_dims=keep, name=self.pkg(nn))
        elif op == "reshape":
            shape = self.param(nn, "shape", np.array(r.type.shape, np.int32))
            out = mb.reshape(x=x[0], shape=shape, name=self.pkg(nn))
        elif op == "transpose":
            out = mb.transpose(x=x[0], perm=self.param(nn, "perm", np.array(a["perm"], np.int32)), name=self.pkg(nn))
        elif op == "slice":
            xt = n.operands[0].type
            stride = a.get("stride") or [1] * xt.rank
            bounds = [slice(b, e, s).indices(d) for b, e, s, d in zip(a["begin"], a["end"], stride, xt.shape)]
            kw = {"begin": self.param(nn, "begin", np.array([b for b, _, _ in bounds], np.int32)),
                  "end": self.param(nn, "end", np.array([e for _, e, _ in bounds], np.int32)),
                  "stride": self.param(nn, "stride", np.array([s for _, _, s in bounds], np.int32))}
            out = mb.slice_by_index(x=x[0], name=self.pkg(nn), **kw)
        elif op == "split":
            op_name = self.claim(f"{nn}_split")
            axis = self.param(op_name, "axis", np.int32(a["axis"] % n.operands[0].type.rank))
            sizes = self.param(op_name, "split_sizes", np.array(a["sizes"], np.int32))
            outs = mb.split(x=x[0], axis=axis, split_sizes=sizes, name=self.pkg(op_name))
            for res, var in zip(n.results, outs):
                var.name = self.pkg(self.name(res))
                self.env[id(res)] = var
            return
        elif op == "pad":
            xt = n.operands[0].type
            before, after = list(a["before"]), list(a["after"])
            first = next((i for i in range(xt.rank) if before[i] or after[i]), xt.rank - 1)
            pad = [p for i in range(first, xt.rank) for p in (before[i], after[i])]
            kw = {"constant_val": self.param(nn, "constant_val", np.asarray(a["value"], xt.dtype.np)[()]),
                  "mode": self.param(nn, "mode", "constant"),
                  "pad": self.param(nn, "pad", np.array(pad, np.int32))}
            out = mb.pad(x=x[0], name=self.pkg(nn), **kw)
        else:
            out = self.from_lowering(n, a, x, nn, mb)
        self.env[id(r)] = out

    def from_lowering(self, n: Any, a: dict, x: list[Any], nn: str, mb: Any) -> Any:
        """An op translated as its row's MIL lowering writes it (``get_op(op).lowering``): the
        same MIL op, operands under their MIL argument names, and the same parameters as
        named consts (the target forms: conv, conv_transpose, max_pool, avg_pool,
        upsample_nearest_neighbor, upsample_bilinear)."""
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


# ---------------------------------------------------------------------------
# pipelines: every stage in one function


def stage_name(k: int, name: str) -> str:
    """The package's name for ``name`` of stage ``k``'s model.mil: ``s03_v12``, ``s03_w0``."""
    return f"s{k:02d}_{name}"


_STAGE_NAME = re.compile(r"s\d{2,}_")


@dataclass
class _Wiring:
    """A pipeline manifest's wiring, checked against the stages' manifests.

    ``sources[k][inI]`` is what stage ``k``'s input ``inI`` is bound to:
    ``("input", NAME)`` or ``("stage", j, "outM")``. ``names[k]`` maps the
    stage's model.mil names that the package names otherwise: its inputs (the
    package name of their source) and its outputs that are func outputs (the
    func output's name). ``outputs`` lists, in the manifest's order, each func
    output with the stage output holding it.
    """

    sources: list[dict[str, tuple]]
    names: list[dict[str, str]]
    outputs: list[tuple[str, int, str]]

    def rename(self, k: int) -> Callable[[str], str]:
        fixed = self.names[k]
        return lambda name: fixed.get(name) or stage_name(k, name)


def _wiring(pipe: Any) -> _Wiring:
    """Read and check the wiring of ``pipe`` (:class:`CoreMLExportError` on any inconsistency)."""
    man = pipe.manifest
    try:
        return _read_wiring(man, pipe.stages)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise CoreMLExportError(f"pipeline '{pipe.func}': malformed manifest wiring ({type(e).__name__}: {e})",
                                hint="the artifact was modified after compiling; recompile it") from None


def _read_wiring(man: dict, stages: list[Any]) -> _Wiring:
    def bad(msg: str) -> CoreMLExportError:
        return CoreMLExportError(f"pipeline '{man['func']}': {msg}",
                                 hint="the artifact was modified after compiling; recompile it")

    def sig(e: dict) -> tuple[str, list[int]]:
        return str(e["dtype"]), [int(d) for d in e["shape"]]

    func_in = {str(e["name"]): sig(e) for e in man["inputs"]}
    func_out = [str(e["name"]) for e in man["outputs"]]
    for name in [*func_in, *func_out]:
        if _STAGE_NAME.match(name):
            raise CoreMLExportError(
                f"func '{man['func']}': I/O name '{name}' has the form the package gives stage values (sNN_...)",
                hint="rename it in the source and recompile")
    if len(stages) != len(man["stages"]):
        raise bad(f"{len(man['stages'])} stages in the manifest, {len(stages)} loaded")
    stage_out: list[dict[str, tuple[str, list[int]]]] = []
    holder: dict[tuple[int, str], str] = {}  # (stage, outM) -> func output it is
    out_of: dict[str, dict] = man["outputs_from"]
    if sorted(out_of) != sorted(func_out):
        raise bad(f"outputs_from names {sorted(out_of)}, the func's outputs are {sorted(func_out)}")
    for name in func_out:
        src = out_of[name]
        key = (int(src["stage"]), str(src["output"]))
        if key in holder:
            raise bad(f"func outputs '{holder[key]}' and '{name}' both come from stage {key[0]} {key[1]}")
        holder[key] = name
    sources: list[dict[str, tuple]] = []
    names: list[dict[str, str]] = []
    for k, (entry, art) in enumerate(zip(man["stages"], stages)):
        where = f"stage {k} ({entry['dir']})"
        if not all(isinstance(x.get("value"), str) for x in [*entry["inputs"], *entry["outputs"]]):
            raise KeyError(f"{where}: a stage input or output without its func 'value'")
        if art.manifest.get("weight_inputs"):
            raise CoreMLExportError(
                f"func '{man['func']}' {where}: the stage takes its weights as program inputs (a program "
                "shared across repeated layers); a Core ML package holds them as constants",
                hint="recompile with --share-programs never for the export")
        ins = [str(i["name"]) for i in entry["inputs"]]
        if ins != [str(e["name"]) for e in art.manifest["inputs"]]:
            raise bad(f"{where}: the manifest wires inputs {ins}; the stage has "
                      f"{[e['name'] for e in art.manifest['inputs']]}")
        outs = [str(o["name"]) for o in entry["outputs"]]
        if outs != [str(e["name"]) for e in art.manifest["outputs"]]:
            raise bad(f"{where}: the manifest lists outputs {outs}; the stage has "
                      f"{[e['name'] for e in art.manifest['outputs']]}")
        src_of: dict[str, tuple] = {}
        fixed: dict[str, str] = {}
        for i, e in zip(entry["inputs"], art.manifest["inputs"]):
            f = i["from"]
            if "input" in f:
                src: tuple = ("input", str(f["input"]))
                if src[1] not in func_in:
                    raise bad(f"{where} input {i['name']}: no func input '{src[1]}'")
                have, fixed[i["name"]] = func_in[src[1]], src[1]
                what = f"func input '{src[1]}'"
            else:
                src = ("stage", int(f["stage"]), str(f["output"]))
                j, out = src[1], src[2]
                if not 0 <= j < k or out not in stage_out[j]:
                    raise bad(f"{where} input {i['name']}: stage {j} has no output '{out}' before stage {k}")
                have, fixed[i["name"]] = stage_out[j][out], holder.get((j, out)) or stage_name(j, out)
                what = f"stage {j} {out}"
            if have != sig(e):
                raise bad(f"{where} input {i['name']} is {sig(e)[0]}{sig(e)[1]} but is wired to {what}, "
                          f"{have[0]}{have[1]}")
            src_of[i["name"]] = src
        stage_out.append({str(e["name"]): sig(e) for e in art.manifest["outputs"]})
        for o in outs:
            if (k, o) in holder:
                fixed[o] = holder[(k, o)]
        sources.append(src_of)
        names.append(fixed)
    outputs = []
    for e in man["outputs"]:
        name = str(e["name"])
        k, out = int(out_of[name]["stage"]), str(out_of[name]["output"])
        if not 0 <= k < len(stages) or out not in stage_out[k]:
            raise bad(f"outputs_from.{name}: stage {k} has no output '{out}'")
        if stage_out[k][out] != sig(e):
            raise bad(f"func output '{name}' is {sig(e)[0]}{sig(e)[1]} but stage {k} {out} is "
                      f"{stage_out[k][out][0]}{stage_out[k][out][1]}")
        outputs.append((name, k, out))
    return _Wiring(sources, names, outputs)


class _Terms:
    """Value numbering across graphs: two values get the same number only when they
    compute the same thing. Consts are numbered by type and content (a weight by its
    bytes, wherever it is stored); a reshape of a reshape is one reshape, and a
    reshape to the value's own type is the value (stage I/O travels in its rank-4
    device shape, with a reshape on each side of the cut)."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.types: list[Any] = []
        self.base: dict[int, int] = {}

    def intern(self, key: tuple, type_: Any) -> int:
        key = (key, str(type_))
        if key not in self.ids:
            self.ids[key] = len(self.types)
            self.types.append(type_)
        return self.ids[key]

    def input(self, name: str, type_: Any) -> int:
        return self.intern(("input", name), type_)

    def reshape(self, x: int, type_: Any) -> int:
        src = self.base.get(x, x)
        if self.types[src] == type_:
            return src
        r = self.intern(("reshape", src), type_)
        self.base[r] = src
        return r

    def graph(self, g: Any, weights: dict[str, np.ndarray], bound: dict[str, int], where: str) -> dict[str, int]:
        """Number every value of ``g`` (inputs from ``bound``); value name -> number."""
        import hashlib

        env = dict(bound)
        for n in g.nodes:
            r = n.results[0]
            if n.op == "const":
                t = r.type
                if "weight" in n.attrs:
                    arr = weights.get(n.attrs["weight"])
                    if arr is None:
                        raise CoreMLExportError(f"{where}: program.ir reads weight '{n.attrs['weight']}', "
                                                "which no manifest lists",
                                                hint="the artifact was modified after compiling; recompile it")
                    data = np.ascontiguousarray(np.asarray(arr, t.dtype.np)).tobytes()
                else:
                    data = np.ascontiguousarray(const_literal(n.attrs["value"], t).astype(t.dtype.np)).tobytes()
                env[r.name] = self.intern(("const", hashlib.sha256(data).hexdigest()), t)
            elif n.op == "reshape" and not n.optional:
                env[r.name] = self.reshape(env[n.operands[0].name], r.type)
            else:
                args = tuple(env[v.name] for v in n.operands)
                opt = tuple(sorted((key, env[v.name]) for key, v in n.optional.items()))
                attrs = repr(sorted(n.attrs.items()))
                for i, res in enumerate(n.results):
                    env[res.name] = self.intern((n.op, attrs, args, opt, i), res.type)
        return env


def _check_composition(pipe: Any, wiring: _Wiring) -> str:
    """The stages composed by the wiring compute what the whole func's ``program.ir`` computes.

    Every stage input must carry the func value the manifest says it carries,
    every stage output compute the value it names, and every func output be the
    func's, all as :class:`_Terms` numbers: an exact, input-independent proof
    that the wiring is the func's dataflow.
    """
    from anec.mil.artifact import artifact_weights
    from anec.mil.multi_program import stage_dir

    def bad(msg: str) -> CoreMLExportError:
        return CoreMLExportError(f"pipeline '{pipe.func}': {msg}",
                                 hint="the artifact was modified after compiling; recompile it")

    man = pipe.manifest
    whole = pipe.program_module().funcs.get(pipe.func)
    if whole is None:
        raise bad(f"program.ir has no func '{pipe.func}'")
    ios = [(v.name, str(v.type.dtype), list(v.type.shape)) for v in whole.inputs]
    if ios != [(e["name"], e["dtype"], list(e["shape"])) for e in man["inputs"]]:
        raise bad(f"the manifest's inputs differ from program.ir's {ios}")
    terms = _Terms()
    values = {v.name: v for v in whole.inputs}
    values.update({r.name: r for n in whole.nodes for r in n.results})
    func = terms.graph(whole, pipe.interp_weights(), {v.name: terms.input(v.name, v.type) for v in whole.inputs},
                       f"{pipe.func}/program.ir")

    def same(t: int, value: str) -> bool:
        v = values.get(value)
        return v is not None and terms.reshape(t, v.type) == func[value]

    produced: dict[tuple[int, str], int] = {}
    n_edges = 0
    for k, (entry, art) in enumerate(zip(man["stages"], pipe.stages)):
        where = f"stage {k} ({stage_dir(k)})"
        sg = art.program_module().funcs.get(art.func)
        if sg is None:
            raise bad(f"{where}: program.ir has no func '{art.func}'")
        io = ([v.name for v in sg.inputs], [v.name for v in sg.outputs])
        if io != (list(wiring.sources[k]), [str(o["name"]) for o in entry["outputs"]]):
            raise bad(f"{where}: program.ir's inputs and outputs {io} differ from the manifest's")
        bound = {}
        for i, v in zip(entry["inputs"], sg.inputs):
            src = wiring.sources[k][v.name]
            t = terms.input(src[1], values[src[1]].type) if src[0] == "input" else produced[src[1:]]
            what = f"func input '{src[1]}'" if src[0] == "input" else f"stage {src[1]} {src[2]}"
            if not same(t, str(i["value"])):
                raise bad(f"{where} input {v.name} is wired to {what}, which is not %{i['value']} of the func")
            bound[v.name] = terms.reshape(t, v.type)
            n_edges += src[0] == "stage"
        env = terms.graph(sg, artifact_weights(art), bound, f"{where}/program.ir")
        for o, v in zip(entry["outputs"], sg.outputs):
            if not same(env[v.name], str(o["value"])):
                raise bad(f"{where} output {v.name} does not compute %{o['value']} of the func (program.ir)")
            produced[(k, v.name)] = env[v.name]
    for name, k, out in wiring.outputs:
        if not same(produced[(k, out)], name):
            raise bad(f"func output '{name}' is wired to stage {k} {out}, which does not compute it")
    return (f"the {len(pipe.stages)} stages wired as the manifest says compute the func of program.ir "
            f"({n_edges} stage-to-stage edge{'s' if n_edges != 1 else ''}; every stage input and output and "
            "every func output proved equal to the func's value structurally)")


def _program_wiring(art: Any) -> _Wiring:
    """A single program as a one-stage pipeline: its inputs are the func's, its outputs too
    (its names are model.mil's, unprefixed)."""
    man = art.manifest
    return _Wiring([{e["name"]: ("input", e["name"]) for e in man["inputs"]}], [{}],
                   [(e["name"], 0, e["name"]) for e in man["outputs"]])


def _build_program(art: Any) -> Any:
    wiring = _program_wiring(art)
    plan = _io_plan(art.manifest, [art])
    return _assemble(plan, wiring, [_Builder(art, plan.through(lambda name: name))])


def _build_pipeline(pipe: Any, wiring: _Wiring) -> Any:
    """Every stage's ops in order in one ``main`` function, stage inputs bound to their sources."""
    plan = _io_plan(pipe.manifest, pipe.stages)
    builders = [_Builder(art, plan.through(wiring.rename(k))) for k, art in enumerate(pipe.stages)]
    dialects = sorted({b.dialect for b in builders})
    if len(dialects) != 1:
        raise CoreMLExportError(f"pipeline '{pipe.func}': stages in several MIL dialects {dialects}",
                                hint="the artifact was modified after compiling; recompile it")
    return _assemble(plan, wiring, builders)


@dataclass
class _IOPlan:
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


def _io_plan(man: dict, arts: list[Any]) -> _IOPlan:
    from anec.mil.emitter import claim_name

    try:
        return _read_io_plan(man, arts, claim_name)
    except (KeyError, TypeError, ValueError) as e:
        raise CoreMLExportError(f"'{man.get('func')}': malformed logical I/O in the manifest "
                                f"({type(e).__name__}: {e})",
                                hint="the artifact was modified after compiling; recompile it") from None


def _read_io_plan(man: dict, arts: list[Any], claim_name: Callable) -> _IOPlan:
    taken = {e["name"] for e in [*man["inputs"], *man["outputs"]]}
    taken |= {e["name"] for e in man.get("logical_outputs") or []}
    for a in arts:  # model.mil's own names (a pipeline's stage names are sNN_ prefixed: taken too)
        taken |= {name for st in mil_statements(a.mil_text)[1] for _, name in st.results}
    if len(arts) > 1:
        taken |= {stage_name(k, name) for k, a in enumerate(arts)
                  for st in mil_statements(a.mil_text)[1] for _, name in st.results}
    device = {e["name"]: e for e in [*man["inputs"], *man["outputs"]]}
    logical_in = {e["name"]: [int(d) for d in e["shape"]] for e in man.get("logical_inputs") or []}
    inner: dict[str, str] = {}
    before: list[MilStatement] = []
    after: list[MilStatement] = []

    def shape_const(at: str, shape: list[int], into: list) -> str:
        name = claim_name(f"{at}_shape", taken)
        into.append(MilStatement([("tensor<int32>", name)], "const", {}, np.array(shape, np.int32)))
        return name

    inputs = []
    for e in man["inputs"]:
        name, dev = e["name"], [int(d) for d in e["shape"]]
        shape = logical_in.get(name, dev)
        if int(np.prod(shape)) != int(np.prod(dev)):
            raise ValueError(f"input '{name}': logical shape {shape} is not {dev}'s elements")
        inputs.append((name, e["dtype"], shape))
        if shape != dev:
            inner[name] = claim_name(f"{name}_device", taken)
            sc = shape_const(inner[name], dev, before)
            before.append(MilStatement([("tensor", inner[name])], "reshape", {"x": name, "shape": sc}))
    outputs = []
    los = man.get("logical_outputs") or [{"name": e["name"], "pieces": [e["name"]], "axis": None,
                                          "shape": e["shape"]} for e in man["outputs"]]
    for lo in los:
        name, pieces, axis = lo["name"], [str(p) for p in lo["pieces"]], lo.get("axis")
        specs = [device[p] for p in pieces]
        dtype = specs[0]["dtype"]
        dev = [int(d) for d in specs[0]["shape"]]
        if axis is not None and len(pieces) > 1:
            dev[axis] = sum(int(sp["shape"][axis]) for sp in specs)
        shape = [int(d) for d in lo["shape"]] if lo.get("shape") is not None else dev
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
    return _IOPlan(inputs, outputs, inner, before, after)


def _assemble(plan: _IOPlan, wiring: _Wiring, builders: list[Any]) -> Any:
    """The coremltools program: one ``main`` taking and returning the logical shapes
    (:class:`_IOPlan`), running each stage's builder on its bound inputs."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program
    from coremltools.converters.mil.mil.types.type_mapping import string_to_builtin

    specs = {name: mb.TensorSpec(tuple(shape), string_to_builtin(dtype)) for name, dtype, shape in plan.inputs}
    with Function(specs, opset_version=_opset(builders[0].dialect)) as func:
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
    """Add the I/O adapter ops of an :class:`_IOPlan` (consts, reshape, concat)."""
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


# ---------------------------------------------------------------------------
# export


def export_coreml(directory: str | os.PathLike, output: str | os.PathLike, *,
                  func: str | None = None) -> ExportReport:
    """Write the artifact in ``directory`` as the Core ML package ``output`` (verified).

    A pipeline artifact becomes one package whose ``main`` function runs every
    stage in order (see the module docstring)."""
    from anec.diagnostics import AnecError
    from anec.mil.multi_program import PipelineArtifact

    ct = require("coremltools", "coreml", "anec export-coreml")
    art = find_artifact(directory, func)
    out = Path(output)
    if out.suffix != ".mlpackage":
        raise CoreMLExportError(f"output '{out}' must end in .mlpackage")
    if out.exists() and not (out.is_dir() and (out / "Manifest.json").is_file()):
        raise CoreMLExportError(f"refusing to replace '{out}': it is not a Core ML package",
                                hint="choose a new path ending in .mlpackage")
    if isinstance(art, PipelineArtifact):
        wiring = _wiring(art)
        proved = _check_composition(art, wiring)
        build = lambda: _build_pipeline(art, wiring)  # noqa: E731
        verify = lambda path: _verify_pipeline(path, art, wiring, proved)  # noqa: E731
    else:
        build = lambda: _build_program(art)  # noqa: E731
        verify = lambda path: _verify_program(path, art)  # noqa: E731
    try:
        prog = build()
    except AnecError:
        raise
    except Exception as e:
        raise CoreMLExportError(f"coremltools could not build the program: {type(e).__name__}: {e}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        model = _quiet(lambda: ct.convert(
            prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
            pass_pipeline=ct.PassPipeline.EMPTY, compute_precision=ct.precision.FLOAT32,
            skip_model_load=True))
        staged = tmp / out.name
        model.save(str(staged))
        report = verify(staged)
        discard(move_into_place(staged, out))
    except CoreMLExportError:
        raise
    except Exception as e:
        raise CoreMLExportError(f"coremltools could not build the package: {type(e).__name__}: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.path = out
    return report


def _quiet(fn: Any) -> Any:
    """Run ``fn`` without coremltools' progress bars on stderr."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        return fn()


# ---------------------------------------------------------------------------
# verification


@dataclass
class MilStatement:
    """One statement of anec's MIL text: results, op, arguments, const value."""

    results: list[tuple[str, str]]  # (type text, name)
    op: str
    args: dict[str, str]
    value: Any = None  # const: numpy value / str / ("BLOBFILE", path, offset)


_STMT = re.compile(r"^\s+(?P<res>.+?) = (?P<op>\w+)\((?P<args>[^)]*)\)\[(?P<attrs>.*)\];$")
_RES = re.compile(r"(tensor<[^>]*>|\w+) (\w+)")
_NUM = r"[+-]?(?:0x[0-9a-fA-F.]+p[+-]?\d+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|inf|nan)"


def mil_statements(text: str) -> tuple[list[tuple[str, str]], list[MilStatement], list[str]]:
    """``(inputs, statements, outputs)`` of anec's MIL text (ios18 and ios16 dialects)."""
    lines = text.splitlines()
    head = next((ln for ln in lines if ln.strip().startswith("func main")), None)
    if head is None:
        raise CoreMLExportError("model.mil has no func main")
    params = head[head.index("(") + 1: head.rindex(")")]
    inputs = _RES.findall(params)
    stmts = []
    outputs: list[str] = []
    for ln in lines:
        s = ln.strip()
        if s.startswith("} -> ("):
            outputs = [o.strip() for o in s[len("} -> ("):s.rindex(")")].split(",") if o.strip()]
            continue
        m = _STMT.match(ln)
        if not m:
            continue
        results = _RES.findall(m.group("res"))
        args = {}
        for part in filter(None, (p.strip() for p in m.group("args").split(","))):
            k, v = (t.strip() for t in part.split("=", 1))
            args[k] = v
        value = None
        attrs = m.group("attrs")
        if m.group("op") == "const":
            vtext = attrs[attrs.index("val = ") + len("val = "):]
            value = _literal(vtext)
        stmts.append(MilStatement(results, m.group("op"), args, value))
    return inputs, stmts, outputs


def _literal(text: str) -> Any:
    text = text.strip()
    m = re.match(r'(?:tensor<[^>]*>|\w+)\(BLOBFILE\(path = (?:tensor<string, \[\]>|string)\("([^"]*)"\), '
                 r'offset = (?:tensor<uint64, \[\]>|uint64)\((\d+)\)\)\)$', text)
    if m:
        return ("BLOBFILE", m.group(1), int(m.group(2)))
    m = re.match(r'(?:tensor<string, \[\]>|string)\("((?:[^"\\]|\\.)*)"\)$', text)
    if m:
        return m.group(1).replace('\\"', '"').replace("\\\\", "\\")
    m = re.match(r"tensor<(\w+), \[([0-9, ]*)\]>\((.*)\)$", text)
    if m:
        dtype, dims, body = m.group(1), m.group(2), m.group(3)
        shape = [int(d) for d in dims.replace(" ", "").split(",") if d]
        return _values(dtype, body, shape)
    m = re.match(r"(\w+)\((.*)\)$", text)
    if m:
        return _values(m.group(1), m.group(2), [])
    raise CoreMLExportError(f"model.mil: unreadable constant '{text[:60]}'")


def _values(dtype: str, body: str, shape: list[int]) -> Any:
    if dtype == "bool":
        vals = [t == "true" for t in re.findall(r"true|false", body)]
    elif dtype in ("fp16", "fp32"):
        vals = [float.fromhex(t) if "0x" in t else float(t) for t in re.findall(_NUM, body)]
    else:
        vals = [int(t) for t in re.findall(r"[+-]?\d+", body)]
    np_dt = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_,
             "int8": np.int8, "uint8": np.uint8, "uint64": np.uint64}.get(dtype, np.float64)
    arr = np.asarray(vals, dtype=np_dt)
    return arr.reshape(shape) if shape else arr.reshape(())


def read_package(path: str | os.PathLike) -> tuple[Any, Any]:
    """``(spec, pymil program)`` of a saved ``.mlpackage``, read by coremltools (weights included)."""
    ct = require("coremltools", "coreml", "reading a Core ML package")
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    p = Path(path)
    spec = ct.utils.load_spec(str(p))
    weights_dir = p / "Data" / "com.apple.CoreML" / "weights"
    prog = milproto_load(spec, spec.specificationVersion, str(weights_dir))
    return spec, prog


def verify_package(path: str | os.PathLike, art: Any) -> ExportReport:
    """Check the package at ``path`` against the artifact, one program or a pipeline
    (see the module docstring)."""
    from anec.mil.multi_program import PipelineArtifact

    if isinstance(art, PipelineArtifact):
        wiring = _wiring(art)
        return _verify_pipeline(path, art, wiring, _check_composition(art, wiring))
    return _verify_program(path, art)


def _verify_program(path: str | os.PathLike, art: Any) -> ExportReport:
    inputs, _, outputs = mil_statements(art.mil_text)
    man = art.manifest
    if [name for _, name in inputs] != [e["name"] for e in man["inputs"]] or outputs != [e["name"] for e in man["outputs"]]:
        raise CoreMLExportError("model.mil's I/O differ from the manifest")  # pragma: no cover
    plan = _io_plan(man, [art])
    rename = plan.through(lambda name: name)
    return _verify(path, plan, [(art, rename, "")], "model.mil")


def _verify_pipeline(path: str | os.PathLike, pipe: Any, wiring: _Wiring, proved: str) -> ExportReport:
    from anec.mil.multi_program import stage_dir

    plan = _io_plan(pipe.manifest, pipe.stages)
    parts = [(art, plan.through(wiring.rename(k)), f"stage {k} ({stage_dir(k)}/model.mil): ")
             for k, art in enumerate(pipe.stages)]
    return _verify(path, plan, parts, f"the {len(parts)} stages' model.mil", proved)


@dataclass(frozen=True)
class Fusion:
    """A rewrite coremltools' ML Program backend applies even under ``PassPipeline.EMPTY``
    (its ``_BACKEND_MIL_PASSES`` run on every conversion): a statement ``first`` whose
    only user is ``second`` (and which no output returns) becomes ``fused(x=first.x)``,
    named as ``second``'s result, where ``first`` was. ``second_args`` are the user's
    operands: ``"first"`` (the first's result), ``"first.x"`` (the first's ``x``) or a
    number (a const of that value); ``first_consts`` constrain the first's const operands."""

    pass_name: str
    meaning: str
    first: str
    second: str
    second_args: frozenset
    fused: str
    first_consts: tuple[tuple[str, float], ...] = ()


FUSIONS: tuple[Fusion, ...] = (
    Fusion("mil_backend::fuse_activation_silu", "mul(x, sigmoid(x)) -> silu(x)",
           "sigmoid", "mul", frozenset({"first.x", "first"}), "silu"),
    Fusion("mil_backend::fuse_pow2_sqrt", "sqrt(pow(x, 2)) -> identity(x)",
           "pow", "sqrt", frozenset({"first"}), "identity", (("y", 2.0),)),
    Fusion("mil_backend::fuse_pow2_sqrt", "pow(sqrt(x), 2) -> identity(x)",
           "sqrt", "pow", frozenset({"first", 2.0}), "identity"),
)
"""The rewrites of model.mil a package may hold (what coremltools' backend does), as data."""

BACKEND_PASSES: dict[str, str] = {
    "mil_backend::adjust_io_to_supported_types": "none: the I/O dtypes (fp32, fp16, int32) are supported",
    "mil_backend::insert_image_preprocessing_ops": "none: the package has no image inputs",
    "mil_backend::fuse_activation_silu": "FUSIONS",
    "mil_backend::fuse_pow2_sqrt": "FUSIONS",
    "mil_backend::sanitize_name_strings": "none: MIL names are identifiers already",
    "nn_backend::handle_unused_inputs": "none: every program input is used",
}
"""What each pass of coremltools' ML Program backend that runs under ``PassPipeline.EMPTY``
does to an exported program (coremltools drops from the backend the passes of its default
pipeline that the chosen pipeline leaves out: const elimination and deduplication, dead code
elimination...). A pass not listed here is a rewrite verification does not expect."""


@dataclass
class _Expected:
    """One operation the package should hold: a model.mil statement in package names
    (its constant resolved to an array), with where it comes from."""

    stmt: MilStatement
    where: str
    blob: bool = False


def _expected(plan: _IOPlan, parts: list[tuple[Any, Callable[[str], str], str]],
              outputs: list[str]) -> tuple[list[_Expected], dict[str, int]]:
    """The operations the package should hold: the I/O adapters and every part's model.mil
    statements renamed, then coremltools' backend fusions (:data:`FUSIONS`; no dead code
    removal follows them). Returns them and the count of each fusion applied."""
    from anec.mil.blobfile import BlobReader

    out = [_Expected(st, "") for st in plan.before]
    for art, rename, where in parts:
        readers: dict[str, BlobReader] = {}
        for st in mil_statements(art.mil_text)[1]:
            res = [(t, rename(n)) for t, n in st.results]
            args = {k: rename(v) for k, v in st.args.items()}
            value, blob = st.value, False
            if isinstance(value, tuple) and value[0] == "BLOBFILE":
                _, bpath, offset = value
                rel = bpath.removeprefix("@model_path/")
                w = next((w for w in art.manifest["weights"] if w["file"] == rel and w["offset"] == offset), None)
                if w is None or rel not in art.blobs:
                    raise CoreMLExportError(f"{where}const '{res[0][1]}' reads {rel}@{offset}, which the manifest "
                                            "does not list")
                if rel not in readers:
                    readers[rel] = BlobReader(art.blobs[rel], name=rel)
                value, blob = readers[rel].read(offset, DType(w["dtype"]).np).reshape(w["shape"]), True
            out.append(_Expected(MilStatement(res, st.op, args, value), where, blob))
    out += [_Expected(st, "") for st in plan.after]
    applied: dict[str, int] = {}
    _fuse(out, set(outputs), applied)
    return out, applied


def _uses(exp: list[_Expected]) -> dict[str, list[int]]:
    uses: dict[str, list[int]] = {}
    for i, e in enumerate(exp):
        for v in e.stmt.args.values():
            for name in v.strip("()").split(",") if v.startswith("(") else [v]:
                uses.setdefault(name.strip(), []).append(i)
    return uses


def _fuse(exp: list[_Expected], outputs: set[str], applied: dict[str, int]) -> None:
    consts = {e.stmt.results[0][1]: e.stmt.value for e in exp if e.stmt.op == "const"}

    def const_is(name: str, want: float) -> bool:
        v = consts.get(name)
        return v is not None and not isinstance(v, str) and bool(np.all(np.asarray(v, np.float64) == want))

    changed = True
    while changed:
        changed = False
        uses = _uses(exp)
        for i, e in enumerate(exp):
            for f in FUSIONS:
                st = e.stmt
                if st.op != f.first or not all(const_is(st.args.get(k, ""), v) for k, v in f.first_consts):
                    continue
                r = st.results[0][1]
                users = sorted(set(uses.get(r, [])))
                if r in outputs or len(users) != 1 or exp[users[0]].stmt.op != f.second:
                    continue
                second = exp[users[0]].stmt
                got = list(second.args.values())
                want = [st.args.get("x") if a == "first.x" else r if a == "first" else a for a in f.second_args]
                if not (len(got) == len(want) and all(
                        any(g == w if isinstance(w, str) else const_is(g, w) for g in got) for w in want)
                        and all(any(g == w if isinstance(w, str) else const_is(g, w) for w in want) for g in got)):
                    continue
                exp[i] = _Expected(MilStatement(second.results, f.fused, {"x": st.args["x"]}), e.where)
                del exp[users[0]]
                applied[f.meaning] = applied.get(f.meaning, 0) + 1
                changed = True
                break
            if changed:
                break


def _fusions_hint() -> str:
    import coremltools as ct

    known = "; ".join(sorted({f.meaning for f in FUSIONS}))
    return (f"either the package is not this artifact's, or coremltools {ct.__version__} rewrote the program "
            f"in a way anec does not expect (expected: {known}); a new coremltools rewrite that keeps the "
            "meaning belongs in anec.frontends.coreml.FUSIONS")


def _verify(path: str | os.PathLike, plan: _IOPlan, parts: list, what: str, proved: str | None = None) -> ExportReport:
    """The package at ``path`` holds the expected operations (:func:`_expected`) one to one,
    and the logical I/O of ``plan``."""
    from collections import Counter

    spec, prog = read_package(path)
    func = prog.functions["main"]
    ops = list(func.operations)
    exp, applied = _expected(plan, parts, [name for name, _, _ in plan.outputs])
    kinds, want_kinds = Counter(o.op_type for o in ops), Counter(e.stmt.op for e in exp)
    if kinds != want_kinds:
        diff = [f"{abs(kinds[k] - want_kinds[k])} {'more' if kinds[k] > want_kinds[k] else 'fewer'} '{k}'"
                for k in sorted(set(kinds) | set(want_kinds)) if kinds[k] != want_kinds[k]]
        raise CoreMLExportError(f"the package's operations differ from {what}'s: it has {', '.join(diff)}",
                                hint=_fusions_hint())
    n_const, n_weights = _compare_ops(ops, exp)
    names = [*func.inputs, *(o.name for op in ops for o in op.outputs)]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise CoreMLExportError(f"the package names several values {dup}")
    rewrites = ", ".join(f"{k} x{v}" for k, v in sorted(applied.items())) or "none"
    adapters = sum(st.op != "const" for st in [*plan.before, *plan.after])
    checks = [f"{len(ops)} operations equal {what} statement by statement, by meaning (coremltools' rewrites: "
              f"{rewrites}; {adapters} I/O adapter ops (logical shapes); {n_const} consts, {n_weights} of them "
              "BLOBFILE weights equal weights/*.bin)"]
    if proved:
        checks.append(proved)
    checks.append(_check_io(spec, plan))
    return ExportReport(Path(path), len(ops) - n_const, n_const, n_weights, checks, stages=len(parts))


def _compare_ops(ops: list[Any], exp: list[_Expected]) -> tuple[int, int]:
    """Each package op equals its expected statement: op type, result and argument names,
    constant values. Returns ``(consts, BLOBFILE weights)``."""
    n_const = n_weights = 0
    for op, e in zip(ops, exp):
        st, where = e.stmt, e.where
        names = [o.name for o in op.outputs]
        want = [name for _, name in st.results]
        if op.op_type != st.op or names != want:
            raise CoreMLExportError(f"{where}operation {names} is {op.op_type}; the program has {want} = {st.op}",
                                    hint=_fusions_hint())
        if st.op == "const":
            n_const += 1
            n_weights += e.blob
            if not _same_value(op.val.val, st.value):
                raise CoreMLExportError(f"{where}const '{names[0]}' differs from model.mil")
            continue
        got_args = {k: ("(" + ", ".join(x.name for x in v) + ")" if isinstance(v, (tuple, list)) else v.name)
                    for k, v in op.inputs.items() if hasattr(v, "name") or isinstance(v, (tuple, list))}
        if got_args != st.args:
            raise CoreMLExportError(f"{where}operation '{names[0]}' ({st.op}) takes {got_args}; "
                                    f"model.mil says {st.args}")
    return n_const, n_weights


def _check_io(spec: Any, plan: _IOPlan) -> str:
    """The package's inputs and outputs (names, logical shapes, dtypes) are the plan's."""
    for what, desc, want in (("inputs", spec.description.input, plan.inputs),
                             ("outputs", spec.description.output, plan.outputs)):
        got = [(f.name, _array_dtype(f), [int(d) for d in f.type.multiArrayType.shape]) for f in desc]
        if got != [(n, d, list(s)) for n, d, s in want]:
            raise CoreMLExportError(f"package {what} {got} differ from the model's {want} (name, dtype, "
                                    "logical shape)")
    return (f"inputs {[n for n, _, _ in plan.inputs]} and outputs {[n for n, _, _ in plan.outputs]} have the "
            "model's names, dtypes and logical shapes ("
            + ", ".join(f"{n} {s}" for n, _, s in [*plan.inputs, *plan.outputs]) + ")")


def _array_dtype(feature: Any) -> str:
    code = feature.type.multiArrayType.dataType
    # ArrayFeatureType.ArrayDataType: FLOAT32 = 65568, FLOAT16 = 65552, INT32 = 131104, DOUBLE = 65600
    return {65568: "fp32", 65552: "fp16", 131104: "int32", 65600: "fp64"}.get(code, str(code))


def _same_value(got: Any, want: Any) -> bool:
    if isinstance(want, str) or isinstance(got, str):
        return str(got) == str(want)
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return False
    if g.dtype.kind == "f" or w.dtype.kind == "f":
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        return bool(np.array_equal(g64, w64, equal_nan=True))
    return bool(np.array_equal(g, w))
