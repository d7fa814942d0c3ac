"""Catalog entries: numerics, program I/O, file formats, compression and the MIL dialect.

The fp16 range, conv over matmul, SRAM, I/O dtypes and ranks, integer shapes, split,
the BLOBFILE layout, compressed weights, int8 activations, one file per weight, softmax and reduce_mean
forms, the dialect and surface alignment, listed after :mod:`anec.constraints.entries_ops_runtime`.
"""

from __future__ import annotations

from anec.constraints.evidence import MADERIX, ORION, PRACTICE, SPEC, UNTRIED
from anec.constraints.model import (DEMONSTRATED, DOCUMENTED, HYPOTHESIS, REPORTED, Constraint, Evidence, Scope,
                                    removed_by)

ENTRIES = (
    Constraint(
        "ANE-FP16-RANGE", "the ANE computes in fp16 (+-65504)",
        "overflow gives inf, then NaN downstream",
        (Evidence("Orion NaN fix (RESULTS.md)", "clamping every CPU->ANE write to +-65504 took training "
                  "from NaN at every step after the first to none", DEMONSTRATED, ORION),
         Evidence("maderix/ANE commit 926f977 (loss scaling)", "fp16 underflow in the backward matmuls "
                  "stalled training until a loss scale of 256", DEMONSTRATED, MADERIX),
         Evidence("hollance/neural-engine FAQ", "the ANE appears to be fp16 end to end", REPORTED,
                  Scope("Core ML", "not stated", "not stated"))),
        "rewrite or error", "legalize: check_weight_range; lower_reduce_mean; range-safe: "
        "safe_root, safe_sum_of_squares, safe_long_mean, scale_before_matmul; anec.ranges",
        "Weights that are NaN/Inf or exceed the fp16 range are an error naming the key. "
        "reduce_mean is lowered as reduce_sum(x * 1/N) (scale first) so the sum cannot "
        "overflow where the mean does not. The range-safe pass scales every row by its "
        "largest magnitude before squaring it (RMSNorm, LayerNorm, variance, L2 norms), so "
        "x * x cannot overflow for |x| > 256 and turn a norm's output into zeros; long means "
        "sum in exact power-of-two steps; attention scores are scaled before the dot products. "
        "What depends on the data is reported by anec check --inputs (the node that overflows "
        "or loses bits on calibration inputs) and, at run time, ANEC_CHECK_FINITE=1.",
        "compile",
    ),
    Constraint(
        "ANE-CONV-FASTER", "a 1x1 conv is ~3x faster than matmul",
        "no failure; matmul with a constant operand runs ~3x slower",
        (Evidence("Orion paper constraint 17", "a 1x1 conv runs about 3x faster than the equivalent "
                  "matmul", DEMONSTRATED, ORION),),
        "rewrite", "legalize: matmul_const_to_conv",
        "A matmul whose other operand is a constant 2-D weight becomes a 1x1 conv (the weight "
        "is laid out with the const's perm attr; transposes/reshapes move the contraction axis "
        "to channels). Skipped when a conv would exceed the channel limit.",
        "compile",
        target_fields=("max_conv_out_channels",),
    ),
    Constraint(
        "ANE-SRAM", "~32 MB of on-chip SRAM",
        "working sets above it spill to DRAM, ~30% slower (no failure)",
        (Evidence("maderix/ANE PR #25 (unmerged) docs/BENCHMARK_RESULTS.md, sram_probe",
                  "one conv's efficiency drops first at 4096 channels (32 MB of weights) and collapses "
                  "at 128 MB", REPORTED, Scope("in-memory", "M4 Max", "macOS 26.2")),
         Evidence("Orion compiler/pass_sram.c and RESULTS.md hardware table (from maderix)",
                  "32 MB for the M4 ANE, ~30% drop beyond", REPORTED, ORION)),
        "analysis", "annotate-sram",
        "annotate-sram computes per-node bytes and live bytes over the schedule, marks nodes "
        "whose live set exceeds SRAM with spill=true and reports the peak in the manifest and "
        "anec check. A warning, never an error.",
        "compile",
        target_fields=("sram_bytes",),
    ),
    Constraint(
        "ANE-FP32-IO", "fp32 program I/O is rejected on M1-generation ANEs",
        "compile fails; Orion's infer then silently falls back to CPU",
        (Evidence("Orion repository, later revision (community report)",
                  "fp32 program I/O is rejected on M1-generation ANEs; M4 accepts it", REPORTED,
                  Scope("in-memory", "M1 generation", "not stated")),
         Evidence("maderix/ANE PR #6 (unmerged)", "cast is unsupported on M1/M2, so I/O must be fp16",
                  REPORTED, Scope("in-memory", "M1, M2", "not stated"))),
        "rewrite or error", "legalize: check_io_dtypes (host_casts option)",
        "On targets without fp32 I/O, fp32 inputs/outputs are an error unless the host_casts "
        "option is set: then the program takes and returns fp16, redundant casts fold away, "
        "and meta['host_casts'] (manifest host_casts) tells the host to convert.",
        "compile",
        switch="fp32_io",
    ),
    Constraint(
        "ANE-IO-TENSORS", "program inputs and outputs are fp16 or fp32 tensors",
        "unknown: no published program binds an integer or bool input or output",
        (Evidence("Orion core/iosurface_tensor.m; maderix/ANE probes (" + PRACTICE + ")",
                  "they bind only fp16/fp32 tensor surfaces; nobody tried integer I/O, so whether the "
                  "device takes it is untested (anec's runtime and sim accept nothing else)",
                  HYPOTHESIS, UNTRIED),),
        "error", "legalize: check_io_tensors",
        "A non-float func input or output is an error at compile time naming the value, with "
        "the fix: declare integer inputs as fp16 and cast inside, cast integer outputs to fp16 "
        "before returning. A float scalar is fine: ANE-IO-RANK4 makes it a [1, 1, 1, 1] tensor.",
        "compile",
    ),
    Constraint(
        "ANE-FLOAT-COMPUTE", "arithmetic computes on fp16/fp32 tensors",
        "unknown: no published on-device program computes on integer tensors",
        (Evidence(PRACTICE, "every op computes on fp16 (fp32 only around casts at the I/O); integer "
                  "arithmetic is untested, and the sim models the pessimistic case (rejected)",
                  HYPOTHESIS, UNTRIED),),
        "error", "legalize: check_float_compute",
        "add/sub/mul/pow, matmul and the reductions on int32 operands are errors at compile time "
        "naming the node, with the fix (cast to fp16 first). Casts to and from int32 and moving "
        "integer tensors (reshape, transpose, slice) stay legal.",
        "compile",
    ),
    Constraint(
        "ANE-IO-RANK4", "program inputs and outputs are rank-4 [1, C, 1, S] tensors",
        "unknown: no published on-device program has I/O of another rank",
        (Evidence(PRACTICE + " (maderix IOSurface layout, Orion's activation layout)",
                  "every input and output is rank-4 [1, C, 1, S]; other ranks are untested",
                  HYPOTHESIS, UNTRIED),),
        "rewrite", "legalize: reshape_io_to_rank4",
        "A func input or output of another rank becomes a rank-4 tensor with the same elements: "
        "[1, prod(shape[:-1]), 1, shape[-1]] for rank >= 2, [1, 1, 1, n] for rank 1, "
        "[1, 1, 1, 1] for a scalar, with a reshape inside the program to or from the logical "
        "shape. Names do not change; the manifest's logical_inputs/logical_outputs give the "
        "logical shapes and the runtime takes and returns arrays of those shapes (a free "
        "reshape). The emitter refuses any other I/O rank.",
        "compile",
    ),
    Constraint(
        "ANE-INT32-SHAPE", "every dimension of a tensor's device layout fits int32",
        "unknown on the device: MIL text cannot even state such a shape (its shape and "
        "stride parameters are int32 tensors), so the program is never built",
        (Evidence("coremltools MIL op set", "shape, perm and begin/end/stride parameters are int32 "
                  "tensors", DOCUMENTED, SPEC),),
        "error", "verifier: _bad_type",
        "A tensor of rank other than 4 is laid out by the compiler as [1, prod(shape[:-1]), 1, "
        "shape[-1]] (the ANE-IO-RANK4 form), so a [4, 10^9, 1] tensor needs a 4 * 10^9 channel "
        "dimension. The verifier (anec check, anec compile, and every importer, which verifies "
        "what it builds) reports such a tensor at its definition (a const at the first value "
        "computed from it: a const's size is bounded where it is made), before any pass merges "
        "the dimensions; single dimensions above 2^31 - 1 were already type errors.",
        "compile",
    ),
    Constraint(
        "ANE-SPLIT", "multi-result split is unproven on the device",
        "unknown: no published on-device program contains a multi-result op",
        (Evidence("maderix/ANE (slice_by_size); Orion compiler/codegen.m (no split: it writes an "
                  "UNSUPPORTED OP comment; slices with slice_by_index)",
                  "both slice with single-result ops; a multi-result split is untested on the device",
                  HYPOTHESIS, UNTRIED),),
        "rewrite", removed_by("ANE-SPLIT"),
        "split(x, axis, sizes) becomes one slice per used result (slice_by_index in MIL), each "
        "keeping its result's name. The emitter refuses a split that reaches it.",
        "compile",
    ),
    Constraint(
        "ANE-SDPA-MASK", "scaled_dot_product_attention ignores attn_mask",
        "silently unmasked attention",
        (Evidence("maderix/ANE README (Limitations); training/test_ane_sdpa5.m",
                  "the README concludes the mask is ignored; the probe (4 mask variants at SEQ=8) has "
                  "no committed log", REPORTED, MADERIX),
         Evidence("Orion paper constraint 6 (source: maderix, ANEgpt)", "SDPA's causal mask is ignored",
                  REPORTED, ORION)),
        "n/a", "the IR has no attention op",
        "anec has no SDPA op: attention is written as matmul + additive mask + softmax + "
        "matmul (examples/gpt2_attention.ir), so the masked SDPA path is never emitted.",
        "compile",
    ),
    Constraint(
        "ANE-BLOBFILE-OFFSET", "BLOBFILE offset points at the blob's metadata record",
        "silently garbage weights with the data offset",
        (Evidence("coremltools BlobWriter (MILBlob v2 storage format)", "a blob's offset is that of its "
                  "64-byte metadata record", DOCUMENTED, SPEC),
         Evidence("Orion paper constraint 8", "offset=uint64(64), the metadata record, works; the data "
                  "offset gives garbage weights", DEMONSTRATED, ORION)),
        "emitter", "anec/mil/emitter.py, anec/mil/blobfile.py",
        "The emitter writes offset = uint64(M), M the 64-byte metadata record (64 for the first "
        "blob in a file).",
        "compile",
    ),
    Constraint(
        "ANE-COMPRESSED-WEIGHTS", "constexpr_* ops over integer BLOBFILE payloads are weights",
        "a compressed weight the device does not accept fails to compile; one it decompresses "
        "differently computes with other weights",
        (Evidence("maderix/ANE ane_int8_bench.m (README INT8 W8A8 table)",
                  "chains of 1x1 convs whose weights are constexpr_affine_dequantize over an int8 BLOBFILE "
                  "(scale 0.125, zero point 0) compile and run in program(1.3) on M4, 1.85-1.88x the fp16 "
                  "throughput with int8 activations", DEMONSTRATED, Scope("in-memory", "M4", "not stated")),
         Evidence("sbryngelson/ANEForge compression (compress=int8/int4/sparse/blockwise)",
                  "int8 as constexpr_affine_dequantize (per-row scale), 4-bit LUT as constexpr_lut_to_dense, "
                  "sparse as constexpr_sparse_to_dense and blockwise as constexpr_blockwise_shift_scale run; "
                  "the blockwise form is said not to be routable as a matmul weight (dequantized in the "
                  "program)", REPORTED, Scope("e5rt", "M1 to M5", "not stated")),
         Evidence("coremltools op definitions (iOS16 constexpr_ops.py, iOS18 compression.py) and MILBlob "
                  "storage", "the constexpr ops, their argument rules and the sub-byte BLOBFILE dtypes "
                  "(int4, uint1-uint6: packed LSB first)", DOCUMENTED, SPEC),
         Evidence("no public test", "the iOS18 forms (constexpr_blockwise_shift_scale over int8, "
                  "constexpr_lut_to_dense over uint1-uint8 indices) on the in-memory path, and "
                  "constexpr_affine_dequantize with a per-channel scale there (the demonstrated program "
                  "has one scalar scale): no published program runs them; python -m anec.selftest "
                  "(check compressed: int8 in both forms and 4-/6-bit LUTs, as conv and as matmul "
                  "weights) settles each on a Mac", HYPOTHESIS, UNTRIED)),
        "emitter", "anec/compress/, anec/mil/emitter.py (op_compressed), csrc/sim_constexpr.c; "
                   "Target.int8_form; anec/selftest/checks.py (check_compressed)",
        "--compress stores matching conv/matmul weights as integer payload BLOBFILEs (byte-identical to "
        "coremltools' writer) and a constexpr op; each tensor passes an accuracy gate or falls back. "
        "int8/uint8 weights are written as constexpr_affine_dequantize (per-channel scale, axis) in "
        "both dialects: the one form a published program runs on the device (M4, program(1.3)), and "
        "the one the blockwise op's report does not contest. The form is the target's int8_form "
        "(affine on every profile); --compress-form blockwise (compile_module(compress_form=...)) "
        "writes iOS18's constexpr_blockwise_shift_scale instead, for a Mac whose selftest shows it "
        "runs. LUTs are constexpr_lut_to_dense (ios18: indices in the weight's shape; ios16: packed). "
        "The sim checks the ops as coremltools does and decompresses at load; the selftest settles "
        "which forms the device runs (the default form failing fails the check).",
        "compile",
        target_fields=("int8_form",),
    ),
    Constraint(
        "ANE-COMPRESSED-STREAMING", "which compressed formats each chip family reads natively",
        "a format the chip does not stream is decompressed when the program loads: the file is "
        "smaller, the bandwidth is not",
        (Evidence("sbryngelson/ANEForge per-family streaming table and compress='auto'",
                  "A13 (M1) streams int4-LUT (2.37x measured) and sparse and folds int8; A14 (M2) streams "
                  "int4, int8 and sparse; A15 and later (M3+) stream all four formats",
                  REPORTED, Scope("e5rt", "M1 to M5", "not stated")),
         Evidence("maderix/ANE ane_int8_bench.m", "int8 weights with int8 activations run 1.85-1.88x "
                  "the fp16 throughput on M4; the weights' share of the gain is not isolated",
                  DEMONSTRATED, Scope("in-memory", "M4", "not stated")),
         Evidence("no public test", "LUT widths other than 4 bits, and any format on the in-memory path "
                  "outside M4 int8: streamed or decompressed at load", HYPOTHESIS, UNTRIED)),
        "emitter", "anec/compress/spec.py (for_target, not_streamed_warning); Target.streamed_weights",
        "--compress auto tries lut4 then int8, keeping only the kinds the target streams (lut4 -> fp16 "
        "on m1); an explicit format the target does not stream compiles with a warning in the "
        "compile output and the manifest's compression report. A linear weight written as "
        "constexpr_blockwise_shift_scale (4-bit, per block, --compress-form blockwise) is the kind "
        "'blockwise', which ANEForge reports dequantized in the program: no profile lists it.",
        "compile",
        target_fields=("streamed_weights",),
    ),
    Constraint(
        "ANE-COMPRESSED-SPARSE", "a sparse weight (uint1 mask and its values) is read natively",
        "a sparse weight the device rejects fails to compile; one it decompresses at load saves file "
        "size but no bandwidth",
        (Evidence("sbryngelson/ANEForge compression (compress='sparse', per-family streaming table)",
                  "writes a weight with at least 50% zeros as constexpr_sparse_to_dense over a uint1 mask "
                  "BLOBFILE (dtype code 9) and the fp16 nonzero values; its table reports sparse streamed on "
                  "A13 (M1), A14 (M2) and A15 and later. It shows no measurement for sparse (the one "
                  "measured gain is the 4-bit LUT on M1), no program on the in-memory path, no iOS16 form "
                  "(uint8 mask with shape), no sparsity below 50% and no sparse weight combined with int8 "
                  "or a LUT", REPORTED, Scope("e5rt", "M1 to M5", "not stated")),
         Evidence("no public test", "constexpr_sparse_to_dense in either dialect on the in-memory path, "
                  "as a conv or a matmul weight, and whether it streams there; the iOS18 sparse-to-sparse "
                  "ops with two results (constexpr_sparse_blockwise_shift_scale, constexpr_lut_to_sparse) "
                  "anywhere on the device: python -m anec.selftest (check compressed, probes sparse50, "
                  "sparse50+int8, sparse50+lut4) settles them on a Mac", HYPOTHESIS, UNTRIED)),
        "emitter", "anec/compress/sparse.py, anec/mil/emitter.py (op_compressed), csrc/sim_constexpr.c; "
                   "Target.streamed_weights; anec/selftest/checks.py (check_compressed)",
        "--compress sparseP prunes P% of a weight's elements by magnitude to a count fixed by its size "
        "(so a reload keeps the MIL) and writes constexpr_sparse_to_dense as coremltools' op definitions "
        "give it (ios18: a uint1 mask in the weight's shape; ios16: packed uint8 bytes and the shape; "
        "bits LSB first, as many set as values), blobs byte-identical to coremltools'. "
        "Every profile lists 'sparse' as streamed, as ANEForge reports; sparseP+int8 and sparseP+lutN "
        "(ios18 only) go through a sparse-to-sparse op, the kind 'sparse-joint' that no profile lists "
        "(they compile with a warning). The sim refuses a mask whose set bits do not number the values. The selftest reports whether the device runs it (a "
        "rejection is reported, wrong values fail the check).",
        "compile",
        target_fields=("streamed_weights",),
    ),
    Constraint(
        "ANE-INT8-ACTIVATIONS", "quantize -> int8 -> dequantize between convs runs (W8A8)",
        "a device without the iOS17 ops rejects the program; one that rounds quantize otherwise "
        "than the reference computes activations one int8 step off where the roundings differ",
        (Evidence("maderix/ANE ane_int8_bench.m (README INT8 W8A8 table)",
                  "chains of 1x1 convs [1, C, 64, 64] over constexpr_affine_dequantize int8 weights, with "
                  "quantize(input, output_dtype = \"int8\", scale = fp16(0x1p-3)) and dequantize(input, scale) "
                  "after every conv but the last, compile and run in program(1.3) on M4 (\"H16G\"), 1.85-1.88x "
                  "the fp16 throughput (35.1 vs 18.6 TOPS, 128 convs of 512 channels); it reports throughput, "
                  "not outputs", REPORTED, Scope("in-memory", "M4", "not stated")),
         Evidence("no public test", "the ops on other chips (M1-M3, M5), after ops other than a conv (a norm, "
                  "gelu) and before a matmul, with scales other than 0.125, and how the device rounds "
                  "quantize (coremltools' reference, optimize/_utils.py quantize_by_scale_and_zp: the "
                  "quotient in the input's dtype, np.around half to even, clip): python -m anec.selftest "
                  "(check int8-activations: a W8A8 chain against the interpreter, and the rounding read off "
                  "an identity conv) settles them on a Mac", HYPOTHESIS, UNTRIED)),
        "emitter", "anec/passes/quantize_activations.py, anec/ir/act_quant.py, anec/mil/emitter.py (_int8), "
                   "csrc/sim_quant.c; anec/selftest/checks.py (check_int8_activations)",
        "Opt-in: --activations int8 --calibration INPUTS.npz sets a per-tensor scale fp16(max|x| / 127) "
        "for the activation operand of each conv/matmul over a weight (not program inputs) and writes "
        "quantize/dequantize before it, as coremltools prints the iOS17 ops; an accuracy gate on the "
        "calibration outputs sends activations back to fp16. ios18 only (--dialect ios16 with it is an "
        "error). The interpreter and the sim round as coremltools' reference; the sim refuses a scale "
        "that is not a positive finite scalar const, other output dtypes and iOS16 opsets.",
        "compile",
    ),
    Constraint(
        "ANE-COMPRESSED-BUDGET", "a compressed weight counts as one tensor of the BLOBFILE budget",
        "a program over the budget fails to compile",
        (Evidence("no public test", "whether the device counts a constexpr weight, or each of its payload "
                  "BLOBFILEs, against the per-program tensor cap (ANE-BLOB-BUDGET)", HYPOTHESIS, UNTRIED),),
        "analysis", "legalize counts each weight const once; csrc/sim_plan.c counts a constexpr result, "
                    "not its payloads",
        "Compression is decided after legalize, so the partition plan counts one tensor per weight; "
        "the sim's budget check agrees. A device that counts payloads would need the partition to "
        "count 2-3 tensors per compressed weight.",
        "compile",
    ),
    Constraint(
        "ANE-ONE-FILE-PER-WEIGHT", "M1 rejects BLOBFILEs holding several tensors",
        "compile fails on M1 with a multi-tensor weight file",
        (Evidence("maderix/ANE benchmarks/ANE_BENCHMARK_REPORT.md (community results, issue #3)",
                  "the report's compatibility matrix marks single-blob (multi-tensor) weight files FAIL "
                  "on M1 and per-matrix blobs working; its reading of benchmarks that failed there",
                  REPORTED, Scope("in-memory", "M1 Pro, M1 Max", "macOS 15.0, 15.6.1")),),
        "emitter", "anec/mil/emitter.py; legalize: check_weight_packing",
        "The emitter writes one tensor per file by default; asking for packed weights "
        "(pack_weights option) on a target with one_file_per_weight is a compile error.",
        "compile",
        switch="one_file_per_weight",
    ),
    Constraint(
        "ANE-SOFTMAX-POW2", "softmax over a non-power-of-2 axis is rejected",
        "InvalidMILProgram",
        (Evidence("hollance/neural-engine#44", "softmax on a non-power-of-2 dimension gives "
                  "InvalidMILProgram", REPORTED, Scope("not stated (raw MIL text)", "not stated", "not stated")),
         Evidence("maderix/ANE training/ane_classifier.h gen_softmax_vocab (train_large_ane)",
                  "softmax(axis=1) over [1, 32000, 1, 256] compiles and runs in the ANE-extras "
                  "training pipeline (training/README.md comparison)", DEMONSTRATED, MADERIX,
                  supports=False)),
        "error", "legalize: check_softmax_axis",
        "Off by default (maderix runs softmax over 32000 channels). When a target "
        "turns it on, softmax over a non-power-of-2 axis is an error suggesting padding with "
        "a -1e4 additive mask.",
        "compile",
        switch="softmax_pow2_only",
    ),
    Constraint(
        "ANE-REDUCE-MEAN", "reduce_mean is not accepted in raw MIL text",
        "compile fails",
        (Evidence("hollance/neural-engine#44", "reduce_mean is absent in raw MIL text; use reduce_sum "
                  "times 1/N", REPORTED, Scope("not stated (raw MIL text)", "not stated", "not stated")),
         Evidence("Orion compiler/builder.c LayerNorm (GPT-2 prefill); tests/test_ane_prefill.m",
                  "the LayerNorm composite emits reduce_mean, and the prefill kernels using it match the "
                  "CPU (K max error < 1.0, same argmax)", DEMONSTRATED, ORION, supports=False)),
        "rewrite", "legalize: lower_reduce_mean",
        "On by default: reduce_mean(x) becomes reduce_sum(x * (1/N)). Scaling before summing "
        "keeps the fp16 partial sums within the range of x (a sum of 768 values of 100 would "
        "overflow fp16); the cost is that |x| below 2^-14*N falls into fp16 subnormals.",
        "compile",
        switch="reduce_mean_as_sum",
    ),
    Constraint(
        "ANE-MIL-DIALECT", "M1/M2 may want the older MIL dialect",
        "compile fails on program(1.3) shorthand scalars (claimed for M1/M2)",
        (Evidence("maderix/ANE PR #6 (unmerged)", "M1/M2 need program(1.0)/<ios16> with verbose "
                  "scalars", REPORTED, Scope("in-memory", "M1, M2", "not stated")),
         Evidence("maderix/ANE benchmarks/ANE_BENCHMARK_REPORT.md (community results)",
                  "the static training pipeline, program(1.3)/<ios18> kernels, ran on M1 Pro and M1 Max "
                  "at 143-167 ms/step (the report marks program(1.3) PARTIAL on M1)", DEMONSTRATED,
                  Scope("in-memory", "M1 Pro, M1 Max", "macOS 15.0, 15.6.1"), supports=False)),
        "emitter", "anec/mil/emitter.py (target.mil_dialect, --dialect)",
        "Every target writes program(1.3)/<ios18>. The older program(1.0)/<ios16> with "
        "verbose scalars (tensor<string, []>(\"x\")) is an explicit fallback: --dialect ios16 "
        "(compile_module(dialect=...)); the manifest records the dialect written; "
        "python -m anec.selftest (dialect) probes both.",
        "compile",
        switch="mil_dialect",
    ),
    Constraint(
        "ANE-SURFACE-ALIGN", "M5 needs 128-byte aligned surfaces",
        "eval fails with misaligned surfaces",
        (Evidence("maderix/ANE PR #35 (unmerged)", "128-byte IOSurface alignment is needed on M5",
                  REPORTED, Scope("in-memory", "M5", "not stated")),),
        "runtime", "manifest *_alloc_bytes; C runtime core",
        "Allocation sizes in the manifest are rounded up to the target's surface_alignment.",
        "runtime",
        target_fields=("surface_alignment",), switch="surface_alignment",
    ),
)
