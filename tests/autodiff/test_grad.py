"""grad() on whole funcs: weight views gathered back to checkpoint tensors, both activation
modes, backward funcs compiled and run on the sim.

References: PyTorch autograd in fp32 on the same weights. Interpreter (fp32 mode): max abs
error <= 1e-3 relative to the largest reference gradient; sim (fp16 storage): per-tensor cosine
>= 0.999 and relative norm error <= 1e-2 (the training acceptance bar).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from anec.autodiff import AutodiffError, grad, unview  # noqa: E402
from anec.compiler import compile_module  # noqa: E402
from anec.ir.graph import Module  # noqa: E402
from anec.ir.interp import interpret  # noqa: E402
from anec.ir.parser import parse, parse_file  # noqa: E402
from anec.runtime import Runtime  # noqa: E402
from anec.ir.weight_binding import random_weights  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cos_rel(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)), float(
        np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-30))


def torch_mlp(store, x, dy):
    W = {k: torch.tensor(np.asarray(v, np.float32), dtype=torch.float64, requires_grad=True) for k, v in store.items()}
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    mu = xt.mean(1, keepdim=True)
    xc = xt - mu
    xn = xc * torch.rsqrt((xc * xc).mean(1, keepdim=True) + 1e-5)
    ln = xn * W["h.0.ln_2.weight"] + W["h.0.ln_2.bias"]
    h = F.conv2d(ln, W["h.0.mlp.c_fc.weight"]) + W["h.0.mlp.c_fc.bias"]
    o = F.conv2d(F.gelu(h, approximate="tanh"), W["h.0.mlp.c_proj.weight"]) + W["h.0.mlp.c_proj.bias"]
    ((xt + o) * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    return xt.grad.numpy(), {k: w.grad.numpy() for k, w in W.items()}


@pytest.fixture(scope="module")
def mlp():
    m = parse_file(os.path.join(ROOT, "examples", "gpt2_mlp.ir"))
    store = random_weights(m, 0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 768, 1, 64)).astype(np.float32)
    dy = rng.standard_normal((1, 768, 1, 64)).astype(np.float32)
    return m.funcs["mlp"], store, x, dy, torch_mlp(store, x, dy)


@pytest.mark.parametrize("mode", ["recompute", "save"])
def test_mlp_gradients_match_torch_in_the_interpreter(mlp, mode):
    g, store, x, dy, (dx_ref, dw_ref) = mlp
    bw = grad(g, weights="all", inputs=["x"], mode=mode, weight_shapes=store)
    feed = {"x": x, bw.cotangents["y"]: dy}
    if mode == "save":
        assert bw.saved and set(bw.saved) <= set(bw.forward.output_names())
        fwd = interpret(bw.forward, {"x": x}, store, mode="fp32")
        feed.update({n: fwd[n] for n in bw.saved})
    else:
        assert not bw.saved and bw.forward is g
    out = interpret(bw.backward, feed, store, mode="fp32")
    grads = bw.gather(out, store)
    assert set(grads) == set(dw_ref)
    for k, ref in [("x", dx_ref), *dw_ref.items()]:
        got = out[bw.input_grads["x"]] if k == "x" else grads[k]
        assert np.max(np.abs(got - ref)) <= 1e-3 * np.max(np.abs(ref)), k


def test_mlp_backward_compiles_and_runs_on_the_sim(mlp, tmp_path):
    g, store, x, dy, (dx_ref, dw_ref) = mlp
    bw = grad(g, weights="all", inputs=["x"], weight_shapes=store)
    # the input gradient of a conv reads the same checkpoint tensor transposed: a view, not an op
    assert not any(n.op == "transpose" for n in bw.backward.nodes)
    assert any(n.op == "const" and n.attrs.get("perm") == [1, 0, 2, 3] for n in bw.backward.nodes)
    m = Module()
    m.add_func(bw.backward)
    art = compile_module(m, weights=store).artifacts["mlp_grad"]
    with Runtime("sim", temp_root=tmp_path) as rt:
        out = rt.load(art)(x=x, **{bw.cotangents["y"]: dy})
    grads = bw.gather(out, store)
    for k, ref in [("x", dx_ref), *dw_ref.items()]:
        c, r = cos_rel(out[bw.input_grads["x"]] if k == "x" else grads[k], ref)
        assert c >= 0.999 and r <= 1e-2, (k, c, r)


VIEWS = """
func attn_in(%x: fp32[1, 8, 1, 4]) {
  %q_w = const(weight="c_attn.weight", perm=[1, 0], slice=[0, 0, 8]) : fp32[8, 8, 1, 1]
  %k_w = const(weight="c_attn.weight", perm=[1, 0], slice=[0, 8, 16]) : fp32[8, 8, 1, 1]
  %q = conv1x1(%x, %q_w)
  %k = conv1x1(%x, %k_w)
  %s = mul(%q, %k)
  %t = tanh(%s)
  return %t
}
"""


def test_weight_views_gather_into_the_checkpoint_tensor():
    m = parse(VIEWS, "v.ir")
    rng = np.random.default_rng(1)
    store = {"c_attn.weight": rng.standard_normal((8, 24)).astype(np.float32)}
    x = rng.standard_normal((1, 8, 1, 4)).astype(np.float32)
    dy = rng.standard_normal((1, 8, 1, 4)).astype(np.float32)
    bw = grad(m.funcs["attn_in"], weights="c_attn.*")
    assert bw.weight_keys == ["c_attn.weight"] and len(bw.weight_grads) == 2
    out = interpret(bw.backward, {"x": x, bw.cotangents["t"]: dy}, store, mode="fp32")
    got = bw.gather(out, store)["c_attn.weight"]
    w = torch.tensor(store["c_attn.weight"], dtype=torch.float64, requires_grad=True)
    xt = torch.tensor(x, dtype=torch.float64)
    wq = w.t()[0:8].reshape(8, 8, 1, 1)
    wk = w.t()[8:16].reshape(8, 8, 1, 1)
    (torch.tanh(F.conv2d(xt, wq) * F.conv2d(xt, wk)) * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    ref = w.grad.numpy()
    assert got.shape == (8, 24)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)
    assert not got[:, 16:].any()  # the unused third of the tensor gets no gradient


def test_unview_inverts_the_const_view():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    view = np.transpose(a, [2, 0, 1])[1:4].reshape(3, 12)
    back = unview(view, a.shape, [2, 0, 1], [0, 1, 4])
    expect = np.zeros_like(a)
    expect[:, :, 1:4] = a[:, :, 1:4]
    np.testing.assert_array_equal(back, expect)


def test_bad_requests_are_clear_errors():
    m = parse(VIEWS, "v.ir")
    g = m.funcs["attn_in"]
    with pytest.raises(AutodiffError, match="no weight of func 'attn_in' matches 'c_atn.weight'") as e:
        grad(g, weights="c_atn.weight")
    assert "c_attn.weight" in (e.value.hint or "")
    with pytest.raises(AutodiffError, match="has no input 'y'"):
        grad(g, inputs=["y"])
    with pytest.raises(AutodiffError, match="unknown mode"):
        grad(g, mode="fast")
    with pytest.raises(AutodiffError, match="nothing to differentiate"):
        grad(g, weights=None)


NORM = """
func ln(%x: fp16[1, 64, 1, 8]) {
  %mu = reduce_mean(%x, axes=[1], keep_dims=true)
  %xc = sub(%x, %mu)
  %sq = mul(%xc, %xc)
  %var = reduce_mean(%sq, axes=[1], keep_dims=true)
  %eps = const(value=1e-05) : fp16[]
  %ve = add(%var, %eps)
  %r = rsqrt(%ve)
  %y = mul(%xc, %r)
  return %y
}
"""


def test_normalization_is_differentiated_as_a_whole_and_stays_finite_in_fp16(monkeypatch):
    """A row with standard deviation 2e-3 (a variance of 4e-6): rstd^3 = 1.2e8 overflows fp16, so
    the op-by-op chain gives Inf/NaN; the fused rule gives torch's gradient."""
    import anec.autodiff as ad

    m = parse(NORM, "n.ir")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((1, 64, 1, 8)) * 2e-3).astype(np.float16)
    dy = rng.standard_normal((1, 64, 1, 8)).astype(np.float16)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    xc = xt - xt.mean(1, keepdim=True)
    (xc * torch.rsqrt((xc * xc).mean(1, keepdim=True) + 1e-5) * torch.tensor(dy.astype(np.float64))).sum().backward()
    ref = xt.grad.numpy()

    bw = grad(m.funcs["ln"], weights=None, inputs=["x"])
    assert not any(n.op == "rsqrt" for n in bw.backward.nodes if n.results[0].name.startswith("dr"))
    got = interpret(bw.backward, {"x": x, bw.cotangents["y"]: dy}, mode="fp16")[bw.input_grads["x"]]
    c, r = cos_rel(got, ref)
    assert np.isfinite(got).all() and c >= 0.999 and r <= 1e-2, (c, r)

    monkeypatch.setattr(ad, "FUSED", [])
    chain = grad(m.funcs["ln"], weights=None, inputs=["x"])
    bad = interpret(chain.backward, {"x": x, chain.cotangents["y"]: dy}, mode="fp16")[chain.input_grads["x"]]
    assert not np.isfinite(bad).all()


@pytest.mark.parametrize("backend", ["interp", "sim"])
def test_conv_weight_gradients_on_the_host(mlp, backend, tmp_path):
    g, store, x, dy, (dx_ref, dw_ref) = mlp
    bw = grad(g, weights="all", inputs=["x"], weight_shapes=store, weight_grads="host")
    convs = {"h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight"}
    assert {h.key for h in bw.host_grads} == convs
    assert not convs & {w.key for w in bw.weight_grads}
    assert not any(n.op == "matmul" for n in bw.backward.nodes)  # no dW product on the device
    feed = {"x": x, bw.cotangents["y"]: dy}
    if backend == "interp":
        out = interpret(bw.backward, feed, store, mode="fp32")
    else:
        m = Module()
        m.add_func(bw.backward)
        with Runtime("sim", temp_root=tmp_path) as rt:
            out = rt.load(compile_module(m, weights=store).artifacts["mlp_grad"])(**feed)
    grads = bw.gather(out, store)
    for k, ref in dw_ref.items():
        c, r = cos_rel(grads[k], ref)
        assert c >= 0.999 and r <= 1e-2, (k, c, r)
