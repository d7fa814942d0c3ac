"""Sparse weights (``sparseP``): the count, coremltools' pruner, the blobs, the gate.

* the number of values kept depends only on the size and P (so a reload keeps the MIL),
  and it is the count coremltools' ``OpMagnitudePrunerConfig(target_sparsity=P/100)``
  prunes in a tensor of distinct magnitudes, for every size and P tried;
* mask and values equal ``prune_weights``' value for value where coremltools prunes that
  count; where magnitudes tie (or its fp16 percentile rounds onto the next magnitude)
  coremltools prunes more, and anec prunes the tied elements in row-major order;
* the mask and values BLOBFILEs of a compiled artifact are byte-identical to what
  coremltools' writer makes of its op's operands;
* the gate refuses a tensor whose output channel is pruned to nothing, with the reason.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.compress import compress_tensor, get_format, parse_spec
from anec.compress.sparse import kept_count, prune, pruned_count
from anec.diagnostics import AnecError
from anec.ir.parser import parse
from anec.ir.weight_binding import resolve_weights
from anec.mil.blobfile import BlobReader

ONE_CONV = ('func f(%x: fp16[1, 25, 1, 4]) {\n  %w = const(weight="w") : fp16[41, 25, 1, 1]\n'
            '  %y = conv1x1(%x, %w) : fp16[1, 41, 1, 4]\n  return %y\n}\n')


def test_the_spelling_and_the_chains():
    assert get_format("sparse50").sparsity == 50 and get_format("sparse1").kind == "sparse"
    spec = parse_spec("sparse50>int8>fp16:h.*,sparse90")
    assert [f.name for f in spec.rules[0].chain] == ["sparse50", "int8", "fp16"]
    assert [f.name for f in spec.rules[1].chain] == ["sparse90", "int8", "fp16"]  # the default fallbacks
    for bad in ("sparse0", "sparse100", "sparse050", "sparse", "sparse-5"):
        with pytest.raises(AnecError, match="unknown compression format"):
            parse_spec(bad)


@pytest.mark.parametrize("pct", [1, 10, 29, 33, 50, 67, 75, 90, 99])
def test_the_count_depends_only_on_the_size(pct):
    rng = np.random.default_rng(pct)
    for n in (1, 2, 3, 7, 100, 1025, 3072):
        counts = {int(prune(rng.standard_normal(n).astype(np.float16), pct)[0].sum()) for _ in range(3)}
        assert counts == {kept_count(n, pct)}
        assert pruned_count(n, pct) + kept_count(n, pct) == n


def test_ties_are_pruned_in_row_major_order():
    # 4 small magnitudes, 8 tied at 1.0 (signs mixed), 8 large: sparse50 of 20 prunes 10
    w = np.array([0.1, -0.2, 0.3, 0.4] + [1, -1] * 4 + list(range(2, 10)), np.float16)
    rng = np.random.default_rng(0)
    perm = rng.permutation(20)
    mask, values = prune(w[perm], 50)
    assert pruned_count(20, 50) == 10
    pruned = set(perm[mask == 0].tolist())
    ties = [i for i in range(20) if abs(float(w[i])) == 1.0]
    # the 4 small ones, then the 6 tied elements that come first in the permuted tensor
    first_ties = [perm[j] for j in range(20) if perm[j] in ties][:6]
    assert pruned == {0, 1, 2, 3, *first_ties}
    assert np.array_equal(values, w[perm][mask == 1])


@pytest.mark.parametrize("pct", [1, 30, 50, 90, 99])
def test_prune_zeroes_the_first_k_of_a_stable_sort_of_the_magnitudes(pct):
    """Tie-heavy tensors (values from a set of 7, signs mixed, some NaN kept last): the
    elements pruned are exactly the first pruned_count of a stable argsort of |w|."""
    rng = np.random.default_rng(pct)
    for n in (10, 97, 1000):
        w = (rng.choice([0, 0.5, 1, 2, 3, 4, 5], n) * rng.choice([-1, 1], n)).astype(np.float16)
        w[rng.integers(0, n, 2)] = np.nan
        mag = np.abs(w.astype(np.float32))
        mag[np.isnan(mag)] = np.inf
        want = np.ones(n, np.uint8)
        want[np.argsort(mag, kind="stable")[:pruned_count(n, pct)]] = 0
        mask, values = prune(w, pct)
        assert np.array_equal(mask, want)
        assert np.array_equal(values, w[want == 1], equal_nan=True)


def _ct_prune(w: np.ndarray, sparsity: float):
    """coremltools' prune_weights (OpMagnitudePrunerConfig) on a conv reading ``w``: its op."""
    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types
    import coremltools.optimize.coreml as cto
    from coremltools.optimize.coreml import _quantization_passes as qp

    dt = types.fp16 if w.dtype == np.float16 else types.fp32

    @mb.program(input_specs=[mb.TensorSpec((1, w.shape[1], 1, 4), dt)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.conv(x=x, weight=w, name="y")

    cfg = cto.OptimizationConfig(global_config=cto.OpMagnitudePrunerConfig(target_sparsity=sparsity,
                                                                           weight_threshold=0))
    qp.prune_weights(config=cfg, fake_compression=False)(prog)
    ops = [op for op in prog.functions["main"].operations if op.op_type.startswith("constexpr_")]
    assert len(ops) == 1 and ops[0].op_type == "constexpr_sparse_to_dense"
    return ops[0]


@pytest.mark.parametrize("pct", [1, 10, 29, 50, 67, 90, 99])
@pytest.mark.parametrize("n", [10, 16, 37, 100, 1025])  # coremltools leaves fewer than 10
def test_the_count_is_coremltools_count_for_distinct_magnitudes(n, pct):
    """Distinct fp32 magnitudes (1..n, shuffled, signs mixed): coremltools zeroes exactly
    :func:`pruned_count` elements, the same ones, and keeps the same values."""
    rng = np.random.default_rng(n * 100 + pct)
    w = (rng.permutation(np.arange(1, n + 1)) * rng.choice([-1, 1], n)).astype(np.float32).reshape(n, 1, 1, 1)
    op = _ct_prune(w, pct / 100)
    mask, values = prune(w, pct)
    assert int(op.mask.val.sum()) == kept_count(n, pct)
    assert np.array_equal(op.mask.val, mask)
    assert np.array_equal(op.nonzero_data.val.astype(np.float16), values)


def _fp16_tensors():
    rng = np.random.default_rng(7)
    return {"normal": (rng.standard_normal((41, 25, 1, 1)) * 0.05).astype(np.float16),
            "heavy-tailed": (rng.standard_t(3, (64, 48, 1, 1)) * 0.02).astype(np.float16),
            "uniform": rng.uniform(-1, 1, (96, 32, 1, 1)).astype(np.float16)}


@pytest.mark.parametrize("pct", [10, 29, 50, 75, 90])
@pytest.mark.parametrize("name", list(_fp16_tensors()))
def test_equals_prune_weights_value_for_value(name, pct):
    """fp16 tensors as a model has them. Where coremltools prunes anec's count, the masks and
    values are equal; where it prunes more (magnitudes tied at its threshold, or its fp16
    percentile rounded onto the next magnitude), every value it keeps anec keeps, and the
    extra ones anec keeps lie between anec's largest pruned magnitude and coremltools'
    (they are the ties anec breaks in row-major order)."""
    w = _fp16_tensors()[name]
    op = _ct_prune(w, pct / 100)
    theirs_mask, theirs = op.mask.val.astype(bool), op.nonzero_data.val
    c = compress_tensor(w, get_format(f"sparse{pct}"), 0)
    mask = c.parts["mask"].astype(bool)
    assert c.parts["values"].size == kept_count(w.size, pct)
    if theirs_mask.sum() == mask.sum():
        assert np.array_equal(theirs_mask, mask) and np.array_equal(theirs, c.parts["values"])
        return
    assert theirs_mask.sum() < mask.sum()
    assert np.all(mask[theirs_mask])  # what coremltools keeps, anec keeps
    assert np.array_equal(w[theirs_mask], theirs)
    mag = np.abs(w.astype(np.float32))
    extra = mag[mask & ~theirs_mask]
    assert extra.min() >= mag[~mask].max() and extra.max() <= mag[~theirs_mask].max()


def test_some_fp16_cases_are_exactly_coremltools():
    """The comparison above is not vacuous: for these tensors coremltools prunes anec's count."""
    w = _fp16_tensors()["normal"]
    for pct in (10, 50, 90):
        op = _ct_prune(w, pct / 100)
        mask, values = prune(w, pct)
        assert np.array_equal(op.mask.val, mask) and np.array_equal(op.nonzero_data.val, values)


@pytest.mark.parametrize("dialect", ["ios18", "ios16"])
def test_the_artifact_blobs_are_coremltools_bytes(tmp_path, dialect):
    """The mask (uint1, or ios16 packed bytes) and values BLOBFILEs anec writes are the bytes
    coremltools' writer makes of its prune_weights op's operands (the same tensor, a count
    coremltools prunes too)."""
    from coremltools import libmilstoragepython as ms

    w = _fp16_tensors()["normal"]
    op = _ct_prune(w, 0.5)
    art = compile_module(parse(ONE_CONV, "one.ir"), {"w": w}, compress="sparse50>fp16",
                         dialect=dialect).artifacts["f"]
    parts = {e["part"]["role"]: e for e in art.manifest.document["weights"] if e.get("part")}
    assert set(parts) == {"mask", "values"}
    for role in ("mask", "values"):
        path = os.path.join(tmp_path, f"{role}.bin")
        writer = ms._BlobStorageWriter(path)
        if role == "values":
            writer.write_fp16_data(np.ascontiguousarray(op.nonzero_data.val).view(np.uint16))
        elif dialect == "ios18":
            writer.write_uint1_data(np.ascontiguousarray(op.mask.val.reshape(-1)))
        else:  # ios16: the mask's bits packed LSB first into uint8 bytes, as coremltools' ios16 op takes it
            writer.write_uint8_data(np.packbits(op.mask.val.reshape(-1), bitorder="little"))
        del writer
        with open(path, "rb") as f:
            assert f.read() == art.blobs[parts[role]["file"]], role
    values = BlobReader(art.blobs[parts["values"]["file"]]).read(64, "float16")
    assert values.size == kept_count(w.size, 50) and f"tensor<fp16, [{values.size}]>" in art.mil_text


def test_the_gate_refuses_a_channel_pruned_to_nothing():
    """One output channel 100x smaller than the rest: sparse50 zeroes it (relative L2 1 > 0.53)
    and the weight falls back to int8, the reason reported."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((41, 25, 1, 1)).astype(np.float16)
    w[7] *= np.float16(0.01)
    res = compile_module(parse(ONE_CONV, "one.ir"), {"w": w}, compress="sparse50")
    rep = res.artifacts["f"].manifest.document["compression"][0]
    assert rep["format"] == "int8" and rep["requested"] == "sparse50"
    assert rep["fallbacks"][0]["format"] == "sparse50"
    assert "output channel 7" in rep["fallbacks"][0]["reason"]
    ok = compile_module(parse(ONE_CONV, "one.ir"), {"w": rng.standard_normal((41, 25, 1, 1)).astype(np.float16)},
                        compress="sparse50").artifacts["f"].manifest.document["compression"][0]
    assert ok["format"] == "sparse50" and ok["rel_l2"] < 0.3
    # bytes: 512 fp16 values and a 1025-bit mask
    assert ok["bytes"] == 2 * kept_count(1025, 50) + math.ceil(1025 / 8) and ok["dense_bytes"] == 2050


def test_a_size_that_prunes_everything_falls_back():
    module = parse('func f(%x: fp16[1, 1, 1, 4]) {\n  %w = const(weight="w") : fp16[1, 1, 1, 1]\n'
                   '  %y = conv1x1(%x, %w) : fp16[1, 1, 1, 4]\n  return %y\n}\n', "tiny.ir")
    rep = compile_module(module, resolve_weights(module, None, 0), compress="sparse50>fp16"
                         ).artifacts["f"].manifest.document["compression"][0]
    assert rep["format"] == "fp16" and "prunes every one" in rep["fallbacks"][0]["reason"]


def test_sparse_with_int8_or_lut_values():
    """``sparseP+int8`` / ``sparseP+lutN``: the same mask as ``sparseP``, the kept values as
    int8 (the pruned tensor's per-channel int8) or as indices into one table; ios16 has no
    form for them (the reason is reported); bad spellings are refused."""
    assert get_format("sparse50+lut4").bits == 4 and get_format("sparse50+int8").storage == "int8"
    for bad, why in (("sparse50+lut3", "1, 2, 4, 6 or 8 bits"), ("sparse50+int4", "unknown compression format"),
                     ("sparse0+int8", "1 to 99")):
        with pytest.raises(AnecError, match=why):
            parse_spec(bad)
    w = _fp16_tensors()["normal"]
    plain = compress_tensor(w, get_format("sparse50"), 0)
    for name in ("sparse50+int8", "sparse50+lut4"):
        c = compress_tensor(w, get_format(name), 0)
        assert np.array_equal(c.parts["mask"], plain.parts["mask"])
        assert c.rel_l2 > plain.rel_l2 and c.nbytes < plain.nbytes
    q = compress_tensor(w, get_format("sparse50+int8"), 0).parts
    pruned = np.where(plain.parts["mask"] == 1, w, np.float16(0))
    from anec.compress import quantize_linear
    qd, scale, _ = quantize_linear(pruned, 0, get_format("int8"))
    assert np.array_equal(q["q"], qd[plain.parts["mask"] == 1]) and np.array_equal(q["scale"].reshape(-1), scale)
    rep = compile_module(parse(ONE_CONV, "one.ir"), {"w": w}, compress="sparse50+lut4",
                         dialect="ios16").artifacts["f"].manifest.document["compression"][0]
    assert rep["format"] == "int8" and "ios16 has no sparse lut4 form" in rep["fallbacks"][0]["reason"]
