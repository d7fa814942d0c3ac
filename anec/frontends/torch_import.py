"""``anec.import_torch``: a PyTorch module as one anec func, through ``torch.export``.

::

    import anec
    im = anec.import_torch(model, (x,))      # torch.export -> core ATen -> anec IR
    print(im.summary())                      # I/O, host steps, layout cost
    im.save("out/model")                     # model.ir + weights.safetensors + import.json
    with im.runner(backend="sim") as run:    # compile, load, apply host steps
        (y,) = run(x)                        # same arrays in, same shapes out

The module is exported (``strict=False``) and decomposed to core ATen with
``torch.export``'s default table, except ``scaled_dot_product_attention``,
which stays whole so attention lowers to the layout-aware composition of
:mod:`anec.frontends.aten`. The FX graph is then walked once, in order:

* parameters, buffers and lifted constants are :class:`~anec.frontends.aten.Const`
  values; any op whose operands are all constants is *folded* by running it
  in torch (position ids, causal and padding masks built from ``arange``,
  rotary tables, ...), keeping track of which state_dict view a constant is
  so the IR references checkpoint keys;
* every other op goes to its handler in :data:`~anec.frontends.aten.HANDLERS`;
  an op without one is an :class:`~anec.frontends.aten.UnsupportedOpError`
  naming the ATen op, the user's Python ``file:line`` (from the export's
  stack trace) and what to do;
* the outputs are materialized in torch's shapes and cast to fp32.

The func computes in fp16 (``cast`` at the inputs and outputs): the ANE's
arithmetic. Embedding lookups of an integer input and argmax/topk/sampling
at the outputs are host work, listed in :attr:`ImportedModel.host_steps` and
applied by :class:`TorchRunner`.
"""

from __future__ import annotations

import io
import json
import math
import operator
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from anec.diagnostics import AnecError, Source, Span
from anec.frontends import TorchImportError, require
from anec.frontends.fx import _op_name, _short, located_error, node_location, node_span, repeat_kv_source
from anec.frontends.aten import (
    Const,
    Deferred,
    Device,
    HostValue,
    InputRef,
    Lowering,
    UnsupportedOpError,
    WeightRef,
)
from anec.frontends.lowerings import HANDLERS
from anec.frontends.layout import (
    Emitter,
    View,
    as_view,
    channel_view,
    materialize,
    natural,
    reshape_view,
    to_channels,
)
from anec.ir.graph import Module, WeightSource
from anec.mil.emitter import is_mil_identifier
from anec.ir.types import DType, TensorType

FORMAT = "anec-torch-import/1"
IR_FILE = "model.ir"
WEIGHTS_FILE = "weights.safetensors"
META_FILE = "import.json"
LINK_FILE = "imported.json"
"""Written by ``anec compile`` next to the artifacts of an import's model.ir: where the
import is, so ``anec run`` applies its host steps around the compiled program."""
LINK_MAX = 1 << 16
"""The largest import link anec reads (it holds one relative path)."""
LINK_FORMAT = "anec-import-link/1"

KEEP_WHOLE = ("scaled_dot_product_attention.default", "pad.default", "upsample_nearest1d.vec",
              "upsample_linear1d.vec")
"""Ops left undecomposed: their handlers lower them better than the decomposition (padding
modes and 1-d upsampling would become gathers by index)."""

SKIPPED = ("_assert_tensor_metadata.default", "_assert_scalar.default", "sym_constrain_range.default",
           "sym_constrain_range_for_size.default", "_assert_async.msg")
"""Checks without a value: nothing to lower."""

RANDOM_OPS = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli",
              "normal", "uniform", "exponential", "randperm", "native_dropout", "multinomial")

_VIEW_OPS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "clone", "alias", "detach",
             "lift_fresh_copy", "contiguous", "flatten", "view_copy", "expand"}


# ---------------------------------------------------------------------------
# locations and errors


def _unsupported(node: Any) -> UnsupportedOpError:
    op = _op_name(node)
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
    hint = hints.get(base, "the 27 IR ops cannot express it: compute this part on the host (before "
                           "or after the model), replace it with supported ops (see docs/torch.md), "
                           "or run it through Core ML")
    return located_error(UnsupportedOpError, node, "this ATen op is not supported by anec", hint)


# ---------------------------------------------------------------------------
# export


def import_torch(model: Any, example_inputs: Any = (), *, name: str = "main",
                 example_kwargs: Mapping[str, Any] | None = None,
                 target: str | None = None) -> "ImportedModel":
    """Import a PyTorch module (or a ``torch.export.ExportedProgram``) as one anec func.

    ``example_inputs`` (a tuple of tensors, like ``torch.export.export``'s
    ``args``) fixes every shape: ANE programs are static. ``target`` picks the
    chip whose conv channel limit decides conv1x1 vs matmul for wide layers.
    """
    from anec.frontends.fx import importing_from

    torch = require("torch", "torch", "anec.import_torch")
    with importing_from():
        if isinstance(model, torch.export.ExportedProgram):
            ep = model
        else:
            ep = export_module(model, example_inputs, example_kwargs)
        return import_exported(ep, name=name, target=target)


