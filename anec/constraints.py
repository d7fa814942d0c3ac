"""The constraint catalog: what the ANE rejects or gets wrong, and what anec does about it.

Each :class:`Constraint` has a stable id (``ANE-CONCAT`` ...) used in compiler
errors, in the C simulator's messages, in the manifest's ``rewrites`` list and
in tests. An entry says what happens on the device, where the claim comes
from and how strong the evidence is:

* ``verified``: a published on-device measurement (the Orion paper's catalog,
  measured on M4 Max; maderix/ANE probes) or the documented MIL op set;
* ``reported``: an issue, an unmerged pull request or a forum post. Reported
  claims that would cost something to guard against are switchable per
  target (``switch`` names the :class:`~anec.targets.Target` field).

and how anec handles it: a legalize rewrite rule, a compile-time error, the
MIL emitter, the runtime, or the SRAM analysis. ``tested_by`` names the tests
that trigger the constraint (``path::test``); ``anec constraints`` prints the
catalog and ``docs/constraints.md`` is generated from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from anec.diagnostics import AnecError, did_you_mean
from anec.ir.ops import BINARY, OPS, Mil, NotOnAne
from anec.targets import DEFAULT_TARGET, TARGETS, Target

VERIFIED = "verified"
REPORTED = "reported"

#: How a constraint is handled: by a rewrite in legalize, an error, the MIL
#: emitter, the runtime (C core / drivers), the SRAM analysis, or not at all
#: because anec cannot produce the offending construct.
HANDLINGS = ("rewrite", "rewrite or error", "error", "emitter", "runtime", "analysis", "n/a")


@dataclass(frozen=True)
class Constraint:
    """One catalog entry."""

    id: str
    """Stable id, e.g. ``ANE-CONCAT``."""
    title: str
    """The constraint in a few words."""
    symptom: str
    """What happens on the device when it is violated."""
    source: str
    """Where the claim comes from."""
    evidence: str
    """``verified`` or ``reported``."""
    handling: str
    """One of :data:`HANDLINGS`."""
    handled_by: str
    """The rule, function or component that handles it."""
    detail: str
    """How anec handles it, in a sentence or two."""
    stage: str
    """``compile`` (checked by ``anec compile``/``anec check``) or ``runtime``."""
    tested_by: tuple[str, ...]
    """Tests that trigger it (``path::test_name``)."""
    target_fields: tuple[str, ...] = ()
    """Target fields that parametrize it (limits)."""
    switch: str | None = None
    """Target field that turns it on or off per chip (reported claims)."""

    def applies_to(self, target: Target) -> bool:
        """Whether the constraint is in force on ``target``."""
        if self.switch is None:
            return True
        return _SWITCHES[self.switch](target)

    def on_target(self, target: Target) -> str:
        """A short description of this entry on ``target`` (limits, switch state)."""
        parts = [f"{f}={_fmt_field(getattr(target, f))}" for f in self.target_fields]
        if self.switch is not None:
            state = "on" if self.applies_to(target) else "off"
            parts.insert(0, f"{state} ({self.switch}={_fmt_field(getattr(target, self.switch))})")
        return ", ".join(parts) if parts else "always"


# A switch field -> "is the constraint in force on this target".
_SWITCHES = {
    "softmax_pow2_only": lambda t: t.softmax_pow2_only,
    "reduce_mean_as_sum": lambda t: t.reduce_mean_as_sum,
    "fp32_io": lambda t: not t.fp32_io,
    "one_file_per_weight": lambda t: t.one_file_per_weight,
    "mil_dialect": lambda t: t.mil_dialect != "ios18",
    "surface_alignment": lambda t: t.surface_alignment > 64,
}


def _removed_by(cid: str) -> str:
    """``legalize: <rules>`` for a constraint the op table names (the rows say which rules)."""
    rules: list[str] = []
    for op in OPS.values():
        low = op.lowering
        rejections = [low] if isinstance(low, NotOnAne) else list(low.rejected.values()) if isinstance(low, Mil) else []
        rules += [r for rej in rejections if rej.constraint == cid for r in rej.rules]
    if not rules:
        raise ValueError(f"no op row names constraint {cid}")
    return "legalize: " + ", ".join(rules)


def _fmt_field(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) and v >= 1024 * 1024 and v % (1024 * 1024) == 0:
        return f"{v // (1024 * 1024)} MiB"
    return str(v)


_LEG = "tests/passes/test_legalize.py"
_DCE = "tests/passes/test_dce.py"
_SRAM = "tests/passes/test_annotate_sram.py"
_EMIT = "tests/mil/test_mil_emitter.py"
_ART = "tests/mil/test_mil_artifact.py"
_PROTO = "tests/ane_protocol/test_ane_protocol.c"
_CORE = "tests/runtime/test_rt_core.py"
_SIM = "tests/runtime/test_rt_mil_checks.py"

_ENTRIES = (
    Constraint(
        "ANE-CONCAT", "concat is rejected",
        "compile fails: ANECCompile() FAILED: err=()",
        "Orion paper constraint 1 (T064-T071)", VERIFIED,
        "rewrite or error", _removed_by("ANE-CONCAT"),
        "A channel concat whose every use is the input of a conv1x1 becomes a sum of partial "
        "convs over weight slices (conv(concat(a, b), W) = conv(a, W[:, :ca]) + "
        "conv(b, W[:, ca:])). Any other concat is an error suggesting a multi-output program.",
        "compile",
        (f"{_LEG}::test_concat_feeding_convs_becomes_partial_convs",
         f"{_LEG}::test_other_concat_is_rejected",
         f"{_SIM}::test_rejected_ops_name_constraint_and_line"),
    ),
    Constraint(
        "ANE-GELU", "gelu is not a valid MIL op for the ANE",
        "compile fails",
        "Orion paper constraint 10", VERIFIED,
        "rewrite", _removed_by("ANE-GELU"),
        "gelu becomes 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))). For mode=\"exact\" (erf) "
        "this is an approximation (max abs error 4.7e-4), recorded in the rewrite list.",
        "compile",
        (f"{_LEG}::test_gelu_tanh_is_expanded", f"{_LEG}::test_exact_gelu_is_approximated",
         f"{_SIM}::test_rejected_ops_name_constraint_and_line"),
    ),
    Constraint(
        "ANE-RSQRT", "rsqrt is rejected",
        "compile fails",
        "Orion community issue mechramc/Orion#3 (measured on M4, added to Orion's catalog)",
        REPORTED,
        "rewrite", _removed_by("ANE-RSQRT"),
        "rsqrt(x) becomes pow(x, -0.5).",
        "compile", (f"{_LEG}::test_rsqrt_becomes_pow",
         f"{_SIM}::test_rejected_ops_name_constraint_and_line"),
    ),
    Constraint(
        "ANE-NEG", "there is no neg op in MIL",
        "compile fails (unknown op)",
        "the MIL op set: coremltools' iOS15-iOS18 op registry has no neg", VERIFIED,
        "rewrite", _removed_by("ANE-NEG"),
        "neg(x) becomes mul(x, -1).",
        "compile", (f"{_LEG}::test_neg_becomes_mul",
         f"{_SIM}::test_rejected_ops_name_constraint_and_line"),
    ),
    Constraint(
        "ANE-CONV-BIAS", "conv does not take bias=",
        "compile fails",
        "Orion paper constraint 13; Orion's conv+bias fusion pass is disabled for this reason",
        VERIFIED,
        "rewrite", _removed_by("ANE-CONV-BIAS"),
        "conv1x1(x, w, bias=b) becomes add(conv1x1(x, w), b).",
        "compile", (f"{_LEG}::test_conv_bias_becomes_add",
         f"{_SIM}::test_conv_bias_rejected"),
    ),
    Constraint(
        "ANE-CONV-CONST-WEIGHT", "a conv reads its weight from a constant",
        "no reference feeds the ANE a conv whose weight is computed or an input",
        "maderix training_dynamic (weights packed into the input go through matmul) and Orion's LoRA "
        "adapters (inputs through matmul); no public program passes conv a non-constant weight",
        REPORTED,
        "rewrite", "legalize: conv_dynamic_weight_to_matmul",
        "conv1x1(x, w) with w a func input (weights compiled as inputs) or a computed value becomes "
        "transpose(matmul(transpose(x), reshape(w), transpose_y=true)), the form the references run.",
        "compile", ("tests/passes/test_weights_as_inputs.py::test_conv_with_an_input_weight_becomes_matmul",
                    "tests/runtime/test_rt_weight_inputs.py::test_weights_as_inputs_reload_without_compile_or_load"),
    ),
    Constraint(
        "ANE-MATMUL-FLAGS", "matmul transpose flags must be named consts",
        "compile fails on inline bools",
        "Orion paper constraint 12", VERIFIED,
        "emitter", "anec/mil/emitter.py",
        "Every non-tensor parameter, including transpose_x/transpose_y, is emitted as a named "
        "const <node>_<param>.",
        "compile", (f"{_EMIT}::test_matmul_flags_are_bool_consts",
                    f"{_EMIT}::test_every_param_is_a_named_const",
                    f"{_SIM}::test_matmul_inline_flags_rejected_named_accepted"),
    ),
    Constraint(
        "ANE-LIVE-OUTPUTS", "returned names must be live values",
        "InvalidMILProgram when the return tuple names a dead value",
        "Orion paper constraint 14", VERIFIED,
        "analysis", "dce, Graph.replace_all_uses",
        "dce never removes a returned value; rewrites keep returned names "
        "(Graph.replace_all_uses renames the replacement), so the MIL return tuple always "
        "names live values with the declared names.",
        "compile",
        (f"{_DCE}::test_dce_keeps_outputs_and_inputs",
         f"{_LEG}::test_rewrite_of_returned_value_keeps_its_name",
         f"{_SIM}::test_live_outputs"),
    ),
    Constraint(
        "ANE-CONV-CHANNELS", "very wide convs are rejected",
        "compile fails for a 32K-channel conv",
        "Orion paper constraint 16; maderix (32000 output channels compiled on M4, 32000 input "
        "channels rejected)", VERIFIED,
        "rewrite or error", "legalize: chunk_wide_conv_output, split_wide_conv_input",
        "A conv with more output channels than the target allows is split into chunked convs "
        "when its result (possibly through elementwise unary ops) is returned: the outputs "
        "become name__c0, name__c1, ... and meta['logical_outputs'] tells the runtime how to "
        "reassemble them. Too many input channels become a sum of convs over input slices. A "
        "too-wide conv whose result is used inside the program is an error.",
        "compile",
        (f"{_LEG}::test_wide_returned_conv_is_chunked",
         f"{_LEG}::test_wide_internal_conv_is_rejected",
         f"{_LEG}::test_wide_conv_input_is_split",
         f"{_SIM}::test_conv_channel_limit"),
        target_fields=("max_conv_out_channels",),
    ),
    Constraint(
        "ANE-BLOB-BUDGET", "at most 16 BLOBFILE tensors per program",
        "17 BLOBFILE tensors fail with InvalidMILProgram; any pow/add/mul with an inline "
        "scalar lowers the cap to 15 (does not stack)",
        "Orion community issue mechramc/Orion#3 (measured on M4)", REPORTED,
        "rewrite or error", "legalize: partition (anec/passes/partition.py)",
        "Counted after all rewrites, per program: one tensor per distinct weight view, i.e. key, "
        "perm, slice and type (identical weight consts are merged first); value= consts are "
        "inline literals in MIL and do not count. The cap "
        f"drops by the scalar penalty when a binary op ({'/'.join(o for o in OPS if o in BINARY)}) takes a "
        "rank-0 const. A func over the cap is cut into a pipeline of programs, each within it "
        "(fewest programs, then fewest bytes between them); a node that alone reads more tensors "
        "than a program holds is an error at that node.",
        "compile",
        (f"{_LEG}::test_blob_budget_cuts_the_func_into_programs",
         f"{_LEG}::test_blob_budget_scalar_penalty",
         "tests/passes/test_partition.py::test_a_node_that_fits_no_program_is_a_located_error",
         f"{_SIM}::test_blob_budget_and_scalar_penalty"),
        target_fields=("max_blob_tensors", "scalar_penalty"),
    ),
    Constraint(
        "ANE-UNIFORM-SURFACES", "multi-input/-output surfaces need equal allocation sizes",
        "eval fails: ANEProgramProcessRequestDirect() status=0x1d",
        "Orion paper constraints 2 and 18 (T072, T163)", VERIFIED,
        "runtime", "manifest input_alloc_bytes/output_alloc_bytes; C runtime core",
        "The manifest gives one allocation size per direction (the largest tensor, at least "
        "the minimum surface, aligned); the runtime allocates every surface at that size.",
        "runtime", (f"{_ART}::test_alloc_bytes_uniform_aligned", f"{_CORE}::test_surface_rules"),
    ),
    Constraint(
        "ANE-IO-ORDER", "I/O binds in alphabetical order of MIL names",
        "silently wrong (swapped) data",
        "Orion paper constraints 3 and 19 (T101, T163)", VERIFIED,
        "runtime", "manifest binding indexes; C runtime core",
        "The manifest records each input's and output's binding index (alphabetical order of "
        "MIL names); the runtime binds surfaces by that index, so users pass names, not order.",
        "runtime", (f"{_ART}::test_manifest_io_and_bindings",
                    f"{_CORE}::test_binding_tables_are_alphabetical",
                    f"{_CORE}::test_declaration_order_binding_gives_wrong_results_like_the_device"),
    ),
    Constraint(
        "ANE-MIN-SURFACE", "surfaces below ~49 KB fail at eval",
        "eval fails with status 0x1d (seq=1 with 768 channels, 3 KB)",
        "Orion paper constraint 4 (T100)", VERIFIED,
        "runtime", "manifest *_alloc_bytes; C runtime core",
        "Allocations are at least min_surface_bytes; data is written packed at byte 0.",
        "runtime", (f"{_ART}::test_alloc_bytes_uniform_aligned", f"{_CORE}::test_surface_rules",
                    f"{_CORE}::test_surface_alignment_and_minimum_from_limits"),
        target_fields=("min_surface_bytes",),
    ),
    Constraint(
        "ANE-PACKED-READ", "the ANE reads packed data from byte 0 of an oversized surface",
        "silently wrong data when rows are stride-padded",
        "Orion paper constraint 20 (T163)", VERIFIED,
        "runtime", "C runtime core (packed writes and reads)",
        "The runtime writes and reads tensors packed in their declared shape at offset 0.",
        "runtime", (f"{_CORE}::test_surface_rules",),
    ),
    Constraint(
        "ANE-BAKED-WEIGHTS", "weights are baked at compile time",
        "rewriting weights/*.bin and loading again does not change outputs: load uses the compiled "
        "net.plist + data the compiler left in the hexId directory",
        "maderix test_weight_reload (M5, max diff 0.0); Orion E5 spike (for a one-tensor program the "
        "compiled data equals the BLOBFILE) and test_delta_compile (data patch == fresh compile)",
        VERIFIED,
        "runtime", "C runtime core (reload strategies) and python -m anec.selftest",
        "A reload never rewrites files and loads again. It uses a strategy verified on the machine: "
        "data patch (a program whose weights are one BLOBFILE that its compiled data was observed to "
        "equal gets the new BLOBFILE as its data, then a load; no compile), weights compiled as "
        "program inputs (a surface write), or recompile within the process budget. The sim and the "
        "ane fake bake weights the same way; the selftest probes on a Mac which strategies change "
        "outputs and caches the verdict, and until it has, reloads recompile.",
        "runtime", ("tests/ane_protocol/test_ane_core.c::test_reload_data_patch_verified",
                    "tests/ane_protocol/test_ane_core.c::test_reload_falls_back_to_recompile_unverified",
                    "tests/ane_protocol/test_ane_core.c::test_cache_hit_other_weights_patched",
                    f"{_PROTO}::test_weights_baked_at_compile",
                    "tests/runtime/test_rt_reload.py::test_weights_are_baked_at_compile",
                    "tests/runtime/test_rt_reload.py::test_reload_equals_a_fresh_compile_with_the_strategy_"
                    "the_device_allows",
                    "tests/ane_protocol/test_anec_selftest.py::test_reload_probe_finds_what_each_device_allows"),
    ),
    Constraint(
        "ANE-COMPILE-BUDGET", "about 119 compiles per process",
        "compiles start failing silently after ~119 per process",
        "maderix README; Orion paper constraint 5 (maderix PR #23 measured 119-132 on M4)",
        VERIFIED,
        "runtime", "C runtime core (process-wide compile budget, program cache)",
        "The runtime counts compiles per process and driver (every Runtime shares the count, as on "
        "the device) against the target's process_compile_budget, caches programs by MIL hash + weight keys, refuses compiles past the budget with "
        "a clear error, and reloads weights without compiling wherever a verified strategy allows.",
        "runtime", (f"{_CORE}::test_compile_budget_exhaustion_and_cache",
                    f"{_CORE}::test_the_compile_budget_belongs_to_the_process",
                    f"{_CORE}::test_the_process_budget_is_the_targets_field",
                    "tests/runtime/test_rt_reload.py::test_recompile_reloads_stop_at_the_process_budget_with_a_"
                    "clear_error"),
    ),
    Constraint(
        "ANE-MIL-NSDATA", "MIL text must be passed as bytes (NSData)",
        "crash or silent failure when passed as a string",
        "Orion paper constraint 9", VERIFIED,
        "runtime", "driver_ane",
        "The ane driver passes the MIL text as UTF-8 bytes.",
        "runtime", (f"{_PROTO}::test_mil_is_nsdata_and_weights_dict",),
    ),
    Constraint(
        "ANE-WEIGHTS-DICT", "the weights dictionary must be empty, never nil",
        "crash",
        "Orion paper constraint 11", VERIFIED,
        "runtime", "driver_ane",
        "The ane driver always passes a dictionary (empty when weights come from files).",
        "runtime", (f"{_PROTO}::test_empty_weights_dict_not_nil",),
    ),
    Constraint(
        "ANE-FP16-RANGE", "the ANE computes in fp16 (+-65504)",
        "overflow gives inf, then NaN downstream",
        "Orion NaN fix (100% -> 0% NaN steps); hollance/neural-engine FAQ", VERIFIED,
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
        (f"{_LEG}::test_weight_outside_fp16_range_is_rejected",
         f"{_LEG}::test_nan_weight_is_rejected",
         "tests/runtime/test_rt_fp16_range.py::test_without_the_pass_the_same_inputs_give_wrong_numbers",
         "tests/passes/test_range_safe.py::test_range_analysis_finds_the_first_overflow_and_the_lost_bits"),
    ),
    Constraint(
        "ANE-CONV-FASTER", "a 1x1 conv is ~3x faster than matmul",
        "no failure; matmul with a constant operand runs ~3x slower",
        "Orion paper constraint 17", VERIFIED,
        "rewrite", "legalize: matmul_const_to_conv",
        "A matmul whose other operand is a constant 2-D weight becomes a 1x1 conv (the weight "
        "is laid out with the const's perm attr; transposes/reshapes move the contraction axis "
        "to channels). Skipped when a conv would exceed the channel limit.",
        "compile", (f"{_LEG}::test_matmul_with_const_weight_becomes_conv",
                    f"{_LEG}::test_matmul_with_const_left_operand_becomes_conv"),
        target_fields=("max_conv_out_channels",),
    ),
    Constraint(
        "ANE-SRAM", "~32 MB of on-chip SRAM",
        "working sets above it spill to DRAM, ~30% slower (no failure)",
        "maderix hardware table; sram_probe on M4 Max (maderix PR #25)", VERIFIED,
        "analysis", "annotate-sram",
        "annotate-sram computes per-node bytes and live bytes over the schedule, marks nodes "
        "whose live set exceeds SRAM with spill=true and reports the peak in the manifest and "
        "anec check. A warning, never an error.",
        "compile", (f"{_SRAM}::test_spill_is_marked_when_live_set_exceeds_sram",),
        target_fields=("sram_bytes",),
    ),
    Constraint(
        "ANE-FP32-IO", "fp32 program I/O is rejected on M1-generation ANEs",
        "compile fails; Orion's infer then silently falls back to CPU",
        "Orion repo, later revision (community report); maderix PR #6 for M2", REPORTED,
        "rewrite or error", "legalize: check_io_dtypes (host_casts option)",
        "On targets without fp32 I/O, fp32 inputs/outputs are an error unless the host_casts "
        "option is set: then the program takes and returns fp16, redundant casts fold away, "
        "and meta['host_casts'] (manifest host_casts) tells the host to convert.",
        "compile",
        (f"{_LEG}::test_fp32_io_rejected_on_m1", f"{_LEG}::test_host_casts_rewrite_io",
         f"{_SIM}::test_fp32_io_rejected_when_not_allowed"),
        switch="fp32_io",
    ),
    Constraint(
        "ANE-IO-TENSORS", "program inputs and outputs are fp16 or fp32 tensors",
        "compile fails: an integer or bool input or output has no IOSurface layout",
        "the published runtimes bind only fp16/fp32 tensor surfaces (Orion iosurface_tensor.m, "
        "maderix probes); anec's runtime and sim driver accept nothing else", REPORTED,
        "error", "legalize: check_io_tensors",
        "A non-float func input or output is an error at compile time naming the value, with "
        "the fix: declare integer inputs as fp16 and cast inside, cast integer outputs to fp16 "
        "before returning. A float scalar is fine: ANE-IO-RANK4 makes it a [1, 1, 1, 1] tensor.",
        "compile",
        (f"{_LEG}::test_io_must_be_float_tensors", f"{_SIM}::test_scalar_and_integer_io_rejected"),
    ),
    Constraint(
        "ANE-FLOAT-COMPUTE", "arithmetic computes on fp16/fp32 tensors",
        "unknown: no published on-device program computes on integer tensors",
        "every op of every program maderix/ANE and Orion run on the device computes on fp16 "
        "(fp32 only around casts at the I/O); the sim, modelling the pessimistic case, rejects "
        "integer arithmetic when it loads the MIL", REPORTED,
        "error", "legalize: check_float_compute",
        "add/sub/mul/pow, matmul and the reductions on int32 operands are errors at compile time "
        "naming the node, with the fix (cast to fp16 first). Casts to and from int32 and moving "
        "integer tensors (reshape, transpose, slice) stay legal.",
        "compile",
        (f"{_LEG}::test_integer_arithmetic_is_a_located_error",
         "tests/runtime/test_rt_every_op.py::test_int32_arithmetic_is_rejected_when_compiling"),
    ),
    Constraint(
        "ANE-IO-RANK4", "program inputs and outputs are rank-4 [1, C, 1, S] tensors",
        "unknown: no published on-device program has I/O of another rank",
        "every program maderix/ANE and Orion run on the device has rank-4 [1, C, 1, S] inputs "
        "and outputs (maderix IOSurface layout, Orion's activation layout)", REPORTED,
        "rewrite", "legalize: reshape_io_to_rank4",
        "A func input or output of another rank becomes a rank-4 tensor with the same elements: "
        "[1, prod(shape[:-1]), 1, shape[-1]] for rank >= 2, [1, 1, 1, n] for rank 1, "
        "[1, 1, 1, 1] for a scalar, with a reshape inside the program to or from the logical "
        "shape. Names do not change; the manifest's logical_inputs/logical_outputs give the "
        "logical shapes and the runtime takes and returns arrays of those shapes (a free "
        "reshape). The emitter refuses any other I/O rank.",
        "compile",
        (f"{_LEG}::test_io_of_other_ranks_becomes_rank4",
         f"{_EMIT}::test_io_rank_other_than_4_is_refused",
         "tests/mil/test_mil_contract.py::test_rank_n_funcs_run_on_the_sim_with_logical_shapes"),
    ),
    Constraint(
        "ANE-INT32-SHAPE", "every dimension of a tensor's device layout fits int32",
        "unknown on the device: MIL text cannot even state such a shape (its shape and "
        "stride parameters are int32 tensors), so the program is never built",
        "the MIL op set (Apple coremltools MIL: shape, perm, begin/end/stride parameters are "
        "int32 tensors)", VERIFIED,
        "error", "verifier: _bad_type",
        "A tensor of rank other than 4 is laid out by the compiler as [1, prod(shape[:-1]), 1, "
        "shape[-1]] (the ANE-IO-RANK4 form), so a [4, 10^9, 1] tensor needs a 4 * 10^9 channel "
        "dimension. The verifier (anec check, anec compile, and every importer, which verifies "
        "what it builds) reports such a tensor at its definition (a const at the first value "
        "computed from it: a const's size is bounded where it is made), before any pass merges "
        "the dimensions; single dimensions above 2^31 - 1 were already type errors.",
        "compile",
        ("tests/passes/test_int32_shape.py::test_a_rank3_tensor_whose_device_layout_overflows_int32",
         "tests/security/test_huge_shapes.py::test_huge_reshapes_are_located_errors_in_every_command"),
    ),
    Constraint(
        "ANE-SPLIT", "multi-result split is unproven on the device",
        "unknown: no published on-device program contains a multi-result op",
        "maderix/ANE slices with single-result slice_by_size, Orion's codegen has no split "
        "(it writes an UNSUPPORTED OP comment) and slices with slice_by_index", REPORTED,
        "rewrite", _removed_by("ANE-SPLIT"),
        "split(x, axis, sizes) becomes one slice per used result (slice_by_index in MIL), each "
        "keeping its result's name. The emitter refuses a split that reaches it.",
        "compile",
        (f"{_LEG}::test_split_becomes_slices", f"{_EMIT}::test_split_is_refused",
         "tests/mil/test_mil_contract.py::test_examples_and_graphs_use_only_proven_constructs",
         "tests/mil/test_mil_conformance.py::test_generated_graphs_typecheck_after_default_pipeline"),
    ),
    Constraint(
        "ANE-SDPA-MASK", "scaled_dot_product_attention ignores attn_mask",
        "silently unmasked attention",
        "Orion paper constraint 6 (maderix, ANEgpt)", VERIFIED,
        "n/a", "the IR has no attention op",
        "anec has no SDPA op: attention is written as matmul + additive mask + softmax + "
        "matmul (examples/gpt2_attention.ir), so the masked SDPA path is never emitted.",
        "compile", (),
    ),
    Constraint(
        "ANE-BLOBFILE-OFFSET", "BLOBFILE offset points at the blob's metadata record",
        "silently garbage weights with the data offset",
        "Orion paper constraint 8; coremltools BlobWriter", VERIFIED,
        "emitter", "anec/mil/emitter.py, anec/mil/blobfile.py",
        "The emitter writes offset = uint64(M), M the 64-byte metadata record (64 for the first "
        "blob in a file).",
        "compile", ("tests/mil/test_mil_blobfile.py::test_layout_fields",
                    f"{_EMIT}::test_packed_weights_offsets"),
    ),
    Constraint(
        "ANE-ONE-FILE-PER-WEIGHT", "M1 rejects BLOBFILEs holding several tensors",
        "compile fails on M1 with a multi-tensor weight file",
        "maderix benchmark report (community results): single-blob weights FAIL on M1",
        REPORTED,
        "emitter", "anec/mil/emitter.py; legalize: check_weight_packing",
        "The emitter writes one tensor per file by default; asking for packed weights "
        "(pack_weights option) on a target with one_file_per_weight is a compile error.",
        "compile", (f"{_LEG}::test_packed_weights_rejected_on_m1",
                    f"{_EMIT}::test_one_file_per_weight"),
        switch="one_file_per_weight",
    ),
    Constraint(
        "ANE-SOFTMAX-POW2", "softmax over a non-power-of-2 axis is rejected",
        "InvalidMILProgram",
        "hollance/neural-engine#44", REPORTED,
        "error", "legalize: check_softmax_axis",
        "Off by default (Orion runs softmax on other sizes without trouble). When a target "
        "turns it on, softmax over a non-power-of-2 axis is an error suggesting padding with "
        "a -1e4 additive mask.",
        "compile", (f"{_LEG}::test_softmax_pow2_switch",),
        switch="softmax_pow2_only",
    ),
    Constraint(
        "ANE-REDUCE-MEAN", "reduce_mean is not accepted in raw MIL text",
        "compile fails",
        "hollance/neural-engine#44; Orion's RMSNorm uses reduce_sum x 1/N", REPORTED,
        "rewrite", "legalize: lower_reduce_mean",
        "On by default: reduce_mean(x) becomes reduce_sum(x * (1/N)). Scaling before summing "
        "keeps the fp16 partial sums within the range of x (a sum of 768 values of 100 would "
        "overflow fp16); the cost is that |x| below 2^-14*N falls into fp16 subnormals.",
        "compile", (f"{_LEG}::test_reduce_mean_lowered_scale_first",),
        switch="reduce_mean_as_sum",
    ),
    Constraint(
        "ANE-MIL-DIALECT", "M1/M2 may want the older MIL dialect",
        "compile fails on program(1.3) shorthand scalars (claimed for M1/M2)",
        "maderix PR #6 (unmerged) claims it; maderix community results show M1 Pro/Max on "
        "macOS 15 running program(1.3)/<ios18> training kernels", REPORTED,
        "emitter", "anec/mil/emitter.py (target.mil_dialect, --dialect)",
        "Every target writes program(1.3)/<ios18>. The older program(1.0)/<ios16> with "
        "verbose scalars (tensor<string, []>(\"x\")) is an explicit fallback: --dialect ios16 "
        "(compile_module(dialect=...)); the manifest records the dialect written.",
        "compile", (f"{_EMIT}::test_ios16_dialect", "tests/mil/test_mil_compile.py::test_dialect_option"),
        switch="mil_dialect",
    ),
    Constraint(
        "ANE-SURFACE-ALIGN", "M5 needs 128-byte aligned surfaces",
        "eval fails with misaligned surfaces",
        "maderix PR #35 (unmerged)", REPORTED,
        "runtime", "manifest *_alloc_bytes; C runtime core",
        "Allocation sizes in the manifest are rounded up to the target's surface_alignment.",
        "runtime", (f"{_ART}::test_alloc_bytes_uniform_aligned",
                    f"{_CORE}::test_surface_alignment_and_minimum_from_limits"),
        target_fields=("surface_alignment",), switch="surface_alignment",
    ),
)

CONSTRAINTS: dict[str, Constraint] = {c.id: c for c in _ENTRIES}


def get_constraint(cid: str) -> Constraint:
    """The entry with id ``cid``; ``AnecError`` with a suggestion otherwise."""
    key = cid.strip().upper()
    if key in CONSTRAINTS:
        return CONSTRAINTS[key]
    hint = did_you_mean(key, CONSTRAINTS) or "run `anec constraints` for the list"
    raise AnecError(f"unknown constraint id '{cid}'", hint=hint)


def format_catalog(target: Target | None = None,
                   entries: Iterable[Constraint] | None = None) -> str:
    """The catalog (or ``entries``) as plain text (``anec constraints``)."""
    lines: list[str] = []
    for c in entries if entries is not None else CONSTRAINTS.values():
        lines.append(f"{c.id}  {c.title}  [{c.evidence}, {c.handling}]")
        lines.append(f"    symptom:  {c.symptom}")
        lines.append(f"    source:   {c.source}")
        lines.append(f"    handling: {c.detail} ({c.handled_by})")
        if target is not None:
            lines.append(f"    {target.name}:       {c.on_target(target)}")
        elif c.switch or c.target_fields:
            per = "; ".join(f"{t.name}: {c.on_target(t)}" for t in TARGETS.values())
            lines.append(f"    targets:  {per}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def format_markdown(target: Target | None = None,
                    entries: Iterable[Constraint] | None = None) -> str:
    """The catalog as Markdown (``anec constraints --markdown``, docs/constraints.md)."""
    entries = list(entries) if entries is not None else list(CONSTRAINTS.values())
    out = [
        "# ANE constraint catalog",
        "",
        "Generated by `anec constraints --markdown`; do not edit by hand.",
        "",
        "Each entry: what the ANE does, where the claim comes from, how strong the evidence "
        "is (*verified*: a published on-device measurement or the documented MIL op set; "
        "*reported*: an issue, an unmerged PR or a forum post), and how anec handles it. "
        "Reported claims that cost something to guard against are switched per target "
        "(`anec/targets.py`).",
        "",
        "| id | constraint | evidence | handling |",
        "|---|---|---|---|",
    ]
    for c in entries:
        out.append(f"| [`{c.id}`](#{c.id.lower()}) | {c.title} | {c.evidence} | {c.handling} |")
    out.append("")
    targets = [target] if target is not None else list(TARGETS.values())
    for c in entries:
        out += [
            f"## {c.id}",
            "",
            f"**{c.title}.**",
            "",
            f"- Symptom: {c.symptom}.",
            f"- Source: {c.source} ({c.evidence}).",
            f"- Handling ({c.handling}, `{c.handled_by}`): {c.detail}",
            f"- Checked at: {c.stage} time.",
        ]
        if c.switch or c.target_fields:
            per = "; ".join(f"{t.name}: {c.on_target(t)}" for t in targets)
            out.append(f"- Per target: {per}.")
        if c.tested_by:
            out.append("- Tested by: " + ", ".join(f"`{t}`" for t in c.tested_by) + ".")
        out.append("")
    out += format_targets_markdown(targets)
    return "\n".join(out).rstrip() + "\n"


def format_targets_markdown(targets: Iterable[Target]) -> list[str]:
    """The chip profiles as a Markdown table plus the source of every value."""
    targets = list(targets)
    fields = [f.name for f in dataclasses.fields(Target) if f.name not in ("name", "sources")]
    out = [
        "## Target profiles",
        "",
        "Limits per chip (`anec/targets.py`, `--target`); the default target is "
        f"`{DEFAULT_TARGET}`.",
        "",
        "| field | " + " | ".join(t.name for t in targets) + " |",
        "|---|" + "---|" * len(targets),
    ]
    for f in fields:
        out.append(f"| `{f}` | " + " | ".join(_fmt_field(getattr(t, f)) for t in targets) + " |")
    out += ["", "Where each value comes from (targets sharing a value and a source are "
            "grouped):", ""]
    for f in fields:
        groups: dict[tuple[str, str], list[str]] = {}
        for t in targets:
            key = (_fmt_field(getattr(t, f)), t.sources.get(f, "n/a"))
            groups.setdefault(key, []).append(t.name)
        out.append(f"- `{f}`:")
        for (value, source), names in groups.items():
            out.append(f"  - {', '.join(names)} = {value}: {source}.")
    out.append("")
    return out
