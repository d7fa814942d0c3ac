"""The per-op rewrite rules of legalize, as data (op -> rules).

The rules for the ops (and optional operands) the ANE does not take come
from the op table: each :class:`~anec.ir.ops.NotOnAne` row names its rules
here, by function name. The other rules adapt ops the ANE runs to the
target's limits (:data:`DEVICE_RULES`) or to claims a target switches on
(:data:`SWITCHED_RULES`).

Every rule has the shape ``rule(node, rw) -> Value | HANDLED | None`` (see
:mod:`anec.passes.rewrite`) and a one-line law above it. Rules that cannot
legalize a node call ``rw.reject(...)`` (a ConstraintError with the
constraint id, the node's span and a suggestion) and return None.
Each rewrite is recorded with ``rw.record(constraint, detail)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, cast

from anec.diagnostics import ConstraintError, Span
from anec.ir.ops import BINARY, ELEMENTWISE, GELU_TANH_C, OPS, SPATIAL_LIMITS, Mil, NotOnAne
from anec.passes.layout import (can_slice, permute, reshape, slice_weight, transpose_weight_2d,
                                weight_const)
from anec.passes.rewrite import HANDLED, Rewriter

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node, Value
    from anec.passes.base import PassContext
    from anec.targets import Target

GELU_TANH_MAX_ABS_ERROR = 4.74e-4
"""max |gelu_erf(x) - gelu_tanh(x)| over the reals (at |x| ~ 2.7; tests recompute it)."""


LegalizeRule = Callable[["Node", "LegalizeRewriter"], Any]
"""A legalize rule: rules for any Rewriter, and those that reject through LegalizeRewriter."""


class LegalizeRewriter(Rewriter):
    """A Rewriter that also collects rejections (errors) for the nodes it cannot fix."""

    def __init__(self, graph: Graph, ctx: PassContext, pass_name: str) -> None:
        super().__init__(graph, ctx, pass_name)
        self.target: "Target" = ctx.target
        self.rejections: list[tuple["Node | None", ConstraintError]] = []
        self._rejected: set[int] = set()  # ids of the nodes rejected: settled, no rule touches them again

    def settled(self, node: "Node") -> bool:
        return id(node) in self._rejected

    def reject(self, constraint: str, message: str, hint: str, node: "Node | None" = None,
               span: Span | None = None) -> None:
        """Record that ``node`` cannot be made ANE-legal. A rejected node is settled, so no rule
        rejects it twice; the func-level checks may add other reasons (a node whose two
        results are both illegal outputs gets two errors)."""
        if node is not None:
            self._rejected.add(id(node))
        err = ConstraintError(message, span=span or (node.span if node is not None else None)
                              or self.graph.span, hint=hint, constraint=constraint)
        self.rejections.append((node, err))
        return None


# ---- helpers ------------------------------------------------------------------------


def _name(v: "Value") -> str:
    return f"%{v.name}"


def _sum(rw: Rewriter, values: list["Value"]) -> "Value":
    acc = values[0]
    for v in values[1:]:
        acc = rw.op("add", acc, v, suffix="sum")
    return acc


def _even_bounds(total: int, limit: int) -> list[tuple[int, int]]:
    n = -(-total // limit)
    size = -(-total // n)
    return [(i, min(total, i + size)) for i in range(0, total, size)]


def partial_convs(rw: Rewriter, conv: "Node", pieces: list[tuple["Value", int, int]]) -> "Value":
    """``sum_i conv1x1(piece_i, W[:, c0_i:c1_i])`` plus the conv's bias once.

    The caller checks ``can_slice(weight, 1)`` first.
    """
    wnode = cast("Node", weight_const(conv.operands[1]))  # checked by the caller
    partials = []
    for x, c0, c1 in pieces:
        w = slice_weight(wnode, 1, c0, c1, rw)
        partials.append(rw.op("conv1x1", x, w, suffix="part"))
    total = _sum(rw, partials)
    if "bias" in conv.optional:
        total = rw.op("add", total, conv.optional["bias"], suffix="bias")
    return total


# ---- elementwise ops the ANE lacks --------------------------------------------------


# gelu(x) -> 0.5 * x * (1 + tanh(sqrt(2/pi) * x * (1 + 0.044715 * x^2)))   (exact for mode="tanh")
def expand_gelu_tanh(node: "Node", rw: Rewriter) -> "Value":
    x = node.operands[0]
    dt = x.type.dtype
    x2 = rw.op("mul", x, x, suffix="x2")
    a = rw.op("mul", x2, rw.scalar(0.044715, dt, "k0"), suffix="a")
    one = rw.scalar(1.0, dt, "one")
    b = rw.op("add", a, one, suffix="b")
    inner = rw.op("mul", x, b, suffix="inner")
    s = rw.op("mul", inner, rw.scalar(GELU_TANH_C, dt, "k1"), suffix="s")
    t = rw.op("tanh", s, suffix="tanh")
    u = rw.op("add", t, one, suffix="u")
    hx = rw.op("mul", x, rw.scalar(0.5, dt, "half"), suffix="hx")
    y = rw.op("mul", hx, u, suffix="gelu")
    mode = node.attrs.get("mode", "exact")
    if mode == "tanh":
        detail = "gelu(mode=tanh) -> its tanh formula (exact)"
    else:
        detail = (f"gelu(mode=exact) -> tanh approximation (approximation: max abs error "
                  f"{GELU_TANH_MAX_ABS_ERROR:.2e} vs erf GELU)")
    rw.record("ANE-GELU", detail)
    return y


# rsqrt(x) -> pow(x, -0.5)
def rsqrt_to_pow(node: "Node", rw: Rewriter) -> "Value":
    x = node.operands[0]
    y = rw.op("pow", x, rw.scalar(-0.5, x.type.dtype, "e"), suffix="pow")
    rw.record("ANE-RSQRT", "rsqrt(x) -> pow(x, -0.5)")
    return y


# neg(x) -> mul(x, -1)
def neg_to_mul(node: "Node", rw: Rewriter) -> "Value":
    x = node.operands[0]
    y = rw.op("mul", x, rw.scalar(-1.0, x.type.dtype, "m1"), suffix="mul")
    rw.record("ANE-NEG", "neg(x) -> mul(x, -1)")
    return y


# reduce_mean(x, axes) -> reduce_sum(x * (1/N), axes)   (scale first: the sum cannot overflow)
def lower_reduce_mean(node: "Node", rw: LegalizeRewriter) -> "Value | None":
    x = node.operands[0]
    if not x.type.dtype.is_float:
        rw.reject(
            "ANE-REDUCE-MEAN", f"reduce_mean of {x.type.dtype} {_name(x)} cannot be lowered to "
            "reduce_sum exactly on this target", "cast the operand to fp16 first", node)
        return None
    axes = [a % x.type.rank for a in node.attrs["axes"]]
    count = math.prod(x.type.shape[a] for a in axes)
    scaled = rw.op("mul", x, rw.scalar(1.0 / count, x.type.dtype, "inv_n"), suffix="scaled")
    attrs = {k: v for k, v in node.attrs.items() if k in ("axes", "keep_dims")}
    y = rw.op("reduce_sum", scaled, suffix="sum", **attrs)
    rw.record("ANE-REDUCE-MEAN", f"reduce_mean over {count} elements -> reduce_sum(x * 1/{count})")
    return y


# softmax over an axis of size n: legal iff n is a power of two   (reported claim, switchable)
def check_softmax_axis(node: "Node", rw: LegalizeRewriter) -> None:
    x = node.operands[0]
    axis = node.attrs.get("axis", -1) % x.type.rank
    n = x.type.shape[axis]
    if n & (n - 1) == 0:
        return None
    pow2 = 1 << (n - 1).bit_length()
    return rw.reject(
        "ANE-SOFTMAX-POW2", f"softmax over axis {axis} of size {n} (not a power of two) is "
        f"rejected on {rw.target.name}",
        f"pad axis {axis} to {pow2} with pad(value=-1e4) so the extra entries get ~0 weight, "
        "then slice the result back", node)


# ---- conv ------------------------------------------------------------------------------


# conv1x1(x, w) with w computed or a func input (not a weight const) ->
#   transpose(matmul(transpose(x, [0,2,3,1]), reshape(w, [1,1,Cout,Cin]), transpose_y), [0,3,1,2])
def conv_dynamic_weight_to_matmul(node: "Node", rw: Rewriter) -> "Value | None":
    x, w = node.operands
    if weight_const(w) is not None or (w.producer is not None and w.producer.op == "const"):
        return None
    cout, cin = w.type.shape[0], w.type.shape[1]
    xt = permute(rw, x, [0, 2, 3, 1])                        # [N, H, W, Cin]
    w2 = reshape(rw, w, [1, 1, cout, cin])
    y = rw.op("matmul", xt, w2, transpose_x=False, transpose_y=True, suffix="mm")  # [N, H, W, Cout]
    out = permute(rw, y, [0, 3, 1, 2])                       # [N, Cout, H, W]
    if "bias" in node.optional:
        out = rw.op("add", out, node.optional["bias"], suffix="bias")
    rw.record("ANE-CONV-CONST-WEIGHT", f"conv1x1 with the non-constant weight {_name(w)} -> matmul "
              f"(weight [{cout}, {cin}] as the transposed right operand)")
    return out


# conv1x1(x, w, bias=b) -> add(conv1x1(x, w), b)
def split_conv_bias(node: "Node", rw: Rewriter) -> "Value | None":
    if "bias" not in node.optional:
        return None
    x, w = node.operands
    conv = rw.op("conv1x1", x, w, suffix="conv")
    y = rw.op("add", conv, node.optional["bias"], suffix="bias")
    rw.record("ANE-CONV-BIAS", f"conv1x1 bias={_name(node.optional['bias'])} -> conv1x1 + add")
    return y


_CHAIN_OPS = ELEMENTWISE - BINARY  # one operand: the unary ops and cast


def _chain_to_output(v: "Value", rw: Rewriter) -> list["Node"] | None:
    """The unary ops leading from ``v`` to a returned value (and nothing else), or None."""
    outputs = {id(o) for o in rw.graph.outputs}
    chain: list["Node"] = []
    while id(v) not in outputs:
        if len(v.uses) != 1:
            return None
        user = v.uses[0]
        if user.op not in _CHAIN_OPS or user.operands[0] is not v:
            return None
        chain.append(user)
        v = user.results[0]
    return chain if not v.uses else None


def _chunkable(node: "Node", rw: Rewriter) -> list["Node"] | None:
    """The unary chain to the output when ``node``'s weights (and bias) can be chunked."""
    chain = _chain_to_output(node.result, rw)
    if chain is None or not can_slice(weight_const(node.operands[1]), 0, rw):
        return None
    if "bias" in node.optional and not can_slice(weight_const(node.optional["bias"]), 1, rw):
        return None
    return chain


