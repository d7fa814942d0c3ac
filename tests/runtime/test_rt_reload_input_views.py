"""Weights compiled as inputs reloaded from views of the caller's arrays (anec_reload_input_views):
the C runtime checks every view, then writes each one (transposed, sliced, converted to fp16) into
its surface; no packed host copy is made. Every comparison here is exact (bit for bit): against
the packed path (views materialized by numpy, written by anec_reload_inputs), against the
numpy view of the new weights, and against a fresh compile."""

from __future__ import annotations

import numpy as np
import pytest

import anec.runtime.program as program_mod
from anec.compiler import compile_module
from anec.diagnostics import WeightError
from anec.ir.parser import parse
from anec.ir.types import DType, TensorType
from anec.runtime import Runtime, native
from anec.runtime.weights import strided_2d
from anec.ir.weight_binding import view_stored

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the C runtime")


def _list(t):
    """A manifest entry's perm or slice as the list view_stored takes."""
    return None if t is None else list(t)

# a fused projection read as two transposed slices, a weight read as itself and transposed
VIEWS = """\
func sv(%x: fp16[1, 8, 1, 16]) {
  %q = const(weight="c", perm=[1, 0], slice=[0, 0, 8]) : fp16[8, 8, 1, 1]
  %k = const(weight="c", perm=[1, 0], slice=[0, 8, 16]) : fp16[8, 8, 1, 1]
  %w = const(weight="w") : fp16[8, 8, 1, 1]
  %wt = const(weight="w", perm=[1, 0, 2, 3]) : fp16[8, 8, 1, 1]
  %a = conv1x1(%x, %q)
  %b = conv1x1(%a, %k)
  %c = conv1x1(%b, %w)
  %d = conv1x1(%c, %wt)
  return %d
}
"""
X = np.random.default_rng(3).standard_normal((1, 8, 1, 16)).astype(np.float16)


def _setup():
    m = parse(VIEWS, "sv.ir")
    s0, s1 = _weights(0), _weights(1)
    art = compile_module(m, weights=s0, weights_as_inputs=["all"]).artifacts["sv"]
    assert len(art.manifest.document["weight_inputs"]) == 4
    return m, s0, s1, art


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"c": (rng.standard_normal((8, 16)) * 0.3).astype(np.float32),
            "w": (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)}


def _surfaces(p) -> dict[str, np.ndarray]:
    return {spec["name"]: p._native.input_surface(i).copy() for i, spec in enumerate(p.inputs)}


def _reload(tmp_path, art, weights, packed: bool, monkeypatch) -> tuple[dict, np.ndarray, int]:
    """Reload other values, then ``weights``, into a fresh load of ``art`` by the view path (or
    the packed path); the input surfaces, the output, and how many view reloads C did."""
    calls = []
    orig = native.NativeProgram.reload_input_views

    def spy(self, views):
        calls.append(len(views))
        return orig(self, views)

    with monkeypatch.context() as mp:
        mp.setattr(native.NativeProgram, "reload_input_views", spy)
        if packed:
            mp.setattr(program_mod, "weight_input_views", lambda *a: None)
        with Runtime("sim", temp_root=tmp_path / ("packed" if packed else "views")) as rt:
            p = rt.load(art)
            p.reload_weights({k: v * v.dtype.type(0.5) for k, v in weights.items()})
            p.reload_weights(weights)  # the same layouts again: the cached walks
            return _surfaces(p), p(x=X)["d"], len(calls)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_view_reload_is_bit_identical_to_the_packed_path(tmp_path, monkeypatch, dtype):
    m, s0, s1, art = _setup()
    new = {k: np.asarray(v, dtype) for k, v in s1.items()}
    sv, yv, nv = _reload(tmp_path, art, new, False, monkeypatch)
    sp, yp, npk = _reload(tmp_path, art, new, True, monkeypatch)
    assert nv == 2 and npk == 0  # the first went by views, the second by packed copies
    assert sv.keys() == sp.keys()
    for name in sv:
        assert np.array_equal(sv[name], sp[name]), f"surface of input '{name}' differs bit for bit"
    assert np.array_equal(yv.view(np.uint16), yp.view(np.uint16))
    # and equal to a fresh compile with the new weights
    fresh = compile_module(m, weights=new, weights_as_inputs=["all"]).artifacts["sv"]
    with Runtime("sim", temp_root=tmp_path / "fresh") as rt:
        assert np.array_equal(yv.view(np.uint16), rt.load(fresh)(x=X)["d"].view(np.uint16))


def test_transposed_and_sliced_views_are_written_exactly(tmp_path):
    """Each input surface holds numpy's fp16 view of the new weight (its perm and slice), packed."""
    _, s0, s1, art = _setup()
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(art)
        p.reload_weights(s1)
        got = _surfaces(p)
        entries = list(p._weight_inputs.values())
    kinds = set()
    for e in entries:
        want = view_stored(e.key, np.asarray(s1[e.key]), _list(e.perm), _list(e.slice),
                           TensorType(DType.fp16, tuple(e.shape)), "test").astype(np.float16)
        kinds.add((bool(e.perm), bool(e.slice)))
        n = want.size
        assert np.array_equal(got[e.input][:2 * n].view(np.float16), want.reshape(-1)), e.input
    assert kinds == {(True, True), (False, False), (True, False)}


