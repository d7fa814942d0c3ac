"""ATen lowerings of elementwise ops: arithmetic, activations, comparisons, logic, casts.

Arithmetic and activations become the IR's elementwise ops (``add``, ``mul``,
``pow``, ``exp``, ``gelu``...; the one-to-one ones are generated from the op
rows and placed here, :mod:`anec.frontends.aten.direct`) or short compositions of them (``abs`` =
``relu(x) + relu(-x)``, ``clamp``, ``elu``), applied in the layout of a
full-size operand with torch broadcasting (:meth:`Lowering.binary`).

Comparisons, logical ops and ``where`` are exact compositions of relu, add and
mul on 0/1 and integer-valued tensors (``min(t, 1) = 1 - relu(1 - t)``).
Comparisons of real-valued (float) activations have no exact IR form and are
errors.
"""

from __future__ import annotations

import math
from typing import Callable

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.direct import place, scaled_by_alpha
from anec.frontends.aten.reductions import reduce_over
from anec.frontends.aten.table import Family
from anec.frontends.aten.values import (
    Args,
    Const,
    HostValue,
    InputRef,
    Lowered,
    Operand,
    kind_of,
)
from anec.frontends.tensor_views import Expanded, View

ELEMENTWISE = Family("elementwise")
LOGIC = Family("logic")


place(ELEMENTWISE, "relu", "tanh", "sigmoid", "exp", "sqrt", "rsqrt", "neg")


@ELEMENTWISE.op("gelu.default", ir='gelu(mode="exact"), or mode="tanh" for approximate="tanh"')
def lower_gelu(lw: Lowering, a: Args) -> Lowered:
    mode = {"none": "exact", "tanh": "tanh"}.get(a["approximate"])
    if mode is None:
        raise lw.fail(f"gelu approximate='{a['approximate']}'", "use approximate='none' or 'tanh'")
    return lw.unary("gelu", a["self"], mode=mode)


@ELEMENTWISE.op("silu.default", ir="mul(x, sigmoid(x))")
def lower_silu(lw: Lowering, a: Args) -> Lowered:
    return lw.binary("mul", a["self"], lw.unary("sigmoid", a["self"]))


@ELEMENTWISE.op("reciprocal.default", ir="pow(x, -1)")
def lower_reciprocal(lw: Lowering, a: Args) -> Lowered:
    return lw.binary("pow", a["self"], -1.0, "float")


@ELEMENTWISE.op("abs.default", ir="relu(x) + relu(-x)")
def lower_abs(lw: Lowering, a: Args) -> Lowered:
    return lw.absolute(a["self"])


@ELEMENTWISE.op("exp2.default", ir="exp(x * ln 2)")
def lower_exp2(lw: Lowering, a: Args) -> Lowered:
    return lw.unary("exp", lw.binary("mul", a["self"], math.log(2.0)))


@ELEMENTWISE.op("expm1.default", ir="exp(x) - 1")
def lower_expm1(lw: Lowering, a: Args) -> Lowered:
    return lw.binary("sub", lw.unary("exp", a["self"]), 1.0)


@ELEMENTWISE.op("pow.Tensor_Scalar", ir="mul(x, x) for 2, sqrt for 0.5, rsqrt for -0.5, else pow(x, c)")
def lower_pow_scalar(lw: Lowering, a: Args) -> Lowered:
    x, e = a["self"], a["exponent"]
    if isinstance(e, Const):
        e = float(e.numpy().reshape(()))
    e = float(e)
    if e == 1.0:
        return lw.dev(x)
    if e == 2.0:
        return lw.binary("mul", x, x, kind_of(x))
    if e == 0.5:
        return lw.unary("sqrt", x)
    if e == -0.5:
        return lw.unary("rsqrt", x)
    return lw.binary("pow", x, e, "float")


place(ELEMENTWISE, "pow")


@ELEMENTWISE.op("pow.Scalar", ir="exp(x * ln c) (c > 0)")
def lower_pow_base(lw: Lowering, a: Args) -> Lowered:
    c = float(a["self"])
    if c <= 0:
        raise lw.fail(f"pow with base {c:g}", "only a positive constant base is supported")
    return lw.unary("exp", lw.binary("mul", a["exponent"], math.log(c)))


place(ELEMENTWISE, "add", "sub")


@ELEMENTWISE.op("rsub.Tensor", "rsub.Scalar", ir="sub(other, x)")
def lower_rsub(lw: Lowering, a: Args) -> Lowered:
    return lw.binary("sub", a["other"], scaled_by_alpha(lw, a["self"], a.get("alpha")))


place(ELEMENTWISE, "mul")


