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

import atexit
import contextlib
import math
import os
import signal
import threading
import weakref
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, TypeVar

import numpy as np

from anec.diagnostics import AnecError, ArtifactError, RuntimeFailure, WeightError, did_you_mean
from anec.runtime import native
from anec.runtime.weights import changed_blobs, weight_input_values

__all__ = ["Runtime", "Program", "RuntimeFailure", "backend_available"]

BACKENDS = ("auto", "sim", "ane")


def backend_available(name: str) -> tuple[bool, str]:
    """(usable, reason) for backend ``name`` on this machine."""
    return native.driver_available(name)


def _resolve(artifact: Any, func: str | None) -> Any:
    """The artifact (one program, or a pipeline) :meth:`Runtime.load` was given, its manifest
    validated: an object, a list of them, or a directory (read by :func:`anec.mil.pipeline.load_any`)."""
    from anec.mil.manifest import validate_manifest
    from anec.mil.pipeline import PipelineArtifact, check_manifest, load_any

    if isinstance(artifact, PipelineArtifact):
        check_manifest(artifact.manifest, f"the manifest of artifact {artifact.func!r:.60}")
        if func is not None and artifact.func != func:
            raise ArtifactError(f"the artifact is for func '{artifact.func}', not '{func}'")
        return artifact
    if all(hasattr(artifact, a) for a in ("mil_text", "blobs", "manifest")):
        manifest = validate_manifest(artifact.manifest, f"the manifest of artifact {getattr(artifact, 'func', '?')!r:.60}")
        if func is not None and manifest["func"] != func:
            raise ArtifactError(f"the artifact is for func '{manifest['func']}', not '{func}'")
        return artifact
    if isinstance(artifact, (list, tuple)):
        arts = {getattr(a, "func", None): a for a in artifact}
        if func is None and len(arts) == 1:
            return _resolve(next(iter(arts.values())), None)
        if func not in arts:
            raise ArtifactError(f"no func '{func}' among the artifacts ({', '.join(map(str, arts))})",
                                hint=did_you_mean(str(func), map(str, arts)) or "pass func=NAME")
        return _resolve(arts[func], None)
    return load_any(Path(os.fspath(artifact)), func)


def _check_io(manifest: Mapping[str, Any], prog: "Program") -> None:
    """The manifest's inputs and outputs are the MIL program's (names, dtypes, shapes)."""
    for direction, actual in (("inputs", prog.inputs), ("outputs", prog.outputs)):
        declared = sorted(manifest[direction], key=lambda e: e["binding"])
        got = [(t["name"], t["dtype"], list(t["shape"])) for t in actual]
        want = [(e["name"], e["dtype"], list(e["shape"])) for e in declared]
        if got != want:
            bad = next((w, g) for w, g in zip(want + [None] * len(got), got + [None] * len(want)) if w != g)
            raise ArtifactError(f"the manifest's {direction} do not match the MIL program's: the manifest has "
                                f"{_io_text(bad[0])}, the program {_io_text(bad[1])}",
                                hint="the artifact is damaged or was not written by anec; recompile it")


def _io_text(entry: tuple[str, str, list[int]] | None) -> str:
    return "nothing there" if entry is None else f"'{entry[0]}' {entry[1]}{entry[2]}"


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


# ---- cleanup at exit and on signals ----------------------------------------------
#
# A runtime's program directories (its temp root) go away when it closes. So that
# they never outlive the process: every runtime still open closes at interpreter
# exit, and SIGTERM/SIGHUP (when the process has no handler of its own) close
# them all and exit with status 128 + signal through the normal unwinding.
# SIGINT is Python's KeyboardInterrupt, which unwinds too.

_OPEN: "weakref.WeakSet[Runtime]" = weakref.WeakSet()
_cleanup = {"atexit": False, "signals": False}


def _close_all() -> None:
    for rt in list(_OPEN):
        try:
            rt.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _exit_on_signal(signum: int, frame: object) -> None:
    _close_all()
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends (main thread, POSIX): a native
    handle created in the block is registered for cleanup before any handler unwinds."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _install_cleanup() -> None:
    if not _cleanup["atexit"]:
        atexit.register(_close_all)
        _cleanup["atexit"] = True
    if _cleanup["signals"] or threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _exit_on_signal)
    _cleanup["signals"] = True


_C = TypeVar("_C", bound="_Closing")


