"""The ``anec`` commands that read IR and compile it: ``fmt``, ``check``, ``compile`` and ``mil``.

``fmt`` prints IR in canonical form; ``check`` verifies it and reports ANE legality per
node, the compile budget, compression and fp16 range findings; ``compile`` writes
artifact directories; ``mil`` prints the MIL text of one func.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from anec.cli.options import activation_options, compress_options, concat_option, share_option, weight_options
from anec.cli.output import print_compression, print_ranges
from anec.diagnostics import AnecError, did_you_mean
from anec.targets import DEFAULT_TARGET, get_target


def _plural(n: int, word: str) -> str:
    """``"1 error"``, ``"2 errors"``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def _read_ir(file: str) -> str:
    """The text of FILE ('-' reads standard input), as UTF-8."""
    from anec.ir.parser import read_text

    if file != "-":
        return read_text(file)
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AnecError(f"<stdin>: not valid UTF-8 (byte {e.start})") from None


@click.command("fmt")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--check", "check_only", is_flag=True,
              help="Only check: exit 1 if FILE is not in canonical form.")
@click.option("-i", "--in-place", is_flag=True, help="Rewrite FILE in canonical form (atomically).")
@click.pass_context
def fmt_cmd(ctx: click.Context, file: str, check_only: bool, in_place: bool) -> None:
    """Print FILE in canonical form, keeping its comments ('-' reads stdin)."""
    from anec.ir.printer import format_text

    if check_only and in_place:
        raise click.UsageError("--check and --in-place cannot be combined")
    if in_place and file == "-":
        raise click.UsageError("--in-place needs a file, not '-'")
    text = _read_ir(file)
    out = format_text(text, "<stdin>" if file == "-" else file)
    if check_only:
        if out != text:
            click.echo(f"{file}: not in canonical form (run 'anec fmt -i {file}')", err=True)
            ctx.exit(1)
        return
    if in_place:
        if out != text:
            from anec.fsutil import write_text_atomic

            write_text_atomic(file, out, keep_mode=True)
        return
    click.echo(out, nl=False)


def _legality_report(name: str = "legality_report"):
    """``anec.passes.report.<name>`` when the passes provide it, else None."""
    try:
        report = importlib.import_module("anec.passes.report")
    except ModuleNotFoundError as e:
        if e.name in ("anec.passes", "anec.passes.report"):
            return None
        raise
    return getattr(report, name, None)


def _concat_target(module, target: str, concat: str):
    """The target with its concat reading resolved (ANE-CONCAT); says which reading, and why,
    on stderr when the module has a concat (before compiling, so also when it then fails)."""
    from anec.compiler import with_concat

    tgt = with_concat(get_target(target), concat)
    if any(n.op == "concat" for g in module.funcs.values() for n in g.nodes):
        click.echo(f"concat: {tgt.concat} ({tgt.sources['concat']})", err=True)
    return tgt


@click.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--target", metavar="NAME", help="Chip profile for the ANE legality report (default m4)."
)
@click.option("--weights", "weights_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Weight file (.safetensors/.npz) to check too: each const's key, shape and dtype, "
                   "and the fp16 range of its values (default: the files FILE's weights directives "
                   "name, when they exist).")
@click.option("--random-weights", type=int, metavar="SEED",
              help="Deterministic random tensors for the weights no file provides (checked as --weights, "
                   "and run on by --inputs).")
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False), metavar="CALIB.npz",
              help="Calibration inputs (one array per func input, by name): run each func on them "
                   "and report every node whose values leave the fp16 range [ANE-FP16-RANGE].")
