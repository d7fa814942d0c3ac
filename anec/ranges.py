"""fp16 range analysis: which node's values leave what fp16 holds, on real inputs.

The ANE holds every value in fp16: magnitudes above 65504 become inf (then
NaN, or zeros through ``rsqrt``), and magnitudes below 2^-14 lose precision
bit by bit (fp16 subnormals) until they flush to zero below 2^-24. Whether a
program stays inside depends on its inputs, so the analysis runs on
calibration inputs a user gives (``anec check model.ir --inputs calib.npz``,
:func:`check_ranges`, ``ImportedModel.check_ranges``):

1. each func goes through the passes ``anec check`` runs before legalize
   (cleanup and ``range-safe``), so norms are analyzed in the form the device
   runs, not as written;
2. the reference interpreter runs it in ``fp32`` mode (exact magnitudes, no
   fp16 rounding) and records, per node, the largest finite magnitude;
3. a node whose values exceed 65504 although its operands did not is an
   *overflow* (an error: the device computes inf there);
4. the interpreter runs it again in ``fp16`` mode (every value rounded as the
   device stores it): a node whose fp16 values differ from the exact ones by
   more than ``2^-(11 - bits)`` of its largest magnitude, although its
   operands did not, *loses more than* ``bits`` *bits* (a warning: a
   difference of large values, or values that are fp16 subnormals), unless it
   is only added to values 2^11 times larger (an ``eps``).

Only the first node of an overflowing chain is reported (its users inherit
the inf). Each finding carries the node's source location and the constraint
id ``ANE-FP16-RANGE``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from anec.diagnostics import AnecError, Span
from anec.ir.graph import Graph, Module
from anec.ir.interp import interpret
from anec.passes.base import PassContext
from anec.passes.manager import run_pipeline
from anec.passes.pipelines import PREPARE

FP16_MAX = 65504.0
FP16_MIN_NORMAL = 2.0 ** -14
LOST_BITS = 4
"""Default: warn when a node's fp16 values are off by more than ``2^-7`` of its scale."""


@dataclass
class Finding:
    """One node whose values leave the fp16 range on the calibration inputs."""

    func: str
    node: str
    op: str
    kind: str
    """``"overflow"`` (an error) or ``"precision"`` (a warning)."""
    largest: float
    """Largest finite magnitude of the node's values (inf if the fp32 run overflowed too)."""
    smallest: float
    """Smallest non-zero magnitude."""
    span: Span | None
    error_ratio: float = 0.0
    """For ``precision``: max |fp16 - exact| over the largest exact magnitude."""

    @property
    def error(self) -> bool:
        return self.kind == "overflow"

    def diagnostic(self) -> AnecError:
        """The finding as a located diagnostic (``render()`` gives the caret lines)."""
        if self.kind == "overflow":
            msg = (f"%{self.node} ({self.op}) reaches |x| = {self.largest:.4g} on the calibration "
                   f"inputs in func '{self.func}'; fp16 holds at most 65504: the device computes "
                   "inf here")
            hint = ("scale the operands down before this op (or the result's consumers up), or "
                    "fold a following scale into its inputs; norms and variances written as "
                    "mean(x * x) are made safe by the range-safe pass")
        else:
            lost = 11 + math.log2(self.error_ratio) if self.error_ratio > 0 else 11.0
            why = ("its values are fp16 subnormals" if self.largest < FP16_MIN_NORMAL
                   else "cancellation or rounding of large operands")
            msg = (f"%{self.node} ({self.op}) in func '{self.func}' is off by "
                   f"{self.error_ratio:.2g} of its largest value {self.largest:.4g} in fp16 on the "
                   f"calibration inputs (about {min(lost, 11.0):.0f} of 11 significand bits lost: "
                   f"{why})")
            hint = ("subtract or scale in an order that keeps the operands small (e.g. center "
                    "before a difference of large values), or scale the values by a power of two")
        err = AnecError(msg, self.span, hint=hint, constraint="ANE-FP16-RANGE")
        if not self.error:
            err.kind = "warning"
        return err


