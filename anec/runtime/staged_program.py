"""The runtime program of a multi-program artifact: a func's stages, run as one program.

``Runtime.load`` returns a :class:`PipelineProgram` for a pipeline artifact
(:mod:`anec.mil.multi_program`): it is called like any :class:`~anec.runtime.Program`
(the func's inputs in, its outputs out); the C runtime runs every stage in
order in one call (``anec_pipeline_call``), stage outputs feeding the next
stages' inputs with no copy where the two stages' surfaces have the same size
(each stage's surfaces are sized for that stage: the manifest's per-stage
``surface_bytes``; an edge between two sizes copies its packed bytes). A stage whose weights are inputs of its program (programs
shared across layers, :mod:`anec.multi_program_build`) gets them written once, at
load, into its own input surfaces; the C pipeline leaves those inputs alone
(resident inputs). ``reload_weights`` routes each key to the stages that hold
it and reloads them together (no call sees a mix of old and new weights);
``stats`` and ``reload_info`` report per stage.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import numpy as np

from anec.diagnostics import ArtifactError, RuntimeFailure, WeightError, did_you_mean
from anec.runtime import native
from anec.runtime.program import FINITE_HINT, Program, manifest_limits, nonfinite
from anec.runtime.weights import changed_blobs, weight_input_values

if TYPE_CHECKING:
    from anec.mil.manifest_types import IOEntry, LogicalInput, PipelineManifest
    from anec.mil.multi_program import PipelineArtifact
    from anec.runtime import Runtime


class _Stages:
    """What :class:`~anec.runtime.Program` calls ``_native``, for a pipeline."""

    def __init__(self, programs: list["Program"], pipe: native.NativePipeline) -> None:
        self.programs = programs
        self.pipe = pipe
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed or any(p.closed for p in self.programs)

    @property
    def dir(self) -> str:
        return self.programs[0]._native.dir

    def call(self, items: list, outs: list[np.ndarray]) -> None:
        self.pipe.call(items, outs)

    def set_inputs(self, items: list, reload: bool) -> None:
        self.pipe.set_inputs(items, reload)

    def write_slice(self, index: int, view: tuple[int, int, int, int, int], item: tuple[int, np.ndarray]) -> None:
        self.pipe.write_slice(index, view, item)

    def load(self) -> None:
        for p in self.programs:
            p.load()

    def unload(self) -> None:
        for p in self.programs:
            p.unload()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for p in self.programs:
                p.close()

    def release(self) -> None:
        self.pipe.release()
        for p in self.programs:
            p._native.release()


def _specs(entries: "Iterable[IOEntry]", logical: "Iterable[LogicalInput]") -> list[dict[str, Any]]:
    shapes = {e.name: e.shape for e in logical}
    out = []
    for i, e in enumerate(entries):
        out.append({"name": e.name, "dtype": e.dtype, "shape": list(e.shape), "bytes": e.bytes,
                    "binding": i, "decl_index": i, "logical_shape": list(shapes.get(e.name, e.shape))})
    return out


def load_pipeline(rt: "Runtime", art: "PipelineArtifact",
                  release: Callable[[], None] | None = None) -> "PipelineProgram":
    """Compile and load every stage, wire them in C, fill weights compiled as inputs;
    ``release`` is called after each stage loads (see :meth:`anec.runtime.Runtime.load`)."""
    from anec.mil.artifact import file_bytes

    m = art.manifest
    progs: list["Program"] = []
    try:
        for st, entry in zip(art.stages, m.stages):
            limits = manifest_limits(st.manifest)
            if limits is not None:  # this stage's own size (older manifests: one size for every stage)
                size = entry.surface_bytes if entry.surface_bytes is not None else m.surface_bytes
                limits["min_surface_bytes"] = max(int(limits.get("min_surface_bytes", 0)), size)
            blobs = {w.mil_path: file_bytes(st.blobs, w.file) for w in st.manifest.weights}
            prog = rt.compile(st.mil_text, blobs, limits=limits, manifest=st.manifest, load=False)
            del blobs  # the runtime has its own copy: this stage's bytes go before the next stage's
            progs.append(prog)
            if st.manifest.weight_inputs:  # this stage's own weights, into its own surfaces
                from anec.runtime.program import weight_input_array

                prog._set_weight_inputs({w.input: weight_input_array(file_bytes(st.blobs, w.file), w)
                                         for w in st.manifest.weight_inputs}, reload=False)
            prog.load()
            if release is not None:  # this stage holds its own weights now
                release()
        inputs = [e.name for e in m.inputs]
        stages = []
        for k, (entry, prog) in enumerate(zip(m.stages, progs)):
            by_name = {e.name: e for e in entry.inputs}
            srcs = []
            for spec in prog.inputs:  # binding order
                if spec["name"] in prog._weight_inputs:
                    srcs.append((native.PIPE_RESIDENT, 0))
                    continue
                if spec["name"] not in by_name:
                    raise ArtifactError(f"{art.func}: stage {k} input '{spec['name']}' has no source in the "
                                        "pipeline manifest and is not a weight input of the stage",
                                        hint="the artifact was modified after compiling; recompile it")
                f = by_name[spec["name"]].source
                assert f is not None  # check_manifest: every stage input has a source
                if f.input is not None:
                    srcs.append((-1, inputs.index(f.input)))
                else:
                    assert f.stage is not None
                    producer = progs[f.stage]
                    srcs.append((f.stage, [o["name"] for o in producer.outputs].index(f.output)))
            stages.append((prog._native, srcs))
        outs = []
        for e in m.outputs:
            src = m.outputs_from[e.name]
            assert src.stage is not None
            outs.append((src.stage, [o["name"] for o in progs[src.stage].outputs].index(src.output)))
        pipe = native.NativePipeline(rt._native, stages, len(inputs), outs)
    except BaseException:
        for p in progs:
            p.close()
        raise
    prog = PipelineProgram(rt, _Stages(progs, pipe), m, art)
    if m.weight_inputs:
        prog._set_weight_inputs(art.weight_inputs(), reload=False)
    return prog


class PipelineProgram(Program):
    """A pipeline of stage programs with the interface of one :class:`Program`."""

    def __init__(self, runtime: "Runtime", stages: _Stages, manifest: "PipelineManifest",
                 art: "PipelineArtifact") -> None:
        self.runtime = runtime
        self._native = stages
        self.manifest = manifest  # type: ignore[assignment]  # read as a program's where they agree
        self.artifact = art
        """The artifact loaded: its weight files as it holds them (views of the weights, for an
        artifact compiled with ``keep_views``; a load builds their bytes for itself only)."""
        self.name = manifest.func
        self.inputs = _specs(manifest.inputs, manifest.logical_inputs)
        self.outputs = _specs(manifest.outputs, ())
        self._weight_inputs = {w.input: w for w in manifest.weight_inputs}
        self._state: set[str] = set()

    @property
    def stages(self) -> list["Program"]:
        """The stage programs, in pipeline order."""
        return self._native.programs

    @property
    def stats(self) -> dict[str, Any]:
        """Pipeline counters (calls, zero_copy_edges, copied_edges, surface_bytes, the bytes its
        calls and input writes moved: host_in_bytes, host_out_bytes, surface_copy_bytes, ...) and
        ``stages``: every stage program's own counters, with the allocation size of its input
        and output surfaces (``input_surface_bytes``, ``output_surface_bytes``)."""
        self._check()
        st: dict[str, Any] = self._native.pipe.stats()
        st["stages"] = [{**p.stats, "input_surface_bytes": p._native.input_surface_bytes,
                         "output_surface_bytes": p._native.output_surface_bytes} for p in self.stages]
        return st

    @property
    def reload_info(self) -> dict[str, Any]:
        """Per stage: the reload strategy and why; ``strategy``: the set in use."""
        self._check()
        per = [p.reload_info for p in self.stages]
        return {"strategy": "+".join(sorted({r["strategy"] for r in per})), "stages": per}

    def _check_finite(self, given: Mapping[str, Any], result: Mapping[str, np.ndarray]) -> None:
        """Inf/NaN in a pipeline's outputs: replay it stage by stage to name the first stage
        whose outputs are not finite although its inputs are."""
        bad = nonfinite(result)
        if not bad or nonfinite(given):
            return
        first = self._first_nonfinite_stage(given)
        where = f"stage {first[0]} ('{first[1]}') of pipeline '{self.name}' is the first to " \
                f"produce inf/NaN: {first[2]}" if first else f"pipeline '{self.name}' produced inf/NaN"
        raise RuntimeFailure(f"{where} (from finite inputs; pipeline outputs: {bad})", hint=FINITE_HINT)

    def _first_nonfinite_stage(self, given: Mapping[str, Any]) -> tuple[int, str, str] | None:
        values: dict[tuple, np.ndarray] = {}
        for k, (entry, prog) in enumerate(zip(self.manifest.stages, self.stages)):
            feed = {}
            for e in entry.inputs:
                f = e.source
                if e.name in prog._weight_inputs or f is None:
                    continue
                if f.input is not None:
                    if f.input not in given:
                        return None  # a weight input of the pipeline: not replayable here
                    feed[e.name] = given[f.input]
                else:
                    feed[e.name] = values[(f.stage, f.output)]
            outs = prog._call_unchecked(feed)
            bad = nonfinite(outs)
            if bad:
                return k, prog.name, bad
            for name, a in outs.items():
                values[(k, name)] = a
        return None

    def evaluate_raw(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        raise RuntimeFailure(f"program '{self.name}' is a pipeline of {len(self.stages)} programs; "
                             "call it by name, or use evaluate_raw on one of .stages")

    def reload_weights(self, weights: Mapping[str, Any]) -> None:
        """Delta reload by checkpoint key, routed to every stage that holds the key; all stages
        change together (validated first; no call sees a mix)."""
        self._check()
        as_inputs = {w.key: w for w in self._weight_inputs.values()}
        per_stage: list[dict[str, Any]] = [{} for _ in self.stages]
        known = set(as_inputs)
        stage_inputs: list[dict[str, Any]] = [{} for _ in self.stages]
        for k, prog in enumerate(self.stages):
            assert prog.manifest is not None  # a stage program is compiled with its manifest
            for w in prog.manifest.weights:
                known.add(w.key)
                if w.key in weights:
                    per_stage[k][w.key] = weights[w.key]
            for wi in prog.manifest.weight_inputs:
                known.add(wi.key)
                if wi.key in weights:
                    stage_inputs[k][wi.key] = weights[wi.key]
        for key in weights:
            if key not in known:
                raise WeightError(f"unknown weight '{key}' for program '{self.name}'",
                                  hint=did_you_mean(key, sorted(known)))
        inputs = weight_input_values(self._weight_inputs.values(), weights)
        stage_values = [weight_input_values(prog._weight_inputs.values(), ws) if ws else {}
                        for prog, ws in zip(self.stages, stage_inputs)]  # every array checked first
        blobs: list[dict[str, bytes]] = []
        for prog, ws in zip(self.stages, per_stage):
            if not ws:
                blobs.append({})
                continue
            blobs.append(changed_blobs(prog.manifest, prog.dir, ws))
        if any(per_stage):  # counted as a reload even when no file changes
            self._native.pipe.reload(blobs)
        if inputs:
            self._set_weight_inputs(inputs, reload=True)
        if any(stage_values):  # every stage's weight inputs in one call, under the pipeline's lock
            self._native.pipe.set_stage_inputs(
                [[prog._host_input(spec, v[spec["name"]]) if spec["name"] in v else None for spec in prog.inputs]
                 if v else None for prog, v in zip(self.stages, stage_values)], reload=True)

    def reload_blobs(self, blobs: Mapping[str, bytes], *, strategy: str | None = None) -> None:
        raise RuntimeFailure(f"program '{self.name}' is a pipeline: reload by key (reload_weights), or "
                             "reload_blobs on one of .stages")

    def __repr__(self) -> str:
        ins = ", ".join(f"{i['name']}: {i['dtype']}{i['logical_shape']}" for i in self.inputs)
        return f"PipelineProgram({self.name}({ins}), {len(self.stages)} stages)"