@pytest.mark.parametrize("key,value,dtype", [("w", np.nan, np.float16), ("w", np.inf, np.float16),
                                             ("c", -np.inf, np.float16), ("c", np.nan, np.float32),
                                             ("w", 1e5, np.float32)])
def test_a_bad_value_fails_with_nothing_written(tmp_path, key, value, dtype):
    """NaN, Inf or a value beyond the fp16 range in any key: WeightError naming it, and no surface
    changes (the other key's views included)."""
    _, s0, s1, art = _setup()
    new = {k: np.array(v, dtype) for k, v in s1.items()}
    new[key].reshape(-1)[5] = value
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(art)
        before = _surfaces(p)
        with pytest.raises(WeightError, match=f"weight '{key}'.*(non-finite|fp16 range)"):
            p.reload_weights(new)
        after = _surfaces(p)
    for name in before:
        assert np.array_equal(before[name], after[name]), f"input '{name}' was written"


def test_a_wrong_shape_fails_with_nothing_written(tmp_path):
    _, s0, s1, art = _setup()
    new = dict(s1)
    new["c"] = np.asarray(s1["c"], np.float16)[:, :-1]
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(art)
        before = _surfaces(p)
        with pytest.raises(WeightError, match="weight 'c'"):
            p.reload_weights(new)
        after = _surfaces(p)
    for name in before:
        assert np.array_equal(before[name], after[name]), f"input '{name}' was written"


def test_native_views_refuse_a_bad_view_before_writing(tmp_path):
    """The C entry point itself: a view of the wrong size, or one input given twice, is refused
    after no surface was written, even when other views in the call are good."""
    _, s0, s1, art = _setup()
    a = np.arange(64, dtype=np.float16).reshape(8, 8)
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(art)
        before = _surfaces(p)
        index = {spec["name"]: i for i, spec in enumerate(p.inputs)}
        good = [(index[e.input], a, 0, (8, 8, 8, 1)) for e in p._weight_inputs.values()]
        for bad in ([*good[:-1], (good[-1][0], a, 0, (8, 7, 8, 1))], [*good, good[0]]):
            with pytest.raises(Exception, match="elements|given twice"):
                p._native.reload_input_views(bad)
            after = _surfaces(p)
            for name in before:
                assert np.array_equal(before[name], after[name]), f"input '{name}' was written"
        p._native.reload_input_views([(index[e.input], a.T, 0, strided_2d(a.T)) for e in p._weight_inputs.values()])
        for e in p._weight_inputs.values():
            assert np.array_equal(_surfaces(p)[e.input][:128].view(np.float16), a.T.reshape(-1))


def test_strided_2d_describes_numpy_views():
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    assert strided_2d(a) == (1, 24, 0, 1)  # contiguous: one row
    assert strided_2d(a[0].T) == (4, 3, 1, 4)
    assert strided_2d(a[:, 1:, :].reshape(2, 1, 8, 1)) == (2, 8, 12, 1)
    assert strided_2d(a.transpose(2, 0, 1)) == (4, 6, 1, 4)
    assert strided_2d(a.transpose(1, 0, 2)) is None  # a 3-D walk: the packed path takes it
    assert strided_2d(np.float16(1.0).reshape(())) == (1, 1, 0, 0)


ODD = """\
func odd(%x: fp16[1, 12, 1, 16]) {
  %w = const(weight="m", perm=[1, 0, 2, 3]) : fp16[20, 12, 1, 1]
  %y = conv1x1(%x, %w)
  return %y
}
"""


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_transpose_with_partial_blocks_is_written_exactly(tmp_path, dtype):
    """A 12x20 weight's transpose (20x12: whole 8x8 blocks and both edges) lands in the surface
    exactly as numpy's fp16 transpose."""
    rng = np.random.default_rng(7)
    s0, s1 = ({"m": rng.standard_normal((12, 20, 1, 1)).astype(np.float32)} for _ in range(2))
    art = compile_module(parse(ODD, "odd.ir"), weights=s0, weights_as_inputs=["all"]).artifacts["odd"]
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(art)
        (name,) = p._weight_inputs
        i = p._input_index[name]
        new = s1["m"].astype(dtype)
        views = program_mod.weight_input_views(p._weight_inputs.values(), {"m": new}, p._input_specs, {})
        assert views[name][2] == (20, 12, 1, 20)
        p.reload_weights({"m": new})
        got = p._native.input_surface(i)[:2 * 240].view(np.float16).copy()
    want = new.reshape(12, 20).T.astype(np.float16).reshape(-1)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_the_same_shape_in_another_layout_is_walked_anew(tmp_path):
    """A second reload with an array of the same shape but other strides (Fortran order) is
    read by its own walk, not the cached one of the first array."""
    _, s0, s1, art = _setup()
    new = {k: np.asarray(v, np.float16) for k, v in s1.items()}
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(art)
        p.reload_weights({k: np.asarray(v, np.float16) for k, v in s0.items()})
        p.reload_weights({"c": new["c"], "w": np.asfortranarray(new["w"])})  # c: sliced, read as it is
        got = _surfaces(p)
        entries = list(p._weight_inputs.values())
    for e in entries:
        want = view_stored(e.key, new[e.key], _list(e.perm), _list(e.slice),
                           TensorType(DType.fp16, tuple(e.shape)), "test")
        assert np.array_equal(got[e.input][:2 * want.size].view(np.float16), want.reshape(-1)), e.input
