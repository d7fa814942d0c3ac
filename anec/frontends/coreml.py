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

Verification (:func:`verify_package`, run by every export) reads the package
back with coremltools (spec + weights) and checks, on Linux:

* the function's operations equal ``model.mil``'s statements one to one: op
  type, result names, argument names, and every constant's value (BLOBFILE
  constants compared with the artifact's ``weights/*.bin`` payloads);
* the inputs and outputs (names, shapes, dtypes) equal the manifest's.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anec.frontends import CoreMLExportError, require
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


# ---------------------------------------------------------------------------
# locating the artifact


def find_artifact(directory: str | os.PathLike, func: str | None = None) -> Any:
    """The :class:`~anec.mil.artifact.Artifact` in ``directory`` (a func directory,
    or a compile output directory holding one func, or ``func``)."""
    from anec.mil.artifact import MANIFEST_FILE, Artifact

    d = Path(directory)
    if not d.is_dir():
        raise CoreMLExportError(f"'{d}' is not a directory",
                                hint="give a compiled artifact: anec compile model.ir -o build/")
    if (d / MANIFEST_FILE).is_file():
        if func is not None and d.name != func:
            art = Artifact.load(d)
            if art.func != func:
                raise CoreMLExportError(f"'{d}' holds func '{art.func}', not '{func}'")
            return art
        return Artifact.load(d)
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
    return Artifact.load(d / func)


# ---------------------------------------------------------------------------
# building the program


