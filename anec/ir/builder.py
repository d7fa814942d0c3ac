"""Programmatic construction of IR graphs, with type inference.

Model frontends and tests build graphs with a :class:`Builder` instead of
writing text. Each op's result type comes from :func:`anec.ir.ops.infer_types`,
so a built graph is valid by construction, and an invalid op raises a
:class:`~anec.diagnostics.VerifyError` at the line that built it. A graph built
with the same names is structurally equal (``==``) to the parsed text::

    b = Builder("mlp")
    x = b.input("x", "fp32", [1, 768, 1, 64])
    xh = b.cast(x, dtype="fp16", name="xh")
    w = b.const_weight("h.0.mlp.c_fc.weight", "fp16[3072, 768, 1, 1]", name="w1")
    h = b.conv1x1(xh, w, name="h")
    b.ret(h)
    graph = b.graph

Attributes are stored exactly as given (defaults are not filled in, as in
parsed text); dtype attributes given as strings become :class:`DType`, tuples
become lists and numpy scalars become python numbers.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from anec.diagnostics import VerifyError
from anec.ir.graph import Graph, Module, WeightSource
from anec.ir.nodes import Value
from anec.ir.ops import OPS, InferError, get_op, infer_types
from anec.ir.types import DType, TensorType, parse_dtype

_NAME = re.compile(r"[A-Za-z0-9_]+\Z")
_TYPE = re.compile(r"\s*([A-Za-z0-9_]+)\s*(?:\[\s*([0-9,\s]*)\])?\s*\Z")


def as_type(dtype_or_type: Any, shape: Sequence[int] | None = None) -> TensorType:
    """A TensorType from a TensorType, ``"fp16[1, 2]"``, or a dtype plus ``shape``."""
    if isinstance(dtype_or_type, TensorType):
        if shape is not None:
            raise VerifyError("give either a TensorType or a dtype and a shape, not both")
        return dtype_or_type
    if isinstance(dtype_or_type, str) and shape is None:
        m = _TYPE.match(dtype_or_type)
        dt = parse_dtype(m.group(1)) if m else None
        if m is None or dt is None:
            raise VerifyError(
                f"'{dtype_or_type}' is not a tensor type",
                hint="write it as in the IR, e.g. fp16[1, 768, 1, 64] (fp16 or fp16[] for a scalar)",
            )
        dims = [d for d in (m.group(2) or "").replace(",", " ").split()]
        return TensorType(dt, tuple(int(d) for d in dims))
    dt = dtype_or_type if isinstance(dtype_or_type, DType) else parse_dtype(str(dtype_or_type))
    if dt is None:
        raise VerifyError(f"unknown dtype '{dtype_or_type}'", hint="dtypes: fp16, fp32, int32, bool, int8, uint8")
    if shape is None:
        raise VerifyError(f"a shape is needed with dtype {dt}")
    return TensorType(dt, tuple(int(d) for d in shape))


def _norm_literal(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return _norm_literal(v.tolist())
    if isinstance(v, (list, tuple)):
        return [_norm_literal(x) for x in v]
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


class Builder:
    """Appends nodes to a :class:`Graph` (a new one when given a name)."""

    def __init__(self, graph_or_name: Graph | str = "main") -> None:
        self.graph = graph_or_name if isinstance(graph_or_name, Graph) else Graph(graph_or_name)
        self._known = {id(v) for v in self.graph.values()}

    # ---- values ----------------------------------------------------------
    def input(self, name: str, dtype_or_type: Any, shape: Sequence[int] | None = None) -> Value:
        """Add a func input ``%name``."""
        self._check_new_name(name)
        v = self.graph.add_input(name, as_type(dtype_or_type, shape))
        self._known.add(id(v))
        return v

    def const_weight(self, key: str, type: Any, name: str | None = None, **attrs: Any) -> Value:
        """``%name = const(weight="key", perm=..., slice=...) : type``."""
        v: Value = self._emit("const", [], {}, {"weight": key, **attrs}, [name] if name else None,
                              declared=as_type(type), hint=_key_hint(key))
        return v

    def const_value(self, value: Any, type: Any, name: str | None = None) -> Value:
        """``%name = const(value=literal) : type``."""
        v: Value = self._emit("const", [], {}, {"value": value}, [name] if name else None,
                              declared=as_type(type), hint="c")
        return v

    def op(self, opname: str, *operands: Value, name: str | None = None,
           names: Sequence[str] | None = None, **kw: Any) -> Value | tuple[Value, ...]:
        """Apply ``opname``; keyword Values are optional operands, the rest attributes.

        Returns the result Value, or a tuple for multi-result ops (``split``).
        ``name`` names a single result, ``names`` every result.
        """
        try:
            opdef = get_op(opname)
        except InferError as e:
            raise VerifyError(e.message, hint=e.hint) from None
        if name is not None and names is not None:
            raise VerifyError("give name= or names=, not both")
        declared = None
        if opdef.declared_type:
            if "type" not in kw:
                raise VerifyError("const needs type=", hint="or use const_weight / const_value")
            declared = as_type(kw.pop("type"))
        optional_names = {o.name for o in opdef.optional_operands}
        optional: dict[str, Value] = {}
        attrs: dict[str, Any] = {}
        for k, v in kw.items():
            if isinstance(v, Value):
                optional[k] = v
            elif v is None and k in optional_names:
                continue
            else:
                adef = opdef.attr_index.get(k)
                if adef is not None and adef.kind == "dtype" and isinstance(v, str) and parse_dtype(v):
                    v = DType(v)
                attrs[k] = _norm_literal(v)
        wanted = list(names) if names is not None else ([name] if name is not None else None)
        results = self._emit(opname, list(operands), optional, attrs, wanted, declared=declared,
                             hint=opname, many=True)
        return results[0] if len(results) == 1 else tuple(results)

    def __getattr__(self, opname: str) -> Callable[..., Value | tuple[Value, ...]]:
        """``b.add(x, y)`` is ``b.op("add", x, y)``."""
        if opname in OPS and opname != "const":
            return functools.partial(self.op, opname)
        if opname.startswith("_"):
            raise AttributeError(opname)
        from anec.diagnostics import did_you_mean

        hint = did_you_mean(opname, OPS)
        raise AttributeError(f"Builder has no op '{opname}'" + (f"; {hint}" if hint else ""))

    def ret(self, *values: Value) -> Graph:
        """``return %a, %b``: set the outputs (order = program interface order)."""
        seen: set[str] = set()
        for v in values:
            self._check_value(v)
            if v.name in seen:
                raise VerifyError(f"value %{v.name} is returned twice", hint="return it once, or add an identity")
            seen.add(v.name)
        self.graph.set_outputs(values)
        return self.graph

    @staticmethod
    def module(*graphs: "Graph | Builder", weights: Iterable[str] = (), path: str | None = None) -> Module:
        """A Module holding ``graphs`` (in order) and ``weights "..."`` directives."""
        m = Module(path=path)
        for w in weights:
            m.weight_sources.append(WeightSource(str(w)))
        for g in graphs:
            g = g.graph if isinstance(g, Builder) else g
            if g.name in m.funcs:
                raise VerifyError(f"func '{g.name}' is defined twice")
            m.add_func(g)
        return m

    # ---- internals -------------------------------------------------------
    def _check_new_name(self, name: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise VerifyError(f"invalid value name '{name}'", hint="names use letters, digits and _")
        if self.graph.has_value_name(name):
            raise VerifyError(f"value %{name} is already defined", hint="pick another name")

    def _check_value(self, v: Any) -> None:
        if not isinstance(v, Value):
            raise VerifyError(f"expected a Value, got {type(v).__name__}")
        if id(v) not in self._known:
            raise VerifyError(f"value %{v.name} does not belong to func '{self.graph.name}'")

    def _emit(self, opname: str, operands: list[Value], optional: dict[str, Value], attrs: dict[str, Any],
              names: list[str] | None, *, declared: TensorType | None, hint: str,
              many: bool = False) -> Any:
        for v in [*operands, *optional.values()]:
            self._check_value(v)
        attrs = {k: _norm_literal(v) for k, v in attrs.items()}
        try:
            types = infer_types(opname, [v.type for v in operands], {k: v.type for k, v in optional.items()},
                                attrs, declared=declared)
        except InferError as e:
            raise VerifyError(e.message, hint=e.hint) from None
        if names is not None:
            if len(names) != len(types):
                raise VerifyError(f"{opname} has {len(types)} results but {len(names)} names were given")
            for i, n in enumerate(names):
                self._check_new_name(n)
                if n in names[:i]:
                    raise VerifyError(f"value %{n} is already defined", hint="pick another name")
        else:
            names = []
            for _ in types:
                names.append(self.graph.fresh_name(hint, exclude=names))
        node = self.graph.create_node(opname, operands, attrs, types, names=names, optional=optional)
        for r in node.results:
            self._known.add(id(r))
        return node.results if many else node.results[0]


def _key_hint(key: str) -> str:
    """A readable default value name for a weight key (``h.0.ln_1.weight`` -> ``h_0_ln_1_weight``)."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_") or "w"
    return name
