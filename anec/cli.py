"""The ``anec`` command line.

Exit codes: 0 success, 1 user error (an :class:`~anec.diagnostics.AnecError`,
rendered as ``file:line:col: error: ...`` on stderr), 2 usage error.
"""

from __future__ import annotations

import sys

import click

from anec import __version__
from anec.diagnostics import AnecError


class _Group(click.Group):
    """A click group that renders AnecError instead of a traceback."""

    def invoke(self, ctx: click.Context):  # noqa: D102
        try:
            return super().invoke(ctx)
        except AnecError as e:
            click.echo(e.render(), err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="anec")
def main() -> None:
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


def _write_text_atomic(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` via a temp file in the same directory and a rename."""
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".anec-", suffix=".ir", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
            _write_text_atomic(file, out)
        return
    click.echo(out, nl=False)


def _legality_report():
    """``anec.passes.report.legality_report`` when the passes provide it, else None."""
    import importlib

    try:
        report = importlib.import_module("anec.passes.report")
    except ModuleNotFoundError as e:
        if e.name in ("anec.passes", "anec.passes.report"):
            return None
        raise
    return getattr(report, "legality_report", None)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@main.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--target", metavar="NAME", help="Chip profile for the ANE legality report (default m4).")
@click.pass_context
def check_cmd(ctx: click.Context, file: str, target: str | None) -> None:
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
    legality_report = _legality_report()
    if legality_report is not None:
        click.echo(legality_report(module, target_name or "m4").rstrip("\n"))

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


def _save_npz_atomic(path: str, arrays: dict) -> None:
    import os
    import tempfile

    import numpy as np

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".anec-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@main.command("interp")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--func", "func_name", metavar="NAME", help="Func to run (default: the only one).")
@click.option("--input", "inputs", multiple=True, metavar="NAME=PATH.npy", callback=_parse_input_spec,
              help="An input array (.npy); repeat per input.")
@click.option("--random-inputs", type=int, metavar="SEED", help="Random inputs for those not given.")
@click.option("--weights", "weights_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Weight file (.safetensors/.npz); overrides the file's weights directives.")
@click.option("--random-weights", type=int, metavar="SEED", help="Random tensors for weights no file provides.")
@click.option("--mode", type=click.Choice(["fp32", "fp16"]), default="fp32", show_default=True,
              help="fp32: mathematical reference; fp16: round every fp16 value as the device stores it.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="OUT.npz", help="Save the outputs.")
def interp_cmd(file, func_name, inputs, random_inputs, weights_path, random_weights, mode, output) -> None:
    """Run a func of FILE with the numpy reference interpreter."""
    import numpy as np

    from anec.ir.interp import interpret, random_inputs as make_random_inputs, select_func
    from anec.ir.parser import parse_file
    from anec.ir.verifier import verify
    from anec.weights import check_weights, resolve_weights

    module = parse_file(file)
    for warning in verify(module):
        click.echo(warning, err=True)
    graph = select_func(module, func_name)
    if graph.inputs and not inputs and random_inputs is None:
        raise click.UsageError("give --input NAME=PATH.npy per input, or --random-inputs SEED")
    feeds = make_random_inputs(graph, random_inputs) if random_inputs is not None else {}
    for name, path in inputs.items():
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise AnecError(f"cannot read input '{name}' from '{path}': {e}") from None
    store = resolve_weights(module, weights=weights_path, random_seed=random_weights)
    check_weights(graph, store)
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

# ---- models: models export, generate, embed --------------------------------


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
