"""select-native: the canonical core-op forms of spatial layers become the ANE's native ops."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from anec.ir.ops import SPATIAL_LIMITS, bilinear_matrix
from anec.passes.base import Pass, PassContext
from anec.passes.dce import remove_dead_nodes
from anec.passes.native_forms import (Window, conv_form, conv_node, conv_term, const_node, fold_terms, limit_problems,
                                     padded_source, producer_of, record_declined, slice_ranges, sliced_source,
                                     window_of)
from anec.passes.rewrite import Rewriter, rewrite_greedily

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node, Value


# ---- rules ----------------------------------------------------------------------------


def _is_fold_root(node: "Node") -> bool:
    """Whether ``node``'s result ends its fold (no user adds another term to it)."""
    v = node.results[0]
    if len(v.uses) == 1:
        u = v.uses[0]
        if u.op == "add" and u.operands[0] is v and conv_term(u.operands[1]) is not None:
            return False
    return True


# sum over kernel positions of conv1x1(slice(pad(x)), slice(W)) -> conv(x, W)      (form 1)
# sum of mul(slice(pad(x)), reshape(slice(W)))                  -> conv(x, W, groups=C) (form 2)
# the same over zero-inserted x with flipped, transposed slices -> conv_transpose(x, W)   (form 3)
def conv_from_positions(node: "Node", rw: Rewriter) -> "Value | None":
    if not _is_fold_root(node):
        return None
    m = conv_form(node.results[0])
    if m is None or const_node(m.weight) is None:
        return None
    if m.kind == "depthwise":
        return conv_node(rw, m, groups=m.weight.type.shape[0])
    return conv_node(rw, m)


# concat(form 1 on group k's channels, ...) {axis=1} -> conv(x, W, groups=g)             (form 2)
# concat(form 3 on group k's channels, ...) {axis=1} -> conv_transpose(x, W, groups=g)   (form 3)
def grouped_conv(node: "Node", rw: Rewriter) -> "Value | None":
    out = node.results[0]
    if out.type.rank != 4 or node.attrs["axis"] % 4 != 1 or len(node.operands) < 2:
        return None
    g = len(node.operands)
    parts = []
    for v in node.operands:
        if len(v.uses) != 1 or v.producer is None:
            return None
        m = conv_form(v)
        if m is None or m.kind == "depthwise" or m.pad != [0, 0, 0, 0]:
            return None
        parts.append(m)
    first = parts[0]
    wk = producer_of(first.weight, "slice")
    src = producer_of(first.x, "slice")
    if wk is None or src is None or const_node(wk.operands[0]) is None:
        return None
    w, xp = wk.operands[0], src.operands[0]
    kh, kw = w.type.shape[2:]
    cin = xp.type.shape[1]
    # a conv weight is [Cout, Cin/g, KH, KW] (groups along dim 0); a transposed conv's is
    # [Cin, Cout/g, KH, KW] (groups along dim 0 as well, by input channel)
    if w.type.shape[0] % g or (first.kind == "conv" and w.type.shape[1] * g != cin) \
            or (first.kind == "transpose" and w.type.shape[0] != cin):
        return None
    rows, cin_g = w.type.shape[0] // g, cin // g
    for k, m in enumerate(parts):
        ws, xs = producer_of(m.weight, "slice"), producer_of(m.x, "slice")
        if m.kind != first.kind or ws is None or xs is None or ws.operands[0] is not w \
                or xs.operands[0] is not xp or m.window != first.window:
            return None
        if slice_ranges(ws) != [range(k * rows, (k + 1) * rows), range(w.type.shape[1]), range(kh), range(kw)]:
            return None
        n, _, hp, wp = xp.type.shape
        if slice_ranges(xs) != [range(n), range(k * cin_g, (k + 1) * cin_g), range(hp), range(wp)]:
            return None
    x, pad = padded_source(xp, 0.0)
    return conv_node(rw, first, groups=g, weight=w, x=x, pad=pad)


def _pool_reads(values: list["Value"]) -> tuple["Value", list[list[range]]] | None:
    reads, source = [], None
    for v in values:
        src, r = sliced_source(v)
        if source is None:
            source = src
        if src is not source:
            return None
        reads.append(r)
    if source is None:  # no values
        return None
    return source, reads


