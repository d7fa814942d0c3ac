"""The ``anec`` commands that exchange models with other frameworks: ``import`` (a saved
torch.export program as anec IR) and ``export-coreml`` (a compiled artifact as a Core ML package).
"""

from __future__ import annotations

import click

from anec.targets import DEFAULT_TARGET


@click.command("import")
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
    from anec.frontends.torch.export import load_pt2
    from anec.frontends.torch.fx_import import import_torch

    im = import_torch(load_pt2(file), name=name, target=target)
    path = im.save(out_dir)
    click.echo(im.summary(), nl=False)
    click.echo(f"wrote {path}/model.ir, {path}/weights.safetensors ({len(im.weights)} tensors), "
               f"{path}/import.json")
    click.echo(f"compile with: anec compile {path}/model.ir -o build/")


@click.command("export-coreml")
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
