"""SRAM analysis: bytes per node, live bytes along the schedule, spill risks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from anec.ir.func_facts import SramReport
from anec.passes.base import Pass, PassContext

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node
    from anec.targets import Target

SRAM_KEYS = ("in_bytes", "out_bytes", "weight_bytes", "live_bytes", "spill")
"""Annotation keys this analysis owns (cleared before it writes them again)."""


def sram_report(graph: "Graph", target: "Target") -> SramReport:
    """Annotate ``graph``'s nodes and return the program summary (``graph.facts.sram``).

    The schedule is the node order (topological). Steps are the non-const
    nodes. A value is live from the step that defines it (step 0 for func
    inputs) to the step of its last use (the last step for returned values).
    A const is not computed: it is resident from its first use to its last
    use, which for weights models the ANE streaming a weight in for the ops
    that read it. ``live_bytes`` of a node is the total size of the values
    live at its step, its own operands and results included; a node is a
    spill risk when that exceeds ``target.sram_bytes``.

    One scan in schedule order: a value's use list holds one entry per operand slot that
    reads it (as in every valid graph), so counting its reads down says when the scan
    passes its last use, and it stops being live after that step.
    """
    nodes = graph.nodes
    returned = {id(v) for v in graph.outputs}
    sizes: dict[int, int] = {}  # bytes of each type object (alive: the graph's values hold them)
    size_of = sizes.get
    ahead: dict[int, int] = {}  # reads still to come, of each value read so far
    ahead_of = ahead.get
    consts: set[int] = set()  # results of consts (defined before their readers)
    weight_ids: set[int] = set()  # results of weight consts
    here = 0  # bytes live at the current step
    gone_after_first = 0  # unused inputs: live at step 0 only
    for v in graph.inputs:
        here += v.type.nbytes
        if not v.uses and id(v) not in returned:
            gone_after_first += v.type.nbytes
    spills: list[str] = []
    peak, peak_node = 0, None
    sram_bytes = target.sram_bytes
    weights = 0
    notes_of: list[tuple[Node, dict[str, Any]]] = []
    append = notes_of.append
    for n in nodes:
        if n.op == "const":
            for r in n.results:
                consts.add(id(r))
            if n.annotations:
                append((n, {}))
            if "weight" in n.attrs:
                weights += n.results[0].type.nbytes
                weight_ids.add(id(n.results[0]))
            continue
        gone, gone_after_first = gone_after_first, 0
        in_bytes = weight_bytes = 0
        operands = n.operands if not n.optional else n.inputs()
        again: "set[int] | None" = None  # operands read by an earlier slot of this node
        if len(operands) > 2:
            again = set()
        for j, v in enumerate(operands):
            key = id(v)
            t = v.type
            nbytes = size_of(id(t))
            if nbytes is None:
                nbytes = sizes[id(t)] = t.nbytes
            left = ahead_of(key)
            if left is None:  # its first read
                left = len(v.uses)
                if key in consts:  # resident from its first use to its last use
                    here += nbytes
            left -= 1
            ahead[key] = left
            if left == 0 and key not in returned:
                gone += nbytes  # its last use: not live after this step
            # each operand counted once (mul(%x, %x) reads %x once)
            if again is None:
                if j == 1 and v is operands[0]:
                    continue
            elif key in again:
                continue
            else:
                again.add(key)
            if key in weight_ids:
                weight_bytes += nbytes
            else:
                in_bytes += nbytes
        results = n.results
        out_bytes = 0
        for r in results:
            t = r.type
            nbytes = size_of(id(t))
            if nbytes is None:
                nbytes = sizes[id(t)] = t.nbytes
            out_bytes += nbytes
            if not r.uses and id(r) not in returned:
                gone += nbytes  # never read: live at its own step only
        here += out_bytes
        if here > sram_bytes:
            append((n, {"in_bytes": in_bytes, "out_bytes": out_bytes, "weight_bytes": weight_bytes,
                        "live_bytes": here, "spill": True}))
            spills.append(results[0].name)
        else:
            append((n, {"in_bytes": in_bytes, "out_bytes": out_bytes, "weight_bytes": weight_bytes,
                        "live_bytes": here}))
        if here > peak:
            peak, peak_node = here, results[0].name
        here -= gone
    graph.annotate_all(notes_of, drop=SRAM_KEYS)
    return {
        "target": target.name,
        "sram_bytes": target.sram_bytes,
        "peak_bytes": peak,
        "peak_node": peak_node,
        "spill_nodes": spills,
        "weight_bytes": weights,
    }


@dataclass(frozen=True)
class AnnotateSram(Pass):
    """Annotate each node with its bytes and the live bytes at its step; mark spill risks.

    The ANE keeps a program's working set in on-chip SRAM (~32 MB on M4);
    beyond it data spills to DRAM and throughput drops by ~30% (ANE-SRAM).
    Per node (not consts): ``in_bytes`` (activation operands), ``weight_bytes``
    (weight-const operands), ``out_bytes`` (results), ``live_bytes`` (every
    value live at that step of the topological schedule: values from their
    definition to their last use, returned values to the end, consts from
    their first to their last use), and ``spill=true`` when ``live_bytes``
    exceeds the target's SRAM. The program summary goes to
    ``graph.facts.sram``: ``peak_bytes``, ``peak_node``, ``sram_bytes``,
    ``spill_nodes``, ``weight_bytes`` (all weight consts), ``target``.
    Spills are a performance warning, never an error. Running the pass again
    replaces the annotations (legalize refreshes them after rewriting).

    Consts are not annotated: they are not computed; their bytes are counted
    at the nodes that read them.

    Before:
        func f(%x: fp16[1, 768, 1, 64]) {
          %w = const(weight="w") : fp16[3072, 768, 1, 1]
          %h = conv1x1(%x, %w) : fp16[1, 3072, 1, 64]
          %y = relu(%h) : fp16[1, 3072, 1, 64]
          return %y
        }
    After:
        func f(%x: fp16[1, 768, 1, 64]) {
          %w = const(weight="w") : fp16[3072, 768, 1, 1]
          %h = conv1x1(%x, %w) : fp16[1, 3072, 1, 64] @{in_bytes=98304, live_bytes=5210112, out_bytes=393216, weight_bytes=4718592}
          %y = relu(%h) : fp16[1, 3072, 1, 64] @{in_bytes=393216, live_bytes=786432, out_bytes=393216, weight_bytes=0}
          return %y
        }

    Before: a node reading a 40 MB weight, under a target with 64 MB of SRAM.
        // context: target="m4"
        // target: sram_bytes=67108864
        func f(%x: fp16[1, 64, 1, 64]) {
          %w = const(weight="w40mb") : fp16[20480, 1024, 1, 1]
          %r = reshape(%x, shape=[1, 1024, 1, 4]) : fp16[1, 1024, 1, 4]
          %h = conv1x1(%r, %w) : fp16[1, 20480, 1, 4]
          return %h
        }
    After: not a spill.
        func f(%x: fp16[1, 64, 1, 64]) {
          %w = const(weight="w40mb") : fp16[20480, 1024, 1, 1]
          %r = reshape(%x, shape=[1, 1024, 1, 4]) : fp16[1, 1024, 1, 4] @{in_bytes=8192, live_bytes=16384, out_bytes=8192, weight_bytes=0}
          %h = conv1x1(%r, %w) : fp16[1, 20480, 1, 4] @{in_bytes=8192, live_bytes=42115072, out_bytes=163840, weight_bytes=41943040}
          return %h
        }

    Before: a relu of 1 KB at a step where a 40 MB input is still waiting for a
    later use (it occupies SRAM at the same time).
        func f(%x: fp16[1, 64, 1, 8], %big: fp16[1, 20480, 1, 1024]) {
          %s = relu(%x) : fp16[1, 64, 1, 8]
          %t = relu(%big) : fp16[1, 20480, 1, 1024]
          return %s, %t
        }
    After: both steps are marked, the small one too.
        func f(%x: fp16[1, 64, 1, 8], %big: fp16[1, 20480, 1, 1024]) {
          %s = relu(%x) : fp16[1, 64, 1, 8] @{in_bytes=1024, live_bytes=41945088, out_bytes=1024, spill=true, weight_bytes=0}
          %t = relu(%big) : fp16[1, 20480, 1, 1024] @{in_bytes=41943040, live_bytes=83887104, out_bytes=41943040, spill=true, weight_bytes=0}
          return %s, %t
        }

    Unchanged: an annotated program (running the pass again gives the same annotations).
        func f(%x: fp16[1, 768, 1, 64]) {
          %w = const(weight="w") : fp16[3072, 768, 1, 1]
          %h = conv1x1(%x, %w) : fp16[1, 3072, 1, 64] @{in_bytes=98304, live_bytes=5210112, out_bytes=393216, weight_bytes=4718592}
          %y = relu(%h) : fp16[1, 3072, 1, 64] @{in_bytes=393216, live_bytes=786432, out_bytes=393216, weight_bytes=0}
          return %y
        }
    """

    name: ClassVar[str] = "annotate-sram"
    tracked: ClassVar[bool] = True

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        graph.facts.sram = sram_report(graph, ctx.target)
