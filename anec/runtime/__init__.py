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
uniform surfaces and delta reload. This layer opens runtimes, resolves
artifacts (one program or a pipeline) and cleans up at exit (and on SIGTERM/SIGHUP
once the program opts in with :func:`anec.signals.install_handlers`);
:mod:`anec.runtime.program` maps names to binding slots and reloads weights
by key. C errors become :class:`~anec.diagnostics.RuntimeFailure`.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from anec import signals
from anec.diagnostics import AnecError, ArtifactError, RuntimeFailure, did_you_mean
from anec.runtime import native
from anec.runtime.program import Program, weight_input_array, NativeOwner, manifest_limits

if TYPE_CHECKING:
    from anec.mil.manifest_types import Manifest

__all__ = ["Runtime", "Program", "RuntimeFailure", "backend_available"]

BACKENDS = ("auto", "sim", "ane")


def backend_available(name: str) -> tuple[bool, str]:
    """(usable, reason) for backend ``name`` on this machine."""
    return native.driver_available(name)


def _resolve(artifact: Any, func: str | None) -> Any:
    """The artifact (one program, or a pipeline) :meth:`Runtime.load` was given, its manifest
    validated: an object, a list of them, or a directory (read by :func:`anec.mil.multi_program.load_any`)."""
    from anec.mil.artifact import Artifact
    from anec.mil.manifest import validate_manifest
    from anec.mil.manifest_types import Manifest
    from anec.mil.multi_program import PipelineArtifact, check_manifest, load_any

    if isinstance(artifact, PipelineArtifact):
        check_manifest(artifact.manifest.document, f"the manifest of artifact {artifact.func!r:.60}")
        if func is not None and artifact.func != func:
            raise ArtifactError(f"the artifact is for func '{artifact.func}', not '{func}'")
        return artifact
    if all(hasattr(artifact, a) for a in ("mil_text", "blobs", "manifest")):
        typed = isinstance(artifact.manifest, Manifest)  # else a JSON object: typed here, once
        document = artifact.manifest.document if typed else artifact.manifest
        where = f"the manifest of artifact {getattr(artifact, 'func', '?')!r:.60}"
        manifest = Manifest.of(validate_manifest(document, where))
        if func is not None and manifest.func != func:
            raise ArtifactError(f"the artifact is for func '{manifest.func}', not '{func}'")
        return artifact if typed else Artifact(manifest.func, artifact.mil_text, artifact.blobs, manifest)
    if isinstance(artifact, (list, tuple)):
        arts = {getattr(a, "func", None): a for a in artifact}
        if func is None and len(arts) == 1:
            return _resolve(next(iter(arts.values())), None)
        if func not in arts:
            raise ArtifactError(f"no func '{func}' among the artifacts ({', '.join(map(str, arts))})",
                                hint=did_you_mean(str(func), map(str, arts)) or "pass func=NAME")
        return _resolve(arts[func], None)
    return load_any(Path(os.fspath(artifact)), func)


def _check_io(manifest: "Manifest", prog: "Program") -> None:
    """The manifest's inputs and outputs are the MIL program's (names, dtypes, shapes)."""
    for direction, entries, actual in (("inputs", manifest.inputs, prog.inputs),
                                       ("outputs", manifest.outputs, prog.outputs)):
        declared = sorted(entries, key=lambda e: e.binding)
        got = [(t["name"], t["dtype"], list(t["shape"])) for t in actual]
        want = [(e.name, e.dtype, list(e.shape)) for e in declared]
        if got != want:
            bad = next((w, g) for w, g in zip(want + [None] * len(got), got + [None] * len(want)) if w != g)
            raise ArtifactError(f"the manifest's {direction} do not match the MIL program's: the manifest has "
                                f"{_io_text(bad[0])}, the program {_io_text(bad[1])}",
                                hint="the artifact is damaged or was not written by anec; recompile it")


def _io_text(entry: tuple[str, str, list[int]] | None) -> str:
    return "nothing there" if entry is None else f"'{entry[0]}' {entry[1]}{entry[2]}"


# ---- cleanup at exit and on signals ----------------------------------------------
#
# A runtime's program directories (its temp root) go away when it closes. So that
# they never outlive the process: every runtime still open closes at interpreter
# exit, and, in a program that installed anec's signal handlers
# (anec.signals.install_handlers(); the anec command does), SIGTERM/SIGHUP close
# them all and exit with status 128 + signal through the normal unwinding.
# SIGINT is Python's KeyboardInterrupt, which unwinds too.

_OPEN: "weakref.WeakSet[Runtime]" = weakref.WeakSet()
_cleanup = {"registered": False}


def _close_all() -> None:
    for rt in list(_OPEN):
        try:
            rt.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _install_cleanup() -> None:
    if not _cleanup["registered"]:
        atexit.register(_close_all)
        signals.at_exit_signal(_close_all)  # runs only if the program installed the handlers
        _cleanup["registered"] = True


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


