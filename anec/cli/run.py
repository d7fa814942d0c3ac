"""The ``anec`` commands that run programs: ``interp`` (the reference interpreter) and ``run``.

Both read ``--input NAME=PATH.npy`` arrays (or random inputs), print one line of
statistics per output and save the outputs with ``-o``. Given an ``anec import``
directory (or ``anec compile``'s output of its model.ir) they run the imported model
as torch does: inputs named as the torch module's, host steps applied.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from anec.diagnostics import AnecError, did_you_mean
from anec.targets import DEFAULT_TARGET


def _parse_input_spec(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """``--input NAME=PATH.npy`` (repeated) as ``{NAME: PATH}``; a usage error for a malformed
    or repeated one."""
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


def _array_summary(arr) -> str:
    """``[1, 64] float32  min=..  max=..  mean=..`` (and the count of non-finite values)."""
    import numpy as np

    a = np.asarray(arr, dtype=np.float64)
    finite = a[np.isfinite(a)]
    s = f"{list(arr.shape)} {arr.dtype}"
    if finite.size:
        s += f"  min={finite.min():.6g}  max={finite.max():.6g}  mean={finite.mean():.6g}"
    if finite.size != a.size:
        s += f"  nonfinite={a.size - finite.size}"
    return s


def _save_npz_atomic(path: str, arrays: dict) -> None:
    """Write ``arrays`` to PATH as .npz, replacing it atomically."""
    import numpy as np

    from anec.fsutil import replace_file

    replace_file(path, lambda f: np.savez(f, **arrays), suffix=".npz")


@click.command("interp")
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


@click.command("run")
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
    import tempfile

    import numpy as np

    from anec.ir.interp import interpret, load_input, select_func
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
                raise AnecError(f"program '{prog.name}' has no input '{name}'",
                                hint=_torch_input_hint(target_path, name)
                                or did_you_mean(name, names) or f"inputs: {', '.join(names)}")
            feeds[name] = load_input(name, path)
        _require_inputs(names, feeds)
        results = prog(**feeds)
        click.echo(f"backend: {rt.backend}  program: {prog.name}")
        for name, arr in results.items():
            click.echo(f"{name}  {_array_summary(arr)}")
        st = rt.stats
        click.echo(f"compiles={st['compiles']} (budget left {st['compile_budget_left']})  "
                   f"compile={st['ns_compile'] / 1e6:.1f} ms  load={st['ns_load'] / 1e6:.1f} ms  "
                   f"evaluate={st['ns_evaluate'] / 1e6:.1f} ms")
        if compare_interp:
            from anec.passes.manager import device_form

            logical: list[dict] = []
            if module is None:  # an artifact dir: its program.ir is the program the MIL encodes
                from anec.mil.artifact import artifact_weight_inputs, artifact_weights
                from anec.mil.multi_program import PipelineArtifact, load_any

                art = load_any(target_path, prog.name)
                module = art.program_module()
                if isinstance(art, PipelineArtifact):  # program.ir is the func before it was cut
                    store, extra = art.interp_weights(), art.weight_inputs()
                else:
                    store, extra = artifact_weights(art), artifact_weight_inputs(art)
                feeds = {**feeds, **extra}
                logical = [lo for lo in art.manifest.logical_outputs if lo.axis is not None]
            graph = select_func(module, prog.name)
            # program.ir has the device's rank-4 I/O shapes: same elements, so reshape freely
            ir_feeds = dict(feeds)
            for v in graph.inputs:
                if v.name in feeds and np.size(feeds[v.name]) == v.type.numel:
                    ir_feeds[v.name] = np.reshape(feeds[v.name], v.type.shape)
            click.echo("compare with the reference interpreter (rel = max|sim - ref| / max|ref|):")
            for mode in ("fp32", "fp16"):
                ref = interpret(device_form(graph) if mode == "fp16" else graph, ir_feeds, store, mode=mode)
                for lo in logical:  # chunked outputs: reassemble the pieces like the runtime does
                    pieces = [ref.pop(p) for p in lo.pieces]
                    ref[lo.name] = np.concatenate(pieces, axis=lo.axis)
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
    from anec.frontends.torch.imported import META_FILE, ImportedModel, linked_import

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

    from anec.frontends.torch.imported import META_FILE

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
            raise AnecError(f"the imported model has no input '{name}'",
                            hint=did_you_mean(name, names) or f"its inputs (as torch takes them): {', '.join(names)}")
        arrays[name] = load_input(name, path)
    _require_inputs(names, arrays)
    results = run.run(**arrays)
    click.echo(header)
    for name, arr in results.items():
        arr = np.asarray(arr)
        click.echo(f"{name}  {_array_summary(arr) if arr.dtype.kind in 'fiub' else repr(arr)}")
    if output:
        _save_npz_atomic(output, {k: np.asarray(v) for k, v in results.items()})
        click.echo(f"wrote {output}")
