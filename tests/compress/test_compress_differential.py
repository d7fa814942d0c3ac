"""Compressed programs on the sim against the interpreter, every format in both dialects.

The sim decompresses each weight in C from the MIL (its constexpr op over the payload
BLOBFILEs); the interpreter runs the compiled program (program.ir) with the weights
decompressed in numpy from the manifest's part records (anec.compress.decompress), and
coremltools' own op definitions decompress them a third time (materialized_val_inference):
the three must agree, the first two within the project's differential tolerance, the
numpy and coremltools weights bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.ir.interp import interpret, random_inputs
from anec.mil.artifact import artifact_weights
from anec.ir.weight_binding import resolve_weights
from tests.mil.milcheck import check_mil
from tolerances import assert_close

FORMATS = ["int8", "int8-affine", "uint8-affine", "lut1", "lut2", "lut4", "lut6", "lut8", "lut4/g8",
           "int8@blockwise", "int8-affine@blockwise", "uint8-affine@blockwise",
           "int4", "int4/b16", "int4-affine/b8", "uint4-affine/b16", "int8/b16", "sparse50", "sparse90",
           "sparse50+int8", "sparse50+lut4", "sparse75+lut2"]
"""``FORMAT@FORM``: 8-bit linear weights written with that ios18 op (``--compress-form``);
without one, the target's (constexpr_affine_dequantize)."""
LINEAR_OP = {"affine": "constexpr_affine_dequantize", "blockwise": "constexpr_blockwise_shift_scale"}
ULPS = 2
"""As the generated-graph differential (tests/runtime/test_rt_differential.py): the sim and the
interpreter run the same program on the same (decompressed) weights, rounding every op to
fp16 and differing only in summation order."""


def _spec(fmt: str) -> str:
    return f"{fmt}>fp16"  # no fallback to int8: the format itself must run


def _compile(small, fmt, dialect, seed=0):
    fmt, _, form = fmt.partition("@")
    store = resolve_weights(small, None, seed)
    return compile_module(small, store, compress=_spec(fmt), dialect=dialect, compress_form=form or None), store


def _linear_op(fmt: str, dialect: str) -> str | None:
    """The MIL op a linear format must be written with (None: not a linear format)."""
    name, _, form = fmt.partition("@")
    if "lut" in name or "sparse" in name:
        return None
    if "/" in name or "int4" in name:  # scales of the weight's rank: the blockwise op only
        return None if dialect == "ios16" else LINEAR_OP["blockwise"]
    return LINEAR_OP["affine" if dialect == "ios16" else form or "affine"]


