"""The ``anec`` command line: the ``main`` group and the commands it holds.

Exit codes: 0 success; 1 user error (an :class:`~anec.diagnostics.AnecError`,
rendered as ``file:line:col: error: ...`` on stderr, or an operating system
error such as a full disk); 2 usage error; 3 internal error: a bug in anec,
reported as a short message with the anec version (the Python traceback only
with ``anec --traceback`` or ``ANEC_TRACEBACK=1``); 128 + N after signal N
(SIGTERM, SIGHUP), once temporary files and runtimes are cleaned up. No input
makes anec print a Python traceback. The commands live by what they do:
:mod:`anec.cli.compile` (fmt, check, compile, mil), :mod:`anec.cli.run` (interp,
run), :mod:`anec.cli.interop` (import, export-coreml), :mod:`anec.cli.models`
(models, generate, embed), :mod:`anec.cli.train` and :mod:`anec.cli.info` (ops,
passes, constraints, doctor); :mod:`anec.cli.group` renders errors and exit codes.
Each imports what its work needs only when it runs, so ``anec --help`` stays fast.
"""

from __future__ import annotations

import click

from anec import __version__
from anec.cli import compile as compile_commands
from anec.cli import info, interop, models, run, train
from anec.cli.group import EXIT_INTERNAL, TRACEBACK_ENV, AnecGroup

__all__ = ["main", "EXIT_INTERNAL"]


@click.group(cls=AnecGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="anec")
@click.option("--traceback", is_flag=True, help=f"Print the Python traceback of an internal error "
                                                 f"(also {TRACEBACK_ENV}=1).")
def main(traceback: bool) -> None:
    """anec: compile, check and run models on the Apple Neural Engine."""


for _command in (compile_commands.fmt_cmd, compile_commands.check_cmd, compile_commands.compile_cmd,
                 compile_commands.mil_cmd, run.interp_cmd, run.run_cmd, interop.import_cmd, interop.export_coreml_cmd,
                 models.models_group, models.generate_cmd, models.embed_cmd, train.train_cmd,
                 info.ops_cmd, info.passes_cmd, info.constraints_cmd, info.doctor_cmd):
    main.add_command(_command)
del _command
