"""The partition planner: where to cut a func that breaks a per-program budget into legal ANE programs.

A func is a model, not necessarily one ANE program. After legalize has
rewritten it, a func may still need more BLOBFILE weight tensors than one
program holds (ANE-BLOB-BUDGET: 16 on M4, 15 when an elementwise op takes an
inline scalar), or keep more bytes live at once than the SRAM holds
(ANE-SRAM). :func:`plan_partition` then cuts it into *stages*, each a legal
program (:class:`~anec.ir.func_facts.Plan`). The partition pass
(:mod:`anec.passes.partition`) stores the plan; the compiler builds one program
per stage and the runtime runs them as one (docs/passes.md, docs/runtime.md).

The model
=========

The func's nodes (consts excluded) are the *items*, in statement order, which
is a topological order. A stage is a contiguous run of items. Consts are not
items: each stage gets its own copy of every const its items read (an inline
literal costs nothing; a weight const read by two stages is one BLOBFILE
tensor in each), so weights never cross a stage boundary.

A *cut* at position j (between item j-1 and item j) makes every value defined
before j (or a func input) and used at or after j a *crossing* value: the
stage before returns it, the stages after take it as an input (a func input
used after a cut is fed by the host to every stage that reads it). A cut is
*allowed* only where every crossing value can be program I/O: a float tensor
(ANE-IO-TENSORS), and fp16 on a target without fp32 I/O (ANE-FP32-IO).

Budgets of one stage, from the target profile:

* BLOBFILE tensors: the distinct weight consts its items read, at most
  ``target.blob_cap(any item takes an inline scalar)``. Hard: a stage over it
  is rejected by the ANE compiler. Monotone: a sub-run of a legal stage is
  legal, which makes the search below exact;
* SRAM: the peak bytes live in the stage (the :mod:`annotate_sram` model,
  stage inputs live from its start, stage outputs to its end) at most
  ``target.sram_bytes``. Soft: the device runs a stage beyond it, ~30%
  slower, so a stage is split further only while it has more than one item,
  and a single node beyond the SRAM stays a spill risk (reported, as for a
  one-program func). Sub-runs never have a larger peak.

Cost, minimized in this order:

1. stages over a hard budget: none (an item that alone exceeds the BLOBFILE
   budget, or a run of items with no allowed cut longer than a stage can be,
   is a :class:`~anec.diagnostics.ConstraintError` naming the node);
2. the number of stages;
3. the bytes that cross stage boundaries (the sum over cuts of the crossing
   values' sizes: each is written by one stage and read by another; a func
   input counts at the cuts between its first and last use, where the host
   writes it into one more stage).

For the BLOBFILE budget this is exact and linear: with ``f(i)`` the best
(stages, bytes) covering items ``[0, i)``, ``f(i) = min over allowed j in
[lo(i), i) of f(j) + (1, crossing(j))``, where ``lo(i)`` is the first item a
legal stage ending at ``i`` can start at. ``lo`` never decreases (two
pointers over a multiset of weights) and the minimum over the sliding window
is kept in a monotonic deque; crossing bytes and forbidden cuts come from
one difference-array sweep. Then each stage over the SRAM is split, while it
can be, at the allowed cut inside it that crosses the fewest bytes (nearest
to its middle on ties).

Cut order follows the statement order: arbitrary DAGs (residual connections,
values used by many later stages, several outputs) are handled, but the
search does not reorder independent branches.

Cuts aligned to repeated layers
===============================

With ``align`` (asked for when programs are shared across layers,
docs/runtime.md "Programs shared across layers"), the plan makes repeated
layers *structurally identical stages*. Every item gets a structural
signature: its op, its attrs, its result types and, per operand, what it is
(a weight const by its type only, not its key; another const by its value;
a func input by its type, since stage inputs get canonical names; an
item's result by the distance back to its producer). The longest run where the signatures repeat with some period
``p`` (candidates: the most common distances between equal signatures) is
the repeated layer. The cuts are then forced at the layer boundaries (the
first phase at which every boundary is an allowed cut), as many whole
layers per period as fit one program's BLOBFILE budget, the search above
runs with those forced cuts, and the cuts it makes inside the first period
are copied to every period. Stages of different periods then have the same
signatures, so :func:`extract_stage` gives them the same MIL up to their
weight values. The aligned plan is taken only when it has fewer
structurally different stages than the unaligned one (it may have more
stages); when no repetition is found, or the copied cuts would break a
budget, the plan is the unaligned one.
"""

