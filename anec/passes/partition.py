"""partition: plan how a legal func over a per-program budget is cut into programs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from anec.diagnostics import ConstraintError
from anec.passes.base import Pass, PassContext
from anec.passes.partition_search import plan_partition
from anec.passes.rewrite import Rewriter

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node


def plan_stages(graph: "Graph", ctx: PassContext,
                on_rewrite: Callable[["Node | None", dict[str, Any]], None] | None = None,
                ) -> list[tuple["Node | None", ConstraintError]]:
    """Store in ``graph.facts.partition`` how ``graph`` is cut (None: it fits one program).

    The planner (:func:`~anec.passes.partition_search.plan_partition`) is bounded by the SRAM
    summary when annotate-sram ran; with ``ctx.options["share_programs"]`` it aligns the cuts
    to repeated layers. A cut is recorded in ``ctx.rewrites`` (rule ``partition``). Returns the
    (None, error) of a func no plan can cut (a node that fits no program), for ``anec check``.
    """
    graph.facts.partition = None
    sram = graph.facts.sram
    try:
        plan = plan_partition(graph, ctx.target, peak_bound=sram["peak_bytes"] if sram is not None else None,
                              align=bool(ctx.option("share_programs", False)))
    except ConstraintError as e:
        return [(None, e)]
    if plan is None:
        return []
    graph.facts.partition = plan
    rw = Rewriter(graph, ctx, Partition.name)
    rw.on_rewrite, rw.rule_name = on_rewrite, "partition"
    rw.record(plan.constraints[0],  # a plan returned unforced was cut by at least one budget
              f"func '{graph.name}' is cut into {len(plan.stages)} programs "
              f"({plan.crossing_bytes} bytes cross stage boundaries)", name=graph.name, span=graph.span)
    return []


@dataclass(frozen=True)
class Partition(Pass):
    """Cut a legal func over a per-program budget into a pipeline of programs (ANE-BLOB-BUDGET, ANE-SRAM).

    After legalize, a func may still need more BLOBFILE tensors than one program
    holds (16 on M4, 15 when an add/sub/mul/pow takes a rank-0 const,
    ANE-BLOB-BUDGET) or keep more bytes live than the SRAM holds (ANE-SRAM). The
    planner (:mod:`anec.passes.partition_search`, whose docstring has the cost
    model) cuts it into contiguous runs of nodes: fewest programs, then fewest
    bytes between them. The IR is unchanged: the plan goes to
    ``graph.facts.partition`` (a :class:`~anec.ir.func_facts.Plan`: the stages,
    their inputs, outputs, weights, budgets and why each ends where it ends), the
    cut is recorded in ``ctx.rewrites``, and the compiler writes one program per
    stage with a manifest that wires them (docs/mil.md). With
    ``ctx.options["share_programs"]`` the cuts are aligned to repeated layers, so
    that their stages can share one compiled program. A func that fits one
    program gets no plan. A node that alone reads more BLOBFILE tensors than a
    program holds, or a run with no legal cut, is a ConstraintError at that node.

    Before: two conv1x1s on a target whose programs hold one BLOBFILE tensor.
        // target: max_blob_tensors=1
        func f(%x: fp16[1, 8, 1, 16]) {
          %w0 = const(weight="w0") : fp16[8, 8, 1, 1]
          %c0 = conv1x1(%x, %w0) : fp16[1, 8, 1, 16]
          %w1 = const(weight="w1") : fp16[8, 8, 1, 1]
          %c1 = conv1x1(%c0, %w1) : fp16[1, 8, 1, 16]
          return %c1
        }
    After: the same IR; ``graph.facts.partition`` holds the plan, as ``anec check`` prints it:
    ``func 'f' is cut into 2 programs (ANE-BLOB-BUDGET); 256 B cross stage boundaries``;
    ``stage 0: 1 nodes, %c0 (f.ir:3:9) .. %c0 (f.ir:3:9); weights 1 of 1``, cut after ``%c0``
    because ``with %c1 (conv1x1) the stage would need 2 weight tensors (at most 1)``;
    ``stage 1: 1 nodes, %c1 (f.ir:5:9) .. %c1 (f.ir:5:9); weights 1 of 1``.
        func f(%x: fp16[1, 8, 1, 16]) {
          %w0 = const(weight="w0") : fp16[8, 8, 1, 1]
          %c0 = conv1x1(%x, %w0) : fp16[1, 8, 1, 16]
          %w1 = const(weight="w1") : fp16[8, 8, 1, 1]
          %c1 = conv1x1(%c0, %w1) : fp16[1, 8, 1, 16]
          return %c1
        }

    Unchanged: a func that fits one program (no plan).
        func f(%x: fp16[1, 8, 1, 16]) {
          %w = const(weight="w") : fp16[8, 8, 1, 1]
          %y = conv1x1(%x, %w) : fp16[1, 8, 1, 16]
          return %y
        }
    """

    name: ClassVar[str] = "partition"
    tracked: ClassVar[bool] = True

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        errors = plan_stages(graph, ctx)
        if errors:
            raise errors[0][1]


__all__ = ["Partition", "plan_stages"]
