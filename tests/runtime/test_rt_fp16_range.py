"""fp16 that never lies: norms at every magnitude on the sim, and overflow made loud.

The range-safe pass (anec/passes/range_safe.py) must make RMSNorm, LayerNorm,
variance and L2-norm forms exact in fp32 terms for inputs up to |x| = 60000
(where the reference output fits fp16). Each case is checked against numpy
float64 through the tolerance policy, and once more with the pass left out of
the pipeline, where the same inputs must give a wrong answer (the test can
fail: the pass is what makes it pass). The runtime's finite check
(``Runtime(check_finite=True)``, ``ANEC_CHECK_FINITE=1``) names the program,
or the pipeline stage, that first produced inf/NaN.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.diagnostics import RuntimeFailure
from anec.ir.parser import parse
from anec.passes.pipelines import DEFAULT
from anec.runtime import Runtime
from anec.targets import get_target
from tolerances import assert_close  # noqa: E402

C, S = 64, 8

NORMS = f"""
func rms(%x: fp32[1, {C}, 1, {S}]) {{
  %xh = cast(%x, dtype=fp16)
  %sq = mul(%xh, %xh)
  %ms = reduce_mean(%sq, axes=[1], keep_dims=true)
  %eps = const(value=1e-05) : fp16[]
  %me = add(%ms, %eps)
  %r = rsqrt(%me)
  %yh = mul(%xh, %r)
  %y = cast(%yh, dtype=fp32)
  return %y
}}
func rms_pow(%x: fp32[1, {C}, 1, {S}]) {{
  %xh = cast(%x, dtype=fp16)
  %two = const(value=2.0) : fp16[]
  %sq = pow(%xh, %two)
  %ms = reduce_mean(%sq, axes=[1], keep_dims=true)
  %eps = const(value=1e-06) : fp16[]
  %me = add(%eps, %ms)
  %h = const(value=-0.5) : fp16[]
  %r = pow(%me, %h)
  %yh = mul(%r, %xh)
  %y = cast(%yh, dtype=fp32)
  %rr = cast(%r, dtype=fp32)
  return %y, %rr
}}
func ln(%x: fp32[1, {C}, 1, {S}]) {{
  %xh = cast(%x, dtype=fp16)
  %mu = reduce_mean(%xh, axes=[1], keep_dims=true)
  %xc = sub(%xh, %mu)
  %sq = mul(%xc, %xc)
  %var = reduce_mean(%sq, axes=[1], keep_dims=true)
  %eps = const(value=1e-05) : fp16[]
  %ve = add(%var, %eps)
  %r = rsqrt(%ve)
  %yh = mul(%xc, %r)
  %y = cast(%yh, dtype=fp32)
  return %y
}}
func l2(%x: fp32[1, {C}, 1, {S}]) {{
  %xh = cast(%x, dtype=fp16)
  %sq = mul(%xh, %xh)
  %ss = reduce_sum(%sq, axes=[1], keep_dims=false)
  %n = sqrt(%ss)
  %y = cast(%n, dtype=fp32)
  return %y
}}
func std(%x: fp32[1, {C}, 1, {S}]) {{
  %xh = cast(%x, dtype=fp16)
  %mu = reduce_mean(%xh, axes=[1], keep_dims=true)
  %xc = sub(%xh, %mu)
  %sq = mul(%xc, %xc)
  %v = reduce_mean(%sq, axes=[1], keep_dims=true)
  %k = const(value=1.015625) : fp16[]
  %vu = mul(%v, %k)
  %sd = sqrt(%vu)
  %y = cast(%sd, dtype=fp32)
  return %y
}}
func var(%x: fp32[1, {C}, 1, {S}]) {{
  %xh = cast(%x, dtype=fp16)
  %mu = reduce_mean(%xh, axes=[1], keep_dims=true)
  %xc = sub(%xh, %mu)
  %sq = mul(%xc, %xc)
  %v = reduce_mean(%sq, axes=[1], keep_dims=true)
  %y = cast(%v, dtype=fp32)
  return %y
}}
"""


def reference(func: str, x: np.ndarray) -> list[np.ndarray]:
    """float64 numpy of each func on the fp16-rounded input."""
    x = x.astype(np.float16).astype(np.float64)
    ms = (x * x).mean(1, keepdims=True)
    xc = x - x.mean(1, keepdims=True)
    var = (xc * xc).mean(1, keepdims=True)
    if func == "rms":
        return [x / np.sqrt(ms + 1e-5)]
    if func == "rms_pow":
        r = 1.0 / np.sqrt(ms + 1e-6)
        return [x * r, r]
    if func == "ln":
        return [xc / np.sqrt(var + 1e-5)]
    if func == "l2":
        return [np.sqrt((x * x).sum(1))]
    if func == "std":  # unbiased: n / (n - 1) = 64 / 63 ~ 1.015625 in fp16
        return [np.sqrt(var * 1.015625)]
    return [var]


def rows(scale: float, seed: int) -> np.ndarray:
    """Columns of different shapes, each with max |x| = ``scale``: gaussian, one massive
    channel over small values, an offset row, both signs at the extreme."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, C, 1, S))
    x[0, :, 0, 1] = rng.standard_normal(C) * 1e-3
    x[0, 7, 0, 1] = 1.0                      # one massive channel
    x[0, :, 0, 2] = 1.0 + 0.01 * rng.standard_normal(C)  # an offset row
    x[0, 0, 0, 3], x[0, 1, 0, 3] = 1.0, -1.0  # the extreme at both signs
    x = x / np.abs(x).max(axis=1, keepdims=True) * scale
    return x.astype(np.float32)


