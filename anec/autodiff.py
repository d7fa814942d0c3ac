"""Reverse-mode autodiff over the anec IR: backward funcs as ordinary IR.

:func:`grad` takes a func and returns a :class:`Backward`: a backward func
that maps the forward inputs and a cotangent per differentiated output to the
gradients of the requested inputs and weights. It is plain IR: it goes
through the same passes, partitioning and runtime as any func, so a backward
program runs on the ANE (the sim here) like a forward one.

Each op's vector-Jacobian product is a rule in the op's row of the op table
(``OpDef.vjp``; the rules are in :mod:`anec.ir.vjp`, :data:`VJP` maps op
names to them). A rule receives the forward
node, its operands and results as values of the backward func, and the
cotangent of each result; it emits IR that computes the cotangent of each
operand that needs one. Cotangents of a value used several times are added.
A cotangent may have a *broadcast* shape (a ``reduce_sum`` over channels
hands back ``[1, 1, 1, S]`` for a ``[1, C, 1, S]`` operand): elementwise
rules and accumulation broadcast it for free, and it is materialized only
where a rule needs the full shape.

Saved or recomputed activations (``mode``)
==========================================

A rule reads forward values (``exp``'s result, ``mul``'s other operand,
``matmul``'s operands). Where they come from is the one choice:

* ``"recompute"`` (default): the backward func recomputes, from the forward
  inputs, exactly the forward values its rules read (and nothing else). One
  program per direction, no extra forward outputs, no activations crossing
  the host; costs a second forward pass inside the backward program. On the
  ANE compute is the cheap part (a program call costs ~0.1 ms of dispatch
  whatever it computes), so this is the default.
* ``"save"``: the forward func returns every value the rules read (as extra
  outputs, the :attr:`Backward.saved` names) and the backward func takes
  them as inputs. No recompute; every saved tensor makes a round trip
  through host memory.

Weights
=======

A weight const requested in ``weights`` gets a backward output (one per
distinct const view: ``weight=``, ``perm=``, ``slice=``): the gradient of the
view, in the view's declared shape. :meth:`Backward.gather` maps those
outputs back to the checkpoint tensors (inverse reshape, slice placement,
inverse permutation, summed over views): a gradient per checkpoint key with
the checkpoint's shape. ``conv1x1``'s input gradient reads the weight
transposed; where the transpose composes with the const's view, it is the
same checkpoint tensor under another ``perm=`` (a weight baked transposed,
as the prior ANE trainers do by hand), otherwise a ``transpose`` op.

Not differentiable (an error naming the node when a gradient must flow
through it): integer and bool values, ``pow`` with respect to its exponent
(the IR has no ``log``), strided ``slice``. Approximations, stated in the
rules' docstrings: ``relu``'s step (exact for ``|x| >= 2**-11`` in fp16) and
``reduce_max``'s argmax mask (exact except for values within ``2**-11`` of
the maximum), because the IR has no comparison op; ``gelu`` (both modes)
differentiates the tanh formula that the ANE computes (legalize rewrites
exact GELU to it, ANE-GELU).

Example::

    from anec.autodiff import grad
    bw = grad(module.funcs["mlp"], weights="all", inputs=["x"])
    # bw.backward: func mlp_grad(%x, %d_y) -> (%d_x, %g_fc_weight, ...)
    grads = bw.gather(outputs_of_the_backward_program, checkpoint)
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from anec.diagnostics import AnecError
from anec.ir.builder import Builder
from anec.ir.graph import Graph
from anec.ir.nodes import Node, Value
from anec.ir.ops import OPS


class AutodiffError(AnecError):
    """A func cannot be differentiated as asked (names the node and why)."""


# ---------------------------------------------------------------------------
# the result
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightGrad:
    """A backward output holding the gradient of one weight const view."""

    output: str
    key: str
    perm: tuple[int, ...] | None
    slice: tuple[int, int, int] | None
    shape: tuple[int, ...]
    """The view's declared shape (the output's shape)."""


@dataclass(frozen=True)
class HostGrad:
    """A conv weight whose gradient the host computes: ``dW = sum over positions of g x^T`` from
    two backward outputs, the conv's input ``x`` and its output's cotangent ``g``."""

    x: str
    g: str
    key: str
    perm: tuple[int, ...] | None
    slice: tuple[int, int, int] | None
    shape: tuple[int, ...]


def host_conv_grad(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``dW [Cout, Cin, 1, 1]`` of a 1x1 conv from ``x [N, Cin, H, W]`` and ``g [N, Cout, H, W]``
    (fp32 BLAS)."""
    n, ci = x.shape[:2]
    co = g.shape[1]
    x3 = np.asarray(x, np.float32).reshape(n, ci, -1)
    g3 = np.asarray(g, np.float32).reshape(n, co, -1)
    return np.einsum("nop,nip->oi", g3, x3, optimize=True).reshape(co, ci, 1, 1) if n > 1 else \
        (g3[0] @ x3[0].T).reshape(co, ci, 1, 1)


