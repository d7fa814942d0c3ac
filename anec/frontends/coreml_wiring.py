"""A pipeline artifact's wiring, for exporting all its stages as one Core ML function.

:func:`pipeline_wiring` reads the top manifest's wiring and checks it against
the stages' manifests (names, dtypes, device shapes): which func input or
earlier stage output each stage input is bound to, and the names the package
gives stage values (``s03_v12``, :func:`stage_name`). :func:`check_composition`
proves, by value numbering, that the stages composed by the wiring compute what
the whole func's ``program.ir`` computes. A single program is a one-stage
pipeline (:func:`program_wiring`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from anec.frontends import CoreMLExportError
from anec.ir.ops import const_literal
from anec.mil.artifact import artifact_weights
from anec.mil.manifest_types import IOEntry, PipelineManifest
from anec.mil.multi_program import stage_dir


def stage_name(k: int, name: str) -> str:
    """The package's name for ``name`` of stage ``k``'s model.mil: ``s03_v12``, ``s03_w0``."""
    return f"s{k:02d}_{name}"


_STAGE_NAME = re.compile(r"s\d{2,}_")


@dataclass
class Wiring:
    """A pipeline manifest's wiring, checked against the stages' manifests.

    ``sources[k][inI]`` is what stage ``k``'s input ``inI`` is bound to:
    ``("input", NAME)`` or ``("stage", j, "outM")``. ``names[k]`` maps the
    stage's model.mil names that the package names otherwise: its inputs (the
    package name of their source) and its outputs that are func outputs (the
    func output's name). ``outputs`` lists, in the manifest's order, each func
    output with the stage output holding it.
    """

    sources: list[dict[str, tuple]]
    names: list[dict[str, str]]
    outputs: list[tuple[str, int, str]]

    def rename(self, k: int) -> Callable[[str], str]:
        fixed = self.names[k]
        return lambda name: fixed.get(name) or stage_name(k, name)


def pipeline_wiring(pipe: Any) -> Wiring:
    """Read and check the wiring of ``pipe`` (:class:`CoreMLExportError` on any inconsistency)."""
    man = pipe.manifest
    try:
        return _read_wiring(man, pipe.stages)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise CoreMLExportError(f"pipeline '{pipe.func}': malformed manifest wiring ({type(e).__name__}: {e})",
                                hint="the artifact was modified after compiling; recompile it") from None


def _read_wiring(man: "PipelineManifest", stages: list[Any]) -> Wiring:
    def bad(msg: str) -> CoreMLExportError:
        return CoreMLExportError(f"pipeline '{man.func}': {msg}",
                                 hint="the artifact was modified after compiling; recompile it")

    def sig(e: "IOEntry") -> tuple[str, list[int]]:
        return str(e.dtype), [int(d) for d in e.shape]

    func_in = {str(e.name): sig(e) for e in man.inputs}
    func_out = [str(e.name) for e in man.outputs]
    for name in [*func_in, *func_out]:
        if _STAGE_NAME.match(name):
            raise CoreMLExportError(
                f"func '{man.func}': I/O name '{name}' has the form the package gives stage values (sNN_...)",
                hint="rename it in the source and recompile")
    if len(stages) != len(man.stages):
        raise bad(f"{len(man.stages)} stages in the manifest, {len(stages)} loaded")
    stage_out: list[dict[str, tuple[str, list[int]]]] = []
    holder: dict[tuple[int, str], str] = {}  # (stage, outM) -> func output it is
    out_of = man.outputs_from
    if sorted(out_of) != sorted(func_out):
        raise bad(f"outputs_from names {sorted(out_of)}, the func's outputs are {sorted(func_out)}")
    for name in func_out:
        src = out_of[name]
        key = (int(src.stage), str(src.output))  # type: ignore[arg-type]  # checked at load
        if key in holder:
            raise bad(f"func outputs '{holder[key]}' and '{name}' both come from stage {key[0]} {key[1]}")
        holder[key] = name
    sources: list[dict[str, tuple]] = []
    names: list[dict[str, str]] = []
    for k, (entry, art) in enumerate(zip(man.stages, stages)):
        where = f"stage {k} ({entry.dir})"
        if not all(isinstance(x.value, str) for x in [*entry.inputs, *entry.outputs]):
            raise KeyError(f"{where}: a stage input or output without its func 'value'")
        if art.manifest.weight_inputs:
            raise CoreMLExportError(
                f"func '{man.func}' {where}: the stage takes its weights as program inputs (a program "
                "shared across repeated layers); a Core ML package holds them as constants",
                hint="recompile with --share-programs never for the export")
        ins = [str(i.name) for i in entry.inputs]
        if ins != [str(e.name) for e in art.manifest.inputs]:
            raise bad(f"{where}: the manifest wires inputs {ins}; the stage has "
                      f"{[e.name for e in art.manifest.inputs]}")
        outs = [str(o.name) for o in entry.outputs]
        if outs != [str(e.name) for e in art.manifest.outputs]:
            raise bad(f"{where}: the manifest lists outputs {outs}; the stage has "
                      f"{[e.name for e in art.manifest.outputs]}")
        src_of: dict[str, tuple] = {}
        fixed: dict[str, str] = {}
        for i, e in zip(entry.inputs, art.manifest.inputs):
            f = i.source
            if f is None:
                raise KeyError(f"{where} input {i.name}: no 'from'")
            if f.input is not None:
                src: tuple = ("input", str(f.input))
                if src[1] not in func_in:
                    raise bad(f"{where} input {i.name}: no func input '{src[1]}'")
                have, fixed[i.name] = func_in[src[1]], src[1]
                what = f"func input '{src[1]}'"
            else:
                src = ("stage", int(f.stage), str(f.output))  # type: ignore[arg-type]  # checked at load
                j, out = src[1], src[2]
                if not 0 <= j < k or out not in stage_out[j]:
                    raise bad(f"{where} input {i.name}: stage {j} has no output '{out}' before stage {k}")
                have, fixed[i.name] = stage_out[j][out], holder.get((j, out)) or stage_name(j, out)
                what = f"stage {j} {out}"
            if have != sig(e):
                raise bad(f"{where} input {i.name} is {sig(e)[0]}{sig(e)[1]} but is wired to {what}, "
                          f"{have[0]}{have[1]}")
            src_of[i.name] = src
        stage_out.append({str(e.name): sig(e) for e in art.manifest.outputs})
        for o in outs:
            if (k, o) in holder:
                fixed[o] = holder[(k, o)]
        sources.append(src_of)
        names.append(fixed)
    outputs = []
    for e in man.outputs:
        name = str(e.name)
        k, out = int(out_of[name].stage), str(out_of[name].output)  # type: ignore[arg-type]  # checked at load
        if not 0 <= k < len(stages) or out not in stage_out[k]:
            raise bad(f"outputs_from.{name}: stage {k} has no output '{out}'")
        if stage_out[k][out] != sig(e):
            raise bad(f"func output '{name}' is {sig(e)[0]}{sig(e)[1]} but stage {k} {out} is "
                      f"{stage_out[k][out][0]}{stage_out[k][out][1]}")
        outputs.append((name, k, out))
    return Wiring(sources, names, outputs)


class _Terms:
    """Value numbering across graphs: two values get the same number only when they
    compute the same thing. Consts are numbered by type and content (a weight by its
    bytes, wherever it is stored); a reshape of a reshape is one reshape, and a
    reshape to the value's own type is the value (stage I/O travels in its rank-4
    device shape, with a reshape on each side of the cut)."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.types: list[Any] = []
        self.base: dict[int, int] = {}

    def intern(self, key: tuple, type_: Any) -> int:
        key = (key, str(type_))
        if key not in self.ids:
            self.ids[key] = len(self.types)
            self.types.append(type_)
        return self.ids[key]

    def input(self, name: str, type_: Any) -> int:
        return self.intern(("input", name), type_)

    def reshape(self, x: int, type_: Any) -> int:
        src = self.base.get(x, x)
        if self.types[src] == type_:
            return src
        r = self.intern(("reshape", src), type_)
        self.base[r] = src
        return r

    def graph(self, g: Any, weights: dict[str, np.ndarray], bound: dict[str, int], where: str) -> dict[str, int]:
        """Number every value of ``g`` (inputs from ``bound``); value name -> number."""
        import hashlib

        env = dict(bound)
        for n in g.nodes:
            r = n.results[0]
            if n.op == "const":
                t = r.type
                if "weight" in n.attrs:
                    arr = weights.get(n.attrs["weight"])
                    if arr is None:
                        raise CoreMLExportError(f"{where}: program.ir reads weight '{n.attrs['weight']}', "
                                                "which no manifest lists",
                                                hint="the artifact was modified after compiling; recompile it")
                    data = np.ascontiguousarray(np.asarray(arr, t.dtype.np)).tobytes()
                else:
                    data = np.ascontiguousarray(const_literal(n.attrs["value"], t).astype(t.dtype.np)).tobytes()
                env[r.name] = self.intern(("const", hashlib.sha256(data).hexdigest()), t)
            elif n.op == "reshape" and not n.optional:
                env[r.name] = self.reshape(env[n.operands[0].name], r.type)
            else:
                args = tuple(env[v.name] for v in n.operands)
                opt = tuple(sorted((key, env[v.name]) for key, v in n.optional.items()))
                attrs = repr(sorted(n.attrs.items()))
                for i, res in enumerate(n.results):
                    env[res.name] = self.intern((n.op, attrs, args, opt, i), res.type)
        return env


