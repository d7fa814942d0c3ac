"""The op table is the one source: every part of anec derives what it knows about an op from its row.

A throwaway op added in a fixture (one row plus its reference kernel, nothing
else) flows through the builder, parser, verifier, interpreter, MIL emitter,
the docs and the simulator's generated op table; one the ANE rejects also
needs its legalize rule. The committed ``csrc/sim_ops.h`` is the generator's
output.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.constraints import CONSTRAINTS
from anec.diagnostics import ConstraintError
from anec.ir import ops
from anec.ir.builder import Builder
from anec.ir.gen_c import HEADER, header_text, main as gen_c_main
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.ir.printer import print_module
from anec.ir.verifier import verify
from anec.mil.emitter import emit_mil
from anec.passes import legalize_rules
from anec.targets import get_target


def _square_row() -> ops.OpDef:
    """An op the ANE runs: one row, its numpy reference kernel, its MIL lowering and sim kernel."""
    return ops.OpDef(
        "square", (ops.OperandDef("x"),), (), ops.FLOATS, ops._infer_same,
        lambda operands, optional, attrs: [np.square(operands[0].astype(np.float64)).astype(operands[0].dtype)],
        "x * x", traits=frozenset({ops.Trait.elementwise, ops.Trait.unary}),
        lowering=ops.Mil("square", ops.SimKernel("unary", "SQUARE")),
        vjp=lambda c, xs, ys, gs, attrs: [c.op("mul", c.op("mul", gs[0], xs[0]), c.scalar(2.0, xs[0]))],
    )


def _twice(node, rw):
    """The legalize rule of the rejected throwaway op: twice(x) -> add(x, x)."""
    x = node.operands[0]
    y = rw.op("add", x, x, suffix="add")
    rw.record("ANE-NEG", "twice(x) -> add(x, x)")
    return y


def _twice_row() -> ops.OpDef:
    """An op the ANE does not take: its row names the rule (and a catalog constraint id)."""
    return ops.OpDef(
        "twice", (ops.OperandDef("x"),), (), ops.FLOATS, ops._infer_same,
        lambda operands, optional, attrs: [operands[0] * 2],
        "x + x", traits=frozenset({ops.Trait.elementwise, ops.Trait.unary}),
        lowering=ops.NotOnAne("ANE-NEG", ("_twice",), "the ANE has no twice op", "add x to itself",
                              "add(x, x)"),
    )


@pytest.fixture
def square(monkeypatch):
    monkeypatch.setitem(ops.OPS, "square", _square_row())
    return "square"


@pytest.fixture
def twice(monkeypatch):
    monkeypatch.setitem(ops.OPS, "twice", _twice_row())
    monkeypatch.setitem(legalize_rules.RULES_BY_NAME, "_twice", _twice)
    return "twice"


TEXT = """
func f(%x: fp16[1, 4, 1, 8]) {
  %y = {op}(%x)
  %z = relu(%y)
  return %z
}
"""


def test_a_new_op_flows_through_every_part(square):
    x = np.linspace(-2, 2, 32, dtype=np.float16).reshape(1, 4, 1, 8)
    # parser (type inferred from the row) and verifier
    module = parse(TEXT.replace("{op}", square), "square.ir")
    assert verify(module) == []
    g = module.func()
    assert g.nodes[0].result.type == g.inputs[0].type
    assert "%y = square(%x) : fp16[1, 4, 1, 8]" in print_module(module)
    # builder
    b = Builder("f")
    v = b.input("x", "fp16", [1, 4, 1, 8])
    b.ret(b.relu(b.square(v, name="y"), name="z"))
    assert b.graph == g
    # interpreter, against the row's reference
    out = interpret(g, {"x": x}, mode="fp16")["z"]
    np.testing.assert_array_equal(out, np.maximum(np.square(x.astype(np.float64)), 0).astype(np.float16))
    # emitter (through the whole pipeline)
    art = compile_module(module, with_weights=False).artifacts["f"]
    assert "tensor<fp16, [1, 4, 1, 8]> y = square(x = x)[name = string(\"y\")];" in art.mil_text
    # docs and the simulator's op table
    assert "| `square` | x | - | fp16,fp32 | elementwise, unary | `square` | x * x |" in ops.format_table(True)
    assert '    X("square", SOP_SQUARE, unary)' in header_text()
    assert "    X(SOP_SQUARE, square)" in header_text()


def test_a_new_op_the_ane_rejects_needs_its_rule(twice):
    module = parse(TEXT.replace("{op}", twice), "twice.ir")
    assert verify(module) == []
    g = module.func()
    x = np.ones((1, 4, 1, 8), np.float16)
    np.testing.assert_array_equal(interpret(g, {"x": x})["z"], 2 * x)
    with pytest.raises(ConstraintError) as e:  # emitting it without legalize
        emit_mil(g, get_target())
    assert e.value.constraint == "ANE-NEG" and "the ANE has no twice op" in e.value.message
    result = compile_module(module, with_weights=False)
    assert "add(x = x, y = x)" in result.artifacts["f"].mil_text
    assert [r["rule"] for r in result.rewrites] == ["_twice"]
    assert "not on the ANE (ANE-NEG): legalize `_twice` makes it add(x, x)" in ops.format_table(True)
    assert '    X("twice", "ANE-NEG", "the ANE has no twice op; add x to itself", NULL)' in header_text()


def test_a_row_naming_a_missing_rule_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(ops.OPS, "twice", _twice_row())
    with pytest.raises(KeyError, match="names legalize rule '_twice'"):
        legalize_rules.rules_for(get_target())


def test_every_row_is_complete():
    for name, op in ops.OPS.items():
        low = op.lowering
        assert isinstance(low, (ops.Mil, ops.NotOnAne)), name
        rejections = [low] if isinstance(low, ops.NotOnAne) else list(low.rejected.values())
        for rej in rejections:
            assert rej.constraint in CONSTRAINTS, (name, rej.constraint)
            assert all(r in legalize_rules.RULES_BY_NAME for r in rej.rules), (name, rej.rules)
        if isinstance(low, ops.Mil):
            assert low.sim is not None, name
            assert set(low.args) <= {o.name for o in op.operands}, name
            assert set(low.rejected) <= {o.name for o in op.optional_operands}, name
    assert ops.NOT_ON_ANE == {"gelu", "rsqrt", "concat", "neg", "split"}
    assert ops.UNARY <= ops.ELEMENTWISE and ops.BINARY <= ops.ELEMENTWISE
    assert "cast" in ops.ELEMENTWISE - ops.UNARY - ops.BINARY


def test_sim_op_table_is_generated_from_the_rows():
    """csrc/sim_ops.h is `python -m anec.ir.gen_c` (regenerate after changing a row)."""
    assert HEADER.read_text("utf-8") == header_text(), "csrc/sim_ops.h is stale: run python -m anec.ir.gen_c"
    assert gen_c_main(["--check"]) == 0


def _compile_sim_exec(tmp_path, header: str):
    """Compile csrc/sim_exec.c (with the warnings the build makes errors) against ``header``
    as sim_ops.h, in a copy of csrc/; returns the compiler's result."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    src = tmp_path / "csrc"
    shutil.copytree(HEADER.parent, src, ignore=shutil.ignore_patterns("*.o", "*.so"))
    (src / "sim_ops.h").write_text(header, "utf-8")
    return subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-o", os.devnull, str(src / "sim_exec.c")],
                          capture_output=True, text=True, check=False)


