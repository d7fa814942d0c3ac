"""Weights: loading, random weights, resolution from a module, materialization."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from anec.diagnostics import WeightError
from anec.ir.builder import Builder
from anec.ir.graph import Module
from anec.ir.parser import parse, parse_file
from anec.ir.types import DType, TensorType
from anec.ir.weight_binding import check_weights, materialize, random_weights, resolve_weights
from anec.weight_store import WeightStore, load_weights

ROOT = Path(__file__).resolve().parents[2]

TENSORS = {
    "a.weight": np.arange(24, dtype=np.float32).reshape(4, 6),
    "a.bias": np.linspace(-1, 1, 4).astype(np.float16),
    "ids": np.array([1, 2, 3], dtype=np.int32),
}


def test_safetensors_and_npz_round_trip(tmp_path):
    st, npz = tmp_path / "w.safetensors", tmp_path / "w.npz"
    save_file(TENSORS, str(st))
    np.savez(npz, **TENSORS)
    for path in (st, npz):
        store = load_weights(path)
        assert store.source == str(path)
        assert set(store) == set(TENSORS)
        for k, v in TENSORS.items():
            assert store[k].dtype == v.dtype
            np.testing.assert_array_equal(store[k], v)


def test_load_errors(tmp_path):
    with pytest.raises(WeightError, match="does not exist") as ei:
        load_weights(tmp_path / "nope.safetensors")
    assert "--random-weights" in ei.value.hint
    (tmp_path / "w.pt").write_bytes(b"x")
    with pytest.raises(WeightError, match="unsupported weight file") as ei:
        load_weights(tmp_path / "w.pt")
    assert ".safetensors or .npz" in ei.value.hint
    (tmp_path / "bad.safetensors").write_bytes(b"garbage that is not a header")
    with pytest.raises(WeightError, match="not a safetensors file"):
        load_weights(tmp_path / "bad.safetensors")
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    with pytest.raises(WeightError, match="cannot read npz file"):
        load_weights(tmp_path / "bad.npz")


def test_bf16_safetensors_is_a_clear_error(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as save_torch

    path = tmp_path / "bf.safetensors"
    save_torch({"x": torch.zeros(2, dtype=torch.bfloat16), "y": torch.zeros(2)}, str(path))
    with pytest.raises(WeightError, match="tensor 'x' is bf16, which numpy cannot hold") as ei:
        load_weights(path)
    assert "fp16" in ei.value.hint


def const_node(key, type_, **attrs):
    b = Builder("f")
    v = b.const_weight(key, type_, name="w", **attrs)
    return v.producer


def test_materialize_reshape_and_cast():
    store = WeightStore(TENSORS, "mem")
    out = materialize(const_node("a.weight", "fp16[4, 6, 1, 1]"), store)
    assert out.dtype == np.float16 and out.shape == (4, 6, 1, 1)
    np.testing.assert_array_equal(out.reshape(4, 6), TENSORS["a.weight"])
    bias = materialize(const_node("a.bias", "fp32[1, 4, 1, 1]"), store)
    assert bias.dtype == np.float32
    np.testing.assert_array_equal(bias.ravel(), TENSORS["a.bias"].astype(np.float32))


def test_materialize_perm_then_slice():
    store = WeightStore(TENSORS, "mem")
    # transpose [4, 6] -> [6, 4], then rows 2..5 of the transposed tensor
    out = materialize(const_node("a.weight", "fp32[3, 4]", perm=[1, 0], slice=[0, 2, 5]), store)
    np.testing.assert_array_equal(out, TENSORS["a.weight"].T[2:5])
    # slice along axis 1 of the transposed tensor, reshaped to a conv weight
    out = materialize(const_node("a.weight", "fp32[6, 2, 1, 1]", perm=[1, 0], slice=[1, 1, 3]), store)
    np.testing.assert_array_equal(out.reshape(6, 2), TENSORS["a.weight"].T[:, 1:3])


def test_materialize_errors_name_the_key():
    store = WeightStore(TENSORS, "w.safetensors")
    with pytest.raises(WeightError, match="weight 'a.weigth' is not in w.safetensors") as ei:
        materialize(const_node("a.weigth", "fp16[4, 6]"), store)
    assert ei.value.hint == "did you mean 'a.weight'?"
    with pytest.raises(WeightError, match=r"weight 'a.weight' has shape \[4, 6\] \(24 elements\) but const %w is "
                       r"declared fp16\[5, 6\] \(30 elements\)"):
        materialize(const_node("a.weight", "fp16[5, 6]"), store)
    with pytest.raises(WeightError, match=r"weight 'a.weight' has shape \[4, 6\] \(24 elements after perm/slice: 12\)"):
        materialize(const_node("a.weight", "fp16[24]", slice=[0, 0, 2]), store)
    with pytest.raises(WeightError, match="weight 'ids' is stored as int32 but const %w is declared fp16") as ei:
        materialize(const_node("ids", "fp16[3]"), store)
    assert "declare the const as int32[...] and cast it" in ei.value.hint
    wide = WeightStore({"ids": np.arange(3, dtype=np.int64)}, "w.npz")
    with pytest.raises(WeightError, match="weight 'ids' is stored as int64") as ei:
        materialize(const_node("ids", "fp16[3]"), wide)
    assert ei.value.hint.startswith("anec has no int64 dtype: save the tensor as float16/float32")
    with pytest.raises(WeightError, match="weight 'a.weight' is stored as float32 but const %w is declared int32"):
        materialize(const_node("a.weight", "int32[24]"), store)
    with pytest.raises(WeightError, match="weight 'a.weight' has rank 2 but const %w has perm of length 3"):
        materialize(const_node("a.weight", "fp16[24]", perm=[2, 1, 0]), store)
    with pytest.raises(WeightError, match=r"slice \[1, 0, 7\] of const %w is out of bounds for weight 'a.weight'"):
        materialize(const_node("a.weight", "fp16[4, 7]", slice=[1, 0, 7]), store)


def test_materialize_error_carries_the_span():
    m = parse('func f(%x: fp16[2]) {\n  %w = const(weight="k") : fp16[2]\n  %y = add(%x, %w)\n  return %y\n}\n',
              "f.ir")
    with pytest.raises(WeightError) as ei:
        check_weights(m, WeightStore({}, "empty.npz"))
    assert ei.value.span is not None and ei.value.span.location == "f.ir:2:8"
    assert "f.ir:2:8: error: weight 'k' is not in empty.npz" in ei.value.render()


def test_fp16_overflow_is_not_a_weight_error():
    store = WeightStore({"big": np.array([1e6, -1e6], np.float32)})
    out = materialize(const_node("big", "fp16[2]"), store)
    assert np.isinf(out).all()


def test_check_weights_reports_all_problems():
    m = parse_file(ROOT / "examples" / "gpt2_mlp.ir")
    good = random_weights(m, 0)
    check_weights(m, good)
    broken = dict(good)
    del broken["h.0.ln_2.weight"]
    broken["h.0.mlp.c_fc.weight"] = np.zeros((10, 10), np.float32)
    with pytest.raises(WeightError, match="weight 'h.0.ln_2.weight' is not in") as ei:
        check_weights(m, WeightStore(broken, "broken"))
    assert len(ei.value.notes) == 1 and "h.0.mlp.c_fc.weight" in ei.value.notes[0]


def test_random_weights_deterministic_and_fan_in_scaled():
    m = parse_file(ROOT / "examples" / "gpt2_mlp.ir")
    w1, w2, w3 = random_weights(m, 0), random_weights(m, 0), random_weights(m, 1)
    assert w1.source == "random(seed=0)"
    for k in w1:
        np.testing.assert_array_equal(w1[k], w2[k])
        assert not np.array_equal(w1[k], w3[k])
    fc = w1["h.0.mlp.c_fc.weight"]
    assert fc.shape == (3072, 768, 1, 1) and fc.dtype == np.float32
    assert abs(fc.std() - 1 / np.sqrt(768)) < 0.02 / np.sqrt(768)
    proj = w1["h.0.mlp.c_proj.weight"]
    assert abs(proj.std() - 1 / np.sqrt(3072)) < 0.02 / np.sqrt(3072)
    ln_w, ln_b = w1["h.0.ln_2.weight"], w1["h.0.ln_2.bias"]
    assert abs(ln_w.mean() - 1.0) < 0.01 and abs(ln_b.mean()) < 0.01 and 0.015 < ln_b.std() < 0.025
    assert abs(w1["h.0.mlp.c_fc.bias"].mean()) < 0.01  # a bias is not a norm scale


def test_random_weights_per_key_independent_of_other_keys():
    a = Builder("f")
    a.const_weight("k1", "fp16[8, 4]")
    b = Builder("f")
    b.const_weight("k0", "fp16[3]")
    b.const_weight("k1", "fp16[8, 4]")
    np.testing.assert_array_equal(random_weights(a.graph, 7)["k1"], random_weights(b.graph, 7)["k1"])


def test_random_weights_stored_shape_undoes_perm():
    b = Builder("f")
    b.const_weight("t", "fp16[1000, 256]", perm=[1, 0])
    assert random_weights(b.graph, 0)["t"].shape == (256, 1000)
    c = Builder("f")
    c.const_weight("t", "fp16[10, 256]", perm=[1, 0], slice=[0, 0, 10])
    with pytest.raises(WeightError, match="cannot tell the stored shape of weight 't'"):
        random_weights(c.graph, 0)


def module_with(tmp_path, *files) -> Module:
    """A module with one ``weights`` directive per (file, keys) and a const per key."""
    b = Builder("f")
    acc = b.input("x", "fp32", [2])
    for _, keys in files:
        for k in keys:
            acc = b.add(acc, b.const_weight(k, "fp32[2]"))
    b.ret(b.identity(acc, name="y"))
    m = Builder.module(b, weights=[name for name, _ in files], path=str(tmp_path / "model.ir"))
    return m


def test_resolve_weights_directives_relative_to_module(tmp_path):
    np.savez(tmp_path / "a.npz", a=np.ones(2, np.float32))
    save_file({"b": np.zeros(2, np.float32)}, str(tmp_path / "b.safetensors"))
    m = module_with(tmp_path, ("a.npz", ["a"]), ("b.safetensors", ["b"]))
    cwd = os.getcwd()
    try:
        os.chdir("/")
        store = resolve_weights(m)
    finally:
        os.chdir(cwd)
    assert set(store) == {"a", "b"}
    assert store.origins["b"].endswith("b.safetensors")


def test_resolve_weights_duplicates_missing_and_override(tmp_path):
    np.savez(tmp_path / "a.npz", a=np.ones(2, np.float32))
    np.savez(tmp_path / "a2.npz", a=np.zeros(2, np.float32))
    dup = module_with(tmp_path, ("a.npz", ["a"]), ("a2.npz", []))
    with pytest.raises(WeightError, match="weight 'a' is in both .*a.npz and .*a2.npz"):
        resolve_weights(dup)
    missing = module_with(tmp_path, ("gone.safetensors", ["g"]))
    with pytest.raises(WeightError, match="weight file '.*gone.safetensors' does not exist") as ei:
        resolve_weights(missing)
    assert ei.value.hint == "pass --random-weights SEED to run without a checkpoint"
    # with a seed, missing files are fine and absent keys are random
    store = resolve_weights(missing, random_seed=3)
    assert set(store) == {"g"} and store.source == "random(seed=3)"
    # an explicit file overrides the directives
    store = resolve_weights(dup, weights=tmp_path / "a2.npz")
    np.testing.assert_array_equal(store["a"], np.zeros(2))
    # a checkpoint provides what it has; the seed fills the rest
    both = module_with(tmp_path, ("a.npz", ["a", "z"]))
    store = resolve_weights(both, random_seed=0)
    np.testing.assert_array_equal(store["a"], np.ones(2))
    assert store.origins["z"] == "random(seed=0)"


def test_example_weights_resolve_with_random_seed():
    for path in sorted((ROOT / "examples").glob("*.ir")):
        m = parse_file(path)
        store = resolve_weights(m, random_seed=0)
        check_weights(m, store)
        for g in m.funcs.values():
            for n in g.nodes:
                if n.op == "const":
                    arr = materialize(n, store)
                    assert arr.shape == n.result.type.shape and arr.dtype == n.result.type.dtype.np


def test_const_value_materializes_without_store():
    b = Builder("f")
    v = b.const_value([[1, 2], [3, 4]], TensorType(DType.int32, (2, 2)), name="c")
    np.testing.assert_array_equal(materialize(v.producer, None), [[1, 2], [3, 4]])
    s = b.const_value(0.5, "fp16[2, 3]", name="s")
    out = materialize(s.producer, None)
    assert out.dtype == np.float16 and out.shape == (2, 3) and (out == 0.5).all()
