"""A PyTorch module as a core-ATen ``torch.export`` program, with anec's errors.

:func:`export_module` runs ``torch.export.export(strict=False)`` and reports a
failure at the user's line torch names, with what torch logged as notes;
:func:`decompose` lowers the program to core ATen with torch's default table,
keeping whole the ops anec lowers better undecomposed (:data:`KEEP_WHOLE`);
:func:`load_pt2` reads a saved ``.pt2`` program without letting the file run
code (:mod:`anec.frontends.pt2_archive` checks it first).
"""

from __future__ import annotations

import io
import json
import os
import re
from typing import Any, Mapping

from anec.diagnostics import AnecError
from anec.frontends import TorchImportError, require
from anec.frontends.fx import frame_span

KEEP_WHOLE = ("scaled_dot_product_attention.default", "pad.default", "upsample_nearest1d.vec",
              "upsample_linear1d.vec")
"""Ops left undecomposed: their handlers lower them better than the decomposition (padding
modes and 1-d upsampling would become gathers by index)."""


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
