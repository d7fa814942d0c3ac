"""weights-as-inputs: chosen weights become program inputs, so they change without a compile."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from anec.ir.nodes import Value
from anec.ir.ops import is_weight_const
from anec.ir.types import DType, TensorType
from anec.passes.base import Pass, PassContext

if TYPE_CHECKING:
    from anec.ir.graph import Graph


def _input_name(graph: "Graph", base: str) -> str:
    """A free func-input name from a const's name, valid as a MIL identifier."""
    from anec.mil.emitter import is_mil_identifier

    return graph.fresh_name(base if is_mil_identifier(base) else "w_" + base)  # the name itself when free


@dataclass(frozen=True)
class WeightsAsInputs(Pass):
    """Turn the weight consts whose checkpoint key matches a pattern into func inputs.

    The device bakes BLOBFILE weights at compile time: changing one needs a
    data patch or a compile. A weight passed as a program input (the way
    maderix's dynamic training and LoRA adapters do it) changes by writing
    its input surface, with no compile, no unload and no load; the runtime
    fills these inputs itself (``Program.reload_weights`` writes them), so
    callers still pass only the real inputs. ``graph.facts.weight_inputs``
    records, per input, the checkpoint key and the view (perm, slice, shape,
    dtype) the const read, so the artifact stores each initial value and a
    reload applies the same view. An fp32 weight on a target without fp32
    I/O comes in as fp16 and is cast inside. Conv weights that become inputs
    are rewritten by legalize (a conv reads its weight from a constant:
    ANE-CONV-CONST-WEIGHT).

    Options: ``keys``, fnmatch patterns over checkpoint keys (``"*"`` for
    every weight). Not part of the default pipeline: ``compile_module(...,
    weights_as_inputs=[...])`` and ``anec compile --weights-as-inputs``
    insert it after fuse-casts (which folds casts into the consts first).

    Before: with ``keys=("*.c_fc.weight",)``.
        // pass: keys=("*.c_fc.weight",)
        func mlp(%x: fp16[1, 768, 1, 64]) {
          %w1 = const(weight="h.0.mlp.c_fc.weight") : fp16[3072, 768, 1, 1]
          %b1 = const(weight="h.0.mlp.c_fc.bias") : fp16[1, 3072, 1, 1]
          %h = conv1x1(%x, %w1) : fp16[1, 3072, 1, 64]
          %y = add(%h, %b1) : fp16[1, 3072, 1, 64]
          return %y
        }
    After:
        func mlp(%x: fp16[1, 768, 1, 64], %w1: fp16[3072, 768, 1, 1]) {
          %b1 = const(weight="h.0.mlp.c_fc.bias") : fp16[1, 3072, 1, 1]
          %h = conv1x1(%x, %w1) : fp16[1, 3072, 1, 64]
          %y = add(%h, %b1) : fp16[1, 3072, 1, 64]
          return %y
        }

    Unchanged: a pattern that matches no weight of the func is not an error (a
    module's funcs use different keys); ``compile_module`` checks that every
    pattern matched somewhere.
        // pass: keys=("*.c_proj.weight",)
        func mlp(%x: fp16[1, 768, 1, 64]) {
          %w1 = const(weight="h.0.mlp.c_fc.weight") : fp16[3072, 768, 1, 1]
          %h = conv1x1(%x, %w1) : fp16[1, 3072, 1, 64]
          return %h
        }
    """

    name: ClassVar[str] = "weights-as-inputs"
    keys: tuple[str, ...] = ("*",)

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        entries = graph.facts.weight_inputs
        fp32_io = getattr(ctx.target, "fp32_io", True)
        for node in list(graph.nodes):
            if not is_weight_const(node):
                continue
            key = node.attrs["weight"]
            if not any(fnmatch.fnmatchcase(key, p) for p in self.keys):
                continue
            r: Value = node.result
            io_type = r.type
            if r.type.dtype == DType.fp32 and not fp32_io:
                io_type = TensorType(DType.fp16, r.type.shape)
            base = r.name
            graph.rename_value(r, graph.fresh_name(base + "_const"))  # the input takes its name
            name = _input_name(graph, base)
            inp = graph.add_input(name, io_type, node.span)
            new: Value = inp
            if io_type != r.type:
                new = graph.create_node("cast", [inp], {"dtype": r.type.dtype}, [r.type],
                                        names=[graph.fresh_name(name + "_f32")], span=node.span,
                                        before=node).result
            graph.replace_all_uses(r, new)
            graph.erase_node(node)
            entries.append({"key": key, "input": name, "dtype": io_type.dtype.value, "shape": list(io_type.shape),
                            "perm": list(node.attrs["perm"]) if node.attrs.get("perm") is not None else None,
                            "slice": list(node.attrs["slice"]) if node.attrs.get("slice") is not None else None})
