"""The click group every ``anec`` command runs in: errors become messages and exit codes.

:class:`AnecGroup` installs anec's signal handlers (:mod:`anec.signals`) before a command
runs, renders an :class:`~anec.diagnostics.AnecError` (exit 1), an operating system error
(exit 1) or any other exception as a short bug report (exit :data:`EXIT_INTERNAL`, the
traceback only on request), lets a signal end the process as the signal would, and lists
each command with its whole first sentence in ``--help``.
"""

from __future__ import annotations

import os

import click

from anec import __version__, signals
from anec.diagnostics import AnecError

EXIT_INTERNAL = 3
TRACEBACK_ENV = "ANEC_TRACEBACK"


class AnecGroup(click.Group):
    """A click group that renders AnecError, and any other exception as a bug report,
    instead of a traceback. ``anec`` and its subgroup ``anec models`` are AnecGroups."""

    def invoke(self, ctx: click.Context):  # noqa: D102
        signals.install_handlers(sigint=True)
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
            interrupt = interrupt_in(e)
            if interrupt is not None:  # a signal, not a bug: Ctrl-C's "Aborted!", or its exit status
                raise interrupt from None
            internal_error(ctx, e)
            ctx.exit(EXIT_INTERNAL)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
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


def interrupt_in(e: BaseException) -> BaseException | None:
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


def internal_error(ctx: click.Context, e: BaseException) -> None:
    """Print the bug report of exception ``e`` (with its traceback on request)."""
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
