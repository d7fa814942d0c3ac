"""What counts against a program's BLOBFILE cap (ANE-BLOB-BUDGET): one tensor per distinct
weight view, and the cap drops by one once an add/sub/mul/pow takes an inline rank-0 const
(a computed rank-0 value is no literal)."""

from __future__ import annotations

from anec.ir.printer import print_graph
from anec.passes.legalize import blob_count, blob_tensors, merge_duplicate_weights

from .passes_util import parse_func

GRAPH = """
func f(%x: fp16[1, 4, 1, 8]) {
  %w1 = const(weight="w") : fp16[4, 4, 1, 1]
  %a = conv1x1(%x, %w1) : fp16[1, 4, 1, 8]
  %v = const(weight="v") : fp16[4, 4, 1, 1]
  %b = conv1x1(%a, %v) : fp16[1, 4, 1, 8]
  %w2 = const(weight="w") : fp16[4, 4, 1, 1]
  %c = conv1x1(%b, %w2) : fp16[1, 4, 1, 8]
  %w3 = const(weight="w", perm=[1, 0, 2, 3]) : fp16[4, 4, 1, 1]
  %d = conv1x1(%c, %w3) : fp16[1, 4, 1, 8]
  %s = reduce_sum(%d, axes=[0, 1, 2, 3], keep_dims=false) : fp16[]
  %m = mul(%d, %s) : fp16[1, 4, 1, 8]
  %k = const(value=2.0) : fp16[]
  %e = relu(%m) : fp16[1, 4, 1, 8]
  %y = add(%e, %k) : fp16[1, 4, 1, 8]
  return %y
}"""


def test_blob_tensors_are_the_first_const_of_each_view():
    g = parse_func(GRAPH)
    names = [n.result.name for n in blob_tensors(g)]
    assert names == ["w1", "v", "w3"]  # %w2 is %w1's view again; %w3 is "w" transposed


def test_blob_count_names_the_first_node_taking_an_inline_scalar():
    g = parse_func(GRAPH)
    count, weights, scalar_user = blob_count(g)
    assert count == 3 and [n.result.name for n in weights] == ["w1", "v", "w3"]
    assert scalar_user is not None and scalar_user.result.name == "y"  # not %m: %s is computed


def test_blob_count_without_an_inline_scalar():
    g = parse_func(GRAPH.replace("%y = add(%e, %k)", "%y = add(%e, %m)").replace(
        "  %k = const(value=2.0) : fp16[]\n", ""))
    assert blob_count(g)[2] is None


def test_duplicate_weight_consts_merge_into_the_first():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 8]) {
  %w1 = const(weight="w") : fp16[4, 4, 1, 1]
  %a = conv1x1(%x, %w1) : fp16[1, 4, 1, 8]
  %w2 = const(weight="w") : fp16[4, 4, 1, 1]
  %b = conv1x1(%a, %w2) : fp16[1, 4, 1, 8]
  %w3 = const(weight="w", perm=[1, 0, 2, 3]) : fp16[4, 4, 1, 1]
  %c = conv1x1(%b, %w3) : fp16[1, 4, 1, 8]
  %w4 = const(weight="w") : fp16[4, 4, 1, 1]
  %d = conv1x1(%c, %w4) : fp16[1, 4, 1, 8]
  return %d
}""")
    # %w2 and %w4 are %w1's view again: their users read %w1 and they are gone (2 merged);
    # %w3, "w" transposed, is a tensor of its own
    assert merge_duplicate_weights(g) == 2
    assert print_graph(g) == """\
func f(%x: fp16[1, 4, 1, 8]) {
  %w1 = const(weight="w") : fp16[4, 4, 1, 1]
  %a = conv1x1(%x, %w1) : fp16[1, 4, 1, 8]
  %b = conv1x1(%a, %w1) : fp16[1, 4, 1, 8]
  %w3 = const(weight="w", perm=[1, 0, 2, 3]) : fp16[4, 4, 1, 1]
  %c = conv1x1(%b, %w3) : fp16[1, 4, 1, 8]
  %d = conv1x1(%c, %w1) : fp16[1, 4, 1, 8]
  return %d
}
"""
    assert merge_duplicate_weights(g) == 0  # nothing left to merge