@ELEMENTWISE.op("div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode",
      ir="mul(x, 1/c) for a constant c, else mul(x, pow(y, -1)); rounding modes are errors")
def lower_div(lw: Lowering, a: Args) -> Lowered:
    if a.get("rounding_mode") is not None:
        lw.require_discrete(a["self"], f"division with rounding_mode='{a['rounding_mode']}'")
        raise lw.fail(f"integer division (rounding_mode='{a['rounding_mode']}') on the device",
                      "compute it on the host")
    x, y = a["self"], a["other"]
    if isinstance(y, (int, float)) or (isinstance(y, Const) and math.prod(y.shape) == 1):
        c = float(y) if not isinstance(y, Const) else float(y.numpy().reshape(()))
        if c == 0.0:
            raise lw.fail("division by the constant 0")
        return lw.binary("mul", x, 1.0 / c, "float")
    if isinstance(y, Const):
        return lw.binary("mul", x, Const(1.0 / y.value.double()), "float")
    return lw.binary("mul", x, lw.binary("pow", y, -1.0, "float"), "float")


@ELEMENTWISE.op("maximum.default", "fmax.default", ir="b + relu(a - b)")
def lower_maximum(lw: Lowering, a: Args) -> Lowered:
    return lw.maximum(a["self"], a["other"])


@ELEMENTWISE.op("minimum.default", "fmin.default", ir="a - relu(a - b)")
def lower_minimum(lw: Lowering, a: Args) -> Lowered:
    return lw.minimum(a["self"], a["other"])


def _clamp(lw: Lowering, x: Operand, lo: Operand | None, hi: Operand | None) -> Operand:
    if lo is not None:
        x = lw.binary("add", lw.relu(lw.binary("sub", x, lo)), lo, kind_of(x))
    if hi is not None:
        x = lw.binary("sub", hi, lw.relu(lw.binary("sub", hi, x)), kind_of(x))
    return x


@ELEMENTWISE.op("clamp.default", "clamp.Tensor", ir="lo + relu(x - lo), then hi - relu(hi - x)")
def lower_clamp(lw: Lowering, a: Args) -> Lowered:
    return _clamp(lw, a["self"], a.get("min"), a.get("max"))


@ELEMENTWISE.op("clamp_min.default", ir="lo + relu(x - lo)")
def lower_clamp_min(lw: Lowering, a: Args) -> Lowered:
    return _clamp(lw, a["self"], a["min"], None)


@ELEMENTWISE.op("clamp_max.default", ir="hi - relu(hi - x)")
def lower_clamp_max(lw: Lowering, a: Args) -> Lowered:
    return _clamp(lw, a["self"], None, a["max"])


@ELEMENTWISE.op("hardtanh.default", ir="clamp composition (relu)")
def lower_hardtanh(lw: Lowering, a: Args) -> Lowered:
    return _clamp(lw, a["self"], a["min_val"], a["max_val"])