def export_module(model: Any, example_inputs: Any = (),
                  example_kwargs: Mapping[str, Any] | None = None) -> Any:
    """``torch.export.export(model, ...)`` with anec's errors."""
    torch = require("torch", "torch", "anec.import_torch")
    if not isinstance(model, torch.nn.Module):
        raise TorchImportError(
            f"anec.import_torch needs a torch.nn.Module or an ExportedProgram, got {type(model).__name__}",
            hint="wrap the function in an nn.Module whose forward() calls it")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, list):
        example_inputs = tuple(example_inputs)
    if not isinstance(example_inputs, tuple):
        raise TorchImportError(
            f"example_inputs must be a tuple of tensors, got {type(example_inputs).__name__}",
            hint="pass the forward() arguments as a tuple, e.g. (x,)")
    if example_kwargs is not None and not isinstance(example_kwargs, Mapping):
        raise TorchImportError("example_kwargs must be a dict of keyword arguments")
    import contextlib

    failed = None
    # torch prints the partial graph of a failed export on stderr once per wrapper of its
    # export (twice); the user's line it shows is the error's location instead
    with torch.no_grad(), _torch_said() as said, contextlib.redirect_stderr(io.StringIO()):
        try:
            return torch.export.export(model, example_inputs, dict(example_kwargs or {}), strict=False)
        except AnecError:
            raise
        except Exception as e:  # torch raises many types; report, do not crash
            failed = e
    raise _export_failure(failed, said) from None


_RAISED_AT = re.compile(r'The following call raised this error:\n\s*File "(?P<file>[^"]+)", line (?P<line>\d+), '
                        r'in [^\n]*\n(?P<code>[^\n]*)')


def _export_failure(e: BaseException, said: "_TorchLog") -> TorchImportError:
    """torch.export's failure as an error: torch's message, located at the user's line torch
    names (data-dependent control flow), with what torch logged and warned as notes."""
    from anec.frontends.fx import frame_span

    text = str(e).strip()
    msg = " ".join(text.split("\n")[:3])[:600]
    m = _RAISED_AT.search(text)
    span = frame_span(m.group("file"), int(m.group("line")), m.group("code")) if m else None
    notes = [f"torch: {n}" for n in said.notes()]
    return TorchImportError(
        f"torch.export could not capture the model: {type(e).__name__}: {msg}", span=span, notes=notes,
        hint="anec imports what torch.export captures: check that forward() runs with these "
             "example inputs, returns tensors (e.g. use_cache=False for transformers "
             "decoders) and has no data-dependent control flow")


def _quiet_warnings() -> Any:
    """torch's own deprecation notices (pytree, export internals) are not the user's business."""
    import warnings

    cm = warnings.catch_warnings()

    class _Ctx:
        def __enter__(self) -> None:
            cm.__enter__()
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)

        def __exit__(self, *exc: Any) -> None:
            cm.__exit__(*exc)

    return _Ctx()


def decompose(ep: Any) -> Any:
    """Core ATen, keeping the ops anec lowers whole (:data:`KEEP_WHOLE`)."""
    import torch

    table = torch.export.default_decompositions()
    for name in KEEP_WHOLE:
        op, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, op), overload), None)
    try:
        with _quiet_warnings():
            return ep.run_decompositions(table)
    except Exception as e:
        msg = " ".join(str(e).strip().split("\n")[:3])[:600]
        raise TorchImportError(f"torch.export could not decompose the program to core ATen: "
                               f"{type(e).__name__}: {msg}") from None


def load_pt2(path: str | os.PathLike) -> Any:
    """A saved ``torch.export`` program (``.pt2``), read so that the file cannot run code.

    :func:`anec.frontends.pt2_archive.read_pt2` reads the file once and checks
    it (layout allow-list, sizes, raw tensors only, no pickle, no shared
    library, no code in the program's JSON); ``torch.export.load`` then gets a
    new in-memory zip of the checked members only, without the sample inputs.

    Output pytrees of types this process has not registered with torch's
    pytree (a Hugging Face ``ModelOutput``, a dataclass) are read as dicts of
    the same keys (:func:`plain_pytrees`): anec needs the leaves and their
    names, never the class, and importing it would run the model's code.
    When torch cannot read the program, its own logged error is the message.
    """
    from anec.frontends.pt2_archive import read_pt2

    archive = read_pt2(path)  # before torch is imported: a refusal is quick
    torch = require("torch", "torch", "anec import")
    program = next((k for k in archive.members if k.startswith("models/") and k.endswith(".json")), None)
    if program is not None:
        archive.members[program] = plain_pytrees(archive.members[program])
    data = archive.torch_bytes()
    archive.members.clear()
    with _torch_said() as said:  # torch logs the real error, then raises a generic one
        try:
            with _quiet_warnings():
                return torch.export.load(io.BytesIO(data))
        except Exception as e:
            msg = said.cause() or " ".join(str(e).strip().split("\n")[:2])[:400]
            raise TorchImportError(f"cannot load '{os.fspath(path)}': {msg}",
                                   hint="torch could not read the program; save it again with "
                                        "torch.export.save(exported_program, 'model.pt2')") from None


