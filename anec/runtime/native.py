"""Thin, typed wrappers over the C runtime's entry points (the extension loaded by
:mod:`anec.c_extension`).

Everything here maps C calls one to one: status codes become
:class:`~anec.diagnostics.RuntimeFailure` carrying the C message (with the
constraint id lifted out of ``[ANE-...]``), structs become dicts, and
surfaces become numpy views of the C memory (valid while the program lives).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from anec import c_extension
from anec.diagnostics import RuntimeFailure
from anec.ir.types import DType

ffi, lib = c_extension.ffi, c_extension.lib
"""The extension's cffi module (:mod:`anec.c_extension` loads it); None when it is not built."""
_IMPORT_ERROR: ImportError | None = c_extension.load_error

DTYPE_CODES: dict[str, int] = (
    {d.value: int(getattr(lib, f"ANEC_DTYPE_{d.value.upper()}")) for d in DType} if lib is not None else {}
)
"""Dtype name -> ``ANEC_DTYPE_*`` code of the C API (read from the header)."""
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
NP_DTYPES = {d.value: d.np.type for d in DType}
STATS_FIELDS = (
    "compiles", "compile_budget", "compile_budget_left", "cache_hits", "loads", "unloads",
    "reloads", "evaluations", "blobs_patched", "programs_live", "dirs_live",
    "ns_compile", "ns_load", "ns_unload", "ns_reload", "ns_evaluate",
    "reloads_data_patch", "reloads_recompile", "reloads_inputs", "reloads_new_object", "process_compiles",
    "host_in_bytes", "host_out_bytes", "surface_copy_bytes",
)
STRATEGIES = {"data-patch": 1, "new-object": 8, "recompile": 2, "inputs": 4}
"""Reload strategy names -> ANEC_RELOAD_* bits."""
_CONSTRAINT = re.compile(r"\[(ANE-[A-Z0-9-]+)\]\s*")


def available() -> bool:
    """True when the C extension is built."""
    return lib is not None


def require() -> None:
    if lib is None:
        raise RuntimeFailure(
            f"the anec C runtime extension is not built ({_IMPORT_ERROR})",
            hint="run `pip install -e .` or `python anec/runtime/_ffi_build.py`",
        )


def failure(code: int, message: str, hint: str | None = None) -> RuntimeFailure:
    """A RuntimeFailure from a C status and message, constraint id lifted out."""
    m = _CONSTRAINT.search(message)
    constraint = m.group(1) if m else None
    if m:
        message = (message[: m.start()] + message[m.end():]).strip()
    name = ffi.string(lib.anec_strerror(code)).decode() if lib is not None else str(code)
    return RuntimeFailure(f"{name}: {message}" if message else name, code=code, constraint=constraint, hint=hint)


def driver_available(name: str) -> tuple[bool, str]:
    require()
    why = ffi.new("char[]", 512)
    ok = lib.anec_driver_available(name.encode(), why, 512)
    return bool(ok), ffi.string(why).decode(errors="replace")


def f32_to_f16(src: np.ndarray) -> np.ndarray:
    """fp32 -> fp16 with the runtime's converter (F16C when available)."""
    require()
    a = np.ascontiguousarray(src, dtype=np.float32)
    out = np.empty(a.shape, dtype=np.float16)
    lib.anec_f32_to_f16(ffi.from_buffer("float[]", a), ffi.from_buffer("uint16_t[]", out.view(np.uint16)), a.size)
    return out


def f32_to_f16_into(src: np.ndarray, out: np.ndarray) -> None:
    """fp32 ``src`` into the contiguous fp16 array ``out`` of the same size (no allocation)."""
    require()
    a = np.ascontiguousarray(src, dtype=np.float32)
    if out.dtype != np.float16 or not out.flags.c_contiguous or out.size != a.size:
        raise ValueError("f32_to_f16_into: out must be a contiguous fp16 array of the source's size")
    lib.anec_f32_to_f16(ffi.from_buffer("float[]", a), ffi.from_buffer("uint16_t[]", out.view(np.uint16),
                                                                       require_writable=True), a.size)


