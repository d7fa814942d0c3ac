"""Running passes: verify before and after each pass, time it, print the IR on request.

The manager is the only place that runs a pipeline. It verifies every func
before the first pass (an invalid input program is the user's
``VerifyError``) and after every pass (an invalid result is a bug in that
pass: a :class:`~anec.diagnostics.PassError` naming it), records
``(func, pass, seconds)`` in ``ctx.timings``, and appends the printed IR to
``ctx.printed`` after the passes named in ``ctx.print_ir_after``
(``{"all"}`` for every pass).

``ctx.verify_each`` is MLIR's ``verify-each`` switch: on (the default) the
func is verified after every pass; off, once after the last pass, so the
result is still checked but a failure names the whole pipeline (turn it back
on to find the pass). The time spent verifying adds up in
``ctx.verify_seconds``.

After a pass declared ``tracked`` (it edits only through the graph methods,
which log what they change), the verify after it re-checks only what the
log lists (:func:`~anec.ir.verifier.verify_changes`): the same errors as a
full verify, in time proportional to the change. Any other pass is
followed by a full verify. Without ``verify_each``, a pipeline of tracked
passes keeps one log from its first pass to its last, and the check at the
end re-checks what that log lists.
"""

from __future__ import annotations

import time
from typing import Sequence

from anec.diagnostics import AnecError, PassError, VerifyError
from anec.ir.graph import Graph, Module
from anec.ir.nogc import no_cyclic_gc
from anec.ir.nodes import Changes
from anec.ir.verifier import verify, verify_changes
from anec.passes.base import Pass, PassContext
from anec.passes.pipelines import NUMERICS, pass_name_hint
from anec.passes.registry import PASSES


def _wants_dump(ctx: PassContext, name: str) -> bool:
    wanted = ctx.print_ir_after
    if not wanted:
        return False
    return name in wanted or "all" in wanted


def _check_dump_names(ctx: PassContext, passes: Sequence[Pass]) -> None:
    """``print_ir_after`` names a pass of the registry or of this pipeline, or ``all``.

    A misspelt name would otherwise silently print nothing.
    """
    known = {"all", *PASSES, *(p.name for p in passes)}
    for name in sorted(ctx.print_ir_after or ()):
        if name not in known:
            raise AnecError(f"unknown pass '{name}' in print_ir_after",
                            hint=pass_name_hint(name, ("all",)))


def run_passes(graph: Graph, passes: Sequence[Pass], ctx: PassContext) -> None:
    """Run ``passes`` on one func (already verified), checking it after each pass
    (or after the last one when ``ctx.verify_each`` is off)."""
    from anec.ir.printer import print_graph  # the text tools load only when IR is printed

    # without verify_each, one log spans the whole pipeline when every pass is tracked: the
    # check at the end re-checks what any of them changed
    whole = (not ctx.verify_each and bool(passes) and all(p.tracked for p in passes)
             and graph.changes is None)
    log = graph.track_changes() if whole else None
    try:
        for i, p in enumerate(passes):
            start = time.perf_counter()
            # a pipeline run inside a pass on the same graph leaves the outer log alone (and its
            # passes are verified whole)
            tracking = ctx.verify_each and p.tracked and graph.changes is None
            changes = graph.track_changes() if tracking else None
            try:
                p.run(graph, ctx)
            finally:
                if changes is not None:
                    graph.stop_tracking()
            ctx.timings.append((graph.name, p.name, time.perf_counter() - start))
            if ctx.verify_each:
                _verify_after(graph, ctx, f"pass '{p.name}'", changes=changes)
            elif i == len(passes) - 1:
                if log is not None:
                    graph.stop_tracking()
                names = ", ".join(q.name for q in passes)
                _verify_after(graph, ctx, f"the pipeline ({names})",
                              "verify_each=True verifies after every pass and names the one at fault",
                              changes=log)
            if _wants_dump(ctx, p.name):
                ctx.printed.append(f"// ----- IR after {p.name} (func {graph.name}) -----\n"
                                   + print_graph(graph))
    finally:
        if log is not None and graph.changes is log:
            graph.stop_tracking()


def _verify_after(graph: Graph, ctx: PassContext, culprit: str, note: str | None = None,
                  changes: Changes | None = None) -> None:
    start = time.perf_counter()
    try:
        if changes is not None:
            verify_changes(graph, changes)
        else:
            verify(graph, warnings=False)
    except VerifyError as e:
        raise PassError(
            f"{culprit} left func '{graph.name}' invalid: {e.message}",
            span=e.span, hint=e.hint,
            notes=[*e.notes, *([note] if note else []),
                   "this is a bug in anec; please report it with the input .ir"],
        ) from e
    finally:
        ctx.verify_seconds += time.perf_counter() - start


def run_pipeline(target: Graph | Module, passes: Sequence[Pass], ctx: PassContext,
                 verify_input: bool = True) -> None:
    """Run ``passes`` over a func or every func of a module, in place.

    The whole input is verified first (unless the caller just did:
    ``verify_input=False``), so a bad func is reported before any work is
    done; then each func goes through the pipeline in module order.
    """
    _check_dump_names(ctx, passes)
    if isinstance(target, Module):
        ctx.module = target
        graphs = list(target.funcs.values())
    else:
        graphs = [target]
    with no_cyclic_gc():  # linear time on large graphs (see no_cyclic_gc)
        if verify_input:
            start = time.perf_counter()
            verify(target, warnings=False)
            ctx.verify_seconds += time.perf_counter() - start
        for graph in graphs:
            run_passes(graph, passes, ctx)


def device_form(graph: Graph) -> Graph:
    """A copy of ``graph`` as the device computes it: after cleanup and range-safe
    (:data:`~anec.passes.pipelines.NUMERICS`).

    The fp16-faithful interpreter (``anec interp --mode fp16``, ``anec run
    --compare-interp``, an imported model's ``runner(backend="interp", mode="fp16")``)
    runs this form, so it and the sim agree where the func as written would
    overflow fp16 (a norm of large activations)."""
    g = graph.clone()
    run_pipeline(g, NUMERICS, PassContext.default())
    return g