# conv1x1 with Cout > limit, returned (through unary ops) -> chunked convs, outputs name__c0..
def chunk_wide_conv_output(node: "Node", rw: Rewriter) -> Any:
    cout, limit = node.result.type.shape[1], rw.ctx.target.max_conv_out_channels
    if cout <= limit:
        return None
    chain = _chunkable(node, rw)
    if chain is None:
        return None
    x, wnode = node.operands[0], cast("Node", weight_const(node.operands[1]))  # checked by _chunkable
    bnode = weight_const(node.optional["bias"]) if "bias" in node.optional else None
    final = chain[-1].results[0] if chain else node.result
    logical = final.name
    pieces = []
    for i, (o0, o1) in enumerate(_even_bounds(cout, limit)):
        w = slice_weight(wnode, 0, o0, o1, rw)
        opt = {"bias": slice_weight(bnode, 1, o0, o1, rw)} if bnode is not None else None
        # every clone is named <original name>__c<i>; the last one is the output piece
        v = rw.op("conv1x1", x, w, optional=opt,
                  name=rw.graph.fresh_name(f"{node.result.name}__c{i}"))
        for u in chain:
            v = rw.op(u.op, v, name=rw.graph.fresh_name(f"{u.results[0].name}__c{i}"), **u.attrs)
        pieces.append(v)
    rw.graph.replace_output(final, pieces)
    for u in reversed(chain):
        rw.graph.erase_node(u)
    rw.graph.facts.logical_outputs.append({
        "name": logical, "axis": 1, "pieces": [p.name for p in pieces],
        "dtype": str(final.type.dtype), "shape": list(final.type.shape),
    })
    rw.record("ANE-CONV-CHANNELS",
              f"conv1x1 with {cout} output channels (limit {limit}) -> {len(pieces)} chunked "
              f"convs; output %{logical} returned as "
              f"{', '.join('%' + p.name for p in pieces)} (axis 1)")
    return HANDLED


