"""The ANE legality report of ``anec check``: what happens to every node, and why.

For each func the report runs the compile pipeline up to legalize on a copy
(the module is not changed) and says, per node of the program as written:

* ``ok``: ANE-legal as written;
* ``rewritten``: changed by range-safe or legalize (rule, constraint id, what it became);
* ``removed``: dropped by dce (unused) or folded by fuse-casts;
* ``REJECTED``: cannot be made legal (constraint id, why, and a fix).

followed by the func-level checks: I/O dtypes, the BLOBFILE budget, the SRAM
peak and spill risks, and a one-line verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from anec.ir.ops import is_weight_const
from anec.passes.base import PassContext
from anec.passes.legalize import blob_count, legalize_graph
from anec.passes.partition import plan_stages
from anec.passes.pipelines import PREPARE
from anec.targets import get_target
from anec.ir.weight_binding import weight_errors

if TYPE_CHECKING:
    from anec.ir.graph import Graph, Module
    from anec.ir.nodes import Node
    from anec.diagnostics import AnecError
    from anec.targets import Target
    from anec.weight_store import WeightStore

_REMOVED_BY = {
    "dce": "removed: never reaches a returned value (dce)",
    "fuse-casts": "removed: folded by fuse-casts (no-op cast, lossless chain or constant)",
    "range-safe": "rewritten [ANE-FP16-RANGE] range-safe: the row is scaled by its largest "
                  "magnitude before it is squared (no fp16 overflow)",
}


def _size(n: int) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (``96.0 KiB``).

    Integer arithmetic, rounding half to even like ``f"{n / scale:.1f}"``, so that
    byte counts beyond the float range (absurd declared dims) print too.
    """
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            tenths, rest = divmod(n * 10, scale)
            if 2 * rest > scale or (2 * rest == scale and tenths % 2):
                tenths += 1
            return f"{tenths // 10}.{tenths % 10} {unit}"
    return f"{n} B"


def _origin(node: "Node", original: Mapping[int, Any]) -> str:
    """`` (added by legalize at file:line:col)`` for a node legalize created, else empty."""
    if id(node) in original or node.span is None:
        return ""
    return f" (added by legalize at {node.span.location})"


def _where(node: "Node") -> str:
    return node.span.location if node.span is not None else "-"


@dataclass(frozen=True)
class LegalityReport:
    """The text of the report and how many rejections it lists (0: ANE-legal)."""

    text: str
    errors: int

    @property
    def legal(self) -> bool:
        return self.errors == 0


def _rejected(why: str, err: AnecError) -> str:
    """``REJECTED <why> <message>`` and, when the error has a hint, its ``fix:`` line."""
    text = f"REJECTED {why} {err.message}"
    return text + f"\n      fix: {err.hint}" if err.hint else text


