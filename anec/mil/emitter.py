"""IR graph -> Apple MIL text: the only code in anec that writes MIL.

:func:`emit_mil` turns one legalized func into the text the ANE's in-memory
compiler accepts, plus the *weight plan*: which BLOBFILE and offset each weight
const refers to. It never looks at weight values, so the same IR always gives
byte-identical MIL (the runtime keys compiled programs by MIL text, and delta
reload relies on new weights leaving the text unchanged). Building the blob
bytes from a :class:`~anec.weight_store.WeightStore` is a separate step
(:mod:`anec.mil.artifact`).

The text form (docs/mil.md has the full contract)::

    program(1.3)
    [buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, ...})]
    {
        func main<ios18>(tensor<fp32, [1, 768, 1, 64]> x) {
            string xh_dtype = const()[name = string("xh_dtype"), val = string("fp16")];
            tensor<fp16, [1, 768, 1, 64]> xh = cast(dtype = xh_dtype, x = x)[name = string("xh")];
            ...
        } -> (y);
    }

Rules the device imposes and this module enforces. The text uses only what the
projects that run on the device (maderix/ANE, Orion) feed the ANE compiler:

* every non-tensor parameter is a named const ``<node>_<param>`` (the ANE
  rejects inline literals for some of them, e.g. matmul's transpose flags);
* keyword arguments are sorted, one statement per line, 4-space indents;
* float literals are the shortest ``%g``-style decimals that read back to the
  exact fp16/fp32 value along every parse path (:func:`float_literal`);
* func input and output names are the IR names, unchanged: the device binds
  I/O surfaces in alphabetical order of these names;
* func inputs and outputs are rank-4 tensors, and every op has one result;
* an operand a conv or matmul reads through int8 (an ``int8_<operand>`` annotation of
  the quantize-activations pass, :mod:`anec.ir.act_quant`) is written as coremltools
  prints the iOS17 ops, once per tensor and scale, before its first reader:
  ``quantize(input, output_dtype = "int8", scale: fp16)`` to an int8 tensor, then
  ``dequantize(input, scale: fp16)``; the reader takes the dequantized tensor;
* each op is written as its op-table row's lowering says
  (:class:`~anec.ir.ops.Mil`: the MIL op, argument names, parameters); what
  the table marks not on the ANE (:class:`~anec.ir.ops.NotOnAne`: gelu,
  rsqrt, concat, neg, split, conv bias) and I/O of another rank are never
  written: they are a :class:`~anec.diagnostics.ConstraintError` pointing at
  legalize.

The dialect (``target.mil_dialect``: ``ios18`` on every target, ``ios16`` when
asked for with ``--dialect``) only changes spellings: ``ios18`` writes
``program(1.3)`` and short scalars (``string("x")``), ``ios16`` writes
``program(1.0)``, ``<ios16>`` and verbose scalars (``tensor<string, []>("x")``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from anec.diagnostics import ConstraintError, PassError
from anec.ir.act_quant import has_quantized, quantized_operands
from anec.ir.graph import Graph
from anec.ir.nodes import Node, Value
from anec.ir.ops import MilScalar, NotOnAne, const_literal, get_op, with_defaults
from anec.ir.types import DType, TensorType
from anec.mil import blobfile
from anec.mil.float_literals import float_literal

if TYPE_CHECKING:
    from anec.targets import Target

__all__ = [
    "DIALECTS",
    "Dialect",
    "MilProgram",
    "WeightSlot",
    "emit_mil",
    "is_mil_identifier",
]

INDENT = "    "
WEIGHTS_DIR = "weights"
MODEL_PATH = "@model_path"
PACKED_FILE = "weight.bin"


def claim_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ...: the first not in ``taken`` (added to it)."""
    name, i = base, 1
    while name in taken:
        name = f"{base}_{i}"
        i += 1
    taken.add(name)
    return name


@dataclass(frozen=True)
class Dialect:
    """Spelling differences between MIL text versions."""

    name: str
    program_version: str
    opset: str
    build_info: str
    verbose_scalars: bool
    """Scalars as rank-0 tensors: ``tensor<string, []>("x")`` instead of ``string("x")``."""
    blob_dtypes: frozenset[DType]
    """Dtypes a BLOBFILE const may have in this opset."""