def _square_kernel(count: int, source: "Value", reads: list[list[range]]) -> Window | None:
    """The window of ``count`` positions: try every (kh, kw) with kh * kw == count."""
    for kh in range(1, count + 1):
        if count % kh == 0:
            win = window_of(reads, (kh, count // kh), source)
            if win is not None and win.dilations == (1, 1):
                return win
    return None


def _pool_limits(rw: Rewriter, what: str, win: Window, pad: list[int]) -> bool:
    problems = limit_problems(win.kernel, win.strides, (1, 1), pad)
    if problems:
        record_declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
        return False
    return True


# reduce_max(concat(reshape(slice(pad(x, -inf)))...) {axis=2}) {axes=[2]} -> max_pool(x)   (form 4)
def max_pool_from_windows(node: "Node", rw: Rewriter) -> "Value | None":
    st = node.operands[0]
    cat = producer_of(st, "concat")
    if cat is None or st.type.rank != 5 or [a % 5 for a in node.attrs["axes"]] != [2] \
            or node.attrs.get("keep_dims", False) or cat.attrs["axis"] % 5 != 2 or len(st.uses) != 1:
        return None
    slices = []
    for r in cat.operands:
        rp = producer_of(r, "reshape")
        if rp is None or len(r.uses) != 1 or r.type.shape[2] != 1:
            return None
        slices.append(rp.operands[0])
    got = _pool_reads(slices)
    if got is None:
        return None
    win = _square_kernel(len(slices), *got)
    if win is None:
        return None
    x, pad = padded_source(got[0], -math.inf)
    what = f"max_pool %{node.results[0].name}"
    if not _pool_limits(rw, what, win, pad):
        return None
    y = rw.op("max_pool", x, kernel_sizes=list(win.kernel), strides=list(win.strides), pad=pad, suffix="pool")
    rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} max pool (strides {list(win.strides)}, "
              f"pad {pad}) -> one max_pool")
    return y


def _const_array(rw: Rewriter, v: "Value") -> np.ndarray | None:
    """The value of a const (None when it is not a const or its weight is not available)."""
    c = const_node(v)
    if c is None:
        return None
    from anec.ir.weight_binding import materialize

    try:
        return np.asarray(materialize(c, rw.ctx.weights), dtype=np.float64)
    except Exception:  # noqa: BLE001 - a weight the store lacks: the form cannot be checked
        return None


def _rounded(a: np.ndarray | float, v: "Value") -> np.ndarray:
    return np.asarray(a).astype(v.type.dtype.np).astype(np.float64)


# mul(sum of slice(pad(x, 0)) windows, 1/(KH*KW) or 1/count) -> avg_pool(x)   (form 5)
def avg_pool_from_windows(node: "Node", rw: Rewriter) -> "Value | None":
    for acc, d in (node.operands, node.operands[::-1]):
        if producer_of(acc, "add") is not None and len(acc.uses) == 1:
            break
    else:
        return None
    got = _pool_reads(fold_terms(acc))
    if got is None:
        return None
    source, reads = got
    win = _square_kernel(len(reads), source, reads)
    if win is None:
        return None
    x, pad = padded_source(source, 0.0)
    div = _const_array(rw, d)
    if div is None or acc.type.rank != 4 or node.results[0].type != acc.type:
        return None
    k = win.kernel[0] * win.kernel[1]
    inside = np.ones((1, 1) + x.type.shape[2:])
    inside = np.pad(inside, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    count = sum(inside[:, :, i: i + (win.out[0] - 1) * win.strides[0] + 1: win.strides[0],
                       j: j + (win.out[1] - 1) * win.strides[1] + 1: win.strides[1]]
                for i in range(win.kernel[0]) for j in range(win.kernel[1]))
    try:
        got_div = np.broadcast_to(div, (1, 1) + win.out)
    except ValueError:
        return None
    if np.array_equal(got_div, np.broadcast_to(_rounded(np.float64(1.0 / k), d), got_div.shape)):
        exclude = False
    elif np.array_equal(got_div, _rounded(1.0 / count, d)):
        exclude = True
    else:  # divisor_override, ceil-mode windows counting the padding in part: the window sum
        exclude = None  # (the average times KH*KW) times the form's own divisor
    what = f"avg_pool %{node.results[0].name}"
    if not _pool_limits(rw, what, win, pad):
        return None
    y = rw.op("avg_pool", x, kernel_sizes=list(win.kernel), strides=list(win.strides), pad=pad,
              exclude_padding_from_average=bool(exclude), suffix="pool")
    if exclude is None:
        from anec.ir.types import TensorType

        kk = rw.const_value(float(k), TensorType(y.type.dtype, ()), suffix="kk")
        y = rw.op("mul", rw.op("mul", y, kk, suffix="sum"), d, suffix="div")
        rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} window sum (strides {list(win.strides)}, "
                  f"pad {pad}) -> one avg_pool times {k}, times the divisor")
        return y
    rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} average pool (strides {list(win.strides)}, "
              f"pad {pad}, exclude_padding_from_average={str(exclude).lower()}) -> one avg_pool")
    return y


