"""Interpreter behaviour: the two precision modes, input checking, helpers."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from anec.diagnostics import AnecError
from anec.ir.builder import Builder
import anec.ir.interp as interp_module
from anec.ir.interp import interpret, interpret_module, load_input, random_inputs, select_func
from anec.ir.parser import parse, parse_file
from anec.ir.weight_binding import resolve_weights

ROOT = Path(__file__).resolve().parents[2]


def accumulate_graph(steps: int = 10):
    """x + 1e-4, ten times, in fp16: each step is below half an fp16 ulp of 1.0."""
    b = Builder("acc")
    x = b.input("x", "fp16", [4])
    eps = b.const_value(1e-4, "fp16[]", name="eps")
    v = x
    for _ in range(steps):
        v = b.add(v, eps)
    b.ret(b.cast(v, dtype="fp32", name="y"))
    return b.graph


def test_fp16_mode_rounds_every_value_and_fp32_mode_does_not():
    g = accumulate_graph()
    x = np.ones(4, np.float32)
    y32 = interpret(g, {"x": x}, mode="fp32")["y"]
    y16 = interpret(g, {"x": x}, mode="fp16")["y"]
    eps16 = float(np.float16(1e-4))  # the const is declared fp16: rounded in both modes
    np.testing.assert_allclose(y32, 1.0 + 10 * eps16, rtol=1e-6)
    np.testing.assert_array_equal(y16, np.ones(4, np.float32))  # 1 + 1e-4 rounds back to 1 each step


def test_fp32_mode_still_rounds_at_casts_and_declared_fp16_inputs():
    b = Builder("c")
    x = b.input("x", "fp32", [3])
    h = b.input("h", "fp16", [3])
    xh = b.cast(x, dtype="fp16", name="xh")
    b.ret(b.identity(xh, name="a"), b.identity(h, name="b"))
    v = np.array([1.0001, 70000.0, 1 / 3], np.float64)
    out = interpret(b.graph, {"x": v, "h": v}, mode="fp32")
    with np.errstate(over="ignore"):
        want = v.astype(np.float16).astype(np.float32)
    assert out["a"].dtype == np.float32  # fp32 mode returns float32 for fp16 values
    np.testing.assert_array_equal(out["a"], want)  # including 70000 -> inf
    np.testing.assert_array_equal(out["b"], want)
    out16 = interpret(b.graph, {"x": v, "h": v}, mode="fp16")
    assert out16["a"].dtype == np.float16


def test_outputs_in_return_order():
    b = Builder("o")
    x = b.input("x", "fp32", [2])
    z = b.neg(x, name="z")
    a = b.exp(x, name="a")
    b.ret(z, a)
    assert list(interpret(b.graph, {"x": np.zeros(2)})) == ["z", "a"]


def test_input_errors_name_the_input():
    b = Builder("f")
    x = b.input("x", "fp32", [2, 3])
    n = b.input("n", "int32", [2])
    b.ret(b.neg(x, name="y"), b.identity(n, name="m"))
    g = b.graph
    ok = {"x": np.zeros((2, 3)), "n": np.zeros(2, np.int64)}  # float64 and int64 convert
    interpret(g, ok)
    with pytest.raises(AnecError, match="missing input 'n' \\(int32\\[2\\]\\) for func 'f'"):
        interpret(g, {"x": ok["x"]})
    with pytest.raises(AnecError, match="input 'x' has shape \\[3, 2\\] but the func declares fp32\\[2, 3\\]"):
        interpret(g, {**ok, "x": np.zeros((3, 2))})
    with pytest.raises(AnecError, match="input 'n' has dtype float32 which does not convert to int32"):
        interpret(g, {**ok, "n": np.zeros(2, np.float32)})
    with pytest.raises(AnecError, match="input 'n' has dtype int64 which does not convert to int32"):
        interpret(g, {**ok, "n": np.array([2**40, 0])})
    with pytest.raises(AnecError, match="func 'f' has no input 'xx'") as ei:
        interpret(g, {**ok, "xx": ok["x"]})
    assert ei.value.hint == "did you mean 'x'?"
    with pytest.raises(AnecError, match="unknown interpreter mode 'bf16'"):
        interpret(g, ok, mode="bf16")


def test_random_inputs_deterministic_and_typed():
    b = Builder("f")
    b.input("x", "fp16", [1, 8, 1, 16])
    b.input("mask", "fp32", [1, 1, 16, 16])
    b.input("ids", "int32", [16])
    b.input("flags", "bool", [3])
    r1, r2, r3 = random_inputs(b.graph, 0), random_inputs(b.graph, 0), random_inputs(b.graph, 1)
    assert list(r1) == ["x", "mask", "ids", "flags"]
    for k in r1:
        np.testing.assert_array_equal(r1[k], r2[k])
    assert not np.array_equal(r1["x"], r3["x"])
    assert r1["x"].dtype == np.float16 and r1["ids"].dtype == np.int32 and r1["flags"].dtype == bool
    assert r1["ids"].min() >= -8 and r1["ids"].max() <= 8
    assert 0.5 < r1["mask"].std() < 1.5


def test_interpret_module_selects_func():
    m = parse_file(ROOT / "examples" / "multi_func.ir")
    w = resolve_weights(m, random_seed=0)
    enc = m.funcs["encode"]
    out = interpret_module(m, "encode", random_inputs(enc, 0), w)
    assert list(out) == ["left", "neg_right"]
    with pytest.raises(AnecError, match="the module has 2 funcs; choose one"):
        interpret_module(m, None, {}, w)
    with pytest.raises(AnecError, match="no func 'encod' in the module") as ei:
        interpret_module(m, "encod", {}, w)
    assert ei.value.hint == "did you mean 'encode'?"


def test_gpt2_mlp_example_matches_torch():
    """The whole gpt2_mlp.ir block against torch's layer_norm / conv2d / gelu(tanh)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    m = parse_file(ROOT / "examples" / "gpt2_mlp.ir")
    store = resolve_weights(m, random_seed=0)
    g = m.func()
    x = random_inputs(g, 0)["x"]
    got = interpret(g, {"x": x}, store, mode="fp32")["y"]

    def w(key, shape):  # weights as the IR declares them: rounded to fp16
        return torch.from_numpy(store[key].astype(np.float16).astype(np.float32).reshape(shape))

    xh = torch.from_numpy(x.astype(np.float16).astype(np.float32))
    ln = F.layer_norm(xh.permute(0, 2, 3, 1), (768,), w("h.0.ln_2.weight", (768,)), w("h.0.ln_2.bias", (768,)),
                      eps=float(np.float16(1e-5))).permute(0, 3, 1, 2)
    h = F.conv2d(ln, w("h.0.mlp.c_fc.weight", (3072, 768, 1, 1)), w("h.0.mlp.c_fc.bias", (3072,)))
    a = F.gelu(h, approximate="tanh")
    o = F.conv2d(a, w("h.0.mlp.c_proj.weight", (768, 3072, 1, 1)), w("h.0.mlp.c_proj.bias", (768,)))
    # fp32 mode: everything between the two casts in float32, like torch here. The
    # tolerance covers float32 summation-order differences over 768/3072-long dots.
    np.testing.assert_allclose(got, (xh + o).numpy(), rtol=1e-4, atol=1e-4)
    fp16 = interpret(g, {"x": x}, store, mode="fp16")["y"]
    err = np.abs(fp16 - got).max()
    assert 0 < err < 0.05  # the device-like run differs, but only by fp16 noise


