"""``Program``: one compiled program of a :class:`~anec.runtime.Runtime`.

A program maps names to binding slots, converts arrays into its surfaces in
place (fp32 -> fp16 in C), reassembles chunked outputs from the manifest and
reloads weights by checkpoint key. Inputs written with ``write_input`` /
``write_input_slice`` are *state*: they stay in the program's surfaces across
calls, a call may leave them out, and a slice write changes only some rows (a
KV cache's new positions). :class:`~anec.runtime.staged_program.PipelineProgram`
gives a pipeline of programs the same interface.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any, Mapping, TypeVar

import numpy as np

from anec.diagnostics import ArtifactError, RuntimeFailure, WeightError, did_you_mean
from anec.runtime import native
from anec.runtime.weights import changed_blobs, payloads, stream_plan, weight_input_values, weight_input_views

if TYPE_CHECKING:
    from anec.mil.manifest_types import Manifest, WeightInputEntry
    from anec.runtime import Runtime


def manifest_limits(manifest: "Manifest | None") -> dict[str, Any] | None:
    """The runtime limits a manifest records (plus its target's surface alignment), or None."""
    if manifest is None or manifest.limits is None:
        return None
    lim = manifest.limits.given()
    try:
        from anec.targets import DEFAULT_TARGET, get_target

        lim.setdefault("surface_alignment", get_target(manifest.target or DEFAULT_TARGET).surface_alignment)
    except Exception:  # noqa: BLE001 - an unknown target only loses the alignment hint
        lim.setdefault("surface_alignment", 0)
    return lim


_C = TypeVar("_C", bound="NativeOwner")


class NativeOwner:
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


FINITE_HINT = ("a value left the fp16 range (+-65504) inside the program: run `anec check "
               "FILE.ir --inputs inputs.npz` to find the node [ANE-FP16-RANGE]")


def nonfinite(arrays: Mapping[str, Any]) -> str:
    """``"'y' (3 of 512 elements)"`` for the float arrays holding inf or NaN; ``""`` if none."""
    found = []
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind == "f":
            n = int(a.size - np.count_nonzero(np.isfinite(a)))
            if n:
                found.append(f"'{name}' ({n} of {a.size} elements)")
    return ", ".join(found)


def weight_input_array(data: bytes, entry: "WeightInputEntry") -> np.ndarray:
    """The payload of a weight-input BLOBFILE as an array of the input's dtype and shape."""
    from anec.ir.types import DType
    from anec.mil.blobfile import BlobReader

    arr = BlobReader(data, name=entry.file).read(entry.offset, DType(entry.dtype).np)
    return arr.reshape(entry.shape)


class Program(NativeOwner):
    """One compiled program. Call it with named inputs; get named outputs."""

    def __init__(self, runtime: Runtime, nprog: native.NativeProgram, manifest: "Manifest | None") -> None:
        self.runtime = runtime
        self._native = nprog
        self.manifest = manifest
        self.inputs = [dict(i) for i in nprog.inputs]    # binding (alphabetical) order
        self.outputs = [dict(o) for o in nprog.outputs]
        self.name = manifest.func if manifest is not None else "main"
        self._input_specs = {spec["name"]: spec for spec in self.inputs}
        self._input_index = {spec["name"]: i for i, spec in enumerate(self.inputs)}
        self._view_plans: dict = {}  # weight_input_views' walks, by input and array layout
        self._reload_lock = threading.Lock()  # reload_weights reads, patches and reloads as one step
        self._weight_inputs = {w.input: w for w in manifest.weight_inputs} if manifest is not None else {}
        self._state: set[str] = set()  # inputs written by write_input(_slice): a call may leave them out
        # the shape the caller passes: the manifest's logical shape (a rank-4 device input may
        # hold a tensor of another rank, byte for byte), else the device shape (older manifests)
        logical = {e.name: e.shape for e in manifest.logical_inputs} if manifest is not None else {}
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
        ``strategy`` ("data-patch", "new-object", "recompile"; "inputs" for
        weights compiled as inputs), ``data_patchable``, ``verified`` and ``why``."""
        self._check()
        info = self._native.reload_info()
        if self._weight_inputs and not (self.manifest is not None and self.manifest.weights):
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
        if self.manifest is not None and self.manifest.logical_outputs:
            return [lo.name for lo in self.manifest.logical_outputs]
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
        given = dict(inputs or {})
        given.update(kw)
        result = self._call_unchecked(given)
        if self.runtime.check_finite:
            self._check_finite(given, result)
        return result

    def _call_unchecked(self, given: Mapping[str, Any]) -> dict[str, np.ndarray]:
        self._check()
        names = [i["name"] for i in self.inputs if i["name"] not in self._weight_inputs]
        for k in given:
            if k not in names:
                raise RuntimeFailure(f"program '{self.name}' has no input '{k}' (inputs: {', '.join(self.input_names)})",
                                     hint=did_you_mean(k, names))
        items: list[tuple[int, np.ndarray] | None] = []
        for spec in self.inputs:
            if spec["name"] in self._weight_inputs or (spec["name"] in self._state and spec["name"] not in given):
                items.append(None)  # stays in its surface
                continue
            if spec["name"] not in given:
                raise RuntimeFailure(f"missing input '{spec['name']}' for program '{self.name}' "
                                     f"(inputs: {', '.join(self.input_names)})",
                                     hint="pass it, or write it once with write_input() to keep it in the "
                                          "program between calls")
            items.append(self._host_input(spec, given[spec["name"]]))
        outs = [np.empty(tuple(spec["shape"]), native.NP_DTYPES[spec["dtype"]]) for spec in self.outputs]
        self._native.call(items, outs)
        return self._collect({spec["name"]: a for spec, a in zip(self.outputs, outs)})

    def _check_finite(self, given: Mapping[str, Any], result: Mapping[str, np.ndarray]) -> None:
        """The finite-output check of ``Runtime(check_finite=True)`` / ``ANEC_CHECK_FINITE=1``."""
        bad = nonfinite(result)
        if bad and not nonfinite(given):
            raise RuntimeFailure(
                f"program '{self.name}' produced inf/NaN from finite inputs: {bad}",
                hint=FINITE_HINT)

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

    # ---- state inputs ----------------------------------------------------------
    @property
    def state_inputs(self) -> frozenset[str]:
        """Inputs written with :meth:`write_input` or :meth:`write_input_slice`: they live in
        the program's surfaces across calls, and a call that leaves one out computes with what
        its surface holds (a call that passes one writes it whole, and it stays state)."""
        return frozenset(self._state)

    def _state_spec(self, name: str) -> dict[str, Any]:
        names = [i["name"] for i in self.inputs if i["name"] not in self._weight_inputs]
        if name not in names:
            what = "a weight compiled as an input (use reload_weights)" if name in self._weight_inputs else "no input"
            raise RuntimeFailure(f"program '{self.name}' has {what} '{name}' (inputs: {', '.join(self.input_names)})",
                                 hint=did_you_mean(name, names))
        return next(i for i in self.inputs if i["name"] == name)

    def write_input(self, name: str, value: Any) -> None:
        """Write input ``name`` whole into the program without evaluating (every stage that
        reads it, for a pipeline). It becomes state: later calls may leave it out."""
        self._check()
        spec = self._state_spec(name)
        item = self._host_input(spec, value)
        self._native.set_inputs([item if i is spec else None for i in self.inputs], False)
        self._state.add(name)

    def write_input_slice(self, name: str, value: Any, axis: int, start: int) -> None:
        """Write rows ``start .. start + n`` of input ``name`` along ``axis`` of its logical
        shape, in place: ``value`` has the input's shape except ``n`` along ``axis`` (e.g. the
        new position of a ``[1, KV, T, D]`` cache: ``value [1, KV, 1, D]``, ``axis=2``,
        ``start=pos``). Every other element keeps what the surface holds (zero until first
        written). Written into every surface that holds the input (each stage that reads it,
        for a pipeline) under the program's lock; the input becomes state."""
        self._check()
        spec = self._state_spec(name)
        shape = list(spec["logical_shape"])
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -len(shape) <= axis < len(shape):
            raise RuntimeFailure(f"input '{name}' has {len(shape)} axes; got axis {axis!r}")
        axis = int(axis) % len(shape)
        arr = np.asarray(value)
        want = shape[:axis] + [arr.shape[axis] if arr.ndim == len(shape) else -1] + shape[axis + 1:]
        if arr.ndim != len(shape) or list(arr.shape) != want or arr.shape[axis] < 1:
            raise RuntimeFailure(f"rows of input '{name}' {shape} along axis {axis} must have the shape "
                                 f"{shape[:axis] + ['n'] + shape[axis + 1:]} (n >= 1); got {list(arr.shape)}")
        count = arr.shape[axis]
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start <= shape[axis] - count:
            raise RuntimeFailure(f"input '{name}': {count} rows from row {start!r} do not fit its {shape[axis]} "
                                 f"rows along axis {axis}")
        code, flat = self._host_input({**spec, "shape": [arr.size], "logical_shape": list(arr.shape)}, arr)
        view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]), int(start), count)
        self._native.write_slice(self.inputs.index(spec), view, (code, flat))
        self._state.add(name)

    def _collect(self, phys: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        los = self.manifest.logical_outputs if self.manifest is not None else ()
        if not los:
            return {n: phys[n] for n in self.output_names}
        # targets without fp32 I/O: the manifest asks the host to cast some outputs back
        host = {h.name: h.host_dtype for h in self.manifest.host_casts if h.kind == "output"}
        res = {}
        for lo in los:
            pieces = [phys[p] for p in lo.pieces]
            axis = lo.axis
            a = pieces[0] if axis is None or len(pieces) == 1 else np.concatenate(pieces, axis=axis)
            if lo.shape is not None:
                if math.prod(lo.shape) != a.size:
                    raise ArtifactError(f"the manifest gives output '{lo.name}' the shape {list(lo.shape)}, "
                                        f"but the program returns {a.size} elements")
                a = a.reshape(lo.shape)  # the logical shape of a rank-4 device output (free)
            dt = host.get(lo.name, lo.dtype)
            res[lo.name] = a.astype(native.NP_DTYPES[dt], copy=False) if dt in native.NP_DTYPES else a
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
        if self.manifest is None:
            raise WeightError(f"program '{self.name}' has no manifest to map weight keys to files",
                              hint="use reload_blobs({mil_path: bytes}) for raw MIL programs")
        as_inputs = {w.key: w for w in self._weight_inputs.values()}
        blob_keys = {w.key for w in self.manifest.weights}
        for k in weights:
            if k not in as_inputs and k not in blob_keys:
                raise WeightError(f"unknown weight '{k}' for program '{self.name}'",
                                  hint=did_you_mean(k, sorted(blob_keys | set(as_inputs))))
        specs = self._input_specs
        views = weight_input_views(self._weight_inputs.values(), weights, specs, self._view_plans)
        inputs = {} if views else weight_input_values(self._weight_inputs.values(), weights)
        blob_weights = {k: v for k, v in weights.items() if k in blob_keys}
        # one step per program: another thread's reload between reading the current
        # files and reloading the patched ones would be lost (or its directory gone)
        with self._reload_lock:
            if blob_weights:  # counted as a reload even when no file changes (then nothing is written)
                self._reload_blob_weights(blob_weights)
            if views:
                self._reload_input_views(views, weights)
            elif inputs:
                self._set_weight_inputs(inputs, reload=True)

    def _reload_input_views(self, views: Mapping[str, tuple[np.ndarray, int, tuple[int, int, int, int]]],
                            weights: Mapping[str, Any]) -> None:
        """Weights-as-inputs from the callers' arrays: C checks every view, then writes each
        into its surface (transposed, sliced and converted in the copy), no host copies."""
        index = self._input_index
        items = [(index[name], a, offset, walk) for name, (a, offset, walk) in views.items()]
        if self._native.reload_input_views(items) is not None:
            # a refused value: the element-wise checks name the key and the element
            message = native.last_error()
            weight_input_values(self._weight_inputs.values(), weights)
            raise WeightError(message, hint="the program keeps its old weights")

    def _reload_blob_weights(self, weights: Mapping[str, Any]) -> None:
        """A data-patch or new-object program: C builds the new file straight from the arrays
        (checked, converted and written in one pass). Otherwise, or for arrays C
        does not take as they are, the new files are built here."""
        streams = self._native.reload_info()["strategy"] in ("data-patch", "new-object")
        plan = stream_plan(self.manifest, weights) if streams else None
        if plan is None:
            self._native.reload(changed_blobs(self.manifest, self.dir, weights), None)
            return
        if self._native.reload_arrays(*plan) is not None:
            # a refused value: the element-wise checks name the key and the element
            message = native.last_error()
            payloads(self.manifest, weights)
            raise WeightError(message, hint="the program keeps its old weights")

    def _set_weight_inputs(self, arrays: Mapping[str, np.ndarray], reload: bool) -> None:
        items: list[tuple[int, np.ndarray] | None] = []
        for spec in self.inputs:
            a = arrays.get(spec["name"])
            items.append(None if a is None else self._host_input(spec, a))
        self._native.set_inputs(items, reload)

    def reload_blobs(self, blobs: Mapping[str, bytes], *, strategy: str | None = None) -> None:
        """Delta reload of whole BLOBFILEs keyed by MIL path. ``strategy`` forces
        "data-patch", "new-object" or "recompile" (for probes); None uses
        :attr:`reload_info`."""
        self._check()
        with self._reload_lock:
            self._native.reload({k: bytes(v) for k, v in blobs.items()}, strategy)

    def __repr__(self) -> str:
        ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in self.inputs)
        return f"Program({self.name}({ins}))"
