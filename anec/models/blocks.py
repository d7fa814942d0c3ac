"""IR building blocks the model frontends share: norms, linear layers, attention.

:class:`ModelBuilder` extends the IR :class:`~anec.ir.builder.Builder` with
the decompositions the frontends share (LayerNorm, RMSNorm, linear layers,
GELU, SiLU, attention). They emit ops the IR has; legalize later rewrites the
ones the ANE lacks (``rsqrt`` -> ``pow``, ``gelu`` -> tanh formula, conv
``bias=`` -> ``add``). Weight consts reference checkpoint keys; their stored
layout is the frontend's business (see each frontend's ``weight``).

Funcs. The frontends emit one func per bucket for a whole layer stack (a
decoder's prefill and decode, BERT's encoder); :meth:`ModelBuilder.scope`
prefixes every value of layer i with ``L{i}_`` so one layer builder serves
every layer. A program may hold at most ``target.max_blob_tensors`` (16)
weight tensors, one fewer when an elementwise op takes an inline scalar (all
ours do: norms and scales); the compiler cuts each func into a pipeline of
programs within that budget (:mod:`anec.passes.partition`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np

from anec.ir.builder import Builder
from anec.ir.nodes import Value
from anec.models.common import ModelError


class ModelBuilder(Builder):
    """A :class:`Builder` with the transformer decompositions the frontends share.

    Scalars are fp16 ``const(value=...)`` nodes, one per distinct value and
    reused. Names are given explicitly (``prefix_part``) so the printed IR
    reads like hand-written IR.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._scalars: dict[float, Value] = {}
        self._weights: dict[str, Value] = {}
        self.prefix = ""
        """Prepended to every value name given to an op (see :meth:`scope`)."""

    @contextmanager
    def scope(self, prefix: str) -> Iterator[None]:
        """Name every value built inside with ``prefix`` (``L3_`` for layer 3 of a
        whole-model func), so the same layer code builds every layer."""
        outer, self.prefix = self.prefix, prefix
        try:
            yield
        finally:
            self.prefix = outer

    def _emit(self, opname: str, operands: list[Value], optional: dict[str, Value], attrs: dict,
              names: list[str] | None, **kw: Any) -> Any:
        if names is not None and self.prefix:
            names = [self.prefix + n for n in names]
        return super()._emit(opname, operands, optional, attrs, names, **kw)

    # -- leaves
    def scalar(self, value: float) -> Value:
        """An fp16 scalar const (shared by every use of the same value, in any scope)."""
        v = float(np.float16(value))
        if v not in self._scalars:
            label = f"{value:g}".replace("-", "m").replace(".", "p").replace("+", "")
            with self.scope(""):
                self._scalars[v] = self.const_value(value, "fp16[]", name=self._fresh(f"c_{label}"))
        return self._scalars[v]

    def weight(self, key: str, shape: Sequence[int], name: str) -> Value:
        """An fp16 weight const for checkpoint ``key`` with declared ``shape``; one const
        per key in a func (a tensor every layer reads, such as a mask, is one BLOBFILE
        tensor of each program that reads it)."""
        ty = f"fp16[{', '.join(str(int(d)) for d in shape)}]"
        w = self._weights.get(key)
        if w is None:
            w = self._weights[key] = self.const_weight(key, ty, name=self._fresh(name))
        elif str(w.type) != ty:
            raise ModelError(f"weight '{key}' is declared {ty} here and {w.type} before")
        return w

    def _fresh(self, name: str) -> str:
        """``name`` (or a variant) that is still free once the scope prefix is added."""
        return self.graph.fresh_name(self.prefix + name)[len(self.prefix):]

    # -- layers
    def linear(self, x: Value, wkey: str, cout: int, bkey: str | None, name: str) -> Value:
        """``conv1x1(x, W [cout, cin, 1, 1], bias=[1, cout, 1, 1])``."""
        cin = x.type.shape[1]
        w = self.weight(wkey, [cout, cin, 1, 1], f"{name}_w")
        if bkey is None:
            return self.conv1x1(x, w, name=self._fresh(name))
        b = self.weight(bkey, [1, cout, 1, 1], f"{name}_b")
        return self.conv1x1(x, w, bias=b, name=self._fresh(name))

    def layer_norm(self, x: Value, gkey: str, bkey: str | None, eps: float, name: str) -> Value:
        """LayerNorm over channels: ``(x - mean) * rsqrt(var + eps) * g + b``."""
        c = x.type.shape[1]
        mu = self.reduce_mean(x, axes=[1], keep_dims=True, name=self._fresh(f"{name}_mu"))
        xc = self.sub(x, mu, name=self._fresh(f"{name}_xc"))
        sq = self.mul(xc, xc, name=self._fresh(f"{name}_sq"))
        var = self.reduce_mean(sq, axes=[1], keep_dims=True, name=self._fresh(f"{name}_var"))
        ve = self.add(var, self.scalar(fp16_eps(eps)), name=self._fresh(f"{name}_ve"))
        rstd = self.rsqrt(ve, name=self._fresh(f"{name}_rstd"))
        xn = self.mul(xc, rstd, name=self._fresh(f"{name}_xn"))
        g = self.weight(gkey, [1, c, 1, 1], f"{name}_g")
        y = self.mul(xn, g, name=self._fresh(f"{name}_xs" if bkey else name))
        if bkey is None:
            return y
        b = self.weight(bkey, [1, c, 1, 1], f"{name}_b")
        return self.add(y, b, name=self._fresh(name))

    def rms_norm(self, x: Value, wkey: str, eps: float, name: str) -> Value:
        """RMSNorm over channels: ``x * rsqrt(mean(x^2) + eps) * w``."""
        c = x.type.shape[1]
        sq = self.mul(x, x, name=self._fresh(f"{name}_sq"))
        ms = self.reduce_mean(sq, axes=[1], keep_dims=True, name=self._fresh(f"{name}_ms"))
        me = self.add(ms, self.scalar(fp16_eps(eps)), name=self._fresh(f"{name}_me"))
        r = self.rsqrt(me, name=self._fresh(f"{name}_r"))
        xr = self.mul(x, r, name=self._fresh(f"{name}_xr"))
        w = self.weight(wkey, [1, c, 1, 1], f"{name}_w")
        return self.mul(xr, w, name=self._fresh(name))

    def silu(self, x: Value, name: str) -> Value:
        sg = self.sigmoid(x, name=self._fresh(f"{name}_sig"))
        return self.mul(x, sg, name=self._fresh(name))

    # -- attention
    def to_heads(self, x: Value, heads: int, name: str, out: str | None = None) -> Value:
        """``[1, H*D, 1, S] -> [1, H, S, D]`` (result named ``out`` if given)."""
        _, c, _, s = x.type.shape
        x4 = self.reshape(x, shape=[1, heads, c // heads, s], name=self._fresh(f"{name}4"))
        return self.transpose(x4, perm=[0, 1, 3, 2], name=out or self._fresh(f"{name}h"))

    def from_heads(self, x: Value, name: str) -> Value:
        """``[1, H, S, D] -> [1, H*D, 1, S]``."""
        _, h, s, d = x.type.shape
        t = self.transpose(x, perm=[0, 1, 3, 2], name=self._fresh(f"{name}t"))
        return self.reshape(t, shape=[1, h * d, 1, s], name=self._fresh(name))

    def _group(self, x: Value, kv_heads: int, name: str) -> Value:
        """``[1, H, S, X] -> [1, KV, G*S, X]``: the G query heads sharing a KV head
        become rows of one matmul (grouped-query attention without repeating K/V)."""
        _, h, s, d = x.type.shape
        if h == kv_heads:
            return x
        return self.reshape(x, shape=[1, kv_heads, (h // kv_heads) * s, d], name=self._fresh(name))

    def _ungroup(self, x: Value, heads: int, name: str) -> Value:
        """``[1, KV, G*S, X] -> [1, H, S, X]`` (inverse of :meth:`_group`)."""
        _, kv, gs, d = x.type.shape
        if kv == heads:
            return x
        return self.reshape(x, shape=[1, heads, gs // (heads // kv), d], name=self._fresh(name))

    def attention(self, qh: Value, kh: Value, vh: Value, mask: Value, name: str = "attn") -> Value:
        """Softmax attention over one block of keys; q already scaled.

        ``qh [1, H, S, D]``, ``kh``/``vh`` ``[1, KV, T, D]``, additive ``mask``
        broadcasting to ``[1, H, S, T]``. Returns the context ``[1, H*D, 1, S]``.
        """
        heads = qh.type.shape[1]
        kv = kh.type.shape[1]
        qg = self._group(qh, kv, f"{name}_qg")
        s = self.matmul(qg, kh, transpose_y=True, name=self._fresh(f"{name}_s"))
        s = self._ungroup(s, heads, f"{name}_s4")
        sm = self.add(s, mask, name=self._fresh(f"{name}_sm"))
        p = self.softmax(sm, axis=-1, name=self._fresh(f"{name}_p"))
        pg = self._group(p, kv, f"{name}_pg")
        c = self.matmul(pg, vh, name=self._fresh(f"{name}_c"))
        c = self._ungroup(c, heads, f"{name}_c4")
        return self.from_heads(c, f"{name}_ctx")

    def attention_cached(self, qh: Value, kc: Value, vc: Value, mask_past: Value,
                         kn: Value, vn: Value, mask_new: Value, name: str = "attn") -> Value:
        """Attention over past keys (a KV cache input) and the new block's own keys.

        Concat is illegal on the ANE, so the new keys are never appended to
        the cache inside the program. Instead the softmax is taken over the
        two key blocks jointly, as flash attention merges blocks::

            m  = max(rowmax(S_past), rowmax(S_new))   # max(a, b) = b + relu(a - b)
            E_past = exp(S_past - m),  E_new = exp(S_new - m)
            ctx = (E_past @ V_past + E_new @ V_new) * (rowsum(E_past) + rowsum(E_new)) ** -1

        ``qh [1, H, W, D]``; ``kc``/``vc`` ``[1, KV, T, D]`` with ``mask_past``
        ``[1, 1, W, T]``; ``kn``/``vn`` ``[1, KV, W, D]`` with ``mask_new``
        ``[1, 1, W, W]``. Returns the context ``[1, H*D, 1, W]``.
        """
        heads = qh.type.shape[1]
        kv = kc.type.shape[1]
        qg = self._group(qh, kv, f"{name}_qg")
        sp = self._ungroup(self.matmul(qg, kc, transpose_y=True, name=self._fresh(f"{name}_sp")),
                           heads, f"{name}_sp4")
        sn = self._ungroup(self.matmul(qg, kn, transpose_y=True, name=self._fresh(f"{name}_sn")),
                           heads, f"{name}_sn4")
        sp = self.add(sp, mask_past, name=self._fresh(f"{name}_spm"))
        sn = self.add(sn, mask_new, name=self._fresh(f"{name}_snm"))
        mp = self.reduce_max(sp, axes=[3], keep_dims=True, name=self._fresh(f"{name}_mp"))
        mn = self.reduce_max(sn, axes=[3], keep_dims=True, name=self._fresh(f"{name}_mn"))
        dm = self.relu(self.sub(mp, mn, name=self._fresh(f"{name}_dm")), name=self._fresh(f"{name}_dmr"))
        m = self.add(mn, dm, name=self._fresh(f"{name}_m"))
        ep = self.exp(self.sub(sp, m, name=self._fresh(f"{name}_spc")), name=self._fresh(f"{name}_ep"))
        en = self.exp(self.sub(sn, m, name=self._fresh(f"{name}_snc")), name=self._fresh(f"{name}_en"))
        z = self.add(self.reduce_sum(ep, axes=[3], keep_dims=True, name=self._fresh(f"{name}_zp")),
                     self.reduce_sum(en, axes=[3], keep_dims=True, name=self._fresh(f"{name}_zn")),
                     name=self._fresh(f"{name}_z"))
        rz = self.pow(z, self.scalar(-1.0), name=self._fresh(f"{name}_rz"))
        cp = self.matmul(self._group(ep, kv, f"{name}_epg"), vc, name=self._fresh(f"{name}_cp"))
        cn = self.matmul(self._group(en, kv, f"{name}_eng"), vn, name=self._fresh(f"{name}_cn"))
        c = self.add(cp, cn, name=self._fresh(f"{name}_cs"))
        c = self.mul(c, self._group(rz, kv, f"{name}_rzg"), name=self._fresh(f"{name}_c"))
        c = self._ungroup(c, heads, f"{name}_c4")
        return self.from_heads(c, f"{name}_ctx")


def fp16_eps(eps: float) -> float:
    """``eps`` as fp16 can hold it, at least the smallest fp16 subnormal (2**-24).

    BERT's 1e-12 rounds to 0 in fp16; a zero eps turns an all-equal column
    (padding) into 0 * inf = NaN, which then leaks through attention."""
    return max(float(eps), 2.0 ** -24)