def max_magnitude_bits(src: np.ndarray) -> int:
    """The largest |x| of a contiguous fp16 or fp32 array, as bits with the sign cleared."""
    require()
    if src.dtype not in (np.float16, np.float32) or not src.flags.c_contiguous:
        raise ValueError("max_magnitude_bits: a contiguous fp16 or fp32 array")
    if not src.size:
        return 0
    return int(lib.anec_max_magnitude_bits(ffi.from_buffer("uint8_t[]", src.reshape(-1).view(np.uint8)),
                                           src.itemsize, src.size))


def f16_to_f32(src: np.ndarray) -> np.ndarray:
    require()
    a = np.ascontiguousarray(src, dtype=np.float16)
    out = np.empty(a.shape, dtype=np.float32)
    lib.anec_f16_to_f32(ffi.from_buffer("uint16_t[]", a.view(np.uint16)), ffi.from_buffer("float[]", out), a.size)
    return out


def _stats(st: Any) -> dict[str, int]:
    return {k: int(getattr(st, k)) for k in STATS_FIELDS}


def _info(inf: Any) -> dict[str, Any]:
    dtype = DTYPE_NAMES.get(inf.dtype, f"dtype{inf.dtype}")
    return {
        "name": ffi.string(inf.name).decode(),
        "dtype": dtype,
        "shape": [int(inf.shape[i]) for i in range(inf.rank)],
        "bytes": int(inf.bytes),
        "binding": int(inf.binding),
        "decl_index": int(inf.decl_index),
    }


def _blob_array(blobs: dict[str, bytes]) -> tuple[Any, list[Any]]:
    """cdata anec_blob[] plus the objects that must stay alive while it is used."""
    keep: list[Any] = []
    arr = ffi.new("anec_blob[]", max(1, len(blobs)))
    for i, (path, data) in enumerate(blobs.items()):
        p = ffi.new("char[]", path.encode())
        d = ffi.from_buffer("uint8_t[]", data) if len(data) else ffi.NULL
        keep += [p, d, data]
        arr[i].path = p
        arr[i].data = d
        arr[i].len = len(data)
    return arr, keep


def last_error() -> str:
    """The calling thread's last C error message."""
    return ffi.string(lib.anec_last_error(ffi.NULL)).decode(errors="replace")


def _mask(names: Any) -> int:
    bits = 0
    for n in names:
        if n not in STRATEGIES:
            raise RuntimeFailure(f"unknown reload strategy '{n}' (choose from {', '.join(STRATEGIES)})")
        bits |= STRATEGIES[n]
    return bits


def mask_names(bits: int) -> list[str]:
    return [n for n, b in STRATEGIES.items() if bits & b]


def _out_array(outputs: list[np.ndarray]) -> tuple[Any, list[Any]]:
    """``anec_io[]`` over preallocated C-contiguous output arrays (and the buffers to keep alive)."""
    ob = ffi.new("anec_io[]", max(1, len(outputs)))
    keep = []
    for j, a in enumerate(outputs):
        c = ffi.from_buffer("uint8_t[]", a.reshape(-1).view(np.uint8), require_writable=True)
        keep.append(c)
        ob[j].dtype = DTYPE_CODES[_np_name(a.dtype)]
        ob[j].data = c
        ob[j].bytes = a.nbytes
    return ob, keep


