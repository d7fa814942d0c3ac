"""The reference interpreter: the numerical oracle for every other backend.

``interpret(graph, inputs, weights, mode)`` runs a func node by node with the
numpy reference semantics of the op table. Two modes:

``"fp32"`` (mathematical reference)
    Float values are held and computed in float32 whatever their IR dtype
    (reductions, matmul and conv accumulate in float64). Only the places where
    the *program* says fp16 round to fp16: inputs declared fp16, const values
    declared fp16 (weights are stored as fp16), and ``cast(..., dtype=fp16)``.
    Float outputs are returned as float32, unrounded.

``"fp16"`` (fp16-faithful)
    Every value whose IR dtype is fp16 is rounded to fp16 after the op that
    produces it, as the device stores it; each op computes in fp32 from the
    stored fp16 values. Outputs are returned in their IR dtype.

The difference between the two modes is the error the device's fp16 storage
adds; comparing a backend against ``"fp16"`` checks it bit-closely, against
``"fp32"`` checks it against the intended math.

Integer and bool values are exact in both modes. Overflow to inf and NaN are
results, not errors (legalize reports fp16 range problems).

An operand a conv or matmul reads through int8 (an ``int8_<operand>`` annotation, the
quantize-activations pass, :mod:`anec.ir.act_quant`) is quantized and dequantized on its
way in, in both modes: like a cast, the int8 round trip is the program's meaning.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import numpy as np

from anec.diagnostics import AnecError
from anec.ir.act_quant import fake_quant, has_quantized, quantized_operands
from anec.ir.graph import Graph, Module
from anec.ir.nodes import Value
from anec.ir.ops import get_op, with_defaults
from anec.ir.types import DType, TensorType

MODES = ("fp32", "fp16")


def _storage_dtype(t: TensorType, mode: str) -> np.dtype:
    if t.dtype.is_float and mode == "fp32":
        return np.dtype(np.float32)
    return t.dtype.np


def _store(arr: np.ndarray, t: TensorType, mode: str) -> np.ndarray:
    """Round a computed result to how the value is held in ``mode``."""
    arr = np.asarray(arr)
    if tuple(arr.shape) != t.shape:
        raise AssertionError(f"op produced shape {list(arr.shape)} for {t}")
    return arr.astype(_storage_dtype(t, mode), copy=False)


def _compute(arr: np.ndarray) -> np.ndarray:
    """Float inputs of an op are computed in float32."""
    return arr.astype(np.float32) if arr.dtype == np.float16 else arr


def _convert_input(v: Value, arr: Any, mode: str) -> np.ndarray:
    t = v.type
    try:
        a = np.asarray(arr)
    except Exception as e:  # arbitrary user objects
        raise AnecError(f"input '{v.name}' is not an array: {e}", v.span) from None
    if tuple(a.shape) != t.shape:
        raise AnecError(
            f"input '{v.name}' has shape {list(a.shape)} but the func declares {t}",
            v.span,
            hint="reshape the array to the declared shape",
        )
    kind = a.dtype.kind
    if t.dtype.is_float:
        ok = kind in "fiu"
    elif t.dtype == DType.bool:
        ok = kind == "b"
    else:
        ok = kind in "iu" or kind == "b"
        if ok and a.size:
            info = np.iinfo(t.dtype.np)
            ok = int(a.min()) >= info.min and int(a.max()) <= info.max
    if not ok:
        raise AnecError(
            f"input '{v.name}' has dtype {a.dtype} which does not convert to {t.dtype}",
            v.span,
            hint=f"pass an array convertible to {t.dtype} without loss of kind or range",
        )
    with np.errstate(over="ignore"):
        exact = a.astype(t.dtype.np)  # declared fp16 inputs round to fp16 in both modes
    return exact.astype(_storage_dtype(t, mode), copy=False)


def interpret(
    graph: Graph,
    inputs: Mapping[str, Any],
    weights: Mapping[str, np.ndarray] | None = None,
    mode: str = "fp32",
    observe: "Callable[[Any, list[np.ndarray]], None] | None" = None,
) -> dict[str, np.ndarray]:
    """Run ``graph``; returns ``{output name: array}`` in output order.

    ``weights`` is a WeightStore (or any key -> array mapping) for weight consts.
    ``observe(node, results)`` is called after every non-const node (range analysis).
    """
    from anec.ir.weight_binding import materialize

    if mode not in MODES:
        raise AnecError(f"unknown interpreter mode '{mode}'", hint="use fp32 or fp16")
    declared = {v.name for v in graph.inputs}
    for name in inputs:
        if name not in declared:
            from anec.diagnostics import did_you_mean

            raise AnecError(
                f"func '{graph.name}' has no input '{name}'",
                graph.span,
                hint=did_you_mean(name, declared) or f"inputs: {', '.join(v.name for v in graph.inputs)}",
            )
    env: dict[int, np.ndarray] = {}
    for v in graph.inputs:
        if v.name not in inputs:
            raise AnecError(
                f"missing input '{v.name}' ({v.type}) for func '{graph.name}'",
                v.span,
                hint=f"give it with --input {v.name}=PATH.npy, or use --random-inputs SEED",
            )
        env[id(v)] = _convert_input(v, inputs[v.name], mode)

    with np.errstate(all="ignore"):
        for node in graph.nodes:
            if node.op == "const":
                val = materialize(node, weights)
                env[id(node.result)] = _store(val, node.result.type, mode)
                continue
            opdef = get_op(node.op)
            args = [_compute(env[id(v)]) for v in node.operands]
            if has_quantized(node):
                for i, scale in quantized_operands(node).items():
                    args[i] = _compute(fake_quant(args[i], scale))
            opt = {k: _compute(env[id(v)]) for k, v in node.optional.items()}
            outs = opdef.ref(args, opt, with_defaults(node.op, node.attrs))
            if node.op == "cast":
                # the cast's target dtype is the program's meaning: round even in fp32 mode
                outs = [np.asarray(outs[0]).astype(node.result.type.dtype.np)]
            for r, arr in zip(node.results, outs):
                env[id(r)] = _store(arr, r.type, mode)
            if observe is not None:
                observe(node, [env[id(r)] for r in node.results])
    return {v.name: env[id(v)] for v in graph.outputs}


INPUT_MAX_BYTES = 1 << 32
"""Largest input array file read (4 GiB)."""


def load_input(name: str, path: str) -> np.ndarray:
    """The array in the ``.npy`` file ``path`` given for input ``name`` (AnecError otherwise)."""
    import io

    from anec.fsutil import read_regular

    if not os.path.exists(path):
        raise AnecError(f"input '{name}': no such file '{path}'")
    data = read_regular(path, INPUT_MAX_BYTES, f"input '{name}'")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError):
        # numpy reports any non-.npy file as "pickled (object) data"
        raise AnecError(
            f"input '{name}': '{path}' is not a .npy file of numbers",
            hint="save a numeric array with numpy.save(path, array)",
        ) from None
    if not isinstance(arr, np.ndarray):
        if hasattr(arr, "close"):
            arr.close()
        raise AnecError(
            f"input '{name}': '{path}' holds several arrays (.npz), not one",
            hint="give one array per input as a .npy file (numpy.save)",
        )
    return arr


def interpret_module(
    module: Module,
    func: str | None,
    inputs: Mapping[str, Any],
    weights: Mapping[str, np.ndarray] | None = None,
    mode: str = "fp32",
) -> dict[str, np.ndarray]:
    """``interpret`` on the func called ``func`` (or the only func)."""
    return interpret(select_func(module, func), inputs, weights, mode)


def select_func(module: Module, func: str | None) -> Graph:
    """The func ``func``, or the only one; AnecError naming the choices otherwise."""
    from anec.diagnostics import did_you_mean

    names = list(module.funcs)
    if func is None:
        if len(names) != 1:
            raise AnecError(
                f"the module has {len(names)} funcs; choose one",
                hint=f"pass --func with one of: {', '.join(names)}" if names else None,
            )
        return module.funcs[names[0]]
    if func not in module.funcs:
        raise AnecError(
            f"no func '{func}' in the module",
            hint=did_you_mean(func, names) or f"funcs: {', '.join(names)}",
        )
    return module.funcs[func]


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs: normal(0, 1) for floats, integers in [-8, 8] ([0, 8]
    for uint8), a fair coin for bool. Every input is drawn the same way whatever
    its name (a mask input gets noise too; pass real inputs to test masking)."""
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        t = v.type
        arr: np.ndarray
        if t.dtype.is_float:
            arr = rng.standard_normal(t.shape)
        elif t.dtype == DType.bool:
            arr = rng.integers(0, 2, size=t.shape).astype(bool)
        else:
            arr = rng.integers(0 if t.dtype == DType.uint8 else -8, 9, size=t.shape)
        out[v.name] = np.asarray(arr).astype(t.dtype.np)
    return out