def test_gpt2_mlp_fp16_mode_matches_torch_rounding_per_op():
    """fp16 mode on a whole block vs torch computing each op and rounding it to fp16.

    With torch computing each op in float64 the two are bit-identical: both round a
    (nearly) exact per-op result once to fp16. With torch computing in float32 the
    convs' float32 accumulation error shows where a sum cancels (a result near 0 has a
    tiny fp16 ulp): measured 99.7% of outputs within 1 ulp; asserted 99%.
    """
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    m = parse_file(ROOT / "examples" / "gpt2_mlp.ir")
    store = resolve_weights(m, random_seed=1)
    g = m.func()
    x = random_inputs(g, 1)["x"]
    got = interpret(g, {"x": x}, store, mode="fp16")["y"]

    def block(compute):
        def r(t):  # round a result to fp16 storage, keep computing in `compute`
            return t.to(torch.float16).to(compute)

        def w(key, shape):
            return r(torch.from_numpy(store[key]).reshape(shape))

        xh = r(torch.from_numpy(x))
        mu = r(xh.mean(dim=1, keepdim=True))
        xc = r(xh - mu)
        var = r(r(xc * xc).mean(dim=1, keepdim=True))
        rstd = r(torch.rsqrt(r(var + r(torch.tensor(1e-5, dtype=compute)))))
        ln = r(r(r(xc * rstd) * w("h.0.ln_2.weight", (1, 768, 1, 1))) + w("h.0.ln_2.bias", (1, 768, 1, 1)))
        h = r(F.conv2d(ln, w("h.0.mlp.c_fc.weight", (3072, 768, 1, 1)), w("h.0.mlp.c_fc.bias", (3072,))))
        a = r(F.gelu(h, approximate="tanh"))
        o = r(F.conv2d(a, w("h.0.mlp.c_proj.weight", (768, 3072, 1, 1)), w("h.0.mlp.c_proj.bias", (768,))))
        return r(xh + o).numpy().astype(np.float32)

    np.testing.assert_array_equal(got, block(torch.float64))
    want = block(torch.float32)
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float32)
    assert (np.abs(got - want) <= ulp).mean() >= 0.99


