"""Shared pieces of the model frontends: layout, IR building blocks, buckets.

Layout. Every activation crossing a program boundary uses the ANE's "BC1S"
layout ``[1, C, 1, S]``: channels in dim 1, sequence positions in dim 3, so a
Linear layer is a 1x1 convolution and a per-channel vector is ``[1, C, 1, 1]``.
Attention moves to heads as ``[1, C, 1, S] -> [1, H, D, S] -> [1, H, S, D]``.
The host holds activations as ``[S, C]`` arrays; :func:`to_bc1s` and
:func:`from_bc1s` convert.

Building blocks. :class:`ModelBuilder` extends the IR :class:`Builder` with
the decompositions the frontends share (LayerNorm, RMSNorm, linear layers,
GELU, SiLU, attention). They emit ops the IR has; legalize later rewrites the
ones the ANE lacks (``rsqrt`` -> ``pow``, ``gelu`` -> tanh formula, conv
``bias=`` -> ``add``). Weight consts reference checkpoint keys; their stored
layout is the frontend's business (see each frontend's ``weight``).

Buckets. An ANE program has static shapes, so sequence lengths are rounded up
to a bucket. The smallest bucket makes the residual-stream surface
(``C * S * 4`` bytes, fp32) reach the target's minimum surface size (49152
bytes): 16 positions for GPT-2 small (768 channels), 32 for MiniLM (384).

BLOBFILE budget. A program may hold at most ``target.max_blob_tensors`` (16)
weight tensors, one fewer when an elementwise op takes an inline scalar (all
ours do: norms and scales). Each frontend keeps attention and MLP in separate
programs so every program stays far below 15 (counted in tests).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

from anec.diagnostics import AnecError
from anec.ir.builder import Builder
from anec.ir.graph import Graph, Value

MASK_NEG = -1e4
"""Additive mask value for a forbidden position. Finite (fp16 has no room for
-inf arithmetic: -inf - -inf is NaN) and large enough that exp() underflows to 0."""

DEFAULT_MIN_SURFACE = 49152


class ModelError(AnecError):
    """Bad input to a model frontend (config, prompt, bucket, adapter)."""


# ---- layout --------------------------------------------------------------------


def to_bc1s(x: np.ndarray, width: int | None = None, dtype: Any = np.float32) -> np.ndarray:
    """``[S, C]`` host rows -> ``[1, C, 1, width]`` (zero-padded on the right)."""
    s, c = x.shape
    width = s if width is None else width
    if s > width:
        raise ModelError(f"{s} positions do not fit a bucket of {width}")
    out = np.zeros((1, c, 1, width), dtype=dtype)
    out[0, :, 0, :s] = x.T
    return out


def from_bc1s(x: np.ndarray, n: int | None = None) -> np.ndarray:
    """``[1, C, 1, S]`` -> ``[n, C]`` host rows (the first ``n`` positions)."""
    x = np.asarray(x)
    rows = x[0, :, 0, :].T
    return rows if n is None else rows[:n]


def causal_mask(s: int) -> np.ndarray:
    """``[1, 1, s, s]`` additive mask: 0 where key j <= query i, else MASK_NEG."""
    m = np.triu(np.full((s, s), MASK_NEG, dtype=np.float32), k=1)
    return m.reshape(1, 1, s, s).astype(np.float16)


# ---- buckets ---------------------------------------------------------------------


def min_bucket(channels: int, itemsize: int = 4, min_surface: int = DEFAULT_MIN_SURFACE,
               floor: int = 16) -> int:
    """Smallest power of two >= ``floor`` whose ``[1, C, 1, S]`` surface reaches ``min_surface``."""
    s = floor
    while channels * s * itemsize < min_surface:
        s *= 2
    return s


def bucket_list(smallest: int, largest: int) -> list[int]:
    """Powers of two from ``smallest`` up to the first one >= ``largest``."""
    out = [smallest]
    while out[-1] < largest:
        out.append(out[-1] * 2)
    return out


def pick_bucket(n: int, buckets: Sequence[int], what: str = "sequence") -> int:
    """The first bucket >= ``n``."""
    for b in sorted(buckets):
        if b >= n:
            return b
    raise ModelError(f"{what} of {n} positions exceeds the largest bucket ({max(buckets)})",
                     hint="use a shorter prompt or fewer new tokens")


def target_limits(target: str | None) -> tuple[str, int]:
    """``(target name, min surface bytes)`` for ``target`` (default target if None)."""
    from anec.targets import DEFAULT_TARGET, get_target

    t = get_target(target or DEFAULT_TARGET)
    return t.name, int(t.min_surface_bytes)


# ---- IR building blocks -------------------------------------------------------------


class ModelBuilder(Builder):
    """A :class:`Builder` with the transformer decompositions the frontends share.

    Scalars are fp16 ``const(value=...)`` nodes, one per distinct value and
    reused. Names are given explicitly (``prefix_part``) so the printed IR
    reads like hand-written IR.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._scalars: dict[float, Value] = {}

    # -- leaves
    def scalar(self, value: float) -> Value:
        """An fp16 scalar const (shared by every use of the same value)."""
        v = float(np.float16(value))
        if v not in self._scalars:
            label = f"{value:g}".replace("-", "m").replace(".", "p").replace("+", "")
            self._scalars[v] = self.const_value(value, "fp16[]", name=self._fresh(f"c_{label}"))
        return self._scalars[v]

    def weight(self, key: str, shape: Sequence[int], name: str) -> Value:
        """An fp16 weight const for checkpoint ``key`` with declared ``shape``."""
        return self.const_weight(key, f"fp16[{', '.join(str(int(d)) for d in shape)}]", name=self._fresh(name))

    def _fresh(self, name: str) -> str:
        return self.graph.fresh_name(name)

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


