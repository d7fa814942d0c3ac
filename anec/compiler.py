"""``compile_module``: weights + pipeline + artifacts, the engine behind ``anec compile``.

One call compiles every func of a module into its own ANE program::

    from anec.ir import parse_file
    from anec.compiler import compile_module

    result = compile_module(parse_file("examples/gpt2_mlp.ir"), random_seed=0, out_dir="out/gpt2_mlp")
    result.artifacts["mlp"].manifest.inputs

Steps: resolve the weights (``--weights`` file, the module's ``weights``
directives, or random tensors), check every weight const against them before
any pass runs, run the pipeline on a copy of the module (the caller's module
is not changed), and write ``out_dir/<func>/`` for every func, all or nothing:
``out_dir`` is replaced as a whole (it then holds these funcs and the output
index ``.anec-output.json``), readers see the complete previous output or the
complete new one, and compiles to one ``out_dir`` take turns (see
:func:`anec.mil.output.write_output`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from anec.diagnostics import AnecError, ConstraintError, did_you_mean
from anec.ir.graph import Module
from anec.ir.nogc import no_cyclic_gc
from anec.ir.ops import baked_view, is_weight_const
from anec.hashing import deferred_hashes
from anec.mil.artifact import Artifact
from anec.mil.manifest_types import Manifest
from anec.mil.multi_program import count_compiles
from anec.mil.output import write_output
from anec.multi_program_build import build_multi_program
from anec.thread_pools import hash_pool
from anec.passes.base import Pass, PassContext
from anec.passes.emit_mil import EmitMil
from anec.targets import Target, get_target


@dataclass
class CompileResult:
    """What a compilation produced."""

    artifacts: dict[str, Artifact]
    """Func name -> artifact (empty when the pipeline has no emit-mil)."""
    module: Module
    """The compiled module (a copy of the input, after the passes)."""
    target: Target
    timings: list[tuple[str, str, float]] = field(default_factory=list)
    """(func, stage, seconds): every pass, plus weight resolution and writing with ``timing``."""
    printed_ir: list[str] = field(default_factory=list)
    """IR dumps requested with ``print_ir_after``."""
    rewrites: list[dict] = field(default_factory=list)
    """Every rewrite legalize applied (each names its func)."""
    paths: dict[str, Path] = field(default_factory=dict)
    """Func name -> the directory written (with ``out_dir``)."""
    compress_check: list[dict] = field(default_factory=list)
    """With ``compress_check``: per func output, the cosine and max relative error of the
    compressed program's output against the uncompressed program's, on the sim
    (:func:`anec.compress_check.model_check`)."""
    programs: int = 0
    """The compiles the runtime makes to load every artifact (:func:`count_programs`)."""
    budget: int = 0
    """The compiles one process may make (the target's ``process_compile_budget``, or the
    ``compile_budget`` given)."""
    shared: bool = False
    """Programs are shared across repeated layers (asked for, or chosen by the planner)."""

    def budget_line(self) -> str:
        return budget_line(self.programs, self.budget, self.shared)


SHARE_MODES = ("auto", "always", "never")


def budget_line(programs: int, budget: int, shared: bool) -> str:
    """What the planner says before anything is compiled on the device."""
    how = "; programs shared across repeated layers" if shared else ""
    return f"{programs} program{'s' if programs != 1 else ''} to compile (budget {budget} per process{how})"


def program_artifacts(artifacts: Iterable[Any]) -> list[Artifact]:
    """Every program of these artifacts: a single program, or each stage of a pipeline."""
    return [a for art in artifacts for a in (getattr(art, "stages", None) or [art])]


def count_programs(artifacts: Iterable[Any]) -> int:
    """The compiles a runtime makes to load all of ``artifacts`` in one process, with no
    weight reload strategy verified (the device until ``python -m anec.selftest`` verifies
    one): programs with the same MIL and the same weights are one compile (a cache hit), any
    other difference is a compile of its own."""
    return count_compiles(program_artifacts(artifacts))


def fewest_programs(module: Module) -> int:
    """A lower bound on the compiles of ``module``'s funcs once emitted without sharing, from
    their partition plans alone (before any MIL is written): programs whose weights differ
    are compiles of their own (:func:`anec.mil.multi_program.count_compiles`), so the
    distinct sets of weights (key, perm, slice) over every program of every func, stages of
    a cut func and uncut funcs alike, are at least that many compiles."""
    sets = set()
    for graph in module.funcs.values():
        plan = graph.facts.partition
        units = [s.weights for s in plan.stages] if plan is not None else [
            [n for n in graph.nodes if is_weight_const(n)]]
        for consts in units:
            sets.add(tuple(sorted({baked_view(n) for n in consts})))
    return len(sets)


def share_mode(share: str | bool) -> str:
    if share is True or share is False:
        return "always" if share else "never"
    if share not in SHARE_MODES:
        raise AnecError(f"unknown program sharing '{share}'",
                        hint=did_you_mean(str(share), SHARE_MODES) or f"known: {', '.join(SHARE_MODES)}")
    return share


def over_budget(programs: int, budget: int, module: Module, per_func: dict[str, int],
                shared: bool = True) -> ConstraintError:
    """The located error of a compile that needs more programs than one process may compile."""
    worst = max(per_func, key=lambda f: per_func[f]) if per_func else None
    graph = module.funcs.get(worst) if worst is not None else None
    detail = ", ".join(f"{f}: {n}" for f, n in sorted(per_func.items(), key=lambda kv: -kv[1])[:4])
    how = "even with programs shared across repeated layers" if shared else "without sharing programs"
    return ConstraintError(
        f"{programs} programs to compile {how}; one process may compile at most {budget} "
        f"(per func: {detail}); nothing was written and no program was compiled on the device",
        span=graph.span if graph is not None else None, constraint="ANE-COMPILE-BUDGET",
        hint=("share programs across repeated layers (--share-programs auto or always); or " if not shared else "")
        + "compile fewer funcs into one process (fewer buckets: load the prefill and decode programs "
             "in separate processes), or make the distinct stages fewer (layers of one shape repeat; "
             "heads, vocabulary splits and buckets each add programs)")


def with_dialect(target: Target, dialect: str | None) -> Target:
    """``target`` writing MIL in ``dialect`` (None: the target's own); AnecError if unknown."""
    from anec.mil.emitter import DIALECTS

    if dialect is None or dialect == target.mil_dialect:
        return target
    if dialect not in DIALECTS:
        raise AnecError(f"unknown MIL dialect '{dialect}'",
                        hint=did_you_mean(dialect, DIALECTS) or f"known dialects: {', '.join(DIALECTS)}")
    return target.replace(mil_dialect=dialect)


def resolve_passes(passes: str | Sequence[Pass | str] | None) -> tuple[Pass, ...]:
    """A pipeline from None (default), a pipeline name, ``"a,b,c"``, or a list."""
    from anec.passes import get_pass
    from anec.passes.pipelines import DEFAULT, PIPELINES, parse_pass_list

    if passes is None:
        return DEFAULT
    if isinstance(passes, str):
        return PIPELINES[passes] if passes in PIPELINES else parse_pass_list(passes)
    return tuple(p if isinstance(p, Pass) else get_pass(p)() for p in passes)


CONCAT_READINGS = ("verdict", "rewrite", "native")
"""``--concat``: ``verdict`` (default: ``native`` only where this Mac's selftest found concat
accepted and correct, for its own target), ``rewrite`` or ``native`` (ANE-CONCAT)."""


def with_concat(target: Target, concat: str | None) -> Target:
    """``target`` with its concat reading (ANE-CONCAT) resolved; ``sources["concat"]`` says why.

    None or ``"verdict"``: a target that already reads ``native`` keeps it, otherwise the
    cached selftest verdict decides (:func:`anec.verdict.concat_reading`; conservative without
    one). ``"rewrite"`` / ``"native"``: as asked."""
    if concat is None or concat == "verdict":
        if target.concat == "native":  # a profile made native by hand, or resolved before
            if target.sources.get("concat") != get_target(target.name).sources.get("concat"):
                return target  # already says why
            return target.replace(sources={**target.sources, "concat": "the target's concat field is native"})
        from anec.verdict import concat_reading

        reading, why = concat_reading(target.name)
    elif concat in ("rewrite", "native"):
        reading, why = concat, f"asked for (--concat {concat})"
    else:
        raise AnecError(f"unknown concat reading '{concat}'",
                        hint=did_you_mean(concat, CONCAT_READINGS) or f"known: {', '.join(CONCAT_READINGS)}")
    return target.replace(concat=reading, sources={**target.sources, "concat": why})


def with_int8_form(target: Target, form: str | None) -> Target:
    """``target`` writing 8-bit linear weights with ``form`` (None: the target's own;
    ANE-COMPRESSED-WEIGHTS); AnecError if unknown."""
    from anec.mil.emitter import INT8_FORMS

    if form is None or form == target.int8_form:
        return target
    if form not in INT8_FORMS:
        raise AnecError(f"unknown --compress-form '{form}'",
                        hint=did_you_mean(form, INT8_FORMS) or f"forms: {', '.join(INT8_FORMS)}")
    return target.replace(int8_form=form, sources={**target.sources, "int8_form": f"asked for (--compress-form {form})"})


def compile_module(
    module: Module,
    weights: Any = None,
    random_seed: int | None = None,
    target: str | Target | None = None,
    passes: str | Sequence[Pass | str] | None = None,
    out_dir: str | os.PathLike | None = None,
    pack_weights: bool = False,
    host_casts: bool = False,
    print_ir_after: Iterable[str] | str | None = None,
    timing: bool = False,
    with_weights: bool = True,
    dialect: str | None = None,
    weights_as_inputs: Iterable[str] | str | None = None,
    keep_funcs: bool = False,
    verify_each: bool = True,
    concat: str | None = None,
    compress: Any = None,
    compress_gate: Any = None,
    share_programs: str | bool = "auto",
    compile_budget: int | None = None,
    compress_form: str | None = None,
    compress_check: Any = None,
    compress_min_cosine: float = 0.999,
    activations: str | None = None,
    calibration: Any = None,
    activations_min_cosine: float = 0.999,
    keep_views: bool = False,
) -> CompileResult:
    """Compile every func of ``module``; see the module docstring.

    ``weights`` is a .safetensors/.npz path, a WeightStore or a mapping;
    ``random_seed`` fills every key no file provides with random tensors.
    ``print_ir_after`` names passes (or ``"all"``) whose output IR is kept in
    ``printed_ir``. With ``with_weights=False`` no weights are read at all and
    the artifacts hold MIL and a manifest without weight files (``anec mil``:
    MIL never depends on weight values); such artifacts cannot be written.
    ``dialect`` (``"ios18"`` or ``"ios16"``) overrides the target's MIL dialect
    (ios18 on every chip); the manifest records the one written.
    ``weights_as_inputs`` (fnmatch patterns over checkpoint keys, or ``"all"``)
    makes the matching weights program inputs (the weights-as-inputs pass):
    the runtime fills them from the artifact and reloads them by writing
    their surfaces, without a compile or a load.
    ``out_dir`` is replaced all or nothing and then holds exactly the funcs
    of this compile; with ``keep_funcs`` it also keeps the funcs of the
    previous output this compile does not replace (one output grown a func
    at a time).
    ``verify_each=False`` verifies each func once after the last pass instead
    of after every pass (MLIR's ``verify-each``; see anec/passes/manager.py).
    ``concat`` (``"verdict"``, the default, ``"rewrite"`` or ``"native"``) is how concat is
    compiled (ANE-CONCAT, :func:`with_concat`); the manifest records the reading and why.
    ``compress`` (a SPEC such as ``"int8"`` or ``"lut4:h.*.mlp.*,int8:*"``, or an
    :class:`anec.compress.Spec`) stores the matching conv/matmul weights compressed,
    each in the first format of its rule that passes the accuracy gate
    (docs/compression.md); the manifest's ``compression`` says what each weight got.
    ``compress_gate`` (an :class:`anec.compress.Gate`) overrides the gate's thresholds.
    ``share_programs`` (``"auto"``, ``"always"``, ``"never"``): repeated layers of a cut func
    become structurally identical stages that share one compiled program, their weights
    as its inputs (docs/runtime.md, "Programs shared across layers"). The planner counts
    the compiles the artifacts need before any is made (``result.programs``, against
    ``compile_budget``, default the target's ``process_compile_budget``); ``"auto"`` shares
    only when the count is over the budget, and a count still over it is a
    ConstraintError (ANE-COMPILE-BUDGET) before anything is written.
    ``compress_form`` (``"affine"`` or ``"blockwise"``) overrides the target's MIL op for
    8-bit linear weights in ios18 (``Target.int8_form``, ANE-COMPRESSED-WEIGHTS).
    ``compress_check`` (calibration inputs: a .npz path or a mapping, one array per func
    input by name) runs every func with compressed weights and the same func compiled
    without compression on the sim and compares their outputs (``result.compress_check``);
    an output whose cosine is below ``compress_min_cosine`` fails the compile (AnecError,
    nothing written).
    ``activations="int8"`` with ``calibration`` (a .npz path or a mapping: one array per func
    input by name, optionally with a leading axis of samples) gives the activation operand of
    every conv/matmul that reads a weight an int8 round trip (MIL quantize/dequantize, ios18
    only) whose scale the calibration inputs set, kept only where every output's cosine
    against the unquantized func stays at or above ``activations_min_cosine`` (the
    quantize-activations pass, docs/compression.md); the manifest's ``activations`` says
    which activations got int8 and why the others did not.
    ``keep_views`` (without ``out_dir``): the artifacts' weight files stay views of the
    weights, their hashes computed on worker threads meanwhile, for a caller that writes
    them itself with :func:`anec.mil.output.write_output` (which fills the hashes in) or
    completes them with :func:`settle`, as :func:`anec.models.export.compile_export` does
    with the artifacts of several modules: nothing is copied out of a memory-mapped
    checkpoint, whose pages are then the only copy of the weights the process holds. The
    weights must not change while the artifacts are used. Without it the weight files are
    copied out of the weights.
    """
    from anec.ir.verifier import verify
    from anec.passes import run_pipeline
    from anec.passes.pipelines import check_pass_names
    from anec.ir.weight_binding import check_weights, resolve_weights, weight_consts
    from anec.weight_store import touch_pages

    from anec.compress import parse_spec
    from anec.compress.activations import parse_activations

    tgt = with_int8_form(with_concat(with_dialect(get_target(target), dialect), concat), compress_form)
    share = share_mode(share_programs)
    budget = tgt.process_compile_budget if compile_budget is None else int(compile_budget)
    spec = parse_spec(compress, compress_gate)
    if calibration is not None and (isinstance(calibration, (str, bytes)) or hasattr(calibration, "__fspath__")):
        from anec.ranges import load_calibration

        calibration = load_calibration(os.fsdecode(calibration))
    act = parse_activations(activations, calibration, tgt.mil_dialect, activations_min_cosine)
    if act is not None and not with_weights:
        raise AnecError(f"--activations {act.dtype} calibrates by running the program, which needs its weights",
                        hint="give the weights (--weights, --random-weights or the file's weights directives)")
    pipeline = resolve_passes(passes)
    if act is not None:
        pipeline = with_activation_quant(pipeline, act)
    patterns: tuple[str, ...] = ()
    if weights_as_inputs is not None:
        patterns = tuple(_patterns(weights_as_inputs))
        pipeline = with_weights_as_inputs(pipeline, patterns)
    if isinstance(print_ir_after, str):
        print_ir_after = print_ir_after.split(",")
    dump_after = check_pass_names(print_ir_after) if print_ir_after else None
    if out_dir is not None and with_weights is False:
        raise AnecError("an artifact without weights cannot be written", hint="drop with_weights=False")
    streamed = out_dir is not None or keep_views  # the weight files stream from the views when written

    # the cyclic collector stays off for the whole compile (as for parsing and the passes,
    # see no_cyclic_gc): its graphs, clones and artifacts are large and nearly acyclic, and
    # each collection would rescan them
    with no_cyclic_gc():
        start = time.perf_counter()
        verify(module)
        verified = time.perf_counter() - start
        timings: list[tuple[str, str, float]] = []
        store = None
        if with_weights:
            start = time.perf_counter()
            store = resolve_weights(module, weights, random_seed)
            check_weights(module, store)
            # the pages of the weights the module reads are mapped on a worker thread meanwhile
            read = {n.attrs["weight"] for _, n in weight_consts(module)}
            hash_pool().submit(touch_pages, [store[k] for k in read])
            if timing:
                timings.append(("*", "resolve-weights", time.perf_counter() - start))

        def run(shared: bool, plan_first: bool = False) -> tuple[Module, PassContext, bool]:
            """The pipeline on a clone of the module; with ``plan_first`` (a pipeline ending in
            emit-mil) it stops before emitting when the plans alone need more compiles than
            the budget (the third value False: nothing was emitted)."""
            work = module.clone()
            ctx = PassContext(target=tgt, weights=store, module=work,
                              options={"pack_weights": pack_weights, "host_casts": host_casts, "compress": spec,
                                       "share_programs": shared},
                              print_ir_after=dump_after, verify_each=verify_each,
                              build_stages=build_multi_program)
            with deferred_hashes() if streamed else contextlib.nullcontext():
                # written: the weights are hashed on worker threads while write_output streams them to disk
                if plan_first:
                    run_pipeline(work, pipeline[:-1], ctx, verify_input=False)  # a clone of the verified module
                    if fewest_programs(work) > budget:
                        return work, ctx, False
                    run_pipeline(work, pipeline[-1:], ctx, verify_input=False)
                else:
                    run_pipeline(work, pipeline, ctx, verify_input=False)
            return work, ctx, True

        shared = share == "always"
        # auto: the plans are counted before anything is emitted; a module whose programs differ
        # in their weights beyond the budget goes straight to sharing, without emitting twice
        plan_first = share == "auto" and not patterns and not dump_after and bool(pipeline) and isinstance(pipeline[-1], EmitMil)
        work, ctx, emitted = run(shared, plan_first)
        programs = count_programs(ctx.artifacts.values()) if emitted else budget + 1
        if programs > budget and share == "auto":  # the planner: share, then count again
            timings.extend(ctx.timings)
            discard(ctx.artifacts.values())
            shared = True
            work, ctx, _ = run(True)
            programs = count_programs(ctx.artifacts.values())
        if programs > budget and ctx.artifacts:
            per = {f: count_programs([a]) for f, a in ctx.artifacts.items()}
            raise over_budget(programs, budget, module, per, shared)
        timings.extend(ctx.timings)
        if timing:
            timings.append(("*", "verify", verified + ctx.verify_seconds))
        if patterns:
            used = [w["key"] for g in work.funcs.values() for w in g.facts.weight_inputs]
            for p in patterns:
                if not any(fnmatch.fnmatchcase(k, p) for k in used):
                    raise AnecError(f"--weights-as-inputs pattern '{p}' matches no weight of the module",
                                    hint="patterns are fnmatch globs over checkpoint keys, e.g. 'h.*.mlp.*.weight'; "
                                         "'all' takes every weight")

        result = CompileResult(dict(ctx.artifacts), work, tgt, timings, list(ctx.printed), list(ctx.rewrites),
                               programs=programs, budget=budget, shared=shared)
        if compress_check is not None:
            from anec.compress_check import model_check

            if spec is None and act is None:
                raise AnecError("compress_check needs compress or activations",
                                hint="give --compress SPEC or --activations int8 with --compress-check")
            dense = compile_module(module, weights=store, target=tgt, passes=passes, pack_weights=pack_weights,
                                   host_casts=host_casts, weights_as_inputs=weights_as_inputs, concat=tgt.concat,
                                   share_programs=share_programs, compile_budget=compile_budget)
            settle(result.artifacts.values(), pin=False)  # the deferred weight hashes, for loading
            result.compress_check = model_check(result.artifacts, dense.artifacts, compress_check,
                                                compress_min_cosine)
        if out_dir is not None and result.artifacts:
            start = time.perf_counter()
            result.paths = write_output(Path(out_dir), result.artifacts, keep_funcs=keep_funcs)
            if timing:
                result.timings.append(("*", "write", time.perf_counter() - start))
            settle(result.artifacts.values(), pin=False)
        elif not keep_views:  # the weight files hold views of the store until written: copy them out of it now
            settle(result.artifacts.values(), pin=True)
        return result


def settle(artifacts: Iterable[Any], pin: bool) -> None:
    """Every manifest complete (deferred weight hashes in), and with ``pin`` every weight
    file's bytes built (no view of the weights left)."""
    from anec.mil.blobfile import BlobFiles

    for art in artifacts:
        for a in [art, *getattr(art, "stages", [])]:
            if hasattr(a, "finish"):
                a.finish()
            if pin and isinstance(a.blobs, BlobFiles):
                a.blobs.pin()


def discard(artifacts: Iterable[Any]) -> None:
    """Drop artifacts a compile planned again (shared programs): the hashes of their weights
    that have not started yet are never computed."""
    for art in artifacts:
        for a in [art, *getattr(art, "stages", [])]:
            if hasattr(a, "cancel"):
                a.cancel()


def _patterns(spec: Iterable[str] | str) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    items = [p.strip() for p in items if p.strip()]
    if not items:
        raise AnecError("weights_as_inputs names no weight", hint="give fnmatch patterns over keys, or 'all'")
    return ["*" if p == "all" else p for p in items]


def with_weights_as_inputs(pipeline: Sequence[Pass], patterns: Sequence[str]) -> tuple[Pass, ...]:
    """``pipeline`` with the weights-as-inputs pass inserted after the cleanup
    passes (dce, fuse-casts), before select-native (a native conv reads a constant weight: a
    weight input keeps its layer in the core-op form) / range-safe / annotate-sram / legalize /
    partition / emit-mil."""
    from anec.passes import WeightsAsInputs

    passes = list(pipeline)
    at = next((i for i, p in enumerate(passes) if p.name in ("select-native", "range-safe", "annotate-sram", "legalize",
                                                              "partition", "emit-mil")), len(passes))
    passes.insert(at, WeightsAsInputs(keys=tuple(patterns)))
    return tuple(passes)


def with_activation_quant(pipeline: Sequence[Pass], spec: Any) -> tuple[Pass, ...]:
    """``pipeline`` with the quantize-activations pass (for ``spec``, an
    :class:`anec.compress.activations.ActivationSpec`) right before emit-mil, or at its end:
    it calibrates the legal program that is emitted (after legalize and partition)."""
    from anec.passes import QuantizeActivations

    passes = list(pipeline)
    at = next((i for i, p in enumerate(passes) if p.name == "emit-mil"), len(passes))
    passes.insert(at, QuantizeActivations(calibration=spec.calibration, min_cosine=spec.min_cosine))
    return tuple(passes)


def format_timings(timings: Sequence[tuple[str, str, float]]) -> str:
    """The per-pass table printed by ``anec compile --timing``."""
    if not timings:
        return "no timings\n"
    wf = max(4, *(len(f) for f, _, _ in timings))
    wp = max(5, *(len(p) for _, p, _ in timings))
    total = sum(t for _, _, t in timings)
    lines = [f"{'func':<{wf}}  {'stage':<{wp}}  {'ms':>9}  {'share':>6}"]
    for func, stage, sec in timings:
        share = 100.0 * sec / total if total > 0 else 0.0
        lines.append(f"{func:<{wf}}  {stage:<{wp}}  {sec * 1e3:>9.3f}  {share:>5.1f}%")
    lines.append(f"{'total':<{wf}}  {'':<{wp}}  {total * 1e3:>9.3f}  {100.0:>5.1f}%")
    return "\n".join(lines) + "\n"


def _mb(n: int | float) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{int(n)} B"


def _weight_count(manifest: Manifest) -> int:
    """Weight consts of a program: a compressed weight's payloads count once."""
    parts = {w.part.of for w in manifest.weights if w.part}
    return sum(1 for w in manifest.weights if not w.part) + len(parts)


def summarize(name: str, art: Artifact, path: Path | None = None) -> str:
    """One line per program: ops, weights, peak SRAM, rewrites, where it went."""
    m = art.manifest
    ops = sum(1 for line in art.mil_text.splitlines()
              if line.startswith(" " * 8) and "= const()" not in line)
    stages = getattr(art, "stages", None)
    n_weights = sum(_weight_count(a.manifest) for a in stages) if stages is not None else _weight_count(m)
    parts = [f"{ops} ops", f"{n_weights} weights ({_mb(art.weight_bytes())})"]
    as_inputs = [w for a in (stages if stages is not None else [art]) for w in a.manifest.weight_inputs]
    if stages is not None and as_inputs:
        import math

        nbytes = sum(math.prod(w.shape) * (2 if w.dtype == "fp16" else 4) for w in as_inputs)
        parts[1] += f" + {len(as_inputs)} as program inputs ({_mb(nbytes)})"
    if stages is not None:
        shared = sum(1 for e in m.stages if e.same_as is not None)
        inputs = sum(1 for e in m.stages if e.shares is not None)
        same = (f" ({shared} identical to an earlier one" + (f", {inputs} sharing a program with their weights "
                                                               "as inputs" if inputs else "") + ")") if shared else ""
        parts.insert(0, f"{len(stages)} programs" + same)
    sram = m.sram
    if sram is not None and sram.peak_bytes is not None:
        spill = f", {len(sram.spill_nodes)} spill risks" if sram.spill_nodes else ""
        parts.append(f"peak SRAM {_mb(sram.peak_bytes)}{spill}")
    parts.append(f"{len(m.rewrites)} rewrites")
    line = f"{name}: " + ", ".join(parts)
    if path is not None:
        line += f" -> {path}"
    return line
