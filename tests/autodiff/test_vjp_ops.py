"""Every op's VJP rule against PyTorch autograd (fp32), on hypothesis-drawn shapes and attributes.

A one-op func takes every float operand as an input; its backward func (anec.autodiff.grad,
interpreted in fp32 mode) must give the operand gradients torch.autograd gives for the same
op on the same values and cotangent: max abs error <= 1e-4 * max(1, max|ref|) (fp32 rounding
of the two computations). The rules the module docstring calls approximations are checked
against their own bounds (gelu: the tanh formula's derivative, 2e-3 from the exact one).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
F = torch.nn.functional

from anec.autodiff import VJP, AutodiffError, grad  # noqa: E402
from anec.ir.builder import Builder  # noqa: E402
from anec.ir.interp import interpret  # noqa: E402
from anec.ir.ops import OPS  # noqa: E402

TOL = 1e-4
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(opname, arrays, torch_fn, attrs=None, tol=TOL, away_from=None, **kw):
    """Build ``opname(*arrays, **attrs)``, differentiate w.r.t. every operand, compare with torch."""
    attrs = attrs or {}
    rng = np.random.default_rng(len(arrays))
    b = Builder("f")
    ins = [b.input(f"x{i}", "fp32", list(a.shape)) for i, a in enumerate(arrays)]
    n_res = len(attrs["sizes"]) if opname == "split" else 1
    y = b.op(opname, *ins, names=[f"y{i}" for i in range(n_res)], **attrs)
    outs = y if isinstance(y, tuple) else (y,)
    b.ret(*outs)
    bw = grad(b.graph, weights=None, inputs=[v.name for v in ins])
    cots = {bw.cotangents[o.name]: rng.standard_normal(o.type.shape).astype(np.float32) for o in outs}
    feed = {f"x{i}": a for i, a in enumerate(arrays)}
    got = interpret(bw.backward, {**feed, **cots}, mode="fp32")
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    res = torch_fn(*ts)
    res = res if isinstance(res, (tuple, list)) else (res,)
    total = sum((r * torch.tensor(cots[bw.cotangents[o.name]], dtype=torch.float64)).sum()
                for r, o in zip(res, outs))
    total.backward()
    for i, t in enumerate(ts):
        ref = t.grad.numpy()
        g = got[bw.input_grads[f"x{i}"]]
        assert g.shape == ref.shape, (opname, i)
        err = float(np.max(np.abs(g - ref), initial=0.0))
        assert err <= tol * max(1.0, float(np.max(np.abs(ref), initial=0.0))), (opname, i, err)


def arr(shape, seed, lo=None):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if lo is not None:
        a = np.abs(a) + lo
    return a


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)
seeds = st.integers(0, 2**16)


def test_every_op_has_a_rule():
    assert set(VJP) == set(OPS) - {"const"}


UNARY = {
    "identity": (lambda x: x, None),
    "neg": (lambda x: -x, None),
    "exp": (torch.exp, None),
    "sqrt": (torch.sqrt, 0.1),
    "rsqrt": (torch.rsqrt, 0.1),
    "tanh": (torch.tanh, None),
    "sigmoid": (torch.sigmoid, None),
    "relu": (torch.relu, None),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_unary(op, shape, seed):
    fn, lo = UNARY[op]
    x = arr(shape, seed, lo)
    if op == "relu":
        x = np.where(np.abs(x) < 1e-3, 0.5, x).astype(np.float32)  # the step is exact away from 0
    check(op, [x], fn)


@pytest.mark.parametrize("mode", ["tanh", "exact"])
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_gelu_differentiates_the_tanh_formula(mode, shape, seed):
    x = arr(shape, seed) * 3
    check("gelu", [x], lambda t: F.gelu(t, approximate="tanh"), {"mode": mode})
    if mode == "exact":  # and its derivative is within the stated bound of the exact derivative
        b = Builder("f")
        b.ret(b.op("gelu", b.input("x0", "fp32", list(shape)), name="y", mode=mode))
        bw = grad(b.graph, weights=None, inputs=["x0"])
        # a cotangent of ones: the gradient is the derivative itself (a random one would scale
        # the formula's error by |cotangent|, which the bound is not about)
        got = interpret(bw.backward, {"x0": x, bw.cotangents["y"]: np.ones_like(x)}, mode="fp32")
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        F.gelu(t).sum().backward()
        ref = t.grad.numpy()
        assert np.max(np.abs(got[bw.input_grads["x0"]] - ref)) <= 2e-3 * max(1.0, float(np.max(np.abs(ref))))


def _bcast(draw, shape):
    """A shape that broadcasts with ``shape`` (some dims 1, maybe lower rank)."""
    out = [d if draw(st.booleans()) else 1 for d in shape]
    drop = draw(st.integers(0, len(out) - 1))
    return tuple(out[drop:])


@st.composite
def binary_shapes(draw):
    s = draw(shapes)
    t = _bcast(draw, s)
    return (s, t) if draw(st.booleans()) else (t, s)


@pytest.mark.parametrize("op,fn", [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)])
@SETTINGS
@given(sh=binary_shapes(), seed=seeds)
def test_binary_with_broadcast(op, fn, sh, seed):
    check(op, [arr(sh[0], seed), arr(sh[1], seed + 1)], fn)


@SETTINGS
@given(shape=shapes, seed=seeds, e=st.sampled_from([2.0, 3.0, -1.0, 0.5, -0.5]))
def test_pow_with_a_constant_exponent(shape, seed, e):
    x = arr(shape, seed, 0.2)
    b = Builder("f")
    xi = b.input("x0", "fp32", list(shape))
    c = b.const_value(e, "fp32[]", name="e")
    b.ret(b.op("pow", xi, c, name="y"))
    bw = grad(b.graph, weights=None, inputs=["x0"])
    dy = arr(shape, seed + 2)
    got = interpret(bw.backward, {"x0": x, bw.cotangents["y"]: dy}, mode="fp32")[bw.input_grads["x0"]]
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (t ** e * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    ref = t.grad.numpy()
    assert np.max(np.abs(got - ref)) <= TOL * max(1.0, float(np.max(np.abs(ref))))


def test_pow_exponent_gradient_is_a_located_error():
    b = Builder("f")
    x, y = b.input("x", "fp32", [2]), b.input("e", "fp32", [2])
    b.ret(b.op("pow", x, y, name="y"))
    with pytest.raises(AutodiffError, match="exponent"):
        grad(b.graph, weights=None, inputs=["e"])


@st.composite
def matmul_case(draw):
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    tx, ty = draw(st.booleans()), draw(st.booleans())
    xb = [d if draw(st.booleans()) else 1 for d in batch]
    yb = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, len(batch))):]
    xs = tuple(xb) + ((k, m) if tx else (m, k))
    ys = tuple(yb) + ((n, k) if ty else (k, n))
    return xs, ys, tx, ty


@SETTINGS
@given(case=matmul_case(), seed=seeds)
def test_matmul_every_transpose_and_broadcast(case, seed):
    xs, ys, tx, ty = case

    def fn(a, b):
        return torch.matmul(a.transpose(-1, -2) if tx else a, b.transpose(-1, -2) if ty else b)

    check("matmul", [arr(xs, seed), arr(ys, seed + 1)], fn, {"transpose_x": tx, "transpose_y": ty})


@SETTINGS
@given(n=st.integers(1, 2), ci=st.integers(1, 6), co=st.integers(1, 6), h=st.integers(1, 3),
       w=st.integers(1, 4), bias=st.booleans(), seed=seeds)
def test_conv1x1(n, ci, co, h, w, bias, seed):
    arrays = [arr((n, ci, h, w), seed), arr((co, ci, 1, 1), seed + 1)]
    if bias:
        arrays.append(arr((1, co, 1, 1), seed + 2))
    b = Builder("f")
    ins = [b.input(f"x{i}", "fp32", list(a.shape)) for i, a in enumerate(arrays)]
    y = b.op("conv1x1", ins[0], ins[1], bias=ins[2] if bias else None, name="y")
    b.ret(y)
    bw = grad(b.graph, weights=None, inputs=[v.name for v in ins])
    dy = arr((n, co, h, w), seed + 3)
    got = interpret(bw.backward, {**{f"x{i}": a for i, a in enumerate(arrays)}, bw.cotangents["y"]: dy},
                    mode="fp32")
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    out = F.conv2d(ts[0], ts[1]) + (ts[2] if bias else 0)
    (out * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    for i, t in enumerate(ts):
        ref = t.grad.numpy()
        assert np.max(np.abs(got[bw.input_grads[f"x{i}"]] - ref)) <= TOL * max(1.0, float(np.max(np.abs(ref))))


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_softmax(shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    check("softmax", [arr(shape, seed)], lambda t: torch.softmax(t, axis), {"axis": axis})


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max"])
@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_reductions(op, shape, seed, data):
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    keep = data.draw(st.booleans())
    fns = {"reduce_sum": lambda t: t.sum(axes, keepdim=keep),
           "reduce_mean": lambda t: t.mean(axes, keepdim=keep),
           "reduce_max": lambda t: t.amax(axes, keepdim=keep)}
    check(op, [arr(shape, seed)], fns[op], {"axes": axes, "keep_dims": keep})


def test_reduce_max_splits_ties_like_torch():
    x = np.array([[1.0, 3.0, 3.0, -2.0]], np.float32)
    check("reduce_max", [x], lambda t: t.amax([1], keepdim=True), {"axes": [1], "keep_dims": True})


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_reshape_and_transpose(shape, seed, data):
    perm = data.draw(st.permutations(range(len(shape))))
    check("transpose", [arr(shape, seed)], lambda t: t.permute(*perm), {"perm": list(perm)})
    flat = int(np.prod(shape))
    check("reshape", [arr(shape, seed)], lambda t: t.reshape(flat, 1), {"shape": [flat, 1]})


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_slice_pad_split_concat(shape, seed, data):
    begin, end = [], []
    for d in shape:
        a = data.draw(st.integers(-d, d - 1))
        e = data.draw(st.integers(-d, d))
        begin.append(a)
        end.append(e)
    if all(len(range(*slice(a, e).indices(d))) > 0 for a, e, d in zip(begin, end, shape)):
        sl = tuple(slice(a, e) for a, e in zip(begin, end))
        check("slice", [arr(shape, seed)], lambda t: t[sl], {"begin": begin, "end": end})
    before = [data.draw(st.integers(0, 2)) for _ in shape]
    after = [data.draw(st.integers(0, 2)) for _ in shape]
    widths = [w for pair in reversed(list(zip(before, after))) for w in pair]
    check("pad", [arr(shape, seed)], lambda t: F.pad(t, widths), {"before": before, "after": after})
    axis = data.draw(st.integers(0, len(shape) - 1))
    d = shape[axis]
    cut = data.draw(st.integers(1, d)) if d > 1 else 1
    sizes = [cut, d - cut] if cut < d else [d]
    check("split", [arr(shape, seed)], lambda t: torch.split(t, sizes, dim=axis), {"axis": axis, "sizes": sizes})
    other = list(shape)
    other[axis] = data.draw(st.integers(1, 3))
    check("concat", [arr(shape, seed), arr(tuple(other), seed + 1)], lambda a, b: torch.cat([a, b], axis),
          {"axis": axis})


def test_cast_round_trip_gradient():
    x = arr((2, 3), 0)
    check("cast", [x], lambda t: t, {"dtype": "fp32"})


def test_strided_slice_gradient_is_a_located_error():
    b = Builder("f")
    x = b.input("x", "fp32", [4])
    b.ret(b.op("slice", x, begin=[0], end=[4], stride=[2], name="y"))
    with pytest.raises(AutodiffError, match="strided"):
        grad(b.graph, weights=None, inputs=["x"])
