"""The weight views legalize builds (anec/passes/layout.py): a sliced or transposed const
must read exactly the sub-tensor or transpose of what the original const reads, for every
stored layout (transposed by ``perm``, already sliced, or both). Checked on values: each
new const is materialized from the same store and compared with numpy on the original."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anec.ir.parser import parse
from anec.passes import PassContext
from anec.passes.layout import can_slice, slice_weight, transpose_weight_2d, view_shape
from anec.passes.rewrite import Rewriter
from anec.ir.weight_binding import materialize


def _setup(stored_shape, perm, sl, declared):
    """A func with one weight const over a stored tensor, and a rewriter over it."""
    attrs = ['weight="w"'] + ([f"perm={list(perm)}"] if perm else []) + ([f"slice={list(sl)}"] if sl else [])
    text = (f"func f(%x: fp32[{', '.join(map(str, declared))}]) {{\n"
            f"  %w = const({', '.join(attrs)}) : fp32[{', '.join(map(str, declared))}]\n"
            f"  %y = add(%x, %w)\n  return %y\n}}\n")
    g = parse(text, "v.ir").funcs["f"]
    store = {"w": np.arange(int(np.prod(stored_shape)), dtype=np.float32).reshape(stored_shape)}
    ctx = PassContext.default()
    ctx.weights = store
    rw = Rewriter(g, ctx, "test")
    const = g.nodes[0]
    rw.anchor = const
    return g, const, rw, store


@st.composite
def views(draw):
    """A stored 2-D tensor, an optional transpose and an optional slice of the view."""
    r, c = draw(st.integers(2, 7)), draw(st.integers(2, 7))
    perm = draw(st.sampled_from([None, (1, 0)]))
    view = (c, r) if perm else (r, c)
    sl = None
    if draw(st.booleans()):
        a = draw(st.integers(0, 1))
        s0 = draw(st.integers(0, view[a] - 1))
        s1 = draw(st.integers(s0 + 1, view[a]))
        sl = (a, s0, s1)
        view = tuple(s1 - s0 if i == a else d for i, d in enumerate(view))
    return (r, c), perm, sl, view


@settings(max_examples=150, deadline=None)
@given(views(), st.data())
def test_a_slice_of_any_view_reads_that_part_of_it(v, data):
    stored, perm, sl, declared = v
    g, const, rw, store = _setup(stored, perm, sl, declared)
    assert view_shape(const, rw) == declared
    before = materialize(const, store)
    axis = data.draw(st.integers(0, 1))
    start = data.draw(st.integers(0, declared[axis] - 1))
    stop = data.draw(st.integers(start + 1, declared[axis]))
    if not can_slice(const, axis, rw):
        assert sl is not None and sl[0] != axis  # only a view already cut along the other axis is refused
        with pytest.raises(ValueError, match="cannot be sliced along axis"):
            slice_weight(const, axis, start, stop, rw)
        return
    new = slice_weight(const, axis, start, stop, rw).producer
    want = before[start:stop] if axis == 0 else before[:, start:stop]
    np.testing.assert_array_equal(materialize(new, store), want)


@settings(max_examples=150, deadline=None)
@given(views(), st.booleans())
def test_a_transposed_view_reads_the_transpose(v, swap):
    stored, perm, sl, declared = v
    g, const, rw, store = _setup(stored, perm, sl, declared)
    before = materialize(const, store)
    out_shape = declared[::-1] if swap else declared
    new = transpose_weight_2d(const, swap, out_shape, rw).producer
    np.testing.assert_array_equal(materialize(new, store), before.T if swap else before)
    assert ("perm" in new.attrs) == ((perm is not None) != swap)  # an identity perm is dropped


def test_no_transpose_of_a_view_whose_stored_shape_differs_from_the_declared_one():
    g, const, rw, store = _setup((2, 6), None, None, (3, 4))  # 2x6 stored, read as 3x4
    assert view_shape(const, rw) == (2, 6)
    assert transpose_weight_2d(const, True, (4, 3), rw) is None


def test_the_view_shape_without_the_tensor_is_the_declared_one():
    g, const, rw, store = _setup((3, 4), (1, 0), None, (4, 3))
    assert view_shape(const, rw) == (4, 3)
    store.pop("w")
    assert view_shape(const, rw) == (4, 3)
    g, const, rw, store = _setup((3, 4), None, (0, 1, 3), (2, 4))
    assert view_shape(const, rw) == (2, 4)
    g, const, rw, store = _setup((3, 4), None, None, (3, 4))
    const.attrs["perm"] = [1, 0, 2]  # a permutation of another rank: the declared shape
    assert view_shape(const, rw) == (3, 4)
    const.attrs["perm"] = None
    const.attrs["slice"] = [2, 0, 1]  # an axis the tensor does not have: the declared shape
    assert view_shape(const, rw) == (3, 4)
