""":class:`ImportedModel`, the result of an import, and its saved form.

An import directory holds ``model.ir`` (the func, with a header comment
naming the host steps), ``weights.safetensors`` (fp16, the precision the
program reads) and ``import.json`` (``anec-torch-import/1``: the torch
module's I/O, where each lives, the host steps, notes and layout stats),
written atomically by :meth:`ImportedModel.save` and read back by
:meth:`ImportedModel.load`. ``anec compile DIR/model.ir -o OUT`` writes
``OUT/imported.json`` (:func:`link_import`) so ``anec run OUT`` finds the
import and applies its host steps (:func:`linked_import`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anec.diagnostics import AnecError
from anec.frontends import TorchImportError
from anec.ir.graph import Graph, Module

if TYPE_CHECKING:
    from anec.frontends.torch.runner import TorchRunner
    from anec.ranges import RangeReport

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
    def func(self) -> Graph:
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
        from anec.version import __version__

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
        from anec.frontends.torch.runner import TorchRunner

        return TorchRunner(self, backend=backend, target=target, mode=mode, seed=seed, artifact=artifact,
                           compress=compress, compress_gate=compress_gate, compress_form=compress_form)

    def check_ranges(self, *args: Any, **kwargs: Any) -> list[RangeReport]:
        """The fp16 range analysis (:func:`anec.ranges.check_ranges`) on sample inputs given
        as to the torch module (host steps applied): a :class:`~anec.ranges.RangeReport`
        whose ``findings`` name each node that overflows fp16 or is all subnormals."""
        from anec.frontends.torch.runner import TorchRunner
        from anec.ranges import check_ranges

        run = TorchRunner(self, backend="interp", mode="fp32")
        feed = run.prepare(run.bind(args, kwargs))
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
