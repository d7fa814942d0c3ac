"""ATen lowerings of host work at the outputs: argmax, argmin, topk and sampling.

These ops have no IR form; when their results are module outputs, the host
computes them in numpy from a program output (:class:`~anec.frontends.aten.values.HostValue`,
applied by :class:`~anec.frontends.torch.runner.TorchRunner`). Only view ops may
follow them before the outputs.
"""

from __future__ import annotations

from typing import Any

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.table import Family
from anec.frontends.aten.values import Args, Deferred, HostValue, Lowered, Operand, shape_of
from anec.frontends.fx import node_location

HOST = Family("host (at the outputs)")


def host_value(lw: Lowering, x: Operand, op: str, **params: Any) -> HostValue:
    """``op`` applied by the host to ``x`` (a program output, or an earlier host value)."""
    if isinstance(x, HostValue):
        src = x
        return src.then({"op": op, **params}, _host_shape(shape_of(x), op, params))
    source = lw.host_source(x)
    hv = HostValue(source, [], shape_of(x), "float32", node_location(lw.node))
    return hv.then({"op": op, **params}, _host_shape(shape_of(x), op, params),
                   "int64" if op in ("argmax", "argmin", "multinomial") else "float32")


def _host_shape(s: tuple[int, ...], op: str, p: dict) -> tuple[int, ...]:
    if not s and op in ("argmax", "argmin", "topk_values", "topk_indices"):
        return ()  # a 0-d tensor: its only dim (0 or -1) is the tensor itself
    if op in ("argmax", "argmin"):
        if p.get("dim") is None:
            return (1,) * len(s) if p.get("keepdim") else ()
        d = p["dim"] % len(s)
        return tuple(1 if i == d else n for i, n in enumerate(s)) if p.get("keepdim") else \
            tuple(n for i, n in enumerate(s) if i != d)
    if op in ("topk_values", "topk_indices"):
        d = p["dim"] % len(s)
        return tuple(p["k"] if i == d else n for i, n in enumerate(s))
    if op == "multinomial":
        return s[:-1] + (p["num_samples"],)
    return s


@HOST.op("argmax.default", ir="host: numpy argmax of a program output")
def lower_argmax(lw: Lowering, a: Args) -> Lowered:
    return host_value(lw, a["self"], "argmax", dim=a.get("dim"), keepdim=bool(a.get("keepdim", False)))


@HOST.op("argmin.default", ir="host: numpy argmin of a program output")
def lower_argmin(lw: Lowering, a: Args) -> Lowered:
    return host_value(lw, a["self"], "argmin", dim=a.get("dim"), keepdim=bool(a.get("keepdim", False)))


@HOST.op("topk.default", ir="host: top-k values and indices of a program output")
def lower_topk(lw: Lowering, a: Args) -> Lowered:
    p = {"k": int(a["k"]), "dim": int(a.get("dim", -1)), "largest": bool(a.get("largest", True))}
    x, node = a["self"], lw.node
    return (Deferred(lambda: host_value(lw, x, "topk_values", **p), node),
            Deferred(lambda: host_value(lw, x, "topk_indices", **p), node))


@HOST.op("multinomial.default", ir="host: sampling from a program output (probabilities)")
def lower_multinomial(lw: Lowering, a: Args) -> Lowered:
    if bool(a.get("replacement")) is False and int(a["num_samples"]) > 1:
        raise lw.fail("multinomial without replacement of several samples",
                      "sample one token at a time, or use replacement=True")
    return host_value(lw, a["self"], "multinomial", num_samples=int(a["num_samples"]))
