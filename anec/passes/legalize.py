"""Legalization: make a verified program acceptable to the ANE of the chosen target."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from anec.diagnostics import ConstraintError
from anec.ir.ops import BINARY, get_op, is_weight_const, weight_view
from anec.ir.types import FP16_MAX, DType, device_shape
from anec.passes.annotate_sram import sram_report
from anec.passes.base import Pass, PassContext
from anec.passes.dce import remove_dead_nodes
from anec.passes.fuse_casts import CAST_RULES
from anec.passes.layout import weight_const
from anec.passes.legalize_rules import LegalizeRewriter, rules_for
from anec.passes.rewrite import erase_if_dead, rewrite_greedily

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node

SCALAR_OPS = BINARY
"""Elementwise ops whose inline scalar operand lowers the BLOBFILE cap (ANE-BLOB-BUDGET)."""


# ---- program-level steps (run once, in this order) ---------------------------------


def check_io_tensors(rw: LegalizeRewriter) -> bool:
    """Program inputs and outputs are fp16/fp32 tensors (ANE-IO-TENSORS).

    They are IOSurface buffers the host fills and reads: an integer or bool
    I/O has no surface layout the published runtimes use. (A scalar is fine:
    :func:`reshape_io_to_rank4` gives it the device shape ``[1, 1, 1, 1]``.)
    Returns False when something was rejected.
    """
    g = rw.graph
    ok = True
    for kind, values in (("input", g.inputs), ("output", g.outputs)):
        for v in values:
            t = v.type
            if t.dtype.is_float:
                continue
            ok = False
            if kind == "input":
                hint = (f"declare %{v.name} as fp16 (or fp32) and cast it inside the program: "
                        f"cast(%{v.name}, dtype={t.dtype})")
            else:
                hint = f"cast it before returning: cast(%{v.name}, dtype=fp16)"
            span = v.span if kind == "input" else (g.return_span or v.span)
            rw.reject("ANE-IO-TENSORS", f"{kind} %{v.name} is {t.dtype} ({t}); program inputs "
                      "and outputs must be fp16 or fp32 tensors", hint,
                      node=v.producer if kind == "output" else None, span=span)
    return ok


def check_float_compute(rw: LegalizeRewriter) -> None:
    """Arithmetic computes on fp16/fp32 tensors (ANE-FLOAT-COMPUTE).

    The ops whose dtype domain admits int32 (the binary ops, matmul, the
    reductions) are rejected on integer operands: no published ANE program
    computes on integers, and the sim refuses such MIL at load. Casting to
    int32 and back (truncation), and moving integer tensors, stay legal.
    """
    from anec.ir.types import NUMERIC

    computes: dict[str, bool] = {}  # op -> whether its dtype domain is NUMERIC (int32 admitted)
    for node in rw.graph.nodes:
        op = node.op
        if op == "const" or not node.results:
            continue
        numeric = computes.get(op)
        if numeric is None:
            opdef = get_op(op)
            numeric = computes[op] = DType.int32 in opdef.dtypes and opdef.dtypes == NUMERIC
        if not numeric or node.results[0].type.dtype.is_float or rw.settled(node):
            continue
        t = node.results[0].type
        rw.reject("ANE-FLOAT-COMPUTE", f"%{node.results[0].name} = {node.op} computes on {t.dtype} "
                  f"({t}); the ANE computes on fp16/fp32 tensors",
                  f"cast the operands to fp16 first, e.g. cast(%{node.operands[0].name}, dtype=fp16), "
                  "and back to int32 after if the program needs integers", node=node)


def reshape_io_to_rank4(rw: LegalizeRewriter) -> None:
    """Func inputs and outputs of rank != 4 become rank-4 ``[1, C, 1, S]`` tensors (ANE-IO-RANK4).

    Every program the public references run on the device has rank-4
    ``[1, C, 1, S]`` I/O. An input ``%x`` of another rank gets its device
    shape (:func:`device_shape`) under the same name, followed by
    ``%x_logical = reshape(%x)`` to the logical shape for its users (a
    ``reshape`` user reads ``%x`` directly; a scalar is read back with a
    one-element ``reduce_sum``, as a reshape to rank 0 would need an empty
    shape tensor, which no reference writes); an output ``%y`` becomes
    ``%y = reshape(%y_logical)`` to the device shape, so the name the device
    binds never changes. ``graph.facts.logical_inputs`` and
    ``graph.facts.logical_outputs`` record the logical shapes (the bytes
    are the same, so the host reshapes for free).
    """
    g = rw.graph
    rw.anchor, rw.rule_name = None, "reshape_io_to_rank4"
    made: set[int] = set()  # the input reshapes so far: the next one goes after them
    for v in list(g.inputs):
        if v.type.rank == 4:
            continue
        logical = v.type
        users = list(dict.fromkeys(v.uses))
        g.set_input_type(v, logical.with_shape(device_shape(logical.shape)))
        others = [u for u in users if u.op != "reshape"]  # a reshape reads the device shape as well
        outputs = {id(o) for o in g.outputs}
        for u in users:  # a reshape to the device shape is now a no-op: its users read %x
            if u.op == "reshape" and u.result.type == v.type and id(u.result) not in outputs:
                g.replace_all_uses(u.result, v)
                erase_if_dead(g, u)
        if others:
            at = next(n for n in g.nodes if id(n) not in made)
            lname = g.fresh_name(f"{v.name}_logical")
            if logical.rank:
                lv = rw.op("reshape", v, shape=list(logical.shape), name=lname, at=at)
            else:  # a scalar: the sum of its one element (a reshape to rank 0 needs an empty shape)
                lv = rw.op("reduce_sum", v, axes=[0, 1, 2, 3], keep_dims=False, name=lname, at=at)
            made.add(id(lv.producer))
            g.replace_uses(v, lv, others)
            g.rebuild_uses()  # use lists in node order, as the rules that follow iterate them
        g.facts.logical_inputs.append(
            {"name": v.name, "dtype": str(logical.dtype), "shape": list(logical.shape)})
        rw.record("ANE-IO-RANK4", f"input %{v.name} {logical} is {v.type} on the device (the same "
                  "elements)", name=v.name, span=v.span)
    counts = Counter(id(v) for v in g.outputs)
    for v in list(g.outputs):
        # an input returned as is or a value returned twice stays: emit-mil rejects both
        if v.type.rank == 4 or v.producer is None or counts[id(v)] > 1:
            continue
        logical, name = v.type, v.name
        dev = logical.with_shape(device_shape(logical.shape))
        p = v.producer
        src = p.operands[0] if p.op == "reshape" else v  # reshape(reshape(x)) == reshape(x)
        if src.type == dev and src.producer is not None and id(src) not in {id(o) for o in g.outputs}:
            y = src  # %y = reshape(%src) undoes the device shape of %src: return %src itself
        else:
            y = rw.op("reshape", src, shape=list(dev.shape), name=g.fresh_name(f"{name}_device"))
        g.rename_value(v, g.fresh_name(f"{name}_logical"))
        g.rename_value(y, name)
        g.replace_output(v, [y])
        g.facts.logical_outputs.append(
            {"name": name, "axis": None, "pieces": [name], "dtype": str(logical.dtype),
             "shape": list(logical.shape)})
        rw.record("ANE-IO-RANK4", f"output %{name} {logical} is {y.type} on the device (the same "
                  "elements)", name=name, span=g.return_span or v.span)


def check_io_dtypes(rw: LegalizeRewriter) -> None:
    """fp32 inputs/outputs on a target without fp32 I/O: error, or host casts (ANE-FP32-IO).

    With ``options["host_casts"]`` the program takes and returns fp16: an
    fp32 input ``%x`` becomes fp16 (the host converts) followed by
    ``cast(%x, fp32)`` for its old uses, an fp32 output gets a final
    ``cast(.., fp16)`` under its name; the cast folding that follows removes
    the pairs that cancel (``cast(cast(x16, fp32), fp16) -> x16``).
    ``graph.facts.host_casts`` lists what the host converts.
    """
    g, target = rw.graph, rw.target
    if target.fp32_io:
        return
    ios = [("input", v) for v in g.inputs if v.type.dtype == DType.fp32]
    ios += [("output", v) for v in g.outputs if v.type.dtype == DType.fp32]
    if not ios:
        return
    if not rw.ctx.option("host_casts"):
        for kind, v in ios:
            span = v.span if kind == "input" else (g.return_span or v.span)
            rw.reject(
                "ANE-FP32-IO", f"{kind} %{v.name} is fp32; {target.name} rejects fp32 program "
                f"I/O", f"declare %{v.name} as fp16 and convert on the host, or compile with "
                "--host-casts to let anec do that", span=span)
        return
    casts = g.facts.host_casts
    rw.anchor, rw.rule_name = None, "use_host_casts"
    for kind, v in ios:
        if kind == "input":
            users = list(v.uses)
            g.set_input_type(v, v.type.with_dtype(DType.fp16))
            first = g.nodes[0] if g.nodes else None
            c = rw.op("cast", v, dtype=DType.fp32, name=g.fresh_name(f"{v.name}_f32"), at=first)
            g.replace_uses(v, c, users)
        else:
            c = rw.op("cast", v, dtype=DType.fp16, name=g.fresh_name(f"{v.name}_f16"))
            out_name = v.name
            g.rename_value(v, g.fresh_name(f"{out_name}_f32"))
            g.rename_value(c, out_name)
            g.replace_output(v, [c])
        g.rebuild_uses()  # use lists in node order, as the rules that follow iterate them
        name = v.name if kind == "input" else c.name
        casts.append({"name": name, "kind": kind, "host_dtype": "fp32", "program_dtype": "fp16"})
        span = v.span if kind == "input" else (g.return_span or v.span)
        rw.record("ANE-FP32-IO", f"{kind} %{name} is fp16 on the device; the host converts "
                  "fp32 <-> fp16", name=name, span=span)
    rewrite_greedily(g, CAST_RULES, rw)


_BITS = {2: (np.int16, np.uint16), 4: (np.int32, np.uint32), 8: (np.int64, np.uint64)}


def beyond_fp16(arr: np.ndarray) -> bool:
    """True if float array ``arr`` holds a NaN or a value beyond +-FP16_MAX (an Inf included).

    One pass over the bits, no temporary array: an IEEE float's magnitude
    orders as its bits without the sign (NaN above Inf above every finite
    value), so ``|v| > FP16_MAX`` exactly when those bits exceed the bits of
    FP16_MAX in the same dtype. The largest signed-integer view finds such a
    non-negative value, the largest unsigned view (sign bit set) a negative
    one. For fp16 storage that is "any Inf or NaN". Two integer maxima cost
    a few milliseconds where ``max(abs(w))`` over fp16 took a second per GB.
    """
    ints = _BITS.get(arr.dtype.itemsize)
    if ints is None or arr.dtype.kind != "f" or not arr.dtype.isnative:
        return not float(np.max(np.abs(arr))) <= FP16_MAX  # NaN compares False
    data = np.ascontiguousarray(arr)  # any shape: a same-width view and max() read every element
    signed, unsigned = ints
    limit = int(np.array(FP16_MAX, arr.dtype).view(unsigned))
    sign = 1 << (8 * arr.dtype.itemsize - 1)
    return int(data.view(signed).max()) > limit or int(data.view(unsigned).max()) > (sign | limit)


def check_weight_range(rw: LegalizeRewriter) -> None:
    """Weights that are NaN/Inf or beyond fp16 range: errors naming the key (ANE-FP16-RANGE)."""
    store = rw.ctx.weights
    if store is None:
        return
    seen: set[str] = set()
    for n in rw.graph.nodes:
        if not is_weight_const(n) or not n.result.type.dtype.is_float:
            continue
        key = n.attrs["weight"]
        if key in seen or key not in store:
            continue
        seen.add(key)
        arr = np.asarray(store[key])
        if arr.dtype.kind != "f" or arr.size == 0:
            continue
        if not beyond_fp16(arr):
            continue
        a = arr.astype(np.float64)
        nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        finite = a[np.isfinite(a)]
        big = int((np.abs(finite) > FP16_MAX).sum())
        if nan or inf:
            what = ", ".join(p for p in (f"{nan} NaN" if nan else "", f"{inf} Inf" if inf else "")
                             if p)
            plural = "s" if nan + inf != 1 else ""
            rw.reject("ANE-FP16-RANGE", f"weight '{key}' contains {what} value{plural}",
                      "fix the checkpoint (a NaN/Inf weight poisons every output it reaches)", n)
        elif big:
            one = big == 1
            rw.reject(
                "ANE-FP16-RANGE",
                f"weight '{key}' has {big} value{'' if one else 's'} beyond the fp16 range +-{FP16_MAX:g} "
                f"(largest |v| = {np.abs(finite).max():.6g}); on the ANE {'it becomes' if one else 'they become'} inf",
                "rescale the weight (and undo the scale after the op), or use -1e4 instead of "
                "huge magnitudes for masks", n)


def merge_duplicate_weights(graph: "Graph") -> int:
    """Weight consts with the same key, view and type become one (one BLOBFILE tensor)."""
    first: dict[tuple[Any, ...], "Node"] = {}
    merged, dead = 0, []
    for n in list(graph.nodes):
        if not is_weight_const(n):
            continue
        key = weight_view(n)
        if key not in first:
            first[key] = n
            continue
        graph.replace_all_uses(n.result, first[key].result)
        if not n.result.uses and n.result not in graph.outputs:
            dead.append(n)
        merged += 1
    graph.erase_nodes(dead)
    return merged


def blob_tensors(graph: "Graph") -> list["Node"]:
    """The weight consts that are BLOBFILE tensors: the first const of each distinct view.

    One BLOBFILE tensor per distinct :func:`~anec.ir.ops.weight_view` (key,
    perm, slice, type): consts with equal views are one tensor (legalize merges
    them). Value consts are inline literals in MIL and do not count.
    """
    first: dict[tuple[Any, ...], "Node"] = {}
    for n in graph.nodes:
        if is_weight_const(n):
            first.setdefault(weight_view(n), n)
    return list(first.values())


def blob_count(graph: "Graph") -> tuple[int, list["Node"], "Node | None"]:
    """(BLOBFILE tensors, their weight consts, the first node taking an inline scalar)."""
    weights = blob_tensors(graph)
    scalar_user = None
    for n in graph.nodes:
        if n.op in SCALAR_OPS and any(
                v.producer is not None and v.producer.op == "const" and v.type.rank == 0
                for v in n.operands):
            scalar_user = n
            break
    return len(weights), weights, scalar_user


def check_weight_packing(rw: LegalizeRewriter) -> None:
    """Packed BLOBFILEs on a one-file-per-weight target are errors (ANE-ONE-FILE-PER-WEIGHT)."""
    if rw.ctx.option("pack_weights") and rw.target.one_file_per_weight:
        weights = blob_tensors(rw.graph)
        if len(weights) > 1:
            rw.reject(
                "ANE-ONE-FILE-PER-WEIGHT", f"packed weights (one BLOBFILE holding "
                f"{len(weights)} tensors) are rejected on {rw.target.name}",
                "compile without --pack-weights: anec then writes one file per weight",
                span=rw.graph.span)


def legalize_graph(graph: "Graph", ctx: PassContext, *, collect: bool = False,
                   on_rewrite: Callable[["Node | None", dict[str, Any]], None] | None = None,
                   ) -> list[tuple["Node | None", ConstraintError]]:
    """Legalize ``graph`` in place; returns (node, error) for what cannot be legalized.

    Without ``collect`` the first error is raised, with the others as notes.
    """
    rw = LegalizeRewriter(graph, ctx, Legalize.name)
    rw.on_rewrite = on_rewrite
    if check_io_tensors(rw):
        check_io_dtypes(rw)
    check_weight_range(rw)
    rewrite_greedily(graph, rules_for(ctx.target), rw)
    check_float_compute(rw)
    reshape_io_to_rank4(rw)
    merge_duplicate_weights(graph)
    remove_dead_nodes(graph)
    check_weight_packing(rw)
    if graph.facts.sram is not None:  # refreshed for the result
        graph.facts.sram = sram_report(graph, ctx.target)
    if rw.rejections and not collect:
        first = rw.rejections[0][1]
        for _, other in rw.rejections[1:]:
            where = f"{other.span.location}: " if other.span is not None else ""
            first.notes.append(f"{where}[{other.constraint}] {other.message}")
        raise first
    return rw.rejections


@dataclass(frozen=True)
class Legalize(Pass):
    """Rewrite what the target's ANE rejects; report what cannot be rewritten.

    Each rewrite keeps the program's meaning (or is recorded as an approximation) and is
    recorded in ``ctx.rewrites`` with its rule, constraint id, node, ``file:line:col`` and
    detail; what cannot be rewritten is a ConstraintError with the constraint id, the
    node's span and a suggestion. The rules (gelu, rsqrt, neg, conv bias, matmul with a
    constant weight, channel concat, wide convs, reduce_mean, split, fp32 and rank != 4
    I/O) and the errors are listed in docs/legalize.md. Identical weight consts are
    merged, dead nodes removed, and the SRAM summary, if present, refreshed for the
    result. Rank-4 and chunked I/O and host casts are recorded in
    ``graph.facts.logical_inputs``, ``logical_outputs`` and ``host_casts``. A func still
    over a per-program budget is cut by the next pass, partition.

    Before: conv bias and gelu (the tanh formula, exact for ``mode="tanh"``).
        func f(%x: fp16[1, 64, 1, 8]) {
          %w = const(weight="w") : fp16[256, 64, 1, 1]
          %b = const(weight="b") : fp16[1, 256, 1, 1]
          %h = conv1x1(%x, %w, bias=%b) : fp16[1, 256, 1, 8]
          %a = gelu(%h, mode="tanh") : fp16[1, 256, 1, 8]
          return %a
        }
    After:
        func f(%x: fp16[1, 64, 1, 8]) {
          %w = const(weight="w") : fp16[256, 64, 1, 1]
          %b = const(weight="b") : fp16[1, 256, 1, 1]
          %h_conv = conv1x1(%x, %w) : fp16[1, 256, 1, 8]
          %h = add(%h_conv, %b) : fp16[1, 256, 1, 8]
          %a_x2 = mul(%h, %h) : fp16[1, 256, 1, 8]
          %a_k0 = const(value=0.044715) : fp16[]
          %a_a = mul(%a_x2, %a_k0) : fp16[1, 256, 1, 8]
          %a_one = const(value=1.0) : fp16[]
          %a_b = add(%a_a, %a_one) : fp16[1, 256, 1, 8]
          %a_inner = mul(%h, %a_b) : fp16[1, 256, 1, 8]
          %a_k1 = const(value=0.7978845608028654) : fp16[]
          %a_s = mul(%a_inner, %a_k1) : fp16[1, 256, 1, 8]
          %a_tanh = tanh(%a_s) : fp16[1, 256, 1, 8]
          %a_u = add(%a_tanh, %a_one) : fp16[1, 256, 1, 8]
          %a_half = const(value=0.5) : fp16[]
          %a_hx = mul(%h, %a_half) : fp16[1, 256, 1, 8]
          %a = mul(%a_hx, %a_u) : fp16[1, 256, 1, 8]
          return %a
        }

    Before: rsqrt and neg.
        func f(%v: fp16[1, 1, 1, 8]) {
          %r = rsqrt(%v) : fp16[1, 1, 1, 8]
          %n = neg(%r) : fp16[1, 1, 1, 8]
          return %n
        }
    After:
        func f(%v: fp16[1, 1, 1, 8]) {
          %r_e = const(value=-0.5) : fp16[]
          %r = pow(%v, %r_e) : fp16[1, 1, 1, 8]
          %n_m1 = const(value=-1.0) : fp16[]
          %n = mul(%r, %n_m1) : fp16[1, 1, 1, 8]
          return %n
        }

    Before: split and an I/O of rank 2 (the device shape ``[1, 8, 1, 64]``, same bytes).
        func f(%u: fp16[1, 768, 1, 8], %t: fp16[8, 64]) {
          %q, %k = split(%u, axis=1, sizes=[384, 384]) : fp16[1, 384, 1, 8], fp16[1, 384, 1, 8]
          %e = exp(%t) : fp16[8, 64]
          return %q, %k, %e
        }
    After:
        func f(%u: fp16[1, 768, 1, 8], %t: fp16[1, 8, 1, 64]) {
          %t_logical = reshape(%t, shape=[8, 64]) : fp16[8, 64]
          %q = slice(%u, begin=[0, 0, 0, 0], end=[1, 384, 1, 8]) : fp16[1, 384, 1, 8]
          %k = slice(%u, begin=[0, 384, 0, 0], end=[1, 768, 1, 8]) : fp16[1, 384, 1, 8]
          %e_logical = exp(%t_logical) : fp16[8, 64]
          %e = reshape(%e_logical, shape=[1, 8, 1, 64]) : fp16[1, 8, 1, 64]
          return %q, %k, %e
        }

    Before: a matmul with a constant 2-D weight becomes a conv (the weight transposed by perm).
        func f(%x: fp16[1, 1, 8, 64]) {
          %w = const(weight="w") : fp16[64, 32]
          %y = matmul(%x, %w) : fp16[1, 1, 8, 32]
          return %y
        }
    After:
        func f(%x: fp16[1, 1, 8, 64]) {
          %y_cw = const(weight="w", perm=[1, 0]) : fp16[32, 64, 1, 1]
          %y_t = transpose(%x, perm=[3, 0, 1, 2]) : fp16[64, 1, 1, 8]
          %y_r = reshape(%y_t, shape=[1, 64, 1, 8]) : fp16[1, 64, 1, 8]
          %y_conv = conv1x1(%y_r, %y_cw) : fp16[1, 32, 1, 8]
          %y_r_0 = reshape(%y_conv, shape=[32, 1, 1, 8]) : fp16[32, 1, 1, 8]
          %y = transpose(%y_r_0, perm=[1, 2, 3, 0]) : fp16[1, 1, 8, 32]
          return %y
        }

    Before: a channel concat feeding a conv becomes partial convs over weight slices.
        func f(%a: fp16[1, 32, 1, 8], %b: fp16[1, 32, 1, 8]) {
          %c = concat(%a, %b, axis=1) : fp16[1, 64, 1, 8]
          %w = const(weight="w") : fp16[16, 64, 1, 1]
          %y = conv1x1(%c, %w) : fp16[1, 16, 1, 8]
          return %y
        }
    After:
        func f(%a: fp16[1, 32, 1, 8], %b: fp16[1, 32, 1, 8]) {
          %y_s = const(weight="w", slice=[1, 0, 32]) : fp16[16, 32, 1, 1]
          %y_part = conv1x1(%a, %y_s) : fp16[1, 16, 1, 8]
          %y_s_0 = const(weight="w", slice=[1, 32, 64]) : fp16[16, 32, 1, 1]
          %y_part_1 = conv1x1(%b, %y_s_0) : fp16[1, 16, 1, 8]
          %y = add(%y_part, %y_part_1) : fp16[1, 16, 1, 8]
          return %y
        }

    Before: fp32 I/O on m1 with host casts: the program takes and returns fp16, and the
    cast pairs fold away.
        // context: target="m1", host_casts=True
        func f(%x: fp32[1, 64, 1, 8]) {
          %xh = cast(%x, dtype=fp16) : fp16[1, 64, 1, 8]
          %r = relu(%xh) : fp16[1, 64, 1, 8]
          %y = cast(%r, dtype=fp32) : fp32[1, 64, 1, 8]
          return %y
        }
    After:
        func f(%x: fp16[1, 64, 1, 8]) {
          %y = relu(%x) : fp16[1, 64, 1, 8]
          return %y
        }

    Before: reduce_mean scales first, then sums (ANE-REDUCE-MEAN).
        func f(%x: fp16[1, 768, 1, 8]) {
          %m = reduce_mean(%x, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          return %m
        }
    After:
        func f(%x: fp16[1, 768, 1, 8]) {
          %m_inv_n = const(value=0.0013020833333333333) : fp16[]
          %m_scaled = mul(%x, %m_inv_n) : fp16[1, 768, 1, 8]
          %m = reduce_sum(%m_scaled, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          return %m
        }

    Unchanged: any concat on a target whose concat reading is native (ANE-CONCAT is contested;
    the emitter writes a MIL concat).
        // target: concat="native"
        func f(%a: fp16[1, 32, 1, 8], %b: fp16[1, 32, 1, 8]) {
          %c = concat(%a, %b, axis=1)
          %r = relu(%c)
          return %r
        }

    Unchanged: a matmul of two activations (no constant operand: it stays a matmul).
        func f(%q: fp16[1, 4, 8, 16], %k: fp16[1, 4, 8, 16]) {
          %s = matmul(%q, %k, transpose_y=true) : fp16[1, 4, 8, 8]
          return %s
        }

    Unchanged: a matmul whose weight has more columns than the target's conv channel limit (a conv
    would be rejected).
        func f(%x: fp16[1, 1, 8, 64]) {
          %w = const(weight="wte") : fp16[64, 50257]
          %y = matmul(%x, %w) : fp16[1, 1, 8, 50257]
          return %y
        }

    Unchanged: reduce_mean on a target that turns ANE-REDUCE-MEAN off.
        // target: reduce_mean_as_sum=False
        func f(%x: fp16[1, 768, 1, 8]) {
          %m = reduce_mean(%x, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          return %m
        }
    """

    name: ClassVar[str] = "legalize"
    tracked: ClassVar[bool] = True

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        legalize_graph(graph, ctx)


__all__ = ["Legalize", "blob_count", "blob_tensors", "device_shape", "legalize_graph", "merge_duplicate_weights",
           "reshape_io_to_rank4", "weight_const"]