from __future__ import annotations

import functools
from collections import deque
from typing import TYPE_CHECKING

from anec.diagnostics import ConstraintError
from anec.ir.func_facts import Plan, Stage, size_text
from anec.ir.ops import BINARY as SCALAR_OPS
from anec.ir.types import DType

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node, Value
    from anec.targets import Target


def _is_weight(v: "Value") -> bool:
    p = v.producer
    return p is not None and p.op == "const" and "weight" in p.attrs


def _is_const(v: "Value") -> bool:
    return v.producer is not None and v.producer.op == "const"


def _takes_scalar(n: "Node") -> bool:
    return n.op in SCALAR_OPS and any(_is_const(v) and v.type.rank == 0 for v in n.operands)


def _io_ok(v: "Value", target: "Target") -> bool:
    """Can this value be program I/O (and so cross a cut)?"""
    dt = v.type.dtype
    if not dt.is_float:
        return False
    return dt != DType.fp32 or target.fp32_io


class _Sweep:
    """Positions of every value and the per-cut crossing bytes / forbidden flags.

    ``cross`` and ``bad`` are computed on first use: a func that fits one
    program needs only the positions.
    """

    def __init__(self, graph: "Graph", items: list["Node"], target: "Target") -> None:
        self.graph, self.items, self.target = graph, items, target
        self.pos = {id(x): i for i, x in enumerate(items)}

    @functools.cached_property
    def cross(self) -> list[int]:
        self._cuts()
        return self.cross

    @functools.cached_property
    def bad(self) -> list[bool]:
        self._cuts()
        return self.bad

    def _cuts(self) -> None:
        graph, items, target = self.graph, self.items, self.target
        n = len(items)
        cross = [0] * (n + 2)
        bad = [0] * (n + 2)
        for v in [*graph.inputs, *(r for x in items for r in x.results)]:
            d = self.pos[id(v.producer)] if v.producer is not None else -1
            uses = [self.pos[id(u)] for u in v.uses if id(u) in self.pos]
            last = max(uses, default=d)
            # a value crosses every cut j with d < j <= last (cuts are 1..n-1); a func input
            # crosses only the cuts between its first and last use (the host writes it into
            # every stage that reads it: before its first use, a cut moves nothing)
            start = min(uses) if v.producer is None and uses else d
            if last > start and last >= 1:
                lo, hi = max(start + 1, 1), last
                cross[lo] += v.type.nbytes
                cross[hi + 1] -= v.type.nbytes
                if not _io_ok(v, target):
                    bad[lo] += 1
                    bad[hi + 1] -= 1
        out_cross = [0] * (n + 1)
        out_bad = [False] * (n + 1)
        c = b = 0
        for j in range(n + 1):
            c += cross[j]
            b += bad[j]
            out_cross[j] = c if 0 < j < n else 0
            out_bad[j] = b > 0 if 0 < j < n else False
        self.__dict__["cross"], self.__dict__["bad"] = out_cross, out_bad


def _weights_of(x: "Node") -> list["Node"]:
    seen: dict[int, "Node"] = {}
    for v in x.inputs():
        p = v.producer
        if p is not None and _is_weight(v):
            seen.setdefault(id(p), p)
    return list(seen.values())


def blob_cap_of(nodes: list["Node"], target: "Target") -> tuple[int, int]:
    """(distinct weight consts read, the BLOBFILE cap) of a run of items."""
    ws: set[int] = set()
    scalar = False
    for x in nodes:
        for v in x.operands if not x.optional else x.inputs():
            p = v.producer
            if p is not None and p.op == "const" and "weight" in p.attrs:
                ws.add(id(p))
        scalar = scalar or _takes_scalar(x)
    return len(ws), target.blob_cap(scalar)