class Runtime(NativeOwner):
    """A C runtime on one backend; programs live until :meth:`close`.

    Safe to use from several threads: calls on one program are serialized,
    calls on different programs run in parallel (docs/runtime.md). Bound to
    the process that opened it: after ``fork()`` open a new one in the child.
    Runtimes still open close at interpreter exit, and on SIGTERM/SIGHUP in a
    program that called :func:`anec.signals.install_handlers` (it then exits with
    128 + signal): their program directories never outlive the process.
    """

    def __init__(self, backend: str = "auto", compile_budget: int | None = None, *,
                 temp_root: str | os.PathLike | None = None, sim_threads: int | None = None,
                 reload_verified: Iterable[str] | None = None, sim_device: str | None = None,
                 check_finite: bool | None = None) -> None:
        """``reload_verified``: the reload strategies ("data-patch", "new-object") verified on
        this machine; None takes the driver's own (the sim's device model) or,
        for the ane driver, the verdict `python -m anec.selftest` cached.
        ``sim_device``: the sim's device model switches (docs/runtime.md).
        ``check_finite``: after every call, check the outputs for inf/NaN and, when the
        inputs were finite, raise a RuntimeFailure naming the first program (for a
        pipeline: the first stage) that produced one; None reads ``ANEC_CHECK_FINITE=1``
        from the environment (a debug mode: it reads every output once more)."""
        if backend not in BACKENDS:
            raise RuntimeFailure(f"unknown backend '{backend}'", hint=did_you_mean(backend, BACKENDS)
                                 or "choose sim, ane or auto")
        if compile_budget is not None and compile_budget < 1:
            raise RuntimeFailure(f"compile_budget must be >= 1, got {compile_budget}")
        self._pid = os.getpid()
        self.check_finite = (os.environ.get("ANEC_CHECK_FINITE", "") not in ("", "0")
                             if check_finite is None else bool(check_finite))
        """Debug mode: every call checks its outputs for inf/NaN (see ``__init__``)."""
        self._lock = threading.Lock()
        self._programs: "weakref.WeakSet[Program]" = weakref.WeakSet()
        if reload_verified is None and backend != "sim":
            ok_ane, _ = native.driver_available("ane") if backend == "auto" else (True, "")
            if ok_ane:
                reload_verified = _verdict_for("ane")
        _install_cleanup()  # before the temp root exists: an exit always finds the hook
        nat = native.NativeRuntime(backend, compile_budget,
                                   os.fspath(temp_root) if temp_root is not None else None, sim_threads,
                                   list(reload_verified) if reload_verified is not None else None, sim_device)
        try:
            self._native = nat
            _OPEN.add(self)
        except BaseException:  # a signal between the open and the registration: close it now
            nat.shutdown()
            raise

    # ---- properties ------------------------------------------------------
    @property
    def backend(self) -> str:
        """The driver in use: "sim" or "ane"."""
        self._check_open()
        return self._native.driver

    @property
    def reload_verified(self) -> list[str]:
        """Reload strategies verified for this runtime ("data-patch", "new-object", "recompile",
        "inputs")."""
        self._check_open()
        return self._native.verified

    @property
    def stats(self) -> dict[str, Any]:
        """compiles, compile_budget(_left), cache_hits, loads, unloads, reloads
        (and per strategy: reloads_data_patch, reloads_new_object,
        reloads_recompile, reloads_inputs), evaluations, blobs_patched, programs_live, dirs_live,
        process_compiles, ns_* per phase, the bytes the CPU moved (host_in_bytes into input
        surfaces, host_out_bytes out of output surfaces, surface_copy_bytes between
        surfaces), and ``reload_strategy``: the
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
    def load(self, artifact: Any, func: str | None = None, *,
             release: Callable[[], None] | None = None) -> "Program":
        """Compile (or take from the cache) and load an artifact.

        ``artifact``: an artifact directory (``manifest.json`` + ``model.mil`` +
        ``weights/``), a parent directory of several (pick with ``func``), an
        ``Artifact`` object, or a list of them. Each weight file's bytes are built for the
        load only (an artifact compiled with ``keep_views`` keeps its views, not a copy):
        ``release``, if given, is called each time a program (each stage of a pipeline) has
        taken its own copy of its weights, the caller's chance to give back the memory the
        artifact's weight files are views of (the pages of a memory-mapped checkpoint).
        """
        from anec.mil.artifact import file_bytes

        self._check_open()
        art = _resolve(artifact, func)
        if hasattr(art, "stages"):  # a func cut into several programs: run them as one
            from anec.runtime.staged_program import load_pipeline

            return load_pipeline(self, art, release)
        manifest = art.manifest
        paths = {w.file: w.mil_path for w in manifest.weights}
        input_files = {w.file for w in manifest.weight_inputs}
        mil_blobs = {paths.get(rel, "@model_path/" + rel): file_bytes(art.blobs, rel) for rel in art.blobs
                     if rel not in input_files}
        prog = self.compile(art.mil_text, mil_blobs, limits=manifest_limits(manifest), manifest=manifest, load=False)
        del mil_blobs  # the runtime wrote its own files: these bytes go before the program loads
        try:
            _check_io(manifest, prog)
            if manifest.weight_inputs:
                prog._set_weight_inputs({w.input: weight_input_array(file_bytes(art.blobs, w.file), w)
                                         for w in manifest.weight_inputs}, reload=False)
            prog.load()
        except AnecError:
            prog.close()
            raise
        if release is not None:
            release()
        return prog

    def compile(self, mil: str | bytes, blobs: Mapping[str, bytes] | None = None, *,
                limits: Mapping[str, Any] | None = None, manifest: "Manifest | Mapping[str, Any] | None" = None,
                load: bool = True) -> "Program":
        """Compile raw MIL text with weight files keyed by MIL path
        (``"@model_path/weights/w.bin"``); loads it unless ``load=False``. ``manifest`` (a
        typed one, or at least ``{"func", "weights": [...]}`` as JSON) maps weight keys to files."""
        from anec.mil.manifest_types import Manifest

        if manifest is not None and not isinstance(manifest, Manifest):
            manifest = Manifest.of({"func": "main", **manifest})
        self._check_open()
        data = mil.encode("utf-8") if isinstance(mil, str) else bytes(mil)
        nprog = self._native.compile(data, {k: bytes(v) for k, v in (blobs or {}).items()},
                                     dict(limits) if limits is not None else None)
        prog = Program(self, nprog, manifest)
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
