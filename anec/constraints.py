"""The constraint catalog: what the ANE does, what each claim rests on, and what anec does about it.

Each :class:`Constraint` has a stable id (``ANE-CONCAT`` ...) used in compiler
errors, in the C simulator's messages, in the manifest's ``rewrites`` list, in
comments and docs (which point here instead of restating evidence) and in
tests. An entry says what happens on the device, the evidence for it as
:class:`Evidence` records, and how anec handles it.

Every record names its source (repository and file or test, paper section,
issue), what it demonstrates in one sentence, the scope it was seen on
(:class:`Scope`: the API path, in-memory ``_ANEInMemoryModel`` or disk
``_ANEClient``; the chip; the OS) and its kind:

* ``demonstrated``: a test or a measurement shows it;
* ``documented``: the MIL op set or file format as published (coremltools);
* ``reported``: a claim without a test behind it (a README, an issue, an
  unmerged pull request, a conclusion drawn from runs that were not logged);
* ``hypothesis``: no source demonstrates it; only ``python -m anec.selftest``
  on a Mac settles it.

A record may contradict the entry (``supports=False``). The entry's status
derives from its records (:func:`derive_status`): ``verified`` (a supporting
record demonstrates or documents it, none contradicts), ``reported``,
``contested`` (records disagree) or ``hypothesis``. Claims that would cost
something to guard against are switchable per target (``switch`` names the
:class:`~anec.targets.Target` field).

How anec handles an entry: a legalize rewrite rule, a compile-time error, the
MIL emitter, the runtime, or the SRAM analysis. ``tested_by`` names the tests
that trigger the constraint (``path::test``); ``anec constraints`` prints the
catalog and ``docs/constraints.md`` is generated from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from anec.diagnostics import AnecError, did_you_mean
from anec.ir.ops import BINARY, OPS, SPATIAL_LIMITS, Mil, NotOnAne
from anec.targets import DEFAULT_TARGET, TARGETS, Target

# record kinds
DEMONSTRATED = "demonstrated"
DOCUMENTED = "documented"
REPORTED = "reported"
HYPOTHESIS = "hypothesis"
KINDS = (DEMONSTRATED, DOCUMENTED, REPORTED, HYPOTHESIS)

# entry statuses (derived from the records)
VERIFIED = "verified"
CONTESTED = "contested"
STATUSES = (VERIFIED, REPORTED, CONTESTED, HYPOTHESIS)

#: API paths a record can be seen on: anec drives the in-memory one.
PATHS = ("in-memory", "disk", "e5rt", "Core ML", "any")

#: How a constraint is handled: by a rewrite in legalize, an error, the MIL
#: emitter, the runtime (C core / drivers), the SRAM analysis, or not at all
#: because anec cannot produce the offending construct.
HANDLINGS = ("rewrite", "rewrite or error", "error", "emitter", "runtime", "analysis", "n/a")


@dataclass(frozen=True)
class Scope:
    """Where a record was seen."""

    path: str
    """One of :data:`PATHS`: ``in-memory`` (``_ANEInMemoryModel``, anec's path), ``disk``
    (``_ANEClient``), ``e5rt`` (Espresso), ``Core ML``, ``any`` (a format or op set)."""
    chip: str
    """The chip(s), or ``not stated``."""
    os: str
    """The OS version(s), or ``not stated``."""

    def __str__(self) -> str:
        return f"{self.path}; {self.chip}; {self.os}"


@dataclass(frozen=True)
class Evidence:
    """One source's evidence about an entry."""

    source: str
    """Where: repository and file or test, paper section, issue."""
    shows: str
    """What it demonstrates (or claims), in one sentence."""
    kind: str
    """One of :data:`KINDS`."""
    scope: Scope
    """The path, chip and OS it was seen on."""
    supports: bool = True
    """False when the record contradicts the entry's claim."""


def derive_status(records: Iterable[Evidence]) -> str:
    """The status of an entry from its records: ``contested`` when a supporting and a
    contradicting record (not hypotheses) meet; else ``verified`` when a supporting
    record is demonstrated or documented; else ``reported``; else ``hypothesis``."""
    records = list(records)
    if not records:
        raise ValueError("an entry needs at least one evidence record")
    pro = [r for r in records if r.supports and r.kind != HYPOTHESIS]
    con = [r for r in records if not r.supports and r.kind != HYPOTHESIS]
    if con:
        if not pro:
            raise ValueError("every record contradicts the entry: it is not a device behaviour")
        return CONTESTED
    if any(r.kind in (DEMONSTRATED, DOCUMENTED) for r in pro):
        return VERIFIED
    return REPORTED if pro else HYPOTHESIS


@dataclass(frozen=True)
class Constraint:
    """One catalog entry."""

    id: str
    """Stable id, e.g. ``ANE-CONCAT``."""
    title: str
    """The constraint in a few words."""
    symptom: str
    """What happens on the device when it is violated."""
    evidence: tuple[Evidence, ...]
    """The records the claim rests on (and those that contradict it)."""
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
    """Target field that turns it on or off per chip (claims that are not verified)."""

    @property
    def status(self) -> str:
        """``verified``, ``reported``, ``contested`` or ``hypothesis`` (:func:`derive_status`)."""
        return derive_status(self.evidence)

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
    "concat": lambda t: t.concat != "native",
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
_LEGC = "tests/passes/test_legalize_concat.py"
_DCE = "tests/passes/test_dce.py"
_SRAM = "tests/passes/test_annotate_sram.py"
_EMIT = "tests/mil/test_mil_emitter.py"
_ART = "tests/mil/test_mil_artifact.py"
_PROTO = "tests/ane_protocol/test_ane_protocol.c"
_ACORE = "tests/ane_protocol/test_ane_core.c"
_SELF = "tests/ane_protocol/test_anec_selftest.py"
_CORE = "tests/runtime/test_rt_core.py"
_RELOAD = "tests/runtime/test_rt_reload.py"
_SIM = "tests/runtime/test_rt_mil_checks.py"

# ---- scopes the records share ----------------------------------------------------------
_ORION = Scope("in-memory", "M4 Max (the machine Orion's results name)", "not stated")
_ORION_M4 = Scope("in-memory", "M4", "not stated")
_MADERIX = Scope("in-memory", "not stated", "not stated")
_MADERIX_M5 = Scope("in-memory", "M5", "macOS 26.3")
_MADERIX_CHIPS = Scope("in-memory", "M1 Pro, M1 Max, M3 Ultra, M4 Pro, M4 Max, M5",
                       "macOS 15.0 (M1 Pro), 15.6.1 (M1 Max), 26.3 (M5); others not stated")
_SPEC = Scope("any", "any", "any")
_UNTRIED = Scope("in-memory", "none tried", "none tried")

# ---- records used by several entries -------------------------------------------------------
_ORION_CATALOG = "Orion paper constraint {n} and docs/ane_constraints.md"
_MADERIX_RELOAD = Evidence(
    "maderix/ANE training/test_weight_reload.m (result in training/m5result.md)",
    "compile a 64x64 conv, overwrite weights/weight.bin in its directory with 3x identity, unload and "
    "load the same model object: the output is unchanged (max diff 0.0); this fits 'load reads the "
    "compiled data' and 'the framework keeps the weights in memory' equally",
    DEMONSTRATED, _MADERIX_M5)
_ORION_E5 = Evidence(
    "Orion experiments/spike_e5_binary.m and spike_e5_patch.m (the E5 spike)",
    "for a program with one BLOBFILE tensor, the `data` file the compiler leaves in the hexId "
    "directory is byte-identical to that BLOBFILE",
    DEMONSTRATED, _ORION)
_ORION_DELTA = Evidence(
    "Orion tests/test_delta_compile.m (orion_program_patch_weights)",
    "a NEW descriptor and model object from the same MIL, never compiled, whose hexId directory holds "
    "the donor's net.plist and the new weights' BLOBFILE as `data`, loads and computes like a fresh "
    "compile (768x768 linear, max diff 0.0; 10 patches in a row, no compiles)",
    DEMONSTRATED, _ORION)
_ORION_RELOAD = Evidence(
    "Orion paper (delta compilation) and core/ane_runtime.m orion_program_reload_weights (v2 training)",
    "unload, rewrite the weight files in the hexId directory and load the same object is said to pick "
    "up the new weights (4,200 -> 494 ms per step); no test in the repository checks that the outputs "
    "change, and the repository's own constraint 7 says the opposite",
    REPORTED, _ORION)
_SAME_OBJECT = Evidence(
    "no public test",
    "unload the SAME model object, write the new BLOBFILE as its `data`, load again: whether the "
    "outputs then use the new weights; python -m anec.selftest (reload) settles it per machine",
    HYPOTHESIS, _UNTRIED)
_PRACTICE = "every program maderix/ANE and Orion run on the device"

_ENTRIES = (
    Constraint(
        "ANE-CONCAT", "concat may be rejected",
        "compile fails: ANECCompile() FAILED: err=() (Orion); maderix's kernels compile and run it",
        (Evidence(_ORION_CATALOG.format(n=1) + " (tasks T064-T071)",
                  "a program with concat fails to compile with ANECCompile() FAILED: err=(); Orion "
                  "packs inputs on the CPU and returns several outputs instead",
                  DEMONSTRATED, _ORION),
         Evidence("maderix/ANE training/stories_mil.h (fwdAttn, fwdFFN output taps), benchmarks/"
                  "ANE_BENCHMARK_REPORT.md",
                  "the static training kernels return their taps through a channel concat(axis=1, "
                  "interleave=false, values=(...)); the report's runs of that pipeline compiled and "
                  "trained on these chips (correctness only through the training loss, never against "
                  "a reference)",
                  DEMONSTRATED, _MADERIX_CHIPS, supports=False),
         Evidence("maderix/ANE training/training_dynamic/mil_dynamic.h (sdpaFwd), training/README.md",
                  "the dynamic pipeline's sdpaFwd builds RoPE's rotate_half with concat(axis=3) and tiles "
                  "GQA K/V by concat; that pipeline's training runs are recorded (about 111 ms/step, loss "
                  "falling), on a chip the records do not name",
                  DEMONSTRATED, _MADERIX, supports=False),
         Evidence("maderix/ANE training/test_fused_qkv.m",
                  "3 convs and a concat in one program, adopted over 3 dispatches (no committed log)",
                  REPORTED, _MADERIX, supports=False),
         Evidence("sbryngelson/ANEForge README and docs/numeric-cliffs.md",
                  "the e5rt path emits concat; on chips before A16 a concat of several last-axis-offset "
                  "slices returns wrong elements",
                  REPORTED, Scope("e5rt", "pre-A16 (wrong elements); others accepted", "not stated"),
                  supports=False)),
        "rewrite or error", _removed_by("ANE-CONCAT"),
        "Contested, so a per-machine question: python -m anec.selftest (concat) compiles and runs a "
        "channel concat and caches accepted / rejected / accepted-but-wrong. With the concat reading "
        "`native` (anec compile --concat native, or --concat verdict on a Mac whose cached verdict is "
        "accepted, for that Mac's own target) concat is written as a MIL concat. Otherwise (no "
        "verdict, cross-compiling, Linux) a channel concat whose every use is the input of a conv1x1 "
        "becomes a sum of partial convs over weight slices (conv(concat(a, b), W) = conv(a, "
        "W[:, :ca]) + conv(b, W[:, ca:])), and any other concat is an error suggesting a "
        "multi-output program. The manifest records the reading used.",
        "compile",
        (f"{_LEG}::test_concat_feeding_convs_becomes_partial_convs",
         f"{_LEG}::test_other_concat_is_rejected",
         f"{_LEGC}::test_native_concat_is_kept_and_runs_on_a_sim_that_accepts_it",
         f"{_LEGC}::test_without_a_verdict_concat_is_rewritten_or_rejected_as_before",
         f"{_LEGC}::test_a_native_concat_of_three_unequal_pieces_is_the_inputs_joined_bit_for_bit",
         f"{_SELF}::test_concat_probe_gives_each_sim_reading_its_verdict",
         f"{_SELF}::test_concat_probe_finds_a_concat_that_is_accepted_but_wrong",
         "tests/c/test_mil.c::test_concat_only_where_the_device_accepts_it",
         f"{_SIM}::test_rejected_ops_name_constraint_and_line"),
        switch="concat",
    ),
    Constraint(
        "ANE-GELU", "gelu is not a valid MIL op for the ANE",
        "compile fails",
        (Evidence(_ORION_CATALOG.format(n=10), "a program with gelu fails to compile; Orion builds the "
                  "tanh approximation from elementwise ops", DEMONSTRATED, _ORION),),
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
        (Evidence("Orion community issue mechramc/Orion#3 (added to Orion's catalog)",
                  "a community member found rsqrt rejected and pow(x, -0.5) accepted", REPORTED, _ORION_M4),),
        "rewrite", _removed_by("ANE-RSQRT"),
        "rsqrt(x) becomes pow(x, -0.5).",
        "compile", (f"{_LEG}::test_rsqrt_becomes_pow",
                    f"{_SIM}::test_rejected_ops_name_constraint_and_line"),
    ),
    Constraint(
        "ANE-NEG", "there is no neg op in MIL",
        "compile fails (unknown op)",
        (Evidence("coremltools MIL op registry (iOS15-iOS18 opsets)", "the registry has no neg op",
                  DOCUMENTED, _SPEC),),
        "rewrite", _removed_by("ANE-NEG"),
        "neg(x) becomes mul(x, -1).",
        "compile", (f"{_LEG}::test_neg_becomes_mul",
                    f"{_SIM}::test_rejected_ops_name_constraint_and_line"),
    ),
    Constraint(
        "ANE-CONV-BIAS", "conv does not take bias=",
        "compile fails",
        (Evidence(_ORION_CATALOG.format(n=13) + "; compiler/pass_conv_bias.c",
                  "conv with bias= is rejected; Orion's conv+bias fusion pass is disabled for that "
                  "reason and every linear adds its bias separately", DEMONSTRATED, _ORION),),
        "rewrite", _removed_by("ANE-CONV-BIAS"),
        "conv1x1(x, w, bias=b) becomes add(conv1x1(x, w), b).",
        "compile", (f"{_LEG}::test_conv_bias_becomes_add",
                    f"{_SIM}::test_conv_bias_rejected"),
    ),
    Constraint(
        "ANE-CONV-CONST-WEIGHT", "a conv reads its weight from a constant",
        "unknown: no reference feeds the ANE a conv whose weight is computed or an input",
        (Evidence("maderix/ANE training_dynamic (weights packed into the input go through matmul); "
                  "Orion LoRA adapters (inputs through matmul)",
                  "weights that arrive at run time reach the device through matmul; no public program "
                  "gives conv a non-constant weight, so whether conv takes one is untested",
                  HYPOTHESIS, _UNTRIED),),
        "rewrite", "legalize: conv_dynamic_weight_to_matmul",
        "conv1x1(x, w) with w a func input (weights compiled as inputs) or a computed value becomes "
        "transpose(matmul(transpose(x), reshape(w), transpose_y=true)), the form the references run.",
        "compile", ("tests/passes/test_weights_as_inputs.py::test_conv_with_an_input_weight_becomes_matmul",
                    "tests/runtime/test_rt_weight_inputs.py::test_weights_as_inputs_reload_without_compile_or_load"),
    ),
    Constraint(
        "ANE-SPATIAL-LIMITS", "limits of the native conv, pooling and upsampling ops",
        "unknown: no public source runs a spatial conv, pool or upsample at its limits on the ANE",
        (Evidence("no public test",
                  f"the native spatial ops (conv with a kernel, conv_transpose, max_pool, avg_pool, "
                  f"upsample_nearest_neighbor, upsample_bilinear) compile for kernels up to "
                  f"{SPATIAL_LIMITS.kernel}, strides up to {SPATIAL_LIMITS.stride}, dilations up to "
                  f"{SPATIAL_LIMITS.dilation}, upsample scales up to {SPATIAL_LIMITS.upsample_scale}, and "
                  "paddings smaller than the kernel extent; python -m anec.selftest (check spatial: every native "
                  "op at these limits, and a max_pool one step beyond) settles it per machine; the only public "
                  "word on spatial limits is a community FAQ's guess (hollance/neural-engine) that dilated "
                  "convolutions may not run on the ANE under Core ML",
                  HYPOTHESIS, _UNTRIED),),
        "rewrite or error", "select-native (keeps the 27-op form; a patch embedding: patches as channels, "
        "one conv1x1); legalize: check_target_form",
        "The ops and their parameters are coremltools' MIL definitions (iOS15 conv.py, pool.py, "
        "image_resizing.py, reused by iOS17/iOS18), which state no size limits. "
        "select-native writes a native op only within the limits (anec.ir.ops.SPATIAL_LIMITS) and records "
        "the layers it leaves in their 27-op form (a patch embedding, kernel == stride without padding, "
        "beyond them becomes its patches gathered into Cin*KH*KW channels and one conv1x1 instead); "
        "legalize rejects a target form beyond them at its "
        "line, and the sim refuses such MIL.",
        "compile",
        ("tests/passes/test_select_native.py::test_beyond_the_kernel_limit_the_form_stays_and_says_why",
         "tests/passes/test_select_native.py::"
         "test_a_patch_embedding_beyond_the_limits_becomes_one_conv1x1_over_the_patches",
         "tests/passes/test_select_native.py::test_legalize_rejects_target_forms_beyond_the_limits",
         "tests/mil/test_mil_native_spatial.py::test_sim_refuses_native_ops_beyond_the_limits",
         f"{_SELF}::test_selftest_numbers"),
    ),
    Constraint(
        "ANE-MATMUL-FLAGS", "matmul transpose flags must be named consts",
        "compile fails on inline bools",
        (Evidence(_ORION_CATALOG.format(n=12) + " (README)",
                  "matmul with inline true/false for transpose_x/transpose_y is rejected; named bool "
                  "consts work", DEMONSTRATED, _ORION),),
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
        (Evidence(_ORION_CATALOG.format(n=14) + " (README)",
                  "a return tuple naming a value that DCE removed gives InvalidMILProgram",
                  DEMONSTRATED, _ORION),),
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
        (Evidence(_ORION_CATALOG.format(n=16), "a conv with 32K channels is rejected", DEMONSTRATED, _ORION),
         Evidence("maderix/ANE training/ane_classifier.h and test_classifier.m",
                  "a 1x1 conv with 32000 OUTPUT channels compiles (test_classifier: all compile); a code "
                  "comment says 32000 INPUT channels are rejected, so classifier backward uses matmul",
                  REPORTED, _MADERIX)),
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
        (Evidence("Orion community issue mechramc/Orion#3 (added to Orion's catalog)",
                  "17 BLOBFILE-backed tensors fail with InvalidMILProgram, 16 compile; an inline scalar "
                  "operand of pow/add/mul lowers the cap to 15", REPORTED, _ORION_M4),),
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
        (Evidence("Orion paper constraints 2 and 18 (T072, T163); docs/ane_constraints.md 2 and 12",
                  "outputs (and inputs) of different allocation sizes fail at evaluate with status 0x1d; "
                  "Orion allocates every surface at the largest size", DEMONSTRATED, _ORION),),
        "runtime", "manifest input_alloc_bytes/output_alloc_bytes; C runtime core",
        "The manifest gives one allocation size per direction (the largest tensor, at least "
        "the minimum surface, aligned); the runtime allocates every surface at that size.",
        "runtime", (f"{_ART}::test_alloc_bytes_uniform_aligned", f"{_CORE}::test_surface_rules"),
    ),
    Constraint(
        "ANE-IO-ORDER", "I/O binds in alphabetical order of MIL names",
        "silently wrong (swapped) data",
        (Evidence("Orion paper constraints 3 and 19 (T101, T163); docs/ane_constraints.md 3 and 13",
                  "surfaces are bound in alphabetical order of the MIL names, not declaration order "
                  "(decode passes {K, Q, V} for (q32, k32, v32))", DEMONSTRATED, _ORION),),
        "runtime", "manifest binding indexes; C runtime core",
        "The manifest records each input's and output's binding index (alphabetical order of "
        "MIL names); the runtime binds surfaces by that index, so users pass names, not order. "
        "python -m anec.selftest (binding) checks it on a Mac.",
        "runtime", (f"{_ART}::test_manifest_io_and_bindings",
                    f"{_CORE}::test_binding_tables_are_alphabetical",
                    f"{_CORE}::test_declaration_order_binding_gives_wrong_results_like_the_device"),
    ),
    Constraint(
        "ANE-MIN-SURFACE", "surfaces below ~49 KB fail at eval",
        "eval fails with status 0x1d (seq=1 with 768 channels, 3 KB)",
        (Evidence("Orion paper constraint 4 (T100)",
                  "a [768, 1] fp16 surface (3 KB) fails at evaluate with status 0x1d; [768, 16] "
                  "(49,152 B) works, so decode pads to 16 positions", DEMONSTRATED, _ORION),
         Evidence("maderix/ANE PR #16 (unmerged)", "claims a 49,152-byte minimum even for tiny tensors",
                  REPORTED, _MADERIX)),
        "runtime", "manifest *_alloc_bytes; C runtime core",
        "Allocations are at least min_surface_bytes; data is written packed at byte 0.",
        "runtime", (f"{_ART}::test_alloc_bytes_uniform_aligned", f"{_CORE}::test_surface_rules",
                    f"{_CORE}::test_surface_alignment_and_minimum_from_limits"),
        target_fields=("min_surface_bytes",),
    ),
    Constraint(
        "ANE-PACKED-READ", "the ANE reads packed data from byte 0 of an oversized surface",
        "silently wrong data when rows are stride-padded",
        (Evidence("Orion paper constraint 20 (T163); docs/ane_constraints.md 14",
                  "stride-padded LoRA inputs gave a ~260x smaller LoRA term; packed data at byte 0 "
                  "of the oversized surface is right", DEMONSTRATED, _ORION),),
        "runtime", "C runtime core (packed writes and reads)",
        "The runtime writes and reads tensors packed in their declared shape at offset 0.",
        "runtime", (f"{_CORE}::test_surface_rules",),
    ),
    Constraint(
        "ANE-BAKED-WEIGHTS", "rewriting weights/ and loading the same object changes nothing",
        "stale outputs: the new weight files are not used",
        (_MADERIX_RELOAD,
         Evidence("maderix/ANE training/test_ane_advanced.m",
                  "an IOSurface with 3x identity weights passed as weightsBuffer does not override "
                  "the compiled weights", REPORTED, _MADERIX),
         Evidence("Orion docs/ane_constraints.md 7 (source: maderix)",
                  "rewriting BLOBFILEs and reloading does not change outputs", REPORTED, _ORION)),
        "runtime", "C runtime core (reload strategies) and python -m anec.selftest",
        "A reload never rewrites weight files and loads again. It uses a strategy verified on the "
        "machine: data patch (ANE-DATA-IS-BLOBFILE, ANE-SAME-OBJECT-PATCH), a new object "
        "(ANE-NEW-OBJECT-LOAD), weights compiled as program inputs (a surface write), or recompile "
        "within the process budget. Which of 'load reads the compiled data' and 'weights kept in "
        "memory' (per object, or cached per hexId) holds is not known: the sim and the ane fake "
        "model each (load=data, load=memory, load=memory-shared), every strategy is tested under "
        "each, and the selftest probes the machine; until it has, reloads recompile.",
        "runtime", (f"{_PROTO}::test_weights_baked_at_compile",
                    f"{_RELOAD}::test_weights_are_baked_at_compile",
                    f"{_RELOAD}::test_an_unverified_data_patch_can_be_stale_which_is_why_it_must_be_verified",
                    f"{_RELOAD}::test_every_forced_strategy_under_every_sim_reading_is_fresh_or_exactly_stale",
                    f"{_ACORE}::test_probe_data_patch", f"{_ACORE}::test_probe_new_object",
                    f"{_ACORE}::test_reload_falls_back_to_recompile_unverified"),
    ),
    Constraint(
        "ANE-DATA-IS-BLOBFILE", "one BLOBFILE tensor compiles to data equal to the BLOBFILE",
        "none (a fact the data patch relies on)",
        (_ORION_E5,),
        "runtime", "C runtime core (data-patch eligibility)",
        "A program is eligible for a data patch only when its compiled data was observed, right "
        "after the compile, to equal its one BLOBFILE; anything else (several tensors, an opaque "
        "container) reloads another way. The sim models the measured case (data=tensor) and an "
        "optimistic one (data=file, a packed file).",
        "runtime", (f"{_ACORE}::test_reload_with_the_verdict",
                    f"{_ACORE}::test_reload_two_tensors_recompiles",
                    f"{_RELOAD}::test_a_cache_hit_of_a_multi_tensor_program_with_other_weights_compiles"),
    ),
    Constraint(
        "ANE-NEW-OBJECT-LOAD", "a new, never-compiled model object loads a donor's compiled form",
        "none (the reload Orion tested)",
        (_ORION_DELTA,),
        "runtime", "the new-object reload strategy (driver clone + patch_data before the first load); "
        "C runtime core and python -m anec.selftest (reload)",
        "Orion's tested path is its own reload strategy, new-object: a new descriptor and model object "
        "from the same MIL and the new weights, its hexId directory given the donor's net.plist and "
        "the new data, loaded without a compile, then swapped in. A cache hit with other weights is "
        "the same path. Orion tested it on one machine, so the runtime uses it only where the "
        "selftest verified it here; the sim's load=memory-shared and the fake's hexId cache model a "
        "device where it is stale.",
        "runtime", (f"{_PROTO}::test_clone_copies_the_compiled_form",
                    f"{_PROTO}::test_patch_before_first_load",
                    f"{_ACORE}::test_probe_new_object",
                    f"{_ACORE}::test_cache_hit_other_weights_new_object",
                    f"{_SELF}::test_reload_probe_finds_what_each_device_allows",
                    f"{_RELOAD}::test_reload_equals_a_fresh_compile_with_the_strategy_the_device_allows"),
    ),
    Constraint(
        "ANE-SAME-OBJECT-PATCH", "unload, rewrite data, load the same object: new weights",
        "unknown: stale outputs if the framework keeps the weights in memory",
        (_SAME_OBJECT,),
        "runtime", "C runtime core (data patch) and python -m anec.selftest (reload)",
        "A hypothesis: the runtime uses the same-object data patch only where the selftest verified "
        "it on this machine, OS and anec version (the cached verdict), and otherwise recompiles. "
        "The sim and the ane fake model a device where it works (load=data) and ones where it is "
        "stale (load=memory, load=memory-shared).",
        "runtime", (f"{_SELF}::test_reload_probe_finds_what_each_device_allows",
                    f"{_SELF}::test_the_reload_check_on_the_fake_finds_what_each_reading_allows",
                    f"{_ACORE}::test_probe_data_patch",
                    f"{_ACORE}::test_reload_with_the_verdict",
                    f"{_PROTO}::test_patch_data_then_load_equals_fresh_compile"),
    ),
    Constraint(
        "ANE-LOAD-REREADS-WEIGHTS", "load re-reads the weight files",
        "if it does not, a reload by rewriting weights/ is stale",
        (_ORION_RELOAD, dataclasses.replace(_MADERIX_RELOAD, supports=False)),
        "runtime", "C runtime core (never relied on)",
        "Contested, so never relied on: no reload strategy rewrites weights/ alone and loads. The "
        "sim can model the claim (load=weights) to show the runtime still reloads right there.",
        "runtime", (f"{_RELOAD}::test_a_device_that_rereads_weights_sees_rewritten_files",
                    f"{_RELOAD}::test_weights_are_baked_at_compile"),
    ),
    Constraint(
        "ANE-SURFACE-LOCK", "the CPU locks an IOSurface only while it reads or writes it",
        "unknown: whether evaluate accepts a surface the CPU holds locked",
        (Evidence("maderix/ANE training/ane_runtime.h, stories_io.h, bridge/ane_bridge.m",
                  "IOSurfaceLock, memcpy (or fp32->fp16 conversion), IOSurfaceUnlock around each write "
                  "and read (read-only lock for reads); evaluate runs on unlocked surfaces",
                  DEMONSTRATED, _MADERIX),
         Evidence("Orion core/iosurface_tensor.m",
                  "orion_tensor_write/read memcpy under IOSurfaceLock and unlock; evaluate runs on "
                  "unlocked surfaces", DEMONSTRATED, _ORION),
         Evidence("no public test",
                  "what evaluate does with a surface the CPU holds locked (refused, or races); the "
                  "references never try it", HYPOTHESIS, _UNTRIED)),
        "runtime", "driver surface_lock/surface_unlock; C runtime core",
        "The references' practice: the C core locks a surface only around its own copies (a "
        "read-only lock for reads) and evaluates unlocked surfaces. The ane fake shows the CPU only "
        "a poison pattern of an unlocked surface and flags a write under a read-only lock; the sim "
        "gives a surface's bytes only under a lock and refuses to evaluate a locked one.",
        "runtime", (f"{_PROTO}::test_surfaces", f"{_ACORE}::test_call_locks_only_around_copies"),
    ),
    Constraint(
        "ANE-COMPILE-BUDGET", "about 119 compiles per process",
        "compiles start failing after ~119 per process",
        (Evidence("maderix/ANE README and training code (MAX_COMPILES 100, exec() restart)",
                  "about 119 compiles per process, then compiles fail ('compiler leaks resources'); the "
                  "code restarts the process before 100", REPORTED, _MADERIX),
         Evidence("maderix/ANE PR #23 (unmerged)", "measured 119-132 compiles per process", REPORTED,
                  Scope("in-memory", "M4", "not stated")),
         Evidence("Orion paper constraint 5 (source: maderix)", "silent failure or instability past "
                  "~119 compiles; Orion v1 restarts with exec()", REPORTED, _ORION),
         Evidence("maderix/ANE training_dynamic (make_request)",
                  "one compiled model evaluated with one request per layer, each binding its own "
                  "weight input IOSurface: 10 compiled kernels serve 12 or 28 layers", DEMONSTRATED, _MADERIX)),
        "runtime", "C runtime core (process-wide compile budget, program cache)",
        "The runtime counts compiles per process and driver (every Runtime shares the count, as on "
        "the device) against the target's process_compile_budget, caches programs by MIL hash + weight keys, refuses compiles past the budget with "
        "a clear error, and reloads weights without compiling wherever a verified strategy allows. "
        "The compiler counts the compiles of its artifacts before any is made, and over the budget "
        "shares one program across repeated layers, their weights as its inputs (as maderix's "
        "dynamic pipeline does), else fails before compiling.",
        "runtime", (f"{_CORE}::test_compile_budget_exhaustion_and_cache",
                    "tests/runtime/test_rt_pipeline_shared.py::test_auto_shares_over_the_budget_and_fails_located_when_still_over",
                    "tests/runtime/test_rt_pipeline_shared.py::test_the_planner_count_is_what_the_runtime_compiles",
                    f"{_CORE}::test_the_compile_budget_belongs_to_the_process",
                    f"{_CORE}::test_the_process_budget_is_the_targets_field",
                    f"{_RELOAD}::test_recompile_reloads_stop_at_the_process_budget_with_a_clear_error"),
    ),
    Constraint(
        "ANE-MIL-NSDATA", "MIL text must be passed as bytes (NSData)",
        "crash or silent failure when passed as a string",
        (Evidence("Orion paper constraint 9", "MIL text passed as NSString crashes or fails silently",
                  DEMONSTRATED, _ORION),
         Evidence("maderix/ANE api_exploration.m", "tries NSString and NSData; every working path uses "
                  "NSData", REPORTED, _MADERIX)),
        "runtime", "driver_ane",
        "The ane driver passes the MIL text as UTF-8 bytes.",
        "runtime", (f"{_PROTO}::test_mil_is_nsdata_and_weights_dict",),
    ),
    Constraint(
        "ANE-WEIGHTS-DICT", "the weights dictionary must be empty, never nil",
        "crash",
        (Evidence("Orion paper constraint 11", "a nil weights dictionary crashes; @{} works",
                  DEMONSTRATED, _ORION),),
        "runtime", "driver_ane",
        "The ane driver always passes a dictionary (empty when weights come from files).",
        "runtime", (f"{_PROTO}::test_empty_weights_dict_not_nil",),
    ),
    Constraint(
        "ANE-FP16-RANGE", "the ANE computes in fp16 (+-65504)",
        "overflow gives inf, then NaN downstream",
        (Evidence("Orion NaN fix (RESULTS.md)", "clamping every CPU->ANE write to +-65504 took training "
                  "from NaN at every step after the first to none", DEMONSTRATED, _ORION),
         Evidence("maderix/ANE commit 926f977 (loss scaling)", "fp16 underflow in the backward matmuls "
                  "stalled training until a loss scale of 256", DEMONSTRATED, _MADERIX),
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
        (f"{_LEG}::test_weight_outside_fp16_range_is_rejected",
         f"{_LEG}::test_nan_weight_is_rejected",
         "tests/runtime/test_rt_fp16_range.py::test_without_the_pass_the_same_inputs_give_wrong_numbers",
         "tests/passes/test_range_safe.py::test_range_analysis_finds_the_first_overflow_and_the_lost_bits"),
    ),
    Constraint(
        "ANE-CONV-FASTER", "a 1x1 conv is ~3x faster than matmul",
        "no failure; matmul with a constant operand runs ~3x slower",
        (Evidence("Orion paper constraint 17", "a 1x1 conv runs about 3x faster than the equivalent "
                  "matmul", DEMONSTRATED, _ORION),),
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
        (Evidence("maderix/ANE PR #25 (unmerged) docs/BENCHMARK_RESULTS.md, sram_probe",
                  "one conv's efficiency drops first at 4096 channels (32 MB of weights) and collapses "
                  "at 128 MB", REPORTED, Scope("in-memory", "M4 Max", "macOS 26.2")),
         Evidence("Orion compiler/pass_sram.c and RESULTS.md hardware table (from maderix)",
                  "32 MB for the M4 ANE, ~30% drop beyond", REPORTED, _ORION)),
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
        (f"{_LEG}::test_fp32_io_rejected_on_m1", f"{_LEG}::test_host_casts_rewrite_io",
         f"{_SIM}::test_fp32_io_rejected_when_not_allowed"),
        switch="fp32_io",
    ),
    Constraint(
        "ANE-IO-TENSORS", "program inputs and outputs are fp16 or fp32 tensors",
        "unknown: no published program binds an integer or bool input or output",
        (Evidence("Orion core/iosurface_tensor.m; maderix/ANE probes (" + _PRACTICE + ")",
                  "they bind only fp16/fp32 tensor surfaces; nobody tried integer I/O, so whether the "
                  "device takes it is untested (anec's runtime and sim accept nothing else)",
                  HYPOTHESIS, _UNTRIED),),
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
        (Evidence(_PRACTICE, "every op computes on fp16 (fp32 only around casts at the I/O); integer "
                  "arithmetic is untested, and the sim models the pessimistic case (rejected)",
                  HYPOTHESIS, _UNTRIED),),
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
        (Evidence(_PRACTICE + " (maderix IOSurface layout, Orion's activation layout)",
                  "every input and output is rank-4 [1, C, 1, S]; other ranks are untested",
                  HYPOTHESIS, _UNTRIED),),
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
        (Evidence("coremltools MIL op set", "shape, perm and begin/end/stride parameters are int32 "
                  "tensors", DOCUMENTED, _SPEC),),
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
        (Evidence("maderix/ANE (slice_by_size); Orion compiler/codegen.m (no split: it writes an "
                  "UNSUPPORTED OP comment; slices with slice_by_index)",
                  "both slice with single-result ops; a multi-result split is untested on the device",
                  HYPOTHESIS, _UNTRIED),),
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
        (Evidence("maderix/ANE README (Limitations); training/test_ane_sdpa5.m",
                  "the README concludes the mask is ignored; the probe (4 mask variants at SEQ=8) has "
                  "no committed log", REPORTED, _MADERIX),
         Evidence("Orion paper constraint 6 (source: maderix, ANEgpt)", "SDPA's causal mask is ignored",
                  REPORTED, _ORION)),
        "n/a", "the IR has no attention op",
        "anec has no SDPA op: attention is written as matmul + additive mask + softmax + "
        "matmul (examples/gpt2_attention.ir), so the masked SDPA path is never emitted.",
        "compile", (),
    ),
    Constraint(
        "ANE-BLOBFILE-OFFSET", "BLOBFILE offset points at the blob's metadata record",
        "silently garbage weights with the data offset",
        (Evidence("coremltools BlobWriter (MILBlob v2 storage format)", "a blob's offset is that of its "
                  "64-byte metadata record", DOCUMENTED, _SPEC),
         Evidence("Orion paper constraint 8", "offset=uint64(64), the metadata record, works; the data "
                  "offset gives garbage weights", DEMONSTRATED, _ORION)),
        "emitter", "anec/mil/emitter.py, anec/mil/blobfile.py",
        "The emitter writes offset = uint64(M), M the 64-byte metadata record (64 for the first "
        "blob in a file).",
        "compile", ("tests/mil/test_mil_blobfile.py::test_layout_fields",
                    f"{_EMIT}::test_packed_weights_offsets"),
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
                  "(int4, uint1-uint6: packed LSB first)", DOCUMENTED, _SPEC),
         Evidence("no public test", "the iOS18 forms (constexpr_blockwise_shift_scale over int8, "
                  "constexpr_lut_to_dense over uint1-uint8 indices) on the in-memory path, and "
                  "constexpr_affine_dequantize with a per-channel scale there (the demonstrated program "
                  "has one scalar scale): no published program runs them; python -m anec.selftest "
                  "(check compressed: int8 in both forms and 4-/6-bit LUTs, as conv and as matmul "
                  "weights) settles each on a Mac", HYPOTHESIS, _UNTRIED)),
        "emitter", "anec/compress.py, anec/mil/emitter.py (op_compressed), csrc/sim_constexpr.c; "
                   "Target.int8_form; anec/selftest.py (check_compressed)",
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
        "compile", ("tests/compress/test_compress_differential.py::test_sim_matches_the_interpreter",
                    "tests/compress/test_compress_differential.py::test_coremltools_decompresses_bit_for_bit_as_anec",
                    "tests/compress/test_compress_hostile.py::test_lut_indices_wider_than_the_table_are_refused",
                    "tests/ane_protocol/test_anec_selftest.py::"
                    "test_compressed_check_fails_when_the_targets_int8_form_is_rejected"),
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
                  "outside M4 int8: streamed or decompressed at load", HYPOTHESIS, _UNTRIED)),
        "emitter", "anec/compress.py (for_target, not_streamed_warning); Target.streamed_weights",
        "--compress auto tries lut4 then int8, keeping only the kinds the target streams (lut4 -> fp16 "
        "on m1); an explicit format the target does not stream compiles with a warning in the "
        "compile output and the manifest's compression report. A linear weight written as "
        "constexpr_blockwise_shift_scale (4-bit, per block, --compress-form blockwise) is the kind "
        "'blockwise', which ANEForge reports dequantized in the program: no profile lists it.",
        "compile", ("tests/compress/test_compress_spec.py::test_auto_picks_what_the_target_streams",),
        target_fields=("streamed_weights",),
    ),
    Constraint(
        "ANE-COMPRESSED-BUDGET", "a compressed weight counts as one tensor of the BLOBFILE budget",
        "a program over the budget fails to compile",
        (Evidence("no public test", "whether the device counts a constexpr weight, or each of its payload "
                  "BLOBFILEs, against the per-program tensor cap (ANE-BLOB-BUDGET)", HYPOTHESIS, _UNTRIED),),
        "analysis", "legalize counts each weight const once; csrc/sim_plan.c counts a constexpr result, "
                    "not its payloads",
        "Compression is decided after legalize, so the partition plan counts one tensor per weight; "
        "the sim's budget check agrees. A device that counts payloads would need the partition to "
        "count 2-3 tensors per compressed weight.",
        "compile", ("tests/passes/test_compress_budget.py::test_the_budget_counts_a_compressed_weight_once",
                    "tests/compress/test_compress_hostile.py::test_the_budget_counts_a_compressed_weight_once"),
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
        "compile", (f"{_LEG}::test_packed_weights_rejected_on_m1",
                    f"{_EMIT}::test_one_file_per_weight"),
        switch="one_file_per_weight",
    ),
    Constraint(
        "ANE-SOFTMAX-POW2", "softmax over a non-power-of-2 axis is rejected",
        "InvalidMILProgram",
        (Evidence("hollance/neural-engine#44", "softmax on a non-power-of-2 dimension gives "
                  "InvalidMILProgram", REPORTED, Scope("not stated (raw MIL text)", "not stated", "not stated")),
         Evidence("maderix/ANE training/ane_classifier.h gen_softmax_vocab (train_large_ane)",
                  "softmax(axis=1) over [1, 32000, 1, 256] compiles and runs in the ANE-extras "
                  "training pipeline (training/README.md comparison)", DEMONSTRATED, _MADERIX,
                  supports=False)),
        "error", "legalize: check_softmax_axis",
        "Off by default (maderix runs softmax over 32000 channels). When a target "
        "turns it on, softmax over a non-power-of-2 axis is an error suggesting padding with "
        "a -1e4 additive mask.",
        "compile", (f"{_LEG}::test_softmax_pow2_switch",),
        switch="softmax_pow2_only",
    ),
    Constraint(
        "ANE-REDUCE-MEAN", "reduce_mean is not accepted in raw MIL text",
        "compile fails",
        (Evidence("hollance/neural-engine#44", "reduce_mean is absent in raw MIL text; use reduce_sum "
                  "times 1/N", REPORTED, Scope("not stated (raw MIL text)", "not stated", "not stated")),
         Evidence("Orion compiler/builder.c LayerNorm (GPT-2 prefill); tests/test_ane_prefill.m",
                  "the LayerNorm composite emits reduce_mean, and the prefill kernels using it match the "
                  "CPU (K max error < 1.0, same argmax)", DEMONSTRATED, _ORION, supports=False)),
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
        "compile", (f"{_EMIT}::test_ios16_dialect", "tests/mil/test_mil_compile.py::test_dialect_option"),
        switch="mil_dialect",
    ),
    Constraint(
        "ANE-SURFACE-ALIGN", "M5 needs 128-byte aligned surfaces",
        "eval fails with misaligned surfaces",
        (Evidence("maderix/ANE PR #35 (unmerged)", "128-byte IOSurface alignment is needed on M5",
                  REPORTED, Scope("in-memory", "M5", "not stated")),),
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


def _record_line(r: Evidence) -> str:
    against = "" if r.supports else "against; "
    return f"[{against}{r.kind}; {r.scope}] {r.source}: {r.shows}"


def format_catalog(target: Target | None = None,
                   entries: Iterable[Constraint] | None = None) -> str:
    """The catalog (or ``entries``) as plain text (``anec constraints``)."""
    lines: list[str] = []
    for c in entries if entries is not None else CONSTRAINTS.values():
        lines.append(f"{c.id}  {c.title}  [{c.status}, {c.handling}]")
        lines.append(f"    symptom:  {c.symptom}")
        for r in c.evidence:
            lines.append(f"    evidence: {_record_line(r)}")
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
        "Each entry: what the ANE does, the evidence records it rests on, and how anec handles "
        "it. Every record names its source, what it shows, its kind and the scope it was seen "
        "on (API path: *in-memory* `_ANEInMemoryModel`, which anec drives, or *disk* "
        "`_ANEClient`, ...; chip; OS). Kinds: *demonstrated* (a test or a measurement shows it), "
        "*documented* (the published MIL op set or file format), *reported* (a claim without a "
        "test: a README, an issue, an unmerged PR), *hypothesis* (no source demonstrates it; "
        "only `python -m anec.selftest` on a Mac settles it). A record marked *against* "
        "contradicts the entry. The status derives from the records: *verified* (a supporting "
        "record demonstrates or documents it, none contradicts), *reported*, *contested* "
        "(records disagree) or *hypothesis*. Claims that cost something to guard against are "
        "switched per target (`anec/targets.py`).",
        "",
        "| id | constraint | status | handling |",
        "|---|---|---|---|",
    ]
    for c in entries:
        out.append(f"| [`{c.id}`](#{c.id.lower()}) | {c.title} | {c.status} | {c.handling} |")
    out.append("")
    targets = [target] if target is not None else list(TARGETS.values())
    for c in entries:
        out += [
            f"## {c.id}",
            "",
            f"**{c.title}.**",
            "",
            f"- Symptom: {c.symptom}.",
            f"- Status: {c.status}. Evidence:",
        ]
        for r in c.evidence:
            against = "against; " if not r.supports else ""
            out.append(f"  - *{against}{r.kind}* ({r.scope}): {r.source}: {r.shows}.")
        out += [
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