def plain_pytrees(program_json: bytes) -> bytes:
    """The program's JSON with every pytree node of an unregistered type (``in_spec``,
    ``out_spec``) turned into a ``dict`` of the same keys (a ``tuple`` when its context
    is not a list of keys). Nothing is imported."""
    from torch.utils._pytree import SERIALIZED_TYPE_TO_PYTHON_TYPE

    obj = json.loads(program_json)
    changed = False

    def node(n: Any) -> Any:
        nonlocal changed
        if not isinstance(n, dict):
            return n
        kids = [node(k) for k in n.get("children_spec") or []]
        out = dict(n, children_spec=kids)
        typ = n.get("type")
        if typ is not None and typ not in SERIALIZED_TYPE_TO_PYTHON_TYPE:
            try:
                keys = json.loads(n.get("context") or "null")
            except ValueError:
                keys = None
            if isinstance(keys, list) and keys and isinstance(keys[0], list):  # a dataclass: [fields, ...]
                keys = keys[0]
            if isinstance(keys, list) and len(keys) == len(kids) and all(isinstance(k, str) for k in keys):
                out.update(type="builtins.dict", context=json.dumps(keys))
            else:
                out.update(type="builtins.tuple", context="null")
            changed = True
        return out

    def walk(o: Any) -> Any:
        if isinstance(o, dict):
            res = {}
            for k, v in o.items():
                if k in ("in_spec", "out_spec") and isinstance(v, str):
                    try:
                        spec = json.loads(v)
                    except ValueError:
                        spec = None
                    if isinstance(spec, list) and len(spec) == 2:
                        v = json.dumps([spec[0], node(spec[1])])
                res[k] = walk(v)
            return res
        if isinstance(o, list):
            return [walk(v) for v in o]
        return o

    new = walk(obj)
    return json.dumps(new).encode("utf-8") if changed else program_json


class _TorchLog:
    """torch's log records and Python warnings while a torch call runs (shown only when
    it fails): the error torch logs before raising a generic one, and what it warned."""

    def __init__(self) -> None:
        import logging

        self.records: list[Any] = []
        self.warned: list[str] = []
        outer = self

        class _Keep(logging.Handler):
            def emit(self, record: Any) -> None:
                outer.records.append(record)

        self.handler = _Keep(logging.WARNING)

    def cause(self) -> str:
        """torch's own error: the innermost exception it logged, ``Type: message``."""
        for rec in reversed(self.records):
            if rec.exc_info and rec.exc_info[1] is not None:
                e = rec.exc_info[1]
                while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
                    e = e.__cause__ or e.__context__
                return f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"
        return ""

    def notes(self, limit: int = 5) -> list[str]:
        """What torch logged and warned (distinct lines, first ``limit``)."""
        seen: list[str] = []
        for text in [*(r.getMessage() for r in self.records), *self.warned]:
            line = " ".join(str(text).split())[:300]
            if line and line not in seen:
                seen.append(line)
        return seen[:limit]


class _torch_said:
    """``with _torch_said() as log:`` keeps torch's log records (not printed) and warnings."""

    def __enter__(self) -> _TorchLog:
        import logging
        import warnings

        self.log = _TorchLog()
        # torch's loggers print on their own handlers (torch.export does not propagate):
        # each one with handlers writes to ours instead while the call runs
        names = ["torch"] + [n for n, lg in logging.root.manager.loggerDict.items()
                             if n.startswith("torch.") and isinstance(lg, logging.Logger) and lg.handlers]
        self.saved = []
        for name in names:
            lg = logging.getLogger(name)
            self.saved.append((lg, list(lg.handlers), lg.propagate))
            lg.handlers = [self.log.handler]
            lg.propagate = False
        self.catch = warnings.catch_warnings(record=True)
        self.caught = self.catch.__enter__()
        warnings.simplefilter("always")
        return self.log

    def __exit__(self, *exc: Any) -> None:
        self.log.warned.extend(str(w.message) for w in self.caught
                               if not issubclass(w.category, (DeprecationWarning, FutureWarning)))
        self.catch.__exit__(*exc)
        for lg, handlers, propagate in self.saved:
            lg.handlers, lg.propagate = handlers, propagate


def link_import(ir_file: Path, out_dir: Path) -> bool:
    """After ``anec compile DIR/model.ir -o OUT``: when DIR is an import, write
    ``OUT/imported.json`` naming it (relative to OUT). Returns whether it did."""
    from anec.mil.json_format import format_json
    from anec.fsutil import replace_file

    src = Path(ir_file).resolve().parent
    if Path(ir_file).name != IR_FILE or not (src / META_FILE).is_file():
        return False
    rel = os.path.relpath(src, Path(out_dir).resolve())
    text = format_json({"format": LINK_FORMAT, "import": rel}) + "\n"
    replace_file(str(Path(out_dir) / LINK_FILE), lambda f: f.write(text.encode("utf-8")), suffix=".json")
    return True


def linked_import(out_dir: str | os.PathLike) -> Path | None:
    """The import directory ``OUT/imported.json`` names, or None when there is none."""
    from anec.fsutil import read_regular

    link = Path(out_dir) / LINK_FILE
    if link.is_symlink():
        raise TorchImportError(f"{link}: the import link is a symbolic link", hint="compile the import's model.ir again")
    if not os.path.lexists(link):
        return None
    data = read_regular(link, LINK_MAX, "import link")  # a regular file, bounded before it is read
    try:
        meta = json.loads(data.decode("utf-8"))
        rel = meta["import"] if meta.get("format") == LINK_FORMAT else None
    except (ValueError, KeyError, TypeError, AttributeError):
        rel = None
    if not isinstance(rel, str):
        raise TorchImportError(f"{link}: not an anec import link", hint="compile the import's model.ir again")
    src = (Path(out_dir) / rel)
    if not (src / META_FILE).is_file():
        raise TorchImportError(f"{link}: the import it was compiled from, '{src}', is gone",
                               hint="keep the anec import directory next to the build, or compile again")
    return src


# ---------------------------------------------------------------------------
# the FX walk


def _leaf_names(spec: Any, n: int) -> list[str]:
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


