"""ATen lowerings of pooling, upsampling and padding modes.

Each layer becomes one canonical form (:mod:`anec.frontends.aten.spatial`):
max pooling a ``reduce_max`` fold of the kernel positions' slices, average
pooling their sum times a divisor map computed at import (global average
pooling a ``reduce_mean``), nearest upsampling a ``reshape``/``add`` of zeros
broadcast, bilinear upsampling two ``matmul`` s by interpolation matrices, and
the reflect, replicate and circular padding modes slices of the input joined by
``concat``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.reductions import reduce_over
from anec.frontends.aten.shapes import lower_pad
from anec.frontends.aten.spatial import (SPATIAL_GROUP, Window, add_fold, as_nchw, conv_window, form_op, from_nchw,
                                         layer_path, pad_form, pool_window, size_arg, slice_at)
from anec.frontends.aten.table import Family
from anec.frontends.aten.values import FP16, Args, Deferred, Lowered, Operand
from anec.frontends.tensor_views import View, materialize, natural, reshape_view
from anec.ir.nodes import Value
from anec.ir.types import TensorType

POOLING = Family(SPATIAL_GROUP)


def _pool_input(lw: Lowering, x: Operand, what: str) -> tuple[Value, tuple[int, ...]]:
    """An [N, C, H, W] value for a 2-d pool (an unbatched [C, H, W] gets N = 1)."""
    v = lw.view(x)
    if len(v.shape) == 3:
        return lw.em.reshape(materialize(lw.em, v), (1,) + v.shape), v.shape
    return as_nchw(lw, v, 2, what), v.shape


def _pool_result(lw: Lowering, y: Value, shape: tuple[int, ...]) -> View:
    if len(shape) == 3:
        return reshape_view(lw.em, natural(y), y.type.shape[1:])
    return natural(y)


@POOLING.op("max_pool2d_with_indices.default",
      ir="pad with -inf, one strided slice per kernel position, reshaped to [N, C, 1, Ho, Wo], "
         "concat on axis 2, reduce_max (values only; MaxPool1d through its 2-d form)")
def lower_max_pool(lw: Lowering, a: Args) -> Lowered:
    x4, shape = _pool_input(lw, a["self"], "max pooling")
    kernel = size_arg(a["kernel_size"], 2)
    stride = size_arg(a.get("stride"), 2, kernel)
    padding = size_arg(a.get("padding", 0), 2)
    dilation = size_arg(a.get("dilation", 1), 2)
    n, c, h, w = x4.type.shape
    g = pool_window(lw, h, w, kernel, stride, dilation, padding, bool(a.get("ceil_mode", False)))
    xp = pad_form(lw, x4, g, float("-inf"))
    if g.kh * g.kw == 1:
        y = slice_at(lw, xp, g, 0, 0)
    else:
        rs = []
        for i, j in g.positions():
            xs = slice_at(lw, xp, g, i, j)
            rs.append(form_op(lw, "reshape", xs, shape=[n, c, 1, g.ho, g.wo], suffix=f"r{i}_{j}"))
        st = form_op(lw, "concat", *rs, axis=2, suffix="st")
        y = form_op(lw, "reduce_max", st, axes=[2], keep_dims=False)
    node = lw.node

    def indices() -> Lowered:
        raise lw.fail("the indices of max pooling are used (MaxUnpool, return_indices=True)",
                      "anec computes the pooled values only: use return_indices=False")

    return (_pool_result(lw, y, shape), Deferred(indices, node))


def _avg_divisor(g: Window, h: int, w: int, pad_h: int, pad_w: int, count_include_pad: bool) -> np.ndarray:
    """1 / (torch's divisor) per output position [Ho, Wo] (``pad_*``: the layer's own padding)."""
    def counts(n_out: int, k: int, s: int, p: int, size: int) -> np.ndarray:
        out = []
        for o in range(n_out):
            start = o * s - p
            end = min(start + k, size + p)
            full = end - start
            inside = min(end, size) - max(start, 0)
            out.append(full if count_include_pad else inside)
        return np.asarray(out, dtype=np.float64)

    ch = counts(g.ho, g.kh, g.sh, pad_h, h)
    cw = counts(g.wo, g.kw, g.sw, pad_w, w)
    return 1.0 / np.outer(ch, cw)


def _avg_pool(lw: Lowering, x4: Value, g: Window, pad_h: int, pad_w: int, count_include_pad: bool,
              divisor_override: int | None) -> Value:
    n, c, h, w = x4.type.shape
    xp = pad_form(lw, x4, g, 0.0)
    acc = add_fold(lw, [slice_at(lw, xp, g, i, j) for i, j in g.positions()])
    if divisor_override:
        inv = np.full((g.ho, g.wo), 1.0 / float(divisor_override))
    else:
        inv = _avg_divisor(g, h, w, pad_h, pad_w, count_include_pad)
    if np.all(inv == inv.flat[0]):
        d = lw.em.const({"value": float(inv.flat[0])}, TensorType(FP16, ()), suffix="d", cse=False)
    else:
        d = lw.derived_weight(inv.reshape(1, 1, g.ho, g.wo), f"{layer_path(lw)}.avg_pool_divisor")
    return form_op(lw, "mul", acc, d)


@POOLING.op("avg_pool2d.default",
      ir="pad with 0, one strided slice per kernel position, summed, times 1/divisor (a scalar, "
         "or a [1, 1, Ho, Wo] map where windows cover padding or run past the input); "
         "AvgPool1d through its 2-d form")
def lower_avg_pool(lw: Lowering, a: Args) -> Lowered:
    x4, shape = _pool_input(lw, a["self"], "average pooling")
    kernel = size_arg(a["kernel_size"], 2)
    stride = size_arg(a.get("stride"), 2, kernel)
    padding = size_arg(a.get("padding", 0), 2)
    n, c, h, w = x4.type.shape
    g = pool_window(lw, h, w, kernel, stride, [1, 1], padding, bool(a.get("ceil_mode", False)))
    div = a.get("divisor_override")
    if div is not None and int(div) == 0:
        raise lw.fail("average pooling with divisor_override=0")
    y = _avg_pool(lw, x4, g, padding[0], padding[1], bool(a.get("count_include_pad", True)), div)
    return _pool_result(lw, y, shape)


@POOLING.op("_adaptive_avg_pool2d.default",
      ir="reduce_mean for a 1x1 output; else the avg_pool form with kernel = stride = input / output "
         "(the output must divide the input)")
def lower_adaptive_avg_pool(lw: Lowering, a: Args) -> Lowered:
    x4, shape = _pool_input(lw, a["self"], "adaptive average pooling")
    n, c, h, w = x4.type.shape
    ho, wo = size_arg(a["output_size"], 2)
    if (ho, wo) == (1, 1):  # global average pooling (already a native reduction)
        y = reduce_over(lw, natural(x4), [2, 3], True, "reduce_mean")
        return _pool_result(lw, materialize(lw.em, y), shape)
    if h % ho or w % wo:
        raise lw.fail(f"adaptive average pooling from {h}x{w} to {ho}x{wo}: the output size does not "
                      "divide the input size (the windows would overlap unevenly)",
                      f"pool to a size that divides {h}x{w}, or resize the input to a multiple of "
                      f"{ho}x{wo} first")
    k = [h // ho, w // wo]
    g = conv_window(h, w, k, k, [1, 1], [0, 0, 0, 0])
    return _pool_result(lw, _avg_pool(lw, x4, g, 0, 0, True, None), shape)


# ---------------------------------------------------------------------------
# upsampling


def _out_sizes(lw: Lowering, sizes: Sequence[int], output_size: Sequence[int] | None,
               scales: Sequence[float] | None) -> list[int]:
    if output_size:
        return [int(s) for s in output_size]
    if not scales:
        raise lw.fail("upsampling without an output size or a scale factor")
    return [int(math.floor(s * float(f))) for s, f in zip(sizes, scales)]


def _nearest(lw: Lowering, a: Args, nsp: int) -> View:
    x4 = as_nchw(lw, a["input"], nsp, "nearest upsampling")
    n, c, h, w = x4.type.shape
    sizes = [h, w][2 - nsp:]
    outs = _out_sizes(lw, sizes, a.get("output_size"), a.get("scale_factors"))
    scales = a.get("scale_factors")
    factors = []
    for i, (size, out) in enumerate(zip(sizes, outs)):
        f = float(scales[i]) if scales else out / size
        if out % size or f != out // size or out < size:
            shown = f"{f:g}" if scales else f"{size} -> {out}"
            raise lw.fail(f"nearest upsampling by a non-integer factor ({shown})",
                          "anec imports nearest upsampling by integer factors (scale_factor=2, or "
                          "an output size that is a multiple of the input size); for other sizes "
                          "use mode='bilinear', or resize on the host")
        factors.append(out // size)
    sh, sw = ([1] + factors) if nsp == 1 else factors
    x6 = form_op(lw, "reshape", x4, shape=[n, c, h, 1, w, 1], suffix="x6")
    o6 = lw.em.const({"value": 1.0}, TensorType(FP16, (1, 1, 1, sh, 1, sw)), suffix="o6", cse=False)
    m6 = form_op(lw, "mul", x6, o6, suffix="m6")
    y = form_op(lw, "reshape", m6, shape=[n, c, h * sh, w * sw])
    return from_nchw(lw, y, nsp)


@POOLING.op("upsample_nearest2d.vec", "upsample_nearest1d.vec",
      ir="reshape to [N, C, H, 1, W, 1], mul by ones [1, 1, 1, sh, 1, sw], reshape (integer factors)")
def lower_upsample_nearest(lw: Lowering, a: Args) -> Lowered:
    return _nearest(lw, a, 2 if "2d" in str(lw.node.target) else 1)


def interp_matrix(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """torch's linear interpolation weights from ``n_in`` to ``n_out`` points: [n_out, n_in],
    rows summing to 1 (``scale``: the scale factor the call gave, which torch uses instead of
    the size ratio when align_corners is false)."""
    if align_corners:
        r = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        r = 1.0 / scale if scale is not None and scale > 0 else n_in / n_out
    m = np.zeros((n_out, n_in), dtype=np.float64)
    for o in range(n_out):
        src = r * o if align_corners else max(r * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(src), n_in - 1)
        i1 = i0 + 1 if i0 < n_in - 1 else i0
        l1 = src - i0
        m[o, i0] += 1.0 - l1
        m[o, i1] += l1
    return m


def _bilinear(lw: Lowering, a: Args, nsp: int) -> View:
    x4 = as_nchw(lw, a["input"], nsp, "linear upsampling")
    n, c, h, w = x4.type.shape
    sizes = [h, w][2 - nsp:]
    outs = _out_sizes(lw, sizes, a.get("output_size"), a.get("scale_factors"))
    scales = a.get("scale_factors") or [None] * nsp
    if any(o < 1 for o in outs):
        raise lw.fail(f"upsampling {sizes} to {outs}")
    ac = bool(a.get("align_corners"))
    if nsp == 1:
        ah = np.ones((1, 1))
        aw = interp_matrix(w, outs[0], ac, scales[0])
        ho, wo = 1, outs[0]
    else:
        ah = interp_matrix(h, outs[0], ac, scales[0])
        aw = interp_matrix(w, outs[1], ac, scales[1])
        ho, wo = outs
    layer = layer_path(lw)
    mh = lw.derived_weight(ah, f"{layer}.interp_h")
    mw = lw.derived_weight(aw.T, f"{layer}.interp_w")
    t = form_op(lw, "matmul", mh, x4, suffix="t")
    y = form_op(lw, "matmul", t, mw)
    assert y.type.shape == (n, c, ho, wo)
    return from_nchw(lw, y, nsp)


@POOLING.op("upsample_bilinear2d.vec", "upsample_linear1d.vec",
      ir="matmul by [Ho, H] row weights, then by [W, Wo] column weights (derived weights of the "
         "import); align_corners either way, any sizes")
def lower_upsample_bilinear(lw: Lowering, a: Args) -> Lowered:
    return _bilinear(lw, a, 2 if "2d" in str(lw.node.target) else 1)


# ---------------------------------------------------------------------------
# padding modes


def _pad_pieces(lw: Lowering, x: Value, axis: int, before: int, after: int, mode: str) -> Value:
    """``x`` padded along ``axis`` by slices of itself joined with one concat."""
    size = x.type.shape[axis]
    if before == 0 and after == 0:
        return x
    limit = size - 1 if mode == "reflect" else size
    if max(before, after) > limit and mode != "replicate":
        raise lw.fail(f"{mode} padding of {max(before, after)} on a dim of size {size}",
                      "the padding must be smaller than the dim for reflect (at most the dim for "
                      "circular)")

    def piece(lo: int, hi: int) -> Value:
        begin = [0] * x.type.rank
        end = list(x.type.shape)
        begin[axis], end[axis] = lo, hi
        return form_op(lw, "slice", x, begin=begin, end=end, suffix="pc")

    head: list[Value] = []
    tail: list[Value] = []
    if mode == "reflect":
        head = [piece(k, k + 1) for k in range(before, 0, -1)]
        tail = [piece(size - 1 - k, size - k) for k in range(1, after + 1)]
    elif mode == "replicate":
        head = [piece(0, 1)] * before
        tail = [piece(size - 1, size)] * after
    else:  # circular
        head = [piece(size - before, size)] if before else []
        tail = [piece(0, after)] if after else []
    return form_op(lw, "concat", *head, x, *tail, axis=axis, suffix="padded")


@POOLING.op("pad.default", ir="constant: as constant_pad_nd; reflect, replicate, circular: slices of the "
      "input joined by concat along each padded dim (H, then W)")
def lower_pad_modes(lw: Lowering, a: Args) -> Lowered:
    mode = a.get("mode", "constant")
    pads = [int(p) for p in a["pad"]]
    if mode == "constant":
        return lower_pad(lw, {"self": a["self"], "pad": pads, "value": a.get("value") or 0.0})
    if mode not in ("reflect", "replicate", "circular"):
        raise lw.fail(f"padding mode '{mode}'", "use constant, reflect, replicate or circular")
    if any(p < 0 for p in pads):
        raise lw.fail(f"negative {mode} padding (cropping)", "slice the tensor instead")
    v = lw.view(a["self"])
    rank = len(v.shape)
    if len(pads) // 2 > rank:
        raise lw.fail(f"{mode} padding of {len(pads) // 2} dims of a rank-{rank} tensor")
    y = materialize(lw.em, v)
    for d in range(rank - len(pads) // 2, rank):  # outer dims first: H, then W
        i = rank - 1 - d
        y = _pad_pieces(lw, y, d, pads[2 * i], pads[2 * i + 1], mode)
    return natural(y, v.kind)