@dataclass
class Backward:
    """A func's backward func and how its interface maps to the forward one."""

    forward: Graph
    """The forward func (with the saved values as extra outputs in ``"save"`` mode)."""
    backward: Graph
    cotangents: dict[str, str]
    """Forward output name -> backward input holding its cotangent."""
    input_grads: dict[str, str]
    """Forward input name -> backward output holding its gradient."""
    weight_grads: list[WeightGrad]
    saved: list[str] = field(default_factory=list)
    """``"save"`` mode: forward values returned by the forward func and taken by the backward one."""
    mode: str = "recompute"
    host_grads: list[HostGrad] = field(default_factory=list)
    """``weight_grads="host"``: conv weights whose gradient :meth:`gather` computes on the host."""

    @property
    def weight_keys(self) -> list[str]:
        """Checkpoint keys with a gradient, in first-use order."""
        return list(dict.fromkeys([*(w.key for w in self.weight_grads), *(h.key for h in self.host_grads)]))

    def gather(self, outputs: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]],
               device: bool = True, host: bool = True, keys: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """Checkpoint key -> gradient (fp32, the checkpoint's shape), from the backward outputs.

        ``shapes``: checkpoint key -> tensor shape (a WeightStore, or any mapping
        whose values have ``.shape`` or are shapes). Views of one key are summed.
        ``device``/``host``: include the gradients the backward func computed / the
        host-computed conv weight gradients (to run the two parts on different threads).
        ``keys``: only these keys (None: every key)."""
        want = None if keys is None else set(keys)
        out: dict[str, np.ndarray] = {}
        for w in self.weight_grads if device else ():
            if want is None or w.key in want:
                _add_view(out, w.key, np.asarray(outputs[w.output]), _shape_of(shapes[w.key]), w.perm, w.slice)
        for h in self.host_grads if host else ():
            if want is None or h.key in want:
                dw = host_conv_grad(outputs[h.x], outputs[h.g])
                _add_view(out, h.key, dw, _shape_of(shapes[h.key]), h.perm, h.slice)
        return out


def _shape_of(src: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in getattr(src, "shape", src))


def _add_view(out: dict[str, np.ndarray], key: str, g: np.ndarray, shape: tuple[int, ...],
              perm: Sequence[int] | None, sl: Sequence[int] | None) -> None:
    """``out[key] += unview(g, ...)``, ``out[key]`` starting from zeros: the view's elements are
    read once, converted to fp32 on the way, and only a sliced view zero-fills (what adding into
    zeros gives: ``0 + x``, which is ``x`` but for -0 becoming +0)."""
    dst = out.get(key)
    if dst is None and sl is None:
        out[key] = dst = np.empty(shape, np.float32)
        np.add(_unpermuted(g, shape, perm), np.float32(0.0), out=dst)
        return
    if dst is None:
        out[key] = dst = np.zeros(shape, np.float32)
    if sl is None:
        dst += _unpermuted(g, shape, perm)
        return
    part, idx = _slice_of(shape, perm, sl)
    (dst if perm is None else np.transpose(dst, perm))[idx] += g.reshape(part)