def _func_report(graph: "Graph", target: Target, weights: WeightStore | None,
                 options: Mapping[str, Any]) -> tuple[list[str], int]:
    work = graph.clone()
    # id(clone) -> (clone, original): holding the clone keeps a node a pass drops alive until
    # the report is written, so a node a later rewrite creates cannot reuse its id
    original = {id(c): (c, o) for c, o in zip(work.nodes, graph.nodes)}
    status: dict[int, list[str]] = {}
    unfit = weight_errors(graph, weights) if weights is not None else []
    for wnode, werr in unfit:  # as compile refuses them: missing key, shape or dtype
        status[id(wnode)] = [_rejected("(weights)", werr)]
    # legalize reads weight values (the fp16 range, folds): only from a store that fits the func
    ctx = PassContext(target=target, weights=None if unfit else weights, options=dict(options))

    def note_removed(label: str) -> None:
        present = {id(n) for n in work.nodes}
        for cid, (_, onode) in original.items():
            if cid not in present and id(onode) not in status:
                status[id(onode)] = [label]

    for i, p in enumerate(PREPARE):
        p.run(work, ctx)
        label = _REMOVED_BY.get(p.name, f"removed by {p.name}")
        if p.name == "dce" and i > 0:
            label = "removed: unused once fuse-casts folded the casts that read it (dce)"
        note_removed(label)

    func_notes: list[str] = []

    def on_rewrite(node: Node | None, entry: dict[str, Any]) -> None:
        text = f"rewritten [{entry['constraint']}] {entry['rule']}: {entry['detail']}"
        if node is not None and id(node) in original:
            status.setdefault(id(original[id(node)][1]), []).append(text)
        else:
            func_notes.append(text)

    rejections = legalize_graph(work, ctx, collect=True, on_rewrite=on_rewrite)
    if not rejections:  # a legal func over a per-program budget is cut (the partition pass)
        rejections = plan_stages(work, ctx, on_rewrite)
    errors: list[str] = []
    for node, err in rejections:
        text = _rejected(f"[{err.constraint}]", err)
        if node is not None and id(node) in original:
            status.setdefault(id(original[id(node)][1]), []).append(text)
        else:
            where = f"{err.span.location}: " if err.span is not None else ""
            errors.append(f"{where}{text}")
    kept_keys = {n.attrs["weight"] for n in work.nodes if is_weight_const(n)}
    present = {id(n) for n in work.nodes}
    for cid, (_, onode) in original.items():
        if cid not in present and id(onode) not in status:
            if onode.op == "const" and onode.attrs.get("weight") in kept_keys:
                status[id(onode)] = [f"replaced by sliced/permuted views of weight "
                                     f"'{onode.attrs['weight']}' (legalize)"]
            else:
                status[id(onode)] = ["removed: made redundant by the rewrites (legalize)"]

    width = max((len(", ".join(f"%{r.name}" for r in n.results)) for n in graph.nodes),
                default=4)
    opw = max((len(n.op) for n in graph.nodes), default=4)
    locw = max((len(_where(n)) for n in graph.nodes), default=1)
    lines = [f"func {graph.name}  (target {target.name})"]
    for n in graph.nodes:
        name = ", ".join(f"%{r.name}" for r in n.results)
        texts = status.get(id(n), ["ok"])
        head = f"  {_where(n):<{locw}}  {name:<{width}}  {n.op:<{opw}}  "
        lines.append(head + texts[0])
        for t in texts[1:]:
            lines.append(" " * len(head) + t)
    for text in func_notes:
        lines.append(f"  {text}")
    for text in errors:
        lines.append(f"  {text}")

    count, _, scalar_user = blob_count(work)
    cap = target.blob_cap(scalar_user is not None)
    why = ""
    if scalar_user is not None:
        why = f"; {target.max_blob_tensors} minus {target.scalar_penalty} because " \
              f"%{scalar_user.results[0].name}{_origin(scalar_user, original)} takes an " \
              "inline scalar"
    plan = work.facts.partition
    if plan is None:
        lines.append(f"  BLOBFILE tensors: {count} of {cap}{why}")
    else:  # the func is cut into a pipeline of programs: the plan, stage by stage
        lines.append(f"  BLOBFILE tensors: {count} in all; one program holds {cap}{why}")
        lines += [f"  {line}" for line in plan.describe()]
    sram = work.facts.sram
    if sram is not None:
        spill = (f"spill risk at {', '.join('%' + s for s in sram['spill_nodes'])}"
                 if sram["spill_nodes"] else "no spill risk")
        at = f" at %{sram['peak_node']}" if sram["peak_node"] is not None else ""  # no nodes: no peak node
        lines.append(f"  SRAM: peak {_size(sram['peak_bytes'])}{at} of "
                     f"{_size(sram['sram_bytes'])}; {spill} (ANE-SRAM)")
    if weights is None:
        lines.append("  weight values: not checked (give weights to check the fp16 range)")
    elif unfit:
        lines.append("  weight values: not checked (the weights do not fit the consts above)")
    rewrites = sum(1 for r in ctx.rewrites if r.get("func") == graph.name)
    failed = len(rejections) + len(unfit)
    if failed:
        lines.append(f"  verdict: NOT ANE-legal on {target.name}: {failed} "
                     f"error{'s' if failed != 1 else ''}")
    else:
        lines.append(f"  verdict: ANE-legal on {target.name} after {rewrites} "
                     f"rewrite{'s' if rewrites != 1 else ''}")
    return lines, failed


def legality(module: "Module", target_name: str | None = None,
             weights: "WeightStore | None" = None,
             options: Mapping[str, Any] | None = None) -> LegalityReport:
    """The report of every func, and the number of nodes (or func-level checks) rejected.

    ``anec check`` prints the text and exits 1 when anything is rejected.
    """
    target = get_target(target_name)
    out: list[str] = []
    errors = 0
    for graph in module.funcs.values():
        lines, n = _func_report(graph, target, weights, options or {})
        out += lines
        out.append("")
        errors += n
    return LegalityReport("\n".join(out).rstrip() + "\n" if out else "", errors)


def legality_report(module: "Module", target_name: str | None = None,
                    weights: "WeightStore | None" = None,
                    options: Mapping[str, Any] | None = None) -> str:
    """Per node: ANE-legal as written, rewritten (by which rule) or rejected (id, why, fix)."""
    return legality(module, target_name, weights, options).text