SCALES = [1e-2, 1.0, 300.0, 3000.0, 60000.0]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    m = parse(NORMS, "norms.ir")
    safe = compile_module(m, out_dir=tmp_path_factory.mktemp("safe"))
    plain = compile_module(parse(NORMS, "norms.ir"), out_dir=tmp_path_factory.mktemp("plain"),
                           passes=tuple(p for p in DEFAULT if p.name != "range-safe"))
    return safe, plain


def _fits(refs) -> bool:
    return all(np.isfinite(r).all() and np.abs(r).max() <= 65504 for r in refs)


@pytest.mark.parametrize("func", ["rms", "rms_pow", "ln", "l2", "std", "var"])
def test_norms_are_exact_at_every_magnitude(compiled, func):
    safe, plain = compiled
    checked = 0
    with Runtime(backend="sim") as rt:
        prog = rt.load(safe.artifacts[func])
        for k, scale in enumerate(SCALES):
            x = rows(scale, k)
            refs = reference(func, x)
            if not _fits(refs) or np.abs(refs[0]).max() < 2.0 ** -14:
                continue  # the true result is outside fp16: not this pass's claim
            got = prog(x=x)
            for (name, g), r in zip(got.items(), refs):
                assert_close(g, r.reshape(g.shape), f"range-safe/{func}:{name}", 16, f"|x| <= {scale:g}")
            checked += 1
    assert checked >= (2 if func == "var" else 3)


@pytest.mark.parametrize("func", ["rms", "ln", "l2", "std", "var"])
@pytest.mark.constraint("ANE-FP16-RANGE")
def test_without_the_pass_the_same_inputs_give_wrong_numbers(compiled, func):
    """The claim can fail: the forms as written overflow x * x past |x| = 256."""
    _, plain = compiled
    scale = 3000.0 if func != "var" else 300.0
    x = rows(scale, 1)
    ref = reference(func, x)[0]
    assert _fits([ref])
    with Runtime(backend="sim") as rt:
        got = next(iter(rt.load(plain.artifacts[func])(x=x).values()))
    err = np.abs(np.asarray(got, np.float64).reshape(ref.shape) - ref)
    assert not (np.nan_to_num(err, nan=np.inf).max() <= 0.02 * np.abs(ref).max())


def test_the_pass_keeps_other_uses_of_rstd(compiled):
    """rms_pow returns rsqrt(...) itself: it reads (1 / s) * rsqrt(...)."""
    safe, _ = compiled
    text = safe.artifacts["rms_pow"].mil_text
    assert "reduce_max(" in text and "rr = cast(" in text


BIG = """
func big(%x: fp32[1, 64, 1, 8]) {
  %xh = cast(%x, dtype=fp16)
  %k = const(value=1000.0) : fp16[]
  %a = mul(%xh, %k)
  %b = mul(%a, %k)
  %y = cast(%b, dtype=fp32)
  return %y
}
"""


def test_check_finite_names_the_program(tmp_path):
    art = compile_module(parse(BIG, "big.ir"), out_dir=tmp_path).artifacts["big"]
    with Runtime(backend="sim", check_finite=True) as rt:
        prog = rt.load(art)
        ok = prog(x=np.full((1, 64, 1, 8), 0.001, np.float32))["y"]
        assert np.allclose(ok, 1000.0, rtol=1e-2)
        with pytest.raises(RuntimeFailure) as info:
            prog(x=np.ones((1, 64, 1, 8), np.float32))
        assert "program 'big' produced inf/NaN from finite inputs: 'y' (512 of 512 elements)" in str(info.value)
        assert "anec check" in info.value.hint
        # non-finite inputs are the caller's: no error
        prog(x=np.full((1, 64, 1, 8), np.inf, np.float32))
    with Runtime(backend="sim") as rt:  # off by default: inf is a result
        assert np.isinf(rt.load(art)(x=np.ones((1, 64, 1, 8), np.float32))["y"]).all()