def _unpermuted(g: np.ndarray, shape: tuple[int, ...], perm: Sequence[int] | None) -> np.ndarray:
    """The whole view ``g`` (of the tensor permuted by ``perm``) seen in the tensor's shape (no copy)."""
    if perm is None:
        return g.reshape(shape)
    return np.transpose(g.reshape(tuple(shape[i] for i in perm)), np.argsort(perm))


def _slice_of(shape: tuple[int, ...], perm: Sequence[int] | None, sl: Sequence[int]
              ) -> tuple[list[int], tuple[slice, ...]]:
    """The view's shape and its index in the permuted tensor, for a view sliced ``(axis, start, stop)``."""
    pshape = [shape[i] for i in perm] if perm is not None else list(shape)
    axis, start, stop = (int(v) for v in sl)
    pshape[axis] = stop - start
    idx = [slice(None)] * len(pshape)
    idx[axis] = slice(start, stop)
    return pshape, tuple(idx)


def unview(g: np.ndarray, shape: Sequence[int], perm: Sequence[int] | None,
           sl: Sequence[int] | None) -> np.ndarray:
    """The gradient of a checkpoint tensor of ``shape`` from the gradient ``g`` of its view
    (the inverse of ``const``'s perm -> slice -> reshape): a new fp32 array, written in one pass
    (a sliced view zero-fills the rest first)."""
    shape = tuple(int(d) for d in shape)
    if sl is None:
        return np.array(_unpermuted(g, shape, perm), dtype=np.float32, order="C")
    full = np.zeros(shape, np.float32)
    part, idx = _slice_of(shape, perm, sl)
    (full if perm is None else np.transpose(full, perm))[idx] = g.reshape(part)
    return full


# ---------------------------------------------------------------------------
# the context a rule emits into
# ---------------------------------------------------------------------------


class Ctx:
    """What a VJP rule uses: the backward builder and helpers that keep shapes and dtypes right."""

    def __init__(self, b: Builder, node: Node | None, needs: list[bool]) -> None:
        self.b = b
        self.node = node
        self.needs = needs
        """``needs[i]``: operand i (then optional operands, in the op's order) wants a cotangent."""

    # -- building
    def op(self, opname: str, *args: Value, **kw: Any) -> Value:
        hint = self.node.results[0].name if self.node is not None and self.node.results else "g"
        v = self.b.op(opname, *args, name=self.b.graph.fresh_name(f"d{hint}_{opname}"), **kw)
        assert isinstance(v, Value)
        if v.producer is not None and self.node is not None:
            v.producer.span = self.node.span
        return v

    def scalar(self, value: float, like: Value) -> Value:
        """A rank-0 const of ``like``'s dtype."""
        dt = like.type.dtype
        return self.b.const_value(float(value), f"{dt.value}[]", name=self.b.graph.fresh_name("c"))

    def sum_to(self, g: Value, shape: Sequence[int]) -> Value:
        """``g`` summed over the axes it broadcast along, to ``shape`` (rank adjusted)."""
        shape = tuple(shape)
        if g.type.shape == shape:
            return g
        gs = g.type.shape
        lead = len(gs) - len(shape)
        if lead < 0:  # a broadcast-shaped cotangent of lower rank: give it the rank of shape
            g = self.op("reshape", g, shape=[1] * -lead + list(gs))
            gs, lead = g.type.shape, 0
        axes = [i for i in range(len(gs)) if i < lead or (gs[i] != 1 and shape[i - lead] == 1)]
        if axes:
            g = self.op("reduce_sum", g, axes=axes, keep_dims=True)
        if g.type.shape != shape:
            g = self.op("reshape", g, shape=list(shape))
        return g

    def full(self, g: Value, shape: Sequence[int]) -> Value:
        """``g`` (broadcastable to ``shape``) materialized at ``shape``."""
        shape = tuple(shape)
        if g.type.shape == shape:
            return g
        z = self.b.const_value(0.0, f"{g.type.dtype.value}[{', '.join(map(str, shape))}]",
                               name=self.b.graph.fresh_name("zeros"))
        return self.op("add", z, g)

    def fail(self, why: str, hint: str | None = None) -> AutodiffError:
        n = self.node
        assert n is not None
        return AutodiffError(f"cannot differentiate %{n.results[0].name} ({n.op}): {why}", n.span, hint=hint)


