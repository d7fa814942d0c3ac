"""Type and attribute checks of the verifier, and the memo of inferred result types.

What a single value or literal must satisfy: :func:`type_problem` says why a type is invalid
(a dimension below 1, over MIL's int32, or a rank-4 device layout ``[1, C, 1, S]`` too wide:
ANE-INT32-SHAPE); :func:`literal_problem` why an attribute or annotation value has no IR
spelling; :func:`literal_key` gives plainly valid attributes a hashable key. Types and names
already found valid are remembered (:data:`GOOD_TYPES`, :data:`GOOD_TYPE_IDS`,
:data:`GOOD_NAMES`), and so are result types already inferred (:func:`remembered_types`,
shared by the verifier and the rewriter's new nodes).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from anec.ir.nodes import Value
from anec.ir.lexical import IDENT, MAX_LIST_DEPTH
from anec.ir.types import DType, TensorType, device_shape

__all__ = [
    "GOOD_NAMES", "GOOD_TYPES", "GOOD_TYPE_IDS", "INFERRED", "INFERRED_BY_ID", "INT32_SHAPE", "MAX_DIM",
    "WIDE_LAYOUT", "good_type", "literal_key", "literal_problem", "printable_str", "remembered_types",
    "type_problem",
]

MAX_DIM = 2**31 - 1
"""The largest dimension of a tensor type: MIL writes shapes and shape parameters as int32."""

INT32_SHAPE = "ANE-INT32-SHAPE"
WIDE_LAYOUT = "on the device it is laid out as"
"""How :func:`type_problem` starts when only the rank-4 device layout is too wide."""


GOOD_TYPES: set[TensorType] = set()
"""Types already found valid (a graph has few distinct types)."""

GOOD_TYPE_IDS: dict[int, TensorType] = {}
"""The TensorType objects already found valid, by ``id``: the per-node checks look a result
type up here first, a dict lookup by an int, where ``t in GOOD_TYPES`` calls the
Python-level ``TensorType.__hash__`` and ``__eq__`` (rewrites share one type object among
many nodes). The dict keeps each object alive, so its id is not reused while listed; a
TensorType is immutable, so a listed object stays valid. A miss falls back to
:data:`GOOD_TYPES` and :func:`type_problem` (:func:`good_type`)."""


def good_type(t: Any) -> bool:
    """Whether ``t`` is a valid result type, listing the object in :data:`GOOD_TYPE_IDS`."""
    if type(t) is TensorType and t in GOOD_TYPES or type_problem(t) is None:
        if len(GOOD_TYPE_IDS) < _INFERRED_MAX:
            GOOD_TYPE_IDS[id(t)] = t
        return True
    return False


INFERRED: dict[tuple[Any, ...], tuple[TensorType, ...]] = {}
"""Result types inferred for (op, operand types, optional operand types, attributes,
declared type): every node is still checked, but nodes alike share one inference. Only
successes are kept. The verifier and the rewriter's new nodes share it."""
_INFERRED_MAX = 1 << 16

INFERRED_BY_ID: dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[TensorType, ...]]] = {}
"""The answers of :data:`INFERRED` again, keyed by the ``id`` of each type object: a lookup
that calls no Python-level ``TensorType.__hash__`` (a pipeline shares a few type objects
among all its nodes; a type equal to a listed one but another object misses here and is
found in :data:`INFERRED`). Each entry holds its :data:`INFERRED` key, so the type objects
whose ids it is keyed by stay alive, and their ids are not reused while it lives."""


_TYPE_OF = attrgetter("type")