# reshape(mul(reshape(x, [N,C,H,1,W,1]), ones[1,1,1,sh,1,sw]), [N,C,H*sh,W*sw]) -> upsample_nearest(x)  (form 7)
def upsample_nearest_from_broadcast(node: "Node", rw: Rewriter) -> "Value | None":
    m6 = node.operands[0]
    mul = producer_of(m6, "mul")
    if mul is None or len(m6.uses) != 1 or m6.type.rank != 6 or node.results[0].type.rank != 4:
        return None
    for x6, o6 in (mul.operands, mul.operands[::-1]):
        r = producer_of(x6, "reshape")
        if r is not None and const_node(o6) is not None:
            break
    else:
        return None
    x = r.operands[0]
    if x.type.rank != 4:
        return None
    n, c, h, w = x.type.shape
    sh, sw = m6.type.shape[3], m6.type.shape[5]
    ones = _const_array(rw, o6)
    if list(x6.type.shape) != [n, c, h, 1, w, 1] or list(o6.type.shape) != [1, 1, 1, sh, 1, sw] \
            or ones is None or not np.all(ones == 1.0) \
            or list(node.results[0].type.shape) != [n, c, h * sh, w * sw]:
        return None
    what = f"upsample_nearest %{node.results[0].name}"
    problems = SPATIAL_LIMITS.problems(scales=(sh, sw))
    if problems:
        record_declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
        return None
    y = rw.op("upsample_nearest", x, scales=[sh, sw], suffix="up")
    rw.record(None, f"{what}: nearest x{sh}x{sw} -> one upsample_nearest")
    return y


BILINEAR_ATOL = 2e-3
"""How far a stored interpolation matrix may be from the exact bilinear weights (fp16 storage
rounds weights <= 1 by at most 2**-12; a checkpoint in float32 is closer)."""


# matmul(matmul(A_h, x), A_w) with bilinear weight matrices -> upsample_bilinear(x)   (form 8)
def upsample_bilinear_from_matrices(node: "Node", rw: Rewriter) -> "Value | None":
    t, aw = node.operands
    inner = producer_of(t, "matmul")
    if inner is None or len(t.uses) != 1 or node.attrs.get("transpose_x") or node.attrs.get("transpose_y") \
            or inner.attrs.get("transpose_x") or inner.attrs.get("transpose_y"):
        return None
    ah, x = inner.operands
    if x.type.rank != 4 or ah.type.rank != 2 or aw.type.rank != 2:
        return None
    h, w = x.type.shape[2:]
    ho, wo = ah.type.shape[0], aw.type.shape[1]
    if ah.type.shape[1] != h or aw.type.shape[0] != w or ho < h or wo < w:
        return None
    a_h, a_w = _const_array(rw, ah), _const_array(rw, aw)
    if a_h is None or a_w is None:
        return None
    for align in (False, True):
        if np.allclose(a_h, bilinear_matrix(h, ho, align), rtol=0, atol=BILINEAR_ATOL) and \
                np.allclose(a_w, bilinear_matrix(w, wo, align).T, rtol=0, atol=BILINEAR_ATOL):
            break
    else:
        return None
    what = f"upsample_bilinear %{node.results[0].name}"
    y = rw.op("upsample_bilinear", x, size=[ho, wo], align_corners=align, suffix="up")
    rw.record(None, f"{what}: bilinear {h}x{w} -> {ho}x{wo} (align_corners={str(align).lower()}) "
              "-> one upsample_bilinear")
    return y


SELECT_RULES: dict[str, tuple[Any, ...]] = {
    "add": (conv_from_positions,),
    "conv1x1": (conv_from_positions,),
    "mul": (conv_from_positions, avg_pool_from_windows),
    "concat": (grouped_conv,),
    "reduce_max": (max_pool_from_windows,),
    "reshape": (upsample_nearest_from_broadcast,),
    "matmul": (upsample_bilinear_from_matrices,),
}
"""op of a form's last statement -> the rules that recognize a form ending there."""