def test_check_finite_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ANEC_CHECK_FINITE", "1")
    with Runtime(backend="sim") as rt:
        assert rt.check_finite
    monkeypatch.setenv("ANEC_CHECK_FINITE", "0")
    with Runtime(backend="sim") as rt:
        assert not rt.check_finite


def chain(layers: int, blow_at: int) -> str:
    """A chain of weighted layers cut into a pipeline; layer ``blow_at`` multiplies by 10^4."""
    lines = ["func p(%x: fp16[1, 8, 1, 16]) {"]
    prev = "%x"
    for i in range(layers):
        k = 10000.0 if i == blow_at else 1.0
        lines += [f'  %w{i} = const(weight="l{i}.w") : fp16[8, 8, 1, 1]',
                  f"  %c{i} = conv1x1({prev}, %w{i})",
                  f"  %k{i} = const(value={k}) : fp16[]",
                  f"  %m{i} = mul(%c{i}, %k{i})",
                  f"  %r{i} = add(%m{i}, {prev})"]
        prev = f"%r{i}"
    lines.append(f"  return {prev}\n}}\n")
    return "\n".join(lines)


def test_check_finite_names_the_first_stage_of_a_pipeline(tmp_path):
    m = parse(chain(6, blow_at=3), "p.ir")
    store = {f"l{i}.w": (np.eye(8, dtype=np.float32) * 2).reshape(8, 8, 1, 1) for i in range(6)}
    art = compile_module(m, weights=store, target=get_target("m4").replace(max_blob_tensors=3),
                         out_dir=tmp_path).artifacts["p"]
    assert [st["weights"] for st in art.manifest.document["stages"]] == [2, 2, 2]  # layers 0-1, 2-3, 4-5
    x = np.full((1, 8, 1, 16), 1.0, np.float16)
    with Runtime(backend="sim", check_finite=True) as rt:
        prog = rt.load(art)
        prog(x=x * 0.0)  # finite all the way
        with pytest.raises(RuntimeFailure) as info:
            prog(x=x)
    # layer i holds 3^i until layer 3 multiplies 2 * 27 by 10^4 (> 65504): stage 1 computes it
    msg = str(info.value)
    assert "stage 1 ('p_s01'" in msg or "stage 1 (" in msg, msg
    assert "is the first to produce inf/NaN" in msg and "pipeline 'p'" in msg


@pytest.mark.parametrize("func", ["rms", "ln"])
def test_norm_gradients_hold_at_every_magnitude(func, tmp_path):
    """The backward func (anec.autodiff) recomputes the norm and reads its rstd: compiled through
    the same passes, its input gradient matches torch's float64 autograd up to |x| = 60000."""
    torch = pytest.importorskip("torch")
    from anec.autodiff import grad
    from anec.ir.graph import Module

    bw = grad(parse(NORMS, "norms.ir").funcs[func], weights=None, inputs=["x"])
    m = Module()
    m.add_func(bw.backward)
    art = compile_module(m, out_dir=tmp_path).artifacts[bw.backward.name]
    with Runtime(backend="sim") as rt:
        prog = rt.load(art)
        for k, scale in enumerate(SCALES[1:]):
            x = rows(scale, 10 + k)
            dy = np.random.default_rng(k).standard_normal(x.shape).astype(np.float32)
            xt = torch.tensor(x.astype(np.float16).astype(np.float64), requires_grad=True)
            xc = xt if func == "rms" else xt - xt.mean(1, keepdim=True)
            y = xc * torch.rsqrt((xc * xc).mean(1, keepdim=True) + 1e-5)
            (y * torch.tensor(dy.astype(np.float64))).sum().backward()
            got = prog(x=x, **{bw.cotangents["y"]: dy})[bw.input_grads["x"]]
            assert_close(got, xt.grad.numpy(), f"range-safe/{func}-grad:dx", 16, f"|x| <= {scale:g}")


SCORES = """
func scores(%q: fp32[1, 2, 16, 64], %k: fp32[1, 2, 16, 64]) {
  %qh = cast(%q, dtype=fp16)
  %kh = cast(%k, dtype=fp16)
  %s = matmul(%qh, %kh, transpose_y=true)
  %c = const(value=0.125) : fp16[]
  %t = mul(%s, %c)
  %p = softmax(%t, axis=-1)
  %y = cast(%p, dtype=fp32)
  return %y
}
"""