def _slice_args(view: tuple[int, int, int, int, int], item: tuple[int, np.ndarray]) -> tuple[Any, Any, list[Any]]:
    """``anec_slice *`` from (outer, extent, inner, start, count) and ``anec_io *`` from
    (dtype code, C-contiguous array), plus the buffers to keep alive."""
    sl = ffi.new("anec_slice *")
    sl.outer, sl.extent, sl.inner, sl.start, sl.count = view
    code, a = item
    io = ffi.new("anec_io *")
    c = ffi.from_buffer("uint8_t[]", a.reshape(-1).view(np.uint8), require_writable=False)
    io.dtype, io.data, io.bytes = code, c, a.nbytes
    return sl, io, [c, a]


def _io_array(items: list[tuple[int, Any] | None]) -> tuple[Any, list[Any]]:
    """cdata anec_io[] from (dtype code, C-contiguous array) or None (keep), plus keep-alives."""
    arr = ffi.new("anec_io[]", max(1, len(items)))
    keep: list[Any] = []
    for i, it in enumerate(items):
        if it is None:
            arr[i].data = ffi.NULL
            continue
        code, a = it
        c = ffi.from_buffer("uint8_t[]", a.reshape(-1).view(np.uint8), require_writable=False)
        keep += [c, a]
        arr[i].dtype = code
        arr[i].data = c
        arr[i].bytes = a.nbytes
    return arr, keep


