"""A small func that compiles into a pipeline, for the tests of the multi-program artifact
(anec/mil/multi_program.py, anec/multi_program_build.py).

Four conv1x1+relu layers on a target whose programs hold at most two BLOBFILE tensors:
partition cuts the func into two stages (layers 0-2, then layer 3), and the weight of
layer 1 is compiled as an input (``inputs/w1.bin``), so the pipeline has every part.
"""

from __future__ import annotations

from anec.compiler import compile_module
from anec.ir.parser import parse
from anec.targets import get_target
from anec.ir.weight_binding import random_weights

SOURCE = """func f(%x: fp16[1, 8, 1, 16]) {
  %w0 = const(weight="l0.w") : fp16[8, 8, 1, 1]
  %c0 = conv1x1(%x, %w0)
  %h0 = relu(%c0)
  %w1 = const(weight="l1.w") : fp16[8, 8, 1, 1]
  %c1 = conv1x1(%h0, %w1)
  %h1 = relu(%c1)
  %w2 = const(weight="l2.w") : fp16[8, 8, 1, 1]
  %c2 = conv1x1(%h1, %w2)
  %h2 = relu(%c2)
  %w3 = const(weight="l3.w") : fp16[8, 8, 1, 1]
  %c3 = conv1x1(%h2, %w3)
  %h3 = relu(%c3)
  return %h3
}
"""

TARGET = get_target("m4").replace(max_blob_tensors=2)


def compile_pipeline(out_dir=None):
    """(the compile result, the weight store) of SOURCE as ``c.ir``, layer 1's weight an input."""
    module = parse(SOURCE, "c.ir")
    store = random_weights(module, 0)
    return compile_module(module, weights=store, target=TARGET, weights_as_inputs=["l1.w"], out_dir=out_dir), store


# An fp32 input the host converts and a rank-2 input the program reshapes, cut into two stages
# on a target without fp32 I/O; and a one-layer func "g" that fits one program.
IO_SOURCE = """func h(%x: fp32[1, 8, 1, 16], %b: fp16[8, 16]) {
  %xc = cast(%x, dtype="fp16") : fp16[1, 8, 1, 16]
  %w0 = const(weight="l0.w") : fp16[8, 8, 1, 1]
  %c0 = conv1x1(%xc, %w0)
  %w1 = const(weight="l1.w") : fp16[8, 8, 1, 1]
  %c1 = conv1x1(%c0, %w1)
  %w2 = const(weight="l2.w") : fp16[8, 8, 1, 1]
  %c2 = conv1x1(%c1, %w2)
  %br = reshape(%b, shape=[1, 8, 1, 16]) : fp16[1, 8, 1, 16]
  %y = add(%c2, %br)
  return %y
}

func g(%x: fp16[1, 8, 1, 16]) {
  %w = const(weight="l0.w") : fp16[8, 8, 1, 1]
  %y = conv1x1(%x, %w)
  return %y
}
"""


def compile_io(target=TARGET.replace(fp32_io=False), out_dir=None):
    """The compile result of IO_SOURCE with host casts (func h cut in two on TARGET, g whole)."""
    module = parse(IO_SOURCE, "h.ir")
    return compile_module(module, weights=random_weights(module, 0), target=target, host_casts=True,
                          out_dir=out_dir)