def _ident(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
    return out if out[0].isalpha() or out[0] == "_" else "v_" + out


def _unique(names: Iterable[str], taken: set[str]) -> list[str]:
    out = []
    for n in names:
        base, i, cand = n, 1, n
        while cand in taken:
            cand = f"{base}_{i}"
            i += 1
        taken.add(cand)
        out.append(cand)
    return out


_TORCH_DTYPES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "fp32", "float64": "fp32",
}


def _dtype_name(dt: Any) -> str:
    return str(dt).replace("torch.", "")


@dataclass
class _HostPre:
    kind: str
    input: str
    output: str
    weight: str
    shape: list[int]
    where: str


class _Importer:
    def __init__(self, ep: Any, name: str, target: str | None) -> None:
        import torch
        from anec.targets import get_target

        self.torch = torch
        self.ep = ep
        self.name = name
        self.target = get_target(target)
        self.graph = ep.graph
        self.env: dict[Any, Any] = {}
        sig = ep.graph_signature
        self.user_inputs = [s for s in sig.input_specs if s.kind.name == "USER_INPUT"]
        self.input_names = [s.arg.name for s in self.user_inputs]
        outs = [s for s in sig.output_specs if s.kind.name == "USER_OUTPUT"]
        self.output_names = _unique((_ident(n) for n in _leaf_names(ep.call_spec.out_spec, len(outs))),
                                    set(self.input_names))
        # program I/O names: torch's, unless MIL cannot spell them (keywords, type names)
        taken = set(self.input_names) | set(self.output_names)
        self.prog_in = {n: n if is_mil_identifier(n) else _unique([f"{_ident(n)}_in"], taken)[0]
                        for n in self.input_names}
        self.prog_out = {n: n if is_mil_identifier(n) else _unique([f"{_ident(n)}_out"], taken)[0]
                         for n in self.output_names}
        self.em = Emitter(_ident(name), reserved=set(self.prog_out.values()) | set(self.prog_in.values()))
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
        self.tensors: dict[str, Any] = {}

    # ---- values ---------------------------------------------------------------
    def _stored(self, key: str) -> np.ndarray:
        t = self.tensors[key].detach().cpu()
        if t.dtype.is_floating_point:
            t = t.float()
        return t.numpy()

    def _placeholder(self, node: Any, spec: Any) -> Any:
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
            v = _entry_view(self.em, xh) if _feeds_linear(node) else natural(xh)
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
                f"input '{ref.name}' is {_dtype_name(ref.dtype)} in torch and fp32 on the device "
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
        name = self.graph_fresh_input(_ident(key.removesuffix(".weight")))
        t = TensorType(DType.fp32, tuple(shape) + (dim,))
        saved = em.hint
        em.hint = name
        x = em.input(name, t)
        self.input_types[name] = t
        xh = em.op("cast", x, dtype=DType.fp16, suffix="h")
        v = _entry_view(em, xh) if _feeds_linear(self.lw.node) else natural(xh)
        em.hint = saved
        self.embeds[memo] = v
        self.host_pre.append(_HostPre("embedding", ids.name, name, key, list(shape),
                                      node_location(self.lw.node)))
        return v

    def graph_fresh_input(self, base: str) -> str:
        taken = (set(self.input_names) | set(self.output_names) | set(self.prog_in.values())
                 | set(self.prog_out.values()) | self.em.graph.value_names())
        name = _unique([_ident(base)], taken)[0]
        self.em.reserved.add(name)
        return name

    def _host_source(self, x: Any) -> str:
        x = self.lw.dev(x)
        hit = self.host_sources.get(id(x))
        if hit is not None:
            return hit[0]
        name = self.graph_fresh_input(f"{self.lw.node.name}_in")
        self.host_sources[id(x)] = (name, as_view(self.em, x))
        return name

    # ---- walk -------------------------------------------------------------------
    def run(self) -> "ImportedModel":
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

    def _resolve(self, d: Deferred) -> Any:
        saved = self.lw.node
        self.lw.node = d.node
        try:
            return d.make()
        finally:
            self.lw.node = saved

    def _bind(self, node: Any) -> dict:
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

    def _call(self, node: Any) -> None:
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
        if host is not None and base not in _VIEW_OPS | {"_to_copy", "argmax", "argmin", "topk"}:
            lw.dev(host)  # raises: host results may only flow to the outputs
        if (base in RANDOM_OPS and base != "multinomial") or (base == "native_dropout" and a.get("train")):
            raise located_error(UnsupportedOpError, node, "a random op in the model",
                                "anec compiles deterministic programs: remove it (call model.eval() "
                                "for dropout), or sample on the host")
        live = any(isinstance(v, Device + (InputRef, HostValue)) for v in values)
        if not live:
            self.env[node] = self._fold(node, a)
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

    def _fold(self, node: Any, a: dict) -> Any:
        torch = self.torch
        name = str(node.target)
        base = name.split(".")[1] if name.startswith("aten.") else name
        if base in RANDOM_OPS or (base in ("dropout", "native_dropout") and a.get("train")):
            raise located_error(UnsupportedOpError, node, "a random op in the model",
                                "anec compiles deterministic programs: remove it, or sample on the host")
        args = self._torch_args(node.args)
        kwargs = {k: self._torch_args(v) for k, v in node.kwargs.items()}
        try:
            out = node.target(*args, **kwargs)
        except Exception as e:
            raise located_error(TorchImportError, node, f"folding this constant op failed ({e})") from None
        return self._wrap_folded(node, base, a, out)

    def _torch_args(self, x: Any) -> Any:
        torch = self.torch
        if isinstance(x, torch.fx.Node):
            v = self.env[x]
            if isinstance(v, Deferred):  # pragma: no cover - deferred results are device values
                v = self._resolve(v)
            if isinstance(v, Const):
                return v.value
            if isinstance(v, tuple):
                return tuple(i.value if isinstance(i, Const) else i for i in v)
            return v
        if isinstance(x, (list, tuple)):
            return type(x)(self._torch_args(i) for i in x)
        return x

    def _wrap_folded(self, node: Any, base: str, a: dict, out: Any) -> Any:
        torch = self.torch
        if isinstance(out, (tuple, list)):
            return tuple(self._wrap_folded(node, "", {}, o) for o in out)
        if not isinstance(out, torch.Tensor):
            return out
        origin = None
        src = a.get("self", a.get("input"))
        if isinstance(src, Const) and src.origin is not None and out.dtype.is_floating_point:
            origin = _track(base, a, src, out)
        if base == "embedding" and isinstance(a.get("weight"), Const) and a["weight"].origin is not None:
            origin = _embedding_ref(a["weight"], a["indices"], out)
        if origin is not None and origin.final != tuple(out.shape):
            origin = None
        return Const(out.detach(), origin)

    # ---- outputs ----------------------------------------------------------------
    def _finish(self, out_node: Any) -> "ImportedModel":
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
            tdtype = _dtype_name(meta.dtype) if isinstance(meta, torch.Tensor) else None
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
        stats = _layout_stats(g)
        return ImportedModel(
            module=module, weights=weights, input_names=list(self.input_names),
            output_names=list(self.output_names), inputs=self._input_entries(), outputs=outputs,
            host_steps=[h.__dict__ for h in self.host_pre], notes=self.notes + lw.notes, stats=stats)

    def _device_output(self, name: str, val: Any, produced: dict[int, str], tdtype: str | None) -> dict:
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
            out.append({"name": name, "shape": [int(d) for d in val.shape], "dtype": _dtype_name(val.dtype),
                        "program_input": pname if live else None,
                        "program_shape": list(self.input_types[pname].shape) if live else None})
        return out