@compress_options
@activation_options
@concat_option
@share_option
@click.pass_context
def check_cmd(ctx: click.Context, file: str, target: str | None, weights_path: str | None,
              random_weights: int | None, inputs_path: str | None, compress: str | None, compress_gate, compress_form,
              activations: str | None, calibration: str | None, activations_min_cosine: float,
              concat: str, share_programs: str) -> None:
    """Parse and verify FILE; print warnings and, when available, ANE legality per node."""
    from anec.ir.parser import parse_file
    from anec.ir.verifier import check
    from anec.ir.weight_binding import resolve_weights

    target_name = get_target(target).name
    module = parse_file(file)
    report = check(module)
    for err in report.errors:
        click.echo(err.render(), err=True)
    for warning in report.warnings:
        click.echo(warning.render(), err=True)
    if report.errors:
        click.echo(f"{file}: {_plural(len(report.errors), 'error')}", err=True)
        ctx.exit(1)
    nodes = sum(len(g.nodes) for g in module.funcs.values())
    click.echo(f"{file}: ok ({_plural(len(module.funcs), 'func')}, {_plural(nodes, 'node')})")
    given = {}  # the weights to check: given, or named by the file's weights directives
    if weights_path is not None or random_weights is not None:
        given["weights"] = resolve_weights(module, weights=weights_path, random_seed=random_weights)
    elif module.weight_sources and all(_directive_path(module, ws).is_file() for ws in module.weight_sources):
        given["weights"] = resolve_weights(module)
    legality = _legality_report("legality")
    if legality is not None:  # the report and its verdict: exit 1 when a node is rejected
        # the concat reading (ANE-CONCAT) as anec compile would use it, said when there is a concat
        legal_target = _concat_target(module, target_name, concat)
        result = legality(module, legal_target, **given)
        if result.text:
            click.echo(result.text.rstrip("\n"))
        overflows = _range_check(module, inputs_path, given, target_name, random_weights) \
            if inputs_path else 0
        if not result.legal:
            click.echo(f"{file}: not ANE-legal on {target_name}: "
                       f"{_plural(result.errors, 'error')} (see REJECTED above)", err=True)
            ctx.exit(1)
        _budget_check(module, legal_target, concat, share_programs)
        if compress is not None:
            _compression_check(module, compress, compress_gate, given, legal_target, concat, compress_form)
        if activations is not None or calibration is not None:
            _activation_check(module, activations, calibration, activations_min_cosine, given, legal_target,
                              concat, random_weights)
        if overflows:
            click.echo(f"{file}: {_plural(overflows, 'node')} overflow fp16 on the calibration "
                       "inputs (see ANE-FP16-RANGE above)", err=True)
            ctx.exit(1)
        return
    legality_report = _legality_report()
    if legality_report is not None:
        click.echo(legality_report(module, target_name, **given).rstrip("\n"))


def _budget_check(module, target, concat: str, share_programs: str) -> None:
    """The planner's line: the programs the module compiles into, against the process budget
    (an over-budget module raises the located ANE-COMPILE-BUDGET error)."""
    from anec.compiler import compile_module

    result = compile_module(module, target=target, concat=concat, with_weights=False,
                            share_programs=share_programs)
    if result.artifacts:
        click.echo(result.budget_line())


def _directive_path(module, ws):
    """The file a ``weights "..."`` directive names (relative to the module's file)."""
    p = Path(ws.path)
    return p if p.is_absolute() else (Path(module.path).parent if module.path else Path(".")) / p


def _compression_check(module, compress: str, gate, given: dict, target, concat: str,
                       form: str | None = None) -> None:
    """``anec check --compress``: per weight the format it gets, the bytes saved and the error
    (the gate runs on the weights given; without them, the format each rule asks for)."""
    from anec.compiler import compile_module
    from anec.compress import fallback_lines, report_summary

    result = compile_module(module, weights=given.get("weights"), target=target, concat=concat, compress=compress,
                            compress_gate=gate, compress_form=form, with_weights="weights" in given)
    click.echo("compression:")
    for name, art in result.artifacts.items():
        reports = [r for a in getattr(art, "stages", [art]) for r in a.manifest.compression]
        seen = set()
        for r in reports:
            if (r.key, r.const) in seen:
                continue
            seen.add((r.key, r.const))
            saved = r.dense_bytes - (r.bytes or 0)
            err = (f"rel L2 {r.rel_l2:.3g}, max abs {r.max_abs:.3g}" if isinstance(r.rel_l2, float)
                   else "error not measured (no weights: give --weights or --random-weights)")
            size = f"{saved} bytes saved"
            click.echo(f"  {name}: {r.key}: {r.format}"
                       + (f" (asked {r.requested})" if r.requested != r.format else "")
                       + f", {size}, {err}")
        if reports:
            click.echo(f"  {name}: {report_summary(reports)}")
        for line in fallback_lines(reports):
            click.echo(f"  {name}: {line}")