# conv1x1 with Cout > limit whose result is used inside the program: an error
def reject_wide_conv_output(node: "Node", rw: LegalizeRewriter) -> None:
    cout, limit = node.result.type.shape[1], rw.target.max_conv_out_channels
    if cout <= limit:
        return None
    why = ("its result is used inside the program" if _chain_to_output(node.result, rw) is None
           else "its weight or bias cannot be sliced along the output channels")
    return rw.reject(
        "ANE-CONV-CHANNELS",
        f"conv1x1 {_name(node.result)} has {cout} output channels; {rw.target.name} allows "
        f"{limit}, and anec cannot chunk it because {why}",
        f"return the conv result as its own output (anec then splits it into outputs "
        f"{node.result.name}__c0, ...), or split the weight into convs of at most {limit} "
        "output channels", node)


# conv1x1(x, W) with Cin > limit -> sum_i conv1x1(slice(x, channels i), W[:, i])
def split_wide_conv_input(node: "Node", rw: LegalizeRewriter) -> "Value | None":
    x = node.operands[0]
    cin, limit = x.type.shape[1], rw.target.max_conv_out_channels
    if cin <= limit:
        return None
    if not can_slice(weight_const(node.operands[1]), 1, rw):
        rw.reject(
            "ANE-CONV-CHANNELS", f"conv1x1 {_name(node.result)} has {cin} input channels; "
            f"{rw.target.name} allows {limit} and its weight cannot be sliced",
            "use a weight const (optionally with perm) so anec can split the input channels",
            node)
        return None
    pieces = []
    n, _, h, wd = x.type.shape
    for c0, c1 in _even_bounds(cin, limit):
        xs = rw.op("slice", x, begin=[0, c0, 0, 0], end=[n, c1, h, wd], suffix="in")
        pieces.append((xs, c0, c1))
    y = partial_convs(rw, node, pieces)
    rw.record("ANE-CONV-CHANNELS", f"conv1x1 with {cin} input channels (limit {limit}) -> "
              f"sum of {len(pieces)} convs over input channel slices")
    return y


