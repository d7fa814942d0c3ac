"""Shared helpers of the acceptance tests: the IR corpus and how to run the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from anec.cli import main

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ACCEPTANCE_IR = sorted((HERE / "ir").glob("*.ir"))
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))
CORPUS = ACCEPTANCE_IR + EXAMPLES
"""Every IR file a user could have written: ours (odd but valid) and the shipped examples."""


def cli(*args: str, input: str | None = None):
    """Run ``anec ARGS`` in-process; exceptions other than SystemExit propagate (tracebacks fail)."""
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def cli_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m anec.cli ARGS`` as a user would, in a subprocess."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "anec.cli", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)