@dataclass(frozen=True)
class SelectNative(Pass):
    """Replace the canonical core-op forms of spatial layers with one native target op each.

    The importer writes convolutions, pooling and upsampling in the core IR ops
    (a readable, interpretable model.ir); the ANE runs each as one native MIL
    op. This pass recognizes exactly those canonical forms and writes the
    target-level op (``conv``, ``conv_transpose``, ``max_pool``, ``avg_pool``,
    ``upsample_nearest``, ``upsample_bilinear``: ``anec ops``, "Target
    forms"): a sum over kernel positions of ``conv1x1`` on strided slices of
    the (zero-)padded input becomes ``conv`` with the full weight const; the
    depthwise ``mul`` form and the per-group ``concat`` become ``conv`` with
    ``groups``; zero insertion plus flipped, transposed weight slices becomes
    ``conv_transpose`` (grouped: a concat of that form on each group's channels
    of the zero-inserted, padded input; padded beyond its kernel extent, where
    the importer crops the zero-inserted input: the op crops what the limits
    allow, a ``slice`` the rest); ``reduce_max`` over stacked windows of a ``-inf``
    padded input becomes ``max_pool``; a window sum times ``1/(KH*KW)`` (or
    a const of ``1/count`` per position) becomes ``avg_pool``, times any other
    const divisor (divisor_override, ceil-mode windows counting padding in
    part) ``avg_pool`` times ``KH*KW`` times that divisor; the broadcast
    ``mul`` by ones between two reshapes becomes ``upsample_nearest``; two
    matmuls by constant matrices equal to bilinear weights become
    ``upsample_bilinear``. A bias stays the separate ``add`` after the conv
    (ANE-CONV-BIAS). A patch embedding (kernel == stride, no padding or
    dilation, batch 1) beyond the target forms' limits (ViT-B/16's stride 16)
    becomes its patches gathered into Cin*KH*KW channels (reshape, transpose,
    reshape) and one ``conv1x1`` (recorded). Anything else is left alone, and
    so is any other form beyond the target forms' limits (ANE-SPATIAL-LIMITS,
    ANE-CONV-CHANNELS: recorded), a form whose weights are not constants (a
    conv reads a constant weight), and bilinear matrices that differ from the
    bilinear weights of an output size. Checking divisors and matrices needs
    the weights.

    Before:
        func f(%x: fp16[1, 2, 4, 4]) {
          %w = const(weight="c.weight") : fp16[3, 2, 1, 2]
          %xp = pad(%x, before=[0, 0, 0, 1], after=[0, 0, 0, 0], value=0.0) : fp16[1, 2, 4, 5]
          %xs0 = slice(%xp, begin=[0, 0, 0, 0], end=[1, 2, 4, 4], stride=[1, 1, 1, 1]) : fp16[1, 2, 4, 4]
          %ws0 = slice(%w, begin=[0, 0, 0, 0], end=[3, 2, 1, 1]) : fp16[3, 2, 1, 1]
          %t0 = conv1x1(%xs0, %ws0) : fp16[1, 3, 4, 4]
          %xs1 = slice(%xp, begin=[0, 0, 0, 1], end=[1, 2, 4, 5], stride=[1, 1, 1, 1]) : fp16[1, 2, 4, 4]
          %ws1 = slice(%w, begin=[0, 0, 0, 1], end=[3, 2, 1, 2]) : fp16[3, 2, 1, 1]
          %t1 = conv1x1(%xs1, %ws1) : fp16[1, 3, 4, 4]
          %y = add(%t0, %t1) : fp16[1, 3, 4, 4]
          return %y
        }
    After:
        func f(%x: fp16[1, 2, 4, 4]) {
          %w = const(weight="c.weight") : fp16[3, 2, 1, 2]
          %y = conv(%x, %w, strides=[1, 1], pad=[0, 0, 1, 0], dilations=[1, 1], groups=1) : fp16[1, 3, 4, 4]
          return %y
        }

    Unchanged: a 1x1 conv without stride or padding is already native (conv1x1).
        func f(%x: fp16[1, 2, 4, 4]) {
          %w = const(weight="c.weight") : fp16[3, 2, 1, 1]
          %y = conv1x1(%x, %w) : fp16[1, 3, 4, 4]
          return %y
        }
    """

    name: ClassVar[str] = "select-native"
    tracked: ClassVar[bool] = True  # edits only through the Rewriter and remove_dead_nodes

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        rw = Rewriter(graph, ctx, self.name)
        if rewrite_greedily(graph, SELECT_RULES, rw):
            remove_dead_nodes(graph)