# ---- matmul ----------------------------------------------------------------------------


# matmul(x, W) / matmul(W, x) with W a constant 2-D weight -> conv1x1 (~3x faster on the ANE)
def matmul_const_to_conv(node: "Node", rw: Rewriter) -> "Value | None":
    x, y = node.operands
    tx, ty = bool(node.attrs.get("transpose_x", False)), bool(node.attrs.get("transpose_y", False))
    limit = rw.ctx.target.max_conv_out_channels
    if not x.type.dtype.is_float:
        return None
    wy, wx = weight_const(y), weight_const(x)
    if wy is not None and y.type.rank == 2 and wx is None:
        k, n = y.type.shape[::-1] if ty else y.type.shape
        act, contract, cout, swap = x, x.type.rank - (2 if tx else 1), n, not ty
        wnode, out_axis_last = wy, True
    elif wx is not None and x.type.rank == 2 and wy is None:
        m, k = x.type.shape[::-1] if tx else x.type.shape
        act, contract, cout, swap = y, y.type.rank - (1 if ty else 2), m, tx
        wnode, out_axis_last = wx, False
    else:
        return None
    if cout > limit or k > limit:
        return None
    w = transpose_weight_2d(wnode, swap, (cout, k, 1, 1), rw)
    if w is None:
        return None
    r = act.type.rank
    rest = [a for a in range(r) if a != contract]
    rest_dims = [act.type.shape[a] for a in rest]
    s = math.prod(rest_dims)
    moved = permute(rw, act, [contract] + rest)
    x4 = reshape(rw, moved, [1, k, 1, s])
    conv = rw.op("conv1x1", x4, w, suffix="conv")
    back = reshape(rw, conv, [cout] + rest_dims)
    if out_axis_last:
        perm = list(range(1, r)) + [0]
    else:
        perm = list(range(1, r - 1)) + [0, r - 1]
    out = permute(rw, back, perm)
    side = "right" if out_axis_last else "left"
    layout = "transposed via perm" if swap else "as stored"
    rw.record("ANE-CONV-FASTER",
              f"matmul with constant {side} operand '{wnode.attrs['weight']}' -> conv1x1 "
              f"(weight [{cout}, {k}, 1, 1] {layout})")
    return out