def test_cast_semantics_truncate_saturate_and_bool():
    b = Builder("c")
    x = b.input("x", "fp32", [6])
    b.ret(b.cast(x, dtype="int8", name="i8"), b.cast(x, dtype="int32", name="i32"),
          b.cast(x, dtype="bool", name="bl"), b.cast(b.cast(x, dtype="uint8"), dtype="fp16", name="u8h"))
    v = np.array([2.7, -2.7, 300.0, -300.0, np.nan, 0.0], np.float32)
    out = interpret(b.graph, {"x": v})
    np.testing.assert_array_equal(out["i8"], np.array([2, -2, 127, -128, 0, 0], np.int8))
    np.testing.assert_array_equal(out["i32"], np.array([2, -2, 300, -300, 0, 0], np.int32))
    np.testing.assert_array_equal(out["bl"], [True, True, True, True, True, False])  # NaN != 0
    np.testing.assert_array_equal(out["u8h"], np.array([2, 0, 255, 0, 0, 0], np.float32))
    assert out["i8"].dtype == np.int8 and out["bl"].dtype == bool


def test_interpret_module_passes_the_mode_on():
    m = parse("func f(%x: fp16[4]) {\n  %y = exp(%x) : fp16[4]\n  return %y\n}\n", "f.ir")
    x = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    assert interpret_module(m, None, {"x": x})["y"].dtype == np.float32
    out16 = interpret_module(m, None, {"x": x}, mode="fp16")["y"]
    assert out16.dtype == np.float16
    np.testing.assert_array_equal(out16, np.exp(x).astype(np.float16))


def test_select_func_hints():
    m = parse_file(ROOT / "examples" / "multi_func.ir")
    with pytest.raises(AnecError, match="no func 'zzz' in the module") as ei:
        select_func(m, "zzz")
    assert ei.value.hint == "funcs: encode, classify"
    with pytest.raises(AnecError, match="the module has 2 funcs; choose one") as ei:
        select_func(m, None)
    assert ei.value.hint == "pass --func with one of: encode, classify"
    with pytest.raises(AnecError, match="the module has 0 funcs; choose one") as ei:
        select_func(parse("", "empty.ir"), None)
    assert ei.value.hint is None
    assert select_func(m, "classify") is m.funcs["classify"]


def test_random_inputs_shapes_kinds_and_default_seed():
    b = Builder("f")
    b.input("x", "fp32", [40, 50])
    b.input("ids", "int32", [2000])
    b.input("u", "uint8", [2000])
    b.input("flags", "bool", [2000])
    r = random_inputs(b.graph)
    for k, v in random_inputs(b.graph, 0).items():
        np.testing.assert_array_equal(r[k], v)  # the default seed is 0
        assert r[k].shape == b.graph.inputs[list(r).index(k)].type.shape
    assert set(np.unique(r["ids"])) == set(range(-8, 9))
    assert set(np.unique(r["u"])) == set(range(0, 9))
    assert r["flags"].dtype == bool and 0.4 < r["flags"].mean() < 0.6  # a fair coin
    assert abs(r["x"].mean()) < 0.1 and 0.9 < r["x"].std() < 1.1