_LINEAR = ("mm", "addmm", "bmm", "matmul", "baddbmm")

_SPATIAL = ("convolution", "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d",
            "upsample_nearest2d", "upsample_nearest1d", "upsample_bilinear2d", "upsample_linear1d")
"""Layers that read their input as it is (NCHW): the search for linear layers stops there."""


def _feeds_linear(node: Any) -> bool:
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
            if _short(u) in _LINEAR:
                return True
            if _short(u) not in _SPATIAL:
                todo.append(u)
    return False


def _entry_view(em: Emitter, x: Any) -> View:
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
    try:
        return tuple(int(d) for d in meta.shape)
    except (AttributeError, TypeError):
        return ()


def _flat(values: Iterable[Any]) -> Iterable[Any]:
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _track(base: str, a: dict, src: Const, out: Any) -> WeightRef | None:
    """The weight view a folded view-like op of a weight view gives, if any."""
    ref = src.origin
    if base in _VIEW_OPS or base in ("_to_copy", "expand_copy"):
        if math.prod(out.shape) != math.prod(src.shape):
            return None
        return ref.reshape(tuple(out.shape))
    if base == "permute":
        return ref.permute([d % len(src.shape) for d in a["dims"]])
    if base in ("t", "transpose"):
        dims = list(range(len(src.shape)))
        if base == "transpose":
            d0, d1 = a["dim0"] % len(dims), a["dim1"] % len(dims)
        else:
            d0, d1 = 0, len(dims) - 1
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return ref.permute(dims)
    if base in ("slice", "select"):
        dim = a.get("dim", 0) % len(src.shape)
        size = src.shape[dim]
        if base == "select":
            i = a["index"] % size
            r = ref.narrow(dim, i, i + 1)
        else:
            if a.get("step", 1) != 1:
                return None
            end = a.get("end")
            start, stop, _ = slice(a.get("start"), end if end is None or end < 2**62 else None).indices(size)
            r = ref.narrow(dim, start, stop)
        return r.reshape(tuple(out.shape)) if r is not None else None
    return None


def _embedding_ref(w: Const, ids: Any, out: Any) -> WeightRef | None:
    """``embedding(W, arange(a, b))`` is the weight slice ``W[a:b]``."""
    if not isinstance(ids, Const):
        return None
    flat = ids.value.reshape(-1)
    if flat.numel() == 0:
        return None
    first = int(flat[0])
    if not bool((flat == (first + np.arange(flat.numel()))).all()):
        import torch

        if not bool(torch.equal(flat, torch.arange(first, first + flat.numel(), dtype=flat.dtype))):
            return None
    r = w.origin.narrow(0, first, first + flat.numel())
    return r.reshape(tuple(out.shape)) if r is not None else None


def _layout_stats(g: Any) -> dict:
    counts: dict[str, int] = {}
    moved = 0
    for n in g.nodes:
        counts[n.op] = counts.get(n.op, 0) + 1
        if n.op == "transpose":
            moved += n.operands[0].type.nbytes
    return {"nodes": len(g.nodes), "ops": counts, "transposes": counts.get("transpose", 0),
            "transpose_bytes": moved, "reshapes": counts.get("reshape", 0),
            "weights": len({n.attrs["weight"] for n in g.nodes if n.op == "const" and "weight" in n.attrs})}


def import_exported(ep: Any, *, name: str = "main", target: str | None = None) -> "ImportedModel":
    """Import a ``torch.export.ExportedProgram`` (decomposed here)."""
    require("torch", "torch", "anec.import_torch")
    if not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", name or ""):
        raise TorchImportError(f"invalid func name '{name}'", hint="use letters, digits and _")
    ep = decompose(ep)
    return _Importer(ep, name, target).run()


