"""fp32 program I/O on a target without it (ANE-FP32-IO): the error naming every fp32 input and
output where it is declared or returned, and with --host-casts the whole rewritten func (fp16 I/O
under the same names, the casts the host no longer needs to see) and what it records."""

from __future__ import annotations

import numpy as np

from anec.ir.printer import print_graph
from anec.targets import get_target
from anec.weight_store import WeightStore

from .passes_util import compare
from .test_legalize import legalize, reject

M1 = get_target("m1")  # no fp32 program I/O

FP32_IO = """
func f(%x: fp32[1, 4, 1, 8], %h: fp16[1, 4, 1, 8]) {
  %y = sigmoid(%x) : fp32[1, 4, 1, 8]
  %hf = cast(%h, dtype=fp32) : fp32[1, 4, 1, 8]
  %z = add(%y, %hf) : fp32[1, 4, 1, 8]
  return %z
}"""


def test_fp32_io_rejected_at_the_input_and_at_the_return():
    err = reject(FP32_IO, target=M1)
    assert str(err) == """\
test.ir:2:8: error: [ANE-FP32-IO] input %x is fp32; m1 rejects fp32 program I/O
  func f(%x: fp32[1, 4, 1, 8], %h: fp16[1, 4, 1, 8]) {
         ^^
note: test.ir:6:3: [ANE-FP32-IO] output %z is fp32; m1 rejects fp32 program I/O
hint: declare %x as fp16 and convert on the host, or compile with --host-casts to let anec do that"""


def test_host_casts_make_the_io_fp16_under_the_same_names():
    before, g, ctx = legalize(FP32_IO, target=M1, host_casts=True)
    # %x is fp16 and cast to fp32 before its first user; %z is the fp16 cast of the fp32 sum
    assert print_graph(g) == """\
func f(%x: fp16[1, 4, 1, 8], %h: fp16[1, 4, 1, 8]) {
  %x_f32 = cast(%x, dtype=fp32) : fp32[1, 4, 1, 8]
  %y = sigmoid(%x_f32) : fp32[1, 4, 1, 8]
  %hf = cast(%h, dtype=fp32) : fp32[1, 4, 1, 8]
  %z_f32 = add(%y, %hf) : fp32[1, 4, 1, 8]
  %z = cast(%z_f32, dtype=fp16) : fp16[1, 4, 1, 8]
  return %z
}
"""
    assert g.facts.host_casts == [
        {"name": n, "kind": k, "host_dtype": "fp32", "program_dtype": "fp16"}
        for n, k in (("x", "input"), ("z", "output"))]
    assert [(r["rule"], r["constraint"], r["node"], r["location"], r["detail"]) for r in ctx.rewrites] == [
        ("use_host_casts", "ANE-FP32-IO", "x", "test.ir:2:8",
         "input %x is fp16 on the device; the host converts fp32 <-> fp16"),
        ("use_host_casts", "ANE-FP32-IO", "z", "test.ir:6:3",  # the return statement
         "output %z is fp16 on the device; the host converts fp32 <-> fp16"),
    ]
    feeds = {"x": np.linspace(-3, 3, 32, dtype=np.float32).reshape(1, 4, 1, 8),
             "h": np.linspace(-1, 1, 32, dtype=np.float16).reshape(1, 4, 1, 8)}
    compare(before, g, WeightStore({}), rtol=2e-3, atol=2e-3, inputs=feeds)