@pytest.mark.parametrize("dialect", ["ios18", "ios16"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.constraint("ANE-COMPRESSED-WEIGHTS")
def test_sim_matches_the_interpreter(rt, small, fmt, dialect):
    res, store = _compile(small, fmt, dialect)
    art = res.artifacts["f"]
    got_formats = {c["key"]: c["format"] for c in art.manifest.document["compression"]}
    # ios16 has no grouped LUT, no 4-bit and no per-block linear form, no sparse int8/LUT values
    want = "fp16" if dialect == "ios16" and ("/" in fmt or "+" in fmt or "4" in fmt.split("/")[0] and "lut" not in fmt) \
        else fmt.partition("@")[0]
    assert got_formats == {"blk.0.w": want, "blk.1.w": want, "head.w": want}
    assert "norm.g" not in got_formats
    if want != "fp16":
        assert "constexpr_" in art.mil_text
    op = _linear_op(fmt, dialect)
    if op is not None:
        assert art.mil_text.count(f"= {op}(") == 3, op
    x = random_inputs(small.funcs["f"], 1)
    prog = rt.load(art)
    try:
        got = prog(**x)
    finally:
        prog.close()
    program = art.program_module().funcs["f"]
    ref = interpret(program, {v.name: x[v.name] for v in program.inputs}, artifact_weights(art), "fp16")
    for k in ref:
        assert_close(got[k], ref[k], "compress/sim-vs-interp", ULPS, f"{fmt} {dialect} {k}")


@pytest.mark.parametrize("dialect", ["ios18", "ios16"])
@pytest.mark.parametrize("fmt", ["int8", "uint8-affine", "lut2", "lut6", "lut4/g8", "int8@blockwise",
                                 "uint8-affine@blockwise", "int4/b16", "uint4-affine/b8", "int4-affine",
                                 "sparse50", "sparse90", "sparse50+int8", "sparse50+lut4"])
@pytest.mark.constraint("ANE-COMPRESSED-WEIGHTS")
def test_coremltools_decompresses_bit_for_bit_as_anec(small, fmt, dialect):
    """coremltools type-checks the MIL (each declared type equals its inference) and its
    constexpr ops materialize exactly the weights anec's interpreter uses."""
    res, _ = _compile(small, fmt, dialect)
    art = res.artifacts["f"]
    prog = check_mil(art.mil_text, art.blobs)
    mine = artifact_weights(art)
    by_const = {}
    for w in art.manifest.document["weights"]:
        if w.get("part"):
            by_const.setdefault(w["part"]["of"], []).append(f"{w['file']}@{w['offset']}")
    every = [op for op in prog.functions["main"].operations if op.op_type.startswith("constexpr_")]
    ops = [op for op in every if op.name in by_const]  # the ops that make a weight
    fell_back = dialect == "ios16" and ("/" in fmt or "int4" in fmt or "+" in fmt)
    assert len(ops) == (0 if fell_back else 3)
    op = _linear_op(fmt, dialect)
    assert op is None or {o.op_type for o in ops} == {op}
    if "sparse" in fmt and not fell_back:
        assert {o.op_type for o in ops} == {"constexpr_sparse_to_dense"}
        pair = {"+int8": {"constexpr_sparse_blockwise_shift_scale"}, "+lut": {"constexpr_lut_to_sparse"}}
        assert {o.op_type for o in every if o not in ops} == next(
            (v for k, v in pair.items() if k in fmt), set())
    for op in ops:
        theirs = op.materialized_val_inference()
        ours = mine["+".join(by_const[op.name])]
        assert theirs.dtype == ours.dtype == np.float16
        assert np.array_equal(theirs.reshape(ours.shape), ours), op.name


def test_compressed_outputs_stay_close_to_the_dense_program(rt, small):
    """The gate's promise, end to end: int8 keeps the output within a few percent of the
    uncompressed program, lut1 does not (so the comparison can fail)."""
    store = resolve_weights(small, None, 0)
    x = random_inputs(small.funcs["f"], 2)
    dense = interpret(small.funcs["f"], x, store, "fp16")

    def cosine(spec):
        art = compile_module(small, store, compress=spec).artifacts["f"]
        prog = rt.load(art)
        try:
            got = prog(**x)
        finally:
            prog.close()
        a, b = got["z"].astype(np.float64).ravel(), dense["z"].astype(np.float64).ravel()
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    assert cosine("int8") > 0.999
    assert cosine("lut1>fp16") < 0.99


def test_the_corpus_programs_decompress_as_computed_by_hand(rt):
    """The MIL fuzz corpus seeds (tests/c/corpus/mil/constexpr_*.mil): every constexpr form,
    checked against sums worked out by hand, bit for bit (x = 1, so each output is a row sum
    of the decompressed weight)."""
    import os

    from anec.mil.blobfile import BlobWriter

    root = os.path.join(os.path.dirname(__file__), "..", "c", "corpus", "mil")
    limits = {"max_blob_tensors": 16, "scalar_penalty": 1, "max_conv_out_channels": 16384,
              "min_surface_bytes": 49152, "allow_fp32_io": True, "surface_alignment": 64}
    x = np.ones((1, 4, 1, 2), np.float16)
    with open(os.path.join(root, "constexpr_ios16.mil")) as f:
        prog = rt.compile(f.read(), {}, limits=limits)
    got = prog(x=x)
    prog.close()
    # (1-2+3-4)/2, (5-6+7-8)/4, (9-10+11-127)/8; packed 2-bit indices 3,2,1,0 of [-1, 0, 0.5, 2] per row
    assert np.array_equal(got["y"][0, :, 0, 0], np.array([-1, -0.5, -14.625], np.float16))
    assert np.array_equal(got["z"][0, :, 0, 0], np.array([1.5, 1.5, 1.5], np.float16))
    idx, lut = BlobWriter(), BlobWriter()
    idx.add(np.arange(12, dtype=np.uint8), dtype="uint4")
    lut.add(np.arange(48, dtype=np.float16).reshape(3, 1, 1, 1, 16, 1))
    with open(os.path.join(root, "constexpr_ios18.mil")) as f:
        prog = rt.compile(f.read(), {"@model_path/weights/li.bin": idx.to_bytes(),
                                     "@model_path/weights/ll.bin": lut.to_bytes()}, limits=limits)
    got = prog(x=x)
    prog.close()
    # offsets 0, 1, -1: (1-2+3-4)/2, (4-7+6-9)/4, (10-9+12-126)/8; row r reads entries 4r..4r+3 of table r
    assert np.array_equal(got["y"][0, :, 0, 0], np.array([-1, -1.5, -14.125], np.float16))
    assert np.array_equal(got["z"][0, :, 0, 0], np.array([0 + 1 + 2 + 3, 20 + 21 + 22 + 23, 40 + 41 + 42 + 43],
                                                          np.float16))
    mask = BlobWriter()
    mask.add(np.array([1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1], np.uint8).reshape(3, 4, 1, 1), dtype="uint1")
    with open(os.path.join(root, "constexpr_sparse.mil")) as f:
        prog = rt.compile(f.read(), {"@model_path/weights/sm.bin": mask.to_bytes()}, limits=limits)
    got = prog(x=x)
    prog.close()
    # the mask picks values 1, 2 | 3, 4 | 5..8; the int8 ones scaled per row by 0.5, 0.25, 0.125
    assert np.array_equal(got["y"][0, :, 0, 0], np.array([1 + 2, 3 + 4, 5 + 6 + 7 + 8], np.float16))
    assert np.array_equal(got["z"][0, :, 0, 0], np.array([(2 + 4) / 2, (-2 + 8) / 4, (1 + 1 + 1 - 1) / 8], np.float16))


def test_a_func_cut_into_a_pipeline_runs_compressed(rt):
    """More weights than one program holds: legalize cuts the func into stages, each stage's
    weights are compressed by the func's decisions, and the pipeline on the sim matches the
    interpreter running the whole func on the stages' decompressed weights."""
    from anec.ir.parser import parse
    from anec.ir.weight_binding import resolve_weights as rw

    lines = ["func f(%x: fp16[1, 16, 1, 8]) {"]
    cur = "%x"
    for i in range(40):
        lines += [f'  %w{i} = const(weight="l.{i}.w") : fp16[16, 16, 1, 1]',
                  f"  %h{i} = conv1x1({cur}, %w{i}) : fp16[1, 16, 1, 8]", f"  %r{i} = relu(%h{i}) : fp16[1, 16, 1, 8]"]
        cur = f"%r{i}"
    lines += [f"  return {cur}", "}"]
    module = parse("\n".join(lines) + "\n", "deep.ir")
    art = compile_module(module, rw(module, None, 0), compress="lut4:l.1*,int8:*").artifacts["f"]
    assert len(art.stages) >= 3
    formats = {r["key"]: r["format"] for s in art.stages for r in s.manifest.document["compression"]}
    assert formats["l.12.w"] == "lut4" and formats["l.3.w"] == "int8" and len(formats) == 40
    x = random_inputs(module.funcs["f"], 4)
    prog = rt.load(art)
    try:
        got = prog(**x)
    finally:
        prog.close()
    ref = interpret(art.program_module().funcs["f"], x, art.interp_weights(), "fp16")
    assert_close(got[cur[1:]], ref[cur[1:]], "compress/sim-vs-interp", ULPS, "pipeline")
