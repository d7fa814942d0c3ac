"""Shared fixtures of the compressed-weight tests.

The tests that run programs need the C runtime extension; without it they are skipped
(and under ``ANEC_REQUIRE_REFS=1`` each skip is a failure, tests/conftest.py).
"""

from __future__ import annotations

import pytest

from anec.ir.parser import parse
from anec.runtime import Runtime, native

SMALL_IR = """\
func f(%x: fp16[1, 48, 1, 8], %a: fp16[1, 1, 8, 48]) {
  %w = const(weight="blk.0.w") : fp16[64, 48, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 64, 1, 8]
  %r = relu(%h) : fp16[1, 64, 1, 8]
  %w2 = const(weight="blk.1.w") : fp16[32, 64, 1, 1]
  %y = conv1x1(%r, %w2) : fp16[1, 32, 1, 8]
  %g = const(weight="norm.g") : fp16[1, 32, 1, 1]
  %z = mul(%y, %g) : fp16[1, 32, 1, 8]
  %wm = const(weight="head.w") : fp16[1, 1, 48, 16]
  %m = matmul(%a, %wm) : fp16[1, 1, 8, 16]
  return %z, %m
}
"""
"""Two conv weights, a matmul weight (output channels on the last axis) and a norm gain
that no conv/matmul reads (never compressed)."""


@pytest.fixture
def small():
    return parse(SMALL_IR, "small.ir")


@pytest.fixture(scope="module")
def rt():
    if not native.available():
        pytest.skip("the anec C runtime extension is not built")
    r = Runtime("sim", compile_budget=100000)
    yield r
    r.close()