class _Closing:
    """``with`` support and release-on-collection for the owners of native
    handles. ``close()`` (idempotent, thread-safe) releases the device objects;
    the handle itself goes back to C only when the Python object dies, so a
    call racing with a close gets a clean error, never freed memory; and since
    a C program keeps its runtime alive, finalizers may run in any order."""

    _native: Any

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __del__(self) -> None:  # pragma: no cover - depends on GC timing
        nat = getattr(self, "_native", None)
        if nat is not None:
            try:
                nat.release()
            except Exception:  # noqa: BLE001
                pass


def _verdict_for(backend: str) -> list[str] | None:
    """Reload strategies a `python -m anec.selftest` run verified on this Mac for
    the ane driver (None: nothing cached, the runtime falls back to recompile)."""
    if backend == "sim":
        return None
    try:
        from anec.verdict import cached_verdict
    except ImportError:  # pragma: no cover - part of anec
        return None
    return cached_verdict("ane")


class Runtime(_Closing):
    """A C runtime on one backend; programs live until :meth:`close`.

    Safe to use from several threads: calls on one program are serialized,
    calls on different programs run in parallel (docs/runtime.md). Bound to
    the process that opened it: after ``fork()`` open a new one in the child.
    Runtimes still open close at interpreter exit, and on SIGTERM/SIGHUP when
    the process has no handler of its own (it then exits with 128 + signal):
    their program directories never outlive the process.
    """

    def __init__(self, backend: str = "auto", compile_budget: int | None = None, *,
                 temp_root: str | os.PathLike | None = None, sim_threads: int | None = None,
                 reload_verified: Iterable[str] | None = None, sim_device: str | None = None) -> None:
        """``reload_verified``: the reload strategies ("data-patch") verified on
        this machine; None takes the driver's own (the sim's device model) or,
        for the ane driver, the verdict `python -m anec.selftest` cached.
        ``sim_device``: the sim's device model switches (docs/runtime.md)."""
        if backend not in BACKENDS:
            raise RuntimeFailure(f"unknown backend '{backend}'", hint=did_you_mean(backend, BACKENDS)
                                 or "choose sim, ane or auto")
        if compile_budget is not None and compile_budget < 1:
            raise RuntimeFailure(f"compile_budget must be >= 1, got {compile_budget}")
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._programs: "weakref.WeakSet[Program]" = weakref.WeakSet()
        if reload_verified is None and backend != "sim":
            ok_ane, _ = native.driver_available("ane") if backend == "auto" else (True, "")
            if ok_ane:
                reload_verified = _verdict_for("ane")
        with _signals_held():  # the C side makes the temp root: registered before a signal can unwind
            self._native = native.NativeRuntime(backend, compile_budget,
                                                os.fspath(temp_root) if temp_root is not None else None,
                                                sim_threads,
                                                list(reload_verified) if reload_verified is not None else None,
                                                sim_device)
            _OPEN.add(self)
        _install_cleanup()

    # ---- properties ------------------------------------------------------
    @property
    def backend(self) -> str:
        """The driver in use: "sim" or "ane"."""
        self._check_open()
        return self._native.driver

    @property
    def reload_verified(self) -> list[str]:
        """Reload strategies verified for this runtime ("data-patch", "recompile", "inputs")."""
        self._check_open()
        return self._native.verified

    @property
    def stats(self) -> dict[str, Any]:
        """compiles, compile_budget(_left), cache_hits, loads, unloads, reloads
        (and per strategy: reloads_data_patch, reloads_recompile,
        reloads_inputs), evaluations, blobs_patched, programs_live, dirs_live,
        process_compiles, ns_* per phase, and ``reload_strategy``: the
        strategy each open program reloads with, by program name."""
        self._check_open()
        st: dict[str, Any] = self._native.stats()
        with self._lock:
            progs = list(self._programs)
        st["reload_strategy"] = {}
        for p in progs:
            if p.closed:
                continue
            try:
                st["reload_strategy"][p.name] = p.reload_info["strategy"]
            except RuntimeFailure:
                if not p.closed:
                    raise  # a program closed by another thread meanwhile is left out
        return st

    @property
    def closed(self) -> bool:
        return self._native.closed

    # ---- programs ----------------------------------------------------------
    def load(self, artifact: Any, func: str | None = None) -> "Program":
        """Compile (or take from the cache) and load an artifact.

        ``artifact``: an artifact directory (``manifest.json`` + ``model.mil`` +
        ``weights/``), a parent directory of several (pick with ``func``), an
        ``Artifact`` object, or a list of them.
        """
        self._check_open()
        art = _resolve(artifact, func)
        if hasattr(art, "stages"):  # a func cut into several programs: run them as one
            from anec.runtime.pipeline import load_pipeline

            return load_pipeline(self, art)
        mil, blobs, manifest = art.mil_text, dict(art.blobs), art.manifest
        paths = {}
        for w in manifest.get("weights", []):
            paths[w["file"]] = w.get("path") or "@model_path/" + w["file"]
        input_files = {w["file"] for w in manifest.get("weight_inputs", [])}
        mil_blobs = {paths.get(rel, "@model_path/" + rel): data for rel, data in blobs.items()
                     if rel not in input_files}
        prog = self.compile(mil, mil_blobs, limits=_limits(manifest), manifest=manifest, load=False)
        try:
            _check_io(manifest, prog)
            if manifest.get("weight_inputs"):
                prog._set_weight_inputs({w["input"]: _blob_array(blobs[w["file"]], w)
                                         for w in manifest["weight_inputs"]}, reload=False)
            prog.load()
        except AnecError:
            prog.close()
            raise
        return prog

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
        with self._lock:
            self._programs.add(prog)
        if load:
            try:
                prog.load()
            except AnecError:
                prog.close()
                raise
        return prog

    def close(self) -> None:
        """Close every program and the runtime (program directories are removed).
        Programs closed this way fail cleanly when used."""
        if self._forked() or self.closed:
            return
        self._native.shutdown()

    def _forked(self) -> bool:
        return os.getpid() != self._pid

    def _check_open(self) -> None:
        if self._forked():
            raise RuntimeFailure(f"this Runtime was opened by process {self._pid}; after fork() the device state "
                                 "belongs to the parent", hint="open a new Runtime in the child process")
        if self.closed:
            raise RuntimeFailure("the runtime is closed")

    def __repr__(self) -> str:
        if self._forked():
            return "Runtime(other process)"
        return f"Runtime(backend={self.backend!r})" if not self.closed else "Runtime(closed)"


