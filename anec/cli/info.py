"""The ``anec`` commands that describe anec and this machine.

``ops``, ``passes`` and ``constraints`` print the op table, the passes and pipelines and
the ANE constraint catalog (``--markdown``: the generated pages under docs/); ``doctor``
reports the platform, drivers and runtime build.
"""

from __future__ import annotations

import click

from anec.targets import get_target


@click.command("ops")
@click.option("--markdown", is_flag=True, help="Print a markdown page (docs/ops.md).")
def ops_cmd(markdown: bool) -> None:
    """List the IR ops: operands, attributes with defaults, dtypes, meaning."""
    from anec.ir.ops import format_table

    click.echo(format_table(markdown=markdown), nl=False)


@click.command("passes")
@click.option("--markdown", is_flag=True, help="Print the full pass documentation (docs/passes.md).")
def passes_cmd(markdown: bool) -> None:
    """List the compiler passes and the named pipelines."""
    from anec.passes.listing import format_passes

    click.echo(format_passes(markdown=markdown), nl=False)


@click.command("constraints")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--markdown", is_flag=True, help="Print Markdown (docs/constraints.md).")
@click.option("--target", metavar="NAME", help="Show the limits and switches of one chip profile.")
def constraints_cmd(ids: tuple[str, ...], markdown: bool, target: str | None) -> None:
    """Print the ANE constraint catalog (all entries, or the given ids)."""
    from anec.constraints import format_catalog, format_markdown, get_constraint

    chip = get_target(target) if target else None
    entries = [get_constraint(i) for i in ids] or None
    text = format_markdown(chip, entries) if markdown else format_catalog(chip, entries)
    click.echo(text, nl=False)


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor_cmd(as_json: bool) -> None:
    """Report the platform, drivers (and why one is unavailable), the runtime
    build, the default target's limits and the compile budget. Paste it into
    an issue."""
    import json

    from anec.doctor import collect, render

    info = collect()
    click.echo(json.dumps(info, indent=2) if as_json else render(info), nl=as_json)