DIALECTS: dict[str, Dialect] = {
    "ios18": Dialect(
        "ios18",
        "1.3",
        "ios18",
        '[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
        '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
        '{"coremltools-version", "9.0"}})]',
        False,
        frozenset({DType.fp16, DType.fp32, DType.int8, DType.uint8, DType.int32}),
    ),
    "ios16": Dialect(
        "ios16",
        "1.0",
        "ios16",
        '[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]',
        True,
        frozenset({DType.fp16, DType.fp32, DType.int8, DType.uint8}),
    ),
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED = frozenset(
    {"program", "func", "tensor", "string", "bool", "dict", "list", "tuple", "const", "BLOBFILE",
     "true", "false", "inf", "nan", "fp16", "fp32", "fp64", "bf16",
     "int4", "int8", "int16", "int32", "int64",
     "uint1", "uint2", "uint3", "uint4", "uint6", "uint8", "uint16", "uint32", "uint64"}
)
"""Words that are MIL syntax (type names, literals, keywords): never used as names."""

_LEGALIZE_HINT = "run the legalize pass (part of the default pipeline), which rewrites it"


def is_mil_identifier(name: str) -> bool:
    """True if ``name`` can be a MIL variable name as written."""
    return bool(_IDENT.match(name)) and name not in RESERVED


@dataclass
class WeightSlot:
    """Where one weight const lives in the artifact (decided before any value exists)."""

    node: Node
    """The IR const node (materialized later from the WeightStore)."""
    const: str
    """MIL name of the const."""
    key: str
    """Checkpoint key."""
    file: str
    """Path relative to the artifact dir, e.g. ``weights/w1.bin``."""
    offset: int
    """Metadata offset of the blob in ``file``."""
    type: TensorType
    """Declared type: the stored dtype and shape."""
    perm: list[int] | None
    slice: list[int] | None
    part: dict | None = None
    """For one BLOBFILE of a compressed weight: ``{"of": weight const, "role": "q" | "scale" |
    "zero_point" | "indices" | "lut" | "values" | "mask", "format", "axis", "shape": the dense
    shape, "packed": ios16 LUT indices or sparse mask as packed bytes}`` (docs/compression.md); None otherwise."""
    storage: str | None = None
    """The BLOBFILE dtype when it is not ``type.dtype`` (sub-byte: ``uint4``, ...)."""
    decision: Any = field(default=None, repr=False, compare=False)
    """The :class:`anec.compress.Decision` a part belongs to."""

    @property
    def dtype_name(self) -> str:
        """The BLOBFILE dtype as the manifest writes it (``fp16``, ``int8``, ``uint4``, ...)."""
        return self.storage or self.type.dtype.value

    @property
    def payload_bytes(self) -> int:
        return blobfile.payload_bytes(self.dtype_name, self.type.numel)

    @property
    def path(self) -> str:
        """The path as written in MIL: ``@model_path/weights/w1.bin``."""
        return f"{MODEL_PATH}/{self.file}"


@dataclass
class MilProgram:
    """The result of emission: MIL text plus the weight plan."""

    text: str
    weights: list[WeightSlot]
    names: dict[str, str] = field(default_factory=dict)
    """IR value name -> MIL name (differs only for renamed internal values)."""
    dialect: str = "ios18"
    uncompressed: dict = field(default_factory=dict)
    """Weight const MIL name -> the compression decision that kept it fp16 (the gate, or the
    format's rules, refused every format of its chain)."""


# ---------------------------------------------------------------------------
# literals and types


class _Spell:
    """Types and literals in one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.verbose = dialect.verbose_scalars

    def scalar_type(self, dtype: str) -> str:
        return f"tensor<{dtype}, []>" if self.verbose else dtype

    def type(self, t: TensorType) -> str:
        if t.rank == 0:
            return self.scalar_type(str(t.dtype))
        return f"tensor<{t.dtype}, [{', '.join(str(d) for d in t.shape)}]>"

    def scalar(self, dtype: str, text: str) -> str:
        return f"{self.scalar_type(dtype)}({text})"

    def string(self, s: str) -> str:
        return self.scalar("string", '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"')

    def element(self, dtype: DType, v: Any) -> str:
        if dtype.is_float:
            return float_literal(v, dtype)
        if dtype == DType.bool:
            return "true" if v else "false"
        return str(int(v))

    def value(self, t: TensorType, arr: np.ndarray) -> str:
        """A typed literal of ``arr`` (shape ``t.shape``)."""
        if t.rank == 0:
            return self.scalar(str(t.dtype), self.element(t.dtype, arr.reshape(()).item()))
        flat = ", ".join(self.element(t.dtype, v) for v in arr.reshape(-1).tolist())
        return f"{self.type(t)}([{flat}])"


# ---------------------------------------------------------------------------
# the emitter


def _ints(values: Sequence[int]) -> tuple[TensorType, np.ndarray]:
    arr = np.asarray(list(values), dtype=np.int32).reshape(-1)
    return TensorType(DType.int32, (arr.size,)), arr


def _scalar(dtype: DType, v: Any) -> tuple[TensorType, np.ndarray]:
    return TensorType(dtype, ()), np.asarray(v, dtype=dtype.np)


class _Emitter:
    def __init__(self, graph: Graph, target: "Target", pack_weights: bool,
                 compression: "Mapping[str, Any] | None" = None) -> None:
        self.graph = graph
        self.compression = compression or {}
        self.target = target
        self.pack = pack_weights
        try:
            self.dialect = DIALECTS[target.mil_dialect]
        except KeyError:
            raise ConstraintError(
                f"target {target.name} asks for MIL dialect '{target.mil_dialect}', which anec does not write",
                hint=f"known dialects: {', '.join(DIALECTS)}",
                constraint="ANE-MIL-DIALECT",
            ) from None
        self.sp = _Spell(self.dialect)
        self.names: dict[int, str] = {}  # id(Value) -> MIL name
        self.taken: set[str] = set()
        self.lines: list[str] = []
        self.weights: list[WeightSlot] = []
        self.files_taken: set[str] = set()
        self.file_end: dict[str, int] = {}
        self.uncompressed: dict[str, Any] = {}
        self.int8: dict[tuple[int, float], str] = {}  # (id(Value), scale) -> its dequantized MIL name

    # ---- names ----------------------------------------------------------
    def _claim(self, base: str) -> str:
        return claim_name(base, self.taken)

    def _assign_names(self) -> None:
        g = self.graph
        seen_out: set[int] = set()
        for v in g.outputs:
            if id(v) in seen_out:
                raise ConstraintError(
                    f"value %{v.name} is returned twice from func '{g.name}'",
                    span=g.return_span,
                    hint="return it once, or return an identity copy under another name",
                    constraint="ANE-IO-ORDER",
                )
            seen_out.add(id(v))
            if v.producer is None:
                raise ConstraintError(
                    f"func '{g.name}' returns its input %{v.name}; the ANE only returns values the program computes",
                    span=g.return_span,
                    hint=f"return an identity copy: %{v.name}_out = identity(%{v.name})",
                    constraint="ANE-LIVE-OUTPUTS",
                )
        for v in [*g.inputs, *g.outputs]:
            if not is_mil_identifier(v.name):
                why = "is a MIL keyword" if v.name in RESERVED else "is not a valid MIL identifier"
                raise ConstraintError(
                    f"{'input' if v.producer is None else 'output'} name '{v.name}' of func '{g.name}' {why}",
                    span=v.span or (v.producer.span if v.producer is not None else None) or g.return_span or g.span,
                    hint="I/O names are kept exactly (the device binds I/O by name); rename it to "
                    "start with a letter or _, e.g. %" + _sanitize(v.name),
                    constraint="ANE-IO-ORDER",
                )
            self.names[id(v)] = v.name
            self.taken.add(v.name)
        # valid names are kept as written; only invalid ones are renamed, around them
        internal = [r for n in g.nodes for r in n.results if id(r) not in self.names]
        for r in internal:
            if is_mil_identifier(r.name):
                self.names[id(r)] = r.name
                self.taken.add(r.name)
        for r in internal:
            if id(r) not in self.names:
                self.names[id(r)] = self._claim(_sanitize(r.name))

    def name(self, v: Value) -> str:
        return self.names[id(v)]

    # ---- statements -----------------------------------------------------
    def _stmt(self, results: str, op: str, args: dict[str, str], opname: str) -> None:
        body = ", ".join(f"{k} = {args[k]}" for k in sorted(args))
        self.lines.append(f"{INDENT * 2}{results} = {op}({body})[name = {self.sp.string(opname)}];")

    def _const(self, name: str, type_text: str, val: str) -> None:
        self.lines.append(
            f"{INDENT * 2}{type_text} {name} = const()[name = {self.sp.string(name)}, val = {val}];"
        )

    # ---- per op -----------------------------------------------------------
    def emit_node(self, n: Node) -> None:
        """One IR node as MIL, as its op row's lowering says (:class:`~anec.ir.ops.Mil`)."""
        low = get_op(n.op).lowering
        if isinstance(low, NotOnAne) and low.kept_on(self.target):
            low = low.native  # a contested rejection this target's reading keeps (ANE-CONCAT)
        if isinstance(low, NotOnAne):
            raise ConstraintError(f"{low.why}; it must not reach MIL emission", span=n.span,
                                  hint=f"{_LEGALIZE_HINT} into {low.becomes}", constraint=low.constraint)
        if low is None:
            raise PassError(f"emit-mil: no MIL translation for op '{n.op}'", span=n.span)
        for key in n.optional:
            rej = low.rejected.get(key)
            if rej is not None:
                raise ConstraintError(f"{rej.why}; it must not reach MIL emission", span=n.span,
                                      hint=f"{_LEGALIZE_HINT} into {rej.becomes}", constraint=rej.constraint)
        attrs = with_defaults(n.op, n.attrs)
        if n.op == "const":
            self.op_const(n, attrs)
            return
        if len(n.results) != 1:
            raise PassError(f"emit-mil: '{n.op}' has several results, which no MIL op the ANE runs has",
                            span=n.span)
        r = n.result
        nn = self.name(r)
        through = {i: self._int8(n.operands[i], scale, n)  # before the op's own params
                   for i, scale in (quantized_operands(n) if has_quantized(n) else {}).items()}
        params = low.params([v.type for v in n.operands], [r.type], attrs)
        args = {p: self._param(nn, p, params[p], n) for p in sorted(params)}
        positional = get_op(n.op).positional
        if any(o.variadic for o in positional):  # one variadic operand: a MIL tuple (concat's values)
            args[low.arg(positional[0].name)] = "(" + ", ".join(self.name(v) for v in n.operands) + ")"
        else:
            for i, (operand, v) in enumerate(zip((o.name for o in positional), n.operands)):
                args[low.arg(operand)] = through.get(i) or self.name(v)
        for operand, v in n.optional.items():
            args[low.arg(operand)] = self.name(v)
        self._stmt(f"{self.sp.type(r.type)} {nn}", low.op, args, nn)

    def _int8(self, v: Value, scale: float, n: Node) -> str:
        """``v`` through int8: its quantize and dequantize (written once per scale); the
        dequantized tensor's MIL name."""
        key = (id(v), scale)
        if key in self.int8:
            return self.int8[key]
        if self.dialect.name == "ios16":
            raise ConstraintError(f"{n.op} reads %{v.name} through int8, and the ios16 dialect has no "
                                  "quantize/dequantize (iOS17 ops)", span=n.span,
                                  hint="write ios18 (the default dialect), or compile without --activations",
                                  constraint="ANE-INT8-ACTIVATIONS")
        src = self.name(v)
        q, dq = self._claim(f"{src}_q"), self._claim(f"{src}_dq")
        qargs = {"input": src, "output_dtype": self._param(q, "output_dtype", "int8", n),
                 "scale": self._param(q, "scale", MilScalar(DType.fp16, scale), n)}
        self._stmt(f"{self.sp.type(v.type.with_dtype(DType.int8))} {q}", "quantize", qargs, q)
        dqargs = {"input": q, "scale": self._param(dq, "scale", MilScalar(DType.fp16, scale), n)}
        self._stmt(f"{self.sp.type(v.type)} {dq}", "dequantize", dqargs, dq)
        self.int8[key] = dq
        return dq

    def _param(self, node_name: str, param: str, value: Any, n: Node) -> str:
        """The named const ``<node>_<param>`` holding one non-tensor parameter."""
        name = self._claim(f"{node_name}_{param}")
        if isinstance(value, (str, DType)):
            self._const(name, self.sp.scalar_type("string"), self.sp.string(str(value)))
            return name
        if isinstance(value, MilScalar):
            t, arr = _scalar(value.dtype, value.value)
        elif isinstance(value, (bool, np.bool_)):
            t, arr = _scalar(DType.bool, bool(value))
        elif isinstance(value, (int, np.integer)):
            t, arr = _scalar(DType.int32, int(value))
        elif isinstance(value, (list, tuple)):
            t, arr = _ints(value)
        else:
            raise PassError(f"emit-mil: parameter '{param}' of '{n.op}' is {value!r}, which has no MIL "
                            "const type (give it as a MilScalar)", span=n.span)
        self._const(name, self.sp.type(t), self.sp.value(t, arr))
        return name

    # const
    def op_const(self, n: Node, a: dict) -> None:
        r = n.result
        name, t = self.name(r), r.type
        if "value" in a:
            self._const(name, self.sp.type(t), self.sp.value(t, const_literal(a["value"], t)))
            return
        decision = self.compression.get(r.name)
        if decision is not None and decision.fmt.kind != "none":
            self.op_compressed(n, a, decision)
            return
        if decision is not None:
            self.uncompressed[name] = decision
        if t.dtype not in self.dialect.blob_dtypes:
            allowed = ", ".join(sorted(d.value for d in self.dialect.blob_dtypes))
            raise ConstraintError(
                f"weight const %{r.name} has dtype {t.dtype}, which a BLOBFILE cannot hold in the "
                f"{self.dialect.name} dialect",
                span=n.span, hint=f"declare it as one of {allowed} and cast after loading",
                constraint="ANE-MIL-DIALECT",
            )
        # a BLOBFILE value is always a tensor type, also for rank 0
        type_text = self.sp.type(t) if t.rank else f"tensor<{t.dtype}, []>"
        self._blob_const(n, a, name, type_text, t, None, None, None)

    def _blob_const(self, n: Node, a: dict, name: str, type_text: str, t: TensorType, storage: str | None,
                    part: dict | None, decision: Any) -> None:
        """One BLOBFILE const (a weight, or one payload of a compressed weight)."""
        file = self._weight_file(name)
        offset = self.file_end.get(file, blobfile.HEADER_BYTES)
        slot = WeightSlot(n, name, a["weight"], file, offset, t, a.get("perm"), a.get("slice"), part, storage,
                          decision)
        self.file_end[file] = blobfile.next_offset(offset, slot.payload_bytes)
        self.weights.append(slot)
        val = (f"{type_text}(BLOBFILE(path = {self.sp.string(slot.path)}, "
               f"offset = {self.sp.scalar('uint64', str(offset))}))")
        self._const(name, type_text, val)

    def op_compressed(self, n: Node, a: dict, d: Any) -> None:
        """A weight const stored compressed: its payload consts and the ``constexpr_*`` op
        that decompresses them when the program is loaded (docs/compression.md)."""
        r = n.result
        name, t = self.name(r), r.type
        if t.dtype != DType.fp16:
            raise ConstraintError(f"weight const %{r.name} is {t.dtype}; compressed weights decompress to fp16",
                                  span=n.span, hint="declare it fp16, or leave it out of --compress")
        ios16 = self.dialect.name == "ios16"
        fmt, rank, axis = d.fmt, t.rank, d.axis
        c = t.shape[axis]
        args: dict[str, str] = {}
        base = {"of": name, "format": fmt.name, "axis": axis, "shape": list(t.shape)}

        def blob(role: str, arg: str, dtype: str, shape: tuple[int, ...], **extra: Any) -> None:
            pname = self._claim(f"{name}_{role}")
            storage = None if dtype in ("fp16", "int8", "uint8") else dtype
            pt = TensorType(DType(dtype) if storage is None else DType.uint8, tuple(shape))
            type_text = f"tensor<{dtype}, [{', '.join(str(x) for x in shape)}]>"
            self._blob_const(n, a, pname, type_text, pt, storage, {**base, "role": role, **extra}, d)
            args[arg] = pname

        def shape_const() -> str:  # ios16: the dense shape as a uint32 vector
            sh = self._claim(f"{name}_shape")
            dims = ", ".join(str(x) for x in t.shape)
            self._const(sh, f"tensor<uint32, [{rank}]>", f"tensor<uint32, [{rank}]>([{dims}])")
            return sh

        bshape = tuple(c if i == axis else 1 for i in range(rank))
        if fmt.kind == "linear":
            # ios16 has only constexpr_affine_dequantize; in ios18 the target decides
            # (ANE-COMPRESSED-WEIGHTS: the affine op is the form a published program runs)
            # 4-bit and per-block scales have the weight's rank: only the blockwise op holds them
            affine_op = ios16 or (int8_form(self.target) == "affine" and not fmt.blockwise)
            sshape = dict((role, shape) for role, _, shape in d.part_types())["scale"] if fmt.blockwise else bshape
            blob("q", "quantized_data" if affine_op else "data", fmt.storage, t.shape)
            blob("scale", "scale", "fp16", (c,) if affine_op else sshape)
            if fmt.affine:
                blob("zero_point", "zero_point" if affine_op else "offset", fmt.storage,
                     (c,) if affine_op else sshape)
            elif affine_op:  # the affine op needs a zero point: a literal 0 (weight-independent)
                zp = self._claim(f"{name}_zero_point")
                self._const(zp, self.sp.scalar_type(fmt.storage), self.sp.scalar(fmt.storage, "0"))
                args["zero_point"] = zp
            if affine_op:
                ax = self._claim(f"{name}_axis")
                self._const(ax, self.sp.scalar_type("int32"), self.sp.scalar("int32", str(axis)))
                args["axis"] = ax
            op = "constexpr_affine_dequantize" if affine_op else "constexpr_blockwise_shift_scale"
        elif fmt.kind == "lut":
            k = 1 << fmt.bits
            if ios16:
                nbytes = (t.numel * fmt.bits + 7) // 8
                blob("indices", "indices", "uint8", (nbytes,), packed=True)
                blob("lut", "lut", "fp16", (k,))
                args["shape"] = shape_const()
            else:
                groups = c // fmt.group if fmt.group else 1
                lshape = tuple(groups if i == axis else 1 for i in range(rank)) + (k, 1)
                blob("indices", "indices", fmt.storage, t.shape)
                blob("lut", "lut", "fp16", lshape)
            op = "constexpr_lut_to_dense"
        elif fmt.kind == "sparse" and fmt.joint:
            # ios18: the kept values as int8 or LUT indices, dequantized sparse to sparse (a mask
            # and fp16 values), then made dense; the values' length is fixed by the shape
            shapes = {role: (dt, sh) for role, dt, sh in d.part_types()}
            linear = fmt.joint == "int8"
            roles = ("mask", "q", "scale") if linear else ("mask", "indices", "lut")
            argn = (("data_mask", "nonzero_data", "scale") if linear else
                    ("indices_mask", "indices_nonzero_data", "lut"))
            for role, arg in zip(roles, argn):
                blob(role, arg, *shapes[role])
            smask, svalues = self._claim(f"{name}_smask"), self._claim(f"{name}_svalues")
            kept = shapes[roles[1]][1][0]
            dims = ", ".join(str(x) for x in t.shape)
            self._stmt(f"tensor<uint1, [{dims}]> {smask}, tensor<fp16, [{kept}]> {svalues}",
                       "constexpr_sparse_blockwise_shift_scale" if linear else "constexpr_lut_to_sparse",
                       args, self._claim(f"{name}_sparse"))
            args = {"mask": smask, "nonzero_data": svalues}
            op = "constexpr_sparse_to_dense"
        elif fmt.kind == "sparse":
            # the values' length is fixed by the shape and the sparsity (a reload keeps it)
            blob("values", "nonzero_data", "fp16", dict((role, sh) for role, _, sh in d.part_types())["values"])
            if ios16:  # the mask as packed uint8 bytes and the dense shape
                blob("mask", "mask", "uint8", ((t.numel + 7) // 8,), packed=True)
                args["shape"] = shape_const()
            else:  # a uint1 mask in the weight's shape
                blob("mask", "mask", "uint1", t.shape)
            op = "constexpr_sparse_to_dense"
        else:  # pragma: no cover - decide() makes only these
            raise PassError(f"emit-mil: no MIL form for compression format {fmt.name}", span=n.span)
        self._stmt(f"{self.sp.type(t)} {name}", op, args, name)

    def _weight_file(self, const_name: str) -> str:
        if self.pack:
            return f"{WEIGHTS_DIR}/{PACKED_FILE}"
        # unique ignoring case: macOS file systems usually are case-insensitive
        stem, i = const_name, 1
        while stem.lower() in self.files_taken:
            stem = f"{const_name}_{i}"
            i += 1
        self.files_taken.add(stem.lower())
        return f"{WEIGHTS_DIR}/{stem}.bin"

    # ---- program ----------------------------------------------------------
    def _check_io(self) -> None:
        if self.target.fp32_io:
            return
        for v in [*self.graph.inputs, *self.graph.outputs]:
            if v.type.dtype == DType.fp32:
                raise ConstraintError(
                    f"{'input' if v.producer is None else 'output'} %{v.name} is fp32, but target "
                    f"{self.target.name} only accepts fp16 I/O",
                    span=v.span,
                    hint="compile with --host-casts (the host converts fp32 <-> fp16) or declare it fp16",
                    constraint="ANE-FP32-IO",
                )

    def _check_io_rank(self) -> None:
        for v in [*self.graph.inputs, *self.graph.outputs]:
            if v.type.rank != 4:
                raise ConstraintError(
                    f"{'input' if v.producer is None else 'output'} %{v.name} is {v.type}; every "
                    "program the references run has rank-4 [1, C, 1, S] inputs and outputs",
                    span=v.span, hint=_LEGALIZE_HINT + " (a reshape inside the program)",
                    constraint="ANE-IO-RANK4",
                )

    def run(self) -> MilProgram:
        g = self.graph
        if self.pack and self.target.one_file_per_weight:
            raise ConstraintError(
                f"target {self.target.name} needs one BLOBFILE per weight; --pack-weights is not allowed",
                hint="compile without --pack-weights",
                constraint="ANE-ONE-FILE-PER-WEIGHT",
            )
        self._check_io()
        self._assign_names()
        self._check_io_rank()
        for n in g.nodes:
            self.emit_node(n)
        d = self.dialect
        params = ", ".join(f"{self.sp.type(v.type)} {self.name(v)}" for v in g.inputs)
        out = [
            f"program({d.program_version})",
            d.build_info,
            "{",
            f"{INDENT}func main<{d.opset}>({params}) {{",
            *self.lines,
            f"{INDENT}}} -> ({', '.join(self.name(v) for v in g.outputs)});",
            "}",
        ]
        names = {v.name: self.names[id(v)] for v in g.values() if id(v) in self.names}
        return MilProgram("\n".join(out) + "\n", self.weights, names, d.name, self.uncompressed)


def _sanitize(name: str) -> str:
    """A valid MIL identifier derived from an IR value name."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
    if not (s[0].isalpha() or s[0] == "_"):
        s = "v" + s
    if s in RESERVED:
        s += "_"
    return s


INT8_FORMS = ("affine", "blockwise")
"""The MIL ops an 8-bit linear weight can be written with in ios18 (``Target.int8_form``)."""


def int8_form(target: "Target") -> str:
    """``target.int8_form``, checked: ``affine`` (constexpr_affine_dequantize) or ``blockwise``
    (constexpr_blockwise_shift_scale)."""
    form = getattr(target, "int8_form", "affine")
    if form not in INT8_FORMS:
        raise ConstraintError(f"unknown int8 form '{form}' on target {target.name}",
                              hint=f"int8 forms: {', '.join(INT8_FORMS)}", constraint="ANE-COMPRESSED-WEIGHTS")
    return form


def emit_mil(graph: Graph, target: "Target", *, pack_weights: bool = False,
             compression: "Mapping[str, Any] | None" = None) -> MilProgram:
    """The MIL text and weight plan of one func (a legalized graph).

    Weight values are not needed (nor looked at): weight consts become
    ``BLOBFILE`` references to ``weights/<const>.bin`` (one file per weight),
    or to offsets in ``weights/weight.bin`` with ``pack_weights``.
    ``compression`` (IR value name of a weight const -> :class:`anec.compress.Decision`)
    writes those weights compressed: integer payload BLOBFILEs and a ``constexpr_*`` op
    (docs/compression.md). The decisions, not the values, shape the text.
    Raises :class:`~anec.diagnostics.ConstraintError` for anything the ANE
    would reject that legalize should have removed.
    """
    return _Emitter(graph, target, pack_weights, compression).run()