Rule = Callable[[Ctx, list[Value], list[Value], list["Value | None"], dict[str, Any]], list["Value | None"]]
"""``rule(ctx, operands, results, cotangents, attrs) -> cotangent per operand (None: none)``."""


VJP: dict[str, Rule] = {name: op.vjp for name, op in OPS.items() if op.vjp is not None}
"""Op name -> VJP rule: the ``vjp`` column of the op table (:mod:`anec.ir.vjp`; every op but
``const``, whose cotangent is a weight gradient)."""


# ---------------------------------------------------------------------------
# fused rules: subgraphs whose op-by-op VJP would overflow fp16
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fused:
    """A subgraph differentiated as a whole: ``match(node)`` returns the operands the whole
    reads and the inner nodes it covers (no rule runs for them), or None."""

    name: str
    match: Callable[[Node], "tuple[list[Value], list[Node]] | None"]
    rule: Rule


def _producer(v: Value, op: str) -> Node | None:
    p = v.producer
    return p if p is not None and p.op == op else None


def _match_normalize(node: Node) -> "tuple[list[Value], list[Node]] | None":
    """``y = a * rsqrt(mean(a * a, axes, keep) + eps)`` (RMSNorm, and LayerNorm after its mean
    subtraction); ``pow(v, -0.5)`` for ``rsqrt`` and no ``eps`` also match."""
    if node.op != "mul":
        return None
    for a, r in (node.operands, node.operands[::-1]):
        rs = _producer(r, "rsqrt")
        if rs is None:
            rs = _producer(r, "pow")
            e = rs.operands[1].producer if rs is not None else None
            if e is None or e.op != "const" or e.attrs.get("value") not in (-0.5,):
                continue
        v = rs.operands[0]
        inner = [rs]
        add = _producer(v, "add")
        if add is not None:
            const = [x for x in add.operands if x.producer is not None and x.producer.op == "const"
                     and x.type.rank == 0]
            if len(const) != 1:
                continue
            m = next(x for x in add.operands if x is not const[0])
            inner.append(add)
        else:
            m = v
        red = _producer(m, "reduce_mean")
        if red is None or not red.attrs.get("keep_dims"):
            continue
        sq = _producer(red.operands[0], "mul")
        if sq is None or sq.operands[0] is not a or sq.operands[1] is not a:
            continue
        inner += [red, sq]
        # the inner values feed only this subgraph (else their other uses need their own VJPs)
        members = {id(n) for n in inner} | {id(node)}
        if all(all(id(u) in members for u in n.result.uses) for n in inner):
            return [a], inner
    return None


def _vjp_normalize(c, xs, ys, gs, attrs):
    """``y = a * rstd``, ``rstd = (mean(a^2) + eps)^-1/2`` over ``axes``:
    ``da = rstd * (g - y * mean(g * y))``. Never forms ``rstd^3`` (which overflows fp16 for a
    variance below ~1e-3), unlike the op-by-op chain."""
    y = ys[0]
    axes = attrs["axes"]
    g = c.full(gs[0], y.type.shape)
    rstd = attrs["rstd"]
    m = c.op("reduce_mean", c.op("mul", g, y), axes=list(axes), keep_dims=True)
    return [c.op("mul", c.op("sub", g, c.op("mul", y, m)), rstd)]


FUSED: list[Fused] = [Fused("normalize", _match_normalize, _vjp_normalize)]
"""Fused rules, tried on every node before its own op's rule."""


# ---------------------------------------------------------------------------
# grad
# ---------------------------------------------------------------------------


def _select_weights(graph: Graph, weights: "str | Iterable[str] | None") -> set[int]:
    consts = [n for n in graph.nodes if n.op == "const" and "weight" in n.attrs]
    if weights is None:
        return set()
    pats = [weights] if isinstance(weights, str) else list(weights)
    chosen: set[int] = set()
    for pat in pats:
        hit = [n for n in consts if pat == "all" or fnmatch.fnmatchcase(n.attrs["weight"], pat)]
        if not hit:
            keys = sorted({n.attrs["weight"] for n in consts})
            from anec.diagnostics import did_you_mean

            raise AutodiffError(f"no weight of func '{graph.name}' matches '{pat}'",
                                graph.span, hint=did_you_mean(pat, keys) or f"weights: {', '.join(keys[:8])}")
        chosen.update(id(n) for n in hit)
    return chosen


