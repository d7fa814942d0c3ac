"""What several ``anec`` commands print the same way: fp16 range findings, compression
summaries, and the progress bar of the model commands."""

from __future__ import annotations

import click


def print_ranges(reports) -> int:
    """Print fp16 range reports (findings on stderr, a summary per func); the overflows."""
    overflows = 0
    for report in reports:
        for finding in report.findings:
            click.echo(finding.diagnostic().render(), err=True)
        click.echo(report.summary())
        overflows += len(report.errors)
    return overflows


def print_compression(name: str, art) -> None:
    """One line per compiled func with compressed weights, plus one per weight that fell back;
    the same for int8 activations (one line per activation kept fp16)."""
    from anec.compress import fallback_lines, report_summary

    reports = [r for a in getattr(art, "stages", [art]) for r in a.manifest.compression]
    if reports:
        click.echo(f"{name}: compressed {report_summary(reports)}")
        for line in fallback_lines(reports):
            click.echo(f"  {line}", err=True)
    acts = art.manifest.activations
    if acts is not None:
        from anec.compress.activations import activation_lines, activation_summary

        click.echo(f"{name}: {activation_summary(acts)}")
        for line in activation_lines(acts):
            click.echo(f"  {line}", err=True)


def progress_bar(quiet: bool):
    """The progress bar of a model command (off with -q, else on when stderr is a terminal)."""
    from anec.models.progress import Progress

    return Progress(enabled=None if not quiet else False)
