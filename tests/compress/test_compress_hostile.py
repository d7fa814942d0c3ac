"""Hostile compressed programs are refused with a clear error, never run.

Payload BLOBFILEs with a wrong dtype code, cut short, or whose padding bits do not match
the declared element count; constexpr ops whose payloads disagree with each other (LUT
indices wider than the table, packed indices of the wrong length, block scales that do not
divide the tensor, sizes that overflow, a sparse mask whose set bits do not number the
values or whose shape is not the result's): the runtime's weight check or the sim's compiler
or loader names the const, the MIL line and what is wrong.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.diagnostics import AnecError
from anec.mil.blobfile import BlobWriter
from anec.ir.weight_binding import resolve_weights

LIMITS = {"max_blob_tensors": 16, "scalar_penalty": 1, "max_conv_out_channels": 16384,
          "min_surface_bytes": 49152, "allow_fp32_io": True, "surface_alignment": 64}


def _mil(body: str, dialect: str = "ios18") -> str:
    head = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4, 1, 2]> x) {\n" if dialect == "ios18" else \
        "program(1.0)\n{\n    func main<ios16>(tensor<fp16, [1, 4, 1, 2]> x) {\n"
    conv = ("        tensor<fp16, [1, 3, 1, 2]> y = conv(dilations = d, groups = g, pad = p, pad_type = pt, "
            "strides = s, weight = w, x = x)[name = string(\"y\")];\n")
    params = ("        tensor<int32, [2]> d = const()[name = string(\"d\"), val = tensor<int32, [2]>([1, 1])];\n"
              "        int32 g = const()[name = string(\"g\"), val = int32(1)];\n"
              "        tensor<int32, [4]> p = const()[name = string(\"p\"), val = tensor<int32, [4]>([0, 0, 0, 0])];\n"
              "        string pt = const()[name = string(\"pt\"), val = string(\"valid\")];\n"
              "        tensor<int32, [2]> s = const()[name = string(\"s\"), val = tensor<int32, [2]>([1, 1])];\n")
    return head + body + params + conv + "    } -> (y);\n}\n"


def _blob(path: str, dtype: str | None, arr: np.ndarray) -> dict[str, bytes]:
    w = BlobWriter()
    w.add(arr, dtype=dtype)
    return {f"@model_path/weights/{path}": w.to_bytes()}


LUT18 = ('        tensor<uint2, [3, 4, 1, 1]> wi = const()[name = string("wi"), val = tensor<uint2, [3, 4, 1, 1]>'
         '(BLOBFILE(path = string("@model_path/weights/wi.bin"), offset = uint64(64)))];\n'
         '        tensor<fp16, [1, 1, 1, 1, 4, 1]> wl = const()[name = string("wl"), val = tensor<fp16, [1, 1, 1, 1, 4, 1]>'
         '(BLOBFILE(path = string("@model_path/weights/wl.bin"), offset = uint64(64)))];\n'
         '        tensor<fp16, [3, 4, 1, 1]> w = constexpr_lut_to_dense(indices = wi, lut = wl)[name = string("w")];\n')


def _lut_blobs(idx=None, lut=None):
    idx = np.arange(12, dtype=np.uint8).reshape(3, 4, 1, 1) % 4 if idx is None else idx
    lut = np.array([-1, 0, 0.5, 2], np.float16) if lut is None else lut
    return {**_blob("wi.bin", "uint2", idx), **_blob("wl.bin", None, lut)}


def _run(rt, mil, blobs):
    prog = rt.compile(mil, blobs, limits=LIMITS)
    try:
        return prog(x=np.ones((1, 4, 1, 2), np.float16))
    finally:
        prog.close()


def test_a_valid_handwritten_lut_program_runs(rt):
    """The baseline the hostile variants below change one thing of: it runs and decompresses
    as the MIL says (row 0 of the weight is [-1, 0, 0.5, 2]: x = 1 gives 1.5)."""
    got = _run(rt, _mil(LUT18), _lut_blobs())
    w = np.array([-1, 0, 0.5, 2], np.float16)[np.arange(12) % 4].reshape(3, 4)
    assert np.array_equal(got["y"][0, :, 0, 0], w.sum(axis=1).astype(np.float16))


def _patch_record(blobs: dict, path: str, offset_in_record: int, fmt: str, value) -> dict:
    data = bytearray(blobs[path])
    struct.pack_into(fmt, data, 64 + offset_in_record, value)
    return {**blobs, path: bytes(data)}


def test_a_wrong_dtype_code_is_refused(rt):
    blobs = _patch_record(_lut_blobs(), "@model_path/weights/wi.bin", 4, "<I", 11)  # uint4, declared uint2
    with pytest.raises(AnecError, match=r"(?s)wi.*dtype is uint4 but the const is declared uint2"):
        _run(rt, _mil(LUT18), blobs)


def test_a_truncated_payload_is_refused(rt):
    blobs = _lut_blobs()
    p = "@model_path/weights/wi.bin"
    blobs = {**blobs, p: blobs[p][:-1]}
    with pytest.raises(AnecError, match=r"(?s)wi.*outside the file"):
        _run(rt, _mil(LUT18), blobs)


def test_padding_bits_that_change_the_element_count_are_refused(rt):
    """12 uint2 indices are 3 bytes with 0 padding bits; 6 padding bits would make 9 elements
    (and 1 leaves no whole element)."""
    for bad, what in ((6, r"hold 9 uint2 elements, the declared type has 12"), (1, "no whole number")):
        blobs = _patch_record(_lut_blobs(), "@model_path/weights/wi.bin", 24, "<Q", bad)
        with pytest.raises(AnecError, match=what):
            _run(rt, _mil(LUT18), blobs)


@pytest.mark.constraint("ANE-COMPRESSED-WEIGHTS")
def test_lut_indices_wider_than_the_table_are_refused(rt):
    """uint4 indices (values up to 15) over a 4-entry table: an index could read past it."""
    mil = _mil(LUT18.replace("uint2", "uint4"))
    blobs = {**_lut_blobs(), **_blob("wi.bin", "uint4", np.zeros((3, 4, 1, 1), np.uint8))}
    with pytest.raises(AnecError, match=r"model.mil:\d+.*values up to 15.*4 entries"):
        _run(rt, mil, blobs)


def test_ios16_packed_indices_of_the_wrong_length_are_refused(rt):
    body = ('        tensor<uint8, [2]> wi = const()[name = tensor<string, []>("wi"), val = tensor<uint8, [2]>'
            '(BLOBFILE(path = tensor<string, []>("@model_path/weights/wi.bin"), offset = tensor<uint64, []>(64)))];\n'
            '        tensor<fp16, [4]> wl = const()[name = tensor<string, []>("wl"), val = tensor<fp16, [4]>'
            '(BLOBFILE(path = tensor<string, []>("@model_path/weights/wl.bin"), offset = tensor<uint64, []>(64)))];\n'
            '        tensor<uint32, [4]> sh = const()[name = tensor<string, []>("sh"), val = tensor<uint32, [4]>([3, 4, 1, 1])];\n'
            '        tensor<fp16, [3, 4, 1, 1]> w = constexpr_lut_to_dense(indices = wi, lut = wl, shape = sh)'
            '[name = tensor<string, []>("w")];\n')
    blobs = {**_blob("wi.bin", None, np.zeros(2, np.uint8)),
             **_blob("wl.bin", None, np.array([-1, 0, 0.5, 2], np.float16))}
    with pytest.raises(AnecError, match=r"12 2-bit indices pack into 3 bytes, but 'indices' has 2"):
        _run(rt, _mil(body, "ios16"), blobs)
    huge = body.replace("[3, 4, 1, 1])", "[65536, 65536, 65536, 1])")  # 2^48 elements
    with pytest.raises(AnecError, match=r"'shape' has a dimension out of range"):
        _run(rt, _mil(huge, "ios16"), blobs)


def test_block_scales_that_do_not_divide_the_tensor_are_refused(rt):
    body = ('        tensor<int8, [3, 4, 1, 1]> wq = const()[name = string("wq"), val = tensor<int8, [3, 4, 1, 1]>'
            '(BLOBFILE(path = string("@model_path/weights/wq.bin"), offset = uint64(64)))];\n'
            '        tensor<fp16, [2, 1, 1, 1]> ws = const()[name = string("ws"), val = tensor<fp16, [2, 1, 1, 1]>'
            '(BLOBFILE(path = string("@model_path/weights/ws.bin"), offset = uint64(64)))];\n'
            '        tensor<fp16, [3, 4, 1, 1]> w = constexpr_blockwise_shift_scale(data = wq, scale = ws)'
            '[name = string("w")];\n')
    blobs = {**_blob("wq.bin", None, np.ones((3, 4, 1, 1), np.int8)),
             **_blob("ws.bin", None, np.ones((2, 1, 1, 1), np.float16))}
    with pytest.raises(AnecError, match=r"at dim 0 'data' has 3, which 2 scales do not divide"):
        _run(rt, _mil(body), blobs)


@pytest.mark.parametrize("spec,code,name,declared", [("int8", 3, "uint8", "int8"), ("int4/b16>fp16", 11, "uint4", "int4"),
                                                     ("uint4-affine>fp16", 8, "int4", "uint4")])
def test_a_compiled_artifact_with_a_swapped_payload_dtype_is_refused(rt, small, spec, code, name, declared):
    """The same through an artifact anec wrote: its payload relabelled with another dtype code."""
    art = compile_module(small, resolve_weights(small, None, 0), compress=spec).artifacts["f"]
    q = next(e for e in art.manifest.document["weights"] if e.get("part", {}) and e["part"]["role"] == "q")
    blobs = dict(art.blobs)
    data = bytearray(blobs[q["file"]])
    struct.pack_into("<I", data, q["offset"] + 4, code)
    blobs[q["file"]] = bytes(data)
    mil_blobs = {f"@model_path/{k}": v for k, v in blobs.items()}
    with pytest.raises(AnecError, match=rf"{q['const']}.*dtype is {name} but the const is declared {declared}"):
        rt.compile(art.mil_text, mil_blobs, limits=LIMITS).close()


def test_a_truncated_int4_payload_is_refused(rt, small):
    art = compile_module(small, resolve_weights(small, None, 0), compress="int4/b16>fp16").artifacts["f"]
    q = next(e for e in art.manifest.document["weights"] if e.get("part", {}) and e["part"]["role"] == "q")
    blobs = dict(art.blobs)
    data = bytearray(blobs[q["file"]])
    size = struct.unpack_from("<Q", data, q["offset"] + 8)[0]
    struct.pack_into("<Q", data, q["offset"] + 8, size - 1)  # one byte short of the packed int4 values
    blobs[q["file"]] = bytes(data)
    with pytest.raises(AnecError, match=rf"const '{q['const']}'.*payload is 1535 bytes but the declared const type "
                                        r"needs 1536 bytes"):
        rt.compile(art.mil_text, {f"@model_path/{k}": v for k, v in blobs.items()}, limits=LIMITS).close()


@pytest.mark.constraint("ANE-COMPRESSED-BUDGET")
def test_the_budget_counts_a_compressed_weight_once(rt):
    """ANE-COMPRESSED-BUDGET (a hypothesis the sim follows): a LUT weight is two payload
    BLOBFILEs and one weight tensor, so it fits a cap of one; a second weight does not."""
    one = {**LIMITS, "max_blob_tensors": 1, "scalar_penalty": 0}
    prog = rt.compile(_mil(LUT18), _lut_blobs(), limits=one)
    prog.close()
    extra = ('        tensor<fp16, [1, 3, 1, 1]> bias = const()[name = string("bias"), val = tensor<fp16, [1, 3, 1, 1]>'
             '(BLOBFILE(path = string("@model_path/weights/b.bin"), offset = uint64(64)))];\n')
    mil = _mil(LUT18 + extra).replace("    } -> (y);", '        tensor<fp16, [1, 3, 1, 2]> z = add(x = y, y = bias)'
                                      '[name = string("z")];\n    } -> (z);')
    blobs = {**_lut_blobs(), **_blob("b.bin", None, np.zeros((1, 3, 1, 1), np.float16))}
    with pytest.raises(AnecError, match=r"ANE-BLOB-BUDGET.*2 BLOBFILE weight tensors, but at most 1"):
        rt.compile(mil, blobs, limits=one).close()


SPARSE18 = ('        tensor<fp16, [8]> wv = const()[name = string("wv"), val = tensor<fp16, [8]>'
            '(BLOBFILE(path = string("@model_path/weights/wv.bin"), offset = uint64(64)))];\n'
            '        tensor<uint1, [3, 4, 1, 1]> wm = const()[name = string("wm"), val = tensor<uint1, [3, 4, 1, 1]>'
            '(BLOBFILE(path = string("@model_path/weights/wm.bin"), offset = uint64(64)))];\n'
            '        tensor<fp16, [3, 4, 1, 1]> w = constexpr_sparse_to_dense(mask = wm, nonzero_data = wv)'
            '[name = string("w")];\n')
SPARSE_MASK = np.array([1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1], np.uint8)
"""8 bits set: row 0 reads values 1, 2; row 1 values 3, 4; row 2 values 5..8."""


def _sparse_blobs(mask=SPARSE_MASK, values=np.arange(1, 9, dtype=np.float16)):
    return {**_blob("wv.bin", None, values), **_blob("wm.bin", "uint1", mask.reshape(3, 4, 1, 1))}


def _sparse16(mask_bytes: int = 2) -> str:
    return ('        tensor<fp16, [8]> wv = const()[name = tensor<string, []>("wv"), val = tensor<fp16, [8]>'
            '(BLOBFILE(path = tensor<string, []>("@model_path/weights/wv.bin"), offset = tensor<uint64, []>(64)))];\n'
            f'        tensor<uint8, [{mask_bytes}]> wm = const()[name = tensor<string, []>("wm"), '
            f'val = tensor<uint8, [{mask_bytes}]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/wm.bin"), '
            'offset = tensor<uint64, []>(64)))];\n'
            '        tensor<uint32, [4]> sh = const()[name = tensor<string, []>("sh"), val = tensor<uint32, [4]>([3, 4, 1, 1])];\n'
            '        tensor<fp16, [3, 4, 1, 1]> w = constexpr_sparse_to_dense(mask = wm, nonzero_data = wv, shape = sh)'
            '[name = tensor<string, []>("w")];\n')


@pytest.mark.constraint("ANE-COMPRESSED-SPARSE")
def test_a_valid_handwritten_sparse_program_runs_in_both_dialects(rt):
    """The baseline of the sparse variants: each row sums the values its mask bits pick."""
    want = np.array([1 + 2, 3 + 4, 5 + 6 + 7 + 8], np.float16)
    got = _run(rt, _mil(SPARSE18), _sparse_blobs())
    assert np.array_equal(got["y"][0, :, 0, 0], want)
    packed = np.packbits(SPARSE_MASK, bitorder="little")
    blobs16 = {**_blob("wv.bin", None, np.arange(1, 9, dtype=np.float16)), **_blob("wm.bin", None, packed)}
    got = _run(rt, _mil(_sparse16(), "ios16"), blobs16)
    assert np.array_equal(got["y"][0, :, 0, 0], want)


@pytest.mark.constraint("ANE-COMPRESSED-SPARSE")
def test_a_mask_that_does_not_count_the_values_is_refused(rt):
    for bits in (7, 9):
        mask = SPARSE_MASK.copy()
        mask[3] = 1 if bits == 9 else 0
        mask[0] = 0 if bits == 7 else 1
        with pytest.raises(AnecError, match=rf"(?s)'w' \(model.mil:\d+\).*mask 'wm' sets {bits} elements, but "
                                            r"'nonzero_data' has 8 values"):
            _run(rt, _mil(SPARSE18), _sparse_blobs(mask))


def test_a_sparse_mask_with_a_wrong_dtype_code_or_cut_short_is_refused(rt):
    blobs = _patch_record(_sparse_blobs(), "@model_path/weights/wm.bin", 4, "<I", 10)  # uint2, declared uint1
    with pytest.raises(AnecError, match=r"(?s)wm.*dtype is uint2 but the const is declared uint1"):
        _run(rt, _mil(SPARSE18), blobs)
    p = "@model_path/weights/wm.bin"
    blobs = _sparse_blobs()
    with pytest.raises(AnecError, match=r"(?s)wm.*outside the file"):
        _run(rt, _mil(SPARSE18), {**blobs, p: blobs[p][:-1]})
    mil = _mil(SPARSE18.replace("tensor<uint1, [3, 4, 1, 1]>", "tensor<uint8, [3, 4, 1, 1]>"))
    with pytest.raises(AnecError, match=r"'mask' has element type uint8, expected uint1"):
        _run(rt, mil, {**_sparse_blobs(), **_blob("wm.bin", None, SPARSE_MASK.reshape(3, 4, 1, 1))})


def test_a_sparse_shape_mismatch_is_refused(rt):
    """The declared result is not the mask's shape; more values than elements; an ios16 mask
    of the wrong byte count or with padding bits set."""
    mil = _mil(SPARSE18.replace("tensor<fp16, [3, 4, 1, 1]> w =", "tensor<fp16, [4, 3, 1, 1]> w ="))
    with pytest.raises(AnecError, match=r"model.mil:\d+: constexpr_sparse_to_dense: 'w' is declared "
                                        r"tensor<fp16, \[4, 3, 1, 1\]> but the op produces tensor<fp16, \[3, 4, 1, 1\]>"):
        _run(rt, mil, _sparse_blobs())
    mil = _mil(SPARSE18.replace("[8]", "[13]"))
    with pytest.raises(AnecError, match=r"13 values for a tensor of 12 elements"):
        _run(rt, mil, _sparse_blobs(values=np.ones(13, np.float16)))
    values = _blob("wv.bin", None, np.arange(1, 9, dtype=np.float16))
    with pytest.raises(AnecError, match=r"12 elements need a mask of 2 bytes, but 'mask' has 1"):
        _run(rt, _mil(_sparse16(1), "ios16"), {**values, **_blob("wm.bin", None, np.zeros(1, np.uint8))})
    padded = np.packbits(SPARSE_MASK, bitorder="little")
    padded[1] |= 0x80  # bit 15: after the 12th element
    with pytest.raises(AnecError, match=r"mask 'wm' has padding bits set after element 12"):
        _run(rt, _mil(_sparse16(), "ios16"), {**values, **_blob("wm.bin", None, padded)})


LUT_SPARSE = ('        tensor<uint1, [3, 4, 1, 1]> wm = const()[name = string("wm"), val = tensor<uint1, [3, 4, 1, 1]>'
              '(BLOBFILE(path = string("@model_path/weights/wm.bin"), offset = uint64(64)))];\n'
              '        tensor<uint2, [8]> wi = const()[name = string("wi"), val = tensor<uint2, [8]>'
              '(BLOBFILE(path = string("@model_path/weights/wi.bin"), offset = uint64(64)))];\n'
              '        tensor<fp16, [1, 1, 1, 1, 4, 1]> wl = const()[name = string("wl"), val = tensor<fp16, [1, 1, 1, 1, 4, 1]>'
              '(BLOBFILE(path = string("@model_path/weights/wl.bin"), offset = uint64(64)))];\n'
              '        tensor<uint1, [3, 4, 1, 1]> sm, tensor<fp16, [8]> sv = constexpr_lut_to_sparse(indices_mask = wm, '
              'indices_nonzero_data = wi, lut = wl)[name = string("sp")];\n'
              '        tensor<fp16, [3, 4, 1, 1]> w = constexpr_sparse_to_dense(mask = sm, nonzero_data = sv)'
              '[name = string("w")];\n')


def _lut_sparse_blobs(mask=SPARSE_MASK):
    return {**_blob("wm.bin", "uint1", mask.reshape(3, 4, 1, 1)),
            **_blob("wi.bin", "uint2", np.array([0, 1, 2, 3, 3, 2, 1, 0], np.uint8)),
            **_blob("wl.bin", None, np.array([-1, 0, 0.5, 2], np.float16).reshape(1, 1, 1, 1, 4, 1))}


@pytest.mark.constraint("ANE-COMPRESSED-SPARSE")
def test_a_sparse_lut_pair_runs_and_its_mask_is_checked(rt):
    """constexpr_lut_to_sparse into constexpr_sparse_to_dense: values -1, 0, 0.5, 2, 2, 0.5, 0, -1
    where the mask's bits are set (rows: -1 + 0, 0.5 + 2, 2 + 0.5 + 0 - 1). A mask setting 9
    elements for 8 indices is refused at the pair, before any index is read."""
    got = _run(rt, _mil(LUT_SPARSE), _lut_sparse_blobs())
    assert np.array_equal(got["y"][0, :, 0, 0], np.array([-1, 2.5, 1.5], np.float16))
    mask = SPARSE_MASK.copy()
    mask[3] = 1
    with pytest.raises(AnecError, match=r"'sv' \(model.mil:\d+\).*mask 'wm' sets 9 elements, but 'nonzero_data' has 8"):
        _run(rt, _mil(LUT_SPARSE), _lut_sparse_blobs(mask))
    wider = LUT_SPARSE.replace("tensor<uint2, [8]>", "tensor<uint4, [8]>")
    with pytest.raises(AnecError, match=r"constexpr_lut_to_sparse: 'indices' are uint4 \(values up to 15\), but the lut "
                                        r"has 4 entries"):
        _run(rt, _mil(wider), {**_lut_sparse_blobs(), **_blob("wi.bin", "uint4", np.zeros(8, np.uint8))})


def test_only_sparse_to_dense_reads_a_sparse_pair(rt):
    """A sparse-to-sparse op's values are not a weight: another op reading them is refused."""
    mil = _mil(LUT_SPARSE.replace("constexpr_sparse_to_dense(mask = sm, nonzero_data = sv)",
                                  "constexpr_lut_to_dense(indices = sm, lut = wl)"))
    with pytest.raises(AnecError, match=r"constexpr_lut_to_dense: 'indices' is itself a constexpr result; only "
                                        r"constexpr_sparse_to_dense reads one"):
        _run(rt, mil, _lut_sparse_blobs())
