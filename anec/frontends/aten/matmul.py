"""ATen lowerings of matrix products, linear layers and attention.

A product with a constant 2-d weight is a linear layer: ``conv1x1`` in the
channel layout (:meth:`Lowering.linear`), or a ``matmul`` when it is wider
than the target's conv channel limit; a product of two activations is a
``matmul`` whose transpose flags absorb the operands' layouts.
``scaled_dot_product_attention`` is kept whole by the export and composed
here so that the result lands in the channel layout and grouped-query heads
broadcast instead of being copied.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.reductions import lower_softmax
from anec.frontends.aten.table import Family
from anec.frontends.aten.values import Args, Const, Lowered, Operand, kind_of, shape_of
from anec.frontends.fx import repeat_kv_source
from anec.frontends.tensor_views import MASK_VALUE, View, as_view, materialize, natural, reshape_view

if TYPE_CHECKING:
    import torch

LINEAR_ALGEBRA = Family("linear algebra")
ATTENTION = Family("attention")


def _weight2d(x: object) -> bool:
    return isinstance(x, Const) and len(x.shape) == 2 and x.value.dtype.is_floating_point


@LINEAR_ALGEBRA.op("mm.default", ir="conv1x1 in the channel layout for a constant weight (matmul when wider "
      "than the conv channel limit); matmul of two activations")
def lower_mm(lw: Lowering, a: Args) -> Lowered:
    x, w = a["self"], a["mat2"]
    if _weight2d(w) and not isinstance(x, Const):
        return lw.linear(x, w)
    return _matmul_any(lw, x, w)


@LINEAR_ALGEBRA.op("addmm.default", ir="conv1x1(x, w, bias=b) (a linear layer)")
def lower_addmm(lw: Lowering, a: Args) -> Lowered:
    bias, x, w = a["self"], a["mat1"], a["mat2"]
    beta, alpha = float(a.get("beta", 1)), float(a.get("alpha", 1))
    if beta != 1.0:
        bias = lw.binary("mul", bias, beta) if not isinstance(bias, Const) else Const(bias.value * beta)
    if _weight2d(w) and not isinstance(x, Const) and alpha == 1.0:
        return lw.linear(x, w, bias)
    y = _matmul_any(lw, x, w)
    if alpha != 1.0:
        y = lw.binary("mul", y, alpha)
    return lw.binary("add", y, bias)


def _matmul_any(lw: Lowering, x: Operand, y: Operand) -> View:
    if isinstance(x, Const):
        wx = lw.const(x)
        r = lw.em.op("matmul", wx, materialize(lw.em, lw.view(y)))
        return natural(r)
    if isinstance(y, Const):
        r = lw.em.op("matmul", materialize(lw.em, lw.view(x)), lw.const(y))
        return natural(r)
    return lw.matmul(x, y)


@LINEAR_ALGEBRA.op("bmm.default", "matmul.default", ir="matmul (transpose flags instead of moving data "
      "where the operand layouts allow)")
def lower_bmm(lw: Lowering, a: Args) -> Lowered:
    x, y = a["self"], a.get("mat2", a.get("other"))
    if _weight2d(y) and not isinstance(x, Const) and len(shape_of(x)) >= 2:
        return lw.linear(x, y)
    return _matmul_any(lw, x, y)


@LINEAR_ALGEBRA.op("baddbmm.default", ir="matmul, scaled, plus the input")
def lower_baddbmm(lw: Lowering, a: Args) -> Lowered:
    y = _matmul_any(lw, a["batch1"], a["batch2"])
    if float(a.get("alpha", 1)) != 1.0:
        y = lw.binary("mul", y, float(a["alpha"]))
    inp = a["self"]
    if float(a.get("beta", 1)) != 1.0:
        inp = lw.binary("mul", inp, float(a["beta"]))
    return lw.binary("add", y, inp)


@ATTENTION.op("scaled_dot_product_attention.default",
      ir="matmul(q * scale, k^T) + mask, softmax, matmul with v (computed as v^T p^T so the "
         "result lands in the channel layout); grouped-query heads broadcast, never copied")
def lower_sdpa(lw: Lowering, a: Args) -> Lowered:
    if float(a.get("dropout_p") or 0.0) != 0.0:
        raise lw.fail("attention dropout", "call model.eval() / use dropout_p=0 before importing")
    node = lw.node
    q = lw.view(a["query"])
    k_node, v_node = node.args[1], node.args[2]
    k_base, v_base = repeat_kv_source(k_node), repeat_kv_source(v_node)
    k = lw.view(lw.env[k_base] if k_base is not None else a["key"])
    v = lw.view(lw.env[v_base] if v_base is not None else a["value"])
    if len(q.shape) < 3 or len(k.shape) != len(q.shape) or len(v.shape) != len(q.shape):
        raise lw.fail("attention with q, k, v of different ranks or rank < 3")
    *batch, h, length, e = q.shape
    kvh, s_len = k.shape[-3], k.shape[-2]
    ev = v.shape[-1]
    if h % kvh:
        raise lw.fail(f"attention with {h} query heads and {kvh} key/value heads")
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    em = lw.em
    qs = lw.binary("mul", q, scale)
    g = h // kvh
    lead = tuple(batch)
    qg = reshape_view(em, as_view(em, qs), lead + (kvh, g, length, e))
    kg = reshape_view(em, k, lead + (kvh, 1, s_len, e))
    vg = reshape_view(em, v, lead + (kvh, 1, s_len, ev))
    scores = lw.matmul(qg, lw.swap_last(kg))
    scores = reshape_view(em, scores, lead + (h, length, s_len))
    mask = a.get("attn_mask")
    if mask is not None:
        scores = lw.binary("add", scores, _additive_mask(lw, mask))
    if a.get("is_causal"):
        causal = np.triu(np.full((length, s_len), -MASK_VALUE, np.float32), k=1)
        scores = lw.binary("add", scores, Const(_torch_tensor(causal)))
    p = lower_softmax(lw, {"self": scores, "dim": -1})
    pg = reshape_view(em, as_view(em, p), lead + (kvh, g, length, s_len))
    out_t = lw.matmul(lw.swap_last(vg), lw.swap_last(pg))  # [.., KV, G, Ev, L]
    out = lw.swap_last(as_view(em, out_t))
    return reshape_view(em, out, lead + (h, length, ev))


def _torch_tensor(arr: np.ndarray) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr))


def _additive_mask(lw: Lowering, m: Operand) -> Operand:
    """A boolean mask as 0 (attend) / -1e4 (masked); float masks as they are."""
    if kind_of(m) == "bool":
        if isinstance(m, Const):
            arr = np.where(m.numpy().astype(bool), 0.0, -MASK_VALUE).astype(np.float32)
            return Const(_torch_tensor(arr))
        return lw.binary("mul", lw.binary("sub", m, 1.0, "float"), MASK_VALUE, "float")
    return m
