"""Run compiled anec artifacts: ``Runtime`` and ``Program``.

::

    from anec.runtime import Runtime
    with Runtime(backend="auto") as rt:            # "sim" | "ane" | "auto"
        prog = rt.load("out/mlp")                  # artifact dir, parent dir (+ func=), or Artifact
        y = prog(x=x)["y"]                         # logical outputs, numpy
        prog.reload_weights({"h.0.mlp.c_fc.weight": w})   # delta reload, no compile
        print(rt.stats["compiles"], prog.stats["reloads"])

The C runtime does the work (``csrc/anec_rt.h``): a program cache keyed by
the MIL and weight paths, the compile budget, alphabetical I/O binding,
uniform surfaces and delta reload. This layer maps names to binding slots,
converts arrays into the surfaces in place (fp32 -> fp16 in C), reassembles
chunked outputs from the manifest and turns C errors into
:class:`~anec.diagnostics.RuntimeFailure`.
"""

from __future__ import annotations

import json
import math
import os
import weakref
from pathlib import Path
from typing import Any, Mapping, TypeVar

import numpy as np

from anec.diagnostics import AnecError, ArtifactError, RuntimeFailure, WeightError, did_you_mean
from anec.runtime import native
from anec.runtime.weights import patched_blobs

__all__ = ["Runtime", "Program", "RuntimeFailure", "backend_available"]

BACKENDS = ("auto", "sim", "ane")


def backend_available(name: str) -> tuple[bool, str]:
    """(usable, reason) for backend ``name`` on this machine."""
    return native.driver_available(name)


def _read_artifact_dir(d: Path) -> tuple[str, dict[str, bytes], dict]:
    """(MIL text, rel path -> bytes, manifest) of one artifact directory."""
    try:
        from anec.mil.artifact import Artifact
    except ImportError:  # pragma: no cover - the MIL package is part of anec
        Artifact = None  # type: ignore[assignment]
    if Artifact is not None:
        art = Artifact.load(d)
        return art.mil_text, dict(art.blobs), art.manifest
    try:  # pragma: no cover
        manifest = json.loads((d / "manifest.json").read_text("utf-8"))
        mil = (d / manifest["mil"]["file"]).read_text("utf-8")
        blobs = {w["file"]: (d / w["file"]).read_bytes() for w in manifest["weights"]}
    except (OSError, ValueError, KeyError) as e:
        raise ArtifactError(f"cannot read artifact '{d}': {e}") from None
    return mil, blobs, manifest


def _resolve(artifact: Any, func: str | None) -> tuple[str, dict[str, bytes], dict]:
    if all(hasattr(artifact, a) for a in ("mil_text", "blobs", "manifest")):
        if func is not None and artifact.manifest.get("func") not in (func, None):
            raise ArtifactError(f"the artifact is for func '{artifact.manifest.get('func')}', not '{func}'")
        return artifact.mil_text, dict(artifact.blobs), artifact.manifest
    if isinstance(artifact, (list, tuple)):
        arts = {a.manifest.get("func"): a for a in artifact}
        if func is None and len(arts) == 1:
            return _resolve(next(iter(arts.values())), None)
        if func not in arts:
            raise ArtifactError(f"no func '{func}' among the artifacts ({', '.join(map(str, arts))})",
                                hint=did_you_mean(str(func), map(str, arts)) or "pass func=NAME")
        return _resolve(arts[func], None)
    path = Path(os.fspath(artifact))
    if path.is_file() and path.name == "manifest.json":
        path = path.parent
    if not path.exists():
        raise ArtifactError(f"artifact '{path}' does not exist", hint="compile first: anec compile model.ir -o DIR")
    if (path / "manifest.json").is_file():
        mil, blobs, manifest = _read_artifact_dir(path)
        if func is not None and manifest.get("func") != func:
            raise ArtifactError(f"'{path}' holds func '{manifest.get('func')}', not '{func}'")
        return mil, blobs, manifest
    funcs = sorted(p.name for p in path.iterdir() if (p / "manifest.json").is_file()) if path.is_dir() else []
    if not funcs:
        raise ArtifactError(f"'{path}' is not an artifact directory (no manifest.json in it or its subdirectories)",
                            hint="compile first: anec compile model.ir -o DIR")
    if func is None:
        if len(funcs) > 1:
            raise ArtifactError(f"'{path}' holds several funcs ({', '.join(funcs)}); choose one",
                                hint="pass func=NAME (CLI: --func NAME)")
        func = funcs[0]
    if func not in funcs:
        raise ArtifactError(f"'{path}' has no func '{func}' (funcs: {', '.join(funcs)})",
                            hint=did_you_mean(func, funcs))
    return _read_artifact_dir(path / func)


