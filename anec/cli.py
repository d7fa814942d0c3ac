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

# ---- compiler: compile, mil, passes, constraints ---------------------------

# ---- runtime: run, doctor ----------------------------------------------------

# ---- models: models export, generate, embed --------------------------------


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
