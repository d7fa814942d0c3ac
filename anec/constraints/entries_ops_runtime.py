"""Catalog entries: ops the device rejects, graph limits, and how programs load and run.

Concat, gelu, rsqrt, neg, conv bias and weights, spatial and channel limits, the
weight budget, surfaces and binding order, compiled weights and reloads, the compile
budget and the Objective-C API's arguments, in the order ``anec constraints`` lists them.
"""

from __future__ import annotations

import dataclasses

from anec.constraints.evidence import (MADERIX, MADERIX_CHIPS, MADERIX_RELOAD, ORION, ORION_CATALOG, ORION_DELTA,
                                       ORION_E5, ORION_M4, ORION_RELOAD, SAME_OBJECT, SPEC, UNTRIED)
from anec.constraints.model import (DEMONSTRATED, DOCUMENTED, HYPOTHESIS, REPORTED, Constraint, Evidence, Scope,
                                    removed_by)
from anec.ir.ops import BINARY, OPS, SPATIAL_LIMITS

ENTRIES = (
    Constraint(
        "ANE-CONCAT", "concat may be rejected",
        "compile fails: ANECCompile() FAILED: err=() (Orion); maderix's kernels compile and run it",
        (Evidence(ORION_CATALOG.format(n=1) + " (tasks T064-T071)",
                  "a program with concat fails to compile with ANECCompile() FAILED: err=(); Orion "
                  "packs inputs on the CPU and returns several outputs instead",
                  DEMONSTRATED, ORION),
         Evidence("maderix/ANE training/stories_mil.h (fwdAttn, fwdFFN output taps), benchmarks/"
                  "ANE_BENCHMARK_REPORT.md",
                  "the static training kernels return their taps through a channel concat(axis=1, "
                  "interleave=false, values=(...)); the report's runs of that pipeline compiled and "
                  "trained on these chips (correctness only through the training loss, never against "
                  "a reference)",
                  DEMONSTRATED, MADERIX_CHIPS, supports=False),
         Evidence("maderix/ANE training/training_dynamic/mil_dynamic.h (sdpaFwd), training/README.md",
                  "the dynamic pipeline's sdpaFwd builds RoPE's rotate_half with concat(axis=3) and tiles "
                  "GQA K/V by concat; that pipeline's training runs are recorded (about 111 ms/step, loss "
                  "falling), on a chip the records do not name",
                  DEMONSTRATED, MADERIX, supports=False),
         Evidence("maderix/ANE training/test_fused_qkv.m",
                  "3 convs and a concat in one program, adopted over 3 dispatches (no committed log)",
                  REPORTED, MADERIX, supports=False),
         Evidence("sbryngelson/ANEForge README and docs/numeric-cliffs.md",
                  "the e5rt path emits concat; on chips before A16 a concat of several last-axis-offset "
                  "slices returns wrong elements",
                  REPORTED, Scope("e5rt", "pre-A16 (wrong elements); others accepted", "not stated"),
                  supports=False)),
        "rewrite or error", removed_by("ANE-CONCAT"),
        "Contested, so a per-machine question: python -m anec.selftest (concat) compiles and runs a "
        "channel concat and caches accepted / rejected / accepted-but-wrong. With the concat reading "
        "`native` (anec compile --concat native, or --concat verdict on a Mac whose cached verdict is "
        "accepted, for that Mac's own target) concat is written as a MIL concat. Otherwise (no "
        "verdict, cross-compiling, Linux) a channel concat whose every use is the input of a conv1x1 "
        "becomes a sum of partial convs over weight slices (conv(concat(a, b), W) = conv(a, "
        "W[:, :ca]) + conv(b, W[:, ca:])), and any other concat is an error suggesting a "
        "multi-output program. The manifest records the reading used.",
        "compile",
        switch="concat",
    ),
    Constraint(
        "ANE-GELU", "gelu is not a valid MIL op for the ANE",
        "compile fails",
        (Evidence(ORION_CATALOG.format(n=10), "a program with gelu fails to compile; Orion builds the "
                  "tanh approximation from elementwise ops", DEMONSTRATED, ORION),),
        "rewrite", removed_by("ANE-GELU"),
        "gelu becomes 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))). For mode=\"exact\" (erf) "
        "this is an approximation (max abs error 4.7e-4), recorded in the rewrite list.",
        "compile",
    ),
    Constraint(
        "ANE-RSQRT", "rsqrt is rejected",
        "compile fails",
        (Evidence("Orion community issue mechramc/Orion#3 (added to Orion's catalog)",
                  "a community member found rsqrt rejected and pow(x, -0.5) accepted", REPORTED, ORION_M4),),
        "rewrite", removed_by("ANE-RSQRT"),
        "rsqrt(x) becomes pow(x, -0.5).",
        "compile",
    ),
    Constraint(
        "ANE-NEG", "there is no neg op in MIL",
        "compile fails (unknown op)",
        (Evidence("coremltools MIL op registry (iOS15-iOS18 opsets)", "the registry has no neg op",
                  DOCUMENTED, SPEC),),
        "rewrite", removed_by("ANE-NEG"),
        "neg(x) becomes mul(x, -1).",
        "compile",
    ),
    Constraint(
        "ANE-CONV-BIAS", "conv does not take bias=",
        "compile fails",
        (Evidence(ORION_CATALOG.format(n=13) + "; compiler/pass_conv_bias.c",
                  "conv with bias= is rejected; Orion's conv+bias fusion pass is disabled for that "
                  "reason and every linear adds its bias separately", DEMONSTRATED, ORION),),
        "rewrite", removed_by("ANE-CONV-BIAS"),
        "conv1x1(x, w, bias=b) becomes add(conv1x1(x, w), b).",
        "compile",
    ),
    Constraint(
        "ANE-CONV-CONST-WEIGHT", "a conv reads its weight from a constant",
        "unknown: no reference feeds the ANE a conv whose weight is computed or an input",
        (Evidence("maderix/ANE training_dynamic (weights packed into the input go through matmul); "
                  "Orion LoRA adapters (inputs through matmul)",
                  "weights that arrive at run time reach the device through matmul; no public program "
                  "gives conv a non-constant weight, so whether conv takes one is untested",
                  HYPOTHESIS, UNTRIED),),
        "rewrite", "legalize: conv_dynamic_weight_to_matmul",
        "conv1x1(x, w) with w a func input (weights compiled as inputs) or a computed value becomes "
        "transpose(matmul(transpose(x), reshape(w), transpose_y=true)), the form the references run.",
        "compile",
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
                  HYPOTHESIS, UNTRIED),),
        "rewrite or error", "select-native (keeps the core-op form; a patch embedding: patches as channels, "
        "one conv1x1); legalize: check_target_form",
        "The ops and their parameters are coremltools' MIL definitions (iOS15 conv.py, pool.py, "
        "image_resizing.py, reused by iOS17/iOS18), which state no size limits. "
        "select-native writes a native op only within the limits (anec.ir.ops.SPATIAL_LIMITS) and records "
        "the layers it leaves in their core-op form (a patch embedding, kernel == stride without padding, "
        "beyond them becomes its patches gathered into Cin*KH*KW channels and one conv1x1 instead); "
        "legalize rejects a target form beyond them at its "
        "line, and the sim refuses such MIL.",
        "compile",
    ),
    Constraint(
        "ANE-MATMUL-FLAGS", "matmul transpose flags must be named consts",
        "compile fails on inline bools",
        (Evidence(ORION_CATALOG.format(n=12) + " (README)",
                  "matmul with inline true/false for transpose_x/transpose_y is rejected; named bool "
                  "consts work", DEMONSTRATED, ORION),),
        "emitter", "anec/mil/emitter.py",
        "Every non-tensor parameter, including transpose_x/transpose_y, is emitted as a named "
        "const <node>_<param>.",
        "compile",
    ),
    Constraint(
        "ANE-LIVE-OUTPUTS", "returned names must be live values",
        "InvalidMILProgram when the return tuple names a dead value",
        (Evidence(ORION_CATALOG.format(n=14) + " (README)",
                  "a return tuple naming a value that DCE removed gives InvalidMILProgram",
                  DEMONSTRATED, ORION),),
        "analysis", "dce, Graph.replace_all_uses",
        "dce never removes a returned value; rewrites keep returned names "
        "(Graph.replace_all_uses renames the replacement), so the MIL return tuple always "
        "names live values with the declared names.",
        "compile",
    ),
    Constraint(
        "ANE-CONV-CHANNELS", "very wide convs are rejected",
        "compile fails for a 32K-channel conv",
        (Evidence(ORION_CATALOG.format(n=16), "a conv with 32K channels is rejected", DEMONSTRATED, ORION),
         Evidence("maderix/ANE training/ane_classifier.h and test_classifier.m",
                  "a 1x1 conv with 32000 OUTPUT channels compiles (test_classifier: all compile); a code "
                  "comment says 32000 INPUT channels are rejected, so classifier backward uses matmul",
                  REPORTED, MADERIX)),
        "rewrite or error", "legalize: chunk_wide_conv_output, split_wide_conv_input",
        "A conv with more output channels than the target allows is split into chunked convs "
        "when its result (possibly through elementwise unary ops) is returned: the outputs "
        "become name__c0, name__c1, ... and meta['logical_outputs'] tells the runtime how to "
        "reassemble them. Too many input channels become a sum of convs over input slices. A "
        "too-wide conv whose result is used inside the program is an error.",
        "compile",
        target_fields=("max_conv_out_channels",),
    ),
    Constraint(
        "ANE-BLOB-BUDGET", "at most 16 BLOBFILE tensors per program",
        "17 BLOBFILE tensors fail with InvalidMILProgram; any pow/add/mul with an inline "
        "scalar lowers the cap to 15 (does not stack)",
        (Evidence("Orion community issue mechramc/Orion#3 (added to Orion's catalog)",
                  "17 BLOBFILE-backed tensors fail with InvalidMILProgram, 16 compile; an inline scalar "
                  "operand of pow/add/mul lowers the cap to 15", REPORTED, ORION_M4),),
        "rewrite or error", "legalize: partition (anec/passes/partition.py)",
        "Counted after all rewrites, per program: one tensor per distinct weight view, i.e. key, "
        "perm, slice and type (identical weight consts are merged first); value= consts are "
        "inline literals in MIL and do not count. The cap "
        f"drops by the scalar penalty when a binary op ({'/'.join(o for o in OPS if o in BINARY)}) takes a "
        "rank-0 const. A func over the cap is cut into a pipeline of programs, each within it "
        "(fewest programs, then fewest bytes between them); a node that alone reads more tensors "
        "than a program holds is an error at that node.",
        "compile",
        target_fields=("max_blob_tensors", "scalar_penalty"),
    ),
    Constraint(
        "ANE-UNIFORM-SURFACES", "multi-input/-output surfaces need equal allocation sizes",
        "eval fails: ANEProgramProcessRequestDirect() status=0x1d",
        (Evidence("Orion paper constraints 2 and 18 (T072, T163); docs/ane_constraints.md 2 and 12",
                  "outputs (and inputs) of different allocation sizes fail at evaluate with status 0x1d; "
                  "Orion allocates every surface at the largest size", DEMONSTRATED, ORION),),
        "runtime", "manifest input_alloc_bytes/output_alloc_bytes; C runtime core",
        "The manifest gives one allocation size per direction (the largest tensor, at least "
        "the minimum surface, aligned); the runtime allocates every surface at that size.",
        "runtime",
    ),
    Constraint(
        "ANE-IO-ORDER", "I/O binds in alphabetical order of MIL names",
        "silently wrong (swapped) data",
        (Evidence("Orion paper constraints 3 and 19 (T101, T163); docs/ane_constraints.md 3 and 13",
                  "surfaces are bound in alphabetical order of the MIL names, not declaration order "
                  "(decode passes {K, Q, V} for (q32, k32, v32))", DEMONSTRATED, ORION),),
        "runtime", "manifest binding indexes; C runtime core",
        "The manifest records each input's and output's binding index (alphabetical order of "
        "MIL names); the runtime binds surfaces by that index, so users pass names, not order. "
        "python -m anec.selftest (binding) checks it on a Mac.",
        "runtime",
    ),
    Constraint(
        "ANE-MIN-SURFACE", "surfaces below ~49 KB fail at eval",
        "eval fails with status 0x1d (seq=1 with 768 channels, 3 KB)",
        (Evidence("Orion paper constraint 4 (T100)",
                  "a [768, 1] fp16 surface (3 KB) fails at evaluate with status 0x1d; [768, 16] "
                  "(49,152 B) works, so decode pads to 16 positions", DEMONSTRATED, ORION),
         Evidence("maderix/ANE PR #16 (unmerged)", "claims a 49,152-byte minimum even for tiny tensors",
                  REPORTED, MADERIX)),
        "runtime", "manifest *_alloc_bytes; C runtime core",
        "Allocations are at least min_surface_bytes; data is written packed at byte 0.",
        "runtime",
        target_fields=("min_surface_bytes",),
    ),
    Constraint(
        "ANE-PACKED-READ", "the ANE reads packed data from byte 0 of an oversized surface",
        "silently wrong data when rows are stride-padded",
        (Evidence("Orion paper constraint 20 (T163); docs/ane_constraints.md 14",
                  "stride-padded LoRA inputs gave a ~260x smaller LoRA term; packed data at byte 0 "
                  "of the oversized surface is right", DEMONSTRATED, ORION),),
        "runtime", "C runtime core (packed writes and reads)",
        "The runtime writes and reads tensors packed in their declared shape at offset 0.",
        "runtime",
    ),
    Constraint(
        "ANE-BAKED-WEIGHTS", "rewriting weights/ and loading the same object changes nothing",
        "stale outputs: the new weight files are not used",
        (MADERIX_RELOAD,
         Evidence("maderix/ANE training/test_ane_advanced.m",
                  "an IOSurface with 3x identity weights passed as weightsBuffer does not override "
                  "the compiled weights", REPORTED, MADERIX),
         Evidence("Orion docs/ane_constraints.md 7 (source: maderix)",
                  "rewriting BLOBFILEs and reloading does not change outputs", REPORTED, ORION)),
        "runtime", "C runtime core (reload strategies) and python -m anec.selftest",
        "A reload never rewrites weight files and loads again. It uses a strategy verified on the "
        "machine: data patch (ANE-DATA-IS-BLOBFILE, ANE-SAME-OBJECT-PATCH), a new object "
        "(ANE-NEW-OBJECT-LOAD), weights compiled as program inputs (a surface write), or recompile "
        "within the process budget. Which of 'load reads the compiled data' and 'weights kept in "
        "memory' (per object, or cached per hexId) holds is not known: the sim and the ane fake "
        "model each (load=data, load=memory, load=memory-shared), every strategy is tested under "
        "each, and the selftest probes the machine; until it has, reloads recompile.",
        "runtime",
    ),
    Constraint(
        "ANE-DATA-IS-BLOBFILE", "one BLOBFILE tensor compiles to data equal to the BLOBFILE",
        "none (a fact the data patch relies on)",
        (ORION_E5,),
        "runtime", "C runtime core (data-patch eligibility)",
        "A program is eligible for a data patch only when its compiled data was observed, right "
        "after the compile, to equal its one BLOBFILE; anything else (several tensors, an opaque "
        "container) reloads another way. The sim models the measured case (data=tensor) and an "
        "optimistic one (data=file, a packed file).",
        "runtime",
    ),
    Constraint(
        "ANE-NEW-OBJECT-LOAD", "a new, never-compiled model object loads a donor's compiled form",
        "none (the reload Orion tested)",
        (ORION_DELTA,),
        "runtime", "the new-object reload strategy (driver clone + patch_data before the first load); "
        "C runtime core and python -m anec.selftest (reload)",
        "Orion's tested path is its own reload strategy, new-object: a new descriptor and model object "
        "from the same MIL and the new weights, its hexId directory given the donor's net.plist and "
        "the new data, loaded without a compile, then swapped in. A cache hit with other weights is "
        "the same path. Orion tested it on one machine, so the runtime uses it only where the "
        "selftest verified it here; the sim's load=memory-shared and the fake's hexId cache model a "
        "device where it is stale.",
        "runtime",
    ),
    Constraint(
        "ANE-SAME-OBJECT-PATCH", "unload, rewrite data, load the same object: new weights",
        "unknown: stale outputs if the framework keeps the weights in memory",
        (SAME_OBJECT,),
        "runtime", "C runtime core (data patch) and python -m anec.selftest (reload)",
        "A hypothesis: the runtime uses the same-object data patch only where the selftest verified "
        "it on this machine, OS and anec version (the cached verdict), and otherwise recompiles. "
        "The sim and the ane fake model a device where it works (load=data) and ones where it is "
        "stale (load=memory, load=memory-shared).",
        "runtime",
    ),
    Constraint(
        "ANE-LOAD-REREADS-WEIGHTS", "load re-reads the weight files",
        "if it does not, a reload by rewriting weights/ is stale",
        (ORION_RELOAD, dataclasses.replace(MADERIX_RELOAD, supports=False)),
        "runtime", "C runtime core (never relied on)",
        "Contested, so never relied on: no reload strategy rewrites weights/ alone and loads. The "
        "sim can model the claim (load=weights) to show the runtime still reloads right there.",
        "runtime",
    ),
    Constraint(
        "ANE-SURFACE-LOCK", "the CPU locks an IOSurface only while it reads or writes it",
        "unknown: whether evaluate accepts a surface the CPU holds locked",
        (Evidence("maderix/ANE training/ane_runtime.h, stories_io.h, bridge/ane_bridge.m",
                  "IOSurfaceLock, memcpy (or fp32->fp16 conversion), IOSurfaceUnlock around each write "
                  "and read (read-only lock for reads); evaluate runs on unlocked surfaces",
                  DEMONSTRATED, MADERIX),
         Evidence("Orion core/iosurface_tensor.m",
                  "orion_tensor_write/read memcpy under IOSurfaceLock and unlock; evaluate runs on "
                  "unlocked surfaces", DEMONSTRATED, ORION),
         Evidence("no public test",
                  "what evaluate does with a surface the CPU holds locked (refused, or races); the "
                  "references never try it", HYPOTHESIS, UNTRIED)),
        "runtime", "driver surface_lock/surface_unlock; C runtime core",
        "The references' practice: the C core locks a surface only around its own copies (a "
        "read-only lock for reads) and evaluates unlocked surfaces. The ane fake shows the CPU only "
        "a poison pattern of an unlocked surface and flags a write under a read-only lock; the sim "
        "gives a surface's bytes only under a lock and refuses to evaluate a locked one.",
        "runtime",
    ),
    Constraint(
        "ANE-INPUT-RESIDENT", "an input surface keeps what the CPU wrote across evaluations",
        "unknown: stale state if an evaluation changed its input surfaces",
        (Evidence("maderix/ANE training_dynamic (staged input surfaces, one request per layer)",
                  "each layer's input IOSurface, bound to its own request, holds weights written once "
                  "per Adam update next to the activation columns, which each step rewrites before "
                  "evaluating; training runs on it", DEMONSTRATED, MADERIX),
         Evidence("ANEForge ane_e5rt_program_share_buffer (e5rt_io_port_bind_buffer_object)",
                  "resident KV and optimizer state: a state output bound to the buffer of its input, "
                  "seeded once, then execute_sync in a loop with no host copies",
                  REPORTED, Scope("e5rt", "not stated", "not stated")),
         Evidence("no public test",
                  "on _ANEInMemoryModel, an output surface bound as an input of the same program (in "
                  "one request, or swapped between two): whether the device allows it; the references "
                  "on this path never try it", HYPOTHESIS, UNTRIED)),
        "runtime", "C runtime core (anec_write_input_slice, state inputs) and python -m anec.selftest (state)",
        "State inputs (a decode step's KV cache and mask) stay in the program's own input surfaces "
        "between calls, and the host writes only the rows that change, under a lock, between "
        "evaluations, as maderix's staged surfaces do. No output is aliased onto an input: that is "
        "shown only on the e5rt path, and the decode func returns the new rows, not a whole new "
        "cache. The selftest checks on each machine that rows written in place compute what whole "
        "inputs compute.",
        "runtime",
    ),
    Constraint(
        "ANE-COMPILE-BUDGET", "about 119 compiles per process",
        "compiles start failing after ~119 per process",
        (Evidence("maderix/ANE README and training code (MAX_COMPILES 100, exec() restart)",
                  "about 119 compiles per process, then compiles fail ('compiler leaks resources'); the "
                  "code restarts the process before 100", REPORTED, MADERIX),
         Evidence("maderix/ANE PR #23 (unmerged)", "measured 119-132 compiles per process", REPORTED,
                  Scope("in-memory", "M4", "not stated")),
         Evidence("Orion paper constraint 5 (source: maderix)", "silent failure or instability past "
                  "~119 compiles; Orion v1 restarts with exec()", REPORTED, ORION),
         Evidence("maderix/ANE training_dynamic (make_request)",
                  "one compiled model evaluated with one request per layer, each binding its own "
                  "weight input IOSurface: 10 compiled kernels serve 12 or 28 layers", DEMONSTRATED, MADERIX)),
        "runtime", "C runtime core (process-wide compile budget, program cache)",
        "The runtime counts compiles per process and driver (every Runtime shares the count, as on "
        "the device) against the target's process_compile_budget, caches programs by MIL hash + weight keys, refuses compiles past the budget with "
        "a clear error, and reloads weights without compiling wherever a verified strategy allows. "
        "The compiler counts the compiles of its artifacts before any is made, and over the budget "
        "shares one program across repeated layers, their weights as its inputs (as maderix's "
        "dynamic pipeline does), else fails before compiling.",
        "runtime",
    ),
    Constraint(
        "ANE-MIL-NSDATA", "MIL text must be passed as bytes (NSData)",
        "crash or silent failure when passed as a string",
        (Evidence("Orion paper constraint 9", "MIL text passed as NSString crashes or fails silently",
                  DEMONSTRATED, ORION),
         Evidence("maderix/ANE api_exploration.m", "tries NSString and NSData; every working path uses "
                  "NSData", REPORTED, MADERIX)),
        "runtime", "driver_ane",
        "The ane driver passes the MIL text as UTF-8 bytes.",
        "runtime",
    ),
    Constraint(
        "ANE-WEIGHTS-DICT", "the weights dictionary must be empty, never nil",
        "crash",
        (Evidence("Orion paper constraint 11", "a nil weights dictionary crashes; @{} works",
                  DEMONSTRATED, ORION),),
        "runtime", "driver_ane",
        "The ane driver always passes a dictionary (empty when weights come from files).",
        "runtime",
    ),
)