def _limits(manifest: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not manifest or "limits" not in manifest:
        return None
    lim = dict(manifest["limits"])
    try:
        from anec.targets import get_target

        lim.setdefault("surface_alignment", get_target(manifest.get("target", "m4")).surface_alignment)
    except Exception:  # noqa: BLE001 - an unknown target only loses the alignment hint
        lim.setdefault("surface_alignment", 0)
    return lim


_C = TypeVar("_C", bound="_Closing")


class _Closing:
    """``with`` support and close-on-collection for the owners of native handles;
    the subclass defines ``close()`` (idempotent)."""

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - depends on GC timing
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class Runtime(_Closing):
    """A C runtime on one backend; programs live until :meth:`close`."""

    def __init__(self, backend: str = "auto", compile_budget: int | None = None, *,
                 temp_root: str | os.PathLike | None = None, sim_threads: int | None = None) -> None:
        if backend not in BACKENDS:
            raise RuntimeFailure(f"unknown backend '{backend}'", hint=did_you_mean(backend, BACKENDS)
                                 or "choose sim, ane or auto")
        if compile_budget is not None and compile_budget < 1:
            raise RuntimeFailure(f"compile_budget must be >= 1, got {compile_budget}")
        self._native = native.NativeRuntime(backend, compile_budget,
                                            os.fspath(temp_root) if temp_root is not None else None, sim_threads)
        self._programs: "weakref.WeakSet[Program]" = weakref.WeakSet()

    # ---- properties ------------------------------------------------------
    @property
    def backend(self) -> str:
        """The driver in use: "sim" or "ane"."""
        self._check_open()
        return self._native.driver

    @property
    def stats(self) -> dict[str, int]:
        """compiles, compile_budget(_left), cache_hits, loads, unloads, reloads,
        evaluations, blobs_patched, programs_live, dirs_live, ns_* per phase."""
        self._check_open()
        return self._native.stats()

    @property
    def closed(self) -> bool:
        return self._native.ptr is None

    # ---- programs ----------------------------------------------------------
    def load(self, artifact: Any, func: str | None = None) -> "Program":
        """Compile (or take from the cache) and load an artifact.

        ``artifact``: an artifact directory (``manifest.json`` + ``model.mil`` +
        ``weights/``), a parent directory of several (pick with ``func``), an
        ``Artifact`` object, or a list of them.
        """
        self._check_open()
        mil, blobs, manifest = _resolve(artifact, func)
        paths = {}
        for w in manifest.get("weights", []):
            paths[w["file"]] = w.get("path") or "@model_path/" + w["file"]
        mil_blobs = {paths.get(rel, "@model_path/" + rel): data for rel, data in blobs.items()}
        return self.compile(mil, mil_blobs, limits=_limits(manifest), manifest=manifest)

    def compile(self, mil: str | bytes, blobs: Mapping[str, bytes] | None = None, *,
                limits: Mapping[str, Any] | None = None, manifest: Mapping[str, Any] | None = None,
                load: bool = True) -> "Program":
        """Compile raw MIL text with weight files keyed by MIL path
        (``"@model_path/weights/w.bin"``); loads it unless ``load=False``."""
        self._check_open()
        data = mil.encode("utf-8") if isinstance(mil, str) else bytes(mil)
        nprog = self._native.compile(data, {k: bytes(v) for k, v in (blobs or {}).items()},
                                     dict(limits) if limits is not None else None)
        prog = Program(self, nprog, dict(manifest) if manifest is not None else None)
        self._programs.add(prog)
        if load:
            try:
                prog.load()
            except AnecError:
                prog.close()
                raise
        return prog

    def close(self) -> None:
        """Free every program and the runtime (program directories are removed)."""
        if self.closed:
            return
        for p in list(self._programs):
            p.close()
        self._native.close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeFailure("the runtime is closed")

    def __repr__(self) -> str:
        return f"Runtime(backend={self.backend!r})" if not self.closed else "Runtime(closed)"


class Program(_Closing):
    """One compiled program. Call it with named inputs; get named outputs."""

    def __init__(self, runtime: Runtime, nprog: native.NativeProgram, manifest: dict | None) -> None:
        self.runtime = runtime
        self._native = nprog
        self.manifest = manifest
        self.inputs = [dict(i) for i in nprog.inputs]    # binding (alphabetical) order
        self.outputs = [dict(o) for o in nprog.outputs]
        self.name = (manifest or {}).get("func", "main")
        # the shape the caller passes: the manifest's logical shape (a rank-4 device input may
        # hold a tensor of another rank, byte for byte), else the device shape (older manifests)
        logical = {e["name"]: e["shape"] for e in (manifest or {}).get("logical_inputs", [])}
        for spec in self.inputs:
            spec["logical_shape"] = list(logical.get(spec["name"], spec["shape"]))

    # ---- state -----------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._native.ptr is None

    def _check(self) -> None:
        if self.closed:
            raise RuntimeFailure(f"program '{self.name}' is closed")

    @property
    def dir(self) -> str:
        """The program directory (model.mil + weights/) the backend loads from."""
        self._check()
        return self._native.dir

    @property
    def stats(self) -> dict[str, int]:
        self._check()
        return self._native.stats()

    @property
    def input_names(self) -> list[str]:
        """Inputs in declaration order."""
        return [i["name"] for i in sorted(self.inputs, key=lambda i: i["decl_index"])]

    @property
    def output_names(self) -> list[str]:
        """Logical outputs (chunks reassembled) in declaration order."""
        if self.manifest and self.manifest.get("logical_outputs"):
            return [lo["name"] for lo in self.manifest["logical_outputs"]]
        return [o["name"] for o in sorted(self.outputs, key=lambda o: o["decl_index"])]

    def load(self) -> None:
        self._check()
        self._native.load()

    def unload(self) -> None:
        self._check()
        self._native.unload()

    def close(self) -> None:
        if not self.closed:
            self._native.free()

    # ---- evaluation --------------------------------------------------------
    def __call__(self, inputs: Mapping[str, Any] | None = None, /, **kw: Any) -> dict[str, np.ndarray]:
        """Evaluate: ``prog(x=array)`` or ``prog({"x": array})`` -> {name: array}."""
        self._check()
        given = dict(inputs or {})
        given.update(kw)
        names = [i["name"] for i in self.inputs]
        for k in given:
            if k not in names:
                raise RuntimeFailure(f"program '{self.name}' has no input '{k}' (inputs: {', '.join(self.input_names)})",
                                     hint=did_you_mean(k, names))
        for i, spec in enumerate(self.inputs):
            if spec["name"] not in given:
                raise RuntimeFailure(f"missing input '{spec['name']}' for program '{self.name}' "
                                     f"(inputs: {', '.join(self.input_names)})")
            self._write_input(i, spec, given[spec["name"]])
        self._native.run()
        return self._collect()

    def _write_input(self, i: int, spec: Mapping[str, Any], value: Any) -> None:
        arr = np.asarray(value)
        if arr.dtype.kind not in "fiub":
            raise RuntimeFailure(f"input '{spec['name']}' must be a numeric array, got dtype {arr.dtype}")
        shape, logical = tuple(spec["shape"]), tuple(spec["logical_shape"])
        if math.prod(logical) != math.prod(shape):
            raise ArtifactError(f"the manifest gives input '{spec['name']}' the shape {list(logical)}, "
                                f"but the program's input is {list(shape)}")
        if arr.shape != logical:
            raise RuntimeFailure(f"input '{spec['name']}' has shape {list(arr.shape)}, the program expects "
                                 f"{list(logical)} ({spec['dtype']})")
        arr = arr.reshape(shape)  # same elements, same order: the device shape is rank 4
        surf = self._native.input_surface(i)
        dst = surf[: spec["bytes"]].view(native.NP_DTYPES[spec["dtype"]]).reshape(shape)
        if spec["dtype"] == "fp16" and arr.dtype == np.float32 and arr.flags.c_contiguous:
            native.lib.anec_f32_to_f16(native.ffi.from_buffer("float[]", arr),
                                       native.ffi.from_buffer("uint16_t[]", dst.view(np.uint16)), arr.size)
        else:
            dst[...] = arr

    def _physical(self) -> dict[str, np.ndarray]:
        out = {}
        for j, spec in enumerate(self.outputs):
            surf = self._native.output_surface(j)
            a = surf[: spec["bytes"]].view(native.NP_DTYPES[spec["dtype"]]).reshape(spec["shape"])
            out[spec["name"]] = a.copy()
        return out

    def _collect(self) -> dict[str, np.ndarray]:
        phys = self._physical()
        los = (self.manifest or {}).get("logical_outputs")
        if not los:
            return {n: phys[n] for n in self.output_names}
        # targets without fp32 I/O: the manifest asks the host to cast some outputs back
        host = {h["name"]: h["host_dtype"] for h in (self.manifest or {}).get("host_casts", [])
                if h.get("kind") == "output"}
        res = {}
        for lo in los:
            pieces = [phys[p] for p in lo.get("pieces", [lo["name"]])]
            axis = lo.get("axis")
            a = pieces[0] if axis is None or len(pieces) == 1 else np.concatenate(pieces, axis=axis)
            if lo.get("shape") is not None:
                if math.prod(lo["shape"]) != a.size:
                    raise ArtifactError(f"the manifest gives output '{lo['name']}' the shape {lo['shape']}, "
                                        f"but the program returns {a.size} elements")
                a = a.reshape(lo["shape"])  # the logical shape of a rank-4 device output (free)
            dt = host.get(lo["name"], lo.get("dtype"))
            res[lo["name"]] = a.astype(native.NP_DTYPES[dt], copy=False) if dt in native.NP_DTYPES else a
        return res

    def evaluate_raw(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """The device-level call: buffers in ALPHABETICAL order of MIL names,
        packed at byte 0, allocation sizes passed as they are (non-uniform or
        too small buffers fail like the device)."""
        self._check()
        self._native.evaluate(inputs, outputs)

    # ---- weights -------------------------------------------------------------
    def reload_weights(self, weights: Mapping[str, Any]) -> None:
        """Delta reload by checkpoint key: ``{"h.0.mlp.c_fc.weight": array}``.

        Arrays are checked (shape, NaN/Inf, fp16 range) and written into the
        program's BLOBFILEs; only changed files are rewritten and no compile
        happens. On any error the old weights stay in use.
        """
        self._check()
        if not self.manifest:
            raise WeightError(f"program '{self.name}' has no manifest to map weight keys to files",
                              hint="use reload_blobs({mil_path: bytes}) for raw MIL programs")
        files = {w.get("path") or "@model_path/" + w["file"]: w["file"] for w in self.manifest.get("weights", [])}
        touched = {w.get("path") or "@model_path/" + w["file"] for w in self.manifest.get("weights", [])
                   if w["key"] in weights}
        current = {}
        base = Path(self.dir)
        for path in touched:
            try:
                current[path] = (base / files[path]).read_bytes()
            except OSError as e:
                raise RuntimeFailure(f"cannot read the program's weight file {files[path]}: {e.strerror}") from None
        self.reload_blobs(patched_blobs(self.manifest, current, weights))

    def reload_blobs(self, blobs: Mapping[str, bytes]) -> None:
        """Delta reload of whole BLOBFILEs keyed by MIL path."""
        self._check()
        self._native.reload({k: bytes(v) for k, v in blobs.items()})

    def __repr__(self) -> str:
        ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in self.inputs)
        return f"Program({self.name}({ins}))"

