"""ANE-INT32-SHAPE: a tensor whose rank-4 device layout has a dimension above int32 is a located
verify error, before legalize merges its dimensions (it was an OverflowError in the MIL emitter,
or 'legalize left the func invalid', a bug report)."""

from __future__ import annotations

import pytest

from anec.compiler import compile_module
from anec.diagnostics import AnecError
from anec.ir.parser import parse
from anec.ir.verifier import check

RANK3 = """func f(%x: fp16[1, 4, 1, 1000000000]) {
  %r = reshape(%x, shape=[4, 1000000000, 1]) : fp16[4, 1000000000, 1]
  %t = transpose(%r, perm=[2, 0, 1]) : fp16[1, 4, 1000000000]
  %u = reshape(%t, shape=[1, 4, 1, 1000000000]) : fp16[1, 4, 1, 1000000000]
  return %u
}
"""


@pytest.mark.constraint("ANE-INT32-SHAPE")
def test_a_rank3_tensor_whose_device_layout_overflows_int32():
    errors = check(parse(RANK3, "big.ir")).errors
    assert len(errors) == 1
    e = errors[0]
    assert e.constraint == "ANE-INT32-SHAPE"
    assert e.span.location == "big.ir:2:3"
    assert "%r has an invalid type: on the device it is laid out as [1, 4000000000, 1, 1]" in e.message
    with pytest.raises(AnecError) as info:
        compile_module(parse(RANK3, "big.ir"), with_weights=False)
    assert info.value.constraint == "ANE-INT32-SHAPE"


@pytest.mark.parametrize("shape, ok", [
    ("fp16[2147483647, 65536]", True),    # rank 2: [1, 2147483647, 1, 65536], no dimension merged
    ("fp16[1, 1, 1, 4000000000]", False),  # a single dimension: the type error it always was
    ("fp16[2, 1073741823, 5]", True),     # 2 * 1073741823 = 2^31 - 2 channels
    ("fp16[2, 1073741824, 5]", False),    # 2^31 channels
    ("fp16[3, 1, 1, 1, 715827883]", True),  # rank 5: [1, 3, 1, 715827883]
    ("fp16[3, 715827883, 1, 1, 1]", False),
])
def test_the_bound_is_the_device_layout_not_the_element_count(shape, ok):
    text = f"func f(%x: {shape}) {{\n  %y = relu(%x)\n  return %y\n}}\n"
    errors = check(parse(text, "f.ir")).errors
    assert (not errors) == ok, [e.message for e in errors]
    if not ok:
        assert errors[0].span.location == "f.ir:1:8"


def test_a_const_is_checked_at_the_first_value_computed_from_it():
    """A const's size is bounded where it is made (inline limit, weights file): the check
    reports the first value computed from it."""
    text = ("func f() {\n  %c = const(value=0.0) : fp16[4, 1000000000, 1]\n  %y = relu(%c)\n"
            "  return %y\n}\n")
    errors = check(parse(text, "c.ir")).errors
    assert [(e.constraint, e.span.location) for e in errors] == [("ANE-INT32-SHAPE", "c.ir:3:3")]
    assert errors[0].message.startswith("%y has an invalid type: on the device it is laid out as")