def count_blob_tensors(graph: Graph) -> int:
    """Number of distinct weight consts (BLOBFILE tensors) a program holds."""
    return len({(n.attrs["weight"], str(n.attrs.get("perm")), str(n.attrs.get("slice")))
                for n in graph.nodes if n.op == "const" and "weight" in n.attrs})


def weight_keys(graph: Graph) -> list[str]:
    """Checkpoint keys referenced by ``graph`` (in order of first use)."""
    seen: dict[str, None] = {}
    for n in graph.nodes:
        if n.op == "const" and "weight" in n.attrs:
            seen.setdefault(n.attrs["weight"], None)
    return list(seen)


# ---- progress -------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr; silent when not a TTY or when quiet."""

    def __init__(self, enabled: bool | None = None, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = bool(enabled)
        self._label = ""
        self._total = 0
        self._done = 0
        self._t0 = 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._done, self._t0 = label, max(total, 1), 0, time.perf_counter()
        self._draw("")

    def step(self, note: str = "", n: int = 1) -> None:
        self._done = min(self._total, self._done + n)
        self._draw(note)

    def finish(self, note: str = "") -> None:
        if self.enabled:
            self._draw(note)
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, note: str) -> None:
        if not self.enabled:
            return
        width = 24
        fill = int(width * self._done / self._total)
        dt = time.perf_counter() - self._t0
        line = (f"\r{self._label:<9} [{'#' * fill}{'.' * (width - fill)}] "
                f"{self._done}/{self._total} {dt:6.1f}s {note}")
        self.stream.write(line[:120].ljust(80))
        self.stream.flush()


# ---- programs ---------------------------------------------------------------------------


class InterpProgram:
    """A graph run by the reference interpreter in fp16 mode (the sim's numerics).

    Used as the ``"interp"`` backend: the same call convention as a runtime
    program, ``prog(**inputs) -> {output: array}``, with fp32 outputs."""

    def __init__(self, graph: Graph, weights: Any) -> None:
        self.graph = graph
        self.weights = weights

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        from anec.ir.interp import interpret

        out = interpret(self.graph, inputs, self.weights, mode="fp16")
        return {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}


class ProgramCache:
    """Builds, compiles and loads each program once, then hands it out by name.

    ``get(name, build)`` calls ``build()`` (returning a Graph) the first time a
    name is asked for, compiles it in memory with
    :func:`anec.compiler.compile_module` (also writing ``cache_dir/<name>/``
    when a directory is given) and loads it into one shared runtime. Names
    carry the bucket (``L3_attn_d16_t128``), so each bucket compiles once per
    process. ``transform`` (e.g. adding LoRA inputs) runs on every built graph
    and what it returns is kept in ``extras[name]``. Backend ``"interp"`` skips
    the compiler and runs graphs in the reference interpreter instead.
    """

    def __init__(self, weight_fn: Callable[[str], np.ndarray], backend: str = "auto",
                 target: str | None = None, cache_dir: str | os.PathLike | None = None,
                 transform: Callable[[Graph], Any] | None = None) -> None:
        self.weight_fn = weight_fn
        self.backend = backend
        self.target = target
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.transform = transform
        self.graphs: dict[str, Graph] = {}
        self.programs: dict[str, Any] = {}
        self.extras: dict[str, Any] = {}
        self.compile_seconds = 0.0
        self._runtime = None

    @property
    def runtime(self) -> Any:
        """The shared :class:`anec.runtime.Runtime` (None for the interpreter)."""
        if self._runtime is None and self.backend != "interp":
            from anec.runtime import Runtime

            self._runtime = Runtime(backend=self.backend)
        return self._runtime

    def weights_for(self, graph: Graph) -> dict[str, np.ndarray]:
        return {k: self.weight_fn(k) for k in weight_keys(graph)}

    def get(self, name: str, build: Callable[[], Graph]) -> Any:
        prog = self.programs.get(name)
        if prog is not None:
            return prog
        graph = build()
        if graph.name != name:
            raise AssertionError(f"program {name} built a func named {graph.name}")
        if self.transform is not None:
            self.extras[name] = self.transform(graph)
        self.graphs[name] = graph
        t0 = time.perf_counter()
        if self.backend == "interp":
            prog = InterpProgram(graph, self.weights_for(graph))
        else:
            prog = self._compile_and_load(graph)
        self.compile_seconds += time.perf_counter() - t0
        self.programs[name] = prog
        return prog

    def _compile_and_load(self, graph: Graph) -> Any:
        from anec.compiler import compile_module
        from anec.weights import WeightStore

        store = WeightStore(self.weights_for(graph), source=f"<{graph.name} weights>")
        # host_casts: on targets without fp32 I/O (m1, m2) the host converts fp32 <-> fp16
        result = compile_module(Builder.module(graph), weights=store, target=self.target or "m4",
                                out_dir=self.cache_dir, host_casts=True, keep_funcs=True)
        return self.runtime.load(result.artifacts[graph.name])

    def stats(self) -> dict[str, Any]:
        """Runtime counters (compiles, loads, reloads, evaluations...) plus
        ``programs`` (built here) and ``compile_seconds`` (build + compile + load)."""
        out: dict[str, Any] = {}
        if self._runtime is not None:
            out.update(self._runtime.stats)
        out["programs"] = len(self.programs)
        out["compile_seconds"] = self.compile_seconds
        return out

    def close(self) -> None:
        """Release every program and the runtime."""
        self.programs.clear()
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
