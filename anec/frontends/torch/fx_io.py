"""The program I/O of an import: names, identifiers, entry layouts and layout stats.

Output names come from the export's output pytree (``last_hidden_state``,
``output_0``), made identifiers MIL can spell and unique; an input enters the
program in the channel layout when a linear layer reads it (:func:`entry_view`:
the one transpose that linear layers, norms and residual adds share), else as
it is. :func:`layout_stats` counts the layout ops of the imported func.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Iterable

from anec.frontends.fx import aten_base
from anec.frontends.tensor_views import Emitter, View, channel_view, natural, to_channels
from anec.ir.graph import Graph
from anec.ir.nodes import Value

if TYPE_CHECKING:
    import torch


def leaf_names(spec: Any, n: int) -> list[str]:
    """Output names from the export's output pytree (``last_hidden_state``, ``output_0``)."""
    names: list[str] = []

    def walk(s: Any, prefix: str) -> None:
        kids = list(s.children()) if hasattr(s, "children") else list(s.children_specs)
        if s.is_leaf():
            names.append(prefix or "output")
            return
        ctx = getattr(s, "context", None)
        keys = None
        if isinstance(ctx, (list, tuple)) and len(ctx) == len(kids) and all(isinstance(k, str) for k in ctx):
            keys = list(ctx)
        for i, kid in enumerate(kids):
            part = keys[i] if keys else str(i)
            walk(kid, f"{prefix}_{part}" if prefix else (part if keys else f"output_{i}"))

    try:
        walk(spec, "")
    except Exception:  # an unusual pytree: plain names
        names = []
    if len(names) != n:
        names = ["output"] if n == 1 else [f"output_{i}" for i in range(n)]
    return names


def ident(name: str) -> str:
    """``name`` as an identifier (other characters become ``_``; a leading digit gets ``v_``)."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
    return out if out[0].isalpha() or out[0] == "_" else "v_" + out


def unique_names(names: Iterable[str], taken: set[str]) -> list[str]:
    """Each name, suffixed ``_1``, ``_2``... while taken; each result is then taken."""
    out = []
    for n in names:
        base, i, cand = n, 1, n
        while cand in taken:
            cand = f"{base}_{i}"
            i += 1
        taken.add(cand)
        out.append(cand)
    return out



def dtype_name(dt: torch.dtype) -> str:
    """``float32`` for ``torch.float32``."""
    return str(dt).replace("torch.", "")


LINEAR_OPS = ("mm", "addmm", "bmm", "matmul", "baddbmm")

SPATIAL_OPS = ("convolution", "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d",
            "upsample_nearest2d", "upsample_nearest1d", "upsample_bilinear2d", "upsample_linear1d")
"""Layers that read their input as it is (NCHW): the search for linear layers stops there."""


def feeds_linear(node: torch.fx.Node) -> bool:
    """Whether a linear layer (which wants the channel layout) reads ``node``'s value,
    directly or through other ops (not through a spatial layer, which reads the
    tensor as it is): then the input enters in the channel layout."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        for u in n.users:
            if u in seen:
                continue
            seen.add(u)
            if aten_base(u) in LINEAR_OPS:
                return True
            if aten_base(u) not in SPATIAL_OPS:
                todo.append(u)
    return False


def entry_view(em: Emitter, x: Value) -> View:
    """A program input in the channel layout (``[..., C]`` -> ``[1, C, 1, M]``): the one
    transpose at the entry that linear layers, norms and residual adds share. Ops that
    want the input as it is get it back for free (the two transposes cancel)."""
    v = natural(x)
    shape = x.type.shape
    if len(shape) >= 2 and shape[-1] > 1 and math.prod(shape[:-1]) > 1:
        ch = channel_view(em, to_channels(em, v), shape)
        em.materialized[(id(ch.phys), ch.order, ch.shape)] = x
        return ch
    return v


def shape_of_meta(meta: Any) -> tuple[int, ...]:
    """The shape of an FX node's ``meta['val']`` (() when it has none)."""
    try:
        return tuple(int(d) for d in meta.shape)
    except (AttributeError, TypeError):
        return ()



def layout_stats(g: Graph) -> dict[str, Any]:
    """Nodes, op counts, transposes and the bytes they move, reshapes and weights of ``g``."""
    counts: dict[str, int] = {}
    moved = 0
    for n in g.nodes:
        counts[n.op] = counts.get(n.op, 0) + 1
        if n.op == "transpose":
            moved += n.operands[0].type.nbytes
    return {"nodes": len(g.nodes), "ops": counts, "transposes": counts.get("transpose", 0),
            "transpose_bytes": moved, "reshapes": counts.get("reshape", 0),
            "weights": len({n.attrs["weight"] for n in g.nodes if n.op == "const" and "weight" in n.attrs})}
