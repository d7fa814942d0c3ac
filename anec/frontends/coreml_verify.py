"""Verifying an exported Core ML package against the artifact it was built from.

:func:`verify_package` reads the package back with coremltools (spec and
weights) and checks that its operations equal, one to one, the I/O adapters
and ``model.mil``'s statements after coremltools' backend rewrites
(:mod:`~anec.frontends.coreml_fusions`): op type, result and argument names,
every constant's value (BLOBFILE constants against the artifact's
``weights/*.bin``), and that its I/O have the model's names, dtypes and logical
shapes. The result is an :class:`ExportReport`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from anec.frontends import CoreMLExportError, require
from anec.frontends.coreml_fusions import Expected, fuse, fusions_hint
from anec.frontends.coreml_mil import MilStatement, mil_statements
from anec.frontends.coreml_program import IOPlan, io_plan
from anec.frontends.coreml_wiring import Wiring, check_composition, pipeline_wiring
from anec.ir.types import DType
from anec.mil.multi_program import PipelineArtifact, stage_dir


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
    if isinstance(art, PipelineArtifact):
        wiring = pipeline_wiring(art)
        return verify_pipeline(path, art, wiring, check_composition(art, wiring))
    return verify_program(path, art)


def verify_program(path: str | os.PathLike, art: Any) -> ExportReport:
    inputs, _, outputs = mil_statements(art.mil_text)
    man = art.manifest
    if [name for _, name in inputs] != [e.name for e in man.inputs] or outputs != [e.name for e in man.outputs]:
        raise CoreMLExportError("model.mil's I/O differ from the manifest")  # pragma: no cover
    plan = io_plan(man, [art])
    rename = plan.through(lambda name: name)
    return _verify(path, plan, [(art, rename, "")], "model.mil")


def verify_pipeline(path: str | os.PathLike, pipe: Any, wiring: Wiring, proved: str) -> ExportReport:
    plan = io_plan(pipe.manifest, pipe.stages)
    parts = [(art, plan.through(wiring.rename(k)), f"stage {k} ({stage_dir(k)}/model.mil): ")
             for k, art in enumerate(pipe.stages)]
    return _verify(path, plan, parts, f"the {len(parts)} stages' model.mil", proved)



def _expected(plan: IOPlan, parts: list[tuple[Any, Callable[[str], str], str]],
              outputs: list[str]) -> tuple[list[Expected], dict[str, int]]:
    """The operations the package should hold: the I/O adapters and every part's model.mil
    statements renamed, then coremltools' backend fusions (:data:`FUSIONS`; no dead code
    removal follows them). Returns them and the count of each fusion applied."""
    from anec.mil.blobfile import BlobReader

    out = [Expected(st, "") for st in plan.before]
    for art, rename, where in parts:
        readers: dict[str, BlobReader] = {}
        for st in mil_statements(art.mil_text)[1]:
            res = [(t, rename(n)) for t, n in st.results]
            args = {k: rename(v) for k, v in st.args.items()}
            value, blob = st.value, False
            if isinstance(value, tuple) and value[0] == "BLOBFILE":
                _, bpath, offset = value
                rel = bpath.removeprefix("@model_path/")
                w = next((w for w in art.manifest.weights if w.file == rel and w.offset == offset), None)
                if w is None or rel not in art.blobs:
                    raise CoreMLExportError(f"{where}const '{res[0][1]}' reads {rel}@{offset}, which the manifest "
                                            "does not list")
                if rel not in readers:
                    readers[rel] = BlobReader(art.blobs[rel], name=rel)
                value, blob = readers[rel].read(offset, DType(w.dtype).np).reshape(w.shape), True
            out.append(Expected(MilStatement(res, st.op, args, value), where, blob))
    out += [Expected(st, "") for st in plan.after]
    applied: dict[str, int] = {}
    fuse(out, set(outputs), applied)
    return out, applied



def _verify(path: str | os.PathLike, plan: IOPlan, parts: list, what: str, proved: str | None = None) -> ExportReport:
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
                                hint=fusions_hint())
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


def _compare_ops(ops: list[Any], exp: list[Expected]) -> tuple[int, int]:
    """Each package op equals its expected statement: op type, result and argument names,
    constant values. Returns ``(consts, BLOBFILE weights)``."""
    n_const = n_weights = 0
    for op, e in zip(ops, exp):
        st, where = e.stmt, e.where
        names = [o.name for o in op.outputs]
        want = [name for _, name in st.results]
        if op.op_type != st.op or names != want:
            raise CoreMLExportError(f"{where}operation {names} is {op.op_type}; the program has {want} = {st.op}",
                                    hint=fusions_hint())
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


def _check_io(spec: Any, plan: IOPlan) -> str:
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