def _attr_key(v: object) -> object:
    """A hashable stand-in for an attr value (lists, arrays, nested dicts)."""
    if isinstance(v, dict):
        return tuple(sorted((k, _attr_key(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_attr_key(x) for x in v)
    if hasattr(v, "tobytes") and hasattr(v, "dtype"):
        return (str(v.dtype), tuple(getattr(v, "shape", ())), v.tobytes())
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return v


def positions(items: list["Node"]) -> dict[int, int]:
    """id(item) -> its index in ``items`` (what :func:`signatures` reads)."""
    return {id(x): i for i, x in enumerate(items)}


def signatures(items: list["Node"], outside: int | None = None, lo: int = 0, hi: int | None = None,
               pos: dict[int, int] | None = None) -> list[int]:
    """Per item of ``items[lo:hi]``, a hash of its structure that ignores weight keys (the
    module docstring). With ``outside``, an operand defined before item ``outside`` (or a
    func input) is only its type: what enters a stage from elsewhere is a stage input.
    ``pos``: :func:`positions` of ``items``, when a caller asks for many ranges of one list."""
    if pos is None:
        pos = positions(items)
    out = []
    for i in range(lo, len(items) if hi is None else hi):
        x = items[i]
        ops = []
        for key, v in [*((None, v) for v in x.operands), *sorted(x.optional.items())]:
            p = v.producer
            if outside is not None and (p is None or (p.op != "const" and pos.get(id(p), -1) < outside)):
                what: object = ("in",)
            elif p is None:
                what = ("in",)  # by type only: stage inputs get canonical names
            elif p.op == "const":
                attrs = {k: a for k, a in p.attrs.items() if k not in ("weight", "perm", "slice")}
                what = ("w" if "weight" in p.attrs else "c", _attr_key(attrs))
            else:
                what = ("r", i - pos[id(p)], p.results.index(v)) if id(p) in pos else ("?",)
            ops.append((key, what, hash(v.type)))
        out.append(hash((x.op, _attr_key(x.attrs), tuple(hash(r.type) for r in x.results), tuple(ops))))
    return out


def _repetition(sig: list[int]) -> tuple[int, int, int] | None:
    """(start, period, end) of the longest run of items repeating with one period (at least
    two periods), or None."""
    n = len(sig)
    last: dict[int, int] = {}
    gaps: dict[int, int] = {}
    for i, h in enumerate(sig):
        if h in last:
            d = i - last[h]
            gaps[d] = gaps.get(d, 0) + 1
        last[h] = i
    best: tuple[int, int, int] | None = None
    for p, _ in sorted(gaps.items(), key=lambda kv: -kv[1])[:8]:
        run = start = 0
        for i in range(n - p + 1):
            if i < n - p and sig[i] == sig[i + p]:
                if run == 0:
                    start = i
                run += 1
                continue
            if run and run + p >= 2 * p:
                cover = run + p
                if best is None or cover > best[2] - best[0] or (cover == best[2] - best[0] and p < best[1]):
                    best = (start, p, start + cover)
            run = 0
    return best


def _layer_bounds(items: list["Node"], sweep: "_Sweep", target: "Target") -> list[int]:
    """The forced cuts at the boundaries of repeated layers (several layers per period when
    they fit one program's BLOBFILE budget), or [] when the func does not repeat."""
    pos = positions(items)
    rep = _repetition(signatures(items, pos=pos))
    if rep is None:
        return []
    start, p, end = rep
    # the first layer reads the func's inputs where the others read the layer before: the
    # same stage once both are stage inputs
    while start >= p and (signatures(items, start - p, start - p, start, pos)
                          == signatures(items, start, start, start + p, pos)):
        start -= p
    n = len(items)
    for phase in range(p):
        b = [start + phase + k * p for k in range((end - start - phase) // p + 1)]
        b = [j for j in b if j <= n]
        if len(b) >= 3 and all(j in (0, n) or not sweep.bad[j] for j in b):
            break
    else:
        return []
    layers = len(b) - 1
    group = 1
    for g in range(layers // 2, 1, -1):  # as many layers per period as one program holds
        count, cap = blob_cap_of(items[b[0]:b[g]], target)
        if count <= cap:
            group = g
            break
    return b[::group] if group > 1 else b


def plan_partition(graph: "Graph", target: "Target", force: bool = False,
                   peak_bound: int | None = None, align: bool = False) -> Plan | None:
    """The stages of ``graph`` (legalized), or None when it is one program: it fits one, or
    only its SRAM is over and no cut can lower it (a single node, say: a spill risk).

    ``force`` plans even a func that fits (one stage); ``align`` cuts at the boundaries of
    repeated layers (the module docstring). ``peak_bound`` is an
    upper bound of the func's peak SRAM as one program, e.g. the SRAM report's
    ``peak_bytes`` of this very graph (its model counts every value a stage
    does, over at least the same steps): at or under the SRAM, a func within
    the BLOBFILE budget fits without computing its stage. Raises
    ConstraintError when no legal plan exists (see the module docstring)."""
    items = [x for x in graph.nodes if x.op != "const"]
    if not items:
        return None
    count, cap = blob_cap_of(items, target)
    over_blobs = count > cap
    if not over_blobs and not force and peak_bound is not None and peak_bound <= target.sram_bytes:
        return None
    sweep = _Sweep(graph, items, target)
    if not over_blobs:
        one = Stage(0, len(items))
        _fill(graph, items, sweep, one, target, cap)
        if one.peak_sram <= target.sram_bytes and not force:
            return None
    plan = _plan(graph, items, sweep, target, force, over_blobs)
    if align and plan is not None:
        aligned = _aligned_plan(graph, items, sweep, target, force, over_blobs)
        if aligned is not None and distinct_stages(aligned) < distinct_stages(plan):
            return aligned
    return plan


def distinct_stages(plan: Plan) -> int:
    """How many structurally different stages ``plan`` has (what enters a stage from before
    it seen as a stage input): the programs it compiles into when the stages that differ only
    in their weights share one."""
    pos = positions(plan.items)
    return len({tuple(signatures(plan.items, s.start, s.start, s.end, pos)) for s in plan.stages})


def _plan(graph: "Graph", items: list["Node"], sweep: "_Sweep", target: "Target", force: bool,
          over_blobs: bool, forced: list[int] | None = None) -> Plan | None:
    """The search of the module docstring; ``forced``: positions every plan cuts at."""
    n = len(items)
    w_of = [_weights_of(x) for x in items]
    sc_of = [_takes_scalar(x) for x in items]
    # lo[i]: the first item a legal stage ending at i (exclusive) can start at
    lo = [0] * (n + 1)
    counts: dict[int, int] = {}
    scalars = 0
    start = 0
    for i in range(1, n + 1):
        k = i - 1
        for w in w_of[k]:
            counts[id(w)] = counts.get(id(w), 0) + 1
        scalars += sc_of[k]
        while start < i and len(counts) > target.blob_cap(scalars > 0):
            for w in w_of[start]:
                counts[id(w)] -= 1
                if not counts[id(w)]:
                    del counts[id(w)]
            scalars -= sc_of[start]
            start += 1
        if start == i:
            x = items[k]
            alone, cap = blob_cap_of([x], target)
            raise ConstraintError(
                f"%{x.results[0].name} ({x.op}) alone reads {alone} BLOBFILE weight tensors; one "
                f"{target.name} program holds at most {cap}, so no program can contain it",
                span=x.span, constraint="ANE-BLOB-BUDGET",
                hint="split the op's weights (for a conv: chunk its output channels into several "
                     "convs), or compile it with its weights as program inputs (--weights-as-inputs)")
        lo[i] = start
    if forced:
        k = 0
        for i in range(1, n + 1):  # no stage spans a forced cut
            while k < len(forced) and forced[k] < i:
                k += 1
            if k:
                lo[i] = max(lo[i], forced[k - 1])
    # f[j] = (stages, bytes) of the best plan covering items [0, j); only allowed cut points
    INF = (1 << 62, 1 << 62)
    f: list[tuple[int, int]] = [INF] * (n + 1)
    parent = [-1] * (n + 1)
    f[0] = (0, 0)
    dq: deque[int] = deque()  # candidate cut positions j, keys increasing

    def key(j: int) -> tuple[int, int]:
        return (f[j][0] + 1, f[j][1] + sweep.cross[j])

    for i in range(1, n + 1):
        j = i - 1
        if f[j] != INF and (j == 0 or not sweep.bad[j]):
            kj = key(j)
            while dq and key(dq[-1]) >= kj:  # a later candidate at least as good replaces it
                dq.pop()
            dq.append(j)
        while dq and dq[0] < lo[i]:
            dq.popleft()
        if i < n and sweep.bad[i]:
            continue  # not a place to cut: nothing later can start here
        if not dq:
            x = items[i - 1]
            raise ConstraintError(
                f"func '{graph.name}' cannot be cut into legal programs around %{x.results[0].name}: "
                "every cut near it would pass an integer, bool or (on this target) fp32 tensor "
                "between programs, and the BLOBFILE budget forbids keeping the run in one",
                span=x.span, constraint="ANE-BLOB-BUDGET",
                hint="cast the value to fp16 before its later uses, or make its weights program inputs")
        f[i] = key(dq[0])
        parent[i] = dq[0]
    cuts = []
    i = n
    while i > 0:
        cuts.append(i)
        i = parent[i]
    bounds = [0] + sorted(cuts)
    stages = [Stage(a, b) for a, b in zip(bounds, bounds[1:])]
    for s in stages:
        _fill(graph, items, sweep, s, target)
    # reasons for the BLOBFILE cuts
    for s in stages:
        s.reason = _blob_reason(items, s, lo, sweep, target)
    stages = _split_for_sram(graph, items, sweep, stages, target)
    if len(stages) == 1 and not force:
        return None  # over the SRAM with no cut to make: one program, its spill risk reported
    total = sum(sweep.cross[s.end] for s in stages[:-1])
    return Plan(graph.name, items, stages, total, over_blobs)


def _aligned_plan(graph: "Graph", items: list["Node"], sweep: "_Sweep", target: "Target", force: bool,
                  over_blobs: bool) -> Plan | None:
    """The plan with cuts at the layer boundaries and the same cuts inside every period, or
    None (no repetition; a copied cut not allowed or over a budget)."""
    bounds = _layer_bounds(items, sweep, target)
    if not bounds:
        return None
    inner = [j for j in bounds if 0 < j < len(items)]
    plan = _plan(graph, items, sweep, target, True, over_blobs, forced=inner)
    if plan is None:
        return None
    first, period = bounds[0], bounds[1] - bounds[0]
    offsets = [s.end - first for s in plan.stages if first < s.end < bounds[1]]
    cuts = {s.end for s in plan.stages if s.end <= first or s.end > bounds[-1]}
    for b in bounds[:-1]:
        cuts.add(b)
        cuts.update(b + o for o in offsets)
    cuts.add(bounds[-1])
    cuts.discard(0)
    edges = [0] + sorted(j for j in cuts if j <= len(items))
    if edges[-1] != len(items):
        edges.append(len(items))
    stages = [Stage(a, b) for a, b in zip(edges, edges[1:])]
    for s in stages:
        if 0 < s.start and sweep.bad[s.start]:
            return None
        _fill(graph, items, sweep, s, target)
        if len(s.weights) > s.blob_cap:
            return None
        at = bounds.index(s.end) if s.end in bounds else -1
        s.reason = ("the end of the func" if s.end == len(items) else
                    f"a boundary of the repeated layers (period {period} nodes, layer boundary {at})"
                    if at >= 0 else "the cut inside the first repeated layer, repeated in every layer")
    if len(stages) == 1 and not force:
        return None
    total = sum(sweep.cross[s.end] for s in stages[:-1])
    return Plan(graph.name, items, stages, total, over_blobs)


def _blob_reason(items: list["Node"], s: Stage, lo: list[int], sweep: _Sweep, target: "Target") -> str:
    n = len(items)
    if s.end == n:
        return "the end of the func"
    # the furthest a stage starting at s.start could reach
    reach = s.end
    while reach < n and lo[reach + 1] <= s.start:
        reach += 1
    if reach == s.end:
        nxt = items[s.end]
        count, cap = blob_cap_of(items[s.start:s.end + 1], target)
        scalar = "" if cap == s.blob_cap else f" once %{nxt.results[0].name} takes an inline scalar"
        return (f"BLOBFILE budget: with %{nxt.results[0].name} ({nxt.op}) the stage would need "
                f"{count} weight tensors (at most {cap}{scalar})")
    return (f"a cheaper cut: the stage could reach %{items[reach - 1].results[0].name}, but cutting here "
            f"passes {size_text(sweep.cross[s.end])} to the next stage, the least among plans with as few stages")


def _fill(graph: "Graph", items: list["Node"], sweep: _Sweep, s: Stage, target: "Target",
          cap: int | None = None) -> None:
    """Inputs, outputs, weights, cap (``cap`` when known) and peak SRAM of stage ``s``."""
    run = items[s.start:s.end]
    inside = {id(x) for x in run}
    returned = {id(v) for v in graph.outputs}
    ins: dict[int, "Value"] = {}
    weights: dict[int, "Node"] = {}
    for x in run:
        for v in x.operands if not x.optional else x.inputs():
            p = v.producer
            if p is not None and p.op == "const":
                if "weight" in p.attrs:
                    weights.setdefault(id(p), p)
                continue
            if p is None or id(p) not in inside:
                ins.setdefault(id(v), v)
    outs = []
    pos, end = sweep.pos, s.end
    for x in run:
        for r in x.results:
            if id(r) in returned or any(id(u) in pos and pos[id(u)] >= end for u in r.uses):
                outs.append(r)
    s.inputs, s.outputs, s.weights = list(ins.values()), outs, list(weights.values())
    s.blob_cap = blob_cap_of(run, target)[1] if cap is None else cap
    s.peak_sram = _peak(run, s, inside)


def _peak(run: list["Node"], s: Stage, inside: set[int]) -> int:
    """Peak live bytes of a stage: the annotate-sram model on its own schedule."""
    m = len(run)
    delta = [0] * (m + 1)
    step = {id(x): i for i, x in enumerate(run)}
    outs = {id(v) for v in s.outputs}

    def add(a: int, b: int, nbytes: int) -> None:
        delta[a] += nbytes
        delta[b + 1] -= nbytes

    get = step.get
    for v in s.inputs:
        uses = [i for i in map(get, map(id, v.uses)) if i is not None]
        add(0, max(uses), v.type.nbytes)
    consts: dict[int, tuple["Value", list[int]]] = {}
    for k, x in enumerate(run):
        for v in x.operands if not x.optional else x.inputs():
            p = v.producer
            if p is not None and p.op == "const":
                consts.setdefault(id(v), (v, []))[1].append(k)
        for r in x.results:
            if id(r) in outs:
                end = m - 1
            else:
                uses = [i for i in map(get, map(id, r.uses)) if i is not None]
                end = max(uses) if uses else k
            add(k, end, r.type.nbytes)
    for v, steps in consts.values():
        add(min(steps), max(steps), v.type.nbytes)
    peak = running = 0
    for i in range(m):
        running += delta[i]
        peak = max(peak, running)
    return peak


def _split_for_sram(graph: "Graph", items: list["Node"], sweep: _Sweep, stages: list[Stage],
                    target: "Target") -> list[Stage]:
    out: list[Stage] = []
    todo = list(stages)
    todo.reverse()
    while todo:
        s = todo.pop()
        cands = [j for j in range(s.start + 1, s.end) if not sweep.bad[j]]
        if s.peak_sram <= target.sram_bytes or not cands:
            out.append(s)
            continue
        best = min(cands, key=lambda j: (sweep.cross[j], abs(j - (s.start + s.end) // 2)))
        left, right = Stage(s.start, best), Stage(best, s.end)
        for t in (left, right):
            _fill(graph, items, sweep, t, target)
        left.reason = (f"SRAM: the stage would keep {size_text(s.peak_sram)} live (the target has "
                       f"{size_text(target.sram_bytes)}); this cut passes the fewest bytes ({size_text(sweep.cross[best])})")
        right.reason = s.reason
        todo.extend([right, left])
    return out


__all__ = ["blob_cap_of", "distinct_stages", "plan_partition", "signatures"]
