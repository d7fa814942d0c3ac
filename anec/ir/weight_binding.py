"""Weight binding: how a module's weight consts take their values from a weight store.

A weight const may view its stored tensor through ``perm`` and ``slice``
(legalize writes them when it turns a matmul into a conv or chunks a weight).
:func:`materialize` applies, in order: transpose by ``perm``, slice
``[axis, start, stop]`` (the axis refers to the transposed tensor), reshape to
the declared shape (equal element count), cast to the declared dtype (float to
float only; integer and bool dtypes must match exactly). Values outside the
fp16 range are not an error here: they become inf and legalize reports them
(constraint ANE-FP16-RANGE). :func:`check_weights` checks every const of a
module against a store up front; :func:`resolve_weights` finds the store a
module runs with (its ``weights`` directives, a file, or random weights).

Random weights make every model runnable without a checkpoint. Each key gets
its own generator seeded from ``sha256(f"{seed}:{key}")``, so a tensor does not
change when other keys are added. The rule, by the stored shape:

* a matrix-like tensor (rank >= 2 with ``shape[0] > 1``): normal with standard
  deviation ``1/sqrt(fan_in)``, ``fan_in = numel / shape[0]`` (a conv weight
  ``[Cout, Cin, 1, 1]`` gets ``1/sqrt(Cin)``), so activations keep unit scale;
* a per-channel tensor (rank <= 1, or ``shape[0] == 1`` like ``[1, C, 1, 1]``):
  normal(0, 0.02), plus 1.0 for a norm scale: a key ending in ``weight`` with a
  dotted component containing ``norm`` or starting with ``ln``
  (``h.0.ln_1.weight``, ``layers.0.ffn_norm.weight``);
* integer consts: uniform integers in [-8, 8] ([0, 8] for uint8); bool: fair coin.

Float tensors are stored as float32, as a checkpoint would hold them. The
stored tensors themselves (the store, the checkpoint readers) are
:mod:`anec.weight_store`, which imports nothing of the IR.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from anec.diagnostics import Span, WeightError, did_you_mean
from anec.ir.graph import Graph, Module
from anec.ir.nodes import Node
from anec.ir.ops import InferError, const_literal, is_weight_const
from anec.ir.types import DType, TensorType
from anec.weight_store import RANDOM_HINT, WeightStore, load_weights


# ---------------------------------------------------------------------------
# consts in a module


def weight_consts(target: Module | Graph | Iterable[Graph]) -> Iterator[tuple[Graph, Node]]:
    """Every ``const(weight=...)`` node, in func then node order."""
    if isinstance(target, Module):
        graphs: Iterable[Graph] = target.funcs.values()
    elif isinstance(target, Graph):
        graphs = [target]
    else:
        graphs = target
    for g in graphs:
        for n in g.nodes:
            if is_weight_const(n):
                yield g, n


def _stored_shape(nodes: list[Node]) -> tuple[int, ...]:
    """The stored shape implied by the consts referencing one key."""
    for n in nodes:
        if "perm" not in n.attrs and "slice" not in n.attrs:
            return n.result.type.shape
    for n in nodes:
        if "slice" in n.attrs:
            continue
        perm = n.attrs["perm"]  # a const with neither perm nor slice returned above
        if len(perm) == n.result.type.rank:
            shape = [0] * len(perm)
            for i, p in enumerate(perm):
                shape[p] = n.result.type.shape[i]
            return tuple(shape)
    key = nodes[0].attrs["weight"]
    raise WeightError(
        f"cannot tell the stored shape of weight '{key}' for random weights: every const using it is sliced",
        span=nodes[0].span,
        hint="provide a checkpoint with --weights",
    )


def _key_seed(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "little")


def _is_norm_scale(key: str) -> bool:
    parts = key.split(".")
    return key.endswith("weight") and any("norm" in p or p.startswith("ln") for p in parts)


def random_tensor(key: str, type: TensorType, seed: int) -> np.ndarray:
    """The random tensor for ``key`` with stored ``type`` (see the module doc)."""
    rng = np.random.default_rng(_key_seed(seed, key))
    shape = type.shape
    if type.dtype == DType.bool:
        return rng.integers(0, 2, size=shape).astype(bool)
    if type.dtype.is_int:
        lo = 0 if type.dtype == DType.uint8 else -8
        return rng.integers(lo, 9, size=shape).astype(type.dtype.np)
    if len(shape) >= 2 and shape[0] > 1:
        std = 1.0 / math.sqrt(max(1, math.prod(shape) // shape[0]))
        return rng.normal(0.0, std, size=shape).astype(np.float32)
    base = 1.0 if _is_norm_scale(key) else 0.0
    return (base + rng.normal(0.0, 0.02, size=shape)).astype(np.float32)


def random_weights(module_or_graphs: Module | Graph | Iterable[Graph], seed: int) -> WeightStore:
    """Random tensors for every weight key used by the consts (deterministic per seed, key)."""
    by_key: dict[str, list[Node]] = {}
    for _, n in weight_consts(module_or_graphs):
        by_key.setdefault(n.attrs["weight"], []).append(n)
    tensors = {}
    for key, nodes in by_key.items():
        ttype = TensorType(nodes[0].result.type.dtype, _stored_shape(nodes))
        tensors[key] = random_tensor(key, ttype, seed)
    return WeightStore(tensors, f"random(seed={seed})")


def resolve_weights(module: Module, weights: Any = None, random_seed: int | None = None) -> WeightStore:
    """The weights a module runs with.

    ``weights`` (a path, a WeightStore or a mapping) overrides the module's
    ``weights "..."`` directives, which resolve relative to the module's file.
    Several directives merge (a key in two files is an error). A missing file
    is an error unless ``random_seed`` is given; with it, missing files are
    skipped and every key that no file provides gets a random tensor.
    """
    stores: list[WeightStore] = []
    if weights is not None:
        if isinstance(weights, WeightStore):
            stores.append(weights)
        elif isinstance(weights, Mapping):
            stores.append(WeightStore(weights, "<weights>"))
        else:
            stores.append(load_weights(weights))
    else:
        base = Path(module.path).parent if module.path else Path(".")
        for ws in module.weight_sources:
            p = Path(ws.path)
            full = p if p.is_absolute() else base / p
            if not full.exists():
                if random_seed is not None:
                    continue
                raise WeightError(f"weight file '{full}' does not exist", span=ws.span, hint=RANDOM_HINT)
            stores.append(load_weights(full))
    store = WeightStore.merge(stores)
    if random_seed is not None:
        rnd = random_weights(module, random_seed)
        missing = {k: rnd[k] for k in rnd if k not in store}
        if missing:
            fill = WeightStore(missing, rnd.source)
            store = WeightStore.merge([store, fill]) if len(store) else fill
    return store


# ---------------------------------------------------------------------------
# materialization


def _where(name: str | None) -> str:
    return f"const %{name}" if name else "the const"


def view_shape(key: str, stored_shape: tuple[int, ...], perm: Any, slice_: Any, declared: TensorType,
               reader: str, span: Span | None = None, hint: str | None = None,
               wants: str = "is declared") -> tuple[int, ...]:
    """The shape of stored weight ``key`` after ``perm`` and ``slice`` (WeightError if it has
    no such view, or not the element count of ``declared``).

    Messages name what reads the weight (``reader``: ``const %w``, ``the
    program``) and how it wants it (``wants``: ``is declared``, ``expects``).
    """
    shape = tuple(stored_shape)
    if perm is not None:
        if len(perm) != len(shape):
            raise WeightError(
                f"weight '{key}' has rank {len(shape)} but {reader} has perm of length {len(perm)}",
                span=span,
            )
        shape = tuple(shape[p] for p in perm)
    if slice_ is not None:
        axis, start, stop = (int(v) for v in slice_)
        if not 0 <= axis < len(shape) or stop > shape[axis]:
            raise WeightError(
                f"slice {list(slice_)} of {reader} is out of bounds for weight '{key}' of shape {list(shape)}",
                span=span,
            )
        shape = shape[:axis] + (stop - start,) + shape[axis + 1 :]
    numel = math.prod(shape)
    if numel != declared.numel:
        raise WeightError(
            f"weight '{key}' has shape {list(stored_shape)} ({math.prod(stored_shape)} elements"
            + (" after perm/slice: " + str(numel) if shape != tuple(stored_shape) else "")
            + f") but {reader} {wants} {declared} ({declared.numel} elements)",
            span=span,
            hint=hint,
        )
    return shape


def view_stored(key: str, arr: np.ndarray, perm: Any, slice_: Any, declared: TensorType,
                reader: str, span: Span | None = None, hint: str | None = None,
                wants: str = "is declared") -> np.ndarray:
    """Stored weight ``arr`` as a const views it: transposed by ``perm``, sliced
    ``[axis, start, stop]`` (the axis of the transposed tensor), reshaped to the
    ``declared`` shape. The cast to the declared dtype is the caller's last step.

    The one implementation of the weight view: the compiler materializes
    consts with it, the runtime builds reloaded blobs with it.
    """
    view_shape(key, arr.shape, perm, slice_, declared, reader, span, hint, wants)
    if perm is not None:
        arr = np.transpose(arr, list(perm))
    if slice_ is not None:
        axis, start, stop = (int(v) for v in slice_)
        index = [slice(None)] * arr.ndim
        index[axis] = slice(start, stop)
        arr = arr[tuple(index)]
    return arr.reshape(declared.shape)


_MISMATCH_HINT = "the checkpoint does not match the IR; check the key and the declared shape"


def _check_view(key: str, attrs: Mapping[str, Any], declared: TensorType, stored_shape: tuple[int, ...],
                stored_dtype: np.dtype, name: str | None, span: Span | None) -> None:
    """Check that the stored tensor can be viewed as ``declared``; raise WeightError."""
    view_shape(key, stored_shape, attrs.get("perm"), attrs.get("slice"), declared, _where(name), span,
               _MISMATCH_HINT)
    kind = np.dtype(stored_dtype).kind
    if declared.dtype.is_float:
        if kind != "f":
            raise WeightError(
                f"weight '{key}' is stored as {np.dtype(stored_dtype)} but {_where(name)} is declared {declared}",
                span=span,
                hint=_int_weight_hint(np.dtype(stored_dtype)),
            )
    elif np.dtype(stored_dtype) != declared.dtype.np:
        raise WeightError(
            f"weight '{key}' is stored as {np.dtype(stored_dtype)} but {_where(name)} is declared {declared}",
            span=span,
            hint="integer and bool weights must be stored in exactly the declared dtype",
        )


def _int_weight_hint(stored: np.dtype) -> str:
    """What to do with a non-float checkpoint tensor read by a float const."""
    try:
        name = str(DType.from_np(stored))
    except ValueError:  # int64, int16, uint32...: no anec dtype
        return (f"anec has no {stored} dtype: save the tensor as float16/float32 in the "
                "checkpoint (only float to float conversion is implicit)")
    return (f"only float to float conversion is implicit: declare the const as {name}[...] "
            f"and cast it, or store the tensor as a float")


def _lookup(key: str, store: Mapping[str, np.ndarray] | None, span: Span | None) -> np.ndarray:
    if store is None or key not in store:
        source = getattr(store, "source", "the weights") if store is not None else "the weights (none given)"
        hint = did_you_mean(key, list(store)) if store else None
        raise WeightError(f"weight '{key}' is not in {source}", span=span, hint=hint or RANDOM_HINT)
    return np.asarray(store[key])


def materialize_attrs(attrs: Mapping[str, Any], declared: TensorType, store: Mapping[str, np.ndarray] | None,
                      name: str | None = None, span: Span | None = None, copy: bool = True) -> np.ndarray:
    """The value of a const with these attributes and declared type.

    With ``copy=False`` a stored tensor already in the declared dtype and
    layout is returned as a (read-only) view of the store, not copied: the
    BLOBFILE writer copies it once, from the memory-mapped checkpoint into
    the blob.
    """
    if "value" in attrs:
        try:
            return const_literal(attrs["value"], declared)
        except InferError as e:
            raise WeightError(f"{_where(name)}: {e.message}", span=span, hint=e.hint) from None
    key = attrs["weight"]
    arr = _lookup(key, store, span)
    _check_view(key, attrs, declared, arr.shape, arr.dtype, name, span)
    arr = view_stored(key, arr, attrs.get("perm"), attrs.get("slice"), declared, _where(name), span)
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(arr.astype(declared.dtype.np, copy=copy))
    if not copy:
        out = out.view()
        out.flags.writeable = False
    return out


def materialize(node: Node, store: Mapping[str, np.ndarray] | None, copy: bool = True) -> np.ndarray:
    """The value of a const node: perm -> slice -> reshape -> cast (WeightError on mismatch);
    ``copy`` as for :func:`materialize_attrs`."""
    if node.op != "const":
        raise ValueError(f"materialize expects a const node, got {node.op}")
    return materialize_attrs(node.attrs, node.result.type, store, node.result.name, node.span, copy)


def weight_errors(module: Module | Graph | Iterable[Graph],
                  store: Mapping[str, np.ndarray] | None) -> list[tuple[Node, WeightError]]:
    """Every weight const ``store`` cannot fill as declared (missing key, shape, dtype), with why."""
    errors: list[tuple[Node, WeightError]] = []
    for _, n in weight_consts(module):
        key = n.attrs["weight"]
        try:
            arr = _lookup(key, store, n.span)
            _check_view(key, n.attrs, n.result.type, arr.shape, arr.dtype, n.result.name, n.span)
        except WeightError as e:
            errors.append((n, e))
    return errors


def check_weights(module: Module | Graph | Iterable[Graph], store: Mapping[str, np.ndarray] | None) -> None:
    """Validate every weight const against ``store`` up front, without copying tensors.

    Raises one WeightError for the first problem; the others are listed as notes.
    """
    errors = [e for _, e in weight_errors(module, store)]
    if errors:
        first = errors[0]
        first.notes.extend(
            (f"{e.span.location}: {e.message}" if e.span is not None else e.message) for e in errors[1:]
        )
        raise first