def _safe(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else f"w_{s}"


def grad(graph: Graph, *, weights: "str | Iterable[str] | None" = "all",
         inputs: Iterable[str] = (), outputs: Iterable[str] | None = None,
         mode: str = "recompute", weight_shapes: Mapping[str, Any] | None = None,
         weight_grads: str = "device") -> Backward:
    """The backward func of ``graph``.

    ``weights``: ``"all"``, glob patterns or keys of weight consts to differentiate
    (None: none). ``inputs``: func inputs to differentiate. ``outputs``: the
    differentiated outputs (default: every float output); each gets a cotangent
    input ``d_<name>``. ``mode``: ``"recompute"`` or ``"save"`` (module docstring).
    ``weight_grads``: ``"device"`` (the backward func computes every weight
    gradient) or ``"host"`` (conv weights' gradients are left to the host: the
    backward func returns each such conv's input and output cotangent, and
    :meth:`Backward.gather` multiplies them in fp32).
    ``weight_shapes``: checkpoint key -> stored tensor (or its shape), e.g. the
    WeightStore: lets a conv's transposed weight be a const view of the same
    checkpoint tensor instead of a transpose op.
    """
    if mode not in ("recompute", "save"):
        raise AutodiffError(f"unknown mode '{mode}'", hint="use recompute or save")
    if weight_grads not in ("device", "host"):
        raise AutodiffError(f"unknown weight_grads '{weight_grads}'", hint="use device or host")
    in_names = list(inputs)
    by_name = {v.name: v for v in graph.inputs}
    for n in in_names:
        if n not in by_name:
            from anec.diagnostics import did_you_mean

            raise AutodiffError(f"func '{graph.name}' has no input '{n}'", graph.span,
                                hint=did_you_mean(n, by_name) or f"inputs: {', '.join(by_name)}")
        if not by_name[n].type.dtype.is_float:
            raise AutodiffError(f"input '{n}' is {by_name[n].type}: only float values have gradients",
                                by_name[n].span)
    out_vals = [v for v in graph.outputs if v.type.dtype.is_float] if outputs is None else []
    if outputs is not None:
        names = {v.name: v for v in graph.outputs}
        for n in outputs:
            if n not in names:
                raise AutodiffError(f"func '{graph.name}' returns no '{n}'", graph.span,
                                    hint=f"outputs: {', '.join(names)}")
            out_vals.append(names[n])
    if not out_vals:
        raise AutodiffError(f"func '{graph.name}' has no float output to differentiate", graph.span)
    wsel = _select_weights(graph, weights)
    if not wsel and not in_names:
        raise AutodiffError("nothing to differentiate", graph.span,
                            hint="name weights (weights='all' or globs) or inputs")

    # which values carry a gradient: depend on a chosen leaf and reach a chosen output
    src: set[int] = {id(by_name[n]) for n in in_names}
    for node in graph.nodes:
        if node.op == "const":
            if id(node) in wsel:
                src.add(id(node.result))
            continue
        if any(id(v) in src for v in node.inputs()):
            for r in node.results:
                if r.type.dtype.is_float:
                    src.add(id(r))
    reach: set[int] = {id(v) for v in out_vals}
    for node in reversed(graph.nodes):
        if any(id(r) in reach for r in node.results):
            reach.update(id(v) for v in node.inputs())
    live = src & reach
    fused_at: dict[int, tuple[Fused, list[Value], list[Node]]] = {}
    covered: set[int] = set()
    for node in graph.nodes:
        if node.op == "const" or id(node.results[0]) not in live or id(node) in covered:
            continue
        for f in FUSED:
            hit = f.match(node)
            if hit is not None:
                fused_at[id(node)] = (f, hit[0], hit[1])
                covered.update(id(n) for n in hit[1])
                break

    bname = f"{graph.name}_grad"
    b = Builder(bname)
    b.graph.span = graph.span
    b.graph.facts.weight_shapes = {k: tuple(getattr(v, "shape", v)) for k, v in (weight_shapes or {}).items()}
    fwd: dict[int, Value] = {}
    saved: list[Value] = []
    for v in graph.inputs:
        fwd[id(v)] = b.input(v.name, v.type)
        fwd[id(v)].span = v.span
    cot_in: dict[str, str] = {}
    cots: dict[int, Value] = {}
    for v in out_vals:
        name = b.graph.fresh_name(f"d_{v.name}")
        cots[id(v)] = b.input(name, v.type)
        cot_in[v.name] = name

    def get(v: Value) -> Value:
        """The forward value ``v`` in the backward func: recomputed, or a saved input."""
        got = fwd.get(id(v))
        if got is not None:
            return got
        p = v.producer
        assert p is not None
        if p.op == "const":
            nv = b.const_weight(p.attrs["weight"], v.type, name=b.graph.fresh_name(v.name),
                                **{k: p.attrs[k] for k in ("perm", "slice") if p.attrs.get(k) is not None}) \
                if "weight" in p.attrs else b.const_value(p.attrs["value"], v.type, name=b.graph.fresh_name(v.name))
            nv.producer.span = p.span
            fwd[id(v)] = nv
            return nv
        if mode == "save":
            nv = b.input(b.graph.fresh_name(v.name), v.type)
            fwd[id(v)] = nv
            saved.append(v)
            return nv
        args = [get(a) for a in p.operands]
        opt = {k: get(a) for k, a in p.optional.items()}
        res = b.op(p.op, *args, names=[b.graph.fresh_name(r.name) for r in p.results], **opt, **p.attrs)
        res = res if isinstance(res, tuple) else (res,)
        for r, nr in zip(p.results, res):
            fwd[id(r)] = nr
        res[0].producer.span = p.span
        return fwd[id(v)]

    host_pairs: list[tuple[Value, Value, Node]] = []  # (conv input, conv result, weight const)

    def accumulate(v: Value, g: Value) -> None:
        if g.type.dtype != v.type.dtype:
            g = b.op("cast", g, dtype=v.type.dtype.value, name=b.graph.fresh_name(f"d_{v.name}_c"))
        old = cots.get(id(v))
        cots[id(v)] = g if old is None else b.op("add", old, g, name=b.graph.fresh_name(f"d_{v.name}"))

    for node in reversed(graph.nodes):
        if node.op == "const" or id(node) in covered or not any(id(r) in live for r in node.results):
            continue
        gs = [cots.get(id(r)) if id(r) in live else None for r in node.results]
        if all(g is None for g in gs):
            continue
        if id(node) in fused_at:
            f, operands_f, inner = fused_at[id(node)]
            red = next(n for n in inner if n.op == "reduce_mean")
            rs = next(n for n in inner if n.op in ("rsqrt", "pow"))
            fctx = Ctx(b, node, [True])
            outs = f.rule(fctx, [get(operands_f[0])], [get(node.result)], gs,
                          {"axes": list(red.attrs["axes"]), "rstd": get(rs.result)})
            accumulate(operands_f[0], outs[0])
            continue
        operands = list(node.operands) + list(node.optional.values())
        needs = [id(v) in live for v in operands]
        if not any(needs):
            continue
        for v in operands:
            if id(v) in live and not v.type.dtype.is_float:
                raise AutodiffError(f"cannot differentiate %{node.results[0].name} ({node.op}): operand "
                                    f"%{v.name} is {v.type}", node.span)
        rule = OPS[node.op].vjp  # the op table's own column (rows added later included)
        if rule is None:
            raise AutodiffError(f"op '{node.op}' has no VJP rule", node.span)
        host_pair = None
        if (weight_grads == "host" and node.op == "conv1x1" and needs[1] and operands[1].producer is not None
                and id(operands[1].producer) in wsel):
            needs = list(needs)
            needs[1] = False  # the host computes it from x and the cotangent
            host_pair = (operands[0], node.result, operands[1].producer)
            if not any(needs):
                host_pairs.append(host_pair)
                continue
        ctx = Ctx(b, node, needs)
        xs = [get(v) for v in operands]
        ys = [get(r) if OPS[node.op].vjp_reads_results else fwd.get(id(r), r) for r in node.results]
        outs = rule(ctx, xs, list(ys), gs, dict(node.attrs))
        for v, g, need in zip(operands, outs, needs):
            if need and g is not None:
                accumulate(v, g)
        if host_pair is not None:
            host_pairs.append(host_pair)

    # outputs: input gradients, then weight view gradients
    results: list[Value] = []
    input_grads: dict[str, str] = {}
    ctx0 = Ctx(b, None, [])
    for n in in_names:
        v = by_name[n]
        g = cots.get(id(v))
        g = ctx0.full(g, v.type.shape) if g is not None else b.const_value(0.0, v.type, name=b.graph.fresh_name("zeros"))
        g = _named(b, g, f"d_{n}", results)
        input_grads[n] = g.name
        results.append(g)
    wgrads: list[WeightGrad] = []
    seen_views: dict[tuple, Value] = {}
    for node in graph.nodes:
        if id(node) not in wsel:
            continue
        v = node.result
        g = cots.get(id(v))
        if g is None:
            continue
        view = (node.attrs["weight"], _tup(node.attrs.get("perm")), _tup(node.attrs.get("slice")), v.type.shape)
        if view in seen_views:  # the same view twice (an un-merged duplicate const): one output
            prev = seen_views[view]
            summed = b.op("add", prev, ctx0.full(g, v.type.shape), name=b.graph.fresh_name(prev.name))
            results[results.index(prev)] = summed
            seen_views[view] = summed
            continue
        g = _named(b, ctx0.full(g, v.type.shape), f"g_{_safe(node.attrs['weight'])}", results)
        seen_views[view] = g
        results.append(g)
        wgrads.append(WeightGrad(g.name, node.attrs["weight"], view[1], view[2], tuple(v.type.shape)))
    # the names of merged views follow the final values
    final = {view: val for view, val in seen_views.items()}
    wgrads = [WeightGrad(final[(w.key, w.perm, w.slice, w.shape)].name, w.key, w.perm, w.slice, w.shape)
              for w in wgrads]
    hgrads: list[HostGrad] = []
    named_out: dict[int, Value] = {}
    for x, y, wnode in host_pairs:
        outs2 = []
        for v, hint in ((get(x), f"hx_{x.name}"), (ctx0.full(cots[id(y)], y.type.shape), f"hg_{y.name}")):
            if id(v) not in named_out:
                named_out[id(v)] = _named(b, v, hint, results)
                results.append(named_out[id(v)])
            outs2.append(named_out[id(v)].name)
        hgrads.append(HostGrad(outs2[0], outs2[1], wnode.attrs["weight"], _tup(wnode.attrs.get("perm")),
                               _tup(wnode.attrs.get("slice")), tuple(wnode.result.type.shape)))
    if not results:
        raise AutodiffError("no requested weight or input reaches a differentiated output", graph.span)
    b.ret(*results)
    b.graph.facts.weight_shapes = {}

    forward = graph
    if mode == "save" and saved:
        forward = graph.clone()
        ids = {id(v): i for i, v in enumerate(graph.values())}
        copies = list(forward.values())
        extra = [copies[ids[id(v)]] for v in saved]
        forward.set_outputs(list(forward.outputs) + [v for v in extra if v not in forward.outputs])
    return Backward(forward, b.graph, cot_in, input_grads, wgrads,
                    [v.name for v in saved], mode, hgrads)


def _tup(v: Any) -> Any:
    return tuple(int(x) for x in v) if v is not None else None


def _named(b: Builder, v: Value, hint: str, taken: list[Value]) -> Value:
    """``v`` under a readable output name: renamed, or an identity when ``v`` is an input, a
    const or already an output."""
    name = b.graph.fresh_name(hint)
    if v.producer is None or v.producer.op == "const" or any(v is t for t in taken):
        return b.op("identity", v, name=name)
    b.graph.rename_value(v, name)
    return v


__all__ = ["AutodiffError", "Backward", "Ctx", "FUSED", "Fused", "HostGrad", "VJP", "WeightGrad", "grad",
           "host_conv_grad", "unview"]