# ---- split ----------------------------------------------------------------------------


# %a, %b = split(x, axis, sizes=[n, m]) -> %a = slice(x, [.., 0, ..], [.., n, ..]),
#                                          %b = slice(x, [.., n, ..], [.., n + m, ..])
def split_to_slices(node: "Node", rw: Rewriter) -> Any:
    x = node.operands[0]
    axis = node.attrs["axis"] % x.type.rank
    g, outputs = rw.graph, {id(o) for o in rw.graph.outputs}
    first = node.results[0].name
    slices, start = [], 0
    for r, size in zip(node.results, node.attrs["sizes"]):
        if r.uses or id(r) in outputs:  # a result nobody reads needs no slice
            begin, end = [0] * x.type.rank, list(x.type.shape)
            begin[axis], end[axis] = start, start + size
            s = rw.op("slice", x, begin=begin, end=end, name=g.fresh_name(f"{r.name}_slice"))
            slices.append((r.name, s))
            g.replace_all_uses(r, s)  # a returned result's name moves to its slice
        start += size
    g.erase_node(node)
    for name, s in slices:  # the slices take the names of the results they replace
        if s.name != name and not g.has_value_name(name):
            g.rename_value(s, name)
    rw.record("ANE-SPLIT", f"split into {len(node.results)} along axis {axis} -> "
              f"{len(slices)} slice{'s' if len(slices) != 1 else ''} "
              f"({', '.join('%' + s.name for _, s in slices)})", name=first)
    return HANDLED


# ---- concat ----------------------------------------------------------------------------


# conv1x1(concat(a, b, axis=1), W) -> conv1x1(a, W[:, :ca]) + conv1x1(b, W[:, ca:])
def split_concat_into_partial_convs(node: "Node", rw: Rewriter) -> Any:
    out = node.result
    rank = out.type.rank
    axis = node.attrs["axis"] % rank
    outputs = {id(o) for o in rw.graph.outputs}
    if rank != 4 or axis != 1 or id(out) in outputs or not out.uses:
        return None
    for u in out.uses:
        if u.op != "conv1x1" or u.operands[0] is not out or u.operands[1] is out \
                or u.optional.get("bias") is out:
            return None
        if not can_slice(weight_const(u.operands[1]), 1, rw):
            return None
    pieces, c = [], 0
    for v in node.operands:
        pieces.append((v, c, c + v.type.shape[1]))
        c += v.type.shape[1]
    plans = []
    for u in list(dict.fromkeys(out.uses)):
        rw.anchor = u  # the partial convs go before (and take the span of) the conv they replace
        plans.append((u, partial_convs(rw, u, pieces)))
    rw.anchor = node
    convs = ", ".join(_name(u.result) for u, _ in plans)
    rw.record("ANE-CONCAT", f"channel concat of {len(pieces)} tensors feeding {convs} removed: "
              "each conv reads the pieces directly")
    for u, total in plans:
        key = cast("Node", weight_const(u.operands[1])).attrs["weight"]  # checked above
        rw.record("ANE-CONCAT", f"conv1x1 over concat {_name(out)} -> sum of {len(pieces)} "
                  f"partial convs over slices of weight '{key}'", node=u)
        rw.replace(u.result, total)
    return HANDLED