# ---------------------------------------------------------------------------
# the result


@dataclass
class ImportedModel:
    """What :func:`import_torch` produced.

    ``input_names``/``output_names`` are the torch module's (in order);
    ``inputs``/``outputs`` say for each where it lives (a program input or
    output, host work, a constant); ``host_steps`` are the lookups the host
    does before the program. ``stats`` counts the layout ops (transposes and
    the bytes they move, reshapes) of the func.
    """

    module: Module
    weights: dict[str, np.ndarray]
    input_names: list[str]
    output_names: list[str]
    inputs: list[dict] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)
    host_steps: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def func(self) -> Any:
        """The one func (an anec Graph)."""
        return next(iter(self.module.funcs.values()))

    @property
    def name(self) -> str:
        return self.func.name

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """The module as IR text, with a header comment (what :meth:`save` writes)."""
        from anec.ir.printer import print_module

        return self._header() + print_module(self.module)

    def _header(self) -> str:
        lines = ["// Imported from PyTorch (torch.export, core ATen) by anec.import_torch.",
                 f"// func {self.name}: {self.stats.get('nodes', 0)} nodes, "
                 f"{self.stats.get('transposes', 0)} transposes, {self.stats.get('weights', 0)} weight tensors"]
        for h in self.host_steps:
            lines.append(f"// host: %{h['output']} = embedding('{h['weight']}', {h['input']})")
        for o in self.outputs:
            if o.get("kind") == "host":
                ops = ", ".join(op["op"] for op in o["ops"])
                lines.append(f"// host: output {o['name']} = {ops}(%{o['source']})")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        """A readable report: I/O, host work, layout cost, notes."""
        g = self.func
        out = [f"func {self.name}: {len(g.nodes)} nodes, {self.stats.get('weights', 0)} weight tensors"]
        for e in self.inputs:
            where = (f"program input %{e['program_input']}" if e["program_input"] else "host only")
            out.append(f"  input  {e['name']}: {e['dtype']}{e['shape']} -> {where}")
        for h in self.host_steps:
            out.append(f"  host   %{h['output']} = embedding lookup of {h['input']} in '{h['weight']}'")
        for o in self.outputs:
            kind = o.get("kind")
            if kind == "device":
                where = f"program output %{o['program_output']}"
            elif kind == "host":
                where = f"host {', '.join(op['op'] for op in o['ops'])} of %{o['source']}"
            else:
                where = kind
            out.append(f"  output {o['name']}: {o.get('dtype')}{o.get('shape')} <- {where}")
        out.append(f"  layout: {self.stats.get('transposes', 0)} transposes moving "
                   f"{self.stats.get('transpose_bytes', 0)} bytes, {self.stats.get('reshapes', 0)} reshapes")
        for n in self.notes:
            out.append(f"  note: {n}")
        return "\n".join(out) + "\n"

    def meta(self) -> dict:
        """The ``import.json`` content."""
        from anec import __version__

        return {"format": FORMAT, "anec_version": __version__, "func": self.name,
                "input_names": self.input_names, "output_names": self.output_names,
                "inputs": self.inputs, "outputs": self.outputs, "host_steps": self.host_steps,
                "notes": self.notes, "stats": self.stats}

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``model.ir``, ``weights.safetensors`` and ``import.json`` (atomically).

        Weights are stored in fp16, the precision the program computes with
        (out-of-range values become inf, which ``anec compile`` reports with
        ANE-FP16-RANGE naming the key). ``anec compile DIR/model.ir`` then works
        with no further options. An
        existing import directory is replaced; any other non-empty directory
        is refused.
        """
        from safetensors.numpy import save

        from anec.fsutil import write_tree_atomic
        from anec.mil.json_format import format_json

        dest = Path(directory)
        if dest.exists():
            if not dest.is_dir():
                raise TorchImportError(f"cannot save to '{dest}': it is a file")
            if any(dest.iterdir()) and not (dest / META_FILE).is_file():
                raise TorchImportError(
                    f"refusing to replace '{dest}': a non-empty directory without {META_FILE}",
                    hint="choose an empty or new output directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tensors = {k: np.ascontiguousarray(_stored_dtype(k, v)) for k, v in sorted(self.weights.items())}
        files = {
            IR_FILE: self.text().encode("utf-8"),
            WEIGHTS_FILE: save(tensors) if tensors else save({}),
            META_FILE: (format_json(_jsonable(self.meta())) + "\n").encode("utf-8"),
        }
        try:
            write_tree_atomic(dest, files)
        except AnecError as e:
            raise TorchImportError(e.message, hint=e.hint) from None
        return dest

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "ImportedModel":
        """Read a directory written by :meth:`save`."""
        from anec.ir.parser import parse_file
        from anec.weight_store import load_weights

        d = Path(directory)
        try:
            meta = json.loads((d / META_FILE).read_text("utf-8"))
        except FileNotFoundError:
            raise TorchImportError(f"'{d}' is not an import directory ({META_FILE} is missing)",
                                   hint="write one with anec import or ImportedModel.save") from None
        except (OSError, ValueError) as e:
            raise TorchImportError(f"{d / META_FILE}: unreadable ({e})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise TorchImportError(f"{d / META_FILE}: not an anec import (format {meta.get('format')!r})"
                                   if isinstance(meta, dict) else f"{d / META_FILE}: not an anec import")
        module = parse_file(d / IR_FILE)
        weights = dict(load_weights(d / WEIGHTS_FILE))
        try:
            return cls(module=module, weights=weights, input_names=list(meta["input_names"]),
                       output_names=list(meta["output_names"]), inputs=list(meta["inputs"]),
                       outputs=list(meta["outputs"]), host_steps=list(meta["host_steps"]),
                       notes=list(meta.get("notes", [])), stats=dict(meta.get("stats", {})))
        except (KeyError, TypeError) as e:
            raise TorchImportError(f"{d / META_FILE}: missing or malformed field ({e})") from None

    def runner(self, backend: str = "auto", *, target: str | None = None, mode: str = "fp16",
               seed: int = 0, artifact: str | os.PathLike | None = None, compress: Any = None,
               compress_gate: Any = None, compress_form: str | None = None) -> "TorchRunner":
        """A callable running the whole model: host steps, then the program, then host steps.

        ``backend``: ``"sim"``, ``"ane"``, ``"auto"`` (compile + runtime) or
        ``"interp"`` (the reference interpreter in ``mode`` fp32/fp16).
        ``artifact``: run this compiled artifact of the program (``anec compile``'s
        output directory) instead of compiling it again.
        ``compress``, ``compress_gate``, ``compress_form``: compile the program with
        compressed weights, as :func:`anec.compiler.compile_module` takes them (a SPEC over
        the imported weights' keys, e.g. ``"int8"``; docs/compression.md); the compiled
        artifact (``runner.artifact``) reports what each weight got.
        """
        return TorchRunner(self, backend=backend, target=target, mode=mode, seed=seed, artifact=artifact,
                           compress=compress, compress_gate=compress_gate, compress_form=compress_form)

    def check_ranges(self, *args: Any, **kwargs: Any) -> list:
        """The fp16 range analysis (:func:`anec.ranges.check_ranges`) on sample inputs given
        as to the torch module (host steps applied): a :class:`~anec.ranges.RangeReport`
        whose ``findings`` name each node that overflows fp16 or is all subnormals."""
        from anec.ranges import check_ranges

        run = TorchRunner(self, backend="interp", mode="fp32")
        feed = run._prepare(run._bind(args, kwargs))
        return check_ranges(self.module, feed, run.store, funcs=[self.name])


def _stored_dtype(key: str, arr: np.ndarray) -> np.ndarray:
    """Float weights are saved in fp16, the precision the program reads them in (the
    IR declares every weight const fp16; host embedding lookups feed an fp16 cast)."""
    a = np.asarray(arr)
    if a.dtype.kind == "f" and not key.startswith("anec.output."):
        with np.errstate(over="ignore"):
            return a.astype(np.float16)
    return a


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


# ---------------------------------------------------------------------------
# running the whole model


class TorchRunner:
    """Runs an :class:`ImportedModel` like the torch module: same arrays in
    (positionally or by name), the outputs as a tuple of numpy arrays in torch's
    shapes and dtypes. Host steps (embedding lookups, argmax, sampling) run in
    numpy around the program."""

    def __init__(self, imported: ImportedModel, backend: str = "auto", target: str | None = None,
                 mode: str = "fp16", seed: int = 0, artifact: str | os.PathLike | None = None,
                 compress: Any = None, compress_gate: Any = None, compress_form: str | None = None) -> None:
        from anec.weight_store import WeightStore

        if compress is not None and (backend == "interp" or artifact is not None):
            raise AnecError("compress= applies when the runner compiles the program",
                            hint="use backend 'sim', 'ane' or 'auto' without artifact=, or compile the "
                                 "artifact with anec compile --compress")

        self.im = imported
        self.backend = backend
        self.rng = np.random.default_rng(seed)
        self.store = WeightStore(imported.weights, source=f"<{imported.name} weights>")
        self._runtime = None
        self._program = None
        self.artifact = None
        if backend == "interp":
            if mode not in ("fp32", "fp16"):
                raise AnecError(f"unknown interpreter mode '{mode}'", hint="use fp32 or fp16")
            self.mode = mode
        else:
            from anec.runtime import Runtime

            if artifact is None:
                from anec.compiler import compile_module

                result = compile_module(imported.module, weights=self.store, target=target, host_casts=True,
                                        compress=compress, compress_gate=compress_gate, compress_form=compress_form)
                self.artifact = result.artifacts[imported.name]
            else:
                self.artifact = os.fspath(artifact)
            self._runtime = Runtime(backend=backend)
            try:
                self._program = self._runtime.load(self.artifact, func=imported.name if artifact else None)
            except BaseException:
                self.close()
                raise

    def __enter__(self) -> "TorchRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        res = self.run(*args, **kwargs)
        return tuple(res[n] for n in self.im.output_names)

    def run(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Outputs by name."""
        arrays = self._bind(args, kwargs)
        feed = self._prepare(arrays)
        prog_out = self.program(feed)
        return self._finish(arrays, prog_out)

    def program(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the program alone on its inputs (after host pre-processing)."""
        if self._program is not None:
            return {k: np.asarray(v) for k, v in self._program(**feed).items()}
        from anec.ir.interp import interpret

        func = self.im.func
        if self.mode == "fp16":  # as the device computes it (range-safe norms)
            from anec.passes.manager import device_form

            func = device_form(func)
        out = interpret(func, feed, self.store, mode=self.mode)
        return {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}

    def random_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """Sample inputs in torch's shapes and dtypes: ids within their embedding table for
        the inputs of host lookups, ones for other integer inputs (masks), normal(0, 1)
        floats."""
        rng = np.random.default_rng(seed)
        rows = {h["input"]: self.store[h["weight"]].shape[0] for h in self.im.host_steps}
        out = {}
        for e in self.im.inputs:
            dt = np.dtype(e["dtype"]) if e["dtype"] in _NP_DTYPES else np.dtype(np.float32)
            if e["name"] in rows:
                out[e["name"]] = rng.integers(0, rows[e["name"]], size=e["shape"]).astype(dt)
            elif dt.kind in "iub":
                out[e["name"]] = np.ones(e["shape"], dt)
            else:
                out[e["name"]] = rng.standard_normal(e["shape"]).astype(dt)
        return out

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        names = self.im.input_names
        if len(args) > len(names):
            raise AnecError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        got = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                from anec.diagnostics import did_you_mean

                raise AnecError(f"the model has no input '{k}'", hint=did_you_mean(k, names))
            if k in got:
                raise AnecError(f"input '{k}' given twice")
            got[k] = v
        out = {}
        for e in self.im.inputs:
            if e["name"] not in got:
                raise AnecError(f"missing input '{e['name']}' ({e['dtype']}{e['shape']})")
            a = _to_numpy(got[e["name"]])
            if list(a.shape) != list(e["shape"]):
                raise AnecError(f"input '{e['name']}' has shape {list(a.shape)}, the model was "
                                f"imported with {e['shape']}",
                                hint="ANE programs have static shapes: import once per shape")
            out[e["name"]] = a
        return out

    def _prepare(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed: dict[str, np.ndarray] = {}
        types = {v.name: v.type for v in self.im.func.inputs}
        for e in self.im.inputs:
            pin = e.get("program_input")
            if pin:
                a = arrays[e["name"]]
                if a.dtype.kind not in "fiub":
                    raise AnecError(f"input '{e['name']}' has dtype {a.dtype}")
                feed[pin] = a.astype(types[pin].dtype.np).reshape(types[pin].shape)
        for h in self.im.host_steps:
            ids = np.asarray(arrays[h["input"]])
            if ids.dtype.kind not in "iub":
                raise AnecError(f"input '{h['input']}' must hold integer ids, got {ids.dtype}")
            table = self.store[h["weight"]]
            ids = ids.astype(np.int64).reshape(h["shape"])
            if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
                raise AnecError(f"input '{h['input']}' has ids outside [0, {table.shape[0]})")
            feed[h["output"]] = np.asarray(table, dtype=np.float32)[ids].astype(types[h["output"]].dtype.np)
        return feed

    def _finish(self, arrays: Mapping[str, np.ndarray], prog: Mapping[str, np.ndarray]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for e in self.im.outputs:
            kind = e.get("kind")
            if kind == "device":
                a = prog[e["program_output"]].reshape(e["shape"])
                out[e["name"]] = _as_torch_dtype(a, e.get("dtype"))
            elif kind == "host":
                a = prog[e["source"]]
                for op in e["ops"]:
                    a = _host_op(a, op, self.rng)
                out[e["name"]] = np.asarray(a).reshape(e["shape"]) if e.get("shape") is not None else a
            elif kind == "constant":
                out[e["name"]] = np.asarray(self.store[e["key"]])
            elif kind == "input":
                out[e["name"]] = np.asarray(arrays[e["source"]]).reshape(e["shape"])
            else:
                out[e["name"]] = e.get("value")
        return out


_NP_DTYPES = ("float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    try:
        return np.asarray(x)
    except Exception as e:
        raise AnecError(f"an input is not an array: {e}") from None


def _as_torch_dtype(a: np.ndarray, dtype: str | None) -> np.ndarray:
    if dtype is None or dtype in ("float32", "float64", "bfloat16"):
        return a.astype(np.float32, copy=False)
    if dtype == "float16":
        return a.astype(np.float16)
    if dtype == "bool":
        return a > 0.5
    return np.rint(a).astype(np.dtype(dtype) if dtype in ("int64", "int32", "int16", "int8", "uint8") else np.int64)


def _host_op(a: np.ndarray, op: dict, rng: np.random.Generator) -> np.ndarray:
    kind = op["op"]
    if kind in ("argmax", "argmin"):
        fn = np.argmax if kind == "argmax" else np.argmin
        dim = op.get("dim")
        if dim is None:
            r = np.asarray(fn(a))
            return r.reshape((1,) * a.ndim) if op.get("keepdim") else r
        r = fn(a, axis=dim)
        return np.expand_dims(r, dim) if op.get("keepdim") else r
    if kind in ("topk_values", "topk_indices"):
        dim, k = op["dim"] % a.ndim, op["k"]
        key = -a if op.get("largest", True) else a
        idx = np.argsort(key, axis=dim, kind="stable")
        idx = np.take(idx, np.arange(k), axis=dim)
        return idx.astype(np.int64) if kind == "topk_indices" else np.take_along_axis(a, idx, axis=dim)
    if kind == "multinomial":
        p = np.asarray(a, dtype=np.float64)
        flat = p.reshape(-1, p.shape[-1])
        out = np.stack([rng.choice(flat.shape[1], size=op["num_samples"], p=row / row.sum())
                        for row in flat])
        return out.reshape(p.shape[:-1] + (op["num_samples"],)).astype(np.int64)
    if kind == "reshape":
        return a.reshape(op["shape"])
    if kind == "astype":
        return a.astype(np.dtype(op["dtype"]) if op["dtype"] != "bool" else bool)
    raise AnecError(f"unknown host op '{kind}' in the import description")  # pragma: no cover