def test_load_input_reads_npy_and_refuses_everything_else(tmp_path, monkeypatch):
    good = tmp_path / "a.npy"
    np.save(good, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(load_input("x", str(good)), np.arange(6).reshape(2, 3))

    with pytest.raises(AnecError, match="input 'x': no such file"):
        load_input("x", str(tmp_path / "nope.npy"))
    with pytest.raises(AnecError) as ei:
        load_input("x", str(tmp_path))
    assert str(ei.value).splitlines()[0].endswith(f"input 'x' '{tmp_path}' is a directory, not a regular file")
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)  # refused at once, never waited on
    with pytest.raises(AnecError, match="is a FIFO, not a regular file"):
        load_input("x", str(fifo))
    text = tmp_path / "t.npy"
    text.write_text("1 2 3")
    with pytest.raises(AnecError, match="is not a .npy file of numbers") as ei:
        load_input("x", str(text))
    assert "numpy.save" in ei.value.hint
    pickled = tmp_path / "p.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(AnecError, match="is not a .npy file of numbers"):
        load_input("x", str(pickled))

    # an .npz holds several arrays: refused, and the archive is closed, not left open
    npz = tmp_path / "two.npz"
    np.savez(npz, a=np.zeros(2), b=np.ones(2))
    opened = []
    real_load = np.load

    def spy(*a, **kw):
        opened.append(real_load(*a, **kw))
        return opened[-1]

    monkeypatch.setattr(interp_module.np, "load", spy)
    with pytest.raises(AnecError, match="holds several arrays"):
        load_input("x", str(npz))
    assert opened and opened[0].fid is None and opened[0].zip is None


def test_an_op_reference_of_the_wrong_shape_is_an_internal_error(monkeypatch):
    """The op table's shape inference and its numpy reference must agree; a reference
    that breaks this is reported with both shapes, not stored."""
    b = Builder("f")
    x = b.input("x", "fp32", [3])
    b.ret(b.exp(x, name="y"))
    real = interp_module.get_op

    class Short:
        def __init__(self, op):
            self.op = op

        def ref(self, args, opt, attrs):
            return [r[:2] for r in self.op.ref(args, opt, attrs)]

    monkeypatch.setattr(interp_module, "get_op", lambda name: Short(real(name)))
    with pytest.raises(AssertionError, match=r"^op produced shape \[2\] for fp32\[3\]$"):
        interpret(b.graph, {"x": np.zeros(3)})


def test_integer_values_are_computed_exactly():
    """Integers are not computed in float32 (which holds 24 bits): 2**24 + 1 stays odd."""
    b = Builder("f")
    x = b.input("x", "int32", [3])
    y = b.input("y", "int32", [3])
    b.ret(b.add(x, y, name="s"))
    out = interpret(b.graph, {"x": np.array([2**24 + 1, 2**30 + 1, -5], np.int32), "y": np.array([2, 2, 1], np.int32)})
    assert out["s"].dtype == np.int32
    np.testing.assert_array_equal(out["s"], [2**24 + 3, 2**30 + 3, -4])


def test_an_input_that_is_not_an_array_is_located():
    m = parse("func f(%x: fp32[2, 2]) {\n  %y = exp(%x) : fp32[2, 2]\n  return %y\n}\n", "f.ir")
    with pytest.raises(AnecError, match=r"^f\.ir:1:8: error: input 'x' is not an array: .*inhomogeneous"):
        interpret(m.func(), {"x": [[1.0, 2.0], [3.0]]})


def test_input_kinds_each_dtype_accepts():
    b = Builder("f")
    x = b.input("x", "fp32", [2])
    m = b.input("m", "bool", [2])
    n = b.input("n", "int32", [2])
    b.ret(b.identity(x, name="xo"), b.identity(m, name="mo"), b.identity(n, name="no"))
    ok = {"x": np.array([1, 2], np.int16), "m": np.array([True, False]), "n": np.array([True, False])}
    out = interpret(b.graph, ok)  # ints convert to floats, bools to ints
    np.testing.assert_array_equal(out["mo"], [True, False])
    np.testing.assert_array_equal(out["no"], [1, 0])
    for name, bad in (("x", np.array([True, False])), ("x", np.array([1j, 2j])), ("m", np.array([1, 0])),
                      ("m", np.array([1.0, 0.0])), ("n", np.array(["a", "b"]))):
        with pytest.raises(AnecError, match=f"input '{name}' has dtype {bad.dtype} which does not convert") as ei:
            interpret(b.graph, {**ok, name: bad})
        assert ei.value.hint.startswith("pass an array convertible to")
    with pytest.raises(AnecError, match="has shape") as ei:
        interpret(b.graph, {**ok, "x": np.zeros(3)})
    assert ei.value.hint == "reshape the array to the declared shape"