NATIVE_CONCAT_HINT = ("where python -m anec.selftest found concat accepted on your Mac, anec compile keeps it "
                      "(--concat verdict, the default, for that Mac's target; or --concat native)")
"""The end of every concat error's hint: ANE-CONCAT is contested, and the native reading keeps it."""


# any other concat: an error (the conservative reading of ANE-CONCAT: the ANE compiler rejects concat)
def reject_concat(node: "Node", rw: LegalizeRewriter) -> None:
    out = node.result
    axis = node.attrs["axis"] % out.type.rank
    if id(out) in {id(o) for o in rw.graph.outputs}:
        why = "it is returned"
        hint = ("return the pieces as separate outputs (a multi-output program) and join them "
                "on the host")
    elif axis != 1 or out.type.rank != 4:
        why = f"it joins along axis {axis}"
        hint = ("keep the pieces separate and apply the consumer to each piece, or return them "
                "as separate outputs and join on the host")
    elif any(u.operands[1] is out or u.optional.get("bias") is out for u in out.uses if u.op == "conv1x1"):
        why = "a conv1x1 reads it as its weight or bias (only a conv's input can absorb a channel concat)"
        hint = ("give the conv its weight and bias as consts, or add the pieces to the conv's output "
                "with separate adds")
    elif all(u.op == "conv1x1" and u.operands[0] is out for u in out.uses):
        why = "the weight of a conv1x1 it feeds cannot be sliced along the input channels"
        hint = ("give that conv a weight const (const(weight=...), optionally with perm) so "
                "anec can split it into partial convs")
    else:
        users = sorted({u.op for u in out.uses})
        why = f"it feeds {', '.join(users)} (only conv1x1 weights can absorb a channel concat)"
        hint = ("feed the concat only into conv1x1 ops (anec turns those into sums of partial "
                "convs), or return the pieces separately")
    return rw.reject("ANE-CONCAT", f"concat {_name(out)} cannot be removed: {why}", f"{hint}; {NATIVE_CONCAT_HINT}",
                     node)


# ---- target forms (written by select-native) -------------------------------------------