@ELEMENTWISE.op("leaky_relu.default", ir="relu(x) - slope * relu(-x)")
def lower_leaky_relu(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    neg_part = lw.relu(lw.neg(x))
    return lw.binary("sub", lw.relu(x), lw.binary("mul", neg_part, float(a["negative_slope"])))


@ELEMENTWISE.op("elu.default", ir="scale * (relu(x) + alpha * (exp(-relu(-x) * input_scale) - 1))")
def lower_elu(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    m = lw.neg(lw.relu(lw.neg(x)))  # min(x, 0)
    e = lw.binary("sub", lw.unary("exp", lw.binary("mul", m, float(a["input_scale"]))), 1.0)
    y = lw.binary("add", lw.relu(x), lw.binary("mul", e, float(a["alpha"])))
    return lw.binary("mul", y, float(a["scale"])) if float(a["scale"]) != 1.0 else y


@ELEMENTWISE.op("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar",
      ir="a * c + b * (1 - c), c the 0/1 condition")
def lower_where(lw: Lowering, a: Args) -> Lowered:
    cond = a["condition"]
    if kind_of(cond) != "bool":
        raise lw.fail("where() with a non-bool condition")
    return lw.where(cond, a["self"], a["other"])


def _cmp(lw: Lowering, x: Operand, y: Operand, op: str) -> Operand:
    lw.require_discrete(x, f"comparison '{op}'")
    lw.require_discrete(y, f"comparison '{op}'")
    if op in ("lt", "le"):
        x, y, op = y, x, {"lt": "gt", "le": "ge"}[op]
    d = lw.binary("sub", x, y, "int")
    if op == "gt":  # x - y >= 1
        return lw.min1(lw.relu(d))
    if op == "ge":  # x - y >= 0
        return lw.min1(lw.relu(lw.binary("add", d, 1.0, "int")))
    ne = lw.min1(lw.absolute(d))
    if op == "ne":
        return ne
    return lw.binary("sub", 1.0, ne, "bool")


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    def _mkc(op: str) -> Callable:
        def fn(lw: Lowering, a: Args) -> Lowered:
            return _cmp(lw, a["self"], a["other"], op)
        fn.__name__ = f"lower_{op}"
        return fn
    LOGIC.op(f"{_op}.Tensor", f"{_op}.Scalar",
         ir={"eq": "1 - min(|a - b|, 1)", "ne": "min(|a - b|, 1)", "gt": "min(relu(a - b), 1)",
             "ge": "min(relu(a - b + 1), 1)", "lt": "gt with operands swapped",
             "le": "ge with operands swapped"}[_op] + " (integer/bool operands)")(_mkc(_op))


def _logic(lw: Lowering, a: Operand, b: Operand, op: str) -> Operand:
    for x in (a, b):
        if kind_of(x) != "bool":
            if op.startswith("bitwise"):
                raise lw.fail(f"{op} of non-bool tensors", "bitwise ops are supported on bool tensors only")
            lw.require_discrete(x, op)
    a = _as_bool(lw, a)
    b = _as_bool(lw, b)
    kind = op.split("_")[-1]
    if kind == "and":
        return lw.binary("mul", a, b, "bool")
    if kind == "or":
        return lw.binary("sub", lw.binary("add", a, b, "int"), lw.binary("mul", a, b, "int"), "bool")
    d = lw.binary("sub", a, b, "int")
    return lw.binary("mul", d, d, "bool")  # xor


def _as_bool(lw: Lowering, x: Operand) -> Operand:
    if kind_of(x) == "bool":
        return x
    return lw.min1(lw.absolute(x))


for _op in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"):
    def _mkl(op: str) -> Callable:
        def fn(lw: Lowering, a: Args) -> Lowered:
            return _logic(lw, a["self"], a["other"], op)
        fn.__name__ = f"lower_{op}"
        return fn
    LOGIC.op(f"{_op}.default" if _op.startswith("logical") else f"{_op}.Tensor",
         ir={"and": "mul", "or": "a + b - a * b", "xor": "(a - b)^2"}[_op.split("_")[-1]]
         + " (on 0/1)")(_mkl(_op))


@LOGIC.op("logical_not.default", "bitwise_not.default", ir="1 - x (on 0/1)")
def lower_not(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    if kind_of(x) != "bool":
        lw.require_discrete(x, "logical_not")
        x = _as_bool(lw, x)
    return lw.binary("sub", 1.0, x, "bool")


@LOGIC.op("any.dim", "any.dims", "any.default", ir="min(reduce_sum(x), 1) (bool)")
def lower_any(lw: Lowering, a: Args) -> Lowered:
    x = _as_bool(lw, a["self"])
    s = reduce_over(lw, x, a.get("dim"), bool(a.get("keepdim", False)), "reduce_sum", "int")
    return lw.min1(s)


@LOGIC.op("_to_copy.default", "to.dtype", ir="(none) between floats; to bool: min(|x|, 1); "
      "to an integer type only from integer/bool tensors")
def lower_to_copy(lw: Lowering, a: Args) -> Lowered:
    import torch

    x = a["self"]
    dt = a.get("dtype")
    if dt is None:
        return x
    if isinstance(x, HostValue):
        return x.then({"op": "astype", "dtype": str(dt).replace("torch.", "")}, x.shape,
                      str(dt).replace("torch.", ""))
    if dt.is_complex:
        raise lw.fail(f"conversion to {dt}", "complex tensors have no IR form")
    if dt == torch.bool:
        if kind_of(x) == "bool":
            return x
        lw.require_discrete(x, "conversion to bool")
        return _as_bool(lw, x)
    if dt.is_floating_point:
        return _with_kind(lw.dev(x) if isinstance(x, InputRef) else x, "float")
    if kind_of(x) == "float":
        raise lw.fail(f"conversion of a float tensor to {dt} (it truncates)",
                      "the IR has no rounding; convert on the host")
    if isinstance(x, InputRef):
        return x
    return _with_kind(x, "int") if kind_of(x) == "bool" else x


def _with_kind(x: Operand, kind: str) -> Operand:
    if isinstance(x, View):
        return x.with_kind(kind)
    if isinstance(x, Expanded):
        return Expanded(x.src.with_kind(kind), x.shape)
    if isinstance(x, Const) and kind == "float" and not x.value.dtype.is_floating_point:
        return Const(x.value.float())
    return x
