"""The ``anec`` command line.

Exit codes: 0 success; 1 user error (an :class:`~anec.diagnostics.AnecError`,
rendered as ``file:line:col: error: ...`` on stderr, or an operating system
error such as a full disk); 2 usage error; 3 internal error: a bug in anec,
reported as a short message with the anec version (the Python traceback only
with ``anec --traceback`` or ``ANEC_TRACEBACK=1``); 128 + N after signal N
(SIGTERM, SIGHUP), once temporary files and runtimes are cleaned up. No input
makes anec print a Python traceback.
"""

from __future__ import annotations

import os
import signal
import sys

import click

from anec import __version__
from anec.diagnostics import AnecError, signal_must_wait
from anec.targets import DEFAULT_TARGET

EXIT_INTERNAL = 3
TRACEBACK_ENV = "ANEC_TRACEBACK"


class _Group(click.Group):
    """A click group that renders AnecError, and any other exception as a bug report,
    instead of a traceback."""

    def invoke(self, ctx: click.Context):  # noqa: D102
        _exit_on_signals()
        try:
            return super().invoke(ctx)
        except AnecError as e:
            click.echo(e.render(), err=True)
            ctx.exit(1)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except MemoryError:
            click.echo("error: out of memory", err=True)
            ctx.exit(1)
        except OSError as e:  # the environment (a full disk, a permission), not the input
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            click.echo(f"error: {e.strerror or e}{where}", err=True)
            ctx.exit(1)
        except Exception as e:  # noqa: BLE001 - the last guard: a bug, reported as one
            interrupt = _interrupt_in(e)
            if interrupt is not None:  # a signal, not a bug: Ctrl-C's "Aborted!", or its exit status
                raise interrupt from None
            _internal_error(ctx, e)
            ctx.exit(EXIT_INTERNAL)


def _format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """The command list with each command's whole first sentence (click cuts it to the
    terminal width and ends it with '...'); the formatter wraps long ones."""
    rows = []
    for name in self.list_commands(ctx):
        cmd = self.get_command(ctx, name)
        if cmd is not None and not cmd.hidden:
            rows.append((name, cmd.get_short_help_str(limit=10_000)))
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)


_Group.format_commands = _format_commands  # type: ignore[method-assign]
_Group.group_class = type  # subgroups (anec models) are _Groups too