def _activation_check(module, activations: str | None, calibration: str | None, min_cosine: float, given: dict,
                      target, concat: str, random_seed: int | None) -> None:
    """``anec check --activations int8 --calibration X``: per func which activations go through
    int8 (scale, error) and which stay fp16 and why, and the outputs' agreement."""
    from anec.compiler import compile_module
    from anec.compress.activations import activation_summary

    result = compile_module(module, weights=given.get("weights"), random_seed=random_seed, target=target,
                            concat=concat, activations=activations, calibration=calibration,
                            activations_min_cosine=min_cosine)
    click.echo("activations:")
    for name, art in result.artifacts.items():
        acts = art.manifest.activations
        if acts is None:
            continue
        for t in acts.tensors:
            how = (f"int8, scale {t.scale:.6g} (max|x| {t.max_abs:.4g}, int8 error {t.rel_l2:.3g})"
                   if t.dtype == acts.dtype else f"fp16 ({t.reason})")
            click.echo(f"  {name}: %{t.value} -> {', '.join(t.consumers)}: {how}")
        for o in acts.outputs:
            click.echo(f"  {name}: output {o.output}: cosine {o.cosine:.6f}, max rel {o.max_rel:.4g}")
        click.echo(f"  {name}: {activation_summary(acts)}")


def _range_check(module, inputs_path: str, given: dict, target_name: str | None,
                 random_seed: int | None) -> int:
    """Print the fp16 range analysis on the calibration inputs; the number of overflows."""
    from anec.ranges import check_ranges, load_calibration
    from anec.ir.weight_binding import resolve_weights

    inputs = load_calibration(inputs_path)
    weights = given.get("weights")
    if weights is None:
        weights = resolve_weights(module, random_seed=random_seed)
    return print_ranges(check_ranges(module, inputs, weights, target=target_name))


def _pipeline_from(passes: str | None, pipeline: str | None):
    """The pass list or pipeline name compile runs (a usage error when both are given)."""
    if passes and pipeline:
        raise click.UsageError("give --passes or --pipeline, not both")
    return passes or pipeline


@click.command("compile")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Output directory (default: ./out/<file stem>); one subdirectory per func.")
@weight_options
@click.option("--target", default=DEFAULT_TARGET, show_default=True, metavar="NAME", help="Chip profile (m1..m5).")
@click.option("--passes", metavar="a,b,c", help="Run these passes instead of the default pipeline.")
@click.option("--pipeline", metavar="NAME", help="Run a named pipeline (see `anec passes`).")
@click.option("--print-ir-after", "print_after", multiple=True, metavar="PASS|all",
              help="Print the IR to stderr after this pass (repeatable, or comma-separated).")
@click.option("--timing", is_flag=True, help="Print the time spent in each pass.")
@click.option("--pack-weights", is_flag=True, help="All weights in one weights/weight.bin (not on m1).")
@click.option("--host-casts", is_flag=True,
              help="On fp16-only targets, take and return fp16 and let the host convert fp32.")
@click.option("--dialect", type=click.Choice(["ios18", "ios16"]), metavar="ios18|ios16",
              help="MIL dialect (default: the target's, ios18 on every chip); ios16 writes "
                   "program(1.0) with verbose scalars, the fallback for M1/M2.")
@click.option("--weights-as-inputs", "weights_as_inputs", metavar="GLOB,...",
              help="Make the weights whose checkpoint key matches a glob program inputs ('all': every "
                   "weight): they reload by a surface write, with no compile and no load.")
@compress_options
@click.option("--compress-check", "compress_check", type=click.Path(dir_okay=False), metavar="INPUTS.npz",
              help="Run each compressed func and the same func uncompressed on the sim on these calibration "
                   "inputs (one array per func input, by name) and report per output the cosine and max "
                   "relative error; the compile fails below --compress-min-cosine.")
@click.option("--compress-min-cosine", "compress_min_cosine", type=click.FloatRange(-1.0, 1.0), default=0.999,
              show_default=True, metavar="COS", help="The least output cosine --compress-check accepts.")