@dataclass
class RangeReport:
    """The analysis of one func on one set of inputs."""

    func: str
    findings: list[Finding] = field(default_factory=list)
    largest: float = 0.0
    largest_at: str | None = None
    nodes: int = 0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.error]

    def summary(self) -> str:
        where = f" at %{self.largest_at}" if self.largest_at else ""
        head = (f"fp16 range of func '{self.func}' on the calibration inputs: {self.nodes} nodes, "
                f"largest |x| = {self.largest:.4g}{where}")
        n_err = len(self.errors)
        n_warn = len(self.findings) - n_err
        if not self.findings:
            return head + "; every value fits fp16"
        return head + f"; {n_err} overflow{'s' if n_err != 1 else ''}, " \
                      f"{n_warn} precision warning{'s' if n_warn != 1 else ''}"


def _magnitudes(arr: np.ndarray) -> tuple[float, float, bool]:
    """(largest finite |x|, smallest non-zero |x|, any inf/NaN) of a float array."""
    a = np.abs(np.asarray(arr, dtype=np.float64))
    finite = np.isfinite(a)
    bad = not bool(finite.all())
    a = a[finite]
    if a.size == 0:
        return 0.0, 0.0, bad
    nz = a[a > 0]
    return float(a.max()), float(nz.min()) if nz.size else 0.0, bad


def analyze(graph: Graph, inputs: Mapping[str, Any], weights: Mapping[str, np.ndarray] | None = None,
            *, bits: int = LOST_BITS) -> RangeReport:
    """Run ``graph`` as written (no passes) on ``inputs`` and report its fp16 range findings.

    Two runs of the interpreter: ``fp32`` (exact magnitudes) and ``fp16`` (every value
    rounded as the device stores it). A node is an *overflow* where its exact values pass
    65504; it *loses bits* where its fp16 values differ from the exact ones by more than
    ``2^-(11 - bits)`` of its largest magnitude (cancellation, subnormals) although its
    operands did not. Only the first node of a chain is reported."""
    inputs_bad = [k for k, v in inputs.items() if np.asarray(v).dtype.kind == "f"
                  and not np.isfinite(np.asarray(v)).all()]
    if inputs_bad:
        raise AnecError(f"calibration input(s) {', '.join(inputs_bad)} hold inf or NaN",
                        hint="give finite calibration inputs")
    report = RangeReport(graph.name)
    exact: dict[int, np.ndarray] = {  # values of the fp32 run (and the inputs), by value id
        id(v): np.asarray(inputs[v.name], dtype=np.float64) for v in graph.inputs if v.name in inputs}
    largest_of: dict[int, float] = {}
    over: set[int] = set()      # values out of range (their users inherit it)
    lossy: set[int] = set()     # values already past the error bound
    candidates: list[tuple[Any, Finding]] = []
    bound = 2.0 ** -(11 - bits)

    def observe_exact(node: Any, results: list[np.ndarray]) -> None:
        report.nodes += 1
        inherited = any(id(v) in over for v in node.inputs())
        for r, arr in zip(node.results, results):
            if not r.type.dtype.is_float:
                continue
            exact[id(r)] = np.asarray(arr, dtype=np.float64)
            largest, smallest, bad = _magnitudes(arr)
            largest_of[id(r)] = largest
            if largest > report.largest:
                report.largest, report.largest_at = largest, r.name
            if largest > FP16_MAX or bad:
                over.add(id(r))
                if not inherited:
                    shown = largest if largest > FP16_MAX else float("inf")
                    if node.op == "cast" and id(node.operands[0]) in exact:  # what the cast was given
                        shown = _magnitudes(exact[id(node.operands[0])])[0]
                    report.findings.append(Finding(graph.name, r.name, node.op, "overflow", shown,
                                                   smallest, node.span))

    def observe_fp16(node: Any, results: list[np.ndarray]) -> None:
        inherited = any(id(v) in over or id(v) in lossy for v in node.inputs())
        for r, arr in zip(node.results, results):
            ref = exact.pop(id(r), None)  # freed as the fp16 run passes the node
            if ref is None or id(r) in over:
                continue
            scale = largest_of[id(r)]
            with np.errstate(all="ignore"):
                err = np.abs(np.asarray(arr, dtype=np.float64) - ref)
            worst = float(np.nan_to_num(err, nan=np.inf).max(initial=0.0))
            if scale > 0.0 and worst > bound * scale:
                lossy.add(id(r))
                if not inherited:
                    candidates.append((r, Finding(graph.name, r.name, node.op, "precision", scale,
                                                  _magnitudes(ref)[1], node.span, worst / scale)))

    interpret(graph, inputs, weights, mode="fp32", observe=observe_exact)
    interpret(graph, inputs, weights, mode="fp16", observe=observe_fp16)
    report.findings += [f for r, f in candidates if not _negligible(r, largest_of)]
    order = {n.results[0].name: k for k, n in enumerate(graph.nodes) if n.results}
    report.findings.sort(key=lambda f: order.get(f.node, 0))
    return report