class NativeRuntime:
    """Owns an ``anec_runtime*``: :meth:`shutdown` closes it (the handle stays
    valid, calls fail cleanly), :meth:`release` gives the handle back (from the
    owner's finalizer, or this object's own when no owner ever held it)."""

    def __init__(self, driver: str, compile_budget: int | None = None, temp_root: str | None = None,
                 sim_threads: int | None = None, reload_verified: Any = None,
                 sim_device: str | None = None, process_budget: int | None = None) -> None:
        require()
        opts = ffi.new("anec_options *")
        opts.compile_budget = int(compile_budget or 0)
        self._root = ffi.new("char[]", temp_root.encode()) if temp_root else ffi.NULL
        opts.temp_root = self._root
        opts.sim_threads = int(sim_threads or 0)
        if reload_verified is not None:
            opts.reload_verified = lib.ANEC_RELOAD_VERIFIED | _mask(reload_verified)
        self._dev = ffi.new("char[]", sim_device.encode()) if sim_device else ffi.NULL
        opts.sim_device = self._dev
        if process_budget is None:  # a device fact: the target's
            from anec.targets import get_target

            process_budget = get_target().process_compile_budget
        opts.process_budget = int(process_budget)
        out = ffi.new("anec_runtime **")
        self.ptr = None
        self.closed = True
        try:
            rc = lib.anec_runtime_open(driver.encode(), opts, out)
            if rc != 0:
                detail = last_error()
                msg = f"cannot open the '{driver}' driver"
                if rc == lib.ANEC_EIO:
                    msg = f"cannot create the program directory root '{temp_root or '$TMPDIR'}'"
                elif driver not in ("sim", "ane", "auto"):
                    msg += " (choose sim, ane or auto)"
                elif detail:
                    msg += f": {detail}"
                raise failure(rc, msg, hint="use backend='sim' (runs everywhere) or 'auto'" if driver == "ane" else None)
            self.ptr = out[0]
            self.closed = False
        except BaseException:
            # a signal's exception (KeyboardInterrupt, SystemExit) may land on any line after the
            # C call returned: close what it opened, or its temp root outlives the process
            if out[0] != ffi.NULL:
                lib.anec_runtime_close(out[0])
                self.ptr, self.closed = None, True
            raise

    def check(self, rc: int, hint: str | None = None) -> None:
        if rc != 0:
            raise failure(rc, last_error(), hint)

    @property
    def driver(self) -> str:
        return ffi.string(lib.anec_driver_name(self.ptr)).decode()

    @property
    def verified(self) -> list[str]:
        return mask_names(int(lib.anec_reload_verified(self.ptr)))

    def stats(self) -> dict[str, int]:
        st = ffi.new("struct anec_stats *")
        self.check(lib.anec_stats(self.ptr, st))
        return _stats(st)

    def compile(self, mil: bytes, blobs: dict[str, bytes], limits: dict[str, Any] | None) -> "NativeProgram":
        arr, keep = _blob_array(blobs)
        lim = _c_limits(limits or {})  # None: the default target's (the C runtime has no defaults)
        out = ffi.new("anec_program **")
        milbuf = ffi.from_buffer("char[]", mil)
        rc = lib.anec_compile(self.ptr, milbuf, len(mil), arr, len(blobs), lim, out)
        del keep
        self.check(rc)
        return NativeProgram(self, out[0])

    def shutdown(self) -> None:
        """Close every program and the driver (idempotent, thread-safe)."""
        if not self.closed:
            lib.anec_runtime_shutdown(self.ptr)  # idempotent: a signal between the two lines
            self.closed = True  # leaves it to be called again, never skipped

    def release(self) -> None:
        if self.ptr is not None:
            self.closed = True
            lib.anec_runtime_close(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover - depends on GC timing
        # normally the owner's finalizer released it already; this covers a runtime dropped
        # before any owner held it (an exception between the open and the assignment)
        try:
            self.release()
        except Exception:  # noqa: BLE001
            pass


class NativeProgram:
    """Owns an ``anec_program*``: :meth:`close` releases the device program
    (the handle stays valid, later calls fail with ANEC_ESTATE), :meth:`release`
    gives the handle back (from the owner's finalizer only)."""

    def __init__(self, rt: NativeRuntime, ptr: Any) -> None:
        self.rt = rt
        self.ptr = ptr
        self._closed = False
        n_in = lib.anec_program_num_inputs(ptr)
        n_out = lib.anec_program_num_outputs(ptr)
        inf = ffi.new("anec_tensor_info *")
        self.inputs: list[dict[str, Any]] = []
        self.outputs: list[dict[str, Any]] = []
        for i in range(n_in):
            rt.check(lib.anec_program_input(ptr, i, inf))
            self.inputs.append(_info(inf))
        for i in range(n_out):
            rt.check(lib.anec_program_output(ptr, i, inf))
            self.outputs.append(_info(inf))
        self.input_surface_bytes = int(lib.anec_program_input_surface_bytes(ptr))
        self.output_surface_bytes = int(lib.anec_program_output_surface_bytes(ptr))

    @property
    def dir(self) -> str:
        return ffi.string(lib.anec_program_dir(self.ptr)).decode()

    def input_surface(self, i: int) -> np.ndarray:
        """uint8 view of the whole input surface i (binding order); valid until close."""
        return np.frombuffer(ffi.buffer(lib.anec_program_input_surface(self.ptr, i), self.input_surface_bytes),
                             dtype=np.uint8)

    def output_surface(self, i: int) -> np.ndarray:
        return np.frombuffer(ffi.buffer(lib.anec_program_output_surface(self.ptr, i), self.output_surface_bytes),
                             dtype=np.uint8)

    def load(self) -> None:
        self.rt.check(lib.anec_load(self.ptr))

    def unload(self) -> None:
        self.rt.check(lib.anec_unload(self.ptr))

    def run(self) -> None:
        self.rt.check(lib.anec_run(self.ptr))

    def call(self, inputs: list[tuple[int, np.ndarray] | None], outputs: list[np.ndarray]) -> None:
        """anec_call: inputs in binding order ((dtype code, array) or None to keep
        the surface), outputs as preallocated C-contiguous arrays."""
        ib, keep_in = _io_array(inputs)
        ob, keep_out = _out_array(outputs)
        rc = lib.anec_call(self.ptr, ib, len(inputs), ob, len(outputs))
        del keep_in, keep_out
        self.rt.check(rc)

    def set_inputs(self, inputs: list[tuple[int, np.ndarray] | None], reload: bool) -> None:
        arr, keep = _io_array(inputs)
        fn = lib.anec_reload_inputs if reload else lib.anec_set_inputs
        rc = fn(self.ptr, arr, len(inputs))
        del keep
        self.rt.check(rc)

    def write_slice(self, index: int, view: tuple[int, int, int, int, int], item: tuple[int, np.ndarray]) -> None:
        """anec_write_input_slice: rows ``start .. start + count`` of input ``index`` (binding
        order) viewed as ``[outer][extent][inner]``; ``view`` is (outer, extent, inner, start,
        count), ``item`` (dtype code, C-contiguous array of outer * count * inner elements)."""
        sl, io, keep = _slice_args(view, item)
        rc = lib.anec_write_input_slice(self.ptr, ffi.NULL, index, sl, io)
        del keep
        self.rt.check(rc)

    def evaluate(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """anec_evaluate with caller buffers (contiguous, any dtype; sizes as given)."""
        ib = ffi.new("anec_buffer[]", max(1, len(inputs)))
        ob = ffi.new("anec_buffer[]", max(1, len(outputs)))
        keep = []
        for arr, bufs in ((inputs, ib), (outputs, ob)):
            for i, a in enumerate(arr):
                if not a.flags.c_contiguous or (bufs is ob and not a.flags.writeable):
                    raise RuntimeFailure("evaluate buffers must be C-contiguous (and writable for outputs)")
                c = ffi.from_buffer("uint8_t[]", a.view(np.uint8).reshape(-1), require_writable=bufs is ob)
                keep.append(c)
                bufs[i].data = c
                bufs[i].bytes = a.nbytes
        self.rt.check(lib.anec_evaluate(self.ptr, ib, len(inputs), ob, len(outputs)))

    def reload(self, blobs: dict[str, bytes], strategy: str | None = None) -> None:
        arr, keep = _blob_array(blobs)
        if strategy is None:
            rc = lib.anec_reload_weights(self.ptr, arr, len(blobs))
        else:
            rc = lib.anec_reload_weights_using(self.ptr, arr, len(blobs), _mask([strategy]))
        del keep
        self.rt.check(rc)

    def reload_arrays(self, path: str, arrays: list[tuple[int, np.ndarray]]) -> int | None:
        """Data-patch reload from (metadata record offset, contiguous fp16/fp32 array)
        pairs of the weight file ``path``; the index of an array whose values the C
        checks refused (nothing changed then), else None."""
        arr = ffi.new("anec_weight_array[]", max(1, len(arrays)))
        keep: list[Any] = []
        for i, (record, a) in enumerate(arrays):
            if a.dtype not in (np.float16, np.float32) or not a.flags.c_contiguous:
                raise ValueError("reload_arrays: arrays must be contiguous fp16 or fp32")
            buf = ffi.from_buffer("char[]", a.reshape(-1).view(np.uint8))
            keep.append(buf)
            arr[i].record = record
            arr[i].data = buf
            arr[i].count = a.size
            arr[i].dtype = DTYPE_CODES["fp16" if a.dtype == np.float16 else "fp32"]
        bad = ffi.new("long long *")
        rc = lib.anec_reload_arrays(self.ptr, path.encode(), arr, len(arrays), bad)
        del keep
        if rc == lib.ANEC_EWEIGHTS and bad[0] >= 0:
            return int(bad[0])
        self.rt.check(rc)
        return None

    def reload_input_views(self, views: list[tuple[int, np.ndarray, int, tuple[int, int, int, int]]]) -> int | None:
        """anec_reload_input_views from (input binding index, fp16/fp32 array, byte offset of
        the view's first element in it, (rows, cols, row stride, col stride) in elements): the
        index of a view whose values the C checks refused (nothing written then), else None."""
        arr = ffi.new("anec_input_view[]", max(1, len(views)))
        for i, (index, a, offset, (rows, cols, rs, cs)) in enumerate(views):
            if a.dtype not in (np.float16, np.float32):
                raise ValueError("reload_input_views: arrays must be fp16 or fp32")
            arr[i].input = index
            arr[i].data = ffi.cast("char *", a.__array_interface__["data"][0]) + offset
            arr[i].dtype = DTYPE_CODES["fp16" if a.dtype == np.float16 else "fp32"]
            arr[i].rows, arr[i].cols, arr[i].row_stride, arr[i].col_stride = rows, cols, rs, cs
        bad = ffi.new("long long *")
        rc = lib.anec_reload_input_views(self.ptr, arr, len(views), bad)
        del views  # the arrays stay referenced by the caller until here
        if rc == lib.ANEC_EWEIGHTS and bad[0] >= 0:
            return int(bad[0])
        self.rt.check(rc)
        return None

    def reload_info(self) -> dict[str, Any]:
        inf = ffi.new("anec_reload_info *")
        self.rt.check(lib.anec_program_reload_info(self.ptr, inf))
        return {"strategy": ffi.string(lib.anec_reload_strategy_name(inf.strategy)).decode(),
                "data_patchable": bool(inf.data_patchable), "verified": mask_names(int(inf.verified)),
                "why": ffi.string(inf.why).decode(errors="replace")}

    def stats(self) -> dict[str, int]:
        st = ffi.new("struct anec_stats *")
        self.rt.check(lib.anec_program_stats(self.ptr, st))
        return _stats(st)

    @property
    def closed(self) -> bool:
        """Closed here, or with its runtime."""
        return self._closed or self.rt.closed

    def close(self) -> None:
        """Release the device program (idempotent, thread-safe)."""
        if not self._closed:
            self._closed = True
            lib.anec_program_close(self.ptr)

    def release(self) -> None:
        if self.ptr is not None:
            self._closed = True
            lib.anec_program_free(self.ptr)
            self.ptr = None


LIMIT_FIELDS = ("max_blob_tensors", "scalar_penalty", "max_conv_out_channels", "min_surface_bytes",
                "allow_fp32_io", "surface_alignment")
"""The fields of the C ``anec_limits`` (the keys of ``Target.runtime_limits()`` it takes)."""


def _c_limits(limits: dict[str, Any]) -> Any:
    """An ``anec_limits`` from a manifest's ``limits``; a field it leaves out is the
    default target's (:meth:`anec.targets.Target.runtime_limits`)."""
    from anec.targets import get_target

    full = {**get_target().runtime_limits(), **limits}
    lim = ffi.new("anec_limits *")
    for name in LIMIT_FIELDS:
        setattr(lim, name, int(bool(full[name])) if name == "allow_fp32_io" else int(full[name] or 0))
    return lim


def _np_name(dt: Any) -> str:
    for name, t in NP_DTYPES.items():
        if np.dtype(t) == np.dtype(dt):
            return name
    raise RuntimeFailure(f"no runtime dtype for numpy {np.dtype(dt)}")


def process_compiles(driver: str) -> int:
    """Compiles this process made on `driver` (every runtime counts)."""
    require()
    return int(lib.anec_process_compiles(driver.encode()))


def reset_process_budget(driver: str = "sim") -> None:
    """Sim only: forget this process's compiles, as a new process would (test harnesses)."""
    require()
    if lib.anec_process_reset_budget(driver.encode()) != 0:
        raise failure(lib.ANEC_EINVAL, last_error())


PIPELINE_STATS = ("calls", "stages", "zero_copy_edges", "copied_edges", "host_inputs", "resident_inputs",
                  "ns_call", "surface_bytes", "host_in_bytes", "host_out_bytes", "surface_copy_bytes")
PIPE_RESIDENT = -2
"""The source of a stage input that is a weight of the stage's own program (anec_pipe_src)."""


class NativePipeline:
    """Owns an ``anec_pipeline*`` over stage programs (which stay the caller's)."""

    def __init__(self, rt: NativeRuntime, stages: list[tuple[NativeProgram, list[tuple[int, int]]]],
                 n_inputs: int, outputs: list[tuple[int, int]]) -> None:
        self.rt = rt
        self.stages = [p for p, _ in stages]
        keep: list[Any] = []
        arr = ffi.new("anec_pipe_stage[]", len(stages))
        for s, (prog, srcs) in enumerate(stages):
            src = ffi.new("anec_pipe_src[]", max(1, len(srcs)))
            for i, (stage, index) in enumerate(srcs):
                src[i].stage = stage
                src[i].index = index
            keep.append(src)
            arr[s].program = prog.ptr
            arr[s].inputs = src
        outs = ffi.new("anec_pipe_src[]", max(1, len(outputs)))
        for o, (stage, index) in enumerate(outputs):
            outs[o].stage = stage
            outs[o].index = index
        out = ffi.new("anec_pipeline **")
        rc = lib.anec_pipeline_create(rt.ptr, arr, len(stages), n_inputs, outs, len(outputs), out)
        del keep
        rt.check(rc)
        self.ptr = out[0]

    def call(self, inputs: list[tuple[int, np.ndarray] | None], outputs: list[np.ndarray]) -> None:
        ib, keep_in = _io_array(inputs)
        ob, keep_out = _out_array(outputs)
        rc = lib.anec_pipeline_call(self.ptr, ib, len(inputs), ob, len(outputs))
        del keep_in, keep_out
        self.rt.check(rc)

    def set_inputs(self, inputs: list[tuple[int, np.ndarray] | None], reload: bool) -> None:
        arr, keep = _io_array(inputs)
        rc = lib.anec_pipeline_set_inputs(self.ptr, arr, len(inputs), 1 if reload else 0)
        del keep
        self.rt.check(rc)

    def write_slice(self, index: int, view: tuple[int, int, int, int, int], item: tuple[int, np.ndarray]) -> None:
        """anec_write_input_slice on pipeline input ``index``: every stage surface it feeds."""
        sl, io, keep = _slice_args(view, item)
        rc = lib.anec_write_input_slice(ffi.NULL, self.ptr, index, sl, io)
        del keep
        self.rt.check(rc)

    def set_stage_inputs(self, per_stage: list[list[tuple[int, np.ndarray] | None] | None], reload: bool) -> None:
        """Resident inputs of several stages (binding order; None: the stage unchanged), written
        under the pipeline's lock."""
        arrays = ffi.new("anec_io *[]", max(1, len(per_stage)))
        counts = ffi.new("size_t[]", max(1, len(per_stage)))
        keep: list[Any] = []
        for s, items in enumerate(per_stage):
            if items:
                arr, k = _io_array(items)
                keep += [arr, k]
                arrays[s] = arr
                counts[s] = len(items)
        rc = lib.anec_pipeline_set_stage_inputs(self.ptr, arrays, counts, 1 if reload else 0)
        del keep
        self.rt.check(rc)

    def reload(self, per_stage: list[dict[str, bytes]]) -> None:
        arrays = ffi.new("anec_blob *[]", max(1, len(per_stage)))
        counts = ffi.new("size_t[]", max(1, len(per_stage)))
        keep: list[Any] = []
        for s, blobs in enumerate(per_stage):
            arr, k = _blob_array(blobs)
            keep += [arr, k]
            arrays[s] = arr
            counts[s] = len(blobs)
        rc = lib.anec_pipeline_reload(self.ptr, arrays, counts)
        del keep
        self.rt.check(rc)

    def stats(self) -> dict[str, int]:
        st = ffi.new("struct anec_pipeline_stats *")
        self.rt.check(lib.anec_pipeline_stats(self.ptr, st))
        return {k: int(getattr(st, k)) for k in PIPELINE_STATS}

    def release(self) -> None:
        if self.ptr is not None:
            lib.anec_pipeline_free(self.ptr)
            self.ptr = None
