"""Running an imported model like the torch module: :class:`TorchRunner` and the host steps.

The runner compiles the imported func (or loads a compiled artifact of it,
or interprets it), and around the program applies the host steps the import
described: embedding lookups of integer inputs before it, and at the outputs
argmax, argmin, topk, sampling, reshapes and dtype conversions back to
torch's dtypes, in numpy.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from anec.diagnostics import AnecError

if TYPE_CHECKING:
    from anec.frontends.torch.imported import ImportedModel

class TorchRunner:
    """Runs an :class:`ImportedModel` like the torch module: same arrays in
    (positionally or by name), the outputs as a tuple of numpy arrays in torch's
    shapes and dtypes. Host steps (embedding lookups, argmax, sampling) run in
    numpy around the program."""

    def __init__(self, imported: ImportedModel, backend: str = "auto", target: str | None = None,
                 mode: str = "fp16", seed: int = 0, artifact: str | os.PathLike | None = None,
                 compress: Any = None, compress_gate: Any = None, compress_form: str | None = None) -> None:
        from anec.weight_store import WeightStore

        if compress is not None and (backend == "interp" or artifact is not None):
            raise AnecError("compress= applies when the runner compiles the program",
                            hint="use backend 'sim', 'ane' or 'auto' without artifact=, or compile the "
                                 "artifact with anec compile --compress")

        self.im = imported
        self.backend = backend
        self.rng = np.random.default_rng(seed)
        self.store = WeightStore(imported.weights, source=f"<{imported.name} weights>")
        self._runtime = None
        self._program = None
        self.artifact = None
        if backend == "interp":
            if mode not in ("fp32", "fp16"):
                raise AnecError(f"unknown interpreter mode '{mode}'", hint="use fp32 or fp16")
            self.mode = mode
        else:
            from anec.runtime import Runtime

            if artifact is None:
                from anec.compiler import compile_module

                result = compile_module(imported.module, weights=self.store, target=target, host_casts=True,
                                        compress=compress, compress_gate=compress_gate, compress_form=compress_form)
                self.artifact = result.artifacts[imported.name]
            else:
                self.artifact = os.fspath(artifact)
            self._runtime = Runtime(backend=backend)
            try:
                self._program = self._runtime.load(self.artifact, func=imported.name if artifact else None)
            except BaseException:
                self.close()
                raise

    def __enter__(self) -> "TorchRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        res = self.run(*args, **kwargs)
        return tuple(res[n] for n in self.im.output_names)

    def run(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Outputs by name."""
        arrays = self.bind(args, kwargs)
        feed = self.prepare(arrays)
        prog_out = self.program(feed)
        return self._finish(arrays, prog_out)

    def program(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the program alone on its inputs (after host pre-processing)."""
        if self._program is not None:
            return {k: np.asarray(v) for k, v in self._program(**feed).items()}
        from anec.ir.interp import interpret

        func = self.im.func
        if self.mode == "fp16":  # as the device computes it (range-safe norms)
            from anec.passes.manager import device_form

            func = device_form(func)
        out = interpret(func, feed, self.store, mode=self.mode)
        return {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}

    def random_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """Sample inputs in torch's shapes and dtypes: ids within their embedding table for
        the inputs of host lookups, ones for other integer inputs (masks), normal(0, 1)
        floats."""
        rng = np.random.default_rng(seed)
        rows = {h["input"]: self.store[h["weight"]].shape[0] for h in self.im.host_steps}
        out = {}
        for e in self.im.inputs:
            dt = np.dtype(e["dtype"]) if e["dtype"] in _NP_DTYPES else np.dtype(np.float32)
            if e["name"] in rows:
                out[e["name"]] = rng.integers(0, rows[e["name"]], size=e["shape"]).astype(dt)
            elif dt.kind in "iub":
                out[e["name"]] = np.ones(e["shape"], dt)
            else:
                out[e["name"]] = rng.standard_normal(e["shape"]).astype(dt)
        return out

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The model's inputs, given as to the torch module, as arrays by name (checked)."""
        names = self.im.input_names
        if len(args) > len(names):
            raise AnecError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        got = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                from anec.diagnostics import did_you_mean

                raise AnecError(f"the model has no input '{k}'", hint=did_you_mean(k, names))
            if k in got:
                raise AnecError(f"input '{k}' given twice")
            got[k] = v
        out = {}
        for e in self.im.inputs:
            if e["name"] not in got:
                raise AnecError(f"missing input '{e['name']}' ({e['dtype']}{e['shape']})")
            a = _to_numpy(got[e["name"]])
            if list(a.shape) != list(e["shape"]):
                raise AnecError(f"input '{e['name']}' has shape {list(a.shape)}, the model was "
                                f"imported with {e['shape']}",
                                hint="ANE programs have static shapes: import once per shape")
            out[e["name"]] = a
        return out

    def prepare(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The program's inputs: the bound inputs converted, and the host embedding lookups."""
        feed: dict[str, np.ndarray] = {}
        types = {v.name: v.type for v in self.im.func.inputs}
        for e in self.im.inputs:
            pin = e.get("program_input")
            if pin:
                a = arrays[e["name"]]
                if a.dtype.kind not in "fiub":
                    raise AnecError(f"input '{e['name']}' has dtype {a.dtype}")
                feed[pin] = a.astype(types[pin].dtype.np).reshape(types[pin].shape)
        for h in self.im.host_steps:
            ids = np.asarray(arrays[h["input"]])
            if ids.dtype.kind not in "iub":
                raise AnecError(f"input '{h['input']}' must hold integer ids, got {ids.dtype}")
            table = self.store[h["weight"]]
            ids = ids.astype(np.int64).reshape(h["shape"])
            if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
                raise AnecError(f"input '{h['input']}' has ids outside [0, {table.shape[0]})")
            feed[h["output"]] = np.asarray(table, dtype=np.float32)[ids].astype(types[h["output"]].dtype.np)
        return feed

    def _finish(self, arrays: Mapping[str, np.ndarray], prog: Mapping[str, np.ndarray]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for e in self.im.outputs:
            kind = e.get("kind")
            if kind == "device":
                a = prog[e["program_output"]].reshape(e["shape"])
                out[e["name"]] = _as_torch_dtype(a, e.get("dtype"))
            elif kind == "host":
                a = prog[e["source"]]
                for op in e["ops"]:
                    a = _host_op(a, op, self.rng)
                out[e["name"]] = np.asarray(a).reshape(e["shape"]) if e.get("shape") is not None else a
            elif kind == "constant":
                out[e["name"]] = np.asarray(self.store[e["key"]])
            elif kind == "input":
                out[e["name"]] = np.asarray(arrays[e["source"]]).reshape(e["shape"])
            else:
                out[e["name"]] = e.get("value")
        return out


_NP_DTYPES = ("float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    try:
        return np.asarray(x)
    except Exception as e:
        raise AnecError(f"an input is not an array: {e}") from None


def _as_torch_dtype(a: np.ndarray, dtype: str | None) -> np.ndarray:
    if dtype is None or dtype in ("float32", "float64", "bfloat16"):
        return a.astype(np.float32, copy=False)
    if dtype == "float16":
        return a.astype(np.float16)
    if dtype == "bool":
        return a > 0.5
    return np.rint(a).astype(np.dtype(dtype) if dtype in ("int64", "int32", "int16", "int8", "uint8") else np.int64)


def _host_op(a: np.ndarray, op: dict, rng: np.random.Generator) -> np.ndarray:
    kind = op["op"]
    if kind in ("argmax", "argmin"):
        fn = np.argmax if kind == "argmax" else np.argmin
        dim = op.get("dim")
        if dim is None:
            r = np.asarray(fn(a))
            return r.reshape((1,) * a.ndim) if op.get("keepdim") else r
        r = fn(a, axis=dim)
        return np.expand_dims(r, dim) if op.get("keepdim") else r
    if kind in ("topk_values", "topk_indices"):
        dim, k = op["dim"] % a.ndim, op["k"]
        key = -a if op.get("largest", True) else a
        idx = np.argsort(key, axis=dim, kind="stable")
        idx = np.take(idx, np.arange(k), axis=dim)
        return idx.astype(np.int64) if kind == "topk_indices" else np.take_along_axis(a, idx, axis=dim)
    if kind == "multinomial":
        p = np.asarray(a, dtype=np.float64)
        flat = p.reshape(-1, p.shape[-1])
        out = np.stack([rng.choice(flat.shape[1], size=op["num_samples"], p=row / row.sum())
                        for row in flat])
        return out.reshape(p.shape[:-1] + (op["num_samples"],)).astype(np.int64)
    if kind == "reshape":
        return a.reshape(op["shape"])
    if kind == "astype":
        return a.astype(np.dtype(op["dtype"]) if op["dtype"] != "bool" else bool)
    raise AnecError(f"unknown host op '{kind}' in the import description")  # pragma: no cover