# a target form beyond the spatial limits, with a weight that is not a const, or wider than the
# channel limit: an error at the node (select-native keeps such layers in their core-op form, so
# only a compiled program's IR read back or a hand-made pipeline reaches this)
def check_target_form(node: "Node", rw: LegalizeRewriter) -> None:
    a, x = node.attrs, node.operands[0]
    what = f"{node.op} {_name(node.result)}"
    if node.op in ("conv", "conv_transpose"):
        w = node.operands[1]
        kernel = list(w.type.shape[2:])
        problems = SPATIAL_LIMITS.problems(kernel=kernel, strides=a.get("strides", [1, 1]),
                                           dilations=a.get("dilations", [1, 1]), pad=a.get("pad", [0] * 4))
        if w.producer is None or w.producer.op != "const":
            return rw.reject("ANE-CONV-CONST-WEIGHT", f"{what} reads the weight {_name(w)}, which is not a "
                             "constant", "keep the layer in its core-op form (conv1x1 over slices), which "
                             "legalize turns into matmuls for a non-constant weight", node)
        channels = max(x.type.shape[1], node.result.type.shape[1])
        if channels > rw.target.max_conv_out_channels:
            return rw.reject("ANE-CONV-CHANNELS", f"{what} has {channels} channels; {rw.target.name} allows "
                             f"{rw.target.max_conv_out_channels}", "keep the layer in its core-op form, "
                             "whose conv1x1s legalize splits", node)
    elif node.op in ("max_pool", "avg_pool"):
        problems = SPATIAL_LIMITS.problems(kernel=a["kernel_sizes"], strides=a.get("strides", [1, 1]),
                                           pad=a.get("pad", [0] * 4))
    elif node.op == "upsample_nearest":
        problems = SPATIAL_LIMITS.problems(scales=a["scales"])
    else:  # upsample_bilinear: the MIL scale factor is size / input size
        scales = [-(-o // i) for o, i in zip(a["size"], x.type.shape[2:])]
        problems = SPATIAL_LIMITS.problems(scales=scales)
    if not problems:
        return None
    return rw.reject("ANE-SPATIAL-LIMITS", f"{what}: {'; '.join(problems)} (the limits of {node.op} on the "
                     "ANE are a hypothesis: python -m anec.selftest settles them)",
                     "keep the layer in its core-op form (select-native leaves it so), or split it "
                     "into smaller windows", node)


DEVICE_RULES: dict[str, tuple[LegalizeRule, ...]] = {
    "matmul": (matmul_const_to_conv,),
    "conv1x1": (conv_dynamic_weight_to_matmul, chunk_wide_conv_output, reject_wide_conv_output,
                split_wide_conv_input),
    **{op: (check_target_form,) for op in ("conv", "conv_transpose", "max_pool", "avg_pool",
                                            "upsample_nearest", "upsample_bilinear")},
}
"""op -> rules for ops the ANE runs, adapted to the target's limits (tried before
the rules that remove what the ANE does not take)."""

SWITCHED_RULES: dict[str, dict[str, tuple[LegalizeRule, ...]]] = {
    "reduce_mean_as_sum": {"reduce_mean": (lower_reduce_mean,)},
    "softmax_pow2_only": {"softmax": (check_softmax_axis,)},
}
"""Target switch -> op -> rules that join when the target turns the switch on."""

RULES_BY_NAME: dict[str, Any] = {
    f.__name__: f for f in (
        expand_gelu_tanh, rsqrt_to_pow, neg_to_mul, split_conv_bias, split_to_slices,
        split_concat_into_partial_convs, reject_concat,
    )
}
"""The rules the op table names (:attr:`anec.ir.ops.NotOnAne.rules`)."""


def not_on_ane_rules(lowering: "Mil | NotOnAne | None") -> tuple[LegalizeRule, ...]:
    """The rules that remove what a row's lowering says the ANE does not take."""
    if isinstance(lowering, NotOnAne):
        rejections = [lowering]
    elif isinstance(lowering, Mil):
        rejections = list(lowering.rejected.values())
    else:
        return ()
    rules = []
    for rej in rejections:
        for name in rej.rules:
            if name not in RULES_BY_NAME:
                raise KeyError(f"the op table names legalize rule '{name}' ({rej.constraint}), "
                               "which anec/passes/legalize_rules.py does not define")
            rules.append(RULES_BY_NAME[name])
    return tuple(rules)


def rules_for(target: "Target") -> dict[str, tuple[LegalizeRule, ...]]:
    """The rule table for ``target``: device rules, the op table's rules (except for a
    contested op the target keeps, :meth:`~anec.ir.ops.NotOnAne.kept_on`), and the switched
    rules the target enables, each op's tried in that order."""
    rules = dict(DEVICE_RULES)
    for name, opdef in OPS.items():
        low = opdef.lowering
        if isinstance(low, NotOnAne) and low.kept_on(target):
            continue  # a contested rejection the target's reading keeps as MIL (ANE-CONCAT: concat=native)
        extra = not_on_ane_rules(low)
        if extra:
            rules[name] = rules.get(name, ()) + extra
    for switch, more in SWITCHED_RULES.items():
        if getattr(target, switch):
            for op, fns in more.items():
                rules[op] = rules.get(op, ()) + fns
    return rules
