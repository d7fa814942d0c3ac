"""The one-to-one ATen lowerings, generated from the op rows (``OpDef.aten``).

An IR op whose row names ATen overloads (``exp`` names ``exp.default``,
``add`` names ``add.Tensor`` and ``add.Scalar``) is what those overloads
become, applied to their tensor operands in schema order: :func:`handler`
writes that lowering from the row (a unary op in the float kind, or the
operand's kind for an ``integral`` one; a binary op with torch broadcasting,
``alpha`` scaling the second operand). A family module places the ops it
documents with :func:`place`, at the position its docs table shows them;
composite lowerings (``silu``, ``div``, ``clamp``...) stay hand-written in
their family. :func:`unplaced` lists the rows no family placed, so an op row
with ATen overloads cannot be left out of the import table.

Before (hand-written in the family)::

    @ELEMENTWISE.op("exp.default", ir="exp")
    def lower_exp(lw, a): return lw.unary("exp", a["self"])

After (the row says ``aten=Aten(("exp.default",))``; the family says where)::

    place(ELEMENTWISE, "relu", "tanh", "sigmoid", "exp", "sqrt", "rsqrt", "neg")
"""

from __future__ import annotations

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.table import Family, Handler
from anec.frontends.aten.values import Args, Lowered, Operand, kind_of
from anec.ir.ops import OPS, Trait

PLACED: set[str] = set()
"""The IR ops whose overloads a family has placed (by :func:`place`)."""


def scaled_by_alpha(lw: Lowering, y: Operand, alpha: float | None) -> Operand:
    """``alpha * y`` as ATen's ``add`` / ``sub`` / ``rsub`` scale their second term (``y`` for 1)."""
    if alpha in (None, 1, 1.0):
        return y
    return lw.binary("mul", y, float(alpha), kind_of(y))


def handler(op: str) -> Handler:
    """The lowering of the ATen overloads of ``op``'s row: ``op`` applied one-to-one."""
    row = OPS[op]
    rule = row.aten
    if rule is None:
        raise AssertionError(f"op '{op}' names no ATen overloads (its row has no aten=)")
    if Trait.unary in row.traits:
        def fn(lw: Lowering, a: Args) -> Lowered:
            x = next(iter(a.values()))
            return lw.unary(op, x, kind_of(x) if rule.integral else "float")
    elif Trait.binary in row.traits:
        def fn(lw: Lowering, a: Args) -> Lowered:
            x, y = list(a.values())[:2]
            return lw.binary(op, x, scaled_by_alpha(lw, y, a.get("alpha")))
    else:
        raise AssertionError(f"op '{op}': one-to-one ATen lowerings are generated for unary and "
                             "binary ops; write its lowering in its family")
    fn.__name__ = f"lower_{op}"
    return fn


def place(family: Family, *ops: str) -> None:
    """Register the generated lowerings of ``ops`` (IR op names) in ``family``, in this order."""
    for op in ops:
        rule = OPS[op].aten
        if rule is None or op in PLACED:
            raise AssertionError(f"op '{op}': no ATen overloads in its row, or placed twice")
        family.op(*rule.overloads, ir=rule.shown or op)(handler(op))
        PLACED.add(op)


def unplaced() -> list[str]:
    """The ops whose rows name ATen overloads that no family placed (should be none)."""
    return [name for name, row in OPS.items() if row.aten is not None and name not in PLACED]