def test_attention_scores_are_scaled_before_the_dot_products(tmp_path):
    """|q|, |k| = 40 over 64 dims: q.k reaches 102400 (inf in fp16), q.k / 8 = 12800 fits."""
    art = compile_module(parse(SCORES, "s.ir"), out_dir=tmp_path).artifacts["scores"]
    rng = np.random.default_rng(0)
    q = np.sign(rng.standard_normal((1, 2, 16, 64))).astype(np.float32) * 40
    k = q.copy()
    k[:, :, 8:] *= -1  # half the keys point away
    with Runtime(backend="sim") as rt:
        got = rt.load(art)(q=q, k=k)["y"]
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / 8
    e = np.exp(s - s.max(-1, keepdims=True))
    assert_close(got, e / e.sum(-1, keepdims=True), "range-safe/scores:y", 8)


ACTIVATIONS = {
    "gelu_exact": ('%g = gelu(%xh, mode="exact")', lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    "gelu_tanh": ('%g = gelu(%xh, mode="tanh")',
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "silu": ("%s = sigmoid(%xh)\n  %g = mul(%xh, %s)", lambda x: x / (1 + np.exp(-x))),
    "softmax": ("%g = softmax(%xh, axis=1)",
                lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_hold_on_large_inputs(name, tmp_path):
    """GELU (x^3 overflows past |x| = 40, tanh saturates: no NaN), SiLU and softmax up to 60000."""
    body, ref = ACTIVATIONS[name]
    text = (f"func a(%x: fp32[1, {C}, 1, {S}]) {{\n  %xh = cast(%x, dtype=fp16)\n  {body}\n"
            "  %y = cast(%g, dtype=fp32)\n  return %y\n}\n")
    art = compile_module(parse(text, "a.ir"), out_dir=tmp_path).artifacts["a"]
    with Runtime(backend="sim") as rt, np.errstate(all="ignore"):
        prog = rt.load(art)
        for k, scale in enumerate(SCALES):
            x = rows(scale, 20 + k)
            want = ref(x.astype(np.float16).astype(np.float64))
            assert_close(prog(x=x)["y"], want, f"range-safe/{name}:y", 8, f"|x| <= {scale:g}")


def _long(func: str, n: int) -> str:
    body = {
        "mean": "%m = reduce_mean(%xh, axes=[1], keep_dims=true)\n  %y = cast(%m, dtype=fp32)",
        "ln": ("%mu = reduce_mean(%xh, axes=[1], keep_dims=true)\n  %xc = sub(%xh, %mu)\n"
               "  %sq = mul(%xc, %xc)\n  %var = reduce_mean(%sq, axes=[1], keep_dims=true)\n"
               "  %eps = const(value=1e-05) : fp16[]\n  %ve = add(%var, %eps)\n  %r = rsqrt(%ve)\n"
               "  %yh = mul(%xc, %r)\n  %y = cast(%yh, dtype=fp32)"),
    }[func]
    return f"func {func}(%x: fp32[1, {n}, 1, 4]) {{\n  %xh = cast(%x, dtype=fp16)\n  {body}\n  return %y\n}}\n"


def _long_inputs(func: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    if func == "mean":  # values near 0.01: x / N is a subnormal (17% off at N = 65536)
        x = np.full((1, n, 1, 4), 0.01)  # column 0: every x / N rounds the same way
        x[0, :, 0, 1] += 0.002 * rng.standard_normal(n)
        x[0, :, 0, 2] = 0.3
        x[0, :, 0, 3] = rng.standard_normal(n)
    else:  # a massive channel over small values: the small squares vanish in d * d / N
        x = rng.standard_normal((1, n, 1, 4))
        x[0, 5] = 600.0
    x = x.astype(np.float16).astype(np.float64)
    if func == "mean":
        return x.astype(np.float32), x.mean(1, keepdims=True)
    xc = x - x.mean(1, keepdims=True)
    return x.astype(np.float32), xc / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("func,n", [("mean", 16384), ("mean", 65536), ("ln", 16384)])
def test_means_over_long_axes(compiled, func, n, tmp_path):
    """Means the pass writes sum in exact power-of-two steps, and a long reduce_mean is scaled by
    its row's largest magnitude first; without the pass the same inputs are off by 2% to 17%."""
    text = _long(func, n)
    safe = compile_module(parse(text, "long.ir"), out_dir=tmp_path / "safe").artifacts[func]
    plain = compile_module(parse(text, "long.ir"), out_dir=tmp_path / "plain",
                           passes=tuple(p for p in DEFAULT if p.name != "range-safe")).artifacts[func]
    x, ref = _long_inputs(func, n)
    with Runtime(backend="sim") as rt:
        got = rt.load(safe)(x=x)["y"]
        bad = rt.load(plain)(x=x)["y"]
    assert_close(got, ref, f"range-safe/long-{func}:y", 16, f"N = {n}")
    scale = np.abs(ref) if func == "mean" else np.abs(ref).max()  # a mean per column
    assert (np.abs(got - ref) / scale).max() < 2e-3
    assert (np.abs(bad - ref) / scale).max() > 0.015
