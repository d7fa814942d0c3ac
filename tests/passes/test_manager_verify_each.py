"""The manager's verify-each switch: on by default (every pass checked), off checks the end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from anec.compiler import compile_module
from anec.diagnostics import PassError
from anec.ir.printer import print_module
from anec.passes import DeadCodeElimination, FuseCasts, Pass, PassContext, run_pipeline
from anec.passes.pipelines import OPTIMIZE

from .passes_util import CAST_CHAIN as TEXT
from .passes_util import parse_func, parse_module


@dataclass(frozen=True)
class _WrongType(Pass):
    """A broken pass: it changes a result type behind the op table's back.

    Before: a valid graph. After: a declared type that inference contradicts.
    """

    name: ClassVar[str] = "wrong-type"

    def run(self, graph, ctx) -> None:
        r = graph.nodes[-1].results[0]
        r.type = r.type.with_shape((1, 8, 1, 4))


def test_verify_each_is_on_by_default():
    assert PassContext.default().verify_each is True


@pytest.mark.parametrize("order", ["first", "middle"])
def test_verify_each_names_the_pass(order):
    passes = ((_WrongType(), DeadCodeElimination(), FuseCasts()) if order == "first"
              else (DeadCodeElimination(), _WrongType(), FuseCasts()))
    ctx = PassContext.default()
    with pytest.raises(PassError) as info:
        run_pipeline(parse_func(TEXT), passes, ctx)
    assert "pass 'wrong-type' left func 'f' invalid" in info.value.message
    assert "does not match the inferred type" in info.value.message
    # the pass after the broken one never ran
    assert [p for _, p, _ in ctx.timings][-1] == "wrong-type"
    assert info.value.notes[-1] == "this is a bug in anec; please report it with the input .ir"
    assert all(isinstance(n, str) and n for n in info.value.notes)  # no empty note for the absent one


def test_without_verify_each_the_result_is_still_checked():
    ctx = PassContext.default()
    ctx.verify_each = False
    with pytest.raises(PassError) as info:
        run_pipeline(parse_func(TEXT), (_WrongType(), DeadCodeElimination(), FuseCasts()), ctx)
    msg = info.value.message
    assert "the pipeline (wrong-type, dce, fuse-casts) left func 'f' invalid" in msg
    assert info.value.notes[-2:] == ["verify_each=True verifies after every pass and names the one at fault",
                                     "this is a bug in anec; please report it with the input .ir"]
    assert [p for _, p, _ in ctx.timings] == ["wrong-type", "dce", "fuse-casts"]


def test_verify_each_off_gives_the_same_result_and_verifies_less():
    text = TEXT.replace("func f", "func g") + TEXT
    results, seconds = [], []
    for each in (True, False):
        module = parse_module(text)
        ctx = PassContext.default()
        ctx.verify_each = each
        run_pipeline(module, OPTIMIZE, ctx)
        results.append(print_module(module))
        seconds.append(ctx.verify_seconds)
    assert results[0] == results[1]
    assert seconds[0] > 0 and seconds[1] > 0


def test_compile_module_verify_each_off_writes_the_same_artifact(tmp_path):
    from tests.passes.passes_util import parse_module as pm

    text = """
func m(%x: fp32[1, 16, 1, 8]) {
  %xh = cast(%x, dtype=fp16)
  %w = const(weight="w") : fp16[16, 16, 1, 1]
  %h = conv1x1(%xh, %w)
  %g = gelu(%h, mode="tanh")
  %y = cast(%g, dtype=fp32)
  return %y
}"""
    a = compile_module(pm(text), random_seed=1, timing=True)
    b = compile_module(pm(text), random_seed=1, verify_each=False)
    assert a.artifacts["m"].mil_text == b.artifacts["m"].mil_text
    assert "verify" in [s for _, s, _ in a.timings]
