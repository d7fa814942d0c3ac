"""``import_torch``, and the walk of an exported program's FX graph into one anec func.

:func:`import_torch` exports a PyTorch module (:mod:`~anec.frontends.torch.export`);
:func:`import_exported` decomposes a ``torch.export`` program to core ATen
and walks its FX graph once, in order:

* parameters, buffers and lifted constants are
  :class:`~anec.frontends.aten.values.Const` values; any op whose operands are
  all constants is folded by running it in torch
  (:mod:`~anec.frontends.torch.fx_constants`);
* every other op goes to its handler in
  :data:`~anec.frontends.lowerings.HANDLERS`; an op without one is an
  :class:`~anec.frontends.UnsupportedOpError` naming the ATen op, the user's
  Python ``file:line`` (from the export's stack trace) and what to do;
* the outputs are materialized in torch's shapes and cast to fp32.

The func computes in fp16 (``cast`` at the inputs and outputs): the ANE's
arithmetic. Embedding lookups of an integer input and argmax/topk/sampling at
the outputs are host work, described in the
:class:`~anec.frontends.torch.imported.ImportedModel`.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from anec.diagnostics import AnecError
from anec.frontends import TorchImportError, UnsupportedOpError, require
from anec.frontends.aten.context import Lowering
from anec.frontends.aten.values import Args, Const, Deferred, Device, HostValue, InputRef, Lowered, WeightRef
from anec.frontends.fx import importing_from, located_error, node_location, node_span, op_name
from anec.frontends.lowerings import HANDLERS
from anec.frontends.tensor_views import Emitter, Expanded, View, as_view, materialize, natural, reshape_view
from anec.frontends.torch.export import decompose, export_module
from anec.frontends.torch.fx_constants import RANDOM_OPS, VIEW_OPS, fold
from anec.frontends.torch.fx_io import (
    dtype_name,
    entry_view,
    feeds_linear,
    ident,
    layout_stats,
    leaf_names,
    shape_of_meta,
    unique_names,
)
from anec.frontends.torch.imported import WEIGHTS_FILE, ImportedModel
from anec.ir.graph import Module, WeightSource
from anec.ir.types import DType, TensorType
from anec.mil.emitter import is_mil_identifier

if TYPE_CHECKING:
    import torch

SKIPPED = ("_assert_tensor_metadata.default", "_assert_scalar.default", "sym_constrain_range.default",
           "sym_constrain_range_for_size.default", "_assert_async.msg")
"""Checks without a value: nothing to lower."""


def _unsupported(node: torch.fx.Node) -> UnsupportedOpError:
    op = op_name(node)
    base = op.split(".")[1] if op.startswith("aten.") else op
    hints = {
        "log": "log has no IR form (the ANE ops are exp, sqrt, pow...); for log_softmax return "
               "the softmax, or the logits and apply log_softmax on the host",
        "_log_softmax": "return the logits (or the softmax) and apply log_softmax on the host",
        "erf": "use gelu (the IR has gelu exact/tanh), which is what erf usually serves",
        "cumsum": "a running sum over an activation has no IR form; compute it on the host",
        "sort": "sorting has no IR form; do it on the host after the model",
        "gather": "the IR has no gather: index with constants, or look up on the host",
        "scatter": "the IR has no scatter; restructure the model or do it on the host",
    }
    hint = hints.get(base, "the core IR ops cannot express it: compute this part on the host (before "
                           "or after the model), replace it with supported ops (see docs/torch.md), "
                           "or run it through Core ML")
    return located_error(UnsupportedOpError, node, "this ATen op is not supported by anec", hint)


@dataclass
class _HostPre:
    kind: str
    input: str
    output: str
    weight: str
    shape: list[int]
    where: str


class FxImporter:
    """One walk of an exported program (decomposed to core ATen) into an :class:`ImportedModel`."""

    def __init__(self, ep: torch.export.ExportedProgram, name: str, target: str | None) -> None:
        import torch
        from anec.targets import get_target

        self.torch = torch
        self.ep = ep
        self.name = name
        self.target = get_target(target)
        self.graph = ep.graph
        self.env: dict[torch.fx.Node, Lowered] = {}
        sig = ep.graph_signature
        self.user_inputs = [s for s in sig.input_specs if s.kind.name == "USER_INPUT"]
        self.input_names = [s.arg.name for s in self.user_inputs]
        outs = [s for s in sig.output_specs if s.kind.name == "USER_OUTPUT"]
        self.output_names = unique_names((ident(n) for n in leaf_names(ep.call_spec.out_spec, len(outs))),
                                    set(self.input_names))
        # program I/O names: torch's, unless MIL cannot spell them (keywords, type names)
        taken = set(self.input_names) | set(self.output_names)
        self.prog_in = {n: n if is_mil_identifier(n) else unique_names([f"{ident(n)}_in"], taken)[0]
                        for n in self.input_names}
        self.prog_out = {n: n if is_mil_identifier(n) else unique_names([f"{ident(n)}_out"], taken)[0]
                         for n in self.output_names}
        self.em = Emitter(ident(name), reserved=set(self.prog_out.values()) | set(self.prog_in.values()))
        self.lw = Lowering(self.em, self.target.max_conv_out_channels)
        self.lw.env = self.env
        self.lw.stored = self._stored
        self.lw.device_input = self._device_input
        self.lw.host_input = self._host_input
        self.lw.host_source = self._host_source
        self.lw.bind = self._bind
        self.lw.taken_keys = set(ep.state_dict) | {f"anec.const.{k}" for k in ep.constants}
        self.device_inputs: dict[str, View] = {}
        self.input_types: dict[str, TensorType] = {}
        self.embeds: dict[tuple, View] = {}
        self.host_pre: list[_HostPre] = []
        self.host_sources: dict[int, tuple[str, View]] = {}
        self.notes: list[str] = []
        self.tensors: dict[str, torch.Tensor] = {}

    # ---- values ---------------------------------------------------------------
    def _stored(self, key: str) -> np.ndarray:
        t = self.tensors[key].detach().cpu()
        if t.dtype.is_floating_point:
            t = t.float()
        return t.numpy()

    def _placeholder(self, node: torch.fx.Node, spec: Any) -> Lowered:
        torch = self.torch
        kind = spec.kind.name
        if kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            target = spec.target
            if target in self.ep.state_dict:
                t = self.ep.state_dict[target]
            elif target in self.ep.constants:
                t = self.ep.constants[target]
            else:  # pragma: no cover - torch keeps every lifted tensor in one of the two
                raise located_error(TorchImportError, node, f"no value for '{target}' in the program")
            if not isinstance(t, torch.Tensor):
                raise located_error(TorchImportError, node, f"'{target}' is a {type(t).__name__}, not a tensor",
                                    "anec imports programs whose constants are tensors")
            t = t.detach()
            key = target if kind != "CONSTANT_TENSOR" else f"anec.const.{target}"
            self.tensors[key] = t
            return Const(t, WeightRef(key, tuple(t.shape)))
        if kind != "USER_INPUT":
            raise located_error(TorchImportError, node, f"program input of kind {kind} is not supported",
                                "export a module whose forward() takes tensors")
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise located_error(TorchImportError, node,
                                f"input '{node.name}' is a {type(val).__name__}, not a tensor",
                                "pass Python numbers as constants inside the module instead")
        shape = []
        for d in val.shape:
            if not isinstance(d, int):
                raise located_error(
                    TorchImportError, node, f"input '{node.name}' has a dynamic dim ({d})",
                    "ANE programs have static shapes: export without dynamic_shapes (one import per "
                    "shape bucket)")
            shape.append(int(d))
        dt = val.dtype
        if dt.is_complex:
            raise located_error(TorchImportError, node, f"input '{node.name}' is complex ({dt})")
        if dt.is_floating_point:
            declared = DType.fp16 if dt == torch.float16 else DType.fp32
            t = TensorType(declared, tuple(shape) or (1,))
            self.input_types[self.prog_in[node.name]] = t
            self.em.hint, self.em.span = node.name, None
            x = self.em.input(self.prog_in[node.name], t)
            xh = self.em.op("cast", x, dtype=DType.fp16, suffix="h") if declared != DType.fp16 else x
            if not shape:
                return reshape_view(self.em, natural(xh), ())
            v = entry_view(self.em, xh) if feeds_linear(node) else natural(xh)
            self.device_inputs[node.name] = v
            return v
        return InputRef(node.name, tuple(shape), dt)

    def _device_input(self, ref: InputRef) -> View:
        v = self.device_inputs.get(ref.name)
        if v is None:
            em = self.em
            saved = em.hint, em.span
            em.hint = ref.name
            t = TensorType(DType.fp32, ref.shape or (1,))
            self.input_types[self.prog_in[ref.name]] = t
            x = em.input(self.prog_in[ref.name], t)
            v = natural(em.op("cast", x, dtype=DType.fp16, suffix="h"), ref.kind)
            if not ref.shape:
                v = reshape_view(em, v, ())
            self.device_inputs[ref.name] = v
            self.notes.append(
                f"input '{ref.name}' is {dtype_name(ref.dtype)} in torch and fp32 on the device "
                f"(exact for integers up to 2048); the runner converts")
            em.hint, em.span = saved
        if ref.host_shape is not None:
            return reshape_view(self.em, v, ref.host_shape)
        return v

    def _host_input(self, weight: Const, ids: InputRef) -> View:
        shape = ids.host_shape or ids.shape
        if weight.origin is not None:
            key = weight.origin.key
            ref = weight.origin
            if ref.perm is not None or ref.slice is not None or ref.final != ref.stored:
                key = None
        else:
            key = None
        if key is None:
            key = f"anec.const.{self.lw.node.name}_table"
            self.lw.weights[key] = weight.numpy()
        else:
            self.lw.weights.setdefault(key, self._stored(key))
        memo = (key, ids.name, tuple(shape))
        if memo in self.embeds:
            return self.embeds[memo]
        em = self.em
        dim = weight.shape[1]
        name = self.graph_fresh_input(ident(key.removesuffix(".weight")))
        t = TensorType(DType.fp32, tuple(shape) + (dim,))
        saved = em.hint
        em.hint = name
        x = em.input(name, t)
        self.input_types[name] = t
        xh = em.op("cast", x, dtype=DType.fp16, suffix="h")
        v = entry_view(em, xh) if feeds_linear(self.lw.node) else natural(xh)
        em.hint = saved
        self.embeds[memo] = v
        self.host_pre.append(_HostPre("embedding", ids.name, name, key, list(shape),
                                      node_location(self.lw.node)))
        return v

    def graph_fresh_input(self, base: str) -> str:
        taken = (set(self.input_names) | set(self.output_names) | set(self.prog_in.values())
                 | set(self.prog_out.values()) | self.em.graph.value_names())
        name = unique_names([ident(base)], taken)[0]
        self.em.reserved.add(name)
        return name

    def _host_source(self, x: Lowered) -> str:
        x = self.lw.dev(x)
        hit = self.host_sources.get(id(x))
        if hit is not None:
            return hit[0]
        name = self.graph_fresh_input(f"{self.lw.node.name}_in")
        self.host_sources[id(x)] = (name, as_view(self.em, x))
        return name

    # ---- walk -------------------------------------------------------------------
    def run(self) -> ImportedModel:
        sig = self.ep.graph_signature
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        for node, spec in zip(placeholders, sig.input_specs):
            self.env[node] = self._placeholder(node, spec)
        out_node = None
        for node in self.graph.nodes:
            if node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                out_node = node
            elif node.op == "get_attr":
                raise located_error(TorchImportError, node, "get_attr nodes are not supported",
                                    "import the program as torch.export produces it")
        return self._finish(out_node)

    def _arg(self, x: Any) -> Any:
        torch = self.torch
        if isinstance(x, torch.fx.Node):
            v = self.env.get(x)
            if isinstance(v, Deferred):
                return self._resolve(v)
            return v
        if isinstance(x, (list, tuple)):
            return type(x)(self._arg(i) for i in x)
        return x

    def _resolve(self, d: Deferred) -> Lowered:
        saved = self.lw.node
        self.lw.node = d.node
        try:
            return d.make()
        finally:
            self.lw.node = saved

    def _bind(self, node: torch.fx.Node) -> Args:
        schema = node.target._schema
        out: dict[str, Any] = {}
        args = list(node.args)
        for i, arg in enumerate(schema.arguments):
            if i < len(args) and not arg.kwarg_only:
                out[arg.name] = self._arg(args[i])
            elif arg.name in node.kwargs:
                out[arg.name] = self._arg(node.kwargs[arg.name])
            elif arg.has_default_value():
                out[arg.name] = arg.default_value
        return out

    def _call(self, node: torch.fx.Node) -> None:
        torch = self.torch
        lw, em = self.lw, self.em
        lw.node = node
        em.hint = node.name
        em.span = node_span(node)
        target = node.target
        if target is operator.getitem:
            seq = self.env[node.args[0]]
            item = seq[node.args[1]]
            self.env[node] = item
            return
        name = str(target)
        if not isinstance(target, torch._ops.OpOverload):
            raise located_error(UnsupportedOpError, node,
                                f"call of '{getattr(target, '__name__', name)}' in the exported graph",
                                "anec imports programs of ATen ops with static shapes")
        short = name[len("aten."):] if name.startswith("aten.") else name
        if short in SKIPPED:
            return
        base = short.split(".")[0]
        a = self._bind(node)
        values = list(_flat(a.values()))
        host = next((v for v in values if isinstance(v, HostValue)), None)
        if host is not None and base not in VIEW_OPS | {"_to_copy", "argmax", "argmin", "topk"}:
            lw.dev(host)  # raises: host results may only flow to the outputs
        if (base in RANDOM_OPS and base != "multinomial") or (base == "native_dropout" and a.get("train")):
            raise located_error(UnsupportedOpError, node, "a random op in the model",
                                "anec compiles deterministic programs: remove it (call model.eval() "
                                "for dropout), or sample on the host")
        live = any(isinstance(v, Device + (InputRef, HostValue)) for v in values)
        if not live:
            self.env[node] = fold(node, a, self._folded_operand, self._resolve)
            return
        row = HANDLERS.get(name)
        if row is None:
            raise _unsupported(node)
        try:
            self.env[node] = row.fn(lw, a)
        except AnecError:
            raise
        except (ValueError, IndexError, TypeError, KeyError, AssertionError, ZeroDivisionError) as e:
            raise located_error(UnsupportedOpError, node,
                                f"anec cannot lower this use of the op ({type(e).__name__}: {e})",
                                "please report it with the model; meanwhile compute this part on the host") \
                from None

    def _folded_operand(self, x: torch.fx.Node) -> Lowered:
        return self.env[x]

    # ---- outputs ----------------------------------------------------------------
    def _finish(self, out_node: torch.fx.Node | None) -> ImportedModel:
        torch = self.torch
        em, lw = self.em, self.lw
        sig = self.ep.graph_signature
        flat = list(out_node.args[0]) if out_node is not None else []
        for spec, arg in zip(sig.output_specs, flat):
            kind = spec.kind.name
            if kind in ("BUFFER_MUTATION", "USER_INPUT_MUTATION", "PARAMETER_MUTATION"):
                node = arg if isinstance(arg, torch.fx.Node) else out_node
                raise located_error(TorchImportError, node,
                                    f"the model mutates '{spec.target}' in forward() ({kind.lower()})",
                                    "ANE programs are pure functions: keep state outside the model")
        user = [arg for spec, arg in zip(sig.output_specs, flat) if spec.kind.name == "USER_OUTPUT"]
        outputs: list[dict] = []
        produced: dict[int, str] = {}
        em.span = None
        for name, arg in zip(self.output_names, user):
            val = self._arg(arg) if isinstance(arg, torch.fx.Node) else arg
            meta = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            tdtype = dtype_name(meta.dtype) if isinstance(meta, torch.Tensor) else None
            lw.node = arg if isinstance(arg, torch.fx.Node) else out_node
            em.hint = name
            em.span = node_span(lw.node) if isinstance(arg, torch.fx.Node) else None
            entry: dict[str, Any] = {"name": name, "shape": list(shape_of_meta(meta)), "dtype": tdtype}
            if isinstance(val, Deferred):
                val = self._resolve(val)
            if isinstance(val, Device):
                entry.update(self._device_output(name, val, produced, tdtype))
            elif isinstance(val, HostValue):
                entry.update({"kind": "host", "source": val.source, "ops": val.ops, "where": val.where})
            elif isinstance(val, Const):
                key = f"anec.output.{name}"
                lw.weights[key] = val.numpy()
                entry.update({"kind": "constant", "key": key})
            elif isinstance(val, InputRef):
                entry.update({"kind": "input", "source": val.name, "shape": list(val.host_shape or val.shape)})
            elif val is None or isinstance(val, (int, float, bool)):
                entry.update({"kind": "value", "value": val})
            else:
                raise located_error(TorchImportError, lw.node,
                                    f"output '{name}' is a {type(val).__name__}, which anec cannot return")
            outputs.append(entry)
        for src_id, (pname, view) in self.host_sources.items():
            if src_id in produced:
                # the host reads a value the program returns anyway
                for e in outputs:
                    if e.get("kind") == "host" and e["source"] == pname:
                        e["source"] = produced[src_id]
                continue
            em.hint = pname
            x = materialize(em, view)
            if not view.shape:
                x = em.reshape(x, (1,))
            em.named("cast", pname, x, dtype=DType.fp32)
        g = em.graph
        outs = []
        seen = set()
        for e in outputs:
            if e.get("kind") == "device":
                outs.append(g.value(e["program_output"]))
                seen.add(e["program_output"])
        for pname, _view in self.host_sources.values():
            if pname not in seen and g.has_value_name(pname):
                outs.append(g.value(pname))
                seen.add(pname)
        g.set_outputs(outs)
        if not g.outputs:
            raise TorchImportError("the model computes nothing on the device (every output is a "
                                   "constant, an input or host work)",
                                   hint="there is no program to compile for this module")
        self._order_inputs()
        from anec.passes.dce import remove_dead_nodes
        from anec.ir.verifier import verify

        remove_dead_nodes(g)
        module = Module()
        module.weight_sources.append(WeightSource(WEIGHTS_FILE))
        module.add_func(g)
        verify(module)
        used = {n.attrs["weight"] for n in g.nodes if n.op == "const" and "weight" in n.attrs}
        used |= {h.weight for h in self.host_pre}
        used |= {e["key"] for e in outputs if e.get("kind") == "constant"}
        weights = {k: v for k, v in lw.weights.items() if k in used}
        stats = layout_stats(g)
        return ImportedModel(
            module=module, weights=weights, input_names=list(self.input_names),
            output_names=list(self.output_names), inputs=self._input_entries(), outputs=outputs,
            host_steps=[h.__dict__ for h in self.host_pre], notes=self.notes + lw.notes, stats=stats)

    def _device_output(self, name: str, val: View | Expanded, produced: dict[int, str], tdtype: str | None) -> dict:
        em = self.em
        v = as_view(em, val)
        kind = v.kind
        pname = self.prog_out[name]
        if id(val) in produced or id(v) in produced:
            prev = produced.get(id(val), produced.get(id(v)))
            em.named("identity", pname, em.graph.value(prev))
        else:
            x = materialize(em, v)
            if not v.shape:  # program outputs are tensors; the runner gives the scalar back
                x = em.reshape(x, (1,))
            if tdtype == "float16":
                em.named("identity", pname, x)
            else:
                em.named("cast", pname, x, dtype=DType.fp32)
            produced[id(val)] = pname
            produced[id(v)] = pname
        out = {"kind": "device", "program_output": pname, "value_kind": kind}
        for src_id, (_, view) in list(self.host_sources.items()):
            if view is v:
                produced[src_id] = pname
        return out

    def _order_inputs(self) -> None:
        g = self.em.graph
        by_name = {v.name: v for v in g.inputs}
        order = []
        for n in self.input_names:
            if self.prog_in[n] in by_name:
                order.append(by_name[self.prog_in[n]])
            for h in self.host_pre:
                if h.input == n and h.output in by_name and by_name[h.output] not in order:
                    order.append(by_name[h.output])
        order += [v for v in g.inputs if v not in order]
        g.reorder_inputs(order)

    def _input_entries(self) -> list[dict]:
        out = []
        g = self.em.graph
        program_inputs = {v.name for v in g.inputs}
        for spec in self.user_inputs:
            node = next(n for n in self.graph.nodes if n.op == "placeholder" and n.name == spec.arg.name)
            val = node.meta["val"]
            name = node.name
            pname = self.prog_in[name]
            live = pname in program_inputs
            out.append({"name": name, "shape": [int(d) for d in val.shape], "dtype": dtype_name(val.dtype),
                        "program_input": pname if live else None,
                        "program_shape": list(self.input_types[pname].shape) if live else None})
        return out


def _flat(values: Iterable[Any]) -> Iterable[Any]:
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def import_exported(ep: torch.export.ExportedProgram, *, name: str = "main",
                    target: str | None = None) -> ImportedModel:
    """Import a ``torch.export.ExportedProgram`` (decomposed here)."""
    require("torch", "torch", "anec.import_torch")
    if not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", name or ""):
        raise TorchImportError(f"invalid func name '{name}'", hint="use letters, digits and _")
    ep = decompose(ep)
    return FxImporter(ep, name, target).run()


def import_torch(model: Any, example_inputs: Any = (), *, name: str = "main",
                 example_kwargs: Mapping[str, Any] | None = None,
                 target: str | None = None) -> ImportedModel:
    """Import a PyTorch module (or a ``torch.export.ExportedProgram``) as one anec func.

    ``example_inputs`` (a tuple of tensors, like ``torch.export.export``'s
    ``args``) fixes every shape: ANE programs are static. ``target`` picks the
    chip whose conv channel limit decides conv1x1 vs matmul for wide layers.
    """
    torch = require("torch", "torch", "anec.import_torch")
    with importing_from():
        if isinstance(model, torch.export.ExportedProgram):
            ep = model
        else:
            ep = export_module(model, example_inputs, example_kwargs)
        return import_exported(ep, name=name, target=target)
