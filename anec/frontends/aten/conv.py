"""ATen lowering of convolutions (``convolution.default``: Conv1d/2d, ConvTranspose1d/2d).

A conv becomes one canonical form (:mod:`anec.frontends.aten.spatial`): a
1x1 stride-1 conv is one ``conv1x1`` in the channel layout; otherwise one
``conv1x1`` per kernel position on slices of the padded input, summed
(form 1), a ``mul`` per tap for depthwise convs and a per-group form joined
by ``concat`` for grouped ones (form 2), and zero insertion then the
flipped-kernel form for transposed convs (form 3). A batch norm that is the
conv's only user is folded into its weight and bias at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from anec.frontends.aten.context import Lowering, weight_hint
from anec.frontends.aten.spatial import (SPATIAL_GROUP, Window, add_fold, as_nchw, conv_window, form_op, from_nchw,
                                         layer_path, pad_form, size_arg, slice_at)
from anec.frontends.aten.table import Family
from anec.frontends.aten.values import FP16, Args, Const, Lowered
from anec.frontends.fx import aten_base
from anec.frontends.tensor_views import View, channel_view, natural, permute_view, reshape_view, to_channels
from anec.ir.nodes import Value
from anec.ir.types import TensorType

if TYPE_CHECKING:
    import torch

CONVOLUTION = Family(SPATIAL_GROUP)


def _plain_ref(c: object) -> bool:
    """Whether the constant is a whole stored tensor (its state_dict key names it as it is)."""
    r = getattr(c, "origin", None)
    return (r is not None and r.perm is None and r.slice is None and r.final == r.stored
            and c.value.dtype.is_floating_point)


def _weight(lw: Lowering, c: Const, shape: Sequence[int], name: str) -> Value:
    """A layer's full-shape weight const (its checkpoint key when it is one, else a
    weight computed at import named ``<layer>.<name>``)."""
    shape = tuple(int(d) for d in shape)
    if _plain_ref(c):
        key = c.origin.key
        lw.register_weight(key, c.origin)
        return lw.em.const({"weight": key}, TensorType(FP16, shape), suffix=weight_hint(key), cse=False)
    return lw.derived_weight(c.numpy().reshape(shape), f"{layer_path(lw)}.{name}")


def _bias_add(lw: Lowering, y: Value, bias: Value | None) -> Value:
    """``%y = add(%acc, reshape(%b) {shape=[1, Cout, 1, 1]})``."""
    if bias is None:
        return y
    cout = y.type.shape[1]
    b4 = form_op(lw, "reshape", bias, shape=[1, cout, 1, 1], suffix="b4")
    return form_op(lw, "add", y, b4)


def _conv_sum(lw: Lowering, xp: Value, w: Value, g: Window, transposed: bool = False) -> Value:
    """Form 1 on an already padded input: one conv1x1 per kernel position, summed.

    ``transposed``: ``w`` is a ConvTranspose weight [Cin, Cout, KH, KW]; each position
    takes the spatially flipped slice and swaps its channel dims (form 3)."""
    a, b = w.type.shape[:2]
    if not transposed and (g.kh, g.kw, g.sh, g.sw) == (1, 1, 1, 1) and not g.padded:
        return form_op(lw, "conv1x1", xp, w)
    terms = []
    for i, j in g.positions():
        xs = slice_at(lw, xp, g, i, j)
        if transposed:
            fi, fj = g.kh - 1 - i, g.kw - 1 - j
            ws = form_op(lw, "slice", w, begin=[0, 0, fi, fj], end=[a, b, fi + 1, fj + 1], suffix=f"w{i}_{j}")
            ws = form_op(lw, "transpose", ws, perm=[1, 0, 2, 3], suffix=f"wt{i}_{j}")
        else:
            ws = form_op(lw, "slice", w, begin=[0, 0, i, j], end=[a, b, i + 1, j + 1], suffix=f"w{i}_{j}")
        terms.append(form_op(lw, "conv1x1", xs, ws, suffix=f"t{i}_{j}"))
    return add_fold(lw, terms)


def _depthwise_sum(lw: Lowering, xp: Value, w: Value, g: Window) -> Value:
    """Form 2 (depthwise, multiplier 1): one mul by a [1, C, 1, 1] kernel tap per position."""
    c = w.type.shape[0]
    terms = []
    for i, j in g.positions():
        xs = slice_at(lw, xp, g, i, j)
        ws = form_op(lw, "slice", w, begin=[0, 0, i, j], end=[c, 1, i + 1, j + 1], suffix=f"w{i}_{j}")
        wr = form_op(lw, "reshape", ws, shape=[1, c, 1, 1], suffix=f"wr{i}_{j}")
        terms.append(form_op(lw, "mul", xs, wr, suffix=f"t{i}_{j}"))
    return add_fold(lw, terms)


def _grouped_sum(lw: Lowering, xp: Value, w: Value, g: Window, groups: int,
                 transposed: bool = False) -> Value:
    """Form 2 (general groups): form 1 per group on its channel slices, then a concat."""
    n, cin, hp, wp = xp.type.shape
    cig = cin // groups
    a, b, kh, kw = w.type.shape
    unpadded = Window(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, 0, 0, 0, 0, g.ho, g.wo)
    parts = []
    for k in range(groups):
        xk = form_op(lw, "slice", xp, begin=[0, k * cig, 0, 0], end=[n, (k + 1) * cig, hp, wp], suffix=f"g{k}")
        if transposed:  # [Cin, Cout/g, KH, KW]: the group's input channels
            wk = form_op(lw, "slice", w, begin=[k * cig, 0, 0, 0], end=[(k + 1) * cig, b, kh, kw], suffix=f"wg{k}")
        else:  # [Cout, Cin/g, KH, KW]: the group's output channels
            cog = a // groups
            wk = form_op(lw, "slice", w, begin=[k * cog, 0, 0, 0], end=[(k + 1) * cog, b, kh, kw], suffix=f"wg{k}")
        parts.append(_conv_sum(lw, xk, wk, unpadded, transposed))
    return form_op(lw, "concat", *parts, axis=1, suffix="cat")


def _bn_fold(lw: Lowering, node: torch.fx.Node, w: Const, b: Const | None, transposed: bool,
             groups: int) -> tuple[np.ndarray, np.ndarray, str, str] | None:
    """``(weight, bias)`` arrays with the batch norm that is the conv's only user folded in,
    and the weight and bias keys, or None when it cannot be folded (then the batch norm
    stays a mul and an add)."""
    import torch

    users = list(node.users)
    if len(users) != 1 or aten_base(users[0]) != "_native_batch_norm_legit_no_training":
        return None
    bn = users[0]
    if bn.args[0] is not node:
        return None
    a = lw.bind(bn)
    mean, var, gamma, beta = a["running_mean"], a["running_var"], a.get("weight"), a.get("bias")
    if not all(isinstance(t, Const) for t in (mean, var)) or \
            not all(t is None or isinstance(t, Const) for t in (gamma, beta)):
        return None
    # the conv's weight (and bias) must be its own: they are replaced by the folded values
    wnode, bnode = node.args[1], node.args[2] if len(node.args) > 2 else None
    if not _plain_ref(w) or len(wnode.users) != 1:
        return None
    if b is not None and (not _plain_ref(b) or bnode is None or len(bnode.users) != 1):
        return None
    cout = w.shape[0] if not transposed else w.shape[1] * groups
    scale = (gamma.value.double() if gamma is not None else torch.ones(cout, dtype=torch.float64)) \
        / torch.sqrt(var.value.double() + float(a["eps"]))
    shift = (beta.value.double() if beta is not None else torch.zeros(cout, dtype=torch.float64)) \
        - mean.value.double() * scale
    wt = w.value.double()
    if transposed:  # [Cin, Cout/g, ...]: output channel k*Cout/g + j of group k
        cin, cog = wt.shape[:2]
        ws = wt.reshape(groups, cin // groups, cog, *wt.shape[2:]) \
            * scale.reshape(groups, 1, cog, *([1] * (wt.dim() - 2)))
        ws = ws.reshape(wt.shape)
    else:
        ws = wt * scale.reshape(-1, *([1] * (wt.dim() - 1)))
    bias = (b.value.double() if b is not None else torch.zeros(cout, dtype=torch.float64)) * scale + shift
    wkey = w.origin.key
    bkey = b.origin.key if b is not None else (wkey[:-len("weight")] + "bias" if wkey.endswith("weight")
                                                else wkey + ".bias")
    if b is None and bkey in lw.taken_keys:
        return None
    lw.folded.add(bn)
    return ws.numpy(), bias.numpy(), wkey, bkey


def _fp16_check(lw: Lowering, arr: np.ndarray, key: str) -> None:
    bad = ~np.isfinite(arr) | (np.abs(arr) > 65504.0)
    if bad.any():
        raise lw.fail(
            f"folding the batch norm into '{key}' gives {float(arr[bad].flat[0]):g}, beyond the fp16 "
            "range (+-65504)", "check the batch norm's running variance (near zero scales the "
            "conv's weights by 1/sqrt(var + eps))")


def _zero_pad_input(lw: Lowering, node: torch.fx.Node, nsp: int) -> tuple[Lowered, list[int]] | None:
    """A zero ``constant_pad_nd`` of the spatial dims whose only user is this conv (how torch
    writes padding='same' with an even kernel): ``(its input, [top, bottom, left, right])``."""
    src = node.args[0]
    if aten_base(src) != "constant_pad_nd" or len(src.users) != 1:
        return None
    a = lw.bind(src)
    pads = [int(p) for p in a["pad"]]
    if float(a.get("value") or 0.0) != 0.0 or any(p < 0 for p in pads) or len(pads) > 2 * nsp:
        return None
    pads += [0] * (2 * nsp - len(pads))
    if nsp == 1:
        return lw.env[src.args[0]], [0, 0, pads[0], pads[1]]
    return lw.env[src.args[0]], [pads[2], pads[3], pads[0], pads[1]]


@CONVOLUTION.op("convolution.default",
      ir="conv1x1 for 1x1 kernels with stride 1 and no padding; else one conv1x1 per kernel "
         "position on a slice of the padded input, summed (depthwise: mul); groups: per-group "
         "sums joined by concat; transposed: zero insertion (reshape + pad), then the flipped "
         "kernel (docs/torch.md, spatial layers)")
def lower_convolution(lw: Lowering, a: Args) -> Lowered:
    x, w, b = a["input"], a["weight"], a["bias"]
    if not isinstance(w, Const) or not w.value.dtype.is_floating_point:
        raise lw.fail("convolution with a weight computed in the model",
                      "the weight must be a parameter or a constant")
    if b is not None and not isinstance(b, Const):
        raise lw.fail("convolution with a bias computed in the model",
                      "the bias must be a parameter or a constant")
    nsp = len(w.shape) - 2
    if nsp not in (1, 2):
        raise lw.fail(f"{nsp}-d convolution", "anec imports 1-d and 2-d convolutions; fold the "
                      "extra spatial dim into the batch or channels (e.g. a Conv3d with kernel depth 1 "
                      "as a Conv2d)")
    transposed = bool(a["transposed"])
    groups = int(a["groups"])
    stride = size_arg(a["stride"], nsp)
    padding = size_arg(a["padding"], nsp)
    dilation = size_arg(a["dilation"], nsp)
    out_pad = size_arg(a["output_padding"], nsp, [0] * nsp)
    kernel = list(w.shape[2:])
    node = lw.node
    extra = [0, 0, 0, 0]
    if not transposed:
        hit = _zero_pad_input(lw, node, nsp)
        if hit is not None:
            x, extra = hit
    if nsp == 1:
        kernel, stride, padding, dilation, out_pad = ([1] + kernel, [1] + stride, [0] + padding,
                                                      [1] + dilation, [0] + out_pad)
    x4 = as_nchw(lw, x, nsp, "convolution")
    n, cin, h, wid = x4.type.shape
    if transposed:
        cout = w.shape[1] * groups
        cin_w = w.shape[0]
    else:
        cout, cin_w = w.shape[0], w.shape[1] * groups
    if cin_w != cin or cin % groups or cout % groups:
        raise lw.fail(f"convolution of {cin} channels with a weight {list(w.shape)} and groups={groups}")
    if any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise lw.fail(f"convolution with stride {stride} and dilation {dilation}")
    if any(p < 0 for p in padding):
        raise lw.fail(f"convolution with negative padding {padding}")

    wshape = (w.shape[0], w.shape[1], kernel[0], kernel[1])
    folded = _bn_fold(lw, node, w, b, transposed, groups)
    em = lw.em
    if folded is not None:
        warr, barr, wkey, bkey = folded
        _fp16_check(lw, warr, wkey)
        _fp16_check(lw, barr, bkey)
        lw.weights[wkey] = warr.astype(np.float32)
        lw.weights[bkey] = barr.astype(np.float32)
        lw.taken_keys.add(bkey)

        def wconst() -> Value:
            return em.const({"weight": wkey}, TensorType(FP16, wshape), suffix=weight_hint(wkey), cse=False)

        def bconst(shape: Sequence[int] = (cout,)) -> Value:
            return em.const({"weight": bkey}, TensorType(FP16, tuple(shape)), suffix=weight_hint(bkey), cse=False)
    else:
        def wconst() -> Value:
            return _weight(lw, w, wshape, "weight")

        def bconst(shape: Sequence[int] = (cout,)) -> Value:
            return _weight(lw, b, shape, "bias")

    has_bias = b is not None or folded is not None
    pads = [padding[0] + extra[0], padding[0] + extra[1], padding[1] + extra[2], padding[1] + extra[3]]

    if not transposed:
        g = conv_window(h, wid, kernel, stride, dilation, pads)
        if g.ho < 1 or g.wo < 1:
            raise lw.fail(f"convolution of a {h}x{wid} input with kernel {kernel} leaves no output")
        if kernel == [1, 1] and stride == [1, 1] and not g.padded and groups == 1:
            return _conv1x1(lw, x4, wconst(), bconst((1, cout, 1, 1)) if has_bias else None, nsp)
        xp = pad_form(lw, x4, g, 0.0)
        wv = wconst()
        if groups == 1:
            y = _conv_sum(lw, xp, wv, g)
        elif groups == cin and cout == cin:
            y = _depthwise_sum(lw, xp, wv, g)
        else:
            y = _grouped_sum(lw, xp, wv, g, groups)
        y = _bias_add(lw, y, bconst() if has_bias else None)
        return from_nchw(lw, y, nsp)

    # transposed: zero insertion, then a stride-1 conv with the flipped, swapped kernel
    sh, sw = stride
    if any(op >= max(s, d) for op, s, d in zip(out_pad, stride, dilation)):
        raise lw.fail(f"output_padding {out_pad} must be smaller than the stride or the dilation")
    z = x4
    if sh > 1 or sw > 1:
        x6 = form_op(lw, "reshape", x4, shape=[n, cin, h, 1, wid, 1], suffix="x6")
        z6 = form_op(lw, "pad", x6, before=[0] * 6, after=[0, 0, 0, sh - 1, 0, sw - 1], value=0.0, suffix="z6")
        z4 = form_op(lw, "reshape", z6, shape=[n, cin, h * sh, wid * sw], suffix="z4")
        z = form_op(lw, "slice", z4, begin=[0, 0, 0, 0], end=[n, cin, (h - 1) * sh + 1, (wid - 1) * sw + 1],
                suffix="zu")
    tp = [dilation[0] * (kernel[0] - 1) - padding[0], dilation[0] * (kernel[0] - 1) - padding[0] + out_pad[0],
          dilation[1] * (kernel[1] - 1) - padding[1], dilation[1] * (kernel[1] - 1) - padding[1] + out_pad[1]]
    if any(p < 0 for p in tp):  # padding beyond the kernel's reach crops the output instead
        zh, zw = z.type.shape[2:]
        crop = [max(0, -p) for p in tp]
        if zh - crop[0] - crop[1] < 1 or zw - crop[2] - crop[3] < 1:
            raise lw.fail(f"transposed convolution with padding {padding} leaves no output")
        z = form_op(lw, "slice", z, begin=[0, 0, crop[0], crop[2]], end=[n, cin, zh - crop[1], zw - crop[3]],
                suffix="crop")
        tp = [max(0, p) for p in tp]
    zh, zw = z.type.shape[2:]
    g = conv_window(zh, zw, kernel, [1, 1], dilation, tp)
    xp = pad_form(lw, z, g, 0.0)
    wv = wconst()
    y = _conv_sum(lw, xp, wv, g, transposed=True) if groups == 1 else \
        _grouped_sum(lw, xp, wv, g, groups, transposed=True)
    y = _bias_add(lw, y, bconst() if has_bias else None)
    return from_nchw(lw, y, nsp)


def _conv1x1(lw: Lowering, x4: Value, w: Value, bias: Value | None, nsp: int) -> View:
    """A 1x1 stride-1 unpadded conv: conv1x1 in the channel layout ([1, C, 1, N*H*W])."""
    em = lw.em
    n, cin, h, wid = x4.type.shape
    cout = w.type.shape[0]
    xin = to_channels(em, permute_view(natural(x4), (0, 2, 3, 1)))
    y = em.op("conv1x1", xin, w, **({"bias": bias} if bias is not None else {}))
    out = permute_view(channel_view(em, y, (n, h, wid, cout)), (0, 3, 1, 2))
    return out if nsp == 2 else reshape_view(em, out, (n, cout, wid))