def _blob_array(data: bytes, entry: Mapping[str, Any]) -> np.ndarray:
    """The payload of a weight-input BLOBFILE as an array of the input's dtype and shape."""
    from anec.ir.types import DType
    from anec.mil.blobfile import BlobReader

    arr = BlobReader(data, name=entry.get("file")).read(int(entry.get("offset", 64)), DType(entry["dtype"]).np)
    return arr.reshape(entry["shape"])


class Program(_Closing):
    """One compiled program. Call it with named inputs; get named outputs."""

    def __init__(self, runtime: Runtime, nprog: native.NativeProgram, manifest: dict | None) -> None:
        self.runtime = runtime
        self._native = nprog
        self.manifest = manifest
        self.inputs = [dict(i) for i in nprog.inputs]    # binding (alphabetical) order
        self.outputs = [dict(o) for o in nprog.outputs]
        self.name = (manifest or {}).get("func", "main")
        self._reload_lock = threading.Lock()  # reload_weights reads, patches and reloads as one step
        self._weight_inputs = {w["input"]: w for w in (manifest or {}).get("weight_inputs", [])}
        # the shape the caller passes: the manifest's logical shape (a rank-4 device input may
        # hold a tensor of another rank, byte for byte), else the device shape (older manifests)
        logical = {e["name"]: e["shape"] for e in (manifest or {}).get("logical_inputs", [])}
        for spec in self.inputs:
            spec["logical_shape"] = list(logical.get(spec["name"], spec["shape"]))

    # ---- state -----------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._native.closed

    def _check(self) -> None:
        self.runtime._check_open() if self.runtime._forked() else None
        if self.closed:
            extra = " (its runtime was closed)" if self.runtime.closed else ""
            raise RuntimeFailure(f"program '{self.name}' is closed{extra}")

    @property
    def dir(self) -> str:
        """The program directory (model.mil + weights/ + the compiled form on the sim)."""
        self._check()
        d = self._native.dir
        if not d:  # closed by another thread meanwhile
            raise RuntimeFailure(f"program '{self.name}' is closed")
        return d

    @property
    def stats(self) -> dict[str, int]:
        self._check()
        return self._native.stats()

    @property
    def reload_info(self) -> dict[str, Any]:
        """How :meth:`reload_weights` changes this program's weights:
        ``strategy`` ("data-patch", "recompile"; "inputs" for weights compiled
        as inputs), ``data_patchable``, ``verified`` and ``why``."""
        self._check()
        info = self._native.reload_info()
        if self._weight_inputs and not any(w for w in (self.manifest or {}).get("weights", [])):
            info["strategy"] = "inputs"
            info["why"] = "inputs: the weights are program inputs; a reload writes their surfaces"
        return info

    @property
    def input_names(self) -> list[str]:
        """User inputs in declaration order (weights compiled as inputs are not among them)."""
        return [i["name"] for i in sorted(self.inputs, key=lambda i: i["decl_index"])
                if i["name"] not in self._weight_inputs]

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
        if not self.runtime._forked():
            self._native.close()

    # ---- evaluation --------------------------------------------------------
    def __call__(self, inputs: Mapping[str, Any] | None = None, /, **kw: Any) -> dict[str, np.ndarray]:
        """Evaluate: ``prog(x=array)`` or ``prog({"x": array})`` -> {name: array}.

        Thread-safe: concurrent calls of one program are serialized in C (each
        copies in, evaluates and copies out under the program's lock)."""
        self._check()
        given = dict(inputs or {})
        given.update(kw)
        names = [i["name"] for i in self.inputs if i["name"] not in self._weight_inputs]
        for k in given:
            if k not in names:
                raise RuntimeFailure(f"program '{self.name}' has no input '{k}' (inputs: {', '.join(self.input_names)})",
                                     hint=did_you_mean(k, names))
        items: list[tuple[int, np.ndarray] | None] = []
        for spec in self.inputs:
            if spec["name"] in self._weight_inputs:
                items.append(None)  # stays in its surface
                continue
            if spec["name"] not in given:
                raise RuntimeFailure(f"missing input '{spec['name']}' for program '{self.name}' "
                                     f"(inputs: {', '.join(self.input_names)})")
            items.append(self._host_input(spec, given[spec["name"]]))
        outs = [np.empty(tuple(spec["shape"]), native.NP_DTYPES[spec["dtype"]]) for spec in self.outputs]
        self._native.call(items, outs)
        return self._collect({spec["name"]: a for spec, a in zip(self.outputs, outs)})

    def _host_input(self, spec: Mapping[str, Any], value: Any) -> tuple[int, np.ndarray]:
        """(dtype code, contiguous array) for one input: fp32 arrays go to fp16
        inputs as they are (converted in C), anything else to the input's dtype."""
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
        if spec["dtype"] == "fp16" and arr.dtype != np.float16:
            arr = np.ascontiguousarray(arr, dtype=np.float32)
            return native.DTYPE_CODES["fp32"], arr
        arr = np.ascontiguousarray(arr, dtype=native.NP_DTYPES[spec["dtype"]])
        return native.DTYPE_CODES[spec["dtype"]], arr

    def _collect(self, phys: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
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

        Arrays are checked (shape, NaN/Inf, fp16 range) and applied with the
        program's reload strategy (:attr:`reload_info`): weights compiled as
        inputs are written into their surfaces; BLOBFILE weights are patched
        into the compiled data or compiled again. Only changed files are
        rewritten; on any error the old weights stay in use. Reloads of one
        program from several threads apply one after another, each to the
        weights the previous one left.
        """
        self._check()
        if not self.manifest:
            raise WeightError(f"program '{self.name}' has no manifest to map weight keys to files",
                              hint="use reload_blobs({mil_path: bytes}) for raw MIL programs")
        as_inputs = {w["key"]: w for w in self._weight_inputs.values()}
        blob_keys = {w["key"] for w in self.manifest.get("weights", [])}
        for k in weights:
            if k not in as_inputs and k not in blob_keys:
                raise WeightError(f"unknown weight '{k}' for program '{self.name}'",
                                  hint=did_you_mean(k, sorted(blob_keys | set(as_inputs))))
        inputs = weight_input_values(self._weight_inputs.values(), weights)
        blob_weights = {k: v for k, v in weights.items() if k in blob_keys}
        # one step per program: another thread's reload between reading the current
        # files and reloading the patched ones would be lost (or its directory gone)
        with self._reload_lock:
            if blob_weights:  # counted as a reload even when no file changes (then nothing is written)
                self._native.reload(changed_blobs(self.manifest, self.dir, blob_weights), None)
            if inputs:
                self._set_weight_inputs(inputs, reload=True)

    def _set_weight_inputs(self, arrays: Mapping[str, np.ndarray], reload: bool) -> None:
        items: list[tuple[int, np.ndarray] | None] = []
        for spec in self.inputs:
            a = arrays.get(spec["name"])
            items.append(None if a is None else self._host_input(spec, a))
        self._native.set_inputs(items, reload)

    def reload_blobs(self, blobs: Mapping[str, bytes], *, strategy: str | None = None) -> None:
        """Delta reload of whole BLOBFILEs keyed by MIL path. ``strategy`` forces
        "data-patch" or "recompile" (for probes); None uses :attr:`reload_info`."""
        self._check()
        with self._reload_lock:
            self._native.reload({k: bytes(v) for k, v in blobs.items()}, strategy)

    def __repr__(self) -> str:
        ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in self.inputs)
        return f"Program({self.name}({ins}))"