def check_composition(pipe: Any, wiring: Wiring) -> str:
    """The stages composed by the wiring compute what the whole func's ``program.ir`` computes.

    Every stage input must carry the func value the manifest says it carries,
    every stage output compute the value it names, and every func output be the
    func's, all as :class:`_Terms` numbers: an exact, input-independent proof
    that the wiring is the func's dataflow.
    """
    def bad(msg: str) -> CoreMLExportError:
        return CoreMLExportError(f"pipeline '{pipe.func}': {msg}",
                                 hint="the artifact was modified after compiling; recompile it")

    man = pipe.manifest
    whole = pipe.program_module().funcs.get(pipe.func)
    if whole is None:
        raise bad(f"program.ir has no func '{pipe.func}'")
    ios = [(v.name, str(v.type.dtype), list(v.type.shape)) for v in whole.inputs]
    if ios != [(e.name, e.dtype, list(e.shape)) for e in man.inputs]:
        raise bad(f"the manifest's inputs differ from program.ir's {ios}")
    terms = _Terms()
    values = {v.name: v for v in whole.inputs}
    values.update({r.name: r for n in whole.nodes for r in n.results})
    func = terms.graph(whole, pipe.interp_weights(), {v.name: terms.input(v.name, v.type) for v in whole.inputs},
                       f"{pipe.func}/program.ir")

    def same(t: int, value: str) -> bool:
        v = values.get(value)
        return v is not None and terms.reshape(t, v.type) == func[value]

    produced: dict[tuple[int, str], int] = {}
    n_edges = 0
    for k, (entry, art) in enumerate(zip(man.stages, pipe.stages)):
        where = f"stage {k} ({stage_dir(k)})"
        sg = art.program_module().funcs.get(art.func)
        if sg is None:
            raise bad(f"{where}: program.ir has no func '{art.func}'")
        io = ([v.name for v in sg.inputs], [v.name for v in sg.outputs])
        if io != (list(wiring.sources[k]), [str(o.name) for o in entry.outputs]):
            raise bad(f"{where}: program.ir's inputs and outputs {io} differ from the manifest's")
        bound = {}
        for i, v in zip(entry.inputs, sg.inputs):
            src = wiring.sources[k][v.name]
            t = terms.input(src[1], values[src[1]].type) if src[0] == "input" else produced[src[1:]]
            what = f"func input '{src[1]}'" if src[0] == "input" else f"stage {src[1]} {src[2]}"
            if not same(t, str(i.value)):
                raise bad(f"{where} input {v.name} is wired to {what}, which is not %{i.value} of the func")
            bound[v.name] = terms.reshape(t, v.type)
            n_edges += src[0] == "stage"
        env = terms.graph(sg, artifact_weights(art), bound, f"{where}/program.ir")
        for o, v in zip(entry.outputs, sg.outputs):
            if not same(env[v.name], str(o.value)):
                raise bad(f"{where} output {v.name} does not compute %{o.value} of the func (program.ir)")
            produced[(k, v.name)] = env[v.name]
    for name, k, out in wiring.outputs:
        if not same(produced[(k, out)], name):
            raise bad(f"func output '{name}' is wired to stage {k} {out}, which does not compute it")
    return (f"the {len(pipe.stages)} stages wired as the manifest says compute the func of program.ir "
            f"({n_edges} stage-to-stage edge{'s' if n_edges != 1 else ''}; every stage input and output and "
            "every func output proved equal to the func's value structurally)")


def program_wiring(art: Any) -> Wiring:
    """A single program as a one-stage pipeline: its inputs are the func's, its outputs too
    (its names are model.mil's, unprefixed)."""
    man = art.manifest
    return Wiring([{e.name: ("input", e.name) for e in man.inputs}], [{}],
                   [(e.name, 0, e.name) for e in man.outputs])