@activation_options
@concat_option
@share_option
def compile_cmd(file, out_dir, weights_path, random_weights, target, passes, pipeline, print_after, timing,
                pack_weights, host_casts, dialect, weights_as_inputs, compress, compress_gate, compress_form,
                compress_check, compress_min_cosine, activations, calibration, activations_min_cosine, concat,
                share_programs) -> None:
    """Compile FILE into DIR/<func>/{model.mil, weights/*.bin, manifest.json}."""
    from anec.compiler import compile_module, format_timings, summarize
    from anec.ir.parser import parse_file
    from anec.ir.printer import print_module

    module = parse_file(file)
    out = Path(out_dir) if out_dir else Path("out") / Path(file).stem
    after = [p for spec in print_after for p in spec.split(",") if p.strip()]
    tgt = _concat_target(module, target, concat)
    result = compile_module(module, weights=weights_path, random_seed=random_weights, target=tgt,
                            passes=_pipeline_from(passes, pipeline), out_dir=out, pack_weights=pack_weights,
                            host_casts=host_casts, print_ir_after=after or None, timing=timing,
                            dialect=dialect, weights_as_inputs=weights_as_inputs, concat=concat,
                            compress=compress, compress_gate=compress_gate, compress_form=compress_form,
                            compress_check=compress_check, compress_min_cosine=compress_min_cosine,
                            activations=activations, calibration=calibration,
                            activations_min_cosine=activations_min_cosine, share_programs=share_programs)
    for dump in result.printed_ir:
        click.echo(dump.rstrip("\n"), err=True)
    if not result.artifacts:
        click.echo("note: the pipeline has no emit-mil pass; nothing written, the IR follows", err=True)
        click.echo(print_module(result.module), nl=False)
    for name, art in result.artifacts.items():
        click.echo(summarize(name, art, result.paths.get(name)))
        print_compression(name, art)
    if result.artifacts:  # the planner's count (made before anything was written)
        click.echo(result.budget_line())
    if result.compress_check:
        from anec.compress_check import check_lines

        for line in check_lines(result.compress_check):
            click.echo(line)
    if result.artifacts:
        from anec.frontends.torch.imported import link_import

        linked = link_import(Path(file), out)
        if linked:
            click.echo(f"imported model: run it with the inputs torch takes: anec run {out} --input NAME=PATH.npy")
    if timing:
        click.echo(format_timings(result.timings), nl=False)


@click.command("mil")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--func", "func_name", metavar="NAME", help="Func to print (default: the only one).")
@weight_options
@click.option("--target", default=DEFAULT_TARGET, show_default=True, metavar="NAME", help="Chip profile (m1..m5).")
@click.option("--pack-weights", is_flag=True, help="Refer to one packed weights/weight.bin.")
@click.option("--host-casts", is_flag=True, help="As for compile, on fp16-only targets.")
@click.option("--dialect", type=click.Choice(["ios18", "ios16"]), metavar="ios18|ios16",
              help="MIL dialect (default: the target's, ios18 on every chip); ios16 writes "
                   "program(1.0) with verbose scalars, the fallback for M1/M2.")
@compress_options
@activation_options
@concat_option
def mil_cmd(file, func_name, weights_path, random_weights, target, pack_weights, host_casts, dialect,
            compress, compress_gate, compress_form, activations, calibration, activations_min_cosine,
            concat) -> None:
    """Print the MIL text of one func of FILE after the default pipeline.

    MIL never depends on weight values, so no weights are needed; with
    --weights or --random-weights every weight const is also checked against
    the tensors (and with --compress each weight's format is the one its gate
    keeps; without weights, the first format of its rule). --activations int8
    calibrates on the weights (the file's weights directives when none is given)."""
    from anec.compiler import compile_module
    from anec.ir.graph import Module
    from anec.ir.parser import parse_file
    from anec.ir.verifier import verify

    module = parse_file(file)
    verify(module)  # a file without funcs (or an invalid one) is reported before picking a func
    names = list(module.funcs)
    if func_name is None:
        if len(names) != 1:
            raise AnecError(f"{file} has {len(names)} funcs: {', '.join(names)}",
                            hint="pick one with --func NAME")
        func_name = names[0]
    elif func_name not in module.funcs:
        raise AnecError(f"{file} has no func '{func_name}'",
                        hint=did_you_mean(func_name, names) or f"funcs: {', '.join(names)}")
    one = Module(module.source, module.path)
    one.weight_sources = list(module.weight_sources)
    one.add_func(module.funcs[func_name])
    with_weights = weights_path is not None or random_weights is not None or activations is not None
    tgt = _concat_target(one, target, concat)
    result = compile_module(one, weights=weights_path, random_seed=random_weights, target=tgt,
                            pack_weights=pack_weights, host_casts=host_casts, with_weights=with_weights,
                            dialect=dialect, concat=concat, compress=compress, compress_gate=compress_gate,
                            compress_form=compress_form, activations=activations, calibration=calibration,
                            activations_min_cosine=activations_min_cosine)
    click.echo(result.artifacts[func_name].mil_text, nl=False)