def test_the_sim_dispatch_compiles_from_the_generated_table(tmp_path):
    """The control of the two tests below: the committed table compiles."""
    r = _compile_sim_exec(tmp_path, header_text())
    assert r.returncode == 0, r.stderr


def test_a_row_without_its_c_kernel_does_not_build(square, tmp_path):
    """A row naming a kernel id whose kernel_<id> is not written in csrc/sim_exec.c is a compile
    error that names the missing kernel (never an op that runs as zeros)."""
    r = _compile_sim_exec(tmp_path, header_text())
    assert r.returncode != 0
    assert "kernel_square" in r.stderr and "undeclared" in r.stderr, r.stderr


def test_a_kernel_no_row_names_does_not_build(monkeypatch, tmp_path):
    """The other way round: a kernel left in csrc/sim_exec.c after its row is gone is unused."""
    monkeypatch.delitem(ops.SIM_ONLY_MIL_OPS, "silu")
    r = _compile_sim_exec(tmp_path, header_text())
    assert r.returncode != 0
    assert "kernel_silu" in r.stderr and "defined but not used" in r.stderr, r.stderr


def test_a_step_rule_without_a_kernel_id_is_refused(monkeypatch):
    monkeypatch.setitem(ops.SIM_ONLY_MIL_OPS, "square", ops.SimKernel("unary"))
    with pytest.raises(ValueError, match="MIL op 'square': build rule 'unary' makes a plan step"):
        header_text()


def test_gen_c_check_reports_a_stale_header(tmp_path, capsys):
    stale = tmp_path / "sim_ops.h"
    stale.write_text("/* old */\n")
    assert gen_c_main(["--check", "--output", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert gen_c_main(["--output", str(stale)]) == 0
    assert stale.read_text() == header_text()


def test_a_new_row_with_a_vjp_is_differentiable(square):
    """The row's vjp column is all autodiff needs: d(x^2) = 2 x g."""
    from anec.autodiff import grad

    g = parse("func f(%x: fp32[3]) {\n  %y = square(%x)\n  return %y\n}\n", "sq.ir").funcs["f"]
    bw = grad(g, weights=None, inputs=["x"])
    x = np.array([1.0, -2.0, 0.5], np.float32)
    dy = np.array([1.0, 3.0, -2.0], np.float32)
    out = interpret(bw.backward, {"x": x, bw.cotangents["y"]: dy}, mode="fp32")
    np.testing.assert_array_equal(out[bw.input_grads["x"]], 2 * x * dy)

