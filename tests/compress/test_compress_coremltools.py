"""anec's quantizers against coremltools' ``ct.optimize.coreml`` on the same tensors.

* int8 linear symmetric per output channel: the same int8 values and the same fp16 scales
  as ``linear_quantize_weights`` (mode ``linear_symmetric``, ``per_channel``), both in the
  function and in the payload BLOBFILEs of a compiled artifact (bit for bit); int8/uint8
  affine: the same values, scales and zero points as its mode ``linear``;
* n-bit palettization: anec's deterministic k-means has a weight error no larger than
  ``palettize_weights`` (mode ``kmeans``) on the same tensors, per tensor and per grouped
  channel;
* BLOBFILE payloads of every sub-byte dtype are byte-identical to coremltools'
  ``_BlobStorageWriter`` and read back by it.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")

from anec.compiler import compile_module  # noqa: E402
from anec.compress import compress_tensor, get_format, quantize_linear  # noqa: E402
from anec.ir.parser import parse  # noqa: E402
from anec.mil.blobfile import BlobReader, BlobWriter  # noqa: E402


def _tensors():
    rng = np.random.default_rng(7)
    return {
        "normal": (rng.standard_normal((64, 48, 1, 1)) * 0.05).astype(np.float16),
        "heavy-tailed": (rng.standard_t(3, (96, 32, 1, 1)) * 0.02).astype(np.float16),
        "uniform": rng.uniform(-1, 1, (32, 40, 1, 1)).astype(np.float16),
        "outliers": np.where(rng.random((48, 64, 1, 1)) < 0.002, 3.0,
                             rng.standard_normal((48, 64, 1, 1)) * 0.1).astype(np.float16),
    }


def _ct_pass(weight: np.ndarray, op_config):
    """Run one coremltools compression pass on a program with a conv reading ``weight``;
    returns its constexpr op."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types
    import coremltools.optimize.coreml as cto
    from coremltools.optimize.coreml import _quantization_passes as qp

    @mb.program(input_specs=[mb.TensorSpec((1, weight.shape[1], 1, 4), types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.conv(x=x, weight=weight, name="y")

    cfg = cto.OptimizationConfig(global_config=op_config)
    cls = qp.linear_quantize_weights if isinstance(op_config, cto.OpLinearQuantizerConfig) else qp.palettize_weights
    cls(config=cfg, fake_compression=False)(prog)
    ops = [op for op in prog.functions["main"].operations if op.op_type.startswith("constexpr_")]
    assert len(ops) == 1
    return ops[0]


@pytest.mark.parametrize("name", list(_tensors()))
def test_int8_symmetric_per_channel_equals_linear_quantize_weights(name):
    import coremltools.optimize.coreml as cto

    w = _tensors()[name]
    op = _ct_pass(w, cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                                 weight_threshold=0))
    q, scale, zp = quantize_linear(w, 0, get_format("int8"))
    assert zp is None and op.offset is None
    assert np.array_equal(q, op.data.val)
    assert scale.dtype == op.scale.val.dtype == np.float16
    assert np.array_equal(scale, op.scale.val.reshape(-1))


@pytest.mark.parametrize("name", list(_tensors()))
@pytest.mark.parametrize("fmt,dtype", [("int8-affine", "int8"), ("uint8-affine", "uint8")])
def test_affine_equals_linear_quantize_weights_mode_linear(name, fmt, dtype):
    import coremltools.optimize.coreml as cto

    w = _tensors()[name]
    op = _ct_pass(w, cto.OpLinearQuantizerConfig(mode="linear", dtype=dtype, granularity="per_channel",
                                                 weight_threshold=0))
    q, scale, zp = quantize_linear(w, 0, get_format(fmt))
    assert np.array_equal(q, op.data.val)
    assert np.array_equal(scale, op.scale.val.reshape(-1))
    assert np.array_equal(zp, op.offset.val.reshape(-1))


@pytest.mark.parametrize("name", list(_tensors()))
@pytest.mark.parametrize("fmt,mode,dtype,block", [
    ("int4/b8", "linear_symmetric", "int4", 8), ("int4-affine/b8", "linear", "int4", 8),
    ("uint4-affine/b8", "linear", "uint4", 8), ("int8/b8", "linear_symmetric", "int8", 8),
    ("int4", "linear_symmetric", "int4", 0)])
def test_4_bit_and_per_block_equal_linear_quantize_weights_per_block(name, fmt, mode, dtype, block):
    """coremltools' ``per_block`` (``block_size`` input channels per scale; per output channel
    with the whole input: ``per_channel``): the same values, scales and offsets, in the shapes
    of its constexpr_blockwise_shift_scale."""
    import coremltools.optimize.coreml as cto

    w = _tensors()[name]
    if block:
        cfg = cto.OpLinearQuantizerConfig(mode=mode, dtype=dtype, granularity="per_block", block_size=block,
                                          weight_threshold=0)
    else:
        cfg = cto.OpLinearQuantizerConfig(mode=mode, dtype=dtype, granularity="per_channel", weight_threshold=0)
    op = _ct_pass(w, cfg)
    assert op.op_type == "constexpr_blockwise_shift_scale"
    q, scale, zp = quantize_linear(w, 0, get_format(fmt))
    assert np.array_equal(q, op.data.val)
    assert scale.shape == op.scale.val.shape and np.array_equal(scale, op.scale.val)
    if mode == "linear":
        assert zp.shape == op.offset.val.shape and np.array_equal(zp, op.offset.val)
    else:
        assert zp is None and op.offset is None


def test_the_artifact_payloads_are_coremltools_int8_values_and_scales_bit_for_bit():
    import coremltools.optimize.coreml as cto

    w = _tensors()["normal"]
    module = parse('func f(%x: fp16[1, 48, 1, 4]) {\n  %w = const(weight="w") : fp16[64, 48, 1, 1]\n'
                   '  %y = conv1x1(%x, %w) : fp16[1, 64, 1, 4]\n  return %y\n}\n', "one.ir")
    art = compile_module(module, {"w": w}, compress="int8").artifacts["f"]
    parts = {e["part"]["role"]: e for e in art.manifest.document["weights"] if e.get("part")}
    q = BlobReader(art.blobs[parts["q"]["file"]]).read(parts["q"]["offset"], "int8").reshape(w.shape)
    s = BlobReader(art.blobs[parts["scale"]["file"]]).read(parts["scale"]["offset"], "float16")
    op = _ct_pass(w, cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                                 weight_threshold=0))
    assert np.array_equal(q, op.data.val)
    assert np.array_equal(s, op.scale.val.reshape(-1))


def _rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("name", list(_tensors()))
@pytest.mark.parametrize("bits,group", [(4, 0), (6, 0), (2, 0), (4, 16)])
def test_lut_error_is_at_most_coremltools_kmeans(name, bits, group):
    import coremltools.optimize.coreml as cto

    pytest.importorskip("sklearn")
    w = _tensors()[name]
    if group:
        cfg = cto.OpPalettizerConfig(mode="kmeans", nbits=bits, granularity="per_grouped_channel",
                                     group_size=group, weight_threshold=0)
    else:
        cfg = cto.OpPalettizerConfig(mode="kmeans", nbits=bits, granularity="per_tensor", weight_threshold=0)
    theirs = _ct_pass(w, cfg).materialized_val_inference()
    fmt = get_format(f"lut{bits}" + (f"/g{group}" if group else ""))
    ours = compress_tensor(w, fmt, 0)
    assert ours.rel_l2 <= _rel_l2(theirs, w) * (1 + 1e-9), (ours.rel_l2, _rel_l2(theirs, w))


def test_palettization_is_deterministic_byte_for_byte():
    w = _tensors()["heavy-tailed"]
    a = compress_tensor(w, get_format("lut4/g16"), 0)
    b = compress_tensor(w.copy(), get_format("lut4/g16"), 0)
    assert np.array_equal(a.parts["indices"], b.parts["indices"])
    assert a.parts["lut"].tobytes() == b.parts["lut"].tobytes()


@pytest.mark.parametrize("dtype,bits,signed", [("uint1", 1, False), ("uint2", 2, False), ("uint3", 3, False),
                                               ("uint4", 4, False), ("uint6", 6, False), ("int4", 4, True)])
def test_sub_byte_blobs_are_byte_identical_to_coremltools(tmp_path, dtype, bits, signed):
    from coremltools import libmilstoragepython as ms

    rng = np.random.default_rng(bits)
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    arrays = [rng.integers(lo, hi, n).astype(np.int8 if signed else np.uint8) for n in (1, 5, 8, 37, 1000)]
    path = os.path.join(tmp_path, "w.bin")
    theirs = ms._BlobStorageWriter(path)
    ours = BlobWriter()
    offsets = []
    for a in arrays:
        o = ours.add(a, dtype=dtype)
        assert o == getattr(theirs, f"write_{dtype}_data")(a)
        offsets.append(o)
    del theirs
    with open(path, "rb") as f:
        assert f.read() == ours.to_bytes()
    reader, back = BlobReader(ours.to_bytes()), ms._BlobStorageReader(path)
    for o, a in zip(offsets, arrays):
        assert np.array_equal(reader.read(o, dtype), a)
        assert np.array_equal(np.asarray(getattr(back, f"read_{dtype}_data")(o)), a)