def remembered_types(
    op: str,
    operands: Sequence[Value],
    optional: Mapping[str, Value],
    attrs_key: tuple[Any, ...] | None,
    declared: TensorType | None,
    infer: Callable[[list[TensorType], dict[str, TensorType]], Sequence[TensorType]],
) -> tuple[TensorType, ...]:
    """The result types of ``op`` on these values: from the memo when a node alike was
    inferred before, else ``infer(operand types, optional operand types)``, remembered.

    ``attrs_key`` is :func:`literal_key` of the attributes; None (not plainly hashable)
    always infers. ``infer`` raises for an invalid node and nothing is remembered then.
    """
    operand_types = list(map(_TYPE_OF, operands))  # (no comprehension: one frame less per node)
    optional_types = {k: v.type for k, v in optional.items()} if optional else {}
    if attrs_key is None:
        return tuple(infer(operand_types, optional_types))
    by_id = (op, tuple(map(id, operand_types)),
             tuple([(k, id(t)) for k, t in optional_types.items()]) if optional_types else (),
             attrs_key, id(declared))
    try:
        hit = INFERRED_BY_ID.get(by_id)
        if hit is not None:
            return hit[1]
        key = (op, tuple(operand_types), tuple(optional_types.items()), attrs_key, declared)
        types = INFERRED.get(key)
    except TypeError:  # an unhashable (invalid) type: infer reports it
        return tuple(infer(operand_types, optional_types))
    if types is None:
        types = tuple(infer(operand_types, optional_types))
        if len(INFERRED) >= _INFERRED_MAX:
            INFERRED.clear()
        INFERRED[key] = types
    if len(INFERRED_BY_ID) >= _INFERRED_MAX:
        INFERRED_BY_ID.clear()
    INFERRED_BY_ID[by_id] = (key, types)
    return types


GOOD_NAMES: set[str] = set()
"""Attribute names already found to be identifiers."""

_SCALARS = (bool, np.bool_, DType, int, np.integer, str)
_SHORT_LIST = 64


def literal_key(attrs: dict[str, Any]) -> tuple[Any, ...] | None:
    """A hashable key for ``attrs`` when every name and value is plainly valid, else None.

    None sends the node down the general path (which reports the problem, or
    checks a long list such as an inline ``value=``). Values are keyed with
    their type (``1``, ``1.0`` and ``True`` are different attributes) and
    floats by ``repr`` (``-0.0`` and ``nan`` stay distinct).
    """
    key = []
    for name, v in attrs.items():
        if name not in GOOD_NAMES:
            if not isinstance(name, str) or not IDENT.match(name):
                return None
            GOOD_NAMES.add(name)
        k = _scalar_key(v)
        if k is None:
            if not isinstance(v, (list, tuple)) or len(v) > _SHORT_LIST:
                return None
            items = []
            for x in v:
                kx = _scalar_key(x)
                if kx is None:
                    return None
                items.append(kx)
            k = (type(v), tuple(items))
        key.append((name, k))
    return tuple(key)



def _scalar_key(v: Any) -> tuple[Any, ...] | None:
    t = type(v)
    if t is float or isinstance(v, np.floating):
        return (t, repr(v))
    if isinstance(v, _SCALARS):
        if t is str:
            return (t, v) if printable_str(cast(str, v)) else None
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            return (t, v) if -(10**18) < v < 10**18 else None
        return (t, v)
    return None


def type_problem(t: Any) -> str | None:
    if not isinstance(t, TensorType) or not isinstance(t.dtype, DType):
        return f"{t!r} is not a TensorType"
    if any(d < 1 for d in t.shape):
        return f"{t} has a dimension < 1"
    if any(d > MAX_DIM for d in t.shape):
        return f"a dimension is larger than {MAX_DIM} (MIL shapes are int32)"
    if t.rank != 4:
        dev = device_shape(t.shape)
        if dev[1] > MAX_DIM:
            return (f"{WIDE_LAYOUT} {list(dev)}, whose dimension {dev[1]} is larger than {MAX_DIM} "
                    "(MIL shapes and strides are int32)")
    if len(GOOD_TYPES) < _INFERRED_MAX:
        GOOD_TYPES.add(t)
    if len(GOOD_TYPE_IDS) < _INFERRED_MAX:
        GOOD_TYPE_IDS[id(t)] = t
    return None


def printable_str(s: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def literal_problem(v: Any, depth: int = 0) -> str | None:
    """Why ``v`` has no IR spelling (None when it prints and parses back)."""
    if isinstance(v, (bool, np.bool_, DType)):
        return None
    if isinstance(v, (int, np.integer)):
        return None if len(str(int(v))) < 4000 else "integer too large"
    if isinstance(v, (float, np.floating)):
        return None
    if isinstance(v, str):
        return None if printable_str(v) else "string holds lone surrogates"
    if isinstance(v, (list, tuple)):
        if depth >= MAX_LIST_DEPTH:
            return f"lists nested deeper than {MAX_LIST_DEPTH}"
        for x in v:
            p = literal_problem(x, depth + 1)
            if p:
                return p
        return None
    return f"{type(v).__name__} is not a literal"
