"""Running a model's programs: compile once per bucket, load once, hand out by name.

:class:`ProgramCache` builds, compiles and loads each program of a model the
first time it is asked for; :class:`InterpProgram` runs a graph in the
reference interpreter with the same call convention (the ``"interp"``
backend).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

import numpy as np

from anec.ir.builder import Builder
from anec.ir.graph import Graph
from anec.ir.ops import is_weight_const
from anec.models.common import ModelError


def weight_keys(graph: Graph) -> list[str]:
    """Checkpoint keys referenced by ``graph`` (in order of first use)."""
    seen: dict[str, None] = {}
    for n in graph.nodes:
        if is_weight_const(n):
            seen.setdefault(n.attrs["weight"], None)
    return list(seen)


class InterpProgram:
    """A graph run by the reference interpreter in fp16 mode (the sim's numerics).

    Used as the ``"interp"`` backend: the same call convention as a runtime
    program, ``prog(**inputs) -> {output: array}``, with fp32 outputs, and the same
    state inputs (:meth:`write_input`, :meth:`write_input_slice`: kept here as arrays
    of the input's dtype, which a call that leaves the input out reads)."""

    def __init__(self, graph: Graph, weights: Any) -> None:
        self.graph = graph
        self.weights = weights
        self._state: dict[str, np.ndarray] = {}

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        from anec.ir.interp import interpret

        out = interpret(self.graph, {**self._state, **inputs}, self.weights, mode="fp16")
        for name, value in inputs.items():
            if name in self._state:  # a state input passed whole is written, as on a device
                self.write_input(name, value)
        return {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}

    def _input(self, name: str) -> Any:
        for v in self.graph.inputs:
            if v.name == name:
                return v
        raise ModelError(f"program '{self.graph.name}' has no input '{name}'")

    def write_input(self, name: str, value: Any) -> None:
        v = self._input(name)
        self._state[name] = np.array(value, dtype=v.type.dtype.np).reshape(v.type.shape)

    def write_input_slice(self, name: str, value: Any, axis: int, start: int) -> None:
        v = self._input(name)
        arr = self._state.setdefault(name, np.zeros(v.type.shape, v.type.dtype.np))
        rows = np.asarray(value)
        index = [slice(None)] * arr.ndim
        index[axis] = slice(start, start + rows.shape[axis])
        if start < 0 or start + rows.shape[axis] > arr.shape[axis]:
            raise ModelError(f"input '{name}': rows {start}..{start + rows.shape[axis]} do not fit its "
                             f"{arr.shape[axis]} rows")
        arr[tuple(index)] = rows


class ProgramCache:
    """Builds, compiles and loads each program once, then hands it out by name.

    ``get(name, build)`` calls ``build()`` (returning a Graph) the first time a
    name is asked for, compiles it in memory with
    :func:`anec.compiler.compile_module` (also writing ``cache_dir/<name>/``
    when a directory is given) and loads it into one shared runtime (a func
    the compiler cut loads as one pipeline program). Names carry the bucket
    (``decode_w16_t128``), so each bucket compiles once per process.
    ``transform`` (e.g. adding LoRA inputs) runs on every built graph and what
    it returns is kept in ``extras[name]``. ``compress``, ``compress_gate`` and ``compress_form`` are
    :func:`anec.compiler.compile_module`'s (weights stored compressed; docs/compression.md).
    Backend ``"interp"`` skips the compiler and runs graphs in the reference interpreter
    instead (uncompressed: the interpreter reads the checkpoint's weights).
    """

    def __init__(self, weight_fn: Callable[[str], np.ndarray], backend: str = "auto",
                 target: str | None = None, cache_dir: str | os.PathLike | None = None,
                 transform: Callable[[Graph], Any] | None = None, compress: Any = None,
                 compress_gate: Any = None, compress_form: str | None = None,
                 release: Callable[[], None] | None = None) -> None:
        self.weight_fn = weight_fn
        self.release = release
        """Called after each compile and after each program (each stage) loads: the programs
        hold their own copies of the weights, so the pages of the memory-mapped checkpoint
        read meanwhile can go (see :meth:`_compile`, :meth:`_load`)."""
        self.compress = compress
        self.compress_gate = compress_gate
        self.compress_form = compress_form
        self.compression: list[dict[str, Any]] = []
        """The compression report of every weight compiled here (format, bytes, error)."""
        self.backend = backend
        self.target = target
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.transform = transform
        self.graphs: dict[str, Graph] = {}
        self.programs: dict[str, Any] = {}
        self.extras: dict[str, Any] = {}
        self.compile_seconds = 0.0
        self._runtime = None

    @property
    def runtime(self) -> Any:
        """The shared :class:`anec.runtime.Runtime` (None for the interpreter)."""
        if self._runtime is None and self.backend != "interp":
            from anec.runtime import Runtime

            self._runtime = Runtime(backend=self.backend)
        return self._runtime

    def weights_for(self, graph: Graph) -> dict[str, np.ndarray]:
        return {k: self.weight_fn(k) for k in weight_keys(graph)}

    def get(self, name: str, build: Callable[[], Graph]) -> Any:
        prog = self.programs.get(name)
        if prog is not None:
            return prog
        graph = self._build(name, build)
        t0 = time.perf_counter()
        if self.backend == "interp":
            prog = InterpProgram(graph, self.weights_for(graph))
        else:
            prog = self._compile_and_load(graph)
        self.compile_seconds += time.perf_counter() - t0
        self.programs[name] = prog
        return prog

    def get_all(self, names: Iterable[str], build: Callable[[str], Graph], progress: Any) -> None:
        """Build, compile and load every program of ``names`` not loaded yet, ticking
        ``progress`` (a :class:`~anec.models.progress.Progress`) once per program. They are
        compiled together, so the planner counts their compiles against the process budget
        at once (sharing programs across layers when together they need more)."""
        todo = [n for n in names if n not in self.programs]
        if not todo:
            return
        progress.start("compile", len(todo))
        if self.backend == "interp" or len(todo) == 1:
            for n in todo:
                self.get(n, lambda n=n: build(n))
                progress.step(n)
            progress.finish()
            return
        t0 = time.perf_counter()
        graphs = [self._build(n, lambda n=n: build(n)) for n in todo]
        artifacts = self._compile(graphs)
        # the program with the largest weight loads first: a load holds its weight's bytes twice
        # for a moment (the file built, the runtime's copy), best while little else is resident
        for n in sorted(todo, key=lambda n: -largest_weight(self.graphs[n])):
            self.programs[n] = self._load(artifacts.pop(n))
            progress.step(n)
        self.compile_seconds += time.perf_counter() - t0
        progress.finish()

    def _build(self, name: str, build: Callable[[], Graph]) -> Graph:
        graph = build()
        if graph.name != name:
            raise AssertionError(f"program {name} built a func named {graph.name}")
        if self.transform is not None:
            self.extras[name] = self.transform(graph)
        self.graphs[name] = graph
        return graph

    def _compile_and_load(self, graph: Graph) -> Any:
        return self._load(self._compile([graph]).pop(graph.name))

    def _load(self, artifact: Any) -> Any:
        """Load one compiled func. Its weight files are views of the checkpoint: each program
        (each stage of a pipeline) holds its own copy of its weights once loaded, so the
        checkpoint's pages it read are given back after each (``release``)."""
        return self.runtime.load(artifact, release=self.release)

    def _compile(self, graphs: list[Graph]) -> dict[str, Any]:
        """The artifacts of ``graphs`` by func name, their weight files views of the weights
        (``keep_views``: nothing copied out of the checkpoint; the runtime reads each
        program's weights as it loads it)."""
        from anec.compiler import compile_module, settle
        from anec.weight_store import WeightStore

        weights: dict[str, np.ndarray] = {}
        for g in graphs:
            weights.update(self.weights_for(g))
        store = WeightStore(weights, source=f"<{', '.join(g.name for g in graphs)} weights>")
        # the planner counts these funcs' compiles against what is left of the process budget:
        # over it, repeated layers share programs (or the compile fails before the device compiles)
        left = self.runtime.stats.get("compile_budget_left")
        # host_casts: on targets without fp32 I/O (m1, m2) the host converts fp32 <-> fp16
        result = compile_module(Builder.module(*graphs), weights=store, target=self.target,
                                out_dir=self.cache_dir, host_casts=True, keep_funcs=True,
                                compress=self.compress, compress_gate=self.compress_gate,
                                compress_form=self.compress_form, keep_views=True,
                                compile_budget=left if isinstance(left, int) and left >= 0 else None)
        settle(result.artifacts.values(), pin=False)  # the weight hashes in, for loading
        for art in result.artifacts.values():
            for a in getattr(art, "stages", [art]):  # a pipeline's stages record their own
                self.compression.extend(a.manifest.compression)
        if self.release is not None:
            # the compile read every weight: its pages need not stay resident while programs
            # load, each reads its own again (or the files the compile wrote)
            self.release()
        return dict(result.artifacts)

    def stats(self) -> dict[str, Any]:
        """Runtime counters (compiles, loads, reloads, evaluations...) plus ``funcs``
        (built here), ``programs`` (the ANE programs they became: a func the compiler
        cut counts its stages) and ``compile_seconds`` (build + compile + load)."""
        out: dict[str, Any] = {}
        if self._runtime is not None:
            out.update(self._runtime.stats)
        out["funcs"] = len(self.programs)
        out["programs"] = sum(len(getattr(p, "stages", None) or [p]) for p in self.programs.values())
        out["compile_seconds"] = self.compile_seconds
        return out

    def close(self) -> None:
        """Release every program and the runtime."""
        self.programs.clear()
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None


def largest_weight(graph: Graph) -> int:
    """Bytes of the largest weight const ``graph`` reads."""
    return max((n.result.type.nbytes for n in graph.nodes if is_weight_const(n)), default=0)