def _interrupt_in(e: BaseException) -> BaseException | None:
    """The KeyboardInterrupt (SIGINT) or SystemExit (the SIGTERM/SIGHUP handler) that Python
    wrapped into ``e``, if any: one raised while a class is created, in a descriptor's
    ``__set_name__``, comes out as a RuntimeError caused by it."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, (KeyboardInterrupt, SystemExit)):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _internal_error(ctx: click.Context, e: BaseException) -> None:
    import platform
    import traceback

    show = (ctx.find_root().params or {}).get("traceback") or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    if show:
        click.echo("".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip("\n"), err=True)
    message = str(e).splitlines()[0][:200] if str(e) else ""
    click.echo(f"anec: internal error: {type(e).__name__}{': ' + message if message else ''}\n"
               f"This is a bug in anec {__version__} (Python {platform.python_version()}, {platform.system()}); "
               "please report it with the command line and its input files."
               + ("" if show else f"\nRun again with 'anec --traceback ...' or {TRACEBACK_ENV}=1 for the details."),
               err=True)


def _on_signal(signum: int, frame: object) -> None:
    if signal_must_wait(signum, frame):
        return
    raise SystemExit(128 + signum)


def _on_interrupt(signum: int, frame: object) -> None:
    """Python's SIGINT handler (KeyboardInterrupt), except inside the import machinery, where the
    interrupt would be printed and ignored by an import lock's weakref callback: there the
    signal is sent again, to land a moment later."""
    if signal_must_wait(signum, frame):
        return
    raise KeyboardInterrupt


def _exit_on_signals() -> None:
    """SIGTERM/SIGHUP exit through the normal unwinding (temporary directories removed,
    runtimes closed), and SIGINT raises KeyboardInterrupt outside the import machinery,
    unless the process installed handlers of its own."""
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        current = signal.getsignal(sig)
        default = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
        if current is default:
            try:
                signal.signal(sig, _on_interrupt if name == "SIGINT" else _on_signal)
            except ValueError:  # not the main thread (click invoked from a thread)
                return


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="anec")
@click.option("--traceback", is_flag=True, help=f"Print the Python traceback of an internal error "
                                                 f"(also {TRACEBACK_ENV}=1).")
def main(traceback: bool) -> None:
    """anec: compile, check and run models on the Apple Neural Engine."""


# ---- IR tools: fmt, check, ops, interp -------------------------------------

# IR tools: fmt (canonical form), check (parse + verify [+ ANE legality report])


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


@main.command("fmt")
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
    import importlib

    try:
        report = importlib.import_module("anec.passes.report")
    except ModuleNotFoundError as e:
        if e.name in ("anec.passes", "anec.passes.report"):
            return None
        raise
    return getattr(report, name, None)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


_concat_option = click.option(
    "--concat", type=click.Choice(["verdict", "rewrite", "native"]), default="verdict", show_default=True,
    help="How concat is compiled (ANE-CONCAT, contested): native keeps a MIL concat, rewrite turns it into "
         "partial convs (or an error); verdict is native only for this Mac's own target where "
         "python -m anec.selftest found concat accepted and correct.")


_share_option = click.option(
    "--share-programs", "share_programs", type=click.Choice(["auto", "always", "never"]), default="auto",
    show_default=True,
    help="Repeated layers of a func cut into several programs share one compiled program, their weights as "
         "its inputs (ANE-COMPILE-BUDGET): auto shares only when the programs to compile exceed the "
         "process budget.")


def _concat_target(module, target: str, concat: str):
    """The target with its concat reading resolved (ANE-CONCAT); says which reading, and why,
    on stderr when the module has a concat (before compiling, so also when it then fails)."""
    from anec.compiler import with_concat
    from anec.targets import get_target

    tgt = with_concat(get_target(target), concat)
    if any(n.op == "concat" for g in module.funcs.values() for n in g.nodes):
        click.echo(f"concat: {tgt.concat} ({tgt.sources['concat']})", err=True)
    return tgt


def _compress_option(f):
    f = click.option(
        "--compress-form", "compress_form", type=click.Choice(["affine", "blockwise"]), metavar="affine|blockwise",
        help="The MIL op of int8/uint8 weights in the ios18 dialect: affine (constexpr_affine_dequantize, "
             "the form a published program runs on the device; the default) or blockwise "
             "(constexpr_blockwise_shift_scale); see ANE-COMPRESSED-WEIGHTS.")(f)
    f = click.option(
        "--compress-gate", "compress_gate", metavar="REL_L2[,REL_ABS]", callback=_parse_gate,
        help="The accuracy gate of --compress: the largest relative L2 error (of the tensor and of "
             "each output channel) and max abs error / max|w| a compressed tensor may have "
             "(default: per format, docs/compression.md).")(f)
    return click.option(
        "--compress", "compress", metavar="SPEC",
        help="Store conv/matmul weights compressed: FORMAT[>FALLBACK..][:GLOB],... over checkpoint keys, "
             "first match wins (int8, int8-affine, uint8-affine, int4, int4-affine, uint4-affine, FORMAT/bB "
             "per block of B input channels, lut1..lut8, lutN/gG, fp16), e.g. "
             "'lut4:h.*.mlp.*,int8:*'. Each tensor must pass an accuracy gate, else falls back "
             "(lutN -> int8 -> fp16); see docs/compression.md.")(f)


def _parse_gate(ctx: click.Context, param: click.Parameter, value: str | None):
    if value is None:
        return None
    from anec.compress import Gate

    try:
        nums = [float(v) for v in value.split(",")]
        if not 1 <= len(nums) <= 2 or any(not v > 0 for v in nums):
            raise ValueError
    except ValueError:
        raise click.BadParameter("give REL_L2 or REL_L2,REL_ABS, positive numbers (e.g. 0.05 or 0.05,0.5)") from None
    return Gate(nums[0], nums[1] if len(nums) > 1 else None)


@main.command("check")
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
@_compress_option
@_concat_option
@_share_option
@click.pass_context
def check_cmd(ctx: click.Context, file: str, target: str | None, weights_path: str | None,
              random_weights: int | None, inputs_path: str | None, compress: str | None, compress_gate, compress_form,
              concat: str, share_programs: str) -> None:
    """Parse and verify FILE; print warnings and, when available, ANE legality per node."""
    from anec.ir.parser import parse_file
    from anec.ir.verifier import check

    target_name = target
    try:
        from anec.targets import get_target
    except ModuleNotFoundError as e:
        if e.name != "anec.targets":
            raise
    else:
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
    from anec.ir.weight_binding import resolve_weights

    if weights_path is not None or random_weights is not None:
        given["weights"] = resolve_weights(module, weights=weights_path, random_seed=random_weights)
    elif module.weight_sources and all(_directive_path(module, ws).is_file() for ws in module.weight_sources):
        given["weights"] = resolve_weights(module)
    legality = _legality_report("legality")
    if legality is not None:  # the report and its verdict: exit 1 when a node is rejected
        # the concat reading (ANE-CONCAT) as anec compile would use it, said when there is a concat
        legal_target = _concat_target(module, target_name, concat) if target_name else DEFAULT_TARGET
        result = legality(module, legal_target, **given)
        if result.text:
            click.echo(result.text.rstrip("\n"))
        overflows = _range_check(module, inputs_path, given, target_name, random_weights) \
            if inputs_path else 0
        if not result.legal:
            click.echo(f"{file}: not ANE-legal on {target_name or 'm4'}: "
                       f"{_plural(result.errors, 'error')} (see REJECTED above)", err=True)
            ctx.exit(1)
        _budget_check(module, legal_target, concat, share_programs)
        if compress is not None:
            _compression_check(module, compress, compress_gate, given, legal_target, concat, compress_form)
        if overflows:
            click.echo(f"{file}: {_plural(overflows, 'node')} overflow fp16 on the calibration "
                       "inputs (see ANE-FP16-RANGE above)", err=True)
            ctx.exit(1)
        return
    legality_report = _legality_report()
    if legality_report is not None:
        click.echo(legality_report(module, target_name or DEFAULT_TARGET, **given).rstrip("\n"))


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
    from pathlib import Path

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
        reports = [r for a in [art, *getattr(art, "stages", [])] for r in a.manifest.get("compression", [])]
        seen = set()
        for r in reports:
            if (r["key"], r["const"]) in seen:
                continue
            seen.add((r["key"], r["const"]))
            saved = r["dense_bytes"] - r["bytes"]
            err = (f"rel L2 {r['rel_l2']:.3g}, max abs {r['max_abs']:.3g}" if isinstance(r.get("rel_l2"), float)
                   else "error not measured (no weights: give --weights or --random-weights)")
            size = f"{saved} bytes saved"
            click.echo(f"  {name}: {r['key']}: {r['format']}"
                       + (f" (asked {r['requested']})" if r["requested"] != r["format"] else "")
                       + f", {size}, {err}")
        if reports:
            click.echo(f"  {name}: {report_summary(reports)}")
        for line in fallback_lines(reports):
            click.echo(f"  {name}: {line}")


def _range_check(module, inputs_path: str, given: dict, target_name: str | None,
                 random_seed: int | None) -> int:
    """Print the fp16 range analysis on the calibration inputs; the number of overflows."""
    from anec.ranges import check_ranges, load_calibration
    from anec.ir.weight_binding import resolve_weights

    inputs = load_calibration(inputs_path)
    weights = given.get("weights")
    if weights is None:
        weights = resolve_weights(module, random_seed=random_seed)
    return _print_ranges(check_ranges(module, inputs, weights, target=target_name))


def _print_ranges(reports) -> int:
    """Print fp16 range reports (findings on stderr, a summary per func); the overflows."""
    overflows = 0
    for report in reports:
        for finding in report.findings:
            click.echo(finding.diagnostic().render(), err=True)
        click.echo(report.summary())
        overflows += len(report.errors)
    return overflows


# IR tools: ops, interp (reference interpreter)


@main.command("ops")
@click.option("--markdown", is_flag=True, help="Print a markdown page (docs/ops.md).")
def ops_cmd(markdown: bool) -> None:
    """List the IR ops: operands, attributes with defaults, dtypes, meaning."""
    from anec.ir.ops import format_table

    click.echo(format_table(markdown=markdown), nl=False)


def _parse_input_spec(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    specs: dict[str, str] = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"'{v}' is not NAME=PATH.npy", ctx=ctx, param=param)
        if name in specs:
            raise click.BadParameter(f"input '{name}' is given twice", ctx=ctx, param=param)
        specs[name] = path
    return specs


def _require_inputs(names, given: dict) -> None:
    """A usage error naming every input of ``names`` that ``given`` has no array for."""
    missing = [n for n in names if n not in given]
    if missing:
        raise click.UsageError(f"no value for input(s) {', '.join(missing)}: give --input NAME=PATH.npy "
                               "or --random-inputs SEED")


def _save_npz_atomic(path: str, arrays: dict) -> None:
    import numpy as np

    from anec.fsutil import replace_file

    replace_file(path, lambda f: np.savez(f, **arrays), suffix=".npz")


@main.command("interp")
@click.argument("file", type=click.Path(), metavar="FILE|DIR")
@click.option("--func", "func_name", metavar="NAME", help="Func to run (default: the only one).")
@click.option("--input", "inputs", multiple=True, metavar="NAME=PATH.npy", callback=_parse_input_spec,
              help="An input array (.npy); repeat per input.")
@click.option("--random-inputs", type=int, metavar="SEED", help="Random inputs for those not given.")
@click.option("--weights", "weights_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Weight file (.safetensors/.npz); overrides the file's weights directives.")
@click.option("--random-weights", type=int, metavar="SEED", help="Random tensors for weights no file provides.")
@click.option("--mode", type=click.Choice(["fp32", "fp16"]), default="fp32", show_default=True,
              help="fp32: mathematical reference; fp16: round every fp16 value as the device stores it "
                   "(the func as the device computes it: after cleanup and range-safe).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="OUT.npz", help="Save the outputs.")
def interp_cmd(file, func_name, inputs, random_inputs, weights_path, random_weights, mode, output) -> None:
    """Run a func of FILE with the numpy reference interpreter.

    DIR, an `anec import` directory, runs the imported model as torch does: --input
    arrays named as the module's inputs (token ids...), host steps applied, the outputs
    in torch's shapes.
    """
    import numpy as np

    imported = _imported_at(file)
    if imported is not None:
        if func_name or weights_path or random_weights is not None:
            raise click.UsageError("an imported model runs with its own func and weights: --func, --weights "
                                   "and --random-weights apply to FILE")
        with imported[0].runner(backend="interp", mode=mode) as run:
            _run_imported(run, inputs, random_inputs, output, f"interpreter ({mode}): {run.im.name}")
        return
    if os.path.isdir(file):
        raise AnecError(f"'{file}' is a directory without an imported model",
                        hint="give FILE.ir, or an anec import directory (it holds import.json)")

    from anec.ir.interp import interpret, load_input, random_inputs as make_random_inputs, select_func
    from anec.ir.parser import parse_file
    from anec.ir.verifier import verify
    from anec.ir.weight_binding import check_weights, resolve_weights

    module = parse_file(file)
    for warning in verify(module):
        click.echo(warning, err=True)
    graph = select_func(module, func_name)
    if graph.inputs and not inputs and random_inputs is None:
        raise click.UsageError("give --input NAME=PATH.npy per input, or --random-inputs SEED")
    feeds = make_random_inputs(graph, random_inputs) if random_inputs is not None else {}
    for name, path in inputs.items():
        if name not in {v.name for v in graph.inputs}:
            hint = _torch_input_hint(file, name, "interp")
            if hint:
                raise AnecError(f"func '{graph.name}' has no input '{name}'", hint=hint)
        feeds[name] = load_input(name, path)
    store = resolve_weights(module, weights=weights_path, random_seed=random_weights)
    check_weights(graph, store)
    if mode == "fp16":  # as the device computes it: after cleanup and range-safe
        from anec.passes.manager import device_form

        graph = device_form(graph)
    results = interpret(graph, feeds, store, mode=mode)
    for name, arr in results.items():
        t = graph.value(name).type
        line = f"{name}  {t}  ({arr.dtype})"
        if arr.size and arr.dtype.kind in "fiu":
            a = arr.astype(np.float64)
            finite = a[np.isfinite(a)]
            if finite.size:
                line += f"  min={finite.min():.6g}  max={finite.max():.6g}  mean={finite.mean():.6g}"
            if finite.size != a.size:
                line += f"  nonfinite={a.size - finite.size}"
        click.echo(line)
    if output:
        _save_npz_atomic(output, results)
        click.echo(f"wrote {output}")


# ---- compiler: compile, mil, passes, constraints ---------------------------

# compiler: compile (IR -> artifact directories), mil (print the MIL of one func)


def _weight_options(f):
    f = click.option("--random-weights", type=int, metavar="SEED",
                     help="Random tensors for every weight no file provides.")(f)
    f = click.option("--weights", "weights_path", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Weight file (.safetensors/.npz); overrides the file's weights directives.")(f)
    return f


def _print_compression(name: str, art) -> None:
    """One line per compiled func with compressed weights, plus one per weight that fell back."""
    from anec.compress import fallback_lines, report_summary

    reports = [r for a in [art, *getattr(art, "stages", [])] for r in a.manifest.get("compression", [])]
    if not reports:
        return
    click.echo(f"{name}: compressed {report_summary(reports)}")
    for line in fallback_lines(reports):
        click.echo(f"  {line}", err=True)


def _pipeline_from(passes: str | None, pipeline: str | None):
    if passes and pipeline:
        raise click.UsageError("give --passes or --pipeline, not both")
    return passes or pipeline


@main.command("compile")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Output directory (default: ./out/<file stem>); one subdirectory per func.")
@_weight_options
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
@_compress_option
@click.option("--compress-check", "compress_check", type=click.Path(dir_okay=False), metavar="INPUTS.npz",
              help="Run each compressed func and the same func uncompressed on the sim on these calibration "
                   "inputs (one array per func input, by name) and report per output the cosine and max "
                   "relative error; the compile fails below --compress-min-cosine.")
@click.option("--compress-min-cosine", "compress_min_cosine", type=click.FloatRange(-1.0, 1.0), default=0.999,
              show_default=True, metavar="COS", help="The least output cosine --compress-check accepts.")
@_concat_option
@_share_option
def compile_cmd(file, out_dir, weights_path, random_weights, target, passes, pipeline, print_after, timing,
                pack_weights, host_casts, dialect, weights_as_inputs, compress, compress_gate, compress_form,
                compress_check, compress_min_cosine, concat, share_programs) -> None:
    """Compile FILE into DIR/<func>/{model.mil, weights/*.bin, manifest.json}."""
    from pathlib import Path

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
                            share_programs=share_programs)
    for dump in result.printed_ir:
        click.echo(dump.rstrip("\n"), err=True)
    if not result.artifacts:
        click.echo("note: the pipeline has no emit-mil pass; nothing written, the IR follows", err=True)
        click.echo(print_module(result.module), nl=False)
    for name, art in result.artifacts.items():
        click.echo(summarize(name, art, result.paths.get(name)))
        _print_compression(name, art)
    if result.artifacts:  # the planner's count (made before anything was written)
        click.echo(result.budget_line())
    if result.compress_check:
        from anec.compress_check import check_lines

        for line in check_lines(result.compress_check):
            click.echo(line)
    if result.artifacts:
        from anec.frontends.torch_import import link_import

        linked = link_import(Path(file), out)
        if linked:
            click.echo(f"imported model: run it with the inputs torch takes: anec run {out} --input NAME=PATH.npy")
    if timing:
        click.echo(format_timings(result.timings), nl=False)


@main.command("mil")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--func", "func_name", metavar="NAME", help="Func to print (default: the only one).")
@_weight_options
@click.option("--target", default=DEFAULT_TARGET, show_default=True, metavar="NAME", help="Chip profile (m1..m5).")
@click.option("--pack-weights", is_flag=True, help="Refer to one packed weights/weight.bin.")
@click.option("--host-casts", is_flag=True, help="As for compile, on fp16-only targets.")
@click.option("--dialect", type=click.Choice(["ios18", "ios16"]), metavar="ios18|ios16",
              help="MIL dialect (default: the target's, ios18 on every chip); ios16 writes "
                   "program(1.0) with verbose scalars, the fallback for M1/M2.")
@_compress_option
@_concat_option
def mil_cmd(file, func_name, weights_path, random_weights, target, pack_weights, host_casts, dialect,
            compress, compress_gate, compress_form, concat) -> None:
    """Print the MIL text of one func of FILE after the default pipeline.

    MIL never depends on weight values, so no weights are needed; with
    --weights or --random-weights every weight const is also checked against
    the tensors (and with --compress each weight's format is the one its gate
    keeps; without weights, the first format of its rule)."""
    from anec.compiler import compile_module
    from anec.diagnostics import did_you_mean
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
    with_weights = weights_path is not None or random_weights is not None
    tgt = _concat_target(one, target, concat)
    result = compile_module(one, weights=weights_path, random_seed=random_weights, target=tgt,
                            pack_weights=pack_weights, host_casts=host_casts, with_weights=with_weights,
                            dialect=dialect, concat=concat, compress=compress, compress_gate=compress_gate,
                            compress_form=compress_form)
    click.echo(result.artifacts[func_name].mil_text, nl=False)


# compiler: passes (registry and pipelines), constraints (the ANE constraint catalog)


@main.command("passes")
@click.option("--markdown", is_flag=True, help="Print the full pass documentation (docs/passes.md).")
def passes_cmd(markdown: bool) -> None:
    """List the compiler passes and the named pipelines."""
    from anec.passes.listing import format_passes

    click.echo(format_passes(markdown=markdown), nl=False)


@main.command("constraints")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--markdown", is_flag=True, help="Print Markdown (docs/constraints.md).")
@click.option("--target", metavar="NAME", help="Show the limits and switches of one chip profile.")
def constraints_cmd(ids: tuple[str, ...], markdown: bool, target: str | None) -> None:
    """Print the ANE constraint catalog (all entries, or the given ids)."""
    from anec.constraints import format_catalog, format_markdown, get_constraint
    from anec.targets import get_target

    chip = get_target(target) if target else None
    entries = [get_constraint(i) for i in ids] or None
    text = format_markdown(chip, entries) if markdown else format_catalog(chip, entries)
    click.echo(text, nl=False)

# ---- runtime: run, doctor ----------------------------------------------------


def _rt_summary(arr) -> str:
    import numpy as np

    a = np.asarray(arr, dtype=np.float64)
    finite = a[np.isfinite(a)]
    s = f"{list(arr.shape)} {arr.dtype}"
    if finite.size:
        s += f"  min={finite.min():.6g}  max={finite.max():.6g}  mean={finite.mean():.6g}"
    if finite.size != a.size:
        s += f"  nonfinite={a.size - finite.size}"
    return s


@main.command("run")
@click.argument("target_path", metavar="DIR|FILE.ir", type=click.Path(exists=True))
@click.option("--func", "func_name", metavar="NAME", help="Func to run (default: the only one).")
@click.option("--input", "inputs", multiple=True, metavar="NAME=PATH.npy", callback=_parse_input_spec,
              help="An input array (.npy); repeat per input.")
@click.option("--random-inputs", type=int, metavar="SEED", help="Random inputs (normal(0, 1)) for those not given.")
@click.option("--weights", "weights_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Weight file for a FILE.ir (.safetensors/.npz).")
@click.option("--random-weights", type=int, metavar="SEED", help="Random tensors for weights no file provides (FILE.ir).")
@click.option("--target", default=DEFAULT_TARGET, show_default=True, metavar="NAME", help="Chip profile when compiling FILE.ir.")
@click.option("--backend", type=click.Choice(["auto", "sim", "ane"]), default="auto", show_default=True,
              help="sim: the strict ANE simulator; ane: the Neural Engine (macOS); auto: ane if available.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="OUT.npz", help="Save the outputs.")
@click.option("--compare-interp", is_flag=True,
              help="Also run the reference interpreter (fp32 and fp16 modes) and print the errors per output.")
@click.option("--ir", "ir_path", type=click.Path(dir_okay=False, exists=True), metavar="FILE.ir",
              help="With DIR and --compare-interp: compare with this IR (and its weights options) "
                   "instead of the artifact's own program.ir.")
def run_cmd(target_path, func_name, inputs, random_inputs, weights_path, random_weights, target, backend, output,
            compare_interp, ir_path) -> None:
    """Run a compiled artifact DIR (or compile FILE.ir first) on a backend.

    An imported model (an `anec import` directory, or `anec compile`'s output
    of its model.ir) runs as torch does: --input arrays named as the module's
    inputs (token ids...), the recorded host steps applied, the outputs in
    torch's shapes.

    Prints each output's shape and statistics, the backend and the runtime
    counters. With --compare-interp the same inputs go through the numpy
    reference interpreter and the max abs/rel error of every output is shown.
    """
    import os
    import tempfile

    import numpy as np

    from anec.runtime import Runtime

    imported = _imported_at(target_path)
    if imported is not None:
        if weights_path or random_weights is not None or compare_interp or ir_path:
            raise click.UsageError("an imported model runs with its own weights: --weights, --random-weights, "
                                   "--compare-interp and --ir apply to FILE.ir and plain artifacts")
        im, artifact = imported
        with im.runner(backend=backend, target=target, artifact=artifact) as run:
            rt = run._runtime
            _run_imported(run, inputs, random_inputs, output,
                          f"backend: {rt.backend}  program: {im.name}" + ("" if artifact else " (compiled now)"))
        return
    is_ir = os.path.isfile(target_path) and target_path.endswith(".ir")
    module = store = None
    if is_ir or (compare_interp and ir_path):
        from anec.ir.parser import parse_file
        from anec.ir.weight_binding import resolve_weights

        module = parse_file(target_path if is_ir else ir_path)
        store = resolve_weights(module, weights=weights_path, random_seed=random_weights)
    elif weights_path or random_weights is not None:
        raise click.UsageError("--weights/--random-weights apply to FILE.ir; an artifact directory has its weights")

    with tempfile.TemporaryDirectory(prefix="anec-run-") as tmp, Runtime(backend) as rt:
        if is_ir:
            from anec.compiler import compile_module
            from anec.ir.interp import select_func

            func_name = select_func(module, func_name).name
            out = os.path.join(tmp, "out")  # the output and its lock live in the temp dir
            compile_module(module, weights=store, target=target, out_dir=out)
            prog = rt.load(out, func=func_name)
        else:
            prog = rt.load(target_path, func=func_name)
        names = prog.input_names
        feeds: dict[str, np.ndarray] = {}
        if random_inputs is not None:
            rng = np.random.default_rng(random_inputs)
            for spec in sorted(prog.inputs, key=lambda i: i["decl_index"]):
                if spec["name"] in names:  # weights compiled as inputs come from the artifact
                    feeds[spec["name"]] = rng.standard_normal(spec["logical_shape"]).astype(np.float32)
        for name, path in inputs.items():
            if name not in names:
                from anec.diagnostics import did_you_mean

                raise AnecError(f"program '{prog.name}' has no input '{name}'",
                                hint=_torch_input_hint(target_path, name)
                                or did_you_mean(name, names) or f"inputs: {', '.join(names)}")
            from anec.ir.interp import load_input

            feeds[name] = load_input(name, path)
        _require_inputs(names, feeds)
        results = prog(**feeds)
        click.echo(f"backend: {rt.backend}  program: {prog.name}")
        for name, arr in results.items():
            click.echo(f"{name}  {_rt_summary(arr)}")
        st = rt.stats
        click.echo(f"compiles={st['compiles']} (budget left {st['compile_budget_left']})  "
                   f"compile={st['ns_compile'] / 1e6:.1f} ms  load={st['ns_load'] / 1e6:.1f} ms  "
                   f"evaluate={st['ns_evaluate'] / 1e6:.1f} ms")
        if compare_interp:
            from anec.ir.interp import interpret, select_func

            logical: list[dict] = []
            if module is None:  # an artifact dir: its program.ir is the program the MIL encodes
                from anec.mil.artifact import artifact_weight_inputs, artifact_weights
                from anec.mil.pipeline import PipelineArtifact, load_any

                art = load_any(target_path, prog.name)
                module = art.program_module()
                if isinstance(art, PipelineArtifact):  # program.ir is the func before it was cut
                    store, extra = art.interp_weights(), art.weight_inputs()
                else:
                    store, extra = artifact_weights(art), artifact_weight_inputs(art)
                feeds = {**feeds, **extra}
                logical = [lo for lo in art.manifest.get("logical_outputs", []) if lo.get("axis") is not None]
            graph = select_func(module, prog.name)
            # program.ir has the device's rank-4 I/O shapes: same elements, so reshape freely
            ir_feeds = dict(feeds)
            for v in graph.inputs:
                if v.name in feeds and np.size(feeds[v.name]) == v.type.numel:
                    ir_feeds[v.name] = np.reshape(feeds[v.name], v.type.shape)
            click.echo("compare with the reference interpreter (rel = max|sim - ref| / max|ref|):")
            from anec.passes.manager import device_form

            for mode in ("fp32", "fp16"):
                ref = interpret(device_form(graph) if mode == "fp16" else graph, ir_feeds, store, mode=mode)
                for lo in logical:  # chunked outputs: reassemble the pieces like the runtime does
                    pieces = [ref.pop(p) for p in lo["pieces"]]
                    ref[lo["name"]] = np.concatenate(pieces, axis=lo["axis"])
                for name, r in ref.items():
                    got = results[name].astype(np.float64)
                    rr = np.asarray(r, dtype=np.float64)
                    if rr.size == got.size:
                        rr = rr.reshape(got.shape)
                    err = float(np.max(np.abs(got - rr))) if rr.size else 0.0
                    scale = float(np.max(np.abs(rr))) if rr.size else 0.0
                    rel = err / scale if scale else err
                    click.echo(f"  {mode}  {name}  max_abs={err:.3g}  max_rel={rel:.3g}")
        if output:
            _save_npz_atomic(output, results)
            click.echo(f"wrote {output}")


def _imported_at(path: str):
    """``(ImportedModel, artifact dir or None)`` when PATH is an imported model: an ``anec
    import`` directory, or ``anec compile``'s output of one (or its func directory); else None."""
    from pathlib import Path

    from anec.frontends.torch_import import META_FILE, ImportedModel, linked_import

    d = Path(path)
    if not d.is_dir():
        return None
    if (d / META_FILE).is_file():
        return ImportedModel.load(d), None
    for out in (d, d.parent):
        src = linked_import(out)
        if src is not None:
            im = ImportedModel.load(src)
            return im, str(d if out == d.parent else d / im.name)
    return None


def _torch_input_hint(path: str, name: str, command: str = "run") -> str | None:
    """For an input name of the torch module given to the model.ir of an import: the hint
    to run the import directory instead."""
    import json
    from pathlib import Path

    from anec.frontends.torch_import import META_FILE

    d = Path(path).parent
    try:
        names = json.loads((d / META_FILE).read_text("utf-8")).get("input_names", [])
    except (OSError, ValueError, AttributeError):
        return None
    if name not in names:
        return None
    return (f"'{name}' is an input of the imported torch module: give the import directory to take "
            f"the module's inputs (host steps applied): anec {command} {d} --input {name}=...")


def _run_imported(run, inputs: dict, random_inputs, output, header: str) -> None:
    """Run an imported model (host steps, program, host steps: :class:`TorchRunner`) on
    --input arrays named as the torch module's inputs; print torch's output shapes."""
    import numpy as np

    from anec.ir.interp import load_input

    names = run.im.input_names
    arrays = run.random_inputs(random_inputs) if random_inputs is not None else {}
    for name, path in inputs.items():
        if name not in names:
            from anec.diagnostics import did_you_mean

            raise AnecError(f"the imported model has no input '{name}'",
                            hint=did_you_mean(name, names) or f"its inputs (as torch takes them): {', '.join(names)}")
        arrays[name] = load_input(name, path)
    _require_inputs(names, arrays)
    results = run.run(**arrays)
    click.echo(header)
    for name, arr in results.items():
        arr = np.asarray(arr)
        click.echo(f"{name}  {_rt_summary(arr) if arr.dtype.kind in 'fiub' else repr(arr)}")
    if output:
        _save_npz_atomic(output, {k: np.asarray(v) for k, v in results.items()})
        click.echo(f"wrote {output}")


@main.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor_cmd(as_json: bool) -> None:
    """Report the platform, drivers (and why one is unavailable), the runtime
    build, the default target's limits and the compile budget. Paste it into
    an issue."""
    import json

    from anec.doctor import collect, render

    info = collect()
    click.echo(json.dumps(info, indent=2) if as_json else render(info), nl=as_json)

# ---- models: models export, generate, embed --------------------------------

_MODEL_BACKENDS = ("auto", "sim", "ane", "interp")


def _int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    """``"1,2,3"`` -> ``[1, 2, 3]`` (a usage error otherwise)."""
    if value is None:
        return None
    try:
        out = [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a comma-separated list of integers") from None
    if not out:
        raise click.BadParameter("the list is empty")
    return out


def _progress(quiet: bool):
    from anec.models.progress import Progress

    return Progress(enabled=None if not quiet else False)


# ---- other frameworks: anec import (PyTorch), anec export-coreml (Core ML) ----------


@main.command("import")
@click.argument("file", required=False, type=click.Path(dir_okay=False), metavar="FILE.pt2")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Write DIR/model.ir, DIR/weights.safetensors and DIR/import.json  [required, "
                   "except with --ops]")
@click.option("--name", default="main", show_default=True, help="Name of the func.")
@click.option("--target", default=DEFAULT_TARGET, show_default=True, metavar="NAME",
              help="Chip profile (its conv channel limit picks conv1x1 or matmul for wide layers).")
@click.option("--ops", "list_ops", is_flag=True, help="List the supported ATen ops and the IR each becomes.")
@click.option("--markdown", is_flag=True, help="With --ops: as a markdown table (docs/torch.md).")
def import_cmd(file, out_dir, name, target, list_ops, markdown) -> None:
    """Import a saved torch.export program (FILE.pt2) as anec IR in DIR.

    The program is decomposed to core ATen and lowered to one func in the
    ANE layout; `anec compile DIR/model.ir` then compiles it with no further
    options. Embedding lookups at the inputs and argmax/sampling at the
    outputs are host work, listed in the summary and in DIR/import.json.
    Needs PyTorch: pip install 'anec[torch]'.
    """
    if list_ops:
        from anec.frontends.lowerings import format_table

        click.echo(format_table(markdown), nl=False)
        return
    if file is None or out_dir is None:
        raise click.UsageError("give FILE.pt2 and -o DIR (or --ops to list the supported ATen ops)")
    from anec.frontends.torch_import import import_torch, load_pt2

    im = import_torch(load_pt2(file), name=name, target=target)
    path = im.save(out_dir)
    click.echo(im.summary(), nl=False)
    click.echo(f"wrote {path}/model.ir, {path}/weights.safetensors ({len(im.weights)} tensors), "
               f"{path}/import.json")
    click.echo(f"compile with: anec compile {path}/model.ir -o build/")


@main.command("export-coreml")
@click.argument("artifact_dir", type=click.Path(exists=True, file_okay=False), metavar="DIR")
@click.option("-o", "--output", required=True, type=click.Path(), metavar="MODEL.mlpackage",
              help="The Core ML package to write (replaced atomically).")
@click.option("--func", "func_name", metavar="NAME", help="Program to export when DIR holds several.")
def export_coreml_cmd(artifact_dir, output, func_name) -> None:
    """Wrap a compiled artifact DIR as a Core ML ML Program package, op for op.

    The package holds the ops and weights of DIR's model.mil (of a pipeline:
    every stage's, in one function, values named sNN_<name>), as coremltools
    writes them (it fuses mul(x, sigmoid(x)) into silu), and takes and returns
    the model's logical shapes (reshaped inside). It is read back with
    coremltools and checked against the artifact by meaning (ops, weights,
    I/O names and shapes, a pipeline's wiring) before it replaces OUTPUT.
    Needs coremltools: pip install 'anec[coreml]'.
    """
    from anec.frontends.coreml import export_coreml

    rep = export_coreml(artifact_dir, output, func=func_name)
    click.echo(f"wrote {rep.path}: {rep.ops} ops, {rep.consts} consts ({rep.weights} weights)")
    for c in rep.checks:
        click.echo(f"  verified: {c}")


@main.group("models")
def models_group() -> None:
    """Hugging Face checkpoints (GPT-2, Llama, BERT) as anec programs. See docs/models.md."""


@models_group.command("export")
@click.argument("kind", type=click.Choice(["gpt2", "llama", "bert"]))
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--prefill", callback=_int_list, metavar="S[,S...]",
              help="Sequence buckets of the prefill (BERT: encoder) programs.")
@click.option("--cache", callback=_int_list, metavar="T[,T...]",
              help="KV-cache buckets of the decode programs (decoders only).")
@click.option("--lora", "lora_targets", metavar="NAME[,NAME...]",
              help="Give these projections LoRA adapter inputs (e.g. q_proj,v_proj).")
@click.option("--lora-rank", type=int, default=8, show_default=True, help="Rank of the LoRA inputs.")
@click.option("--target", metavar="NAME", help="Chip profile that sets the bucket sizes (default m4).")
def models_export_cmd(kind, checkpoint, output, prefill, cache, lora_targets, lora_rank, target) -> None:
    """Write CHECKPOINT's programs to OUTPUT/*.ir, OUTPUT/weights.safetensors and OUTPUT/model.json."""
    from anec.models.export import export_checkpoint

    targets = [t for t in (lora_targets or "").split(",") if t]
    info = export_checkpoint(kind, checkpoint, output, prefill, cache, target, targets, lora_rank)
    n = sum(len(v) for v in info["files"].values())
    click.echo(f"wrote {n} funcs in {len(info['files'])} files to {output}")
    for name, funcs in info["files"].items():
        click.echo(f"  {name}: {', '.join(funcs)}")
    click.echo(f"compile them with: anec models compile {output} -o build/")


@models_group.command("compile")
@click.argument("export_dir", type=click.Path(file_okay=False), metavar="DIR")
@click.option("-o", "--output", type=click.Path(file_okay=False), metavar="OUT",
              help="Write OUT/<func>/ for every func (default: check and plan only).")
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@_compress_option
@_share_option
def models_compile_cmd(export_dir, output, target, compress, compress_gate, compress_form, share_programs) -> None:
    """Compile every func of an exported model DIR (written by `anec models export`).

    Each func (one per bucket) becomes one artifact; the compiler cuts a func
    that breaks a per-program budget into a pipeline of ANE programs. Prints
    the programs the funcs need together against the process compile budget,
    then one line per func: programs, weights, peak SRAM."""
    from anec.compiler import budget_line, summarize
    from anec.models.export import compile_export

    plan: dict = {}
    done = compile_export(export_dir, output, target, compress=compress, compress_gate=compress_gate,
                          share_programs=share_programs, plan=plan, compress_form=compress_form)
    click.echo(budget_line(plan["programs"], plan["budget"], plan["shared"]))
    for name, art, path in done:
        click.echo(summarize(name, art, path))
        _print_compression(name, art)


@main.command("generate")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("--prompt", help="Prompt text (needs the checkpoint's tokenizer and the tokenizers package).")
@click.option("--prompt-ids", callback=_int_list, metavar="ID[,ID...]", help="Prompt as token ids.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="0 = greedy.")
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True, help="0 = no top-k filter.")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@click.option("--adapter", type=click.Path(file_okay=False), help="PEFT LoRA adapter directory.")
@click.option("--lora-rank", type=int, help="LoRA input rank (default: the adapter's).")
@click.option("--backend", type=click.Choice(_MODEL_BACKENDS), default="auto", show_default=True)
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or timing summary.")
@click.option("--check-ranges", is_flag=True,
              help="Instead of generating, report every node of the prefill program whose values leave "
                   "fp16 on this prompt [ANE-FP16-RANGE] (exit 1 on an overflow).")
@click.pass_context
def generate_cmd(ctx, checkpoint, prompt, prompt_ids, max_new_tokens, temperature, top_k, seed, adapter,
                 lora_rank, backend, target, quiet, check_ranges) -> None:
    """Generate text with a GPT-2 or Llama checkpoint running as ANE programs."""
    import time

    from anec.models.common import ModelError
    from anec.models.generate import LoraSpec, load_causal_lm
    from anec.models.hf import load_tokenizer
    from anec.models.lora import LoraAdapter

    if (prompt is None) == (prompt_ids is None):
        raise ModelError("give exactly one of --prompt and --prompt-ids")
    lora = ad = None
    if adapter is not None:
        ad = LoraAdapter.load(adapter)
        lora = LoraSpec(tuple(sorted(ad.targets)), lora_rank or ad.rank)
    lm = load_causal_lm(checkpoint, backend=backend, target=target, progress=_progress(quiet), lora=lora)
    try:
        tok = None
        if prompt is not None:
            tok = load_tokenizer(checkpoint)
            prompt_ids = tok.encode(prompt)
        if ad is not None:
            lm.set_adapter(ad)
        if check_ranges:
            if _print_ranges(lm.check_ranges(prompt_ids)):
                ctx.exit(1)
            return
        eos = None
        if tok is not None:
            eos = lm.fe.ckpt.config.get("eos_token_id")
            eos = eos if isinstance(eos, int) and 0 <= eos < lm.cfg.vocab else None
        t0 = time.perf_counter()
        out = lm.generate(prompt_ids, max_new_tokens, temperature, top_k, seed, eos_id=eos)
        dt = time.perf_counter() - t0
        if tok is not None:
            click.echo(prompt + tok.decode(out))
        else:
            click.echo(",".join(str(t) for t in out))
        if not quiet:
            st = lm.stats()
            compiles = f" ({st['compiles']} compiled)" if "compiles" in st else ""
            click.echo(f"{len(out)} tokens in {dt:.2f} s ({st['funcs']} funcs, {st['programs']} programs{compiles}, "
                       f"compile {st['compile_seconds']:.2f} s)", err=True)
    finally:
        lm.close()


@main.command("embed")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.argument("sentences", nargs=-1, required=True)
@click.option("--vectors", is_flag=True, help="Print the embeddings (JSON lines) instead of similarities.")
@click.option("--backend", type=click.Choice(_MODEL_BACKENDS), default="auto", show_default=True)
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@_compress_option
def embed_cmd(checkpoint, sentences, vectors, backend, target, quiet, compress, compress_gate,
              compress_form) -> None:
    """Sentence embeddings with a BERT checkpoint (e.g. all-MiniLM-L6-v2) running as ANE programs.

    With two or more sentences, prints their cosine similarity matrix."""
    import json as _json

    from anec.models.bert import cosine_matrix, load_sentence_encoder

    if compress is not None and backend == "interp":
        raise click.UsageError("--compress needs a compiled backend (sim or ane): the interpreter "
                               "reads the checkpoint's weights as they are")
    enc = load_sentence_encoder(checkpoint, backend=backend, target=target, progress=_progress(quiet),
                                compress=compress, compress_gate=compress_gate, compress_form=compress_form)
    try:
        emb = enc.encode(list(sentences))
        if compress is not None and not quiet:
            from anec.compress import report_summary

            click.echo(f"compressed {report_summary(enc.programs.compression)}", err=True)
    finally:
        enc.close()
    if vectors or len(sentences) == 1:
        for s, e in zip(sentences, emb):
            click.echo(_json.dumps({"sentence": s, "embedding": [round(float(v), 6) for v in e]}))
        return
    sim = cosine_matrix(emb)
    for i, s in enumerate(sentences):
        row = " ".join(f"{sim[i, j]:6.3f}" for j in range(len(sentences)))
        click.echo(f"{row}  {s}")


@main.command("train")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("--data", required=True, type=click.Path(dir_okay=False),
              help="UTF-8 text (tokenized with the checkpoint's tokenizer) or a .npy of token ids.")
@click.option("--steps", type=click.IntRange(min=1), required=True, help="Total optimizer steps of the run.")
@click.option("-o", "--output", "run_dir", required=True, type=click.Path(file_okay=False),
              help="Run directory: state/, log.jsonl, loss.png, model/.")
@click.option("--resume", is_flag=True, help="Continue the run in OUTPUT from its last saved state.")
@click.option("--seq-len", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--lr", type=click.FloatRange(min=0.0), default=3e-4, show_default=True)
@click.option("--weight-decay", type=click.FloatRange(min=0.0), default=0.0, show_default=True)
@click.option("--grad-clip", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Global gradient norm limit (0 = none).")
@click.option("--lora-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="Train LoRA adapters of this rank instead of the weights (saved in PEFT format).")
@click.option("--seed", type=click.IntRange(min=0, max=2 ** 63 - 1), default=0, show_default=True,
              help="Batch sampling seed.")
@click.option("--save-every", type=click.IntRange(min=1), default=50, show_default=True,
              help="Steps between saved states (and loss.png redraws).")
@click.option("--backend", type=click.Choice(_MODEL_BACKENDS), default="auto", show_default=True)
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def train_cmd(checkpoint, data, steps, run_dir, resume, seq_len, batch_size, lr, weight_decay, grad_clip,
              lora_rank, seed, save_every, backend, target, quiet) -> None:
    """Train a GPT-2 or Llama-family CHECKPOINT on the ANE (forward and backward programs,
    weights updated in place every step; docs/training.md)."""
    from anec.training.run import RunConfig, train_run

    cfg = RunConfig(checkpoint=checkpoint, data=data, steps=steps, seq_len=seq_len, batch_size=batch_size,
                    lr=lr, weight_decay=weight_decay, grad_clip=grad_clip, lora_rank=lora_rank, seed=seed,
                    save_every=save_every, backend=backend, target=target)
    bar = _progress(quiet)

    def on_step(row) -> None:
        if bar is not None:
            bar.step(f"loss {row['loss']:.4f} {row['tokens_per_s']:.0f} tok/s"
                     + (" (skipped)" if row["skipped"] else ""))

    if bar is not None:
        bar.start("train", steps)
    res = train_run(cfg, run_dir, resume=resume, on_step=on_step,
                    on_note=lambda text: click.echo(f"note: {text}", err=True))
    if bar is not None:
        bar.finish()
    click.echo(f"{res['steps']} steps, final loss {res['final_loss']:.4f} ({res['skipped']} skipped), "
               f"{res['seconds']:.1f} s -> {res['model']}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
