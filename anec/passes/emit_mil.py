"""emit-mil: the last pass, turning a legalized func into its artifact."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from anec.compress import decide
from anec.diagnostics import AnecError
from anec.mil.artifact import Artifact
from anec.mil.emitter import emit_mil
from anec.passes.base import Pass, PassContext

if TYPE_CHECKING:
    from anec.ir.graph import Graph


@dataclass(frozen=True)
class EmitMil(Pass):
    """Write the MIL text, weight BLOBFILEs and manifest of a func (the artifact).

    A thin wrapper: :func:`anec.mil.emitter.emit_mil` writes the text and plans
    the weight files without looking at weight values; the artifact then
    materializes each weight const from ``ctx.weights`` into its BLOBFILE and
    assembles the manifest (I/O bindings, allocation sizes, chunked outputs
    from ``graph.facts``, SRAM report, this func's rewrites). The result is
    stored in ``ctx.artifacts[graph.name]``; the graph is not changed.
    With ``ctx.weights`` None the artifact has no weight files (MIL only).
    Options: ``ctx.options["pack_weights"]`` puts every weight into
    ``weights/weight.bin``; ``ctx.options["compress"]`` (an :class:`anec.compress.Spec`)
    stores the matching conv/matmul weights compressed, each one the format of its rule
    that passes the accuracy gate (docs/compression.md): the IR is unchanged, the
    decision is written into the MIL (``constexpr_*`` ops) and the manifest;
    A func the partition pass cut (``graph.facts.partition``) becomes one program per
    stage, built by ``ctx.build_stages`` (the compiler's
    :func:`anec.multi_program_build.build_multi_program`); ``ctx.options["share_programs"]``
    gives the stages of a cut func that differ only in their weights one program, their
    weights as its inputs.

    Ops the ANE rejects must be gone (legalize); finding one here is a
    ConstraintError naming the constraint.

    Before::

        func mlp(%x: fp32[1, 768, 1, 64]) {
          %xh = cast(%x, dtype=fp16) : fp16[1, 768, 1, 64]
          %w1 = const(weight="h.0.mlp.c_fc.weight") : fp16[3072, 768, 1, 1]
          %h = conv1x1(%xh, %w1) : fp16[1, 3072, 1, 64]
          %y = cast(%h, dtype=fp32) : fp32[1, 3072, 1, 64]
          return %y
        }

    After (``model.mil``; plus ``weights/w1.bin`` and ``manifest.json``)::

        program(1.3)
        [buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, {"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, {"coremltools-version", "9.0"}})]
        {
            func main<ios18>(tensor<fp32, [1, 768, 1, 64]> x) {
                string xh_dtype = const()[name = string("xh_dtype"), val = string("fp16")];
                tensor<fp16, [1, 768, 1, 64]> xh = cast(dtype = xh_dtype, x = x)[name = string("xh")];
                tensor<fp16, [3072, 768, 1, 1]> w1 = const()[name = string("w1"), val = tensor<fp16, [3072, 768, 1, 1]>(BLOBFILE(path = string("@model_path/weights/w1.bin"), offset = uint64(64)))];
                tensor<int32, [2]> h_dilations = const()[name = string("h_dilations"), val = tensor<int32, [2]>([1, 1])];
                int32 h_groups = const()[name = string("h_groups"), val = int32(1)];
                tensor<int32, [4]> h_pad = const()[name = string("h_pad"), val = tensor<int32, [4]>([0, 0, 0, 0])];
                string h_pad_type = const()[name = string("h_pad_type"), val = string("valid")];
                tensor<int32, [2]> h_strides = const()[name = string("h_strides"), val = tensor<int32, [2]>([1, 1])];
                tensor<fp16, [1, 3072, 1, 64]> h = conv(dilations = h_dilations, groups = h_groups, pad = h_pad, pad_type = h_pad_type, strides = h_strides, weight = w1, x = xh)[name = string("h")];
                string y_dtype = const()[name = string("y_dtype"), val = string("fp32")];
                tensor<fp32, [1, 3072, 1, 64]> y = cast(dtype = y_dtype, x = h)[name = string("y")];
            } -> (y);
        }
    """

    name: ClassVar[str] = "emit-mil"

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        rewrites = [r for r in ctx.rewrites if r.get("func", graph.name) == graph.name]
        spec = ctx.option("compress", None)
        decisions: dict = {}
        if spec is not None:
            decisions = decide(graph, spec, ctx.weights, ctx.target.mil_dialect, target=ctx.target)
        plan = graph.facts.partition
        if plan is not None:  # the partition pass cut the func: one program per stage
            if ctx.build_stages is None:
                raise AnecError(f"func '{graph.name}' is cut into {len(plan.stages)} programs, and this pass "
                                "context has no multi-program build", span=graph.span,
                                hint="compile with anec.compiler.compile_module (anec compile), or set "
                                     "PassContext.build_stages to anec.multi_program_build.build_multi_program")
            ctx.artifacts[graph.name] = ctx.build_stages(
                graph, plan, ctx.target, ctx.weights, rewrites, bool(ctx.option("pack_weights", False)),
                compression=decisions, share=bool(ctx.option("share_programs", False)))
            return
        by_name = {n.result.name: decisions[id(n)] for n in graph.nodes if id(n) in decisions}
        program = emit_mil(graph, ctx.target, pack_weights=bool(ctx.option("pack_weights", False)),
                           compression=by_name)
        ctx.artifacts[graph.name] = Artifact.build(graph, program, ctx.target, ctx.weights, rewrites)
