"""Dead-code elimination."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from anec.passes.base import Pass, PassContext

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node


def remove_dead_nodes(graph: "Graph") -> int:
    """Erase every node none of whose results reaches an output; the number erased.

    One backward sweep suffices: nodes are topologically ordered, so when a
    node is visited all its users have been visited, and the live ones
    marked. The dead nodes are then erased in one batch (linear time).
    """
    live = {id(v) for v in graph.outputs}  # ids of values returned or read by a node that stays
    add = live.add
    dead: list["Node"] = []
    for node in reversed(graph.nodes):
        results = node.results
        if id(results[0]) in live if len(results) == 1 else any(id(r) in live for r in results):
            for v in node.operands if not node.optional else node.inputs():
                add(id(v))
        else:
            dead.append(node)
    graph.erase_nodes(dead)
    return len(dead)


@dataclass(frozen=True)
class DeadCodeElimination(Pass):
    """Remove nodes (and weight consts) whose results never reach a returned value.

    A value is live when it is returned or used by a live node. Everything
    else is erased, including weight consts nobody reads, so they never
    become BLOBFILE tensors (each costs one of the 16 slots of
    ANE-BLOB-BUDGET). Returned values are never removed or renamed
    (ANE-LIVE-OUTPUTS: the MIL return tuple must name live values), and
    func inputs are kept even when unused: they are the program's interface.
    A multi-result node (split) stays while any of its results is live.

    Before:
        func f(%x: fp16[1, 64, 1, 64], %unused: fp16[1, 64, 1, 64]) {
          %w = const(weight="w") : fp16[64, 64, 1, 1]
          %dead = conv1x1(%x, %w) : fp16[1, 64, 1, 64]
          %y = relu(%x) : fp16[1, 64, 1, 64]
          return %y
        }
    After:
        func f(%x: fp16[1, 64, 1, 64], %unused: fp16[1, 64, 1, 64]) {
          %y = relu(%x) : fp16[1, 64, 1, 64]
          return %y
        }

    Unchanged: an unused input (the interface), a returned value, and a split
    of which only one result is used (the node stays while any result is live).
        func f(%x: fp16[1, 64, 1, 64], %unused: fp16[1, 64, 1, 64]) {
          %a, %b = split(%x, axis=1, sizes=[32, 32]) : fp16[1, 32, 1, 64], fp16[1, 32, 1, 64]
          %y = relu(%a) : fp16[1, 32, 1, 64]
          return %y
        }
    """

    name: ClassVar[str] = "dce"
    tracked: ClassVar[bool] = True

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        remove_dead_nodes(graph)