def test_integer_inputs_accept_their_whole_range_and_nothing_past_it():
    b = Builder("f")
    n = b.input("n", "int32", [2])
    u = b.input("u", "uint8", [2])
    b.ret(b.identity(n, name="no"), b.identity(u, name="uo"))
    lo, hi = -(2**31), 2**31 - 1
    out = interpret(b.graph, {"n": np.array([lo, hi], np.int64), "u": np.array([0, 255], np.int64)})
    np.testing.assert_array_equal(out["no"], [lo, hi])
    np.testing.assert_array_equal(out["uo"], [0, 255])
    for name, bad in (("n", [lo - 1, 0]), ("n", [0, hi + 1]), ("u", [-1, 0]), ("u", [0, 256])):
        ins = {"n": np.array([0, 0], np.int64), "u": np.array([0, 0], np.int64), name: np.array(bad, np.int64)}
        with pytest.raises(AnecError, match=f"input '{name}' has dtype int64 which does not convert"):
            interpret(b.graph, ins)


def test_fp32_mode_computes_in_float32_not_float64():
    """(x * x) - 1 with x = 1 + 2**-12: float32 rounds x * x to 1 + 2**-11 (losing 2**-24),
    float64 keeps it; the fp32 mode is float32 arithmetic, op by op."""
    b = Builder("f")
    x = b.input("x", "fp32", [1])
    one = b.const_value(1.0, "fp32[]", name="one")
    b.ret(b.sub(b.mul(x, x), one, name="y"))
    out = interpret(b.graph, {"x": np.array([1 + 2**-12], np.float32)})
    assert out["y"].dtype == np.float32
    assert out["y"][0] == np.float32(2**-11)


def test_input_conversion_errors_are_located_with_a_hint():
    m = parse("func f(%n: int32[2]) {\n  %y = identity(%n) : int32[2]\n  return %y\n}\n", "f.ir")
    with pytest.raises(AnecError, match=r"^f\.ir:1:8: error: input 'n' has dtype float32") as ei:
        interpret(m.func(), {"n": np.zeros(2, np.float32)})
    assert ei.value.hint == "pass an array convertible to int32 without loss of kind or range"


def test_an_fp16_input_past_the_range_is_inf_without_a_warning():
    b = Builder("f")
    h = b.input("h", "fp16", [2])
    b.ret(b.identity(h, name="y"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = interpret(b.graph, {"h": np.array([70000.0, -1.0], np.float32)})
    np.testing.assert_array_equal(out["y"], [np.inf, -1.0])


def test_interpret_error_hints():
    m = parse("func f(%x: fp32[2], %n: int32[2]) {\n  %y = exp(%x) : fp32[2]\n  return %y\n}\n", "f.ir")
    g = m.func()
    ok = {"x": np.zeros(2, np.float32), "n": np.zeros(2, np.int32)}
    with pytest.raises(AnecError, match="unknown interpreter mode 'bf16'") as ei:
        interpret(g, ok, mode="bf16")
    assert ei.value.hint == "use fp32 or fp16"
    with pytest.raises(AnecError, match=r"^f\.ir:1:21: error: missing input 'n' \(int32\[2\]\)") as ei:
        interpret(g, {"x": ok["x"]})
    assert ei.value.hint == "give it with --input n=PATH.npy, or use --random-inputs SEED"
    with pytest.raises(AnecError, match=r"^f\.ir:1:6: error: func 'f' has no input 'zzz'") as ei:
        interpret(g, {**ok, "zzz": ok["x"]})
    assert ei.value.hint == "inputs: x, n"


def test_inputs_and_consts_returned_as_they_are_follow_the_mode():
    """fp32 mode returns every float output as float32, fp16 mode in its IR dtype, also
    when the output is an input or a const itself (no op in between)."""
    m = parse("func f(%x: fp16[2]) {\n  %c = const(value=0.5) : fp16[2]\n  return %x, %c\n}\n", "f.ir")
    x = np.array([1.0, 70000.0])
    for mode, dt in (("fp32", np.float32), ("fp16", np.float16)):
        out = interpret(m.func(), {"x": x}, mode=mode)
        assert out["x"].dtype == dt and out["c"].dtype == dt
        np.testing.assert_array_equal(out["x"], [1.0, np.inf])
        np.testing.assert_array_equal(out["c"], [0.5, 0.5])


def test_overflow_and_nan_inside_ops_are_results_not_warnings():
    b = Builder("f")
    x = b.input("x", "fp32", [3])
    b.ret(b.exp(x, name="e"), b.sqrt(x, name="s"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mode in ("fp32", "fp16"):
            out = interpret(b.graph, {"x": np.array([100.0, -1.0, 4.0], np.float32)}, mode=mode)
            assert out["e"][0] == np.inf and np.isnan(out["s"][1]) and out["s"][2] == 2.0