def _negligible(v: Any, largest_of: Mapping[int, float]) -> bool:
    """Every use of ``v`` adds it to a value 2^11 times larger: below that value's fp16
    rounding, so its lost bits change nothing (an ``eps`` term, say)."""
    if not v.uses:
        return False
    for use in v.uses:
        if use.op not in ("add", "sub") or len(use.operands) != 2:
            return False
        other = use.operands[1] if use.operands[0] is v else use.operands[0]
        if largest_of.get(id(other), 0.0) < largest_of.get(id(v), 0.0) * 2.0 ** 11:
            return False
    return True


def check_ranges(module: Module, inputs: Mapping[str, Any], weights: Mapping[str, np.ndarray] | None = None,
                 *, funcs: list[str] | None = None, target: str | None = None,
                 bits: int = LOST_BITS) -> list[RangeReport]:
    """fp16 range reports of ``module``'s funcs on ``inputs`` (input name -> array).

    Each func is prepared as ``anec check`` prepares it (cleanup, range-safe) on a copy;
    funcs whose inputs are not all given are skipped unless named in ``funcs``
    (then a missing input is an error naming it).
    """
    names = list(funcs) if funcs is not None else [
        n for n, g in module.funcs.items() if all(v.name in inputs for v in g.inputs)]
    if not names:
        wanted = "; ".join(f"{n}: {', '.join(v.name for v in g.inputs)}" for n, g in module.funcs.items())
        raise AnecError(f"the calibration inputs ({', '.join(inputs) or 'none'}) are not the inputs "
                        f"of any func ({wanted})", hint="give one array per input of a func, by name")
    reports = []
    for name in names:
        if name not in module.funcs:
            raise AnecError(f"no func '{name}'", hint=f"funcs: {', '.join(module.funcs)}")
        work = _single(module, name)
        ctx = PassContext.default(target, weights=weights)
        run_pipeline(work, PREPARE, ctx)
        g = work.funcs[name]
        feed = {v.name: inputs[v.name] for v in g.inputs if v.name in inputs}
        reports.append(analyze(g, feed, weights, bits=bits))
    return reports


CALIBRATION_MAX_BYTES = 1 << 32
"""Largest calibration file read (4 GiB)."""


def load_calibration(path: str) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` (or one ``.npy``, named by its file stem) of calibration inputs.

    Read as hostile input (:func:`anec.fsutil.read_regular`: a regular file, never waited
    on, bounded in size), no pickled objects, bounded once unpacked; every failure is an
    AnecError naming the file.
    """
    import io
    import os
    import zipfile

    from anec.fsutil import read_regular

    data = read_regular(path, CALIBRATION_MAX_BYTES, "calibration inputs")
    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            arrays = {os.path.splitext(os.path.basename(path))[0]: loaded}
        else:
            with loaded:
                total = sum(i.file_size for i in loaded.zip.infolist())
                if total > CALIBRATION_MAX_BYTES:
                    raise AnecError(f"calibration inputs: '{path}' unpacks to {total} bytes, more than "
                                    f"{CALIBRATION_MAX_BYTES}")
                arrays = {k: loaded[k] for k in loaded.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        first = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise AnecError(f"calibration inputs: '{path}' is not a .npz/.npy of numeric arrays ({first})",
                        hint="save them with numpy.savez(path, x=array, ...)") from None
    for k, a in arrays.items():
        if a.dtype.kind not in "fiub":
            raise AnecError(f"calibration inputs: '{path}': array '{k}' has dtype {a.dtype}, not numbers")
    return arrays


def _single(module: Module, name: str) -> Module:
    """A copy of ``module`` holding only func ``name``."""
    m = Module(module.source, module.path)
    m.weight_sources = list(module.weight_sources)
    m.add_func(module.funcs[name].clone())
    return m
