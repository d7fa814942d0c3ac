"""The compile's decision per weight const: :func:`decide`, :class:`Decision` and its report.

At emit-mil, every fp16 weight const a conv or matmul reads (:func:`weight_axis`)
whose key a SPEC rule matches is tried in the rule's formats in order; the
first whose result passes the gate is kept, the others are recorded as
fallbacks with the reason. :meth:`Decision.report` is the manifest's
``compression`` entry; :func:`report_summary` and :func:`fallback_lines` are
what ``anec compile`` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from anec.compress.formats import FORMATS, Format, input_axis, scale_shape
from anec.compress.sparse import kept_count
from anec.compress.spec import Spec, for_target, not_streamed_warning
from anec.compress.tensor import Compressed, compress_tensor
from anec.ir.types import DType
from anec.ir.weight_binding import materialize
from anec.mil.blobfile import payload_bytes
from anec.thread_pools import map_on_cores

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node


@dataclass
class Decision:
    """What the compile does with one weight const."""

    key: str
    fmt: Format
    """The format used (``fp16``: stored as it is)."""
    requested: str
    axis: int
    shape: tuple[int, ...]
    compressed: Compressed | None = None
    """The parts (None without weights, ``anec mil``, and for fp16)."""
    fallbacks: list[dict] = field(default_factory=list)
    """Each format tried and rejected: {format, reason, rel_l2, rel_abs}."""
    warning: str | None = None
    """Set when the target does not stream the format used (ANE-COMPRESSED-STREAMING)."""

    def part_types(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """(role, BLOBFILE dtype, shape) of each payload, in MIL argument order."""
        c = self.shape[self.axis]
        f = self.fmt
        if f.kind == "linear":
            sshape = scale_shape(f, self.axis, self.shape)
            out = [("q", f.storage, self.shape), ("scale", "fp16", sshape)]
            if f.affine:
                out.append(("zero_point", f.storage, sshape))
            return out
        if f.kind == "lut":
            groups = c // f.group if f.group else 1
            return [("indices", f.storage, self.shape), ("lut", "fp16", (groups, 1 << f.bits))]
        if f.kind == "sparse":  # the number of values is fixed by the shape (anec.compress.sparse)
            kept = (kept_count(math.prod(self.shape), f.sparsity),)
            if f.joint == "int8":
                bshape = tuple(c if i == self.axis else 1 for i in range(len(self.shape)))
                return [("mask", "uint1", self.shape), ("q", "int8", kept), ("scale", "fp16", bshape)]
            if f.joint:
                lshape = (1,) * len(self.shape) + (1 << f.bits, 1)
                return [("mask", "uint1", self.shape), ("indices", f.storage, kept), ("lut", "fp16", lshape)]
            return [("values", "fp16", kept), ("mask", "uint1", self.shape)]
        return []

    def report(self) -> dict:
        d = {"key": self.key, "format": self.fmt.name, "requested": self.requested, "axis": self.axis,
             "dense_bytes": int(math.prod(self.shape)) * 2}
        if self.compressed is not None:
            c = self.compressed
            d.update(bytes=c.nbytes, rel_l2=_num(c.rel_l2), max_abs=_num(c.max_abs), rel_abs=_num(c.rel_abs),
                     channel_rel_l2=_num(c.channel_rel_l2))
        elif self.fmt.kind == "none":
            d["bytes"] = d["dense_bytes"]
        else:  # no weights: the payload sizes follow from the format and the shape alone
            d["bytes"] = sum(payload_bytes(dt, math.prod(shape)) for _, dt, shape in self.part_types())
        if self.fallbacks:
            d["fallbacks"] = self.fallbacks
        if self.warning:
            d["warning"] = self.warning
        return d


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)


def weight_axis(graph: "Graph", node: "Node") -> int | None:
    """The output-channel axis of a weight const a conv or matmul reads, or None when no
    conv/matmul reads it (then it is not compressed)."""
    r = node.result
    rank = r.type.rank
    if rank < 2:
        return None
    axis = None
    for user in r.uses:
        if user.op.startswith("conv") and user.operands and len(user.operands) > 1 and user.operands[1] is r:
            a = 0
        elif user.op == "matmul":
            ty = bool(user.attrs.get("transpose_y", False))
            tx = bool(user.attrs.get("transpose_x", False))
            if len(user.operands) > 1 and user.operands[1] is r:
                a = rank - 2 if ty else rank - 1
            else:
                a = rank - 1 if tx else rank - 2
        else:
            return None
        if axis is not None and a != axis:
            return None
        axis = a
    return axis


def _allowed(fmt: Format, shape: tuple[int, ...], axis: int, dialect: str) -> str | None:
    """Why ``fmt`` cannot store a tensor of ``shape`` in ``dialect`` (None: it can)."""
    if fmt.blockwise:
        if dialect == "ios16":
            return "the ios16 constexpr_affine_dequantize has no 4-bit or per-block form"
        ia = input_axis(axis, len(shape))
        if fmt.block and shape[ia] % fmt.block:
            return f"{shape[ia]} input channels do not split into blocks of {fmt.block}"
    if fmt.kind == "sparse" and fmt.joint and dialect == "ios16":
        return f"ios16 has no sparse {fmt.joint} form (constexpr_sparse_blockwise_shift_scale and " \
               "constexpr_lut_to_sparse are iOS18 ops)"
    if fmt.kind == "sparse" and kept_count(math.prod(shape), fmt.sparsity) == 0:
        return f"{fmt.sparsity}% of {math.prod(shape)} elements prunes every one"
    if fmt.kind == "lut" and fmt.group:
        if dialect == "ios16":
            return "the ios16 constexpr_lut_to_dense has one table per tensor (no grouped LUT)"
        if shape[axis] % fmt.group:
            return f"{shape[axis]} output channels do not split into groups of {fmt.group}"
    return None


def decide(graph: "Graph", spec: Spec, store: Mapping[str, np.ndarray] | None, dialect: str,
           materialize_fn=None, target: Any = None) -> dict[int, Decision]:
    """id(const node) -> :class:`Decision` for every weight const ``spec`` matches.

    With ``store`` every format is tried in the rule's order and the first whose
    result passes the gate is kept; without one (MIL only) the first allowed format
    is taken as it is. The weights are decided on the process's worker threads, one
    per core (:func:`anec.thread_pools.map_on_cores`; each weight's chain on its own,
    so the decisions are those of one thread).
    """
    mat = materialize_fn or materialize
    if target is not None:
        spec = for_target(spec, target)
    views: dict[tuple, list[int]] = {}  # one decision per distinct view of a weight
    jobs: list[tuple] = []
    for n in graph.nodes:
        if n.op != "const" or "weight" not in n.attrs:
            continue
        key = n.attrs["weight"]
        rule = spec.rule_for(key)
        if rule is None:
            continue
        t = n.result.type
        if t.dtype != DType.fp16:  # compressed weights decompress to fp16
            continue
        axis = weight_axis(graph, n)
        if axis is None:
            continue
        view = (key, tuple(n.attrs.get("perm") or ()), tuple(n.attrs.get("slice") or ()), t.shape, axis)
        if view not in views:
            views[view] = []
            jobs.append((key, rule, t.shape, axis, n))
        views[view].append(id(n))

    def one(job: tuple) -> Decision:
        key, rule, shape, axis, n = job
        # each job reads its weight's values itself: one fp16 copy per thread is alive at a time
        arr = None if store is None else np.asarray(mat(n, store, copy=False)).astype(np.float16)
        chosen = _choose(key, rule, shape, axis, arr, spec, dialect)
        if target is not None:
            chosen.warning = not_streamed_warning(chosen.fmt, target)
        return chosen

    out: dict[int, Decision] = {}
    for ids, chosen in zip(views.values(), map_on_cores(one, jobs)):
        for i in ids:
            out[i] = chosen
    return out


def _choose(key: str, rule: Any, shape: tuple[int, ...], axis: int, arr: np.ndarray | None, spec: Spec,
            dialect: str) -> Decision:
    """The first format of ``rule``'s chain allowed for the weight and (given its values
    ``arr``) within the gate, fp16 when none is; the others as fallbacks with the reason."""
    fallbacks: list[dict] = []
    chosen: Decision | None = None
    for fmt in rule.chain:
        why = _allowed(fmt, shape, axis, dialect)
        if why is not None:
            fallbacks.append({"format": fmt.name, "reason": why})
            continue
        if fmt.kind == "none" or arr is None:
            chosen = Decision(key, fmt, rule.chain[0].name, axis, shape)
            break
        c = compress_tensor(arr, fmt, axis)
        max_rel, max_abs = spec.gate.limits(fmt)
        if not math.isfinite(c.rel_l2):
            why = "the dequantized tensor is not finite in fp16 (ANE-FP16-RANGE)"
        elif c.rel_l2 > max_rel:
            why = f"relative L2 error {c.rel_l2:.4g} > {max_rel:g}"
        elif c.channel_rel_l2 > max_rel:
            why = (f"relative L2 error of output channel {c.worst_channel} {c.channel_rel_l2:.4g} > {max_rel:g} "
                   f"(the tensor's is {c.rel_l2:.4g})")
        elif c.rel_abs > max_abs:
            why = f"max abs error {c.max_abs:.4g} is {c.rel_abs:.4g} of max|w|, > {max_abs:g}"
        else:
            chosen = Decision(key, fmt, rule.chain[0].name, axis, shape, c)
            break
        fallbacks.append({"format": fmt.name, "reason": why, "rel_l2": _num(c.rel_l2),
                          "rel_abs": _num(c.rel_abs)})
    if chosen is None:
        chosen = Decision(key, FORMATS["fp16"], rule.chain[0].name, axis, shape)
    chosen.fallbacks = fallbacks
    return chosen


def report_summary(reports: Iterable[Any]) -> str:
    """``4 weights (int8 2, lut4 2), 9437184 -> 3545088 bytes (0.38x), 1 fell back`` from the
    manifest ``compression`` records (:class:`anec.mil.manifest_types.CompressionRecord`)."""
    rs = list(reports)
    by: dict[str, int] = {}
    dense = comp = fell = 0
    for r in rs:
        by[r.format] = by.get(r.format, 0) + 1
        dense += int(r.dense_bytes)
        comp += int(r.bytes if r.bytes is not None else r.dense_bytes)
        fell += bool(r.fallbacks)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
    return (f"{len(rs)} weights ({kinds}), {dense} -> {comp} bytes ({comp / max(dense, 1):.2f}x)"
            + (f", {fell} fell back" if fell else ""))


def fallback_lines(reports: Iterable[Any]) -> list[str]:
    """``fallback: h.0.mlp.c_fc.weight: lut2 -> int8 (lut2: relative L2 error 0.34 > 0.3)``
    from the manifest ``compression`` records."""
    out = []
    for r in reports:
        if r.fallbacks:
            why = "; ".join(f"{f['format']}: {f['reason']}" for f in r.fallbacks)
            out.append(f"fallback: {r.key}: {r.requested} -> {r.format} ({why})")
    warned = sorted({r.warning for r in reports if r.warning})
    out += [f"warning: {w}" for w in warned]
    return out