class _Builder:
    """Rebuilds one compiled func with coremltools' ``mb`` ops, named as model.mil names them."""

    def __init__(self, art: Any) -> None:
        from anec.mil.artifact import artifact_weights
        from anec.mil.emitter import emit_mil
        from anec.targets import get_target

        self.art = art
        module = art.program_module()
        self.graph = module.func(art.func)
        self.weights = artifact_weights(art)
        target = get_target(art.manifest.get("target", "m4"))
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

    def claim(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name = f"{base}_{i}"
            i += 1
        self.taken.add(name)
        return name

    def param(self, node_name: str, param: str, value: Any) -> Any:
        from coremltools.converters.mil import Builder as mb

        return mb.const(val=value, name=self.claim(f"{node_name}_{param}"))

    def build(self) -> Any:
        import coremltools as ct
        from coremltools.converters.mil import Builder as mb
        from coremltools.converters.mil.mil import Function, Program
        from coremltools.converters.mil.mil.types.type_mapping import string_to_builtin

        g = self.graph
        opset = {"ios18": ct.target.iOS18, "ios16": ct.target.iOS16}.get(self.dialect)
        if opset is None:
            raise CoreMLExportError(f"MIL dialect '{self.dialect}' has no Core ML opset mapping")
        specs = {v.name: mb.TensorSpec(v.type.shape, string_to_builtin(str(v.type.dtype)))
                 for v in g.inputs}
        with Function(specs, opset_version=opset) as func:
            for v in g.inputs:
                self.env[id(v)] = func.inputs[v.name]
            for n in g.nodes:
                self.node(n, mb)
            func.set_outputs([self.env[id(v)] for v in g.outputs])
        prog = Program()
        prog.add_function("main", func)
        return prog

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
            out = mb.const(val=val, name=nn)
        elif op in ("identity", "exp", "sqrt", "relu", "tanh", "sigmoid"):
            out = getattr(mb, op)(x=x[0], name=nn)
        elif op in ("add", "sub", "mul", "pow", "real_div"):
            out = getattr(mb, op)(x=x[0], y=x[1], name=nn)
        elif op == "cast":
            out = mb.cast(x=x[0], dtype=self.param(nn, "dtype", str(DType(a["dtype"]))), name=nn)
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
            out = mb.conv(x=x[0], weight=x[1], name=nn, **kw)
        elif op == "matmul":
            tx = self.param(nn, "transpose_x", bool(a["transpose_x"]))
            ty = self.param(nn, "transpose_y", bool(a["transpose_y"]))
            out = mb.matmul(x=x[0], y=x[1], transpose_x=tx, transpose_y=ty, name=nn)
        elif op == "softmax":
            axis = self.param(nn, "axis", np.int32(a["axis"] % n.operands[0].type.rank))
            out = mb.softmax(x=x[0], axis=axis, name=nn)
        elif op in ("reduce_sum", "reduce_mean", "reduce_max"):
            rank = n.operands[0].type.rank
            axes = self.param(nn, "axes", np.array([ax % rank for ax in a["axes"]], np.int32))
            keep = self.param(nn, "keep_dims", bool(a["keep_dims"]))
            out = getattr(mb, op)(x=x[0], axes=axes, keep_dims=keep, name=nn)
        elif op == "reshape":
            shape = self.param(nn, "shape", np.array(r.type.shape, np.int32))
            out = mb.reshape(x=x[0], shape=shape, name=nn)
        elif op == "transpose":
            out = mb.transpose(x=x[0], perm=self.param(nn, "perm", np.array(a["perm"], np.int32)), name=nn)
        elif op == "slice":
            xt = n.operands[0].type
            stride = a.get("stride") or [1] * xt.rank
            bounds = [slice(b, e, s).indices(d) for b, e, s, d in zip(a["begin"], a["end"], stride, xt.shape)]
            kw = {"begin": self.param(nn, "begin", np.array([b for b, _, _ in bounds], np.int32)),
                  "end": self.param(nn, "end", np.array([e for _, e, _ in bounds], np.int32)),
                  "stride": self.param(nn, "stride", np.array([s for _, _, s in bounds], np.int32))}
            out = mb.slice_by_index(x=x[0], name=nn, **kw)
        elif op == "split":
            op_name = self.claim(f"{nn}_split")
            axis = self.param(op_name, "axis", np.int32(a["axis"] % n.operands[0].type.rank))
            sizes = self.param(op_name, "split_sizes", np.array(a["sizes"], np.int32))
            outs = mb.split(x=x[0], axis=axis, split_sizes=sizes, name=op_name)
            for res, var in zip(n.results, outs):
                var.name = self.name(res)
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
            out = mb.pad(x=x[0], name=nn, **kw)
        else:
            raise CoreMLExportError(f"%{r.name}: op '{op}' has no Core ML translation",
                                    hint="it should not appear in a compiled program; recompile")
        self.env[id(r)] = out


# ---------------------------------------------------------------------------
# export


def export_coreml(directory: str | os.PathLike, output: str | os.PathLike, *,
                  func: str | None = None) -> ExportReport:
    """Write the artifact in ``directory`` as the Core ML package ``output`` (verified)."""
    ct = require("coremltools", "coreml", "anec export-coreml")
    art = find_artifact(directory, func)
    out = Path(output)
    if out.suffix != ".mlpackage":
        raise CoreMLExportError(f"output '{out}' must end in .mlpackage")
    if out.exists() and not (out.is_dir() and (out / "Manifest.json").is_file()):
        raise CoreMLExportError(f"refusing to replace '{out}': it is not a Core ML package",
                                hint="choose a new path ending in .mlpackage")
    prog = _Builder(art).build()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        model = _quiet(lambda: ct.convert(
            prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
            pass_pipeline=ct.PassPipeline.EMPTY, compute_precision=ct.precision.FLOAT32,
            skip_model_load=True))
        staged = tmp / out.name
        model.save(str(staged))
        report = verify_package(staged, art)
        _replace_dir(staged, out)
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


def _replace_dir(src: Path, dest: Path) -> None:
    """Move the finished package into place: rename, swapping out an old package."""
    if not dest.exists():
        os.rename(src, dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
    os.rmdir(old)
    os.rename(dest, old)
    try:
        os.rename(src, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


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
    """Check the package at ``path`` against the artifact (see the module docstring)."""
    from anec.mil.blobfile import BlobReader

    spec, prog = read_package(path)
    checks: list[str] = []
    func = prog.functions["main"]
    ops = list(func.operations)
    inputs, stmts, outputs = mil_statements(art.mil_text)
    if len(ops) != len(stmts):
        raise CoreMLExportError(f"the package has {len(ops)} operations, model.mil has {len(stmts)} statements")
    readers: dict[str, BlobReader] = {}
    n_const = n_weights = 0
    for op, st in zip(ops, stmts):
        names = [o.name for o in op.outputs]
        want = [name for _, name in st.results]
        if op.op_type != st.op or names != want:
            raise CoreMLExportError(f"operation {names} is {op.op_type}; model.mil has {want} = {st.op}")
        if st.op == "const":
            n_const += 1
            got = op.val.val
            if isinstance(st.value, tuple) and st.value[0] == "BLOBFILE":
                _, bpath, offset = st.value
                rel = bpath.removeprefix("@model_path/")
                if rel not in readers:
                    readers[rel] = BlobReader(art.blobs[rel], name=rel)
                w = next(w for w in art.manifest["weights"] if w["file"] == rel and w["offset"] == offset)
                want_val = readers[rel].read(offset, DType(w["dtype"]).np).reshape(w["shape"])
                n_weights += 1
            else:
                want_val = st.value
            if not _same_value(got, want_val):
                raise CoreMLExportError(f"const '{names[0]}' differs from model.mil")
            continue
        got_args = {k: v.name for k, v in op.inputs.items() if hasattr(v, "name")}
        if got_args != st.args:
            raise CoreMLExportError(f"operation '{names[0]}' ({st.op}) takes {got_args}; model.mil says {st.args}")
    checks.append(f"{len(ops)} operations equal model.mil statement by statement "
                  f"({n_const} consts, {n_weights} of them BLOBFILE weights equal weights/*.bin)")
    man = art.manifest
    desc_in = [(i.name, [int(d) for d in i.type.multiArrayType.shape], _array_dtype(i)) for i in spec.description.input]
    want_in = [(e["name"], list(e["shape"]), e["dtype"]) for e in man["inputs"]]
    if desc_in != want_in:
        raise CoreMLExportError(f"package inputs {desc_in} differ from the manifest's {want_in}")
    desc_out = [(o.name, [int(d) for d in o.type.multiArrayType.shape], _array_dtype(o))
                for o in spec.description.output]
    want_out = [(e["name"], list(e["shape"]), e["dtype"]) for e in man["outputs"]]
    if desc_out != want_out:
        raise CoreMLExportError(f"package outputs {desc_out} differ from the manifest's {want_out}")
    if [name for _, name in inputs] != [e["name"] for e in man["inputs"]] or outputs != [e["name"] for e in man["outputs"]]:
        raise CoreMLExportError("model.mil's I/O differ from the manifest")  # pragma: no cover
    checks.append(f"inputs {[n for n, _, _ in desc_in]} and outputs {[n for n, _, _ in desc_out]} "
                  "(names, shapes, dtypes) equal the manifest's")
    return ExportReport(Path(path), len(ops) - n_const, n_const, n_weights, checks)


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
